//! The public backend-parity suite (`burn_fused_rnn::testing`, feature `testing`) on every
//! device this build has: each device's forward, final states and every gradient against
//! the reference in F64 on NdArray, over the suite's 134-case grid, in every float dtype
//! the device supports (NdArray has no F16 or BF16: Burn itself refuses such tensors there).
#![cfg(feature = "testing")]
#![allow(deprecated)] // Burn 0.22 deprecates NdArray; the crate serves it.

use burn::tensor::{DType, Device};

// NdArray and Flex run the native CPU kernel and its one autodiff node; the suite's
// reference is the Burn-ops reference traced by Burn's autodiff, called directly, so
// `ndarray_f64` compares the kernel in F64 with it (tolerance 1e-9 relative).
burn_fused_rnn::testgen!(ndarray_f64, Device::ndarray(), [DType::F64]);
burn_fused_rnn::testgen!(ndarray_f32, Device::ndarray());
burn_fused_rnn::testgen!(flex, Device::flex(), [DType::F32, DType::F16, DType::BF16]);
// The native node under Burn's gradient checkpointing (the suite's training side keeps the
// device's strategy).
burn_fused_rnn::testgen!(
    flex_checkpointing,
    Device::flex().autodiff().gradient_checkpointing()
);

/// The native CPU kernel at the SIMD levels the CPU would not pick by itself (the tests
/// above run at the detected one; the core's Note [SIMD levels]), and at the detected one
/// with each choice the kernel makes per call forced the other way: the input projection
/// ahead or fused, and the step products' reduction in chunks of 3 steps. The whole grid,
/// every mode, in F64 on NdArray and F32 on Flex.
#[test]
fn native_kernel_at_every_simd_level_and_choice() {
    use burn_fused_rnn::testing::assert_parity;
    use burn_fused_rnn::{
        with_input_projection, with_k_chunk, with_simd_level, InputProjection, SimdLevel,
    };
    let grid = || {
        assert_parity(&Device::ndarray(), DType::F64, |_| true);
        assert_parity(&Device::flex(), DType::F32, |_| true);
    };
    let detected = SimdLevel::detected();
    for level in SimdLevel::ALL {
        if !level.is_available() {
            println!(
                "SKIPPED native_kernel_at_every_simd_level_and_choice at {}: this CPU lacks it",
                level.name()
            );
            continue;
        }
        if level != detected {
            with_simd_level(level, grid);
        }
    }
    for projection in InputProjection::ALL {
        with_input_projection(projection, grid);
    }
    with_k_chunk(3, grid);
}

/// The suite fails a device whose results differ by more than the tolerance: Flex in F32
/// against the F64 reference, with the F32 tolerance scaled by 1e-6 (below F32 rounding),
/// fails at the first tensor compared (`y`), naming the case, the dtype and the element.
#[test]
fn the_suite_fails_what_differs() {
    use burn_fused_rnn::testing::{check_case_with, parity_cases, tolerance};
    let case = parity_cases()
        .into_iter()
        .find(|c| c.garbage_padding)
        .expect("a garbage-padding case");
    let err = check_case_with(
        &case,
        &Device::flex(),
        DType::F32,
        tolerance(DType::F32).scaled(1e-6),
    )
    .unwrap_err();
    assert_eq!(err.case, case.name());
    assert_eq!(err.dtype, "F32");
    assert!(err.index.is_some() && err.problem.is_none(), "{err}");
    assert!(err
        .to_string()
        .starts_with(&format!("case {}, F32: y at [", case.name())));
}

/// Wgpu (feature `wgpu`): its calls run the CubeCL kernels (Note [Call routing]), under
/// autodiff in one backward node; switched off, the reference's Burn ops, whose gradients
/// are Burn's autodiff through them. Each test first checks that Wgpu has an adapter here
/// and otherwise skips with a message, as the 0.21 line's Wgpu tests do; `.ci/run`
/// installs lavapipe (Vulkan on the CPU) and sets `BURN_FUSED_RNN_REQUIRE_WGPU=1`, which
/// turns a missing adapter into a failure. The tests hold one lock: the kernels' switch
/// and call counter are the process's.
#[cfg(feature = "wgpu")]
mod wgpu {
    use std::sync::{Mutex, MutexGuard};

