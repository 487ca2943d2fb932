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
//! # The grid, the inputs, the tolerances
//!
//! They are the core crate's (`burn_fused_rnn_core::parity`, shared with the Burn 0.22
//! line): 134 small cases ([`parity_cases`]: every mode × 1–3 layers × both directions ×
//! full or variable lengths × both layouts, LSTM with projection, skip input without
//! biases, and *garbage padding*: NaN, ±inf and ±1e30 in every padded slot of the backend's
//! `x` and `dy`, which must change nothing, Note [Padding never leaks] in
//! [`crate::op_types`]); no dropout (masks come from each implementation's own generator).
//! An element passes when `|got - expected| <= atol + rtol * |expected|`, with
//! [`tolerance`]`(dtype)`: F64 1e-9 / 1e-12, F32 1e-4 / 1e-5, F16 1e-2 / 5e-3, BF16 5e-2 /
//! 2e-2 (rtol / atol; half precision stores rounded values and accumulates in F32).
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

use burn::backend::autodiff::Autodiff;
use burn::backend::NdArray;
use burn::tensor::{DType, Tensor, TensorData};
use burn_fused_rnn_core::parity::{assert_cases, compare_all, named_weight_grads, CaseData, Named};
pub use burn_fused_rnn_core::parity::{parity_cases, ParityCase, ParityFailure, Tolerance};

use crate::backend::FusedRnnBackend;
use crate::descriptor::{GradsWanted, RnnDescriptor};
use crate::op_types::{float, prim, RnnInputs, RnnOutputGrads};
use crate::ops::fused_rnn;

/// The reference backend the suite compares against.
pub type Reference = NdArray<f64>;

/// The suite's tolerance for `dtype` (module docs).
///
/// # Panics
///
/// If `dtype` is not a float dtype.
pub fn tolerance(dtype: DType) -> Tolerance {
    match dtype {
        DType::F64 => Tolerance::F64,
        DType::F32 | DType::Flex32 => Tolerance::F32,
        DType::F16 => Tolerance::F16,
        DType::BF16 => Tolerance::BF16,
        other => panic!("expected a float dtype, got {other:?}"),
    }
}

/// Values rounded to `dtype` and read back in `f64`.
fn round_to(dtype: DType) -> impl Fn(Vec<f64>) -> Vec<f64> {
    move |values| {
        let n = values.len();
        TensorData::new(values, [n])
            .convert_dtype(dtype)
            .convert_dtype(DType::F64)
            .to_vec::<f64>()
            .expect("f64 data")
    }
}

fn tensor<B: burn::tensor::backend::Backend, const D: usize>(
    t: &Named,
    device: &B::Device,
    dtype: DType,
) -> Tensor<B, D> {
    let data = TensorData::new(t.values.clone(), t.shape.clone()).convert_dtype(dtype);
    Tensor::from_data(data, (device, dtype))
}

fn read<B: burn::tensor::backend::Backend, const D: usize>(
    name: impl Into<String>,
    t: Tensor<B, D>,
) -> Named {
    let shape = t.dims().to_vec();
    let values = t
        .into_data()
        .convert_dtype(DType::F64)
        .to_vec::<f64>()
        .expect("f64 data");
    Named::new(name, shape, values)
}

fn weight_grads(desc: &RnnDescriptor, grad: Named) -> Vec<Named> {
    named_weight_grads(desc, grad.shape, grad.values)
}

/// The reference results of a case: inference outputs, training outputs and gradients.
fn reference_results(desc: &RnnDescriptor, data: &CaseData) -> Vec<Named> {
    type R = Reference;
    let device = Default::default();
    let f64_ = DType::F64;
    let inputs = || RnnInputs::<R> {
        x: prim(tensor::<R, 3>(&data.x, &device, f64_)),
        h0: Some(prim(tensor::<R, 3>(&data.h0, &device, f64_))),
        c0: data
            .c0
            .as_ref()
            .map(|c| prim(tensor::<R, 3>(c, &device, f64_))),
        weights: prim(tensor::<R, 1>(&data.weights, &device, f64_)),
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
            dy: Some(prim(tensor::<R, 3>(&data.dy, &device, f64_))),
            dh_n: Some(prim(tensor::<R, 3>(&data.dh_n, &device, f64_))),
            dc_n: data
                .dc_n
                .as_ref()
                .map(|c| prim(tensor::<R, 3>(c, &device, f64_))),
        },
        GradsWanted::ALL,
    );
    let dx = grads.dx.expect("the reference returns every gradient");
    results.push(read("dx", float::<R, 3>(dx)));
    results.push(read("dh0", float::<R, 3>(grads.dh0)));
    if let Some(dc0) = grads.dc0 {
        results.push(read("dc0", float::<R, 3>(dc0)));
    }
    results.extend(weight_grads(
        desc,
        read(
            "dweights",
            float::<R, 1>(
                grads
                    .dweights
                    .expect("the reference returns every gradient"),
            ),
        ),
    ));
    results
}

