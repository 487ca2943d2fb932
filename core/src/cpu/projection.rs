//! The kernel's blocking choices, from what the CPU reports and the call's sizes: where the
//! forward computes a step's input projection `x_t · W_ih^T` (inside the step's product, or
//! ahead of the steps, a block of steps at a time), how the step products chunk their
//! reduction (Note [Reduction chunks] in `super::packed`), and whether they ask for each
//! next chunk ahead (Note [Next chunk ahead] there). Each can be forced, per thread for
//! tests and per process for benchmarks.
//!
//! # Note [Input projection]
//!
//! A step's pre-activations are `x_t · W_ih^T + h_{t-1} · W_hh^T + b`. Two ways to run them:
//!
//! - **Fused**: one pass of the packed kernel over the rows `[x_t | h_{t-1}]` against the
//!   packed `[W_ih | W_hh]` (Note [Fused step] in `super::forward`). Nothing of size
//!   `[T·B, G·H]` exists; but every step streams `(I + P) · G·H` weights, which is more than
//!   a core's L2 holds at the sizes where the step's time counts (LSTM H256, I = H: 2 MiB),
//!   so every step reads them from L3.
//! - **Ahead**: the input part does not depend on the recurrence, so the rows of a block of
//!   steps are projected at once, `[steps·B, I] · [I, G·H]` (plus the folded biases), a
//!   product tall enough to run near the core's peak (Note [Projection through the packed
//!   kernel]); then each step runs
//!   the packed kernel over `h_{t-1}` alone against the packed `W_hh` (`P · G·H`, half the
//!   weights at I = H) and the cell adds the step's projected row where it would add the
//!   bias. This is what cuDNN, oneDNN and ONNX Runtime do. It costs a buffer of
//!   `steps·nb·G·H` values, which the steps read back while it is still in cache: blocks
//!   of steps keep it to `block_steps` (one core's L2, but at least `block_rows` rows),
//!   whatever `T`. (The GEMM writing its rows without the biases, which the cell then
//!   added, was measured on an Intel Xeon on 2026-11-29 in one process of paired rounds:
//!   0.99–1.01× at LSTM H256 B32 and B16 and GRU H256 B32, 1.08× for the training
//!   forward; not kept.)
//!
//! Which one wins was measured, not guessed (docs/BENCHMARKS.md, "Input projection"):
//! it depends on how many rows one thread's scan carries (`nb`: the batch split over the
//! threads, Note [Fused step] in `super::forward`), against the microkernel's tile height
//! `MR` (6 rows at AVX-512, 3 at AVX2 and portable: `packed::tile_rows`). With
//! `nb` near `MR` or above, the kernel is bound by its multiply-adds and the fused pass,
//! which reads each input row once with no buffer, is as fast or faster (LSTM H256 B32,
//! 2 threads: 9.2 ms fused against 10.4 ahead). With a row or two per thread, each `k`
//! loads four vectors of weights for as many multiply-adds per row, so the step is bound
//! by its loads and half its weights (`W_ih`) are better read once, by the GEMM, for the
//! whole block (LSTM H256 B1 T100: 3.35 ms fused against 2.30 ahead; GRU 2.71 against
//! 1.66). So `choose` takes `Ahead` when `nb ≤ MR / 3` (2 rows at AVX-512, 1 at AVX2),
//! from what the machine reports (its SIMD level) and the call's sizes; a first version
//! that chose by whether the packed `[W_ih | W_hh]` fits in the L2 was slower at B32
//! (1.2–1.5×) and was dropped. On Intel's cores it is kept in a narrower form (`slow_l3`,
//! read from CPUID): there `choose` also takes `Ahead` when the packed `[W_ih | W_hh]` takes
//! more than half of one core's L2 and one thread's scan carries at most three tiles of
//! rows (18 at AVX-512). Measured on an Emerald Rapids class Xeon (2 MiB of L2 per core,
//! L3 over a mesh), in runs alternated inside one process (docs/BENCHMARKS.md, "the
//! blocking choices in paired runs"), forced ahead took 0.91–0.99× the fused pass's time
//! at LSTM H256 B32 on two threads (16 rows each; five processes), 0.91–0.96× at B16,
//! 0.95–0.96× at H384 B32, but 1.04–1.05× at H256 B64 and 1.06–1.08× at H512 B64 (32 rows
//! each, where each panel chunk read from L3 serves more tiles), and 1.07–1.09× at H128
//! (512 KiB of weights, which stay in the L2); the kernel with this rule took 0.93–0.96×
//! the fused pass's time at H256 B32, 0.79–0.86× at B16 and 0.95–0.97× at H512 B32, and
//! 0.96–1.00× for the training forward. On AMD's cores (Zen 5: the numbers above) the
//! fused pass stays; on Zen 4 (1 MiB of L2 per core, measured on 2026-12-06) forcing the
//! projection ahead took 1.06× the fused pass's time for the LSTM H256 B32 forward, 1.04×
//! at H512 B64 and 1.03× for the GRU H256 B32, level for the LSTM training step. Intel's
//! client cores (a ring to the L3, not a mesh) have not been measured; they follow the
//! server part's rule. The block of steps projected at once is
//! sized from the L2 the CPU reports (`block_steps`, read by the `gemm` crate's detection,
//! `gemm_common::cache::CACHE_INFO`), and made taller where the scan carries more than a
//! few rows and the GEMM runs on its path (`block_rows`: at least 512 rows, since each
//! block's GEMM packs all of `W_ih` again; the LSTM H512 B32 forward on two threads took
//! 0.92–0.93× the time with 32-step blocks against the 16 the L2 holds). A one-step call
//! (decoding) always runs `Fused` (no block of steps to project), and so does skip input
//! (no `W_ih`). An inference call whose packed weights come from the cache across calls
//! makes the same choice: the cache packs `W_hh` alone (and `W_ih` apart) for a layer
//! projected ahead (Note [Packed weights across calls] in `super::prepared`). Until
//! 2026-11-27 it always packed `[W_ih | W_hh]`, which forced every inference call through a
//! front-end onto `Fused`: the LSTM H32 B1 T10000 forward through Flex took 2.77 ms against
//! 2.33 for the kernel alone.
//!
//! # Note [Projection beside the scan]
//!
//! With the input projected ahead and one part of the batch (a batch of one or two: Note
//! [Fused step] in `super::forward`), the scan runs on one thread and the others would
//! only help with the block's projection, a tenth of the time at B = 1, waking up for each
//! block. Instead, while one thread runs the steps of a block, another projects the next
//! block (a `rayon::join` per block, into a second buffer that then swaps with the first),
//! so the projection leaves the scan's path except for the first block, which is an
//! eighth of a block long. The blocks are half as long as `block_steps` says, so that the
//! two buffers together take what one did. The steps and the sums are the same as without it. Measured
//! (docs/BENCHMARKS.md, "the projection beside the scan"; Zen 5, 2 threads, 13 rounds of
//! the kernel alone): the median LSTM H32 B1 T10000 forward went from 3.11 to 2.80 ms and
//! the GRU's from 2.81 to 2.52, but both are bimodal on that VM (some rounds slower than
//! before); the B = 1 training steps were faster at the median in every sitting that
//! timed them. The tests force small blocks (`with_projection_block`) so that a short
//! sequence runs several of them.
//!
//! # Note [Projection through the packed kernel]
//!
//! The projection ahead runs through the step's own kernel (`super::packed`), not a general
//! GEMM: `W_ih` is packed once per call as plain columns (`Packed::transposed`, kept across
//! inference calls with `W_hh`: Note [Packed weights across calls] in `super::prepared`),
//! and each block's rows are laid out and multiplied three tiles at a time (`ProjectRows`:
//! 18 rows at AVX-512, whose slice of each panel chunk stays in L1 beside the chunk, as a
//! step's rows do; all of a block's rows per panel, as the step product runs its few rows,
//! read them back from the L2 for every panel and ran at 0.8× the rate), each tile's
//! epilogue adding the biases. Until 2026-12-06 each block was one GEMM of the `gemm`
//! crate, which packed all of `W_ih` again for every block and took a fresh packing buffer
//! from the allocator on every call: on an Intel Xeon (Granite Rapids class) the LSTM H256
//! B32 T50 forward on two threads page-faulted 500–960 times per call, against under 100
//! with this path. The projection's rate alone is about the same (`kernel_parts`, one core,
//! 800 rows in blocks of 512: 106–135 GFLOP/s either way; the `gemm` crate is ahead where
//! `W_ih` outgrows the L2, 136–138 against 124–128 at H512); the call's time is not: the
//! kernel alone in alternated processes (docs/BENCHMARKS.md, "the input projection through
//! the packed kernel") took 0.85–0.87× the time at LSTM H256 B32, 0.86–0.88× at B1, 0.94×
//! at B16, 0.86–0.89× at GRU B1 and 0.96× at GRU B32, where the input is projected ahead,
//! and 1.02× at LSTM H512 B32; rows that run `Fused` are unchanged, training steps level to
//! 5% slower.
//!
//! A row must sum the same wherever it lands, whatever the block and the thread (the
//! forward's results do not depend on the number of threads): so the projection's tiles of
//! a single row sum in the order of a taller tile's rows (`Packed::pairs`), not even and
//! odd `k` apart as a decoding step's single row does. A block's rows split over the
//! threads a call has for it (`gemm_threads`: a batch in one part, the first block beside
//! the scan) in shares of whole tiles (`row_splits` in `super::forward`).
//!
//! Both paths compute the same sums in a different order, so they agree to rounding; the
//! tests force each one (`with_input_projection`) at every SIMD level, against the plain
//! implementation and the PyTorch fixtures, so that the path a machine does not pick by
//! itself is still checked there. `BURN_FUSED_RNN_PROJECTION` (`fused` or `ahead`) forces
//! one for a whole process (benchmarks).

