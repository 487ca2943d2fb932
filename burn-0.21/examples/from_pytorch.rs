//! Loads a PyTorch LSTM's `state_dict` (`torch.save(lstm.state_dict(), "lstm.pt")`) in one
//! call and prints its outputs next to PyTorch's.
//!
//! Run: `cargo run --release --example from_pytorch`
//!
//! The `.pt` file and PyTorch's outputs come from tests/fixtures/interop/generate.py:
//! `nn.LSTM(3, 4, num_layers=2, bidirectional=True)` (PyTorch's default layout,
//! `[seq_length, batch_size, features]`), float32.

use burn::backend::NdArray;
use burn::tensor::{Tensor, TensorData};
use burn_fused_rnn::interop::PytorchImport;
use burn_fused_rnn::{FusedRnn, RnnMode};
use burn_store::{ModuleStore, SafetensorsStore};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/interop");
    let device = Default::default();

    // One call: the configuration (2 layers, bidirectional, hidden size 4, input size 3,
    // bias) is read off the tensors; the layout is PyTorch's default, sequence-first (a
    // state_dict does not record it: a module made with batch_first=True needs
    // `.with_batch_first(true)`).
    let lstm: FusedRnn<NdArray> =
        PytorchImport::new(RnnMode::Lstm).load(format!("{fixtures}/lstm.pt"), &device)?;
    println!("loaded {:?}", lstm.spec());

    // PyTorch's input and outputs for this module.
    let mut store = SafetensorsStore::from_file(format!("{fixtures}/expected.safetensors"));
    let mut get = |name: &str| -> Result<TensorData, Box<dyn std::error::Error>> {
        let snapshot = store.get_snapshot(name)?.ok_or(format!("no {name}"))?;
        Ok(snapshot.to_data()?)
    };
    let x = Tensor::<NdArray, 3>::from_data(get("lstm/x")?, &device);
    let expected_y: Vec<f32> = get("lstm/y")?.to_vec().map_err(|e| format!("{e:?}"))?;
    let expected_h: Vec<f32> = get("lstm/h_n")?.to_vec().map_err(|e| format!("{e:?}"))?;

    let (y, state) = lstm.forward(x, None);
    println!(
        "output y: {:?} (seq_length, batch_size, 2 * hidden)",
        y.dims()
    );
    let y: Vec<f32> = y.into_data().to_vec().map_err(|e| format!("{e:?}"))?;
    let h: Vec<f32> = state
        .hidden
        .into_data()
        .to_vec()
        .map_err(|e| format!("{e:?}"))?;

    println!("{:>6} {:>14} {:>14}", "", "burn-fused-rnn", "PyTorch");
    for i in (0..y.len()).step_by(7).take(8) {
        println!(
            "{:>6} {:>14.7} {:>14.7}",
            format!("y[{i}]"),
            y[i],
            expected_y[i]
        );
    }
    for i in 0..4 {
        println!(
            "{:>6} {:>14.7} {:>14.7}",
            format!("h[{i}]"),
            h[i],
            expected_h[i]
        );
    }
    let max_diff = |a: &[f32], b: &[f32]| {
        a.iter()
            .zip(b)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f32::max)
    };
    let (dy, dh) = (max_diff(&y, &expected_y), max_diff(&h, &expected_h));
    println!(
        "max |difference|: y {dy:.2e}, h_n {dh:.2e} over {} and {} values",
        y.len(),
        h.len()
    );
    assert!(dy < 1e-5 && dh < 1e-5, "outputs differ from PyTorch's");
    Ok(())
}
