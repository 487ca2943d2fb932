//! `FusedRnnBackend` for Burn's CUDA backend: cuDNN when it runs the call, the CubeCL
//! kernels of [`crate::cube`] otherwise (which run the reference where they cannot).
//!
//! # Note [cuDNN fallback]
//!
//! The CUDA backend runs the CubeCL kernels ([`crate::cube`]; they run the reference in
//! turn where they cannot, Note [Cube fallback]), never cuDNN, when:
//! - libcudnn cannot be loaded, or its version is not 9.x (`cudnn_version`, checked once,
//!   one `log` warning);
//! - the call has a sequence of length 0 (cuDNN requires lengths ≥ 1);
//! - the dtype is not F32, F64, F16 or BF16; or cuDNN refuses the network when its
//!   descriptors are built; or its weight space cannot be mapped to the canonical layout
//!   (Note [Weight space verification] in `weights`); or the network fails its probe at
//!   `T = B = 1` on zeros, run once per network and pass (an inference forward for
//!   inference; a training forward and both backward calls for training), because cuDNN
//!   refuses some combinations (BF16 RNNs are not in its documentation) only when it
//!   executes them. Each such network is warned about once per thread.
//!
//! A persistent algorithm (`set_algorithm`) that cannot run a call shape falls back to
//! the standard algorithm first (Note [RNN algorithms]), then to the CubeCL kernels.
//!
//! The decision is a function of the descriptor, dtype, settings, pass and device, made
//! per thread and remembered (a failure to build, out of memory included, too), so the
//! declared outputs of a fused op and the op agree (and `crate::fusion` checks that they
//! do). The backward follows the reserve it is given: the CubeCL kernels' (2-D tensors)
//! runs their backward, the reference's (3-D tensors) the reference backward, whatever the
//! settings are now; cuDNN's (one 1-D buffer) runs the
//! call shape its forward ran (Note [Reserve tag]), never builds or probes while that is
//! cached, and panics with a clear message when `set_enabled(false)` came in between or
//! cuDNN no longer builds that network. A cuDNN call that fails once the
//! descriptors exist (out of memory, a driver error) panics with the call's name and
//! status, after waiting for the stream: the trait's methods have no error channel, and a
//! half-run op has no result.
//!
//! # F64
//!
//! Burn's CUDA backend answers `supports_dtype(F64) == false` (cubecl 0.10 registers no
//! F64 for CUDA; the README's "F64" section says why), so the op refuses F64 there. These
//! methods run F64 through cuDNN when called directly (no cubecl kernel runs on contiguous
//! inputs), which `tests/cuda.rs` checks against the reference.

use burn::tensor::DType;
use burn_cubecl::{BoolElement, FloatElement, IntElement};

use super::algorithm::{tagged_reserve_len, Pass};
use super::backward::{backward, cudnn_reserve_tag};
use super::forward::forward;
use super::profile::{Op, Phase, Span};
use super::protocol::{Cuda, CudaTensor};
use super::settings::CallSettings;
use super::state::{prepared, trained};
use crate::backend::FusedRnnBackend;
use crate::cube;
use crate::descriptor::{GradsWanted, RnnDescriptor};
use crate::op_types::{RnnGrads, RnnInputs, RnnOutput, RnnOutputGrads, RnnReserve};

/// Burn's CUDA backend: cuDNN, or the CubeCL kernels when cuDNN cannot run the call (Note
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
                let out = forward::<F, I, BT>(&p, &state.gpu, desc, inputs, false).0;
                total.stop(op, Phase::Total);
                out
            }
            None => cube::forward::<Self>(desc, inputs),
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
                let (out, reserve) = forward::<F, I, BT>(&p, &state.gpu, desc, inputs, true);
                let reserve = reserve.expect("a training forward has a reserve");
                total.stop(op, Phase::Total);
                (
                    out,
                    RnnReserve {
                        tensors: vec![reserve],
                    },
                )
            }
            None => cube::forward_training::<Self>(desc, inputs),
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
            None => cube::reserve_layout(desc, dtype),
        }
    }

    fn fused_rnn_backward(
        desc: &RnnDescriptor,
        inputs: RnnInputs<Self>,
        output: RnnOutput<Self>,
        reserve: RnnReserve<Self>,
        grads: RnnOutputGrads<Self>,
        wanted: GradsWanted,
    ) -> RnnGrads<Self> {
        // The reserve says which path, algorithm and math mode the training forward took
        // (Note [cuDNN fallback], Note [Reserve tag]).
        let Some((algo, tf32)) = cudnn_reserve_tag(&reserve) else {
            return cube::backward::<Self>(desc, inputs, output, reserve, grads, wanted);
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
                let grads = backward::<F, I, BT>(&p, &state.gpu, desc, inputs, output, reserve, grads);
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
