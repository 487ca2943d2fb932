//! The backward pass (BPTT): per layer, from the top, one launch of
//! [`kernel::backward_step`] per step for both directions (two with an LSTM projection),
//! then the weight gradients, the input gradient and the layer below's output gradient as
//! matmuls over every step.

use burn::tensor::Tensor;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::CubeRuntime;

use super::forward::{input_weights, matmul, prim, tensor, with_shape, Inputs};
use super::kernel::{self, RecurrentLaunch};
use super::plan::{
    dropout_mask, empty, lengths, owned_copy, unused, zero_padded_rows, CubeOps, Launch, Plan,
};
use crate::descriptor::GradsWanted;
use crate::layout::ParamKind;

/// Output gradients, packed `F32`; `None` is zero.
pub(crate) struct OutputGrads<R: CubeRuntime> {
    /// `[T·B, D·P]` rows.
    pub(crate) dy: Option<CubeTensor<R>>,
    pub(crate) dh_n: Option<CubeTensor<R>>,
    pub(crate) dc_n: Option<CubeTensor<R>>,
}

/// Input gradients, packed `F32`; `dx` and `dweights` are `None` when not wanted (Note
/// [Cube gradients not wanted]).
pub(crate) struct Grads<R: CubeRuntime> {
    /// `[T·B, I]` rows.
    pub(crate) dx: Option<CubeTensor<R>>,
    pub(crate) dh0: CubeTensor<R>,
    pub(crate) dc0: Option<CubeTensor<R>>,
    pub(crate) dweights: Option<CubeTensor<R>>,
}

/// What the training forward kept for one layer (Note [Cube reserve] in `super`).
struct LayerReserve<R: CubeRuntime> {
    /// The layer's input after dropout (`None` for layer 0: that is `x`).
    input: Option<CubeTensor<R>>,
    gates: CubeTensor<R>,
    h_prev: CubeTensor<R>,
}

/// `dW = d^T a` over every row: `[cols_d, cols_a]`.
fn weight_grad<B: CubeOps>(d: Tensor<B, 2>, a: Tensor<B, 2>) -> Tensor<B, 2> {
    d.transpose().matmul(a)
}

/// What the backward scan of one layer writes, `[T·B, ·]` rows, both directions side by
/// side.
struct ScanGrads<R: CubeRuntime> {
    /// The gates' pre-activation gradients, `[T·B, D·G·H]`.
    dg: CubeTensor<R>,
    /// GRU: the gradient of `R_n h + b_Rn`, `[T·B, D·H]`.
    dn: CubeTensor<R>,
    /// LSTM projection: the gradient of each step's output, `[T·B, D·P]`.
    dproj: CubeTensor<R>,
    /// LSTM projection: `o ∘ tanh(c')`, `[T·B, D·H]`.
    m: CubeTensor<R>,
}

/// The state gradients carried through the scans, updated in place; they end as `dh0`
/// and `dc0`.
struct Carry<R: CubeRuntime> {
    dh: CubeTensor<R>,
    dc: Option<CubeTensor<R>>,
}

