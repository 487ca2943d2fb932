//! The op's value types: what one call of the fused op reads, returns and keeps.
//!
//! Plain carriers of backend primitives, shared by every implementation (reference, native
//! CPU kernel, cuDNN, fusion, autodiff) and by the trait in [`crate::backend`]. They sit
//! below all of those, so that data flows one way: descriptor → op types →
//! implementations → trait → module.
//!
//! The semantics every implementation follows (Note [Variable lengths], Note [Padding
//! never leaks], Note [Half precision]) are written down once, in the core crate's
//! `semantics` module (`burn_fused_rnn_core::semantics`).

use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{DType, Tensor, TensorMetadata, TensorPrimitive};

/// The tensors one call of the fused op reads.
///
/// Shapes are those of [`RnnDescriptor`](crate::RnnDescriptor): `x` in the descriptor's layout, `h0` `[L*D, B, P]`,
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
/// gate activations and states (layout in [`crate::reference`]), cuDNN its reserve space,
/// the native CPU kernel its activated gates. Every tensor is a float primitive of the same
/// backend, so the reserve can be carried by an autodiff node or returned as outputs of a
/// fused custom op. Native implementations tag theirs (Note [Reserve tag], in this
/// module).
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

/// Gradients of the op's inputs. A gradient the call did not want ([`GradsWanted`]) may
/// be `None`; one it wanted is always there.
///
/// [`GradsWanted`]: crate::GradsWanted
#[derive(Debug, Clone)]
pub struct RnnGrads<B: Backend> {
    /// Gradient of `x`, same shape as `x`.
    pub dx: Option<FloatTensor<B>>,
    /// Gradient of `h0`, `[L*D, B, P]`.
    pub dh0: FloatTensor<B>,
    /// Gradient of `c0`, `[L*D, B, H]` (LSTM only).
    pub dc0: Option<FloatTensor<B>>,
    /// Gradient of the flat weights, `[params_size]`, canonical layout.
    pub dweights: Option<FloatTensor<B>>,
}

pub(crate) use burn_fused_rnn_core::reserve::ReserveTag;

/// A float primitive as a Burn tensor of rank `D`.
pub(crate) fn float<B: Backend, const D: usize>(t: B::FloatTensorPrimitive) -> Tensor<B, D> {
    Tensor::from_primitive(TensorPrimitive::Float(t))
}

/// A Burn float tensor as its primitive.
pub(crate) fn prim<B: Backend, const D: usize>(t: Tensor<B, D>) -> B::FloatTensorPrimitive {
    t.into_primitive().tensor()
}

/// The dtype every implementation computes in for inputs of `dtype` (Note [Half
/// precision]).
pub fn compute_dtype(dtype: DType) -> DType {
    match dtype {
        DType::F16 | DType::BF16 => DType::F32,
        other => other,
    }
}

/// `t` in `dtype`, without a copy when it already is.
pub(crate) fn cast<B: Backend>(t: FloatTensor<B>, dtype: DType) -> FloatTensor<B> {
    if t.dtype() == dtype {
        t
    } else {
        B::float_cast(t, dtype.into())
    }
}

/// `inputs` in `dtype` (Note [Half precision]).
pub(crate) fn cast_inputs<B: Backend>(inputs: RnnInputs<B>, dtype: DType) -> RnnInputs<B> {
    RnnInputs {
        x: cast::<B>(inputs.x, dtype),
        h0: inputs.h0.map(|t| cast::<B>(t, dtype)),
        c0: inputs.c0.map(|t| cast::<B>(t, dtype)),
        weights: cast::<B>(inputs.weights, dtype),
    }
}

/// `out` in `dtype` (Note [Half precision]).
pub(crate) fn cast_output<B: Backend>(out: RnnOutput<B>, dtype: DType) -> RnnOutput<B> {
    RnnOutput {
        y: cast::<B>(out.y, dtype),
        h_n: cast::<B>(out.h_n, dtype),
        c_n: out.c_n.map(|t| cast::<B>(t, dtype)),
    }
}
