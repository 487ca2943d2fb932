//! The native CPU kernel: the fused op for Burn's host backends (NdArray, Flex), on the
//! tensors' own memory.
//!
//! The reference ([`crate::reference`]) composes Burn tensor ops, one small op after
//! another per step. This kernel runs the same math directly on host slices:
//!
//! - **One fused pass per step** (Note [Fused step] in `forward`): per layer and
//!   direction, `[W_ih | W_hh]` is packed once per call (Note [Packed weights] in
//!   `packed`), and each step is one pass of a register-blocked kernel over `[x_t |
//!   h_{t-1}]` whose tiles go straight into the cell update (`cell`): activations, cell
//!   state, output write and the variable-length select. One-step calls (decoding) keep
//!   their packed weights (Note [Packed weights across calls] in `prepared`).
//! - **The backward** mirrors it: per step one fused element-wise pass and one product
//!   `dg · W_hh` through the same kernel (`W_hh` packed once); the weight and input
//!   gradients are GEMMs over all steps from the `gemm` crate (Note [GEMM crate] in
//!   `gemm`).
//! - **Threads from rayon's pool** (sized by `RAYON_NUM_THREADS`, else the cores): the
//!   two directions of a layer run concurrently; a step's rows split over the threads when
//!   the step is big enough, and the large GEMMs split too. Nothing is spawned per call or
//!   per step.
//! - **SIMD** (Note [SIMD levels] in `simd`): every loop is written once over pulp's
//!   vector types or as plain slices, and runs at AVX-512, AVX2 or a portable level, picked
//!   once per call (forced in the tests, so that every level runs on every machine), with
//!   branch-free activations (Note [Activations] in `float`).
//! - **A compact reserve** (Note [Native reserve] in `plan`): the activated gates (and the
//!   LSTM cell state) of every step, about what cuDNN keeps; the backward writes the
//!   gradients over it in place.
//! - **No copies of the inputs**: `x`, the states, the weights and the output gradients
//!   are read in place when the backend's tensor is contiguous (NdArray's and Flex's
//!   usually are); inputs and outputs stay in the caller's layout, batch-first or not
//!   (Note [Rows] in `plan`). Outputs are built from `Vec`s that the backends adopt without
//!   copying.
//! - **Padding never leaks**: select semantics at every padded step (Note [Padding never
//!   leaks] in [`crate::reference`]).
//!
//! F64 runs in `f64`, F32 in `f32`; F16 and BF16 (Flex) are converted to `f32` on entry and
//! back on exit, like the reference (Note [Half precision] in [`crate::op_types`]).
//! Dropout masks are those of the reference, bit for bit (Note [Dropout masks] in
//! `crate::dropout`).
//!
//! The reference stays the oracle: the backend-parity suite ([`crate::testing`]) compares
//! this kernel, through `NdArray<f64>`, `NdArray<f32>` and Flex, with the reference run on
//! `NdArray<f64>` by calling [`crate::reference`]'s functions directly.

mod backward;
mod cell;
mod float;
mod forward;
mod gemm;
mod packed;
mod plan;
mod prepared;
mod schedule;
pub(crate) mod simd;

use std::borrow::Cow;

use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{DType, Element, Tensor, TensorData, TensorMetadata, TensorPrimitive};

use crate::descriptor::RnnDescriptor;
use crate::op_types::ReserveTag;
use crate::op_types::{RnnGrads, RnnInputs, RnnOutput, RnnOutputGrads, RnnReserve};
use packed::Lane;
use plan::Plan;
use schedule::in_pool;

pub(crate) use plan::reserve_len;

/// A backend whose float tensors live in host memory that the kernel can borrow.
pub(crate) trait HostBackend: Backend {
    /// The elements of `t` when it holds `f32`s, contiguous and in row-major order.
    fn host_f32(t: &FloatTensor<Self>) -> Option<&[f32]>;
    /// The elements of `t` when it holds `f64`s, contiguous and in row-major order.
    fn host_f64(t: &FloatTensor<Self>) -> Option<&[f64]>;
}

