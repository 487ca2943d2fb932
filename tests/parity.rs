//! The public backend-parity suite (`burn_fused_rnn::testing`, feature `testing`) on every
//! backend this build implements: each backend's forward, final states and every gradient
//! against the NdArray f64 reference, over the suite's 124-case grid, in every dtype the
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

#[cfg(feature = "wgpu")]
burn_fused_rnn::testgen!(
    wgpu,
    burn::backend::wgpu::CubeBackend<burn::backend::wgpu::WgpuRuntime, f32, i32, u32>,
    Default::default(),
    [DType::F32, DType::F16]
);

// `burn::backend::Wgpu` as users write it: `Fusion<CubeBackend<WgpuRuntime, ..>>`.
#[cfg(feature = "wgpu")]
burn_fused_rnn::testgen!(
    wgpu_fusion,
    burn::backend::Wgpu,
    Default::default(),
    [DType::F32, DType::F16]
);
