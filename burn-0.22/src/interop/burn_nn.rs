//! burn-nn's recurrent layers (`burn::nn::{Lstm, BiLstm, Gru, BiGru, Rnn, BiRnn}`), one
//! layer or a stack of them, into ONE [`FusedRnn`]: every layer and direction of the stack
//! then runs as one fused call, with PyTorch's parameter names (Note [Parameter names] on
//! [`FusedRnn`]).
//!
//! burn-nn keeps one `Linear` per gate (`GateController { input_transform,
//! hidden_transform }`, weights `[d_input, d_hidden]`, applied as `x W + b`); the fused
//! module stacks the gates of each matrix in cuDNN's order and keeps PyTorch's orientation
//! (`[G*H, d_input]`, applied as `x Wᵀ + b`). The import transposes each gate's matrix and
//! stacks them: LSTM `input_gate, forget_gate, cell_gate, output_gate` → `i, f, g, o`; GRU
//! `reset_gate, update_gate, new_gate` → `r, z, n`; RNN `gate`. The module it returns
//! computes what the layers compute (`tests/interop.rs`: outputs and final states in F64
//! to 1e-10 relative against burn-nn's own forward, for each type and two stacks).
//!
//! To keep burn-nn's parameters and checkpoint keys instead, swap the `use` line for the
//! drop-ins ([`crate::nn`]), which hold burn-nn's gates and run one fused call per layer.
//!
//! # Note [What the import refuses]
//!
//! The fused op computes cuDNN's cells: sigmoid gates, tanh (or relu for the plain RNN)
//! candidates, the GRU in "reset after" form, both biases or none, forward and
//! bidirectional layers, one hidden size for all layers. The import refuses, with
//! [`InteropError::Unsupported`] naming the field (`layers[1].reverse.clip`), whatever
//! computes something else: `clip`, `input_forget` (or a missing forget gate), activations
//! other than the standard ones, `reset_after = false`, a lone reverse direction
//! (`reverse = true` on an `Lstm` or `Rnn`), and stacks whose layers differ in cell, hidden
//! size, directions, bias or layout, or whose input sizes do not chain (`layers[k]`'s
//! `d_input` must be the previous layer's output size).
//!
//! ```
//! use burn::nn::{BiLstm, BiLstmConfig};
//! use burn::tensor::{DType, Device, Distribution, Tensor};
//! use burn_fused_rnn::FusedRnn;
//!
//! # fn main() -> Result<(), burn_fused_rnn::interop::InteropError> {
//! let device = Device::flex();
//! let bilstm: BiLstm = BiLstmConfig::new(8, 16, true).init(&device);
//! let fused = FusedRnn::from_burn_nn(&bilstm)?; // keys: weight_ih_l0, weight_ih_l0_reverse, ...
//!
//! let x = Tensor::<3>::random([2, 5, 8], Distribution::Default, (&device, DType::F32));
//! let (y, state) = fused.forward(x.clone(), None);
//! let (y_nn, state_nn) = bilstm.forward(x, None);
//! assert!(y.all_close(y_nn, None, Some(1e-5)));
//! assert!(state.hidden.all_close(state_nn.hidden, None, Some(1e-5)));
//! # Ok(())
//! # }
//! ```

use std::fmt;

use burn::nn::activation::Activation;
use burn::nn::{BiGru, BiLstm, BiRnn, GateController, Gru, Lstm, Rnn};
use burn::tensor::Tensor;

use super::InteropError;
use crate::config::FusedRnnConfig;
use crate::module::FusedRnn;
use crate::nn::flat_weights;
use crate::spec::{RnnMode, RnnSpec};

fn unsupported(option: String, value: impl fmt::Debug, reason: &str) -> InteropError {
    InteropError::unsupported(option, value, reason)
}

