//! Keras / TF2 layers (`keras.layers.LSTM`, `GRU`, `SimpleRNN`, each alone or inside
//! `Bidirectional`): their weights to and from canonical weights.
//!
//! Keras keeps, per cell, `kernel` `[input_size, G*H]`, `recurrent_kernel` `[H, G*H]` and a
//! bias, and applies them as `x kernel + h recurrent_kernel + bias` (the transpose of the
//! canonical orientation):
//!
//! | layer | gates | bias |
//! |---|---|---|
//! | `LSTM` | `i, f, c, o` (the canonical order) | `[4H]`, one bias: `b_ih = bias`, `b_hh = 0` |
//! | `GRU(reset_after=True)` | `z, r, h` (canonical: `r, z, n`) | `[2, 3H]`: row 0 input bias, row 1 recurrent bias |
//! | `SimpleRNN` | one | `[H]`: `b_ih = bias`, `b_hh = 0` |
//!
//! Export writes an LSTM's or RNN's single bias as `b_ih + b_hh`, which computes the same.
//! Keras layers take batch-first input; a stack is a list of layers, layer 0 first. The
//! layer is generic over how its tensors are held (`T`), as in [`super::onnx`].

use super::canonical::{check_shape, Canonical};
use super::{HostTensor, Imported, InteropError};
use crate::gates;
use crate::layout::{param_name, ParamKind};
use crate::spec::{RnnMode, RnnSpec};

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
        gates::keras(match self {
            KerasLayerKind::Lstm => RnnMode::Lstm,
            KerasLayerKind::Gru => RnnMode::Gru,
            KerasLayerKind::SimpleRnn => RnnMode::RnnTanh,
        })
    }
}

/// The weights of one Keras cell, as `layer.get_weights()` lists them.
#[derive(Clone, Debug)]
pub struct KerasCell<T> {
    /// `kernel`, `[input_size, G*H]`.
    pub kernel: T,
    /// `recurrent_kernel`, `[H, G*H]`.
    pub recurrent_kernel: T,
    /// `bias`: `[4H]` (LSTM), `[2, 3H]` (GRU with `reset_after=True`), `[H]` (SimpleRNN);
    /// `None` for `use_bias=False`.
    pub bias: Option<T>,
}

impl<T> KerasCell<T> {
    /// The same cell with its tensors converted by `f`.
    pub fn map<U>(self, mut f: impl FnMut(T) -> U) -> KerasCell<U> {
        KerasCell {
            kernel: f(self.kernel),
            recurrent_kernel: f(self.recurrent_kernel),
            bias: self.bias.map(f),
        }
    }
}

