//! A backward pass given a reserve that its training forward did not produce (another
//! implementation's, or one made for another call) panics with a message naming the
//! argument and both layouts, before reading it.

use burn::backend::{Flex, NdArray};
use burn::tensor::{Tensor, TensorData};
use burn_fused_rnn::{
    reference, DropoutSpec, FusedRnnBackend, FusedRnnConfig, GradsWanted, RnnDescriptor, RnnInputs,
    RnnMode, RnnOutputGrads, RnnReserve,
};

fn desc(seq_length: usize) -> RnnDescriptor {
    let spec = FusedRnnConfig::new(RnnMode::Gru, 3, 4)
        .with_num_layers(2)
        .spec();
    RnnDescriptor::new(spec, seq_length, 2, true, None, DropoutSpec::NONE)
}

fn inputs<B: FusedRnnBackend>(desc: &RnnDescriptor) -> RnnInputs<B> {
    let device = Default::default();
    let t = |shape: Vec<usize>| {
        let n: usize = shape.iter().product();
        let values: Vec<f32> = (0..n).map(|i| (i as f32 * 0.3).sin()).collect();
        Tensor::<B, 1>::from_data(TensorData::new(values, [n]), &device)
    };
    let [a, b, c] = desc.input_shape();
    RnnInputs {
        x: t(vec![a, b, c])
            .reshape([a, b, c])
            .into_primitive()
            .tensor(),
        h0: None,
        c0: None,
        weights: t(vec![desc.params_size()]).into_primitive().tensor(),
    }
}

fn no_grads<B: FusedRnnBackend>() -> RnnOutputGrads<B> {
    RnnOutputGrads {
        dy: None,
        dh_n: None,
        dc_n: None,
    }
}

/// The reserve of `make`'s training forward for a call of `made_for`, handed to `B`'s
/// backward for a call of `used_for`.
fn backward_with<B: FusedRnnBackend>(
    made_for: &RnnDescriptor,
    used_for: &RnnDescriptor,
    reference_reserve: bool,
) {
    let reserve: RnnReserve<B> = if reference_reserve {
        reference::forward_training::<B>(made_for, inputs(made_for)).1
    } else {
        B::fused_rnn_forward_training(made_for, inputs(made_for)).1
    };
    let (out, _) = B::fused_rnn_forward_training(used_for, inputs(used_for));
    let all = GradsWanted::ALL;
    B::fused_rnn_backward(used_for, inputs(used_for), out, reserve, no_grads(), all);
}

#[test]
#[should_panic(
    expected = "expected reserve to be the native CPU kernel's training-forward reserve for this call"
)]
fn native_backward_refuses_the_reference_reserve() {
    backward_with::<NdArray>(&desc(5), &desc(5), true);
}

#[test]
#[should_panic(
    expected = "expected reserve to be the native CPU kernel's training-forward reserve for this call, [([376], F32)], got [([296], F32)] (tagged by the native CPU kernel)"
)]
fn native_backward_refuses_a_reserve_made_for_another_call() {
    backward_with::<Flex>(&desc(4), &desc(5), false);
}

/// A 1-D F32 reserve whose length carries cuDNN's tag (Note [Reserve tag]: length mod 16
/// in 0..8) is named as cuDNN's.
#[test]
#[should_panic(
    expected = "expected reserve to be the native CPU kernel's training-forward reserve for this call, [([376], F32)], got [([371], F32)] (tagged by cuDNN)"
)]
fn native_backward_names_a_cudnn_reserve() {
    let d = desc(5);
    let (out, _) = <NdArray as FusedRnnBackend>::fused_rnn_forward_training(&d, inputs(&d));
    let cudnn_like: RnnReserve<NdArray> = RnnReserve {
        tensors: vec![Tensor::<NdArray, 1>::zeros([371], &Default::default())
            .into_primitive()
            .tensor()],
    };
    let all = GradsWanted::ALL;
    <NdArray as FusedRnnBackend>::fused_rnn_backward(
        &d,
        inputs(&d),
        out,
        cudnn_like,
        no_grads(),
        all,
    );
}

#[test]
#[should_panic(
    expected = "expected reserve to be the reference's training-forward reserve for this call"
)]
fn reference_backward_refuses_the_native_reserve() {
    let d = desc(5);
    let (out, _) = reference::forward_training::<NdArray>(&d, inputs(&d));
    let native = NdArray::fused_rnn_forward_training(&d, inputs(&d)).1;
    reference::backward::<NdArray>(&d, inputs(&d), out, native, no_grads(), GradsWanted::ALL);
}

#[test]
#[should_panic(
    expected = "expected reserve to be the reference's training-forward reserve for this call"
)]
fn reference_backward_refuses_a_reserve_made_for_another_call() {
    let (d4, d5) = (desc(4), desc(5));
    let (out, _) = reference::forward_training::<NdArray>(&d5, inputs(&d5));
    let other = reference::forward_training::<NdArray>(&d4, inputs(&d4)).1;
    reference::backward::<NdArray>(&d5, inputs(&d5), out, other, no_grads(), GradsWanted::ALL);
}
