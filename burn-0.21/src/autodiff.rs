//! The fused op under `Autodiff`: ONE backward node per call.
//!
//! # Note [One node, many outputs]
//!
//! Burn 0.21's `Backward<B, N>` has N parents and one output, and the fused op has three
//! outputs (`y`, `h_n`, `c_n`) whose gradients its backward needs together. The tracked
//! forward builds:
//!
//! - one **fused node** with the four parents (x, h0, c0, weights); its output is a
//!   one-element token that no user sees;
//! - one **output node** per output, whose only parent is the fused node and whose output
//!   is the kernel's `y`, `h_n` or `c_n` as it is (no copy).
//!
//! Every node's depth is one more than its deepest parent's and the tape runs the deepest
//! first, so the output nodes' backward steps all run before the fused node's. Each puts
//! its gradient into a slot the call's nodes share (`Slots`) and hands the fused node a
//! one-element zero, so the fused node always has a gradient to consume. The fused node's
//! backward then takes `[dy, dh_n, dc_n]` from the slots (an output that the loss does not
//! reach is not on the tape, and its slot stays empty: the kernel reads it as zeros) and
//! calls the inner backend's fused backward once, which returns every input gradient in
//! one go.
//!
//! An earlier version packed `[y | h_n | c_n]` into one tensor and handed out slices of
//! it: one copy of `y` forward, and in the backward a zero tensor of the packed size per
//! used slice, written and summed, about a tenth of an LSTM training step on NdArray.
//!
//! The untracked (inference) path calls the inference forward and keeps no reserve.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::autodiff::NodeId;
use burn::backend::Autodiff;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::ops::FloatTensor;
use burn::tensor::{Tensor, TensorMetadata};

use crate::backend::FusedRnnBackend;
use crate::descriptor::{GradsWanted, RnnDescriptor};
use crate::op_types::{float, prim};
use crate::op_types::{RnnInputs, RnnOutput, RnnOutputGrads, RnnReserve};

static BACKWARD_CALLS: AtomicUsize = AtomicUsize::new(0);
static TRACKED_FORWARDS: AtomicUsize = AtomicUsize::new(0);

/// How many times the fused backward node has run in this process (diagnostics: the
/// tests use it to show that one `backward()` runs the fused backward once per call).
pub fn fused_backward_calls() -> usize {
    BACKWARD_CALLS.load(Ordering::Relaxed)
}

/// How many tracked (training) forwards, the ones that keep a reserve, have run in this
/// process (diagnostics: an untracked forward keeps no reserve and does not count).
pub fn fused_tracked_forward_calls() -> usize {
    TRACKED_FORWARDS.load(Ordering::Relaxed)
}

#[derive(Debug)]
struct FusedRnnBackward;

/// The backward step of one output (`part` 0: `y`, 1: `h_n`, 2: `c_n`) of a fused call.
#[derive(Debug)]
struct OutputBackward {
    part: usize,
}

/// Gradients of `[y, h_n, c_n]` of one fused call, put there by the output nodes' backward
/// steps and taken by the fused node's (Note [One node, many outputs]).
type Slots<B> = Arc<Mutex<[Option<FloatTensor<B>>; 3]>>;

impl<B: Backend> Backward<B, 1> for OutputBackward {
    type State = Slots<B>;

    fn backward(
        self,
        ops: Ops<Self::State, 1>,
        grads: &mut Gradients,
        _checkpointer: &mut Checkpointer,
    ) {
        let grad = grads.consume::<B>(&ops.node);
        let token = B::float_zeros([1].into(), &B::float_device(&grad), grad.dtype().into());
        ops.state.lock().expect("gradient slots")[self.part] = Some(grad);
        if let [Some(fused)] = ops.parents {
            grads.register::<B>(fused.id, token);
        }
    }
}

