//! The element types the kernel computes in (`f32`, `f64`) and its activations.
//!
//! # Note [Activations]
//!
//! Every activation is built from one `exp` of a non-positive argument, so nothing
//! overflows and the formulas keep their relative precision over the whole range:
//!
//! - `σ(x) = 1 / (1 + e)` for `x ≥ 0`, `e / (1 + e)` otherwise, with `e = exp(-|x|)`;
//! - `tanh(x) = ±(1 - e) / (1 + e)` with `e = exp(-2|x|)` and the sign of `x`, for
//!   `|x| ≥ 0.625`; below, where `1 - e` would cancel, Cephes' odd polynomial.
//!
//! `f64` takes `exp` and `tanh` from the standard library. `f32` uses branch-free versions
//! (Cody–Waite range reduction and Cephes' polynomials, within 2 ulp of the exact value,
//! tested below) that the compiler vectorises when the per-step loops run inside
//! `pulp::Arch::dispatch` (AVX2/FMA, AVX-512 where available): the element-wise pass is a
//! small share of a step only because its `exp`s run 8 or 16 at a time. NaN propagates
//! through every function, as in the standard library.

use core::fmt::Debug;
use core::ops::{Add, AddAssign, Div, Mul, Neg, Sub};

/// `f32` or `f64`: what the GEMMs and the cell math run in.
pub trait Float:
    Copy
    + Debug
    + Default
    + PartialOrd
    + Send
    + Sync
    + 'static
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + Neg<Output = Self>
    + AddAssign
{
    const ZERO: Self;
    const ONE: Self;

    fn from_f64(v: f64) -> Self;

    /// `exp(x)` for `x ≤ 0` (or NaN).
    fn exp_nonpositive(x: Self) -> Self;

    /// `tanh(x)` (Note [Activations]).
    fn tanh(x: Self) -> Self;

    fn abs(self) -> Self;
}

impl Float for f64 {
    const ZERO: Self = 0.0;
    const ONE: Self = 1.0;

    #[inline(always)]
    fn from_f64(v: f64) -> Self {
        v
    }

    #[inline(always)]
    fn exp_nonpositive(x: Self) -> Self {
        x.exp()
    }

    #[inline(always)]
    fn tanh(x: Self) -> Self {
        x.tanh()
    }

    #[inline(always)]
    fn abs(self) -> Self {
        f64::abs(self)
    }
}

impl Float for f32 {
    const ZERO: Self = 0.0;
    const ONE: Self = 1.0;

    #[inline(always)]
    fn from_f64(v: f64) -> Self {
        v as f32
    }

    #[inline(always)]
    fn exp_nonpositive(x: Self) -> Self {
        exp_f32(x)
    }

    #[inline(always)]
    fn tanh(x: Self) -> Self {
        tanh_f32(x)
    }

    #[inline(always)]
    fn abs(self) -> Self {
        f32::abs(self)
    }
}

/// `exp(x)` for `x ≤ 0`, branch-free so that loops over it vectorise (Note [Activations]).
#[inline(always)]
fn exp_f32(x: f32) -> f32 {
    const LOG2E: f32 = core::f32::consts::LOG2_E;
    // 1.5 · 2^23: adding it rounds to an integer, which then sits in the low mantissa bits.
    const ROUND: f32 = 12_582_912.0;
    // ln 2 split in two (Cody–Waite), so that `x - k ln 2` is exact for |k| ≤ 126.
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    // Below this, exp underflows to subnormals; clamp so that 2^k stays a normal number. A
    // comparison (not `max`) keeps NaN.
    let x = if x < -87.0 { -87.0 } else { x };
    let t = x * LOG2E + ROUND;
    let k = t - ROUND;
    let k_int = (t.to_bits() as i32).wrapping_sub(ROUND.to_bits() as i32);
    let r = x - k * LN2_HI - k * LN2_LO;
    // exp(r) on |r| ≤ ln(2)/2 (Cephes expf).
    let p = 1.987_569_1e-4_f32;
    let p = p * r + 1.398_199_9e-3;
    let p = p * r + 8.333_452e-3;
    let p = p * r + 4.166_579_6e-2;
    let p = p * r + 1.666_666_5e-1;
    let p = p * r + 0.5;
    let e = p * r * r + r + 1.0;
    e * f32::from_bits(((k_int + 127) as u32) << 23)
}

