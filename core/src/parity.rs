//! The engine of the front-ends' backend-parity suites (`burn_fused_rnn::testing`, feature
//! `testing`, on either Burn line): the grid of cases, their seeded inputs, the tolerances,
//! and the comparison that names a failure's case, tensor and worst element. Nothing here
//! runs an RNN: each front-end runs a case on the backend under test and on its reference
//! (Burn tensor ops in `f64` on NdArray), reads both back as [`Named`] `f64` tensors, and
//! hands them to [`compare_all`].
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
//! # Inputs ([`CaseData`])
//!
//! SplitMix64 values, the same on every backend and run: `x` and the output gradients in
//! `[-1, 1)`, the initial states in `[-0.5, 0.5)`, the weights in `±1/sqrt(d_hidden)`. Each
//! is rounded to the dtype under test by the front-end's rounding function, so that the
//! backend (in that dtype) and the reference (in `f64`) see the same numbers.
//!
//! # Garbage padding
//!
//! Padding must never leak. In the garbage-padding cases (2-layer bidirectional, variable
//! lengths, every mode, LSTM also with projection, both layouts) every padded slot of the
//! backend's `x` and of its output gradient `dy` holds NaN, ±inf or ±1e30 ([`GARBAGE`]),
//! while the reference runs on the same inputs with zeros there: every output and gradient
//! must still match, and `dx` must be zero in the padded slots.
//!
//! # Tolerances ([`Tolerance`])
//!
//! An element passes when `|got - expected| <= atol + rtol * |expected|`:
//!
//! | dtype | rtol | atol |
//! |---|---|---|
//! | F64 | 1e-9 | 1e-12 |
//! | F32 | 1e-4 | 1e-5 |
//! | F16 | 1e-2 | 5e-3 |
//! | BF16 | 5e-2 | 2e-2 |
//! | F32 with TF32 products | 2e-2 | 2e-3 |
//!
//! Half precision allows for rounding of every stored value (outputs, gradients, and on
//! native half kernels the activations between layers); accumulation is expected in F32.
//! TF32 (F32 operands rounded to 10 mantissa bits, as Burn's CUDA matmul does on GPUs with
//! tensor cores) is about forty units of its rounding (2^-11): the rounding of every product
//! feeds the next step through the recurrence, and gradients sum it over every step.

use std::fmt;

use crate::descriptor::{DropoutSpec, RnnDescriptor};
use crate::layout::RnnLayout;
use crate::random::SplitMix64;
use crate::spec::{RnnMode, RnnSpec};

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
    /// Skip input (needs `d_input == d_hidden`) and no biases.
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

    /// The layer's spec: `d_input` 5 (4 with skip input), `d_hidden` 4.
    pub fn spec(&self) -> RnnSpec {
        let d_input = if self.skip_input_no_bias {
            D_HIDDEN
        } else {
            D_INPUT
        };
        RnnSpec {
            proj_size: self.proj_size,
            num_layers: self.num_layers,
            bidirectional: self.bidirectional,
            skip_input: self.skip_input_no_bias,
            bias: !self.skip_input_no_bias,
            ..RnnSpec::new(self.mode, d_input, D_HIDDEN)
        }
    }

    /// The call's descriptor: `seq_length` 5, `batch_size` 3, no dropout.
    pub fn descriptor(&self) -> RnnDescriptor {
        RnnDescriptor::new(
            self.spec(),
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
    let plain = |mode, proj_size| ParityCase {
        mode,
        num_layers: 2,
        bidirectional: true,
        proj_size,
        variable_lengths: true,
        batch_first: true,
        skip_input_no_bias: false,
        garbage_padding: false,
    };
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
                                num_layers,
                                bidirectional,
                                variable_lengths,
                                batch_first,
                                ..plain(mode, proj_size)
                            });
                        }
                    }
                }
            }
        }
        cases.push(ParityCase {
            skip_input_no_bias: true,
            ..plain(mode, None)
        });
        for &proj_size in projections {
            for batch_first in [false, true] {
                cases.push(ParityCase {
                    batch_first,
                    garbage_padding: true,
                    ..plain(mode, proj_size)
                });
            }
        }
    }
    cases
}

/// The values written into padded slots in the garbage-padding cases, in turn.
pub const GARBAGE: [f64; 5] = [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 1e30, -1e30];

/// Relative and absolute tolerance of one comparison (module docs).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tolerance {
    /// Relative part, times `|expected|`.
    pub rtol: f64,
    /// Absolute part.
    pub atol: f64,
}

