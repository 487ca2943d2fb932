//! The drop-in layers of `burn_fused_rnn::nn` against burn-nn's own layers: the same
//! outputs and final states on random inputs for every type (with and without initial
//! states, both layouts, `reverse`), burn-nn checkpoints loaded in one call, the drop-ins'
//! own checkpoints being the canonical record, burn-nn's initial distributions, stacks,
//! and the refusals of what the fused cells cannot compute.
//!
//! Tolerances (times the larger of 1 and the expected values' magnitude, `tensors::close`):
//! NdArray f64 5e-7 (burn's own `sigmoid` on NdArray f64 is accurate to about 1e-8 only,
//! see tests/interop_burn_nn.rs), Flex f32 1e-5. A checkpoint is
//! compared with burn-nn's layer loaded from the same file, so a recorder that rounds the
//! weights (f32, f16) rounds both sides alike.

use std::path::PathBuf;

use burn::backend::ndarray::NdArray;
use burn::backend::{Autodiff, Flex};
use burn::module::{Initializer, Module, Param};
use burn::nn::activation::ActivationConfig;
use burn::record::{
    BinFileRecorder, CompactRecorder, DoublePrecisionSettings, FullPrecisionSettings,
    NamedMpkFileRecorder,
};
use burn::tensor::backend::Backend;
use burn::tensor::Tensor;
use burn_fused_rnn::interop::InteropError;
use burn_fused_rnn::nn::{
    BiGru, BiGruConfig, BiLstm, BiLstmConfig, BiRnn, BiRnnConfig, Gru, GruConfig, Lstm, LstmConfig,
    LstmState, Rnn, RnnConfig, RnnState,
};
use burn_fused_rnn::{FusedRnn, FusedRnnConfig, RnnMode};

#[path = "common/tensors.rs"]
mod tensors;
use tensors::{close, random};

type B64 = NdArray<f64>;
const TOL64: f64 = 5e-7;
const TOL32: f64 = 1e-5;

fn temp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join("burn_fused_rnn_nn_drop_in");
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn x_shape(batch_first: bool, features: usize) -> [usize; 3] {
    if batch_first {
        [3, 7, features]
    } else {
        [7, 3, features]
    }
}

/// `Lstm` (both layouts, with and without bias and initial state, `reverse`) on backend
/// `B` against burn-nn's `Lstm` holding the same weights.
fn lstm_matches<B: Backend>(tol: f64) {
    let device = B::Device::default();
    for (bias, batch_first, reverse) in [
        (true, true, false),
        (false, false, false),
        (true, true, true),
        (true, false, true),
    ] {
        let nn = burn::nn::LstmConfig::new(4, 5, bias)
            .with_batch_first(batch_first)
            .with_reverse(reverse)
            .init::<B>(&device);
        let lstm = Lstm::from_burn_nn(&nn).unwrap();
        let what = format!("Lstm bias={bias} batch_first={batch_first} reverse={reverse}");
        let x = random::<B, 3>(x_shape(batch_first, 4), 1);
        let (y_nn, s_nn) = nn.forward(x.clone(), None);
        let (y, s) = lstm.forward(x.clone(), None);
        close(&format!("{what} y"), y, y_nn, tol);
        close(&format!("{what} h_n"), s.hidden, s_nn.hidden, tol);
        close(&format!("{what} c_n"), s.cell, s_nn.cell, tol);
        let (c0, h0) = (random::<B, 2>([3, 5], 2), random::<B, 2>([3, 5], 3));
        let (y_nn, s_nn) = nn.forward(x.clone(), Some(LstmState::new(c0.clone(), h0.clone())));
        let (y, s) = lstm.forward(x, Some(LstmState::new(c0, h0)));
        close(&format!("{what} y from state"), y, y_nn, tol);
        close(
            &format!("{what} h_n from state"),
            s.hidden,
            s_nn.hidden,
            tol,
        );
        close(&format!("{what} c_n from state"), s.cell, s_nn.cell, tol);
    }
}

