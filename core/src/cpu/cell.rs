//! The fused element-wise passes: one function per mode and direction of the pass, over
//! one row (one sequence at one step) — in the forward, over the units of one tile of the
//! step's product (Note [Fused step] in `super::forward`). Equations are cuDNN's (see
//! [`crate::layout`]).
//!
//! Each function slices its operands to exactly the units it works on first, so the loops carry no
//! bounds checks and vectorise (Note [Activations] in `super::float`). Callers run them
//! only on valid rows (Note [Padding never leaks] in [`crate::op_types`]).
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

/// `K` consecutive `H`-wide blocks of `row`, each cut to units `lo..lo + n`.
#[inline(always)]
fn unit_blocks<T, const K: usize>(row: &mut [T], h: usize, lo: usize, n: usize) -> [&mut [T]; K] {
    let mut blocks: [&mut [T]; K] = core::array::from_fn(|_| &mut [][..]);
    let mut rest = row;
    for block in &mut blocks {
        let (head, tail) = core::mem::take(&mut rest).split_at_mut(h);
        *block = &mut head[lo..lo + n];
        rest = tail;
    }
    blocks
}

/// `K` consecutive `H`-wide blocks of `row`, each cut to units `lo..lo + n`.
#[inline(always)]
fn unit_blocks_ref<T, const K: usize>(row: &[T], h: usize, lo: usize, n: usize) -> [&[T]; K] {
    let mut blocks: [&[T]; K] = [&[]; K];
    for (k, block) in blocks.iter_mut().enumerate() {
        *block = &row[k * h + lo..k * h + lo + n];
    }
    blocks
}

/// Most units one call of a forward cell handles: a panel of the step's product (Note
/// [Packed weights] in `super::packed`).
pub(crate) const MAX_UNITS: usize = 64;

/// What the forward cell of units `lo..lo + n` of one row (one sequence at one step)
/// reads and writes; gate blocks are `H` wide.
pub(crate) struct Units<'a, T> {
    /// `H`, and the units.
    pub(crate) h: usize,
    pub(crate) lo: usize,
    pub(crate) n: usize,
    /// The pre-activations' products for the units (`n` each): per gate `x W_ih^T + h
    /// W_hh^T`; GRU: `r`, `z`, the input's part of `n` and the state's part of `n`.
    pub(crate) acc: [&'a [T]; 4],
    /// Skip input: the step's input row, added to every gate.
    pub(crate) skip: Option<&'a [T]>,
    /// Folded biases `[G·H]` (`forward::biases`).
    pub(crate) bias: &'a [T],
    /// When training, the reserve's gate row (Note [Native reserve] in `super::plan`).
    pub(crate) gates: Option<&'a mut [T]>,
    /// The new state (or, with a projection, `o ∘ tanh(c')`), the whole row.
    pub(crate) out: &'a mut [T],
}

/// `G` bias blocks for the units, with the skip input added when there is one (into
/// `buf`, filled only then).
#[inline(always)]
fn biases<'b, T: Float, const G: usize>(
    u_bias: &'b [T],
    skip: Option<&[T]>,
    h: usize,
    lo: usize,
    n: usize,
    buf: &'b mut Option<[[T; MAX_UNITS]; G]>,
) -> [&'b [T]; G] {
    let blocks: [&[T]; G] = unit_blocks_ref(u_bias, h, lo, n);
    match skip {
        None => blocks,
        Some(x) => {
            // Only here: zeroing the buffer on every call would cost more than the cell.
            let buf = buf.insert([[T::ZERO; MAX_UNITS]; G]);
            let x = &x[lo..lo + n];
            for (dst, b) in buf.iter_mut().zip(blocks) {
                for ((d, &b), &x) in dst[..n].iter_mut().zip(b).zip(x) {
                    *d = b + x;
                }
            }
            let mut rows = buf.iter();
            core::array::from_fn(|_| &rows.next().expect("G rows")[..n])
        }
    }
}

