//! SplitMix64, the crate's one seeded generator.
//!
//! The dropout masks are defined by it (Note [Dropout masks] in the `dropout` module), and
//! the parity suite, the tests, the benchmarks and the examples draw their data from it,
//! so that every backend, run and companion script sees the same numbers for the same
//! seed. It is public for those callers; it is not meant as a general-purpose generator.
//!
//! SplitMix64 (Steele, Lea and Flood, 2014): the state advances by the constant
//! [`SplitMix64::GAMMA`] and each draw is the state through a mixing function, so the
//! `k`-th draw is a pure function of the seed and `k` ([`SplitMix64::draw`]).

/// The SplitMix64 generator.
///
/// ```
/// use burn_fused_rnn_core::random::SplitMix64;
///
/// let mut rng = SplitMix64::new(7);
/// let first = rng.next_u64();
/// assert_eq!(first, SplitMix64::draw(7, 0));
/// let u = rng.next_f64();
/// assert!((0.0..1.0).contains(&u));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// The constant the state advances by: `2^64 / φ`, rounded to odd.
    pub const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

    /// A generator whose state starts at `seed`.
    pub fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(Self::GAMMA);
        mix(self.state)
    }

    /// The next uniform in `[0, 1)`, from the top 53 bits of [`next_u64`](Self::next_u64).
    pub fn next_f64(&mut self) -> f64 {
        unit(self.next_u64())
    }

    /// The next uniform in `[-scale, scale)`.
    pub fn next_symmetric(&mut self, scale: f64) -> f64 {
        (self.next_f64() * 2.0 - 1.0) * scale
    }

    /// The `k`-th draw (counting from 0) of a generator seeded with `seed`, without
    /// drawing the ones before it.
    pub fn draw(seed: u64, k: u64) -> u64 {
        mix(seed.wrapping_add(k.wrapping_add(1).wrapping_mul(Self::GAMMA)))
    }
}

/// SplitMix64's mixing function.
pub fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// `bits` as a uniform in `[0, 1)` (the top 53 bits).
pub fn unit(bits: u64) -> f64 {
    (bits >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

#[cfg(test)]
mod tests {
    use super::SplitMix64;

    /// The reference values of SplitMix64 seeded with 1234567 (from the generator's
    /// published C code, `splitmix64.c` by Sebastiano Vigna).
    #[test]
    fn matches_the_published_generator() {
        let mut rng = SplitMix64::new(1234567);
        let got: Vec<u64> = (0..5).map(|_| rng.next_u64()).collect();
        assert_eq!(
            got,
            [
                6457827717110365317,
                3203168211198807973,
                9817491932198370423,
                4593380528125082431,
                16408922859458223821
            ]
        );
    }

    #[test]
    fn draw_k_is_the_kth_sequential_draw() {
        let mut rng = SplitMix64::new(99);
        for k in 0..100 {
            assert_eq!(rng.next_u64(), SplitMix64::draw(99, k));
        }
    }
}
