//! GPU benchmark (feature `cuda`): the cuDNN path (under each RNN algorithm where
//! persistent kernels apply), the reference path on Cuda, and burn-nn's
//! `Lstm`/`BiLstm`/`Gru`/`BiGru` stacks on Cuda, timed in the same run, plus
//! `benches/torch_rnn.py` (`torch.nn.LSTM`/`GRU` on cuDNN) with the same rows on the same
//! machine and `benches/cuda_ratios.py` for the table.
//!
//! Rows (LSTM and GRU each; I = H; forward alone, `fwd`, is an inference forward;
//! `fwdbwd` is forward + backward of `sum(y)` under `Autodiff`; TF32 off):
//! - the table of issue #13 (`*_T100_L2_{uni,bi}`): H ∈ {256, 1024}, B ∈ {32, 128},
//!   T = 100, 2 layers, uni- and bidirectional, f32; cuDNN, reference and burn-nn;
//! - small batches (`*_L1_uni`, `*_L1_uni_f16`): H ∈ {256, 512}, B ∈ {1, 8}, T = 100,
//!   1 layer, unidirectional, f32 and f16, cuDNN under each algorithm
//!   (`cudnn` = standard, `cudnn_persist_static`, `cudnn_persist_static_small_h`,
//!   `cudnn_persist_dynamic`, `cudnn_auto`);
//! - f16 (`*_T100_L2_{uni,bi}_f16`): the first set's sizes in f16, cuDNN;
//! - long sequences (`*_T1000_L2_uni`): H ∈ {256, 1024}, B = 32, T = 1000, 2 layers, f32;
//! - variable lengths (`*_B64_T100_L2_{uni,bi}_varlen`): H ∈ {256, 1024}, B = 64,
//!   T = 100, lengths uniform in [T/4, T] from a seeded splitmix64 (the same lengths in
//!   `torch_rnn.py`, which runs PyTorch's `pack_padded_sequence` path), f32.
//!
//! f32 rows run the module (`FusedRnn::forward`, which concatenates the weights each
//! call, as a user's model does); f16 rows run the op (`fused_rnn`) on f16 weights made
//! once, as PyTorch's half module holds them (the module would cast its f32 parameters
//! every call). Which algorithm cuDNN actually ran for each row (a persistent algorithm
//! that refuses a shape falls back to the standard one) is written to
//! `target/criterion/cuda_algorithms.json` for the ratio script.
//!
//! Run on a GPU machine (README, "GPU"): `cargo bench --features cuda --bench gpu` (or the
//! built binary with `--bench` and a criterion filter, e.g. `'_L1_'`), then
//! `python3 benches/torch_rnn.py` and `python3 benches/cuda_ratios.py`. Without a CUDA
//! device it prints why and measures nothing.
//!
//! Per-phase timing: with `BURN_FUSED_RNN_PROFILE=<row>[@<algorithm>]` (for example
//! `lstm_H256_B32_T100_L2_uni` or `lstm_H256_B8_T100_L1_uni_f16@persist_static`), the
//! benchmark instead runs that row's `fwd` and `fwdbwd` 20 times each with
//! `cudnn::profile` on and prints the phase table (module docs of `cudnn::profile`),
//! including the weights' concatenation and the whole iteration as the caller sees them.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use burn::backend::cuda::CudaDevice;
use burn::backend::{Autodiff, Cuda};
use burn::module::AutodiffModule;
use burn::nn::{BiGru, BiGruConfig, BiLstm, BiLstmConfig, Gru, GruConfig, Lstm, LstmConfig};
use burn::tensor::backend::Backend;
use burn::tensor::{DType, Distribution, Tensor};
use burn_fused_rnn::cudnn::profile::{self, Op, Phase};
use burn_fused_rnn::cudnn::{self, RnnAlgorithm};
use burn_fused_rnn::{fused_rnn, DropoutSpec, FusedRnn, FusedRnnConfig, RnnDescriptor, RnnMode};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};

