//! Packed weights kept across calls for step-by-step decoding.
//!
//! # Note [Packed weights across calls]
//!
//! A call packs each pseudo-layer's `[W_ih | W_hh]` once (Note [Packed weights] in
//! `super::packed`): negligible next to a sequence of steps, but a one-step call
//! (`PreparedRnn::step`, a decoder) would pack as many bytes as it then reads. So one-step
//! calls keep their packed weights in a small process-wide cache and reuse them while the
//! same weights come back:
//!
//! - **Key**: the address and length of the weights' elements (borrowed from the backend's
//!   tensor, never a copy), the element type, the SIMD level and the network.
//! - **Why an address is a safe key**: the entry keeps a clone of the weights tensor. Both
//!   host backends share a tensor's buffer between clones (reference counted) and write a
//!   buffer in place only when no other clone holds it, so while the entry lives its buffer
//!   can be neither freed (and its address reused for other data) nor changed: the same
//!   address and length mean the same values.
//! - **Bounds**: only calls with `seq_length = 1` use it (a longer call packs once and
//!   amortises it over its steps), and it holds at most [`ENTRIES`] networks, the least
//!   recently used dropped first, so it keeps at most that many weight tensors alive after
//!   their last use. A `PreparedRnn` keeps its flat weights for its whole life anyway, so for
//!   it the cache holds no extra copy of the weights, only their packed form.

use std::any::{Any, TypeId};
use std::sync::{Arc, Mutex};

use super::packed::{Lane, Packed};
use super::plan::Plan;
use super::simd::SimdLevel;
use crate::spec::RnnSpec;

/// Networks the cache holds at most.
pub(crate) const ENTRIES: usize = 4;

/// What identifies a set of packed weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Key {
    address: usize,
    len: usize,
    element: TypeId,
    level: SimdLevel,
    spec: RnnSpec,
    /// A forced reduction chunk (Note [Reduction chunks] in `super::packed`).
    k_chunk: Option<usize>,
}

struct Entry {
    key: Key,
    /// A clone of the weights tensor: keeps their buffer alive and unchanged.
    _weights: Box<dyn Any + Send + Sync>,
    /// `Arc<Vec<Packed<T>>>`, one per pseudo-layer.
    packed: Arc<dyn Any + Send + Sync>,
}

/// Most recently used last.
static CACHE: Mutex<Vec<Entry>> = Mutex::new(Vec::new());

/// Every pseudo-layer's `[W_ih | W_hh]` packed at the plan's level.
pub(crate) fn pack_all<T: Lane>(plan: &Plan<'_>, w: &[T]) -> Vec<Packed<T>> {
    let spec = &plan.spec;
    (0..spec.num_pseudo_layers())
        .map(|idx| {
            let (layer, d) = (idx / plan.nd, idx % plan.nd);
            let cw = plan.weights(w, layer, d);
            Packed::gates(
                plan.level,
                cw.w_ih.map(|m| (m, spec.layer_input_size(layer))),
                cw.w_hh,
                plan.g,
                plan.h,
                plan.p,
            )
            .blocked(plan.k_chunk)
        })
        .collect()
}

/// The packed weights of a one-step call whose weights `w` are borrowed from `tensor`:
/// from the cache, or packed now and cached (Note [Packed weights across calls]).
pub(crate) fn packed_for_step<T: Lane, W: Clone + Send + Sync + 'static>(
    plan: &Plan<'_>,
    w: &[T],
    tensor: &W,
) -> Arc<Vec<Packed<T>>> {
    let key = Key {
        address: w.as_ptr() as usize,
        len: w.len(),
        element: TypeId::of::<T>(),
        level: plan.level,
        spec: plan.spec,
        k_chunk: plan.k_chunk,
    };
    let mut cache = CACHE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(pos) = cache.iter().position(|e| e.key == key) {
        let entry = cache.remove(pos);
        let packed = Arc::clone(&entry.packed)
            .downcast::<Vec<Packed<T>>>()
            .expect("the key holds the element type");
        cache.push(entry);
        return packed;
    }
    let packed = Arc::new(pack_all(plan, w));
    if cache.len() == ENTRIES {
        cache.remove(0);
    }
    cache.push(Entry {
        key,
        _weights: Box::new(tensor.clone()),
        packed: packed.clone(),
    });
    packed
}

/// Entries in the cache.
pub(crate) fn cached() -> usize {
    CACHE.lock().map(|c| c.len()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::descriptor::{DropoutSpec, RnnDescriptor};
    use crate::spec::{RnnMode, RnnSpec};

    /// The same weights buffer gives the same packed weights; another buffer, even with
    /// equal values, its own; the oldest entry goes first.
    #[test]
    fn one_step_calls_share_packed_weights_of_the_same_buffer() {
        let spec = RnnSpec {
            num_layers: 2,
            ..RnnSpec::new(RnnMode::Gru, 3, 5)
        };
        let desc = RnnDescriptor::new(spec, 1, 2, true, None, DropoutSpec::NONE);
        let plan = Plan::new(&desc);
        let w: Arc<Vec<f64>> = Arc::new((0..desc.params_size()).map(|i| i as f64).collect());
        let first = packed_for_step(&plan, &w, &w);
        let again = packed_for_step(&plan, &w, &w);
        assert!(
            Arc::ptr_eq(&first, &again),
            "the same buffer hits the cache"
        );
        let copy: Arc<Vec<f64>> = Arc::new(w.to_vec());
        let other = packed_for_step(&plan, &copy, &copy);
        assert!(!Arc::ptr_eq(&first, &other), "another buffer packs its own");
        // Fill the cache with other buffers: the first entry is dropped, and its buffer
        // with it once nothing else holds it.
        let weak = Arc::downgrade(&w);
        drop((first, again));
        drop(w);
        assert!(
            weak.upgrade().is_some(),
            "the entry keeps its weights alive"
        );
        let others: Vec<Arc<Vec<f64>>> = (0..ENTRIES).map(|_| Arc::new(copy.to_vec())).collect();
        for o in &others {
            packed_for_step(&plan, o, o);
        }
        assert!(
            weak.upgrade().is_none(),
            "an evicted entry releases its weights"
        );
        assert!(cached() <= ENTRIES);
    }
}
