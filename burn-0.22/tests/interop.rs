//! burn-nn layers into one `FusedRnn` (`FusedRnn::from_burn_nn`, `from_burn_nn_stack`): for
//! each of burn-nn's six recurrent types, and for stacks, the fused module's outputs and
//! final states against burn-nn's own forward in F64, batch-first or not, with and without
//! bias and initial states; PyTorch's parameter names; what the import refuses, by field.
#![allow(deprecated)]

mod common;

use burn::nn::activation::ActivationConfig;
use burn::store::ModuleSnapshot;
use burn::tensor::{DType, Device, Distribution, Tensor};
use burn_fused_rnn::interop::InteropError;
use burn_fused_rnn::{FusedRnn, RnnState};
use common::{check_values, report, values, Tol};

const TOL: Tol = Tol {
    rtol: 1e-10,
    atol: 1e-12,
};

/// Flex with its default float dtype F64 (burn-nn's layers draw their parameters and zero
/// states in the device's default dtype). Set once, before this process makes a tensor.
fn device() -> Device {
    common::flex_f64()
}

fn random<const D: usize>(shape: [usize; D]) -> Tensor<D> {
    Tensor::random(
        shape,
        Distribution::Uniform(-1.0, 1.0),
        (&device(), DType::F64),
    )
}

fn compare(context: &str, pairs: Vec<(&str, Tensor<3>, Tensor<3>)>, failures: &mut Vec<String>) {
    for (name, got, expected) in pairs {
        assert_eq!(got.dtype(), DType::F64, "{context}: {name}");
        if got.dims() != expected.dims() {
            failures.push(format!(
                "{context}: {name}: expected shape {:?}, got {:?}",
                expected.dims(),
                got.dims()
            ));
            continue;
        }
        failures.extend(check_values(context, name, &values(got), &values(expected), TOL).err());
    }
}

fn state(s: &RnnState) -> (Tensor<3>, Option<Tensor<3>>) {
    (s.hidden.clone(), s.cell.clone())
}

