use super::{check_len, check_shape, validate_compressed, CompressedNames, Csr};
use crate::error::FormatError;
use crate::scalar::Scalar;

const BSR: CompressedNames = CompressedNames {
    format: "BSR",
    major: "block row",
    minor: "block column",
};

/// Block CSR: a CSR pattern of `r × c` dense blocks, each stored row-major (the sparse block
/// matrices of Polok et al.). Block column indices are strictly increasing within a block row.
/// The matrix is `block_rows·r × block_cols·c`.
#[derive(Clone, Debug, PartialEq)]
pub struct Bsr<T> {
    block_shape: (usize, usize),
    block_rows: usize,
    block_cols: usize,
    row_offsets: Vec<u64>,
    col_indices: Vec<u32>,
    values: Vec<T>,
}

impl<T: Scalar> Bsr<T> {
    /// Builds from the block pattern and block values, checking every invariant.
    pub fn try_new(
        block_shape: (usize, usize),
        block_rows: usize,
        block_cols: usize,
        row_offsets: Vec<u64>,
        col_indices: Vec<u32>,
        values: Vec<T>,
    ) -> Result<Self, FormatError> {
        let (r, c) = block_shape;
        if r == 0 || c == 0 {
            return Err(FormatError::InvalidParameter {
                format: "BSR",
                what: format!("block shape {r}×{c} has a zero side"),
            });
        }
        let nrows = block_rows.checked_mul(r);
        let ncols = block_cols.checked_mul(c);
        let (Some(nrows), Some(ncols)) = (nrows, ncols) else {
            return Err(FormatError::ShapeOverflow {
                format: "BSR",
                nrows: block_rows as u64,
                ncols: block_cols as u64,
                reason: "block counts times block shape overflow",
            });
        };
        check_shape("BSR", nrows, ncols)?;
        let len = (col_indices.len() as u64).saturating_mul((r * c) as u64);
        check_len("BSR", "values", len, values.len())?;
        validate_compressed(
            BSR,
            block_rows,
            block_cols,
            &row_offsets,
            &col_indices,
            true,
        )?;
        Ok(Bsr {
            block_shape,
            block_rows,
            block_cols,
            row_offsets,
            col_indices,
            values,
        })
    }

    /// Groups a CSR matrix into `r × c` blocks; a block is stored when any of its entries is.
    /// The shape must be a multiple of the block shape.
    pub fn from_csr(a: &Csr<T>, block_shape: (usize, usize)) -> Result<Self, FormatError> {
        let (r, c) = block_shape;
        if r == 0 || c == 0 || a.nrows() % r != 0 || a.ncols() % c != 0 {
            return Err(FormatError::InvalidParameter {
                format: "BSR",
                what: format!(
                    "a {}×{} matrix cannot be cut into {r}×{c} blocks",
                    a.nrows(),
                    a.ncols()
                ),
            });
        }
        let (block_rows, block_cols) = (a.nrows() / r, a.ncols() / c);
        let mut row_offsets = Vec::with_capacity(block_rows + 1);
        row_offsets.push(0u64);
        let mut col_indices: Vec<u32> = Vec::new();
        let mut values: Vec<T> = Vec::new();
        let mut slot = vec![usize::MAX; block_cols];
        for bi in 0..block_rows {
            let first = col_indices.len();
            let mut cols: Vec<u32> = Vec::new();
            for i in bi * r..(bi + 1) * r {
                for &j in a.row(i).0 {
                    let bj = j as usize / c;
                    if slot[bj] == usize::MAX {
                        slot[bj] = 0;
                        cols.push(bj as u32);
                    }
                }
            }
            cols.sort_unstable();
            for (k, &bj) in cols.iter().enumerate() {
                slot[bj as usize] = first + k;
            }
            col_indices.extend_from_slice(&cols);
            values.resize(col_indices.len() * r * c, T::zero());
            for i in bi * r..(bi + 1) * r {
                let (js, vs) = a.row(i);
                for (&j, &v) in js.iter().zip(vs) {
                    let b = slot[j as usize / c];
                    values[b * r * c + (i - bi * r) * c + j as usize % c] = v;
                }
            }
            for &bj in &cols {
                slot[bj as usize] = usize::MAX;
            }
            row_offsets.push(col_indices.len() as u64);
        }
        Ok(Bsr {
            block_shape,
            block_rows,
            block_cols,
            row_offsets,
            col_indices,
            values,
        })
    }

