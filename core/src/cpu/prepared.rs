//! Packed weights kept across calls: step-by-step decoding and repeated inference.
//!
//! # Note [Packed weights across calls]
//!
//! A call packs each pseudo-layer's `[W_ih | W_hh]` once (Note [Packed weights] in
//! `super::packed`), a transpose of every weight: for a one-step call (`PreparedRnn::step`,
//! a decoder) as many bytes as the call then reads, and for a longer inference call still
//! a tenth of its time (LSTM H256 B32 T50 on 2 Zen 5 cores: about 0.4 ms of 4.7 before
//! this cache and the blocked transpose). Weights change between training steps but not
//! between inference calls, so one-step calls and inference calls keep their packed weights
//! in a small process-wide cache and reuse them while the same weights come back:
//!
//! - **What**: each pseudo-layer's weights packed for the scan the call will run: `[W_ih |
//!   W_hh]`, or `W_hh` alone and `W_ih` apart for the projection when the call projects
//!   that layer's input ahead (few rows per thread: Notes [Input projection] and
//!   [Projection through the packed kernel] in `super::projection`). The call and the cache
//!   make that choice with the same function (`forward::scan_shape`). The folded biases
//!   (`b_ih + b_hh`) come with them (`PackedScan`).
//! - **Key**: the address and length of the weights' elements (borrowed from the backend's
//!   tensor, never a copy), the element type, the SIMD level, the network, a forced
//!   reduction chunk, and the choice above (first layer, later layers).
//! - **Why an address is a safe key**: the entry keeps a clone of the weights tensor. Both
//!   host backends share a tensor's buffer between clones (reference counted) and write a
//!   buffer in place only when no other clone holds it, so while the entry lives its buffer
//!   can be neither freed (and its address reused for other data) nor changed: the same
//!   address and length mean the same values. The front-ends hand the kernel the same
//!   flat weights buffer for every inference call of an unchanged module (Note [Flat
//!   weights across calls] in each front-end's module).
//! - **Who uses it**: calls with `seq_length = 1` and every inference call (no reserve).
//!   A training forward of more than one step packs for itself: its weights are new at
//!   every optimizer step, and caching them would only keep dead weights alive.
//! - **Threads**: the cache's lock is held to look up and to insert, never while packing
//!   (packing may wait on rayon's pool, whose waiting thread may run another call that
//!   locks the cache); two calls that miss on the same weights at once both pack, and the
//!   second keeps the first one's entry.
//! - **Bounds**: at most [`ENTRIES`] networks, the least recently used dropped first, and
//!   besides the newest entry at most [`IDLE_BYTES`] of packed weights, so that the
//!   weights of a large model evaluated after every epoch (new buffers each time) do not
//!   pile up. An entry keeps its weights tensor alive until it is dropped;
//!   `release_reserves` empties the cache. A `PreparedRnn`, and a module whose flat
//!   weights are kept, hold their weights anyway, so the cache adds only the packed form.

use std::any::{Any, TypeId};
use std::sync::{Arc, Mutex};

use super::forward::scan_shape;
use super::packed::Lane;
use super::plan::{PackedScan, Plan};
use super::projection::{ForcedChunks, InputProjection};
use super::simd::SimdLevel;
use crate::spec::RnnSpec;

/// Networks the cache holds at most.
pub(crate) const ENTRIES: usize = 4;

/// Bytes of packed weights the cache keeps besides its newest entry, at most.
pub(crate) const IDLE_BYTES: usize = 256 << 20;

/// What identifies a set of packed weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Key {
    address: usize,
    len: usize,
    element: TypeId,
    level: SimdLevel,
    spec: RnnSpec,
    /// The chunk choices forced (Notes [Reduction chunks] and [Next chunk ahead] in
    /// `super::packed`).
    chunks: ForcedChunks,
    /// Whether the first layer, and the later ones, project their input ahead (`W_hh`
    /// packed alone; the later layers share one input size, hence one choice).
    ahead: [bool; 2],
}

struct Entry {
    key: Key,
    /// A clone of the weights tensor: keeps their buffer alive and unchanged.
    _weights: Box<dyn Any + Send + Sync>,
    /// `Arc<Vec<PackedScan<T>>>`, one per pseudo-layer.
    packed: Arc<dyn Any + Send + Sync>,
    /// Bytes of the packed weights.
    bytes: usize,
}

/// Most recently used last.
static CACHE: Mutex<Vec<Entry>> = Mutex::new(Vec::new());

/// Whether the call `plan` projects the input of `layer` ahead (Note [Input projection] in
/// `super::projection`), which packs `W_hh` alone and `W_ih` apart.
fn ahead<T>(plan: &Plan<'_>, w: &[T], layer: usize) -> bool {
    let skip = plan.weights(w, layer, 0).w_ih.is_none();
    let in_size = plan.spec.layer_input_size(layer);
    scan_shape(plan, in_size, skip, size_of::<T>()).1 == InputProjection::Ahead
}

/// Every pseudo-layer's weights packed at the plan's level for what its scan reads:
/// `[W_ih | W_hh]`, or `W_hh` alone when the call projects that layer's input ahead.
pub(crate) fn pack_all<T: Lane>(plan: &Plan<'_>, w: &[T]) -> Vec<PackedScan<T>> {
    let spec = &plan.spec;
    (0..spec.num_pseudo_layers())
        .map(|idx| {
            let (layer, d) = (idx / plan.nd, idx % plan.nd);
            let cw = plan.weights(w, layer, d);
            plan.pack_scan(&cw, spec.layer_input_size(layer), ahead(plan, w, layer))
        })
        .collect()
}

