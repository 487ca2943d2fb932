//! The backend-parity suite: proves that the fused op on a device matches the reference.
//!
//! Whatever runs a call on a device (the native CPU kernel and its single autodiff node on
//! NdArray and Flex, the reference's Burn ops everywhere else: Note [Call routing] in
//! [`crate::ops`]), this suite checks it, case by case, against the reference
//! implementation ([`crate::reference`]) in F64 on NdArray, itself tested against PyTorch.
//! A backend author (or anyone bringing up a Burn device: Wgpu on a new driver, the CubeCL
//! CPU runtime, a build of their own) enables the crate's `testing` feature in
//! `[dev-dependencies]` and generates the tests with [`testgen!`](crate::testgen):
//!
//! ```
//! // tests/parity.rs of your crate; here with Flex standing in for your device.
//! use burn::tensor::{DType, Device};
//!
//! burn_fused_rnn::testgen!(my_device, Device::flex(), [DType::F32, DType::BF16]);
//! # fn main() {}
//! ```
//!
//! That gives one `#[test]` per mode (`my_device::lstm`, `my_device::gru`,
//! `my_device::rnn_tanh`, `my_device::rnn_relu`), each running every [`ParityCase`] of its
//! mode in each listed dtype. Or call [`assert_parity`] / [`check_case`] yourself.
//!
//! # What one case checks
//!
//! With seeded inputs, initial states, weights and output gradients (the same values on
//! both sides: rounded to the dtype under test, then read back in F64 for the reference):
//!
//! 1. the inference forward on the device without autodiff: `y`, `h_n`, `c_n`;
//! 2. the training forward on the device with autodiff (`device.autodiff()`, which keeps a
//!    gradient-checkpointing strategy the device already has): `y`, `h_n`, `c_n` again;
//! 3. the backward of `sum(y∘gy) + sum(h_n∘gh) + sum(c_n∘gc)`: `dx`, `dh0`, `dc0`, and the
//!    gradient of every canonical weight tensor by its PyTorch name
//!    (`dweights[weight_hh_l1_reverse]`).
//!
//! The reference side runs [`crate::reference::fused_rnn`] directly (never the routed
//! [`crate::fused_rnn`], which would send NdArray to the native kernel), on
//! `Device::ndarray()` in F64, and its gradients are Burn's autodiff traced through its ops:
//! a native kernel and its hand-written backward are always compared with something else.
//!
//! # The grid, the inputs, the tolerances
//!
//! They are the core crate's (`burn_fused_rnn_core::parity`, shared with the Burn 0.21
//! line): 134 small cases ([`parity_cases`]: every mode × 1–3 layers × both directions ×
//! full or variable lengths × both layouts, LSTM with projection, skip input without
//! biases, and *garbage padding*: NaN, ±inf and ±1e30 in every padded slot of the device's
//! `x` and `dy`, which must change nothing, Note [Padding never leaks] in the core's
//! `semantics`); no dropout (masks would have to come from the same generator). An element
//! passes when `|got - expected| <= atol + rtol * |expected|`, with [`tolerance`]`(dtype)`:
//! F64 1e-9 / 1e-12, F32 1e-4 / 1e-5, F16 1e-2 / 5e-3, BF16 5e-2 / 2e-2 (rtol / atol; half
//! precision stores rounded values and computes in F32). A device whose F32 matrix products
//! run in TF32 checks with [`Tolerance::TF32`] (rtol 2e-2, atol 2e-3) through
//! [`assert_parity_with`].
//!
//! # Failures
//!
//! [`ParityFailure`] names the case, the dtype, the tensor, the worst element's index and
//! both values, e.g. `case lstm-L2-bi-proj3-varlen-batch_first, F32: dweights[weight_hh_l1]
//! at [3, 1]: got 0.1243, expected 0.1241 (|diff| 2.0e-4 > 1.2e-5 allowed)`.
#![allow(deprecated)] // Burn 0.22 deprecates NdArray; the suite's reference runs on it.

use burn::tensor::{DType, Device, Tensor, TensorData};
use burn_fused_rnn_core::parity::{assert_cases, compare_all, named_weight_grads};
pub use burn_fused_rnn_core::parity::{parity_cases, ParityCase, ParityFailure, Tolerance};
/// The suite's pieces, for checks of your own: a case's seeded inputs ([`CaseData`], each a
/// [`Named`] `f64` tensor) and the values written into padded slots ([`GARBAGE`]).
pub use burn_fused_rnn_core::parity::{CaseData, Named, GARBAGE};

