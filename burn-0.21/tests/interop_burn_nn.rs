//! burn-nn's `Lstm`, `BiLstm`, `Gru`, `BiGru`, `Rnn`, `BiRnn` (one layer or a stack)
//! converted into a `FusedRnn` compute burn-nn's own outputs on random inputs, and convert
//! back exactly; what the fused op cannot express is refused, naming the option.
//!
//! Tolerances, NdArray f64: fused against burn-nn 5e-7 absolute, because burn's own
//! `sigmoid` on NdArray f64 is accurate to about 1e-8 only (1.1e-8 measured on single
//! values, against `1 / (1 + exp(-x))`), and its error accumulates over the steps; the
//! fused op matches PyTorch's float64 to 1e-12 (tests/interop_pytorch.rs). Round trips back
//! to burn-nn: the same weights exactly, and the same burn-nn outputs to 1e-12.

mod interop_common;

use burn::backend::ndarray::NdArray;
use burn::backend::Flex;
use burn::nn::activation::{ActivationConfig, HardSigmoidConfig};
use burn::nn::{
    BiGru, BiGruConfig, BiLstm, BiLstmConfig, BiRnn, BiRnnConfig, Gru, GruConfig, Lstm, LstmConfig,
    LstmState, Rnn, RnnConfig, RnnState as NnRnnState,
};
use burn::tensor::backend::Backend;
use burn::tensor::Tensor;
use burn_fused_rnn::interop::burn_nn::BurnNnLayer;
use burn_fused_rnn::interop::InteropError;
use burn_fused_rnn::{FusedRnn, FusedRnnBackend, FusedRnnConfig, InputMode, RnnMode, RnnState};

#[path = "common/tensors.rs"]
mod tensors;
use tensors::{close, random};

type B64 = NdArray<f64>;
const TOL: f64 = 5e-7;
const ROUND: f64 = 1e-12;

fn device<B: Backend>() -> B::Device {
    Default::default()
}

/// Weights of every canonical tensor, equal between two fused modules.
fn same_weights<B: Backend>(what: &str, a: &FusedRnn<B>, b: &FusedRnn<B>) {
    assert_eq!(a.spec(), b.spec(), "{what}: spec");
    close(what, a.flat_weights(), b.flat_weights(), 0.0);
}

#[test]
fn lstm_matches_burn_nn() {
    for (bias, batch_first) in [(true, true), (false, false)] {
        let lstm = LstmConfig::new(3, 5, bias)
            .with_batch_first(batch_first)
            .init::<B64>(&device::<B64>());
        let fused = FusedRnn::from_burn_nn(&lstm).unwrap();
        assert_eq!(fused.batch_first(), batch_first);
        assert_eq!(fused.spec().bias, bias);
        let shape = if batch_first { [2, 6, 3] } else { [6, 2, 3] };
        let x = random::<B64, 3>(shape, 1);
        let (c0, h0) = (random::<B64, 2>([2, 5], 2), random::<B64, 2>([2, 5], 3));
        let (y_nn, s_nn) = lstm.forward(x.clone(), Some(LstmState::new(c0.clone(), h0.clone())));
        let state = RnnState::from(LstmState::new(c0, h0));
        let (y, s) = fused.forward(x.clone(), Some(state));
        close("lstm y", y, y_nn.clone(), TOL);
        let s: LstmState<B64, 2> = s.try_into().unwrap();
        close("lstm h_n", s.hidden, s_nn.hidden, TOL);
        close("lstm c_n", s.cell, s_nn.cell, TOL);

        let back: Lstm<B64> = fused.to_burn_nn().unwrap();
        assert_eq!(back.batch_first, batch_first);
        let (y_back, _) = back.forward(x.clone(), None);
        let (y_nn0, _) = lstm.forward(x, None);
        close("lstm round trip", y_back, y_nn0, ROUND);
        same_weights(
            "lstm round trip",
            &FusedRnn::from_burn_nn(&back).unwrap(),
            &fused,
        );
    }
}

