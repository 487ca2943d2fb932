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
//! the reserve keeps.
//!
//! - **Threads**: a step's rows split into one contiguous chunk per thread when the batch
//!   has at least 4 rows and the step at least 2^17 multiply-adds; each thread runs the
//!   product and the cell update of its rows, so the only synchronisation is the end of
//!   the step. The two directions of a layer run concurrently, each with half the threads.
//! - **Padding**: a row past its sequence's length holds its state and writes a zero
//!   output (Note [Padding never leaks] in [`crate::op_types`]); its product is computed
//!   with its tile and ignored.
//! - **Projection** (LSTM `proj_size`): the cell writes `o ∘ tanh(c')`, then one GEMM per
//!   step projects the rows and the select runs on the result.

use pulp::{Simd, WithSimd};
use rayon::prelude::*;

use super::cell;
use super::float::Float;
use super::gemm::{gemm, Mat, MatMut};
use super::packed::{Lane, Packed, SLOTS};
use super::plan::{dropped, state_of, step_rows, CellWeights, Inputs, Plan, ReserveLayout};
use super::schedule::{direction_threads, gemm_threads, per_direction, step_threads};
use super::simd::dispatch;
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

/// One sequence at one step: what the fused step reads and writes.
struct StepRow<'a, T> {
    valid: bool,
    /// The step's input row (`in` wide).
    x: &'a [T],
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
    /// The weights packed by the caller, if it has them.
    packed: Option<&'a Packed<T>>,
}

/// What a scan carries from step to step, and its per-step scratch.
struct Scan<'a, T> {
    /// The state entering the step, `[B, P]`, and the one leaving it.
    state: Vec<T>,
    next: Vec<T>,
    /// The cell state `[B, H]` (LSTM), updated in place.
    cell: Option<Vec<T>>,
    /// Projection: `o ∘ tanh(c')` `[B, H]` and its projection `[B, P]`.
    m: Vec<T>,
    projected: Vec<T>,
    /// The direction's output rows.
    out: OutRows<'a, T>,
    /// Per thread of a step: its rows laid out for the microkernel (`Packed::lay_out_rows`).
    lhs: Vec<Vec<T>>,
}

impl<T: Lane> Direction<'_, T> {
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
        let proj = self.w.w_hr.is_some();
        let mut scan = Scan {
            state: self
                .h0
                .map_or_else(|| vec![T::ZERO; batch * p], <[T]>::to_vec),
            next: vec![T::ZERO; batch * p],
            cell: (plan.spec.mode == RnnMode::Lstm).then(|| {
                self.c0
                    .map_or_else(|| vec![T::ZERO; batch * h], <[T]>::to_vec)
            }),
            m: vec![T::ZERO; if proj { batch * h } else { 0 }],
            projected: vec![T::ZERO; if proj { batch * p } else { 0 }],
            out,
            lhs: (0..self.threads.max(1)).map(|_| Vec::new()).collect(),
        };
        let (bias, b_hn) = biases(plan, &self.w);
        let owned;
        let packed = match self.packed {
            Some(packed) => packed,
            None => {
                owned = Packed::gates(
                    plan.level,
                    self.w.w_ih.map(|w| (w, self.in_size)),
                    self.w.w_hh,
                    plan.g,
                    h,
                    p,
                );
                &owned
            }
        };
        let width = plan.gate_width();
        let mut rows: Vec<&mut [T]> = if TRAIN {
            gates.chunks_mut(width).collect()
        } else {
            Vec::new()
        };
        for t in plan.scan(self.d) {
            let gate_rows = if TRAIN {
                step_rows(plan, &mut rows, t)
                    .into_iter()
                    .map(|r| Some(&mut **r))
                    .collect()
            } else {
                Vec::new()
            };
            self.step::<TRAIN>(&mut scan, t, gate_rows, &bias, &b_hn, packed);
        }
        (scan.state, scan.cell)
    }

    /// One step (Note [Fused step]): the pre-activations and the cell update, tile by
    /// tile, over the rows of each thread; then (LSTM projection) the projection and the
    /// select.
    #[allow(clippy::too_many_arguments)]
    fn step<const TRAIN: bool>(
        &self,
        scan: &mut Scan<'_, T>,
        t: usize,
        gate_rows: Vec<Option<&mut [T]>>,
        bias: &[T],
        b_hn: &[T],
        packed: &Packed<T>,
    ) {
        let plan = self.plan;
        let (batch, h, p, gh) = (plan.b, plan.h, plan.p, plan.gh());
        let in_size = self.in_size;
        let proj = self.w.w_hr;
        {
            let mut m_rows = scan.m.chunks_mut(h);
            let mut c_rows = scan.cell.as_deref_mut().map(|c| c.chunks_mut(h));
            let mut gate_rows = gate_rows.into_iter();
            let state = &scan.state;
            let mut items: Vec<StepRow<'_, T>> = step_rows(plan, &mut scan.out, t)
                .into_iter()
                .zip(scan.next.chunks_mut(p))
                .enumerate()
                .map(|(b, (out, next))| StepRow {
                    valid: plan.valid(t, b),
                    x: &self.input[plan.row(t, b) * in_size..][..in_size],
                    gate: gate_rows.next().flatten(),
                    prev: &state[b * p..(b + 1) * p],
                    next,
                    cell: c_rows.as_mut().and_then(Iterator::next),
                    m: proj.and_then(|_| m_rows.next()),
                    out,
                })
                .collect();
            let threads = step_threads(self.threads, batch, gh, p + in_size);
            let chunk = batch.div_ceil(threads).max(1);
            let skip = self.w.w_ih.is_none();
            let run = |(rows, lhs): (&mut [StepRow<'_, T>], &mut Vec<T>)| {
                dispatch(
                    plan.level,
                    FusedStep::<'_, '_, T, TRAIN> {
                        rows,
                        lhs,
                        packed,
                        mode: plan.spec.mode,
                        h,
                        skip,
                        bias,
                        b_hn,
                    },
                )
            };
            if threads > 1 {
                items
                    .par_chunks_mut(chunk)
                    .zip(scan.lhs.par_iter_mut())
                    .for_each(run);
            } else {
                run((&mut items, &mut scan.lhs[0]));
            }
        }
        if let Some(w_hr) = proj {
            // h' = (o ∘ tanh c') W_hr^T for every row, then the select.
            gemm(
                MatMut::rows(&mut scan.projected, batch, p, p),
                false,
                Mat::rows(&scan.m, batch, h, h),
                Mat::rows(w_hr, p, h, h).t(),
                gemm_threads(self.threads, batch, p, h),
            );
            for (b, out) in step_rows(plan, &mut scan.out, t).into_iter().enumerate() {
                if plan.valid(t, b) {
                    let next_b = &mut scan.next[b * p..(b + 1) * p];
                    next_b.copy_from_slice(&scan.projected[b * p..(b + 1) * p]);
                    out.copy_from_slice(next_b);
                }
            }
        }
        core::mem::swap(&mut scan.state, &mut scan.next);
    }
}

