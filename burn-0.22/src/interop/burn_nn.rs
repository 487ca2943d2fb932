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
//! The way back: [`FusedRnn::to_burn_nn`] gives the burn-nn layer of a chosen type
//! computing a one-layer module, and [`FusedRnn::to_burn_nn_stack`] one layer per layer of
//! the module (skip input written out as identities; burn-nn has no projection, so a module
//! with one is refused). `tests/interop.rs` checks every type both ways against the other
//! side's forward in F64.
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

use burn::module::Param;
use burn::nn::activation::{Activation, ActivationConfig};
use burn::nn::{
    BiGru, BiGruConfig, BiLstm, BiLstmConfig, BiRnn, BiRnnConfig, GateController, Gru, GruConfig,
    Linear, Lstm, LstmConfig, Rnn, RnnConfig,
};
use burn::tensor::Tensor;

use super::InteropError;
use crate::config::FusedRnnConfig;
use crate::layout::ParamKind;
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
pub trait BurnNnLayer: sealed::Sealed + Sized {
    /// The type's name in burn-nn, for errors.
    #[doc(hidden)]
    const NAME: &'static str;
    /// The cell it computes (`RnnTanh` for `Rnn` and `BiRnn`, whose activation also
    /// allows `RnnRelu`).
    #[doc(hidden)]
    const MODE: RnnMode;
    /// Whether it runs both directions.
    #[doc(hidden)]
    const BIDIRECTIONAL: bool;

    /// The layer's cell, layout and gates, after refusing what the fused op cannot
    /// compute; `path` prefixes the field names in errors.
    #[doc(hidden)]
    fn parts(&self, path: &str) -> Result<LayerParts<'_>, InteropError>;

    /// The layer of `shape` holding `gates` (one list per direction, in PyTorch's gate
    /// order), burn-nn's defaults elsewhere.
    #[doc(hidden)]
    fn from_gates(shape: LayerShape, gates: Vec<Vec<GateController>>) -> Self;
}

/// What a burn-nn layer built by an export looks like, besides its gates.
#[doc(hidden)]
#[derive(Clone, Copy, Debug)]
pub struct LayerShape {
    mode: RnnMode,
    d_input: usize,
    d_hidden: usize,
    bias: bool,
    batch_first: bool,
}

impl LayerShape {
    fn activation(&self) -> ActivationConfig {
        match self.mode {
            RnnMode::RnnRelu => ActivationConfig::Relu,
            _ => ActivationConfig::Tanh,
        }
    }
}

/// Moves `gates` (in PyTorch's order) into burn-nn's LSTM gate fields.
fn set_lstm_gates(l: &mut Lstm, gates: Vec<GateController>) {
    let [i, f, g, o]: [GateController; 4] = array(gates);
    (l.input_gate, l.forget_gate, l.cell_gate, l.output_gate) = (i, Some(f), g, o);
}

/// Moves `gates` (in PyTorch's order) into burn-nn's GRU gate fields.
fn set_gru_gates(g: &mut Gru, gates: Vec<GateController>) {
    let [r, z, n]: [GateController; 3] = array(gates);
    (g.reset_gate, g.update_gate, g.new_gate) = (r, z, n);
}

/// `v` as an array of its known length.
fn array<T, const N: usize>(v: Vec<T>) -> [T; N] {
    match v.try_into() {
        Ok(a) => a,
        Err(v) => unreachable!("expected {N} entries, got {}", v.len()),
    }
}

