//! The kernel's parts run alone, for measurement only (`examples/kernel_parts.rs`): not
//! part of the crate's API, and not stable.
//!
//! # Note [Parts alone]
//!
//! A step of the forward scan is a product over the packed weights (Note [Packed weights]
//! in `super::packed`) and the cell update of its units (`super::cell`); where the input is
//! projected ahead, each block of steps also runs its projection (Note [Projection through
//! the packed kernel] in `super::projection`). Timed alone, each part's rate is the most
//! the whole can reach on that machine: their sum, against the kernel's own time
//! (`kernel_times`), says how much of a call is left between the parts (packing, layout,
//! threads), and the product's rate against a BLAS's single-thread rate at the same shape
//! says how much is left inside the tile. The parts here run the kernel's own code paths
//! (`Packed::tiles`, `cell::lstm_forward`, `ProjectRows`, the backward's weight gradients,
//! and for comparison the `gemm` crate through `super::gemm`) on made-up values; each keeps
//! its output, which the tests below check against a plain product.

use pulp::{Simd, WithSimd};

use super::aligned::Aligned;
use super::backward::{weight_gemms, WeightGemm};
use super::cell;
use super::gemm::{gemm, Mat, MatMut};
use super::packed::{Packed, ProjectRows, SLOTS};
use super::projection::{forced_next_chunk_ahead, ForcedChunks};
use super::simd::{dispatch, has_fma, SimdLevel};

/// Panics unless every size is at least 1.
fn check_sizes(what: &str, sizes: &[(&str, usize)]) {
    for &(name, size) in sizes {
        assert!(size > 0, "{what}: expected {name} >= 1, got {size}");
    }
}

/// `n` values in `[-0.5, 0.5)`, the same for the same `seed`.
fn values(n: usize, seed: usize) -> Vec<f32> {
    (0..n)
        .map(|i| ((i.wrapping_mul(7919).wrapping_add(seed * 104_729)) % 1000) as f32 * 1e-3 - 0.5)
        .collect()
}

/// One step's product of `rows` rows: `[rows, k] · W^T` with `W` `[4·hidden, k]` packed as
/// an LSTM's `W_hh` (`k` = its `P`), at a SIMD level, with the reduction chunks this CPU
/// gets (Note [Reduction chunks]) unless `k_chunk` forces them, and the next chunk asked
/// for ahead when the weights outgrow its L2 unless the calling thread forces it (Note
/// [Next chunk ahead]). What a thread computes per step when the input is projected ahead
/// (Note [Input projection]).
pub struct StepProduct {
    packed: Packed<f32>,
    x: Vec<f32>,
    rows: usize,
    k: usize,
    lhs: Aligned<f32>,
    out: Vec<f32>,
}

impl StepProduct {
    /// The weights packed once, the rows made up.
    pub fn new(
        level: SimdLevel,
        rows: usize,
        hidden: usize,
        k: usize,
        k_chunk: Option<usize>,
    ) -> Self {
        check_sizes(
            "step product",
            &[("rows", rows), ("hidden", hidden), ("k", k)],
        );
        let packed = Packed::gates(level, None, &values(4 * hidden * k, 1), 4, hidden, k).blocked(
            ForcedChunks {
                k_chunk,
                prefetch: forced_next_chunk_ahead(),
            },
        );
        Self {
            packed,
            x: values(rows * k, 2),
            rows,
            k,
            lhs: Aligned::default(),
            out: vec![0.0; rows * 4 * hidden],
        }
    }

    /// One product into [`StepProduct::output`]: the rows got ready as a step does (laid out,
    /// or one row read in place: `Packed::ready_rows`), every tile.
    pub fn run(&mut self) {
        dispatch(self.packed.level, ProductOnce { product: self });
    }

    /// `[rows, 4·hidden]`: row `r`'s products with every row of `W`.
    pub fn output(&self) -> &[f32] {
        &self.out
    }

    /// Floating-point operations of one product.
    pub fn flops(&self) -> f64 {
        2.0 * (self.rows * self.packed.n * self.k) as f64
    }

    /// Bytes of the packed weights.
    pub fn weight_bytes(&self) -> usize {
        self.packed.bytes()
    }

    /// Chunks of the reduction, in steps (`usize::MAX`: one chunk).
    pub fn k_chunk(&self) -> usize {
        self.packed.k_chunk
    }

    /// Whether the product asks for each next chunk ahead (Note [Next chunk ahead]): what
    /// it does with its rows and chunks, not only what was chosen or forced.
    pub fn next_chunk_ahead(&self) -> bool {
        self.packed.asks_ahead(self.rows)
    }
}

struct ProductOnce<'a> {
    product: &'a mut StepProduct,
}

