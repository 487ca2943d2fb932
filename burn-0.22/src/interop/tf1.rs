//! TensorFlow 1's `tf.contrib.cudnn_rnn` canonical checkpoints (`CudnnLSTM`, `CudnnGRU`,
//! `CudnnRNNTanh`, `CudnnRNNRelu`), the design this crate follows, to and from a
//! [`FusedRnn`].
//!
//! TF1 saved cuDNN's opaque params in a canonical format, one set per layer and direction
//! under `rnn/multi_rnn_cell/cell_{l}/{cell}/...` (unidirectional) or
//! `stack_bidirectional_rnn/cell_{l}/bidirectional_rnn/{fw|bw}/{cell}/...`, optionally
//! behind a scope ([`cell_prefix`]). Each `kernel` stacks the input matrix over the
//! recurrent one (`[W R]ᵀ`); the LSTM's gates are `i, c, f, o`; the GRU keeps its `r, u`
//! gates in `gates/kernel` and its candidate in `candidate/{input,hidden}_projection`. TF1
//! saves the SUM of cuDNN's two biases (except the GRU candidate's) and restores each as
//! half of it, which computes the same; import does the same. The core crate's `tf1`
//! module has the full table.
//!
//! ```
//! use burn::tensor::Device;
//! use burn_fused_rnn::interop::tf1;
//! use burn_fused_rnn::{FusedRnn, FusedRnnConfig, RnnMode};
//!
//! # fn main() -> Result<(), burn_fused_rnn::interop::InteropError> {
//! let device = Device::flex();
//! let lstm = FusedRnnConfig::new(RnnMode::Lstm, 3, 4)
//!     .with_batch_first(false)
//!     .init(&device);
//! let tensors = tf1::export(&lstm, "")?;
//! let kernel = &tensors["rnn/multi_rnn_cell/cell_0/cudnn_compatible_lstm_cell/kernel"];
//! assert_eq!(kernel.shape().to_vec(), [3 + 4, 16]);
//! let back: FusedRnn = tf1::import(RnnMode::Lstm, &tensors, "", &device)?;
//! assert!(!back.batch_first()); // TF1's cuDNN RNNs are sequence-first
//! # Ok(())
//! # }
//! ```

use std::collections::BTreeMap;

use burn::tensor::{Device, TensorData};

use super::{host_weights, to_data, InteropError, Reader};
use crate::module::FusedRnn;
use crate::spec::RnnMode;
use burn_fused_rnn_core::interop::tf1 as core_tf1;

pub use core_tf1::cell_prefix;

/// Builds the fused module of `mode` held by the TF1 canonical tensors `tensors` (by name,
/// under `scope`; other names, such as optimizer slots, are ignored), sequence-first as
/// TF1's cuDNN RNNs are (`batch_first = false`), on `device`, in the dtype of the first
/// tensor read.
///
/// Layers and directions come from the names present; sizes from `kernel` shapes.
///
/// # Errors
///
/// [`InteropError::Missing`] naming a tensor that is absent, [`InteropError::Shape`] naming
/// one of the wrong shape, [`InteropError::Dtype`], [`InteropError::NotFinite`].
pub fn import(
    mode: RnnMode,
    tensors: &BTreeMap<String, TensorData>,
    scope: &str,
    device: &Device,
) -> Result<FusedRnn, InteropError> {
    let reader = Reader::new();
    let imported = core_tf1::import(mode, tensors, scope, |k, t| reader.read(k, t))?;
    reader.build(imported, device)
}

/// The TF1 canonical tensors of `rnn`, by name under `scope` (`""` for none), as
/// `CudnnOpaqueParamsSaveable` saves them, in the module's dtype. A module without bias
/// gets zero biases (TF1's cells always have one).
///
/// # Errors
///
/// [`InteropError::Unsupported`] for a projection (`proj_size`): TF1's cells have none.
pub fn export(rnn: &FusedRnn, scope: &str) -> Result<BTreeMap<String, TensorData>, InteropError> {
    let (flat, dtype) = host_weights(rnn);
    let tensors = core_tf1::export(rnn.spec(), &flat, scope)?;
    Ok(tensors
        .into_iter()
        .map(|(k, t)| (k, to_data(t, dtype)))
        .collect())
}
