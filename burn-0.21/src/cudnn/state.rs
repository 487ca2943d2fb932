//! The per-(thread, device) state: the device ([`Gpu`]: context, the crate's stream, a
//! cuDNN handle) and the cache of what was built on it, and the two lookups every call
//! starts with: the call shape of a forward request ([`prepared`]) and the one a backward's
//! forward ran ([`trained`]). Note [cuDNN fallback] says when they answer the reference
//! path.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use burn::tensor::DType;
use cubecl::cuda::CudaDevice;
use cudarc::driver::CudaContext;

use super::algorithm::{self, Algo, DeviceInfo, Pass};
use super::build::CudnnBuild;
use super::cache::{Cache, RequestKey};
use super::ffi::{Error, Handle};
use super::library::cudnn_version;
use super::network::{Dropout, Network, Prepared};
use super::profile::{Op, Phase, Span};
use super::protocol::Gpu;
use super::settings::CallSettings;
use crate::descriptor::RnnDescriptor;

/// Per (thread, device): the device and the cache of what was built on it.
pub(crate) struct DeviceState {
    cache: RefCell<Cache<Dropout, Network, Prepared>>,
    pub gpu: Gpu,
}

impl Drop for DeviceState {
    fn drop(&mut self) {
        // The cache's device buffers are freed, and the descriptors and the handle
        // destroyed, in the current context: make it this device's. `bind_to_thread`
        // returns early on an error cudarc recorded earlier, so that is cleared first. A
        // failure cannot be reported here.
        let _ = self.gpu.context.check_err();
        let _ = self.gpu.context.bind_to_thread();
    }
}

thread_local! {
    static DEVICES: RefCell<HashMap<usize, Rc<DeviceState>>> = RefCell::new(HashMap::new());
}

/// Drops the calling thread's state on every device (`cudnn::clear_cache`).
pub(crate) fn clear_thread_state() {
    let states: Vec<_> = DEVICES.with(|devices| devices.borrow_mut().drain().collect());
    drop(states);
}

fn device_state(device: &CudaDevice) -> Result<Rc<DeviceState>, Error> {
    DEVICES.with(|devices| {
        if let Some(state) = devices.borrow().get(&device.index) {
            return Ok(state.clone());
        }
        let context = CudaContext::new(device.index).map_err(Error::driver("CUDA context"))?;
        let attribute = |a| {
            context
                .attribute(a)
                .map_err(Error::driver("CUDA device attribute"))
        };
        use cudarc::driver::sys::CUdevice_attribute::*;
        let info = DeviceInfo {
            major: attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
            minor: attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
            sms: attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?,
        };
        // `new_stream` makes the context current, as `Handle::new` needs.
        let stream = context.new_stream().map_err(Error::driver("CUDA stream"))?;
        let handle = Handle::new(stream)?;
        let state = Rc::new(DeviceState {
            cache: RefCell::new(Cache::default()),
            gpu: Gpu {
                handle,
                context,
                info,
            },
        });
        devices.borrow_mut().insert(device.index, state.clone());
        Ok(state)
    })
}

/// The device's state with its context current, before anything is looked up, built or
/// freed (evictions free device memory).
fn bound_state(device: &CudaDevice) -> Result<Rc<DeviceState>, Error> {
    let state = device_state(device)?;
    state.gpu.bind()?;
    Ok(state)
}

/// The call shape a forward request runs with (the settings of this call, Note [Pinned
/// settings]), or `None` for the reference path (Note [cuDNN fallback]). `op` is where the
/// profile counts the lookup (`None`: not counted).
pub(crate) fn prepared(
    desc: &RnnDescriptor,
    dtype: DType,
    device: &CudaDevice,
    pass: Pass,
    op: Option<Op>,
) -> Option<(Rc<Prepared>, Rc<DeviceState>)> {
    let call = CallSettings::current();
    if !call.enabled {
        return None;
    }
    let span = Span::start();
    cudnn_version().ok()?;
    if (0..desc.batch_size).any(|b| desc.seq_length_of(b) == 0) {
        return None;
    }
    let state = match bound_state(device) {
        Ok(state) => state,
        Err(e) => {
            log::warn!("burn-fused-rnn: cuDNN unavailable on {device:?} ({e}); using the reference implementation");
            return None;
        }
    };
    let settings = call.settings;
    let key = RequestKey::of(desc, dtype, settings, pass);
    let mut cache = state.cache.borrow_mut();
    if let Some(found) = cache.request(&key) {
        drop(cache);
        span.stop_for(op, Phase::Lookup);
        return found.map(|p| (p, state));
    }
    // Warnings are logged once the cache is released (a logger may do anything).
    let mut warnings = Vec::new();
    let info = state.gpu.info;
    if let Some(chosen) = Algo::of(settings.algorithm) {
        let variable = desc.seq_lengths.is_some();
        if let Some(why) = algorithm::refusal(chosen, &desc.spec, dtype, variable, Some(info)) {
            warnings.push(format!(
                "the {} algorithm does not run {:?} in {dtype:?} ({why})",
                chosen.public(),
                desc.spec
            ));
        }
    }
    let candidates = algorithm::candidates(settings, desc, dtype, pass, info);
    let built = cache.choose(
        &mut CudnnBuild(&state.gpu),
        desc,
        key,
        &candidates,
        &mut warnings,
    );
    drop(cache);
    span.stop_for(op, Phase::Build);
    let next = if built.is_some() {
        "using the standard algorithm"
    } else {
        "using the reference implementation"
    };
    for warning in &warnings {
        log::warn!("burn-fused-rnn: {warning}; {next}");
    }
    built.map(|p| (p, state))
}

/// The call shape the training forward of a tagged reserve ran (Note [Reserve tag]): its
/// own cache entry, or, when that is gone, the same network and call shape rebuilt
/// without a probe. An error when even that fails.
pub(crate) fn trained(
    desc: &RnnDescriptor,
    dtype: DType,
    device: &CudaDevice,
    algo: Algo,
    tf32: bool,
    op: Op,
) -> Result<(Rc<Prepared>, Rc<DeviceState>), Error> {
    let span = Span::start();
    let state = bound_state(device)?;
    let mut cache = state.cache.borrow_mut();
    if let Some(p) = cache.trained(desc, dtype, algo, tf32) {
        drop(cache);
        span.stop(op, Phase::Lookup);
        return Ok((p, state));
    }
    let rebuilt = cache.rebuild(&mut CudnnBuild(&state.gpu), desc, dtype, algo, tf32);
    drop(cache);
    span.stop(op, Phase::Build);
    rebuilt.map(|p| (p, state))
}
