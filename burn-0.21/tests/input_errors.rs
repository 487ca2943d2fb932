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

#[test]
#[should_panic(
    expected = "expected input of shape [batch_size, seq_length, d_input] with batch_size > 0, got [0, 5, 3]"
)]
fn zero_batch_names_the_input() {
    gru().forward(x([0, 5, 3]), None);
}

#[test]
#[should_panic(
    expected = "expected input of shape [batch_size, seq_length, d_input] with seq_length > 0, got [2, 0, 3]"
)]
fn zero_steps_names_the_input() {
    gru().forward_with_lengths(x([2, 0, 3]), &[0, 0], None);
}

#[test]
#[should_panic(
    expected = "expected input of shape [seq_length, batch_size, d_input] with batch_size > 0, got [5, 0, 3]"
)]
fn zero_batch_sequence_first_names_the_input() {
    FusedRnnConfig::new(RnnMode::Lstm, 3, 4)
        .with_batch_first(false)
        .init::<NdArray>(&Default::default())
        .forward(x([5, 0, 3]), None);
}

/// The message of the panic of `f`.
fn panic_message(f: impl FnOnce()) -> String {
    let payload = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_err();
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap()
}

#[test]
fn wrong_number_of_lengths_is_one_sentence() {
    // No `assert_eq!` dump of left and right after the crate's sentence.
    let msg = panic_message(|| {
        gru().forward_with_lengths(x([2, 5, 3]), &[5, 4, 3], None);
    });
    assert_eq!(
        msg,
        "expected seq_lengths to hold batch_size = 2 lengths, got 3"
    );
}

#[test]
fn wrong_params_length_is_one_sentence() {
    let config = FusedRnnConfig::new(RnnMode::Gru, 3, 4);
    let size = burn_fused_rnn::params_size(&config.spec());
    // GRU: 3 gates * 4 = 12 rows; W_ih 12x3, W_hh 12x4, two biases of 12.
    assert_eq!(size, 12 * 3 + 12 * 4 + 12 + 12);
    let msg = panic_message(|| {
        config.init_with_params::<NdArray>(Tensor::zeros([size + 1], &Default::default()));
    });
    assert_eq!(
        msg,
        "expected params of shape [params_size] = [108], got [109]"
    );
}
