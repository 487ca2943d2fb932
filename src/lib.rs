//! # burn-fused-rnn
//!
//! Fused recurrent layers for [Burn](https://burn.dev): LSTM, GRU, RNN-tanh and RNN-relu,
//! many layers and both directions, variable-length batches, run as ONE op.
//!
//! - On NdArray and Flex the op runs a native CPU kernel: GEMMs from the `gemm` crate on
//!   rayon's pool and one fused, vectorised element-wise pass per step (see the README's
//!   "Design" section).
//! - On CUDA it runs cuDNN (feature `cuda`).
//! - Every other backend runs the reference implementation written with Burn tensor ops
//!   ([`mod@reference`]), which is also the oracle the others are tested against.
//! - Weights live in [`FusedRnn`], whose record holds the canonical tensors (PyTorch
//!   names and orientation, cuDNN gate order; see [`layout`]), so Burn's recorders save and
//!   restore checkpoints on any backend.
//!
//! The design follows TensorFlow's `tf.contrib.cudnn_rnn`: a config ([`FusedRnnConfig`]),
//! a canonical layout with `params_size` and flat-params conversions
//! ([`FusedRnn::flat_weights`], [`FusedRnnConfig::init_with_params`]), and a backend
//! extension ([`FusedRnnBackend`]) whose default methods are the reference.
//!
//! ## Tour
//!
//! config ([`config`]) → layout ([`layout`]) → call descriptor ([`descriptor`]) → the op's
//! value types ([`op_types`]) → implementations (the reference [`mod@reference`], the
//! native CPU kernel, `cudnn`, `fusion`, `autodiff`) → backend trait ([`backend`]) →
//! module ([`FusedRnn`]); and the parity suite `testing`.
//!
//! ## Example
//!
//! ```
//! use burn::backend::NdArray;
//! use burn::tensor::{Distribution, Tensor};
//! use burn_fused_rnn::{FusedRnnConfig, RnnMode};
//!
//! let device = Default::default();
//! let lstm = FusedRnnConfig::new(RnnMode::Lstm, 8, 16)
//!     .with_num_layers(2)
//!     .with_bidirectional(true)
//!     .init::<NdArray>(&device);
//! // [batch_size, seq_length, d_input]
//! let x = Tensor::<NdArray, 3>::random([4, 10, 8], Distribution::Default, &device);
//! let (y, state) = lstm.forward_with_lengths(x, &[10, 7, 3, 0], None);
//! assert_eq!(y.dims(), [4, 10, 32]); // D * H = 2 * 16
//! assert_eq!(state.hidden.dims(), [4, 4, 16]); // [L*D, B, H]
//! ```
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
#[cfg(feature = "cuda")]
#[cfg_attr(docsrs, doc(cfg(feature = "cuda")))]
pub mod cudnn;
pub mod descriptor;
#[cfg(feature = "fusion")]
#[cfg_attr(docsrs, doc(cfg(feature = "fusion")))]
pub mod fusion;
pub mod interop;
pub mod layout;
mod module;
pub mod nn;
pub mod op_types;
pub mod ops;
pub mod reference;
#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod testing;

pub use backend::{FusedRnnBackend, RnnGrads, RnnInputs, RnnOutput, RnnOutputGrads, RnnReserve};
pub use config::{FusedRnnConfig, InputMode, RnnMode, RnnSpec};
pub use descriptor::{DropoutSpec, RnnDescriptor};
pub use layout::{params_size, ParamKind, RnnLayout};
pub use module::{
    FileProblem, FusedRnn, FusedRnnLoadError, FusedRnnRecord, PreparedRnn, RnnCell, RnnCellRecord,
    RnnState, WeightsDigest,
};
pub use ops::{fused_rnn, reserve_bytes, FusedRnnOutput};

/// Burn's Wgpu backend without fusion: the reference path, on the GPU (or on the CPU
/// through a Vulkan driver such as lavapipe). `burn::backend::Wgpu` with Burn's default
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
}