use std::cell::Cell;
use std::sync::OnceLock;

use super::simd::{env_setting, with_forced, SimdLevel};

/// Where the input projection runs (Note [Input projection]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum InputProjection {
    /// Inside each step's product, over `[x_t | h_{t-1}]`.
    Fused,
    /// Ahead of the steps, a block of steps at a time.
    Ahead,
}

impl InputProjection {
    /// Both, for tests that force each.
    pub const ALL: [InputProjection; 2] = [InputProjection::Fused, InputProjection::Ahead];

    /// The name `BURN_FUSED_RNN_PROJECTION` takes.
    pub fn name(self) -> &'static str {
        match self {
            InputProjection::Fused => "fused",
            InputProjection::Ahead => "ahead",
        }
    }

    /// The one forced on this thread ([`with_input_projection`]) or by
    /// `BURN_FUSED_RNN_PROJECTION`, if any; `None`: chosen per layer (Note [Input projection]).
    pub fn forced() -> Option<InputProjection> {
        FORCED.with(Cell::get).or_else(from_env)
    }
}

thread_local! {
    static FORCED: Cell<Option<InputProjection>> = const { Cell::new(None) };
}

/// `BURN_FUSED_RNN_PROJECTION`, read once.
fn from_env() -> Option<InputProjection> {
    static ENV: OnceLock<Option<InputProjection>> = OnceLock::new();
    env_setting(&ENV, "BURN_FUSED_RNN_PROJECTION", |value| {
        InputProjection::ALL
            .into_iter()
            .find(|p| p.name() == value)
            .ok_or_else(|| "expected fused or ahead; choosing per layer".to_string())
    })
}

