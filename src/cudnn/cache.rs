//! The per-(thread, device) state: handle, stream, and the caches of dropout states,
//! networks and call shapes; building them, probing them, and choosing the algorithm
//! (Note [cuDNN fallback], Note [RNN algorithms], Note [Reserve tag]).
//!
//! [`Cache`] is the policy alone (which request gets which call shape, when to build, when
//! to probe, what to forget), generic over what it builds, so that it is tested without a
//! GPU; the cuDNN builder that fills it follows.

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

use super::algorithm::{self, Algo, DeviceInfo, Pass, Settings};
use super::calls::{self, Buffers};
use super::descriptors::{self, cudnn_err, CallDescriptors};
use super::ffi::{check, CudnnError, DropoutDesc, Handle, RnnDesc, TensorDesc};
use super::profile::{Op, Phase, Span};
use super::settings::CallSettings;
use super::weights::{self, WeightPlan, WeightSlot};
use crate::config::RnnSpec;
use crate::descriptor::RnnDescriptor;
use crate::layout::RnnLayout;

/// What a call shape depends on besides its network.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct ShapeKey {
    seq_length: usize,
    batch_size: usize,
    batch_first: bool,
    seq_lengths: Option<Vec<usize>>,
}

impl ShapeKey {
    fn of(desc: &RnnDescriptor) -> Self {
        Self {
            seq_length: desc.seq_length,
            batch_size: desc.batch_size,
            batch_first: desc.batch_first,
            seq_lengths: desc.seq_lengths.clone(),
        }
    }
}

/// One network: what its RNN descriptor, dropout descriptor and weight plan depend on.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct NetKey {
    pub spec: RnnSpec,
    pub dropout_bits: u64,
    pub dtype: DType,
    pub tf32: bool,
    pub algo: Algo,
    /// The batch size a `PERSIST_DYNAMIC` network is compiled for; `None` otherwise.
    pub dynamic_batch: Option<usize>,
}

impl NetKey {
    pub(crate) fn of(desc: &RnnDescriptor, dtype: DType, tf32: bool, algo: Algo) -> Self {
        Self {
            spec: desc.spec,
            dropout_bits: desc.dropout.probability.to_bits(),
            dtype,
            tf32,
            algo,
            dynamic_batch: (algo == Algo::PersistDynamic).then_some(desc.batch_size),
        }
    }

    /// The key of the network's dropout state: one per network, except that the
    /// `PERSIST_DYNAMIC` networks of every batch size share one, so that a new batch size
    /// continues the random stream instead of seeding a second one (Note [cuDNN dropout]).
    fn dropout_key(&self) -> NetKey {
        NetKey {
            dynamic_batch: None,
            ..self.clone()
        }
    }
}

/// One call shape of one network: the entry a training forward and its backward share.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct CallKey {
    net: NetKey,
    shape: ShapeKey,
}

/// One forward request: the descriptor, dtype, settings and pass it was made with.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct RequestKey {
    spec: RnnSpec,
    dropout_bits: u64,
    dtype: DType,
    settings: Settings,
    pass: Pass,
    shape: ShapeKey,
}

impl RequestKey {
    pub(crate) fn of(desc: &RnnDescriptor, dtype: DType, settings: Settings, pass: Pass) -> Self {
        Self {
            spec: desc.spec,
            dropout_bits: desc.dropout.probability.to_bits(),
            dtype,
            settings,
            pass,
            shape: ShapeKey::of(desc),
        }
    }
}

/// What [`Cache`] asks to be built or run. The cuDNN implementation is [`CudnnBuild`];
/// the tests use a recording fake.
pub(crate) trait Build {
    /// A dropout descriptor and its generator states.
    type Dropout;
    /// A network (RNN descriptor, weight plan).
    type Network;
    /// A call shape of a network (data descriptors, lengths, temporary sizes).
    type Call;
    /// The dropout state of the networks keyed by [`NetKey::dropout_key`].
    fn dropout(&mut self, desc: &RnnDescriptor) -> Result<Self::Dropout, String>;
    /// The network of `key`.
    fn network(
        &mut self,
        key: &NetKey,
        desc: &RnnDescriptor,
        dropout: &Rc<Self::Dropout>,
    ) -> Result<Self::Network, String>;
    /// The call shape of `desc` on `net`.
    fn call(&mut self, net: &Rc<Self::Network>, desc: &RnnDescriptor)
        -> Result<Self::Call, String>;
    /// Runs `pass` of a call shape on zeros (Note [RNN algorithms]).
    fn probe(&mut self, call: &Self::Call, desc: &RnnDescriptor, pass: Pass) -> Result<(), String>;
}

/// Entries kept per map before the cache is cleared.
const CACHE_LIMIT: usize = 256;