impl WithSimd for ProductOnce<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, simd: S) {
        let StepProduct {
            packed,
            x,
            rows,
            k,
            lhs,
            out,
            ..
        } = self.product;
        let (rows, k) = (*rows, *k);
        let (n, lanes) = (packed.n, packed.lanes);
        let hidden = n / 4;
        let ready = packed.ready_rows::<S>(rows, |r| (&[][..], &x[r * k..(r + 1) * k]), lhs);
        packed.tiles_ready(
            simd,
            ready,
            lhs,
            #[inline(always)]
            |first, count, panel, values| {
                let lo = panel * lanes;
                let units = lanes.min(hidden - lo);
                for r in 0..count {
                    let row = &mut out[(first + r) * n..(first + r + 1) * n];
                    for gate in 0..4 {
                        let from = &values[(r * SLOTS + gate) * lanes..][..units];
                        row[gate * hidden + lo..][..units].copy_from_slice(from);
                    }
                }
            },
        );
    }
}

/// The LSTM cell update (inference) of `rows` rows of `hidden` units from made-up
/// pre-activations, a panel's units (the level's lanes) per call, as the step's epilogue
/// runs it (Note [Fused step] in `super::forward`).
pub struct LstmCells {
    level: SimdLevel,
    rows: usize,
    hidden: usize,
    /// Per row, `[4·hidden]`: the gates' products.
    acc: Vec<f32>,
    bias: Vec<f32>,
    c: Vec<f32>,
    out: Vec<f32>,
}

impl LstmCells {
    /// Made-up pre-activations in `[-2, 2)`, biases and cell states.
    pub fn new(level: SimdLevel, rows: usize, hidden: usize) -> Self {
        check_sizes("LSTM cells", &[("rows", rows), ("hidden", hidden)]);
        Self {
            level,
            rows,
            hidden,
            acc: values(rows * 4 * hidden, 3)
                .iter()
                .map(|v| 4.0 * v)
                .collect(),
            bias: values(4 * hidden, 4),
            c: values(rows * hidden, 5),
            out: vec![0.0; rows * hidden],
        }
    }

    /// One update of every row: the cell states in place, `h` to [`LstmCells::output`].
    pub fn run(&mut self) {
        dispatch(self.level, CellsOnce { cells: self });
    }

    /// `[rows, hidden]`: the last update's `h`.
    pub fn output(&self) -> &[f32] {
        &self.out
    }

    /// The cell states after the updates so far.
    pub fn cell_state(&self) -> &[f32] {
        &self.c
    }

    /// Units updated per run.
    pub fn units(&self) -> usize {
        self.rows * self.hidden
    }
}

struct CellsOnce<'a> {
    cells: &'a mut LstmCells,
}

impl WithSimd for CellsOnce<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, _simd: S) {
        let LstmCells {
            rows,
            hidden,
            acc,
            bias,
            c,
            out,
            ..
        } = self.cells;
        let (rows, h) = (*rows, *hidden);
        let lanes = S::F32_LANES;
        for r in 0..rows {
            let acc = &acc[r * 4 * h..(r + 1) * 4 * h];
            let c = &mut c[r * h..(r + 1) * h];
            let out = &mut out[r * h..(r + 1) * h];
            for lo in (0..h).step_by(lanes) {
                let n = lanes.min(h - lo);
                let units = cell::Units {
                    h,
                    lo,
                    n,
                    acc: core::array::from_fn(|g| &acc[g * h + lo..][..n]),
                    skip: None,
                    bias,
                    gates: None,
                    out: &mut *out,
                };
                // The forward cells run as functions at the level (Note [Activations]).
                match has_fma::<S>() {
                    true => cell::lstm_forward::<f32, false, true>(units, c),
                    false => cell::lstm_forward::<f32, false, false>(units, c),
                }
            }
        }
    }
}

/// The input projection of `rows` rows ahead (Note [Input projection]): `x · W^T` plus the
/// biases, `W` `[n, k]`, in blocks of `block_rows` rows (a block of steps): as the kernel
/// runs it ([`Projection::run`]: `W` packed once, each block through the packed kernel), or
/// through the `gemm` crate as it did until 2026-12-06 ([`Projection::run_gemm`]).
pub struct Projection {
    x: Vec<f32>,
    w: Vec<f32>,
    bias: Vec<f32>,
    out: Vec<f32>,
    rows: usize,
    k: usize,
    n: usize,
}

impl Projection {
    /// Made-up rows, weights and biases.
    pub fn new(rows: usize, k: usize, n: usize) -> Self {
        check_sizes("projection", &[("rows", rows), ("k", k), ("n", n)]);
        Self {
            x: values(rows * k, 6),
            w: values(n * k, 7),
            bias: values(n, 8),
            out: vec![0.0; rows * n],
            rows,
            k,
            n,
        }
    }