/// One Keras recurrent layer, or a `Bidirectional` wrapper around one, with the settings
/// that decide what it computes. [`KerasRnnLayer::new`] sets Keras' defaults.
#[derive(Clone, Debug)]
pub struct KerasRnnLayer<T> {
    /// The layer class.
    pub kind: KerasLayerKind,
    /// The (forward) layer's weights.
    pub forward: KerasCell<T>,
    /// The backward layer's weights of a `Bidirectional` wrapper.
    pub backward: Option<KerasCell<T>>,
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

impl<T> KerasRnnLayer<T> {
    /// A layer of class `kind` with weights `forward` and Keras' default settings.
    pub fn new(kind: KerasLayerKind, forward: KerasCell<T>) -> Self {
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
    pub fn with_backward(mut self, backward: KerasCell<T>) -> Self {
        self.backward = Some(backward);
        self
    }

    /// The same layer with its tensors converted by `f`.
    pub fn map<U>(self, mut f: impl FnMut(T) -> U) -> KerasRnnLayer<U> {
        KerasRnnLayer {
            kind: self.kind,
            forward: self.forward.map(&mut f),
            backward: self.backward.map(|b| b.map(&mut f)),
            activation: self.activation,
            recurrent_activation: self.recurrent_activation,
            reset_after: self.reset_after,
            go_backwards: self.go_backwards,
            merge_mode: self.merge_mode,
        }
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

/// The canonical weights computing the stack of Keras layers `layers` (layer 0 first),
/// batch-first as Keras is, each tensor read by `read` (given its name,
/// `layers[k].forward.kernel`, for its errors).
///
/// # Errors
///
/// [`InteropError::Unsupported`] naming the setting (`layers[k].reset_after`, ...) for what
/// the fused op cannot express, or layers that differ in class, hidden size or directions;
/// [`InteropError::Shape`] naming the weight (`layers[k].forward.kernel`) and both shapes;
/// [`InteropError::NotFinite`]; [`InteropError::Empty`] when `layers` is empty; what
/// `read` returns.
pub fn import<T, E: From<InteropError>>(
    layers: &[KerasRnnLayer<T>],
    read: impl Fn(&str, &T) -> Result<HostTensor, E>,
) -> Result<Imported, E> {
    let first = layers
        .first()
        .ok_or_else(|| InteropError::empty("layers", "Keras layer"))?;
    let mode = first.mode("layers[0].")?;
    let kind = first.kind;
    let nd = if first.backward.is_some() { 2 } else { 1 };
    let g = kind.gates().len();
    let rk = read(
        "layers[0].forward.recurrent_kernel",
        &first.forward.recurrent_kernel,
    )?
    .shape;
    check_shape("layers[0].forward.recurrent_kernel", &[0, 0], &rk)?;
    let hidden = rk[0];
    let gh = g * hidden;
    let kernel0 = read("layers[0].forward.kernel", &first.forward.kernel)?.shape;
    check_shape("layers[0].forward.kernel", &[0, gh], &kernel0)?;
    let bias = layers
        .iter()
        .flat_map(|l| [Some(&l.forward), l.backward.as_ref()])
        .flatten()
        .any(|c| c.bias.is_some());
    let spec = RnnSpec {
        num_layers: layers.len(),
        bidirectional: nd == 2,
        bias,
        ..RnnSpec::new(mode, kernel0[0], hidden)
    };
    let mut canonical = Canonical::new(
        mode,
        Box::new(|l, d, k| format!("layers[{l}] {}", param_name(k, l, d))),
    );
    let from = kind.gates();
    let to = gates::canonical(mode);
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
            )
            .into());
        }
        let cells: Vec<(&str, &KerasCell<T>)> = match &layer.backward {
            Some(b) if nd == 2 => vec![("forward", &layer.forward), ("backward", b)],
            None if nd == 1 => vec![("forward", &layer.forward)],
            _ => {
                return Err(InteropError::unsupported(
                    format!("{path}backward"),
                    layer.backward.is_some(),
                    "every layer of a fused stack has the directions of layers[0]",
                )
                .into())
            }
        };
        let d_in = if k == 0 { kernel0[0] } else { nd * hidden };
        for (d, (side, cell)) in cells.into_iter().enumerate() {
            let key = |name: &str| format!("{path}{side}.{name}");
            let kernel = read(&key("kernel"), &cell.kernel)?;
            check_shape(&key("kernel"), &[d_in, gh], &kernel.shape)?;
            let recurrent = read(&key("recurrent_kernel"), &cell.recurrent_kernel)?;
            check_shape(&key("recurrent_kernel"), &[hidden, gh], &recurrent.shape)?;
            let slot = |kind| (k, d, kind);
            let name = |kind| format!("{path}{side} {}", param_name(kind, k, d));
            let canon2 = |t: HostTensor| t.transpose().permute_gates(from, to);
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
            let zeros = || HostTensor::zeros(vec![gh]);
            let (b_ih, b_hh) = match &cell.bias {
                None => (zeros(), zeros()),
                Some(b) if kind == KerasLayerKind::Gru => {
                    let b = read(&key("bias"), b)?;
                    check_shape(&key("bias"), &[2, gh], &b.shape)?;
                    (b.index(0), b.index(1))
                }
                Some(b) => {
                    let b = read(&key("bias"), b)?;
                    check_shape(&key("bias"), &[gh], &b.shape)?;
                    (b, zeros())
                }
            };
            let canon1 = |t: HostTensor| t.permute_gates(from, to);
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
    Ok(canonical.build(spec, true)?)
}

/// The Keras layers computing the module of `spec` with flat weights `flat` (in the
/// layout's order), one per layer (`Bidirectional` for a bidirectional module), to be
/// filled with `layer.set_weights([kernel, recurrent_kernel, bias])`.
///
/// # Errors
///
/// [`InteropError::Unsupported`] for a projection (`proj_size`): Keras' `LSTM` has none.
pub fn export(
    spec: &RnnSpec,
    flat: &[f64],
) -> Result<Vec<KerasRnnLayer<HostTensor>>, InteropError> {
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
    let from = gates::canonical(spec.mode);
    let to = kind.gates();
    let layers = (0..spec.num_layers)
        .map(|layer| {
            let mut cells = (0..spec.num_directions()).map(|d| {
                let c = super::cell_weights(spec, flat, layer, d);
                let keras2 = |t: HostTensor| t.permute_gates(from, to).transpose();
                let bias = match (c.bias_ih, c.bias_hh) {
                    (Some(bi), Some(bh)) => {
                        let (bi, bh) = (bi.permute_gates(from, to), bh.permute_gates(from, to));
                        Some(match kind {
                            KerasLayerKind::Gru => HostTensor::stack(&[bi, bh]),
                            _ => bi.add(&bh),
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
