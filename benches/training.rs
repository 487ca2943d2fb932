//! Training step (forward + backward) under `Autodiff`: the fused op against burn-nn's
//! `Lstm` / `Gru` on the same backend, and the peak heap memory of one step.
//!
//! Run: `cargo bench --bench training`, then `python3 benches/ratios.py training`.
//! Size: DESIGN.md §8 (I = H = 256, B = 32, T = 50, 1 layer, f32).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use burn::backend::{Autodiff, Flex, NdArray};
use burn::nn::{GruConfig, LstmConfig};
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{Distribution, Tensor};
use burn_fused_rnn::{FusedRnnBackend, FusedRnnConfig, RnnMode};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};

/// Counts live heap bytes and their peak (for the memory column).
struct Counting;
static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let live = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(live, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        unsafe { System.dealloc(p, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Peak heap growth (MiB) while running `f` once.
fn peak_mib<T>(f: impl FnOnce() -> T) -> f64 {
    let base = LIVE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    drop(f());
    (PEAK.load(Ordering::Relaxed) - base) as f64 / (1024.0 * 1024.0)
}

const H: usize = 256;
const BATCH: usize = 32;
const SEQ: usize = 50;

fn bench_backend<B: AutodiffBackend + FusedRnnBackend>(c: &mut Criterion, backend: &str) {
    let device = B::Device::default();
    let x = Tensor::<B, 3>::random([BATCH, SEQ, H], Distribution::Default, &device).require_grad();
    let fused_lstm = FusedRnnConfig::new(RnnMode::Lstm, H, H).init::<B>(&device);
    let fused_gru = FusedRnnConfig::new(RnnMode::Gru, H, H).init::<B>(&device);
    let nn_lstm = LstmConfig::new(H, H, true).init::<B>(&device);
    let nn_gru = GruConfig::new(H, H, true).init::<B>(&device);

    let fused_lstm_step = || fused_lstm.forward(x.clone(), None).0.sum().backward();
    let fused_gru_step = || fused_gru.forward(x.clone(), None).0.sum().backward();
    let nn_lstm_step = || nn_lstm.forward(x.clone(), None).0.sum().backward();
    let nn_gru_step = || nn_gru.forward(x.clone(), None).sum().backward();

    // Warm up once, then measure the peak heap of one step.
    for step in [
        &fused_lstm_step as &dyn Fn() -> _,
        &fused_gru_step,
        &nn_lstm_step,
        &nn_gru_step,
    ] {
        drop(step());
    }
    let mem = [
        ("fused", "lstm", peak_mib(fused_lstm_step)),
        ("burn_nn", "lstm", peak_mib(nn_lstm_step)),
        ("fused", "gru", peak_mib(fused_gru_step)),
        ("burn_nn", "gru", peak_mib(nn_gru_step)),
    ];
    for (imp, mode, mib) in mem {
        println!("peak heap of one training step: {backend} {imp} {mode}: {mib:.1} MiB");
    }

    let mut group = c.benchmark_group(format!("training/{backend}/H{H}_B{BATCH}_T{SEQ}"));
    group.sample_size(10);
    group.bench_function(BenchmarkId::new("fused", "lstm"), |b| {
        b.iter(fused_lstm_step)
    });
    group.bench_function(BenchmarkId::new("fused", "gru"), |b| b.iter(fused_gru_step));
    group.bench_function(BenchmarkId::new("burn_nn", "lstm"), |b| {
        b.iter(nn_lstm_step)
    });
    group.bench_function(BenchmarkId::new("burn_nn", "gru"), |b| b.iter(nn_gru_step));
    group.finish();
}

fn benches(c: &mut Criterion) {
    bench_backend::<Autodiff<NdArray>>(c, "ndarray");
    bench_backend::<Autodiff<Flex>>(c, "flex");
}

criterion_group!(training, benches);
criterion_main!(training);
