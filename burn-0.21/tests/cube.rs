//! The CubeCL kernels (`burn_fused_rnn::cube`) on Wgpu, where the backend-parity suite
//! (`tests/parity.rs`) does not reach: dropout between layers (the reference's masks, bit
//! for bit), sequences of length 0, missing output gradients, a reserve of the other path
//! or of another call, the switch that turns the kernels off, and a backward that leaves
//! out the gradients nobody wants. Each check compares with the reference run on
//! `NdArray<f64>` through `burn_fused_rnn::reference`'s functions directly, and asserts
//! that the kernels ran (`cube::kernel_calls`).
//!
//! The tests share the process-wide switch (`cube::set_enabled`) and counter, so each
//! holds one lock for its whole run.
#![cfg(all(feature = "wgpu", feature = "testing"))]

#[path = "common/wgpu.rs"]
mod wgpu_adapter;

use std::sync::{Mutex, MutexGuard};

use burn::backend::NdArray;
use burn::tensor::backend::Backend;
use burn::tensor::{DType, Tensor, TensorData, TensorPrimitive};
use burn_fused_rnn::testing::tolerance;
use burn_fused_rnn::{
    cube, reference, DropoutSpec, FusedRnnBackend, FusedRnnConfig, GradsWanted, InputMode,
    RnnDescriptor, RnnInputs, RnnMode, RnnOutputGrads, RnnReserve,
};

type W = burn::backend::wgpu::CubeBackend<burn::backend::wgpu::WgpuRuntime, f32, i32, u32>;
type WFusion = burn::backend::Wgpu;
type R = NdArray<f64>;

static LOCK: Mutex<()> = Mutex::new(());

/// The lock, with the kernels switched on, when Wgpu can run here.
fn wgpu(test: &str) -> Option<MutexGuard<'static, ()>> {
    let lock = LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    cube::set_enabled(true);
    wgpu_adapter::wgpu_available(test).then_some(lock)
}

/// Seeded values in `[-scale, scale)`.
fn values(seed: u64, n: usize, scale: f64) -> Vec<f64> {
    (0..n)
        .map(|i| ((i as f64 * 0.737 + seed as f64 * 1.91).sin()) * scale)
        .collect()
}

fn tensor<B: Backend>(v: &[f64], shape: &[usize], dtype: DType) -> B::FloatTensorPrimitive {
    let data = TensorData::new(v.to_vec(), shape.to_vec()).convert_dtype(dtype);
    Tensor::<B, 3>::from_data(data, (&Default::default(), dtype))
        .into_primitive()
        .tensor()
}

fn flat<B: Backend>(v: &[f64], dtype: DType) -> B::FloatTensorPrimitive {
    Tensor::<B, 1>::from_data(
        TensorData::new(v.to_vec(), [v.len()]).convert_dtype(dtype),
        (&Default::default(), dtype),
    )
    .into_primitive()
    .tensor()
}

/// The inputs and output gradients of one call, as plain values.
struct Case {
    desc: RnnDescriptor,
    x: Vec<f64>,
    h0: Vec<f64>,
    c0: Vec<f64>,
    w: Vec<f64>,
    dy: Option<Vec<f64>>,
    dh_n: Option<Vec<f64>>,
    dc_n: Option<Vec<f64>>,
}

impl Case {
    fn new(desc: RnnDescriptor, grads: [bool; 3]) -> Self {
        let n = |s: [usize; 3]| s.iter().product::<usize>();
        let w_scale = 1.0 / (desc.spec.d_hidden as f64).sqrt();
        Self {
            x: values(1, n(desc.input_shape()), 1.0),
            h0: values(2, n(desc.hidden_shape()), 0.5),
            c0: values(3, n(desc.cell_shape()), 0.5),
            w: values(4, desc.params_size(), w_scale),
            dy: grads[0].then(|| values(5, n(desc.output_shape()), 1.0)),
            dh_n: grads[1].then(|| values(6, n(desc.hidden_shape()), 1.0)),
            dc_n: grads[2].then(|| values(7, n(desc.cell_shape()), 1.0)),
            desc,
        }
    }

