//! The per-(thread, device) state: handle, stream, workspace, and the caches of networks
//! and call shapes; building them, probing them, and choosing the algorithm (Note [cuDNN
//! fallback], Note [RNN algorithms]).

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::ptr;
use std::rc::Rc;
use std::sync::Arc;

use burn::tensor::DType;
use cubecl::cuda::CudaDevice;
use cudarc::cudnn::sys;
use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DevicePtr};

use super::algorithm::{self, Algo, DeviceInfo, Settings};
use super::calls::{self, Buffers};
use super::descriptors::{self, cudnn_err, CallDescriptors};
use super::ffi::{check, CudnnError, DropoutDesc, Handle, RnnDesc, TensorDesc};
use super::profile::{Op, Phase, Span};
use super::weights::{self, WeightPlan, WeightSlot};
use crate::config::RnnSpec;
use crate::descriptor::RnnDescriptor;
use crate::layout::RnnLayout;

/// cuDNN's description of one network on one device, shared by every call shape: per
/// (spec, dropout probability, dtype, TF32, algorithm), and for `PERSIST_DYNAMIC` per
/// batch size too (its kernel is compiled for one).
pub(crate) struct Network {
    pub rnn: RnnDesc,
    // Kept alive for `rnn`, which refers to it; dropped after it (field order).
    _dropout: DropoutDesc,
    _dropout_states: Option<CudaSlice<u8>>,
    pub dtype: DType,
    pub data_type: sys::cudnnDataType_t,
    pub weight_space_bytes: usize,
    pub plan: WeightPlan,
    pub algo: Algo,
    pub tf32: bool,
}

