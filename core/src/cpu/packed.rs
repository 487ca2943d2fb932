//! The recurrent weights packed once per call, and the register-blocked kernel that
//! multiplies a step's states by them.
//!
//! # Note [Packed weights]
//!
//! A step's recurrent product is `acc = h · W_hh^T`: `[B, P] · [P, G·H]`, the same `W_hh`
//! at every step of a call. A general GEMM re-lays out (packs) its operands on every call,
//! so a step would pay for reading and rewriting all of `W_hh` before its multiply-adds; on
//! AVX-512, where the multiply-adds are fast, that packing took as long as the product.
//! Here `W_hh` is packed once per call (per layer and direction), in the order the kernel
//! streams it:
//!
//! - a *panel* holds `U` consecutive hidden units of every gate: `U = L` (the SIMD level's
//!   lanes) for LSTM and GRU, `4L` for the one-gate RNNs, so that a panel is `V = 4` (LSTM,
//!   RNN) or `3` (GRU) vectors wide;
//! - inside a panel, for each `k < P`, the `V` vectors of `W_hh[g·H + u, k]` (gate `g`, unit
//!   `u` of the panel), one after the other: the kernel reads a panel front to back;
//! - units past `H` in the last panel are zero.
//!
//! So one tile of the product, `MR` rows of `h` times one panel, holds every gate of `U`
//! units: the cell update of those units needs nothing else, and runs right after the tile
//! while its results are in registers and L1 (Note [Fused step] in `super::forward`).
//!
//! The backward's product `dg · W_hh` (`[B, G·H] · [G·H, P]`) reads `W_hh` row by row, which
//! is its natural order; it is packed the same way with the roles of rows and columns
//! swapped (panels of `V·L` columns of `W_hh`, `V = 4`), which also pads `P` to whole vectors.
//! The input projection ahead reads `W_ih` the same way, as plain columns of `W_ih^T`
//! (`Packed::transposed`, Note [Projection through the packed kernel] in
//! `super::projection`).
//!
//! The tile is `MR × V` vectors of accumulators, `MR` as large as the level's registers
//! allow (AVX-512, 32 registers: `MR = 6` for `V = 4`, `8` for `V = 3`; AVX2, 16 registers:
//! `3` and `4`), and each `k` loads `V` vectors of the panel and broadcasts `MR` values of
//! `h`. The kernel is safe Rust over pulp's vector types: slices of them are plain memory
//! (`pulp`'s vectors have the alignment of their lanes), and every index is checked or
//! proven in bounds by the slicing before the loop.

use pulp::Simd;

use super::aligned::Aligned;
use super::float::Float;
use super::gemm::prefetch_l2;
use super::projection::{CacheSizes, ForcedChunks};
use super::recycle::{Kept, Scratch};
use super::simd::{dispatch, SimdLevel};
use super::split::Panels;

/// An element type with SIMD vectors at every level: `f32` or `f64`.
pub trait Lane: Float + Kept {
    /// The vector of `S`.
    type V<S: Simd>: Copy;

    /// Lanes of `S`'s vector.
    fn lanes<S: Simd>() -> usize;

    /// `x` in every lane.
    fn splat<S: Simd>(simd: S, x: Self) -> Self::V<S>;

    /// `a · b + c`, fused where the level has FMA.
    fn fma<S: Simd>(simd: S, a: Self::V<S>, b: Self::V<S>, c: Self::V<S>) -> Self::V<S>;

    /// `a + b`.
    fn add_v<S: Simd>(simd: S, a: Self::V<S>, b: Self::V<S>) -> Self::V<S>;

    /// `values` as vectors (the trailing elements that do not fill one are left out).
    fn vectors<S: Simd>(values: &[Self]) -> &[Self::V<S>];

    /// `values` as vectors (the trailing elements that do not fill one are left out).
    fn vectors_mut<S: Simd>(values: &mut [Self]) -> &mut [Self::V<S>];
}

impl Lane for f32 {
    type V<S: Simd> = S::f32s;

    #[inline(always)]
    fn lanes<S: Simd>() -> usize {
        S::F32_LANES
    }

    #[inline(always)]
    fn splat<S: Simd>(simd: S, x: Self) -> S::f32s {
        simd.splat_f32s(x)
    }

    #[inline(always)]
    fn fma<S: Simd>(simd: S, a: S::f32s, b: S::f32s, c: S::f32s) -> S::f32s {
        simd.mul_add_e_f32s(a, b, c)
    }

    #[inline(always)]
    fn add_v<S: Simd>(simd: S, a: S::f32s, b: S::f32s) -> S::f32s {
        simd.add_f32s(a, b)
    }

    #[inline(always)]
    fn vectors<S: Simd>(values: &[Self]) -> &[S::f32s] {
        S::as_simd_f32s(values).0
    }

    #[inline(always)]
    fn vectors_mut<S: Simd>(values: &mut [Self]) -> &mut [S::f32s] {
        S::as_mut_simd_f32s(values).0
    }
}

impl Lane for f64 {
    type V<S: Simd> = S::f64s;

    #[inline(always)]
    fn lanes<S: Simd>() -> usize {
        S::F64_LANES
    }

    #[inline(always)]
    fn splat<S: Simd>(simd: S, x: Self) -> S::f64s {
        simd.splat_f64s(x)
    }

    #[inline(always)]
    fn fma<S: Simd>(simd: S, a: S::f64s, b: S::f64s, c: S::f64s) -> S::f64s {
        simd.mul_add_e_f64s(a, b, c)
    }

    #[inline(always)]
    fn add_v<S: Simd>(simd: S, a: S::f64s, b: S::f64s) -> S::f64s {
        simd.add_f64s(a, b)
    }

    #[inline(always)]
    fn vectors<S: Simd>(values: &[Self]) -> &[S::f64s] {
        S::as_simd_f64s(values).0
    }

    #[inline(always)]
    fn vectors_mut<S: Simd>(values: &mut [Self]) -> &mut [S::f64s] {
        S::as_mut_simd_f64s(values).0
    }
}

/// Lanes of `T`'s vector at `level`.
pub(crate) fn lanes<T: Lane>(level: SimdLevel) -> usize {
    struct Lanes<T>(core::marker::PhantomData<T>);
    impl<T: Lane> pulp::WithSimd for Lanes<T> {
        type Output = usize;
        #[inline(always)]
        fn with_simd<S: Simd>(self, _simd: S) -> usize {
            T::lanes::<S>()
        }
    }
    dispatch(level, Lanes::<T>(core::marker::PhantomData))
}

/// Rows of a tile of the microkernel at `level` ([`Packed::tiles`]): 6 with 32 vector
/// registers (AVX-512), 3 with 16.
pub(crate) fn tile_rows(level: SimdLevel) -> usize {
    struct Rows;
    impl pulp::WithSimd for Rows {
        type Output = usize;
        #[inline(always)]
        fn with_simd<S: Simd>(self, _simd: S) -> usize {
            Packed::<f32>::tile_rows::<S>()
        }
    }
    dispatch(level, Rows)
}

/// Packed elements from which [`Packed`]'s panels are written in parallel.
const PARALLEL_FILL: usize = 1 << 16;

/// Rows of a tile at most: the most any level uses (AVX-512).
pub(crate) const MAX_ROWS: usize = 6;

/// Accumulator vectors of one row of a tile.
pub(crate) const SLOTS: usize = 4;

/// Lanes of a vector at most (`f32` on AVX-512).
const MAX_LANES: usize = 16;

/// Elements kept after the laid-out rows of `rows` rows: one tile's results, or with the
/// reduction in chunks (Note [Reduction chunks]) every tile's accumulators of a panel.
fn scratch_len(rows: usize) -> usize {
    rows.max(MAX_ROWS) * SLOTS * MAX_LANES
}

/// How [`Packed::ready_rows`] got a step product's rows ready for [`Packed::tiles_ready`].
#[derive(Debug, Clone, Copy)]
pub(crate) enum Ready<'r, T> {
    /// One row, read where it is (Note [One row in place], at `Packed::tiles_of_row`).
    InPlace(&'r [T]),
    /// This many rows, laid out in the caller's buffer.
    LaidOut(usize),
}

/// A product `[rows, ka + kb] · M^T`, its right operand packed into panels for
/// [`Packed::tiles`] (Note [Packed weights]).
///
/// Each row of the left operand comes in two segments, `a` (`ka` values: a step's input)
/// and `b` (`kb` values: the state entering it); `M` is packed the same way, the `ka`
/// rows of segment `a` first. Each `k` of a segment adds 4 vectors of the panel (3 for
/// GRU) into the row's [`SLOTS`] accumulators, vector `v` into slot `v`, except that GRU
/// keeps the input's and the state's part of its `n` gate apart (vector 2 of segment `b`
/// goes to slot 3).
#[derive(Debug, Clone)]
pub(crate) struct Packed<T> {
    /// Kept for the next call's packing when dropped (Note [Scratch reuse] in
    /// `super::recycle`).
    data: Scratch<T>,
    /// The level it was packed for (its vector width).
    pub(crate) level: SimdLevel,
    /// Lanes `L` of one vector.
    pub(crate) lanes: usize,
    /// Reduction length of each segment.
    pub(crate) ka: usize,
    pub(crate) kb: usize,
    /// Output columns of the product, and of each panel.
    pub(crate) n: usize,
    panels: usize,
    layout: PanelLayout,
    /// Reduction steps per chunk (Note [Reduction chunks]); `usize::MAX`: one chunk.
    pub(crate) k_chunk: usize,
    /// Whether each chunk's tiles ask for the next chunk's weights ahead (Note [Next chunk
    /// ahead]).
    pub(crate) prefetch: bool,
    /// Whether a single-row tile sums its even and odd `k` apart (`segment`): not for the
    /// input projection, whose rows must sum alike in whatever tile they land.
    pairs: bool,
}

