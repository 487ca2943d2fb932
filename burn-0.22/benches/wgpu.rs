//! The CubeCL kernels (`burn_fused_rnn::cube`) on Wgpu against the reference path and
//! burn-nn 0.22's `Lstm`/`Gru` on the same device, in one run: inference forward (`fwd`)
//! and training step (`train`: forward + backward of `sum(y)` on the autodiff device), f32,
//! one layer, unidirectional, I = H, at H64 B8 T50 and H256 B32 T50. Paths: `cube` (the
//! kernels), `reference` (the kernels switched off, `cube::set_enabled(false)`) and
//! `burn_nn`. Each row checks that the kernels ran (`cube::kernel_calls`).
//!
//! After each size it prints one line per ratio of median times, e.g.
//! `cube/reference lstm_H64_B8_T50 fwd 0.21` (below 1: the kernels are faster) and
//! `burn_nn/cube lstm_H64_B8_T50 fwd 12.3`.
//!
//! Run: `cargo bench --features wgpu --bench wgpu` (lavapipe: Vulkan on the CPU; its timings
//! only compare paths against each other on the same device), `--features fusion` for Wgpu
//! under Burn's kernel fusion, or with a criterion filter, e.g. `-- H64`.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use burn::nn::{Gru, GruConfig, Lstm, LstmConfig};
use burn::tensor::{DType, Device, DeviceType, Distribution, Tensor};
use burn_fused_rnn::{cube, FusedRnn, FusedRnnConfig, RnnMode};
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

/// burn-nn's module of a row's mode.
enum Nn {
    Lstm(Box<Lstm>),
    Gru(Box<Gru>),
}

impl Nn {
    fn new(row: &Row, device: &Device) -> Self {
        match row.mode {
            RnnMode::Lstm => Nn::Lstm(Box::new(LstmConfig::new(row.h, row.h, true).init(device))),
            _ => Nn::Gru(Box::new(GruConfig::new(row.h, row.h, true).init(device))),
        }
    }

    fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        match self {
            Nn::Lstm(l) => l.forward(x, None).0,
            Nn::Gru(g) => g.forward(x, None),
        }
    }
}

/// What the paths of one row run.
struct Subject {
    device: Device,
    fused: FusedRnn,
    fused_ad: FusedRnn,
    nn: Nn,
    nn_ad: Nn,
    x: Tensor<3>,
    x_ad: Tensor<3>,
}

impl Subject {
    fn new(row: &Row, device: &Device) -> Self {
        let train = device.clone().autodiff();
        let config = FusedRnnConfig::new(row.mode, row.h, row.h);
        let x = Tensor::<3>::random(
            [row.batch, row.seq, row.h],
            Distribution::Default,
            (device, DType::F32),
        );
        Self {
            device: device.clone(),
            fused: config.init(device),
            fused_ad: config.init(&train),
            nn: Nn::new(row, device),
            nn_ad: Nn::new(row, &train),
            x_ad: x.clone().autodiff().require_grad(),
            x,
        }
    }

    fn run(&self, path: &str, pass: &str) {
        let fused = path != "burn_nn";
        match (fused, pass) {
            (true, "fwd") => drop(self.fused.forward(self.x.clone(), None)),
            (true, _) => drop(
                self.fused_ad
                    .forward(self.x_ad.clone(), None)
                    .0
                    .sum()
                    .backward(),
            ),
            (false, "fwd") => drop(self.nn.forward(self.x.clone())),
            (false, _) => drop(self.nn_ad.forward(self.x_ad.clone()).sum().backward()),
        }
        self.device.sync().expect("the device syncs");
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

fn wgpu(c: &mut Criterion) {
    if Device::enumerate(DeviceType::Wgpu).is_empty() {
        eprintln!("no Wgpu adapter: no rows (on Debian/Ubuntu, `apt-get install mesa-vulkan-drivers libvulkan1` gives lavapipe)");
        return;
    }
    let device = Device::wgpu(Default::default());
    let fusion = if cfg!(feature = "fusion") {
        "wgpu-fusion"
    } else {
        "wgpu"
    };
    for (h, batch, seq) in [(64, 8, 50), (256, 32, 50)] {
        for mode in [RnnMode::Lstm, RnnMode::Gru] {
            let row = Row {
                mode,
                h,
                batch,
                seq,
            };
            let name = row.name();
            let subject = Subject::new(&row, &device);
            let mut group = c.benchmark_group(format!("{fusion}/{name}"));
            group.sample_size(10);
            group.warm_up_time(Duration::from_millis(500));
            group.measurement_time(Duration::from_secs(3));
            for pass in ["fwd", "train"] {
                cube::set_enabled(true);
                subject.run("cube", pass);
                let before = cube::kernel_calls();
                subject.run("cube", pass);
                assert!(
                    cube::kernel_calls() > before,
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
}

criterion_group!(benches, wgpu);
criterion_main!(benches);
