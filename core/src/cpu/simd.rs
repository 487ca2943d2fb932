//! The SIMD level the native CPU kernel runs at: detected once, or forced.
//!
//! # Note [SIMD levels]
//!
//! Every loop of the kernel that counts (the step GEMM's microkernel, the element-wise
//! passes, the activations) is written once, generic over `pulp::Simd`, and compiled for
//! three levels:
//!
//! - **AVX-512** (`pulp::x86::V4`: 16 `f32` lanes, 32 vector registers);
//! - **AVX2 + FMA** (`pulp::x86::V3`: 8 lanes, 16 registers);
//! - **portable**: pulp's scalar fallback on x86-64 without AVX2 (one lane, the compiler's
//!   baseline vectorisation), or pulp's own best choice on other architectures (NEON on
//!   aarch64).
//!
//! A call picks its level once, at entry (`super::plan::Plan::new`), and every loop of the
//! call runs at that level, so a call never mixes layouts: the packed weights'
//! width depends on the level (Note [Packed weights] in `super::packed`). The level is, in
//! order of precedence:
//!
//! 1. the one forced on the calling thread by [`with_simd_level`] (tests force every level
//!    the machine has, so that a level CI does not pick by itself still runs there);
//! 2. the environment variable `BURN_FUSED_RNN_SIMD` (`avx512`, `avx2` or `portable`),
//!    read once per process, for a whole run (a level the CPU lacks is ignored with a
//!    warning on stderr);
//! 3. the best level the CPU has.

use std::cell::Cell;
use std::sync::OnceLock;
use std::thread::LocalKey;

#[cfg(target_arch = "x86_64")]
use pulp::Simd;
use pulp::WithSimd;

/// A SIMD level of the native CPU kernel (Note [SIMD levels]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SimdLevel {
    /// AVX-512 (F, VL, DQ, BW, CD): 16 `f32` lanes.
    Avx512,
    /// AVX2 with FMA: 8 `f32` lanes.
    Avx2,
    /// No x86 SIMD extension: pulp's scalar code on x86-64, its best level elsewhere.
    Portable,
}

impl SimdLevel {
    /// Every level, best first.
    pub const ALL: [SimdLevel; 3] = [SimdLevel::Avx512, SimdLevel::Avx2, SimdLevel::Portable];

    /// Whether this CPU can run the level.
    pub fn is_available(self) -> bool {
        match self {
            #[cfg(target_arch = "x86_64")]
            SimdLevel::Avx512 => pulp::x86::V4::try_new().is_some(),
            #[cfg(target_arch = "x86_64")]
            SimdLevel::Avx2 => pulp::x86::V3::try_new().is_some(),
            #[cfg(not(target_arch = "x86_64"))]
            SimdLevel::Avx512 | SimdLevel::Avx2 => false,
            SimdLevel::Portable => true,
        }
    }

    /// The best level this CPU has.
    pub fn detected() -> SimdLevel {
        static DETECTED: OnceLock<SimdLevel> = OnceLock::new();
        *DETECTED.get_or_init(|| {
            SimdLevel::ALL
                .into_iter()
                .find(|l| l.is_available())
                .unwrap_or(SimdLevel::Portable)
        })
    }

    /// The levels this CPU has, best first.
    pub fn available() -> Vec<SimdLevel> {
        SimdLevel::ALL
            .into_iter()
            .filter(|l| l.is_available())
            .collect()
    }

    /// The level's name, as `BURN_FUSED_RNN_SIMD` spells it.
    pub fn name(self) -> &'static str {
        match self {
            SimdLevel::Avx512 => "avx512",
            SimdLevel::Avx2 => "avx2",
            SimdLevel::Portable => "portable",
        }
    }

    /// The level that a call on this thread runs at now (Note [SIMD levels]).
    pub fn current() -> SimdLevel {
        FORCED
            .with(Cell::get)
            .or_else(from_env)
            .unwrap_or_else(SimdLevel::detected)
    }
}

thread_local! {
    static FORCED: Cell<Option<SimdLevel>> = const { Cell::new(None) };
}

