//! The dropout masks between layers as Burn tensors, for the reference (Note [Dropout
//! masks] in the core crate's `dropout` module: every implementation draws the same mask
//! for the same seed).

use burn::tensor::{DType, Device, Tensor, TensorData};

pub(crate) use burn_fused_rnn_core::dropout::LayerMask;

use crate::descriptor::RnnDescriptor;

/// The scaled keep mask applied to the input of `layer` (> 0): `[T, B, D*P]`, each element
/// `0` with probability `p`, else `1 / (1 - p)` (Note [Dropout masks]).
pub(crate) fn keep_mask(
    desc: &RnnDescriptor,
    layer: usize,
    device: &Device,
    dtype: DType,
) -> Tensor<3> {
    let shape = [desc.seq_length, desc.batch_size, desc.spec.output_size()];
    let mask = LayerMask::new(desc, layer);
    // In f64, converted once to the call's dtype: the factor `1 / (1 - p)` rounds as the
    // native kernel rounds it.
    let values: Vec<f64> = (0..shape.iter().product::<usize>())
        .map(|k| mask.factor(k))
        .collect();
    Tensor::<3>::from_data(TensorData::new(values, shape), (device, dtype))
}
