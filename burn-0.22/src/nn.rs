//! Drop-in replacements for burn-nn 0.22's recurrent layers: `Lstm`, `BiLstm`, `Gru`,
//! `BiGru`, `Rnn`, `BiRnn`, each run as ONE fused op.
//!
//! # Note [Drop-in layers]
//!
//! Each type here has burn-nn's name, config (same fields, defaults and builder methods),
//! public fields, `init` and `forward` signatures and state types (`LstmState`,
//! `RnnState` are burn-nn's own, re-exported), so swapping
//! `use burn::nn::{Lstm, LstmConfig}` for `use burn_fused_rnn::nn::{Lstm, LstmConfig}` is
//! the whole migration:
//!
//! - **The same parameters, under the same names.** A layer holds burn-nn's
//!   `GateController`s (`input_gate.input_transform.weight`, `[d_input, d_hidden]`, ...),
//!   drawn by burn-nn's own code in burn-nn's order, so a model's checkpoint written while
//!   it held burn-nn's layers loads with its own `load_file` (and the other way round), and
//!   an optimizer's state follows the same parameter ids.
//! - **One fused call per forward.** `forward` assembles the canonical weights of the
//!   layer (Note [RNN weight layout] in [`crate::layout`]: the gates' blocks transposed, in
//!   PyTorch's gate order, which is cuDNN's) and runs [`crate::fused_rnn`], both directions
//!   of a `Bi*` layer in one call. The assembly is a few differentiable copies of the
//!   weights, so training updates burn-nn's parameters as burn-nn's layers would.
//! - **Options the fused cells cannot compute are refused** when the layer is built, with
//!   the field and the value: `clip`, `input_forget`, activations other than the standard
//!   ones (`Rnn` takes `Tanh` or `Relu`), `reset_after = false`. burn-nn's layers compute
//!   those; keep them for such layers.
//! - `Lstm` and `Rnn` with `reverse = true` run the sequence backwards, outputs aligned to
//!   the input steps, as burn-nn does.

use burn::config::Config;
use burn::module::{Initializer, Module};
use burn::nn::activation::{Activation, ActivationConfig};
use burn::tensor::{Device, Tensor};

pub use burn::nn::{GateController, LstmState, RnnState};

use crate::descriptor::{DropoutSpec, RnnDescriptor};
use crate::layout::{ParamKind, RnnLayout};
use crate::ops::{fused_rnn, FusedRnnOutput};
use crate::spec::{RnnMode, RnnSpec};

/// Panics naming `config`'s `field` and its `value`, when the fused cells cannot compute
/// it (Note [Drop-in layers]).
fn refuse(config: &str, field: &str, value: &dyn std::fmt::Debug, expected: &str) -> ! {
    panic!(
        "invalid {config}: expected {expected}, got {field} = {value:?}: the fused cells do \
         not compute it; keep burn-nn's layer for this one"
    )
}

fn check_clip(config: &str, clip: Option<f64>) {
    if clip.is_some() {
        refuse(
            config,
            "clip",
            &clip,
            "clip = None (the fused cells do not clip)",
        );
    }
}

fn check_activation(config: &str, field: &str, got: &ActivationConfig, expected: &str) {
    let ok = match expected {
        "Sigmoid" => matches!(got, ActivationConfig::Sigmoid),
        "Tanh" => matches!(got, ActivationConfig::Tanh),
        _ => unreachable!("expected activation names are Sigmoid and Tanh"),
    };
    if !ok {
        refuse(config, field, got, &format!("{field} = {expected}"));
    }
}

