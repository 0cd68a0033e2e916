use super::{check_len, check_shape, Csr};
use crate::error::FormatError;
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

    /// Stores every diagonal of `a` that holds an entry. Errors when the diagonals would need
    /// more than `max_bytes` (a scattered matrix can need `nrows × (nrows + ncols)` slots).
    pub fn from_csr(a: &Csr<T>, max_bytes: u64) -> Result<Self, FormatError> {
        let (nrows, ncols) = a.shape();
        let mut present = vec![false; nrows + ncols];
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
            .saturating_mul(std::mem::size_of::<T>() as u64);
        if bytes > max_bytes {
            return Err(FormatError::InvalidParameter {
                format: "DIA",
                what: format!(
                    "{} diagonals of {} rows need {} bytes, more than the {} allowed",
                    offsets.len(),
                    nrows,
                    bytes,
                    max_bytes
                ),
            });
        }
        let mut slot = vec![usize::MAX; nrows + ncols];
        for (d, &off) in offsets.iter().enumerate() {
            slot[(off + nrows as i64) as usize] = d;
        }
        let mut data = vec![T::zero(); nrows * offsets.len()];
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

    /// CSR holding the non-zero values of the band.
    pub fn to_csr(&self) -> Csr<T> {
        let zero = T::zero();
        let mut row_offsets = Vec::with_capacity(self.nrows + 1);
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
        unsafe { Csr::from_parts_unchecked(self.nrows, self.ncols, row_offsets, cols, vals) }
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
        assert_eq!(d.to_csr(), a);
        assert!(Dia::from_csr(&a, 8).is_err());
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
