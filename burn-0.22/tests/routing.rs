//! Where a call runs (Note [Call routing]) and what each route computes: the native kernel and
//! its single backward node against the reference traced by Burn's autodiff, in F64, with
//! dropout (the same masks bit for bit), variable lengths and every mode; calls whose
//! tensors mix autodiff and plain devices; the node count per call.
#![allow(deprecated)] // Burn 0.22 deprecates NdArray; the crate serves it.

mod common;

use burn::tensor::{DType, Device, Distribution, Tensor};
use burn_fused_rnn::autodiff::{fused_backward_calls, fused_tracked_forward_calls};
use burn_fused_rnn::{
    fused_rnn, reference, route_of, DropoutSpec, FusedRnnConfig, RnnDescriptor, RnnMode, Route,
};
use common::{check_values, report, values, F64};

fn random<const D: usize>(shape: [usize; D], device: &Device, dtype: DType) -> Tensor<D> {
    Tensor::random(shape, Distribution::Uniform(-1.0, 1.0), (device, dtype))
}

#[test]
fn native_devices_route_to_the_kernel() {
    for device in [
        Device::ndarray(),
        Device::flex(),
        Device::ndarray().autodiff(),
        Device::flex().autodiff(),
    ] {
        let x = Tensor::<3>::zeros([2, 3, 4], &device);
        assert_eq!(route_of(&x), Route::Native, "{device:?}");
    }
}

/// The native route (one node per call) and the reference (traced op by op) agree on the
/// training forward and on every gradient, with dropout between layers and padding.
#[test]
fn native_node_matches_traced_reference() {
    let device = Device::flex().autodiff();
    let dtype = DType::F64;
    let mut failures = Vec::new();
    for mode in [
        RnnMode::Lstm,
        RnnMode::Gru,
        RnnMode::RnnTanh,
        RnnMode::RnnRelu,
    ] {
        let config = FusedRnnConfig::new(mode, 5, 6)
            .with_num_layers(2)
            .with_bidirectional(true)
            .with_proj_size((mode == RnnMode::Lstm).then_some(4));
        let spec = config.spec();
        let desc = RnnDescriptor::new(
            spec,
            7,
            3,
            true,
            Some(vec![7, 2, 5]),
            DropoutSpec {
                probability: 0.3,
                seed: 42,
            },
        );
        let x = random(desc.input_shape(), &device, dtype);
        let h0 = random(desc.hidden_shape(), &device, dtype);
        let c0 = mode
            .has_cell_state()
            .then(|| random(desc.cell_shape(), &device, dtype));
        let w = random([desc.params_size()], &device, dtype).mul_scalar(0.5);
        let gy = random(desc.output_shape(), &device, dtype);
        let gh = random(desc.hidden_shape(), &device, dtype);
        let run = |native: bool| {
            let (x, h0, w) = (
                x.clone().require_grad(),
                h0.clone().require_grad(),
                w.clone().require_grad(),
            );
            let c0 = c0.clone().map(Tensor::require_grad);
            let out = if native {
                fused_rnn(&desc, x.clone(), Some(h0.clone()), c0.clone(), w.clone())
            } else {
                reference::fused_rnn(
                    &desc,
                    x.clone(),
                    Some(h0.clone()),
                    c0.clone(),
                    w.clone(),
                    true,
                )
            };
            let mut loss =
                (out.output.clone() * gy.clone()).sum() + (out.hidden.clone() * gh.clone()).sum();
            if let Some(c) = &out.cell {
                loss = loss + c.clone().sum();
            }
            let grads = loss.backward();
            let mut got = vec![
                ("y", values(out.output)),
                ("h_n", values(out.hidden)),
                ("dx", values(x.grad(&grads).expect("dx"))),
                ("dh0", values(h0.grad(&grads).expect("dh0"))),
                ("dw", values(w.grad(&grads).expect("dw"))),
            ];
            if let Some(c0) = c0 {
                got.push(("dc0", values(c0.grad(&grads).expect("dc0"))));
            }
            got
        };
        let (calls, tracked) = (fused_backward_calls(), fused_tracked_forward_calls());
        let native = run(true);
        assert!(
            fused_tracked_forward_calls() > tracked,
            "{mode:?}: no tracked forward"
        );
        assert!(
            fused_backward_calls() > calls,
            "{mode:?}: the node did not run"
        );
        let reference = run(false);
        for ((name, a), (_, b)) in native.iter().zip(&reference) {
            failures.extend(check_values(&format!("{mode:?}"), name, a, b, F64).err());
        }
        // Dropout took effect: the training output differs from an inference call's.
        let inference = fused_rnn(&desc, x.clone(), Some(h0.clone()), c0.clone(), w.clone());
        assert_ne!(
            values(inference.output),
            native[0].1,
            "{mode:?}: no dropout"
        );
    }
    report(failures);
}

