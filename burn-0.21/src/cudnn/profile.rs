//! Per-phase timing of the cuDNN path: where the time of one call of the fused op goes.
//!
//! Off by default. [`enable`] switches it on for the whole process; every call of the
//! cuDNN path then adds the time of each of its phases to a table, which [`report`] (or
//! [`take`], which also resets it) returns and prints as Markdown:
//!
//! ```
//! use burn_fused_rnn::cudnn::profile::{self, Op, Phase};
//!
//! profile::enable();
//! // ... run the model on `burn::backend::Cuda` ...
//! profile::record(Op::Caller, Phase::WeightsCat, std::time::Duration::from_micros(40));
//! let table = profile::take();
//! println!("{table}");
//! profile::disable();
//! ```
//!
//! # Phases
//!
//! Host phases are wall-clock time on the calling thread ([`std::time::Instant`]):
//! [`Phase::Lookup`] (settings and the per-thread caches), [`Phase::Build`] (a cache miss:
//! descriptors, weight-space verification, the probes), [`Phase::Checks`],
//! [`Phase::Contiguous`] (`into_contiguous` and the weight space), [`Phase::Alloc`]
//! (outputs, reserve, workspace), [`Phase::Pointers`] (cubecl's `get_resource`),
//! [`Phase::CubeclSync`] (waiting for cubecl's queue: this is where queued work before the
//! op, such as the weights' concatenation, is paid), [`Phase::Memset`],
//! [`Phase::CudnnLaunch`] (the time inside the cuDNN functions, which only enqueue work),
//! [`Phase::StreamSync`] (the closing synchronize, which waits for cuDNN's kernels) and
//! [`Phase::Total`] (the whole op).
//!
//! GPU phases ([`Phase::CudnnForward`], [`Phase::CudnnBackwardData`],
//! [`Phase::CudnnBackwardWeights`]) are the time between two CUDA events recorded on the
//! crate's stream around each cuDNN call, read after the closing synchronize; they overlap
//! the host phases `CudnnLaunch` and `StreamSync`.
//!
//! Phases outside the op ([`Phase::WeightsCat`], [`Phase::Iteration`]) are recorded by the
//! caller with [`record`] or [`time`] under [`Op::Caller`]: the weights' concatenation
//! happens in the module (`FusedRnn::flat_weights`), before the op.
//!
//! # Cost
//!
//! Off: one relaxed atomic load per phase. On: an [`Instant`] per phase, two CUDA events
//! per cuDNN call, and a mutex per recorded phase. The table is process-wide (all threads
//! and devices together).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Which call of the fused op a phase belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Op {
    /// Inference forward (`fused_rnn_forward`).
    Inference,
    /// Training forward (`fused_rnn_forward_training`).
    Training,
    /// Backward (`fused_rnn_backward`).
    Backward,
    /// Recorded by the caller around the op (for example the GPU benchmark).
    Caller,
}

/// One phase of a call (module docs, "Phases").
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Phase {
    /// Settings, descriptor and call-shape cache lookups (a hit).
    Lookup,
    /// A cache miss: building the network and call shape, verifying the weight space,
    /// probing.
    Build,
    /// Shape, dtype and device checks of every tensor.
    Checks,
    /// `into_contiguous` of the inputs and the weight space (host time; their kernels run
    /// on cubecl's stream and are waited for in [`Phase::CubeclSync`]).
    Contiguous,
    /// Outputs, workspace and reserve.
    Alloc,
    /// Device pointers of every buffer (`client.get_resource`).
    Pointers,
    /// Waiting for cubecl's queued work (`client.sync()`).
    CubeclSync,
    /// Zeroing what must start at zero (`cuMemsetD8Async`, host time).
    Memset,
    /// Time inside the cuDNN functions (host; they enqueue kernels).
    CudnnLaunch,
    /// `cudnnRNNForward` on the GPU (CUDA events).
    CudnnForward,
    /// `cudnnRNNBackwardData_v8` on the GPU (CUDA events).
    CudnnBackwardData,
    /// `cudnnRNNBackwardWeights_v8` on the GPU (CUDA events).
    CudnnBackwardWeights,
    /// The closing synchronize of the crate's stream.
    StreamSync,
    /// The whole op, from entry to return (host).
    Total,
    /// The module's concatenation of the weights (recorded by the caller).
    WeightsCat,
    /// One whole iteration as the caller sees it (recorded by the caller).
    Iteration,
}

impl Phase {
    /// Whether the phase is GPU time between CUDA events (it overlaps host phases).
    pub fn is_gpu(self) -> bool {
        matches!(
            self,
            Phase::CudnnForward | Phase::CudnnBackwardData | Phase::CudnnBackwardWeights
        )
    }
}