/// Which output each accumulator lane of a panel computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PanelLayout {
    /// The step's gates (Note [Packed weights]): panel `j` covers units `j·U ..` (`U = L`
    /// for LSTM and GRU, `4L` for the one-gate RNNs). LSTM: slot `g` is gate `g`; GRU:
    /// slots `r, z, n` of the input and `n` of the state; RNN: slot `q` is units
    /// `j·U + q·L ..`.
    Gates { gates: usize, hidden: usize },
    /// Plain columns: slot `v` of panel `j` holds columns `(j·4 + v)·L ..`.
    Columns,
}

/// Side of the square tiles in which [`Packed::fill`] transposes: a tile of `T` values is
/// at most 2 KiB (`f64`), so the tile and the lines it reads and writes stay in L1.
const FILL_TILE: usize = 16;

/// Where one segment's values come from: element `(column, k)` of `M` at
/// `data[column · col_stride + k · k_stride]`.
#[derive(Clone, Copy)]
struct Source<'a, T> {
    data: &'a [T],
    col_stride: usize,
    k_stride: usize,
}

/// A run of a panel row's slots: `len` slots from `slot`, holding columns `first ..
/// first + len` of `M` (zeros where `first` is `None`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Run {
    slot: usize,
    first: Option<usize>,
    len: usize,
}

/// `columns` cut into runs of consecutive columns (and of zeros), each at most `max` long.
fn runs(columns: &[Option<usize>], max: usize) -> Vec<Run> {
    let mut out: Vec<Run> = Vec::new();
    for (slot, &col) in columns.iter().enumerate() {
        if let Some(last) = out.last_mut() {
            let next = match (last.first, col) {
                (None, None) => true,
                (Some(f), Some(c)) => c == f + last.len,
                _ => false,
            };
            if next && last.len < max {
                last.len += 1;
                continue;
            }
        }
        out.push(Run {
            slot,
            first: col,
            len: 1,
        });
    }
    out
}

/// `dst = src` (same length), inlined: the runs [`Source::write`] copies are a few cache
/// lines, too short for a call to `memcpy` to pay (calls took half of the packing's time).
/// Whole blocks of [`FILL_TILE`] are copied as arrays, which the compiler emits as vector
/// moves (a plain loop it turns back into a `memcpy` call).
#[inline(always)]
fn copy<T: Copy>(dst: &mut [T], src: &[T]) {
    let mut d = dst.chunks_exact_mut(FILL_TILE);
    let mut s = src.chunks_exact(FILL_TILE);
    for (d, s) in d.by_ref().zip(s.by_ref()) {
        let d: &mut [T; FILL_TILE] = d.try_into().expect("chunks of FILL_TILE");
        *d = s.try_into().expect("chunks of FILL_TILE");
    }
    for (d, s) in d.into_remainder().iter_mut().zip(s.remainder()) {
        *d = *s;
    }
}

impl<'a, T: Lane> Source<'a, T> {
    /// `M^T` stored row-major with rows of `k` elements (a column of `M` is contiguous).
    fn rows(data: &'a [T], k: usize) -> Self {
        Self {
            data,
            col_stride: k,
            k_stride: 1,
        }
    }

    /// `M` stored row-major with rows of `n` elements.
    fn columns(data: &'a [T], n: usize) -> Self {
        Self {
            data,
            col_stride: 1,
            k_stride: n,
        }
    }

    /// Writes `buf` (`[k][width]`): element `s` of row `k` is column `columns[s]` of `M`
    /// (zero where `None`). The columns of a panel come in runs of consecutive columns of
    /// `M` (a vector's lanes are consecutive units), and each run is written whole:
    ///
    /// - `M` row-major (`col_stride == 1`): a run of a panel row is a run of a row of `M`,
    ///   one copy;
    /// - `M^T` row-major (`k_stride == 1`): a run is a transpose. It goes in square tiles of
    ///   [`FILL_TILE`]: the tile's columns are read as contiguous runs of `k` (vector loads),
    ///   and written as contiguous runs of the panel's rows, so neither side walks memory
    ///   with a large stride (Note [Packed weights]: a training step packs its weights on
    ///   its critical path).
    fn write(self, buf: &mut [T], columns: &[Option<usize>], width: usize) {
        let width = width.max(1);
        let k = buf.len() / width;
        // A transposed run fills at most one tile's lines.
        let max = if self.col_stride == 1 {
            usize::MAX
        } else {
            FILL_TILE
        };
        for run in runs(columns, max) {
            let (s, m) = (run.slot, run.len);
            match run.first {
                None => {
                    for row in buf.chunks_exact_mut(width) {
                        row[s..s + m].fill(T::ZERO);
                    }
                }
                Some(c) if self.col_stride == 1 => {
                    for (kk, row) in buf.chunks_exact_mut(width).enumerate() {
                        let start = c + kk * self.k_stride;
                        copy(&mut row[s..s + m], &self.data[start..start + m]);
                    }
                }
                // Both constructors set one stride to 1, so here `k_stride == 1`.
                Some(c) => {
                    debug_assert_eq!(self.k_stride, 1, "a source has one stride of 1");
                    let mut tile = [[T::ZERO; FILL_TILE]; FILL_TILE];
                    for k0 in (0..k).step_by(FILL_TILE) {
                        let kt = FILL_TILE.min(k - k0);
                        for (l, line) in tile[..m].iter_mut().enumerate() {
                            let start = (c + l) * self.col_stride + k0;
                            copy(&mut line[..kt], &self.data[start..start + kt]);
                        }
                        let rows = buf[k0 * width..(k0 + kt) * width].chunks_exact_mut(width);
                        for (kk, row) in rows.enumerate() {
                            for (d, line) in row[s..s + m].iter_mut().zip(&tile) {
                                *d = line[kk];
                            }
                        }
                    }
                }
            }
        }
    }
}

impl<T: Lane> Packed<T> {
    /// Packs `[W_ih | W_hh]` for a step's pre-activations `x_t · W_ih^T + h · W_hh^T`
    /// (Note [Packed weights]): `w_ih` `[G·H, I]` (absent with skip input), `w_hh`
    /// `[G·H, P]`, both row-major.
    pub(crate) fn gates(
        level: SimdLevel,
        w_ih: Option<(&[T], usize)>,
        w_hh: &[T],
        gates: usize,
        hidden: usize,
        p: usize,
    ) -> Self {
        let lanes = lanes::<T>(level);
        let per_panel = if gates == 1 { SLOTS * lanes } else { lanes };
        let (w_in, ka) = w_ih.unwrap_or((&[], 0));
        let layout = PanelLayout::Gates { gates, hidden };
        let mut packed = Self {
            data: Scratch::default(),
            level,
            lanes,
            ka,
            kb: p,
            n: gates * hidden,
            panels: hidden.div_ceil(per_panel),
            layout,
            k_chunk: usize::MAX,
            prefetch: false,
            pairs: true,
        };
        packed.fill([Source::rows(w_in, ka), Source::rows(w_hh, p)]);
        packed
    }

    /// Packs `W` (`[k, n]` row-major) for `rows · W`: plain columns, one segment (`b`, `k`
    /// long).
    pub(crate) fn columns(level: SimdLevel, w: &[T], k: usize, n: usize) -> Self {
        Self::plain(level, k, n, Source::columns(w, n), true)
    }

    /// Packs `M` given as `M^T` (`w`, `[n, k]` row-major: the input weights `W_ih`,
    /// `[G·H, I]`) for `rows · M^T`: plain columns, one segment (`b`, `k` long). The input
    /// projection's weights (Note [Projection through the packed kernel] in
    /// `super::projection`), whose single-row tiles sum as taller ones do (`pairs`).
    pub(crate) fn transposed(level: SimdLevel, w: &[T], k: usize, n: usize) -> Self {
        Self::plain(level, k, n, Source::rows(w, k), false)
    }

    /// Plain columns of `M` (`[k, n]`) from `source`, one segment (`b`, `k` long).
    fn plain(level: SimdLevel, k: usize, n: usize, source: Source<'_, T>, pairs: bool) -> Self {
        let lanes = lanes::<T>(level);
        let mut packed = Self {
            data: Scratch::default(),
            level,
            lanes,
            ka: 0,
            kb: k,
            n,
            panels: n.div_ceil(SLOTS * lanes),
            layout: PanelLayout::Columns,
            k_chunk: usize::MAX,
            prefetch: false,
            pairs,
        };
        packed.fill([Source::rows(&[], 0), source]);
        packed
    }

    /// The same weights, the product run in chunks of `k_chunk` reduction steps (Note
    /// [Reduction chunks]; `usize::MAX` or anything at least `ka + kb`: one chunk).
    pub(crate) fn with_k_chunk(mut self, k_chunk: usize) -> Self {
        self.k_chunk = k_chunk.max(1);
        self
    }

