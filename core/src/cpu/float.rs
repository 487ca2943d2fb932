//! The element types the kernel computes in (`f32`, `f64`) and its activations.
//!
//! # Note [Activations]
//!
//! The cells' five (LSTM) or three (GRU) activations per unit are most of an element-wise
//! pass, so each is a short, branch-free formula, and `f32` keeps its precision over the
//! whole range:
//!
//! - `σ(x) = 1 / (1 + exp(-x))`, one `exp` and one division. `exp(-x)` stays finite for
//!   `x ≥ -88`; below, `σ(x) < 7e-39` and the clamped formula is within an ulp of it. The
//!   relative error stays under 2 ulp everywhere (1.4 on the sweeps below), also for large
//!   negative `x` (the denominator is large, not cancelling).
//! - `tanh(x) = (x + x³ P(x²)) / (1 + x² Q(x²))` on `|x| ≤ 9` (±1 within an ulp beyond),
//!   `P` and `Q` of degree 3: a rational minimax fit of the relative error on `[0, 9]`
//!   (the `[9/8]` type Eigen uses; fitted for this crate by `tools/fit_tanh.py`, max
//!   relative error 2.1e-8 in exact arithmetic). Twelve operations and one
//!   division, no `exp`. The result is clamped to `[-1, 1]` (rounding can overshoot by an
//!   ulp near ±9). In `f32` arithmetic it is within 2.5 ulp with fused multiply-adds, 3.5
//!   without (every 61st `f32` in `[0, 12]` is checked below; every one of them was once).
//!
//! Until 2026-12-07 both went through `exp(-|x|)` (`σ = e/(1 + e)` or `1/(1 + e)` by the
//! sign, `tanh` from `exp(-2|x|)` above 0.625 and Cephes' odd polynomial below, both
//! branches computed): within 2 ulp for `tanh`, 3 for `σ`, but `tanh` took about twice the
//! operations and `σ` a quarter more (the LSTM cell's AVX-512 code for 16 units: about 215
//! instructions then, 157 now). On the Zen 4 machine the LSTM cell of 16 rows × 256 units
//! (`kernel_parts cells,16,256`, one core) took 8.7–12.1 µs against 11.5–15.3 with the old
//! formulas (six alternated processes); the kernel's LSTM H32 B1 T10000 forward 0.73–0.86×
//! its time, at H256 0.95–0.98× (docs/BENCHMARKS.md, "AMD EPYC (Zen 4): cheaper
//! activations").
//!
//! `f64` takes `exp` and `tanh` from the standard library. `f32` uses these branch-free
//! versions (`exp`: Cody–Waite range reduction and Cephes' polynomial, within 2 ulp, tested
//! below), which the compiler vectorises when the per-step loops run inside
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

    /// The logistic function `σ(x)` (Note [Activations]); with fused multiply-adds when
    /// `FMA`.
    fn sigmoid<const FMA: bool>(x: Self) -> Self;

    /// `tanh(x)` (Note [Activations]); with fused multiply-adds when `FMA`.
    fn tanh<const FMA: bool>(x: Self) -> Self;
}

impl Float for f64 {
    const ZERO: Self = 0.0;
    const ONE: Self = 1.0;

    #[inline(always)]
    fn from_f64(v: f64) -> Self {
        v
    }

    #[inline(always)]
    fn sigmoid<const FMA: bool>(x: Self) -> Self {
        // exp of `-|x|` only, so nothing overflows and `σ` keeps its relative precision.
        let e = (-x.abs()).exp();
        let r = 1.0 / (1.0 + e);
        if x >= 0.0 {
            r
        } else {
            e * r
        }
    }

