//! Checkpoints through Burn's recorders: exact round trips (f16 within tolerance) with the
//! weights' digest, records that move between backends, clear errors for records that do
//! not fit the config, and for damaged files: missing, empty, garbage, truncated, another
//! recorder's format, flipped bytes, non-finite weights.

mod common;

use std::path::{Path, PathBuf};

use burn::backend::{Flex, NdArray};
use burn::module::{EmptyRecord, Module, Param};
use burn::record::{
    BinFileRecorder, BinGzFileRecorder, CompactRecorder, DefaultRecorder, DoublePrecisionSettings,
    FileRecorder, FullPrecisionSettings, HalfPrecisionSettings, JsonGzFileRecorder,
    NamedMpkFileRecorder, NamedMpkGzFileRecorder, PrettyJsonFileRecorder, Record,
};
use burn::tensor::backend::Backend;
use burn::tensor::{f16, DType, Distribution, Tensor, TensorData};
use burn_fused_rnn::{
    FileProblem, FusedRnn, FusedRnnBackend, FusedRnnConfig, FusedRnnLoadError, FusedRnnRecord,
    RnnCellRecord, RnnMode,
};
use common::{check, report, Tol};

#[cfg(feature = "wgpu")]
#[path = "common/wgpu.rs"]
mod wgpu_adapter;

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

/// Saves a fresh module of `config()` with `recorder`; returns it and the file written.
fn save<R: FileRecorder<NdArray>>(recorder: &R, name: &str) -> (FusedRnn<NdArray>, PathBuf) {
    let saved = config().init::<NdArray>(&Default::default());
    // Burn initializes parameters lazily, and a clone of an untouched module draws its own
    // values: read the weights once before cloning.
    values(&saved);
    let mut file = path(name);
    saved.clone().save_file(file.clone(), recorder).unwrap();
    file.set_extension(<R as FileRecorder<NdArray>>::file_extension());
    (saved, file)
}

fn load<R: FileRecorder<NdArray>>(
    file: &Path,
    recorder: &R,
) -> Result<FusedRnn<NdArray>, FusedRnnLoadError> {
    let device = Default::default();
    config()
        .with_seed(99)
        .init::<NdArray>(&device)
        .try_load_file(file, recorder, &device)
}

/// The module's weights rounded as a recorder of float type `dtype` stores them.
fn rounded(module: &FusedRnn<NdArray>, dtype: DType) -> Vec<f64> {
    TensorData::new(values(module), [values(module).len()])
        .convert::<f32>()
        .convert_dtype(dtype)
        .convert::<f64>()
        .to_vec()
        .unwrap()
}

/// Saves with `recorder`, loads with `try_load_file`, and checks the loaded weights against
/// the saved ones rounded to `dtype`, and the digest Burn's own loader reads from the file
/// against the one the module makes.
fn round_trip<R: FileRecorder<NdArray>>(recorder: R, name: &str, dtype: DType) -> Option<String> {
    let (saved, file) = save(&recorder, name);
    let loaded = match load(&file, &recorder) {
        Ok(loaded) => loaded,
        Err(e) => return Some(format!("{name}: {e}")),
    };
    if values(&loaded) != rounded(&saved, dtype) {
        return Some(format!("{name}: weights changed beyond {dtype:?} rounding"));
    }
    let read: FusedRnnRecord<NdArray> = recorder.load(path(name), &Default::default()).unwrap();
    let made = saved.into_record().digest;
    if made.is_none() || read.digest != made {
        return Some(format!(
            "{name}: digest in the file {:?}, made {made:?}",
            read.digest
        ));
    }
    None
}

