//! The reference implementation: Burn tensor ops, the same math as cuDNN, on any backend.
//!
//! It is the default body of every [`FusedRnnBackend`](crate::FusedRnnBackend) method, so
//! every backend without a native kernel runs it (Wgpu, any user backend), and it is the
//! oracle the backend-parity suite ([`crate::testing`]) compares every backend with, run
//! on `NdArray<f64>` through [`forward`], [`forward_training`] and [`backward`] directly.
//! It is itself checked against PyTorch, finite differences and Burn's autodiff.
//!
//! Cost per layer and direction: one GEMM for the input projection of all time steps, then
//! one recurrent GEMM and a few element-wise ops per step; step outputs are gathered in a
//! list and stacked once (no `slice_assign` in the time loop).
//!
//! # Note [Reserve layout]
//!
//! The training forward returns, as [`RnnReserve::tensors`], in this order, for each layer
//! `l`:
//! - if `l > 0`: the layer's input after dropout, `[T, B, D*P]`;
//! - if `l > 0` and dropout is on: the scaled keep mask, `[T, B, D*P]` (0 or `1/(1-p)`);
//! - for each direction: the state entering each step `h_prev` `[T, B, P]`, then, each
//!   `[T, B, H]`:
//!   - LSTM: `c_prev`, the activated gates `i`, `f`, `g`, `o`, and `tanh(c')`;
//!   - GRU: the activated gates `r`, `z`, `n`, and `R_n h + b_Rn`;
//!   - RNN: the step's output `h'`.
//!
//! All are in time order (`t`, not processing order) and sequence-major. [`reserve_shapes`]
//! computes these shapes from the descriptor alone; their dtype is [`compute_dtype`] of the
//! input's.
//!

mod backward;
mod cell;

pub use backward::backward;

use burn::tensor::backend::Backend;
use burn::tensor::{Bool, DType, Tensor, TensorData, TensorMetadata};

use crate::descriptor::RnnDescriptor;
use crate::layout::{ParamKind, RnnLayout};
use crate::op_types::{
    cast_inputs, cast_output, compute_dtype, float, prim, RnnInputs, RnnOutput, RnnReserve,
};
use crate::spec::{RnnMode, RnnSpec};
use cell::{CellWeights, State};

/// Inference forward (the default body of `fused_rnn_forward`).
///
/// Shapes are those of [`RnnDescriptor`], checked by the caller
/// ([`RnnDescriptor::check_inputs`]). Also usable as a *composite* forward: run on
/// `Autodiff<B>` tensors it is traced op by op by Burn's autodiff, an independent check of
/// the hand-written backward.
pub fn forward<B: Backend>(desc: &RnnDescriptor, inputs: RnnInputs<B>) -> RnnOutput<B> {
    let dtype = inputs.x.dtype();
    let out = run::<B>(desc, cast_inputs(inputs, compute_dtype(dtype)), false).0;
    cast_output(out, dtype)
}

/// Training forward (the default body of `fused_rnn_forward_training`): applies dropout
/// between layers and returns the reserve of Note [Reserve layout] for [`backward`].
pub fn forward_training<B: Backend>(
    desc: &RnnDescriptor,
    inputs: RnnInputs<B>,
) -> (RnnOutput<B>, RnnReserve<B>) {
    let dtype = inputs.x.dtype();
    let (out, reserve) = run::<B>(desc, cast_inputs(inputs, compute_dtype(dtype)), true);
    (cast_output(out, dtype), RnnReserve { tensors: reserve })
}

