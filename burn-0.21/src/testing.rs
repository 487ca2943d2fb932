//! The backend-parity suite: proves that a backend's fused op matches the reference.
//!
//! A backend author who implements [`FusedRnnBackend`] for their backend runs this suite
//! to check it against the reference implementation on `NdArray<f64>` (itself tested
//! against PyTorch). Enable the crate's `testing` feature in `[dev-dependencies]` and
//! generate the tests with [`testgen!`](crate::testgen):
//!
//! ```
//! // tests/parity.rs of your crate; here with Flex standing in for your backend.
//! use burn::tensor::DType;
//!
//! burn_fused_rnn::testgen!(my_backend, burn::backend::Flex, Default::default(), [DType::F32, DType::F16]);
//! # fn main() {}
//! ```
//!
//! That gives one `#[test]` per mode (`my_backend::lstm`, `my_backend::gru`,
//! `my_backend::rnn_tanh`, `my_backend::rnn_relu`), each running every [`ParityCase`] of its
//! mode in each listed dtype. Or call [`assert_parity`] / [`check_case`] yourself.
//!
//! # What one case checks
//!
//! With seeded random inputs, initial states, weights and output gradients (the same
//! values on both sides: they are first rounded to the dtype under test, then read back in
//! `f64` for the reference; the reference runs [`crate::reference`]'s functions directly on
//! `NdArray<f64>`, never through a backend's trait impl, so a backend's native kernel is
//! always compared with the reference and never with itself):
//!
//! 1. the inference forward (`fused_rnn_forward`): `y`, `h_n`, `c_n`;
//! 2. under `Autodiff<B>`, the training forward (`fused_rnn_forward_training`, through the
//!    op's single autodiff node): `y`, `h_n`, `c_n` again;
//! 3. the backward of `sum(y∘gy) + sum(h_n∘gh) + sum(c_n∘gc)` (`fused_rnn_backward`):
//!    `dx`, `dh0`, `dc0`, and the gradient of every canonical weight tensor by its PyTorch
//!    name (`dweights[weight_hh_l1_reverse]`).
//!
//! # The grid ([`parity_cases`])
//!
//! Every mode × 1, 2, 3 layers × uni- and bidirectional × full or variable lengths ×
//! batch-first or sequence-first, plus LSTM with projection over the same grid, plus skip
//! input without biases for each mode, plus the *garbage padding* cases: 134 cases, each
//! small (`d_input` 5, `d_hidden` 4, projection 3, `seq_length` 5, `batch_size` 3, lengths
//! `[5, 2, 4]`). Dropout is left out: its masks come from each implementation's own random
//! generator (cuDNN's differs from the reference's), so its outputs are not comparable
//! across implementations.
//!
//! # Garbage padding
//!
//! Padding must never leak (Note [Padding never leaks] in [`crate::op_types`]). In the
//! garbage-padding cases (2-layer bidirectional, variable lengths, every mode, LSTM also
//! with projection, both layouts) every padded slot of the backend's `x` and of the output
//! gradient `dy` holds NaN, ±inf or ±1e30, while the reference runs on the same inputs with
//! zeros there: every output and gradient must still match, and `dx` must be zero in the
//! padded slots.
//!
//! # Tolerances ([`Tolerance::for_dtype`])
//!
//! An element passes when `|got - expected| <= atol + rtol * |expected|`:
//!
//! | dtype | rtol | atol |
//! |---|---|---|
//! | F64 | 1e-9 | 1e-12 |
//! | F32 | 1e-4 | 1e-5 |
//! | F16 | 1e-2 | 5e-3 |
//! | BF16 | 5e-2 | 2e-2 |
//!
//! Half precision allows for rounding of every stored value (outputs, gradients, and on
//! native half kernels the activations between layers); accumulation is expected in F32.
//!
//! A backend whose F32 matrix products run in TF32 (Burn's CUDA matmul on GPUs with tensor
//! cores rounds F32 operands to 10 mantissa bits, and has no switch to turn that off) checks
//! with [`Tolerance::TF32`] (rtol 2e-2, atol 2e-3) through [`assert_parity_with`]. That is
//! about forty units of TF32 rounding (2^-11): the rounding of every product feeds the next
//! step through the recurrence, and gradients sum it over every step. On an H200 the CubeCL
//! kernels' worst element was 8.6e-4 off 0.0187 (an RNN-relu weight gradient), about a third
//! of this tolerance; a wrong gate, index or leaked padding is off by the value itself.
//!
//! # Failures
//!
//! [`ParityFailure`] names the case, the dtype, the tensor, the worst element's index and
//! both values, e.g. `case lstm-L2-bi-proj3-varlen-batch_first, F32: dweights[weight_hh_l1]
//! at [3, 1]: got 0.1243, expected 0.1241 (|diff| 2.0e-4 > 1.2e-5 allowed)`.
//!
//! One file although it passes 700 lines: it is the public suite a backend author reads
//! (the grid, the runner, the comparison and [`testgen!`](crate::testgen) together), and
//! about 100 lines of it are its own tests.

