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
use cudarc::driver::{CudaContext, CudaStream, DevicePtr};

use super::ffi::{self, check, CudnnError, DropoutDesc, Handle, RnnDataDesc, RnnDesc, TensorDesc};
use super::weights::{self, WeightPlan, WeightSlot};
use crate::backend::{FusedRnnBackend, RnnGrads, RnnInputs, RnnOutput, RnnOutputGrads, RnnReserve};
use crate::config::RnnMode;
use crate::descriptor::RnnDescriptor;
use crate::layout::RnnLayout;
use crate::reference::{self, float, prim};

type Cuda<F, I, BT> = CubeBackend<CudaRuntime, F, I, BT>;

/// `CUDNN_RNN_PADDED_IO_ENABLED`: a `#define` cudarc does not export.
const PADDED_IO_ENABLED: u32 = 1;

/// cuDNN's description of one configuration on one device (cached per thread).
struct Prepared {
    rnn: RnnDesc,
    x: RnnDataDesc,
    y: RnnDataDesc,
    h: TensorDesc,
    c: TensorDesc,
    // Kept alive for `rnn`, which refers to it; dropped after it (field order).
    _dropout: DropoutDesc,
    _dropout_states: Option<cudarc::driver::CudaSlice<u8>>,
    seq_lengths: Vec<c_int>,
    weight_space_bytes: usize,
    plan: WeightPlan,
    work_inference: usize,
    work_training: usize,
    reserve_bytes: usize,
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct Key {
    desc: RnnDescriptor,
    dtype: DType,
    tf32: bool,
}

/// Per (thread, device): the handle, the crate's stream, and the configurations seen.
/// Fields drop in order: descriptors, then the handle, then the stream and context.
struct DeviceState {
    cache: HashMap<Key, Option<Rc<Prepared>>>,
    handle: Handle,
    stream: Arc<CudaStream>,
    _context: Arc<CudaContext>,
}

/// Configurations kept per (thread, device) before the cache is cleared.
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
        // drops first (field order of `DeviceState`).
        let handle = unsafe { Handle::new(stream.cu_stream() as sys::cudaStream_t) }
            .map_err(|e| e.to_string())?;
        let state = Rc::new(RefCell::new(DeviceState {
            cache: HashMap::new(),
            handle,
            stream,
            _context: context,
        }));
        devices.borrow_mut().insert(device.index, state.clone());
        Ok(state)
    })
}

fn data_types(
    dtype: DType,
) -> Option<(
    sys::cudnnDataType_t,
    sys::cudnnDataType_t,
    sys::cudnnMathType_t,
)> {
    use sys::cudnnDataType_t::*;
    use sys::cudnnMathType_t::*;
    Some(match dtype {
        DType::F32 if super::tf32() => (CUDNN_DATA_FLOAT, CUDNN_DATA_FLOAT, CUDNN_DEFAULT_MATH),
        DType::F32 => (CUDNN_DATA_FLOAT, CUDNN_DATA_FLOAT, CUDNN_FMA_MATH),
        DType::F64 => (CUDNN_DATA_DOUBLE, CUDNN_DATA_DOUBLE, CUDNN_DEFAULT_MATH),
        DType::F16 => (CUDNN_DATA_HALF, CUDNN_DATA_FLOAT, CUDNN_TENSOR_OP_MATH),
        DType::BF16 => (CUDNN_DATA_BFLOAT16, CUDNN_DATA_FLOAT, CUDNN_TENSOR_OP_MATH),
        _ => return None,
    })
}

