//! TensorFlow 1's `tf.contrib.cudnn_rnn` canonical checkpoints (`CudnnLSTM`, `CudnnGRU`,
//! `CudnnRNNTanh`, `CudnnRNNRelu`), the design this crate follows, to and from a
//! [`FusedRnn`].
//!
//! TF1 saved cuDNN's opaque params "in a canonical format which is directly consumable by
//! platform-independent tf RNN cells" (`CudnnOpaqueParamsSaveable`), one set per layer and
//! direction under
//! `rnn/multi_rnn_cell/cell_{l}/{cell}/...` (unidirectional) or
//! `stack_bidirectional_rnn/cell_{l}/bidirectional_rnn/{fw|bw}/{cell}/...`, optionally
//! behind a scope `{scope}/`:
//!
//! | mode | `{cell}` | tensors |
//! |---|---|---|
//! | LSTM | `cudnn_compatible_lstm_cell` | `kernel` `[in + H, 4H]` gates `i, c, f, o`; `bias` `[4H]` |
//! | GRU | `cudnn_compatible_gru_cell` | `gates/kernel` `[in + H, 2H]` gates `r, u`; `gates/bias` `[2H]`; `candidate/input_projection/{kernel [in, H], bias [H]}`; `candidate/hidden_projection/{kernel [H, H], bias [H]}` |
//! | RNN | `basic_rnn_cell` | `kernel` `[in + H, H]`; `bias` `[H]` |
//!
//! Each `kernel` stacks the input matrix over the recurrent one (`[W R]ᵀ`, applied to
//! `[x, h]`). TF1 saves the SUM of cuDNN's two biases (except the GRU candidate's) and
//! restores each as half of it, which computes the same; import does the same.
//!
//! TensorFlow 1 cannot be installed where this crate is tested: the tests check these
//! conversions against the names and transformations of `cudnn_rnn_ops.py`
//! (`CudnnLSTMSaveable`, `CudnnGRUSaveable`, `CudnnRNNSimpleSaveable`) transcribed to numpy
//! and applied to PyTorch modules' weights, and against a numpy transcription of the TF1
//! cells run on the result (`tests/fixtures/interop/generate.py`), not against TF1 itself.
//!
//! ```
//! use burn::backend::NdArray;
//! use burn_fused_rnn::interop::tf1;
//! use burn_fused_rnn::{FusedRnn, FusedRnnConfig, RnnMode};
//!
//! # fn main() -> Result<(), burn_fused_rnn::interop::InteropError> {
//! let device = Default::default();
//! let lstm = FusedRnnConfig::new(RnnMode::Lstm, 3, 4)
//!     .with_batch_first(false)
//!     .init::<NdArray>(&device);
//! let tensors = tf1::export(&lstm, "")?;
//! let kernel = &tensors["rnn/multi_rnn_cell/cell_0/cudnn_compatible_lstm_cell/kernel"];
//! assert_eq!(kernel.shape.to_vec(), [3 + 4, 16]);
//! let back: FusedRnn<NdArray> = tf1::import(RnnMode::Lstm, &tensors, "", &device)?;
//! assert!(!back.batch_first()); // TF1's cuDNN RNNs are sequence-first
//! # Ok(())
//! # }
//! ```
//!
//! What is refused, and why: Note [What conversions refuse] in [`crate::interop`].

use std::collections::BTreeMap;

use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};

use super::canonical::{cell_weights, check_shape, float_tensor, permute_gates, Canonical};
use super::onnx::canonical_gates;
use super::InteropError;
use crate::config::FusedRnnConfig;
use crate::layout::{param_name, ParamKind};
use crate::module::FusedRnn;
use crate::spec::RnnMode;

// TF1's LSTM gate order (`LSTMBlockCell`: `i, c, f, o`), in this crate's gate letters.
use burn_fused_rnn_core::gates::TF1_LSTM as TF_LSTM_GATES;

fn cell_name(mode: RnnMode) -> &'static str {
    match mode {
        RnnMode::Lstm => "cudnn_compatible_lstm_cell",
        RnnMode::Gru => "cudnn_compatible_gru_cell",
        RnnMode::RnnTanh | RnnMode::RnnRelu => "basic_rnn_cell",
    }
}

/// The name prefix of layer `layer`, direction `direction` (0 forward, 1 backward), as
/// `CudnnOpaqueParamsSaveable._TFCanonicalNamePrefix` builds it, behind `scope/` when
/// `scope` is not empty.
pub fn cell_prefix(
    mode: RnnMode,
    scope: &str,
    layer: usize,
    direction: usize,
    bidirectional: bool,
) -> String {
    let scope = if scope.is_empty() {
        String::new()
    } else {
        format!("{scope}/")
    };
    let cell = cell_name(mode);
    if bidirectional {
        let side = if direction == 0 { "fw" } else { "bw" };
        format!("{scope}stack_bidirectional_rnn/cell_{layer}/bidirectional_rnn/{side}/{cell}")
    } else {
        format!("{scope}rnn/multi_rnn_cell/cell_{layer}/{cell}")
    }
}

