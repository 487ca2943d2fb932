//! The backend extension: the fused op as four backend methods whose default bodies are
//! the reference implementation.
//!
//! A backend with a native RNN overrides them: cuDNN on CUDA (`crate::cudnn`), the native
//! CPU kernel on NdArray and Flex (`crate::cpu`). Every other backend inherits the
//! reference, written once with Burn tensor ops ([`crate::reference`]). Three more methods,
//! with defaults any backend may keep, serve the module: a buffer's identity, and the flat
//! weights built from the parameters and cut back into them (Note [Flat weights from
//! parts]).

use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{DType, Shape, Slice, TensorMetadata};

use crate::descriptor::{GradsWanted, RnnDescriptor};
use crate::op_types::{RnnGrads, RnnInputs, RnnOutput, RnnOutputGrads, RnnReserve};
use crate::reference;

/// A backend that runs the fused RNN op.
///
/// Every method has a default body: the reference implementation in Burn tensor ops, so
/// `impl FusedRnnBackend for MyBackend {}` is a complete implementation. Callers have
/// checked the tensors against the descriptor ([`RnnDescriptor::check_inputs`]) before
/// dispatch, so implementations may rely on the shapes.
pub trait FusedRnnBackend: Backend {
    /// Inference forward: no reserve, no dropout.
    fn fused_rnn_forward(desc: &RnnDescriptor, inputs: RnnInputs<Self>) -> RnnOutput<Self> {
        reference::forward::<Self>(desc, inputs)
    }

    /// Training forward: applies dropout between layers and returns what the backward
    /// pass needs.
    fn fused_rnn_forward_training(
        desc: &RnnDescriptor,
        inputs: RnnInputs<Self>,
    ) -> (RnnOutput<Self>, RnnReserve<Self>) {
        reference::forward_training::<Self>(desc, inputs)
    }

    /// Shapes and dtypes of the tensors [`fused_rnn_forward_training`] returns as its
    /// reserve, for inputs of `dtype` on `device`, known before it runs: a fused custom op
    /// ([`burn_fusion::Fusion`](https://docs.rs/burn-fusion)) declares its outputs when it is
    /// registered. Must match what [`fused_rnn_forward_training`] returns exactly.
    ///
    /// The default is the reference's Note [Reserve layout] ([`reference::reserve_shapes`]),
    /// in [`crate::op_types::compute_dtype`] of `dtype`.
    ///
    /// [`fused_rnn_forward_training`]: FusedRnnBackend::fused_rnn_forward_training
    fn fused_rnn_reserve_layout(
        desc: &RnnDescriptor,
        dtype: DType,
        device: &Self::Device,
    ) -> Vec<(Vec<usize>, DType)> {
        let _ = device;
        reference::reserve_layout(desc, dtype)
    }

    /// Backward pass (BPTT) from the output gradients, using the reserve of the training
    /// forward that produced `output`. Returns the input gradients in one go, in the
    /// inputs' dtype: every `wanted` one, and `dh0` (and `dc0`) always. A gradient not
    /// wanted may be skipped (`None`) or computed anyway; the native CPU kernel and the
    /// CubeCL kernels skip its products (the core crate's Note [Gradients not wanted],
    /// Note [Cube gradients not wanted] in `crate::cube`), cuDNN and the reference
    /// compute it.
    fn fused_rnn_backward(
        desc: &RnnDescriptor,
        inputs: RnnInputs<Self>,
        output: RnnOutput<Self>,
        reserve: RnnReserve<Self>,
        grads: RnnOutputGrads<Self>,
        wanted: GradsWanted,
    ) -> RnnGrads<Self> {
        reference::backward::<Self>(desc, inputs, output, reserve, grads, wanted)
    }

    /// An identity of `t`'s elements that holds while a clone of `t` is alive: two tensors
    /// with the same identity hold the same values. The native CPU backends answer the
    /// address and length of the buffer they read (a buffer shared by clones is written in
    /// place only when no clone holds it); the default, `None`, means the backend cannot
    /// tell. [`FusedRnn`](crate::FusedRnn) uses it to keep its flat weight vector across
    /// inference calls while its parameters are unchanged (Note [Flat weights across
    /// calls]).
    fn fused_rnn_buffer_identity(t: &FloatTensor<Self>) -> Option<(usize, usize)> {
        let _ = t;
        None
    }

    /// The flat weight vector `[params_size]` that a call of [`FusedRnn`](crate::FusedRnn)
    /// passes to the op: the canonical tensors `parts`, each in row-major order, one after
    /// the other in the layout's order (Note [Flat weights from parts]).
    ///
    /// The default reshapes each part to 1-D and concatenates them with Burn's ops. The
    /// native CPU backends copy each part once into one buffer; `Autodiff` tracks the
    /// concatenation as one chain of nodes whose backward cuts the gradient with
    /// [`fused_rnn_split`](FusedRnnBackend::fused_rnn_split).
    fn fused_rnn_concat(parts: Vec<FloatTensor<Self>>) -> FloatTensor<Self> {
        concat_parts::<Self>(parts)
    }

    /// The inverse of [`fused_rnn_concat`](FusedRnnBackend::fused_rnn_concat): `flat` cut
    /// into tensors of `shapes`, in order. The default slices and reshapes with Burn's ops
    /// (views on Flex); NdArray copies each part once out of the flat buffer.
    fn fused_rnn_split(flat: FloatTensor<Self>, shapes: &[Vec<usize>]) -> Vec<FloatTensor<Self>> {
        split_parts::<Self>(flat, shapes)
    }
}

