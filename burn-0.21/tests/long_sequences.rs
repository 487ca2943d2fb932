//! Long sequences (B = 1, H = 32): a forward and a training step over `T` steps run without
//! stack overflow, agree with the same sequence run as four chained calls (states passed
//! from call to call, gradients flowing back through them), and a training step's peak heap
//! grows linearly in `T`.
//!
//! `T` is 10 000 by default, to keep CI fast; `LONG_SEQ_T=100000 cargo test --release
//! --test long_sequences -- --nocapture` runs the full size and prints the peak heaps.

mod common;

use std::alloc::System;
use std::sync::Mutex;

use burn::backend::{Autodiff, Flex, NdArray};
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{Tensor, TensorData};
use burn_fused_rnn::{FusedRnn, FusedRnnBackend, FusedRnnConfig, RnnMode, RnnState};
use common::{check, report, Tol};
use peakmem_alloc::{PeakMemAlloc, PeakMemAllocTrait, INSTRUMENTED_SYSTEM};

/// Counts heap bytes: the peak of net allocations since the last reset.
#[global_allocator]
static ALLOC: &PeakMemAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Heap measurements are process-wide: one test measures at a time.
static MEASURE: Mutex<()> = Mutex::new(());

fn seq_len() -> usize {
    std::env::var("LONG_SEQ_T")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000)
}

const H: usize = 32;

fn signal(t: usize) -> Vec<f64> {
    (0..t * H).map(|i| ((i as f64) * 0.37).sin()).collect()
}

fn input<B: burn::tensor::backend::Backend>(x: &[f64], t: usize) -> Tensor<B, 3> {
    let dtype = <B::FloatElem as burn::tensor::Element>::dtype();
    Tensor::from_data(
        TensorData::new(x.to_vec(), [1, t, H]).convert_dtype(dtype),
        &Default::default(),
    )
}

fn module<B: burn::tensor::backend::Backend>(mode: RnnMode) -> FusedRnn<B> {
    let cfg = FusedRnnConfig::new(mode, H, H);
    let n = cfg.spec();
    let n = burn_fused_rnn::params_size(&n);
    let w: Vec<f64> = (0..n).map(|i| ((i as f64) * 0.11).cos() * 0.2).collect();
    let dtype = <B::FloatElem as burn::tensor::Element>::dtype();
    cfg.init_with_params(Tensor::from_data(
        TensorData::new(w, [n]).convert_dtype(dtype),
        &Default::default(),
    ))
}

/// The sequence in four calls, each starting from the last one's final state.
fn chained<B: FusedRnnBackend>(
    m: &FusedRnn<B>,
    x: Tensor<B, 3>,
    t: usize,
) -> (Tensor<B, 3>, RnnState<B>) {
    let mut state = None;
    let mut ys = Vec::new();
    let chunk = t.div_ceil(4);
    for start in (0..t).step_by(chunk) {
        let len = chunk.min(t - start);
        let (y, s) = m.forward(x.clone().narrow(1, start, len), state);
        ys.push(y);
        state = Some(s);
    }
    (Tensor::cat(ys, 1), state.expect("at least one chunk"))
}

fn vec<B: burn::tensor::backend::Backend, const D: usize>(t: Tensor<B, D>) -> Vec<f64> {
    t.into_data().convert::<f64>().to_vec().unwrap()
}

