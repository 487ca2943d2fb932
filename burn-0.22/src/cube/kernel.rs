//! The CubeCL kernels: one step of the forward scan, the LSTM projection of a step, one
//! step of the backward scan, the LSTM cell's backward after the projection's, a gather
//! of weight blocks and a copy that zeroes padded rows.
//!
//! Every buffer is a contiguous, row-major `F` array indexed by hand (the host makes each
//! one contiguous first, Note [Cube buffers] in `super`). A unit of a step kernel owns a
//! tile of `UNITS` columns (hidden or state units) × `ROWS` sequences, for every gate: it
//! accumulates the tile's products in registers, then runs the cell update of those
//! (unit, sequence) pairs on the spot (Note [Step kernel] in `super`).
//!
//! Grid: `x` covers the columns (`CUBE_DIM_X · UNITS` per cube), `y` the sequences
//! (`ROWS` per cube), `z` the directions: both directions of a layer run in one launch,
//! direction 0 at step `t = s`, direction 1 at `t = T - 1 - s` (and the reverse in the
//! backward).
//!
//! One file although it passes 700 lines: the kernels share the device-side helpers at
//! the top (activations, tile loads, the cell's math), which CubeCL expands into each
//! kernel, and the forward and backward kernels of one cell read best side by side.
//!
//! This file is the Burn 0.21 line's `cube/kernel.rs` compiled against cubecl 0.11: its code
//! differs from that copy only where cubecl 0.11 does (checked loads where 0.10's
//! `read_unchecked` was safe; `&*` to pass a `&mut` tensor where a `&` is expected), and
//! `tests/kernel_source.rs` fails when the two copies drift apart in anything else.

use cubecl::prelude::*;

/// Modes, as the kernels' compile-time parameter.
pub(crate) const LSTM: u32 = 0;
pub(crate) const GRU: u32 = 1;
pub(crate) const RNN_TANH: u32 = 2;
pub(crate) const RNN_RELU: u32 = 3;

/// Gates of a mode: LSTM 4, GRU 3, RNN 1.
pub(crate) const fn num_gates(mode: u32) -> usize {
    match mode {
        LSTM => 4,
        GRU => 3,
        _ => 1,
    }
}

/// Width `W` of a reserve gate row, in units of `H` (Note [Cube reserve] in `super`).
pub(crate) const fn gate_row_blocks(mode: u32) -> usize {
    match mode {
        LSTM => 5,
        GRU => 4,
        _ => 1,
    }
}

/// Sizes of one layer's scan and where one step sits in it.
#[derive(CubeLaunch, CubeType)]
pub(crate) struct Scan {
    /// `T`, `B`, `H`, `P`, `D`.
    pub steps: u32,
    pub batch: u32,
    pub hidden: u32,
    pub state: u32,
    pub dirs: u32,
    /// 1 when rows are `b·T + t`, 0 when `t·B + b` (Note [Cube rows] in `super`).
    pub batch_first: u32,
    /// The step's position `s` in the scan (`0..T`; the backward's `T` finishes it).
    pub step: u32,
    /// `layer · D`: the first pseudo-layer of the layer in `[L·D, B, ·]` state tensors.
    pub layer_base: u32,
}

/// Where the forward step reads its input projection and biases.
#[derive(CubeLaunch, CubeType)]
pub(crate) struct Sources {
    /// Element `(row, d, g, j)` of the projection is at
    /// `row · xw_row + d · xw_dir + g · xw_gate + j` (skip input: `x` itself, with
    /// `xw_dir = xw_gate = 0`).
    pub xw_row: u32,
    pub xw_dir: u32,
    pub xw_gate: u32,
    /// Element `(d, b, k)` of the state entering the step is at
    /// `h_base + d · B · P + b · P + k`.
    pub h_base: u32,
    /// Offsets of `b_ih` and `b_hh` of each direction in the flat weights, and whether
    /// they exist.
    pub b_ih0: u32,
    pub b_ih1: u32,
    pub b_hh0: u32,
    pub b_hh1: u32,
    pub has_b_ih: u32,
    pub has_b_hh: u32,
}

