//! The fused op on Burn tensors: checks shapes once, then routes the call to the native
//! kernel or to the reference.
//!
//! # Note [Call routing]
//!
//! Burn 0.22's tensors carry their backend at run time (its dispatch backend), so the
//! route is chosen per call, from the input's device:
//!
//! - NdArray or Flex: the native CPU kernel (module `native`), reading the tensors'
//!   host memory in place;
//! - NdArray or Flex under autodiff: the same kernel inside ONE backward node per call
//!   ([`crate::autodiff`]), for either of Burn's gradient-checkpointing strategies;
//! - a Wgpu device (feature `wgpu`): the CubeCL kernels ([`crate::cube`]), under
//!   autodiff inside the same one backward node; F64, sizes past the kernels' 32-bit
//!   indices and calls while [`crate::cube::set_enabled`] is off run the reference (Note
//!   [Cube fallback] in [`crate::cube`]). With this crate's `fusion` feature (Burn's
//!   `fusion`, which wraps the CubeCL backend in Fusion) each call is one custom operation
//!   in the fusion stream; when Burn's `fusion` is on but this crate's is not (turned on
//!   by another crate of the build), calls on Wgpu run the reference;
//! - any other device (the other cubecl runtimes: CUDA, ROCm, Metal's own, the CPU runtime;
//!   LibTorch, Remote, ...): the reference
//!   ([`crate::reference`]), Burn tensor ops that Burn's autodiff traces op by op.
//!
//! The native route takes each tensor out of the dispatch layer as its backend's primitive
//! (`Tensor::try_into_primitive`). Tensors of one call on autodiff and plain devices at
//! once are first brought into one context (`one_context`); when a tensor still cannot be
//! taken out (tensors of a call on two backends, or on two checkpointing strategies), the
//! call runs the reference, which Burn's own ops resolve as they resolve any mixed
//! operation.

use burn::tensor::{DType, Tensor};

use crate::descriptor::RnnDescriptor;
use crate::reference;

/// Result of [`fused_rnn`]: output sequence and final states.
#[derive(Debug, Clone)]
pub struct FusedRnnOutput {
    /// `[B, T, D*P]` (batch-first) or `[T, B, D*P]`; zero past each sequence's length.
    pub output: Tensor<3>,
    /// Final hidden state `[L*D, B, P]`.
    pub hidden: Tensor<3>,
    /// Final cell state `[L*D, B, H]` (LSTM only).
    pub cell: Option<Tensor<3>>,
}

/// Which implementation ran a call (see Note [Call routing]); [`route_of`] tells it in advance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// The native CPU kernel (NdArray, Flex), one backward node per call under autodiff.
    Native,
    /// The CubeCL kernels (Wgpu), one backward node per call under autodiff.
    Cube,
    /// The reference implementation in Burn tensor ops.
    Reference,
}

/// The route a call whose input lives on `input`'s device takes (Note [Call routing]), assuming
/// every other tensor of the call lives on the same device.
pub fn route_of(input: &Tensor<3>) -> Route {
    use burn::backend::DispatchDevice;
    let device = input.device();
    let dispatch: &DispatchDevice = device.as_dispatch();
    #[allow(unreachable_patterns)]
    let inner: &DispatchDevice = match dispatch {
        #[cfg(feature = "autodiff")]
        DispatchDevice::Autodiff(inner) => inner,
        other => other,
    };
    #[allow(unreachable_patterns)]
    match inner {
        #[cfg(feature = "ndarray")]
        DispatchDevice::NdArray(_) => Route::Native,
        #[cfg(feature = "flex")]
        DispatchDevice::Flex(_) => Route::Native,
        #[cfg(feature = "wgpu")]
        DispatchDevice::Cube(cubecl::Device::Wgpu(_))
            if crate::cube::enabled() && crate::cube::routable() && input.dtype() != DType::F64 =>
        {
            Route::Cube
        }
        _ => Route::Reference,
    }
}