/// Builds the fused module of `mode` held by the TF1 canonical tensors `tensors` (by name,
/// under `scope`; other names, such as optimizer slots, are ignored), sequence-first as
/// TF1's cuDNN RNNs are (`batch_first = false`).
///
/// Layers and directions come from the names present; sizes from `kernel` shapes.
///
/// # Errors
///
/// [`InteropError::Missing`] naming a tensor that is absent, [`InteropError::Shape`] naming
/// one of the wrong shape.
pub fn import<B: Backend>(
    mode: RnnMode,
    tensors: &BTreeMap<String, TensorData>,
    scope: &str,
    device: &B::Device,
) -> Result<FusedRnn<B>, InteropError> {
    let first = |bi| {
        let p = cell_prefix(mode, scope, 0, 0, bi);
        let k = if mode == RnnMode::Gru {
            "gates/bias"
        } else {
            "bias"
        };
        tensors.contains_key(&format!("{p}/{k}"))
    };
    let bidirectional = first(true);
    if !bidirectional && !first(false) {
        let k = if mode == RnnMode::Gru {
            "gates/kernel"
        } else {
            "kernel"
        };
        return Err(InteropError::Missing {
            key: format!("{}/{k}", cell_prefix(mode, scope, 0, 0, false)),
            expected: None,
            context: format!(
                "nor {}/{k}: no TF1 {} cell under scope {scope:?}",
                cell_prefix(mode, scope, 0, 0, true),
                mode.name()
            ),
        });
    }
    let nd = if bidirectional { 2 } else { 1 };
    let get = |name: String| -> Result<&TensorData, InteropError> {
        tensors.get(&name).ok_or_else(|| InteropError::Missing {
            key: name,
            expected: None,
            context: String::new(),
        })
    };
    let num_layers = (0..)
        .take_while(|&l| {
            let p = cell_prefix(mode, scope, l, 0, bidirectional);
            let k = if mode == RnnMode::Gru {
                "gates/kernel"
            } else {
                "kernel"
            };
            tensors.contains_key(&format!("{p}/{k}"))
        })
        .count();
    let g = mode.num_gates();
    // Hidden size from a bias (the kernel's rows mix input and hidden sizes).
    let p0 = cell_prefix(mode, scope, 0, 0, bidirectional);
    let hidden = match mode {
        RnnMode::Gru => get(format!("{p0}/candidate/input_projection/bias"))?.shape[0],
        _ => get(format!("{p0}/bias"))?.shape[0] / g,
    };
    let kernel0 = get(format!(
        "{p0}/{}",
        if mode == RnnMode::Gru {
            "gates/kernel"
        } else {
            "kernel"
        }
    ))?;
    let gate_cols = if mode == RnnMode::Gru {
        2 * hidden
    } else {
        g * hidden
    };
    check_shape(&format!("{p0}/kernel"), &[0, gate_cols], &kernel0.shape)?;
    let d_input = kernel0.shape[0]
        .checked_sub(hidden)
        .filter(|&i| i > 0)
        .ok_or_else(|| {
            InteropError::shape(
                format!("{p0}/kernel"),
                &[hidden + 1, gate_cols],
                &kernel0.shape,
            )
        })?;
    let config = FusedRnnConfig::new(mode, d_input, hidden)
        .with_num_layers(num_layers)
        .with_bidirectional(bidirectional)
        .with_batch_first(false);
    let mut canonical = Canonical::new(
        mode,
        Box::new(move |l, d, k| {
            format!(
                "{} ({})",
                cell_prefix(mode, scope, l, d, bidirectional),
                param_name(k, l, d)
            )
        }),
    );
    let to = canonical_gates(mode);
    for layer in 0..num_layers {
        let d_in = if layer == 0 { d_input } else { nd * hidden };
        for d in 0..nd {
            let p = cell_prefix(mode, scope, layer, d, bidirectional);
            let load2 = |name: &str, shape: [usize; 2]| -> Result<Tensor<B, 2>, InteropError> {
                let key = format!("{p}/{name}");
                let data = get(key.clone())?;
                check_shape(&key, &shape, &data.shape)?;
                float_tensor(&key, data.clone(), device)
            };
            let load1 = |name: &str, len: usize| -> Result<Tensor<B, 1>, InteropError> {
                let key = format!("{p}/{name}");
                let data = get(key.clone())?;
                check_shape(&key, &[len], &data.shape)?;
                float_tensor(&key, data.clone(), device)
            };
            let (w, r, b_ih, b_hh) = match mode {
                RnnMode::Gru => {
                    // [W_r R_r; W_u R_u]ᵀ, then the candidate's two projections.
                    let gates = load2("gates/kernel", [d_in + hidden, 2 * hidden])?.transpose();
                    let w_ru = gates.clone().narrow(1, 0, d_in);
                    let r_ru = gates.narrow(1, d_in, hidden);
                    let w_n =
                        load2("candidate/input_projection/kernel", [d_in, hidden])?.transpose();
                    let r_n =
                        load2("candidate/hidden_projection/kernel", [hidden, hidden])?.transpose();
                    let half = load1("gates/bias", 2 * hidden)?.mul_scalar(0.5);
                    let b_wn = load1("candidate/input_projection/bias", hidden)?;
                    let b_rn = load1("candidate/hidden_projection/bias", hidden)?;
                    (
                        Tensor::cat(vec![w_ru, w_n], 0),
                        Tensor::cat(vec![r_ru, r_n], 0),
                        Tensor::cat(vec![half.clone(), b_wn], 0),
                        Tensor::cat(vec![half, b_rn], 0),
                    )
                }
                _ => {
                    let from: &[char] = if mode == RnnMode::Lstm {
                        &TF_LSTM_GATES
                    } else {
                        to
                    };
                    let kernel = load2("kernel", [d_in + hidden, g * hidden])?.transpose();
                    let kernel = permute_gates(kernel, 0, from, to);
                    let half =
                        permute_gates(load1("bias", g * hidden)?.mul_scalar(0.5), 0, from, to);
                    (
                        kernel.clone().narrow(1, 0, d_in),
                        kernel.narrow(1, d_in, hidden),
                        half.clone(),
                        half,
                    )
                }
            };
            let slot = |kind| (layer, d, kind);
            let name = |kind| format!("{p} ({})", param_name(kind, layer, d));
            canonical.insert(slot(ParamKind::WeightIh), name(ParamKind::WeightIh), w);
            canonical.insert(slot(ParamKind::WeightHh), name(ParamKind::WeightHh), r);
            canonical.insert(slot(ParamKind::BiasIh), name(ParamKind::BiasIh), b_ih);
            canonical.insert(slot(ParamKind::BiasHh), name(ParamKind::BiasHh), b_hh);
        }
    }
    canonical.build(&config, device)
}

