//! The call protocol between cubecl's queue and the crate's stream: the device ([`Gpu`]),
//! packed buffers, device pointers held by guards, the two waits, failures that never free
//! memory a kernel may still touch, and the profile's phases around the cuDNN calls
//! ([`Launch`]).
//!
//! # Note [cuDNN call protocol]
//!
//! cubecl does not expose its CUDA stream. Per call:
//! - check every tensor's shape, dtype and device against the descriptor and the input
//!   again (the trait's methods are public and safe, and cuDNN trusts every pointer and
//!   size), the reserve's size, and that each buffer holds what its tensor claims;
//! - make every input contiguous (a no-op for contiguous tensors), and allocate outputs,
//!   the workspace and the reserve with `client.empty` (cubecl's memory pool), which is
//!   packed: `Tensor::zeros`/`empty` pad each row to an aligned pitch, which cuDNN would
//!   read as data;
//! - take each buffer's device pointer with `client.get_resource` (it includes the view's
//!   offset, which burn-cubecl keeps 512-byte aligned, and orders cubecl's stream after
//!   the buffer's producer), then wait for cubecl with `client.sync()`;
//! - make the device's context current on the thread (cuDNN runs in the current context,
//!   and the thread may have used another device since); the cache lookup at the start
//!   of a call binds it too, before anything is built or evicted, since cudarc frees
//!   device memory in whatever context is current;
//! - zero what must start at zero with `cuMemsetD8Async` on the crate's stream: the weight
//!   gradient (cuDNN adds into it), a missing `dy`, and `dx` of variable-length batches
//!   (cuDNN documents its padding fill for outputs only);
//! - run cuDNN on a stream this crate owns (same primary context), synchronize that stream,
//!   also before a failed call panics (if even that fails, the guards are leaked rather
//!   than let cubecl reuse memory a kernel may still touch), and only then drop the
//!   resource guards.
//!
//! Why each wait stays. Both block the host, and both are needed as long as cubecl keeps
//! its stream private:
//! - `client.sync()` before cuDNN: the crate's stream is not ordered after cubecl's, so
//!   without it cuDNN could read inputs that cubecl's kernels (the weights'
//!   concatenation, an `into_contiguous`, the previous layer) have not written yet. An
//!   event recorded on cubecl's stream would be cheaper, but needs that stream.
//! - the stream synchronize after cuDNN: cubecl's stream is not ordered after the crate's
//!   either, and the outputs go back to cubecl, whose next kernels may read them and
//!   whose allocator may reuse the inputs' memory once the guards drop.
//!
//! What a call does not pay:
//! - the sequence lengths are uploaded to the device once per call shape (kept with the
//!   cached call shape);
//! - batch-first input and output are handed to cuDNN as they are, with its batch-major
//!   layout (`CUDNN_RNN_DATA_LAYOUT_BATCH_MAJOR_UNPACKED`): no transpose or copy;
//! - with the identity weight plan (every cuDNN PyTorch has shipped with), the flat
//!   weights are the weight space: no copy in this module.
//!
//! What it still pays, and why: the weights' concatenation happens in the module
//! (`FusedRnn::flat_weights`) on every call, since keeping a prepared weight space for
//! inference needs the module to know when its parameters change; the two waits (above);
//! the workspace comes from cubecl's pool per call, which keeps freed memory for reuse (a
//! buffer kept per thread outside the pool would hold one copy of the largest workspace
//! per thread, and no GPU measurement has shown that it saves anything).

use std::ffi::c_void;
use std::ptr;
use std::sync::Arc;
use std::time::Duration;

use burn::tensor::{DType, Shape};
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::CubeBackend;
use cubecl::cuda::CudaRuntime;
use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaContext, CudaEvent, CudaStream, DriverError};

use super::algorithm::{count_call, Algo, DeviceInfo};
use super::ffi::{CudnnError, Error, Handle};
use super::profile::{self, Laps, Phase};

/// Burn's CUDA backend without fusion.
pub(crate) type Cuda<F, I, BT> = CubeBackend<CudaRuntime, F, I, BT>;

pub(crate) type CudaTensor = CubeTensor<CudaRuntime>;

/// One device as a thread uses it: its context, a cuDNN handle bound to the crate's
/// stream (which it keeps), and what the heuristics read. Fields drop in order: the
/// handle (and the stream), then the context.
pub(crate) struct Gpu {
    pub handle: Handle,
    pub context: Arc<CudaContext>,
    pub info: DeviceInfo,
}

impl Gpu {
    /// The crate's stream on this device.
    pub(crate) fn stream(&self) -> &Arc<CudaStream> {
        self.handle.stream()
    }

    /// Makes this device's context current on the calling thread: cuDNN works in whatever
    /// context is current, cudarc frees device memory in it, and another device's may be
    /// current.
    pub(crate) fn bind(&self) -> Result<(), Error> {
        self.context
            .bind_to_thread()
            .map_err(Error::driver("binding the CUDA context"))
    }

    /// Synchronizes the crate's stream. cudarc's `synchronize` returns at once, without
    /// waiting, when an earlier cudarc call recorded an error: that error is cleared first.
    pub(crate) fn sync(&self) -> Result<(), DriverError> {
        if let Err(e) = self.context.check_err() {
            log::warn!("burn-fused-rnn: an earlier CUDA error was pending: {e:?}");
        }
        self.stream().synchronize()
    }
}

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

