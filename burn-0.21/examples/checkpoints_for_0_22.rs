//! Writes the checkpoints the Burn 0.22 line's upgrade test reads
//! (`burn-0.22/tests/upgrade.rs`): a model holding a `FusedRnn` (2-layer bidirectional LSTM
//! with projection), a drop-in `BiGru` and a `Linear` head, saved by this line with
//! `CompactRecorder` (f16), `NamedMpkFileRecorder<FullPrecisionSettings>`,
//! `PrettyJsonFileRecorder` and `JsonGzFileRecorder` (full precision), and the
//! model's outputs on a fixed input computed here, before saving.
//!
//! Run (from the repository root; the files are committed):
//! `cargo run -p burn-fused-rnn --example checkpoints_for_0_22`

use burn::backend::NdArray;
use burn::module::Module;
use burn::nn::{Linear, LinearConfig};
use burn::record::{
    CompactRecorder, FullPrecisionSettings, JsonGzFileRecorder, NamedMpkFileRecorder,
    PrettyJsonFileRecorder,
};
use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};
use burn_fused_rnn::nn::{BiGru, BiGruConfig};
use burn_fused_rnn::{FusedRnn, FusedRnnConfig, RnnMode};

type B = NdArray;

#[derive(Module, Debug)]
struct Model<B: Backend> {
    rnn: FusedRnn<B>,
    bigru: BiGru<B>,
    head: Linear<B>,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let device = Default::default();
    B::seed(&device, 2026);
    let model = Model::<B> {
        rnn: FusedRnnConfig::new(RnnMode::Lstm, 3, 5)
            .with_num_layers(2)
            .with_bidirectional(true)
            .with_proj_size(Some(3))
            .init(&device),
        bigru: BiGruConfig::new(6, 4, true).init(&device),
        head: LinearConfig::new(8, 2).init(&device),
    };
    let x: Vec<f32> = (0..2 * 7 * 3).map(|i| ((i as f32) * 0.37).sin()).collect();
    let input = Tensor::<B, 3>::from_data(TensorData::new(x.clone(), [2, 7, 3]), &device);
    let (y, state) = model.rnn.forward(input, None);
    let (z, h) = model.bigru.forward(y.clone(), None);
    let out = model.head.forward(z);
    let values = |t: TensorData| t.convert::<f32>().to_vec::<f32>().unwrap();
    let expected = serde_json::json!({
        "x": x,
        "x_shape": [2, 7, 3],
        "rnn_y": values(y.into_data()),
        "rnn_h_n": values(state.hidden.into_data()),
        "rnn_c_n": values(state.cell.unwrap().into_data()),
        "bigru_h_n": values(h.into_data()),
        "out": values(out.into_data()),
    });
    let dir = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../burn-0.22/tests/fixtures/from_0_21"
    );
    std::fs::create_dir_all(dir)?;
    model
        .clone()
        .save_file(format!("{dir}/model_compact"), &CompactRecorder::new())?;
    model.clone().save_file(
        format!("{dir}/model_full"),
        &NamedMpkFileRecorder::<FullPrecisionSettings>::new(),
    )?;
    model.clone().save_file(
        format!("{dir}/model_pretty"),
        &PrettyJsonFileRecorder::<FullPrecisionSettings>::new(),
    )?;
    model.save_file(
        format!("{dir}/model_json"),
        &JsonGzFileRecorder::<FullPrecisionSettings>::new(),
    )?;
    std::fs::write(
        format!("{dir}/expected.json"),
        serde_json::to_string_pretty(&expected)?,
    )?;
    println!(
        "wrote {dir}/model_compact.mpk, model_full.mpk, model_pretty.json, model_json.json.gz, \
         expected.json"
    );
    Ok(())
}
