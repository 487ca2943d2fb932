//! Dropout between layers: training only, never after the last layer, seeded and
//! reproducible, fresh masks per call, and the backward pass applies the forward's masks.

mod common;

use burn::backend::{Autodiff, NdArray};
use burn::tensor::{DType, Tensor, TensorMetadata, TensorPrimitive};
use burn_fused_rnn::{
    reference, DropoutSpec, FusedRnnBackend, FusedRnnConfig, GradsWanted, RnnDescriptor, RnnInputs,
    RnnMode, RnnOutputGrads,
};
use common::{check, report, tensor, Tol};

type Ad = Autodiff<NdArray<f64>>;
type Plain = NdArray<f64>;

fn config(layers: usize, dropout: f64) -> FusedRnnConfig {
    FusedRnnConfig::new(RnnMode::Lstm, 3, 4)
        .with_num_layers(layers)
        .with_bidirectional(true)
        .with_dropout(dropout)
        .with_seed(7)
}

fn data(n: usize, seed: u64) -> Vec<f64> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 33) % 2001) as f64 / 1000.0 - 1.0
        })
        .collect()
}

fn vec<B: burn::tensor::backend::Backend>(t: Tensor<B, 3>) -> Vec<f64> {
    t.into_data().convert::<f64>().to_vec().unwrap()
}

#[test]
fn dropout_is_seeded_fresh_per_call_and_training_only() {
    let device = Default::default();
    let params = data(
        config(2, 0.0).init::<Plain>(&device).layout().params_size(),
        1,
    );
    let n = params.len();
    let x: Vec<f64> = data(2 * 5 * 3, 2);
    let module = |dropout| config(2, dropout).init_with_params::<Ad>(tensor(&params, [n], &device));
    let input = || tensor::<Ad, 3>(&x, [2, 5, 3], &device);

    let plain = vec(module(0.0).forward(input(), None).0);
    let a = module(0.5);
    let b = module(0.5);
    let a1 = vec(a.forward(input(), None).0);
    let a2 = vec(a.forward(input(), None).0);
    let b1 = vec(b.forward(input(), None).0);
    assert_ne!(a1, plain, "training with dropout 0.5 changed nothing");
    assert_eq!(a1, b1, "same seed, same call: masks differ");
    assert_ne!(a1, a2, "second call reused the first call's masks");

    // Inference (no autodiff) ignores dropout.
    let inference = config(2, 0.5).init_with_params::<Plain>(tensor(&params, [n], &device));
    let y = vec(inference
        .forward(tensor::<Plain, 3>(&x, [2, 5, 3], &device), None)
        .0);
    report(
        check(
            "inference",
            "output",
            tensor::<Plain, 1>(&y, [y.len()], &device),
            &plain,
            common::F64,
        )
        .err()
        .into_iter()
        .collect(),
    );
}

#[test]
fn dropout_never_follows_the_last_layer() {
    let device = Default::default();
    let cfg = config(1, 0.0);
    let params = data(cfg.init::<Plain>(&device).layout().params_size(), 3);
    let n = params.len();
    let x = data(2 * 5 * 3, 4);
    let run = |dropout| {
        let m = config(1, dropout).init_with_params::<Ad>(tensor(&params, [n], &device));
        vec(m.forward(tensor::<Ad, 3>(&x, [2, 5, 3], &device), None).0)
    };
    assert_eq!(run(0.0), run(0.9));
}

