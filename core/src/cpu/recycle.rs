//! Training reserves kept for the next training forward.
//!
//! # Note [Reserve reuse]
//!
//! A training forward writes its reserve (Note [Native reserve] in `super::plan`) into one
//! buffer of tens of megabytes (65 MB for a 2-layer bidirectional LSTM at H256 B32 T100),
//! and the backward drops it. Allocators serve a buffer that large with a fresh mapping
//! from the operating system (glibc: every block above 32 MiB), so every training step
//! page-faulted the whole reserve in again (16 000 faults there, a tenth of the step's
//! time in the kernel's page-fault handler). So a front-end hands the reserve back after
//! the backward ([`recycle`]) and the next training forward takes it ([`take`]):
//!
//! - **What is kept**: at most [`ENTRIES`] buffers per element type, of at least
//!   [`MIN_LEN`] elements each (a smaller one costs the allocator little; with debug
//!   assertions every size is kept, so that the tests' small calls reuse buffers), the
//!   oldest dropped first. A training loop with a few recurrent layers reuses one per layer.
//! - **Which one is taken**: the smallest whose capacity holds the new reserve and is at
//!   most twice its size, so a small call never pins a large buffer; otherwise a fresh
//!   zeroed one.
//! - **Stale values are never read.** A reused buffer still holds the previous step's
//!   gradients. Every element the backward reads was written by this call's forward (gate
//!   rows of valid steps, kept layer outputs, padded rows of those as zeros) or is written
//!   by the backward itself before it is read (the gate rows of padded steps, which it
//!   zeroes); the tag's few elements past the layout are never read. Builds with debug
//!   assertions (the tests) fill a reused buffer with NaN first, so a read of anything
//!   neither pass wrote shows up as NaN in the parity tests' gradients.
//! - **Memory**: the kept buffers stay allocated after training ends, at most [`ENTRIES`]
//!   times the largest reserve per element type; [`release`] frees them.

use std::sync::Mutex;

use super::packed::Lane;

/// Buffers kept per element type, at most.
pub const ENTRIES: usize = 4;

/// Smallest reserve, in elements, worth keeping: 64 Ki elements; 1 with debug
/// assertions, so that the tests' small calls exercise reuse too.
pub const MIN_LEN: usize = if cfg!(debug_assertions) { 1 } else { 1 << 16 };

/// The kept buffers of one element type, oldest first.
pub trait Kept: Sized + 'static {
    /// This type's buffers.
    fn kept() -> &'static Mutex<Vec<Vec<Self>>>;
}

impl Kept for f32 {
    fn kept() -> &'static Mutex<Vec<Vec<f32>>> {
        static KEPT: Mutex<Vec<Vec<f32>>> = Mutex::new(Vec::new());
        &KEPT
    }
}

impl Kept for f64 {
    fn kept() -> &'static Mutex<Vec<Vec<f64>>> {
        static KEPT: Mutex<Vec<Vec<f64>>> = Mutex::new(Vec::new());
        &KEPT
    }
}

fn lock<T>(kept: &Mutex<Vec<Vec<T>>>) -> std::sync::MutexGuard<'_, Vec<Vec<T>>> {
    // A panic while holding the lock leaves a valid list of buffers.
    kept.lock().unwrap_or_else(|e| e.into_inner())
}

/// A buffer of `len` elements for a training reserve: a kept one (stale contents; NaN with
/// debug assertions) or a fresh zeroed one.
pub(crate) fn take<T: Lane + Kept>(len: usize) -> Vec<T> {
    take_from(T::kept(), len)
}

fn take_from<T: Lane>(kept: &Mutex<Vec<Vec<T>>>, len: usize) -> Vec<T> {
    if len >= MIN_LEN {
        let reused = {
            let mut kept = lock(kept);
            let best = kept
                .iter()
                .enumerate()
                .filter(|(_, v)| v.capacity() >= len && v.capacity() / 2 <= len)
                .min_by_key(|(_, v)| v.capacity())
                .map(|(i, _)| i);
            best.map(|i| kept.remove(i))
        };
        if let Some(mut v) = reused {
            if cfg!(debug_assertions) {
                v.clear();
                v.resize(len, T::from_f64(f64::NAN));
            } else {
                v.resize(len, T::ZERO);
            }
            return v;
        }
    }
    vec![T::ZERO; len]
}

/// Hands a reserve back after its backward, for the next training forward to reuse (Note
/// [Reserve reuse]): at most 4 are kept, of at least 64 Ki elements (any size with debug
/// assertions).
pub fn recycle<T: Kept>(reserve: Vec<T>) {
    recycle_into(T::kept(), reserve);
}

fn recycle_into<T>(kept: &Mutex<Vec<Vec<T>>>, reserve: Vec<T>) {
    if reserve.capacity() < MIN_LEN {
        return;
    }
    let mut kept = lock(kept);
    if kept.len() == ENTRIES {
        kept.remove(0);
    }
    kept.push(reserve);
}

/// Frees every kept reserve buffer, of both element types.
pub fn release() {
    lock(f32::kept()).clear();
    lock(f64::kept()).clear();
}

/// Buffers kept now, of both element types (a diagnostic).
pub fn kept() -> usize {
    lock(f32::kept()).len() + lock(f64::kept()).len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reuses_a_buffer_of_fitting_size_and_keeps_at_most_entries() {
        // A list of its own: the process-wide ones are shared with other tests.
        let list: Mutex<Vec<Vec<f32>>> = Mutex::new(Vec::new());
        let count = || lock(&list).len();
        const N: usize = 1 << 16;
        let first = take_from(&list, N * 3);
        let address = first.as_ptr() as usize;
        recycle_into(&list, first);
        assert_eq!(count(), 1, "expected the recycled buffer to be kept");
        // Too small a request for that buffer (under half its size): a fresh one.
        let small = take_from(&list, N);
        assert_ne!(small.as_ptr() as usize, address);
        assert!(
            small.iter().all(|&v| v == 0.0),
            "expected a fresh buffer of zeros"
        );
        // Too large a request: a fresh one.
        let large = take_from(&list, N * 3 + 1);
        assert_ne!(large.as_ptr() as usize, address);
        // A fitting request reuses it, filled with NaN under debug assertions.
        let again = take_from(&list, N * 2);
        assert_eq!(
            again.as_ptr() as usize,
            address,
            "expected the kept buffer back"
        );
        assert_eq!(again.len(), N * 2);
        if cfg!(debug_assertions) {
            assert!(again.iter().all(|v| v.is_nan()));
        }
        assert_eq!(count(), 0);
        // Small buffers are not kept; at most ENTRIES are, the oldest dropped first.
        recycle_into(&list, vec![0.0f32; MIN_LEN - 1]);
        assert_eq!(count(), 0);
        recycle_into(&list, again);
        for _ in 0..ENTRIES {
            recycle_into(&list, vec![0.0f32; N]);
        }
        assert_eq!(count(), ENTRIES);
        assert!(
            lock(&list).iter().all(|v| v.as_ptr() as usize != address),
            "expected the oldest buffer dropped"
        );
    }
}
