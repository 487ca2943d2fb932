//! The fused op on `CubeBackend<CudaRuntime, ..>` through cuDNN (Note [cuDNN call protocol]).

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::ptr;
use std::rc::Rc;
use std::sync::Arc;

use burn::tensor::backend::Backend;
use burn::tensor::{DType, Shape, Tensor};
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::{BoolElement, CubeBackend, FloatElement, IntElement};
use cubecl::cuda::{CudaDevice, CudaRuntime};
use cudarc::cudnn::sys;
use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DevicePtr};

use super::ffi::{self, check, CudnnError, DropoutDesc, Handle, RnnDataDesc, RnnDesc, TensorDesc};
use super::weights::{self, WeightPlan, WeightSlot};
use crate::backend::{FusedRnnBackend, RnnGrads, RnnInputs, RnnOutput, RnnOutputGrads, RnnReserve};
use crate::config::{RnnMode, RnnSpec};
use crate::descriptor::RnnDescriptor;
use crate::layout::RnnLayout;
use crate::reference::{self, float, prim};

type Cuda<F, I, BT> = CubeBackend<CudaRuntime, F, I, BT>;

/// `CUDNN_RNN_PADDED_IO_ENABLED`: a `#define` cudarc does not export.
const PADDED_IO_ENABLED: u32 = 1;

/// cuDNN's description of one network on one device, shared by every call shape: per
/// (spec, dropout probability, dtype, TF32).
struct Network {
    rnn: RnnDesc,
    // Kept alive for `rnn`, which refers to it; dropped after it (field order).
    _dropout: DropoutDesc,
    _dropout_states: Option<CudaSlice<u8>>,
    dtype: DType,
    data_type: sys::cudnnDataType_t,
    weight_space_bytes: usize,
    plan: WeightPlan,
}

/// One call shape (T, B, lengths, layout) of a network: data descriptors and the sizes of
/// its temporary buffers.
struct Prepared {
    net: Rc<Network>,
    x: RnnDataDesc,
    y: RnnDataDesc,
    h: TensorDesc,
    c: TensorDesc,
    seq_lengths: Vec<c_int>,
    work_inference: usize,
    work_training: usize,
    reserve_bytes: usize,
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct NetKey {
    spec: RnnSpec,
    dropout_bits: u64,
    dtype: DType,
    tf32: bool,
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct Key {
    net: NetKey,
    seq_length: usize,
    batch_size: usize,
    batch_first: bool,
    seq_lengths: Option<Vec<usize>>,
}

/// Per (thread, device): the handle, the crate's stream, and the networks and call shapes
/// seen (`None`: the reference path runs them). Fields drop in order: call shapes and
/// networks, then the handle, then the stream and the context.
struct DeviceState {
    calls: HashMap<Key, Option<Rc<Prepared>>>,
    networks: HashMap<NetKey, Option<Rc<Network>>>,
    handle: Handle,
    stream: Arc<CudaStream>,
    context: Arc<CudaContext>,
}

impl DeviceState {
    /// Makes this device's context current on the calling thread: cuDNN works in whatever
    /// context is current, and another device's may be.
    fn bind(&self) -> Result<(), String> {
        self.context
            .bind_to_thread()
            .map_err(|e| format!("binding the CUDA context: {e:?}"))
    }
}

impl Drop for DeviceState {
    fn drop(&mut self) {
        // The descriptors, the handle and the dropout states are destroyed in the current
        // context: make it this device's. `bind_to_thread` returns early on an error cudarc
        // recorded earlier, so that is cleared first. A failure cannot be reported here.
        let _ = self.context.check_err();
        let _ = self.context.bind_to_thread();
    }
}

/// Call shapes, and networks, kept per (thread, device) before that cache is cleared.
const CACHE_LIMIT: usize = 256;

thread_local! {
    static DEVICES: RefCell<HashMap<usize, Rc<RefCell<DeviceState>>>> = RefCell::new(HashMap::new());
}

fn device_state(device: &CudaDevice) -> Result<Rc<RefCell<DeviceState>>, String> {
    DEVICES.with(|devices| {
        if let Some(state) = devices.borrow().get(&device.index) {
            return Ok(state.clone());
        }
        let context = CudaContext::new(device.index).map_err(|e| format!("CUDA context: {e:?}"))?;
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
            handle,
            stream,
            context,
        }));
        devices.borrow_mut().insert(device.index, state.clone());
        Ok(state)
    })
}

/// (data type, math precision, math type) for a dtype.
fn data_types(
    dtype: DType,
    tf32: bool,
) -> Option<(
    sys::cudnnDataType_t,
    sys::cudnnDataType_t,
    sys::cudnnMathType_t,
)> {
    use sys::cudnnDataType_t::*;
    use sys::cudnnMathType_t::*;
    Some(match dtype {
        DType::F32 if tf32 => (CUDNN_DATA_FLOAT, CUDNN_DATA_FLOAT, CUDNN_DEFAULT_MATH),
        DType::F32 => (CUDNN_DATA_FLOAT, CUDNN_DATA_FLOAT, CUDNN_FMA_MATH),
        DType::F64 => (CUDNN_DATA_DOUBLE, CUDNN_DATA_DOUBLE, CUDNN_DEFAULT_MATH),
        // PyTorch's choices: half data with F32 math on tensor cores.
        DType::F16 => (CUDNN_DATA_HALF, CUDNN_DATA_FLOAT, CUDNN_TENSOR_OP_MATH),
        // cuDNN's RNN documentation does not list BF16: `build_network`'s probe decides.
        DType::BF16 => (CUDNN_DATA_BFLOAT16, CUDNN_DATA_FLOAT, CUDNN_DEFAULT_MATH),
        _ => return None,
    })
}

