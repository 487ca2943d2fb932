//! The backward pass (BPTT): per layer, from the top, one launch of
//! [`kernel::backward_step`] per step for both directions (two with an LSTM projection),
//! then the weight gradients, the input gradient and the layer below's output gradient as
//! matmuls over every step.

use burn::backend::ops::FloatTensorOps;
use burn::backend::{Shape, Slice, TensorMetadata};
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::CubeBackend;

use super::forward::{input_weights, matmul, transpose, with_shape, Inputs};
use super::kernel::{self, RecurrentLaunch};
use super::plan::{
    dropout_mask, empty, lengths, owned_copy, unused, zero_padded_rows, Launch, Plan,
};
use crate::layout::ParamKind;
use burn_fused_rnn_core::GradsWanted;

/// Output gradients, packed `F32`; `None` is zero.
pub(crate) struct OutputGrads {
    /// `[T·B, D·P]` rows.
    pub(crate) dy: Option<CubeTensor>,
    pub(crate) dh_n: Option<CubeTensor>,
    pub(crate) dc_n: Option<CubeTensor>,
}

/// Input gradients, packed `F32`; `dx` and `dweights` are `None` when not wanted (Note
/// [Cube gradients not wanted]).
pub(crate) struct Grads {
    /// `[T·B, I]` rows.
    pub(crate) dx: Option<CubeTensor>,
    pub(crate) dh0: CubeTensor,
    pub(crate) dc0: Option<CubeTensor>,
    pub(crate) dweights: Option<CubeTensor>,
}

/// What the training forward kept for one layer (Note [Cube reserve] in `super`).
struct LayerReserve {
    /// The layer's input after dropout (`None` for layer 0: that is `x`).
    input: Option<CubeTensor>,
    gates: CubeTensor,
    h_prev: CubeTensor,
}

/// What the backward scan of one layer writes, `[T·B, ·]` rows, both directions side by
/// side.
struct ScanGrads {
    /// The gates' pre-activation gradients, `[T·B, D·G·H]`.
    dg: CubeTensor,
    /// GRU: the gradient of `R_n h + b_Rn`, `[T·B, D·H]`.
    dn: CubeTensor,
    /// LSTM projection: the gradient of each step's output, `[T·B, D·P]`.
    dproj: CubeTensor,
    /// LSTM projection: `o ∘ tanh(c')`, `[T·B, D·H]`.
    m: CubeTensor,
}

/// The state gradients carried through the scans, updated in place; they end as `dh0`
/// and `dc0`.
struct Carry {
    dh: CubeTensor,
    dc: Option<CubeTensor>,
}

/// The backward scan of `layer`: `T + 1` launches of [`kernel::backward_step`] (Note
/// [Backward step kernel] in `super`), plus one of [`kernel::backward_cell`] per step with
/// an LSTM projection.
fn scan(
    plan: &Plan<'_>,
    layer: usize,
    w: &CubeTensor,
    lens: &CubeTensor,
    saved: &LayerReserve,
    d_out: &CubeTensor,
    carry: &Carry,
) -> ScanGrads {
    let (h, p, nd, rows) = (plan.h, plan.p, plan.nd, plan.rows());
    let gru = plan.mode == kernel::GRU;
    let proj = plan.spec.proj_size.is_some();
    let optional = |present: bool, width: usize| {
        if present {
            empty(w, &[rows, width])
        } else {
            unused(w)
        }
    };
    let grads = ScanGrads {
        dg: empty(w, &[rows, nd * plan.gh()]),
        dn: optional(gru, nd * h),
        dproj: optional(proj, nd * p),
        m: optional(proj, nd * h),
    };
    let dc = carry.dc.clone().unwrap_or_else(|| unused(w));
    let offsets = |kind| plan.offsets(layer, kind).unwrap_or((0, 0));
    let (w_hh0, w_hh1) = offsets(ParamKind::WeightHh);
    let (w_hr0, w_hr1) = offsets(ParamKind::WeightHr);
    let recurrent = || RecurrentLaunch::new(w_hh0, w_hh1, w_hr0, w_hr1);
    let tiles = plan.tiles(w, 1, p);
    let cell_tiles = plan.tiles(w, 1, h);
    let (count, dim) = plan.step_launch(tiles, p);
    let client = &w.client;
    for s in 0..=plan.t {
        kernel::backward_step::launch::<f32>(
            client,
            count.clone(),
            dim,
            w.clone().into_tensor_arg(),
            lens.clone().into_tensor_arg(),
            saved.gates.clone().into_tensor_arg(),
            saved.h_prev.clone().into_tensor_arg(),
            d_out.clone().into_tensor_arg(),
            grads.dg.clone().into_tensor_arg(),
            grads.dn.clone().into_tensor_arg(),
            carry.dh.clone().into_tensor_arg(),
            dc.clone().into_tensor_arg(),
            grads.dproj.clone().into_tensor_arg(),
            plan.scan(layer, s),
            recurrent(),
            plan.mode,
            tiles.units,
            tiles.rows,
            proj,
        );
        if proj && s < plan.t {
            let (count, dim) = plan.step_launch(cell_tiles, h);
            kernel::backward_cell::launch::<f32>(
                client,
                count,
                dim,
                w.clone().into_tensor_arg(),
                lens.clone().into_tensor_arg(),
                saved.gates.clone().into_tensor_arg(),
                grads.dproj.clone().into_tensor_arg(),
                grads.dg.clone().into_tensor_arg(),
                dc.clone().into_tensor_arg(),
                grads.m.clone().into_tensor_arg(),
                plan.scan(layer, s),
                recurrent(),
                cell_tiles.units,
                cell_tiles.rows,
            );
        }
    }
    grads
}