/// [`FusedRnnBackend::fused_rnn_concat`]'s default: each part reshaped to 1-D, then
/// concatenated, on `B`'s primitives (no autodiff graph of its own).
///
/// # Note [Flat weights from parts]
///
/// The op reads its weights as one flat vector (Note [RNN weight layout]) while the module
/// keeps one parameter per canonical tensor, so every call concatenates them (inference
/// calls keep the result while the parameters are unchanged: Note [Flat weights across
/// calls]). Under `Autodiff` through Burn's tensor API that was a tracked reshape per
/// matrix and a tracked `cat`, whose backward slices the gradient and reshapes each slice
/// back. On Burn 0.21's NdArray every reshape copies (`into_shared` of a borrowed view;
/// burn-ndarray 0.22 no longer does), so a training step copied the weights three times
/// forward and twice backward, each into a fresh allocation, on the calling thread while
/// the kernel's threads waited. Now the backends build the vector from the parts' buffers
/// (one copy), `Autodiff` records one link per part (Note [Concatenation as a chain] in
/// `crate::autodiff`), and the backward cuts the flat gradient once into the parts'
/// shapes: one copy per part on NdArray, views on Flex, whose slices and reshapes copy
/// nothing. Measured on an Intel Xeon (Granite Rapids class, 2 threads; docs/BENCHMARKS.md,
/// "the flat weights without Burn's concatenation"), a training step through Burn's
/// concatenation took 1.10–1.16× the time of one through the chain on NdArray at H = I =
/// 256, B = 32, T = 50 (LSTM; GRU 1.03–1.08×), and 1.00–1.01× on Flex.
///
/// # Note [Parts outlive the concatenation]
///
/// Under `Autodiff` (the public `FusedRnn::flat_weights` runs this on `Autodiff`'s
/// primitives), each matrix's reshape is a node whose only parent is a parameter, so Burn
/// 0.21 puts it in a graph of its own until the concatenation merges it into the
/// concatenation's graph. `cat` drops its inputs before it registers its node; in that
/// window the reshape's graph holds one unreferenced node, and another thread finishing a
/// `backward` (which sweeps every graph for unreferenced roots, `cleanup_orphaned_entries`
/// in burn-autodiff) may delete it: that parameter then gets no gradient, silently. It
/// happens with Burn's ops alone (a reshape of a parameter, a `cat`, six threads: a
/// gradient lost within a few hundred rounds). So the parts are kept alive until `cat` has
/// returned; `tests/concurrency.rs` caught it.
pub(crate) fn concat_parts<B: Backend>(parts: Vec<FloatTensor<B>>) -> FloatTensor<B> {
    let flat: Vec<FloatTensor<B>> = parts
        .into_iter()
        .map(|p| {
            let n = p.shape().num_elements();
            B::float_reshape(p, Shape::new([n]))
        })
        .collect();
    let keep = flat.clone();
    let out = B::float_cat(flat, 0);
    drop(keep);
    out
}

/// [`FusedRnnBackend::fused_rnn_split`]'s default, on `B`'s primitives.
///
/// # Panics
///
/// If `shapes` do not add up to `flat`'s length, naming both.
pub(crate) fn split_parts<B: Backend>(
    flat: FloatTensor<B>,
    shapes: &[Vec<usize>],
) -> Vec<FloatTensor<B>> {
    let total: usize = shapes.iter().map(|s| s.iter().product::<usize>()).sum();
    let len = flat.shape().num_elements();
    assert_eq!(
        total, len,
        "expected flat weights of {total} elements for parts of shapes {shapes:?}, got {len}"
    );
    let mut at = 0;
    shapes
        .iter()
        .map(|shape| {
            let n: usize = shape.iter().product();
            let part = B::float_slice(flat.clone(), &[Slice::from(at..at + n)]);
            at += n;
            B::float_reshape(part, Shape::from(shape.clone()))
        })
        .collect()
}

/// The four methods of `impl FusedRnnBackend` for a backend whose every call runs
/// implementation `$module` (`cpu`, `cube`): its `forward`, `forward_training`,
/// `reserve_layout` and `backward`.
#[allow(unused_macros)] // Used only with a backend feature.
macro_rules! implemented_by {
    ($module:ident) => {
        fn fused_rnn_forward(
            desc: &$crate::RnnDescriptor,
            inputs: $crate::RnnInputs<Self>,
        ) -> $crate::RnnOutput<Self> {
            $crate::$module::forward::<Self>(desc, inputs)
        }

        fn fused_rnn_forward_training(
            desc: &$crate::RnnDescriptor,
            inputs: $crate::RnnInputs<Self>,
        ) -> ($crate::RnnOutput<Self>, $crate::RnnReserve<Self>) {
            $crate::$module::forward_training::<Self>(desc, inputs)
        }

        fn fused_rnn_reserve_layout(
            desc: &$crate::RnnDescriptor,
            dtype: burn::tensor::DType,
            _device: &Self::Device,
        ) -> Vec<(Vec<usize>, burn::tensor::DType)> {
            $crate::$module::reserve_layout(desc, dtype)
        }

        fn fused_rnn_backward(
            desc: &$crate::RnnDescriptor,
            inputs: $crate::RnnInputs<Self>,
            output: $crate::RnnOutput<Self>,
            reserve: $crate::RnnReserve<Self>,
            grads: $crate::RnnOutputGrads<Self>,
            wanted: $crate::GradsWanted,
        ) -> $crate::RnnGrads<Self> {
            $crate::$module::backward::<Self>(desc, inputs, output, reserve, grads, wanted)
        }
    };
}

#[allow(unused_imports)] // Used only with a backend feature.
pub(crate) use implemented_by;