/// The canonical weights `[params_size]` of a one-layer network of `mode` whose
/// directions hold `gates` (each in PyTorch's gate order).
pub(crate) fn flat_weights(spec: &RnnSpec, gates: &[Vec<&GateController>]) -> Tensor<1> {
    let layout = RnnLayout::new(*spec);
    let mut entries: Vec<_> = layout.entries().iter().collect();
    entries.sort_by_key(|e| e.offset);
    let parts = entries
        .iter()
        .map(|e| {
            let dir = &gates[e.direction];
            let matrices = |f: fn(&GateController) -> &burn::nn::Linear| {
                // A Linear's weight is `[d_in, d_out]`; the canonical block is its transpose.
                let blocks = dir.iter().map(|g| f(g).weight.val().transpose()).collect();
                Tensor::<2>::cat(blocks, 0).flatten(0, 1)
            };
            let biases = |f: fn(&GateController) -> &burn::nn::Linear| {
                let blocks = dir
                    .iter()
                    .map(|g| f(g).bias.as_ref().expect("bias = true").val())
                    .collect();
                Tensor::<1>::cat(blocks, 0)
            };
            match e.kind {
                ParamKind::WeightIh => matrices(|g| &g.input_transform),
                ParamKind::WeightHh => matrices(|g| &g.hidden_transform),
                ParamKind::BiasIh => biases(|g| &g.input_transform),
                ParamKind::BiasHh => biases(|g| &g.hidden_transform),
                ParamKind::WeightHr => unreachable!("burn-nn layers have no projection"),
            }
        })
        .collect();
    Tensor::cat(parts, 0)
}

/// One fused call of a one-layer network: `x` in the layer's layout, `h0`/`c0` `[D, B,
/// H]`; `reverse` runs a one-direction layer backwards (outputs aligned to the steps).
#[allow(clippy::too_many_arguments)]
fn run(
    mode: RnnMode,
    bias: bool,
    batch_first: bool,
    reverse: bool,
    gates: &[Vec<&GateController>],
    x: Tensor<3>,
    h0: Option<Tensor<3>>,
    c0: Option<Tensor<3>>,
) -> FusedRnnOutput {
    let d_input = gates[0][0].input_transform.weight.dims()[0];
    let d_hidden = gates[0][0].hidden_transform.weight.dims()[0];
    let spec = RnnSpec {
        bidirectional: gates.len() == 2,
        bias,
        ..RnnSpec::new(mode, d_input, d_hidden)
    };
    let [d0, d1, _] = x.dims();
    let (batch, seq) = if batch_first { (d0, d1) } else { (d1, d0) };
    let time = if batch_first { 1 } else { 0 };
    let desc = RnnDescriptor::new(spec, seq, batch, batch_first, None, DropoutSpec::NONE);
    let weights = flat_weights(&spec, gates);
    let weights = if weights.dtype() == x.dtype() {
        weights
    } else {
        weights.cast(x.dtype())
    };
    let x = if reverse { x.flip([time]) } else { x };
    let mut out = fused_rnn(&desc, x, h0, c0, weights);
    if reverse {
        out.output = out.output.flip([time]);
    }
    out
}

/// Configuration of an [`Lstm`]: burn-nn's `LstmConfig` (Note [Drop-in layers]).
#[derive(Config, Debug)]
pub struct LstmConfig {
    /// The size of the input features.
    pub d_input: usize,
    /// The size of the hidden state.
    pub d_hidden: usize,
    /// If a bias should be applied during the Lstm transformation.
    pub bias: bool,
    /// Lstm initializer.
    #[config(default = "Initializer::XavierNormal{gain:1.0}")]
    pub initializer: Initializer,
    /// If true, the input tensor is `[batch_size, seq_length, input_size]`, else
    /// `[seq_length, batch_size, input_size]`.
    #[config(default = true)]
    pub batch_first: bool,
    /// If true, process the sequence in reverse order.
    #[config(default = false)]
    pub reverse: bool,
    /// Cell-state clipping: refused (the fused cells do not clip); must be `None`.
    pub clip: Option<f64>,
    /// Coupled input and forget gates: refused; must be `false`.
    #[config(default = false)]
    pub input_forget: bool,
    /// Activation of the input, forget and output gates: must be `Sigmoid`.
    #[config(default = "ActivationConfig::Sigmoid")]
    pub gate_activation: ActivationConfig,
    /// Activation of the cell candidate: must be `Tanh`.
    #[config(default = "ActivationConfig::Tanh")]
    pub cell_activation: ActivationConfig,
    /// Activation of the cell state's output: must be `Tanh`.
    #[config(default = "ActivationConfig::Tanh")]
    pub hidden_activation: ActivationConfig,
}

