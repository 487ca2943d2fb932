//! The drop-in layers against burn-nn 0.22's own (Note [Drop-in layers]): each of the six,
//! given burn-nn's weights through a checkpoint written by the burn-nn model
//! (`save_file` → `load_file`, nothing else changed), computes burn-nn's outputs, final
//! states and gradients (F64), batch-first or not, reversed, with and without bias and
//! initial states; a model trains to burn-nn's weights after the `use` swap alone; options
//! the fused cells cannot compute are refused by name.
#![allow(deprecated)]

mod common;

use burn::module::Module;
use burn::tensor::{DType, Device, Distribution, Tensor};
use burn_fused_rnn::nn as fused;
use common::{check_values, report, values, Tol};

const TOL: Tol = Tol {
    rtol: 1e-9,
    atol: 1e-11,
};

/// Flex under autodiff, its default float dtype F64 (burn-nn's layers make their zero
/// states and outputs in the device's default dtype, so F64 needs the default to be F64).
/// Set once, before this process makes any tensor; every test here starts by calling it.
fn device() -> Device {
    common::flex_f64().autodiff()
}

fn random<const D: usize>(shape: [usize; D]) -> Tensor<D> {
    Tensor::random(
        shape,
        Distribution::Uniform(-1.0, 1.0),
        (&device(), DType::F64),
    )
}

/// burn-nn's parameters, as F64.
fn f64_module<M: Module>(m: M) -> M {
    struct ToF64;
    impl burn::module::ModuleMapper for ToF64 {
        fn map_float<const D: usize>(
            &mut self,
            p: burn::module::Param<Tensor<D>>,
        ) -> burn::module::Param<Tensor<D>> {
            p.map(|t| t.cast(DType::F64).detach().require_grad())
        }
    }
    m.map(&mut ToF64)
}

