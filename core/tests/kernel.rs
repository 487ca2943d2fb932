//! The native CPU kernel against a plain scalar implementation on slices, written here from
//! the equations alone (ARCHITECTURE.md, "Canonical layout"): every mode, layers, both
//! directions, projection, skip input, variable lengths, both layouts, at every SIMD level
//! this CPU has, in `f64` and `f32`; and the backward against central finite differences
//! of that implementation.

use burn_fused_rnn_core::cpu::projection::{
    with_input_projection, with_k_chunk, with_next_chunk_ahead, with_projection_block,
    InputProjection,
};
use burn_fused_rnn_core::cpu::simd::{with_simd_level, SimdLevel};
use burn_fused_rnn_core::cpu::{self, HostInputs, OutputGrads};
use burn_fused_rnn_core::random::SplitMix64;
use burn_fused_rnn_core::{
    DropoutSpec, GradsWanted, ParamKind, RnnDescriptor, RnnLayout, RnnMode, RnnSpec,
};

/// `n` values in `[-scale, scale)`, the same on every run.
fn values(n: usize, seed: u64, scale: f64) -> Vec<f64> {
    let mut rng = SplitMix64::new(seed);
    (0..n).map(|_| rng.next_symmetric(scale)).collect()
}

/// Runs `f` at every SIMD level this CPU has, each with the input projection fused and
/// ahead (Note [Input projection]) and the step products' reduction in one chunk and in
/// small chunks, the small ones asking for each next chunk ahead (Note [Next chunk ahead]),
/// all forced on this thread, so that a level or a path the machine would not pick by
/// itself is still checked.
fn with_levels(f: impl Fn(SimdLevel)) {
    for level in SimdLevel::available() {
        for projection in InputProjection::ALL {
            // The reduction in chunks chosen from the L1 (one chunk at these sizes), and
            // in chunks of 3 steps (Note [Reduction chunks]), the next one asked for
            // ahead (which weights this small would not be).
            for k_chunk in [None, Some(3)] {
                with_simd_level(level, || {
                    with_input_projection(projection, || match k_chunk {
                        Some(k) => with_k_chunk(k, || with_next_chunk_ahead(true, || f(level))),
                        None => f(level),
                    })
                });
            }
        }
    }
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// What the plain implementation returns: `y`, `h_n`, `c_n` (empty without a cell state).
struct Plain {
    y: Vec<f64>,
    h_n: Vec<f64>,
    c_n: Vec<f64>,
}

/// The network of `desc` on `x`, `h0`, `c0`, `w`, one element at a time.
fn plain(desc: &RnnDescriptor, x: &[f64], h0: &[f64], c0: &[f64], w: &[f64]) -> Plain {
    let spec = desc.spec;
    let layout = RnnLayout::new(spec);
    let (t_len, b_len) = (desc.seq_length, desc.batch_size);
    let (h, p, nd, g) = (
        spec.d_hidden,
        spec.d_state(),
        spec.num_directions(),
        spec.mode.num_gates(),
    );
    let lengths = desc
        .seq_lengths
        .clone()
        .unwrap_or_else(|| vec![t_len; b_len]);
    let row = |t: usize, b: usize| {
        if desc.batch_first {
            b * t_len + t
        } else {
            t * b_len + b
        }
    };
    let param = |layer: usize, d: usize, kind: ParamKind| {
        layout
            .entry(layer, d, kind)
            .map(|e| &w[e.offset..e.offset + e.len()])
    };
    let mut input: Vec<f64> = x.to_vec();
    let mut h_n = vec![0.0; spec.num_pseudo_layers() * b_len * p];
    let mut c_n = vec![
        0.0;
        if spec.mode == RnnMode::Lstm {
            spec.num_pseudo_layers() * b_len * h
        } else {
            0
        }
    ];
    for layer in 0..spec.num_layers {
        let in_l = spec.layer_input_size(layer);
        let mut out = vec![0.0; t_len * b_len * nd * p];
        for d in 0..nd {
            let idx = layer * nd + d;
            let w_ih = param(layer, d, ParamKind::WeightIh);
            let w_hh = param(layer, d, ParamKind::WeightHh).unwrap();
            let b_ih = param(layer, d, ParamKind::BiasIh);
            let b_hh = param(layer, d, ParamKind::BiasHh);
            let w_hr = param(layer, d, ParamKind::WeightHr);
            for b in 0..b_len {
                let mut hs: Vec<f64> = h0[(idx * b_len + b) * p..][..p].to_vec();
                let mut cs: Vec<f64> = if c_n.is_empty() {
                    Vec::new()
                } else {
                    c0[(idx * b_len + b) * h..][..h].to_vec()
                };
                let len = lengths[b];
                let steps: Vec<usize> = if d == 0 {
                    (0..len).collect()
                } else {
                    (0..len).rev().collect()
                };
                for t in steps {
                    let xt = &input[row(t, b) * in_l..][..in_l];
                    // Input and recurrent pre-activations, each with its bias.
                    let mut wx = vec![0.0; g * h];
                    let mut rh = vec![0.0; g * h];
                    for k in 0..g * h {
                        wx[k] = match w_ih {
                            Some(m) => (0..in_l).map(|i| m[k * in_l + i] * xt[i]).sum::<f64>(),
                            None => xt[k % h], // skip input: x added to every gate
                        } + b_ih.map_or(0.0, |bv| bv[k]);
                        rh[k] = (0..p).map(|i| w_hh[k * p + i] * hs[i]).sum::<f64>()
                            + b_hh.map_or(0.0, |bv| bv[k]);
                    }
                    match spec.mode {
                        RnnMode::Lstm => {
                            let mut m = vec![0.0; h];
                            for j in 0..h {
                                let gate = |q: usize| wx[q * h + j] + rh[q * h + j];
                                let (i, f, gg, o) = (
                                    sigmoid(gate(0)),
                                    sigmoid(gate(1)),
                                    gate(2).tanh(),
                                    sigmoid(gate(3)),
                                );
                                cs[j] = f * cs[j] + i * gg;
                                m[j] = o * cs[j].tanh();
                            }
                            hs = match w_hr {
                                Some(r) => (0..p)
                                    .map(|q| (0..h).map(|j| r[q * h + j] * m[j]).sum())
                                    .collect(),
                                None => m,
                            };
                        }
                        RnnMode::Gru => {
                            hs = (0..h)
                                .map(|j| {
                                    let r = sigmoid(wx[j] + rh[j]);
                                    let z = sigmoid(wx[h + j] + rh[h + j]);
                                    let n = (wx[2 * h + j] + r * rh[2 * h + j]).tanh();
                                    (1.0 - z) * n + z * hs[j]
                                })
                                .collect();
                        }
                        RnnMode::RnnTanh => hs = (0..h).map(|j| (wx[j] + rh[j]).tanh()).collect(),
                        RnnMode::RnnRelu => hs = (0..h).map(|j| (wx[j] + rh[j]).max(0.0)).collect(),
                    }
                    out[row(t, b) * nd * p + d * p..][..p].copy_from_slice(&hs);
                }
                h_n[(idx * b_len + b) * p..][..p].copy_from_slice(&hs);
                if !c_n.is_empty() {
                    c_n[(idx * b_len + b) * h..][..h].copy_from_slice(&cs);
                }
            }
        }
        input = out;
    }
    Plain { y: input, h_n, c_n }
}

/// The descriptors the tests run: every mode, 2 layers, both directions, both layouts,
/// padding (a length of 0 included), LSTM with and without a projection, skip input.
fn cases() -> Vec<RnnDescriptor> {
    let mut out = Vec::new();
    for mode in [
        RnnMode::Lstm,
        RnnMode::Gru,
        RnnMode::RnnTanh,
        RnnMode::RnnRelu,
    ] {
        for (bidirectional, batch_first, proj, skip) in [
            (true, false, None, false),
            (false, true, None, true),
            (true, true, Some(3), false),
        ] {
            if proj.is_some() && mode != RnnMode::Lstm {
                continue;
            }
            let d_input = if skip { 5 } else { 4 };
            let spec = RnnSpec {
                num_layers: 2,
                bidirectional,
                proj_size: proj,
                skip_input: skip,
                ..RnnSpec::new(mode, d_input, 5)
            };
            out.push(RnnDescriptor::new(
                spec,
                6,
                4,
                batch_first,
                Some(vec![6, 2, 0, 5]),
                DropoutSpec::NONE,
            ));
        }
    }
    out
}

/// Which input of a [`Data`] a finite difference moves.
type Pick = fn(&mut Data) -> &mut Vec<f64>;

#[derive(Clone)]
struct Data {
    x: Vec<f64>,
    h0: Vec<f64>,
    c0: Vec<f64>,
    w: Vec<f64>,
}

fn data(desc: &RnnDescriptor) -> Data {
    Data {
        x: values(desc.input_shape().iter().product(), 1, 1.0),
        h0: values(desc.hidden_shape().iter().product(), 2, 0.5),
        c0: values(desc.cell_shape().iter().product(), 3, 0.5),
        // Small weights keep the ReLU RNN from growing.
        w: values(desc.params_size(), 4, 0.4),
    }
}

fn inputs<'a, T>(desc: &RnnDescriptor, d: &'a Converted<T>) -> HostInputs<'a, T> {
    HostInputs {
        x: &d.x,
        h0: Some(&d.h0),
        c0: desc.spec.mode.has_cell_state().then_some(&d.c0[..]),
        w: &d.w,
    }
}