/// The prepared configuration, or `None` for the reference path (Note [cuDNN fallback]).
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
    // One dropout descriptor per configuration: the per-call seed is not part of the key
    // (module docs, "Dropout").
    let mut key_desc = desc.clone();
    key_desc.dropout.seed = 0;
    let key = Key {
        desc: key_desc,
        dtype,
        tf32: super::tf32(),
    };
    let mut st = state.borrow_mut();
    if let Some(found) = st.cache.get(&key) {
        return found.clone().map(|p| (p, state.clone()));
    }
    let built = match build(&st, desc, dtype) {
        Ok(p) => Some(Rc::new(p)),
        Err(reason) => {
            log::warn!(
                "burn-fused-rnn: cuDNN does not run {:?} in {dtype:?} ({reason}); using the reference implementation",
                desc.spec
            );
            None
        }
    };
    if st.cache.len() >= CACHE_LIMIT {
        st.cache.clear();
    }
    st.cache.insert(key, built.clone());
    drop(st);
    built.map(|p| (p, state))
}

fn build(st: &DeviceState, desc: &RnnDescriptor, dtype: DType) -> Result<Prepared, String> {
    use sys::cudnnDirectionMode_t::*;
    use sys::cudnnRNNBiasMode_t::*;
    use sys::cudnnRNNDataLayout_t::*;
    use sys::cudnnRNNInputMode_t::*;
    use sys::cudnnRNNMode_t::*;
    let err = |e: CudnnError| format!("{e} ({})", ffi::status_text(e.status));
    let (data_type, math_prec, math_type) = data_types(dtype).ok_or("unsupported dtype")?;
    let elem = dtype.size();
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
        // SAFETY: `ptr` points to `size` bytes of device memory kept alive in `Prepared`
        // next to the descriptor; the call initializes the generator on the handle's stream.
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
            spec.d_input as i32,
            spec.d_hidden as i32,
            spec.d_state() as i32,
            spec.num_layers as i32,
            dropout.0,
            PADDED_IO_ENABLED,
        )
    })
    .map_err(err)?;

    let seq_lengths: Vec<c_int> = (0..desc.batch_size)
        .map(|b| desc.seq_length_of(b) as c_int)
        .collect();
    let layout = if desc.batch_first {
        CUDNN_RNN_DATA_LAYOUT_BATCH_MAJOR_UNPACKED
    } else {
        CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED
    };
    let mut zero = [0u8; 8];
    let x = RnnDataDesc::new().map_err(err)?;
    ffi::set_rnn_data(
        &x,
        data_type,
        layout,
        desc.seq_length,
        &seq_lengths,
        spec.d_input,
        &mut zero,
    )
    .map_err(err)?;
    let y = RnnDataDesc::new().map_err(err)?;
    ffi::set_rnn_data(
        &y,
        data_type,
        layout,
        desc.seq_length,
        &seq_lengths,
        spec.output_size(),
        &mut zero,
    )
    .map_err(err)?;
    let h = TensorDesc::new().map_err(err)?;
    ffi::set_tensor_3d(&h, data_type, desc.hidden_shape()).map_err(err)?;
    let c = TensorDesc::new().map_err(err)?;
    ffi::set_tensor_3d(&c, data_type, desc.cell_shape()).map_err(err)?;

    let mut weight_space_bytes = 0usize;
    // SAFETY: live handle and descriptor, valid out pointer.
    check("cudnnGetRNNWeightSpaceSize", unsafe {
        sys::cudnnGetRNNWeightSpaceSize(handle, rnn.0, &mut weight_space_bytes)
    })
    .map_err(err)?;
    let plan = weight_plan(st, &rnn, desc, weight_space_bytes, elem)?;

    let (mut work_inference, mut work_training, mut reserve_bytes, mut unused) = (0, 0, 0, 0);
    // SAFETY: live handle and descriptors, valid out pointers.
    check("cudnnGetRNNTempSpaceSizes", unsafe {
        sys::cudnnGetRNNTempSpaceSizes(
            handle,
            rnn.0,
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
            handle,
            rnn.0,
            sys::cudnnForwardMode_t::CUDNN_FWD_MODE_TRAINING,
            x.0,
            &mut work_training,
            &mut reserve_bytes,
        )
    })
    .map_err(err)?;
    Ok(Prepared {
        rnn,
        x,
        y,
        h,
        c,
        _dropout: dropout,
        _dropout_states: states,
        seq_lengths,
        weight_space_bytes,
        plan,
        work_inference,
        work_training,
        reserve_bytes,
    })
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
    let err = |e: CudnnError| format!("{e} ({})", ffi::status_text(e.status));
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
                    pseudo as i32,
                    space_bytes,
                    base as *const c_void,
                    lin_id as i32,
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
    Ok(dims[..nb.clamp(0, 8) as usize]
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

/// Device pointers of cubecl buffers, with the guards that keep them valid until the
/// cuDNN work on them has finished (Note [cuDNN call protocol]).
#[derive(Default)]
struct Guards(Vec<Box<dyn std::any::Any>>);

impl Guards {
    fn ptr(&mut self, t: &CudaTensor) -> *mut c_void {
        let guard = t
            .client
            .get_resource(t.handle.clone())
            .unwrap_or_else(|e| panic!("burn-fused-rnn: cubecl buffer unavailable: {e:?}"));
        let ptr = guard.resource().ptr;
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

fn finish(state: &DeviceState, call: &'static str, status: sys::cudnnStatus_t) {
    if let Err(e) = check(call, status) {
        panic!(
            "burn-fused-rnn: {e} ({}) (Note [cuDNN fallback])",
            ffi::status_text(e.status)
        );
    }
    super::count_call();
    state
        .stream
        .synchronize()
        .unwrap_or_else(|e| panic!("burn-fused-rnn: CUDA stream synchronize failed: {e:?}"));
}

fn weight_space<F: FloatElement, I: IntElement, BT: BoolElement>(
    p: &Prepared,
    weights: CudaTensor,
) -> CudaTensor {
    let w: Tensor<Cuda<F, I, BT>, 1> = float(weights);
    into_contiguous(prim(to_weight_space(&p.plan, w)))
}

fn forward<F: FloatElement, I: IntElement, BT: BoolElement>(
    p: &Prepared,
    state: &RefCell<DeviceState>,
    desc: &RnnDescriptor,
    inputs: RnnInputs<Cuda<F, I, BT>>,
    training: bool,
) -> (RnnOutput<Cuda<F, I, BT>>, Option<CudaTensor>) {
    let dtype = inputs.x.dtype;
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
    let (px, py, phy) = (g.ptr(&x), g.ptr(&y), g.ptr(&hy));
    let (phx, pcx, pcy) = (g.opt(h0.as_ref()), g.opt(c0.as_ref()), g.opt(cy.as_ref()));
    let (pw, pwork, plen) = (g.ptr(&w), g.ptr(&work), g.ptr(&lengths));
    let preserve = g.opt(reserve.as_ref());
    sync_cubecl(&x);
    let st = state.borrow();
    let mode = if training {
        sys::cudnnForwardMode_t::CUDNN_FWD_MODE_TRAINING
    } else {
        sys::cudnnForwardMode_t::CUDNN_FWD_MODE_INFERENCE
    };
    // SAFETY: every pointer is a live device buffer of the size cuDNN expects for the
    // descriptors `p` was built with (outputs and workspace allocated above from those
    // sizes, inputs checked against the descriptor by the caller and made contiguous);
    // the guards in `g` keep them allocated, and cubecl's work on them has finished
    // (`sync_cubecl`); `finish` waits for cuDNN before the guards drop.
    let status = unsafe {
        sys::cudnnRNNForward(
            st.handle.raw,
            p.rnn.0,
            mode,
            plen as *const i32,
            p.x.0,
            px,
            p.y.0,
            py,
            p.h.0,
            phx,
            phy,
            p.c.0,
            pcx,
            pcy,
            p.weight_space_bytes,
            pw,
            work_bytes,
            pwork,
            if training { p.reserve_bytes } else { 0 },
            preserve,
        )
    };
    finish(&st, "cudnnRNNForward", status);
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
    let dtype = inputs.x.dtype;
    let x = into_contiguous(inputs.x);
    let h0 = inputs.h0.map(into_contiguous);
    let c0 = inputs.c0.map(into_contiguous);
    let w = weight_space::<F, I, BT>(p, inputs.weights);
    let y = into_contiguous(output.y);
    let dy = match grads.dy {
        Some(dy) => into_contiguous(dy),
        None => prim(Tensor::<Cuda<F, I, BT>, 3>::zeros(
            desc.output_shape(),
            (&x.device, dtype),
        )),
    };
    let dhy = grads.dh_n.map(into_contiguous);
    let dcy = grads.dc_n.map(into_contiguous);
    let lstm = desc.spec.mode.has_cell_state();
    let dx = empty(&x, desc.input_shape().to_vec(), dtype);
    let dhx = empty(&x, desc.hidden_shape().to_vec(), dtype);
    let dcx = lstm.then(|| empty(&x, desc.cell_shape().to_vec(), dtype));
    let space_len = p.weight_space_bytes / dtype.size();
    let dw = prim(Tensor::<Cuda<F, I, BT>, 1>::zeros(
        [space_len],
        (&x.device, dtype),
    ));
    let work = empty(&x, vec![p.work_training.max(1)], DType::U8);
    let lengths = device_lengths(&x, &p.seq_lengths);

    let mut g = Guards::default();
    let (px, py, pdy, pdx) = (g.ptr(&x), g.ptr(&y), g.ptr(&dy), g.ptr(&dx));
    let (phx, pdhy, pdhx) = (g.opt(h0.as_ref()), g.opt(dhy.as_ref()), g.ptr(&dhx));
    let (pcx, pdcy, pdcx) = (g.opt(c0.as_ref()), g.opt(dcy.as_ref()), g.opt(dcx.as_ref()));
    let (pw, pdw, pwork) = (g.ptr(&w), g.ptr(&dw), g.ptr(&work));
    let (preserve, plen) = (g.ptr(&reserve), g.ptr(&lengths));
    sync_cubecl(&x);
    let st = state.borrow();
    // SAFETY: as in `forward`; the reserve is the one the training forward of this
    // configuration filled (same `Prepared`, same sizes). BackwardData runs first: it
    // updates the reserve that BackwardWeights reads.
    let status = unsafe {
        sys::cudnnRNNBackwardData_v8(
            st.handle.raw,
            p.rnn.0,
            plen as *const i32,
            p.y.0,
            py,
            pdy,
            p.x.0,
            pdx,
            p.h.0,
            phx,
            pdhy,
            pdhx,
            p.c.0,
            pcx,
            pdcy,
            pdcx,
            p.weight_space_bytes,
            pw,
            p.work_training,
            pwork,
            p.reserve_bytes,
            preserve,
        )
    };
    finish(&st, "cudnnRNNBackwardData_v8", status);
    // SAFETY: as above; `dw` was zeroed and receives the gradient with ADD.
    let status = unsafe {
        sys::cudnnRNNBackwardWeights_v8(
            st.handle.raw,
            p.rnn.0,
            sys::cudnnWgradMode_t::CUDNN_WGRAD_MODE_ADD,
            plen as *const i32,
            p.x.0,
            px,
            p.h.0,
            phx,
            p.y.0,
            py,
            p.weight_space_bytes,
            pdw,
            p.work_training,
            pwork,
            p.reserve_bytes,
            preserve,
        )
    };
    finish(&st, "cudnnRNNBackwardWeights_v8", status);
    drop(g);
    let dweights = prim(from_weight_space(&p.plan, float::<Cuda<F, I, BT>, 1>(dw)));
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
            None => reference::forward_with::<Self>(desc, inputs, false),
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
            None => reference::forward_training::<Self>(desc, inputs, false),
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
        match prepared(desc, inputs.x.dtype, &inputs.x.device) {
            Some((p, state)) => {
                let [reserve]: [CudaTensor; 1] = reserve
                    .tensors
                    .try_into()
                    .expect("cuDNN's reserve is one buffer (same path as the training forward)");
                backward::<F, I, BT>(&p, &state, desc, inputs, output, reserve, grads)
            }
            None => reference::backward::<Self>(desc, inputs, output, reserve, grads, false),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::FusedRnnConfig;
    use crate::cudnn::weights::Copy;
    use burn::backend::NdArray;

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
