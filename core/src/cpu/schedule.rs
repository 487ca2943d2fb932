//! How a call uses rayon's pool: which work splits over threads, and how.
//!
//! One pool for the process (rayon's global pool, sized by `RAYON_NUM_THREADS`, else the
//! cores); nothing is spawned per call or per step but a decoding step's second half (Note
//! [A step over two threads] in `super::split`). A call moves into the pool once
//! ([`in_pool`]); the two directions of a layer run side by side ([`per_direction`]),
//! each with its share of the threads ([`direction_threads`]); the forward splits a batch
//! into parts whose whole scans run side by side ([`scan_threads`], Note [Fused step] in
//! `super::forward`), and a batch in one part projects its next block of inputs on a
//! second thread while its steps run (Note [Projection beside the scan] in
//! `super::projection`); the backward splits a step's rows when the step is big enough
//! ([`step_threads`]); the large
//! GEMMs split inside the `gemm` crate ([`gemm_threads`]), except the backward's weight
//! gradients, which split by destination rows, one share of each GEMM per thread (Note
//! [Weight gradients by rows] in `super::backward`), and the input projection ahead, whose
//! rows split in shares of whole tiles (Note [Projection through the packed kernel] in
//! `super::projection`); element-wise passes over rows split like the steps
//! ([`for_rows`]).

use pulp::{Simd, WithSimd};
use rayon::prelude::*;

use super::float::Float;
use super::plan::Plan;
use super::simd::{dispatch, SimdLevel};

/// Runs `f` on a thread of rayon's pool: a call that came from outside the pool moves in
/// once, so that the joins of every step hand work to a spinning neighbour instead of
/// waking the caller's thread each time.
pub(crate) fn in_pool<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    if rayon::current_thread_index().is_some() {
        f()
    } else {
        rayon::join(f, || ()).0
    }
}

/// Whether a forward call runs on the caller's thread instead of moving into the pool
/// ([`in_pool`]): one step of one sequence in one direction, one inference step of at most
/// [`SPLIT_STEP_ROWS`] sequences in one direction without a projection, or a pool of one
/// thread (Note [One step on the caller's thread]).
///
/// # Note [One step on the caller's thread]
///
/// Moving a call into the pool hands it to a worker and puts the caller to sleep on a latch
/// until the worker is done: two wake-ups through the kernel. In a decoding step (one LSTM
/// step, `B = 1`, `H = 256`, 2 threads) the scheduler's `sched_yield`, futex waits and
/// wake-ups took more `perf` samples than the product itself, and the step took 48–65 µs;
/// on the caller's thread it takes 30–32 (docs/BENCHMARKS.md, "Step-by-step decoding").
///
/// - **One step of one sequence in one direction** (a decoding step, every layer) gains
///   nothing from threads, so it stays on the caller's thread, and plans for that one
///   thread (`cpu::forward` sets the plan's `threads` to 1): every choice of threads in it
///   (the input projection's shares, an LSTM projection's GEMM) then takes one, and none
///   can hand work back to the pool. One sequence is one part of the scan whatever the
///   threads ([`scan_threads`]), so the packed weights' choice is the same either way.
/// - **A pool of one thread** never splits.
/// - **Everything else** moves in once, so that its joins (the parts of a batch, one per
///   step in the backward, one per block beside the scan) find the other workers awake.
///   That includes a step of a batch, whose parts split over the threads (a batch of 8 at
///   `H = 256`: 58–76 µs on two threads, 87–93 on one). Letting the caller compute the
///   first part itself while a worker computes the second (`rayon::in_place_scope`) was
///   measured and not kept: 0.92–1.69× the time, ten of twelve paired rounds slower
///   (probably because the caller is one thread more than the pool, which has one per
///   core; not checked).
///
/// On the caller's thread, a decoding step large enough still uses a second thread: the
/// caller computes its product's panels from one end while a worker of the pool, if one
/// takes the job up in time, computes them from the other, and the caller never waits for
/// a worker that has not begun (Note [A step over two threads] in `super::split`).
///
/// - **An inference step of a few sequences** (up to [`SPLIT_STEP_ROWS`], one direction, no
///   LSTM projection: a decoder's batch) stays on the caller's thread too since
///   2026-12-07 and splits its panels the same way, instead of its sequences: each thread
///   then reads half of the weights, not all of them. On an Intel Xeon (Emerald Rapids
///   class, 2 MiB of L2 a core), where a core streams an LSTM H256's 2 MiB from the L3
///   slowly, a batch of 8 took 100–154 µs with its sequences split over the pool
///   (docs/BENCHMARKS.md, "a step of a few sequences over two threads"). A step too small
///   to split runs on the caller alone: under [`SPLIT_STEP_WORK`] multiply-adds it costs
///   less than the pool's hand-off.
///
/// The choice changes only which thread computes, never what: the kernel is the same code
/// either way.
pub(crate) fn forward_on_caller(plan: &Plan<'_>, training: bool) -> bool {
    plan.threads == 1
        || (plan.t == 1
            && plan.nd == 1
            && (plan.b == 1 || (!training && plan.b <= SPLIT_STEP_ROWS && plan.p == plan.h)))
}