/// Runs the fused RNN op: every layer and direction in one call.
///
/// Most users want [`FusedRnn`](crate::FusedRnn), which owns the weights; this is the
/// functional form over a flat canonical weight vector (Note [RNN weight layout] in
/// [`crate::layout`]).
///
/// # Arguments
///
/// - `desc`: the call's parameters.
/// - `input`: `[batch_size, seq_length, d_input]` if `desc.batch_first`, else
///   `[seq_length, batch_size, d_input]`.
/// - `h0`: initial hidden state `[L*D, batch_size, P]`, zeros when `None`.
/// - `c0`: initial cell state `[L*D, batch_size, H]` (LSTM only), zeros when `None`.
/// - `weights`: flat canonical weights `[params_size]`.
///
/// # Training
///
/// A call trains (applies `desc.dropout` between layers, keeps what its backward needs)
/// when one of its tensors is tracked by autodiff (it requires a gradient or was computed
/// from one that does); otherwise it is an inference call.
///
/// # Dtypes
///
/// Every tensor must have the input's dtype, a float dtype the device supports. F16 and
/// BF16 compute in F32 (Note [Half precision] in the core crate's `semantics`); outputs
/// have the input's dtype.
///
/// # Panics
///
/// With "expected …, got …" naming the argument when a shape does not fit `desc`, when a
/// dtype differs from the input's, or when the device does not support the input's dtype.
pub fn fused_rnn(
    desc: &RnnDescriptor,
    input: Tensor<3>,
    h0: Option<Tensor<3>>,
    c0: Option<Tensor<3>>,
    weights: Tensor<1>,
) -> FusedRnnOutput {
    check_shapes(desc, &input, h0.as_ref(), c0.as_ref(), &weights);
    check_dtypes(
        &input,
        h0.as_ref().map(Tensor::dtype),
        c0.as_ref().map(Tensor::dtype),
        weights.dtype(),
    );
    let training = is_tracked(&input)
        || h0.as_ref().is_some_and(is_tracked)
        || c0.as_ref().is_some_and(is_tracked)
        || is_tracked(&weights);
    let route = route_of(&input);
    #[cfg(feature = "wgpu")]
    let route = if route == Route::Cube && !crate::cube::runs(desc, input.dtype()) {
        Route::Reference
    } else {
        route
    };
    if route != Route::Reference {
        let (device, dtype) = (input.device(), input.dtype());
        let h0 = h0.unwrap_or_else(|| Tensor::zeros(desc.hidden_shape(), (&device, dtype)));
        let c0 = desc
            .spec
            .mode
            .has_cell_state()
            .then(|| c0.unwrap_or_else(|| Tensor::zeros(desc.cell_shape(), (&device, dtype))));
        let parts = Parts {
            x: input,
            h0,
            c0,
            weights,
        };
        let (parts, rewrap) = one_context(parts, training);
        let ran = match route {
            #[cfg(feature = "wgpu")]
            Route::Cube => cube_route(desc, Box::new(parts)),
            _ => native_route(desc, Box::new(parts)),
        };
        match ran {
            Ok(out) if rewrap => FusedRnnOutput {
                output: out.output.autodiff(),
                hidden: out.hidden.autodiff(),
                cell: out.cell.map(Tensor::autodiff),
            },
            Ok(out) => out,
            Err(parts) => run_reference(desc, *parts, training),
        }
    } else {
        let (device, dtype) = (input.device(), input.dtype());
        let h0 = h0.unwrap_or_else(|| Tensor::zeros(desc.hidden_shape(), (&device, dtype)));
        run_reference(
            desc,
            Parts {
                x: input,
                h0,
                c0,
                weights,
            },
            training,
        )
    }
}

/// The tensors of one call, states present.
#[derive(Clone)]
struct Parts {
    x: Tensor<3>,
    h0: Tensor<3>,
    c0: Option<Tensor<3>>,
    weights: Tensor<1>,
}

