//! cuDNN's weight space against the canonical layout: verify, or plan a repack.
//!
//! # Note [Weight space verification]
//!
//! cuDNN owns the layout of its weight space; `cudnnGetRNNWeightParams` tells, for each
//! pseudo-layer and linear-layer id, where one gate's matrix and bias live. The canonical
//! flat layout (Note [RNN weight layout] in [`crate::layout`]) is PyTorch's, which matches
//! cuDNN's on every cuDNN PyTorch has shipped with, but that is never assumed:
//! [`plan`] compares every slot cuDNN reports with the canonical offset of the same gate.
//! - All equal and the same total size: [`WeightPlan::Identity`], the flat weights ARE the
//!   weight space.
//! - Otherwise [`WeightPlan::Repack`]: the weights are gathered into cuDNN's order before
//!   each call (slots cuDNN has and the canonical layout lacks stay zero), and the weight
//!   gradient is gathered back.
//! - A canonical tensor cuDNN has no slot for, or a slot of another size, is an error: the
//!   backend then runs the reference path instead of computing with wrong weights.
//!
//! Linear-layer ids (cuDNN): matrices `0..G` act on the input (`W`), `G..2G` on the
//! recurrent state (`R`), in the canonical gate order; LSTM's projection is id 8 and has
//! no bias. All offsets here are in elements; a byte offset that is not a whole element
//! is an error too.
//!
//! What is verified is each slot's position and element count, as PyTorch does
//! (`get_parameters` in its `RNN.cpp`); the orientation inside a matrix is cuDNN's
//! documented row-major `[out, in]`, PyTorch's too, and the GPU parity suite checks the
//! numbers that depend on it.

use burn::tensor::backend::Backend;
use burn::tensor::Tensor;

use crate::layout::{ParamKind, RnnLayout};
use crate::spec::RnnMode;

/// What `cudnnGetRNNWeightParams` reported for one linear-layer id of one pseudo-layer:
/// `(offset, len)` of its matrix and of its bias, in elements, `None` where cuDNN returned
/// a null address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WeightSlot {
    /// `layer * D + direction`.
    pub pseudo_layer: usize,
    /// cuDNN's linear-layer id.
    pub lin_id: usize,
    /// The matrix.
    pub matrix: Option<(usize, usize)>,
    /// The bias.
    pub bias: Option<(usize, usize)>,
}

/// One copy of a repack: `len` elements from canonical `from` to cuDNN's `to`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Copy {
    /// Canonical offset.
    pub from: usize,
    /// Offset in cuDNN's weight space.
    pub to: usize,
    /// Elements.
    pub len: usize,
}

/// How the canonical weights become cuDNN's weight space (Note [Weight space verification]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WeightPlan {
    /// Same layout: no copy.
    Identity,
    /// Gather: `copies` sorted by `to`, covering every canonical element once, into a
    /// weight space of `space_len` elements; copies adjacent on both sides are merged.
    Repack {
        /// The copies.
        copies: Vec<Copy>,
        /// Elements of cuDNN's weight space.
        space_len: usize,
    },
}

/// The linear-layer ids of one pseudo-layer and the canonical slot each one's matrix and
/// bias should occupy.
pub fn lin_ids(
    mode: RnnMode,
    has_projection: bool,
) -> Vec<(usize, ParamKind, Option<ParamKind>, usize)> {
    // (lin id, matrix kind, bias kind, gate index within the stacked tensor)
    let g = mode.num_gates();
    let mut ids = Vec::new();
    for gate in 0..g {
        ids.push((gate, ParamKind::WeightIh, Some(ParamKind::BiasIh), gate));
    }
    for gate in 0..g {
        ids.push((g + gate, ParamKind::WeightHh, Some(ParamKind::BiasHh), gate));
    }
    if has_projection {
        ids.push((8, ParamKind::WeightHr, None, 0));
    }
    ids
}

