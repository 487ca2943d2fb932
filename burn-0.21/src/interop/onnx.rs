//! ONNX `LSTM`, `GRU` and `RNN` nodes: their `W`, `R`, `B` inputs to and from a
//! [`FusedRnn`].
//!
//! An ONNX node is one layer, in one or both directions. Per node, with `D` directions and
//! `G` gates:
//!
//! | input | shape | this crate |
//! |---|---|---|
//! | `W` | `[D, G*H, input_size]` | `weight_ih` of each direction |
//! | `R` | `[D, G*H, H]` | `weight_hh` |
//! | `B` | `[D, 2*G*H]` = `[Wb, Rb]` (optional: zeros) | `bias_ih`, `bias_hh` |
//!
//! Matrices have PyTorch's orientation; only the gate order differs: ONNX LSTM `i, o, f, c`
//! (this crate `i, f, g, o`), GRU `z, r, h` (this crate `r, z, n`). A model of several
//! layers is a chain of nodes (what `torch.onnx.export` writes for a multi-layer
//! `nn.LSTM`): pass them in order. ONNX's initial and final states, `[D, batch_size, H]`
//! per node, stack into this crate's `[L*D, batch_size, H]` with
//! [`RnnState::from_layers`](crate::RnnState::from_layers).
//!
//! Reading an ONNX file is left to an ONNX crate: these functions take the initializers'
//! values as [`TensorData`] and the node's attributes as fields of [`OnnxRnnNode`]. The
//! conversion itself is the core crate's (`burn_fused_rnn_core::interop::onnx`), shared
//! with the Burn 0.22 line.
//!
//! ```
//! use burn::backend::NdArray;
//! use burn_fused_rnn::interop::onnx;
//! use burn_fused_rnn::{FusedRnn, FusedRnnConfig, RnnMode};
//!
//! # fn main() -> Result<(), burn_fused_rnn::interop::InteropError> {
//! let device = Default::default();
//! let gru = FusedRnnConfig::new(RnnMode::Gru, 3, 4)
//!     .with_num_layers(2)
//!     .with_bidirectional(true)
//!     .init::<NdArray>(&device);
//! let nodes = onnx::export(&gru)?; // one GRU node per layer
//! assert_eq!(nodes[1].w.shape.to_vec(), [2, 12, 8]); // [D, 3H, D*H]
//! assert_eq!(nodes[0].linear_before_reset, 1);
//! let back: FusedRnn<NdArray> = onnx::import(&nodes, &device)?;
//! assert!(back.flat_weights().all_close(gru.flat_weights(), None, Some(0.0)));
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
use burn_fused_rnn_core::interop::onnx as core_onnx;

pub use core_onnx::OnnxOp;

/// One ONNX `LSTM`, `GRU` or `RNN` node: its weight inputs and the attributes that decide
/// what it computes. [`OnnxRnnNode::new`] sets every attribute to ONNX's default (the core
/// crate's node, holding [`TensorData`]).
pub type OnnxRnnNode = core_onnx::OnnxRnnNode<TensorData>;

/// Builds the fused module computing the chain of ONNX nodes `nodes` (layer 0 first).
///
/// # Errors
///
/// [`InteropError::Unsupported`] naming the attribute (`nodes[k].clip`, ...) for what the
/// fused op cannot express, or a chain whose nodes differ in operator, hidden size,
/// directions or layout; [`InteropError::Shape`] naming the input (`nodes[k].W`) and both
/// shapes for a tensor that does not fit; [`InteropError::Dtype`] for a tensor that holds
/// no floats; [`InteropError::NotFinite`]; [`InteropError::Empty`] when `nodes` is empty.
pub fn import<B: Backend>(
    nodes: &[OnnxRnnNode],
    device: &B::Device,
) -> Result<FusedRnn<B>, InteropError> {
    from_imported(core_onnx::import(nodes, read_host)?, device)
}

/// The chain of ONNX nodes computing `rnn`, one per layer, with attributes set
/// (`direction`, `hidden_size`, `activations` for RNN-relu, `linear_before_reset = 1` for
/// GRU, `layout` from the module's `batch_first`), tensors in the module's dtype. `B` is
/// `None` for a module without bias.
///
/// # Errors
///
/// [`InteropError::Unsupported`] for a projection (`proj_size`): ONNX's `LSTM` has none.
pub fn export<B: Backend>(rnn: &FusedRnn<B>) -> Result<Vec<OnnxRnnNode>, InteropError> {
    let (flat, dtype) = host_weights(rnn);
    let nodes = core_onnx::export(rnn.spec(), rnn.batch_first(), &flat)?;
    Ok(nodes
        .into_iter()
        .map(|n| n.map(|t| to_data(t, dtype)))
        .collect())
}
