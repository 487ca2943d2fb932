//! Which cuDNN RNN algorithm runs a call: the rules of what each algorithm supports, the
//! `Auto` heuristic, and the reserve tag that makes a backward use its forward's
//! algorithm. The user's choice is [`super::set_algorithm`].
//!
//! # Note [RNN algorithms]
//!
//! cuDNN has four RNN algorithms (`cudnnRNNAlgo_t`):
//! - `STANDARD`: each layer as a sequence of GEMMs and element-wise kernels; robust on
//!   every shape, every dtype, projection, variable lengths.
//! - `PERSIST_STATIC`: the recurrent part as one persistent kernel that keeps the
//!   recurrent weights on chip; fast when the batch is small. Precompiled.
//! - `PERSIST_STATIC_SMALL_H`: a persistent kernel that keeps the weights in registers;
//!   for small hidden sizes.
//! - `PERSIST_DYNAMIC`: a persistent kernel compiled at run time with NVRTC for the
//!   network and one exact batch size (`cudnnBuildRNNDynamic`), so it is built once per
//!   (network, batch size); it needs `libnvrtc` at run time. Its networks of different
//!   batch sizes share one dropout state (Note [cuDNN dropout] in `build`).
//!
//! What each supports, as this crate applies it before asking cuDNN (so that a refusal
//! never costs a probe):
//! - every persistent algorithm needs biases on both matrices (`CUDNN_RNN_DOUBLE_BIAS`),
//!   no LSTM projection, and sequences of equal length; compute capability 6.0 or above.
//!   cuDNN 9.26 refuses the first two in `cudnnSetRNNDescriptor_v8` (checked against the
//!   real library by `cudnn_accepts_every_descriptor_of_the_parity_suite`); variable
//!   lengths are refused at run time (PyTorch bails out of persistent algorithms for
//!   packed input for this reason, `get_algo` in its `RNN.cpp`);
//! - `PERSIST_STATIC` and `PERSIST_STATIC_SMALL_H` have no F64 (refused by
//!   `cudnnSetRNNDescriptor_v8`); `PERSIST_DYNAMIC` accepts an F64 descriptor.
//!
//! Everything else (a hidden size too large for the kernel, a batch too large, BF16,
//! dropout) is found by cuDNN when the call shape is built or executed. Each call shape of
//! a persistent algorithm is therefore probed once per [`Pass`], when a request of that
//! pass first meets it on a thread, on zeros at the real `T`, `B`, lengths and layout: an
//! inference request runs the inference forward only; a training request (a training
//! forward, or a fused op declaring its reserve) runs the training forward and both
//! backward calls, since its backward will run the same algorithm. A refusal means
//! `STANDARD` for that request and call shape, with one warning; if `STANDARD` fails too,
//! the reference path (Note [cuDNN fallback]). A backward never probes (Note [Reserve
//! tag]).
//!
//! # `Auto`
//!
//! [`RnnAlgorithm::Auto`] applies PyTorch's heuristics (`get_algo` and its helpers in
//! `aten/src/ATen/native/cudnn/RNN.cpp`), which come from NVIDIA's measurements, after the
//! support rules above:
//! - `PERSIST_STATIC_SMALL_H` (not F64) when the hidden size is within what cuDNN runs for
//!   the pass (`use_rnn_persist_small_h` in PyTorch, which follows the limits of the
//!   "Features of RNN functions" table of cuDNN's developer guide, cited by PyTorch's
//!   pull request #73211): `cudnnRNNForward` up to `H = 384` (RNN-tanh, RNN-relu) or
//!   `H = 192` (LSTM, GRU); `cudnnRNNBackwardData_v8` and `cudnnRNNBackwardWeights_v8` up
//!   to `H = 256` or `H = 128`. An inference call runs the forward only and takes the
//!   first pair. A training call takes the second: its backward must run the forward's
//!   algorithm (Note [Reserve tag]), so both directions must accept it. (PyTorch chooses
//!   for its training forward with the forward's limits and for its backward with the
//!   backward's, `get_algo(.., forward)` in `_cudnn_rnn` and `_cudnn_rnn_backward_input`,
//!   so for LSTM and GRU with `128 < H ≤ 192` its two algorithms differ; here they never
//!   do.)
//! - else `PERSIST_STATIC` for F16 with one unidirectional layer, `H ≤ 1024`, `H` and the
//!   input size multiples of 128, on devices where PyTorch enables it: compute capability
//!   7.0 (V100) with batch sizes it lists, or 8.0 and above with at least 98 SMs except
//!   8.6, batch a multiple of 8 up to 128, never for GRU, and for RNN-tanh/relu not when
//!   `B ≥ 96` and `H ≥ 896`;
//! - else `STANDARD`.
//!
//! `Auto` never picks `PERSIST_DYNAMIC`: it compiles a kernel per batch size, and no
//! published heuristic says when that pays off; select it explicitly and measure. The
//! default is [`RnnAlgorithm::Standard`], PyTorch's default too: the persistent algorithms
//! have not been measured against it on this crate's benchmark yet (README, "GPU").
//!
//! # Reserve tag
//!
//! cuDNN's reserve holds what its backward needs in a layout only the same RNN descriptor
//! understands, so the backward must use the forward's network and call shape, even if
//! [`super::set_algorithm`] or [`super::set_tf32`] changed in between. The reserve is one
//! 1-D F32 buffer tagged with the algorithm and TF32 (Note [Reserve tag] on
//! `crate::op_types::ReserveTag`, the crate's one scheme). The backward reads the tag and
//! takes the call shape its forward ran, from the per-thread cache of call shapes (keyed
//! by the network, which the tag and the descriptor name, and the call shape), whatever
//! algorithm the forward was asked for (`Auto` included). It never builds a network or
//! probes when that entry is there; when it is gone (the cache was cleared), it rebuilds
//! exactly the tagged network and call shape, without a probe, and panics with a clear
//! message if cuDNN no longer builds them (never a silent mismatch).

