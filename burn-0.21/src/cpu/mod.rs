//! The native CPU kernel (the core crate's `cpu` module) on Burn's host backends, NdArray
//! and Flex: borrows the tensors' elements (or converts them), runs the kernel on slices,
//! and adopts its `Vec`s as tensors without copying. F64 runs in `f64`, F32 in `f32`; F16
//! and BF16 (Flex) are converted to `f32` on entry and back on exit, like the reference
//! (Note [Half precision] in the core crate's `semantics` module).
//!
//! The reference stays the oracle: the backend-parity suite ([`crate::testing`]) compares
//! this kernel, through `NdArray<f64>`, `NdArray<f32>` and Flex, with the reference run on
//! `NdArray<f64>` by calling [`crate::reference`]'s functions directly.

use std::borrow::Cow;

use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{DType, Element, Tensor, TensorData, TensorMetadata, TensorPrimitive};

use crate::descriptor::{GradsWanted, RnnDescriptor};
use crate::op_types::ReserveTag;
use crate::op_types::{RnnGrads, RnnInputs, RnnOutput, RnnOutputGrads, RnnReserve};
use burn_fused_rnn_core::cpu as kernel;

pub(crate) use burn_fused_rnn_core::cpu::reserve_len;

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
trait Host: kernel::Element + Element {
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
    // One-step calls (decoding) reuse packed weights (Note [Packed weights across calls]).
    let weights_owner = match &w {
        Cow::Borrowed(_) => Some(&inputs.weights),
        Cow::Owned(_) => None,
    };
    let host = kernel::HostInputs {
        x: &x,
        h0: h0.as_deref(),
        c0: c0.as_deref(),
        w: &w,
    };
    let (out, reserve) = kernel::forward(desc, &host, weights_owner, training, half);
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
    wanted: GradsWanted,
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
        DType::F64 => backward_in::<B, f64>(desc, inputs, output, reserve, grads, wanted),
        _ => backward_in::<B, f32>(desc, inputs, output, reserve, grads, wanted),
    }
}

fn backward_in<B: HostBackend, T: Host>(
    desc: &RnnDescriptor,
    inputs: RnnInputs<B>,
    output: RnnOutput<B>,
    reserve: RnnReserve<B>,
    grads: RnnOutputGrads<B>,
    wanted: GradsWanted,
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
    let reserve = into_vec::<B, T>(
        reserve
            .tensors
            .into_iter()
            .next()
            .expect("checked: one tensor"),
    );
    let host = kernel::HostInputs {
        x: &x,
        h0: h0.as_deref(),
        c0: None,
        w: &w,
    };
    let out_grads = kernel::OutputGrads {
        dy: dy.as_deref(),
        dh_n: dh_n.as_deref(),
        dc_n: dc_n.as_deref(),
    };
    // The kernel keeps the reserve for the next training forward (Note [Reserve reuse] in
    // the core crate's kernel).
    let g = kernel::backward(desc, &host, &y, reserve, half, &out_grads, wanted);
    RnnGrads {
        dx: wanted
            .x
            .then(|| tensor::<B, T>(g.dx, &desc.input_shape(), dtype, &device)),
        dh0: tensor::<B, T>(g.dh0, &desc.hidden_shape(), dtype, &device),
        dc0: g
            .dc0
            .map(|c| tensor::<B, T>(c, &desc.cell_shape(), dtype, &device)),
        dweights: wanted
            .weights
            .then(|| tensor::<B, T>(g.dweights, &[desc.params_size()], dtype, &device)),
    }
}

/// `FusedRnnBackend::fused_rnn_concat` on a host backend: one copy of each part into one
/// buffer (Note [Flat weights from parts] in `crate::backend`); parts that cannot be
/// borrowed as one element type (mixed dtypes, half precision, a strided view) take the
/// default path.
pub(crate) fn concat<B: HostBackend>(parts: Vec<FloatTensor<B>>) -> FloatTensor<B> {
    fn gather<B: HostBackend, T: Host>(parts: &[FloatTensor<B>]) -> Option<FloatTensor<B>> {
        let first = parts.first()?;
        let slices: Option<Vec<&[T]>> = parts.iter().map(T::borrow::<B>).collect();
        let slices = slices?;
        let mut flat = Vec::with_capacity(slices.iter().map(|s| s.len()).sum());
        for s in slices {
            flat.extend_from_slice(s);
        }
        let len = flat.len();
        Some(tensor::<B, T>(
            flat,
            &[len],
            T::dtype(),
            &B::float_device(first),
        ))
    }
    match gather::<B, f32>(&parts).or_else(|| gather::<B, f64>(&parts)) {
        Some(flat) => flat,
        None => crate::backend::concat_parts::<B>(parts),
    }
}

/// `FusedRnnBackend::fused_rnn_split` on NdArray: one copy of each part out of the flat
/// buffer, where the default's reshape copies each slice once more (Note [Flat weights from
/// parts] in `crate::backend`); a flat tensor that cannot be borrowed takes the default
/// path. Flex keeps the default: its slices and reshapes are views, no copy at all.
pub(crate) fn split<B: HostBackend>(
    flat: FloatTensor<B>,
    shapes: &[Vec<usize>],
) -> Vec<FloatTensor<B>> {
    fn cut<B: HostBackend, T: Host>(
        flat: &FloatTensor<B>,
        shapes: &[Vec<usize>],
    ) -> Option<Vec<FloatTensor<B>>> {
        let values = T::borrow::<B>(flat)?;
        let total: usize = shapes.iter().map(|s| s.iter().product::<usize>()).sum();
        if total != values.len() {
            // The default path names the mismatch.
            return None;
        }
        let device = B::float_device(flat);
        let mut at = 0;
        Some(
            shapes
                .iter()
                .map(|shape| {
                    let n: usize = shape.iter().product();
                    let part = values[at..at + n].to_vec();
                    at += n;
                    tensor::<B, T>(part, shape, T::dtype(), &device)
                })
                .collect(),
        )
    }
    match cut::<B, f32>(&flat, shapes).or_else(|| cut::<B, f64>(&flat, shapes)) {
        Some(parts) => parts,
        None => crate::backend::split_parts::<B>(flat, shapes),
    }
}

/// `impl FusedRnnBackend` for a host backend: the four methods through this kernel, its
/// buffers' identity (Note [Flat weights across calls] in the core crate's `memo`), and the
/// flat weights built with one copy of each part.
macro_rules! native_impl {
    () => {
        $crate::backend::implemented_by!(cpu);

        fn fused_rnn_buffer_identity(
            t: &burn::tensor::ops::FloatTensor<Self>,
        ) -> Option<(usize, usize)> {
            $crate::cpu::buffer_identity::<Self>(t)
        }

        fn fused_rnn_concat(
            parts: Vec<burn::tensor::ops::FloatTensor<Self>>,
        ) -> burn::tensor::ops::FloatTensor<Self> {
            $crate::cpu::concat::<Self>(parts)
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

        fn fused_rnn_split(flat: NdArrayTensor, shapes: &[Vec<usize>]) -> Vec<NdArrayTensor> {
            super::split::<Self>(flat, shapes)
        }
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
