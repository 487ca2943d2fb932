//! The forward pass: per layer one input-projection matmul for every step and both
//! directions, then per step one launch of [`kernel::forward_step`] (two with an LSTM
//! projection) for both directions.

use burn::backend::ops::FloatTensorOps;
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::CubeBackend;

use super::kernel::{self, SourcesLaunch};
use super::plan::{
    dropout_mask, empty, f32_contiguous, lengths, owned_copy, unused, weight_blocks, zeros, Launch,
    Plan,
};
use crate::layout::ParamKind;

/// The inputs of one call, packed `F32` on the device.
pub(crate) struct Inputs {
    /// `[T·B, I]` rows (Note [Cube rows] in `super`).
    pub(crate) x: CubeTensor,
    /// `[L·D, B, P]`.
    pub(crate) h0: Option<CubeTensor>,
    /// `[L·D, B, H]`.
    pub(crate) c0: Option<CubeTensor>,
    /// Flat canonical params.
    pub(crate) w: CubeTensor,
}

/// The outputs of one call, packed `F32`.
pub(crate) struct Outputs {
    /// `[T·B, D·P]` rows.
    pub(crate) y: CubeTensor,
    /// `[L·D, B, P]`.
    pub(crate) h_n: CubeTensor,
    /// `[L·D, B, H]` (LSTM).
    pub(crate) c_n: Option<CubeTensor>,
}

/// `a · b` through Burn's matmul (cubecl's), as a packed tensor.
pub(crate) fn matmul(a: CubeTensor, b: CubeTensor) -> CubeTensor {
    into_contiguous(CubeBackend::float_matmul(a, b))
}

/// `t` transposed (its last two dimensions; a view).
pub(crate) fn transpose(t: CubeTensor) -> CubeTensor {
    CubeBackend::float_transpose(t)
}

/// `[W_ih0; W_ih1]` of `layer`, `[D·G·H, I]`: the input matrices of both directions
/// stacked, so that one matmul projects (and, in the backward, back-projects) both.
pub(crate) fn input_weights(plan: &Plan<'_>, w: &CubeTensor, layer: usize) -> CubeTensor {
    let in_size = plan.spec.layer_input_size(layer);
    let blocks = weight_blocks(
        plan,
        w,
        layer,
        ParamKind::WeightIh,
        plan.gh(),
        in_size,
        false,
    );
    with_shape(blocks, &[plan.nd * plan.gh(), in_size])
}

/// The input projection of `layer` for both directions, `input · [W_ih0; W_ih1]^T`:
/// `[T·B, D·G·H]`.
fn project(plan: &Plan<'_>, w: &CubeTensor, layer: usize, input: &CubeTensor) -> CubeTensor {
    let w_ih = input_weights(plan, w, layer);
    matmul(input.clone(), transpose(w_ih))
}