/// Forward and training step over `t` steps against four chained calls.
fn long_sequence_matches_chained_calls<B: AutodiffBackend + FusedRnnBackend>(name: &str, tol: Tol) {
    let _guard = MEASURE.lock().unwrap_or_else(|e| e.into_inner());
    let t = seq_len();
    let x = signal(t);
    let mut failures = Vec::new();
    for mode in [RnnMode::Lstm, RnnMode::Gru] {
        let ctx = format!("{name}, {mode:?}, T = {t}");
        let m = module::<B>(mode);
        let (y, s) = m.forward(input::<B>(&x, t), None);
        let (y_c, s_c) = chained(&m, input::<B>(&x, t), t);
        failures.extend(check(&ctx, "y", y, &vec(y_c), tol).err());
        failures.extend(check(&ctx, "h_n", s.hidden.clone(), &vec(s_c.hidden.clone()), tol).err());

        // Training: d(sum(y) + sum(h_n)) / d(x, weights) through one call and through the
        // chain of calls.
        let grads_of = |chain: bool| {
            let xt = input::<B>(&x, t).require_grad();
            let (y, s) = if chain {
                chained(&m, xt.clone(), t)
            } else {
                m.forward(xt.clone(), None)
            };
            let g = (y.sum() + s.hidden.sum()).backward();
            let dx = vec(xt.grad(&g).expect("dx"));
            let dw = vec(m.cells[0].weight_hh.grad(&g).expect("dW_hh"));
            (dx, dw)
        };
        let (dx, dw) = grads_of(false);
        let (dx_c, dw_c) = grads_of(true);
        let t1 = |v: &[f64]| {
            Tensor::<NdArray<f64>, 1>::from_data(
                TensorData::new(v.to_vec(), [v.len()]),
                &Default::default(),
            )
        };
        failures.extend(check(&ctx, "dx", t1(&dx), &dx_c, tol).err());
        failures.extend(check(&ctx, "dW_hh", t1(&dw), &dw_c, tol).err());
    }
    report(failures);
}

#[test]
fn long_sequence_matches_chained_calls_ndarray_f64() {
    long_sequence_matches_chained_calls::<Autodiff<NdArray<f64>>>(
        "ndarray<f64>",
        Tol {
            rtol: 1e-9,
            atol: 1e-12,
        },
    );
}

#[test]
fn long_sequence_matches_chained_calls_flex() {
    long_sequence_matches_chained_calls::<Autodiff<Flex>>(
        "flex",
        Tol {
            rtol: 1e-4,
            atol: 1e-5,
        },
    );
}

/// Peak heap growth (bytes) of one training step over `t` steps.
fn step_peak<B: AutodiffBackend + FusedRnnBackend>(mode: RnnMode, t: usize) -> usize {
    let m = module::<B>(mode);
    let x = input::<B>(&signal(t), t).require_grad();
    // Warm up (lazy initialization, thread pool), then measure.
    drop(m.forward(x.clone(), None).0.sum().backward());
    ALLOC.reset_peak_memory();
    drop(m.forward(x.clone(), None).0.sum().backward());
    ALLOC.get_peak_memory()
}

fn training_memory_is_linear_in_t<B: AutodiffBackend + FusedRnnBackend>(name: &str) {
    let _guard = MEASURE.lock().unwrap_or_else(|e| e.into_inner());
    // T and 2T, not T/2 and T: at B = 1 and H = 32 the per-step part of the peak is small
    // (about 380 bytes a step), and below T = 10 000 a part that does not scale with T
    // still shows (Flex: T = 5 000: 2.36 MiB, T = 10 000: 3.73 MiB, x1.58; 10 000 to 20 000 and
    // 20 000 to 40 000: x1.98-1.99). The packed copy of the outputs that an earlier
    // version kept (Note [One node, many outputs]) had hidden it.
    let t = seq_len();
    for mode in [RnnMode::Lstm, RnnMode::Gru] {
        let at_t = step_peak::<B>(mode, t);
        let at_2t = step_peak::<B>(mode, 2 * t);
        let ratio = at_2t as f64 / at_t as f64;
        let mib = |bytes: usize| bytes as f64 / (1 << 20) as f64;
        println!(
            "{name} {mode:?}: peak heap of a training step: T = {t}: {:.2} MiB, T = {}: {:.2} MiB (x{ratio:.2})",
            mib(at_t),
            2 * t,
            mib(at_2t),
        );
        assert!(
            (1.8..=2.2).contains(&ratio),
            "{name} {mode:?}: doubling T multiplied the peak heap by {ratio:.2}, expected about 2"
        );
    }
}

#[test]
fn training_memory_is_linear_in_t_ndarray() {
    training_memory_is_linear_in_t::<Autodiff<NdArray<f32>>>("ndarray<f32>");
}

#[test]
fn training_memory_is_linear_in_t_flex() {
    training_memory_is_linear_in_t::<Autodiff<Flex>>("flex");
}