fn bilstm_matches<B: Backend>(tol: f64) {
    let device = B::Device::default();
    for (bias, batch_first) in [(true, true), (false, false)] {
        let nn = burn::nn::BiLstmConfig::new(4, 5, bias)
            .with_batch_first(batch_first)
            .init::<B>(&device);
        let lstm = BiLstm::from_burn_nn(&nn).unwrap();
        let x = random::<B, 3>(x_shape(batch_first, 4), 4);
        let (c0, h0) = (random::<B, 3>([2, 3, 5], 5), random::<B, 3>([2, 3, 5], 6));
        for state in [None, Some((c0, h0))] {
            let what = format!(
                "BiLstm bias={bias} batch_first={batch_first} state={}",
                state.is_some()
            );
            let (y_nn, s_nn) =
                nn.forward(x.clone(), state.clone().map(|(c, h)| LstmState::new(c, h)));
            let (y, s) = lstm.forward(x.clone(), state.map(|(c, h)| LstmState::new(c, h)));
            close(&format!("{what} y"), y, y_nn, tol);
            close(&format!("{what} h_n"), s.hidden, s_nn.hidden, tol);
            close(&format!("{what} c_n"), s.cell, s_nn.cell, tol);
        }
    }
}

fn gru_matches<B: Backend>(tol: f64) {
    let device = B::Device::default();
    for bias in [true, false] {
        let nn = burn::nn::GruConfig::new(4, 5, bias).init::<B>(&device);
        let gru = Gru::from_burn_nn(&nn).unwrap();
        let x = random::<B, 3>([3, 7, 4], 7);
        let h0 = random::<B, 2>([3, 5], 8);
        for state in [None, Some(h0)] {
            let what = format!("Gru bias={bias} state={}", state.is_some());
            let y_nn = nn.forward(x.clone(), state.clone());
            let y = gru.forward(x.clone(), state.clone());
            close(&format!("{what} y"), y, y_nn.clone(), tol);
            let (y, h_n) = gru.forward_with_state(x.clone(), state);
            close(&format!("{what} y (with state)"), y, y_nn.clone(), tol);
            // burn-nn's Gru returns no state: its last step's output is the final state.
            close(
                &format!("{what} h_n"),
                h_n,
                y_nn.narrow(1, 6, 1).squeeze_dim(1),
                tol,
            );
        }
    }
}

fn bigru_matches<B: Backend>(tol: f64) {
    let device = B::Device::default();
    for (bias, batch_first) in [(true, true), (false, false)] {
        let nn = burn::nn::BiGruConfig::new(4, 5, bias)
            .with_batch_first(batch_first)
            .init::<B>(&device);
        let gru = BiGru::from_burn_nn(&nn).unwrap();
        let x = random::<B, 3>(x_shape(batch_first, 4), 9);
        for state in [None, Some(random::<B, 3>([2, 3, 5], 10))] {
            let what = format!(
                "BiGru bias={bias} batch_first={batch_first} state={}",
                state.is_some()
            );
            let (y_nn, h_nn) = nn.forward(x.clone(), state.clone());
            let (y, h) = gru.forward(x.clone(), state);
            close(&format!("{what} y"), y, y_nn, tol);
            close(&format!("{what} h_n"), h, h_nn, tol);
        }
    }
}

fn rnn_matches<B: Backend>(tol: f64) {
    let device = B::Device::default();
    for (activation, batch_first, reverse) in [
        (ActivationConfig::Tanh, true, false),
        (ActivationConfig::Relu, false, false),
        (ActivationConfig::Tanh, false, true),
    ] {
        let nn = burn::nn::RnnConfig::new(4, 5, true)
            .with_hidden_activation(activation.clone())
            .with_batch_first(batch_first)
            .with_reverse(reverse)
            .init::<B>(&device);
        let rnn = Rnn::from_burn_nn(&nn).unwrap();
        let x = random::<B, 3>(x_shape(batch_first, 4), 11);
        for state in [None, Some(random::<B, 2>([3, 5], 12))] {
            let what = format!(
                "Rnn {activation:?} batch_first={batch_first} reverse={reverse} state={}",
                state.is_some()
            );
            let (y_nn, s_nn) = nn.forward(x.clone(), state.clone().map(RnnState::new));
            let (y, s) = rnn.forward(x.clone(), state.map(RnnState::new));
            close(&format!("{what} y"), y, y_nn, tol);
            close(&format!("{what} h_n"), s.hidden, s_nn.hidden, tol);
        }
    }
}

