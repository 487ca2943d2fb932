//! Seeded random tensors and a max-difference check, shared by the tests that compare
//! the crate with burn-nn, and a lock for tests that need their draws to be repeatable.
#![allow(dead_code)]

use std::sync::{Mutex, MutexGuard};

use burn::tensor::backend::Backend;
use burn::tensor::{Distribution, Element, ElementConversion, Tensor};

/// A standard-normal tensor of `shape`, drawn from `B`'s generator seeded with `seed`.
pub fn random<B: Backend, const D: usize>(shape: [usize; D], seed: u64) -> Tensor<B, D> {
    let device = B::Device::default();
    B::seed(&device, seed);
    Tensor::random(
        shape,
        Distribution::Normal(0.0, 1.0),
        (&device, <B::FloatElem as Element>::dtype()),
    )
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

/// Asserts that `got` has `expected`'s shape and differs from it by at most `tol`.
pub fn close<B: Backend, const D: usize>(
    what: &str,
    got: Tensor<B, D>,
    expected: Tensor<B, D>,
    tol: f64,
) {
    assert_eq!(got.dims(), expected.dims(), "{what}: shapes");
    let diff: f64 = (got - expected).abs().max().into_scalar().elem();
    assert!(diff <= tol, "{what}: max |diff| {diff:e} > {tol:e}");
}