/// `BURN_FUSED_RNN_SIMD`, read once.
fn from_env() -> Option<SimdLevel> {
    static ENV: OnceLock<Option<SimdLevel>> = OnceLock::new();
    env_setting(&ENV, "BURN_FUSED_RNN_SIMD", |value| {
        let detected = SimdLevel::detected().name();
        match SimdLevel::ALL.into_iter().find(|l| l.name() == value) {
            Some(level) if level.is_available() => Ok(level),
            Some(level) => Err(format!("this CPU lacks {}, using {detected}", level.name())),
            None => Err(format!(
                "expected avx512, avx2 or portable; using {detected}"
            )),
        }
    })
}

/// Runs `f` with the native CPU kernel forced to `level` on this thread: every fused call
/// that `f` makes from this thread runs at `level` (its worker threads included).
///
/// # Panics
///
/// If the CPU lacks `level` (see [`SimdLevel::available`]).
pub fn with_simd_level<R>(level: SimdLevel, f: impl FnOnce() -> R) -> R {
    assert!(
        level.is_available(),
        "expected a SIMD level this CPU has ({:?}), got {level:?}",
        SimdLevel::available()
    );
    with_forced(&FORCED, level, f)
}

/// The environment variable `var`, read once per process into `cell` and trimmed, as
/// `parse` reads it; a value `parse` refuses (`Err(why)`) is reported on stderr
/// (`burn-fused-rnn: VAR=value: why`) and counts as unset. Every `BURN_FUSED_RNN_*`
/// setting of the CPU kernel is read this way.
pub(crate) fn env_setting<V: Copy>(
    cell: &'static OnceLock<Option<V>>,
    var: &str,
    parse: impl FnOnce(&str) -> Result<V, String>,
) -> Option<V> {
    *cell.get_or_init(|| {
        let value = std::env::var(var).ok()?;
        parse(value.trim())
            .map_err(|why| eprintln!("burn-fused-rnn: {var}={value}: {why}"))
            .ok()
    })
}

/// Runs `f` with the thread-local setting `key` forced to `value` on this thread; what it
/// held before comes back after `f`, also when `f` panics (tests force settings in turn on
/// one thread). Every `with_*` forcing function of the kernel is this.
pub(crate) fn with_forced<V: Copy + 'static, R>(
    key: &'static LocalKey<Cell<Option<V>>>,
    value: V,
    f: impl FnOnce() -> R,
) -> R {
    struct Restore<V: Copy + 'static>(&'static LocalKey<Cell<Option<V>>>, Option<V>);
    impl<V: Copy + 'static> Drop for Restore<V> {
        fn drop(&mut self) {
            self.0.with(|c| c.set(self.1));
        }
    }
    let _restore = Restore(key, key.with(|c| c.replace(Some(value))));
    f()
}

/// Whether the loops compiled for `S` have a fused multiply-add instruction (the
/// activations use it then: Note [Activations] in `super::float`). Every vector level has
/// one (AVX2 with FMA, AVX-512, NEON); pulp's scalar level is compiled for the baseline
/// target, which on x86-64 has none.
#[inline(always)]
pub(crate) fn has_fma<S: pulp::Simd>() -> bool {
    core::mem::size_of::<S::f32s>() > core::mem::size_of::<f32>()
}

/// Runs `op` compiled for `level`.
///
/// # Panics
///
/// If the CPU lacks `level` (levels come from [`SimdLevel::current`], which only returns
/// available ones).
#[inline(always)]
pub(crate) fn dispatch<Op: WithSimd>(level: SimdLevel, op: Op) -> Op::Output {
    match level {
        #[cfg(target_arch = "x86_64")]
        SimdLevel::Avx512 => Simd::vectorize(
            pulp::x86::V4::try_new()
                .expect("the CPU has AVX-512 (checked when the level was chosen)"),
            op,
        ),
        #[cfg(target_arch = "x86_64")]
        SimdLevel::Avx2 => Simd::vectorize(
            pulp::x86::V3::try_new().expect("the CPU has AVX2 (checked when the level was chosen)"),
            op,
        ),
        #[cfg(target_arch = "x86_64")]
        SimdLevel::Portable => Simd::vectorize(pulp::Scalar::new(), op),
        #[cfg(not(target_arch = "x86_64"))]
        _ => pulp::Arch::new().dispatch(op),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_vector_levels_have_fma_and_the_scalar_level_does_not() {
        assert!(!has_fma::<pulp::Scalar>());
        #[cfg(target_arch = "x86_64")]
        {
            assert!(has_fma::<pulp::x86::V3>());
            assert!(has_fma::<pulp::x86::V4>());
        }
    }
}
