//! Seeded dropout masks between layers, drawn on the host so that every backend draws the
//! same mask for the same seed.
//!
//! # Note [Dropout masks]
//!
//! The mask of layer `l > 0` covers that layer's input `[T, B, D*P]`. Its element with
//! sequence-major flat index `k = (t * B + b) * (D*P) + f` is dropped (zeroed) when `u_k < p`
//! and otherwise scaled by `1 / (1 - p)`, where `u_k` is the `k`-th draw (counting from 0) of
//! SplitMix64 seeded with `seed ^ (l · 0xD1B54A32D192ED03)`, as a 53-bit uniform in
//! `[0, 1)` ([`SplitMix64`]). SplitMix64's `k`-th draw is a pure function of `k`
//! ([`SplitMix64::draw`]), so any element can be computed on its own, in any order and layout: the
//! reference draws the mask in order, the native CPU kernel element by element in the
//! call's own layout, the CubeCL kernels on the host before uploading it, and all get the
//! same mask bit for bit. cuDNN draws its own masks
//! from its own generator.

use crate::descriptor::RnnDescriptor;
use crate::random::{mix, unit, SplitMix64};

/// The dropout mask of one layer as a function of the element index (Note [Dropout masks]).
#[derive(Clone, Copy, Debug)]
pub struct LayerMask {
    state: u64,
    probability: f64,
    scale: f64,
}

impl LayerMask {
    /// The mask of the input of `layer` (> 0) of a call with `desc`'s dropout.
    pub fn new(desc: &RnnDescriptor, layer: usize) -> Self {
        let p = desc.dropout.probability;
        Self {
            state: desc.dropout.seed ^ (layer as u64).wrapping_mul(0xD1B5_4A32_D192_ED03),
            probability: p,
            scale: 1.0 / (1.0 - p),
        }
    }

    /// The factor of element `k` (sequence-major flat index): `0` or `1 / (1 - p)`.
    pub fn factor(&self, k: usize) -> f64 {
        let uniform = unit(SplitMix64::draw(self.state, k as u64));
        if uniform < self.probability {
            0.0
        } else {
            self.scale
        }
    }
}

/// The seed of training call `call` of a module seeded with `seed`.
pub fn mix_seed(seed: u64, call: u64) -> u64 {
    // The first draw of SplitMix64 seeded with `seed ^ call · γ`.
    mix((seed ^ call.wrapping_mul(SplitMix64::GAMMA)).wrapping_add(SplitMix64::GAMMA))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn element_k_is_the_kth_draw_of_the_sequential_generator() {
        let spec = crate::spec::RnnSpec {
            num_layers: 3,
            ..crate::spec::RnnSpec::new(crate::spec::RnnMode::Gru, 3, 4)
        };
        let dropout = crate::descriptor::DropoutSpec {
            probability: 0.3,
            seed: 77,
        };
        let desc = RnnDescriptor::new(spec, 5, 2, false, None, dropout);
        let mask = LayerMask::new(&desc, 2);
        let mut rng = SplitMix64::new(mask.state);
        for k in 0..1000 {
            let u = rng.next_f64();
            let expected = if u < 0.3 { 0.0 } else { 1.0 / 0.7 };
            assert_eq!(mask.factor(k), expected, "element {k}");
        }
    }
}
