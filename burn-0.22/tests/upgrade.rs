//! Checkpoints written by the Burn 0.21 line (Note [Upgrading checkpoints]): a model
//! holding a `FusedRnn`, a drop-in `BiGru` and a `Linear`, saved on 0.21 with
//! `NamedMpkFileRecorder<FullPrecisionSettings>`, `CompactRecorder` (f16) and the JSON
//! recorders by
//! `burn-0.21/examples/checkpoints_for_0_22.rs`, loads in one call into the same model
//! written for Burn 0.22 and computes what the 0.21 model computed (its outputs, saved
//! beside the files); damaged files and models that do not fit are errors naming the
//! tensor.
#![allow(deprecated)]

use std::path::PathBuf;

use burn::module::Module;
use burn::nn::{Linear, LinearConfig};
use burn::tensor::{Device, Tensor, TensorData};
use burn_fused_rnn::checkpoint::{load_0_21_file, CheckpointError};
use burn_fused_rnn::nn::{BiGru, BiGruConfig};
use burn_fused_rnn::{FusedRnn, FusedRnnConfig, RnnMode};

#[derive(Module, Debug)]
struct Model {
    rnn: FusedRnn,
    bigru: BiGru,
    head: Linear,
}

fn model(device: &Device, d_hidden: usize) -> Model {
    Model {
        rnn: FusedRnnConfig::new(RnnMode::Lstm, 3, d_hidden)
            .with_num_layers(2)
            .with_bidirectional(true)
            .with_proj_size(Some(3))
            .init(device),
        bigru: BiGruConfig::new(6, 4, true).init(device),
        head: LinearConfig::new(8, 2).init(device),
    }
}

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/from_0_21")
        .join(name)
}

fn expected() -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(fixture("expected.json")).unwrap()).unwrap()
}

fn floats(v: &serde_json::Value) -> Vec<f64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

fn close(what: &str, got: Tensor<3>, want: &[f64], tol: f64) {
    let got: Vec<f64> = got.into_data().convert::<f64>().to_vec().unwrap();
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol * (1.0 + w.abs()),
            "{what}[{i}]: got {g}, expected {w}"
        );
    }
}

fn outputs_match(file: &str, tol: f64) {
    for device in [Device::flex(), Device::ndarray()] {
        let m = load_0_21_file(model(&device, 5), fixture(file))
            .unwrap_or_else(|e| panic!("{file}: {e}"));
        let e = expected();
        let x = Tensor::<3>::from_data(
            TensorData::new(
                floats(&e["x"]).iter().map(|&v| v as f32).collect(),
                [2, 7, 3],
            ),
            &device,
        );
        let (y, state) = m.rnn.forward(x, None);
        let (z, h) = m.bigru.forward(y.clone(), None);
        close(&format!("{file}: rnn y"), y, &floats(&e["rnn_y"]), tol);
        close(
            &format!("{file}: rnn h_n"),
            state.hidden,
            &floats(&e["rnn_h_n"]),
            tol,
        );
        close(
            &format!("{file}: rnn c_n"),
            state.cell.unwrap(),
            &floats(&e["rnn_c_n"]),
            tol,
        );
        close(
            &format!("{file}: bigru h_n"),
            h,
            &floats(&e["bigru_h_n"]),
            tol,
        );
        close(
            &format!("{file}: out"),
            m.head.forward(z),
            &floats(&e["out"]),
            tol,
        );
    }
}

#[test]
fn full_precision_checkpoint_of_the_0_21_line_loads() {
    outputs_match("model_full.mpk", 1e-5);
}

#[test]
fn json_checkpoints_of_the_0_21_line_load() {
    outputs_match("model_pretty.json", 1e-5);
    outputs_match("model_json.json.gz", 1e-5);
}

#[test]
fn compact_recorder_checkpoint_of_the_0_21_line_loads() {
    // Weights stored in f16: the outputs are the 0.21 model's to f16's precision.
    outputs_match("model_compact.mpk", 1e-2);
}