/// Offsets of a layer's `W_hh` (and `W_hr`) of each direction in the flat weights.
#[derive(CubeLaunch, CubeType)]
pub(crate) struct Recurrent {
    pub w_hh0: u32,
    pub w_hh1: u32,
    pub w_hr0: u32,
    pub w_hr1: u32,
}

/// `1 / (1 + e^-x)`: one `exp`; saturates to 0 or 1 without a NaN.
#[cube]
fn sigmoid<F: Float>(x: F) -> F {
    F::new(1.0) / (F::new(1.0) + F::exp(F::new(0.0) - x))
}

/// `tanh(x) = 2 σ(2x) - 1`: saturates to ±1 without a NaN (a backend's `tanh` may not).
#[cube]
fn tanh_<F: Float>(x: F) -> F {
    F::new(2.0) / (F::new(1.0) + F::exp(F::new(-2.0) * x)) - F::new(1.0)
}

/// `t[index]`, or zero when `present` is false.
#[cube]
fn read_if<F: Float>(t: &Tensor<F>, present: bool, index: usize) -> F {
    let mut v = F::new(0.0);
    if present {
        v = t[index];
    }
    v
}

/// The row of step `t` of sequence `b` (Note [Cube rows] in `super`).
#[cube]
fn row_of(t: usize, b: usize, steps: usize, batch: usize, batch_first: u32) -> usize {
    let mut row = t * batch + b;
    if batch_first == 1 {
        row = b * steps + t;
    }
    row
}

/// The offset of direction `d`'s block in the flat weights: `first` for the forward
/// direction, `second` for the reverse.
#[cube]
fn of_direction(d: usize, first: u32, second: u32) -> usize {
    let mut offset = first as usize;
    if d == 1 {
        offset = second as usize;
    }
    offset
}

/// The step direction `d` processes at scan position `s` of the forward: `s` forward,
/// `T - 1 - s` in reverse.
#[cube]
fn forward_time(s: usize, d: usize, steps: usize) -> usize {
    let mut t = s;
    if d == 1 {
        t = steps - 1 - s;
    }
    t
}

/// Column `u` of this unit's tile: tiles of `UNITS` columns per unit interleave, so that
/// neighbouring units read neighbouring weights (Note [Step kernel] in `super`).
#[cube]
fn tile_column(u: usize, #[comptime] units: usize) -> usize {
    (CUBE_POS_X as usize * units + u) * CUBE_DIM_X as usize + UNIT_POS_X as usize
}

/// `acc[(g · UNITS + u) · ROWS + r] += Σ_i a[a_rows[r] + i] · b[b_base + i · b_stride +
/// g · g_stride + cols[u]]` over `i < len`: one tile of a matrix product, every loaded
/// value used `G · UNITS` (`a`) or `ROWS` (`b`) times.
///
/// The indices are in bounds by construction (callers clamp rows and columns to the
/// buffers' sizes); the loads are checked all the same (Note [Step kernel] in `super`:
/// the 0.21 line's copy skips the check here).
#[cube]
#[allow(clippy::too_many_arguments)]
fn tile_product<F: Float>(
    a: &Tensor<F>,
    a_rows: &Array<usize>,
    b: &Tensor<F>,
    b_base: usize,
    b_stride: usize,
    g_stride: usize,
    cols: &Array<usize>,
    len: usize,
    acc: &mut Array<F>,
    #[comptime] gates: usize,
    #[comptime] units: usize,
    #[comptime] rows: usize,
) {
    let mut av = Array::<F>::new(rows);
    for i in 0..len {
        #[unroll]
        for r in 0..rows {
            av[r] = a[a_rows[r] + i];
        }
        let bi = b_base + i * b_stride;
        #[unroll]
        for g in 0..gates {
            #[unroll]
            for u in 0..units {
                let bv = b[bi + g * g_stride + cols[u]];
                #[unroll]
                for r in 0..rows {
                    acc[(g * units + u) * rows + r] += bv * av[r];
                }
            }
        }
    }
}

/// `n` zeros (a tile's accumulators).
#[cube]
fn zeros<F: Float>(#[comptime] n: usize) -> Array<F> {
    let mut acc = Array::<F>::new(n);
    #[unroll]
    for i in 0..n {
        acc[i] = F::new(0.0);
    }
    acc
}