/// Runs `f` with every fused call that `f` makes from this thread computing its input
/// projection the way `projection` says (where it can: Note [Input projection]).
pub fn with_input_projection<R>(projection: InputProjection, f: impl FnOnce() -> R) -> R {
    with_forced(&FORCED, projection, f)
}

thread_local! {
    static FORCED_K_CHUNK: Cell<Option<usize>> = const { Cell::new(None) };
}

/// The reduction chunk forced on this thread ([`with_k_chunk`]) or by
/// `BURN_FUSED_RNN_K_CHUNK` (steps; `0`: one chunk), if any.
pub fn forced_k_chunk() -> Option<usize> {
    static ENV: OnceLock<Option<usize>> = OnceLock::new();
    FORCED_K_CHUNK.with(Cell::get).or_else(|| {
        env_setting(&ENV, "BURN_FUSED_RNN_K_CHUNK", |value| {
            match value.parse() {
                Ok(0) => Ok(usize::MAX),
                Ok(k) => Ok(k),
                Err(_) => {
                    Err("expected a number of steps (0: one chunk); chosen from the L1".into())
                }
            }
        })
    })
}

/// Runs `f` with every fused call that `f` makes from this thread running the step
/// products' reduction in chunks of `k_chunk` steps (`usize::MAX`: one chunk), instead of
/// the chunk chosen from the L1 size (Note [Reduction chunks] in `super::packed`).
pub fn with_k_chunk<R>(k_chunk: usize, f: impl FnOnce() -> R) -> R {
    with_forced(&FORCED_K_CHUNK, k_chunk.max(1), f)
}