/// Which call shape each request runs, and everything built for it (Note [RNN
/// algorithms], Note [Reserve tag]). `None` remembers a failure: the reference path for a
/// request, a network cuDNN refused.
///
/// Fields drop in order: requests and call shapes hold networks, networks hold dropout
/// states.
pub(crate) struct Cache<D, N, C> {
    /// Forward requests: the call shape chosen, or `None` (the reference path).
    requests: HashMap<RequestKey, Option<Rc<C>>>,
    /// Every call shape built, per network: where a backward finds its forward's.
    calls: HashMap<CallKey, Rc<C>>,
    networks: HashMap<NetKey, Option<Rc<N>>>,
    /// Standard networks' probes at `T = B = 1`, per pass.
    network_probes: HashMap<(NetKey, Pass), Result<(), String>>,
    dropouts: HashMap<NetKey, Rc<D>>,
}

impl<D, N, C> Default for Cache<D, N, C> {
    fn default() -> Self {
        Self {
            requests: HashMap::new(),
            calls: HashMap::new(),
            networks: HashMap::new(),
            network_probes: HashMap::new(),
            dropouts: HashMap::new(),
        }
    }
}

impl<D, N, C> Cache<D, N, C> {
    /// The choice made for `key` before (`Some(None)`: the reference path), if any.
    pub(crate) fn request(&self, key: &RequestKey) -> Option<Option<Rc<C>>> {
        self.requests.get(key).cloned()
    }

    /// Chooses the call shape of a new request: the first of `candidates` that builds and
    /// passes its probe for the request's pass, or `None`; remembered for the request.
    /// Each refusal adds a warning.
    pub(crate) fn choose<B>(
        &mut self,
        b: &mut B,
        desc: &RnnDescriptor,
        key: RequestKey,
        candidates: &[Algo],
        warnings: &mut Vec<String>,
    ) -> Option<Rc<C>>
    where
        B: Build<Dropout = D, Network = N, Call = C>,
    {
        self.make_room();
        let mut chosen = None;
        for &algo in candidates {
            let net = NetKey::of(desc, key.dtype, key.settings.tf32, algo);
            match self.build(b, desc, net, Some(key.pass)) {
                Ok(call) => {
                    chosen = Some(call);
                    break;
                }
                Err(reason) => warnings.push(format!(
                    "cuDNN does not run {:?} in {:?} at T = {}, B = {} with the {} algorithm ({reason})",
                    desc.spec,
                    key.dtype,
                    desc.seq_length,
                    desc.batch_size,
                    algo.public()
                )),
            }
        }
        self.requests.insert(key, chosen.clone());
        chosen
    }

    /// The call shape a training forward of `desc` ran with `algo` and `tf32` (its
    /// reserve's tag, Note [Reserve tag]), whatever algorithm it was asked for.
    pub(crate) fn trained(
        &self,
        desc: &RnnDescriptor,
        dtype: DType,
        algo: Algo,
        tf32: bool,
    ) -> Option<Rc<C>> {
        let key = CallKey {
            net: NetKey::of(desc, dtype, tf32, algo),
            shape: ShapeKey::of(desc),
        };
        self.calls.get(&key).cloned()
    }

    /// Builds exactly the network and call shape of [`Cache::trained`] again, without a
    /// probe: for a backward whose forward's entry is gone.
    pub(crate) fn rebuild<B>(
        &mut self,
        b: &mut B,
        desc: &RnnDescriptor,
        dtype: DType,
        algo: Algo,
        tf32: bool,
    ) -> Result<Rc<C>, String>
    where
        B: Build<Dropout = D, Network = N, Call = C>,
    {
        self.make_room();
        self.build(b, desc, NetKey::of(desc, dtype, tf32, algo), None)
    }

    /// The call shape of `desc` on the network `net` (built or taken from the cache), and,
    /// with `probe`, its check for that pass: a persistent call shape is probed itself, a
    /// standard network once per pass at `T = B = 1`.
    fn build<B>(
        &mut self,
        b: &mut B,
        desc: &RnnDescriptor,
        net: NetKey,
        probe: Option<Pass>,
    ) -> Result<Rc<C>, String>
    where
        B: Build<Dropout = D, Network = N, Call = C>,
    {
        let network = self.network(b, desc, &net)?;
        let persistent = net.algo.is_persistent();
        if let (Some(pass), false) = (probe, persistent) {
            self.probe_network(b, desc, &net, &network, pass)?;
        }
        let key = CallKey {
            net,
            shape: ShapeKey::of(desc),
        };
        let call = match self.calls.get(&key) {
            Some(call) => call.clone(),
            None => {
                let call = Rc::new(b.call(&network, desc)?);
                self.calls.insert(key, call.clone());
                call
            }
        };
        if let (Some(pass), true) = (probe, persistent) {
            b.probe(&call, desc, pass)?;
        }
        Ok(call)
    }

