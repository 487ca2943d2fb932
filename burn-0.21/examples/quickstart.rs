//! Quick start: a 2-layer bidirectional LSTM on the default CPU backend (NdArray).
//!
//! Runs a forward pass on random data, saves a checkpoint, reloads it into a fresh module,
//! checks that the outputs are identical, and prints shapes and a checksum.
//!
//! Run: `cargo run --release --example quickstart`

use burn::backend::NdArray;
use burn::module::Module;
use burn::record::{FullPrecisionSettings, NamedMpkFileRecorder};
use burn::tensor::{Distribution, Tensor};
use burn_fused_rnn::{FusedRnnConfig, RnnMode};

type B = NdArray;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let device = Default::default();
    let config = FusedRnnConfig::new(RnnMode::Lstm, 32, 64)
        .with_num_layers(2)
        .with_bidirectional(true);
    let lstm = config.init::<B>(&device);
    println!(
        "LSTM: d_input 32, d_hidden 64, 2 layers, bidirectional; {} parameters",
        lstm.layout().params_size()
    );

    // A padded batch of 4 sequences of 20 steps, valid lengths 20, 13, 7 and 1.
    let x = Tensor::<B, 3>::random([4, 20, 32], Distribution::Normal(0.0, 1.0), &device);
    let lengths = [20, 13, 7, 1];
    let (y, state) = lstm.forward_with_lengths(x.clone(), &lengths, None);
    println!("input  {:?}", x.dims());
    println!("output {:?}  (batch, time, 2 directions x 64)", y.dims());
    println!(
        "hidden {:?}  (layers x directions, batch, 64)",
        state.hidden.dims()
    );
    let cell = state.cell.expect("LSTM has a cell state");
    println!("cell   {:?}", cell.dims());

    // Save a checkpoint, reload it into a freshly initialized module, compare.
    let path = std::env::temp_dir().join("burn-fused-rnn-quickstart");
    let recorder = NamedMpkFileRecorder::<FullPrecisionSettings>::new();
    lstm.clone().save_file(path.clone(), &recorder)?;
    let reloaded =
        config
            .with_seed(1)
            .init::<B>(&device)
            .try_load_file(path.clone(), &recorder, &device)?;
    let (y2, state2) = reloaded.forward_with_lengths(x, &lengths, None);
    let same = y.clone().equal(y2).all().into_scalar()
        && state.hidden.equal(state2.hidden).all().into_scalar();
    println!(
        "checkpoint {}.mpk reloaded: outputs identical = {same}",
        path.display()
    );
    assert!(same, "outputs changed after reloading the checkpoint");

    let checksum: f32 = y.clone().sum().into_scalar();
    let abs_checksum: f32 = y.abs().sum().into_scalar();
    println!("checksum: sum(output) = {checksum:.6}, sum(|output|) = {abs_checksum:.6}");
    Ok(())
}
