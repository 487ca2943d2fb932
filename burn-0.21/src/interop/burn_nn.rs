//! burn-nn's recurrent modules (`burn::nn::{Lstm, BiLstm, Gru, BiGru, Rnn, BiRnn}`), one
//! layer or a stack of them, to and from a [`FusedRnn`]. burn-nn's states convert to and
//! from [`RnnState`](crate::RnnState) with `From` / `TryFrom`.
//!
//! burn-nn keeps one `Linear` per gate (`GateController { input_transform,
//! hidden_transform }`, weights `[d_input, d_hidden]`, applied as `x W + b`); the fused
//! module stacks the gates of each matrix in cuDNN's order and keeps PyTorch's orientation
//! (`[G*H, d_input]`, applied as `x Wᵀ + b`). Converting transposes each gate's matrix and
//! stacks or splits them: LSTM `input_gate, forget_gate, cell_gate, output_gate` ↔
//! `i, f, g, o`; GRU `reset_gate, update_gate, new_gate` ↔ `r, z, n`; RNN `gate`. The
//! modules these conversions produce compute the same outputs as the ones they come from
//! (tested on random inputs against burn-nn's own forward).
//!
//! What is refused, and why: Note [What conversions refuse] in [`crate::interop`].
//!
//! One file although it passes 700 lines: the six types' conversions, the stacks and the
//! records the drop-ins load are thin layers over the same gate helpers (`gate_parts`,
//! `*_from_gates`), which would otherwise have to be shared across files.
//!
//! ```
//! use burn::backend::NdArray;
//! use burn::nn::{BiLstm, BiLstmConfig, LstmState};
//! use burn::tensor::{Distribution, Tensor};
//! use burn_fused_rnn::{FusedRnn, RnnState};
//!
//! # fn main() -> Result<(), burn_fused_rnn::interop::InteropError> {
//! let device = Default::default();
//! let bilstm = BiLstmConfig::new(8, 16, true).init::<NdArray>(&device);
//! let fused = FusedRnn::from_burn_nn(&bilstm)?; // one fused op instead of 16 matmuls a step
//!
//! let x = Tensor::<NdArray, 3>::random([2, 5, 8], Distribution::Default, &device);
//! let (y, state) = fused.forward(x.clone(), None);
//! let (y_nn, state_nn) = bilstm.forward(x, None);
//! assert!(y.all_close(y_nn, None, Some(1e-5)));
//! let state_nn = RnnState::from(state_nn); // LstmState<B, 3> -> RnnState
//! assert!(state.hidden.all_close(state_nn.hidden, None, Some(1e-5)));
//!
//! let back: BiLstm<NdArray> = fused.to_burn_nn()?;
//! # let _ = back;
//! # Ok(())
//! # }
//! ```

use burn::module::Param;
use burn::nn::activation::{Activation, ActivationConfig};
use burn::nn::{BiGru, BiLstm, BiRnn, GateController, Gru, Linear, Lstm, Rnn};
use burn::tensor::backend::Backend;
use burn::tensor::Tensor;

use super::canonical::{cell_weights, untracked, Canonical};
use super::InteropError;
use crate::config::FusedRnnConfig;
use crate::layout::{param_name, ParamKind};
use crate::module::FusedRnn;
use crate::spec::RnnMode;

/// One gate of one direction in canonical form: `W_ih` block `[H, d_input]`, `W_hh` block
/// `[H, H]`, and the two bias blocks `[H]` when present.
#[doc(hidden)]
pub struct GateParts<B: Backend> {
    weight_ih: Tensor<B, 2>,
    weight_hh: Tensor<B, 2>,
    bias_ih: Option<Tensor<B, 1>>,
    bias_hh: Option<Tensor<B, 1>>,
}

/// One burn-nn layer in canonical form.
#[doc(hidden)]
pub struct LayerParts<B: Backend> {
    mode: RnnMode,
    batch_first: Option<bool>,
    /// Per direction (forward, then reverse), per gate in canonical order.
    directions: Vec<Vec<GateParts<B>>>,
}

mod sealed {
    pub trait Sealed {}
}

