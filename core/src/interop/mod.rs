//! Weights in and out of other frameworks' layouts, on the host and without Burn: ONNX
//! nodes ([`onnx`]), Keras layers ([`keras`]) and TF1 canonical checkpoints ([`tf1`]) to
//! and from canonical weights (PyTorch's names, shapes and flat order: Note [RNN weight
//! layout] in [`crate::layout`]).
//!
//! Each import reads a format's tensors through a function the front-end gives (from its
//! Burn version's `TensorData` into [`HostTensor`]), refuses what the fused op cannot
//! compute, reorders gates and transposes, and returns an [`Imported`]: the network's
//! [`RnnSpec`](crate::RnnSpec), its layout, and its flat weights, every tensor checked
//! against the layout (missing, wrong shape, unexpected, not finite, in that order). The
//! front-end builds its module from that. Each export takes a module's spec and flat
//! weights and returns the format's tensors as [`HostTensor`]s.
//!
//! | format | module | what it reorders |
//! |---|---|---|
//! | ONNX `LSTM`, `GRU`, `RNN` nodes (`W`, `R`, `B`) | [`onnx`] | LSTM `i, o, f, c`; GRU `z, r, h` |
//! | Keras / TF2 `LSTM`, `GRU`, `SimpleRNN`, `Bidirectional` | [`keras`] | kernels transposed; GRU `z, r, h`; one LSTM bias |
//! | TF1 `tf.contrib.cudnn_rnn` canonical checkpoints | [`tf1`] | `[W R]` kernels; LSTM `i, c, f, o`; summed biases |
//!
//! # Note [What conversions refuse]
//!
//! The fused op computes exactly cuDNN's cells: sigmoid gates, tanh (or relu for RNN-relu)
//! candidates, GRU in "reset after" form, two biases, optional LSTM projection, forward and
//! bidirectional directions, one hidden size for all layers. An import refuses, with
//! [`InteropError::Unsupported`] naming the option, whatever computes something else:
//!
//! - cell-state or hidden-state clipping (ONNX `clip`);
//! - coupled input and forget gates (ONNX `input_forget`);
//! - activations other than the standard ones (ONNX `activations`; Keras `activation`,
//!   `recurrent_activation`);
//! - GRU "reset before" (ONNX `linear_before_reset = 0`, Keras `reset_after = False`):
//!   cuDNN has no such mode, and `r ∘ (R h)` differs from `R (r ∘ h)`;
//! - a lone reverse direction (ONNX `direction = "reverse"`, Keras `go_backwards`): the
//!   fused op's only reverse direction is the second half of a bidirectional layer;
//! - LSTM peepholes (ONNX `P`, unless all zero);
//! - stacks whose layers differ in cell, hidden size, directions or layout, or whose input
//!   sizes do not chain.
//!
//! Exports refuse what the target cannot hold: a projection. Skip input is written out as
//! what it computes (`W_ih` = stacked identities, `b_ih` = 0). A missing bias is zeros
//! where the target always has one (TF1).

mod canonical;
mod error;
mod host;

pub mod keras;
pub mod onnx;
pub mod tf1;

pub use canonical::{cell_weights, check_burn_nn_target, out_of_range, CellWeights, Imported};
pub use error::InteropError;
pub use host::HostTensor;