/// Shapes of the reserve's tensors (Note [Reserve layout]).
pub fn reserve_shapes(desc: &RnnDescriptor) -> Vec<[usize; 3]> {
    let spec = &desc.spec;
    let (t, b, h, p) = (
        desc.seq_length,
        desc.batch_size,
        spec.d_hidden,
        spec.d_state(),
    );
    let mut shapes = Vec::new();
    for layer in 0..spec.num_layers {
        if layer > 0 {
            shapes.push([t, b, spec.output_size()]);
            if desc.dropout.probability > 0.0 {
                shapes.push([t, b, spec.output_size()]);
            }
        }
        for _ in 0..spec.num_directions() {
            shapes.push([t, b, p]);
            let per_direction = match spec.mode {
                RnnMode::Lstm => 6,
                RnnMode::Gru => 4,
                RnnMode::RnnTanh | RnnMode::RnnRelu => 1,
            };
            shapes.extend(std::iter::repeat_n([t, b, h], per_direction));
        }
    }
    shapes
}

/// [`reserve_shapes`] with their dtype, [`compute_dtype`] of the input's `dtype`: the
/// default of `FusedRnnBackend::fused_rnn_reserve_layout`.
pub fn reserve_layout(desc: &RnnDescriptor, dtype: DType) -> Vec<(Vec<usize>, DType)> {
    let compute = compute_dtype(dtype);
    reserve_shapes(desc)
        .into_iter()
        .map(|shape| (shape.to_vec(), compute))
        .collect()
}

/// Slices one canonical tensor out of the flat weights.
pub(crate) fn weight<B: Backend, const D: usize>(
    flat: &Tensor<B, 1>,
    layout: &RnnLayout,
    layer: usize,
    direction: usize,
    kind: ParamKind,
) -> Option<Tensor<B, D>> {
    layout.entry(layer, direction, kind).map(|e| {
        let shape: [usize; D] = e.shape.clone().try_into().expect("entry rank");
        flat.clone().narrow(0, e.offset, e.len()).reshape(shape)
    })
}

/// Per-row factor of each gate block, folded into the weights: `-1` for sigmoid gates, `-2`
/// for the LSTM cell gate, `1` where the cell applies its own activation
/// (Note [Activations through exp] in `cell`).
pub(crate) fn gate_scale(mode: RnnMode) -> &'static [f64] {
    match mode {
        RnnMode::Lstm => &[-1.0, -1.0, -2.0, -1.0],
        RnnMode::Gru => &[-1.0, -1.0, 1.0],
        RnnMode::RnnTanh | RnnMode::RnnRelu => &[1.0],
    }
}

fn cell_weights<B: Backend>(
    flat: &Tensor<B, 1>,
    layout: &RnnLayout,
    layer: usize,
    direction: usize,
    batch: usize,
) -> CellWeights<B> {
    let spec = layout.spec();
    let w = |kind| weight::<B, 2>(flat, layout, layer, direction, kind);
    let b = |kind| weight::<B, 1>(flat, layout, layer, direction, kind);
    let w_hh = w(ParamKind::WeightHh).expect("every pseudo-layer has W_hh");
    let w_ih = w(ParamKind::WeightIh);
    let w_hr = w(ParamKind::WeightHr);
    let (b_ih, b_hh) = (b(ParamKind::BiasIh), b(ParamKind::BiasHh));

    // Split by gate and scale each gate's rows, exactly, once per call
    // (Notes [Activations through exp] and [Gate-major steps] in `cell`).
    let h = spec.d_hidden;
    let scales = gate_scale(spec.mode);
    let rows = |t: &Tensor<B, 2>, g: usize| t.clone().narrow(0, g * h, h).mul_scalar(scales[g]);
    let entries = |t: &Tensor<B, 1>, g: usize| t.clone().narrow(0, g * h, h).mul_scalar(scales[g]);
    let gates = 0..scales.len();
    let w_ih_t_s = w_ih.as_ref().map(|w| {
        gates
            .clone()
            .map(|g| contiguous(rows(w, g).transpose()))
            .collect()
    });
    let w_hh_t_s = Tensor::stack(
        gates
            .clone()
            .map(|g| contiguous(rows(&w_hh, g).transpose()))
            .collect(),
        0,
    );
    // LSTM and RNN add both biases once, in the input projection. GRU does the same for
    // r and z; b_hn sits inside r ∘ (R_n h + b_hn), so it is added per step, repeated over
    // the batch once here so that the per-step add needs no broadcast.
    let (b_x, b_hn) = match (spec.mode, b_ih, b_hh) {
        (RnnMode::Gru, b_ih, Some(b_hh)) => {
            // [b_ir + b_hr, b_iz + b_hz, b_in]; without b_ih (skip input): [b_hr, b_hz, 0].
            let rz = b_hh.clone().narrow(0, 0, 2 * h);
            let (rz, n) = match b_ih {
                Some(bi) => (rz + bi.clone().narrow(0, 0, 2 * h), bi.narrow(0, 2 * h, h)),
                None => (rz, Tensor::zeros([h], (&flat.device(), flat.dtype()))),
            };
            let b_hn = b_hh
                .narrow(0, 2 * h, h)
                .unsqueeze_dim::<2>(0)
                .repeat_dim(0, batch);
            (Some(Tensor::cat(vec![rz, n], 0)), Some(b_hn))
        }
        (_, Some(bi), Some(bh)) => (Some(bi + bh), None),
        (_, bi, bh) => (bi.or(bh), None),
    };
    let b_x_s = b_x.map(|b| {
        gates
            .clone()
            .map(|g| entries(&b, g).unsqueeze_dim(0))
            .collect()
    });
    CellWeights {
        w_ih_t_s,
        w_hh_t_s,
        b_x_s,
        b_hn,
        w_hr_t: w_hr.map(|w| contiguous(w.transpose())),
    }
}