/// A burn-nn recurrent module that converts to and from ONE layer of a [`FusedRnn`]:
/// `Lstm`, `BiLstm`, `Gru`, `BiGru`, `Rnn` and `BiRnn` from `burn::nn`.
///
/// Used through [`FusedRnn::from_burn_nn`], [`FusedRnn::from_burn_nn_stack`],
/// [`FusedRnn::to_burn_nn`] and [`FusedRnn::to_burn_nn_stack`].
pub trait BurnNnLayer<B: Backend>: Sized + sealed::Sealed {
    /// The type's name in burn-nn, for errors.
    const NAME: &'static str;
    /// The cell this type computes ([`RnnMode::RnnTanh`] for `Rnn` / `BiRnn`, whose
    /// activation also allows [`RnnMode::RnnRelu`]).
    const MODE: RnnMode;
    /// Whether the type runs both directions.
    const BIDIRECTIONAL: bool;

    /// The layer in canonical form, after refusing what the fused op cannot express;
    /// `path` names the layer in errors (e.g. `layers[1].`).
    #[doc(hidden)]
    fn to_parts(&self, path: &str) -> Result<LayerParts<B>, InteropError>;

    /// The layer holding `parts` (whose mode and directions fit the type).
    #[doc(hidden)]
    fn from_parts(parts: LayerParts<B>, device: &B::Device) -> Self;
}

fn unsupported(option: String, value: impl core::fmt::Debug, reason: &str) -> InteropError {
    InteropError::unsupported(option, value, reason)
}

fn activation_name<B: Backend>(a: &Activation<B>) -> &'static str {
    match a {
        Activation::Sigmoid(_) => "Sigmoid",
        Activation::Tanh(_) => "Tanh",
        Activation::Relu(_) => "Relu",
        Activation::Gelu(_) => "Gelu",
        Activation::LeakyRelu(_) => "LeakyRelu",
        Activation::HardSigmoid(_) => "HardSigmoid",
        _ => "a custom activation",
    }
}

/// Refuses an activation other than `expected` (a name from [`activation_name`]).
fn check_activation<B: Backend>(
    option: String,
    got: &Activation<B>,
    expected: &str,
    role: &str,
) -> Result<(), InteropError> {
    let name = activation_name(got);
    if name == expected {
        Ok(())
    } else {
        Err(unsupported(
            option,
            name,
            &format!("the fused cells use {expected} for {role}, as cuDNN and PyTorch do"),
        ))
    }
}

fn check_clip(option: String, clip: Option<f64>, what: &str) -> Result<(), InteropError> {
    match clip {
        None => Ok(()),
        Some(c) => Err(unsupported(
            option,
            Some(c),
            &format!("cuDNN's cells do not clip the {what}"),
        )),
    }
}

fn lone_reverse(option: String) -> InteropError {
    unsupported(
        option,
        true,
        "the fused op runs a reverse direction only as the second half of a bidirectional layer; \
         use the Bi* module, or reverse the sequence before and after a forward layer",
    )
}

/// A gate's canonical blocks, with its shapes checked: `W_ih` `[d_input, H]` and `W_hh`
/// `[H, H]` in burn-nn's orientation.
fn gate_parts<B: Backend>(
    gate: &GateController<B>,
    path: &str,
    d_hidden: usize,
) -> Result<GateParts<B>, InteropError> {
    let linear = |l: &Linear<B>, name: &str, d_in: Option<usize>| {
        let w = untracked(l.weight.val());
        let [rows, cols] = w.dims();
        let expected = [d_in.unwrap_or(rows), d_hidden];
        if [rows, cols] != expected {
            return Err(InteropError::Shape {
                key: format!("{path}{name}.weight"),
                expected: expected.to_vec(),
                got: vec![rows, cols],
                context: "[d_input, d_hidden] in burn-nn's orientation".into(),
            });
        }
        let b = match &l.bias {
            Some(b) => {
                let b = untracked(b.val());
                if b.dims() != [d_hidden] {
                    return Err(InteropError::shape(
                        format!("{path}{name}.bias"),
                        &[d_hidden],
                        &b.dims(),
                    ));
                }
                Some(b)
            }
            None => None,
        };
        Ok((w.transpose(), b))
    };
    let (weight_ih, bias_ih) = linear(&gate.input_transform, "input_transform", None)?;
    let (weight_hh, bias_hh) = linear(&gate.hidden_transform, "hidden_transform", Some(d_hidden))?;
    Ok(GateParts {
        weight_ih,
        weight_hh,
        bias_ih,
        bias_hh,
    })
}

/// A burn-nn gate from canonical blocks.
fn gate_controller<B: Backend>(parts: GateParts<B>) -> GateController<B> {
    let linear = |w: Tensor<B, 2>, b: Option<Tensor<B, 1>>| Linear {
        weight: Param::from_tensor(w.transpose()),
        bias: b.map(Param::from_tensor),
    };
    GateController {
        input_transform: linear(parts.weight_ih, parts.bias_ih),
        hidden_transform: linear(parts.weight_hh, parts.bias_hh),
    }
}