/// The accumulated time of one (op, phase).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Row {
    /// The op.
    pub op: Op,
    /// The phase.
    pub phase: Phase,
    /// How many times it was recorded.
    pub count: u64,
    /// Sum of the recorded durations.
    pub total: Duration,
    /// Longest single duration.
    pub max: Duration,
}

impl Row {
    /// `total / count`.
    pub fn mean(&self) -> Duration {
        if self.count == 0 {
            Duration::ZERO
        } else {
            self.total / self.count as u32
        }
    }
}

/// The accumulated phases, in (op, phase) order; printed as a Markdown table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    rows: Vec<Row>,
}

impl Report {
    /// Every (op, phase) recorded at least once.
    pub fn rows(&self) -> &[Row] {
        &self.rows
    }

    /// The row of (op, phase), if recorded.
    pub fn get(&self, op: Op, phase: Phase) -> Option<&Row> {
        self.rows.iter().find(|r| r.op == op && r.phase == phase)
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }
}

impl fmt::Display for Report {
    /// Columns: op, phase, count, total (ms), mean and max (µs), and the share of the op's
    /// [`Phase::Total`] (of [`Phase::Iteration`] for [`Op::Caller`]). GPU phases overlap
    /// host phases, so shares need not add up to 100%.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "| op | phase | count | total (ms) | mean (µs) | max (µs) | share of the op's total |"
        )?;
        writeln!(f, "|---|---|---|---|---|---|---|")?;
        for row in &self.rows {
            let whole = if row.op == Op::Caller {
                Phase::Iteration
            } else {
                Phase::Total
            };
            let share = self
                .get(row.op, whole)
                .filter(|w| !w.total.is_zero())
                .map_or("—".to_string(), |w| {
                    format!(
                        "{:.1}%",
                        100.0 * row.total.as_secs_f64() / w.total.as_secs_f64()
                    )
                });
            let gpu = if row.phase.is_gpu() { " (GPU)" } else { "" };
            writeln!(
                f,
                "| {:?} | {:?}{gpu} | {} | {:.3} | {:.1} | {:.1} | {share} |",
                row.op,
                row.phase,
                row.count,
                row.total.as_secs_f64() * 1e3,
                row.mean().as_secs_f64() * 1e6,
                row.max.as_secs_f64() * 1e6,
            )?;
        }
        Ok(())
    }
}

/// The accumulator behind the process-wide table.
#[derive(Debug, Default)]
struct Times(BTreeMap<(Op, Phase), Row>);

impl Times {
    fn add(&mut self, op: Op, phase: Phase, duration: Duration) {
        let row = self.0.entry((op, phase)).or_insert(Row {
            op,
            phase,
            count: 0,
            total: Duration::ZERO,
            max: Duration::ZERO,
        });
        row.count += 1;
        row.total += duration;
        row.max = row.max.max(duration);
    }

    fn report(&self) -> Report {
        Report {
            rows: self.0.values().copied().collect(),
        }
    }
}

static ENABLED: AtomicBool = AtomicBool::new(false);
static TIMES: Mutex<Times> = Mutex::new(Times(BTreeMap::new()));

fn times() -> std::sync::MutexGuard<'static, Times> {
    // A panic while the lock is held cannot leave a half-updated row behind.
    TIMES
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Switches timing on (process-wide).
pub fn enable() {
    ENABLED.store(true, Ordering::Relaxed);
}

/// Switches timing off; the table keeps what it has.
pub fn disable() {
    ENABLED.store(false, Ordering::Relaxed);
}

/// Whether timing is on.
pub fn is_enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Empties the table.
pub fn reset() {
    times().0.clear();
}

/// The table so far.
pub fn report() -> Report {
    times().report()
}

/// The table so far, emptying it.
pub fn take() -> Report {
    let mut times = times();
    let report = times.report();
    times.0.clear();
    report
}

/// Adds `duration` to (op, phase) when timing is on.
pub fn record(op: Op, phase: Phase, duration: Duration) {
    if is_enabled() {
        times().add(op, phase, duration);
    }
}

/// Runs `f`, adding its wall-clock time to (op, phase) when timing is on.
pub fn time<T>(op: Op, phase: Phase, f: impl FnOnce() -> T) -> T {
    let span = Span::start();
    let out = f();
    span.stop(op, phase);
    out
}

/// A running host timer: `None` (free) when timing is off.
#[derive(Debug)]
pub(crate) struct Span(Option<Instant>);

impl Span {
    pub(crate) fn start() -> Self {
        Span(is_enabled().then(Instant::now))
    }