fn birnn_matches<B: Backend>(tol: f64) {
    let device = B::Device::default();
    for (activation, batch_first) in [
        (ActivationConfig::Tanh, true),
        (ActivationConfig::Relu, false),
    ] {
        let nn = burn::nn::BiRnnConfig::new(4, 5, false)
            .with_hidden_activation(activation.clone())
            .with_batch_first(batch_first)
            .init::<B>(&device);
        let rnn = BiRnn::from_burn_nn(&nn).unwrap();
        let x = random::<B, 3>(x_shape(batch_first, 4), 13);
        for state in [None, Some(random::<B, 3>([2, 3, 5], 14))] {
            let what = format!(
                "BiRnn {activation:?} batch_first={batch_first} state={}",
                state.is_some()
            );
            let (y_nn, s_nn) = nn.forward(x.clone(), state.clone().map(RnnState::new));
            let (y, s) = rnn.forward(x.clone(), state.map(RnnState::new));
            close(&format!("{what} y"), y, y_nn, tol);
            close(&format!("{what} h_n"), s.hidden, s_nn.hidden, tol);
        }
    }
}

#[test]
fn every_drop_in_matches_burn_nn_on_ndarray_f64() {
    lstm_matches::<B64>(TOL64);
    bilstm_matches::<B64>(TOL64);
    gru_matches::<B64>(TOL64);
    bigru_matches::<B64>(TOL64);
    rnn_matches::<B64>(TOL64);
    birnn_matches::<B64>(TOL64);
}

#[test]
fn every_drop_in_matches_burn_nn_on_flex() {
    lstm_matches::<Flex>(TOL32);
    bilstm_matches::<Flex>(TOL32);
    gru_matches::<Flex>(TOL32);
    bigru_matches::<Flex>(TOL32);
    rnn_matches::<Flex>(TOL32);
    birnn_matches::<Flex>(TOL32);
}

#[test]
fn gradients_match_burn_nn() {
    // The same loss through burn-nn's BiLstm and the drop-in: every weight's gradient
    // (read back in canonical form through the fused module of a converted copy) and the
    // input's gradient agree.
    type AD = Autodiff<B64>;
    let device = Default::default();
    let nn = burn::nn::BiLstmConfig::new(4, 5, true).init::<AD>(&device);
    let lstm = BiLstm::from_burn_nn(&nn).unwrap();
    let x = random::<AD, 3>([3, 7, 4], 15).require_grad();
    let g = random::<AD, 3>([3, 7, 10], 16);
    let (y_nn, _) = nn.forward(x.clone(), None);
    let grads_nn = (y_nn * g.clone()).sum().backward();
    let x2 = x.clone().detach().require_grad();
    let (y, _) = lstm.forward(x2.clone(), None);
    let grads = (y * g).sum().backward();
    close(
        "dx",
        x2.grad(&grads).unwrap(),
        x.grad(&grads_nn).unwrap(),
        TOL64,
    );
    // burn-nn's forward direction, input gate: rows 0..5 of the canonical W_ih (transposed).
    let w_nn = nn
        .forward
        .input_gate
        .input_transform
        .weight
        .val()
        .grad(&grads_nn)
        .unwrap();
    let w = lstm.fused().cells[0]
        .weight_ih
        .as_ref()
        .unwrap()
        .val()
        .grad(&grads)
        .unwrap();
    close(
        "dW_ih (forward, input gate)",
        w.narrow(0, 0, 5).transpose(),
        w_nn,
        TOL64,
    );
    // Reverse direction, output gate: rows 15..20 of W_hh.
    let w_nn = nn
        .reverse
        .output_gate
        .hidden_transform
        .weight
        .val()
        .grad(&grads_nn)
        .unwrap();
    let w = lstm.fused().cells[1].weight_hh.val().grad(&grads).unwrap();
    close(
        "dW_hh (reverse, output gate)",
        w.narrow(0, 15, 5).transpose(),
        w_nn,
        TOL64,
    );
}