#[test]
fn bilstm_matches_burn_nn() {
    for batch_first in [true, false] {
        let bilstm = BiLstmConfig::new(4, 3, true)
            .with_batch_first(batch_first)
            .init::<B64>(&device::<B64>());
        let fused = FusedRnn::from_burn_nn(&bilstm).unwrap();
        assert!(fused.spec().bidirectional);
        let shape = if batch_first { [3, 5, 4] } else { [5, 3, 4] };
        let x = random::<B64, 3>(shape, 4);
        let (c0, h0) = (
            random::<B64, 3>([2, 3, 3], 5),
            random::<B64, 3>([2, 3, 3], 6),
        );
        let (y_nn, s_nn) = bilstm.forward(x.clone(), Some(LstmState::new(c0.clone(), h0.clone())));
        let (y, s) = fused.forward(x.clone(), Some(LstmState::new(c0, h0).into()));
        close("bilstm y", y, y_nn.clone(), TOL);
        let s: LstmState<B64, 3> = s.try_into().unwrap();
        close("bilstm h_n", s.hidden, s_nn.hidden, TOL);
        close("bilstm c_n", s.cell, s_nn.cell, TOL);

        let back: BiLstm<B64> = fused.to_burn_nn().unwrap();
        let (y_back, _) = back.forward(x.clone(), None);
        let (y_nn, _) = bilstm.forward(x, None);
        close("bilstm round trip", y_back, y_nn, ROUND);
    }
}

#[test]
fn gru_and_bigru_match_burn_nn() {
    for bias in [true, false] {
        let gru = GruConfig::new(3, 4, bias).init::<B64>(&device::<B64>());
        let fused = FusedRnn::from_burn_nn(&gru).unwrap();
        assert!(fused.batch_first(), "burn-nn's Gru is batch-first");
        let x = random::<B64, 3>([2, 7, 3], 7);
        let h0 = random::<B64, 2>([2, 4], 8);
        let y_nn = gru.forward(x.clone(), Some(h0.clone()));
        let (y, s) = fused.forward(x.clone(), Some(RnnState::hidden_only(h0.unsqueeze_dim(0))));
        close("gru y", y.clone(), y_nn.clone(), TOL);
        // burn-nn's Gru returns no state: its last output is the final hidden state.
        close(
            "gru h_n",
            s.hidden.squeeze_dim::<2>(0),
            y.narrow(1, 6, 1).squeeze_dim(1),
            0.0,
        );
        let back: Gru<B64> = fused.to_burn_nn().unwrap();
        close(
            "gru round trip",
            back.forward(x.clone(), None),
            gru.forward(x, None),
            ROUND,
        );
    }
    let bigru = BiGruConfig::new(3, 4, true)
        .with_batch_first(false)
        .init::<B64>(&device::<B64>());
    let fused = FusedRnn::from_burn_nn(&bigru).unwrap();
    let x = random::<B64, 3>([6, 2, 3], 9);
    let h0 = random::<B64, 3>([2, 2, 4], 10);
    let (y_nn, h_nn) = bigru.forward(x.clone(), Some(h0.clone()));
    let (y, s) = fused.forward(x.clone(), Some(RnnState::hidden_only(h0)));
    close("bigru y", y, y_nn, TOL);
    close("bigru h_n", s.hidden, h_nn, TOL);
    let back: BiGru<B64> = fused.to_burn_nn().unwrap();
    close(
        "bigru round trip",
        back.forward(x.clone(), None).0,
        bigru.forward(x, None).0,
        ROUND,
    );
}

