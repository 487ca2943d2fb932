//! The fused element-wise passes: one function per mode and direction of the pass, over
//! one row (one sequence at one step). Equations are cuDNN's (see [`crate::layout`]).
//!
//! Each function slices its operands to exactly `H` elements first, so the loops carry no
//! bounds checks and vectorise (Note [Activations] in `super::float`). Callers run them
//! only on valid rows (Note [Padding never leaks] in [`crate::reference`]).
//!
//! Forward, per row: `pre = xw + acc + bias` (`xw` the input projection, `acc` the
//! recurrent GEMM `h W_hh^T`), the activations, the cell update and the new state, written
//! to `out`; when training, the activations go back into the gate row (Note [Native
//! reserve] in `super::plan`).
//!
//! Backward, per row: from the output gradient `dh` (and the carried `dc`), the gradients
//! of the pre-activations, written over the gate row and into `dg`, the operand of the
//! step's recurrent GEMM `dh_prev = dg W_hh`.

use super::float::{relu, sigmoid, tanh, Float};

/// `H`-element blocks `k, k+1, ..` of `s`.
macro_rules! blocks {
    ($s:expr, $h:expr; $($k:expr),+) => {
        ($(&$s[$k * $h..($k + 1) * $h]),+)
    };
}

/// LSTM forward over one row. `gates`: `[i f g o]` pre-activation input projections in,
/// and when `TRAIN` `[i f g o]` activated and `c` entering the step out (`5H`). `c`: the
/// cell state, updated in place. `out`: `o ∘ tanh(c')` (the new `h`, or the input of the
/// projection).
#[inline(always)]
pub(crate) fn lstm_forward<T: Float, const TRAIN: bool>(
    h: usize,
    gates: &mut [T],
    acc: &[T],
    bias: &[T],
    c: &mut [T],
    out: &mut [T],
) {
    let (xi, rest) = gates.split_at_mut(h);
    let (xf, rest) = rest.split_at_mut(h);
    let (xg, rest) = rest.split_at_mut(h);
    let (xo, rest) = rest.split_at_mut(h);
    let cp = if TRAIN { &mut rest[..h] } else { &mut [][..] };
    let (a, b) = (blocks4(acc, h), blocks4(bias, h));
    lstm_forward_loop::<T, TRAIN>(h, [xi, xf, xg, xo], a, b, &mut c[..h], &mut out[..h], cp);
}

/// `s`'s first four `H`-element blocks.
#[inline(always)]
fn blocks4<T>(s: &[T], h: usize) -> [&[T]; 4] {
    let (a, b, c, d) = blocks!(s, h; 0, 1, 2, 3);
    [a, b, c, d]
}

/// The loop of [`lstm_forward`]. Every block is its own parameter, so the compiler knows
/// that they do not overlap and vectorises without runtime alias checks.
#[inline(always)]
fn lstm_forward_loop<T: Float, const TRAIN: bool>(
    h: usize,
    [xi, xf, xg, xo]: [&mut [T]; 4],
    [ai, af, ag, ao]: [&[T]; 4],
    [bi, bf, bg, bo]: [&[T]; 4],
    c: &mut [T],
    out: &mut [T],
    cp: &mut [T],
) {
    let (xi, xf, xg, xo) = (&mut xi[..h], &mut xf[..h], &mut xg[..h], &mut xo[..h]);
    let (ai, af, ag, ao) = (&ai[..h], &af[..h], &ag[..h], &ao[..h]);
    let (bi, bf, bg, bo) = (&bi[..h], &bf[..h], &bg[..h], &bo[..h]);
    let (c, out) = (&mut c[..h], &mut out[..h]);
    let cp = if TRAIN { &mut cp[..h] } else { cp };
    for j in 0..h {
        let i = sigmoid(xi[j] + ai[j] + bi[j]);
        let f = sigmoid(xf[j] + af[j] + bf[j]);
        let g = tanh(xg[j] + ag[j] + bg[j]);
        let o = sigmoid(xo[j] + ao[j] + bo[j]);
        let c_prev = c[j];
        let c_new = f * c_prev + i * g;
        c[j] = c_new;
        out[j] = o * tanh(c_new);
        if TRAIN {
            xi[j] = i;
            xf[j] = f;
            xg[j] = g;
            xo[j] = o;
            cp[j] = c_prev;
        }
    }
}

/// GRU forward over one row. `gates`: `[r z n]` input projections in, and when `TRAIN`
/// `[r z n (R_n h + b_Rn)]` out (`4H`). `acc`: `h W_hh^T`, `[r z n]`. `bias`: `[b_ir + b_hr,
/// b_iz + b_hz, b_in]`; `b_hn` sits inside `r ∘ (R_n h + b_hn)`. `out`: the new `h`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(crate) fn gru_forward<T: Float, const TRAIN: bool>(
    h: usize,
    gates: &mut [T],
    acc: &[T],
    bias: &[T],
    b_hn: &[T],
    h_prev: &[T],
    out: &mut [T],
) {
    let (ar, az, an) = blocks!(acc, h; 0, 1, 2);
    let (br, bz, bn) = blocks!(bias, h; 0, 1, 2);
    let b_hn = &b_hn[..h];
    let h_prev = &h_prev[..h];
    let out = &mut out[..h];
    let (xr, rest) = gates.split_at_mut(h);
    let (xz, rest) = rest.split_at_mut(h);
    let (xn, rest) = rest.split_at_mut(h);
    let hn_out = if TRAIN { &mut rest[..h] } else { &mut [][..] };
    for j in 0..h {
        let r = sigmoid(xr[j] + ar[j] + br[j]);
        let z = sigmoid(xz[j] + az[j] + bz[j]);
        let hn = an[j] + b_hn[j];
        let n = tanh(xn[j] + bn[j] + r * hn);
        out[j] = n + z * (h_prev[j] - n);
        if TRAIN {
            xr[j] = r;
            xz[j] = z;
            xn[j] = n;
            hn_out[j] = hn;
        }
    }
}

