//! ONNX, Keras and TF1 weights on Burn 0.22: the fixtures of the 0.21 line
//! (`burn-0.21/tests/fixtures/interop/generate.py`: `torch.onnx.export`ed models run by
//! onnx's reference evaluator, Keras 3 layers run by Keras, TF1 canonical checkpoints and
//! a numpy transcription of TF1's cells) import into modules whose outputs match those
//! tools' outputs, and export back to the same tensors.
//!
//! Tolerance: float32 modules on NdArray and Flex against the tools' float32 outputs,
//! 1e-5 absolute + 1e-5 relative.
#![allow(deprecated)] // Burn 0.22 deprecates NdArray; the crate serves it.

use std::collections::BTreeMap;
use std::path::PathBuf;

use burn::store::{ModuleStore, SafetensorsStore};
use burn::tensor::{DType, Device, Tensor, TensorData};
use burn_fused_rnn::interop::keras::{self, KerasCell, KerasLayerKind, KerasRnnLayer};
use burn_fused_rnn::interop::onnx::{self, OnnxOp, OnnxRnnNode};
use burn_fused_rnn::interop::{tf1, InteropError};
use burn_fused_rnn::{FusedRnn, FusedRnnConfig, InputMode, RnnMode};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../burn-0.21/tests/fixtures/interop")
        .join(name)
}

/// Every tensor of a fixture `.safetensors` file, by name.
fn tensors(name: &str) -> BTreeMap<String, TensorData> {
    let mut store = SafetensorsStore::from_file(fixture(name));
    store
        .get_all_tensors()
        .expect("read fixture")
        .iter()
        .map(|(k, t)| {
            let data = burn::store::bridge::to_data(t).expect("tensor data");
            (k.clone(), data)
        })
        .collect()
}

/// The tensors of `all` under `prefix`, the prefix removed.
fn group(all: &BTreeMap<String, TensorData>, prefix: &str) -> BTreeMap<String, TensorData> {
    all.iter()
        .filter_map(|(k, v)| k.strip_prefix(prefix).map(|k| (k.to_string(), v.clone())))
        .collect()
}

/// The case descriptions (interop.json).
fn config() -> serde_json::Value {
    let text = std::fs::read_to_string(fixture("interop.json")).expect("read interop.json");
    serde_json::from_str(&text).expect("parse interop.json")
}

fn values(data: &TensorData) -> Vec<f64> {
    data.clone()
        .convert::<f64>()
        .to_vec::<f64>()
        .expect("float data")
}

