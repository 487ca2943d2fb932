//! The backward pass (BPTT) on host slices.
//!
//! Per layer, from the top, and per direction (the two directions concurrently): a scan
//! against the forward's order that turns each step's output gradient into the gates'
//! pre-activation gradients (ONE fused pass, `super::cell`) and carries `dh` through ONE
//! recurrent GEMM (`dg · W_hh`); the gradients are written over the reserve's gate rows in
//! place, and summed into the bias gradients while they are in cache. Then the weight
//! gradients as GEMMs over all steps at once (`dG^T · input`, `dG^T · h_prev`), and the
//! layer input's gradient `dG · W_ih`, which, through the dropout mask, is the output
//! gradient of the layer below.
//!
//! Padded rows (Note [Padding never leaks] in [`crate::op_types`]): their gradient rows
//! are written as zeros, the carried `dh`/`dc` pass them unchanged, and the padded rows of
//! the caller's `x` and `dy` are never read (x's are zeroed in a copy before `dG^T x`).

use pulp::{Simd, WithSimd};
use rayon::prelude::*;

use super::aligned::Aligned;
use super::cell;
use super::gemm::{gemm, Mat, MatMut};
use super::packed::{Lane, Packed};
use super::plan::{dropped, row_step, Inputs};
use super::plan::{state_of, CellWeights, Plan, ReserveLayout};
use super::recycle::{Kept, Scratch};
use super::schedule::{
    add_rows, direction_threads, for_rows, gemm_threads, per_direction, scan_threads, step_threads,
    PARALLEL_WORK,
};
use super::simd::dispatch;
use crate::descriptor::GradsWanted;
use crate::layout::ParamKind;
use crate::spec::RnnMode;

/// Output gradients, on the host; `None` is zero.
pub struct OutputGrads<'a, T> {
    /// Of `y`: `[T·B, D·P]` rows.
    pub dy: Option<&'a [T]>,
    /// Of `h_n`: `[L·D, B, P]`.
    pub dh_n: Option<&'a [T]>,
    /// Of `c_n` (LSTM): `[L·D, B, H]`.
    pub dc_n: Option<&'a [T]>,
}

/// Input gradients, on the host.
pub struct Grads<T> {
    /// Of `x`, in its layout; empty when not [`GradsWanted`].
    pub dx: Vec<T>,
    /// Of `h0`: `[L·D, B, P]`.
    pub dh0: Vec<T>,
    /// Of `c0` (LSTM): `[L·D, B, H]`.
    pub dc0: Option<Vec<T>>,
    /// Of the flat canonical weights: `[params_size]`; empty when not [`GradsWanted`].
    pub dweights: Vec<T>,
}

/// One sequence at one step of the backward scan.
struct StepRow<'a, T> {
    valid: bool,
    gate: &'a mut [T],
    /// Gradient of the step's output (`P`), or for LSTM of `o ∘ tanh(c')` (`H`).
    dh: &'a [T],
    dc: Option<&'a mut [T]>,
    m: Option<&'a mut [T]>,
    h_prev: &'a [T],
    direct: Option<&'a mut [T]>,
}

/// One sequence's part of the step product `dh_prev = dg W_hh`.
struct BackRow<'a, T> {
    valid: bool,
    /// The gates' gradients `[G·H]`.
    dg: &'a [T],
    /// The carried `dh`, replaced by `dh_prev` on valid rows.
    dh: &'a mut [T],
    /// GRU: `dh ∘ z`, the part of `dh_prev` that bypasses `W_hh`.
    direct: Option<&'a [T]>,
}

/// The backward's step product over some rows, at one SIMD level.
struct BackStep<'r, 'a, T> {
    rows: &'r mut [BackRow<'a, T>],
    /// The rows laid out for the microkernel (reused from step to step).
    lhs: &'r mut Aligned<T>,
    packed: &'r Packed<T>,
}

impl<T: Lane> WithSimd for BackStep<'_, '_, T> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, simd: S) {
        let Self { rows, lhs, packed } = self;
        // A single row is read where it is (Note [One row in place] in `super::packed`).
        let ready = {
            let rows: &[BackRow<'_, T>] = rows;
            packed.ready_rows::<S>(rows.len(), |r| (&[], rows[r].dg), lhs)
        };
        let width = packed.per_panel();
        let p = packed.n;
        let epilogue = {
            #[inline(always)]
            |first: usize, count: usize, panel: usize, values: &[T]| {
                let lo = panel * width;
                let n = width.min(p - lo);
                for (i, r) in rows[first..first + count].iter_mut().enumerate() {
                    if !r.valid {
                        continue;
                    }
                    let dst = &mut r.dh[lo..lo + n];
                    dst.copy_from_slice(&values[i * width..i * width + n]);
                    if let Some(direct) = r.direct {
                        for (a, &v) in dst.iter_mut().zip(&direct[lo..lo + n]) {
                            *a += v;
                        }
                    }
                }
            }
        };
        packed.tiles_ready(simd, ready, lhs, epilogue);
    }
}