#[test]
fn each_burn_nn_type_imports_to_its_own_outputs() {
    let mut failures = Vec::new();
    for bias in [true, false] {
        for batch_first in [true, false] {
            let ctx = |t: &str| format!("{t} bias={bias} batch_first={batch_first}");
            let x = random([2, 6, 3]);
            let x = if batch_first { x } else { x.swap_dims(0, 1) };

            let nn = burn::nn::LstmConfig::new(3, 5, bias)
                .with_batch_first(batch_first)
                .init(&device());
            let fused = FusedRnn::from_burn_nn(&nn).expect("Lstm");
            let (h0, c0) = (random([2, 5]), random([2, 5]));
            let (y, s) = nn.forward(
                x.clone(),
                Some(burn::nn::LstmState::new(c0.clone(), h0.clone())),
            );
            let (fy, fs) = fused.forward(
                x.clone(),
                Some(RnnState::new(
                    h0.unsqueeze_dim(0),
                    Some(c0.unsqueeze_dim(0)),
                )),
            );
            let (fh, fc) = state(&fs);
            compare(
                &ctx("Lstm"),
                vec![
                    ("y", fy, y),
                    ("h_n", fh, s.hidden.unsqueeze_dim(0)),
                    ("c_n", fc.expect("c_n"), s.cell.unsqueeze_dim(0)),
                ],
                &mut failures,
            );

            let nn = burn::nn::BiLstmConfig::new(3, 4, bias)
                .with_batch_first(batch_first)
                .init(&device());
            let fused = FusedRnn::from_burn_nn(&nn).expect("BiLstm");
            let (y, s) = nn.forward(x.clone(), None);
            let (fy, fs) = fused.forward(x.clone(), None);
            let (fh, fc) = state(&fs);
            compare(
                &ctx("BiLstm"),
                vec![
                    ("y", fy, y),
                    ("h_n", fh, s.hidden),
                    ("c_n", fc.expect("c_n"), s.cell),
                ],
                &mut failures,
            );

            let nn = burn::nn::BiGruConfig::new(3, 4, bias)
                .with_batch_first(batch_first)
                .init(&device());
            let fused = FusedRnn::from_burn_nn(&nn).expect("BiGru");
            let h0 = random([2, 2, 4]);
            let (y, h) = nn.forward(x.clone(), Some(h0.clone()));
            let (fy, fs) = fused.forward(x.clone(), Some(RnnState::new(h0, None)));
            compare(
                &ctx("BiGru"),
                vec![("y", fy, y), ("h_n", fs.hidden, h)],
                &mut failures,
            );

            for activation in [ActivationConfig::Tanh, ActivationConfig::Relu] {
                let ctx = |t: &str| format!("{} {activation:?}", ctx(t));
                let nn = burn::nn::RnnConfig::new(3, 4, bias)
                    .with_batch_first(batch_first)
                    .with_hidden_activation(activation.clone())
                    .init(&device());
                let fused = FusedRnn::from_burn_nn(&nn).expect("Rnn");
                let (y, s) = nn.forward(x.clone(), None);
                let (fy, fs) = fused.forward(x.clone(), None);
                compare(
                    &ctx("Rnn"),
                    vec![("y", fy, y), ("h_n", fs.hidden, s.hidden.unsqueeze_dim(0))],
                    &mut failures,
                );

                let nn = burn::nn::BiRnnConfig::new(3, 4, bias)
                    .with_batch_first(batch_first)
                    .with_hidden_activation(activation.clone())
                    .init(&device());
                let fused = FusedRnn::from_burn_nn(&nn).expect("BiRnn");
                let (y, s) = nn.forward(x.clone(), None);
                let (fy, fs) = fused.forward(x.clone(), None);
                compare(
                    &ctx("BiRnn"),
                    vec![("y", fy, y), ("h_n", fs.hidden, s.hidden)],
                    &mut failures,
                );
            }
        }
        // burn-nn's Gru is batch-first only.
        let nn = burn::nn::GruConfig::new(3, 4, bias).init(&device());
        let fused = FusedRnn::from_burn_nn(&nn).expect("Gru");
        let (x, h0) = (random([2, 6, 3]), random([2, 4]));
        let y = nn.forward(x.clone(), Some(h0.clone()));
        let (fy, _) = fused.forward(x, Some(RnnState::new(h0.unsqueeze_dim(0), None)));
        compare(
            &format!("Gru bias={bias}"),
            vec![("y", fy, y)],
            &mut failures,
        );
    }
    report(failures);
}

/// A stack of burn-nn layers, each fed the previous one's output, is one multi-layer fused
/// module; its final states are the layers' in order (`[layers * directions, B, H]`).
#[test]
fn a_stack_imports_to_one_multi_layer_module() {
    let mut failures = Vec::new();
    let layers: Vec<burn::nn::BiLstm> = [3, 8, 8]
        .iter()
        .map(|&d_input| burn::nn::BiLstmConfig::new(d_input, 4, true).init(&device()))
        .collect();
    let fused = FusedRnn::from_burn_nn_stack(&layers).expect("stack");
    let x = random([2, 5, 3]);
    let mut y = x.clone();
    let (mut hs, mut cs) = (Vec::new(), Vec::new());
    for layer in &layers {
        let (out, s) = layer.forward(y, None);
        y = out;
        hs.push(s.hidden);
        cs.push(s.cell);
    }
    let (fy, fs) = fused.forward(x, None);
    let (fh, fc) = state(&fs);
    compare(
        "BiLstm x3",
        vec![
            ("y", fy, y),
            ("h_n", fh, Tensor::cat(hs, 0)),
            ("c_n", fc.expect("c_n"), Tensor::cat(cs, 0)),
        ],
        &mut failures,
    );

    let grus: Vec<burn::nn::Gru> = [3, 4]
        .iter()
        .map(|&d_input| burn::nn::GruConfig::new(d_input, 4, false).init(&device()))
        .collect();
    let fused = FusedRnn::from_burn_nn_stack(&grus).expect("stack");
    let x = random([2, 5, 3]);
    let y = grus.iter().fold(x.clone(), |y, g| g.forward(y, None));
    let (fy, _) = fused.forward(x, None);
    compare("Gru x2", vec![("y", fy, y)], &mut failures);
    report(failures);
}

