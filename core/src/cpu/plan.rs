//! What the forward and the backward share: sizes, the row order of sequence tensors, the
//! scan order of each direction, the weights of each pseudo-layer, and the reserve layout.
//!
//! # Note [Rows]
//!
//! The kernel works in the caller's layout, without transposing anything: a sequence
//! tensor (`x`, `y`, a layer's output, the reserve's gate rows) is a matrix of `T·B` rows,
//! row `b·T + t` for batch-first calls and `t·B + b` otherwise. The GEMMs over all steps
//! do not care about the order of rows; the per-step code picks the `B` rows of step `t`
//! through [`Plan::row`].
//!
//! # Note [Native reserve]
//!
//! A training forward keeps one flat buffer (a 1-D tensor of the compute dtype), made of,
//! per layer `l`: for each direction, the gate rows `[T·B, W]`, then, for every layer but
//! the last, the layer's output `[T·B, D·P]` before dropout. Row width `W`, per mode:
//!
//! | mode | row (each block `H` wide) | `W` |
//! |------|---------------------------|-----|
//! | LSTM | `i, f, g, o` (activated), `c` entering the step | `5H` |
//! | GRU  | `r, z, n` (activated), `R_n h + b_Rn` | `4H` |
//! | RNN  | `h'` | `H` |
//!
//! The last layer's output is the op's output `y`, which the backward receives anyway;
//! for F16/BF16 inputs `y` is rounded, so the F32 output of the last layer is kept too.
//! Nothing else is kept: the state entering a step is the previous step's output (or
//! `h0`), dropout masks are recomputed from the seed (Note [Dropout masks] in
//! `crate::dropout`), and `tanh(c')` is recomputed from the gates. Padded rows are never
//! read. The backward overwrites the gate rows with the gates' gradients in place, so a
//! training step needs no second buffer of that size, and the front-end hands the buffer
//! back for the next training forward (Note [Reserve reuse] in `super::recycle`). Size in
//! elements:
//!
//! `Σ_l (D·T·B·W + [l < L-1 or half] T·B·D·P)`, see [`reserve_len`].

use core::ops::Range;
use std::sync::Arc;

use super::float::Float;
use super::packed::{Lane, Packed};
use super::projection::{ForcedChunks, InputProjection};
use super::simd::SimdLevel;
use crate::descriptor::{RnnDescriptor, Sizes};
use crate::dropout::LayerMask;
use crate::layout::{ParamKind, RnnLayout};
use crate::spec::{RnnMode, RnnSpec};

/// Sizes and orders of one call.
#[derive(Debug)]
pub(crate) struct Plan<'d> {
    pub(crate) desc: &'d RnnDescriptor,
    pub(crate) spec: RnnSpec,
    pub(crate) layout: RnnLayout,
    /// `T`, `B`, `H`, `P`, `D`, `G` (the plan derefs to them).
    pub(crate) sizes: Sizes,
    /// Valid length of each sequence.
    pub(crate) lengths: Vec<usize>,
    /// Whether some sequence is shorter than `T`.
    pub(crate) padded: bool,
    /// Threads of rayon's pool this call may use.
    pub(crate) threads: usize,
    /// The SIMD level of every loop of the call (Note [SIMD levels] in `super::simd`).
    pub(crate) level: SimdLevel,
    /// The input projection forced on the calling thread, if any (Note [Input projection]
    /// in `super::projection`).
    pub(crate) projection: Option<InputProjection>,
    /// The chunk choices forced on the calling thread (Notes [Reduction chunks] and [Next
    /// chunk ahead] in `super::packed`).
    pub(crate) chunks: ForcedChunks,
    /// The block of steps projected at once forced on the calling thread, if any (Note
    /// [Input projection] in `super::projection`).
    pub(crate) projection_block: Option<usize>,
    /// Whether inference steps of a few rows split over two threads, forced on the calling
    /// thread, if so
    /// (Note [A step over two threads] in `super::split`).
    pub(crate) step_split: Option<bool>,
}

impl core::ops::Deref for Plan<'_> {
    type Target = Sizes;

    fn deref(&self) -> &Sizes {
        &self.sizes
    }
}

