//! The backward through cuDNN: `cudnnRNNBackwardData_v8`, then
//! `cudnnRNNBackwardWeights_v8` into a zeroed weight gradient.

use std::ffi::c_int;

use burn::tensor::backend::Backend;
use burn::tensor::DType;
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::{BoolElement, FloatElement, IntElement};
use cudarc::driver::DevicePtr;

use super::algorithm::{self, Algo};
use super::cache::{DeviceState, Prepared};
use super::calls::{self, Buffers};
use super::forward::{check_inputs, check_tensor, weight_space};
use super::profile::{Op, Phase, Span};
use super::protocol::{self, empty, shape, CudaTensor, GpuTimer, Guards};
use super::weights::from_weight_space;
use super::Cuda;
use crate::backend::{RnnGrads, RnnInputs, RnnOutput, RnnOutputGrads, RnnReserve};
use crate::descriptor::RnnDescriptor;
use crate::reference::{float, prim};

/// The algorithm and TF32 setting of a cuDNN reserve (one 1-D F32 buffer, Note [Reserve
/// tag]); `None` for the reference's reserve (3-D tensors).
pub(crate) fn cudnn_reserve_tag(
    reserve: &RnnReserve<impl Backend<FloatTensorPrimitive = CudaTensor>>,
) -> Option<(Algo, bool)> {
    match reserve.tensors.as_slice() {
        [t] if shape(t).len() == 1 && t.dtype == DType::F32 => {
            Some(algorithm::reserve_tag(shape(t)[0]))
        }
        _ => None,
    }
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn backward<F: FloatElement, I: IntElement, BT: BoolElement>(
    p: &Prepared,
    state: &DeviceState,
    desc: &RnnDescriptor,
    inputs: RnnInputs<Cuda<F, I, BT>>,
    output: RnnOutput<Cuda<F, I, BT>>,
    reserve: CudaTensor,
    grads: RnnOutputGrads<Cuda<F, I, BT>>,
) -> RnnGrads<Cuda<F, I, BT>> {
    let op = Op::Backward;
    let mut t = Span::start();
    check_inputs(desc, p, &inputs);
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
    let reserve_len = shape(&reserve).iter().product::<usize>();
    assert!(
        reserve_len * 4 >= p.reserve_bytes && reserve.device == x.device,
        "expected the reserve of a cuDNN training forward of this configuration (at least {} F32 elements, on {:?}), got {reserve_len} elements on {:?}",
        p.reserve_bytes.div_ceil(4),
        x.device,
        reserve.device
    );
    t.lap(op, Phase::Checks);
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
    t.lap(op, Phase::Contiguous);
    let dy_zeros = dy.is_none();
    let dy = dy.unwrap_or_else(|| empty(&x, desc.output_shape().to_vec(), dtype));
    let dx = empty(&x, desc.input_shape().to_vec(), dtype);
    let dhx = empty(&x, desc.hidden_shape().to_vec(), dtype);
    let dcx = lstm.then(|| empty(&x, desc.cell_shape().to_vec(), dtype));
    let dw = empty(&x, vec![p.net.weight_space_bytes / dtype.size()], dtype);
    let work = empty(&x, vec![p.work_training], DType::U8);
    t.lap(op, Phase::Alloc);

    let gpu = &state.gpu;
    let mut g = Guards::default();
    let mut b = Buffers {
        x: g.ptr(&x),
        y: g.ptr(&y),
        hx: g.opt(h0.as_ref()),
        cx: g.opt(c0.as_ref()),
        w: g.ptr(&w),
        work: g.ptr(&work),
        reserve: g.ptr(&reserve),
        dx: g.ptr(&dx),
        dy: g.ptr(&dy),
        dhx: g.ptr(&dhx),
        dhy: g.opt(dhy.as_ref()),
        dcx: g.opt(dcx.as_ref()),
        dcy: g.opt(dcy.as_ref()),
        dw: g.ptr(&dw),
        ..Buffers::null()
    };
    t.lap(op, Phase::Pointers);
    protocol::sync_cubecl(&x);
    t.lap(op, Phase::CubeclSync);
    gpu.bind().unwrap_or_else(|e| panic!("burn-fused-rnn: {e}"));
    b.lengths = p.dev_lengths.device_ptr(&gpu.stream).0 as *const c_int;
    let bytes = |shape: [usize; 3]| shape.iter().product::<usize>() * dtype.size();
    if dy_zeros {
        protocol::zero(gpu, &mut g, b.dy, bytes(desc.output_shape()));
    }
    if desc.seq_lengths.is_some() {
        // cuDNN documents its padding fill for outputs only; dx past a sequence's end must
        // be zero (the reference's gradient there).
        protocol::zero(gpu, &mut g, b.dx, bytes(desc.input_shape()));
    }
    // WGRAD_MODE_ADD accumulates into dw (cuDNN 9 supports no other mode).
    protocol::zero(gpu, &mut g, b.dw, p.net.weight_space_bytes);
    t.lap(op, Phase::Memset);
    let mut timer = GpuTimer::default();
    let status = timer.around(gpu, Phase::CudnnBackwardData, || {
        // SAFETY: as in `forward`, with the output, gradient and reserve checks above; the
        // reserve holds at least the bytes this configuration's training forward fills
        // (`p` is the forward's network: same algorithm and math mode, from the reserve's
        // tag), and no other tensor shares it. BackwardData runs first: it updates the
        // reserve that BackwardWeights reads; both run on the handle's stream after the
        // memsets.
        unsafe { calls::run_backward_data(gpu.handle.raw, p, &b) }
    });
    protocol::launched(gpu, &mut g, "cudnnRNNBackwardData_v8", status);
    super::count_call(p.net.algo);
    let status = timer.around(gpu, Phase::CudnnBackwardWeights, || {
        // SAFETY: as above; `dw` was zeroed, BackwardData was enqueued before.
        unsafe { calls::run_backward_weights(gpu.handle.raw, p, &b) }
    });
    protocol::launched(gpu, &mut g, "cudnnRNNBackwardWeights_v8", status);
    super::count_call(p.net.algo);
    t.lap(op, Phase::CudnnLaunch);
    protocol::wait(gpu, &mut g);
    t.lap(op, Phase::StreamSync);
    drop(g);
    timer.finish(op);
    let dweights = prim(from_weight_space(
        &p.net.plan,
        float::<Cuda<F, I, BT>, 1>(dw),
    ));
    RnnGrads {
        dx,
        dh0: dhx,
        dc0: dcx,
        dweights,
    }
}
