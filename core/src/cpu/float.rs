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
//!
//! With `FMA`, the polynomials and the range reduction use fused multiply-adds
//! (`f32::mul_add`): Rust never contracts `a * b + c` by itself, so without it each
//! Horner step is a multiply and a dependent add. Only a caller that knows its SIMD level
//! has the instruction passes `FMA` (the forward cells: `fma_at` in `super::forward`); on
//! x86-64 without FMA, `mul_add` would be a call into the C library per element. The two
//! variants differ in rounding, within the same bounds (tested below). Measured with
//! `kernel_times` on the Zen 5 machine, one thread, 3 alternating rounds
//! (docs/BENCHMARKS.md): LSTM H256 B16 T50 forward 4.33–4.44 ms against 4.39–4.62, GRU
//! 3.26–3.37 against 3.33–3.43, LSTM H32 B1 T10000 2.92–2.96 against 3.08–3.18.
//!
//! The forward cells must be called as functions, not through closures, from the level's
//! `with_simd`: a closure the compiler chose not to inline ran without the level's target
//! features, so `mul_add` became a library call per element (measured: 7–12× slower).

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

    /// `exp(x)` for `x ≤ 0` (or NaN); with fused multiply-adds when `FMA`.
    fn exp_nonpositive<const FMA: bool>(x: Self) -> Self;

    /// `tanh(x)` (Note [Activations]); with fused multiply-adds when `FMA`.
    fn tanh<const FMA: bool>(x: Self) -> Self;

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
    fn exp_nonpositive<const FMA: bool>(x: Self) -> Self {
        x.exp()
    }

    #[inline(always)]
    fn tanh<const FMA: bool>(x: Self) -> Self {
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
    fn exp_nonpositive<const FMA: bool>(x: Self) -> Self {
        exp_f32::<FMA>(x)
    }

    #[inline(always)]
    fn tanh<const FMA: bool>(x: Self) -> Self {
        tanh_f32::<FMA>(x)
    }

    #[inline(always)]
    fn abs(self) -> Self {
        f32::abs(self)
    }
}

/// `a · b + c`, fused when `FMA` (Note [Activations]).
#[inline(always)]
fn madd<const FMA: bool>(a: f32, b: f32, c: f32) -> f32 {
    if FMA {
        a.mul_add(b, c)
    } else {
        a * b + c
    }
}

/// `exp(x)` for `x ≤ 0`, branch-free so that loops over it vectorise (Note [Activations]).
#[inline(always)]
fn exp_f32<const FMA: bool>(x: f32) -> f32 {
    const LOG2E: f32 = core::f32::consts::LOG2_E;
    // 1.5 · 2^23: adding it rounds to an integer, which then sits in the low mantissa bits.
    const ROUND: f32 = 12_582_912.0;
    // ln 2 split in two (Cody–Waite), so that `x - k ln 2` is exact for |k| ≤ 126.
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    // Below this, exp underflows to subnormals; clamp so that 2^k stays a normal number. A
    // comparison (not `max`) keeps NaN.
    let x = if x < -87.0 { -87.0 } else { x };
    let t = madd::<FMA>(x, LOG2E, ROUND);
    let k = t - ROUND;
    let k_int = (t.to_bits() as i32).wrapping_sub(ROUND.to_bits() as i32);
    let r = madd::<FMA>(-k, LN2_LO, madd::<FMA>(-k, LN2_HI, x));
    // exp(r) on |r| ≤ ln(2)/2 (Cephes expf).
    let p = 1.987_569_1e-4_f32;
    let p = madd::<FMA>(p, r, 1.398_199_9e-3);
    let p = madd::<FMA>(p, r, 8.333_452e-3);
    let p = madd::<FMA>(p, r, 4.166_579_6e-2);
    let p = madd::<FMA>(p, r, 1.666_666_5e-1);
    let p = madd::<FMA>(p, r, 0.5);
    let e = madd::<FMA>(p * r, r, r) + 1.0;
    e * f32::from_bits(((k_int + 127) as u32) << 23)
}