struct Converted<T> {
    x: Vec<T>,
    h0: Vec<T>,
    c0: Vec<T>,
    w: Vec<T>,
}

fn convert<T>(d: &Data, f: impl Fn(f64) -> T) -> Converted<T> {
    let c = |v: &Vec<f64>| v.iter().map(|&x| f(x)).collect();
    Converted {
        x: c(&d.x),
        h0: c(&d.h0),
        c0: c(&d.c0),
        w: c(&d.w),
    }
}

fn assert_close(what: &str, got: impl IntoIterator<Item = f64>, expected: &[f64], tol: f64) {
    let got: Vec<f64> = got.into_iter().collect();
    assert_eq!(got.len(), expected.len(), "{what}: length");
    for (i, (a, e)) in got.iter().zip(expected).enumerate() {
        assert!(
            (a - e).abs() <= tol * (1.0 + e.abs()),
            "{what}[{i}]: {a} vs {e} (tol {tol})"
        );
    }
}

/// A training forward, then the backward from made-up output gradients, in `pool`.
fn train_step_in(
    pool: &rayon::ThreadPool,
    desc: &RnnDescriptor,
    d: &Converted<f64>,
) -> cpu::Grads<f64> {
    let dy = values(desc.output_shape().iter().product(), 9, 1.0);
    let dh_n = values(desc.hidden_shape().iter().product(), 10, 1.0);
    let dc_n = values(desc.cell_shape().iter().product(), 11, 1.0);
    pool.install(|| {
        let (out, reserve) = cpu::forward(desc, &inputs(desc, d), None::<&()>, true, false);
        let grads = OutputGrads {
            dy: Some(&dy),
            dh_n: Some(&dh_n),
            dc_n: desc.spec.mode.has_cell_state().then_some(&dc_n[..]),
        };
        cpu::backward(
            desc,
            &inputs(desc, d),
            &out.y,
            reserve.expect("a training forward keeps a reserve"),
            false,
            &grads,
            GradsWanted::ALL,
        )
    })
}