/// LSTM forward over units `lo..lo + n` of one row: `c` (the row's cell state) updated in
/// place, `o ∘ tanh(c')` to `out`; when `TRAIN`, `[i f g o]` activated and `c` entering the
/// step to the gate row (`5H`).
#[inline(always)]
pub(crate) fn lstm_forward<T: Float, const TRAIN: bool, const FMA: bool>(
    u: Units<'_, T>,
    c: &mut [T],
) {
    let (h, lo, n) = (u.h, u.lo, u.n);
    let mut buf = None;
    let b = biases::<T, 4>(u.bias, u.skip, h, lo, n, &mut buf);
    let c = &mut c[lo..lo + n];
    let out = &mut u.out[lo..lo + n];
    let [ai, af, ag, ao] = u.acc.map(|a| &a[..n]);
    let [bi, bf, bg, bo] = b.map(|b| &b[..n]);
    let [ri, rf, rg, ro, rc]: [&mut [T]; 5] = if TRAIN {
        let row = u.gates.expect("a training forward keeps the gates");
        unit_blocks::<T, 5>(row, h, lo, n).map(|r| &mut r[..n])
    } else {
        Default::default()
    };
    lstm_forward_loop::<T, TRAIN, FMA>(
        n, ai, af, ag, ao, bi, bf, bg, bo, c, out, ri, rf, rg, ro, rc,
    );
}

/// The loop of [`lstm_forward`].
///
/// # Note [Vectorised cell loops]
///
/// The compiler vectorises a loop over the units only when it can rule out overlap between
/// what the loop writes: with a few outputs it checks at run time, with more (a training
/// step writes the gates to the reserve too) it gives up and runs the loop scalar, 16
/// times slower. So every loop writes at most two slices of the caller's; the rest goes to
/// arrays on the stack (which overlap nothing) and is copied out after the loop. Loops run
/// over at most 64 units at a time, most often a constant count (a panel of the step's
/// product, or 16 units: `in_blocks`), for which the vector code has no remainder.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn lstm_forward_loop<T: Float, const TRAIN: bool, const FMA: bool>(
    n: usize,
    ai: &[T],
    af: &[T],
    ag: &[T],
    ao: &[T],
    bi: &[T],
    bf: &[T],
    bg: &[T],
    bo: &[T],
    c: &mut [T],
    out: &mut [T],
    ri: &mut [T],
    rf: &mut [T],
    rg: &mut [T],
    ro: &mut [T],
    rc: &mut [T],
) {
    let (ai, af, ag, ao) = (&ai[..n], &af[..n], &ag[..n], &ao[..n]);
    let (bi, bf, bg, bo) = (&bi[..n], &bf[..n], &bg[..n], &bo[..n]);
    let (c, out) = (&mut c[..n], &mut out[..n]);
    // What the reserve keeps goes through a local buffer first: with seven outputs in the
    // loop, the compiler would otherwise not vectorise it.
    let mut keep = [[T::ZERO; MAX_UNITS]; 5];
    {
        let [ki, kf, kg, ko, kc] = &mut keep;
        let (ki, kf, kg, ko, kc) = (
            &mut ki[..n],
            &mut kf[..n],
            &mut kg[..n],
            &mut ko[..n],
            &mut kc[..n],
        );
        for j in 0..n {
            let i = sigmoid::<T, FMA>(ai[j] + bi[j]);
            let f = sigmoid::<T, FMA>(af[j] + bf[j]);
            let g = tanh::<T, FMA>(ag[j] + bg[j]);
            let o = sigmoid::<T, FMA>(ao[j] + bo[j]);
            let c_prev = c[j];
            let c_new = f * c_prev + i * g;
            c[j] = c_new;
            out[j] = o * tanh::<T, FMA>(c_new);
            if TRAIN {
                ki[j] = i;
                kf[j] = f;
                kg[j] = g;
                ko[j] = o;
                kc[j] = c_prev;
            }
        }
    }
    if TRAIN {
        for (dst, src) in [ri, rf, rg, ro, rc].into_iter().zip(&keep) {
            dst[..n].copy_from_slice(&src[..n]);
        }
    }
}