#[test]
fn every_recorder_round_trips_with_its_digest() {
    type Full = FullPrecisionSettings;
    type Half = HalfPrecisionSettings;
    type Double = DoublePrecisionSettings;
    let failures = [
        round_trip(DefaultRecorder::new(), "default", DType::F32),
        round_trip(CompactRecorder::new(), "compact", DType::F16),
        round_trip(NamedMpkFileRecorder::<Full>::new(), "mpk_full", DType::F32),
        round_trip(NamedMpkFileRecorder::<Double>::new(), "mpk_f64", DType::F32),
        round_trip(
            NamedMpkGzFileRecorder::<Half>::new(),
            "mpkgz_half",
            DType::F16,
        ),
        round_trip(BinFileRecorder::<Full>::new(), "bin_full", DType::F32),
        round_trip(BinFileRecorder::<Half>::new(), "bin_half", DType::F16),
        round_trip(BinGzFileRecorder::<Full>::new(), "bingz_full", DType::F32),
        round_trip(
            PrettyJsonFileRecorder::<Full>::new(),
            "json_full",
            DType::F32,
        ),
        round_trip(
            PrettyJsonFileRecorder::<Half>::new(),
            "json_half",
            DType::F16,
        ),
        round_trip(JsonGzFileRecorder::<Half>::new(), "jsongz_half", DType::F16),
    ];
    report(failures.into_iter().flatten().collect());
}

#[test]
fn compact_recorder_round_trips_within_f16_precision() {
    // CompactRecorder stores f16: relative error at most 2^-11 per element (round to
    // nearest), plus f16's subnormal spacing for tiny values.
    let (saved, file) = save(&CompactRecorder::new(), "compact_tol");
    let loaded = values(&load(&file, &CompactRecorder::new()).unwrap());
    let saved = values(&saved);
    let tol = Tol {
        rtol: 2f64.powi(-11),
        atol: 6e-8,
    };
    let loaded = Tensor::<NdArray, 1>::from_floats(loaded.as_slice(), &Default::default());
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

// ---------------------------------------------------------------------------------------
// Damaged weights: the digest.

/// Flips a low-order bit of one stored weight in a MessagePack or bincode file, where
/// weights are stored as raw little-endian bytes: the first weight whose bytes occur once
/// in the file. Returns its flat index.
fn flip_weight_bit(file: &Path, weights: &[f64], dtype: DType) -> usize {
    let mut bytes = std::fs::read(file).unwrap();
    let encode = |v: f64| match dtype {
        DType::F64 => v.to_le_bytes().to_vec(),
        DType::F32 => (v as f32).to_le_bytes().to_vec(),
        DType::F16 => f16::from_f64(v).to_le_bytes().to_vec(),
        other => unreachable!("{other:?}"),
    };
    for (i, &w) in weights.iter().enumerate() {
        let pattern = encode(w);
        let hits: Vec<usize> = bytes
            .windows(pattern.len())
            .enumerate()
            .filter(|(_, win)| *win == pattern.as_slice())
            .map(|(at, _)| at)
            .collect();
        if let [at] = hits[..] {
            // The lowest mantissa bit the weights have: an f64 file of f32 weights keeps
            // its low 29 bits zero, and a flip there would vanish in an f32 backend.
            let byte = if dtype == DType::F64 { at + 4 } else { at };
            bytes[byte] ^= 1;
            std::fs::write(file, bytes).unwrap();
            return i;
        }
    }
    panic!("no weight with a unique byte pattern in {}", file.display());
}

fn assert_digest_mismatch(err: FusedRnnLoadError, file: &Path, recorder: &str) {
    assert!(
        matches!(err.check(), FusedRnnLoadError::DigestMismatch { .. }),
        "{err}"
    );
    let msg = err.to_string();
    let expected = format!(
        "cannot load {} with {recorder}: digest mismatch: the weights changed after saving",
        file.display()
    );
    assert!(msg.starts_with(&expected), "{msg}\nexpected: {expected}…");
}

/// One flipped low-order bit in one weight of a `R` file: Burn's own loader takes it (one
/// weight differs), the checked loader reports a digest mismatch.
fn flipped_weight<R: FileRecorder<NdArray>>(recorder: R, name: &str, dtype: DType, short: &str) {
    let (saved, file) = save(&recorder, name);
    let index = flip_weight_bit(&file, &rounded(&saved, dtype), dtype);
    let unchecked = config()
        .init::<NdArray>(&Default::default())
        .load_file(file.clone(), &recorder, &Default::default())
        .unwrap();
    let differ: Vec<usize> = values(&unchecked)
        .iter()
        .zip(rounded(&saved, dtype))
        .enumerate()
        .filter(|(_, (a, b))| **a != *b)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(
        differ,
        [index],
        "{name}: the flip changed exactly one weight"
    );
    assert_digest_mismatch(load(&file, &recorder).unwrap_err(), &file, short);
}

#[test]
fn a_flipped_weight_byte_is_a_digest_mismatch_in_every_precision() {
    flipped_weight(
        NamedMpkFileRecorder::<FullPrecisionSettings>::new(),
        "flip_mpk",
        DType::F32,
        "NamedMpkFileRecorder<FullPrecisionSettings>",
    );
    // f16: the digest accepts the f16-rounded weights, not a flipped one.
    flipped_weight(
        CompactRecorder::new(),
        "flip_compact",
        DType::F16,
        "NamedMpkFileRecorder<HalfPrecisionSettings>",
    );
    flipped_weight(
        BinFileRecorder::<FullPrecisionSettings>::new(),
        "flip_bin",
        DType::F32,
        "BinFileRecorder<FullPrecisionSettings>",
    );
    flipped_weight(
        BinFileRecorder::<HalfPrecisionSettings>::new(),
        "flip_bin_half",
        DType::F16,
        "BinFileRecorder<HalfPrecisionSettings>",
    );
    flipped_weight(
        NamedMpkFileRecorder::<DoublePrecisionSettings>::new(),
        "flip_mpk_f64",
        DType::F64,
        "NamedMpkFileRecorder<DoublePrecisionSettings>",
    );
}

#[test]
fn a_changed_weight_byte_in_json_is_a_digest_mismatch() {
    let recorder = PrettyJsonFileRecorder::<FullPrecisionSettings>::new();
    let (_, file) = save(&recorder, "flip_json");
    let mut json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    let byte = &mut json["item"]["cells"][3]["weight_hh"]["param"]["bytes"][5];
    *byte = (byte.as_u64().unwrap() ^ 1).into();
    std::fs::write(&file, serde_json::to_vec_pretty(&json).unwrap()).unwrap();
    assert_digest_mismatch(
        load(&file, &recorder).unwrap_err(),
        &file,
        "PrettyJsonFileRecorder<FullPrecisionSettings>",
    );
}

#[test]
fn changed_weights_in_a_record_are_a_digest_mismatch() {
    let device = Default::default();
    let module = config().init::<NdArray>(&device);
    let mut record = module.clone().into_record();
    let w = record.cells[2].weight_hh.val();
    record.cells[2].weight_hh = Param::from_tensor(w.clone().add_scalar(1e-6));
    let err = module.clone().try_load_record(record).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("digest mismatch: the weights changed after saving"),
        "{err}"
    );
    // Without a digest (a record built by hand), the same record loads.
    let mut record = module.clone().into_record();
    record.digest = None;
    record.cells[2].weight_hh = Param::from_tensor(w.add_scalar(1e-6));
    module.try_load_record(record).unwrap();
}

