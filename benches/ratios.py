#!/usr/bin/env python3
"""Prints the ratio table of the criterion benches: burn-nn's time / the fused op's time,
per backend, size and mode. Run after `cargo bench --bench forward`."""

import json
import os
import sys

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "target", "criterion")


def mean_ms(group, impl, mode):
    path = os.path.join(root, group, impl, mode, "new", "estimates.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)["mean"]["point_estimate"] / 1e6


def main():
    bench = sys.argv[1] if len(sys.argv) > 1 else "forward"
    # criterion stores group "forward/ndarray/H256_B32_T50" as "forward_ndarray_H256_B32_T50".
    groups = sorted(g for g in os.listdir(root) if g.startswith(bench + "_")) if os.path.isdir(root) else []
    if not groups:
        sys.exit(f"no results under {root}: run `cargo bench --bench {bench}` first")
    print("| backend | size | mode | fused (ms) | burn-nn (ms) | burn-nn / fused |")
    print("|---|---|---|---|---|---|")
    for group in groups:
        backend, size = group[len(bench) + 1:].split("_", 1)
        for mode in ["lstm", "gru"]:
            fused, nn = mean_ms(group, "fused", mode), mean_ms(group, "burn_nn", mode)
            if fused and nn:
                print(f"| {backend} | {size} | {mode} | {fused:.1f} | {nn:.1f} | {nn / fused:.2f}x |")


if __name__ == "__main__":
    main()