thread_local! {
    static FORCED_BLOCK: Cell<Option<usize>> = const { Cell::new(None) };
}

/// The block of steps projected at once forced on this thread ([`with_projection_block`]),
/// if any.
pub fn forced_projection_block() -> Option<usize> {
    FORCED_BLOCK.with(Cell::get)
}

/// Runs `f` with every fused call that `f` makes from this thread projecting its input
/// ahead (where it does: Note [Input projection]) `steps` steps at a time, instead of the
/// block sized from the L2 (`block_steps`), so that tests run several blocks, and the
/// projection beside the scan (Note [Projection beside the scan]), on short sequences.
pub fn with_projection_block<R>(steps: usize, f: impl FnOnce() -> R) -> R {
    with_forced(&FORCED_BLOCK, steps.max(1), f)
}

thread_local! {
    static FORCED_PREFETCH: Cell<Option<bool>> = const { Cell::new(None) };
}

/// Whether the chunked step products ask for the next chunk ahead, as forced on this
/// thread ([`with_next_chunk_ahead`]) or by `BURN_FUSED_RNN_PREFETCH` (`0` or `1`), if
/// either does.
pub fn forced_next_chunk_ahead() -> Option<bool> {
    static ENV: OnceLock<Option<bool>> = OnceLock::new();
    FORCED_PREFETCH.with(Cell::get).or_else(|| {
        env_setting(&ENV, "BURN_FUSED_RNN_PREFETCH", |value| match value {
            "0" => Ok(false),
            "1" => Ok(true),
            _ => Err("expected 0 or 1; chosen from the L2".into()),
        })
    })
}

/// Runs `f` with every fused call that `f` makes from this thread asking for the next
/// chunk of the step products' weights ahead (`true`) or never (`false`), instead of
/// when the packed weights outgrow the L2 (Note [Next chunk ahead] in `super::packed`).
/// The sums are the same either way; only the time changes.
pub fn with_next_chunk_ahead<R>(ahead: bool, f: impl FnOnce() -> R) -> R {
    with_forced(&FORCED_PREFETCH, ahead, f)
}

/// The chunk choices forced on a thread, which a plan captures (Notes [Reduction chunks]
/// and [Next chunk ahead] in `super::packed`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct ForcedChunks {
    /// Reduction steps per chunk ([`forced_k_chunk`]).
    pub(crate) k_chunk: Option<usize>,
    /// Whether the next chunk is asked for ahead ([`forced_next_chunk_ahead`]).
    pub(crate) prefetch: Option<bool>,
}

impl ForcedChunks {
    /// What this thread forces.
    pub(crate) fn current() -> Self {
        ForcedChunks {
            k_chunk: forced_k_chunk(),
            prefetch: forced_next_chunk_ahead(),
        }
    }
}

/// Whether a chunked product over `packed_bytes` of packed weights asks for each next
/// chunk ahead (Note [Next chunk ahead] in `super::packed`): `forced`, else when they take
/// at least one core's L2, so that each step streams them from L3.
pub(crate) fn prefetch(forced: Option<bool>, packed_bytes: usize, cache: CacheSizes) -> bool {
    forced.unwrap_or(packed_bytes >= cache.l2)
}

/// Reduction steps per chunk of the step products at `level` (Note [Reduction chunks] in
/// `super::packed`): `forced`, else one chunk for AVX-512 on AMD's cores
/// ([`one_chunk_avx512`]), else as many steps as fill half the L1
/// (`bytes_per_k` bytes of the panel each), at least 16.
pub(crate) fn k_chunk(
    forced: Option<usize>,
    level: SimdLevel,
    bytes_per_k: usize,
    cache: CacheSizes,
) -> usize {
    forced.unwrap_or_else(|| {
        if level == SimdLevel::Avx512 && one_chunk_avx512() {
            usize::MAX
        } else {
            chunk_for_l1(bytes_per_k, cache)
        }
    })
}