/// One direction of a burn-nn layer: the one-way types (`Lstm`, `Gru`, `Rnn`), which are
/// also the halves of the `Bi*` types. The six [`BurnNnLayer`] impls are written once
/// over it (`burn_nn_layer!`).
trait Direction<B: Backend>: Sized {
    /// The layer's settings that are not its cell's.
    fn settings(&self) -> Settings;

    /// The cell and the gates in canonical order, after refusing the cell options the fused
    /// op cannot run.
    fn parts(&self, path: &str) -> Result<(RnnMode, Vec<GateParts<B>>), InteropError>;

    /// The forward-running layer computing `mode` with `gates`, in canonical order (burn-nn's
    /// defaults elsewhere).
    fn from_gates(
        mode: RnnMode,
        gates: Vec<GateController<B>>,
        batch_first: bool,
        device: &B::Device,
    ) -> Self;
}

/// What a [`Direction`] holds besides its cell.
struct Settings {
    /// The layout flag; `None` for `Gru`, which has none (always batch-first).
    batch_first: Option<bool>,
    d_hidden: usize,
    /// Whether it runs from the last step to the first (`false` for `Gru`, which cannot).
    reverse: bool,
}

impl Settings {
    fn of(batch_first: Option<bool>, d_hidden: usize, reverse: bool) -> Self {
        Settings {
            batch_first,
            d_hidden,
            reverse,
        }
    }
}

/// The gates of a `Direction`, in canonical order, as an array.
fn gate_array<B: Backend, const N: usize>(gates: Vec<GateController<B>>) -> [GateController<B>; N] {
    gates
        .try_into()
        .unwrap_or_else(|_| panic!("expected {N} gates"))
}

/// The canonical blocks of a layer's `gates`, in canonical order, each named by its field
/// under `path` in errors.
fn named_gates<B: Backend, const N: usize>(
    path: &str,
    d_hidden: usize,
    gates: [(&str, &GateController<B>); N],
) -> Result<Vec<GateParts<B>>, InteropError> {
    gates
        .into_iter()
        .map(|(name, gate)| gate_parts(gate, &format!("{path}{name}."), d_hidden))
        .collect()
}

/// The hidden size of a gate: the columns of its input transform (`[d_input, H]`).
fn hidden_of<B: Backend>(gate: &GateController<B>) -> usize {
    gate.input_transform.weight.val().dims()[1]
}

impl<B: Backend> Direction<B> for Lstm<B> {
    fn settings(&self) -> Settings {
        Settings::of(Some(self.batch_first), self.d_hidden, self.reverse)
    }

    fn parts(&self, path: &str) -> Result<(RnnMode, Vec<GateParts<B>>), InteropError> {
        check_clip(format!("{path}clip"), self.clip, "cell state")?;
        if self.input_forget {
            return Err(unsupported(
                format!("{path}input_forget"),
                true,
                "cuDNN's LSTM has an independent forget gate (f = σ(..), not 1 - i)",
            ));
        }
        check_activation(
            format!("{path}gate_activation"),
            &self.gate_activation,
            "Sigmoid",
            "the input, forget and output gates",
        )?;
        check_activation(
            format!("{path}cell_activation"),
            &self.cell_activation,
            "Tanh",
            "the cell candidate",
        )?;
        check_activation(
            format!("{path}hidden_activation"),
            &self.hidden_activation,
            "Tanh",
            "the cell state's output",
        )?;
        let gates = named_gates(
            path,
            self.d_hidden,
            [
                ("input_gate", &self.input_gate),
                ("forget_gate", &self.forget_gate),
                ("cell_gate", &self.cell_gate),
                ("output_gate", &self.output_gate),
            ],
        )?;
        Ok((RnnMode::Lstm, gates))
    }

    fn from_gates(
        _: RnnMode,
        gates: Vec<GateController<B>>,
        batch_first: bool,
        device: &B::Device,
    ) -> Self {
        let d_hidden = hidden_of(&gates[0]);
        let [input_gate, forget_gate, cell_gate, output_gate] = gate_array(gates);
        Lstm {
            input_gate,
            forget_gate,
            output_gate,
            cell_gate,
            d_hidden,
            batch_first,
            reverse: false,
            clip: None,
            input_forget: false,
            gate_activation: sigmoid(device),
            cell_activation: tanh(device),
            hidden_activation: tanh(device),
        }
    }
}