/// GRU forward over units `lo..lo + n` of one row: `r, z = σ(..)`, `n = tanh(x W_in^T +
/// b_in + r ∘ (h W_hn^T + b_hn))`, the new `h` to `out`; when `TRAIN`, `[r z n (h W_hn^T +
/// b_hn)]` to the gate row (`4H`). `bias`: `[b_ir + b_hr, b_iz + b_hz, b_in]`; `h_prev`:
/// the state entering the step (whole row).
#[inline(always)]
pub(crate) fn gru_forward<T: Float, const TRAIN: bool, const FMA: bool>(
    u: Units<'_, T>,
    b_hn: &[T],
    h_prev: &[T],
) {
    let (h, lo, n) = (u.h, u.lo, u.n);
    let mut buf = None;
    let [br, bz, bn] = biases::<T, 3>(u.bias, u.skip, h, lo, n, &mut buf).map(|b| &b[..n]);
    let [ar, az, anx, anh] = u.acc.map(|a| &a[..n]);
    let b_hn = &b_hn[lo..lo + n];
    let h_prev = &h_prev[lo..lo + n];
    let out = &mut u.out[lo..lo + n];
    let [rr, rz, rn, rh]: [&mut [T]; 4] = if TRAIN {
        let row = u.gates.expect("a training forward keeps the gates");
        unit_blocks::<T, 4>(row, h, lo, n).map(|r| &mut r[..n])
    } else {
        Default::default()
    };
    gru_forward_loop::<T, TRAIN, FMA>(
        n, ar, az, anx, anh, br, bz, bn, b_hn, h_prev, out, rr, rz, rn, rh,
    );
}

/// The loop of [`gru_forward`] (every slice its own parameter, as in
/// `lstm_forward_loop`).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn gru_forward_loop<T: Float, const TRAIN: bool, const FMA: bool>(
    n: usize,
    ar: &[T],
    az: &[T],
    anx: &[T],
    anh: &[T],
    br: &[T],
    bz: &[T],
    bn: &[T],
    b_hn: &[T],
    h_prev: &[T],
    out: &mut [T],
    rr: &mut [T],
    rz: &mut [T],
    rn: &mut [T],
    rh: &mut [T],
) {
    let (ar, az, anx, anh) = (&ar[..n], &az[..n], &anx[..n], &anh[..n]);
    let (br, bz, bn, b_hn) = (&br[..n], &bz[..n], &bn[..n], &b_hn[..n]);
    let (h_prev, out) = (&h_prev[..n], &mut out[..n]);
    // What the reserve keeps goes through a local buffer (see `lstm_forward_loop`).
    let mut keep = [[T::ZERO; MAX_UNITS]; 4];
    {
        let [kr, kz, kn, kh] = &mut keep;
        let (kr, kz, kn, kh) = (&mut kr[..n], &mut kz[..n], &mut kn[..n], &mut kh[..n]);
        for j in 0..n {
            let r = sigmoid::<T, FMA>(ar[j] + br[j]);
            let z = sigmoid::<T, FMA>(az[j] + bz[j]);
            let hn = anh[j] + b_hn[j];
            let nn = tanh::<T, FMA>(anx[j] + bn[j] + r * hn);
            out[j] = nn + z * (h_prev[j] - nn);
            if TRAIN {
                kr[j] = r;
                kz[j] = z;
                kn[j] = nn;
                kh[j] = hn;
            }
        }
    }
    if TRAIN {
        for (dst, src) in [rr, rz, rn, rh].into_iter().zip(&keep) {
            dst[..n].copy_from_slice(&src[..n]);
        }
    }
}

