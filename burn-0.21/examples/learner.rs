//! Training with Burn's `Learner` (burn-train): a sequence classifier built on the drop-in
//! LSTM (`burn_fused_rnn::nn::Lstm`, burn-nn's API, one fused op inside).
//!
//! The task, made up here: each sequence is a noisy wave, and its class is how many
//! periods it holds (1, 2, 3 or 4), whatever its amplitude, phase and noise. The model is
//! a 2-layer LSTM whose final state feeds a linear head.
//!
//! What it shows: a `#[derive(Module)]` model over `B: Backend`, `TrainStep` and
//! `InferenceStep`, loss and accuracy metrics, a checkpoint through the recorder after
//! every epoch, and a second training run that resumes from the first one's checkpoint.
//! It prints one line of metrics per epoch, then the final validation accuracy.
//!
//! Run:
//!
//! ```sh
//! cargo run --release --example learner              # 6 epochs: 3, then 3 more resumed from the checkpoint
//! cargo run --example learner -- --quick             # what CI runs: less data, 2 + 1 epochs
//! cargo run --release --example learner -- --tui     # Burn's own renderer instead of the epoch lines
//! cargo run --release --example learner -- --devices 2  # burn-train's multi-device strategy
//! ```
//!
//! `--devices N` trains with `ExecutionStrategy::multi` over `N` device handles
//! (`MultiDeviceOptim::OptimMainDevice`): burn-train splits each epoch's data in `N`
//! parts, runs one worker per device at once, sums their gradients and steps once. On the
//! CPU the handles all name NdArray's one device, so it shows the strategy running the
//! fused op from several threads, not a speed-up; `tests/multi_device.rs` checks that such
//! a run gives the weights of a single-device run on the same batches.
//!
//! `--tui` shows Burn's text UI when Burn's `tui` feature is enabled (in your own crate:
//! `burn = { version = "0.21", features = ["train", "tui"] }`; here:
//! `cargo run --release --example learner --features burn/tui -- --tui`); without it,
//! Burn's plain renderer prints every iteration.

use burn::backend::{Autodiff, NdArray};
use burn::data::dataloader::batcher::Batcher;
use burn::data::dataloader::{DataLoader, DataLoaderBuilder};
use burn::data::dataset::InMemDataset;
use burn::module::Module;
use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::{Linear, LinearConfig};
use burn::optim::AdamConfig;
use burn::record::CompactRecorder;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Int, Tensor, TensorData};
use burn::train::metric::{AccuracyMetric, LossMetric, MetricDefinition, MetricId, NumericEntry};
use burn::train::renderer::{
    EvaluationName, EvaluationProgress, MetricState, MetricsRenderer, MetricsRendererEvaluation,
    MetricsRendererTraining, ProgressType, TrainingProgress,
};
use burn::train::{
    ClassificationOutput, ExecutionStrategy, InferenceStep, Learner, MultiDeviceOptim,
    SupervisedTraining, TrainOutput, TrainStep,
};
use burn_fused_rnn::nn::{Lstm, LstmConfig};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

type B = Autodiff<NdArray>;

const CLASSES: usize = 4;
const STEPS: usize = 32;

/// The sizes of a run: the full one, or `--quick`.
struct Plan {
    train: usize,
    valid: usize,
    /// Epochs of the first run; the second resumes from its last checkpoint.
    first: usize,
    /// Epochs in all.
    total: usize,
}

const FULL: Plan = Plan {
    train: 4096,
    valid: 1024,
    first: 3,
    total: 6,
};
const QUICK: Plan = Plan {
    train: 1536,
    valid: 512,
    first: 2,
    total: 4,
};

#[derive(Module, Debug)]
struct SequenceClassifier<B: Backend> {
    lstm: Lstm<B>,
    head: Linear<B>,
}

impl<B: Backend> SequenceClassifier<B> {
    fn new(device: &B::Device) -> Self {
        Self {
            lstm: LstmConfig::new(1, 48, true).with_num_layers(2).init(device),
            head: LinearConfig::new(48, CLASSES).init(device),
        }
    }

    /// `[batch_size, seq_length, 1]` -> logits `[batch_size, CLASSES]`, from the top
    /// layer's final hidden state.
    fn forward(&self, inputs: Tensor<B, 3>) -> Tensor<B, 2> {
        let (_, state) = self.lstm.forward(inputs, None);
        self.head.forward(state.hidden)
    }

    fn classify(&self, batch: SequenceBatch<B>) -> ClassificationOutput<B> {
        let output = self.forward(batch.inputs);
        let loss = CrossEntropyLossConfig::new()
            .init(&output.device())
            .forward(output.clone(), batch.targets.clone());
        ClassificationOutput {
            loss,
            output,
            targets: batch.targets,
        }
    }
}

impl<B: AutodiffBackend> TrainStep for SequenceClassifier<B> {
    type Input = SequenceBatch<B>;
    type Output = ClassificationOutput<B>;