use std::sync::atomic::{AtomicU64, Ordering};

use burn::tensor::DType;
use cudarc::cudnn::sys;

use crate::descriptor::RnnDescriptor;
use crate::op_types::ReserveTag;
use crate::spec::{RnnMode, RnnSpec};

/// The cuDNN RNN algorithm of the CUDA backend ([`super::set_algorithm`]; Note [RNN
/// algorithms] in this module's source, summarized in the README's GPU section).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum RnnAlgorithm {
    /// `CUDNN_RNN_ALGO_STANDARD` (the default): robust on every configuration.
    #[default]
    Standard,
    /// `CUDNN_RNN_ALGO_PERSIST_STATIC`: a persistent kernel, fast for small batches.
    PersistStatic,
    /// `CUDNN_RNN_ALGO_PERSIST_STATIC_SMALL_H`: a persistent kernel for small hidden sizes.
    PersistStaticSmallH,
    /// `CUDNN_RNN_ALGO_PERSIST_DYNAMIC`: a persistent kernel compiled with NVRTC per
    /// (network, batch size) when first seen; needs `libnvrtc`.
    PersistDynamic,
    /// PyTorch's heuristics over the three above and `Standard`, per call shape.
    Auto,
}

impl RnnAlgorithm {
    /// Every concrete algorithm (all but `Auto`), in cuDNN's enum order.
    pub const CONCRETE: [RnnAlgorithm; 4] = [
        RnnAlgorithm::Standard,
        RnnAlgorithm::PersistStatic,
        RnnAlgorithm::PersistStaticSmallH,
        RnnAlgorithm::PersistDynamic,
    ];

