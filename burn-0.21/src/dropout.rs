//! The dropout masks between layers as Burn tensors, for the reference (Note [Dropout
//! masks] in the core crate's `dropout` module: every implementation draws the same mask
//! for the same seed).

use burn::tensor::backend::Backend;
use burn::tensor::{DType, Tensor, TensorData};

pub(crate) use burn_fused_rnn_core::dropout::{mix_seed, LayerMask};

use crate::descriptor::RnnDescriptor;

/// The scaled keep mask applied to the input of `layer` (> 0): `[T, B, D*P]`, each element
/// `0` with probability `p`, else `1 / (1 - p)` (Note [Dropout masks]).
pub(crate) fn keep_mask<B: Backend>(
    desc: &RnnDescriptor,
    layer: usize,
    device: &B::Device,
    dtype: DType,
) -> Tensor<B, 3> {
    let shape = [desc.seq_length, desc.batch_size, desc.spec.output_size()];
    let mask = LayerMask::new(desc, layer);
    let values: Vec<f32> = (0..shape.iter().product::<usize>())
        .map(|k| mask.factor(k) as f32)
        .collect();
    Tensor::from_data(TensorData::new(values, shape), (device, dtype))
}