/// Some consecutive sequences `b0..b0 + nb` whose whole backward scan runs on one
/// thread: their gate rows of the reserve, step-major (`gates[t·nb + j]`: sequence
/// `b0 + j` at step `t`).
struct BackPart<'a, T> {
    b0: usize,
    nb: usize,
    gates: Vec<&'a mut [T]>,
}

/// What one part's backward scan returns.
struct PartGrads<T> {
    /// `[nb, P]`.
    dh0: Vec<T>,
    /// `[nb, H]` (LSTM).
    dc0: Option<Vec<T>>,
    /// Its share of `dW_hr` (projection; else empty).
    dw_hr: Vec<T>,
    /// Its share of the column sums of the gate gradients, over the columns that hold
    /// gradients (`G·H`, GRU `4H`: Note [Native reserve]), from which both bias gradients
    /// come (`Direction::weight_grads`); empty when the layer has no biases.
    db: Vec<T>,
}

/// One layer in one direction.
struct Direction<'a, T> {
    plan: &'a Plan<'a>,
    layer: usize,
    d: usize,
    w: CellWeights<'a, T>,
    /// The layer's input rows `[T·B, in]`, padded rows zero.
    input: &'a [T],
    in_size: usize,
    /// The layer's output rows `[T·B, D·P]` (this direction's part at `d·P`).
    output: &'a [T],
    /// Gradient of the layer's output, `[T·B, D·P]` rows; `None` is zero.
    d_out: Option<&'a [T]>,
    h0: Option<&'a [T]>,
    dh_n: Option<&'a [T]>,
    dc_n: Option<&'a [T]>,
    threads: usize,
    /// Whether the weight gradients are wanted: without them, no bias sums, no `dW_hr` and
    /// no weight-gradient GEMMs.
    weights: bool,
}

