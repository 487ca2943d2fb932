//! ONNX `LSTM`, `GRU` and `RNN` nodes: their `W`, `R`, `B` inputs to and from canonical
//! weights.
//!
//! An ONNX node is one layer, in one or both directions. Per node, with `D` directions and
//! `G` gates:
//!
//! | input | shape | canonical |
//! |---|---|---|
//! | `W` | `[D, G*H, input_size]` | `weight_ih` of each direction |
//! | `R` | `[D, G*H, H]` | `weight_hh` |
//! | `B` | `[D, 2*G*H]` = `[Wb, Rb]` (optional: zeros) | `bias_ih`, `bias_hh` |
//!
//! Matrices have PyTorch's orientation; only the gate order differs: ONNX LSTM `i, o, f, c`
//! (canonical `i, f, g, o`), GRU `z, r, h` (canonical `r, z, n`). A model of several
//! layers is a chain of nodes (what `torch.onnx.export` writes for a multi-layer
//! `nn.LSTM`), given in order.
//!
//! The node is generic over how its tensors are held (`T`): each front-end instantiates it
//! with its Burn version's `TensorData` and reads them into [`HostTensor`]s.

use super::canonical::{check_shape, Canonical};
use super::{CellWeights, HostTensor, Imported, InteropError};
use crate::gates;
use crate::layout::{param_name, ParamKind};
use crate::spec::{RnnMode, RnnSpec};

/// The ONNX operator of a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnnxOp {
    /// `LSTM`.
    Lstm,
    /// `GRU`.
    Gru,
    /// `RNN`.
    Rnn,
}

impl OnnxOp {
    fn gates(self) -> &'static [char] {
        gates::onnx(match self {
            OnnxOp::Lstm => RnnMode::Lstm,
            OnnxOp::Gru => RnnMode::Gru,
            OnnxOp::Rnn => RnnMode::RnnTanh,
        })
    }

    fn default_activations(self) -> &'static [&'static str] {
        match self {
            OnnxOp::Lstm => &["Sigmoid", "Tanh", "Tanh"],
            OnnxOp::Gru => &["Sigmoid", "Tanh"],
            OnnxOp::Rnn => &["Tanh"],
        }
    }
}

/// One ONNX `LSTM`, `GRU` or `RNN` node: its weight inputs (held as `T`) and the
/// attributes that decide what it computes. [`OnnxRnnNode::new`] sets every attribute to
/// ONNX's default.
#[derive(Clone, Debug)]
pub struct OnnxRnnNode<T> {
    /// The operator.
    pub op: OnnxOp,
    /// Input `W`, `[num_directions, G*H, input_size]`.
    pub w: T,
    /// Input `R`, `[num_directions, G*H, H]`.
    pub r: T,
    /// Input `B`, `[num_directions, 2*G*H]`; `None` (ONNX: zeros) gives a module without bias
    /// when no node of the stack has one.
    pub b: Option<T>,
    /// Input `P` (LSTM peepholes), `[num_directions, 3*H]`; only all zeros is accepted.
    pub p: Option<T>,
    /// Attribute `direction`: `"forward"` (default), `"bidirectional"` or `"reverse"`.
    pub direction: String,
    /// Attribute `hidden_size`, checked against `R` when given.
    pub hidden_size: Option<usize>,
    /// Attribute `activations` (empty: the operator's default). `RNN` with `["Relu"]`
    /// (per direction) is RNN-relu.
    pub activations: Vec<String>,
    /// Attribute `clip` (refused when set).
    pub clip: Option<f32>,
    /// Attribute `input_forget` of `LSTM` (refused when 1).
    pub input_forget: i64,
    /// Attribute `linear_before_reset` of `GRU`: 1 required (ONNX's default is 0; PyTorch's
    /// exporter writes 1).
    pub linear_before_reset: i64,
    /// Attribute `layout`: 0 (default) for `[seq_length, batch_size, _]`, 1 for
    /// batch-first.
    pub layout: i64,
}