/// Saves burn-nn's layer `nn` with `recorder`, loads it into a drop-in with the one call
/// `load`, and checks the drop-in's `forward` against burn-nn's layer loaded back from the
/// same file: both then hold the weights as the recorder stored them (f32 for
/// `FullPrecisionSettings`, f16 for `CompactRecorder`), so the f64 tolerance applies
/// whatever the drawn weights. (Against the unsaved f64 layer, an f32 checkpoint's
/// rounding alone reached 2.3e-6 in a ReLU network: the test failed for some draws.)
fn checkpoint_round<R, NN, D>(
    name: &str,
    recorder: &R,
    nn: NN,
    load: impl Fn(PathBuf, &R) -> Result<D, InteropError>,
    forward_nn: impl Fn(&NN) -> Tensor<B64, 3>,
    forward: impl Fn(&D) -> Tensor<B64, 3>,
) where
    R: burn::record::FileRecorder<B64>,
    NN: Module<B64>,
{
    let path = temp(name);
    nn.clone().save_file(path.clone(), recorder).unwrap();
    let as_saved = nn
        .load_file(path.clone(), recorder, &Default::default())
        .unwrap_or_else(|e| panic!("{name}: burn-nn's own load: {e}"));
    let loaded = load(path, recorder).unwrap_or_else(|e| panic!("{name}: {e}"));
    close(name, forward(&loaded), forward_nn(&as_saved), TOL64);
}

#[test]
fn burn_nn_checkpoints_load_in_one_call() {
    let device = Default::default();
    let x = random::<B64, 3>([3, 7, 4], 17);
    let full = NamedMpkFileRecorder::<FullPrecisionSettings>::new();
    let bin = BinFileRecorder::<FullPrecisionSettings>::new();
    let compact = CompactRecorder::new();

    // burn-nn's `$config` (with `.with_$opt(..)` options), saved with `$recorder` and
    // loaded into the drop-in of the same name; `$out` picks the output sequence from
    // `forward`'s result (the GRU returns it alone).
    macro_rules! round {
        ($name:expr, $recorder:expr, $config:ident($($arg:expr),*) $(.$opt:ident($v:expr))*, |$y:ident| $out:expr) => {
            checkpoint_round(
                $name,
                $recorder,
                burn::nn::$config::new($($arg),*)$(.$opt($v))*.init::<B64>(&device),
                |p, r| {
                    $config::new($($arg),*)$(.$opt($v))*
                        .init::<B64>(&device)
                        .load_burn_nn_file(p, r, &device)
                },
                |nn| {
                    let $y = nn.forward(x.clone(), None);
                    $out
                },
                |d| {
                    let $y = d.forward(x.clone(), None);
                    $out
                },
            )
        };
    }
    // Every type, full precision, through the default recorder.
    round!("lstm", &full, LstmConfig(4, 5, true), |y| y.0);
    round!("bilstm", &full, BiLstmConfig(4, 5, true), |y| y.0);
    round!("gru", &full, GruConfig(4, 5, false), |y| y);
    round!("bigru", &full, BiGruConfig(4, 5, true), |y| y.0);
    round!(
        "rnn_relu",
        &full,
        RnnConfig(4, 5, true).with_hidden_activation(ActivationConfig::Relu),
        |y| y.0
    );
    round!("birnn", &full, BiRnnConfig(4, 5, true), |y| y.0);
    // Other recorders: bincode, and half precision.
    round!("lstm_bin", &bin, LstmConfig(4, 5, true), |y| y.0);
    round!("bigru_compact", &compact, BiGruConfig(4, 5, true), |y| y.0);
    // A record in memory (e.g. taken out of a model's record).
    let nn = burn::nn::LstmConfig::new(4, 5, true).init::<B64>(&device);
    let expected = nn.forward(x.clone(), None).0;
    let lstm = LstmConfig::new(4, 5, true)
        .init::<B64>(&device)
        .load_burn_nn_record(nn.into_record())
        .unwrap();
    close("lstm from record", lstm.forward(x, None).0, expected, TOL64);
}

