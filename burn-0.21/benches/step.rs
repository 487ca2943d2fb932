//! Single-step decoding latency (batch 1 and 8, I = H = 256, 1 layer LSTM, f32): a prepared
//! module's `step` against the same module's `forward` with T = 1 (which concatenates the
//! weights on every call) and burn-nn's `Lstm` with T = 1, on NdArray and Flex.
//!
//! Run: `cargo bench --bench step`.

use burn::backend::{Flex, NdArray};
use burn::nn::{LstmConfig, LstmState};
use burn::tensor::{Distribution, Tensor};
use burn_fused_rnn::{FusedRnnBackend, FusedRnnConfig, RnnMode, RnnState};
use criterion::{criterion_group, criterion_main, Criterion};

const H: usize = 256;

fn bench_backend<B: FusedRnnBackend>(c: &mut Criterion, backend: &str, batch: usize) {
    let device = B::Device::default();
    let mut group = c.benchmark_group(format!("step/{backend}/H{H}_B{batch}"));
    let random = |shape: [usize; 2]| Tensor::<B, 2>::random(shape, Distribution::Default, &device);
    let x = random([batch, H]);
    let (h, cell) = (random([batch, H]), random([batch, H]));

    let fused = FusedRnnConfig::new(RnnMode::Lstm, H, H).init::<B>(&device);
    let prepared = fused.prepare();
    let state = RnnState::lstm(h.clone().unsqueeze_dim(0), cell.clone().unsqueeze_dim(0));
    group.bench_function("prepared_step", |bench| {
        bench.iter(|| {
            let (y, s) = prepared.step(x.clone(), Some(state.clone()));
            B::sync(&device).unwrap();
            (y, s)
        })
    });
    group.bench_function("fused_forward_t1", |bench| {
        bench.iter(|| {
            let (y, s) = fused.forward(x.clone().unsqueeze_dim(1), Some(state.clone()));
            B::sync(&device).unwrap();
            (y, s)
        })
    });
    let lstm = LstmConfig::new(H, H, true).init::<B>(&device);
    group.bench_function("burn_nn_t1", |bench| {
        bench.iter(|| {
            let (y, s) = lstm.forward(
                x.clone().unsqueeze_dim(1),
                Some(LstmState::new(cell.clone(), h.clone())),
            );
            B::sync(&device).unwrap();
            (y, s)
        })
    });
    group.finish();
}

fn benches(c: &mut Criterion) {
    for batch in [1, 8] {
        bench_backend::<NdArray>(c, "ndarray", batch);
        bench_backend::<Flex>(c, "flex", batch);
    }
}

criterion_group!(step, benches);
criterion_main!(step);