    /// Records the time since the start (or the last lap) and restarts.
    pub(crate) fn lap(&mut self, op: Op, phase: Phase) {
        if let Some(start) = self.0 {
            let now = Instant::now();
            record(op, phase, now - start);
            self.0 = Some(now);
        }
    }

    /// Records the time since the start (or the last lap).
    pub(crate) fn stop(mut self, op: Op, phase: Phase) {
        self.lap(op, phase);
    }

    /// [`Span::stop`] when there is an op to count it under.
    pub(crate) fn stop_for(self, op: Option<Op>, phase: Phase) {
        if let Some(op) = op {
            self.stop(op, phase);
        }
    }
}

/// The consecutive host phases of one op: each [`Laps::lap`] records the time since the
/// previous one under the op (free when timing is off).
#[derive(Debug)]
pub(crate) struct Laps {
    op: Op,
    span: Span,
}

impl Laps {
    pub(crate) fn start(op: Op) -> Self {
        Self {
            op,
            span: Span::start(),
        }
    }

    pub(crate) fn lap(&mut self, phase: Phase) {
        self.span.lap(self.op, phase);
    }

    pub(crate) fn op(&self) -> Op {
        self.op
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    #[test]
    fn phases_accumulate_per_op_and_phase() {
        let mut t = Times::default();
        t.add(Op::Backward, Phase::Total, us(900));
        t.add(Op::Inference, Phase::CubeclSync, us(30));
        t.add(Op::Inference, Phase::CubeclSync, us(50));
        t.add(Op::Inference, Phase::Total, us(400));
        t.add(Op::Inference, Phase::CudnnForward, us(300));
        let r = t.report();
        let order: Vec<(Op, Phase)> = r.rows().iter().map(|r| (r.op, r.phase)).collect();
        assert_eq!(
            order,
            vec![
                (Op::Inference, Phase::CubeclSync),
                (Op::Inference, Phase::CudnnForward),
                (Op::Inference, Phase::Total),
                (Op::Backward, Phase::Total),
            ]
        );
        let sync = r.get(Op::Inference, Phase::CubeclSync).unwrap();
        assert_eq!((sync.count, sync.total, sync.max), (2, us(80), us(50)));
        assert_eq!(sync.mean(), us(40));
        assert!(r.get(Op::Training, Phase::Total).is_none());
    }

    #[test]
    fn the_table_shows_each_phase_with_its_share_of_the_op() {
        let mut t = Times::default();
        t.add(Op::Inference, Phase::Total, us(400));
        t.add(Op::Inference, Phase::CubeclSync, us(100));
        t.add(Op::Inference, Phase::CudnnForward, us(300));
        t.add(Op::Caller, Phase::WeightsCat, us(50));
        let table = t.report().to_string();
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 2 + 4, "{table}");
        assert!(lines[0].starts_with("| op | phase | count | total (ms)"));
        assert!(
            lines.contains(&"| Inference | CubeclSync | 1 | 0.100 | 100.0 | 100.0 | 25.0% |"),
            "{table}"
        );
        assert!(
            lines.contains(
                &"| Inference | CudnnForward (GPU) | 1 | 0.300 | 300.0 | 300.0 | 75.0% |"
            ),
            "{table}"
        );
        // No Iteration row for the caller: no share.
        assert!(
            lines.contains(&"| Caller | WeightsCat | 1 | 0.050 | 50.0 | 50.0 | — |"),
            "{table}"
        );
    }

    #[test]
    fn nothing_is_recorded_while_off_and_take_empties_the_table() {
        // The only test that touches the process-wide table.
        disable();
        reset();
        record(Op::Caller, Phase::Iteration, us(10));
        assert!(Span::start().0.is_none(), "a span is free while off");
        assert!(report().is_empty());
        enable();
        record(Op::Caller, Phase::Iteration, us(10));
        let out = time(Op::Caller, Phase::WeightsCat, || 7);
        assert_eq!(out, 7);
        let mut span = Span::start();
        span.lap(Op::Inference, Phase::Checks);
        span.stop(Op::Inference, Phase::Total);
        disable();
        record(Op::Caller, Phase::Iteration, us(10));
        let taken = take();
        assert_eq!(taken.get(Op::Caller, Phase::Iteration).unwrap().count, 1);
        assert_eq!(taken.get(Op::Caller, Phase::WeightsCat).unwrap().count, 1);
        assert_eq!(taken.get(Op::Inference, Phase::Checks).unwrap().count, 1);
        assert_eq!(taken.get(Op::Inference, Phase::Total).unwrap().count, 1);
        assert!(report().is_empty());
    }
}
