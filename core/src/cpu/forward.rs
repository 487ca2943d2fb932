//! The forward pass on host slices: layers, directions, steps.
//!
//! # Note [Fused step]
//!
//! Per layer and direction, `[W_ih | W_hh]` is packed once (Note [Packed weights] in
//! `super::packed`); then each step is ONE pass of the register-blocked kernel over the
//! rows `[x_t | h_{t-1}]` of its sequences, tile by tile (a few rows × the gates of `L` or
//! `4L` units), and each tile's pre-activations go straight, while in registers and L1,
//! into the cell update of those units (`super::cell`): bias, activations, cell state, the
//! new `h`, the output row, and when training the reserve's gate row. Nothing of size
//! `[T·B, G·H]` exists: the input is projected step by step inside the same product, so
//! inference keeps no buffer that grows with `T`, and a training forward writes only what
//! the reserve keeps. With few rows per thread the input is projected ahead instead, a
//! block of steps at a time through the same kernel, and the pass runs over `h_{t-1}` alone
//! (Notes [Input projection] and [Projection through the packed kernel] in
//! `super::projection`).
//!
//! - **Threads**: every sequence's recurrence is its own, so the batch splits into one
//!   contiguous part per thread and each thread runs the WHOLE scan of its part (every
//!   step, product and cell update) with no synchronisation until the layer ends
//!   (`schedule::scan_threads`: at least 2 sequences and 2^17 multiply-adds in the scan).
//!   An earlier version split each step's rows and joined the threads at the end of every
//!   step; measured on 2 cores, the two kernels are within noise at B = 32 (the step's
//!   join was not the bottleneck there), but the split per scan costs one join per layer
//!   instead of one per step. The two directions of a layer run concurrently, each with
//!   half the threads. A batch of one runs on one thread.
//! - **Padding**: a row past its sequence's length holds its state and writes a zero
//!   output (Note [Padding never leaks] in [`crate::op_types`]); its product is computed
//!   with its tile and ignored.
//! - **Projection** (LSTM `proj_size`): the cell writes `o ∘ tanh(c')`, then one GEMM per
//!   step projects the rows and the select runs on the result.

use pulp::{Simd, WithSimd};
use rayon::prelude::*;
use std::sync::{Arc, Mutex};

use super::aligned::Aligned;
use super::cell;
use super::float::Float;
use super::gemm::{gemm, Mat, MatMut};
use super::packed::{tile_rows, Lane, Packed, ProjectRows, MAX_ROWS, SLOTS};
use super::plan::{dropped, state_of, CellWeights, Inputs, PackedScan, Plan, ReserveLayout};
use super::projection::{self, CacheSizes, InputProjection};
use super::recycle::{self, Kept, Scratch};
use super::schedule::{
    direction_threads, forward_on_caller, gemm_threads, per_direction, scan_threads, split_step,
};
use super::simd::{dispatch, has_fma, SimdLevel};
use super::split::{split, Panels};
use crate::reserve::ReserveTag;
use crate::spec::RnnMode;

/// The outputs of one call.
pub struct Outputs<T> {
    /// `[T·B, D·P]` rows.
    pub y: Vec<T>,
    /// `[L·D, B, P]`.
    pub h_n: Vec<T>,
    /// `[L·D, B, H]` (LSTM).
    pub c_n: Option<Vec<T>>,
}

/// `G·H` biases folded into the input projection: `b_ih + b_hh`, except GRU's `n` block,
/// which takes `b_in` alone (`b_hn` sits inside `r ∘ (R_n h + b_hn)`); and GRU's `b_hn`.
pub(crate) fn biases<T: Float>(plan: &Plan<'_>, w: &CellWeights<'_, T>) -> (Vec<T>, Vec<T>) {
    let (gh, h) = (plan.gh(), plan.h);
    let mut bias = vec![T::ZERO; gh];
    let mut b_hn = vec![T::ZERO; h];
    if let Some(b) = w.b_ih {
        bias.copy_from_slice(b);
    }
    if let Some(b) = w.b_hh {
        let shared = if plan.spec.mode == RnnMode::Gru {
            b_hn.copy_from_slice(&b[2 * h..]);
            2 * h
        } else {
            gh
        };
        for (acc, &v) in bias[..shared].iter_mut().zip(b) {
            *acc += v;
        }
    }
    (bias, b_hn)
}

/// Where one direction writes its output: per row of the sequence, its `P`-wide part.
type OutRows<'a, T> = Vec<&'a mut [T]>;

/// Splits a layer output `[T·B, D·P]` into each direction's `P`-wide part of every row.
fn split_directions<T>(out: &mut [T], nd: usize, p: usize) -> Vec<OutRows<'_, T>> {
    let mut parts: Vec<OutRows<'_, T>> = (0..nd).map(|_| Vec::new()).collect();
    for row in out.chunks_mut(nd * p) {
        for (part, half) in parts.iter_mut().zip(row.chunks_mut(p)) {
            part.push(half);
        }
    }
    parts
}

/// How each direction of a layer with `in_size` inputs runs its scan: the rows of each part
/// of the batch whose whole scan runs on one thread (Note [Fused step]), and whether the
/// input is projected ahead (Note [Input projection]). `skip`: the layer has no `W_ih`
/// (skip input); `elem`: bytes per weight. The packed weights kept across calls follow the
/// same choice (Note [Packed weights across calls] in `super::prepared`).
pub(crate) fn scan_shape(
    plan: &Plan<'_>,
    in_size: usize,
    skip: bool,
    elem: usize,
) -> (usize, InputProjection) {
    let (batch, gh) = (plan.b, plan.gh());
    let parts = scan_threads(
        direction_threads(plan),
        batch,
        plan.t * gh * (plan.p + in_size),
    );
    let chunk = batch.div_ceil(parts).max(1);
    let fused_bytes = (in_size + plan.p) * gh * elem;
    let projection = projection::choose(
        plan.projection,
        skip,
        [plan.t, chunk, tile_rows(plan.level)],
        [fused_bytes, CacheSizes::detected().l2],
        projection::slow_l3(),
    );
    (chunk, projection)
}

