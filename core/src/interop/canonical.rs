//! What the conversions share: canonical tensors collected from some format and checked
//! into the flat weights of a layout, and the canonical tensors of flat weights read back
//! for export.

use std::collections::BTreeMap;

use super::{HostTensor, InteropError};
use crate::layout::{param_name, ParamKind, RnnLayout};
use crate::spec::{RnnMode, RnnSpec};

/// Names a canonical tensor in the source format, for errors about tensors that are absent.
pub(crate) type Naming<'a> = Box<dyn Fn(usize, usize, ParamKind) -> String + 'a>;

/// A converted module: what to build it from.
#[derive(Clone, Debug, PartialEq)]
pub struct Imported {
    /// Its network (no projection, linear input).
    pub spec: RnnSpec,
    /// Whether its inputs are `[batch, seq, features]` (the format's layout).
    pub batch_first: bool,
    /// Its canonical weights, flat in the layout's order
    /// ([`RnnLayout::entries`](crate::layout::RnnLayout::entries)), each checked finite.
    pub params: Vec<f64>,
}

/// Canonical tensors by `(layer, direction, kind)`, each with the key it came from.
pub(crate) struct Canonical<'a> {
    mode: RnnMode,
    entries: BTreeMap<(usize, usize, ParamKind), (String, HostTensor)>,
    naming: Naming<'a>,
}

impl<'a> Canonical<'a> {
    /// An empty set for `mode`; `naming` names absent tensors in errors.
    pub(crate) fn new(mode: RnnMode, naming: Naming<'a>) -> Self {
        Self {
            mode,
            entries: BTreeMap::new(),
            naming,
        }
    }

    /// Adds the tensor of `slot`.
    pub(crate) fn insert(&mut self, slot: (usize, usize, ParamKind), key: String, t: HostTensor) {
        self.entries.insert(slot, (key, t));
    }

    /// The module of `spec` holding these tensors, each checked against the layout:
    /// [`InteropError::Missing`], then [`InteropError::Shape`], then
    /// [`InteropError::Unexpected`], then [`InteropError::NotFinite`].
    pub(crate) fn build(self, spec: RnnSpec, batch_first: bool) -> Result<Imported, InteropError> {
        assert_eq!(
            spec.mode, self.mode,
            "the tensors were read for another mode"
        );
        if spec.d_input == 0 || spec.d_hidden == 0 || spec.num_layers == 0 {
            return Err(InteropError::unsupported(
                "configuration",
                spec,
                "expected an input size, a hidden size and layers of at least 1",
            ));
        }
        let layout = RnnLayout::try_new(spec)
            .map_err(|why| InteropError::unsupported("configuration", spec, why))?;
        let mut entries = self.entries;
        let mut params = Vec::with_capacity(layout.params_size());
        for e in layout.entries() {
            match entries.remove(&(e.layer, e.direction, e.kind)) {
                None => {
                    return Err(InteropError::Missing {
                        key: (self.naming)(e.layer, e.direction, e.kind),
                        expected: Some(e.shape.clone()),
                        context: String::new(),
                    })
                }
                Some((key, t)) if t.shape != e.shape => {
                    return Err(InteropError::Shape {
                        key,
                        expected: e.shape.clone(),
                        got: t.shape,
                        context: String::new(),
                    })
                }
                Some((key, t)) => {
                    check_finite(&key, &t)?;
                    params.extend_from_slice(&t.values);
                }
            }
        }
        if let Some(((layer, direction, kind), (key, t))) = entries.into_iter().next() {
            let why = if layer >= spec.num_layers {
                format!("the configuration has {} layer(s)", spec.num_layers)
            } else if direction >= spec.num_directions() {
                "the configuration is unidirectional".to_string()
            } else {
                "the configuration has no bias".to_string()
            };
            return Err(InteropError::Unexpected {
                key,
                shape: t.shape,
                context: format!("{} = {why}", param_name(kind, layer, direction)),
            });
        }
        Ok(Imported {
            spec,
            batch_first,
            params,
        })
    }
}

/// Refuses a tensor holding a NaN or an infinity, naming `key` and the element's index.
pub(crate) fn check_finite(key: &str, t: &HostTensor) -> Result<(), InteropError> {
    match t.values.iter().position(|v| !v.is_finite()) {
        None => Ok(()),
        Some(flat) => {
            let mut index = vec![0; t.shape.len()];
            let mut rest = flat;
            for (i, &d) in t.shape.iter().enumerate().rev() {
                index[i] = rest % d;
                rest /= d;
            }
            Err(InteropError::NotFinite {
                key: key.to_string(),
                index,
                value: t.values[flat],
            })
        }
    }
}

