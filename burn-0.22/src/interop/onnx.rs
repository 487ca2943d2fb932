//! ONNX `LSTM`, `GRU` and `RNN` nodes: their `W`, `R`, `B` inputs to and from a
//! [`FusedRnn`].
//!
//! An ONNX node is one layer, in one or both directions. Per node, with `D` directions and
//! `G` gates: `W` `[D, G*H, input_size]` holds each direction's `weight_ih`, `R`
//! `[D, G*H, H]` its `weight_hh`, and the optional `B` `[D, 2*G*H]` = `[Wb, Rb]` its two
//! biases. Matrices have PyTorch's orientation; only the gate order differs (LSTM
//! `i, o, f, c`; GRU `z, r, h`). A model of several layers is a chain of nodes (what
//! `torch.onnx.export` writes for a multi-layer `nn.LSTM`): pass them in order. Reading an
//! ONNX file is left to an ONNX crate: these functions take the initializers' values as
//! [`TensorData`] and the node's attributes as fields of [`OnnxRnnNode`].
//!
//! ```
//! use burn::tensor::{Device, TensorData};
//! use burn_fused_rnn::interop::onnx;
//! use burn_fused_rnn::{FusedRnn, FusedRnnConfig, RnnMode};
//!
//! # fn main() -> Result<(), burn_fused_rnn::interop::InteropError> {
//! let device = Device::flex();
//! let gru = FusedRnnConfig::new(RnnMode::Gru, 3, 4)
//!     .with_num_layers(2)
//!     .with_bidirectional(true)
//!     .init(&device);
//! let nodes = onnx::export(&gru)?; // one GRU node per layer
//! assert_eq!(nodes[1].w.shape().to_vec(), [2, 12, 8]); // [D, 3H, D*H]
//! assert_eq!(nodes[0].linear_before_reset, 1);
//! let back: FusedRnn = onnx::import(&nodes, &device)?;
//! assert!(back.flat_weights().all_close(gru.flat_weights(), None, Some(0.0)));
//! # Ok(())
//! # }
//! ```

use burn::tensor::{Device, TensorData};

use super::{host_weights, to_data, InteropError, Reader};
use crate::module::FusedRnn;
use burn_fused_rnn_core::interop::onnx as core_onnx;

pub use core_onnx::OnnxOp;

/// One ONNX `LSTM`, `GRU` or `RNN` node: its weight inputs and the attributes that decide
/// what it computes. [`OnnxRnnNode::new`] sets every attribute to ONNX's default (the core
/// crate's node, holding [`TensorData`]).
pub type OnnxRnnNode = core_onnx::OnnxRnnNode<TensorData>;

/// Builds the fused module computing the chain of ONNX nodes `nodes` (layer 0 first), on
/// `device`, in the dtype of `nodes[0].W`.
///
/// # Errors
///
/// [`InteropError::Unsupported`] naming the attribute (`nodes[k].clip`, ...) for what the
/// fused op cannot express, or a chain whose nodes differ in operator, hidden size,
/// directions or layout; [`InteropError::Shape`] naming the input (`nodes[k].W`) and both
/// shapes for a tensor that does not fit; [`InteropError::Dtype`] for a tensor that holds
/// no floats; [`InteropError::NotFinite`]; [`InteropError::Empty`] when `nodes` is empty.
pub fn import(nodes: &[OnnxRnnNode], device: &Device) -> Result<FusedRnn, InteropError> {
    let reader = Reader::new();
    let imported = core_onnx::import(nodes, |k, t| reader.read(k, t))?;
    reader.build(imported, device)
}

/// The chain of ONNX nodes computing `rnn`, one per layer, with attributes set
/// (`direction`, `hidden_size`, `activations` for RNN-relu, `linear_before_reset = 1` for
/// GRU, `layout` from the module's `batch_first`), tensors in the module's dtype. `B` is
/// `None` for a module without bias.
///
/// # Errors
///
/// [`InteropError::Unsupported`] for a projection (`proj_size`): ONNX's `LSTM` has none.
pub fn export(rnn: &FusedRnn) -> Result<Vec<OnnxRnnNode>, InteropError> {
    let (flat, dtype) = host_weights(rnn);
    let nodes = core_onnx::export(rnn.spec(), rnn.batch_first(), &flat)?;
    Ok(nodes
        .into_iter()
        .map(|n| n.map(|t| to_data(t, dtype)))
        .collect())
}