/// An LSTM layer with burn-nn's API and parameters (`burn::nn::Lstm`), run as one fused
/// op (Note [Drop-in layers]).
#[derive(Module, Debug)]
pub struct Lstm {
    /// The input gate.
    pub input_gate: GateController,
    /// The forget gate (always present: `input_forget` is refused).
    pub forget_gate: Option<GateController>,
    /// The output gate.
    pub output_gate: GateController,
    /// The cell gate.
    pub cell_gate: GateController,
    /// The size of the hidden state.
    pub d_hidden: usize,
    /// If true, input is `[batch_size, seq_length, input_size]`.
    pub batch_first: bool,
    /// If true, process the sequence in reverse order.
    pub reverse: bool,
    /// Always `None` (refused by the config).
    pub clip: Option<f64>,
    /// Always `false` (refused by the config).
    pub input_forget: bool,
    /// Activation of the gates (Sigmoid).
    pub gate_activation: Activation,
    /// Activation of the cell candidate (Tanh).
    pub cell_activation: Activation,
    /// Activation of the cell state's output (Tanh).
    pub hidden_activation: Activation,
}

fn check_lstm(
    config: &str,
    clip: Option<f64>,
    input_forget: bool,
    [gate, cell, hidden]: [&ActivationConfig; 3],
) {
    check_clip(config, clip);
    if input_forget {
        refuse(
            config,
            "input_forget",
            &input_forget,
            "input_forget = false (the fused LSTM has an independent forget gate)",
        );
    }
    check_activation(config, "gate_activation", gate, "Sigmoid");
    check_activation(config, "cell_activation", cell, "Tanh");
    check_activation(config, "hidden_activation", hidden, "Tanh");
}

impl LstmConfig {
    /// Initializes a new [`Lstm`], as burn-nn does.
    ///
    /// # Panics
    ///
    /// Naming the field, when an option is one the fused cells cannot compute (`clip`,
    /// `input_forget`, a non-standard activation).
    pub fn init(&self, device: &Device) -> Lstm {
        check_lstm(
            "LstmConfig",
            self.clip,
            self.input_forget,
            [
                &self.gate_activation,
                &self.cell_activation,
                &self.hidden_activation,
            ],
        );
        let new_gate = || {
            GateController::new(
                self.d_input,
                self.d_hidden,
                self.bias,
                self.initializer.clone(),
                device,
            )
        };
        Lstm {
            input_gate: new_gate(),
            forget_gate: Some(new_gate()),
            output_gate: new_gate(),
            cell_gate: new_gate(),
            d_hidden: self.d_hidden,
            batch_first: self.batch_first,
            reverse: self.reverse,
            clip: None,
            input_forget: false,
            gate_activation: self.gate_activation.init(device),
            cell_activation: self.cell_activation.init(device),
            hidden_activation: self.hidden_activation.init(device),
        }
    }
}

impl Lstm {
    /// The gates in PyTorch's order `i, f, g, o`.
    fn gates(&self) -> Vec<&GateController> {
        let forget = self
            .forget_gate
            .as_ref()
            .unwrap_or_else(|| refuse("Lstm", "forget_gate", &"None", "a forget gate"));
        vec![&self.input_gate, forget, &self.cell_gate, &self.output_gate]
    }

    fn bias(&self) -> bool {
        self.input_gate.input_transform.bias.is_some()
    }