// ---------------------------------------------------------------------------------------
// Records written before the digest existed.

/// The record `#[derive(Module)]` made before the digest existed: the module's settings
/// were empty placeholder fields.
#[derive(Record)]
struct RecordWithoutDigest<B: Backend> {
    cells: Vec<RnnCellRecord<B>>,
    spec: EmptyRecord,
    batch_first: EmptyRecord,
    dropout: EmptyRecord,
    dropout_calls: EmptyRecord,
}

fn old_record_loads<R: FileRecorder<NdArray>>(recorder: R, name: &str) {
    let device = Default::default();
    let saved = config().init::<NdArray>(&device);
    values(&saved); // initialize before cloning (see `save`)
    let old = RecordWithoutDigest {
        cells: saved.clone().into_record().cells,
        spec: EmptyRecord,
        batch_first: EmptyRecord,
        dropout: EmptyRecord,
        dropout_calls: EmptyRecord,
    };
    let file = path(name);
    recorder.record(old, file.clone()).unwrap();
    let loaded = config()
        .with_seed(7)
        .init::<NdArray>(&device)
        .try_load_file(file.clone(), &recorder, &device)
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(values(&loaded), values(&saved), "{name}");
    // Burn's own loader reads it too, with no digest.
    let record: FusedRnnRecord<NdArray> = recorder.load(file, &device).unwrap();
    assert!(record.digest.is_none(), "{name}");
}

