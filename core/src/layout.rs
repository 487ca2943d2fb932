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

use crate::spec::RnnSpec;

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
///
/// # Panics
///
/// If a dimension overflows `usize` (see [`RnnLayout::new`]).
pub fn param_shape(spec: &RnnSpec, layer: usize, kind: ParamKind) -> Option<Vec<usize>> {
    try_param_shape(spec, layer, kind).unwrap_or_else(|msg| panic!("{msg}"))
}

/// [`param_shape`], or the message naming the size that overflows `usize`.
fn try_param_shape(
    spec: &RnnSpec,
    layer: usize,
    kind: ParamKind,
) -> Result<Option<Vec<usize>>, String> {
    let gh = spec
        .mode
        .num_gates()
        .checked_mul(spec.d_hidden)
        .ok_or_else(|| {
            overflow(format!(
                "G * d_hidden = {} * {}",
                spec.mode.num_gates(),
                spec.d_hidden
            ))
        })?;
    let in_l = if layer == 0 {
        spec.d_input
    } else {
        spec.num_directions()
            .checked_mul(spec.d_state())
            .ok_or_else(|| {
                overflow(format!(
                    "D * P = {} * {} (the input size of layer {layer})",
                    spec.num_directions(),
                    spec.d_state()
                ))
            })?
    };
    let skip = spec.skip_input && layer == 0;
    Ok(match kind {
        ParamKind::WeightIh if !skip => Some(vec![gh, in_l]),
        ParamKind::WeightHh => Some(vec![gh, spec.d_state()]),
        ParamKind::BiasIh if spec.bias && !skip => Some(vec![gh]),
        ParamKind::BiasHh if spec.bias => Some(vec![gh]),
        ParamKind::WeightHr => spec.proj_size.map(|p| vec![p, spec.d_hidden]),
        _ => None,
    })
}

/// Checks that every size derived from `spec` fits in `usize`: the output features
/// `D * P`, every tensor's dimensions and length, and `params_size`.
///
/// # Errors
///
/// The message naming the first size that overflows.
pub fn check_sizes(spec: &RnnSpec) -> Result<(), String> {
    spec.num_directions()
        .checked_mul(spec.d_state())
        .ok_or_else(|| {
            overflow(format!(
                "the output features D * P = {} * {}",
                spec.num_directions(),
                spec.d_state()
            ))
        })?;
    checked_params_size(spec).map(|_| ())
}

/// `params_size` in closed form, with checked arithmetic: every layer above the first has
/// the same tensors, so the check costs two layers, whatever `num_layers` is.
fn checked_params_size(spec: &RnnSpec) -> Result<usize, String> {
    let layer_len = |layer| -> Result<usize, String> {
        let mut total: usize = 0;
        for kind in ParamKind::ALL {
            if let Some(shape) = try_param_shape(spec, layer, kind)? {
                let len = shape
                    .iter()
                    .try_fold(1usize, |n, &d| n.checked_mul(d))
                    .ok_or_else(|| {
                        overflow(format!(
                            "the length of {} of shape {shape:?}",
                            param_name(kind, layer, 0)
                        ))
                    })?;
                total = total.checked_add(len).ok_or_else(|| {
                    overflow(format!("params_size (the tensors of layer {layer})"))
                })?;
            }
        }
        Ok(total)
    };
    if spec.num_layers == 0 {
        return Ok(0);
    }
    let first = layer_len(0)?;
    let later = if spec.num_layers > 1 {
        layer_len(1)?
    } else {
        0
    };
    let (d, l) = (spec.num_directions(), spec.num_layers);
    later
        .checked_mul(l - 1)
        .and_then(|rest| rest.checked_add(first))
        .and_then(|per_direction| per_direction.checked_mul(d))
        .ok_or_else(|| {
            overflow(format!(
                "params_size = D * (layer 0 + (num_layers - 1) * layer 1) = {d} * ({first} + {} * {later})",
                l - 1
            ))
        })
}

/// `params_size` of a spec whose sizes [`check_sizes`] accepted, in closed form (without
/// building the table of every tensor).
///
/// # Panics
///
/// If a size overflows `usize`.
pub fn params_size_closed_form(spec: &RnnSpec) -> usize {
    checked_params_size(spec).unwrap_or_else(|msg| panic!("{msg}"))
}