/// Plain RNN forward over units `lo..lo + n` of one row (`acc[0]` holds the `n` units):
/// `out = act(x W_ih^T + h W_hh^T + b)`; when `TRAIN` the gate row keeps `out`.
#[inline(always)]
pub(crate) fn rnn_forward<T: Float, const TRAIN: bool, const RELU: bool, const FMA: bool>(
    u: Units<'_, T>,
) {
    let (h, lo, n) = (u.h, u.lo, u.n);
    let mut buf = None;
    let [b] = biases::<T, 1>(u.bias, u.skip, h, lo, n, &mut buf);
    let (acc, b) = (&u.acc[0][..n], &b[..n]);
    let out = &mut u.out[lo..lo + n];
    let keep: &mut [T] = if TRAIN {
        &mut u.gates.expect("a training forward keeps the gates")[lo..lo + n]
    } else {
        &mut []
    };
    for j in 0..n {
        let v = if RELU {
            relu(acc[j] + b[j])
        } else {
            tanh::<T, FMA>(acc[j] + b[j])
        };
        out[j] = v;
        if TRAIN {
            keep[j] = v;
        }
    }
}

/// Units per block of [`in_blocks`].
const BLOCK: usize = 16;

/// Runs `f(lo, n)` over the units of a row, in blocks of 16 and then the rest: a block's
/// count is a constant for which the compiler emits straight vector code, where a loop
/// over all `H` units with a runtime count would be vectorised for wide, unrolled
/// iterations and leave rows of a few dozen units to its scalar remainder.
#[inline(always)]
fn in_blocks(h: usize, mut f: impl FnMut(usize, usize)) {
    let full = h / BLOCK * BLOCK;
    let mut lo = 0;
    while lo < full {
        f(lo, BLOCK);
        lo += BLOCK;
    }
    if full < h {
        f(full, h - full);
    }
}

/// LSTM backward over one row. `gates`: `[i f g o c_prev]` in, `[di df dg do]` (gradients
/// of the pre-activations) out. `dh`: gradient of `o ∘ tanh(c')`. `dc`: the carried cell
/// gradient, `dc'` in, `dc_prev` out. `m`: `o ∘ tanh(c')`, for the projection's weight
/// gradient.
#[inline(always)]
pub(crate) fn lstm_backward<T: Float, const PROJ: bool>(
    h: usize,
    gates: &mut [T],
    dh: &[T],
    dc: &mut [T],
    m: &mut [T],
) {
    in_blocks(
        h,
        #[inline(always)]
        |lo, n| {
            let [gi, gf, gg, go, cp] = unit_blocks::<T, 5>(gates, h, lo, n);
            let m: &mut [T] = if PROJ { &mut m[lo..lo + n] } else { &mut [] };
            let mut grads = [[T::ZERO; BLOCK]; 4];
            let mut mm = [T::ZERO; BLOCK];
            lstm_backward_loop::<T, PROJ>(
                n,
                [gi, gf, gg, go],
                cp,
                &dh[lo..lo + n],
                &mut dc[lo..lo + n],
                &mut grads,
                &mut mm,
            );
            for (dst, src) in [gi, gf, gg, go].into_iter().zip(&grads) {
                dst.copy_from_slice(&src[..n]);
            }
            if PROJ {
                m.copy_from_slice(&mm[..n]);
            }
        },
    );
}

/// The loop of [`lstm_backward`] (Note [Vectorised cell loops]): the gates' gradients and
/// `m` to the stack buffers `grads` and `mm`.
#[inline(always)]
fn lstm_backward_loop<T: Float, const PROJ: bool>(
    n: usize,
    [gi, gf, gg, go]: [&mut [T]; 4],
    cp: &mut [T],
    dh: &[T],
    dc: &mut [T],
    grads: &mut [[T; BLOCK]; 4],
    mm: &mut [T; BLOCK],
) {
    let (gi, gf, gg, go, cp) = (&gi[..n], &gf[..n], &gg[..n], &go[..n], &cp[..n]);
    let (dh, dc) = (&dh[..n], &mut dc[..n]);
    let [pi_, pf_, pg_, po_] = grads;
    let (pi_, pf_, pg_, po_, mm) = (
        &mut pi_[..n],
        &mut pf_[..n],
        &mut pg_[..n],
        &mut po_[..n],
        &mut mm[..n],
    );
    for j in 0..n {
        let (i, f, g, o) = (gi[j], gf[j], gg[j], go[j]);
        let c = f * cp[j] + i * g;
        // Unfused (the backward's row loop does not know its SIMD level): within the
        // bounds of the forward's fused `tanh(c')` (Note [Activations] in `super::float`).
        let tc = tanh::<T, false>(c);
        let d_o = dh[j] * tc;
        let dct = dc[j] + dh[j] * o * (T::ONE - tc * tc);
        dc[j] = dct * f;
        pi_[j] = dct * g * i * (T::ONE - i);
        pf_[j] = dct * cp[j] * f * (T::ONE - f);
        pg_[j] = dct * i * (T::ONE - g * g);
        po_[j] = d_o * o * (T::ONE - o);
        if PROJ {
            mm[j] = o * tc;
        }
    }
}

