//! `FusedRnnBackend` for Burn's CUDA backend: cuDNN when it runs the call, the reference
//! otherwise (Note [cuDNN fallback]).

use burn::tensor::DType;
use burn_cubecl::{BoolElement, FloatElement, IntElement};

use super::algorithm::{tagged_reserve_len, Pass};
use super::backward::{backward, cudnn_reserve_tag};
use super::cache::{prepared, trained};
use super::forward::forward;
use super::profile::{Op, Phase, Span};
use super::protocol::CudaTensor;
use super::settings::CallSettings;
use super::Cuda;
use crate::backend::{FusedRnnBackend, RnnGrads, RnnInputs, RnnOutput, RnnOutputGrads, RnnReserve};
use crate::descriptor::RnnDescriptor;
use crate::reference;

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
            Pass::Inference,
            Some(op),
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
            Pass::Training,
            Some(op),
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
        match prepared(desc, dtype, device, Pass::Training, None) {
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
        let how = || {
            format!(
                "with the {} algorithm, TF32 {}",
                algo.public(),
                if tf32 { "on" } else { "off" }
            )
        };
        assert!(
            CallSettings::current().enabled,
            "expected cuDNN to run the backward of a cuDNN training forward ({}), but `cudnn::set_enabled(false)` came in between: switch it back on, or keep it off for the training forward too",
            how()
        );
        let total = Span::start();
        let op = Op::Backward;
        match trained(desc, inputs.x.dtype, &inputs.x.device, algo, tf32, op) {
            Ok((p, state)) => {
                let [reserve]: [CudaTensor; 1] = reserve
                    .tensors
                    .try_into()
                    .expect("cudnn_reserve_tag: one buffer");
                let grads = backward::<F, I, BT>(&p, &state, desc, inputs, output, reserve, grads);
                total.stop(op, Phase::Total);
                grads
            }
            Err(e) => panic!(
                "burn-fused-rnn: expected cuDNN to run the backward of a cuDNN training forward ({}), but it no longer builds that network: {e}",
                how()
            ),
        }
    }
}