type B = Cuda;
type A = Autodiff<Cuda>;

/// One row of the benchmark.
#[derive(Clone)]
struct Row {
    mode: RnnMode,
    h: usize,
    batch: usize,
    seq: usize,
    layers: usize,
    bi: bool,
    f16: bool,
    varlen: bool,
    algorithms: Vec<RnnAlgorithm>,
    /// Also the reference path and burn-nn (the first set only: they are slow).
    baselines: bool,
    measurement: Duration,
}

impl Row {
    fn name(&self) -> String {
        format!(
            "{}_H{}_B{}_T{}_L{}_{}{}{}",
            self.mode.name(),
            self.h,
            self.batch,
            self.seq,
            self.layers,
            if self.bi { "bi" } else { "uni" },
            if self.f16 { "_f16" } else { "" },
            if self.varlen { "_varlen" } else { "" },
        )
    }

    fn lengths(&self) -> Option<Vec<usize>> {
        self.varlen.then(|| lengths(self.batch, self.seq, 42))
    }
}

/// Lengths uniform in `[seq / 4, seq]` from splitmix64 (`torch_rnn.py` has the same).
fn lengths(batch: usize, seq: usize, seed: u64) -> Vec<usize> {
    let low = seq / 4;
    let mut rng = burn_fused_rnn::random::SplitMix64::new(seed);
    (0..batch)
        .map(|_| low + (rng.next_u64() % (seq - low + 1) as u64) as usize)
        .collect()
}

fn rows() -> Vec<Row> {
    let modes = [RnnMode::Lstm, RnnMode::Gru];
    let row = |mode, h, batch, seq, layers, bi| Row {
        mode,
        h,
        batch,
        seq,
        layers,
        bi,
        f16: false,
        varlen: false,
        algorithms: vec![RnnAlgorithm::Standard],
        baselines: false,
        measurement: Duration::from_secs(1),
    };
    let mut rows = Vec::new();
    for f16 in [false, true] {
        for mode in modes {
            for h in [256, 1024] {
                for batch in [32, 128] {
                    for bi in [false, true] {
                        rows.push(Row {
                            f16,
                            baselines: !f16,
                            measurement: Duration::from_secs(2),
                            ..row(mode, h, batch, 100, 2, bi)
                        });
                    }
                }
            }
        }
    }
    for f16 in [false, true] {
        for mode in modes {
            for h in [256, 512] {
                for batch in [1, 8] {
                    let mut algorithms = RnnAlgorithm::CONCRETE.to_vec();
                    algorithms.push(RnnAlgorithm::Auto);
                    rows.push(Row {
                        f16,
                        algorithms,
                        ..row(mode, h, batch, 100, 1, false)
                    });
                }
            }
        }
    }
    for mode in modes {
        for h in [256, 1024] {
            rows.push(row(mode, h, 32, 1000, 2, false));
            for bi in [false, true] {
                rows.push(Row {
                    varlen: true,
                    ..row(mode, h, 64, 100, 2, bi)
                });
            }
        }
    }
    rows
}

/// burn-nn's modules stacked into a (bi)directional RNN.
enum Stack<Bk: Backend> {
    Lstm(Vec<Lstm<Bk>>),
    BiLstm(Vec<BiLstm<Bk>>),
    Gru(Vec<Gru<Bk>>),
    BiGru(Vec<BiGru<Bk>>),
}

