//! `Gru` and `BiGru`, burn-nn's API over the fused op (Note [Drop-in layers]).

use burn::config::Config;
use burn::module::Initializer;
use burn::nn::activation::ActivationConfig;
use burn::nn::{BiGruRecord, GruRecord};
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

/// Configuration of a [`Gru`]: burn-nn's `GruConfig`, plus `batch_first`, `num_layers`,
/// `dropout` and `seed` (Note [Drop-in layers] in [`crate::nn`]).
#[derive(Config, Debug)]
pub struct GruConfig {
    /// The size of the input features.
    pub d_input: usize,
    /// The size of the hidden state.
    pub d_hidden: usize,
    /// Whether the gates have biases.
    pub bias: bool,
    /// GRU "reset after" (cuDNN's and PyTorch's form, burn-nn's default): must be `true`.
    #[config(default = "true")]
    pub reset_after: bool,
    /// Initializer of every gate's weights and biases, drawn as burn-nn draws them.
    #[config(default = "Initializer::XavierNormal{gain:1.0}")]
    pub initializer: Initializer,
    /// Activation of the reset and update gates: must be `Sigmoid`.
    #[config(default = "ActivationConfig::Sigmoid")]
    pub gate_activation: ActivationConfig,
    /// Activation of the new gate: must be `Tanh`.
    #[config(default = "ActivationConfig::Tanh")]
    pub hidden_activation: ActivationConfig,
    /// Hidden-state clipping: refused (the fused cells do not clip); must be `None`.
    pub clip: Option<f64>,
    /// If true (burn-nn's `Gru` always is), inputs and outputs are `[batch_size,
    /// seq_length, features]`; otherwise `[seq_length, batch_size, features]` (beyond
    /// burn-nn).
    #[config(default = true)]
    pub batch_first: bool,
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

/// A GRU layer with burn-nn's API (`burn::nn::Gru`), run as one fused op.
///
/// Made by [`GruConfig::init`]; see Note [Drop-in layers] in [`crate::nn`].
#[derive(Clone, Debug)]
pub struct Gru<B: Backend> {
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

/// Refuses the GRU options the fused cells cannot compute.
fn check_gru_options(
    config: &str,
    use_instead: &str,
    reset_after: bool,
    clip: Option<f64>,
    gate: &ActivationConfig,
    hidden: &ActivationConfig,
) {
    if !reset_after {
        refuse(
            config,
            "reset_after",
            reset_after,
            "expected reset_after = true (cuDNN's GRU applies the reset gate after the \
             recurrent matrix and has no reset-before form)",
            use_instead,
        );
    }
    check_clip(config, clip, "hidden state", use_instead);
    check_activation(config, "gate_activation", gate, "Sigmoid", use_instead);
    check_activation(config, "hidden_activation", hidden, "Tanh", use_instead);
}

impl GruConfig {
    /// Initializes a new [`Gru`], every weight drawn now.
    ///
    /// # Panics
    ///
    /// Naming the field, when an option is one the fused cells cannot compute
    /// (`reset_after = false`, `clip`, a non-standard activation), or when a size is
    /// invalid (see [`FusedRnnConfig::spec`]).
    pub fn init<B: Backend>(&self, device: &B::Device) -> Gru<B> {
        check_gru_options(
            "GruConfig",
            "Gru",
            self.reset_after,
            self.clip,
            &self.gate_activation,
            &self.hidden_activation,
        );
        let config = FusedRnnConfig::new(RnnMode::Gru, self.d_input, self.d_hidden)
            .with_num_layers(self.num_layers)
            .with_bias(self.bias)
            .with_batch_first(self.batch_first)
            .with_dropout(self.dropout)
            .with_seed(self.seed);
        Gru::wrap(config.init_like_burn_nn(&self.initializer, device), false)
    }
}

impl<B: Backend> Gru<B> {
    /// Applies the GRU to a batch of sequences.
    ///
    /// # Arguments
    ///
    /// - `batched_input`: the input sequences.
    /// - `state`: the initial hidden state; zeros when `None`. Refused when
    ///   `num_layers > 1` (see [`Gru::forward_stack`]).
    ///
    /// # Shapes
    ///
    /// - `batched_input`: `[batch_size, seq_length, d_input]` (or `[seq_length,
    ///   batch_size, d_input]` when not batch-first).
    /// - `state`: `[batch_size, d_hidden]`.
    ///
    /// # Returns
    ///
    /// The hidden state of every step, `[batch_size, seq_length, d_hidden]` (or
    /// sequence-first); the last step's is the final state, as in burn-nn.
    pub fn forward(
        &self,
        batched_input: Tensor<B, 3>,
        state: Option<Tensor<B, 2>>,
    ) -> Tensor<B, 3> {
        let state = state.map(|h| crate::RnnState::hidden_only(one_layer(&self.fused, "Gru", h)));
        run(&self.fused, self.batch_first, false, batched_input, state).0
    }