    /// A short name: `standard`, `persist_static`, `persist_static_small_h`,
    /// `persist_dynamic`, `auto`.
    pub fn name(self) -> &'static str {
        match self {
            RnnAlgorithm::Standard => "standard",
            RnnAlgorithm::PersistStatic => "persist_static",
            RnnAlgorithm::PersistStaticSmallH => "persist_static_small_h",
            RnnAlgorithm::PersistDynamic => "persist_dynamic",
            RnnAlgorithm::Auto => "auto",
        }
    }

    pub(crate) fn index(self) -> u8 {
        match self {
            RnnAlgorithm::Standard => 0,
            RnnAlgorithm::PersistStatic => 1,
            RnnAlgorithm::PersistStaticSmallH => 2,
            RnnAlgorithm::PersistDynamic => 3,
            RnnAlgorithm::Auto => 4,
        }
    }

    pub(crate) fn from_index(index: u8) -> Self {
        match index {
            1 => RnnAlgorithm::PersistStatic,
            2 => RnnAlgorithm::PersistStaticSmallH,
            3 => RnnAlgorithm::PersistDynamic,
            4 => RnnAlgorithm::Auto,
            _ => RnnAlgorithm::Standard,
        }
    }
}

impl std::fmt::Display for RnnAlgorithm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// An algorithm cuDNN runs: [`RnnAlgorithm`] without `Auto`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Algo {
    Standard,
    PersistStatic,
    PersistStaticSmallH,
    PersistDynamic,
}

impl Algo {
    const ALL: [Algo; 4] = [
        Algo::Standard,
        Algo::PersistStatic,
        Algo::PersistStaticSmallH,
        Algo::PersistDynamic,
    ];

    pub(crate) fn raw(self) -> sys::cudnnRNNAlgo_t {
        use sys::cudnnRNNAlgo_t::*;
        match self {
            Algo::Standard => CUDNN_RNN_ALGO_STANDARD,
            Algo::PersistStatic => CUDNN_RNN_ALGO_PERSIST_STATIC,
            Algo::PersistStaticSmallH => CUDNN_RNN_ALGO_PERSIST_STATIC_SMALL_H,
            Algo::PersistDynamic => CUDNN_RNN_ALGO_PERSIST_DYNAMIC,
        }
    }

    pub(crate) fn public(self) -> RnnAlgorithm {
        match self {
            Algo::Standard => RnnAlgorithm::Standard,
            Algo::PersistStatic => RnnAlgorithm::PersistStatic,
            Algo::PersistStaticSmallH => RnnAlgorithm::PersistStaticSmallH,
            Algo::PersistDynamic => RnnAlgorithm::PersistDynamic,
        }
    }

    /// The concrete algorithm of a user's choice (`None` for `Auto`).
    pub(crate) fn of(algorithm: RnnAlgorithm) -> Option<Algo> {
        Algo::ALL.into_iter().find(|a| a.public() == algorithm)
    }

    /// Position in [`Algo::ALL`] (used by the reserve tag and the call counters; not
    /// cuDNN's enum value).
    pub(crate) fn index(self) -> usize {
        Algo::ALL.iter().position(|&a| a == self).unwrap_or(0)
    }

    pub(crate) fn is_persistent(self) -> bool {
        self != Algo::Standard
    }
}

/// What a call asks for: the algorithm (maybe `Auto`) and TF32. Part of every cache key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Settings {
    pub algorithm: RnnAlgorithm,
    pub tf32: bool,
}

/// What a request runs: the inference forward, or a training forward and its backward
/// (Note [RNN algorithms]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Pass {
    /// `cudnnRNNForward` in inference mode.
    Inference,
    /// `cudnnRNNForward` in training mode, then `cudnnRNNBackwardData_v8` and
    /// `cudnnRNNBackwardWeights_v8` on its reserve.
    Training,
}

/// What the device tells the heuristics: compute capability and SM count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DeviceInfo {
    pub major: i32,
    pub minor: i32,
    pub sms: i32,
}

