//! PyTorch imports that used to load wrongly or not at all (issue #18), against files and
//! outputs written by torch (tests/fixtures/pytorch_import/generate.py): PyTorch's layout
//! by default, `nn.LSTMCell` / `GRUCell` / `RNNCell` state_dicts, NaN and infinite
//! weights, the file type found from the content, and errors that say "missing" or
//! "unexpected" and list the keys found.
//!
//! Tolerances (`|got - expected| <= atol + rtol·|expected|`): f32 against PyTorch's float32
//! 1e-5 / 1e-5; NdArray f64 against PyTorch run in float64 on the same weights 1e-12 /
//! 1e-10.

use std::collections::BTreeMap;
use std::path::PathBuf;

use burn::backend::ndarray::NdArray;
use burn::backend::Flex;
use burn::tensor::backend::Backend;
use burn::tensor::{Element, Tensor, TensorData};
use burn_fused_rnn::interop::{InteropError, PytorchImport};
use burn_fused_rnn::{FusedRnn, FusedRnnBackend, RnnMode, RnnState};
use burn_store::{ModuleStore, SafetensorsStore};

const F32_TOL: (f64, f64) = (1e-5, 1e-5);
const F64_TOL: (f64, f64) = (1e-12, 1e-10);

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/pytorch_import")
        .join(name)
}

/// The tensors of expected.safetensors whose names start with `case/`, without it.
fn expected(case: &str) -> BTreeMap<String, TensorData> {
    let mut store = SafetensorsStore::from_file(fixture("expected.safetensors"));
    store
        .get_all_snapshots()
        .unwrap()
        .iter()
        .filter_map(|(k, s)| {
            k.strip_prefix(&format!("{case}/"))
                .map(|k| (k.to_string(), s.to_data().unwrap()))
        })
        .collect()
}

/// A tensor of `B`'s float type (explicit dtype: NdArray f32 and f64 share one device).
fn tensor<B: Backend, const D: usize>(data: &TensorData) -> Tensor<B, D> {
    let dtype = <B::FloatElem as Element>::dtype();
    Tensor::from_data(
        data.clone().convert_dtype(dtype),
        (&Default::default(), dtype),
    )
}

fn assert_close<B: Backend, const D: usize>(
    what: &str,
    got: Tensor<B, D>,
    expected: &TensorData,
    (atol, rtol): (f64, f64),
) {
    assert_eq!(
        got.dims().to_vec(),
        expected.shape.to_vec(),
        "{what}: shape"
    );
    let got: Vec<f64> = got.into_data().iter::<f64>().collect();
    for (i, (g, e)) in got.iter().zip(expected.iter::<f64>()).enumerate() {
        assert!(
            (g - e).abs() <= atol + rtol * e.abs(),
            "{what}: element {i}: got {g}, expected {e}"
        );
    }
}

fn load<B: Backend>(import: PytorchImport, file: &str) -> FusedRnn<B> {
    import
        .load(fixture(file), &Default::default())
        .unwrap_or_else(|e| panic!("{file}: {e}"))
}

fn load_err(import: PytorchImport, file: &str) -> InteropError {
    match import.load::<NdArray>(fixture(file), &Default::default()) {
        Ok(_) => panic!("expected an error loading {file}"),
        Err(e) => e,
    }
}

/// nn.GRU(3, 4) with PyTorch's defaults, loaded from `file` with no option, runs on
/// `[T, B, 3]` inputs as torch does (`suffix` "64": against torch in float64).
fn gru_runs_as_torch<B: FusedRnnBackend>(file: &str, suffix: &str, tol: (f64, f64)) {
    let rnn: FusedRnn<B> = load(PytorchImport::new(RnnMode::Gru), file);
    assert!(!rnn.batch_first(), "{file}: PyTorch's layout");
    let t = expected("gru_seq_first");
    let (y, state) = rnn.forward(tensor(&t["x"]), None);
    assert_close(&format!("{file} y"), y, &t[&format!("y{suffix}")], tol);
    assert_close(
        &format!("{file} h_n"),
        state.hidden,
        &t[&format!("h_n{suffix}")],
        tol,
    );
}

#[test]
fn a_state_dict_loaded_without_options_runs_as_torch_does() {
    // Issue #18: a sequence-first GRU loaded without `.with_batch_first(false)` used to fit
    // every shape and give outputs off by 0.4.
    gru_runs_as_torch::<NdArray>("gru_seq_first.pt", "", F32_TOL);
    gru_runs_as_torch::<Flex>("gru_seq_first.pt", "", F32_TOL);
    gru_runs_as_torch::<NdArray<f64>>("gru_seq_first.pt", "64", F64_TOL);
}

#[test]
fn the_file_type_comes_from_the_content() {
    // The same weights as a safetensors file named .pt, a torch.save zip named
    // .safetensors, and torch's legacy (pickle) format.
    for file in [
        "gru_safetensors_named.pt",
        "gru_zip_named.safetensors",
        "gru_legacy.pt",
    ] {
        gru_runs_as_torch::<NdArray>(file, "", F32_TOL);
    }
    // Neither: an error that says what the file is.
    let err = load_err(PytorchImport::new(RnnMode::Gru), "not_a_checkpoint.pt");
    assert!(matches!(err, InteropError::Io { .. }), "{err}");
    assert!(
        err.to_string().ends_with(
            "not_a_checkpoint.pt: expected a PyTorch checkpoint (a zip archive or a pickle \
             stream) or a safetensors file, got a file of 36 bytes starting with \"model wei\""
        ),
        "{err}"
    );
}