/// One sequence at one step: what the fused step reads and writes.
struct StepRow<'a, T> {
    valid: bool,
    /// The step's input row (`in` wide).
    x: &'a [T],
    /// With the input projected ahead: the row's `x_t · W_ih^T` plus the folded biases
    /// (`G·H`), which the cell adds in place of the biases (Note [Input projection]).
    xw: Option<&'a [T]>,
    /// When training, the reserve's gate row.
    gate: Option<&'a mut [T]>,
    prev: &'a [T],
    next: &'a mut [T],
    cell: Option<&'a mut [T]>,
    m: Option<&'a mut [T]>,
    out: &'a mut [T],
}

/// One layer in one direction.
struct Direction<'a, T> {
    plan: &'a Plan<'a>,
    d: usize,
    w: CellWeights<'a, T>,
    /// The layer's input rows `[T·B, in]`.
    input: &'a [T],
    in_size: usize,
    h0: Option<&'a [T]>,
    c0: Option<&'a [T]>,
    threads: usize,
    /// The weights packed by the caller, if it has them: every pseudo-layer's, and this
    /// one's index.
    packed: Option<(&'a Arc<Vec<PackedScan<T>>>, usize)>,
}

/// What a scan of some rows of the batch carries from step to step, and its per-step
/// scratch.
struct Scan<'a, T> {
    /// The state entering the step, `[nb, P]`, and the one leaving it. These and the
    /// buffers below start on a cache line (Note [Aligned buffers] in `super::aligned`).
    state: Aligned<T>,
    next: Aligned<T>,
    /// The cell state `[nb, H]` (LSTM), updated in place.
    cell: Option<Aligned<T>>,
    /// Projection: `o ∘ tanh(c')` `[nb, H]` and its projection `[nb, P]`.
    m: Aligned<T>,
    projected: Aligned<T>,
    /// The part's output rows, step-major: `out[t·nb + j]` is row `b0 + j` at step `t`.
    out: Vec<&'a mut [T]>,
    /// The step's rows laid out for the microkernel (`Packed::lay_out_rows`).
    lhs: Aligned<T>,
    /// The allocation of the step's rows, kept from step to step (`recycled`).
    spare: Vec<StepRow<'a, T>>,
}

/// Some consecutive rows of the batch, `b0..b0 + nb`, whose whole scan runs on one thread
/// (Note [Fused step]): their output rows and, when training, their gate rows, step-major.
struct Part<'a, T> {
    b0: usize,
    nb: usize,
    out: Vec<&'a mut [T]>,
    gates: Vec<&'a mut [T]>,
}

/// What every part of a direction shares.
#[derive(Clone, Copy)]
struct Shared<'a, T> {
    /// Folded biases and GRU's `b_hn` (`biases`).
    bias: &'a [T],
    b_hn: &'a [T],
    packed: &'a Packed<T>,
    /// Whether the input is projected ahead (Note [Input projection]).
    ahead: bool,
    /// `W_ih` packed for the projection ahead (Note [Projection through the packed
    /// kernel] in `super::projection`).
    w_ih: Option<&'a Packed<T>>,
    cache: CacheSizes,
    /// Threads of each part's GEMMs.
    gemm_threads: usize,
    /// Every pseudo-layer's packed weights and this one's index, where a step of its
    /// few rows splits its panels with a thread of the pool (Note [A step over two threads] in
    /// `super::split`).
    split: Option<(&'a Arc<Vec<PackedScan<T>>>, usize)>,
}

/// The projected input rows of a block of steps (Note [Input projection]), on cache lines
/// (Note [Aligned buffers] in `super::aligned`).
///
/// # Note [Projection buffers]
///
/// The buffers are sized once per scan, for its largest block ([`Projected::for_blocks`]),
/// and a block uses their first rows; they come from the scratch list (Note [Scratch
/// reuse] in `super::recycle`) and go back to it with the scan. Allocated per call (and
/// resized when the last block was shorter), they were fresh memory as often as not: at
/// batch 1 and T = 10 000 (LSTM, H = 16, one thread) every call page-faulted about 300
/// pages in, and the call took 2.6 ms instead of 1.6; whether it did depended on the
/// allocator's history (the same LSTM at H = 32 took 2.5 ms alone and 3.8 ms after a call
/// at H = 16 in the same process). `kernel_times` with `FAULTS=1` counts them.
struct Projected<T> {
    /// `[steps·nb, G·H]` for the largest block: row `(t - first)·nb + j`.
    rows: Scratch<T>,
    /// The block's first (smallest) step.
    first: usize,
    gh: usize,
    /// The block's input rows laid out for the packed kernel, and its tiles' scratch, for
    /// each thread of the projection (`Packed::lhs_len`).
    lhs: Scratch<T>,
}

impl<T> Default for Projected<T> {
    fn default() -> Self {
        Self {
            rows: Scratch::default(),
            first: 0,
            gh: 0,
            lhs: Scratch::default(),
        }
    }
}

impl<T: Lane + Kept> Projected<T> {
    /// Buffers for blocks of at most `steps` steps of `nb` rows projected by `w_ih` on
    /// at most `threads` threads (Note [Projection buffers]).
    fn for_blocks(steps: usize, nb: usize, w_ih: &Packed<T>, threads: usize) -> Self {
        let rows = steps * nb;
        Self {
            rows: Scratch::new(rows * w_ih.n),
            first: 0,
            gh: w_ih.n,
            lhs: Scratch::new(
                row_splits(rows, threads)
                    .map(|r| w_ih.lhs_len(r.len()))
                    .sum(),
            ),
        }
    }
}