impl<T: Lane + Kept> Direction<'_, T> {
    /// The state entering step `t` of sequence `b` (Note [Variable lengths]): the previous
    /// step's output, or `h0` at the first step of the scan.
    fn h_prev(&self, t: usize, b: usize) -> &[T] {
        let plan = self.plan;
        let (p, f) = (plan.p, plan.nd * plan.p);
        match plan.previous(self.d, t, b) {
            Some(prev) => &self.output[plan.row(prev, b) * f + self.d * p..][..p],
            None => self.h0.map_or(&[][..], |h0| &h0[b * p..(b + 1) * p]),
        }
    }

    /// The scan, then the weight gradients into `dw` (this pseudo-layer's part of the flat
    /// gradient). Returns `dh0` and `dc0`.
    ///
    /// Every sequence's backward recurrence is its own, like its forward (Note [Fused step]
    /// in `super::forward`): the batch splits into one part per thread and each thread runs
    /// the whole backward scan of its part; the weight gradients, which sum over every
    /// sequence, come after, as GEMMs over all steps.
    fn run(&self, gates: &mut [T], dw: &mut [T]) -> (Vec<T>, Option<Vec<T>>) {
        let plan = self.plan;
        let (batch, h, p) = (plan.b, plan.h, plan.p);
        let width = plan.gate_width();
        let rec = plan.gh();
        let parts = scan_threads(self.threads, batch, plan.t * rec * p);
        let chunk = batch.div_ceil(parts).max(1);
        // dg W_hh with W_hh packed once (Note [Packed weights] in `super::packed`).
        let packed = Packed::columns(plan.level, self.w.w_hh, rec, p).blocked(plan.chunks);
        let finals: Vec<PartGrads<T>> = {
            let mut rows: Vec<Option<&mut [T]>> = gates.chunks_mut(width).map(Some).collect();
            let mut jobs = Vec::with_capacity(parts);
            for b0 in (0..batch).step_by(chunk) {
                let nb = chunk.min(batch - b0);
                let mut part = BackPart {
                    b0,
                    nb,
                    gates: Vec::with_capacity(plan.t * nb),
                };
                for t in 0..plan.t {
                    for b in b0..b0 + nb {
                        let row = rows[plan.row(t, b)].take();
                        part.gates.push(row.expect("each row in one part"));
                    }
                }
                jobs.push(part);
            }
            let threads = if jobs.len() > 1 { 1 } else { self.threads };
            if jobs.len() > 1 {
                jobs.into_par_iter()
                    .map(|part| self.scan(part, &packed, threads))
                    .collect()
            } else {
                jobs.into_iter()
                    .map(|part| self.scan(part, &packed, threads))
                    .collect()
            }
        };
        let mut dh = Vec::with_capacity(batch * p);
        let mut dc: Option<Vec<T>> = None;
        let mut dw_hr: Vec<T> = Vec::new();
        let mut db: Vec<T> = Vec::new();
        for part in finals {
            dh.extend_from_slice(&part.dh0);
            if let Some(part_dc) = part.dc0 {
                dc.get_or_insert_with(|| Vec::with_capacity(batch * h))
                    .extend_from_slice(&part_dc);
            }
            for (sum, share) in [(&mut dw_hr, part.dw_hr), (&mut db, part.db)] {
                if sum.is_empty() {
                    *sum = share;
                } else {
                    for (a, &v) in sum.iter_mut().zip(&share) {
                        *a += v;
                    }
                }
            }
        }
        if self.weights {
            self.weight_grads(gates, dw, &dw_hr, &db);
        }
        (dh, dc)
    }

    /// The whole backward scan of one part of the batch, on the calling thread unless
    /// `threads > 1` (one part): its `dh0`, `dc0` and its share of `dW_hr`.
    fn scan(&self, part: BackPart<'_, T>, packed: &Packed<T>, threads: usize) -> PartGrads<T> {
        let plan = self.plan;
        let (h, p, nd) = (plan.h, plan.p, plan.nd);
        let BackPart {
            b0,
            nb,
            gates: mut gate_rows,
        } = part;
        let mode = plan.spec.mode;
        // Width of the recurrent GEMM's operand: GRU's hn block enters through r ∘ (·).
        let rec = plan.gh();
        let lstm = mode == RnnMode::Lstm;
        let proj = self.w.w_hr;
        let zeros_p = vec![T::ZERO; p];

        // The carried gradients and the step's buffers start on cache lines (Note [Aligned
        // buffers] in `super::aligned`).
        let mut dh = self.dh_n.map_or_else(
            || Aligned::filled(nb * p, T::ZERO),
            |d| Aligned::from_slice(&d[b0 * p..(b0 + nb) * p]),
        );
        let mut dc = lstm.then(|| {
            self.dc_n.map_or_else(
                || Aligned::filled(nb * h, T::ZERO),
                |d| Aligned::from_slice(&d[b0 * h..(b0 + nb) * h]),
            )
        });
        let mut dht = Aligned::filled(nb * p, T::ZERO);
        let mut dm = Aligned::filled(if proj.is_some() { nb * h } else { 0 }, T::ZERO);
        let mut m = Aligned::filled(dm.len(), T::ZERO);
        let mut direct = Aligned::filled(if mode == RnnMode::Gru { nb * p } else { 0 }, T::ZERO);
        let dw_hr_wanted = proj.is_some() && self.weights;
        let mut dw_hr = vec![T::ZERO; if dw_hr_wanted { p * h } else { 0 }];
        // Columns of a gate row that hold gradients after the pass (GRU: 4H, Note [Native
        // reserve]); padded rows get zeros there.
        let grad_cols = if mode == RnnMode::Gru { 4 * h } else { rec };
        let biased = self.weights && (self.w.b_ih.is_some() || self.w.b_hh.is_some());
        let mut db = vec![T::ZERO; if biased { grad_cols } else { 0 }];
        let step_threads = step_threads(threads, nb, p, rec);
        // Per thread of a step: its rows laid out for the microkernel.
        let mut lhs: Vec<Aligned<T>> = (0..step_threads.max(1))
            .map(|_| Aligned::default())
            .collect();
        let parallel_rows = threads > 1 && nb > 1 && nb * rec * 8 >= PARALLEL_WORK;
        let f = nd * p;

        for t in plan.backward_scan(self.d) {
            let step_gates = &mut gate_rows[t * nb..(t + 1) * nb];
            // The step's output gradient: dy (valid rows only) plus the carried dh.
            for j in 0..nb {
                let b = b0 + j;
                let dst = &mut dht[j * p..(j + 1) * p];
                if !plan.valid(t, b) {
                    dst.fill(T::ZERO);
                    continue;
                }
                dst.copy_from_slice(&dh[j * p..(j + 1) * p]);
                if let Some(dy) = self.d_out {
                    let row = &dy[plan.row(t, b) * f + self.d * p..][..p];
                    for (a, &v) in dst.iter_mut().zip(row) {
                        *a += v;
                    }
                }
            }
            let dh_cell: &[T] = match proj {
                Some(w_hr) => {
                    // h' = m W_hr^T: dm = dh' W_hr.
                    gemm(
                        MatMut::rows(&mut dm, nb, h, h),
                        false,
                        Mat::rows(&dht, nb, p, p),
                        Mat::rows(w_hr, p, h, h),
                        gemm_threads(threads, nb, h, p),
                    );
                    &dm
                }
                None => &dht,
            };
            {
                let cell_w = if lstm { h } else { p };
                let mut dc_rows = dc.as_deref_mut().map(|c| c.chunks_mut(h));
                let mut m_rows = m.chunks_mut(h);
                let mut direct_rows = direct.chunks_mut(p);
                let mut items: Vec<StepRow<'_, T>> = step_gates
                    .iter_mut()
                    .enumerate()
                    .map(|(j, gate)| {
                        let b = b0 + j;
                        let valid = plan.valid(t, b);
                        StepRow {
                            valid,
                            gate,
                            dh: &dh_cell[j * cell_w..(j + 1) * cell_w],
                            dc: dc_rows.as_mut().and_then(Iterator::next),
                            m: proj.and_then(|_| m_rows.next()),
                            h_prev: if mode == RnnMode::Gru && valid {
                                let prev = self.h_prev(t, b);
                                if prev.is_empty() {
                                    &zeros_p
                                } else {
                                    prev
                                }
                            } else {
                                &[]
                            },
                            direct: direct_rows.next(),
                        }
                    })
                    .collect();
                for_rows(
                    plan.level,
                    &mut items,
                    parallel_rows,
                    #[inline(always)]
                    |r| {
                        if !r.valid {
                            // No gradient from padding: zero rows; dh and dc pass unchanged.
                            r.gate[..grad_cols].fill(T::ZERO);
                            if let Some(m) = r.m.as_deref_mut() {
                                m.fill(T::ZERO);
                            }
                            return;
                        }
                        match mode {
                            RnnMode::Lstm => {
                                let dc = r.dc.as_deref_mut().expect("LSTM carries dc");
                                match r.m.as_deref_mut() {
                                    Some(m) => {
                                        cell::lstm_backward::<T, true>(h, r.gate, r.dh, dc, m)
                                    }
                                    None => cell::lstm_backward::<T, false>(
                                        h,
                                        r.gate,
                                        r.dh,
                                        dc,
                                        &mut [],
                                    ),
                                }
                            }
                            RnnMode::Gru => {
                                let direct = r.direct.as_deref_mut().expect("GRU direct term");
                                cell::gru_backward(h, r.gate, r.dh, r.h_prev, direct)
                            }
                            RnnMode::RnnTanh => cell::rnn_backward::<T, false>(h, r.gate, r.dh),
                            RnnMode::RnnRelu => cell::rnn_backward::<T, true>(h, r.gate, r.dh),
                        }
                    },
                );
            }
            if biased {
                // The bias gradients' sums over this step's valid rows, while in cache.
                add_rows(
                    plan.level,
                    &mut db,
                    step_gates
                        .iter()
                        .enumerate()
                        .filter(|&(j, _)| plan.valid(t, b0 + j))
                        .map(|(_, gate)| &gate[..grad_cols]),
                );
            }
            if dw_hr_wanted {
                // dW_hr += dh'^T m (padded rows of both are zero).
                gemm(
                    MatMut::rows(&mut dw_hr, p, h, h),
                    true,
                    Mat::rows(&dht, nb, p, p).t(),
                    Mat::rows(&m, nb, h, h),
                    gemm_threads(threads, p, h, nb),
                );
            }
            // dh_prev = dg W_hh (+ GRU's direct term), `dg` the first `G·H` gradients of
            // each gate row; padded rows keep the carried dh.
            let mut rows: Vec<BackRow<'_, T>> = dh
                .chunks_mut(p)
                .zip(step_gates.iter())
                .enumerate()
                .map(|(j, (dh, gate))| BackRow {
                    valid: plan.valid(t, b0 + j),
                    dg: &gate[..rec],
                    dh,
                    direct: (mode == RnnMode::Gru).then(|| &direct[j * p..(j + 1) * p]),
                })
                .collect();
            let chunk = nb.div_ceil(step_threads).max(1);
            let run = |(rows, lhs): (&mut [BackRow<'_, T>], &mut Aligned<T>)| {
                dispatch(plan.level, BackStep { rows, lhs, packed })
            };
            if step_threads > 1 {
                rows.par_chunks_mut(chunk)
                    .zip(lhs.par_iter_mut())
                    .for_each(run);
            } else {
                run((&mut rows, &mut lhs[0]));
            }
        }
        PartGrads {
            dh0: dh.to_vec(),
            dc0: dc.map(|c| c.to_vec()),
            dw_hr,
            db,
        }
    }

    /// Weight and bias gradients of this pseudo-layer from the gate gradients `gates`, the
    /// parts' `dW_hr` and the column sums `db` of the gradient columns (`PartGrads`).
    ///
    /// The bias gradients are those sums: `b_ih` and `b_hh` enter every gate alike, so
    /// their gradients are the same sums, except GRU's `n` block, where `b_in`'s is the sum
    /// of column block 3 and `b_hn`'s of block 2 (Note [Native reserve]). The sums are taken
    /// during the scan, on every part's thread while each step's rows are in cache; summed
    /// here over all rows they were a serial pass (twice) over the whole gate block, which
    /// on two threads left the other thread waiting.
    fn weight_grads(&self, gates: &[T], dw: &mut [T], dw_hr: &[T], db: &[T]) {
        let plan = self.plan;
        let (h, p, gh, rows) = (plan.h, plan.p, plan.gh(), plan.rows());
        let width = plan.gate_width();
        let gru = plan.spec.mode == RnnMode::Gru;
        let base = plan.params_range(self.layer, self.d).start;
        let entry = |kind| {
            plan.layout
                .entry(self.layer, self.d, kind)
                .map(|e| e.offset - base..e.offset - base + e.len())
        };
        // The gradient blocks of the input projection: GRU's n block sits at 3H (Note
        // [Native reserve] and `cell::gru_backward`), every other block in place.
        let in_blocks: Vec<(usize, usize, usize)> = if gru {
            vec![(0, 0, 2 * h), (3 * h, 2 * h, h)]
        } else {
            vec![(0, 0, gh)]
        };
        // dW_hh = dG_rec^T · h_prev, h_prev gathered per row (zeros at padded rows and
        // where the scan starts from no h0). Every element is written, so the buffer may
        // be a stale one (Note [Scratch reuse]); its rows split over the threads.
        let mut h_prev: Scratch<T> = Scratch::new(rows * p);
        let gather = |(first, block): (usize, &mut [T])| {
            for (i, dst) in block.chunks_exact_mut(p).enumerate() {
                let (t, b) = row_step(plan, first + i);
                let src = if plan.valid(t, b) {
                    self.h_prev(t, b)
                } else {
                    &[]
                };
                match src.is_empty() {
                    true => dst.fill(T::ZERO),
                    false => dst.copy_from_slice(src),
                }
            }
        };
        let per_thread = rows.div_ceil(self.threads.max(1)).max(1);
        if self.threads > 1 && rows * p >= PARALLEL_WORK {
            h_prev
                .par_chunks_mut(per_thread * p)
                .enumerate()
                .for_each(|(c, block)| gather((c * per_thread, block)));
        } else {
            gather((0, &mut h_prev));
        }
        // The GEMMs, as (destination `[len, n]`, first gate column, `len`, source `[rows,
        // n]`, `n`): dW_ih's blocks (`dG_block^T · input`), then dW_hh.
        let range_ih = entry(ParamKind::WeightIh);
        let range_hh = entry(ParamKind::WeightHh).expect("W_hh");
        let (dw_ih, dw_hh): (&mut [T], &mut [T]) = match &range_ih {
            // The flat layout puts W_ih before W_hh (`crate::layout`).
            Some(ih) => {
                assert!(ih.end <= range_hh.start, "expected W_ih before W_hh");
                let (head, tail) = dw.split_at_mut(range_hh.start);
                (&mut head[ih.clone()], &mut tail[..range_hh.len()])
            }
            None => (&mut [], &mut dw[range_hh]),
        };
        let mut tasks: Vec<WeightGemm<'_, T>> = Vec::with_capacity(3);
        if range_ih.is_some() {
            let mut rest = dw_ih;
            let mut at = 0;
            for &(col, row, len) in &in_blocks {
                let (_, tail) = core::mem::take(&mut rest).split_at_mut((row - at) * self.in_size);
                let (dst, tail) = tail.split_at_mut(len * self.in_size);
                rest = tail;
                at = row + len;
                tasks.push(WeightGemm {
                    dst,
                    col,
                    len,
                    src: self.input,
                    n: self.in_size,
                });
            }
        }
        tasks.push(WeightGemm {
            dst: dw_hh,
            col: 0,
            len: gh,
            src: &h_prev,
            n: p,
        });
        weight_gemms(gates, rows, width, tasks, self.threads);
        if let Some(range) = entry(ParamKind::BiasIh) {
            let db_ih = &mut dw[range];
            for &(col, row, len) in &in_blocks {
                db_ih[row..row + len].copy_from_slice(&db[col..col + len]);
            }
        }
        if let Some(range) = entry(ParamKind::BiasHh) {
            dw[range].copy_from_slice(&db[..gh]);
        }
        if let Some(range) = entry(ParamKind::WeightHr) {
            dw[range].copy_from_slice(dw_hr);
        }
    }
}