/// One burn-nn layer as the fused op sees it.
#[doc(hidden)]
pub struct LayerParts<'a> {
    mode: RnnMode,
    /// Always true for burn-nn's `Gru`, which is batch-first and has no field for it.
    batch_first: bool,
    bias: bool,
    /// One list of gates per direction, in PyTorch's gate order.
    gates: Vec<Vec<&'a GateController>>,
}

impl LayerParts<'_> {
    fn d_input(&self) -> usize {
        self.gates[0][0].input_transform.weight.dims()[0]
    }

    fn d_hidden(&self) -> usize {
        self.gates[0][0].hidden_transform.weight.dims()[0]
    }
}

mod sealed {
    pub trait Sealed {}
}

/// A burn-nn recurrent layer the import reads: `Lstm`, `BiLstm`, `Gru`, `BiGru`, `Rnn`,
/// `BiRnn` (sealed).
pub trait BurnNnLayer: sealed::Sealed {
    /// The layer's cell, layout and gates, after refusing what the fused op cannot
    /// compute; `path` prefixes the field names in errors.
    #[doc(hidden)]
    fn parts(&self, path: &str) -> Result<LayerParts<'_>, InteropError>;
}

fn check_clip(path: &str, clip: Option<f64>) -> Result<(), InteropError> {
    match clip {
        Some(c) => Err(unsupported(
            format!("{path}clip"),
            c,
            "cuDNN's cells do not clip; keep burn-nn's layer for this one",
        )),
        None => Ok(()),
    }
}

/// `Ok` when `got` is the activation named `expected` (`Sigmoid` or `Tanh`).
fn check_activation(
    path: &str,
    field: &str,
    got: &Activation,
    expected: &str,
) -> Result<(), InteropError> {
    let ok = match expected {
        "Sigmoid" => matches!(got, Activation::Sigmoid(_)),
        "Tanh" => matches!(got, Activation::Tanh(_)),
        _ => unreachable!("expected activation names are Sigmoid and Tanh"),
    };
    if ok {
        Ok(())
    } else {
        Err(unsupported(
            format!("{path}{field}"),
            got,
            &format!("the fused cells use {expected} here"),
        ))
    }
}

fn lone_reverse(path: &str) -> InteropError {
    unsupported(
        format!("{path}reverse"),
        true,
        "the fused op runs a reverse direction only as the second half of a bidirectional \
         layer; use the drop-in layer (`burn_fused_rnn::nn`), which runs it reversed",
    )
}

fn bias(gate: &GateController) -> bool {
    gate.input_transform.bias.is_some()
}

/// The gates of an `Lstm` in PyTorch's order `i, f, g, o`, after the checks.
fn lstm_gates<'a>(l: &'a Lstm, path: &str) -> Result<Vec<&'a GateController>, InteropError> {
    check_clip(path, l.clip)?;
    let forget = match (&l.forget_gate, l.input_forget) {
        (Some(forget), false) => forget,
        _ => {
            return Err(unsupported(
                format!("{path}input_forget"),
                l.input_forget,
                "cuDNN's LSTM has an independent forget gate",
            ))
        }
    };
    check_activation(path, "gate_activation", &l.gate_activation, "Sigmoid")?;
    check_activation(path, "cell_activation", &l.cell_activation, "Tanh")?;
    check_activation(path, "hidden_activation", &l.hidden_activation, "Tanh")?;
    Ok(vec![&l.input_gate, forget, &l.cell_gate, &l.output_gate])
}

/// The gates of a `Gru` in PyTorch's order `r, z, n`, after the checks.
fn gru_gates<'a>(g: &'a Gru, path: &str) -> Result<Vec<&'a GateController>, InteropError> {
    if !g.reset_after {
        return Err(unsupported(
            format!("{path}reset_after"),
            false,
            "cuDNN's GRU applies the reset gate after the recurrent matrix (reset_after = \
             true, PyTorch's form) and has no other mode",
        ));
    }
    check_clip(path, g.clip)?;
    check_activation(path, "gate_activation", &g.gate_activation, "Sigmoid")?;
    check_activation(path, "hidden_activation", &g.hidden_activation, "Tanh")?;
    Ok(vec![&g.reset_gate, &g.update_gate, &g.new_gate])
}