/// The columns of this unit's tile, clamped to `n` (for loads; stores check `< n`).
#[cube]
fn tile_columns(n: usize, #[comptime] units: usize) -> Array<usize> {
    let mut cols = Array::<usize>::new(units);
    #[unroll]
    for u in 0..units {
        let mut c = tile_column(u, units);
        if c >= n {
            c = n - 1;
        }
        cols[u] = c;
    }
    cols
}

/// The sequence of row `r` of this unit's tile, clamped to `batch` (for loads).
#[cube]
fn clamped_sequence(r: usize, batch: usize, #[comptime] rows: usize) -> usize {
    let mut b = CUBE_POS_Y as usize * rows + r;
    if b >= batch {
        b = batch - 1;
    }
    b
}

/// One forward step of one layer, both directions (Note [Step kernel] in `super`).
///
/// A unit computes the recurrent products of `UNITS` hidden units of `ROWS` sequences,
/// all gates, and stages them in `pre` (`[D, B, G·H]`, its own tile only); then, one
/// (unit, sequence) at a time, the cell update. Without projection (`PROJ` false) it
/// writes the new state `out` (`[D, B, P]`), the layer output `y` (`[T·B, D·P]` rows),
/// `h_n` at the last step, and (`TRAIN`) the gate rows and `h_prev` rows of the reserve.
/// With projection it writes `o ∘ tanh(c')` into `out` (`[D, B, H]`), the cell state and
/// the reserve, and [`project_step`] does the rest. The cell state `cell` (`[L·D, B, H]`,
/// LSTM) is updated in place.
#[cube(launch)]
#[allow(clippy::too_many_arguments, unused_assignments)]
pub(crate) fn forward_step<F: Float>(
    xw: &Tensor<F>,
    weights: &Tensor<F>,
    w_hh_t: &Tensor<F>,
    lengths: &Tensor<u32>,
    h_src: &Tensor<F>,
    out: &mut Tensor<F>,
    cell: &mut Tensor<F>,
    y: &mut Tensor<F>,
    h_n: &mut Tensor<F>,
    gates: &mut Tensor<F>,
    h_prev: &mut Tensor<F>,
    pre: &mut Tensor<F>,
    scan: Scan,
    src: Sources,
    #[comptime] mode: u32,
    #[comptime] units: usize,
    #[comptime] rows: usize,
    #[comptime] proj: bool,
    #[comptime] train: bool,
) {
    let n_gates = comptime![num_gates(mode)];
    let blocks = comptime![gate_row_blocks(mode)];
    let h = scan.hidden as usize;
    let p = scan.state as usize;
    let batch = scan.batch as usize;
    let steps = scan.steps as usize;
    let nd = scan.dirs as usize;
    if tile_column(0, units) >= h {
        terminate!();
    }
    let d = CUBE_POS_Z as usize;
    let b0 = CUBE_POS_Y as usize * rows;
    let s = scan.step as usize;
    let t = forward_time(s, d, steps);
    let gh = h * n_gates;
    let h_base = src.h_base as usize + d * batch * p;

    // The recurrent product h · W_hh^T of the tile, every gate.
    let mut acc = zeros::<F>(comptime![n_gates * units * rows]);
    let mut h_rows = Array::<usize>::new(rows);
    #[unroll]
    for r in 0..rows {
        h_rows[r] = h_base + clamped_sequence(r, batch, rows) * p;
    }
    let cols = tile_columns(h, units);
    tile_product::<F>(
        h_src,
        &h_rows,
        w_hh_t,
        d * p * gh,
        gh,
        h,
        &cols,
        p,
        &mut acc,
        n_gates,
        units,
        rows,
    );
    #[unroll]
    for g in 0..n_gates {
        #[unroll]
        for u in 0..units {
            #[unroll]
            for r in 0..rows {
                let b = b0 + r;
                let j = tile_column(u, units);
                if b < batch && j < h {
                    pre[(d * batch + b) * gh + g * h + j] = acc[(g * units + u) * rows + r];
                }
            }
        }
    }

    let has_b_ih = src.has_b_ih == 1;
    let has_b_hh = src.has_b_hh == 1;
    let xw_gate = src.xw_gate as usize;
    let last = s + 1 == steps;
    let layer_base = scan.layer_base as usize;
    let y_w = nd * p;
    let width = blocks * h;
    // The cell update, one (unit, sequence) of the tile at a time (a loop, not unrolled:
    // the code of one cell is enough).
    for i in 0..units * rows {
        let j = tile_column(i / rows, units);
        let b = b0 + i % rows;
        if j < h && b < batch {
            let b_ih = of_direction(d, src.b_ih0, src.b_ih1) + j;
            let b_hh = of_direction(d, src.b_hh0, src.b_hh1) + j;
            let valid = t < lengths[b] as usize;
            let row = row_of(t, b, steps, batch, scan.batch_first);
            let res_row = (d * steps * batch + row) * width + j;
            let held = h_base + b * p + j;
            let acc_i = (d * batch + b) * gh + j;
            if valid {
                let xb = row * src.xw_row as usize + d * src.xw_dir as usize + j;
                let mut hv_new = F::new(0.0);
                if comptime![mode == LSTM] {
                    let pi = xw[xb]
                        + pre[acc_i]
                        + read_if::<F>(weights, has_b_ih, b_ih)
                        + read_if::<F>(weights, has_b_hh, b_hh);
                    let pf = xw[xb + xw_gate]
                        + pre[acc_i + h]
                        + read_if::<F>(weights, has_b_ih, b_ih + h)
                        + read_if::<F>(weights, has_b_hh, b_hh + h);
                    let pg = xw[xb + 2 * xw_gate]
                        + pre[acc_i + 2 * h]
                        + read_if::<F>(weights, has_b_ih, b_ih + 2 * h)
                        + read_if::<F>(weights, has_b_hh, b_hh + 2 * h);
                    let po = xw[xb + 3 * xw_gate]
                        + pre[acc_i + 3 * h]
                        + read_if::<F>(weights, has_b_ih, b_ih + 3 * h)
                        + read_if::<F>(weights, has_b_hh, b_hh + 3 * h);
                    let ig = sigmoid::<F>(pi);
                    let fg = sigmoid::<F>(pf);
                    let gg = tanh_::<F>(pg);
                    let og = sigmoid::<F>(po);
                    let ci = (layer_base + d) * batch * h + b * h + j;
                    let c_prev = cell[ci];
                    let c_new = fg * c_prev + ig * gg;
                    cell[ci] = c_new;
                    hv_new = og * tanh_::<F>(c_new);
                    if train {
                        gates[res_row] = ig;
                        gates[res_row + h] = fg;
                        gates[res_row + 2 * h] = gg;
                        gates[res_row + 3 * h] = og;
                        gates[res_row + 4 * h] = c_prev;
                    }
                } else if comptime![mode == GRU] {
                    let pr = xw[xb]
                        + pre[acc_i]
                        + read_if::<F>(weights, has_b_ih, b_ih)
                        + read_if::<F>(weights, has_b_hh, b_hh);
                    let pz = xw[xb + xw_gate]
                        + pre[acc_i + h]
                        + read_if::<F>(weights, has_b_ih, b_ih + h)
                        + read_if::<F>(weights, has_b_hh, b_hh + h);
                    let hn = pre[acc_i + 2 * h] + read_if::<F>(weights, has_b_hh, b_hh + 2 * h);
                    let rg = sigmoid::<F>(pr);
                    let zg = sigmoid::<F>(pz);
                    let ng = tanh_::<F>(
                        xw[xb + 2 * xw_gate]
                            + read_if::<F>(weights, has_b_ih, b_ih + 2 * h)
                            + rg * hn,
                    );
                    let hp = h_src[held];
                    hv_new = ng + zg * (hp - ng);
                    if train {
                        gates[res_row] = rg;
                        gates[res_row + h] = zg;
                        gates[res_row + 2 * h] = ng;
                        gates[res_row + 3 * h] = hn;
                    }
                } else {
                    let a = xw[xb]
                        + pre[acc_i]
                        + read_if::<F>(weights, has_b_ih, b_ih)
                        + read_if::<F>(weights, has_b_hh, b_hh);
                    if comptime![mode == RNN_TANH] {
                        hv_new = tanh_::<F>(a);
                    } else {
                        hv_new = F::max(a, F::new(0.0));
                    }
                    if train {
                        gates[res_row] = hv_new;
                    }
                }
                if proj {
                    out[(d * batch + b) * h + j] = hv_new;
                } else {
                    out[(d * batch + b) * p + j] = hv_new;
                    y[row * y_w + d * p + j] = hv_new;
                    if last {
                        h_n[(layer_base + d) * batch * p + b * p + j] = hv_new;
                    }
                }
                if train && j < p {
                    h_prev[(d * steps * batch + row) * p + j] = h_src[held];
                }
            } else {
                // Past the end: hold the state, output zero (Note [Padding never leaks] in
                // `crate::reference`); the reserve's rows are zero.
                if !proj {
                    let kept = h_src[held];
                    out[(d * batch + b) * p + j] = kept;
                    y[row * y_w + d * p + j] = F::new(0.0);
                    if last {
                        h_n[(layer_base + d) * batch * p + b * p + j] = kept;
                    }
                }
                if train {
                    #[unroll]
                    for k in 0..blocks {
                        gates[res_row + k * h] = F::new(0.0);
                    }
                    if j < p {
                        h_prev[(d * steps * batch + row) * p + j] = F::new(0.0);
                    }
                }
            }
        }
    }
}

