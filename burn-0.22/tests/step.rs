//! Step-by-step decoding (Note [Step-by-step decoding] on `PreparedRnn`): `T` steps of a
//! prepared module against one `forward` over the `T` steps (the output of every step and
//! the final state, with and without an initial state; with the step split over two
//! threads, forced and not), the gradients of a stepped loss against those of the same
//! loss through `forward`, no dropout, the refusals, and, in a process of its own, one
//! fused call per step on packed weights reused across steps.
#![allow(deprecated)] // Burn 0.22 deprecates NdArray; the crate serves it.

mod common;

use burn::tensor::{DType, Device, Tensor};
use burn_fused_rnn::random::SplitMix64;
use burn_fused_rnn::{
    params_size, with_step_split, FusedRnn, FusedRnnConfig, PreparedRnn, RnnMode, RnnState,
};
use common::{at_every_simd_level, check_values, report, tensor, values, Tol};

/// F64 steps against the F64 forward: the same arithmetic but for the order of a few sums.
const F64_STEPS: Tol = Tol {
    rtol: 0.0,
    atol: 1e-12,
};
/// F32 steps against the F32 forward.
const F32_STEPS: Tol = Tol {
    rtol: 1e-5,
    atol: 1e-5,
};
/// F64 gradients: per-step backward nodes summed by Burn's autodiff against one backward
/// over the sequence (its weight gradients are products over every step at once).
const F64_GRADS: Tol = Tol {
    rtol: 1e-10,
    atol: 1e-12,
};
/// F32 gradients, as above.
const F32_GRADS: Tol = Tol {
    rtol: 1e-4,
    atol: 1e-5,
};

const BATCH: usize = 3;
const SEQ: usize = 6;

/// Seeded values in `[-scale, scale)`, of `dtype` on `device`.
fn seeded<const D: usize>(
    shape: [usize; D],
    seed: u64,
    scale: f64,
    device: &Device,
    dtype: DType,
) -> Tensor<D> {
    let mut rng = SplitMix64::new(seed);
    let n = shape.iter().product();
    let data: Vec<f64> = (0..n).map(|_| rng.next_symmetric(scale)).collect();
    tensor(&data, shape, device, dtype)
}

/// The networks, two layers each: an LSTM with a projection, a GRU whose `forward` is
/// sequence-first (a step's input is `[batch_size, d_input]` either way), an RNN (tanh).
fn configs() -> Vec<FusedRnnConfig> {
    vec![
        FusedRnnConfig::new(RnnMode::Lstm, 5, 8)
            .with_num_layers(2)
            .with_proj_size(Some(4)),
        FusedRnnConfig::new(RnnMode::Gru, 5, 6)
            .with_num_layers(2)
            .with_batch_first(false),
        FusedRnnConfig::new(RnnMode::RnnTanh, 5, 7).with_num_layers(2),
    ]
}

/// A module of `config` whose weights are seeded values in `[-0.5, 0.5)`, of `dtype` on
/// `device` (parameters that require a gradient on an autodiff device).
fn module(config: &FusedRnnConfig, seed: u64, device: &Device, dtype: DType) -> FusedRnn {
    let n = params_size(&config.spec());
    config.init_with_params(seeded([n], seed, 0.5, device, dtype))
}

/// A seeded state of a unidirectional `module` for a batch of `batch`.
fn seeded_state(module: &FusedRnn, batch: usize, seed: u64, dtype: DType) -> RnnState {
    let spec = module.spec();
    let device = module.flat_weights().device();
    let hidden = seeded(
        [spec.num_layers, batch, spec.d_state()],
        seed,
        1.0,
        &device,
        dtype,
    );
    let cell = spec.mode.has_cell_state().then(|| {
        seeded(
            [spec.num_layers, batch, spec.d_hidden],
            seed + 1,
            1.0,
            &device,
            dtype,
        )
    });
    RnnState::new(hidden, cell)
}

/// Steps `decoder` over the batch-first `x` from `state`: the outputs of every step,
/// `[batch_size, seq_length, P]`, and the state after the last.
fn run_steps(
    decoder: &PreparedRnn,
    x: &Tensor<3>,
    state: Option<RnnState>,
) -> (Tensor<3>, RnnState) {
    let [_, seq, _] = x.dims();
    let mut state = state;
    let mut outputs: Vec<Tensor<3>> = Vec::with_capacity(seq);
    for t in 0..seq {
        let (y_t, next) = decoder.step(x.clone().narrow(1, t, 1).squeeze_dim(1), state);
        outputs.push(y_t.unsqueeze_dim(1));
        state = Some(next);
    }
    (Tensor::cat(outputs, 1), state.expect("at least one step"))
}