/// Every gradient of `got` against `want`'s, to 1e-12.
fn assert_same_grads(what: &str, got: cpu::Grads<f64>, want: &cpu::Grads<f64>) {
    assert_close(&format!("{what} dx"), got.dx, &want.dx, 1e-12);
    assert_close(&format!("{what} dh0"), got.dh0, &want.dh0, 1e-12);
    assert_close(
        &format!("{what} dc0"),
        got.dc0.unwrap_or_default(),
        want.dc0.as_deref().unwrap_or_default(),
        1e-12,
    );
    assert_close(&format!("{what} dw"), got.dweights, &want.dweights, 1e-12);
}

/// Forward (inference and training) at every SIMD level, f64 and f32.
#[test]
fn forward_matches_the_plain_implementation_at_every_simd_level() {
    for desc in cases() {
        check_forward(&desc);
    }
}

/// Batches big enough to split over threads (Note [Fused step]: each thread scans some
/// sequences whole), in a pool of 3 threads whatever the machine has, with an odd batch
/// (parts of unequal size) and padding; and the training reserve that the split forward
/// keeps, and the backward split the same way, equal those of a single thread.
#[test]
fn forward_split_over_threads_matches_the_plain_implementation() {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(3)
        .build()
        .expect("a pool of 3 threads");
    let single = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .expect("a pool of 1 thread");
    for mode in [RnnMode::Lstm, RnnMode::Gru, RnnMode::RnnTanh] {
        for (batch_first, proj) in [(false, None), (true, Some(7))] {
            if proj.is_some() && mode != RnnMode::Lstm {
                continue;
            }
            let spec = RnnSpec {
                num_layers: 2,
                proj_size: proj,
                ..RnnSpec::new(mode, 24, 32)
            };
            let lengths = vec![12, 3, 0, 12, 7, 12, 1, 12, 9];
            let desc =
                RnnDescriptor::new(spec, 12, 9, batch_first, Some(lengths), DropoutSpec::NONE);
            pool.install(|| check_forward(&desc));
            let d = data(&desc);
            let d64 = convert(&d, |v| v);
            with_levels(|level: SimdLevel| {
                let reserve = |pool: &rayon::ThreadPool| {
                    pool.install(|| {
                        cpu::forward(&desc, &inputs(&desc, &d64), None::<&()>, true, false).1
                    })
                    .expect("a training forward keeps a reserve")
                };
                let written = |r: Vec<f64>| written(&desc, r);
                let one = written(reserve(&single));
                let what = format!("{:?} {level:?}", desc.spec);
                assert_close(
                    &format!("{what} reserve, 3 threads vs 1"),
                    written(reserve(&pool)),
                    &one,
                    1e-12,
                );
                // The backward, split the same way, against one thread.
                assert_same_grads(
                    &what,
                    train_step_in(&pool, &desc, &d64),
                    &train_step_in(&single, &desc, &d64),
                );
            });
        }
    }
}

