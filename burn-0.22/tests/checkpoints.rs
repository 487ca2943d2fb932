//! Checkpoints in Burn 0.22's own terms (Note [Parameter names]): a model holding a
//! `FusedRnn` loads a PyTorch model's state_dict with burn-store's `PytorchStore` and
//! `SafetensorsStore` (files written by torch, tests/fixtures/interop/generate.py of the
//! 0.21 line) and then computes PyTorch's outputs; `save_file` / `load_file` and the
//! safetensors store round-trip it with PyTorch's names as the keys.
#![allow(deprecated)]

use std::collections::BTreeMap;
use std::path::PathBuf;

use burn::module::Module;
use burn::nn::{Linear, LinearConfig};
use burn::store::{
    ModuleSnapshot, ModuleStore, PyTorchToBurnAdapter, PytorchStore, SafetensorsStore,
};
use burn::tensor::{DType, Device, Tensor, TensorData};
use burn_fused_rnn::{FusedRnn, FusedRnnConfig, RnnMode, RnnState};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../burn-0.21/tests/fixtures/interop")
        .join(name)
}

/// PyTorch's inputs and outputs of the case `case` (expected.safetensors).
fn expected(case: &str) -> BTreeMap<String, TensorData> {
    let mut store = SafetensorsStore::from_file(fixture("expected.safetensors"));
    store
        .get_all_tensors()
        .expect("read expected.safetensors")
        .iter()
        .filter_map(|(k, t)| {
            k.strip_prefix(&format!("{case}/")).map(|k| {
                (
                    k.to_string(),
                    burn::store::bridge::to_data(t).expect("tensor data"),
                )
            })
        })
        .collect()
}

fn close(what: &str, got: Tensor<3>, expected: &TensorData, tol: f64) {
    let got: Vec<f64> = got.into_data().convert::<f64>().to_vec().unwrap();
    let want: Vec<f64> = expected.clone().convert::<f64>().to_vec().unwrap();
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!(
            (g - w).abs() <= tol * (1.0 + w.abs()),
            "{what}[{i}]: got {g}, expected {w}"
        );
    }
}

/// PyTorch's `ModelLstmProj`: `encoder.embed` (Linear), `encoder.rnn` (the LSTM), `head`.
#[derive(Module, Debug)]
struct Encoder {
    embed: Linear,
    rnn: FusedRnn,
}

#[derive(Module, Debug)]
struct ModelLstmProj {
    encoder: Encoder,
    head: Linear,
}

impl ModelLstmProj {
    fn new(device: &Device) -> Self {
        Self {
            encoder: Encoder {
                embed: LinearConfig::new(6, 3).init(device),
                rnn: FusedRnnConfig::new(RnnMode::Lstm, 3, 5)
                    .with_num_layers(2)
                    .with_bidirectional(true)
                    .with_proj_size(Some(3))
                    .init(device),
            },
            head: LinearConfig::new(6, 2).init(device),
        }
    }
}

fn run_lstm_proj(rnn: &FusedRnn, device: &Device) -> (Tensor<3>, RnnState) {
    let e = expected("lstm_proj");
    let t = |k: &str| Tensor::<3>::from_data(e[k].clone(), (device, DType::F32));
    rnn.forward(t("x"), Some(RnnState::lstm(t("h0"), t("c0"))))
}

#[test]
fn pytorch_state_dict_loads_into_a_model_holding_the_layer() {
    for device in [Device::flex(), Device::ndarray()] {
        let mut model = ModelLstmProj::new(&device);
        let mut store = PytorchStore::from_file(fixture("model_lstm_proj.pt"));
        let result = model
            .load_from(&mut store)
            .expect("load model_lstm_proj.pt");
        assert!(result.errors.is_empty(), "{result}");
        assert!(result.missing.is_empty(), "{result}");
        assert_eq!(result.applied.len(), 20 + 4, "{result}");
        let (y, state) = run_lstm_proj(&model.encoder.rnn, &device);
        let e = expected("lstm_proj");
        close("y", y, &e["y"], 1e-5);
        close("h_n", state.hidden, &e["h_n"], 1e-5);
        close("c_n", state.cell.unwrap(), &e["c_n"], 1e-5);
    }
}

