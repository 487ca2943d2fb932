//! The fused op against PyTorch (float64 fixtures, shared with the 0.21 line): forward
//! outputs and final states, and every gradient (dx, dh0, dc0, each weight) of a loss
//! through them, for every fixture case (every mode, 1–3 layers, both directions,
//! projection, no bias, skip input, batch-first, variable lengths with zeros). Through the
//! module on NdArray and Flex (the native kernel, one backward node under autodiff), and
//! through the reference called directly (Burn's autodiff tracing it).
#![allow(deprecated)] // Burn 0.22 deprecates NdArray; the crate serves it.

mod common;

use burn::module::Module;
use burn::tensor::{DType, Device, Tensor};
use burn_fused_rnn::{reference, route_of, RnnState, Route};
use common::{
    array, at_every_simd_level, check, check_values, fixtures, report, tensor, On, Tol, F32, F64,
};

fn forward_matches_pytorch(on: On, dtype: DType, label: &str, tol: Tol) {
    let device = on.device();
    let mut failures = Vec::new();
    for case in &fixtures().cases {
        let module = case.module(&device, dtype);
        let x = array::<3>(&case.x, &device, dtype);
        assert_eq!(route_of(&x), Route::Native, "{label}: route");
        let state = case.h0.as_ref().map(|h0| {
            RnnState::new(
                array::<3>(h0, &device, dtype),
                case.c0.as_ref().map(|c0| array::<3>(c0, &device, dtype)),
            )
        });
        let (y, state) = match &case.lengths {
            Some(lengths) => module.forward_with_lengths(x, lengths, state),
            None => module.forward(x, state),
        };
        let ctx = format!("{label} / {}", case.name);
        assert_eq!(y.dtype(), dtype, "{ctx}: output dtype");
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

#[test]
fn forward_matches_pytorch_ndarray_f64() {
    at_every_simd_level("forward_matches_pytorch_ndarray_f64", |level| {
        forward_matches_pytorch(
            On::NdArray,
            DType::F64,
            &format!("ndarray f64 ({level:?})"),
            F64,
        )
    });
}

#[test]
fn forward_matches_pytorch_ndarray_f32() {
    at_every_simd_level("forward_matches_pytorch_ndarray_f32", |level| {
        forward_matches_pytorch(
            On::NdArray,
            DType::F32,
            &format!("ndarray f32 ({level:?})"),
            F32,
        )
    });
}

#[test]
fn forward_matches_pytorch_flex() {
    at_every_simd_level("forward_matches_pytorch_flex", |level| {
        forward_matches_pytorch(On::Flex, DType::F32, &format!("flex f32 ({level:?})"), F32);
        forward_matches_pytorch(On::Flex, DType::F64, &format!("flex f64 ({level:?})"), F64)
    });
}

/// Which implementation a gradient test runs.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Path {
    /// The module (the native kernel's backward node on NdArray and Flex).
    Module,
    /// `reference::fused_rnn`, traced op by op by Burn's autodiff.
    Reference,
}

/// The gradients `[dx, dh0, dc0 (LSTM), dweights]` of one case, as f64 vectors.
type CaseGrads = Vec<(&'static str, Vec<f64>)>;

/// Every gradient of `loss = Σ y·gy + Σ h_n·gh_n (+ Σ c_n·gc_n)` (PyTorch's `gy`, ...) for
/// one case, through `path`, with only the terms that `uses` (`[y, h_n, c_n]`) names: an
/// output the loss does not reach is off the autodiff tape, and the fused backward reads
/// its gradient as zeros (Note [One node, many outputs] in `src/autodiff.rs`). `tracked`:
/// whether `x` requires a gradient and whether the weights do (else `no_grad`); an untracked
/// one is left out of the result.
fn case_gradients(
    case: &common::Case,
    device: &Device,
    dtype: DType,
    path: Path,
    uses: [bool; 3],
    tracked: [bool; 2],
) -> CaseGrads {
    let module = case.module(device, dtype);
    let module = if tracked[1] { module } else { module.no_grad() };
    let desc = case.descriptor();
    let x = array::<3>(&case.x, device, dtype);
    let x = if tracked[0] { x.require_grad() } else { x };
    // Explicit initial states (zeros where the case has none), so that dh0 and dc0 exist
    // to compare.
    let zeros = |shape: [usize; 3]| Tensor::<3>::zeros(shape, (device, dtype));
    let h0 = case
        .h0
        .as_ref()
        .map_or_else(|| zeros(desc.hidden_shape()), |a| array(a, device, dtype))
        .require_grad();
    let c0 = desc.spec.mode.has_cell_state().then(|| {
        case.c0
            .as_ref()
            .map_or_else(|| zeros(desc.cell_shape()), |a| array(a, device, dtype))
            .require_grad()
    });
    let (y, h_n, c_n) = match path {
        Path::Module => {
            let state = RnnState::new(h0.clone(), c0.clone());
            let (y, s) = match &case.lengths {
                Some(lengths) => module.forward_with_lengths(x.clone(), lengths, Some(state)),
                None => module.forward(x.clone(), Some(state)),
            };
            (y, s.hidden, s.cell)
        }
        Path::Reference => {
            let out = reference::fused_rnn(
                &desc,
                x.clone(),
                Some(h0.clone()),
                c0.clone(),
                module.flat_weights(),
                true,
            );
            (out.output, out.hidden, out.cell)
        }
    };
    let weigh = |t: Tensor<3>, g: &[f64]| {
        let dims = t.dims();
        (t * tensor::<3>(g, dims, device, dtype)).sum()
    };
    let mut terms = Vec::new();
    if uses[0] {
        terms.push(weigh(y, &case.gy));
    }
    if uses[1] {
        terms.push(weigh(h_n, &case.gh_n));
    }
    if let (true, Some(c_n), Some(g)) = (uses[2], c_n, &case.gc_n) {
        terms.push(weigh(c_n, g));
    }
    let loss = terms.into_iter().reduce(|a, b| a + b).expect("a loss term");
    let grads = loss.backward();
    let ctx = format!("{} via {path:?}", case.name);
    let values = |t: Tensor<3>| t.into_data().convert::<f64>().to_vec::<f64>().unwrap();
    let grad = |t: &Tensor<3>, name: &str| {
        values(
            t.grad(&grads)
                .unwrap_or_else(|| panic!("{ctx}: no gradient for {name}")),
        )
    };
    let mut out = Vec::new();
    if tracked[0] {
        out.push(("dx", grad(&x, "x")));
    } else {
        assert!(
            x.grad(&grads).is_none(),
            "{ctx}: a gradient for an untracked x"
        );
    }
    out.push(("dh0", grad(&h0, "h0")));
    if let Some(c0) = &c0 {
        out.push(("dc0", grad(c0, "c0")));
    }
    if !tracked[1] {
        return out;
    }
    let dw = module
        .flat_grad(&grads)
        .unwrap_or_else(|| panic!("{ctx}: no gradient for the weights"));
    out.push((
        "dweights",
        dw.into_data().convert::<f64>().to_vec::<f64>().unwrap(),
    ));
    out
}

/// Every gradient of the full loss (every output) against PyTorch's.
fn gradients_match_pytorch(device: Device, dtype: DType, path: Path, label: &str, tol: Tol) {
    let mut failures = Vec::new();
    for case in &fixtures().cases {
        let ctx = format!("{label} / {}", case.name);
        let got = case_gradients(case, &device, dtype, path, [true; 3], [true; 2]);
        let mut expected = vec![&case.dx, &case.dh0];
        expected.extend(&case.dc0);
        let flat_dweights = case.flat_dweights();
        expected.push(&flat_dweights);
        for ((name, got), expected) in got.iter().zip(expected) {
            failures.extend(check_values(&ctx, name, got, expected, tol).err());
        }
    }
    report(failures);
}

/// A loss that reaches only some outputs (each non-empty subset of `[y, h_n, c_n]`): the
/// module's gradients (the native kernel's one backward node, empty gradient slots for the
/// outputs left out) against the reference's, traced op by op by Burn's autodiff, on
/// every fixture case.
#[test]
fn gradients_of_partial_losses_match_the_reference() {
    let device = Device::ndarray().autodiff();
    let mut failures = Vec::new();
    for case in &fixtures().cases {
        let subsets = if case.gc_n.is_some() { 1..8 } else { 1..4 };
        for k in subsets {
            let uses = [k & 1 != 0, k & 2 != 0, k & 4 != 0];
            let ctx = format!("{} with loss terms [y, h_n, c_n] = {uses:?}", case.name);
            let all = [true; 2];
            let got = case_gradients(case, &device, DType::F64, Path::Module, uses, all);
            let expected = case_gradients(case, &device, DType::F64, Path::Reference, uses, all);
            for ((name, got), (_, expected)) in got.iter().zip(&expected) {
                failures.extend(check_values(&ctx, name, got, expected, F64).err());
            }
        }
    }
    report(failures);
}

/// With `x` untracked (a layer that reads data) or the weights frozen (`no_grad`), the
/// native backward skips the unwanted gradients' GEMMs (the core crate's Note [Gradients
/// not wanted]); every gradient still wanted matches PyTorch's, on NdArray and Flex (f64),
/// every fixture case.
#[test]
fn gradients_without_x_or_weights_match_pytorch() {
    let mut failures = Vec::new();
    #[cfg_attr(not(feature = "wgpu"), allow(unused_mut))] // pushed to with `wgpu`
    let mut devices = vec![
        (Device::ndarray().autodiff(), DType::F64, F64, false),
        (Device::flex().autodiff(), DType::F64, F64, false),
    ];
    // Wgpu (the CubeCL kernels under Fusion, which declare only the wanted gradients:
    // Note [Cube gradients not wanted] in `src/cube`), in F32.
    #[cfg(feature = "wgpu")]
    if let Some(device) = common::wgpu_device("gradients_without_x_or_weights_match_pytorch") {
        devices.push((device.autodiff(), DType::F32, F32, true));
    }
    #[allow(unused_variables)] // `cube`: read with `wgpu`
    for (device, dtype, tol, cube) in devices {
        #[cfg(feature = "wgpu")]
        let kernel_calls = burn_fused_rnn::cube::kernel_calls();
        for tracked in [[false, true], [true, false]] {
            for case in &fixtures().cases {
                let ctx = format!(
                    "{device:?} {} tracked [x, weights] = {tracked:?}",
                    case.name
                );
                let got = case_gradients(case, &device, dtype, Path::Module, [true; 3], tracked);
                let flat_dweights = case.flat_dweights();
                for (name, got) in &got {
                    let expected = match *name {
                        "dx" => &case.dx,
                        "dh0" => &case.dh0,
                        "dc0" => case.dc0.as_ref().expect("an LSTM case"),
                        _ => &flat_dweights,
                    };
                    failures.extend(check_values(&ctx, name, got, expected, tol).err());
                }
                let names: Vec<&str> = got.iter().map(|(n, _)| *n).collect();
                assert_eq!(names.contains(&"dx"), tracked[0], "{ctx}: {names:?}");
                assert_eq!(names.contains(&"dweights"), tracked[1], "{ctx}: {names:?}");
            }
        }
        // Wgpu's calls ran the kernels (each case twice: a training forward, a backward).
        #[cfg(feature = "wgpu")]
        {
            let calls = burn_fused_rnn::cube::kernel_calls() - kernel_calls;
            let expected = if cube {
                4 * fixtures().cases.len() as u64
            } else {
                0
            };
            assert_eq!(calls, expected, "{device:?}: CubeCL kernel calls");
        }
    }
    report(failures);
}

#[test]
fn gradients_match_pytorch_ndarray_f64() {
    at_every_simd_level("gradients_match_pytorch_ndarray_f64", |level| {
        gradients_match_pytorch(
            Device::ndarray().autodiff(),
            DType::F64,
            Path::Module,
            &format!("autodiff ndarray f64 ({level:?})"),
            F64,
        )
    });
}

#[test]
fn gradients_match_pytorch_flex_f32() {
    at_every_simd_level("gradients_match_pytorch_flex_f32", |level| {
        gradients_match_pytorch(
            Device::flex().autodiff(),
            DType::F32,
            Path::Module,
            &format!("autodiff flex f32 ({level:?})"),
            F32,
        )
    });
}

#[test]
fn reference_forward_and_gradients_match_pytorch() {
    // The oracle itself: the reference on an F64 device, forward and traced backward.
    let device = Device::flex().autodiff();
    let mut failures = Vec::new();
    for case in &fixtures().cases {
        let desc = case.descriptor();
        let module = case.module(&device, DType::F64);
        let out = reference::fused_rnn(
            &desc,
            array::<3>(&case.x, &device, DType::F64),
            case.h0.as_ref().map(|a| array(a, &device, DType::F64)),
            case.c0.as_ref().map(|a| array(a, &device, DType::F64)),
            module.flat_weights(),
            false,
        );
        let ctx = format!("reference / {}", case.name);
        failures.extend(check(&ctx, "output", out.output, &case.y.data, F64).err());
        failures.extend(check(&ctx, "h_n", out.hidden, &case.h_n.data, F64).err());
    }
    report(failures);
    gradients_match_pytorch(
        Device::flex().autodiff(),
        DType::F64,
        Path::Reference,
        "reference, autodiff flex f64",
        F64,
    );
}

#[test]
fn fixtures_cover_every_feature() {
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