impl<'d> Plan<'d> {
    pub(crate) fn new(desc: &'d RnnDescriptor) -> Self {
        let spec = desc.spec;
        let lengths: Vec<usize> = (0..desc.batch_size)
            .map(|b| desc.seq_length_of(b))
            .collect();
        Self {
            desc,
            spec,
            layout: RnnLayout::new(spec),
            sizes: desc.sizes(),
            padded: lengths.iter().any(|&len| len < desc.seq_length),
            lengths,
            threads: rayon::current_num_threads().max(1),
            level: SimdLevel::current(),
            projection: InputProjection::forced(),
            chunks: ForcedChunks::current(),
            projection_block: super::projection::forced_projection_block(),
            step_split: super::split::forced_step_split(),
        }
    }

    /// The row of step `t` of sequence `b` (Note [Rows]).
    pub(crate) fn row(&self, t: usize, b: usize) -> usize {
        if self.desc.batch_first {
            b * self.t + t
        } else {
            t * self.b + b
        }
    }

    /// Whether step `t` of sequence `b` is valid (Note [Variable lengths] in
    /// `crate::reference`).
    pub(crate) fn valid(&self, t: usize, b: usize) -> bool {
        t < self.lengths[b]
    }

    /// The steps in the order direction `d` processes them.
    pub(crate) fn scan(&self, d: usize) -> Box<dyn Iterator<Item = usize>> {
        if d == 0 {
            Box::new(0..self.t)
        } else {
            Box::new((0..self.t).rev())
        }
    }

    /// The steps in the order the backward pass of direction `d` processes them: against
    /// the forward's.
    pub(crate) fn backward_scan(&self, d: usize) -> Box<dyn Iterator<Item = usize>> {
        self.scan(1 - d)
    }

    /// For a valid step `t` of sequence `b` in direction `d`: the step whose output is the
    /// state entering `t`, or `None` when that state is the initial one (the first step of
    /// the scan: `t = 0` forward, `t = len - 1` in reverse, where the reverse direction
    /// starts at each sequence's own last step).
    pub(crate) fn previous(&self, d: usize, t: usize, b: usize) -> Option<usize> {
        if d == 0 {
            t.checked_sub(1)
        } else {
            (t + 1 < self.lengths[b]).then_some(t + 1)
        }
    }

    /// Row width `W` of the reserve's gate rows (Note [Native reserve]).
    pub(crate) fn gate_width(&self) -> usize {
        match self.spec.mode {
            RnnMode::Lstm => 5 * self.h,
            RnnMode::Gru => 4 * self.h,
            RnnMode::RnnTanh | RnnMode::RnnRelu => self.h,
        }
    }

    /// The weights of pseudo-layer (`layer`, `d`) inside the flat params `w`.
    pub(crate) fn weights<'w, T>(&self, w: &'w [T], layer: usize, d: usize) -> CellWeights<'w, T> {
        let get = |kind| {
            self.layout
                .entry(layer, d, kind)
                .map(|e| &w[e.offset..e.offset + e.len()])
        };
        CellWeights {
            w_ih: get(ParamKind::WeightIh),
            w_hh: get(ParamKind::WeightHh).expect("every pseudo-layer has W_hh"),
            b_ih: get(ParamKind::BiasIh),
            b_hh: get(ParamKind::BiasHh),
            w_hr: get(ParamKind::WeightHr),
        }
    }

    /// Packs `cw` for its scan at the plan's level: `[W_ih | W_hh]`, or `W_hh` alone and
    /// `W_ih` apart for the projection ahead when the scan projects its input ahead
    /// (`ahead`, from `forward::scan_shape`), or `W_hh` alone without `W_ih` (skip input).
    /// The call that packs for itself and the cache across calls (Note [Packed weights
    /// across calls] in `super::prepared`) both pack here.
    pub(crate) fn pack_scan<T: Lane>(
        &self,
        cw: &CellWeights<'_, T>,
        in_size: usize,
        ahead: bool,
    ) -> PackedScan<T> {
        let w_ih = match ahead {
            true => None,
            false => cw.w_ih.map(|m| (m, in_size)),
        };
        let input = match ahead {
            true => cw.w_ih.map(|m| {
                Packed::transposed(self.level, m, in_size, self.gh()).blocked(self.chunks)
            }),
            false => None,
        };
        let (bias, b_hn) = super::forward::biases(self, cw);
        PackedScan {
            scan: Packed::gates(self.level, w_ih, cw.w_hh, self.g, self.h, self.p)
                .blocked(self.chunks),
            input,
            bias,
            b_hn,
        }
    }

    /// The range of pseudo-layer (`layer`, `d`)'s tensors in the flat params (they are
    /// contiguous, Note [RNN weight layout] in [`crate::layout`]).
    pub(crate) fn params_range(&self, layer: usize, d: usize) -> Range<usize> {
        let mut entries = self.layout.pseudo_layer(layer, d);
        let first = entries.next().expect("a pseudo-layer has W_hh");
        let end = entries.last().unwrap_or(first);
        first.offset..end.offset + end.len()
    }
}