#[test]
fn records_without_a_digest_still_load() {
    old_record_loads(
        NamedMpkFileRecorder::<FullPrecisionSettings>::new(),
        "old_mpk",
    );
    old_record_loads(BinFileRecorder::<FullPrecisionSettings>::new(), "old_bin");
    old_record_loads(
        PrettyJsonFileRecorder::<FullPrecisionSettings>::new(),
        "old_json",
    );
}

// ---------------------------------------------------------------------------------------
// Non-finite weights.

/// A module whose flat weight `index` is `value`.
fn module_with(value: f32, index: usize) -> FusedRnn<NdArray> {
    let device = Default::default();
    let module = config().init::<NdArray>(&device);
    let mut flat: Vec<f32> = module.flat_weights().into_data().to_vec().unwrap();
    flat[index] = value;
    config().init_with_params(Tensor::from_floats(flat.as_slice(), &device))
}

#[test]
fn non_finite_weights_are_named_with_their_first_index() {
    let device = Default::default();
    let layout = config().init::<NdArray>(&device).layout();
    let entry = layout
        .entries()
        .iter()
        .find(|e| e.name() == "weight_hh_l1_reverse")
        .unwrap();
    // Row 2, column 1 of W_hh (3 columns: P = 3).
    let index = entry.offset + 2 * entry.shape[1] + 1;
    let nan = module_with(f32::NAN, index);
    let recorder = NamedMpkFileRecorder::<FullPrecisionSettings>::new();
    let file = path("nan.mpk");
    nan.clone().save_file(file.clone(), &recorder).unwrap();
    let err = load(&file, &recorder).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "cannot load {} with NamedMpkFileRecorder<FullPrecisionSettings>: expected finite weights, got weight_hh_l1_reverse[2, 1] = NaN (the first non-finite value)",
            file.display()
        )
    );
    // The same record in memory.
    let err = config()
        .init::<NdArray>(&device)
        .try_load_record(nan.into_record())
        .unwrap_err();
    assert!(
        matches!(&err, FusedRnnLoadError::NotFinite { name, index, value }
            if name == "weight_hh_l1_reverse" && index == &[2, 1] && value.is_nan()),
        "{err}"
    );
}

#[test]
fn weights_beyond_f16_range_become_infinite_in_a_compact_record_and_are_refused() {
    // 1e5 is beyond f16's largest finite value, 65504.
    let big = module_with(1e5, 0);
    let file = path("big");
    big.save_file(file.clone(), &CompactRecorder::new())
        .unwrap();
    let err = load(&file.with_extension("mpk"), &CompactRecorder::new()).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("expected finite weights, got weight_ih_l0[0, 0] = inf")
            && msg.contains("CompactRecorder store values beyond ±65504 as infinities"),
        "{msg}"
    );
}

// ---------------------------------------------------------------------------------------
// Files that are not records of this recorder.

fn file_problem(err: &FusedRnnLoadError) -> &FileProblem {
    match err {
        FusedRnnLoadError::File { problem, .. } => problem,
        other => panic!("expected a file problem, got {other}"),
    }
}

#[test]
fn a_missing_file_names_files_saved_with_other_recorders() {
    let recorder = BinFileRecorder::<FullPrecisionSettings>::new();
    let err = load(&path("does-not-exist"), &recorder).unwrap_err();
    assert_eq!(
        file_problem(&err),
        &FileProblem::Missing { other: vec![] },
        "{err}"
    );
    assert!(
        err.to_string().ends_with(
            "does-not-exist.bin with BinFileRecorder<FullPrecisionSettings>: no such file"
        ),
        "{err}"
    );
    assert!(std::error::Error::source(&err).is_some(), "Burn's error");
    // Saved with the MessagePack recorder, asked of the bincode one.
    let (_, mpk) = save(&DefaultRecorder::new(), "elsewhere");
    let err = load(&path("elsewhere"), &recorder).unwrap_err();
    assert_eq!(
        file_problem(&err),
        &FileProblem::Missing { other: vec![mpk] },
        "{err}"
    );
    assert!(
        err.to_string()
            .ends_with("elsewhere.mpk exists (saved with another recorder?)"),
        "{err}"
    );
}

