//! Building what the cache keeps, through cuDNN on one device: dropout states, networks
//! (RNN descriptor, weight plan), call shapes (data descriptors, device lengths, temporary
//! sizes), and the probes that run a call shape on zeros (Note [RNN algorithms]).
//!
//! # Note [cuDNN dropout]
//!
//! cuDNN draws its own masks from a dropout descriptor built once per network (spec,
//! probability, dtype, settings; `PERSIST_DYNAMIC`'s networks of every batch size share
//! one) per thread and device, and seeded with the seed of the first call that needed it;
//! later calls, of any batch shape, continue its random stream (re-seeding per call would
//! re-initialize cuDNN's generator states each time). The masks are therefore not the
//! reference's (Note [Dropout seeds] in `crate::module`), and the parity suite leaves
//! dropout out.

use std::ffi::{c_int, c_void};
use std::ptr;
use std::rc::Rc;

use cudarc::cudnn::sys::cudnnForwardMode_t::{CUDNN_FWD_MODE_INFERENCE, CUDNN_FWD_MODE_TRAINING};
use cudarc::driver::{CudaSlice, DevicePtr};

use super::algorithm::Pass;
use super::cache::{Build, NetKey};
use super::descriptors;
use super::ffi::{self, Buffers, DropoutDesc, Error, RnnDesc, TensorDesc};
use super::network::{Dropout, Network, Prepared};
use super::protocol::Gpu;
use super::weights::{self, WeightPlan, WeightSlot};
use crate::descriptor::RnnDescriptor;
use crate::layout::RnnLayout;
use crate::spec::RnnSpec;

/// [`Build`] on one device through cuDNN. The device's context is current (the state's
/// lookups bind it first).
pub(crate) struct CudnnBuild<'a>(pub &'a Gpu);

impl Build for CudnnBuild<'_> {
    type Dropout = Dropout;
    type Network = Network;
    type Call = Prepared;

    fn dropout(&mut self, desc: &RnnDescriptor) -> Result<Dropout, Error> {
        build_dropout(self.0, desc)
    }

    fn network(
        &mut self,
        key: &NetKey,
        desc: &RnnDescriptor,
        dropout: &Rc<Dropout>,
    ) -> Result<Network, Error> {
        build_network(self.0, desc, key, dropout)
    }

    fn call(&mut self, net: &Rc<Network>, desc: &RnnDescriptor) -> Result<Prepared, Error> {
        build_call(self.0, net, desc)
    }

    fn probe(&mut self, call: &Prepared, desc: &RnnDescriptor, pass: Pass) -> Result<(), Error> {
        probe(self.0, call, desc, pass)
    }
}

/// A dropout descriptor, with generator states seeded with this call's seed when the
/// probability is not 0 (Note [cuDNN dropout]).
fn build_dropout(gpu: &Gpu, desc: &RnnDescriptor) -> Result<Dropout, Error> {
    let handle = &gpu.handle;
    let dropout = DropoutDesc::new()?;
    if desc.dropout.probability == 0.0 {
        ffi::set_no_dropout(&dropout, handle)?;
        return Ok(Dropout {
            desc: dropout,
            _states: None,
        });
    }
    let size = ffi::dropout_states_size(handle)?;
    let states = gpu
        .stream()
        .alloc_zeros::<u8>(size)
        .map_err(Error::driver("dropout states"))?;
    ffi::set_dropout(
        &dropout,
        handle,
        desc.dropout.probability as f32,
        &states,
        desc.dropout.seed,
    )?;
    Ok(Dropout {
        desc: dropout,
        _states: Some(states),
    })
}