impl Tolerance {
    /// F64.
    pub const F64: Tolerance = Tolerance {
        rtol: 1e-9,
        atol: 1e-12,
    };
    /// F32.
    pub const F32: Tolerance = Tolerance {
        rtol: 1e-4,
        atol: 1e-5,
    };
    /// F16 storage, F32 accumulation.
    pub const F16: Tolerance = Tolerance {
        rtol: 1e-2,
        atol: 5e-3,
    };
    /// BF16 storage, F32 accumulation.
    pub const BF16: Tolerance = Tolerance {
        rtol: 5e-2,
        atol: 2e-2,
    };
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

    /// The largest difference allowed from `expected`.
    pub fn allowed(self, expected: f64) -> f64 {
        self.atol + self.rtol * expected.abs()
    }
}

/// The worst element of a failed comparison.
#[derive(Debug, Clone, PartialEq)]
pub struct ParityFailure {
    /// [`ParityCase::name`].
    pub case: String,
    /// The dtype under test, as the front-end names it (`F32`, `BF16`, ...).
    pub dtype: String,
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
        write!(f, "case {}, {}: {}", self.case, self.dtype, self.tensor)?;
        if let Some(problem) = &self.problem {
            return write!(f, ": {problem}");
        }
        write!(
            f,
            " at {:?}: got {}, expected {} (|diff| {:.2e} > {:.2e} allowed)",
            self.index.as_deref().unwrap_or(&[]),
            self.got,
            self.expected,
            (self.got - self.expected).abs(),
            self.tolerance.allowed(self.expected)
        )
    }
}

impl std::error::Error for ParityFailure {}

/// A tensor of `f64` values with its shape, row-major: one input of a case, or one result
/// of a side, by name.
#[derive(Debug, Clone, PartialEq)]
pub struct Named {
    /// The tensor's name in the suite (see [`ParityFailure::tensor`]); empty for inputs.
    pub name: String,
    /// Its shape.
    pub shape: Vec<usize>,
    /// Its values, row-major.
    pub values: Vec<f64>,
}

impl Named {
    /// A named result.
    pub fn new(name: impl Into<String>, shape: Vec<usize>, values: Vec<f64>) -> Self {
        Self {
            name: name.into(),
            shape,
            values,
        }
    }

    /// A result the backend did not produce (an input without a gradient): it fails the
    /// comparison with a message naming it.
    pub fn missing(name: &str) -> Self {
        Self::new(format!("{name} (no gradient)"), Vec::new(), Vec::new())
    }

    /// SplitMix64 values in `[-scale, scale)`, rounded by `round`.
    fn seeded(
        seed: u64,
        shape: &[usize],
        scale: f64,
        round: &dyn Fn(Vec<f64>) -> Vec<f64>,
    ) -> Self {
        let mut rng = SplitMix64::new(seed);
        let n = shape.iter().product();
        let values = round((0..n).map(|_| rng.next_symmetric(scale)).collect());
        assert_eq!(
            values.len(),
            n,
            "expected the rounding function to keep {n} values, got {}",
            values.len()
        );
        Self::new("", shape.to_vec(), values)
    }

    /// A copy with every padded slot (steps past each sequence's length) of a sequence
    /// tensor in `desc`'s layout set to `fill(k)` for the `k`-th padded value.
    fn with_padding(&self, desc: &RnnDescriptor, fill: impl Fn(usize) -> f64) -> Self {
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
                    *v = fill(k);
                    k += 1;
                }
            }
        }
        Self::new(self.name.clone(), self.shape.clone(), values)
    }
}

/// The inputs of one case, in `f64`, already rounded to the dtype under test.
#[derive(Debug, Clone)]
pub struct CaseData {
    /// The reference's input (zeros in padded slots in garbage cases).
    pub x: Named,
    /// The backend's input: `x`, or with [`GARBAGE`] in every padded slot.
    pub x_backend: Named,
    /// The backend's output gradient: `dy`, or with [`GARBAGE`] in every padded slot.
    pub dy_backend: Named,
    /// Initial hidden state.
    pub h0: Named,
    /// Initial cell state (LSTM).
    pub c0: Option<Named>,
    /// Flat canonical weights.
    pub weights: Named,
    /// The reference's output gradient.
    pub dy: Named,
    /// Gradient of the final hidden state.
    pub dh_n: Named,
    /// Gradient of the final cell state (LSTM).
    pub dc_n: Option<Named>,
}

