//! The fused op on Burn 0.22's CPU backends (NdArray, Flex) against burn-nn 0.22's modules
//! on the same device, in one run: inference forward and training step (forward + backward
//! of `sum(y)` on an autodiff device). The configurations and the criterion names
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
#![allow(deprecated)] // Burn 0.22 deprecates NdArray; the crate serves it.

use burn::nn::{BiLstm, BiLstmConfig, Gru, GruConfig, Lstm, LstmConfig};
use burn::tensor::{DType, Device, Distribution, Tensor};
use burn_fused_rnn::{FusedRnn, FusedRnnConfig, RnnMode};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};

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

        let x = random(&device);
        let fused_inf = fused(c, &device);
        let nn_inf = BurnNn::new(c, &device);
        group.bench_function(BenchmarkId::new("fused", "fwd"), |b| {
            b.iter(|| fused_inf.forward(x.clone(), None).0.into_data())
        });
        group.bench_function(BenchmarkId::new("burn_nn", "fwd"), |b| {
            b.iter(|| nn_inf.forward(x.clone()).into_data())
        });

        let x = random(&train_device).require_grad();
        let fused_tr = fused(c, &train_device);
        let nn_tr = BurnNn::new(c, &train_device);
        let fused_step = || fused_tr.forward(x.clone(), None).0.sum().backward();
        let nn_step = || nn_tr.forward(x.clone()).sum().backward();
        drop(fused_step());
        group.bench_function(BenchmarkId::new("fused", "train"), |b| b.iter(fused_step));
        if c.seq <= 1000 {
            drop(nn_step());
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
}

criterion_group!(cpu, benches);
criterion_main!(cpu);
