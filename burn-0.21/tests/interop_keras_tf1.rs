//! Keras 3 layers (run by Keras itself, on its torch backend) and TF1
//! `tf.contrib.cudnn_rnn` canonical checkpoints (names and transformations transcribed
//! from TF1's cudnn_rnn_ops.py: TF1 cannot be installed here) import into modules that
//! match the tools' outputs, and export back to the same tensors
//! (tests/fixtures/interop/generate.py).
//!
//! Tolerance: NdArray f32 against the tools' float32 outputs, 1e-5 / 1e-5.

mod interop_common;

use std::collections::BTreeMap;

use burn::backend::ndarray::NdArray;
use burn::tensor::TensorData;
use burn_fused_rnn::interop::keras::{self, KerasCell, KerasLayerKind, KerasRnnLayer};
use burn_fused_rnn::interop::tf1;
use burn_fused_rnn::{FusedRnn, FusedRnnConfig, InputMode, RnnMode};
use interop_common::*;

fn keras_layers(case: &str) -> Vec<KerasRnnLayer> {
    let all = tensors("keras.safetensors");
    let cfg = &config()["keras"][case];
    cfg["layers"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .map(|(k, l)| {
            let cell = |side: &str| {
                let get = |n: &str| all.get(&format!("{case}/layer{k}/{side}/{n}")).cloned();
                get("kernel").map(|kernel| KerasCell {
                    kernel,
                    recurrent_kernel: get("recurrent_kernel").unwrap(),
                    bias: get("bias"),
                })
            };
            let kind = match l["class"].as_str().unwrap() {
                "LSTM" => KerasLayerKind::Lstm,
                "GRU" => KerasLayerKind::Gru,
                "SimpleRNN" => KerasLayerKind::SimpleRnn,
                other => panic!("class {other}"),
            };
            let mut layer = KerasRnnLayer::new(kind, cell("forward").unwrap());
            layer.backward = cell("backward");
            layer.activation = l["activation"].as_str().unwrap().into();
            if let Some(a) = l["recurrent_activation"].as_str() {
                layer.recurrent_activation = a.into();
            }
            if let Some(r) = l["reset_after"].as_bool() {
                layer.reset_after = r;
            }
            layer.go_backwards = l["go_backwards"].as_bool().unwrap();
            layer
        })
        .collect()
}

fn same(what: &str, a: &TensorData, b: &TensorData) {
    assert_eq!(a.shape, b.shape, "{what}: shape");
    assert_eq!(values(a.clone()), values(b.clone()), "{what}: values");
}

#[test]
fn keras_layers_match_keras() {
    let device = Default::default();
    let all = tensors("keras.safetensors");
    for (case, mode) in [
        ("lstm", RnnMode::Lstm),
        ("gru_bi", RnnMode::Gru),
        ("rnn_relu", RnnMode::RnnRelu),
        ("lstm_stack", RnnMode::Lstm),
    ] {
        let layers = keras_layers(case);
        let rnn: FusedRnn<NdArray> =
            keras::import(&layers, &device).unwrap_or_else(|e| panic!("{case}: {e}"));
        assert_eq!(rnn.spec().mode, mode);
        assert!(rnn.batch_first());
        let t = group(&all, &format!("{case}/"));
        let (y, state) = rnn.forward(tensor(&t["x"], &device), None);
        assert_close(&format!("keras {case} y"), y, &t["y"], 1e-5, 1e-5);
        assert_close(
            &format!("keras {case} h_n"),
            state.hidden,
            &t["h_n"],
            1e-5,
            1e-5,
        );
        if let Some(c_n) = t.get("c_n") {
            assert_close(
                &format!("keras {case} c_n"),
                state.cell.unwrap(),
                c_n,
                1e-5,
                1e-5,
            );
        }

        // Export gives Keras' tensors back (an LSTM's single bias is b_ih + b_hh = bias + 0).
        let exported = keras::export(&rnn).unwrap();
        assert_eq!(exported.len(), layers.len());
        for (k, (a, b)) in exported.iter().zip(&layers).enumerate() {
            assert_eq!(a.kind, b.kind);
            assert_eq!(a.activation, b.activation);
            let pairs = [
                (Some(&a.forward), Some(&b.forward)),
                (a.backward.as_ref(), b.backward.as_ref()),
            ];
            for (side, pair) in pairs.into_iter().enumerate() {
                match pair {
                    (Some(x), Some(y)) => {
                        let what = format!("keras {case} layer {k} side {side}");
                        same(&format!("{what} kernel"), &x.kernel, &y.kernel);
                        same(
                            &format!("{what} recurrent_kernel"),
                            &x.recurrent_kernel,
                            &y.recurrent_kernel,
                        );
                        same(
                            &format!("{what} bias"),
                            x.bias.as_ref().unwrap(),
                            y.bias.as_ref().unwrap(),
                        );
                    }
                    (None, None) => {}
                    _ => panic!("keras {case} layer {k}: directions differ"),
                }
            }
        }
    }
}

fn keras_err(layers: &[KerasRnnLayer]) -> String {
    match keras::import::<NdArray>(layers, &Default::default()) {
        Ok(_) => panic!("expected an error"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn keras_refusals_name_the_setting() {
    let mut l = keras_layers("gru_bi");
    l[0].reset_after = false;
    assert!(
        keras_err(&l).starts_with("unsupported layers[0].reset_after = false"),
        "{}",
        keras_err(&l)
    );
    let mut l = keras_layers("lstm");
    l[0].go_backwards = true;
    assert!(keras_err(&l).starts_with("unsupported layers[0].go_backwards = true"));
    let mut l = keras_layers("lstm");
    l[0].recurrent_activation = "hard_sigmoid".into();
    assert!(
        keras_err(&l).starts_with("unsupported layers[0].recurrent_activation = \"hard_sigmoid\"")
    );
    let mut l = keras_layers("rnn_relu");
    l[0].activation = "elu".into();
    assert!(keras_err(&l).starts_with("unsupported layers[0].activation = \"elu\""));
    let mut l = keras_layers("gru_bi");
    l[0].merge_mode = "sum".into();
    assert!(keras_err(&l).starts_with("unsupported layers[0].merge_mode = \"sum\""));
    let mut l = keras_layers("lstm_stack");
    l[1].forward.kernel = l[0].forward.kernel.clone();
    assert_eq!(
        keras_err(&l),
        "layers[1].forward.kernel: expected shape [4, 16], got [3, 16]"
    );
}

/// The TF1 tensors of fixture case `case`, by name.
fn tf1_tensors(case: &str) -> BTreeMap<String, TensorData> {
    let all = tensors("tf1.safetensors");
    group(&all, &format!("{case}/"))
        .into_iter()
        .filter(|(k, _)| k.contains('/'))
        .collect()
}

#[test]
fn tf1_checkpoints_match_pytorch() {
    let device = Default::default();
    let all = tensors("tf1.safetensors");
    for (case, mode) in [
        ("lstm", RnnMode::Lstm),
        ("gru", RnnMode::Gru),
        ("rnn_tanh", RnnMode::RnnTanh),
    ] {
        let canonical = tf1_tensors(case);
        let keys: Vec<&String> = canonical.keys().collect();
        let expected_keys: Vec<String> = config()["tf1"][case]["keys"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k.as_str().unwrap().to_string())
            .collect();
        assert_eq!(keys, expected_keys.iter().collect::<Vec<_>>());
        let rnn: FusedRnn<NdArray> =
            tf1::import(mode, &canonical, "", &device).unwrap_or_else(|e| panic!("{case}: {e}"));
        assert!(!rnn.batch_first());
        let t = group(&all, &format!("{case}/"));
        let (y, state) = rnn.forward(tensor(&t["x"], &device), None);
        assert_close(&format!("tf1 {case} y"), y, &t["y"], 1e-5, 1e-5);
        assert_close(
            &format!("tf1 {case} h_n"),
            state.hidden,
            &t["h_n"],
            1e-5,
            1e-5,
        );
        if let Some(c_n) = t.get("c_n") {
            assert_close(
                &format!("tf1 {case} c_n"),
                state.cell.unwrap(),
                c_n,
                1e-5,
                1e-5,
            );
        }
        // Export: TF1's names and tensors again (summed biases: bias/2 + bias/2 = bias).
        let exported = tf1::export(&rnn, "").unwrap();
        assert_eq!(exported.keys().collect::<Vec<_>>(), keys);
        for (k, v) in &exported {
            same(&format!("tf1 {case} {k}"), v, &canonical[k]);
        }
    }
}

#[test]
fn tf1_scope_and_foreign_variables() {
    let device = Default::default();
    let mut scoped: BTreeMap<String, TensorData> = tf1_tensors("gru")
        .into_iter()
        .map(|(k, v)| (format!("encoder/{k}"), v))
        .collect();
    // Optimizer slots and other variables sit next to the cell's tensors.
    let slot = scoped.values().next().unwrap().clone();
    scoped.insert(
        "encoder/rnn/multi_rnn_cell/cell_0/cudnn_compatible_gru_cell/gates/kernel/Adam".into(),
        slot.clone(),
    );
    scoped.insert("global_step".into(), slot);
    let rnn: FusedRnn<NdArray> = tf1::import(RnnMode::Gru, &scoped, "encoder", &device).unwrap();
    let plain: FusedRnn<NdArray> =
        tf1::import(RnnMode::Gru, &tf1_tensors("gru"), "", &device).unwrap();
    assert_equal(
        "scoped",
        rnn.flat_weights(),
        &plain.flat_weights().into_data(),
    );
    let names: Vec<String> = tf1::export(&rnn, "encoder").unwrap().into_keys().collect();
    assert!(
        names
            .iter()
            .all(|n| n.starts_with("encoder/rnn/multi_rnn_cell/cell_0/cudnn_compatible_gru_cell/")),
        "{names:?}"
    );

    let err = tf1::import::<NdArray>(RnnMode::Gru, &scoped, "", &device)
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("missing tensor rnn/multi_rnn_cell/cell_0/cudnn_compatible_gru_cell/gates/kernel: expected a tensor, got none"), "{err}");
    let mut broken = tf1_tensors("lstm");
    broken.remove(
        "stack_bidirectional_rnn/cell_1/bidirectional_rnn/bw/cudnn_compatible_lstm_cell/bias",
    );
    let err = tf1::import::<NdArray>(RnnMode::Lstm, &broken, "", &device)
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "missing tensor stack_bidirectional_rnn/cell_1/bidirectional_rnn/bw/cudnn_compatible_lstm_cell/bias: expected a tensor, got none"
    );
}

#[test]
fn exports_write_out_skip_input_and_refuse_projection() {
    let device = Default::default();
    let skip = FusedRnnConfig::new(RnnMode::Lstm, 4, 4)
        .with_input_mode(InputMode::Skip)
        .init::<NdArray>(&device);
    let x = tensor::<NdArray, 3>(
        &TensorData::new(
            (0..40).map(|i| (i as f32 * 0.37).sin()).collect(),
            [2, 5, 4],
        ),
        &device,
    );
    let (y, _) = skip.forward(x.clone(), None);
    let from_keras: FusedRnn<NdArray> =
        keras::import(&keras::export(&skip).unwrap(), &device).unwrap();
    assert_close(
        "skip via keras",
        from_keras.forward(x.clone(), None).0,
        &y.clone().into_data(),
        1e-6,
        0.0,
    );
    let from_tf1: FusedRnn<NdArray> =
        tf1::import(RnnMode::Lstm, &tf1::export(&skip, "").unwrap(), "", &device).unwrap();
    let from_tf1 = FusedRnnConfig::new(RnnMode::Lstm, 4, 4)
        .init_with_params::<NdArray>(from_tf1.flat_weights());
    assert_close(
        "skip via tf1",
        from_tf1.forward(x, None).0,
        &y.into_data(),
        1e-6,
        0.0,
    );

    let proj = FusedRnnConfig::new(RnnMode::Lstm, 3, 4)
        .with_proj_size(Some(2))
        .init::<NdArray>(&device);
    for err in [
        keras::export(&proj).unwrap_err(),
        tf1::export(&proj, "").unwrap_err(),
        burn_fused_rnn::interop::onnx::export(&proj).unwrap_err(),
    ] {
        assert!(
            err.to_string()
                .starts_with("unsupported proj_size = Some(2)"),
            "{err}"
        );
    }
}