/// Waits for cubecl's queued work on the buffers whose pointers were taken.
///
/// Needed: the crate's stream is not ordered after cubecl's (cubecl does not expose its
/// stream, so no event can link them), and `get_resource` only orders cubecl's own stream.
fn sync_cubecl(like: &CudaTensor) {
    cubecl::future::block_on(like.client.sync())
        .unwrap_or_else(|e| panic!("burn-fused-rnn: cubecl sync failed: {e:?}"));
}

/// One op's cuDNN work under the protocol (Note [cuDNN call protocol]): the guards that
/// keep each cubecl buffer's device pointer valid, the profile's host phases from the
/// pointers on, and the GPU timing of each cuDNN call.
pub(crate) struct Launch<'a> {
    gpu: &'a Gpu,
    guards: Vec<Box<dyn std::any::Any>>,
    laps: Laps,
    timer: GpuTimer,
}

impl<'a> Launch<'a> {
    /// Starts taking pointers on `gpu`; `laps` goes on with the op's host phases.
    pub(crate) fn new(gpu: &'a Gpu, laps: Laps) -> Self {
        Self {
            gpu,
            guards: Vec::new(),
            laps,
            timer: GpuTimer::default(),
        }
    }

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
        self.guards.push(Box::new(guard));
        ptr as *mut c_void
    }

    /// [`Launch::ptr`] of a tensor that may be absent (null then).
    pub(crate) fn opt(&mut self, t: Option<&CudaTensor>) -> *mut c_void {
        t.map_or(ptr::null_mut(), |t| self.ptr(t))
    }

    /// Once every pointer is taken: waits for cubecl's queued work on the buffers
    /// (`client.sync()` through `like`'s client) and makes the device's context current.
    pub(crate) fn ready(&mut self, like: &CudaTensor) {
        self.laps.lap(Phase::Pointers);
        sync_cubecl(like);
        self.laps.lap(Phase::CubeclSync);
        if let Err(e) = self.gpu.bind() {
            self.fail(format!("{e}"));
        }
    }

    /// Zeroes `bytes` at `ptr`, one of this launch's pointers, on the crate's stream
    /// (ordered before the cuDNN calls).
    pub(crate) fn zero(&mut self, ptr: *mut c_void, bytes: usize) {
        let stream = self.gpu.stream().cu_stream();
        // SAFETY: `ptr` is a buffer of at least `bytes` bytes held by a guard of this
        // launch until the stream has been synchronized (`finish`, `fail`). cubecl
        // allocated it (stream-ordered, on its stream) and `ready` has waited for that
        // stream, so the allocation and every earlier use are complete and another stream
        // of the same (primary) context may write it.
        let set = unsafe { cudarc::driver::result::memset_d8_async(ptr as u64, 0, bytes, stream) };
        if let Err(e) = set {
            self.fail(format!("CUDA memset failed: {e:?}"));
        }
    }

    /// Records the host time since the last phase under `phase`.
    pub(crate) fn lap(&mut self, phase: Phase) {
        self.laps.lap(phase);
    }

    /// Runs `enqueue` (one cuDNN call of `algo`) between the GPU timer's events; counts
    /// the call, or panics after waiting for the stream when cuDNN refused it.
    pub(crate) fn call(
        &mut self,
        phase: Phase,
        algo: Algo,
        enqueue: impl FnOnce() -> Result<(), CudnnError>,
    ) {
        let launched = self.timer.around(self.gpu, phase, enqueue);
        if let Err(e) = launched {
            self.fail(format!("{} (Note [cuDNN fallback])", Error::from(e)));
        }
        count_call(algo);
    }

    /// Waits for the crate's stream, after which the guards drop, and records the GPU
    /// phases.
    ///
    /// Needed: cubecl's stream is not ordered after the crate's either, and the outputs go
    /// back to cubecl, whose next kernels may read them, and whose allocator may hand the
    /// inputs' memory to new tensors once the guards drop.
    pub(crate) fn finish(mut self) {
        self.laps.lap(Phase::CudnnLaunch);
        if let Err(e) = self.gpu.sync() {
            self.fail(format!("CUDA stream synchronize failed: {e:?}"));
        }
        self.laps.lap(Phase::StreamSync);
        let Launch {
            guards,
            timer,
            laps,
            ..
        } = self;
        drop(guards);
        timer.finish(laps.op());
    }

    /// Panics after a failure while work on the guarded buffers may still be queued: waits
    /// for the stream first and, if even that fails, leaks the guards rather than let
    /// cubecl reuse memory a kernel may still touch.
    fn fail(&mut self, message: String) -> ! {
        if self.gpu.sync().is_err() {
            std::mem::forget(std::mem::take(&mut self.guards));
        }
        panic!("burn-fused-rnn: {message}");
    }
}

/// CUDA events around cuDNN calls on the crate's stream, when the profile is on
/// ([`profile`]); free otherwise.
#[derive(Default)]
struct GpuTimer(Vec<(Phase, CudaEvent, CudaEvent)>);

impl GpuTimer {
    /// Runs `f` (which enqueues one cuDNN call) between two timing events.
    fn around<T>(&mut self, gpu: &Gpu, phase: Phase, f: impl FnOnce() -> T) -> T {
        if !profile::is_enabled() {
            return f();
        }
        let event = || {
            gpu.stream()
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
    fn finish(self, op: profile::Op) {
        for (phase, start, end) in self.0 {
            if let Ok(ms) = start.elapsed_ms(&end) {
                profile::record(op, phase, Duration::from_secs_f64(f64::from(ms) / 1e3));
            }
        }
    }
}