use std::fmt;

use burn::backend::autodiff::Autodiff;
use burn::backend::NdArray;
use burn::tensor::{DType, Tensor, TensorData};

use crate::backend::FusedRnnBackend;
use crate::config::FusedRnnConfig;
use crate::descriptor::{DropoutSpec, RnnDescriptor};
use crate::layout::RnnLayout;
use crate::op_types::{float, prim, RnnInputs, RnnOutputGrads};
use crate::ops::fused_rnn;
use crate::random::SplitMix64;
use crate::spec::{InputMode, RnnMode};

/// The reference backend the suite compares against.
pub type Reference = NdArray<f64>;

/// One configuration of the grid.
#[derive(Debug, Clone, PartialEq)]
pub struct ParityCase {
    /// The cell.
    pub mode: RnnMode,
    /// Stacked layers.
    pub num_layers: usize,
    /// Both directions.
    pub bidirectional: bool,
    /// LSTM projection size.
    pub proj_size: Option<usize>,
    /// Sequences of lengths `[5, 2, 4]` instead of all 5.
    pub variable_lengths: bool,
    /// `[B, T, F]` input and output instead of `[T, B, F]`.
    pub batch_first: bool,
    /// Skip input (`InputMode::Skip`, needs `d_input == d_hidden`) and no biases.
    pub skip_input_no_bias: bool,
    /// NaN, ±inf and ±1e30 in every padded slot of the backend's `x` and `dy` (module
    /// docs); needs `variable_lengths`.
    pub garbage_padding: bool,
}

const D_INPUT: usize = 5;
const D_HIDDEN: usize = 4;
const PROJ: usize = 3;
const SEQ: usize = 5;
const BATCH: usize = 3;
const LENGTHS: [usize; BATCH] = [5, 2, 4];

impl ParityCase {
    /// A short name: `lstm-L2-bi-proj3-varlen-batch_first`.
    pub fn name(&self) -> String {
        let mut name = format!("{}-L{}", self.mode.name(), self.num_layers);
        if self.bidirectional {
            name.push_str("-bi");
        }
        if let Some(p) = self.proj_size {
            name.push_str(&format!("-proj{p}"));
        }
        if self.skip_input_no_bias {
            name.push_str("-skip-nobias");
        }
        if self.garbage_padding {
            name.push_str("-garbage");
        }
        name.push_str(if self.variable_lengths {
            "-varlen"
        } else {
            "-full"
        });
        name.push_str(if self.batch_first {
            "-batch_first"
        } else {
            "-seq_first"
        });
        name
    }

    /// The layer's config.
    pub fn config(&self) -> FusedRnnConfig {
        let d_input = if self.skip_input_no_bias {
            D_HIDDEN
        } else {
            D_INPUT
        };
        let mut config = FusedRnnConfig::new(self.mode, d_input, D_HIDDEN)
            .with_num_layers(self.num_layers)
            .with_bidirectional(self.bidirectional)
            .with_proj_size(self.proj_size)
            .with_batch_first(self.batch_first);
        if self.skip_input_no_bias {
            config = config.with_input_mode(InputMode::Skip).with_bias(false);
        }
        config
    }

    /// The call's descriptor.
    pub fn descriptor(&self) -> RnnDescriptor {
        RnnDescriptor::new(
            self.config().spec(),
            SEQ,
            BATCH,
            self.batch_first,
            self.variable_lengths.then(|| LENGTHS.to_vec()),
            DropoutSpec::NONE,
        )
    }
}