/// The LSTM projection of one forward step: `h' = m W_hr^T` for `UNITS` state units of
/// `ROWS` sequences, then what [`forward_step`] does without projection: the select,
/// `out`, `y` and `h_n`.
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn project_step<F: Float>(
    m: &Tensor<F>,
    w_hr_t: &Tensor<F>,
    lengths: &Tensor<u32>,
    h_src: &Tensor<F>,
    out: &mut Tensor<F>,
    y: &mut Tensor<F>,
    h_n: &mut Tensor<F>,
    scan: Scan,
    h_base: u32,
    #[comptime] units: usize,
    #[comptime] rows: usize,
) {
    let h = scan.hidden as usize;
    let p = scan.state as usize;
    let batch = scan.batch as usize;
    let steps = scan.steps as usize;
    let nd = scan.dirs as usize;
    if tile_column(0, units) >= p {
        terminate!();
    }
    let d = CUBE_POS_Z as usize;
    let b0 = CUBE_POS_Y as usize * rows;
    let s = scan.step as usize;
    let t = forward_time(s, d, steps);
    let mut acc = zeros::<F>(comptime![units * rows]);
    let mut m_rows = Array::<usize>::new(rows);
    #[unroll]
    for r in 0..rows {
        m_rows[r] = (d * batch + clamped_sequence(r, batch, rows)) * h;
    }
    let cols = tile_columns(p, units);
    tile_product::<F>(
        m,
        &m_rows,
        w_hr_t,
        d * h * p,
        p,
        0usize,
        &cols,
        h,
        &mut acc,
        1usize,
        units,
        rows,
    );
    let last = s + 1 == steps;
    let layer_base = scan.layer_base as usize;
    let h_base = h_base as usize + d * batch * p;
    #[unroll]
    for u in 0..units {
        #[unroll]
        for r in 0..rows {
            let b = b0 + r;
            let k = tile_column(u, units);
            if b < batch && k < p {
                let valid = t < lengths[b] as usize;
                let row = row_of(t, b, steps, batch, scan.batch_first);
                let mut value = h_src[h_base + b * p + k];
                let mut y_value = F::new(0.0);
                if valid {
                    value = acc[u * rows + r];
                    y_value = value;
                }
                out[(d * batch + b) * p + k] = value;
                y[row * nd * p + d * p + k] = y_value;
                if last {
                    h_n[(layer_base + d) * batch * p + b * p + k] = value;
                }
            }
        }
    }
}

