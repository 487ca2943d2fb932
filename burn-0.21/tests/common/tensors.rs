//! Seeded random tensors and a max-difference check, shared by the tests that compare
//! the crate with burn-nn, a lock for tests that need their draws to be repeatable, and
//! the gradients of a module's canonical parameters.
#![allow(dead_code)]

use std::sync::{Mutex, MutexGuard};

use burn::module::Param;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Element, ElementConversion, Tensor, TensorData};
use burn_fused_rnn::FusedRnn;

/// A standard-normal tensor of `shape`, the same for the same `seed` whatever runs beside
/// it: drawn from this crate's SplitMix64 (Box-Muller), not from `B`'s generator, which is
/// process-wide (another test drawing or seeding between a seed and a draw would change
/// the values from run to run).
pub fn random<B: Backend, const D: usize>(shape: [usize; D], seed: u64) -> Tensor<B, D> {
    let mut rng = burn_fused_rnn::random::SplitMix64::new(seed);
    let n: usize = shape.iter().product();
    let values: Vec<f64> = (0..n)
        .map(|_| {
            // 1 - u in (0, 1]: the logarithm stays finite.
            let (u1, u2) = (1.0 - rng.next_f64(), rng.next_f64());
            (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
        })
        .collect();
    let data = TensorData::new(values, shape).convert_dtype(<B::FloatElem as Element>::dtype());
    Tensor::from_data(data, &B::Device::default())
}

/// Serialises one test binary's use of its backends' generators, which are process-wide.
static RNG: Mutex<()> = Mutex::new(());

/// Seeds `B`'s generator with `seed` and holds it until the guard drops, so a test that
/// draws (inputs, or a module's lazily drawn weights at its first use) while holding the
/// guard draws the same numbers whichever tests run beside it. Tests whose assertions
/// depend on the values drawn (a loss that must fall, a tolerance) take it for their
/// whole body.
pub fn seeded<B: Backend>(seed: u64) -> MutexGuard<'static, ()> {
    let guard = RNG.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    B::seed(&B::Device::default(), seed);
    guard
}

/// Asserts that `got` has `expected`'s shape and differs from it by at most `tol` times
/// the larger of 1 and `expected`'s largest magnitude: rounding grows with the values, and
/// a ReLU network's outputs are not bounded by 1 (absolute for values up to 1; `tol = 0`
/// asks for equality).
pub fn close<B: Backend, const D: usize>(
    what: &str,
    got: Tensor<B, D>,
    expected: Tensor<B, D>,
    tol: f64,
) {
    assert_eq!(got.dims(), expected.dims(), "{what}: shapes");
    let scale: f64 = expected.clone().abs().max().into_scalar().elem();
    let bound = tol * scale.max(1.0);
    let diff: f64 = (got - expected).abs().max().into_scalar().elem();
    assert!(
        diff <= bound,
        "{what}: max |diff| {diff:e} > {tol:e} x max(1, max |expected| = {scale:e})"
    );
}

/// The gradient of every canonical parameter of `module`, flat, in layout order (per
/// pseudo-layer: `W_ih`, `W_hh`, `b_ih`, `b_hh`, `W_hr`, each where the module has it).
pub fn param_grads<B: AutodiffBackend>(module: &FusedRnn<B>, grads: &B::Gradients) -> Vec<f64> {
    fn grad<B: AutodiffBackend, const D: usize>(
        p: &Param<Tensor<B, D>>,
        g: &B::Gradients,
    ) -> Vec<f64> {
        let g = p.grad(g).expect("every parameter has a gradient");
        g.into_data().convert::<f64>().to_vec().unwrap()
    }
    let mut out = Vec::new();
    for cell in &module.cells {
        if let Some(p) = &cell.weight_ih {
            out.extend(grad(p, grads));
        }
        out.extend(grad(&cell.weight_hh, grads));
        for p in [&cell.bias_ih, &cell.bias_hh].into_iter().flatten() {
            out.extend(grad(p, grads));
        }
        if let Some(p) = &cell.weight_hr {
            out.extend(grad(p, grads));
        }
    }
    out
}