/// Compares cuDNN's reported slots with the canonical layout (Note [Weight space
/// verification]).
///
/// `space_len` is the weight space size in elements; `slots` must hold every linear-layer
/// id of [`lin_ids`] for every pseudo-layer.
pub fn plan(
    layout: &RnnLayout,
    slots: &[WeightSlot],
    space_len: usize,
) -> Result<WeightPlan, String> {
    let spec = layout.spec();
    let d = spec.num_directions();
    let h = spec.d_hidden;
    let mut copies = Vec::new();
    let mut identical = space_len == layout.params_size();
    let mut covered = 0usize;
    for pseudo in 0..spec.num_pseudo_layers() {
        let (layer, direction) = (pseudo / d, pseudo % d);
        for (lin_id, matrix_kind, bias_kind, gate) in lin_ids(spec.mode, spec.proj_size.is_some()) {
            let slot = slots
                .iter()
                .find(|s| s.pseudo_layer == pseudo && s.lin_id == lin_id)
                .ok_or_else(|| {
                    format!(
                        "cuDNN reported no slot for pseudo-layer {pseudo}, linear layer {lin_id}"
                    )
                })?;
            let mut check = |kind: ParamKind,
                             reported: Option<(usize, usize)>|
             -> Result<(), String> {
                let Some(entry) = layout.entry(layer, direction, kind) else {
                    // The canonical layout has no such tensor (skip input, no bias): cuDNN's
                    // slot, if any, stays zero.
                    if reported.is_some_and(|(_, len)| len > 0) {
                        identical = false;
                    }
                    return Ok(());
                };
                let len = match kind {
                    ParamKind::WeightHr => entry.len(),
                    ParamKind::BiasIh | ParamKind::BiasHh => h,
                    ParamKind::WeightIh | ParamKind::WeightHh => h * entry.shape[1],
                };
                let from = entry.offset + gate * len;
                let Some((to, got_len)) = reported else {
                    return Err(format!(
                        "cuDNN has no slot for {} (gate {gate}) of pseudo-layer {pseudo}",
                        entry.name()
                    ));
                };
                if got_len != len {
                    return Err(format!(
                        "expected cuDNN's slot for {} (gate {gate}) to hold {len} elements, got {got_len}",
                        entry.name()
                    ));
                }
                if to + len > space_len {
                    return Err(format!(
                        "cuDNN's slot for {} (gate {gate}) ends at {}, past its weight space of {space_len}",
                        entry.name(),
                        to + len
                    ));
                }
                identical &= to == from;
                covered += len;
                copies.push(Copy { from, to, len });
                Ok(())
            };
            check(matrix_kind, slot.matrix)?;
            if let Some(bias_kind) = bias_kind {
                check(bias_kind, slot.bias)?;
            }
        }
    }
    if covered != layout.params_size() {
        return Err(format!(
            "expected cuDNN's slots to cover all {} canonical weights, got {covered}",
            layout.params_size()
        ));
    }
    copies.sort_by_key(|c| c.to);
    if copies.windows(2).any(|w| w[0].to + w[0].len > w[1].to) {
        return Err("cuDNN's reported slots overlap".into());
    }
    if identical {
        return Ok(WeightPlan::Identity);
    }
    // Gates that stay next to each other on both sides move as one copy.
    let mut merged: Vec<Copy> = Vec::with_capacity(copies.len());
    for c in copies {
        match merged.last_mut() {
            Some(last) if last.from + last.len == c.from && last.to + last.len == c.to => {
                last.len += c.len
            }
            _ => merged.push(c),
        }
    }
    Ok(WeightPlan::Repack {
        copies: merged,
        space_len,
    })
}

/// The canonical flat weights as cuDNN's weight space (Note [Weight space verification]):
/// the same tensor for [`WeightPlan::Identity`], a gather with zero gaps for a repack.
pub(crate) fn to_weight_space<B: Backend>(plan: &WeightPlan, w: Tensor<B, 1>) -> Tensor<B, 1> {
    let WeightPlan::Repack { copies, space_len } = plan else {
        return w;
    };
    let (device, dtype) = (w.device(), w.dtype());
    let mut pieces = Vec::new();
    let mut at = 0;
    for c in copies {
        if c.to > at {
            pieces.push(Tensor::zeros([c.to - at], (&device, dtype)));
        }
        pieces.push(w.clone().narrow(0, c.from, c.len));
        at = c.to + c.len;
    }
    if *space_len > at {
        pieces.push(Tensor::zeros([space_len - at], (&device, dtype)));
    }
    Tensor::cat(pieces, 0)
}

