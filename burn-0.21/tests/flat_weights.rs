//! The flat weights a call builds from the canonical tensors (Note [Flat weights from parts]
//! and Note [Concatenation as a chain] in the crate): `fused_rnn_concat` and
//! `fused_rnn_split` against Burn's own reshape, `cat` and `slice`, on every host backend,
//! and the gradients that the chain of links hands each part against the analytic ones.

#[path = "common/tensors.rs"]
mod tensors;

use burn::backend::{Autodiff, Flex, NdArray};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Tensor, TensorMetadata, TensorPrimitive};
use burn_fused_rnn::{
    fused_rnn, DropoutSpec, FusedRnnBackend, FusedRnnConfig, RnnDescriptor, RnnMode,
};
use tensors::{param_grads, random};

/// Parts of the shapes an LSTM layer with a projection has (W_ih, W_hh, b_ih, b_hh, W_hr),
/// as `Tensor<B, 2>` (biases as `[1, n]`, reshaped to 1-D where they are used).
const SHAPES: [&[usize]; 5] = [&[12, 5], &[12, 2], &[12], &[12], &[2, 3]];

fn prim<B: Backend, const D: usize>(t: Tensor<B, D>) -> B::FloatTensorPrimitive {
    t.into_primitive().tensor()
}

fn values<B: Backend>(t: B::FloatTensorPrimitive) -> Vec<f64> {
    Tensor::<B, 1>::from_primitive(TensorPrimitive::Float(t))
        .into_data()
        .convert::<f64>()
        .to_vec()
        .unwrap()
}

/// The parts as primitives: the matrices drawn, the biases drawn, and with `strided` the
/// first matrix stored transposed (a view whose elements are not in row-major order).
fn parts<B: Backend>(seed: u64, strided: bool) -> Vec<B::FloatTensorPrimitive> {
    SHAPES
        .iter()
        .enumerate()
        .map(|(i, s)| match (s.len(), i == 0 && strided) {
            (1, _) => prim(random::<B, 1>([s[0]], seed + i as u64)),
            (_, false) => prim(random::<B, 2>([s[0], s[1]], seed + i as u64)),
            (_, true) => prim(random::<B, 2>([s[1], s[0]], seed + i as u64).transpose()),
        })
        .collect()
}

/// What Burn's tensor API gives for the same concatenation.
fn burn_cat<B: Backend>(parts: Vec<B::FloatTensorPrimitive>) -> Vec<f64> {
    let flat: Vec<Tensor<B, 1>> = parts
        .into_iter()
        .map(|p| {
            let t = Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(p));
            let n = t.shape().num_elements();
            t.reshape([n])
        })
        .collect();
    Tensor::cat(flat, 0)
        .into_data()
        .convert::<f64>()
        .to_vec()
        .unwrap()
}

fn concat_and_split_match_burn<B: FusedRnnBackend>(name: &str) {
    let shapes: Vec<Vec<usize>> = SHAPES.iter().map(|s| s.to_vec()).collect();
    for strided in [false, true] {
        let what = format!("{name}, strided {strided}");
        let expected = burn_cat::<B>(parts::<B>(7, strided));
        let flat = B::fused_rnn_concat(parts::<B>(7, strided));
        assert_eq!(values::<B>(flat.clone()), expected, "{what}: concat");
        let cut = B::fused_rnn_split(flat, &shapes);
        assert_eq!(cut.len(), shapes.len(), "{what}: parts");
        let mut at = 0;
        for (part, shape) in cut.into_iter().zip(&shapes) {
            assert_eq!(part.shape().to_vec(), *shape, "{what}: shape");
            let n: usize = shape.iter().product();
            assert_eq!(values::<B>(part), expected[at..at + n], "{what}: split");
            at += n;
        }
    }
}

#[test]
fn concat_and_split_match_burns_ops_on_every_host_backend() {
    concat_and_split_match_burn::<NdArray<f32>>("NdArray<f32>");
    concat_and_split_match_burn::<NdArray<f64>>("NdArray<f64>");
    concat_and_split_match_burn::<Flex>("Flex");
    concat_and_split_match_burn::<Autodiff<NdArray<f32>>>("Autodiff<NdArray<f32>>");
    concat_and_split_match_burn::<Autodiff<Flex>>("Autodiff<Flex>");
}

