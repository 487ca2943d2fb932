//! Configuration: plain data, validated once.
//!
//! [`FusedRnnConfig`] is what a model author writes; [`FusedRnnConfig::spec`] validates it
//! and resolves it into an [`RnnSpec`], the plain, hashable description of the network that
//! every lower layer (layout, backend op, cuDNN descriptor cache) works from.

use burn::config::Config;
use burn::module::Initializer;

use crate::spec::{InputMode, RnnMode, RnnSpec};

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
