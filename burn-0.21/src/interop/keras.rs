//! Keras / TF2 layers (`keras.layers.LSTM`, `GRU`, `SimpleRNN`, each alone or inside
//! `Bidirectional`): their weights to and from a [`FusedRnn`].
//!
//! Keras keeps, per cell, `kernel` `[input_size, G*H]`, `recurrent_kernel` `[H, G*H]` and a
//! bias, and applies them as `x kernel + h recurrent_kernel + bias` (the transpose of this
//! crate's orientation):
//!
//! | layer | gates | bias |
//! |---|---|---|
//! | `LSTM` | `i, f, c, o` (this crate's order) | `[4H]`, one bias: `b_ih = bias`, `b_hh = 0` |
//! | `GRU(reset_after=True)` | `z, r, h` (this crate: `r, z, n`) | `[2, 3H]`: row 0 input bias, row 1 recurrent bias |
//! | `SimpleRNN` | one | `[H]`: `b_ih = bias`, `b_hh = 0` |
//!
//! Export writes an LSTM's or RNN's single bias as `b_ih + b_hh`, which computes the same.
//! Keras layers take batch-first input; a stack is a list of layers, layer 0 first.
//!
//! Tested against Keras 3's own outputs (run on its torch backend, so without
//! TensorFlow), for import and export (`tests/fixtures/interop/generate.py`).
//!
//! ```
//! use burn::backend::NdArray;
//! use burn_fused_rnn::interop::keras;
//! use burn_fused_rnn::{FusedRnn, FusedRnnConfig, RnnMode};
//!
//! # fn main() -> Result<(), burn_fused_rnn::interop::InteropError> {
//! let device = Default::default();
//! let lstm = FusedRnnConfig::new(RnnMode::Lstm, 3, 4)
//!     .with_bidirectional(true)
//!     .init::<NdArray>(&device);
//! let layers = keras::export(&lstm)?; // [Bidirectional(LSTM(4))]
//! assert_eq!(layers[0].forward.kernel.shape.to_vec(), [3, 16]);
//! let back: FusedRnn<NdArray> = keras::import(&layers, &device)?;
//! # let _ = back;
//! # Ok(())
//! # }
//! ```
//!
//! What is refused, and why: Note [What conversions refuse] in [`crate::interop`].

use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};

use super::canonical::{cell_weights, check_shape, float_tensor, permute_gates, Canonical};
use super::onnx::canonical_gates;
use super::InteropError;
use crate::config::FusedRnnConfig;
use crate::layout::{param_name, ParamKind};
use crate::module::FusedRnn;
use crate::spec::RnnMode;

/// The Keras layer class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KerasLayerKind {
    /// `keras.layers.LSTM`.
    Lstm,
    /// `keras.layers.GRU`.
    Gru,
    /// `keras.layers.SimpleRNN`.
    SimpleRnn,
}

impl KerasLayerKind {
    fn gates(self) -> &'static [char] {
        burn_fused_rnn_core::gates::keras(match self {
            KerasLayerKind::Lstm => RnnMode::Lstm,
            KerasLayerKind::Gru => RnnMode::Gru,
            KerasLayerKind::SimpleRnn => RnnMode::RnnTanh,
        })
    }

    fn num_gates(self) -> usize {
        self.gates().len()
    }
}

/// The weights of one Keras cell, as `layer.get_weights()` lists them.
#[derive(Clone, Debug)]
pub struct KerasCell {
    /// `kernel`, `[input_size, G*H]`.
    pub kernel: TensorData,
    /// `recurrent_kernel`, `[H, G*H]`.
    pub recurrent_kernel: TensorData,
    /// `bias`: `[4H]` (LSTM), `[2, 3H]` (GRU with `reset_after=True`), `[H]` (SimpleRNN);
    /// `None` for `use_bias=False`.
    pub bias: Option<TensorData>,
}

/// One Keras recurrent layer, or a `Bidirectional` wrapper around one, with the settings
/// that decide what it computes. [`KerasRnnLayer::new`] sets Keras' defaults.
#[derive(Clone, Debug)]
pub struct KerasRnnLayer {
    /// The layer class.
    pub kind: KerasLayerKind,
    /// The (forward) layer's weights.
    pub forward: KerasCell,
    /// The backward layer's weights of a `Bidirectional` wrapper.
    pub backward: Option<KerasCell>,
    /// `activation` (`"tanh"`; `SimpleRNN` also `"relu"`).
    pub activation: String,
    /// `recurrent_activation` of `LSTM` and `GRU` (`"sigmoid"`).
    pub recurrent_activation: String,
    /// `reset_after` of `GRU` (must be `true`, Keras' default).
    pub reset_after: bool,
    /// `go_backwards` of the (forward) layer (refused).
    pub go_backwards: bool,
    /// `merge_mode` of `Bidirectional` (must be `"concat"`, Keras' default).
    pub merge_mode: String,
}