impl<T> Projected<T> {
    /// Row `j` of the part at step `t` (of the current block).
    fn row(&self, t: usize, j: usize, nb: usize) -> &[T] {
        let r = (t - self.first) * nb + j;
        &self.rows[r * self.gh..(r + 1) * self.gh]
    }
}

impl<T: Lane + Kept> Direction<'_, T> {
    /// Runs the scan (Note [Fused step]); writes the direction's output rows and, when
    /// training, the gate rows of the reserve (`gates`, `[T·B, W]`). Returns the final `h`
    /// and `c`.
    fn run<const TRAIN: bool>(
        &self,
        gates: &mut [T],
        out: OutRows<'_, T>,
    ) -> (Vec<T>, Option<Vec<T>>) {
        let plan = self.plan;
        let (batch, h, p) = (plan.b, plan.h, plan.p);
        let skip = self.w.w_ih.is_none();
        let (chunk, projection) = scan_shape(plan, self.in_size, skip, size_of::<T>());
        let ahead = projection == InputProjection::Ahead;
        let owned;
        let (all, index) = match self.packed {
            Some((all, index)) => {
                let packed = &all[index];
                // The cache packs for the same choice (its key holds it).
                assert_eq!(
                    (packed.scan.ka == 0, packed.input.is_some()),
                    (ahead || skip, ahead),
                    "packed weights: expected W_ih in the scan's weights exactly when the \
                     input is not projected ahead, and packed apart exactly when it is"
                );
                (all, index)
            }
            None => {
                owned = Arc::new(vec![plan.pack_scan(&self.w, self.in_size, ahead)]);
                (&owned, 0)
            }
        };
        let PackedScan {
            scan: packed,
            input: w_ih,
            bias,
            b_hn,
        } = &all[index];
        let mut out: Vec<Option<&mut [T]>> = out.into_iter().map(Some).collect();
        let mut gate_rows: Vec<Option<&mut [T]>> = match TRAIN {
            true => gates.chunks_mut(plan.gate_width()).map(Some).collect(),
            false => Vec::new(),
        };
        let mut jobs = Vec::with_capacity(batch.div_ceil(chunk));
        for b0 in (0..batch).step_by(chunk) {
            let nb = chunk.min(batch - b0);
            let mut part = Part {
                b0,
                nb,
                out: Vec::with_capacity(plan.t * nb),
                gates: Vec::new(),
            };
            for t in 0..plan.t {
                for b in b0..b0 + nb {
                    let row = plan.row(t, b);
                    part.out
                        .push(out[row].take().expect("each row in one part"));
                    if TRAIN {
                        part.gates
                            .push(gate_rows[row].take().expect("each row in one part"));
                    }
                }
            }
            jobs.push(part);
        }
        let shared = Shared {
            bias,
            b_hn,
            packed,
            ahead,
            w_ih: w_ih.as_ref(),
            cache: CacheSizes::detected(),
            gemm_threads: if jobs.len() > 1 { 1 } else { self.threads },
            // A batch in one part has the direction's threads (a batch of one is one part).
            split: {
                let threads = match forward_on_caller(plan, TRAIN) {
                    // Planned for the caller's thread alone; the pool is free.
                    true => rayon::current_num_threads(),
                    false => self.threads,
                };
                let step = !TRAIN && jobs.len() == 1 && self.w.w_hr.is_none();
                let k = packed.ka + packed.kb;
                (step && split_step(plan, threads, batch, packed.n, k)).then_some((all, index))
            },
        };
        let finals: Vec<(Vec<T>, Option<Vec<T>>)> = if jobs.len() > 1 {
            jobs.into_par_iter()
                .map(|part| self.scan::<TRAIN>(part, &shared))
                .collect()
        } else {
            jobs.into_iter()
                .map(|part| self.scan::<TRAIN>(part, &shared))
                .collect()
        };
        let mut state = Vec::with_capacity(batch * p);
        let mut cell: Option<Vec<T>> = None;
        for (s, c) in finals {
            state.extend_from_slice(&s);
            if let Some(c) = c {
                cell.get_or_insert_with(|| Vec::with_capacity(batch * h))
                    .extend_from_slice(&c);
            }
        }
        (state, cell)
    }

    /// The whole scan of one part of the batch, on the calling thread.
    fn scan<const TRAIN: bool>(
        &self,
        part: Part<'_, T>,
        shared: &Shared<'_, T>,
    ) -> (Vec<T>, Option<Vec<T>>) {
        let plan = self.plan;
        let (h, p, gh) = (plan.h, plan.p, plan.gh());
        let Part {
            b0,
            nb,
            out,
            mut gates,
        } = part;
        let proj = self.w.w_hr.is_some();
        let mut scan = Scan {
            state: self.h0.map_or_else(
                || Aligned::filled(nb * p, T::ZERO),
                |h0| Aligned::from_slice(&h0[b0 * p..(b0 + nb) * p]),
            ),
            next: Aligned::filled(nb * p, T::ZERO),
            cell: (plan.spec.mode == RnnMode::Lstm).then(|| {
                self.c0.map_or_else(
                    || Aligned::filled(nb * h, T::ZERO),
                    |c0| Aligned::from_slice(&c0[b0 * h..(b0 + nb) * h]),
                )
            }),
            m: Aligned::filled(if proj { nb * h } else { 0 }, T::ZERO),
            projected: Aligned::filled(if proj { nb * p } else { 0 }, T::ZERO),
            out,
            lhs: Aligned::default(),
            spare: Vec::new(),
        };
        let steps: Vec<usize> = plan.scan(self.d).collect();
        // Note [Projection beside the scan] where threads are free for it.
        let beside = shared.ahead && shared.gemm_threads > 1;
        let block = match shared.ahead {
            true => plan.projection_block.unwrap_or_else(|| {
                projection::block_steps(
                    [steps.len(), nb, gh, core::mem::size_of::<T>()],
                    projection::block_rows(nb, tile_rows(plan.level), beside),
                    shared.cache,
                )
            }),
            false => steps.len().max(1),
        };
        let pipelined = beside && steps.len() > block;
        // Beside the scan, two blocks are alive at once: half a block each, so that the
        // buffers together stay within the L2 as one block does (and memory stays linear in
        // `T` with the same constant).
        let block = match pipelined && plan.projection_block.is_none() {
            true => block.div_ceil(2),
            false => block,
        };
        let blocks: Vec<&[usize]> = match pipelined {
            // The first block's projection runs alone: an eighth of a block.
            true => {
                let (first, rest) = steps.split_at(block.div_ceil(8));
                core::iter::once(first).chain(rest.chunks(block)).collect()
            }
            false => steps.chunks(block).collect(),
        };
        let longest = blocks.iter().map(|b| b.len()).max().unwrap_or(0);
        let buffers = || match shared.w_ih {
            Some(w_ih) => Projected::for_blocks(longest, nb, w_ih, shared.gemm_threads),
            None => Projected::default(),
        };
        let mut projected = buffers();
        let mut steps_of = |block: &[usize], shared: &Shared<'_, T>, xw: Option<&Projected<T>>| {
            dispatch(
                plan.level,
                Steps::<'_, '_, '_, T, TRAIN> {
                    dir: self,
                    scan: &mut scan,
                    block,
                    part: (b0, nb),
                    gates: &mut gates,
                    shared,
                    xw,
                },
            );
        };
        if pipelined {
            // Note [Projection beside the scan]: the next block's projection on one thread
            // while this block's steps run on another.
            let alone = Shared {
                gemm_threads: 1,
                split: None,
                ..*shared
            };
            let mut upcoming = buffers();
            self.project(
                blocks[0],
                (b0, nb),
                shared.gemm_threads,
                shared,
                &mut projected,
            );
            for (i, block) in blocks.iter().enumerate() {
                let next = blocks.get(i + 1);
                rayon::join(
                    || steps_of(block, &alone, Some(&projected)),
                    || {
                        if let Some(next) = next {
                            self.project(next, (b0, nb), 1, &alone, &mut upcoming);
                        }
                    },
                );
                core::mem::swap(&mut projected, &mut upcoming);
            }
        } else {
            for block in blocks {
                if shared.ahead {
                    self.project(block, (b0, nb), shared.gemm_threads, shared, &mut projected);
                }
                steps_of(block, shared, shared.ahead.then_some(&projected));
            }
        }
        (scan.state.to_vec(), scan.cell.map(|c| c.to_vec()))
    }

    /// Projects the input rows `b0..b0 + nb` of the steps `block` (consecutive, in either
    /// order) ahead (Note [Input projection]): `projected.rows[(t - first)·nb + j]` =
    /// `x_t[b0 + j] · W_ih^T` + the folded biases, through the packed kernel (Note
    /// [Projection through the packed kernel] in `super::projection`), its rows split over
    /// `threads` threads where the product is large enough.
    fn project(
        &self,
        block: &[usize],
        (b0, nb): (usize, usize),
        threads: usize,
        shared: &Shared<'_, T>,
        projected: &mut Projected<T>,
    ) {
        let plan = self.plan;
        let in_size = self.in_size;
        let w_ih = shared.w_ih.expect("projected ahead only with W_ih packed");
        let gh = w_ih.n;
        let first = block.iter().copied().min().unwrap_or(0);
        let rows = block.len() * nb;
        projected.first = first;
        projected.gh = gh;
        let threads = gemm_threads(threads, rows, gh, in_size);
        // Every element of the block's rows is written by the product's epilogue.
        assert!(
            projected.rows.len() >= rows * gh,
            "projection buffer: expected at least {} elements, got {}",
            rows * gh,
            projected.rows.len()
        );
        let mut jobs = Vec::with_capacity(threads);
        let (mut out, mut lhs) = (&mut projected.rows[..rows * gh], &mut projected.lhs[..]);
        for split in row_splits(rows, threads) {
            let (o, rest) = core::mem::take(&mut out).split_at_mut(split.len() * gh);
            let (l, more) = core::mem::take(&mut lhs).split_at_mut(w_ih.lhs_len(split.len()));
            (out, lhs) = (rest, more);
            jobs.push((split, o, l));
        }
        let input = self.input;
        let project = |(split, out, lhs): (core::ops::Range<usize>, &mut [T], &mut [T])| {
            let start = split.start;
            dispatch(
                plan.level,
                ProjectRows {
                    packed: w_ih,
                    rows: split.len(),
                    row: |r: usize| {
                        let (t, j) = ((start + r) / nb, (start + r) % nb);
                        let row = plan.row(first + t, b0 + j);
                        &input[row * in_size..(row + 1) * in_size]
                    },
                    bias: shared.bias,
                    lhs,
                    out,
                },
            )
        };
        match jobs.len() {
            1 => jobs.into_iter().for_each(project),
            _ => jobs.into_par_iter().for_each(project),
        }
    }

    /// One step of the rows `b0..b0 + nb` (Note [Fused step]): the pre-activations and the
    /// cell update, tile by tile; then (LSTM projection) the projection and the select.
    /// Runs inside the block's dispatch ([`Steps`]), at `simd`'s level.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn step<S: Simd, const TRAIN: bool>(
        &self,
        simd: S,
        scan: &mut Scan<'_, T>,
        t: usize,
        (b0, nb): (usize, usize),
        gate_rows: Vec<Option<&mut [T]>>,
        shared: &Shared<'_, T>,
        projected: Option<&Projected<T>>,
    ) {
        let plan = self.plan;
        let (h, p) = (plan.h, plan.p);
        let in_size = self.in_size;
        let proj = self.w.w_hr;
        {
            let mut m_rows = scan.m.chunks_mut(h);
            let mut c_rows = scan.cell.as_deref_mut().map(|c| c.chunks_mut(h));
            let mut gate_rows = gate_rows.into_iter();
            let state = &scan.state;
            let mut items: Vec<StepRow<'_, T>> = recycled(core::mem::take(&mut scan.spare));
            items.extend(
                scan.out[t * nb..(t + 1) * nb]
                    .iter_mut()
                    .zip(scan.next.chunks_mut(p))
                    .enumerate()
                    .map(|(j, (out, next))| {
                        let b = b0 + j;
                        StepRow {
                            valid: plan.valid(t, b),
                            x: &self.input[plan.row(t, b) * in_size..][..in_size],
                            xw: projected.map(|pr| pr.row(t, j, nb)),
                            gate: gate_rows.next().flatten(),
                            prev: &state[j * p..(j + 1) * p],
                            next,
                            cell: c_rows.as_mut().and_then(Iterator::next),
                            m: proj.and_then(|_| m_rows.next()),
                            out,
                        }
                    }),
            );
            let skip = self.w.w_ih.is_none();
            match shared.split {
                // Note [A step over two threads] in `super::split`.
                Some((all, index)) if !TRAIN && items.iter().all(|r| r.valid) => {
                    let job = RowJob::new(&items, plan, (all, index), skip);
                    job.run(&mut items, &mut scan.lhs);
                }
                _ => FusedStep::<'_, '_, T, TRAIN> {
                    rows: &mut items,
                    lhs: &mut scan.lhs,
                    packed: shared.packed,
                    mode: plan.spec.mode,
                    h,
                    skip,
                    bias: shared.bias,
                    b_hn: shared.b_hn,
                    panels: Panels::All,
                }
                .with_simd(simd),
            }
            scan.spare = recycled(items);
        }
        if let Some(w_hr) = proj {
            // h' = (o ∘ tanh c') W_hr^T for every row, then the select.
            gemm(
                MatMut::rows(&mut scan.projected, nb, p, p),
                false,
                Mat::rows(&scan.m, nb, h, h),
                Mat::rows(w_hr, p, h, h).t(),
                gemm_threads(shared.gemm_threads, nb, p, h),
            );
            for (j, out) in scan.out[t * nb..(t + 1) * nb].iter_mut().enumerate() {
                if plan.valid(t, b0 + j) {
                    let next_j = &mut scan.next[j * p..(j + 1) * p];
                    next_j.copy_from_slice(&scan.projected[j * p..(j + 1) * p]);
                    out.copy_from_slice(next_j);
                }
            }
        }
        core::mem::swap(&mut scan.state, &mut scan.next);
    }
}

