//! What is built for cuDNN on one device and kept in the per-thread cache: dropout
//! states, networks and call shapes (built by `build`, kept by `cache` and `state`).

use std::ffi::c_int;
use std::rc::Rc;

use burn::tensor::DType;
use cudarc::cudnn::sys;
use cudarc::driver::CudaSlice;

use super::algorithm::Algo;
use super::descriptors::CallDescriptors;
use super::ffi::{DropoutDesc, RnnCall, RnnDesc};
use super::weights::WeightPlan;

/// A dropout descriptor and its generator states (none for probability 0).
pub(crate) struct Dropout {
    pub desc: DropoutDesc,
    // Referred to by `desc`; dropped after it (field order).
    pub(crate) _states: Option<CudaSlice<u8>>,
}

/// cuDNN's description of one network on one device, shared by every call shape: per
/// network key (`cache::NetKey`).
pub(crate) struct Network {
    pub rnn: RnnDesc,
    // Kept alive for `rnn`, which refers to it; dropped after it (field order).
    pub(crate) _dropout: Rc<Dropout>,
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

impl Prepared {
    /// The descriptors and sizes the three RNN calls take.
    pub(crate) fn rnn_call(&self) -> RnnCall<'_> {
        RnnCall {
            rnn: &self.net.rnn,
            x: &self.io.x,
            y: &self.io.y,
            h: &self.io.h,
            c: &self.io.c,
            weight_space_bytes: self.net.weight_space_bytes,
            work_inference: self.work_inference,
            work_training: self.work_training,
            reserve_bytes: self.reserve_bytes,
        }
    }
}
