//! Safe matrix views over slices and the one GEMM call of the kernel, through the `gemm`
//! crate, and the L2 prefetch of the step products (Note [Next chunk ahead] in
//! `super::packed`). The only `unsafe` of the CPU kernel lives here.
//!
//! # Note [GEMM crate]
//!
//! The large products of a call, those over all steps at once (the weight gradients
//! `dG^T · input` and `dG^T · h`, the input gradient `dG · W_ih`) and the LSTM projection,
//! go to the `gemm` crate (0.19, sarah-ek's; Flex's and candle's GEMM): runtime-dispatched
//! AVX2 and AVX-512 kernels, arbitrary strides (a transposed operand costs nothing), and
//! rayon's pool, the one persistent pool of the process. It was chosen over
//! `matrixmultiply` (NdArray's GEMM) by measurement (`benches/gemm_shapes.rs`,
//! docs/BENCHMARKS.md): comparable on large products, faster on two threads, and with a
//! matrix-vector path at batch 1.
//!
//! The per-step products do not use it: a GEMM call packs its operands every time, and a
//! step's `W_hh` would be packed as many times as there are steps (on AVX-512 that
//! packing cost as much as the multiply-adds). They run on weights packed once per call
//! (Note [Packed weights] in `super::packed`), and so, since 2026-12-06, does the input
//! projected ahead in blocks of steps (Note [Projection through the packed kernel] in
//! `super::projection`: each block's GEMM packed `W_ih` again, into a buffer allocated per
//! call).

use gemm::Parallelism;

use super::float::Float;

/// A read-only matrix: `rows × cols` elements of `data`, element `(i, j)` at
/// `i * row_stride + j * col_stride`. Construction checks that every element lies in
/// `data`, so a `Mat` can always be read whole.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Mat<'a, T> {
    data: &'a [T],
    rows: usize,
    cols: usize,
    row_stride: usize,
    col_stride: usize,
}

/// The offset one past the last element of a `rows × cols` matrix with these strides.
fn extent(rows: usize, cols: usize, row_stride: usize, col_stride: usize) -> usize {
    if rows == 0 || cols == 0 {
        return 0;
    }
    (rows - 1)
        .checked_mul(row_stride)
        .and_then(|r| (cols - 1).checked_mul(col_stride)?.checked_add(r))
        .and_then(|last| last.checked_add(1))
        .expect("matrix extent overflows usize")
}

/// Panics, naming the view (`what`), unless every element of a `rows × cols` view with
/// these strides falls inside a slice of `len` elements.
fn check_extent(
    what: &str,
    len: usize,
    [rows, cols]: [usize; 2],
    [row_stride, col_stride]: [usize; 2],
) {
    let end = extent(rows, cols, row_stride, col_stride);
    assert!(
        end <= len,
        "{what} [{rows}, {cols}] (strides {row_stride}, {col_stride}) needs {end} elements, the slice has {len}"
    );
}

impl<'a, T> Mat<'a, T> {
    /// A view of `data`.
    ///
    /// # Panics
    ///
    /// If an element falls outside `data`.
    pub(crate) fn new(
        data: &'a [T],
        rows: usize,
        cols: usize,
        row_stride: usize,
        col_stride: usize,
    ) -> Self {
        check_extent(
            "matrix view",
            data.len(),
            [rows, cols],
            [row_stride, col_stride],
        );
        Self {
            data,
            rows,
            cols,
            row_stride,
            col_stride,
        }
    }

    /// Row-major `rows × cols`, rows `row_stride` apart.
    pub(crate) fn rows(data: &'a [T], rows: usize, cols: usize, row_stride: usize) -> Self {
        Self::new(data, rows, cols, row_stride, 1)
    }

    /// The transpose (a view, no copy).
    pub(crate) fn t(self) -> Self {
        Self {
            data: self.data,
            rows: self.cols,
            cols: self.rows,
            row_stride: self.col_stride,
            col_stride: self.row_stride,
        }
    }
}

/// A row-major destination matrix: `rows × cols`, rows `row_stride ≥ cols` apart, so no
/// two elements overlap.
#[derive(Debug)]
pub(crate) struct MatMut<'a, T> {
    data: &'a mut [T],
    rows: usize,
    cols: usize,
    row_stride: usize,
}

impl<'a, T> MatMut<'a, T> {
    /// # Panics
    ///
    /// If `row_stride < cols` (rows would overlap) or an element falls outside `data`.
    pub(crate) fn rows(data: &'a mut [T], rows: usize, cols: usize, row_stride: usize) -> Self {
        assert!(
            rows <= 1 || row_stride >= cols,
            "destination rows overlap: row stride {row_stride} < {cols} columns"
        );
        check_extent("destination", data.len(), [rows, cols], [row_stride, 1]);
        Self {
            data,
            rows,
            cols,
            row_stride,
        }
    }
}

