//! BPTT: the reference backward pass.
//!
//! Reads what the training forward saved (Note [Reserve layout] in `super`) and never
//! re-runs the forward pass. Per layer and direction, the time loop computes the gradients
//! of the gates' pre-activations step by step (one recurrent GEMM per step); the weight
//! gradients and the input gradient then take one GEMM each over all steps.
//!
//! Variable lengths (Note [Variable lengths]): the forward holds the state at invalid
//! steps, `s_t = m h'_t + (1 - m) s_{t-1}`, and outputs `m h'_t`; so the gradient of `h'_t`
//! is `m (dy_t + ds_t)` and `(1 - m) ds_t` flows past the step unchanged. No gradient flows
//! from padding, and each final state's gradient enters at the sequence's own last step.

use burn::tensor::backend::Backend;
use burn::tensor::Tensor;

use super::{float, prim, step_masks, weight};
use crate::backend::{RnnGrads, RnnInputs, RnnOutput, RnnOutputGrads, RnnReserve};
use crate::config::{RnnMode, RnnSpec};
use crate::descriptor::RnnDescriptor;
use crate::layout::{ParamKind, RnnLayout};

/// What the forward saved for one layer and direction, `[T, B, *]`, time order.
struct DirSaved<B: Backend> {
    h_prev: Tensor<B, 3>,
    c_prev: Option<Tensor<B, 3>>,
    /// LSTM/GRU: activated gates `[T, B, G*H]`; RNN: the step outputs `h'`.
    a: Tensor<B, 3>,
    /// LSTM: `tanh(c')`; GRU: `R_n h + b_Rn`.
    b: Option<Tensor<B, 3>>,
}

struct LayerSaved<B: Backend> {
    /// The layer's input after dropout (`None` for layer 0: that is `x`).
    input: Option<Tensor<B, 3>>,
    /// Scaled dropout keep mask applied to that input.
    mask: Option<Tensor<B, 3>>,
    dirs: Vec<DirSaved<B>>,
}

fn parse_reserve<B: Backend>(desc: &RnnDescriptor, reserve: RnnReserve<B>) -> Vec<LayerSaved<B>> {
    let spec = &desc.spec;
    let mut it = reserve.tensors.into_iter().map(float::<B, 3>);
    let mut next = || {
        it.next()
            .expect("reserve holds every tensor of Note [Reserve layout]")
    };
    (0..spec.num_layers)
        .map(|layer| {
            let input = (layer > 0).then(&mut next);
            let mask = (layer > 0 && desc.dropout.probability > 0.0).then(&mut next);
            let dirs = (0..spec.num_directions())
                .map(|_| {
                    let h_prev = next();
                    match spec.mode {
                        RnnMode::Lstm => {
                            let c_prev = next();
                            DirSaved {
                                h_prev,
                                c_prev: Some(c_prev),
                                a: next(),
                                b: Some(next()),
                            }
                        }
                        RnnMode::Gru => DirSaved {
                            h_prev,
                            c_prev: None,
                            a: next(),
                            b: Some(next()),
                        },
                        RnnMode::RnnTanh | RnnMode::RnnRelu => DirSaved {
                            h_prev,
                            c_prev: None,
                            a: next(),
                            b: None,
                        },
                    }
                })
                .collect();
            LayerSaved { input, mask, dirs }
        })
        .collect()
}

/// Unscaled canonical weights of one pseudo-layer.
struct Weights<B: Backend> {
    w_ih: Option<Tensor<B, 2>>,
    w_hh: Tensor<B, 2>,
    w_hr: Option<Tensor<B, 2>>,
}

/// Gradients of one pseudo-layer.
struct DirGrads<B: Backend> {
    /// Gradient of the layer input, `[T, B, in]`.
    dx: Tensor<B, 3>,
    dh0: Tensor<B, 2>,
    dc0: Option<Tensor<B, 2>>,
    /// Per [`ParamKind`], flattened, for the kinds the layout has.
    dw: Vec<(ParamKind, Tensor<B, 1>)>,
}

