use super::{check_len, check_shape, Csr};
use crate::error::{Error, FormatError};
use crate::host;
use crate::scalar::Scalar;

/// CSPR / CCSR (Neelima & Raghavendra): one 64-bit linear index per entry, `row * ncols + col`,
/// strictly increasing, and the values. One index array instead of two halves the index traffic
/// of COO on the way to the device; a GPU SpMV gives each entry a thread and sums rows with atomics.
#[derive(Clone, Debug, PartialEq)]
pub struct Cspr<T> {
    nrows: usize,
    ncols: usize,
    indices: Vec<u64>,
    values: Vec<T>,
}

impl<T: Scalar> Cspr<T> {
    /// Builds from linear indices and values, checking bounds and order.
    pub fn try_new(
        nrows: usize,
        ncols: usize,
        indices: Vec<u64>,
        values: Vec<T>,
    ) -> Result<Self, FormatError> {
        check_shape("CSPR", nrows, ncols)?;
        // With both dimensions below 2^32 the product always fits u64.
        let size = nrows as u64 * ncols as u64;
        check_len("CSPR", "values", indices.len() as u64, values.len())?;
        for (p, &idx) in indices.iter().enumerate() {
            if idx >= size {
                return Err(FormatError::IndexOutOfBounds {
                    format: "CSPR",
                    axis: "linear",
                    position: p as u64,
                    index: idx,
                    bound: size,
                });
            }
            if p > 0 && indices[p - 1] >= idx {
                let prev = indices[p - 1];
                return Err(if prev == idx {
                    FormatError::Duplicate {
                        format: "CSPR",
                        row: idx / ncols as u64,
                        col: idx % ncols as u64,
                        position: p as u64,
                    }
                } else {
                    FormatError::Unsorted {
                        format: "CSPR",
                        axis: "matrix",
                        line: 0,
                        position: p as u64,
                        previous: prev,
                        next: idx,
                    }
                });
            }
        }
        Ok(Cspr {
            nrows,
            ncols,
            indices,
            values,
        })
    }

    /// Converts from CSR.
    pub fn from_csr(a: &Csr<T>) -> Self {
        let ncols = a.ncols() as u64;
        let mut indices = Vec::with_capacity(a.nnz() as usize);
        for i in 0..a.nrows() {
            indices.extend(a.row(i).0.iter().map(|&j| i as u64 * ncols + u64::from(j)));
        }
        Cspr {
            nrows: a.nrows(),
            ncols: a.ncols(),
            indices,
            values: a.values().to_vec(),
        }
    }

    /// The same matrix in CSR.
    pub fn to_csr(&self) -> Result<Csr<T>, Error> {
        let mut row_offsets = host::try_filled(self.nrows + 1, 0u64, "CSR row offsets")?;
        let mut cols = Vec::with_capacity(self.indices.len());
        for &idx in &self.indices {
            // ncols > 0 whenever an index exists.
            let (i, j) = (idx / self.ncols as u64, idx % self.ncols as u64);
            row_offsets[i as usize + 1] += 1;
            cols.push(j as u32);
        }
        for i in 0..self.nrows {
            row_offsets[i + 1] += row_offsets[i];
        }
        // SAFETY: indices are strictly increasing, so rows are contiguous and sorted.
        Ok(unsafe {
            Csr::from_parts_unchecked(
                self.nrows,
                self.ncols,
                row_offsets,
                cols,
                self.values.clone(),
            )
        })
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
    /// Number of stored entries.
    pub fn nnz(&self) -> u64 {
        self.indices.len() as u64
    }
    /// Linear indices `row * ncols + col`.
    pub fn indices(&self) -> &[u64] {
        &self.indices
    }
    /// Values.
    pub fn values(&self) -> &[T] {
        &self.values
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects_disorder() {
        let a = Csr::try_new(2, 3, vec![0, 2, 3], vec![0, 2, 1], vec![1.0, 2.0, 3.0]).unwrap();
        let c = Cspr::from_csr(&a);
        assert_eq!(c.indices(), &[0, 2, 4]);
        assert_eq!(c.to_csr().unwrap(), a);
        assert!(matches!(
            Cspr::try_new(2, 3, vec![4, 2], vec![1.0, 1.0]).unwrap_err(),
            FormatError::Unsorted { .. }
        ));
        assert!(matches!(
            Cspr::try_new(2, 3, vec![4, 4], vec![1.0, 1.0]).unwrap_err(),
            FormatError::Duplicate { row: 1, col: 1, .. }
        ));
        assert!(matches!(
            Cspr::try_new(2, 3, vec![6], vec![1.0]).unwrap_err(),
            FormatError::IndexOutOfBounds {
                index: 6,
                bound: 6,
                ..
            }
        ));
    }
}