impl KerasRnnLayer {
    /// A layer of class `kind` with weights `forward` and Keras' default settings.
    pub fn new(kind: KerasLayerKind, forward: KerasCell) -> Self {
        Self {
            kind,
            forward,
            backward: None,
            activation: "tanh".into(),
            recurrent_activation: "sigmoid".into(),
            reset_after: true,
            go_backwards: false,
            merge_mode: "concat".into(),
        }
    }

    /// This layer wrapped in `Bidirectional`, the backward layer holding `backward`.
    pub fn with_backward(mut self, backward: KerasCell) -> Self {
        self.backward = Some(backward);
        self
    }

    fn mode(&self, path: &str) -> Result<RnnMode, InteropError> {
        let opt = |name: &str| format!("{path}{name}");
        if self.go_backwards {
            return Err(InteropError::unsupported(
                opt("go_backwards"),
                true,
                "the fused op runs a reverse direction only as the second half of a \
                 bidirectional layer: use Bidirectional",
            ));
        }
        if self.backward.is_some() && self.merge_mode != "concat" {
            return Err(InteropError::unsupported(
                opt("merge_mode"),
                &self.merge_mode,
                "the fused op concatenates the two directions' outputs",
            ));
        }
        if self.kind != KerasLayerKind::SimpleRnn && self.recurrent_activation != "sigmoid" {
            return Err(InteropError::unsupported(
                opt("recurrent_activation"),
                &self.recurrent_activation,
                "the fused cells' gates use sigmoid",
            ));
        }
        if self.kind == KerasLayerKind::Gru && !self.reset_after {
            return Err(InteropError::unsupported(
                opt("reset_after"),
                false,
                "cuDNN's GRU applies the reset gate after the recurrent matrix and has no \
                 reset-before mode",
            ));
        }
        match (self.kind, self.activation.as_str()) {
            (KerasLayerKind::Lstm, "tanh") => Ok(RnnMode::Lstm),
            (KerasLayerKind::Gru, "tanh") => Ok(RnnMode::Gru),
            (KerasLayerKind::SimpleRnn, "tanh") => Ok(RnnMode::RnnTanh),
            (KerasLayerKind::SimpleRnn, "relu") => Ok(RnnMode::RnnRelu),
            (_, other) => Err(InteropError::unsupported(
                opt("activation"),
                other,
                "the fused cells use tanh (SimpleRNN: tanh or relu)",
            )),
        }
    }
}