/// A size as cuDNN's `int`.
fn int(value: usize, what: &str) -> Result<c_int, String> {
    c_int::try_from(value).map_err(|_| format!("{what} = {value} does not fit cuDNN's int"))
}

/// The prepared call, or `None` for the reference path (Note [cuDNN fallback]).
fn prepared(
    desc: &RnnDescriptor,
    dtype: DType,
    device: &CudaDevice,
) -> Option<(Rc<Prepared>, Rc<RefCell<DeviceState>>)> {
    if !super::enabled() {
        return None;
    }
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
    // One network (and dropout descriptor) per configuration: the per-call seed is not part
    // of the key (module docs, "Dropout").
    let net_key = NetKey {
        spec: desc.spec,
        dropout_bits: desc.dropout.probability.to_bits(),
        dtype,
        tf32: super::tf32(),
    };
    let key = Key {
        net: net_key.clone(),
        seq_length: desc.seq_length,
        batch_size: desc.batch_size,
        batch_first: desc.batch_first,
        seq_lengths: desc.seq_lengths.clone(),
    };
    let mut st = state.borrow_mut();
    if let Some(found) = st.calls.get(&key) {
        return found.clone().map(|p| (p, state.clone()));
    }
    // Warnings are logged once the state is released (a logger may do anything).
    let mut warning = None;
    let built = match st.bind() {
        Err(e) => {
            warning = Some(format!("cuDNN unavailable on {device:?} ({e})"));
            None
        }
        Ok(()) => {
            let net = match st.networks.get(&net_key) {
                Some(found) => found.clone(),
                None => {
                    let built = build_network(&st, desc, &net_key)
                        .map_err(|reason| {
                            warning = Some(format!(
                                "cuDNN does not run {:?} in {dtype:?} ({reason})",
                                desc.spec
                            ))
                        })
                        .ok();
                    if st.networks.len() >= CACHE_LIMIT {
                        // Call shapes hold their network: clear both, so that a network is
                        // never built twice (with a second dropout state) while one lives.
                        st.networks.clear();
                        st.calls.clear();
                    }
                    st.networks.insert(net_key, built.clone());
                    built
                }
            };
            net.and_then(|net| {
                build_call(&st, &net, desc)
                    .map_err(|reason| {
                        warning = Some(format!(
                            "cuDNN does not run {:?} in {dtype:?} at T = {}, B = {} ({reason})",
                            desc.spec, desc.seq_length, desc.batch_size
                        ))
                    })
                    .ok()
                    .map(Rc::new)
            })
        }
    };
    if st.calls.len() >= CACHE_LIMIT {
        st.calls.clear();
    }
    st.calls.insert(key, built.clone());
    drop(st);
    if let Some(warning) = warning {
        log::warn!("burn-fused-rnn: {warning}; using the reference implementation");
    }
    built.map(|p| (p, state))
}

fn cudnn_err(e: CudnnError) -> String {
    format!("{e} ({})", ffi::status_text(e.status))
}

/// The network's descriptors and weight plan, checked by one small training forward and
/// backward (`probe`).
fn build_network(
    st: &DeviceState,
    desc: &RnnDescriptor,
    key: &NetKey,
) -> Result<Rc<Network>, String> {
    let err = cudnn_err;
    let (data_type, ..) = data_types(key.dtype, key.tf32).ok_or("unsupported dtype")?;
    let elem = key.dtype.size();
    let spec = &desc.spec;
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
        let (ptr, _sync) = buffer.device_ptr(&st.stream);
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
        drop(_sync);
        states = Some(buffer);
    } else {
        // SAFETY: probability 0 needs no state buffer (null, size 0).
        check("cudnnSetDropoutDescriptor", unsafe {
            sys::cudnnSetDropoutDescriptor(dropout.0, handle, 0.0, ptr::null_mut(), 0, 0)
        })
        .map_err(err)?;
    }

    let rnn = rnn_descriptor(spec, key, &dropout)?;

    let mut weight_space_bytes = 0usize;
    // SAFETY: live handle and descriptor, valid out pointer.
    check("cudnnGetRNNWeightSpaceSize", unsafe {
        sys::cudnnGetRNNWeightSpaceSize(handle, rnn.0, &mut weight_space_bytes)
    })
    .map_err(err)?;
    let plan = weight_plan(st, &rnn, desc, weight_space_bytes, elem)?;
    let net = Rc::new(Network {
        rnn,
        _dropout: dropout,
        _dropout_states: states,
        dtype: key.dtype,
        data_type,
        weight_space_bytes,
        plan,
    });
    probe(st, &net, desc)?;
    Ok(net)
}