/// The address and length of `t`'s elements when the kernel reads them in place (see
/// `FusedRnnBackend::fused_rnn_buffer_identity`).
pub(crate) fn buffer_identity<B: HostBackend>(t: &FloatTensor<B>) -> Option<(usize, usize)> {
    match (B::host_f32(t), B::host_f64(t)) {
        (Some(s), _) => Some((s.as_ptr() as usize, s.len())),
        (_, Some(s)) => Some((s.as_ptr() as usize, s.len())),
        _ => None,
    }
}

/// An element type the kernel computes in.
trait Host: Lane + Element {
    fn borrow<B: HostBackend>(t: &FloatTensor<B>) -> Option<&[Self]>;
}

impl Host for f32 {
    fn borrow<B: HostBackend>(t: &FloatTensor<B>) -> Option<&[Self]> {
        B::host_f32(t)
    }
}

impl Host for f64 {
    fn borrow<B: HostBackend>(t: &FloatTensor<B>) -> Option<&[Self]> {
        B::host_f64(t)
    }
}

/// The elements of `t` as `T`: borrowed when the backend allows it, else converted.
fn read<B: HostBackend, T: Host>(t: &FloatTensor<B>) -> Cow<'_, [T]> {
    match T::borrow::<B>(t) {
        Some(slice) => Cow::Borrowed(slice),
        None => Cow::Owned(into_vec::<B, T>(t.clone())),
    }
}

/// The elements of `t` as an owned `Vec<T>`, without a copy when `t` is unique and of
/// dtype `T` (both backends then hand over their buffer).
fn into_vec<B: Backend, T: Host>(t: FloatTensor<B>) -> Vec<T> {
    let data = Tensor::<B, 1>::from_primitive(TensorPrimitive::Float(t)).into_data();
    data.convert_dtype(T::dtype())
        .into_vec::<T>()
        .expect("a float tensor converts to its compute type")
}

/// A tensor of `dtype` on `device` from the kernel's output; no copy when `dtype` is `T`'s.
fn tensor<B: Backend, T: Host>(
    values: Vec<T>,
    shape: &[usize],
    dtype: DType,
    device: &B::Device,
) -> FloatTensor<B> {
    let mut data = TensorData::new(values, shape.to_vec());
    if dtype != T::dtype() {
        data = data.convert_dtype(dtype);
    }
    B::float_from_data(data, device)
}

/// The compute dtype of inputs of `dtype`, and whether they are half precision.
fn compute(dtype: DType) -> (DType, bool) {
    match dtype {
        DType::F64 => (DType::F64, false),
        DType::F32 => (DType::F32, false),
        DType::F16 | DType::BF16 => (DType::F32, true),
        other => panic!("expected input of dtype F64, F32, F16 or BF16, got {other:?}"),
    }
}

/// The reserve's shapes and dtypes (`FusedRnnBackend::fused_rnn_reserve_layout`): one 1-D
/// buffer, tagged (Note [Reserve tag] on `crate::op_types::ReserveTag`),
/// buffer of the compute dtype (Note [Native reserve] in `plan`).
pub(crate) fn reserve_layout(desc: &RnnDescriptor, dtype: DType) -> Vec<(Vec<usize>, DType)> {
    let (compute, half) = compute(dtype);
    vec![(
        vec![ReserveTag::NativeCpu.tagged_len(reserve_len(desc, half))],
        compute,
    )]
}

/// Inference forward.
pub(crate) fn forward<B: HostBackend>(desc: &RnnDescriptor, inputs: RnnInputs<B>) -> RnnOutput<B> {
    run_forward::<B>(desc, inputs, false).0
}

