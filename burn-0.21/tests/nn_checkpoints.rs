//! A trained model's checkpoint, written while it held burn-nn's recurrent layers, loads
//! after the `use` swap through the call the user already makes (`Module::load_file`), with
//! every file recorder Burn 0.21 ships, at full and half precision (Note [Two layouts, one
//! record] in `burn_fused_rnn::nn`).
//!
//! tests/migration/model.rs (every burn-nn recurrent type, with and without bias,
//! sequence-first, relu) is included twice, as in tests/nn_migration.rs. The independent
//! reference is burn-nn itself: the burn-nn model loaded from the same file gives the
//! logits the drop-in model must give. Both read the same stored values (at half precision,
//! the same f16-rounded ones), so they agree to f32 rounding of the forward (1e-5
//! relative).

#[allow(dead_code)]
mod with_burn_nn {
    use burn::config::Config;
    use burn::module::Module;
    use burn::nn::activation::ActivationConfig;
    use burn::nn::loss::CrossEntropyLossConfig;
    use burn::nn::{Linear, LinearConfig};
    use burn::optim::{AdamConfig, GradientsParams, Optimizer};
    use burn::tensor::backend::{AutodiffBackend, Backend};
    use burn::tensor::{ElementConversion, Int, Tensor};

    // The line that changes:
    use burn::nn::{
        BiGru, BiGruConfig, BiLstm, BiLstmConfig, BiRnn, BiRnnConfig, Gru, GruConfig, Lstm,
        LstmConfig, LstmState, Rnn, RnnConfig, RnnState,
    };

    include!("migration/model.rs");
}

#[allow(dead_code)]
mod with_fused {
    use burn::config::Config;
    use burn::module::Module;
    use burn::nn::activation::ActivationConfig;
    use burn::nn::loss::CrossEntropyLossConfig;
    use burn::nn::{Linear, LinearConfig};
    use burn::optim::{AdamConfig, GradientsParams, Optimizer};
    use burn::tensor::backend::{AutodiffBackend, Backend};
    use burn::tensor::{ElementConversion, Int, Tensor};

    // The line that changes:
    use burn_fused_rnn::nn::{
        BiGru, BiGruConfig, BiLstm, BiLstmConfig, BiRnn, BiRnnConfig, Gru, GruConfig, Lstm,
        LstmConfig, LstmState, Rnn, RnnConfig, RnnState,
    };

    include!("migration/model.rs");
}

use std::path::{Path, PathBuf};

use burn::backend::ndarray::NdArray;
use burn::module::Module;
use burn::record::{
    BinFileRecorder, BinGzFileRecorder, CompactRecorder, DefaultRecorder, FileRecorder,
    FullPrecisionSettings, HalfPrecisionSettings, JsonGzFileRecorder, NamedMpkFileRecorder,
    NamedMpkGzFileRecorder, PrettyJsonFileRecorder,
};
use burn::tensor::{Distribution, Tensor};
use burn_fused_rnn::nn::{Lstm, LstmConfig};
use burn_fused_rnn::FusedRnnLoadError;

#[path = "common/tensors.rs"]
mod tensors;

type B = NdArray<f32>;

/// Runs `f` on a thread with a 16 MiB stack. Reading this model's record takes more than
/// the 2 MiB of a test thread in a debug build, with burn-nn's layers alone too (serde's
/// nested visitors, unoptimized); a program's main thread has 8 MiB.
fn with_stack<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .stack_size(16 << 20)
            .spawn_scoped(scope, f)
            .expect("a thread")
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}

fn dir(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "burn-fused-rnn-nn-checkpoints-{}-{test}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn logits(y: Tensor<B, 2>) -> Vec<f32> {
    y.into_data().to_vec().unwrap()
}

fn assert_same(what: &str, got: &[f32], expected: &[f32]) {
    assert_eq!(got.len(), expected.len(), "{what}: number of logits");
    for (i, (g, e)) in got.iter().zip(expected).enumerate() {
        assert!(
            (g - e).abs() <= 1e-5 * (1.0 + e.abs()),
            "{what}: logit {i}: got {g} with the drop-ins, expected {e} (burn-nn on the same file)"
        );
    }
}

