//! The CubeCL kernels (`burn_fused_rnn::cube`) against the reference path and burn-nn's
//! `Lstm`/`Gru` on the same device, in one run: inference forward (`fwd`) and training
//! step (`train`: forward + backward of `sum(y)` under `Autodiff`), f32, 1 layer,
//! unidirectional, I = H.
//!
//! - **Wgpu** (feature `wgpu`): `burn::backend::Wgpu` (with fusion, as users run it) at
//!   H64 B8 T50 and H256 B32 T50: paths `cube` (the kernels), `reference` (the kernels
//!   switched off, `cube::set_enabled(false)`) and `burn_nn`.
//! - **CUDA** (feature `cuda`, on a machine with a CUDA device): `burn::backend::Cuda` at
//!   the same sizes plus H256 B32 T100 and H1024 B128 T100: paths `cudnn`, `cube` (cuDNN
//!   switched off, `cudnn::set_enabled(false)`, so that the CUDA backend's fallback runs),
//!   `reference` (both switched off) and `burn_nn`. Each row checks which path ran
//!   (`cube::kernel_calls`, `cudnn::cudnn_calls`) and says so when it was not the one
//!   named.
//!
//! After each size it prints one line per ratio of mean times, e.g.
//! `cube/reference lstm_H64_B8_T50 fwd 0.21` (below 1: the kernels are faster) and
//! `burn_nn/cube lstm_H64_B8_T50 fwd 12.3`, plus `cube/cudnn ...` on CUDA.
//!
//! Run: `cargo bench --features wgpu --bench wgpu` (lavapipe: Vulkan on the CPU; its
//! timings only compare paths against each other on the same device), or with a
//! criterion filter, e.g. `-- H64`.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use burn::backend::Autodiff;
use burn::nn::{Gru, GruConfig, Lstm, LstmConfig};
use burn::tensor::backend::Backend;
use burn::tensor::{Distribution, Tensor};
use burn_fused_rnn::{cube, FusedRnn, FusedRnnBackend, FusedRnnConfig, RnnMode};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};

/// One size.
#[derive(Clone, Copy)]
struct Row {
    mode: RnnMode,
    h: usize,
    batch: usize,
    seq: usize,
}

impl Row {
    fn name(&self) -> String {
        format!(
            "{}_H{}_B{}_T{}",
            self.mode.name(),
            self.h,
            self.batch,
            self.seq
        )
    }
}

fn rows(sizes: &[(usize, usize, usize)]) -> Vec<Row> {
    let mut rows = Vec::new();
    for &(h, batch, seq) in sizes {
        for mode in [RnnMode::Lstm, RnnMode::Gru] {
            rows.push(Row {
                mode,
                h,
                batch,
                seq,
            });
        }
    }
    rows
}

/// burn-nn's module of a row's mode.
enum Nn<B: Backend> {
    Lstm(Box<Lstm<B>>),
    Gru(Box<Gru<B>>),
}

impl<B: Backend> Nn<B> {
    fn new(row: &Row, device: &B::Device) -> Self {
        match row.mode {
            RnnMode::Lstm => Nn::Lstm(Box::new(LstmConfig::new(row.h, row.h, true).init(device))),
            _ => Nn::Gru(Box::new(GruConfig::new(row.h, row.h, true).init(device))),
        }
    }

    fn forward(&self, x: Tensor<B, 3>) -> Tensor<B, 3> {
        match self {
            Nn::Lstm(l) => l.forward(x, None).0,
            Nn::Gru(g) => g.forward(x, None),
        }
    }
}

/// What the rows of one backend run.
struct Subject<B: FusedRnnBackend>
where
    Autodiff<B>: FusedRnnBackend<Device = B::Device>,
{
    fused: FusedRnn<B>,
    fused_ad: FusedRnn<Autodiff<B>>,
    nn: Nn<B>,
    nn_ad: Nn<Autodiff<B>>,
    x: Tensor<B, 3>,
}

