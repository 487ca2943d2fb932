//! The process-wide settings of the cuDNN path ([`set_enabled`], [`set_tf32`],
//! [`set_algorithm`]) and the settings one call runs with.
//!
//! # Note [Pinned settings]
//!
//! A call reads the settings once, at its start ([`CallSettings::current`]). A fused op
//! (`burn::backend::Cuda`) is registered first and executed later, maybe after another
//! thread changed a setting: its declared outputs (the training reserve's length carries
//! the algorithm and TF32, Note [Reserve tag]) come from the settings at registration. So
//! `crate::fusion` reads them at registration ([`CallSettings::current`]) and runs the
//! op's execution under them ([`CallSettings::pin`]): inside, every read on that thread
//! returns the pinned settings, whatever the process-wide ones are by then.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

use super::algorithm::{RnnAlgorithm, Settings};

static ENABLED: AtomicBool = AtomicBool::new(true);
static TF32: AtomicBool = AtomicBool::new(false);
static ALGORITHM: AtomicU8 = AtomicU8::new(0);

/// Switches the cuDNN path off (`false`) or back on: while off, the CUDA backend runs the
/// reference implementation. For comparisons and benchmarks; the backward of a training
/// forward that ran cuDNN needs it on.
pub fn set_enabled(enabled: bool) {
    ENABLED.store(enabled, Ordering::Relaxed);
}

/// Whether the cuDNN path is switched on ([`set_enabled`]).
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Lets cuDNN use TF32 tensor cores for F32 RNNs (off by default: F32 then matches the
/// reference to 1e-4). Takes effect from the next call; the backward of a training
/// forward uses the forward's setting (Note [Reserve tag]).
pub fn set_tf32(enabled: bool) {
    TF32.store(enabled, Ordering::Relaxed);
}

/// Whether TF32 is on ([`set_tf32`]).
pub fn tf32() -> bool {
    TF32.load(Ordering::Relaxed)
}

/// Chooses the cuDNN RNN algorithm of later calls (default [`RnnAlgorithm::Standard`]).
///
/// A persistent algorithm that cannot run a call shape (Note [RNN algorithms]: no bias,
/// projection, variable lengths, F64 for the static ones, or cuDNN refusing the shape when
/// it is probed) falls back to `Standard` for that shape, with one warning. A training
/// forward's backward always uses the forward's algorithm (Note [Reserve tag]). Takes
/// effect from the next call; process-wide.
pub fn set_algorithm(algorithm: RnnAlgorithm) {
    ALGORITHM.store(algorithm.index(), Ordering::Relaxed);
}

/// The algorithm chosen with [`set_algorithm`].
pub fn algorithm() -> RnnAlgorithm {
    RnnAlgorithm::from_index(ALGORITHM.load(Ordering::Relaxed))
}

/// The settings one call runs with (Note [Pinned settings]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CallSettings {
    /// [`enabled`].
    pub enabled: bool,
    /// [`algorithm`] and [`tf32`].
    pub settings: Settings,
}

thread_local! {
    static PINNED: Cell<Option<CallSettings>> = const { Cell::new(None) };
}

impl CallSettings {
    /// The process-wide settings now.
    pub(crate) fn global() -> Self {
        Self {
            enabled: enabled(),
            settings: Settings {
                algorithm: algorithm(),
                tf32: tf32(),
            },
        }
    }

    /// The settings pinned on this thread by [`CallSettings::pin`], else the process-wide
    /// ones.
    pub(crate) fn current() -> Self {
        PINNED.get().unwrap_or_else(Self::global)
    }

    /// Runs `f` with these settings pinned on this thread; the previous pin (if any) is
    /// restored afterwards, also when `f` panics.
    pub(crate) fn pin<R>(self, f: impl FnOnce() -> R) -> R {
        struct Restore(Option<CallSettings>);
        impl Drop for Restore {
            fn drop(&mut self) {
                PINNED.set(self.0);
            }
        }
        let _restore = Restore(PINNED.replace(Some(self)));
        f()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pinned_settings_win_on_their_thread_until_the_scope_ends() {
        // Compared with the process-wide values read at the same moment, so that the test
        // never changes them (other tests run in parallel).
        let differs = |global: CallSettings| CallSettings {
            enabled: !global.enabled,
            settings: Settings {
                algorithm: if global.settings.algorithm == RnnAlgorithm::Auto {
                    RnnAlgorithm::PersistDynamic
                } else {
                    RnnAlgorithm::Auto
                },
                tf32: !global.settings.tf32,
            },
        };
        let pinned = differs(CallSettings::global());
        assert_eq!(CallSettings::current(), CallSettings::global());
        let inner = differs(pinned);
        pinned.pin(|| {
            assert_eq!(CallSettings::current(), pinned);
            // Another thread does not see this thread's pin.
            std::thread::scope(|s| {
                s.spawn(|| assert_eq!(CallSettings::current(), CallSettings::global()));
            });
            inner.pin(|| assert_eq!(CallSettings::current(), inner));
            assert_eq!(CallSettings::current(), pinned, "the outer pin is restored");
        });
        assert_eq!(CallSettings::current(), CallSettings::global());
        let panicked = std::panic::catch_unwind(|| pinned.pin(|| panic!("inside")));
        assert!(panicked.is_err());
        assert_eq!(
            CallSettings::current(),
            CallSettings::global(),
            "a panic inside the scope does not leave the pin behind"
        );
    }
}
