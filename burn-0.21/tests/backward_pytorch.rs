//! The training forward and backward (BPTT) against PyTorch's gradients (float64
//! fixtures): dx, dh0, dc0 and every weight, for every fixture case; both through each
//! backend's trait impl (the native CPU kernel on NdArray and Flex) and through the
//! reference's functions called directly (the oracle of the parity suite).

mod common;

use burn::backend::{Flex, NdArray};
use burn::tensor::TensorMetadata;
use burn::tensor::{Tensor, TensorPrimitive};
use burn_fused_rnn::{reference, FusedRnnBackend, GradsWanted, RnnOutputGrads};
use common::{at_every_simd_level, check, fixtures, report, tensor, Tol, F32, F64};

fn prim<B: FusedRnnBackend, const D: usize>(t: Tensor<B, D>) -> B::FloatTensorPrimitive {
    t.into_primitive().tensor()
}

fn float<B: FusedRnnBackend, const D: usize>(t: B::FloatTensorPrimitive) -> Tensor<B, D> {
    Tensor::from_primitive(TensorPrimitive::Float(t))
}

/// Which implementation runs.
#[derive(Clone, Copy, PartialEq)]
enum Path {
    /// `B`'s `FusedRnnBackend` methods.
    Backend,
    /// `burn_fused_rnn::reference`'s functions on `B`.
    Reference,
}

fn backward_matches_pytorch<B: FusedRnnBackend>(backend: &str, path: Path, tol: Tol) {
    let device = B::Device::default();
    let mut failures = Vec::new();
    for case in &fixtures().cases {
        let desc = case.descriptor();
        let inputs = case.inputs::<B>(&device);
        let (out, reserve) = match path {
            Path::Backend => B::fused_rnn_forward_training(&desc, inputs.clone()),
            Path::Reference => reference::forward_training::<B>(&desc, inputs.clone()),
        };
        let ctx = format!("{backend} / {}", case.name);
        // The reserve's shapes are predictable from the descriptor alone (what a fused
        // custom op must declare before running).
        let got: Vec<(Vec<usize>, burn::tensor::DType)> = reserve
            .tensors
            .iter()
            .map(|t| (t.shape().to_vec(), t.dtype()))
            .collect();
        let dtype = out.y.dtype();
        let declared = match path {
            Path::Backend => B::fused_rnn_reserve_layout(&desc, dtype, &device),
            Path::Reference => reference::reserve_layout(&desc, dtype),
        };
        if got != declared {
            failures.push(format!(
                "{ctx}: reserve {got:?} differs from the declared layout {declared:?}"
            ));
        }
        failures.extend(
            check(
                &ctx,
                "training output",
                float::<B, 3>(out.y.clone()),
                &case.y.data,
                tol,
            )
            .err(),
        );
        let grads = RnnOutputGrads {
            dy: Some(prim(tensor::<B, 3>(
                &case.gy,
                case.y.shape.clone().try_into().unwrap(),
                &device,
            ))),
            dh_n: Some(prim(tensor::<B, 3>(
                &case.gh_n,
                case.h_n.shape.clone().try_into().unwrap(),
                &device,
            ))),
            dc_n: case.gc_n.as_ref().map(|g| {
                prim(tensor::<B, 3>(
                    g,
                    case.c_n.as_ref().unwrap().shape.clone().try_into().unwrap(),
                    &device,
                ))
            }),
        };
        let all = GradsWanted::ALL;
        let g = match path {
            Path::Backend => B::fused_rnn_backward(&desc, inputs, out, reserve, grads, all),
            Path::Reference => reference::backward::<B>(&desc, inputs, out, reserve, grads, all),
        };
        let dx = g.dx.expect("wanted dx");
        failures.extend(check(&ctx, "dx", float::<B, 3>(dx), &case.dx, tol).err());
        failures.extend(check(&ctx, "dh0", float::<B, 3>(g.dh0), &case.dh0, tol).err());
        if let (Some(dc0), Some(expected)) = (g.dc0, &case.dc0) {
            failures.extend(check(&ctx, "dc0", float::<B, 3>(dc0), expected, tol).err());
        }
        failures.extend(
            check(
                &ctx,
                "dweights",
                float::<B, 1>(g.dweights.expect("wanted dweights")),
                &case.flat_dweights(),
                tol,
            )
            .err(),
        );
    }
    report(failures);
}

#[test]
fn backward_matches_pytorch_ndarray_f64() {
    at_every_simd_level("backward_matches_pytorch_ndarray_f64", |level| {
        backward_matches_pytorch::<NdArray<f64>>(
            &format!("ndarray<f64> ({level:?})"),
            Path::Backend,
            F64,
        )
    });
}

#[test]
fn backward_matches_pytorch_ndarray_f32() {
    at_every_simd_level("backward_matches_pytorch_ndarray_f32", |level| {
        backward_matches_pytorch::<NdArray<f32>>(
            &format!("ndarray<f32> ({level:?})"),
            Path::Backend,
            F32,
        )
    });
}

#[test]
fn backward_matches_pytorch_flex() {
    at_every_simd_level("backward_matches_pytorch_flex", |level| {
        backward_matches_pytorch::<Flex>(&format!("flex ({level:?})"), Path::Backend, F32)
    });
}

#[test]
fn reference_backward_matches_pytorch_ndarray_f64() {
    backward_matches_pytorch::<NdArray<f64>>("reference on ndarray<f64>", Path::Reference, F64);
}

#[test]
fn reference_backward_matches_pytorch_flex() {
    backward_matches_pytorch::<Flex>("reference on flex", Path::Reference, F32);
}