/// One GEMM of the weight gradients over all steps: `dst = dG[:, col..col + len]^T · src`,
/// `dst` `[len, n]`, `src` `[rows, n]`.
pub(super) struct WeightGemm<'a, T> {
    pub(super) dst: &'a mut [T],
    pub(super) col: usize,
    pub(super) len: usize,
    pub(super) src: &'a [T],
    pub(super) n: usize,
}

/// The weight-gradient GEMMs of one pseudo-layer (`dW_ih`'s blocks and `dW_hh`), from the
/// gate gradients `gates` (`rows` rows of `width`), on `threads` threads.
///
/// # Note [Weight gradients by rows]
///
/// Each GEMM's destination rows split into one share per thread, and each thread runs its
/// share of every GEMM on its own (`gemm` on one thread), with no join between them. So
/// the threads carry equal work whatever the GEMMs' widths (`I` and `P` differ above layer
/// 0 of a bidirectional stack, and `P` with a projection), and the two threads no longer
/// meet inside each GEMM. Before, each GEMM ran alone on all the threads, split by the
/// `gemm` crate. Measured on an Intel Xeon (Granite Rapids class, 2 threads; docs/
/// BENCHMARKS.md, "the weight gradients split by rows"): the two GEMMs of an LSTM at H =
/// I = 256 over 1600 rows took 6.18–6.19 ms this way against 7.41–7.54 before, on warm
/// buffers, and a whole training step 0.93–0.99× its time before (one direction; LSTM and
/// GRU, H32 to H512, B1 to B64), in runs alternated inside one process. Each GEMM's sums
/// are the ones the `gemm` crate forms for its shape; a test checks 2, 3 and 4 threads
/// against one.
pub(super) fn weight_gemms<T: Lane>(
    gates: &[T],
    rows: usize,
    width: usize,
    tasks: Vec<WeightGemm<'_, T>>,
    threads: usize,
) {
    let work: usize = tasks.iter().map(|t| t.len * t.n * rows).sum();
    let threads = gemm_threads(threads, work, 1, 1);
    let run = |t: WeightGemm<'_, T>| {
        gemm(
            MatMut::rows(t.dst, t.len, t.n, t.n),
            false,
            Mat::rows(&gates[t.col..], rows, t.len, width).t(),
            Mat::rows(t.src, rows, t.n, t.n),
            1,
        );
    };
    if threads <= 1 {
        tasks.into_iter().for_each(run);
        return;
    }
    // Thread `i`'s share: rows `i·len/threads..(i+1)·len/threads` of every GEMM.
    let mut shares: Vec<Vec<WeightGemm<'_, T>>> = (0..threads).map(|_| Vec::new()).collect();
    for task in tasks {
        let WeightGemm {
            mut dst,
            col,
            len,
            src,
            n,
        } = task;
        let mut first = 0;
        for (i, share) in shares.iter_mut().enumerate() {
            let last = (i + 1) * len / threads;
            let (mine, rest) = core::mem::take(&mut dst).split_at_mut((last - first) * n);
            dst = rest;
            if last > first {
                share.push(WeightGemm {
                    dst: mine,
                    col: col + first,
                    len: last - first,
                    src,
                    n,
                });
            }
            first = last;
        }
    }
    shares
        .into_par_iter()
        .with_max_len(1)
        .for_each(|share| share.into_iter().for_each(run));
}

