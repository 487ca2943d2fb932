//! Gradients through `Autodiff` (one fused backward node per call):
//! - every fixture case against PyTorch (x, h0, c0, every canonical `Param`), f64 and f32;
//! - finite differences on small f64 cases;
//! - a property test over random configurations against Burn's autodiff trace of the same
//!   forward written as plain composite ops.

mod common;
#[path = "common/tensors.rs"]
mod tensors;

use burn::backend::{Autodiff, Flex, NdArray};
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{Tensor, TensorPrimitive};
use burn_fused_rnn::{
    fused_rnn, DropoutSpec, FusedRnnBackend, FusedRnnConfig, InputMode, RnnDescriptor, RnnInputs,
    RnnLayout, RnnMode, RnnState,
};
use common::{array, at_every_simd_level, check, fixtures, report, tensor, Tol, F32, F64};
use tensors::param_grads;

fn gradients_match_pytorch<B: AutodiffBackend + FusedRnnBackend>(backend: &str, tol: Tol) {
    let device = B::Device::default();
    let mut failures = Vec::new();
    for case in &fixtures().cases {
        let module = case.module::<B>(&device);
        let x = array::<B, 3>(&case.x, &device).require_grad();
        let spec = case.config().spec();
        let (l, b) = (spec.num_pseudo_layers(), case.batch_size);
        // Always pass states, zeros when the case has none, to compare dh0/dc0 too.
        let h0 = case
            .h0
            .as_ref()
            .map_or_else(
                || {
                    tensor::<B, 3>(
                        &vec![0.0; l * b * spec.d_state()],
                        [l, b, spec.d_state()],
                        &device,
                    )
                },
                |a| array::<B, 3>(a, &device),
            )
            .require_grad();
        let c0 = (case.mode == "lstm").then(|| {
            case.c0
                .as_ref()
                .map_or_else(
                    || {
                        tensor::<B, 3>(
                            &vec![0.0; l * b * case.d_hidden],
                            [l, b, case.d_hidden],
                            &device,
                        )
                    },
                    |a| array::<B, 3>(a, &device),
                )
                .require_grad()
        });
        let state = Some(RnnState::new(h0.clone(), c0.clone()));
        let (y, state) = match &case.lengths {
            Some(lengths) => module.forward_with_lengths(x.clone(), lengths, state),
            None => module.forward(x.clone(), state),
        };
        let gy = tensor::<B, 3>(&case.gy, y.dims(), &device);
        let gh = tensor::<B, 3>(&case.gh_n, state.hidden.dims(), &device);
        let mut loss = (y * gy).sum() + (state.hidden.clone() * gh).sum();
        if let (Some(c), Some(gc)) = (state.cell, &case.gc_n) {
            let gc = tensor::<B, 3>(gc, c.dims(), &device);
            loss = loss + (c * gc).sum();
        }
        let grads = loss.backward();
        let ctx = format!("{backend} / {}", case.name);
        let g = |t: &Tensor<B, 3>| t.grad(&grads).expect("input grad");
        failures.extend(check(&ctx, "dx", g(&x), &case.dx, tol).err());
        failures.extend(check(&ctx, "dh0", g(&h0), &case.dh0, tol).err());
        if let (Some(c0), Some(dc0)) = (&c0, &case.dc0) {
            failures.extend(check(&ctx, "dc0", g(c0), dc0, tol).err());
        }
        let dw = param_grads(&module, &grads);
        let dw = Tensor::<NdArray<f64>, 1>::from_data(
            burn::tensor::TensorData::new(dw.clone(), [dw.len()]),
            &Default::default(),
        );
        failures.extend(check(&ctx, "dweights (per Param)", dw, &case.flat_dweights(), tol).err());
    }
    report(failures);
}

#[test]
fn gradients_match_pytorch_ndarray_f64() {
    at_every_simd_level("gradients_match_pytorch_ndarray_f64", |level| {
        gradients_match_pytorch::<Autodiff<NdArray<f64>>>(
            &format!("autodiff<ndarray<f64>> ({level:?})"),
            F64,
        )
    });
}