/// `1 - t²`.
fn one_minus_sq<B: Backend>(t: Tensor<B, 2>) -> Tensor<B, 2> {
    t.clone().mul(t).neg().add_scalar(1.0)
}

/// `t (1 - t)`: the derivative of the logistic function at its output.
fn logistic_grad<B: Backend>(t: Tensor<B, 2>) -> Tensor<B, 2> {
    t.clone().mul(t.neg().add_scalar(1.0))
}

#[allow(clippy::too_many_arguments)]
fn backward_dir<B: Backend>(
    spec: &RnnSpec,
    x: &Tensor<B, 3>,
    saved: DirSaved<B>,
    w: &Weights<B>,
    dy: Tensor<B, 3>,
    dh_n: Tensor<B, 2>,
    dc_n: Option<Tensor<B, 2>>,
    masks: &[Option<Tensor<B, 2>>],
    reverse: bool,
) -> DirGrads<B> {
    let [t_len, batch, in_size] = x.dims();
    let h = spec.d_hidden;
    let p = spec.d_state();
    let g = spec.mode.num_gates();
    let step = |t: &Tensor<B, 3>, i: usize| -> Tensor<B, 2> {
        let f = t.dims()[2];
        t.clone().narrow(0, i, 1).reshape([batch, f])
    };
    let mut dh = dh_n;
    let mut dc = dc_n;
    let mut d_pre = Vec::with_capacity(t_len); // grads of the input projection, [B, G*H]
    let mut d_rec = Vec::with_capacity(t_len); // GRU: grads of h W_hh^T + b_hh
    let mut d_proj = Vec::new(); // LSTM projection: grads of h' before W_hr, per step
                                 // Backward runs against the forward's processing order.
    let order: Vec<usize> = if reverse {
        (0..t_len).collect()
    } else {
        (0..t_len).rev().collect()
    };
    for t in order {
        let m = &masks[t];
        let total = step(&dy, t) + dh.clone();
        let (dh_new, dh_keep) = match m {
            Some(m) => (
                total * m.clone(),
                Some(dh.clone() * m.clone().neg().add_scalar(1.0)),
            ),
            None => (total, None),
        };
        let a = step(&saved.a, t);
        let h_prev = step(&saved.h_prev, t);
        let (da, dr, dh_direct, dc_prev) = match spec.mode {
            RnnMode::Lstm => {
                let gate = |k: usize| a.clone().narrow(1, k * h, h);
                let (i, f, gg, o) = (gate(0), gate(1), gate(2), gate(3));
                let tanh_c = step(saved.b.as_ref().expect("tanh(c)"), t);
                let c_prev = step(saved.c_prev.as_ref().expect("c_prev"), t);
                let dm = match &w.w_hr {
                    Some(w_hr) => {
                        d_proj.push(dh_new.clone());
                        dh_new.matmul(w_hr.clone())
                    }
                    None => dh_new,
                };
                let dc_carry = dc.clone().expect("LSTM carries dc");
                let (dc_new, dc_keep) = match m {
                    Some(m) => (
                        dc_carry.clone() * m.clone(),
                        Some(dc_carry * m.clone().neg().add_scalar(1.0)),
                    ),
                    None => (dc_carry, None),
                };
                let d_o = dm.clone() * tanh_c.clone();
                let dct = dc_new + dm * o.clone() * one_minus_sq(tanh_c);
                let da = Tensor::cat(
                    vec![
                        dct.clone() * gg.clone() * logistic_grad(i.clone()),
                        dct.clone() * c_prev * logistic_grad(f.clone()),
                        dct.clone() * i * one_minus_sq(gg),
                        d_o * logistic_grad(o),
                    ],
                    1,
                );
                let dc_prev = match dc_keep {
                    Some(k) => dct * f + k,
                    None => dct * f,
                };
                (da, None, None, Some(dc_prev))
            }
            RnnMode::Gru => {
                let gate = |k: usize| a.clone().narrow(1, k * h, h);
                let (r, z, n) = (gate(0), gate(1), gate(2));
                let hr_n = step(saved.b.as_ref().expect("hr_n"), t);
                let dn = dh_new.clone() * z.clone().neg().add_scalar(1.0);
                let dz = dh_new.clone() * (h_prev.clone() - n.clone());
                let da_n = dn * one_minus_sq(n);
                let da_r = da_n.clone() * hr_n * logistic_grad(r.clone());
                let da_z = dz * logistic_grad(z.clone());
                let dhr_n = da_n.clone() * r;
                let da = Tensor::cat(vec![da_r.clone(), da_z.clone(), da_n], 1);
                let dr = Tensor::cat(vec![da_r, da_z, dhr_n], 1);
                (da, Some(dr), Some(dh_new * z), None)
            }
            RnnMode::RnnTanh => (dh_new * one_minus_sq(a), None, None, None),
            RnnMode::RnnRelu => {
                let positive = a.clone().greater_elem(0.0);
                let d = a.zeros_like().mask_fill(positive, 1.0);
                (dh_new * d, None, None, None)
            }
        };
        let d_recurrent = dr.clone().unwrap_or_else(|| da.clone());
        let mut dh_prev = d_recurrent.clone().matmul(w.w_hh.clone());
        if let Some(direct) = dh_direct {
            dh_prev = dh_prev + direct;
        }
        if let Some(keep) = dh_keep {
            dh_prev = dh_prev + keep;
        }
        dh = dh_prev;
        dc = dc_prev;
        d_pre.push(da);
        d_rec.push(d_recurrent);
    }
    if !reverse {
        d_pre.reverse();
        d_rec.reverse();
        d_proj.reverse();
    }
    // Weight and input gradients: one GEMM each over all steps.
    let rows = t_len * batch;
    let d_pre: Tensor<B, 2> = Tensor::cat(d_pre, 0); // [T*B, G*H], time order
    let d_rec: Tensor<B, 2> = Tensor::cat(d_rec, 0);
    let x2 = x.clone().reshape([rows, in_size]);
    let h_prev2 = saved.h_prev.clone().reshape([rows, p]);
    let mut dw = Vec::new();
    let dx = match &w.w_ih {
        Some(w_ih) => {
            dw.push((
                ParamKind::WeightIh,
                d_pre
                    .clone()
                    .transpose()
                    .matmul(x2)
                    .reshape([g * h * in_size]),
            ));
            d_pre.clone().matmul(w_ih.clone())
        }
        // Skip input: x entered every gate block.
        None => d_pre
            .clone()
            .reshape([rows, g, h])
            .sum_dim(1)
            .reshape([rows, h]),
    };
    dw.push((
        ParamKind::WeightHh,
        d_rec
            .clone()
            .transpose()
            .matmul(h_prev2)
            .reshape([g * h * p]),
    ));
    if spec.bias {
        if w.w_ih.is_some() {
            dw.push((ParamKind::BiasIh, d_pre.sum_dim(0).reshape([g * h])));
        }
        dw.push((ParamKind::BiasHh, d_rec.sum_dim(0).reshape([g * h])));
    }
    if w.w_hr.is_some() {
        // h' = m W_hr^T with m = o ∘ tanh(c'): dW_hr = Σ_t dh'_t^T m_t.
        let a = saved.a.reshape([rows, g * h]);
        let o = a.narrow(1, 3 * h, h);
        let m = o * saved.b.expect("tanh(c)").reshape([rows, h]);
        let d_proj: Tensor<B, 2> = Tensor::cat(d_proj, 0);
        dw.push((
            ParamKind::WeightHr,
            d_proj.transpose().matmul(m).reshape([p * h]),
        ));
    }
    DirGrads {
        dx: dx.reshape([t_len, batch, in_size]),
        dh0: dh,
        dc0: dc,
        dw,
    }
}

