"""What the Python companions of the crate's benchmarks share: the CPU configurations of
`benches/cpu.rs`, how a peer is timed, and where results go.

Imported by `benches/torch_cpu.py`, `benches/ort_cpu.py`, `benches/torch_step.py` and
`benches/ort_step.py` (run as `python3 benches/<script>.py`: Python puts `benches/` on the
import path).
"""

import json
import os
import time

# Where the companions write their results, next to criterion's.
RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "target", "criterion")

# (name, mode, hidden, batch, seq, layers, bidirectional): must match benches/cpu.rs.
CPU_CONFIGS = [
    ("lstm_H256_B32_T50", "lstm", 256, 32, 50, 1, False),
    ("gru_H256_B32_T50", "gru", 256, 32, 50, 1, False),
    ("lstm_H512_B64_T50", "lstm", 512, 64, 50, 1, False),
    ("gru_H512_B64_T50", "gru", 512, 64, 50, 1, False),
    ("lstm_L2_bi_H256_B32_T100", "lstm", 256, 32, 100, 2, True),
    ("lstm_H32_B1_T10000", "lstm", 32, 1, 10000, 1, False),
    ("gru_H32_B1_T10000", "gru", 32, 1, 10000, 1, False),
]


def median_ms(fn, min_time=2.0, min_iters=5, warmup=2):
    """The median of repeated timings of `fn()` in milliseconds, after `warmup` calls: at
    least `min_iters` runs and `min_time` seconds, at most 200 runs."""
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


def median_us(fn, rounds=50, calls=100, warmup_s=1.0):
    """The median over `rounds` rounds of the mean time of `calls` calls of `fn()` in a
    row, in microseconds, after `warmup_s` seconds of calls: for calls of tens of
    microseconds, where one call is too short to time alone (`median_ms`)."""
    end = time.perf_counter() + warmup_s
    while time.perf_counter() < end:
        fn()
    means = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        means.append((time.perf_counter() - start) / calls * 1e6)
    means.sort()
    return means[len(means) // 2]


def ort_session(graph, threads):
    """`graph` as a checked ONNX model (opset 14) in an ONNX Runtime CPU session: `threads`
    intra-op threads, one inter-op thread, sequential execution, every graph optimisation.
    (ONNX and ONNX Runtime are imported here, so that the PyTorch companions need neither.)"""
    import onnx
    import onnxruntime as ort
    from onnx import helper

    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    onnx.checker.check_model(m)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(m.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def selected(name, only):
    """Whether configuration `name` is in `only` (comma-separated substrings; None: all)."""
    return only is None or any(s in name for s in only.split(","))


def write(path, results):
    """Writes `results` as JSON to `path`, merging the configurations of an earlier run
    that this run did not measure (partial runs with `--only`)."""
    if os.path.exists(path):
        with open(path) as f:
            old = json.load(f).get("configs", {})
        results["configs"] = {**old, **results["configs"]}
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(results, f, indent=1)
    print("wrote", path)
