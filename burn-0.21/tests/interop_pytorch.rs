//! PyTorch `state_dict`s: `.pt` and `.safetensors` files written by torch
//! (tests/fixtures/interop/generate.py) load in one call and match PyTorch's outputs;
//! export re-imports exactly; errors name the key and both shapes.
//!
//! Tolerances (`|got - expected| <= atol + rtol·|expected|`): f32 backends against
//! PyTorch's float32 outputs 1e-5 / 1e-5; NdArray f64 against PyTorch run in float64 on
//! the same (float32-valued) weights 1e-12 / 1e-10.

mod interop_common;

use burn::backend::ndarray::NdArray;
use burn::backend::Flex;
use burn::tensor::TensorData;
use burn_fused_rnn::interop::{InteropError, PytorchImport};
use burn_fused_rnn::{FusedRnn, FusedRnnBackend, FusedRnnConfig, InputMode, RnnMode, RnnState};
use interop_common::*;

const F32_TOL: (f64, f64) = (1e-5, 1e-5);
const F64_TOL: (f64, f64) = (1e-12, 1e-10);

fn mode(name: &str) -> RnnMode {
    match name {
        "lstm" => RnnMode::Lstm,
        "gru" => RnnMode::Gru,
        "rnn_tanh" => RnnMode::RnnTanh,
        "rnn_relu" => RnnMode::RnnRelu,
        m => panic!("unknown mode {m}"),
    }
}

/// Loads PyTorch case `case` in one call (configuration inferred) and compares the
/// module's outputs with PyTorch's (`suffix` "" for the model's dtype, "64" for float64).
fn check_case<B: FusedRnnBackend>(case: &str, suffix: &str, (atol, rtol): (f64, f64)) {
    let cfg = &config()["pytorch"][case];
    let device = B::Device::default();
    let rnn: FusedRnn<B> = PytorchImport::new(mode(cfg["mode"].as_str().unwrap()))
        .with_prefix(cfg["prefix"].as_str().unwrap())
        .with_batch_first(cfg["batch_first"].as_bool().unwrap())
        .load(fixture(cfg["file"].as_str().unwrap()), &device)
        .unwrap_or_else(|e| panic!("{case}: {e}"));

    // The inferred configuration is PyTorch's.
    let spec = rnn.spec();
    assert_eq!(
        spec.d_input as u64,
        cfg["d_input"].as_u64().unwrap(),
        "{case}: d_input"
    );
    assert_eq!(
        spec.d_hidden as u64,
        cfg["d_hidden"].as_u64().unwrap(),
        "{case}: d_hidden"
    );
    assert_eq!(
        spec.num_layers as u64,
        cfg["num_layers"].as_u64().unwrap(),
        "{case}: layers"
    );
    assert_eq!(
        spec.bidirectional,
        cfg["bidirectional"].as_bool().unwrap(),
        "{case}"
    );
    assert_eq!(
        spec.proj_size.map(|p| p as u64),
        cfg["proj_size"].as_u64(),
        "{case}: proj"
    );
    assert_eq!(spec.bias, cfg["bias"].as_bool().unwrap(), "{case}: bias");
    assert!(!spec.skip_input, "{case}: skip input");

    let all = tensors("expected.safetensors");
    let t = group(&all, &format!("{case}/"));
    let state = t.get("h0").map(|h0| {
        let hidden = tensor::<B, 3>(h0, &device);
        match t.get("c0") {
            Some(c0) => RnnState::lstm(hidden, tensor(c0, &device)),
            None => RnnState::hidden_only(hidden),
        }
    });
    let (y, state) = rnn.forward(tensor(&t["x"], &device), state);
    let what = |n: &str| format!("{case} ({}) {n}", B::name(&device));
    assert_close(&what("y"), y, &t[&format!("y{suffix}")], atol, rtol);
    assert_close(
        &what("h_n"),
        state.hidden,
        &t[&format!("h_n{suffix}")],
        atol,
        rtol,
    );
    match (state.cell, t.get(&format!("c_n{suffix}"))) {
        (Some(c), Some(expected)) => {
            assert_close(&what("c_n"), c, expected, atol, rtol);
        }
        (None, None) => {}
        (got, expected) => panic!(
            "{case}: cell state {} vs {}",
            got.is_some(),
            expected.is_some()
        ),
    }
}

#[test]
fn bare_lstm_pt_matches_pytorch() {
    check_case::<NdArray<f32>>("lstm", "", F32_TOL);
    check_case::<Flex>("lstm", "", F32_TOL);
    check_case::<NdArray<f64>>("lstm", "64", F64_TOL);
}