/// The message for a size of the network that does not fit in `usize`.
fn overflow(what: String) -> String {
    format!(
        "expected the network's sizes (d_input, d_hidden, proj_size, num_layers) to fit in usize, got an overflow in {what}"
    )
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
    ///
    /// # Panics
    ///
    /// If a size (a dimension, a tensor's length, an offset or `params_size`) overflows
    /// `usize`, with a message naming it; the front-end's `FusedRnnConfig::spec`
    /// refuses such configurations first.
    pub fn new(spec: RnnSpec) -> Self {
        Self::try_new(spec).unwrap_or_else(|msg| panic!("{msg}"))
    }

    /// [`RnnLayout::new`], or the message naming the size that overflows `usize`.
    pub fn try_new(spec: RnnSpec) -> Result<Self, String> {
        // Fails fast (two layers' work) before the loop below walks every layer.
        checked_params_size(&spec)?;
        // The table has one entry per tensor: reserve it first, so that an absurd
        // `num_layers` is an error rather than an abort (Note [Allocation checks]).
        let count = spec
            .num_pseudo_layers()
            .checked_mul(ParamKind::ALL.len())
            .ok_or_else(|| {
                overflow(format!(
                    "the number of tensors, num_layers = {}",
                    spec.num_layers
                ))
            })?;
        let mut entries = Vec::new();
        crate::host::try_reserve(&mut entries, count).map_err(|reason| {
            format!(
                "expected num_layers small enough to lay out every tensor, got num_layers = {} \
                 (a table of {count} entries, {reason})",
                spec.num_layers
            )
        })?;
        let mut offset: usize = 0;
        for layer in 0..spec.num_layers {
            for direction in 0..spec.num_directions() {
                for kind in ParamKind::ALL {
                    if let Some(shape) = try_param_shape(&spec, layer, kind)? {
                        // Named only in an error: a call's layout formats nothing.
                        let name = || param_name(kind, layer, direction);
                        let len = shape
                            .iter()
                            .try_fold(1usize, |n, &d| n.checked_mul(d))
                            .ok_or_else(|| {
                                overflow(format!("the length of {} of shape {shape:?}", name()))
                            })?;
                        let next = offset.checked_add(len).ok_or_else(|| {
                            overflow(format!(
                                "params_size (adding {} of shape {shape:?})",
                                name()
                            ))
                        })?;
                        entries.push(ParamEntry {
                            layer,
                            direction,
                            kind,
                            shape,
                            offset,
                        });
                        offset = next;
                    }
                }
            }
        }
        Ok(Self {
            spec,
            entries,
            size: offset,
        })
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
        assert!(
            params.len() == self.size,
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
///
/// # Panics
///
/// If it overflows `usize` (see [`RnnLayout::new`]).
pub fn params_size(spec: &RnnSpec) -> usize {
    // The closed form, not the table: every call checks its weights' length against this,
    // and building the table (one entry per tensor) cost a one-step call about 2%.
    params_size_closed_form(spec)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::RnnMode;

    /// The closed form `params_size` (two layers' tensors, then arithmetic) against the
    /// table of every tensor, and the table's offsets against its lengths.
    #[test]
    fn params_size_in_closed_form_matches_the_table_of_every_tensor() {
        let modes = [
            RnnMode::Lstm,
            RnnMode::Gru,
            RnnMode::RnnTanh,
            RnnMode::RnnRelu,
        ];
        for mode in modes {
            for layers in 0..4 {
                for bidirectional in [false, true] {
                    for bias in [false, true] {
                        for skip_input in [false, true] {
                            let projections = match mode {
                                RnnMode::Lstm => vec![None, Some(3)],
                                _ => vec![None],
                            };
                            for proj_size in projections {
                                let spec = RnnSpec {
                                    num_layers: layers,
                                    bidirectional,
                                    bias,
                                    skip_input,
                                    proj_size,
                                    // skip input needs d_input == d_hidden
                                    ..RnnSpec::new(mode, if skip_input { 5 } else { 7 }, 5)
                                };
                                let table = RnnLayout::new(spec);
                                let mut offset = 0;
                                for e in table.entries() {
                                    assert_eq!(e.offset, offset, "{spec:?}: {e:?}");
                                    offset += e.len();
                                }
                                assert_eq!(table.params_size(), offset, "{spec:?}");
                                assert_eq!(params_size(&spec), offset, "{spec:?}");
                            }
                        }
                    }
                }
            }
        }
    }
}