/// Saves a fresh burn-nn model with `recorder`, loads the file into a fresh drop-in
/// model (other weights) with `load_file`, and compares logits with the burn-nn model
/// loaded from the same file. Then saves the drop-in model and loads that file back.
fn round_trip<R: FileRecorder<B>>(test: &str, name: &str, recorder: R) {
    let device = Default::default();
    let path = dir(test).join(name);
    let saved = with_burn_nn::ModelConfig::new(3, 6, 4).init::<B>(&device);
    saved.save_file(&path, &recorder).expect("burn-nn saves");

    let x = Tensor::<B, 3>::random([5, 7, 3], Distribution::Normal(0.0, 1.0), &device);
    let expected = with_burn_nn::ModelConfig::new(3, 6, 4)
        .init::<B>(&device)
        .load_file(&path, &recorder, &device)
        .expect("burn-nn loads its own file")
        .forward(x.clone());
    let fresh = with_fused::ModelConfig::new(3, 6, 4).init::<B>(&device);
    let before = logits(fresh.forward(x.clone()));
    let model = fresh
        .load_file(&path, &recorder, &device)
        .unwrap_or_else(|e| panic!("{name}: the drop-in model refused burn-nn's file: {e}"));
    let got = logits(model.forward(x.clone()));
    let expected = logits(expected);
    assert_same(name, &got, &expected);
    assert!(
        before
            .iter()
            .zip(&expected)
            .any(|(a, b)| (a - b).abs() > 1e-3),
        "{name}: the fresh model already gave burn-nn's logits: the test would not see a load"
    );

    // Saving writes the canonical layout, which loads back.
    let again = dir(test).join(format!("{name}-fused"));
    model
        .save_file(&again, &recorder)
        .expect("the drop-in model saves");
    let reloaded = with_fused::ModelConfig::new(3, 6, 4)
        .init::<B>(&device)
        .load_file(&again, &recorder, &device)
        .expect("the drop-in model loads its own file");
    assert_same(
        &format!("{name}, saved again"),
        &logits(reloaded.forward(x)),
        &expected,
    );
}

macro_rules! recorder_tests {
    ($($test:ident: $recorder:expr;)*) => {$(
        #[test]
        fn $test() {
            let _rng = tensors::seeded::<B>(31);
            with_stack(|| round_trip(stringify!($test), stringify!($test), $recorder));
        }
    )*};
}

recorder_tests! {
    compact_recorder: CompactRecorder::new();
    default_recorder: DefaultRecorder::new();
    named_mpk_full: NamedMpkFileRecorder::<FullPrecisionSettings>::new();
    named_mpk_half: NamedMpkFileRecorder::<HalfPrecisionSettings>::new();
    named_mpk_gz_full: NamedMpkGzFileRecorder::<FullPrecisionSettings>::new();
    named_mpk_gz_half: NamedMpkGzFileRecorder::<HalfPrecisionSettings>::new();
    pretty_json_full: PrettyJsonFileRecorder::<FullPrecisionSettings>::new();
    pretty_json_half: PrettyJsonFileRecorder::<HalfPrecisionSettings>::new();
    json_gz_full: JsonGzFileRecorder::<FullPrecisionSettings>::new();
    json_gz_half: JsonGzFileRecorder::<HalfPrecisionSettings>::new();
    bin_full: BinFileRecorder::<FullPrecisionSettings>::new();
    bin_half: BinFileRecorder::<HalfPrecisionSettings>::new();
    bin_gz_full: BinGzFileRecorder::<FullPrecisionSettings>::new();
    bin_gz_half: BinGzFileRecorder::<HalfPrecisionSettings>::new();
}

/// The drop-in model's file holds the canonical layout at each layer (PyTorch's tensors
/// under `cells`, and the digest), not burn-nn's.
#[test]
fn saving_writes_the_canonical_layout() {
    let _rng = tensors::seeded::<B>(32);
    with_stack(|| {
        let device = Default::default();
        let path = dir("canonical").join("model");
        let recorder = PrettyJsonFileRecorder::<FullPrecisionSettings>::new();
        let model = with_fused::ModelConfig::new(3, 6, 4).init::<B>(&device);
        model.save_file(&path, &recorder).unwrap();
        let text = std::fs::read_to_string(path.with_extension("json")).unwrap();
        let json: serde_json::Value = serde_json::from_str(&text).unwrap();
        for layer in ["lstm", "bilstm", "gru", "bigru", "rnn", "birnn"] {
            let record = &json["item"][layer];
            let keys: Vec<&str> = record
                .as_object()
                .unwrap_or_else(|| panic!("{layer}: expected a map, got {record}"))
                .keys()
                .map(String::as_str)
                .collect();
            assert_eq!(keys, ["cells", "digest"], "{layer}");
        }
    });
}

