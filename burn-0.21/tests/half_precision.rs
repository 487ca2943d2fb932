//! F16 and BF16: the module runs in its input's dtype (computing in F32, Note [Half
//! precision]), training reaches F32 parameters, and mixed dtypes at the op are refused
//! with a clear message. The parity suite (`tests/parity.rs`) checks every case in F16 and
//! BF16 on Flex, and F16 on Wgpu, against the f64 reference.

use burn::backend::{Autodiff, Flex};
use burn::module::Module;
use burn::tensor::{DType, Distribution, Tensor};
use burn_fused_rnn::{fused_rnn, DropoutSpec, FusedRnnConfig, RnnDescriptor, RnnMode};

#[path = "common/tensors.rs"]
mod tensors;

fn config() -> FusedRnnConfig {
    FusedRnnConfig::new(RnnMode::Lstm, 6, 8)
        .with_num_layers(2)
        .with_bidirectional(true)
}

fn to_f64<const D: usize>(t: Tensor<impl burn::tensor::backend::Backend, D>) -> Vec<f64> {
    t.into_data().convert::<f64>().to_vec().unwrap()
}

/// Worst `|got - expected| / (atol + rtol |expected|)`.
fn worst(got: &[f64], expected: &[f64], rtol: f64, atol: f64) -> f64 {
    assert_eq!(got.len(), expected.len());
    got.iter()
        .zip(expected)
        .map(|(g, e)| (g - e).abs() / (atol + rtol * e.abs()))
        .fold(0.0, f64::max)
}

#[test]
fn half_precision_inputs_give_half_outputs_close_to_f32() {
    let _rng = tensors::seeded::<Flex>(22);
    let device = Default::default();
    let lstm = config().init::<Flex>(&device);
    let x = Tensor::<Flex, 3>::random([3, 7, 6], Distribution::Default, (&device, DType::F32));
    let (y32, s32) = lstm.forward_with_lengths(x.clone(), &[7, 3, 5], None);
    for (dtype, rtol, atol) in [(DType::F16, 1e-2, 5e-3), (DType::BF16, 5e-2, 2e-2)] {
        let (y, s) = lstm.forward_with_lengths(x.clone().cast(dtype), &[7, 3, 5], None);
        assert_eq!(y.dtype(), dtype);
        assert_eq!(s.hidden.dtype(), dtype);
        let w = worst(&to_f64(y), &to_f64(y32.clone()), rtol, atol);
        assert!(w <= 1.0, "{dtype:?}: output off by {w} tolerances");
        let w = worst(
            &to_f64(s.cell.unwrap()),
            &to_f64(s32.cell.clone().unwrap()),
            rtol,
            atol,
        );
        assert!(w <= 1.0, "{dtype:?}: cell state off by {w} tolerances");
    }
}

#[test]
fn half_precision_training_reaches_f32_parameters() {
    type B = Autodiff<Flex>;
    let _rng = tensors::seeded::<B>(23);
    let device = Default::default();
    let lstm = config().init::<B>(&device);
    let x = Tensor::<B, 3>::random([3, 7, 6], Distribution::Default, (&device, DType::F32));
    let grad_of = |x: Tensor<B, 3>| {
        let (y, _) = lstm.forward(x, None);
        let grads = y.cast(DType::F32).powi_scalar(2).sum().backward();
        let g = lstm.cells[1].weight_hh.grad(&grads).unwrap();
        (g.dtype(), to_f64(g))
    };
    let (dtype32, g32) = grad_of(x.clone());
    let (dtype16, g16) = grad_of(x.cast(DType::F16));
    assert_eq!((dtype32, dtype16), (DType::F32, DType::F32));
    let w = worst(&g16, &g32, 2e-2, 1e-2);
    assert!(w <= 1.0, "F16 gradient off by {w} tolerances");
    assert!(
        g32.iter().any(|g| g.abs() > 1e-2),
        "gradients are not all tiny"
    );
    assert_eq!(
        lstm.num_params(),
        config().init::<Flex>(&device).num_params()
    );
}

#[test]
#[should_panic(expected = "expected weights of dtype F16 (the input's), got F32")]
fn the_op_refuses_mixed_dtypes() {
    let device = Default::default();
    let config = FusedRnnConfig::new(RnnMode::Gru, 3, 4);
    let desc = RnnDescriptor::new(config.spec(), 2, 1, true, None, DropoutSpec::NONE);
    let x = Tensor::<Flex, 3>::zeros([1, 2, 3], (&device, DType::F16));
    let w = Tensor::<Flex, 1>::zeros([desc.params_size()], (&device, DType::F32));
    fused_rnn(&desc, x, None, None, w);
}
