//! The tensors of one call as primitives of one backend, and the trait of the fused
//! kernels that run on such primitives: the native CPU kernel (NdArray, Flex) and the
//! CubeCL kernels (Wgpu). The autodiff node ([`crate::autodiff`]) is written once over it.

use std::fmt::Debug;

use burn::backend::tensor::FloatTensor;
use burn::backend::Backend;

use crate::descriptor::RnnDescriptor;
use burn_fused_rnn_core::GradsWanted;

/// The tensors of one call, as primitives of backend `B`: `h0` and (LSTM) `c0` present.
#[derive(Debug, Clone)]
pub(crate) struct Inputs<B: Backend> {
    pub x: FloatTensor<B>,
    pub h0: FloatTensor<B>,
    pub c0: Option<FloatTensor<B>>,
    pub weights: FloatTensor<B>,
}

/// What one call returns, as primitives of backend `B`.
#[derive(Debug, Clone)]
pub(crate) struct Outputs<B: Backend> {
    pub y: FloatTensor<B>,
    pub h_n: FloatTensor<B>,
    pub c_n: Option<FloatTensor<B>>,
}

/// Gradients out to the inputs of a call.
#[derive(Debug, Clone)]
pub(crate) struct Grads<B: Backend> {
    /// `None` when not wanted (an implementation may compute it anyway).
    pub dx: Option<FloatTensor<B>>,
    pub dh0: FloatTensor<B>,
    pub dc0: Option<FloatTensor<B>>,
    /// `None` when not wanted (an implementation may compute it anyway).
    pub dweights: Option<FloatTensor<B>>,
}

/// A backend with a fused kernel: a forward that keeps what its backward needs (its
/// reserve) when training, and that backward.
pub(crate) trait FusedKernel: Backend {
    /// What a training forward keeps for the backward.
    type Reserve: Clone + Debug + Send + Sync + 'static;

    /// The forward pass; `training` applies dropout and returns the reserve.
    fn fused_forward(
        desc: &RnnDescriptor,
        inputs: &Inputs<Self>,
        training: bool,
    ) -> (Outputs<Self>, Option<Self::Reserve>);

    /// The backward pass from the reserve of a training forward of the same call, given
    /// the gradients flowing into its outputs (`None`: zero). Gradients not `wanted` may be
    /// skipped (the core's Note [Gradients not wanted]).
    #[allow(clippy::too_many_arguments)]
    fn fused_backward(
        desc: &RnnDescriptor,
        inputs: &Inputs<Self>,
        y: &FloatTensor<Self>,
        reserve: Self::Reserve,
        dy: Option<FloatTensor<Self>>,
        dh_n: Option<FloatTensor<Self>>,
        dc_n: Option<FloatTensor<Self>>,
        wanted: GradsWanted,
    ) -> Grads<Self>;
}