    /// Every row projected through the `gemm` crate, `block_rows` rows per GEMM (biases
    /// filled, then the product added), each GEMM on `threads` threads.
    pub fn run_gemm(&mut self, block_rows: usize, threads: usize) {
        let (k, n) = (self.k, self.n);
        check_sizes(
            "projection",
            &[("block rows", block_rows), ("threads", threads)],
        );
        for (x, out) in self
            .x
            .chunks(block_rows * k)
            .zip(self.out.chunks_mut(block_rows * n))
        {
            let rows = x.len() / k;
            for row in out.chunks_exact_mut(n) {
                row.copy_from_slice(&self.bias);
            }
            gemm(
                MatMut::rows(out, rows, n, n),
                true,
                Mat::rows(x, rows, k, k),
                Mat::rows(&self.w, n, k, k).t(),
                threads,
            );
        }
    }

    /// Every row projected as the kernel does (Note [Projection through the packed kernel]
    /// in `super::projection`) on the calling thread: `W` packed once per run
    /// ([`Packed::transposed`], chunked for this CPU), then `block_rows` rows at a time
    /// through the packed kernel, at a SIMD level.
    pub fn run(&mut self, level: SimdLevel, block_rows: usize) {
        let (k, n) = (self.k, self.n);
        check_sizes("projection", &[("block rows", block_rows)]);
        let packed = Packed::transposed(level, &self.w, k, n).blocked(ForcedChunks::current());
        let mut lhs = vec![0.0; packed.lhs_len(block_rows.min(self.rows))];
        for (x, out) in self
            .x
            .chunks(block_rows * k)
            .zip(self.out.chunks_mut(block_rows * n))
        {
            let rows = x.len() / k;
            let len = packed.lhs_len(rows);
            dispatch(
                level,
                ProjectRows {
                    packed: &packed,
                    rows,
                    row: |r: usize| &x[r * k..(r + 1) * k],
                    bias: &self.bias,
                    lhs: &mut lhs[..len],
                    out,
                },
            );
        }
    }

    /// `[rows, n]`.
    pub fn output(&self) -> &[f32] {
        &self.out
    }

    /// Floating-point operations of one run.
    pub fn flops(&self) -> f64 {
        2.0 * (self.rows * self.n * self.k) as f64
    }
}

/// The backward's weight gradients of an LSTM layer over `rows` rows (all steps of a
/// batch), as the kernel runs them (Note [Weight gradients by rows] in `super::backward`):
/// `dW_ih = dG^T · x` (`[4·hidden, k]`) and `dW_hh = dG^T · h_prev` (`[4·hidden, hidden]`),
/// `dG` the first `4·hidden` columns of gate rows `5·hidden` wide (the reserve's LSTM rows).
pub struct WeightGrads {
    gates: Vec<f32>,
    x: Vec<f32>,
    h_prev: Vec<f32>,
    dw: Vec<f32>,
    rows: usize,
    hidden: usize,
    k: usize,
}

impl WeightGrads {
    /// Made-up gate gradients, inputs and previous states.
    pub fn new(rows: usize, hidden: usize, k: usize) -> Self {
        check_sizes(
            "weight gradients",
            &[("rows", rows), ("hidden", hidden), ("k", k)],
        );
        Self {
            gates: values(rows * 5 * hidden, 9),
            x: values(rows * k, 10),
            h_prev: values(rows * hidden, 11),
            dw: vec![0.0; 4 * hidden * (k + hidden)],
            rows,
            hidden,
            k,
        }
    }

    /// Both gradients on `threads` threads of rayon's pool, into the part's buffer, or
    /// into a new one (`fresh`: memory the allocator may have just mapped, as a call's
    /// gradient is), which then replaces it.
    pub fn run(&mut self, threads: usize, fresh: bool) {
        check_sizes("weight gradients", &[("threads", threads)]);
        let (rows, h, k) = (self.rows, self.hidden, self.k);
        let mut fresh_dw = match fresh {
            true => vec![0.0; self.dw.len()],
            false => Vec::new(),
        };
        let dw = match fresh {
            true => &mut fresh_dw[..],
            false => &mut self.dw[..],
        };
        let (dw_ih, dw_hh) = dw.split_at_mut(4 * h * k);
        let tasks = vec![
            WeightGemm {
                dst: dw_ih,
                col: 0,
                len: 4 * h,
                src: &self.x,
                n: k,
            },
            WeightGemm {
                dst: dw_hh,
                col: 0,
                len: 4 * h,
                src: &self.h_prev,
                n: h,
            },
        ];
        weight_gemms(&self.gates, rows, 5 * h, tasks, threads);
        if fresh {
            self.dw = fresh_dw;
        }
    }

