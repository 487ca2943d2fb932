//! GPU tests of the cuDNN path (feature `cuda`). Without a CUDA device each test prints
//! why and returns; on a GPU machine run them with
//! `cargo test --release --features cuda,testing --test cuda` (README, "GPU").
//!
//! The tests share process-wide settings (`cudnn::set_algorithm`, `set_tf32`, the profile),
//! so each holds one lock for its whole run.
#![cfg(all(feature = "cuda", feature = "testing"))]

use std::sync::{Mutex, MutexGuard};

use burn::backend::cuda::CudaDevice;
use burn::backend::NdArray;
use burn::module::Module;
use burn::record::{FullPrecisionSettings, NamedMpkFileRecorder};
use burn::tensor::{DType, Distribution, Tensor, TensorData, TensorPrimitive};
use burn_fused_rnn::cudnn::{self, profile, RnnAlgorithm};
use burn_fused_rnn::testing::{assert_parity, parity_cases, Reference, Tolerance};
use burn_fused_rnn::{
    DropoutSpec, FusedRnn, FusedRnnBackend, FusedRnnConfig, RnnDescriptor, RnnInputs, RnnMode,
    RnnOutputGrads,
};

/// Burn's CUDA backend without fusion, and as `burn::backend::Cuda` (with fusion).
type CudaPlain = burn_cubecl::CubeBackend<cubecl::cuda::CudaRuntime, f32, i32, u8>;
type CudaFusion = burn::backend::Cuda;

static GPU: Mutex<()> = Mutex::new(());

/// Restores the default settings when a test ends, also when it fails.
struct Defaults;

impl Drop for Defaults {
    fn drop(&mut self) {
        cudnn::set_algorithm(RnnAlgorithm::Standard);
        cudnn::set_tf32(false);
        profile::disable();
    }
}

/// The lock and the settings guard when a CUDA device and cuDNN 9 are present; otherwise
/// says why the test skips.
fn gpu(test: &str) -> Option<(MutexGuard<'static, ()>, Defaults)> {
    let lock = GPU.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    match cudnn::cuda_device_available() {
        Err(reason) => {
            eprintln!("SKIPPED {test}: no CUDA device ({reason})");
            None
        }
        Ok(_) => {
            let version = cudnn::cudnn_version()
                .unwrap_or_else(|why| panic!("a CUDA device but no usable cuDNN: {why}"));
            eprintln!("{test}: cuDNN {version}");
            Some((lock, Defaults))
        }
    }
}