/// `file` re-encoded after `edit` changed its MessagePack tree.
fn edited(name: &str, edit: impl FnOnce(&mut rmpv::Value)) -> PathBuf {
    let bytes = std::fs::read(fixture("model_full.mpk")).unwrap();
    let mut value = rmpv::decode::read_value(&mut &bytes[..]).unwrap();
    edit(&mut value);
    let mut out = Vec::new();
    rmpv::encode::write_value(&mut out, &value).unwrap();
    let path = std::env::temp_dir().join(format!("bfr22-upgrade-{}-{name}", std::process::id()));
    std::fs::write(&path, out).unwrap();
    path
}

/// The bytes of `item.rnn.cells[0].weight_hh`.
fn weight_hh_bytes(v: &mut rmpv::Value) -> &mut Vec<u8> {
    fn get<'a>(v: &'a mut rmpv::Value, key: &str) -> &'a mut rmpv::Value {
        let map = match v {
            rmpv::Value::Map(m) => m,
            _ => panic!("expected a map at {key}"),
        };
        &mut map
            .iter_mut()
            .find(|(k, _)| k.as_str() == Some(key))
            .unwrap_or_else(|| panic!("no {key}"))
            .1
    }
    let cells = get(get(get(v, "item"), "rnn"), "cells");
    let cell = match cells {
        rmpv::Value::Array(a) => &mut a[0],
        _ => panic!("cells"),
    };
    match get(get(get(cell, "weight_hh"), "param"), "bytes") {
        rmpv::Value::Binary(b) => b,
        _ => panic!("bytes"),
    }
}

#[test]
fn a_damaged_weight_is_caught_by_the_digest() {
    let path = edited("flipped", |v| weight_hh_bytes(v)[5] ^= 0x01);
    let err = load_0_21_file(model(&Device::flex(), 5), &path).unwrap_err();
    assert!(
        matches!(err, CheckpointError::DigestMismatch { ref path, .. } if path == "rnn"),
        "{err}"
    );
    assert!(err.to_string().contains("`rnn`"), "{err}");
}

#[test]
fn a_nan_weight_is_refused_by_name() {
    let path = edited("nan", |v| {
        weight_hh_bytes(v)[4..8].copy_from_slice(&f32::NAN.to_le_bytes())
    });
    let err = load_0_21_file(model(&Device::flex(), 5), &path).unwrap_err();
    match &err {
        CheckpointError::NotFinite { key, index, .. } => {
            assert_eq!(key, "rnn.weight_hh_l0");
            assert_eq!(*index, 1);
        }
        other => panic!("expected NotFinite, got {other}"),
    }
}

#[test]
fn a_model_that_does_not_fit_is_an_error_naming_the_tensors() {
    let err = load_0_21_file(model(&Device::flex(), 6), fixture("model_full.mpk")).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, CheckpointError::Mismatch { .. }), "{msg}");
    assert!(msg.contains("rnn.weight_ih_l0"), "{msg}");
}

#[test]
fn a_file_that_is_not_a_0_21_record_is_refused() {
    let path = std::env::temp_dir().join(format!("bfr22-upgrade-{}-junk", std::process::id()));
    std::fs::write(&path, b"not a record at all").unwrap();
    let err = load_0_21_file(model(&Device::flex(), 5), &path).unwrap_err();
    assert!(matches!(err, CheckpointError::NotARecord { .. }), "{err}");
    // A JSON file cut short, and a JSON record of another recorder's format.
    let text = std::fs::read_to_string(fixture("model_pretty.json")).unwrap();
    std::fs::write(&path, &text[..text.len() / 2]).unwrap();
    let err = load_0_21_file(model(&Device::flex(), 5), &path).unwrap_err();
    assert!(err.to_string().contains("damaged JSON"), "{err}");
    std::fs::write(
        &path,
        text.replace("PrettyJsonFileRecorder", "BinFileRecorder"),
    )
    .unwrap();
    let err = load_0_21_file(model(&Device::flex(), 5), &path).unwrap_err();
    assert!(
        err.to_string()
            .contains("a record of burn_core::record::file::BinFileRecorder"),
        "{err}"
    );
    let missing = load_0_21_file(model(&Device::flex(), 5), fixture("nope.mpk")).unwrap_err();
    assert!(matches!(missing, CheckpointError::Io { .. }), "{missing}");
}
