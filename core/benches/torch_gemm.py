#!/usr/bin/env python3
"""Companion of `benches/gemm_shapes.rs`: PyTorch's CPU sgemm (`torch.mm`, oneDNN/MKL) at
the same shapes, `C[m, n] = A[m, k] · B[n, k]^T` in f32, with `torch.set_num_threads`
threads, and the rate of each in GFLOP/s next to the `gemm` crate's (read from
`target/criterion/gemm_shapes_*`, so run the Rust bench first, on the same cores):

    RAYON_NUM_THREADS=2 cargo bench --bench gemm_shapes
    python3 benches/torch_gemm.py --threads 2
"""

import argparse
import json
import os
import time

import torch

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "target", "criterion")

# (name, m, k, n): must match SHAPES in benches/gemm_shapes.rs.
SHAPES = [
    ("step_H256_B32", 32, 256, 1024),
    ("step_H512_B64", 64, 512, 2048),
    ("step_H256_B1", 1, 256, 1024),
    ("projection_H256_B32_T50", 1600, 256, 1024),
    ("dW_H256_B32_T50", 1024, 1600, 256),
]


def median_s(fn, min_time=1.0, warmup=20):
    for _ in range(warmup):
        fn()
    times = []
    start = time.perf_counter()
    while time.perf_counter() - start < min_time or len(times) < 20:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2]


def crate_s(name, variant):
    path = os.path.join(ROOT, f"gemm_shapes_{name}", "gemm", variant, "new", "estimates.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)["mean"]["point_estimate"] / 1e9


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    variant = "rayon" if args.threads > 1 else "1_thread"
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; gemm crate: {variant}")
    print("| shape | m, k, n | torch.mm (µs) | gemm (µs) | torch GFLOP/s | gemm GFLOP/s | gemm / torch time |")
    print("|---|---|---|---|---|---|---|")
    g = torch.Generator().manual_seed(0)
    for name, m, k, n in SHAPES:
        a = torch.rand(m, k, generator=g)
        b = torch.rand(n, k, generator=g)
        out = torch.empty(m, n)
        t = median_s(lambda: torch.mm(a, b.t(), out=out))
        flop = 2.0 * m * n * k
        c = crate_s(name, variant)
        crate = f"{c * 1e6:.1f} | " if c else "— | "
        rate = f"{flop / c / 1e9:.1f} | {c / t:.2f}" if c else "— | —"
        print(f"| {name} | {m}, {k}, {n} | {t * 1e6:.1f} | {crate}{flop / t / 1e9:.1f} | {rate} |")


if __name__ == "__main__":
    main()
