//! Keras / TF2 layers (`keras.layers.LSTM`, `GRU`, `SimpleRNN`, each alone or inside
//! `Bidirectional`): their weights to and from a [`FusedRnn`].
//!
//! Keras keeps, per cell, `kernel` `[input_size, G*H]`, `recurrent_kernel` `[H, G*H]` and a
//! bias, and applies them as `x kernel + h recurrent_kernel + bias` (the transpose of this
//! crate's orientation):
//!
//! | layer | gates | bias |
//! |---|---|---|
//! | `LSTM` | `i, f, c, o` (this crate's order) | `[4H]`, one bias: `b_ih = bias`, `b_hh = 0` |
//! | `GRU(reset_after=True)` | `z, r, h` (this crate: `r, z, n`) | `[2, 3H]`: row 0 input bias, row 1 recurrent bias |
//! | `SimpleRNN` | one | `[H]`: `b_ih = bias`, `b_hh = 0` |
//!
//! Export writes an LSTM's or RNN's single bias as `b_ih + b_hh`, which computes the same.
//! Keras layers take batch-first input; a stack is a list of layers, layer 0 first.
//!
//! Tested against Keras 3's own outputs (run on its torch backend, so without
//! TensorFlow), for import and export (`tests/fixtures/interop/generate.py`).
//!
//! ```
//! use burn::backend::NdArray;
//! use burn_fused_rnn::interop::keras;
//! use burn_fused_rnn::{FusedRnn, FusedRnnConfig, RnnMode};
//!
//! # fn main() -> Result<(), burn_fused_rnn::interop::InteropError> {
//! let device = Default::default();
//! let lstm = FusedRnnConfig::new(RnnMode::Lstm, 3, 4)
//!     .with_bidirectional(true)
//!     .init::<NdArray>(&device);
//! let layers = keras::export(&lstm)?; // [Bidirectional(LSTM(4))]
//! assert_eq!(layers[0].forward.kernel.shape.to_vec(), [3, 16]);
//! let back: FusedRnn<NdArray> = keras::import(&layers, &device)?;
//! # let _ = back;
//! # Ok(())
//! # }
//! ```
//!
//! What is refused, and why: Note [What conversions refuse] in [`crate::interop`].

use burn::tensor::backend::Backend;
use burn::tensor::TensorData;

use super::canonical::{from_imported, host_weights, read_host, to_data};
use super::InteropError;
use crate::module::FusedRnn;
use burn_fused_rnn_core::interop::keras as core_keras;

pub use core_keras::KerasLayerKind;

/// The weights of one Keras cell, as `layer.get_weights()` lists them (the core crate's
/// cell, holding [`TensorData`]).
pub type KerasCell = core_keras::KerasCell<TensorData>;

/// One Keras recurrent layer, or a `Bidirectional` wrapper around one, with the settings
/// that decide what it computes. [`KerasRnnLayer::new`] sets Keras' defaults (the core
/// crate's layer, holding [`TensorData`]).
pub type KerasRnnLayer = core_keras::KerasRnnLayer<TensorData>;

/// Builds the fused module computing the stack of Keras layers `layers` (layer 0 first),
/// batch-first as Keras is.
///
/// # Errors
///
/// [`InteropError::Unsupported`] naming the setting (`layers[k].reset_after`, ...) for what
/// the fused op cannot express, or layers that differ in class, hidden size or directions;
/// [`InteropError::Shape`] naming the weight (`layers[k].forward.kernel`) and both shapes;
/// [`InteropError::Dtype`]; [`InteropError::NotFinite`]; [`InteropError::Empty`] when
/// `layers` is empty.
pub fn import<B: Backend>(
    layers: &[KerasRnnLayer],
    device: &B::Device,
) -> Result<FusedRnn<B>, InteropError> {
    from_imported(core_keras::import(layers, read_host)?, device)
}

/// The Keras layers computing `rnn`, one per layer (`Bidirectional` for a bidirectional
/// module), to be filled with `layer.set_weights([kernel, recurrent_kernel, bias])`,
/// tensors in the module's dtype.
///
/// # Errors
///
/// [`InteropError::Unsupported`] for a projection (`proj_size`): Keras' `LSTM` has none.
pub fn export<B: Backend>(rnn: &FusedRnn<B>) -> Result<Vec<KerasRnnLayer>, InteropError> {
    let (flat, dtype) = host_weights(rnn);
    let layers = core_keras::export(rnn.spec(), &flat)?;
    Ok(layers
        .into_iter()
        .map(|l| l.map(|t| to_data(t, dtype)))
        .collect())
}