/// The network's RNN descriptor and weight plan (no probe: the cache decides that).
fn build_network(
    gpu: &Gpu,
    desc: &RnnDescriptor,
    key: &NetKey,
    dropout: &Rc<Dropout>,
) -> Result<Network, Error> {
    let (data_type, ..) =
        descriptors::data_types(key.dtype, key.tf32).ok_or(Error::Dtype(key.dtype))?;
    let handle = &gpu.handle;
    let rnn =
        descriptors::rnn_descriptor(&desc.spec, key.dtype, key.tf32, key.algo, &dropout.desc)?;
    if let Some(batch) = key.dynamic_batch {
        ffi::build_rnn_dynamic(handle, &rnn, ffi::int(batch, "batch_size")?)?;
    }
    let weight_space_bytes = ffi::weight_space_size(handle, &rnn)?;
    let plan = weight_plan(gpu, &rnn, &desc.spec, weight_space_bytes, key.dtype.size())?;
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
fn build_call(gpu: &Gpu, net: &Rc<Network>, desc: &RnnDescriptor) -> Result<Prepared, Error> {
    let io = descriptors::call_descriptors(desc, net.data_type)?;
    let handle = &gpu.handle;
    let (work_inference, _) =
        ffi::temp_space_sizes(handle, &net.rnn, CUDNN_FWD_MODE_INFERENCE, &io.x)?;
    let (work_training, reserve_bytes) =
        ffi::temp_space_sizes(handle, &net.rnn, CUDNN_FWD_MODE_TRAINING, &io.x)?;
    let dev_lengths = gpu
        .stream()
        .clone_htod(&io.seq_lengths)
        .map_err(Error::driver("sequence lengths"))?;
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
fn probe(gpu: &Gpu, p: &Prepared, desc: &RnnDescriptor, pass: Pass) -> Result<(), Error> {
    let net = &p.net;
    let stream = gpu.stream();
    let training = pass == Pass::Training;
    let elem = net.dtype.size();
    let bytes = |shape: [usize; 3]| shape.iter().product::<usize>() * elem;
    let alloc = |bytes: usize| {
        stream
            .alloc_zeros::<u8>(bytes.max(1))
            .map_err(Error::driver("probe buffer"))
    };
    // A value and, in training, its gradient.
    let pair = |bytes: usize| -> Result<_, Error> {
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
    let ptr = |s: &CudaSlice<u8>| s.device_ptr(stream).0 as *mut c_void;
    let opt = |s: &Option<CudaSlice<u8>>| s.as_ref().map_or(ptr::null_mut(), ptr);
    let b = Buffers {
        lengths: p.dev_lengths.device_ptr(stream).0 as *const c_int,
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
    let (handle, call) = (&gpu.handle, p.rnn_call());
    // Stops at the first refusal; the stream is synchronized before the buffers drop, also
    // when a call fails.
    let run = || -> Result<(), Error> {
        // SAFETY (the three calls): every buffer of `b` the call reads or writes is a live
        // cudarc allocation on the handle's stream (the lengths: `p.dev_lengths`), sized
        // from the descriptors of `p` and the network's sizes (the workspace for this
        // pass; the gradients and the reserve exist in training, the only pass that uses
        // them), and dropped only after the stream is synchronized below; `hx`, `cx`,
        // `dhy` and `dcy` are null (zeros); the context is current (the state's lookup
        // bound it). They run in order on one stream, and `dw` starts at zero.
        unsafe { ffi::rnn_forward(handle, &call, &b, training) }?;
        if training {
            // SAFETY: as above.
            unsafe { ffi::rnn_backward_data(handle, &call, &b) }?;
            // SAFETY: as above.
            unsafe { ffi::rnn_backward_weights(handle, &call, &b) }?;
        }
        Ok(())
    };
    let ran = run();
    let synced = gpu
        .sync()
        .map_err(Error::driver("probe: CUDA stream synchronize"));
    ran?;
    synced
}

/// Reads cuDNN's weight-space layout and plans the canonical ↔ cuDNN mapping (Note
/// [Weight space verification]).
fn weight_plan(
    gpu: &Gpu,
    rnn: &RnnDesc,
    spec: &RnnSpec,
    space_bytes: usize,
    elem: usize,
) -> Result<WeightPlan, Error> {
    if space_bytes % elem != 0 {
        return Err(Error::WeightSpace(format!(
            "weight space of {space_bytes} bytes is not whole elements"
        )));
    }
    // cudnnGetRNNWeightParams returns addresses inside a weight space: give it a real one.
    let space = gpu
        .stream()
        .alloc_zeros::<u8>(space_bytes.max(1))
        .map_err(Error::driver("weight space probe"))?;
    let m_desc = TensorDesc::new()?;
    let b_desc = TensorDesc::new()?;
    let mut slots = Vec::new();
    for pseudo in 0..spec.num_pseudo_layers() {
        for (lin_id, ..) in weights::lin_ids(spec.mode, spec.proj_size.is_some()) {
            let (base, [matrix, bias]) = ffi::weight_params(
                &gpu.handle,
                rnn,
                pseudo as c_int,
                &space,
                lin_id as c_int,
                &m_desc,
                &b_desc,
            )?;
            let slot = |addr: Option<u64>, desc: &TensorDesc| -> Result<_, Error> {
                let Some(addr) = addr else { return Ok(None) };
                let offset = addr.checked_sub(base).ok_or_else(|| {
                    Error::WeightSpace("cuDNN reported an address before its weight space".into())
                })? as usize;
                if offset % elem != 0 {
                    return Err(Error::WeightSpace(format!(
                        "cuDNN reported a weight at byte {offset}, not a whole element"
                    )));
                }
                Ok(Some((offset / elem, descriptors::tensor_len(desc)?)))
            };
            slots.push(WeightSlot {
                pseudo_layer: pseudo,
                lin_id,
                matrix: slot(matrix, &m_desc)?,
                bias: slot(bias, &b_desc)?,
            });
        }
    }
    weights::plan(&RnnLayout::new(*spec), &slots, space_bytes / elem).map_err(Error::WeightSpace)
}
