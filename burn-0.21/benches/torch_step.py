#!/usr/bin/env python3
"""Companion of `benches/step.rs`: times PyTorch's one-step LSTM decoding on the CPU at the
same sizes (I = H = 256, one layer, f32, batch 1 and 8), with `torch.set_num_threads` equal
to the crate's thread count, under `no_grad`:

- `lstm_t1`: `torch.nn.LSTM` with a `[batch, 1, H]` input and the previous `(h, c)`, what
  the fused `forward` with T = 1 does;
- `cell`: `torch.nn.LSTMCell` with the previous `(h, c)`, what a prepared `step` does.

Each is the median over 50 rounds of the mean time of 100 calls in a row, after a second of
warm-up, in microseconds (`peer_common.median_us`). Run on the same cores right after the
Rust bench, with ONNX Runtime's companion (`benches/ort_step.py`):

    RAYON_NUM_THREADS=2 taskset -c 0,1 cargo bench --bench step
    taskset -c 0,1 python3 benches/torch_step.py --threads 2
    taskset -c 0,1 python3 benches/ort_step.py --threads 2
"""

import argparse
import os

import torch

from peer_common import median_us

H = 256


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=int(os.environ.get("RAYON_NUM_THREADS", os.cpu_count())))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    lstm = torch.nn.LSTM(H, H, batch_first=True)
    cell = torch.nn.LSTMCell(H, H)
    print(f"torch {torch.__version__}, {args.threads} threads, H = {H}, f32")
    for batch in [1, 8]:
        x = torch.randn(batch, H)
        h, c = torch.randn(batch, H), torch.randn(batch, H)

        def lstm_t1():
            with torch.no_grad():
                lstm(x.unsqueeze(1), (h.unsqueeze(0), c.unsqueeze(0)))

        def cell_step():
            with torch.no_grad():
                cell(x, (h, c))

        print(f"B{batch} lstm_t1 {median_us(lstm_t1):.1f} us")
        print(f"B{batch} cell {median_us(cell_step):.1f} us")


if __name__ == "__main__":
    main()