#[test]
fn empty_and_garbage_files_are_not_records() {
    let recorder = NamedMpkFileRecorder::<FullPrecisionSettings>::new();
    let empty = path("empty.mpk");
    std::fs::write(&empty, b"").unwrap();
    let err = load(&empty, &recorder).unwrap_err();
    assert_eq!(file_problem(&err), &FileProblem::Empty, "{err}");
    assert_eq!(
        err.to_string(),
        format!(
            "cannot load {} with NamedMpkFileRecorder<FullPrecisionSettings>: the file is empty",
            empty.display()
        )
    );
    // Deterministic garbage, and a text file.
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    let garbage: Vec<u8> = (0..4096)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 56) as u8
        })
        .collect();
    for (name, bytes) in [
        ("garbage", garbage.as_slice()),
        ("text", b"Hello, this is not a checkpoint.\n".as_slice()),
    ] {
        for (ext, recorder_name) in [("mpk", "mpk"), ("bin", "bin"), ("json", "json")] {
            let file = path(&format!("{name}.{ext}"));
            std::fs::write(&file, bytes).unwrap();
            let err = match recorder_name {
                "mpk" => load(&file, &recorder),
                "bin" => load(&file, &BinFileRecorder::<FullPrecisionSettings>::new()),
                _ => load(
                    &file,
                    &PrettyJsonFileRecorder::<FullPrecisionSettings>::new(),
                ),
            }
            .unwrap_err();
            assert_eq!(
                file_problem(&err),
                &FileProblem::NotARecord,
                "{name}.{ext}: {err}"
            );
            assert!(
                err.to_string()
                    .contains(": not a record of this recorder: "),
                "{err}"
            );
        }
    }
    // JSON, but not a record.
    let file = path("config.json");
    std::fs::write(&file, br#"{"d_input": 5, "d_hidden": 6}"#).unwrap();
    let err = load(
        &file,
        &PrettyJsonFileRecorder::<FullPrecisionSettings>::new(),
    )
    .unwrap_err();
    assert!(
        matches!(file_problem(&err), FileProblem::Corrupt { detail } if detail.contains("missing field `metadata`")),
        "{err}"
    );
}

/// Saves with `saver`, renames to `loader`'s extension, loads with `loader`.
fn mixed_up<S: FileRecorder<NdArray>, L: FileRecorder<NdArray>>(
    saver: S,
    loader: L,
    name: &str,
) -> FusedRnnLoadError {
    let (_, saved) = save(&saver, name);
    let renamed = path(&format!(
        "{name}.{}",
        <L as FileRecorder<NdArray>>::file_extension()
    ));
    std::fs::rename(&saved, &renamed).unwrap();
    load(&renamed, &loader).unwrap_err()
}

#[test]
fn a_file_of_another_recorder_format_is_named() {
    type Full = FullPrecisionSettings;
    let err = mixed_up(
        NamedMpkFileRecorder::<Full>::new(),
        BinFileRecorder::<Full>::new(),
        "mix_mpk_as_bin",
    );
    assert_eq!(
        file_problem(&err),
        &FileProblem::OtherFormat {
            found:
                "MessagePack (NamedMpkFileRecorder, so also DefaultRecorder and CompactRecorder)",
            expected: "bincode (BinFileRecorder)",
        },
        "{err}"
    );
    assert!(
        err.to_string().contains(
            "mix_mpk_as_bin.bin with BinFileRecorder<FullPrecisionSettings>: written by a different recorder format: expected bincode (BinFileRecorder), got MessagePack"
        ),
        "{err}"
    );
    // Burn's error is kept as the source (here bincode's complaint about the bytes).
    assert!(std::error::Error::source(&err).is_some());
    for (err, found, expected) in [
        (
            mixed_up(
                BinFileRecorder::<Full>::new(),
                NamedMpkFileRecorder::<Full>::new(),
                "mix_bin_as_mpk",
            ),
            "bincode",
            "MessagePack",
        ),
        (
            mixed_up(
                PrettyJsonFileRecorder::<Full>::new(),
                BinFileRecorder::<Full>::new(),
                "mix_json_as_bin",
            ),
            "JSON",
            "bincode",
        ),
        (
            mixed_up(
                NamedMpkGzFileRecorder::<Full>::new(),
                NamedMpkFileRecorder::<Full>::new(),
                "mix_gz_as_mpk",
            ),
            "gzip",
            "MessagePack",
        ),
        (
            mixed_up(
                NamedMpkFileRecorder::<Full>::new(),
                PrettyJsonFileRecorder::<Full>::new(),
                "mix_mpk_as_json",
            ),
            "MessagePack",
            "JSON",
        ),
    ] {
        assert!(
            matches!(file_problem(&err), FileProblem::OtherFormat { found: f, expected: e }
                if f.starts_with(found) && e.starts_with(expected)),
            "{err}"
        );
    }
}