/// The time step direction `d` processes at position `s` of the backward scan (against
/// the forward's order).
#[cube]
fn backward_time(s: usize, d: usize, steps: usize) -> usize {
    let mut t = s;
    if d == 0 {
        t = steps - 1 - s;
    }
    t
}

/// One step of the backward scan of one layer, both directions (Note [Backward step
/// kernel] in `super`).
///
/// First it finishes the previous step's recurrence: `dh += dG_prev · W_hh` for `UNITS`
/// state units of `ROWS` sequences, at the sequences that step was valid for. At `s = T`
/// that is all it does (`dh` then holds `dh0`). Then, without projection (`PROJ` false,
/// `P = H`), the cell backward of step `t`, one (unit, sequence) at a time: the gates'
/// pre-activation gradients into `dg` (`[T·B, D·G·H]`; GRU's `R_n h + b_hn` gradient into
/// `dn`, `[T·B, D·H]`), the carried `dc` in place, and what `dh` carries to the next step
/// (GRU's `dh' ∘ z`, else zero). With projection it only writes the step's output
/// gradient `dh'` into `dproj` (`[T·B, D·P]`), and [`backward_cell`] runs the cell.
#[cube(launch)]
#[allow(clippy::too_many_arguments, clippy::collapsible_if)]
pub(crate) fn backward_step<F: Float>(
    weights: &Tensor<F>,
    lengths: &Tensor<u32>,
    gates: &Tensor<F>,
    h_prev: &Tensor<F>,
    dy: &Tensor<F>,
    dg: &mut Tensor<F>,
    dn: &mut Tensor<F>,
    dh: &mut Tensor<F>,
    dc: &mut Tensor<F>,
    dproj: &mut Tensor<F>,
    scan: Scan,
    rec: Recurrent,
    #[comptime] mode: u32,
    #[comptime] units: usize,
    #[comptime] rows: usize,
    #[comptime] proj: bool,
) {
    let n_gates = comptime![num_gates(mode)];
    let h = scan.hidden as usize;
    let p = scan.state as usize;
    let batch = scan.batch as usize;
    let steps = scan.steps as usize;
    let nd = scan.dirs as usize;
    if tile_column(0, units) >= p {
        terminate!();
    }
    let d = CUBE_POS_Z as usize;
    let b0 = CUBE_POS_Y as usize * rows;
    let s = scan.step as usize;
    let gh = h * n_gates;
    let dg_w = nd * gh;
    let carry_base = (scan.layer_base as usize + d) * batch * p;

    if s > 0 {
        // dh += dG_prev W_hh at the sequences the previous step was valid for.
        let tp = backward_time(s - 1, d, steps);
        let w_hh = of_direction(d, rec.w_hh0, rec.w_hh1);
        let mut acc = zeros::<F>(comptime![units * rows]);
        let mut g_rows = Array::<usize>::new(rows);
        let mut n_rows = Array::<usize>::new(rows);
        #[unroll]
        for r in 0..rows {
            let row = row_of(
                tp,
                clamped_sequence(r, batch, rows),
                steps,
                batch,
                scan.batch_first,
            );
            g_rows[r] = row * dg_w + d * gh;
            n_rows[r] = row * nd * h + d * h;
        }
        let cols = tile_columns(p, units);
        // GRU: the n block of the recurrent operand is dn (the gradient of R_n h + b_hn).
        let direct = comptime![if mode == GRU { 2 } else { n_gates }] * h;
        tile_product::<F>(
            &*dg, &g_rows, weights, w_hh, p, 0usize, &cols, direct, &mut acc, 1usize, units, rows,
        );
        if comptime![mode == GRU] {
            tile_product::<F>(
                &*dn,
                &n_rows,
                weights,
                w_hh + 2 * h * p,
                p,
                0usize,
                &cols,
                h,
                &mut acc,
                1usize,
                units,
                rows,
            );
        }
        #[unroll]
        for u in 0..units {
            #[unroll]
            for r in 0..rows {
                let b = b0 + r;
                let k = tile_column(u, units);
                // Nested: `lengths[b]` is read only for a sequence that exists.
                if b < batch && k < p {
                    if tp < lengths[b] as usize {
                        dh[carry_base + b * p + k] += acc[u * rows + r];
                    }
                }
            }
        }
    }
    if s == steps {
        terminate!();
    }

    let t = backward_time(s, d, steps);
    let blocks = comptime![gate_row_blocks(mode)];
    let width = blocks * h;
    // The step, one (unit, sequence) of the tile at a time.
    for i in 0..units * rows {
        let k = tile_column(i / rows, units);
        let b = b0 + i % rows;
        if k < p && b < batch {
            let valid = t < lengths[b] as usize;
            let row = row_of(t, b, steps, batch, scan.batch_first);
            let ci = carry_base + b * p + k;
            let dy_i = row * nd * p + d * p + k;
            if proj {
                let mut v = F::new(0.0);
                if valid {
                    v = dy[dy_i] + dh[ci];
                    dh[ci] = F::new(0.0);
                }
                dproj[dy_i] = v;
            } else {
                let gi = row * dg_w + d * gh + k;
                let res = (d * steps * batch + row) * width + k;
                if valid {
                    let dht = dy[dy_i] + dh[ci];
                    if comptime![mode == LSTM] {
                        let dci = (scan.layer_base as usize + d) * batch * h + b * h + k;
                        let _m = lstm_cell_backward::<F>(gates, res, h, dht, dc, dci, dg, gi);
                        dh[ci] = F::new(0.0);
                    } else if comptime![mode == GRU] {
                        let rg = gates[res];
                        let zg = gates[res + h];
                        let ng = gates[res + 2 * h];
                        let hn = gates[res + 3 * h];
                        let hp = h_prev[(d * steps * batch + row) * p + k];
                        let one = F::new(1.0);
                        let pn = dht * (one - zg) * (one - ng * ng);
                        let pz = dht * (hp - ng) * zg * (one - zg);
                        let pr = pn * hn * rg * (one - rg);
                        dg[gi] = pr;
                        dg[gi + h] = pz;
                        dg[gi + 2 * h] = pn;
                        dn[row * nd * h + d * h + k] = pn * rg;
                        dh[ci] = dht * zg;
                    } else {
                        let v = gates[res];
                        let mut da = dht * (F::new(1.0) - v * v);
                        if comptime![mode == RNN_RELU] {
                            da = F::new(0.0);
                            if v > F::new(0.0) {
                                da = dht;
                            }
                        }
                        dg[gi] = da;
                        dh[ci] = F::new(0.0);
                    }
                } else {
                    // No gradient from padding; dh and dc pass unchanged.
                    #[unroll]
                    for g in 0..n_gates {
                        dg[gi + g * h] = F::new(0.0);
                    }
                    if comptime![mode == GRU] {
                        dn[row * nd * h + d * h + k] = F::new(0.0);
                    }
                }
            }
        }
    }
}