/// The fused step over some rows of the batch, at one SIMD level (Note [Fused step]).
struct FusedStep<'r, 'a, T, const TRAIN: bool> {
    rows: &'r mut [StepRow<'a, T>],
    /// The rows laid out for the microkernel (reused from step to step).
    lhs: &'r mut Vec<T>,
    packed: &'r Packed<T>,
    mode: RnnMode,
    h: usize,
    /// Skip input: the input row is added to every gate.
    skip: bool,
    bias: &'r [T],
    b_hn: &'r [T],
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
        } = self;
        // Past a sequence's end: hold the state, output zero (Note [Padding never leaks] in
        // `crate::reference`); the product of such a row is computed with the rest of its
        // tile and ignored.
        for r in rows.iter_mut().filter(|r| !r.valid) {
            r.next.copy_from_slice(r.prev);
            r.out.fill(T::ZERO);
        }
        {
            let rows: &[StepRow<'_, T>] = rows;
            packed.lay_out_rows::<S>(rows.len(), |r| (rows[r].x, rows[r].prev), lhs);
        }
        let lanes = lanes_of::<S, T>();
        let per_panel = packed.per_panel();
        let width = SLOTS * lanes;
        packed.tiles(
            simd,
            lhs,
            rows.len(),
            #[inline(always)]
            |first, count, panel, values| {
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
                    // A whole panel's units: a constant count (the level's lanes, or four
                    // times that for the one-gate RNNs) for which the compiler emits straight
                    // vector code; the last panel of an `H` that is not a multiple runs the
                    // same loop with its count.
                    let full = lanes * if mode.num_gates() == 1 { SLOTS } else { 1 };
                    let skip_x = if skip { Some(r.x) } else { None };
                    macro_rules! units {
                        ($n:expr) => {
                            cell::Units {
                                h,
                                lo,
                                n: $n,
                                acc,
                                skip: skip_x,
                                bias,
                                gates: r.gate.as_deref_mut(),
                                out,
                            }
                        };
                    }
                    macro_rules! cell {
                        ($f:expr) => {
                            if n == full {
                                $f(units!(full))
                            } else {
                                $f(units!(n))
                            }
                        };
                    }
                    match mode {
                        RnnMode::Lstm => {
                            let c = r.cell.as_deref_mut().expect("LSTM carries c");
                            cell!(|u| cell::lstm_forward::<T, TRAIN>(u, c))
                        }
                        RnnMode::Gru => {
                            let prev = r.prev;
                            cell!(|u| cell::gru_forward::<T, TRAIN>(u, b_hn, prev))
                        }
                        RnnMode::RnnTanh => cell!(cell::rnn_forward::<T, TRAIN, false>),
                        RnnMode::RnnRelu => cell!(cell::rnn_forward::<T, TRAIN, true>),
                    }
                    if !projected {
                        r.out[lo..lo + n].copy_from_slice(&r.next[lo..lo + n]);
                    }
                }
            },
        );
    }
}

/// Lanes of `T` at `S`: a constant once inlined.
#[inline(always)]
fn lanes_of<S: Simd, T: Lane>() -> usize {
    T::lanes::<S>()
}

/// The forward pass. `training` keeps the reserve (Note [Native reserve] in
/// `super::plan`) and applies dropout; `keep_last` keeps the last layer's output in it.
pub(crate) fn forward<T: Lane>(
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
        .map(|l| vec![T::ZERO; ReserveTag::NativeCpu.tagged_len(l.len)]);
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
        // Inference: the previous layer's output.
        let mut previous: Vec<T> = Vec::new();
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
            let mut fresh: Vec<T> = Vec::new();
            let target: &mut [T] = match block.as_deref_mut() {
                Some(block) => block,
                None if last => &mut y,
                None => {
                    fresh = vec![T::ZERO; rows * nd * p];
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
                        packed: inputs.packed.map(|all| &all[layer * nd + d]),
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
