//! [`RnnState`]: the recurrent state a [`FusedRnn`](super::FusedRnn) takes and returns.

use burn::tensor::backend::Backend;
use burn::tensor::Tensor;

/// Recurrent state: `[L*D, batch_size, P]` hidden and, for LSTM, `[L*D, batch_size, H]` cell,
/// indexed by `layer * D + direction`.
///
/// Build it with the named constructors, [`RnnState::lstm`]`(hidden, cell)` (PyTorch's
/// `(h_0, c_0)` order) and [`RnnState::hidden_only`]`(hidden)` (GRU, RNN), or from burn-nn's
/// states with `From` (by field). Both tensors of an LSTM state have the same type, so no
/// constructor can stop a swapped call from compiling: the names say the order, and
/// burn-nn's `LstmState::new(cell, hidden)` takes the opposite one.
#[derive(Debug, Clone)]
pub struct RnnState<B: Backend> {
    /// Hidden state `h`.
    pub hidden: Tensor<B, 3>,
    /// Cell state `c` (LSTM only).
    pub cell: Option<Tensor<B, 3>>,
}

impl<B: Backend> RnnState<B> {
    /// A state from its parts, hidden first. Kept for existing code; prefer
    /// [`RnnState::lstm`] and [`RnnState::hidden_only`], whose names say what each
    /// argument is.
    pub fn new(hidden: Tensor<B, 3>, cell: Option<Tensor<B, 3>>) -> Self {
        Self { hidden, cell }
    }

    /// An LSTM state: hidden `[L*D, batch_size, P]`, then cell `[L*D, batch_size, H]`
    /// (PyTorch's `(h_0, c_0)` order; burn-nn's `LstmState::new` takes `(cell, hidden)`).
    pub fn lstm(hidden: Tensor<B, 3>, cell: Tensor<B, 3>) -> Self {
        Self {
            hidden,
            cell: Some(cell),
        }
    }

    /// A GRU or RNN state: hidden `[L*D, batch_size, H]` only. An LSTM refuses it (it
    /// would start the cell state at zero without a word): use [`RnnState::lstm`].
    pub fn hidden_only(hidden: Tensor<B, 3>) -> Self {
        Self { hidden, cell: None }
    }

    /// This state with the cell state `cell` (`[L*D, batch_size, H]`), e.g.
    /// `RnnState::hidden_only(h).with_cell(c)`.
    pub fn with_cell(self, cell: Tensor<B, 3>) -> Self {
        Self {
            cell: Some(cell),
            ..self
        }
    }

    /// The state of a stack from the states of its parts, bottom first (concatenated along
    /// the first axis): e.g. the per-layer states of a stack of burn-nn layers.
    ///
    /// # Panics
    ///
    /// If `parts` is empty, or some parts have a cell state and others not.
    pub fn from_layers(parts: Vec<RnnState<B>>) -> Self {
        assert!(!parts.is_empty(), "expected at least one state, got none");
        let with_cell = parts.iter().filter(|p| p.cell.is_some()).count();
        assert!(
            with_cell == 0 || with_cell == parts.len(),
            "expected every state to have a cell state or none to, got {with_cell} of {}",
            parts.len()
        );
        let (hidden, cell): (Vec<_>, Vec<_>) =
            parts.into_iter().map(|p| (p.hidden, p.cell)).unzip();
        Self {
            hidden: Tensor::cat(hidden, 0),
            cell: (with_cell > 0).then(|| Tensor::cat(cell.into_iter().flatten().collect(), 0)),
        }
    }

    /// Splits the state into `parts` equal states along the first axis, bottom first: for
    /// a module with `L` layers and `D` directions, `into_layers(L)` gives one
    /// `[D, batch_size, _]` state per layer (the inverse of [`RnnState::from_layers`]).
    ///
    /// # Panics
    ///
    /// If the first axis is not a multiple of `parts`.
    pub fn into_layers(self, parts: usize) -> Vec<RnnState<B>> {
        let [n, _, _] = self.hidden.dims();
        assert!(
            parts > 0 && n % parts == 0,
            "expected parts dividing the state's first axis {n}, got {parts}"
        );
        let hidden = self.hidden.chunk(parts, 0);
        let cells = match self.cell {
            Some(c) => c.chunk(parts, 0).into_iter().map(Some).collect(),
            None => vec![None; parts],
        };
        hidden
            .into_iter()
            .zip(cells)
            .map(|(hidden, cell)| Self { hidden, cell })
            .collect()
    }
}
