//! The fused op on Burn tensors: checks shapes once, then dispatches to the backend.

use burn::tensor::{DType, Tensor};

use crate::backend::FusedRnnBackend;
use crate::descriptor::RnnDescriptor;
use crate::op_types::RnnInputs;
use crate::op_types::{float, prim};

/// Result of [`fused_rnn`]: output sequence and final states.
#[derive(Debug, Clone)]
pub struct FusedRnnOutput<B: FusedRnnBackend> {
    /// `[B, T, D*P]` (batch-first) or `[T, B, D*P]`; zero past each sequence's length.
    pub output: Tensor<B, 3>,
    /// Final hidden state `[L*D, B, P]`.
    pub hidden: Tensor<B, 3>,
    /// Final cell state `[L*D, B, H]` (LSTM only).
    pub cell: Option<Tensor<B, 3>>,
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
/// # Dtypes
///
/// Every tensor must have the input's dtype, a float dtype the backend supports
/// ([`Backend::supports_dtype`](burn::tensor::backend::Backend::supports_dtype)). F16 and BF16 compute in F32 on the reference path
/// (Note [Half precision] in [`crate::op_types`]); outputs have the input's dtype.
///
/// # Panics
///
/// With "expected …, got …" naming the argument when a shape does not fit `desc`, when a
/// dtype differs from the input's, or when the backend does not support the input's dtype.
pub fn fused_rnn<B: FusedRnnBackend>(
    desc: &RnnDescriptor,
    input: Tensor<B, 3>,
    h0: Option<Tensor<B, 3>>,
    c0: Option<Tensor<B, 3>>,
    weights: Tensor<B, 1>,
) -> FusedRnnOutput<B> {
    desc.check_inputs(
        &input.dims(),
        h0.as_ref().map(|h| h.dims()).as_ref().map(|d| &d[..]),
        c0.as_ref().map(|c| c.dims()).as_ref().map(|d| &d[..]),
        &weights.dims(),
    );
    check_dtypes::<B>(
        &input,
        h0.as_ref().map(Tensor::dtype),
        c0.as_ref().map(Tensor::dtype),
        weights.dtype(),
    );
    let out = B::fused_rnn_forward(
        desc,
        RnnInputs {
            x: prim(input),
            h0: h0.map(prim),
            c0: c0.map(prim),
            weights: prim(weights),
        },
    );
    FusedRnnOutput {
        output: float(out.y),
        hidden: float(out.h_n),
        cell: out.c_n.map(float),
    }
}

/// The dtype rules of [`fused_rnn`].
fn check_dtypes<B: FusedRnnBackend>(
    input: &Tensor<B, 3>,
    h0: Option<DType>,
    c0: Option<DType>,
    weights: DType,
) {
    let dtype = input.dtype();
    let device = input.device();
    assert!(
        dtype.is_float() && B::supports_dtype(&device, dtype),
        "expected input of a float dtype that backend {} supports on {device:?}, got {dtype:?}",
        B::name(&device),
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

/// The bytes a training forward keeps for its backward pass on backend `B`: the reserve of
/// [`FusedRnnBackend::fused_rnn_forward_training`] for inputs of `dtype` on `device`, as
/// the backend declares it ([`FusedRnnBackend::fused_rnn_reserve_layout`]).
///
/// This is what a training step holds between its forward and its backward on top of the
/// inputs, outputs and gradients, so it is the number to plan memory with. On the native
/// CPU kernel (NdArray, Flex) it is, in elements of the compute dtype (F64 for F64 inputs,
/// F32 otherwise), with `W = 5H` (LSTM), `4H` (GRU) or `H` (RNN):
/// `Σ_layers D·T·B·W + (L - 1)·T·B·D·P`, plus one more `T·B·D·P` for F16/BF16 inputs —
/// linear in `T` and `B` — rounded up to a multiple of 16 plus 8 (the tag that names the
/// kernel as the reserve's writer). The reference keeps more (Note [Reserve layout] in
/// [`crate::reference`]); cuDNN reports its own size.
///
/// ```
/// use burn::backend::NdArray;
/// use burn::tensor::DType;
/// use burn_fused_rnn::{reserve_bytes, DropoutSpec, FusedRnnConfig, RnnDescriptor, RnnMode};
///
/// let spec = FusedRnnConfig::new(RnnMode::Lstm, 256, 256).spec();
/// // B = 32, T = 50: 5 · 256 · 50 · 32 f32 values (a multiple of 16), and the tag, 8.
/// let desc = RnnDescriptor::new(spec, 50, 32, true, None, DropoutSpec::NONE);
/// let bytes = reserve_bytes::<NdArray>(&desc, DType::F32, &Default::default());
/// assert_eq!(bytes, (5 * 256 * 50 * 32 + 8) * 4);
/// ```
///
/// # Panics
///
/// If the size overflows `usize`.
pub fn reserve_bytes<B: FusedRnnBackend>(
    desc: &RnnDescriptor,
    dtype: DType,
    device: &B::Device,
) -> usize {
    B::fused_rnn_reserve_layout(desc, dtype, device)
        .iter()
        .map(|(shape, dtype)| {
            shape
                .iter()
                .try_fold(dtype.size(), |acc, &d| acc.checked_mul(d))
                .expect("expected a reserve size that fits in usize, got an overflow")
        })
        .try_fold(0usize, |acc, n| acc.checked_add(n))
        .expect("expected a reserve size that fits in usize, got an overflow")
}