/// A decoding step (one step of one sequence in one direction) runs on the calling thread
/// (Note [One step on the caller's thread] in the core's `schedule`): two layers, with and
/// without an LSTM projection, a valid step and a length of 0, initial states; against
/// the plain implementation at every SIMD level and projection.
#[test]
fn a_decoding_step_on_the_callers_thread_matches_the_plain_implementation() {
    for (mode, proj) in [
        (RnnMode::Lstm, None),
        (RnnMode::Lstm, Some(16)),
        (RnnMode::Gru, None),
        (RnnMode::RnnRelu, None),
    ] {
        for length in [1, 0] {
            let spec = RnnSpec {
                num_layers: 2,
                proj_size: proj,
                ..RnnSpec::new(mode, 48, 64)
            };
            let desc = RnnDescriptor::new(spec, 1, 1, true, Some(vec![length]), DropoutSpec::NONE);
            check_forward(&desc);
        }
    }
}

/// The weight gradients' GEMMs split by destination rows, one share of every GEMM per
/// thread (Note [Weight gradients by rows] in the core's `backward`), equal one thread's:
/// pools of 2, 3 and 4 threads (shares of unequal size; with 4, each direction of a
/// bidirectional layer gets 2), an LSTM with a projection (`dW_hh` `P` wide, layer 1's
/// input `2P` wide), a GRU (`dW_ih` in two blocks), and an RNN with skip input (no `W_ih`,
/// `dW_hh` alone), two layers, padding. Each case's GEMMs hold at least 2^17
/// multiply-adds per pseudo-layer, so they split. Every gradient against one thread's.
#[test]
fn weight_gradients_split_over_threads_match_one_thread() {
    let single = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .expect("a pool of 1 thread");
    let specs = [
        RnnSpec {
            num_layers: 2,
            bidirectional: true,
            proj_size: Some(10),
            ..RnnSpec::new(RnnMode::Lstm, 16, 24)
        },
        RnnSpec {
            num_layers: 2,
            bidirectional: true,
            ..RnnSpec::new(RnnMode::Gru, 16, 24)
        },
        RnnSpec {
            num_layers: 2,
            skip_input: true,
            ..RnnSpec::new(RnnMode::RnnTanh, 40, 40)
        },
    ];
    for threads in [2, 3, 4] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .expect("a pool");
        for spec in &specs {
            let lengths = vec![12, 3, 0, 12, 7, 12, 1, 12, 9];
            let desc = RnnDescriptor::new(*spec, 12, 9, true, Some(lengths), DropoutSpec::NONE);
            let d = convert(&data(&desc), |v| v);
            let what = format!("{:?}, {threads} threads", desc.spec);
            assert_same_grads(
                &what,
                train_step_in(&pool, &desc, &d),
                &train_step_in(&single, &desc, &d),
            );
        }
    }
}

