#!/usr/bin/env python3
"""Ratio table of the GPU benchmark: cuDNN path vs PyTorch (target: within 5%), vs the
reference path on Cuda, and vs burn-nn on Cuda (target: at least 20x). Reads criterion's
results of `cargo bench --features cuda --bench gpu` and target/criterion/torch_rnn.json
from `python3 benches/torch_rnn.py`."""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ratios import mean_ms, root  # noqa: E402  (same criterion layout as the CPU benches)


def fmt(v, unit=""):
    return "—" if v is None else f"{v:.2f}{unit}"


def main():
    groups = sorted(g for g in os.listdir(root) if g.startswith("cuda_")) if os.path.isdir(root) else []
    if not groups:
        sys.exit(f"no results under {root}: run `cargo bench --features cuda --bench gpu` first")
    torch_path = os.path.join(root, "torch_rnn.json")
    torch = json.load(open(torch_path)) if os.path.exists(torch_path) else {}
    print("| config | pass | cuDNN (ms) | PyTorch (ms) | cuDNN / PyTorch | reference / cuDNN | burn-nn / cuDNN |")
    print("|---|---|---|---|---|---|---|")
    for group in groups:
        name = group[len("cuda_"):]
        for pass_ in ["fwd", "fwdbwd"]:
            ours = mean_ms(group, "cudnn", pass_)
            ref = mean_ms(group, "reference", pass_)
            nn = mean_ms(group, "burn_nn", pass_)
            pt = torch.get(name, {}).get(pass_)
            ratio = lambda a, b: None if a is None or b is None else a / b
            print(
                f"| {name} | {pass_} | {fmt(ours)} | {fmt(pt)} | {fmt(ratio(ours, pt), 'x')} "
                f"| {fmt(ratio(ref, ours), 'x')} | {fmt(ratio(nn, ours), 'x')} |"
            )


if __name__ == "__main__":
    main()
