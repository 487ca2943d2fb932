//! Seeded dropout masks between layers, drawn on the host so that every backend draws the
//! same mask for the same seed.

use burn::tensor::backend::Backend;
use burn::tensor::{DType, Tensor, TensorData};

use crate::descriptor::RnnDescriptor;

/// SplitMix64: a small, well-mixed generator; enough for dropout masks.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)` with 53 bits.
    fn next_f64(&mut self) -> f64 {
        (self.next() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

/// The scaled keep mask applied to the input of `layer` (> 0): `[T, B, D*P]`, each element
/// `0` with probability `p`, else `1 / (1 - p)`. A function of (seed, layer) only.
pub(crate) fn keep_mask<B: Backend>(
    desc: &RnnDescriptor,
    layer: usize,
    device: &B::Device,
    dtype: DType,
) -> Tensor<B, 3> {
    let p = desc.dropout.probability;
    let shape = [desc.seq_length, desc.batch_size, desc.spec.output_size()];
    let mut rng =
        SplitMix64(desc.dropout.seed ^ (layer as u64).wrapping_mul(0xD1B5_4A32_D192_ED03));
    let scale = (1.0 / (1.0 - p)) as f32;
    let values: Vec<f32> = (0..shape.iter().product::<usize>())
        .map(|_| if rng.next_f64() < p { 0.0 } else { scale })
        .collect();
    Tensor::from_data(TensorData::new(values, shape), (device, dtype))
}

/// The seed of training call `call` of a module seeded with `seed`.
pub(crate) fn mix_seed(seed: u64, call: u64) -> u64 {
    SplitMix64(seed ^ call.wrapping_mul(0x9E37_79B9_7F4A_7C15)).next()
}
