//! Config validation: every invalid configuration panics with a message that names the
//! field and the allowed values.

use burn_fused_rnn::{FusedRnnConfig, InputMode, RnnMode};

fn lstm() -> FusedRnnConfig {
    FusedRnnConfig::new(RnnMode::Lstm, 8, 16)
}

#[test]
#[should_panic(expected = "invalid FusedRnnConfig: expected d_input > 0, got 0")]
fn zero_d_input_is_rejected() {
    FusedRnnConfig::new(RnnMode::Gru, 0, 16).spec();
}

#[test]
#[should_panic(expected = "invalid FusedRnnConfig: expected d_hidden > 0, got 0")]
fn zero_d_hidden_is_rejected() {
    FusedRnnConfig::new(RnnMode::Gru, 8, 0).spec();
}

#[test]
#[should_panic(expected = "invalid FusedRnnConfig: expected num_layers > 0, got 0")]
fn zero_layers_is_rejected() {
    lstm().with_num_layers(0).spec();
}

#[test]
#[should_panic(
    expected = "expected proj_size = None for mode Gru (projection is LSTM only), got Some(4)"
)]
fn projection_on_gru_is_rejected() {
    FusedRnnConfig::new(RnnMode::Gru, 8, 16)
        .with_proj_size(Some(4))
        .spec();
}

#[test]
#[should_panic(expected = "expected proj_size in 1..d_hidden = 1..16, got 16")]
fn projection_not_below_hidden_is_rejected() {
    lstm().with_proj_size(Some(16)).spec();
}

#[test]
#[should_panic(expected = "expected proj_size in 1..d_hidden = 1..16, got 0")]
fn zero_projection_is_rejected() {
    lstm().with_proj_size(Some(0)).spec();
}

#[test]
#[should_panic(
    expected = "expected d_input == d_hidden for input_mode Skip, got d_input = 8 and d_hidden = 16"
)]
fn skip_input_with_mismatched_sizes_is_rejected() {
    lstm().with_input_mode(InputMode::Skip).spec();
}

#[test]
#[should_panic(expected = "expected dropout in [0, 1), got 1")]
fn dropout_of_one_is_rejected() {
    lstm().with_dropout(1.0).spec();
}

#[test]
#[should_panic(expected = "expected dropout in [0, 1), got -0.1")]
fn negative_dropout_is_rejected() {
    lstm().with_dropout(-0.1).spec();
}

#[test]
#[should_panic(expected = "expected dropout in [0, 1), got NaN")]
fn nan_dropout_is_rejected() {
    lstm().with_dropout(f64::NAN).spec();
}

#[test]
fn auto_select_skips_only_when_sizes_match() {
    let auto = |i, h| {
        FusedRnnConfig::new(RnnMode::RnnTanh, i, h)
            .with_input_mode(InputMode::AutoSelect)
            .spec()
            .skip_input
    };
    assert!(auto(16, 16));
    assert!(!auto(8, 16));
    assert!(
        !FusedRnnConfig::new(RnnMode::RnnTanh, 16, 16)
            .spec()
            .skip_input
    );
}

#[test]
fn defaults_follow_burn_nn_and_pytorch() {
    let c = lstm();
    assert_eq!(c.num_layers, 1);
    assert!(!c.bidirectional);
    assert_eq!(c.input_mode, InputMode::Linear);
    assert!(c.bias);
    assert_eq!(c.dropout, 0.0);
    assert!(c.batch_first);
    assert_eq!(c.proj_size, None);
    assert!(c.initializer.is_none());
}

#[test]
#[should_panic(
    expected = "invalid FusedRnnConfig: expected the network's sizes (d_input, d_hidden, proj_size, num_layers) to fit in usize, got an overflow in G * d_hidden = 4 * 9223372036854775807"
)]
fn hidden_size_that_overflows_is_rejected() {
    FusedRnnConfig::new(RnnMode::Lstm, 8, usize::MAX / 2).spec();
}

#[test]
#[should_panic(
    expected = "got an overflow in the length of weight_ih_l0 of shape [4294967296, 4294967296]"
)]
fn weight_length_that_overflows_is_rejected() {
    // G * H = 2^32 fits, W_ih has 2^64 elements.
    FusedRnnConfig::new(RnnMode::RnnTanh, 1 << 32, 1 << 32).spec();
}

#[test]
#[should_panic(expected = "got an overflow in params_size")]
fn params_size_that_overflows_is_rejected() {
    // Every tensor fits, their sum does not: four of about 2^62 elements each.
    FusedRnnConfig::new(RnnMode::RnnTanh, 1 << 31, 1 << 31)
        .with_bidirectional(true)
        .spec();
}

#[test]
#[should_panic(expected = "invalid spec: expected the network's sizes")]
fn a_spec_made_by_hand_with_absurd_sizes_is_rejected_by_the_descriptor() {
    let mut spec = FusedRnnConfig::new(RnnMode::Gru, 8, 16).spec();
    spec.d_hidden = usize::MAX;
    burn_fused_rnn::RnnDescriptor::new(spec, 3, 2, true, None, burn_fused_rnn::DropoutSpec::NONE);
}