/// The LSTM cell's backward at one (row, unit): from `dm`, the gradient of
/// `m = o ∘ tanh(c')`, and the carried `dc` (updated in place to `dc_prev`), the gates'
/// pre-activation gradients into `dg[gi + g·H]`. Returns `m`.
#[cube]
#[allow(clippy::too_many_arguments)]
fn lstm_cell_backward<F: Float>(
    gates: &Tensor<F>,
    res: usize,
    h: usize,
    dm: F,
    dc: &mut Tensor<F>,
    dci: usize,
    dg: &mut Tensor<F>,
    gi: usize,
) -> F {
    let one = F::new(1.0);
    let ig = gates[res];
    let fg = gates[res + h];
    let gg = gates[res + 2 * h];
    let og = gates[res + 3 * h];
    let cp = gates[res + 4 * h];
    let c = fg * cp + ig * gg;
    let tc = tanh_::<F>(c);
    let dct = dc[dci] + dm * og * (one - tc * tc);
    dc[dci] = dct * fg;
    dg[gi] = dct * gg * ig * (one - ig);
    dg[gi + h] = dct * cp * fg * (one - fg);
    dg[gi + 2 * h] = dct * ig * (one - gg * gg);
    dg[gi + 3 * h] = dm * tc * og * (one - og);
    og * tc
}