/// The cell of an `Rnn`, after the checks.
fn rnn_mode(r: &Rnn, path: &str) -> Result<RnnMode, InteropError> {
    check_clip(path, r.clip)?;
    match &r.hidden_activation {
        Activation::Tanh(_) => Ok(RnnMode::RnnTanh),
        Activation::Relu(_) => Ok(RnnMode::RnnRelu),
        other => Err(unsupported(
            format!("{path}hidden_activation"),
            other,
            "the fused plain RNN uses Tanh or Relu",
        )),
    }
}

impl sealed::Sealed for Lstm {}
impl BurnNnLayer for Lstm {
    fn parts(&self, path: &str) -> Result<LayerParts<'_>, InteropError> {
        if self.reverse {
            return Err(lone_reverse(path));
        }
        Ok(LayerParts {
            mode: RnnMode::Lstm,
            batch_first: self.batch_first,
            bias: bias(&self.input_gate),
            gates: vec![lstm_gates(self, path)?],
        })
    }
}

impl sealed::Sealed for BiLstm {}
impl BurnNnLayer for BiLstm {
    fn parts(&self, path: &str) -> Result<LayerParts<'_>, InteropError> {
        Ok(LayerParts {
            mode: RnnMode::Lstm,
            batch_first: self.batch_first,
            bias: bias(&self.forward.input_gate),
            gates: vec![
                lstm_gates(&self.forward, &format!("{path}forward."))?,
                lstm_gates(&self.reverse, &format!("{path}reverse."))?,
            ],
        })
    }
}

impl sealed::Sealed for Gru {}
impl BurnNnLayer for Gru {
    fn parts(&self, path: &str) -> Result<LayerParts<'_>, InteropError> {
        Ok(LayerParts {
            mode: RnnMode::Gru,
            // burn-nn's `Gru::forward` takes `[batch_size, seq_length, d_input]`.
            batch_first: true,
            bias: bias(&self.new_gate),
            gates: vec![gru_gates(self, path)?],
        })
    }
}

impl sealed::Sealed for BiGru {}
impl BurnNnLayer for BiGru {
    fn parts(&self, path: &str) -> Result<LayerParts<'_>, InteropError> {
        Ok(LayerParts {
            mode: RnnMode::Gru,
            batch_first: self.batch_first,
            bias: bias(&self.forward.new_gate),
            gates: vec![
                gru_gates(&self.forward, &format!("{path}forward."))?,
                gru_gates(&self.reverse, &format!("{path}reverse."))?,
            ],
        })
    }
}

impl sealed::Sealed for Rnn {}
impl BurnNnLayer for Rnn {
    fn parts(&self, path: &str) -> Result<LayerParts<'_>, InteropError> {
        if self.reverse {
            return Err(lone_reverse(path));
        }
        Ok(LayerParts {
            mode: rnn_mode(self, path)?,
            batch_first: self.batch_first,
            bias: bias(&self.gate),
            gates: vec![vec![&self.gate]],
        })
    }
}

impl sealed::Sealed for BiRnn {}
impl BurnNnLayer for BiRnn {
    fn parts(&self, path: &str) -> Result<LayerParts<'_>, InteropError> {
        let mode = rnn_mode(&self.forward, &format!("{path}forward."))?;
        let reverse = rnn_mode(&self.reverse, &format!("{path}reverse."))?;
        if reverse != mode {
            return Err(unsupported(
                format!("{path}reverse.hidden_activation"),
                &self.reverse.hidden_activation,
                "both directions of a fused layer use the same activation",
            ));
        }
        Ok(LayerParts {
            mode,
            batch_first: self.batch_first,
            bias: bias(&self.forward.gate),
            gates: vec![vec![&self.forward.gate], vec![&self.reverse.gate]],
        })
    }
}