impl<B: FusedRnnBackend> Subject<B>
where
    Autodiff<B>: FusedRnnBackend<Device = B::Device>,
{
    fn new(row: &Row, device: &B::Device) -> Self {
        let config = FusedRnnConfig::new(row.mode, row.h, row.h);
        Self {
            fused: config.init::<B>(device),
            fused_ad: config.init::<Autodiff<B>>(device),
            nn: Nn::new(row, device),
            nn_ad: Nn::new(row, device),
            x: Tensor::random([row.batch, row.seq, row.h], Distribution::Default, device),
        }
    }

    fn run(&self, path: &str, pass: &str) {
        let device = self.x.device();
        let fused = !path.starts_with("burn_nn");
        match (fused, pass) {
            (true, "fwd") => drop(self.fused.forward(self.x.clone(), None)),
            (true, _) => {
                let x = Tensor::<Autodiff<B>, 3>::from_inner(self.x.clone()).require_grad();
                drop(self.fused_ad.forward(x, None).0.sum().backward());
            }
            (false, "fwd") => drop(self.nn.forward(self.x.clone())),
            (false, _) => {
                let x = Tensor::<Autodiff<B>, 3>::from_inner(self.x.clone()).require_grad();
                drop(self.nn_ad.forward(x).sum().backward());
            }
        }
        B::sync(&device).expect("the device syncs");
    }
}

/// Per-iteration times (seconds) of every `(row, path, pass)` measured.
type Times = BTreeMap<(String, String, String), Vec<f64>>;

thread_local! {
    static TIMES: RefCell<Times> = const { RefCell::new(BTreeMap::new()) };
}

/// Times `run` with criterion, keeping the per-iteration times for the ratio lines.
fn measure(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    key: (&str, &str, &str),
    run: impl Fn(),
) {
    let (row, path, pass) = key;
    group.bench_function(BenchmarkId::new(path, pass), |bench| {
        bench.iter_custom(|iters| {
            let start = Instant::now();
            for _ in 0..iters {
                run();
            }
            let elapsed = start.elapsed();
            TIMES.with(|t| {
                t.borrow_mut()
                    .entry((row.into(), path.into(), pass.into()))
                    .or_default()
                    .push(elapsed.as_secs_f64() / iters as f64)
            });
            elapsed
        })
    });
}

/// Median per-iteration time of a `(row, path, pass)`, if it was measured.
fn median(row: &str, path: &str, pass: &str) -> Option<f64> {
    TIMES.with(|t| {
        let t = t.borrow();
        let mut v = t.get(&(row.into(), path.into(), pass.into()))?.clone();
        v.sort_by(f64::total_cmp);
        Some(v[v.len() / 2])
    })
}

/// Prints `a/b row pass ratio` for every pass where both were measured.
fn print_ratios(row: &str, pairs: &[(&str, &str)]) {
    for pass in ["fwd", "train"] {
        for (a, b) in pairs {
            if let (Some(ta), Some(tb)) = (median(row, a, pass), median(row, b, pass)) {
                let ratio = ta / tb;
                let digits = if ratio < 10.0 { 2 } else { 1 };
                println!("{a}/{b} {row} {pass} {ratio:.digits$}");
            }
        }
    }
}

fn configure<'a>(
    c: &'a mut Criterion,
    backend: &str,
    row: &Row,
) -> criterion::BenchmarkGroup<'a, criterion::measurement::WallTime> {
    let mut group = c.benchmark_group(format!("{backend}/{}", row.name()));
    group.sample_size(10);
    group.warm_up_time(Duration::from_millis(500));
    group.measurement_time(Duration::from_secs(3));
    group
}

/// Runs `run` once and says whether the kernels' call counter moved.
fn ran_kernels(run: impl FnOnce()) -> bool {
    let before = cube::kernel_calls();
    run();
    cube::kernel_calls() > before
}

