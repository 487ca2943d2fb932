//! `Lstm` and `BiLstm`, burn-nn's API over the fused op (Note [Drop-in layers]).

use burn::config::Config;
use burn::module::{Initializer, Module};
use burn::nn::activation::ActivationConfig;
use burn::nn::{BiLstmRecord, LstmRecord, LstmState};
use burn::tensor::backend::Backend;
use burn::tensor::Tensor;

use super::{
    check_activation, check_clip, device_of, one_layer, refuse, run, top_layer, with_weights_of,
};
use crate::config::FusedRnnConfig;
use crate::interop::burn_nn::records;
use crate::interop::InteropError;
use crate::module::FusedRnn;
use crate::spec::RnnMode;

/// Configuration of an [`Lstm`]: burn-nn's `LstmConfig`, plus `num_layers`, `dropout` and
/// `seed` (Note [Drop-in layers] in [`crate::nn`]).
#[derive(Config, Debug)]
pub struct LstmConfig {
    /// The size of the input features.
    pub d_input: usize,
    /// The size of the hidden state.
    pub d_hidden: usize,
    /// Whether the gates have biases.
    pub bias: bool,
    /// Initializer of every gate's weights and biases, drawn as burn-nn draws them.
    #[config(default = "Initializer::XavierNormal{gain:1.0}")]
    pub initializer: Initializer,
    /// If true, inputs and outputs are `[batch_size, seq_length, features]`; otherwise
    /// `[seq_length, batch_size, features]`.
    #[config(default = true)]
    pub batch_first: bool,
    /// Runs the sequence from its last step to its first (the outputs stay aligned with
    /// the inputs).
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
    /// Layers stacked in one fused op (beyond burn-nn).
    #[config(default = 1)]
    pub num_layers: usize,
    /// Dropout between stacked layers, in training (beyond burn-nn).
    #[config(default = 0.0)]
    pub dropout: f64,
    /// Seed of the dropout masks (beyond burn-nn).
    #[config(default = 0)]
    pub seed: u64,
}

/// An LSTM layer with burn-nn's API (`burn::nn::Lstm`), run as one fused op.
///
/// Made by [`LstmConfig::init`]. Its record is the canonical
/// [`FusedRnnRecord`](crate::FusedRnnRecord); see Note [Drop-in layers] in [`crate::nn`].
#[derive(Clone, Debug)]
pub struct Lstm<B: Backend> {
    fused: FusedRnn<B>,
    /// The size of the hidden state (of each direction).
    pub d_hidden: usize,
    /// The layout of inputs and outputs: `[batch_size, seq_length, features]` when true,
    /// `[seq_length, batch_size, features]` otherwise.
    pub batch_first: bool,
    /// Whether the sequence runs from its last step to its first (`Lstm` and `Rnn` only;
    /// always false for the others).
    pub reverse: bool,
}

/// Refuses the LSTM options the fused cells cannot compute.
#[allow(clippy::too_many_arguments)]
fn check_lstm_options(
    config: &str,
    use_instead: &str,
    clip: Option<f64>,
    input_forget: bool,
    gate: &ActivationConfig,
    cell: &ActivationConfig,
    hidden: &ActivationConfig,
) {
    check_clip(config, clip, "cell state", use_instead);
    if input_forget {
        refuse(
            config,
            "input_forget",
            input_forget,
            "expected input_forget = false (the fused LSTM has an independent forget gate)",
            use_instead,
        );
    }
    check_activation(config, "gate_activation", gate, "Sigmoid", use_instead);
    check_activation(config, "cell_activation", cell, "Tanh", use_instead);
    check_activation(config, "hidden_activation", hidden, "Tanh", use_instead);
}

impl LstmConfig {
    /// Initializes a new [`Lstm`], every weight drawn now.
    ///
    /// # Panics
    ///
    /// Naming the field, when an option is one the fused cells cannot compute (`clip`,
    /// `input_forget`, a non-standard activation), or when a size is invalid (see
    /// [`FusedRnnConfig::spec`]).
    pub fn init<B: Backend>(&self, device: &B::Device) -> Lstm<B> {
        check_lstm_options(
            "LstmConfig",
            "Lstm",
            self.clip,
            self.input_forget,
            &self.gate_activation,
            &self.cell_activation,
            &self.hidden_activation,
        );
        let config = FusedRnnConfig::new(RnnMode::Lstm, self.d_input, self.d_hidden)
            .with_num_layers(self.num_layers)
            .with_bias(self.bias)
            .with_batch_first(self.batch_first)
            .with_dropout(self.dropout)
            .with_seed(self.seed);
        Lstm::wrap(
            config.init_like_burn_nn(&self.initializer, device),
            self.reverse,
        )
    }
}