    /// Like [`Gru::forward`], with the states of every layer (`hidden`
    /// `[num_layers, batch_size, d_hidden]`) in and out.
    pub fn forward_stack(
        &self,
        batched_input: Tensor<B, 3>,
        state: Option<crate::RnnState<B>>,
    ) -> (Tensor<B, 3>, crate::RnnState<B>) {
        run(&self.fused, self.batch_first, false, batched_input, state)
    }

    /// The final state of the top layer, `[batch_size, d_hidden]`, with the outputs (what
    /// burn-nn's `Gru` does not return).
    pub fn forward_with_state(
        &self,
        batched_input: Tensor<B, 3>,
        state: Option<Tensor<B, 2>>,
    ) -> (Tensor<B, 3>, Tensor<B, 2>) {
        let state = state.map(|h| crate::RnnState::hidden_only(one_layer(&self.fused, "Gru", h)));
        let (y, state) = run(&self.fused, self.batch_first, false, batched_input, state);
        (y, top_layer(state.hidden))
    }
}

impl<B: Backend> Gru<B> {
    /// The drop-in holding the weights of burn-nn's `layer`.
    ///
    /// # Errors
    ///
    /// As [`FusedRnn::from_burn_nn`].
    pub fn from_burn_nn(layer: &burn::nn::Gru<B>) -> Result<Self, InteropError> {
        Ok(Self::wrap(FusedRnn::from_burn_nn(layer)?, false))
    }

