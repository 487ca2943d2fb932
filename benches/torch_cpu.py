#!/usr/bin/env python3
"""Companion of `benches/cpu.rs`: times torch.nn.LSTM / torch.nn.GRU on the CPU at the same
sizes, with `torch.set_num_threads` equal to the crate's thread count, and writes
target/criterion/torch_cpu.json for `benches/ratios.py`.

Run on the same machine, right after (or before) `cargo bench --bench cpu`:

    RAYON_NUM_THREADS=2 cargo bench --bench cpu
    python3 benches/torch_cpu.py --threads 2
    python3 benches/ratios.py

Sizes (f32, I = H; see `benches/cpu.rs`): H256 B32 T50 and H512 B64 T50 (1 layer, LSTM and
GRU), a 2-layer bidirectional LSTM at H256 B32 T100, and B = 1, T = 10 000, H = 32 (LSTM and
GRU). Each is timed for the forward under `no_grad` and for a training step (forward +
backward of sum(y)), as the median of repeated runs after warm-up.
"""

import argparse
import json
import os
import time

import torch

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "target", "criterion", "torch_cpu.json")

# (name, mode, hidden, batch, seq, layers, bidirectional): must match benches/cpu.rs.
CONFIGS = [
    ("lstm_H256_B32_T50", "lstm", 256, 32, 50, 1, False),
    ("gru_H256_B32_T50", "gru", 256, 32, 50, 1, False),
    ("lstm_H512_B64_T50", "lstm", 512, 64, 50, 1, False),
    ("gru_H512_B64_T50", "gru", 512, 64, 50, 1, False),
    ("lstm_L2_bi_H256_B32_T100", "lstm", 256, 32, 100, 2, True),
    ("lstm_H32_B1_T10000", "lstm", 32, 1, 10000, 1, False),
    ("gru_H32_B1_T10000", "gru", 32, 1, 10000, 1, False),
]


def median_ms(fn, min_time=2.0, min_iters=5, warmup=2):
    for _ in range(warmup):
        fn()
    times = []
    start_all = time.perf_counter()
    while len(times) < min_iters or time.perf_counter() - start_all < min_time:
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
        if len(times) >= 200:
            break
    times.sort()
    return times[len(times) // 2]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=int(os.environ.get("RAYON_NUM_THREADS", os.cpu_count())))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    results = {"torch": torch.__version__, "threads": args.threads, "configs": {}}
    for name, mode, h, batch, seq, layers, bi in CONFIGS:
        cls = torch.nn.LSTM if mode == "lstm" else torch.nn.GRU
        rnn = cls(h, h, num_layers=layers, bidirectional=bi, batch_first=True)
        x = torch.randn(batch, seq, h)

        def fwd():
            with torch.no_grad():
                rnn(x)

        def train():
            xg = x.detach().requires_grad_()
            y, _ = rnn(xg)
            y.sum().backward()

        results["configs"][name] = {"fwd": median_ms(fwd), "train": median_ms(train)}
        print(name, results["configs"][name], flush=True)
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump(results, f, indent=1)
    print("wrote", OUT)


if __name__ == "__main__":
    main()
