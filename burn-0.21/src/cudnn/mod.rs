//! cuDNN's RNN kernels behind the fused op on Burn's CUDA backend (feature `cuda`).
//!
//! `CubeBackend<CudaRuntime, ..>` implements [`FusedRnnBackend`](crate::FusedRnnBackend) with
//! `cudnnRNNForward` (inference and training modes), `cudnnRNNBackwardData_v8` and
//! `cudnnRNNBackwardWeights_v8`; through it `Fusion<..>` (= `burn::backend::Cuda`) and
//! `Autodiff<..>` run cuDNN too.
//!
//! Settings (process-wide, read once at the start of each call; a fused op reads them at
//! registration, Note [Pinned settings]): [`set_enabled`], [`set_tf32`],
//! [`set_algorithm`] ([`RnnAlgorithm`], Note [RNN algorithms]). Diagnostics:
//! [`cudnn_version`], [`cudnn_calls`], [`cudnn_calls_with`], and the per-phase timing of
//! [`profile`].
//!
//! The layers, the call protocol and the fallback are in ARCHITECTURE.md ("cuDNN"); each
//! file's Notes hold the details: Note [cuDNN call protocol] (`protocol`), Note [cuDNN
//! fallback] (`dispatch`), Note [RNN algorithms] and Note [Reserve tag] (`algorithm`),
//! Note [cuDNN dropout] (`build`), Note [Pinned settings] (`settings`), Note [Weight
//! space verification] ([`weights`]).

mod algorithm;
mod backward;
mod build;
mod cache;
mod checks;
mod descriptors;
mod dispatch;
mod ffi;
mod forward;
mod library;
mod network;
pub mod profile;
mod protocol;
mod settings;
mod state;
pub mod weights;

pub use algorithm::{cudnn_calls, cudnn_calls_with, RnnAlgorithm};
pub use ffi::CudnnError;
pub use library::{classify, cuda_device_available, cudnn_version, Fallback};
pub(crate) use settings::CallSettings;
pub use settings::{algorithm, enabled, set_algorithm, set_enabled, set_tf32, tf32};

/// Drops the calling thread's cuDNN state on every device: cached networks, dropout
/// states and call shapes, the handle and the stream. The next call rebuilds what it
/// needs (and probes it again); a backward whose forward's entry is gone rebuilds that
/// network without a probe (Note [Reserve tag]).
pub fn clear_cache() {
    state::clear_thread_state();
}