fn parity<B: FusedRnnBackend<Device = CudaDevice>>(test: &str) {
    let Some(_gpu) = gpu(test) else { return };
    let device = CudaDevice::default();
    let before = cudnn::cudnn_calls();
    for dtype in [DType::F32, DType::F64, DType::F16, DType::BF16] {
        if B::supports_dtype(&device, dtype) {
            assert_parity::<B>(&device, dtype, |_| true);
        } else {
            // cubecl 0.10 registers no F64 for CUDA (module docs of `cudnn`, "F64"); the
            // cuDNN path in F64 is checked by `f64_through_cudnn_matches_the_reference`.
            eprintln!("{test}: {dtype:?} not supported by Burn's CUDA backend, not checked here");
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

fn calls_per_algorithm() -> Vec<u64> {
    RnnAlgorithm::CONCRETE
        .iter()
        .map(|&a| cudnn::cudnn_calls_with(a))
        .collect()
}

/// The whole suite under each algorithm: persistent algorithms run where cuDNN takes
/// them, the standard algorithm elsewhere, and every result matches the reference.
#[test]
fn parity_suite_on_cuda_with_each_algorithm() {
    let test = "parity_suite_on_cuda_with_each_algorithm";
    let Some(_gpu) = gpu(test) else { return };
    let device = CudaDevice::default();
    for algorithm in [
        RnnAlgorithm::PersistStatic,
        RnnAlgorithm::PersistStaticSmallH,
        RnnAlgorithm::PersistDynamic,
        RnnAlgorithm::Auto,
    ] {
        cudnn::set_algorithm(algorithm);
        let before = calls_per_algorithm();
        for dtype in [DType::F32, DType::F16] {
            assert_parity::<CudaPlain>(&device, dtype, |_| true);
        }
        let ran: Vec<String> = RnnAlgorithm::CONCRETE
            .iter()
            .zip(calls_per_algorithm().iter().zip(&before))
            .map(|(a, (after, before))| format!("{a}: {}", after - before))
            .collect();
        eprintln!(
            "{test}: set_algorithm({algorithm}): cuDNN calls by algorithm: {}",
            ran.join(", ")
        );
    }
}

/// Seeded values in `[-scale, scale)` (splitmix64), rounded to `dtype` so that both sides
/// compute on the same numbers.
fn values(n: usize, seed: u64, scale: f64, dtype: DType) -> Vec<f64> {
    let mut state = seed;
    let raw: Vec<f64> = (0..n)
        .map(|_| {
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            ((z >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0) * scale
        })
        .collect();
    TensorData::new(raw, [n])
        .convert_dtype(dtype)
        .convert_dtype(DType::F64)
        .to_vec::<f64>()
        .unwrap()
}

/// Inputs, states, weights and output gradients of one call.
struct CallData {
    x: Vec<f64>,
    h0: Vec<f64>,
    c0: Option<Vec<f64>>,
    w: Vec<f64>,
    dy: Vec<f64>,
    dh: Vec<f64>,
    dc: Option<Vec<f64>>,
}

impl CallData {
    fn new(desc: &RnnDescriptor, dtype: DType, seed: u64) -> Self {
        let n = |s: [usize; 3]| s.iter().product::<usize>();
        let lstm = desc.spec.mode.has_cell_state();
        let w_scale = 1.0 / (desc.spec.d_hidden as f64).sqrt();
        Self {
            x: values(n(desc.input_shape()), seed, 1.0, dtype),
            h0: values(n(desc.hidden_shape()), seed + 1, 0.5, dtype),
            c0: lstm.then(|| values(n(desc.cell_shape()), seed + 2, 0.5, dtype)),
            w: values(desc.params_size(), seed + 3, w_scale, dtype),
            dy: values(n(desc.output_shape()), seed + 4, 1.0, dtype),
            dh: values(n(desc.hidden_shape()), seed + 5, 1.0, dtype),
            dc: lstm.then(|| values(n(desc.cell_shape()), seed + 6, 1.0, dtype)),
        }
    }
}

/// The inference forward, the training forward and the backward through the backend
/// trait itself (no `fused_rnn` dtype check, no autodiff), read back as `f64`.
fn through_the_trait<B: FusedRnnBackend>(
    desc: &RnnDescriptor,
    data: &CallData,
    device: &B::Device,
    dtype: DType,
) -> Vec<(&'static str, Vec<f64>)> {
    let t = |v: &[f64], shape: Vec<usize>| {
        let data = TensorData::new(v.to_vec(), shape).convert_dtype(dtype);
        Tensor::<B, 3>::from_data(data, (device, dtype))
            .into_primitive()
            .tensor()
    };
    let w1 = |v: &[f64]| {
        let data = TensorData::new(v.to_vec(), [v.len()]).convert_dtype(dtype);
        Tensor::<B, 1>::from_data(data, (device, dtype))
            .into_primitive()
            .tensor()
    };
    let inputs = || RnnInputs::<B> {
        x: t(&data.x, desc.input_shape().to_vec()),
        h0: Some(t(&data.h0, desc.hidden_shape().to_vec())),
        c0: data.c0.as_ref().map(|c| t(c, desc.cell_shape().to_vec())),
        weights: w1(&data.w),
    };
    let read3 = |p| {
        Tensor::<B, 3>::from_primitive(TensorPrimitive::Float(p))
            .into_data()
            .convert::<f64>()
            .to_vec::<f64>()
            .unwrap()
    };
    let read1 = |p| {
        Tensor::<B, 1>::from_primitive(TensorPrimitive::Float(p))
            .into_data()
            .convert::<f64>()
            .to_vec::<f64>()
            .unwrap()
    };
    let mut out = Vec::new();
    let inference = B::fused_rnn_forward(desc, inputs());
    out.push(("y", read3(inference.y)));
    out.push(("h_n", read3(inference.h_n)));
    if let Some(c) = inference.c_n {
        out.push(("c_n", read3(c)));
    }
    let (training, reserve) = B::fused_rnn_forward_training(desc, inputs());
    out.push(("train y", read3(training.y.clone())));
    let grads = B::fused_rnn_backward(
        desc,
        inputs(),
        training,
        reserve,
        RnnOutputGrads {
            dy: Some(t(&data.dy, desc.output_shape().to_vec())),
            dh_n: Some(t(&data.dh, desc.hidden_shape().to_vec())),
            dc_n: data.dc.as_ref().map(|c| t(c, desc.cell_shape().to_vec())),
        },
    );
    out.push(("dx", read3(grads.dx)));
    out.push(("dh0", read3(grads.dh0)));
    if let Some(dc0) = grads.dc0 {
        out.push(("dc0", read3(dc0)));
    }
    out.push(("dweights", read1(grads.dweights)));
    out
}

/// Compares every tensor of `got` with `expected`, panicking with the worst element.
fn assert_close(
    what: &str,
    got: &[(&'static str, Vec<f64>)],
    expected: &[(&'static str, Vec<f64>)],
    tolerance: Tolerance,
) {
    assert_eq!(got.len(), expected.len(), "{what}: tensor count");
    for ((name, g), (_, e)) in got.iter().zip(expected) {
        assert_eq!(g.len(), e.len(), "{what}: {name}: length");
        for (i, (g, e)) in g.iter().zip(e).enumerate() {
            let allowed = tolerance.atol + tolerance.rtol * e.abs();
            assert!(
                (g - e).abs() <= allowed,
                "{what}: {name}[{i}]: got {g}, expected {e} (|diff| {:.3e} > {allowed:.3e} allowed)",
                (g - e).abs()
            );
        }
    }
}

fn f64_through_cudnn<B: FusedRnnBackend<Device = CudaDevice>>(backend: &str) {
    let device = CudaDevice::default();
    let cases = parity_cases();
    let before = cudnn::cudnn_calls();
    for (i, case) in cases.iter().enumerate() {
        let desc = case.descriptor();
        let data = CallData::new(&desc, DType::F64, 1000 + 10 * i as u64);
        let expected =
            through_the_trait::<Reference>(&desc, &data, &Default::default(), DType::F64);
        let got = through_the_trait::<B>(&desc, &data, &device, DType::F64);
        assert_close(
            &format!("{backend} F64 {}", case.name()),
            &got,
            &expected,
            Tolerance::for_dtype(DType::F64),
        );
    }
    // Inference forward, training forward, backward data, backward weights: every case ran
    // on cuDNN, none on the reference (whose F64 matmul cubecl cannot run).
    assert_eq!(cudnn::cudnn_calls() - before, 4 * cases.len() as u64);
}

/// F64 through cuDNN, which Burn's CUDA backend does not advertise (module docs of
/// `cudnn`, "F64"): every parity case through the backend trait, without and with fusion,
/// against the reference in F64.
#[test]
fn f64_through_cudnn_matches_the_reference() {
    let Some(_gpu) = gpu("f64_through_cudnn_matches_the_reference") else {
        return;
    };
    f64_through_cudnn::<CudaPlain>("cuda");
    f64_through_cudnn::<CudaFusion>("cuda+fusion");
}

/// Shapes where the persistent algorithms apply (one unidirectional layer, H and the
/// input a multiple of 128, equal lengths, small batches), each algorithm, F32 and F16,
/// against the reference; prints which algorithm cuDNN ran.
#[test]
fn persistent_algorithms_match_the_reference_where_they_apply() {
    let test = "persistent_algorithms_match_the_reference_where_they_apply";
    let Some(_gpu) = gpu(test) else { return };
    let device = CudaDevice::default();
    for mode in [
        RnnMode::Lstm,
        RnnMode::Gru,
        RnnMode::RnnTanh,
        RnnMode::RnnRelu,
    ] {
        for (h, batch) in [(128, 1), (128, 8), (256, 8)] {
            let spec = FusedRnnConfig::new(mode, h, h).spec();
            let desc = RnnDescriptor::new(spec, 16, batch, true, None, DropoutSpec::NONE);
            for dtype in [DType::F32, DType::F16] {
                let data = CallData::new(&desc, dtype, 7);
                let expected =
                    through_the_trait::<Reference>(&desc, &data, &Default::default(), DType::F64);
                for algorithm in RnnAlgorithm::CONCRETE
                    .into_iter()
                    .chain([RnnAlgorithm::Auto])
                {
                    cudnn::set_algorithm(algorithm);
                    let before = calls_per_algorithm();
                    let got = through_the_trait::<CudaPlain>(&desc, &data, &device, dtype);
                    let what = format!("{} H{h} B{batch} {dtype:?} {algorithm}", mode.name());
                    // Half precision over 16 steps of H = 256: twice the suite's tolerance.
                    let mut tolerance = Tolerance::for_dtype(dtype);
                    tolerance.atol *= 2.0;
                    tolerance.rtol *= 2.0;
                    assert_close(&what, &got, &expected, tolerance);
                    let ran: Vec<&str> = RnnAlgorithm::CONCRETE
                        .iter()
                        .zip(calls_per_algorithm().iter().zip(&before))
                        .filter(|(_, (after, before))| after > before)
                        .map(|(a, _)| a.name())
                        .collect();
                    eprintln!("{test}: {what}: ran {}", ran.join(", "));
                    assert_eq!(ran.len(), 1, "{what}: one algorithm per call shape");
                }
            }
        }
    }
}

/// The backward of a training forward uses the forward's algorithm and TF32 setting even
/// when they change in between (Note [Reserve tag]): same gradients as without the change.
#[test]
fn the_backward_follows_the_forwards_settings() {
    let Some(_gpu) = gpu("the_backward_follows_the_forwards_settings") else {
        return;
    };
    let device = CudaDevice::default();
    let spec = FusedRnnConfig::new(RnnMode::Lstm, 128, 128).spec();
    let desc = RnnDescriptor::new(spec, 8, 8, true, None, DropoutSpec::NONE);
    let data = CallData::new(&desc, DType::F32, 11);
    cudnn::set_tf32(true);
    cudnn::set_algorithm(RnnAlgorithm::PersistStatic);
    let unchanged = through_the_trait::<CudaPlain>(&desc, &data, &device, DType::F32);
    // Same calls, with the settings switched between the training forward and the
    // backward.
    let t = |v: &[f64], shape: [usize; 3]| {
        let data = TensorData::new(v.to_vec(), shape).convert_dtype(DType::F32);
        Tensor::<CudaPlain, 3>::from_data(data, (&device, DType::F32))
            .into_primitive()
            .tensor()
    };
    let w = Tensor::<CudaPlain, 1>::from_data(
        TensorData::new(data.w.clone(), [data.w.len()]).convert_dtype(DType::F32),
        (&device, DType::F32),
    )
    .into_primitive()
    .tensor();
    let inputs = || RnnInputs::<CudaPlain> {
        x: t(&data.x, desc.input_shape()),
        h0: Some(t(&data.h0, desc.hidden_shape())),
        c0: data.c0.as_ref().map(|c| t(c, desc.cell_shape())),
        weights: w.clone(),
    };
    let (out, reserve) = CudaPlain::fused_rnn_forward_training(&desc, inputs());
    cudnn::set_tf32(false);
    cudnn::set_algorithm(RnnAlgorithm::Standard);
    let grads = CudaPlain::fused_rnn_backward(
        &desc,
        inputs(),
        out,
        reserve,
        RnnOutputGrads {
            dy: Some(t(&data.dy, desc.output_shape())),
            dh_n: Some(t(&data.dh, desc.hidden_shape())),
            dc_n: data.dc.as_ref().map(|c| t(c, desc.cell_shape())),
        },
    );
    let read = |p| {
        Tensor::<CudaPlain, 3>::from_primitive(TensorPrimitive::Float(p))
            .into_data()
            .convert::<f64>()
            .to_vec::<f64>()
            .unwrap()
    };
    let dx = unchanged.iter().find(|(n, _)| *n == "dx").unwrap();
    assert_close(
        "dx after switching TF32 and the algorithm",
        &[("dx", read(grads.dx))],
        std::slice::from_ref(dx),
        Tolerance {
            rtol: 1e-6,
            atol: 1e-7,
        },
    );
}

/// The profile times every phase of a call, and the GPU time of `cudnnRNNForward` fits
/// inside the op's wall time.
#[test]
fn the_profile_times_each_phase_of_a_call() {
    let Some(_gpu) = gpu("the_profile_times_each_phase_of_a_call") else {
        return;
    };
    let device = CudaDevice::default();
    let lstm = FusedRnnConfig::new(RnnMode::Lstm, 64, 64).init::<CudaPlain>(&device);
    let x = Tensor::<CudaPlain, 3>::random([8, 20, 64], Distribution::Default, &device);
    let _ = lstm.forward(x.clone(), None); // build the caches first
    profile::reset();
    profile::enable();
    for _ in 0..5 {
        let _ = lstm.forward(x.clone(), None).0.into_data();
    }
    profile::disable();
    let report = profile::take();
    eprintln!("{report}");
    use profile::{Op, Phase};
    for phase in [
        Phase::Lookup,
        Phase::Checks,
        Phase::Contiguous,
        Phase::Alloc,
        Phase::Pointers,
        Phase::CubeclSync,
        Phase::CudnnLaunch,
        Phase::CudnnForward,
        Phase::StreamSync,
        Phase::Total,
    ] {
        let row = report
            .get(Op::Inference, phase)
            .unwrap_or_else(|| panic!("no {phase:?} in\n{report}"));
        assert_eq!(row.count, 5, "{phase:?}");
    }
    let gpu = report
        .get(Op::Inference, Phase::CudnnForward)
        .unwrap()
        .total;
    let total = report.get(Op::Inference, Phase::Total).unwrap().total;
    assert!(gpu > std::time::Duration::ZERO && gpu <= total, "{report}");
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
    let Some(_gpu) = gpu("checkpoints_move_between_cuda_and_ndarray") else {
        return;
    };
    move_checkpoint::<CudaFusion, NdArray>("cuda_to_ndarray");
    move_checkpoint::<NdArray, CudaFusion>("ndarray_to_cuda");
    move_checkpoint::<CudaPlain, NdArray>("cuda_plain_to_ndarray");
}
