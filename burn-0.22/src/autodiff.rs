//! The fused op on an autodiff device over a backend with a fused kernel (the native CPU
//! kernel, the CubeCL kernels): ONE backward node per call.
//!
//! # Note [One node, many outputs]
//!
//! Burn's `Backward<B, N>` has N parents and one output, and the fused op has three
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
//! calls the kernel's backward once, which returns every input gradient in one go.
//!
//! An earlier version packed `[y | h_n | c_n]` into one tensor and handed out slices of
//! it: one copy of `y` forward, and in the backward a zero tensor of the packed size per
//! used slice, written and summed, about a tenth of an LSTM training step on NdArray.
//!
//! The untracked path (nothing requires a gradient) runs the inference forward and keeps
//! no reserve.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::autodiff::NodeId;
use burn::backend::tensor::FloatTensor;
use burn::backend::{Autodiff, AutodiffBackend, Shape, TensorMetadata};

use crate::descriptor::RnnDescriptor;
use crate::prims::{FusedKernel, Inputs, Outputs};
use burn_fused_rnn_core::GradsWanted;

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

impl<B: burn::backend::Backend> Backward<B, 1> for OutputBackward {
    type State = Slots<B>;

    fn backward(
        self,
        ops: Ops<Self::State, 1>,
        grads: &mut Gradients,
        _checkpointer: &mut Checkpointer,
    ) {
        let grad = grads.consume::<B>(&ops.node);
        let token = B::float_zeros(Shape::new([1]), &grad.device(), grad.dtype().into());
        ops.state.lock().expect("gradient slots")[self.part] = Some(grad);
        if let [Some(fused)] = ops.parents {
            grads.register::<B>(fused.id, token);
        }
    }
}

#[derive(Debug, Clone)]
struct State<B: FusedKernel> {
    desc: RnnDescriptor,
    /// Checkpointed parents: x, h0, c0 (LSTM), weights.
    x: NodeId,
    h0: NodeId,
    c0: Option<NodeId>,
    weights: NodeId,
    y: FloatTensor<B>,
    reserve: B::Reserve,
    slots: Slots<B>,
}

impl<B: FusedKernel> Backward<B, 4> for FusedRnnBackward {
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
        let inputs: Inputs<B> = Inputs {
            x: checkpointer.retrieve_node_output(s.x),
            h0: checkpointer.retrieve_node_output(s.h0),
            c0: s.c0.map(|id| checkpointer.retrieve_node_output(id)),
            weights: checkpointer.retrieve_node_output(s.weights),
        };
        // Only the tracked parents' gradients are wanted (Note [Gradients not wanted] in
        // the core crate's kernel).
        let wanted = GradsWanted {
            x: node_x.is_some(),
            weights: node_w.is_some(),
        };
        let g = B::fused_backward(&s.desc, &inputs, &s.y, s.reserve, dy, dh_n, dc_n, wanted);
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

/// The fused op on `Autodiff<B, C>` tensors. `inputs.c0` is present for LSTM only.
pub(crate) fn forward<B: FusedKernel, C: CheckpointStrategy>(
    desc: &RnnDescriptor,
    inputs: Inputs<Autodiff<B, C>>,
) -> Outputs<Autodiff<B, C>> {
    // Without a cell state the third parent is an untracked placeholder.
    let c0_node = match &inputs.c0 {
        Some(c0) => c0.node(),
        None => <Autodiff<B, C>>::from_inner(inputs.h0.primitive().clone()).node(),
    };
    let prep = FusedRnnBackward
        .prepare::<C>([
            inputs.x.node(),
            inputs.h0.node(),
            c0_node,
            inputs.weights.node(),
        ])
        .compute_bound()
        .stateful();
    match prep {
        OpsKind::Tracked(mut prep) => {
            TRACKED_FORWARDS.fetch_add(1, Ordering::Relaxed);
            let state_x = prep.checkpoint(&inputs.x);
            let state_h0 = prep.checkpoint(&inputs.h0);
            let state_c0 = inputs.c0.as_ref().map(|c0| prep.checkpoint(c0));
            let state_w = prep.checkpoint(&inputs.weights);
            let inner = inner_inputs(inputs);
            let (out, reserve) = B::fused_forward(desc, &inner, true);
            let slots: Slots<B> = Arc::default();
            let device = out.y.device();
            let token = B::float_zeros(Shape::new([1]), &device, out.y.dtype().into());
            let (y, h_n, c_n) = (out.y.clone(), out.h_n, out.c_n);
            let state = State {
                desc: desc.clone(),
                x: state_x,
                h0: state_h0,
                c0: state_c0,
                weights: state_w,
                y: out.y,
                reserve: reserve.expect("a training forward keeps a reserve"),
                slots: slots.clone(),
            };
            let token = prep.finish(state, token);
            let hand_out = |part: usize, t: FloatTensor<B>| match (OutputBackward { part })
                .prepare::<C>([token.node()])
                .compute_bound()
                .stateful()
            {
                OpsKind::Tracked(prep) => prep.finish(slots.clone(), t),
                OpsKind::UnTracked(prep) => prep.finish(t),
            };
            Outputs {
                y: hand_out(0, y),
                h_n: hand_out(1, h_n),
                c_n: c_n.map(|c| hand_out(2, c)),
            }
        }
        OpsKind::UnTracked(_) => {
            let (out, _) = B::fused_forward(desc, &inner_inputs(inputs), false);
            Outputs {
                y: <Autodiff<B, C>>::from_inner(out.y),
                h_n: <Autodiff<B, C>>::from_inner(out.h_n),
                c_n: out.c_n.map(<Autodiff<B, C>>::from_inner),
            }
        }
    }
}

fn inner_inputs<B: FusedKernel, C: CheckpointStrategy>(
    inputs: Inputs<Autodiff<B, C>>,
) -> Inputs<B> {
    Inputs {
        x: inputs.x.into_primitive(),
        h0: inputs.h0.into_primitive(),
        c0: inputs.c0.map(|c0| c0.into_primitive()),
        weights: inputs.weights.into_primitive(),
    }
}
