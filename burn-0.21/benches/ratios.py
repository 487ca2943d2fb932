#!/usr/bin/env python3
"""Prints the CPU ratio table from one run of `cargo bench --bench cpu`,
`benches/torch_cpu.py` and `benches/ort_cpu.py`: per backend, configuration and pass, the
fused op's time, PyTorch's, ONNX Runtime's (inference only) and burn-nn's, the ratios
fused / PyTorch, fused / ONNX Runtime and fused / the faster of the two (1.00 = parity,
lower is better), burn-nn / fused (higher is better), and the peak heap of one training
step, fused / burn-nn.

Every time is a median, as the companions report theirs (criterion's estimate of the
median of its samples; its mean is pulled up by the slow samples of a busy or bimodal host,
the peers' medians are not). Criterion's results are read from `$CARGO_TARGET_DIR/criterion` when that is set, else
from `target/criterion`; the companions' JSON files from `target/criterion`.
"""

import json
import os
import sys

here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "target", "criterion")
root = os.path.join(os.environ["CARGO_TARGET_DIR"], "criterion") if os.environ.get("CARGO_TARGET_DIR") else here


def median_ms(*parts):
    path = os.path.join(root, *parts, "new", "estimates.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)["median"]["point_estimate"] / 1e6


def load(name):
    path = os.path.join(here, name)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def fmt(v, spec=".1f"):
    return "—" if v is None else format(v, spec)


def main():
    # criterion stores group "cpu/ndarray/lstm_H256_B32_T50" as "cpu_ndarray_lstm_H256_B32_T50".
    groups = sorted(g for g in os.listdir(root) if g.startswith("cpu_") and os.path.isdir(os.path.join(root, g))) if os.path.isdir(root) else []
    if not groups:
        sys.exit(f"no results under {root}: run `cargo bench --bench cpu` first")
    torch = load("torch_cpu.json") or {"configs": {}}
    onnx = load("ort_cpu.json") or {"configs": {}}
    heap = load("cpu_heap.json") or {}
    if torch.get("torch"):
        print(f"PyTorch {torch['torch']}, {torch['threads']} threads")
    if onnx.get("onnxruntime"):
        print(f"ONNX Runtime {onnx['onnxruntime']}, {onnx['threads']} threads")
    print("| backend | config | pass | fused (ms) | PyTorch (ms) | ORT (ms) | burn-nn (ms) | fused / PyTorch | fused / ORT | fused / best peer | burn-nn / fused | peak heap fused / burn-nn (MiB) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for group in groups:
        backend, config = group[len("cpu_"):].split("_", 1)
        for pas in ["fwd", "train", "train_data"]:
            fused = median_ms(group, "fused", pas)
            nn = median_ms(group, "burn_nn", pas)
            pt = torch["configs"].get(config, {}).get(pas)
            ox = onnx["configs"].get(config, {}).get(pas)
            if fused is None:
                continue
            vs_torch = fused / pt if pt else None
            vs_ort = fused / ox if ox else None
            peers = [v for v in (pt, ox) if v]
            vs_best = fused / min(peers) if peers else None
            vs_nn = nn / fused if nn else None
            mem = ""
            if pas == "train":
                hf, hn = heap.get(f"{backend}/{config}/fused"), heap.get(f"{backend}/{config}/burn_nn")
                mem = f"{fmt(hf)} / {fmt(hn)}"
            print(
                f"| {backend} | {config} | {pas} | {fmt(fused, '.2f')} | {fmt(pt, '.2f')} | {fmt(ox, '.2f')} | {fmt(nn, '.2f')} "
                f"| {fmt(vs_torch, '.2f')} | {fmt(vs_ort, '.2f')} | {fmt(vs_best, '.2f')} | {fmt(vs_nn, '.1f')}{'x' if vs_nn else ''} | {mem} |"
            )


if __name__ == "__main__":
    main()