    fn inputs<B: Backend>(&self, dtype: DType) -> RnnInputs<B> {
        let d = &self.desc;
        RnnInputs {
            x: tensor::<B>(&self.x, &d.input_shape(), dtype),
            h0: Some(tensor::<B>(&self.h0, &d.hidden_shape(), dtype)),
            c0: d
                .spec
                .mode
                .has_cell_state()
                .then(|| tensor::<B>(&self.c0, &d.cell_shape(), dtype)),
            weights: flat::<B>(&self.w, dtype),
        }
    }

    fn grads<B: Backend>(&self, dtype: DType) -> RnnOutputGrads<B> {
        let d = &self.desc;
        let lstm = d.spec.mode.has_cell_state();
        RnnOutputGrads {
            dy: self
                .dy
                .as_ref()
                .map(|v| tensor::<B>(v, &d.output_shape(), dtype)),
            dh_n: self
                .dh_n
                .as_ref()
                .map(|v| tensor::<B>(v, &d.hidden_shape(), dtype)),
            dc_n: self
                .dc_n
                .as_ref()
                .filter(|_| lstm)
                .map(|v| tensor::<B>(v, &d.cell_shape(), dtype)),
        }
    }
}

/// A float tensor of `B`, flat, in `f64`.
fn read_f64<B: FusedRnnBackend>(t: B::FloatTensorPrimitive) -> Vec<f64> {
    Tensor::<B, 1>::from_primitive(TensorPrimitive::Float(t))
        .into_data()
        .convert_dtype(DType::F64)
        .to_vec()
        .expect("f64 data")
}

/// Every output and gradient of a training forward and backward on `B`, in `f64`.
fn run<B: FusedRnnBackend>(
    case: &Case,
    dtype: DType,
    reserve_of: Option<RnnReserve<B>>,
) -> Vec<(&'static str, Vec<f64>)> {
    let (out, reserve) = B::fused_rnn_forward_training(&case.desc, case.inputs::<B>(dtype));
    let inference = B::fused_rnn_forward(&case.desc, case.inputs::<B>(dtype));
    let read = read_f64::<B>;
    let mut results = vec![
        ("y", read(out.y.clone())),
        ("h_n", read(out.h_n.clone())),
        ("inference y", read(inference.y)),
        ("inference h_n", read(inference.h_n)),
    ];
    if let Some(c) = &out.c_n {
        results.push(("c_n", read(c.clone())));
    }
    let grads = B::fused_rnn_backward(
        &case.desc,
        case.inputs::<B>(dtype),
        out,
        reserve_of.unwrap_or(reserve),
        case.grads::<B>(dtype),
        GradsWanted::ALL,
    );
    results.push(("dx", read(grads.dx.expect("wanted dx"))));
    results.push(("dh0", read(grads.dh0)));
    if let Some(dc0) = grads.dc0 {
        results.push(("dc0", read(dc0)));
    }
    results.push(("dweights", read(grads.dweights.expect("wanted dweights"))));
    results
}

