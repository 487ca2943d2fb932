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
use burn::tensor::ops::FloatTensor;
use burn::tensor::{DType, Distribution, Tensor, TensorData, TensorPrimitive};
use burn_fused_rnn::cudnn::profile::{Op, Phase};
use burn_fused_rnn::cudnn::{self, profile, RnnAlgorithm};
use burn_fused_rnn::testing::{
    assert_parity, assert_parity_with, parity_cases, tolerance, Reference, Tolerance,
};
use burn_fused_rnn::{
    DropoutSpec, FusedRnn, FusedRnnBackend, FusedRnnConfig, GradsWanted, RnnDescriptor, RnnInputs,
    RnnMode, RnnOutputGrads,
};

/// Burn's CUDA backend without fusion, and as `burn::backend::Cuda` (with fusion).
type CudaPlain = burn_cubecl::CubeBackend<cubecl::cuda::CudaRuntime, f32, i32, u8>;
type CudaFusion = burn::backend::Cuda;

static GPU: Mutex<()> = Mutex::new(());

/// Restores the default settings when a test ends, also when it fails.
struct Defaults;

impl Drop for Defaults {
    fn drop(&mut self) {
        cudnn::set_enabled(true);
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
///
/// Under a persistent algorithm (and `Auto`, which may pick one) the tolerance is ten
/// times the suite's: those kernels keep the recurrent weights in registers and sum their
/// products in their own order, and on an H200 RNN-tanh weight gradients (sums over every
/// step) came out up to 1.10x over the suite's F32 tolerance in this suite and 4.6e-5 off
/// (against 1.5e-5 allowed) in `persistent_algorithms_match_the_reference_where_they_apply`.
/// The standard algorithm keeps the suite's tolerance (`parity_suite_on_cuda_*`).
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
            let tolerance = tolerance(dtype).scaled(10.0);
            assert_parity_with::<CudaPlain>(&device, dtype, tolerance, |_| true);
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
    let mut rng = burn_fused_rnn::random::SplitMix64::new(seed);
    let raw: Vec<f64> = (0..n).map(|_| rng.next_symmetric(scale)).collect();
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

/// A call's tensors on one backend and device, built from [`CallData`] in `dtype`, and
/// results read back as `f64`.
struct On<'a, B: FusedRnnBackend> {
    desc: &'a RnnDescriptor,
    data: &'a CallData,
    device: &'a B::Device,
    dtype: DType,
}

impl<B: FusedRnnBackend> On<'_, B> {
    fn t3(&self, v: &[f64], shape: [usize; 3]) -> FloatTensor<B> {
        let data = TensorData::new(v.to_vec(), shape).convert_dtype(self.dtype);
        Tensor::<B, 3>::from_data(data, (self.device, self.dtype))
            .into_primitive()
            .tensor()
    }

    fn inputs(&self) -> RnnInputs<B> {
        self.inputs_with_x(&self.data.x)
    }

    fn inputs_with_x(&self, x: &[f64]) -> RnnInputs<B> {
        let (desc, data) = (self.desc, self.data);
        let w = TensorData::new(data.w.clone(), [data.w.len()]).convert_dtype(self.dtype);
        RnnInputs {
            x: self.t3(x, desc.input_shape()),
            h0: Some(self.t3(&data.h0, desc.hidden_shape())),
            c0: data.c0.as_ref().map(|c| self.t3(c, desc.cell_shape())),
            weights: Tensor::<B, 1>::from_data(w, (self.device, self.dtype))
                .into_primitive()
                .tensor(),
        }
    }

    fn output_grads(&self) -> RnnOutputGrads<B> {
        let (desc, data) = (self.desc, self.data);
        RnnOutputGrads {
            dy: Some(self.t3(&data.dy, desc.output_shape())),
            dh_n: Some(self.t3(&data.dh, desc.hidden_shape())),
            dc_n: data.dc.as_ref().map(|c| self.t3(c, desc.cell_shape())),
        }
    }