/// A contiguous copy, so that per-step GEMMs read a plain row-major operand.
fn contiguous<B: Backend, const D: usize>(t: Tensor<B, D>) -> Tensor<B, D> {
    // `reshape` of a transposed view forces a copy into row-major order on every backend.
    let dims = t.dims();
    let n: usize = dims.iter().product();
    t.reshape([n]).reshape(dims)
}

/// Which slots are padding (Note [Variable lengths]), as boolean masks for select
/// semantics (Note [Padding never leaks]).
pub(crate) struct Padding<B: Backend> {
    /// `invalid[t][b]`: step `t` is past the end of sequence `b`; `None` when every
    /// sequence is valid at `t`.
    invalid: Vec<Option<Vec<bool>>>,
    device: B::Device,
}

impl<B: Backend> Padding<B> {
    pub(crate) fn new(desc: &RnnDescriptor, device: &B::Device) -> Self {
        let invalid = (0..desc.seq_length)
            .map(|t| {
                let row: Vec<bool> = (0..desc.batch_size)
                    .map(|b| t >= desc.seq_length_of(b))
                    .collect();
                row.contains(&true).then_some(row)
            })
            .collect();
        Self {
            invalid,
            device: device.clone(),
        }
    }

    /// Whether some sequence is past its end at step `t`.
    pub(crate) fn any(&self, t: usize) -> bool {
        self.invalid[t].is_some()
    }

    /// `[B, width]`, true in the rows of sequences past their end at step `t`; `None` when
    /// there are none.
    pub(crate) fn step(&self, t: usize, width: usize) -> Option<Tensor<B, 2, Bool>> {
        self.invalid[t].as_ref().map(|row| {
            let batch = row.len();
            let values: Vec<bool> = row
                .iter()
                .flat_map(|&v| std::iter::repeat_n(v, width))
                .collect();
            Tensor::from_data(TensorData::new(values, [batch, width]), &self.device)
        })
    }

    /// `[T, B, width]`, true in every padded slot; `None` without padding.
    pub(crate) fn all(&self, width: usize) -> Option<Tensor<B, 3, Bool>> {
        if self.invalid.iter().all(Option::is_none) {
            return None;
        }
        let t_len = self.invalid.len();
        let batch = self.invalid.iter().flatten().next().map_or(0, Vec::len);
        let values: Vec<bool> = self
            .invalid
            .iter()
            .flat_map(|row| {
                (0..batch).flat_map(move |b| {
                    std::iter::repeat_n(row.as_ref().is_some_and(|r| r[b]), width)
                })
            })
            .collect();
        Some(Tensor::from_data(
            TensorData::new(values, [t_len, batch, width]),
            &self.device,
        ))
    }
}