impl<T> OnnxRnnNode<T> {
    /// A node of operator `op` with weights `w` and `r` and ONNX's default attributes
    /// (`linear_before_reset = 0`: set it to 1 for a GRU, as PyTorch's exporter does).
    pub fn new(op: OnnxOp, w: T, r: T) -> Self {
        Self {
            op,
            w,
            r,
            b: None,
            p: None,
            direction: "forward".into(),
            hidden_size: None,
            activations: Vec::new(),
            clip: None,
            input_forget: 0,
            linear_before_reset: 0,
            layout: 0,
        }
    }

    /// The same node with its tensors converted by `f`.
    pub fn map<U>(self, mut f: impl FnMut(T) -> U) -> OnnxRnnNode<U> {
        OnnxRnnNode {
            op: self.op,
            w: f(self.w),
            r: f(self.r),
            b: self.b.map(&mut f),
            p: self.p.map(&mut f),
            direction: self.direction,
            hidden_size: self.hidden_size,
            activations: self.activations,
            clip: self.clip,
            input_forget: self.input_forget,
            linear_before_reset: self.linear_before_reset,
            layout: self.layout,
        }
    }

    /// The cell the node computes, after refusing what the fused op cannot express.
    fn mode(&self, path: &str, directions: usize) -> Result<RnnMode, InteropError> {
        let opt = |name: &str| format!("{path}{name}");
        if let Some(clip) = self.clip {
            return Err(InteropError::unsupported(
                opt("clip"),
                clip,
                "cuDNN's cells do not clip",
            ));
        }
        if self.op == OnnxOp::Lstm && self.input_forget != 0 {
            return Err(InteropError::unsupported(
                opt("input_forget"),
                self.input_forget,
                "cuDNN's LSTM has an independent forget gate",
            ));
        }
        if self.op == OnnxOp::Gru && self.linear_before_reset != 1 {
            return Err(InteropError::unsupported(
                opt("linear_before_reset"),
                self.linear_before_reset,
                "cuDNN's GRU applies the reset gate after the recurrent matrix \
                 (linear_before_reset = 1) and has no other mode",
            ));
        }
        let acts: Vec<String> = self.activations.iter().map(|a| a.to_lowercase()).collect();
        let default: Vec<String> = self
            .op
            .default_activations()
            .iter()
            .map(|a| a.to_lowercase())
            .collect();
        let repeated = |one: &[String]| {
            acts.is_empty()
                || (acts.len() == one.len() * directions
                    && acts.chunks(one.len()).all(|c| c == one))
        };
        let relu = vec!["relu".to_string()];
        match self.op {
            OnnxOp::Lstm if repeated(&default) => Ok(RnnMode::Lstm),
            OnnxOp::Gru if repeated(&default) => Ok(RnnMode::Gru),
            OnnxOp::Rnn if repeated(&default) => Ok(RnnMode::RnnTanh),
            OnnxOp::Rnn if !acts.is_empty() && repeated(&relu) => Ok(RnnMode::RnnRelu),
            _ => Err(InteropError::unsupported(
                opt("activations"),
                &self.activations,
                format!(
                    "the fused {:?} cells use {:?} per direction{}",
                    self.op,
                    self.op.default_activations(),
                    if self.op == OnnxOp::Rnn {
                        " or [\"Relu\"]"
                    } else {
                        ""
                    }
                ),
            )),
        }
    }
}

fn directions<T>(n: &OnnxRnnNode<T>, k: usize) -> Result<usize, InteropError> {
    match n.direction.as_str() {
        "forward" => Ok(1),
        "bidirectional" => Ok(2),
        "reverse" => Err(InteropError::unsupported(
            format!("nodes[{k}].direction"),
            "reverse",
            "the fused op runs a reverse direction only as the second half of a \
             bidirectional layer",
        )),
        other => Err(InteropError::unsupported(
            format!("nodes[{k}].direction"),
            other,
            "ONNX allows forward, reverse and bidirectional",
        )),
    }
}

