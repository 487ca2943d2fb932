//! `Rnn` and `BiRnn`, burn-nn's API over the fused op (Note [Drop-in layers]).

use burn::config::Config;
use burn::module::{Initializer, Module};
use burn::nn::activation::ActivationConfig;
use burn::nn::{BiRnnRecord, RnnRecord, RnnState};
use burn::tensor::backend::Backend;
use burn::tensor::Tensor;

use super::{
    check_clip, device_of, is_activation, one_layer, refuse, run, top_layer, with_weights_of,
};
use crate::config::FusedRnnConfig;
use crate::interop::burn_nn::records;
use crate::interop::InteropError;
use crate::module::FusedRnn;
use crate::spec::RnnMode;

/// Configuration of an [`Rnn`]: burn-nn's `RnnConfig`, plus `num_layers`, `dropout` and
/// `seed` (Note [Drop-in layers] in [`crate::nn`]).
#[derive(Config, Debug)]
pub struct RnnConfig {
    /// The size of the input features.
    pub d_input: usize,
    /// The size of the hidden state.
    pub d_hidden: usize,
    /// Whether the gate has biases.
    pub bias: bool,
    /// Initializer of the weights and biases, drawn as burn-nn draws them.
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
    /// Hidden-state clipping: refused (the fused cells do not clip); must be `None`.
    pub clip: Option<f64>,
    /// The cell's activation: `Tanh` or `Relu`.
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

/// An Elman RNN layer (tanh or relu) with burn-nn's API (`burn::nn::Rnn`), run as one fused
/// op.
///
/// Made by [`RnnConfig::init`]; see Note [Drop-in layers] in [`crate::nn`].
#[derive(Clone, Debug)]
pub struct Rnn<B: Backend> {
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

/// The mode of an RNN's activation, after refusing the options the fused cells cannot
/// compute.
fn rnn_mode(
    config: &str,
    use_instead: &str,
    clip: Option<f64>,
    activation: &ActivationConfig,
) -> RnnMode {
    check_clip(config, clip, "hidden state", use_instead);
    if is_activation(activation, "Tanh") {
        RnnMode::RnnTanh
    } else if is_activation(activation, "Relu") {
        RnnMode::RnnRelu
    } else {
        refuse(
            config,
            "hidden_activation",
            activation,
            "expected hidden_activation = ActivationConfig::Tanh or ActivationConfig::Relu",
            use_instead,
        )
    }
}

impl RnnConfig {
    /// Initializes a new [`Rnn`], every weight drawn now.
    ///
    /// # Panics
    ///
    /// Naming the field, when an option is one the fused cells cannot compute (`clip`, an
    /// activation other than tanh and relu), or when a size is invalid (see
    /// [`FusedRnnConfig::spec`]).
    pub fn init<B: Backend>(&self, device: &B::Device) -> Rnn<B> {
        let mode = rnn_mode("RnnConfig", "Rnn", self.clip, &self.hidden_activation);
        let config = FusedRnnConfig::new(mode, self.d_input, self.d_hidden)
            .with_num_layers(self.num_layers)
            .with_bias(self.bias)
            .with_batch_first(self.batch_first)
            .with_dropout(self.dropout)
            .with_seed(self.seed);
        Rnn::wrap(
            config.init_like_burn_nn(&self.initializer, device),
            self.reverse,
        )
    }
}

impl<B: Backend> Rnn<B> {
    /// Applies the RNN to a batch of sequences.
    ///
    /// # Arguments
    ///
    /// - `batched_input`: the input sequences.
    /// - `state`: the initial state; zeros when `None`. Refused when `num_layers > 1`
    ///   (see [`Rnn::forward_stack`]).
    ///
    /// # Shapes
    ///
    /// - `batched_input`: `[batch_size, seq_length, d_input]` (or `[seq_length,
    ///   batch_size, d_input]` when not batch-first).
    /// - `state`: `hidden` `[batch_size, d_hidden]`.
    ///
    /// # Returns
    ///
    /// The hidden state of every step, `[batch_size, seq_length, d_hidden]` (or
    /// sequence-first), and the final state (of the top layer).
    pub fn forward(
        &self,
        batched_input: Tensor<B, 3>,
        state: Option<RnnState<B, 2>>,
    ) -> (Tensor<B, 3>, RnnState<B, 2>) {
        let state =
            state.map(|s| crate::RnnState::hidden_only(one_layer(&self.fused, "Rnn", s.hidden)));
        let (y, state) = run(
            &self.fused,
            self.batch_first,
            self.reverse,
            batched_input,
            state,
        );
        (y, RnnState::new(top_layer(state.hidden)))
    }

    /// Like [`Rnn::forward`], with the states of every layer (`hidden`
    /// `[num_layers, batch_size, d_hidden]`) in and out.
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

impl<B: Backend> Rnn<B> {
    /// The drop-in holding the weights and settings of burn-nn's `layer`.
    ///
    /// # Errors
    ///
    /// As [`FusedRnn::from_burn_nn`], except that `reverse` is supported.
    pub fn from_burn_nn(layer: &burn::nn::Rnn<B>) -> Result<Self, InteropError> {
        // Read (and so draw) the layer's parameters first: a clone of a parameter never
        // read would draw its own values.
        let _ = layer.devices();
        let mut forward = layer.clone();
        forward.reverse = false;
        Ok(Self::wrap(FusedRnn::from_burn_nn(&forward)?, layer.reverse))
    }

