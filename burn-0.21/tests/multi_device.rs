//! Training with the drop-in layers under burn-train's multi-device strategy
//! (`ExecutionStrategy::multi(devices, MultiDeviceOptim::OptimMainDevice)`), built like
//! examples/learner.rs: a Learner run over two device handles gives the losses and the
//! weights of a single-device run on the same batches, within float rounding.
//!
//! What "the same batches" means: burn-train splits the training set in halves, one per
//! device (`split_dataloader`), runs batch `k` of each half at once (one thread per
//! device, each calling the fused op), sums the two gradients and takes one optimizer
//! step. The single-device run is burn-train's own loop with `grads_accumulation(2)` on a
//! training set ordered so that batch `2k` is the first half's batch `k` and batch `2k + 1`
//! the second half's: the same pairs of batches, summed, one step each.
//!
//! The CPU backends have one device each (`NdArrayDevice::Cpu`, `FlexDevice`), so the two
//! handles name the same device; burn-train accepts that, and it still runs two workers
//! at once on the fused op, which is what this checks.
//!
//! Wgpu is not run: Burn 0.21's multi-device strategy initializes collective
//! communication between the devices, and cubecl-runtime 0.10's wgpu server does not
//! implement it. Over two lavapipe handles (`WgpuDevice::DefaultDevice` and
//! `WgpuDevice::Cpu`) each worker panics with `not implemented` at
//! `cubecl-runtime-0.10.0/src/server/base.rs:468` (`ComputeServer::comm_init`).

use std::sync::{Arc, Mutex};

use burn::backend::{Autodiff, Flex, NdArray};
use burn::data::dataloader::batcher::Batcher;
use burn::data::dataloader::{DataLoader, DataLoaderBuilder};
use burn::data::dataset::InMemDataset;
use burn::module::{AutodiffModule, Module, ModuleVisitor, Param};
use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::{Linear, LinearConfig};
use burn::optim::AdamConfig;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Int, Tensor, TensorData};
use burn::train::metric::{LossMetric, MetricDefinition, NumericEntry};
use burn::train::renderer::{
    EvaluationName, EvaluationProgress, MetricState, MetricsRenderer, MetricsRendererEvaluation,
    MetricsRendererTraining, ProgressType, TrainingProgress,
};
use burn::train::{
    ClassificationOutput, ExecutionStrategy, InferenceStep, Learner, MultiDeviceOptim,
    SupervisedTraining, TrainOutput, TrainStep,
};
use burn_fused_rnn::nn::{BiGru, BiGruConfig, Lstm, LstmConfig};

const STEPS: usize = 8;
const CLASSES: usize = 3;
const ITEMS: usize = 64;
const BATCH: usize = 8;
const EPOCHS: usize = 2;

#[derive(Module, Debug)]
struct Classifier<B: Backend> {
    lstm: Lstm<B>,
    bigru: BiGru<B>,
    head: Linear<B>,
}

impl<B: Backend> Classifier<B> {
    fn new(device: &B::Device) -> Self {
        Self {
            lstm: LstmConfig::new(2, 12, true).with_num_layers(2).init(device),
            bigru: BiGruConfig::new(12, 6, true).init(device),
            head: LinearConfig::new(12, CLASSES).init(device),
        }
    }

