//! An inference step's panels over two threads: the caller claims panels from the front,
//! a thread of rayon's pool from the back (Note [A step over two threads]).
//!
//! # Note [A step over two threads]
//!
//! A decoding step (one sequence, one step) is one product of a single row with the packed
//! weights, panel by panel, each panel followed by its units' cell update (Note [Fused
//! step] in `super::forward`). At `H = 256` an LSTM's `[W_ih | W_hh]` is 2 MiB, more than a
//! Zen 4 core's L2, so every step streams it from the L3 on one core while the other cores
//! idle. ONNX Runtime splits the same step over its threads, one of which spins between
//! calls, and was ahead of the one-core step at batch 1 (docs/BENCHMARKS.md, "Step-by-step
//! decoding").
//!
//! The panels are independent, so two threads can share them. Handing work to rayon's pool
//! and waiting for it is what the step left behind (Note [One step on the caller's thread]
//! in `super::schedule`): the caller would sleep until a worker woke, ran and woke it back.
//! So here the caller never waits for a thread that has not started:
//!
//! - the job goes to the pool (`rayon::spawn`) holding everything it reads by value or
//!   through an `Arc` (the packed weights are shared with the cache, the row and the state
//!   are copied: a few KiB), so it may run after the call has returned;
//! - the caller computes panels from the front, claimed a share at a time from one atomic
//!   word that holds both ends (`Claims`); a worker that takes the job claims from the
//!   back; the two meet where their speeds put them;
//! - when nothing is left to claim, the caller closes the job if no worker has begun it (a
//!   worker that begins later finds it closed and does nothing), and otherwise spins until
//!   the worker's last share is done (at most one share), then copies the worker's units
//!   (the panels past the meeting point) from the job;
//! - each panel's sums are computed the same way whoever computes it, so the results are
//!   the same bit for bit with or without the split, and however the panels fell (a test
//!   checks this).
//!
//! The split applies to inference steps whose product is large enough
//! (`schedule::split_step`): a decoding step of one sequence or of a few
//! (`schedule::SPLIT_STEP_ROWS`, each thread then computes its panels for every row), and
//! each step of a batch of one, unless the scan already projects its next block of inputs
//! on the second thread (Note [Projection beside the scan] in `super::projection`). A pool
//! of one thread, training (whose gate rows go to the reserve) and the LSTM projection (a
//! GEMM after the step) keep the step on one thread; a longer call of several sequences
//! splits its sequences over the threads instead (Note [Fused step] in `super::forward`). `with_step_split` forces it on or off for tests; `BURN_FUSED_RNN_STEP_SPLIT`
//! (`0` or `1`) for a whole process (benchmarks).
//!
//! Measured on an AMD EPYC (Zen 4, 2 vCPU, AVX-512; docs/BENCHMARKS.md, "A step over two
//! threads"): the LSTM H256 decoding step through the 0.21 front-end took 18.6–23.8 µs
//! against 28.6–32.7 with the split off in the same rounds (0.61–0.81×), and ONNX Runtime,
//! which had been ahead, 28.5–38.2; the kernel alone, a one-step call on cached weights,
//! 0.67–0.82× its time at LSTM H144 to H512, GRU H160 to H256 and the tanh RNN at H384 and
//! H512, and 0.61× for two LSTM layers at H256; a batch of one over 50 steps 0.78× (LSTM
//! H256) and 0.80× (GRU H256). The meeting point of 16 panels (LSTM H256) was the middle in
//! 98% of the calls: the worker takes the job up in time; what stays above half the time
//! is the call's serial part (the front-end, the job's copies and hand-off, the last
//! share). Below about 150,000 multiply-adds that fixed cost outweighs half the product
//! (LSTM H128: 1.11× the time), so such steps stay on one thread
//! (`schedule::SPLIT_STEP_WORK`).
//!
//! On an Intel Xeon (Emerald Rapids class, 2 vCPU, AVX-512, 2 MiB of L2 a core;
//! docs/BENCHMARKS.md, "a step of a few sequences over two threads") the split gains more:
//! one core streams an LSTM H256's 2 MiB of weights from the L3 at about 55 GB/s, while
//! each half stays in its core's L2 from step to step (the caller takes the front panels
//! and the worker the back ones, call after call). The kernel alone, one-step calls on
//! cached weights, one process per setting: the LSTM H256 step of one sequence 16.9–17.0
//! µs split against 38.6–43.6 on one thread. A decoder's batch of 8 used to split its
//! sequences over the pool, each thread reading all of the weights (74–84 µs); its panels
//! split take 59 µs, and through the 0.21 front-end 66–68 µs against 99–124, level with
//! ONNX Runtime (65–66).

use std::cell::Cell;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};

use super::simd::{env_setting, with_forced};

/// The panels of one product, claimed from both ends by two threads: the next panel from
/// the front and the end of those left, in one atomic word.
#[derive(Debug)]
pub(crate) struct Claims {
    /// `front | end << 32`: the panels `front..end` are unclaimed.
    ends: AtomicU64,
    /// Panels per claim.
    grain: usize,
}