impl<B: Backend> Direction<B> for Gru<B> {
    fn settings(&self) -> Settings {
        Settings::of(None, self.d_hidden, false)
    }

    fn parts(&self, path: &str) -> Result<(RnnMode, Vec<GateParts<B>>), InteropError> {
        if !self.reset_after {
            return Err(unsupported(
                format!("{path}reset_after"),
                false,
                "cuDNN's GRU applies the reset gate after the recurrent matrix, \
                 n = tanh(W_n x + b_Wn + r ∘ (R_n h + b_Rn)), and has no reset-before mode",
            ));
        }
        check_clip(format!("{path}clip"), self.clip, "hidden state")?;
        check_activation(
            format!("{path}gate_activation"),
            &self.gate_activation,
            "Sigmoid",
            "the reset and update gates",
        )?;
        check_activation(
            format!("{path}hidden_activation"),
            &self.hidden_activation,
            "Tanh",
            "the new gate",
        )?;
        let gates = named_gates(
            path,
            self.d_hidden,
            [
                ("reset_gate", &self.reset_gate),
                ("update_gate", &self.update_gate),
                ("new_gate", &self.new_gate),
            ],
        )?;
        Ok((RnnMode::Gru, gates))
    }

    fn from_gates(_: RnnMode, gates: Vec<GateController<B>>, _: bool, device: &B::Device) -> Self {
        let d_hidden = hidden_of(&gates[0]);
        let [reset_gate, update_gate, new_gate] = gate_array(gates);
        Gru {
            update_gate,
            reset_gate,
            new_gate,
            d_hidden,
            reset_after: true,
            gate_activation: sigmoid(device),
            hidden_activation: tanh(device),
            clip: None,
        }
    }
}

impl<B: Backend> Direction<B> for Rnn<B> {
    fn settings(&self) -> Settings {
        Settings::of(Some(self.batch_first), self.d_hidden, self.reverse)
    }

    fn parts(&self, path: &str) -> Result<(RnnMode, Vec<GateParts<B>>), InteropError> {
        check_clip(format!("{path}clip"), self.clip, "hidden state")?;
        let mode = match &self.hidden_activation {
            Activation::Tanh(_) => RnnMode::RnnTanh,
            Activation::Relu(_) => RnnMode::RnnRelu,
            other => {
                return Err(unsupported(
                    format!("{path}hidden_activation"),
                    activation_name(other),
                    "the fused RNN cells use Tanh or Relu",
                ))
            }
        };
        Ok((
            mode,
            named_gates(path, self.d_hidden, [("gate", &self.gate)])?,
        ))
    }

    fn from_gates(
        mode: RnnMode,
        gates: Vec<GateController<B>>,
        batch_first: bool,
        device: &B::Device,
    ) -> Self {
        let d_hidden = hidden_of(&gates[0]);
        let [gate] = gate_array(gates);
        let activation = match mode {
            RnnMode::RnnRelu => ActivationConfig::Relu,
            _ => ActivationConfig::Tanh,
        };
        Rnn {
            gate,
            d_hidden,
            batch_first,
            reverse: false,
            clip: None,
            hidden_activation: activation.init(device),
        }
    }
}

/// The checks of a `Bi*` module's inner forward layer, which it calls through its own
/// `forward` with batch-first input.
fn check_inner_forward(path: &str, batch_first: bool) -> Result<(), InteropError> {
    if batch_first {
        Ok(())
    } else {
        Err(unsupported(
            format!("{path}forward.batch_first"),
            false,
            "the Bi* module passes batch-first input to its inner forward layer, which then \
             runs over the batch axis",
        ))
    }
}

fn sigmoid<B: Backend>(device: &B::Device) -> Activation<B> {
    ActivationConfig::Sigmoid.init(device)
}

fn tanh<B: Backend>(device: &B::Device) -> Activation<B> {
    ActivationConfig::Tanh.init(device)
}

/// burn-nn's gates from canonical ones.
fn controllers<B: Backend>(gates: Vec<GateParts<B>>) -> Vec<GateController<B>> {
    gates.into_iter().map(gate_controller).collect()
}

