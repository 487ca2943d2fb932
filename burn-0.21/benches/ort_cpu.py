#!/usr/bin/env python3
"""Companion of `benches/cpu.rs`: times ONNX Runtime's CPU LSTM and GRU at the same sizes,
inference only (ONNX Runtime does not train), with `intra_op_num_threads` equal to the
crate's thread count, and writes target/criterion/ort_cpu.json for `benches/ratios.py`.

The model is built with `onnx.helper`, no exporter: one ONNX `LSTM` or `GRU` node per layer
(GRU with `linear_before_reset = 1`, the cuDNN/PyTorch form the crate computes), random
weights, sequence-major input `[T, B, I]` (ONNX's native layout). A stacked or
bidirectional model joins layers as an exporter would: `Y [T, D, B, H]` → Transpose →
Reshape `[T, B, D·H]`. Run on the same machine, in the same session as the crate's bench:

    RAYON_NUM_THREADS=2 cargo bench --bench cpu
    python3 benches/torch_cpu.py --threads 2
    python3 benches/ort_cpu.py --threads 2
    python3 benches/ratios.py

Needs `pip install onnx onnxruntime numpy`.
"""

import argparse
import os

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from peer_common import CPU_CONFIGS, RESULTS, median_ms, ort_session, selected, write

OUT = os.path.join(RESULTS, "ort_cpu.json")

def model(mode, hidden, batch, seq, layers, bidirectional, rng):
    """The ONNX graph of the network, random weights."""
    gates = 4 if mode == "lstm" else 3
    dirs = 2 if bidirectional else 1
    scale = 1.0 / np.sqrt(hidden)
    nodes, inits = [], []
    current = "X"
    for layer in range(layers):
        d_in = hidden if layer == 0 else dirs * hidden
        w = rng.uniform(-scale, scale, (dirs, gates * hidden, d_in)).astype(np.float32)
        r = rng.uniform(-scale, scale, (dirs, gates * hidden, hidden)).astype(np.float32)
        b = rng.uniform(-scale, scale, (dirs, 2 * gates * hidden)).astype(np.float32)
        names = [f"W{layer}", f"R{layer}", f"B{layer}"]
        inits += [numpy_helper.from_array(a, n) for a, n in zip([w, r, b], names)]
        attrs = {"hidden_size": hidden, "direction": "bidirectional" if bidirectional else "forward"}
        if mode == "gru":
            attrs["linear_before_reset"] = 1
        y = f"Y{layer}"
        nodes.append(helper.make_node(mode.upper(), [current] + names, [y], **attrs))
        # [T, D, B, H] -> [T, B, D, H] -> [T, B, D*H]
        t_out, shape = f"Yt{layer}", f"shape{layer}"
        nodes.append(helper.make_node("Transpose", [y], [t_out], perm=[0, 2, 1, 3]))
        inits.append(numpy_helper.from_array(np.array([seq, batch, dirs * hidden], dtype=np.int64), shape))
        current = f"H{layer}"
        nodes.append(helper.make_node("Reshape", [t_out, shape], [current]))
    return helper.make_graph(
        nodes,
        "rnn",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [seq, batch, hidden])],
        [helper.make_tensor_value_info(current, TensorProto.FLOAT, [seq, batch, dirs * hidden])],
        inits,
    )


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=int(os.environ.get("RAYON_NUM_THREADS", os.cpu_count())))
    parser.add_argument("--only", default=None, help="comma-separated substrings of configuration names")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    results = {"onnxruntime": ort.__version__, "threads": args.threads, "configs": {}}
    for name, mode, h, batch, seq, layers, bi in CPU_CONFIGS:
        if not selected(name, args.only):
            continue
        sess = ort_session(model(mode, h, batch, seq, layers, bi, rng), args.threads)
        x = rng.standard_normal((seq, batch, h)).astype(np.float32)
        out = sess.get_outputs()[0].name
        results["configs"][name] = {"fwd": median_ms(lambda: sess.run([out], {"X": x}))}
        print(name, results["configs"][name], flush=True)
    write(OUT, results)


if __name__ == "__main__":
    main()
