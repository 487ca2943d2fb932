//! The op's value types: what one call of the fused op reads, returns and keeps.
//!
//! Plain carriers of backend primitives, shared by every implementation (reference, native
//! CPU kernel, cuDNN, fusion, autodiff) and by the trait in [`crate::backend`]. They sit
//! below all of those, so that data flows one way: descriptor → op types →
//! implementations → trait → module.
//!
//! The semantics every implementation follows are written down here, once:
//!
//! # Note [Variable lengths]
//!
//! Sequence `b` is valid for steps `t < len[b]`. At an invalid step the state is held and
//! the output is zero, so: the forward direction's final state is the state after step
//! `len[b] - 1`; the reverse direction scans `t = T-1 .. 0` and holds its initial state until
//! `t = len[b] - 1`, so it starts at each sequence's own last step; a length of 0 gives zero
//! outputs and final states equal to the initial states.
//!
//! # Note [Padding never leaks]
//!
//! Whatever the padded slots of the input (or of the output gradient) hold, NaN and
//! infinities included, changes no output and no gradient. Every implementation uses
//! *select* semantics at invalid steps (keep the old state, write a zero), never a
//! multiplication by a 0/1 mask, since `NaN · 0 = NaN` (the reference: `mask_where` /
//! `mask_fill`), and the padded rows of `x` are zeroed before the weight gradient
//! `dW_ih = dG^T x` reads them. cuDNN with padded IO behaves the same (checked on an H100).
//!
//! # Note [Half precision]
//!
//! F16 and BF16 inputs run in F32: the entry points cast `x`, the states, the weights and
//! the output gradients up once, compute everything (GEMM accumulation, the recurrence,
//! the reserve) in F32, and cast the results back to the input's dtype once. A recurrence
//! run in half precision would round the state at every step, and the exp-based
//! activations (Note [Activations through exp] in the reference's `cell`) overflow F16 at
//! `|x| > 11`. The only half-precision rounding left is that of the inputs and outputs
//! themselves.

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

/// Which implementation, and which variant of it, wrote a reserve, read from the length of
/// its first tensor.
///
/// # Note [Reserve tag]
///
/// A backward pass must run on a reserve that its own training forward made, with the
/// forward's settings (cuDNN: the RNN algorithm and TF32, which the reserve's layout
/// depends on, even if they changed in between). Every native implementation tags its
/// reserve the same way: the first tensor is 1-D and its length, modulo
/// [`ReserveTag::MODULUS`], names the writer:
///
/// | length mod 16 | writer |
/// |---|---|
/// | `0..8` | cuDNN: `2 · algorithm + tf32` (algorithm: Standard, PersistStatic, PersistStaticSmallH, PersistDynamic) |
/// | `8` | the native CPU kernel |
/// | `9` | the CubeCL kernels (a first tensor that carries only the tag, then the rows of Note [Cube reserve] in `crate::cube`) |
///
/// The payload is rounded up to a multiple of 16 and the tag added, so a tag costs at most
/// 31 elements. A tag is read from a shape alone: a fused custom op declares its reserve's
/// shape before it runs, and recognising a reserve never reads device memory. A backward
/// refuses a reserve whose tag is not its own, naming both. The reference's reserve
/// (several tensors of predictable shapes, Note [Reserve layout] in [`crate::reference`])
/// carries no tag; its backward checks the shapes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReserveTag {
    /// cuDNN, with its algorithm's index (`0..4`) and whether TF32 was on.
    Cudnn {
        /// Index of the algorithm in Standard, PersistStatic, PersistStaticSmallH,
        /// PersistDynamic.
        algorithm: u8,
        /// TF32 math.
        tf32: bool,
    },
    /// The native CPU kernel (NdArray, Flex).
    NativeCpu,
    /// The CubeCL kernels (Wgpu, and CUDA where cuDNN does not run).
    Cube,
}

impl ReserveTag {
    /// Tags are the length modulo this.
    pub(crate) const MODULUS: usize = 16;

    fn code(self) -> usize {
        match self {
            ReserveTag::Cudnn { algorithm, tf32 } => 2 * usize::from(algorithm) + usize::from(tf32),
            ReserveTag::NativeCpu => 8,
            ReserveTag::Cube => 9,
        }
    }

    /// The length of a first tensor of `payload` elements tagged with `self`.
    ///
    /// # Panics
    ///
    /// If the length overflows `usize`.
    pub(crate) fn tagged_len(self, payload: usize) -> usize {
        payload
            .max(1)
            .checked_next_multiple_of(Self::MODULUS)
            .and_then(|n| n.checked_add(self.code()))
            .expect("expected a reserve size that fits in usize, got an overflow")
    }

    /// The tag a first tensor of `len` elements carries, if any writer uses it.
    pub(crate) fn of_len(len: usize) -> Option<Self> {
        match len % Self::MODULUS {
            code @ 0..8 => Some(ReserveTag::Cudnn {
                algorithm: (code / 2) as u8,
                tf32: code % 2 == 1,
            }),
            8 => Some(ReserveTag::NativeCpu),
            9 => Some(ReserveTag::Cube),
            _ => None,
        }
    }
}

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

#[cfg(test)]
mod tests {
    use super::ReserveTag;

    #[test]
    fn every_tag_round_trips_and_never_shortens_the_payload() {
        let mut tags = vec![ReserveTag::NativeCpu, ReserveTag::Cube];
        for algorithm in 0..4 {
            for tf32 in [false, true] {
                tags.push(ReserveTag::Cudnn { algorithm, tf32 });
            }
        }
        for tag in tags {
            for payload in [0, 1, 7, 15, 16, 17, 1000, 4097] {
                let len = tag.tagged_len(payload);
                assert!(len >= payload && len < payload.max(1) + 2 * ReserveTag::MODULUS);
                assert_eq!(ReserveTag::of_len(len), Some(tag), "{tag:?}, {payload}");
            }
        }
        assert_eq!(ReserveTag::of_len(10), None);
    }
}