/// The steps of one block of a part's scan, at one SIMD level: one dispatch per block, not
/// per step (at batch 1 and small `H` a step is a few hundred instructions, and entering
/// the level's code set up its whole frame every step).
struct Steps<'s, 'd, 'a, T, const TRAIN: bool> {
    dir: &'s Direction<'d, T>,
    scan: &'s mut Scan<'a, T>,
    block: &'s [usize],
    part: (usize, usize),
    /// The part's gate rows, step-major (training; empty in inference).
    gates: &'s mut [&'a mut [T]],
    shared: &'s Shared<'s, T>,
    xw: Option<&'s Projected<T>>,
}

impl<T: Lane + Kept, const TRAIN: bool> WithSimd for Steps<'_, '_, '_, T, TRAIN> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, simd: S) {
        let Self {
            dir,
            scan,
            block,
            part: (b0, nb),
            gates,
            shared,
            xw,
        } = self;
        for &t in block {
            let gate_rows = match TRAIN {
                true => gates[t * nb..(t + 1) * nb]
                    .iter_mut()
                    .map(|r| Some(&mut **r))
                    .collect(),
                false => Vec::new(),
            };
            dir.step::<S, TRAIN>(simd, scan, t, (b0, nb), gate_rows, shared, xw);
        }
    }
}