fn one_gate(gates: Vec<GateController>) -> GateController {
    gates.into_iter().next().expect("1 RNN gate")
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
    const NAME: &'static str = "Lstm";
    const MODE: RnnMode = RnnMode::Lstm;
    const BIDIRECTIONAL: bool = false;

    fn from_gates(s: LayerShape, gates: Vec<Vec<GateController>>) -> Self {
        let device = gates[0][0].hidden_transform.weight.device();
        let mut l = LstmConfig::new(s.d_input, s.d_hidden, s.bias)
            .with_batch_first(s.batch_first)
            .init(&device);
        set_lstm_gates(&mut l, gates.into_iter().next().expect("1 direction"));
        l
    }

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
    const NAME: &'static str = "BiLstm";
    const MODE: RnnMode = RnnMode::Lstm;
    const BIDIRECTIONAL: bool = true;

    fn from_gates(s: LayerShape, gates: Vec<Vec<GateController>>) -> Self {
        let device = gates[0][0].hidden_transform.weight.device();
        let mut l = BiLstmConfig::new(s.d_input, s.d_hidden, s.bias)
            .with_batch_first(s.batch_first)
            .init(&device);
        let [f, r]: [Vec<GateController>; 2] = array(gates);
        set_lstm_gates(&mut l.forward, f);
        set_lstm_gates(&mut l.reverse, r);
        l
    }

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
    const NAME: &'static str = "Gru";
    const MODE: RnnMode = RnnMode::Gru;
    const BIDIRECTIONAL: bool = false;

    fn from_gates(s: LayerShape, gates: Vec<Vec<GateController>>) -> Self {
        let device = gates[0][0].hidden_transform.weight.device();
        // burn-nn's `Gru` is always batch-first: it has no field for the layout.
        let mut g = GruConfig::new(s.d_input, s.d_hidden, s.bias).init(&device);
        set_gru_gates(&mut g, gates.into_iter().next().expect("1 direction"));
        g
    }

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
    const NAME: &'static str = "BiGru";
    const MODE: RnnMode = RnnMode::Gru;
    const BIDIRECTIONAL: bool = true;

    fn from_gates(s: LayerShape, gates: Vec<Vec<GateController>>) -> Self {
        let device = gates[0][0].hidden_transform.weight.device();
        let mut g = BiGruConfig::new(s.d_input, s.d_hidden, s.bias)
            .with_batch_first(s.batch_first)
            .init(&device);
        let [f, r]: [Vec<GateController>; 2] = array(gates);
        set_gru_gates(&mut g.forward, f);
        set_gru_gates(&mut g.reverse, r);
        g
    }

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
    const NAME: &'static str = "Rnn";
    const MODE: RnnMode = RnnMode::RnnTanh;
    const BIDIRECTIONAL: bool = false;

    fn from_gates(s: LayerShape, gates: Vec<Vec<GateController>>) -> Self {
        let device = gates[0][0].hidden_transform.weight.device();
        let mut r = RnnConfig::new(s.d_input, s.d_hidden, s.bias)
            .with_batch_first(s.batch_first)
            .with_hidden_activation(s.activation())
            .init(&device);
        r.gate = one_gate(gates.into_iter().next().expect("1 direction"));
        r
    }

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
    const NAME: &'static str = "BiRnn";
    const MODE: RnnMode = RnnMode::RnnTanh;
    const BIDIRECTIONAL: bool = true;

    fn from_gates(s: LayerShape, gates: Vec<Vec<GateController>>) -> Self {
        let device = gates[0][0].hidden_transform.weight.device();
        let mut r = BiRnnConfig::new(s.d_input, s.d_hidden, s.bias)
            .with_batch_first(s.batch_first)
            .with_hidden_activation(s.activation())
            .init(&device);
        let [f, b]: [Vec<GateController>; 2] = array(gates);
        r.forward.gate = one_gate(f);
        r.reverse.gate = one_gate(b);
        r
    }

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

impl FusedRnn {
    /// The burn-nn layer of type `L` (`Lstm`, `BiLstm`, `Gru`, `BiGru`, `Rnn`, `BiRnn`)
    /// computing this one-layer module: same outputs and final states, on the module's
    /// device, in its dtype. The inverse of [`FusedRnn::from_burn_nn`].
    ///
    /// Skip input becomes an input `Linear` holding identities (what skip input computes).
    /// burn-nn's `Gru` is always batch-first, whatever the module's layout; the other types
    /// take the module's. Dropout is not a weight and a single layer has none.
    ///
    /// # Errors
    ///
    /// [`InteropError::Unsupported`] naming `num_layers` (use
    /// [`FusedRnn::to_burn_nn_stack`]), `mode` or `bidirectional` when `L` holds another
    /// kind of layer, and `proj_size` (burn-nn has no projection).
    pub fn to_burn_nn<L: BurnNnLayer>(&self) -> Result<L, InteropError> {
        let layers = self.spec().num_layers;
        if layers != 1 {
            return Err(unsupported(
                "num_layers".into(),
                layers,
                &format!(
                    "a burn-nn {} holds one layer: use to_burn_nn_stack",
                    L::NAME
                ),
            ));
        }
        Ok(self.to_burn_nn_stack::<L>()?.remove(0))
    }

    /// One burn-nn layer of type `L` per layer of this module, to be run one after the
    /// other (each fed the previous one's output): the inverse of
    /// [`FusedRnn::from_burn_nn_stack`].
    ///
    /// # Errors
    ///
    /// As [`FusedRnn::to_burn_nn`], for any number of layers.
    pub fn to_burn_nn_stack<L: BurnNnLayer>(&self) -> Result<Vec<L>, InteropError> {
        let spec = *self.spec();
        burn_fused_rnn_core::interop::check_burn_nn_target(
            &spec,
            L::NAME,
            L::MODE,
            L::BIDIRECTIONAL,
        )?;
        // Detached: the layers' parameters are new leaves, not tracked from this module's.
        let flat = self.flat_weights().detach();
        let layout = self.layout();
        let (g, h) = (spec.mode.num_gates(), spec.d_hidden);
        let tensor = |layer, direction, kind| {
            layout.entry(layer, direction, kind).map(|e| {
                let t = flat.clone().narrow(0, e.offset, e.len());
                match e.shape[..] {
                    [rows, cols] => Gate::Matrix(t.reshape([rows, cols])),
                    _ => Gate::Vector(t),
                }
            })
        };
        let layers = (0..spec.num_layers)
            .map(|layer| {
                let gates = (0..spec.num_directions())
                    .map(|d| {
                        let w_hh = tensor(layer, d, ParamKind::WeightHh)
                            .expect("W_hh")
                            .matrix();
                        // Skip input: `W_ih` = identity per gate, `b_ih` = 0.
                        let w_ih = match tensor(layer, d, ParamKind::WeightIh) {
                            Some(w) => w.matrix(),
                            None => Tensor::<2>::eye(h, &w_hh.device())
                                .cast(w_hh.dtype())
                                .repeat_dim(0, g),
                        };
                        let b_hh = tensor(layer, d, ParamKind::BiasHh).map(Gate::vector);
                        let b_ih = match tensor(layer, d, ParamKind::BiasIh) {
                            Some(b) => Some(b.vector()),
                            None => b_hh.as_ref().map(|b| b.zeros_like()),
                        };
                        (0..g)
                            .map(|k| {
                                let linear = |w: &Tensor<2>, b: &Option<Tensor<1>>| Linear {
                                    // burn-nn's `Linear` holds `[d_in, d_out]`, the
                                    // transpose of the canonical block.
                                    weight: Param::from_tensor(
                                        w.clone().narrow(0, k * h, h).transpose(),
                                    ),
                                    bias: b
                                        .as_ref()
                                        .map(|b| Param::from_tensor(b.clone().narrow(0, k * h, h))),
                                };
                                GateController {
                                    input_transform: linear(&w_ih, &b_ih),
                                    hidden_transform: linear(&w_hh, &b_hh),
                                }
                            })
                            .collect()
                    })
                    .collect();
                let shape = LayerShape {
                    mode: spec.mode,
                    d_input: spec.layer_input_size(layer),
                    d_hidden: h,
                    bias: spec.bias,
                    batch_first: self.batch_first(),
                };
                L::from_gates(shape, gates)
            })
            .collect();
        Ok(layers)
    }
}

/// A canonical tensor read back for export.
enum Gate {
    Matrix(Tensor<2>),
    Vector(Tensor<1>),
}

impl Gate {
    fn matrix(self) -> Tensor<2> {
        match self {
            Gate::Matrix(t) => t,
            Gate::Vector(_) => unreachable!("weights are matrices"),
        }
    }

    fn vector(self) -> Tensor<1> {
        match self {
            Gate::Vector(t) => t,
            Gate::Matrix(_) => unreachable!("biases are vectors"),
        }
    }
}