/// The default body of `fused_rnn_backward`.
pub(crate) fn backward<B: Backend>(
    desc: &RnnDescriptor,
    inputs: RnnInputs<B>,
    output: RnnOutput<B>,
    reserve: RnnReserve<B>,
    grads: RnnOutputGrads<B>,
) -> RnnGrads<B> {
    let spec = &desc.spec;
    let layout = RnnLayout::new(*spec);
    let seq_major = |t: Tensor<B, 3>| {
        if desc.batch_first {
            t.swap_dims(0, 1)
        } else {
            t
        }
    };
    let x = seq_major(float(inputs.x));
    let (device, dtype) = (x.device(), x.dtype());
    let flat: Tensor<B, 1> = float(inputs.weights);
    let y: Tensor<B, 3> = seq_major(float(output.y));
    let (batch, p, h) = (desc.batch_size, spec.d_state(), spec.d_hidden);
    let nd = spec.num_directions();
    let mut d_out = grads
        .dy
        .map(|t| seq_major(float(t)))
        .unwrap_or_else(|| y.zeros_like());
    let dh_n: Option<Tensor<B, 3>> = grads.dh_n.map(float);
    let dc_n: Option<Tensor<B, 3>> = grads.dc_n.map(float);
    let state_grad = |g: &Option<Tensor<B, 3>>, idx: usize, size: usize| match g {
        Some(g) => g.clone().narrow(0, idx, 1).reshape([batch, size]),
        None => Tensor::zeros([batch, size], (&device, dtype)),
    };
    let masks = step_masks::<B>(desc, &device, dtype);
    let saved = parse_reserve(desc, reserve);

    let mut dw_by_cell: Vec<Vec<(ParamKind, Tensor<B, 1>)>> =
        (0..spec.num_pseudo_layers()).map(|_| Vec::new()).collect();
    let mut dh0 = vec![None; spec.num_pseudo_layers()];
    let mut dc0 = vec![None; spec.num_pseudo_layers()];
    let mut layers: Vec<LayerSaved<B>> = saved;
    for layer in (0..spec.num_layers).rev() {
        let LayerSaved { input, mask, dirs } = layers.pop().expect("one entry per layer");
        let layer_in = input.unwrap_or_else(|| x.clone());
        let mut d_in: Option<Tensor<B, 3>> = None;
        for (direction, dir_saved) in dirs.into_iter().enumerate() {
            let idx = layer * nd + direction;
            let w = Weights {
                w_ih: weight(&flat, &layout, layer, direction, ParamKind::WeightIh),
                w_hh: weight(&flat, &layout, layer, direction, ParamKind::WeightHh).expect("W_hh"),
                w_hr: weight(&flat, &layout, layer, direction, ParamKind::WeightHr),
            };
            let g = backward_dir(
                spec,
                &layer_in,
                dir_saved,
                &w,
                d_out.clone().narrow(2, direction * p, p),
                state_grad(&dh_n, idx, p),
                (spec.mode == RnnMode::Lstm).then(|| state_grad(&dc_n, idx, h)),
                &masks,
                direction == 1,
            );
            d_in = Some(match d_in {
                Some(acc) => acc + g.dx,
                None => g.dx,
            });
            dh0[idx] = Some(g.dh0);
            dc0[idx] = g.dc0;
            dw_by_cell[idx] = g.dw;
        }
        let d_in = d_in.expect("at least one direction");
        d_out = match mask {
            Some(mask) => d_in * mask,
            None => d_in,
        };
    }
    // Assemble dW in the canonical flat order.
    let mut parts = Vec::with_capacity(layout.entries().len());
    for e in layout.entries() {
        let cell = &mut dw_by_cell[e.layer * nd + e.direction];
        let pos = cell
            .iter()
            .position(|(k, _)| *k == e.kind)
            .expect("a gradient for every tensor of the layout");
        parts.push(cell.swap_remove(pos).1);
    }
    let dx = if desc.batch_first {
        d_out.swap_dims(0, 1)
    } else {
        d_out
    };
    let stack = |v: Vec<Option<Tensor<B, 2>>>| -> Tensor<B, 3> {
        Tensor::stack(
            v.into_iter()
                .map(|t| t.expect("every pseudo-layer"))
                .collect(),
            0,
        )
    };
    RnnGrads {
        dx: prim(dx),
        dh0: prim(stack(dh0)),
        dc0: (spec.mode == RnnMode::Lstm).then(|| prim(stack(dc0))),
        dweights: prim(Tensor::cat(parts, 0)),
    }
}
