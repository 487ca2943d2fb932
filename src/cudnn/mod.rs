//! cuDNN's RNN kernels behind the fused op on Burn's CUDA backend (feature `cuda`).
//!
//! `CubeBackend<CudaRuntime, ..>` implements [`FusedRnnBackend`](crate::FusedRnnBackend) with
//! `cudnnRNNForward` (inference and training modes), `cudnnRNNBackwardData_v8` and
//! `cudnnRNNBackwardWeights_v8`; through it `Fusion<..>` (= `burn::backend::Cuda`) and
//! `Autodiff<..>` run cuDNN too. All of this crate's `unsafe` lives under this module.
//!
//! Settings (process-wide, read once at the start of each call; a fused op reads them at
//! registration, Note [Pinned settings]): [`set_enabled`], [`set_tf32`],
//! [`set_algorithm`] ([`RnnAlgorithm`], Note [RNN algorithms]). Diagnostics:
//! [`cudnn_calls`], [`cudnn_calls_with`], and the per-phase timing of [`profile`].
//!
//! # Files
//!
//! `ffi` (checked calls, RAII descriptors), `descriptors` (host-only descriptors of a
//! network and a call shape), `settings` (the switches, pinned per call), `algorithm`
//! (choice and fallback rules, reserve tag), `cache` (per-thread state, which request
//! runs which call shape, building and probing), `calls` (the three cuDNN calls),
//! `protocol` (buffers, pointers, the waits), `forward`, `backward`, `dispatch` (the
//! backend trait), [`weights`] (weight-space verification), [`profile`].
//!
//! # Note [cuDNN call protocol]
//!
//! cubecl does not expose its CUDA stream. Per call:
//! - check every tensor's shape, dtype and device against the descriptor and the input
//!   again (the trait's methods are public and safe, and cuDNN trusts every pointer and
//!   size), the reserve's size, and that each buffer holds what its tensor claims;
//! - make every input contiguous (a no-op for contiguous tensors), and allocate outputs,
//!   the workspace and the reserve with `client.empty` (cubecl's memory pool), which is
//!   packed: `Tensor::zeros`/`empty` pad each row to an aligned pitch, which cuDNN would
//!   read as data;
//! - take each buffer's device pointer with `client.get_resource` (it includes the view's
//!   offset, which burn-cubecl keeps 512-byte aligned, and orders cubecl's stream after
//!   the buffer's producer), then wait for cubecl with `client.sync()`;
//! - make the device's context current on the thread (cuDNN runs in the current context,
//!   and the thread may have used another device since); the cache lookup at the start
//!   of a call binds it too, before anything is built or evicted, since cudarc frees
//!   device memory in whatever context is current;
//! - zero what must start at zero with `cuMemsetD8Async` on the crate's stream: the weight
//!   gradient (cuDNN adds into it), a missing `dy`, and `dx` of variable-length batches
//!   (cuDNN documents its padding fill for outputs only);
//! - run cuDNN on a stream this crate owns (same primary context), synchronize that stream,
//!   also before a failed call panics (if even that fails, the guards are leaked rather
//!   than let cubecl reuse memory a kernel may still touch), and only then drop the
//!   resource guards.
//!
//! Why each wait stays. Both block the host, and both are needed as long as cubecl keeps
//! its stream private:
//! - `client.sync()` before cuDNN: the crate's stream is not ordered after cubecl's, so
//!   without it cuDNN could read inputs that cubecl's kernels (the weights'
//!   concatenation, an `into_contiguous`, the previous layer) have not written yet. An
//!   event recorded on cubecl's stream would be cheaper, but needs that stream.
//! - the stream synchronize after cuDNN: cubecl's stream is not ordered after the crate's
//!   either, and the outputs go back to cubecl, whose next kernels may read them and
//!   whose allocator may reuse the inputs' memory once the guards drop.
//!
//! What each call no longer pays (no GPU was available to measure the difference; the
//! per-phase timing of [`profile`] measures what remains):
//! - the sequence lengths are uploaded to the device once per call shape (kept with the
//!   cached call shape), not per call;
//! - batch-first input and output are handed to cuDNN as they are, with its batch-major
//!   layout (`CUDNN_RNN_DATA_LAYOUT_BATCH_MAJOR_UNPACKED`): no transpose or copy;
//! - with the identity weight plan (every cuDNN PyTorch has shipped with), the flat
//!   weights are the weight space: no copy in this module.
//!
//! Not done here, and why: the weights' concatenation happens in the module
//! (`FusedRnn::flat_weights`, outside this module) on every call; keeping a prepared
//! weight space for inference needs the module to know when its parameters change.
//! `client.sync()` and the closing synchronize stay (above). The workspace is allocated
//! per call from cubecl's pool, which keeps freed memory for reuse: a buffer kept per
//! thread outside the pool would hold one copy of the largest workspace per thread, and
//! no GPU measurement has shown that it saves anything.
//!
//! The handle, the stream and the caches live per (thread, device): dropout states,
//! networks (RNN descriptor, weight plan) per (spec, dropout probability, dtype, TF32,
//! algorithm; and batch size for `PERSIST_DYNAMIC`), call shapes (data descriptors,
//! device lengths, workspace and reserve sizes) per (network, T, B, lengths, layout), and
//! which call shape each forward request (settings, pass, call shape) runs; a new batch
//! shape does not rebuild the network or re-seed its dropout.
//!
//! # Note [cuDNN fallback]
//!
//! The CUDA backend uses the reference path, never cuDNN, when:
//! - libcudnn cannot be loaded, or its version is not 9.x ([`cudnn_version`], checked once,
//!   one `log` warning);
//! - the call has a sequence of length 0 (cuDNN requires lengths ≥ 1);
//! - the dtype is not F32, F64, F16 or BF16; or cuDNN refuses the network when its
//!   descriptors are built; or its weight space cannot be mapped to the canonical layout
//!   (Note [Weight space verification] in [`weights`]); or the network fails its probe at
//!   `T = B = 1` on zeros, run once per network and pass (an inference forward for
//!   inference; a training forward and both backward calls for training), because cuDNN
//!   refuses some combinations (BF16 RNNs are not in its documentation) only when it
//!   executes them. Each such network is warned about once per thread.
//!
//! A persistent algorithm ([`set_algorithm`]) that cannot run a call shape falls back to
//! the standard algorithm first (Note [RNN algorithms]), then to the reference.
//!
//! The decision is a function of the descriptor, dtype, settings, pass and device, made
//! per thread and remembered (a failure to build, out of memory included, too), so the
//! declared outputs of a fused op and the op agree (and `crate::fusion` checks that they
//! do). The backward follows the reserve it is given: the reference's (3-D tensors) runs
//! the reference backward whatever the settings are now; cuDNN's (one 1-D buffer) runs the
//! call shape its forward ran (Note [Reserve tag]), never builds or probes while that is
//! cached, and panics with a clear message when `set_enabled(false)` came in between or
//! cuDNN no longer builds that network. A cuDNN call that fails once the
//! descriptors exist (out of memory, a driver error) panics with the call's name and
//! status, after waiting for the stream: the trait's methods have no error channel, and a
//! half-run op has no result.
//!
//! # Precision
//!
//! F32 uses FMA math (no TF32) unless [`set_tf32`] switches TF32 on; F16 and BF16 store in
//! half precision and compute in F32 (`mathPrec = FLOAT`, tensor-op math); F64 is F64.
//!
//! # F64
//!
//! Burn's CUDA backend answers `supports_dtype(F64) == false` on every CUDA device, so the
//! op (`fused_rnn`, `FusedRnn`) refuses F64 there. The cause is not the device: cubecl
//! 0.10's CUDA runtime registers its supported types from one fixed list
//! (`register_supported_types` in cubecl-cpp's `shared/base.rs`), in which F64 is
//! commented out ("Causes CUDA_ERROR_INVALID_VALUE for matmul, disabling until that can
//! be investigated"), and burn-cubecl's `supports_dtype` requires buffer, conversion,
//! arithmetic and dot-product usage of that list. No device property is consulted (only
//! F64 *atomics* depend on the compute capability). cubecl still creates, copies and
//! reads F64 buffers and compiles F64 element-wise kernels; it is its matmul (which the
//! reference path needs) that fails. This module's cuDNN path handles F64 (it runs no
//! cubecl kernel on contiguous inputs), and `tests/cuda.rs` checks it through the backend
//! trait against the reference; the op-level check stays as Burn answers it.
//!
//! # Note [cuDNN dropout]
//!
//! cuDNN draws its own masks from a dropout descriptor built once per network (spec,
//! probability, dtype, settings; `PERSIST_DYNAMIC`'s networks of every batch size share
//! one) per thread and device, and seeded with the seed of the first call that needed it;
//! later calls, of any batch shape, continue its random stream (re-seeding per call would
//! re-initialize cuDNN's generator states each time). The masks
//! are therefore not the reference's (Note [Dropout seeds] in the module), and the parity
//! suite leaves dropout out.

