//! The backward through cuDNN: `cudnnRNNBackwardData_v8`, then
//! `cudnnRNNBackwardWeights_v8` into a zeroed weight gradient (Note [cuDNN call
//! protocol]).

use std::ffi::c_int;

use burn::tensor::backend::Backend;
use burn::tensor::DType;
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::{BoolElement, FloatElement, IntElement};
use cudarc::driver::DevicePtr;

use super::algorithm::{self, Algo};
use super::checks::{check_backward, weight_space};
use super::ffi::{self, Buffers};
use super::network::Prepared;
use super::profile::{Laps, Op, Phase};
use super::protocol::{empty, shape, Cuda, CudaTensor, Gpu, Launch};
use super::weights::from_weight_space;
use crate::descriptor::RnnDescriptor;
use crate::op_types::{float, prim};
use crate::op_types::{RnnGrads, RnnInputs, RnnOutput, RnnOutputGrads, RnnReserve};

/// The algorithm and TF32 setting of a cuDNN reserve (one 1-D F32 buffer, Note [Reserve
/// tag] on `crate::op_types::ReserveTag`); `None` for any other reserve (the reference's:
/// 3-D tensors).
pub(crate) fn cudnn_reserve_tag(
    reserve: &RnnReserve<impl Backend<FloatTensorPrimitive = CudaTensor>>,
) -> Option<(Algo, bool)> {
    match reserve.tensors.as_slice() {
        [t] if shape(t).len() == 1 && t.dtype == DType::F32 => algorithm::reserve_tag(shape(t)[0]),
        _ => None,
    }
}

/// The backward of the call shape `p` (its forward's, Note [Reserve tag]) on `gpu`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn backward<F: FloatElement, I: IntElement, BT: BoolElement>(
    p: &Prepared,
    gpu: &Gpu,
    desc: &RnnDescriptor,
    inputs: RnnInputs<Cuda<F, I, BT>>,
    output: RnnOutput<Cuda<F, I, BT>>,
    reserve: CudaTensor,
    grads: RnnOutputGrads<Cuda<F, I, BT>>,
) -> RnnGrads<Cuda<F, I, BT>> {
    let mut laps = Laps::start(Op::Backward);
    check_backward(desc, p, &inputs, &output, &reserve, &grads);
    laps.lap(Phase::Checks);
    let lstm = desc.spec.mode.has_cell_state();
    let dtype = p.net.dtype;
    let x = into_contiguous(inputs.x);
    let h0 = inputs.h0.map(into_contiguous);
    let c0 = inputs.c0.map(into_contiguous);
    let w = weight_space::<F, I, BT>(p, inputs.weights);
    let y = into_contiguous(output.y);
    let dy = grads.dy.map(into_contiguous);
    let dhy = grads.dh_n.map(into_contiguous);
    let dcy = grads.dc_n.map(into_contiguous);
    // BackwardData updates the reserve in place: work on a copy when it is shared.
    let reserve = into_contiguous(reserve);
    let reserve = if reserve.can_mut() {
        reserve
    } else {
        reserve.copy()
    };
    laps.lap(Phase::Contiguous);
    let dy_zeros = dy.is_none();
    let dy = dy.unwrap_or_else(|| empty(&x, desc.output_shape().to_vec(), dtype));
    let dx = empty(&x, desc.input_shape().to_vec(), dtype);
    let dhx = empty(&x, desc.hidden_shape().to_vec(), dtype);
    let dcx = lstm.then(|| empty(&x, desc.cell_shape().to_vec(), dtype));
    let dw = empty(&x, vec![p.net.weight_space_bytes / dtype.size()], dtype);
    let work = empty(&x, vec![p.work_training], DType::U8);
    laps.lap(Phase::Alloc);

    let mut run = Launch::new(gpu, laps);
    let mut b = Buffers {
        x: run.ptr(&x),
        y: run.ptr(&y),
        hx: run.opt(h0.as_ref()),
        cx: run.opt(c0.as_ref()),
        w: run.ptr(&w),
        work: run.ptr(&work),
        reserve: run.ptr(&reserve),
        dx: run.ptr(&dx),
        dy: run.ptr(&dy),
        dhx: run.ptr(&dhx),
        dhy: run.opt(dhy.as_ref()),
        dcx: run.opt(dcx.as_ref()),
        dcy: run.opt(dcy.as_ref()),
        dw: run.ptr(&dw),
        ..Buffers::null()
    };
    run.ready(&x);
    b.lengths = p.dev_lengths.device_ptr(gpu.stream()).0 as *const c_int;
    let bytes = |shape: [usize; 3]| shape.iter().product::<usize>() * dtype.size();
    if dy_zeros {
        run.zero(b.dy, bytes(desc.output_shape()));
    }
    if desc.seq_lengths.is_some() {
        // cuDNN documents its padding fill for outputs only; dx past a sequence's end must
        // be zero (the reference's gradient there).
        run.zero(b.dx, bytes(desc.input_shape()));
    }
    // WGRAD_MODE_ADD accumulates into dw (cuDNN 9 supports no other mode).
    run.zero(b.dw, p.net.weight_space_bytes);
    run.lap(Phase::Memset);
    let (handle, call) = (&gpu.handle, p.rnn_call());
    run.call(Phase::CudnnBackwardData, p.net.algo, || {
        // SAFETY: as in `forward`, with the output, gradient and reserve checks of
        // `check_backward`; the reserve holds at least the bytes this configuration's
        // training forward fills (`p` is the forward's call shape, from the reserve's
        // tag), and no other tensor shares it. BackwardData runs first: it updates the
        // reserve that BackwardWeights reads; both run on the handle's stream after the
        // memsets.
        unsafe { ffi::rnn_backward_data(handle, &call, &b) }
    });
    run.call(Phase::CudnnBackwardWeights, p.net.algo, || {
        // SAFETY: as above; `dw` was zeroed, BackwardData was enqueued before.
        unsafe { ffi::rnn_backward_weights(handle, &call, &b) }
    });
    run.finish();
    let dweights = prim(from_weight_space(
        &p.net.plan,
        float::<Cuda<F, I, BT>, 1>(dw),
    ));
    // cuDNN computes every gradient (BackwardData always writes dx; skipping
    // BackwardWeights when the weights' gradient is not wanted is not done).
    RnnGrads {
        dx: Some(dx),
        dh0: dhx,
        dc0: dcx,
        dweights: Some(dweights),
    }
}