/// The fused step over some rows of the batch, at one SIMD level (Note [Fused step]).
struct FusedStep<'r, 'a, T, const TRAIN: bool> {
    rows: &'r mut [StepRow<'a, T>],
    /// The rows laid out for the microkernel (reused from step to step).
    lhs: &'r mut Aligned<T>,
    packed: &'r Packed<T>,
    mode: RnnMode,
    h: usize,
    /// Skip input: the input row is added to every gate.
    skip: bool,
    bias: &'r [T],
    b_hn: &'r [T],
    /// The panels this thread computes (Note [A step over two threads] in `super::split`).
    panels: Panels<'r>,
}

impl<T: Lane, const TRAIN: bool> WithSimd for FusedStep<'_, '_, T, TRAIN> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, simd: S) {
        let Self {
            rows,
            lhs,
            packed,
            mode,
            h,
            skip,
            bias,
            b_hn,
            panels,
        } = self;
        // Past a sequence's end: hold the state, output zero (Note [Padding never leaks] in
        // `crate::reference`); the product of such a row is computed with the rest of its
        // tile and ignored.
        for r in rows.iter_mut().filter(|r| !r.valid) {
            r.next.copy_from_slice(r.prev);
            r.out.fill(T::ZERO);
        }
        let lanes = lanes_of::<S, T>();
        let fma = has_fma::<S>();
        let per_panel = packed.per_panel();
        let width = SLOTS * lanes;
        // A single row whose input was projected ahead is read where it is (Note [One row
        // in place] in `super::packed`); other rows are laid out for the tiles.
        let ready = {
            let rows: &[StepRow<'_, T>] = rows;
            packed.ready_rows::<S>(rows.len(), |r| (rows[r].x, rows[r].prev), lhs)
        };
        let epilogue = {
            #[inline(always)]
            |first: usize, count: usize, panel: usize, values: &[T]| {
                let lo = panel * per_panel;
                let n = per_panel.min(h - lo);
                for (i, r) in rows[first..first + count].iter_mut().enumerate() {
                    if !r.valid {
                        continue;
                    }
                    let v = &values[i * width..(i + 1) * width];
                    let acc: [&[T]; 4] = match mode {
                        RnnMode::RnnTanh | RnnMode::RnnRelu => [v; 4],
                        _ => core::array::from_fn(|s| &v[s * lanes..(s + 1) * lanes]),
                    };
                    let projected = r.m.is_some();
                    let out: &mut [T] = match r.m.as_deref_mut() {
                        Some(m) => m,
                        None => &mut *r.next,
                    };
                    let skip_x = if skip { Some(r.x) } else { None };
                    macro_rules! units {
                        ($n:expr) => {
                            cell::Units {
                                h,
                                lo,
                                n: $n,
                                acc,
                                skip: skip_x,
                                bias: r.xw.unwrap_or(bias),
                                gates: r.gate.as_deref_mut(),
                                out,
                            }
                        };
                    }
                    // A function, not a closure: a closure that the compiler does not
                    // inline would run without the level's target features.
                    //
                    // A whole panel's units: a constant count (`full`: the level's lanes,
                    // or four times that for the one-gate RNNs), for which the compiler
                    // emits straight vector code and inlines the copies into the reserve;
                    // the last panel of an `H` that is not a multiple runs the same loop
                    // with its count. `full` is written in each mode's arm: computed once
                    // from the mode before the `match`, it was not a constant to the
                    // compiler, and a training step called `memcpy` five times per row
                    // and panel (4.6% of an LSTM training call).
                    macro_rules! cell {
                        ($full:expr, $f:path $(, $arg:expr)*) => {
                            if n == $full {
                                $f(units!($full) $(, $arg)*)
                            } else {
                                $f(units!(n) $(, $arg)*)
                            }
                        };
                    }
                    // The activations fuse their multiply-adds where the level has the
                    // instruction (a constant per level: Note [Activations] in
                    // `super::float`).
                    match (mode, fma) {
                        (RnnMode::Lstm, true) => {
                            let c = r.cell.as_deref_mut().expect("LSTM carries c");
                            cell!(lanes, cell::lstm_forward::<T, TRAIN, true>, c)
                        }
                        (RnnMode::Lstm, false) => {
                            let c = r.cell.as_deref_mut().expect("LSTM carries c");
                            cell!(lanes, cell::lstm_forward::<T, TRAIN, false>, c)
                        }
                        (RnnMode::Gru, true) => {
                            cell!(lanes, cell::gru_forward::<T, TRAIN, true>, b_hn, r.prev)
                        }
                        (RnnMode::Gru, false) => {
                            cell!(lanes, cell::gru_forward::<T, TRAIN, false>, b_hn, r.prev)
                        }
                        (RnnMode::RnnTanh, true) => {
                            cell!(lanes * SLOTS, cell::rnn_forward::<T, TRAIN, false, true>)
                        }
                        (RnnMode::RnnTanh, false) => {
                            cell!(lanes * SLOTS, cell::rnn_forward::<T, TRAIN, false, false>)
                        }
                        (RnnMode::RnnRelu, _) => {
                            cell!(lanes * SLOTS, cell::rnn_forward::<T, TRAIN, true, false>)
                        }
                    }
                    if !projected {
                        r.out[lo..lo + n].copy_from_slice(&r.next[lo..lo + n]);
                    }
                }
            }
        };
        packed.tiles_ready_of(simd, ready, lhs, panels, epilogue);
    }
}