    fn classify(&self, batch: Batch<B>) -> ClassificationOutput<B> {
        let (y, _) = self.lstm.forward(batch.inputs, None);
        let (y, _) = self.bigru.forward(y, None);
        let output = self.head.forward(y.mean_dim(1).squeeze_dim(1));
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

impl<B: AutodiffBackend> TrainStep for Classifier<B> {
    type Input = Batch<B>;
    type Output = ClassificationOutput<B>;

    fn step(&self, batch: Batch<B>) -> TrainOutput<ClassificationOutput<B>> {
        let item = self.classify(batch);
        TrainOutput::new(self, item.loss.backward(), item)
    }
}

impl<B: Backend> InferenceStep for Classifier<B> {
    type Input = Batch<B>;
    type Output = ClassificationOutput<B>;

    fn step(&self, batch: Batch<B>) -> ClassificationOutput<B> {
        self.classify(batch)
    }
}

#[derive(Clone, Debug)]
struct Item {
    values: Vec<f32>,
    label: usize,
}

#[derive(Clone, Debug)]
struct Batch<B: Backend> {
    inputs: Tensor<B, 3>,
    targets: Tensor<B, 1, Int>,
}

#[derive(Clone, Default)]
struct Batches;

impl<B: Backend> Batcher<B, Item, Batch<B>> for Batches {
    fn batch(&self, items: Vec<Item>, device: &B::Device) -> Batch<B> {
        let n = items.len();
        let values: Vec<f32> = items.iter().flat_map(|s| s.values.clone()).collect();
        let labels: Vec<i64> = items.iter().map(|s| s.label as i64).collect();
        Batch {
            inputs: Tensor::from_data(TensorData::new(values, [n, STEPS, 2]), device),
            targets: Tensor::from_data(TensorData::new(labels, [n]), device),
        }
    }
}

/// `ITEMS` items: class `c` drifts by `c - 1` per step, plus noise.
fn items(seed: u64) -> Vec<Item> {
    let mut rng = burn_fused_rnn::random::SplitMix64::new(seed);
    (0..ITEMS)
        .map(|i| {
            let label = i % CLASSES;
            let values = (0..STEPS * 2)
                .map(|t| (label as f64 - 1.0) * (t / 2) as f64 * 0.2 + rng.next_symmetric(0.5))
                .map(|v| v as f32)
                .collect();
            Item { values, label }
        })
        .collect()
}

/// Batch `2k` of the result is batch `k` of the first half, batch `2k + 1` batch `k` of
/// the second (module docs).
fn interleaved(items: &[Item]) -> Vec<Item> {
    let (first, second) = items.split_at(items.len() / 2);
    first
        .chunks(BATCH)
        .zip(second.chunks(BATCH))
        .flat_map(|(a, b)| a.iter().chain(b).cloned())
        .collect()
}

fn loader<B: Backend>(items: Vec<Item>) -> Arc<dyn DataLoader<B, Batch<B>>> {
    DataLoaderBuilder::new(Batches)
        .batch_size(BATCH)
        .build(InMemDataset::new(items))
}

/// Records the loss of every training batch, per epoch, and prints nothing.
#[derive(Clone, Default)]
struct Losses(Arc<Mutex<Vec<(usize, f64)>>>);

impl MetricsRendererTraining for Losses {
    fn update_train(&mut self, state: MetricState) {
        // One batch's loss: a value, or an aggregate of one.
        let loss = match state {
            MetricState::Numeric(_, NumericEntry::Value(v)) => v,
            MetricState::Numeric(
                _,
                NumericEntry::Aggregated {
                    aggregated_value,
                    count: 1,
                },
            ) => aggregated_value,
            other => panic!("expected one batch's loss, got {other:?}"),
        };
        self.0.lock().unwrap().push((usize::MAX, loss));
    }
    fn update_valid(&mut self, _: MetricState) {}
    fn render_train(&mut self, item: TrainingProgress, _: Vec<ProgressType>) {
        // A batch's metrics come before its progress: stamp them with its epoch.
        let epoch = item.global_progress.items_processed;
        for entry in self.0.lock().unwrap().iter_mut() {
            if entry.0 == usize::MAX {
                entry.0 = epoch;
            }
        }
    }
    fn render_valid(&mut self, _: TrainingProgress, _: Vec<ProgressType>) {}
}

impl MetricsRendererEvaluation for Losses {
    fn update_test(&mut self, _: EvaluationName, _: MetricState) {}
    fn render_test(&mut self, _: EvaluationProgress, _: Vec<ProgressType>) {}
}

impl MetricsRenderer for Losses {
    fn manual_close(&mut self) {}
    fn register_metric(&mut self, _: MetricDefinition) {}
}

/// Every float parameter's values, in the module's order.
struct Values(Vec<Vec<f32>>);

impl<B: Backend> ModuleVisitor<B> for Values {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        self.0
            .push(param.val().into_data().convert::<f32>().to_vec().unwrap());
    }
}

/// Trains `model` with `strategy` (single device when `None`, with gradients of two
/// batches summed per step) and returns the trained model and each epoch's losses, sorted
/// (the two workers of a multi-device step report in either order).
fn train<B: AutodiffBackend>(
    test: &str,
    model: Classifier<B>,
    train_items: Vec<Item>,
    strategy: Option<ExecutionStrategy<B>>,
) -> (Classifier<B::InnerBackend>, Vec<Vec<f64>>)
where
    B::InnerBackend: Backend,
{
    let dir = std::env::temp_dir().join(format!(
        "burn-fused-rnn-multi-device-{}-{test}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    let losses = Losses::default();
    let mut training = SupervisedTraining::new(
        &dir,
        loader::<B>(train_items),
        loader::<B::InnerBackend>(items(9)[..16].to_vec()),
    )
    .metrics((LossMetric::new(),))
    .renderer(losses.clone())
    .num_epochs(EPOCHS);
    training = match strategy {
        Some(strategy) => training.with_training_strategy(strategy.into()),
        None => training.grads_accumulation(2),
    };
    let trained = training
        .launch(Learner::new(model, AdamConfig::new().init(), 1e-2))
        .model;
    let mut per_epoch = vec![Vec::new(); EPOCHS];
    for &(epoch, loss) in losses.0.lock().unwrap().iter() {
        assert!(
            (1..=EPOCHS).contains(&epoch),
            "{test}: a loss of epoch {epoch}"
        );
        per_epoch[epoch - 1].push(loss);
    }
    for epoch in &mut per_epoch {
        epoch.sort_by(f64::total_cmp);
    }
    (trained, per_epoch)
}

/// Asserts that the run on two devices (`multi`) ended where the run on one did
/// (`single`), and that training moved the weights away from `start`.
fn compare<B: Backend>(
    test: &str,
    start: &Values,
    (multi, losses_multi): (&Classifier<B>, &[Vec<f64>]),
    (single, losses_single): (&Classifier<B>, &[Vec<f64>]),
) {
    for (epoch, (a, b)) in losses_multi.iter().zip(losses_single).enumerate() {
        assert_eq!(
            a.len(),
            ITEMS / BATCH,
            "{test}: epoch {}: batches",
            epoch + 1
        );
        for (x, y) in a.iter().zip(b) {
            assert!(
                (x - y).abs() <= 1e-5 * y.abs(),
                "{test}: epoch {}: loss {x} on two devices, {y} on one",
                epoch + 1
            );
        }
    }
    let (mut got, mut expected) = (Values(vec![]), Values(vec![]));
    multi.visit(&mut got);
    single.visit(&mut expected);
    let mut moved = 0.0f32;
    for (k, ((g, e), s)) in got.0.iter().zip(&expected.0).zip(&start.0).enumerate() {
        for (i, ((a, b), c)) in g.iter().zip(e).zip(s).enumerate() {
            assert!(
                (a - b).abs() <= 1e-5 * (1.0 + b.abs()),
                "{test}: parameter {k}[{i}]: {a} after two devices, {b} after one"
            );
            moved = moved.max((b - c).abs());
        }
    }
    assert!(
        moved > 1e-3,
        "{test}: training did not move the weights ({moved})"
    );
}

fn two_devices_train_as_one<B: AutodiffBackend>(test: &str, device: B::Device) {
    let model = Classifier::<B>::new(&device);
    // Read every parameter before cloning: Burn draws a parameter lazily, at its first
    // read, and a clone of one never read would draw its own values.
    let mut start = Values(vec![]);
    model.valid().visit(&mut start);
    let data = items(5);
    let (single, losses_single) = train(test, model.clone(), interleaved(&data), None);
    let strategy = ExecutionStrategy::multi(
        vec![device.clone(), device],
        MultiDeviceOptim::OptimMainDevice,
    );
    let (multi, losses_multi) = train(test, model.clone(), data, Some(strategy));

    compare(
        test,
        &start,
        (&multi, &losses_multi),
        (&single, &losses_single),
    );
}

#[test]
fn two_ndarray_devices_train_as_one() {
    two_devices_train_as_one::<Autodiff<NdArray>>("ndarray", Default::default());
}

#[test]
fn two_flex_devices_train_as_one() {
    two_devices_train_as_one::<Autodiff<Flex>>("flex", Default::default());
}
