//! Cell math, written once per mode: one time step `(x-projection, state, weights) -> state`,
//! and the step's saved activations when training.
//!
//! Equations are cuDNN's (see the crate docs); `xw` already holds `W x + b` for the step
//! (every bias for LSTM and RNN; only `b_ih` for GRU, whose `b_hh` sits inside `r ∘ (...)`).
//!
//! # Note [Operand order]
//!
//! NdArray computes `a ∘ b` about ten times slower when `a`'s buffer is shared (a clone of
//! a kept tensor) and `b` is freshly computed than the other way round (it tries to reuse
//! `b`'s buffer in place). `+` and `*` commute, so the reference writes the fresh operand
//! on the left: `(h - n) * z + n`, not `n + z * (h - n)`.
//!
//! # Note [Activations through exp]
//!
//! Every activation is computed from one `exp` and one `recip`: `σ(a) = 1 / (1 + e^(-a))` and
//! `tanh(a) = 2 σ(2a) - 1`. The factors (`-1` for sigmoid gates, `-2` for the LSTM cell
//! gate) are folded into the gate rows of `W_ih`, `W_hh` and the biases once per call
//! ([`super::gate_scale`]; exact in floating point), so one `exp` over all gates serves a
//! whole LSTM step. On CPU backends `tanh` is several times slower than `exp`, and Burn's own
//! `sigmoid` goes through f32 even for f64 tensors.

use burn::tensor::activation::relu;
use burn::tensor::backend::Backend;
use burn::tensor::Tensor;

use crate::spec::RnnMode;

/// Weights of one pseudo-layer, oriented for row-major GEMMs and split by gate.
///
/// # Note [Gate-major steps]
///
/// Each gate's input projection is its own contiguous `[T*B, H]` tensor, and the recurrent
/// GEMM is batched over gates (`[G, B, P] x [G, P, H]`), so every element-wise op of a step
/// works on a contiguous `[B, H]` block. Slicing gates out of one `[B, G*H]` row block
/// instead gives strided views, which some CPU backends (Flex) iterate several times slower.
#[derive(Debug, Clone)]
pub(crate) struct CellWeights<B: Backend> {
    /// Per gate, `W_ih_g^T` scaled (Note [Activations through exp]), `[in, H]`.
    pub w_ih_t_s: Option<Vec<Tensor<B, 2>>>,
    /// `W_hh_g^T` scaled, stacked by gate, `[G, P, H]`: the per-step GEMM operand.
    pub w_hh_t_s: Tensor<B, 3>,
    /// Per gate, the bias folded into the input projection, scaled, `[1, H]`:
    /// `b_ih + b_hh`, but `b_in` alone for GRU's `n` gate.
    pub b_x_s: Option<Vec<Tensor<B, 2>>>,
    /// GRU's `b_hn`, added per step inside `r ∘ (R_n h + b_hn)`, repeated to `[B, H]`.
    pub b_hn: Option<Tensor<B, 2>>,
    /// `W_hr^T`, `[H, P]`.
    pub w_hr_t: Option<Tensor<B, 2>>,
}

/// The recurrent state between steps.
#[derive(Debug, Clone)]
pub(crate) struct State<B: Backend> {
    /// `h`, `[B, P]`.
    pub h: Tensor<B, 2>,
    /// `c`, `[B, H]` (LSTM only).
    pub c: Option<Tensor<B, 2>>,
}

/// What one step keeps for the backward pass, `[B, H]` each, in the order of Note
/// [Reserve layout] in `super`: LSTM `i, f, g, o, tanh(c')`; GRU `r, z, n, R_n h + b_Rn`;
/// RNN nothing beyond the step's output. One contiguous tensor per activation, so the
/// backward never slices gates out of a wider block.
pub(crate) type Saved<B> = Vec<Tensor<B, 2>>;

/// One step. `xw` holds each gate's input projection for the step, `[B, H]`. Returns the
/// new (unmasked) state and, when `save`, the step's activations.
pub(crate) fn step<B: Backend>(
    mode: RnnMode,
    xw: Vec<Tensor<B, 2>>,
    state: &State<B>,
    w: &CellWeights<B>,
    save: bool,
) -> (State<B>, Option<Saved<B>>) {
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
            let c = f.clone() * c_prev + i.clone() * g.clone();
            let tanh_c = tanh(c.clone());
            let m = o.clone() * tanh_c.clone();
            let h_new = match &w.w_hr_t {
                Some(w_hr_t) => m.matmul(w_hr_t.clone()),
                None => m,
            };
            let saved = save.then(|| vec![i, f, g, o, tanh_c]);
            (
                State {
                    h: h_new,
                    c: Some(c),
                },
                saved,
            )
        }
        RnnMode::Gru => {
            let r = logistic(pre(0));
            let z = logistic(pre(1));
            let hr_n = match &w.b_hn {
                Some(b) => gate(2) + b.clone(),
                None => gate(2),
            };
            // Fresh operands go on the left (Note [Operand order]).
            let n = tanh(r.clone() * hr_n.clone() + xw.next().expect("n projection"));
            // h' = (1 - z) n + z h = (h - n) z + n
            let h_new = (state.h.clone() - n.clone()) * z.clone() + n.clone();
            let saved = save.then(|| vec![r, z, n, hr_n]);
            (State { h: h_new, c: None }, saved)
        }
        RnnMode::RnnTanh | RnnMode::RnnRelu => {
            let a = pre(0);
            let h_new = if mode == RnnMode::RnnTanh {
                tanh(a)
            } else {
                relu(a)
            };
            (State { h: h_new, c: None }, save.then(Vec::new))
        }
    }
}

/// `1 / (1 + e^a)`: the logistic function of `-a` (the sign is folded into the weights).
pub(crate) fn logistic<B: Backend, const D: usize>(a: Tensor<B, D>) -> Tensor<B, D> {
    a.exp().add_scalar(1.0).recip()
}

/// `tanh(a) = 2 / (1 + e^(-2a)) - 1` (Note [Activations through exp]).
pub(crate) fn tanh<B: Backend, const D: usize>(a: Tensor<B, D>) -> Tensor<B, D> {
    logistic(a.mul_scalar(-2.0))
        .mul_scalar(2.0)
        .add_scalar(-1.0)
}