/// The LSTM cell's backward of one step after a projection, both directions: `dm = dh'
/// W_hr` for `UNITS` hidden units of `ROWS` sequences (staged in `m_out`), then the cell
/// backward, one (unit, sequence) at a time; `m = o ∘ tanh(c')` then replaces `dm` in
/// `m_out` (`[T·B, D·H]`, zero at padded rows) for `dW_hr`.
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn backward_cell<F: Float>(
    weights: &Tensor<F>,
    lengths: &Tensor<u32>,
    gates: &Tensor<F>,
    dproj: &Tensor<F>,
    dg: &mut Tensor<F>,
    dc: &mut Tensor<F>,
    m_out: &mut Tensor<F>,
    scan: Scan,
    rec: Recurrent,
    #[comptime] units: usize,
    #[comptime] rows: usize,
) {
    let h = scan.hidden as usize;
    let p = scan.state as usize;
    let batch = scan.batch as usize;
    let steps = scan.steps as usize;
    let nd = scan.dirs as usize;
    if tile_column(0, units) >= h {
        terminate!();
    }
    let d = CUBE_POS_Z as usize;
    let b0 = CUBE_POS_Y as usize * rows;
    let t = backward_time(scan.step as usize, d, steps);
    let w_hr = of_direction(d, rec.w_hr0, rec.w_hr1);
    let mut acc = zeros::<F>(comptime![units * rows]);
    let mut p_rows = Array::<usize>::new(rows);
    #[unroll]
    for r in 0..rows {
        let b = clamped_sequence(r, batch, rows);
        p_rows[r] = row_of(t, b, steps, batch, scan.batch_first) * nd * p + d * p;
    }
    let cols = tile_columns(h, units);
    tile_product::<F>(
        dproj, &p_rows, weights, w_hr, h, 0usize, &cols, p, &mut acc, 1usize, units, rows,
    );
    #[unroll]
    for u in 0..units {
        #[unroll]
        for r in 0..rows {
            let b = b0 + r;
            let j = tile_column(u, units);
            if b < batch && j < h {
                let row = row_of(t, b, steps, batch, scan.batch_first);
                m_out[row * nd * h + d * h + j] = acc[u * rows + r];
            }
        }
    }
    let gh = 4 * h;
    for i in 0..units * rows {
        let j = tile_column(i / rows, units);
        let b = b0 + i % rows;
        if j < h && b < batch {
            let row = row_of(t, b, steps, batch, scan.batch_first);
            let gi = row * nd * gh + d * gh + j;
            let mi = row * nd * h + d * h + j;
            if t < lengths[b] as usize {
                let res = (d * steps * batch + row) * 5 * h + j;
                let dci = (scan.layer_base as usize + d) * batch * h + b * h + j;
                let dm = m_out[mi];
                m_out[mi] = lstm_cell_backward::<F>(gates, res, h, dm, dc, dci, dg, gi);
            } else {
                #[unroll]
                for g in 0..4 {
                    dg[gi + g * h] = F::new(0.0);
                }
                m_out[mi] = F::new(0.0);
            }
        }
    }
}