/// `to` with the parameters of `from`, through a checkpoint file in the temporary folder
/// (the migration a user does: the model saved while it held burn-nn's layer, loaded
/// after the swap).
fn through_file<A: Module, B: Module>(from: &A, to: B, name: &str) -> B {
    let dir = std::env::temp_dir().join(format!("bfr22-nn-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("layer.bpk");
    from.clone().save_file(&path).expect("save burn-nn's layer");
    // Kept: Burn 0.22 reads a loaded parameter's bytes from the file when it is first used.
    to.load_file(&path)
}

/// Outputs, and the gradients of `Σ outputs·weights` with respect to the input and to
/// the parameters named in `params`, of one layer.
struct Run {
    outputs: Vec<(&'static str, Vec<f64>)>,
    grads: Vec<(String, Vec<f64>)>,
}

fn compare(label: &str, a: Run, b: Run, failures: &mut Vec<String>) {
    for ((name, x), (_, y)) in a.outputs.iter().zip(&b.outputs) {
        failures.extend(check_values(label, name, x, y, TOL).err());
    }
    assert_eq!(a.grads.len(), b.grads.len());
    for ((name, x), (_, y)) in a.grads.iter().zip(&b.grads) {
        failures.extend(check_values(label, name, x, y, TOL).err());
    }
}

fn loss(parts: &[Tensor<3>]) -> Tensor<1> {
    parts
        .iter()
        .map(|t| (t.clone() * t.clone().sin()).sum())
        .reduce(|a, b| a + b)
        .expect("outputs")
}

fn grads_of(
    grads: &burn::tensor::Gradients,
    named: Vec<(String, Tensor<2>)>,
) -> Vec<(String, Vec<f64>)> {
    named
        .into_iter()
        .map(|(n, t)| {
            let g = t
                .grad(grads)
                .unwrap_or_else(|| panic!("no gradient for {n}"));
            (n, values(g))
        })
        .collect()
}

fn gate_weights(prefix: &str, g: &burn::nn::GateController) -> Vec<(String, Tensor<2>)> {
    vec![
        (
            format!("{prefix}.input_transform.weight"),
            g.input_transform.weight.val(),
        ),
        (
            format!("{prefix}.hidden_transform.weight"),
            g.hidden_transform.weight.val(),
        ),
    ]
}

#[test]
fn lstm_matches_burn_nn() {
    let mut failures = Vec::new();
    for (batch_first, reverse, bias, with_state) in [
        (true, false, true, false),
        (false, true, true, true),
        (true, true, false, true),
    ] {
        let label = format!("Lstm bf={batch_first} rev={reverse} bias={bias} state={with_state}");
        let nn = f64_module(
            burn::nn::LstmConfig::new(3, 5, bias)
                .with_batch_first(batch_first)
                .with_reverse(reverse)
                .init(&device()),
        );
        let ours = through_file(
            &nn,
            fused::LstmConfig::new(3, 5, bias)
                .with_batch_first(batch_first)
                .with_reverse(reverse)
                .init(&device()),
            "lstm",
        );
        let x = random([4, 6, 3]);
        let (c0, h0) = (random([4, 5]), random([4, 5]));
        let x = if batch_first { x } else { x.swap_dims(0, 1) };
        let run = |gates: Vec<(String, Tensor<2>)>, f: &dyn Fn(Tensor<3>) -> Vec<Tensor<3>>| {
            let x = x.clone().require_grad();
            let outs = f(x.clone());
            let grads = loss(&outs).backward();
            let mut g = grads_of(&grads, gates);
            g.push(("dx".into(), values(x.grad(&grads).expect("dx"))));
            Run {
                outputs: ["y", "c_n", "h_n"]
                    .into_iter()
                    .zip(outs.into_iter().map(values))
                    .collect(),
                grads: g,
            }
        };
        let state = || with_state.then(|| burn::nn::LstmState::new(c0.clone(), h0.clone()));
        let a = run(gate_weights("input_gate", &nn.input_gate), &|x| {
            let (y, s) = nn.forward(x, state());
            vec![y, s.cell.unsqueeze_dim(0), s.hidden.unsqueeze_dim(0)]
        });
        let b = run(gate_weights("input_gate", &ours.input_gate), &|x| {
            let (y, s) = ours.forward(x, state());
            vec![y, s.cell.unsqueeze_dim(0), s.hidden.unsqueeze_dim(0)]
        });
        compare(&label, a, b, &mut failures);
    }
    report(failures);
}

#[test]
fn bilstm_matches_burn_nn() {
    let mut failures = Vec::new();
    for (batch_first, with_state) in [(true, false), (false, true)] {
        let label = format!("BiLstm bf={batch_first} state={with_state}");
        let nn = f64_module(
            burn::nn::BiLstmConfig::new(3, 4, true)
                .with_batch_first(batch_first)
                .init(&device()),
        );
        let ours = through_file(
            &nn,
            fused::BiLstmConfig::new(3, 4, true)
                .with_batch_first(batch_first)
                .init(&device()),
            "bilstm",
        );
        let x = random([3, 5, 3]);
        let x = if batch_first { x } else { x.swap_dims(0, 1) };
        let (c0, h0) = (random([2, 3, 4]), random([2, 3, 4]));
        let state = || with_state.then(|| burn::nn::LstmState::new(c0.clone(), h0.clone()));
        let run = |gates, f: &dyn Fn(Tensor<3>) -> Vec<Tensor<3>>| {
            let x = x.clone().require_grad();
            let outs = f(x.clone());
            let grads = loss(&outs).backward();
            let mut g = grads_of(&grads, gates);
            g.push(("dx".into(), values(x.grad(&grads).expect("dx"))));
            Run {
                outputs: ["y", "c_n", "h_n"]
                    .into_iter()
                    .zip(outs.into_iter().map(values))
                    .collect(),
                grads: g,
            }
        };
        let a = run(
            gate_weights(
                "reverse.forget_gate",
                nn.reverse.forget_gate.as_ref().unwrap(),
            ),
            &|x| {
                let (y, s) = nn.forward(x, state());
                vec![y, s.cell, s.hidden]
            },
        );
        let b = run(
            gate_weights(
                "reverse.forget_gate",
                ours.reverse.forget_gate.as_ref().unwrap(),
            ),
            &|x| {
                let (y, s) = ours.forward(x, state());
                vec![y, s.cell, s.hidden]
            },
        );
        compare(&label, a, b, &mut failures);
    }
    report(failures);
}

#[test]
fn gru_and_bigru_match_burn_nn() {
    let mut failures = Vec::new();
    for bias in [true, false] {
        let nn = f64_module(burn::nn::GruConfig::new(3, 4, bias).init(&device()));
        let ours = through_file(
            &nn,
            fused::GruConfig::new(3, 4, bias).init(&device()),
            "gru",
        );
        let x = random([2, 6, 3]);
        let h0 = random([2, 4]);
        let run = |gates, f: &dyn Fn(Tensor<3>) -> Vec<Tensor<3>>| {
            let x = x.clone().require_grad();
            let outs = f(x.clone());
            let grads = loss(&outs).backward();
            let mut g = grads_of(&grads, gates);
            g.push(("dx".into(), values(x.grad(&grads).expect("dx"))));
            Run {
                outputs: vec![("y", values(outs[0].clone()))],
                grads: g,
            }
        };
        let a = run(gate_weights("new_gate", &nn.new_gate), &|x| {
            vec![nn.forward(x, Some(h0.clone()))]
        });
        let b = run(gate_weights("new_gate", &ours.new_gate), &|x| {
            vec![ours.forward(x, Some(h0.clone()))]
        });
        compare(&format!("Gru bias={bias}"), a, b, &mut failures);
    }
    for batch_first in [true, false] {
        let nn = f64_module(
            burn::nn::BiGruConfig::new(3, 4, true)
                .with_batch_first(batch_first)
                .init(&device()),
        );
        let ours = through_file(
            &nn,
            fused::BiGruConfig::new(3, 4, true)
                .with_batch_first(batch_first)
                .init(&device()),
            "bigru",
        );
        let x = random([2, 5, 3]);
        let x = if batch_first { x } else { x.swap_dims(0, 1) };
        let h0 = random([2, 2, 4]);
        let a = nn.forward(x.clone(), Some(h0.clone()));
        let b = ours.forward(x, Some(h0));
        for (name, p, q) in [("y", a.0, b.0), ("h_n", a.1, b.1)] {
            failures.extend(
                check_values(
                    &format!("BiGru bf={batch_first}"),
                    name,
                    &values(q),
                    &values(p),
                    TOL,
                )
                .err(),
            );
        }
    }
    report(failures);
}

#[test]
fn rnn_and_birnn_match_burn_nn() {
    use burn::nn::activation::ActivationConfig;
    let mut failures = Vec::new();
    for (act, reverse, batch_first) in [
        (ActivationConfig::Tanh, false, true),
        (ActivationConfig::Relu, true, false),
    ] {
        let label = format!("Rnn {act:?} rev={reverse} bf={batch_first}");
        let nn = f64_module(
            burn::nn::RnnConfig::new(3, 4, true)
                .with_hidden_activation(act.clone())
                .with_reverse(reverse)
                .with_batch_first(batch_first)
                .init(&device()),
        );
        let ours = through_file(
            &nn,
            fused::RnnConfig::new(3, 4, true)
                .with_hidden_activation(act.clone())
                .with_reverse(reverse)
                .with_batch_first(batch_first)
                .init(&device()),
            "rnn",
        );
        let x = random([2, 5, 3]);
        let x = if batch_first { x } else { x.swap_dims(0, 1) };
        let h0 = burn::nn::RnnState::new(random([2, 4]));
        let (y0, s0) = nn.forward(x.clone(), Some(burn::nn::RnnState::new(h0.hidden.clone())));
        let (y1, s1) = ours.forward(x.clone(), Some(h0));
        failures.extend(check_values(&label, "y", &values(y1), &values(y0), TOL).err());
        failures
            .extend(check_values(&label, "h_n", &values(s1.hidden), &values(s0.hidden), TOL).err());

        let nn = f64_module(
            burn::nn::BiRnnConfig::new(3, 4, false)
                .with_hidden_activation(act.clone())
                .with_batch_first(batch_first)
                .init(&device()),
        );
        let ours = through_file(
            &nn,
            fused::BiRnnConfig::new(3, 4, false)
                .with_hidden_activation(act)
                .with_batch_first(batch_first)
                .init(&device()),
            "birnn",
        );
        let (y0, s0) = nn.forward(x.clone(), None);
        let (y1, s1) = ours.forward(x, None);
        failures.extend(check_values(&label, "bi y", &values(y1), &values(y0), TOL).err());
        failures.extend(
            check_values(
                &label,
                "bi h_n",
                &values(s1.hidden),
                &values(s0.hidden),
                TOL,
            )
            .err(),
        );
    }
    report(failures);
}

/// A model written against burn-nn, its `use` line swapped: it loads the burn-nn model's
/// checkpoint and trains (Adam, 5 steps) to the weights the burn-nn model trains to.
#[test]
fn a_model_trains_like_burn_nn_after_the_use_swap() {
    mod with_burn_nn {
        use burn::module::Module;
        use burn::nn::{BiLstm, BiLstmConfig, Linear, LinearConfig};
        use burn::tensor::{Device, Tensor};
        #[derive(Module, Debug)]
        pub struct Model {
            pub rnn: BiLstm,
            pub head: Linear,
        }
        impl Model {
            pub fn new(device: &Device) -> Self {
                Self {
                    rnn: BiLstmConfig::new(3, 4, true).init(device),
                    head: LinearConfig::new(8, 1).init(device),
                }
            }
            pub fn forward(&self, x: Tensor<3>) -> Tensor<3> {
                self.head.forward(self.rnn.forward(x, None).0)
            }
        }
    }
    mod with_fused {
        use burn::module::Module;
        use burn::nn::{Linear, LinearConfig};
        use burn::tensor::{Device, Tensor};
        use burn_fused_rnn::nn::{BiLstm, BiLstmConfig}; // the only change
        #[derive(Module, Debug)]
        pub struct Model {
            pub rnn: BiLstm,
            pub head: Linear,
        }
        impl Model {
            pub fn new(device: &Device) -> Self {
                Self {
                    rnn: BiLstmConfig::new(3, 4, true).init(device),
                    head: LinearConfig::new(8, 1).init(device),
                }
            }
            pub fn forward(&self, x: Tensor<3>) -> Tensor<3> {
                self.head.forward(self.rnn.forward(x, None).0)
            }
        }
    }
    use burn::optim::{AdamConfig, GradientsParams};
    let device = device();
    let mut a = with_burn_nn::Model::new(&device);
    let mut b = through_file(&a, with_fused::Model::new(&device), "train");
    let (mut oa, mut ob) = (AdamConfig::new().init(), AdamConfig::new().init());
    for step in 0..5 {
        let x: Tensor<3> = random([4, 6, 3]);
        let target: Tensor<3> = random([4, 6, 1]);
        let la = (a.forward(x.clone()) - target.clone())
            .powi_scalar(2)
            .mean();
        let lb = (b.forward(x) - target).powi_scalar(2).mean();
        let (va, vb) = (values(la.clone()), values(lb.clone()));
        assert!(
            (va[0] - vb[0]).abs() < 1e-5,
            "step {step}: loss {va:?} vs {vb:?}"
        );
        a = oa.step(
            0.01,
            a.clone(),
            GradientsParams::from_grads(la.backward(), &a),
        );
        b = ob.step(
            0.01,
            b.clone(),
            GradientsParams::from_grads(lb.backward(), &b),
        );
    }
    let wa = values(a.rnn.reverse.cell_gate.hidden_transform.weight.val());
    let wb = values(b.rnn.reverse.cell_gate.hidden_transform.weight.val());
    report(
        check_values(
            "trained",
            "reverse.cell_gate.hidden_transform.weight",
            &wb,
            &wa,
            Tol {
                rtol: 1e-4,
                atol: 1e-6,
            },
        )
        .err()
        .into_iter()
        .collect(),
    );
}

#[test]
fn options_the_fused_cells_cannot_compute_are_refused() {
    use burn::nn::activation::ActivationConfig;
    type Build = Box<dyn Fn()>;
    let cases: Vec<(&str, Build)> = vec![
        (
            "clip",
            Box::new(|| {
                drop(
                    fused::LstmConfig::new(2, 3, true)
                        .with_clip(Some(1.0))
                        .init(&device()),
                )
            }),
        ),
        (
            "input_forget",
            Box::new(|| {
                drop(
                    fused::BiLstmConfig::new(2, 3, true)
                        .with_input_forget(true)
                        .init(&device()),
                )
            }),
        ),
        (
            "gate_activation",
            Box::new(|| {
                drop(
                    fused::GruConfig::new(2, 3, true)
                        .with_gate_activation(ActivationConfig::Relu)
                        .init(&device()),
                )
            }),
        ),
        (
            "reset_after",
            Box::new(|| {
                drop(
                    fused::BiGruConfig::new(2, 3, true)
                        .with_reset_after(false)
                        .init(&device()),
                )
            }),
        ),
        (
            "hidden_activation",
            Box::new(|| {
                drop(
                    fused::RnnConfig::new(2, 3, true)
                        .with_hidden_activation(ActivationConfig::Gelu)
                        .init(&device()),
                )
            }),
        ),
    ];
    for (field, f) in cases {
        let err = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).expect_err(field);
        let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(
            msg.contains(field) && msg.contains("expected"),
            "{field}: {msg}"
        );
    }
}
