#!/usr/bin/env python3
"""Companion of `benches/gpu.rs`: times torch.nn.LSTM / torch.nn.GRU on cuDNN for the same
sizes (I = H in {256, 1024}, B in {32, 128}, T = 100, 2 layers, uni/bidirectional, f32,
TF32 off; forward under no_grad, and forward + backward of sum(y)), and writes
target/criterion/torch_rnn.json for `benches/cuda_ratios.py`.

Run on the same GPU machine as `cargo bench --features cuda --bench gpu`."""

import json
import os
import sys
import time

import torch

SEQ, LAYERS = 100, 2
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "target", "criterion", "torch_rnn.json")


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
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.benchmark = False
    dev = torch.device("cuda")
    results = {"torch": torch.__version__, "cudnn": torch.backends.cudnn.version(), "device": torch.cuda.get_device_name()}
    for mode, cls in [("lstm", torch.nn.LSTM), ("gru", torch.nn.GRU)]:
        for h in [256, 1024]:
            for batch in [32, 128]:
                for bi in [False, True]:
                    name = f"{mode}_H{h}_B{batch}_T{SEQ}_L{LAYERS}_{'bi' if bi else 'uni'}"
                    rnn = cls(h, h, num_layers=LAYERS, bidirectional=bi, batch_first=True).to(dev)
                    x = torch.randn(batch, SEQ, h, device=dev)

                    def fwd():
                        with torch.no_grad():
                            rnn(x)

                    def fwdbwd():
                        xg = x.detach().requires_grad_()
                        y, _ = rnn(xg)
                        y.sum().backward()

                    results[name] = {"fwd": median_ms(fwd), "fwdbwd": median_ms(fwdbwd)}
                    print(name, results[name], flush=True)
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump(results, f, indent=1)
    print("wrote", OUT)


if __name__ == "__main__":
    main()