/// Why `algo` cannot run this call, from the rules of Note [RNN algorithms]; `None` when
/// it may (cuDNN has the last word when the shape is probed).
pub(crate) fn refusal(
    algo: Algo,
    spec: &RnnSpec,
    dtype: DType,
    variable_lengths: bool,
    device: Option<DeviceInfo>,
) -> Option<&'static str> {
    if !algo.is_persistent() {
        return None;
    }
    if !spec.bias {
        return Some("persistent algorithms need biases");
    }
    if spec.proj_size.is_some() {
        return Some("persistent algorithms have no LSTM projection");
    }
    if variable_lengths {
        return Some("persistent algorithms need sequences of equal length");
    }
    if dtype == DType::F64 && algo != Algo::PersistDynamic {
        return Some("the static persistent algorithms have no F64");
    }
    if device.is_some_and(|d| d.major < 6) {
        return Some("persistent algorithms need compute capability 6.0");
    }
    None
}

/// The algorithms to try for a call, in order: the choice (when the rules allow it),
/// then `Standard`.
pub(crate) fn candidates(
    settings: Settings,
    desc: &RnnDescriptor,
    dtype: DType,
    pass: Pass,
    device: DeviceInfo,
) -> Vec<Algo> {
    let variable = desc.seq_lengths.is_some();
    let wanted =
        Algo::of(settings.algorithm).unwrap_or_else(|| auto(&desc.spec, dtype, desc, pass, device));
    match refusal(wanted, &desc.spec, dtype, variable, Some(device)) {
        None if wanted.is_persistent() => vec![wanted, Algo::Standard],
        _ => vec![Algo::Standard],
    }
}

/// `Auto` (Note [RNN algorithms]).
pub(crate) fn auto(
    spec: &RnnSpec,
    dtype: DType,
    desc: &RnnDescriptor,
    pass: Pass,
    device: DeviceInfo,
) -> Algo {
    let variable = desc.seq_lengths.is_some();
    let allowed = |algo| refusal(algo, spec, dtype, variable, Some(device)).is_none();
    let h = spec.d_hidden;
    if h <= small_h_limit(spec.mode, pass) && allowed(Algo::PersistStaticSmallH) {
        return Algo::PersistStaticSmallH;
    }
    let common = spec.num_layers == 1
        && !spec.bidirectional
        && h <= 1024
        && h % 128 == 0
        && spec.d_input % 128 == 0;
    if dtype == DType::F16
        && common
        && persist_static_device(spec.mode, h, desc.batch_size, desc.seq_length, device)
        && allowed(Algo::PersistStatic)
    {
        return Algo::PersistStatic;
    }
    Algo::Standard
}

/// The largest hidden size `PERSIST_STATIC_SMALL_H` runs for every cuDNN call of `pass`
/// (Note [RNN algorithms], "`Auto`"): the forward's limit for inference, the backward's
/// (smaller) for training.
pub(crate) fn small_h_limit(mode: RnnMode, pass: Pass) -> usize {
    let plain = matches!(mode, RnnMode::RnnTanh | RnnMode::RnnRelu);
    match (pass, plain) {
        (Pass::Inference, true) => 384,
        (Pass::Inference, false) => 192,
        (Pass::Training, true) => 256,
        (Pass::Training, false) => 128,
    }
}

/// PyTorch's `use_persist_device_heuristics`.
fn persist_static_device(mode: RnnMode, h: usize, b: usize, t: usize, device: DeviceInfo) -> bool {
    match (device.major, device.minor) {
        (7, 5) => false,
        (7, _) => {
            ((b % 16 == 0 && b != 80 && b != 112) || b == 8)
                && ((t >= 40 && b <= 128) || (t >= 20 && b <= 96) || (t >= 10 && b <= 32))
        }
        (major, minor) if major >= 8 && device.sms >= 98 && minor != 6 => match mode {
            RnnMode::Gru => false,
            RnnMode::Lstm => b % 8 == 0 && b <= 128,
            RnnMode::RnnTanh | RnnMode::RnnRelu => b % 8 == 0 && b <= 128 && (b < 96 || h < 896),
        },
        _ => false,
    }
}