/// A burn-nn checkpoint that does not fit the drop-in's configuration: `load_file` on the
/// model panics naming the layer and the tensor (Burn's `load_record` cannot return an
/// error), and the layer's `try_load_file` / `try_load_record` return the error.
#[test]
fn a_burn_nn_record_that_does_not_fit_is_an_error_naming_the_tensor() {
    let _rng = tensors::seeded::<B>(34);
    with_stack(|| {
        let device = Default::default();
        let recorder = NamedMpkFileRecorder::<FullPrecisionSettings>::new();
        let path = dir("mismatch").join("model");
        // d_hidden 5 where the drop-in model has 6.
        with_burn_nn::ModelConfig::new(3, 5, 4)
            .init::<B>(&device)
            .save_file(&path, &recorder)
            .unwrap();
        let fresh = with_fused::ModelConfig::new(3, 6, 4).init::<B>(&device);
        let panic = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            fresh.load_file(&path, &recorder, &device)
        }))
        .expect_err("a burn-nn record of another size loaded");
        let message = panic.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(
            message.contains("drop-in Lstm (d_input 3, d_hidden 6")
                && message.contains("weight_ih_l0"),
            "expected the layer and the tensor in the message, got: {message}"
        );

        // One layer's file, through the layer's checked loaders.
        let layer_path = dir("mismatch").join("lstm");
        let small = burn::nn::LstmConfig::new(3, 5, true).init::<B>(&device);
        small.clone().save_file(&layer_path, &recorder).unwrap();
        let layer: Lstm<B> = LstmConfig::new(3, 6, true).init(&device);
        let error = layer
            .clone()
            .try_load_file(&layer_path, &recorder, &device)
            .expect_err("a burn-nn layer of another size loaded");
        assert!(
            matches!(error, FusedRnnLoadError::BurnNn(_))
                && error.to_string().contains("weight_ih_l0"),
            "expected a BurnNn error naming weight_ih_l0, got: {error}"
        );
        let error = layer
            .try_load_record(burn_fused_rnn::nn::DropInRecord::BurnNn(
                small.into_record(),
            ))
            .expect_err("a burn-nn record of another size loaded");
        assert!(
            matches!(error, FusedRnnLoadError::BurnNn(_)),
            "expected a BurnNn error, got: {error}"
        );
    });
}

/// One layer's burn-nn file loads through the layer's `try_load_file`, and gives
/// burn-nn's outputs.
#[test]
fn try_load_file_takes_a_burn_nn_layer_file() {
    let _rng = tensors::seeded::<B>(35);
    with_stack(|| {
        let device = Default::default();
        let recorder = CompactRecorder::new();
        let path: &Path = &dir("layer").join("lstm");
        let saved = burn::nn::LstmConfig::new(3, 6, true).init::<B>(&device);
        saved.save_file(path, &recorder).unwrap();
        let burn_nn = burn::nn::LstmConfig::new(3, 6, true)
            .init::<B>(&device)
            .load_file(path, &recorder, &device)
            .unwrap();
        let layer: Lstm<B> = LstmConfig::new(3, 6, true)
            .init::<B>(&device)
            .try_load_file(path, &recorder, &device)
            .unwrap();
        let x = Tensor::<B, 3>::random([2, 4, 3], Distribution::Normal(0.0, 1.0), &device);
        let (expected, _) = burn_nn.forward(x.clone(), None);
        let (got, _) = layer.forward(x, None);
        let (got, expected): (Vec<f32>, Vec<f32>) = (
            got.into_data().to_vec().unwrap(),
            expected.into_data().to_vec().unwrap(),
        );
        assert_same("Lstm::try_load_file", &got, &expected);
    });
}

/// A damaged bincode file is an error, never a panic or a model: the file cut short at
/// several places (inside the replayed first elements and later), and one byte of the
/// layout's first elements changed.
#[test]
fn a_damaged_bincode_file_is_an_error() {
    let _rng = tensors::seeded::<B>(36);
    with_stack(|| {
        let device = Default::default();
        let recorder = BinFileRecorder::<FullPrecisionSettings>::new();
        let path = dir("damaged").join("model");
        with_burn_nn::ModelConfig::new(3, 6, 4)
            .init::<B>(&device)
            .save_file(&path, &recorder)
            .unwrap();
        let file = path.with_extension("bin");
        let bytes = std::fs::read(&file).unwrap();
        let cut_at = [8, 40, 60, 100, bytes.len() / 2, bytes.len() - 1];
        for cut in cut_at {
            std::fs::write(&file, &bytes[..cut]).unwrap();
            let fresh = with_fused::ModelConfig::new(3, 6, 4).init::<B>(&device);
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                fresh.load_file(&path, &recorder, &device).is_err()
            }));
            assert!(
                matches!(result, Ok(true)),
                "a bincode file cut at {cut} of {} bytes did not give an error",
                bytes.len()
            );
        }
    });
}
