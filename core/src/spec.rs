//! What the network is: the cell ([`RnnMode`]), how layer 0 reads its input
//! ([`InputMode`]), and the resolved description every layer below the module works from
//! ([`RnnSpec`]). Plain, hashable data with no dependencies inside the crate, so that the
//! configuration, the canonical layout and every implementation can import it.

use serde::{Deserialize, Serialize};

/// The recurrent cell, in cuDNN's naming.
///
/// Gate order (see Note [Gate order] in [`crate::layout`]) is cuDNN's and PyTorch's:
/// LSTM `i, f, g, o`; GRU `r, z, n`; plain RNNs have one gate.
#[derive(Serialize, Deserialize, Clone, Debug, Copy, PartialEq, Eq, Hash)]
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
#[derive(Serialize, Deserialize, Clone, Debug, Copy, PartialEq, Eq, Hash)]
pub enum InputMode {
    /// `W_ih x` as usual.
    Linear,
    /// No input matrix and no input bias in layer 0: the input is added to every gate's
    /// pre-activation as it is (`CUDNN_SKIP_INPUT`). Requires `d_input == d_hidden`.
    Skip,
    /// [`InputMode::Skip`] when `d_input == d_hidden`, [`InputMode::Linear`] otherwise.
    AutoSelect,
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
    /// One unidirectional layer of `mode` with biases, `d_input` inputs and `d_hidden`
    /// hidden units, no projection, no skip input: change the fields for anything else.
    /// (The front-ends' configurations resolve and check a spec; one built here is checked
    /// when a descriptor or a layout is made from it.)
    pub fn new(mode: RnnMode, d_input: usize, d_hidden: usize) -> Self {
        Self {
            mode,
            d_input,
            d_hidden,
            proj_size: None,
            num_layers: 1,
            bidirectional: false,
            skip_input: false,
            bias: true,
        }
    }

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

/// JSON, as Burn's `Config` derive printed these enums before they moved to the core crate
/// (`"Lstm"`, with the quotes): the text users saw stays the same.
impl core::fmt::Display for RnnMode {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "\"{self:?}\"")
    }
}

/// JSON, as for [`RnnMode`].
impl core::fmt::Display for InputMode {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "\"{self:?}\"")
    }
}
