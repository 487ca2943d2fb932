//! Helpers of the interop tests: the fixtures of tests/fixtures/interop (made by its
//! generate.py with torch, onnx and keras) and comparisons.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::PathBuf;

use burn::tensor::backend::Backend;
use burn::tensor::{Element, Tensor, TensorData};
use burn_store::{ModuleStore, SafetensorsStore};

pub fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/interop")
        .join(name)
}

/// Every tensor of a fixture `.safetensors` file, by name.
pub fn tensors(name: &str) -> BTreeMap<String, TensorData> {
    let mut store = SafetensorsStore::from_file(fixture(name));
    store
        .get_all_snapshots()
        .expect("read fixture")
        .iter()
        .map(|(k, s)| (k.clone(), s.to_data().expect("tensor data")))
        .collect()
}

/// The tensors of `file` whose names start with `prefix`, with the prefix removed.
pub fn group(all: &BTreeMap<String, TensorData>, prefix: &str) -> BTreeMap<String, TensorData> {
    all.iter()
        .filter_map(|(k, v)| k.strip_prefix(prefix).map(|k| (k.to_string(), v.clone())))
        .collect()
}

/// The case descriptions (tests/fixtures/interop/interop.json).
pub fn config() -> serde_json::Value {
    let text = std::fs::read_to_string(fixture("interop.json")).expect("read interop.json");
    serde_json::from_str(&text).expect("parse interop.json")
}

/// A tensor of `B`'s float element type (explicit dtype: NdArray<f32> and NdArray<f64>
/// share one device, whose default dtype is whichever came first).
pub fn tensor<B: Backend, const D: usize>(data: &TensorData, device: &B::Device) -> Tensor<B, D> {
    let dtype = <B::FloatElem as Element>::dtype();
    Tensor::from_data(data.clone().convert_dtype(dtype), (device, dtype))
}

pub fn values(data: TensorData) -> Vec<f64> {
    data.convert::<f64>().to_vec::<f64>().expect("float data")
}

/// Asserts `|got - expected| <= atol + rtol * |expected|` element-wise, with equal shapes;
/// returns the largest |difference|.
pub fn assert_close<B: Backend, const D: usize>(
    what: &str,
    got: Tensor<B, D>,
    expected: &TensorData,
    atol: f64,
    rtol: f64,
) -> f64 {
    assert_eq!(
        got.dims().to_vec(),
        expected.shape.to_vec(),
        "{what}: shape differs from the expected one"
    );
    let got = values(got.into_data());
    let expected = values(expected.clone());
    let mut worst = 0.0f64;
    for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
        let diff = (g - e).abs();
        assert!(
            diff <= atol + rtol * e.abs(),
            "{what}: element {i}: got {g}, expected {e} (|diff| {diff:.3e} > {atol:e} + {rtol:e}·|expected|)"
        );
        worst = worst.max(diff);
    }
    worst
}

/// Asserts that two tensors are equal element for element.
pub fn assert_equal<B: Backend, const D: usize>(
    what: &str,
    got: Tensor<B, D>,
    expected: &TensorData,
) {
    assert_close(what, got, expected, 0.0, 0.0);
}

/// A unique path in the temporary directory.
pub fn temp_path(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("burn-fused-rnn-interop-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir.join(name)
}