    /// Whether the chunked product asks for the next chunk ahead (Note [Next chunk
    /// ahead]).
    pub(crate) fn with_prefetch(mut self, prefetch: bool) -> Self {
        self.prefetch = prefetch;
        self
    }

    /// The same weights, the product chunked for this CPU's L1 and the next chunk asked
    /// for ahead when they outgrow its L2, or as forced (`forced`, captured by the plan:
    /// Notes [Reduction chunks] and [Next chunk ahead]).
    pub(crate) fn blocked(self, forced: ForcedChunks) -> Self {
        let cache = CacheSizes::detected();
        let kc = super::projection::k_chunk(forced.k_chunk, self.level, self.bytes_per_k(), cache);
        let prefetch = super::projection::prefetch(forced.prefetch, self.bytes(), cache);
        self.with_k_chunk(kc).with_prefetch(prefetch)
    }

    /// Whether a product of `rows` rows asks for each next chunk ahead: where it runs in
    /// chunks, is told to ([`Packed::with_prefetch`]) and has more than one row (Note [Next
    /// chunk ahead]).
    pub(crate) fn asks_ahead(&self, rows: usize) -> bool {
        self.prefetch && rows > 1 && self.k_chunk < self.ka + self.kb
    }

    /// Bytes of the packed elements.
    pub(crate) fn bytes(&self) -> usize {
        self.data.len() * core::mem::size_of::<T>()
    }

    /// Bytes of one reduction step of a panel: what a chunk of `k` steps reads.
    pub(crate) fn bytes_per_k(&self) -> usize {
        let (va, vb) = self.vectors();
        va.max(vb) * self.lanes * core::mem::size_of::<T>()
    }

    /// The elements of the chunk after the one of panel `j` that ends at reduction step
    /// `k1` of segment `b` (`in_b`) or `a`, taken as `steps` steps long: the rest of that
    /// segment, else the next segment or panel (they follow in `data`), else the first
    /// panel's, which the next product starts with (Note [Next chunk ahead]).
    fn next_chunk(&self, j: usize, in_b: bool, k1: usize, steps: usize) -> &[T] {
        let (va, vb) = self.vectors();
        let (v, base) = match in_b {
            false => (va, 0),
            true => (vb, self.ka * va * self.lanes),
        };
        let start = j * self.panel_len() + base + k1 * v * self.lanes;
        let start = if start < self.data.len() { start } else { 0 };
        let end = (start + steps * v * self.lanes).min(self.data.len());
        &self.data[start..end]
    }

    /// Vectors per `k` of each segment.
    fn vectors(&self) -> (usize, usize) {
        match self.layout {
            PanelLayout::Gates { gates: 3, .. } => (3, 3),
            _ => (SLOTS, SLOTS),
        }
    }

    /// Elements of one panel.
    fn panel_len(&self) -> usize {
        let (va, vb) = self.vectors();
        (self.ka * va + self.kb * vb) * self.lanes
    }

    /// Writes every panel from `sources` (segment `a`, then `b`), in the panel's own order,
    /// zeros past `M`'s last column: every element of the buffer, which comes from the
    /// scratch list with stale contents. Panels are independent: when there are more than
    /// [`PARALLEL_FILL`] elements, they are written on rayon's pool (a call packs before
    /// its scans start, so this is time every thread would otherwise wait).
    ///
    /// A panel's `k`-th row holds `V·L` columns of `M` side by side: a transpose in tiles
    /// when a column of `M` is contiguous in memory (the gate weights, `[G·H, K]`
    /// row-major), a copy of runs when a row is (`Source::write`).
    fn fill(&mut self, sources: [Source<'_, T>; 2]) {
        let (va, vb) = self.vectors();
        let (lanes, panel_len) = (self.lanes, self.panel_len());
        let mut data = Scratch::new(self.panels * panel_len);
        let this = &*self;
        let write = |(j, panel): (usize, &mut [T])| {
            let mut columns = Vec::with_capacity(SLOTS * lanes);
            let (seg_a, seg_b) = panel.split_at_mut(this.ka * va * lanes);
            for ((buf, vectors), src) in [(seg_a, va), (seg_b, vb)].into_iter().zip(sources) {
                columns.clear();
                columns
                    .extend((0..vectors * lanes).map(|i| this.column_of(j, i / lanes, i % lanes)));
                src.write(buf, &columns, vectors * lanes);
            }
        };
        if data.len() >= PARALLEL_FILL && rayon::current_num_threads() > 1 {
            use rayon::prelude::*;
            data.par_chunks_mut(panel_len.max(1))
                .take(self.panels)
                .enumerate()
                .for_each(write);
        } else {
            data.chunks_mut(panel_len.max(1))
                .take(self.panels)
                .enumerate()
                .for_each(write);
        }
        self.data = data;
    }

    /// What slot `slot`, lane `lane` of panel `j` accumulates: the column of `M`, and
    /// which segments (`a`, `b`) add into it. `None` past the last column.
    #[cfg(test)]
    pub(crate) fn slot_output(
        &self,
        j: usize,
        slot: usize,
        lane: usize,
    ) -> Option<(usize, [bool; 2])> {
        match (self.layout, slot) {
            // GRU: slot 2 is the input's part of `n`, slot 3 the state's.
            (PanelLayout::Gates { gates: 3, .. }, 2) => {
                Some((self.column_of(j, 2, lane)?, [true, false]))
            }
            (PanelLayout::Gates { gates: 3, .. }, 3) => {
                Some((self.column_of(j, 2, lane)?, [false, true]))
            }
            _ => Some((self.column_of(j, slot, lane)?, [true, true])),
        }
    }

    /// The column of `M` that lane `lane` of vector `v` of panel `j` holds, if any.
    fn column_of(&self, j: usize, v: usize, lane: usize) -> Option<usize> {
        match self.layout {
            PanelLayout::Gates { gates: 1, hidden } => {
                let unit = (j * SLOTS + v) * self.lanes + lane;
                (unit < hidden).then_some(unit)
            }
            PanelLayout::Gates { gates, hidden } => {
                let unit = j * self.lanes + lane;
                (unit < hidden && v < gates).then_some(v * hidden + unit)
            }
            PanelLayout::Columns => {
                let col = (j * SLOTS + v) * self.lanes + lane;
                (col < self.n).then_some(col)
            }
        }
    }

    /// Panels of the packed matrix.
    pub(crate) fn panels(&self) -> usize {
        self.panels
    }

    /// Units (for [`Packed::gates`]) or columns (for [`Packed::columns`]) per panel.
    pub(crate) fn per_panel(&self) -> usize {
        match self.layout {
            PanelLayout::Gates { gates: 3 | 4, .. } => self.lanes,
            _ => SLOTS * self.lanes,
        }
    }

    /// Rows of a tile at `S`'s register count: `MR × 4` accumulators, 4 vectors of the
    /// panel and a broadcast in registers.
    #[inline(always)]
    fn tile_rows<S: Simd>() -> usize {
        if S::REGISTER_COUNT >= 32 {
            6
        } else {
            3
        }
    }

    /// Lays `rows` rows out for [`Packed::tiles`] into `lhs` (followed by room for one
    /// tile's results): row `r`'s segments are
    /// `row(r)` = (`a`, at least `ka` long; `b`, at least `kb` long), block by block of the
    /// tile height, `k`-major inside a block (`[k][mr]`), so that the microkernel reads one
    /// stream of broadcasts instead of one pointer per row. `lhs` is reused across calls.
    ///
    /// # Panics
    ///
    /// If a segment is too short.
    #[inline(always)]
    pub(crate) fn lay_out_rows<'r, S: Simd>(
        &self,
        rows: usize,
        row: impl Fn(usize) -> (&'r [T], &'r [T]),
        lhs: &mut Aligned<T>,
    ) where
        T: 'r,
    {
        // Every element of the layout is written below; the tail is the tiles' scratch
        // (`tiles`). Resizing keeps the old contents: nothing is zeroed twice per step.
        lhs.resize(self.lhs_len(rows), T::ZERO);
        self.lay_out_into::<S>(rows, row, lhs);
    }

    /// Elements of the left operand of `rows` rows laid out for [`Packed::tiles`],
    /// followed by the tiles' scratch.
    pub(crate) fn lhs_len(&self, rows: usize) -> usize {
        rows * (self.ka + self.kb) + scratch_len(rows)
    }