/// cuDNN's weight-space gradient as the canonical flat gradient.
pub(crate) fn from_weight_space<B: Backend>(plan: &WeightPlan, dw: Tensor<B, 1>) -> Tensor<B, 1> {
    let WeightPlan::Repack { copies, .. } = plan else {
        return dw;
    };
    let mut by_canonical = copies.clone();
    by_canonical.sort_by_key(|c| c.from);
    Tensor::cat(
        by_canonical
            .iter()
            .map(|c| dw.clone().narrow(0, c.to, c.len))
            .collect(),
        0,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::FusedRnnConfig;
    use crate::spec::InputMode;

    /// The slots cuDNN would report for a weight space laid out exactly canonically.
    fn canonical_slots(layout: &RnnLayout) -> Vec<WeightSlot> {
        let spec = layout.spec();
        let d = spec.num_directions();
        let h = spec.d_hidden;
        let mut slots = Vec::new();
        for pseudo in 0..spec.num_pseudo_layers() {
            let (layer, direction) = (pseudo / d, pseudo % d);
            for (lin_id, mk, bk, gate) in lin_ids(spec.mode, spec.proj_size.is_some()) {
                let at = |kind: ParamKind, bias: bool| {
                    layout.entry(layer, direction, kind).map(|e| {
                        let len = if kind == ParamKind::WeightHr {
                            e.len()
                        } else if bias {
                            h
                        } else {
                            h * e.shape[1]
                        };
                        (e.offset + gate * len, len)
                    })
                };
                slots.push(WeightSlot {
                    pseudo_layer: pseudo,
                    lin_id,
                    matrix: at(mk, false),
                    bias: bk.and_then(|k| at(k, true)),
                });
            }
        }
        slots
    }

    fn layouts() -> Vec<RnnLayout> {
        [
            FusedRnnConfig::new(RnnMode::Lstm, 5, 4)
                .with_num_layers(2)
                .with_bidirectional(true)
                .with_proj_size(Some(3)),
            FusedRnnConfig::new(RnnMode::Gru, 4, 4)
                .with_num_layers(2)
                .with_input_mode(InputMode::Skip)
                .with_bias(false),
            FusedRnnConfig::new(RnnMode::RnnTanh, 3, 6).with_bidirectional(true),
        ]
        .iter()
        .map(|c| RnnLayout::new(c.spec()))
        .collect()
    }

    #[test]
    fn the_canonical_layout_is_the_identity_plan() {
        for layout in layouts() {
            let slots = canonical_slots(&layout);
            assert_eq!(
                plan(&layout, &slots, layout.params_size()),
                Ok(WeightPlan::Identity),
                "{:?}",
                layout.spec()
            );
        }
    }

    #[test]
    fn a_moved_slot_gives_a_repack_that_moves_exactly_it() {
        let layout = &layouts()[0];
        let mut slots = canonical_slots(layout);
        // Swap where two gates' recurrent matrices live, as a different cuDNN might.
        let (a, b) = (5, 6);
        let (ma, mb) = (slots[a].matrix, slots[b].matrix);
        slots[a].matrix = mb;
        slots[b].matrix = ma;
        let WeightPlan::Repack { copies, space_len } =
            plan(layout, &slots, layout.params_size()).unwrap()
        else {
            panic!("expected a repack");
        };
        assert_eq!(space_len, layout.params_size());
        let moved: Vec<&Copy> = copies.iter().filter(|c| c.from != c.to).collect();
        assert_eq!(moved.len(), 2, "{moved:?}");
        assert_eq!(
            copies.iter().map(|c| c.len).sum::<usize>(),
            layout.params_size()
        );
    }

    #[test]
    fn a_bigger_weight_space_with_extra_slots_repacks_with_gaps() {
        // Skip input without bias: give cuDNN input-bias slots the canonical layout lacks,
        // at the end of a bigger space.
        let layout = &layouts()[1];
        let mut slots = canonical_slots(layout);
        let mut end = layout.params_size();
        for s in slots.iter_mut().filter(|s| s.bias.is_none()) {
            s.bias = Some((end, 4));
            end += 4;
        }
        let WeightPlan::Repack { copies, space_len } = plan(layout, &slots, end).unwrap() else {
            panic!("expected a repack");
        };
        assert_eq!(space_len, end);
        // The canonical weights stay in place, as one copy.
        assert_eq!(
            copies,
            vec![Copy {
                from: 0,
                to: 0,
                len: layout.params_size()
            }]
        );
    }

    #[test]
    fn a_missing_or_wrong_sized_slot_is_an_error_naming_the_tensor() {
        let layout = &layouts()[2];
        let mut slots = canonical_slots(layout);
        slots[1].matrix = Some((slots[1].matrix.unwrap().0, 7));
        let err = plan(layout, &slots, layout.params_size()).unwrap_err();
        assert_eq!(
            err,
            "expected cuDNN's slot for weight_hh_l0 (gate 0) to hold 36 elements, got 7"
        );
        let mut slots = canonical_slots(layout);
        slots[0].bias = None;
        let err = plan(layout, &slots, layout.params_size()).unwrap_err();
        assert_eq!(
            err,
            "cuDNN has no slot for bias_ih_l0 (gate 0) of pseudo-layer 0"
        );
    }

    #[test]
    fn repack_round_trips_through_a_shuffled_weight_space() {
        use burn::backend::NdArray;
        let spec = FusedRnnConfig::new(RnnMode::Gru, 2, 2).spec();
        let n = crate::layout::params_size(&spec);
        // Canonical [0, 6) goes to [10, 16), [6, n) to [0, n - 6); [n - 6, 10) and
        // [16, 20) are gaps cuDNN would own.
        let plan = WeightPlan::Repack {
            copies: vec![
                Copy {
                    from: 6,
                    to: 0,
                    len: n - 6,
                },
                Copy {
                    from: 0,
                    to: n + 4,
                    len: 6,
                },
            ],
            space_len: n + 14,
        };
        let device = Default::default();
        let values: Vec<f32> = (0..n).map(|i| i as f32 + 1.0).collect();
        let w = Tensor::<NdArray, 1>::from_floats(values.as_slice(), &device);
        let space = to_weight_space(&plan, w);
        let got: Vec<f32> = space.clone().into_data().to_vec().unwrap();
        assert_eq!(got.len(), n + 14);
        assert_eq!(&got[..n - 6], &values[6..]);
        assert_eq!(&got[n - 6..n + 4], &vec![0.0; 10][..]);
        assert_eq!(&got[n + 4..n + 10], &values[..6]);
        assert_eq!(&got[n + 10..], &[0.0; 4]);
        let back: Vec<f32> = from_weight_space(&plan, space)
            .into_data()
            .to_vec()
            .unwrap();
        assert_eq!(back, values);
    }
}
