#!/usr/bin/env python3
"""Ratio table of the GPU benchmark: for every row and every algorithm the crate ran, the
crate's time divided by PyTorch's (1.00 = parity, below 1 = faster than PyTorch), and, on
the rows that have them, the reference path's and burn-nn's time divided by the crate's.

Reads criterion's results of `cargo bench --features cuda --bench gpu`,
target/criterion/cuda_algorithms.json (which algorithm cuDNN ran: a persistent algorithm
that refuses a shape falls back to the standard one) and target/criterion/torch_rnn.json
from `python3 benches/torch_rnn.py`. Prints a Markdown table, then the median and worst
ratio of each set of rows."""

import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ratios import mean_ms, root  # noqa: E402  (same criterion layout as the CPU benches)

PATHS = ["cudnn", "cudnn_persist_static", "cudnn_persist_static_small_h", "cudnn_persist_dynamic", "cudnn_auto"]


def fmt(v, unit=""):
    return "—" if v is None else f"{v:.2f}{unit}"


def ratio(a, b):
    return None if a is None or b is None else a / b


def row_set(name):
    if name.endswith("_varlen"):
        return "variable lengths (vs pack_padded_sequence)"
    if "_T1000_" in name:
        return "T = 1000"
    if "_L1_" in name:
        return "small batches, 1 layer" + (", f16" if name.endswith("_f16") else ", f32")
    return "issue #13 sizes" + (", f16" if name.endswith("_f16") else ", f32")


def load(name):
    path = os.path.join(root, name)
    return json.load(open(path)) if os.path.exists(path) else {}


def main():
    groups = sorted(g for g in os.listdir(root) if g.startswith("cuda_")) if os.path.isdir(root) else []
    if not groups:
        sys.exit(f"no results under {root}: run `cargo bench --features cuda --bench gpu` first")
    torch, ran = load("torch_rnn.json"), load("cuda_algorithms.json")
    if torch:
        print(f"PyTorch {torch.get('torch')}, cuDNN {torch.get('cudnn')}, {torch.get('device')}\n")
    print("| config | pass | algorithm set (ran) | crate (ms) | PyTorch (ms) | crate / PyTorch | reference / crate | burn-nn / crate |")
    print("|---|---|---|---|---|---|---|---|")
    sets = {}
    for group in groups:
        name = group[len("cuda_"):]
        for path in PATHS:
            for pass_ in ["fwd", "fwdbwd"]:
                ours = mean_ms(group, path, pass_)
                if ours is None:
                    continue
                pt = torch.get(name, {}).get(pass_)
                ref = mean_ms(group, "reference", pass_) if path == "cudnn" else None
                nn = mean_ms(group, "burn_nn", pass_) if path == "cudnn" else None
                algorithm = "standard" if path == "cudnn" else path[len("cudnn_"):]
                did = ran.get(name, {}).get(f"{path}/{pass_}", "?")
                r = ratio(ours, pt)
                if r is not None:
                    sets.setdefault((row_set(name), algorithm), []).append(r)
                print(
                    f"| {name} | {pass_} | {algorithm} ({did}) | {fmt(ours)} | {fmt(pt)} | {fmt(r)} "
                    f"| {fmt(ratio(ref, ours), 'x')} | {fmt(ratio(nn, ours), 'x')} |"
                )
    print()
    print("| row set | algorithm set | rows | median crate / PyTorch | worst | rows at most 1.02 |")
    print("|---|---|---|---|---|---|")
    for (rows, algorithm), ratios in sorted(sets.items()):
        print(
            f"| {rows} | {algorithm} | {len(ratios)} | {statistics.median(ratios):.2f} | {max(ratios):.2f} "
            f"| {sum(r <= 1.02 for r in ratios)} |"
        )


if __name__ == "__main__":
    main()