    /// Replaces the weights by those of a record of burn-nn's `Gru`, checked against this
    /// layer's configuration.
    ///
    /// # Errors
    ///
    /// As [`Lstm::load_burn_nn_record`](super::Lstm::load_burn_nn_record).
    pub fn load_burn_nn_record(self, record: GruRecord<B>) -> Result<Self, InteropError> {
        let device = device_of(&self.fused);
        let layer = records::gru(record, &device);
        Ok(Self {
            fused: with_weights_of(&self.fused, &layer)?,
            ..self
        })
    }
}

super::drop_in_module!(Gru);

/// Configuration of a [`BiGru`]: burn-nn's `BiGruConfig`, plus `num_layers`, `dropout` and
/// `seed` (Note [Drop-in layers] in [`crate::nn`]).
#[derive(Config, Debug)]
pub struct BiGruConfig {
    /// The size of the input features.
    pub d_input: usize,
    /// The size of the hidden state of each direction.
    pub d_hidden: usize,
    /// Whether the gates have biases.
    pub bias: bool,
    /// GRU "reset after": must be `true`.
    #[config(default = "true")]
    pub reset_after: bool,
    /// Initializer of every gate's weights and biases, drawn as burn-nn draws them.
    #[config(default = "Initializer::XavierNormal{gain:1.0}")]
    pub initializer: Initializer,
    /// If true, inputs and outputs are `[batch_size, seq_length, features]`; otherwise
    /// `[seq_length, batch_size, features]`.
    #[config(default = true)]
    pub batch_first: bool,
    /// Activation of the reset and update gates: must be `Sigmoid`.
    #[config(default = "ActivationConfig::Sigmoid")]
    pub gate_activation: ActivationConfig,
    /// Activation of the new gate: must be `Tanh`.
    #[config(default = "ActivationConfig::Tanh")]
    pub hidden_activation: ActivationConfig,
    /// Hidden-state clipping: refused (the fused cells do not clip); must be `None`.
    pub clip: Option<f64>,
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

/// A bidirectional GRU layer with burn-nn's API (`burn::nn::BiGru`), both directions run as
/// one fused op.
///
/// Made by [`BiGruConfig::init`]; see Note [Drop-in layers] in [`crate::nn`].
#[derive(Clone, Debug)]
pub struct BiGru<B: Backend> {
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

impl BiGruConfig {
    /// Initializes a new [`BiGru`], every weight drawn now.
    ///
    /// # Panics
    ///
    /// As [`GruConfig::init`].
    pub fn init<B: Backend>(&self, device: &B::Device) -> BiGru<B> {
        check_gru_options(
            "BiGruConfig",
            "BiGru",
            self.reset_after,
            self.clip,
            &self.gate_activation,
            &self.hidden_activation,
        );
        let config = FusedRnnConfig::new(RnnMode::Gru, self.d_input, self.d_hidden)
            .with_num_layers(self.num_layers)
            .with_bidirectional(true)
            .with_bias(self.bias)
            .with_batch_first(self.batch_first)
            .with_dropout(self.dropout)
            .with_seed(self.seed);
        BiGru::wrap(config.init_like_burn_nn(&self.initializer, device), false)
    }
}

impl<B: Backend> BiGru<B> {
    /// Applies the bidirectional GRU to a batch of sequences.
    ///
    /// # Arguments
    ///
    /// - `batched_input`: the input sequences.
    /// - `state`: the initial hidden state; zeros when `None`.
    ///
    /// # Shapes
    ///
    /// - `batched_input`: `[batch_size, seq_length, d_input]` (or `[seq_length,
    ///   batch_size, d_input]` when not batch-first).
    /// - `state`: `[2 * num_layers, batch_size, d_hidden]`, forward direction first
    ///   (burn-nn's `[2, batch_size, d_hidden]` for one layer).
    ///
    /// # Returns
    ///
    /// Both directions' hidden states of every step, `[batch_size, seq_length, 2 *
    /// d_hidden]` (or sequence-first), and the final hidden state, shaped as `state`.
    pub fn forward(
        &self,
        batched_input: Tensor<B, 3>,
        state: Option<Tensor<B, 3>>,
    ) -> (Tensor<B, 3>, Tensor<B, 3>) {
        let (y, state) = run(
            &self.fused,
            self.batch_first,
            false,
            batched_input,
            state.map(crate::RnnState::hidden_only),
        );
        (y, state.hidden)
    }

    /// Like [`BiGru::forward`], with this crate's [`RnnState`](crate::RnnState).
    pub fn forward_stack(
        &self,
        batched_input: Tensor<B, 3>,
        state: Option<crate::RnnState<B>>,
    ) -> (Tensor<B, 3>, crate::RnnState<B>) {
        run(&self.fused, self.batch_first, false, batched_input, state)
    }
}

impl<B: Backend> BiGru<B> {
    /// The drop-in holding the weights and layout of burn-nn's `layer`.
    ///
    /// # Errors
    ///
    /// As [`FusedRnn::from_burn_nn`].
    pub fn from_burn_nn(layer: &burn::nn::BiGru<B>) -> Result<Self, InteropError> {
        Ok(Self::wrap(FusedRnn::from_burn_nn(layer)?, false))
    }

    /// Replaces the weights by those of a record of burn-nn's `BiGru`, checked against this
    /// layer's configuration.
    ///
    /// # Errors
    ///
    /// As [`Lstm::load_burn_nn_record`](super::Lstm::load_burn_nn_record).
    pub fn load_burn_nn_record(self, record: BiGruRecord<B>) -> Result<Self, InteropError> {
        let device = device_of(&self.fused);
        let layer = records::bigru(record, &device);
        Ok(Self {
            fused: with_weights_of(&self.fused, &layer)?,
            ..self
        })
    }
}

super::drop_in_module!(BiGru);