/// The canonical form of a `Bi*` module: directions `forward` and `reverse` (each with its
/// own `d_hidden` and inner layout), the module's `d_hidden` and `batch_first`, after
/// refusing directions the fused op cannot run as one layer: an inner forward module with
/// its own layout, directions whose hidden size is not the module's, or whose cells differ.
fn bidirectional_parts<B: Backend, D: Direction<B>>(
    path: &str,
    [forward, reverse]: [&D; 2],
    d_hidden: usize,
    batch_first: bool,
) -> Result<LayerParts<B>, InteropError> {
    let [fw_settings, bw_settings] = [forward.settings(), reverse.settings()];
    if let Some(inner) = fw_settings.batch_first {
        check_inner_forward(path, inner)?;
    }
    // The reverse half runs backwards whatever its flag says; a reversed forward half is
    // refused.
    if fw_settings.reverse {
        return Err(lone_reverse(format!("{path}forward.reverse")));
    }
    for (name, h) in [
        ("forward", fw_settings.d_hidden),
        ("reverse", bw_settings.d_hidden),
    ] {
        if h != d_hidden {
            return Err(unsupported(
                format!("{path}{name}.d_hidden"),
                h,
                &format!("the module's d_hidden is {d_hidden}; both directions must share it"),
            ));
        }
    }
    let (mode, fw) = forward.parts(&format!("{path}forward."))?;
    let (reverse_mode, bw) = reverse.parts(&format!("{path}reverse."))?;
    if reverse_mode != mode {
        return Err(unsupported(
            format!("{path}reverse.hidden_activation"),
            reverse_mode.name(),
            &format!(
                "the fused op runs one cell in both directions, and {path}forward runs {}",
                mode.name()
            ),
        ));
    }
    Ok(LayerParts {
        mode,
        batch_first: Some(batch_first),
        directions: vec![fw, bw],
    })
}

/// A `Bi*` module made of two [`Direction`]s.
trait TwoWay<B: Backend> {
    type Direction;

    /// The module running `forward` and `reverse` (forward-running layers; the module
    /// runs the second backwards), with layout `batch_first`.
    fn from_directions(
        forward: Self::Direction,
        reverse: Self::Direction,
        batch_first: bool,
    ) -> Self;
}

/// Implements [`BurnNnLayer`] for burn-nn's one-way `$ty` (whose cell is `$mode`), or
/// for its two-way `$ty` made of two `$direction`s, through [`Direction`].
macro_rules! burn_nn_layer {
    ($ty:ident, $mode:expr) => {
        impl<B: Backend> sealed::Sealed for $ty<B> {}
        impl<B: Backend> BurnNnLayer<B> for $ty<B> {
            const NAME: &'static str = stringify!($ty);
            const MODE: RnnMode = $mode;
            const BIDIRECTIONAL: bool = false;

            fn to_parts(&self, path: &str) -> Result<LayerParts<B>, InteropError> {
                let settings = self.settings();
                if settings.reverse {
                    return Err(lone_reverse(format!("{path}reverse")));
                }
                let (mode, gates) = self.parts(path)?;
                Ok(LayerParts {
                    mode,
                    batch_first: settings.batch_first,
                    directions: vec![gates],
                })
            }

            fn from_parts(parts: LayerParts<B>, device: &B::Device) -> Self {
                let batch_first = parts.batch_first.unwrap_or(true);
                let [gates] = directions(parts.directions);
                Self::from_gates(parts.mode, controllers(gates), batch_first, device)
            }
        }
    };
    ($ty:ident of $direction:ident, $mode:expr) => {
        impl<B: Backend> sealed::Sealed for $ty<B> {}
        impl<B: Backend> BurnNnLayer<B> for $ty<B> {
            const NAME: &'static str = stringify!($ty);
            const MODE: RnnMode = $mode;
            const BIDIRECTIONAL: bool = true;

            fn to_parts(&self, path: &str) -> Result<LayerParts<B>, InteropError> {
                let directions = [&self.forward, &self.reverse];
                bidirectional_parts(path, directions, self.d_hidden, self.batch_first)
            }

            fn from_parts(parts: LayerParts<B>, device: &B::Device) -> Self {
                let [fw, bw] = directions(parts.directions);
                // The inner layers take batch-first input from the module.
                let forward = $direction::from_gates(parts.mode, controllers(fw), true, device);
                let reverse = $direction::from_gates(parts.mode, controllers(bw), true, device);
                Self::from_directions(forward, reverse, parts.batch_first.unwrap_or(true))
            }
        }

        impl<B: Backend> TwoWay<B> for $ty<B> {
            type Direction = $direction<B>;

            fn from_directions(
                forward: $direction<B>,
                reverse: $direction<B>,
                batch_first: bool,
            ) -> Self {
                $ty {
                    d_hidden: forward.d_hidden,
                    forward,
                    reverse,
                    batch_first,
                }
            }
        }
    };
}