/// `tanh(x)`, branch-free (Note [Activations]).
#[inline(always)]
fn tanh_f32<const FMA: bool>(x: f32) -> f32 {
    let a = x.abs();
    // Large |x|: from exp, no cancellation since tanh(0.625) > 0.55.
    let e = exp_f32::<FMA>(-(a + a));
    let large = (1.0 - e) / (1.0 + e);
    let large = if x < 0.0 { -large } else { large };
    // Small |x|: Cephes tanhf's odd polynomial.
    let z = x * x;
    let p = -5.704_988_7e-3_f32;
    let p = madd::<FMA>(p, z, 2.063_909e-2);
    let p = madd::<FMA>(p, z, -5.373_971_6e-2);
    let p = madd::<FMA>(p, z, 1.333_144_2e-1);
    let p = madd::<FMA>(p, z, -3.333_328e-1);
    let small = madd::<FMA>(p * z, x, x);
    if a < 0.625 {
        small
    } else {
        large
    }
}

/// The logistic function (Note [Activations]).
#[inline(always)]
pub(crate) fn sigmoid<T: Float, const FMA: bool>(x: T) -> T {
    let e = T::exp_nonpositive::<FMA>(-x.abs());
    let r = T::ONE / (T::ONE + e);
    if x >= T::ZERO {
        r
    } else {
        e * r
    }
}

/// `tanh` (Note [Activations]).
#[inline(always)]
pub(crate) fn tanh<T: Float, const FMA: bool>(x: T) -> T {
    T::tanh::<FMA>(x)
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
        exp_within_two_ulp::<false>();
        exp_within_two_ulp::<true>();
    }

    fn exp_within_two_ulp<const FMA: bool>() {
        let mut worst = 0.0f64;
        let n = 200_000;
        for i in 0..=n {
            let x = -87.0 * i as f64 / n as f64;
            let got = exp_f32::<FMA>(x as f32);
            let expected = (x as f32 as f64).exp();
            worst = worst.max(ulps(got, expected));
        }
        assert!(worst <= 2.0, "FMA {FMA}: worst error {worst} ulp");
        assert_eq!(exp_f32::<FMA>(0.0), 1.0);
        assert!(exp_f32::<FMA>(-1000.0) < 1e-37);
        assert!(exp_f32::<FMA>(f32::NAN).is_nan());
    }

    #[test]
    fn activations_match_the_standard_library() {
        activations_within_bounds::<false>();
        activations_within_bounds::<true>();
        // The fused variant rounds differently somewhere on this grid (else `FMA` would
        // change nothing).
        let differs = (-4000..=4000).any(|i| {
            let x = i as f32 / 100.0;
            tanh::<f32, true>(x) != tanh::<f32, false>(x)
                || sigmoid::<f32, true>(x) != sigmoid::<f32, false>(x)
        });
        assert!(differs);
    }

    fn activations_within_bounds<const FMA: bool>() {
        let sigmoid = sigmoid::<f32, FMA>;
        let tanh = tanh::<f32, FMA>;
        for i in -4000..=4000 {
            let x = i as f64 / 100.0;
            let s64 = 1.0 / (1.0 + (-x).exp());
            assert!(
                (super::sigmoid::<f64, FMA>(x) - s64).abs() <= 1e-15 * s64.max(1e-300),
                "σ({x})"
            );
            // Against the exact value at the f32 argument.
            let x32 = x as f32 as f64;
            let s = 1.0 / (1.0 + (-x32).exp());
            let s32 = sigmoid(x as f32) as f64;
            assert!(
                ulps(s32 as f32, s) <= 3.0,
                "FMA {FMA}: σ_f32({x}) = {s32}, expected {s}"
            );
            let t32 = tanh(x as f32) as f64;
            let t = (x as f32 as f64).tanh();
            assert!(
                ulps(t32 as f32, t) <= 2.0,
                "FMA {FMA}: tanh_f32({x}) = {t32}, expected {t}"
            );
        }
        // Tiny arguments keep their relative precision.
        for x in [1e-3f32, -2e-5, 3e-8, 0.6249, -0.6251] {
            let t = (x as f64).tanh();
            assert!(
                ulps(tanh(x), t) <= 2.0,
                "FMA {FMA}: tanh_f32({x}) = {}, expected {t}",
                tanh(x)
            );
        }
        assert!(sigmoid(f32::NAN).is_nan());
        assert!(tanh(f32::NAN).is_nan() && super::tanh::<f64, FMA>(f64::NAN).is_nan());
        assert!(relu(f32::NAN).is_nan());
        assert_eq!((relu(-2.0f32), relu(3.0f64)), (0.0, 3.0));
    }
}