/// The grid of the suite (module docs).
pub fn parity_cases() -> Vec<ParityCase> {
    let modes = [
        RnnMode::Lstm,
        RnnMode::Gru,
        RnnMode::RnnTanh,
        RnnMode::RnnRelu,
    ];
    let mut cases = Vec::new();
    for mode in modes {
        let projections: &[Option<usize>] = if mode == RnnMode::Lstm {
            &[None, Some(PROJ)]
        } else {
            &[None]
        };
        for &proj_size in projections {
            for num_layers in 1..=3 {
                for bidirectional in [false, true] {
                    for variable_lengths in [false, true] {
                        for batch_first in [false, true] {
                            cases.push(ParityCase {
                                mode,
                                num_layers,
                                bidirectional,
                                proj_size,
                                variable_lengths,
                                batch_first,
                                skip_input_no_bias: false,
                                garbage_padding: false,
                            });
                        }
                    }
                }
            }
        }
        cases.push(ParityCase {
            mode,
            num_layers: 2,
            bidirectional: true,
            proj_size: None,
            variable_lengths: true,
            batch_first: true,
            skip_input_no_bias: true,
            garbage_padding: false,
        });
        for &proj_size in projections {
            for batch_first in [false, true] {
                cases.push(ParityCase {
                    mode,
                    num_layers: 2,
                    bidirectional: true,
                    proj_size,
                    variable_lengths: true,
                    batch_first,
                    skip_input_no_bias: false,
                    garbage_padding: true,
                });
            }
        }
    }
    cases
}

/// The values written into padded slots in the garbage-padding cases, in turn.
const GARBAGE: [f64; 5] = [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 1e30, -1e30];

/// Relative and absolute tolerance of one comparison (module docs).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tolerance {
    /// Relative part, times `|expected|`.
    pub rtol: f64,
    /// Absolute part.
    pub atol: f64,
}

impl Tolerance {
    /// F32 storage with matrix products in TF32 (module docs).
    pub const TF32: Tolerance = Tolerance {
        rtol: 2e-2,
        atol: 2e-3,
    };

    /// This tolerance with both parts times `factor`.
    pub fn scaled(self, factor: f64) -> Self {
        Self {
            rtol: self.rtol * factor,
            atol: self.atol * factor,
        }
    }

    /// The suite's tolerance for `dtype` (table in the module docs).
    ///
    /// # Panics
    ///
    /// If `dtype` is not a float dtype.
    pub fn for_dtype(dtype: DType) -> Self {
        let (rtol, atol) = match dtype {
            DType::F64 => (1e-9, 1e-12),
            DType::F32 | DType::Flex32 => (1e-4, 1e-5),
            DType::F16 => (1e-2, 5e-3),
            DType::BF16 => (5e-2, 2e-2),
            other => panic!("expected a float dtype, got {other:?}"),
        };
        Self { rtol, atol }
    }
}

/// The worst element of a failed comparison.
#[derive(Debug, Clone, PartialEq)]
pub struct ParityFailure {
    /// [`ParityCase::name`].
    pub case: String,
    /// The dtype under test.
    pub dtype: DType,
    /// The tensor: `y`, `h_n`, `c_n` (inference forward), `train y`, … (training forward),
    /// `dx`, `dh0`, `dc0`, `dweights[<PyTorch name>]`.
    pub tensor: String,
    /// Index of the worst element (`None` for a shape mismatch).
    pub index: Option<Vec<usize>>,
    /// The backend's value.
    pub got: f64,
    /// The reference's value.
    pub expected: f64,
    /// The tolerance that was exceeded.
    pub tolerance: Tolerance,
    /// Shape mismatch or missing tensor, if that is the failure.
    pub problem: Option<String>,
}

impl fmt::Display for ParityFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "case {}, {:?}: {}", self.case, self.dtype, self.tensor)?;
        if let Some(problem) = &self.problem {
            return write!(f, ": {problem}");
        }
        let allowed = self.tolerance.atol + self.tolerance.rtol * self.expected.abs();
        write!(
            f,
            " at {:?}: got {}, expected {} (|diff| {:.2e} > {:.2e} allowed)",
            self.index.as_deref().unwrap_or(&[]),
            self.got,
            self.expected,
            (self.got - self.expected).abs(),
            allowed
        )
    }
}

