use super::{check_len, check_shape, Csr};
use crate::error::{Error, FormatError};
use crate::host;
use crate::scalar::Scalar;

/// Coordinate triplets in any order; repeated entries are summed when converted.
///
/// ```
/// use hetsparse_core::format::Coo;
/// let mut t = Coo::<f64>::new(2, 2)?;
/// t.try_push(1, 0, 1.0)?;
/// t.try_push(1, 0, 2.0)?;
/// let a = t.to_csr()?;
/// assert_eq!(a.get(1, 0), Some(3.0));
/// # Ok::<(), hetsparse_core::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Coo<T> {
    nrows: usize,
    ncols: usize,
    rows: Vec<u32>,
    cols: Vec<u32>,
    values: Vec<T>,
}

impl<T: Scalar> Coo<T> {
    /// An empty `nrows × ncols` triplet list.
    pub fn new(nrows: usize, ncols: usize) -> Result<Self, FormatError> {
        check_shape("COO", nrows, ncols)?;
        Ok(Coo {
            nrows,
            ncols,
            rows: Vec::new(),
            cols: Vec::new(),
            values: Vec::new(),
        })
    }

    /// Builds from triplet arrays, checking lengths and bounds.
    pub fn try_new(
        nrows: usize,
        ncols: usize,
        rows: Vec<u32>,
        cols: Vec<u32>,
        values: Vec<T>,
    ) -> Result<Self, FormatError> {
        check_shape("COO", nrows, ncols)?;
        check_len("COO", "cols", rows.len() as u64, cols.len())?;
        check_len("COO", "values", rows.len() as u64, values.len())?;
        for (axis, idx, bound) in [("row", &rows, nrows), ("column", &cols, ncols)] {
            if let Some(p) = idx.iter().position(|&i| i as usize >= bound) {
                return Err(FormatError::IndexOutOfBounds {
                    format: "COO",
                    axis,
                    position: p as u64,
                    index: u64::from(idx[p]),
                    bound: bound as u64,
                });
            }
        }
        Ok(Coo {
            nrows,
            ncols,
            rows,
            cols,
            values,
        })
    }

    pub(crate) fn from_sorted_parts(
        nrows: usize,
        ncols: usize,
        rows: Vec<u32>,
        cols: Vec<u32>,
        values: Vec<T>,
    ) -> Self {
        Coo {
            nrows,
            ncols,
            rows,
            cols,
            values,
        }
    }

    /// With room reserved for `additional` more entries.
    pub fn reserve(&mut self, additional: usize) {
        self.rows.reserve(additional);
        self.cols.reserve(additional);
        self.values.reserve(additional);
    }

    /// Appends an entry, checking bounds.
    pub fn try_push(&mut self, row: usize, col: usize, value: T) -> Result<(), FormatError> {
        for (axis, index, bound) in [("row", row, self.nrows), ("column", col, self.ncols)] {
            if index >= bound {
                return Err(FormatError::IndexOutOfBounds {
                    format: "COO",
                    axis,
                    position: self.rows.len() as u64,
                    index: index as u64,
                    bound: bound as u64,
                });
            }
        }
        self.rows.push(row as u32);
        self.cols.push(col as u32);
        self.values.push(value);
        Ok(())
    }

    /// Room for `additional` more entries, or [`Error::OutOfMemory`] when the host cannot give
    /// it (for a count read from a file or a network, which [`Coo::reserve`] would abort on).
    pub fn try_reserve(&mut self, additional: usize) -> Result<(), Error> {
        host::try_reserve(&mut self.rows, additional, "COO row indices")?;
        host::try_reserve(&mut self.cols, additional, "COO column indices")?;
        host::try_reserve(&mut self.values, additional, "COO values")
    }

    /// Number of rows.
    pub fn nrows(&self) -> usize {
        self.nrows
    }
    /// Number of columns.
    pub fn ncols(&self) -> usize {
        self.ncols
    }
    /// `(rows, columns)`.
    pub fn shape(&self) -> (usize, usize) {
        (self.nrows, self.ncols)
    }
    /// Number of stored triplets (repeats counted).
    pub fn nnz(&self) -> u64 {
        self.rows.len() as u64
    }
    /// Row indices.
    pub fn row_indices(&self) -> &[u32] {
        &self.rows
    }
    /// Column indices.
    pub fn col_indices(&self) -> &[u32] {
        &self.cols
    }
    /// Values.
    pub fn values(&self) -> &[T] {
        &self.values
    }
    /// `(nrows, ncols, rows, cols, values)`.
    pub fn into_parts(self) -> (usize, usize, Vec<u32>, Vec<u32>, Vec<T>) {
        (self.nrows, self.ncols, self.rows, self.cols, self.values)
    }

    /// As canonical CSR: rows bucketed, each row sorted, repeated entries summed. The
    /// `rows + 1` row offsets are sized by the shape, not by the entries, so they are allocated
    /// fallibly: [`Error::OutOfMemory`] when the host cannot hold them.
    pub fn to_csr(&self) -> Result<Csr<T>, Error> {
        let nnz = self.rows.len();
        let mut offsets = host::try_filled(self.nrows + 1, 0u64, "CSR row offsets")?;
        for &r in &self.rows {
            offsets[r as usize + 1] += 1;
        }
        for i in 0..self.nrows {
            offsets[i + 1] += offsets[i];
        }
        let mut next = host::try_with_capacity(offsets.len(), "CSR row offsets")?;
        next.extend_from_slice(&offsets);
        let mut cols = host::try_filled(nnz, 0u32, "CSR column indices")?;
        let mut vals = host::try_filled(nnz, T::zero(), "CSR values")?;
        for k in 0..nnz {
            let r = self.rows[k] as usize;
            let dst = next[r] as usize;
            cols[dst] = self.cols[k];
            vals[dst] = self.values[k];
            next[r] += 1;
        }
        let offsets = super::sort_and_sum_lines(&offsets, &mut cols, &mut vals);
        // SAFETY: indices were bounds-checked on the way in and rows are now sorted and unique.
        Ok(unsafe { Csr::from_parts_unchecked(self.nrows, self.ncols, offsets, cols, vals) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_triplets_are_rejected() {
        let e = Coo::try_new(2, 2, vec![0, 2], vec![0, 0], vec![1.0, 1.0]).unwrap_err();
        assert!(matches!(
            e,
            FormatError::IndexOutOfBounds {
                axis: "row",
                position: 1,
                ..
            }
        ));
        let e = Coo::try_new(2, 2, vec![0], vec![0, 1], vec![1.0]).unwrap_err();
        assert!(matches!(
            e,
            FormatError::LengthMismatch { array: "cols", .. }
        ));
        let mut c = Coo::new(1, 1).unwrap();
        assert!(c.try_push(0, 1, 1.0f32).is_err());
    }

    #[test]
    fn any_order_with_repeats_becomes_canonical() {
        let c = Coo::try_new(
            3,
            3,
            vec![2, 0, 2, 0, 2],
            vec![1, 2, 0, 2, 1],
            vec![1.0, 2.0, 3.0, 4.0, 5.0],
        )
        .unwrap();
        let a = c.to_csr().unwrap();
        assert_eq!(a, c.to_csr().unwrap());
        assert_eq!(a.row_offsets(), &[0, 1, 1, 3]);
        assert_eq!(a.col_indices(), &[2, 0, 1]);
        assert_eq!(a.values(), &[6.0, 3.0, 6.0]);
    }
}
