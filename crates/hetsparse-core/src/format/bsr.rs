use super::{check_len, check_shape, validate_compressed, CompressedNames, Csr, MAX_DIMENSION};
use crate::error::{Error, FormatError};
use crate::host;
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
        check_block_shape(r, c)?;
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
        // Both sides are at most u32::MAX, so one block's size fits in u64.
        let len = (col_indices.len() as u64).saturating_mul(r as u64 * c as u64);
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
    pub fn from_csr(a: &Csr<T>, block_shape: (usize, usize)) -> Result<Self, Error> {
        let (r, c) = block_shape;
        check_block_shape(r, c)?;
        if a.nrows() % r != 0 || a.ncols() % c != 0 {
            return Err(Error::Format(FormatError::InvalidParameter {
                format: "BSR",
                what: format!(
                    "a {}×{} matrix cannot be cut into {r}×{c} blocks",
                    a.nrows(),
                    a.ncols()
                ),
            }));
        }
        let (block_rows, block_cols) = (a.nrows() / r, a.ncols() / c);
        let block_len = r * c;
        let mut row_offsets = host::try_with_capacity(block_rows + 1, "BSR row offsets")?;
        row_offsets.push(0u64);
        let mut col_indices: Vec<u32> = Vec::new();
        let mut values: Vec<T> = Vec::new();
        let mut slot = host::try_filled(block_cols, usize::MAX, "BSR block slots")?;
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
            // A block's fill is sized by the block shape, not by the entries: ask for it.
            let blocks_len = (col_indices.len() as u64).saturating_mul(block_len as u64);
            host::check_buffer::<T>(blocks_len, "BSR block values")?;
            let more = blocks_len as usize - values.len();
            host::try_reserve(&mut values, more, "BSR block values")?;
            values.resize(blocks_len as usize, T::zero());
            for i in bi * r..(bi + 1) * r {
                let (js, vs) = a.row(i);
                for (&j, &v) in js.iter().zip(vs) {
                    let b = slot[j as usize / c];
                    values[b * block_len + (i - bi * r) * c + j as usize % c] = v;
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
    pub fn to_csr(&self) -> Result<Csr<T>, Error> {
        let (r, c) = self.block_shape;
        let zero = T::zero();
        let mut row_offsets = host::try_with_capacity(self.nrows() + 1, "CSR row offsets")?;
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
        Ok(unsafe {
            Csr::from_parts_unchecked(self.nrows(), self.ncols(), row_offsets, cols, vals)
        })
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

/// Checks that a block shape has no zero side and fits the index types.
fn check_block_shape(r: usize, c: usize) -> Result<(), FormatError> {
    if r == 0 || c == 0 {
        return Err(FormatError::InvalidParameter {
            format: "BSR",
            what: format!("block shape {r}×{c} has a zero side"),
        });
    }
    if r > MAX_DIMENSION || c > MAX_DIMENSION {
        return Err(FormatError::ShapeOverflow {
            format: "BSR",
            nrows: r as u64,
            ncols: c as u64,
            reason: "a block's sides are limited to u32::MAX like every dimension",
        });
    }
    Ok(())
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
        assert_eq!(b.to_csr().unwrap(), a);
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

    #[test]
    fn huge_block_shapes_are_errors_not_overflows() {
        // No block rows, so no rows, whatever the block height: the shape itself is refused.
        let e = Bsr::<f64>::try_new((usize::MAX, usize::MAX), 0, 0, vec![0], vec![], vec![])
            .unwrap_err();
        assert!(
            matches!(e, FormatError::ShapeOverflow { format: "BSR", .. }),
            "{e}"
        );
        // Sides at the limit: one block holds 2^64 - 2^33 + 1 values, which the length check
        // reports instead of overflowing.
        let side = u32::MAX as usize;
        let e =
            Bsr::<f64>::try_new((side, side), 1, 1, vec![0, 1], vec![0], vec![1.0]).unwrap_err();
        assert!(
            matches!(
                e,
                FormatError::LengthMismatch {
                    array: "values",
                    found: 1,
                    ..
                }
            ),
            "{e}"
        );
    }
}
