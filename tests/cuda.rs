//! GPU tests of the cuDNN path (feature `cuda`). Without a CUDA device each test prints
//! why and returns; on a GPU machine run them with
//! `cargo test --release --features cuda,testing --test cuda` (README, "GPU").
#![cfg(all(feature = "cuda", feature = "testing"))]

use burn::backend::cuda::CudaDevice;
use burn::backend::NdArray;
use burn::module::Module;
use burn::record::{FullPrecisionSettings, NamedMpkFileRecorder};
use burn::tensor::{DType, Distribution, Tensor};
use burn_fused_rnn::cudnn;
use burn_fused_rnn::testing::assert_parity;
use burn_fused_rnn::{FusedRnn, FusedRnnBackend, FusedRnnConfig, RnnMode};

/// Burn's CUDA backend without fusion, and as `burn::backend::Cuda` (with fusion).
type CudaPlain = burn_cubecl::CubeBackend<cubecl::cuda::CudaRuntime, f32, i32, u8>;
type CudaFusion = burn::backend::Cuda;

/// `true` when a CUDA device and cuDNN 9 are present; otherwise says why the test skips.
fn gpu(test: &str) -> bool {
    match cudnn::cuda_device_available() {
        Err(reason) => {
            eprintln!("SKIPPED {test}: no CUDA device ({reason})");
            false
        }
        Ok(_) => {
            let version = cudnn::cudnn_version()
                .unwrap_or_else(|why| panic!("a CUDA device but no usable cuDNN: {why}"));
            eprintln!("{test}: cuDNN {version}");
            true
        }
    }
}

fn parity<B: FusedRnnBackend<Device = CudaDevice>>(test: &str) {
    if !gpu(test) {
        return;
    }
    let device = CudaDevice::default();
    let before = cudnn::cudnn_calls();
    for dtype in [DType::F32, DType::F64, DType::F16, DType::BF16] {
        if B::supports_dtype(&device, dtype) {
            assert_parity::<B>(&device, dtype, |_| true);
        } else {
            eprintln!("{test}: {dtype:?} not supported by this device, not checked");
        }
    }
    assert!(
        cudnn::cudnn_calls() > before,
        "the parity suite ran without a single cuDNN call: the reference path ran instead"
    );
}

#[test]
fn parity_suite_on_cuda_without_fusion() {
    parity::<CudaPlain>("parity_suite_on_cuda_without_fusion");
}

#[test]
fn parity_suite_on_cuda_with_fusion() {
    parity::<CudaFusion>("parity_suite_on_cuda_with_fusion");
}

fn config() -> FusedRnnConfig {
    FusedRnnConfig::new(RnnMode::Lstm, 5, 6)
        .with_num_layers(2)
        .with_bidirectional(true)
        .with_proj_size(Some(3))
}

fn outputs<B: FusedRnnBackend>(m: &FusedRnn<B>, x: &[f32], device: &B::Device) -> Vec<f64> {
    let x = Tensor::<B, 1>::from_floats(x, device).reshape([2, 7, 5]);
    m.forward_with_lengths(x, &[7, 4], None)
        .0
        .into_data()
        .convert::<f64>()
        .to_vec()
        .unwrap()
}

fn move_checkpoint<From: FusedRnnBackend, To: FusedRnnBackend>(name: &str) {
    let (from, to) = (From::Device::default(), To::Device::default());
    let recorder = NamedMpkFileRecorder::<FullPrecisionSettings>::new();
    let saved = config().init::<From>(&from);
    let x: Vec<f32> =
        Tensor::<NdArray, 1>::random([70], Distribution::Default, &Default::default())
            .into_data()
            .to_vec()
            .unwrap();
    let expected = outputs(&saved, &x, &from);
    let file =
        std::env::temp_dir().join(format!("burn-fused-rnn-cuda-{name}-{}", std::process::id()));
    saved.save_file(file.clone(), &recorder).unwrap();
    let loaded = config()
        .init::<To>(&to)
        .try_load_file(file, &recorder, &to)
        .unwrap();
    let got = outputs(&loaded, &x, &to);
    for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
        assert!(
            (g - e).abs() <= 1e-5 + 1e-4 * e.abs(),
            "{name}: output {i}: got {g}, expected {e}"
        );
    }
}

#[test]
fn checkpoints_move_between_cuda_and_ndarray() {
    if !gpu("checkpoints_move_between_cuda_and_ndarray") {
        return;
    }
    move_checkpoint::<CudaFusion, NdArray>("cuda_to_ndarray");
    move_checkpoint::<NdArray, CudaFusion>("ndarray_to_cuda");
    move_checkpoint::<CudaPlain, NdArray>("cuda_plain_to_ndarray");
}