/// A small module of another kind.
#[derive(Module, Debug)]
struct Other<B: Backend> {
    weight: Param<Tensor<B, 1>>,
}

#[test]
fn a_record_of_another_module_is_named() {
    let device = Default::default();
    let other = Other::<NdArray> {
        weight: Param::from_tensor(Tensor::zeros([3], &device)),
    };
    let recorder = NamedMpkFileRecorder::<FullPrecisionSettings>::new();
    let file = path("other.mpk");
    other.save_file(file.clone(), &recorder).unwrap();
    let err = load(&file, &recorder).unwrap_err();
    assert!(
        matches!(file_problem(&err), FileProblem::NotFusedRnn { detail } if detail.contains("missing field `cells`")),
        "{err}"
    );
}

/// Truncates a saved `R` file at several points, each of which must read as truncated;
/// the last cut leaves all but `tail` bytes.
fn truncated<R: FileRecorder<NdArray>>(recorder: R, name: &str, tail: usize) -> Vec<String> {
    let (_, file) = save(&recorder, name);
    let full = std::fs::read(&file).unwrap();
    let n = full.len();
    let mut failures = vec![];
    for cut in [6, n / 10, n / 3, n / 2, 9 * n / 10, n - tail] {
        std::fs::write(&file, &full[..cut]).unwrap();
        match load(&file, &recorder) {
            Ok(_) => failures.push(format!("{name} cut at {cut}/{n}: loaded")),
            Err(e) => {
                if file_problem(&e) != &FileProblem::Truncated
                    || !e
                        .to_string()
                        .ends_with(": the file is truncated (it ends inside the record)")
                {
                    failures.push(format!("{name} cut at {cut}/{n}: {e}"));
                }
            }
        }
    }
    failures
}

#[test]
fn truncated_files_are_named_truncated() {
    type Full = FullPrecisionSettings;
    let mut failures = truncated(NamedMpkFileRecorder::<Full>::new(), "cut_mpk", 1);
    failures.extend(truncated(CompactRecorder::new(), "cut_compact", 1));
    failures.extend(truncated(BinFileRecorder::<Full>::new(), "cut_bin", 1));
    failures.extend(truncated(
        PrettyJsonFileRecorder::<Full>::new(),
        "cut_json",
        1,
    ));
    // gzip ends with an 8-byte trailer (checksum and length) that the decoder never reads
    // once the record is complete, and the end of the deflate stream need not hold record
    // bytes either: a cut there loses nothing (the weights' digest is checked all the
    // same). Cut into the compressed data instead.
    failures.extend(truncated(BinGzFileRecorder::<Full>::new(), "cut_bingz", 64));
    report(failures);
}