#[test]
fn rnn_tanh_relu_and_birnn_match_burn_nn() {
    for (activation, mode) in [
        (ActivationConfig::Tanh, RnnMode::RnnTanh),
        (ActivationConfig::Relu, RnnMode::RnnRelu),
    ] {
        let rnn = RnnConfig::new(3, 4, true)
            .with_hidden_activation(activation.clone())
            .init::<B64>(&device::<B64>());
        let fused = FusedRnn::from_burn_nn(&rnn).unwrap();
        assert_eq!(fused.spec().mode, mode);
        let x = random::<B64, 3>([2, 5, 3], 11);
        let h0 = random::<B64, 2>([2, 4], 12);
        let (y_nn, s_nn) = rnn.forward(x.clone(), Some(NnRnnState::new(h0.clone())));
        let (y, s) = fused.forward(x.clone(), Some(NnRnnState::new(h0).into()));
        close("rnn y", y, y_nn, TOL);
        let s: NnRnnState<B64, 2> = s.try_into().unwrap();
        close("rnn h_n", s.hidden, s_nn.hidden, TOL);
        let back: Rnn<B64> = fused.to_burn_nn().unwrap();
        close(
            "rnn round trip",
            back.forward(x.clone(), None).0,
            rnn.forward(x, None).0,
            ROUND,
        );

        let birnn = BiRnnConfig::new(3, 4, false)
            .with_hidden_activation(activation)
            .init::<B64>(&device::<B64>());
        let fused = FusedRnn::from_burn_nn(&birnn).unwrap();
        assert_eq!(fused.spec().mode, mode);
        assert!(!fused.spec().bias);
        let x = random::<B64, 3>([2, 5, 3], 13);
        let (y_nn, s_nn) = birnn.forward(x.clone(), None);
        let (y, s) = fused.forward(x.clone(), None);
        close("birnn y", y, y_nn, TOL);
        let s: NnRnnState<B64, 3> = s.try_into().unwrap();
        close("birnn h_n", s.hidden, s_nn.hidden, TOL);
        let back: BiRnn<B64> = fused.to_burn_nn().unwrap();
        close(
            "birnn round trip",
            back.forward(x.clone(), None).0,
            birnn.forward(x, None).0,
            ROUND,
        );
    }
}

/// A stack of burn-nn layers run one after the other, with per-layer initial states.
fn run_stack_lstm(
    layers: &[Lstm<B64>],
    x: Tensor<B64, 3>,
    states: Vec<LstmState<B64, 2>>,
) -> (Tensor<B64, 3>, Vec<LstmState<B64, 2>>) {
    let mut x = x;
    let mut out = vec![];
    for (layer, state) in layers.iter().zip(states) {
        let (y, s) = layer.forward(x, Some(state));
        x = y;
        out.push(s);
    }
    (x, out)
}

#[test]
fn lstm_stack_matches_burn_nn_layer_by_layer() {
    let device = device::<B64>();
    let layers = vec![
        LstmConfig::new(3, 4, true).init::<B64>(&device),
        // No bias in the middle layer: zeros in the fused module compute the same.
        LstmConfig::new(4, 4, false).init::<B64>(&device),
        LstmConfig::new(4, 4, true).init::<B64>(&device),
    ];
    let fused = FusedRnn::from_burn_nn_stack(&layers).unwrap();
    assert_eq!(fused.spec().num_layers, 3);
    let x = random::<B64, 3>([2, 5, 3], 14);
    let states: Vec<LstmState<B64, 2>> = (0..3)
        .map(|l| LstmState::new(random([2, 4], 20 + l), random([2, 4], 30 + l)))
        .collect();
    let state = RnnState::from_layers(
        states
            .iter()
            .map(|s| LstmState::new(s.cell.clone(), s.hidden.clone()).into())
            .collect(),
    );
    let (y_nn, s_nn) = run_stack_lstm(&layers, x.clone(), states);
    let (y, s) = fused.forward(x.clone(), Some(state));
    close("stack y", y, y_nn, TOL);
    for (l, (got, expected)) in s.into_layers(3).into_iter().zip(s_nn).enumerate() {
        let got: LstmState<B64, 2> = got.try_into().unwrap();
        close(&format!("stack h_n[{l}]"), got.hidden, expected.hidden, TOL);
        close(&format!("stack c_n[{l}]"), got.cell, expected.cell, TOL);
    }
    let back: Vec<Lstm<B64>> = fused.to_burn_nn_stack().unwrap();
    assert_eq!(back.len(), 3);
    let zero = || {
        (0..3)
            .map(|_| {
                LstmState::new(
                    Tensor::zeros([2, 4], &device),
                    Tensor::zeros([2, 4], &device),
                )
            })
            .collect()
    };
    close(
        "stack round trip",
        run_stack_lstm(&back, x.clone(), zero()).0,
        run_stack_lstm(&layers, x, zero()).0,
        ROUND,
    );
}

