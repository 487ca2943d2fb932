//! Seeded random tensors and a max-difference check, shared by the tests that compare
//! the crate with burn-nn.

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