/// The tensors of a call in one autodiff context (Note [Call routing]), so that a module made
/// `valid()` still runs natively on inputs from an autodiff device, and a tracked call
/// whose input came from a plain device still trains through the one node: a training call
/// moves every tensor onto autodiff; an inference call whose tensors mix the two runs on
/// plain tensors, and its outputs go back onto autodiff (`true`) when its input was.
#[cfg(feature = "autodiff")]
fn one_context(p: Parts, training: bool) -> (Parts, bool) {
    let any = p.x.is_autodiff()
        || p.h0.is_autodiff()
        || p.c0.as_ref().is_some_and(Tensor::is_autodiff)
        || p.weights.is_autodiff();
    let all = p.x.is_autodiff()
        && p.h0.is_autodiff()
        && p.c0.as_ref().is_none_or(Tensor::is_autodiff)
        && p.weights.is_autodiff();
    if !any || all {
        return (p, false);
    }
    if training {
        let parts = Parts {
            x: p.x.autodiff(),
            h0: p.h0.autodiff(),
            c0: p.c0.map(Tensor::autodiff),
            weights: p.weights.autodiff(),
        };
        (parts, false)
    } else {
        let rewrap = p.x.is_autodiff();
        let parts = Parts {
            x: p.x.without_autodiff(),
            h0: p.h0.without_autodiff(),
            c0: p.c0.map(Tensor::without_autodiff),
            weights: p.weights.without_autodiff(),
        };
        (parts, rewrap)
    }
}

#[cfg(not(feature = "autodiff"))]
fn one_context(p: Parts, _training: bool) -> (Parts, bool) {
    (p, false)
}

fn run_reference(desc: &RnnDescriptor, p: Parts, training: bool) -> FusedRnnOutput {
    let out = reference::forward(desc, p.x, Some(p.h0), p.c0, p.weights, training);
    FusedRnnOutput {
        output: out.y,
        hidden: out.h_n,
        cell: out.c_n,
    }
}

/// Whether `t` is tracked by autodiff (a training call's tensor, Note [Call routing]).
#[cfg(feature = "autodiff")]
pub(crate) fn is_tracked<const D: usize>(t: &Tensor<D>) -> bool {
    t.is_tracked()
}

#[cfg(not(feature = "autodiff"))]
pub(crate) fn is_tracked<const D: usize>(_: &Tensor<D>) -> bool {
    false
}

/// The identity (address, length) of the buffer of `t` when `t` is a plain (untracked)
/// tensor of a native backend, NdArray or Flex, whose elements lie in row-major order in
/// one buffer; `None` otherwise (Note [Flat weights across calls] in the core crate's `memo`).
#[allow(unused_variables)]
pub(crate) fn buffer_identity<const D: usize>(t: &Tensor<D>) -> Option<(usize, usize)> {
    #[cfg(feature = "ndarray")]
    #[allow(deprecated)] // Burn 0.22 deprecates NdArray in favour of Flex; both are served.
    if let Ok(p) = t.clone().try_into_primitive::<burn::backend::NdArray>() {
        return crate::native::buffer_identity::<burn::backend::NdArray>(&p);
    }
    #[cfg(feature = "flex")]
    if let Ok(p) = t.clone().try_into_primitive::<burn::backend::Flex>() {
        return crate::native::buffer_identity::<burn::backend::Flex>(&p);
    }
    None
}

/// The native route (Note [Call routing]); gives the tensors back when they do not all live on
/// one native backend.
#[allow(unused_variables)]
fn native_route(desc: &RnnDescriptor, parts: Box<Parts>) -> Result<FusedRnnOutput, Box<Parts>> {
    #[cfg(feature = "ndarray")]
    #[allow(deprecated)] // Burn 0.22 deprecates NdArray in favour of Flex; both are served.
    let parts = match kernel_on::<burn::backend::NdArray, burn::backend::NdArray>(desc, parts) {
        Ok(out) => return Ok(out),
        Err(parts) => parts,
    };
    #[cfg(feature = "flex")]
    let parts = match kernel_on::<burn::backend::Flex, burn::backend::Flex>(desc, parts) {
        Ok(out) => return Ok(out),
        Err(parts) => parts,
    };
    Err(parts)
}

