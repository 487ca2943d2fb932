//! The native CPU kernel (the core crate's `cpu` module) on Burn's host backends, NdArray
//! and Flex: borrows the tensors' elements (or converts them), runs the kernel on slices,
//! and adopts its `Vec`s as tensors without copying. F64 runs in `f64`, F32 in `f32`; F16
//! and BF16 (Flex) are converted to `f32` on entry and back on exit, like the reference
//! (Note [Half precision] in the core crate's `semantics` module).
//!
//! The reference stays the oracle: the tests compare
//! this kernel, through NdArray and Flex, in F64 and F32, with the
//! reference run on an F64 device.

use std::borrow::Cow;

use burn::backend::tensor::FloatTensor;
use burn::backend::{Backend, DType, FloatDType, TensorData, TensorMetadata};

use crate::descriptor::RnnDescriptor;
use burn_fused_rnn_core::cpu as kernel;
use burn_fused_rnn_core::GradsWanted;

/// A backend whose float tensors live in host memory that the kernel can borrow.
pub(crate) trait NativeBackend: Backend {
    /// The elements of `t` when it holds `f32`s, contiguous and in row-major order.
    fn host_f32(t: &FloatTensor<Self>) -> Option<&[f32]>;
    /// The elements of `t` when it holds `f64`s, contiguous and in row-major order.
    fn host_f64(t: &FloatTensor<Self>) -> Option<&[f64]>;
    /// A contiguous row-major copy of `t` (of dtype F32 or F64).
    fn contiguous(t: &FloatTensor<Self>) -> FloatTensor<Self>;
    /// A tensor adopting `data`'s buffer.
    fn from_data(data: TensorData) -> FloatTensor<Self>;
    /// The elements of `t` (F32) as an owned `Vec`, without a copy when `t` holds the only
    /// handle to a contiguous buffer.
    fn take_f32(t: FloatTensor<Self>) -> Vec<f32>;
    /// As [`NativeBackend::take_f32`], for F64.
    fn take_f64(t: FloatTensor<Self>) -> Vec<f64>;
}

pub(crate) use crate::prims::{Grads, Inputs, Outputs};

/// An element type the kernel computes in.
trait Host: kernel::Element + burn::backend::Element {
    fn borrow<B: NativeBackend>(t: &FloatTensor<B>) -> Option<&[Self]>;
    fn take<B: NativeBackend>(t: FloatTensor<B>) -> Vec<Self>;
}

impl Host for f32 {
    fn borrow<B: NativeBackend>(t: &FloatTensor<B>) -> Option<&[Self]> {
        B::host_f32(t)
    }
    fn take<B: NativeBackend>(t: FloatTensor<B>) -> Vec<Self> {
        B::take_f32(t)
    }
}

impl Host for f64 {
    fn borrow<B: NativeBackend>(t: &FloatTensor<B>) -> Option<&[Self]> {
        B::host_f64(t)
    }
    fn take<B: NativeBackend>(t: FloatTensor<B>) -> Vec<Self> {
        B::take_f64(t)
    }
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

/// The elements of `t` as `T`: borrowed when they are `T`s in row-major order, else
/// converted.
fn read<B: NativeBackend, T: Host>(t: &FloatTensor<B>) -> Cow<'_, [T]> {
    if let Some(slice) = T::borrow::<B>(t) {
        return Cow::Borrowed(slice);
    }
    let t = if t.dtype() == T::dtype() {
        t.clone()
    } else {
        B::float_cast(t.clone(), FloatDType::from(T::dtype()))
    };
    let t = B::contiguous(&t);
    Cow::Owned(
        T::borrow::<B>(&t)
            .expect("a contiguous tensor of the compute dtype")
            .to_vec(),
    )
}

/// The address and length of `t`'s buffer when it holds F32 or F64 elements in row-major
/// order, else `None` (Note [Flat weights across calls] in the core crate's `memo`).
pub(crate) fn buffer_identity<B: NativeBackend>(t: &FloatTensor<B>) -> Option<(usize, usize)> {
    match (B::host_f32(t), B::host_f64(t)) {
        (Some(s), _) => Some((s.as_ptr() as usize, s.len())),
        (_, Some(s)) => Some((s.as_ptr() as usize, s.len())),
        _ => None,
    }
}

/// A tensor of `dtype` from the kernel's output; no copy when `dtype` is `T`'s.
fn tensor<B: NativeBackend, T: Host>(
    values: Vec<T>,
    shape: &[usize],
    dtype: DType,
) -> FloatTensor<B> {
    let t = B::from_data(TensorData::new(values, shape.to_vec()));
    if dtype == T::dtype() {
        t
    } else {
        B::float_cast(t, FloatDType::from(dtype))
    }
}

