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
use burn::tensor::{Tensor, TensorMetadata};

use super::{cast, cast_inputs, cast_output, compute_dtype, float, par, prim, step_masks, weight};
use crate::backend::{RnnGrads, RnnInputs, RnnOutput, RnnOutputGrads, RnnReserve};
use crate::config::{RnnMode, RnnSpec};
use crate::descriptor::RnnDescriptor;
use crate::layout::{ParamKind, RnnLayout};

/// What the forward saved for one layer and direction, `[T, B, *]`, time order.
struct DirSaved<B: Backend> {
    h_prev: Tensor<B, 3>,
    c_prev: Option<Tensor<B, 3>>,
    /// LSTM `i, f, g, o, tanh(c')`; GRU `r, z, n, R_n h + b_Rn`; RNN `h'`.
    acts: Vec<Tensor<B, 3>>,
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
                    let c_prev = (spec.mode == RnnMode::Lstm).then(&mut next);
                    let count = match spec.mode {
                        RnnMode::Lstm => 5,
                        RnnMode::Gru => 4,
                        RnnMode::RnnTanh | RnnMode::RnnRelu => 1,
                    };
                    let acts = (0..count).map(|_| next()).collect();
                    DirSaved {
                        h_prev,
                        c_prev,
                        acts,
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

/// `dW = d^T a`, flattened row-major (`[rows_d, rows_a]` → `[cols_d * cols_a]`), computed as
/// `(a^T d)^T`: a transposed *right* operand is much cheaper than a transposed left one for
/// NdArray's GEMM.
fn weight_grad<B: Backend>(d: Tensor<B, 2>, a: Tensor<B, 2>) -> Tensor<B, 1> {
    let [_, n] = d.dims();
    let [_, k] = a.dims();
    a.transpose().matmul(d).transpose().reshape([n * k])
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
    parallel: bool,
) -> DirGrads<B> {
    let [t_len, batch, in_size] = x.dims();
    let h = spec.d_hidden;
    let p = spec.d_state();
    let g = spec.mode.num_gates();
    let step = |t: &Tensor<B, 3>, i: usize| -> Tensor<B, 2> {
        let f = t.dims()[2];
        t.clone().narrow(0, i, 1).reshape([batch, f])
    };
    // Every factor that depends only on saved activations is computed once over all steps
    // ([T, B, *], big vectorised ops); the time loop keeps the few ops that carry the
    // gradient from step to step.
    let act = |k: usize| saved.acts[k].clone();
    // Fresh operands go on the left (Note [Operand order] in `super::cell`).
    let sig_grad = |t: Tensor<B, 3>| t.clone().neg().add_scalar(1.0).mul(t);
    let tanh_grad = |t: Tensor<B, 3>| t.clone().mul(t).neg().add_scalar(1.0);
    // LSTM: da_{i,f,g} = dc' ∘ A3, da_o = dm ∘ Ao, dc' = dc + dm ∘ Oc, dc_prev = dc' ∘ f.
    // GRU: da_n = dh' ∘ Pn, da_z = dh' ∘ Pz, da_r = da_n ∘ Pr, dhr_n = da_n ∘ r,
    //      dh_prev = [da_r, da_z, dhr_n] W_hh + dh' ∘ z.
    // RNN: da = dh' ∘ act'(h').
    let (f1, f2, f3, f4, f5) = match spec.mode {
        RnnMode::Lstm => {
            let (i, f, gg, o, tanh_c) = (act(0), act(1), act(2), act(3), act(4));
            let c_prev = saved.c_prev.clone().expect("c_prev");
            let a3 = Tensor::cat(
                vec![
                    sig_grad(i.clone()) * gg.clone(),
                    sig_grad(f.clone()) * c_prev,
                    tanh_grad(gg) * i,
                ],
                2,
            );
            let ao = sig_grad(o.clone()) * tanh_c.clone();
            let oc = tanh_grad(tanh_c) * o;
            (Some(a3), Some(ao), Some(oc), Some(f), None)
        }
        RnnMode::Gru => {
            let (r, z, n, hr_n) = (act(0), act(1), act(2), act(3));
            let pn = z.clone().neg().add_scalar(1.0) * tanh_grad(n.clone());
            let pz = (saved.h_prev.clone() - n) * sig_grad(z.clone());
            let pr = sig_grad(r.clone()) * hr_n;
            (Some(pn), Some(pz), Some(pr), Some(r), Some(z))
        }
        RnnMode::RnnTanh => (Some(tanh_grad(act(0))), None, None, None, None),
        RnnMode::RnnRelu => {
            let positive = act(0).greater_elem(0.0);
            (
                Some(act(0).zeros_like().mask_fill(positive, 1.0)),
                None,
                None,
                None,
                None,
            )
        }
    };
    let at = |t3: &Option<Tensor<B, 3>>, t: usize| step(t3.as_ref().expect("factor"), t);

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
                Some(m.clone().neg().add_scalar(1.0) * dh.clone()),
            ),
            None => (total, None),
        };
        let (da, dr, dh_direct, dc_prev) = match spec.mode {
            RnnMode::Lstm => {
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
                        Some(m.clone().neg().add_scalar(1.0) * dc_carry),
                    ),
                    None => (dc_carry, None),
                };
                let dct = dm.clone() * at(&f3, t) + dc_new;
                let da = Tensor::cat(
                    vec![dct.clone().repeat_dim(1, 3) * at(&f1, t), dm * at(&f2, t)],
                    1,
                );
                let dc_prev = dct * at(&f4, t);
                let dc_prev = match dc_keep {
                    Some(k) => dc_prev + k,
                    None => dc_prev,
                };
                (da, None, None, Some(dc_prev))
            }
            RnnMode::Gru => {
                let da_n = dh_new.clone() * at(&f1, t);
                let da_z = dh_new.clone() * at(&f2, t);
                let da_r = da_n.clone() * at(&f3, t);
                let dhr_n = da_n.clone() * at(&f4, t);
                let da = Tensor::cat(vec![da_r.clone(), da_z.clone(), da_n], 1);
                let dr = Tensor::cat(vec![da_r, da_z, dhr_n], 1);
                (da, Some(dr), Some(dh_new * at(&f5, t)), None)
            }
            RnnMode::RnnTanh | RnnMode::RnnRelu => (dh_new * at(&f1, t), None, None, None),
        };
        let d_recurrent = dr.clone().unwrap_or_else(|| da.clone());
        // One recurrent GEMM per step; two row halves on two threads when `parallel`.
        let half = if parallel { batch / 2 } else { 0 };
        let mut dh_prev = if half > 0 {
            let (top, bottom) = par::join(
                true,
                || {
                    d_recurrent
                        .clone()
                        .narrow(0, 0, half)
                        .matmul(w.w_hh.clone())
                },
                || {
                    d_recurrent
                        .clone()
                        .narrow(0, half, batch - half)
                        .matmul(w.w_hh.clone())
                },
            );
            Tensor::cat(vec![top, bottom], 0)
        } else {
            d_recurrent.clone().matmul(w.w_hh.clone())
        };
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
    // The three big GEMMs, balanced over two threads when `parallel`: dW_ih and the top
    // half of dX on one, dW_hh and the bottom half of dX on the other.
    let half = if parallel { rows / 2 } else { rows };
    let dx_rows = |start: usize, len: usize| {
        w.w_ih
            .as_ref()
            .filter(|_| len > 0)
            .map(|w_ih| d_pre.clone().narrow(0, start, len).matmul(w_ih.clone()))
    };
    let ((dw_ih, dx_top), (dw_hh, dx_bottom)) = par::join(
        parallel,
        || {
            let dw_ih = w
                .w_ih
                .as_ref()
                .map(|_| weight_grad(d_pre.clone(), x2.clone()));
            (dw_ih, dx_rows(0, half))
        },
        || {
            let dw_hh = weight_grad(d_rec.clone(), h_prev2);
            (dw_hh, dx_rows(half, rows - half))
        },
    );
    let mut dw = Vec::new();
    let dx = match (dx_top, dx_bottom) {
        (Some(top), Some(bottom)) => Tensor::cat(vec![top, bottom], 0),
        (Some(all), None) | (None, Some(all)) => all,
        // Skip input: x entered every gate block.
        _ => d_pre
            .clone()
            .reshape([rows, g, h])
            .sum_dim(1)
            .reshape([rows, h]),
    };
    if let Some(dw_ih) = dw_ih {
        dw.push((ParamKind::WeightIh, dw_ih));
    }
    dw.push((ParamKind::WeightHh, dw_hh));
    if spec.bias {
        if w.w_ih.is_some() {
            dw.push((ParamKind::BiasIh, d_pre.sum_dim(0).reshape([g * h])));
        }
        dw.push((ParamKind::BiasHh, d_rec.sum_dim(0).reshape([g * h])));
    }
    if w.w_hr.is_some() {
        // h' = m W_hr^T with m = o ∘ tanh(c'): dW_hr = Σ_t dh'_t^T m_t.
        let m = (saved.acts[3].clone() * saved.acts[4].clone()).reshape([rows, h]);
        let d_proj: Tensor<B, 2> = Tensor::cat(d_proj, 0);
        dw.push((ParamKind::WeightHr, weight_grad(d_proj, m)));
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
    parallel: bool,
) -> RnnGrads<B> {
    // Note [Half precision] in `super`: compute in F32, hand back the input's dtype.
    let dtype = inputs.x.dtype();
    let up = compute_dtype(dtype);
    if up == dtype {
        return backward_in::<B>(desc, inputs, output, reserve, grads, parallel);
    }
    let grads = RnnOutputGrads {
        dy: grads.dy.map(|t| cast::<B>(t, up)),
        dh_n: grads.dh_n.map(|t| cast::<B>(t, up)),
        dc_n: grads.dc_n.map(|t| cast::<B>(t, up)),
    };
    let out = backward_in::<B>(
        desc,
        cast_inputs(inputs, up),
        cast_output(output, up),
        reserve,
        grads,
        parallel,
    );
    RnnGrads {
        dx: cast::<B>(out.dx, dtype),
        dh0: cast::<B>(out.dh0, dtype),
        dc0: out.dc0.map(|t| cast::<B>(t, dtype)),
        dweights: cast::<B>(out.dweights, dtype),
    }
}