burn_nn_layer!(Lstm, RnnMode::Lstm);
burn_nn_layer!(BiLstm of Lstm, RnnMode::Lstm);
burn_nn_layer!(Gru, RnnMode::Gru);
burn_nn_layer!(BiGru of Gru, RnnMode::Gru);
burn_nn_layer!(Rnn, RnnMode::RnnTanh);
burn_nn_layer!(BiRnn of Rnn, RnnMode::RnnTanh);

fn directions<B: Backend, const N: usize>(dirs: Vec<Vec<GateParts<B>>>) -> [Vec<GateParts<B>>; N] {
    dirs.try_into()
        .unwrap_or_else(|_| panic!("expected {N} directions"))
}

impl<B: Backend> FusedRnn<B> {
    /// Converts one burn-nn layer (`Lstm`, `BiLstm`, `Gru`, `BiGru`, `Rnn`, `BiRnn`) into a
    /// one-layer fused module computing the same outputs. Reads (and so initializes) the
    /// layer's parameters; the new module's parameters are copies.
    ///
    /// The module takes the layer's `batch_first` (`Gru` has none: it is always
    /// batch-first). Its dropout is 0.
    ///
    /// # Errors
    ///
    /// [`InteropError::Unsupported`] naming the option the fused op cannot express (Note
    /// [What conversions refuse] in [`crate::interop`]), [`InteropError::Shape`] for a gate
    /// whose `Linear` does not fit the layer's sizes.
    pub fn from_burn_nn<L: BurnNnLayer<B>>(layer: &L) -> Result<Self, InteropError> {
        Self::from_burn_nn_stack(core::slice::from_ref(layer))
    }

    /// Converts a stack of burn-nn layers, layer `k` fed with layer `k - 1`'s output, into
    /// one fused module with `layers.len()` layers.
    ///
    /// # Errors
    ///
    /// As [`FusedRnn::from_burn_nn`]; [`InteropError::Unsupported`] naming
    /// `layers[k].<option>` when the layers differ in cell, hidden size or layout, or when
    /// a layer's input size is not the previous layer's output size;
    /// [`InteropError::Empty`] when `layers` is empty. Layers without bias next to layers
    /// with bias get zero biases (the same computation).
    pub fn from_burn_nn_stack<L: BurnNnLayer<B>>(layers: &[L]) -> Result<Self, InteropError> {
        let (canonical, config, device) = stack_canonical(layers)?;
        canonical.build(&config, &device)
    }

    /// Converts a one-layer module into the burn-nn type `L` (`Lstm`, `BiLstm`, `Gru`,
    /// `BiGru`, `Rnn`, `BiRnn`) computing the same outputs, on the module's device.
    ///
    /// Skip input becomes an input `Linear` holding identities (what skip input computes);
    /// dropout is dropped (a single layer has none anyway). burn-nn's `Gru` is always
    /// batch-first, whatever the module's layout.
    ///
    /// # Errors
    ///
    /// [`InteropError::Unsupported`] naming `num_layers` (use
    /// [`FusedRnn::to_burn_nn_stack`]), `mode` or `bidirectional` when `L` holds another
    /// kind of layer, and `proj_size` (burn-nn has no projection).
    pub fn to_burn_nn<L: BurnNnLayer<B>>(&self) -> Result<L, InteropError> {
        if self.spec().num_layers != 1 {
            return Err(unsupported(
                "num_layers".into(),
                self.spec().num_layers,
                &format!(
                    "a burn-nn {} holds one layer: use to_burn_nn_stack",
                    L::NAME
                ),
            ));
        }
        Ok(self.to_burn_nn_stack::<L>()?.remove(0))
    }