/// Steps of `bytes_per_k` bytes that fill half the L1, at least 16.
fn chunk_for_l1(bytes_per_k: usize, cache: CacheSizes) -> usize {
    (cache.l1 / 2 / bytes_per_k.max(1)).max(16)
}

/// Whether this CPU's AVX-512 step products run as one chunk (Note [Reduction chunks] in
/// `super::packed`): an AMD core of family 19h (Zen 4, where chunks measured no faster) or
/// later (Zen 5 is family 1Ah, where one chunk measured faster), read once from CPUID.
pub fn one_chunk_avx512() -> bool {
    cpu_vendor().is_some_and(|(vendor, family)| vendor == Vendor::Amd && family >= 0x19)
}

/// The two vendors whose cores the blocking choices tell apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
enum Vendor {
    Amd,
    Intel,
    Other,
}

/// This CPU's vendor and family, read once from CPUID; `None` off x86-64.
fn cpu_vendor() -> Option<(Vendor, u8)> {
    static VENDOR: OnceLock<Option<(Vendor, u8)>> = OnceLock::new();
    *VENDOR.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            let cpuid = raw_cpuid::CpuId::new();
            let vendor = match cpuid.get_vendor_info() {
                Some(v) if v.as_str() == "AuthenticAMD" => Vendor::Amd,
                Some(v) if v.as_str() == "GenuineIntel" => Vendor::Intel,
                _ => Vendor::Other,
            };
            let family = cpuid.get_feature_info().map_or(0, |f| f.family_id());
            Some((vendor, family))
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            None
        }
    })
}

/// The cache sizes of this CPU in bytes (L1 data, L2, L3 per the detection of the `gemm`
/// crate; a level it could not read is its fallback guess).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheSizes {
    /// L1 data cache of one core.
    pub l1: usize,
    /// L2 of one core.
    pub l2: usize,
    /// L3 (shared).
    pub l3: usize,
}

impl CacheSizes {
    /// What the CPU reports, read once.
    pub fn detected() -> CacheSizes {
        static SIZES: OnceLock<CacheSizes> = OnceLock::new();
        *SIZES.get_or_init(|| {
            let info = &*gemm_common::cache::CACHE_INFO;
            CacheSizes {
                l1: info[0].cache_bytes,
                l2: info[1].cache_bytes,
                l3: info[2].cache_bytes,
            }
        })
    }
}

/// The projection of one layer and direction (Note [Input projection]): `forced` if a
/// caller forced one, else `Ahead` when one thread's scan carries at most `tile / 3`
/// rows (`rows`; `tile`: the microkernel's tile height at the call's SIMD level), or, on a
/// CPU whose weights stream slowly from L3 (`slow_l3`: [`slow_l3`]), when the packed
/// `[W_ih | W_hh]` (`fused_bytes`) takes more than half of one core's L2 (`l2`) and the scan
/// carries at most `3 · tile` rows; `Fused` for one step, skip input, or weights packed in
/// advance (`fixed`).
pub(crate) fn choose(
    forced: Option<InputProjection>,
    fixed: bool,
    [steps, rows, tile]: [usize; 3],
    [fused_bytes, l2]: [usize; 2],
    slow_l3: bool,
) -> InputProjection {
    if fixed || steps < 2 {
        return InputProjection::Fused;
    }
    if let Some(forced) = forced {
        return forced;
    }
    let few_rows = few_rows(rows, tile);
    let streamed = slow_l3 && fused_bytes > l2 / 2 && rows <= 3 * tile;
    if few_rows || streamed {
        InputProjection::Ahead
    } else {
        InputProjection::Fused
    }
}

/// Whether this CPU's cores read weights that do not stay in their L2 slowly enough that
/// the step products gain from streaming half of them (Note [Input projection]): an Intel
/// core (measured on an Emerald Rapids class Xeon, whose cores reach L3 over a mesh; the
/// client cores, on a ring, unmeasured), not an AMD one (Zen 5, where the fused pass was
/// faster at LSTM H256 B32), read once from CPUID.
pub fn slow_l3() -> bool {
    cpu_vendor().is_some_and(|(vendor, _)| vendor == Vendor::Intel)
}

