// The README is the crate's front page, and every Rust snippet in it runs as a doctest.
#![doc = include_str!("../../README.md")]
#![warn(missing_docs)]
// docs.rs builds with `--cfg docsrs` (Cargo.toml): mark each feature-gated item with its feature.
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(feature = "autodiff")]
#[cfg_attr(docsrs, doc(cfg(feature = "autodiff")))]
pub mod autodiff;
pub mod backend;
pub mod config;
#[cfg(any(feature = "ndarray", feature = "flex"))]
mod cpu;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
#[cfg_attr(docsrs, doc(cfg(any(feature = "wgpu", feature = "cuda"))))]
pub mod cube;
#[cfg(feature = "cuda")]
#[cfg_attr(docsrs, doc(cfg(feature = "cuda")))]
pub mod cudnn;
mod dropout;
#[cfg(feature = "fusion")]
#[cfg_attr(docsrs, doc(cfg(feature = "fusion")))]
pub mod fusion;
pub mod interop;
mod module;
pub mod nn;
pub mod op_types;
pub mod ops;
pub mod reference;
#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod testing;

// The Burn-free core (crate `burn-fused-rnn-core`): its modules keep the paths they had
// in this crate.
pub(crate) use burn_fused_rnn_core::host;
pub use burn_fused_rnn_core::{descriptor, layout, random, spec};

pub use backend::FusedRnnBackend;
pub use config::FusedRnnConfig;
pub use descriptor::{DropoutSpec, GradsWanted, RnnDescriptor};
pub use layout::{params_size, ParamKind, RnnLayout};
pub use module::{
    FileProblem, FusedRnn, FusedRnnLoadError, FusedRnnRecord, PreparedRnn, RnnCell, RnnCellRecord,
    RnnState, WeightsDigest,
};
pub use op_types::{RnnGrads, RnnInputs, RnnOutput, RnnOutputGrads, RnnReserve};
pub use ops::{fused_rnn, reserve_bytes, FusedRnnOutput};
pub use spec::{InputMode, RnnMode, RnnSpec};

/// Runs a closure with the native CPU kernel's step products reducing in chunks of a given
/// number of steps (by default chosen from the L1 size and the CPU: the core crate's Note
/// [Reduction chunks]; for a process, `BURN_FUSED_RNN_K_CHUNK`).
pub use burn_fused_rnn_core::cpu::projection::with_k_chunk;
/// Runs a closure with the native CPU kernel's chunked step products asking for each next
/// chunk of their weights ahead, or never (by default, when the packed weights take at
/// least one core's L2: the core crate's Note [Next chunk ahead]; for a process,
/// `BURN_FUSED_RNN_PREFETCH=0|1`). Only the time changes, never a result.
pub use burn_fused_rnn_core::cpu::projection::with_next_chunk_ahead;
/// Where the native CPU kernel computes the input projection: fused into each step, or
/// ahead for a block of steps (chosen per call from the rows per thread and the SIMD
/// level; forced on a thread with [`with_input_projection`], or for a process with
/// `BURN_FUSED_RNN_PROJECTION=fused|ahead`).
pub use burn_fused_rnn_core::cpu::projection::{with_input_projection, InputProjection};
/// The SIMD level of the native CPU kernel (NdArray, Flex): detected, set for a process by
/// `BURN_FUSED_RNN_SIMD`, or forced on a thread with [`with_simd_level`] (Note [SIMD
/// levels] in the kernel's `simd` module).
#[cfg(any(feature = "ndarray", feature = "flex"))]
#[cfg_attr(docsrs, doc(cfg(any(feature = "ndarray", feature = "flex"))))]
pub use burn_fused_rnn_core::cpu::simd::{with_simd_level, SimdLevel};
/// Runs a closure with the native CPU kernel's inference steps (a decoding step of up to 8
/// sequences, or each step of one sequence) splitting their product with a second thread
/// of rayon's pool, or never (by default, with two threads or more and a product of at
/// least 150,000 multiply-adds, an LSTM of one sequence from `H = 137`: the core crate's
/// Note [A step over two threads];
/// for a process, `BURN_FUSED_RNN_STEP_SPLIT=0|1`). Only the time changes, never a result.
pub use burn_fused_rnn_core::cpu::split::with_step_split;
/// The process-wide cache of packed weights of the native CPU kernel (Note [Thread
/// safety] on [`FusedRnn`]): its bound and how many networks it holds.
#[cfg(any(feature = "ndarray", feature = "flex"))]
#[cfg_attr(docsrs, doc(cfg(any(feature = "ndarray", feature = "flex"))))]
pub use burn_fused_rnn_core::cpu::{packed_weights_cached, PACKED_WEIGHTS_CACHE_ENTRIES};
/// The spare training reserves of the native CPU kernel, kept for the next training forward
/// (Note [Reserve reuse] in the core crate's kernel): how many are kept now, and freeing
/// them (for a process that trained and now only infers).
#[cfg(any(feature = "ndarray", feature = "flex"))]
#[cfg_attr(docsrs, doc(cfg(any(feature = "ndarray", feature = "flex"))))]
pub use burn_fused_rnn_core::cpu::{release_reserves, reserves_kept};

/// Burn's Wgpu backend without fusion: the CubeCL kernels of [`cube`], on the GPU (or on
/// the CPU through a Vulkan driver such as lavapipe), or the reference where they do not
/// run (Note [Cube fallback] in [`cube`]). `burn::backend::Wgpu` with Burn's default
/// features is `Fusion<..>` of this, implemented in [`fusion`].
#[cfg(feature = "wgpu")]
#[cfg_attr(docsrs, doc(cfg(feature = "wgpu")))]
impl<F, I, BT> crate::FusedRnnBackend
    for burn::backend::wgpu::CubeBackend<burn::backend::wgpu::WgpuRuntime, F, I, BT>
where
    F: burn::backend::wgpu::FloatElement,
    I: burn::backend::wgpu::IntElement,
    BT: burn::backend::wgpu::BoolElement,
{
    backend::implemented_by!(cube);
}

/// The Rust snippets of docs/GPU.md, compiled and run as doctests.
#[cfg(all(doctest, feature = "cuda"))]
#[doc = include_str!("../../docs/GPU.md")]
pub struct GpuDocTests;