/// The canonical weights computing the chain of ONNX nodes `nodes` (layer 0 first), each
/// tensor read by `read` (given the input's name, `nodes[k].W`, for its errors).
///
/// # Errors
///
/// [`InteropError::Unsupported`] naming the attribute (`nodes[k].clip`, ...) for what the
/// fused op cannot express, or a chain whose nodes differ in operator, hidden size,
/// directions or layout; [`InteropError::Shape`] naming the input (`nodes[k].W`) and both
/// shapes for a tensor that does not fit; [`InteropError::NotFinite`] for a NaN or an
/// infinity; [`InteropError::Empty`] when `nodes` is empty; what `read` returns.
pub fn import<T, E: From<InteropError>>(
    nodes: &[OnnxRnnNode<T>],
    read: impl Fn(&str, &T) -> Result<HostTensor, E>,
) -> Result<Imported, E> {
    let first = nodes
        .first()
        .ok_or_else(|| InteropError::empty("nodes", "ONNX node"))?;
    let nd = directions(first, 0)?;
    let mode = first.mode("nodes[0].", nd)?;
    let w0 = read("nodes[0].W", &first.w)?.shape;
    let r0 = read("nodes[0].R", &first.r)?.shape;
    check_shape("nodes[0].R", &[nd, 0, 0], &r0)?;
    let hidden = r0[2];
    let gh = mode.num_gates() * hidden;
    check_shape("nodes[0].R", &[nd, gh, hidden], &r0)?;
    check_shape("nodes[0].W", &[nd, gh, 0], &w0)?;
    let bias = nodes.iter().any(|n| n.b.is_some());
    let spec = RnnSpec {
        num_layers: nodes.len(),
        bidirectional: nd == 2,
        bias,
        ..RnnSpec::new(mode, w0[2], hidden)
    };
    let mut canonical = Canonical::new(
        mode,
        Box::new(|l, d, k| format!("nodes[{l}] {}", param_name(k, l, d))),
    );
    let from = first.op.gates();
    let to = gates::canonical(mode);
    for (k, node) in nodes.iter().enumerate() {
        let key = |name: &str| format!("nodes[{k}].{name}");
        let opt = |name: &str, value: &dyn core::fmt::Debug, reason: &str| {
            Err(InteropError::unsupported(key(name), value, reason).into())
        };
        if node.op != first.op {
            return opt("op", &node.op, "a fused stack runs one cell");
        }
        if directions(node, k)? != nd || node.mode(&key(""), nd)? != mode {
            return opt(
                "direction",
                &node.direction,
                &format!(
                    "nodes[0] has direction {:?} and the same cell everywhere",
                    first.direction
                ),
            );
        }
        if node.layout != first.layout || !(0..=1).contains(&node.layout) {
            return opt(
                "layout",
                &node.layout,
                "ONNX layouts are 0 and 1, and a fused stack has one layout",
            );
        }
        if let Some(h) = node.hidden_size {
            if h != hidden {
                return opt(
                    "hidden_size",
                    &h,
                    &format!("R of nodes[0] has hidden size {hidden}: a fused stack has one"),
                );
            }
        }
        let d_in = if k == 0 { w0[2] } else { nd * hidden };
        let w = read(&key("W"), &node.w)?;
        check_shape(&key("W"), &[nd, gh, d_in], &w.shape)?;
        let r = read(&key("R"), &node.r)?;
        check_shape(&key("R"), &[nd, gh, hidden], &r.shape)?;
        if let Some(p) = &node.p {
            let p = read(&key("P"), p)?;
            check_shape(&key("P"), &[nd, 3 * hidden], &p.shape)?;
            if p.values.iter().any(|&v| v != 0.0) {
                return opt("P", &"nonzero peepholes", "cuDNN's LSTM has no peepholes");
            }
        }
        let b = match &node.b {
            Some(b) => {
                let b = read(&key("B"), b)?;
                check_shape(&key("B"), &[nd, 2 * gh], &b.shape)?;
                Some(b)
            }
            None if bias => Some(HostTensor::zeros(vec![nd, 2 * gh])),
            None => None,
        };
        for d in 0..nd {
            let slot = |kind| (k, d, kind);
            let name = |kind| format!("nodes[{k}] {}", param_name(kind, k, d));
            let mat = |t: &HostTensor| t.index(d).permute_gates(from, to);
            canonical.insert(
                slot(ParamKind::WeightIh),
                name(ParamKind::WeightIh),
                mat(&w),
            );
            canonical.insert(
                slot(ParamKind::WeightHh),
                name(ParamKind::WeightHh),
                mat(&r),
            );
            if let Some(b) = &b {
                let b = b.index(d);
                let wb = b.rows(0, gh).permute_gates(from, to);
                let rb = b.rows(gh, gh).permute_gates(from, to);
                canonical.insert(slot(ParamKind::BiasIh), name(ParamKind::BiasIh), wb);
                canonical.insert(slot(ParamKind::BiasHh), name(ParamKind::BiasHh), rb);
            }
        }
    }
    Ok(canonical.build(spec, first.layout == 1)?)
}

