//! The bad inputs of issue #18 that are not PyTorch files (those are in
//! tests/pytorch_import.rs), each with its new outcome: sizes that cannot be allocated are
//! refused before anything is allocated, naming the field; an empty stack is an error;
//! dropout with one layer warns; an LSTM refuses a state without a cell state; a clone of
//! a fresh module saves the weights the module runs with.

use std::sync::{Mutex, OnceLock};

use burn::backend::ndarray::NdArray;
use burn::backend::Flex;
use burn::module::Module;
use burn::record::{CompactRecorder, FullPrecisionSettings, NamedMpkFileRecorder};
use burn::tensor::{f16, Distribution, ElementConversion, Tensor};
use burn_fused_rnn::interop::{keras, onnx, InteropError};
use burn_fused_rnn::{FusedRnn, FusedRnnConfig, RnnLayout, RnnMode, RnnState};

fn temp(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join("burn_fused_rnn_bad_inputs");
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

#[test]
#[should_panic(expected = "expected parameters that fit in memory, got params_size = ")]
fn a_billion_layers_is_refused_at_init() {
    // Issue #18: aborted the process ("memory allocation of 9 bytes failed").
    let _ = FusedRnnConfig::new(RnnMode::Lstm, 8, 16)
        .with_num_layers(1_000_000_000)
        .init::<NdArray>(&Default::default());
}

#[test]
fn a_billion_layers_names_num_layers() {
    let caught = std::panic::catch_unwind(|| {
        FusedRnnConfig::new(RnnMode::Lstm, 8, 16)
            .with_num_layers(1_000_000_000)
            .init::<NdArray>(&Default::default())
    });
    let msg = panic_message(caught.unwrap_err());
    assert!(msg.contains("num_layers = 1000000000"), "{msg}");
    // The layout table, which every backend builds on the host, is refused too.
    let spec = FusedRnnConfig::new(RnnMode::Lstm, 8, 16)
        .with_num_layers(1_000_000_000)
        .spec();
    let msg = panic_message(std::panic::catch_unwind(|| RnnLayout::new(spec)).unwrap_err());
    assert!(
        msg.starts_with(
            "expected num_layers small enough to lay out every tensor, got num_layers = 1000000000"
        ),
        "{msg}"
    );
}

fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

/// This machine's RAM plus swap in bytes, read here from `/proc/meminfo` (Linux), or
/// `None` elsewhere.
fn machine_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib = |key: &str| -> Option<u64> {
        let line = text.lines().find(|l| l.starts_with(key))?;
        line.split_whitespace().nth(1)?.parse().ok()
    };
    Some((kib("MemTotal:")? + kib("SwapTotal:").unwrap_or(0)) * 1024)
}

/// The refusal's reason, as the crate words it on this machine: the memory ceiling on
/// Linux, whatever the kernel's overcommit setting (Note [Host memory ceiling]); `None`
/// (after printing why) when this machine could hold `bytes`, and the test cannot run.
fn expected_reason(test: &str, bytes: u64) -> Option<&'static str> {
    match machine_memory() {
        Some(memory) if memory >= bytes => {
            println!("SKIPPED {test}: this machine holds {memory} bytes, {bytes} would fit");
            None
        }
        Some(_) => Some("more than this machine's memory, "),
        None => Some("which the allocator refused"),
    }
}

#[test]
fn an_lstm_of_1e5_by_1e5_is_refused_at_init() {
    // Issue #18: passed init (lazily), then aborted in the first forward. 8e10 weights,
    // 320 GB: refused before anything is allocated, even where the kernel would grant the
    // request (overcommit always on).
    let Some(reason) = expected_reason("an_lstm_of_1e5_by_1e5_is_refused_at_init", 320003200000)
    else {
        return;
    };
    let caught = std::panic::catch_unwind(|| {
        FusedRnnConfig::new(RnnMode::Lstm, 100_000, 100_000).init::<NdArray>(&Default::default())
    });
    let msg = panic_message(caught.unwrap_err());
    let (head, tail) = (
        "invalid FusedRnnConfig: expected parameters that fit in memory, got params_size = \
         80000800000 elements (320003200000 bytes), ",
        " (mode = lstm, d_input = 100000, d_hidden = 100000, num_layers = 1, bidirectional = \
         false)",
    );
    assert!(msg.starts_with(head) && msg.ends_with(tail), "{msg}");
    assert!(msg[head.len()..].starts_with(reason), "{msg}");
}

