//! Training reserves kept for the next training forward.
//!
//! # Note [Reserve reuse]
//!
//! A training forward writes its reserve (Note [Native reserve] in `super::plan`) into one
//! buffer of tens of megabytes (65 MB for a 2-layer bidirectional LSTM at H256 B32 T100),
//! and the backward drops it. Allocators serve a buffer that large with a fresh mapping
//! from the operating system (glibc: every block above 32 MiB), so every training step
//! page-faulted the whole reserve in again (16 000 faults there, a tenth of the step's
//! time in the kernel's page-fault handler). So the backward (`super::backward`, which takes
//! the reserve by value) hands it back when it is done ([`recycle`]) and the next training
//! forward takes it ([`take`]):
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
//!
//! # Note [Scratch reuse]
//!
//! A call also allocates buffers of its own that it drops before it returns: the packed
//! weights of every layer and direction (Note [Packed weights] in `super::packed`, 2 MiB
//! per direction for an LSTM at H256), and in inference the output of every layer but the
//! last. Whether glibc serves such a block from memory it already holds or maps it fresh
//! (and the call then page-faults it in) depends on the process's history: its mmap
//! threshold rises when a large mapped block is freed, and it trims freed memory past a
//! threshold. Measured on the 2-layer bidirectional LSTM at H256 B32 T100 (inference,
//! through the Burn 0.22 front-end): one change elsewhere in the process (the module
//! keeping its flat weights across calls) took the forward from 45 to 52 ms, with about
//! 4 000 more page faults per call, as many as these buffers hold; with glibc's thresholds fixed
//! (`MALLOC_MMAP_THRESHOLD_`, `MALLOC_TRIM_THRESHOLD_`) the same change made it faster.
//! So these buffers come from a second list, [`Scratch`], kept like the reserves (at
//! most [`SCRATCH_ENTRIES`] per element type, the smallest that fits and is at most twice
//! the size) and handed back when dropped. Their users write every element before reading
//! it (the packing writes zeros past the last column; a layer writes every row of its
//! output, zeros at padded rows), and under debug assertions a reused buffer is NaN-filled
//! as reserves are, so the parity tests would see a stale read. [`release`] frees both
//! lists.

use std::sync::Mutex;

use super::aligned::{pad, Aligned};
use super::packed::Lane;

/// Buffers kept per element type, at most.
pub const ENTRIES: usize = 4;

/// Smallest reserve, in elements, worth keeping: 64 Ki elements; 1 with debug
/// assertions, so that the tests' small calls exercise reuse too.
pub const MIN_LEN: usize = if cfg!(debug_assertions) { 1 } else { 1 << 16 };

/// Scratch buffers kept per element type, at most (Note [Scratch reuse]).
pub const SCRATCH_ENTRIES: usize = 8;

/// The kept buffers of one element type, oldest first.
pub trait Kept: Sized + 'static {
    /// This type's training reserves.
    fn kept() -> &'static Mutex<Vec<Vec<Self>>>;
    /// This type's scratch buffers (Note [Scratch reuse]).
    fn scratch() -> &'static Mutex<Vec<Vec<Self>>>;
}

impl Kept for f32 {
    fn kept() -> &'static Mutex<Vec<Vec<f32>>> {
        static KEPT: Mutex<Vec<Vec<f32>>> = Mutex::new(Vec::new());
        &KEPT
    }
    fn scratch() -> &'static Mutex<Vec<Vec<f32>>> {
        static SCRATCH: Mutex<Vec<Vec<f32>>> = Mutex::new(Vec::new());
        &SCRATCH
    }
}

impl Kept for f64 {
    fn kept() -> &'static Mutex<Vec<Vec<f64>>> {
        static KEPT: Mutex<Vec<Vec<f64>>> = Mutex::new(Vec::new());
        &KEPT
    }
    fn scratch() -> &'static Mutex<Vec<Vec<f64>>> {
        static SCRATCH: Mutex<Vec<Vec<f64>>> = Mutex::new(Vec::new());
        &SCRATCH
    }
}

/// A buffer of the kernel's own, taken from the scratch list and handed back to it when
/// dropped (Note [Scratch reuse]). Its elements are stale (NaN with debug assertions):
/// its user writes every one before reading it.
///
/// Its first element starts a cache line (Note [Aligned buffers] in `super::aligned`).
pub(crate) struct Scratch<T> {
    data: Aligned<T>,
    /// Where the buffer goes when dropped.
    home: fn(Vec<T>),
}

