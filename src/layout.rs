//! The canonical weight layout: names, shapes and offsets of every matrix and bias. Pure
//! arithmetic, no tensors.
//!
//! # Note [Gate order]
//!
//! Gates are stacked along the rows of every matrix and bias, in cuDNN's order, which is
//! also PyTorch's:
//!
//! | mode       | gates (row blocks of `H`) |
//! |------------|---------------------------|
//! | LSTM       | `i` (input), `f` (forget), `g` (cell candidate), `o` (output) |
//! | GRU        | `r` (reset), `z` (update), `n` (new) |
//! | RNN-tanh/relu | one block |
//!
//! # Note [RNN weight layout]
//!
//! Per layer `l` and direction `d` (forward, then reverse), a "pseudo-layer" `l * D + d`
//! holds, in this order:
//!
//! | name (PyTorch)              | shape           | absent when |
//! |-----------------------------|-----------------|-------------|
//! | `weight_ih_l{l}{_reverse}`  | `[G*H, in_l]`   | skip input, `l == 0` |
//! | `weight_hh_l{l}{_reverse}`  | `[G*H, P]`      | never |
//! | `bias_ih_l{l}{_reverse}`    | `[G*H]`         | no bias; skip input, `l == 0` |
//! | `bias_hh_l{l}{_reverse}`    | `[G*H]`         | no bias |
//! | `weight_hr_l{l}{_reverse}`  | `[P, H]`        | no projection |
//!
//! `in_l` is `d_input` for layer 0 and `D * P` above. The flat "params" vector is the
//! concatenation of every pseudo-layer's tensors, row-major, in this order: exactly what
//! PyTorch's `flatten_parameters` produces and what cuDNN's weight space holds (on CUDA the
//! cuDNN offsets are still checked against this table, never assumed).

use crate::config::RnnSpec;

/// The kind of one canonical tensor of a pseudo-layer, in flat order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ParamKind {
    /// Input matrix `W_ih`, `[G*H, in_l]`.
    WeightIh,
    /// Recurrent matrix `W_hh`, `[G*H, P]`.
    WeightHh,
    /// Input bias `b_ih`, `[G*H]`.
    BiasIh,
    /// Recurrent bias `b_hh`, `[G*H]`.
    BiasHh,
    /// LSTM projection `W_hr`, `[P, H]`.
    WeightHr,
}

impl ParamKind {
    /// The five kinds, in flat order.
    pub const ALL: [ParamKind; 5] = [
        ParamKind::WeightIh,
        ParamKind::WeightHh,
        ParamKind::BiasIh,
        ParamKind::BiasHh,
        ParamKind::WeightHr,
    ];

    /// PyTorch's name stem (`weight_ih`, ...).
    pub fn stem(self) -> &'static str {
        match self {
            ParamKind::WeightIh => "weight_ih",
            ParamKind::WeightHh => "weight_hh",
            ParamKind::BiasIh => "bias_ih",
            ParamKind::BiasHh => "bias_hh",
            ParamKind::WeightHr => "weight_hr",
        }
    }
}

/// One canonical tensor: where it sits in the flat params vector and its shape.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ParamEntry {
    /// Layer index `l`.
    pub layer: usize,
    /// Direction: 0 forward, 1 reverse.
    pub direction: usize,
    /// Which tensor.
    pub kind: ParamKind,
    /// Shape: `[rows, cols]` for matrices, `[len]` for biases.
    pub shape: Vec<usize>,
    /// Offset in elements in the flat params vector.
    pub offset: usize,
}

impl ParamEntry {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    /// Whether the tensor has no elements (never, for a valid spec).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// PyTorch's parameter name, e.g. `weight_ih_l1_reverse`.
    pub fn name(&self) -> String {
        param_name(self.kind, self.layer, self.direction)
    }
}

/// PyTorch's name of a canonical tensor, e.g. `bias_hh_l0_reverse`.
pub fn param_name(kind: ParamKind, layer: usize, direction: usize) -> String {
    let suffix = if direction == 1 { "_reverse" } else { "" };
    format!("{}_l{layer}{suffix}", kind.stem())
}

/// The shape of `kind` in pseudo-layer (`layer`, any direction), or `None` when the spec has
/// no such tensor (see Note [RNN weight layout]).
pub fn param_shape(spec: &RnnSpec, layer: usize, kind: ParamKind) -> Option<Vec<usize>> {
    let gh = spec.mode.num_gates() * spec.d_hidden;
    let skip = spec.skip_input && layer == 0;
    match kind {
        ParamKind::WeightIh if !skip => Some(vec![gh, spec.layer_input_size(layer)]),
        ParamKind::WeightHh => Some(vec![gh, spec.d_state()]),
        ParamKind::BiasIh if spec.bias && !skip => Some(vec![gh]),
        ParamKind::BiasHh if spec.bias => Some(vec![gh]),
        ParamKind::WeightHr => spec.proj_size.map(|p| vec![p, spec.d_hidden]),
        _ => None,
    }
}

/// Offsets and shapes of every canonical tensor of a spec, in flat order.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RnnLayout {
    spec: RnnSpec,
    entries: Vec<ParamEntry>,
    size: usize,
}

impl RnnLayout {
    /// Lays out every tensor of `spec` (Note [RNN weight layout]).
    pub fn new(spec: RnnSpec) -> Self {
        let mut entries = Vec::new();
        let mut offset = 0;
        for layer in 0..spec.num_layers {
            for direction in 0..spec.num_directions() {
                for kind in ParamKind::ALL {
                    if let Some(shape) = param_shape(&spec, layer, kind) {
                        let entry = ParamEntry {
                            layer,
                            direction,
                            kind,
                            shape,
                            offset,
                        };
                        offset += entry.len();
                        entries.push(entry);
                    }
                }
            }
        }
        Self {
            spec,
            entries,
            size: offset,
        }
    }

    /// The spec this layout was made from.
    pub fn spec(&self) -> &RnnSpec {
        &self.spec
    }

    /// Total number of elements of the flat params vector (TF's `params_size`).
    pub fn params_size(&self) -> usize {
        self.size
    }

    /// Every tensor, in flat order.
    pub fn entries(&self) -> &[ParamEntry] {
        &self.entries
    }

    /// The entry of one tensor, or `None` when the spec has no such tensor.
    pub fn entry(&self, layer: usize, direction: usize, kind: ParamKind) -> Option<&ParamEntry> {
        self.entries
            .iter()
            .find(|e| e.layer == layer && e.direction == direction && e.kind == kind)
    }

    /// The entries of pseudo-layer `layer * D + direction`, in flat order.
    pub fn pseudo_layer(
        &self,
        layer: usize,
        direction: usize,
    ) -> impl Iterator<Item = &ParamEntry> {
        self.entries
            .iter()
            .filter(move |e| e.layer == layer && e.direction == direction)
    }

    /// Splits a flat params slice into `(entry, values)` pairs (TF's `params_to_canonical`
    /// on host data).
    ///
    /// # Panics
    ///
    /// If `params.len() != self.params_size()`.
    pub fn split<'a, T>(&'a self, params: &'a [T]) -> Vec<(&'a ParamEntry, &'a [T])> {
        assert_eq!(
            params.len(),
            self.size,
            "expected params of length params_size = {}, got {}",
            self.size,
            params.len()
        );
        self.entries
            .iter()
            .map(|e| (e, &params[e.offset..e.offset + e.len()]))
            .collect()
    }
}

/// Number of elements of the flat params vector of `spec` (TF's `params_size`).
pub fn params_size(spec: &RnnSpec) -> usize {
    RnnLayout::new(*spec).params_size()
}