/// One call shape (T, B, lengths, layout) of a network: data descriptors, the sequence
/// lengths on the device (uploaded once here, not per call: cuDNN reads them from device
/// memory, and they never change for the shape), and the sizes of the temporary buffers.
pub(crate) struct Prepared {
    pub net: Rc<Network>,
    pub io: CallDescriptors,
    pub dev_lengths: CudaSlice<c_int>,
    pub work_inference: usize,
    pub work_training: usize,
    pub reserve_bytes: usize,
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct NetKey {
    spec: RnnSpec,
    dropout_bits: u64,
    dtype: DType,
    tf32: bool,
    algo: Algo,
    /// The batch size a `PERSIST_DYNAMIC` network is compiled for; `None` otherwise.
    dynamic_batch: Option<usize>,
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct Key {
    spec: RnnSpec,
    dropout_bits: u64,
    dtype: DType,
    settings: Settings,
    /// Inference and training calls differ only under `Auto` (its thresholds do).
    training: bool,
    seq_length: usize,
    batch_size: usize,
    batch_first: bool,
    seq_lengths: Option<Vec<usize>>,
}

/// Per (thread, device): the handle, the crate's stream, the workspace, and the networks
/// and call shapes seen (`None`: the reference path runs them). Fields drop in order: call
/// shapes and networks, the workspace, then the handle, the stream and the context.
pub(crate) struct DeviceState {
    calls: HashMap<Key, Option<Rc<Prepared>>>,
    networks: HashMap<NetKey, Option<Rc<Network>>>,
    workspace: Option<CudaSlice<u8>>,
    pub info: DeviceInfo,
    pub handle: Handle,
    pub stream: Arc<CudaStream>,
    pub context: Arc<CudaContext>,
}

impl DeviceState {
    /// Makes this device's context current on the calling thread: cuDNN works in whatever
    /// context is current, and another device's may be.
    pub(crate) fn bind(&self) -> Result<(), String> {
        self.context
            .bind_to_thread()
            .map_err(|e| format!("binding the CUDA context: {e:?}"))
    }

    /// Grows the workspace to at least `bytes`. It is reused by every call on this thread
    /// and device: each call synchronizes the crate's stream before it returns, so no call
    /// still uses it when the next one starts. A buffer that grows is freed in stream
    /// order (`cuMemFreeAsync` on the crate's stream, after every use).
    pub(crate) fn reserve_workspace(&mut self, bytes: usize) -> Result<(), String> {
        if self.workspace.as_ref().is_some_and(|w| w.len() >= bytes) {
            return Ok(());
        }
        self.workspace = None;
        let buffer = self
            .stream
            .alloc_zeros::<u8>(bytes.max(1))
            .map_err(|e| format!("cuDNN workspace of {bytes} bytes: {e:?}"))?;
        self.workspace = Some(buffer);
        Ok(())
    }

    /// The workspace's device pointer and size (after [`DeviceState::reserve_workspace`]).
    pub(crate) fn workspace(&self) -> (*mut c_void, usize) {
        self.workspace.as_ref().map_or((ptr::null_mut(), 0), |w| {
            (w.device_ptr(&self.stream).0 as *mut c_void, w.len())
        })
    }
}

impl Drop for DeviceState {
    fn drop(&mut self) {
        // The descriptors, the handle and the buffers are destroyed in the current context:
        // make it this device's. `bind_to_thread` returns early on an error cudarc recorded
        // earlier, so that is cleared first. A failure cannot be reported here.
        let _ = self.context.check_err();
        let _ = self.context.bind_to_thread();
    }
}

/// Call shapes, and networks, kept per (thread, device) before that cache is cleared.
const CACHE_LIMIT: usize = 256;

thread_local! {
    static DEVICES: RefCell<HashMap<usize, Rc<RefCell<DeviceState>>>> = RefCell::new(HashMap::new());
}

/// Drops the calling thread's state on every device (module docs of [`super::clear_cache`]).
pub(crate) fn clear_thread_state() {
    let states: Vec<_> = DEVICES.with(|devices| devices.borrow_mut().drain().collect());
    drop(states);
}

fn device_state(device: &CudaDevice) -> Result<Rc<RefCell<DeviceState>>, String> {
    DEVICES.with(|devices| {
        if let Some(state) = devices.borrow().get(&device.index) {
            return Ok(state.clone());
        }
        let context = CudaContext::new(device.index).map_err(|e| format!("CUDA context: {e:?}"))?;
        let attribute = |a| {
            context
                .attribute(a)
                .map_err(|e| format!("CUDA device attribute {a:?}: {e:?}"))
        };
        use cudarc::driver::sys::CUdevice_attribute::*;
        let info = DeviceInfo {
            major: attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
            minor: attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
            sms: attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?,
        };
        let stream = context
            .new_stream()
            .map_err(|e| format!("CUDA stream: {e:?}"))?;
        // SAFETY: the stream is live and owned by the state next to the handle; the handle
        // drops first (field order of `DeviceState`). `new_stream` made the context current.
        let handle = unsafe { Handle::new(stream.cu_stream() as sys::cudaStream_t) }
            .map_err(|e| e.to_string())?;
        let state = Rc::new(RefCell::new(DeviceState {
            calls: HashMap::new(),
            networks: HashMap::new(),
            workspace: None,
            info,
            handle,
            stream,
            context,
        }));
        devices.borrow_mut().insert(device.index, state.clone());
        Ok(state)
    })
}

/// What a call asks of [`prepared`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Request {
    /// Algorithm and TF32.
    pub settings: Settings,
    /// A training call (forward or backward): `Auto`'s stricter thresholds.
    pub training: bool,
    /// The backward of a tagged reserve: only this algorithm will do (Note [Reserve tag]).
    pub exact: Option<Algo>,
    /// Where the profile counts the lookup (`None`: not counted).
    pub op: Option<Op>,
}

/// The prepared call, or `None` for the reference path (Note [cuDNN fallback]).
pub(crate) fn prepared(
    desc: &RnnDescriptor,
    dtype: DType,
    device: &CudaDevice,
    request: Request,
) -> Option<(Rc<Prepared>, Rc<RefCell<DeviceState>>)> {
    if !super::enabled() {
        return None;
    }
    let span = Span::start();
    let timed = |span: Span, phase| {
        if let Some(op) = request.op {
            span.stop(op, phase)
        }
    };
    super::cudnn_version().ok()?;
    if (0..desc.batch_size).any(|b| desc.seq_length_of(b) == 0) {
        return None;
    }
    let state = match device_state(device) {
        Ok(state) => state,
        Err(e) => {
            log::warn!("burn-fused-rnn: cuDNN unavailable on {device:?} ({e}); using the reference implementation");
            return None;
        }
    };
    let settings = request.settings;
    let key = Key {
        spec: desc.spec,
        dropout_bits: desc.dropout.probability.to_bits(),
        dtype,
        settings,
        training: request.training && settings.algorithm == algorithm::RnnAlgorithm::Auto,
        seq_length: desc.seq_length,
        batch_size: desc.batch_size,
        batch_first: desc.batch_first,
        seq_lengths: desc.seq_lengths.clone(),
    };
    let exact = |p: Rc<Prepared>| match request.exact {
        Some(algo) if p.net.algo != algo => None,
        _ => Some(p),
    };
    let mut st = state.borrow_mut();
    if let Some(found) = st.calls.get(&key) {
        let found = found.clone().and_then(exact).map(|p| (p, state.clone()));
        timed(span, Phase::Lookup);
        return found;
    }
    // Warnings are logged once the state is released (a logger may do anything).
    let mut warnings = Vec::new();
    let built = match st.bind() {
        Err(e) => {
            warnings.push(format!("cuDNN unavailable on {device:?} ({e})"));
            None
        }
        Ok(()) => {
            let variable = desc.seq_lengths.is_some();
            if let Some(chosen) = Algo::of(settings.algorithm) {
                if let Some(why) =
                    algorithm::refusal(chosen, &desc.spec, dtype, variable, Some(st.info))
                {
                    warnings.push(format!(
                        "the {} algorithm does not run {:?} in {dtype:?} ({why})",
                        chosen.public(),
                        desc.spec
                    ));
                }
            }
            let candidates =
                algorithm::candidates(settings, desc, dtype, request.training, st.info);
            let mut built = None;
            for algo in candidates {
                match build_for(&mut st, desc, dtype, settings.tf32, algo) {
                    Ok(p) => {
                        built = Some(p);
                        break;
                    }
                    Err(reason) => warnings.push(format!(
                        "cuDNN does not run {:?} in {dtype:?} at T = {}, B = {} with the {} algorithm ({reason})",
                        desc.spec,
                        desc.seq_length,
                        desc.batch_size,
                        algo.public()
                    )),
                }
            }
            built
        }
    };
    if st.calls.len() >= CACHE_LIMIT {
        st.calls.clear();
    }
    st.calls.insert(key, built.clone());
    drop(st);
    timed(span, Phase::Build);
    for warning in &warnings {
        let next = if built.is_some() {
            "using the standard algorithm"
        } else {
            "using the reference implementation"
        };
        log::warn!("burn-fused-rnn: {warning}; {next}");
    }
    built.and_then(exact).map(|p| (p, state))
}

/// The network (cached) and call shape of one algorithm; a persistent algorithm's call
/// shape is probed (Note [RNN algorithms]).
fn build_for(
    st: &mut DeviceState,
    desc: &RnnDescriptor,
    dtype: DType,
    tf32: bool,
    algo: Algo,
) -> Result<Rc<Prepared>, String> {
    let net_key = NetKey {
        spec: desc.spec,
        dropout_bits: desc.dropout.probability.to_bits(),
        dtype,
        tf32,
        algo,
        dynamic_batch: (algo == Algo::PersistDynamic).then_some(desc.batch_size),
    };
    let net = match st.networks.get(&net_key) {
        Some(Some(net)) => net.clone(),
        Some(None) => return Err("it failed before on this thread".into()),
        None => {
            let built = build_network(st, desc, &net_key);
            if st.networks.len() >= CACHE_LIMIT {
                // Call shapes hold their network: clear both, so that a network is never
                // built twice (with a second dropout state) while one lives.
                st.networks.clear();
                st.calls.clear();
            }
            st.networks.insert(net_key, built.as_ref().ok().cloned());
            built?
        }
    };
    let p = Rc::new(build_call(st, &net, desc)?);
    if algo.is_persistent() {
        probe(st, &p, desc, true)?;
    }
    Ok(p)
}

/// The network's descriptors and weight plan; a standard network is checked by one small
/// training forward and backward ([`probe`] at `T = B = 1`).
fn build_network(
    st: &DeviceState,
    desc: &RnnDescriptor,
    key: &NetKey,
) -> Result<Rc<Network>, String> {
    let err = cudnn_err;
    let (data_type, ..) =
        descriptors::data_types(key.dtype, key.tf32).ok_or("unsupported dtype")?;
    let elem = key.dtype.size();
    let handle = st.handle.raw;

    let dropout = DropoutDesc::new().map_err(err)?;
    let mut states = None;
    if desc.dropout.probability > 0.0 {
        let mut size = 0usize;
        // SAFETY: live handle, valid out pointer.
        check("cudnnDropoutGetStatesSize", unsafe {
            sys::cudnnDropoutGetStatesSize(handle, &mut size)
        })
        .map_err(err)?;
        let buffer = st
            .stream
            .alloc_zeros::<u8>(size)
            .map_err(|e| format!("dropout states: {e:?}"))?;
        let (ptr, sync) = buffer.device_ptr(&st.stream);
        // SAFETY: `ptr` points to `size` bytes of device memory kept alive in `Network`
        // next to the descriptor; the call initializes the generator on the handle's stream,
        // which is the buffer's.
        check("cudnnSetDropoutDescriptor", unsafe {
            sys::cudnnSetDropoutDescriptor(
                dropout.0,
                handle,
                desc.dropout.probability as f32,
                ptr as *mut c_void,
                size,
                desc.dropout.seed,
            )
        })
        .map_err(err)?;
        drop(sync);
        states = Some(buffer);
    } else {
        // SAFETY: probability 0 needs no state buffer (null, size 0).
        check("cudnnSetDropoutDescriptor", unsafe {
            sys::cudnnSetDropoutDescriptor(dropout.0, handle, 0.0, ptr::null_mut(), 0, 0)
        })
        .map_err(err)?;
    }

    let rnn = descriptors::rnn_descriptor(&desc.spec, key.dtype, key.tf32, key.algo, &dropout)?;
    if let Some(batch) = key.dynamic_batch {
        let batch = descriptors::int(batch, "batch_size")?;
        // SAFETY: live handle and descriptor (set above with PERSIST_DYNAMIC); cuDNN
        // compiles the persistent kernel for this batch size into the descriptor.
        check("cudnnBuildRNNDynamic", unsafe {
            sys::cudnnBuildRNNDynamic(handle, rnn.0, batch)
        })
        .map_err(err)?;
    }

    let mut weight_space_bytes = 0usize;
    // SAFETY: live handle and descriptor, valid out pointer.
    check("cudnnGetRNNWeightSpaceSize", unsafe {
        sys::cudnnGetRNNWeightSpaceSize(handle, rnn.0, &mut weight_space_bytes)
    })
    .map_err(err)?;
    let plan = weight_plan(st, &rnn, &desc.spec, weight_space_bytes, elem)?;
    let net = Rc::new(Network {
        rnn,
        _dropout: dropout,
        _dropout_states: states,
        dtype: key.dtype,
        data_type,
        weight_space_bytes,
        plan,
        algo: key.algo,
        tf32: key.tf32,
    });
    if !key.algo.is_persistent() {
        let tiny = RnnDescriptor::new(desc.spec, 1, 1, false, None, desc.dropout);
        let p = build_call(st, &net, &tiny)?;
        probe(st, &p, &tiny, false)?;
    }
    Ok(net)
}

/// The data descriptors, device lengths and temporary sizes of one call shape.
fn build_call(
    st: &DeviceState,
    net: &Rc<Network>,
    desc: &RnnDescriptor,
) -> Result<Prepared, String> {
    let err = cudnn_err;
    let io = descriptors::call_descriptors(desc, net.data_type)?;
    let (mut work_inference, mut work_training, mut reserve_bytes, mut unused) = (0, 0, 0, 0);
    // SAFETY: live handle and descriptors, valid out pointers.
    check("cudnnGetRNNTempSpaceSizes", unsafe {
        sys::cudnnGetRNNTempSpaceSizes(
            st.handle.raw,
            net.rnn.0,
            sys::cudnnForwardMode_t::CUDNN_FWD_MODE_INFERENCE,
            io.x.0,
            &mut work_inference,
            &mut unused,
        )
    })
    .map_err(err)?;
    // SAFETY: as above.
    check("cudnnGetRNNTempSpaceSizes", unsafe {
        sys::cudnnGetRNNTempSpaceSizes(
            st.handle.raw,
            net.rnn.0,
            sys::cudnnForwardMode_t::CUDNN_FWD_MODE_TRAINING,
            io.x.0,
            &mut work_training,
            &mut reserve_bytes,
        )
    })
    .map_err(err)?;
    let dev_lengths = st
        .stream
        .clone_htod(&io.seq_lengths)
        .map_err(|e| format!("sequence lengths: {e:?}"))?;
    Ok(Prepared {
        net: net.clone(),
        io,
        dev_lengths,
        work_inference,
        work_training,
        reserve_bytes,
    })
}

/// Runs the training forward, backward data and backward weights (and, with `inference`,
/// the inference forward first) of a call shape on zeros: cuDNN may refuse a network,
/// dtype or shape (BF16 on some versions and GPUs; a persistent kernel's size limits) only
/// when it executes, and a refusal found here means another algorithm or the reference
/// path instead of a panic in the middle of a user's step.
fn probe(
    st: &DeviceState,
    p: &Prepared,
    desc: &RnnDescriptor,
    inference: bool,
) -> Result<(), String> {
    let net = &p.net;
    let elem = net.dtype.size();
    let bytes = |shape: [usize; 3]| shape.iter().product::<usize>() * elem;
    let alloc = |bytes: usize| {
        st.stream
            .alloc_zeros::<u8>(bytes.max(1))
            .map_err(|e| format!("probe buffer: {e:?}"))
    };
    // A value and its gradient.
    let pair = |bytes: usize| -> Result<_, String> { Ok((alloc(bytes)?, alloc(bytes)?)) };
    let (x, dx) = pair(bytes(desc.input_shape()))?;
    let (y, dy) = pair(bytes(desc.output_shape()))?;
    let (hy, dhx) = pair(bytes(desc.hidden_shape()))?;
    let (cy, dcx) = pair(bytes(desc.cell_shape()))?;
    let (w, dw) = pair(net.weight_space_bytes)?;
    let work = alloc(p.work_training.max(p.work_inference))?;
    let reserve = alloc(p.reserve_bytes)?;
    let lstm = desc.spec.mode.has_cell_state();
    let ptr = |s: &CudaSlice<u8>| s.device_ptr(&st.stream).0 as *mut c_void;
    let b = Buffers {
        lengths: p.dev_lengths.device_ptr(&st.stream).0 as *const c_int,
        x: ptr(&x),
        y: ptr(&y),
        hy: ptr(&hy),
        cy: if lstm { ptr(&cy) } else { ptr::null_mut() },
        w: ptr(&w),
        work: ptr(&work),
        reserve: ptr(&reserve),
        dx: ptr(&dx),
        dy: ptr(&dy),
        dhx: ptr(&dhx),
        dcx: if lstm { ptr(&dcx) } else { ptr::null_mut() },
        dw: ptr(&dw),
        ..Buffers::null()
    };
    let handle = st.handle.raw;
    // Stops at the first refusal; the stream is synchronized before the buffers drop, also
    // when a call fails.
    let run = || -> Result<(), CudnnError> {
        // SAFETY (the four calls): every buffer of `b` is a live cudarc allocation on the
        // handle's stream (the lengths: `p.dev_lengths`), sized from the descriptors of `p`
        // and the network's sizes (the workspace for both modes), and dropped only after
        // the stream is synchronized below; `hx`, `cx`, `dhy` and `dcy` are null (zeros);
        // `bind` made the context current (`prepared`). They run in order on one stream,
        // and `dw` starts at zero.
        if inference {
            check("cudnnRNNForward", unsafe {
                calls::run_forward(handle, p, &b, false)
            })?;
        }
        // SAFETY: as above.
        check("cudnnRNNForward", unsafe {
            calls::run_forward(handle, p, &b, true)
        })?;
        // SAFETY: as above.
        check("cudnnRNNBackwardData_v8", unsafe {
            calls::run_backward_data(handle, p, &b)
        })?;
        // SAFETY: as above.
        check("cudnnRNNBackwardWeights_v8", unsafe {
            calls::run_backward_weights(handle, p, &b)
        })
    };
    let ran = run();
    let synced = super::protocol::sync_stream(st);
    ran.map_err(cudnn_err)?;
    synced.map_err(|e| format!("probe: CUDA stream synchronize failed: {e:?}"))
}

/// Reads cuDNN's weight-space layout and plans the canonical ↔ cuDNN mapping (Note
/// [Weight space verification]).
fn weight_plan(
    st: &DeviceState,
    rnn: &RnnDesc,
    spec: &RnnSpec,
    space_bytes: usize,
    elem: usize,
) -> Result<WeightPlan, String> {
    let err = cudnn_err;
    if space_bytes % elem != 0 {
        return Err(format!(
            "weight space of {space_bytes} bytes is not whole elements"
        ));
    }
    // cudnnGetRNNWeightParams returns addresses inside a weight space: give it a real one.
    let space = st
        .stream
        .alloc_zeros::<u8>(space_bytes.max(1))
        .map_err(|e| format!("weight space probe: {e:?}"))?;
    let (base, _sync) = space.device_ptr(&st.stream);
    let m_desc = TensorDesc::new().map_err(err)?;
    let b_desc = TensorDesc::new().map_err(err)?;
    let mut slots = Vec::new();
    for pseudo in 0..spec.num_pseudo_layers() {
        for (lin_id, ..) in weights::lin_ids(spec.mode, spec.proj_size.is_some()) {
            let (mut m_addr, mut b_addr): (*mut c_void, *mut c_void) =
                (ptr::null_mut(), ptr::null_mut());
            // SAFETY: live handle and descriptors; `base` is a device buffer of
            // `space_bytes`; cuDNN only computes addresses inside it and fills the two
            // tensor descriptors.
            check("cudnnGetRNNWeightParams", unsafe {
                sys::cudnnGetRNNWeightParams(
                    st.handle.raw,
                    rnn.0,
                    pseudo as c_int,
                    space_bytes,
                    base as *const c_void,
                    lin_id as c_int,
                    m_desc.0,
                    &mut m_addr,
                    b_desc.0,
                    &mut b_addr,
                )
            })
            .map_err(err)?;
            let slot =
                |addr: *mut c_void, desc: &TensorDesc| -> Result<Option<(usize, usize)>, String> {
                    if addr.is_null() {
                        return Ok(None);
                    }
                    let offset = (addr as u64)
                        .checked_sub(base)
                        .ok_or("cuDNN reported an address before its weight space")?
                        as usize;
                    if offset % elem != 0 {
                        return Err(format!(
                            "cuDNN reported a weight at byte {offset}, not a whole element"
                        ));
                    }
                    Ok(Some((
                        offset / elem,
                        descriptors::tensor_len(desc).map_err(err)?,
                    )))
                };
            slots.push(WeightSlot {
                pseudo_layer: pseudo,
                lin_id,
                matrix: slot(m_addr, &m_desc)?,
                bias: slot(b_addr, &b_desc)?,
            });
        }
    }
    weights::plan(&RnnLayout::new(*spec), &slots, space_bytes / elem)
}
