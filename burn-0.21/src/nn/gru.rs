//! `Gru` and `BiGru`, burn-nn's API over the fused op (Note [Drop-in layers]).

use burn::nn::activation::ActivationConfig;
use burn::tensor::backend::Backend;
use burn::tensor::Tensor;

use super::{
    check_activation, check_clip, drop_in_configs, drop_in_layer, one_layer, refuse, run, top_layer,
};
use crate::interop::burn_nn::records;
use crate::spec::RnnMode;

drop_in_configs! {
    /// Configuration of a [`Gru`]: burn-nn's `GruConfig`, plus `batch_first`, `num_layers`,
    /// `dropout` and `seed` (Note [Drop-in layers] in [`crate::nn`]).
    GruConfig;
    /// Configuration of a [`BiGru`]: burn-nn's `BiGruConfig`, plus `num_layers`, `dropout`
    /// and `seed` (Note [Drop-in layers] in [`crate::nn`]).
    BiGruConfig;
    {
        /// GRU "reset after" (cuDNN's and PyTorch's form, burn-nn's default): must be
        /// `true`.
        #[config(default = "true")]
        pub reset_after: bool,
        /// Activation of the reset and update gates: must be `Sigmoid`.
        #[config(default = "ActivationConfig::Sigmoid")]
        pub gate_activation: ActivationConfig,
        /// Activation of the new gate: must be `Tanh`.
        #[config(default = "ActivationConfig::Tanh")]
        pub hidden_activation: ActivationConfig,
        /// Hidden-state clipping: refused (the fused cells do not clip); must be `None`.
        pub clip: Option<f64>,
    }
}

drop_in_layer! {
    /// A GRU layer with burn-nn's API (`burn::nn::Gru`), run as one fused op.
    ///
    /// Made by [`GruConfig::init`]; see Note [Drop-in layers] in [`crate::nn`].
    Gru for burn::nn::Gru, GruRecord => |record, _, device| records::gru(record, device), forward_only
}

/// Refuses the options of `GruConfig` or `BiGruConfig` (of layer `use_instead`) that the
/// fused cells cannot compute.
fn check_gru_options(
    use_instead: &str,
    reset_after: bool,
    clip: Option<f64>,
    [gate, hidden]: [&ActivationConfig; 2],
) {
    let config = &format!("{use_instead}Config");
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
    /// invalid (see [`FusedRnnConfig::spec`](crate::FusedRnnConfig::spec)).
    pub fn init<B: Backend>(&self, device: &B::Device) -> Gru<B> {
        let activations = [&self.gate_activation, &self.hidden_activation];
        check_gru_options("Gru", self.reset_after, self.clip, activations);
        Gru::wrap(self.init_fused(RnnMode::Gru, false, device), false)
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

drop_in_layer! {
    /// A bidirectional GRU layer with burn-nn's API (`burn::nn::BiGru`), both directions
    /// run as one fused op.
    ///
    /// Made by [`BiGruConfig::init`]; see Note [Drop-in layers] in [`crate::nn`].
    BiGru for burn::nn::BiGru, BiGruRecord => |record, _, device| records::bigru(record, device), forward_only
}

impl BiGruConfig {
    /// Initializes a new [`BiGru`], every weight drawn now.
    ///
    /// # Panics
    ///
    /// As [`GruConfig::init`].
    pub fn init<B: Backend>(&self, device: &B::Device) -> BiGru<B> {
        let activations = [&self.gate_activation, &self.hidden_activation];
        check_gru_options("BiGru", self.reset_after, self.clip, activations);
        BiGru::wrap(self.init_fused(RnnMode::Gru, true, device), false)
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
}
