//! ONNX `LSTM`, `GRU` and `RNN` nodes: their `W`, `R`, `B` inputs to and from a
//! [`FusedRnn`].
//!
//! An ONNX node is one layer, in one or both directions. Per node, with `D` directions and
//! `G` gates:
//!
//! | input | shape | this crate |
//! |---|---|---|
//! | `W` | `[D, G*H, input_size]` | `weight_ih` of each direction |
//! | `R` | `[D, G*H, H]` | `weight_hh` |
//! | `B` | `[D, 2*G*H]` = `[Wb, Rb]` (optional: zeros) | `bias_ih`, `bias_hh` |
//!
//! Matrices have PyTorch's orientation; only the gate order differs: ONNX LSTM `i, o, f, c`
//! (this crate `i, f, g, o`), GRU `z, r, h` (this crate `r, z, n`). A model of several
//! layers is a chain of nodes (what `torch.onnx.export` writes for a multi-layer
//! `nn.LSTM`): pass them in order. ONNX's initial and final states, `[D, batch_size, H]`
//! per node, stack into this crate's `[L*D, batch_size, H]` with
//! [`RnnState::from_layers`](crate::RnnState::from_layers).
//!
//! Reading an ONNX file is left to an ONNX crate: these functions take the initializers'
//! values as [`TensorData`] and the node's attributes as fields of [`OnnxRnnNode`].
//!
//! ```
//! use burn::backend::NdArray;
//! use burn_fused_rnn::interop::onnx;
//! use burn_fused_rnn::{FusedRnn, FusedRnnConfig, RnnMode};
//!
//! # fn main() -> Result<(), burn_fused_rnn::interop::InteropError> {
//! let device = Default::default();
//! let gru = FusedRnnConfig::new(RnnMode::Gru, 3, 4)
//!     .with_num_layers(2)
//!     .with_bidirectional(true)
//!     .init::<NdArray>(&device);
//! let nodes = onnx::export(&gru)?; // one GRU node per layer
//! assert_eq!(nodes[1].w.shape.to_vec(), [2, 12, 8]); // [D, 3H, D*H]
//! assert_eq!(nodes[0].linear_before_reset, 1);
//! let back: FusedRnn<NdArray> = onnx::import(&nodes, &device)?;
//! assert!(back.flat_weights().all_close(gru.flat_weights(), None, Some(0.0)));
//! # Ok(())
//! # }
//! ```
//!
//! What is refused, and why: Note [What conversions refuse] in [`crate::interop`].

use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};

use super::canonical::{cell_weights, check_shape, float_tensor, permute_gates, Canonical};
use super::InteropError;
use crate::config::FusedRnnConfig;
use crate::layout::{param_name, ParamKind};
use crate::module::FusedRnn;
use crate::spec::RnnMode;
use burn_fused_rnn_core::gates;

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

pub(crate) use burn_fused_rnn_core::gates::canonical as canonical_gates;