/// `tanh(x)`, branch-free (Note [Activations]).
#[inline(always)]
fn tanh_f32(x: f32) -> f32 {
    let a = x.abs();
    // Large |x|: from exp, no cancellation since tanh(0.625) > 0.55.
    let e = exp_f32(-(a + a));
    let large = (1.0 - e) / (1.0 + e);
    let large = if x < 0.0 { -large } else { large };
    // Small |x|: Cephes tanhf's odd polynomial.
    let z = x * x;
    let p = -5.704_988_7e-3_f32;
    let p = p * z + 2.063_909e-2;
    let p = p * z - 5.373_971_6e-2;
    let p = p * z + 1.333_144_2e-1;
    let p = p * z - 3.333_328e-1;
    let small = p * z * x + x;
    if a < 0.625 {
        small
    } else {
        large
    }
}

/// The logistic function (Note [Activations]).
#[inline(always)]
pub(crate) fn sigmoid<T: Float>(x: T) -> T {
    let e = T::exp_nonpositive(-x.abs());
    let r = T::ONE / (T::ONE + e);
    if x >= T::ZERO {
        r
    } else {
        e * r
    }
}

/// `tanh` (Note [Activations]).
#[inline(always)]
pub(crate) fn tanh<T: Float>(x: T) -> T {
    T::tanh(x)
}

/// `max(x, 0)`; NaN stays NaN.
#[inline(always)]
pub(crate) fn relu<T: Float>(x: T) -> T {
    if x < T::ZERO {
        T::ZERO
    } else {
        x
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ulps(got: f32, expected: f64) -> f64 {
        let e = expected as f32;
        (got - e).abs() as f64
            / (e.abs() as f64 * f32::EPSILON as f64).max(f32::MIN_POSITIVE as f64)
    }

    #[test]
    fn exp_f32_is_within_two_ulp_on_the_whole_range() {
        let mut worst = 0.0f64;
        let n = 200_000;
        for i in 0..=n {
            let x = -87.0 * i as f64 / n as f64;
            let got = exp_f32(x as f32);
            let expected = (x as f32 as f64).exp();
            worst = worst.max(ulps(got, expected));
        }
        assert!(worst <= 2.0, "worst error {worst} ulp");
        assert_eq!(exp_f32(0.0), 1.0);
        assert!(exp_f32(-1000.0) < 1e-37);
        assert!(exp_f32(f32::NAN).is_nan());
    }

    #[test]
    fn activations_match_the_standard_library() {
        for i in -4000..=4000 {
            let x = i as f64 / 100.0;
            let s64 = 1.0 / (1.0 + (-x).exp());
            assert!(
                (sigmoid(x) - s64).abs() <= 1e-15 * s64.max(1e-300),
                "σ({x})"
            );
            // Against the exact value at the f32 argument.
            let x32 = x as f32 as f64;
            let s = 1.0 / (1.0 + (-x32).exp());
            let s32 = sigmoid(x as f32) as f64;
            assert!(
                ulps(s32 as f32, s) <= 3.0,
                "σ_f32({x}) = {s32}, expected {s}"
            );
            let t32 = tanh(x as f32) as f64;
            let t = (x as f32 as f64).tanh();
            assert!(
                ulps(t32 as f32, t) <= 2.0,
                "tanh_f32({x}) = {t32}, expected {t}"
            );
        }
        // Tiny arguments keep their relative precision.
        for x in [1e-3f32, -2e-5, 3e-8, 0.6249, -0.6251] {
            let t = (x as f64).tanh();
            assert!(
                ulps(tanh(x), t) <= 2.0,
                "tanh_f32({x}) = {}, expected {t}",
                tanh(x)
            );
        }
        assert!(sigmoid(f32::NAN).is_nan() && tanh(f64::NAN).is_nan() && relu(f32::NAN).is_nan());
        assert_eq!((relu(-2.0f32), relu(3.0f64)), (0.0, 3.0));
    }
}
