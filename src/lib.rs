//! # burn-fused-rnn
//!
//! Fused recurrent layers for [Burn](https://burn.dev): LSTM, GRU, RNN-tanh and RNN-relu,
//! many layers and both directions, variable-length batches, run as ONE op.
//!
//! - On every backend the op has a reference implementation written with Burn tensor
//!   ops ([`mod@reference`]): one GEMM for the input projection of all time steps, one
//!   recurrent GEMM per step.
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
//! config ([`config`]) → layout ([`layout`]) → call descriptor ([`descriptor`]) → backend
//! trait ([`backend`]) → reference ([`mod@reference`]) → module ([`FusedRnn`]); per backend:
//! `fusion` (any `Fusion<B>`), `cudnn` (CUDA), and the parity suite `testing`.
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
#[cfg(feature = "cuda")]
#[cfg_attr(docsrs, doc(cfg(feature = "cuda")))]
pub mod cudnn;
pub mod descriptor;
#[cfg(feature = "fusion")]
#[cfg_attr(docsrs, doc(cfg(feature = "fusion")))]
pub mod fusion;
pub mod layout;
mod module;
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
    FileProblem, FusedRnn, FusedRnnLoadError, FusedRnnRecord, RnnCell, RnnCellRecord, RnnState,
    WeightsDigest,
};
pub use ops::{fused_rnn, FusedRnnOutput};

#[cfg(feature = "ndarray")]
mod impls_ndarray {
    use burn::backend::ndarray::{
        FloatNdArrayElement, IntNdArrayElement, NdArray, NdArrayTensor, QuantElement, SharedArray,
    };

    #[cfg_attr(docsrs, doc(cfg(feature = "ndarray")))]
    impl<E: FloatNdArrayElement, I: IntNdArrayElement, Q: QuantElement> crate::FusedRnnBackend
        for NdArray<E, I, Q>
    where
        NdArrayTensor: From<SharedArray<E>>,
        NdArrayTensor: From<SharedArray<I>>,
    {
        fn fused_rnn_reference_threads() -> usize {
            crate::reference::host_threads()
        }
    }
}

#[cfg(feature = "flex")]
#[cfg_attr(docsrs, doc(cfg(feature = "flex")))]
impl crate::FusedRnnBackend for burn::backend::Flex {
    fn fused_rnn_reference_threads() -> usize {
        crate::reference::host_threads()
    }
}

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