mod algorithm;
mod backward;
mod cache;
mod calls;
mod descriptors;
mod dispatch;
mod ffi;
mod forward;
pub mod profile;
mod protocol;
mod settings;
pub mod weights;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use burn_cubecl::CubeBackend;
use cubecl::cuda::CudaRuntime;

pub use algorithm::RnnAlgorithm;
pub use ffi::CudnnError;
pub(crate) use settings::CallSettings;
pub use settings::{algorithm, enabled, set_algorithm, set_enabled, set_tf32, tf32};

type Cuda<F, I, BT> = CubeBackend<CudaRuntime, F, I, BT>;

/// Why the CUDA backend runs the reference path instead of cuDNN (Note [cuDNN fallback]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fallback {
    /// No loadable `libcudnn.so.9` (or any `libcudnn` cudarc looks for).
    LibraryMissing,
    /// A cuDNN whose version is not 9.x (`cudnnGetVersion`, e.g. 8907).
    UnsupportedVersion(usize),
}

impl std::fmt::Display for Fallback {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fallback::LibraryMissing => write!(f, "libcudnn could not be loaded"),
            Fallback::UnsupportedVersion(v) => write!(
                f,
                "expected cuDNN 9 (version 90000..100000), got version {v}"
            ),
        }
    }
}