/// The forward pass. `training` applies dropout and returns the reserve (Note [Cube
/// reserve] in `super`).
pub(crate) fn forward(
    plan: &Plan<'_>,
    inputs: Inputs,
    training: bool,
) -> (Outputs, Vec<CubeTensor>) {
    let spec = &plan.spec;
    let (t_len, batch, h, p, nd) = (plan.t, plan.b, plan.h, plan.p, plan.nd);
    let layers = spec.num_layers;
    let lstm = plan.mode == kernel::LSTM;
    let proj = spec.proj_size.is_some();
    let x = &inputs.x;
    let w = &inputs.w;
    let lens = lengths(plan, x);
    let rows = plan.rows();

    let h_n = empty(x, &[layers * nd, batch, p]);
    let c_n = lstm.then(|| owned_copy(inputs.c0.clone(), x, &[layers * nd, batch, h]));
    let cell = c_n.clone().unwrap_or_else(|| unused(x));
    // The state entering the first step: h0, or zeros.
    let (h_first, h_first_layer_stride) = match &inputs.h0 {
        Some(h0) => (h0.clone(), nd * batch * p),
        None => (zeros(x, &[nd, batch, p]), 0),
    };
    let states = [empty(x, &[nd, batch, p]), empty(x, &[nd, batch, p])];
    let m = if proj {
        empty(x, &[nd, batch, h])
    } else {
        unused(x)
    };
    let spare = unused(x);
    let pre = empty(x, &[nd, batch, plan.gh()]);

    let mut reserve = Vec::new();
    let mut layer_in = x.clone();
    for layer in 0..layers {
        if layer > 0 && training {
            if plan.desc.dropout.probability > 0.0 {
                let mask = dropout_mask(plan, layer, x);
                layer_in = into_contiguous(CubeBackend::float_mul(layer_in, mask));
            }
            reserve.push(layer_in.clone());
        }
        let skip = layer == 0 && spec.skip_input;
        let (xw, xw_row, xw_dir, xw_gate) = if skip {
            (layer_in.clone(), spec.d_input, 0, 0)
        } else {
            let xw = project(plan, w, layer, &layer_in);
            (xw, nd * plan.gh(), plan.gh(), h)
        };
        let w_hh_t = weight_blocks(plan, w, layer, ParamKind::WeightHh, plan.gh(), p, true);
        let w_hr_t = proj.then(|| weight_blocks(plan, w, layer, ParamKind::WeightHr, p, h, true));
        let out = empty(x, &[rows, nd * p]);
        let (gates, h_prev) = if training {
            (
                empty(x, &[nd * rows, plan.gate_width()]),
                empty(x, &[nd * rows, p]),
            )
        } else {
            (spare.clone(), spare.clone())
        };
        let b_ih = plan.offsets(layer, ParamKind::BiasIh);
        let b_hh = plan.offsets(layer, ParamKind::BiasHh);
        let step_tiles = plan.tiles(x, plan.g, h);
        let proj_tiles = plan.tiles(x, 1, p);
        let (count, dim) = plan.step_launch(step_tiles, h);
        let client = &x.client;
        for s in 0..t_len {
            let (h_src, h_base) = if s == 0 {
                (&h_first, layer * h_first_layer_stride)
            } else {
                (&states[(s - 1) % 2], 0)
            };
            let dst = &states[s % 2];
            let sources = SourcesLaunch::new(
                xw_row as u32,
                xw_dir as u32,
                xw_gate as u32,
                h_base as u32,
                b_ih.map_or(0, |o| o.0),
                b_ih.map_or(0, |o| o.1),
                b_hh.map_or(0, |o| o.0),
                b_hh.map_or(0, |o| o.1),
                u32::from(b_ih.is_some()),
                u32::from(b_hh.is_some()),
            );
            kernel::forward_step::launch::<f32>(
                client,
                count.clone(),
                dim,
                xw.clone().into_tensor_arg(),
                w.clone().into_tensor_arg(),
                w_hh_t.clone().into_tensor_arg(),
                lens.clone().into_tensor_arg(),
                h_src.clone().into_tensor_arg(),
                if proj { m.clone() } else { dst.clone() }.into_tensor_arg(),
                cell.clone().into_tensor_arg(),
                out.clone().into_tensor_arg(),
                h_n.clone().into_tensor_arg(),
                gates.clone().into_tensor_arg(),
                h_prev.clone().into_tensor_arg(),
                pre.clone().into_tensor_arg(),
                plan.scan(layer, s),
                sources,
                plan.mode,
                step_tiles.units,
                step_tiles.rows,
                proj,
                training,
            );
            if let Some(w_hr_t) = &w_hr_t {
                let (count, dim) = plan.step_launch(proj_tiles, p);
                kernel::project_step::launch::<f32>(
                    client,
                    count,
                    dim,
                    m.clone().into_tensor_arg(),
                    w_hr_t.clone().into_tensor_arg(),
                    lens.clone().into_tensor_arg(),
                    h_src.clone().into_tensor_arg(),
                    dst.clone().into_tensor_arg(),
                    out.clone().into_tensor_arg(),
                    h_n.clone().into_tensor_arg(),
                    plan.scan(layer, s),
                    h_base as u32,
                    proj_tiles.units,
                    proj_tiles.rows,
                );
            }
        }
        if training {
            reserve.push(gates);
            reserve.push(h_prev);
        }
        layer_in = out;
    }
    let outputs = Outputs {
        y: layer_in,
        h_n,
        c_n,
    };
    (outputs, reserve)
}

/// The call's inputs as packed `F32` tensors.
pub(crate) fn device_inputs(plan: &Plan<'_>, inputs: &crate::prims::Inputs<CubeBackend>) -> Inputs {
    let rows = plan.rows();
    let x = f32_contiguous(inputs.x.clone());
    let x = reshape_rows(x, rows);
    Inputs {
        x,
        h0: Some(f32_contiguous(inputs.h0.clone())),
        c0: inputs.c0.clone().map(f32_contiguous),
        w: f32_contiguous(inputs.weights.clone()),
    }
}

/// A packed `[T, B, F]` or `[B, T, F]` tensor as `[T·B, F]` rows (no copy).
pub(crate) fn reshape_rows(mut t: CubeTensor, rows: usize) -> CubeTensor {
    let shape = t.meta.shape().clone();
    let features = shape[shape.num_dims() - 1];
    debug_assert_eq!(shape.num_elements(), rows * features);
    t = CubeTensor::new_contiguous(
        t.client.clone(),
        t.device.clone(),
        burn::backend::Shape::from(vec![rows, features]),
        t.handle.clone(),
        t.dtype,
    );
    t
}

/// A packed tensor with a new shape of the same size (no copy).
pub(crate) fn with_shape(t: CubeTensor, shape: &[usize]) -> CubeTensor {
    CubeTensor::new_contiguous(
        t.client.clone(),
        t.device.clone(),
        burn::backend::Shape::from(shape.to_vec()),
        t.handle.clone(),
        t.dtype,
    )
}