/// The TF1 canonical tensors of `rnn`, by name under `scope` (`""` for none), as
/// `CudnnOpaqueParamsSaveable` saves them. A module without bias gets zero biases (TF1's
/// cells always have one).
///
/// # Errors
///
/// [`InteropError::Unsupported`] for a projection (`proj_size`): TF1's cells have none.
pub fn export<B: Backend>(
    rnn: &FusedRnn<B>,
    scope: &str,
) -> Result<BTreeMap<String, TensorData>, InteropError> {
    let spec = *rnn.spec();
    if let Some(p) = spec.proj_size {
        return Err(InteropError::unsupported(
            "proj_size",
            Some(p),
            "TF1's cuDNN-compatible cells have no projection",
        ));
    }
    let mode = spec.mode;
    let from = canonical_gates(mode);
    let h = spec.d_hidden;
    let mut out = BTreeMap::new();
    for layer in 0..spec.num_layers {
        for d in 0..spec.num_directions() {
            let p = cell_prefix(mode, scope, layer, d, spec.bidirectional);
            let c = cell_weights(rnn, layer, d);
            let zeros = || {
                Tensor::<B, 1>::zeros(
                    [mode.num_gates() * h],
                    (&c.weight_hh.device(), c.weight_hh.dtype()),
                )
            };
            let b_ih = c.bias_ih.unwrap_or_else(zeros);
            let b_hh = c.bias_hh.unwrap_or_else(zeros);
            let mut put = |name: &str, t: TensorData| {
                out.insert(format!("{p}/{name}"), t);
            };
            match mode {
                RnnMode::Gru => {
                    let w_ru = c.weight_ih.clone().narrow(0, 0, 2 * h);
                    let r_ru = c.weight_hh.clone().narrow(0, 0, 2 * h);
                    put(
                        "gates/kernel",
                        Tensor::cat(vec![w_ru, r_ru], 1).transpose().into_data(),
                    );
                    put(
                        "candidate/input_projection/kernel",
                        c.weight_ih.narrow(0, 2 * h, h).transpose().into_data(),
                    );
                    put(
                        "candidate/hidden_projection/kernel",
                        c.weight_hh.narrow(0, 2 * h, h).transpose().into_data(),
                    );
                    let sum = b_ih.clone().narrow(0, 0, 2 * h) + b_hh.clone().narrow(0, 0, 2 * h);
                    put("gates/bias", sum.into_data());
                    put(
                        "candidate/input_projection/bias",
                        b_ih.narrow(0, 2 * h, h).into_data(),
                    );
                    put(
                        "candidate/hidden_projection/bias",
                        b_hh.narrow(0, 2 * h, h).into_data(),
                    );
                }
                _ => {
                    let to: &[char] = if mode == RnnMode::Lstm {
                        &TF_LSTM_GATES
                    } else {
                        from
                    };
                    let kernel = Tensor::cat(vec![c.weight_ih, c.weight_hh], 1);
                    put(
                        "kernel",
                        permute_gates(kernel, 0, from, to).transpose().into_data(),
                    );
                    put("bias", permute_gates(b_ih + b_hh, 0, from, to).into_data());
                }
            }
        }
    }
    Ok(out)
}