fn outputs_named<B: burn::tensor::backend::Backend>(
    prefix: &str,
    y: B::FloatTensorPrimitive,
    h_n: B::FloatTensorPrimitive,
    c_n: Option<B::FloatTensorPrimitive>,
) -> Vec<Named> {
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
) -> Vec<Named> {
    // 1. Inference forward, untracked.
    let out = fused_rnn::<B>(
        desc,
        tensor(&data.x_backend, device, dtype),
        Some(tensor(&data.h0, device, dtype)),
        data.c0.as_ref().map(|c| tensor(c, device, dtype)),
        tensor(&data.weights, device, dtype),
    );
    let mut results = vec![read("y", out.output), read("h_n", out.hidden)];
    if let Some(c) = out.cell {
        results.push(read("c_n", c));
    }

    // 2. and 3. Training forward and backward through the op's autodiff node.
    type A<B> = Autodiff<B>;
    let x = tensor::<A<B>, 3>(&data.x_backend, device, dtype).require_grad();
    let h0 = tensor::<A<B>, 3>(&data.h0, device, dtype).require_grad();
    let c0 = data
        .c0
        .as_ref()
        .map(|c| tensor::<A<B>, 3>(c, device, dtype).require_grad());
    let w = tensor::<A<B>, 1>(&data.weights, device, dtype).require_grad();
    let out = fused_rnn::<A<B>>(desc, x.clone(), Some(h0.clone()), c0.clone(), w.clone());
    let mut loss = (out.output.clone() * tensor::<A<B>, 3>(&data.dy_backend, device, dtype)).sum()
        + (out.hidden.clone() * tensor::<A<B>, 3>(&data.dh_n, device, dtype)).sum();
    if let (Some(c), Some(dc)) = (&out.cell, &data.dc_n) {
        loss = loss + (c.clone() * tensor::<A<B>, 3>(dc, device, dtype)).sum();
    }
    results.push(read("train y", out.output.inner()));
    results.push(read("train h_n", out.hidden.inner()));
    if let Some(c) = out.cell {
        results.push(read("train c_n", c.inner()));
    }
    let grads = loss.backward();
    results.push(
        x.grad(&grads)
            .map_or_else(|| Named::missing("dx"), |g| read("dx", g)),
    );
    results.push(
        h0.grad(&grads)
            .map_or_else(|| Named::missing("dh0"), |g| read("dh0", g)),
    );
    if let Some(c0) = c0 {
        results.push(
            c0.grad(&grads)
                .map_or_else(|| Named::missing("dc0"), |g| read("dc0", g)),
        );
    }
    match w.grad(&grads) {
        Some(g) => results.extend(weight_grads(desc, read("dweights", g))),
        None => results.push(Named::missing("dweights")),
    }
    results
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
    check_case_with::<B>(case, device, dtype, tolerance(dtype))
}

/// [`check_case`] with another tolerance than the suite's for `dtype`.
pub fn check_case_with<B: FusedRnnBackend>(
    case: &ParityCase,
    device: &B::Device,
    dtype: DType,
    tolerance: Tolerance,
) -> Result<(), Box<ParityFailure>> {
    let desc = case.descriptor();
    let data = CaseData::new(case, &round_to(dtype));
    let expected = reference_results(&desc, &data);
    let got = backend_results::<B>(&desc, &data, device, dtype);
    compare_all(case, &format!("{dtype:?}"), tolerance, &got, &expected)
}

/// Runs every case of [`parity_cases`] for which `filter` holds, and panics listing every
/// failing case (its worst tensor element) if any fails.
pub fn assert_parity<B: FusedRnnBackend>(
    device: &B::Device,
    dtype: DType,
    filter: impl Fn(&ParityCase) -> bool,
) {
    assert_parity_with::<B>(device, dtype, tolerance(dtype), filter);
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
    assert_cases(&B::name(device), &format!("{dtype:?}"), &cases, |case| {
        check_case_with::<B>(case, device, dtype, tolerance)
    });
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
    use crate::spec::RnnMode;

    /// The tolerance given to `check_case_with` is the one applied: F32 against the F64
    /// reference passes the suite's F32 tolerance and fails a zero one.
    #[test]
    fn check_case_with_applies_its_tolerance() {
        type B = burn::backend::NdArray<f32>;
        let device = Default::default();
        let case = parity_cases()
            .into_iter()
            .find(|c| c.mode == RnnMode::Gru && c.num_layers == 2 && c.bidirectional)
            .expect("a GRU case");
        assert!(check_case_with::<B>(&case, &device, DType::F32, tolerance(DType::F32)).is_ok());
        let zero = Tolerance {
            rtol: 0.0,
            atol: 0.0,
        };
        let err = check_case_with::<B>(&case, &device, DType::F32, zero).unwrap_err();
        assert_eq!(err.tolerance, zero);
        assert_eq!(err.dtype, "F32");
    }

    /// F16 inputs are rounded before the reference sees them: every value is an F16 value.
    #[test]
    fn inputs_are_rounded_to_the_dtype_under_test() {
        let case = &parity_cases()[0];
        let data = CaseData::new(case, &round_to(DType::F16));
        let f16 = |v: f64| burn::tensor::f16::from_f64(v).to_f64();
        for t in [&data.x, &data.h0, &data.weights, &data.dy, &data.dh_n] {
            assert!(t.values.iter().all(|&v| f16(v) == v));
        }
        let unrounded = CaseData::new(case, &|v| v);
        assert_ne!(unrounded.x.values, data.x.values);
    }
}
