//! Step-by-step decoding on the native CPU kernel, which keeps packed weights across
//! one-step calls (Note [Packed weights across calls]): the reuse must never hand a step
//! another network's weights. Each check compares `PreparedRnn::step` with the same
//! module's `forward` over the whole sequence.

use burn::backend::{Flex, NdArray};
use burn::tensor::{Distribution, Tensor};
use burn_fused_rnn::{
    with_step_split, FusedRnn, FusedRnnBackend, FusedRnnConfig, RnnMode, RnnState,
};

/// The largest difference between stepping `module` over `x` and its `forward`.
fn step_vs_forward<B: FusedRnnBackend>(module: &FusedRnn<B>, x: &Tensor<B, 3>) -> f64 {
    split_step_vs_forward(module, x, None)
}

/// [`step_vs_forward`] with the steps' split over two threads forced (`Some`) or left to
/// the kernel (`None`), against the forward without the split.
fn split_step_vs_forward<B: FusedRnnBackend>(
    module: &FusedRnn<B>,
    x: &Tensor<B, 3>,
    split: Option<bool>,
) -> f64 {
    let [_, seq, _] = x.dims();
    let decoder = module.prepare();
    let mut state: Option<RnnState<B>> = None;
    let mut outputs = Vec::new();
    for t in 0..seq {
        let x_t = x.clone().narrow(1, t, 1).squeeze_dim(1);
        let (y_t, next) = match split {
            Some(split) => with_step_split(split, || decoder.step(x_t, state)),
            None => decoder.step(x_t, state),
        };
        outputs.push(y_t.unsqueeze_dim(1));
        state = Some(next);
    }
    let stepped = Tensor::cat(outputs, 1);
    let (y, full) = with_step_split(false, || module.forward(x.clone(), None));
    let state = state.expect("at least one step");
    let mut worst = max_diff(stepped, y).max(max_diff(state.hidden, full.hidden));
    if let (Some(a), Some(b)) = (state.cell, full.cell) {
        worst = worst.max(max_diff(a, b));
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

/// The output of one `forward` step of `module` on `x_t` (`[batch, 1, d_input]`).
fn one_step<B: FusedRnnBackend>(module: &FusedRnn<B>, x_t: &Tensor<B, 3>) -> Tensor<B, 3> {
    module.forward(x_t.clone(), None).0
}

/// The largest absolute difference between `a` and `b`.
fn max_diff<B: FusedRnnBackend>(a: Tensor<B, 3>, b: Tensor<B, 3>) -> f64 {
    (a - b)
        .abs()
        .max()
        .into_data()
        .convert::<f64>()
        .to_vec::<f64>()
        .unwrap()[0]
}

/// A module keeps its flat weights across `forward` calls while its parameters are the
/// same buffers (Note [Flat weights across calls]): repeated one-step calls give the
/// prepared step's numbers, and weights loaded into the same module afterwards (through
/// `load_record` and `map`, which keep the module's kept vector) are the ones used, as a
/// module built fresh from them computes.
fn forward_keeps_flat_weights_only_while_they_hold<B: FusedRnnBackend>(backend: &str) {
    use burn::module::{Module, ModuleMapper, Param};

    let device = B::Device::default();
    let config = FusedRnnConfig::new(RnnMode::Lstm, 5, 12).with_num_layers(2);
    let x_t = Tensor::<B, 3>::random([3, 1, 5], Distribution::Default, &device);
    let module: FusedRnn<B> = config.init(&device);
    let first = one_step(&module, &x_t);
    for _ in 0..3 {
        let again = one_step(&module, &x_t);
        assert_eq!(
            max_diff(first.clone(), again),
            0.0,
            "{backend}: repeated forward"
        );
    }
    let stepped = module
        .prepare()
        .step(x_t.clone().squeeze_dim(1), None)
        .0
        .unsqueeze_dim(1);
    assert!(
        max_diff(first.clone(), stepped) < 1e-6,
        "{backend}: forward vs step"
    );

    // Other weights into the same module: its kept vector must not be used.
    let other: FusedRnn<B> = config.init(&device);
    let want = one_step(&FusedRnn::clone(&other), &x_t);
    let target = module.clone();
    let _ = one_step(&target, &x_t); // the module keeps its vector, then gets other weights
    let loaded = target.load_record(other.clone().into_record());
    let got = one_step(&loaded, &x_t);
    assert!(
        max_diff(got.clone(), want.clone()) < 1e-6,
        "{backend}: after load_record"
    );
    assert!(
        max_diff(got, first.clone()) > 1e-3,
        "{backend}: the weights did change"
    );

    struct Halve;
    impl<B: burn::tensor::backend::Backend> ModuleMapper<B> for Halve {
        fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
            param.map(|t| t.mul_scalar(0.5))
        }
    }
    let target = module.clone();
    let _ = one_step(&target, &x_t); // the module keeps its vector, then is mapped
    let halved = target.map(&mut Halve);
    let want = one_step(
        &config.init_with_params::<B>(module.flat_weights().mul_scalar(0.5)),
        &x_t,
    );
    let got = one_step(&halved, &x_t);
    assert!(max_diff(got, want) < 1e-6, "{backend}: after map");
}

#[test]
fn forward_keeps_flat_weights_only_while_they_hold_ndarray() {
    forward_keeps_flat_weights_only_while_they_hold::<NdArray>("ndarray");
}

#[test]
fn forward_keeps_flat_weights_only_while_they_hold_flex() {
    forward_keeps_flat_weights_only_while_they_hold::<Flex>("flex");
}

/// A decoding step whose product splits over two threads (the core crate's Note [A step
/// over two threads]) matches the forward over the whole sequence computed without the
/// split, for modes, sizes and backends where the step splits by itself and where it is
/// forced to, for one sequence and for a batch of five.
fn split_steps_match_the_forward<B: FusedRnnBackend>(backend: &str) {
    let device = B::Device::default();
    B::seed(&device, 11);
    for (mode, hidden, layers) in [
        (RnnMode::Lstm, 256, 1),
        (RnnMode::Gru, 200, 2),
        (RnnMode::RnnTanh, 96, 1),
    ] {
        let module: FusedRnn<B> = FusedRnnConfig::new(mode, 24, hidden)
            .with_num_layers(layers)
            .init(&device);
        // One sequence, and a decoder's batch (its step splits the panels, not the rows).
        for batch in [1, 5] {
            let x = Tensor::<B, 3>::random([batch, 6, 24], Distribution::Default, &device);
            for forced in [None, Some(true)] {
                let worst = split_step_vs_forward(&module, &x, forced);
                assert!(
                    worst < 1e-5,
                    "{backend} {mode:?} H{hidden} L{layers} B{batch}, split {forced:?}: \
                     |step - forward| = {worst}"
                );
            }
        }
    }
}

#[test]
fn split_steps_match_the_forward_ndarray() {
    split_steps_match_the_forward::<NdArray>("NdArray");
}

#[test]
fn split_steps_match_the_forward_flex() {
    split_steps_match_the_forward::<Flex>("Flex");
}
