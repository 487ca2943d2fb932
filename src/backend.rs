//! The backend extension: the fused op as three backend methods whose default bodies are
//! the reference implementation.
//!
//! A backend with a native RNN (cuDNN) overrides them; every other backend inherits the
//! reference, written once with Burn tensor ops ([`crate::reference`]).

use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::DType;

use crate::descriptor::RnnDescriptor;
use crate::reference;

/// The tensors one call of the fused op reads.
///
/// Shapes are those of [`RnnDescriptor`]: `x` in the descriptor's layout, `h0` `[L*D, B, P]`,
/// `c0` `[L*D, B, H]` (LSTM only), `weights` the flat params vector `[params_size]` in the
/// canonical layout (Note [RNN weight layout] in [`crate::layout`]).
#[derive(Debug, Clone)]
pub struct RnnInputs<B: Backend> {
    /// Input sequence.
    pub x: FloatTensor<B>,
    /// Initial hidden state; zeros when `None`.
    pub h0: Option<FloatTensor<B>>,
    /// Initial cell state (LSTM); zeros when `None`.
    pub c0: Option<FloatTensor<B>>,
    /// Flat canonical weights.
    pub weights: FloatTensor<B>,
}

/// What the fused op returns.
#[derive(Debug, Clone)]
pub struct RnnOutput<B: Backend> {
    /// Output sequence, `[T, B, D*P]` or `[B, T, D*P]`; zero past each sequence's length.
    pub y: FloatTensor<B>,
    /// Final hidden state `[L*D, B, P]`, taken at each sequence's last valid step.
    pub h_n: FloatTensor<B>,
    /// Final cell state `[L*D, B, H]` (LSTM only).
    pub c_n: Option<FloatTensor<B>>,
}

/// What a training forward keeps for its backward pass.
///
/// Opaque to everything but the implementation that produced it: the reference keeps
/// gate activations and states (layout in [`crate::reference`]), cuDNN its reserve space.
/// Every tensor is a float primitive of the same backend, so the reserve can be carried by
/// an autodiff node or returned as outputs of a fused custom op.
#[derive(Debug, Clone)]
pub struct RnnReserve<B: Backend> {
    /// The saved tensors, in an order fixed by the implementation.
    pub tensors: Vec<FloatTensor<B>>,
}

/// Gradients flowing into the op's outputs. `None` means no gradient (zero).
#[derive(Debug, Clone)]
pub struct RnnOutputGrads<B: Backend> {
    /// Gradient of `y`.
    pub dy: Option<FloatTensor<B>>,
    /// Gradient of `h_n`.
    pub dh_n: Option<FloatTensor<B>>,
    /// Gradient of `c_n`.
    pub dc_n: Option<FloatTensor<B>>,
}

/// Gradients of the op's inputs.
#[derive(Debug, Clone)]
pub struct RnnGrads<B: Backend> {
    /// Gradient of `x`, same shape as `x`.
    pub dx: FloatTensor<B>,
    /// Gradient of `h0`, `[L*D, B, P]`.
    pub dh0: FloatTensor<B>,
    /// Gradient of `c0`, `[L*D, B, H]` (LSTM only).
    pub dc0: Option<FloatTensor<B>>,
    /// Gradient of the flat weights, `[params_size]`, canonical layout.
    pub dweights: FloatTensor<B>,
}

/// A backend that runs the fused RNN op.
///
/// Every method has a default body: the reference implementation in Burn tensor ops, so
/// `impl FusedRnnBackend for MyBackend {}` is a complete implementation. Callers have
/// checked the tensors against the descriptor ([`RnnDescriptor::check_inputs`]) before
/// dispatch, so implementations may rely on the shapes.
pub trait FusedRnnBackend: Backend {
    /// How many host threads the reference implementation may use (Note [Reference
    /// threads] in [`crate::reference`]): 1 by default; CPU backends whose ops run on the
    /// calling thread return the number of cores.
    fn fused_rnn_reference_threads() -> usize {
        1
    }

    /// Inference forward: no reserve, no dropout.
    fn fused_rnn_forward(desc: &RnnDescriptor, inputs: RnnInputs<Self>) -> RnnOutput<Self> {
        reference::forward_with::<Self>(desc, inputs, Self::fused_rnn_reference_threads() > 1)
    }

    /// Training forward: applies dropout between layers and returns what the backward
    /// pass needs.
    fn fused_rnn_forward_training(
        desc: &RnnDescriptor,
        inputs: RnnInputs<Self>,
    ) -> (RnnOutput<Self>, RnnReserve<Self>) {
        reference::forward_training::<Self>(desc, inputs, Self::fused_rnn_reference_threads() > 1)
    }

    /// Shapes and dtypes of the tensors [`fused_rnn_forward_training`] returns as its
    /// reserve, for inputs of `dtype` on `device`, known before it runs: a fused custom op
    /// ([`burn_fusion::Fusion`](https://docs.rs/burn-fusion)) declares its outputs when it is
    /// registered. Must match what [`fused_rnn_forward_training`] returns exactly.
    ///
    /// The default is the reference's Note [Reserve layout] ([`reference::reserve_shapes`]),
    /// in [`reference::compute_dtype`] of `dtype`.
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
    /// forward that produced `output`. Returns every input gradient in one go, in the
    /// inputs' dtype.
    fn fused_rnn_backward(
        desc: &RnnDescriptor,
        inputs: RnnInputs<Self>,
        output: RnnOutput<Self>,
        reserve: RnnReserve<Self>,
        grads: RnnOutputGrads<Self>,
    ) -> RnnGrads<Self> {
        reference::backward::<Self>(
            desc,
            inputs,
            output,
            reserve,
            grads,
            Self::fused_rnn_reference_threads() > 1,
        )
    }
}