/// Checks that `got` is `expected` (`0` in `expected` matches any size).
pub(crate) fn check_shape(
    key: &str,
    expected: &[usize],
    got: &[usize],
) -> Result<(), InteropError> {
    let fits =
        expected.len() == got.len() && expected.iter().zip(got).all(|(&e, &g)| e == 0 || e == g);
    if fits {
        Ok(())
    } else {
        let filled: Vec<usize> = expected
            .iter()
            .zip(got.iter().chain(std::iter::repeat(&0)))
            .map(|(&e, &g)| if e == 0 { g } else { e })
            .collect();
        Err(InteropError::shape(key, &filled, got))
    }
}

/// The canonical tensors of one pseudo-layer of flat weights without projection (every
/// export target but PyTorch refuses one), with skip input written out as what it
/// computes: `W_ih` = `G` stacked identities, `b_ih` = 0.
pub struct CellWeights {
    /// `[G*H, in_l]`.
    pub weight_ih: HostTensor,
    /// `[G*H, H]`.
    pub weight_hh: HostTensor,
    /// `[G*H]`.
    pub bias_ih: Option<HostTensor>,
    /// `[G*H]`.
    pub bias_hh: Option<HostTensor>,
}

/// The weights of pseudo-layer `layer * D + direction` of `flat`, the flat weights of
/// `spec` in the layout's order.
///
/// # Panics
///
/// If `flat` does not have the layout's size, or `spec` is invalid.
pub fn cell_weights(spec: &RnnSpec, flat: &[f64], layer: usize, direction: usize) -> CellWeights {
    let layout = RnnLayout::new(*spec);
    assert_eq!(
        flat.len(),
        layout.params_size(),
        "expected flat weights of the layout's size"
    );
    let get = |kind| {
        layout
            .entry(layer, direction, kind)
            .map(|e| HostTensor::new(e.shape.clone(), flat[e.offset..e.offset + e.len()].to_vec()))
    };
    let (g, h) = (spec.mode.num_gates(), spec.d_hidden);
    let weight_ih = get(ParamKind::WeightIh).unwrap_or_else(|| {
        let mut eye = HostTensor::zeros(vec![g * h, h]);
        for r in 0..g * h {
            eye.values[r * h + r % h] = 1.0;
        }
        eye
    });
    let bias_hh = get(ParamKind::BiasHh);
    let bias_ih =
        get(ParamKind::BiasIh).or_else(|| bias_hh.as_ref().map(|_| HostTensor::zeros(vec![g * h])));
    CellWeights {
        weight_ih,
        weight_hh: get(ParamKind::WeightHh).expect("every pseudo-layer has W_hh"),
        bias_ih,
        bias_hh,
    }
}

/// The error for weight `flat_index` of the flat weights of `spec` (in the layout's order),
/// `value` once converted to the module's dtype (named `dtype`), when that conversion made
/// it infinite: the canonical tensor holding it is named.
///
/// # Panics
///
/// If `flat_index` is past the layout's size.
pub fn out_of_range(spec: &RnnSpec, flat_index: usize, value: f64, dtype: &str) -> InteropError {
    let layout = RnnLayout::new(*spec);
    let e = layout
        .entries()
        .iter()
        .find(|e| (e.offset..e.offset + e.len()).contains(&flat_index))
        .expect("the layout covers the flat weights");
    InteropError::unsupported(
        e.name(),
        value,
        format!("expected weights that fit {dtype}: a weight is out of its range"),
    )
}

/// Refuses to export the module of `spec` as layers of burn-nn's type `target`, which runs
/// `target_mode` (`RnnTanh` for burn-nn's `Rnn`, which also runs `RnnRelu`) in one
/// direction or both (`target_bidirectional`) and has no projection.
///
/// # Errors
///
/// [`InteropError::Unsupported`] naming `mode`, `bidirectional` or `proj_size`.
pub fn check_burn_nn_target(
    spec: &RnnSpec,
    target: &str,
    target_mode: RnnMode,
    target_bidirectional: bool,
) -> Result<(), InteropError> {
    let fits_mode = match target_mode {
        RnnMode::RnnTanh => matches!(spec.mode, RnnMode::RnnTanh | RnnMode::RnnRelu),
        m => m == spec.mode,
    };
    if !fits_mode {
        return Err(InteropError::unsupported(
            "mode",
            spec.mode,
            format!("a burn-nn {target} runs {}", target_mode.name()),
        ));
    }
    if spec.bidirectional != target_bidirectional {
        let other = if spec.bidirectional {
            "a Bi* type"
        } else {
            "the type without Bi"
        };
        return Err(InteropError::unsupported(
            "bidirectional",
            spec.bidirectional,
            format!("a burn-nn {target} is not; use {other}"),
        ));
    }
    if let Some(p) = spec.proj_size {
        return Err(InteropError::unsupported(
            "proj_size",
            Some(p),
            "burn-nn's layers have no projection",
        ));
    }
    Ok(())
}
