//! The digest a [`FusedRnnRecord`](super::FusedRnnRecord) carries of its weights (Note
//! [Weights digest] on [`WeightsDigest`]).

use burn::record::{PrecisionSettings, Record};
use burn::serde::{Deserialize, Serialize};
use burn::tensor::backend::Backend;
use burn::tensor::{DType, TensorData};
use burn_fused_rnn_core::checksum::WeightsChecksum;

/// CRC-32 checksums of a record's canonical weights, one for each precision a Burn
/// recorder can store them in; written into every record a [`FusedRnn`](crate::FusedRnn)
/// saves, and checked by [`FusedRnn::try_load_file`](crate::FusedRnn::try_load_file) and
/// [`FusedRnn::try_load_record`](crate::FusedRnn::try_load_record).
///
/// # Note [Weights digest]
///
/// A flipped byte in the weights of a checkpoint leaves a valid file that Burn loads
/// without complaint. The record therefore carries a digest of its weights, and the
/// checked loaders recompute it from what they read.
///
/// - **What is hashed.** The canonical tensors in flat order (Note [RNN weight layout] in
///   [`crate::layout`]): for each tensor present, its rank and dimensions (`u64`,
///   little-endian), then its values widened to `f64` (little-endian).
/// - **Which precisions.** The module does not know, when its record is made, which
///   precision the recorder will store: Burn's `FullPrecisionSettings` rounds floats to
///   `f32`, `HalfPrecisionSettings` (`CompactRecorder`) to `f16`, `DoublePrecisionSettings`
///   keeps `f64`. So the record holds one checksum per rounding: of the weights as the
///   module held them (`exact`), and rounded to `f32`, `f16` and `bf16`, each rounded with
///   the conversion Burn's recorders use (`TensorData::convert`). A load accepts the
///   weights it read when their checksum equals one of the four, that is when they are
///   exactly the saved weights rounded to one of those precisions. A corrupted value
///   would have to equal the saved value rounded to another precision, in every element
///   at once: a flipped low-order byte of an `f32` file is caught, although it may vanish
///   when rounded to `f16`, because the loaded values are hashed as they are, not rounded.
/// - **How it is stored.** Four `u32` fields. Burn serializes plain integers as they are
///   under every precision setting (only tensors are converted: half precision stores
///   float tensors as `f16` and integer tensors as `i16`), so the digest survives
///   NamedMpk, Bin, PrettyJson, the gzip recorders and `CompactRecorder` alike.
/// - **Why CRC-32.** The threat is accidental damage (a bad disk, a truncated copy, a
///   stray edit), not an attacker: anyone who can edit the weights can rewrite a digest
///   stored next to them, whatever its strength. CRC-32 detects every error burst of up
///   to 32 bits with certainty, and one damaged byte of a normal `f16`, `bf16`, `f32` or
///   `f64` value changes at most 32 consecutive bits of its `f64` widening; any other
///   damage passes with a probability of about `2^-32` per accepted checksum.
/// - **Records without a digest** (written before the digest existed, or built by hand)
///   load as before, without the check; the digest field is an `Option`, which every
///   recorder reads as `None` when it is missing (in Bin files, the next byte of an older
///   record is the `None` tag of a former placeholder field).
///
/// `Module::load_record` and `Module::load_file` (Burn's unchecked loaders) ignore the
/// digest.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[serde(crate = "burn::serde")]
pub struct WeightsDigest {
    /// CRC-32 of the weights as the module held them.
    pub exact: u32,
    /// CRC-32 of the weights rounded to `f32`.
    pub f32: u32,
    /// CRC-32 of the weights rounded to `f16`.
    pub f16: u32,
    /// CRC-32 of the weights rounded to `bf16`.
    pub bf16: u32,
}

/// Stored as it is under every precision setting (Burn does the same for plain integers).
impl<B: Backend> Record<B> for WeightsDigest {
    type Item<S: PrecisionSettings> = WeightsDigest;

    fn into_item<S: PrecisionSettings>(self) -> Self::Item<S> {
        self
    }

    fn from_item<S: PrecisionSettings>(item: Self::Item<S>, _device: &B::Device) -> Self {
        item
    }
}

impl WeightsDigest {
    /// Whether weights whose checksum (from [`WeightsHasher::exact`]) is `crc` are the saved
    /// weights at one of the four precisions.
    pub(crate) fn accepts(&self, crc: u32) -> bool {
        [self.exact, self.f32, self.f16, self.bf16].contains(&crc)
    }
}

/// Builds the checksums of a sequence of tensors (Note [Weights digest]; the bytes hashed
/// are the core crate's `WeightsChecksum`'s).
pub(crate) struct WeightsHasher {
    exact: WeightsChecksum,
    rounded: Option<[WeightsChecksum; 3]>,
}

/// The roundings a recorder can apply, in the order of [`WeightsDigest`]'s fields.
const ROUNDINGS: [DType; 3] = [DType::F32, DType::F16, DType::BF16];

impl WeightsHasher {
    /// A hasher of the four checksums of a [`WeightsDigest`].
    pub(crate) fn digest() -> Self {
        Self {
            exact: WeightsChecksum::new(),
            rounded: Some(Default::default()),
        }
    }

    /// A hasher of the exact checksum only: what a load compares with the digest.
    pub(crate) fn exact() -> Self {
        Self {
            exact: WeightsChecksum::new(),
            rounded: None,
        }
    }

    /// Adds one tensor (any float dtype).
    pub(crate) fn add(&mut self, data: &TensorData) {
        self.exact.add(&data.shape, data.iter::<f64>());
        if let Some(rounded) = &mut self.rounded {
            for (hasher, dtype) in rounded.iter_mut().zip(ROUNDINGS) {
                let data = data.clone().convert_dtype(dtype);
                hasher.add(&data.shape, data.iter::<f64>());
            }
        }
    }

    /// The exact checksum so far.
    pub(crate) fn exact_crc(&self) -> u32 {
        self.exact.crc()
    }

    /// The four checksums.
    ///
    /// # Panics
    ///
    /// If made with [`WeightsHasher::exact`] (an internal error).
    pub(crate) fn finish(self) -> WeightsDigest {
        let [f32, f16, bf16] = self.rounded.expect("a digest hasher").map(|h| h.crc());
        WeightsDigest {
            exact: self.exact.crc(),
            f32,
            f16,
            bf16,
        }
    }
}
