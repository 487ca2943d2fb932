//! Optimizers train the fused op end to end: gradients reach every canonical `Param`.
//!
//! Each run seeds NdArray's generator and holds it (`tensors::seeded`), so the weights and
//! inputs are the same on every run: over seeds 1 to 30, Adam ended at 0.009 to 0.028 of
//! its first loss and SGD at 0.08 to 0.55 (one seed above the 0.5 asserted below).

use burn::backend::{Autodiff, NdArray};
use burn::optim::{AdamConfig, GradientsParams, Optimizer, SgdConfig};
use burn::tensor::{Distribution, Int, Tensor};
use burn_fused_rnn::{FusedRnn, FusedRnnConfig, RnnMode};

type B = Autodiff<NdArray>;

#[path = "common/tensors.rs"]
mod tensors;

/// Target: the running mean of the input's first feature, read from hidden unit 0 of the
/// last layer (forward direction) at every step. A recurrent task a GRU learns quickly.
fn loss(model: &FusedRnn<B>, x: &Tensor<B, 3>) -> Tensor<B, 1> {
    let [batch, seq, _] = x.dims();
    let (y, _) = model.forward(x.clone(), None);
    let pred = y.narrow(2, 0, 1);
    let steps = Tensor::<B, 1, Int>::arange(1..seq as i64 + 1, &x.device())
        .float()
        .reshape([1, seq, 1]);
    let target = x.clone().narrow(2, 0, 1).cumsum(1) / steps;
    let diff = pred - target.detach();
    (diff.clone() * diff).sum() / (batch * seq) as f64
}

fn train<O: Optimizer<FusedRnn<B>, B>>(mut optim: O, lr: f64, steps: usize) -> (f32, f32) {
    let _rng = tensors::seeded::<B>(21);
    let device = Default::default();
    let mut model = FusedRnnConfig::new(RnnMode::Gru, 2, 8)
        .with_num_layers(2)
        .with_bidirectional(true)
        .init::<B>(&device);
    let x = Tensor::<B, 3>::random([16, 10, 2], Distribution::Uniform(-1.0, 1.0), &device);
    let first = loss(&model, &x).into_scalar();
    for _ in 0..steps {
        let l = loss(&model, &x);
        let grads = GradientsParams::from_grads(l.backward(), &model);
        // Every canonical parameter received a gradient.
        assert_eq!(grads.len(), model.num_params_tensors());
        model = optim.step(lr, model, grads);
    }
    let last = loss(&model, &x).into_scalar();
    (first, last)
}

trait ParamCount {
    fn num_params_tensors(&self) -> usize;
}

impl ParamCount for FusedRnn<B> {
    fn num_params_tensors(&self) -> usize {
        self.layout().entries().len()
    }
}

#[test]
fn adam_trains_the_fused_op() {
    let (first, last) = train(AdamConfig::new().init(), 0.02, 60);
    assert!(last < 0.2 * first, "Adam: loss {first} -> {last}");
}

#[test]
fn sgd_trains_the_fused_op() {
    let (first, last) = train(SgdConfig::new().init(), 0.5, 60);
    assert!(last < 0.5 * first, "SGD: loss {first} -> {last}");
}

/// The gradients each parameter and `x` get from one backward of `(y ∘ r).sum()` and the
/// final states' sums, for a 2-layer bidirectional LSTM over a padded batch; `x` tracked
/// or not, the parameters trained or frozen (`no_grad`). `None` where untracked.
#[allow(clippy::type_complexity)]
fn gradients<A>(track_x: bool, train_weights: bool) -> (Option<Vec<f64>>, Option<Vec<Vec<f64>>>)
where
    A: burn::tensor::backend::AutodiffBackend + burn_fused_rnn::FusedRnnBackend,
{
    let device = Default::default();
    let mut model = FusedRnnConfig::new(RnnMode::Lstm, 3, 5)
        .with_num_layers(2)
        .with_bidirectional(true)
        .with_batch_first(true)
        .init::<A>(&device);
    // The same weights on every call: from a fixed flat vector.
    let n = model.layout().params_size();
    let flat: Vec<f32> = (0..n).map(|i| ((i as f32) * 0.37).sin() * 0.4).collect();
    model = model
        .config()
        .init_with_params::<A>(Tensor::from_floats(flat.as_slice(), &device));
    if !train_weights {
        model = burn::module::Module::no_grad(model);
    }
    let vals = |n: usize, k: f32| -> Vec<f32> { (0..n).map(|i| (i as f32 * k).cos()).collect() };
    let x =
        Tensor::<A, 1>::from_floats(vals(4 * 6 * 3, 0.7).as_slice(), &device).reshape([4, 6, 3]);
    let x = if track_x { x.require_grad() } else { x };
    let r =
        Tensor::<A, 1>::from_floats(vals(4 * 6 * 10, 1.3).as_slice(), &device).reshape([4, 6, 10]);
    let (y, state) = model.forward_with_lengths(x.clone(), &[6, 2, 0, 5], None);
    let loss = (y * r).sum() + state.hidden.sum() + state.cell.expect("LSTM").sum() * 0.5;
    let grads = loss.backward();
    let read = |t: Tensor<A::InnerBackend, 2>| t.into_data().convert::<f64>().to_vec().unwrap();
    let read1 = |t: Tensor<A::InnerBackend, 1>| t.into_data().convert::<f64>().to_vec().unwrap();
    let dx = x
        .grad(&grads)
        .map(|g| g.into_data().convert::<f64>().to_vec::<f64>().unwrap());
    let dw = train_weights.then(|| {
        let mut out = Vec::new();
        for cell in &model.cells {
            let ih = cell.weight_ih.as_ref().expect("W_ih");
            out.push(read(ih.val().grad(&grads).expect("W_ih's gradient")));
            out.push(read(
                cell.weight_hh.val().grad(&grads).expect("W_hh's gradient"),
            ));
            let b = cell.bias_ih.as_ref().expect("b_ih");
            out.push(read1(b.val().grad(&grads).expect("b_ih's gradient")));
        }
        out
    });
    (dx, dw)
}

