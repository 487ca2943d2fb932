//! Gate orders: this crate's canonical one (cuDNN's and PyTorch's) and those of the formats
//! weights are imported from and exported to, as letters, and the reordering between two
//! of them.
//!
//! The letters are shared across formats: LSTM `i` (input), `f` (forget), `g` (cell
//! candidate, ONNX's and TF's `c`), `o` (output); GRU `r` (reset), `z` (update, Keras's
//! and TF's `u`), `n` (new); plain RNNs `h`. A weight matrix of `G` gates stacks `G` equal
//! blocks in its format's order (along the gate axis: rows in PyTorch's `[G*H, in]`,
//! columns in Keras's and TF1's `[in, G*H]`).

use crate::spec::RnnMode;

/// This crate's gate order of `mode` (Note [Gate order] in [`crate::layout`]): cuDNN's
/// and PyTorch's, and burn-nn's gate controllers read in that order.
pub fn canonical(mode: RnnMode) -> &'static [char] {
    match mode {
        RnnMode::Lstm => &['i', 'f', 'g', 'o'],
        RnnMode::Gru => &['r', 'z', 'n'],
        RnnMode::RnnTanh | RnnMode::RnnRelu => &['h'],
    }
}

/// ONNX's `LSTM` (`i, o, f, c`), `GRU` (`z, r, h`) and `RNN` nodes.
pub fn onnx(mode: RnnMode) -> &'static [char] {
    match mode {
        RnnMode::Lstm => &['i', 'o', 'f', 'g'],
        RnnMode::Gru => &['z', 'r', 'n'],
        RnnMode::RnnTanh | RnnMode::RnnRelu => &['h'],
    }
}

/// Keras's (and TF2's) `LSTM` (`i, f, c, o`), `GRU` (`z, r, h`) and `SimpleRNN`.
pub fn keras(mode: RnnMode) -> &'static [char] {
    match mode {
        RnnMode::Lstm => &['i', 'f', 'g', 'o'],
        RnnMode::Gru => &['z', 'r', 'n'],
        RnnMode::RnnTanh | RnnMode::RnnRelu => &['h'],
    }
}

/// TF1 `tf.contrib.cudnn_rnn`'s canonical LSTM kernel (`i, c, f, o`). Its GRU keeps
/// `r, u` in one kernel and the candidate in others, and its RNNs have one gate.
pub const TF1_LSTM: [char; 4] = ['i', 'g', 'f', 'o'];

/// For each gate of the order `to`, the index of its block in the order `from`.
///
/// # Panics
///
/// If `from` and `to` are not orders of the same gates.
pub fn sources(from: &[char], to: &[char]) -> Vec<usize> {
    assert!(
        from.len() == to.len(),
        "expected gate orders of the same gates, got {from:?} and {to:?}"
    );
    to.iter()
        .map(|g| {
            from.iter().position(|f| f == g).unwrap_or_else(|| {
                panic!("expected gate orders of the same gates, got {from:?} and {to:?}")
            })
        })
        .collect()
}

/// `values`, `from.len()` equal blocks along its leading axis in the order `from`,
/// reordered into `to` (for a row-major `[G*H, k]` matrix, a block is `H * k` elements).
///
/// # Panics
///
/// If `values` does not split into `from.len()` equal blocks, or as [`sources`].
pub fn permute_blocks<T: Copy>(values: &[T], from: &[char], to: &[char]) -> Vec<T> {
    let block = values.len() / from.len().max(1);
    assert!(
        block * from.len() == values.len(),
        "expected {} equal gate blocks, got {} elements",
        from.len(),
        values.len()
    );
    sources(from, to)
        .into_iter()
        .flat_map(|s| values[s * block..(s + 1) * block].iter().copied())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MODES: [RnnMode; 4] = [
        RnnMode::Lstm,
        RnnMode::Gru,
        RnnMode::RnnTanh,
        RnnMode::RnnRelu,
    ];

    #[test]
    fn every_format_holds_the_canonical_gates_and_round_trips() {
        for mode in MODES {
            let canon = canonical(mode);
            assert_eq!(canon.len(), mode.num_gates());
            for other in [onnx(mode), keras(mode)] {
                let mut a = canon.to_vec();
                let mut b = other.to_vec();
                a.sort();
                b.sort();
                assert_eq!(a, b, "{mode:?}");
                // Two blocks of 2 per gate, tagged by gate index.
                let values: Vec<usize> = (0..2 * canon.len()).map(|i| i / 2).collect();
                let there = permute_blocks(&values, canon, other);
                assert_eq!(permute_blocks(&there, other, canon), values);
                for (k, g) in other.iter().enumerate() {
                    let i = canon.iter().position(|c| c == g).unwrap();
                    assert_eq!(&there[2 * k..2 * k + 2], &[i, i]);
                }
            }
        }
        assert_eq!(
            sources(canonical(RnnMode::Lstm), &TF1_LSTM),
            vec![0, 2, 1, 3]
        );
        assert_eq!(
            sources(canonical(RnnMode::Lstm), onnx(RnnMode::Lstm)),
            vec![0, 3, 1, 2]
        );
    }

    #[test]
    #[should_panic(expected = "expected gate orders of the same gates")]
    fn orders_of_other_gates_are_refused() {
        sources(&['i', 'f'], &['i', 'z']);
    }
}