/// Canonical weights of one pseudo-layer, borrowed from the flat params.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CellWeights<'w, T> {
    /// `[G·H, in]`.
    pub(crate) w_ih: Option<&'w [T]>,
    /// `[G·H, P]`.
    pub(crate) w_hh: &'w [T],
    pub(crate) b_ih: Option<&'w [T]>,
    pub(crate) b_hh: Option<&'w [T]>,
    /// `[P, H]`.
    pub(crate) w_hr: Option<&'w [T]>,
}

/// Where each block of the native reserve sits (Note [Native reserve]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ReserveLayout {
    /// Per pseudo-layer `l·D + d`: its gate rows.
    pub(crate) gates: Vec<Range<usize>>,
    /// Per layer: its output, when kept.
    pub(crate) outputs: Vec<Option<Range<usize>>>,
    pub(crate) len: usize,
}

impl ReserveLayout {
    /// The layout for `desc`; `keep_last` keeps the last layer's output too (half-precision
    /// inputs, whose `y` is rounded).
    ///
    /// # Panics
    ///
    /// If the size overflows `usize`, naming the descriptor's sizes.
    pub(crate) fn new(desc: &RnnDescriptor, keep_last: bool) -> Self {
        let plan = Plan::new(desc);
        let overflow = || -> ! {
            panic!(
                "expected a reserve size that fits in memory, got an overflow for seq_length = {}, batch_size = {}, d_hidden = {}, num_layers = {}",
                desc.seq_length, desc.batch_size, plan.h, plan.spec.num_layers
            )
        };
        let mul = |a: usize, b: usize| a.checked_mul(b).unwrap_or_else(|| overflow());
        let rows = mul(plan.t, plan.b);
        let gate_block = mul(rows, plan.gate_width());
        let out_block = mul(rows, plan.nd * plan.p);
        let mut offset = 0usize;
        let mut take = |len: usize| {
            let start = offset;
            offset = offset.checked_add(len).unwrap_or_else(|| overflow());
            start..offset
        };
        let layers = plan.spec.num_layers;
        let mut gates = Vec::new();
        let mut outputs = Vec::new();
        for layer in 0..layers {
            for _ in 0..plan.nd {
                gates.push(take(gate_block));
            }
            outputs.push((layer + 1 < layers || keep_last).then(|| take(out_block)));
        }
        Self {
            gates,
            outputs,
            len: offset,
        }
    }

    /// Splits `buf` (`len` elements) into the gate blocks (per pseudo-layer) and the output
    /// blocks (per layer).
    #[allow(clippy::type_complexity)]
    pub(crate) fn split<'a, T>(
        &self,
        mut buf: &'a mut [T],
    ) -> (Vec<&'a mut [T]>, Vec<Option<&'a mut [T]>>) {
        assert_eq!(buf.len(), self.len, "reserve length");
        let nd = self.gates.len() / self.outputs.len();
        let mut gates = Vec::with_capacity(self.gates.len());
        let mut outputs = Vec::with_capacity(self.outputs.len());
        let cut = |len: usize, buf: &mut &'a mut [T]| {
            let (head, tail) = core::mem::take(buf).split_at_mut(len);
            *buf = tail;
            head
        };
        for (layer, out) in self.outputs.iter().enumerate() {
            for range in &self.gates[layer * nd..(layer + 1) * nd] {
                gates.push(cut(range.len(), &mut buf));
            }
            outputs.push(out.as_ref().map(|r| cut(r.len(), &mut buf)));
        }
        (gates, outputs)
    }
}