    /// Applies the LSTM to `batched_input` (`[batch_size, seq_length, d_input]`, or
    /// sequence-first), from `state` (burn-nn's `LstmState::new(cell, hidden)`, each
    /// `[batch_size, d_hidden]`; zeros when `None`). Returns every step's hidden state and
    /// the final state, as burn-nn's `Lstm::forward`.
    pub fn forward(
        &self,
        batched_input: Tensor<3>,
        state: Option<LstmState<2>>,
    ) -> (Tensor<3>, LstmState<2>) {
        let (h0, c0) = match state {
            Some(s) => (
                Some(s.hidden.unsqueeze_dim(0)),
                Some(s.cell.unsqueeze_dim(0)),
            ),
            None => (None, None),
        };
        let out = run(
            RnnMode::Lstm,
            self.bias(),
            self.batch_first,
            self.reverse,
            &[self.gates()],
            batched_input,
            h0,
            c0,
        );
        let cell = out.cell.expect("an LSTM returns a cell state");
        (
            out.output,
            LstmState::new(cell.squeeze_dim(0), out.hidden.squeeze_dim(0)),
        )
    }
}

/// Configuration of a [`BiLstm`]: burn-nn's `BiLstmConfig` (Note [Drop-in layers]).
#[derive(Config, Debug)]
pub struct BiLstmConfig {
    /// The size of the input features.
    pub d_input: usize,
    /// The size of the hidden state.
    pub d_hidden: usize,
    /// If a bias should be applied during the BiLstm transformation.
    pub bias: bool,
    /// BiLstm initializer.
    #[config(default = "Initializer::XavierNormal{gain:1.0}")]
    pub initializer: Initializer,
    /// If true, the input tensor is `[batch_size, seq_length, input_size]`.
    #[config(default = true)]
    pub batch_first: bool,
    /// Cell-state clipping: refused; must be `None`.
    pub clip: Option<f64>,
    /// Coupled input and forget gates: refused; must be `false`.
    #[config(default = false)]
    pub input_forget: bool,
    /// Activation of the gates: must be `Sigmoid`.
    #[config(default = "ActivationConfig::Sigmoid")]
    pub gate_activation: ActivationConfig,
    /// Activation of the cell candidate: must be `Tanh`.
    #[config(default = "ActivationConfig::Tanh")]
    pub cell_activation: ActivationConfig,
    /// Activation of the cell state's output: must be `Tanh`.
    #[config(default = "ActivationConfig::Tanh")]
    pub hidden_activation: ActivationConfig,
}

/// A bidirectional LSTM layer with burn-nn's API and parameters (`burn::nn::BiLstm`),
/// both directions in one fused op (Note [Drop-in layers]).
#[derive(Module, Debug)]
pub struct BiLstm {
    /// The forward direction (always batch-first inside, as burn-nn's).
    pub forward: Lstm,
    /// The reverse direction.
    pub reverse: Lstm,
    /// The size of the hidden state.
    pub d_hidden: usize,
    /// If true, input is `[batch_size, seq_length, input_size]`.
    pub batch_first: bool,
}

impl BiLstmConfig {
    /// Initializes a new [`BiLstm`], as burn-nn does.
    ///
    /// # Panics
    ///
    /// As [`LstmConfig::init`].
    pub fn init(&self, device: &Device) -> BiLstm {
        let acts = [
            &self.gate_activation,
            &self.cell_activation,
            &self.hidden_activation,
        ];
        check_lstm("BiLstmConfig", self.clip, self.input_forget, acts);
        // As burn-nn: both directions from one config (batch-first inside, not reversed:
        // the pair handles the reverse direction itself).
        let direction = || {
            LstmConfig::new(self.d_input, self.d_hidden, self.bias)
                .with_initializer(self.initializer.clone())
                .with_batch_first(true)
                .init(device)
        };
        BiLstm {
            forward: direction(),
            reverse: direction(),
            d_hidden: self.d_hidden,
            batch_first: self.batch_first,
        }
    }
}

