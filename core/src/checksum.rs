//! The checksum of a sequence of weight tensors that checkpoints carry (the front-ends'
//! `WeightsDigest`, Note [Weights digest] there): which bytes are hashed, written once.

/// CRC-32 of a sequence of tensors: for each, its rank and dimensions (`u64`,
/// little-endian), then its values widened to `f64` (little-endian). A tensor's values are
/// whatever precision it was stored in; the widening to `f64` is exact for `f16`, `bf16`,
/// `f32` and `f64`, so the same values give the same checksum from any of them.
#[derive(Clone, Default)]
pub struct WeightsChecksum {
    hasher: crc32fast::Hasher,
    buf: Vec<u8>,
}

impl WeightsChecksum {
    /// An empty checksum.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one tensor of shape `dims` whose values, in row-major order, are `values`.
    pub fn add(&mut self, dims: &[usize], values: impl IntoIterator<Item = f64>) {
        let mut header = Vec::with_capacity(8 * (dims.len() + 1));
        header.extend_from_slice(&(dims.len() as u64).to_le_bytes());
        for &d in dims {
            header.extend_from_slice(&(d as u64).to_le_bytes());
        }
        self.hasher.update(&header);
        // Chunks bound the scratch buffer for large tensors.
        const CHUNK: usize = 1 << 14;
        self.buf.clear();
        for v in values {
            self.buf.extend_from_slice(&v.to_le_bytes());
            if self.buf.len() >= 8 * CHUNK {
                self.hasher.update(&self.buf);
                self.buf.clear();
            }
        }
        self.hasher.update(&self.buf);
        self.buf.clear();
    }

    /// The checksum of the tensors added so far.
    pub fn crc(&self) -> u32 {
        self.hasher.clone().finalize()
    }
}

#[cfg(test)]
mod tests {
    use super::WeightsChecksum;

    /// The checksum is CRC-32 of the documented bytes, computed here by hand.
    #[test]
    fn hashes_rank_dims_and_f64_values_little_endian() {
        let mut bytes = Vec::new();
        for (dims, values) in [
            (vec![2usize, 3], vec![1.5f64, -2.0, 0.0, 3.25, 1e-3, 7.0]),
            (vec![4], vec![0.5, 0.25, -0.125, 9.0]),
        ] {
            bytes.extend_from_slice(&(dims.len() as u64).to_le_bytes());
            for d in &dims {
                bytes.extend_from_slice(&(*d as u64).to_le_bytes());
            }
            for v in &values {
                bytes.extend_from_slice(&v.to_le_bytes());
            }
        }
        let mut sum = WeightsChecksum::new();
        sum.add(&[2, 3], [1.5, -2.0, 0.0, 3.25, 1e-3, 7.0]);
        sum.add(&[4], [0.5, 0.25, -0.125, 9.0]);
        assert_eq!(sum.crc(), crc32fast::hash(&bytes));
        // A large tensor crosses the chunk boundary: same as hashing it in one piece.
        let big: Vec<f64> = (0..40_000).map(|i| i as f64 * 0.5).collect();
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&1u64.to_le_bytes());
        bytes.extend_from_slice(&40_000u64.to_le_bytes());
        for v in &big {
            bytes.extend_from_slice(&v.to_le_bytes());
        }
        let mut sum = WeightsChecksum::new();
        sum.add(&[40_000], big.iter().copied());
        assert_eq!(sum.crc(), crc32fast::hash(&bytes));
    }
}