use crate::descriptor::RnnDescriptor;
use crate::ops::FusedRnnOutput;

/// The device the reference runs on, in F64 (and, for its gradients, with autodiff).
pub fn reference_device() -> Device {
    Device::ndarray()
}

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

/// Values rounded to `dtype` and read back in F64.
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

fn tensor<const D: usize>(t: &Named, device: &Device, dtype: DType) -> Tensor<D> {
    let data = TensorData::new(t.values.clone(), t.shape.clone()).convert_dtype(dtype);
    Tensor::from_data(data, (device, dtype))
}

fn read<const D: usize>(name: impl Into<String>, t: Tensor<D>) -> Named {
    let shape = t.dims().to_vec();
    let values = t
        .into_data()
        .convert_dtype(DType::F64)
        .to_vec::<f64>()
        .expect("f64 data");
    Named::new(name, shape, values)
}

/// One side's inputs as tensors on `device` in `dtype`, tracked when `tracked`.
struct Inputs {
    x: Tensor<3>,
    h0: Tensor<3>,
    c0: Option<Tensor<3>>,
    weights: Tensor<1>,
}

impl Inputs {
    fn new(x: &Named, data: &CaseData, device: &Device, dtype: DType, tracked: bool) -> Self {
        let track3 = |t: Tensor<3>| if tracked { t.require_grad() } else { t };
        let weights = tensor::<1>(&data.weights, device, dtype);
        Self {
            x: track3(tensor(x, device, dtype)),
            h0: track3(tensor(&data.h0, device, dtype)),
            c0: data.c0.as_ref().map(|c| track3(tensor(c, device, dtype))),
            weights: if tracked {
                weights.require_grad()
            } else {
                weights
            },
        }
    }
}

/// Runs one side of a case: the inference forward, then the training forward and its
/// gradients, in the suite's order of results.
fn side(
    desc: &RnnDescriptor,
    data: &CaseData,
    (x, dy): (&Named, &Named),
    (device, dtype): (&Device, DType),
    run: impl Fn(&RnnDescriptor, &Inputs) -> FusedRnnOutput,
) -> Vec<Named> {
    let mut results = Vec::new();
    let outputs = |prefix: &str, out: &FusedRnnOutput, results: &mut Vec<Named>| {
        results.push(read(format!("{prefix}y"), out.output.clone()));
        results.push(read(format!("{prefix}h_n"), out.hidden.clone()));
        if let Some(c) = &out.cell {
            results.push(read(format!("{prefix}c_n"), c.clone()));
        }
    };
    // 1. Inference forward, untracked, on the device without autodiff.
    let plain = device.clone().without_autodiff();
    let out = run(desc, &Inputs::new(x, data, &plain, dtype, false));
    outputs("", &out, &mut results);

    // 2. and 3. Training forward and backward on the device with autodiff.
    let tracked = device.clone().autodiff();
    let inputs = Inputs::new(x, data, &tracked, dtype, true);
    let out = run(desc, &inputs);
    outputs("train ", &out, &mut results);
    let mut loss = (out.output * tensor::<3>(dy, &tracked, dtype)).sum()
        + (out.hidden * tensor::<3>(&data.dh_n, &tracked, dtype)).sum();
    if let (Some(c), Some(dc)) = (out.cell, &data.dc_n) {
        loss = loss + (c * tensor::<3>(dc, &tracked, dtype)).sum();
    }
    let grads = loss.backward();
    let grad = |name: &str, g: Option<Tensor<3>>| {
        g.map_or_else(|| Named::missing(name), |g| read(name, g))
    };
    results.push(grad("dx", inputs.x.grad(&grads)));
    results.push(grad("dh0", inputs.h0.grad(&grads)));
    if let Some(c0) = &inputs.c0 {
        results.push(grad("dc0", c0.grad(&grads)));
    }
    match inputs.weights.grad(&grads) {
        Some(g) => {
            let g = read("dweights", g);
            results.extend(named_weight_grads(desc, g.shape, g.values));
        }
        None => results.push(Named::missing("dweights")),
    }
    results
}

/// Runs one case on `device` in `dtype` and compares every tensor with the reference.
///
/// Returns the first tensor that fails (in the order forward, training forward, gradients),
/// at its worst element.
pub fn check_case(
    case: &ParityCase,
    device: &Device,
    dtype: DType,
) -> Result<(), Box<ParityFailure>> {
    check_case_with(case, device, dtype, tolerance(dtype))
}

