//! `Rnn` and `BiRnn`, burn-nn's API over the fused op (Note [Drop-in layers]).

use burn::nn::activation::ActivationConfig;
use burn::nn::RnnState;
use burn::tensor::backend::Backend;
use burn::tensor::Tensor;

use super::{
    check_clip, drop_in_configs, drop_in_layer, is_activation, one_layer, refuse, run, top_layer,
};
use crate::interop::burn_nn::records;
use crate::spec::RnnMode;

drop_in_configs! {
    /// Configuration of an [`Rnn`]: burn-nn's `RnnConfig`, plus `num_layers`, `dropout` and
    /// `seed` (Note [Drop-in layers] in [`crate::nn`]).
    RnnConfig + reverse;
    /// Configuration of a [`BiRnn`]: burn-nn's `BiRnnConfig`, plus `num_layers`, `dropout`
    /// and `seed` (Note [Drop-in layers] in [`crate::nn`]).
    BiRnnConfig;
    {
        /// Hidden-state clipping: refused (the fused cells do not clip); must be `None`.
        pub clip: Option<f64>,
        /// The cell's activation: `Tanh` or `Relu`.
        #[config(default = "ActivationConfig::Tanh")]
        pub hidden_activation: ActivationConfig,
    }
}

drop_in_layer! {
    /// An Elman RNN layer (tanh or relu) with burn-nn's API (`burn::nn::Rnn`), run as one
    /// fused op.
    ///
    /// Made by [`RnnConfig::init`]; see Note [Drop-in layers] in [`crate::nn`].
    Rnn for burn::nn::Rnn, RnnRecord => records::rnn, reversible
}

/// The mode of an RNN's activation, after refusing the options of `RnnConfig` or
/// `BiRnnConfig` (of layer `use_instead`) that the fused cells cannot compute.
fn rnn_mode(use_instead: &str, clip: Option<f64>, activation: &ActivationConfig) -> RnnMode {
    let config = &format!("{use_instead}Config");
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
    /// [`FusedRnnConfig::spec`](crate::FusedRnnConfig::spec)).
    pub fn init<B: Backend>(&self, device: &B::Device) -> Rnn<B> {
        let mode = rnn_mode("Rnn", self.clip, &self.hidden_activation);
        Rnn::wrap(self.init_fused(mode, false, device), self.reverse)
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
}

drop_in_layer! {
    /// A bidirectional Elman RNN layer with burn-nn's API (`burn::nn::BiRnn`), both
    /// directions run as one fused op.
    ///
    /// Made by [`BiRnnConfig::init`]; see Note [Drop-in layers] in [`crate::nn`].
    BiRnn for burn::nn::BiRnn, BiRnnRecord => records::birnn, forward_only
}

impl BiRnnConfig {
    /// Initializes a new [`BiRnn`], every weight drawn now.
    ///
    /// # Panics
    ///
    /// As [`RnnConfig::init`].
    pub fn init<B: Backend>(&self, device: &B::Device) -> BiRnn<B> {
        let mode = rnn_mode("BiRnn", self.clip, &self.hidden_activation);
        BiRnn::wrap(self.init_fused(mode, true, device), false)
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
}