    /// The same matrix in CSR; zeros inside stored blocks are dropped.
    pub fn to_csr(&self) -> Csr<T> {
        let (r, c) = self.block_shape;
        let zero = T::zero();
        let mut row_offsets = Vec::with_capacity(self.nrows() + 1);
        row_offsets.push(0u64);
        let mut cols = Vec::new();
        let mut vals = Vec::new();
        for bi in 0..self.block_rows {
            let (s, e) = (
                self.row_offsets[bi] as usize,
                self.row_offsets[bi + 1] as usize,
            );
            for ii in 0..r {
                for b in s..e {
                    let bj = self.col_indices[b] as usize;
                    for jj in 0..c {
                        let v = self.values[b * r * c + ii * c + jj];
                        if v != zero {
                            cols.push((bj * c + jj) as u32);
                            vals.push(v);
                        }
                    }
                }
                row_offsets.push(cols.len() as u64);
            }
        }
        // SAFETY: block columns are sorted, so columns within a row are too.
        unsafe { Csr::from_parts_unchecked(self.nrows(), self.ncols(), row_offsets, cols, vals) }
    }

    /// Number of rows.
    pub fn nrows(&self) -> usize {
        self.block_rows * self.block_shape.0
    }
    /// Number of columns.
    pub fn ncols(&self) -> usize {
        self.block_cols * self.block_shape.1
    }
    /// `(rows, columns)`.
    pub fn shape(&self) -> (usize, usize) {
        (self.nrows(), self.ncols())
    }
    /// `(r, c)`: rows and columns of one block.
    pub fn block_shape(&self) -> (usize, usize) {
        self.block_shape
    }
    /// Number of block rows.
    pub fn block_rows(&self) -> usize {
        self.block_rows
    }
    /// Number of block columns.
    pub fn block_cols(&self) -> usize {
        self.block_cols
    }
    /// Number of stored blocks.
    pub fn nnz_blocks(&self) -> u64 {
        self.col_indices.len() as u64
    }
    /// Block row offsets.
    pub fn row_offsets(&self) -> &[u64] {
        &self.row_offsets
    }
    /// Block column indices.
    pub fn col_indices(&self) -> &[u32] {
        &self.col_indices
    }
    /// Block values, each block row-major, blocks in pattern order.
    pub fn values(&self) -> &[T] {
        &self.values
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_round_trip() {
        let a = Csr::try_new(
            4,
            4,
            vec![0, 2, 3, 4, 5],
            vec![0, 3, 1, 2, 3],
            vec![1.0, 2.0, 3.0, 4.0, 5.0],
        )
        .unwrap();
        let b = Bsr::from_csr(&a, (2, 2)).unwrap();
        assert_eq!(b.row_offsets(), &[0, 2, 3]);
        assert_eq!(b.col_indices(), &[0, 1, 1]);
        assert_eq!(&b.values()[0..4], &[1.0, 0.0, 0.0, 3.0]);
        assert_eq!(b.to_csr(), a);
        assert!(Bsr::from_csr(&a, (3, 2)).is_err());
        assert!(Bsr::<f64>::try_new((0, 2), 1, 1, vec![0, 0], vec![], vec![]).is_err());
        assert!(matches!(
            Bsr::<f64>::try_new((2, 2), 1, 2, vec![0, 1], vec![0], vec![1.0; 3]).unwrap_err(),
            FormatError::LengthMismatch { expected: 4, .. }
        ));
        assert!(matches!(
            Bsr::<f64>::try_new((2, 2), 1, 2, vec![0, 1], vec![2], vec![1.0; 4]).unwrap_err(),
            FormatError::IndexOutOfBounds {
                axis: "block column",
                ..
            }
        ));
    }
}