/// An inference step's panels for a thread of the pool, over its few rows (Note [A step
/// over two threads] in `super::split`): what the step reads, by value or shared, and the
/// buffers where the worker writes its units.
struct RowJob<T> {
    weights: Arc<Vec<PackedScan<T>>>,
    index: usize,
    level: SimdLevel,
    mode: RnnMode,
    h: usize,
    skip: bool,
    /// The rows' inputs, projected inputs and states, one row after another.
    x: Vec<T>,
    xw: Option<Vec<T>>,
    prev: Vec<T>,
    /// The lengths of one row's `x`, `xw`, state and output.
    lens: [usize; 4],
    out: Mutex<RowOut<T>>,
}

/// What the worker of a [`RowJob`] writes: its units of the rows' next states, outputs and
/// cell states (one row after another), and its own laid-out rows and scratch.
struct RowOut<T> {
    next: Vec<T>,
    y: Vec<T>,
    cell: Option<Vec<T>>,
    lhs: Aligned<T>,
}

impl<T: Lane> RowJob<T> {
    /// The job of `rows`, a step of `plan`'s call (`skip`: the layer has no `W_ih`), whose
    /// weights are `weights[index]`.
    fn new(
        rows: &[StepRow<'_, T>],
        plan: &Plan<'_>,
        (weights, index): (&Arc<Vec<PackedScan<T>>>, usize),
        skip: bool,
    ) -> Self {
        let first = &rows[0];
        let lens = [
            first.x.len(),
            first.xw.map_or(0, <[T]>::len),
            first.prev.len(),
            first.out.len(),
        ];
        fn gather<'r, R, T: Copy + 'r>(rows: &'r [R], f: impl Fn(&'r R) -> &'r [T]) -> Vec<T> {
            rows.iter().flat_map(|r| f(r).iter().copied()).collect()
        }
        Self {
            weights: Arc::clone(weights),
            index,
            level: plan.level,
            mode: plan.spec.mode,
            h: plan.h,
            skip,
            x: gather(rows, |r| r.x),
            xw: first
                .xw
                .map(|_| gather(rows, |r| r.xw.expect("every row projected or none"))),
            prev: gather(rows, |r| r.prev),
            lens,
            out: Mutex::new(RowOut {
                next: vec![T::ZERO; rows.len() * first.next.len()],
                y: vec![T::ZERO; rows.len() * lens[3]],
                cell: first
                    .cell
                    .as_ref()
                    .map(|_| gather(rows, |r| r.cell.as_deref().expect("every row or none"))),
                lhs: Aligned::default(),
            }),
        }
    }