/// The RNN descriptor of a network: host only (no handle, no device memory), so cuDNN's
/// acceptance of it is testable on a machine without a GPU.
fn rnn_descriptor(spec: &RnnSpec, key: &NetKey, dropout: &DropoutDesc) -> Result<RnnDesc, String> {
    use sys::cudnnDirectionMode_t::*;
    use sys::cudnnRNNBiasMode_t::*;
    use sys::cudnnRNNInputMode_t::*;
    use sys::cudnnRNNMode_t::*;
    let err = cudnn_err;
    let (data_type, math_prec, math_type) =
        data_types(key.dtype, key.tf32).ok_or("unsupported dtype")?;
    let rnn = RnnDesc::new().map_err(err)?;
    let cell = match spec.mode {
        RnnMode::Lstm => CUDNN_LSTM,
        RnnMode::Gru => CUDNN_GRU,
        RnnMode::RnnTanh => CUDNN_RNN_TANH,
        RnnMode::RnnRelu => CUDNN_RNN_RELU,
    };
    let input_mode = if spec.skip_input {
        CUDNN_SKIP_INPUT
    } else {
        CUDNN_LINEAR_INPUT
    };
    let (d_input, d_hidden) = (
        int(spec.d_input, "d_input")?,
        int(spec.d_hidden, "d_hidden")?,
    );
    let (d_state, layers) = (
        int(spec.d_state(), "P")?,
        int(spec.num_layers, "num_layers")?,
    );
    // SAFETY: all descriptors are live; the values are checked by cuDNN.
    check("cudnnSetRNNDescriptor_v8", unsafe {
        sys::cudnnSetRNNDescriptor_v8(
            rnn.0,
            sys::cudnnRNNAlgo_t::CUDNN_RNN_ALGO_STANDARD,
            cell,
            if spec.bias {
                CUDNN_RNN_DOUBLE_BIAS
            } else {
                CUDNN_RNN_NO_BIAS
            },
            if spec.bidirectional {
                CUDNN_BIDIRECTIONAL
            } else {
                CUDNN_UNIDIRECTIONAL
            },
            input_mode,
            data_type,
            math_prec,
            math_type,
            d_input,
            d_hidden,
            d_state,
            layers,
            dropout.0,
            PADDED_IO_ENABLED,
        )
    })
    .map_err(err)?;
    Ok(rnn)
}

/// The data descriptors of one call shape: host only, like [`rnn_descriptor`].
#[allow(clippy::type_complexity)]
fn call_descriptors(
    desc: &RnnDescriptor,
    data_type: sys::cudnnDataType_t,
) -> Result<(RnnDataDesc, RnnDataDesc, TensorDesc, TensorDesc, Vec<c_int>), String> {
    use sys::cudnnRNNDataLayout_t::*;
    let err = cudnn_err;
    let spec = &desc.spec;
    let seq_lengths = (0..desc.batch_size)
        .map(|b| int(desc.seq_length_of(b), "a sequence length"))
        .collect::<Result<Vec<c_int>, String>>()?;
    let layout = if desc.batch_first {
        CUDNN_RNN_DATA_LAYOUT_BATCH_MAJOR_UNPACKED
    } else {
        CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED
    };
    let seq_length = int(desc.seq_length, "seq_length")?;
    let mut zero = [0u8; 8];
    let x = RnnDataDesc::new().map_err(err)?;
    let d_input = int(spec.d_input, "d_input")?;
    ffi::set_rnn_data(
        &x,
        data_type,
        layout,
        seq_length,
        &seq_lengths,
        d_input,
        &mut zero,
    )
    .map_err(err)?;
    let y = RnnDataDesc::new().map_err(err)?;
    let d_output = int(spec.output_size(), "D*P")?;
    ffi::set_rnn_data(
        &y,
        data_type,
        layout,
        seq_length,
        &seq_lengths,
        d_output,
        &mut zero,
    )
    .map_err(err)?;
    let state_desc = |shape: [usize; 3]| -> Result<TensorDesc, String> {
        let [a, b, c] = shape;
        let dims = [
            int(a, "L*D")?,
            int(b, "batch_size")?,
            int(c, "the state size")?,
        ];
        let strides = [int(b * c, "a state stride")?, dims[2], 1];
        let t = TensorDesc::new().map_err(err)?;
        ffi::set_tensor_3d(&t, data_type, dims, strides).map_err(err)?;
        Ok(t)
    };
    let h = state_desc(desc.hidden_shape())?;
    let c = state_desc(desc.cell_shape())?;
    Ok((x, y, h, c, seq_lengths))
}

/// The data descriptors and temporary sizes of one call shape.
fn build_call(
    st: &DeviceState,
    net: &Rc<Network>,
    desc: &RnnDescriptor,
) -> Result<Prepared, String> {
    let err = cudnn_err;
    let (x, y, h, c, seq_lengths) = call_descriptors(desc, net.data_type)?;

    let (mut work_inference, mut work_training, mut reserve_bytes, mut unused) = (0, 0, 0, 0);
    // SAFETY: live handle and descriptors, valid out pointers.
    check("cudnnGetRNNTempSpaceSizes", unsafe {
        sys::cudnnGetRNNTempSpaceSizes(
            st.handle.raw,
            net.rnn.0,
            sys::cudnnForwardMode_t::CUDNN_FWD_MODE_INFERENCE,
            x.0,
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
            x.0,
            &mut work_training,
            &mut reserve_bytes,
        )
    })
    .map_err(err)?;
    Ok(Prepared {
        net: net.clone(),
        x,
        y,
        h,
        c,
        seq_lengths,
        work_inference,
        work_training,
        reserve_bytes,
    })
}