    /// [`Packed::lay_out_rows`] into a buffer of exactly [`Packed::lhs_len`] elements.
    ///
    /// # Panics
    ///
    /// If a segment is too short, or `lhs` is not `lhs_len(rows)` long.
    #[inline(always)]
    pub(crate) fn lay_out_into<'r, S: Simd>(
        &self,
        rows: usize,
        row: impl Fn(usize) -> (&'r [T], &'r [T]),
        lhs: &mut [T],
    ) where
        T: 'r,
    {
        let rows_max = Self::tile_rows::<S>();
        let (ka, kb) = (self.ka, self.kb);
        let k = ka + kb;
        assert_eq!(
            lhs.len(),
            self.lhs_len(rows),
            "rows laid out for this product"
        );
        let mut first = 0;
        while first < rows {
            let mr = rows_max.min(rows - first);
            let block = &mut lhs[first * k..(first + mr) * k];
            let (block_a, block_b) = block.split_at_mut(ka * mr);
            macro_rules! block {
                ($mr:literal) => {{
                    let segments: [(&[T], &[T]); $mr] = core::array::from_fn(|r| row(first + r));
                    interleave::<T, $mr>(block_a, segments.map(|s| s.0), ka);
                    interleave::<T, $mr>(block_b, segments.map(|s| s.1), kb);
                }};
            }
            match mr {
                1 => block!(1),
                2 => block!(2),
                3 => block!(3),
                4 => block!(4),
                5 => block!(5),
                6 => block!(6),
                _ => unreachable!("a tile has at most 6 rows, got {mr}"),
            }
            first += mr;
        }
    }

    /// Computes the product of `rows` rows, laid out in `lhs` by
    /// [`Packed::lay_out_rows`], with `M^T`, one tile at a time, panel by panel (those
    /// `panels` claims: Note [A step over two threads] in `super::split`), and hands
    /// each tile to `epilogue(first_row, tile_rows, panel, values)`, where
    /// `values[r · 4L + s · L + lane]` is slot `s`, lane `lane` of row `first_row + r` (what
    /// that is: [`PanelLayout`]).
    ///
    /// Must run inside `dispatch(self.level, ..)`, with `simd` of that level.
    ///
    /// # Panics
    ///
    /// If `S` is not the level the weights were packed for, or `lhs` does not hold `rows`
    /// rows.
    #[inline(always)]
    pub(crate) fn tiles<S: Simd>(
        &self,
        simd: S,
        lhs: &mut [T],
        rows: usize,
        panels: Panels<'_>,
        epilogue: impl FnMut(usize, usize, usize, &[T]),
    ) {
        assert_eq!(
            lhs.len(),
            self.lhs_len(rows),
            "rows laid out for this product"
        );
        let (lhs, scratch) = lhs.split_at_mut(rows * (self.ka + self.kb));
        self.tiles_in::<S>(simd, lhs, scratch, rows, panels, epilogue)
    }

    /// Gets `rows` rows ready for [`Packed::tiles_ready`] (`row(r)` as for
    /// [`Packed::lay_out_rows`]): one row, where the weights have no `a` segment, is read
    /// where it is (Note [One row in place]: its `b` segment); other rows are laid out into
    /// `lhs`. The one place where a step product makes that choice, forward and backward.
    ///
    /// # Panics
    ///
    /// If a segment is too short.
    #[inline(always)]
    pub(crate) fn ready_rows<'r, S: Simd>(
        &self,
        rows: usize,
        row: impl Fn(usize) -> (&'r [T], &'r [T]),
        lhs: &mut Aligned<T>,
    ) -> Ready<'r, T>
    where
        T: 'r,
    {
        if rows == 1 && self.ka == 0 {
            return Ready::InPlace(row(0).1);
        }
        self.lay_out_rows::<S>(rows, row, lhs);
        Ready::LaidOut(rows)
    }

    /// [`Packed::tiles`] over the rows [`Packed::ready_rows`] got ready, `lhs` the buffer
    /// it was given.
    ///
    /// Must run inside `dispatch(self.level, ..)`, with `simd` of that level.
    #[inline(always)]
    pub(crate) fn tiles_ready<S: Simd>(
        &self,
        simd: S,
        ready: Ready<'_, T>,
        lhs: &mut Aligned<T>,
        epilogue: impl FnMut(usize, usize, usize, &[T]),
    ) {
        self.tiles_ready_of(simd, ready, lhs, Panels::All, epilogue)
    }

    /// [`Packed::tiles_ready`] over the panels `panels` claims (Note [A step over two
    /// threads] in `super::split`).
    #[inline(always)]
    pub(crate) fn tiles_ready_of<S: Simd>(
        &self,
        simd: S,
        ready: Ready<'_, T>,
        lhs: &mut Aligned<T>,
        panels: Panels<'_>,
        epilogue: impl FnMut(usize, usize, usize, &[T]),
    ) {
        match ready {
            Ready::InPlace(row) => self.tiles_of_row(simd, row, lhs, panels, epilogue),
            Ready::LaidOut(rows) => self.tiles(simd, lhs, rows, panels, epilogue),
        }
    }

    /// [`Packed::tiles`] for one row that has no `a` segment (`ka == 0`): the tile reads
    /// `row` where it is, and `scratch` (resized) holds only the tile's results.
    ///
    /// # Note [One row in place]
    ///
    /// A row laid out for a tile of one row is the row itself (`[k][1]`), so at batch 1 a
    /// step need not copy it: the forward's step product reads the state entering the
    /// step in place when the input is projected ahead (the weights have no `a` segment),
    /// and the backward's reads the gates' gradients in place. [`Packed::ready_rows`]
    /// makes that choice for both (and for the `product` part of `kernel_parts`). The sums
    /// are those of the row laid out, bit for bit (a test checks every level, layout and
    /// chunking). Measured on an AMD EPYC (Zen 4), the kernel alone in alternated
    /// processes (docs/BENCHMARKS.md, "one row in place"): the LSTM H32 B1 T10000 forward
    /// took 0.81–0.87× its time before on one and two threads, the GRU's 0.80–0.83×; more
    /// than the copy it saves, which was 6% of the scan's samples: the copy, the resize and
    /// the per-tile closure of the lay-out all sat on the step's serial path.
    ///
    /// # Panics
    ///
    /// As [`Packed::tiles`], or if the weights have an `a` segment or `row` is shorter
    /// than `kb`.
    #[inline(always)]
    fn tiles_of_row<S: Simd>(
        &self,
        simd: S,
        row: &[T],
        scratch: &mut Aligned<T>,
        panels: Panels<'_>,
        epilogue: impl FnMut(usize, usize, usize, &[T]),
    ) {
        assert_eq!(self.ka, 0, "a row read in place: expected no input segment");
        assert!(
            row.len() >= self.kb,
            "a row read in place: expected at least {} values, got {}",
            self.kb,
            row.len()
        );
        scratch.resize(scratch_len(1), T::ZERO);
        self.tiles_in::<S>(simd, &row[..self.kb], scratch, 1, panels, epilogue)
    }

    /// [`Packed::tiles`] with the rows laid out in `lhs` (exactly `rows` of them) and the
    /// tiles' scratch apart (at least `scratch_len(rows)`).
    ///
    /// # Panics
    ///
    /// As [`Packed::tiles`], or if `scratch` is too short.
    #[inline(always)]
    pub(crate) fn tiles_of<S: Simd>(
        &self,
        simd: S,
        lhs: &[T],
        scratch: &mut [T],
        rows: usize,
        epilogue: impl FnMut(usize, usize, usize, &[T]),
    ) {
        self.tiles_in::<S>(simd, lhs, scratch, rows, Panels::All, epilogue)
    }

    /// [`Packed::tiles_of`] over the panels `panels` claims, a share at a time.
    #[inline(always)]
    fn tiles_in<S: Simd>(
        &self,
        simd: S,
        lhs: &[T],
        scratch: &mut [T],
        rows: usize,
        panels: Panels<'_>,
        mut epilogue: impl FnMut(usize, usize, usize, &[T]),
    ) {
        assert_eq!(
            T::lanes::<S>(),
            self.lanes,
            "packed for {:?}, run at another level",
            self.level
        );
        assert!(self.lanes <= MAX_LANES);
        let rows_max = Self::tile_rows::<S>();
        let (va, _) = self.vectors();
        let (ka, kb, pairs) = (self.ka, self.kb, self.pairs);
        let k = ka + kb;
        assert_eq!(lhs.len(), rows * k, "rows laid out for this product");
        assert!(scratch.len() >= scratch_len(rows), "the tiles' scratch");
        let panel_len = self.panel_len();
        let split = ka * va * self.lanes;
        let width = SLOTS * self.lanes;
        if self.k_chunk < k {
            return self.tiles_chunked::<S>(simd, lhs, scratch, rows, panels, epilogue);
        }
        for j in panels.shares(self.panels).flatten() {
            let panel = &self.data[j * panel_len..(j + 1) * panel_len];
            let (pa, pb) = panel.split_at(split);
            let (pa, pb) = (T::vectors::<S>(pa), T::vectors::<S>(pb));
            let mut first = 0;
            while first < rows {
                let mr = rows_max.min(rows - first);
                let block = &lhs[first * k..(first + mr) * k];
                let out = &mut scratch[..mr * width];
                macro_rules! tile {
                    ($mr:literal, $v:literal, $split:literal) => {
                        tile::<S, T, $mr, $v, $split>(simd, block, pa, pb, ka, kb, out, pairs)
                    };
                }
                match (va, mr) {
                    (3, 1) => tile!(1, 3, true),
                    (3, 2) => tile!(2, 3, true),
                    (3, 3) => tile!(3, 3, true),
                    (3, 4) => tile!(4, 3, true),
                    (3, 5) => tile!(5, 3, true),
                    (3, _) => tile!(6, 3, true),
                    (_, 1) => tile!(1, 4, false),
                    (_, 2) => tile!(2, 4, false),
                    (_, 3) => tile!(3, 4, false),
                    (_, 4) => tile!(4, 4, false),
                    (_, 5) => tile!(5, 4, false),
                    (_, _) => tile!(6, 4, false),
                }
                epilogue(first, mr, j, out);
                first += mr;
            }
        }
    }

    /// [`Packed::tiles`] with the reduction in chunks of [`Packed::k_chunk`] steps.
    ///
    /// # Note [Reduction chunks]
    ///
    /// A panel is `(ka + kb) · V` vectors: 128 KiB for an LSTM at H = I = 256 in `f32`, more
    /// than a core's L1. Each tile of `MR` rows streams the whole panel, so with `nb` rows
    /// the panel comes from L2 `nb / MR` times per step. A core that retires two vector
    /// multiply-adds per cycle (Intel's server cores) needs the panel's vectors at twice
    /// the rate of one that retires one (Zen 4, double-pumped AVX-512), which is more than
    /// its L2 delivers. So, as a GEMM blocks its `k` loop, the reduction runs in chunks of
    /// `kc` steps whose slice of the panel fits in half the L1 (`kc = L1 / 2 / bytes per
    /// k`, from the L1 size the CPU reports): every tile of the panel runs the chunk,
    /// keeping its accumulators in a scratch area between chunks, and only after the last
    /// chunk does each tile's epilogue (the cell update) run. The sums are the same, in the
    /// same order except for single-row tiles (whose even and odd steps are summed apart
    /// within each chunk); the tests force chunks of a few steps at every level.
    ///
    /// Measured (docs/BENCHMARKS.md, "Reduction chunks"): on an Intel Xeon (Emerald Rapids
    /// class, AVX-512) the chunks made the LSTM H256 B32 forward 0.94× and the LSTM H512 B64
    /// forward 0.81× the time of one chunk; on an AMD EPYC (Zen 4), whose AVX-512
    /// multiply-adds are double-pumped (one per cycle), the LSTM rows were unchanged and the
    /// GRU forward 1.06×. On an AMD EPYC (Zen 5, family 1Ah), which retires two 512-bit
    /// multiply-adds per cycle as Intel's cores do, one chunk measured slightly faster on
    /// the forward rows and level in training (2 threads, kernel alone, medians of five
    /// alternated rounds: LSTM H256 B32 forward 0.95× the time with chunks, H512 B64 0.97×,
    /// GRU 0.96×, training 1.00–1.02×; docs/BENCHMARKS.md, "AVX2 tile, and one chunk on
    /// Zen 5"). So AVX-512 on AMD's cores (family 19h and later, read from CPUID:
    /// `projection::one_chunk_avx512`) runs one chunk, and every other level and CPU
    /// chunks (`projection::k_chunk`). Measured again on Zen 4 with the kernel of
    /// 2026-12-06 (docs/BENCHMARKS.md, "AMD EPYC (Zen 4): the version of 2026-12-06
    /// measured"), one chunk was still the fastest: chunks that fill half the L1 took
    /// 1.07× its time for the LSTM H256 B32 forward, 1.06× at H512 B64, 1.13× for the GRU,
    /// and chunks of 64 to 256 steps 1.00–1.03×.
    #[inline(always)]
    fn tiles_chunked<S: Simd>(
        &self,
        simd: S,
        lhs: &[T],
        scratch: &mut [T],
        rows: usize,
        panels: Panels<'_>,
        mut epilogue: impl FnMut(usize, usize, usize, &[T]),
    ) {
        let rows_max = Self::tile_rows::<S>();
        let (va, _) = self.vectors();
        let (ka, kb, pairs) = (self.ka, self.kb, self.pairs);
        let k = ka + kb;
        let panel_len = self.panel_len();
        let split = ka * va * self.lanes;
        let width = SLOTS * self.lanes;
        let acc = &mut scratch[..rows * width];
        // The chunks, as (segment b?, first k of the segment, last k).
        let kc = self.k_chunk;
        let chunks = (0..ka)
            .step_by(kc)
            .map(|k0| (false, k0, (k0 + kc).min(ka)))
            .chain((0..kb).step_by(kc).map(|k0| (true, k0, (k0 + kc).min(kb))));
        let chunks: Vec<(bool, usize, usize)> = chunks.collect();
        // Note [Next chunk ahead]: each tile's share of the next chunk's cache lines.
        let ahead = self.asks_ahead(rows);
        let tiles = rows.div_ceil(rows_max);
        let line = (CACHE_LINE / core::mem::size_of::<T>()).max(1);
        for j in panels.shares(self.panels).flatten() {
            let panel = &self.data[j * panel_len..(j + 1) * panel_len];
            let (pa, pb) = panel.split_at(split);
            let (pa, pb) = (T::vectors::<S>(pa), T::vectors::<S>(pb));
            for (c, &(in_b, k0, k1)) in chunks.iter().enumerate() {
                let init = c == 0;
                let (seg, offset) = if in_b { (pb, ka) } else { (pa, 0) };
                let panel = &seg[k0 * va..k1 * va];
                let next = match ahead {
                    true => self.next_chunk(j, in_b, k1, k1 - k0),
                    false => &[],
                };
                let share = next.len().div_ceil(line).div_ceil(tiles) * line;
                let per_k = (share / line).div_ceil(k1 - k0);
                let mut shares = next.chunks(share.max(1));
                let mut first = 0;
                while first < rows {
                    let mr = rows_max.min(rows - first);
                    let block = &lhs[first * k..(first + mr) * k];
                    let block = &block[(offset + k0) * mr..(offset + k1) * mr];
                    let out = &mut acc[first * width..(first + mr) * width];
                    let ahead = Ahead {
                        lines: shares.next().unwrap_or(&[]),
                        per_k,
                        line,
                    };
                    macro_rules! chunk {
                        ($mr:literal, $v:literal, $split:literal) => {
                            if $split && in_b {
                                chunk::<S, T, $mr, $v, true>(
                                    simd, block, panel, out, init, ahead, pairs,
                                )
                            } else {
                                chunk::<S, T, $mr, $v, false>(
                                    simd, block, panel, out, init, ahead, pairs,
                                )
                            }
                        };
                    }
                    match (va, mr) {
                        (3, 1) => chunk!(1, 3, true),
                        (3, 2) => chunk!(2, 3, true),
                        (3, 3) => chunk!(3, 3, true),
                        (3, 4) => chunk!(4, 3, true),
                        (3, 5) => chunk!(5, 3, true),
                        (3, _) => chunk!(6, 3, true),
                        (_, 1) => chunk!(1, 4, false),
                        (_, 2) => chunk!(2, 4, false),
                        (_, 3) => chunk!(3, 4, false),
                        (_, 4) => chunk!(4, 4, false),
                        (_, 5) => chunk!(5, 4, false),
                        (_, _) => chunk!(6, 4, false),
                    }
                    first += mr;
                }
            }
            let mut first = 0;
            while first < rows {
                let mr = rows_max.min(rows - first);
                epilogue(first, mr, j, &acc[first * width..(first + mr) * width]);
                first += mr;
            }
        }
    }
}

