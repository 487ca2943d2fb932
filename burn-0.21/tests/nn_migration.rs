//! A model written against burn-nn compiles and trains after changing its `use` line alone.
//!
//! tests/migration/model.rs is a model as a Burn user writes it, against burn-nn's
//! `Lstm`, `BiLstm`, `Gru`, `BiGru`, `Rnn`, `BiRnn`, their configs and states, with
//! `B: Backend` bounds. It is included twice below, in two modules whose only difference
//! is the `use` line that names the recurrent layers: `burn::nn` in one,
//! `burn_fused_rnn::nn` in the other. Both compile (that is half the test); the model
//! built on the drop-ins, holding the burn-nn model's weights, then trains step for step
//! as the burn-nn model does.
//!
//! Tolerance: the losses of 12 Adam steps on NdArray f64 agree to 1e-6 relative (burn's
//! `sigmoid` on NdArray f64 is accurate to about 1e-8, and Adam amplifies differences
//! where gradients are small); both fall.
//!
//! Both tests seed NdArray's generator, which is one for the whole process, and hold
//! it while they draw (`tensors::seeded`), so what they draw does not depend on which test runs first
//! or alongside. Unseeded, 12 steps from a random initialization sometimes end above
//! 0.75 of the first loss (seeds 1 to 40: 0.39 to 0.79, seed 20: 0.47), and CI once failed
//! on it.

mod with_burn_nn {
    use burn::config::Config;
    use burn::module::Module;
    use burn::nn::activation::ActivationConfig;
    use burn::nn::loss::CrossEntropyLossConfig;
    use burn::nn::{Linear, LinearConfig};
    use burn::optim::{AdamConfig, GradientsParams, Optimizer};
    use burn::tensor::backend::{AutodiffBackend, Backend};
    use burn::tensor::{ElementConversion, Int, Tensor};

    // The line that changes:
    use burn::nn::{
        BiGru, BiGruConfig, BiLstm, BiLstmConfig, BiRnn, BiRnnConfig, Gru, GruConfig, Lstm,
        LstmConfig, LstmState, Rnn, RnnConfig, RnnState,
    };

    include!("migration/model.rs");
}

mod with_fused {
    use burn::config::Config;
    use burn::module::Module;
    use burn::nn::activation::ActivationConfig;
    use burn::nn::loss::CrossEntropyLossConfig;
    use burn::nn::{Linear, LinearConfig};
    use burn::optim::{AdamConfig, GradientsParams, Optimizer};
    use burn::tensor::backend::{AutodiffBackend, Backend};
    use burn::tensor::{ElementConversion, Int, Tensor};

    // The line that changes:
    use burn_fused_rnn::nn::{
        BiGru, BiGruConfig, BiLstm, BiLstmConfig, BiRnn, BiRnnConfig, Gru, GruConfig, Lstm,
        LstmConfig, LstmState, Rnn, RnnConfig, RnnState,
    };

    include!("migration/model.rs");
}

use burn::backend::ndarray::NdArray;
use burn::backend::Autodiff;
use burn::tensor::{Distribution, Int, Tensor, TensorData};
use burn_fused_rnn::nn;

#[path = "common/tensors.rs"]
mod tensors;

type B = Autodiff<NdArray<f64>>;
/// Adam steps, learning rate 1e-2.
const STEPS: usize = 12;

#[test]
fn a_burn_nn_model_trains_the_same_after_the_use_change() {
    let _rng = tensors::seeded::<B>(19);
    let device = Default::default();
    let config_nn = with_burn_nn::ModelConfig::new(3, 6, 4);
    let config = with_fused::ModelConfig::new(3, 6, 4);
    let model_nn = config_nn.init::<B>(&device);
    // Both configs and models come from the same source text; only the layers differ.
    let fresh = config.init::<B>(&device);
    assert_eq!(fresh.gru.d_hidden, 6);

    // The drop-in model holding the burn-nn model's weights. (Read the burn-nn model's
    // parameters first: Burn draws them lazily, and a clone of one never read, as the
    // head's below, would draw its own values.)
    let _ = burn::module::Module::devices(&model_nn);
    let model = with_fused::Model {
        lstm: nn::Lstm::from_burn_nn(&model_nn.lstm).unwrap(),
        bilstm: nn::BiLstm::from_burn_nn(&model_nn.bilstm).unwrap(),
        gru: nn::Gru::from_burn_nn(&model_nn.gru).unwrap(),
        bigru: nn::BiGru::from_burn_nn(&model_nn.bigru).unwrap(),
        rnn: nn::Rnn::from_burn_nn(&model_nn.rnn).unwrap(),
        birnn: nn::BiRnn::from_burn_nn(&model_nn.birnn).unwrap(),
        head: model_nn.head.clone(),
    };

    let x = Tensor::<B, 3>::random([5, 7, 3], Distribution::Normal(0.0, 1.0), &device);
    let labels = Tensor::<B, 1, Int>::from_data(TensorData::from([0i64, 1, 2, 3, 1]), &device);
    let (_, losses_nn) = with_burn_nn::train(model_nn, x.clone(), labels.clone(), STEPS);
    let (_, losses) = with_fused::train(model, x, labels, STEPS);
    for (step, (a, b)) in losses.iter().zip(&losses_nn).enumerate() {
        assert!(
            (a - b).abs() <= 1e-6 * b.abs(),
            "step {step}: loss {a} with the drop-ins, {b} with burn-nn"
        );
    }
    assert!(
        losses[STEPS - 1] < 0.75 * losses[0],
        "the loss did not fall: {losses:?}"
    );
}

#[test]
fn the_drop_in_model_trains_from_its_own_initialization() {
    let _rng = tensors::seeded::<B>(20);
    let device = Default::default();
    let model = with_fused::ModelConfig::new(3, 6, 4).init::<B>(&device);
    let x = Tensor::<B, 3>::random([5, 7, 3], Distribution::Normal(0.0, 1.0), &device);
    let labels = Tensor::<B, 1, Int>::from_data(TensorData::from([3i64, 2, 1, 0, 2]), &device);
    let (_, losses) = with_fused::train(model, x, labels, STEPS);
    assert!(
        losses[STEPS - 1] < 0.75 * losses[0],
        "the loss did not fall: {losses:?}"
    );
}
