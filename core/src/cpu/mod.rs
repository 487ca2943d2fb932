//! The native CPU kernel: the fused op on host slices, for any front-end whose backend
//! keeps its tensors in host memory (Burn's NdArray and Flex).
//!
//! The reference (each front-end's `reference` module) composes Burn tensor ops, one small op after
//! another per step. This kernel runs the same math directly on host slices:
//!
//! - **One fused pass per step** (Note [Fused step] in `forward`): per layer and
//!   direction, `[W_ih | W_hh]` is packed once per call (Note [Packed weights] in
//!   `packed`), and each step is one pass of a register-blocked kernel over `[x_t |
//!   h_{t-1}]` whose tiles go straight into the cell update (`cell`): activations, cell
//!   state, output write and the variable-length select. One-step calls (decoding) and
//!   inference calls keep their packed weights (Note [Packed weights across calls] in
//!   `prepared`). With one
//!   or two sequences per thread, the input is projected ahead for a block of steps instead
//!   (Note [Input projection] in `projection`).
//! - **The backward** mirrors it: per step one fused element-wise pass and one product
//!   `dg · W_hh` through the same kernel (`W_hh` packed once); the weight and input
//!   gradients are GEMMs over all steps from the `gemm` crate (Note [GEMM crate] in
//!   `gemm`).
//! - **Threads from rayon's pool** (sized by `RAYON_NUM_THREADS`, else the cores): the
//!   two directions of a layer run concurrently; the forward gives each thread some
//!   sequences to scan whole, the backward splits a step's rows when the step is big
//!   enough, and the large GEMMs split too; a large step of one sequence splits its
//!   product's panels with a second thread (Note [A step over two threads] in `split`),
//!   the one job spawned per call or per step.
//! - **SIMD** (Note [SIMD levels] in `simd`): every loop is written once over pulp's
//!   vector types or as plain slices, and runs at AVX-512, AVX2 or a portable level, picked
//!   once per call (forced in the tests, so that every level runs on every machine), with
//!   branch-free activations (Note \[Activations\] in `float`).
//! - **Buffers on cache lines** (Note [Aligned buffers] in `aligned`): the packed weights
//!   and every buffer a scan carries from step to step start on a 64-byte line, so that no
//!   vector access straddles two lines and the speed does not depend on heap addresses.
//! - **A compact reserve** (Note [Native reserve] in `plan`): the activated gates (and the
//!   LSTM cell state) of every step, about what cuDNN keeps; the backward writes the
//!   gradients over it in place.
//! - **No copies of the inputs**: `x`, the states, the weights and the output gradients
//!   are read in place when the backend's tensor is contiguous (NdArray's and Flex's
//!   usually are); inputs and outputs stay in the caller's layout, batch-first or not
//!   (Note \[Rows\] in `plan`). Outputs are built from `Vec`s that the backends adopt without
//!   copying.
//! - **Padding never leaks**: select semantics at every padded step (Note [Padding never
//!   leaks] in [`crate::semantics`]).
//!
//! The kernel computes in `f64` or `f32` ([`Element`]); a front-end converts F16 and BF16
//! tensors to `f32` on entry and back on exit and passes `half`, like the reference (Note
//! [Half precision] in [`crate::semantics`]).
//! Dropout masks are those of the reference, bit for bit (Note [Dropout masks] in
//! [`crate::dropout`]).
//!
//! The oracles: this crate's tests compare the kernel, at every SIMD level, in `f32` and
//! `f64`, with a plain scalar implementation on slices (`tests/kernel.rs`) and its
//! backward with finite differences; the front-ends' backend-parity suites compare it,
//! through their host backends, with their reference in Burn tensor ops.
//!
//! The entry points are [`forward`], [`backward`] and [`reserve_len`]; a front-end borrows
//! its tensors' elements (or converts them), calls them, and adopts the returned `Vec`s as
//! tensors.

