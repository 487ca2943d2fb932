//! Inference forward: the fused op against burn-nn's `Lstm` / `Gru` on the same backend.
//!
//! Run: `cargo bench --bench forward`, then `python3 benches/ratios.py` for the ratio table.
//! Sizes: DESIGN.md §8 (I = H = 256, B = 32, T = 50, 1 layer, f32) and a larger one
//! (I = H = 512, B = 64, T = 50).

use burn::backend::{Flex, NdArray};
use burn::nn::{GruConfig, LstmConfig};
use burn::tensor::{Distribution, Tensor};
use burn_fused_rnn::{FusedRnnBackend, FusedRnnConfig, RnnMode};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};

const SIZES: [(usize, usize, usize); 2] = [(256, 32, 50), (512, 64, 50)];

fn bench_backend<B: FusedRnnBackend>(c: &mut Criterion, backend: &str) {
    let device = B::Device::default();
    for (h, batch, seq) in SIZES {
        let mut group = c.benchmark_group(format!("forward/{backend}/H{h}_B{batch}_T{seq}"));
        group.sample_size(10);
        let x = Tensor::<B, 3>::random([batch, seq, h], Distribution::Default, &device);
        for mode in [RnnMode::Lstm, RnnMode::Gru] {
            let fused = FusedRnnConfig::new(mode, h, h).init::<B>(&device);
            group.bench_function(BenchmarkId::new("fused", mode.name()), |bench| {
                bench.iter(|| {
                    let (y, _) = fused.forward(x.clone(), None);
                    B::sync(&device).unwrap();
                    y
                })
            });
        }
        let lstm = LstmConfig::new(h, h, true).init::<B>(&device);
        group.bench_function(BenchmarkId::new("burn_nn", "lstm"), |bench| {
            bench.iter(|| {
                let (y, _) = lstm.forward(x.clone(), None);
                B::sync(&device).unwrap();
                y
            })
        });
        let gru = GruConfig::new(h, h, true).init::<B>(&device);
        group.bench_function(BenchmarkId::new("burn_nn", "gru"), |bench| {
            bench.iter(|| {
                let y = gru.forward(x.clone(), None);
                B::sync(&device).unwrap();
                y
            })
        });
        group.finish();
    }
}

fn benches(c: &mut Criterion) {
    bench_backend::<NdArray>(c, "ndarray");
    bench_backend::<Flex>(c, "flex");
}

criterion_group!(forward, benches);
criterion_main!(forward);