/// `module.forward` over the batch-first `x`, its output batch-first, whatever the
/// module's layout.
fn run_forward(module: &FusedRnn, x: &Tensor<3>, state: Option<RnnState>) -> (Tensor<3>, RnnState) {
    if module.batch_first() {
        module.forward(x.clone(), state)
    } else {
        let (y, state) = module.forward(x.clone().swap_dims(0, 1), state);
        (y.swap_dims(0, 1), state)
    }
}

/// Compares the output and every part of the state; failures named after `ctx`.
fn compare(
    ctx: &str,
    (y, s): (Tensor<3>, RnnState),
    (y_ref, s_ref): (Tensor<3>, RnnState),
    tol: Tol,
) -> Vec<String> {
    let mut failures = Vec::new();
    if y.dims() != y_ref.dims() {
        failures.push(format!(
            "{ctx}: output of shape {:?}, expected {:?}",
            y.dims(),
            y_ref.dims()
        ));
    }
    failures.extend(check_values(ctx, "output", &values(y), &values(y_ref), tol).err());
    failures
        .extend(check_values(ctx, "hidden", &values(s.hidden), &values(s_ref.hidden), tol).err());
    match (s.cell, s_ref.cell) {
        (Some(c), Some(c_ref)) => {
            failures.extend(check_values(ctx, "cell", &values(c), &values(c_ref), tol).err())
        }
        (None, None) => {}
        (c, _) => failures.push(format!(
            "{ctx}: a cell state {}, expected {}",
            if c.is_some() { "returned" } else { "missing" },
            if c.is_some() { "none" } else { "one" },
        )),
    }
    failures
}

/// `T` steps against one `forward` over the `T` steps, for every network, without and
/// with an initial state.
fn steps_match_forward(device: &Device, dtype: DType, tol: Tol, label: &str) -> Vec<String> {
    let mut failures = Vec::new();
    for (i, config) in configs().iter().enumerate() {
        let seed = 100 * i as u64;
        let module = module(config, seed, device, dtype);
        let x = seeded([BATCH, SEQ, config.d_input], seed + 1, 1.0, device, dtype);
        let decoder = module.prepare();
        for with_state in [false, true] {
            let state = with_state.then(|| seeded_state(&module, BATCH, seed + 2, dtype));
            let ctx = format!("{label} / {:?} / initial state: {with_state}", config.mode);
            failures.extend(compare(
                &ctx,
                run_steps(&decoder, &x, state.clone()),
                run_forward(&module, &x, state),
                tol,
            ));
        }
    }
    failures
}

#[test]
fn steps_match_forward_ndarray_f64() {
    let mut failures = Vec::new();
    at_every_simd_level("steps_match_forward_ndarray_f64", |level| {
        failures.extend(steps_match_forward(
            &Device::ndarray(),
            DType::F64,
            F64_STEPS,
            &format!("ndarray f64 ({level:?})"),
        ));
    });
    report(failures);
}

#[test]
fn steps_match_forward_flex_f32() {
    let mut failures = Vec::new();
    at_every_simd_level("steps_match_forward_flex_f32", |level| {
        failures.extend(steps_match_forward(
            &Device::flex(),
            DType::F32,
            F32_STEPS,
            &format!("flex f32 ({level:?})"),
        ));
    });
    report(failures);
}

/// A step whose product splits over two threads (the core crate's Note [A step over two
/// threads]) against the forward computed without the split, for one sequence and for a
/// decoder's batch of five (whose step splits the panels, not the sequences), where the
/// step splits by itself and where the split is forced, on NdArray and Flex (f32).
#[test]
fn split_steps_match_the_forward() {
    let mut failures = Vec::new();
    for (label, device) in [("ndarray", Device::ndarray()), ("flex", Device::flex())] {
        let networks = [
            (RnnMode::Lstm, 256, 1),
            (RnnMode::Gru, 200, 2),
            (RnnMode::RnnTanh, 96, 1),
        ];
        for (i, (mode, hidden, layers)) in networks.into_iter().enumerate() {
            let config = FusedRnnConfig::new(mode, 24, hidden).with_num_layers(layers);
            let seed = 700 + 10 * i as u64;
            let module = module(&config, seed, &device, DType::F32);
            let decoder = module.prepare();
            for batch in [1, 5] {
                let x = seeded([batch, SEQ, 24], seed + 1, 1.0, &device, DType::F32);
                let want = with_step_split(false, || run_forward(&module, &x, None));
                for forced in [None, Some(true)] {
                    let got = match forced {
                        Some(split) => with_step_split(split, || run_steps(&decoder, &x, None)),
                        None => run_steps(&decoder, &x, None),
                    };
                    let ctx =
                        format!("{label} {mode:?} H{hidden} L{layers} B{batch}, split {forced:?}");
                    failures.extend(compare(&ctx, got, want.clone(), F32_STEPS));
                }
            }
        }
    }
    report(failures);
}