/// Flipped bits all over a small `R` file give an error or the saved weights, never other
/// weights (and never a panic).
fn every_bit_flip<R: FileRecorder<NdArray>>(recorder: R, name: &str) -> Vec<String> {
    let device = Default::default();
    let small = || FusedRnnConfig::new(RnnMode::Gru, 2, 3);
    let mut file = path(name);
    small()
        .init::<NdArray>(&device)
        .save_file(file.clone(), &recorder)
        .unwrap();
    file.set_extension(<R as FileRecorder<NdArray>>::file_extension());
    let full = std::fs::read(&file).unwrap();
    // The saved weights as this recorder stores them (f16 for CompactRecorder).
    let expected = values(
        &small()
            .init::<NdArray>(&device)
            .try_load_file(file.clone(), &recorder, &device)
            .unwrap(),
    );
    let mut failures = vec![];
    // One bit per byte (rotating), and every bit of the first bytes, where the header's
    // lengths and markers are: a few seconds in all.
    for at in 0..full.len() {
        let masks: Vec<u8> = if at < 48 {
            vec![0xff, 0x80, 0x04, 0x01]
        } else {
            vec![1 << (at % 8)]
        };
        for mask in masks {
            let bit = mask;
            let mut bytes = full.clone();
            bytes[at] ^= mask;
            std::fs::write(&file, &bytes).unwrap();
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                small()
                    .init::<NdArray>(&device)
                    .try_load_file(file.clone(), &recorder, &device)
                    .map(|m| values(&m))
            }));
            match result {
                Err(_) => failures.push(format!("{name}: byte {at} mask {bit:#04x}: panicked")),
                Ok(Ok(got)) if got != expected => failures.push(format!(
                    "{name}: byte {at} mask {bit:#04x}: other weights loaded"
                )),
                Ok(_) => {}
            }
        }
    }
    failures
}

#[test]
fn no_bit_flip_loads_other_weights() {
    type Full = FullPrecisionSettings;
    let mut failures = every_bit_flip(NamedMpkFileRecorder::<Full>::new(), "bits_mpk");
    failures.extend(every_bit_flip(CompactRecorder::new(), "bits_compact"));
    failures.extend(every_bit_flip(BinFileRecorder::<Full>::new(), "bits_bin"));
    report(failures);
}

// ---------------------------------------------------------------------------------------
// Checkpoints between backends.

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
    values(&saved); // initialize before cloning (see `save`)
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

/// Whether Wgpu has an adapter here (else the Wgpu pairs skip, with a message).
#[cfg(feature = "wgpu")]
fn with_wgpu() -> bool {
    wgpu_adapter::wgpu_available("records_move_between_every_pair_of_backends (Wgpu pairs)")
}

#[cfg(not(feature = "wgpu"))]
fn with_wgpu() -> bool {
    false
}

/// A checkpoint saved on `From` loaded on every backend of this build.
fn to_every_backend<From: FusedRnnBackend>(from: &str, wgpu: bool) -> Vec<Result<(), String>> {
    #[allow(unused_mut)]
    let mut results = vec![
        cross_backend::<From, NdArray>(from, "ndarray"),
        cross_backend::<From, Flex>(from, "flex"),
    ];
    #[cfg(feature = "wgpu")]
    if wgpu {
        results.push(cross_backend::<From, WgpuPlain>(from, "wgpu"));
        results.push(cross_backend::<From, WgpuFusion>(from, "wgpu_fusion"));
    }
    let _ = wgpu;
    results
}

#[test]
fn records_move_between_every_pair_of_backends() {
    let wgpu = with_wgpu();
    let mut results = to_every_backend::<NdArray>("ndarray", wgpu);
    results.extend(to_every_backend::<Flex>("flex", wgpu));
    #[cfg(feature = "wgpu")]
    if wgpu {
        results.extend(to_every_backend::<WgpuPlain>("wgpu", wgpu));
        results.extend(to_every_backend::<WgpuFusion>("wgpu_fusion", wgpu));
    }
    report(results.into_iter().filter_map(Result::err).collect());
}

// ---------------------------------------------------------------------------------------
// Records that do not fit the configuration.

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
        err.check().to_string(),
        "record does not fit the configuration: expected weight_ih_l0 of shape [15, 3], got [12, 3]"
    );
    assert_eq!(
        err.to_string(),
        format!(
            "cannot load {} with NamedMpkFileRecorder<FullPrecisionSettings>: {}",
            path("hidden.mpk").display(),
            err.check()
        )
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
        err.check().to_string(),
        "record does not fit the configuration: expected bias_ih_l0 of shape none, got [16]"
    );
    let err = load_into(
        FusedRnnConfig::new(RnnMode::Lstm, 3, 4),
        FusedRnnConfig::new(RnnMode::Lstm, 3, 4).with_bidirectional(true),
        "dirs.mpk",
    );
    assert!(
        matches!(
            err.check(),
            FusedRnnLoadError::CellCount {
                expected: 2,
                got: 1
            }
        ),
        "{err}"
    );
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