/// Device pointers of one call; null where a tensor is absent (cuDNN reads zeros for a
/// null `hx`, `cx`, `dhy` or `dcy`) or unused (the gradients in a forward).
struct Buffers {
    lengths: *const c_int,
    x: *mut c_void,
    y: *mut c_void,
    hx: *mut c_void,
    hy: *mut c_void,
    cx: *mut c_void,
    cy: *mut c_void,
    w: *mut c_void,
    work: *mut c_void,
    reserve: *mut c_void,
    dx: *mut c_void,
    dy: *mut c_void,
    dhx: *mut c_void,
    dhy: *mut c_void,
    dcx: *mut c_void,
    dcy: *mut c_void,
    dw: *mut c_void,
}

impl Buffers {
    fn null() -> Self {
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
/// of `p` and its network give (the workspace of the mode, the reserve in training), no
/// other work uses them, they stay allocated until the handle's stream has been
/// synchronized, and the device's context is current.
unsafe fn run_forward(
    st: &DeviceState,
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
            st.handle.raw,
            p.net.rnn.0,
            mode,
            b.lengths,
            p.x.0,
            b.x,
            p.y.0,
            b.y,
            p.h.0,
            b.hx,
            b.hy,
            p.c.0,
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
/// configuration filled.
unsafe fn run_backward_data(st: &DeviceState, p: &Prepared, b: &Buffers) -> sys::cudnnStatus_t {
    // SAFETY: this function's contract.
    unsafe {
        sys::cudnnRNNBackwardData_v8(
            st.handle.raw,
            p.net.rnn.0,
            b.lengths,
            p.y.0,
            b.y,
            b.dy,
            p.x.0,
            b.dx,
            p.h.0,
            b.hx,
            b.dhy,
            b.dhx,
            p.c.0,
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
unsafe fn run_backward_weights(st: &DeviceState, p: &Prepared, b: &Buffers) -> sys::cudnnStatus_t {
    // SAFETY: this function's contract.
    unsafe {
        sys::cudnnRNNBackwardWeights_v8(
            st.handle.raw,
            p.net.rnn.0,
            sys::cudnnWgradMode_t::CUDNN_WGRAD_MODE_ADD,
            b.lengths,
            p.x.0,
            b.x,
            p.h.0,
            b.hx,
            p.y.0,
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

/// Runs one training forward, backward data and backward weights of the network at
/// `T = B = 1` on zeros: cuDNN may refuse a network and dtype (BF16 on some versions and
/// GPUs) only when it executes, and a refusal found here means the reference path for the
/// whole network instead of a panic in the middle of a user's step. A refusal that
/// depends on the call shape or layout is not caught here; it panics in the call.
fn probe(st: &DeviceState, net: &Rc<Network>, desc: &RnnDescriptor) -> Result<(), String> {
    let tiny = RnnDescriptor::new(desc.spec, 1, 1, false, None, desc.dropout);
    let p = build_call(st, net, &tiny)?;
    let elem = net.dtype.size();
    let bytes = |shape: [usize; 3]| shape.iter().product::<usize>() * elem;
    let alloc = |bytes: usize| {
        st.stream
            .alloc_zeros::<u8>(bytes.max(1))
            .map_err(|e| format!("probe buffer: {e:?}"))
    };
    // A value and its gradient.
    let pair = |bytes: usize| -> Result<_, String> { Ok((alloc(bytes)?, alloc(bytes)?)) };
    let (x, dx) = pair(bytes(tiny.input_shape()))?;
    let (y, dy) = pair(bytes(tiny.output_shape()))?;
    let (hy, dhx) = pair(bytes(tiny.hidden_shape()))?;
    let (cy, dcx) = pair(bytes(tiny.cell_shape()))?;
    let (w, dw) = pair(net.weight_space_bytes)?;
    let (work, reserve) = (alloc(p.work_training)?, alloc(p.reserve_bytes)?);
    let lengths = st
        .stream
        .clone_htod(&p.seq_lengths)
        .map_err(|e| format!("probe buffer: {e:?}"))?;
    let lstm = desc.spec.mode.has_cell_state();
    let ptr = |s: &CudaSlice<u8>| s.device_ptr(&st.stream).0 as *mut c_void;
    let b = Buffers {
        lengths: lengths.device_ptr(&st.stream).0 as *const c_int,
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
    // Stops at the first refusal; the stream is synchronized before the buffers drop, also
    // when a call fails.
    let run = || -> Result<(), CudnnError> {
        // SAFETY (the three calls): every buffer of `b` is a live cudarc allocation on the
        // handle's stream, sized from the descriptors of `p` (T = B = 1) and the network's
        // sizes, and dropped only after the stream is synchronized below; `hx`, `cx`, `dhy`
        // and `dcy` are null (zeros); `bind` made the context current (`prepared`). They
        // run in order on one stream, and `dw` starts at zero.
        check("cudnnRNNForward", unsafe { run_forward(st, &p, &b, true) })?;
        // SAFETY: as above.
        check("cudnnRNNBackwardData_v8", unsafe {
            run_backward_data(st, &p, &b)
        })?;
        // SAFETY: as above.
        check("cudnnRNNBackwardWeights_v8", unsafe {
            run_backward_weights(st, &p, &b)
        })
    };
    let ran = run();
    let synced = sync_stream(st);
    ran.map_err(cudnn_err)?;
    synced.map_err(|e| format!("probe: CUDA stream synchronize failed: {e:?}"))
}

/// Reads cuDNN's weight-space layout and plans the canonical ↔ cuDNN mapping (Note
/// [Weight space verification]).
fn weight_plan(
    st: &DeviceState,
    rnn: &RnnDesc,
    desc: &RnnDescriptor,
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
    let spec = &desc.spec;
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
                    Ok(Some((offset / elem, tensor_len(desc).map_err(err)?)))
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

/// Elements of a tensor descriptor cuDNN filled (0 for a descriptor with no dims).
fn tensor_len(desc: &TensorDesc) -> Result<usize, CudnnError> {
    let mut dtype = sys::cudnnDataType_t::CUDNN_DATA_FLOAT;
    let mut nb: c_int = 0;
    let mut dims = [0 as c_int; 8];
    let mut strides = [0 as c_int; 8];
    // SAFETY: live descriptor; the arrays hold the 8 dims requested.
    check("cudnnGetTensorNdDescriptor", unsafe {
        sys::cudnnGetTensorNdDescriptor(
            desc.0,
            8,
            &mut dtype,
            &mut nb,
            dims.as_mut_ptr(),
            strides.as_mut_ptr(),
        )
    })?;
    if nb <= 0 {
        return Ok(0);
    }
    Ok(dims[..nb.min(8) as usize]
        .iter()
        .map(|&d| d.max(0) as usize)
        .product())
}

/// The canonical flat weights as cuDNN's weight space (Note [Weight space verification]).
pub(crate) fn to_weight_space<B: Backend>(plan: &WeightPlan, w: Tensor<B, 1>) -> Tensor<B, 1> {
    let WeightPlan::Repack { copies, space_len } = plan else {
        return w;
    };
    let (device, dtype) = (w.device(), w.dtype());
    let mut pieces = Vec::new();
    let mut at = 0;
    for c in copies {
        if c.to > at {
            pieces.push(Tensor::zeros([c.to - at], (&device, dtype)));
        }
        pieces.push(w.clone().narrow(0, c.from, c.len));
        at = c.to + c.len;
    }
    if *space_len > at {
        pieces.push(Tensor::zeros([space_len - at], (&device, dtype)));
    }
    Tensor::cat(pieces, 0)
}

/// cuDNN's weight-space gradient as the canonical flat gradient.
pub(crate) fn from_weight_space<B: Backend>(plan: &WeightPlan, dw: Tensor<B, 1>) -> Tensor<B, 1> {
    let WeightPlan::Repack { copies, .. } = plan else {
        return dw;
    };
    let mut by_canonical = copies.clone();
    by_canonical.sort_by_key(|c| c.from);
    Tensor::cat(
        by_canonical
            .iter()
            .map(|c| dw.clone().narrow(0, c.to, c.len))
            .collect(),
        0,
    )
}

type CudaTensor = CubeTensor<CudaRuntime>;

/// A contiguous buffer from `client.empty` (never `Tensor::zeros`/`empty`: cubecl pads
/// their rows, and cuDNN reads packed data).
fn empty(like: &CudaTensor, shape: Vec<usize>, dtype: DType) -> CudaTensor {
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

fn shape(t: &CudaTensor) -> &[usize] {
    t.meta.shape().as_slice()
}

/// Device pointers of cubecl buffers, with the guards that keep them valid until the
/// cuDNN work on them has finished (Note [cuDNN call protocol]).
#[derive(Default)]
struct Guards(Vec<Box<dyn std::any::Any>>);

impl Guards {
    /// The buffer's device pointer; panics if the buffer is smaller than the tensor's shape
    /// and dtype say (its fields are public: this backs every size check up).
    fn ptr(&mut self, t: &CudaTensor) -> *mut c_void {
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

    fn opt(&mut self, t: Option<&CudaTensor>) -> *mut c_void {
        t.map_or(ptr::null_mut(), |t| self.ptr(t))
    }
}

fn device_lengths(like: &CudaTensor, lengths: &[c_int]) -> CudaTensor {
    let bytes: Vec<u8> = lengths.iter().flat_map(|l| l.to_ne_bytes()).collect();
    let handle = like.client.create_from_slice(&bytes);
    CubeTensor::new_contiguous(
        like.client.clone(),
        like.device.clone(),
        Shape::from(vec![lengths.len()]),
        handle,
        DType::I32,
    )
}

/// Waits for cubecl's queued work on the buffers whose pointers were taken.
fn sync_cubecl(like: &CudaTensor) {
    cubecl::future::block_on(like.client.sync())
        .unwrap_or_else(|e| panic!("burn-fused-rnn: cubecl sync failed: {e:?}"));
}

/// Synchronizes the crate's stream. cudarc's `synchronize` returns at once, without
/// waiting, when an earlier cudarc call recorded an error: that error is cleared first.
fn sync_stream(state: &DeviceState) -> Result<(), cudarc::driver::DriverError> {
    if let Err(e) = state.context.check_err() {
        log::warn!("burn-fused-rnn: an earlier CUDA error was pending: {e:?}");
    }
    state.stream.synchronize()
}

/// Panics after a failure while work on the guarded buffers may still be queued: waits for
/// the stream first and, if even that fails, leaks the guards rather than let cubecl reuse
/// memory a kernel may still touch.
fn fail(state: &DeviceState, g: &mut Guards, message: String) -> ! {
    if sync_stream(state).is_err() {
        std::mem::forget(std::mem::take(&mut g.0));
    }
    panic!("burn-fused-rnn: {message}");
}

/// Waits for the crate's stream, after which the guards may drop.
fn wait(state: &DeviceState, g: &mut Guards) {
    if let Err(e) = sync_stream(state) {
        fail(state, g, format!("CUDA stream synchronize failed: {e:?}"));
    }
}

/// Checks the status of a cuDNN call just launched.
fn launched(state: &DeviceState, g: &mut Guards, call: &'static str, status: sys::cudnnStatus_t) {
    if let Err(e) = check(call, status) {
        let text = ffi::status_text(e.status);
        fail(state, g, format!("{e} ({text}) (Note [cuDNN fallback])"));
    }
    super::count_call();
}

/// Zeroes `bytes` at `ptr` on the crate's stream (ordered before the cuDNN calls).
fn zero(state: &DeviceState, g: &mut Guards, ptr: *mut c_void, bytes: usize) {
    // SAFETY: `ptr` is a buffer of at least `bytes` bytes held by a guard in `g` until the
    // stream has been synchronized. cubecl allocated it (stream-ordered, on its stream) and
    // `sync_cubecl` has waited for that stream, so the allocation and every earlier use are
    // complete and another stream of the same (primary) context may write it.
    let set = unsafe {
        cudarc::driver::result::memset_d8_async(ptr as u64, 0, bytes, state.stream.cu_stream())
    };
    if let Err(e) = set {
        fail(state, g, format!("CUDA memset failed: {e:?}"));
    }
}

/// The shape and dtype checks `fused_rnn` makes, and the device, repeated here because
/// the trait's methods are public and safe and cuDNN trusts every pointer and size: a
/// mismatch panics before any pointer reaches it.
fn check_inputs<F: FloatElement, I: IntElement, BT: BoolElement>(
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
fn check_tensor(name: &str, t: Option<&CudaTensor>, x: &CudaTensor, expected: Option<[usize; 3]>) {
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

/// Whether a reserve is cuDNN's (one 1-D F32 buffer); the reference's are 3-D tensors.
fn is_cudnn_reserve(reserve: &RnnReserve<impl Backend<FloatTensorPrimitive = CudaTensor>>) -> bool {
    matches!(reserve.tensors.as_slice(), [t] if shape(t).len() == 1 && t.dtype == DType::F32)
}

fn weight_space<F: FloatElement, I: IntElement, BT: BoolElement>(
    p: &Prepared,
    weights: CudaTensor,
) -> CudaTensor {
    let w: Tensor<Cuda<F, I, BT>, 1> = float(weights);
    into_contiguous(prim(to_weight_space(&p.net.plan, w)))
}

fn forward<F: FloatElement, I: IntElement, BT: BoolElement>(
    p: &Prepared,
    state: &RefCell<DeviceState>,
    desc: &RnnDescriptor,
    inputs: RnnInputs<Cuda<F, I, BT>>,
    training: bool,
) -> (RnnOutput<Cuda<F, I, BT>>, Option<CudaTensor>) {
    check_inputs(desc, p, &inputs);
    let dtype = p.net.dtype;
    let x = into_contiguous(inputs.x);
    let h0 = inputs.h0.map(into_contiguous);
    let c0 = inputs.c0.map(into_contiguous);
    let w = weight_space::<F, I, BT>(p, inputs.weights);
    let lstm = desc.spec.mode.has_cell_state();
    let y = empty(&x, desc.output_shape().to_vec(), dtype);
    let hy = empty(&x, desc.hidden_shape().to_vec(), dtype);
    let cy = lstm.then(|| empty(&x, desc.cell_shape().to_vec(), dtype));
    let work_bytes = if training {
        p.work_training
    } else {
        p.work_inference
    };
    let work = empty(&x, vec![work_bytes.max(1)], DType::U8);
    let reserve = training.then(|| empty(&x, vec![p.reserve_bytes.div_ceil(4).max(1)], DType::F32));
    let lengths = device_lengths(&x, &p.seq_lengths);

    let mut g = Guards::default();
    let b = Buffers {
        lengths: g.ptr(&lengths) as *const c_int,
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
    sync_cubecl(&x);
    let st = state.borrow();
    st.bind().unwrap_or_else(|e| panic!("burn-fused-rnn: {e}"));
    // SAFETY: every pointer is a live device buffer of the size cuDNN expects for the
    // descriptors of `p` (inputs checked against the descriptor and the input's device by
    // `check_inputs` and made contiguous; outputs, workspace and reserve allocated above
    // from those sizes; `Guards::ptr` checked each buffer's size); the guards in `g` keep
    // them allocated, cubecl's work on them has finished (`sync_cubecl`), the context is
    // current (`bind`), and `launched`/`wait` wait for cuDNN before the guards drop.
    let status = unsafe { run_forward(&st, p, &b, training) };
    launched(&st, &mut g, "cudnnRNNForward", status);
    wait(&st, &mut g);
    drop(g);
    (
        RnnOutput {
            y,
            h_n: hy,
            c_n: cy,
        },
        reserve,
    )
}

#[allow(clippy::too_many_arguments)]
fn backward<F: FloatElement, I: IntElement, BT: BoolElement>(
    p: &Prepared,
    state: &RefCell<DeviceState>,
    desc: &RnnDescriptor,
    inputs: RnnInputs<Cuda<F, I, BT>>,
    output: RnnOutput<Cuda<F, I, BT>>,
    reserve: CudaTensor,
    grads: RnnOutputGrads<Cuda<F, I, BT>>,
) -> RnnGrads<Cuda<F, I, BT>> {
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
        "expected the reserve of a cuDNN training forward of this configuration (at least {} F32 elements, on {:?}), got {reserve_len} elements on {:?}: a training forward and its backward must run under the same TF32 setting (`cudnn::set_tf32`)",
        p.reserve_bytes.div_ceil(4),
        x.device,
        reserve.device
    );
    let dtype = p.net.dtype;
    let x = into_contiguous(inputs.x);
    let h0 = inputs.h0.map(into_contiguous);
    let c0 = inputs.c0.map(into_contiguous);
    let w = weight_space::<F, I, BT>(p, inputs.weights);
    let y = into_contiguous(output.y);
    let dy = grads.dy.map(into_contiguous);
    let dy_zeros = dy.is_none();
    let dy = dy.unwrap_or_else(|| empty(&x, desc.output_shape().to_vec(), dtype));
    let dhy = grads.dh_n.map(into_contiguous);
    let dcy = grads.dc_n.map(into_contiguous);
    // BackwardData updates the reserve in place: work on a copy when it is shared.
    let reserve = into_contiguous(reserve);
    let reserve = if reserve.can_mut() {
        reserve
    } else {
        reserve.copy()
    };
    let dx = empty(&x, desc.input_shape().to_vec(), dtype);
    let dhx = empty(&x, desc.hidden_shape().to_vec(), dtype);
    let dcx = lstm.then(|| empty(&x, desc.cell_shape().to_vec(), dtype));
    let dw = empty(&x, vec![p.net.weight_space_bytes / dtype.size()], dtype);
    let work = empty(&x, vec![p.work_training.max(1)], DType::U8);
    let lengths = device_lengths(&x, &p.seq_lengths);

    let mut g = Guards::default();
    let b = Buffers {
        lengths: g.ptr(&lengths) as *const c_int,
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
    sync_cubecl(&x);
    let st = state.borrow();
    st.bind().unwrap_or_else(|e| panic!("burn-fused-rnn: {e}"));
    let bytes = |shape: [usize; 3]| shape.iter().product::<usize>() * dtype.size();
    if dy_zeros {
        zero(&st, &mut g, b.dy, bytes(desc.output_shape()));
    }
    if desc.seq_lengths.is_some() {
        // cuDNN documents its padding fill for outputs only; dx past a sequence's end must
        // be zero (the reference's gradient there).
        zero(&st, &mut g, b.dx, bytes(desc.input_shape()));
    }
    // WGRAD_MODE_ADD accumulates into dw.
    zero(&st, &mut g, b.dw, p.net.weight_space_bytes);
    // SAFETY: as in `forward`, with the output, gradient and reserve checks above; the
    // reserve holds at least the bytes this configuration's training forward fills, and no
    // other tensor shares it. BackwardData runs first: it updates the reserve that
    // BackwardWeights reads; both run on the handle's stream after the memsets.
    let status = unsafe { run_backward_data(&st, p, &b) };
    launched(&st, &mut g, "cudnnRNNBackwardData_v8", status);
    // SAFETY: as above; `dw` was zeroed.
    let status = unsafe { run_backward_weights(&st, p, &b) };
    launched(&st, &mut g, "cudnnRNNBackwardWeights_v8", status);
    wait(&st, &mut g);
    drop(g);
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

/// Burn's CUDA backend: cuDNN, or the reference when cuDNN cannot run the call (Note
/// [cuDNN fallback]). `burn::backend::Cuda` (`Fusion<..>` of this) and `Autodiff<..>` go
/// through these methods too.
impl<F: FloatElement, I: IntElement, BT: BoolElement> FusedRnnBackend for Cuda<F, I, BT> {
    fn fused_rnn_forward(desc: &RnnDescriptor, inputs: RnnInputs<Self>) -> RnnOutput<Self> {
        match prepared(desc, inputs.x.dtype, &inputs.x.device) {
            Some((p, state)) => forward::<F, I, BT>(&p, &state, desc, inputs, false).0,
            None => reference::forward::<Self>(desc, inputs),
        }
    }

    fn fused_rnn_forward_training(
        desc: &RnnDescriptor,
        inputs: RnnInputs<Self>,
    ) -> (RnnOutput<Self>, RnnReserve<Self>) {
        match prepared(desc, inputs.x.dtype, &inputs.x.device) {
            Some((p, state)) => {
                let (out, reserve) = forward::<F, I, BT>(&p, &state, desc, inputs, true);
                let reserve = reserve.expect("a training forward has a reserve");
                (
                    out,
                    RnnReserve {
                        tensors: vec![reserve],
                    },
                )
            }
            None => reference::forward_training::<Self>(desc, inputs),
        }
    }

    fn fused_rnn_reserve_layout(
        desc: &RnnDescriptor,
        dtype: DType,
        device: &Self::Device,
    ) -> Vec<(Vec<usize>, DType)> {
        match prepared(desc, dtype, device) {
            Some((p, _)) => vec![(vec![p.reserve_bytes.div_ceil(4).max(1)], DType::F32)],
            None => reference::reserve_layout(desc, dtype),
        }
    }

    fn fused_rnn_backward(
        desc: &RnnDescriptor,
        inputs: RnnInputs<Self>,
        output: RnnOutput<Self>,
        reserve: RnnReserve<Self>,
        grads: RnnOutputGrads<Self>,
    ) -> RnnGrads<Self> {
        // The reserve says which path the training forward took (Note [cuDNN fallback]).
        if !is_cudnn_reserve(&reserve) {
            return reference::backward::<Self>(desc, inputs, output, reserve, grads);
        }
        match prepared(desc, inputs.x.dtype, &inputs.x.device) {
            Some((p, state)) => {
                let [reserve]: [CudaTensor; 1] = reserve
                    .tensors
                    .try_into()
                    .expect("is_cudnn_reserve: one buffer");
                backward::<F, I, BT>(&p, &state, desc, inputs, output, reserve, grads)
            }
            None => panic!(
                "expected cuDNN to run the backward of a cuDNN training forward, but it no longer runs this configuration: switch `cudnn::set_enabled` back on, or keep it off for the training forward too"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::FusedRnnConfig;
    use crate::cudnn::weights::Copy;
    use burn::backend::NdArray;

    /// cuDNN (the real library, host side: no GPU needed) accepts the RNN and data
    /// descriptors this crate builds for every parity case in every dtype and math mode,
    /// and refuses a projection wider than the hidden size, so its checks are live. Needs a
    /// loadable libcudnn 9 (README, "GPU"); CI has none and prints SKIPPED.
    #[cfg(feature = "testing")]
    #[test]
    fn cudnn_accepts_every_descriptor_of_the_parity_suite() {
        if let Err(why) = crate::cudnn::cudnn_version() {
            eprintln!("SKIPPED cudnn_accepts_every_descriptor_of_the_parity_suite: {why}");
            return;
        }
        let dropout = DropoutDesc::new().unwrap();
        let mut checked = 0;
        for case in crate::testing::parity_cases() {
            let desc = case.descriptor();
            for (dtype, tf32) in [
                (DType::F32, false),
                (DType::F32, true),
                (DType::F64, false),
                (DType::F16, false),
                (DType::BF16, false),
            ] {
                let key = NetKey {
                    spec: desc.spec,
                    dropout_bits: 0,
                    dtype,
                    tf32,
                };
                let name = format!("{} {dtype:?} tf32={tf32}", case.name());
                rnn_descriptor(&desc.spec, &key, &dropout)
                    .unwrap_or_else(|e| panic!("{name}: RNN descriptor: {e}"));
                let (data_type, ..) = data_types(dtype, tf32).unwrap();
                call_descriptors(&desc, data_type)
                    .unwrap_or_else(|e| panic!("{name}: data descriptors: {e}"));
                checked += 1;
            }
        }
        assert_eq!(checked, 5 * crate::testing::parity_cases().len());
        let mut wide = FusedRnnConfig::new(RnnMode::Lstm, 4, 4)
            .with_proj_size(Some(3))
            .spec();
        wide.proj_size = Some(5);
        let key = NetKey {
            spec: wide,
            dropout_bits: 0,
            dtype: DType::F32,
            tf32: false,
        };
        let err = rnn_descriptor(&wide, &key, &dropout).err();
        assert!(
            err.as_deref()
                .is_some_and(|e| e.starts_with("cudnnSetRNNDescriptor_v8 returned")),
            "expected cuDNN to refuse a projection wider than the hidden size, got {err:?}"
        );
    }

    #[test]
    fn repack_round_trips_through_a_shuffled_weight_space() {
        let spec = FusedRnnConfig::new(RnnMode::Gru, 2, 2).spec();
        let n = crate::layout::params_size(&spec);
        // Canonical [0, 6) goes to [10, 16), [6, n) to [0, n - 6); [n - 6, 10) and
        // [16, 20) are gaps cuDNN would own.
        let plan = WeightPlan::Repack {
            copies: vec![
                Copy {
                    from: 6,
                    to: 0,
                    len: n - 6,
                },
                Copy {
                    from: 0,
                    to: n + 4,
                    len: 6,
                },
            ],
            space_len: n + 14,
        };
        let device = Default::default();
        let values: Vec<f32> = (0..n).map(|i| i as f32 + 1.0).collect();
        let w = Tensor::<NdArray, 1>::from_floats(values.as_slice(), &device);
        let space = to_weight_space(&plan, w);
        let got: Vec<f32> = space.clone().into_data().to_vec().unwrap();
        assert_eq!(got.len(), n + 14);
        assert_eq!(&got[..n - 6], &values[6..]);
        assert_eq!(&got[n - 6..n + 4], &vec![0.0; 10][..]);
        assert_eq!(&got[n + 4..n + 10], &values[..6]);
        assert_eq!(&got[n + 10..], &[0.0; 4]);
        let back: Vec<f32> = from_weight_space(&plan, space)
            .into_data()
            .to_vec()
            .unwrap();
        assert_eq!(back, values);
    }
}
