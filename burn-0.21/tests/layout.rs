//! The canonical layout: offsets computed by hand, and names/shapes/order against the order
//! of PyTorch's `named_parameters()` (= its flat weights) recorded in the fixtures.

mod common;

use burn_fused_rnn::{params_size, FusedRnnConfig, InputMode, ParamKind, RnnLayout, RnnMode};
use common::fixtures;

#[test]
fn lstm_two_layer_bidirectional_offsets_by_hand() {
    // I = 3, H = 4, G = 4: layer 0 W_ih [16, 3], layer 1 W_ih [16, 8]; W_hh [16, 4].
    let spec = FusedRnnConfig::new(RnnMode::Lstm, 3, 4)
        .with_num_layers(2)
        .with_bidirectional(true)
        .spec();
    let layout = RnnLayout::new(spec);
    let l0 = 16 * 3 + 16 * 4 + 16 + 16; // 144
    let l1 = 16 * 8 + 16 * 4 + 16 + 16; // 224
    assert_eq!(layout.params_size(), 2 * l0 + 2 * l1);
    let at = |l, d, k| layout.entry(l, d, k).unwrap().offset;
    assert_eq!(at(0, 0, ParamKind::WeightIh), 0);
    assert_eq!(at(0, 0, ParamKind::WeightHh), 48);
    assert_eq!(at(0, 0, ParamKind::BiasIh), 112);
    assert_eq!(at(0, 0, ParamKind::BiasHh), 128);
    assert_eq!(at(0, 1, ParamKind::WeightIh), l0);
    assert_eq!(at(1, 0, ParamKind::WeightIh), 2 * l0);
    assert_eq!(
        layout.entry(1, 0, ParamKind::WeightIh).unwrap().shape,
        vec![16, 8]
    );
    assert_eq!(
        at(1, 1, ParamKind::BiasHh),
        2 * l0 + l1 + 16 * 8 + 16 * 4 + 16
    );
    assert_eq!(
        layout.entry(1, 1, ParamKind::BiasHh).unwrap().name(),
        "bias_hh_l1_reverse"
    );
}

#[test]
fn projection_skip_input_and_no_bias_change_the_layout() {
    // LSTM H = 6, P = 2, skip input (I = H): layer 0 has no W_ih/b_ih; W_hh is [24, P].
    let spec = FusedRnnConfig::new(RnnMode::Lstm, 6, 6)
        .with_proj_size(Some(2))
        .with_input_mode(InputMode::Skip)
        .with_num_layers(2)
        .spec();
    let layout = RnnLayout::new(spec);
    assert!(layout.entry(0, 0, ParamKind::WeightIh).is_none());
    assert!(layout.entry(0, 0, ParamKind::BiasIh).is_none());
    assert_eq!(layout.entry(0, 0, ParamKind::WeightHh).unwrap().offset, 0);
    assert_eq!(
        layout.entry(0, 0, ParamKind::WeightHh).unwrap().shape,
        vec![24, 2]
    );
    assert_eq!(
        layout.entry(0, 0, ParamKind::WeightHr).unwrap().shape,
        vec![2, 6]
    );
    // Layer 1 reads the projected output: W_ih [24, P].
    assert_eq!(
        layout.entry(1, 0, ParamKind::WeightIh).unwrap().shape,
        vec![24, 2]
    );
    let l0 = 24 * 2 + 24 + 2 * 6;
    let l1 = 24 * 2 + 24 * 2 + 24 + 24 + 2 * 6;
    assert_eq!(layout.params_size(), l0 + l1);

    let no_bias = FusedRnnConfig::new(RnnMode::Gru, 5, 3)
        .with_bias(false)
        .spec();
    assert_eq!(params_size(&no_bias), 9 * 5 + 9 * 3);
}

#[test]
fn split_returns_each_tensor_in_flat_order() {
    let spec = FusedRnnConfig::new(RnnMode::RnnTanh, 2, 3).spec();
    let layout = RnnLayout::new(spec);
    let flat: Vec<usize> = (0..layout.params_size()).collect();
    let parts = layout.split(&flat);
    let names: Vec<String> = parts.iter().map(|(e, _)| e.name()).collect();
    assert_eq!(
        names,
        ["weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"]
    );
    assert_eq!(parts[1].1, &flat[6..15]);
    assert_eq!(parts[3].1, &flat[18..21]);
}

#[test]
#[should_panic(expected = "expected params of length params_size = 21, got 20")]
fn split_rejects_a_wrong_length() {
    let layout = RnnLayout::new(FusedRnnConfig::new(RnnMode::RnnTanh, 2, 3).spec());
    layout.split(&[0.0f32; 20]);
}

#[test]
fn layout_matches_pytorch_parameter_order() {
    for case in &fixtures().cases {
        let layout = RnnLayout::new(case.config().spec());
        let ours: Vec<(String, Vec<usize>)> = layout
            .entries()
            .iter()
            .map(|e| (e.name(), e.shape.clone()))
            .collect();
        let torch: Vec<(String, Vec<usize>)> = case
            .named_weights()
            .into_iter()
            .map(|(name, shape, _)| (name, shape))
            .collect();
        assert_eq!(
            ours, torch,
            "{}: layout differs from PyTorch's flat order",
            case.name
        );
        let total: usize = torch.iter().map(|(_, s)| s.iter().product::<usize>()).sum();
        assert_eq!(layout.params_size(), total, "{}", case.name);
    }
}