#[derive(Debug, Clone)]
struct State<B: Backend> {
    desc: RnnDescriptor,
    /// Checkpointed parents: x, h0, c0 (LSTM), weights.
    x: NodeId,
    h0: NodeId,
    c0: Option<NodeId>,
    weights: NodeId,
    output: RnnOutput<B>,
    reserve: RnnReserve<B>,
    slots: Slots<B>,
}

impl<B: FusedRnnBackend> Backward<B, 4> for FusedRnnBackward {
    type State = State<B>;

    fn backward(
        self,
        ops: Ops<Self::State, 4>,
        grads: &mut Gradients,
        checkpointer: &mut Checkpointer,
    ) {
        BACKWARD_CALLS.fetch_add(1, Ordering::Relaxed);
        let [node_x, node_h0, node_c0, node_w] = ops.parents;
        // The token's gradient: only a sign that an output was reached.
        drop(grads.consume::<B>(&ops.node));
        let s = ops.state;
        let [dy, dh_n, dc_n] = std::mem::take(&mut *s.slots.lock().expect("gradient slots"));
        let inputs = RnnInputs {
            x: checkpointer.retrieve_node_output(s.x),
            h0: Some(checkpointer.retrieve_node_output(s.h0)),
            c0: s.c0.map(|id| checkpointer.retrieve_node_output(id)),
            weights: checkpointer.retrieve_node_output(s.weights),
        };
        // Only the tracked parents' gradients are wanted (Note [Gradients not wanted] in
        // the core crate's kernel).
        let wanted = GradsWanted {
            x: node_x.is_some(),
            weights: node_w.is_some(),
        };
        let g = B::fused_rnn_backward(
            &s.desc,
            inputs,
            s.output,
            s.reserve,
            RnnOutputGrads { dy, dh_n, dc_n },
            wanted,
        );
        // A wanted gradient the backend left out would silently go missing: refuse it.
        let missing = |what: &str| {
            format!("expected the backend's backward to return the gradient of {what}, which was wanted, got None")
        };
        if let Some(node) = node_x {
            grads.register::<B>(node.id, g.dx.unwrap_or_else(|| panic!("{}", missing("x"))));
        }
        if let Some(node) = node_h0 {
            grads.register::<B>(node.id, g.dh0);
        }
        if let (Some(node), Some(dc0)) = (node_c0, g.dc0) {
            grads.register::<B>(node.id, dc0);
        }
        if let Some(node) = node_w {
            let dweights = g
                .dweights
                .unwrap_or_else(|| panic!("{}", missing("the weights")));
            grads.register::<B>(node.id, dweights);
        }
    }
}

/// One link of the tracked concatenation of the flat weights (Note [Concatenation as a
/// chain]): its parents are the previous link (none for the first) and part `part`.
#[derive(Debug)]
struct ConcatLink {
    part: usize,
    /// Whether this link's output is the flat vector (the other links' are tokens).
    last: bool,
}

/// What the links of one concatenation share: the parts' shapes, and the parts' gradients
/// once the last link has cut the flat gradient.
#[derive(Debug)]
struct ConcatState<B: Backend> {
    shapes: Vec<Vec<usize>>,
    grads: Mutex<Vec<Option<FloatTensor<B>>>>,
}

impl ConcatLink {
    /// The backward step of a link: the last one cuts the flat gradient into the parts'
    /// gradients ([`FusedRnnBackend::fused_rnn_split`]); every link hands its part its
    /// gradient and the previous link a one-element zero.
    fn step<B: FusedRnnBackend>(
        &self,
        state: &ConcatState<B>,
        grad: FloatTensor<B>,
        previous: Option<NodeId>,
        part: Option<NodeId>,
        grads: &mut Gradients,
    ) {
        let (device, dtype) = (B::float_device(&grad), grad.dtype());
        let mut slots = state.grads.lock().expect("gradient slots");
        if self.last {
            *slots = B::fused_rnn_split(grad, &state.shapes)
                .into_iter()
                .map(Some)
                .collect();
        }
        if let Some(part) = part {
            let g = slots[self.part]
                .take()
                .expect("the last link cut every part's gradient");
            grads.register::<B>(part, g);
        }
        if let Some(previous) = previous {
            grads.register::<B>(previous, B::float_zeros([1].into(), &device, dtype.into()));
        }
    }
}

