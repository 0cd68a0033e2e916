//! A CSR matrix read in place from two row blocks ([`SplicedCsr`]).

use std::borrow::Cow;
use std::ops::Range;

use rayon::prelude::*;

use super::csr::Csr;
use crate::error::{Error, Result};
use crate::host::try_with_capacity;
use crate::scalar::Scalar;

/// A CSR matrix whose rows are read in place from two matrices, without copying either: rows
/// `block_first..block_first + block.nrows()` are the rows of `block`, rows
/// `base_first..base_first + base.nrows()` outside those are the rows of `base`, and every
/// other row is empty.
///
/// This is how a distributed product's rank holds B: its own block of B's rows as it is, and
/// the rows it fetched from other ranks beside it (in `base`, empty where the own block
/// lies). A backend that reads B's rows one at a time (the CPU's) multiplies by it in place;
/// the others get the rows the product reaches copied into one matrix
/// ([`SplicedCsr::reached_by`]).
///
/// ```
/// use hetsparse_core::{Csr, SplicedCsr};
/// // Rows 1..3 of a 4 × 3 matrix from `block`, rows 0..4 from `base` (empty under the block).
/// let block = Csr::<f64>::try_new(2, 3, vec![0, 1, 2], vec![2, 0], vec![5.0, 6.0])?;
/// let base = Csr::<f64>::try_new(4, 3, vec![0, 1, 1, 1, 2], vec![1, 2], vec![1.0, 2.0])?;
/// let b = SplicedCsr::new(4, 3, (&base, 0), (&block, 1))?;
/// assert_eq!(b.nnz(), 4);
/// assert_eq!(b.row(1), (&[2u32][..], &[5.0][..]));
/// assert_eq!(b.row(3), (&[2u32][..], &[2.0][..]));
/// # Ok::<(), hetsparse_core::Error>(())
/// ```
#[derive(Clone, Copy, Debug)]
pub struct SplicedCsr<'a, T> {
    nrows: usize,
    ncols: usize,
    base: &'a Csr<T>,
    base_first: usize,
    block: &'a Csr<T>,
    block_first: usize,
}