/// The gradients of `loss = Σ y·gy + Σ h_n·gh (+ Σ c_n·gc)` with respect to the module's
/// parameters, the input and the initial state: through `T` steps of a prepared module
/// against through one `forward`, on an autodiff device.
fn stepped_gradients_match_forward(device: &Device, dtype: DType, tol: Tol, label: &str) {
    let mut failures = Vec::new();
    for (i, config) in configs().iter().enumerate() {
        let seed = 100 * i as u64;
        let module = module(config, seed, device, dtype);
        let spec = *module.spec();
        let x = seeded([BATCH, SEQ, config.d_input], seed + 1, 1.0, device, dtype).require_grad();
        let gy = seeded([BATCH, SEQ, spec.d_state()], seed + 3, 1.0, device, dtype);
        let gh = seeded(
            [spec.num_layers, BATCH, spec.d_state()],
            seed + 4,
            1.0,
            device,
            dtype,
        );
        let gc = seeded(
            [spec.num_layers, BATCH, spec.d_hidden],
            seed + 5,
            1.0,
            device,
            dtype,
        );
        for with_state in [false, true] {
            let state = with_state.then(|| {
                let s = seeded_state(&module, BATCH, seed + 2, dtype);
                RnnState::new(s.hidden.require_grad(), s.cell.map(Tensor::require_grad))
            });
            let gradients = |(y, s): (Tensor<3>, RnnState)| {
                let mut loss = (y * gy.clone()).sum() + (s.hidden * gh.clone()).sum();
                if let Some(c) = s.cell {
                    loss = loss + (c * gc.clone()).sum();
                }
                let grads = loss.backward();
                let mut got = vec![
                    (
                        "d_weights",
                        module.flat_grad(&grads).map(values).unwrap_or_default(),
                    ),
                    ("dx", x.grad(&grads).map(values).unwrap_or_default()),
                ];
                if let Some(s) = &state {
                    got.push(("dh0", s.hidden.grad(&grads).map(values).unwrap_or_default()));
                    if let Some(c) = &s.cell {
                        got.push(("dc0", c.grad(&grads).map(values).unwrap_or_default()));
                    }
                }
                got
            };
            let stepped = gradients(run_steps(&module.prepare(), &x, state.clone()));
            let expected = gradients(run_forward(&module, &x, state.clone()));
            let ctx = format!("{label} / {:?} / initial state: {with_state}", config.mode);
            for ((name, got), (_, want)) in stepped.iter().zip(&expected) {
                if want.is_empty() {
                    failures.push(format!("{ctx}: forward gave no {name}"));
                }
                failures.extend(check_values(&ctx, name, got, want, tol).err());
            }
        }
    }
    report(failures);
}

#[test]
fn stepped_gradients_match_forward_ndarray_f64() {
    stepped_gradients_match_forward(
        &Device::ndarray().autodiff(),
        DType::F64,
        F64_GRADS,
        "autodiff ndarray f64",
    );
}

#[test]
fn stepped_gradients_match_forward_flex_f32() {
    stepped_gradients_match_forward(
        &Device::flex().autodiff(),
        DType::F32,
        F32_GRADS,
        "autodiff flex f32",
    );
}

/// A module with dropout between its layers steps without it, even tracked: its steps
/// equal the forward of the same weights without dropout, while its own (training)
/// forward does drop.
#[test]
fn steps_apply_no_dropout() {
    let device = Device::ndarray().autodiff();
    let dtype = DType::F64;
    let config = FusedRnnConfig::new(RnnMode::Lstm, 5, 8).with_num_layers(2);
    let with_dropout = module(&config.clone().with_dropout(0.5), 7, &device, dtype);
    let without = module(&config, 7, &device, dtype);
    let x = seeded([BATCH, SEQ, 5], 8, 1.0, &device, dtype);
    report(compare(
        "dropout 0.5, tracked steps",
        run_steps(&with_dropout.prepare(), &x, None),
        run_forward(&without, &x, None),
        F64_STEPS,
    ));
    let dropped = values(with_dropout.forward(x.clone(), None).0);
    let kept = values(without.forward(x, None).0);
    assert!(
        dropped.iter().zip(&kept).any(|(a, b)| (a - b).abs() > 1e-6),
        "the training forward of the module with dropout dropped nothing: the test proves \
         nothing"
    );
}