impl std::error::Error for ParityFailure {}

/// SplitMix64 values in `[-scale, scale)`: the same inputs on every backend and run.
fn values(seed: u64, n: usize, scale: f64) -> Vec<f64> {
    let mut rng = SplitMix64::new(seed);
    (0..n).map(|_| rng.next_symmetric(scale)).collect()
}

/// One input of a case: its shape and values, already rounded to the dtype under test.
struct Data {
    shape: Vec<usize>,
    values: Vec<f64>,
}

impl Data {
    fn new(seed: u64, shape: &[usize], scale: f64) -> Self {
        Self {
            shape: shape.to_vec(),
            values: values(seed, shape.iter().product(), scale),
        }
    }

    fn to_tensor<B: burn::tensor::backend::Backend, const D: usize>(
        &self,
        device: &B::Device,
        dtype: DType,
    ) -> Tensor<B, D> {
        let data = TensorData::new(self.values.clone(), self.shape.clone()).convert_dtype(dtype);
        Tensor::from_data(data, (device, dtype))
    }

    /// A copy with every padded slot (steps past each sequence's length) of a sequence
    /// tensor in `desc`'s layout set to [`GARBAGE`] values.
    fn with_garbage(&self, desc: &RnnDescriptor) -> Self {
        let features = self.shape[2];
        let mut values = self.values.clone();
        let mut k = 0;
        for t in 0..desc.seq_length {
            for b in 0..desc.batch_size {
                if t < desc.seq_length_of(b) {
                    continue;
                }
                let slot = if desc.batch_first {
                    b * desc.seq_length + t
                } else {
                    t * desc.batch_size + b
                };
                for v in &mut values[slot * features..(slot + 1) * features] {
                    *v = GARBAGE[k % GARBAGE.len()];
                    k += 1;
                }
            }
        }
        Self {
            shape: self.shape.clone(),
            values,
        }
    }

    /// Rounds the values to `dtype`, so that both sides see the same numbers.
    fn round_to(mut self, dtype: DType) -> Self {
        let data = TensorData::new(self.values, self.shape.clone())
            .convert_dtype(dtype)
            .convert_dtype(DType::F64);
        self.values = data.to_vec::<f64>().expect("f64 data");
        self
    }
}

struct CaseData {
    x: Data,
    /// What the backend gets as `x` and `dy`: `x` and `dy`, or with garbage padding.
    x_backend: Data,
    dy_backend: Data,
    h0: Data,
    c0: Option<Data>,
    weights: Data,
    dy: Data,
    dh_n: Data,
    dc_n: Option<Data>,
}

impl CaseData {
    fn new(desc: &RnnDescriptor, dtype: DType, garbage: bool) -> Self {
        let lstm = desc.spec.mode.has_cell_state();
        let w_scale = 1.0 / (desc.spec.d_hidden as f64).sqrt();
        // The reference sees zeros in padded slots; the backend, with garbage padding,
        // NaN, ±inf and ±1e30 there.
        let zero_padded = |d: Data| {
            let mut d = d.with_garbage(desc);
            d.values
                .iter_mut()
                .filter(|v| !v.is_finite() || v.abs() >= 1e30)
                .for_each(|v| *v = 0.0);
            d
        };
        let x = Data::new(1, &desc.input_shape(), 1.0).round_to(dtype);
        let dy = Data::new(5, &desc.output_shape(), 1.0).round_to(dtype);
        let (x, dy) = if garbage {
            (zero_padded(x), zero_padded(dy))
        } else {
            (x, dy)
        };
        let backend = |d: &Data| {
            if garbage {
                d.with_garbage(desc).round_to(dtype)
            } else {
                Data {
                    shape: d.shape.clone(),
                    values: d.values.clone(),
                }
            }
        };
        Self {
            x_backend: backend(&x),
            dy_backend: backend(&dy),
            x,
            h0: Data::new(2, &desc.hidden_shape(), 0.5).round_to(dtype),
            c0: lstm.then(|| Data::new(3, &desc.cell_shape(), 0.5).round_to(dtype)),
            weights: Data::new(4, &[desc.params_size()], w_scale).round_to(dtype),
            dy,
            dh_n: Data::new(6, &desc.hidden_shape(), 1.0).round_to(dtype),
            dc_n: lstm.then(|| Data::new(7, &desc.cell_shape(), 1.0).round_to(dtype)),
        }
    }
}