/// The reference's results, through its functions on `NdArray<f64>`; the inference forward
/// has no dropout.
fn expected(case: &Case) -> Vec<(&'static str, Vec<f64>)> {
    let no_dropout = RnnDescriptor {
        dropout: DropoutSpec::NONE,
        ..case.desc.clone()
    };
    let inference = reference::forward::<R>(&no_dropout, case.inputs::<R>(DType::F64));
    let (out, reserve) = reference::forward_training::<R>(&case.desc, case.inputs::<R>(DType::F64));
    let read = |t: burn::tensor::ops::FloatTensor<R>| -> Vec<f64> {
        Tensor::<R, 1>::from_primitive(TensorPrimitive::Float(t))
            .into_data()
            .to_vec()
            .expect("f64 data")
    };
    let mut results = vec![
        ("y", read(out.y.clone())),
        ("h_n", read(out.h_n.clone())),
        ("inference y", read(inference.y)),
        ("inference h_n", read(inference.h_n)),
    ];
    if let Some(c) = &out.c_n {
        results.push(("c_n", read(c.clone())));
    }
    let grads = reference::backward::<R>(
        &case.desc,
        case.inputs::<R>(DType::F64),
        out,
        reserve,
        case.grads::<R>(DType::F64),
        GradsWanted::ALL,
    );
    results.push(("dx", read(grads.dx.expect("wanted dx"))));
    results.push(("dh0", read(grads.dh0)));
    if let Some(dc0) = grads.dc0 {
        results.push(("dc0", read(dc0)));
    }
    results.push(("dweights", read(grads.dweights.expect("wanted dweights"))));
    results
}

fn assert_close(what: &str, got: &[(&str, Vec<f64>)], expected: &[(&str, Vec<f64>)]) {
    let tol = tolerance(DType::F32);
    assert_eq!(
        got.iter().map(|g| g.0).collect::<Vec<_>>(),
        expected.iter().map(|e| e.0).collect::<Vec<_>>(),
        "{what}: result tensors"
    );
    for ((name, g), (_, e)) in got.iter().zip(expected) {
        assert_eq!(g.len(), e.len(), "{what}: {name} length");
        for (i, (a, b)) in g.iter().zip(e).enumerate() {
            assert!(
                (a - b).abs() <= tol.atol + tol.rtol * b.abs(),
                "{what}: {name}[{i}]: got {a}, expected {b}"
            );
        }
    }
}

fn spec(mode: RnnMode, layers: usize, proj: bool, skip: bool) -> burn_fused_rnn::RnnSpec {
    let mut config = FusedRnnConfig::new(mode, if skip { 6 } else { 5 }, 6)
        .with_num_layers(layers)
        .with_bidirectional(true)
        .with_proj_size(proj.then_some(4));
    if skip {
        config = config.with_input_mode(InputMode::Skip).with_bias(false);
    }
    config.spec()
}

/// Dropout between layers (3 layers, both directions, one length of 0) in every mode,
/// LSTM also with a projection: training forward and backward match the reference, whose
/// masks the kernels reproduce bit for bit; the inference forward applies no dropout.
#[test]
fn dropout_and_zero_lengths_match_the_reference() {
    let Some(_lock) = wgpu("dropout_and_zero_lengths_match_the_reference") else {
        return;
    };
    let dropout = DropoutSpec {
        probability: 0.4,
        seed: 17,
    };
    let configs = [
        (RnnMode::Lstm, false, false, true),
        (RnnMode::Lstm, true, false, false),
        (RnnMode::Gru, false, false, true),
        (RnnMode::RnnTanh, false, true, false),
        (RnnMode::RnnRelu, false, false, true),
    ];
    for (mode, proj, skip, batch_first) in configs {
        let desc = RnnDescriptor::new(
            spec(mode, 3, proj, skip),
            6,
            4,
            batch_first,
            Some(vec![6, 0, 3, 5]),
            dropout,
        );
        let case = Case::new(desc, [true, true, true]);
        let before = cube::kernel_calls();
        let got = run::<W>(&case, DType::F32, None);
        assert_eq!(
            cube::kernel_calls() - before,
            3,
            "{mode:?}: the kernels ran the training forward, the inference forward and the backward"
        );
        assert_close(
            &format!("{mode:?} proj {proj} skip {skip}"),
            &got,
            &expected(&case),
        );
    }
}