/// `t` narrowed to `start..start + len` along `dim` (a view).
fn narrow(t: &CubeTensor, dim: usize, start: usize, len: usize) -> CubeTensor {
    let shape = t.shape();
    let slices: Vec<Slice> = (0..shape.num_dims())
        .map(|i| {
            if i == dim {
                Slice::from(start..start + len)
            } else {
                Slice::from(0..shape[i])
            }
        })
        .collect();
    CubeBackend::float_slice(t.clone(), &slices)
}

/// `t` with a new shape of the same size.
fn reshape(t: CubeTensor, dims: &[usize]) -> CubeTensor {
    CubeBackend::float_reshape(t, Shape::from(dims.to_vec()))
}

/// The column sums of `t` (`[rows, cols]`), `[cols]`.
fn column_sums(t: CubeTensor) -> CubeTensor {
    let cols = t.shape()[1];
    reshape(CubeBackend::float_sum_dim(t, 0), &[cols])
}

/// `dW = d^T a` over every row: `[cols_d, cols_a]`.
fn weight_grad(d: CubeTensor, a: CubeTensor) -> CubeTensor {
    matmul(transpose(d), a)
}

/// The weight gradients of `layer` (into `parts`, by pseudo-layer and kind, when
/// `wanted.weights`) and the gradient of its input (`None` at layer 0 without
/// `wanted.x`), from what its scan wrote: matmuls over every step (Note [Cube gradients
/// not wanted] in `super`). `input` gives the layer's input, read only for `dW_ih`.
#[allow(clippy::too_many_arguments)]
fn weight_grads(
    plan: &Plan<'_>,
    layer: usize,
    w: &CubeTensor,
    input: impl FnOnce() -> CubeTensor,
    h_prev: &CubeTensor,
    grads: &ScanGrads,
    parts: &mut [Vec<(ParamKind, CubeTensor)>],
    wanted: GradsWanted,
) -> Option<CubeTensor> {
    let spec = &plan.spec;
    let (h, p, nd, g, rows, gh) = (plan.h, plan.p, plan.nd, plan.g, plan.rows(), plan.gh());
    let in_size = spec.layer_input_size(layer);
    let skip = layer == 0 && spec.skip_input;
    let dg = &grads.dg;
    if wanted.weights {
        let bias_sums = column_sums(dg.clone());
        if !skip {
            // Both directions at once: dW_ih = dG^T input.
            let dw_ih = weight_grad(dg.clone(), input());
            for d in 0..nd {
                parts[layer * nd + d].push((
                    ParamKind::WeightIh,
                    reshape(narrow(&dw_ih, 0, d * gh, gh), &[gh * in_size]),
                ));
            }
        }
        for d in 0..nd {
            let part = &mut parts[layer * nd + d];
            let h_prev = narrow(h_prev, 0, d * rows, rows);
            let dg_d = narrow(dg, 1, d * gh, gh);
            let sums = narrow(&bias_sums, 0, d * gh, gh);
            let (dw_hh, db_hh) = if plan.mode == kernel::GRU {
                // The recurrent operand's n block is the gradient of R_n h + b_Rn.
                let dn_d = narrow(&grads.dn, 1, d * h, h);
                let rz = narrow(&dg_d, 1, 0, 2 * h);
                let dw = CubeBackend::float_cat(
                    vec![
                        weight_grad(rz, h_prev.clone()),
                        weight_grad(dn_d.clone(), h_prev),
                    ],
                    0,
                );
                let db =
                    CubeBackend::float_cat(vec![narrow(&sums, 0, 0, 2 * h), column_sums(dn_d)], 0);
                (dw, db)
            } else {
                (weight_grad(dg_d, h_prev), sums.clone())
            };
            part.push((ParamKind::WeightHh, reshape(dw_hh, &[gh * p])));
            if spec.bias {
                if !skip {
                    part.push((ParamKind::BiasIh, sums));
                }
                part.push((ParamKind::BiasHh, db_hh));
            }
            if spec.proj_size.is_some() {
                // h' = m W_hr^T: dW_hr = dh'^T m over every step (both zero at padded rows).
                let dp = narrow(&grads.dproj, 1, d * p, p);
                let m_d = narrow(&grads.m, 1, d * h, h);
                part.push((ParamKind::WeightHr, reshape(weight_grad(dp, m_d), &[p * h])));
            }
        }
    }
    if layer == 0 && !wanted.x {
        return None;
    }
    Some(if skip {
        // Skip input: x entered every gate block of both directions.
        let per_block = reshape(dg.clone(), &[rows, nd * g, h]);
        into_contiguous(reshape(
            CubeBackend::float_sum_dim(per_block, 1),
            &[rows, h],
        ))
    } else {
        // Both directions at once: d_input = dG [W_ih0; W_ih1].
        matmul(dg.clone(), input_weights(plan, w, layer))
    })
}

