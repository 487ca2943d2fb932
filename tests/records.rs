//! Checkpoints through Burn's recorders: exact round trips (f16 within tolerance), records
//! that move between backends, and clear errors for records that do not fit the config.

mod common;

use std::path::PathBuf;

use burn::backend::{Flex, NdArray};
use burn::module::Module;
use burn::record::{
    BinFileRecorder, CompactRecorder, FileRecorder, FullPrecisionSettings, NamedMpkFileRecorder,
    PrettyJsonFileRecorder,
};
use burn::tensor::backend::Backend;
use burn::tensor::{Distribution, Tensor};
use burn_fused_rnn::{FusedRnn, FusedRnnBackend, FusedRnnConfig, FusedRnnLoadError, RnnMode};
use common::{check, report, Tol};

fn path(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("burn-fused-rnn-tests-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// A 2-layer bidirectional LSTM with projection: every kind of tensor the record can hold.
fn config() -> FusedRnnConfig {
    FusedRnnConfig::new(RnnMode::Lstm, 5, 6)
        .with_num_layers(2)
        .with_bidirectional(true)
        .with_proj_size(Some(3))
}

fn values<B: Backend>(module: &FusedRnn<B>) -> Vec<f64> {
    module
        .flat_weights()
        .into_data()
        .convert::<f64>()
        .to_vec()
        .unwrap()
}

fn round_trip<R: FileRecorder<NdArray>>(recorder: R, name: &str) -> (Vec<f64>, Vec<f64>) {
    let device = Default::default();
    let saved = config().init::<NdArray>(&device);
    // Burn initializes parameters lazily, and a clone of an untouched module draws its own
    // values: read the weights once before cloning.
    let before = values(&saved);
    let file = path(name);
    saved.clone().save_file(file.clone(), &recorder).unwrap();
    let loaded = config()
        .with_seed(99)
        .init::<NdArray>(&device)
        .try_load_file(file, &recorder, &device)
        .unwrap();
    assert_eq!(before, values(&saved));
    (before, values(&loaded))
}

#[test]
fn full_precision_recorders_round_trip_exactly() {
    let cases = [
        (
            "named_mpk",
            round_trip(
                NamedMpkFileRecorder::<FullPrecisionSettings>::new(),
                "full.mpk",
            ),
        ),
        (
            "bin",
            round_trip(BinFileRecorder::<FullPrecisionSettings>::new(), "full.bin"),
        ),
        (
            "pretty_json",
            round_trip(
                PrettyJsonFileRecorder::<FullPrecisionSettings>::new(),
                "full.json",
            ),
        ),
    ];
    for (name, (saved, loaded)) in cases {
        assert_eq!(
            saved.len(),
            config()
                .init::<NdArray>(&Default::default())
                .layout()
                .params_size()
        );
        assert_eq!(saved, loaded, "{name}: weights changed in the round trip");
    }
}

#[test]
fn compact_recorder_round_trips_within_f16_precision() {
    // CompactRecorder stores f16: relative error at most 2^-11 per element (round to
    // nearest), plus f16's subnormal spacing for tiny values.
    let (saved, loaded) = round_trip(CompactRecorder::new(), "compact");
    let device = Default::default();
    let tol = Tol {
        rtol: 2f64.powi(-11),
        atol: 6e-8,
    };
    let loaded = Tensor::<NdArray, 1>::from_floats(loaded.as_slice(), &device);
    report(
        check("compact", "weights", loaded, &saved, tol)
            .err()
            .into_iter()
            .collect(),
    );
    assert!(
        saved.iter().any(|v| v.abs() > 1e-3),
        "weights are not all tiny"
    );
}

fn outputs<B: FusedRnnBackend>(
    module: &FusedRnn<B>,
    x: &[f32],
    device: &B::Device,
) -> Tensor<B, 3> {
    let x = Tensor::<B, 1>::from_floats(x, device).reshape([2, 7, 5]);
    module.forward_with_lengths(x, &[7, 4], None).0
}

fn cross_backend<From: FusedRnnBackend, To: FusedRnnBackend>(
    from: &str,
    to: &str,
) -> Result<(), String> {
    let name = format!("{from} -> {to}");
    let (from_dev, to_dev) = (From::Device::default(), To::Device::default());
    let recorder = NamedMpkFileRecorder::<FullPrecisionSettings>::new();
    let saved = config().init::<From>(&from_dev);
    values(&saved); // initialize before cloning (see `round_trip`)
    let file = path(&format!("cross_{from}_{to}"));
    saved.clone().save_file(file.clone(), &recorder).unwrap();
    let loaded = config()
        .init::<To>(&to_dev)
        .try_load_file(file, &recorder, &to_dev)
        .map_err(|e| format!("{name}: {e}"))?;
    let x: Vec<f32> =
        Tensor::<NdArray, 1>::random([70], Distribution::Default, &Default::default())
            .into_data()
            .to_vec()
            .unwrap();
    if values(&saved) != values(&loaded) {
        return Err(format!("{name}: weights differ after the move"));
    }
    let expected: Vec<f64> = outputs(&saved, &x, &from_dev)
        .into_data()
        .convert::<f64>()
        .to_vec()
        .unwrap();
    check(
        &name,
        "output",
        outputs(&loaded, &x, &to_dev),
        &expected,
        common::F32,
    )
}

/// Burn's Wgpu backend without fusion, and as `burn::backend::Wgpu` (with fusion).
#[cfg(feature = "wgpu")]
type WgpuPlain = burn::backend::wgpu::CubeBackend<burn::backend::wgpu::WgpuRuntime, f32, i32, u32>;
#[cfg(feature = "wgpu")]
type WgpuFusion = burn::backend::Wgpu;

/// A checkpoint saved on `From` loaded on every backend of this build.
fn to_every_backend<From: FusedRnnBackend>(from: &str) -> Vec<Result<(), String>> {
    #[allow(unused_mut)]
    let mut results = vec![
        cross_backend::<From, NdArray>(from, "ndarray"),
        cross_backend::<From, Flex>(from, "flex"),
    ];
    #[cfg(feature = "wgpu")]
    {
        results.push(cross_backend::<From, WgpuPlain>(from, "wgpu"));
        results.push(cross_backend::<From, WgpuFusion>(from, "wgpu_fusion"));
    }
    results
}

#[test]
fn records_move_between_every_pair_of_backends() {
    #[allow(unused_mut)]
    let mut results = to_every_backend::<NdArray>("ndarray");
    results.extend(to_every_backend::<Flex>("flex"));
    #[cfg(feature = "wgpu")]
    {
        results.extend(to_every_backend::<WgpuPlain>("wgpu"));
        results.extend(to_every_backend::<WgpuFusion>("wgpu_fusion"));
    }
    report(results.into_iter().filter_map(Result::err).collect());
}

fn load_into(saved: FusedRnnConfig, target: FusedRnnConfig, name: &str) -> FusedRnnLoadError {
    let device = Default::default();
    let recorder = NamedMpkFileRecorder::<FullPrecisionSettings>::new();
    let file = path(name);
    saved
        .init::<NdArray>(&device)
        .save_file(file.clone(), &recorder)
        .unwrap();
    target
        .init::<NdArray>(&device)
        .try_load_file(file, &recorder, &device)
        .expect_err("the record does not fit")
}

#[test]
fn mismatched_hidden_size_names_the_tensor_and_both_shapes() {
    let err = load_into(
        FusedRnnConfig::new(RnnMode::Gru, 3, 4),
        FusedRnnConfig::new(RnnMode::Gru, 3, 5),
        "hidden.mpk",
    );
    assert_eq!(
        err.to_string(),
        "record does not fit the configuration: expected weight_ih_l0 of shape [15, 3], got [12, 3]"
    );
}

#[test]
fn mismatched_bias_and_direction_are_reported() {
    let err = load_into(
        FusedRnnConfig::new(RnnMode::Lstm, 3, 4),
        FusedRnnConfig::new(RnnMode::Lstm, 3, 4).with_bias(false),
        "bias.mpk",
    );
    assert_eq!(
        err.to_string(),
        "record does not fit the configuration: expected bias_ih_l0 of shape none, got [16]"
    );
    let err = load_into(
        FusedRnnConfig::new(RnnMode::Lstm, 3, 4),
        FusedRnnConfig::new(RnnMode::Lstm, 3, 4).with_bidirectional(true),
        "dirs.mpk",
    );
    assert!(
        matches!(
            err,
            FusedRnnLoadError::CellCount {
                expected: 2,
                got: 1
            }
        ),
        "{err}"
    );
}

#[test]
fn missing_file_is_a_recorder_error() {
    let device = Default::default();
    let err = config()
        .init::<NdArray>(&device)
        .try_load_file(path("does-not-exist"), &CompactRecorder::new(), &device)
        .expect_err("no such file");
    assert!(matches!(err, FusedRnnLoadError::Recorder(_)), "{err}");
}

#[test]
#[should_panic(expected = "expected weight_ih_l0 of shape [12, 3], got [16, 3]")]
fn unchecked_load_of_a_wrong_record_fails_at_forward_naming_the_tensor() {
    // Burn's own `load_record` does not look at shapes; the forward pass catches it.
    let device = Default::default();
    let lstm = FusedRnnConfig::new(RnnMode::Lstm, 3, 4).init::<NdArray>(&device);
    let gru = FusedRnnConfig::new(RnnMode::Gru, 3, 4)
        .init::<NdArray>(&device)
        .load_record(lstm.into_record());
    gru.forward(Tensor::zeros([1, 2, 3], &device), None);
}