/// Training forward: the output and the native reserve.
pub(crate) fn forward_training<B: HostBackend>(
    desc: &RnnDescriptor,
    inputs: RnnInputs<B>,
) -> (RnnOutput<B>, RnnReserve<B>) {
    let (out, reserve) = run_forward::<B>(desc, inputs, true);
    (out, reserve.expect("a training forward keeps a reserve"))
}

fn run_forward<B: HostBackend>(
    desc: &RnnDescriptor,
    inputs: RnnInputs<B>,
    training: bool,
) -> (RnnOutput<B>, Option<RnnReserve<B>>) {
    match compute(inputs.x.dtype()).0 {
        DType::F64 => forward_in::<B, f64>(desc, inputs, training),
        _ => forward_in::<B, f32>(desc, inputs, training),
    }
}

fn forward_in<B: HostBackend, T: Host>(
    desc: &RnnDescriptor,
    inputs: RnnInputs<B>,
    training: bool,
) -> (RnnOutput<B>, Option<RnnReserve<B>>) {
    let dtype = inputs.x.dtype();
    let device = B::float_device(&inputs.x);
    let half = compute(dtype).1;
    let x = read::<B, T>(&inputs.x);
    let h0 = inputs.h0.as_ref().map(read::<B, T>);
    let c0 = inputs.c0.as_ref().map(read::<B, T>);
    let w = read::<B, T>(&inputs.weights);
    let plan = Plan::new(desc);
    // One-step calls (decoding) reuse packed weights (Note [Packed weights across calls]).
    let packed = match &w {
        Cow::Borrowed(slice) if desc.seq_length == 1 => {
            Some(prepared::packed_for_step(&plan, slice, &inputs.weights))
        }
        _ => None,
    };
    let host = plan::Inputs {
        x: &x,
        h0: h0.as_deref(),
        c0: c0.as_deref(),
        w: &w,
        packed: packed.as_deref().map(Vec::as_slice),
    };
    let (out, reserve) = in_pool(|| forward::forward(&plan, &host, training, half));
    let output = RnnOutput {
        y: tensor::<B, T>(out.y, &desc.output_shape(), dtype, &device),
        h_n: tensor::<B, T>(out.h_n, &desc.hidden_shape(), dtype, &device),
        c_n: out
            .c_n
            .map(|c| tensor::<B, T>(c, &desc.cell_shape(), dtype, &device)),
    };
    let reserve = reserve.map(|r| {
        let len = r.len();
        RnnReserve {
            tensors: vec![tensor::<B, T>(r, &[len], T::dtype(), &device)],
        }
    });
    (output, reserve)
}

/// Backward pass from the native reserve.
///
/// # Panics
///
/// If `reserve` is not the one this kernel's training forward made for `desc` (another
/// implementation's, or another call's), naming both.
pub(crate) fn backward<B: HostBackend>(
    desc: &RnnDescriptor,
    inputs: RnnInputs<B>,
    output: RnnOutput<B>,
    reserve: RnnReserve<B>,
    grads: RnnOutputGrads<B>,
) -> RnnGrads<B> {
    let dtype = inputs.x.dtype();
    let expected = reserve_layout(desc, dtype);
    let got: Vec<(Vec<usize>, DType)> = reserve
        .tensors
        .iter()
        .map(|t| (t.shape().to_vec(), t.dtype()))
        .collect();
    let writer = match got.first() {
        Some((shape, _)) if shape.len() == 1 => match ReserveTag::of_len(shape[0]) {
            Some(ReserveTag::NativeCpu) => "the native CPU kernel",
            Some(ReserveTag::Cudnn { .. }) => "cuDNN",
            Some(ReserveTag::Cube) => "the CubeCL kernels",
            None => "no tagged implementation",
        },
        _ => "no tagged implementation (the reference's reserve has 3-D tensors)",
    };
    assert!(
        got == expected,
        "expected reserve to be the native CPU kernel's training-forward reserve for this call, {expected:?}, got {got:?} (tagged by {writer})"
    );
    match compute(dtype).0 {
        DType::F64 => backward_in::<B, f64>(desc, inputs, output, reserve, grads),
        _ => backward_in::<B, f32>(desc, inputs, output, reserve, grads),
    }
}