#[test]
fn prefixed_lstm_with_projection_pt_matches_pytorch() {
    check_case::<NdArray<f32>>("lstm_proj", "", F32_TOL);
    check_case::<Flex>("lstm_proj", "", F32_TOL);
    check_case::<NdArray<f64>>("lstm_proj", "64", F64_TOL);
}

#[test]
fn gru_safetensors_matches_pytorch() {
    check_case::<NdArray<f32>>("gru", "", F32_TOL);
    check_case::<Flex>("gru", "", F32_TOL);
    check_case::<NdArray<f64>>("gru", "64", F64_TOL);
}

#[test]
fn prefixed_rnn_relu_without_bias_safetensors_matches_pytorch() {
    check_case::<NdArray<f32>>("rnn_relu", "", F32_TOL);
    check_case::<NdArray<f64>>("rnn_relu", "64", F64_TOL);
}

#[test]
fn float64_pt_matches_pytorch() {
    // A float64 file: f64 weights on NdArray f64, and converted to f32 on Flex.
    check_case::<NdArray<f64>>("rnn_tanh_f64", "", F64_TOL);
    check_case::<Flex>("rnn_tanh_f64", "", F32_TOL);
}

fn lstm_proj_config() -> FusedRnnConfig {
    FusedRnnConfig::new(RnnMode::Lstm, 3, 5)
        .with_num_layers(2)
        .with_bidirectional(true)
        .with_proj_size(Some(3))
}

#[test]
fn checked_config_loads_and_keeps_its_settings() {
    let device = Default::default();
    let config = lstm_proj_config()
        .with_dropout(0.25)
        .with_batch_first(false);
    let rnn: FusedRnn<NdArray> = PytorchImport::with_config(config)
        .with_prefix("encoder.rnn.")
        .load(fixture("model_lstm_proj.pt"), &device)
        .unwrap();
    assert!(!rnn.batch_first());
    let inferred: FusedRnn<NdArray> = PytorchImport::new(RnnMode::Lstm)
        .with_prefix("encoder.rnn.")
        .load(fixture("model_lstm_proj.pt"), &device)
        .unwrap();
    assert_equal(
        "checked vs inferred weights",
        rnn.flat_weights(),
        &inferred.flat_weights().into_data(),
    );
}

fn load_err(import: PytorchImport, file: &str) -> InteropError {
    match import.load::<NdArray>(fixture(file), &Default::default()) {
        Ok(_) => panic!("expected an error loading {file}"),
        Err(e) => e,
    }
}

#[test]
fn wrong_config_names_the_key_and_both_shapes() {
    // Hidden size 6 instead of 5: the first tensor checked is layer 0's W_ih.
    let config = FusedRnnConfig::new(RnnMode::Lstm, 3, 6)
        .with_num_layers(2)
        .with_bidirectional(true)
        .with_proj_size(Some(3));
    let err = load_err(
        PytorchImport::with_config(config).with_prefix("encoder.rnn."),
        "model_lstm_proj.pt",
    );
    assert_eq!(
        err.to_string(),
        "encoder.rnn.weight_ih_l0: expected shape [24, 3], got [20, 3]"
    );
    // One layer where the file has two: layer 1's tensors have no place.
    let err = load_err(
        PytorchImport::with_config(lstm_proj_config().with_num_layers(1))
            .with_prefix("encoder.rnn."),
        "model_lstm_proj.pt",
    );
    let msg = err.to_string();
    assert!(matches!(err, InteropError::Unexpected { .. }), "{msg}");
    assert!(
        msg.starts_with(
            "unexpected tensor encoder.rnn.weight_ih_l1: expected no such tensor, got one of shape [20, 6]"
        ),
        "{msg}"
    );
    assert!(msg.contains("1 layer(s)"), "{msg}");
    // No projection configured.
    let err = load_err(
        PytorchImport::with_config(lstm_proj_config().with_proj_size(None))
            .with_prefix("encoder.rnn."),
        "model_lstm_proj.pt",
    );
    assert_eq!(
        err.to_string(),
        "encoder.rnn.weight_hh_l0: expected shape [20, 5], got [20, 3]"
    );
    // Skip input configured: the file's weight_ih_l0 has no place.
    let skip = FusedRnnConfig::new(RnnMode::Gru, 4, 4)
        .with_num_layers(2)
        .with_input_mode(InputMode::Skip);
    let err = load_err(PytorchImport::with_config(skip), "gru.safetensors");
    assert!(err.to_string().contains("skip input"), "{err}");
}

#[test]
fn wrong_mode_is_named() {
    // A GRU's weight_hh_l0 is [12, 4]: 3 gates, not LSTM's 4.
    let err = load_err(PytorchImport::new(RnnMode::Lstm), "gru.safetensors");
    assert_eq!(
        err.to_string(),
        "weight_hh_l0: expected shape [16, 4], got [12, 4] (mode lstm: 4 gates of hidden size 4; is the mode right?)"
    );
    let err = load_err(PytorchImport::new(RnnMode::Gru), "model_lstm_proj.pt");
    assert!(err.to_string().contains("\"encoder.rnn.\""), "{err}");
}