/// The forward pass; `training` applies dropout and keeps the kernel's reserve (Note
/// [Native reserve] in the core crate's kernel), as one 1-D tensor of the compute dtype.
pub(crate) fn forward<B: NativeBackend>(
    desc: &RnnDescriptor,
    inputs: &Inputs<B>,
    training: bool,
) -> (Outputs<B>, Option<FloatTensor<B>>) {
    match compute(inputs.x.dtype()).0 {
        DType::F64 => forward_in::<B, f64>(desc, inputs, training),
        _ => forward_in::<B, f32>(desc, inputs, training),
    }
}

fn forward_in<B: NativeBackend, T: Host>(
    desc: &RnnDescriptor,
    inputs: &Inputs<B>,
    training: bool,
) -> (Outputs<B>, Option<FloatTensor<B>>) {
    let dtype = inputs.x.dtype();
    let half = compute(dtype).1;
    let x = read::<B, T>(&inputs.x);
    let h0 = read::<B, T>(&inputs.h0);
    let c0 = inputs.c0.as_ref().map(read::<B, T>);
    let w = read::<B, T>(&inputs.weights);
    // One-step calls (decoding) reuse packed weights (Note [Packed weights across calls]
    // in the core crate's kernel), keyed by the weights' buffer, which the owner keeps.
    let weights_owner = match &w {
        Cow::Borrowed(_) => Some(&inputs.weights),
        Cow::Owned(_) => None,
    };
    let host = kernel::HostInputs {
        x: &x,
        h0: Some(&h0),
        c0: c0.as_deref(),
        w: &w,
    };
    let (out, reserve) = kernel::forward(desc, &host, weights_owner, training, half);
    let outputs = Outputs {
        y: tensor::<B, T>(out.y, &desc.output_shape(), dtype),
        h_n: tensor::<B, T>(out.h_n, &desc.hidden_shape(), dtype),
        c_n: out
            .c_n
            .map(|c| tensor::<B, T>(c, &desc.cell_shape(), dtype)),
    };
    let reserve = reserve.map(|r| {
        let len = r.len();
        tensor::<B, T>(r, &[len], T::dtype())
    });
    (outputs, reserve)
}

/// The backward pass from the reserve of a training [`forward`] of the same call.
#[allow(clippy::too_many_arguments)]
pub(crate) fn backward<B: NativeBackend>(
    desc: &RnnDescriptor,
    inputs: &Inputs<B>,
    y: &FloatTensor<B>,
    reserve: FloatTensor<B>,
    dy: Option<FloatTensor<B>>,
    dh_n: Option<FloatTensor<B>>,
    dc_n: Option<FloatTensor<B>>,
    wanted: GradsWanted,
) -> Grads<B> {
    let grads = [dy, dh_n, dc_n];
    match compute(inputs.x.dtype()).0 {
        DType::F64 => backward_in::<B, f64>(desc, inputs, y, reserve, grads, wanted),
        _ => backward_in::<B, f32>(desc, inputs, y, reserve, grads, wanted),
    }
}

fn backward_in<B: NativeBackend, T: Host>(
    desc: &RnnDescriptor,
    inputs: &Inputs<B>,
    y: &FloatTensor<B>,
    reserve: FloatTensor<B>,
    [dy, dh_n, dc_n]: [Option<FloatTensor<B>>; 3],
    wanted: GradsWanted,
) -> Grads<B> {
    let dtype = inputs.x.dtype();
    let half = compute(dtype).1;
    let x = read::<B, T>(&inputs.x);
    let h0 = read::<B, T>(&inputs.h0);
    let w = read::<B, T>(&inputs.weights);
    // With half-precision inputs the reserve keeps the last layer's output; `y` (rounded)
    // is not read.
    let y: Cow<'_, [T]> = if half {
        Cow::Borrowed(&[])
    } else {
        read::<B, T>(y)
    };
    let dy = dy.as_ref().map(read::<B, T>);
    let dh_n = dh_n.as_ref().map(read::<B, T>);
    let dc_n = dc_n.as_ref().map(read::<B, T>);
    // The backward writes its gradients over the reserve, taken without a copy: the node
    // held the only handle and is consumed by its backward.
    let reserve = T::take::<B>(reserve);
    let host = kernel::HostInputs {
        x: &x,
        h0: Some(&h0),
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
    Grads {
        dx: wanted
            .x
            .then(|| tensor::<B, T>(g.dx, &desc.input_shape(), dtype)),
        dh0: tensor::<B, T>(g.dh0, &desc.hidden_shape(), dtype),
        dc0: g.dc0.map(|c| tensor::<B, T>(c, &desc.cell_shape(), dtype)),
        dweights: wanted
            .weights
            .then(|| tensor::<B, T>(g.dweights, &[desc.params_size()], dtype)),
    }
}