impl<T: Lane + Kept> Scratch<T> {
    /// `len` elements: a kept buffer (stale) or a fresh zeroed one.
    pub(crate) fn new(len: usize) -> Self {
        Self {
            data: Aligned::within(take_from(T::scratch(), len + pad::<T>()), len),
            home: |v| recycle_into(T::scratch(), v, SCRATCH_ENTRIES),
        }
    }
}

impl<T> Default for Scratch<T> {
    fn default() -> Self {
        Self {
            data: Aligned::default(),
            home: drop,
        }
    }
}

impl<T: Clone> Clone for Scratch<T> {
    /// An owned copy, not kept when dropped (only the prepared-weights cache clones).
    fn clone(&self) -> Self {
        Self {
            data: self.data.clone(),
            home: drop,
        }
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for Scratch<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scratch")
            .field("len", &self.data.len())
            .finish()
    }
}

impl<T> std::ops::Deref for Scratch<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        &self.data
    }
}

impl<T> std::ops::DerefMut for Scratch<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        &mut self.data
    }
}

impl<T> Drop for Scratch<T> {
    fn drop(&mut self) {
        (self.home)(std::mem::take(&mut self.data).into_vec());
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
pub(crate) fn recycle<T: Kept>(reserve: Vec<T>) {
    recycle_into(T::kept(), reserve, ENTRIES);
}

fn recycle_into<T>(kept: &Mutex<Vec<Vec<T>>>, buffer: Vec<T>, entries: usize) {
    if buffer.capacity() < MIN_LEN {
        return;
    }
    let mut kept = lock(kept);
    if kept.len() == entries {
        kept.remove(0);
    }
    kept.push(buffer);
}

/// Frees every kept buffer, reserves and scratch, of both element types.
pub fn release() {
    lock(f32::kept()).clear();
    lock(f64::kept()).clear();
    lock(f32::scratch()).clear();
    lock(f64::scratch()).clear();
}

/// Buffers kept now, reserves and scratch, of both element types (a diagnostic).
pub fn kept() -> usize {
    lock(f32::kept()).len()
        + lock(f64::kept()).len()
        + lock(f32::scratch()).len()
        + lock(f64::scratch()).len()
}

#[cfg(test)]
mod tests {
    use super::super::aligned::LINE;
    use super::*;

    #[test]
    fn scratch_starts_on_a_cache_line_fresh_reused_and_cloned() {
        // Note [Aligned buffers]: fresh, taken from the list (the process-wide one: other
        // tests may take or add buffers meanwhile, which changes nothing here), and cloned.
        for len in [1, 15, 16, 1000, MIN_LEN + 3] {
            let mut a = Scratch::<f32>::new(len);
            assert_eq!(a.len(), len);
            assert_eq!(a.as_ptr() as usize % LINE, 0, "fresh, len {len}");
            for (i, v) in a.iter_mut().enumerate() {
                *v = i as f32;
            }
            let b = a.clone();
            assert_eq!(b.as_ptr() as usize % LINE, 0, "cloned, len {len}");
            assert_eq!(&b[..], &a[..]);
            drop(a);
            let c = Scratch::<f64>::new(len);
            assert_eq!(c.as_ptr() as usize % LINE, 0, "f64, len {len}");
            let d = Scratch::<f32>::new(len);
            assert_eq!(d.as_ptr() as usize % LINE, 0, "reused, len {len}");
            assert_eq!(d.len(), len);
        }
    }

    #[test]
    fn reuses_a_buffer_of_fitting_size_and_keeps_at_most_entries() {
        // A list of its own: the process-wide ones are shared with other tests.
        let list: Mutex<Vec<Vec<f32>>> = Mutex::new(Vec::new());
        let count = || lock(&list).len();
        const N: usize = 1 << 16;
        let first = take_from(&list, N * 3);
        let address = first.as_ptr() as usize;
        recycle_into(&list, first, ENTRIES);
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
        recycle_into(&list, vec![0.0f32; MIN_LEN - 1], ENTRIES);
        assert_eq!(count(), 0);
        recycle_into(&list, again, ENTRIES);
        for _ in 0..ENTRIES {
            recycle_into(&list, vec![0.0f32; N], ENTRIES);
        }
        assert_eq!(count(), ENTRIES);
        assert!(
            lock(&list).iter().all(|v| v.as_ptr() as usize != address),
            "expected the oldest buffer dropped"
        );
    }
}