/// The fewest rows of a block projected ahead whose buffer should stay in the L2 (see
/// [`block_rows`]): enough for a product tall enough to run near peak.
pub(crate) const CACHED_ROWS: usize = 128;

/// The fewest rows of a block projected ahead on the scan's path with more than a few rows
/// per step (see [`block_rows`]).
pub(crate) const TALL_ROWS: usize = 512;

/// Whether one thread's scan of `rows` rows per step counts as few rows for the
/// microkernel's tile of `tile` rows (Note [Input projection]): each `k` then loads its
/// panel vectors for a row or two of multiply-adds, and each step waits on its reads.
pub(crate) fn few_rows(rows: usize, tile: usize) -> bool {
    rows <= (tile / 3).max(1)
}

/// The fewest rows of a block projected ahead (Note [Input projection]) for a scan of
/// `rows` rows per step at a tile of `tile` rows. [`CACHED_ROWS`] where the block's buffer
/// should stay in the L2: beside the scan (`beside`, Note [Projection beside the scan]) the
/// block's projection is off the scan's path, and a scan of few rows ([`few_rows`]) waits
/// on each read of its projected rows. [`TALL_ROWS`] otherwise: there the scan is bound by
/// its multiply-adds, and each block's projection is on its path (when this was measured
/// each block's GEMM packed all of `W_ih` again; with the packed kernel, Note [Projection
/// through the packed kernel], at LSTM H256 B32 T50 on a Granite Rapids class Xeon, blocks
/// of 8, 16 and 50 steps took 1.06×, 1.03× and 1.11× the time of the 32 this rule gives,
/// and 1.07×, 1.02×, 1.04× at T200). Measured on an Intel Xeon (Emerald Rapids class, 2 MiB
/// L2, two threads of 16 rows each, kernel alone, paired rounds; docs/BENCHMARKS.md,
/// "taller blocks"): at LSTM H512 B32 T50 (4 MiB of `W_ih`, 16 steps in the L2) blocks of
/// 32 steps (512 rows) took 0.92–0.93× the time of 16 steps in three processes, the
/// training forward 0.93–1.00×, forward and backward 0.97–0.98×; the GRU H512 B32 (21 steps
/// in the L2) 0.97×, the LSTM H384 B32 (21) 0.99×; 64 steps (1024 rows) took 0.98–1.01× the
/// time of 32 at H512, but 1.04× the time of 64 at LSTM H256 B16 T200 (8 rows per thread:
/// 128 steps against the 64 the L2 holds) and, for a scan of one row, 1.02–1.03× at B = 1
/// on one thread (1024 steps against 512), so the floor is 512 rows and few rows keep the
/// L2.
pub(crate) fn block_rows(rows: usize, tile: usize, beside: bool) -> usize {
    match beside || few_rows(rows, tile) {
        true => CACHED_ROWS,
        false => TALL_ROWS,
    }
}

