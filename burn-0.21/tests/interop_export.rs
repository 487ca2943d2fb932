//! Files this crate exports, checked by the real tools: deterministic modules are exported
//! to PyTorch `.safetensors`, ONNX `W/R/B`, Keras and TF1 tensors, together with the
//! module's own outputs. `python3 tests/fixtures/interop/generate.py --check-export` loads
//! them into torch (`load_state_dict(safetensors.torch.load_file(path))`, strict), onnx's
//! reference evaluator, Keras and the TF1 cells, and compares (its output is committed as
//! tests/fixtures/interop/check_export.log).
//!
//! This test keeps the committed files in step with the code: it exports again and
//! requires the same tensors, and the same outputs within 1e-6. Regenerate them with
//! `INTEROP_BLESS=1 cargo test --test interop_export`, then run the script.

mod interop_common;

use std::collections::{BTreeMap, HashMap};

use burn::backend::ndarray::NdArray;
use burn::tensor::{Tensor, TensorData};
use burn_fused_rnn::interop::{keras, onnx, tf1};
use burn_fused_rnn::{FusedRnn, FusedRnnConfig, RnnMode};
use interop_common::*;
use serde_json::json;

type B = NdArray<f32>;

struct Case {
    name: &'static str,
    format: &'static str,
    config: FusedRnnConfig,
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "pytorch_lstm",
            format: "pytorch",
            config: FusedRnnConfig::new(RnnMode::Lstm, 3, 5)
                .with_num_layers(2)
                .with_bidirectional(true)
                .with_proj_size(Some(3))
                .with_batch_first(false),
        },
        Case {
            name: "pytorch_rnn_relu",
            format: "pytorch",
            config: FusedRnnConfig::new(RnnMode::RnnRelu, 3, 4)
                .with_num_layers(2)
                .with_bias(false),
        },
        Case {
            name: "onnx_gru",
            format: "onnx",
            config: FusedRnnConfig::new(RnnMode::Gru, 3, 4)
                .with_num_layers(2)
                .with_bidirectional(true)
                .with_batch_first(false),
        },
        Case {
            name: "onnx_lstm",
            format: "onnx",
            config: FusedRnnConfig::new(RnnMode::Lstm, 3, 4).with_batch_first(false),
        },
        Case {
            name: "keras_lstm",
            format: "keras",
            config: FusedRnnConfig::new(RnnMode::Lstm, 3, 4)
                .with_num_layers(2)
                .with_bidirectional(true),
        },
        Case {
            name: "keras_gru",
            format: "keras",
            config: FusedRnnConfig::new(RnnMode::Gru, 3, 4),
        },
        Case {
            name: "tf1_gru",
            format: "tf1",
            config: FusedRnnConfig::new(RnnMode::Gru, 3, 4)
                .with_num_layers(2)
                .with_bidirectional(true)
                .with_batch_first(false),
        },
        Case {
            name: "tf1_lstm",
            format: "tf1",
            config: FusedRnnConfig::new(RnnMode::Lstm, 3, 4).with_batch_first(false),
        },
    ]
}

/// Deterministic values in [-0.6, 0.6] (no random generator: the same on every machine).
fn wave(n: usize, phase: f32) -> Vec<f32> {
    (0..n)
        .map(|i| 0.6 * (0.37 * i as f32 + phase).sin())
        .collect()
}

fn module(case: &Case, phase: f32) -> FusedRnn<B> {
    let n = burn_fused_rnn::params_size(&case.config.spec());
    let params = Tensor::from_data(TensorData::new(wave(n, phase), [n]), &Default::default());
    case.config.init_with_params(params)
}

/// The exported tensors of a case, by name in its file.
fn export(case: &Case, rnn: &FusedRnn<B>) -> Vec<(String, TensorData)> {
    match case.format {
        "pytorch" => rnn.pytorch_state_dict(""),
        "onnx" => onnx::export(rnn)
            .unwrap()
            .into_iter()
            .enumerate()
            .flat_map(|(k, n)| {
                let mut v = vec![(format!("node{k}/W"), n.w), (format!("node{k}/R"), n.r)];
                v.extend(n.b.map(|b| (format!("node{k}/B"), b)));
                v
            })
            .collect(),
        "keras" => keras::export(rnn)
            .unwrap()
            .into_iter()
            .enumerate()
            .flat_map(|(k, l)| {
                let mut v = vec![];
                for (side, cell) in [("forward", Some(l.forward)), ("backward", l.backward)] {
                    if let Some(c) = cell {
                        v.push((format!("layer{k}/{side}/kernel"), c.kernel));
                        v.push((
                            format!("layer{k}/{side}/recurrent_kernel"),
                            c.recurrent_kernel,
                        ));
                        v.extend(c.bias.map(|b| (format!("layer{k}/{side}/bias"), b)));
                    }
                }
                v
            })
            .collect(),
        "tf1" => tf1::export(rnn, "").unwrap().into_iter().collect(),
        f => panic!("format {f}"),
    }
}