impl<Bk: Backend> Stack<Bk> {
    fn new(mode: RnnMode, h: usize, layers: usize, bi: bool, device: &Bk::Device) -> Self {
        let input = |l: usize| if l == 0 || !bi { h } else { 2 * h };
        let layers = 0..layers;
        match (mode, bi) {
            (RnnMode::Lstm, false) => Stack::Lstm(
                layers
                    .map(|l| LstmConfig::new(input(l), h, true).init(device))
                    .collect(),
            ),
            (RnnMode::Lstm, true) => Stack::BiLstm(
                layers
                    .map(|l| BiLstmConfig::new(input(l), h, true).init(device))
                    .collect(),
            ),
            (_, false) => Stack::Gru(
                layers
                    .map(|l| GruConfig::new(input(l), h, true).init(device))
                    .collect(),
            ),
            (_, true) => Stack::BiGru(
                layers
                    .map(|l| BiGruConfig::new(input(l), h, true).init(device))
                    .collect(),
            ),
        }
    }

    fn forward(&self, x: Tensor<Bk, 3>) -> Tensor<Bk, 3> {
        match self {
            Stack::Lstm(ls) => ls.iter().fold(x, |x, l| l.forward(x, None).0),
            Stack::BiLstm(ls) => ls.iter().fold(x, |x, l| l.forward(x, None).0),
            Stack::Gru(ls) => ls.iter().fold(x, |x, l| l.forward(x, None)),
            Stack::BiGru(ls) => ls.iter().fold(x, |x, l| l.forward(x, None).0),
        }
    }
}

/// What one row runs: the module (f32) or the op on f16 weights.
struct Subject {
    fused: FusedRnn<A>,
    inner: FusedRnn<B>,
    x: Tensor<B, 3>,
    /// f16 rows: the weights and input in f16, made once.
    half: Option<(Tensor<B, 1>, Tensor<B, 3>)>,
    desc: RnnDescriptor,
    lengths: Option<Vec<usize>>,
}

impl Subject {
    fn new(row: &Row, device: &CudaDevice) -> Self {
        let fused = FusedRnnConfig::new(row.mode, row.h, row.h)
            .with_num_layers(row.layers)
            .with_bidirectional(row.bi)
            .init::<A>(device);
        let inner = fused.valid();
        let x = Tensor::<B, 3>::random([row.batch, row.seq, row.h], Distribution::Default, device);
        let half = row.f16.then(|| {
            (
                inner.flat_weights().cast(DType::F16),
                x.clone().cast(DType::F16),
            )
        });
        let lengths = row.lengths();
        let desc = RnnDescriptor::new(
            *inner.spec(),
            row.seq,
            row.batch,
            true,
            lengths.clone(),
            DropoutSpec::NONE,
        );
        Self {
            fused,
            inner,
            x,
            half,
            desc,
            lengths,
        }
    }

    fn forward(&self) -> Tensor<B, 3> {
        match (&self.half, &self.lengths) {
            (Some((w, x)), _) => fused_rnn(&self.desc, x.clone(), None, None, w.clone()).output,
            (None, Some(lengths)) => {
                self.inner
                    .forward_with_lengths(self.x.clone(), lengths, None)
                    .0
            }
            (None, None) => self.inner.forward(self.x.clone(), None).0,
        }
    }

    fn forward_backward(&self) -> Grads {
        let y = match (&self.half, &self.lengths) {
            (Some((w, x)), _) => {
                let x = Tensor::<A, 3>::from_inner(x.clone()).require_grad();
                let w = Tensor::<A, 1>::from_inner(w.clone()).require_grad();
                fused_rnn(&self.desc, x, None, None, w).output
            }
            (None, lengths) => {
                let x = Tensor::<A, 3>::from_inner(self.x.clone()).require_grad();
                match lengths {
                    Some(lengths) => self.fused.forward_with_lengths(x, lengths, None).0,
                    None => self.fused.forward(x, None).0,
                }
            }
        };
        y.sum().backward()
    }
}

type Grads = <A as burn::tensor::backend::AutodiffBackend>::Gradients;

/// The path id of an algorithm's rows: `cudnn` for the standard one (as in issue #13's
/// table), `cudnn_<name>` otherwise.
fn path(algorithm: RnnAlgorithm) -> String {
    match algorithm {
        RnnAlgorithm::Standard => "cudnn".into(),
        other => format!("cudnn_{}", other.name()),
    }
}