/// One ONNX `LSTM`, `GRU` or `RNN` node: its weight inputs and the attributes that decide
/// what it computes. [`OnnxRnnNode::new`] sets every attribute to ONNX's default.
#[derive(Clone, Debug)]
pub struct OnnxRnnNode {
    /// The operator.
    pub op: OnnxOp,
    /// Input `W`, `[num_directions, G*H, input_size]`.
    pub w: TensorData,
    /// Input `R`, `[num_directions, G*H, H]`.
    pub r: TensorData,
    /// Input `B`, `[num_directions, 2*G*H]`; `None` (ONNX: zeros) gives a module without bias
    /// when no node of the stack has one.
    pub b: Option<TensorData>,
    /// Input `P` (LSTM peepholes), `[num_directions, 3*H]`; only all zeros is accepted.
    pub p: Option<TensorData>,
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

impl OnnxRnnNode {
    /// A node of operator `op` with weights `w` and `r` and ONNX's default attributes
    /// (`linear_before_reset = 0`: set it to 1 for a GRU, as PyTorch's exporter does).
    pub fn new(op: OnnxOp, w: TensorData, r: TensorData) -> Self {
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
        let mode = match self.op {
            OnnxOp::Lstm if repeated(&default) => RnnMode::Lstm,
            OnnxOp::Gru if repeated(&default) => RnnMode::Gru,
            OnnxOp::Rnn if repeated(&default) => RnnMode::RnnTanh,
            OnnxOp::Rnn if !acts.is_empty() && repeated(&relu) => RnnMode::RnnRelu,
            _ => {
                return Err(InteropError::unsupported(
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
                ))
            }
        };
        Ok(mode)
    }
}

/// Builds the fused module computing the chain of ONNX nodes `nodes` (layer 0 first).
///
/// # Errors
///
/// [`InteropError::Unsupported`] naming the attribute (`nodes[k].clip`, ...) for what the
/// fused op cannot express, or a chain whose nodes differ in operator, hidden size,
/// directions or layout; [`InteropError::Shape`] naming the input (`nodes[k].W`) and both
/// shapes for a tensor that does not fit; [`InteropError::Empty`] when `nodes` is empty.
pub fn import<B: Backend>(
    nodes: &[OnnxRnnNode],
    device: &B::Device,
) -> Result<FusedRnn<B>, InteropError> {
    if nodes.is_empty() {
        return Err(InteropError::empty("nodes", "ONNX node"));
    }
    let first = &nodes[0];
    let directions = |n: &OnnxRnnNode, k: usize| -> Result<usize, InteropError> {
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
    };
    let nd = directions(first, 0)?;
    let mode = first.mode("nodes[0].", nd)?;
    let w0 = first.w.shape.to_vec();
    let r0 = first.r.shape.to_vec();
    check_shape("nodes[0].R", &[nd, 0, 0], &r0)?;
    let hidden = r0[2];
    let gh = mode.num_gates() * hidden;
    check_shape("nodes[0].R", &[nd, gh, hidden], &r0)?;
    check_shape("nodes[0].W", &[nd, gh, 0], &w0)?;
    let bias = nodes.iter().any(|n| n.b.is_some());
    let config = FusedRnnConfig::new(mode, w0[2], hidden)
        .with_num_layers(nodes.len())
        .with_bidirectional(nd == 2)
        .with_bias(bias)
        .with_batch_first(first.layout == 1);
    let mut canonical = Canonical::new(
        mode,
        Box::new(|l, d, k| format!("nodes[{l}] {}", param_name(k, l, d))),
    );
    let from = first.op.gates();
    let to = canonical_gates(mode);
    for (k, node) in nodes.iter().enumerate() {
        let key = |name: &str| format!("nodes[{k}].{name}");
        let opt = |name: &str, value: &dyn core::fmt::Debug, reason: &str| {
            Err::<FusedRnn<B>, _>(InteropError::unsupported(key(name), value, reason))
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
        check_shape(&key("W"), &[nd, gh, d_in], &node.w.shape)?;
        check_shape(&key("R"), &[nd, gh, hidden], &node.r.shape)?;
        if let Some(p) = &node.p {
            check_shape(&key("P"), &[nd, 3 * hidden], &p.shape)?;
            let nonzero = p.clone().convert::<f64>().iter::<f64>().any(|v| v != 0.0);
            if nonzero {
                return opt("P", &"nonzero peepholes", "cuDNN's LSTM has no peepholes");
            }
        }
        let w: Tensor<B, 3> = float_tensor(&key("W"), node.w.clone(), device)?;
        let r: Tensor<B, 3> = float_tensor(&key("R"), node.r.clone(), device)?;
        let b: Option<Tensor<B, 2>> = match &node.b {
            Some(b) => {
                check_shape(&key("B"), &[nd, 2 * gh], &b.shape)?;
                Some(float_tensor(&key("B"), b.clone(), device)?)
            }
            None if bias => Some(Tensor::zeros([nd, 2 * gh], (device, w.dtype()))),
            None => None,
        };
        for d in 0..nd {
            let slot = |kind| (k, d, kind);
            let name = |kind| format!("nodes[{k}] {}", param_name(kind, k, d));
            let mat = |t: &Tensor<B, 3>| {
                let m: Tensor<B, 2> = t.clone().narrow(0, d, 1).squeeze_dim(0);
                permute_gates(m, 0, from, to)
            };
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
                let b: Tensor<B, 1> = b.clone().narrow(0, d, 1).squeeze_dim(0);
                let wb = permute_gates(b.clone().narrow(0, 0, gh), 0, from, to);
                let rb = permute_gates(b.narrow(0, gh, gh), 0, from, to);
                canonical.insert(slot(ParamKind::BiasIh), name(ParamKind::BiasIh), wb);
                canonical.insert(slot(ParamKind::BiasHh), name(ParamKind::BiasHh), rb);
            }
        }
    }
    canonical.build(&config, device)
}

/// The chain of ONNX nodes computing `rnn`, one per layer, with attributes set
/// (`direction`, `hidden_size`, `activations` for RNN-relu, `linear_before_reset = 1` for
/// GRU, `layout` from the module's `batch_first`). `B` is `None` for a module without bias.
///
/// # Errors
///
/// [`InteropError::Unsupported`] for a projection (`proj_size`): ONNX's `LSTM` has none.
pub fn export<B: Backend>(rnn: &FusedRnn<B>) -> Result<Vec<OnnxRnnNode>, InteropError> {
    let spec = *rnn.spec();
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
    let from = canonical_gates(spec.mode);
    let to = op.gates();
    let nd = spec.num_directions();
    let nodes = (0..spec.num_layers)
        .map(|layer| {
            let (mut w, mut r, mut b) = (vec![], vec![], vec![]);
            for d in 0..nd {
                let c = cell_weights(rnn, layer, d);
                w.push(permute_gates(c.weight_ih, 0, from, to).unsqueeze_dim(0));
                r.push(permute_gates(c.weight_hh, 0, from, to).unsqueeze_dim(0));
                if let (Some(bi), Some(bh)) = (c.bias_ih, c.bias_hh) {
                    let bi = permute_gates(bi, 0, from, to);
                    let bh = permute_gates(bh, 0, from, to);
                    b.push(Tensor::cat(vec![bi, bh], 0).unsqueeze_dim::<2>(0));
                }
            }
            let w: Tensor<B, 3> = Tensor::cat(w, 0);
            let r: Tensor<B, 3> = Tensor::cat(r, 0);
            let mut node = OnnxRnnNode::new(op, w.into_data(), r.into_data());
            node.b = (!b.is_empty()).then(|| Tensor::cat(b, 0).into_data());
            node.direction = if nd == 2 { "bidirectional" } else { "forward" }.into();
            node.hidden_size = Some(spec.d_hidden);
            if op == OnnxOp::Gru {
                node.linear_before_reset = 1;
            }
            if spec.mode == RnnMode::RnnRelu {
                node.activations = vec!["Relu".into(); nd];
            }
            node.layout = i64::from(rnn.batch_first());
            node
        })
        .collect();
    Ok(nodes)
}