#[test]
fn gradients_match_pytorch_ndarray_f32() {
    at_every_simd_level("gradients_match_pytorch_ndarray_f32", |level| {
        gradients_match_pytorch::<Autodiff<NdArray<f32>>>(
            &format!("autodiff<ndarray<f32>> ({level:?})"),
            F32,
        )
    });
}

#[test]
fn gradients_match_pytorch_flex() {
    at_every_simd_level("gradients_match_pytorch_flex", |level| {
        gradients_match_pytorch::<Autodiff<Flex>>(&format!("autodiff<flex> ({level:?})"), F32)
    });
}

#[test]
fn gradients_match_pytorch_with_balanced_checkpointing() {
    use burn::backend::autodiff::checkpoint::strategy::BalancedCheckpointing;
    gradients_match_pytorch::<Autodiff<NdArray<f64>, BalancedCheckpointing>>(
        "autodiff<ndarray<f64>, balanced>",
        F64,
    );
}

type Ad = Autodiff<NdArray<f64>>;
type Plain = NdArray<f64>;

/// Tiny deterministic generator for test data and configurations.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn below(&mut self, n: u64) -> usize {
        (self.next() % n) as usize
    }
    fn normal_ish(&mut self, n: usize) -> Vec<f64> {
        (0..n)
            .map(|_| (self.next() % 20001) as f64 / 10000.0 - 1.0)
            .collect()
    }
}

/// One random problem: config, lengths, data, output weights for the loss.
struct Problem {
    config: FusedRnnConfig,
    seq: usize,
    batch: usize,
    lengths: Option<Vec<usize>>,
    x: Vec<f64>,
    h0: Vec<f64>,
    c0: Vec<f64>,
    w: Vec<f64>,
    gy: Vec<f64>,
    gh: Vec<f64>,
    gc: Vec<f64>,
    /// Which of `[y, h_n, c_n]` the loss reaches (at least one). An output it does not
    /// reach is not on the autodiff tape, and the fused backward must read its gradient
    /// as zeros (Note [One node, many outputs] in `src/autodiff.rs`).
    uses: [bool; 3],
}

impl Problem {
    fn random(rng: &mut Rng) -> Self {
        let mode = [
            RnnMode::Lstm,
            RnnMode::Gru,
            RnnMode::RnnTanh,
            RnnMode::RnnRelu,
        ][rng.below(4)];
        let d_hidden = 2 + rng.below(3);
        let skip = rng.below(4) == 0;
        let d_input = if skip { d_hidden } else { 1 + rng.below(4) };
        let proj = (mode == RnnMode::Lstm && d_hidden > 2 && rng.below(2) == 0)
            .then(|| 1 + rng.below(d_hidden as u64 - 1));
        let config = FusedRnnConfig::new(mode, d_input, d_hidden)
            .with_num_layers(1 + rng.below(3))
            .with_bidirectional(rng.below(2) == 0)
            .with_proj_size(proj)
            .with_bias(rng.below(4) != 0)
            .with_batch_first(rng.below(2) == 0)
            .with_input_mode(if skip {
                InputMode::Skip
            } else {
                InputMode::Linear
            });
        let spec = config.spec();
        let (seq, batch) = (1 + rng.below(4), 1 + rng.below(3));
        let lengths =
            (rng.below(2) == 0).then(|| (0..batch).map(|_| rng.below(seq as u64 + 1)).collect());
        let l = spec.num_pseudo_layers();
        let n_out = seq * batch * spec.output_size();
        Problem {
            x: rng.normal_ish(seq * batch * d_input),
            h0: rng.normal_ish(l * batch * spec.d_state()),
            c0: rng.normal_ish(l * batch * d_hidden),
            w: rng.normal_ish(RnnLayout::new(spec).params_size()),
            gy: rng.normal_ish(n_out),
            gh: rng.normal_ish(l * batch * spec.d_state()),
            gc: rng.normal_ish(l * batch * d_hidden),
            // Half the problems use every output, the rest one random non-empty subset.
            uses: match (rng.below(2), 1 + rng.below(7)) {
                (0, _) => [true; 3],
                (_, k) => [k & 1 != 0, k & 2 != 0, k & 4 != 0],
            },
            config,
            seq,
            batch,
            lengths,
        }
    }