mod aligned;
mod backward;
mod cell;
mod float;
mod forward;
mod gemm;
mod packed;
#[doc(hidden)]
pub mod parts;
mod plan;
mod prepared;
pub mod projection;
mod recycle;
mod schedule;
pub mod simd;
pub mod split;

pub use backward::{Grads, OutputGrads};
pub use forward::Outputs;
pub use plan::reserve_len;
pub use recycle::kept as reserves_kept;
use recycle::recycle;

/// Frees every buffer the kernel keeps between calls: training reserves and scratch
/// buffers of both element types (Note [Reserve reuse], Note [Scratch reuse] in
/// `recycle`), and the cache of packed weights with the weights tensors its entries keep
/// alive (Note [Packed weights across calls] in `prepared`). Later calls allocate and
/// pack anew; results do not change.
pub fn release_reserves() {
    recycle::release();
    prepared::clear();
}

/// Networks the process-wide cache of packed weights holds at most (Note [Packed weights
/// across calls]: one-step and inference calls reuse their packed weights from it).
pub const PACKED_WEIGHTS_CACHE_ENTRIES: usize = prepared::ENTRIES;

/// Networks the cache of packed weights holds now, at most
/// [`PACKED_WEIGHTS_CACHE_ENTRIES`]: a diagnostic, for tests of that bound.
pub fn packed_weights_cached() -> usize {
    prepared::cached()
}

use crate::descriptor::{GradsWanted, RnnDescriptor};
use plan::Plan;
use schedule::in_pool;

/// An element type the kernel computes in: `f32` or `f64` (sealed).
pub trait Element: packed::Lane + recycle::Kept + sealed::Sealed {}

impl Element for f32 {}
impl Element for f64 {}

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for f64 {}
}

/// What one call reads, as host slices in the call's layout (Note \[Rows\] in `plan`):
/// `x` in the descriptor's input layout, `h0` `[L*D, B, P]`, `c0` `[L*D, B, H]` (LSTM;
/// `None`: zeros), `w` the flat canonical weights (Note [RNN weight layout] in
/// [`crate::layout`]).
#[derive(Clone, Copy, Debug)]
pub struct HostInputs<'a, T> {
    /// The input sequence.
    pub x: &'a [T],
    /// The initial hidden state; zeros when `None`.
    pub h0: Option<&'a [T]>,
    /// The initial cell state (LSTM); zeros when `None`. The backward does not read it.
    pub c0: Option<&'a [T]>,
    /// The flat canonical weights.
    pub w: &'a [T],
}

impl<'a, T> HostInputs<'a, T> {
    fn plan_inputs(
        &self,
        packed: Option<&'a std::sync::Arc<Vec<plan::PackedScan<T>>>>,
    ) -> plan::Inputs<'a, T> {
        plan::Inputs {
            x: self.x,
            h0: self.h0,
            c0: self.c0,
            w: self.w,
            packed,
        }
    }
}

/// The forward pass of the call `desc`, in rayon's pool (or on the calling thread when
/// nothing in it splits over threads: Note [One step on the caller's thread] in
/// `schedule`).
///
/// - `training` keeps the reserve (Note [Native reserve] in `plan`, tagged: Note [Reserve
///   tag] on [`crate::reserve::ReserveTag`]) and applies dropout; `half` (inputs that were
///   F16 or BF16) keeps the last layer's output in the reserve too.
/// - `weights_owner`: for an inference call (`training` false) or a one-step call
///   (`seq_length = 1`) whose `inputs.w` borrows the memory of `weights_owner` (a
///   reference-counted tensor that shares its buffer between clones and never writes a
///   shared buffer in place), the packed weights come from a small process-wide cache
///   keyed by `w`'s address, and the cache keeps a clone of the owner alive (Note [Packed
///   weights across calls] in `prepared`). `None` packs them for this call alone.
///
/// Returns `y` (`[T·B, D·P]` rows in the call's layout), `h_n`, `c_n` and the reserve.
pub fn forward<T: Element, W: Clone + Send + Sync + 'static>(
    desc: &RnnDescriptor,
    inputs: &HostInputs<'_, T>,
    weights_owner: Option<&W>,
    training: bool,
    half: bool,
) -> (Outputs<T>, Option<Vec<T>>) {
    let mut plan = Plan::new(desc);
    // A call on the caller's thread plans for that one thread.
    let on_caller = schedule::forward_on_caller(&plan, training);
    if on_caller {
        plan.threads = 1;
    }
    let packed = match weights_owner {
        Some(owner) if desc.seq_length == 1 || !training => {
            Some(prepared::packed_for_call(&plan, inputs.w, owner))
        }
        _ => None,
    };
    let host = inputs.plan_inputs(packed.as_ref());
    if on_caller {
        forward::forward(&plan, &host, training, half)
    } else {
        in_pool(|| forward::forward(&plan, &host, training, half))
    }
}

