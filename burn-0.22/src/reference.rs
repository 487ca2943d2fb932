//! The reference implementation: Burn tensor ops, the same math as cuDNN, on any device.
//!
//! Every device without a native kernel runs it (Wgpu, the CubeCL CPU runtime, LibTorch,
//! Remote, ...), and it is the oracle the tests (`tests/pytorch.rs`, `tests/routing.rs`) compare
//! the native kernel with. On an autodiff device Burn traces it op by op, so training
//! through it needs no hand-written backward: an independent check of the native kernel's
//! backward too.
//!
//! Cost per layer and direction: one GEMM for the input projection of all time steps, then
//! one recurrent GEMM and a few element-wise ops per step; step outputs are gathered in a
//! list and stacked once.
//!
//! # Note [Activations through exp]
//!
//! Every activation is computed from one `exp` and one `recip`: `σ(a) = 1 / (1 + e^(-a))`
//! and `tanh(a) = 2 σ(2a) - 1`. The factors (`-1` for sigmoid gates, `-2` for the LSTM
//! cell gate) are folded into the gate rows of `W_ih`, `W_hh` and the biases once per call
//! (`gate_scale`; exact in floating point), so one `exp` over all gates serves a step.
//!
//! # Note [Gate-major steps]
//!
//! Each gate's input projection is its own contiguous `[T*B, H]` tensor and the recurrent
//! GEMM is batched over gates (`[G, B, P] x [G, P, H]`), so every element-wise op of a step
//! works on a contiguous `[B, H]` block rather than a strided view of a `[B, G*H]` row.

use burn::tensor::activation::relu;
use burn::tensor::{Bool, DType, Device, Tensor, TensorData};

use crate::descriptor::RnnDescriptor;
use crate::dropout::keep_mask;
use crate::layout::{ParamKind, RnnLayout};
use crate::spec::{RnnMode, RnnSpec};

/// The dtype every implementation computes in for inputs of `dtype` (Note [Half
/// precision] in the core crate's `semantics`): F16 and BF16 compute in F32.
pub fn compute_dtype(dtype: DType) -> DType {
    match dtype {
        DType::F16 | DType::BF16 => DType::F32,
        other => other,
    }
}

/// `t` in `dtype`, without a cast when it already is.
pub(crate) fn cast<const D: usize>(t: Tensor<D>, dtype: DType) -> Tensor<D> {
    if t.dtype() == dtype {
        t
    } else {
        t.cast(dtype)
    }
}

/// The output of one call: `y`, `h_n` and (LSTM) `c_n`, in the input's dtype.
pub(crate) struct Output {
    pub y: Tensor<3>,
    pub h_n: Tensor<3>,
    pub c_n: Option<Tensor<3>>,
}

/// The fused op through the reference alone, whatever the device: [`crate::fused_rnn`]'s
/// arguments, plus `training` (apply `desc.dropout` between layers). On an autodiff device
/// Burn traces it op by op, the independent check of the native kernel's backward node.
///
/// # Panics
///
/// As [`crate::fused_rnn`], when a shape does not fit `desc`.
pub fn fused_rnn(
    desc: &RnnDescriptor,
    input: Tensor<3>,
    h0: Option<Tensor<3>>,
    c0: Option<Tensor<3>>,
    weights: Tensor<1>,
    training: bool,
) -> crate::FusedRnnOutput {
    crate::ops::check_shapes(desc, &input, h0.as_ref(), c0.as_ref(), &weights);
    let out = forward(desc, input, h0, c0, weights, training);
    crate::FusedRnnOutput {
        output: out.y,
        hidden: out.h_n,
        cell: out.c_n,
    }
}