#[test]
fn burn_nn_checkpoints_that_do_not_fit_are_errors() {
    let device = Default::default();
    let nn = burn::nn::LstmConfig::new(4, 5, true).init::<B64>(&device);
    let path = temp("lstm_misfit");
    let recorder = NamedMpkFileRecorder::<FullPrecisionSettings>::new();
    nn.clone().save_file(path.clone(), &recorder).unwrap();

    // Another hidden size.
    let err = LstmConfig::new(4, 6, true)
        .init::<B64>(&device)
        .load_burn_nn_file(path.clone(), &recorder, &device)
        .unwrap_err();
    assert!(matches!(err, InteropError::Shape { .. }), "{err}");
    assert!(
        err.to_string()
            .contains("weight_ih_l0: expected shape [24, 4], got [20, 4]"),
        "{err}"
    );
    // No bias configured: the checkpoint's biases have no place.
    let err = LstmConfig::new(4, 5, false)
        .init::<B64>(&device)
        .load_burn_nn_file(path.clone(), &recorder, &device)
        .unwrap_err();
    assert!(matches!(err, InteropError::Unexpected { .. }), "{err}");
    assert!(err.to_string().contains("bias_ih_l0"), "{err}");
    // Not a record of this type: the recorder's error, with the file.
    let err = GruConfig::new(4, 5, true)
        .init::<B64>(&device)
        .load_burn_nn_file(path.clone(), &recorder, &device)
        .unwrap_err();
    assert!(matches!(err, InteropError::Io { .. }), "{err}");
    assert!(err.to_string().contains("lstm_misfit"), "{err}");
    // A NaN weight, named with its index.
    let mut record = nn.into_record();
    let w = record.forget_gate.hidden_transform.weight.val();
    let w = w.slice_assign([1..2, 3..4], Tensor::full([1, 1], f64::NAN, &device));
    record.forget_gate.hidden_transform.weight = Param::from_tensor(w);
    let err = LstmConfig::new(4, 5, true)
        .init::<B64>(&device)
        .load_burn_nn_record(record)
        .unwrap_err();
    // The forget gate is rows 5..10 of the canonical W_hh, transposed: burn-nn's [1, 3]
    // is [5 + 3, 1].
    assert!(matches!(err, InteropError::NotFinite { .. }), "{err}");
    assert_eq!(
        err.to_string(),
        "layers[0] weight_hh_l0: expected finite weights, got NaN at index [8, 1]"
    );
}

#[test]
fn drop_in_checkpoints_are_the_canonical_record() {
    let device = Default::default();
    // Double precision: the f64 weights exactly.
    let recorder = NamedMpkFileRecorder::<DoublePrecisionSettings>::new();
    let x = random::<B64, 3>([3, 7, 4], 18);
    // A drop-in's checkpoint loads into a FusedRnn of the same network, checked.
    let lstm = BiLstmConfig::new(4, 5, true)
        .with_num_layers(2)
        .init::<B64>(&device);
    let path = temp("bilstm_drop_in");
    lstm.clone().save_file(path.clone(), &recorder).unwrap();
    let config = FusedRnnConfig::new(RnnMode::Lstm, 4, 5)
        .with_num_layers(2)
        .with_bidirectional(true);
    let fused = config
        .init::<B64>(&device)
        .try_load_file(path.clone(), &recorder, &device)
        .unwrap();
    close(
        "drop-in -> FusedRnn",
        fused.forward(x.clone(), None).0,
        lstm.forward(x.clone(), None).0,
        0.0,
    );
    // And back, with the digest checked.
    let expected = fused.forward(x.clone(), None).0;
    let path = temp("fused_for_drop_in");
    fused.clone().save_file(path.clone(), &recorder).unwrap();
    let back = BiLstmConfig::new(4, 5, true)
        .with_num_layers(2)
        .init::<B64>(&device)
        .try_load_file(path, &recorder, &device)
        .unwrap();
    close(
        "FusedRnn -> drop-in",
        back.forward(x, None).0,
        expected,
        0.0,
    );
    // A record that does not fit is refused by the checked load.
    let err = BiLstmConfig::new(4, 5, true)
        .init::<B64>(&device)
        .try_load_record(fused.into_record())
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("expected 2 cells (num_layers * directions), got 4"),
        "{err}"
    );
}

