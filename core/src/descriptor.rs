//! The parameters of one call of the fused op: plain, hashable data, checked once before
//! dispatch.

use core::hash::{Hash, Hasher};

use crate::layout::params_size;
use crate::spec::RnnSpec;

/// Which of the op's input gradients a backward pass's caller will read: autodiff knows
/// which inputs are tracked. The state gradients `dh0` and `dc0` fall out of the scan and
/// are always computed. An implementation may skip the work of an unwanted gradient (the
/// native CPU kernel skips its GEMMs: Note [Gradients not wanted] in `cpu::backward`) or
/// compute it anyway; a caller never reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GradsWanted {
    /// The gradient of `x`.
    pub x: bool,
    /// The gradient of the flat weights.
    pub weights: bool,
}

impl GradsWanted {
    /// Every gradient.
    pub const ALL: Self = Self {
        x: true,
        weights: true,
    };
}

/// Dropout between layers: probability and seed.
///
/// Compared and hashed by the bits of `probability`, so it can sit in a cache key.
#[derive(Clone, Copy, Debug)]
pub struct DropoutSpec {
    /// Probability of zeroing one element of a layer's output, in `[0, 1)`.
    pub probability: f64,
    /// Seed of the masks.
    pub seed: u64,
}

impl DropoutSpec {
    /// No dropout.
    pub const NONE: DropoutSpec = DropoutSpec {
        probability: 0.0,
        seed: 0,
    };
}

impl PartialEq for DropoutSpec {
    fn eq(&self, other: &Self) -> bool {
        self.probability.to_bits() == other.probability.to_bits() && self.seed == other.seed
    }
}

impl Eq for DropoutSpec {}

impl Hash for DropoutSpec {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.probability.to_bits().hash(state);
        self.seed.hash(state);
    }
}

/// Everything one call of the fused op needs besides its tensors.
///
/// Built with [`RnnDescriptor::new`], which checks the sequence lengths; the tensors are
/// checked against it with [`RnnDescriptor::check_inputs`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RnnDescriptor {
    /// The network.
    pub spec: RnnSpec,
    /// Number of time steps `T` (the padded length).
    pub seq_length: usize,
    /// Batch size `B`.
    pub batch_size: usize,
    /// Inputs and outputs are `[B, T, F]` when true, `[T, B, F]` otherwise.
    pub batch_first: bool,
    /// Per-sequence valid lengths, each in `0..=T`, in batch order (need not be sorted);
    /// `None` means every sequence has length `T`.
    pub seq_lengths: Option<Vec<usize>>,
    /// Dropout between layers (training only).
    pub dropout: DropoutSpec,
}

/// The sizes of one call that every implementation's plan starts from: `T`, `B`, `H`,
/// `P`, `D` and `G`. The CPU kernel's and the CubeCL kernels' plans deref to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sizes {
    /// Time steps `T`.
    pub t: usize,
    /// Batch size `B`.
    pub b: usize,
    /// Hidden size `H`.
    pub h: usize,
    /// State size `P` (`H`, or the LSTM projection's size).
    pub p: usize,
    /// Directions `D`.
    pub nd: usize,
    /// Gates `G`.
    pub g: usize,
}

impl Sizes {
    /// `T · B`, the rows of a sequence tensor.
    pub fn rows(&self) -> usize {
        self.t * self.b
    }

    /// `G · H`, the width of the gate pre-activations.
    pub fn gh(&self) -> usize {
        self.g * self.h
    }
}

impl RnnDescriptor {
    /// The call's [`Sizes`].
    pub fn sizes(&self) -> Sizes {
        Sizes {
            t: self.seq_length,
            b: self.batch_size,
            h: self.spec.d_hidden,
            p: self.spec.d_state(),
            nd: self.spec.num_directions(),
            g: self.spec.mode.num_gates(),
        }
    }