/// The backward pass of the call `desc`, in rayon's pool, from `reserve`: what [`forward`]
/// kept (with the same `half`), whose first [`reserve_len`]`(desc, half)` elements are
/// overwritten with gradients. Afterwards the buffer is kept for the next training forward
/// (Note [Reserve reuse] in `recycle`). `y` is the forward's output (not read when `half`).
/// Gradients not in `wanted` are returned empty, and their GEMMs skipped (Note [Gradients
/// not wanted] in `backward`).
///
/// # Panics
///
/// When `reserve` is shorter than [`reserve_len`]`(desc, half)`.
pub fn backward<T: Element>(
    desc: &RnnDescriptor,
    inputs: &HostInputs<'_, T>,
    y: &[T],
    mut reserve: Vec<T>,
    half: bool,
    grads: &OutputGrads<'_, T>,
    wanted: GradsWanted,
) -> Grads<T> {
    let plan = Plan::new(desc);
    let payload = reserve_len(desc, half);
    assert!(
        reserve.len() >= payload,
        "reserve: expected at least {payload} elements for this call, got {}",
        reserve.len()
    );
    let host = inputs.plan_inputs(None);
    let g = in_pool(|| {
        let reserve = &mut reserve[..payload];
        backward::backward(&plan, &host, y, reserve, half, grads, wanted)
    });
    recycle(reserve);
    g
}

#[cfg(test)]
mod tests {
    use super::forward::forward;
    use super::plan::Inputs;
    use super::plan::Plan;
    use crate::descriptor::{DropoutSpec, RnnDescriptor};
    use crate::spec::{RnnMode, RnnSpec};

    fn values(n: usize, seed: u64) -> Vec<f64> {
        (0..n)
            .map(|i| ((i as f64 + seed as f64 * 7.3) * 0.61).sin() * 0.8)
            .collect()
    }