/// `dst = lhs · rhs`, or `dst += lhs · rhs` when `accumulate`, on up to `threads` threads of
/// rayon's pool.
///
/// # Panics
///
/// If the shapes do not chain (`lhs` `m × k`, `rhs` `k × n`, `dst` `m × n`).
pub(crate) fn gemm<T: Float>(
    dst: MatMut<'_, T>,
    accumulate: bool,
    lhs: Mat<'_, T>,
    rhs: Mat<'_, T>,
    threads: usize,
) {
    let (m, n, k) = (dst.rows, dst.cols, lhs.cols);
    assert!(
        lhs.rows == m && rhs.rows == k && rhs.cols == n,
        "gemm shapes do not chain: [{}, {}] x [{}, {}] into [{m}, {n}]",
        lhs.rows,
        lhs.cols,
        rhs.rows,
        rhs.cols
    );
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        if !accumulate {
            for row in dst.data.chunks_mut(dst.row_stride.max(1)).take(m) {
                row[..n].fill(T::ZERO);
            }
        }
        return;
    }
    let parallelism = if threads > 1 {
        Parallelism::Rayon(threads)
    } else {
        Parallelism::None
    };
    let stride = |s: usize| isize::try_from(s).expect("stride fits isize");
    // SAFETY: every pointer stays in bounds: `Mat::new` / `MatMut::rows` checked that the
    // last element of each view, `(rows-1)·row_stride + (cols-1)·col_stride`, lies inside
    // its slice, and `gemm` reads or writes only elements of the `m × n`, `m × k` and
    // `k × n` views with the strides given. `dst` is borrowed mutably, `lhs` and `rhs`
    // shared, so the destination overlaps neither source, and its rows do not overlap each
    // other (`row_stride ≥ cols`, checked), so no two threads write the same element. `T`
    // is `f32` or `f64`, both supported by `gemm` (it panics, not UB, on other types).
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.data.as_mut_ptr(),
            1,
            stride(dst.row_stride),
            accumulate,
            lhs.data.as_ptr(),
            stride(lhs.col_stride),
            stride(lhs.row_stride),
            rhs.data.as_ptr(),
            stride(rhs.col_stride),
            stride(rhs.row_stride),
            T::ONE,
            T::ONE,
            false,
            false,
            false,
            parallelism,
        );
    }
}

/// Asks the CPU to bring the cache line holding `data[i]` into its L2 (a hint: it reads
/// nothing architecturally and never faults). Does nothing off x86-64 or past the end.
#[inline(always)]
pub(crate) fn prefetch_l2<T>(data: &[T], i: usize) {
    #[cfg(target_arch = "x86_64")]
    if let Some(v) = data.get(i) {
        // SAFETY: SSE, which `_mm_prefetch` needs, is part of the x86-64 baseline; a
        // prefetch is a hint that reads no memory architecturally, and the pointer comes
        // from a reference into `data` anyway.
        unsafe {
            core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T1 }>(
                (v as *const T).cast::<i8>(),
            )
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (data, i);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(a: &[f64], b: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
        let mut c = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                c[i * n + j] = (0..k).map(|l| a[i * k + l] * b[l * n + j]).sum();
            }
        }
        c
    }

    fn values(n: usize, seed: f64) -> Vec<f64> {
        (0..n).map(|i| ((i as f64 + seed) * 0.7).sin()).collect()
    }

    #[test]
    fn strided_and_transposed_operands_match_a_naive_product() {
        let (m, k, n) = (7, 5, 9);
        let a = values(m * k, 1.0);
        let b = values(k * n, 2.0);
        let expected = naive(&a, &b, m, k, n);
        // b stored transposed ([n, k] row-major), dst with padded rows.
        let mut bt = vec![0.0; n * k];
        for l in 0..k {
            for j in 0..n {
                bt[j * k + l] = b[l * n + j];
            }
        }
        for threads in [1, 2] {
            let mut dst = vec![f64::NAN; m * (n + 3)];
            gemm(
                MatMut::rows(&mut dst, m, n, n + 3),
                false,
                Mat::rows(&a, m, k, k),
                Mat::rows(&bt, n, k, k).t(),
                threads,
            );
            for i in 0..m {
                for j in 0..n {
                    assert!((dst[i * (n + 3) + j] - expected[i * n + j]).abs() < 1e-12);
                }
                assert!(dst[i * (n + 3) + n].is_nan(), "padding untouched");
            }
            // Accumulate: dst += a b.
            gemm(
                MatMut::rows(&mut dst, m, n, n + 3),
                true,
                Mat::rows(&a, m, k, k),
                Mat::rows(&b, k, n, n),
                threads,
            );
            for i in 0..m {
                for j in 0..n {
                    assert!((dst[i * (n + 3) + j] - 2.0 * expected[i * n + j]).abs() < 1e-12);
                }
            }
        }
    }

    #[test]
    #[should_panic(expected = "needs 12 elements, the slice has 11")]
    fn a_view_past_its_slice_is_refused() {
        let a = vec![0.0f32; 11];
        Mat::rows(&a, 3, 4, 4);
    }

    #[test]
    #[should_panic(expected = "gemm shapes do not chain")]
    fn shapes_that_do_not_chain_are_refused() {
        let a = vec![0.0f32; 12];
        let mut c = vec![0.0f32; 9];
        gemm(
            MatMut::rows(&mut c, 3, 3, 3),
            false,
            Mat::rows(&a, 3, 4, 4),
            Mat::rows(&a, 3, 4, 4),
            1,
        );
    }
}