/// The forward pass of `desc` in Burn tensor ops; `training` applies dropout between
/// layers (masks of Note [Dropout masks] in the core crate's `dropout`).
///
/// Shapes are those of [`RnnDescriptor`], checked by the caller.
pub(crate) fn forward(
    desc: &RnnDescriptor,
    x: Tensor<3>,
    h0: Option<Tensor<3>>,
    c0: Option<Tensor<3>>,
    weights: Tensor<1>,
    training: bool,
) -> Output {
    let dtype = x.dtype();
    let compute = compute_dtype(dtype);
    let x = cast(x, compute);
    let h0 = h0.map(|t| cast(t, compute));
    let c0 = c0.map(|t| cast(t, compute));
    let flat = cast(weights, compute);

    let spec = &desc.spec;
    let layout = RnnLayout::new(*spec);
    let device = x.device();
    let x = if desc.batch_first {
        x.swap_dims(0, 1)
    } else {
        x
    };
    let (batch, p, h) = (desc.batch_size, spec.d_state(), spec.d_hidden);
    let nd = spec.num_directions();
    let init_state = |idx: usize| State {
        h: h0.as_ref().map_or_else(
            || Tensor::zeros([batch, p], (&device, compute)),
            |h0| h0.clone().narrow(0, idx, 1).reshape([batch, p]),
        ),
        c: (spec.mode == RnnMode::Lstm).then(|| {
            c0.as_ref().map_or_else(
                || Tensor::zeros([batch, h], (&device, compute)),
                |c0| c0.clone().narrow(0, idx, 1).reshape([batch, h]),
            )
        }),
    };
    let padding = Padding::new(desc, &device);
    // Zeros in `x`'s padded slots, by selection (Note [Padding never leaks]): the steps past
    // a sequence's end are computed and then discarded by selection, which keeps their
    // values out of the forward; but under autodiff the discarded branch still gets a zero
    // gradient, and zero times the derivative of an activation at a NaN is NaN, which then
    // reaches every gradient. With finite inputs there, every such product is zero. Later
    // layers read outputs that are already zero past each end.
    let x = match padding.all(x.dims()[2]) {
        Some(invalid) => x.mask_fill(invalid, 0.0),
        None => x,
    };

    let mut layer_in = x;
    let mut h_n = Vec::with_capacity(spec.num_pseudo_layers());
    let mut c_n = Vec::new();
    for layer in 0..spec.num_layers {
        if layer > 0 && training && desc.dropout.probability > 0.0 {
            layer_in = layer_in * keep_mask(desc, layer, &device, compute);
        }
        let mut outs = Vec::with_capacity(nd);
        for d in 0..nd {
            let w = cell_weights(&flat, &layout, layer, d, batch);
            let xw = input_projection(spec, &layer_in, &w);
            let (y, last) = scan(spec, xw, init_state(layer * nd + d), &w, &padding, d == 1);
            h_n.push(last.h);
            if let Some(c) = last.c {
                c_n.push(c);
            }
            outs.push(y);
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
    Output {
        y: cast(y, dtype),
        h_n: cast(Tensor::stack::<3>(h_n, 0), dtype),
        c_n: (!c_n.is_empty()).then(|| cast(Tensor::stack::<3>(c_n, 0), dtype)),
    }
}

/// Slices one canonical tensor out of the flat weights.
pub(crate) fn weight<const D: usize>(
    flat: &Tensor<1>,
    layout: &RnnLayout,
    layer: usize,
    direction: usize,
    kind: ParamKind,
) -> Option<Tensor<D>> {
    layout.entry(layer, direction, kind).map(|e| {
        let shape: [usize; D] = e.shape.clone().try_into().expect("entry rank");
        flat.clone().narrow(0, e.offset, e.len()).reshape(shape)
    })
}

/// Per-row factor of each gate block, folded into the weights: `-1` for sigmoid gates, `-2`
/// for the LSTM cell gate, `1` where the cell applies its own activation (Note
/// [Activations through exp]).
fn gate_scale(mode: RnnMode) -> &'static [f64] {
    match mode {
        RnnMode::Lstm => &[-1.0, -1.0, -2.0, -1.0],
        RnnMode::Gru => &[-1.0, -1.0, 1.0],
        RnnMode::RnnTanh | RnnMode::RnnRelu => &[1.0],
    }
}

/// Weights of one pseudo-layer, oriented for row-major GEMMs and split by gate (Note
/// [Gate-major steps]).
struct CellWeights {
    /// Per gate, `W_ih_g^T` scaled, `[in, H]`.
    w_ih_t_s: Option<Vec<Tensor<2>>>,
    /// `W_hh_g^T` scaled, stacked by gate, `[G, P, H]`.
    w_hh_t_s: Tensor<3>,
    /// Per gate, the bias folded into the input projection, scaled, `[1, H]`: `b_ih +
    /// b_hh`, but `b_in` alone for GRU's `n` gate.
    b_x_s: Option<Vec<Tensor<2>>>,
    /// GRU's `b_hn`, added per step inside `r ∘ (R_n h + b_hn)`, repeated to `[B, H]`.
    b_hn: Option<Tensor<2>>,
    /// `W_hr^T`, `[H, P]`.
    w_hr_t: Option<Tensor<2>>,
}

fn cell_weights(
    flat: &Tensor<1>,
    layout: &RnnLayout,
    layer: usize,
    direction: usize,
    batch: usize,
) -> CellWeights {
    let spec = layout.spec();
    let w = |kind| weight::<2>(flat, layout, layer, direction, kind);
    let b = |kind| weight::<1>(flat, layout, layer, direction, kind);
    let w_hh = w(ParamKind::WeightHh).expect("every pseudo-layer has W_hh");
    let w_ih = w(ParamKind::WeightIh);
    let w_hr = w(ParamKind::WeightHr);
    let (b_ih, b_hh) = (b(ParamKind::BiasIh), b(ParamKind::BiasHh));

    let h = spec.d_hidden;
    let scales = gate_scale(spec.mode);
    let rows = |t: &Tensor<2>, g: usize| t.clone().narrow(0, g * h, h).mul_scalar(scales[g]);
    let entries = |t: &Tensor<1>, g: usize| t.clone().narrow(0, g * h, h).mul_scalar(scales[g]);
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
    // r and z; b_hn sits inside r ∘ (R_n h + b_hn), so it is added per step.
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
fn contiguous<const D: usize>(t: Tensor<D>) -> Tensor<D> {
    // `reshape` of a transposed view forces a copy into row-major order.
    let dims = t.dims();
    let n: usize = dims.iter().product();
    t.reshape([n]).reshape(dims)
}

/// Which slots are padding (Note [Variable lengths] in the core crate's `semantics`), as
/// boolean masks for select semantics (Note [Padding never leaks]).
struct Padding {
    /// `invalid[t][b]`: step `t` is past the end of sequence `b`; `None` when every
    /// sequence is valid at `t`.
    invalid: Vec<Option<Vec<bool>>>,
    device: Device,
}

impl Padding {
    fn new(desc: &RnnDescriptor, device: &Device) -> Self {
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

    /// `[T, B, width]`, true in the slots past each sequence's end; `None` when there are
    /// none.
    fn all(&self, width: usize) -> Option<Tensor<3, Bool>> {
        if self.invalid.iter().all(Option::is_none) {
            return None;
        }
        let batch = self.invalid.iter().flatten().next().map_or(0, Vec::len);
        let values: Vec<bool> = self
            .invalid
            .iter()
            .flat_map(|row| (0..batch).map(move |b| row.as_ref().is_some_and(|r| r[b])))
            .flat_map(|v| std::iter::repeat_n(v, width))
            .collect();
        let shape = [self.invalid.len(), batch, width];
        Some(Tensor::from_data(
            TensorData::new(values, shape),
            &self.device,
        ))
    }

    /// `[B, width]`, true in the rows of sequences past their end at step `t`; `None` when
    /// there are none.
    fn step(&self, t: usize, width: usize) -> Option<Tensor<2, Bool>> {
        self.invalid[t].as_ref().map(|row| {
            let batch = row.len();
            let values: Vec<bool> = row
                .iter()
                .flat_map(|&v| std::iter::repeat_n(v, width))
                .collect();
            Tensor::from_data(TensorData::new(values, [batch, width]), &self.device)
        })
    }
}

/// The input projection of every step at once, one contiguous `[T*B, H]` tensor per gate:
/// `X W_ih_g^T + b_g` (scaled). Skip input adds `x` to every gate's block.
fn input_projection(spec: &RnnSpec, x: &Tensor<3>, w: &CellWeights) -> Vec<Tensor<2>> {
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

/// The recurrent state between steps.
#[derive(Clone)]
struct State {
    /// `h`, `[B, P]`.
    h: Tensor<2>,
    /// `c`, `[B, H]` (LSTM only).
    c: Option<Tensor<2>>,
}

/// One layer in one direction over the whole sequence: the outputs `[T, B, P]` (zero past
/// each sequence's end) and the final state.
fn scan(
    spec: &RnnSpec,
    xw: Vec<Tensor<2>>,
    init: State,
    w: &CellWeights,
    padding: &Padding,
    reverse: bool,
) -> (Tensor<3>, State) {
    let t_len = padding.invalid.len();
    let batch = init.h.dims()[0];
    let mut state = init;
    let mut ys = Vec::with_capacity(t_len);
    let order: Vec<usize> = if reverse {
        (0..t_len).rev().collect()
    } else {
        (0..t_len).collect()
    };
    for t in order {
        let xw_t: Vec<Tensor<2>> = xw
            .iter()
            .map(|g| g.clone().narrow(0, t * batch, batch))
            .collect();
        let new = step(spec.mode, xw_t, &state, w);
        if padding.invalid[t].is_some() {
            // Hold the state past the end and output zero there, by selection (Note
            // [Padding never leaks]): the new values of padded rows may be NaN.
            let hold = |old: Tensor<2>, new: Tensor<2>| {
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
    }
    if reverse {
        ys.reverse();
    }
    (Tensor::stack(ys, 0), state)
}

/// One step. `xw` holds each gate's input projection for the step, `[B, H]`; returns the
/// new (unmasked) state. The equations are cuDNN's (the crate docs).
fn step(mode: RnnMode, xw: Vec<Tensor<2>>, state: &State, w: &CellWeights) -> State {
    let [num_gates, p, h] = w.w_hh_t_s.dims();
    let batch = state.h.dims()[0];
    // The recurrent GEMM, batched over gates.
    let hw = state
        .h
        .clone()
        .unsqueeze_dim::<3>(0)
        .expand([num_gates, batch, p])
        .matmul(w.w_hh_t_s.clone());
    let gate = |g: usize| hw.clone().narrow(0, g, 1).reshape([batch, h]);
    let mut xw = xw.into_iter();
    let mut pre = |g: usize| xw.next().expect("one projection per gate") + gate(g);
    match mode {
        RnnMode::Lstm => {
            // σ(i), σ(f), σ(2 a_g), σ(o) from the scaled pre-activations.
            let i = logistic(pre(0));
            let f = logistic(pre(1));
            let g = logistic(pre(2)).mul_scalar(2.0).add_scalar(-1.0);
            let o = logistic(pre(3));
            let c_prev = state.c.clone().expect("LSTM state carries a cell");
            let c = f * c_prev + i * g;
            let m = o * tanh(c.clone());
            let h_new = match &w.w_hr_t {
                Some(w_hr_t) => m.matmul(w_hr_t.clone()),
                None => m,
            };
            State {
                h: h_new,
                c: Some(c),
            }
        }
        RnnMode::Gru => {
            let r = logistic(pre(0));
            let z = logistic(pre(1));
            let hr_n = match &w.b_hn {
                Some(b) => gate(2) + b.clone(),
                None => gate(2),
            };
            let n = tanh(r * hr_n + xw.next().expect("n projection"));
            // h' = (1 - z) n + z h = (h - n) z + n
            let h_new = (state.h.clone() - n.clone()) * z + n;
            State { h: h_new, c: None }
        }
        RnnMode::RnnTanh | RnnMode::RnnRelu => {
            let a = pre(0);
            let h_new = if mode == RnnMode::RnnTanh {
                tanh(a)
            } else {
                relu(a)
            };
            State { h: h_new, c: None }
        }
    }
}

/// `1 / (1 + e^a)`: the logistic function of `-a` (the sign is folded into the weights).
fn logistic<const D: usize>(a: Tensor<D>) -> Tensor<D> {
    a.exp().add_scalar(1.0).recip()
}

/// `tanh(a) = 2 / (1 + e^(-2a)) - 1` (Note [Activations through exp]).
fn tanh<const D: usize>(a: Tensor<D>) -> Tensor<D> {
    logistic(a.mul_scalar(-2.0))
        .mul_scalar(2.0)
        .add_scalar(-1.0)
}