    fn step(&self, batch: SequenceBatch<B>) -> TrainOutput<ClassificationOutput<B>> {
        let item = self.classify(batch);
        TrainOutput::new(self, item.loss.backward(), item)
    }
}

impl<B: Backend> InferenceStep for SequenceClassifier<B> {
    type Input = SequenceBatch<B>;
    type Output = ClassificationOutput<B>;

    fn step(&self, batch: SequenceBatch<B>) -> ClassificationOutput<B> {
        self.classify(batch)
    }
}

/// One sequence and its class.
#[derive(Clone, Debug)]
struct Sequence {
    values: Vec<f32>,
    label: usize,
}

/// `count` sequences, deterministic in `seed`: class `c` holds `c + 1` periods of a sine
/// of random amplitude and phase, plus noise.
fn sequences(count: usize, seed: u64) -> Vec<Sequence> {
    let mut rng = burn_fused_rnn::random::SplitMix64::new(seed);
    let mut uniform = move || rng.next_f64() as f32;
    (0..count)
        .map(|i| {
            let label = i % CLASSES;
            let (amplitude, phase) = (0.5 + uniform(), std::f32::consts::TAU * uniform());
            let values = (0..STEPS)
                .map(|t| {
                    let angle =
                        std::f32::consts::TAU * (label + 1) as f32 * t as f32 / STEPS as f32;
                    amplitude * (angle + phase).sin() + 0.4 * (uniform() - 0.5)
                })
                .collect();
            Sequence { values, label }
        })
        .collect()
}

#[derive(Clone, Debug)]
struct SequenceBatch<B: Backend> {
    /// `[batch_size, STEPS, 1]`.
    inputs: Tensor<B, 3>,
    /// `[batch_size]`.
    targets: Tensor<B, 1, Int>,
}

#[derive(Clone, Default)]
struct SequenceBatcher;

impl<B: Backend> Batcher<B, Sequence, SequenceBatch<B>> for SequenceBatcher {
    fn batch(&self, items: Vec<Sequence>, device: &B::Device) -> SequenceBatch<B> {
        let n = items.len();
        let values: Vec<f32> = items.iter().flat_map(|s| s.values.clone()).collect();
        let labels: Vec<i64> = items.iter().map(|s| s.label as i64).collect();
        SequenceBatch {
            inputs: Tensor::from_data(TensorData::new(values, [n, STEPS, 1]), device),
            targets: Tensor::from_data(TensorData::new(labels, [n]), device),
        }
    }
}