/// The imported module's parameters carry PyTorch's names, hold copies of burn-nn's gates
/// (`weight_ih_l0` rows `[H, 2H)` are the forget gate's `Linear` weight, transposed), and
/// are new leaves, not tracked from burn-nn's.
#[test]
fn parameters_are_pytorchs_names_and_new() {
    let nn = burn::nn::LstmConfig::new(3, 5, true).init(&device().autodiff());
    let fused = FusedRnn::from_burn_nn(&nn).expect("Lstm");
    let names: Vec<String> = fused
        .collect(None, None, false)
        .iter()
        .map(|s| s.name.clone())
        .collect();
    assert_eq!(
        names,
        ["weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"]
    );
    let w_ih: Tensor<2> = fused.flat_weights().narrow(0, 0, 20 * 3).reshape([20, 3]);
    let forget = nn
        .forget_gate
        .as_ref()
        .expect("forget gate")
        .input_transform
        .weight
        .val()
        .transpose();
    failures_or_panic(check_values(
        "Lstm",
        "forget rows of weight_ih_l0",
        &values(w_ih.narrow(0, 5, 5)),
        &values(forget),
        TOL,
    ));
    let grads = fused.flat_weights().sum().backward();
    let ones = fused
        .flat_grad(&grads)
        .expect("the imported parameters are trainable");
    assert!(values(ones.unsqueeze_dim::<2>(0).unsqueeze_dim::<3>(0))
        .iter()
        .all(|&g| g == 1.0));
    assert!(
        nn.input_gate
            .input_transform
            .weight
            .val()
            .grad(&grads)
            .is_none(),
        "burn-nn's parameters are not in the imported module's graph"
    );
}

fn failures_or_panic(r: Result<(), String>) {
    if let Err(e) = r {
        panic!("{e}");
    }
}

fn unsupported(err: InteropError) -> String {
    match err {
        InteropError::Unsupported { option, .. } => option,
        other => panic!("expected InteropError::Unsupported, got {other:?}"),
    }
}

/// Options the fused cells cannot compute, and stacks that cannot be one module, are
/// refused by field (Note [What the import refuses]).
#[test]
fn what_the_fused_op_cannot_compute_is_refused_by_field() {
    let d = device();
    let lstm =
        |c: burn::nn::LstmConfig| FusedRnn::from_burn_nn(&c.init(&d)).map(|_| ()).unwrap_err();
    let base = || burn::nn::LstmConfig::new(3, 4, true);
    assert_eq!(
        unsupported(lstm(base().with_clip(Some(1.0)))),
        "layers[0].clip"
    );
    assert_eq!(
        unsupported(lstm(base().with_input_forget(true))),
        "layers[0].input_forget"
    );
    assert_eq!(
        unsupported(lstm(base().with_reverse(true))),
        "layers[0].reverse"
    );
    assert_eq!(
        unsupported(lstm(base().with_gate_activation(ActivationConfig::Relu))),
        "layers[0].gate_activation"
    );
    let gru = burn::nn::GruConfig::new(3, 4, true)
        .with_reset_after(false)
        .init(&d);
    assert_eq!(
        unsupported(FusedRnn::from_burn_nn(&gru).map(|_| ()).unwrap_err()),
        "layers[0].reset_after"
    );
    let birnn = burn::nn::BiRnnConfig::new(3, 4, true)
        .with_hidden_activation(ActivationConfig::Sigmoid)
        .init(&d);
    let err = FusedRnn::from_burn_nn(&birnn).map(|_| ()).unwrap_err();
    assert!(
        err.to_string()
            .contains("layers[0].forward.hidden_activation"),
        "{err}"
    );
    // Stacks.
    let two = [
        burn::nn::LstmConfig::new(3, 4, true).init(&d),
        burn::nn::LstmConfig::new(5, 4, true).init(&d),
    ];
    assert_eq!(
        unsupported(FusedRnn::from_burn_nn_stack(&two).map(|_| ()).unwrap_err()),
        "layers[1].d_input"
    );
    let two = [
        burn::nn::LstmConfig::new(3, 4, true).init(&d),
        burn::nn::LstmConfig::new(4, 6, true).init(&d),
    ];
    assert_eq!(
        unsupported(FusedRnn::from_burn_nn_stack(&two).map(|_| ()).unwrap_err()),
        "layers[1].d_hidden"
    );
    let two = [
        burn::nn::LstmConfig::new(3, 4, true).init(&d),
        burn::nn::LstmConfig::new(4, 4, false).init(&d),
    ];
    assert_eq!(
        unsupported(FusedRnn::from_burn_nn_stack(&two).map(|_| ()).unwrap_err()),
        "layers[1].bias"
    );
    let none: [burn::nn::Lstm; 0] = [];
    let err = FusedRnn::from_burn_nn_stack(&none).map(|_| ()).unwrap_err();
    assert_eq!(
        err,
        InteropError::Empty {
            argument: "layers".into(),
            what: "burn-nn layer".into()
        }
    );
    assert_eq!(
        err.to_string(),
        "layers: expected at least one burn-nn layer, got none"
    );
}

