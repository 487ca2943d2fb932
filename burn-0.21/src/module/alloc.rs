//! Sizes checked before anything is allocated.
//!
//! # Note [Allocation checks]
//!
//! A network or a call too large for the machine must be an error naming the size at fault,
//! never an abort of the process ("memory allocation of N bytes failed") or a size that
//! wraps around. Three checks run before any allocation:
//!
//! - **Overflow, every backend.** Every size derived from a configuration uses checked
//!   arithmetic ([`FusedRnnConfig::spec`](crate::FusedRnnConfig::spec),
//!   [`crate::layout`]); so do the byte counts of the parameters (at `init`) and of a call's
//!   output and final states (at every `forward`).
//! - **The host allocator, NdArray and Flex.** On these backends the parameters and every
//!   per-call buffer live in host memory. Before `init` creates the parameters, and before
//!   a call whose output, states and (in training) reserve exceed 1 GiB, the total is
//!   compared with the machine's memory and then asked of the allocator once with
//!   `try_reserve_exact` and given back at once (never touched): Note [Host memory
//!   ceiling] in `host.rs`, which is why both. A refusal panics, naming the fields. Below
//!   1 GiB the probe is skipped: it would cost a system call per step of a decoding loop.
//! - **Host-side bookkeeping, every backend.** The layout table and the list of cells grow
//!   with `num_layers`; their sizes go through the same probe before they are reserved,
//!   so an absurd `num_layers` panics naming it on GPU backends too.
//!
//! On other backends (Wgpu, CUDA) the device's allocator, which this crate does not see,
//! has the last word.

use core::any::TypeId;

use burn::tensor::backend::Backend;

use crate::host;
use crate::spec::RnnSpec;

/// Calls whose buffers total less than this are not probed (Note [Allocation checks]).
const PROBE_THRESHOLD: usize = 1 << 30;

/// Whether `B` keeps its tensors in host memory that this crate's CPU kernel allocates
/// (NdArray, Flex, and `Autodiff` over either: they share the inner backend's device).
pub(crate) fn is_host_backend<B: Backend>() -> bool {
    let device = TypeId::of::<B::Device>();
    #[cfg(feature = "ndarray")]
    if device == TypeId::of::<burn::backend::ndarray::NdArrayDevice>() {
        return true;
    }
    #[cfg(feature = "flex")]
    if device == TypeId::of::<burn::backend::flex::FlexDevice>() {
        return true;
    }
    let _ = device;
    false
}

/// `a * b`, or `None` on overflow.
fn mul(parts: &[usize]) -> Option<usize> {
    parts.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))
}

/// The fields of a spec, as error messages name them.
fn fields(spec: &RnnSpec) -> String {
    format!(
        "mode = {}, d_input = {}, d_hidden = {}, num_layers = {}, bidirectional = {}{}",
        spec.mode.name(),
        spec.d_input,
        spec.d_hidden,
        spec.num_layers,
        spec.bidirectional,
        spec.proj_size
            .map_or(String::new(), |p| format!(", proj_size = {p}")),
    )
}

/// Checks that the parameters of `spec` (`params_size` elements of `elem_bytes` bytes)
/// can be allocated on backend `B` (Note [Allocation checks]).
///
/// # Panics
///
/// Naming the configuration's fields, when the byte count overflows `usize` or the host
/// allocator of a host backend refuses it.
pub(crate) fn check_params<B: Backend>(spec: &RnnSpec, params_size: usize, elem_bytes: usize) {
    let Some(bytes) = params_size.checked_mul(elem_bytes) else {
        panic!(
            "invalid FusedRnnConfig: expected parameters whose size in bytes fits in usize, got \
             params_size = {params_size} elements of {elem_bytes} bytes ({})",
            fields(spec)
        );
    };
    if !is_host_backend::<B>() {
        return;
    }
    if let Some(reason) = host::refusal(bytes) {
        panic!(
            "invalid FusedRnnConfig: expected parameters that fit in memory, got params_size = \
             {params_size} elements ({bytes} bytes), {reason} ({})",
            fields(spec)
        );
    }
}

/// The sizes of one call: the output `[T, B, D*P]` and final states, in bytes, checked
/// (and, on a host backend, probed when large: Note [Allocation checks]). `reserve` gives
/// the training reserve's bytes when the call is a training call.
///
/// # Panics
///
/// Naming `seq_length`, `batch_size` and the network's fields, when a size overflows or
/// the host allocator refuses the total.
pub(crate) fn check_call<B: Backend>(
    spec: &RnnSpec,
    seq_length: usize,
    batch_size: usize,
    elem_bytes: usize,
    reserve: impl FnOnce() -> usize,
) {
    let what = || {
        format!(
            "seq_length = {seq_length}, batch_size = {batch_size}, {}",
            fields(spec)
        )
    };
    let lp = spec.num_pseudo_layers();
    let output = mul(&[seq_length, batch_size, spec.output_size(), elem_bytes]);
    let hidden = mul(&[lp, batch_size, spec.d_state(), elem_bytes]);
    let cell = if spec.mode.has_cell_state() {
        mul(&[lp, batch_size, spec.d_hidden, elem_bytes])
    } else {
        Some(0)
    };
    let total = output
        .zip(hidden)
        .and_then(|(o, h)| o.checked_add(h))
        .zip(cell)
        .and_then(|(oh, c)| oh.checked_add(c));
    let Some(total) = total else {
        panic!(
            "expected a call whose output [seq_length, batch_size, D*P] and final states \
             [L*D, batch_size, P] fit in usize bytes, got an overflow for {}",
            what()
        );
    };
    if !is_host_backend::<B>() || total < PROBE_THRESHOLD {
        return;
    }
    let Some(total) = total.checked_add(reserve()) else {
        panic!(
            "expected a training call whose reserve fits in usize bytes, got an overflow for {}",
            what()
        );
    };
    if let Some(reason) = host::refusal(total) {
        panic!(
            "expected a call whose output, final states and reserve fit in memory, got {total} \
             bytes, {reason}, for {}",
            what()
        );
    }
}