#[test]
fn bigru_stack_matches_burn_nn() {
    let device = device::<B64>();
    let layers = vec![
        BiGruConfig::new(3, 4, true).init::<B64>(&device),
        BiGruConfig::new(8, 4, true).init::<B64>(&device),
    ];
    let fused = FusedRnn::from_burn_nn_stack(&layers).unwrap();
    let x = random::<B64, 3>([2, 5, 3], 15);
    let (y0, h0) = layers[0].forward(x.clone(), None);
    let (y1, h1) = layers[1].forward(y0, None);
    let (y, s) = fused.forward(x, None);
    close("bigru stack y", y, y1, TOL);
    close(
        "bigru stack h_n",
        s.hidden,
        Tensor::cat(vec![h0, h1], 0),
        TOL,
    );
    let back: Vec<BiGru<B64>> = fused.to_burn_nn_stack().unwrap();
    same_weights(
        "bigru stack round trip",
        &FusedRnn::from_burn_nn_stack(&back).unwrap(),
        &fused,
    );
}

#[test]
fn flex_f32_matches_burn_nn() {
    let lstm = BiLstmConfig::new(3, 8, true).init::<Flex>(&Default::default());
    let fused = FusedRnn::from_burn_nn(&lstm).unwrap();
    let x = random::<Flex, 3>([4, 6, 3], 16);
    close(
        "flex bilstm",
        fused.forward(x.clone(), None).0,
        lstm.forward(x, None).0,
        1e-5,
    );
}

#[test]
fn skip_input_converts_to_identity_input_weights() {
    let device = device::<B64>();
    let fused = FusedRnnConfig::new(RnnMode::Gru, 4, 4)
        .with_input_mode(InputMode::Skip)
        .init::<B64>(&device);
    let gru: Gru<B64> = fused.to_burn_nn().unwrap();
    let x = random::<B64, 3>([2, 5, 4], 17);
    close(
        "skip input",
        gru.forward(x.clone(), None),
        fused.forward(x, None).0,
        TOL,
    );
}

fn err<T>(r: Result<T, InteropError>) -> String {
    match r {
        Ok(_) => panic!("expected an error"),
        Err(e) => e.to_string(),
    }
}

fn refused<B: FusedRnnBackend, L: BurnNnLayer<B>>(layer: &L, option: &str) {
    let msg = err(FusedRnn::from_burn_nn(layer));
    assert!(
        msg.starts_with(&format!("unsupported {option} = ")),
        "{option}: {msg}"
    );
}

