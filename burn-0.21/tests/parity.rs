//! The public backend-parity suite (`burn_fused_rnn::testing`, feature `testing`) on every
//! backend this build implements: each backend's forward, final states and every gradient
//! against the NdArray f64 reference, over the suite's 134-case grid, in every dtype the
//! backend supports here (Wgpu through lavapipe has F16 but no BF16; NdArray has neither:
//! Burn itself refuses to create such tensors there).
#![cfg(feature = "testing")]

use burn::tensor::DType;

// NdArray and Flex run the native CPU kernel; the suite's reference is the Burn-ops
// reference on NdArray f64, called directly, so `ndarray_f64` compares the kernel in f64
// with it (tolerance 1e-9 relative).
burn_fused_rnn::testgen!(ndarray_f32, burn::backend::NdArray<f32>, Default::default());

burn_fused_rnn::testgen!(
    ndarray_f64,
    burn::backend::NdArray<f64>,
    Default::default(),
    [DType::F64]
);

burn_fused_rnn::testgen!(
    flex,
    burn::backend::Flex,
    Default::default(),
    [DType::F32, DType::F16, DType::BF16]
);

// The native CPU kernel at the SIMD levels the CPU would not pick by itself (the tests
// above run at the detected one; Note [SIMD levels]): AVX2 and the portable fallback on an
// AVX-512 machine, the fallback on an AVX2 machine. The whole grid, every mode, in F64 and
// F32 on NdArray and F32 on Flex.
#[test]
fn native_kernel_at_every_other_simd_level() {
    use burn_fused_rnn::{testing::assert_parity, with_simd_level, SimdLevel};
    let detected = SimdLevel::detected();
    for level in SimdLevel::ALL {
        if level == detected {
            continue;
        }
        if !level.is_available() {
            println!(
                "SKIPPED native_kernel_at_every_other_simd_level at {}: this CPU lacks it",
                level.name()
            );
            continue;
        }
        with_simd_level(level, || {
            let device = Default::default();
            assert_parity::<burn::backend::NdArray<f64>>(&device, DType::F64, |_| true);
            assert_parity::<burn::backend::NdArray<f32>>(&device, DType::F32, |_| true);
            assert_parity::<burn::backend::Flex>(&Default::default(), DType::F32, |_| true);
        });
    }
}

// Wgpu: what `testgen!` generates, except that each test first checks that Wgpu has an
// adapter here and otherwise skips with a message (`common/wgpu.rs`), as the CUDA tests do
// without a GPU, and checks that the CubeCL kernels (`burn_fused_rnn::cube`) ran every
// call; `.ci/run` installs lavapipe and makes a missing adapter an error.
#[cfg(feature = "wgpu")]
#[path = "common/wgpu.rs"]
mod wgpu_adapter;

#[cfg(feature = "wgpu")]
macro_rules! wgpu_parity {
    ($name:ident, $backend:ty) => {
        mod $name {
            use burn::tensor::DType;
            use burn_fused_rnn::RnnMode;

            fn run(test: &str, mode: RnnMode) {
                if !super::wgpu_adapter::wgpu_available(test) {
                    return;
                }
                let device = Default::default();
                for dtype in [DType::F32, DType::F16] {
                    let before = burn_fused_rnn::cube::kernel_calls();
                    burn_fused_rnn::testing::assert_parity::<$backend>(&device, dtype, |case| {
                        case.mode == mode
                    });
                    // Three calls per case (inference, training forward, backward), all
                    // through the CubeCL kernels; other tests of this binary may add more.
                    let cases = burn_fused_rnn::testing::parity_cases()
                        .into_iter()
                        .filter(|case| case.mode == mode)
                        .count() as u64;
                    assert!(
                        burn_fused_rnn::cube::kernel_calls() - before >= 3 * cases,
                        "{test}, {dtype:?}: the parity suite did not run the CubeCL kernels for every call"
                    );
                }
            }

            #[test]
            fn lstm() {
                run(concat!(stringify!($name), "::lstm"), RnnMode::Lstm);
            }

            #[test]
            fn gru() {
                run(concat!(stringify!($name), "::gru"), RnnMode::Gru);
            }

            #[test]
            fn rnn_tanh() {
                run(concat!(stringify!($name), "::rnn_tanh"), RnnMode::RnnTanh);
            }

            #[test]
            fn rnn_relu() {
                run(concat!(stringify!($name), "::rnn_relu"), RnnMode::RnnRelu);
            }
        }
    };
}

#[cfg(feature = "wgpu")]
wgpu_parity!(
    wgpu,
    burn::backend::wgpu::CubeBackend<burn::backend::wgpu::WgpuRuntime, f32, i32, u32>
);

// `burn::backend::Wgpu` as users write it: `Fusion<CubeBackend<WgpuRuntime, ..>>`.
#[cfg(feature = "wgpu")]
wgpu_parity!(wgpu_fusion, burn::backend::Wgpu);
