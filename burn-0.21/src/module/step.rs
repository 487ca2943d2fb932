//! Single-step decoding: a module's weights flattened once, then one fused call per step.

use burn::tensor::Tensor;

use super::{FusedRnn, RnnState};
use crate::backend::FusedRnnBackend;
use crate::descriptor::{DropoutSpec, RnnDescriptor};
use crate::ops::fused_rnn;
use crate::spec::RnnSpec;

/// A unidirectional [`FusedRnn`] prepared for step-by-step decoding: its flat weight
/// vector is built once (by [`FusedRnn::prepare`]), and each [`PreparedRnn::step`] is one
/// call of the fused op with `seq_length = 1`, every layer at once.
///
/// [`FusedRnn::forward`] concatenates the canonical weights into the flat vector, except
/// on backends whose buffers it can name (the native CPU backends keep the vector while
/// the parameters are unchanged: Note [Flat weights across calls] in the core crate's
/// `memo`); a prepared module
/// concatenates once on every backend, and holds its snapshot however the module changes.
///
/// # Note [Step-by-step decoding]
///
/// - `T` calls of `step` compute what one `forward` over the `T` steps computes: the
///   output of step `t` is `y[:, t]`, and the state after the last step is the final state
///   (tested on NdArray f64 to 1e-12 and on Flex).
/// - Bidirectional modules are refused: the reverse direction's output at step `t` depends
///   on every later input, so it cannot be produced before the sequence has ended.
/// - The prepared weights are a snapshot: after an optimizer step or a load, prepare again.
///   On an `Autodiff` backend the snapshot is tracked like [`FusedRnn::flat_weights`], so
///   gradients of a stepped loss reach the module's parameters.
/// - No dropout is applied: decoding is inference (a training forward draws its masks
///   per call, which per-step calls could not reproduce).
/// - A prepared module saves the concatenation; the op underneath keeps what it can across
///   calls. The native CPU kernel (NdArray, Flex) keeps its packed weights for one-step
///   calls on the same weight tensor (Note [Packed weights across calls] in the kernel's
///   `prepared` module), so a decoder pays for packing once; the cuDNN path checks and,
///   where its layout differs, repacks the flat weights per call; other backends run the
///   reference, which lays its weights out per call. `benches/step.rs` measures a step
///   against burn-nn's `Lstm` with `T = 1` (docs/BENCHMARKS.md).
///
/// ```
/// use burn::backend::NdArray;
/// use burn::tensor::{Distribution, Tensor};
/// use burn_fused_rnn::{FusedRnnConfig, RnnMode};
///
/// let device = Default::default();
/// let lstm = FusedRnnConfig::new(RnnMode::Lstm, 8, 16)
///     .with_num_layers(2)
///     .init::<NdArray>(&device);
/// let x = Tensor::<NdArray, 3>::random([4, 10, 8], Distribution::Default, &device);
///
/// let decoder = lstm.prepare();
/// let mut state = None;
/// for t in 0..10 {
///     let x_t = x.clone().narrow(1, t, 1).squeeze_dim(1); // [batch_size, d_input]
///     let (y_t, next) = decoder.step(x_t, state);
///     assert_eq!(y_t.dims(), [4, 16]);
///     state = Some(next);
/// }
/// let (_, full) = lstm.forward(x, None);
/// assert!(state.unwrap().hidden.all_close(full.hidden, None, Some(1e-5)));
/// ```
#[derive(Clone, Debug)]
pub struct PreparedRnn<B: FusedRnnBackend> {
    weights: Tensor<B, 1>,
    spec: RnnSpec,
}

impl<B: FusedRnnBackend> FusedRnn<B> {
    /// Builds the flat weights once for step-by-step decoding (Note [Step-by-step
    /// decoding]).
    ///
    /// # Panics
    ///
    /// If the module is bidirectional: its reverse direction needs the whole sequence.
    pub fn prepare(&self) -> PreparedRnn<B> {
        assert!(
            !self.spec().bidirectional,
            "expected a unidirectional FusedRnn for step-by-step decoding (a reverse direction \
             needs the whole sequence before its first output), got bidirectional = true"
        );
        PreparedRnn {
            weights: self.flat_weights(),
            spec: *self.spec(),
        }
    }
}

impl<B: FusedRnnBackend> PreparedRnn<B> {
    /// The network.
    pub fn spec(&self) -> &RnnSpec {
        &self.spec
    }

    /// Runs one time step of every layer.
    ///
    /// # Arguments
    ///
    /// - `input`: this step's input.
    /// - `state`: the state after the previous step; zeros when `None` (the first step).
    ///
    /// # Shapes
    ///
    /// - `input`: `[batch_size, d_input]`.
    /// - `state`: `hidden` `[L, batch_size, P]`, `cell` `[L, batch_size, H]` (LSTM).
    ///
    /// # Returns
    ///
    /// The last layer's output `[batch_size, P]` (the new hidden state of the top layer)
    /// and the state after this step.
    ///
    /// # Panics
    ///
    /// With "expected …, got …" when `input` or the state does not fit the network (an
    /// LSTM's state without a cell state included), or a
    /// dtype differs from the input's (the weights are cast to the input's dtype, as
    /// [`FusedRnn::forward`] does, at a cost per call: prepare a module of the input's dtype
    /// to avoid it).
    pub fn step(
        &self,
        input: Tensor<B, 2>,
        state: Option<RnnState<B>>,
    ) -> (Tensor<B, 2>, RnnState<B>) {
        let [batch, features] = input.dims();
        assert_eq!(
            features, self.spec.d_input,
            "expected input of shape [batch_size, d_input] = [{batch}, {}], got [{batch}, {features}]",
            self.spec.d_input
        );
        let desc = RnnDescriptor::new(self.spec, 1, batch, true, None, DropoutSpec::NONE);
        let weights = if self.weights.dtype() == input.dtype() {
            self.weights.clone()
        } else {
            self.weights.clone().cast(input.dtype())
        };
        let (h0, c0) = super::split_state(&self.spec, state);
        let out = fused_rnn(&desc, input.unsqueeze_dim(1), h0, c0, weights);
        let y = out.output.reshape([batch, self.spec.d_state()]);
        (
            y,
            RnnState {
                hidden: out.hidden,
                cell: out.cell,
            },
        )
    }
}