/// The detection logic, without touching the library: `present` says whether libcudnn
/// loads, `version` reads `cudnnGetVersion` (called only when present).
pub fn classify(present: bool, version: impl FnOnce() -> usize) -> Result<usize, Fallback> {
    if !present {
        return Err(Fallback::LibraryMissing);
    }
    match version() {
        v @ 90_000..=99_999 => Ok(v),
        v => Err(Fallback::UnsupportedVersion(v)),
    }
}

/// The loaded cuDNN's version, detected once per process. When it is missing or not 9.x,
/// logs one warning and returns why; the CUDA backend then runs the reference path.
pub fn cudnn_version() -> Result<usize, Fallback> {
    static DETECTED: OnceLock<Result<usize, Fallback>> = OnceLock::new();
    DETECTED
        .get_or_init(|| {
            // SAFETY: is_culib_present only tries to dlopen cudarc's candidate library names
            // and drops what it opened; it calls no cuDNN function.
            let present = unsafe { cudarc::cudnn::sys::is_culib_present() };
            let detected = classify(present, cudarc::cudnn::result::get_version);
            if let Err(reason) = &detected {
                log::warn!(
                    "burn-fused-rnn: cuDNN is not used ({reason}); the CUDA backend runs the reference implementation"
                );
            }
            detected
        })
        .clone()
}

static CALLS: [AtomicU64; 4] = [const { AtomicU64::new(0) }; 4];

/// How many cuDNN RNN calls (forward, backward data, backward weights) this process has
/// made: a diagnostic that shows which path ran.
pub fn cudnn_calls() -> u64 {
    CALLS.iter().map(|c| c.load(Ordering::Relaxed)).sum()
}

/// How many of [`cudnn_calls`] ran with `algorithm` (the algorithm cuDNN ran, after any
/// fallback; `Auto` is never run as such and counts 0): shows which algorithm a setting
/// ended up using.
pub fn cudnn_calls_with(algorithm: RnnAlgorithm) -> u64 {
    algorithm::Algo::of(algorithm).map_or(0, |a| CALLS[a.index()].load(Ordering::Relaxed))
}

pub(crate) fn count_call(algo: algorithm::Algo) {
    CALLS[algo.index()].fetch_add(1, Ordering::Relaxed);
}

/// Drops the calling thread's cuDNN state on every device: cached networks, dropout
/// states and call shapes, the handle and the stream. The next call rebuilds what it
/// needs (and probes it again); a backward whose forward's entry is gone rebuilds that
/// network without a probe (Note [Reserve tag]).
pub fn clear_cache() {
    cache::clear_thread_state();
}

/// Whether a CUDA driver and at least one CUDA device are present (the GPU tests skip
/// without one). Never panics.
pub fn cuda_device_available() -> Result<usize, String> {
    // SAFETY: is_culib_present only tries to dlopen the driver library's candidate names.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err("no CUDA driver library (libcuda) could be loaded".into());
    }
    match cudarc::driver::CudaContext::device_count() {
        Ok(n) if n > 0 => Ok(n as usize),
        Ok(_) => Err("the CUDA driver reports no device".into()),
        Err(e) => Err(format!("the CUDA driver reports no device ({e:?})")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detection_accepts_only_a_loadable_cudnn_9() {
        assert_eq!(classify(true, || 90_100), Ok(90_100));
        assert_eq!(classify(true, || 91_400), Ok(91_400));
        assert_eq!(
            classify(true, || 8_907),
            Err(Fallback::UnsupportedVersion(8_907))
        );
        assert_eq!(
            classify(true, || 100_000),
            Err(Fallback::UnsupportedVersion(100_000))
        );
        let mut asked = false;
        assert_eq!(
            classify(false, || {
                asked = true;
                90_000
            }),
            Err(Fallback::LibraryMissing)
        );
        assert!(!asked, "the version of a missing library is never read");
        assert_eq!(
            Fallback::UnsupportedVersion(8_907).to_string(),
            "expected cuDNN 9 (version 90000..100000), got version 8907"
        );
    }
}
