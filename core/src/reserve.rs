//! The tag that names which implementation wrote a training reserve (Note [Reserve tag]).

/// Which implementation, and which variant of it, wrote a reserve, read from the length of
/// its first tensor.
///
/// # Note [Reserve tag]
///
/// A backward pass must run on a reserve that its own training forward made, with the
/// forward's settings (cuDNN: the RNN algorithm and TF32, which the reserve's layout
/// depends on, even if they changed in between). Every native implementation tags its
/// reserve the same way: the first tensor is 1-D and its length, modulo
/// [`ReserveTag::MODULUS`], names the writer:
///
/// | length mod 16 | writer |
/// |---|---|
/// | `0..8` | cuDNN: `2 · algorithm + tf32` (algorithm: Standard, PersistStatic, PersistStaticSmallH, PersistDynamic) |
/// | `8` | the native CPU kernel |
/// | `9` | the CubeCL kernels (a first tensor that carries only the tag, then the rows of Note [Cube reserve] in the front-end's `cube` module) |
///
/// The payload is rounded up to a multiple of 16 and the tag added, so a tag costs at most
/// 31 elements. A tag is read from a shape alone: a fused custom op declares its reserve's
/// shape before it runs, and recognising a reserve never reads device memory. A backward
/// refuses a reserve whose tag is not its own, naming both. The reference's reserve
/// (several tensors of predictable shapes, Note [Reserve layout] in the front-end's `reference` module)
/// carries no tag; its backward checks the shapes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReserveTag {
    /// cuDNN, with its algorithm's index (`0..4`) and whether TF32 was on.
    Cudnn {
        /// Index of the algorithm in Standard, PersistStatic, PersistStaticSmallH,
        /// PersistDynamic.
        algorithm: u8,
        /// TF32 math.
        tf32: bool,
    },
    /// The native CPU kernel (NdArray, Flex).
    NativeCpu,
    /// The CubeCL kernels (Wgpu, and CUDA where cuDNN does not run).
    Cube,
}

impl ReserveTag {
    /// Tags are the length modulo this.
    pub const MODULUS: usize = 16;

    fn code(self) -> usize {
        match self {
            ReserveTag::Cudnn { algorithm, tf32 } => 2 * usize::from(algorithm) + usize::from(tf32),
            ReserveTag::NativeCpu => 8,
            ReserveTag::Cube => 9,
        }
    }

    /// The length of a first tensor of `payload` elements tagged with `self`.
    ///
    /// # Panics
    ///
    /// If the length overflows `usize`.
    pub fn tagged_len(self, payload: usize) -> usize {
        payload
            .max(1)
            .checked_next_multiple_of(Self::MODULUS)
            .and_then(|n| n.checked_add(self.code()))
            .expect("expected a reserve size that fits in usize, got an overflow")
    }

    /// The tag a first tensor of `len` elements carries, if any writer uses it.
    pub fn of_len(len: usize) -> Option<Self> {
        match len % Self::MODULUS {
            code @ 0..8 => Some(ReserveTag::Cudnn {
                algorithm: (code / 2) as u8,
                tf32: code % 2 == 1,
            }),
            8 => Some(ReserveTag::NativeCpu),
            9 => Some(ReserveTag::Cube),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ReserveTag;

    #[test]
    fn every_tag_round_trips_and_never_shortens_the_payload() {
        let mut tags = vec![ReserveTag::NativeCpu, ReserveTag::Cube];
        for algorithm in 0..4 {
            for tf32 in [false, true] {
                tags.push(ReserveTag::Cudnn { algorithm, tf32 });
            }
        }
        for tag in tags {
            for payload in [0, 1, 7, 15, 16, 17, 1000, 4097] {
                let len = tag.tagged_len(payload);
                assert!(len >= payload && len < payload.max(1) + 2 * ReserveTag::MODULUS);
                assert_eq!(ReserveTag::of_len(len), Some(tag), "{tag:?}, {payload}");
            }
        }
        assert_eq!(ReserveTag::of_len(10), None);
    }
}
