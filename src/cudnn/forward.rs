//! The forward through cuDNN (inference and training), and the input checks it shares
//! with the backward.

use std::ffi::c_int;

use burn::tensor::DType;
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::{BoolElement, FloatElement, IntElement};
use cudarc::driver::DevicePtr;

use super::cache::{DeviceState, Prepared};
use super::calls::{self, Buffers};
use super::profile::{Op, Phase, Span};
use super::protocol::{self, empty, shape, CudaTensor, GpuTimer, Guards};
use super::weights::to_weight_space;
use super::Cuda;
use crate::backend::{RnnInputs, RnnOutput};
use crate::descriptor::RnnDescriptor;
use crate::reference::{float, prim};

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

/// `cudnnRNNForward`; the training forward also returns its tagged reserve (Note [Reserve
/// tag]).
pub(crate) fn forward<F: FloatElement, I: IntElement, BT: BoolElement>(
    p: &Prepared,
    state: &DeviceState,
    desc: &RnnDescriptor,
    inputs: RnnInputs<Cuda<F, I, BT>>,
    training: bool,
) -> (RnnOutput<Cuda<F, I, BT>>, Option<CudaTensor>) {
    let op = if training {
        Op::Training
    } else {
        Op::Inference
    };
    let mut t = Span::start();
    check_inputs(desc, p, &inputs);
    t.lap(op, Phase::Checks);
    let dtype = p.net.dtype;
    let x = into_contiguous(inputs.x);
    let h0 = inputs.h0.map(into_contiguous);
    let c0 = inputs.c0.map(into_contiguous);
    let w = weight_space::<F, I, BT>(p, inputs.weights);
    t.lap(op, Phase::Contiguous);
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
        let len = super::algorithm::tagged_reserve_len(p.reserve_bytes, p.net.algo, p.net.tf32);
        empty(&x, vec![len], DType::F32)
    });
    t.lap(op, Phase::Alloc);

    let gpu = &state.gpu;
    let mut g = Guards::default();
    let mut b = Buffers {
        x: g.ptr(&x),
        y: g.ptr(&y),
        hx: g.opt(h0.as_ref()),
        hy: g.ptr(&hy),
        cx: g.opt(c0.as_ref()),
        cy: g.opt(cy.as_ref()),
        w: g.ptr(&w),
        work: g.ptr(&work),
        reserve: g.opt(reserve.as_ref()),
        ..Buffers::null()
    };
    t.lap(op, Phase::Pointers);
    protocol::sync_cubecl(&x);
    t.lap(op, Phase::CubeclSync);
    gpu.bind().unwrap_or_else(|e| panic!("burn-fused-rnn: {e}"));
    b.lengths = p.dev_lengths.device_ptr(&gpu.stream).0 as *const c_int;
    let mut timer = GpuTimer::default();
    let status = timer.around(gpu, Phase::CudnnForward, || {
        // SAFETY: every pointer is a live device buffer of the size cuDNN expects for the
        // descriptors of `p` (inputs checked against the descriptor and the input's device
        // by `check_inputs` and made contiguous; outputs, workspace and reserve allocated
        // above from those sizes; `Guards::ptr` checked each buffer's size; the device
        // lengths are `p`'s, the crate's own allocation on the handle's stream, and `p` is
        // held until the stream is synchronized); the guards in `g` keep the cubecl
        // buffers allocated, cubecl's work on them has finished (`sync_cubecl`), the
        // context is current (`bind`), and `launched`/`wait` wait for cuDNN before the
        // guards drop.
        unsafe { calls::run_forward(gpu.handle.raw, p, &b, training) }
    });
    protocol::launched(gpu, &mut g, "cudnnRNNForward", status);
    super::count_call(p.net.algo);
    t.lap(op, Phase::CudnnLaunch);
    protocol::wait(gpu, &mut g);
    t.lap(op, Phase::StreamSync);
    drop(g);
    timer.finish(op);
    (
        RnnOutput {
            y,
            h_n: hy,
            c_n: cy,
        },
        reserve,
    )
}