/// Builds the fused module computing the stack of Keras layers `layers` (layer 0 first),
/// batch-first as Keras is.
///
/// # Errors
///
/// [`InteropError::Unsupported`] naming the setting (`layers[k].reset_after`, ...) for what
/// the fused op cannot express, or layers that differ in class, hidden size or directions;
/// [`InteropError::Shape`] naming the weight (`layers[k].forward.kernel`) and both shapes;
/// [`InteropError::Empty`] when `layers` is empty.
pub fn import<B: Backend>(
    layers: &[KerasRnnLayer],
    device: &B::Device,
) -> Result<FusedRnn<B>, InteropError> {
    if layers.is_empty() {
        return Err(InteropError::empty("layers", "Keras layer"));
    }
    let first = &layers[0];
    let mode = first.mode("layers[0].")?;
    let kind = first.kind;
    let nd = if first.backward.is_some() { 2 } else { 1 };
    let g = kind.num_gates();
    let rk = first.forward.recurrent_kernel.shape.to_vec();
    check_shape("layers[0].forward.recurrent_kernel", &[0, 0], &rk)?;
    let hidden = rk[0];
    let gh = g * hidden;
    let kernel0 = first.forward.kernel.shape.to_vec();
    check_shape("layers[0].forward.kernel", &[0, gh], &kernel0)?;
    let bias = layers
        .iter()
        .flat_map(|l| [Some(&l.forward), l.backward.as_ref()])
        .flatten()
        .any(|c| c.bias.is_some());
    let config = FusedRnnConfig::new(mode, kernel0[0], hidden)
        .with_num_layers(layers.len())
        .with_bidirectional(nd == 2)
        .with_bias(bias)
        .with_batch_first(true);
    let mut canonical = Canonical::new(
        mode,
        Box::new(|l, d, k| format!("layers[{l}] {}", param_name(k, l, d))),
    );
    let from = kind.gates();
    let to = canonical_gates(mode);
    for (k, layer) in layers.iter().enumerate() {
        let path = format!("layers[{k}].");
        if layer.kind != kind || layer.mode(&path)? != mode {
            return Err(InteropError::unsupported(
                format!("{path}kind"),
                layer.kind,
                format!(
                    "layers[0] is {kind:?} ({}): a fused stack runs one cell",
                    mode.name()
                ),
            ));
        }
        let cells: Vec<(&str, &KerasCell)> = match &layer.backward {
            Some(b) if nd == 2 => vec![("forward", &layer.forward), ("backward", b)],
            None if nd == 1 => vec![("forward", &layer.forward)],
            _ => {
                return Err(InteropError::unsupported(
                    format!("{path}backward"),
                    layer.backward.is_some(),
                    "every layer of a fused stack has the directions of layers[0]",
                ))
            }
        };
        let d_in = if k == 0 { kernel0[0] } else { nd * hidden };
        for (d, (side, cell)) in cells.into_iter().enumerate() {
            let key = |name: &str| format!("{path}{side}.{name}");
            check_shape(&key("kernel"), &[d_in, gh], &cell.kernel.shape)?;
            check_shape(
                &key("recurrent_kernel"),
                &[hidden, gh],
                &cell.recurrent_kernel.shape,
            )?;
            let kernel: Tensor<B, 2> = float_tensor(&key("kernel"), cell.kernel.clone(), device)?;
            let recurrent: Tensor<B, 2> = float_tensor(
                &key("recurrent_kernel"),
                cell.recurrent_kernel.clone(),
                device,
            )?;
            let slot = |kind| (k, d, kind);
            let name = |kind| format!("{path}{side} {}", param_name(kind, k, d));
            let canon2 = |t: Tensor<B, 2>| permute_gates(t.transpose(), 0, from, to);
            let dtype = kernel.dtype();
            canonical.insert(
                slot(ParamKind::WeightIh),
                name(ParamKind::WeightIh),
                canon2(kernel),
            );
            canonical.insert(
                slot(ParamKind::WeightHh),
                name(ParamKind::WeightHh),
                canon2(recurrent),
            );
            if !bias {
                continue;
            }
            let zeros = || Tensor::<B, 1>::zeros([gh], (device, dtype));
            let (b_ih, b_hh) = match &cell.bias {
                None => (zeros(), zeros()),
                Some(b) if kind == KerasLayerKind::Gru => {
                    check_shape(&key("bias"), &[2, gh], &b.shape)?;
                    let b: Tensor<B, 2> = float_tensor(&key("bias"), b.clone(), device)?;
                    let row = |i| b.clone().narrow(0, i, 1).squeeze_dim::<1>(0);
                    (row(0), row(1))
                }
                Some(b) => {
                    check_shape(&key("bias"), &[gh], &b.shape)?;
                    (float_tensor(&key("bias"), b.clone(), device)?, zeros())
                }
            };
            let canon1 = |t: Tensor<B, 1>| permute_gates(t, 0, from, to);
            canonical.insert(
                slot(ParamKind::BiasIh),
                name(ParamKind::BiasIh),
                canon1(b_ih),
            );
            canonical.insert(
                slot(ParamKind::BiasHh),
                name(ParamKind::BiasHh),
                canon1(b_hh),
            );
        }
    }
    canonical.build(&config, device)
}

/// The Keras layers computing `rnn`, one per layer (`Bidirectional` for a bidirectional
/// module), to be filled with `layer.set_weights([kernel, recurrent_kernel, bias])`.
///
/// # Errors
///
/// [`InteropError::Unsupported`] for a projection (`proj_size`): Keras' `LSTM` has none.
pub fn export<B: Backend>(rnn: &FusedRnn<B>) -> Result<Vec<KerasRnnLayer>, InteropError> {
    let spec = *rnn.spec();
    if let Some(p) = spec.proj_size {
        return Err(InteropError::unsupported(
            "proj_size",
            Some(p),
            "Keras' LSTM has no projection",
        ));
    }
    let kind = match spec.mode {
        RnnMode::Lstm => KerasLayerKind::Lstm,
        RnnMode::Gru => KerasLayerKind::Gru,
        RnnMode::RnnTanh | RnnMode::RnnRelu => KerasLayerKind::SimpleRnn,
    };
    let from = canonical_gates(spec.mode);
    let to = kind.gates();
    let layers = (0..spec.num_layers)
        .map(|layer| {
            let mut cells = (0..spec.num_directions()).map(|d| {
                let c = cell_weights(rnn, layer, d);
                let keras2 =
                    |t: Tensor<B, 2>| permute_gates(t, 0, from, to).transpose().into_data();
                let bias = match (c.bias_ih, c.bias_hh) {
                    (Some(bi), Some(bh)) => {
                        let (bi, bh) = (
                            permute_gates(bi, 0, from, to),
                            permute_gates(bh, 0, from, to),
                        );
                        Some(match kind {
                            KerasLayerKind::Gru => Tensor::stack::<2>(vec![bi, bh], 0).into_data(),
                            _ => (bi + bh).into_data(),
                        })
                    }
                    _ => None,
                };
                KerasCell {
                    kernel: keras2(c.weight_ih),
                    recurrent_kernel: keras2(c.weight_hh),
                    bias,
                }
            });
            let mut out = KerasRnnLayer::new(kind, cells.next().expect("a forward direction"));
            out.backward = cells.next();
            if spec.mode == RnnMode::RnnRelu {
                out.activation = "relu".into();
            }
            out
        })
        .collect();
    Ok(layers)
}
