#!/usr/bin/env python3
"""Companion of `benches/step.rs`: times ONNX Runtime's one-step LSTM decoding on the CPU at
the same sizes (I = H = 256, one layer, f32, batch 1 and 8), with `intra_op_num_threads`
equal to the crate's thread count.

The model is one ONNX `LSTM` node (no exporter, built with `onnx.helper` as in
`benches/ort_cpu.py`) with T = 1: inputs `X [1, B, H]`, `initial_h` and `initial_c`
`[1, B, H]`, random weights and biases; outputs `Y_h` and `Y_c`, the state the next step
reads (for T = 1 the output `Y` is `Y_h`, so it is not asked for). That is what a
decoder running an exported LSTM one token at a time calls, the equivalent of the crate's
prepared `step`.

The time is the median over 50 rounds of the mean time of 100 `run` calls in a row, after a
second of warm-up, in microseconds (`peer_common.median_us`, as `benches/torch_step.py`).
Run on the same cores right after the Rust bench:

    RAYON_NUM_THREADS=2 taskset -c 0,1 cargo bench --bench step
    taskset -c 0,1 python3 benches/torch_step.py --threads 2
    taskset -c 0,1 python3 benches/ort_step.py --threads 2

Needs `pip install onnx onnxruntime numpy`.
"""

import argparse
import os

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from peer_common import median_us, ort_session

H = 256


def model(batch, rng):
    """The ONNX graph of one step, random weights and biases."""
    scale = 1.0 / np.sqrt(H)
    w = rng.uniform(-scale, scale, (1, 4 * H, H)).astype(np.float32)
    r = rng.uniform(-scale, scale, (1, 4 * H, H)).astype(np.float32)
    b = rng.uniform(-scale, scale, (1, 8 * H)).astype(np.float32)
    inits = [numpy_helper.from_array(a, n) for a, n in zip([w, r, b], ["W", "R", "B"])]
    # Inputs by position: X, W, R, B, sequence_lens (none), initial_h, initial_c.
    node = helper.make_node(
        "LSTM", ["X", "W", "R", "B", "", "h0", "c0"], ["", "Y_h", "Y_c"], hidden_size=H
    )
    state = [1, batch, H]
    return helper.make_graph(
        [node],
        "lstm_step",
        [
            helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, batch, H]),
            helper.make_tensor_value_info("h0", TensorProto.FLOAT, state),
            helper.make_tensor_value_info("c0", TensorProto.FLOAT, state),
        ],
        [
            helper.make_tensor_value_info("Y_h", TensorProto.FLOAT, state),
            helper.make_tensor_value_info("Y_c", TensorProto.FLOAT, state),
        ],
        inits,
    )


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=int(os.environ.get("RAYON_NUM_THREADS", os.cpu_count())))
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print(f"onnxruntime {ort.__version__}, {args.threads} threads, H = {H}, f32")
    for batch in [1, 8]:
        sess = ort_session(model(batch, rng), args.threads)
        feeds = {
            name: rng.standard_normal((1, batch, H)).astype(np.float32)
            for name in ["X", "h0", "c0"]
        }
        print(f"B{batch} lstm_step {median_us(lambda: sess.run(['Y_h', 'Y_c'], feeds)):.1f} us")


if __name__ == "__main__":
    main()