    fn desc(&self) -> RnnDescriptor {
        RnnDescriptor::new(
            self.config.spec(),
            self.seq,
            self.batch,
            self.config.batch_first,
            self.lengths.clone(),
            DropoutSpec::NONE,
        )
    }

    fn name(&self) -> String {
        let s = self.config.spec();
        format!(
            "{:?} L{} bi={} proj={:?} skip={} bias={} batch_first={} T{} B{} lengths={:?} \
             loss uses [y, h_n, c_n] = {:?}",
            s.mode,
            s.num_layers,
            s.bidirectional,
            s.proj_size,
            s.skip_input,
            s.bias,
            self.config.batch_first,
            self.seq,
            self.batch,
            self.lengths,
            self.uses
        )
    }

    /// Tensors on `B`: x, h0, c0 (LSTM), weights.
    fn tensors<B: FusedRnnBackend>(
        &self,
    ) -> (
        Tensor<B, 3>,
        Tensor<B, 3>,
        Option<Tensor<B, 3>>,
        Tensor<B, 1>,
    ) {
        let device = B::Device::default();
        let desc = self.desc();
        let lstm = desc.spec.mode == RnnMode::Lstm;
        (
            tensor(&self.x, desc.input_shape(), &device),
            tensor(&self.h0, desc.hidden_shape(), &device),
            lstm.then(|| tensor(&self.c0, desc.cell_shape(), &device)),
            tensor(&self.w, [self.w.len()], &device),
        )
    }

    /// The loss `Σ y∘gy + Σ h_n∘gh + Σ c_n∘gc` from the op's outputs, with only the terms
    /// of `uses` (a term of an absent `c_n` is dropped; a loss with no term left is
    /// `Σ h_n∘gh`).
    fn loss<B: FusedRnnBackend>(
        &self,
        y: Tensor<B, 3>,
        h_n: Tensor<B, 3>,
        c_n: Option<Tensor<B, 3>>,
    ) -> Tensor<B, 1> {
        let device = y.device();
        let term =
            |t: Tensor<B, 3>, g: &[f64]| (t.clone() * tensor::<B, 3>(g, t.dims(), &device)).sum();
        let [use_y, use_h, use_c] = self.uses;
        let mut terms = Vec::new();
        if use_y {
            terms.push(term(y, &self.gy));
        }
        if let (true, Some(c)) = (use_c, c_n) {
            terms.push(term(c, &self.gc));
        }
        if use_h || terms.is_empty() {
            terms.push(term(h_n, &self.gh));
        }
        terms.into_iter().reduce(|a, b| a + b).expect("one term")
    }
}

/// Gradients (x, h0, c0, w) of the loss through the fused op.
fn fused_grads(p: &Problem) -> Vec<Vec<f64>> {
    let (x, h0, c0, w) = p.tensors::<Ad>();
    let (x, h0, w) = (x.require_grad(), h0.require_grad(), w.require_grad());
    let c0 = c0.map(|c| c.require_grad());
    let out = fused_rnn(
        &p.desc(),
        x.clone(),
        Some(h0.clone()),
        c0.clone(),
        w.clone(),
    );
    let grads = p.loss(out.output, out.hidden, out.cell).backward();
    let v = |t: Tensor<Plain, 3>| t.into_data().to_vec::<f64>().unwrap();
    let mut out = vec![v(x.grad(&grads).unwrap()), v(h0.grad(&grads).unwrap())];
    if let Some(c0) = c0 {
        out.push(v(c0.grad(&grads).unwrap()));
    }
    out.push(w.grad(&grads).unwrap().into_data().to_vec::<f64>().unwrap());
    out
}