fn backward_in<B: HostBackend, T: Host>(
    desc: &RnnDescriptor,
    inputs: RnnInputs<B>,
    output: RnnOutput<B>,
    reserve: RnnReserve<B>,
    grads: RnnOutputGrads<B>,
) -> RnnGrads<B> {
    let dtype = inputs.x.dtype();
    let device = B::float_device(&inputs.x);
    let half = compute(dtype).1;
    let x = read::<B, T>(&inputs.x);
    let h0 = inputs.h0.as_ref().map(read::<B, T>);
    let w = read::<B, T>(&inputs.weights);
    // With half-precision inputs the reserve keeps the last layer's output; `y` (rounded)
    // is not read.
    let y: Cow<'_, [T]> = if half {
        Cow::Borrowed(&[])
    } else {
        read::<B, T>(&output.y)
    };
    let dy = grads.dy.as_ref().map(read::<B, T>);
    let dh_n = grads.dh_n.as_ref().map(read::<B, T>);
    let dc_n = grads.dc_n.as_ref().map(read::<B, T>);
    let mut reserve = into_vec::<B, T>(
        reserve
            .tensors
            .into_iter()
            .next()
            .expect("checked: one tensor"),
    );
    let plan = Plan::new(desc);
    let host = plan::Inputs {
        x: &x,
        h0: h0.as_deref(),
        c0: None,
        w: &w,
        packed: None,
    };
    let out_grads = backward::OutputGrads {
        dy: dy.as_deref(),
        dh_n: dh_n.as_deref(),
        dc_n: dc_n.as_deref(),
    };
    let payload = reserve_len(desc, half);
    let g =
        in_pool(|| backward::backward(&plan, &host, &y, &mut reserve[..payload], half, &out_grads));
    drop(reserve);
    RnnGrads {
        dx: tensor::<B, T>(g.dx, &desc.input_shape(), dtype, &device),
        dh0: tensor::<B, T>(g.dh0, &desc.hidden_shape(), dtype, &device),
        dc0: g
            .dc0
            .map(|c| tensor::<B, T>(c, &desc.cell_shape(), dtype, &device)),
        dweights: tensor::<B, T>(g.dweights, &[desc.params_size()], dtype, &device),
    }
}

/// `impl FusedRnnBackend` for a host backend: the four methods through this kernel, and
/// its buffers' identity (Note [Flat weights across calls] in `crate::module`).
macro_rules! native_impl {
    () => {
        $crate::backend::implemented_by!(cpu);

        fn fused_rnn_buffer_identity(
            t: &burn::tensor::ops::FloatTensor<Self>,
        ) -> Option<(usize, usize)> {
            $crate::cpu::buffer_identity::<Self>(t)
        }
    };
}

#[cfg(feature = "ndarray")]
mod ndarray_impl {
    use burn::backend::ndarray::{
        FloatNdArrayElement, IntNdArrayElement, NdArray, NdArrayTensor, QuantElement, SharedArray,
    };

    impl<E: FloatNdArrayElement, I: IntNdArrayElement, Q: QuantElement> super::HostBackend
        for NdArray<E, I, Q>
    where
        NdArrayTensor: From<SharedArray<E>>,
        NdArrayTensor: From<SharedArray<I>>,
    {
        fn host_f32(t: &NdArrayTensor) -> Option<&[f32]> {
            match t {
                NdArrayTensor::F32(storage) => storage.view().to_slice(),
                _ => None,
            }
        }

        fn host_f64(t: &NdArrayTensor) -> Option<&[f64]> {
            match t {
                NdArrayTensor::F64(storage) => storage.view().to_slice(),
                _ => None,
            }
        }
    }

