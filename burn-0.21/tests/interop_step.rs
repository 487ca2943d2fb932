//! Single-step decoding (`FusedRnn::prepare` + `PreparedRnn::step`): T steps equal one
//! T-step forward, outputs, final states and gradients.
//!
//! Tolerances: NdArray f64 1e-12 absolute; Flex f32 1e-5 absolute.

use burn::backend::ndarray::NdArray;
use burn::backend::{Autodiff, Flex};
use burn::tensor::backend::Backend;
use burn::tensor::{DType, Distribution, Element, ElementConversion, Tensor};
use burn_fused_rnn::{FusedRnn, FusedRnnBackend, FusedRnnConfig, RnnMode, RnnState};

fn random<B: Backend, const D: usize>(shape: [usize; D], seed: u64) -> Tensor<B, D> {
    let device = B::Device::default();
    B::seed(&device, seed);
    Tensor::random(
        shape,
        Distribution::Uniform(-0.8, 0.8),
        (&device, <B::FloatElem as Element>::dtype()),
    )
}

fn max_diff<B: Backend, const D: usize>(a: Tensor<B, D>, b: Tensor<B, D>) -> f64 {
    assert_eq!(a.dims(), b.dims());
    (a - b).abs().max().into_scalar().elem()
}

fn module<B: Backend>(config: &FusedRnnConfig, seed: u64) -> FusedRnn<B> {
    let n = burn_fused_rnn::params_size(&config.spec());
    config.init_with_params(random::<B, 1>([n], seed))
}

fn configs() -> Vec<FusedRnnConfig> {
    let mut out = vec![];
    for mode in [
        RnnMode::Lstm,
        RnnMode::Gru,
        RnnMode::RnnTanh,
        RnnMode::RnnRelu,
    ] {
        for layers in [1, 3] {
            out.push(FusedRnnConfig::new(mode, 3, 5).with_num_layers(layers));
        }
    }
    out.push(
        FusedRnnConfig::new(RnnMode::Lstm, 3, 5)
            .with_num_layers(2)
            .with_proj_size(Some(2)),
    );
    out.push(
        FusedRnnConfig::new(RnnMode::Gru, 3, 5)
            .with_bias(false)
            .with_batch_first(false),
    );
    out
}

/// Runs `T` steps and one forward from the same random initial state; returns the worst
/// difference of outputs and final states.
fn steps_vs_forward<B: FusedRnnBackend>(config: &FusedRnnConfig, seed: u64) -> f64 {
    let (batch, seq) = (3, 6);
    let spec = config.spec();
    let rnn = module::<B>(config, seed);
    let x = random::<B, 3>([batch, seq, spec.d_input], seed + 1);
    let layers = spec.num_layers;
    let h0 = random::<B, 3>([layers, batch, spec.d_state()], seed + 2);
    let state = if spec.mode == RnnMode::Lstm {
        RnnState::lstm(h0, random([layers, batch, spec.d_hidden], seed + 3))
    } else {
        RnnState::hidden_only(h0)
    };
    let input = if rnn.batch_first() {
        x.clone()
    } else {
        x.clone().swap_dims(0, 1)
    };
    let (y, final_state) = rnn.forward(input, Some(state.clone()));
    let y = if rnn.batch_first() {
        y
    } else {
        y.swap_dims(0, 1)
    };

    let prepared = rnn.prepare();
    let mut state = Some(state);
    let mut worst = 0.0f64;
    for t in 0..seq {
        let x_t = x.clone().narrow(1, t, 1).squeeze_dim::<2>(1);
        let (y_t, s) = prepared.step(x_t, state);
        let expected = y.clone().narrow(1, t, 1).squeeze_dim::<2>(1);
        worst = worst.max(max_diff(y_t, expected));
        state = Some(s);
    }
    let state = state.unwrap();
    worst = worst.max(max_diff(state.hidden, final_state.hidden));
    if let (Some(c), Some(expected)) = (state.cell, final_state.cell) {
        worst = worst.max(max_diff(c, expected));
    }
    worst
}

#[test]
fn steps_equal_forward_ndarray_f64() {
    for (i, config) in configs().iter().enumerate() {
        let worst = steps_vs_forward::<NdArray<f64>>(config, 100 + 10 * i as u64);
        assert!(worst <= 1e-12, "{:?}: max |diff| {worst:e}", config.spec());
    }
}

#[test]
fn steps_equal_forward_flex_f32() {
    for (i, config) in configs().iter().enumerate() {
        let worst = steps_vs_forward::<Flex>(config, 200 + 10 * i as u64);
        assert!(worst <= 1e-5, "{:?}: max |diff| {worst:e}", config.spec());
    }
}

#[test]
fn stepped_gradients_equal_forward_gradients() {
    type AD = Autodiff<NdArray<f64>>;
    let config = FusedRnnConfig::new(RnnMode::Lstm, 3, 4).with_num_layers(2);
    let rnn = module::<AD>(&config, 7);
    let (batch, seq) = (2, 4);
    let x = random::<AD, 3>([batch, seq, 3], 8);
    let g = random::<AD, 3>([batch, seq, 4], 9);

    let (y, _) = rnn.forward(x.clone(), None);
    let grads_forward = (y * g.clone()).sum().backward();

    let prepared = rnn.prepare();
    let mut state = None;
    // An explicit dtype: NdArray<f32> and NdArray<f64> share one device, whose default
    // dtype is whichever the process used first.
    let mut loss = Tensor::<AD, 1>::zeros([1], (&Default::default(), DType::F64));
    for t in 0..seq {
        let (y_t, s) = prepared.step(x.clone().narrow(1, t, 1).squeeze_dim(1), state);
        let g_t = g.clone().narrow(1, t, 1).squeeze_dim::<2>(1);
        loss = loss + (y_t * g_t).sum();
        state = Some(s);
    }
    let grads_steps = loss.backward();

    for (i, cell) in rnn.cells.iter().enumerate() {
        let mut matrices = vec![("weight_hh", &cell.weight_hh)];
        if let Some(w) = &cell.weight_ih {
            matrices.push(("weight_ih", w));
        }
        for (name, p) in matrices {
            let a = p.val().grad(&grads_forward).expect("forward gradient");
            let b = p.val().grad(&grads_steps).expect("stepped gradient");
            let d = max_diff(a, b);
            assert!(d <= 1e-12, "cell {i} {name}: max |diff| {d:e}");
        }
        for (name, p) in [("bias_ih", &cell.bias_ih), ("bias_hh", &cell.bias_hh)] {
            let p = p.as_ref().unwrap();
            let d = max_diff(
                p.val().grad(&grads_forward).unwrap(),
                p.val().grad(&grads_steps).unwrap(),
            );
            assert!(d <= 1e-12, "cell {i} {name}: max |diff| {d:e}");
        }
    }
}

#[test]
#[should_panic(expected = "expected a unidirectional FusedRnn for step-by-step decoding")]
fn bidirectional_modules_are_refused() {
    let rnn = FusedRnnConfig::new(RnnMode::Gru, 3, 4)
        .with_bidirectional(true)
        .init::<NdArray>(&Default::default());
    let _ = rnn.prepare();
}

#[test]
#[should_panic(expected = "expected input of shape [batch_size, d_input] = [2, 3], got [2, 4]")]
fn wrong_input_size_is_named() {
    let rnn = FusedRnnConfig::new(RnnMode::Gru, 3, 4).init::<NdArray>(&Default::default());
    let _ = rnn
        .prepare()
        .step(Tensor::zeros([2, 4], &Default::default()), None);
}