/// Elements of the native reserve of a training forward for `desc` (Note [Native
/// reserve]); `half` for F16/BF16 inputs.
pub fn reserve_len(desc: &RnnDescriptor, half: bool) -> usize {
    ReserveLayout::new(desc, half).len
}

/// Pseudo-layer `idx`'s `len` elements of a state tensor `[L·D, B, ·]`, if there is one.
pub(crate) fn state_of<T>(all: Option<&[T]>, idx: usize, len: usize) -> Option<&[T]> {
    all.map(|s| &s[idx * len..(idx + 1) * len])
}

/// The inputs of one call, on the host, in the compute type.
pub(crate) struct Inputs<'a, T> {
    /// `[T·B, I]` rows (Note [Rows] in `super::plan`).
    pub(crate) x: &'a [T],
    /// `[L·D, B, P]`.
    pub(crate) h0: Option<&'a [T]>,
    /// `[L·D, B, H]`.
    pub(crate) c0: Option<&'a [T]>,
    /// Flat canonical params.
    pub(crate) w: &'a [T],
    /// Each pseudo-layer's weights already packed (Note [Packed weights across calls] in
    /// `super::prepared`); packed per call when `None`.
    pub(crate) packed: Option<&'a Arc<Vec<PackedScan<T>>>>,
}

/// A pseudo-layer's weights packed for its scan ([`Plan::pack_scan`]).
#[derive(Debug, Clone)]
pub(crate) struct PackedScan<T> {
    /// What the step products read: `[W_ih | W_hh]`, or `W_hh` alone.
    pub(crate) scan: Packed<T>,
    /// `W_ih` for the projection ahead (Note [Input projection] in `super::projection`),
    /// where the scan projects its input ahead.
    pub(crate) input: Option<Packed<T>>,
    /// The folded biases and GRU's `b_hn` (`forward::biases`), kept with the packed weights
    /// so that a call on cached weights does not fold them again (a one-step call spent
    /// about 2% of its time there).
    pub(crate) bias: Vec<T>,
    pub(crate) b_hn: Vec<T>,
}

impl<T: Lane> PackedScan<T> {
    /// Bytes of the packed elements.
    pub(crate) fn bytes(&self) -> usize {
        self.scan.bytes()
            + self.input.as_ref().map_or(0, Packed::bytes)
            + (self.bias.len() + self.b_hn.len()) * size_of::<T>()
    }
}

/// Applies layer `layer`'s dropout mask to its input (Note [Dropout masks] in
/// `crate::dropout`): a copy of `input` with every element scaled by its mask factor.
pub(crate) fn dropped<T: Float>(plan: &Plan<'_>, layer: usize, input: &[T]) -> Vec<T> {
    let mask = LayerMask::new(plan.desc, layer);
    let f = plan.nd * plan.p;
    let mut out = vec![T::ZERO; input.len()];
    for (row, (dst, src)) in out.chunks_mut(f).zip(input.chunks(f)).enumerate() {
        let (t, b) = row_step(plan, row);
        let base = (t * plan.b + b) * f;
        for (k, (d, &s)) in dst.iter_mut().zip(src).enumerate() {
            *d = s * T::from_f64(mask.factor(base + k));
        }
    }
    out
}

/// `(t, b)` of a row (Note [Rows] in `super::plan`).
pub(crate) fn row_step(plan: &Plan<'_>, row: usize) -> (usize, usize) {
    if plan.desc.batch_first {
        (row % plan.t, row / plan.t)
    } else {
        (row / plan.b, row % plan.b)
    }
}