/// The CubeCL route (Note [Call routing]): the kernels on Burn's CubeCL backend, when
/// dispatch's `Cube` is that backend itself, or (feature `fusion`) that backend under
/// Fusion, where each call is one custom operation.
#[cfg(feature = "wgpu")]
fn cube_route(desc: &RnnDescriptor, parts: Box<Parts>) -> Result<FusedRnnOutput, Box<Parts>> {
    #[cfg(feature = "fusion")]
    let parts = match kernel_on::<burn_fusion::Fusion<burn_cubecl::CubeBackend>, burn::backend::Cube>(
        desc, parts,
    ) {
        Ok(out) => return Ok(out),
        Err(parts) => parts,
    };
    kernel_on::<burn_cubecl::CubeBackend, burn::backend::Cube>(desc, parts)
}

/// `a` as type `T`, which is its own type under another name: the dispatch layer's backend
/// `D` as the kernel's backend `K` of [`kernel_on`] (checked by [`kernel_on`] first).
#[cfg(any(feature = "ndarray", feature = "flex", feature = "wgpu"))]
fn same<A: 'static, T: 'static>(a: A) -> T {
    let boxed: Box<dyn std::any::Any> = Box::new(a);
    *boxed
        .downcast::<T>()
        .unwrap_or_else(|_| unreachable!("kernel_on checked that the types are one"))
}

/// Runs the call with the fused kernel of backend `K` when every tensor converts to the
/// dispatch layer's backend `D` (plain, or under autodiff with either checkpointing
/// strategy) and `D` is `K`; else hands the tensors back untouched.
///
/// `D` and `K` are one type under two names: dispatch names its CubeCL backend `Cube`,
/// which is the kernels' `CubeBackend` itself, unless Burn's `fusion` feature (which a
/// user's build may turn on) makes it `Fusion<CubeBackend>`. The check is at run time, so
/// that this crate builds either way.
#[cfg(any(feature = "ndarray", feature = "flex", feature = "wgpu"))]
fn kernel_on<K, D>(desc: &RnnDescriptor, parts: Box<Parts>) -> Result<FusedRnnOutput, Box<Parts>>
where
    K: crate::prims::FusedKernel,
    D: burn::backend::Backend,
    burn::backend::DispatchTensor: burn::backend::DispatchKindConversion<D>,
    burn::backend::DispatchTensor: AutodiffConversions<D>,
{
    use std::any::TypeId;
    if TypeId::of::<K>() != TypeId::of::<D>() {
        return Err(parts);
    }
    if let Some(inputs) = convert::<D>(&parts) {
        let inputs: crate::prims::Inputs<K> = same(inputs);
        let (out, _) = K::fused_forward(desc, &inputs, false);
        return Ok(wrap::<D>(same(out)));
    }
    #[cfg(feature = "autodiff")]
    {
        use burn::backend::autodiff::checkpoint::strategy::{
            BalancedCheckpointing, NoCheckpointing,
        };
        use burn::backend::Autodiff;
        if let Some(inputs) = convert::<Autodiff<D, NoCheckpointing>>(&parts) {
            let inputs: crate::prims::Inputs<Autodiff<K, NoCheckpointing>> = same(inputs);
            let out = crate::autodiff::forward(desc, inputs);
            return Ok(wrap::<Autodiff<D, NoCheckpointing>>(same(out)));
        }
        if let Some(inputs) = convert::<Autodiff<D, BalancedCheckpointing>>(&parts) {
            let inputs: crate::prims::Inputs<Autodiff<K, BalancedCheckpointing>> = same(inputs);
            let out = crate::autodiff::forward(desc, inputs);
            return Ok(wrap::<Autodiff<D, BalancedCheckpointing>>(same(out)));
        }
    }
    Err(parts)
}

