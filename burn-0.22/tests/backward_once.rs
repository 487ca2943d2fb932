//! One fused call is ONE autodiff node (Note [One node, many outputs]): a training step
//! through a 2-layer bidirectional LSTM whose loss reads the output and both final states
//! runs the fused backward exactly once. (Alone in its binary: the counters are global.)
#![allow(deprecated)]

use burn::module::Module;
use burn::tensor::{DType, Device, Distribution, Tensor};
use burn_fused_rnn::autodiff::{fused_backward_calls, fused_tracked_forward_calls};
use burn_fused_rnn::{FusedRnnConfig, RnnMode};

/// The devices whose calls run a fused kernel: NdArray, Flex, and (feature `wgpu`) Wgpu
/// when it has an adapter here (the CubeCL kernels; a missing adapter is a failure under
/// `BURN_FUSED_RNN_REQUIRE_WGPU=1`, as in `tests/parity.rs`).
fn devices() -> Vec<Device> {
    #[allow(unused_mut)]
    let mut devices = vec![Device::ndarray().autodiff(), Device::flex().autodiff()];
    #[cfg(feature = "wgpu")]
    {
        use burn::tensor::DeviceType;
        if !Device::enumerate(DeviceType::Wgpu).is_empty() {
            devices.push(Device::wgpu(Default::default()).autodiff());
        } else if std::env::var("BURN_FUSED_RNN_REQUIRE_WGPU").as_deref() == Ok("1") {
            panic!("BURN_FUSED_RNN_REQUIRE_WGPU=1, but Wgpu has no adapter here");
        } else {
            eprintln!("SKIPPED one_backward_per_call on Wgpu: no Wgpu adapter");
        }
    }
    devices
}

#[test]
fn one_backward_per_call() {
    for device in devices() {
        let rnn = FusedRnnConfig::new(RnnMode::Lstm, 4, 5)
            .with_num_layers(2)
            .with_bidirectional(true)
            .init(&device);
        let x: Tensor<3> = Tensor::random([2, 6, 4], Distribution::Default, (&device, DType::F32));
        let (calls, tracked) = (fused_backward_calls(), fused_tracked_forward_calls());
        let (y, state) = rnn.forward(x, None);
        let loss = y.sum() + state.hidden.sum() + state.cell.expect("LSTM").sum();
        let grads = loss.backward();
        assert_eq!(fused_tracked_forward_calls() - tracked, 1, "{device:?}");
        assert_eq!(fused_backward_calls() - calls, 1, "{device:?}");
        let dw = rnn.flat_grad(&grads).expect("every weight has a gradient");
        assert_eq!(dw.dims(), [rnn.layout().params_size()]);
        // An inference call on the same device (nothing tracked) keeps no reserve.
        let tracked = fused_tracked_forward_calls();
        let _ = rnn.valid().forward(Tensor::zeros([2, 6, 4], &device), None);
        assert_eq!(
            fused_tracked_forward_calls(),
            tracked,
            "{device:?}: valid()"
        );
        // Nothing above reads a value back: wait for the device, so that the process never
        // exits while CubeCL still compiles this call's kernels (docs/INTERNALS.md,
        // "Lavapipe crashed at process exit").
        device
            .sync()
            .expect("the device ran every queued operation");
    }
}