impl<B: Backend> Lstm<B> {
    /// Applies the LSTM to a batch of sequences.
    ///
    /// # Arguments
    ///
    /// - `batched_input`: the input sequences.
    /// - `state`: the initial state (burn-nn's `LstmState::new(cell, hidden)`); zeros when
    ///   `None`. Refused when `num_layers > 1` (see [`Lstm::forward_stack`]).
    ///
    /// # Shapes
    ///
    /// - `batched_input`: `[batch_size, seq_length, d_input]` (or `[seq_length,
    ///   batch_size, d_input]` when not batch-first).
    /// - `state`: `cell` and `hidden` `[batch_size, d_hidden]`.
    ///
    /// # Returns
    ///
    /// The hidden state of every step, `[batch_size, seq_length, d_hidden]` (or
    /// sequence-first), and the final state (of the top layer).
    pub fn forward(
        &self,
        batched_input: Tensor<B, 3>,
        state: Option<LstmState<B, 2>>,
    ) -> (Tensor<B, 3>, LstmState<B, 2>) {
        let state = state.map(|s| {
            crate::RnnState::lstm(
                one_layer(&self.fused, "Lstm", s.hidden),
                one_layer(&self.fused, "Lstm", s.cell),
            )
        });
        let (y, state) = run(
            &self.fused,
            self.batch_first,
            self.reverse,
            batched_input,
            state,
        );
        let cell = state.cell.expect("an LSTM returns a cell state");
        (y, LstmState::new(top_layer(cell), top_layer(state.hidden)))
    }

    /// Like [`Lstm::forward`], with the states of every layer: `hidden` and `cell`
    /// `[num_layers, batch_size, d_hidden]`, layer `l` at index `l`.
    pub fn forward_stack(
        &self,
        batched_input: Tensor<B, 3>,
        state: Option<crate::RnnState<B>>,
    ) -> (Tensor<B, 3>, crate::RnnState<B>) {
        run(
            &self.fused,
            self.batch_first,
            self.reverse,
            batched_input,
            state,
        )
    }
}

impl<B: Backend> Lstm<B> {
    /// The drop-in holding the weights and settings of burn-nn's `layer`.
    ///
    /// # Errors
    ///
    /// As [`FusedRnn::from_burn_nn`], except that `reverse` is supported.
    pub fn from_burn_nn(layer: &burn::nn::Lstm<B>) -> Result<Self, InteropError> {
        // Read (and so draw) the layer's parameters first: a clone of a parameter never
        // read would draw its own values.
        let _ = layer.devices();
        let mut forward = layer.clone();
        forward.reverse = false;
        Ok(Self::wrap(FusedRnn::from_burn_nn(&forward)?, layer.reverse))
    }

    /// Replaces the weights by those of a record of burn-nn's `Lstm` (what
    /// `burn::nn::Lstm::save_file` wrote), checked against this layer's configuration.
    ///
    /// # Errors
    ///
    /// [`InteropError::Shape`], [`InteropError::Missing`] or
    /// [`InteropError::Unexpected`] naming the tensor when the record does not fit the
    /// configuration (sizes, bias, one layer), [`InteropError::NotFinite`] for a NaN or
    /// infinite weight.
    pub fn load_burn_nn_record(self, record: LstmRecord<B>) -> Result<Self, InteropError> {
        let device = device_of(&self.fused);
        let layer = records::lstm(record, &device);
        Ok(Self {
            fused: with_weights_of(&self.fused, &layer)?,
            ..self
        })
    }
}

super::drop_in_module!(Lstm);

/// Configuration of a [`BiLstm`]: burn-nn's `BiLstmConfig`, plus `num_layers`, `dropout`
/// and `seed` (Note [Drop-in layers] in [`crate::nn`]).
#[derive(Config, Debug)]
pub struct BiLstmConfig {
    /// The size of the input features.
    pub d_input: usize,
    /// The size of the hidden state of each direction.
    pub d_hidden: usize,
    /// Whether the gates have biases.
    pub bias: bool,
    /// Initializer of every gate's weights and biases, drawn as burn-nn draws them.
    #[config(default = "Initializer::XavierNormal{gain:1.0}")]
    pub initializer: Initializer,
    /// If true, inputs and outputs are `[batch_size, seq_length, features]`; otherwise
    /// `[seq_length, batch_size, features]`.
    #[config(default = true)]
    pub batch_first: bool,
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
    /// Bidirectional layers stacked in one fused op (beyond burn-nn).
    #[config(default = 1)]
    pub num_layers: usize,
    /// Dropout between stacked layers, in training (beyond burn-nn).
    #[config(default = 0.0)]
    pub dropout: f64,
    /// Seed of the dropout masks (beyond burn-nn).
    #[config(default = 0)]
    pub seed: u64,
}