/// `out[r] = bias + row(r) · M^T` for `rows` rows, `M` packed by [`Packed::transposed`]
/// (`out` `[rows, n]` row-major): the input projection of a block of steps (Note [Input
/// projection] in `super::projection`). `lhs` is [`Packed::lhs_len`]`(rows)` long: the
/// rows laid out, then the tiles' scratch. Run it with `dispatch(packed.level, ..)`.
pub(crate) struct ProjectRows<'a, T, F> {
    pub(crate) packed: &'a Packed<T>,
    pub(crate) rows: usize,
    pub(crate) row: F,
    pub(crate) bias: &'a [T],
    pub(crate) lhs: &'a mut [T],
    pub(crate) out: &'a mut [T],
}

impl<'a, T: Lane, F: Fn(usize) -> &'a [T]> pulp::WithSimd for ProjectRows<'a, T, F> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, simd: S) {
        let Self {
            packed,
            rows,
            row,
            bias,
            lhs,
            out,
        } = self;
        let n = packed.n;
        assert_eq!(
            packed.layout,
            PanelLayout::Columns,
            "projected rows: expected weights packed as plain columns"
        );
        assert_eq!(
            bias.len(),
            n,
            "projected rows: expected {n} biases, got {}",
            bias.len()
        );
        assert_eq!(
            out.len(),
            rows * n,
            "projected rows: expected {} outputs, got {}",
            rows * n,
            out.len()
        );
        packed.lay_out_into::<S>(rows, |r| (&[], row(r)), lhs);
        let width = SLOTS * T::lanes::<S>();
        let k = packed.kb;
        let (lhs, scratch) = lhs.split_at_mut(rows * k);
        let group = PROJECTED_TILES * Packed::<T>::tile_rows::<S>();
        for g0 in (0..rows).step_by(group) {
            let g = group.min(rows - g0);
            let out = &mut out[g0 * n..(g0 + g) * n];
            packed.tiles_of::<S>(
                simd,
                &lhs[g0 * k..(g0 + g) * k],
                scratch,
                g,
                #[inline(always)]
                |first, count, j, values| {
                    let lo = j * width;
                    let cols = width.min(n - lo);
                    let bias = &bias[lo..lo + cols];
                    let to = &mut out[first * n..(first + count) * n];
                    for (i, to) in to.chunks_exact_mut(n).enumerate() {
                        let sum = &values[i * width..i * width + cols];
                        for ((o, &v), &b) in to[lo..lo + cols].iter_mut().zip(sum).zip(bias) {
                            *o = v + b;
                        }
                    }
                },
            );
        }
    }
}