/// A cell's state_dict loads as a one-layer module whose prepared `step` is the cell's
/// forward, and whose `forward` over the sequence gives the same steps.
fn cell_matches_torch<B: FusedRnnBackend>(
    case: &str,
    mode: RnnMode,
    file: &str,
    prefix: &str,
    bias: bool,
    tol: (f64, f64),
) {
    let rnn: FusedRnn<B> = load(PytorchImport::new(mode).with_prefix(prefix), file);
    let spec = rnn.spec();
    assert_eq!(
        (
            spec.num_layers,
            spec.bidirectional,
            spec.d_input,
            spec.d_hidden,
            spec.bias
        ),
        (1, false, 3, 4, bias),
        "{case}"
    );
    let t = expected(case);
    let state = |h: &TensorData, c: Option<&TensorData>| {
        let h = tensor::<B, 2>(h).unsqueeze_dim(0);
        match c {
            Some(c) => RnnState::lstm(h, tensor::<B, 2>(c).unsqueeze_dim(0)),
            None => RnnState::hidden_only(h),
        }
    };
    let x: Tensor<B, 3> = tensor(&t["x"]);
    let [steps, _, _] = x.dims();
    let cell = rnn.prepare();
    let mut s = state(&t["h0"], t.get("c0"));
    let mut ys = Vec::new();
    for step in 0..steps {
        let (y, next) = cell.step(x.clone().narrow(0, step, 1).squeeze_dim(0), Some(s));
        ys.push(y);
        s = next;
    }
    assert_close(
        &format!("{case} steps"),
        Tensor::stack::<3>(ys, 0),
        &t["y"],
        tol,
    );
    assert_close(
        &format!("{case} h_n"),
        s.hidden.squeeze_dim::<2>(0),
        &t["h_n"],
        tol,
    );
    if let Some(c_n) = t.get("c_n") {
        assert_close(
            &format!("{case} c_n"),
            s.cell.unwrap().squeeze_dim::<2>(0),
            c_n,
            tol,
        );
    }
    let (y, s) = rnn.forward(x, Some(state(&t["h0"], t.get("c0"))));
    assert_close(&format!("{case} forward"), y, &t["y"], tol);
    assert_close(
        &format!("{case} forward h_n"),
        s.hidden.squeeze_dim::<2>(0),
        &t["h_n"],
        tol,
    );
}

#[test]
fn cell_state_dicts_load_as_one_layer() {
    // Issue #18: "_model.decoder.rnn.weight_hh_l0: expected a tensor, got none", with
    // weight_hh right there.
    for_each_backend(|tol, run| {
        run(
            "lstm_cell",
            RnnMode::Lstm,
            "lstm_cell.pt",
            "decoder.rnn.",
            true,
            tol,
        );
        run(
            "gru_cell",
            RnnMode::Gru,
            "gru_cell.safetensors",
            "",
            true,
            tol,
        );
        run(
            "rnn_cell_relu",
            RnnMode::RnnRelu,
            "rnn_cell_relu.pt",
            "",
            false,
            tol,
        );
    });
}

type CellCheck = fn(&str, RnnMode, &str, &str, bool, (f64, f64));

fn for_each_backend(body: impl Fn((f64, f64), CellCheck)) {
    body(F32_TOL, cell_matches_torch::<NdArray>);
    body(F32_TOL, cell_matches_torch::<Flex>);
}

#[test]
fn a_cell_under_another_prefix_is_pointed_at() {
    let err = load_err(
        PytorchImport::new(RnnMode::Lstm).with_prefix("decoder."),
        "lstm_cell.pt",
    );
    assert!(matches!(err, InteropError::Missing { .. }), "{err}");
    assert!(
        err.to_string()
            .contains("the file has RNN parameters under prefix \"decoder.rnn.\""),
        "{err}"
    );
}

#[test]
fn non_finite_weights_are_refused_naming_key_and_index() {
    let err = load_err(PytorchImport::new(RnnMode::Lstm), "lstm_nan.pt");
    assert!(matches!(err, InteropError::NotFinite { .. }), "{err}");
    assert_eq!(
        err.to_string(),
        "weight_hh_l0: expected finite weights, got NaN at index [5, 2]"
    );
    let err = load_err(PytorchImport::new(RnnMode::Gru), "gru_inf.safetensors");
    assert_eq!(
        err.to_string(),
        "bias_ih_l0: expected finite weights, got -inf at index [7]"
    );
}

#[test]
fn a_missing_input_matrix_is_missing() {
    // Issue #18: it used to report bias_ih_l0 as unexpected "(the configuration has skip
    // input ...)".
    let err = load_err(
        PytorchImport::new(RnnMode::Lstm),
        "lstm_missing_ih.safetensors",
    );
    assert!(matches!(err, InteropError::Missing { .. }), "{err}");
    assert_eq!(
        err.to_string(),
        "missing tensor weight_ih_l0: expected a tensor, got none (the input size is inferred \
         from it; found: bias_hh_l0 [16], bias_ih_l0 [16], weight_hh_l0 [16, 4])"
    );
}

#[test]
fn an_extra_layer_is_unexpected() {
    // Issue #18: a stray weight_hh_l2 used to report a missing weight_ih_l2.
    let err = load_err(
        PytorchImport::new(RnnMode::Gru),
        "gru_extra_hh_l2.safetensors",
    );
    assert!(matches!(err, InteropError::Unexpected { .. }), "{err}");
    let msg = err.to_string();
    assert!(
        msg.starts_with(
            "unexpected tensor weight_hh_l2: expected no such tensor, got one of shape [12, 4] \
             (weight_hh_l2 = the configuration has 2 layer(s); found: bias_hh_l0 [12],"
        ),
        "{msg}"
    );
    assert!(
        msg.ends_with("weight_hh_l2 [12, 4], weight_ih_l0 [12, 3], weight_ih_l1 [12, 4])"),
        "{msg}"
    );
}