    fn network<B>(&mut self, b: &mut B, desc: &RnnDescriptor, key: &NetKey) -> Result<Rc<N>, String>
    where
        B: Build<Dropout = D, Network = N, Call = C>,
    {
        match self.networks.get(key) {
            Some(Some(network)) => return Ok(network.clone()),
            Some(None) => return Err("it failed before on this thread".into()),
            None => {}
        }
        let built = self
            .dropout(b, desc, key.dropout_key())
            .and_then(|dropout| b.network(key, desc, &dropout))
            .map(Rc::new);
        self.networks
            .insert(key.clone(), built.as_ref().ok().cloned());
        built
    }

    fn dropout<B>(&mut self, b: &mut B, desc: &RnnDescriptor, key: NetKey) -> Result<Rc<D>, String>
    where
        B: Build<Dropout = D, Network = N, Call = C>,
    {
        if let Some(dropout) = self.dropouts.get(&key) {
            return Ok(dropout.clone());
        }
        let dropout = Rc::new(b.dropout(desc)?);
        self.dropouts.insert(key, dropout.clone());
        Ok(dropout)
    }

    /// A standard network's check for `pass`: one call at `T = B = 1` on zeros, once per
    /// network and pass (cuDNN refuses some networks, BF16 ones, only when it runs them).
    fn probe_network<B>(
        &mut self,
        b: &mut B,
        desc: &RnnDescriptor,
        key: &NetKey,
        network: &Rc<N>,
        pass: Pass,
    ) -> Result<(), String>
    where
        B: Build<Dropout = D, Network = N, Call = C>,
    {
        let probe_key = (key.clone(), pass);
        if let Some(result) = self.network_probes.get(&probe_key) {
            return result.clone();
        }
        let tiny = RnnDescriptor::new(desc.spec, 1, 1, false, None, desc.dropout);
        let result = b
            .call(network, &tiny)
            .and_then(|call| b.probe(&call, &tiny, pass));
        self.network_probes.insert(probe_key, result.clone());
        result
    }

    /// Forgets everything built once a map is full. Requests and call shapes go together
    /// (a request's call shape must stay where its backward looks for it); networks go with
    /// everything that holds them, so that a network is never built twice (with a second
    /// dropout state) while one lives.
    fn make_room(&mut self) {
        if self.requests.len() >= CACHE_LIMIT || self.calls.len() >= CACHE_LIMIT {
            self.requests.clear();
            self.calls.clear();
        }
        if self.networks.len() >= CACHE_LIMIT || self.dropouts.len() >= CACHE_LIMIT {
            self.requests.clear();
            self.calls.clear();
            self.networks.clear();
            self.network_probes.clear();
            self.dropouts.clear();
        }
    }
}

/// A dropout descriptor and its generator states (none for probability 0).
pub(crate) struct Dropout {
    pub desc: DropoutDesc,
    _states: Option<CudaSlice<u8>>,
}

/// cuDNN's description of one network on one device, shared by every call shape: per
/// [`NetKey`].
pub(crate) struct Network {
    pub rnn: RnnDesc,
    // Kept alive for `rnn`, which refers to it; dropped after it (field order).
    _dropout: Rc<Dropout>,
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

/// One device as a thread uses it: its context, the crate's stream, a cuDNN handle bound
/// to that stream, and what the heuristics read. Fields drop in order: the handle, the
/// stream, the context.
pub(crate) struct Gpu {
    pub handle: Handle,
    pub stream: Arc<CudaStream>,
    pub context: Arc<CudaContext>,
    pub info: DeviceInfo,
}

impl Gpu {
    /// Makes this device's context current on the calling thread: cuDNN works in whatever
    /// context is current, cudarc frees device memory in it, and another device's may be
    /// current.
    pub(crate) fn bind(&self) -> Result<(), String> {
        self.context
            .bind_to_thread()
            .map_err(|e| format!("binding the CUDA context: {e:?}"))
    }