    /// The training forward, `between` (after the forward is called: under fusion, after
    /// it is registered), the backward, then what `between` returned is dropped, and the
    /// training outputs and every gradient are read.
    fn training_step<T>(&self, between: impl FnOnce() -> T) -> Vec<(&'static str, Vec<f64>)> {
        let (training, reserve) = B::fused_rnn_forward_training(self.desc, self.inputs());
        let held = between();
        let grads = B::fused_rnn_backward(
            self.desc,
            self.inputs(),
            training.clone(),
            reserve,
            self.output_grads(),
            GradsWanted::ALL,
        );
        drop(held);
        let mut out = vec![
            ("train y", read3::<B>(training.y)),
            ("train h_n", read3::<B>(training.h_n)),
        ];
        if let Some(c) = training.c_n {
            out.push(("train c_n", read3::<B>(c)));
        }
        out.push(("dx", read3::<B>(grads.dx.expect("wanted dx"))));
        out.push(("dh0", read3::<B>(grads.dh0)));
        if let Some(dc0) = grads.dc0 {
            out.push(("dc0", read3::<B>(dc0)));
        }
        out.push((
            "dweights",
            read1::<B>(grads.dweights.expect("wanted dweights")),
        ));
        out
    }
}

fn read3<B: FusedRnnBackend>(p: FloatTensor<B>) -> Vec<f64> {
    Tensor::<B, 3>::from_primitive(TensorPrimitive::Float(p))
        .into_data()
        .convert::<f64>()
        .to_vec::<f64>()
        .unwrap()
}

fn read1<B: FusedRnnBackend>(p: FloatTensor<B>) -> Vec<f64> {
    Tensor::<B, 1>::from_primitive(TensorPrimitive::Float(p))
        .into_data()
        .convert::<f64>()
        .to_vec::<f64>()
        .unwrap()
}