/// The input projection of every step at once, one contiguous `[T*B, H]` tensor per gate:
/// `X W_ih_g^T + b_g` (scaled). Skip input adds `x` to every gate's block.
fn input_projection<B: Backend>(
    spec: &RnnSpec,
    x: &Tensor<B, 3>,
    w: &CellWeights<B>,
) -> Vec<Tensor<B, 2>> {
    let [t, b, f] = x.dims();
    let x = x.clone().reshape([t * b, f]);
    let scales = gate_scale(spec.mode);
    (0..scales.len())
        .map(|g| {
            let xw = match &w.w_ih_t_s {
                Some(w_ih) => x.clone().matmul(w_ih[g].clone()),
                None => x.clone().mul_scalar(scales[g]),
            };
            match &w.b_x_s {
                Some(bias) => xw + bias[g].clone(),
                None => xw,
            }
        })
        .collect()
}

/// One layer in one direction over the whole sequence.
struct Scan<B: Backend> {
    /// Outputs `[T, B, P]`, zero past each sequence's end.
    y: Tensor<B, 3>,
    /// Final state.
    last: State<B>,
    /// Reserve tensors of this pseudo-layer (Note [Reserve layout]).
    saved: Vec<Tensor<B, 3>>,
}

fn scan<B: Backend>(
    spec: &RnnSpec,
    xw: Vec<Tensor<B, 2>>,
    init: State<B>,
    w: &CellWeights<B>,
    padding: &Padding<B>,
    reverse: bool,
    save: bool,
) -> Scan<B> {
    let t_len = padding.invalid.len();
    let batch = init.h.dims()[0];
    let mut state = init;
    let mut ys = Vec::with_capacity(t_len);
    let mut h_prev = Vec::new();
    let mut c_prev = Vec::new();
    let mut saved_steps = Vec::new();
    let order: Vec<usize> = if reverse {
        (0..t_len).rev().collect()
    } else {
        (0..t_len).collect()
    };
    for t in order {
        let xw_t: Vec<Tensor<B, 2>> = xw
            .iter()
            .map(|g| g.clone().narrow(0, t * batch, batch))
            .collect();
        if save {
            h_prev.push(state.h.clone());
            if let Some(c) = &state.c {
                c_prev.push(c.clone());
            }
        }
        let (new, saved) = cell::step(spec.mode, xw_t, &state, w, save);
        if padding.any(t) {
            // Hold the state past the end and output zero there, by selection (Note
            // [Padding never leaks]): the new values of padded rows may be NaN.
            let hold = |old: Tensor<B, 2>, new: Tensor<B, 2>| {
                let width = old.dims()[1];
                let invalid = padding.step(t, width).expect("padded step");
                new.mask_where(invalid, old)
            };
            let p = new.h.dims()[1];
            let invalid_p = padding.step(t, p).expect("padded step");
            ys.push(new.h.clone().mask_fill(invalid_p, 0.0));
            state = State {
                h: hold(state.h, new.h),
                c: match (state.c, new.c) {
                    (Some(old), Some(new)) => Some(hold(old, new)),
                    _ => None,
                },
            };
        } else {
            ys.push(new.h.clone());
            state = new;
        }
        if let Some(s) = saved {
            saved_steps.push(s);
        }
    }
    if reverse {
        ys.reverse();
        h_prev.reverse();
        c_prev.reverse();
        saved_steps.reverse();
    }
    let mut saved = Vec::new();
    if save {
        saved.push(Tensor::stack(h_prev, 0));
        if spec.mode == RnnMode::Lstm {
            saved.push(Tensor::stack(c_prev, 0));
        }
        // Transpose the per-step lists into one [T, B, H] tensor per activation.
        let per_step = saved_steps.first().map_or(0, Vec::len);
        let mut columns: Vec<Vec<Tensor<B, 2>>> =
            (0..per_step).map(|_| Vec::with_capacity(t_len)).collect();
        for step in saved_steps {
            for (column, t) in columns.iter_mut().zip(step) {
                column.push(t);
            }
        }
        saved.extend(columns.into_iter().map(|c| Tensor::stack(c, 0)));
    }
    let y: Tensor<B, 3> = Tensor::stack(ys, 0);
    if save && matches!(spec.mode, RnnMode::RnnTanh | RnnMode::RnnRelu) {
        // The step output before masking is what the activation's derivative needs; at
        // masked steps no gradient flows, so the masked output serves as well.
        saved.push(y.clone());
    }
    Scan {
        y,
        last: state,
        saved,
    }
}