/// [`check_case`] with another tolerance than the suite's for `dtype`.
pub fn check_case_with(
    case: &ParityCase,
    device: &Device,
    dtype: DType,
    tolerance: Tolerance,
) -> Result<(), Box<ParityFailure>> {
    let desc = case.descriptor();
    let data = CaseData::new(case, &round_to(dtype));
    let expected = side(
        &desc,
        &data,
        (&data.x, &data.dy),
        (&reference_device(), DType::F64),
        |desc, i| {
            let training = i.x.is_require_grad();
            crate::reference::fused_rnn(
                desc,
                i.x.clone(),
                Some(i.h0.clone()),
                i.c0.clone(),
                i.weights.clone(),
                training,
            )
        },
    );
    let got = side(
        &desc,
        &data,
        (&data.x_backend, &data.dy_backend),
        (device, dtype),
        |desc, i| {
            crate::fused_rnn(
                desc,
                i.x.clone(),
                Some(i.h0.clone()),
                i.c0.clone(),
                i.weights.clone(),
            )
        },
    );
    compare_all(case, &format!("{dtype:?}"), tolerance, &got, &expected)
}

/// Runs every case of [`parity_cases`] for which `filter` holds, and panics listing every
/// failing case (its worst tensor element) if any fails.
///
/// It ends by waiting for `device` to finish everything queued on it ([`Device::sync`]):
/// a test binary must not exit while a backend still compiles or runs kernels in its own
/// threads (on lavapipe, Vulkan on the CPU, such an exit crashed in the driver after every
/// test had passed: `tests/backward_once.rs`, before it waited too, in 16 of 30 runs with a
/// cold shader cache). [`assert_parity_with`] does the same.
pub fn assert_parity(device: &Device, dtype: DType, filter: impl Fn(&ParityCase) -> bool) {
    assert_parity_with(device, dtype, tolerance(dtype), filter);
}

/// [`assert_parity`] with another tolerance than the suite's for `dtype` (for a device
/// whose F32 products run in TF32, [`Tolerance::TF32`]).
pub fn assert_parity_with(
    device: &Device,
    dtype: DType,
    tolerance: Tolerance,
    filter: impl Fn(&ParityCase) -> bool,
) {
    let cases: Vec<ParityCase> = parity_cases().into_iter().filter(|c| filter(c)).collect();
    assert_cases(
        &format!("{device:?}"),
        &format!("{dtype:?}"),
        &cases,
        |case| check_case_with(case, device, dtype, tolerance),
    );
    if let Err(error) = device.sync() {
        panic!("{device:?}: the suite's queued operations failed to run: {error:?}");
    }
}

/// Generates the parity tests for a device: a module `$name` with one `#[test]` per mode
/// (`lstm`, `gru`, `rnn_tanh`, `rnn_relu`), each running its mode's cases of
/// [`parity_cases`] in every dtype listed (F32 when none is).
///
/// ```
/// use burn::tensor::{DType, Device};
///
/// burn_fused_rnn::testgen!(ndarray_f32, Device::ndarray());
/// burn_fused_rnn::testgen!(flex_half, Device::flex(), [DType::F16, DType::BF16]);
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! testgen {
    ($name:ident, $device:expr) => {
        $crate::testgen!($name, $device, [::burn::tensor::DType::F32]);
    };
    ($name:ident, $device:expr, [$($dtype:expr),+ $(,)?]) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            fn run(mode: $crate::RnnMode) {
                let device = $device;
                for dtype in [$($dtype),+] {
                    $crate::testing::assert_parity(&device, dtype, |case| case.mode == mode);
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

    fn gru_case() -> ParityCase {
        parity_cases()
            .into_iter()
            .find(|c| c.mode == RnnMode::Gru && c.num_layers == 2 && c.bidirectional)
            .expect("a GRU case")
    }

    /// The tolerance given to `check_case_with` is the one applied: F32 against the F64
    /// reference passes the suite's F32 tolerance and fails a zero one.
    #[test]
    fn check_case_with_applies_its_tolerance() {
        let device = Device::flex();
        let case = gru_case();
        assert!(check_case_with(&case, &device, DType::F32, tolerance(DType::F32)).is_ok());
        let zero = Tolerance {
            rtol: 0.0,
            atol: 0.0,
        };
        let err = check_case_with(&case, &device, DType::F32, zero).unwrap_err();
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
