//! Padding never leaks (Note [Padding never leaks] in `burn_fused_rnn::reference`): NaN,
//! ±inf or ±1e30 in the padded slots of `x` and `dy` change no output and no gradient,
//! bit for bit, for the reference (called directly) and for each CPU backend's native
//! kernel, in every mode, with 2 bidirectional layers, dropout and projection, both layouts.
//! (The parity suite's garbage-padding cases check every backend against the reference.)

mod common;

use burn::backend::{Flex, NdArray};
use burn::tensor::{Tensor, TensorData, TensorPrimitive};
use burn_fused_rnn::{
    reference, DropoutSpec, FusedRnnBackend, FusedRnnConfig, GradsWanted, RnnDescriptor, RnnGrads,
    RnnInputs, RnnMode, RnnOutput, RnnOutputGrads,
};

const LENGTHS: [usize; 3] = [6, 0, 3];
const GARBAGE: [f64; 5] = [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 1e30, -1e30];

fn values(n: usize, seed: u64) -> Vec<f64> {
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

/// `v` (a sequence tensor in `desc`'s layout) with every padded slot set to garbage.
fn with_garbage(desc: &RnnDescriptor, mut v: Vec<f64>, features: usize) -> Vec<f64> {
    let mut k = 0;
    for (b, &len) in LENGTHS.iter().enumerate() {
        for t in len..desc.seq_length {
            let slot = if desc.batch_first {
                b * desc.seq_length + t
            } else {
                t * desc.batch_size + b
            };
            for e in &mut v[slot * features..(slot + 1) * features] {
                *e = GARBAGE[k % GARBAGE.len()];
                k += 1;
            }
        }
    }
    v
}

type Run<B> = fn(&RnnDescriptor, RnnInputs<B>, Vec<f64>) -> (RnnOutput<B>, RnnGrads<B>);

fn flat<B: FusedRnnBackend, const D: usize>(t: B::FloatTensorPrimitive) -> Vec<f64> {
    Tensor::<B, D>::from_primitive(TensorPrimitive::Float(t))
        .into_data()
        .convert::<f64>()
        .to_vec()
        .unwrap()
}

/// Runs `run` on clean and garbage-padded `x`/`dy`; every result must be identical (NaN
/// counts as different).
fn garbage_changes_nothing<B: FusedRnnBackend>(name: &str, run: Run<B>) {
    let device = Default::default();
    let tensor = |v: &[f64], shape: Vec<usize>| {
        let dtype = <B::FloatElem as burn::tensor::Element>::dtype();
        let flat = Tensor::<B, 1>::from_data(
            TensorData::new(v.to_vec(), [v.len()]).convert_dtype(dtype),
            &device,
        );
        match shape[..] {
            [n] => flat.reshape([n]).into_primitive().tensor(),
            [a, b, c] => flat.reshape([a, b, c]).into_primitive().tensor(),
            _ => unreachable!("rank 1 or 3"),
        }
    };
    for mode in [
        RnnMode::Lstm,
        RnnMode::Gru,
        RnnMode::RnnTanh,
        RnnMode::RnnRelu,
    ] {
        for batch_first in [false, true] {
            let proj = (mode == RnnMode::Lstm).then_some(3);
            let spec = FusedRnnConfig::new(mode, 5, 4)
                .with_num_layers(2)
                .with_bidirectional(true)
                .with_proj_size(proj)
                .spec();
            let dropout = DropoutSpec {
                probability: 0.25,
                seed: 5,
            };
            let desc = RnnDescriptor::new(spec, 6, 3, batch_first, Some(LENGTHS.to_vec()), dropout);
            let (x_shape, y_shape) = (desc.input_shape(), desc.output_shape());
            let x = values(x_shape.iter().product(), 1);
            let dy = values(y_shape.iter().product(), 2);
            let inputs = |x: &[f64]| RnnInputs::<B> {
                x: tensor(x, x_shape.to_vec()),
                h0: Some(tensor(
                    &values(desc.hidden_shape().iter().product(), 3),
                    desc.hidden_shape().to_vec(),
                )),
                c0: desc.spec.mode.has_cell_state().then(|| {
                    tensor(
                        &values(desc.cell_shape().iter().product(), 4),
                        desc.cell_shape().to_vec(),
                    )
                }),
                weights: tensor(&values(desc.params_size(), 5), vec![desc.params_size()]),
            };
            let results = |x: Vec<f64>, dy: Vec<f64>| {
                let (out, g) = run(&desc, inputs(&x), dy);
                vec![
                    ("y", flat::<B, 3>(out.y)),
                    ("h_n", flat::<B, 3>(out.h_n)),
                    ("c_n", out.c_n.map_or_else(Vec::new, flat::<B, 3>)),
                    ("dx", flat::<B, 3>(g.dx.expect("wanted dx"))),
                    ("dh0", flat::<B, 3>(g.dh0)),
                    ("dc0", g.dc0.map_or_else(Vec::new, flat::<B, 3>)),
                    (
                        "dweights",
                        flat::<B, 1>(g.dweights.expect("wanted dweights")),
                    ),
                ]
            };
            let features_x = x_shape[2];
            let features_y = y_shape[2];
            let clean = results(x.clone(), dy.clone());
            let dirty = results(
                with_garbage(&desc, x, features_x),
                with_garbage(&desc, dy, features_y),
            );
            for ((tensor, c), (_, d)) in clean.iter().zip(&dirty) {
                let same =
                    c.len() == d.len() && c.iter().zip(d).all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(
                    same,
                    "{name}, {mode:?}, batch_first = {batch_first}: {tensor} changed with garbage in the padding \
                     ({} non-finite values)",
                    d.iter().filter(|v| !v.is_finite()).count()
                );
            }
        }
    }
}

fn grads_of<B: FusedRnnBackend>(
    desc: &RnnDescriptor,
    out: &RnnOutput<B>,
    dy: Vec<f64>,
) -> RnnOutputGrads<B> {
    let device = Default::default();
    let dtype = <B::FloatElem as burn::tensor::Element>::dtype();
    let _ = out;
    RnnOutputGrads {
        dy: Some(
            Tensor::<B, 3>::from_data(
                TensorData::new(dy, desc.output_shape()).convert_dtype(dtype),
                &device,
            )
            .into_primitive()
            .tensor(),
        ),
        dh_n: None,
        dc_n: None,
    }
}

fn via_reference<B: FusedRnnBackend>(
    desc: &RnnDescriptor,
    inputs: RnnInputs<B>,
    dy: Vec<f64>,
) -> (RnnOutput<B>, RnnGrads<B>) {
    let (out, reserve) = reference::forward_training::<B>(desc, inputs.clone());
    let grads = grads_of(desc, &out, dy);
    let g = reference::backward::<B>(desc, inputs, out.clone(), reserve, grads, GradsWanted::ALL);
    (out, g)
}

fn via_backend<B: FusedRnnBackend>(
    desc: &RnnDescriptor,
    inputs: RnnInputs<B>,
    dy: Vec<f64>,
) -> (RnnOutput<B>, RnnGrads<B>) {
    let (out, reserve) = B::fused_rnn_forward_training(desc, inputs.clone());
    let grads = grads_of(desc, &out, dy);
    let g = B::fused_rnn_backward(desc, inputs, out.clone(), reserve, grads, GradsWanted::ALL);
    (out, g)
}

#[test]
fn garbage_in_padding_changes_nothing_in_the_reference() {
    garbage_changes_nothing::<NdArray<f64>>("reference on ndarray<f64>", via_reference);
    garbage_changes_nothing::<Flex>("reference on flex", via_reference);
}

#[test]
fn garbage_in_padding_changes_nothing_in_the_native_kernel() {
    common::at_every_simd_level(
        "garbage_in_padding_changes_nothing_in_the_native_kernel",
        |level| {
            garbage_changes_nothing::<NdArray<f64>>(
                &format!("ndarray<f64> ({level:?})"),
                via_backend,
            );
            garbage_changes_nothing::<NdArray<f32>>(
                &format!("ndarray<f32> ({level:?})"),
                via_backend,
            );
            garbage_changes_nothing::<Flex>(&format!("flex ({level:?})"), via_backend);
        },
    );
}
