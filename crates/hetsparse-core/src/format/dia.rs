use super::{check_len, check_shape, Csr};
use crate::error::{Error, FormatError};
use crate::host;
use crate::scalar::Scalar;

/// Diagonal storage for band matrices (Matam et al. §IV.C).
///
/// `offsets[d]` is the distance of diagonal `d` from the main diagonal (positive above it), in
/// strictly increasing order. `data` is `nrows × ndiags` in column-major order, so each diagonal is
/// contiguous: `data[d * nrows + i]` holds `A[i, i + offsets[d]]`. Slots that fall outside the
/// matrix are padding and must be zero. A diagonal has no structure of its own, so converting to
/// CSR keeps only the non-zero values.
#[derive(Clone, Debug, PartialEq)]
pub struct Dia<T> {
    nrows: usize,
    ncols: usize,
    offsets: Vec<i64>,
    data: Vec<T>,
}

impl<T: Scalar> Dia<T> {
    /// Builds from offsets and column-major diagonal data, checking every invariant.
    pub fn try_new(
        nrows: usize,
        ncols: usize,
        offsets: Vec<i64>,
        data: Vec<T>,
    ) -> Result<Self, FormatError> {
        check_shape("DIA", nrows, ncols)?;
        let len =
            (nrows as u64)
                .checked_mul(offsets.len() as u64)
                .ok_or(FormatError::ShapeOverflow {
                    format: "DIA",
                    nrows: nrows as u64,
                    ncols: ncols as u64,
                    reason: "rows × diagonals overflows u64",
                })?;
        check_len("DIA", "data", len, data.len())?;
        for (d, &off) in offsets.iter().enumerate() {
            if off <= -(nrows as i64) || off >= ncols as i64 {
                return Err(FormatError::InvalidParameter {
                    format: "DIA",
                    what: format!(
                        "diagonal {d} has offset {off}, outside a {nrows}×{ncols} matrix"
                    ),
                });
            }
            if d > 0 && offsets[d - 1] >= off {
                return Err(FormatError::InvalidParameter {
                    format: "DIA",
                    what: format!(
                        "offsets must be strictly increasing: offset {} at position {} follows {}",
                        off,
                        d,
                        offsets[d - 1]
                    ),
                });
            }
            let zero = T::zero();
            let column = &data[d * nrows..(d + 1) * nrows];
            if let Some(i) = (0..nrows).find(|&i| {
                let j = i as i64 + off;
                (j < 0 || j >= ncols as i64) && column[i] != zero
            }) {
                return Err(FormatError::InvalidParameter {
                    format: "DIA",
                    what: format!(
                        "padding slot of diagonal {d} (offset {off}) at row {i} holds a non-zero value"
                    ),
                });
            }
        }
        Ok(Dia {
            nrows,
            ncols,
            offsets,
            data,
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
    /// Diagonal offsets, increasing.
    pub fn offsets(&self) -> &[i64] {
        &self.offsets
    }
    /// Number of stored diagonals.
    pub fn ndiags(&self) -> usize {
        self.offsets.len()
    }
    /// Column-major diagonal data, `nrows` per diagonal.
    pub fn data(&self) -> &[T] {
        &self.data
    }
    /// Diagonal `d`, indexed by row.
    pub fn diagonal(&self, d: usize) -> &[T] {
        &self.data[d * self.nrows..(d + 1) * self.nrows]
    }
    /// `(nrows, ncols, offsets, data)`.
    pub fn into_parts(self) -> (usize, usize, Vec<i64>, Vec<T>) {
        (self.nrows, self.ncols, self.offsets, self.data)
    }

    /// Stores every diagonal of `a` that holds an entry. Errors when the diagonals and the
    /// working arrays that find them (9 bytes per row and column) would need more than
    /// `max_bytes` (a scattered matrix can need `nrows × (nrows + ncols)` slots), and with
    /// [`Error::OutOfMemory`] when the host cannot hold them.
    pub fn from_csr(a: &Csr<T>, max_bytes: u64) -> Result<Self, Error> {
        let (nrows, ncols) = a.shape();
        let lines = nrows + ncols;
        let working_bytes = (lines as u64)
            .saturating_mul((std::mem::size_of::<bool>() + std::mem::size_of::<usize>()) as u64);
        let over_budget = |ndiags: usize, bytes: u64| {
            Error::from(FormatError::InvalidParameter {
                format: "DIA",
                what: format!(
                    "{ndiags} diagonals of {nrows} rows and the working arrays need {bytes} bytes, more than the {max_bytes} allowed"
                ),
            })
        };
        if working_bytes > max_bytes {
            return Err(over_budget(0, working_bytes));
        }
        let mut present = host::try_filled(lines, false, "DIA diagonal flags")?;
        for i in 0..nrows {
            for &j in a.row(i).0 {
                present[(j as i64 - i as i64 + nrows as i64) as usize] = true;
            }
        }
        let offsets: Vec<i64> = present
            .iter()
            .enumerate()
            .filter(|(_, &p)| p)
            .map(|(k, _)| k as i64 - nrows as i64)
            .collect();
        let bytes = (nrows as u64)
            .saturating_mul(offsets.len() as u64)
            .saturating_mul(std::mem::size_of::<T>() as u64)
            .saturating_add(working_bytes);
        if bytes > max_bytes {
            return Err(over_budget(offsets.len(), bytes));
        }
        drop(present);
        let mut slot = host::try_filled(lines, usize::MAX, "DIA diagonal slots")?;
        for (d, &off) in offsets.iter().enumerate() {
            slot[(off + nrows as i64) as usize] = d;
        }
        let mut data = host::try_filled(nrows * offsets.len(), T::zero(), "DIA diagonals")?;
        for i in 0..nrows {
            let (cols, vals) = a.row(i);
            for (&j, &v) in cols.iter().zip(vals) {
                let d = slot[(j as i64 - i as i64 + nrows as i64) as usize];
                data[d * nrows + i] = v;
            }
        }
        Ok(Dia {
            nrows,
            ncols,
            offsets,
            data,
        })
    }

    /// CSR holding the non-zero values of the band: a zero slot of a diagonal is padding, not
    /// an entry (the rule every SpMV and SpMM follows, so `0 × inf` is never computed for it).
    /// [`Error::OutOfMemory`] when the host cannot hold the `rows + 1` row offsets.
    pub fn to_csr(&self) -> Result<Csr<T>, Error> {
        let zero = T::zero();
        let mut row_offsets = host::try_with_capacity(self.nrows + 1, "CSR row offsets")?;
        row_offsets.push(0u64);
        let mut cols = Vec::new();
        let mut vals = Vec::new();
        for i in 0..self.nrows {
            // Offsets increase, so columns come out sorted.
            for (d, &off) in self.offsets.iter().enumerate() {
                let j = i as i64 + off;
                if j < 0 || j >= self.ncols as i64 {
                    continue;
                }
                let v = self.data[d * self.nrows + i];
                if v != zero {
                    cols.push(j as u32);
                    vals.push(v);
                }
            }
            row_offsets.push(cols.len() as u64);
        }
        // SAFETY: columns are in bounds and strictly increasing per row by construction.
        Ok(unsafe { Csr::from_parts_unchecked(self.nrows, self.ncols, row_offsets, cols, vals) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tridiagonal_round_trips() {
        let a = Csr::try_new(
            3,
            3,
            vec![0, 2, 5, 7],
            vec![0, 1, 0, 1, 2, 1, 2],
            vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0],
        )
        .unwrap();
        let d = Dia::from_csr(&a, u64::MAX).unwrap();
        assert_eq!(d.offsets(), &[-1, 0, 1]);
        assert_eq!(d.diagonal(0), &[0.0, 3.0, 6.0]);
        assert_eq!(d.diagonal(2), &[2.0, 5.0, 0.0]);
        assert_eq!(d.to_csr().unwrap(), a);
        assert!(Dia::from_csr(&a, 8).is_err());
        // 3 diagonals of 3 rows (72 bytes) and 9 bytes for each of 6 rows and columns.
        assert!(Dia::from_csr(&a, 72 + 54).is_ok());
        let e = Dia::from_csr(&a, 72).unwrap_err();
        assert!(e.to_string().contains("need 126 bytes"), "{e}");
    }

    #[test]
    fn working_arrays_count_against_the_limit_before_they_are_allocated() {
        // One entry in a row of u32::MAX columns: the diagonal flags alone would take 36 GiB.
        let wide = Csr::try_new(1, u32::MAX as usize, vec![0, 1], vec![7], vec![1.0f64]).unwrap();
        let e = Dia::from_csr(&wide, 1 << 20).unwrap_err();
        assert!(
            matches!(e, Error::Format(FormatError::InvalidParameter { .. })),
            "{e}"
        );
        assert!(
            e.to_string()
                .contains(&format!("need {} bytes", (u32::MAX as u64 + 1) * 9)),
            "{e}"
        );
    }

    #[test]
    fn bad_diagonals_are_rejected() {
        let e = Dia::try_new(2, 2, vec![2], vec![0.0, 0.0]).unwrap_err();
        assert!(e.to_string().contains("outside"));
        let e = Dia::try_new(2, 2, vec![1, 0], vec![0.0; 4]).unwrap_err();
        assert!(e.to_string().contains("strictly increasing"));
        let e = Dia::try_new(2, 2, vec![1], vec![1.0, 1.0]).unwrap_err();
        assert!(e.to_string().contains("padding"));
        let e = Dia::try_new(2, 2, vec![0], vec![1.0]).unwrap_err();
        assert!(matches!(e, FormatError::LengthMismatch { .. }));
    }
}
