//! The checks the cuDNN forward and backward share: every tensor against the descriptor
//! and the input's dtype and device (cuDNN trusts every pointer and size), and the
//! weights as cuDNN's weight space.

use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::{BoolElement, FloatElement, IntElement};

use super::network::Prepared;
use super::protocol::{shape, Cuda, CudaTensor};
use super::weights::to_weight_space;
use crate::descriptor::RnnDescriptor;
use crate::op_types::{float, prim};
use crate::op_types::{RnnInputs, RnnOutput, RnnOutputGrads};

/// The shape and dtype checks `fused_rnn` makes, and the device, repeated here because
/// the trait's methods are public and safe and cuDNN trusts every pointer and size: a
/// mismatch panics before any pointer reaches it.
pub(crate) fn check_inputs<F: FloatElement, I: IntElement, BT: BoolElement>(
    desc: &RnnDescriptor,
    p: &Prepared,
    inputs: &RnnInputs<Cuda<F, I, BT>>,
) {
    let (x, h0, c0, w) = (
        &inputs.x,
        inputs.h0.as_ref(),
        inputs.c0.as_ref(),
        &inputs.weights,
    );
    desc.check_inputs(shape(x), h0.map(shape), c0.map(shape), shape(w));
    assert!(
        x.dtype == p.net.dtype,
        "expected input of dtype {:?}, got {:?}",
        p.net.dtype,
        x.dtype
    );
    check_tensor("initial hidden state", h0, x, None);
    check_tensor("initial cell state", c0, x, None);
    check_tensor("weights", Some(w), x, None);
}

/// `t`, when present, has the input's dtype and device, and the `expected` shape.
pub(crate) fn check_tensor(
    name: &str,
    t: Option<&CudaTensor>,
    x: &CudaTensor,
    expected: Option<[usize; 3]>,
) {
    let Some(t) = t else { return };
    if let Some(expected) = expected {
        assert!(
            shape(t) == expected,
            "expected {name} of shape {expected:?}, got {:?}",
            shape(t)
        );
    }
    assert!(
        t.dtype == x.dtype,
        "expected {name} of dtype {:?} (the input's), got {:?}",
        x.dtype,
        t.dtype
    );
    assert!(
        t.device == x.device,
        "expected {name} on device {:?} (the input's), got {:?}",
        x.device,
        t.device
    );
}

/// The weights as cuDNN's weight space, contiguous: no copy for the identity plan and
/// contiguous weights (the module's flat weights are).
pub(crate) fn weight_space<F: FloatElement, I: IntElement, BT: BoolElement>(
    p: &Prepared,
    weights: CudaTensor,
) -> CudaTensor {
    into_contiguous(prim(to_weight_space::<Cuda<F, I, BT>>(
        &p.net.plan,
        float(weights),
    )))
}

/// [`check_inputs`], and the backward's other tensors: the output, the output gradients
/// (`dc_n` only for LSTM), and the reserve (at least the bytes this call shape's training
/// forward fills, on the input's device).
pub(crate) fn check_backward<F: FloatElement, I: IntElement, BT: BoolElement>(
    desc: &RnnDescriptor,
    p: &Prepared,
    inputs: &RnnInputs<Cuda<F, I, BT>>,
    output: &RnnOutput<Cuda<F, I, BT>>,
    reserve: &CudaTensor,
    grads: &RnnOutputGrads<Cuda<F, I, BT>>,
) {
    check_inputs(desc, p, inputs);
    let lstm = desc.spec.mode.has_cell_state();
    let x = &inputs.x;
    check_tensor("output", Some(&output.y), x, Some(desc.output_shape()));
    check_tensor(
        "output gradient",
        grads.dy.as_ref(),
        x,
        Some(desc.output_shape()),
    );
    let (dh_n, dc_n) = (grads.dh_n.as_ref(), grads.dc_n.as_ref());
    check_tensor(
        "final hidden state gradient",
        dh_n,
        x,
        Some(desc.hidden_shape()),
    );
    check_tensor(
        "final cell state gradient",
        dc_n,
        x,
        Some(desc.cell_shape()),
    );
    assert!(
        lstm || dc_n.is_none(),
        "expected no final cell state gradient for mode {:?}, got one",
        desc.spec.mode
    );
    let reserve_len = shape(reserve).iter().product::<usize>();
    assert!(
        reserve_len * 4 >= p.reserve_bytes && reserve.device == x.device,
        "expected the reserve of a cuDNN training forward of this configuration (at least {} F32 elements, on {:?}), got {reserve_len} elements on {:?}",
        p.reserve_bytes.div_ceil(4),
        x.device,
        reserve.device
    );
}