/// The kernels' tiles depend on the device (module docs of `cube`, Note [Step kernel]):
/// lavapipe runs the CPU-driver tiles in the parity suite; here the GPU tiles (one column,
/// eight sequences, 64 units per cube) and odd ones (three columns, two sequences, two
/// units per cube: several cubes along both axes, partial tiles) run a slice of the
/// suite's grid, every mode, with and without projection, padding and garbage padding.
#[test]
fn other_tiles_match_the_reference() {
    let Some(_lock) = wgpu("other_tiles_match_the_reference") else {
        return;
    };
    struct Restore;
    impl Drop for Restore {
        fn drop(&mut self) {
            std::env::remove_var("BURN_FUSED_RNN_CUBE_TILES");
        }
    }
    let _restore = Restore;
    let cases: Vec<_> = burn_fused_rnn::testing::parity_cases()
        .into_iter()
        .filter(|c| c.num_layers == 2 && c.bidirectional && c.variable_lengths && c.batch_first)
        .collect();
    let device = Default::default();
    for tiles in ["1,8,64", "3,2,2"] {
        std::env::set_var("BURN_FUSED_RNN_CUBE_TILES", tiles);
        let before = cube::kernel_calls();
        for case in &cases {
            if let Err(failure) =
                burn_fused_rnn::testing::check_case::<W>(case, &device, DType::F32)
            {
                panic!("tiles {tiles}: {failure}");
            }
        }
        assert_eq!(
            cube::kernel_calls() - before,
            3 * cases.len() as u64,
            "tiles {tiles}: the kernels ran every call"
        );
    }
}

/// A length of 0 gives zero outputs and final states equal to the initial ones.
#[test]
fn a_length_of_zero_keeps_the_initial_state() {
    let Some(_lock) = wgpu("a_length_of_zero_keeps_the_initial_state") else {
        return;
    };
    let desc = RnnDescriptor::new(
        spec(RnnMode::Lstm, 2, false, false),
        4,
        3,
        false,
        Some(vec![4, 0, 2]),
        DropoutSpec::NONE,
    );
    let case = Case::new(desc.clone(), [true, true, true]);
    let out = W::fused_rnn_forward(&desc, case.inputs::<W>(DType::F32));
    let read = |t| -> Vec<f32> {
        Tensor::<W, 3>::from_primitive(TensorPrimitive::Float(t))
            .into_data()
            .to_vec()
            .expect("f32 data")
    };
    let (y, h_n, c_n) = (
        read(out.y),
        read(out.h_n),
        read(out.c_n.expect("LSTM has c_n")),
    );
    let f = desc.spec.output_size();
    for t in 0..4 {
        let row = &y[(t * 3 + 1) * f..(t * 3 + 2) * f];
        assert!(row.iter().all(|&v| v == 0.0), "y of sequence 1 at step {t}");
    }
    let (h, p) = (desc.spec.d_hidden, desc.spec.d_state());
    for idx in 0..desc.spec.num_pseudo_layers() {
        let h0 = &case.h0[(idx * 3 + 1) * p..(idx * 3 + 2) * p];
        let c0 = &case.c0[(idx * 3 + 1) * h..(idx * 3 + 2) * h];
        let hn = &h_n[(idx * 3 + 1) * p..(idx * 3 + 2) * p];
        let cn = &c_n[(idx * 3 + 1) * h..(idx * 3 + 2) * h];
        assert!(
            h0.iter().zip(hn).all(|(a, &b)| *a as f32 == b),
            "h_n of pseudo-layer {idx}"
        );
        assert!(
            c0.iter().zip(cn).all(|(a, &b)| *a as f32 == b),
            "c_n of pseudo-layer {idx}"
        );
    }
}

/// Missing output gradients count as zeros, as in the reference.
#[test]
fn missing_output_gradients_are_zeros() {
    let Some(_lock) = wgpu("missing_output_gradients_are_zeros") else {
        return;
    };
    for grads in [
        [false, true, false],
        [true, false, false],
        [false, false, true],
    ] {
        let desc = RnnDescriptor::new(
            spec(RnnMode::Lstm, 2, true, false),
            5,
            3,
            true,
            Some(vec![5, 2, 4]),
            DropoutSpec::NONE,
        );
        let case = Case::new(desc, grads);
        let before = cube::kernel_calls();
        let got = run::<W>(&case, DType::F32, None);
        assert!(cube::kernel_calls() > before, "the kernels ran");
        assert_close(&format!("grads {grads:?}"), &got, &expected(&case));
    }
}