/// Copies `D` blocks of `rows × cols` from the flat weights (at `off0`, `off1`) into
/// `dst` (`[D, rows, cols]`), or transposed (`[D, cols, rows]`).
#[cube(launch)]
pub(crate) fn gather_blocks<F: Float>(
    src: &Tensor<F>,
    dst: &mut Tensor<F>,
    off0: u32,
    off1: u32,
    rows: u32,
    cols: u32,
    #[comptime] transpose: bool,
) {
    let idx = ABSOLUTE_POS;
    if idx >= dst.len() {
        terminate!();
    }
    let block = rows as usize * cols as usize;
    let d = idx / block;
    let rem = idx % block;
    let base = of_direction(d, off0, off1);
    if transpose {
        let k = rem / rows as usize;
        let r = rem % rows as usize;
        dst[idx] = src[base + r * cols as usize + k];
    } else {
        dst[idx] = src[base + rem];
    }
}

/// `dst = src` with the rows of padded steps set to zero (`features` per row).
#[cube(launch)]
pub(crate) fn zero_padded_rows<F: Float>(
    src: &Tensor<F>,
    lengths: &Tensor<u32>,
    dst: &mut Tensor<F>,
    steps: u32,
    batch: u32,
    features: u32,
    batch_first: u32,
) {
    let idx = ABSOLUTE_POS;
    if idx >= dst.len() {
        terminate!();
    }
    let row = idx / features as usize;
    let mut t = row / batch as usize;
    let mut b = row % batch as usize;
    if batch_first == 1 {
        t = row % steps as usize;
        b = row / steps as usize;
    }
    let mut v = F::new(0.0);
    if t < lengths[b] as usize {
        v = src[idx];
    }
    dst[idx] = v;
}
