//! Single-step decoding latency on Burn 0.22 (batch 1 and 8, I = H = 256, 1 layer LSTM,
//! f32): a prepared module's `step` against the same module's `forward` with T = 1 (which
//! builds the flat weights on every call) and burn-nn 0.22's `Lstm` with T = 1, on NdArray
//! and Flex. The criterion names (`step/<backend>/H256_B<batch>/<impl>`) are the 0.21
//! line's `benches/step.rs`, so the two lines compare row by row.
//!
//! Run (in `burn-0.22/`), on pinned cores:
//!
//! ```sh
//! RAYON_NUM_THREADS=2 taskset -c 0,1 cargo bench --bench step
//! ```
#![allow(deprecated)] // Burn 0.22 deprecates NdArray; the crate serves it.

use burn::nn::{LstmConfig, LstmState};
use burn::tensor::{DType, Device, Distribution, Tensor};
use burn_fused_rnn::{FusedRnnConfig, RnnMode, RnnState};
use criterion::{criterion_group, criterion_main, Criterion};

const H: usize = 256;

fn bench_backend(c: &mut Criterion, backend: &str, device: Device, batch: usize) {
    let mut group = c.benchmark_group(format!("step/{backend}/H{H}_B{batch}"));
    let random = |shape: [usize; 2]| {
        Tensor::<2>::random(shape, Distribution::Default, (&device, DType::F32))
    };
    let x = random([batch, H]);
    let (h, cell) = (random([batch, H]), random([batch, H]));
    let sync = || device.sync().expect("the device syncs");

    let fused = FusedRnnConfig::new(RnnMode::Lstm, H, H).init(&device);
    let prepared = fused.prepare();
    let state = RnnState::lstm(h.clone().unsqueeze_dim(0), cell.clone().unsqueeze_dim(0));
    group.bench_function("prepared_step", |bench| {
        bench.iter(|| {
            let out = prepared.step(x.clone(), Some(state.clone()));
            sync();
            out
        })
    });
    group.bench_function("fused_forward_t1", |bench| {
        bench.iter(|| {
            let out = fused.forward(x.clone().unsqueeze_dim(1), Some(state.clone()));
            sync();
            out
        })
    });
    let lstm = LstmConfig::new(H, H, true).init(&device);
    group.bench_function("burn_nn_t1", |bench| {
        bench.iter(|| {
            let out = lstm.forward(
                x.clone().unsqueeze_dim(1),
                Some(LstmState::new(cell.clone(), h.clone())),
            );
            sync();
            out
        })
    });
    group.finish();
}

fn benches(c: &mut Criterion) {
    for batch in [1, 8] {
        bench_backend(c, "ndarray", Device::ndarray(), batch);
        bench_backend(c, "flex", Device::flex(), batch);
    }
}

criterion_group!(step, benches);
criterion_main!(step);