/// Named results of one side, flattened to `f64`.
type Results = Vec<(String, Vec<usize>, Vec<f64>)>;

fn read<B: burn::tensor::backend::Backend, const D: usize>(
    name: impl Into<String>,
    t: Tensor<B, D>,
) -> (String, Vec<usize>, Vec<f64>) {
    let shape = t.dims().to_vec();
    let values = t
        .into_data()
        .convert_dtype(DType::F64)
        .to_vec::<f64>()
        .expect("f64 data");
    (name.into(), shape, values)
}

/// Splits the flat weight gradient into canonical tensors named after PyTorch's.
fn named_weight_grads(desc: &RnnDescriptor, shape: Vec<usize>, flat: Vec<f64>) -> Results {
    if shape != [desc.params_size()] {
        return vec![("dweights".into(), shape, flat)];
    }
    RnnLayout::new(desc.spec)
        .entries()
        .iter()
        .map(|e| {
            (
                format!("dweights[{}]", e.name()),
                e.shape.clone(),
                flat[e.offset..e.offset + e.len()].to_vec(),
            )
        })
        .collect()
}

/// The reference results of a case: inference outputs, training outputs and gradients.
fn reference_results(desc: &RnnDescriptor, data: &CaseData) -> Results {
    type R = Reference;
    let device = Default::default();
    let f64_ = DType::F64;
    let inputs = || RnnInputs::<R> {
        x: prim(data.x.to_tensor::<R, 3>(&device, f64_)),
        h0: Some(prim(data.h0.to_tensor::<R, 3>(&device, f64_))),
        c0: data
            .c0
            .as_ref()
            .map(|c| prim(c.to_tensor::<R, 3>(&device, f64_))),
        weights: prim(data.weights.to_tensor::<R, 1>(&device, f64_)),
    };
    // The reference's functions, not `R`'s trait impl (module docs).
    let (out, reserve) = crate::reference::forward_training::<R>(desc, inputs());
    let mut results = outputs_named::<R>("", out.y.clone(), out.h_n.clone(), out.c_n.clone());
    results.extend(outputs_named::<R>(
        "train ",
        out.y.clone(),
        out.h_n.clone(),
        out.c_n.clone(),
    ));
    let grads = crate::reference::backward::<R>(
        desc,
        inputs(),
        out,
        reserve,
        RnnOutputGrads {
            dy: Some(prim(data.dy.to_tensor::<R, 3>(&device, f64_))),
            dh_n: Some(prim(data.dh_n.to_tensor::<R, 3>(&device, f64_))),
            dc_n: data
                .dc_n
                .as_ref()
                .map(|c| prim(c.to_tensor::<R, 3>(&device, f64_))),
        },
    );
    results.push(read("dx", float::<R, 3>(grads.dx)));
    results.push(read("dh0", float::<R, 3>(grads.dh0)));
    if let Some(dc0) = grads.dc0 {
        results.push(read("dc0", float::<R, 3>(dc0)));
    }
    let (_, shape, flat) = read("dweights", float::<R, 1>(grads.dweights));
    results.extend(named_weight_grads(desc, shape, flat));
    results
}

fn outputs_named<B: burn::tensor::backend::Backend>(
    prefix: &str,
    y: B::FloatTensorPrimitive,
    h_n: B::FloatTensorPrimitive,
    c_n: Option<B::FloatTensorPrimitive>,
) -> Results {
    let mut results = vec![
        read(format!("{prefix}y"), float::<B, 3>(y)),
        read(format!("{prefix}h_n"), float::<B, 3>(h_n)),
    ];
    if let Some(c_n) = c_n {
        results.push(read(format!("{prefix}c_n"), float::<B, 3>(c_n)));
    }
    results
}