/// A renderer that prints one line per epoch: each metric's mean over the epoch's
/// batches, in training and in validation. (Burn's summary, `.summary()`, reads the metric
/// logs, which a resumed run writes from `epoch-1` again; this counts the epochs the
/// Learner reports.)
#[derive(Default)]
struct EpochLines {
    names: HashMap<MetricId, String>,
    epoch: usize,
    total: usize,
    /// `(split, metric)` -> (sum of value × items, items) over the current epoch.
    sums: BTreeMap<(&'static str, String), (f64, f64)>,
    /// The entries of the batch whose progress comes next (Burn reports a batch's metrics,
    /// then its progress).
    pending: Vec<(&'static str, MetricState)>,
}

impl EpochLines {
    fn add(&mut self, split: &'static str, state: MetricState) {
        self.pending.push((split, state));
    }

    fn commit(&mut self, split: &'static str, state: MetricState) {
        if let MetricState::Numeric(entry, value) = state {
            let name = self
                .names
                .get(&entry.metric_id)
                .cloned()
                .unwrap_or_default();
            let (current, items) = match value {
                NumericEntry::Value(v) => (v, 1.0),
                NumericEntry::Aggregated {
                    aggregated_value,
                    count,
                } => (aggregated_value, count as f64),
            };
            let sum = self.sums.entry((split, name)).or_default();
            *sum = (sum.0 + current * items, sum.1 + items);
        }
    }

    /// Prints the line of the epoch that ran, if any, and starts `epoch`.
    fn start(&mut self, progress: &TrainingProgress) {
        let epoch = progress.global_progress.items_processed;
        if epoch != self.epoch {
            self.flush();
            (self.epoch, self.total) = (epoch, progress.global_progress.items_total);
        }
        for (split, state) in std::mem::take(&mut self.pending) {
            self.commit(split, state);
        }
    }

    fn flush(&mut self) {
        if self.sums.is_empty() {
            return;
        }
        let line: Vec<String> = std::mem::take(&mut self.sums)
            .into_iter()
            .map(|((split, name), (sum, items))| format!("{split} {name} {:.3}", sum / items))
            .collect();
        println!("epoch {}/{}  {}", self.epoch, self.total, line.join("  "));
    }
}

impl MetricsRendererTraining for EpochLines {
    fn update_train(&mut self, state: MetricState) {
        self.add("train", state);
    }
    fn update_valid(&mut self, state: MetricState) {
        self.add("valid", state);
    }
    fn render_train(&mut self, item: TrainingProgress, _: Vec<ProgressType>) {
        self.start(&item);
    }
    fn render_valid(&mut self, item: TrainingProgress, _: Vec<ProgressType>) {
        self.start(&item);
    }
    fn on_train_end(
        &mut self,
        _: Option<burn::train::LearnerSummary>,
    ) -> Result<(), Box<dyn std::error::Error>> {
        self.flush();
        Ok(())
    }
}

impl MetricsRendererEvaluation for EpochLines {
    fn update_test(&mut self, _: EvaluationName, _: MetricState) {}
    fn render_test(&mut self, _: EvaluationProgress, _: Vec<ProgressType>) {}
}

impl MetricsRenderer for EpochLines {
    fn manual_close(&mut self) {
        self.flush();
    }
    fn register_metric(&mut self, definition: MetricDefinition) {
        self.names.insert(definition.metric_id, definition.name);
    }
}

/// Trains for epochs `1..=epochs` (resuming after epoch `resume` when given), with a
/// checkpoint after every epoch; returns the trained model (without autodiff).
fn train(
    dir: &std::path::Path,
    plan: &Plan,
    epochs: usize,
    resume: Option<usize>,
    tui: bool,
    devices: usize,
) -> SequenceClassifier<NdArray> {
    let device: burn::tensor::Device<B> = Default::default();
    B::seed(&device, 18);
    let mut training = SupervisedTraining::new(
        dir,
        loader::<B>(plan.train, 1, true),
        loader::<NdArray>(plan.valid, 2, false),
    )
    .metrics((AccuracyMetric::new(), LossMetric::new()))
    .with_file_checkpointer(CompactRecorder::new())
    .num_epochs(epochs);
    if let Some(epoch) = resume {
        training = training.checkpoint(epoch);
    }
    if !tui {
        training = training.renderer(EpochLines::default());
    }
    if devices > 1 {
        let strategy =
            ExecutionStrategy::multi(vec![device; devices], MultiDeviceOptim::OptimMainDevice);
        training = training.with_training_strategy(strategy.into());
    }
    // With `resume`, the Learner replaces these weights (and the optimizer's state) by the
    // checkpoint's.
    let model = SequenceClassifier::<B>::new(&device);
    training
        .launch(Learner::new(model, AdamConfig::new().init(), 1e-2))
        .model
}

/// Batches of 64 of `count` sequences made from `seed`, in a new order every epoch when
/// `shuffle`.
fn loader<B: Backend>(
    count: usize,
    seed: u64,
    shuffle: bool,
) -> Arc<dyn DataLoader<B, SequenceBatch<B>>> {
    let builder = DataLoaderBuilder::new(SequenceBatcher).batch_size(64);
    let builder = if shuffle {
        builder.shuffle(seed)
    } else {
        builder
    };
    builder.build(InMemDataset::new(sequences(count, seed)))
}

/// The share of `data` that `model` classifies right.
fn accuracy(model: &SequenceClassifier<NdArray>, data: Vec<Sequence>) -> f64 {
    let device = Default::default();
    let mut right = 0;
    let total = data.len();
    for chunk in data.chunks(256) {
        let batch: SequenceBatch<NdArray> = SequenceBatcher.batch(chunk.to_vec(), &device);
        let predicted = model.forward(batch.inputs).argmax(1).flatten::<1>(0, 1);
        let hits = predicted.equal(batch.targets).int().sum().into_scalar();
        right += hits as usize;
    }
    right as f64 / total as f64
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let plan = if args.iter().any(|a| a == "--quick") {
        QUICK
    } else {
        FULL
    };
    let tui = args.iter().any(|a| a == "--tui");
    let devices = match args.iter().position(|a| a == "--devices") {
        Some(i) => args
            .get(i + 1)
            .and_then(|n| n.parse::<usize>().ok())
            .filter(|&n| n >= 1)
            .unwrap_or_else(|| {
                panic!(
                    "expected a number of devices (1 or more) after --devices, got {:?}",
                    args.get(i + 1)
                )
            }),
        None => 1,
    };
    let dir = std::env::temp_dir().join("burn-fused-rnn-learner");
    // A fresh directory: the checkpoints of an earlier run must not be resumed from.
    let _ = std::fs::remove_dir_all(&dir);

    println!(
        "2-layer LSTM (burn_fused_rnn::nn::Lstm) classifying {} noisy waves by their number of periods",
        plan.train
    );
    if devices > 1 {
        println!("on {devices} device handles (burn-train's multi-device strategy)");
    }
    println!("training epochs 1..={}", plan.first);
    train(&dir, &plan, plan.first, None, tui, devices);
    println!(
        "resuming from the checkpoint of epoch {} ({}) for epochs {}..={}",
        plan.first,
        dir.join("checkpoint").display(),
        plan.first + 1,
        plan.total
    );
    let model = train(&dir, &plan, plan.total, Some(plan.first), tui, devices);
    let accuracy = accuracy(&model, sequences(plan.valid, 2));
    println!(
        "final validation accuracy: {:.1}% ({} sequences)",
        100.0 * accuracy,
        plan.valid
    );
}