    /// Computes `rows`' step on this thread with a thread of the pool, and copies the
    /// worker's units into `rows`.
    fn run(self, rows: &mut [StepRow<'_, T>], lhs: &mut Aligned<T>) {
        let weights = Arc::clone(&self.weights);
        let PackedScan {
            scan, bias, b_hn, ..
        } = &weights[self.index];
        let (level, mode, h, skip) = (self.level, self.mode, self.h, self.skip);
        let panels = scan.panels();
        // Shares of about an eighth of the panels: few claims, and at most an eighth to
        // wait for at the end.
        let grain = panels.div_ceil(8);
        // Through `dispatch` again: this closure is not compiled for the level (Note [SIMD
        // levels] in `super::simd`).
        let (job, from) = split(self, panels, grain, Self::back, |claimed| {
            dispatch(
                level,
                FusedStep::<'_, '_, T, false> {
                    rows: &mut *rows,
                    lhs,
                    packed: scan,
                    mode,
                    h,
                    skip,
                    bias,
                    b_hn,
                    panels: claimed,
                },
            )
        });
        let lo = (from * scan.per_panel()).min(h);
        if lo < h {
            let theirs = job.job.out.lock().expect("a worker's step never panics");
            let [_, _, p, o] = job.job.lens;
            for (j, row) in rows.iter_mut().enumerate() {
                row.next[lo..].copy_from_slice(&theirs.next[j * p + lo..(j + 1) * p]);
                row.out[lo..].copy_from_slice(&theirs.y[j * o + lo..(j + 1) * o]);
                if let (Some(cell), Some(c)) = (row.cell.as_deref_mut(), &theirs.cell) {
                    cell[lo..].copy_from_slice(&c[j * h + lo..(j + 1) * h]);
                }
            }
        }
    }

    /// The worker's panels: those `panels` claims from the back.
    fn back(&self, panels: Panels<'_>) {
        let mut out = self.out.lock().expect("only the worker writes");
        let RowOut { next, y, cell, lhs } = &mut *out;
        let PackedScan {
            scan, bias, b_hn, ..
        } = &self.weights[self.index];
        let [x_len, xw_len, p, o] = self.lens;
        let mut cells = cell.as_deref_mut().map(|c| c.chunks_mut(self.h));
        let mut rows: Vec<StepRow<'_, T>> = next
            .chunks_mut(p)
            .zip(y.chunks_mut(o))
            .enumerate()
            .map(|(j, (next, out))| StepRow {
                valid: true,
                x: &self.x[j * x_len..(j + 1) * x_len],
                xw: self.xw.as_deref().map(|v| &v[j * xw_len..(j + 1) * xw_len]),
                gate: None,
                prev: &self.prev[j * p..(j + 1) * p],
                next,
                cell: cells.as_mut().and_then(Iterator::next),
                m: None,
                out,
            })
            .collect();
        dispatch(
            self.level,
            FusedStep::<'_, '_, T, false> {
                rows: &mut rows,
                lhs,
                packed: scan,
                mode: self.mode,
                h: self.h,
                skip: self.skip,
                bias,
                b_hn,
                panels,
            },
        );
    }
}

/// `rows` rows in at most `threads` consecutive ranges of whole tiles of the widest level
/// (the last one shorter where they run out; none empty, so that rows fewer than a tile are
/// one share and run without a join): the rows of each thread of a projection.
fn row_splits(rows: usize, threads: usize) -> impl Iterator<Item = core::ops::Range<usize>> {
    let per = rows.div_ceil(threads.max(1)).div_ceil(MAX_ROWS) * MAX_ROWS;
    (0..threads.max(1))
        .map(move |i| (i * per).min(rows)..((i + 1) * per).min(rows))
        .filter(|r| !r.is_empty())
}

/// An emptied vector's allocation, for elements of another lifetime: a step's rows borrow
/// that step's buffers, so the vector that holds them cannot outlive the step, but its
/// allocation can (the standard library collects a `map` over `into_iter` in place when
/// the two element types have the same layout), which saves an allocation per step.
fn recycled<U, V>(mut v: Vec<U>) -> Vec<V> {
    v.clear();
    v.into_iter().map(|_| unreachable!("emptied")).collect()
}

/// Lanes of `T` at `S`: a constant once inlined.
#[inline(always)]
fn lanes_of<S: Simd, T: Lane>() -> usize {
    T::lanes::<S>()
}

/// The forward pass. `training` keeps the reserve (Note [Native reserve] in
/// `super::plan`) and applies dropout; `keep_last` keeps the last layer's output in it.
pub(crate) fn forward<T: Lane + Kept>(
    plan: &Plan<'_>,
    inputs: &Inputs<'_, T>,
    training: bool,
    keep_last: bool,
) -> (Outputs<T>, Option<Vec<T>>) {
    let spec = &plan.spec;
    let (batch, h, p, nd, rows) = (plan.b, plan.h, plan.p, plan.nd, plan.rows());
    let layers = spec.num_layers;
    let keep_last = training && keep_last;
    let layout = training.then(|| ReserveLayout::new(plan.desc, keep_last));
    // Tagged (Note [Reserve tag] on `crate::reserve::ReserveTag`): a few elements past the
    // layout, never read.
    let mut reserve = layout
        .as_ref()
        .map(|l| recycle::take(ReserveTag::NativeCpu.tagged_len(l.len)));
    let mut y = vec![T::ZERO; if keep_last { 0 } else { rows * nd * p }];
    let mut h_n = vec![T::ZERO; layers * nd * batch * p];
    let mut c_n = (spec.mode == RnnMode::Lstm).then(|| vec![T::ZERO; layers * nd * batch * h]);
    {
        type Blocks<'b, T> = Vec<Option<&'b mut [T]>>;
        let (mut gate_blocks, mut out_blocks): (Blocks<'_, T>, Blocks<'_, T>) =
            match (&layout, reserve.as_deref_mut()) {
                (Some(layout), Some(buf)) => {
                    let (g, o) = layout.split(&mut buf[..layout.len]);
                    (g.into_iter().map(Some).collect(), o)
                }
                _ => (Vec::new(), Vec::new()),
            };
        // Training: the outputs of finished layers, kept in the reserve.
        let mut kept: Vec<&[T]> = Vec::new();
        // Inference: the previous layer's output (every element written by its layer: a
        // padded row's output is zero; Note [Scratch reuse] in `super::recycle`).
        let mut previous: Scratch<T> = Scratch::default();
        let dropout = training && plan.desc.dropout.probability > 0.0;

        for layer in 0..layers {
            let last = layer + 1 == layers;
            let in_size = spec.layer_input_size(layer);
            let masked;
            let input: &[T] = match layer {
                0 => inputs.x,
                _ if !training => &previous,
                _ if dropout => {
                    masked = dropped(plan, layer, kept[layer - 1]);
                    &masked
                }
                _ => kept[layer - 1],
            };
            let mut block = if training {
                out_blocks[layer].take()
            } else {
                None
            };
            let mut fresh: Scratch<T> = Scratch::default();
            let target: &mut [T] = match block.as_deref_mut() {
                Some(block) => block,
                None if last => &mut y,
                None => {
                    fresh = Scratch::new(rows * nd * p);
                    &mut fresh
                }
            };
            let gates: Vec<&mut [T]> = (0..nd)
                .map(|d| match training {
                    true => gate_blocks[layer * nd + d].take().expect("one block each"),
                    false => &mut [][..],
                })
                .collect();
            let jobs: Vec<_> = (0..nd)
                .zip(gates)
                .zip(split_directions(target, nd, p))
                .map(|((d, gates), out)| {
                    let dir = Direction {
                        plan,
                        d,
                        w: plan.weights(inputs.w, layer, d),
                        input,
                        in_size,
                        h0: state_of(inputs.h0, layer * nd + d, batch * p),
                        c0: state_of(inputs.c0, layer * nd + d, batch * h),
                        threads: direction_threads(plan),
                        packed: inputs.packed.map(|all| (all, layer * nd + d)),
                    };
                    (dir, gates, out)
                })
                .collect();
            let finals = per_direction(plan, jobs, |(dir, gates, out)| {
                if training {
                    dir.run::<true>(gates, out)
                } else {
                    dir.run::<false>(gates, out)
                }
            });
            for (d, (h_last, c_last)) in finals.into_iter().enumerate() {
                let idx = layer * nd + d;
                h_n[idx * batch * p..(idx + 1) * batch * p].copy_from_slice(&h_last);
                if let (Some(c_n), Some(c_last)) = (c_n.as_mut(), c_last) {
                    c_n[idx * batch * h..(idx + 1) * batch * h].copy_from_slice(&c_last);
                }
            }
            if let Some(block) = block {
                kept.push(block);
            } else if !last {
                previous = fresh;
            }
        }
        if keep_last {
            y = kept[layers - 1].to_vec();
        }
    }
    (Outputs { y, h_n, c_n }, reserve)
}

#[cfg(test)]
mod tests {
    use super::{row_splits, MAX_ROWS};

    /// The shares of a projection's rows cover them in order, in whole tiles but the last,
    /// at most one per thread and none empty: rows fewer than a tile are one share.
    #[test]
    fn row_splits_cover_the_rows_in_whole_tiles_with_no_empty_share() {
        for threads in 1..=4 {
            for rows in 1..=3 * MAX_ROWS * threads + 1 {
                let splits: Vec<_> = row_splits(rows, threads).collect();
                assert!(
                    !splits.is_empty() && splits.len() <= threads,
                    "{rows} rows on {threads} threads: expected 1 to {threads} shares, got {}",
                    splits.len()
                );
                let mut next = 0;
                for (i, split) in splits.iter().enumerate() {
                    assert!(
                        split.start == next && !split.is_empty(),
                        "{rows} rows on {threads} threads: share {i} is {split:?}"
                    );
                    if i + 1 < splits.len() {
                        assert_eq!(split.len() % MAX_ROWS, 0, "share {i} of {rows} rows");
                    }
                    next = split.end;
                }
                assert_eq!(next, rows, "{rows} rows on {threads} threads");
            }
        }
        assert_eq!(row_splits(MAX_ROWS, 2).count(), 1);
    }
}
