//! TensorFlow 1's `tf.contrib.cudnn_rnn` canonical checkpoints (`CudnnLSTM`, `CudnnGRU`,
//! `CudnnRNNTanh`, `CudnnRNNRelu`), the design this crate follows, to and from canonical
//! weights.
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

use std::collections::BTreeMap;

use super::canonical::{check_shape, Canonical};
use super::{HostTensor, Imported, InteropError};
use crate::gates::{self, TF1_LSTM};
use crate::layout::{param_name, ParamKind};
use crate::spec::{RnnMode, RnnSpec};

fn cell_name(mode: RnnMode) -> &'static str {
    match mode {
        RnnMode::Lstm => "cudnn_compatible_lstm_cell",
        RnnMode::Gru => "cudnn_compatible_gru_cell",
        RnnMode::RnnTanh | RnnMode::RnnRelu => "basic_rnn_cell",
    }
}

fn kernel_name(mode: RnnMode) -> &'static str {
    if mode == RnnMode::Gru {
        "gates/kernel"
    } else {
        "kernel"
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

/// The canonical weights of `mode` held by the TF1 canonical tensors `tensors` (by name,
/// under `scope`; other names, such as optimizer slots, are ignored), sequence-first as
/// TF1's cuDNN RNNs are (`batch_first = false`), each tensor read by `read` (given its
/// name, for its errors).
///
/// Layers and directions come from the names present; sizes from `kernel` shapes.
///
/// # Errors
///
/// [`InteropError::Missing`] naming a tensor that is absent, [`InteropError::Shape`] naming
/// one of the wrong shape, [`InteropError::NotFinite`], what `read` returns.
pub fn import<T, E: From<InteropError>>(
    mode: RnnMode,
    tensors: &BTreeMap<String, T>,
    scope: &str,
    read: impl Fn(&str, &T) -> Result<HostTensor, E>,
) -> Result<Imported, E> {
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
        let k = kernel_name(mode);
        return Err(InteropError::Missing {
            key: format!("{}/{k}", cell_prefix(mode, scope, 0, 0, false)),
            expected: None,
            context: format!(
                "nor {}/{k}: no TF1 {} cell under scope {scope:?}",
                cell_prefix(mode, scope, 0, 0, true),
                mode.name()
            ),
        }
        .into());
    }
    let nd = if bidirectional { 2 } else { 1 };
    let get = |name: String| -> Result<HostTensor, E> {
        let t = tensors.get(&name).ok_or_else(|| InteropError::Missing {
            key: name.clone(),
            expected: None,
            context: String::new(),
        })?;
        read(&name, t)
    };
    let num_layers = (0..)
        .take_while(|&l| {
            let p = cell_prefix(mode, scope, l, 0, bidirectional);
            tensors.contains_key(&format!("{p}/{}", kernel_name(mode)))
        })
        .count();
    let g = mode.num_gates();
    // Hidden size from a bias (the kernel's rows mix input and hidden sizes).
    let p0 = cell_prefix(mode, scope, 0, 0, bidirectional);
    let hidden = match mode {
        RnnMode::Gru => get(format!("{p0}/candidate/input_projection/bias"))?.shape[0],
        _ => get(format!("{p0}/bias"))?.shape[0] / g,
    };
    let kernel0 = get(format!("{p0}/{}", kernel_name(mode)))?.shape;
    let gate_cols = if mode == RnnMode::Gru {
        2 * hidden
    } else {
        g * hidden
    };
    check_shape(&format!("{p0}/kernel"), &[0, gate_cols], &kernel0)?;
    let d_input = kernel0[0]
        .checked_sub(hidden)
        .filter(|&i| i > 0)
        .ok_or_else(|| {
            InteropError::shape(format!("{p0}/kernel"), &[hidden + 1, gate_cols], &kernel0)
        })?;
    let spec = RnnSpec {
        num_layers,
        bidirectional,
        ..RnnSpec::new(mode, d_input, hidden)
    };
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
    let to = gates::canonical(mode);
    for layer in 0..num_layers {
        let d_in = if layer == 0 { d_input } else { nd * hidden };
        for d in 0..nd {
            let p = cell_prefix(mode, scope, layer, d, bidirectional);
            let load = |name: &str, shape: &[usize]| -> Result<HostTensor, E> {
                let key = format!("{p}/{name}");
                let t = get(key.clone())?;
                check_shape(&key, shape, &t.shape)?;
                Ok(t)
            };
            let (w, r, b_ih, b_hh) = match mode {
                RnnMode::Gru => {
                    // [W_r R_r; W_u R_u]ᵀ, then the candidate's two projections.
                    let gates = load("gates/kernel", &[d_in + hidden, 2 * hidden])?.transpose();
                    let w_n = load("candidate/input_projection/kernel", &[d_in, hidden])?;
                    let r_n = load("candidate/hidden_projection/kernel", &[hidden, hidden])?;
                    let half = load("gates/bias", &[2 * hidden])?.scale(0.5);
                    let b_wn = load("candidate/input_projection/bias", &[hidden])?;
                    let b_rn = load("candidate/hidden_projection/bias", &[hidden])?;
                    (
                        HostTensor::cat(&[gates.cols(0, d_in), w_n.transpose()]),
                        HostTensor::cat(&[gates.cols(d_in, hidden), r_n.transpose()]),
                        HostTensor::cat(&[half.clone(), b_wn]),
                        HostTensor::cat(&[half, b_rn]),
                    )
                }
                _ => {
                    let from: &[char] = if mode == RnnMode::Lstm { &TF1_LSTM } else { to };
                    let kernel = load("kernel", &[d_in + hidden, g * hidden])?
                        .transpose()
                        .permute_gates(from, to);
                    let half = load("bias", &[g * hidden])?
                        .scale(0.5)
                        .permute_gates(from, to);
                    (
                        kernel.cols(0, d_in),
                        kernel.cols(d_in, hidden),
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
    Ok(canonical.build(spec, false)?)
}

/// The TF1 canonical tensors of the module of `spec` with flat weights `flat` (in the
/// layout's order), by name under `scope` (`""` for none), as `CudnnOpaqueParamsSaveable`
/// saves them. A module without bias gets zero biases (TF1's cells always have one).
///
/// # Errors
///
/// [`InteropError::Unsupported`] for a projection (`proj_size`): TF1's cells have none.
pub fn export(
    spec: &RnnSpec,
    flat: &[f64],
    scope: &str,
) -> Result<BTreeMap<String, HostTensor>, InteropError> {
    if let Some(p) = spec.proj_size {
        return Err(InteropError::unsupported(
            "proj_size",
            Some(p),
            "TF1's cuDNN-compatible cells have no projection",
        ));
    }
    let mode = spec.mode;
    let from = gates::canonical(mode);
    let h = spec.d_hidden;
    let mut out = BTreeMap::new();
    for layer in 0..spec.num_layers {
        for d in 0..spec.num_directions() {
            let p = cell_prefix(mode, scope, layer, d, spec.bidirectional);
            let c = super::cell_weights(spec, flat, layer, d);
            let zeros = || HostTensor::zeros(vec![mode.num_gates() * h]);
            let b_ih = c.bias_ih.unwrap_or_else(zeros);
            let b_hh = c.bias_hh.unwrap_or_else(zeros);
            let mut put = |name: &str, t: HostTensor| {
                out.insert(format!("{p}/{name}"), t);
            };
            match mode {
                RnnMode::Gru => {
                    let w_ru = c.weight_ih.rows(0, 2 * h);
                    let r_ru = c.weight_hh.rows(0, 2 * h);
                    put(
                        "gates/kernel",
                        HostTensor::cat_cols(&w_ru, &r_ru).transpose(),
                    );
                    put(
                        "candidate/input_projection/kernel",
                        c.weight_ih.rows(2 * h, h).transpose(),
                    );
                    put(
                        "candidate/hidden_projection/kernel",
                        c.weight_hh.rows(2 * h, h).transpose(),
                    );
                    put("gates/bias", b_ih.rows(0, 2 * h).add(&b_hh.rows(0, 2 * h)));
                    put("candidate/input_projection/bias", b_ih.rows(2 * h, h));
                    put("candidate/hidden_projection/bias", b_hh.rows(2 * h, h));
                }
                _ => {
                    let to: &[char] = if mode == RnnMode::Lstm {
                        &TF1_LSTM
                    } else {
                        from
                    };
                    let kernel = HostTensor::cat_cols(&c.weight_ih, &c.weight_hh);
                    put("kernel", kernel.permute_gates(from, to).transpose());
                    put("bias", b_ih.add(&b_hh).permute_gates(from, to));
                }
            }
        }
    }
    Ok(out)
}