/// The reserve's length in F32 elements for `bytes` of cuDNN reserve, tagged with the
/// algorithm and TF32 (Note [Reserve tag] on `crate::op_types::ReserveTag`).
pub(crate) fn tagged_reserve_len(bytes: usize, algo: Algo, tf32: bool) -> usize {
    let tag = ReserveTag::Cudnn {
        algorithm: algo.index() as u8,
        tf32,
    };
    tag.tagged_len(bytes.div_ceil(4))
}

/// The algorithm and TF32 setting a tagged reserve length carries; `None` when the length
/// is not a cuDNN reserve's.
pub(crate) fn reserve_tag(len: usize) -> Option<(Algo, bool)> {
    match ReserveTag::of_len(len)? {
        ReserveTag::Cudnn { algorithm, tf32 } => Some((Algo::ALL[usize::from(algorithm)], tf32)),
        _ => None,
    }
}

static CALLS: [AtomicU64; 4] = [const { AtomicU64::new(0) }; 4];

/// How many cuDNN RNN calls (forward, backward data, backward weights) this process has
/// made: a diagnostic that shows which path ran.
pub fn cudnn_calls() -> u64 {
    CALLS.iter().map(|c| c.load(Ordering::Relaxed)).sum()
}

/// How many of [`cudnn_calls`] ran with `algorithm` (the algorithm cuDNN ran, after any
/// fallback; `Auto` is never run as such and counts 0): shows which algorithm a setting
/// ended up using.
pub fn cudnn_calls_with(algorithm: RnnAlgorithm) -> u64 {
    Algo::of(algorithm).map_or(0, |a| CALLS[a.index()].load(Ordering::Relaxed))
}