/// Plain RNN forward over one row: `out = act(xw + acc + bias)`; when `TRAIN` the gate row
/// keeps `out`.
#[inline(always)]
pub(crate) fn rnn_forward<T: Float, const TRAIN: bool, const RELU: bool>(
    h: usize,
    gates: &mut [T],
    acc: &[T],
    bias: &[T],
    out: &mut [T],
) {
    let (acc, bias) = (&acc[..h], &bias[..h]);
    let out = &mut out[..h];
    let x = &mut gates[..h];
    for j in 0..h {
        let a = x[j] + acc[j] + bias[j];
        let v = if RELU { relu(a) } else { tanh(a) };
        out[j] = v;
        if TRAIN {
            x[j] = v;
        }
    }
}

/// LSTM backward over one row. `gates`: `[i f g o c_prev]` in, `[di df dg do]` (gradients
/// of the pre-activations) out, also copied to `dg`. `dh`: gradient of `o ∘ tanh(c')`.
/// `dc`: the carried cell gradient, `dc'` in, `dc_prev` out. `m`: `o ∘ tanh(c')`, for the
/// projection's weight gradient.
#[inline(always)]
pub(crate) fn lstm_backward<T: Float, const PROJ: bool>(
    h: usize,
    gates: &mut [T],
    dh: &[T],
    dc: &mut [T],
    dg: &mut [T],
    m: &mut [T],
) {
    let dh = &dh[..h];
    let dc = &mut dc[..h];
    let m = if PROJ { &mut m[..h] } else { &mut [][..] };
    let (gi, rest) = gates.split_at_mut(h);
    let (gf, rest) = rest.split_at_mut(h);
    let (gg, rest) = rest.split_at_mut(h);
    let (go, rest) = rest.split_at_mut(h);
    let cp = &rest[..h];
    let (di, rest) = dg.split_at_mut(h);
    let (df, rest) = rest.split_at_mut(h);
    let (dgg, rest) = rest.split_at_mut(h);
    let do_ = &mut rest[..h];
    for j in 0..h {
        let (i, f, g, o) = (gi[j], gf[j], gg[j], go[j]);
        let c = f * cp[j] + i * g;
        let tc = tanh(c);
        let d_o = dh[j] * tc;
        let dct = dc[j] + dh[j] * o * (T::ONE - tc * tc);
        dc[j] = dct * f;
        let pi = dct * g * i * (T::ONE - i);
        let pf = dct * cp[j] * f * (T::ONE - f);
        let pg = dct * i * (T::ONE - g * g);
        let po = d_o * o * (T::ONE - o);
        gi[j] = pi;
        gf[j] = pf;
        gg[j] = pg;
        go[j] = po;
        di[j] = pi;
        df[j] = pf;
        dgg[j] = pg;
        do_[j] = po;
        if PROJ {
            m[j] = o * tc;
        }
    }
}

/// GRU backward over one row. `gates`: `[r z n hn]` in, `[dr dz dn∘r dn]` out (the
/// pre-activation gradients; `dn ∘ r` is the gradient of `R_n h + b_Rn`), the first three
/// also copied to `dg`. `dh`: gradient of the new `h`. `h_prev`: the state entering the
/// step. `direct`: the part of `dh_prev` that bypasses `W_hh`, `dh ∘ z`.
#[inline(always)]
pub(crate) fn gru_backward<T: Float>(
    h: usize,
    gates: &mut [T],
    dh: &[T],
    h_prev: &[T],
    dg: &mut [T],
    direct: &mut [T],
) {
    let dh = &dh[..h];
    let h_prev = &h_prev[..h];
    let direct = &mut direct[..h];
    let (gr, rest) = gates.split_at_mut(h);
    let (gz, rest) = rest.split_at_mut(h);
    let (gn, rest) = rest.split_at_mut(h);
    let ghn = &mut rest[..h];
    let (dr, rest) = dg.split_at_mut(h);
    let (dz, rest) = rest.split_at_mut(h);
    let dnr = &mut rest[..h];
    for j in 0..h {
        let (r, z, n, hn) = (gr[j], gz[j], gn[j], ghn[j]);
        let d = dh[j];
        let pn = d * (T::ONE - z) * (T::ONE - n * n);
        let pz = d * (h_prev[j] - n) * z * (T::ONE - z);
        let pr = pn * hn * r * (T::ONE - r);
        let pnr = pn * r;
        direct[j] = d * z;
        gr[j] = pr;
        gz[j] = pz;
        gn[j] = pnr;
        ghn[j] = pn;
        dr[j] = pr;
        dz[j] = pz;
        dnr[j] = pnr;
    }
}

/// Plain RNN backward over one row: `gates` `h'` in, the pre-activation gradient out (also
/// copied to `dg`).
#[inline(always)]
pub(crate) fn rnn_backward<T: Float, const RELU: bool>(
    h: usize,
    gates: &mut [T],
    dh: &[T],
    dg: &mut [T],
) {
    let dh = &dh[..h];
    let dg = &mut dg[..h];
    let y = &mut gates[..h];
    for j in 0..h {
        let v = y[j];
        let d = if RELU {
            if v > T::ZERO {
                dh[j]
            } else {
                T::ZERO
            }
        } else {
            dh[j] * (T::ONE - v * v)
        };
        y[j] = d;
        dg[j] = d;
    }
}