fn devices() -> [(&'static str, Device); 2] {
    [("NdArray", Device::ndarray()), ("Flex", Device::flex())]
}

fn input(data: &TensorData, device: &Device) -> Tensor<3> {
    Tensor::from_data(data.clone().convert_dtype(DType::F32), (device, DType::F32))
}

/// Asserts `|got - expected| <= 1e-5 + 1e-5 |expected|` element-wise, with equal shapes.
fn close(what: &str, got: Tensor<3>, expected: &TensorData) {
    assert_eq!(
        got.dims().to_vec(),
        expected.shape().to_vec(),
        "{what}: shape"
    );
    let got = values(&got.into_data());
    for (i, (g, e)) in got.iter().zip(values(expected)).enumerate() {
        assert!(
            (g - e).abs() <= 1e-5 + 1e-5 * e.abs(),
            "{what}[{i}]: got {g}, expected {e}"
        );
    }
}

fn same(what: &str, a: &TensorData, b: &TensorData) {
    assert_eq!(a.shape(), b.shape(), "{what}: shape");
    assert_eq!(values(a), values(b), "{what}: values");
}

/// Runs `rnn` on the case's `x` and compares `y`, `h_n` and `c_n` with the tool's.
fn matches_outputs(what: &str, rnn: &FusedRnn, t: &BTreeMap<String, TensorData>, device: &Device) {
    let (y, state) = rnn.forward(input(&t["x"], device), None);
    close(&format!("{what} y"), y, &t["y"]);
    close(&format!("{what} h_n"), state.hidden, &t["h_n"]);
    if let Some(c_n) = t.get("c_n") {
        close(
            &format!("{what} c_n"),
            state.cell.expect("LSTM cell state"),
            c_n,
        );
    }
}

/// The ONNX nodes of fixture case `case`, with the attributes the exporter wrote.
fn onnx_nodes(case: &str) -> Vec<OnnxRnnNode> {
    let all = tensors("onnx.safetensors");
    config()["onnx"][case]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .map(|(k, n)| {
            let get = |key: &str| all.get(&format!("{case}/node{k}/{key}")).cloned();
            let op = match n["op_type"].as_str().unwrap() {
                "LSTM" => OnnxOp::Lstm,
                "GRU" => OnnxOp::Gru,
                "RNN" => OnnxOp::Rnn,
                other => panic!("op {other}"),
            };
            let mut node = OnnxRnnNode::new(op, get("W").unwrap(), get("R").unwrap());
            node.b = get("B");
            let attrs = &n["attributes"];
            if let Some(d) = attrs["direction"].as_str() {
                node.direction = d.into();
            }
            node.hidden_size = attrs["hidden_size"].as_u64().map(|h| h as usize);
            if let Some(l) = attrs["linear_before_reset"].as_i64() {
                node.linear_before_reset = l;
            }
            if let Some(a) = attrs["activations"].as_array() {
                node.activations = a.iter().map(|s| s.as_str().unwrap().to_string()).collect();
            }
            node
        })
        .collect()
}

#[test]
fn onnx_nodes_match_onnx_reference_and_export_back() {
    let all = tensors("onnx.safetensors");
    for case in ["lstm", "gru", "rnn_tanh"] {
        let nodes = onnx_nodes(case);
        for (name, device) in devices() {
            let rnn = onnx::import(&nodes, &device).unwrap_or_else(|e| panic!("{case}: {e}"));
            assert!(
                !rnn.batch_first(),
                "ONNX's default layout is sequence-first"
            );
            let t = group(&all, &format!("{case}/"));
            matches_outputs(&format!("onnx {case} ({name})"), &rnn, &t, &device);
        }
        let rnn = onnx::import(&nodes, &Device::flex()).unwrap();
        let exported = onnx::export(&rnn).unwrap();
        assert_eq!(exported.len(), nodes.len());
        for (k, (a, b)) in exported.iter().zip(&nodes).enumerate() {
            same(&format!("{case} node {k} W"), &a.w, &b.w);
            same(&format!("{case} node {k} R"), &a.r, &b.r);
            same(
                &format!("{case} node {k} B"),
                a.b.as_ref().unwrap(),
                b.b.as_ref().unwrap(),
            );
            assert_eq!(
                (a.op, &a.direction, a.hidden_size, a.linear_before_reset),
                (b.op, &b.direction, b.hidden_size, b.linear_before_reset)
            );
        }
    }
}

fn onnx_err(nodes: &[OnnxRnnNode]) -> String {
    match onnx::import(nodes, &Device::flex()) {
        Ok(_) => panic!("expected an error"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn onnx_refusals_name_the_attribute_or_input() {
    let mut n = onnx_nodes("gru");
    n[0].linear_before_reset = 0;
    let msg = onnx_err(&n);
    assert!(
        msg.starts_with("unsupported nodes[0].linear_before_reset = 0: cuDNN's GRU"),
        "{msg}"
    );
    let mut n = onnx_nodes("lstm");
    n[1].clip = Some(3.0);
    assert!(onnx_err(&n).starts_with("unsupported nodes[1].clip = 3.0"));
    let mut n = onnx_nodes("lstm");
    n[0].p = Some(TensorData::new(vec![0.5f32; 24], [2, 12]));
    assert!(onnx_err(&n).starts_with("unsupported nodes[0].P"));
    let mut n = onnx_nodes("rnn_tanh");
    n[0].direction = "reverse".into();
    assert!(onnx_err(&n).starts_with("unsupported nodes[0].direction = \"reverse\""));
    let mut n = onnx_nodes("lstm");
    n[1].w = n[0].w.clone(); // layer 1 takes layer 0's bidirectional output (8 features)
    assert_eq!(
        onnx_err(&n),
        "nodes[1].W: expected shape [2, 16, 8], got [2, 16, 3]"
    );
    let mut n = onnx_nodes("gru");
    n[0].b = Some(TensorData::new(vec![0i32; 48], [2, 24]));
    assert!(matches!(
        onnx::import(&n, &Device::flex()),
        Err(InteropError::Dtype { ref key, .. }) if key == "nodes[0].B"
    ));
    assert_eq!(
        onnx_err(&[]),
        "nodes: expected at least one ONNX node, got none"
    );
    // R is [2, 16, 4]: element 7 is direction 0, row 1 (gate i, first in both orders).
    let mut n = onnx_nodes("lstm");
    let mut r = values(&n[1].r);
    r[7] = f64::NAN;
    n[1].r = TensorData::new(r, n[1].r.shape().clone());
    assert_eq!(
        onnx_err(&n),
        "nodes[1] weight_hh_l1: expected finite weights, got NaN at index [1, 3]"
    );
}

#[test]
fn imports_keep_the_formats_dtype_and_refuse_what_it_cannot_hold() {
    // f64 nodes give an f64 module, equal to the f32 one's weights widened.
    let n32 = onnx_nodes("gru");
    let n64: Vec<OnnxRnnNode> = n32
        .iter()
        .cloned()
        .map(|n| n.map(|t| t.convert::<f64>()))
        .collect();
    let device = Device::flex();
    let (a, b) = (
        onnx::import(&n32, &device).unwrap(),
        onnx::import(&n64, &device).unwrap(),
    );
    assert_eq!(a.flat_weights().dtype(), DType::F32);
    assert_eq!(b.flat_weights().dtype(), DType::F64);
    assert_eq!(
        values(&a.flat_weights().into_data()),
        values(&b.flat_weights().into_data())
    );
    // A weight beyond f16's range is refused in f16, naming the canonical tensor.
    let mut n16: Vec<OnnxRnnNode> = n32
        .iter()
        .cloned()
        .map(|n| n.map(|t| t.convert_dtype(DType::F16)))
        .collect();
    let mut w = values(&n32[0].w);
    w[0] = 1e6;
    n16[0].w = TensorData::new(w, n32[0].w.shape().clone()); // f64 data: the module is f64
    assert!(onnx::import(&n16, &device).is_ok());
    n16[0].w = n16[0].w.clone().convert_dtype(DType::F16); // converted: 1e6 is inf in f16
    let err = onnx::import(&n16, &device).unwrap_err().to_string();
    assert!(err.contains("expected finite weights"), "{err}");
}

fn keras_layers(case: &str) -> Vec<KerasRnnLayer> {
    let all = tensors("keras.safetensors");
    config()["keras"][case]["layers"]
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

#[test]
fn keras_layers_match_keras_and_export_back() {
    let all = tensors("keras.safetensors");
    for (case, mode) in [
        ("lstm", RnnMode::Lstm),
        ("gru_bi", RnnMode::Gru),
        ("rnn_relu", RnnMode::RnnRelu),
        ("lstm_stack", RnnMode::Lstm),
    ] {
        let layers = keras_layers(case);
        for (name, device) in devices() {
            let rnn = keras::import(&layers, &device).unwrap_or_else(|e| panic!("{case}: {e}"));
            assert_eq!(rnn.spec().mode, mode);
            assert!(rnn.batch_first());
            let t = group(&all, &format!("{case}/"));
            matches_outputs(&format!("keras {case} ({name})"), &rnn, &t, &device);
        }
        // An LSTM's or RNN's single bias comes back as b_ih + b_hh = bias + 0.
        let rnn = keras::import(&layers, &Device::flex()).unwrap();
        let exported = keras::export(&rnn).unwrap();
        assert_eq!(exported.len(), layers.len());
        for (k, (a, b)) in exported.iter().zip(&layers).enumerate() {
            assert_eq!((a.kind, &a.activation), (b.kind, &b.activation));
            let sides = [
                (Some(&a.forward), Some(&b.forward)),
                (a.backward.as_ref(), b.backward.as_ref()),
            ];
            for (side, pair) in sides.into_iter().enumerate() {
                match pair {
                    (Some(x), Some(y)) => {
                        let what = format!("keras {case} layer {k} side {side}");
                        same(&format!("{what} kernel"), &x.kernel, &y.kernel);
                        same(
                            &format!("{what} recurrent"),
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
    let mut l = keras_layers("gru_bi");
    l[0].reset_after = false;
    let err = keras::import(&l, &Device::flex()).unwrap_err().to_string();
    assert!(
        err.starts_with("unsupported layers[0].reset_after = false"),
        "{err}"
    );
    let mut l = keras_layers("lstm_stack");
    l[1].forward.kernel = l[0].forward.kernel.clone();
    let err = keras::import(&l, &Device::flex()).unwrap_err().to_string();
    assert_eq!(
        err,
        "layers[1].forward.kernel: expected shape [4, 16], got [3, 16]"
    );
}

/// The TF1 tensors of fixture case `case`, by name.
fn tf1_tensors(case: &str) -> BTreeMap<String, TensorData> {
    group(&tensors("tf1.safetensors"), &format!("{case}/"))
        .into_iter()
        .filter(|(k, _)| k.contains('/'))
        .collect()
}

#[test]
fn tf1_checkpoints_match_tf1_cells_and_export_back() {
    let all = tensors("tf1.safetensors");
    for (case, mode) in [
        ("lstm", RnnMode::Lstm),
        ("gru", RnnMode::Gru),
        ("rnn_tanh", RnnMode::RnnTanh),
    ] {
        let canonical = tf1_tensors(case);
        let keys: Vec<String> = canonical.keys().cloned().collect();
        let expected_keys: Vec<String> = config()["tf1"][case]["keys"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k.as_str().unwrap().to_string())
            .collect();
        assert_eq!(keys, expected_keys);
        for (name, device) in devices() {
            let rnn = tf1::import(mode, &canonical, "", &device)
                .unwrap_or_else(|e| panic!("{case}: {e}"));
            assert!(!rnn.batch_first());
            let t = group(&all, &format!("{case}/"));
            matches_outputs(&format!("tf1 {case} ({name})"), &rnn, &t, &device);
        }
        // TF1's names and tensors again (summed biases: bias/2 + bias/2 = bias).
        let rnn = tf1::import(mode, &canonical, "", &Device::flex()).unwrap();
        let exported = tf1::export(&rnn, "").unwrap();
        assert_eq!(exported.keys().cloned().collect::<Vec<_>>(), keys);
        for (k, v) in &exported {
            same(&format!("tf1 {case} {k}"), v, &canonical[k]);
        }
    }
    let mut broken = tf1_tensors("lstm");
    broken.remove(
        "stack_bidirectional_rnn/cell_1/bidirectional_rnn/bw/cudnn_compatible_lstm_cell/bias",
    );
    let err = tf1::import(RnnMode::Lstm, &broken, "", &Device::flex())
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "missing tensor stack_bidirectional_rnn/cell_1/bidirectional_rnn/bw/cudnn_compatible_lstm_cell/bias: expected a tensor, got none"
    );
    let scoped: BTreeMap<String, TensorData> = tf1_tensors("gru")
        .into_iter()
        .map(|(k, v)| (format!("encoder/{k}"), v))
        .collect();
    let a = tf1::import(RnnMode::Gru, &scoped, "encoder", &Device::flex()).unwrap();
    let b = tf1::import(RnnMode::Gru, &tf1_tensors("gru"), "", &Device::flex()).unwrap();
    assert_eq!(
        values(&a.flat_weights().into_data()),
        values(&b.flat_weights().into_data())
    );
}

#[test]
fn exports_write_out_skip_input_and_refuse_projection() {
    let device = Device::flex();
    let skip = FusedRnnConfig::new(RnnMode::Lstm, 4, 4)
        .with_input_mode(InputMode::Skip)
        .init(&device);
    let x = input(
        &TensorData::new(
            (0..40).map(|i| (i as f32 * 0.37).sin()).collect(),
            [2, 5, 4],
        ),
        &device,
    );
    let (y, _) = skip.forward(x.clone(), None);
    let y = y.into_data();
    let from_keras = keras::import(&keras::export(&skip).unwrap(), &device).unwrap();
    let from_onnx = onnx::import(&onnx::export(&skip).unwrap(), &device).unwrap();
    for (what, rnn) in [("keras", from_keras), ("onnx", from_onnx)] {
        let got = values(&rnn.forward(x.clone(), None).0.into_data());
        for (g, e) in got.iter().zip(values(&y)) {
            assert!(
                (g - e).abs() <= 1e-6,
                "skip via {what}: got {g}, expected {e}"
            );
        }
    }
    let proj = FusedRnnConfig::new(RnnMode::Lstm, 3, 4)
        .with_proj_size(Some(2))
        .init(&device);
    for err in [
        keras::export(&proj).unwrap_err(),
        tf1::export(&proj, "").unwrap_err(),
        onnx::export(&proj).unwrap_err(),
    ] {
        assert!(
            err.to_string()
                .starts_with("unsupported proj_size = Some(2)"),
            "{err}"
        );
    }
}
