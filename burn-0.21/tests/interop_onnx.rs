//! ONNX `LSTM` / `GRU` / `RNN` weights: the initializers of `torch.onnx.export`ed models
//! (tests/fixtures/interop/generate.py) import into a module whose outputs match onnx's
//! reference evaluator running the exported graph, and export back to the same tensors.
//!
//! Tolerance: NdArray f32 and Flex against the evaluator's float32 outputs, 1e-5 / 1e-5.

mod interop_common;

use burn::backend::ndarray::NdArray;
use burn::backend::Flex;
use burn::tensor::TensorData;
use burn_fused_rnn::interop::onnx::{self, OnnxOp, OnnxRnnNode};
use burn_fused_rnn::interop::PytorchImport;
use burn_fused_rnn::{FusedRnn, FusedRnnBackend, RnnMode};
use interop_common::*;

/// The nodes of fixture case `case`, with the attributes the exporter wrote.
fn nodes(case: &str) -> Vec<OnnxRnnNode> {
    let all = tensors("onnx.safetensors");
    let cfg = &config()["onnx"][case];
    cfg["nodes"]
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

fn check<B: FusedRnnBackend>(case: &str) {
    let device = B::Device::default();
    let rnn: FusedRnn<B> =
        onnx::import(&nodes(case), &device).unwrap_or_else(|e| panic!("{case}: {e}"));
    assert!(
        !rnn.batch_first(),
        "ONNX's default layout is sequence-first"
    );
    let all = tensors("onnx.safetensors");
    let t = group(&all, &format!("{case}/"));
    let (y, state) = rnn.forward(tensor(&t["x"], &device), None);
    let what = |n: &str| format!("onnx {case} {n} ({})", B::name(&device));
    assert_close(&what("y"), y, &t["y"], 1e-5, 1e-5);
    assert_close(&what("h_n"), state.hidden, &t["h_n"], 1e-5, 1e-5);
    if let Some(c_n) = t.get("c_n") {
        assert_close(&what("c_n"), state.cell.unwrap(), c_n, 1e-5, 1e-5);
    }
}

#[test]
fn torch_exported_lstm_matches_onnx_reference() {
    check::<NdArray>("lstm");
    check::<Flex>("lstm");
}

#[test]
fn torch_exported_gru_matches_onnx_reference() {
    check::<NdArray>("gru");
    check::<Flex>("gru");
}

#[test]
fn torch_exported_rnn_matches_onnx_reference() {
    check::<NdArray>("rnn_tanh");
}

fn same(what: &str, a: &TensorData, b: &TensorData) {
    assert_eq!(a.shape, b.shape, "{what}: shape");
    assert_eq!(values(a.clone()), values(b.clone()), "{what}: values");
}

#[test]
fn export_gives_back_the_exported_tensors() {
    for case in ["lstm", "gru", "rnn_tanh"] {
        let original = nodes(case);
        let rnn: FusedRnn<NdArray> = onnx::import(&original, &Default::default()).unwrap();
        let exported = onnx::export(&rnn).unwrap();
        assert_eq!(exported.len(), original.len());
        for (k, (a, b)) in exported.iter().zip(&original).enumerate() {
            same(&format!("{case} node {k} W"), &a.w, &b.w);
            same(&format!("{case} node {k} R"), &a.r, &b.r);
            same(
                &format!("{case} node {k} B"),
                a.b.as_ref().unwrap(),
                b.b.as_ref().unwrap(),
            );
            assert_eq!(a.op, b.op);
            assert_eq!(a.direction, b.direction);
            assert_eq!(a.hidden_size, b.hidden_size);
            assert_eq!(a.linear_before_reset, b.linear_before_reset);
        }
    }
}

#[test]
fn rnn_relu_goes_through_activations() {
    // PyTorch's RNN-relu (bidirectional, no bias) out to ONNX and back.
    let device = Default::default();
    let rnn: FusedRnn<NdArray> = PytorchImport::new(RnnMode::RnnRelu)
        .with_prefix("decoder.rnn.")
        .with_batch_first(true) // the model made it with batch_first=True
        .load(fixture("rnn_relu.safetensors"), &device)
        .unwrap();
    let nodes = onnx::export(&rnn).unwrap();
    assert_eq!(nodes[0].activations, ["Relu", "Relu"]);
    assert!(nodes[0].b.is_none());
    assert_eq!(nodes[0].layout, 1);
    let back: FusedRnn<NdArray> = onnx::import(&nodes, &device).unwrap();
    assert_eq!(back.spec(), rnn.spec());
    assert!(back.batch_first());
    assert_equal(
        "relu round trip",
        back.flat_weights(),
        &rnn.flat_weights().into_data(),
    );
}

fn err(nodes: &[OnnxRnnNode]) -> String {
    match onnx::import::<NdArray>(nodes, &Default::default()) {
        Ok(_) => panic!("expected an error"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn refusals_name_the_attribute() {
    let gru = nodes("gru");
    let mut n = gru.clone();
    n[0].linear_before_reset = 0;
    let msg = err(&n);
    assert!(
        msg.starts_with("unsupported nodes[0].linear_before_reset = 0: cuDNN's GRU"),
        "{msg}"
    );

    let lstm = nodes("lstm");
    let mut n = lstm.clone();
    n[1].clip = Some(3.0);
    assert!(
        err(&n).starts_with("unsupported nodes[1].clip = 3.0"),
        "{}",
        err(&n)
    );
    let mut n = lstm.clone();
    n[0].input_forget = 1;
    assert!(err(&n).starts_with("unsupported nodes[0].input_forget = 1"));
    let mut n = lstm.clone();
    n[0].activations = ["Sigmoid", "Tanh", "Relu"]
        .repeat(2)
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert!(
        err(&n).starts_with("unsupported nodes[0].activations"),
        "{}",
        err(&n)
    );
    let mut n = lstm.clone();
    n[0].activations = ["Sigmoid", "Tanh", "Tanh"]
        .repeat(2)
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert!(
        onnx::import::<NdArray>(&n, &Default::default()).is_ok(),
        "explicit defaults are fine"
    );
    let mut n = lstm.clone();
    n[0].p = Some(TensorData::new(vec![0.0f32; 24], [2, 12]));
    assert!(
        onnx::import::<NdArray>(&n, &Default::default()).is_ok(),
        "zero peepholes are fine"
    );
    n[0].p = Some(TensorData::new(vec![0.5f32; 24], [2, 12]));
    assert!(err(&n).starts_with("unsupported nodes[0].P"), "{}", err(&n));

    let rnn = nodes("rnn_tanh");
    let mut n = rnn.clone();
    n[0].direction = "reverse".into();
    let msg = err(&n);
    assert!(
        msg.starts_with("unsupported nodes[0].direction = \"reverse\""),
        "{msg}"
    );
    let mut n = rnn.clone();
    n[1].activations = vec!["Relu".into()];
    assert!(
        err(&n).starts_with("unsupported nodes[1].direction"),
        "{}",
        err(&n)
    );
    let mut n = rnn.clone();
    n[0].activations = vec!["Sigmoid".into()];
    assert!(
        err(&n).starts_with("unsupported nodes[0].activations"),
        "{}",
        err(&n)
    );
}

#[test]
fn wrong_shapes_name_the_input() {
    let mut n = nodes("lstm");
    // Layer 1 takes layer 0's bidirectional output (8 features), not 3.
    n[1].w = n[0].w.clone();
    assert_eq!(
        err(&n),
        "nodes[1].W: expected shape [2, 16, 8], got [2, 16, 3]"
    );
    let mut n = nodes("gru");
    n[0].b = Some(TensorData::new(vec![0.0f32; 24], [2, 12]));
    assert_eq!(err(&n), "nodes[0].B: expected shape [2, 24], got [2, 12]");
    let mut n = nodes("gru");
    n[0].hidden_size = Some(5);
    assert!(
        err(&n).starts_with("unsupported nodes[0].hidden_size = 5"),
        "{}",
        err(&n)
    );
}