fn backward_in<B: Backend>(
    desc: &RnnDescriptor,
    inputs: RnnInputs<B>,
    output: RnnOutput<B>,
    reserve: RnnReserve<B>,
    grads: RnnOutputGrads<B>,
    parallel: bool,
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
        // Both directions on two threads, or each direction's GEMMs on two threads
        // (Note [Reference threads] in `super::par`).
        let inner_parallel = parallel && nd == 1;
        let direction = |direction: usize, dir_saved: DirSaved<B>| {
            let idx = layer * nd + direction;
            let w = Weights {
                w_ih: weight(&flat, &layout, layer, direction, ParamKind::WeightIh),
                w_hh: weight(&flat, &layout, layer, direction, ParamKind::WeightHh).expect("W_hh"),
                w_hr: weight(&flat, &layout, layer, direction, ParamKind::WeightHr),
            };
            backward_dir(
                spec,
                &layer_in,
                dir_saved,
                &w,
                d_out.clone().narrow(2, direction * p, p),
                state_grad(&dh_n, idx, p),
                (spec.mode == RnnMode::Lstm).then(|| state_grad(&dc_n, idx, h)),
                &masks,
                direction == 1,
                inner_parallel,
            )
        };
        let mut dirs = dirs.into_iter();
        let forward_saved = dirs.next().expect("forward direction");
        let results = match dirs.next() {
            Some(reverse_saved) => {
                let (f, r) = par::join(
                    parallel,
                    || direction(0, forward_saved),
                    || direction(1, reverse_saved),
                );
                vec![f, r]
            }
            None => vec![direction(0, forward_saved)],
        };
        let mut d_in: Option<Tensor<B, 3>> = None;
        for (d, g) in results.into_iter().enumerate() {
            let idx = layer * nd + d;
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