/// The chain of ONNX nodes computing the module of `spec` with flat weights `flat` (in the
/// layout's order), one per layer, with attributes set (`direction`, `hidden_size`,
/// `activations` for RNN-relu, `linear_before_reset = 1` for GRU, `layout` from
/// `batch_first`). `B` is `None` for a module without bias.
///
/// # Errors
///
/// [`InteropError::Unsupported`] for a projection (`proj_size`): ONNX's `LSTM` has none.
pub fn export(
    spec: &RnnSpec,
    batch_first: bool,
    flat: &[f64],
) -> Result<Vec<OnnxRnnNode<HostTensor>>, InteropError> {
    if let Some(p) = spec.proj_size {
        return Err(InteropError::unsupported(
            "proj_size",
            Some(p),
            "ONNX's LSTM has no projection",
        ));
    }
    let op = match spec.mode {
        RnnMode::Lstm => OnnxOp::Lstm,
        RnnMode::Gru => OnnxOp::Gru,
        RnnMode::RnnTanh | RnnMode::RnnRelu => OnnxOp::Rnn,
    };
    let from = gates::canonical(spec.mode);
    let to = op.gates();
    let nd = spec.num_directions();
    let nodes = (0..spec.num_layers)
        .map(|layer| {
            let (mut w, mut r, mut b) = (vec![], vec![], vec![]);
            for d in 0..nd {
                let c: CellWeights = super::cell_weights(spec, flat, layer, d);
                w.push(c.weight_ih.permute_gates(from, to));
                r.push(c.weight_hh.permute_gates(from, to));
                if let (Some(bi), Some(bh)) = (c.bias_ih, c.bias_hh) {
                    let both = [bi.permute_gates(from, to), bh.permute_gates(from, to)];
                    b.push(HostTensor::cat(&both));
                }
            }
            let mut node = OnnxRnnNode::new(op, HostTensor::stack(&w), HostTensor::stack(&r));
            node.b = (!b.is_empty()).then(|| HostTensor::stack(&b));
            node.direction = if nd == 2 { "bidirectional" } else { "forward" }.into();
            node.hidden_size = Some(spec.d_hidden);
            if op == OnnxOp::Gru {
                node.linear_before_reset = 1;
            }
            if spec.mode == RnnMode::RnnRelu {
                node.activations = vec!["Relu".into(); nd];
            }
            node.layout = i64::from(batch_first);
            node
        })
        .collect();
    Ok(nodes)
}