impl FusedRnn {
    /// The fused module computing burn-nn's layer `layer` (module docs): same outputs and
    /// final states, one fused call, PyTorch's parameter names. Its parameters are new
    /// (copies of the layer's, not tracked from them) on the layer's device, in its dtype.
    ///
    /// # Errors
    ///
    /// [`InteropError::Unsupported`] naming the field, for what the fused op cannot compute
    /// (Note [What the import refuses]).
    pub fn from_burn_nn<L: BurnNnLayer>(layer: &L) -> Result<FusedRnn, InteropError> {
        Self::from_burn_nn_stack(std::slice::from_ref(layer))
    }

    /// The fused module computing the stack `layers` (layer 0 first, each fed the previous
    /// one's output) as one multi-layer module.
    ///
    /// # Errors
    ///
    /// [`InteropError::Empty`] for no layers; [`InteropError::Unsupported`] naming the
    /// field (`layers[1].d_hidden`), for an option the fused op cannot compute or layers
    /// that differ in cell, hidden size, directions, bias or layout, or whose input sizes
    /// do not chain.
    pub fn from_burn_nn_stack<L: BurnNnLayer>(layers: &[L]) -> Result<FusedRnn, InteropError> {
        if layers.is_empty() {
            return Err(InteropError::empty("layers", "burn-nn layer"));
        }
        let parts: Vec<LayerParts<'_>> = layers
            .iter()
            .enumerate()
            .map(|(k, l)| l.parts(&format!("layers[{k}].")))
            .collect::<Result<_, _>>()?;
        let first = &parts[0];
        let nd = first.gates.len();
        let mismatch = |k: usize, field: &str, got: String, first: String| {
            unsupported(
                format!("layers[{k}].{field}"),
                got,
                &format!("the layers of one fused module share it; layers[0] has {first}"),
            )
        };
        let mut flats = Vec::with_capacity(parts.len());
        for (k, p) in parts.iter().enumerate() {
            if p.mode != first.mode {
                let (got, want) = (format!("{:?}", p.mode), format!("{:?}", first.mode));
                return Err(mismatch(k, "cell", got, want));
            }
            if p.d_hidden() != first.d_hidden() {
                let (got, want) = (p.d_hidden().to_string(), first.d_hidden().to_string());
                return Err(mismatch(k, "d_hidden", got, want));
            }
            if p.gates.len() != nd {
                let (got, want) = (p.gates.len().to_string(), nd.to_string());
                return Err(mismatch(k, "directions", got, want));
            }
            if p.bias != first.bias {
                return Err(mismatch(
                    k,
                    "bias",
                    p.bias.to_string(),
                    first.bias.to_string(),
                ));
            }
            if p.batch_first != first.batch_first {
                let (got, want) = (p.batch_first.to_string(), first.batch_first.to_string());
                return Err(mismatch(k, "batch_first", got, want));
            }
            let d_input = p.d_input();
            if k > 0 && d_input != nd * first.d_hidden() {
                return Err(unsupported(
                    format!("layers[{k}].d_input"),
                    d_input,
                    &format!(
                        "a layer is fed the previous layer's output, of size {}",
                        nd * first.d_hidden()
                    ),
                ));
            }
            let spec = RnnSpec {
                bidirectional: nd == 2,
                bias: p.bias,
                ..RnnSpec::new(p.mode, d_input, p.d_hidden())
            };
            // PyTorch's flat order is layer by layer: a stack's flat weights are its
            // layers' flat weights one after the other.
            flats.push(flat_weights(&spec, &p.gates).detach());
        }
        let config = FusedRnnConfig::new(first.mode, first.d_input(), first.d_hidden())
            .with_num_layers(parts.len())
            .with_bidirectional(nd == 2)
            .with_bias(first.bias)
            .with_batch_first(first.batch_first);
        Ok(config.init_with_params(Tensor::cat(flats, 0)))
    }
}