/// The backward scan of `layer`: `T + 1` launches of [`kernel::backward_step`] (Note
/// [Backward step kernel] in `super`), plus one of [`kernel::backward_cell`] per step with
/// an LSTM projection.
fn scan<R: CubeRuntime>(
    plan: &Plan<'_>,
    layer: usize,
    w: &CubeTensor<R>,
    lens: &CubeTensor<R>,
    saved: &LayerReserve<R>,
    d_out: &CubeTensor<R>,
    carry: &Carry<R>,
) -> ScanGrads<R> {
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
        kernel::backward_step::launch::<f32, R>(
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
            kernel::backward_cell::launch::<f32, R>(
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

/// The weight gradients of `layer` (into `parts`, by pseudo-layer and kind, when
/// `wanted.weights`) and the gradient of its input (`None` at layer 0 without
/// `wanted.x`), from what its scan wrote: matmuls over every step. `input` is the layer's
/// input, read only for `dW_ih`.
#[allow(clippy::too_many_arguments)]
fn weight_grads<B: CubeOps>(
    plan: &Plan<'_>,
    layer: usize,
    w: &CubeTensor<B::Runtime>,
    input: impl FnOnce() -> CubeTensor<B::Runtime>,
    h_prev: &CubeTensor<B::Runtime>,
    grads: &ScanGrads<B::Runtime>,
    parts: &mut [Vec<(ParamKind, Tensor<B, 1>)>],
    wanted: GradsWanted,
) -> Option<CubeTensor<B::Runtime>> {
    let spec = &plan.spec;
    let (h, p, nd, g, rows, gh) = (plan.h, plan.p, plan.nd, plan.g, plan.rows(), plan.gh());
    let in_size = spec.layer_input_size(layer);
    let skip = layer == 0 && spec.skip_input;
    let dg: Tensor<B, 2> = tensor(grads.dg.clone());
    if wanted.weights {
        let bias_sums: Tensor<B, 1> = dg.clone().sum_dim(0).reshape([nd * gh]);
        if !skip {
            // Both directions at once: dW_ih = dG^T input.
            let dw_ih: Tensor<B, 2> = weight_grad(dg.clone(), tensor(input()));
            for d in 0..nd {
                parts[layer * nd + d].push((
                    ParamKind::WeightIh,
                    dw_ih.clone().narrow(0, d * gh, gh).reshape([gh * in_size]),
                ));
            }
        }
        for d in 0..nd {
            let part = &mut parts[layer * nd + d];
            let h_prev: Tensor<B, 2> = tensor::<B, 2>(h_prev.clone()).narrow(0, d * rows, rows);
            let dg_d = dg.clone().narrow(1, d * gh, gh);
            let sums = bias_sums.clone().narrow(0, d * gh, gh);
            let (dw_hh, db_hh) = if plan.mode == kernel::GRU {
                // The recurrent operand's n block is the gradient of R_n h + b_Rn.
                let dn_d: Tensor<B, 2> = tensor::<B, 2>(grads.dn.clone()).narrow(1, d * h, h);
                let rz = dg_d.narrow(1, 0, 2 * h);
                let dw = Tensor::cat(
                    vec![
                        weight_grad(rz, h_prev.clone()),
                        weight_grad(dn_d.clone(), h_prev),
                    ],
                    0,
                );
                let db = Tensor::cat(
                    vec![
                        sums.clone().narrow(0, 0, 2 * h),
                        dn_d.sum_dim(0).reshape([h]),
                    ],
                    0,
                );
                (dw, db)
            } else {
                (weight_grad(dg_d, h_prev), sums.clone())
            };
            part.push((ParamKind::WeightHh, dw_hh.reshape([gh * p])));
            if spec.bias {
                if !skip {
                    part.push((ParamKind::BiasIh, sums));
                }
                part.push((ParamKind::BiasHh, db_hh));
            }
            if spec.proj_size.is_some() {
                // h' = m W_hr^T: dW_hr = dh'^T m over every step (both zero at padded rows).
                let dp: Tensor<B, 2> = tensor::<B, 2>(grads.dproj.clone()).narrow(1, d * p, p);
                let m_d: Tensor<B, 2> = tensor::<B, 2>(grads.m.clone()).narrow(1, d * h, h);
                part.push((ParamKind::WeightHr, weight_grad(dp, m_d).reshape([p * h])));
            }
        }
    }
    if layer == 0 && !wanted.x {
        return None;
    }
    Some(if skip {
        // Skip input: x entered every gate block of both directions.
        prim(dg.reshape([rows, nd * g, h]).sum_dim(1).reshape([rows, h]))
    } else {
        // Both directions at once: d_input = dG [W_ih0; W_ih1].
        matmul::<B>(grads.dg.clone(), input_weights::<B>(plan, w, layer))
    })
}

/// The backward pass from the reserve of [`super::forward::forward`].
pub(crate) fn backward<B: CubeOps>(
    plan: &Plan<'_>,
    inputs: Inputs<B::Runtime>,
    reserve: Vec<CubeTensor<B::Runtime>>,
    grads: OutputGrads<B::Runtime>,
    wanted: GradsWanted,
) -> Grads<B::Runtime> {
    let spec = &plan.spec;
    let (batch, h, p, nd, rows) = (plan.b, plan.h, plan.p, plan.nd, plan.rows());
    let layers = spec.num_layers;
    let x = &inputs.x;
    let w = &inputs.w;
    let lens = lengths(plan, x);

    let mut kept = reserve.into_iter();
    let mut per_layer: Vec<LayerReserve<B::Runtime>> = (0..layers)
        .map(|layer| LayerReserve {
            input: (layer > 0).then(|| kept.next().expect("checked reserve")),
            gates: kept.next().expect("checked reserve"),
            h_prev: kept.next().expect("checked reserve"),
        })
        .collect();
    let carry = Carry {
        dh: owned_copy::<B>(grads.dh_n, x, &[layers * nd, batch, p]),
        dc: (plan.mode == kernel::LSTM)
            .then(|| owned_copy::<B>(grads.dc_n, x, &[layers * nd, batch, h])),
    };
    let mut d_out = grads
        .dy
        .unwrap_or_else(|| super::plan::zeros(x, &[rows, nd * p]));
    let mut parts: Vec<Vec<(ParamKind, Tensor<B, 1>)>> =
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
        let d_in = weight_grads::<B>(
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
            d_out = prim::<B, 2>(tensor::<B, 2>(d_in) * tensor::<B, 2>(mask));
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
        prim(Tensor::cat(flat, 0))
    });
    Grads {
        dx: dx.map(|dx| with_shape(dx, &[rows, spec.d_input])),
        dh0: carry.dh,
        dc0: carry.dc,
        dweights,
    }
}
