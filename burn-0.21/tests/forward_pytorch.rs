//! Forward outputs and final states against PyTorch (float64 fixtures): every mode, 1–3
//! layers, both directions, projection, no bias, skip input, batch-first, variable lengths
//! (unsorted, with zeros), given and absent initial states. Through the module on each CPU
//! backend (the native kernel), and through the reference's `forward` called directly.

mod common;

use burn::backend::{Flex, NdArray};
use burn::tensor::{Tensor, TensorPrimitive};
use burn_fused_rnn::{reference, FusedRnnBackend, RnnState};
use common::{array, at_every_simd_level, check, fixtures, report, Tol, F32, F64};

fn forward_matches_pytorch<B: FusedRnnBackend>(backend: &str, tol: Tol) {
    let device = B::Device::default();
    let mut failures = Vec::new();
    for case in &fixtures().cases {
        let module = case.module::<B>(&device);
        let x = array::<B, 3>(&case.x, &device);
        let state = case.h0.as_ref().map(|h0| {
            RnnState::new(
                array::<B, 3>(h0, &device),
                case.c0.as_ref().map(|c0| array::<B, 3>(c0, &device)),
            )
        });
        let (y, state) = match &case.lengths {
            Some(lengths) => module.forward_with_lengths(x, lengths, state),
            None => module.forward(x, state),
        };
        let ctx = format!("{backend} / {}", case.name);
        failures.extend(check(&ctx, "output", y, &case.y.data, tol).err());
        failures.extend(check(&ctx, "h_n", state.hidden, &case.h_n.data, tol).err());
        match (state.cell, &case.c_n) {
            (Some(c), Some(expected)) => {
                failures.extend(check(&ctx, "c_n", c, &expected.data, tol).err())
            }
            (None, None) => {}
            (got, _) => failures.push(format!(
                "{ctx}: c_n presence: got {}, expected {}",
                got.is_some(),
                case.c_n.is_some()
            )),
        }
    }
    report(failures);
}

// The native kernel at every SIMD level the CPU has (Note [SIMD levels]).

#[test]
fn forward_matches_pytorch_ndarray_f64() {
    at_every_simd_level("forward_matches_pytorch_ndarray_f64", |level| {
        forward_matches_pytorch::<NdArray<f64>>(&format!("ndarray<f64> ({level:?})"), F64)
    });
}

#[test]
fn forward_matches_pytorch_ndarray_f32() {
    at_every_simd_level("forward_matches_pytorch_ndarray_f32", |level| {
        forward_matches_pytorch::<NdArray<f32>>(&format!("ndarray<f32> ({level:?})"), F32)
    });
}

#[test]
fn forward_matches_pytorch_flex_f32() {
    at_every_simd_level("forward_matches_pytorch_flex_f32", |level| {
        forward_matches_pytorch::<Flex>(&format!("flex ({level:?})"), F32)
    });
}

/// The reference's inference forward on `B`, called directly.
fn reference_forward_matches_pytorch<B: FusedRnnBackend>(backend: &str, tol: Tol) {
    let device = B::Device::default();
    let mut failures = Vec::new();
    for case in &fixtures().cases {
        let desc = case.descriptor();
        let inputs = case.inputs::<B>(&device);
        let out = reference::forward::<B>(&desc, inputs);
        let float = |t| Tensor::<B, 3>::from_primitive(TensorPrimitive::Float(t));
        let ctx = format!("{backend} / {}", case.name);
        failures.extend(check(&ctx, "output", float(out.y), &case.y.data, tol).err());
        failures.extend(check(&ctx, "h_n", float(out.h_n), &case.h_n.data, tol).err());
        if let (Some(c), Some(expected)) = (out.c_n, &case.c_n) {
            failures.extend(check(&ctx, "c_n", float(c), &expected.data, tol).err());
        }
    }
    report(failures);
}

#[test]
fn reference_forward_matches_pytorch_ndarray_f64() {
    reference_forward_matches_pytorch::<NdArray<f64>>("reference on ndarray<f64>", F64);
}

#[test]
fn reference_forward_matches_pytorch_flex() {
    reference_forward_matches_pytorch::<Flex>("reference on flex", F32);
}

#[test]
fn fixtures_cover_every_feature() {
    // Guards the fixture file itself: the forward tests above are only as good as the
    // variety of cases they run over.
    let cases = &fixtures().cases;
    for mode in ["lstm", "gru", "rnn_tanh", "rnn_relu"] {
        assert!(cases.iter().any(|c| c.mode == mode), "no {mode} case");
    }
    for layers in 1..=3 {
        assert!(
            cases.iter().any(|c| c.num_layers == layers),
            "no {layers}-layer case"
        );
    }
    assert!(cases.iter().any(|c| c.bidirectional));
    assert!(cases.iter().any(|c| c.proj_size.is_some()));
    assert!(cases.iter().any(|c| !c.bias));
    assert!(cases.iter().any(|c| c.batch_first));
    assert!(cases.iter().any(|c| c.skip_input));
    assert!(cases.iter().any(|c| c.h0.is_some()));
    assert!(cases
        .iter()
        .any(|c| c.lengths.as_ref().is_some_and(|l| l.contains(&0))));
}