/// Batches of one and two, projected ahead in blocks of 3 steps (the first one step long):
/// with more than one thread, each block's steps run while another thread projects the
/// next block (the core's Note [Projection beside the scan]). In pools of 2 and 3 threads
/// (3: a bidirectional layer's directions get 2 each), every mode, with padding, a
/// projection and both layouts, against the plain implementation; and the training
/// reserve against a single thread's, bit for bit.
#[test]
fn forward_with_the_projection_beside_the_scan_matches_the_plain_implementation() {
    let single = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .expect("a pool of 1 thread");
    for threads in [2, 3] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .expect("a pool");
        for mode in [
            RnnMode::Lstm,
            RnnMode::Gru,
            RnnMode::RnnTanh,
            RnnMode::RnnRelu,
        ] {
            for (batch, bidirectional, batch_first, proj) in [
                (1, false, false, None),
                (2, true, true, None),
                (2, false, false, Some(3)),
            ] {
                if proj.is_some() && mode != RnnMode::Lstm {
                    continue;
                }
                let spec = RnnSpec {
                    num_layers: 2,
                    bidirectional,
                    proj_size: proj,
                    ..RnnSpec::new(mode, 4, 5)
                };
                let lengths = (batch == 2).then(|| vec![11, 6]);
                let desc =
                    RnnDescriptor::new(spec, 11, batch, batch_first, lengths, DropoutSpec::NONE);
                pool.install(|| with_projection_block(3, || check_forward(&desc)));
                let d = convert(&data(&desc), |v| v);
                let reserve = |pool: &rayon::ThreadPool| {
                    pool.install(|| {
                        with_projection_block(3, || {
                            with_input_projection(InputProjection::Ahead, || {
                                cpu::forward(&desc, &inputs(&desc, &d), None::<&()>, true, false)
                            })
                        })
                    })
                    .1
                    .expect("a training forward keeps a reserve")
                };
                let written = |r: Vec<f64>| written(&desc, r);
                assert_eq!(
                    written(reserve(&pool)),
                    written(reserve(&single)),
                    "{:?} B{batch} reserve, {threads} threads against 1",
                    desc.spec
                );
            }
        }
    }
}

