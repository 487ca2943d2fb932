//! Training through the fused op: a 2-layer LSTM (unidirectional: a next-step predictor must
//! not see the future) + linear head predicts the next value of noisy sine waves. Adam, one progress line per epoch, a checkpoint (model
//! and optimizer state) at the halfway point, then a resume from that checkpoint that
//! continues where training was.
//!
//! Run: `cargo run --release --example train`

use burn::backend::{Autodiff, NdArray};
use burn::module::{AutodiffModule, Module};
use burn::nn::{Linear, LinearConfig};
use burn::optim::{AdamConfig, GradientsParams, Optimizer};
use burn::record::{BinFileRecorder, FullPrecisionSettings, NamedMpkFileRecorder, Recorder};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Tensor, TensorData};
use burn_fused_rnn::{FusedRnn, FusedRnnBackend, FusedRnnConfig, RnnMode};

type B = Autodiff<NdArray>;

const EPOCHS: usize = 20;
const BATCHES: usize = 4;
const BATCH: usize = 32;
const STEPS: usize = 30;
const LR: f64 = 0.01;

#[derive(Module, Debug)]
struct SinePredictor<B: Backend> {
    rnn: FusedRnn<B>,
    head: Linear<B>,
}

impl<B: FusedRnnBackend> SinePredictor<B> {
    fn new(device: &B::Device) -> Self {
        Self {
            rnn: FusedRnnConfig::new(RnnMode::Lstm, 1, 32)
                .with_num_layers(2)
                .with_bidirectional(false)
                .init(device),
            head: LinearConfig::new(32, 1).init(device),
        }
    }

    /// `x`: `[batch, steps, 1]` -> next-value predictions `[batch, steps, 1]`.
    fn forward(&self, x: Tensor<B, 3>) -> Tensor<B, 3> {
        let (y, _) = self.rnn.forward(x, None);
        self.head.forward(y)
    }
}

/// A batch of noisy sine waves (input) and the same waves one step later (target),
/// deterministic in `seed`.
fn batch<B: Backend>(seed: u64, device: &B::Device) -> (Tensor<B, 3>, Tensor<B, 3>) {
    let mut rng = burn_fused_rnn::random::SplitMix64::new(seed);
    let mut uniform = move || rng.next_f64() as f32;
    let (mut xs, mut ys) = (Vec::new(), Vec::new());
    for _ in 0..BATCH {
        let (freq, phase) = (0.2 + 0.3 * uniform(), std::f32::consts::TAU * uniform());
        let wave: Vec<f32> = (0..=STEPS)
            .map(|t| (freq * t as f32 + phase).sin() + 0.05 * (uniform() - 0.5))
            .collect();
        xs.extend_from_slice(&wave[..STEPS]);
        ys.extend_from_slice(&wave[1..]);
    }
    let t = |v: Vec<f32>| Tensor::from_data(TensorData::new(v, [BATCH, STEPS, 1]), device);
    (t(xs), t(ys))
}

fn mse<B: Backend>(pred: Tensor<B, 3>, target: Tensor<B, 3>) -> Tensor<B, 1> {
    let d = pred - target;
    (d.clone() * d).mean()
}

/// Runs epochs `from..to`, printing one line each; returns the model and optimizer.
fn train<O: Optimizer<SinePredictor<B>, B>>(
    mut model: SinePredictor<B>,
    mut optim: O,
    from: usize,
    to: usize,
    device: &burn::backend::ndarray::NdArrayDevice,
) -> (SinePredictor<B>, O) {
    for epoch in from..to {
        let mut total = 0.0;
        for b in 0..BATCHES {
            let (x, y) = batch::<B>((epoch * BATCHES + b) as u64, device);
            let loss = mse(model.forward(x), y);
            total += loss.clone().into_scalar();
            let grads = GradientsParams::from_grads(loss.backward(), &model);
            model = optim.step(LR, model, grads);
        }
        let valid = valid_loss(&model, device);
        println!(
            "epoch {:>2}  train loss {:.5}  valid loss {valid:.5}",
            epoch + 1,
            total / BATCHES as f32
        );
    }
    (model, optim)
}

/// Loss on held-out waves, without autodiff.
fn valid_loss(model: &SinePredictor<B>, device: &burn::backend::ndarray::NdArrayDevice) -> f32 {
    let (x, y) = batch::<<B as AutodiffBackend>::InnerBackend>(1_000_000, device);
    mse(model.valid().forward(x), y).into_scalar()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let device = Default::default();
    let dir = std::env::temp_dir().join("burn-fused-rnn-train");
    std::fs::create_dir_all(&dir)?;
    let (model_path, optim_path) = (dir.join("model"), dir.join("optim"));
    let model_rec = NamedMpkFileRecorder::<FullPrecisionSettings>::new();
    let optim_rec = BinFileRecorder::<FullPrecisionSettings>::new();

    println!("2-layer LSTM (fused) + linear head, next-step prediction of noisy sine waves");
    let half = EPOCHS / 2;
    let (model, optim) = train(
        SinePredictor::<B>::new(&device),
        AdamConfig::new().init(),
        0,
        half,
        &device,
    );
    let saved_model = model.clone();
    model.save_file(model_path.clone(), &model_rec)?;
    optim_rec.record(optim.to_record(), optim_path.clone())?;
    println!("checkpoint saved after epoch {half}: {}", dir.display());

    // Resume in a fresh model and optimizer, from the files alone.
    let model = SinePredictor::<B>::new(&device).load_file(model_path, &model_rec, &device)?;
    let optim = AdamConfig::new()
        .init()
        .load_record(optim_rec.load(optim_path, &device)?);
    let (saved, resumed) = (
        valid_loss(&saved_model, &device),
        valid_loss(&model, &device),
    );
    println!("resumed from the checkpoint: valid loss {resumed:.5} (at save: {saved:.5})");
    assert_eq!(
        saved, resumed,
        "the resumed model differs from the saved one"
    );
    train(model, optim, half, EPOCHS, &device);
    Ok(())
}