/// Tiles of rows per pass of [`ProjectRows`] over the packed weights (Note [Projection
/// through the packed kernel] in `super::projection`).
const PROJECTED_TILES: usize = 3;

/// Bytes of a cache line, the unit [`Ahead`] asks for.
const CACHE_LINE: usize = 64;

/// A tile's share of the next chunk's weights, asked for while it runs its own chunk (Note
/// [Next chunk ahead]): `per_k` lines of `line` elements at each `k`, until `lines` runs
/// out.
///
/// # Note [Next chunk ahead]
///
/// With the reduction in chunks (Note [Reduction chunks]), a chunk's slice of a panel
/// comes into L1 with the first tile that runs it; the other tiles of the chunk read it
/// from there and ask nothing of memory. While the packed weights stay in the core's L2
/// that costs little. When they do not (the fused `[W_ih | W_hh]` of an LSTM at H512 is
/// 8 MiB, its `W_hh` alone 4 MiB, against 2 MiB of L2 on the Intel parts measured), every
/// step reads them again from L3, and the first tile of each chunk waits for its lines
/// while the core's hardware prefetchers, which follow misses, see none while the other
/// tiles compute. Measured on one core of an Intel Xeon (Granite Rapids class,
/// docs/BENCHMARKS.md, "the next chunk asked for ahead"): L3 delivers about 25 GB/s to one
/// core, so 4 MiB stream in about 165 µs; 32 rows against them compute in about 425 µs at
/// the rate the same product reaches from L2; the product took about 600 µs, the sum of
/// the two, where overlapping them would take not much more than the larger.
///
/// So while the tiles run one chunk, they ask for the next one into L2 (a prefetch:
/// [`prefetch_l2`], the T1 hint; a hint, which changes no result). Each tile asks for its
/// share of the next chunk's cache lines, a line or a few at each `k`, so that the requests
/// spread over the whole chunk's compute instead of arriving at once. The next chunk is
/// the one that follows in the buffer (the panels lie one after another, segment `a` then
/// `b`, each in its chunks: `next_chunk`); after the last, the first, which the next
/// product (the next step's) starts with.
///
/// It runs when the packed weights take at least one core's L2 (`projection::prefetch`,
/// from the size the CPU reports) and the product has more than one row: a single row
/// already streams the weights at L3's rate (a step's product at 1 row and 4 MiB took
/// 1.02–1.07× its time with the requests). With weights that stay in the L2 the requests only
/// cost: 1.03–1.05× the time of the GRU H256 B32 forward (1.5 MiB) and 1.03× the LSTM H128
/// one when forced on. The kernel alone, on two threads, with it against without
/// (`VARIANTS=pf0,auto ... kernel_times`, alternated in one process): the LSTM H512 B64
/// forward 0.90×, its training step 0.96×; the GRU's 0.85× and 0.94×; the 2-layer
/// bidirectional LSTM H256 B32 0.95× and 0.97×; rows whose weights stay in the L2
/// unchanged. The tests force it on with small chunks (`with_next_chunk_ahead`), and
/// `BURN_FUSED_RNN_PREFETCH=0|1` forces it for a process. The one-chunk path (AVX-512 on
/// AMD's cores) does not ask ahead: on Zen 4 (1 MiB of L2 per core, so the LSTM H256's
/// 2 MiB of weights stream from L3 every step), chunks of 32 to 256 steps that asked ahead
/// took 1.01–1.08× the one chunk's time (forward) and 1.00–1.04× (training), no faster
/// than the same chunks without the requests (docs/BENCHMARKS.md, "AMD EPYC (Zen 4): this
/// version measured").
#[derive(Clone, Copy)]
struct Ahead<'a, T> {
    lines: &'a [T],
    per_k: usize,
    line: usize,
}

impl<T> Ahead<'_, T> {
    /// Nothing to ask for.
    const NONE: Self = Ahead {
        lines: &[],
        per_k: 0,
        line: 1,
    };

    /// Asks for this `k`'s lines at the start of `lines`; returns the rest.
    #[inline(always)]
    fn ask<'b>(&self, lines: &'b [T]) -> &'b [T] {
        if lines.is_empty() {
            return lines;
        }
        let n = (self.per_k * self.line).min(lines.len());
        for i in (0..n).step_by(self.line) {
            prefetch_l2(lines, i);
        }
        &lines[n..]
    }
}

/// Writes `MR` rows, each at least `k` long, into `block` `k`-major: `block[kk · MR + r]` =
/// `rows[r][kk]` ([`Packed::lay_out_rows`]). One sequential stream of writes, and every
/// index in bounds by the slicing before the loop; the earlier loop, row by row with a
/// stride of `MR`, took 4% of an LSTM forward step.
///
/// # Panics
///
/// If a row is shorter than `k` or `block` than `k · MR`.
#[inline(always)]
fn interleave<T: Copy, const MR: usize>(block: &mut [T], rows: [&[T]; MR], k: usize) {
    let rows: [&[T]; MR] = rows.map(|row| &row[..k]);
    for (kk, to) in block[..k * MR].chunks_exact_mut(MR).enumerate() {
        let to: &mut [T; MR] = to.try_into().expect("chunks of MR");
        for r in 0..MR {
            to[r] = rows[r][kk];
        }
    }
}

/// One chunk of the reduction of a block of `MR` rows (`lhs`, `[kc][MR]`) with a chunk of
/// a panel (`[kc][V]` vectors) into the `MR × 4` accumulators kept in `acc`
/// (`[MR][4][L]`): zero first when `init` (Note [Reduction chunks]); with `SPLIT`, the
/// panel's vector 2 goes to slot 3 (GRU's state part of `n`).
#[inline(always)]
fn chunk<S: Simd, T: Lane, const MR: usize, const V: usize, const SPLIT: bool>(
    simd: S,
    lhs: &[T],
    panel: &[T::V<S>],
    acc: &mut [T],
    init: bool,
    ahead: Ahead<'_, T>,
    pairs: bool,
) {
    let out = T::vectors_mut::<S>(acc);
    let mut regs = [[T::splat(simd, T::ZERO); SLOTS]; MR];
    if !init {
        for r in 0..MR {
            for s in 0..SLOTS {
                regs[r][s] = out[r * SLOTS + s];
            }
        }
    }
    let kc = panel.len() / V;
    let (lhs, panel) = (&lhs[..kc * MR], &panel[..kc * V]);
    segment::<S, T, MR, V, SPLIT>(simd, &mut regs, lhs, panel, ahead, pairs);
    for r in 0..MR {
        for s in 0..SLOTS {
            out[r * SLOTS + s] = regs[r][s];
        }
    }
}

/// The microkernel: a block of `MR` rows (`lhs`, `[ka + kb][MR]`) times one panel into
/// `MR × 4` accumulators, segment `a` (`V` vectors per `k`, vector `v` into slot `v`) then
/// segment `b` (the same, except that with `SPLIT` its vector 2 goes to slot 3: GRU's
/// state part of `n`); then the accumulators to `out` (`[MR][4][L]`). `pairs`: as
/// [`segment`].
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn tile<S: Simd, T: Lane, const MR: usize, const V: usize, const SPLIT: bool>(
    simd: S,
    lhs: &[T],
    pa: &[T::V<S>],
    pb: &[T::V<S>],
    ka: usize,
    kb: usize,
    out: &mut [T],
    pairs: bool,
) {
    let mut acc = [[T::splat(simd, T::ZERO); SLOTS]; MR];
    let (la, lb) = lhs[..(ka + kb) * MR].split_at(ka * MR);
    let (pa, pb) = (&pa[..ka * V], &pb[..kb * V]);
    segment::<S, T, MR, V, false>(simd, &mut acc, la, pa, Ahead::NONE, pairs);
    segment::<S, T, MR, V, SPLIT>(simd, &mut acc, lb, pb, Ahead::NONE, pairs);
    let out = T::vectors_mut::<S>(out);
    for r in 0..MR {
        for s in 0..SLOTS {
            out[r * SLOTS + s] = acc[r][s];
        }
    }
}