/// The fused module's `y` and final `h` (and `c`), and burn-nn's layer's, on `x`.
type Outputs = (Tensor<3>, Tensor<3>, Option<Tensor<3>>);

fn fused_outputs(fused: &FusedRnn, x: Tensor<3>) -> Outputs {
    let (y, s) = fused.forward(x, None);
    (y, s.hidden, s.cell)
}

#[test]
fn each_burn_nn_type_exports_to_a_layer_with_the_same_outputs() {
    use burn_fused_rnn::{FusedRnnConfig, InputMode, RnnMode};
    let mut failures = Vec::new();
    for bias in [true, false] {
        for batch_first in [true, false] {
            for skip in [false, true] {
                let ctx =
                    |t: &str| format!("{t} bias={bias} batch_first={batch_first} skip={skip}");
                let d_input = if skip { 4 } else { 3 };
                let config = |mode, bi| {
                    FusedRnnConfig::new(mode, d_input, 4)
                        .with_bidirectional(bi)
                        .with_bias(bias)
                        .with_batch_first(batch_first)
                        .with_input_mode(if skip {
                            InputMode::Skip
                        } else {
                            InputMode::Linear
                        })
                };
                let x = random([2, 6, d_input]);
                let x = if batch_first { x } else { x.swap_dims(0, 1) };
                let mut check = |name: &str, fused: &FusedRnn, nn: Outputs, x: Tensor<3>| {
                    let (y, h, c) = fused_outputs(fused, x);
                    let mut pairs = vec![("y", nn.0, y), ("h_n", nn.1, h)];
                    if let (Some(a), Some(b)) = (nn.2, c) {
                        pairs.push(("c_n", a, b));
                    }
                    compare(&ctx(name), pairs, &mut failures);
                };

                let fused = config(RnnMode::Lstm, false).init(&device());
                let nn: burn::nn::Lstm = fused.to_burn_nn().expect("Lstm");
                let (y, s) = nn.forward(x.clone(), None);
                let out = (y, s.hidden.unsqueeze_dim(0), Some(s.cell.unsqueeze_dim(0)));
                check("Lstm", &fused, out, x.clone());

                let fused = config(RnnMode::Lstm, true).init(&device());
                let nn: burn::nn::BiLstm = fused.to_burn_nn().expect("BiLstm");
                let (y, s) = nn.forward(x.clone(), None);
                check("BiLstm", &fused, (y, s.hidden, Some(s.cell)), x.clone());

                // burn-nn's Gru is always batch-first.
                let fused = config(RnnMode::Gru, false).init(&device());
                let nn: burn::nn::Gru = fused.to_burn_nn().expect("Gru");
                let xb = if batch_first {
                    x.clone()
                } else {
                    x.clone().swap_dims(0, 1)
                };
                let y = nn.forward(xb, None);
                let y = if batch_first { y } else { y.swap_dims(0, 1) };
                // burn-nn's Gru returns no final state: its last step's output is it.
                let last = if batch_first {
                    y.clone().narrow(1, 5, 1).swap_dims(0, 1)
                } else {
                    y.clone().narrow(0, 5, 1)
                };
                check("Gru", &fused, (y, last, None), x.clone());

                let fused = config(RnnMode::Gru, true).init(&device());
                let nn: burn::nn::BiGru = fused.to_burn_nn().expect("BiGru");
                let (y, h) = nn.forward(x.clone(), None);
                check("BiGru", &fused, (y, h, None), x.clone());

                for mode in [RnnMode::RnnTanh, RnnMode::RnnRelu] {
                    let fused = config(mode, false).init(&device());
                    let nn: burn::nn::Rnn = fused.to_burn_nn().expect("Rnn");
                    let (y, s) = nn.forward(x.clone(), None);
                    check(
                        &format!("Rnn {mode:?}"),
                        &fused,
                        (y, s.hidden.unsqueeze_dim(0), None),
                        x.clone(),
                    );

                    let fused = config(mode, true).init(&device());
                    let nn: burn::nn::BiRnn = fused.to_burn_nn().expect("BiRnn");
                    let (y, s) = nn.forward(x.clone(), None);
                    check(
                        &format!("BiRnn {mode:?}"),
                        &fused,
                        (y, s.hidden, None),
                        x.clone(),
                    );
                }
            }
        }
    }
    failures_or_panic(if failures.is_empty() {
        Ok(())
    } else {
        Err(failures.join("\n"))
    });
}