#[test]
#[should_panic(
    expected = "expected parameters whose size in bytes fits in usize, got params_size = "
)]
fn parameters_whose_bytes_overflow_are_refused() {
    // 2^62 weights fit in usize; their bytes do not.
    let _ = FusedRnnConfig::new(RnnMode::RnnTanh, 1, 1 << 31).init::<Flex>(&Default::default());
}

#[test]
fn a_call_whose_buffers_cannot_be_allocated_is_refused() {
    // 100 MB of input, 100 GB of output ([25, 1e6, 1000] f32): refused before the op runs.
    let test = "a_call_whose_buffers_cannot_be_allocated_is_refused";
    let Some(reason) = expected_reason(test, 100000200000) else {
        return;
    };
    let device = Default::default();
    let lstm = FusedRnnConfig::new(RnnMode::Lstm, 1, 1000).init::<NdArray>(&device);
    let x = Tensor::<NdArray, 3>::zeros([25, 1_000_000, 1], &device);
    let call = std::panic::AssertUnwindSafe(|| lstm.forward(x, None));
    let msg = panic_message(std::panic::catch_unwind(call).unwrap_err());
    assert!(
        msg.starts_with(
            "expected a call whose output, final states and reserve fit in memory, got \
             100000200000 bytes, "
        ),
        "{msg}"
    );
    assert!(msg.contains(reason), "{msg}");
    assert!(
        msg.contains(", for seq_length = 1000000, batch_size = 25, mode = lstm"),
        "{msg}"
    );
}

#[test]
fn an_empty_stack_is_an_error() {
    // Issue #18: panicked, although it returns a Result.
    let err = FusedRnn::<NdArray>::from_burn_nn_stack::<burn::nn::Lstm<NdArray>>(&[]).unwrap_err();
    assert!(matches!(err, InteropError::Empty { .. }), "{err}");
    assert_eq!(
        err.to_string(),
        "layers: expected at least one burn-nn layer, got none"
    );
    let err = onnx::import::<NdArray>(&[], &Default::default()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "nodes: expected at least one ONNX node, got none"
    );
    let err = keras::import::<NdArray>(&[], &Default::default()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "layers: expected at least one Keras layer, got none"
    );
}

/// Every message logged at `warn` or above since the process started.
fn warnings() -> &'static Mutex<Vec<String>> {
    static LOGGER: OnceLock<Capture> = OnceLock::new();
    struct Capture(Mutex<Vec<String>>);
    impl log::Log for Capture {
        fn enabled(&self, metadata: &log::Metadata) -> bool {
            metadata.level() <= log::Level::Warn
        }
        fn log(&self, record: &log::Record) {
            if self.enabled(record.metadata()) {
                self.0.lock().unwrap().push(record.args().to_string());
            }
        }
        fn flush(&self) {}
    }
    let logger = LOGGER.get_or_init(|| Capture(Mutex::new(Vec::new())));
    if log::set_logger(logger).is_ok() {
        log::set_max_level(log::LevelFilter::Warn);
    }
    &logger.0
}

#[test]
fn dropout_with_one_layer_warns() {
    // Issue #18: silently ignored (PyTorch warns).
    let logged = warnings();
    let device = Default::default();
    let _ = FusedRnnConfig::new(RnnMode::Gru, 3, 4)
        .with_dropout(0.375)
        .init::<NdArray>(&device);
    let _ = burn_fused_rnn::nn::LstmConfig::new(3, 4, true)
        .with_dropout(0.625)
        .init::<NdArray>(&device);
    // With two layers it acts, and nothing is said.
    let _ = FusedRnnConfig::new(RnnMode::Gru, 3, 4)
        .with_num_layers(2)
        .with_dropout(0.875)
        .init::<NdArray>(&device);
    let logged = logged.lock().unwrap();
    for p in ["0.375", "0.625"] {
        let expected = format!(
            "FusedRnnConfig: dropout = {p} with num_layers = 1 does nothing: dropout acts \
             between layers (after every layer but the last), so it needs num_layers > 1"
        );
        assert!(logged.contains(&expected), "{logged:?}");
    }
    assert!(!logged.iter().any(|m| m.contains("0.875")), "{logged:?}");
}