/// A call whose input is plain while the weights are tracked trains through the node
/// (Note [Call routing]); its gradients are those of the all-autodiff call, and an inference
/// call mixing the contexts runs natively too.
#[test]
fn mixed_autodiff_contexts_run_natively() {
    let ad = Device::flex().autodiff();
    let plain = Device::flex();
    let dtype = DType::F64;
    let config = FusedRnnConfig::new(RnnMode::Gru, 3, 4);
    let desc = RnnDescriptor::new(config.spec(), 5, 2, true, None, DropoutSpec::NONE);
    let x = random(desc.input_shape(), &plain, dtype);
    let w = random([desc.params_size()], &ad, dtype).require_grad();
    let tracked = fused_tracked_forward_calls();
    let mixed = fused_rnn(&desc, x.clone(), None, None, w.clone());
    assert!(
        fused_tracked_forward_calls() > tracked,
        "the node did not run"
    );
    let dw_mixed = values(w.grad(&mixed.output.sum().backward()).expect("dw"));
    let w2 = w.clone().detach().require_grad();
    let all_ad = fused_rnn(&desc, x.clone().autodiff(), None, None, w2.clone());
    let dw_all = values(w2.grad(&all_ad.output.sum().backward()).expect("dw"));
    report(
        check_values("mixed", "dw", &dw_mixed, &dw_all, F64)
            .err()
            .into_iter()
            .collect(),
    );
    // Inference with autodiff input and plain weights: native, output back on autodiff.
    let out = fused_rnn(
        &desc,
        x.clone().autodiff(),
        None,
        None,
        w.clone().without_autodiff(),
    );
    assert!(out.output.is_autodiff());
    let plain = fused_rnn(&desc, x, None, None, w.without_autodiff());
    report(
        check_values(
            "inference",
            "y",
            &values(out.output),
            &values(plain.output),
            F64,
        )
        .err()
        .into_iter()
        .collect(),
    );
}

/// F16 and BF16 inputs (Flex) compute in F32 and come back in their dtype (Note [Half
/// precision] in the core crate's `semantics`): the native route's output, widened, is the
/// F32 call's on the rounded inputs, to half precision.
#[test]
fn half_precision_runs_natively_in_f32() {
    let device = Device::flex();
    let config = FusedRnnConfig::new(RnnMode::Lstm, 3, 4).with_num_layers(2);
    let desc = RnnDescriptor::new(config.spec(), 5, 2, true, None, DropoutSpec::NONE);
    let x = random(desc.input_shape(), &device, DType::F32);
    let w = random([desc.params_size()], &device, DType::F32);
    for half in [DType::F16, DType::BF16] {
        let (xh, wh) = (x.clone().cast(half), w.clone().cast(half));
        let out = fused_rnn(&desc, xh.clone(), None, None, wh.clone());
        assert_eq!(out.output.dtype(), half);
        let wide = fused_rnn(&desc, xh.cast(DType::F32), None, None, wh.cast(DType::F32));
        let tol = common::Tol {
            rtol: 1e-2,
            atol: 1e-2,
        };
        report(
            check_values(
                &format!("{half:?}"),
                "y",
                &values(out.output.cast(DType::F32)),
                &values(wide.output),
                tol,
            )
            .err()
            .into_iter()
            .collect(),
        );
    }
}