    #[inline(always)]
    fn tanh<const FMA: bool>(x: Self) -> Self {
        x.tanh()
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
    fn sigmoid<const FMA: bool>(x: Self) -> Self {
        sigmoid_f32::<FMA>(x)
    }

    #[inline(always)]
    fn tanh<const FMA: bool>(x: Self) -> Self {
        tanh_f32::<FMA>(x)
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

/// `exp(x)` for `x ≤ 88` (where it is below `f32::MAX`), branch-free so that loops over it
/// vectorise (Note [Activations]).
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

/// `σ(x) = 1 / (1 + exp(-x))`, branch-free (Note [Activations]).
#[inline(always)]
fn sigmoid_f32<const FMA: bool>(x: f32) -> f32 {
    // Below -88, exp(-x) would overflow; σ is under 7e-39 there, and 1 / (1 + exp(88)) is
    // within an ulp of it (a subnormal). `exp_f32` clamps the other end. A comparison (not
    // `max`) keeps NaN.
    let m = if x < -88.0 { 88.0 } else { -x };
    1.0 / (1.0 + exp_f32::<FMA>(m))
}

/// Numerator coefficients of [`tanh_f32`]'s rational function, of `x^3, x^5, x^7, x^9`.
const TANH_P: [f32; 4] = [
    1.338_396_7e-1,
    3.498_980_3e-3,
    2.066_100_2e-5,
    1.341_946_8e-8,
];

/// Denominator coefficients of [`tanh_f32`]'s rational function, of `x^2, x^4, x^6, x^8`.
const TANH_Q: [f32; 4] = [4.671_729e-1, 2.589_014_5e-2, 3.291_012_5e-4, 7.804_582_7e-7];

/// `tanh(x)`, branch-free (Note [Activations]).
#[inline(always)]
fn tanh_f32<const FMA: bool>(x: f32) -> f32 {
    // Past ±9, tanh is ±1 within an ulp. `clamp` keeps NaN.
    let x = x.clamp(-9.0, 9.0);
    let z = x * x;
    let p = madd::<FMA>(z, TANH_P[3], TANH_P[2]);
    let p = madd::<FMA>(z, p, TANH_P[1]);
    let p = madd::<FMA>(z, p, TANH_P[0]);
    // x + x³ P(x²): the leading term exact, so small arguments keep their precision.
    let num = madd::<FMA>(x * z, p, x);
    let q = madd::<FMA>(z, TANH_Q[3], TANH_Q[2]);
    let q = madd::<FMA>(z, q, TANH_Q[1]);
    let q = madd::<FMA>(z, q, TANH_Q[0]);
    let den = madd::<FMA>(z, q, 1.0);
    let t = num / den;
    // Near ±9 the rounding can land an ulp past ±1; |tanh| ≤ 1 is what the gradients'
    // `1 - tanh²` rely on.
    t.clamp(-1.0, 1.0)
}

/// The logistic function (Note [Activations]).
#[inline(always)]
pub(crate) fn sigmoid<T: Float, const FMA: bool>(x: T) -> T {
    T::sigmoid::<FMA>(x)
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
            // The whole range the activations call it on: [-87, 88].
            let x = -87.0 + 175.0 * i as f64 / n as f64;
            let got = exp_f32::<FMA>(x as f32);
            let expected = (x as f32 as f64).exp();
            worst = worst.max(ulps(got, expected));
        }
        assert!(worst <= 2.0, "FMA {FMA}: worst error {worst} ulp");
        assert_eq!(exp_f32::<FMA>(0.0), 1.0);
        assert!(exp_f32::<FMA>(-1000.0) < 1e-37);
        assert!(exp_f32::<FMA>(88.0).is_finite());
        assert!(exp_f32::<FMA>(f32::NAN).is_nan());
    }

    /// Every `step`-th `f32` from `0` up to `limit`.
    fn floats(step: u32, limit: f32) -> impl Iterator<Item = f32> {
        (0..)
            .map(move |i: u32| f32::from_bits(i * step))
            .take_while(move |&x| x <= limit)
    }

    #[test]
    fn tanh_f32_is_within_its_bound_on_a_sweep_of_all_floats() {
        tanh_sweep::<true>(2.51);
        tanh_sweep::<false>(3.51);
    }

    fn tanh_sweep<const FMA: bool>(bound: f64) {
        let mut worst = (0.0f64, 0.0f32);
        for x in floats(61, 12.0) {
            let (t, tn) = (tanh_f32::<FMA>(x), tanh_f32::<FMA>(-x));
            assert!(
                t <= 1.0 && tn == -t,
                "FMA {FMA}: tanh({x}) = {t}, tanh(-x) = {tn}"
            );
            let u = ulps(t, (x as f64).tanh());
            if u > worst.0 {
                worst = (u, x);
            }
        }
        assert!(
            worst.0 <= bound,
            "FMA {FMA}: {} ulp at {}",
            worst.0,
            worst.1
        );
    }

    #[test]
    fn sigmoid_f32_is_within_two_ulp_on_a_sweep_of_all_floats() {
        sigmoid_sweep::<true>();
        sigmoid_sweep::<false>();
    }

    fn sigmoid_sweep<const FMA: bool>() {
        let mut worst = (0.0f64, 0.0f32);
        for a in floats(61, 120.0) {
            for x in [a, -a] {
                let s = sigmoid_f32::<FMA>(x);
                assert!((0.0..=1.0).contains(&s), "FMA {FMA}: σ({x}) = {s}");
                let u = ulps(s, 1.0 / (1.0 + (-(x as f64)).exp()));
                if u > worst.0 {
                    worst = (u, x);
                }
            }
        }
        assert!(worst.0 <= 2.0, "FMA {FMA}: {} ulp at {}", worst.0, worst.1);
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
                ulps(s32 as f32, s) <= 2.0,
                "FMA {FMA}: σ_f32({x}) = {s32}, expected {s}"
            );
            let t32 = tanh(x as f32) as f64;
            let t = (x as f32 as f64).tanh();
            assert!(
                ulps(t32 as f32, t) <= if FMA { 2.51 } else { 3.51 },
                "FMA {FMA}: tanh_f32({x}) = {t32}, expected {t}"
            );
        }
        // Tiny arguments keep their relative precision.
        for x in [1e-3f32, -2e-5, 3e-8, 1e-30, 0.6249, -0.6251] {
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