#[test]
fn refusals_name_the_option() {
    let d = device::<B64>();
    refused(
        &LstmConfig::new(3, 4, true)
            .with_clip(Some(3.0))
            .init::<B64>(&d),
        "clip",
    );
    refused(
        &LstmConfig::new(3, 4, true)
            .with_input_forget(true)
            .init::<B64>(&d),
        "input_forget",
    );
    refused(
        &LstmConfig::new(3, 4, true)
            .with_reverse(true)
            .init::<B64>(&d),
        "reverse",
    );
    refused(
        &LstmConfig::new(3, 4, true)
            .with_gate_activation(ActivationConfig::HardSigmoid(HardSigmoidConfig::new()))
            .init::<B64>(&d),
        "gate_activation",
    );
    refused(
        &LstmConfig::new(3, 4, true)
            .with_cell_activation(ActivationConfig::Relu)
            .init::<B64>(&d),
        "cell_activation",
    );
    refused(
        &LstmConfig::new(3, 4, true)
            .with_hidden_activation(ActivationConfig::Gelu)
            .init::<B64>(&d),
        "hidden_activation",
    );
    refused(
        &BiLstmConfig::new(3, 4, true)
            .with_clip(Some(1.0))
            .init::<B64>(&d),
        "forward.clip",
    );
    let mut bilstm = BiLstmConfig::new(3, 4, true).init::<B64>(&d);
    bilstm.forward.batch_first = false;
    refused(&bilstm, "forward.batch_first");
    let mut bilstm = BiLstmConfig::new(3, 4, true).init::<B64>(&d);
    bilstm.forward.reverse = true;
    refused(&bilstm, "forward.reverse");

    let msg = err(FusedRnn::from_burn_nn(
        &GruConfig::new(3, 4, true)
            .with_reset_after(false)
            .init::<B64>(&d),
    ));
    assert!(
        msg.starts_with("unsupported reset_after = false: cuDNN's GRU"),
        "{msg}"
    );
    refused(
        &GruConfig::new(3, 4, true)
            .with_clip(Some(2.0))
            .init::<B64>(&d),
        "clip",
    );
    refused(
        &BiGruConfig::new(3, 4, true)
            .with_reset_after(false)
            .init::<B64>(&d),
        "forward.reset_after",
    );
    refused(
        &RnnConfig::new(3, 4, true)
            .with_reverse(true)
            .init::<B64>(&d),
        "reverse",
    );
    refused(
        &RnnConfig::new(3, 4, true)
            .with_hidden_activation(ActivationConfig::Sigmoid)
            .init::<B64>(&d),
        "hidden_activation",
    );
    refused(
        &BiRnnConfig::new(3, 4, true)
            .with_clip(Some(1.0))
            .init::<B64>(&d),
        "forward.clip",
    );
}

#[test]
fn stacks_that_cannot_fuse_are_refused() {
    let d = device::<B64>();
    let msg = err(FusedRnn::from_burn_nn_stack(&[
        LstmConfig::new(3, 4, true).init::<B64>(&d),
        LstmConfig::new(4, 5, true).init::<B64>(&d),
    ]));
    assert!(
        msg.starts_with("unsupported layers[1].d_hidden = 5"),
        "{msg}"
    );
    let msg = err(FusedRnn::from_burn_nn_stack(&[
        BiLstmConfig::new(3, 4, true).init::<B64>(&d),
        BiLstmConfig::new(4, 4, true).init::<B64>(&d),
    ]));
    assert!(
        msg.starts_with("unsupported layers[1].d_input = 4"),
        "{msg}"
    );
    assert!(msg.contains("of size 8"), "{msg}");
    let msg = err(FusedRnn::from_burn_nn_stack(&[
        RnnConfig::new(3, 4, true).init::<B64>(&d),
        RnnConfig::new(4, 4, true)
            .with_hidden_activation(ActivationConfig::Relu)
            .init::<B64>(&d),
    ]));
    assert!(
        msg.starts_with("unsupported layers[1].hidden_activation"),
        "{msg}"
    );
    let msg = err(FusedRnn::from_burn_nn_stack(&[
        LstmConfig::new(3, 4, true).init::<B64>(&d),
        LstmConfig::new(4, 4, true)
            .with_batch_first(false)
            .init::<B64>(&d),
    ]));
    assert!(
        msg.starts_with("unsupported layers[1].batch_first"),
        "{msg}"
    );
    let msg = err(FusedRnn::from_burn_nn_stack(&[
        LstmConfig::new(3, 4, true).init::<B64>(&d),
        LstmConfig::new(4, 4, true)
            .with_clip(Some(1.0))
            .init::<B64>(&d),
    ]));
    assert!(msg.starts_with("unsupported layers[1].clip"), "{msg}");
}

