#!/usr/bin/env python3
"""Companion of `benches/gpu.rs`: times torch.nn.LSTM / torch.nn.GRU on cuDNN for the same
rows (batch_first, I = H, TF32 off; `fwd` is a forward under no_grad, `fwdbwd` a forward
and the backward of sum(y)), and writes target/criterion/torch_rnn.json for
`benches/cuda_ratios.py`:

- H in {256, 1024}, B in {32, 128}, T = 100, 2 layers, uni/bidirectional, f32 and f16;
- H in {256, 512}, B in {1, 8}, T = 100, 1 layer, unidirectional, f32 and f16 (PyTorch
  picks its algorithm itself: persistent kernels for some f16 shapes, see `get_algo` in
  its aten/src/ATen/native/cudnn/RNN.cpp);
- H in {256, 1024}, B = 32, T = 1000, 2 layers, unidirectional, f32;
- H in {256, 1024}, B = 64, T = 100, 2 layers, uni/bidirectional, f32, lengths uniform in
  [T/4, T] (splitmix64, seed 42: the same lengths as gpu.rs), through
  pack_padded_sequence(enforce_sorted=False) and pad_packed_sequence, both timed.

Run on the same GPU machine as `cargo bench --features cuda --bench gpu`. An optional
argument is a regular expression: only rows whose name matches run (e.g. '_L1_')."""

import json
import os
import re
import sys
import time

import torch
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "target", "criterion", "torch_rnn.json")
MASK = (1 << 64) - 1


def lengths(batch, seq, seed=42):
    """Uniform in [seq // 4, seq], splitmix64: `lengths` in benches/gpu.rs."""
    low, state, out = seq // 4, seed, []
    for _ in range(batch):
        state = (state + 0x9E3779B97F4A7C15) & MASK
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        z ^= z >> 31
        out.append(low + z % (seq - low + 1))
    return out


def rows():
    """(name, mode, H, B, T, layers, bidirectional, f16, varlen), named as in gpu.rs."""
    out = []

    def row(mode, h, b, t, layers, bi, f16=False, varlen=False):
        name = f"{mode}_H{h}_B{b}_T{t}_L{layers}_{'bi' if bi else 'uni'}" + ("_f16" if f16 else "") + ("_varlen" if varlen else "")
        out.append((name, mode, h, b, t, layers, bi, f16, varlen))

    for f16 in [False, True]:
        for mode in ["lstm", "gru"]:
            for h in [256, 1024]:
                for b in [32, 128]:
                    for bi in [False, True]:
                        row(mode, h, b, 100, 2, bi, f16)
    for f16 in [False, True]:
        for mode in ["lstm", "gru"]:
            for h in [256, 512]:
                for b in [1, 8]:
                    row(mode, h, b, 100, 1, False, f16)
    for mode in ["lstm", "gru"]:
        for h in [256, 1024]:
            row(mode, h, 32, 1000, 2, False)
            for bi in [False, True]:
                row(mode, h, 64, 100, 2, bi, varlen=True)
    return out


def median_ms(fn, iters=20, warmup=5):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1e3)
    times.sort()
    return times[len(times) // 2]


def main():
    if not torch.cuda.is_available():
        sys.exit("no CUDA device: nothing to benchmark")
    only = re.compile(sys.argv[1]) if len(sys.argv) > 1 else None
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.benchmark = False
    dev = torch.device("cuda")
    results = json.load(open(OUT)) if os.path.exists(OUT) else {}
    results.update({"torch": torch.__version__, "cudnn": torch.backends.cudnn.version(), "device": torch.cuda.get_device_name()})
    for name, mode, h, b, t, layers, bi, f16, varlen in rows():
        if only is not None and not only.search(name):
            continue
        cls = torch.nn.LSTM if mode == "lstm" else torch.nn.GRU
        dtype = torch.float16 if f16 else torch.float32
        rnn = cls(h, h, num_layers=layers, bidirectional=bi, batch_first=True).to(dev, dtype)
        x = torch.randn(b, t, h, device=dev, dtype=dtype)
        lens = torch.tensor(lengths(b, t)) if varlen else None

        def run(xin):
            if lens is None:
                return rnn(xin)[0]
            packed = pack_padded_sequence(xin, lens, batch_first=True, enforce_sorted=False)
            return pad_packed_sequence(rnn(packed)[0], batch_first=True, total_length=t)[0]

        def fwd():
            with torch.no_grad():
                run(x)

        def fwdbwd():
            run(x.detach().requires_grad_()).sum().backward()

        results[name] = {"fwd": median_ms(fwd), "fwdbwd": median_ms(fwdbwd)}
        print(name, results[name], flush=True)
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump(results, f, indent=1)
    print("wrote", OUT)


if __name__ == "__main__":
    main()
