//! Single-step decoding: a module's weights flattened once, then one fused call per step.

use burn::tensor::Tensor;

use crate::descriptor::{DropoutSpec, RnnDescriptor};
use crate::module::{split_state, FusedRnn, RnnState};
use crate::ops::fused_rnn;
use crate::spec::RnnSpec;

/// A unidirectional [`FusedRnn`] prepared for step-by-step decoding: its flat weight
/// vector is built once (by [`FusedRnn::prepare`]), and each [`PreparedRnn::step`] is one
/// call of the fused op with `seq_length = 1`, every layer at once.
///
/// [`FusedRnn::forward`] assembles the flat vector from the canonical parameters on every
/// call, a new tensor each time; a prepared module assembles it once, and holds that
/// snapshot however the module changes.
///
/// # Note [Step-by-step decoding]
///
/// - `T` calls of `step` compute what one `forward` over the `T` steps computes: the
///   output of step `t` is the forward's output at step `t`, and the state after the last
///   step is the final state, with or without an initial state (tested on NdArray F64 to
///   1e-12 and on Flex F32, at every SIMD level, in `tests/step.rs`). The module's
///   `batch_first` does not matter: a step's input is `[batch_size, d_input]`.
/// - Bidirectional modules are refused: the reverse direction's output at step `t` depends
///   on every later input, so it cannot be produced before the sequence has ended.
/// - The prepared weights are a snapshot: after an optimizer step or a load, prepare again.
///   On an autodiff device the snapshot is tracked like [`FusedRnn::flat_weights`], so
///   gradients of a stepped loss reach the module's parameters (every step is one node of
///   the fused op, Note [One node, many outputs] in [`crate::autodiff`]). A tracked step
///   keeps what its backward needs: to decode for inference on an autodiff device, prepare
///   `module.valid()`.
/// - No dropout is applied, tracked or not: decoding is inference (a training forward
///   draws its masks per call, Note [Dropout seeds] on [`FusedRnn`], which per-step calls
///   could not reproduce).
/// - A prepared module saves the concatenation; the op underneath keeps what it can across
///   calls. On NdArray and Flex, under autodiff or not, the native kernel keeps its packed
///   weights for one-step calls on the same weight buffer (Note [Packed weights across
///   calls] in the core crate's `cpu::prepared` module), and every step of a prepared
///   module passes the same buffer (F32 or F64; F16 and BF16 weights are converted per
///   call, and so packed per call), so a decoder pays for packing once. Other devices run
///   the reference (Note [Call routing] in [`crate::ops`]), which lays its weights out per
///   call.
///
/// ```
/// use burn::tensor::{Device, Distribution, Tensor};
/// use burn_fused_rnn::{FusedRnnConfig, RnnMode};
///
/// let device = Device::flex();
/// let lstm = FusedRnnConfig::new(RnnMode::Lstm, 8, 16)
///     .with_num_layers(2)
///     .init(&device);
/// let x = Tensor::<3>::random([4, 10, 8], Distribution::Default, &device); // batch-first
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
pub struct PreparedRnn {
    /// The flat canonical weights `[params_size]`, built once.
    weights: Tensor<1>,
    spec: RnnSpec,
}

impl FusedRnn {
    /// Builds the flat weights once for step-by-step decoding (Note [Step-by-step
    /// decoding] on [`PreparedRnn`]).
    ///
    /// # Panics
    ///
    /// If the module is bidirectional: its reverse direction needs the whole sequence.
    pub fn prepare(&self) -> PreparedRnn {
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

impl PreparedRnn {
    /// The network.
    pub fn spec(&self) -> &RnnSpec {
        &self.spec
    }

    /// Runs one time step of every layer, as one fused call (Note [Step-by-step
    /// decoding]).
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
    /// With "expected …, got …" naming the argument when `input` or the state does not fit
    /// the network (an LSTM's state without a cell state included), or when a state's dtype
    /// differs from the input's. The weights are cast to the input's dtype, as
    /// [`FusedRnn::forward`] does, at a cost per call (and without the kernel's packed
    /// weights across calls): prepare a module of the input's dtype to avoid it.
    pub fn step(&self, input: Tensor<2>, state: Option<RnnState>) -> (Tensor<2>, RnnState) {
        let [batch, features] = input.dims();
        assert!(
            batch > 0,
            "expected input of shape [batch_size, d_input] with batch_size > 0, got [{batch}, \
             {features}]"
        );
        assert!(
            features == self.spec.d_input,
            "expected input of shape [batch_size, d_input] = [{batch}, {}], got [{batch}, \
             {features}]",
            self.spec.d_input
        );
        let desc = RnnDescriptor::new(self.spec, 1, batch, true, None, DropoutSpec::NONE);
        // A clone shares the buffer: every step passes the same weights to the kernel.
        let weights = if self.weights.dtype() == input.dtype() {
            self.weights.clone()
        } else {
            self.weights.clone().cast(input.dtype())
        };
        let (h0, c0) = split_state(&self.spec, state);
        let out = fused_rnn(&desc, input.unsqueeze_dim(1), h0, c0, weights);
        (
            out.output.squeeze_dim(1),
            RnnState::new(out.hidden, out.cell),
        )
    }
}