/// A bidirectional LSTM layer with burn-nn's API (`burn::nn::BiLstm`), both directions run
/// as one fused op.
///
/// Made by [`BiLstmConfig::init`]; see Note [Drop-in layers] in [`crate::nn`].
#[derive(Clone, Debug)]
pub struct BiLstm<B: Backend> {
    fused: FusedRnn<B>,
    /// The size of the hidden state (of each direction).
    pub d_hidden: usize,
    /// The layout of inputs and outputs: `[batch_size, seq_length, features]` when true,
    /// `[seq_length, batch_size, features]` otherwise.
    pub batch_first: bool,
    /// Whether the sequence runs from its last step to its first (`Lstm` and `Rnn` only;
    /// always false for the others).
    pub reverse: bool,
}

impl BiLstmConfig {
    /// Initializes a new [`BiLstm`], every weight drawn now.
    ///
    /// # Panics
    ///
    /// As [`LstmConfig::init`].
    pub fn init<B: Backend>(&self, device: &B::Device) -> BiLstm<B> {
        check_lstm_options(
            "BiLstmConfig",
            "BiLstm",
            self.clip,
            self.input_forget,
            &self.gate_activation,
            &self.cell_activation,
            &self.hidden_activation,
        );
        let config = FusedRnnConfig::new(RnnMode::Lstm, self.d_input, self.d_hidden)
            .with_num_layers(self.num_layers)
            .with_bidirectional(true)
            .with_bias(self.bias)
            .with_batch_first(self.batch_first)
            .with_dropout(self.dropout)
            .with_seed(self.seed);
        BiLstm::wrap(config.init_like_burn_nn(&self.initializer, device), false)
    }
}

impl<B: Backend> BiLstm<B> {
    /// Applies the bidirectional LSTM to a batch of sequences.
    ///
    /// # Arguments
    ///
    /// - `batched_input`: the input sequences.
    /// - `state`: the initial state (burn-nn's `LstmState::new(cell, hidden)`); zeros when
    ///   `None`.
    ///
    /// # Shapes
    ///
    /// - `batched_input`: `[batch_size, seq_length, d_input]` (or `[seq_length,
    ///   batch_size, d_input]` when not batch-first).
    /// - `state`: `cell` and `hidden` `[2 * num_layers, batch_size, d_hidden]`, forward
    ///   direction first (burn-nn's `[2, batch_size, d_hidden]` for one layer).
    ///
    /// # Returns
    ///
    /// Both directions' hidden states of every step, `[batch_size, seq_length, 2 *
    /// d_hidden]` (or sequence-first), and the final state, shaped as `state`.
    pub fn forward(
        &self,
        batched_input: Tensor<B, 3>,
        state: Option<LstmState<B, 3>>,
    ) -> (Tensor<B, 3>, LstmState<B, 3>) {
        let state = state.map(|s| crate::RnnState::lstm(s.hidden, s.cell));
        let (y, state) = run(&self.fused, self.batch_first, false, batched_input, state);
        let cell = state.cell.expect("an LSTM returns a cell state");
        (y, LstmState::new(cell, state.hidden))
    }

    /// Like [`BiLstm::forward`], with this crate's [`RnnState`](crate::RnnState).
    pub fn forward_stack(
        &self,
        batched_input: Tensor<B, 3>,
        state: Option<crate::RnnState<B>>,
    ) -> (Tensor<B, 3>, crate::RnnState<B>) {
        run(&self.fused, self.batch_first, false, batched_input, state)
    }
}

impl<B: Backend> BiLstm<B> {
    /// The drop-in holding the weights and settings of burn-nn's `layer`.
    ///
    /// # Errors
    ///
    /// As [`FusedRnn::from_burn_nn`].
    pub fn from_burn_nn(layer: &burn::nn::BiLstm<B>) -> Result<Self, InteropError> {
        Ok(Self::wrap(FusedRnn::from_burn_nn(layer)?, false))
    }

    /// Replaces the weights by those of a record of burn-nn's `BiLstm`, checked against
    /// this layer's configuration.
    ///
    /// # Errors
    ///
    /// As [`Lstm::load_burn_nn_record`].
    pub fn load_burn_nn_record(self, record: BiLstmRecord<B>) -> Result<Self, InteropError> {
        let device = device_of(&self.fused);
        let layer = records::bilstm(record, &device);
        Ok(Self {
            fused: with_weights_of(&self.fused, &layer)?,
            ..self
        })
    }
}

super::drop_in_module!(BiLstm);
