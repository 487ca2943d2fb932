//! [`HostTensor`]: a dense row-major array of `f64` on the host, with the few reshapes the
//! conversions need (transpose, slices, concatenation, gate reordering).

use crate::gates;

/// A dense row-major array on the host. Conversions hold every weight as `f64`, which
/// represents every float dtype a front-end reads (`f16`, `bf16`, `f32`, `f64`) exactly.
#[derive(Clone, Debug, PartialEq)]
pub struct HostTensor {
    /// The dimensions, outermost first.
    pub shape: Vec<usize>,
    /// The elements, row-major (`shape.iter().product()` of them).
    pub values: Vec<f64>,
}

impl HostTensor {
    /// The array of `shape` holding `values`.
    ///
    /// # Panics
    ///
    /// If `values.len()` is not the product of `shape`.
    pub fn new(shape: Vec<usize>, values: Vec<f64>) -> Self {
        let n: usize = shape.iter().product();
        assert!(
            n == values.len(),
            "expected {n} values for shape {shape:?}, got {}",
            values.len()
        );
        Self { shape, values }
    }

    /// Zeros of `shape`.
    pub fn zeros(shape: Vec<usize>) -> Self {
        let n = shape.iter().product();
        Self::new(shape, vec![0.0; n])
    }

    /// Elements per step of the leading dimension.
    fn row_len(&self) -> usize {
        self.shape[1..].iter().product()
    }

    /// `len` consecutive entries of the leading dimension from `start`.
    pub fn rows(&self, start: usize, len: usize) -> Self {
        let r = self.row_len();
        let mut shape = self.shape.clone();
        shape[0] = len;
        Self::new(shape, self.values[start * r..(start + len) * r].to_vec())
    }

    /// Entry `i` of the leading dimension, with that dimension dropped.
    pub fn index(&self, i: usize) -> Self {
        let r = self.row_len();
        Self::new(
            self.shape[1..].to_vec(),
            self.values[i * r..(i + 1) * r].to_vec(),
        )
    }

    /// The transpose of a matrix.
    ///
    /// # Panics
    ///
    /// If the array is not a matrix.
    pub fn transpose(&self) -> Self {
        let [rows, cols] = self.matrix();
        let mut out = Vec::with_capacity(rows * cols);
        for c in 0..cols {
            out.extend((0..rows).map(|r| self.values[r * cols + c]));
        }
        Self::new(vec![cols, rows], out)
    }

    /// Columns `start..start + len` of a matrix.
    pub fn cols(&self, start: usize, len: usize) -> Self {
        let [rows, cols] = self.matrix();
        let mut out = Vec::with_capacity(rows * len);
        for r in 0..rows {
            out.extend_from_slice(&self.values[r * cols + start..r * cols + start + len]);
        }
        Self::new(vec![rows, len], out)
    }

    fn matrix(&self) -> [usize; 2] {
        match self.shape[..] {
            [rows, cols] => [rows, cols],
            _ => panic!("expected a matrix, got shape {:?}", self.shape),
        }
    }

    /// `parts` one after the other along the leading dimension (their other dimensions
    /// must agree).
    pub fn cat(parts: &[HostTensor]) -> Self {
        let mut shape = parts[0].shape.clone();
        shape[0] = parts.iter().map(|p| p.shape[0]).sum();
        Self::new(shape, parts.iter().flat_map(|p| p.values.clone()).collect())
    }

    /// `parts` (of one shape) stacked along a new leading dimension.
    pub fn stack(parts: &[HostTensor]) -> Self {
        let mut shape = vec![parts.len()];
        shape.extend_from_slice(&parts[0].shape);
        Self::new(shape, parts.iter().flat_map(|p| p.values.clone()).collect())
    }

    /// Matrices `a` and `b` (of as many rows) side by side.
    pub fn cat_cols(a: &HostTensor, b: &HostTensor) -> Self {
        let ([rows, ca], [_, cb]) = (a.matrix(), b.matrix());
        let mut out = Vec::with_capacity(rows * (ca + cb));
        for r in 0..rows {
            out.extend_from_slice(&a.values[r * ca..(r + 1) * ca]);
            out.extend_from_slice(&b.values[r * cb..(r + 1) * cb]);
        }
        Self::new(vec![rows, ca + cb], out)
    }

    /// The gate blocks of the leading dimension reordered from `from` into `to`
    /// ([`gates::permute_blocks`]).
    pub fn permute_gates(&self, from: &[char], to: &[char]) -> Self {
        Self::new(
            self.shape.clone(),
            gates::permute_blocks(&self.values, from, to),
        )
    }

    /// Every element times `factor`.
    pub fn scale(&self, factor: f64) -> Self {
        Self::new(
            self.shape.clone(),
            self.values.iter().map(|v| v * factor).collect(),
        )
    }

    /// The element-wise sum with `other` (of the same shape).
    pub fn add(&self, other: &HostTensor) -> Self {
        assert_eq!(self.shape, other.shape, "expected equal shapes");
        Self::new(
            self.shape.clone(),
            self.values
                .iter()
                .zip(&other.values)
                .map(|(a, b)| a + b)
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::HostTensor;

    fn m(rows: usize, cols: usize) -> HostTensor {
        HostTensor::new(
            vec![rows, cols],
            (0..rows * cols).map(|v| v as f64).collect(),
        )
    }

    #[test]
    fn reshapes_move_the_elements_they_name() {
        let a = m(2, 3); // [[0 1 2] [3 4 5]]
        assert_eq!(a.transpose().values, [0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
        assert_eq!(a.transpose().shape, [3, 2]);
        assert_eq!(a.cols(1, 2).values, [1.0, 2.0, 4.0, 5.0]);
        assert_eq!(a.rows(1, 1).values, [3.0, 4.0, 5.0]);
        assert_eq!(a.index(1).shape, [3]);
        let b = HostTensor::cat_cols(&a, &m(2, 1));
        assert_eq!(b.values, [0.0, 1.0, 2.0, 0.0, 3.0, 4.0, 5.0, 1.0]);
        let c = HostTensor::cat(&[a.clone(), m(1, 3)]);
        assert_eq!(c.shape, [3, 3]);
        assert_eq!(c.values[6..], [0.0, 1.0, 2.0]);
        let s = HostTensor::stack(&[a.clone(), a.clone()]);
        assert_eq!(s.shape, [2, 2, 3]);
        assert_eq!(s.index(1), a);
        // Two gates of one row each, swapped.
        assert_eq!(
            a.permute_gates(&['r', 'z'], &['z', 'r']).values[..3],
            [3.0, 4.0, 5.0]
        );
        assert_eq!(a.scale(2.0).add(&a).values[5], 15.0);
    }
}