impl Claims {
    /// `panels` panels, claimed `grain` at a time (at least one).
    pub(crate) fn new(panels: usize, grain: usize) -> Self {
        let panels = u32::try_from(panels).expect("panels: expected fewer than 2^32");
        Self {
            ends: AtomicU64::new(u64::from(panels) << 32),
            grain: grain.max(1),
        }
    }

    fn split(word: u64) -> (usize, usize) {
        ((word & u64::from(u32::MAX)) as usize, (word >> 32) as usize)
    }

    fn join(front: usize, end: usize) -> u64 {
        front as u64 | (end as u64) << 32
    }

    /// Claims the next share from the front, if any is left.
    pub(crate) fn front(&self) -> Option<Range<usize>> {
        self.claim(false)
    }

    /// Claims the last share from the back, if any is left.
    pub(crate) fn back(&self) -> Option<Range<usize>> {
        self.claim(true)
    }

    fn claim(&self, from_back: bool) -> Option<Range<usize>> {
        let mut word = self.ends.load(Ordering::Relaxed);
        loop {
            let (front, end) = Self::split(word);
            if front >= end {
                return None;
            }
            let grain = self.grain;
            let (claimed, next) = match from_back {
                false => {
                    let to = (front + grain).min(end);
                    (front..to, Self::join(to, end))
                }
                true => {
                    let from = end.saturating_sub(grain).max(front);
                    (from..end, Self::join(front, from))
                }
            };
            match self
                .ends
                .compare_exchange_weak(word, next, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return Some(claimed),
                Err(now) => word = now,
            }
        }
    }

    /// Where the two ends met, once every panel is claimed: the panels from here on were
    /// claimed from the back.
    fn meeting_point(&self) -> usize {
        Self::split(self.ends.load(Ordering::Relaxed)).0
    }
}

/// Which panels of a product a thread computes.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Panels<'c> {
    /// Every panel, in order.
    All,
    /// Shares claimed from the front of `Claims`.
    Front(&'c Claims),
    /// Shares claimed from the back of `Claims`.
    Back(&'c Claims),
}

impl<'c> Panels<'c> {
    /// The ranges of panels to compute, out of `panels`, one share at a time.
    #[inline(always)]
    pub(crate) fn shares(self, panels: usize) -> Shares<'c> {
        Shares {
            panels: self,
            all: Some(0..panels),
        }
    }
}

/// The iterator of [`Panels::shares`].
pub(crate) struct Shares<'c> {
    panels: Panels<'c>,
    all: Option<Range<usize>>,
}

impl Iterator for Shares<'_> {
    type Item = Range<usize>;

    #[inline(always)]
    fn next(&mut self) -> Option<Range<usize>> {
        match self.panels {
            Panels::All => self.all.take(),
            Panels::Front(claims) => claims.front(),
            Panels::Back(claims) => claims.back(),
        }
    }
}

/// Nobody has begun the job's back.
const OPEN: u8 = 0;
/// A worker is computing the back.
const WORKING: u8 = 1;
/// The worker is done; its results are in the job.
const DONE: u8 = 2;
/// The caller took every panel before a worker began: a worker that begins now does
/// nothing.
const CLOSED: u8 = 3;

/// A job shared by the caller and a thread of the pool.
pub(crate) struct Beside<J> {
    claims: Claims,
    state: AtomicU8,
    /// What the worker reads and where it writes (behind a lock of its own).
    pub(crate) job: J,
}