/// Many networks of one shape, one after the other (more than the cache of packed weights
/// holds, each dropped before the next is made: fresh buffers of one size, which an
/// allocator likes to place where a freed one was) and two alive at once with their steps
/// interleaved: each steps with its own weights.
#[test]
fn decoders_never_share_weights() {
    for (label, device, dtype, tol) in [
        ("ndarray f64", Device::ndarray(), DType::F64, F64_STEPS),
        ("flex f32", Device::flex(), DType::F32, F32_STEPS),
    ] {
        let mut failures = Vec::new();
        for config in &configs() {
            let x = seeded([BATCH, SEQ, config.d_input], 1, 1.0, &device, dtype);
            for i in 0..8 {
                let module = module(config, 10 + i, &device, dtype);
                let ctx = format!("{label} / {:?} / network {i}", config.mode);
                failures.extend(compare(
                    &ctx,
                    run_steps(&module.prepare(), &x, None),
                    run_forward(&module, &x, None),
                    tol,
                ));
            }
            let modules = [
                module(config, 20, &device, dtype),
                module(config, 21, &device, dtype),
            ];
            let mut runs: Vec<_> = modules
                .iter()
                .map(|m| (m.prepare(), None::<RnnState>, Vec::<Tensor<3>>::new()))
                .collect();
            for t in 0..SEQ {
                for (decoder, state, outputs) in &mut runs {
                    let x_t = x.clone().narrow(1, t, 1).squeeze_dim(1);
                    let (y_t, next) = decoder.step(x_t, state.take());
                    outputs.push(y_t.unsqueeze_dim(1));
                    *state = Some(next);
                }
            }
            for (k, ((_, state, outputs), module)) in runs.into_iter().zip(&modules).enumerate() {
                let ctx = format!("{label} / {:?} / interleaved network {k}", config.mode);
                let stepped = (Tensor::cat(outputs, 1), state.expect("stepped"));
                failures.extend(compare(&ctx, stepped, run_forward(module, &x, None), tol));
            }
        }
        report(failures);
    }
}

#[test]
#[should_panic(expected = "expected a unidirectional FusedRnn for step-by-step decoding")]
fn a_bidirectional_module_is_refused() {
    let gru = FusedRnnConfig::new(RnnMode::Gru, 3, 4)
        .with_bidirectional(true)
        .init(&Device::ndarray());
    let _ = gru.prepare();
}

#[test]
#[should_panic(expected = "expected input of shape [batch_size, d_input] = [2, 3], got [2, 5]")]
fn an_input_of_other_features_is_refused() {
    let device = Device::ndarray();
    let gru = FusedRnnConfig::new(RnnMode::Gru, 3, 4).init(&device);
    let _ = gru.prepare().step(Tensor::zeros([2, 5], &device), None);
}

#[test]
#[should_panic(expected = "expected state.cell")]
fn a_prepared_lstm_refuses_a_hidden_only_state() {
    let device = Device::ndarray();
    let lstm = FusedRnnConfig::new(RnnMode::Lstm, 3, 4).init(&device);
    let h0 = Tensor::<3>::zeros([1, 2, 4], &device);
    let _ = lstm.prepare().step(
        Tensor::zeros([2, 3], &device),
        Some(RnnState::hidden_only(h0)),
    );
}

#[test]
#[should_panic(
    expected = "expected initial hidden state of shape [L*D, batch_size, P] = [2, 2, 4]"
)]
fn a_state_of_another_batch_is_refused() {
    let device = Device::ndarray();
    let gru = FusedRnnConfig::new(RnnMode::Gru, 3, 4)
        .with_num_layers(2)
        .init(&device);
    let h0 = Tensor::<3>::zeros([2, 3, 4], &device);
    let _ = gru.prepare().step(
        Tensor::zeros([2, 3], &device),
        Some(RnnState::hidden_only(h0)),
    );
}