/// `loss = Σ flat·w1 + Σ flat·w2` over two concatenations of the same parts, one part
/// frozen: each other part's gradient is its slice of `w1 + w2`, exactly (sums of two
/// products of the same operands in the same order), and the frozen part has none.
fn chain_gradients<B: AutodiffBackend + FusedRnnBackend>(name: &str) {
    // Every part 1-D here, so that one type holds them all; the module's test below hands
    // the chain 2-D and 1-D parts.
    let tracked: Vec<Tensor<B, 1>> = SHAPES
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let t = random::<B, 1>([s.iter().product()], 11 + i as u64);
            if i == 2 {
                t
            } else {
                t.require_grad()
            }
        })
        .collect();
    let n: usize = SHAPES.iter().map(|s| s.iter().product::<usize>()).sum();
    let w1 = random::<B, 1>([n], 21);
    let w2 = random::<B, 1>([n], 22);
    let flat = |ts: &[Tensor<B, 1>]| -> Tensor<B, 1> {
        Tensor::from_primitive(TensorPrimitive::Float(B::fused_rnn_concat(
            ts.iter().map(|t| prim(t.clone())).collect(),
        )))
    };
    let loss = (flat(&tracked) * w1.clone()).sum() + (flat(&tracked) * w2.clone()).sum();
    let grads = loss.backward();
    let w: Vec<f64> = (w1 + w2).into_data().convert::<f64>().to_vec().unwrap();
    let mut at = 0;
    for (i, part) in tracked.iter().enumerate() {
        let len = part.shape().num_elements();
        let g = part.grad(&grads);
        if i == 2 {
            assert!(g.is_none(), "{name}: the frozen part got a gradient");
        } else {
            let g: Vec<f64> = g
                .unwrap_or_else(|| panic!("{name}: part {i} got no gradient"))
                .into_data()
                .convert::<f64>()
                .to_vec()
                .unwrap();
            assert_eq!(g, w[at..at + len], "{name}: part {i}'s gradient");
        }
        at += len;
    }
}

#[test]
fn each_part_gets_its_slice_of_the_flat_gradient() {
    chain_gradients::<Autodiff<NdArray<f64>>>("Autodiff<NdArray<f64>>");
    chain_gradients::<Autodiff<NdArray<f32>>>("Autodiff<NdArray<f32>>");
    chain_gradients::<Autodiff<Flex>>("Autodiff<Flex>");
}

/// A training step through the module (the chain) gives each `Param` the gradient that
/// the public `flat_weights` (Burn's reshape and `cat`) gives, bit for bit: the same fused
/// backward, then each part's slice. Two layers, both directions, with biases and a
/// projection: 2-D and 1-D parts, 20 in all.
fn module_step_matches<B: AutodiffBackend + FusedRnnBackend>(name: &str) {
    let device = B::Device::default();
    let rnn = FusedRnnConfig::new(RnnMode::Lstm, 5, 4)
        .with_num_layers(2)
        .with_bidirectional(true)
        .with_proj_size(Some(3))
        .init::<B>(&device);
    let x = random::<B, 3>([2, 3, 5], 31);
    let (y, _) = rnn.forward(x.clone(), None);
    let w = random::<B, 3>(y.dims(), 32);
    let through_chain = param_grads(&rnn, &(y * w.clone()).sum().backward());

    let desc = RnnDescriptor::new(
        *rnn.spec(),
        3,
        2,
        rnn.batch_first(),
        None,
        DropoutSpec::NONE,
    );
    let out = fused_rnn(&desc, x, None, None, rnn.flat_weights());
    let through_cat = param_grads(&rnn, &(out.output * w).sum().backward());
    assert_eq!(
        through_chain.len(),
        rnn.layout().params_size(),
        "{name}: gradients"
    );
    assert_eq!(through_chain, through_cat, "{name}");
}

#[test]
fn a_training_step_through_the_chain_matches_burns_concatenation() {
    module_step_matches::<Autodiff<NdArray<f64>>>("Autodiff<NdArray<f64>>");
    module_step_matches::<Autodiff<Flex>>("Autodiff<Flex>");
}