/// A batch of one projected ahead as one block (30 steps): the projection's rows split
/// over the threads of the pool (the core's Note [Projection through the packed kernel]),
/// 30 rows in shares of whole tiles with a shorter last one (18 and 12 rows on 2 threads;
/// 12, 12 and 6 on 3), the product large enough to split (`I = 40`, `G·H` = 192 or 144).
/// LSTM and GRU, two layers, against the plain implementation; and the outputs and the
/// training reserve against one thread's, bit for bit at every SIMD level.
#[test]
fn a_projection_split_over_threads_matches_one_thread() {
    let pool = |threads| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .expect("a pool")
    };
    let single = pool(1);
    for mode in [RnnMode::Lstm, RnnMode::Gru] {
        let spec = RnnSpec {
            num_layers: 2,
            ..RnnSpec::new(mode, 40, 48)
        };
        let desc = RnnDescriptor::new(spec, 30, 1, false, None, DropoutSpec::NONE);
        let d = convert(&data(&desc), |v| v);
        let run = |pool: &rayon::ThreadPool| {
            pool.install(|| {
                with_input_projection(InputProjection::Ahead, || {
                    let (out, _) =
                        cpu::forward(&desc, &inputs(&desc, &d), None::<&()>, false, false);
                    let (_, reserve) =
                        cpu::forward(&desc, &inputs(&desc, &d), None::<&()>, true, false);
                    (out.y, out.h_n, written(&desc, reserve.expect("a reserve")))
                })
            })
        };
        for threads in [2, 3] {
            let pool = pool(threads);
            pool.install(|| check_forward(&desc));
            with_levels(|level: SimdLevel| {
                assert_eq!(
                    run(&pool),
                    run(&single),
                    "{mode:?} {level:?}: {threads} threads against 1"
                );
            });
        }
    }
}

/// A training forward's reserve, cut to the layout's length, NaN read as zero. The forward
/// does not write the gate rows of padded steps (the backward zeroes them before reading:
/// Note [Reserve reuse]); a reserve reused from another test's call holds NaN there (debug
/// builds), a fresh one zeros. So those slots compare as zeros; every slot the forward
/// writes is finite.
fn written(desc: &RnnDescriptor, reserve: Vec<f64>) -> Vec<f64> {
    let len = cpu::reserve_len(desc, false);
    reserve[..len]
        .iter()
        .map(|&v| if v.is_nan() { 0.0 } else { v })
        .collect()
}

/// The forward of `desc` (inference and training) against the plain implementation at
/// every SIMD level and input projection, f64 and f32.
fn check_forward(desc: &RnnDescriptor) {
    let desc = desc.clone();
    let d = data(&desc);
    let expected = plain(&desc, &d.x, &d.h0, &d.c0, &d.w);
    let d64 = convert(&d, |v| v);
    let d32 = convert(&d, |v| v as f32);
    with_levels(|level: SimdLevel| {
        for training in [false, true] {
            let what = format!("{:?} {:?} training {training}", desc.spec, level);
            let (out, reserve) =
                cpu::forward(&desc, &inputs(&desc, &d64), None::<&()>, training, false);
            assert_eq!(reserve.is_some(), training);
            assert_close(&format!("{what} f64 y"), out.y, &expected.y, 1e-12);
            assert_close(&format!("{what} f64 h_n"), out.h_n, &expected.h_n, 1e-12);
            assert_close(
                &format!("{what} f64 c_n"),
                out.c_n.unwrap_or_default(),
                &expected.c_n,
                1e-12,
            );
            let (out, _) = cpu::forward(&desc, &inputs(&desc, &d32), None::<&()>, training, false);
            let up = |v: Vec<f32>| v.into_iter().map(f64::from).collect::<Vec<_>>();
            assert_close(&format!("{what} f32 y"), up(out.y), &expected.y, 2e-5);
            assert_close(&format!("{what} f32 h_n"), up(out.h_n), &expected.h_n, 2e-5);
            assert_close(
                &format!("{what} f32 c_n"),
                up(out.c_n.unwrap_or_default()),
                &expected.c_n,
                2e-5,
            );
        }
    });
}

