//! The fused op on Burn 0.22's CPU backends (NdArray, Flex) against burn-nn 0.22's modules
//! on the same device, in one run: inference forward and training step (forward + backward
//! of `sum(y)` on an autodiff device; the fused op's also without `x`'s gradient,
//! `train_data`, as on 0.21). The configurations and the criterion names
//! (`cpu/<backend>/<config>/<impl>/<pass>`) are the 0.21 line's `benches/cpu.rs`, so the two
//! lines compare row by row (`benches/compare_lines.py`).
//!
//! Run (in `burn-0.22/`), on pinned cores, after the 0.21 line's bench in the same sitting:
//!
//! ```sh
//! RAYON_NUM_THREADS=2 taskset -c 0,1 cargo bench --bench cpu
//! python3 benches/compare_lines.py
//! ```
//!
//! `CPU_BENCH=<substring>[,..]` and `CPU_BENCH_BACKEND=ndarray|flex` select rows, as on 0.21.
//!
//! As on 0.21, each configuration first measures the peak heap of one training step of each
//! implementation (written to `target/criterion/cpu_heap.json`; `CPU_BENCH_HEAP_ONLY=1`
//! measures only that), in the same order and before the timed training steps: the steps run
//! before a timing leave glibc's allocator in a state that moves the 2-layer training row by
//! up to 15% (docs/BENCHMARKS.md, "The 0.22 line beside the 0.21 line"), so the two lines'
//! benches run the same sequence of calls. burn-nn's training step at T = 10 000 runs only
//! with `CPU_BENCH_NN_LONG_TRAIN=1`, as on 0.21.
#![allow(deprecated)] // Burn 0.22 deprecates NdArray; the crate serves it.

use std::alloc::System;
use std::collections::BTreeMap;
use std::sync::Mutex;

use burn::nn::{BiLstm, BiLstmConfig, Gru, GruConfig, Lstm, LstmConfig};
use burn::tensor::{DType, Device, Distribution, Tensor};
use burn_fused_rnn::{FusedRnn, FusedRnnConfig, RnnMode};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use peakmem_alloc::{PeakMemAlloc, PeakMemAllocTrait, INSTRUMENTED_SYSTEM};

/// Counts heap bytes: the peak of net allocations since the last reset.
#[global_allocator]
static ALLOC: &PeakMemAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Peak heap growth (MiB) while running `f` once.
fn peak_mib<T>(f: impl FnOnce() -> T) -> f64 {
    ALLOC.reset_peak_memory();
    drop(f());
    ALLOC.get_peak_memory() as f64 / (1024.0 * 1024.0)
}

/// Peak heap per `backend/config/impl`, written to target/criterion/cpu_heap.json.
static HEAP: Mutex<BTreeMap<String, f64>> = Mutex::new(BTreeMap::new());

#[derive(Clone, Copy)]
struct Config {
    name: &'static str,
    mode: RnnMode,
    hidden: usize,
    batch: usize,
    seq: usize,
    layers: usize,
    bidirectional: bool,
}

const fn config(
    name: &'static str,
    mode: RnnMode,
    hidden: usize,
    batch: usize,
    seq: usize,
    layers: usize,
    bidirectional: bool,
) -> Config {
    Config {
        name,
        mode,
        hidden,
        batch,
        seq,
        layers,
        bidirectional,
    }
}

const CONFIGS: [Config; 7] = [
    config("lstm_H256_B32_T50", RnnMode::Lstm, 256, 32, 50, 1, false),
    config("gru_H256_B32_T50", RnnMode::Gru, 256, 32, 50, 1, false),
    config("lstm_H512_B64_T50", RnnMode::Lstm, 512, 64, 50, 1, false),
    config("gru_H512_B64_T50", RnnMode::Gru, 512, 64, 50, 1, false),
    config(
        "lstm_L2_bi_H256_B32_T100",
        RnnMode::Lstm,
        256,
        32,
        100,
        2,
        true,
    ),
    config("lstm_H32_B1_T10000", RnnMode::Lstm, 32, 1, 10_000, 1, false),
    config("gru_H32_B1_T10000", RnnMode::Gru, 32, 1, 10_000, 1, false),
];

/// burn-nn's equivalent of a configuration: a stack of `Lstm`, `BiLstm` or `Gru` layers.
enum BurnNn {
    Lstm(Vec<Lstm>),
    BiLstm(Vec<BiLstm>),
    Gru(Vec<Gru>),
}

impl BurnNn {
    fn new(c: &Config, device: &Device) -> Self {
        let h = c.hidden;
        let d = if c.bidirectional { 2 } else { 1 };
        let input = |layer: usize| if layer == 0 { h } else { d * h };
        match (c.mode, c.bidirectional) {
            (RnnMode::Lstm, false) => Self::Lstm(
                (0..c.layers)
                    .map(|l| LstmConfig::new(input(l), h, true).init(device))
                    .collect(),
            ),
            (RnnMode::Lstm, true) => Self::BiLstm(
                (0..c.layers)
                    .map(|l| BiLstmConfig::new(input(l), h, true).init(device))
                    .collect(),
            ),
            (RnnMode::Gru, false) => Self::Gru(
                (0..c.layers)
                    .map(|l| GruConfig::new(input(l), h, true).init(device))
                    .collect(),
            ),
            _ => unreachable!("no burn-nn equivalent in this bench"),
        }
    }