/// The conversions of the dispatch layer to `Autodiff<B, C>` that [`kernel_on`] needs.
#[cfg(feature = "autodiff")]
pub(crate) trait AutodiffConversions<B: burn::backend::Backend>:
    burn::backend::DispatchKindConversion<
        burn::backend::Autodiff<B, burn::backend::autodiff::checkpoint::strategy::NoCheckpointing>,
    > + burn::backend::DispatchKindConversion<
        burn::backend::Autodiff<
            B,
            burn::backend::autodiff::checkpoint::strategy::BalancedCheckpointing,
        >,
    >
{
}

#[cfg(feature = "autodiff")]
impl<B: burn::backend::Backend, T> AutodiffConversions<B> for T where
    T: burn::backend::DispatchKindConversion<
            burn::backend::Autodiff<
                B,
                burn::backend::autodiff::checkpoint::strategy::NoCheckpointing,
            >,
        > + burn::backend::DispatchKindConversion<
            burn::backend::Autodiff<
                B,
                burn::backend::autodiff::checkpoint::strategy::BalancedCheckpointing,
            >,
        >
{
}

/// Without autodiff no conversion is needed.
#[cfg(not(feature = "autodiff"))]
pub(crate) trait AutodiffConversions<B> {}

#[cfg(not(feature = "autodiff"))]
impl<B, T> AutodiffConversions<B> for T {}

/// Every tensor of `parts` as a primitive of backend `B`, or `None` when one is not.
#[cfg(any(feature = "ndarray", feature = "flex", feature = "wgpu"))]
fn convert<B>(parts: &Parts) -> Option<crate::prims::Inputs<B>>
where
    B: burn::backend::Backend,
    burn::backend::DispatchTensor: burn::backend::DispatchKindConversion<B>,
{
    Some(crate::prims::Inputs {
        x: parts.x.clone().try_into_primitive::<B>().ok()?,
        h0: parts.h0.clone().try_into_primitive::<B>().ok()?,
        c0: match &parts.c0 {
            Some(c0) => Some(c0.clone().try_into_primitive::<B>().ok()?),
            None => None,
        },
        weights: parts.weights.clone().try_into_primitive::<B>().ok()?,
    })
}

#[cfg(any(feature = "ndarray", feature = "flex", feature = "wgpu"))]
fn wrap<B>(out: crate::prims::Outputs<B>) -> FusedRnnOutput
where
    B: burn::backend::Backend,
    burn::backend::DispatchTensor: burn::backend::DispatchKindConversion<B>,
{
    FusedRnnOutput {
        output: Tensor::from_primitive::<B>(out.y),
        hidden: Tensor::from_primitive::<B>(out.h_n),
        cell: out.c_n.map(Tensor::from_primitive::<B>),
    }
}

/// The shape rules of [`fused_rnn`] (the descriptor's, "expected …, got …").
pub(crate) fn check_shapes(
    desc: &RnnDescriptor,
    input: &Tensor<3>,
    h0: Option<&Tensor<3>>,
    c0: Option<&Tensor<3>>,
    weights: &Tensor<1>,
) {
    desc.check_inputs(
        &input.dims(),
        h0.map(|h| h.dims()).as_ref().map(|d| &d[..]),
        c0.map(|c| c.dims()).as_ref().map(|d| &d[..]),
        &weights.dims(),
    );
}

/// The dtype rules of [`fused_rnn`].
fn check_dtypes(input: &Tensor<3>, h0: Option<DType>, c0: Option<DType>, weights: DType) {
    let dtype = input.dtype();
    let device = input.device();
    assert!(
        dtype.is_float() && device.supports_dtype(dtype),
        "expected input of a float dtype that {device:?} supports, got {dtype:?}",
    );
    for (name, got) in [
        ("initial hidden state", h0),
        ("initial cell state", c0),
        ("weights", Some(weights)),
    ] {
        if let Some(got) = got {
            assert!(
                got == dtype,
                "expected {name} of dtype {dtype:?} (the input's), got {got:?}"
            );
        }
    }
}
