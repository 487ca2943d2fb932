//! A value built from tensor buffers, kept while the same buffers come back: the front-ends'
//! memo of a module's flat weights.
//!
//! # Note [Flat weights across calls]
//!
//! A forward concatenates a module's canonical parameters into the op's flat weight vector
//! (10 MB for a 2-layer bidirectional LSTM at H256: a copy and, from a fresh allocation, its
//! page faults, at every call). When every parameter is an untracked tensor of a native CPU
//! backend (NdArray, Flex) whose elements lie in one buffer, the module keeps the last
//! vector in a [`BufferMemo`], with the identities (address, length) of the buffers it came
//! from and clones of those parameters, and hands the same vector to the next call whose
//! parameters have the same identities:
//!
//! - **Why an identity is a safe key**: while the clones live, a buffer can be neither
//!   freed (so its address cannot be reused for other data) nor written in place (both
//!   backends copy a buffer that has more than one handle before writing it), so the same
//!   identities mean the same values.
//! - **What it buys**: the kernel then also finds its packed weights again (Note [Packed
//!   weights across calls] in `cpu`, keyed by the flat vector's buffer), so a module's
//!   inference calls pack once, and a `forward` with `seq_length = 1` (a decoder written
//!   with `forward`, or with the drop-in layers) costs about what a prepared step costs.
//! - **When it does not apply**: a tracked parameter (training), or one on another device,
//!   has no identity; such calls concatenate every time, and under autodiff the
//!   concatenation is tracked.
//! - **Cost and lifetime**: one copy of the weights per module. Loading other weights,
//!   mapping the parameters or an optimizer step gives new buffers and so a new vector; a
//!   clone of the memo (of the module) starts empty.
//!
//! The front-end supplies the identities (its backend's buffer address and length) and the
//! concatenation; this type holds the rule, so both front-ends share it.

use std::sync::Mutex;

/// A value built from buffers with the given identities, and what keeps those buffers
/// alive, reused while a call comes with the same identities (Note [Flat weights across
/// calls]). Cloning gives an empty memo.
pub struct BufferMemo<K, V> {
    kept: Mutex<Option<Kept<K, V>>>,
}

struct Kept<K, V> {
    ids: Vec<(usize, usize)>,
    _keep: K,
    value: V,
}

impl<K, V: Clone> BufferMemo<K, V> {
    /// The kept value when it was built from buffers with identities `ids`; else
    /// `build()`, kept with `ids` and `keep` (handles that keep those buffers alive and
    /// unshared writes impossible) in place of the last one.
    ///
    /// `build` runs without the lock held: it may run tensor ops that wait on rayon's pool,
    /// and a thread of the pool that waits may run another task meanwhile, possibly a call
    /// of the same module, which would then lock the memo again on the same thread. Two
    /// calls that miss at once both build; the last one's value is kept.
    pub fn get_or_build(&self, ids: Vec<(usize, usize)>, keep: K, build: impl FnOnce() -> V) -> V {
        if let Some(k) = self.lock().as_ref().filter(|k| k.ids == ids) {
            return k.value.clone();
        }
        let value = build();
        *self.lock() = Some(Kept {
            ids,
            _keep: keep,
            value: value.clone(),
        });
        value
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Kept<K, V>>> {
        self.kept
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Whether a value is kept.
    pub fn is_kept(&self) -> bool {
        self.kept.lock().is_ok_and(|k| k.is_some())
    }
}

impl<K, V> Default for BufferMemo<K, V> {
    fn default() -> Self {
        Self {
            kept: Mutex::new(None),
        }
    }
}

impl<K, V> Clone for BufferMemo<K, V> {
    /// An empty memo: a clone of a module builds its own.
    fn clone(&self) -> Self {
        Self::default()
    }
}

impl<K, V> std::fmt::Debug for BufferMemo<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kept = self.kept.lock().is_ok_and(|k| k.is_some());
        f.debug_struct("BufferMemo").field("kept", &kept).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// The same identities give the kept value without building; other identities build
    /// and replace it (releasing what the old entry kept); a clone starts empty.
    #[test]
    fn the_same_identities_reuse_and_others_rebuild() {
        let memo: BufferMemo<Arc<Vec<f32>>, u32> = BufferMemo::default();
        assert!(!memo.is_kept());
        let first = Arc::new(vec![1.0f32; 4]);
        let id = |v: &Arc<Vec<f32>>| vec![(v.as_ptr() as usize, v.len())];
        let builds = std::cell::Cell::new(0);
        let build = |value| {
            builds.set(builds.get() + 1);
            value
        };
        assert_eq!(memo.get_or_build(id(&first), first.clone(), || build(7)), 7);
        assert_eq!(memo.get_or_build(id(&first), first.clone(), || build(8)), 7);
        assert_eq!(builds.get(), 1, "the same identities build once");
        let weak = Arc::downgrade(&first);
        let second = Arc::new(vec![1.0f32; 4]);
        assert_eq!(
            memo.get_or_build(id(&second), second.clone(), || build(9)),
            9
        );
        assert_eq!(builds.get(), 2, "other identities build");
        drop(first);
        assert!(
            weak.upgrade().is_none(),
            "the replaced entry released its buffer"
        );
        let copy = memo.clone();
        assert!(memo.is_kept() && !copy.is_kept(), "a clone starts empty");
        assert_eq!(format!("{copy:?}"), "BufferMemo { kept: false }");
    }
}