    /// `[4·hidden, k + hidden]`: `dW_ih`'s rows, then `dW_hh`'s.
    pub fn output(&self) -> &[f32] {
        &self.dw
    }

    /// Floating-point operations of one run.
    pub fn flops(&self) -> f64 {
        2.0 * (self.rows * 4 * self.hidden * (self.k + self.hidden)) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(got: f32, want: f64, what: &str) {
        assert!(
            (f64::from(got) - want).abs() <= 1e-4 * want.abs().max(1.0),
            "{what}: expected {want}, got {got}"
        );
    }

    /// The product at every level, with and without chunks, tile remainders and a last
    /// panel that is not full, against a plain product in `f64`.
    #[test]
    fn step_product_is_the_product() {
        for level in SimdLevel::available() {
            for (rows, hidden, k, chunk) in [(7, 20, 13, None), (16, 32, 40, Some(5))] {
                let mut p = StepProduct::new(level, rows, hidden, k, chunk);
                let w = values(4 * hidden * k, 1);
                p.run();
                for r in 0..rows {
                    for col in 0..4 * hidden {
                        let want: f64 = (0..k)
                            .map(|i| f64::from(p.x[r * k + i]) * f64::from(w[col * k + i]))
                            .sum();
                        close(p.output()[r * 4 * hidden + col], want, "product");
                    }
                }
            }
        }
    }

    /// The cells at every level against the LSTM update in `f64`.
    #[test]
    fn lstm_cells_are_the_update() {
        for level in SimdLevel::available() {
            let (rows, h) = (3, 21);
            let mut cells = LstmCells::new(level, rows, h);
            let c0 = cells.c.clone();
            cells.run();
            let sig = |x: f64| 1.0 / (1.0 + (-x).exp());
            for r in 0..rows {
                for u in 0..h {
                    let pre = |g: usize| {
                        f64::from(cells.acc[r * 4 * h + g * h + u])
                            + f64::from(cells.bias[g * h + u])
                    };
                    let (i, f, g, o) = (sig(pre(0)), sig(pre(1)), pre(2).tanh(), sig(pre(3)));
                    let c = f * f64::from(c0[r * h + u]) + i * g;
                    close(cells.cell_state()[r * h + u], c, "cell state");
                    close(cells.output()[r * h + u], o * c.tanh(), "h");
                }
            }
        }
    }

    /// The weight gradients on one and three threads, into the same and a fresh buffer,
    /// against plain products.
    #[test]
    fn weight_grads_are_the_products() {
        // 2^17 multiply-adds or more: three threads split them.
        let (rows, h, k) = (130, 24, 20);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .expect("a pool of 3 threads");
        for (threads, fresh) in [(1, false), (3, false), (3, true)] {
            let mut w = WeightGrads::new(rows, h, k);
            pool.install(|| w.run(threads, fresh));
            let check = |src: &[f32], n: usize, offset: usize| {
                for g in 0..4 * h {
                    for c in 0..n {
                        let want: f64 = (0..rows)
                            .map(|r| f64::from(w.gates[r * 5 * h + g]) * f64::from(src[r * n + c]))
                            .sum();
                        close(w.output()[offset + g * n + c], want, "weight gradient");
                    }
                }
            };
            check(&w.x, k, 0);
            check(&w.h_prev, h, 4 * h * k);
        }
    }

    /// The projection in blocks, through the packed kernel at every level and through the
    /// `gemm` crate on one and two threads, against a plain product.
    #[test]
    fn projection_is_bias_plus_product() {
        let (rows, k, n) = (37, 11, 19);
        let runs = SimdLevel::available()
            .into_iter()
            .flat_map(|level| [(5, None, Some(level)), (37, None, Some(level))])
            .chain([(5, Some(1), None), (37, Some(2), None), (8, Some(2), None)]);
        for (block, threads, level) in runs {
            let mut p = Projection::new(rows, k, n);
            match (threads, level) {
                (Some(threads), _) => p.run_gemm(block, threads),
                (None, Some(level)) => p.run(level, block),
                (None, None) => unreachable!("a way to run it"),
            }
            for r in 0..rows {
                for col in 0..n {
                    let want: f64 = f64::from(p.bias[col])
                        + (0..k)
                            .map(|i| f64::from(p.x[r * k + i]) * f64::from(p.w[col * k + i]))
                            .sum::<f64>();
                    close(p.output()[r * n + col], want, "projection");
                }
            }
        }
    }
}