/// The packed weights of a one-step or inference call whose weights `w` are borrowed from
/// `tensor`: from the cache, or packed now and cached (Note [Packed weights across calls]).
pub(crate) fn packed_for_call<T: Lane, W: Clone + Send + Sync + 'static>(
    plan: &Plan<'_>,
    w: &[T],
    tensor: &W,
) -> Arc<Vec<PackedScan<T>>> {
    let key = Key {
        address: w.as_ptr() as usize,
        len: w.len(),
        element: TypeId::of::<T>(),
        level: plan.level,
        spec: plan.spec,
        chunks: plan.chunks,
        ahead: [
            ahead(plan, w, 0),
            plan.spec.num_layers > 1 && ahead(plan, w, 1),
        ],
    };
    let hit = |cache: &mut Vec<Entry>| -> Option<Arc<Vec<PackedScan<T>>>> {
        let pos = cache.iter().position(|e| e.key == key)?;
        let entry = cache.remove(pos);
        let packed = Arc::clone(&entry.packed)
            .downcast::<Vec<PackedScan<T>>>()
            .expect("the key holds the element type");
        cache.push(entry);
        Some(packed)
    };
    if let Some(packed) = hit(&mut lock()) {
        return packed;
    }
    // Packed without the lock: packing may wait on rayon's pool, and a waiting thread of
    // the pool may run another call meanwhile, which would lock the cache again on the
    // same thread.
    let packed = Arc::new(pack_all(plan, w));
    let mut cache = lock();
    if let Some(theirs) = hit(&mut cache) {
        return theirs; // another call packed the same weights meanwhile
    }
    let bytes = packed.iter().map(PackedScan::bytes).sum();
    cache.push(Entry {
        key,
        _weights: Box::new(tensor.clone()),
        packed: packed.clone(),
        bytes,
    });
    evict(&mut cache, ENTRIES, IDLE_BYTES);
    packed
}

/// Drops the oldest entries while there are more than `entries`, or while the entries
/// before the newest hold more than `idle_bytes` (the newest always stays).
fn evict(cache: &mut Vec<Entry>, entries: usize, idle_bytes: usize) {
    let idle = |cache: &[Entry]| -> usize {
        cache[..cache.len().saturating_sub(1)]
            .iter()
            .map(|e| e.bytes)
            .sum()
    };
    while cache.len() > entries || (cache.len() > 1 && idle(cache) > idle_bytes) {
        cache.remove(0);
    }
}

fn lock() -> std::sync::MutexGuard<'static, Vec<Entry>> {
    CACHE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Empties the cache, dropping every kept weights tensor.
pub(crate) fn clear() {
    lock().clear();
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
        let first = packed_for_call(&plan, &w, &w);
        let again = packed_for_call(&plan, &w, &w);
        assert!(
            Arc::ptr_eq(&first, &again),
            "the same buffer hits the cache"
        );
        let copy: Arc<Vec<f64>> = Arc::new(w.to_vec());
        let other = packed_for_call(&plan, &copy, &copy);
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
            packed_for_call(&plan, o, o);
        }
        assert!(
            weak.upgrade().is_none(),
            "an evicted entry releases its weights"
        );
        assert!(cached() <= ENTRIES);
    }

    /// The bounds: at most `entries` networks, and besides the newest at most `idle_bytes`;
    /// a newest entry larger than the bound stays.
    #[test]
    fn eviction_keeps_the_newest_and_bounds_the_rest() {
        let entry = |address: usize, bytes: usize| Entry {
            key: Key {
                address,
                len: 1,
                element: TypeId::of::<f32>(),
                level: SimdLevel::Portable,
                spec: RnnSpec::new(RnnMode::Gru, 1, 1),
                chunks: ForcedChunks::default(),
                ahead: [false; 2],
            },
            _weights: Box::new(()),
            packed: Arc::new(()),
            bytes,
        };
        let addresses = |cache: &[Entry]| cache.iter().map(|e| e.key.address).collect::<Vec<_>>();
        let mut cache: Vec<Entry> = (0..3).map(|a| entry(a, 100)).collect();
        evict(&mut cache, 4, 250);
        assert_eq!(addresses(&cache), [0, 1, 2], "within both bounds");
        cache.push(entry(3, 100));
        evict(&mut cache, 4, 250);
        assert_eq!(
            addresses(&cache),
            [1, 2, 3],
            "300 idle bytes: the oldest goes"
        );
        cache.push(entry(4, 1000));
        evict(&mut cache, 4, 250);
        assert_eq!(addresses(&cache), [2, 3, 4], "a large newest entry stays");
        cache.push(entry(5, 10));
        evict(&mut cache, 4, 250);
        assert_eq!(
            addresses(&cache),
            [5],
            "the large entry is idle now: it and older go"
        );
        for a in 6..12 {
            cache.push(entry(a, 1));
            evict(&mut cache, 4, 250);
        }
        assert_eq!(addresses(&cache), [8, 9, 10, 11], "at most 4 networks");
    }
}
