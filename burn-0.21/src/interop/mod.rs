//! Weights in and out of other frameworks' layouts, and modules in and out of burn-nn's.
//!
//! Every conversion maps another layout onto this crate's canonical tensors (Note [RNN
//! weight layout] in [`crate::layout`]) and builds a [`FusedRnn`](crate::FusedRnn) whose
//! every tensor is checked, or reads a module's canonical tensors back out:
//!
//! | from / to | module | what it reorders |
//! |---|---|---|
//! | PyTorch `state_dict` (`.pt`, `.safetensors`) | [`pytorch`] | nothing: same names, same gate order |
//! | burn-nn `Lstm`, `BiLstm`, `Gru`, `BiGru`, `Rnn`, `BiRnn` (one or a stack) | [`burn_nn`] | one `Linear` per gate ↔ stacked gates, transposed |
//! | ONNX `LSTM`, `GRU`, `RNN` nodes (`W`, `R`, `B`) | [`onnx`] | LSTM `i, o, f, c`; GRU `z, r, h` |
//! | Keras / TF2 `LSTM`, `GRU`, `SimpleRNN`, `Bidirectional` | [`keras`] | kernels transposed; GRU `z, r, h`; one LSTM bias |
//! | TF1 `tf.contrib.cudnn_rnn` canonical checkpoints | [`tf1`] | `[W R]` kernels; LSTM `i, c, f, o`; summed biases |
//!
//! # Note [What conversions refuse]
//!
//! The fused op computes exactly cuDNN's cells (Note [Gate order]): sigmoid gates, tanh
//! (or relu for RNN-relu) candidates, GRU in "reset after" form, two biases, optional LSTM
//! projection, forward and bidirectional directions, one hidden size for all layers. An
//! import refuses, with [`InteropError::Unsupported`] naming the option, whatever computes
//! something else:
//!
//! - cell-state or hidden-state clipping (burn-nn `clip`, ONNX `clip`);
//! - coupled input and forget gates (burn-nn `input_forget`, ONNX `input_forget`);
//! - activations other than the standard ones (burn-nn `gate_activation`,
//!   `cell_activation`, `hidden_activation`; ONNX `activations`, `activation_alpha`,
//!   `activation_beta`; Keras `activation`, `recurrent_activation`);
//! - GRU "reset before" (burn-nn `reset_after = false`, ONNX `linear_before_reset = 0`,
//!   Keras `reset_after = False`): cuDNN has no such mode, and `r ∘ (R h)` differs from
//!   `R (r ∘ h)`;
//! - a lone reverse direction (burn-nn `reverse`, ONNX `direction = "reverse"`, Keras
//!   `go_backwards`): the fused op's only reverse direction is the second half of a
//!   bidirectional layer;
//! - LSTM peepholes (ONNX `P`, unless all zero);
//! - stacks whose layers differ in mode, hidden size, directions, bias or layout, or whose
//!   input sizes do not chain (`layers[k].d_input` must be the previous layer's output size).
//!
//! Exports refuse what the target cannot hold: a projection anywhere but PyTorch, and
//! several layers or directions where the target type holds one. Skip input is written
//! out as what it computes (`W_ih` = stacked identities, `b_ih` = 0) for every target
//! but PyTorch's `state_dict`, which leaves the two tensors out. A missing bias is zeros
//! where the target always has one (TF1). Dropout between layers is not a weight: exports
//! drop it, and imports leave it at 0 (set it on the configuration).

mod canonical;
mod error;
mod state;

pub mod burn_nn;
pub mod keras;
pub mod onnx;
pub mod pytorch;
pub mod tf1;

pub use error::InteropError;
pub use pytorch::PytorchImport;