fn write(path: &std::path::Path, tensors: Vec<(String, TensorData)>) {
    let bytes = safetensors::serialize(
        tensors
            .iter()
            .map(|(k, d)| {
                let view = safetensors::tensor::TensorView::new(
                    safetensors::Dtype::F32,
                    d.shape.to_vec(),
                    d.as_bytes(),
                )
                .unwrap();
                (k.clone(), view)
            })
            .collect::<Vec<_>>(),
        None::<HashMap<String, String>>,
    )
    .unwrap();
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn exported_files_match_the_committed_ones() {
    let bless = std::env::var("INTEROP_BLESS").is_ok_and(|v| v == "1");
    let device = Default::default();
    let mut io: Vec<(String, TensorData)> = vec![];
    let mut described = vec![];
    for (i, case) in cases().iter().enumerate() {
        let rnn = module(case, i as f32);
        let spec = rnn.spec();
        let (batch, seq) = (2, 5);
        let shape = if rnn.batch_first() {
            [batch, seq, spec.d_input]
        } else {
            [seq, batch, spec.d_input]
        };
        let n = shape.iter().product();
        let x =
            Tensor::<B, 3>::from_data(TensorData::new(wave(n, 10.0 + i as f32), shape), &device);
        let (y, state) = rnn.forward(x.clone(), None);
        let mut outs = vec![
            ("x", x.into_data()),
            ("y", y.into_data()),
            ("h_n", state.hidden.into_data()),
        ];
        if let Some(c) = state.cell {
            outs.push(("c_n", c.into_data()));
        }
        let file = format!("exported_{}.safetensors", case.name);
        let tensors = export(case, &rnn);
        if bless {
            if case.format == "pytorch" {
                rnn.save_pytorch_safetensors(fixture(&file), "").unwrap();
            } else {
                write(&fixture(&file), tensors);
            }
        } else {
            let committed = interop_common::tensors(&file);
            let fresh: BTreeMap<String, TensorData> = tensors.into_iter().collect();
            assert_eq!(
                fresh.keys().collect::<Vec<_>>(),
                committed.keys().collect::<Vec<_>>(),
                "{file}: names"
            );
            for (k, v) in &fresh {
                assert_eq!(v.shape, committed[k].shape, "{file} {k}: shape");
                assert_eq!(
                    values(v.clone()),
                    values(committed[k].clone()),
                    "{file} {k}: values"
                );
            }
        }
        for (k, v) in outs {
            io.push((format!("{}/{k}", case.name), v));
        }
        described.push(json!({
            "name": case.name, "format": case.format, "file": file, "mode": spec.mode.name(),
            "d_input": spec.d_input, "d_hidden": spec.d_hidden, "num_layers": spec.num_layers,
            "bidirectional": spec.bidirectional, "bias": spec.bias, "batch_first": rnn.batch_first(),
            "proj_size": spec.proj_size,
        }));
    }
    if bless {
        write(&fixture("exported_io.safetensors"), io);
        let text = serde_json::to_string_pretty(&described).unwrap();
        std::fs::write(fixture("exported.json"), text + "\n").unwrap();
    } else {
        let committed = interop_common::tensors("exported_io.safetensors");
        for (k, v) in io {
            let expected = &committed[&k];
            assert_eq!(v.shape, expected.shape, "{k}");
            for (a, b) in values(v).iter().zip(values(expected.clone())) {
                assert!((a - b).abs() <= 1e-6, "{k}: {a} vs committed {b}");
            }
        }
        let text = std::fs::read_to_string(fixture("exported.json")).unwrap();
        let committed: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            committed,
            serde_json::Value::Array(described),
            "exported.json"
        );
    }
}
