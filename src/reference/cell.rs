//! Cell math, written once per mode: one time step `(x-projection, state, weights) -> state`,
//! and the step's saved activations when training.
//!
//! Equations are cuDNN's (see the crate docs); `xw` already holds `W x + b` for the step
//! (every bias for LSTM and RNN; only `b_ih` for GRU, whose `b_hh` sits inside `r ∘ (...)`).
//!
//! # Note [Sigmoid through tanh]
//!
//! `σ(a) = ½ tanh(a/2) + ½` exactly. The rows of the sigmoid gates (LSTM `i, f, o`; GRU `r, z`)
//! of `W_ih`, `W_hh` and both biases are halved once per call ([`super::gate_scale`]; exact
//! in floating point), so one `tanh` over all gates serves every activation of an LSTM step.
//! Burn's own `sigmoid` is avoided: it computes through f32 even for f64 tensors and costs
//! several ops.

use burn::tensor::activation::relu;
use burn::tensor::backend::Backend;
use burn::tensor::Tensor;

use crate::config::RnnMode;

/// Weights of one pseudo-layer, oriented for row-major GEMMs.
#[derive(Debug, Clone)]
pub(crate) struct CellWeights<B: Backend> {
    /// `W_ih`, `[G*H, in]`; `None` in skip-input layer 0.
    pub w_ih: Option<Tensor<B, 2>>,
    /// `W_hh`, `[G*H, P]`.
    pub w_hh: Tensor<B, 2>,
    /// `W_ih` with sigmoid-gate rows halved (Note [Sigmoid through tanh]).
    pub w_ih_s: Option<Tensor<B, 2>>,
    /// `W_hh^T` with sigmoid-gate columns halved, `[P, G*H]`, contiguous: the per-step GEMM
    /// operand.
    pub w_hh_t_s: Tensor<B, 2>,
    /// Bias folded into the input projection, `[G*H]`, sigmoid-gate entries halved:
    /// `b_ih + b_hh` (LSTM, RNN) or `b_ih` (GRU).
    pub b_x_s: Option<Tensor<B, 1>>,
    /// Bias added per step to `h W_hh^T` (GRU only: `b_hh`, `r, z` entries halved),
    /// `[1, G*H]`.
    pub b_h_s: Option<Tensor<B, 2>>,
    /// `W_hr`, `[P, H]` (LSTM projection).
    pub w_hr: Option<Tensor<B, 2>>,
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

/// One step. Returns the new (unmasked) state and, when `save`, the step's activations.
pub(crate) fn step<B: Backend>(
    mode: RnnMode,
    d_hidden: usize,
    xw: Tensor<B, 2>,
    state: &State<B>,
    w: &CellWeights<B>,
    save: bool,
) -> (State<B>, Option<Saved<B>>) {
    let hw = state.h.clone().matmul(w.w_hh_t_s.clone());
    let h = d_hidden;
    // σ from the tanh of a halved pre-activation (Note [Sigmoid through tanh]).
    let sig = |t: Tensor<B, 2>| t.mul_scalar(0.5).add_scalar(0.5);
    match mode {
        RnnMode::Lstm => {
            let t = (xw + hw).tanh();
            let s_if = sig(t.clone().narrow(1, 0, 2 * h));
            let g = t.clone().narrow(1, 2 * h, h);
            let o = sig(t.narrow(1, 3 * h, h));
            let i = s_if.clone().narrow(1, 0, h);
            let f = s_if.clone().narrow(1, h, h);
            let c_prev = state.c.clone().expect("LSTM state carries a cell");
            let c = f * c_prev + i * g.clone();
            let tanh_c = c.clone().tanh();
            let m = o.clone() * tanh_c.clone();
            let h_new = match &w.w_hr_t {
                Some(w_hr_t) => m.matmul(w_hr_t.clone()),
                None => m,
            };
            let saved = save.then(|| Saved::Lstm {
                gates: Tensor::cat(vec![s_if, g, o], 1),
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
            let hr = match &w.b_h_s {
                Some(b) => hw + b.clone(),
                None => hw,
            };
            let rz = sig((xw.clone().narrow(1, 0, 2 * h) + hr.clone().narrow(1, 0, 2 * h)).tanh());
            let r = rz.clone().narrow(1, 0, h);
            let z = rz.clone().narrow(1, h, h);
            let hr_n = hr.narrow(1, 2 * h, h);
            let n = (xw.narrow(1, 2 * h, h) + r * hr_n.clone()).tanh();
            // h' = (1 - z) n + z h = n + z (h - n)
            let h_new = n.clone() + z * (state.h.clone() - n.clone());
            let saved = save.then(|| Saved::Gru {
                gates: Tensor::cat(vec![rz, n], 1),
                hr_n,
            });
            (State { h: h_new, c: None }, saved)
        }
        RnnMode::RnnTanh | RnnMode::RnnRelu => {
            let a = xw + hw;
            let h_new = if mode == RnnMode::RnnTanh {
                a.tanh()
            } else {
                relu(a)
            };
            (State { h: h_new, c: None }, save.then_some(Saved::Rnn))
        }
    }
}