/// Sample standard deviation of a tensor's elements.
fn std_of<B: Backend, const D: usize>(t: Tensor<B, D>) -> f64 {
    let v: Vec<f64> = t.into_data().iter::<f64>().collect();
    let mean = v.iter().sum::<f64>() / v.len() as f64;
    (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (v.len() - 1) as f64).sqrt()
}

#[test]
fn init_draws_burn_nn_distributions() {
    // burn-nn's default, XavierNormal(1): std sqrt(2 / (fan_in + fan_out)) per Linear,
    // [d_input, d_hidden] for the input transforms, [d_hidden, d_hidden] for the hidden
    // ones, and the biases drawn with the same initializer and fans.
    let device = Default::default();
    let (d_input, d_hidden) = (96, 64);
    let lstm = LstmConfig::new(d_input, d_hidden, true).init::<B64>(&device);
    let cell = &lstm.fused().cells[0];
    let within = |what: &str, got: f64, expected: f64| {
        assert!(
            (got / expected - 1.0).abs() < 0.05,
            "{what}: std {got}, expected {expected}"
        );
    };
    let ih = (2.0 / (d_input + d_hidden) as f64).sqrt();
    let hh = (2.0 / (2 * d_hidden) as f64).sqrt();
    within("W_ih", std_of(cell.weight_ih.as_ref().unwrap().val()), ih);
    within("W_hh", std_of(cell.weight_hh.val()), hh);
    // burn-nn's own layer, the same numbers.
    let nn = burn::nn::LstmConfig::new(d_input, d_hidden, true).init::<B64>(&device);
    within(
        "burn-nn W_ih",
        std_of(nn.input_gate.input_transform.weight.val()),
        ih,
    );
    within(
        "burn-nn W_hh",
        std_of(nn.input_gate.hidden_transform.weight.val()),
        hh,
    );
    // Biases: 4 * 64 values each, a looser bound.
    let b = std_of(cell.bias_ih.as_ref().unwrap().val());
    assert!((b / ih - 1.0).abs() < 0.2, "b_ih std {b}, expected {ih}");
    // Another initializer is used as given.
    let rnn = RnnConfig::new(3, 4, true)
        .with_initializer(Initializer::Constant { value: 0.25 })
        .init::<B64>(&device);
    let w: Vec<f64> = rnn
        .fused()
        .flat_weights()
        .into_data()
        .iter::<f64>()
        .collect();
    assert!(w.iter().all(|&v| v == 0.25), "{w:?}");
}

