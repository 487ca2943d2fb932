//! The backend extension: the fused op as four backend methods whose default bodies are
//! the reference implementation.
//!
//! A backend with a native RNN overrides them: cuDNN on CUDA (`crate::cudnn`), the native
//! CPU kernel on NdArray and Flex (`crate::cpu`). Every other backend inherits the
//! reference, written once with Burn tensor ops ([`crate::reference`]).

use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::DType;

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