#[test]
fn an_export_imports_back_to_the_same_weights_and_refuses_what_burn_nn_lacks() {
    use burn_fused_rnn::{FusedRnnConfig, RnnMode};
    let fused = FusedRnnConfig::new(RnnMode::Gru, 3, 4)
        .with_num_layers(3)
        .with_bidirectional(true)
        .init(&device());
    let stack: Vec<burn::nn::BiGru> = fused.to_burn_nn_stack().expect("a stack of BiGru");
    assert_eq!(stack.len(), 3);
    let back = FusedRnn::from_burn_nn_stack(&stack).expect("import");
    assert_eq!(back.spec(), fused.spec());
    assert_eq!(values(back.flat_weights()), values(fused.flat_weights()));
    // The stack computes what the module computes, layer after layer.
    let x = random([2, 5, 3]);
    let mut y = x.clone();
    for layer in &stack {
        y = layer.forward(y, None).0;
    }
    let (fy, _, _) = fused_outputs(&fused, x);
    let mut failures = Vec::new();
    compare("BiGru stack", vec![("y", fy, y)], &mut failures);
    failures_or_panic(if failures.is_empty() {
        Ok(())
    } else {
        Err(failures.join("\n"))
    });

    let err = |r: Result<burn::nn::Lstm, InteropError>| unsupported(r.map(|_| ()).unwrap_err());
    let lstm = |f: FusedRnnConfig| f.init(&device());
    let gru = lstm(FusedRnnConfig::new(RnnMode::Gru, 3, 4));
    assert_eq!(err(gru.to_burn_nn()), "mode");
    let two = lstm(FusedRnnConfig::new(RnnMode::Lstm, 3, 4).with_num_layers(2));
    assert_eq!(err(two.to_burn_nn()), "num_layers");
    let bi = lstm(FusedRnnConfig::new(RnnMode::Lstm, 3, 4).with_bidirectional(true));
    assert_eq!(err(bi.to_burn_nn()), "bidirectional");
    let proj = lstm(FusedRnnConfig::new(RnnMode::Lstm, 3, 4).with_proj_size(Some(2)));
    assert_eq!(err(proj.to_burn_nn()), "proj_size");
}
