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
            // Padding is the rows before column 0 and from column `ncols` on: only those are
            // read (a full scan would cost a pass over every diagonal).
            let inside_from = (-off).clamp(0, nrows as i64) as usize;
            let inside_to = (ncols as i64 - off).clamp(inside_from as i64, nrows as i64) as usize;
            if let Some(i) = (0..inside_from)
                .chain(inside_to..nrows)
                .find(|&i| column[i] != zero)
            {
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

impl<T: Scalar> Dia<T> {
    /// The diagonals of `self · b` (`self` `m × k`, `b` `k × n`): every sum `oa + ob` of their
    /// offsets with at least one row `i` where both meet inside the matrices (`0 <= i < m`,
    /// `0 <= i + oa < k`, `0 <= i + oa + ob < n`), increasing. A diagonal whose products all
    /// cancel is still one of them.
    pub fn product_offsets(&self, b: &Dia<T>) -> Vec<i64> {
        product_offsets(self, b)
    }
}

fn product_offsets<T: Scalar>(a: &Dia<T>, b: &Dia<T>) -> Vec<i64> {
    let (m, k, n) = (a.nrows() as i64, a.ncols() as i64, b.ncols() as i64);
    let mut sums = Vec::with_capacity(a.ndiags() * b.ndiags());
    for &oa in a.offsets() {
        for &ob in b.offsets() {
            let first = 0i64.max(-oa).max(-oa - ob);
            let last = m.min(k - oa).min(n - oa - ob);
            if first < last {
                sums.push(oa + ob);
            }
        }
    }
    sums.sort_unstable();
    sums.dedup();
    sums
}

/// Rows `rows` of `C = A · B` for band matrices as a DIA product of their own: rows `rows` of
/// A over the columns `inner` its band reaches there, times rows `inner` of B (all its
/// columns). Diagonal `s` of C is the block product's diagonal `s + rows.start`. A scheduler
/// splitting a band product by rows (Matam et al. §IV.C) gives each device one block; the
/// device reads the kept diagonals' rows where they lie.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiaRowBlock {
    /// Rows of A and of C.
    pub rows: std::ops::Range<usize>,
    /// Columns of A (rows of B) the block reads.
    pub inner: std::ops::Range<usize>,
    /// A's diagonals holding a slot inside the block: (position in A, offset in the block).
    pub a_diagonals: Vec<(usize, i64)>,
    /// B's diagonals holding a slot inside rows `inner`: (position in B, offset in the block).
    pub b_diagonals: Vec<(usize, i64)>,
}

impl DiaRowBlock {
    /// The block of rows `rows` of `a · b`, or `None` when A's band holds no slot inside the
    /// matrices there (those rows of C are zero). The shapes must chain and `rows` lie inside
    /// A's rows (the caller checks).
    pub fn new<T: Scalar>(a: &Dia<T>, b: &Dia<T>, rows: std::ops::Range<usize>) -> Option<Self> {
        let (&low, &high) = (a.offsets().first()?, a.offsets().last()?);
        let k = a.ncols() as i64;
        let (r0, r1) = (rows.start as i64, rows.end as i64);
        let (k0, k1) = ((r0 + low).clamp(0, k), (r1 + high).clamp(0, k));
        if rows.is_empty() || k0 >= k1 {
            return None;
        }
        // A slot of a kept diagonal outside the block's columns is outside A too (the columns
        // are clamped only at A's edges), so it is padding and zero.
        let a_diagonals: Vec<(usize, i64)> = a
            .offsets()
            .iter()
            .enumerate()
            .map(|(d, &off)| (d, off + r0 - k0))
            .filter(|&(_, off)| off > -(r1 - r0) && off < k1 - k0)
            .collect();
        if a_diagonals.is_empty() {
            return None;
        }
        let n = b.ncols() as i64;
        let b_diagonals = b
            .offsets()
            .iter()
            .enumerate()
            .map(|(d, &off)| (d, off + k0))
            .filter(|&(_, off)| off > -(k1 - k0) && off < n)
            .collect();
        Some(DiaRowBlock {
            rows,
            inner: k0 as usize..k1 as usize,
            a_diagonals,
            b_diagonals,
        })
    }