/// The inference forward, the training forward and the backward through the backend
/// trait itself (no `fused_rnn` dtype check, no autodiff), read back as `f64`.
fn through_the_trait<B: FusedRnnBackend>(
    desc: &RnnDescriptor,
    data: &CallData,
    device: &B::Device,
    dtype: DType,
) -> Vec<(&'static str, Vec<f64>)> {
    let on = On::<B> {
        desc,
        data,
        device,
        dtype,
    };
    let mut out = Vec::new();
    let inference = B::fused_rnn_forward(desc, on.inputs());
    out.push(("y", read3::<B>(inference.y)));
    out.push(("h_n", read3::<B>(inference.h_n)));
    if let Some(c) = inference.c_n {
        out.push(("c_n", read3::<B>(c)));
    }
    out.extend(on.training_step(|| ()));
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
            tolerance(DType::F64),
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
                if mode == RnnMode::RnnRelu && dtype == DType::F16 {
                    // ReLU's derivative jumps at 0: where F16 rounding moves a
                    // pre-activation across 0, that unit's whole contribution to the
                    // gradients appears or vanishes (on an H200, dx 0.071 off 0.104 under
                    // the standard algorithm). The parity suite checks RNN-relu in F16 at
                    // its sizes; here it is left out.
                    eprintln!(
                        "{test}: rnn_relu H{h} B{batch} F16 not compared: ReLU's derivative \
                         jumps where F16 rounding moves a pre-activation across 0"
                    );
                    continue;
                }
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
                    // 16 steps of H = 256 summed in the persistent kernels' order: ten
                    // times the suite's tolerance (see `parity_suite_on_cuda_with_each_
                    // algorithm`; three times failed on an H200 for RNN-tanh H128 B8
                    // weight gradients under persist_static, 4.6e-5 off -1.3e-4).
                    let tolerance = tolerance(dtype).scaled(10.0);
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
    let on = On::<CudaPlain> {
        desc: &desc,
        data: &data,
        device: &device,
        dtype: DType::F32,
    };
    let unchanged = on.training_step(|| ());
    // Same calls, with the settings switched between the training forward and the
    // backward.
    let switched = on.training_step(|| {
        cudnn::set_tf32(false);
        cudnn::set_algorithm(RnnAlgorithm::Standard);
    });
    assert_close(
        "after switching TF32 and the algorithm",
        &switched,
        &unchanged,
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

/// Names each concrete algorithm that ran a cuDNN call since `before`.
fn ran_since(before: &[u64]) -> Vec<&'static str> {
    RnnAlgorithm::CONCRETE
        .iter()
        .zip(calls_per_algorithm().iter().zip(before))
        .filter(|(_, (after, before))| after > before)
        .map(|(a, _)| a.name())
        .collect()
}

/// Holds all but `margin` bytes of device `index`'s free memory until dropped.
fn occupy_device_memory(index: usize, margin: usize) -> cudarc::driver::CudaSlice<u8> {
    let context = cudarc::driver::CudaContext::new(index).expect("CUDA context");
    let (free, total) = context.mem_get_info().expect("free device memory");
    let bytes = free.saturating_sub(margin);
    let stream = context.default_stream();
    let block = stream
        .alloc_zeros::<u8>(bytes)
        .unwrap_or_else(|e| panic!("occupying {bytes} of {free} free bytes: {e:?}"));
    stream.synchronize().expect("synchronize");
    eprintln!(
        "occupied {} MiB of device {index} ({} MiB free of {} MiB before)",
        bytes >> 20,
        free >> 20,
        total >> 20
    );
    block
}

/// Issue 21, defect 1: an `Auto` training forward's backward finds the forward's call
/// shape and never builds or probes, even when the memory a probe of that shape needs
/// (inputs, outputs, their gradients, the reserve: hundreds of MiB here) is no longer
/// free. Its gradients match the standard algorithm's on the same data.
#[test]
fn auto_training_backward_runs_without_a_probe_under_a_reduced_memory_budget() {
    let test = "auto_training_backward_runs_without_a_probe_under_a_reduced_memory_budget";
    let Some(_gpu) = gpu(test) else { return };
    let device = CudaDevice::default();
    // LSTM H = 128: `Auto` runs small-H for training (Note [RNN algorithms]).
    let spec = FusedRnnConfig::new(RnnMode::Lstm, 128, 128).spec();
    let desc = RnnDescriptor::new(spec, 2048, 32, true, None, DropoutSpec::NONE);
    let data = CallData::new(&desc, DType::F32, 21);
    let on = On::<CudaPlain> {
        desc: &desc,
        data: &data,
        device: &device,
        dtype: DType::F32,
    };
    let expected = on.training_step(|| ());
    cudnn::set_algorithm(RnnAlgorithm::Auto);
    // One step fills cubecl's memory pool with this step's buffers; then the cuDNN cache is
    // dropped, so that the forward below chooses (and probes) again with memory free.
    let _ = on.training_step(|| ());
    cudnn::clear_cache();
    let before = calls_per_algorithm();
    profile::reset();
    let got = on.training_step(|| {
        profile::enable();
        occupy_device_memory(device.index, 64 << 20)
    });
    profile::disable();
    let report = profile::take();
    eprintln!("{test}:\n{report}");
    assert!(
        report.get(Op::Backward, Phase::Build).is_none(),
        "the backward built or probed:\n{report}"
    );
    assert_eq!(
        report.get(Op::Backward, Phase::Lookup).map(|r| r.count),
        Some(1)
    );
    assert_eq!(ran_since(&before), ["persist_static_small_h"]);
    let mut tolerance = tolerance(DType::F32);
    tolerance.rtol *= 10.0;
    tolerance.atol *= 10.0;
    assert_close(
        "auto (small-H) against standard",
        &got,
        &expected,
        tolerance,
    );
}

/// Issue 21, defect 2: under fusion, settings changed after a training forward is
/// registered do not reach its execution (Note [Declared outputs]): the forward runs the
/// algorithm and TF32 setting of its registration, its reserve is the one it declared,
/// and every result equals the run without the change. Also an inference forward
/// registered before `set_enabled(false)` still runs cuDNN.
#[test]
fn settings_changed_between_registration_and_execution_do_not_reach_a_fused_op() {
    let test = "settings_changed_between_registration_and_execution_do_not_reach_a_fused_op";
    let Some(_gpu) = gpu(test) else { return };
    let device = CudaDevice::default();
    let spec = FusedRnnConfig::new(RnnMode::Lstm, 128, 128).spec();
    let desc = RnnDescriptor::new(spec, 16, 8, true, None, DropoutSpec::NONE);
    let data = CallData::new(&desc, DType::F32, 31);
    let on = On::<CudaFusion> {
        desc: &desc,
        data: &data,
        device: &device,
        dtype: DType::F32,
    };
    cudnn::set_algorithm(RnnAlgorithm::Auto);
    let before = calls_per_algorithm();
    let expected = on.training_step(|| ());
    let ran_unchanged = ran_since(&before);
    let before = calls_per_algorithm();
    let mut deferred = false;
    let got = on.training_step(|| {
        deferred = calls_per_algorithm() == before;
        cudnn::set_algorithm(RnnAlgorithm::PersistDynamic);
        cudnn::set_tf32(true);
    });
    eprintln!(
        "{test}: the training forward {} (ran: {:?})",
        if deferred {
            "executed after the settings changed"
        } else {
            "executed when it was registered"
        },
        ran_since(&before)
    );
    assert_eq!(
        ran_since(&before),
        ran_unchanged,
        "the algorithm of the registration ran"
    );
    let same = Tolerance {
        rtol: 1e-6,
        atol: 1e-7,
    };
    assert_close(
        "after switching the algorithm and TF32",
        &got,
        &expected,
        same,
    );

    cudnn::set_algorithm(RnnAlgorithm::Standard);
    cudnn::set_tf32(false);
    let calls = cudnn::cudnn_calls();
    let y = CudaFusion::fused_rnn_forward(&desc, on.inputs()).y;
    cudnn::set_enabled(false);
    let y = read3::<CudaFusion>(y);
    cudnn::set_enabled(true);
    assert_eq!(
        cudnn::cudnn_calls() - calls,
        1,
        "the inference forward ran cuDNN"
    );
    let reference = through_the_trait::<Reference>(&desc, &data, &Default::default(), DType::F32);
    assert_close(
        "inference y",
        &[("y", y)],
        &reference[..1],
        tolerance(DType::F32),
    );
}

/// Issue 21, defect 4: one thread alternating between two devices, building new call
/// shapes on each while the other's context was current, then dropping both devices'
/// state (`clear_cache`) and building again; every result matches the reference.
#[test]
fn two_devices_from_one_thread() {
    let test = "two_devices_from_one_thread";
    let Some(_gpu) = gpu(test) else { return };
    let count = cudnn::cuda_device_available().unwrap_or(0);
    if count < 2 {
        eprintln!("SKIPPED {test}: needs two CUDA devices, this machine has {count}");
        return;
    }
    let spec = FusedRnnConfig::new(RnnMode::Gru, 32, 48)
        .with_num_layers(2)
        .with_bidirectional(true)
        .spec();
    for round in 0..3 {
        if round == 2 {
            cudnn::clear_cache();
        }
        for index in [0, 1, 0, 1] {
            let device = CudaDevice::new(index);
            // A new call shape per device and round (new lengths on the device, a new
            // workspace size).
            let batch = 2 + round + index;
            let desc =
                RnnDescriptor::new(spec, 5 + 3 * round, batch, false, None, DropoutSpec::NONE);
            let data = CallData::new(&desc, DType::F32, 40 + round as u64);
            let expected =
                through_the_trait::<Reference>(&desc, &data, &Default::default(), DType::F64);
            let before = cudnn::cudnn_calls();
            let got = through_the_trait::<CudaPlain>(&desc, &data, &device, DType::F32);
            assert_eq!(
                cudnn::cudnn_calls() - before,
                4,
                "device {index}: cuDNN ran every call"
            );
            assert_close(
                &format!("device {index}, round {round}"),
                &got,
                &expected,
                tolerance(DType::F32),
            );
        }
    }
    cudnn::clear_cache();
}

/// Issue 21: the persistent algorithms take batch-first input in cuDNN's batch-major
/// layout as it is (PyTorch always hands them sequence-major data); both layouts, odd and
/// even batches, match the reference, and each layout runs the same algorithm.
#[test]
fn persistent_algorithms_take_batch_first_input_as_it_is() {
    let test = "persistent_algorithms_take_batch_first_input_as_it_is";
    let Some(_gpu) = gpu(test) else { return };
    let device = CudaDevice::default();
    for mode in [RnnMode::Lstm, RnnMode::Gru] {
        for batch in [3, 8] {
            for algorithm in &RnnAlgorithm::CONCRETE[1..] {
                let mut ran = Vec::new();
                for batch_first in [true, false] {
                    let spec = FusedRnnConfig::new(mode, 128, 128).spec();
                    let desc =
                        RnnDescriptor::new(spec, 12, batch, batch_first, None, DropoutSpec::NONE);
                    let data = CallData::new(&desc, DType::F32, 50 + batch as u64);
                    let expected = through_the_trait::<Reference>(
                        &desc,
                        &data,
                        &Default::default(),
                        DType::F64,
                    );
                    cudnn::set_algorithm(*algorithm);
                    let before = calls_per_algorithm();
                    let got = through_the_trait::<CudaPlain>(&desc, &data, &device, DType::F32);
                    cudnn::set_algorithm(RnnAlgorithm::Standard);
                    let what = format!(
                        "{} B{batch} {algorithm} batch_first={batch_first}",
                        mode.name()
                    );
                    assert_close(&what, &got, &expected, tolerance(DType::F32));
                    ran.push(ran_since(&before));
                    eprintln!("{test}: {what}: ran {:?}", ran.last().unwrap());
                }
                assert_eq!(
                    ran[0],
                    ran[1],
                    "{} B{batch} {algorithm}: the layouts ran different algorithms",
                    mode.name()
                );
            }
        }
    }
}

/// Issue 21: `PERSIST_DYNAMIC` with dropout, whose networks are one per batch size and
/// share one dropout state (Note [cuDNN dropout] in `src/cudnn/build.rs`):
/// - a fresh state draws the same masks again (the check below relies on it);
/// - a second batch size continues the first one's random stream instead of starting a
///   fresh one (its first masks differ from a fresh state's);
/// - the backward uses the forward's masks: at the second batch size, the gradient along
///   a direction `v` equals the central difference of the forward's outputs (weighted by
///   the output gradients) along `v`, each forward drawing the same masks from a fresh
///   state and the same prefix of calls.
#[test]
fn persist_dynamic_with_dropout_across_two_batch_sizes() {
    let test = "persist_dynamic_with_dropout_across_two_batch_sizes";
    let Some(_gpu) = gpu(test) else { return };
    let device = CudaDevice::default();
    let spec = FusedRnnConfig::new(RnnMode::Lstm, 64, 64)
        .with_num_layers(2)
        .spec();
    let dropout = DropoutSpec {
        probability: 0.5,
        seed: 17,
    };
    let d8 = RnnDescriptor::new(spec, 6, 8, false, None, dropout);
    let d4 = RnnDescriptor::new(spec, 6, 4, false, None, dropout);
    let (data8, data4) = (
        CallData::new(&d8, DType::F32, 61),
        CallData::new(&d4, DType::F32, 62),
    );
    let on8 = On::<CudaPlain> {
        desc: &d8,
        data: &data8,
        device: &device,
        dtype: DType::F32,
    };
    let on4 = On::<CudaPlain> {
        desc: &d4,
        data: &data4,
        device: &device,
        dtype: DType::F32,
    };
    cudnn::set_algorithm(RnnAlgorithm::PersistDynamic);
    let forward = |on: &On<CudaPlain>, x: &[f64]| {
        let (out, _) = CudaPlain::fused_rnn_forward_training(on.desc, on.inputs_with_x(x));
        read3::<CudaPlain>(out.y)
    };
    let before = calls_per_algorithm();
    cudnn::clear_cache();
    let first8 = forward(&on8, &data8.x);
    cudnn::clear_cache();
    assert!(
        forward(&on8, &data8.x) == first8,
        "expected a fresh dropout state to draw the same masks again"
    );
    let after8 = forward(&on4, &data4.x);
    cudnn::clear_cache();
    let fresh4 = forward(&on4, &data4.x);
    let ran = ran_since(&before);
    eprintln!("{test}: ran {ran:?}");
    if ran != ["persist_dynamic"] {
        eprintln!("{test}: cuDNN did not run PERSIST_DYNAMIC with dropout here; the checks below run on {ran:?}");
    }
    assert!(
        after8 != fresh4,
        "expected the second batch size to continue the first one's random stream, got a fresh stream's masks"
    );

    // The gradient along v against the central difference, after the same prefix (one
    // call at B = 8) from a fresh state each time.
    let v = values(data4.x.len(), 63, 1.0, DType::F32);
    let loss = |x: &[f64]| {
        cudnn::clear_cache();
        forward(&on8, &data8.x);
        let (out, _) = CudaPlain::fused_rnn_forward_training(&d4, on4.inputs_with_x(x));
        let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(a, b)| a * b).sum::<f64>();
        dot(&read3::<CudaPlain>(out.y), &data4.dy)
            + dot(&read3::<CudaPlain>(out.h_n), &data4.dh)
            + dot(
                &read3::<CudaPlain>(out.c_n.unwrap()),
                data4.dc.as_ref().unwrap(),
            )
    };
    let eps = 1e-2;
    let shifted = |sign: f64| -> Vec<f64> {
        data4
            .x
            .iter()
            .zip(&v)
            .map(|(x, v)| x + sign * eps * v)
            .collect()
    };
    let numeric = (loss(&shifted(1.0)) - loss(&shifted(-1.0))) / (2.0 * eps);
    cudnn::clear_cache();
    forward(&on8, &data8.x);
    let step = on4.training_step(|| ());
    let dx = &step.iter().find(|(n, _)| *n == "dx").unwrap().1;
    let analytic: f64 = dx.iter().zip(&v).map(|(d, v)| d * v).sum();
    eprintln!("{test}: dx·v = {analytic}, central difference {numeric}");
    assert!(
        (analytic - numeric).abs() <= 1e-3 * numeric.abs().max(1.0),
        "dx·v = {analytic}, central difference {numeric}: the backward did not use the forward's masks"
    );
}