#[cfg(feature = "ndarray")]
mod ndarray_impl {
    #![allow(deprecated)] // Burn 0.22 deprecates NdArray in favour of Flex; both are served.
    use burn::backend::ndarray::{NdArray, NdArrayTensor};
    use burn::backend::{TensorData, TensorMetadata};

    /// The elements of an NdArray storage in row-major order: its buffer itself when the
    /// storage owns the only handle to a standard-layout array.
    macro_rules! owned_vec {
        ($storage:expr) => {{
            let a = $storage.into_owned().into_owned();
            if a.is_standard_layout() {
                let len = a.len();
                let (v, offset) = a.into_raw_vec_and_offset();
                let start = offset.unwrap_or(0);
                if start == 0 && v.len() == len {
                    v
                } else {
                    v[start..start + len].to_vec()
                }
            } else {
                a.iter().cloned().collect()
            }
        }};
    }

    impl super::NativeBackend for NdArray {
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

        fn contiguous(t: &NdArrayTensor) -> NdArrayTensor {
            match t {
                NdArrayTensor::F32(s) => NdArrayTensor::from_data(TensorData::new(
                    s.view().iter().copied().collect::<Vec<f32>>(),
                    s.view().shape().to_vec(),
                )),
                NdArrayTensor::F64(s) => NdArrayTensor::from_data(TensorData::new(
                    s.view().iter().copied().collect::<Vec<f64>>(),
                    s.view().shape().to_vec(),
                )),
                other => panic!("expected an F32 or F64 tensor, got {:?}", other.dtype()),
            }
        }

        fn from_data(data: TensorData) -> NdArrayTensor {
            NdArrayTensor::from_data(data)
        }

        fn take_f32(t: NdArrayTensor) -> Vec<f32> {
            match t {
                NdArrayTensor::F32(s) => owned_vec!(s),
                other => panic!("expected an F32 tensor, got {:?}", other.dtype()),
            }
        }

        fn take_f64(t: NdArrayTensor) -> Vec<f64> {
            match t {
                NdArrayTensor::F64(s) => owned_vec!(s),
                other => panic!("expected an F64 tensor, got {:?}", other.dtype()),
            }
        }
    }
}

#[cfg(feature = "flex")]
mod flex_impl {
    use burn::backend::flex::{Flex, FlexTensor};
    use burn::backend::TensorData;

    impl super::NativeBackend for Flex {
        fn host_f32(t: &FlexTensor) -> Option<&[f32]> {
            t.as_slice::<f32>()
        }

        fn host_f64(t: &FlexTensor) -> Option<&[f64]> {
            t.as_slice::<f64>()
        }

        fn contiguous(t: &FlexTensor) -> FlexTensor {
            t.to_contiguous()
        }

        fn from_data(data: TensorData) -> FlexTensor {
            FlexTensor::from_data(data)
        }

        fn take_f32(t: FlexTensor) -> Vec<f32> {
            t.into_data().try_into_vec::<f32>().expect("an F32 tensor")
        }

        fn take_f64(t: FlexTensor) -> Vec<f64> {
            t.into_data().try_into_vec::<f64>().expect("an F64 tensor")
        }
    }
}

impl<B: NativeBackend> crate::prims::FusedKernel for B {
    type Reserve = FloatTensor<B>;

    fn fused_forward(
        desc: &RnnDescriptor,
        inputs: &Inputs<B>,
        training: bool,
    ) -> (Outputs<B>, Option<FloatTensor<B>>) {
        forward(desc, inputs, training)
    }

    fn fused_backward(
        desc: &RnnDescriptor,
        inputs: &Inputs<B>,
        y: &FloatTensor<B>,
        reserve: FloatTensor<B>,
        dy: Option<FloatTensor<B>>,
        dh_n: Option<FloatTensor<B>>,
        dc_n: Option<FloatTensor<B>>,
        wanted: GradsWanted,
    ) -> Grads<B> {
        backward(desc, inputs, y, reserve, dy, dh_n, dc_n, wanted)
    }
}
