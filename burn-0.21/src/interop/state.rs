//! burn-nn's states (`LstmState`, `RnnState`) to and from this crate's [`RnnState`], by
//! field: burn-nn's `LstmState::new(cell, hidden)` takes the opposite order from
//! [`RnnState::lstm`]`(hidden, cell)`.

use burn::nn::{LstmState, RnnState as NnRnnState};
use burn::tensor::backend::Backend;
use burn::tensor::Tensor;

use super::InteropError;
use crate::module::RnnState;

fn unsupported(option: &str, value: &str, reason: &str) -> InteropError {
    InteropError::unsupported(option, value, reason)
}

impl<B: Backend> From<LstmState<B, 3>> for RnnState<B> {
    /// `BiLstm`'s state (`[2, batch_size, d_hidden]`), or any `[L*D, batch_size, H]`
    /// LSTM state, by field: burn-nn's `LstmState::new(cell, hidden)` takes the opposite
    /// order from [`RnnState::lstm`]`(hidden, cell)`, so go through the fields.
    fn from(state: LstmState<B, 3>) -> Self {
        RnnState::lstm(state.hidden, state.cell)
    }
}

impl<B: Backend> From<LstmState<B, 2>> for RnnState<B> {
    /// `Lstm`'s state (`[batch_size, d_hidden]`), as the state of a one-layer,
    /// one-direction module (`[1, batch_size, d_hidden]`).
    fn from(state: LstmState<B, 2>) -> Self {
        RnnState::lstm(state.hidden.unsqueeze_dim(0), state.cell.unsqueeze_dim(0))
    }
}

impl<B: Backend> From<NnRnnState<B, 3>> for RnnState<B> {
    /// `BiRnn`'s state (`[2, batch_size, d_hidden]`).
    fn from(state: NnRnnState<B, 3>) -> Self {
        RnnState::hidden_only(state.hidden)
    }
}

impl<B: Backend> From<NnRnnState<B, 2>> for RnnState<B> {
    /// `Rnn`'s state (`[batch_size, d_hidden]`) as `[1, batch_size, d_hidden]`.
    fn from(state: NnRnnState<B, 2>) -> Self {
        RnnState::hidden_only(state.hidden.unsqueeze_dim(0))
    }
}

fn no_cell() -> InteropError {
    unsupported(
        "cell",
        "None",
        "an LstmState needs a cell state: this is the state of a GRU or RNN",
    )
}

fn has_cell() -> InteropError {
    unsupported(
        "cell",
        "Some(..)",
        "a hidden-only state would drop the LSTM's cell state: convert to an LstmState",
    )
}

fn single<B: Backend>(t: Tensor<B, 3>) -> Result<Tensor<B, 2>, InteropError> {
    let [n, b, h] = t.dims();
    if n != 1 {
        return Err(InteropError::Shape {
            key: "state".into(),
            expected: vec![1, b, h],
            got: vec![n, b, h],
            context: "a one-layer, one-direction state; see RnnState::into_layers".into(),
        });
    }
    Ok(t.squeeze_dim(0))
}

impl<B: Backend> TryFrom<RnnState<B>> for LstmState<B, 3> {
    type Error = InteropError;

    /// An LSTM state, `[L*D, batch_size, H]` (for a `BiLstm`, `L*D = 2`).
    fn try_from(state: RnnState<B>) -> Result<Self, InteropError> {
        let cell = state.cell.ok_or_else(no_cell)?;
        Ok(LstmState::new(cell, state.hidden))
    }
}

impl<B: Backend> TryFrom<RnnState<B>> for LstmState<B, 2> {
    type Error = InteropError;

    /// The state of a one-layer, one-direction LSTM, as burn-nn's `Lstm` takes it.
    fn try_from(state: RnnState<B>) -> Result<Self, InteropError> {
        let cell = state.cell.ok_or_else(no_cell)?;
        Ok(LstmState::new(single(cell)?, single(state.hidden)?))
    }
}

impl<B: Backend> TryFrom<RnnState<B>> for NnRnnState<B, 3> {
    type Error = InteropError;

    /// A GRU or RNN state, `[L*D, batch_size, H]`.
    fn try_from(state: RnnState<B>) -> Result<Self, InteropError> {
        if state.cell.is_some() {
            return Err(has_cell());
        }
        Ok(NnRnnState::new(state.hidden))
    }
}

impl<B: Backend> TryFrom<RnnState<B>> for NnRnnState<B, 2> {
    type Error = InteropError;

    /// The state of a one-layer, one-direction RNN, as burn-nn's `Rnn` takes it.
    fn try_from(state: RnnState<B>) -> Result<Self, InteropError> {
        if state.cell.is_some() {
            return Err(has_cell());
        }
        Ok(NnRnnState::new(single(state.hidden)?))
    }
}
