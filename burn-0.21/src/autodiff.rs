//! The fused op under `Autodiff`: ONE backward node per call.
//!
//! # Note [One node, many outputs]
//!
//! Burn 0.21's `Backward<B, N>` has N parents and one output. The tracked forward runs the
//! inner backend's training forward, packs `[y | h_n | c_n]` into one 1-D tensor that is
//! the node's output, and hands out `y`, `h_n`, `c_n` as reshaped slices of it. The slices'
//! backward passes sum into one packed gradient, so the node's backward runs once with
//! `[dy | dh_n | dc_n]` and calls the inner backend's fused backward, which returns every
//! input gradient in one go. The untracked (inference) path calls the inference forward
//! and keeps no reserve.

use std::sync::atomic::{AtomicUsize, Ordering};

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::autodiff::NodeId;
use burn::backend::Autodiff;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::ops::FloatTensor;
use burn::tensor::Tensor;

use crate::backend::FusedRnnBackend;
use crate::descriptor::RnnDescriptor;
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
        let packed: Tensor<B, 1> = float(grads.consume::<B>(&ops.node));
        let s = ops.state;
        let [dy, dh_n, dc_n] = unpack::<B>(&s.desc, packed);
        let inputs = RnnInputs {
            x: checkpointer.retrieve_node_output(s.x),
            h0: Some(checkpointer.retrieve_node_output(s.h0)),
            c0: s.c0.map(|id| checkpointer.retrieve_node_output(id)),
            weights: checkpointer.retrieve_node_output(s.weights),
        };
        let g = B::fused_rnn_backward(
            &s.desc,
            inputs,
            s.output,
            s.reserve,
            RnnOutputGrads {
                dy: dy.map(prim),
                dh_n: dh_n.map(prim),
                dc_n: dc_n.map(prim),
            },
        );
        if let Some(node) = node_x {
            grads.register::<B>(node.id, g.dx);
        }
        if let Some(node) = node_h0 {
            grads.register::<B>(node.id, g.dh0);
        }
        if let (Some(node), Some(dc0)) = (node_c0, g.dc0) {
            grads.register::<B>(node.id, dc0);
        }
        if let Some(node) = node_w {
            grads.register::<B>(node.id, g.dweights);
        }
    }
}

/// Element counts of `[y, h_n, c_n]` in the packed output.
fn packed_sizes(desc: &RnnDescriptor) -> [usize; 3] {
    let n = |s: [usize; 3]| s.iter().product::<usize>();
    let c = if desc.spec.mode.has_cell_state() {
        n(desc.cell_shape())
    } else {
        0
    };
    [n(desc.output_shape()), n(desc.hidden_shape()), c]
}

/// Splits a packed `[y | h_n | c_n]` tensor (of any backend) into its three parts.
fn unpack<B: Backend>(desc: &RnnDescriptor, packed: Tensor<B, 1>) -> [Option<Tensor<B, 3>>; 3] {
    let [ny, nh, nc] = packed_sizes(desc);
    let part = |offset: usize, len: usize, shape: [usize; 3]| {
        (len > 0).then(|| packed.clone().narrow(0, offset, len).reshape(shape))
    };
    [
        part(0, ny, desc.output_shape()),
        part(ny, nh, desc.hidden_shape()),
        part(ny + nh, nc, desc.cell_shape()),
    ]
}

impl<B: FusedRnnBackend, C: CheckpointStrategy> FusedRnnBackend for Autodiff<B, C> {
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
                let flat = |t: &FloatTensor<B>| {
                    let t: Tensor<B, 3> = float(t.clone());
                    let n = t.shape().num_elements();
                    t.reshape([n])
                };
                let mut parts = vec![flat(&out.y), flat(&out.h_n)];
                if let Some(c_n) = &out.c_n {
                    parts.push(flat(c_n));
                }
                let packed = prim(Tensor::<B, 1>::cat(parts, 0));
                let state = State {
                    desc: desc.clone(),
                    x: state_x,
                    h0: state_h0,
                    c0: state_c0,
                    weights: state_w,
                    output: out,
                    reserve,
                };
                let packed: Tensor<Self, 1> = float(prep.finish(state, packed));
                let [y, h_n, c_n] = unpack::<Self>(desc, packed);
                RnnOutput {
                    y: prim(y.expect("output")),
                    h_n: prim(h_n.expect("final hidden state")),
                    c_n: c_n.map(prim),
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