fn calls() -> Vec<u64> {
    RnnAlgorithm::CONCRETE
        .iter()
        .map(|&a| cudnn::cudnn_calls_with(a))
        .collect()
}

/// The algorithms cuDNN ran while `run` ran (`reference` if none; empty if `run` ran
/// nothing, as for a row criterion's filter leaves out).
fn algorithms_that_ran(run: impl FnOnce()) -> Option<String> {
    let before = calls();
    run();
    let after = calls();
    if after == before {
        return None;
    }
    let ran: Vec<&str> = RnnAlgorithm::CONCRETE
        .iter()
        .zip(after.iter().zip(&before))
        .filter(|(_, (after, before))| after > before)
        .map(|(a, _)| a.name())
        .collect();
    Some(ran.join("+"))
}

fn sync(device: &CudaDevice) {
    B::sync(device).unwrap();
}

fn bench_row(c: &mut Criterion, row: &Row, ran: &mut BTreeMap<String, BTreeMap<String, String>>) {
    let device = Default::default();
    let name = row.name();
    let subject = Subject::new(row, &device);
    let mut group = c.benchmark_group(format!("cuda/{name}"));
    group.sample_size(10);
    group.warm_up_time(Duration::from_millis(500));
    group.measurement_time(row.measurement);
    for &algorithm in &row.algorithms {
        cudnn::set_algorithm(algorithm);
        let path = path(algorithm);
        let fwd = algorithms_that_ran(|| {
            group.bench_function(BenchmarkId::new(&path, "fwd"), |bench| {
                bench.iter(|| {
                    let y = subject.forward();
                    sync(&device);
                    y
                })
            });
        });
        let fwdbwd = algorithms_that_ran(|| {
            group.bench_function(BenchmarkId::new(&path, "fwdbwd"), |bench| {
                bench.iter(|| {
                    let grads = subject.forward_backward();
                    sync(&device);
                    grads
                })
            });
        });
        for (pass, algorithms) in [("fwd", fwd), ("fwdbwd", fwdbwd)] {
            if let Some(algorithms) = algorithms {
                ran.entry(name.clone())
                    .or_default()
                    .insert(format!("{path}/{pass}"), algorithms);
            }
        }
    }
    cudnn::set_algorithm(RnnAlgorithm::Standard);
    if row.baselines {
        cudnn::set_enabled(false);
        group.bench_function(BenchmarkId::new("reference", "fwd"), |bench| {
            bench.iter(|| {
                let y = subject.forward();
                sync(&device);
                y
            })
        });
        group.bench_function(BenchmarkId::new("reference", "fwdbwd"), |bench| {
            bench.iter(|| {
                let grads = subject.forward_backward();
                sync(&device);
                grads
            })
        });
        cudnn::set_enabled(true);
        let nn = Stack::<A>::new(row.mode, row.h, row.layers, row.bi, &device);
        let nn_inner = Stack::<B>::new(row.mode, row.h, row.layers, row.bi, &device);
        group.bench_function(BenchmarkId::new("burn_nn", "fwd"), |bench| {
            bench.iter(|| {
                let y = nn_inner.forward(subject.x.clone());
                sync(&device);
                y
            })
        });
        group.bench_function(BenchmarkId::new("burn_nn", "fwdbwd"), |bench| {
            bench.iter(|| {
                let x = Tensor::<A, 3>::from_inner(subject.x.clone()).require_grad();
                let grads = nn.forward(x).sum().backward();
                sync(&device);
                grads
            })
        });
    }
    group.finish();
}

