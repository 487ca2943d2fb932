//! burn-fused-rnn for Burn 0.22: LSTM, GRU and plain RNN stacks (many layers, both
//! directions, variable-length batches) run as ONE fused op, with canonical (PyTorch /
//! cuDNN) weights. The repository's README says what this line has and what it does not
//! have yet, beside the Burn 0.21 line.
//!
//! Where a call runs follows its input's device ([`route_of`], Note [Call routing] in
//! [`ops`]): the native CPU kernel on NdArray and Flex (features `ndarray`, `flex`, on by
//! default), the CubeCL kernels on Wgpu (feature `wgpu`; `fusion` for Wgpu under Burn's
//! kernel fusion), the reference in Burn tensor ops elsewhere; under autodiff (feature
//! `autodiff`, on by default) the first two run inside one backward node per call.
//! Feature `testing` adds the backend-parity suite ([`testing`]).
//!
//! A unidirectional module also decodes step by step: [`FusedRnn::prepare`] builds its
//! flat weights once, and each [`PreparedRnn::step`] runs every layer for one step as one
//! fused call (Note [Step-by-step decoding] on [`PreparedRnn`]).
//!
//! A model holding the layer where PyTorch's holds an `nn.LSTM` loads PyTorch's state_dict
//! with burn-store (Note [Parameter names] on [`FusedRnn`]), runs it, and saves it:
//!
//! ```
//! use burn::module::Module;
//! use burn::nn::{Linear, LinearConfig};
//! use burn::store::{ModuleSnapshot, PytorchStore};
//! use burn::tensor::{Device, Distribution, Tensor};
//! use burn_fused_rnn::{FusedRnn, FusedRnnConfig, RnnMode};
//!
//! // PyTorch: self.embed = nn.Linear(6, 3); self.rnn = nn.LSTM(3, 5, num_layers=2,
//! // bidirectional=True, proj_size=3, batch_first=True) (tests/fixtures/interop of the 0.21 line).
//! #[derive(Module, Debug)]
//! struct Encoder {
//!     embed: Linear,
//!     rnn: FusedRnn,
//! }
//! #[derive(Module, Debug)]
//! struct Model {
//!     encoder: Encoder,
//!     head: Linear,
//! }
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let device = Device::flex().autodiff();
//! let mut model = Model {
//!     encoder: Encoder {
//!         embed: LinearConfig::new(6, 3).init(&device),
//!         rnn: FusedRnnConfig::new(RnnMode::Lstm, 3, 5)
//!             .with_num_layers(2)
//!             .with_bidirectional(true)
//!             .with_proj_size(Some(3))
//!             .init(&device),
//!     },
//!     head: LinearConfig::new(6, 2).init(&device),
//! };
//! let file = concat!(
//!     env!("CARGO_MANIFEST_DIR"),
//!     "/../burn-0.21/tests/fixtures/interop/model_lstm_proj.pt"
//! );
//! let loaded = model.load_from(&mut PytorchStore::from_file(file))?;
//! assert!(loaded.is_success(), "{loaded}");
//!
//! let x = Tensor::<3>::random([4, 7, 3], Distribution::Default, &device); // [batch, seq, 3]
//! let (y, state) = model.encoder.rnn.forward(x, None);
//! assert_eq!(y.dims(), [4, 7, 6]); // both directions, projection size 3
//! assert_eq!(state.hidden.dims(), [4, 4, 3]); // [layers * directions, batch, 3]
//!
//! let path = std::env::temp_dir().join(format!("bfr-doc-{}.bpk", std::process::id()));
//! model.clone().save_file(&path)?; // keys: encoder.rnn.weight_ih_l0, ...
//! # std::fs::remove_file(&path)?;
//! # Ok(())
//! # }
//! ```
#![warn(missing_docs)]

#[cfg(all(
    feature = "autodiff",
    any(feature = "ndarray", feature = "flex", feature = "wgpu")
))]
pub mod autodiff;
pub mod checkpoint;
pub mod config;
#[cfg(feature = "wgpu")]
pub mod cube;
mod dropout;
pub mod interop;
mod module;
#[cfg(any(feature = "ndarray", feature = "flex"))]
mod native;
pub mod nn;
pub mod ops;
mod prims;
pub mod reference;
mod step;
#[cfg(feature = "testing")]
pub mod testing;

// The Burn-free core (crate `burn-fused-rnn-core`), under the paths the 0.21 line uses.
pub use burn_fused_rnn_core::{descriptor, layout, random, spec};

pub use config::FusedRnnConfig;
pub use descriptor::{DropoutSpec, RnnDescriptor};
pub use layout::{params_size, ParamKind, RnnLayout};
pub use module::{FusedRnn, RnnState};
pub use ops::{fused_rnn, route_of, FusedRnnOutput, Route};
pub use spec::{InputMode, RnnMode, RnnSpec};
pub use step::PreparedRnn;

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
/// `BURN_FUSED_RNN_SIMD`, or forced on a thread with [`with_simd_level`].
#[cfg(any(feature = "ndarray", feature = "flex"))]
pub use burn_fused_rnn_core::cpu::simd::{with_simd_level, SimdLevel};
/// Runs a closure with the native CPU kernel's inference steps (a decoding step of up to 8
/// sequences, or each step of one sequence) splitting their product with a second thread
/// of rayon's pool, or never (by default, with two threads or more and a product of at
/// least 150,000 multiply-adds, an LSTM of one sequence from `H = 137`: the core crate's
/// Note [A step over two threads];
/// for a process, `BURN_FUSED_RNN_STEP_SPLIT=0|1`). Only the time changes, never a result.
pub use burn_fused_rnn_core::cpu::split::with_step_split;
/// The spare training reserves of the native CPU kernel, kept for the next training forward
/// (Note [Reserve reuse] in the core crate's kernel): how many are kept now, and freeing
/// them (for a process that trained and now only infers).
#[cfg(any(feature = "ndarray", feature = "flex"))]
pub use burn_fused_rnn_core::cpu::{release_reserves, reserves_kept};