/// GRU backward over one row. `gates`: `[r z n hn]` in, `[dr dz dn∘r dn]` out (the
/// pre-activation gradients; `dn ∘ r` is the gradient of `R_n h + b_Rn`). `dh`: gradient
/// of the new `h`. `h_prev`: the state entering the step. `direct`: the part of `dh_prev`
/// that bypasses `W_hh`, `dh ∘ z`.
#[inline(always)]
pub(crate) fn gru_backward<T: Float>(
    h: usize,
    gates: &mut [T],
    dh: &[T],
    h_prev: &[T],
    direct: &mut [T],
) {
    in_blocks(
        h,
        #[inline(always)]
        |lo, n| {
            let [gr, gz, gn, ghn] = unit_blocks::<T, 4>(gates, h, lo, n);
            let mut grads = [[T::ZERO; BLOCK]; 4];
            gru_backward_loop(
                n,
                [&*gr, &*gz, &*gn, &*ghn],
                &dh[lo..lo + n],
                &h_prev[lo..lo + n],
                &mut direct[lo..lo + n],
                &mut grads,
            );
            for (dst, src) in [gr, gz, gn, ghn].into_iter().zip(&grads) {
                dst.copy_from_slice(&src[..n]);
            }
        },
    );
}

/// The loop of [`gru_backward`] (Note [Vectorised cell loops]).
#[inline(always)]
fn gru_backward_loop<T: Float>(
    n: usize,
    [gr, gz, gn, ghn]: [&[T]; 4],
    dh: &[T],
    h_prev: &[T],
    direct: &mut [T],
    grads: &mut [[T; BLOCK]; 4],
) {
    let (gr, gz, gn, ghn) = (&gr[..n], &gz[..n], &gn[..n], &ghn[..n]);
    let (dh, h_prev, direct) = (&dh[..n], &h_prev[..n], &mut direct[..n]);
    let [pr_, pz_, pnr_, pn_] = grads;
    let (pr_, pz_, pnr_, pn_) = (&mut pr_[..n], &mut pz_[..n], &mut pnr_[..n], &mut pn_[..n]);
    for j in 0..n {
        let (r, z, nn, hn) = (gr[j], gz[j], gn[j], ghn[j]);
        let d = dh[j];
        let pn = d * (T::ONE - z) * (T::ONE - nn * nn);
        direct[j] = d * z;
        pr_[j] = pn * hn * r * (T::ONE - r);
        pz_[j] = d * (h_prev[j] - nn) * z * (T::ONE - z);
        pnr_[j] = pn * r;
        pn_[j] = pn;
    }
}

/// Plain RNN backward over one row: `gates` `h'` in, the pre-activation gradient out.
#[inline(always)]
pub(crate) fn rnn_backward<T: Float, const RELU: bool>(h: usize, gates: &mut [T], dh: &[T]) {
    in_blocks(
        h,
        #[inline(always)]
        |lo, n| {
            let dh = &dh[lo..lo + n];
            let y = &mut gates[lo..lo + n];
            for j in 0..n {
                let v = y[j];
                y[j] = if RELU {
                    if v > T::ZERO {
                        dh[j]
                    } else {
                        T::ZERO
                    }
                } else {
                    dh[j] * (T::ONE - v * v)
                };
            }
        },
    );
}
