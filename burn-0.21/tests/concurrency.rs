//! Several threads run the fused op at once, each with its own module and weights (two of
//! them sharing one module's buffers through a clone): inference forwards, training
//! forwards with backward, and `prepare`/`step` decoding. Every result equals, bit for bit,
//! the same work run alone on one thread, at every SIMD level this CPU has; and the
//! process-wide cache of packed weights stays within its bound (Note [Thread safety] in
//! `burn_fused_rnn::FusedRnn`).
//!
//! Bit for bit, because the native kernel splits its work by the shape of the call, never
//! by how busy the thread pool is: a result that depends on what other threads do is a
//! bug (a cache handing one thread another's weights, a memo read while it is written).

use burn::backend::ndarray::NdArray;
use burn::backend::Autodiff;
use burn::module::AutodiffModule;
use burn::tensor::{Tensor, TensorData};
use burn_fused_rnn::{with_simd_level, FusedRnn, FusedRnnConfig, RnnMode, SimdLevel};

#[path = "common/tensors.rs"]
mod tensors;

type B = NdArray<f32>;
type A = Autodiff<B>;

const T: usize = 6;
const BATCH: usize = 3;
const D_INPUT: usize = 5;
/// Rounds of all threads at once, per SIMD level.
const ROUNDS: usize = 50;

/// Seeded values in `[-1, 1)`.
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = burn_fused_rnn::random::SplitMix64::new(seed);
    (0..n).map(|_| rng.next_symmetric(1.0) as f32).collect()
}

fn read<const D: usize>(t: Tensor<B, D>) -> Vec<f32> {
    t.into_data().to_vec().unwrap()
}

/// One thread's work: every result of an inference forward, a training forward and
/// backward (output, `dx`, every weight gradient), and `T` decoding steps.
fn work(module: &FusedRnn<A>, seed: u64) -> Vec<Vec<f32>> {
    let device = Default::default();
    let x_data = TensorData::new(values(T * BATCH * D_INPUT, seed), [T, BATCH, D_INPUT]);
    let mut out = Vec::new();

    // Inference.
    let inner = module.valid();
    let x = Tensor::<B, 3>::from_data(x_data.clone(), &device);
    let (y, state) = inner.forward(x.clone(), None);
    out.push(read(y.clone()));
    out.push(read(state.hidden));

    // Training forward and backward.
    let xa = Tensor::<A, 3>::from_data(x_data, &device).require_grad();
    let (ya, _) = module.forward(xa.clone(), None);
    let dy = Tensor::<A, 3>::from_data(
        TensorData::new(values(ya.shape().num_elements(), seed + 1), ya.dims()),
        &device,
    );
    let grads = (ya.clone() * dy).sum().backward();
    out.push(read(ya.inner()));
    out.push(read(xa.grad(&grads).expect("dx")));
    for cell in &module.cells {
        out.push(read(cell.weight_hh.grad(&grads).unwrap_or_else(|| {
            panic!("dweight_hh missing, thread seed {seed}")
        })));
        if let Some(w) = &cell.weight_ih {
            out.push(read(w.grad(&grads).expect("dweight_ih")));
        }
    }

    // Decoding, one step at a time.
    let prepared = inner.prepare();
    let mut state = None;
    for t in 0..T {
        let x_t = x.clone().narrow(0, t, 1).reshape([BATCH, D_INPUT]);
        let (y_t, s) = prepared.step(x_t, state);
        out.push(read(y_t));
        state = Some(s);
    }
    out
}

#[test]
fn threads_at_once_get_what_each_gets_alone() {
    let _rng = tensors::seeded::<A>(41);
    let device = Default::default();
    let modes = [RnnMode::Lstm, RnnMode::Gru, RnnMode::RnnTanh, RnnMode::Lstm];
    let mut modules: Vec<FusedRnn<A>> = modes
        .iter()
        .enumerate()
        .map(|(i, &mode)| {
            FusedRnnConfig::new(mode, D_INPUT, 4 + 2 * i)
                .with_num_layers(2)
                .with_batch_first(false)
                .init(&device)
        })
        .collect();
    // Two more threads on clones of the first two modules: the same parameter buffers.
    modules.push(modules[0].clone());
    modules.push(modules[1].clone());
    let seeds: Vec<u64> = (0..modules.len() as u64).map(|i| 100 + 7 * i).collect();

    for level in SimdLevel::available() {
        let alone: Vec<Vec<Vec<f32>>> = modules
            .iter()
            .zip(&seeds)
            .map(|(m, &seed)| with_simd_level(level, || work(m, seed)))
            .collect();
        for round in 0..ROUNDS {
            let together: Vec<Vec<Vec<f32>>> = std::thread::scope(|scope| {
                let handles: Vec<_> = modules
                    .iter()
                    .zip(&seeds)
                    .map(|(m, &seed)| scope.spawn(move || with_simd_level(level, || work(m, seed))))
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap()).collect()
            });
            for (thread, (got, expected)) in together.iter().zip(&alone).enumerate() {
                assert_eq!(got.len(), expected.len());
                for (k, (g, e)) in got.iter().zip(expected).enumerate() {
                    assert!(
                        g == e,
                        "{level:?}, round {round}, thread {thread}, result {k}: differs from \
                         the same work run alone"
                    );
                }
            }
            let cached = burn_fused_rnn::packed_weights_cached();
            assert!(
                cached <= burn_fused_rnn::PACKED_WEIGHTS_CACHE_ENTRIES,
                "the cache of packed weights holds {cached} networks, expected at most {}",
                burn_fused_rnn::PACKED_WEIGHTS_CACHE_ENTRIES
            );
        }
    }
}
