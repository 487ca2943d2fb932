//! Cell math, written once per mode: one time step `(x-projection, state, weights) -> state`,
//! and the step's saved activations when training.
//!
//! Equations are cuDNN's (see the crate docs); `xw` already holds `W x + b` for the step
//! (every bias for LSTM and RNN; only `b_ih` for GRU, whose `b_hh` sits inside `r ∘ (...)`).
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

use crate::config::RnnMode;

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

/// What one step keeps for the backward pass (see Note [Reserve layout] in `super`).
#[derive(Debug, Clone)]
pub(crate) enum Saved<B: Backend> {
    /// Activated gates `[i, f, g, o]`, `[B, 4H]`, and `tanh(c')`, `[B, H]`.
    Lstm {
        gates: Tensor<B, 2>,
        tanh_c: Tensor<B, 2>,
    },
    /// Activated gates `[r, z, n]`, `[B, 3H]`, and `R_n h + b_Rn`, `[B, H]`.
    Gru {
        gates: Tensor<B, 2>,
        hr_n: Tensor<B, 2>,
    },
    /// Nothing beyond the step's output `h'`.
    Rnn,
}

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
            let saved = save.then(|| Saved::Lstm {
                gates: Tensor::cat(vec![i, f, g, o], 1),
                tanh_c,
            });
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
            let n = tanh(xw.next().expect("n projection") + r.clone() * hr_n.clone());
            // h' = (1 - z) n + z h = n + z (h - n)
            let h_new = n.clone() + z.clone() * (state.h.clone() - n.clone());
            let saved = save.then(|| Saved::Gru {
                gates: Tensor::cat(vec![r, z, n], 1),
                hr_n,
            });
            (State { h: h_new, c: None }, saved)
        }
        RnnMode::RnnTanh | RnnMode::RnnRelu => {
            let a = pre(0);
            let h_new = if mode == RnnMode::RnnTanh {
                tanh(a)
            } else {
                relu(a)
            };
            (State { h: h_new, c: None }, save.then_some(Saved::Rnn))
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