#[test]
fn conversions_back_refuse_what_burn_nn_cannot_hold() {
    let d = device::<B64>();
    let two_layers = FusedRnnConfig::new(RnnMode::Lstm, 3, 4)
        .with_num_layers(2)
        .init::<B64>(&d);
    let msg = err(two_layers.to_burn_nn::<Lstm<B64>>());
    assert!(msg.starts_with("unsupported num_layers = 2"), "{msg}");
    assert!(msg.contains("to_burn_nn_stack"), "{msg}");
    assert_eq!(two_layers.to_burn_nn_stack::<Lstm<B64>>().unwrap().len(), 2);
    let msg = err(two_layers.to_burn_nn::<BiLstm<B64>>());
    assert!(
        msg.contains("bidirectional") || msg.contains("num_layers"),
        "{msg}"
    );
    let msg = err(two_layers.to_burn_nn_stack::<BiLstm<B64>>());
    assert!(
        msg.starts_with("unsupported bidirectional = false"),
        "{msg}"
    );
    let msg = err(two_layers.to_burn_nn_stack::<Gru<B64>>());
    assert!(msg.starts_with("unsupported mode = Lstm"), "{msg}");
    let proj = FusedRnnConfig::new(RnnMode::Lstm, 3, 4)
        .with_proj_size(Some(2))
        .init::<B64>(&d);
    let msg = err(proj.to_burn_nn::<Lstm<B64>>());
    assert!(msg.starts_with("unsupported proj_size = Some(2)"), "{msg}");
    let relu = FusedRnnConfig::new(RnnMode::RnnRelu, 3, 4).init::<B64>(&d);
    let rnn: Rnn<B64> = relu.to_burn_nn().unwrap();
    assert!(matches!(
        rnn.hidden_activation,
        burn::nn::activation::Activation::Relu(_)
    ));
}

#[test]
fn state_constructors_and_conversions() {
    let d = device::<B64>();
    let h = random::<B64, 3>([2, 3, 4], 40);
    let c = random::<B64, 3>([2, 3, 4], 41);
    let s = RnnState::lstm(h.clone(), c.clone());
    close("lstm hidden", s.hidden.clone(), h.clone(), 0.0);
    close("lstm cell", s.cell.clone().unwrap(), c.clone(), 0.0);
    let t = RnnState::hidden_only(h.clone()).with_cell(c.clone());
    close("with_cell", t.cell.unwrap(), c.clone(), 0.0);
    assert!(RnnState::hidden_only(h.clone()).cell.is_none());

    // burn-nn's LstmState::new takes (cell, hidden): From goes by field.
    let from_nn = RnnState::from(LstmState::new(c.clone(), h.clone()));
    close("from LstmState hidden", from_nn.hidden, h.clone(), 0.0);
    close("from LstmState cell", from_nn.cell.unwrap(), c.clone(), 0.0);
    let nn: LstmState<B64, 3> = s.clone().try_into().unwrap();
    close("to LstmState hidden", nn.hidden, h.clone(), 0.0);
    close("to LstmState cell", nn.cell, c.clone(), 0.0);

    // A GRU state is no LstmState, and an LSTM state no hidden-only state.
    let msg = err(LstmState::<B64, 3>::try_from(RnnState::hidden_only(
        h.clone(),
    )));
    assert!(msg.starts_with("unsupported cell = \"None\""), "{msg}");
    let msg = err(NnRnnState::<B64, 3>::try_from(s.clone()));
    assert!(msg.starts_with("unsupported cell"), "{msg}");
    // Two pseudo-layers do not fit a one-layer burn-nn state.
    let msg = err(LstmState::<B64, 2>::try_from(s.clone()));
    assert!(
        msg.starts_with("state: expected shape [1, 3, 4], got [2, 3, 4]"),
        "{msg}"
    );

    let layers = s.clone().into_layers(2);
    assert_eq!(layers[1].hidden.dims(), [1, 3, 4]);
    let joined = RnnState::from_layers(layers);
    close("layers round trip", joined.hidden, h, 0.0);
    close("layers round trip cell", joined.cell.unwrap(), c, 0.0);
    let _ = d;
}