#[test]
fn missing_prefix_suggests_the_right_one() {
    let err = load_err(PytorchImport::new(RnnMode::Lstm), "model_lstm_proj.pt");
    assert!(matches!(err, InteropError::Missing { .. }), "{err}");
    assert_eq!(
        err.to_string(),
        "missing tensor weight_hh_l0: expected a tensor, got none (no key under prefix \"\" is an RNN parameter; the file has RNN parameters under prefix \"encoder.rnn.\")"
    );
    // The right prefix, but other tensors under it.
    let err = load_err(
        PytorchImport::new(RnnMode::RnnRelu).with_prefix("decoder."),
        "rnn_relu.safetensors",
    );
    assert!(
        err.to_string()
            .starts_with("missing tensor decoder.weight_hh_l0: expected a tensor, got none"),
        "{err}"
    );
    assert!(
        err.to_string().contains("under prefix \"decoder.rnn.\""),
        "{err}"
    );
    let err = load_err(
        PytorchImport::new(RnnMode::Lstm).with_prefix("encoder."),
        "model_lstm_proj.pt",
    );
    assert!(matches!(err, InteropError::Missing { .. }), "{err}");
}

#[test]
fn unreadable_files_are_io_errors() {
    let err = load_err(PytorchImport::new(RnnMode::Lstm), "no_such_file.pt");
    assert!(matches!(err, InteropError::Io { .. }), "{err}");
    assert!(err.to_string().contains("no_such_file.pt"), "{err}");
    // A JSON file is neither a PyTorch checkpoint nor safetensors.
    let err = load_err(PytorchImport::new(RnnMode::Lstm), "interop.json");
    assert!(matches!(err, InteropError::Io { .. }), "{err}");
    let boxed: Box<dyn std::error::Error> = Box::new(err);
    assert!(boxed.source().is_some());
}

#[test]
fn export_reimports_exactly() {
    let device = Default::default();
    for (file, prefix, mode) in [
        ("model_lstm_proj.pt", "encoder.rnn.", RnnMode::Lstm),
        ("gru.safetensors", "", RnnMode::Gru),
        ("rnn_relu.safetensors", "decoder.rnn.", RnnMode::RnnRelu),
    ] {
        let rnn: FusedRnn<NdArray> = PytorchImport::new(mode)
            .with_prefix(prefix)
            .load(fixture(file), &device)
            .unwrap();
        for out_prefix in ["", "model.rnn."] {
            let path = temp_path(&format!("export_{}_{out_prefix}.safetensors", mode.name()));
            rnn.save_pytorch_safetensors(&path, out_prefix).unwrap();
            let back: FusedRnn<NdArray> = PytorchImport::new(mode)
                .with_prefix(out_prefix)
                .load(&path, &device)
                .unwrap();
            assert_eq!(back.spec(), rnn.spec(), "{file}");
            assert_equal(file, back.flat_weights(), &rnn.flat_weights().into_data());
        }
    }
}

#[test]
fn skip_input_export_leaves_out_layer_0_input_weights() {
    let device = Default::default();
    let config = FusedRnnConfig::new(RnnMode::Gru, 4, 4)
        .with_num_layers(2)
        .with_input_mode(InputMode::Skip);
    let rnn = config.init::<NdArray>(&device);
    let names: Vec<String> = rnn
        .pytorch_state_dict("")
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    assert_eq!(
        names,
        [
            "weight_hh_l0",
            "bias_hh_l0",
            "weight_ih_l1",
            "weight_hh_l1",
            "bias_ih_l1",
            "bias_hh_l1"
        ]
    );
    let path = temp_path("skip.safetensors");
    rnn.save_pytorch_safetensors(&path, "").unwrap();
    let back: FusedRnn<NdArray> = PytorchImport::new(RnnMode::Gru)
        .load(&path, &device)
        .unwrap();
    assert!(back.spec().skip_input);
    assert_equal(
        "skip round trip",
        back.flat_weights(),
        &rnn.flat_weights().into_data(),
    );
}

#[test]
fn state_dict_has_pytorch_names_in_pytorch_order() {
    let cfg = &config()["pytorch"]["lstm_proj"];
    let rnn = lstm_proj_config().init::<NdArray>(&Default::default());
    let names: Vec<String> = rnn
        .pytorch_state_dict("")
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    let torch: Vec<String> = cfg["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k.as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, torch);
    let _: Vec<TensorData> = rnn
        .pytorch_state_dict("x.")
        .into_iter()
        .map(|(_, d)| d)
        .collect();
}