impl BiLstm {
    /// Applies the bidirectional LSTM: output `[batch_size, seq_length, 2 * d_hidden]` (or
    /// sequence-first; forward then reverse features), and the final state, `[2,
    /// batch_size, d_hidden]` each (index 0 forward, 1 reverse), as burn-nn's
    /// `BiLstm::forward`.
    pub fn forward(
        &self,
        batched_input: Tensor<3>,
        state: Option<LstmState<3>>,
    ) -> (Tensor<3>, LstmState<3>) {
        let (h0, c0) = match state {
            Some(s) => (Some(s.hidden), Some(s.cell)),
            None => (None, None),
        };
        let out = run(
            RnnMode::Lstm,
            self.forward.bias(),
            self.batch_first,
            false,
            &[self.forward.gates(), self.reverse.gates()],
            batched_input,
            h0,
            c0,
        );
        let cell = out.cell.expect("an LSTM returns a cell state");
        (out.output, LstmState::new(cell, out.hidden))
    }
}

/// Configuration of a [`Gru`]: burn-nn's `GruConfig` (Note [Drop-in layers]).
#[derive(Config, Debug)]
pub struct GruConfig {
    /// The size of the input features.
    pub d_input: usize,
    /// The size of the hidden state.
    pub d_hidden: usize,
    /// If a bias should be applied during the Gru transformation.
    pub bias: bool,
    /// The reset gate applied after the hidden product (PyTorch's GRU): must be `true`.
    #[config(default = "true")]
    pub reset_after: bool,
    /// Gru initializer.
    #[config(default = "Initializer::XavierNormal{gain:1.0}")]
    pub initializer: Initializer,
    /// Activation of the update and reset gates: must be `Sigmoid`.
    #[config(default = "ActivationConfig::Sigmoid")]
    pub gate_activation: ActivationConfig,
    /// Activation of the new gate: must be `Tanh`.
    #[config(default = "ActivationConfig::Tanh")]
    pub hidden_activation: ActivationConfig,
    /// Hidden-state clipping: refused; must be `None`.
    pub clip: Option<f64>,
}

/// A GRU layer with burn-nn's API and parameters (`burn::nn::Gru`), run as one fused op
/// (Note [Drop-in layers]). Like burn-nn's, it is batch-first only.
#[derive(Module, Debug)]
pub struct Gru {
    /// The update gate `z`.
    pub update_gate: GateController,
    /// The reset gate `r`.
    pub reset_gate: GateController,
    /// The new gate `n`.
    pub new_gate: GateController,
    /// The size of the hidden state.
    pub d_hidden: usize,
    /// Always `true` (refused otherwise).
    pub reset_after: bool,
    /// Activation of the gates (Sigmoid).
    pub gate_activation: Activation,
    /// Activation of the new gate (Tanh).
    pub hidden_activation: Activation,
    /// Always `None` (refused by the config).
    pub clip: Option<f64>,
}

fn check_gru(
    config: &str,
    reset_after: bool,
    clip: Option<f64>,
    gate: &ActivationConfig,
    hidden: &ActivationConfig,
) {
    if !reset_after {
        refuse(
            config,
            "reset_after",
            &reset_after,
            "reset_after = true (PyTorch's and cuDNN's GRU)",
        );
    }
    check_clip(config, clip);
    check_activation(config, "gate_activation", gate, "Sigmoid");
    check_activation(config, "hidden_activation", hidden, "Tanh");
}

