//! Training through the fused op on Burn 0.22: a 2-layer LSTM (unidirectional: a next-step
//! predictor must not see the future) + linear head predicts the next value of noisy sine
//! waves. Adam, one progress line per epoch, a checkpoint (`save_file`, burnpack, PyTorch's
//! names as the layer's keys) at the halfway point, then a resume from it.
//!
//! Run: `cargo run --release --example train` (in `burn-0.22/`); `-- --quick` runs 4 epochs
//! (what CI runs). `BURN_DEVICE=ndarray` runs on NdArray instead of Flex.

use burn::module::Module;
use burn::nn::{Linear, LinearConfig};
use burn::optim::{AdamConfig, GradientsParams};
use burn::tensor::{Device, Tensor, TensorData};
use burn_fused_rnn::{FusedRnn, FusedRnnConfig, RnnMode};

const BATCHES: usize = 4;
const BATCH: usize = 32;
const STEPS: usize = 30;
const LR: f64 = 0.01;

#[derive(Module, Debug)]
struct SinePredictor {
    rnn: FusedRnn,
    head: Linear,
}

impl SinePredictor {
    fn new(device: &Device) -> Self {
        Self {
            rnn: FusedRnnConfig::new(RnnMode::Lstm, 1, 32)
                .with_num_layers(2)
                .init(device),
            head: LinearConfig::new(32, 1).init(device),
        }
    }

    /// `x`: `[batch, steps, 1]` -> next-value predictions `[batch, steps, 1]`.
    fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        let (y, _) = self.rnn.forward(x, None);
        self.head.forward(y)
    }
}

/// A batch of noisy sine waves (input) and the same waves one step later (target),
/// deterministic in `seed`.
fn batch(seed: u64, device: &Device) -> (Tensor<3>, Tensor<3>) {
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

fn mse(pred: Tensor<3>, target: Tensor<3>) -> Tensor<1> {
    let d = pred - target;
    (d.clone() * d).mean()
}

/// Loss on held-out waves, without autodiff (`valid()`).
fn valid_loss(model: &SinePredictor, device: &Device) -> f32 {
    let (x, y) = batch(1_000_000, device);
    mse(model.valid().forward(x), y).into_scalar()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let quick = std::env::args().any(|a| a == "--quick");
    let epochs = if quick { 4 } else { 20 };
    let device = Device::default().autodiff();
    let dir = std::env::temp_dir().join("burn-fused-rnn-022-train");
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("model.bpk");

    println!("2-layer LSTM (fused) + linear head, next-step prediction of noisy sine waves");
    println!("device: {device:?}");
    let mut model = SinePredictor::new(&device);
    let mut optim = AdamConfig::new().init();
    let first = valid_loss(&model, &device);
    println!("before training: valid loss {first:.5}");
    let mut last = first;
    for epoch in 0..epochs {
        if epoch == epochs / 2 {
            model.clone().save_file(&path)?;
            // Resume: a fresh model loads the checkpoint and carries on.
            model = SinePredictor::new(&device).load_file(&path);
            println!("checkpoint saved and reloaded: {}", path.display());
        }
        let mut total = 0.0;
        for b in 0..BATCHES {
            let (x, y) = batch((epoch * BATCHES + b) as u64, &device);
            let loss = mse(model.forward(x), y);
            total += loss.clone().into_scalar::<f32>();
            let grads = GradientsParams::from_grads(loss.backward(), &model);
            model = optim.step(LR, model, grads);
        }
        last = valid_loss(&model, &device);
        println!(
            "epoch {:>2}  train loss {:.5}  valid loss {last:.5}",
            epoch + 1,
            total / BATCHES as f32
        );
    }
    assert!(
        last < first * 0.5,
        "expected training to halve the validation loss, got {first} -> {last}"
    );
    println!("validation loss {first:.5} -> {last:.5}");
    std::fs::remove_dir_all(&dir).ok();
    Ok(())
}
