use super::{check_len, check_shape, Csr};
use crate::error::{Error, FormatError};
use crate::host;
use crate::scalar::Scalar;

/// Rows of ELLPACK-R storage are padded to a multiple of this, so that each column of `E` and `J`
/// starts aligned for coalesced GPU loads (Ortega et al. §2 pad to 16 elements; a warp is 32).
pub const ELLR_ROW_ALIGN: usize = 32;

/// ELLPACK-R (Ortega et al., FastSpMM §2): `E` (values) and `J` (column indices), both
/// `padded_rows × width` in column-major order, and `rl`, the length of each row.
///
/// Entry `k` of row `i` sits at `k * padded_rows + i`, for `k < rl[i]`, with column indices
/// strictly increasing within a row; the slots past `rl[i]` are padding (value zero, column 0).
#[derive(Clone, Debug, PartialEq)]
pub struct Ellr<T> {
    nrows: usize,
    ncols: usize,
    padded_rows: usize,
    width: usize,
    values: Vec<T>,
    col_indices: Vec<u32>,
    row_lengths: Vec<u32>,
}

impl<T: Scalar> Ellr<T> {
    /// Builds from `E`, `J` and `rl`, checking every invariant.
    #[allow(clippy::too_many_arguments)]
    pub fn try_new(
        nrows: usize,
        ncols: usize,
        padded_rows: usize,
        width: usize,
        values: Vec<T>,
        col_indices: Vec<u32>,
        row_lengths: Vec<u32>,
    ) -> Result<Self, FormatError> {
        check_shape("ELLPACK-R", nrows, ncols)?;
        if padded_rows < nrows || padded_rows % ELLR_ROW_ALIGN != 0 {
            return Err(FormatError::InvalidParameter {
                format: "ELLPACK-R",
                what: format!(
                    "padded_rows {padded_rows} must be at least nrows {nrows} and a multiple of {ELLR_ROW_ALIGN}"
                ),
            });
        }
        let len = Self::slots("ELLPACK-R", nrows, ncols, padded_rows, width)?;
        check_len("ELLPACK-R", "E (values)", len, values.len())?;
        check_len("ELLPACK-R", "J (col_indices)", len, col_indices.len())?;
        check_len(
            "ELLPACK-R",
            "rl (row_lengths)",
            nrows as u64,
            row_lengths.len(),
        )?;
        for (i, &rl) in row_lengths.iter().enumerate() {
            if rl as usize > width {
                return Err(FormatError::InvalidParameter {
                    format: "ELLPACK-R",
                    what: format!("row {i} has length {rl}, more than the width {width}"),
                });
            }
            let mut prev: Option<u32> = None;
            for k in 0..rl as usize {
                let pos = k * padded_rows + i;
                let j = col_indices[pos];
                if j as usize >= ncols {
                    return Err(FormatError::IndexOutOfBounds {
                        format: "ELLPACK-R",
                        axis: "column",
                        position: pos as u64,
                        index: u64::from(j),
                        bound: ncols as u64,
                    });
                }
                if let Some(p) = prev {
                    if j <= p {
                        return Err(FormatError::Unsorted {
                            format: "ELLPACK-R",
                            axis: "row",
                            line: i as u64,
                            position: pos as u64,
                            previous: u64::from(p),
                            next: u64::from(j),
                        });
                    }
                }
                prev = Some(j);
            }
        }
        Ok(Ellr {
            nrows,
            ncols,
            padded_rows,
            width,
            values,
            col_indices,
            row_lengths,
        })
    }

    fn slots(
        format: &'static str,
        nrows: usize,
        ncols: usize,
        padded_rows: usize,
        width: usize,
    ) -> Result<u64, FormatError> {
        (padded_rows as u64)
            .checked_mul(width as u64)
            .filter(|&n| n <= usize::MAX as u64)
            .ok_or(FormatError::ShapeOverflow {
                format,
                nrows: nrows as u64,
                ncols: ncols as u64,
                reason: "padded rows × width does not fit in memory addresses",
            })
    }