impl CaseData {
    /// The inputs of `case`, each rounded by `round` (which gets the values in `f64` and
    /// returns them rounded to the dtype under test, read back in `f64`).
    pub fn new(case: &ParityCase, round: &dyn Fn(Vec<f64>) -> Vec<f64>) -> Self {
        let desc = case.descriptor();
        let lstm = desc.spec.mode.has_cell_state();
        let w_scale = 1.0 / (desc.spec.d_hidden as f64).sqrt();
        let x = Named::seeded(1, &desc.input_shape(), 1.0, round);
        let dy = Named::seeded(5, &desc.output_shape(), 1.0, round);
        let (x, dy, x_backend, dy_backend) = if case.garbage_padding {
            // The reference sees zeros in padded slots; the backend, the garbage (in the
            // dtype under test once the front-end makes a tensor of it: ±1e30 is ±inf in F16).
            let garbage = |k: usize| GARBAGE[k % GARBAGE.len()];
            (
                x.with_padding(&desc, |_| 0.0),
                dy.with_padding(&desc, |_| 0.0),
                x.with_padding(&desc, garbage),
                dy.with_padding(&desc, garbage),
            )
        } else {
            (x.clone(), dy.clone(), x, dy)
        };
        Self {
            x,
            x_backend,
            dy_backend,
            h0: Named::seeded(2, &desc.hidden_shape(), 0.5, round),
            c0: lstm.then(|| Named::seeded(3, &desc.cell_shape(), 0.5, round)),
            weights: Named::seeded(4, &[desc.params_size()], w_scale, round),
            dy,
            dh_n: Named::seeded(6, &desc.hidden_shape(), 1.0, round),
            dc_n: lstm.then(|| Named::seeded(7, &desc.cell_shape(), 1.0, round)),
        }
    }
}

/// Splits a flat weight gradient into canonical tensors named after PyTorch's
/// (`dweights[weight_hh_l1_reverse]`); one tensor `dweights` if it has the wrong shape.
pub fn named_weight_grads(desc: &RnnDescriptor, shape: Vec<usize>, flat: Vec<f64>) -> Vec<Named> {
    if shape != [desc.params_size()] {
        return vec![Named::new("dweights", shape, flat)];
    }
    RnnLayout::new(desc.spec)
        .entries()
        .iter()
        .map(|e| {
            Named::new(
                format!("dweights[{}]", e.name()),
                e.shape.clone(),
                flat[e.offset..e.offset + e.len()].to_vec(),
            )
        })
        .collect()
}

/// Compares a backend's results with the reference's, tensor by tensor in order, and
/// returns the first tensor that fails, at its worst element (a NaN or infinity anywhere
/// is the worst element there is).
pub fn compare_all(
    case: &ParityCase,
    dtype: &str,
    tolerance: Tolerance,
    got: &[Named],
    expected: &[Named],
) -> Result<(), Box<ParityFailure>> {
    let failure = |tensor: &str, problem: Option<String>, index, got: f64, expected: f64| {
        Box::new(ParityFailure {
            case: case.name(),
            dtype: dtype.to_string(),
            tensor: tensor.to_string(),
            index,
            got,
            expected,
            tolerance,
            problem,
        })
    };
    if got.len() != expected.len() {
        let problem = format!(
            "expected {} result tensors, got {}",
            expected.len(),
            got.len()
        );
        return Err(failure("(all)", Some(problem), None, f64::NAN, f64::NAN));
    }
    for (g, e) in got.iter().zip(expected) {
        if g.name != e.name || g.shape != e.shape || g.values.len() != e.values.len() {
            let problem = format!(
                "expected {} of shape {:?}, got {} of shape {:?}",
                e.name, e.shape, g.name, g.shape
            );
            return Err(failure(&e.name, Some(problem), None, f64::NAN, f64::NAN));
        }
        let mut worst: Option<(usize, f64)> = None;
        for (i, (&gv, &ev)) in g.values.iter().zip(&e.values).enumerate() {
            let diff = (gv - ev).abs();
            let ratio = if diff == 0.0 {
                0.0
            } else if diff.is_finite() {
                diff / tolerance.allowed(ev) // infinite for a zero tolerance
            } else {
                f64::INFINITY
            };
            if worst.is_none_or(|(_, w)| ratio > w) {
                worst = Some((i, ratio));
            }
        }
        if let Some((i, ratio)) = worst {
            if ratio > 1.0 {
                let index = unravel(i, &e.shape);
                return Err(failure(
                    &e.name,
                    None,
                    Some(index),
                    g.values[i],
                    e.values[i],
                ));
            }
        }
    }
    Ok(())
}