/// The backward with only some gradients wanted (Note [Cube gradients not wanted] in
/// `burn_fused_rnn::cube`): the unwanted ones come back as `None`, the others as the
/// reference computes them.
fn backward_wanted<B: FusedRnnBackend>(
    case: &Case,
    wanted: GradsWanted,
) -> Vec<(&'static str, Vec<f64>)> {
    let (out, reserve) = B::fused_rnn_forward_training(&case.desc, case.inputs::<B>(DType::F32));
    let read = read_f64::<B>;
    let grads = B::fused_rnn_backward(
        &case.desc,
        case.inputs::<B>(DType::F32),
        out,
        reserve,
        case.grads::<B>(DType::F32),
        wanted,
    );
    assert_eq!(grads.dx.is_some(), wanted.x, "{wanted:?}: dx");
    assert_eq!(
        grads.dweights.is_some(),
        wanted.weights,
        "{wanted:?}: dweights"
    );
    let mut results = Vec::new();
    if let Some(dx) = grads.dx {
        results.push(("dx", read(dx)));
    }
    results.push(("dh0", read(grads.dh0)));
    if let Some(dc0) = grads.dc0 {
        results.push(("dc0", read(dc0)));
    }
    if let Some(dweights) = grads.dweights {
        results.push(("dweights", read(dweights)));
    }
    results
}

/// Without `x`'s gradient, the weights' or both, the kernels' backward (plain and under
/// Fusion) leaves them out and the rest match the reference: every mode, 3 layers, both
/// directions, dropout, a length of 0, LSTM with a projection, skip input.
#[test]
fn unwanted_gradients_are_skipped_and_the_rest_match_the_reference() {
    let Some(_lock) = wgpu("unwanted_gradients_are_skipped_and_the_rest_match_the_reference")
    else {
        return;
    };
    let dropout = DropoutSpec {
        probability: 0.3,
        seed: 5,
    };
    let configs = [
        (RnnMode::Lstm, true, false),
        (RnnMode::Gru, false, true),
        (RnnMode::RnnRelu, false, false),
    ];
    for (mode, proj, skip) in configs {
        let desc = RnnDescriptor::new(
            spec(mode, 3, proj, skip),
            5,
            3,
            false,
            Some(vec![5, 0, 3]),
            dropout,
        );
        let case = Case::new(desc, [true, true, true]);
        let all = expected(&case);
        for (x, weights) in [(false, true), (true, false), (false, false)] {
            let wanted = GradsWanted { x, weights };
            let want: Vec<_> = all
                .iter()
                .filter(|(name, _)| match *name {
                    "dx" => x,
                    "dweights" => weights,
                    name => name == "dh0" || name == "dc0",
                })
                .cloned()
                .collect();
            let what = format!("{mode:?} proj {proj} skip {skip} {wanted:?}");
            let before = cube::kernel_calls();
            let got = backward_wanted::<W>(&case, wanted);
            assert_eq!(cube::kernel_calls() - before, 2, "{what}: the kernels ran");
            assert_close(&what, &got, &want);
            let got = backward_wanted::<WFusion>(&case, wanted);
            assert_close(&format!("{what}, fusion"), &got, &want);
        }
    }
}

/// `burn::backend::Wgpu` (fusion) runs the kernels too, dropout included.
#[test]
fn fusion_runs_the_kernels_with_dropout() {
    let Some(_lock) = wgpu("fusion_runs_the_kernels_with_dropout") else {
        return;
    };
    let desc = RnnDescriptor::new(
        spec(RnnMode::Gru, 2, false, false),
        5,
        3,
        false,
        Some(vec![5, 1, 3]),
        DropoutSpec {
            probability: 0.25,
            seed: 3,
        },
    );
    let case = Case::new(desc, [true, true, false]);
    let before = cube::kernel_calls();
    let got = run::<WFusion>(&case, DType::F32, None);
    assert_eq!(
        cube::kernel_calls() - before,
        3,
        "the kernels ran every call"
    );
    assert_close("fusion", &got, &expected(&case));
}

