//! Bad inputs panic before dispatch with "expected …, got …" naming the argument.

use burn::backend::NdArray;
use burn::tensor::Tensor;
use burn_fused_rnn::{FusedRnn, FusedRnnConfig, RnnMode, RnnState};

fn gru() -> FusedRnn<NdArray> {
    FusedRnnConfig::new(RnnMode::Gru, 3, 4)
        .with_num_layers(2)
        .init(&Default::default())
}

fn x(shape: [usize; 3]) -> Tensor<NdArray, 3> {
    Tensor::zeros(shape, &Default::default())
}

#[test]
#[should_panic(
    expected = "expected input of shape [batch_size, seq_length, d_input] = [2, 5, 3], got [2, 5, 4]"
)]
fn wrong_input_features() {
    gru().forward(x([2, 5, 4]), None);
}

#[test]
#[should_panic(
    expected = "expected initial hidden state of shape [L*D, batch_size, P] = [2, 2, 4], got [1, 2, 4]"
)]
fn wrong_hidden_state() {
    gru().forward(x([2, 5, 3]), Some(RnnState::new(x([1, 2, 4]), None)));
}

#[test]
#[should_panic(
    expected = "expected no initial cell state for mode Gru (only LSTM has one), got one of shape [2, 2, 4]"
)]
fn cell_state_for_gru() {
    gru().forward(
        x([2, 5, 3]),
        Some(RnnState::new(x([2, 2, 4]), Some(x([2, 2, 4])))),
    );
}

#[test]
#[should_panic(
    expected = "expected every seq_lengths entry <= seq_length = 5, got seq_lengths[1] = 6"
)]
fn length_past_the_end() {
    gru().forward_with_lengths(x([2, 5, 3]), &[5, 6], None);
}

#[test]
#[should_panic(expected = "expected seq_lengths to hold batch_size = 2 lengths, got 3")]
fn wrong_number_of_lengths() {
    gru().forward_with_lengths(x([2, 5, 3]), &[5, 4, 3], None);
}