    use burn::tensor::{DType, Device, DeviceType};
    use burn_fused_rnn::cube;
    use burn_fused_rnn::testing::assert_parity;
    use burn_fused_rnn::{route_of, RnnMode, Route};

    static LOCK: Mutex<()> = Mutex::new(());

    /// The lock and the Wgpu device when Wgpu lists an adapter here; otherwise prints
    /// `SKIPPED {test}: …` and returns `None`, or panics when `BURN_FUSED_RNN_REQUIRE_WGPU=1`.
    fn wgpu(test: &str) -> Option<(MutexGuard<'static, ()>, Device)> {
        let guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
        if !Device::enumerate(DeviceType::Wgpu).is_empty() {
            return Some((guard, Device::wgpu(Default::default())));
        }
        let reason = "no Wgpu adapter (on Debian/Ubuntu, `apt-get install \
                      mesa-vulkan-drivers libvulkan1` gives lavapipe, Vulkan on the CPU)";
        if std::env::var("BURN_FUSED_RNN_REQUIRE_WGPU").as_deref() == Ok("1") {
            panic!("{test}: BURN_FUSED_RNN_REQUIRE_WGPU=1, but {reason}");
        }
        eprintln!("SKIPPED {test}: {reason}");
        None
    }

    /// The grid's cases of `mode` through the kernels, in `dtype`, on `device`.
    fn kernels(test: &str, device: &Device, dtype: DType, mode: Option<RnnMode>) {
        let x = burn::tensor::Tensor::<3>::zeros([1, 1, 1], (device, dtype));
        assert_eq!(route_of(&x), Route::Cube, "{test}");
        let before = cube::kernel_calls();
        assert_parity(device, dtype, |case| mode.is_none_or(|m| case.mode == m));
        assert!(
            cube::kernel_calls() > before,
            "{test}: the CubeCL kernels ran no call"
        );
    }

    fn run(test: &str, mode: RnnMode) {
        if let Some((_lock, device)) = wgpu(test) {
            kernels(test, &device, DType::F32, Some(mode));
        }
    }

    #[test]
    fn lstm() {
        run("wgpu::lstm", RnnMode::Lstm);
    }

    #[test]
    fn gru() {
        run("wgpu::gru", RnnMode::Gru);
    }

    #[test]
    fn rnn_tanh() {
        run("wgpu::rnn_tanh", RnnMode::RnnTanh);
    }

    #[test]
    fn rnn_relu() {
        run("wgpu::rnn_relu", RnnMode::RnnRelu);
    }

    /// The kernels on F16 inputs (computed in F32, Note [Half precision]), where the
    /// adapter has F16, and under Burn's gradient checkpointing (the node keeps the
    /// device's strategy): every mode.
    #[test]
    fn f16_and_checkpointing() {
        let test = "wgpu::f16_and_checkpointing";
        if let Some((_lock, device)) = wgpu(test) {
            if device.supports_dtype(DType::F16) {
                kernels(test, &device, DType::F16, None);
            } else {
                println!("SKIPPED {test} in F16: this adapter has no F16");
            }
            let checkpointing = device.autodiff().gradient_checkpointing();
            kernels(test, &checkpointing, DType::F32, None);
        }
    }