    /// The native CPU kernel (module docs of `cpu`).
    impl<E: FloatNdArrayElement, I: IntNdArrayElement, Q: QuantElement> crate::FusedRnnBackend
        for NdArray<E, I, Q>
    where
        NdArrayTensor: From<SharedArray<E>>,
        NdArrayTensor: From<SharedArray<I>>,
    {
        native_impl!();
    }
}

#[cfg(feature = "flex")]
mod flex_impl {
    use burn::backend::flex::{Flex, FlexTensor};

    impl super::HostBackend for Flex {
        fn host_f32(t: &FlexTensor) -> Option<&[f32]> {
            t.as_slice::<f32>()
        }

        fn host_f64(t: &FlexTensor) -> Option<&[f64]> {
            t.as_slice::<f64>()
        }
    }

    /// The native CPU kernel (module docs of `cpu`).
    impl crate::FusedRnnBackend for Flex {
        native_impl!();
    }
}

#[cfg(test)]
mod tests {
    use super::forward::forward;
    use super::plan::Inputs;
    use super::plan::Plan;
    use crate::{DropoutSpec, FusedRnnConfig, RnnDescriptor, RnnMode};

    fn values(n: usize, seed: u64) -> Vec<f64> {
        (0..n)
            .map(|i| ((i as f64 + seed as f64 * 7.3) * 0.61).sin() * 0.8)
            .collect()
    }

    /// The inference forward (no reserve) and the training forward (into the reserve)
    /// compute the same outputs, in every mode, both directions and layouts, with padding
    /// and a projection, at every SIMD level the CPU has; and every level agrees with the
    /// portable one to rounding.
    #[test]
    fn inference_and_training_forwards_agree_at_every_simd_level() {
        use super::simd::{with_simd_level, SimdLevel};
        for mode in [
            RnnMode::Lstm,
            RnnMode::Gru,
            RnnMode::RnnTanh,
            RnnMode::RnnRelu,
        ] {
            for batch_first in [false, true] {
                let spec = FusedRnnConfig::new(mode, 3, 20)
                    .with_num_layers(2)
                    .with_bidirectional(true)
                    .with_proj_size((mode == RnnMode::Lstm).then_some(7))
                    .spec();
                let desc = RnnDescriptor::new(
                    spec,
                    7,
                    9,
                    batch_first,
                    Some(vec![7, 3, 5, 0, 7, 1, 6, 7, 2]),
                    DropoutSpec::NONE,
                );
                let x = values(desc.input_shape().iter().product(), 1);
                let h0 = values(desc.hidden_shape().iter().product(), 2);
                let c0 = values(desc.cell_shape().iter().product(), 3);
                // Small weights keep the ReLU RNN from growing (and rounding with it).
                let w: Vec<f64> = values(desc.params_size(), 4)
                    .iter()
                    .map(|v| v * 0.3)
                    .collect();
                let inputs = Inputs {
                    x: &x,
                    h0: Some(&h0),
                    c0: spec.mode.has_cell_state().then_some(&c0[..]),
                    w: &w,
                    packed: None,
                };
                let run = |level: SimdLevel, training: bool| {
                    with_simd_level(level, || {
                        let plan = Plan::new(&desc);
                        assert_eq!(plan.level, level);
                        let (out, _) = forward::<f64>(&plan, &inputs, training, false);
                        [out.y, out.h_n, out.c_n.unwrap_or_default()]
                    })
                };
                let portable = run(SimdLevel::Portable, false);
                for level in SimdLevel::available() {
                    for training in [false, true] {
                        let got = run(level, training);
                        for (name, (a, b)) in
                            ["y", "h_n", "c_n"].iter().zip(got.iter().zip(&portable))
                        {
                            assert_eq!(a.len(), b.len());
                            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                                assert!(
                                    (x - y).abs() <= 1e-12 * (1.0 + y.abs()),
                                    "{mode:?}, batch_first {batch_first}, {level:?}, training {training}: {name}[{i}] {x} vs {y}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }
}