/// The most sequences whose inference step splits its panels over two threads (Note [A
/// step over two threads] in `super::split`) instead of its sequences: up to a tile's
/// rows of the widest level and a few more, the worker's copies of the rows stay small.
pub(crate) const SPLIT_STEP_ROWS: usize = 8;

/// Work below this many multiply-adds per step runs on one thread: splitting it costs more
/// than it saves (a rayon join is a few microseconds).
pub(crate) const PARALLEL_WORK: usize = 1 << 17;

/// Threads for a GEMM of `m · n · k` multiply-adds, out of `threads`.
pub(crate) fn gemm_threads(threads: usize, m: usize, n: usize, k: usize) -> usize {
    if m.saturating_mul(n).saturating_mul(k) >= PARALLEL_WORK {
        threads
    } else {
        1
    }
}

/// Runs `f` over `items`, in parallel chunks when `parallel`, inside [`dispatch`] so that
/// the element-wise loops compile for the call's SIMD level (Note [SIMD levels] in
/// `super::simd`).
///
/// `f` must be an `#[inline(always)]` closure: the loop reaches the CPU's features only
/// where `f` is inlined into pulp's `#[target_feature]` function. A struct implementing
/// `WithSimd` does this; a plain closure passed to `dispatch` would go through a
/// `FnOnce::call_once` shim that is not inlined, and run at the baseline SSE2 width
/// (measured: half the speed of the AVX2 loop at `H = 256`).
pub(crate) fn for_rows<I: Send, F: Fn(&mut I) + Sync>(
    level: SimdLevel,
    items: &mut [I],
    parallel: bool,
    f: F,
) {
    struct Rows<'a, I, F> {
        items: &'a mut [I],
        f: &'a F,
    }

    impl<I, F: Fn(&mut I)> WithSimd for Rows<'_, I, F> {
        type Output = ();

        #[inline(always)]
        fn with_simd<S: Simd>(self, _simd: S) {
            for item in self.items.iter_mut() {
                (self.f)(item);
            }
        }
    }

    let run = |chunk: &mut [I]| {
        dispatch(
            level,
            Rows {
                items: chunk,
                f: &f,
            },
        )
    };
    if parallel && items.len() > 1 {
        let threads = rayon::current_num_threads().max(1);
        let chunk = items.len().div_ceil(threads);
        items.par_chunks_mut(chunk).for_each(run);
    } else {
        run(items);
    }
}

/// Adds every row of `rows` into `dst` (`dst[j] += row[j]`), at the call's SIMD level as
/// [`for_rows`] runs its loops: the backward's bias gradients, summed step by step while
/// the step's gate gradients are in cache (`super::backward`).
pub(crate) fn add_rows<'a, T: Float>(
    level: SimdLevel,
    dst: &mut [T],
    rows: impl Iterator<Item = &'a [T]>,
) {
    struct AddRows<'d, T, R> {
        dst: &'d mut [T],
        rows: R,
    }

    impl<'a, T: Float, R: Iterator<Item = &'a [T]>> WithSimd for AddRows<'_, T, R> {
        type Output = ();

        #[inline(always)]
        fn with_simd<S: Simd>(self, _simd: S) {
            for row in self.rows {
                for (a, &v) in self.dst.iter_mut().zip(row) {
                    *a += v;
                }
            }
        }
    }

    dispatch(level, AddRows { dst, rows });
}

/// Threads for one step of the backward over `batch` rows: the rows split over the threads
/// when each gets at least two rows and the step is big enough to pay for a join.
pub(crate) fn step_threads(threads: usize, batch: usize, gh: usize, k: usize) -> usize {
    if threads > 1 && batch >= 4 && batch * gh * k >= PARALLEL_WORK {
        threads.min(batch / 2)
    } else {
        1
    }
}

/// Whether an inference step of `rows` rows (at most [`SPLIT_STEP_ROWS`]) of `plan` with
/// `threads` threads for it splits its product of `gh` columns and `k` reductions with a
/// thread of the pool (Note [A step over two threads] in `super::split`): where the plan
/// has it forced ([`super::split::with_step_split`]), or where there are two threads and
/// the product is at least [`SPLIT_STEP_WORK`] multiply-adds.
pub(crate) fn split_step(
    plan: &Plan<'_>,
    threads: usize,
    rows: usize,
    gh: usize,
    k: usize,
) -> bool {
    rows <= SPLIT_STEP_ROWS
        && plan
            .step_split
            .unwrap_or(threads > 1 && rows.saturating_mul(gh).saturating_mul(k) >= SPLIT_STEP_WORK)
}

