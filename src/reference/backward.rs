//! BPTT: the reference backward pass.

use burn::tensor::backend::Backend;

use crate::backend::{RnnGrads, RnnInputs, RnnOutput, RnnOutputGrads, RnnReserve};
use crate::descriptor::RnnDescriptor;

pub(crate) fn backward<B: Backend>(
    _desc: &RnnDescriptor,
    _inputs: RnnInputs<B>,
    _output: RnnOutput<B>,
    _reserve: RnnReserve<B>,
    _grads: RnnOutputGrads<B>,
) -> RnnGrads<B> {
    unimplemented!("reference backward")
}