impl GruConfig {
    /// Initializes a new [`Gru`], as burn-nn does.
    ///
    /// # Panics
    ///
    /// Naming the field, for `reset_after = false`, `clip`, or a non-standard activation.
    pub fn init(&self, device: &Device) -> Gru {
        check_gru(
            "GruConfig",
            self.reset_after,
            self.clip,
            &self.gate_activation,
            &self.hidden_activation,
        );
        let new_gate = || {
            GateController::new(
                self.d_input,
                self.d_hidden,
                self.bias,
                self.initializer.clone(),
                device,
            )
        };
        let update_gate = new_gate();
        let reset_gate = new_gate();
        let new_gate = new_gate();
        Gru {
            update_gate,
            reset_gate,
            new_gate,
            d_hidden: self.d_hidden,
            reset_after: true,
            gate_activation: self.gate_activation.init(device),
            hidden_activation: self.hidden_activation.init(device),
            clip: None,
        }
    }
}

impl Gru {
    /// The gates in PyTorch's order `r, z, n`.
    fn gates(&self) -> Vec<&GateController> {
        vec![&self.reset_gate, &self.update_gate, &self.new_gate]
    }

    fn bias(&self) -> bool {
        self.new_gate.input_transform.bias.is_some()
    }

    /// Applies the GRU to `batched_input` (`[batch_size, seq_length, d_input]`) from
    /// `state` (`[batch_size, d_hidden]`, zeros when `None`); returns every step's hidden
    /// state, as burn-nn's `Gru::forward`.
    pub fn forward(&self, batched_input: Tensor<3>, state: Option<Tensor<2>>) -> Tensor<3> {
        run(
            RnnMode::Gru,
            self.bias(),
            true,
            false,
            &[self.gates()],
            batched_input,
            state.map(|h| h.unsqueeze_dim(0)),
            None,
        )
        .output
    }
}

/// Configuration of a [`BiGru`]: burn-nn's `BiGruConfig` (Note [Drop-in layers]).
#[derive(Config, Debug)]
pub struct BiGruConfig {
    /// The size of the input features.
    pub d_input: usize,
    /// The size of the hidden state.
    pub d_hidden: usize,
    /// If a bias should be applied during the BiGru transformation.
    pub bias: bool,
    /// Must be `true` (PyTorch's GRU).
    #[config(default = "true")]
    pub reset_after: bool,
    /// BiGru initializer.
    #[config(default = "Initializer::XavierNormal{gain:1.0}")]
    pub initializer: Initializer,
    /// If true, the input tensor is `[batch_size, seq_length, input_size]`.
    #[config(default = true)]
    pub batch_first: bool,
    /// Activation of the update and reset gates: must be `Sigmoid`.
    #[config(default = "ActivationConfig::Sigmoid")]
    pub gate_activation: ActivationConfig,
    /// Activation of the new gate: must be `Tanh`.
    #[config(default = "ActivationConfig::Tanh")]
    pub hidden_activation: ActivationConfig,
    /// Hidden-state clipping: refused; must be `None`.
    pub clip: Option<f64>,
}

/// A bidirectional GRU layer with burn-nn's API and parameters (`burn::nn::BiGru`), both
/// directions in one fused op (Note [Drop-in layers]).
#[derive(Module, Debug)]
pub struct BiGru {
    /// The forward direction.
    pub forward: Gru,
    /// The reverse direction.
    pub reverse: Gru,
    /// The size of the hidden state.
    pub d_hidden: usize,
    /// If true, input is `[batch_size, seq_length, input_size]`.
    pub batch_first: bool,
}

impl BiGruConfig {
    /// Initializes a new [`BiGru`], as burn-nn does.
    ///
    /// # Panics
    ///
    /// As [`GruConfig::init`].
    pub fn init(&self, device: &Device) -> BiGru {
        check_gru(
            "BiGruConfig",
            self.reset_after,
            self.clip,
            &self.gate_activation,
            &self.hidden_activation,
        );
        let direction = || {
            GruConfig::new(self.d_input, self.d_hidden, self.bias)
                .with_initializer(self.initializer.clone())
                .init(device)
        };
        BiGru {
            forward: direction(),
            reverse: direction(),
            d_hidden: self.d_hidden,
            batch_first: self.batch_first,
        }
    }
}

