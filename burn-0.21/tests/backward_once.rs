//! One fused backward per call: a `backward()` runs the fused backward node exactly once for
//! each fused forward in the graph, and an untracked forward keeps no reserve.
//! (Alone in its test binary: it reads process-wide counters.)

use burn::backend::{Autodiff, NdArray};
use burn::module::Module;
use burn::tensor::{Distribution, Tensor};
use burn_fused_rnn::autodiff::{fused_backward_calls, fused_tracked_forward_calls};
use burn_fused_rnn::{FusedRnnConfig, RnnMode};

type B = Autodiff<NdArray>;

#[test]
fn fused_backward_runs_once_per_call_and_untracked_keeps_no_reserve() {
    let device = Default::default();
    let lstm = FusedRnnConfig::new(RnnMode::Lstm, 4, 4)
        .with_num_layers(2)
        .with_bidirectional(true)
        .init::<B>(&device);
    let proj = FusedRnnConfig::new(RnnMode::Gru, 8, 4).init::<B>(&device);
    let x = Tensor::<B, 3>::random([3, 6, 4], Distribution::Default, &device);

    // One fused call (2 layers x 2 directions) -> one backward.
    let (b0, f0) = (fused_backward_calls(), fused_tracked_forward_calls());
    let (y, state) = lstm.forward(x.clone(), None);
    let loss = y.sum() + state.hidden.sum() + state.cell.unwrap().sum();
    loss.backward();
    assert_eq!(fused_backward_calls() - b0, 1);
    assert_eq!(fused_tracked_forward_calls() - f0, 1);

    // Two chained fused calls -> two backwards, each once.
    let b1 = fused_backward_calls();
    let (y, _) = lstm.forward(x.clone(), None);
    let (z, _) = proj.forward(y, None);
    z.sum().backward();
    assert_eq!(fused_backward_calls() - b1, 2);

    // Nothing tracked (parameters without grad, plain input): no reserve, no backward node.
    let frozen = lstm.clone().no_grad();
    let f2 = fused_tracked_forward_calls();
    let (y, _) = frozen.forward(x, None);
    assert_eq!(fused_tracked_forward_calls(), f2);
    assert!(!y.is_require_grad());
}