pub(crate) fn count_call(algo: Algo) {
    CALLS[algo.index()].fetch_add(1, Ordering::Relaxed);
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::config::FusedRnnConfig;
    use crate::descriptor::DropoutSpec;

    /// An H100's compute capability and SM count (also the cache's tests' device).
    pub(crate) const H100: DeviceInfo = DeviceInfo {
        major: 9,
        minor: 0,
        sms: 132,
    };

    fn desc(mode: RnnMode, h: usize, b: usize, layers: usize, bi: bool) -> RnnDescriptor {
        let spec = FusedRnnConfig::new(mode, h, h)
            .with_num_layers(layers)
            .with_bidirectional(bi)
            .spec();
        RnnDescriptor::new(spec, 100, b, true, None, DropoutSpec::NONE)
    }

    fn pick(d: &RnnDescriptor, dtype: DType, training: bool, device: DeviceInfo) -> Algo {
        let pass = if training {
            Pass::Training
        } else {
            Pass::Inference
        };
        auto(&d.spec, dtype, d, pass, device)
    }

    #[test]
    fn small_h_is_chosen_up_to_cudnns_limit_for_the_pass_of_the_call() {
        use RnnMode::*;
        // The limits of `use_rnn_persist_small_h` (forward: 384 / 192; backward: 256 /
        // 128), at and just past each one; a training call takes the backward's.
        for (mode, inference, training) in [
            (RnnTanh, 384, 256),
            (RnnRelu, 384, 256),
            (Lstm, 192, 128),
            (Gru, 192, 128),
        ] {
            for (pass, limit) in [(false, inference), (true, training)] {
                let at = pick(&desc(mode, limit, 4, 2, true), DType::F32, pass, H100);
                let past = pick(&desc(mode, limit + 1, 4, 2, true), DType::F32, pass, H100);
                let what = format!("{mode:?} training={pass}");
                assert_eq!(at, Algo::PersistStaticSmallH, "{what} at H = {limit}");
                assert_eq!(past, Algo::Standard, "{what} at H = {}", limit + 1);
            }
        }
        // Never below compute capability 6.0, never in F64.
        let old = DeviceInfo {
            major: 5,
            minor: 2,
            sms: 24,
        };
        assert_eq!(
            pick(&desc(Lstm, 64, 4, 1, false), DType::F32, false, old),
            Algo::Standard
        );
        assert_eq!(
            pick(&desc(Lstm, 64, 4, 1, false), DType::F64, false, H100),
            Algo::Standard
        );
    }

    #[test]
    fn the_algorithm_switch_round_trips_and_defaults_to_standard() {
        assert_eq!(RnnAlgorithm::default(), RnnAlgorithm::Standard);
        for a in [RnnAlgorithm::Auto]
            .into_iter()
            .chain(RnnAlgorithm::CONCRETE)
        {
            assert_eq!(RnnAlgorithm::from_index(a.index()), a);
            assert_eq!(
                Algo::of(a).map(Algo::public),
                Some(a).filter(|_| a != RnnAlgorithm::Auto)
            );
        }
    }

    #[test]
    fn the_reserve_tag_round_trips_and_never_shortens_the_reserve() {
        for bytes in [0, 1, 4, 5, 31, 32, 33, 1 << 20, (1 << 20) + 3] {
            for algo in Algo::ALL {
                for tf32 in [false, true] {
                    let len = tagged_reserve_len(bytes, algo, tf32);
                    assert!(len * 4 >= bytes, "{bytes} bytes, got {len} elements");
                    assert!(len < bytes.div_ceil(4) + 32);
                    assert_eq!(reserve_tag(len), Some((algo, tf32)), "{bytes} bytes");
                }
            }
        }
    }

    #[test]
    fn persistent_algorithms_are_refused_where_cudnn_lacks_them() {
        let plain = desc(RnnMode::Lstm, 256, 8, 1, false).spec;
        let no_bias = RnnSpec {
            bias: false,
            ..plain
        };
        let proj = RnnSpec {
            proj_size: Some(128),
            ..plain
        };
        for algo in [
            Algo::PersistStatic,
            Algo::PersistStaticSmallH,
            Algo::PersistDynamic,
        ] {
            assert_eq!(refusal(algo, &plain, DType::F32, false, Some(H100)), None);
            assert!(refusal(algo, &no_bias, DType::F32, false, None).is_some());
            assert!(refusal(algo, &proj, DType::F16, false, None).is_some());
            assert!(refusal(algo, &plain, DType::F32, true, None).is_some());
            let old = DeviceInfo {
                major: 5,
                minor: 2,
                sms: 24,
            };
            assert!(refusal(algo, &plain, DType::F32, false, Some(old)).is_some());
        }
        assert!(refusal(Algo::PersistStatic, &plain, DType::F64, false, None).is_some());
        assert!(refusal(Algo::PersistStaticSmallH, &plain, DType::F64, false, None).is_some());
        assert_eq!(
            refusal(Algo::PersistDynamic, &plain, DType::F64, false, None),
            None
        );
        assert_eq!(
            refusal(Algo::Standard, &no_bias, DType::F64, true, None),
            None
        );
    }

    #[test]
    fn auto_follows_pytorchs_heuristics() {
        use Algo::*;
        use RnnMode::*;
        // Small hidden sizes: small-H, with the stricter limit for training.
        assert_eq!(
            pick(&desc(Lstm, 192, 32, 2, true), DType::F32, false, H100),
            PersistStaticSmallH
        );
        assert_eq!(
            pick(&desc(Lstm, 192, 32, 2, true), DType::F32, true, H100),
            Standard
        );
        assert_eq!(
            pick(&desc(Gru, 128, 32, 1, false), DType::F32, true, H100),
            PersistStaticSmallH
        );
        assert_eq!(
            pick(&desc(RnnTanh, 384, 1, 1, false), DType::F16, false, H100),
            PersistStaticSmallH
        );
        assert_eq!(
            pick(&desc(RnnRelu, 384, 1, 1, false), DType::F16, true, H100),
            Standard
        );
        assert_eq!(
            pick(&desc(Lstm, 128, 32, 1, false), DType::F64, false, H100),
            Standard
        );
        // Persist-static: F16, one unidirectional layer, multiples of 128, batch % 8.
        assert_eq!(
            pick(&desc(Lstm, 256, 8, 1, false), DType::F16, true, H100),
            PersistStatic
        );
        assert_eq!(
            pick(&desc(Lstm, 512, 128, 1, false), DType::F16, false, H100),
            PersistStatic
        );
        assert_eq!(
            pick(&desc(Lstm, 256, 1, 1, false), DType::F16, false, H100),
            Standard
        );
        assert_eq!(
            pick(&desc(Lstm, 256, 8, 1, false), DType::F32, false, H100),
            Standard
        );
        assert_eq!(
            pick(&desc(Lstm, 256, 8, 2, false), DType::F16, false, H100),
            Standard
        );
        assert_eq!(
            pick(&desc(Lstm, 256, 8, 1, true), DType::F16, false, H100),
            Standard
        );
        assert_eq!(
            pick(&desc(Gru, 256, 8, 1, false), DType::F16, false, H100),
            Standard
        );
        assert_eq!(
            pick(&desc(RnnTanh, 896, 96, 1, false), DType::F16, false, H100),
            Standard
        );
        assert_eq!(
            pick(&desc(RnnTanh, 768, 96, 1, false), DType::F16, false, H100),
            PersistStatic
        );
        // Devices: sm_86 and Turing never; V100 with its own batch list.
        let a40 = DeviceInfo {
            major: 8,
            minor: 6,
            sms: 84,
        };
        let turing = DeviceInfo {
            major: 7,
            minor: 5,
            sms: 72,
        };
        let v100 = DeviceInfo {
            major: 7,
            minor: 0,
            sms: 80,
        };
        assert_eq!(
            pick(&desc(Lstm, 256, 8, 1, false), DType::F16, false, a40),
            Standard
        );
        assert_eq!(
            pick(&desc(Lstm, 256, 8, 1, false), DType::F16, false, turing),
            Standard
        );
        assert_eq!(
            pick(&desc(Lstm, 256, 16, 1, false), DType::F16, false, v100),
            PersistStatic
        );
        assert_eq!(
            pick(&desc(Lstm, 256, 80, 1, false), DType::F16, false, v100),
            Standard
        );
        // Variable lengths never go persistent.
        let mut varlen = desc(Lstm, 128, 8, 1, false);
        varlen.seq_lengths = Some(vec![100, 50, 100, 100, 100, 100, 100, 100]);
        assert_eq!(pick(&varlen, DType::F16, false, H100), Standard);
    }

    #[test]
    fn candidates_end_with_standard() {
        let d = desc(RnnMode::Lstm, 256, 8, 1, false);
        let s = |algorithm| Settings {
            algorithm,
            tf32: false,
        };
        use Algo::*;
        assert_eq!(
            candidates(
                s(RnnAlgorithm::Standard),
                &d,
                DType::F32,
                Pass::Inference,
                H100
            ),
            vec![Standard]
        );
        assert_eq!(
            candidates(
                s(RnnAlgorithm::PersistDynamic),
                &d,
                DType::F32,
                Pass::Training,
                H100
            ),
            vec![PersistDynamic, Standard]
        );
        assert_eq!(
            candidates(
                s(RnnAlgorithm::PersistStatic),
                &d,
                DType::F64,
                Pass::Inference,
                H100
            ),
            vec![Standard]
        );
        assert_eq!(
            candidates(s(RnnAlgorithm::Auto), &d, DType::F16, Pass::Inference, H100),
            vec![PersistStatic, Standard]
        );
        assert_eq!(
            candidates(s(RnnAlgorithm::Auto), &d, DType::F32, Pass::Inference, H100),
            vec![Standard]
        );
    }
}