fn run<B: Backend>(
    desc: &RnnDescriptor,
    inputs: RnnInputs<B>,
    training: bool,
) -> (RnnOutput<B>, Vec<B::FloatTensorPrimitive>) {
    let spec = &desc.spec;
    let layout = RnnLayout::new(*spec);
    let x: Tensor<B, 3> = float(inputs.x);
    let device = x.device();
    let dtype = x.dtype();
    let x = if desc.batch_first {
        x.swap_dims(0, 1)
    } else {
        x
    };
    let flat: Tensor<B, 1> = float(inputs.weights);
    let (batch, p, h) = (desc.batch_size, spec.d_state(), spec.d_hidden);
    let nd = spec.num_directions();
    let h0: Option<Tensor<B, 3>> = inputs.h0.map(float);
    let c0: Option<Tensor<B, 3>> = inputs.c0.map(float);
    let init_state = |idx: usize| State {
        h: h0.as_ref().map_or_else(
            || Tensor::zeros([batch, p], (&device, dtype)),
            |h0| h0.clone().narrow(0, idx, 1).reshape([batch, p]),
        ),
        c: (spec.mode == RnnMode::Lstm).then(|| {
            c0.as_ref().map_or_else(
                || Tensor::zeros([batch, h], (&device, dtype)),
                |c0| c0.clone().narrow(0, idx, 1).reshape([batch, h]),
            )
        }),
    };
    let padding = Padding::<B>::new(desc, &device);

    let mut reserve: Vec<Tensor<B, 3>> = Vec::new();
    let mut layer_in = x;
    let mut h_n = Vec::with_capacity(spec.num_pseudo_layers());
    let mut c_n = Vec::new();
    for layer in 0..spec.num_layers {
        if layer > 0 {
            if training && desc.dropout.probability > 0.0 {
                let mask = crate::dropout::keep_mask::<B>(desc, layer, &device, dtype);
                layer_in = layer_in * mask.clone();
                reserve.push(layer_in.clone());
                reserve.push(mask);
            } else if training {
                reserve.push(layer_in.clone());
            }
        }
        let scans: Vec<Scan<B>> = (0..nd)
            .map(|d| {
                let w = cell_weights(&flat, &layout, layer, d, batch);
                let xw = input_projection(spec, &layer_in, &w);
                let init = init_state(layer * nd + d);
                scan(spec, xw, init, &w, &padding, d == 1, training)
            })
            .collect();
        let mut outs = Vec::with_capacity(nd);
        for s in scans {
            reserve.extend(s.saved);
            h_n.push(s.last.h);
            if let Some(c) = s.last.c {
                c_n.push(c);
            }
            outs.push(s.y);
        }
        layer_in = if nd == 1 {
            outs.pop().expect("one direction")
        } else {
            Tensor::cat(outs, 2)
        };
    }
    let y = if desc.batch_first {
        layer_in.swap_dims(0, 1)
    } else {
        layer_in
    };
    let out = RnnOutput {
        y: prim(y),
        h_n: prim(Tensor::stack::<3>(h_n, 0)),
        c_n: (!c_n.is_empty()).then(|| prim(Tensor::stack::<3>(c_n, 0))),
    };
    (out, reserve.into_iter().map(prim).collect())
}
