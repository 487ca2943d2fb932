//! Configuration: plain data, validated once.
//!
//! [`FusedRnnConfig`] is what a model author writes; [`FusedRnnConfig::spec`] validates it
//! and resolves it into an [`RnnSpec`], the plain, hashable description of the network that
//! every lower layer (layout, backend op, cuDNN descriptor cache) works from.

use burn::config::Config;
use burn::module::Initializer;

/// The recurrent cell, in cuDNN's naming.
///
/// Gate order (see Note [Gate order] in [`crate::layout`]) is cuDNN's and PyTorch's:
/// LSTM `i, f, g, o`; GRU `r, z, n`; plain RNNs have one gate.
#[derive(Config, Debug, Copy, PartialEq, Eq, Hash)]
pub enum RnnMode {
    /// Long short-term memory, 4 gates, with a cell state.
    Lstm,
    /// Gated recurrent unit, 3 gates, "reset after" form (cuDNN, PyTorch):
    /// `n = tanh(W_n x + b_Wn + r ∘ (R_n h + b_Rn))`.
    Gru,
    /// Elman RNN with `tanh`.
    RnnTanh,
    /// Elman RNN with `relu`.
    RnnRelu,
}

impl RnnMode {
    /// Number of gates: LSTM 4, GRU 3, RNN 1.
    pub fn num_gates(self) -> usize {
        match self {
            RnnMode::Lstm => 4,
            RnnMode::Gru => 3,
            RnnMode::RnnTanh | RnnMode::RnnRelu => 1,
        }
    }

    /// Whether the cell carries a cell state `c` next to `h` (LSTM only).
    pub fn has_cell_state(self) -> bool {
        self == RnnMode::Lstm
    }

    /// Lower-case name, as in error messages.
    pub fn name(self) -> &'static str {
        match self {
            RnnMode::Lstm => "lstm",
            RnnMode::Gru => "gru",
            RnnMode::RnnTanh => "rnn_tanh",
            RnnMode::RnnRelu => "rnn_relu",
        }
    }
}

/// How the first layer consumes its input (cuDNN's `cudnnRNNInputMode_t`).
#[derive(Config, Debug, Copy, PartialEq, Eq, Hash)]
pub enum InputMode {
    /// `W_ih x` as usual.
    Linear,
    /// No input matrix and no input bias in layer 0: the input is added to every gate's
    /// pre-activation as it is (`CUDNN_SKIP_INPUT`). Requires `d_input == d_hidden`.
    Skip,
    /// [`InputMode::Skip`] when `d_input == d_hidden`, [`InputMode::Linear`] otherwise.
    AutoSelect,
}

/// Configuration of a [`FusedRnn`](crate::FusedRnn): a stack of recurrent layers run as one
/// fused op.
///
/// ```
/// use burn_fused_rnn::{FusedRnnConfig, RnnMode};
///
/// let config = FusedRnnConfig::new(RnnMode::Lstm, 64, 128)
///     .with_num_layers(2)
///     .with_bidirectional(true);
/// let spec = config.spec(); // validates, panics with a message naming the field
/// assert_eq!(spec.output_size(), 256);
/// ```
#[derive(Config, Debug)]
pub struct FusedRnnConfig {
    /// The recurrent cell.
    pub mode: RnnMode,
    /// Size of the input features.
    pub d_input: usize,
    /// Size of the hidden state (and of the cell state for LSTM).
    pub d_hidden: usize,
    /// Number of stacked layers.
    #[config(default = 1)]
    pub num_layers: usize,
    /// Run a reverse direction too; outputs of both directions are concatenated.
    #[config(default = false)]
    pub bidirectional: bool,
    /// How layer 0 consumes its input.
    #[config(default = "InputMode::Linear")]
    pub input_mode: InputMode,
    /// Whether the cells have the two bias vectors `b_ih` and `b_hh`.
    #[config(default = true)]
    pub bias: bool,
    /// Dropout probability applied to the outputs of every layer but the last, in training
    /// only. Must lie in `[0, 1)`. With one layer it does nothing, and building the module
    /// warns through the `log` crate, as PyTorch does.
    #[config(default = 0.0)]
    pub dropout: f64,
    /// Seed of the dropout masks.
    #[config(default = 0)]
    pub seed: u64,
    /// If true, inputs and outputs are `[batch_size, seq_length, features]`; otherwise
    /// `[seq_length, batch_size, features]`. States are always `[L*D, batch_size, features]`.
    #[config(default = true)]
    pub batch_first: bool,
    /// LSTM projection size `P` (`h = W_hr (o ∘ tanh(c))`); must be below `d_hidden`.
    #[config(default = "None")]
    pub proj_size: Option<usize>,
    /// Initializer of the weight matrices. `None` (the default) draws every weight and bias
    /// from `U(-1/√H, 1/√H)`, as PyTorch does. With `Some(init)`, matrices use `init`
    /// (fan-in = columns, fan-out = rows) and biases start at zero.
    #[config(default = "None")]
    pub initializer: Option<Initializer>,
}