/// The smallest step product (multiply-adds) that splits over two threads: the split costs
/// a few microseconds (the job's copies, the hand-off, the last share's wait), which a step
/// of about 9 µs on one thread repays. Measured on an AMD EPYC (Zen 4), the kernel alone
/// (docs/BENCHMARKS.md, "A step over two threads"): an LSTM step at `H = 144` (165,888)
/// took 0.81× its time split, at `H = 128` (131,072) 1.11×; a GRU's at `H = 160` (153,600)
/// 0.82×, at `H = 128` (98,304) 1.24×; the tanh RNN's at `H = 256` (131,072) 1.09×. With
/// `I = H` a step splits from `H = 137` (LSTM), `159` (GRU) and `274` (the one-gate RNNs);
/// a step whose input was projected ahead reads `W_hh` alone, half the product.
pub(crate) const SPLIT_STEP_WORK: usize = 150_000;

/// Parts of a batch of `batch` sequences whose whole scans run side by side, one per
/// thread (Note [Fused step] in `super::forward`): every sequence's recurrence is its own,
/// so a part needs no synchronisation with the others until the layer ends. One part
/// when there is one thread, one sequence, or less than [`PARALLEL_WORK`] multiply-adds in
/// the whole scan (`work`).
pub(crate) fn scan_threads(threads: usize, batch: usize, work: usize) -> usize {
    if threads > 1 && batch > 1 && batch.saturating_mul(work) >= PARALLEL_WORK {
        threads.min(batch)
    } else {
        1
    }
}

/// Runs `jobs` (one per direction): concurrently on rayon's pool when there are two and
/// more than one thread, else in order.
pub(crate) fn per_direction<J: Send, R: Send>(
    plan: &Plan<'_>,
    mut jobs: Vec<J>,
    run: impl Fn(J) -> R + Sync,
) -> Vec<R> {
    if jobs.len() == 2 && plan.threads > 1 {
        let second = jobs.pop().expect("two jobs");
        let first = jobs.pop().expect("two jobs");
        let (a, b) = rayon::join(|| run(first), || run(second));
        vec![a, b]
    } else {
        jobs.into_iter().map(run).collect()
    }
}

/// Threads for each direction of a layer.
pub(crate) fn direction_threads(plan: &Plan<'_>) -> usize {
    if plan.nd == 2 {
        plan.threads.div_ceil(2)
    } else {
        plan.threads
    }
}

#[cfg(test)]
mod tests {
    use super::forward_on_caller;
    use crate::cpu::plan::Plan;
    use crate::descriptor::{DropoutSpec, RnnDescriptor};
    use crate::spec::{RnnMode, RnnSpec};

    /// A decoding step (one step of one sequence in one direction, any number of layers, or
    /// in inference of up to `SPLIT_STEP_ROWS` sequences) and every call in a pool of one
    /// thread stay on the caller's thread; every other call moves into the pool.
    #[test]
    fn decoding_steps_and_one_thread_pools_stay_on_the_callers_thread() {
        // (steps, sequences, bidirectional, layers), and whether it is a decoding step.
        let cases = [
            ((1, 1, false, 1), true),
            ((1, 1, false, 3), true),
            ((2, 1, false, 1), false),
            ((1, 8, false, 2), true),
            ((1, 9, false, 1), false),
            ((1, 1, true, 1), false),
            ((50, 32, false, 1), false),
        ];
        for threads in [1, 2, 3] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .expect("a pool");
            for ((t, b, bidirectional, num_layers), decoding) in cases {
                let spec = RnnSpec {
                    num_layers,
                    bidirectional,
                    ..RnnSpec::new(RnnMode::Lstm, 8, 16)
                };
                let desc = RnnDescriptor::new(spec, t, b, false, None, DropoutSpec::NONE);
                let plan = pool.install(|| Plan::new(&desc));
                assert_eq!(
                    forward_on_caller(&plan, false),
                    threads == 1 || decoding,
                    "T = {t}, B = {b}, bidirectional {bidirectional}, {num_layers} layers, \
                     {threads} threads"
                );
                // A training step of several sequences splits them over the pool.
                assert_eq!(
                    forward_on_caller(&plan, true),
                    threads == 1 || (decoding && b == 1),
                    "training: T = {t}, B = {b}, bidirectional {bidirectional}, \
                     {num_layers} layers, {threads} threads"
                );
            }
        }
    }
}