/// The backward pass from the reserve of [`super::forward::forward`].
pub(crate) fn backward(
    plan: &Plan<'_>,
    inputs: Inputs,
    reserve: Vec<CubeTensor>,
    grads: OutputGrads,
    wanted: GradsWanted,
) -> Grads {
    let spec = &plan.spec;
    let (batch, h, p, nd, rows) = (plan.b, plan.h, plan.p, plan.nd, plan.rows());
    let layers = spec.num_layers;
    let x = &inputs.x;
    let w = &inputs.w;
    let lens = lengths(plan, x);

    let mut kept = reserve.into_iter();
    let mut per_layer: Vec<LayerReserve> = (0..layers)
        .map(|layer| LayerReserve {
            input: (layer > 0).then(|| kept.next().expect("checked reserve")),
            gates: kept.next().expect("checked reserve"),
            h_prev: kept.next().expect("checked reserve"),
        })
        .collect();
    let carry = Carry {
        dh: owned_copy(grads.dh_n, x, &[layers * nd, batch, p]),
        dc: (plan.mode == kernel::LSTM)
            .then(|| owned_copy(grads.dc_n, x, &[layers * nd, batch, h])),
    };
    let mut d_out = grads
        .dy
        .unwrap_or_else(|| super::plan::zeros(x, &[rows, nd * p]));
    let mut parts: Vec<Vec<(ParamKind, CubeTensor)>> =
        (0..spec.num_pseudo_layers()).map(|_| Vec::new()).collect();
    let mut dx = None;
    for layer in (0..layers).rev() {
        let saved = per_layer.pop().expect("one entry per layer");
        let scanned = scan(plan, layer, w, &lens, &saved, &d_out, &carry);
        let input = || match saved.input {
            Some(input) => input,
            // Layer 0 reads the caller's x, whose padded rows may hold anything: zero
            // them before dW_ih = dG^T x (Note [Padding never leaks] in
            // `crate::reference`).
            None if plan.padded && !spec.skip_input => {
                zero_padded_rows(plan, x, &lens, spec.d_input)
            }
            None => x.clone(),
        };
        let d_in = weight_grads(
            plan,
            layer,
            w,
            input,
            &saved.h_prev,
            &scanned,
            &mut parts,
            wanted,
        );
        let Some(d_in) = d_in else {
            break; // layer 0, x's gradient not wanted
        };
        if layer == 0 {
            dx = Some(d_in);
        } else if plan.desc.dropout.probability > 0.0 {
            // The layer's input was the output below times the mask.
            let mask = dropout_mask(plan, layer, x);
            d_out = into_contiguous(CubeBackend::float_mul(d_in, mask));
        } else {
            d_out = d_in;
        }
    }

    // dweights in the canonical flat order.
    let dweights = wanted.weights.then(|| {
        let mut flat = Vec::with_capacity(plan.layout.entries().len());
        for e in plan.layout.entries() {
            let cell = &mut parts[e.layer * nd + e.direction];
            let pos = cell
                .iter()
                .position(|(k, _)| *k == e.kind)
                .expect("a gradient for every tensor of the layout");
            flat.push(cell.swap_remove(pos).1);
        }
        into_contiguous(CubeBackend::float_cat(flat, 0))
    });
    Grads {
        dx: dx.map(|dx| with_shape(dx, &[rows, spec.d_input])),
        dh0: carry.dh,
        dc0: carry.dc,
        dweights,
    }
}