/// One segment of [`tile`]: `lhs` `[k][MR]`, `panel` `[k][V]` vectors. A single row
/// (decoding, long sequences at batch 1) accumulates even and odd `k` apart where `pairs`,
/// so that its four chains of dependent multiply-adds become eight; without `pairs` it
/// sums in the order every row of a taller tile does.
///
/// Each `k` holds `MR × 4` accumulators in registers. Row by row (a broadcast, then its
/// multiply-adds with the `V` panel vectors, loaded once) needs `V + 1` more registers;
/// panel vector by panel vector (the `MR` broadcasts first, then each vector loaded and
/// used for every row) needs `MR + 1`. With 16 registers (AVX2, `MR = 3`, `V = 4`) the
/// first is 17: the compiler kept three accumulators on the stack and moved registers
/// around on every `k`, and the AVX2 LSTM forward took 1.8× as long as with the second
/// order, which fits exactly (docs/BENCHMARKS.md, "AVX2 tile, and one chunk on Zen 5").
/// So a tile whose first order does not fit runs the second.
#[inline(always)]
fn segment<S: Simd, T: Lane, const MR: usize, const V: usize, const SPLIT: bool>(
    simd: S,
    acc: &mut [[T::V<S>; SLOTS]; MR],
    lhs: &[T],
    panel: &[T::V<S>],
    ahead: Ahead<'_, T>,
    pairs: bool,
) {
    let slot = |v: usize| if SPLIT && v == 2 { 3 } else { v };
    let mut lines = ahead.lines;
    let (lhs, panel) = if MR == 1 && pairs {
        let mut odd = [T::splat(simd, T::ZERO); SLOTS];
        let pairs = lhs.len() / 2;
        for (x, w) in lhs[..2 * pairs]
            .chunks_exact(2)
            .zip(panel[..2 * pairs * V].chunks_exact(2 * V))
        {
            lines = ahead.ask(lines);
            let (x0, x1) = (T::splat(simd, x[0]), T::splat(simd, x[1]));
            for v in 0..V {
                acc[0][slot(v)] = T::fma(simd, x0, w[v], acc[0][slot(v)]);
                odd[slot(v)] = T::fma(simd, x1, w[V + v], odd[slot(v)]);
            }
        }
        for s in 0..SLOTS {
            acc[0][s] = T::add_v(simd, acc[0][s], odd[s]);
        }
        (&lhs[2 * pairs..], &panel[2 * pairs * V..])
    } else {
        (lhs, panel)
    };
    if MR * SLOTS + V < S::REGISTER_COUNT {
        // Row by row: `V` panel vectors and a broadcast beside the accumulators.
        for (x, w) in lhs.chunks_exact(MR).zip(panel.chunks_exact(V)) {
            let x: &[T; MR] = x.try_into().expect("chunks of MR");
            let w: &[T::V<S>; V] = w.try_into().expect("chunks of V");
            lines = ahead.ask(lines);
            for r in 0..MR {
                let xr = T::splat(simd, x[r]);
                for v in 0..V {
                    acc[r][slot(v)] = T::fma(simd, xr, w[v], acc[r][slot(v)]);
                }
            }
        }
    } else {
        // Panel vector by panel vector: `MR` broadcasts and a vector beside them.
        for (x, w) in lhs.chunks_exact(MR).zip(panel.chunks_exact(V)) {
            let x: &[T; MR] = x.try_into().expect("chunks of MR");
            let w: &[T::V<S>; V] = w.try_into().expect("chunks of V");
            lines = ahead.ask(lines);
            let xs: [T::V<S>; MR] = core::array::from_fn(|r| T::splat(simd, x[r]));
            for v in 0..V {
                let wv = w[v];
                for r in 0..MR {
                    acc[r][slot(v)] = T::fma(simd, xs[r], wv, acc[r][slot(v)]);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(n: usize, seed: f64) -> Vec<f64> {
        (0..n).map(|i| ((i as f64 + seed) * 0.37).sin()).collect()
    }

    /// Every level, every panel layout (LSTM, GRU, RNN gates, with and without the input
    /// segment; plain columns), row counts 1..=13 (every tile height and remainders), sizes
    /// that are not multiples of the lanes: each output equals a naive product, and each
    /// is produced exactly once.
    #[test]
    fn tiles_match_a_naive_product_at_every_level() {
        for level in SimdLevel::available() {
            for (gates, hidden, i, p) in [
                (4, 5, 3, 2),
                (3, 19, 7, 5),
                (1, 37, 2, 9),
                (4, 16, 16, 16),
                (3, 1, 0, 1),
                (1, 70, 0, 3),
                // Reductions past one transpose tile and not a multiple of it.
                (4, 21, 23, 18),
                (1, 40, 17, 35),
            ] {
                let n = gates * hidden;
                let w_ih = values(n * i, 1.0);
                let w_hh = values(n * p, 2.0);
                for rows in 1..=13 {
                    let x = values(rows * i, 3.0);
                    let h = values(rows * p, 4.0);
                    let xa: Vec<&[f64]> = (0..rows).map(|r| &x[r * i..(r + 1) * i]).collect();
                    let hb: Vec<&[f64]> = h.chunks(p).collect();
                    // One chunk, and chunks of 1, 2 and 5 reduction steps (Note [Reduction
                    // chunks]), which cut both segments and leave remainders; chunks of 2
                    // with and without the next chunk asked for ahead (Note [Next chunk
                    // ahead]), whose tiles' shares run out early, late or not at all.
                    for (k_chunk, ahead) in [
                        (usize::MAX, false),
                        (1, true),
                        (2, false),
                        (2, true),
                        (5, true),
                    ] {
                        let packed = Packed::gates(
                            level,
                            (i > 0).then_some((&w_ih[..], i)),
                            &w_hh,
                            gates,
                            hidden,
                            p,
                        )
                        .with_k_chunk(k_chunk)
                        .with_prefetch(ahead);
                        let mut seen = vec![0usize; rows * n * 2];
                        run_tiles(&packed, &xa, &hb, |r, col, [sa, sb], got| {
                            let mut want = 0.0;
                            if sa {
                                want += (0..i)
                                    .map(|k| x[r * i + k] * w_ih[col * i + k])
                                    .sum::<f64>();
                            }
                            if sb {
                                want += (0..p)
                                    .map(|k| h[r * p + k] * w_hh[col * p + k])
                                    .sum::<f64>();
                            }
                            let at = format!("{level:?} G {gates} H {hidden} I {i}");
                            let at = format!("{at} chunk {k_chunk} row {r} col {col}");
                            assert!((got - want).abs() < 1e-12, "{at}: {got} vs {want}");
                            seen[(r * n + col) * 2 + usize::from(!sa)] += 1;
                        });
                        for (idx, &count) in seen.iter().enumerate() {
                            // GRU's n gate: one slot per segment; every other column: one slot.
                            let (col, part) = ((idx / 2) % n, idx % 2);
                            let split_n = gates == 3 && col >= 2 * hidden;
                            let expected = usize::from(part == 0 || split_n);
                            assert_eq!(count, expected, "{level:?} G {gates}: output {idx}");
                        }
                    }
                    // Plain columns: h · W with W `[p, n]`.
                    let w = values(p * n, 5.0);
                    for (k_chunk, ahead) in [(usize::MAX, false), (2, false), (2, true)] {
                        let packed = Packed::columns(level, &w, p, n)
                            .with_k_chunk(k_chunk)
                            .with_prefetch(ahead);
                        let mut seen = vec![0usize; rows * n];
                        run_tiles(&packed, &[], &hb, |r, col, _, got| {
                            let want: f64 = (0..p).map(|k| h[r * p + k] * w[k * n + col]).sum();
                            assert!(
                                (got - want).abs() < 1e-12,
                                "{level:?} columns row {r} col {col}"
                            );
                            seen[r * n + col] += 1;
                        });
                        assert!(seen.iter().all(|&c| c == 1));
                    }
                }
            }
        }
    }

    /// Every output of one row's product, `(panel, slot, lane, bits)`, with the row laid out
    /// (`Packed::tiles`) or read in place (`Packed::ready_rows` must choose that).
    fn one_row(
        packed: &Packed<f64>,
        row: &[f64],
        in_place: bool,
    ) -> Vec<(usize, usize, usize, u64)> {
        struct Run<'a> {
            packed: &'a Packed<f64>,
            row: &'a [f64],
            in_place: bool,
        }
        impl pulp::WithSimd for Run<'_> {
            type Output = Vec<(usize, usize, usize, u64)>;
            #[inline(always)]
            fn with_simd<S: Simd>(self, simd: S) -> Self::Output {
                let p = self.packed;
                let mut out = Vec::new();
                // Stale values where the tiles' scratch goes: each run must overwrite them.
                let mut lhs = Aligned::filled(p.lhs_len(1), f64::NAN);
                let epilogue = |_first: usize, mr: usize, j: usize, values: &[f64]| {
                    assert_eq!(mr, 1, "one row");
                    for slot in 0..SLOTS {
                        for lane in 0..p.lanes {
                            if p.slot_output(j, slot, lane).is_some() {
                                let v = values[slot * p.lanes + lane];
                                out.push((j, slot, lane, v.to_bits()));
                            }
                        }
                    }
                };
                if self.in_place {
                    let ready = p.ready_rows::<S>(1, |_| (&[], self.row), &mut lhs);
                    assert!(
                        matches!(ready, Ready::InPlace(_)),
                        "one row, no input segment"
                    );
                    p.tiles_ready(simd, ready, &mut lhs, epilogue);
                } else {
                    p.lay_out_rows::<S>(1, |_| (&[], self.row), &mut lhs);
                    p.tiles(simd, &mut lhs, 1, Panels::All, epilogue);
                }
                out
            }
        }
        dispatch(
            packed.level,
            Run {
                packed,
                row,
                in_place,
            },
        )
    }

    /// Note [One row in place]: one row read where it is gives the bits of the row laid
    /// out, at every level, for the gates' panels without an input segment (LSTM, GRU and
    /// RNN layouts, `H` not a multiple of the lanes) and for plain columns (the backward's
    /// step product), in one chunk and in chunks of 1, 2 and 5 reduction steps.
    #[test]
    fn one_row_in_place_has_the_bits_of_the_row_laid_out() {
        for level in SimdLevel::available() {
            for (gates, hidden, p) in [
                (4, 5, 2),
                (3, 19, 5),
                (1, 37, 9),
                (4, 16, 16),
                (4, 21, 18),
                (1, 70, 3),
            ] {
                let n = gates * hidden;
                let w_hh = values(n * p, 2.0);
                let w = values(p * n, 5.0);
                // Longer than the product reads: only the first `p` values count.
                let row = values(p + 3, 4.0);
                for k_chunk in [usize::MAX, 1, 2, 5] {
                    let gate_panels =
                        Packed::gates(level, None, &w_hh, gates, hidden, p).with_k_chunk(k_chunk);
                    let columns = Packed::columns(level, &w, p, n).with_k_chunk(k_chunk);
                    for (what, packed) in [("gates", &gate_panels), ("columns", &columns)] {
                        let laid_out = one_row(packed, &row[..p], false);
                        let in_place = one_row(packed, &row, true);
                        assert!(!laid_out.is_empty());
                        assert_eq!(
                            in_place, laid_out,
                            "{level:?} {what} G {gates} H {hidden} P {p} chunk {k_chunk}"
                        );
                    }
                }
            }
        }
    }

    /// The input projection through the packed kernel (`ProjectRows`), at every level,
    /// with sizes that are not multiples of the lanes or the panels, row counts that leave
    /// remainders of every kind in the passes of three tiles, and chunked reductions: every
    /// output (pre-filled with NaN) equals the biases plus a naive product, and a row
    /// projected alone has the same bits as the same row inside a taller call (the forward
    /// projects a row in whichever block and thread it lands in, and its sums may not
    /// depend on that: `Packed::pairs`).
    #[test]
    fn projected_rows_match_a_naive_product_and_sum_alike_in_any_tile() {
        let project = |packed: &Packed<f64>, x: &[f64], k: usize, bias: &[f64]| {
            let rows = x.len() / k;
            let mut out = vec![f64::NAN; rows * packed.n];
            let mut lhs = vec![f64::NAN; packed.lhs_len(rows)];
            dispatch(
                packed.level,
                ProjectRows {
                    packed,
                    rows,
                    row: |r: usize| &x[r * k..(r + 1) * k],
                    bias,
                    lhs: &mut lhs,
                    out: &mut out,
                },
            );
            out
        };
        for level in SimdLevel::available() {
            for (k, n) in [(3, 5), (17, 70), (23, 129), (40, 64)] {
                let w = values(n * k, 1.0);
                let bias = values(n, 2.0);
                for (k_chunk, ahead) in [(usize::MAX, false), (2, true), (5, false)] {
                    let packed = Packed::transposed(level, &w, k, n)
                        .with_k_chunk(k_chunk)
                        .with_prefetch(ahead);
                    for rows in [1, 2, 7, 13, 19, 40] {
                        let x = values(rows * k, 3.0 + rows as f64);
                        let out = project(&packed, &x, k, &bias);
                        for r in 0..rows {
                            for col in 0..n {
                                let want = bias[col]
                                    + (0..k).map(|i| x[r * k + i] * w[col * k + i]).sum::<f64>();
                                let got = out[r * n + col];
                                assert!(
                                    (got - want).abs() < 1e-12,
                                    "{level:?} k {k} n {n} chunk {k_chunk} rows {rows}: \
                                     row {r} col {col}: {got} vs {want}"
                                );
                            }
                            let alone = project(&packed, &x[r * k..(r + 1) * k], k, &bias);
                            assert_eq!(
                                alone[..],
                                out[r * n..(r + 1) * n],
                                "{level:?} k {k} n {n} chunk {k_chunk}: row {r} of {rows} alone"
                            );
                        }
                    }
                }
            }
        }
    }

    /// A product asks ahead only when chunked (a chunk shorter than `k`), told to, and
    /// with more than one row, at each boundary.
    #[test]
    fn a_product_asks_ahead_with_chunks_rows_and_the_choice() {
        let w = values(4 * 37 * 23, 1.0);
        let packed = |kc: usize, ahead: bool| {
            Packed::gates(SimdLevel::Portable, Some((&w, 23)), &w, 4, 37, 11)
                .with_k_chunk(kc)
                .with_prefetch(ahead)
        };
        // k = 23 + 11 = 34 reduction steps.
        for (kc, ahead, rows, want) in [
            (5, true, 2, true),
            (33, true, 13, true),
            (5, true, 1, false),
            (34, true, 6, false),
            (usize::MAX, true, 6, false),
            (5, false, 6, false),
        ] {
            assert_eq!(
                packed(kc, ahead).asks_ahead(rows),
                want,
                "chunk {kc}, asked {ahead}, {rows} rows"
            );
        }
    }

    /// Each chunk's `next_chunk` starts where the following chunk starts, walking the
    /// chunks in the order `tiles_chunked` runs them (each panel's segment `a`, then its
    /// segment `b`), their lengths added up one by one; the last chunk's is the first
    /// chunk of the buffer.
    #[test]
    fn the_next_chunk_is_the_one_after() {
        let w = values(4 * 40 * 60, 1.0);
        for level in SimdLevel::available() {
            for (packed, kc) in [
                (
                    Packed::gates(level, Some((&w[..4 * 37 * 23], 23)), &w, 4, 37, 11),
                    5,
                ),
                (
                    Packed::gates(level, Some((&w[..3 * 19 * 7], 7)), &w, 3, 19, 19),
                    3,
                ),
                (Packed::gates(level, None, &w, 1, 70, 9), 4),
                (Packed::columns(level, &w, 13, 50), 6),
            ] {
                let packed = packed.with_k_chunk(kc);
                let (va, vb) = packed.vectors();
                let mut chunks = Vec::new();
                for j in 0..packed.panels {
                    for (in_b, len, v) in [(false, packed.ka, va), (true, packed.kb, vb)] {
                        for k0 in (0..len).step_by(kc) {
                            let k1 = (k0 + kc).min(len);
                            chunks.push((j, in_b, k1, (k1 - k0) * v * packed.lanes));
                        }
                    }
                }
                let base = packed.data.as_ptr();
                let mut start = 0;
                for (i, &(j, in_b, k1, len)) in chunks.iter().enumerate() {
                    start += len;
                    let next = packed.next_chunk(j, in_b, k1, kc);
                    let want = if i + 1 < chunks.len() { start } else { 0 };
                    assert_eq!(
                        next.as_ptr() as usize - base as usize,
                        want * size_of::<f64>(),
                        "{level:?} chunk {i} of {}",
                        chunks.len()
                    );
                    assert!(!next.is_empty() && next.len() <= kc * SLOTS * packed.lanes);
                }
                assert_eq!(
                    start,
                    packed.data.len(),
                    "{level:?}: the chunks tile the buffer"
                );
            }
        }
    }

    /// The runs `Packed::fill` writes whole: consecutive columns, zeros, the cap on length.
    #[test]
    fn runs_cut_at_gaps_zeros_and_the_cap() {
        let run = |slot, first, len| Run { slot, first, len };
        let cols = [
            Some(4),
            Some(5),
            Some(6),
            Some(9),
            None,
            None,
            Some(10),
            Some(11),
        ];
        assert_eq!(
            runs(&cols, usize::MAX),
            [
                run(0, Some(4), 3),
                run(3, Some(9), 1),
                run(4, None, 2),
                run(6, Some(10), 2)
            ]
        );
        assert_eq!(
            runs(&cols, 2),
            [
                run(0, Some(4), 2),
                run(2, Some(6), 1),
                run(3, Some(9), 1),
                run(4, None, 2),
                run(6, Some(10), 2)
            ]
        );
        assert!(runs(&[], 16).is_empty());
    }

    /// Calls `check(row, column, segments, value)` for every output of the product.
    fn run_tiles(
        packed: &Packed<f64>,
        a: &[&[f64]],
        b: &[&[f64]],
        mut check: impl FnMut(usize, usize, [bool; 2], f64),
    ) {
        struct Run<'a, F> {
            packed: &'a Packed<f64>,
            a: &'a [&'a [f64]],
            b: &'a [&'a [f64]],
            check: &'a mut F,
        }
        impl<F: FnMut(usize, usize, [bool; 2], f64)> pulp::WithSimd for Run<'_, F> {
            type Output = ();
            #[inline(always)]
            fn with_simd<S: Simd>(self, simd: S) {
                let p = self.packed;
                let width = SLOTS * p.lanes;
                let mut lhs = Aligned::default();
                let rows = self.b.len();
                p.lay_out_rows::<S>(
                    rows,
                    |r| (self.a.get(r).copied().unwrap_or(&[]), self.b[r]),
                    &mut lhs,
                );
                p.tiles(
                    simd,
                    &mut lhs,
                    rows,
                    Panels::All,
                    #[inline(always)]
                    |first, mr, j, values| {
                        for r in 0..mr {
                            for slot in 0..SLOTS {
                                for lane in 0..p.lanes {
                                    if let Some((col, segs)) = p.slot_output(j, slot, lane) {
                                        let v = values[r * width + slot * p.lanes + lane];
                                        (self.check)(first + r, col, segs, v);
                                    }
                                }
                            }
                        }
                    },
                );
            }
        }
        dispatch(
            packed.level,
            Run {
                packed,
                a,
                b,
                check: &mut check,
            },
        );
    }
}
