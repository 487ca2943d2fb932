//! The checked layer over `cudarc::cudnn::sys`: every raw cuDNN call of this crate, each
//! wrapped once (cudarc's `sys` → `result` layering). A status becomes a [`CudnnError`]
//! naming the call; descriptors are RAII values whose `Drop` never panics; the calls that
//! take raw device pointers are `unsafe fn`s whose `# Safety` states what the caller
//! keeps. [`Error`] is what the layers above return: a cuDNN failure or any other reason
//! the cuDNN path cannot build or run something.

use std::ffi::{c_int, c_void, CStr};
use std::fmt;
use std::ptr;
use std::sync::Arc;

use burn::tensor::DType;
use cudarc::cudnn::sys;
use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DriverError};

/// A failed cuDNN call: which function, and the status it returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CudnnError {
    /// The cuDNN function.
    pub call: &'static str,
    /// Its status.
    pub status: sys::cudnnStatus_t,
}

impl fmt::Display for CudnnError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} returned {:?}", self.call, self.status)
    }
}

impl std::error::Error for CudnnError {}

/// Why the cuDNN path cannot build or run something: what every fallible function above
/// this layer returns (Note [cuDNN fallback] decides what each one means for the call).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Error {
    /// A cuDNN call failed, with cuDNN's text for the status (read when the error is
    /// converted, while the library is known to be loaded).
    Cudnn { error: CudnnError, text: String },
    /// A CUDA driver call failed (`what` it was for: a context, a stream, an allocation,
    /// a copy, a synchronize).
    Driver {
        what: &'static str,
        error: DriverError,
    },
    /// A size that does not fit cuDNN's `int`.
    TooLarge { what: &'static str, value: usize },
    /// A dtype cuDNN's RNNs do not take.
    Dtype(DType),
    /// cuDNN's weight space does not map to the canonical layout (Note [Weight space
    /// verification]).
    WeightSpace(String),
    /// The same network failed to build before on this thread (remembered, not retried).
    FailedBefore,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Cudnn { error, text } => write!(f, "{error} ({text})"),
            Error::Driver { what, error } => write!(f, "{what}: {error:?}"),
            Error::TooLarge { what, value } => {
                write!(f, "{what} = {value} does not fit cuDNN's int")
            }
            Error::Dtype(dtype) => write!(f, "unsupported dtype {dtype:?}"),
            Error::WeightSpace(why) => f.write_str(why),
            Error::FailedBefore => f.write_str("it failed before on this thread"),
        }
    }
}

impl From<CudnnError> for Error {
    fn from(error: CudnnError) -> Self {
        let text = status_text(error.status);
        Error::Cudnn { error, text }
    }
}

impl Error {
    /// A driver error, for `map_err`.
    pub(crate) fn driver(what: &'static str) -> impl FnOnce(DriverError) -> Error {
        move |error| Error::Driver { what, error }
    }
}

/// `Ok` for `CUDNN_STATUS_SUCCESS`, else the error naming `call`.
pub(crate) fn check(call: &'static str, status: sys::cudnnStatus_t) -> Result<(), CudnnError> {
    if status == sys::cudnnStatus_t::CUDNN_STATUS_SUCCESS {
        Ok(())
    } else {
        Err(CudnnError { call, status })
    }
}

/// A size as cuDNN's `int`.
pub(crate) fn int(value: usize, what: &'static str) -> Result<c_int, Error> {
    c_int::try_from(value).map_err(|_| Error::TooLarge { what, value })
}

/// Whether a libcudnn loads (cudarc's candidate names). Calls no cuDNN function.
pub(crate) fn library_present() -> bool {
    // SAFETY: is_culib_present only tries to dlopen cudarc's candidate library names and
    // drops what it opened.
    unsafe { sys::is_culib_present() }
}

/// `cudnnGetVersion`; only after [`library_present`] (cudarc panics without a library).
pub(crate) fn version() -> usize {
    cudarc::cudnn::result::get_version()
}