#[test]
fn fused_backward_matches_autodiff_of_the_composite_forward() {
    let mut rng = Rng(0x5eed);
    let mut failures = Vec::new();
    for _ in 0..40 {
        let p = Problem::random(&mut rng);
        let fused = fused_grads(&p);
        // The same forward as plain Burn ops, traced and differentiated by Burn's autodiff.
        let (x, h0, c0, w) = p.tensors::<Ad>();
        let (x, h0, w) = (x.require_grad(), h0.require_grad(), w.require_grad());
        let c0 = c0.map(|c| c.require_grad());
        let prim = |t: Tensor<Ad, 3>| t.into_primitive().tensor();
        let out = burn_fused_rnn::reference::forward::<Ad>(
            &p.desc(),
            RnnInputs {
                x: prim(x.clone()),
                h0: Some(prim(h0.clone())),
                c0: c0.clone().map(prim),
                weights: w.clone().into_primitive().tensor(),
            },
        );
        let t3 = |t| Tensor::<Ad, 3>::from_primitive(TensorPrimitive::Float(t));
        let grads = p.loss(t3(out.y), t3(out.h_n), out.c_n.map(t3)).backward();
        let mut names = vec!["dx", "dh0"];
        let mut traced = vec![x.grad(&grads).unwrap(), h0.grad(&grads).unwrap()];
        if let Some(c0) = c0 {
            names.push("dc0");
            traced.push(c0.grad(&grads).unwrap());
        }
        let dw = w.grad(&grads).unwrap();
        for ((name, got), expected) in names.iter().zip(traced).zip(&fused) {
            failures.extend(check(&p.name(), name, got, expected, F64).err());
        }
        failures.extend(check(&p.name(), "dweights", dw, fused.last().unwrap(), F64).err());
    }
    report(failures);
}

#[test]
fn fused_gradients_match_finite_differences() {
    let mut rng = Rng(42);
    let mut failures = Vec::new();
    for _ in 0..6 {
        let p = Problem::random(&mut rng);
        let fused = fused_grads(&p);
        // Central differences of the loss through the plain (non-autodiff) fused forward.
        let loss_at = |which: usize, i: usize, delta: f64| -> f64 {
            let (mut x, mut h0, mut c0, mut w) =
                (p.x.clone(), p.h0.clone(), p.c0.clone(), p.w.clone());
            let lstm = p.config.mode == RnnMode::Lstm;
            let target = match (which, lstm) {
                (0, _) => &mut x,
                (1, _) => &mut h0,
                (2, true) => &mut c0,
                _ => &mut w,
            };
            target[i] += delta;
            let q = Problem {
                x,
                h0,
                c0,
                w,
                gy: p.gy.clone(),
                gh: p.gh.clone(),
                gc: p.gc.clone(),
                uses: p.uses,
                config: p.config.clone(),
                lengths: p.lengths.clone(),
                ..p
            };
            let (x, h0, c0, w) = q.tensors::<Plain>();
            let out = fused_rnn(&q.desc(), x, Some(h0), c0, w);
            q.loss(out.output, out.hidden, out.cell).into_scalar()
        };
        for (which, grad) in fused.iter().enumerate() {
            let eps = 1e-6;
            let fd: Vec<f64> = (0..grad.len())
                .map(|i| (loss_at(which, i, eps) - loss_at(which, i, -eps)) / (2.0 * eps))
                .collect();
            let got = Tensor::<Plain, 1>::from_data(
                burn::tensor::TensorData::new(grad.clone(), [grad.len()]),
                &Default::default(),
            );
            let tol = Tol {
                rtol: 1e-5,
                atol: 1e-7,
            };
            failures.extend(
                check(
                    &p.name(),
                    &format!("gradient #{which} vs finite differences"),
                    got,
                    &fd,
                    tol,
                )
                .err(),
            );
        }
    }
    report(failures);
}