#[cfg(feature = "wgpu")]
fn wgpu(c: &mut Criterion) {
    use burn::backend::wgpu::graphics::{AutoGraphicsApi, GraphicsApi};
    use burn::backend::wgpu::WgpuRuntime;
    use burn::cubecl::Runtime;

    type W = burn::backend::Wgpu;
    let api = AutoGraphicsApi::backend();
    if WgpuRuntime::enumerate_all_devices(&api).is_empty() {
        eprintln!("no {api:?} adapter: no Wgpu rows (on Debian/Ubuntu, `apt-get install mesa-vulkan-drivers libvulkan1` gives lavapipe)");
        return;
    }
    let device = Default::default();
    for row in rows(&[(64, 8, 50), (256, 32, 50)]) {
        let name = row.name();
        let subject = Subject::<W>::new(&row, &device);
        let mut group = configure(c, "wgpu", &row);
        for pass in ["fwd", "train"] {
            cube::set_enabled(true);
            subject.run("cube", pass);
            assert!(
                ran_kernels(|| subject.run("cube", pass)),
                "{name} {pass}: the CubeCL kernels did not run"
            );
            measure(&mut group, (&name, "cube", pass), || {
                subject.run("cube", pass)
            });
            cube::set_enabled(false);
            measure(&mut group, (&name, "reference", pass), || {
                subject.run("reference", pass)
            });
            cube::set_enabled(true);
            measure(&mut group, (&name, "burn_nn", pass), || {
                subject.run("burn_nn", pass)
            });
        }
        group.finish();
        print_ratios(&name, &[("cube", "reference"), ("burn_nn", "cube")]);
    }
}

#[cfg(not(feature = "wgpu"))]
fn wgpu(_: &mut Criterion) {}

#[cfg(feature = "cuda")]
fn cuda(c: &mut Criterion) {
    use burn_fused_rnn::cudnn;

    type Cu = burn::backend::Cuda;
    if let Err(reason) = cudnn::cuda_device_available() {
        eprintln!("no CUDA device ({reason}): no CUDA rows");
        return;
    }
    let device = Default::default();
    for row in rows(&[(64, 8, 50), (256, 32, 50), (256, 32, 100), (1024, 128, 100)]) {
        let name = row.name();
        let subject = Subject::<Cu>::new(&row, &device);
        let mut group = configure(c, "cuda", &row);
        for pass in ["fwd", "train"] {
            let before = cudnn::cudnn_calls();
            subject.run("cudnn", pass);
            if cudnn::cudnn_calls() == before {
                eprintln!("{name} {pass}: cuDNN did not run; the `cudnn` row is another path");
            }
            measure(&mut group, (&name, "cudnn", pass), || {
                subject.run("cudnn", pass)
            });
            cudnn::set_enabled(false);
            if !ran_kernels(|| subject.run("cube", pass)) {
                eprintln!("{name} {pass}: with cuDNN off the CubeCL kernels did not run; the `cube` row is the reference");
            }
            measure(&mut group, (&name, "cube", pass), || {
                subject.run("cube", pass)
            });
            cube::set_enabled(false);
            measure(&mut group, (&name, "reference", pass), || {
                subject.run("reference", pass)
            });
            cube::set_enabled(true);
            cudnn::set_enabled(true);
            measure(&mut group, (&name, "burn_nn", pass), || {
                subject.run("burn_nn", pass)
            });
        }
        group.finish();
        print_ratios(
            &name,
            &[
                ("cube", "cudnn"),
                ("cube", "reference"),
                ("burn_nn", "cube"),
            ],
        );
    }
}

#[cfg(not(feature = "cuda"))]
fn cuda(_: &mut Criterion) {}

fn benches(c: &mut Criterion) {
    wgpu(c);
    cuda(c);
}

criterion_group!(gpu, benches);
criterion_main!(gpu);