/// `dX += dG · W_ih` for one direction (or, with skip input, the sum of its gate blocks);
/// `dX = dG · W_ih` when `overwrite`, for the first direction (Note [Fresh gradient pages]).
fn input_grad<T: Lane>(
    plan: &Plan<'_>,
    gates: &[T],
    w: &CellWeights<'_, T>,
    dx: &mut [T],
    in_size: usize,
    overwrite: bool,
) {
    let (h, gh, rows) = (plan.h, plan.gh(), plan.rows());
    let width = plan.gate_width();
    let gru = plan.spec.mode == RnnMode::Gru;
    let blocks: Vec<(usize, usize, usize)> = if gru {
        vec![(0, 0, 2 * h), (3 * h, 2 * h, h)]
    } else {
        vec![(0, 0, gh)]
    };
    match w.w_ih {
        Some(w_ih) => {
            for (i, &(col, row, len)) in blocks.iter().enumerate() {
                gemm(
                    MatMut::rows(dx, rows, in_size, in_size),
                    !(overwrite && i == 0),
                    Mat::rows(&gates[col..], rows, len, width),
                    Mat::rows(&w_ih[row * in_size..], len, in_size, in_size),
                    gemm_threads(plan.threads, rows, in_size, len),
                );
            }
        }
        None => {
            // Skip input: x entered every gate block.
            if overwrite {
                dx.fill(T::ZERO);
            }
            for (dst, row) in dx.chunks_mut(in_size).zip(gates.chunks(width)) {
                for &(col, _, len) in &blocks {
                    for block in row[col..col + len].chunks(h) {
                        for (a, &v) in dst.iter_mut().zip(block) {
                            *a += v;
                        }
                    }
                }
            }
        }
    }
}