/// Set in the child process of [`steps_are_one_fused_call_each_on_packed_weights_kept`].
const CHILD: &str = "BURN_FUSED_RNN_TEST_STEP_CHILD";

/// Each step is one fused call, every layer at once (one tracked forward and one backward
/// node per step under autodiff), and every step of a prepared module finds its packed
/// weights in the native kernel's cache (Note [Packed weights across calls] in the core's
/// `cpu::prepared`): the cache gains one network at a decoder's first step and none after,
/// on NdArray, Flex and Flex under autodiff. The cache and the call counters are
/// process-wide and the other tests of this binary use them concurrently, so this runs in
/// a child process of its own, alone, with an empty cache.
#[test]
fn steps_are_one_fused_call_each_on_packed_weights_kept() {
    if std::env::var_os(CHILD).is_some() {
        return in_a_fresh_process();
    }
    run_alone_in_a_child("steps_are_one_fused_call_each_on_packed_weights_kept");
}

/// Runs the test `name` of this binary alone in a child process with [`CHILD`] set.
fn run_alone_in_a_child(name: &str) {
    let exe = std::env::current_exe().expect("the path of this test binary");
    let out = std::process::Command::new(exe)
        .args([name, "--exact", "--test-threads=1", "--nocapture"])
        .env(CHILD, "1")
        .output()
        .expect("run this test in a child process");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "the child process failed:\n{text}");
    assert!(text.contains("1 passed"), "the child ran no test:\n{text}");
}

/// A module keeps its flat weights across `forward` calls while its parameters are the
/// same buffers (Note [Flat weights across calls] on `FusedRnn`), so repeated one-step
/// `forward`s (a decoder written with `forward`) and longer inference calls find their
/// packed weights in the kernel's cache again: the cache gains one network for all of a
/// module's calls, where a new flat vector per call would add one per call. The calls give
/// the prepared step's numbers, and weights mapped into the module afterwards are the ones
/// used (as a module built from them computes). `release_reserves` empties the cache. In a
/// child process of its own, as the cache is process-wide.
#[test]
fn one_step_forwards_reuse_the_flat_and_packed_weights() {
    if std::env::var_os(CHILD).is_none() {
        return run_alone_in_a_child("one_step_forwards_reuse_the_flat_and_packed_weights");
    }
    use burn::module::{Module, ModuleMapper, Param};
    use burn_fused_rnn_core::cpu::{packed_weights_cached, PACKED_WEIGHTS_CACHE_ENTRIES};

    struct Halve;
    impl ModuleMapper for Halve {
        fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
            param.map(|t| t.mul_scalar(0.5))
        }
    }

    assert_eq!(packed_weights_cached(), 0, "a fresh process caches nothing");
    let config = FusedRnnConfig::new(RnnMode::Lstm, 5, 8)
        .with_num_layers(2)
        .with_proj_size(Some(4));
    let n = params_size(&config.spec());
    for (label, device, dtype, tol) in [
        ("ndarray f64", Device::ndarray(), DType::F64, F64_STEPS),
        ("flex f32", Device::flex(), DType::F32, F32_STEPS),
    ] {
        let mut expected = 0;
        let params = seeded([n], 5, 0.5, &device, dtype);
        let module = config.init_with_params(params.clone());
        let x = seeded([BATCH, 1, 5], 6, 1.0, &device, dtype);
        let first = module.forward(x.clone(), None);
        expected += 1;
        assert!(
            expected < PACKED_WEIGHTS_CACHE_ENTRIES,
            "{label}: the count must stay under the cache's bound to show an extra entry"
        );
        for call in 0..3 {
            let again = module.forward(x.clone(), None);
            let failures = compare(&format!("{label}, call {call}"), again, first.clone(), tol);
            report(failures);
            let cached = packed_weights_cached();
            assert_eq!(
                cached, expected,
                "{label}, call {call}: the cache holds {cached} networks, expected {expected} \
                 (a call packed new flat weights)"
            );
        }
        // Longer inference calls of the same module cache their packed weights too, and
        // find them again: once the cache is emptied, the first adds one entry, the
        // second none.
        burn_fused_rnn::release_reserves();
        expected = 0;
        for call in 0..2 {
            let long = module.forward(seeded([BATCH, 3, 5], 8, 1.0, &device, dtype), None);
            drop(long);
            let cached = packed_weights_cached();
            assert_eq!(
                cached, 1,
                "{label}, three steps, call {call}: the cache holds {cached} networks, \
                 expected 1"
            );
        }
        expected += 1;
        let stepped = run_steps(&module.prepare(), &x, None);
        expected += 1; // the prepared decoder packs its own flat weights
        assert_eq!(
            packed_weights_cached(),
            expected,
            "{label}: the prepared decoder's steps share one entry"
        );
        let failures = compare(
            &format!("{label}, forward vs step"),
            first.clone(),
            stepped,
            tol,
        );
        report(failures);

        // Other weights into the same module: neither the kept vector nor its packed
        // weights may be used.
        let x2 = seeded([BATCH, 2, 5], 7, 1.0, &device, dtype);
        let before = module.forward(x2.clone(), None);
        let halved = module.clone().map(&mut Halve);
        let want = config
            .init_with_params(params.mul_scalar(0.5))
            .forward(x2.clone(), None);
        let got = halved.forward(x2.clone(), None);
        let failures = compare(&format!("{label}, mapped weights"), got.clone(), want, tol);
        report(failures);
        let moved = compare(&format!("{label}, mapped vs before"), got, before, tol);
        assert!(
            !moved.is_empty(),
            "{label}: halving the weights changed nothing"
        );
        burn_fused_rnn::release_reserves();
        assert_eq!(
            packed_weights_cached(),
            0,
            "{label}: release_reserves empties the cache"
        );
    }

    // A training forward of more than one step packs for itself (its weights change at
    // every optimizer step): nothing is cached.
    use burn_fused_rnn::autodiff::fused_tracked_forward_calls;
    let device = Device::flex().autodiff();
    let module = config.init_with_params(seeded([n], 5, 0.5, &device, DType::F32));
    let tracked = fused_tracked_forward_calls();
    let y = module.forward(seeded([BATCH, 3, 5], 8, 1.0, &device, DType::F32), None);
    assert_eq!(
        fused_tracked_forward_calls() - tracked,
        1,
        "the autodiff call was not a training forward"
    );
    drop(y);
    let cached = packed_weights_cached();
    assert_eq!(
        cached, 0,
        "a training forward of three steps cached its packed weights ({cached} networks)"
    );
}

