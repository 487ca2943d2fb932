//! BPTT: the reference backward pass (not implemented yet; the reserve it will read is
//! described in Note [Reserve layout] in `super`).

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
    unimplemented!(
        "the reference backward (BPTT) is not implemented yet; it comes with the training work"
    )
}