/// `L = Σ y·gy + Σ h_n·gh + Σ c_n·gc` of the plain implementation.
fn loss(desc: &RnnDescriptor, d: &Data, gy: &[f64], gh: &[f64], gc: &[f64]) -> f64 {
    let out = plain(desc, &d.x, &d.h0, &d.c0, &d.w);
    let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f64>();
    dot(&out.y, gy) + dot(&out.h_n, gh) + dot(&out.c_n, gc)
}

/// The backward's gradients of `x`, `h0`, `c0` and the weights equal central finite
/// differences of the plain implementation, at every SIMD level, in f64; f32 agrees.
#[test]
fn backward_matches_finite_differences_at_every_simd_level() {
    for desc in cases() {
        let d = data(&desc);
        let gy = values(desc.output_shape().iter().product(), 5, 1.0);
        let gh = values(desc.hidden_shape().iter().product(), 6, 1.0);
        let gc = if desc.spec.mode.has_cell_state() {
            values(desc.cell_shape().iter().product(), 7, 1.0)
        } else {
            Vec::new()
        };
        // Central differences of a few coordinates of each input.
        let numeric = |pick: Pick, k: usize| {
            let eps = 1e-6;
            let mut plus = d.clone();
            pick(&mut plus)[k] += eps;
            let mut minus = d.clone();
            pick(&mut minus)[k] -= eps;
            (loss(&desc, &plus, &gy, &gh, &gc) - loss(&desc, &minus, &gy, &gh, &gc)) / (2.0 * eps)
        };
        let picks: [(&str, Pick); 4] = [
            ("x", |d| &mut d.x),
            ("h0", |d| &mut d.h0),
            ("c0", |d| &mut d.c0),
            ("w", |d| &mut d.w),
        ];
        let mut expected = Vec::new();
        let mut rng = SplitMix64::new(9);
        for (name, pick) in picks {
            let mut dd = d.clone();
            let n = if name == "c0" && !desc.spec.mode.has_cell_state() {
                0
            } else {
                pick(&mut dd).len()
            };
            for _ in 0..if n == 0 { 0 } else { 12 } {
                let k = (rng.next_u64() % n as u64) as usize;
                expected.push((name, k, numeric(pick, k)));
            }
        }
        let d64 = convert(&d, |v| v);
        let d32 = convert(&d, |v| v as f32);
        let gc_opt = (!gc.is_empty()).then_some(&gc[..]);
        with_levels(|level: SimdLevel| {
            let (out, reserve) =
                cpu::forward(&desc, &inputs(&desc, &d64), None::<&()>, true, false);
            let reserve = reserve.unwrap();
            let grads = OutputGrads {
                dy: Some(&gy),
                dh_n: Some(&gh),
                dc_n: gc_opt,
            };
            let g = cpu::backward(
                &desc,
                &inputs(&desc, &d64),
                &out.y,
                reserve,
                false,
                &grads,
                GradsWanted::ALL,
            );
            let dc0 = g.dc0.clone().unwrap_or_default();
            for &(name, k, num) in &expected {
                let got = match name {
                    "x" => g.dx[k],
                    "h0" => g.dh0[k],
                    "c0" => dc0[k],
                    _ => g.dweights[k],
                };
                assert!(
                    (got - num).abs() <= 1e-6 * (1.0 + num.abs()),
                    "{:?} {level:?}: d{name}[{k}] {got} vs finite difference {num}",
                    desc.spec
                );
            }
            // f32: the same gradients to f32 rounding.
            let gy32: Vec<f32> = gy.iter().map(|&v| v as f32).collect();
            let gh32: Vec<f32> = gh.iter().map(|&v| v as f32).collect();
            let gc32: Vec<f32> = gc.iter().map(|&v| v as f32).collect();
            let (out32, reserve32) =
                cpu::forward(&desc, &inputs(&desc, &d32), None::<&()>, true, false);
            let reserve32 = reserve32.unwrap();
            let grads32 = OutputGrads {
                dy: Some(&gy32),
                dh_n: Some(&gh32),
                dc_n: (!gc32.is_empty()).then_some(&gc32[..]),
            };
            let g32 = cpu::backward(
                &desc,
                &inputs(&desc, &d32),
                &out32.y,
                reserve32,
                false,
                &grads32,
                GradsWanted::ALL,
            );
            let up = |v: &[f32]| v.iter().map(|&x| f64::from(x)).collect::<Vec<_>>();
            let what = format!("{:?} {level:?} f32", desc.spec);
            assert_close(&format!("{what} dx"), up(&g32.dx), &g.dx, 1e-4);
            assert_close(&format!("{what} dh0"), up(&g32.dh0), &g.dh0, 1e-4);
            assert_close(
                &format!("{what} dweights"),
                up(&g32.dweights),
                &g.dweights,
                1e-4,
            );
        });
    }
}