/// Runs `front` on this thread and, where a thread of rayon's pool takes the job up while
/// panels are left, `back` on that thread (Note [A step over two threads]): `front` and
/// `back` compute the panels their [`Panels`] claim, out of `panels`, `grain` at a time.
/// Returns the job and the first panel `back` computed (`panels` when it computed none);
/// `back` has finished by then.
///
/// `back` must not panic (rayon aborts the process when a spawned job panics).
pub(crate) fn split<J: Send + Sync + 'static>(
    job: J,
    panels: usize,
    grain: usize,
    back: fn(&J, Panels<'_>),
    front: impl FnOnce(Panels<'_>),
) -> (Arc<Beside<J>>, usize) {
    let shared = Arc::new(Beside {
        claims: Claims::new(panels, grain),
        state: AtomicU8::new(OPEN),
        job,
    });
    let theirs = Arc::clone(&shared);
    rayon::spawn(move || {
        let begun =
            theirs
                .state
                .compare_exchange(OPEN, WORKING, Ordering::Acquire, Ordering::Relaxed);
        if begun.is_ok() {
            back(&theirs.job, Panels::Back(&theirs.claims));
            theirs.state.store(DONE, Ordering::Release);
        }
    });
    front(Panels::Front(&shared.claims));
    // Whatever `front` left unclaimed is ours too (a `front` that stops early).
    assert!(
        shared.claims.front().is_none(),
        "a split step: expected the caller to claim every panel it could"
    );
    match shared
        .state
        .compare_exchange(OPEN, CLOSED, Ordering::AcqRel, Ordering::Acquire)
    {
        Ok(_) | Err(DONE) => {}
        Err(_) => wait_done(&shared.state),
    }
    let meeting_point = shared.claims.meeting_point();
    #[cfg(test)]
    WORKER_PANELS.with(|n| n.set(n.get() + panels - meeting_point));
    (shared, meeting_point)
}

#[cfg(test)]
thread_local! {
    /// Panels that workers computed for the splits this thread made (tests: that the
    /// worker's share and its copy back ran).
    pub(crate) static WORKER_PANELS: Cell<usize> = const { Cell::new(0) };
}

/// Spins until a worker that has begun is done: at most one share of panels, unless the
/// worker was descheduled, so after a few thousand spins it yields its core.
fn wait_done(state: &AtomicU8) {
    let mut spins = 0u32;
    while state.load(Ordering::Acquire) != DONE {
        if spins < 1 << 12 {
            std::hint::spin_loop();
            spins += 1;
        } else {
            std::thread::yield_now();
        }
    }
}

thread_local! {
    static FORCED: Cell<Option<bool>> = const { Cell::new(None) };
}

/// Whether inference steps of a few rows split their panels with a second thread, as
/// forced on this thread ([`with_step_split`]) or by `BURN_FUSED_RNN_STEP_SPLIT` (`0` or `1`), if either does.
pub fn forced_step_split() -> Option<bool> {
    static ENV: OnceLock<Option<bool>> = OnceLock::new();
    FORCED.with(Cell::get).or_else(|| {
        env_setting(&ENV, "BURN_FUSED_RNN_STEP_SPLIT", |value| match value {
            "0" => Ok(false),
            "1" => Ok(true),
            _ => Err("expected 0 or 1; chosen from the step's size and the pool".into()),
        })
    })
}

/// Runs `f` with every fused inference call that `f` makes from this thread splitting its
/// steps' panels with a thread of the pool (`true`, wherever the step can: Note [A
/// step over two threads]) or never (`false`), instead of by the step's size and the pool's
/// threads. The results are the same either way, bit for bit.
pub fn with_step_split<R>(split: bool, f: impl FnOnce() -> R) -> R {
    with_forced(&FORCED, split, f)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// Every panel is claimed exactly once, whoever claims it, and the back's claims are
    /// exactly the panels past the meeting point.
    #[test]
    fn claims_from_both_ends_cover_every_panel_once() {
        for (panels, grain) in [(0, 1), (1, 1), (5, 2), (16, 2), (17, 3), (12, 100)] {
            for pattern in 0u32..16 {
                let claims = Claims::new(panels, grain);
                let mut seen = vec![0u8; panels];
                let mut back_from = panels;
                for turn in 0.. {
                    let from_back = pattern >> (turn % 4) & 1 == 1;
                    let share = match from_back {
                        true => claims.back(),
                        false => claims.front(),
                    };
                    let Some(share) = share.or_else(|| claims.front()) else {
                        break;
                    };
                    assert!(share.len() <= grain.max(1) && !share.is_empty());
                    if from_back && share.end == back_from {
                        back_from = share.start;
                    }
                    for p in share {
                        seen[p] += 1;
                    }
                }
                assert!(
                    seen.iter().all(|&s| s == 1),
                    "{panels} by {grain}: {seen:?}"
                );
                assert_eq!(claims.meeting_point(), back_from, "{panels} by {grain}");
            }
        }
    }

    /// Two threads at once: each panel computed once, and `split` reports the panels the
    /// worker computed, which are the job's.
    #[test]
    fn a_split_computes_each_panel_once_and_reports_the_workers_share() {
        fn back(job: &Mutex<Vec<usize>>, panels: Panels<'_>) {
            let mut mine = job.lock().expect("not poisoned");
            for share in panels.shares(0) {
                mine.extend(share);
            }
        }
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .expect("a pool");
        for panels in [1, 2, 16, 64, 1000] {
            for _ in 0..50 {
                let (job, from) = pool.install(|| {
                    let mut ours = Vec::new();
                    let (job, from) = split(Mutex::new(Vec::new()), panels, 2, back, |p| {
                        for share in p.shares(panels) {
                            ours.extend(share);
                        }
                    });
                    assert!(ours.iter().all(|&p| p < from), "the caller's are before");
                    (job, (from, ours))
                });
                let (from, ours) = from;
                let mut theirs = job.job.lock().expect("not poisoned").clone();
                theirs.sort_unstable();
                assert_eq!(theirs, (from..panels).collect::<Vec<_>>());
                let mut all = [ours, theirs].concat();
                all.sort_unstable();
                assert_eq!(all, (0..panels).collect::<Vec<_>>());
            }
        }
    }
}
