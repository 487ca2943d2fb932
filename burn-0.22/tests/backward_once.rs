//! One fused call is ONE autodiff node (Note [One node, many outputs]): a training step
//! through a 2-layer bidirectional LSTM whose loss reads the output and both final states
//! runs the fused backward exactly once. (Alone in its binary: the counters are global.)
#![allow(deprecated)]

use burn::module::Module;
use burn::tensor::{DType, Device, Distribution, Tensor};
use burn_fused_rnn::autodiff::{fused_backward_calls, fused_tracked_forward_calls};
use burn_fused_rnn::{FusedRnnConfig, RnnMode};

#[test]
fn one_backward_per_call() {
    for device in [Device::ndarray().autodiff(), Device::flex().autodiff()] {
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
    }
}
