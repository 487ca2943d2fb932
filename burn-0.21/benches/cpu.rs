//! The fused op on the CPU backends (NdArray, Flex) against burn-nn's modules on the same
//! backend, in one run: inference forward, training step (forward + backward of `sum(y)`
//! under `Autodiff`), and the peak heap of one training step. The fused op's training step
//! is timed twice: `train` with `x` requiring a gradient (as when an embedding feeds the
//! layer), `train_data` without (a layer that reads data: its backward skips `x`'s
//! gradient, the core crate's Note [Gradients not wanted]).
//!
//! Run, then time PyTorch on the same cores and print the ratio table:
//!
//! ```sh
//! RAYON_NUM_THREADS=2 cargo bench --bench cpu
//! python3 benches/torch_cpu.py --threads 2
//! python3 benches/ratios.py
//! ```
//!
//! `CPU_BENCH=<substring>[,<substring>..]` runs only the configurations whose name contains
//! one of them, `CPU_BENCH_BACKEND=ndarray|flex` only that backend; a partial run updates
//! the heap file's entries it measured and keeps the others.
//!
//! `CPU_BENCH_HEAP_ONLY=1` measures only the peak heap of one training step (no timing).
//!
//! burn-nn's training step at T = 10 000 is not timed unless `CPU_BENCH_NN_LONG_TRAIN=1`:
//! one such step spends more than ten minutes in burn-autodiff's graph bookkeeping (a
//! profile shows `Arc::hash`, `GraphLocator::select` and `HashMap::insert` on top: every
//! step of burn-nn's LSTM adds graph nodes). The fused op adds one node per call.
//! Sizes (f32, I = H): H256 B32 T50 and H512 B64 T50 (1 layer, LSTM and GRU), a 2-layer
//! bidirectional LSTM at H256 B32 T100, and B = 1, T = 10 000, H = 32 (LSTM and GRU).

use std::alloc::System;
use std::collections::BTreeMap;
use std::sync::Mutex;

use burn::backend::{Autodiff, Flex, NdArray};
use burn::nn::{BiLstm, BiLstmConfig, Gru, GruConfig, Lstm, LstmConfig};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Distribution, Tensor};
use burn_fused_rnn::{FusedRnn, FusedRnnBackend, FusedRnnConfig, RnnMode};
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

/// One benchmark configuration (must match `benches/torch_cpu.py`).
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
enum BurnNn<B: Backend> {
    Lstm(Vec<Lstm<B>>),
    BiLstm(Vec<BiLstm<B>>),
    Gru(Vec<Gru<B>>),
}

impl<B: Backend> BurnNn<B> {
    fn new(c: &Config, device: &B::Device) -> Self {
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

    fn forward(&self, mut x: Tensor<B, 3>) -> Tensor<B, 3> {
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

fn backend_selected(backend: &str) -> bool {
    std::env::var("CPU_BENCH_BACKEND").map_or(true, |b| b == backend)
}

fn fused<B: Backend>(c: &Config, device: &B::Device) -> FusedRnn<B> {
    FusedRnnConfig::new(c.mode, c.hidden, c.hidden)
        .with_num_layers(c.layers)
        .with_bidirectional(c.bidirectional)
        .init(device)
}

fn bench_backend<B: AutodiffBackend + FusedRnnBackend>(cr: &mut Criterion, backend: &str)
where
    B::InnerBackend: FusedRnnBackend,
{
    type Inner<B> = <B as AutodiffBackend>::InnerBackend;
    if !backend_selected(backend) {
        return;
    }
    let device = B::Device::default();
    for c in CONFIGS.iter().filter(|c| selected(c)) {
        let mut group = cr.benchmark_group(format!("cpu/{backend}/{}", c.name));
        group.sample_size(10);
        let long = c.seq * c.hidden * c.batch > 1_000_000 || c.seq > 1000;
        if long {
            group.measurement_time(std::time::Duration::from_secs(20));
        }
        let shape = [c.batch, c.seq, c.hidden];
        let timed = std::env::var("CPU_BENCH_HEAP_ONLY").is_err();

        // Inference, on the inner (non-autodiff) backend.
        let x = Tensor::<Inner<B>, 3>::random(shape, Distribution::Default, &device);
        let fused_inf = fused::<Inner<B>>(c, &device);
        let nn_inf = BurnNn::<Inner<B>>::new(c, &device);
        if timed {
            group.bench_function(BenchmarkId::new("fused", "fwd"), |b| {
                b.iter(|| fused_inf.forward(x.clone(), None).0)
            });
            group.bench_function(BenchmarkId::new("burn_nn", "fwd"), |b| {
                b.iter(|| nn_inf.forward(x.clone()))
            });
        }

        // Training step under Autodiff.
        let x = Tensor::<B, 3>::random(shape, Distribution::Default, &device).require_grad();
        let fused_tr = fused::<B>(c, &device);
        let nn_tr = BurnNn::<B>::new(c, &device);
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
        "rayon threads: {} (RAYON_NUM_THREADS={:?})",
        rayon_threads(),
        std::env::var("RAYON_NUM_THREADS").ok()
    );
    bench_backend::<Autodiff<NdArray>>(c, "ndarray");
    bench_backend::<Autodiff<Flex>>(c, "flex");
    let mut heap = HEAP.lock().unwrap();
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../target/criterion");
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

/// The size of rayon's global pool, as the fused op sees it.
fn rayon_threads() -> usize {
    std::env::var("RAYON_NUM_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

criterion_group!(cpu, benches);
criterion_main!(cpu);