fn in_a_fresh_process() {
    use burn_fused_rnn::autodiff::{fused_backward_calls, fused_tracked_forward_calls};
    use burn_fused_rnn_core::cpu::{packed_weights_cached, PACKED_WEIGHTS_CACHE_ENTRIES};

    assert_eq!(packed_weights_cached(), 0, "a fresh process caches nothing");
    // Three decoders below, and room to see a fourth entry if a step packed anew.
    const { assert!(PACKED_WEIGHTS_CACHE_ENTRIES > 3) };
    let config = FusedRnnConfig::new(RnnMode::Lstm, 5, 8)
        .with_num_layers(2)
        .with_proj_size(Some(4));
    let mut expected = 0;
    for (label, device, dtype) in [
        ("ndarray f64", Device::ndarray(), DType::F64),
        ("flex f32", Device::flex(), DType::F32),
        ("autodiff flex f32", Device::flex().autodiff(), DType::F32),
    ] {
        let module = module(&config, 1, &device, dtype);
        let x = seeded([BATCH, SEQ, 5], 2, 1.0, &device, dtype);
        let decoder = module.prepare();
        let tracked = fused_tracked_forward_calls();
        let mut state = None;
        let mut loss = None;
        expected += 1;
        for t in 0..SEQ {
            let (y_t, next) = decoder.step(x.clone().narrow(1, t, 1).squeeze_dim(1), state);
            state = Some(next);
            loss = Some(match loss {
                None => y_t.sum(),
                Some(l) => l + y_t.sum(),
            });
            let cached = packed_weights_cached();
            assert_eq!(
                cached, expected,
                "{label}, step {t}: the cache holds {cached} networks, expected {expected} \
                 (a step packed its weights anew)"
            );
        }
        if device.is_autodiff() {
            assert_eq!(
                fused_tracked_forward_calls() - tracked,
                SEQ,
                "{label}: tracked forwards of {SEQ} steps"
            );
            let calls = fused_backward_calls();
            let grads = loss.expect("steps").backward();
            assert_eq!(
                fused_backward_calls() - calls,
                SEQ,
                "{label}: backward nodes of {SEQ} steps"
            );
            assert!(module.flat_grad(&grads).is_some(), "{label}: no gradient");
        } else {
            assert_eq!(
                fused_tracked_forward_calls(),
                tracked,
                "{label}: an untracked step kept a reserve"
            );
        }
    }
}