/// PyTorch's `ModelRnnRelu`: `decoder.rnn` (RNN relu, no bias, bidirectional), `decoder.out`.
#[derive(Module, Debug)]
struct Decoder {
    rnn: FusedRnn,
    out: Linear,
}

#[derive(Module, Debug)]
struct ModelRnnRelu {
    decoder: Decoder,
}

#[test]
fn pytorch_safetensors_load_through_the_safetensors_store() {
    let device = Device::flex();
    let mut model = ModelRnnRelu {
        decoder: Decoder {
            rnn: FusedRnnConfig::new(RnnMode::RnnRelu, 3, 4)
                .with_bias(false)
                .with_bidirectional(true)
                .init(&device),
            out: LinearConfig::new(8, 3).init(&device),
        },
    };
    let mut store = SafetensorsStore::from_file(fixture("rnn_relu.safetensors"))
        .with_from_adapter(PyTorchToBurnAdapter);
    let result = model
        .load_from(&mut store)
        .expect("load rnn_relu.safetensors");
    assert!(
        result.errors.is_empty() && result.missing.is_empty(),
        "{result}"
    );
    let e = expected("rnn_relu");
    let x = Tensor::<3>::from_data(e["x"].clone(), (&device, DType::F32));
    let (y, state) = model.decoder.rnn.forward(x, None);
    close("y", y, &e["y"], 1e-5);
    close("h_n", state.hidden, &e["h_n"], 1e-5);
}