/// Steps per block of `Ahead` (Note [Input projection]): the block's projected rows
/// (`batch · gh` elements of `elem` bytes per step) within one core's L2, so that the steps
/// read them back from cache, but at least enough steps for `min_rows` rows
/// ([`block_rows`]), and at most `steps`. Either way the buffer is a constant (memory
/// grows with `T` only through what the call returns and keeps).
pub(crate) fn block_steps(
    [steps, batch, gh, elem]: [usize; 4],
    min_rows: usize,
    cache: CacheSizes,
) -> usize {
    let per_step = batch.saturating_mul(gh).saturating_mul(elem).max(1);
    let by_cache = cache.l2 / per_step;
    let by_rows = min_rows.div_ceil(batch.max(1));
    by_cache.max(by_rows).clamp(1, steps.max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ZEN4: CacheSizes = CacheSizes {
        l1: 32 << 10,
        l2: 1 << 20,
        l3: 32 << 20,
    };

    #[test]
    fn the_choice_follows_the_rows_per_thread_and_what_forces_it() {
        // AVX-512 tiles of 6 rows: ahead up to 2 rows per thread, fused from 3.
        for (rows, want) in [
            (1, InputProjection::Ahead),
            (2, InputProjection::Ahead),
            (3, InputProjection::Fused),
            (16, InputProjection::Fused),
        ] {
            for slow_l3 in [false, true] {
                let got = choose(None, false, [50, rows, 6], SMALL, slow_l3);
                assert_eq!(got, want, "{rows} rows, slow L3 {slow_l3}");
            }
        }
        // AVX2 / portable tiles of 3 rows: ahead for 1 row only.
        assert_eq!(
            choose(None, false, [50, 1, 3], SMALL, false),
            InputProjection::Ahead
        );
        assert_eq!(
            choose(None, false, [50, 2, 3], SMALL, false),
            InputProjection::Fused
        );
        // One step, skip input or prepared weights: fused, forced or not.
        for forced in [None, Some(InputProjection::Ahead)] {
            assert_eq!(
                choose(forced, true, [50, 1, 6], LARGE, true),
                InputProjection::Fused
            );
            assert_eq!(
                choose(forced, false, [1, 1, 6], LARGE, true),
                InputProjection::Fused
            );
        }
        // Forced: wins where both paths exist.
        assert_eq!(
            choose(
                Some(InputProjection::Ahead),
                false,
                [50, 32, 6],
                SMALL,
                false
            ),
            InputProjection::Ahead
        );
        assert_eq!(
            choose(
                Some(InputProjection::Fused),
                false,
                [50, 16, 6],
                LARGE,
                true
            ),
            InputProjection::Fused
        );
    }

    /// `[fused_bytes, l2]`: LSTM H256 f32 (`[W_ih | W_hh]` 2 MiB) on a 2 MiB L2, and H128
    /// (512 KiB) on the same.
    const LARGE: [usize; 2] = [2 << 20, 2 << 20];
    const SMALL: [usize; 2] = [512 << 10, 2 << 20];

    #[test]
    fn weights_streamed_from_l3_project_ahead_up_to_three_tiles_of_rows() {
        // Intel (slow L3), weights over half the L2: ahead up to 18 rows per thread
        // (AVX-512 tiles of 6), fused from 19; AVX2's tiles of 3: up to 9.
        for (rows, tile, want) in [
            (8, 6, InputProjection::Ahead),
            (16, 6, InputProjection::Ahead),
            (18, 6, InputProjection::Ahead),
            (19, 6, InputProjection::Fused),
            (32, 6, InputProjection::Fused),
            (9, 3, InputProjection::Ahead),
            (10, 3, InputProjection::Fused),
        ] {
            let got = choose(None, false, [50, rows, tile], LARGE, true);
            assert_eq!(got, want, "{rows} rows, tiles of {tile}");
        }
        // Weights within half the L2, or a CPU whose L3 streams fast (AMD): fused.
        assert_eq!(
            choose(None, false, [50, 16, 6], SMALL, true),
            InputProjection::Fused
        );
        assert_eq!(
            choose(None, false, [50, 16, 6], LARGE, false),
            InputProjection::Fused
        );
        // Exactly half the L2 is not over it.
        assert_eq!(
            choose(None, false, [50, 16, 6], [1 << 20, 2 << 20], true),
            InputProjection::Fused
        );
    }

    #[test]
    fn blocks_stay_in_cache_but_tall_enough() {
        // In the L2: 2 rows of 1024 f32 = 8 KiB per step, 128 steps in 1 MiB.
        assert_eq!(block_steps([500, 2, 1024, 4], CACHED_ROWS, ZEN4), 128);
        assert_eq!(block_steps([10, 2, 1024, 4], CACHED_ROWS, ZEN4), 10);
        // 32 rows = 128 KiB per step: 8 steps in 1 MiB, 4 make the 128 rows.
        assert_eq!(block_steps([50, 32, 1024, 4], CACHED_ROWS, ZEN4), 8);
        // Tall: the same steps take 16 (512 rows), or all of a shorter call.
        assert_eq!(block_steps([50, 32, 1024, 4], TALL_ROWS, ZEN4), 16);
        assert_eq!(block_steps([10, 32, 1024, 4], TALL_ROWS, ZEN4), 10);
        // 16 rows of LSTM H512 (2048 f32 each) on a 2 MiB L2: 16 steps by the cache, 32
        // (512 rows) tall.
        let l2_2mib = CacheSizes {
            l2: 2 << 20,
            ..ZEN4
        };
        assert_eq!(block_steps([500, 16, 2048, 4], CACHED_ROWS, l2_2mib), 16);
        assert_eq!(block_steps([500, 16, 2048, 4], TALL_ROWS, l2_2mib), 32);
        // B = 1, H = 32 (LSTM): 512 bytes per step, 2048 steps by the cache either way,
        // however long the sequence.
        assert_eq!(block_steps([10_000, 1, 128, 4], CACHED_ROWS, ZEN4), 2048);
        assert_eq!(block_steps([10_000, 1, 128, 4], TALL_ROWS, ZEN4), 2048);
        // Huge steps: still the fewest rows.
        assert_eq!(block_steps([50, 64, 16384, 4], CACHED_ROWS, ZEN4), 2);
        assert_eq!(block_steps([50, 512, 16384, 4], CACHED_ROWS, ZEN4), 1);
        assert_eq!(block_steps([50, 256, 16384, 4], CACHED_ROWS, ZEN4), 1);
        assert_eq!(block_steps([50, 256, 16384, 4], TALL_ROWS, ZEN4), 2);
    }

    #[test]
    fn blocks_are_tall_on_the_scans_path_with_many_rows() {
        // AVX-512 tile (6 rows): one or two rows per step, or beside the scan: in the L2.
        for rows in [1, 2] {
            assert_eq!(block_rows(rows, 6, false), CACHED_ROWS);
        }
        for rows in [1, 3, 16, 64] {
            assert_eq!(block_rows(rows, 6, true), CACHED_ROWS);
        }
        // Three rows or more on the scan's path: tall.
        for rows in [3, 16, 64] {
            assert_eq!(block_rows(rows, 6, false), TALL_ROWS);
        }
        // AVX2 tile (3 rows): one row is few, two are not.
        assert_eq!(block_rows(1, 3, false), CACHED_ROWS);
        assert_eq!(block_rows(2, 3, false), TALL_ROWS);
    }

    #[test]
    fn chunks_fill_half_the_l1() {
        // LSTM/RNN f32 AVX-512 panels: 4 vectors of 64 bytes per step; 32 KiB of L1.
        assert_eq!(chunk_for_l1(256, ZEN4), 64);
        let spr = CacheSizes {
            l1: 48 << 10,
            ..ZEN4
        };
        assert_eq!(chunk_for_l1(256, spr), 96);
        // Wide f64 panels on a small L1: at least 16.
        assert_eq!(chunk_for_l1(4096, ZEN4), 16);
        // AVX2 and portable always chunk; AVX-512 except on AMD.
        assert_eq!(k_chunk(None, SimdLevel::Avx2, 128, ZEN4), 128);
        let avx512 = k_chunk(None, SimdLevel::Avx512, 256, ZEN4);
        assert_eq!(avx512 == usize::MAX, one_chunk_avx512());
        assert_eq!(k_chunk(Some(3), SimdLevel::Avx512, 256, ZEN4), 3);
        assert_eq!(with_k_chunk(5, forced_k_chunk), Some(5));
    }

    #[test]
    fn the_next_chunk_is_asked_for_from_one_l2_of_weights() {
        // 1 MiB of L2: asked ahead from 1 MiB of packed weights, not below.
        assert!(!prefetch(None, (1 << 20) - 1, ZEN4));
        assert!(prefetch(None, 1 << 20, ZEN4));
        assert!(prefetch(None, 8 << 20, ZEN4));
        // Forced either way, whatever the size.
        assert!(prefetch(Some(true), 4096, ZEN4));
        assert!(!prefetch(Some(false), 8 << 20, ZEN4));
        let outside = forced_next_chunk_ahead();
        with_next_chunk_ahead(true, || {
            assert_eq!(ForcedChunks::current().prefetch, Some(true));
            with_next_chunk_ahead(false, || {
                assert_eq!(forced_next_chunk_ahead(), Some(false));
            });
        });
        assert_eq!(forced_next_chunk_ahead(), outside);
    }

    #[test]
    fn forcing_is_scoped_to_the_closure() {
        let outside = InputProjection::forced();
        with_input_projection(InputProjection::Ahead, || {
            assert_eq!(InputProjection::forced(), Some(InputProjection::Ahead));
            with_input_projection(InputProjection::Fused, || {
                assert_eq!(InputProjection::forced(), Some(InputProjection::Fused));
            });
            assert_eq!(InputProjection::forced(), Some(InputProjection::Ahead));
        });
        assert_eq!(InputProjection::forced(), outside);
    }
}