#[test]
fn stacked_drop_ins_equal_chained_burn_nn_layers() {
    let device = Default::default();
    let x = random::<B64, 3>([3, 7, 4], 19);
    // Two burn-nn LSTMs run one after the other, and the drop-in with num_layers = 2
    // holding their weights.
    let l0 = burn::nn::LstmConfig::new(4, 5, true).init::<B64>(&device);
    let l1 = burn::nn::LstmConfig::new(5, 5, true).init::<B64>(&device);
    let (y0, s0) = l0.forward(x.clone(), None);
    let (y1, s1) = l1.forward(y0, None);
    let stack = FusedRnn::from_burn_nn_stack(&[l0, l1]).unwrap();
    let lstm = LstmConfig::new(4, 5, true)
        .with_num_layers(2)
        .init::<B64>(&device)
        .try_load_record(stack.into_record())
        .unwrap();
    let (y, s) = lstm.forward(x.clone(), None);
    close("stack y", y, y1.clone(), TOL64);
    close("stack top h_n", s.hidden, s1.hidden.clone(), TOL64);
    let (y, s) = lstm.forward_stack(x.clone(), None);
    close("forward_stack y", y, y1, TOL64);
    close(
        "layer 0 h_n",
        s.hidden.clone().narrow(0, 0, 1).squeeze_dim(0),
        s0.hidden,
        TOL64,
    );
    close(
        "layer 1 h_n",
        s.hidden.narrow(0, 1, 1).squeeze_dim(0),
        s1.hidden,
        TOL64,
    );

    // Bidirectional stacks take and return [2 * num_layers, batch, hidden] states.
    let bi = BiGruConfig::new(4, 5, true)
        .with_num_layers(3)
        .init::<B64>(&device);
    let (y, h) = bi.forward(x.clone(), Some(random::<B64, 3>([6, 3, 5], 20)));
    assert_eq!((y.dims(), h.dims()), ([3, 7, 10], [6, 3, 5]));
    // Dropout between layers, in training.
    let gru = GruConfig::new(4, 5, true)
        .with_num_layers(2)
        .with_dropout(0.5)
        .init::<Autodiff<B64>>(&device);
    let y = gru.forward(random::<Autodiff<B64>, 3>([3, 7, 4], 21), None);
    assert_eq!(y.dims(), [3, 7, 5]);
}

#[test]
#[should_panic(expected = "expected no initial state for a Lstm with num_layers = 2")]
fn a_2d_state_of_a_stack_is_refused() {
    let device = Default::default();
    let lstm = LstmConfig::new(4, 5, true)
        .with_num_layers(2)
        .init::<B64>(&device);
    let s = LstmState::new(random::<B64, 2>([3, 5], 1), random::<B64, 2>([3, 5], 2));
    let _ = lstm.forward(random::<B64, 3>([3, 7, 4], 3), Some(s));
}

#[test]
#[should_panic(expected = "invalid LstmConfig: expected clip = None")]
fn lstm_clip_is_refused() {
    let _ = LstmConfig::new(4, 5, true)
        .with_clip(Some(1.0))
        .init::<B64>(&Default::default());
}

#[test]
#[should_panic(expected = "invalid BiLstmConfig: expected input_forget = false")]
fn coupled_gates_are_refused() {
    let _ = BiLstmConfig::new(4, 5, true)
        .with_input_forget(true)
        .init::<B64>(&Default::default());
}

#[test]
#[should_panic(
    expected = "invalid LstmConfig: expected gate_activation = ActivationConfig::Sigmoid, got gate_activation = Relu"
)]
fn a_nonstandard_gate_activation_is_refused() {
    let _ = LstmConfig::new(4, 5, true)
        .with_gate_activation(ActivationConfig::Relu)
        .init::<B64>(&Default::default());
}

#[test]
#[should_panic(expected = "invalid GruConfig: expected reset_after = true")]
fn gru_reset_before_is_refused() {
    let _ = GruConfig::new(4, 5, true)
        .with_reset_after(false)
        .init::<B64>(&Default::default());
}

#[test]
#[should_panic(
    expected = "invalid BiRnnConfig: expected hidden_activation = ActivationConfig::Tanh or ActivationConfig::Relu, got hidden_activation = Gelu"
)]
fn an_rnn_activation_other_than_tanh_and_relu_is_refused() {
    let _ = BiRnnConfig::new(4, 5, true)
        .with_hidden_activation(ActivationConfig::Gelu)
        .init::<B64>(&Default::default());
}

#[test]
fn display_names_the_layer() {
    let lstm = LstmConfig::new(4, 5, true).init::<B64>(&Default::default());
    let text = lstm.to_string();
    assert!(text.starts_with("Lstm"), "{text}");
    assert!(text.contains("d_hidden: 5"), "{text}");
    assert_eq!(lstm.num_params(), 4 * 5 * (4 + 5 + 2));
}