/// Without `x`'s gradient, the weights' or both, the backward returns the unwanted ones
/// empty and every other gradient bit for bit as when all are wanted: every mode, layers,
/// both directions, projection, skip input, padding, dropout between layers, one and two
/// threads.
#[test]
fn backward_without_unwanted_gradients_returns_the_same_others() {
    let mut descs = cases();
    for mode in [RnnMode::Lstm, RnnMode::Gru] {
        let spec = RnnSpec {
            num_layers: 3,
            bidirectional: true,
            ..RnnSpec::new(mode, 4, 5)
        };
        let dropout = DropoutSpec {
            probability: 0.3,
            seed: 5,
        };
        descs.push(RnnDescriptor::new(
            spec,
            6,
            4,
            false,
            Some(vec![6, 2, 0, 5]),
            dropout,
        ));
    }
    for threads in [1, 2] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .expect("a pool");
        for desc in &descs {
            let d = convert(&data(desc), |v| v);
            let dy = values(desc.output_shape().iter().product(), 9, 1.0);
            let dh_n = values(desc.hidden_shape().iter().product(), 10, 1.0);
            let dc_n = values(desc.cell_shape().iter().product(), 11, 1.0);
            let run = |wanted: GradsWanted| {
                pool.install(|| {
                    let (out, reserve) =
                        cpu::forward(desc, &inputs(desc, &d), None::<&()>, true, false);
                    let grads = OutputGrads {
                        dy: Some(&dy),
                        dh_n: Some(&dh_n),
                        dc_n: desc.spec.mode.has_cell_state().then_some(&dc_n[..]),
                    };
                    let reserve = reserve.expect("a reserve");
                    cpu::backward(
                        desc,
                        &inputs(desc, &d),
                        &out.y,
                        reserve,
                        false,
                        &grads,
                        wanted,
                    )
                })
            };
            let all = run(GradsWanted::ALL);
            assert!(!all.dx.is_empty() && !all.dweights.is_empty());
            for (x, weights) in [(false, true), (true, false), (false, false)] {
                let what = format!("{:?} x {x} weights {weights} threads {threads}", desc.spec);
                let g = run(GradsWanted { x, weights });
                let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&g.dh0), bits(&all.dh0), "{what}: dh0");
                assert_eq!(
                    g.dc0.as_deref().map(bits),
                    all.dc0.as_deref().map(bits),
                    "{what}: dc0"
                );
                match x {
                    true => assert_eq!(bits(&g.dx), bits(&all.dx), "{what}: dx"),
                    false => assert!(
                        g.dx.is_empty(),
                        "{what}: expected no dx, got {}",
                        g.dx.len()
                    ),
                }
                match weights {
                    true => assert_eq!(bits(&g.dweights), bits(&all.dweights), "{what}: dw"),
                    false => assert!(
                        g.dweights.is_empty(),
                        "{what}: expected no dweights, got {}",
                        g.dweights.len()
                    ),
                }
            }
        }
    }
}
