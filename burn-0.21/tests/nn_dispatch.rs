//! The drop-in layers on a backend their dispatch does not list (Note [Drop-in dispatch]):
//! the reference implementation run as Burn ops gives burn-nn's outputs and gradients, and
//! the same numbers as the fused op on a listed backend.
//!
//! A test binary of its own: its unlisted backend, NdArray with 32-bit integers, shares
//! NdArray's device (and so its default dtype) with every other NdArray backend; here
//! every backend is f32. Tolerance 1e-5 (f32).

use burn::backend::ndarray::NdArray;
use burn::backend::Autodiff;
use burn::module::Module;
use burn::record::{FullPrecisionSettings, NamedMpkFileRecorder};
use burn::tensor::backend::Backend;
use burn::tensor::Tensor;
use burn_fused_rnn::nn::{BiLstm, Gru, LstmConfig};

#[path = "common/tensors.rs"]
mod tensors;
use tensors::{close, random};

/// Not in the dispatch list: runs the reference as Burn ops.
type Unlisted = NdArray<f32, i32>;
/// In the list: runs the native CPU kernel, one autodiff node.
type Listed = NdArray<f32>;
const TOL: f64 = 1e-5;

/// The same tensor on another backend.
fn to<A: Backend, B: Backend, const D: usize>(t: Tensor<A, D>) -> Tensor<B, D> {
    Tensor::from_data(t.into_data(), &B::Device::default())
}

#[test]
fn an_unlisted_backend_matches_burn_nn_forward_and_gradients() {
    type AD = Autodiff<Unlisted>;
    let device = Default::default();
    let nn = burn::nn::BiLstmConfig::new(4, 5, true).init::<AD>(&device);
    let lstm = BiLstm::from_burn_nn(&nn).unwrap();
    let x = random::<AD, 3>([3, 7, 4], 1);
    let (y_nn, _) = nn.forward(x.clone(), None);
    let (y, _) = lstm.forward(x, None);
    close("y", y.clone(), y_nn.clone(), TOL);
    let grads_nn = y_nn.sum().backward();
    let grads = y.sum().backward();
    // burn-nn's forward-direction cell gate: rows 10..15 of the canonical W_ih, transposed.
    let w_nn = nn
        .forward
        .cell_gate
        .input_transform
        .weight
        .val()
        .grad(&grads_nn)
        .unwrap();
    let w = lstm.fused().cells[0]
        .weight_ih
        .as_ref()
        .unwrap()
        .val()
        .grad(&grads)
        .unwrap();
    close("dW_ih", w.narrow(0, 10, 5).transpose(), w_nn, TOL);
}

#[test]
fn an_unlisted_backend_gives_the_fused_ops_numbers() {
    // The same weights on both backends, a stack with dropout off.
    let device = Default::default();
    let on_listed = LstmConfig::new(4, 6, true)
        .with_num_layers(2)
        .with_reverse(true)
        .init::<Listed>(&device);
    let path = std::env::temp_dir().join("burn_fused_rnn_nn_dispatch_lstm");
    let recorder = NamedMpkFileRecorder::<FullPrecisionSettings>::new();
    on_listed
        .clone()
        .save_file(path.clone(), &recorder)
        .unwrap();
    let on_unlisted = LstmConfig::new(4, 6, true)
        .with_num_layers(2)
        .with_reverse(true)
        .init::<Unlisted>(&device)
        .try_load_file(path, &recorder, &device)
        .unwrap();
    let x = random::<Listed, 3>([3, 7, 4], 2);
    let (y, s) = on_listed.forward_stack(x.clone(), None);
    let (y_u, s_u) = on_unlisted.forward_stack(to(x), None);
    close("y", to(y_u), y, TOL);
    close("h_n", to(s_u.hidden), s.hidden, TOL);
    close("c_n", to(s_u.cell.unwrap()), s.cell.unwrap(), TOL);
    // A GRU, with an initial state.
    let gru = burn::nn::GruConfig::new(4, 5, true).init::<Unlisted>(&device);
    let drop_in = Gru::from_burn_nn(&gru).unwrap();
    let x = random::<Unlisted, 3>([3, 7, 4], 3);
    let h0 = random::<Unlisted, 2>([3, 5], 4);
    close(
        "gru y",
        drop_in.forward(x.clone(), Some(h0.clone())),
        gru.forward(x, Some(h0)),
        TOL,
    );
}