/// Whether the CUDA driver library loads. Calls no driver function.
pub(crate) fn driver_present() -> bool {
    // SAFETY: is_culib_present only tries to dlopen the driver library's candidate names.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

/// cuDNN's own text for a status.
pub(crate) fn status_text(status: sys::cudnnStatus_t) -> String {
    // SAFETY: cudnnGetErrorString takes any status value and returns a pointer to a static,
    // NUL-terminated string (or null, handled here); the library is loaded (a status only
    // comes from a cuDNN call, made after `cudnn_version` found cuDNN 9).
    let text = unsafe { sys::cudnnGetErrorString(status) };
    if text.is_null() {
        return format!("{status:?}");
    }
    // SAFETY: non-null, NUL-terminated and static per the cuDNN API.
    unsafe { CStr::from_ptr(text) }
        .to_string_lossy()
        .into_owned()
}

macro_rules! raii {
    ($(#[$doc:meta])* $name:ident, $raw:ty, $create:ident, $destroy:ident) => {
        $(#[$doc])*
        pub(crate) struct $name(pub(crate) $raw);

        impl $name {
            /// Creates the descriptor.
            pub(crate) fn new() -> Result<Self, CudnnError> {
                let mut raw: $raw = ptr::null_mut();
                // SAFETY: the create function writes one new descriptor to a valid out
                // pointer; cuDNN is loaded (see `status_text`).
                check(stringify!($create), unsafe { sys::$create(&mut raw) })?;
                Ok(Self(raw))
            }
        }

        impl Drop for $name {
            fn drop(&mut self) {
                // SAFETY: `self.0` came from the matching create call and is destroyed
                // once. A failure cannot be reported from `drop` and is ignored: it never
                // panics.
                let _ = unsafe { sys::$destroy(self.0) };
            }
        }

        // SAFETY: cuDNN descriptors are plain host structs with no thread affinity; this
        // crate uses each one from one thread at a time (the per-thread cache owns them).
        unsafe impl Send for $name {}
    };
}

raii!(
    /// `cudnnRNNDescriptor_t`.
    RnnDesc,
    sys::cudnnRNNDescriptor_t,
    cudnnCreateRNNDescriptor,
    cudnnDestroyRNNDescriptor
);
raii!(
    /// `cudnnRNNDataDescriptor_t`.
    RnnDataDesc,
    sys::cudnnRNNDataDescriptor_t,
    cudnnCreateRNNDataDescriptor,
    cudnnDestroyRNNDataDescriptor
);
raii!(
    /// `cudnnTensorDescriptor_t`.
    TensorDesc,
    sys::cudnnTensorDescriptor_t,
    cudnnCreateTensorDescriptor,
    cudnnDestroyTensorDescriptor
);
raii!(
    /// `cudnnDropoutDescriptor_t`.
    DropoutDesc,
    sys::cudnnDropoutDescriptor_t,
    cudnnCreateDropoutDescriptor,
    cudnnDestroyDropoutDescriptor
);

/// A cuDNN handle bound to a stream this crate owns, which it keeps alive.
pub(crate) struct Handle {
    raw: sys::cudnnHandle_t,
    // Dropped after the handle is destroyed (`Drop` runs first).
    stream: Arc<CudaStream>,
}

impl Handle {
    /// Creates a handle and binds it to `stream`, whose context must be current.
    pub(crate) fn new(stream: Arc<CudaStream>) -> Result<Self, CudnnError> {
        let mut raw: sys::cudnnHandle_t = ptr::null_mut();
        // SAFETY: valid out pointer; cuDNN is loaded.
        check("cudnnCreate", unsafe { sys::cudnnCreate(&mut raw) })?;
        let handle = Self { raw, stream };
        // SAFETY: `raw` is a live handle; the stream is live and kept alive by the handle.
        check("cudnnSetStream", unsafe {
            sys::cudnnSetStream(handle.raw, handle.stream.cu_stream() as sys::cudaStream_t)
        })?;
        Ok(handle)
    }

    /// The stream the handle runs on.
    pub(crate) fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        // SAFETY: created by cudnnCreate, destroyed once; errors are ignored, never panic.
        let _ = unsafe { sys::cudnnDestroy(self.raw) };
    }
}

/// Fills a 3-D tensor descriptor with `dims` and `strides` (in elements).
pub(crate) fn set_tensor_3d(
    desc: &TensorDesc,
    dtype: sys::cudnnDataType_t,
    dims: [c_int; 3],
    strides: [c_int; 3],
) -> Result<(), CudnnError> {
    // SAFETY: `desc` is live; the arrays hold `nbDims` = 3 values each and outlive the call.
    check("cudnnSetTensorNdDescriptor", unsafe {
        sys::cudnnSetTensorNdDescriptor(desc.0, dtype, 3, dims.as_ptr(), strides.as_ptr())
    })
}

/// The dims of a tensor descriptor cuDNN filled (empty for a descriptor with no dims).
pub(crate) fn tensor_dims(desc: &TensorDesc) -> Result<Vec<c_int>, CudnnError> {
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
    Ok(dims[..nb.clamp(0, 8) as usize].to_vec())
}

/// Fills an RNN data descriptor for padded input or output.
///
/// `padding` points to one host value of `dtype` (zero) that cuDNN writes past each
/// sequence's end.
pub(crate) fn set_rnn_data(
    desc: &RnnDataDesc,
    dtype: sys::cudnnDataType_t,
    layout: sys::cudnnRNNDataLayout_t,
    max_seq_length: c_int,
    seq_lengths: &[c_int],
    vector_size: c_int,
    padding: &mut [u8; 8],
) -> Result<(), CudnnError> {
    let batch_size = c_int::try_from(seq_lengths.len()).map_err(|_| CudnnError {
        call: "cudnnSetRNNDataDescriptor",
        status: sys::cudnnStatus_t::CUDNN_STATUS_BAD_PARAM,
    })?;
    // SAFETY: `desc` is live; `seq_lengths` holds `batchSize` values and `padding` 8 bytes
    // (at least one element of any supported dtype); cuDNN copies both during the call.
    check("cudnnSetRNNDataDescriptor", unsafe {
        sys::cudnnSetRNNDataDescriptor(
            desc.0,
            dtype,
            layout,
            max_seq_length,
            batch_size,
            vector_size,
            seq_lengths.as_ptr(),
            padding.as_mut_ptr() as *mut c_void,
        )
    })
}

/// The arguments of `cudnnSetRNNDescriptor_v8` besides the descriptors.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RnnParams {
    pub algo: sys::cudnnRNNAlgo_t,
    pub cell: sys::cudnnRNNMode_t,
    pub bias: sys::cudnnRNNBiasMode_t,
    pub direction: sys::cudnnDirectionMode_t,
    pub input_mode: sys::cudnnRNNInputMode_t,
    pub data_type: sys::cudnnDataType_t,
    pub math_prec: sys::cudnnDataType_t,
    pub math_type: sys::cudnnMathType_t,
    pub input_size: c_int,
    pub hidden_size: c_int,
    pub proj_size: c_int,
    pub num_layers: c_int,
    pub aux_flags: u32,
}

/// `cudnnSetRNNDescriptor_v8`.
pub(crate) fn set_rnn_descriptor(
    rnn: &RnnDesc,
    p: &RnnParams,
    dropout: &DropoutDesc,
) -> Result<(), CudnnError> {
    // SAFETY: both descriptors are live; the values are checked by cuDNN.
    check("cudnnSetRNNDescriptor_v8", unsafe {
        sys::cudnnSetRNNDescriptor_v8(
            rnn.0,
            p.algo,
            p.cell,
            p.bias,
            p.direction,
            p.input_mode,
            p.data_type,
            p.math_prec,
            p.math_type,
            p.input_size,
            p.hidden_size,
            p.proj_size,
            p.num_layers,
            dropout.0,
            p.aux_flags,
        )
    })
}

/// `cudnnDropoutGetStatesSize`: bytes of generator state on the handle's device.
pub(crate) fn dropout_states_size(handle: &Handle) -> Result<usize, CudnnError> {
    let mut size = 0usize;
    // SAFETY: live handle, valid out pointer.
    check("cudnnDropoutGetStatesSize", unsafe {
        sys::cudnnDropoutGetStatesSize(handle.raw, &mut size)
    })?;
    Ok(size)
}

/// `cudnnSetDropoutDescriptor` with probability 0 (no states).
pub(crate) fn set_no_dropout(desc: &DropoutDesc, handle: &Handle) -> Result<(), CudnnError> {
    // SAFETY: live descriptor and handle; probability 0 needs no state buffer (null,
    // size 0).
    check("cudnnSetDropoutDescriptor", unsafe {
        sys::cudnnSetDropoutDescriptor(desc.0, handle.raw, 0.0, ptr::null_mut(), 0, 0)
    })
}

/// `cudnnSetDropoutDescriptor`: initializes `states` (at least
/// [`dropout_states_size`] bytes, allocated on the handle's stream) with `seed`. The
/// descriptor refers to `states` afterwards: the caller keeps both together.
pub(crate) fn set_dropout(
    desc: &DropoutDesc,
    handle: &Handle,
    probability: f32,
    states: &CudaSlice<u8>,
    seed: u64,
) -> Result<(), CudnnError> {
    let (ptr, _sync) = states.device_ptr(handle.stream());
    // SAFETY: live descriptor and handle; `ptr` points to `states.len()` bytes of device
    // memory the caller keeps alive with the descriptor; the call initializes the generator
    // on the handle's stream, which is the buffer's.
    check("cudnnSetDropoutDescriptor", unsafe {
        sys::cudnnSetDropoutDescriptor(
            desc.0,
            handle.raw,
            probability,
            ptr as *mut c_void,
            states.len(),
            seed,
        )
    })
}

/// `cudnnBuildRNNDynamic`: compiles a `PERSIST_DYNAMIC` network's kernel for one batch
/// size into its descriptor.
pub(crate) fn build_rnn_dynamic(
    handle: &Handle,
    rnn: &RnnDesc,
    batch: c_int,
) -> Result<(), CudnnError> {
    // SAFETY: live handle and descriptor.
    check("cudnnBuildRNNDynamic", unsafe {
        sys::cudnnBuildRNNDynamic(handle.raw, rnn.0, batch)
    })
}

/// `cudnnGetRNNWeightSpaceSize`, in bytes.
pub(crate) fn weight_space_size(handle: &Handle, rnn: &RnnDesc) -> Result<usize, CudnnError> {
    let mut bytes = 0usize;
    // SAFETY: live handle and descriptor, valid out pointer.
    check("cudnnGetRNNWeightSpaceSize", unsafe {
        sys::cudnnGetRNNWeightSpaceSize(handle.raw, rnn.0, &mut bytes)
    })?;
    Ok(bytes)
}

/// `cudnnGetRNNTempSpaceSizes`: (workspace, reserve) bytes of one mode.
pub(crate) fn temp_space_sizes(
    handle: &Handle,
    rnn: &RnnDesc,
    mode: sys::cudnnForwardMode_t,
    x: &RnnDataDesc,
) -> Result<(usize, usize), CudnnError> {
    let (mut work, mut reserve) = (0usize, 0usize);
    // SAFETY: live handle and descriptors, valid out pointers.
    check("cudnnGetRNNTempSpaceSizes", unsafe {
        sys::cudnnGetRNNTempSpaceSizes(handle.raw, rnn.0, mode, x.0, &mut work, &mut reserve)
    })?;
    Ok((work, reserve))
}

/// `cudnnGetRNNWeightParams` for one pseudo-layer and linear-layer id, against the weight
/// space `space` (allocated on the handle's stream): the device addresses of the matrix and
/// of the bias (`None` for a null address) and `space`'s own, and the shapes in `m_desc`
/// and `b_desc`.
pub(crate) fn weight_params(
    handle: &Handle,
    rnn: &RnnDesc,
    pseudo_layer: c_int,
    space: &CudaSlice<u8>,
    lin_id: c_int,
    m_desc: &TensorDesc,
    b_desc: &TensorDesc,
) -> Result<(u64, [Option<u64>; 2]), CudnnError> {
    let (base, _sync) = space.device_ptr(handle.stream());
    let (mut m_addr, mut b_addr): (*mut c_void, *mut c_void) = (ptr::null_mut(), ptr::null_mut());
    // SAFETY: live handle and descriptors; `base` is a device buffer of `space.len()`
    // bytes; cuDNN only computes addresses inside it and fills the two tensor descriptors.
    check("cudnnGetRNNWeightParams", unsafe {
        sys::cudnnGetRNNWeightParams(
            handle.raw,
            rnn.0,
            pseudo_layer,
            space.len(),
            base as *const c_void,
            lin_id,
            m_desc.0,
            &mut m_addr,
            b_desc.0,
            &mut b_addr,
        )
    })?;
    let addr = |p: *mut c_void| (!p.is_null()).then_some(p as u64);
    Ok((base, [addr(m_addr), addr(b_addr)]))
}

/// The descriptors and sizes one call shape hands to the three RNN calls.
pub(crate) struct RnnCall<'a> {
    pub rnn: &'a RnnDesc,
    pub x: &'a RnnDataDesc,
    pub y: &'a RnnDataDesc,
    pub h: &'a TensorDesc,
    pub c: &'a TensorDesc,
    pub weight_space_bytes: usize,
    pub work_inference: usize,
    pub work_training: usize,
    pub reserve_bytes: usize,
}

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
/// and sizes of `c` give (the workspace of the mode, the reserve in training; the sequence
/// lengths in device memory), no other work uses them, they stay allocated until the
/// handle's stream has been synchronized, and the device's context is current.
pub(crate) unsafe fn rnn_forward(
    handle: &Handle,
    c: &RnnCall<'_>,
    b: &Buffers,
    training: bool,
) -> Result<(), CudnnError> {
    let (mode, work, reserve) = if training {
        let mode = sys::cudnnForwardMode_t::CUDNN_FWD_MODE_TRAINING;
        (mode, c.work_training, c.reserve_bytes)
    } else {
        let mode = sys::cudnnForwardMode_t::CUDNN_FWD_MODE_INFERENCE;
        (mode, c.work_inference, 0)
    };
    // SAFETY: this function's contract.
    check("cudnnRNNForward", unsafe {
        sys::cudnnRNNForward(
            handle.raw,
            c.rnn.0,
            mode,
            b.lengths,
            c.x.0,
            b.x,
            c.y.0,
            b.y,
            c.h.0,
            b.hx,
            b.hy,
            c.c.0,
            b.cx,
            b.cy,
            c.weight_space_bytes,
            b.w,
            work,
            b.work,
            reserve,
            if training { b.reserve } else { ptr::null_mut() },
        )
    })
}

