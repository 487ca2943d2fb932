//! Buffers whose first element starts a cache line.
//!
//! # Note [Aligned buffers]
//!
//! The allocator places a `Vec<f32>` on a 16-byte boundary, so a buffer's first element
//! sits at one of four offsets in its 64-byte cache line, chosen by the process's heap
//! history. Every 512-bit load or store of such a buffer then straddles two lines (a
//! 256-bit access, every other one), and a store the next step loads back (`h`, the cell
//! state) may not forward. Measured on Zen 5 (AVX-512, 2 threads, kernel alone, LSTM H32
//! B1 T10000 forward): from process to process the forward ran in about 2.2, 2.5 or
//! 3.0 ms, and with ASLR turned off (`setarch -R`) almost always in the same one; with
//! every allocation of the process on a cache line it ran in 2.4–2.5 ms every time.
//! So the kernel's own hot buffers start on a line:
//!
//! - the packed weights and the layers' outputs (`super::recycle::Scratch`);
//! - a scan's carried state, cell state and laid-out rows, and the projected input rows
//!   (`super::forward`);
//! - the backward's carried gradients (`dh`, `dc`), its step buffers and its laid-out rows
//!   (`super::backward`).
//!
//! The caller's tensors (inputs, outputs, weights read in place) keep whatever alignment
//! the backend gave them. The buffer over-allocates one line and starts at the first
//! element on a line boundary; all of it is initialised, so it is safe code throughout.

use super::packed::Lane;

/// Bytes of a cache line.
pub(crate) const LINE: usize = 64;

/// Elements of one line, the most a buffer is shifted by: an allocation this much longer
/// than the buffer holds it from its first element on a line.
pub(crate) const fn pad<T>() -> usize {
    LINE / core::mem::size_of::<T>()
}

/// The first index of `data` that lies on a line boundary (0 if there is none within a
/// line, which leaves the buffer correct but unaligned).
fn line_start<T>(data: &[T]) -> usize {
    let start = data.as_ptr().align_offset(LINE);
    if start < pad::<T>() {
        start
    } else {
        0
    }
}

/// `len` elements starting on a cache line (Note [Aligned buffers]).
pub(crate) struct Aligned<T> {
    data: Vec<T>,
    start: usize,
    len: usize,
}

impl<T> Default for Aligned<T> {
    fn default() -> Self {
        Self {
            data: Vec::new(),
            start: 0,
            len: 0,
        }
    }
}

impl<T> Aligned<T> {
    /// The first `len` elements of `data` from its first element on a line; `data` holds at
    /// least [`pad`] more than `len`.
    pub(crate) fn within(data: Vec<T>, len: usize) -> Self {
        assert!(
            len + pad::<T>() <= data.len(),
            "expected at least {} elements, got {}",
            len + pad::<T>(),
            data.len()
        );
        Self {
            start: line_start(&data),
            data,
            len,
        }
    }

    /// The whole allocation, to hand back for reuse.
    pub(crate) fn into_vec(self) -> Vec<T> {
        self.data
    }
}

impl<T: Clone> Clone for Aligned<T> {
    /// A copy on a line of its own allocation.
    fn clone(&self) -> Self {
        let mut data = self.data.clone();
        let start = line_start(&data);
        if start != self.start {
            data[start..start + self.len].clone_from_slice(self);
        }
        Self {
            data,
            start,
            len: self.len,
        }
    }
}

impl<T: Lane> Aligned<T> {
    /// `len` copies of `value`.
    pub(crate) fn filled(len: usize, value: T) -> Self {
        Self::within(vec![value; len + pad::<T>()], len)
    }

    /// A copy of `values`.
    pub(crate) fn from_slice(values: &[T]) -> Self {
        let mut buffer = Self::filled(values.len(), T::ZERO);
        buffer.copy_from_slice(values);
        buffer
    }

    /// Makes the length `len`, as `Vec::resize` does: the first elements are kept, new
    /// ones are `value`. Grows the allocation only when `len` does not fit.
    pub(crate) fn resize(&mut self, len: usize, value: T) {
        if self.start + len <= self.data.len() {
            let old = self.len.min(len);
            self.data[self.start + old..self.start + len].fill(value);
            self.len = len;
        } else {
            let mut grown = Self::filled(len, value);
            grown[..self.len].copy_from_slice(self);
            *self = grown;
        }
    }
}

impl<T> core::ops::Deref for Aligned<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        &self.data[self.start..self.start + self.len]
    }
}

impl<T> core::ops::DerefMut for Aligned<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        &mut self.data[self.start..self.start + self.len]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn on_a_line<T>(s: &[T]) -> bool {
        s.as_ptr() as usize % LINE == 0
    }

    #[test]
    fn starts_on_a_line_and_resizes_like_a_vec() {
        let mut b = Aligned::filled(5, 1.0f32);
        assert!(on_a_line(&b));
        assert_eq!(&b[..], &[1.0; 5]);
        // Shrinking keeps the first elements; growing within the allocation fills the new
        // ones with the value, as `Vec::resize` does.
        b.resize(3, 2.0);
        assert_eq!(&b[..], &[1.0; 3]);
        b.resize(6, 2.0);
        assert_eq!(&b[..], &[1.0, 1.0, 1.0, 2.0, 2.0, 2.0]);
        // Growing past the allocation moves it, still on a line, contents kept.
        b[0] = 7.0;
        b.resize(1000, 3.0);
        assert!(on_a_line(&b));
        assert_eq!(b.len(), 1000);
        assert_eq!(&b[..7], &[7.0, 1.0, 1.0, 2.0, 2.0, 2.0, 3.0]);
        assert!(b[6..].iter().all(|&v| v == 3.0));
        let c = Aligned::from_slice(&[1.0f64, 2.0, 3.0]);
        assert!(on_a_line(&c));
        assert_eq!(&c[..], &[1.0, 2.0, 3.0]);
        let d = c.clone();
        assert!(on_a_line(&d));
        assert_eq!(&d[..], &[1.0, 2.0, 3.0]);
        assert_eq!(Aligned::<f32>::default().len(), 0);
    }
}