    /// Converts the module into one burn-nn `L` per layer, to be run one after the other.
    ///
    /// # Errors
    ///
    /// As [`FusedRnn::to_burn_nn`], for any number of layers.
    pub fn to_burn_nn_stack<L: BurnNnLayer<B>>(&self) -> Result<Vec<L>, InteropError> {
        let spec = *self.spec();
        burn_fused_rnn_core::interop::check_burn_nn_target(
            &spec,
            L::NAME,
            L::MODE,
            L::BIDIRECTIONAL,
        )?;
        let device = self.cells[0].weight_hh.lazy_device();
        let g = spec.mode.num_gates();
        let layers = (0..spec.num_layers)
            .map(|layer| {
                let directions = (0..spec.num_directions())
                    .map(|direction| {
                        let c = cell_weights(self, layer, direction);
                        let split1 = |t: Option<Tensor<B, 1>>| match t {
                            Some(t) => t.chunk(g, 0).into_iter().map(Some).collect(),
                            None => vec![None; g],
                        };
                        let w_ih = c.weight_ih.chunk(g, 0);
                        let w_hh = c.weight_hh.chunk(g, 0);
                        let b_ih: Vec<_> = split1(c.bias_ih);
                        let b_hh: Vec<_> = split1(c.bias_hh);
                        w_ih.into_iter()
                            .zip(w_hh)
                            .zip(b_ih.into_iter().zip(b_hh))
                            .map(|((weight_ih, weight_hh), (bias_ih, bias_hh))| GateParts {
                                weight_ih,
                                weight_hh,
                                bias_ih,
                                bias_hh,
                            })
                            .collect()
                    })
                    .collect();
                let parts = LayerParts {
                    mode: spec.mode,
                    batch_first: Some(self.batch_first()),
                    directions,
                };
                L::from_parts(parts, &device)
            })
            .collect();
        Ok(layers)
    }
}

