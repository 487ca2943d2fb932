//! Two-way parallelism for the reference implementation on CPU backends.
//!
//! # Note [Reference threads]
//!
//! Burn's CPU backends run each op on the calling thread, and at RNN sizes their GEMMs use
//! one core. The reference therefore runs independent work on two host threads when the
//! backend says it may ([`FusedRnnBackend::fused_rnn_reference_threads`]): the two
//! directions of a bidirectional layer, or, within one direction, the gate groups of the
//! input projection and of each step's recurrent GEMM, and halves of the backward's large
//! GEMMs. The math is the same whatever the thread count: each element comes from the same
//! op over the same operands (a GEMM split by rows keeps each dot product whole); only the
//! thread that runs it changes.
//!
//! [`FusedRnnBackend::fused_rnn_reference_threads`]: crate::FusedRnnBackend::fused_rnn_reference_threads

/// Runs `a` and `b`, on two threads when `parallel`, and returns both results.
pub(crate) fn join<RA: Send, RB: Send>(
    parallel: bool,
    a: impl FnOnce() -> RA + Send,
    b: impl FnOnce() -> RB + Send,
) -> (RA, RB) {
    if !parallel {
        return (a(), b());
    }
    std::thread::scope(|s| {
        let handle = s.spawn(a);
        let rb = b();
        let ra = handle
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        (ra, rb)
    })
}