#[test]
fn save_file_and_load_file_round_trip_with_pytorch_names() {
    let device = Device::flex();
    let dir = std::env::temp_dir().join(format!("bfr22-ckpt-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("model.bpk");
    let model = ModelLstmProj::new(&device);
    model.clone().save_file(&path).expect("save_file");
    // A fresh model (other weights) loads the file and computes what the saved one did.
    let loaded = ModelLstmProj::new(&device).load_file(&path);
    let (y0, s0) = run_lstm_proj(&model.encoder.rnn, &device);
    let (y1, s1) = run_lstm_proj(&loaded.encoder.rnn, &device);
    y0.into_data().assert_eq(&y1.into_data(), true);
    s0.hidden
        .into_data()
        .assert_eq(&s1.hidden.into_data(), true);
    // The keys are PyTorch's, under the module path.
    let keys = burn::store::BurnpackStore::from_file(&path)
        .keys()
        .expect("read the burnpack file");
    for k in [
        "encoder.rnn.weight_ih_l0",
        "encoder.rnn.weight_hr_l1_reverse",
        "head.weight",
    ] {
        assert!(keys.iter().any(|got| got == k), "no key {k} in {keys:?}");
    }
    // The safetensors store writes the same names, and reads them back.
    let st = dir.join("model.safetensors");
    let _ = std::fs::remove_file(&st);
    model
        .save_into(&mut SafetensorsStore::from_file(&st))
        .expect("save safetensors");
    let mut store = SafetensorsStore::from_file(&st);
    let names = store.keys().expect("keys");
    assert!(
        names.iter().any(|k| k == "encoder.rnn.bias_hh_l1_reverse"),
        "{names:?}"
    );
    let mut again = ModelLstmProj::new(&device);
    let result = again.load_from(&mut store).expect("load safetensors");
    assert!(
        result.errors.is_empty() && result.missing.is_empty(),
        "{result}"
    );
    let (y2, _) = run_lstm_proj(&again.encoder.rnn, &device);
    let (y0, _) = run_lstm_proj(&model.encoder.rnn, &device);
    y0.into_data().assert_eq(&y2.into_data(), true);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn the_layer_alone_saves_pytorch_names_at_the_top() {
    let device = Device::flex();
    let rnn: FusedRnn = FusedRnnConfig::new(RnnMode::Gru, 3, 4)
        .with_bidirectional(true)
        .init(&device);
    let names: Vec<String> = rnn
        .collect(None, None, false)
        .iter()
        .map(|t| t.name.clone())
        .collect();
    let layout = rnn.layout();
    let expected: Vec<String> = layout.entries().iter().map(|e| e.name()).collect();
    assert_eq!(names, expected);
}

/// The crate's checked save and load (Note [Checked checkpoints]): a round trip, Burn's own
/// `load_file` reading the same file, and damaged files refused by name.
mod checked {
    use super::*;
    use burn_fused_rnn::checkpoint::{self, CheckpointError, DIGEST_KEY};

    fn saved(name: &str) -> (ModelLstmProj, PathBuf, Vec<u8>) {
        let device = Device::flex();
        let dir = std::env::temp_dir().join(format!("bfr22-checked-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("model.bpk");
        let model = ModelLstmProj::new(&device);
        checkpoint::save_file(&model, &path).expect("save");
        // The bytes of `encoder.rnn.weight_hh_l0_reverse` as the file holds them.
        let weight = model
            .encoder
            .rnn
            .named_weights()
            .into_iter()
            .find(|(n, _)| n == "weight_hh_l0_reverse")
            .unwrap()
            .1
            .into_data()
            .into_bytes()
            .to_vec();
        (model, path, weight)
    }

    /// The file at `path` with the first copy of `needle` changed by `edit`.
    fn damage(path: &PathBuf, needle: &[u8], edit: impl FnOnce(&mut [u8])) {
        let mut bytes = std::fs::read(path).unwrap();
        let at = bytes
            .windows(needle.len())
            .position(|w| w == needle)
            .expect("the weight's bytes are in the file");
        edit(&mut bytes[at..at + needle.len()]);
        std::fs::write(path, bytes).unwrap();
    }

    #[test]
    fn round_trip_and_burns_own_loader() {
        let (model, path, _) = saved("ok");
        let meta = burn::store::burn_pack::Reader::from_file(&path)
            .unwrap()
            .metadata()
            .clone();
        assert!(
            meta.contains_key(&format!("{DIGEST_KEY}encoder.rnn")),
            "{meta:?}"
        );
        let device = Device::flex();
        let loaded = checkpoint::load_file(ModelLstmProj::new(&device), &path).expect("load");
        let by_burn = ModelLstmProj::new(&device).load_file(&path);
        let (y0, _) = run_lstm_proj(&model.encoder.rnn, &device);
        for m in [loaded, by_burn] {
            let (y, _) = run_lstm_proj(&m.encoder.rnn, &device);
            y.into_data().assert_eq(&y0.clone().into_data(), true);
        }
    }

    #[test]
    fn a_flipped_byte_is_caught_by_the_digest() {
        let (_, path, weight) = saved("flip");
        damage(&path, &weight, |w| w[9] ^= 0x01);
        let err = checkpoint::load_file(ModelLstmProj::new(&Device::flex()), &path).unwrap_err();
        assert!(
            matches!(&err, CheckpointError::DigestMismatch { path, .. } if path == "encoder.rnn"),
            "{err}"
        );
    }

    #[test]
    fn a_nan_weight_is_refused_by_name() {
        let (_, path, weight) = saved("nan");
        damage(&path, &weight, |w| {
            w[8..12].copy_from_slice(&f32::NAN.to_le_bytes())
        });
        let err = checkpoint::load_file(ModelLstmProj::new(&Device::flex()), &path).unwrap_err();
        match &err {
            CheckpointError::NotFinite { key, index, .. } => {
                assert_eq!(key, "encoder.rnn.weight_hh_l0_reverse");
                assert_eq!(*index, 2);
            }
            other => panic!("expected NotFinite, got {other}"),
        }
    }

    #[test]
    fn a_model_that_does_not_fit_is_refused_by_key() {
        let (_, path, _) = saved("shape");
        let device = Device::flex();
        let other = ModelLstmProj {
            encoder: Encoder {
                embed: LinearConfig::new(6, 3).init(&device),
                rnn: FusedRnnConfig::new(RnnMode::Lstm, 3, 5)
                    .with_num_layers(1)
                    .with_bidirectional(true)
                    .with_proj_size(Some(3))
                    .init(&device),
            },
            head: LinearConfig::new(6, 2).init(&device),
        };
        let err = checkpoint::load_file(other, &path).unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, CheckpointError::Mismatch { .. }), "{msg}");
        assert!(msg.contains("encoder.rnn.weight_ih_l1"), "{msg}");
    }
}