/// The backend's results of a case, in the same order as the reference's.
fn backend_results<B: FusedRnnBackend>(
    desc: &RnnDescriptor,
    data: &CaseData,
    device: &B::Device,
    dtype: DType,
) -> Results {
    // 1. Inference forward, untracked.
    let out = fused_rnn::<B>(
        desc,
        data.x_backend.to_tensor(device, dtype),
        Some(data.h0.to_tensor(device, dtype)),
        data.c0.as_ref().map(|c| c.to_tensor(device, dtype)),
        data.weights.to_tensor(device, dtype),
    );
    let mut results = vec![read("y", out.output), read("h_n", out.hidden)];
    if let Some(c) = out.cell {
        results.push(read("c_n", c));
    }

    // 2. and 3. Training forward and backward through the op's autodiff node.
    type A<B> = Autodiff<B>;
    let x = data
        .x_backend
        .to_tensor::<A<B>, 3>(device, dtype)
        .require_grad();
    let h0 = data.h0.to_tensor::<A<B>, 3>(device, dtype).require_grad();
    let c0 = data
        .c0
        .as_ref()
        .map(|c| c.to_tensor::<A<B>, 3>(device, dtype).require_grad());
    let w = data
        .weights
        .to_tensor::<A<B>, 1>(device, dtype)
        .require_grad();
    let out = fused_rnn::<A<B>>(desc, x.clone(), Some(h0.clone()), c0.clone(), w.clone());
    let mut loss = (out.output.clone() * data.dy_backend.to_tensor::<A<B>, 3>(device, dtype)).sum()
        + (out.hidden.clone() * data.dh_n.to_tensor::<A<B>, 3>(device, dtype)).sum();
    if let (Some(c), Some(dc)) = (&out.cell, &data.dc_n) {
        loss = loss + (c.clone() * dc.to_tensor::<A<B>, 3>(device, dtype)).sum();
    }
    results.push(read("train y", out.output.inner()));
    results.push(read("train h_n", out.hidden.inner()));
    if let Some(c) = out.cell {
        results.push(read("train c_n", c.inner()));
    }
    let grads = loss.backward();
    let missing = |name: &str| -> (String, Vec<usize>, Vec<f64>) {
        (format!("{name} (no gradient)"), Vec::new(), Vec::new())
    };
    results.push(
        x.grad(&grads)
            .map_or_else(|| missing("dx"), |g| read("dx", g)),
    );
    results.push(
        h0.grad(&grads)
            .map_or_else(|| missing("dh0"), |g| read("dh0", g)),
    );
    if let Some(c0) = c0 {
        results.push(
            c0.grad(&grads)
                .map_or_else(|| missing("dc0"), |g| read("dc0", g)),
        );
    }
    match w.grad(&grads) {
        Some(g) => {
            let (_, shape, flat) = read("dweights", g);
            results.extend(named_weight_grads(desc, shape, flat));
        }
        None => results.push(missing("dweights")),
    }
    results
}

fn compare(
    case: &ParityCase,
    dtype: DType,
    tolerance: Tolerance,
    got: &(String, Vec<usize>, Vec<f64>),
    expected: &(String, Vec<usize>, Vec<f64>),
) -> Result<(), Box<ParityFailure>> {
    let failure = |problem: Option<String>, index, got_value: f64, expected_value: f64| {
        Box::new(ParityFailure {
            case: case.name(),
            dtype,
            tensor: expected.0.clone(),
            index,
            got: got_value,
            expected: expected_value,
            tolerance,
            problem,
        })
    };
    if got.0 != expected.0 || got.1 != expected.1 {
        let problem = format!(
            "expected {} of shape {:?}, got {} of shape {:?}",
            expected.0, expected.1, got.0, got.1
        );
        return Err(failure(Some(problem), None, f64::NAN, f64::NAN));
    }
    let mut worst: Option<(usize, f64)> = None;
    for (i, (&g, &e)) in got.2.iter().zip(&expected.2).enumerate() {
        let allowed = tolerance.atol + tolerance.rtol * e.abs();
        let diff = (g - e).abs();
        // A NaN (or infinity) anywhere is the worst element there is.
        let ratio = if diff.is_finite() {
            diff / allowed
        } else {
            f64::INFINITY
        };
        if worst.is_none_or(|(_, w)| ratio > w) {
            worst = Some((i, ratio));
        }
    }
    match worst {
        Some((i, ratio)) if ratio > 1.0 => {
            let index = unravel(i, &expected.1);
            Err(failure(None, Some(index), got.2[i], expected.2[i]))
        }
        _ => Ok(()),
    }
}

fn unravel(mut flat: usize, shape: &[usize]) -> Vec<usize> {
    let mut index = vec![0; shape.len()];
    for (slot, &dim) in index.iter_mut().zip(shape).rev() {
        *slot = flat % dim;
        flat /= dim;
    }
    index
}