    /// Describes one call.
    ///
    /// # Panics
    ///
    /// If `seq_length` or `batch_size` is 0, `seq_lengths` does not hold `batch_size`
    /// lengths, each at most `seq_length`, or a size derived from `spec` overflows `usize`
    /// (only possible for a spec not made by the front-end's `FusedRnnConfig::spec`).
    pub fn new(
        spec: RnnSpec,
        seq_length: usize,
        batch_size: usize,
        batch_first: bool,
        seq_lengths: Option<Vec<usize>>,
        dropout: DropoutSpec,
    ) -> Self {
        assert!(seq_length > 0, "expected seq_length > 0, got 0");
        assert!(batch_size > 0, "expected batch_size > 0, got 0");
        // A spec made by hand (not by `FusedRnnConfig::spec`) may hold absurd sizes.
        if let Err(msg) = crate::layout::check_sizes(&spec) {
            panic!("invalid spec: {msg}");
        }
        if let Some(lengths) = &seq_lengths {
            assert!(
                lengths.len() == batch_size,
                "expected seq_lengths to hold batch_size = {batch_size} lengths, got {}",
                lengths.len()
            );
            if let Some((b, &len)) = lengths.iter().enumerate().find(|(_, &l)| l > seq_length) {
                panic!(
                    "expected every seq_lengths entry <= seq_length = {seq_length}, got seq_lengths[{b}] = {len}"
                );
            }
        }
        // Lengths that are all full carry no information: drop them so that the common
        // case takes the unmasked path and shares cache entries.
        let seq_lengths = seq_lengths.filter(|l| l.iter().any(|&len| len != seq_length));
        Self {
            spec,
            seq_length,
            batch_size,
            batch_first,
            seq_lengths,
            dropout,
        }
    }

    /// Expected input shape, in the descriptor's layout.
    pub fn input_shape(&self) -> [usize; 3] {
        self.io_shape(self.spec.d_input)
    }

    /// Output shape, in the descriptor's layout: features `D * P`.
    pub fn output_shape(&self) -> [usize; 3] {
        self.io_shape(self.spec.output_size())
    }

    /// Shape of `h0`/`h_n`: `[L*D, B, P]`.
    pub fn hidden_shape(&self) -> [usize; 3] {
        [
            self.spec.num_pseudo_layers(),
            self.batch_size,
            self.spec.d_state(),
        ]
    }

    /// Shape of `c0`/`c_n`: `[L*D, B, H]` (LSTM only).
    pub fn cell_shape(&self) -> [usize; 3] {
        [
            self.spec.num_pseudo_layers(),
            self.batch_size,
            self.spec.d_hidden,
        ]
    }

    /// Length of the flat weights vector.
    pub fn params_size(&self) -> usize {
        params_size(&self.spec)
    }

    /// The valid length of sequence `b`.
    pub fn seq_length_of(&self, b: usize) -> usize {
        self.seq_lengths
            .as_ref()
            .map_or(self.seq_length, |lengths| lengths[b])
    }

    fn io_shape(&self, features: usize) -> [usize; 3] {
        if self.batch_first {
            [self.batch_size, self.seq_length, features]
        } else {
            [self.seq_length, self.batch_size, features]
        }
    }

    /// Checks tensor shapes against the descriptor.
    ///
    /// # Panics
    ///
    /// With "expected …, got …" naming the argument, when a shape does not fit, or when a
    /// cell state is given to a mode without one.
    pub fn check_inputs(
        &self,
        x: &[usize],
        h0: Option<&[usize]>,
        c0: Option<&[usize]>,
        weights: &[usize],
    ) {
        let layout = if self.batch_first {
            "[batch_size, seq_length, d_input]"
        } else {
            "[seq_length, batch_size, d_input]"
        };
        check_shape("input", layout, x, &self.input_shape());
        if let Some(h0) = h0 {
            check_shape(
                "initial hidden state",
                "[L*D, batch_size, P]",
                h0,
                &self.hidden_shape(),
            );
        }
        if let Some(c0) = c0 {
            assert!(
                self.spec.mode.has_cell_state(),
                "expected no initial cell state for mode {:?} (only LSTM has one), got one of shape {c0:?}",
                self.spec.mode
            );
            check_shape(
                "initial cell state",
                "[L*D, batch_size, H]",
                c0,
                &self.cell_shape(),
            );
        }
        check_shape("weights", "[params_size]", weights, &[self.params_size()]);
    }
}

fn check_shape(name: &str, layout: &str, got: &[usize], expected: &[usize]) {
    assert!(
        got == expected,
        "expected {name} of shape {layout} = {expected:?}, got {got:?}"
    );
}