    /// The inference forward (no reserve) and the training forward (into the reserve)
    /// compute the same outputs, in every mode, both directions and layouts, with padding
    /// and a projection, at every SIMD level the CPU has; and every level agrees with the
    /// portable one to rounding.
    #[test]
    fn inference_and_training_forwards_agree_at_every_simd_level() {
        use super::simd::{with_simd_level, SimdLevel};
        for mode in [
            RnnMode::Lstm,
            RnnMode::Gru,
            RnnMode::RnnTanh,
            RnnMode::RnnRelu,
        ] {
            for batch_first in [false, true] {
                let spec = RnnSpec {
                    num_layers: 2,
                    bidirectional: true,
                    proj_size: (mode == RnnMode::Lstm).then_some(7),
                    ..RnnSpec::new(mode, 3, 20)
                };
                let desc = RnnDescriptor::new(
                    spec,
                    7,
                    9,
                    batch_first,
                    Some(vec![7, 3, 5, 0, 7, 1, 6, 7, 2]),
                    DropoutSpec::NONE,
                );
                let x = values(desc.input_shape().iter().product(), 1);
                let h0 = values(desc.hidden_shape().iter().product(), 2);
                let c0 = values(desc.cell_shape().iter().product(), 3);
                // Small weights keep the ReLU RNN from growing (and rounding with it).
                let w: Vec<f64> = values(desc.params_size(), 4)
                    .iter()
                    .map(|v| v * 0.3)
                    .collect();
                let inputs = Inputs {
                    x: &x,
                    h0: Some(&h0),
                    c0: spec.mode.has_cell_state().then_some(&c0[..]),
                    w: &w,
                    packed: None,
                };
                let run = |level: SimdLevel, training: bool| {
                    with_simd_level(level, || {
                        let plan = Plan::new(&desc);
                        assert_eq!(plan.level, level);
                        let (out, _) = forward::<f64>(&plan, &inputs, training, false);
                        [out.y, out.h_n, out.c_n.unwrap_or_default()]
                    })
                };
                let portable = run(SimdLevel::Portable, false);
                for level in SimdLevel::available() {
                    for training in [false, true] {
                        let got = run(level, training);
                        for (name, (a, b)) in
                            ["y", "h_n", "c_n"].iter().zip(got.iter().zip(&portable))
                        {
                            assert_eq!(a.len(), b.len());
                            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                                assert!(
                                    (x - y).abs() <= 1e-12 * (1.0 + y.abs()),
                                    "{mode:?}, batch_first {batch_first}, {level:?}, training {training}: {name}[{i}] {x} vs {y}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    /// An inference step whose panels split with a thread of the pool (Note [A step over two
    /// threads] in `split`) computes the same bits as the step on one thread: every mode, a
    /// last panel of fewer units, skip input, two layers, one step (the product over
    /// `[x | h]`) of one row and of 2 to 8 rows, and several steps of one row (the input
    /// projected ahead, read in place), at every SIMD level, with the packed weights cached
    /// and not; and the worker's share ran.
    #[test]
    fn a_step_split_over_two_threads_computes_the_same_bits() {
        use super::simd::{with_simd_level, SimdLevel};
        use super::split::{with_step_split, WORKER_PANELS};
        use std::sync::Arc;
        let mut worker = 0;
        // (mode, H, skip input, steps, sequences): a batch of one, and a decoder's batch of
        // a few sequences (a step of several rows).
        for (mode, hidden, skip_input, steps, batch) in [
            (RnnMode::Lstm, 300, false, 1, 1),
            (RnnMode::Lstm, 300, false, 1, 8),
            (RnnMode::Lstm, 300, false, 3, 1),
            (RnnMode::Gru, 260, false, 1, 3),
            (RnnMode::Gru, 260, true, 2, 1),
            (RnnMode::RnnTanh, 500, false, 1, 2),
            (RnnMode::RnnRelu, 450, true, 1, 7),
        ] {
            let spec = RnnSpec {
                num_layers: 2,
                skip_input,
                ..RnnSpec::new(mode, hidden, hidden)
            };
            let desc = RnnDescriptor::new(spec, steps, batch, false, None, DropoutSpec::NONE);
            let x = values(desc.input_shape().iter().product(), 1);
            let h0 = values(desc.hidden_shape().iter().product(), 2);
            let c0 = values(desc.cell_shape().iter().product(), 3);
            // Weights small enough that the ReLU RNN stays bounded over the steps.
            let w: Arc<Vec<f64>> = Arc::new(
                values(desc.params_size(), 4)
                    .iter()
                    .map(|v| v * 0.05)
                    .collect(),
            );
            let inputs = super::HostInputs {
                x: &x,
                h0: Some(&h0),
                c0: mode.has_cell_state().then_some(&c0[..]),
                w: &w,
            };
            for level in SimdLevel::available() {
                // The outputs, and the panels workers computed for the splits this thread
                // made (a call of one step, on this thread; one of several steps moves
                // into the pool, which sees the choice forced here through its plan).
                let run = |split: bool, owner: Option<&Arc<Vec<f64>>>| {
                    let before = WORKER_PANELS.with(|n| n.get());
                    let out = with_simd_level(level, || {
                        with_step_split(split, || {
                            let (out, _) = super::forward(&desc, &inputs, owner, false, false);
                            [out.y, out.h_n, out.c_n.unwrap_or_default()]
                        })
                    });
                    (out, WORKER_PANELS.with(|n| n.get()) - before)
                };
                let (alone, none) = run(false, None);
                assert_eq!(none, 0, "a step not split");
                for owner in [None, Some(&w)] {
                    for round in 0..10 {
                        let (split, theirs) = run(true, owner);
                        worker += theirs;
                        assert_eq!(
                            split,
                            alone,
                            "{mode:?} H{hidden} skip {skip_input} T{steps} B{batch}, {level:?}, \
                             cached {}, round {round}",
                            owner.is_some()
                        );
                    }
                }
            }
        }
        // A pool of one thread on one core may never get to the job before the caller is done.
        if std::thread::available_parallelism().map_or(1, |n| n.get()) > 1 {
            assert!(
                worker > 0,
                "no worker computed a panel: the split never split"
            );
        }
    }

    /// An inference call whose packed weights come from the cache across calls runs the
    /// same scan as one that packs for itself (the same sums, so the same bits): with a
    /// batch of one the first layer and the later ones project their input ahead and the
    /// cache packs `W_hh` alone for the steps and `W_ih` apart for the projection; with a
    /// large batch, or `Fused` forced, it packs `[W_ih | W_hh]`. Before 2026-11-27 a cached
    /// call always ran `Fused`.
    #[test]
    fn cached_packed_weights_follow_the_calls_input_projection() {
        use super::projection::{with_input_projection, InputProjection};
        use std::sync::Arc;
        for (batch, forced, ahead) in [
            (1, None, true),
            (64, None, false),
            (1, Some(InputProjection::Fused), false),
            (64, Some(InputProjection::Ahead), true),
        ] {
            let spec = RnnSpec {
                num_layers: 2,
                bidirectional: true,
                ..RnnSpec::new(RnnMode::Lstm, 3, 5)
            };
            let desc = RnnDescriptor::new(spec, 6, batch, true, None, DropoutSpec::NONE);
            let x = values(desc.input_shape().iter().product(), 1);
            let w: Arc<Vec<f64>> = Arc::new(values(desc.params_size(), 4));
            let inputs = super::HostInputs {
                x: &x,
                h0: None,
                c0: None,
                w: &w,
            };
            let run = |owner: Option<&Arc<Vec<f64>>>| {
                let (out, _) = super::forward(&desc, &inputs, owner, false, false);
                [out.y, out.h_n, out.c_n.expect("LSTM")]
            };
            let calls = || {
                let plan = Plan::new(&desc);
                let packed = super::prepared::packed_for_call(&plan, &w, &w);
                (run(None), run(Some(&w)), run(Some(&w)), packed)
            };
            let (alone, cached, again, packed) = match forced {
                Some(p) => with_input_projection(p, calls),
                None => calls(),
            };
            let case = format!("batch {batch}, forced {forced:?}");
            assert_eq!(packed.len(), 4, "{case}: one per pseudo-layer");
            for (i, p) in packed.iter().enumerate() {
                let expected = if ahead {
                    0
                } else if i < 2 {
                    3
                } else {
                    10
                };
                assert_eq!(
                    p.scan.ka, expected,
                    "{case}: pseudo-layer {i}'s packed W_ih columns"
                );
                // W_ih packed apart for the projection: `I` (3, then 2·5) by 4·5 gates.
                let apart = p.input.as_ref().map(|w| (w.kb, w.n));
                let size = if i < 2 { 3 } else { 10 };
                assert_eq!(
                    apart,
                    ahead.then_some((size, 20)),
                    "{case}: pseudo-layer {i}'s W_ih packed for the projection"
                );
            }
            assert_eq!(cached, alone, "{case}: cached and uncached calls");
            assert_eq!(again, alone, "{case}: a cache hit");
        }
    }
}