/// Runs one case on backend `B` in `dtype` and compares every tensor with the reference.
///
/// Returns the first tensor that fails (in the order forward, training forward, gradients),
/// at its worst element.
pub fn check_case<B: FusedRnnBackend>(
    case: &ParityCase,
    device: &B::Device,
    dtype: DType,
) -> Result<(), Box<ParityFailure>> {
    check_case_with::<B>(case, device, dtype, Tolerance::for_dtype(dtype))
}

/// [`check_case`] with another tolerance than the suite's for `dtype`.
pub fn check_case_with<B: FusedRnnBackend>(
    case: &ParityCase,
    device: &B::Device,
    dtype: DType,
    tolerance: Tolerance,
) -> Result<(), Box<ParityFailure>> {
    let desc = case.descriptor();
    let data = CaseData::new(&desc, dtype, case.garbage_padding);
    let expected = reference_results(&desc, &data);
    let got = backend_results::<B>(&desc, &data, device, dtype);
    if got.len() != expected.len() {
        return Err(Box::new(ParityFailure {
            case: case.name(),
            dtype,
            tensor: "(all)".into(),
            index: None,
            got: f64::NAN,
            expected: f64::NAN,
            tolerance,
            problem: Some(format!(
                "expected {} result tensors, got {}",
                expected.len(),
                got.len()
            )),
        }));
    }
    for (g, e) in got.iter().zip(&expected) {
        compare(case, dtype, tolerance, g, e)?;
    }
    Ok(())
}

/// Runs every case of [`parity_cases`] for which `filter` holds, and panics listing every
/// failing case (its worst tensor element) if any fails.
pub fn assert_parity<B: FusedRnnBackend>(
    device: &B::Device,
    dtype: DType,
    filter: impl Fn(&ParityCase) -> bool,
) {
    assert_parity_with::<B>(device, dtype, Tolerance::for_dtype(dtype), filter);
}

/// [`assert_parity`] with another tolerance than the suite's for `dtype` (for a backend
/// whose F32 products run in TF32, [`Tolerance::TF32`]).
pub fn assert_parity_with<B: FusedRnnBackend>(
    device: &B::Device,
    dtype: DType,
    tolerance: Tolerance,
    filter: impl Fn(&ParityCase) -> bool,
) {
    let cases: Vec<ParityCase> = parity_cases().into_iter().filter(|c| filter(c)).collect();
    assert!(
        !cases.is_empty(),
        "expected at least one parity case, got none"
    );
    let failures: Vec<Box<ParityFailure>> = cases
        .iter()
        .filter_map(|case| check_case_with::<B>(case, device, dtype, tolerance).err())
        .collect();
    if !failures.is_empty() {
        let list: Vec<String> = failures.iter().map(|f| format!("  {f}")).collect();
        panic!(
            "backend {} ({dtype:?}) differs from the reference in {} of {} cases:\n{}",
            B::name(device),
            failures.len(),
            cases.len(),
            list.join("\n")
        );
    }
}