/// The first link has one parent, the part (`N = 1`); every other link two, the previous
/// link and the part (`N = 2`).
impl<B: FusedRnnBackend, const N: usize> Backward<B, N> for ConcatLink {
    type State = Arc<ConcatState<B>>;

    fn backward(
        self,
        ops: Ops<Self::State, N>,
        grads: &mut Gradients,
        _checkpointer: &mut Checkpointer,
    ) {
        let grad = grads.consume::<B>(&ops.node);
        let ids = ops.parents.map(|p| p.map(|p| p.id));
        let previous = if N == 2 { ids[0] } else { None };
        self.step::<B>(&ops.state, grad, previous, ids[N - 1], grads);
    }
}

/// The flat weights from the parameters under `Autodiff`.
///
/// # Note [Concatenation as a chain]
///
/// Burn 0.21's `Backward<B, N>` has a fixed number of parents, and a network has 2 to 5
/// canonical tensors per layer and direction. So the tracked concatenation is a chain of
/// links, one per part: link `i`'s parents are link `i - 1` and part `i`, its output a
/// one-element token, except the last link's, which is the flat vector that the inner
/// backend built in one go ([`FusedRnnBackend::fused_rnn_concat`]). The last link is the
/// deepest, so its backward step runs first: it cuts the flat gradient once into the
/// parts' shapes ([`FusedRnnBackend::fused_rnn_split`]) and keeps them where every link
/// finds its own (`ConcatState`); each link then hands its part its gradient and the
/// previous link a token gradient, down to the first. A part that needs no gradient is no
/// parent; a link all of whose parents need none is untracked, like any op.
///
/// The parameters are the links' parents as they are (no reshape node between), so no
/// node of the chain is ever the only, unreferenced node of a graph while it is built
/// (Note [Parts outlive the concatenation] in `crate::backend`): each link's token is held
/// until the next link has registered it as a parent.
fn concat_tracked<B: FusedRnnBackend, C: CheckpointStrategy>(
    parts: Vec<FloatTensor<Autodiff<B, C>>>,
) -> FloatTensor<Autodiff<B, C>> {
    assert!(
        !parts.is_empty(),
        "expected at least one canonical tensor to concatenate, got none"
    );
    let shapes: Vec<Vec<usize>> = parts.iter().map(|p| p.shape().to_vec()).collect();
    let flat = B::fused_rnn_concat(parts.iter().map(|p| p.primitive.clone()).collect());
    let (device, dtype) = (B::float_device(&flat), flat.dtype());
    let state = Arc::new(ConcatState {
        shapes,
        grads: Mutex::new(Vec::new()),
    });
    let count = parts.len();
    let mut flat = Some(flat);
    let mut previous: Option<FloatTensor<Autodiff<B, C>>> = None;
    for (i, part) in parts.into_iter().enumerate() {
        let last = i + 1 == count;
        let output = match last {
            true => flat.take().expect("one last link"),
            false => B::float_zeros([1].into(), &device, dtype.into()),
        };
        let link = ConcatLink { part: i, last };
        let next = match &previous {
            None => match <ConcatLink as Backward<B, 1>>::prepare::<C>(link, [part.node.clone()])
                .compute_bound()
                .stateful()
            {
                OpsKind::Tracked(prep) => prep.finish(state.clone(), output),
                OpsKind::UnTracked(prep) => prep.finish(output),
            },
            Some(previous) => match <ConcatLink as Backward<B, 2>>::prepare::<C>(
                link,
                [previous.node.clone(), part.node.clone()],
            )
            .compute_bound()
            .stateful()
            {
                OpsKind::Tracked(prep) => prep.finish(state.clone(), output),
                OpsKind::UnTracked(prep) => prep.finish(output),
            },
        };
        // The part and the previous token are dropped only now, after `next` has
        // registered them as parents.
        drop(part);
        previous = Some(next);
    }
    previous.expect("at least one part")
}