/// Without `x`'s gradient (a layer that reads data) or without the weights' (a frozen
/// layer), the native backward skips their GEMMs (the core's Note [Gradients not wanted]);
/// the gradients still wanted are the same bits as when every gradient is, on NdArray and
/// Flex.
#[test]
fn untracked_x_or_frozen_weights_leave_the_other_gradients_unchanged() {
    fn check<A>(name: &str)
    where
        A: burn::tensor::backend::AutodiffBackend + burn_fused_rnn::FusedRnnBackend,
    {
        let (dx_all, dw_all) = gradients::<A>(true, true);
        let (dx_all, dw_all) = (dx_all.expect("x tracked"), dw_all.expect("weights trained"));
        let (dx, dw) = gradients::<A>(false, true);
        assert!(
            dx.is_none(),
            "{name}: expected no gradient for an untracked x"
        );
        assert_eq!(
            dw.expect("trained"),
            dw_all,
            "{name}: weights' gradients without x's"
        );
        let (dx, dw) = gradients::<A>(true, false);
        assert!(dw.is_none());
        assert_eq!(
            dx.expect("tracked"),
            dx_all,
            "{name}: x's gradient with frozen weights"
        );
        // Independent of the kernel: the gradients are not all zeros.
        assert!(dx_all.iter().any(|&v| v.abs() > 1e-3), "{name}: dx is zero");
    }
    check::<Autodiff<NdArray>>("ndarray f32");
    check::<Autodiff<burn::backend::Flex>>("flex");
}

/// The native CPU backward returns the unwanted gradients as `None` (it skipped them) and
/// the wanted ones equal to the reference's. (f32: NdArray and NdArray<f64> share a device,
/// whose default float type the other tests of this binary set.)
#[test]
fn the_native_backward_skips_unwanted_gradients() {
    use burn::tensor::{DType, TensorData, TensorPrimitive};
    use burn_fused_rnn::{
        reference, DropoutSpec, FusedRnnBackend, GradsWanted, RnnDescriptor, RnnInputs,
        RnnOutputGrads, RnnSpec,
    };
    type N = NdArray;
    let device = Default::default();
    let spec = RnnSpec {
        num_layers: 2,
        ..RnnSpec::new(RnnMode::Gru, 3, 4)
    };
    let desc = RnnDescriptor::new(spec, 5, 2, false, None, DropoutSpec::NONE);
    let values =
        |n: usize, k: f32| -> Vec<f32> { (0..n).map(|i| (i as f32 * k).sin() * 0.5).collect() };
    let t = |shape: [usize; 3], k: f32| {
        let v: Vec<f32> = values(shape.iter().product(), k);
        Tensor::<N, 3>::from_data(TensorData::new(v, shape), (&device, DType::F32))
            .into_primitive()
            .tensor()
    };
    let weights = || {
        let v: Vec<f32> = values(desc.params_size(), 0.7);
        Tensor::<N, 1>::from_data(
            burn::tensor::TensorData::new(v, [desc.params_size()]),
            &device,
        )
        .into_primitive()
        .tensor()
    };
    let inputs = || RnnInputs::<N> {
        x: t(desc.input_shape(), 0.3),
        h0: Some(t(desc.hidden_shape(), 0.9)),
        c0: None,
        weights: weights(),
    };
    let grads = || RnnOutputGrads::<N> {
        dy: Some(t(desc.output_shape(), 1.1)),
        dh_n: None,
        dc_n: None,
    };
    let flat = |t| -> Vec<f64> {
        let t = Tensor::<N, 1>::from_primitive(TensorPrimitive::Float(t));
        t.into_data().convert::<f64>().to_vec().unwrap()
    };
    let (out_r, res_r) = reference::forward_training::<N>(&desc, inputs());
    let all = reference::backward::<N>(&desc, inputs(), out_r, res_r, grads(), GradsWanted::ALL);
    for (x, weights) in [(false, true), (true, false), (false, false)] {
        let (out, res) = N::fused_rnn_forward_training(&desc, inputs());
        let wanted = GradsWanted { x, weights };
        let g = N::fused_rnn_backward(&desc, inputs(), out, res, grads(), wanted);
        assert_eq!(g.dx.is_some(), x, "{wanted:?}: dx");
        assert_eq!(g.dweights.is_some(), weights, "{wanted:?}: dweights");
        let close = |what: &str, got: Vec<f64>, expected: Vec<f64>| {
            for (a, b) in got.iter().zip(&expected) {
                let tol = 1e-5 * (1.0 + b.abs());
                assert!(
                    (a - b).abs() <= tol,
                    "{wanted:?} {what}: {a} vs reference {b}"
                );
            }
        };
        close("dh0", flat(g.dh0), flat(all.dh0.clone()));
        if let Some(dx) = g.dx {
            close("dx", flat(dx), flat(all.dx.clone().unwrap()));
        }
        if let Some(dw) = g.dweights {
            close("dweights", flat(dw), flat(all.dweights.clone().unwrap()));
        }
    }
}
