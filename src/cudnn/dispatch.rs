//! `FusedRnnBackend` for Burn's CUDA backend: cuDNN when it runs the call, the reference
//! otherwise (Note [cuDNN fallback]).

use burn::tensor::DType;
use burn_cubecl::{BoolElement, FloatElement, IntElement};

use super::algorithm::{tagged_reserve_len, Settings};
use super::backward::{backward, cudnn_reserve_tag};
use super::cache::{prepared, Request};
use super::forward::forward;
use super::profile::{Op, Phase, Span};
use super::protocol::CudaTensor;
use super::Cuda;
use crate::backend::{FusedRnnBackend, RnnGrads, RnnInputs, RnnOutput, RnnOutputGrads, RnnReserve};
use crate::descriptor::RnnDescriptor;
use crate::reference;

fn request(training: bool, op: Option<Op>) -> Request {
    Request {
        settings: Settings::current(),
        training,
        exact: None,
        op,
    }
}

/// Burn's CUDA backend: cuDNN, or the reference when cuDNN cannot run the call (Note
/// [cuDNN fallback]). `burn::backend::Cuda` (`Fusion<..>` of this) and `Autodiff<..>` go
/// through these methods too.
impl<F: FloatElement, I: IntElement, BT: BoolElement> FusedRnnBackend for Cuda<F, I, BT> {
    fn fused_rnn_forward(desc: &RnnDescriptor, inputs: RnnInputs<Self>) -> RnnOutput<Self> {
        let total = Span::start();
        let op = Op::Inference;
        match prepared(
            desc,
            inputs.x.dtype,
            &inputs.x.device,
            request(false, Some(op)),
        ) {
            Some((p, state)) => {
                let out = forward::<F, I, BT>(&p, &state, desc, inputs, false).0;
                total.stop(op, Phase::Total);
                out
            }
            None => reference::forward::<Self>(desc, inputs),
        }
    }

    fn fused_rnn_forward_training(
        desc: &RnnDescriptor,
        inputs: RnnInputs<Self>,
    ) -> (RnnOutput<Self>, RnnReserve<Self>) {
        let total = Span::start();
        let op = Op::Training;
        match prepared(
            desc,
            inputs.x.dtype,
            &inputs.x.device,
            request(true, Some(op)),
        ) {
            Some((p, state)) => {
                let (out, reserve) = forward::<F, I, BT>(&p, &state, desc, inputs, true);
                let reserve = reserve.expect("a training forward has a reserve");
                total.stop(op, Phase::Total);
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
        match prepared(desc, dtype, device, request(true, None)) {
            Some((p, _)) => vec![(
                vec![tagged_reserve_len(p.reserve_bytes, p.net.algo, p.net.tf32)],
                DType::F32,
            )],
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
        // The reserve says which path, algorithm and math mode the training forward took
        // (Note [cuDNN fallback], Note [Reserve tag]).
        let Some((algo, tf32)) = cudnn_reserve_tag(&reserve) else {
            return reference::backward::<Self>(desc, inputs, output, reserve, grads);
        };
        let total = Span::start();
        let op = Op::Backward;
        let request = Request {
            settings: Settings {
                algorithm: algo.public(),
                tf32,
            },
            training: true,
            exact: Some(algo),
            op: Some(op),
        };
        match prepared(desc, inputs.x.dtype, &inputs.x.device, request) {
            Some((p, state)) => {
                let [reserve]: [CudaTensor; 1] = reserve
                    .tensors
                    .try_into()
                    .expect("cudnn_reserve_tag: one buffer");
                let grads = backward::<F, I, BT>(&p, &state, desc, inputs, output, reserve, grads);
                total.stop(op, Phase::Total);
                grads
            }
            None => panic!(
                "expected cuDNN to run the backward of a cuDNN training forward (with the {} algorithm, TF32 {}), but it no longer runs this configuration: switch `cudnn::set_enabled` back on, or keep it off for the training forward too",
                algo.public(),
                if tf32 { "on" } else { "off" }
            ),
        }
    }
}
