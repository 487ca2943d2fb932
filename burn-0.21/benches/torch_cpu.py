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
backward of sum(y)), with `x` requiring a gradient (`train`) and without (`train_data`), as
the median of repeated runs after warm-up.
"""

import argparse
import os

import torch

from peer_common import CPU_CONFIGS, RESULTS, median_ms, selected, write

OUT = os.path.join(RESULTS, "torch_cpu.json")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=int(os.environ.get("RAYON_NUM_THREADS", os.cpu_count())))
    parser.add_argument("--only", default=None, help="comma-separated substrings of configuration names")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    results = {"torch": torch.__version__, "threads": args.threads, "configs": {}}
    for name, mode, h, batch, seq, layers, bi in CPU_CONFIGS:
        if not selected(name, args.only):
            continue
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

        def train_data():
            # x without a gradient: autograd leaves out what only x's gradient needs.
            y, _ = rnn(x)
            y.sum().backward()

        results["configs"][name] = {
            "fwd": median_ms(fwd),
            "train": median_ms(train),
            "train_data": median_ms(train_data),
        }
        print(name, results["configs"][name], flush=True)
    write(OUT, results)


if __name__ == "__main__":
    main()