/// Runs `check` on every case and panics listing every failing case (its worst tensor
/// element) if any fails; `backend` names the backend in the message.
///
/// # Panics
///
/// If `cases` is empty, or if a case fails.
pub fn assert_cases(
    backend: &str,
    dtype: &str,
    cases: &[ParityCase],
    check: impl Fn(&ParityCase) -> Result<(), Box<ParityFailure>>,
) {
    assert!(
        !cases.is_empty(),
        "expected at least one parity case, got none"
    );
    let failures: Vec<String> = cases
        .iter()
        .filter_map(|case| check(case).err())
        .map(|f| format!("  {f}"))
        .collect();
    if !failures.is_empty() {
        panic!(
            "backend {backend} ({dtype}) differs from the reference in {} of {} cases:\n{}",
            failures.len(),
            cases.len(),
            failures.join("\n")
        );
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

#[cfg(test)]
mod tests {
    use super::*;

    fn named(values: &[f64]) -> Vec<Named> {
        vec![Named::new("dx", vec![2, 3], values.to_vec())]
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
        let tol = Tolerance::F32;
        let err = compare_all(&case(), "F32", tol, &got, &expected).unwrap_err();
        assert_eq!(err.index, Some(vec![1, 1]));
        assert_eq!((err.got, err.expected), (5.1, 5.0));
        assert_eq!(
            err.to_string(),
            "case gru-L2-bi-full-seq_first, F32: dx at [1, 1]: got 5.1, expected 5 \
             (|diff| 1.00e-1 > 5.10e-4 allowed)"
        );
        // Within tolerance passes; NaN fails; so do a missing gradient and a short list.
        assert!(compare_all(&case(), "F32", tol, &expected, &expected).is_ok());
        let nan = named(&[1.0, 2.0, f64::NAN, 4.0, 5.0, 6.0]);
        let err = compare_all(&case(), "F32", tol, &nan, &expected).unwrap_err();
        assert_eq!(err.index, Some(vec![0, 2]));
        let err = compare_all(&case(), "F32", tol, &[Named::missing("dx")], &expected).unwrap_err();
        assert!(err.to_string().contains("got dx (no gradient)"), "{err}");
        let err = compare_all(&case(), "F32", tol, &[], &expected).unwrap_err();
        assert!(
            err.to_string().contains("expected 1 result tensors, got 0"),
            "{err}"
        );
        // The same difference fails a zero tolerance (whose first elements are equal:
        // 0 / 0 must not hide the rest) and passes a scaled one; equal values pass it.
        let zero = Tolerance::F32.scaled(0.0);
        let err = compare_all(&case(), "F32", zero, &got, &expected).unwrap_err();
        assert_eq!(err.index, Some(vec![1, 1]));
        assert!(compare_all(&case(), "F32", zero, &expected, &expected).is_ok());
        assert!(compare_all(&case(), "F32", tol.scaled(1e3), &got, &expected).is_ok());
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
            let skip = cases
                .iter()
                .find(|c| c.mode == mode && c.skip_input_no_bias)
                .expect("a skip-input case");
            let spec = skip.spec();
            assert!(spec.skip_input && !spec.bias && spec.d_input == spec.d_hidden);
        }
    }

    /// The garbage sits in the padded slots of the backend's `x` and `dy`, and nowhere
    /// else; the reference's inputs are finite, with zeros there.
    #[test]
    fn garbage_fills_the_padded_slots_only() {
        let cases = parity_cases();
        let case = cases
            .iter()
            .find(|c| c.garbage_padding && !c.batch_first)
            .expect("a garbage case");
        let desc = case.descriptor();
        let data = CaseData::new(case, &|v| v);
        let is_bad = |v: &f64| !v.is_finite() || v.abs() >= 1e30;
        let padded_slots = (0..BATCH).map(|b| SEQ - LENGTHS[b]).sum::<usize>();
        let bad = data.x_backend.values.iter().filter(|v| is_bad(v)).count();
        assert_eq!(bad, padded_slots * desc.spec.d_input);
        let bad = data.dy_backend.values.iter().filter(|v| is_bad(v)).count();
        assert_eq!(bad, padded_slots * desc.spec.output_size());
        assert!(!data.x.values.iter().any(is_bad));
        // Sequence-first: step 2 of sequence 1 (length 2) is padding, step 1 is not.
        let features = desc.spec.d_input;
        let slot = |t: usize, b: usize| (t * BATCH + b) * features;
        assert!(is_bad(&data.x_backend.values[slot(2, 1)]));
        assert_eq!(data.x.values[slot(2, 1)], 0.0);
        assert!(!is_bad(&data.x_backend.values[slot(1, 1)]));
        assert_eq!(
            data.x.values[slot(1, 1)..slot(1, 1) + features],
            data.x_backend.values[slot(1, 1)..slot(1, 1) + features]
        );
    }

    /// Every input passes through the rounding function.
    #[test]
    fn inputs_are_rounded_by_the_front_end() {
        let case = &parity_cases()[0];
        let data = CaseData::new(case, &|v| {
            v.into_iter().map(|x| (x * 4.0).round() / 4.0).collect()
        });
        for t in [&data.x, &data.h0, &data.weights, &data.dy, &data.dh_n] {
            assert!(t.values.iter().all(|v| (v * 4.0).fract() == 0.0));
        }
        assert!(data.c0.is_some() && data.dc_n.is_some());
    }
}
