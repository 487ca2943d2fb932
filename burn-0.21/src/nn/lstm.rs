//! `Lstm` and `BiLstm`, burn-nn's API over the fused op (Note [Drop-in layers]).

use burn::nn::activation::ActivationConfig;
use burn::nn::LstmState;
use burn::tensor::backend::Backend;
use burn::tensor::Tensor;

use super::{
    check_activation, check_clip, drop_in_configs, drop_in_layer, one_layer, refuse, run, top_layer,
};
use crate::interop::burn_nn::records;
use crate::spec::RnnMode;

drop_in_configs! {
    /// Configuration of an [`Lstm`]: burn-nn's `LstmConfig`, plus `num_layers`, `dropout`
    /// and `seed` (Note [Drop-in layers] in [`crate::nn`]).
    LstmConfig + reverse;
    /// Configuration of a [`BiLstm`]: burn-nn's `BiLstmConfig`, plus `num_layers`, `dropout`
    /// and `seed` (Note [Drop-in layers] in [`crate::nn`]).
    BiLstmConfig;
    {
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
}

drop_in_layer! {
    /// An LSTM layer with burn-nn's API (`burn::nn::Lstm`), run as one fused op.
    ///
    /// Made by [`LstmConfig::init`]. Its record is the canonical
    /// [`FusedRnnRecord`](crate::FusedRnnRecord); see Note [Drop-in layers] in [`crate::nn`].
    Lstm for burn::nn::Lstm, LstmRecord => |record, _, device| records::lstm(record, device), reversible
}

/// Refuses the options of `LstmConfig` or `BiLstmConfig` (of layer `use_instead`) that the
/// fused cells cannot compute; `activations` are the gates', the cell candidate's and the
/// cell state output's.
fn check_lstm_options(
    use_instead: &str,
    clip: Option<f64>,
    input_forget: bool,
    [gate, cell, hidden]: [&ActivationConfig; 3],
) {
    let config = &format!("{use_instead}Config");
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
    /// [`FusedRnnConfig::spec`](crate::FusedRnnConfig::spec)).
    pub fn init<B: Backend>(&self, device: &B::Device) -> Lstm<B> {
        let activations = [
            &self.gate_activation,
            &self.cell_activation,
            &self.hidden_activation,
        ];
        check_lstm_options("Lstm", self.clip, self.input_forget, activations);
        Lstm::wrap(self.init_fused(RnnMode::Lstm, false, device), self.reverse)
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
}

drop_in_layer! {
    /// A bidirectional LSTM layer with burn-nn's API (`burn::nn::BiLstm`), both directions
    /// run as one fused op.
    ///
    /// Made by [`BiLstmConfig::init`]; see Note [Drop-in layers] in [`crate::nn`].
    BiLstm for burn::nn::BiLstm, BiLstmRecord => |record, _, device| records::bilstm(record, device), forward_only
}

impl BiLstmConfig {
    /// Initializes a new [`BiLstm`], every weight drawn now.
    ///
    /// # Panics
    ///
    /// As [`LstmConfig::init`].
    pub fn init<B: Backend>(&self, device: &B::Device) -> BiLstm<B> {
        let activations = [
            &self.gate_activation,
            &self.cell_activation,
            &self.hidden_activation,
        ];
        check_lstm_options("BiLstm", self.clip, self.input_forget, activations);
        BiLstm::wrap(self.init_fused(RnnMode::Lstm, true, device), false)
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
}
