//! Step-by-step decoding on the native CPU kernel, which keeps packed weights across
//! one-step calls (Note [Packed weights across calls]): the reuse must never hand a step
//! another network's weights. Each check compares `PreparedRnn::step` with the same
//! module's `forward` over the whole sequence.

use burn::backend::{Flex, NdArray};
use burn::tensor::{Distribution, Tensor};
use burn_fused_rnn::{FusedRnn, FusedRnnBackend, FusedRnnConfig, RnnMode, RnnState};

/// The largest difference between stepping `module` over `x` and its `forward`.
fn step_vs_forward<B: FusedRnnBackend>(module: &FusedRnn<B>, x: &Tensor<B, 3>) -> f64 {
    let [_, seq, _] = x.dims();
    let decoder = module.prepare();
    let mut state: Option<RnnState<B>> = None;
    let mut outputs = Vec::new();
    for t in 0..seq {
        let x_t = x.clone().narrow(1, t, 1).squeeze_dim(1);
        let (y_t, next) = decoder.step(x_t, state);
        outputs.push(y_t.unsqueeze_dim(1));
        state = Some(next);
    }
    let stepped = Tensor::cat(outputs, 1);
    let (y, full) = module.forward(x.clone(), None);
    let diff = |a: Tensor<B, 3>, b: Tensor<B, 3>| -> f64 {
        (a - b)
            .abs()
            .max()
            .into_data()
            .convert::<f64>()
            .to_vec::<f64>()
            .unwrap()[0]
    };
    let state = state.expect("at least one step");
    let mut worst = diff(stepped, y).max(diff(state.hidden, full.hidden));
    if let (Some(a), Some(b)) = (state.cell, full.cell) {
        worst = worst.max(diff(a, b));
    }
    worst
}

/// Many networks of one shape, one after the other and interleaved, more than the cache
/// holds: fresh weight buffers of the same size (which an allocator likes to place where
/// a freed one was) and modules alive at the same time must each step with their own
/// weights.
fn decoders_never_share_weights<B: FusedRnnBackend>(backend: &str) {
    let device = B::Device::default();
    B::seed(&device, 7);
    for mode in [RnnMode::Lstm, RnnMode::Gru, RnnMode::RnnTanh] {
        let config = FusedRnnConfig::new(mode, 6, 20).with_num_layers(2);
        let x = Tensor::<B, 3>::random([3, 5, 6], Distribution::Default, &device);
        // One after the other, each dropped before the next is made.
        for i in 0..8 {
            let module: FusedRnn<B> = config.init(&device);
            let worst = step_vs_forward(&module, &x);
            assert!(
                worst < 1e-5,
                "{backend} {mode:?} network {i}: |step - forward| = {worst}"
            );
        }
        // Interleaved: two live networks, steps alternating between them.
        let a: FusedRnn<B> = config.init(&device);
        let b: FusedRnn<B> = config.init(&device);
        for round in 0..3 {
            for (name, module) in [("a", &a), ("b", &b)] {
                let worst = step_vs_forward(module, &x);
                assert!(
                    worst < 1e-5,
                    "{backend} {mode:?} network {name}, round {round}: |step - forward| = {worst}"
                );
            }
        }
    }
}

#[test]
fn decoders_never_share_weights_ndarray() {
    decoders_never_share_weights::<NdArray>("ndarray");
}

#[test]
fn decoders_never_share_weights_flex() {
    decoders_never_share_weights::<Flex>("flex");
}

/// Weights that change between steps (a training loop updating the module, then preparing
/// again) are picked up.
#[test]
fn a_new_preparation_after_an_update_steps_with_the_new_weights() {
    type B = NdArray;
    let device = Default::default();
    let config = FusedRnnConfig::new(RnnMode::Lstm, 4, 8);
    let x = Tensor::<B, 3>::random([2, 4, 4], Distribution::Default, &device);
    let old: FusedRnn<B> = config.init(&device);
    assert!(step_vs_forward(&old, &x) < 1e-5);
    // "Update": scale every weight, as an optimizer step would change them.
    let scaled = config.init_with_params::<B>(old.flat_weights().mul_scalar(0.5));
    let worst = step_vs_forward(&scaled, &x);
    assert!(worst < 1e-5, "|step - forward| after the update = {worst}");
}