/// Generates the parity tests for a backend: a module `$name` with one `#[test]` per
/// mode (`lstm`, `gru`, `rnn_tanh`, `rnn_relu`), each running its mode's cases of
/// [`parity_cases`] in every dtype listed (F32 when none is).
///
/// ```
/// use burn::tensor::DType;
///
/// burn_fused_rnn::testgen!(ndarray_f32, burn::backend::NdArray<f32>, Default::default());
/// burn_fused_rnn::testgen!(flex_half, burn::backend::Flex, Default::default(), [DType::F16, DType::BF16]);
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! testgen {
    ($name:ident, $backend:ty, $device:expr) => {
        $crate::testgen!($name, $backend, $device, [::burn::tensor::DType::F32]);
    };
    ($name:ident, $backend:ty, $device:expr, [$($dtype:expr),+ $(,)?]) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            fn run(mode: $crate::RnnMode) {
                let device = $device;
                for dtype in [$($dtype),+] {
                    $crate::testing::assert_parity::<$backend>(&device, dtype, |case| {
                        case.mode == mode
                    });
                }
            }

            #[test]
            fn lstm() {
                run($crate::RnnMode::Lstm);
            }

            #[test]
            fn gru() {
                run($crate::RnnMode::Gru);
            }

            #[test]
            fn rnn_tanh() {
                run($crate::RnnMode::RnnTanh);
            }

            #[test]
            fn rnn_relu() {
                run($crate::RnnMode::RnnRelu);
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(values: &[f64]) -> (String, Vec<usize>, Vec<f64>) {
        ("dx".into(), vec![2, 3], values.to_vec())
    }

    fn case() -> ParityCase {
        parity_cases()
            .into_iter()
            .find(|c| c.mode == RnnMode::Gru && c.num_layers == 2 && c.bidirectional)
            .expect("a GRU case")
    }

    #[test]
    fn a_failure_names_case_tensor_and_worst_element() {
        let expected = named(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let got = named(&[1.0, 2.0, 3.0, 4.0, 5.1, 6.0 + 1e-6]);
        let tol = Tolerance::for_dtype(DType::F32);
        let err = compare(&case(), DType::F32, tol, &got, &expected).unwrap_err();
        assert_eq!(err.index, Some(vec![1, 1]));
        assert_eq!((err.got, err.expected), (5.1, 5.0));
        assert_eq!(
            err.to_string(),
            "case gru-L2-bi-full-seq_first, F32: dx at [1, 1]: got 5.1, expected 5 \
             (|diff| 1.00e-1 > 5.10e-4 allowed)"
        );
        // Within tolerance passes; NaN fails.
        assert!(compare(&case(), DType::F32, tol, &expected, &expected).is_ok());
        let nan = named(&[1.0, 2.0, f64::NAN, 4.0, 5.0, 6.0]);
        let err = compare(&case(), DType::F32, tol, &nan, &expected).unwrap_err();
        assert_eq!(err.index, Some(vec![0, 2]));
    }

    /// The tolerance given to `check_case_with` is the one applied: F32 against the F64
    /// reference passes the suite's F32 tolerance and fails a zero one.
    #[test]
    fn check_case_with_applies_its_tolerance() {
        type B = burn::backend::NdArray<f32>;
        let device = Default::default();
        assert!(check_case_with::<B>(
            &case(),
            &device,
            DType::F32,
            Tolerance::for_dtype(DType::F32)
        )
        .is_ok());
        let zero = Tolerance {
            rtol: 0.0,
            atol: 0.0,
        };
        let err = check_case_with::<B>(&case(), &device, DType::F32, zero).unwrap_err();
        assert_eq!(err.tolerance, zero);
        assert_eq!(
            Tolerance::TF32.scaled(2.0),
            Tolerance {
                rtol: 4e-2,
                atol: 4e-3
            }
        );
    }

    #[test]
    fn the_grid_covers_every_axis() {
        let cases = parity_cases();
        assert_eq!(cases.len(), 134);
        let names: std::collections::HashSet<String> = cases.iter().map(|c| c.name()).collect();
        assert_eq!(names.len(), cases.len(), "case names are unique");
        for layers in 1..=3 {
            assert!(cases
                .iter()
                .any(|c| c.num_layers == layers && c.proj_size.is_some() && c.bidirectional));
        }
        assert!(cases
            .iter()
            .all(|c| c.proj_size.is_none() || c.mode == RnnMode::Lstm));
        for mode in [
            RnnMode::Lstm,
            RnnMode::Gru,
            RnnMode::RnnTanh,
            RnnMode::RnnRelu,
        ] {
            assert!(cases
                .iter()
                .any(|c| c.mode == mode && c.garbage_padding && c.variable_lengths));
        }
        // The garbage really sits in the padded slots, and nowhere else.
        let case = cases
            .iter()
            .find(|c| c.garbage_padding)
            .expect("a garbage case");
        let desc = case.descriptor();
        let data = CaseData::new(&desc, DType::F32, true);
        let bad = data
            .x_backend
            .values
            .iter()
            .filter(|v| !v.is_finite() || v.abs() >= 1e30);
        let padded_slots = (0..BATCH).map(|b| SEQ - LENGTHS[b]).sum::<usize>();
        assert_eq!(bad.count(), padded_slots * desc.spec.d_input);
        assert!(data
            .x
            .values
            .iter()
            .all(|v| v.is_finite() && v.abs() < 1e30));
    }
}
