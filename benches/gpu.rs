//! GPU benchmark (feature `cuda`): the cuDNN path, the reference path on Cuda, and
//! burn-nn's `Lstm`/`BiLstm`/`Gru`/`BiGru` stacks on Cuda, timed in the same run, plus
//! `benches/torch_rnn.py` (`torch.nn.LSTM`/`GRU` on cuDNN) on the same machine.
//!
//! Sizes (issue #5): LSTM and GRU, I = H ∈ {256, 1024}, B ∈ {32, 128}, T = 100, 2 layers,
//! uni- and bidirectional; forward alone (`fwd`, inference) and forward + backward of
//! `sum(y)` under `Autodiff` (`fwdbwd`). f32, TF32 off.
//!
//! Run on a GPU machine (README, "GPU"):
//! `cargo bench --features cuda --bench gpu` then `python3 benches/torch_rnn.py` and
//! `python3 benches/cuda_ratios.py`. Without a CUDA device it prints why and measures
//! nothing.

use burn::backend::{Autodiff, Cuda};
use burn::module::AutodiffModule;
use burn::nn::{BiGru, BiGruConfig, BiLstm, BiLstmConfig, Gru, GruConfig, Lstm, LstmConfig};
use burn::tensor::backend::Backend;
use burn::tensor::{Distribution, Tensor};
use burn_fused_rnn::{cudnn, FusedRnnConfig, RnnMode};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};

type B = Cuda;
type A = Autodiff<Cuda>;

const SEQ: usize = 100;
const LAYERS: usize = 2;

/// burn-nn's modules stacked into a 2-layer (bi)directional RNN.
enum Stack<Bk: Backend> {
    Lstm(Vec<Lstm<Bk>>),
    BiLstm(Vec<BiLstm<Bk>>),
    Gru(Vec<Gru<Bk>>),
    BiGru(Vec<BiGru<Bk>>),
}

impl<Bk: Backend> Stack<Bk> {
    fn new(mode: RnnMode, h: usize, bi: bool, device: &Bk::Device) -> Self {
        let input = |l: usize| if l == 0 || !bi { h } else { 2 * h };
        let layers = 0..LAYERS;
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

fn benches(c: &mut Criterion) {
    if let Err(reason) = cudnn::cuda_device_available() {
        eprintln!("no CUDA device ({reason}): nothing to benchmark");
        return;
    }
    match cudnn::cudnn_version() {
        Ok(v) => eprintln!("cuDNN {v}"),
        Err(why) => eprintln!("cuDNN not used ({why}): the `cudnn` rows run the reference"),
    }
    let device = Default::default();
    for mode in [RnnMode::Lstm, RnnMode::Gru] {
        for h in [256, 1024] {
            for batch in [32, 128] {
                for bi in [false, true] {
                    let dir = if bi { "bi" } else { "uni" };
                    let name = format!("{}_H{h}_B{batch}_T{SEQ}_L{LAYERS}_{dir}", mode.name());
                    let mut group = c.benchmark_group(format!("cuda/{name}"));
                    group.sample_size(10);
                    group.warm_up_time(std::time::Duration::from_millis(500));
                    group.measurement_time(std::time::Duration::from_secs(2));
                    let fused = FusedRnnConfig::new(mode, h, h)
                        .with_num_layers(LAYERS)
                        .with_bidirectional(bi)
                        .init::<A>(&device);
                    let fused_inner = fused.valid();
                    let nn = Stack::<A>::new(mode, h, bi, &device);
                    let nn_inner = Stack::<B>::new(mode, h, bi, &device);
                    let x = Tensor::<B, 3>::random([batch, SEQ, h], Distribution::Default, &device);
                    for (path, use_cudnn) in [("cudnn", true), ("reference", false)] {
                        cudnn::set_enabled(use_cudnn);
                        group.bench_function(BenchmarkId::new(path, "fwd"), |bench| {
                            bench.iter(|| {
                                let (y, _) = fused_inner.forward(x.clone(), None);
                                B::sync(&device).unwrap();
                                y
                            })
                        });
                        group.bench_function(BenchmarkId::new(path, "fwdbwd"), |bench| {
                            bench.iter(|| {
                                let x = Tensor::<A, 3>::from_inner(x.clone()).require_grad();
                                let (y, _) = fused.forward(x, None);
                                let grads = y.sum().backward();
                                B::sync(&device).unwrap();
                                grads
                            })
                        });
                    }
                    cudnn::set_enabled(true);
                    group.bench_function(BenchmarkId::new("burn_nn", "fwd"), |bench| {
                        bench.iter(|| {
                            let y = nn_inner.forward(x.clone());
                            B::sync(&device).unwrap();
                            y
                        })
                    });
                    group.bench_function(BenchmarkId::new("burn_nn", "fwdbwd"), |bench| {
                        bench.iter(|| {
                            let x = Tensor::<A, 3>::from_inner(x.clone()).require_grad();
                            let grads = nn.forward(x).sum().backward();
                            B::sync(&device).unwrap();
                            grads
                        })
                    });
                    group.finish();
                }
            }
        }
    }
}

criterion_group!(cuda, benches);
criterion_main!(cuda);
