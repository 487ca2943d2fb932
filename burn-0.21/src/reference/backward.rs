//! BPTT: the reference backward pass.
//!
//! Reads what the training forward saved (Note [Reserve layout] in `super`) and never
//! re-runs the forward pass. Per layer and direction, the time loop computes the gradients
//! of the gates' pre-activations step by step (one recurrent GEMM per step); the weight
//! gradients and the input gradient then take one GEMM each over all steps.
//!
//! Variable lengths (Note [Variable lengths]): the forward holds the state at invalid
//! steps and outputs zero there; so at a padded step the state's gradient flows past the
//! step unchanged, and the step's own gradients are zero. No gradient flows from padding,
//! and each final state's gradient enters at the sequence's own last step. Both are
//! *selected* (Note [Padding never leaks]): values computed for padded rows may be NaN
//! (the forward saved whatever the padded input produced), and a selection drops them
//! where a multiplication by zero would not.

use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorMetadata};

use super::Padding;
use super::{reserve_shapes, weight};
use crate::descriptor::{GradsWanted, RnnDescriptor};
use crate::layout::{ParamKind, RnnLayout};
use crate::op_types::{
    cast, cast_inputs, cast_output, compute_dtype, float, prim, RnnGrads, RnnInputs, RnnOutput,
    RnnOutputGrads, RnnReserve,
};
use crate::spec::{RnnMode, RnnSpec};

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
    // A reserve made by another implementation, or for another call, is a caller's
    // mistake: say so before reading it (its tensors would be misread, or run out).
    let expected = reserve_shapes(desc);
    let got: Vec<Vec<usize>> = reserve.tensors.iter().map(|t| t.shape().to_vec()).collect();
    let fits = got.len() == expected.len() && got.iter().zip(&expected).all(|(g, e)| g == e);
    assert!(
        fits,
        "expected reserve to be the reference's training-forward reserve for this call \
         ({} tensors of shapes {expected:?}, Note [Reserve layout]), got {} tensors of shapes {got:?}",
        expected.len(),
        got.len()
    );
    let mut it = reserve.tensors.into_iter().map(float::<B, 3>);
    let mut next = || it.next().expect("checked above");
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
    padding: &Padding<B>,
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
        let total = step(&dy, t) + dh.clone();
        // Select, don't multiply (Note [Padding never leaks] in [`crate::op_types`]).
        let invalid = |width: usize| padding.step(t, width);
        let zero_padded = |v: Tensor<B, 2>| match invalid(v.dims()[1]) {
            Some(mask) => v.mask_fill(mask, 0.0),
            None => v,
        };
        let keep_padded = |new: Tensor<B, 2>, old: Tensor<B, 2>| match invalid(old.dims()[1]) {
            Some(mask) => new.mask_where(mask, old),
            None => new,
        };
        let dh_new = zero_padded(total);
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
                let dct = dm.clone() * at(&f3, t) + dc_carry.clone();
                let da = Tensor::cat(
                    vec![dct.clone().repeat_dim(1, 3) * at(&f1, t), dm * at(&f2, t)],
                    1,
                );
                let dc_prev = keep_padded(dct * at(&f4, t), dc_carry);
                (zero_padded(da), None, None, Some(dc_prev))
            }
            RnnMode::Gru => {
                let da_n = dh_new.clone() * at(&f1, t);
                let da_z = dh_new.clone() * at(&f2, t);
                let da_r = da_n.clone() * at(&f3, t);
                let dhr_n = da_n.clone() * at(&f4, t);
                let da = Tensor::cat(vec![da_r.clone(), da_z.clone(), da_n], 1);
                let dr = Tensor::cat(vec![da_r, da_z, dhr_n], 1);
                (
                    zero_padded(da),
                    Some(zero_padded(dr)),
                    Some(dh_new * at(&f5, t)),
                    None,
                )
            }
            RnnMode::RnnTanh | RnnMode::RnnRelu => {
                (zero_padded(dh_new * at(&f1, t)), None, None, None)
            }
        };
        let d_recurrent = dr.unwrap_or_else(|| da.clone());
        // One recurrent GEMM per step.
        let mut dh_prev = d_recurrent.clone().matmul(w.w_hh.clone());
        if let Some(direct) = dh_direct {
            dh_prev = dh_prev + direct;
        }
        dh = keep_padded(dh_prev, dh);
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
    let dw_ih = w
        .w_ih
        .as_ref()
        .map(|_| weight_grad(d_pre.clone(), x2.clone()));
    let dw_hh = weight_grad(d_rec.clone(), h_prev2);
    let mut dw = Vec::new();
    let dx = match &w.w_ih {
        Some(w_ih) => d_pre.clone().matmul(w_ih.clone()),
        // Skip input: x entered every gate block.
        None => d_pre
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
        // Padded rows of o ∘ tanh(c') may be NaN; their d_proj rows are zero, but NaN · 0
        // is NaN, so they are zeroed first (Note [Padding never leaks] in [`crate::op_types`]).
        let m = saved.acts[3].clone() * saved.acts[4].clone();
        let m = match padding.all(h) {
            Some(mask) => m.mask_fill(mask, 0.0),
            None => m,
        }
        .reshape([rows, h]);
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

/// Backward pass (BPTT), the default body of `fused_rnn_backward`: every input gradient
/// from the output gradients and the reserve of [`super::forward_training`].
///
/// # Panics
///
/// If `reserve` is not the reserve of the reference's training forward for `desc` (Note
/// [Reserve layout] in `super`), naming both.
pub fn backward<B: Backend>(
    desc: &RnnDescriptor,
    inputs: RnnInputs<B>,
    output: RnnOutput<B>,
    reserve: RnnReserve<B>,
    grads: RnnOutputGrads<B>,
    wanted: GradsWanted,
) -> RnnGrads<B> {
    // The reference computes every gradient, wanted or not: it is the plain statement of
    // the math, and the autodiff layer reads only the wanted ones.
    let _ = wanted;
    // Note [Half precision] in [`crate::op_types`]: compute in F32, hand back the input's dtype.
    let dtype = inputs.x.dtype();
    let up = compute_dtype(dtype);
    if up == dtype {
        return backward_in::<B>(desc, inputs, output, reserve, grads);
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
    );
    RnnGrads {
        dx: out.dx.map(|t| cast::<B>(t, dtype)),
        dh0: cast::<B>(out.dh0, dtype),
        dc0: out.dc0.map(|t| cast::<B>(t, dtype)),
        dweights: out.dweights.map(|t| cast::<B>(t, dtype)),
    }
}

fn backward_in<B: Backend>(
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
    let padding = Padding::<B>::new(desc, &device);
    let saved = parse_reserve(desc, reserve);

    let mut dw_by_cell: Vec<Vec<(ParamKind, Tensor<B, 1>)>> =
        (0..spec.num_pseudo_layers()).map(|_| Vec::new()).collect();
    let mut dh0 = vec![None; spec.num_pseudo_layers()];
    let mut dc0 = vec![None; spec.num_pseudo_layers()];
    let mut layers: Vec<LayerSaved<B>> = saved;
    for layer in (0..spec.num_layers).rev() {
        let LayerSaved { input, mask, dirs } = layers.pop().expect("one entry per layer");
        // Layer 0 reads the caller's x, whose padded rows may hold anything: zero them
        // before `dW_ih = dG^T x` reads them (Note [Padding never leaks] in [`crate::op_types`]).
        let layer_in = input.unwrap_or_else(|| match padding.all(spec.d_input) {
            Some(mask) => x.clone().mask_fill(mask, 0.0),
            None => x.clone(),
        });
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
                &padding,
                direction == 1,
            )
        };
        let results: Vec<DirGrads<B>> = dirs
            .into_iter()
            .enumerate()
            .map(|(d, saved)| direction(d, saved))
            .collect();
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
        dx: Some(prim(dx)),
        dh0: prim(stack(dh0)),
        dc0: (spec.mode == RnnMode::Lstm).then(|| prim(stack(dc0))),
        dweights: Some(prim(Tensor::cat(parts, 0))),
    }
}