impl BiGru {
    /// Applies the bidirectional GRU: output `[batch_size, seq_length, 2 * d_hidden]` (or
    /// sequence-first) and the final hidden state `[2, batch_size, d_hidden]`, as
    /// burn-nn's `BiGru::forward`.
    pub fn forward(
        &self,
        batched_input: Tensor<3>,
        state: Option<Tensor<3>>,
    ) -> (Tensor<3>, Tensor<3>) {
        let out = run(
            RnnMode::Gru,
            self.forward.bias(),
            self.batch_first,
            false,
            &[self.forward.gates(), self.reverse.gates()],
            batched_input,
            state,
            None,
        );
        (out.output, out.hidden)
    }
}

/// Configuration of an [`Rnn`]: burn-nn's `RnnConfig` (Note [Drop-in layers]).
#[derive(Config, Debug)]
pub struct RnnConfig {
    /// The size of the input features.
    pub d_input: usize,
    /// The size of the hidden state.
    pub d_hidden: usize,
    /// If a bias should be applied during the Rnn transformation.
    pub bias: bool,
    /// Rnn initializer.
    #[config(default = "Initializer::XavierNormal{gain:1.0}")]
    pub initializer: Initializer,
    /// If true, the input tensor is `[batch_size, seq_length, input_size]`.
    #[config(default = true)]
    pub batch_first: bool,
    /// If true, process the sequence in reverse order.
    #[config(default = false)]
    pub reverse: bool,
    /// Hidden-state clipping: refused; must be `None`.
    pub clip: Option<f64>,
    /// Activation of the hidden state: `Tanh` (RNN tanh) or `Relu` (RNN relu).
    #[config(default = "ActivationConfig::Tanh")]
    pub hidden_activation: ActivationConfig,
}

/// A plain (Elman) RNN layer with burn-nn's API and parameters (`burn::nn::Rnn`), run as
/// one fused op (Note [Drop-in layers]).
#[derive(Module, Debug)]
pub struct Rnn {
    /// The gate: `input_transform` and `hidden_transform`.
    pub gate: GateController,
    /// The size of the hidden state.
    pub d_hidden: usize,
    /// If true, input is `[batch_size, seq_length, input_size]`.
    pub batch_first: bool,
    /// If true, process the sequence in reverse order.
    pub reverse: bool,
    /// Always `None` (refused by the config).
    pub clip: Option<f64>,
    /// Activation of the hidden state (Tanh or Relu).
    pub hidden_activation: Activation,
}

fn rnn_mode(config: &str, clip: Option<f64>, activation: &ActivationConfig) -> RnnMode {
    check_clip(config, clip);
    match activation {
        ActivationConfig::Tanh => RnnMode::RnnTanh,
        ActivationConfig::Relu => RnnMode::RnnRelu,
        other => refuse(
            config,
            "hidden_activation",
            other,
            "hidden_activation = Tanh or Relu",
        ),
    }
}

impl RnnConfig {
    /// Initializes a new [`Rnn`], as burn-nn does.
    ///
    /// # Panics
    ///
    /// Naming the field, for `clip` or an activation other than `Tanh` and `Relu`.
    pub fn init(&self, device: &Device) -> Rnn {
        rnn_mode("RnnConfig", self.clip, &self.hidden_activation);
        Rnn {
            gate: GateController::new(
                self.d_input,
                self.d_hidden,
                self.bias,
                self.initializer.clone(),
                device,
            ),
            d_hidden: self.d_hidden,
            batch_first: self.batch_first,
            reverse: self.reverse,
            clip: None,
            hidden_activation: self.hidden_activation.init(device),
        }
    }
}

impl Rnn {
    fn mode(&self) -> RnnMode {
        match &self.hidden_activation {
            Activation::Relu(_) => RnnMode::RnnRelu,
            Activation::Tanh(_) => RnnMode::RnnTanh,
            other => refuse("Rnn", "hidden_activation", other, "Tanh or Relu"),
        }
    }