    /// The block's operands as DIA matrices of their own (copies of the kept diagonals' rows).
    pub fn operands<T: Scalar>(&self, a: &Dia<T>, b: &Dia<T>) -> Result<(Dia<T>, Dia<T>), Error> {
        let copy = |m: &Dia<T>, kept: &[(usize, i64)], rows: &std::ops::Range<usize>| {
            let mut data = host::try_with_capacity(kept.len() * rows.len(), "DIA row block")?;
            for &(d, _) in kept {
                data.extend_from_slice(&m.diagonal(d)[rows.clone()]);
            }
            let offsets = kept.iter().map(|&(_, off)| off).collect();
            Ok::<_, Error>((offsets, data))
        };
        let (a_offsets, a_data) = copy(a, &self.a_diagonals, &self.rows)?;
        let (b_offsets, b_data) = copy(b, &self.b_diagonals, &self.inner)?;
        Ok((
            Dia::try_new(self.rows.len(), self.inner.len(), a_offsets, a_data)?,
            Dia::try_new(self.inner.len(), b.ncols(), b_offsets, b_data)?,
        ))
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
        // 4 × 3: diagonal -2 pads rows 0 and 1; diagonal 1 pads rows 2 and 3; the main
        // diagonal pads row 3. Every padding slot is checked, and only those.
        for (off, row) in [(-2, 0), (-2, 1), (1, 2), (1, 3), (0, 3)] {
            let mut data = vec![1.0; 4];
            let e = Dia::try_new(4, 3, vec![off], data.clone());
            assert!(e.is_err(), "offset {off}: every padding slot holds 1");
            data.iter_mut().enumerate().for_each(|(i, x)| {
                let j = i as i64 + off;
                if !(0..3).contains(&j) {
                    *x = 0.0;
                }
            });
            assert!(
                Dia::try_new(4, 3, vec![off], data.clone()).is_ok(),
                "offset {off}"
            );
            data[row] = 2.0;
            let e = Dia::try_new(4, 3, vec![off], data).unwrap_err();
            assert!(
                e.to_string().contains(&format!("at row {row}")),
                "offset {off}: {e}"
            );
        }
        let e = Dia::try_new(2, 2, vec![0], vec![1.0]).unwrap_err();
        assert!(matches!(e, FormatError::LengthMismatch { .. }));
    }

    fn band(rows: usize, cols: usize, offsets: &[i64], seed: u64) -> Dia<f64> {
        crate::generate::band_dia(rows, cols, offsets, seed).expect("band")
    }

    /// Rows written in place block by block ([`Backend::dia_spgemm_rows`]'s default, over
    /// [`DiaRowBlock`]) put together equal the whole product.
    #[test]
    fn row_blocks_put_together_equal_the_whole_product() {
        use crate::backend::Backend;
        use std::mem::MaybeUninit;
        let cases = [
            (
                band(40, 40, &[-3, -1, 0, 2, 5], 1),
                band(40, 40, &[-2, 0, 1], 2),
            ),
            (
                band(30, 50, &[-4, 0, 7, 20], 3),
                band(50, 25, &[-30, -1, 0, 3], 4),
            ),
            (band(25, 25, &[-24, 24], 5), band(25, 25, &[0], 6)),
        ];
        let backend = crate::ReferenceBackend;
        for (k, (a, b)) in cases.iter().enumerate() {
            let whole = backend.dia_spgemm(a, b).unwrap();
            let offsets = a.product_offsets(b);
            let m = a.nrows();
            for cuts in [
                vec![0, 1, m],
                vec![0, 7, 19, 23, m],
                vec![0, 13, m],
                vec![0, m],
            ] {
                let mut data = vec![MaybeUninit::new(f64::NAN); m * offsets.len()];
                for w in cuts.windows(2) {
                    let mut c: Vec<&mut [MaybeUninit<f64>]> =
                        data.chunks_mut(m).map(|d| &mut d[w[0]..w[1]]).collect();
                    backend
                        .dia_spgemm_rows(a, b, w[0]..w[1], &offsets, &mut c)
                        .unwrap();
                }
                // SAFETY: initialised above (NaN), and every slot was written again.
                let data: Vec<f64> = data
                    .into_iter()
                    .map(|x| unsafe { x.assume_init() })
                    .collect();
                assert!(
                    data.iter().all(|x| !x.is_nan()),
                    "case {k}: every slot written"
                );
                let c = Dia::try_new(m, b.ncols(), offsets.clone(), data).unwrap();
                assert_eq!(
                    c.to_csr().unwrap(),
                    whole.to_csr().unwrap(),
                    "case {k}, {cuts:?}"
                );
            }
            // Offsets missing one of C's diagonals are refused.
            let mut short = vec![MaybeUninit::new(0.0); m * (offsets.len() - 1)];
            let mut c: Vec<&mut [MaybeUninit<f64>]> = short.chunks_mut(m).collect();
            assert!(backend
                .dia_spgemm_rows(a, b, 0..m, &offsets[1..], &mut c)
                .is_err());
        }
    }
}