/// `cudnnRNNBackwardData_v8`: dx, dhx, dcx; it updates the reserve.
///
/// # Safety
///
/// As [`rnn_forward`] in training mode, on the reserve a training forward of the same
/// network and call shape filled.
pub(crate) unsafe fn rnn_backward_data(
    handle: &Handle,
    c: &RnnCall<'_>,
    b: &Buffers,
) -> Result<(), CudnnError> {
    // SAFETY: this function's contract.
    check("cudnnRNNBackwardData_v8", unsafe {
        sys::cudnnRNNBackwardData_v8(
            handle.raw,
            c.rnn.0,
            b.lengths,
            c.y.0,
            b.y,
            b.dy,
            c.x.0,
            b.dx,
            c.h.0,
            b.hx,
            b.dhy,
            b.dhx,
            c.c.0,
            b.cx,
            b.dcy,
            b.dcx,
            c.weight_space_bytes,
            b.w,
            c.work_training,
            b.work,
            c.reserve_bytes,
            b.reserve,
        )
    })
}

/// `cudnnRNNBackwardWeights_v8`, adding into `dw` (which must start at zero).
///
/// # Safety
///
/// As [`rnn_backward_data`], which must have run first on the same reserve.
pub(crate) unsafe fn rnn_backward_weights(
    handle: &Handle,
    c: &RnnCall<'_>,
    b: &Buffers,
) -> Result<(), CudnnError> {
    // SAFETY: this function's contract.
    check("cudnnRNNBackwardWeights_v8", unsafe {
        sys::cudnnRNNBackwardWeights_v8(
            handle.raw,
            c.rnn.0,
            sys::cudnnWgradMode_t::CUDNN_WGRAD_MODE_ADD,
            b.lengths,
            c.x.0,
            b.x,
            c.h.0,
            b.hx,
            c.y.0,
            b.y,
            c.weight_space_bytes,
            b.dw,
            c.work_training,
            b.work,
            c.reserve_bytes,
            b.reserve,
        )
    })
}