/// The backward of a training forward with dropout, against central differences of the
/// loss through training forwards with the same seed (hence the same masks).
#[test]
fn backward_applies_the_forward_masks() {
    let device = Default::default();
    let spec = config(2, 0.4).spec();
    let desc = RnnDescriptor::new(
        spec,
        4,
        2,
        true,
        Some(vec![4, 2]),
        DropoutSpec {
            probability: 0.4,
            seed: 11,
        },
    );
    let n = desc.params_size();
    let (w, x) = (data(n, 5), data(2 * 4 * 3, 6));
    let gy = data(2 * 4 * 8, 7);
    let prim = |t: Tensor<Plain, 1>| t.into_primitive().tensor();
    let run = |w: &[f64], x: &[f64]| {
        let inputs = RnnInputs::<Plain> {
            x: tensor::<Plain, 3>(x, desc.input_shape(), &device)
                .into_primitive()
                .tensor(),
            h0: None,
            c0: None,
            weights: prim(tensor(w, [n], &device)),
        };
        let (out, reserve) = Plain::fused_rnn_forward_training(&desc, inputs.clone());
        (inputs, out, reserve)
    };
    let loss = |w: &[f64], x: &[f64]| -> f64 {
        let (_, out, _) = run(w, x);
        let y = Tensor::<Plain, 3>::from_primitive(TensorPrimitive::Float(out.y));
        (y * tensor::<Plain, 3>(&gy, desc.output_shape(), &device))
            .sum()
            .into_scalar()
    };
    let (inputs, out, reserve) = run(&w, &x);
    let layout: Vec<(Vec<usize>, DType)> = reserve
        .tensors
        .iter()
        .map(|t| (t.shape().to_vec(), t.dtype()))
        .collect();
    assert_eq!(
        layout,
        Plain::fused_rnn_reserve_layout(&desc, DType::F64, &device),
        "reserve with dropout"
    );
    let g = Plain::fused_rnn_backward(
        &desc,
        inputs,
        out,
        reserve,
        RnnOutputGrads {
            dy: Some(
                tensor::<Plain, 3>(&gy, desc.output_shape(), &device)
                    .into_primitive()
                    .tensor(),
            ),
            dh_n: None,
            dc_n: None,
        },
        GradsWanted::ALL,
    );
    let eps = 1e-6;
    let fd_w: Vec<f64> = (0..n)
        .map(|i| {
            let (mut a, mut b) = (w.clone(), w.clone());
            a[i] += eps;
            b[i] -= eps;
            (loss(&a, &x) - loss(&b, &x)) / (2.0 * eps)
        })
        .collect();
    let fd_x: Vec<f64> = (0..x.len())
        .map(|i| {
            let (mut a, mut b) = (x.clone(), x.clone());
            a[i] += eps;
            b[i] -= eps;
            (loss(&w, &a) - loss(&w, &b)) / (2.0 * eps)
        })
        .collect();
    let tol = Tol {
        rtol: 1e-5,
        atol: 1e-7,
    };
    let dw = Tensor::<Plain, 1>::from_primitive(TensorPrimitive::Float(g.dweights.unwrap()));
    let dx = Tensor::<Plain, 3>::from_primitive(TensorPrimitive::Float(g.dx.unwrap()));
    report(
        [
            check("dropout 0.4, 2 layers", "dweights", dw, &fd_w, tol),
            check("dropout 0.4, 2 layers", "dx", dx, &fd_x, tol),
        ]
        .into_iter()
        .filter_map(Result::err)
        .collect(),
    );
}

/// The native CPU kernel draws the reference's masks (Note [Dropout masks] in
/// `burn_fused_rnn::reference`): with dropout, its training forward and backward equal the
/// reference's, in both layouts, with padding, on NdArray f64, NdArray f32 and Flex.
#[test]
fn native_kernel_draws_the_reference_masks() {
    fn run<B: FusedRnnBackend>(batch_first: bool, tol: Tol) {
        let device = Default::default();
        let spec = config(3, 0.3).spec();
        let desc = RnnDescriptor::new(
            spec,
            5,
            3,
            batch_first,
            Some(vec![5, 2, 4]),
            DropoutSpec {
                probability: 0.3,
                seed: 99,
            },
        );
        let n = desc.params_size();
        let prim1 = |v: &[f64]| {
            tensor::<B, 1>(v, [v.len()], &device)
                .into_primitive()
                .tensor()
        };
        let prim3 = |v: &[f64], shape: [usize; 3]| {
            tensor::<B, 3>(v, shape, &device).into_primitive().tensor()
        };
        let inputs = RnnInputs::<B> {
            x: prim3(&data(3 * 5 * 3, 21), desc.input_shape()),
            h0: None,
            c0: None,
            weights: prim1(&data(n, 22)),
        };
        let gy = data(3 * 5 * 8, 23);
        let grads = || RnnOutputGrads::<B> {
            dy: Some(prim3(&gy, desc.output_shape())),
            dh_n: None,
            dc_n: None,
        };
        let (out_r, res_r) = reference::forward_training::<B>(&desc, inputs.clone());
        let (out_n, res_n) = B::fused_rnn_forward_training(&desc, inputs.clone());
        let float3 = |t| Tensor::<B, 3>::from_primitive(TensorPrimitive::Float(t));
        let float1 = |t| Tensor::<B, 1>::from_primitive(TensorPrimitive::Float(t));
        let ctx = format!("dropout 0.3, 3 layers, batch_first = {batch_first}");
        let mut failures = Vec::new();
        failures.extend(
            check(
                &ctx,
                "y",
                float3(out_n.y.clone()),
                &vec(float3(out_r.y.clone())),
                tol,
            )
            .err(),
        );
        let all = GradsWanted::ALL;
        let g_r = reference::backward::<B>(&desc, inputs.clone(), out_r, res_r, grads(), all);
        let g_n = B::fused_rnn_backward(&desc, inputs, out_n, res_n, grads(), all);
        let (dx_n, dx_r) = (g_n.dx.unwrap(), g_r.dx.unwrap());
        failures.extend(check(&ctx, "dx", float3(dx_n), &vec(float3(dx_r)), tol).err());
        let dw_r: Vec<f64> = float1(g_r.dweights.unwrap())
            .into_data()
            .convert::<f64>()
            .to_vec()
            .unwrap();
        failures.extend(check(&ctx, "dweights", float1(g_n.dweights.unwrap()), &dw_r, tol).err());
        report(failures);
    }
    for batch_first in [false, true] {
        run::<Plain>(batch_first, common::F64);
        run::<NdArray<f32>>(batch_first, common::F32);
        run::<burn::backend::Flex>(batch_first, common::F32);
    }
}
