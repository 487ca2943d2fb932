//! TensorFlow 1's `tf.contrib.cudnn_rnn` canonical checkpoints (`CudnnLSTM`, `CudnnGRU`,
//! `CudnnRNNTanh`, `CudnnRNNRelu`), the design this crate follows, to and from a
//! [`FusedRnn`].
//!
//! TF1 saved cuDNN's opaque params "in a canonical format which is directly consumable by
//! platform-independent tf RNN cells" (`CudnnOpaqueParamsSaveable`), one set per layer and
//! direction under
//! `rnn/multi_rnn_cell/cell_{l}/{cell}/...` (unidirectional) or
//! `stack_bidirectional_rnn/cell_{l}/bidirectional_rnn/{fw|bw}/{cell}/...`, optionally
//! behind a scope `{scope}/`:
//!
//! | mode | `{cell}` | tensors |
//! |---|---|---|
//! | LSTM | `cudnn_compatible_lstm_cell` | `kernel` `[in + H, 4H]` gates `i, c, f, o`; `bias` `[4H]` |
//! | GRU | `cudnn_compatible_gru_cell` | `gates/kernel` `[in + H, 2H]` gates `r, u`; `gates/bias` `[2H]`; `candidate/input_projection/{kernel [in, H], bias [H]}`; `candidate/hidden_projection/{kernel [H, H], bias [H]}` |
//! | RNN | `basic_rnn_cell` | `kernel` `[in + H, H]`; `bias` `[H]` |
//!
//! Each `kernel` stacks the input matrix over the recurrent one (`[W R]ᵀ`, applied to
//! `[x, h]`). TF1 saves the SUM of cuDNN's two biases (except the GRU candidate's) and
//! restores each as half of it, which computes the same; import does the same.
//!
//! TensorFlow 1 cannot be installed where this crate is tested: the tests check these
//! conversions against the names and transformations of `cudnn_rnn_ops.py`
//! (`CudnnLSTMSaveable`, `CudnnGRUSaveable`, `CudnnRNNSimpleSaveable`) transcribed to numpy
//! and applied to PyTorch modules' weights, and against a numpy transcription of the TF1
//! cells run on the result (`tests/fixtures/interop/generate.py`), not against TF1 itself.
//!
//! ```
//! use burn::backend::NdArray;
//! use burn_fused_rnn::interop::tf1;
//! use burn_fused_rnn::{FusedRnn, FusedRnnConfig, RnnMode};
//!
//! # fn main() -> Result<(), burn_fused_rnn::interop::InteropError> {
//! let device = Default::default();
//! let lstm = FusedRnnConfig::new(RnnMode::Lstm, 3, 4)
//!     .with_batch_first(false)
//!     .init::<NdArray>(&device);
//! let tensors = tf1::export(&lstm, "")?;
//! let kernel = &tensors["rnn/multi_rnn_cell/cell_0/cudnn_compatible_lstm_cell/kernel"];
//! assert_eq!(kernel.shape.to_vec(), [3 + 4, 16]);
//! let back: FusedRnn<NdArray> = tf1::import(RnnMode::Lstm, &tensors, "", &device)?;
//! assert!(!back.batch_first()); // TF1's cuDNN RNNs are sequence-first
//! # Ok(())
//! # }
//! ```
//!
//! What is refused, and why: Note [What conversions refuse] in [`crate::interop`].

use std::collections::BTreeMap;

use burn::tensor::backend::Backend;
use burn::tensor::TensorData;

use super::canonical::{from_imported, host_weights, read_host, to_data};
use super::InteropError;
use crate::module::FusedRnn;
use crate::spec::RnnMode;
use burn_fused_rnn_core::interop::tf1 as core_tf1;

pub use core_tf1::cell_prefix;

/// Builds the fused module of `mode` held by the TF1 canonical tensors `tensors` (by name,
/// under `scope`; other names, such as optimizer slots, are ignored), sequence-first as
/// TF1's cuDNN RNNs are (`batch_first = false`).
///
/// Layers and directions come from the names present; sizes from `kernel` shapes.
///
/// # Errors
///
/// [`InteropError::Missing`] naming a tensor that is absent, [`InteropError::Shape`] naming
/// one of the wrong shape, [`InteropError::Dtype`], [`InteropError::NotFinite`].
pub fn import<B: Backend>(
    mode: RnnMode,
    tensors: &BTreeMap<String, TensorData>,
    scope: &str,
    device: &B::Device,
) -> Result<FusedRnn<B>, InteropError> {
    from_imported(core_tf1::import(mode, tensors, scope, read_host)?, device)
}

/// The TF1 canonical tensors of `rnn`, by name under `scope` (`""` for none), as
/// `CudnnOpaqueParamsSaveable` saves them, in the module's dtype. A module without bias
/// gets zero biases (TF1's cells always have one).
///
/// # Errors
///
/// [`InteropError::Unsupported`] for a projection (`proj_size`): TF1's cells have none.
pub fn export<B: Backend>(
    rnn: &FusedRnn<B>,
    scope: &str,
) -> Result<BTreeMap<String, TensorData>, InteropError> {
    let (flat, dtype) = host_weights(rnn);
    let tensors = core_tf1::export(rnn.spec(), &flat, scope)?;
    Ok(tensors
        .into_iter()
        .map(|(k, t)| (k, to_data(t, dtype)))
        .collect())
}
