#!/usr/bin/env python3
"""The CPU benchmark of the two lines side by side: for every row both ran, the 0.22 line's
time divided by the 0.21 line's (1.00 = same speed), and each line's fused / burn-nn ratio.

Reads criterion's estimates from target/criterion (the 0.21 line, repository root) and
burn-0.22/target/criterion; run both `cargo bench --bench cpu` first, in one sitting, on
the same pinned cores (the module docs of benches/cpu.rs). Prints a Markdown table.

`--fused-only`: leave out the burn-nn column, for a sitting that ran only the fused rows
(`cargo bench --bench cpu -- /fused/`), whose burn-nn estimates on disk are older."""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOTS = {
    "0.21": os.path.join(HERE, "..", "..", "target", "criterion"),
    "0.22": os.path.join(HERE, "..", "target", "criterion"),
}


def mean_ms(root, group, impl, pass_):
    path = os.path.join(root, group, impl, pass_, "new", "estimates.json")
    try:
        with open(path) as f:
            return json.load(f)["mean"]["point_estimate"] / 1e6
    except (OSError, KeyError, ValueError):
        return None


def main():
    rows = []
    base = ROOTS["0.22"]
    groups = sorted(g for g in os.listdir(base) if g.startswith("cpu_")) if os.path.isdir(base) else []
    for group in groups:
        # criterion writes the group `cpu/<backend>/<config>` as the folder `cpu_<backend>_<config>`
        _, backend, config = group.split("_", 2)
        for pass_ in ["fwd", "train", "train_data"]:
            t = {line: mean_ms(root, group, "fused", pass_) for line, root in ROOTS.items()}
            nn = {line: mean_ms(root, group, "burn_nn", pass_) for line, root in ROOTS.items()}
            if t["0.22"] is None:
                continue
            rows.append((backend, config, pass_, t, nn))
    fused_only = "--fused-only" in sys.argv[1:]
    if fused_only:
        print("| backend | config | pass | 0.21 fused (ms) | 0.22 fused (ms) | 0.22 / 0.21 |")
        print("|---|---|---|---|---|---|")
    else:
        print("| backend | config | pass | 0.21 fused (ms) | 0.22 fused (ms) | 0.22 / 0.21 | burn-nn 0.22 / fused 0.22 |")
        print("|---|---|---|---|---|---|---|")
    ratios = []
    for backend, config, pass_, t, nn in rows:
        r = t["0.22"] / t["0.21"] if t["0.21"] else None
        if r:
            ratios.append(r)
        fmt = lambda v: "—" if v is None else f"{v:.2f}"
        speedup = nn["0.22"] / t["0.22"] if nn["0.22"] else None
        line = f"| {backend} | {config} | {pass_} | {fmt(t['0.21'])} | {fmt(t['0.22'])} | {fmt(r)} |"
        if not fused_only:
            line += f" {fmt(speedup)}{'x' if speedup else ''} |"
        print(line)
    if ratios:
        ratios.sort()
        print(f"\n0.22 / 0.21 over {len(ratios)} rows: median {ratios[len(ratios) // 2]:.3f}, worst {ratios[-1]:.3f}, best {ratios[0]:.3f}")


if __name__ == "__main__":
    main()