/// With the kernels switched off the reference runs (the counter stays), with the same
/// results; a backward follows the reserve it is given, so a reference reserve runs the
/// reference backward with the kernels on, and a kernel reserve runs the kernels' backward
/// with them off.
#[test]
fn the_switch_and_the_reserve_choose_the_path() {
    let Some(_lock) = wgpu("the_switch_and_the_reserve_choose_the_path") else {
        return;
    };
    let desc = RnnDescriptor::new(
        spec(RnnMode::RnnTanh, 2, false, false),
        4,
        2,
        true,
        None,
        DropoutSpec::NONE,
    );
    let case = Case::new(desc.clone(), [true, true, false]);
    let want = expected(&case);

    cube::set_enabled(false);
    let before = cube::kernel_calls();
    let got = run::<W>(&case, DType::F32, None);
    assert_eq!(cube::kernel_calls(), before, "switched off: no kernel call");
    assert_close("switched off", &got, &want);
    let kernel_reserve = {
        cube::set_enabled(true);
        let r = W::fused_rnn_forward_training(&desc, case.inputs::<W>(DType::F32)).1;
        cube::set_enabled(false);
        r
    };
    let before = cube::kernel_calls();
    let got = run::<W>(&case, DType::F32, Some(kernel_reserve));
    assert_eq!(
        cube::kernel_calls() - before,
        1,
        "the kernels' reserve runs the kernels' backward"
    );
    assert_close("kernel reserve, switched off", &got, &want);

    cube::set_enabled(true);
    let reference_reserve = reference::forward_training::<W>(&desc, case.inputs::<W>(DType::F32)).1;
    let got = run::<W>(&case, DType::F32, Some(reference_reserve));
    assert_close("reference reserve, switched on", &got, &want);
    assert_eq!(
        W::fused_rnn_reserve_layout(&desc, DType::F16, &Default::default())
            .iter()
            .map(|(shape, dtype)| (shape.len(), *dtype))
            .collect::<Vec<_>>(),
        [vec![(1, DType::F32)], vec![(2, DType::F32); 5]].concat(),
        "the kernels' reserve: the tag, then 2-D F32 tensors (layer 1's input, then gate rows and states per layer)"
    );
}

/// A reserve the kernels made for another call panics, naming both layouts.
#[test]
fn a_reserve_of_another_call_is_refused() {
    let Some(_lock) = wgpu("a_reserve_of_another_call_is_refused") else {
        return;
    };
    let d = |t| {
        RnnDescriptor::new(
            spec(RnnMode::Gru, 1, false, false),
            t,
            2,
            true,
            None,
            DropoutSpec::NONE,
        )
    };
    let made_for = Case::new(d(3), [true; 3]);
    let other = W::fused_rnn_forward_training(&made_for.desc, made_for.inputs::<W>(DType::F32)).1;
    let case = Case::new(d(4), [true, false, false]);
    let (out, _) = W::fused_rnn_forward_training(&case.desc, case.inputs::<W>(DType::F32));
    let panic = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        W::fused_rnn_backward(
            &case.desc,
            case.inputs::<W>(DType::F32),
            out,
            other,
            case.grads::<W>(DType::F32),
            GradsWanted::ALL,
        )
    }))
    .expect_err("a reserve made for T = 3 is refused at T = 4");
    let message = panic.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(
        message.starts_with(
            "expected reserve to be the CubeCL kernels' training-forward reserve for this call \
             (F32 tensors of shapes [[25], [16, 24], [16, 6]]"
        ) && message.contains("got shapes [[25], [12, 24], [12, 6]]"),
        "{message}"
    );
}