    /// Switched off, calls on Wgpu route to the reference (Note [Cube fallback]), which the
    /// suite checks in turn: no kernel call, the same grid passing.
    #[test]
    fn switched_off_the_reference_runs() {
        let test = "wgpu::switched_off_the_reference_runs";
        if let Some((_lock, device)) = wgpu(test) {
            cube::set_enabled(false);
            let x = burn::tensor::Tensor::<3>::zeros([1, 1, 1], &device);
            let route = route_of(&x);
            let before = cube::kernel_calls();
            let result = std::panic::catch_unwind(|| {
                assert_parity(&device, DType::F32, |case| case.mode == RnnMode::Gru)
            });
            let calls = cube::kernel_calls() - before;
            cube::set_enabled(true);
            assert_eq!(route, Route::Reference);
            assert_eq!(calls, 0, "{test}: the kernels ran while switched off");
            if let Err(panic) = result {
                std::panic::resume_unwind(panic);
            }
        }
    }
}

/// The reference under Burn's autodiff (what every device but NdArray and Flex trains
/// through) with NaN, ±inf and ±1e30 in every padded slot of `x` and of the output
/// gradient: outputs and every gradient equal, bit for bit, those of the same call with
/// zeros there, and all are finite. (Before the reference zeroed `x`'s padded slots, the
/// discarded steps' zero gradients times the activations' derivatives at NaN made every
/// gradient NaN; the Wgpu parity tests found it.)
#[test]
fn the_reference_ignores_garbage_padding_under_autodiff() {
    use burn::tensor::{Tensor, TensorData};
    use burn_fused_rnn::reference;
    use burn_fused_rnn::testing::{parity_cases, CaseData, Named};

    let device = Device::flex().autodiff();
    let t = |n: &Named| -> Tensor<3> {
        Tensor::from_data(
            TensorData::new(n.values.clone(), n.shape.clone()),
            (&device, DType::F64),
        )
    };
    let values = |t: Tensor<3>| t.into_data().to_vec::<f64>().expect("f64");
    let cases: Vec<_> = parity_cases()
        .into_iter()
        .filter(|c| c.garbage_padding)
        .collect();
    assert_eq!(cases.len(), 10);
    for case in cases {
        let desc = case.descriptor();
        let data = CaseData::new(&case, &|v| v);
        let run = |x: &Named, dy: &Named| -> Vec<Vec<f64>> {
            let x = t(x).require_grad();
            let h0 = t(&data.h0).require_grad();
            let w = Tensor::<1>::from_data(
                TensorData::new(data.weights.values.clone(), data.weights.shape.clone()),
                (&device, DType::F64),
            )
            .require_grad();
            let c0 = data.c0.as_ref().map(|c| t(c).require_grad());
            let out = reference::fused_rnn(
                &desc,
                x.clone(),
                Some(h0.clone()),
                c0.clone(),
                w.clone(),
                true,
            );
            let mut results = vec![values(out.output.clone()), values(out.hidden.clone())];
            let mut loss = (out.output * t(dy)).sum() + (out.hidden * t(&data.dh_n)).sum();
            if let (Some(c), Some(dc)) = (out.cell, &data.dc_n) {
                results.push(values(c.clone()));
                loss = loss + (c * t(dc)).sum();
            }
            let grads = loss.backward();
            results.push(values(x.grad(&grads).expect("dx")));
            results.push(values(h0.grad(&grads).expect("dh0")));
            if let Some(c0) = c0 {
                results.push(values(c0.grad(&grads).expect("dc0")));
            }
            results.push(
                w.grad(&grads)
                    .expect("dw")
                    .into_data()
                    .to_vec::<f64>()
                    .expect("f64"),
            );
            results
        };
        let clean = run(&data.x, &data.dy);
        let dirty = run(&data.x_backend, &data.dy_backend);
        // Results in order: y, h_n, (c_n), dx, dh0, (dc0), dweights.
        assert_eq!(clean.len(), dirty.len());
        for (k, (clean, dirty)) in clean.iter().zip(&dirty).enumerate() {
            let bad = clean
                .iter()
                .zip(dirty)
                .position(|(c, d)| !c.is_finite() || c.to_bits() != d.to_bits());
            if let Some(i) = bad {
                panic!(
                    "{}: result {k} at {i}: with garbage padding {}, with zeros {}",
                    case.name(),
                    dirty[i],
                    clean[i]
                );
            }
        }
    }
}