impl<'a, T: Scalar> SplicedCsr<'a, T> {
    /// An `nrows × ncols` matrix of `base`'s rows from row `base.1` on and `block`'s rows from
    /// row `block.1` on. [`Error::InvalidArgument`] where either does not have `ncols` columns
    /// or reaches past row `nrows`, or where `base` holds entries in the rows `block` covers.
    pub fn new(
        nrows: usize,
        ncols: usize,
        base: (&'a Csr<T>, usize),
        block: (&'a Csr<T>, usize),
    ) -> Result<Self> {
        let ((base, base_first), (block, block_first)) = (base, block);
        for (what, m, first) in [("base", base, base_first), ("block", block, block_first)] {
            if m.ncols() != ncols {
                return Err(Error::InvalidArgument(format!(
                    "spliced CSR: the {what} has {} columns, the matrix {ncols}",
                    m.ncols()
                )));
            }
            if first.checked_add(m.nrows()).is_none_or(|end| end > nrows) {
                return Err(Error::InvalidArgument(format!(
                    "spliced CSR: the {what}'s {} rows from row {first} reach past the matrix's {nrows}",
                    m.nrows()
                )));
            }
        }
        // The base's rows under the block, as rows of the base: empty iff their offsets agree.
        let under = base_first.max(block_first)
            ..(base_first + base.nrows()).min(block_first + block.nrows());
        if under.start < under.end {
            let offsets = base.row_offsets();
            let (s, e) = (under.start - base_first, under.end - base_first);
            if offsets[s] != offsets[e] {
                return Err(Error::InvalidArgument(format!(
                    "spliced CSR: the base holds {} entries in rows {under:?}, which the block covers",
                    offsets[e] - offsets[s]
                )));
            }
        }
        Ok(SplicedCsr {
            nrows,
            ncols,
            base,
            base_first,
            block,
            block_first,
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

    /// Number of entries: the base's and the block's.
    pub fn nnz(&self) -> u64 {
        self.base.nnz() + self.block.nnz()
    }

    /// The base and the row it starts at.
    pub fn base(&self) -> (&'a Csr<T>, usize) {
        (self.base, self.base_first)
    }

    /// The block and the row it starts at.
    pub fn block(&self) -> (&'a Csr<T>, usize) {
        (self.block, self.block_first)
    }

    /// Row `i`'s column indices and values. Panics if `i >= nrows` (a programming error).
    pub fn row(&self, i: usize) -> (&'a [u32], &'a [T]) {
        assert!(
            i < self.nrows,
            "row {i} of a spliced CSR of {} rows",
            self.nrows
        );
        if let Some(k) = i.checked_sub(self.block_first) {
            if k < self.block.nrows() {
                return self.block.row(k);
            }
        }
        match i.checked_sub(self.base_first) {
            Some(k) if k < self.base.nrows() => self.base.row(k),
            _ => (&[], &[]),
        }
    }

    /// `(A', B')` with `A'·B' = A·B`, for a backend that reads B as one matrix: `B'` holds the
    /// rows of B from A's least column to its greatest (copied; empty where B is), and `A'` is
    /// A with its columns shifted down to them (A itself, not copied, where they start at 0).
    /// [`Error::ShapeMismatch`] where A's columns are not B's rows.
    pub fn reached_by<'x>(&self, a: &'x Csr<T>) -> Result<(Cow<'x, Csr<T>>, Csr<T>)> {
        if a.ncols() != self.nrows {
            return Err(Error::ShapeMismatch {
                op: "spgemm",
                left_rows: a.nrows() as u64,
                left_cols: a.ncols() as u64,
                right_rows: self.nrows as u64,
                right_cols: self.ncols as u64,
            });
        }
        let (offsets, cols) = (a.row_offsets(), a.col_indices());
        let (lo, hi) = (0..a.nrows())
            .into_par_iter()
            .with_min_len(4096)
            .filter(|&i| offsets[i] < offsets[i + 1])
            .map(|i| {
                (
                    cols[offsets[i] as usize] as usize,
                    cols[offsets[i + 1] as usize - 1] as usize + 1,
                )
            })
            .reduce(|| (usize::MAX, 0), |x, y| (x.0.min(y.0), x.1.max(y.1)));
        let rows = if lo < hi { lo..hi } else { 0..0 };
        let b = self.rows(rows.clone())?;
        if rows.start == 0 {
            // A's columns fit `b`'s rows as they are; only the column count changes.
            let (o, c, v) = a.arrays();
            // SAFETY: A's own arrays, whose columns all lie below `rows.end` (its greatest
            // column plus one, or 0 without entries).
            let a = unsafe {
                Csr::from_arrays_unchecked(a.nrows(), rows.end, o.clone(), c.clone(), v.clone())
            };
            return Ok((Cow::Owned(a), b));
        }
        let shift = rows.start as u32;
        let shifted: Vec<u32> = cols.par_iter().map(|&c| c - shift).collect();
        let (o, _, v) = a.arrays();
        // SAFETY: A's offsets and values, with every column shifted down by the least of them:
        // each row stays strictly increasing and every column below `rows.len()`.
        let a = unsafe {
            Csr::from_arrays_unchecked(a.nrows(), rows.len(), o.clone(), shifted.into(), v.clone())
        };
        Ok((Cow::Owned(a), b))
    }

    /// Rows `rows` of the matrix copied into one [`Csr`] (of `rows.len()` rows).
    pub fn rows(&self, rows: Range<usize>) -> Result<Csr<T>> {
        let rows = rows.start.min(self.nrows)..rows.end.min(self.nrows);
        let rows = rows.start..rows.end.max(rows.start);
        let row = |i: usize| self.row(i);
        let entries: u64 = rows.clone().map(|i| row(i).0.len() as u64).sum();
        let len = crate::host::entry_count(entries, "rows of a spliced CSR")?;
        let mut offsets = try_with_capacity(rows.len() + 1, "row offsets of spliced rows")?;
        let mut col_indices = try_with_capacity(len, "column indices of spliced rows")?;
        let mut values = try_with_capacity(len, "values of spliced rows")?;
        offsets.push(0u64);
        for i in rows.clone() {
            let (c, v) = row(i);
            col_indices.extend_from_slice(c);
            values.extend_from_slice(v);
            offsets.push(col_indices.len() as u64);
        }
        // SAFETY: rows of valid matrices of `ncols` columns, copied in order, each with its
        // offsets; one value for every column index.
        Ok(unsafe {
            Csr::from_parts_unchecked(rows.len(), self.ncols, offsets, col_indices, values)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rows `rows` of `m`, those in `empty` left without entries.
    fn rows_of(m: &Csr<f64>, rows: Range<usize>, empty: Range<usize>) -> Csr<f64> {
        let mut offsets = vec![0u64];
        let (mut cols, mut vals) = (Vec::new(), Vec::new());
        for i in rows {
            if !empty.contains(&i) {
                let (c, v) = m.row(i);
                cols.extend_from_slice(c);
                vals.extend_from_slice(v);
            }
            offsets.push(cols.len() as u64);
        }
        Csr::try_new(offsets.len() - 1, m.ncols(), offsets, cols, vals).expect("rows")
    }

    fn sample() -> Csr<f64> {
        crate::generate::product_operands::<f64>(crate::generate::MatrixClass::Road, 200, 7).1
    }

    #[test]
    fn rows_read_through_the_splice_are_the_matrix_rows() {
        let m = sample();
        let n = m.nrows();
        let block = rows_of(&m, 60..120, 0..0);
        let base = rows_of(&m, 20..n, 60..120);
        let s = SplicedCsr::new(n, m.ncols(), (&base, 20), (&block, 60)).expect("splice");
        assert_eq!(s.nnz(), base.nnz() + block.nnz());
        for i in 0..n {
            let expected = if i < 20 { (&[][..], &[][..]) } else { m.row(i) };
            assert_eq!(s.row(i), expected, "row {i}");
        }
        let copy = s.rows(10..150).expect("rows");
        assert_eq!(copy, rows_of(&m, 10..150, 10..20));
    }

    #[test]
    fn splices_that_do_not_fit_are_refused() {
        let m = sample();
        let n = m.nrows();
        let block = rows_of(&m, 60..120, 0..0);
        let full = rows_of(&m, 0..n, 0..0);
        let hollow = rows_of(&m, 0..n, 60..120);
        assert!(SplicedCsr::new(n, m.ncols(), (&hollow, 0), (&block, 60)).is_ok());
        // The base holds entries under the block.
        let e = SplicedCsr::new(n, m.ncols(), (&full, 0), (&block, 60)).unwrap_err();
        assert!(e.to_string().contains("which the block covers"), "{e}");
        // Past the last row, and wrong widths.
        assert!(SplicedCsr::new(n, m.ncols(), (&hollow, 0), (&block, n - 10)).is_err());
        assert!(SplicedCsr::new(n, m.ncols(), (&hollow, 1), (&block, 60)).is_err());
        assert!(SplicedCsr::new(n, m.ncols(), (&hollow, usize::MAX), (&block, 60)).is_err());
        assert!(SplicedCsr::new(n, m.ncols() + 1, (&hollow, 0), (&block, 60)).is_err());
    }

    #[test]
    fn reached_rows_and_shifted_columns_give_the_same_product() {
        let m = sample();
        let n = m.nrows();
        let block = rows_of(&m, 0..n, 0..0);
        let empty = rows_of(&m, 0..0, 0..0);
        let s = SplicedCsr::new(n, m.ncols(), (&empty, 0), (&block, 0)).expect("splice");
        // A whose columns run from 50 to 149.
        let mut offsets = vec![0u64];
        let (mut cols, mut vals) = (Vec::new(), Vec::new());
        for i in 0..30u32 {
            cols.extend(
                [50 + i, 100 + i, 149 - i]
                    .iter()
                    .copied()
                    .collect::<std::collections::BTreeSet<_>>(),
            );
            vals.resize(cols.len(), 1.5);
            offsets.push(cols.len() as u64);
        }
        let a = Csr::try_new(30, n, offsets, cols, vals).expect("A");
        let (a2, b2) = s.reached_by(&a).expect("reached");
        assert_eq!(b2, rows_of(&m, 50..150, 0..0));
        assert_eq!(a2.ncols(), 100);
        let direct = crate::reference::spgemm::<f64, crate::semiring::PlusTimes>(&a, &m).unwrap();
        let shifted =
            crate::reference::spgemm::<f64, crate::semiring::PlusTimes>(&a2, &b2).unwrap();
        assert_eq!(direct, shifted);
        let wrong = Csr::<f64>::zeros(3, n + 1).unwrap();
        assert!(matches!(
            s.reached_by(&wrong),
            Err(Error::ShapeMismatch { .. })
        ));
    }
}
