//! Safe matrix views over slices and the one GEMM call of the kernel, through the `gemm`
//! crate. The only `unsafe` of the CPU kernel lives here.
//!
//! # Note [GEMM crate]
//!
//! `gemm` 0.19 (sarah-ek; Flex's and candle's GEMM) was picked over `matrixmultiply` 0.3
//! (NdArray's GEMM) by measurement on the 2-core AVX2 machine this project runs on
//! (`RAYON_NUM_THREADS=2 cargo bench --bench gemm_shapes`; the table is in the README).
//! Single-threaded, either can win by up to ~18% on the large GEMMs (input projection,
//! weight gradients) and on the B = 32 step (two runs disagreed), `gemm` is 1.2–1.5×
//! faster on the H = 512, B = 64 step and 7× faster at batch 1 (the decoding and
//! long-sequence case, where `matrixmultiply` has no matrix-vector path). `gemm` also takes arbitrary strides
//! (a transposed operand costs nothing) and splits work over rayon's pool, the one
//! persistent pool of the process, sized by `RAYON_NUM_THREADS`; `matrixmultiply`'s
//! `threading` feature brings a pool of its own.
//!
//! Tried and not adopted: laying `W_hh` out once per call so that `gemm` reads it in place
//! instead of packing it on every step (it packs a row-major left operand; `h · W_hh^T`
//! becomes `W_hh · h^T` inside it). On the step GEMM alone, panels of 64 rows of `W_hh`,
//! each transposed and contiguous, one single-threaded GEMM per panel over rayon's pool,
//! were 12–39% faster (H = 256, B = 32: 176 against 200–219 µs at 2 threads; H = 512,
//! B = 64: 895 against 1035–1460 µs, `gemm`'s own time moving between runs); one transposed copy read in place was faster at
//! H = 256 only with its rows padded off 4 KiB, and 1.6× slower at H = 512. But in the
//! whole forward (NdArray f32, 2 threads, old and new binaries interleaved three times)
//! the difference stayed inside this machine's ±15% noise (best of three, old / new:
//! LSTM H256 21.4 / 24.8 ms, H512 161 / 150; GRU H256 15.2 / 17.1, H512 113 / 115), so
//! the extra `unsafe` and copy were not kept. A quieter machine may decide otherwise.

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
        let end = extent(rows, cols, row_stride, col_stride);
        assert!(
            end <= data.len(),
            "matrix view [{rows}, {cols}] (strides {row_stride}, {col_stride}) needs {end} elements, the slice has {}",
            data.len()
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
        let end = extent(rows, cols, row_stride, 1);
        assert!(
            end <= data.len(),
            "destination [{rows}, {cols}] (row stride {row_stride}) needs {end} elements, the slice has {}",
            data.len()
        );
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
