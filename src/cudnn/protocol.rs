//! The call protocol between cubecl's queue and the crate's stream (Note [cuDNN call
//! protocol]): packed buffers, device pointers held by guards, the two waits, failures
//! that never free memory a kernel may still touch, and the GPU timing of the profile.

use std::ffi::c_void;
use std::ptr;
use std::time::Duration;

use burn::tensor::{DType, Shape};
use burn_cubecl::tensor::CubeTensor;
use cubecl::cuda::CudaRuntime;
use cudarc::cudnn::sys;
use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::CudaEvent;

use super::cache::Gpu;
use super::ffi::{self, check};
use super::profile::{self, Op, Phase};

pub(crate) type CudaTensor = CubeTensor<CudaRuntime>;

/// A contiguous buffer from `client.empty` (never `Tensor::zeros`/`empty`: cubecl pads
/// their rows, and cuDNN reads packed data).
pub(crate) fn empty(like: &CudaTensor, shape: Vec<usize>, dtype: DType) -> CudaTensor {
    let bytes = shape.iter().product::<usize>() * dtype.size();
    let handle = like.client.empty(bytes.max(1));
    CubeTensor::new_contiguous(
        like.client.clone(),
        like.device.clone(),
        Shape::from(shape),
        handle,
        dtype,
    )
}

pub(crate) fn shape(t: &CudaTensor) -> &[usize] {
    t.meta.shape().as_slice()
}

/// Device pointers of cubecl buffers, with the guards that keep them valid until the
/// cuDNN work on them has finished.
#[derive(Default)]
pub(crate) struct Guards(Vec<Box<dyn std::any::Any>>);

impl Guards {
    /// The buffer's device pointer; panics if the buffer is smaller than the tensor's shape
    /// and dtype say (its fields are public: this backs every size check up).
    pub(crate) fn ptr(&mut self, t: &CudaTensor) -> *mut c_void {
        let guard = t
            .client
            .get_resource(t.handle.clone())
            .unwrap_or_else(|e| panic!("burn-fused-rnn: cubecl buffer unavailable: {e:?}"));
        let needed = shape(t).iter().product::<usize>() * t.dtype.size();
        let resource = guard.resource();
        assert!(
            resource.size as usize >= needed,
            "expected a buffer of at least {needed} bytes for a {:?} tensor of shape {:?}, got {} bytes",
            t.dtype,
            shape(t),
            resource.size
        );
        let ptr = resource.ptr;
        self.0.push(Box::new(guard));
        ptr as *mut c_void
    }

    pub(crate) fn opt(&mut self, t: Option<&CudaTensor>) -> *mut c_void {
        t.map_or(ptr::null_mut(), |t| self.ptr(t))
    }
}

/// Waits for cubecl's queued work on the buffers whose pointers were taken.
///
/// Needed: the crate's stream is not ordered after cubecl's (cubecl does not expose its
/// stream, so no event can link them), and `get_resource` only orders cubecl's own stream.
pub(crate) fn sync_cubecl(like: &CudaTensor) {
    cubecl::future::block_on(like.client.sync())
        .unwrap_or_else(|e| panic!("burn-fused-rnn: cubecl sync failed: {e:?}"));
}

/// Panics after a failure while work on the guarded buffers may still be queued: waits for
/// the stream first and, if even that fails, leaks the guards rather than let cubecl reuse
/// memory a kernel may still touch.
pub(crate) fn fail(gpu: &Gpu, g: &mut Guards, message: String) -> ! {
    if gpu.sync().is_err() {
        std::mem::forget(std::mem::take(&mut g.0));
    }
    panic!("burn-fused-rnn: {message}");
}

/// Waits for the crate's stream, after which the guards may drop.
///
/// Needed: cubecl's stream is not ordered after the crate's either, and the outputs go
/// back to cubecl, whose next kernels may read them, and whose allocator may hand the
/// inputs' memory to new tensors once the guards drop.
pub(crate) fn wait(gpu: &Gpu, g: &mut Guards) {
    if let Err(e) = gpu.sync() {
        fail(gpu, g, format!("CUDA stream synchronize failed: {e:?}"));
    }
}

/// Checks the status of a cuDNN call just launched.
pub(crate) fn launched(gpu: &Gpu, g: &mut Guards, call: &'static str, status: sys::cudnnStatus_t) {
    if let Err(e) = check(call, status) {
        let text = ffi::status_text(e.status);
        fail(gpu, g, format!("{e} ({text}) (Note [cuDNN fallback])"));
    }
}

/// Zeroes `bytes` at `ptr` on the crate's stream (ordered before the cuDNN calls).
pub(crate) fn zero(gpu: &Gpu, g: &mut Guards, ptr: *mut c_void, bytes: usize) {
    // SAFETY: `ptr` is a buffer of at least `bytes` bytes held by a guard in `g` until the
    // stream has been synchronized. cubecl allocated it (stream-ordered, on its stream) and
    // `sync_cubecl` has waited for that stream, so the allocation and every earlier use are
    // complete and another stream of the same (primary) context may write it.
    let set = unsafe {
        cudarc::driver::result::memset_d8_async(ptr as u64, 0, bytes, gpu.stream.cu_stream())
    };
    if let Err(e) = set {
        fail(gpu, g, format!("CUDA memset failed: {e:?}"));
    }
}

/// CUDA events around cuDNN calls on the crate's stream, when the profile is on
/// ([`profile`]); free otherwise.
#[derive(Default)]
pub(crate) struct GpuTimer(Vec<(Phase, CudaEvent, CudaEvent)>);

impl GpuTimer {
    /// Runs `f` (which enqueues one cuDNN call) between two timing events.
    pub(crate) fn around<T>(&mut self, gpu: &Gpu, phase: Phase, f: impl FnOnce() -> T) -> T {
        if !profile::is_enabled() {
            return f();
        }
        let event = || {
            gpu.stream
                .record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
                .ok()
        };
        let start = event();
        let out = f();
        if let (Some(start), Some(end)) = (start, event()) {
            self.0.push((phase, start, end));
        }
        out
    }

    /// Records the time between each pair of events; call after the stream has been
    /// synchronized (reading an event waits for it otherwise).
    pub(crate) fn finish(self, op: Op) {
        for (phase, start, end) in self.0 {
            if let Ok(ms) = start.elapsed_ms(&end) {
                profile::record(op, phase, Duration::from_secs_f64(f64::from(ms) / 1e3));
            }
        }
    }
}