/// `BURN_FUSED_RNN_PROFILE=<row>[@<algorithm>]`: the phase table of one row.
fn profile_row(spec: &str) {
    let (name, algorithm) = spec.split_once('@').unwrap_or((spec, "standard"));
    let Some(row) = rows().into_iter().find(|r| r.name() == name) else {
        let names: Vec<String> = rows().iter().map(Row::name).collect();
        panic!(
            "expected BURN_FUSED_RNN_PROFILE to name a row ({}), got {name:?}",
            names.join(", ")
        );
    };
    let algorithm = RnnAlgorithm::CONCRETE
        .into_iter()
        .chain([RnnAlgorithm::Auto])
        .find(|a| a.name() == algorithm)
        .unwrap_or_else(|| panic!("expected an algorithm name after '@', got {algorithm:?}"));
    cudnn::set_algorithm(algorithm);
    let device = Default::default();
    let subject = Subject::new(&row, &device);
    const ITERATIONS: usize = 20;
    for pass in ["fwd", "fwdbwd"] {
        // Warm-up: builds and probes the call shape, fills cubecl's memory pool.
        for _ in 0..3 {
            if pass == "fwd" {
                subject.forward();
            } else {
                subject.forward_backward();
            }
            sync(&device);
        }
        let ran = algorithms_that_ran(|| {
            if pass == "fwd" {
                subject.forward();
            } else {
                subject.forward_backward();
            }
            sync(&device);
        })
        .unwrap_or_else(|| "the reference".into());
        profile::reset();
        profile::enable();
        for _ in 0..ITERATIONS {
            let start = Instant::now();
            if pass == "fwd" && row.f16 {
                subject.forward();
            } else if pass == "fwd" {
                // What `FusedRnn::forward` does, with the concatenation timed apart.
                let w = profile::time(Op::Caller, Phase::WeightsCat, || {
                    let w = subject.inner.flat_weights();
                    sync(&device);
                    w
                });
                fused_rnn(&subject.desc, subject.x.clone(), None, None, w);
            } else if row.f16 {
                subject.forward_backward();
            } else {
                let w = profile::time(Op::Caller, Phase::WeightsCat, || {
                    let w = subject.fused.flat_weights();
                    sync(&device);
                    w
                });
                let x = Tensor::<A, 3>::from_inner(subject.x.clone()).require_grad();
                let y = fused_rnn(&subject.desc, x, None, None, w).output;
                y.sum().backward();
            }
            sync(&device);
            profile::record(Op::Caller, Phase::Iteration, start.elapsed());
        }
        profile::disable();
        println!(
            "\n{name} {pass}, set_algorithm({algorithm}), cuDNN ran: {ran}; {ITERATIONS} iterations\n"
        );
        println!("{}", profile::take());
    }
}

fn benches(c: &mut Criterion) {
    if let Err(reason) = cudnn::cuda_device_available() {
        eprintln!("no CUDA device ({reason}): nothing to benchmark");
        return;
    }
    match cudnn::cudnn_version() {
        Ok(v) => eprintln!("cuDNN {v}"),
        Err(why) => eprintln!("cuDNN not used ({why}): the `cudnn` rows run the reference"),
    }
    if let Ok(spec) = std::env::var("BURN_FUSED_RNN_PROFILE") {
        profile_row(&spec);
        return;
    }
    let mut ran = BTreeMap::new();
    for row in rows() {
        bench_row(c, &row, &mut ran);
    }
    // Merged with an earlier run's file, so that filtered runs add up.
    let dir = std::path::Path::new(
        &std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".into()),
    )
    .join("criterion");
    let file = dir.join("cuda_algorithms.json");
    let mut all: BTreeMap<String, BTreeMap<String, String>> = std::fs::read(&file)
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or_default();
    for (row, paths) in ran {
        all.entry(row).or_default().extend(paths);
    }
    if std::fs::create_dir_all(&dir).is_ok() {
        if let Ok(json) = serde_json::to_string_pretty(&all) {
            let _ = std::fs::write(&file, json);
        }
    }
}

criterion_group!(cuda, benches);
criterion_main!(cuda);
