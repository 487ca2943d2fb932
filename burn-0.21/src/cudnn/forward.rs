//! The forward through cuDNN: `cudnnRNNForward` in inference or training mode (Note
//! [cuDNN call protocol]).

use std::ffi::c_int;

use burn::tensor::DType;
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::{BoolElement, FloatElement, IntElement};
use cudarc::driver::DevicePtr;

use super::algorithm::tagged_reserve_len;
use super::checks::{check_inputs, weight_space};
use super::ffi::{self, Buffers};
use super::network::Prepared;
use super::profile::{Laps, Op, Phase};
use super::protocol::{empty, Cuda, CudaTensor, Gpu, Launch};
use crate::descriptor::RnnDescriptor;
use crate::op_types::{RnnInputs, RnnOutput};

/// `cudnnRNNForward` of the call shape `p` on `gpu`; the training forward also returns
/// its tagged reserve (Note [Reserve tag]).
pub(crate) fn forward<F: FloatElement, I: IntElement, BT: BoolElement>(
    p: &Prepared,
    gpu: &Gpu,
    desc: &RnnDescriptor,
    inputs: RnnInputs<Cuda<F, I, BT>>,
    training: bool,
) -> (RnnOutput<Cuda<F, I, BT>>, Option<CudaTensor>) {
    let mut laps = Laps::start(if training {
        Op::Training
    } else {
        Op::Inference
    });
    check_inputs(desc, p, &inputs);
    laps.lap(Phase::Checks);
    let dtype = p.net.dtype;
    let x = into_contiguous(inputs.x);
    let h0 = inputs.h0.map(into_contiguous);
    let c0 = inputs.c0.map(into_contiguous);
    let w = weight_space::<F, I, BT>(p, inputs.weights);
    laps.lap(Phase::Contiguous);
    let lstm = desc.spec.mode.has_cell_state();
    let y = empty(&x, desc.output_shape().to_vec(), dtype);
    let hy = empty(&x, desc.hidden_shape().to_vec(), dtype);
    let cy = lstm.then(|| empty(&x, desc.cell_shape().to_vec(), dtype));
    let work_bytes = if training {
        p.work_training
    } else {
        p.work_inference
    };
    let work = empty(&x, vec![work_bytes], DType::U8);
    let reserve = training.then(|| {
        let len = tagged_reserve_len(p.reserve_bytes, p.net.algo, p.net.tf32);
        empty(&x, vec![len], DType::F32)
    });
    laps.lap(Phase::Alloc);

    let mut run = Launch::new(gpu, laps);
    let mut b = Buffers {
        x: run.ptr(&x),
        y: run.ptr(&y),
        hx: run.opt(h0.as_ref()),
        hy: run.ptr(&hy),
        cx: run.opt(c0.as_ref()),
        cy: run.opt(cy.as_ref()),
        w: run.ptr(&w),
        work: run.ptr(&work),
        reserve: run.opt(reserve.as_ref()),
        ..Buffers::null()
    };
    run.ready(&x);
    b.lengths = p.dev_lengths.device_ptr(gpu.stream()).0 as *const c_int;
    let call = p.rnn_call();
    run.call(Phase::CudnnForward, p.net.algo, || {
        // SAFETY: every pointer is a live device buffer of the size cuDNN expects for the
        // descriptors of `p` (inputs checked against the descriptor and the input's device
        // by `check_inputs` and made contiguous; outputs, workspace and reserve allocated
        // above from those sizes; `Launch::ptr` checked each buffer's size; the device
        // lengths are `p`'s, the crate's own allocation on the handle's stream, and `p` is
        // held until the stream is synchronized); the launch's guards keep the cubecl
        // buffers allocated, cubecl's work on them has finished and the context is current
        // (`ready`), and `call`/`finish` wait for cuDNN before the guards drop.
        unsafe { ffi::rnn_forward(&gpu.handle, &call, &b, training) }
    });
    run.finish();
    (
        RnnOutput {
            y,
            h_n: hy,
            c_n: cy,
        },
        reserve,
    )
}
