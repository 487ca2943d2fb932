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
    dropout_mask, empty, lengths, owned_copy, unused, zero_padded_rows, CubeOps, Plan,
};
use crate::config::RnnMode;
use crate::layout::ParamKind;

/// Output gradients, packed `F32`; `None` is zero.
pub(crate) struct OutputGrads<R: CubeRuntime> {
    /// `[T·B, D·P]` rows.
    pub(crate) dy: Option<CubeTensor<R>>,
    pub(crate) dh_n: Option<CubeTensor<R>>,
    pub(crate) dc_n: Option<CubeTensor<R>>,
}

/// Input gradients, packed `F32`.
pub(crate) struct Grads<R: CubeRuntime> {
    /// `[T·B, I]` rows.
    pub(crate) dx: CubeTensor<R>,
    pub(crate) dh0: CubeTensor<R>,
    pub(crate) dc0: Option<CubeTensor<R>>,
    pub(crate) dweights: CubeTensor<R>,
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

/// The backward pass from the reserve of [`super::forward::forward`].
pub(crate) fn backward<B: CubeOps>(
    plan: &Plan<'_>,
    inputs: Inputs<B::Runtime>,
    reserve: Vec<CubeTensor<B::Runtime>>,
    grads: OutputGrads<B::Runtime>,
) -> Grads<B::Runtime> {
    let spec = &plan.spec;
    let (t_len, batch, h, p, nd, g) = (plan.t, plan.b, plan.h, plan.p, plan.nd, plan.g);
    let (rows, gh) = (plan.rows(), plan.gh());
    let layers = spec.num_layers;
    let lstm = plan.mode == kernel::LSTM;
    let gru = plan.mode == kernel::GRU;
    let proj = spec.proj_size.is_some();
    let x = &inputs.x;
    let w = &inputs.w;
    let lens = lengths(plan, x);
    let client = &x.client;

    let mut kept = reserve.into_iter();
    let mut per_layer: Vec<LayerReserve<B::Runtime>> = (0..layers)
        .map(|layer| LayerReserve {
            input: (layer > 0).then(|| kept.next().expect("checked reserve")),
            gates: kept.next().expect("checked reserve"),
            h_prev: kept.next().expect("checked reserve"),
        })
        .collect();

    // The carried state gradients, updated in place: they end as dh0 and dc0.
    let dh = owned_copy::<B>(grads.dh_n, x, &[layers * nd, batch, p]);
    let dc = lstm.then(|| owned_copy::<B>(grads.dc_n, x, &[layers * nd, batch, h]));
    let dc_arg = dc.clone().unwrap_or_else(|| unused(x));
    let mut d_out = grads
        .dy
        .unwrap_or_else(|| super::plan::zeros(x, &[rows, nd * p]));

    // dweights, by pseudo-layer and kind.
    let mut parts: Vec<Vec<(ParamKind, Tensor<B, 1>)>> =
        (0..spec.num_pseudo_layers()).map(|_| Vec::new()).collect();
    let mut dx = None;
    for layer in (0..layers).rev() {
        let saved = per_layer.pop().expect("one entry per layer");
        let in_size = spec.layer_input_size(layer);
        let skip = layer == 0 && spec.skip_input;
        let dg = empty(x, &[rows, nd * gh]);
        let dn = if gru {
            empty(x, &[rows, nd * h])
        } else {
            unused(x)
        };
        let dproj = if proj {
            empty(x, &[rows, nd * p])
        } else {
            unused(x)
        };
        let m = if proj {
            empty(x, &[rows, nd * h])
        } else {
            unused(x)
        };
        let offsets = |kind| plan.offsets(layer, kind).unwrap_or((0, 0));
        let (w_hh0, w_hh1) = offsets(ParamKind::WeightHh);
        let (w_hr0, w_hr1) = offsets(ParamKind::WeightHr);
        let recurrent = || RecurrentLaunch::new(w_hh0, w_hh1, w_hr0, w_hr1);
        let tiles = plan.tiles(x, 1);
        let (count, dim) = plan.step_launch(tiles, p);
        // Steps 0..T, then T: the last step's recurrence (Note [Backward step kernel]).
        for s in 0..=t_len {
            kernel::backward_step::launch::<f32, B::Runtime>(
                client,
                count.clone(),
                dim,
                w.clone().into_tensor_arg(),
                lens.clone().into_tensor_arg(),
                saved.gates.clone().into_tensor_arg(),
                saved.h_prev.clone().into_tensor_arg(),
                d_out.clone().into_tensor_arg(),
                dg.clone().into_tensor_arg(),
                dn.clone().into_tensor_arg(),
                dh.clone().into_tensor_arg(),
                dc_arg.clone().into_tensor_arg(),
                dproj.clone().into_tensor_arg(),
                plan.scan(layer, s),
                recurrent(),
                plan.mode,
                tiles.units,
                tiles.rows,
                proj,
            );
            if proj && s < t_len {
                let (count, dim) = plan.step_launch(tiles, h);
                kernel::backward_cell::launch::<f32, B::Runtime>(
                    client,
                    count,
                    dim,
                    w.clone().into_tensor_arg(),
                    lens.clone().into_tensor_arg(),
                    saved.gates.clone().into_tensor_arg(),
                    dproj.clone().into_tensor_arg(),
                    dg.clone().into_tensor_arg(),
                    dc_arg.clone().into_tensor_arg(),
                    m.clone().into_tensor_arg(),
                    plan.scan(layer, s),
                    recurrent(),
                    tiles.units,
                    tiles.rows,
                );
            }
        }

        // Weight gradients: matmuls over every step.
        let dg_t: Tensor<B, 2> = tensor(dg.clone());
        let input = match saved.input {
            Some(input) => input,
            // Layer 0 reads the caller's x, whose padded rows may hold anything: zero
            // them before dW_ih = dG^T x (Note [Padding never leaks] in
            // `crate::reference`).
            None if plan.padded && !skip => zero_padded_rows(plan, x, &lens, in_size),
            None => x.clone(),
        };
        let input_t: Tensor<B, 2> = tensor(input);
        let bias_sums: Tensor<B, 1> = dg_t.clone().sum_dim(0).reshape([nd * gh]);
        let d_in = if skip {
            // Skip input: x entered every gate block of both directions.
            prim(
                dg_t.clone()
                    .reshape([rows, nd * g, h])
                    .sum_dim(1)
                    .reshape([rows, h]),
            )
        } else {
            let w_ih = input_weights::<B>(plan, w, layer);
            let dw_ih: Tensor<B, 2> = weight_grad(dg_t.clone(), input_t);
            for d in 0..nd {
                let idx = layer * nd + d;
                parts[idx].push((
                    ParamKind::WeightIh,
                    dw_ih.clone().narrow(0, d * gh, gh).reshape([gh * in_size]),
                ));
            }
            matmul::<B>(dg.clone(), w_ih)
        };
        for d in 0..nd {
            let idx = layer * nd + d;
            let h_prev: Tensor<B, 2> =
                tensor::<B, 2>(saved.h_prev.clone()).narrow(0, d * rows, rows);
            let dg_d = dg_t.clone().narrow(1, d * gh, gh);
            let sums = bias_sums.clone().narrow(0, d * gh, gh);
            let (dw_hh, db_hh) = if gru {
                let dn_d: Tensor<B, 2> = tensor::<B, 2>(dn.clone()).narrow(1, d * h, h);
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
            parts[idx].push((ParamKind::WeightHh, dw_hh.reshape([gh * p])));
            if spec.bias {
                if !skip {
                    parts[idx].push((ParamKind::BiasIh, sums));
                }
                parts[idx].push((ParamKind::BiasHh, db_hh));
            }
            if proj {
                let dp: Tensor<B, 2> = tensor::<B, 2>(dproj.clone()).narrow(1, d * p, p);
                let m_d: Tensor<B, 2> = tensor::<B, 2>(m.clone()).narrow(1, d * h, h);
                parts[idx].push((ParamKind::WeightHr, weight_grad(dp, m_d).reshape([p * h])));
            }
        }
        if layer == 0 {
            dx = Some(d_in);
        } else if plan.desc.dropout.probability > 0.0 {
            let mask = dropout_mask(plan, layer, x);
            d_out = super::forward::prim::<B, 2>(tensor::<B, 2>(d_in) * tensor::<B, 2>(mask));
        } else {
            d_out = d_in;
        }
    }

    // dweights in the canonical flat order.
    let mut flat = Vec::with_capacity(plan.layout.entries().len());
    for e in plan.layout.entries() {
        let cell = &mut parts[e.layer * nd + e.direction];
        let pos = cell
            .iter()
            .position(|(k, _)| *k == e.kind)
            .expect("a gradient for every tensor of the layout");
        flat.push(cell.swap_remove(pos).1);
    }
    let dweights = prim(Tensor::cat(flat, 0));
    let _ = RnnMode::Lstm;
    Grads {
        dx: with_shape(dx.expect("layer 0 ran"), &[rows, spec.d_input]),
        dh0: dh,
        dc0: dc,
        dweights,
    }
}