    /// Replaces the weights by those of a record of burn-nn's `Rnn`, checked against this
    /// layer's configuration (its activation comes from the configuration: a record holds
    /// none).
    ///
    /// # Errors
    ///
    /// As [`Lstm::load_burn_nn_record`](super::Lstm::load_burn_nn_record).
    pub fn load_burn_nn_record(self, record: RnnRecord<B>) -> Result<Self, InteropError> {
        let device = device_of(&self.fused);
        let layer = records::rnn(record, self.fused.spec().mode, &device);
        Ok(Self {
            fused: with_weights_of(&self.fused, &layer)?,
            ..self
        })
    }
}

super::drop_in_module!(Rnn);

/// Configuration of a [`BiRnn`]: burn-nn's `BiRnnConfig`, plus `num_layers`, `dropout` and
/// `seed` (Note [Drop-in layers] in [`crate::nn`]).
#[derive(Config, Debug)]
pub struct BiRnnConfig {
    /// The size of the input features.
    pub d_input: usize,
    /// The size of the hidden state of each direction.
    pub d_hidden: usize,
    /// Whether the gate has biases.
    pub bias: bool,
    /// Initializer of the weights and biases, drawn as burn-nn draws them.
    #[config(default = "Initializer::XavierNormal{gain:1.0}")]
    pub initializer: Initializer,
    /// If true, inputs and outputs are `[batch_size, seq_length, features]`; otherwise
    /// `[seq_length, batch_size, features]`.
    #[config(default = true)]
    pub batch_first: bool,
    /// Hidden-state clipping: refused (the fused cells do not clip); must be `None`.
    pub clip: Option<f64>,
    /// The cell's activation: `Tanh` or `Relu`.
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

/// A bidirectional Elman RNN layer with burn-nn's API (`burn::nn::BiRnn`), both directions
/// run as one fused op.
///
/// Made by [`BiRnnConfig::init`]; see Note [Drop-in layers] in [`crate::nn`].
#[derive(Clone, Debug)]
pub struct BiRnn<B: Backend> {
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

impl BiRnnConfig {
    /// Initializes a new [`BiRnn`], every weight drawn now.
    ///
    /// # Panics
    ///
    /// As [`RnnConfig::init`].
    pub fn init<B: Backend>(&self, device: &B::Device) -> BiRnn<B> {
        let mode = rnn_mode("BiRnnConfig", "BiRnn", self.clip, &self.hidden_activation);
        let config = FusedRnnConfig::new(mode, self.d_input, self.d_hidden)
            .with_num_layers(self.num_layers)
            .with_bidirectional(true)
            .with_bias(self.bias)
            .with_batch_first(self.batch_first)
            .with_dropout(self.dropout)
            .with_seed(self.seed);
        BiRnn::wrap(config.init_like_burn_nn(&self.initializer, device), false)
    }
}

impl<B: Backend> BiRnn<B> {
    /// Applies the bidirectional RNN to a batch of sequences.
    ///
    /// # Arguments
    ///
    /// - `batched_input`: the input sequences.
    /// - `state`: the initial state; zeros when `None`.
    ///
    /// # Shapes
    ///
    /// - `batched_input`: `[batch_size, seq_length, d_input]` (or `[seq_length,
    ///   batch_size, d_input]` when not batch-first).
    /// - `state`: `hidden` `[2 * num_layers, batch_size, d_hidden]`, forward direction
    ///   first (burn-nn's `[2, batch_size, d_hidden]` for one layer).
    ///
    /// # Returns
    ///
    /// Both directions' hidden states of every step, `[batch_size, seq_length, 2 *
    /// d_hidden]` (or sequence-first), and the final state, shaped as `state`.
    pub fn forward(
        &self,
        batched_input: Tensor<B, 3>,
        state: Option<RnnState<B, 3>>,
    ) -> (Tensor<B, 3>, RnnState<B, 3>) {
        let state = state.map(|s| crate::RnnState::hidden_only(s.hidden));
        let (y, state) = run(&self.fused, self.batch_first, false, batched_input, state);
        (y, RnnState::new(state.hidden))
    }

    /// Like [`BiRnn::forward`], with this crate's [`RnnState`](crate::RnnState).
    pub fn forward_stack(
        &self,
        batched_input: Tensor<B, 3>,
        state: Option<crate::RnnState<B>>,
    ) -> (Tensor<B, 3>, crate::RnnState<B>) {
        run(&self.fused, self.batch_first, false, batched_input, state)
    }
}

impl<B: Backend> BiRnn<B> {
    /// The drop-in holding the weights and layout of burn-nn's `layer`.
    ///
    /// # Errors
    ///
    /// As [`FusedRnn::from_burn_nn`].
    pub fn from_burn_nn(layer: &burn::nn::BiRnn<B>) -> Result<Self, InteropError> {
        Ok(Self::wrap(FusedRnn::from_burn_nn(layer)?, false))
    }

    /// Replaces the weights by those of a record of burn-nn's `BiRnn`, checked against this
    /// layer's configuration (its activation comes from the configuration).
    ///
    /// # Errors
    ///
    /// As [`Lstm::load_burn_nn_record`](super::Lstm::load_burn_nn_record).
    pub fn load_burn_nn_record(self, record: BiRnnRecord<B>) -> Result<Self, InteropError> {
        let device = device_of(&self.fused);
        let layer = records::birnn(record, self.fused.spec().mode, &device);
        Ok(Self {
            fused: with_weights_of(&self.fused, &layer)?,
            ..self
        })
    }
}

super::drop_in_module!(BiRnn);