impl<B: FusedRnnBackend, C: CheckpointStrategy> FusedRnnBackend for Autodiff<B, C> {
    fn fused_rnn_concat(parts: Vec<FloatTensor<Self>>) -> FloatTensor<Self> {
        concat_tracked::<B, C>(parts)
    }

    fn fused_rnn_forward(desc: &RnnDescriptor, inputs: RnnInputs<Self>) -> RnnOutput<Self> {
        let x: Tensor<Self, 3> = float(inputs.x.clone());
        let (device, dtype) = (x.device(), x.dtype());
        // Absent states are zeros, as untracked leaves, so that the node has fixed parents.
        let zeros = |shape: [usize; 3]| prim(Tensor::<Self, 3>::zeros(shape, (&device, dtype)));
        let h0 = inputs.h0.unwrap_or_else(|| zeros(desc.hidden_shape()));
        let c0 = desc
            .spec
            .mode
            .has_cell_state()
            .then(|| inputs.c0.unwrap_or_else(|| zeros(desc.cell_shape())));
        // Without a cell state the third parent is an untracked placeholder.
        let c0_node = match &c0 {
            Some(c0) => c0.node.clone(),
            None => Self::from_inner(h0.primitive.clone()).node,
        };
        let prep = FusedRnnBackward
            .prepare::<C>([
                inputs.x.node.clone(),
                h0.node.clone(),
                c0_node,
                inputs.weights.node.clone(),
            ])
            .compute_bound()
            .stateful();
        match prep {
            OpsKind::Tracked(mut prep) => {
                TRACKED_FORWARDS.fetch_add(1, Ordering::Relaxed);
                let state_x = prep.checkpoint(&inputs.x);
                let state_h0 = prep.checkpoint(&h0);
                let state_c0 = c0.as_ref().map(|c0| prep.checkpoint(c0));
                let state_w = prep.checkpoint(&inputs.weights);
                let inner = RnnInputs {
                    x: inputs.x.primitive,
                    h0: Some(h0.primitive),
                    c0: c0.map(|c| c.primitive),
                    weights: inputs.weights.primitive,
                };
                let (out, reserve) = B::fused_rnn_forward_training(desc, inner);
                let slots: Slots<B> = Arc::default();
                let device = B::float_device(&out.y);
                let token = B::float_zeros([1].into(), &device, out.y.dtype().into());
                let (y, h_n, c_n) = (out.y.clone(), out.h_n.clone(), out.c_n.clone());
                let state = State {
                    desc: desc.clone(),
                    x: state_x,
                    h0: state_h0,
                    c0: state_c0,
                    weights: state_w,
                    output: out,
                    reserve,
                    slots: slots.clone(),
                };
                let token = prep.finish(state, token);
                let hand_out = |part: usize, t: FloatTensor<B>| match (OutputBackward { part })
                    .prepare::<C>([token.node.clone()])
                    .compute_bound()
                    .stateful()
                {
                    OpsKind::Tracked(prep) => prep.finish(slots.clone(), t),
                    OpsKind::UnTracked(prep) => prep.finish(t),
                };
                RnnOutput {
                    y: hand_out(0, y),
                    h_n: hand_out(1, h_n),
                    c_n: c_n.map(|c| hand_out(2, c)),
                }
            }
            OpsKind::UnTracked(_) => {
                let inner = RnnInputs {
                    x: inputs.x.primitive,
                    h0: Some(h0.primitive),
                    c0: c0.map(|c| c.primitive),
                    weights: inputs.weights.primitive,
                };
                let out = B::fused_rnn_forward(desc, inner);
                RnnOutput {
                    y: Self::from_inner(out.y),
                    h_n: Self::from_inner(out.h_n),
                    c_n: out.c_n.map(Self::from_inner),
                }
            }
        }
    }
}