/// The resolved, validated description of the network: plain data, hashable, the key of
/// every cache below the module layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RnnSpec {
    /// The recurrent cell.
    pub mode: RnnMode,
    /// Input features of layer 0.
    pub d_input: usize,
    /// Hidden size `H`.
    pub d_hidden: usize,
    /// Projection size `P` (LSTM only); `None` means `P = H`.
    pub proj_size: Option<usize>,
    /// Number of layers `L`.
    pub num_layers: usize,
    /// Two directions (`D = 2`) or one.
    pub bidirectional: bool,
    /// Layer 0 has no input matrix (resolved from [`InputMode`]).
    pub skip_input: bool,
    /// Cells have biases.
    pub bias: bool,
}

impl RnnSpec {
    /// Number of directions `D`.
    pub fn num_directions(&self) -> usize {
        if self.bidirectional {
            2
        } else {
            1
        }
    }

    /// Size `P` of the hidden state `h` (the projection size, or `H`).
    pub fn d_state(&self) -> usize {
        self.proj_size.unwrap_or(self.d_hidden)
    }

    /// Features of each output step: `D * P`.
    pub fn output_size(&self) -> usize {
        self.num_directions() * self.d_state()
    }

    /// Input features of layer `layer`: `d_input` for layer 0, `D * P` above.
    pub fn layer_input_size(&self, layer: usize) -> usize {
        if layer == 0 {
            self.d_input
        } else {
            self.output_size()
        }
    }

    /// Number of (layer, direction) pairs, cuDNN's "pseudo-layers": `L * D`.
    pub fn num_pseudo_layers(&self) -> usize {
        self.num_layers * self.num_directions()
    }
}

impl FusedRnnConfig {
    /// Warns through the `log` crate when `dropout > 0` with one layer: dropout acts
    /// between layers only, so it does nothing there (PyTorch's `nn.LSTM` warns the same
    /// way). Called when a module is built.
    pub(crate) fn warn_unused_dropout(&self) {
        if self.dropout > 0.0 && self.num_layers == 1 {
            log::warn!(
                "FusedRnnConfig: dropout = {} with num_layers = 1 does nothing: dropout acts \
                 between layers (after every layer but the last), so it needs num_layers > 1",
                self.dropout
            );
        }
    }

    /// Validates the configuration and resolves it into an [`RnnSpec`].
    ///
    /// # Panics
    ///
    /// With a message naming the field and the allowed values, when a size is zero, a
    /// projection is asked of a mode other than LSTM or is not below `d_hidden`, skip input
    /// is asked with `d_input != d_hidden`, `dropout` is outside `[0, 1)`, or a size derived
    /// from the configuration (`D * P`, a weight's dimensions or length, `params_size`)
    /// overflows `usize`.
    pub fn spec(&self) -> RnnSpec {
        let fail = |msg: String| -> ! { panic!("invalid FusedRnnConfig: {msg}") };
        if self.d_input == 0 {
            fail(format!("expected d_input > 0, got {}", self.d_input));
        }
        if self.d_hidden == 0 {
            fail(format!("expected d_hidden > 0, got {}", self.d_hidden));
        }
        if self.num_layers == 0 {
            fail(format!("expected num_layers > 0, got {}", self.num_layers));
        }
        if !(self.dropout >= 0.0 && self.dropout < 1.0) {
            fail(format!("expected dropout in [0, 1), got {}", self.dropout));
        }
        if let Some(p) = self.proj_size {
            if self.mode != RnnMode::Lstm {
                fail(format!(
                    "expected proj_size = None for mode {:?} (projection is LSTM only), got Some({p})",
                    self.mode
                ));
            }
            if p == 0 || p >= self.d_hidden {
                fail(format!(
                    "expected proj_size in 1..d_hidden = 1..{}, got {p}",
                    self.d_hidden
                ));
            }
        }
        let skip_input = match self.input_mode {
            InputMode::Linear => false,
            InputMode::Skip => {
                if self.d_input != self.d_hidden {
                    fail(format!(
                        "expected d_input == d_hidden for input_mode Skip, got d_input = {} and d_hidden = {}",
                        self.d_input, self.d_hidden
                    ));
                }
                true
            }
            InputMode::AutoSelect => self.d_input == self.d_hidden,
        };
        let spec = RnnSpec {
            mode: self.mode,
            d_input: self.d_input,
            d_hidden: self.d_hidden,
            proj_size: self.proj_size,
            num_layers: self.num_layers,
            bidirectional: self.bidirectional,
            skip_input,
            bias: self.bias,
        };
        // Absurd sizes must not wrap around in the layout's offsets (checked arithmetic).
        if let Err(msg) = crate::layout::check_sizes(&spec) {
            fail(msg);
        }
        spec
    }
}
