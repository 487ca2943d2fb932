//! The three cuDNN RNN calls, shared by the forward, the backward and the probes: each an
//! `unsafe fn` whose contract is the caller's to keep (Note [cuDNN call protocol]).

use std::ffi::{c_int, c_void};
use std::ptr;

use cudarc::cudnn::sys;

use super::cache::Prepared;

/// Device pointers of one call; null where a tensor is absent (cuDNN reads zeros for a
/// null `hx`, `cx`, `dhy` or `dcy`) or unused (the gradients in a forward).
pub(crate) struct Buffers {
    pub lengths: *const c_int,
    pub x: *mut c_void,
    pub y: *mut c_void,
    pub hx: *mut c_void,
    pub hy: *mut c_void,
    pub cx: *mut c_void,
    pub cy: *mut c_void,
    pub w: *mut c_void,
    pub work: *mut c_void,
    pub reserve: *mut c_void,
    pub dx: *mut c_void,
    pub dy: *mut c_void,
    pub dhx: *mut c_void,
    pub dhy: *mut c_void,
    pub dcx: *mut c_void,
    pub dcy: *mut c_void,
    pub dw: *mut c_void,
}

impl Buffers {
    pub(crate) fn null() -> Self {
        let n = ptr::null_mut();
        Self {
            lengths: ptr::null(),
            x: n,
            y: n,
            hx: n,
            hy: n,
            cx: n,
            cy: n,
            w: n,
            work: n,
            reserve: n,
            dx: n,
            dy: n,
            dhx: n,
            dhy: n,
            dcx: n,
            dcy: n,
            dw: n,
        }
    }
}

/// `cudnnRNNForward`, in training mode (with the reserve) or inference mode.
///
/// # Safety
///
/// Every pointer of `b` the call uses is a live device buffer of the size the descriptors
/// of `p` and its network give (the workspace of the mode, the reserve in training; the
/// sequence lengths `p.seq_lengths` in device memory), no other work uses them, they stay
/// allocated until the handle's stream has been synchronized, `handle` is bound to that
/// stream, and the device's context is current.
pub(crate) unsafe fn run_forward(
    handle: sys::cudnnHandle_t,
    p: &Prepared,
    b: &Buffers,
    training: bool,
) -> sys::cudnnStatus_t {
    let (mode, work, reserve) = if training {
        let mode = sys::cudnnForwardMode_t::CUDNN_FWD_MODE_TRAINING;
        (mode, p.work_training, p.reserve_bytes)
    } else {
        (
            sys::cudnnForwardMode_t::CUDNN_FWD_MODE_INFERENCE,
            p.work_inference,
            0,
        )
    };
    // SAFETY: this function's contract.
    unsafe {
        sys::cudnnRNNForward(
            handle,
            p.net.rnn.0,
            mode,
            b.lengths,
            p.io.x.0,
            b.x,
            p.io.y.0,
            b.y,
            p.io.h.0,
            b.hx,
            b.hy,
            p.io.c.0,
            b.cx,
            b.cy,
            p.net.weight_space_bytes,
            b.w,
            work,
            b.work,
            reserve,
            if training { b.reserve } else { ptr::null_mut() },
        )
    }
}

/// `cudnnRNNBackwardData_v8`: dx, dhx, dcx; it updates the reserve.
///
/// # Safety
///
/// As [`run_forward`] in training mode, on the reserve a training forward of the same
/// network and call shape filled.
pub(crate) unsafe fn run_backward_data(
    handle: sys::cudnnHandle_t,
    p: &Prepared,
    b: &Buffers,
) -> sys::cudnnStatus_t {
    // SAFETY: this function's contract.
    unsafe {
        sys::cudnnRNNBackwardData_v8(
            handle,
            p.net.rnn.0,
            b.lengths,
            p.io.y.0,
            b.y,
            b.dy,
            p.io.x.0,
            b.dx,
            p.io.h.0,
            b.hx,
            b.dhy,
            b.dhx,
            p.io.c.0,
            b.cx,
            b.dcy,
            b.dcx,
            p.net.weight_space_bytes,
            b.w,
            p.work_training,
            b.work,
            p.reserve_bytes,
            b.reserve,
        )
    }
}

/// `cudnnRNNBackwardWeights_v8`, adding into `dw` (which must start at zero).
///
/// # Safety
///
/// As [`run_backward_data`], which must have run first on the same reserve.
pub(crate) unsafe fn run_backward_weights(
    handle: sys::cudnnHandle_t,
    p: &Prepared,
    b: &Buffers,
) -> sys::cudnnStatus_t {
    // SAFETY: this function's contract.
    unsafe {
        sys::cudnnRNNBackwardWeights_v8(
            handle,
            p.net.rnn.0,
            sys::cudnnWgradMode_t::CUDNN_WGRAD_MODE_ADD,
            b.lengths,
            p.io.x.0,
            b.x,
            p.io.h.0,
            b.hx,
            p.io.y.0,
            b.y,
            p.net.weight_space_bytes,
            b.dw,
            p.work_training,
            b.work,
            p.reserve_bytes,
            b.reserve,
        )
    }
}