#[test]
#[should_panic(
    expected = "expected state.cell, the initial cell state [L*D, batch_size, H] of an LSTM, got None"
)]
fn an_lstm_refuses_a_hidden_only_state() {
    // Issue #18: silently started the cell state at zero.
    let device = Default::default();
    let lstm = FusedRnnConfig::new(RnnMode::Lstm, 3, 4).init::<NdArray>(&device);
    let x = Tensor::<NdArray, 3>::zeros([2, 5, 3], &device);
    let h0 = Tensor::<NdArray, 3>::zeros([1, 2, 4], &device);
    let _ = lstm.forward(x, Some(RnnState::hidden_only(h0)));
}

#[test]
#[should_panic(expected = "expected state.cell")]
fn a_prepared_lstm_refuses_a_hidden_only_state() {
    let device = Default::default();
    let lstm = FusedRnnConfig::new(RnnMode::Lstm, 3, 4).init::<NdArray>(&device);
    let h0 = Tensor::<NdArray, 3>::zeros([1, 2, 4], &device);
    let _ = lstm.prepare().step(
        Tensor::zeros([2, 3], &device),
        Some(RnnState::hidden_only(h0)),
    );
}

#[test]
fn a_clone_of_a_fresh_module_saves_its_weights() {
    // Issue #18, the README's save snippet: `lstm.clone().save_file(..)` on a module that
    // never ran saved newly drawn weights; the reloaded module differed by 0.36.
    let device = Default::default();
    let config = FusedRnnConfig::new(RnnMode::Lstm, 32, 64)
        .with_num_layers(2)
        .with_bidirectional(true);
    let lstm = config.init::<NdArray>(&device);
    let path = temp("lstm");
    lstm.clone()
        .save_file(path.clone(), &CompactRecorder::new())
        .unwrap(); // saved from NdArray
    let on_flex = config
        .init::<Flex>(&Default::default())
        .try_load_file(path, &CompactRecorder::new(), &Default::default())
        .unwrap(); // loaded on Flex

    // CompactRecorder stores half precision: the loaded weights are the module's, each
    // rounded to the nearest f16 (newly drawn weights would differ by far more).
    let as_f16 = lstm
        .flat_weights()
        .into_data()
        .convert::<f16>()
        .convert::<f32>();
    assert_eq!(on_flex.flat_weights().into_data().convert::<f32>(), as_f16);
    // And they run as they would on NdArray.
    let x = Tensor::<NdArray, 3>::random([4, 20, 32], Distribution::Default, &device);
    let (y, _) = config
        .init_with_params::<NdArray>(Tensor::from_data(as_f16, &device))
        .forward(x.clone(), None);
    let (y_flex, _) = on_flex.forward(Tensor::from_data(x.into_data(), &Default::default()), None);
    let y_flex = Tensor::<NdArray, 3>::from_data(y_flex.into_data(), &device);
    let diff: f32 = (y - y_flex).abs().max().into_scalar().elem();
    assert!(diff < 1e-5, "max |diff| {diff}");

    // At full precision, the saved weights are the module's, exactly; so are a clone's.
    let lstm = config.init::<NdArray>(&device);
    assert_eq!(
        lstm.clone().flat_weights().into_data(),
        lstm.flat_weights().into_data()
    );
    let path = temp("lstm_full");
    let recorder = NamedMpkFileRecorder::<FullPrecisionSettings>::new();
    lstm.clone().save_file(path.clone(), &recorder).unwrap();
    let back = config
        .init::<NdArray>(&device)
        .try_load_file(path, &recorder, &device)
        .unwrap();
    assert_eq!(
        back.flat_weights().into_data(),
        lstm.flat_weights().into_data()
    );
    // The drop-in layers too.
    let gru = burn_fused_rnn::nn::BiGruConfig::new(3, 4, true).init::<NdArray>(&device);
    assert_eq!(
        gru.clone().fused().flat_weights().into_data(),
        gru.fused().flat_weights().into_data()
    );
}