    /// Synchronizes the crate's stream. cudarc's `synchronize` returns at once, without
    /// waiting, when an earlier cudarc call recorded an error: that error is cleared first.
    pub(crate) fn sync(&self) -> Result<(), cudarc::driver::DriverError> {
        if let Err(e) = self.context.check_err() {
            log::warn!("burn-fused-rnn: an earlier CUDA error was pending: {e:?}");
        }
        self.stream.synchronize()
    }
}

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

/// Drops the calling thread's state on every device (module docs of [`super::clear_cache`]).
pub(crate) fn clear_thread_state() {
    let states: Vec<_> = DEVICES.with(|devices| devices.borrow_mut().drain().collect());
    drop(states);
}

fn device_state(device: &CudaDevice) -> Result<Rc<DeviceState>, String> {
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
        // SAFETY: the stream is live and owned by `Gpu` next to the handle; the handle
        // drops first (field order of `Gpu`). `new_stream` made the context current.
        let handle = unsafe { Handle::new(stream.cu_stream() as sys::cudaStream_t) }
            .map_err(|e| e.to_string())?;
        let state = Rc::new(DeviceState {
            cache: RefCell::new(Cache::default()),
            gpu: Gpu {
                handle,
                stream,
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
fn bound_state(device: &CudaDevice) -> Result<Rc<DeviceState>, String> {
    let state = device_state(device)?;
    state.gpu.bind()?;
    Ok(state)
}

fn timed(op: Option<Op>, span: Span, phase: Phase) {
    if let Some(op) = op {
        span.stop(op, phase)
    }
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
    super::cudnn_version().ok()?;
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
        timed(op, span, Phase::Lookup);
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
    timed(op, span, Phase::Build);
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
) -> Result<(Rc<Prepared>, Rc<DeviceState>), String> {
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

/// [`Build`] on one device through cuDNN. The context is current ([`bound_state`]).
struct CudnnBuild<'a>(&'a Gpu);

impl Build for CudnnBuild<'_> {
    type Dropout = Dropout;
    type Network = Network;
    type Call = Prepared;

    fn dropout(&mut self, desc: &RnnDescriptor) -> Result<Dropout, String> {
        build_dropout(self.0, desc)
    }

    fn network(
        &mut self,
        key: &NetKey,
        desc: &RnnDescriptor,
        dropout: &Rc<Dropout>,
    ) -> Result<Network, String> {
        build_network(self.0, desc, key, dropout)
    }

    fn call(&mut self, net: &Rc<Network>, desc: &RnnDescriptor) -> Result<Prepared, String> {
        build_call(self.0, net, desc)
    }

    fn probe(&mut self, call: &Prepared, desc: &RnnDescriptor, pass: Pass) -> Result<(), String> {
        probe(self.0, call, desc, pass)
    }
}

/// A dropout descriptor, with generator states seeded with this call's seed when the
/// probability is not 0 (Note [cuDNN dropout]).
fn build_dropout(gpu: &Gpu, desc: &RnnDescriptor) -> Result<Dropout, String> {
    let err = cudnn_err;
    let handle = gpu.handle.raw;
    let dropout = DropoutDesc::new().map_err(err)?;
    if desc.dropout.probability == 0.0 {
        // SAFETY: probability 0 needs no state buffer (null, size 0).
        check("cudnnSetDropoutDescriptor", unsafe {
            sys::cudnnSetDropoutDescriptor(dropout.0, handle, 0.0, ptr::null_mut(), 0, 0)
        })
        .map_err(err)?;
        return Ok(Dropout {
            desc: dropout,
            _states: None,
        });
    }
    let mut size = 0usize;
    // SAFETY: live handle, valid out pointer.
    check("cudnnDropoutGetStatesSize", unsafe {
        sys::cudnnDropoutGetStatesSize(handle, &mut size)
    })
    .map_err(err)?;
    let buffer = gpu
        .stream
        .alloc_zeros::<u8>(size)
        .map_err(|e| format!("dropout states: {e:?}"))?;
    let (ptr, sync) = buffer.device_ptr(&gpu.stream);
    // SAFETY: `ptr` points to `size` bytes of device memory kept alive in `Dropout` next to
    // the descriptor; the call initializes the generator on the handle's stream, which is
    // the buffer's.
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
    Ok(Dropout {
        desc: dropout,
        _states: Some(buffer),
    })
}

/// The network's RNN descriptor and weight plan (no probe: [`Cache`] decides that).
fn build_network(
    gpu: &Gpu,
    desc: &RnnDescriptor,
    key: &NetKey,
    dropout: &Rc<Dropout>,
) -> Result<Network, String> {
    let err = cudnn_err;
    let (data_type, ..) =
        descriptors::data_types(key.dtype, key.tf32).ok_or("unsupported dtype")?;
    let elem = key.dtype.size();
    let handle = gpu.handle.raw;
    let rnn =
        descriptors::rnn_descriptor(&desc.spec, key.dtype, key.tf32, key.algo, &dropout.desc)?;
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
    let plan = weight_plan(gpu, &rnn, &desc.spec, weight_space_bytes, elem)?;
    Ok(Network {
        rnn,
        _dropout: dropout.clone(),
        dtype: key.dtype,
        data_type,
        weight_space_bytes,
        plan,
        algo: key.algo,
        tf32: key.tf32,
    })
}

/// The data descriptors, device lengths and temporary sizes of one call shape.
fn build_call(gpu: &Gpu, net: &Rc<Network>, desc: &RnnDescriptor) -> Result<Prepared, String> {
    let err = cudnn_err;
    let io = descriptors::call_descriptors(desc, net.data_type)?;
    let (mut work_inference, mut work_training, mut reserve_bytes, mut unused) = (0, 0, 0, 0);
    // SAFETY: live handle and descriptors, valid out pointers.
    check("cudnnGetRNNTempSpaceSizes", unsafe {
        sys::cudnnGetRNNTempSpaceSizes(
            gpu.handle.raw,
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
            gpu.handle.raw,
            net.rnn.0,
            sys::cudnnForwardMode_t::CUDNN_FWD_MODE_TRAINING,
            io.x.0,
            &mut work_training,
            &mut reserve_bytes,
        )
    })
    .map_err(err)?;
    let dev_lengths = gpu
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

/// Runs `pass` of a call shape on zeros: the inference forward, or the training forward
/// and both backward calls. cuDNN may refuse a network, dtype or shape (BF16 on some
/// versions and GPUs; a persistent kernel's size limits) only when it executes, and a
/// refusal found here means another algorithm or the reference path instead of a panic
/// in the middle of a user's step.
fn probe(gpu: &Gpu, p: &Prepared, desc: &RnnDescriptor, pass: Pass) -> Result<(), String> {
    let net = &p.net;
    let training = pass == Pass::Training;
    let elem = net.dtype.size();
    let bytes = |shape: [usize; 3]| shape.iter().product::<usize>() * elem;
    let alloc = |bytes: usize| {
        gpu.stream
            .alloc_zeros::<u8>(bytes.max(1))
            .map_err(|e| format!("probe buffer: {e:?}"))
    };
    // A value and, in training, its gradient.
    let pair = |bytes: usize| -> Result<_, String> {
        Ok((alloc(bytes)?, training.then(|| alloc(bytes)).transpose()?))
    };
    let (x, dx) = pair(bytes(desc.input_shape()))?;
    let (y, dy) = pair(bytes(desc.output_shape()))?;
    let (hy, dhx) = pair(bytes(desc.hidden_shape()))?;
    let (cy, dcx) = pair(bytes(desc.cell_shape()))?;
    let (w, dw) = pair(net.weight_space_bytes)?;
    let work = alloc(if training {
        p.work_training
    } else {
        p.work_inference
    })?;
    let reserve = training.then(|| alloc(p.reserve_bytes)).transpose()?;
    let lstm = desc.spec.mode.has_cell_state();
    let ptr = |s: &CudaSlice<u8>| s.device_ptr(&gpu.stream).0 as *mut c_void;
    let opt = |s: &Option<CudaSlice<u8>>| s.as_ref().map_or(ptr::null_mut(), ptr);
    let b = Buffers {
        lengths: p.dev_lengths.device_ptr(&gpu.stream).0 as *const c_int,
        x: ptr(&x),
        y: ptr(&y),
        hy: ptr(&hy),
        cy: if lstm { ptr(&cy) } else { ptr::null_mut() },
        w: ptr(&w),
        work: ptr(&work),
        reserve: opt(&reserve),
        dx: opt(&dx),
        dy: opt(&dy),
        dhx: opt(&dhx),
        dcx: if lstm { opt(&dcx) } else { ptr::null_mut() },
        dw: opt(&dw),
        ..Buffers::null()
    };
    let handle = gpu.handle.raw;
    // Stops at the first refusal; the stream is synchronized before the buffers drop, also
    // when a call fails.
    let run = || -> Result<(), CudnnError> {
        // SAFETY (the three calls): every buffer of `b` the call reads or writes is a live
        // cudarc allocation on the handle's stream (the lengths: `p.dev_lengths`), sized
        // from the descriptors of `p` and the network's sizes (the workspace for this
        // pass; the gradients and the reserve exist in training, the only pass that uses
        // them), and dropped only after the stream is synchronized below; `hx`, `cx`,
        // `dhy` and `dcy` are null (zeros); the context is current (`bound_state`). They
        // run in order on one stream, and `dw` starts at zero.
        check("cudnnRNNForward", unsafe {
            calls::run_forward(handle, p, &b, training)
        })?;
        if training {
            // SAFETY: as above.
            check("cudnnRNNBackwardData_v8", unsafe {
                calls::run_backward_data(handle, p, &b)
            })?;
            // SAFETY: as above.
            check("cudnnRNNBackwardWeights_v8", unsafe {
                calls::run_backward_weights(handle, p, &b)
            })?;
        }
        Ok(())
    };
    let ran = run();
    let synced = gpu.sync();
    ran.map_err(cudnn_err)?;
    synced.map_err(|e| format!("probe: CUDA stream synchronize failed: {e:?}"))
}

/// Reads cuDNN's weight-space layout and plans the canonical ↔ cuDNN mapping (Note
/// [Weight space verification]).
fn weight_plan(
    gpu: &Gpu,
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
    let space = gpu
        .stream
        .alloc_zeros::<u8>(space_bytes.max(1))
        .map_err(|e| format!("weight space probe: {e:?}"))?;
    let (base, _sync) = space.device_ptr(&gpu.stream);
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
                    gpu.handle.raw,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{FusedRnnConfig, RnnMode};
    use crate::cudnn::RnnAlgorithm;
    use crate::descriptor::DropoutSpec;
    use std::collections::HashSet;

    const H100: DeviceInfo = DeviceInfo {
        major: 9,
        minor: 0,
        sms: 132,
    };

    /// Builds labelled stand-ins and records every build and probe.
    #[derive(Default)]
    struct Fake {
        log: Vec<String>,
        /// Probes that fail: (algorithm, pass).
        refuse: HashSet<(Algo, Pass)>,
        dropouts: usize,
    }

    /// A fake network: its key and the id of its dropout state.
    struct FakeNet(NetKey, usize);

    impl Build for Fake {
        type Dropout = usize;
        type Network = FakeNet;
        type Call = (NetKey, usize);

        fn dropout(&mut self, _: &RnnDescriptor) -> Result<usize, String> {
            self.dropouts += 1;
            self.log.push(format!("dropout {}", self.dropouts));
            Ok(self.dropouts)
        }

        fn network(
            &mut self,
            key: &NetKey,
            _: &RnnDescriptor,
            dropout: &Rc<usize>,
        ) -> Result<FakeNet, String> {
            self.log.push(format!("network {}", key.algo.public()));
            Ok(FakeNet(key.clone(), **dropout))
        }

        fn call(
            &mut self,
            net: &Rc<FakeNet>,
            d: &RnnDescriptor,
        ) -> Result<(NetKey, usize), String> {
            self.log
                .push(format!("call {} B{}", net.0.algo.public(), d.batch_size));
            Ok((net.0.clone(), d.batch_size))
        }

        fn probe(
            &mut self,
            call: &(NetKey, usize),
            _: &RnnDescriptor,
            pass: Pass,
        ) -> Result<(), String> {
            let algo = call.0.algo;
            self.log
                .push(format!("probe {} {pass:?} B{}", algo.public(), call.1));
            if self.refuse.contains(&(algo, pass)) {
                return Err("refused".into());
            }
            Ok(())
        }
    }

    type FakeCache = Cache<usize, FakeNet, (NetKey, usize)>;

    fn desc(mode: RnnMode, h: usize, b: usize) -> RnnDescriptor {
        let spec = FusedRnnConfig::new(mode, h, h).with_num_layers(2).spec();
        RnnDescriptor::new(spec, 10, b, true, None, DropoutSpec::NONE)
    }

    /// A forward request as `prepared` makes it, with the real candidate list.
    fn forward(
        cache: &mut FakeCache,
        b: &mut Fake,
        d: &RnnDescriptor,
        dtype: DType,
        settings: Settings,
        pass: Pass,
    ) -> Option<Rc<(NetKey, usize)>> {
        let key = RequestKey::of(d, dtype, settings, pass);
        if let Some(found) = cache.request(&key) {
            return found;
        }
        let candidates = algorithm::candidates(settings, d, dtype, pass, H100);
        cache.choose(b, d, key, &candidates, &mut Vec::new())
    }

    fn settings(algorithm: RnnAlgorithm, tf32: bool) -> Settings {
        Settings { algorithm, tf32 }
    }

    #[test]
    fn a_backward_finds_its_forwards_call_shape_for_every_algorithm_without_building() {
        // (setting, shape and dtype, the algorithm the training forward runs): `Auto`
        // picks small-H for LSTM H = 128 and persist-static for an F16 layer of 256.
        let small = desc(RnnMode::Lstm, 128, 8);
        let f16 = {
            let spec = FusedRnnConfig::new(RnnMode::Lstm, 256, 256).spec();
            RnnDescriptor::new(spec, 10, 8, true, None, DropoutSpec::NONE)
        };
        let cases = [
            (RnnAlgorithm::Standard, &small, DType::F32, Algo::Standard),
            (
                RnnAlgorithm::PersistStatic,
                &small,
                DType::F32,
                Algo::PersistStatic,
            ),
            (
                RnnAlgorithm::PersistStaticSmallH,
                &small,
                DType::F32,
                Algo::PersistStaticSmallH,
            ),
            (
                RnnAlgorithm::PersistDynamic,
                &small,
                DType::F32,
                Algo::PersistDynamic,
            ),
            (
                RnnAlgorithm::Auto,
                &small,
                DType::F32,
                Algo::PersistStaticSmallH,
            ),
            (RnnAlgorithm::Auto, &f16, DType::F16, Algo::PersistStatic),
        ];
        for (algorithm, d, dtype, runs) in cases {
            for tf32 in [false, true] {
                let what = format!("{algorithm} tf32={tf32} {dtype:?}");
                let (mut cache, mut b) = (FakeCache::default(), Fake::default());
                let s = settings(algorithm, tf32);
                let forward = forward(&mut cache, &mut b, d, dtype, s, Pass::Training)
                    .unwrap_or_else(|| panic!("{what}: the forward found no call shape"));
                assert_eq!((forward.0.algo, forward.0.tf32), (runs, tf32), "{what}");
                // The forward probed the training pass only.
                assert!(
                    b.log.iter().any(|l| l.contains("Training")),
                    "{what}: {:?}",
                    b.log
                );
                assert!(
                    !b.log.iter().any(|l| l.contains("Inference")),
                    "{what}: {:?}",
                    b.log
                );
                b.log.clear();
                let backward = cache
                    .trained(d, dtype, runs, tf32)
                    .unwrap_or_else(|| panic!("{what}: the backward missed its forward's entry"));
                assert!(
                    Rc::ptr_eq(&forward, &backward),
                    "{what}: another call shape"
                );
                assert!(
                    b.log.is_empty(),
                    "{what}: the backward built or probed: {:?}",
                    b.log
                );
                // The other math mode is another network: not this entry.
                assert!(cache.trained(d, dtype, runs, !tf32).is_none(), "{what}");
            }
        }
    }

    #[test]
    fn a_refused_probe_in_the_forward_gives_a_standard_backward() {
        let d = desc(RnnMode::Gru, 64, 4);
        let (mut cache, mut b) = (FakeCache::default(), Fake::default());
        b.refuse.insert((Algo::PersistStaticSmallH, Pass::Training));
        let s = settings(RnnAlgorithm::Auto, false);
        let forward = forward(&mut cache, &mut b, &d, DType::F32, s, Pass::Training).unwrap();
        assert_eq!(forward.0.algo, Algo::Standard);
        assert_eq!(
            b.log,
            [
                "dropout 1",
                "network persist_static_small_h",
                "call persist_static_small_h B4",
                "probe persist_static_small_h Training B4",
                "dropout 2",
                "network standard",
                "call standard B1",
                "probe standard Training B1",
                "call standard B4",
            ]
        );
        b.log.clear();
        let backward = cache
            .trained(&d, DType::F32, Algo::Standard, false)
            .unwrap();
        assert!(Rc::ptr_eq(&forward, &backward));
        assert!(b.log.is_empty(), "{:?}", b.log);
        // The same request again: remembered, nothing built or probed.
        let again = self::forward(&mut cache, &mut b, &d, DType::F32, s, Pass::Training).unwrap();
        assert!(Rc::ptr_eq(&forward, &again));
        assert!(b.log.is_empty(), "{:?}", b.log);
    }

    #[test]
    fn after_a_clear_the_backward_rebuilds_exactly_the_tagged_network_without_a_probe() {
        let d = desc(RnnMode::Lstm, 64, 8);
        for algo in [
            Algo::Standard,
            Algo::PersistStatic,
            Algo::PersistStaticSmallH,
            Algo::PersistDynamic,
        ] {
            let (mut cache, mut b) = (FakeCache::default(), Fake::default());
            assert!(cache.trained(&d, DType::F32, algo, true).is_none());
            let call = cache.rebuild(&mut b, &d, DType::F32, algo, true).unwrap();
            assert_eq!((call.0.algo, call.0.tf32, call.1), (algo, true, 8));
            let name = algo.public();
            assert_eq!(
                b.log,
                [
                    "dropout 1".to_string(),
                    format!("network {name}"),
                    format!("call {name} B8")
                ]
            );
            let found = cache.trained(&d, DType::F32, algo, true).unwrap();
            assert!(Rc::ptr_eq(&call, &found));
        }
    }

    #[test]
    fn an_inference_request_probes_only_the_inference_forward() {
        // LSTM H = 192: small-H runs its forward (Auto picks it for inference) but not its
        // backward (Auto does not pick it for training).
        let d = desc(RnnMode::Lstm, 192, 8);
        let (mut cache, mut b) = (FakeCache::default(), Fake::default());
        b.refuse.insert((Algo::PersistStaticSmallH, Pass::Training));
        let auto = settings(RnnAlgorithm::Auto, false);
        let inference = forward(&mut cache, &mut b, &d, DType::F32, auto, Pass::Inference).unwrap();
        assert_eq!(inference.0.algo, Algo::PersistStaticSmallH);
        assert_eq!(
            b.log,
            [
                "dropout 1",
                "network persist_static_small_h",
                "call persist_static_small_h B8",
                "probe persist_static_small_h Inference B8",
            ]
        );
        b.log.clear();
        let training = forward(&mut cache, &mut b, &d, DType::F32, auto, Pass::Training).unwrap();
        assert_eq!(training.0.algo, Algo::Standard);
        assert!(!b.log.iter().any(|l| l.contains("small_h")), "{:?}", b.log);
        // The explicit choice is probed for training too, refused there, and the standard
        // network (already checked for training) takes over without a second build.
        b.log.clear();
        let explicit = settings(RnnAlgorithm::PersistStaticSmallH, false);
        let chosen = forward(&mut cache, &mut b, &d, DType::F32, explicit, Pass::Training).unwrap();
        assert!(Rc::ptr_eq(&chosen, &training));
        assert_eq!(b.log, ["probe persist_static_small_h Training B8"]);
        // A standard network is probed once per pass, at T = B = 1.
        let standard = settings(RnnAlgorithm::Standard, false);
        let d2 = desc(RnnMode::Gru, 32, 3);
        b.log.clear();
        forward(
            &mut cache,
            &mut b,
            &d2,
            DType::F32,
            standard,
            Pass::Inference,
        )
        .unwrap();
        forward(
            &mut cache,
            &mut b,
            &d2,
            DType::F32,
            standard,
            Pass::Training,
        )
        .unwrap();
        assert_eq!(
            b.log,
            [
                "dropout 3",
                "network standard",
                "call standard B1",
                "probe standard Inference B1",
                "call standard B3",
                "call standard B1",
                "probe standard Training B1",
            ]
        );
    }

    #[test]
    fn persist_dynamic_networks_of_every_batch_size_share_one_dropout_state() {
        let (mut cache, mut b) = (FakeCache::default(), Fake::default());
        let net_dropout = |call: &Rc<(NetKey, usize)>, cache: &FakeCache| {
            let net = cache.networks[&call.0].clone().unwrap();
            net.1
        };
        let mut dropout_of = |algorithm, batch| {
            let d = desc(RnnMode::Lstm, 64, batch);
            let s = settings(algorithm, false);
            let call = forward(&mut cache, &mut b, &d, DType::F32, s, Pass::Training).unwrap();
            (call.0.dynamic_batch, net_dropout(&call, &cache))
        };
        let (dynamic8, dynamic4) = (
            dropout_of(RnnAlgorithm::PersistDynamic, 8),
            dropout_of(RnnAlgorithm::PersistDynamic, 4),
        );
        assert_eq!(
            (dynamic8.0, dynamic4.0),
            (Some(8), Some(4)),
            "one network per batch size"
        );
        assert_eq!(dynamic8.1, dynamic4.1, "one dropout state for both");
        // Every other network has its own, for every batch size.
        let (standard8, standard4) = (
            dropout_of(RnnAlgorithm::Standard, 8),
            dropout_of(RnnAlgorithm::Standard, 4),
        );
        assert_eq!(
            standard8.1, standard4.1,
            "one standard network for both batch sizes"
        );
        assert_ne!(standard8.1, dynamic8.1);
        assert_ne!(dropout_of(RnnAlgorithm::PersistStatic, 8).1, standard8.1);
    }

    #[test]
    fn a_full_cache_is_cleared_and_rebuilt() {
        let (mut cache, mut b) = (FakeCache::default(), Fake::default());
        let s = settings(RnnAlgorithm::Standard, false);
        let first = forward(
            &mut cache,
            &mut b,
            &desc(RnnMode::Gru, 8, 1),
            DType::F32,
            s,
            Pass::Inference,
        )
        .unwrap();
        for batch in 2..=CACHE_LIMIT {
            forward(
                &mut cache,
                &mut b,
                &desc(RnnMode::Gru, 8, batch),
                DType::F32,
                s,
                Pass::Inference,
            )
            .unwrap();
        }
        assert!(cache
            .trained(&desc(RnnMode::Gru, 8, 1), DType::F32, Algo::Standard, false)
            .is_some());
        assert_eq!(cache.requests.len(), CACHE_LIMIT);
        // The next request clears requests and call shapes, not the network.
        b.log.clear();
        forward(
            &mut cache,
            &mut b,
            &desc(RnnMode::Gru, 8, 999),
            DType::F32,
            s,
            Pass::Inference,
        )
        .unwrap();
        assert_eq!(b.log, ["call standard B999"]);
        assert_eq!(cache.requests.len(), 1);
        assert!(cache
            .trained(&desc(RnnMode::Gru, 8, 1), DType::F32, Algo::Standard, false)
            .is_none());
        drop(first);
    }
}