    fn bias(&self) -> bool {
        self.gate.input_transform.bias.is_some()
    }

    /// Applies the RNN to `batched_input` from `state` (`[batch_size, d_hidden]`, zeros
    /// when `None`): every step's hidden state and the final state, as burn-nn's
    /// `Rnn::forward`.
    pub fn forward(
        &self,
        batched_input: Tensor<3>,
        state: Option<RnnState<2>>,
    ) -> (Tensor<3>, RnnState<2>) {
        let out = run(
            self.mode(),
            self.bias(),
            self.batch_first,
            self.reverse,
            &[vec![&self.gate]],
            batched_input,
            state.map(|s| s.hidden.unsqueeze_dim(0)),
            None,
        );
        (out.output, RnnState::new(out.hidden.squeeze_dim(0)))
    }
}

/// Configuration of a [`BiRnn`]: burn-nn's `BiRnnConfig` (Note [Drop-in layers]).
#[derive(Config, Debug)]
pub struct BiRnnConfig {
    /// The size of the input features.
    pub d_input: usize,
    /// The size of the hidden state.
    pub d_hidden: usize,
    /// If a bias should be applied during the BiRnn transformation.
    pub bias: bool,
    /// BiRnn initializer.
    #[config(default = "Initializer::XavierNormal{gain:1.0}")]
    pub initializer: Initializer,
    /// If true, the input tensor is `[batch_size, seq_length, input_size]`.
    #[config(default = true)]
    pub batch_first: bool,
    /// Hidden-state clipping: refused; must be `None`.
    pub clip: Option<f64>,
    /// Activation of the hidden state: `Tanh` or `Relu`.
    #[config(default = "ActivationConfig::Tanh")]
    pub hidden_activation: ActivationConfig,
}

/// A bidirectional plain RNN layer with burn-nn's API and parameters (`burn::nn::BiRnn`),
/// both directions in one fused op (Note [Drop-in layers]).
#[derive(Module, Debug)]
pub struct BiRnn {
    /// The forward direction.
    pub forward: Rnn,
    /// The reverse direction.
    pub reverse: Rnn,
    /// The size of the hidden state.
    pub d_hidden: usize,
    /// If true, input is `[batch_size, seq_length, input_size]`.
    pub batch_first: bool,
}

impl BiRnnConfig {
    /// Initializes a new [`BiRnn`], as burn-nn does.
    ///
    /// # Panics
    ///
    /// As [`RnnConfig::init`].
    pub fn init(&self, device: &Device) -> BiRnn {
        rnn_mode("BiRnnConfig", self.clip, &self.hidden_activation);
        let direction = || {
            RnnConfig::new(self.d_input, self.d_hidden, self.bias)
                .with_initializer(self.initializer.clone())
                .with_batch_first(true)
                .with_hidden_activation(self.hidden_activation.clone())
                .init(device)
        };
        BiRnn {
            forward: direction(),
            reverse: direction(),
            d_hidden: self.d_hidden,
            batch_first: self.batch_first,
        }
    }
}

impl BiRnn {
    /// Applies the bidirectional RNN: output `[batch_size, seq_length, 2 * d_hidden]` (or
    /// sequence-first) and the final state `[2, batch_size, d_hidden]`, as burn-nn's
    /// `BiRnn::forward`.
    pub fn forward(
        &self,
        batched_input: Tensor<3>,
        state: Option<RnnState<3>>,
    ) -> (Tensor<3>, RnnState<3>) {
        let out = run(
            self.forward.mode(),
            self.forward.bias(),
            self.batch_first,
            false,
            &[vec![&self.forward.gate], vec![&self.reverse.gate]],
            batched_input,
            state.map(|s| s.hidden),
            None,
        );
        (out.output, RnnState::new(out.hidden))
    }
}
