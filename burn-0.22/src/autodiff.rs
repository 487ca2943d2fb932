//! The fused op on an autodiff device over a backend with a fused kernel (the native CPU
//! kernel, the CubeCL kernels): ONE backward node per call.
//!
//! # Note [One node, many outputs]
//!
//! Burn's `Backward<B, N>` has N parents and one output. The tracked forward runs the
//! native kernel's training forward, packs `[y | h_n | c_n]` into one 1-D tensor that is
//! the node's output, and hands out `y`, `h_n`, `c_n` as reshaped slices of it. The slices'
//! backward passes sum into one packed gradient, so the node's backward runs once with
//! `[dy | dh_n | dc_n]` and calls the kernel's backward, which returns every input gradient
//! in one go. The untracked path (nothing requires a gradient) runs the inference forward
//! and keeps no reserve.

use std::sync::atomic::{AtomicUsize, Ordering};

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::autodiff::NodeId;
use burn::backend::tensor::FloatTensor;
use burn::backend::{Autodiff, AutodiffBackend, Shape, Slice, TensorMetadata};

use crate::descriptor::RnnDescriptor;
use crate::prims::{FusedKernel, Inputs, Outputs};

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
struct State<B: FusedKernel> {
    desc: RnnDescriptor,
    /// Checkpointed parents: x, h0, c0 (LSTM), weights.
    x: NodeId,
    h0: NodeId,
    c0: Option<NodeId>,
    weights: NodeId,
    y: FloatTensor<B>,
    reserve: B::Reserve,
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
        let packed = grads.consume::<B>(&ops.node);
        let s = ops.state;
        let [dy, dh_n, dc_n] = unpack::<B>(&s.desc, packed);
        let inputs: Inputs<B> = Inputs {
            x: checkpointer.retrieve_node_output(s.x),
            h0: checkpointer.retrieve_node_output(s.h0),
            c0: s.c0.map(|id| checkpointer.retrieve_node_output(id)),
            weights: checkpointer.retrieve_node_output(s.weights),
        };
        let g = B::fused_backward(&s.desc, &inputs, &s.y, s.reserve, dy, dh_n, dc_n);
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
fn unpack<B: burn::backend::Backend>(
    desc: &RnnDescriptor,
    packed: FloatTensor<B>,
) -> [Option<FloatTensor<B>>; 3] {
    let [ny, nh, nc] = packed_sizes(desc);
    let part = |offset: usize, len: usize, shape: [usize; 3]| {
        (len > 0).then(|| {
            B::float_reshape(
                B::float_slice(packed.clone(), &[Slice::from(offset..offset + len)]),
                Shape::from(shape),
            )
        })
    };
    [
        part(0, ny, desc.output_shape()),
        part(ny, nh, desc.hidden_shape()),
        part(ny + nh, nc, desc.cell_shape()),
    ]
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
            let flat = |t: &FloatTensor<B>| {
                let n = t.shape().num_elements();
                B::float_reshape(t.clone(), Shape::new([n]))
            };
            let mut parts = vec![flat(&out.y), flat(&out.h_n)];
            if let Some(c_n) = &out.c_n {
                parts.push(flat(c_n));
            }
            let packed = B::float_cat(parts, 0);
            let state = State {
                desc: desc.clone(),
                x: state_x,
                h0: state_h0,
                c0: state_c0,
                weights: state_w,
                y: out.y,
                reserve: reserve.expect("a training forward keeps a reserve"),
            };
            let packed = prep.finish(state, packed);
            let [y, h_n, c_n] = unpack::<Autodiff<B, C>>(desc, packed);
            Outputs {
                y: y.expect("output"),
                h_n: h_n.expect("final hidden state"),
                c_n,
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