/// The backward pass. `reserve` is the training forward's (Note [Native reserve] in
/// `super::plan`), overwritten with gradients; `y` is the op's output (read only when the
/// reserve does not keep the last layer's output).
///
/// # Note [Fresh gradient pages]
///
/// The input gradient of each layer is a new buffer of `T·B·I` values, most often memory
/// the allocator has just mapped, whose pages the kernel maps in at their first touch.
/// Touched first by a read (a GEMM that adds into its destination) a page is mapped to the
/// shared zero page, and the write that follows faults again, copies it, and flushes the
/// TLB of every thread of the process (an interrupt to each other core, expensive under a
/// hypervisor). So the first direction's GEMM writes `dG · W_ih` without reading, and only
/// the second direction (and GRU's second block) adds into it. LSTM H = 512, B = 64,
/// T = 50, training on two threads, the kernel alone: page faults were 10% of the CPU
/// samples (6% in copying the zero page, 3.5% in the TLB flushes) and are 2% after, all
/// first writes; the call took 106–121 ms before and 101–107 after (three alternated
/// rounds). `kernel_times` with `FAULTS=1` counts the faults.
///
/// # Note [Gradients not wanted]
///
/// Of the backward's four GEMMs over all steps per layer and direction, three produce
/// nothing but a gradient the caller may not read: `dW_ih = dG^T · input` and
/// `dW_hh = dG^T · h_prev` give the weights' gradient, and at layer 0, `dG · W_ih` gives
/// `x`'s. A model whose LSTM reads data (not an embedding's output) does not want `x`'s
/// gradient; a frozen recurrent layer under a trained one does not want the weights'.
/// Autodiff knows which of the op's parents are tracked, and [`GradsWanted`] passes that down:
/// each unwanted gradient's GEMMs are skipped and it is returned empty. What every other
/// gradient needs is always computed: the scan (`dh0`, `dc0` and the gates' gradients),
/// and the input gradient of every layer above 0, which carries the gradient down. Without
/// the weights' gradient, the per-step bias sums and `dW_hr` are skipped too, and so are
/// the zeroed copy of a padded `x` and the dropout masks of the layer inputs, which only
/// `dW_ih` reads. The other gradients are the same values either way (tested in
/// `tests/kernel.rs`).
pub(crate) fn backward<T: Lane + Kept>(
    plan: &Plan<'_>,
    inputs: &Inputs<'_, T>,
    y: &[T],
    reserve: &mut [T],
    keep_last: bool,
    grads: &OutputGrads<'_, T>,
    wanted: GradsWanted,
) -> Grads<T> {
    let spec = &plan.spec;
    let (batch, h, p, nd, rows) = (plan.b, plan.h, plan.p, plan.nd, plan.rows());
    let layers = spec.num_layers;
    let layout = ReserveLayout::new(plan.desc, keep_last);
    let (gate_blocks, out_blocks) = layout.split(reserve);
    let mut gate_blocks: Vec<Option<&mut [T]>> = gate_blocks.into_iter().map(Some).collect();
    let outputs: Vec<&[T]> = out_blocks
        .into_iter()
        .map(|o| match o {
            Some(block) => &*block,
            None => y,
        })
        .collect();
    let dw_len = if wanted.weights {
        plan.layout.params_size()
    } else {
        0
    };
    let mut dweights = vec![T::ZERO; dw_len];
    let mut dw_parts: Vec<Option<&mut [T]>> = {
        let mut parts = Vec::new();
        let mut rest = &mut dweights[..];
        let mut start = 0;
        for idx in 0..spec.num_pseudo_layers() {
            if !wanted.weights {
                parts.push(Some(&mut [][..]));
                continue;
            }
            let range = plan.params_range(idx / nd, idx % nd);
            let (head, tail) = core::mem::take(&mut rest).split_at_mut(range.end - start);
            parts.push(Some(&mut head[range.start - start..]));
            rest = tail;
            start = range.end;
        }
        parts
    };
    let mut dh0 = vec![T::ZERO; layers * nd * batch * p];
    let mut dc0 = (spec.mode == RnnMode::Lstm).then(|| vec![T::ZERO; layers * nd * batch * h]);
    let dropout = plan.desc.dropout.probability > 0.0;
    // Layer 0's input: the caller's x with padded rows zeroed, so that NaN there cannot
    // reach dW_ih through 0 · NaN. Only `dW_ih` reads it.
    let clean_x;
    let x: &[T] = if plan.padded && wanted.weights {
        let mut copy = inputs.x.to_vec();
        for (row, dst) in copy.chunks_mut(spec.d_input).enumerate() {
            let (t, b) = row_step(plan, row);
            if !plan.valid(t, b) {
                dst.fill(T::ZERO);
            }
        }
        clean_x = copy;
        &clean_x
    } else {
        inputs.x
    };
    let mut d_out: Option<Vec<T>> = None;
    let mut dx = Vec::new();
    for layer in (0..layers).rev() {
        let in_size = spec.layer_input_size(layer);
        let masked;
        let input: &[T] = match layer {
            0 => x,
            // Only dW_ih reads the input (Note [Gradients not wanted]).
            _ if dropout && wanted.weights => {
                masked = dropped(plan, layer, outputs[layer - 1]);
                &masked
            }
            _ => outputs[layer - 1],
        };
        let upstream: Option<&[T]> = match (&d_out, layer + 1 == layers) {
            (_, true) => grads.dy,
            (Some(d), false) => Some(d),
            (None, false) => None,
        };
        let jobs: Vec<_> = (0..nd)
            .map(|d| {
                let dir = Direction {
                    plan,
                    layer,
                    d,
                    w: plan.weights(inputs.w, layer, d),
                    input,
                    in_size,
                    output: outputs[layer],
                    d_out: upstream,
                    h0: state_of(inputs.h0, layer * nd + d, batch * p),
                    dh_n: state_of(grads.dh_n, layer * nd + d, batch * p),
                    dc_n: state_of(grads.dc_n, layer * nd + d, batch * h),
                    threads: direction_threads(plan),
                    weights: wanted.weights,
                };
                let gates = gate_blocks[layer * nd + d].take().expect("one block each");
                let dw = dw_parts[layer * nd + d].take().expect("one part each");
                (dir, gates, dw)
            })
            .collect();
        let results = per_direction(plan, jobs, |(dir, gates, dw)| {
            let (dh, dc) = dir.run(gates, dw);
            (dir, gates, dh, dc)
        });
        // The layer input's gradient: always below the top layer, where it carries the
        // gradient down; at layer 0 only when `x`'s is wanted.
        let input_wanted = layer > 0 || wanted.x;
        // Zeroed, but written before it is read (Note [Fresh gradient pages]).
        let mut d_in = vec![T::ZERO; if input_wanted { rows * in_size } else { 0 }];
        for (d, (dir, gates, dh, dc)) in results.into_iter().enumerate() {
            let idx = layer * nd + d;
            dh0[idx * batch * p..(idx + 1) * batch * p].copy_from_slice(&dh);
            if let (Some(dc0), Some(dc)) = (dc0.as_mut(), dc) {
                dc0[idx * batch * h..(idx + 1) * batch * h].copy_from_slice(&dc);
            }
            if input_wanted {
                input_grad(plan, gates, &dir.w, &mut d_in, in_size, d == 0);
            }
        }
        if layer == 0 {
            dx = d_in;
        } else {
            if dropout {
                d_in = dropped(plan, layer, &d_in);
            }
            d_out = Some(d_in);
        }
    }
    Grads {
        dx,
        dh0,
        dc0,
        dweights,
    }
}