    fn forward(&self, mut x: Tensor<3>) -> Tensor<3> {
        match self {
            Self::Lstm(layers) => {
                for l in layers {
                    x = l.forward(x, None).0;
                }
            }
            Self::BiLstm(layers) => {
                for l in layers {
                    x = l.forward(x, None).0;
                }
            }
            Self::Gru(layers) => {
                for l in layers {
                    x = l.forward(x, None);
                }
            }
        }
        x
    }
}

fn selected(c: &Config) -> bool {
    std::env::var("CPU_BENCH").map_or(true, |f| f.split(',').any(|f| c.name.contains(f)))
}

fn fused(c: &Config, device: &Device) -> FusedRnn {
    FusedRnnConfig::new(c.mode, c.hidden, c.hidden)
        .with_num_layers(c.layers)
        .with_bidirectional(c.bidirectional)
        .init(device)
}

fn bench_backend(cr: &mut Criterion, backend: &str, device: Device) {
    if std::env::var("CPU_BENCH_BACKEND").is_ok_and(|b| b != backend) {
        return;
    }
    let train_device = device.clone().autodiff();
    for c in CONFIGS.iter().filter(|c| selected(c)) {
        let mut group = cr.benchmark_group(format!("cpu/{backend}/{}", c.name));
        group.sample_size(10);
        if c.seq * c.hidden * c.batch > 1_000_000 || c.seq > 1000 {
            group.measurement_time(std::time::Duration::from_secs(20));
        }
        let shape = [c.batch, c.seq, c.hidden];
        let random =
            |d: &Device| Tensor::<3>::random(shape, Distribution::Default, (d, DType::F32));

        let timed = std::env::var("CPU_BENCH_HEAP_ONLY").is_err();

        let x = random(&device);
        let fused_inf = fused(c, &device);
        let nn_inf = BurnNn::new(c, &device);
        if timed {
            // The output is dropped, not read back, as on 0.21: NdArray and Flex run each op
            // when it is called, so the forward has run by then, and reading `y` back
            // (`into_data`, a copy of the whole output) is not the op's time.
            group.bench_function(BenchmarkId::new("fused", "fwd"), |b| {
                b.iter(|| fused_inf.forward(x.clone(), None).0)
            });
            group.bench_function(BenchmarkId::new("burn_nn", "fwd"), |b| {
                b.iter(|| nn_inf.forward(x.clone()))
            });
        }

        let x = random(&train_device).require_grad();
        let fused_tr = fused(c, &train_device);
        let nn_tr = BurnNn::new(c, &train_device);
        let fused_step = || fused_tr.forward(x.clone(), None).0.sum().backward();
        let nn_step = || nn_tr.forward(x.clone()).sum().backward();
        let nn_train = c.seq <= 1000 || std::env::var("CPU_BENCH_NN_LONG_TRAIN").is_ok();
        // Warm up once (lazy parameter initialization), then one measured step each.
        drop(fused_step());
        let mut heap = HEAP.lock().unwrap();
        heap.insert(format!("{backend}/{}/fused", c.name), peak_mib(fused_step));
        if nn_train {
            drop(nn_step());
            heap.insert(format!("{backend}/{}/burn_nn", c.name), peak_mib(nn_step));
        } else {
            println!(
                "{backend}/{}: burn-nn's training step not run (T > 1000; CPU_BENCH_NN_LONG_TRAIN=1 runs it)",
                c.name
            );
        }
        drop(heap);
        if timed {
            group.bench_function(BenchmarkId::new("fused", "train"), |b| b.iter(fused_step));
            // Burn's `detach` keeps `require_grad` (a detached leaf still collects its
            // gradient), so data is `x` detached AND marked as not requiring one; until
            // 2026-12-07 this row detached only, and timed the same step as `train`.
            let data = x.clone().detach().set_require_grad(false);
            assert!(!data.is_require_grad(), "expected data without a gradient");
            let data_step = || fused_tr.forward(data.clone(), None).0.sum().backward();
            group.bench_function(BenchmarkId::new("fused", "train_data"), |b| {
                b.iter(data_step)
            });
        }
        if timed && nn_train {
            group.bench_function(BenchmarkId::new("burn_nn", "train"), |b| b.iter(nn_step));
        }
        group.finish();
    }
}

fn benches(c: &mut Criterion) {
    println!(
        "rayon threads: RAYON_NUM_THREADS={:?}",
        std::env::var("RAYON_NUM_THREADS").ok()
    );
    bench_backend(c, "ndarray", Device::ndarray());
    bench_backend(c, "flex", Device::flex());
    let mut heap = HEAP.lock().unwrap();
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/target/criterion");
    std::fs::create_dir_all(dir).unwrap();
    // Keep the entries of an earlier partial run that this run did not measure.
    let old: BTreeMap<String, f64> = std::fs::read_to_string(format!("{dir}/cpu_heap.json"))
        .ok()
        .and_then(|s| serde_json::from_str(&s).ok())
        .unwrap_or_default();
    for (k, v) in old {
        heap.entry(k).or_insert(v);
    }
    let json: Vec<String> = heap
        .iter()
        .map(|(k, v)| format!("  \"{k}\": {v:.3}"))
        .collect();
    std::fs::write(
        format!("{dir}/cpu_heap.json"),
        format!("{{\n{}\n}}\n", json.join(",\n")),
    )
    .unwrap();
    for (k, v) in heap.iter() {
        println!("peak heap of one training step: {k}: {v:.1} MiB");
    }
}

criterion_group!(cpu, benches);
criterion_main!(cpu);