    /// Converts from CSR; the width is the longest row. Errors when the padded arrays would need
    /// more than `max_bytes` (one very long row makes every row that long).
    pub fn from_csr(a: &Csr<T>, max_bytes: u64) -> Result<Self, Error> {
        let (nrows, ncols) = a.shape();
        let width = (0..nrows).map(|i| a.row_nnz(i)).max().unwrap_or(0) as usize;
        let padded_rows = nrows.div_ceil(ELLR_ROW_ALIGN) * ELLR_ROW_ALIGN;
        let len = Self::slots("ELLPACK-R", nrows, ncols, padded_rows, width)?;
        let bytes = len.saturating_mul((std::mem::size_of::<T>() + 4) as u64);
        if bytes > max_bytes {
            return Err(Error::Format(FormatError::InvalidParameter {
                format: "ELLPACK-R",
                what: format!(
                    "{padded_rows} padded rows of width {width} need {bytes} bytes, more than the {max_bytes} allowed"
                ),
            }));
        }
        let mut values = crate::host::try_filled(len as usize, T::zero(), "ELLPACK-R values")?;
        let mut col_indices =
            crate::host::try_filled(len as usize, 0u32, "ELLPACK-R column indices")?;
        let mut row_lengths = Vec::with_capacity(nrows);
        for i in 0..nrows {
            let (cols, vals) = a.row(i);
            for (k, (&j, &v)) in cols.iter().zip(vals).enumerate() {
                values[k * padded_rows + i] = v;
                col_indices[k * padded_rows + i] = j;
            }
            row_lengths.push(cols.len() as u32);
        }
        Ok(Ellr {
            nrows,
            ncols,
            padded_rows,
            width,
            values,
            col_indices,
            row_lengths,
        })
    }

    /// The same matrix in CSR (explicit zeros inside rows kept); [`Error::OutOfMemory`] when
    /// the host cannot hold it.
    pub fn to_csr(&self) -> Result<Csr<T>, Error> {
        let mut row_offsets = host::try_with_capacity(self.nrows + 1, "CSR row offsets")?;
        row_offsets.push(0u64);
        // nnz is at most the stored slots, which are in memory already.
        let nnz = self.nnz() as usize;
        let mut cols = host::try_with_capacity(nnz, "CSR column indices")?;
        let mut vals = host::try_with_capacity(nnz, "CSR values")?;
        for i in 0..self.nrows {
            for k in 0..self.row_lengths[i] as usize {
                cols.push(self.col_indices[k * self.padded_rows + i]);
                vals.push(self.values[k * self.padded_rows + i]);
            }
            row_offsets.push(cols.len() as u64);
        }
        // SAFETY: validated on construction: in bounds and sorted per row.
        Ok(unsafe { Csr::from_parts_unchecked(self.nrows, self.ncols, row_offsets, cols, vals) })
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
    /// `N'`: rows including alignment padding, the stride between columns of `E` and `J`.
    pub fn padded_rows(&self) -> usize {
        self.padded_rows
    }
    /// `Max_nzs`: the longest row, the number of columns of `E` and `J`.
    pub fn width(&self) -> usize {
        self.width
    }
    /// `E`, column-major.
    pub fn values(&self) -> &[T] {
        &self.values
    }
    /// `J`, column-major.
    pub fn col_indices(&self) -> &[u32] {
        &self.col_indices
    }
    /// `rl`: entries in each row.
    pub fn row_lengths(&self) -> &[u32] {
        &self.row_lengths
    }
    /// Number of stored entries (padding excluded).
    pub fn nnz(&self) -> u64 {
        self.row_lengths.iter().map(|&r| u64::from(r)).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_pads() {
        let a = Csr::try_new(
            3,
            4,
            vec![0, 2, 2, 5],
            vec![0, 3, 0, 1, 2],
            vec![1.0, 2.0, 3.0, 4.0, 5.0],
        )
        .unwrap();
        let e = Ellr::from_csr(&a, u64::MAX).unwrap();
        assert_eq!((e.padded_rows(), e.width()), (32, 3));
        assert_eq!(e.row_lengths(), &[2, 0, 3]);
        assert_eq!(e.values()[32 + 2], 4.0);
        assert_eq!(e.to_csr().unwrap(), a);
        assert!(Ellr::from_csr(&a, 100).is_err());
        let (v, j, r) = (
            e.values().to_vec(),
            e.col_indices().to_vec(),
            e.row_lengths().to_vec(),
        );
        assert!(Ellr::try_new(3, 4, 32, 3, v.clone(), j.clone(), r.clone()).is_ok());
        assert!(Ellr::try_new(3, 4, 30, 3, v.clone(), j.clone(), r.clone()).is_err());
        let mut bad = j.clone();
        bad[32 + 2] = 9;
        assert!(matches!(
            Ellr::try_new(3, 4, 32, 3, v.clone(), bad, r.clone()).unwrap_err(),
            FormatError::IndexOutOfBounds { index: 9, .. }
        ));
        let mut long = r.clone();
        long[1] = 4;
        assert!(Ellr::try_new(3, 4, 32, 3, v, j, long).is_err());
    }
}