/// The canonical tensors of a stack of burn-nn layers (after refusing what the fused op
/// cannot run), the configuration they describe, and their device.
pub(crate) fn stack_canonical<B: Backend, L: BurnNnLayer<B>>(
    layers: &[L],
) -> Result<(Canonical<'static, B>, FusedRnnConfig, B::Device), InteropError> {
    if layers.is_empty() {
        return Err(InteropError::empty("layers", "burn-nn layer"));
    }
    let parts = layers
        .iter()
        .enumerate()
        .map(|(k, l)| {
            let path = if layers.len() == 1 {
                String::new()
            } else {
                format!("layers[{k}].")
            };
            l.to_parts(&path)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let first = &parts[0];
    let mode = first.mode;
    let d_hidden = first.directions[0][0].weight_hh.dims()[0];
    let d_input = first.directions[0][0].weight_ih.dims()[1];
    let nd = first.directions.len();
    let batch_first = first.batch_first;
    let bias = parts.iter().any(|p| {
        p.directions
            .iter()
            .flatten()
            .any(|g| g.bias_ih.is_some() || g.bias_hh.is_some())
    });
    let device = first.directions[0][0].weight_hh.device();
    for (k, p) in parts.iter().enumerate().skip(1) {
        let option = |name: &str| format!("layers[{k}].{name}");
        if p.mode != mode {
            return Err(unsupported(
                option("hidden_activation"),
                p.mode.name(),
                &format!("layer 0 runs {}: a fused stack runs one cell", mode.name()),
            ));
        }
        let h = p.directions[0][0].weight_hh.dims()[0];
        if h != d_hidden {
            return Err(unsupported(
                option("d_hidden"),
                h,
                &format!("layer 0 has d_hidden {d_hidden}: a fused stack has one hidden size"),
            ));
        }
        let d_in = p.directions[0][0].weight_ih.dims()[1];
        if d_in != nd * d_hidden {
            return Err(unsupported(
                option("d_input"),
                d_in,
                &format!(
                    "layer {k} takes layer {}'s output, of size {}",
                    k - 1,
                    nd * d_hidden
                ),
            ));
        }
        if p.batch_first != batch_first {
            return Err(unsupported(
                option("batch_first"),
                p.batch_first,
                &format!(
                    "layer 0 has batch_first = {batch_first:?}: the layers of a stack share one layout"
                ),
            ));
        }
    }
    let config = FusedRnnConfig::new(mode, d_input, d_hidden)
        .with_num_layers(parts.len())
        .with_bidirectional(nd == 2)
        .with_bias(bias)
        .with_batch_first(batch_first.unwrap_or(true));
    let mut canonical = Canonical::new(
        mode,
        Box::new(|l, d, k| format!("layers[{l}] {}", param_name(k, l, d))),
    );
    let gh = mode.num_gates() * d_hidden;
    for (layer, p) in parts.into_iter().enumerate() {
        for (direction, gates) in p.directions.into_iter().enumerate() {
            let slot = |kind| (layer, direction, kind);
            let name = |kind| format!("layers[{layer}] {}", param_name(kind, layer, direction));
            let (mut w_ih, mut w_hh, mut b_ih, mut b_hh) = (vec![], vec![], vec![], vec![]);
            for g in gates {
                let zeros = || Tensor::<B, 1>::zeros([d_hidden], (&device, g.weight_hh.dtype()));
                b_ih.push(g.bias_ih.unwrap_or_else(zeros));
                b_hh.push(g.bias_hh.unwrap_or_else(zeros));
                w_ih.push(g.weight_ih);
                w_hh.push(g.weight_hh);
            }
            canonical.insert(
                slot(ParamKind::WeightIh),
                name(ParamKind::WeightIh),
                Tensor::cat(w_ih, 0),
            );
            canonical.insert(
                slot(ParamKind::WeightHh),
                name(ParamKind::WeightHh),
                Tensor::cat(w_hh, 0),
            );
            if bias {
                let b_ih = Tensor::cat(b_ih, 0);
                let b_hh = Tensor::cat(b_hh, 0);
                debug_assert_eq!(b_ih.dims(), [gh]);
                canonical.insert(slot(ParamKind::BiasIh), name(ParamKind::BiasIh), b_ih);
                canonical.insert(slot(ParamKind::BiasHh), name(ParamKind::BiasHh), b_hh);
            }
        }
    }
    Ok((canonical, config, device))
}

/// burn-nn modules rebuilt from their records (what their checkpoints hold), with the
/// standard activations and no clipping: a record does not hold a module's settings, so
/// the drop-in layers ([`crate::nn`]) that load them bring their own.
pub(crate) mod records {
    use burn::nn::{
        BiGru, BiGruRecord, BiLstm, BiLstmRecord, BiRnn, BiRnnRecord, GateController,
        GateControllerRecord, Gru, GruRecord, Linear, LinearRecord, Lstm, LstmRecord, Rnn,
        RnnRecord,
    };
    use burn::tensor::backend::Backend;

    use super::{Direction, TwoWay};
    use crate::spec::RnnMode;

    fn linear<B: Backend>(record: LinearRecord<B>) -> Linear<B> {
        Linear {
            weight: record.weight,
            bias: record.bias,
        }
    }

    fn gates<B: Backend, const N: usize>(
        records: [GateControllerRecord<B>; N],
    ) -> Vec<GateController<B>> {
        let gate = |record: GateControllerRecord<B>| GateController {
            input_transform: linear(record.input_transform),
            hidden_transform: linear(record.hidden_transform),
        };
        records.into_iter().map(gate).collect()
    }

    /// A forward-running `Lstm` holding `record`'s weights.
    pub(crate) fn lstm<B: Backend>(record: LstmRecord<B>, device: &B::Device) -> Lstm<B> {
        let LstmRecord {
            input_gate,
            forget_gate,
            cell_gate,
            output_gate,
            ..
        } = record;
        let gates = gates([input_gate, forget_gate, cell_gate, output_gate]);
        Lstm::from_gates(RnnMode::Lstm, gates, true, device)
    }

    /// A `BiLstm` holding `record`'s weights.
    pub(crate) fn bilstm<B: Backend>(record: BiLstmRecord<B>, device: &B::Device) -> BiLstm<B> {
        let [fw, bw] = [record.forward, record.reverse].map(|r| lstm(r, device));
        BiLstm::from_directions(fw, bw, true)
    }

    /// A reset-after `Gru` holding `record`'s weights.
    pub(crate) fn gru<B: Backend>(record: GruRecord<B>, device: &B::Device) -> Gru<B> {
        let GruRecord {
            reset_gate,
            update_gate,
            new_gate,
            ..
        } = record;
        let gates = gates([reset_gate, update_gate, new_gate]);
        Gru::from_gates(RnnMode::Gru, gates, true, device)
    }

    /// A `BiGru` holding `record`'s weights.
    pub(crate) fn bigru<B: Backend>(record: BiGruRecord<B>, device: &B::Device) -> BiGru<B> {
        let [fw, bw] = [record.forward, record.reverse].map(|r| gru(r, device));
        BiGru::from_directions(fw, bw, true)
    }

    /// A forward-running `Rnn` of `mode` (tanh or relu) holding `record`'s weights.
    pub(crate) fn rnn<B: Backend>(
        record: RnnRecord<B>,
        mode: RnnMode,
        device: &B::Device,
    ) -> Rnn<B> {
        Rnn::from_gates(mode, gates([record.gate]), true, device)
    }

    /// A `BiRnn` of `mode` holding `record`'s weights.
    pub(crate) fn birnn<B: Backend>(
        record: BiRnnRecord<B>,
        mode: RnnMode,
        device: &B::Device,
    ) -> BiRnn<B> {
        let [fw, bw] = [record.forward, record.reverse].map(|r| rnn(r, mode, device));
        BiRnn::from_directions(fw, bw, true)
    }
}
