//! GraphBLAS's write-back of a product into an existing C: `C⟨M, replace⟩ = accum(C, T)`.
//!
//! Backends compute a product `T = A · B` (with its semiring and mask) as a new matrix; none
//! takes an input C. Merging it into a C, with an accumulator and a mask's replace, is this
//! one element-wise pass on the host, the same whatever backend computed `T`:
//!
//! 1. `Z = accum(C, T)`: the union of both patterns, `accum(c, t)` where both hold an entry
//!    (without an accumulator, `Z = T`);
//! 2. where the mask admits a position, C's new entry is Z's (none where Z has none); where it
//!    refuses one, C's old entry is kept, or removed with a replacing mask.

use std::ops::Range;

use crate::backend::{AccumulateOp, Mask};
use crate::error::{Error, Result};
use crate::format::Csr;
use crate::scalar::Scalar;

/// `C⟨mask, replace⟩ = accum(C, T)`: `c` merged with the product `t`
/// (of C's shape) through `accumulator` (none: `t` replaces), on the positions `mask` admits
/// (all without a mask). [`Error::InvalidArgument`] for shapes that differ and for `Min` /
/// `Max` over complex values.
///
/// ```
/// use hetsparse_core::{write_back, AccumulateOp, Csr, Mask};
/// let c = Csr::try_new(1, 3, vec![0, 2], vec![0, 1], vec![1.0, 5.0])?;
/// let t = Csr::try_new(1, 3, vec![0, 2], vec![1, 2], vec![2.0, 7.0])?;
/// let z = write_back(&c, &t, None, Some(AccumulateOp::Min))?;
/// assert_eq!((z.col_indices(), z.values()), (&[0, 1, 2][..], &[1.0, 2.0, 7.0][..]));
/// // Only column 2 admitted, and replace: column 0 and 1 of C are dropped.
/// let m = Csr::try_new(1, 3, vec![0, 1], vec![2], vec![1.0])?;
/// let z = write_back(&c, &t, Some(&Mask::structural(&m).replacing()), None)?;
/// assert_eq!((z.col_indices(), z.values()), (&[2][..], &[7.0][..]));
/// # Ok::<(), hetsparse_core::Error>(())
/// ```
pub fn write_back<T: Scalar>(
    c: &Csr<T>,
    t: &Csr<T>,
    mask: Option<&Mask>,
    accumulator: Option<AccumulateOp>,
) -> Result<Csr<T>> {
    check(c, t, mask, accumulator)?;
    merge(c, t, mask, accumulator)
}

/// The operands [`write_back`] refuses: shapes that differ, `Min` / `Max` over complex values.
fn check<T: Scalar>(
    c: &Csr<T>,
    t: &Csr<T>,
    mask: Option<&Mask>,
    accumulator: Option<AccumulateOp>,
) -> Result<()> {
    if c.shape() != t.shape() || mask.is_some_and(|m| m.shape() != c.shape()) {
        return Err(Error::InvalidArgument(format!(
            "write-back: C is {:?}, the product {:?}, the mask {:?}",
            c.shape(),
            t.shape(),
            mask.map(Mask::shape)
        )));
    }
    if T::TYPE.is_complex() && matches!(accumulator, Some(AccumulateOp::Min | AccumulateOp::Max)) {
        return Err(Error::InvalidArgument(format!(
            "write-back: the {} accumulator over complex values",
            accumulator.map_or(String::new(), |a| a.to_string())
        )));
    }
    Ok(())
}

/// [`write_back`] taking the product by value: into a C that holds no entry (a new C, as for
/// a product returned rather than merged), `T` is the result itself, moved rather than copied
/// once one pass over its columns finds every entry admitted by the mask — as a backend's
/// masked product's are, since it computes only admitted positions. Otherwise the merge of
/// [`write_back`]. Errors: those of [`write_back`].
pub fn write_back_owned<T: Scalar>(
    c: &Csr<T>,
    t: Csr<T>,
    mask: Option<&Mask>,
    accumulator: Option<AccumulateOp>,
) -> Result<Csr<T>> {
    check(c, &t, mask, accumulator)?;
    // With C empty, the accumulator never combines two entries: each admitted one is T's.
    if c.nnz() == 0 && admits_all(&t, mask) {
        return Ok(t);
    }
    merge(c, &t, mask, accumulator)
}

/// [`write_back_owned`] into a new C, one with no entries of `t`'s shape (a product returned
/// rather than merged into a C), without building that C: `t` itself, moved, where `mask`
/// admits every entry (as a backend's masked product's are), else `t`'s admitted entries.
/// Errors: those of [`write_back`].
pub fn write_back_new<T: Scalar>(
    t: Csr<T>,
    mask: Option<&Mask>,
    accumulator: Option<AccumulateOp>,
) -> Result<Csr<T>> {
    check(&t, &t, mask, accumulator)?;
    if admits_all(&t, mask) {
        return Ok(t);
    }
    merge(&Csr::zeros(t.nrows(), t.ncols())?, &t, mask, accumulator)
}

/// Whether `mask` (none: every position) admits every entry of `t` (of its shape): a
/// bit (or byte) looked up per entry of a bitmap (or bytes) mask, a merge of each row with the mask's row else.
/// In parallel: a graph algorithm's product may have tens of millions of entries, and this
/// pass runs on every product returned.
fn admits_all<T: Scalar>(t: &Csr<T>, mask: Option<&Mask>) -> bool {
    use rayon::prelude::*;
    /// Rows or entries one task checks at least; fewer in all are checked on the calling
    /// thread, which a graph algorithm's thousands of small products would otherwise pay a
    /// hand-off to the pool for.
    const MIN_PER_TASK: usize = 1 << 14;
    let Some(mask) = mask else {
        return true;
    };
    let small = t.col_indices().len() < MIN_PER_TASK && t.nrows() < MIN_PER_TASK;
    if mask.bitmap().is_some() || mask.bytes().is_some() {
        let admitted = |&j: &u32| mask.admits(0, j);
        return if small {
            t.col_indices().iter().all(admitted)
        } else {
            t.col_indices()
                .par_iter()
                .with_min_len(MIN_PER_TASK)
                .all(admitted)
        };
    }
    let (m_offsets, m_cols) = (mask.row_offsets(), mask.col_indices());
    let (t_offsets, t_cols) = (t.row_offsets(), t.col_indices());
    let row_admitted = |i: usize| {
        let held = &m_cols[m_offsets[i] as usize..m_offsets[i + 1] as usize];
        let mut p = 0;
        t_cols[t_offsets[i] as usize..t_offsets[i + 1] as usize]
            .iter()
            .all(|&j| {
                while p < held.len() && held[p] < j {
                    p += 1;
                }
                (p < held.len() && held[p] == j) != mask.is_complemented()
            })
    };
    let rows_admitted = |rows: Range<usize>| all_nonempty_rows(t_offsets, rows, &row_admitted);
    if small {
        rows_admitted(0..t.nrows())
    } else {
        let tasks = t.nrows().div_ceil(MIN_PER_TASK);
        (0..tasks).into_par_iter().all(|task| {
            rows_admitted(task * MIN_PER_TASK..((task + 1) * MIN_PER_TASK).min(t.nrows()))
        })
    }
}

/// Whether `f` holds for every row of `rows` that has entries by `offsets`. Runs of empty rows
/// are skipped by halving (the offsets of a run's ends are equal), so a product of a few
/// entries in many rows (a masked product of a sparse graph) costs about its entries times
/// the halvings, not a pass over every row.
fn all_nonempty_rows(offsets: &[u64], rows: Range<usize>, f: &impl Fn(usize) -> bool) -> bool {
    /// Rows below which a range is walked row by row.
    const WALK: usize = 32;
    if offsets[rows.start] == offsets[rows.end] {
        return true;
    }
    if rows.len() <= WALK {
        return rows.filter(|&i| offsets[i] != offsets[i + 1]).all(f);
    }
    let mid = rows.start + rows.len() / 2;
    all_nonempty_rows(offsets, rows.start..mid, f) && all_nonempty_rows(offsets, mid..rows.end, f)
}

/// The element-wise pass of [`write_back`], on operands it checked.
fn merge<T: Scalar>(
    c: &Csr<T>,
    t: &Csr<T>,
    mask: Option<&Mask>,
    accumulator: Option<AccumulateOp>,
) -> Result<Csr<T>> {
    let _span = tracing::debug_span!("write_back", nnz_c = c.nnz(), nnz_t = t.nnz()).entered();
    let combine = |x: T, y: T| -> T {
        match accumulator {
            None | Some(AccumulateOp::Second) => y,
            Some(AccumulateOp::Plus) => T::from_acc(x.to_acc() + y.to_acc()),
            Some(AccumulateOp::Times) => T::from_acc(x.to_acc() * y.to_acc()),
            // Compared by `Scalar::real_lt`: exact for 64-bit integers too, which f64 rounds.
            Some(AccumulateOp::Min) => {
                if y.real_lt(x) || x.to_parts().0.is_nan() {
                    y
                } else {
                    x
                }
            }
            Some(AccumulateOp::Max) => {
                if x.real_lt(y) || x.to_parts().0.is_nan() {
                    y
                } else {
                    x
                }
            }
        }
    };
    let replace = mask.is_some_and(Mask::is_replacing);
    let mut offsets = Vec::with_capacity(c.nrows() + 1);
    offsets.push(0u64);
    let (mut cols, mut vals) = (Vec::new(), Vec::new());
    for i in 0..c.nrows() {
        let (cc, cv) = c.row(i);
        let (tc, tv) = t.row(i);
        let (mut p, mut q) = (0, 0);
        while p < cc.len() || q < tc.len() {
            let j = match (cc.get(p), tc.get(q)) {
                (Some(&x), Some(&y)) => x.min(y),
                (Some(&x), None) => x,
                (None, Some(&y)) => y,
                (None, None) => break,
            };
            let old = (cc.get(p) == Some(&j)).then(|| cv[p]);
            let new = (tc.get(q) == Some(&j)).then(|| tv[q]);
            p += usize::from(old.is_some());
            q += usize::from(new.is_some());
            let admitted = mask.is_none_or(|m| m.admits(i, j));
            let value = if admitted {
                // Z = accum(C, T), or T alone without an accumulator.
                match (old, new, accumulator) {
                    (_, Some(y), None) => Some(y),
                    (_, None, None) => None,
                    (Some(x), Some(y), Some(_)) => Some(combine(x, y)),
                    (x, y, Some(_)) => x.or(y),
                }
            } else if replace {
                None
            } else {
                old
            };
            if let Some(v) = value {
                cols.push(j);
                vals.push(v);
            }
        }
        offsets.push(cols.len() as u64);
    }
    // SAFETY: each row merges two sorted rows of C's shape into one sorted row without
    // repeats.
    Ok(unsafe { Csr::from_parts_unchecked(c.nrows(), c.ncols(), offsets, cols, vals) })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Into an empty C, a product whose entries the mask admits is moved as it is; one with a
    /// refused entry, or a C with entries, is merged as by `write_back`; the checks stand.
    #[test]
    fn owned_products_into_an_empty_c_are_moved_when_admitted() {
        let empty = Csr::<f64>::zeros(2, 3).unwrap();
        let t = Csr::try_new(2, 3, vec![0, 2, 3], vec![1, 2, 0], vec![2.0, 7.0, 3.0]).unwrap();
        let values_at = t.values().as_ptr();
        let m = Csr::try_new(2, 3, vec![0, 2, 3], vec![1, 2, 0], vec![1.0; 3]).unwrap();
        let moved = write_back_owned(&empty, t.clone(), Some(&Mask::structural(&m)), None);
        assert_eq!(moved.as_ref().unwrap(), &t);
        let kept = write_back_owned(&empty, t, None, Some(AccumulateOp::Plus)).unwrap();
        assert_eq!(kept.values().as_ptr(), values_at, "moved, not copied");
        let t = kept;
        // Column 2 of row 0 refused: merged, and dropped.
        let narrow = Csr::try_new(2, 3, vec![0, 1, 2], vec![1, 0], vec![1.0; 2]).unwrap();
        let refused = write_back_owned(&empty, t.clone(), Some(&Mask::structural(&narrow)), None);
        assert_eq!(refused.unwrap().col_indices(), &[1, 0]);
        let complement = Mask::structural(&narrow).complemented();
        let merged = write_back_owned(&empty, t.clone(), Some(&complement), None).unwrap();
        assert_eq!(
            merged,
            write_back(&empty, &t, Some(&complement), None).unwrap()
        );
        let bits = Mask::from_bitmap(3, vec![0b110], crate::MaskKind::Structural).unwrap();
        let row = Csr::try_new(1, 3, vec![0, 2], vec![1, 2], vec![1.0, 2.0]).unwrap();
        let moved = write_back_owned(&Csr::zeros(1, 3).unwrap(), row.clone(), Some(&bits), None);
        assert_eq!(moved.unwrap(), row);
        let c = Csr::try_new(2, 3, vec![0, 1, 1], vec![0], vec![9.0]).unwrap();
        let plus = Some(AccumulateOp::Plus);
        assert_eq!(
            write_back_owned(&c, t.clone(), None, plus).unwrap(),
            write_back(&c, &t, None, plus).unwrap()
        );
        // Into a new C, the same as into an empty one, without building it.
        for mask in [
            None,
            Some(Mask::structural(&m)),
            Some(Mask::structural(&narrow)),
            Some(complement.clone()),
            Some(bits.clone()),
        ] {
            let t = if mask.as_ref().is_some_and(|m| m.shape() == (1, 3)) {
                row.clone()
            } else {
                t.clone()
            };
            let empty = Csr::zeros(t.nrows(), t.ncols()).unwrap();
            assert_eq!(
                write_back_new(t.clone(), mask.as_ref(), plus).unwrap(),
                write_back_owned(&empty, t, mask.as_ref(), plus).unwrap()
            );
        }
        let fresh = row.clone();
        let values_at = fresh.values().as_ptr();
        let moved = write_back_new(fresh, Some(&bits), None).unwrap();
        assert_eq!(moved.values().as_ptr(), values_at, "moved, not copied");
        let complex = Csr::<crate::Complex<f64>>::zeros(1, 1).unwrap();
        assert!(write_back_new(complex.clone(), None, Some(AccumulateOp::Max)).is_err());
        assert!(
            write_back_new(t.clone(), Some(&bits), None).is_err(),
            "a mask of another shape"
        );
        let max = Some(AccumulateOp::Max);
        assert!(write_back_owned(&complex, complex.clone(), None, max).is_err());
        assert!(write_back_owned(&empty, Csr::zeros(3, 3).unwrap(), None, None).is_err());
    }

    /// The check of a product against its mask looks at every row with entries, however
    /// long the runs of empty rows between them, in one task and over several.
    #[test]
    fn every_row_with_entries_is_checked_against_the_mask() {
        for nrows in [5, 31, 33, 1000, 100_003] {
            // Entries in the first, the last and a few scattered rows.
            let rows: Vec<usize> = [0, 1, 17, 32, nrows / 2, nrows / 2 + 1, nrows - 1]
                .into_iter()
                .filter(|&i| i < nrows)
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect();
            let of = |held: &[usize], col: u32| {
                let mut offsets = vec![0u64; nrows + 1];
                for &i in held {
                    offsets[i + 1] = 1;
                }
                for i in 0..nrows {
                    offsets[i + 1] += offsets[i];
                }
                let n = held.len();
                Csr::try_new(nrows, 4, offsets, vec![col; n], vec![1.0; n]).unwrap()
            };
            let t = of(&rows, 2);
            assert!(admits_all(&t, Some(&Mask::structural(&t))), "{nrows} rows");
            for &refused in &rows {
                // The mask has every row of T but one, whose entry is in another column.
                let m = Csr::try_new(
                    nrows,
                    4,
                    t.row_offsets().to_vec(),
                    rows.iter()
                        .map(|&i| if i == refused { 3 } else { 2 })
                        .collect(),
                    vec![1.0; rows.len()],
                )
                .unwrap();
                let mask = Mask::structural(&m);
                assert!(!admits_all(&t, Some(&mask)), "{nrows} rows, row {refused}");
                assert!(admits_all(&t, Some(&mask.complemented())) == (rows.len() == 1));
            }
            let empty = of(&[], 2);
            assert!(admits_all(&empty, Some(&Mask::structural(&t))));
        }
    }

    #[test]
    fn merge_and_replace_as_graphblas() {
        let c = Csr::try_new(2, 3, vec![0, 2, 3], vec![0, 1, 2], vec![1.0, 5.0, 4.0]).unwrap();
        let t = Csr::try_new(2, 3, vec![0, 2, 3], vec![1, 2, 0], vec![2.0, 7.0, 3.0]).unwrap();
        // No mask, no accumulator: T.
        assert_eq!(write_back(&c, &t, None, None).unwrap(), t);
        let z = write_back(&c, &t, None, Some(AccumulateOp::Plus)).unwrap();
        assert_eq!(z.values(), &[1.0, 7.0, 7.0, 3.0, 4.0]);
        // Mask admitting row 0 only: row 1 of C kept (merge) or dropped (replace).
        let m = Csr::try_new(2, 3, vec![0, 3, 3], vec![0, 1, 2], vec![1.0; 3]).unwrap();
        let merged = write_back(&c, &t, Some(&Mask::structural(&m)), None).unwrap();
        assert_eq!(merged.row(1), (&[2u32][..], &[4.0][..]));
        assert_eq!(merged.row(0), (&[1u32, 2][..], &[2.0, 7.0][..]));
        let replaced = write_back(&c, &t, Some(&Mask::structural(&m).replacing()), None).unwrap();
        assert_eq!(replaced.row_nnz(1), 0);
        let complex = Csr::<crate::Complex<f64>>::zeros(2, 3).unwrap();
        assert!(write_back(&complex, &complex, None, Some(AccumulateOp::Max)).is_err());
        assert!(write_back(&c, &Csr::zeros(3, 3).unwrap(), None, None).is_err());
    }

    #[test]
    fn min_and_max_compare_64_bit_integers_exactly() {
        // i64::MAX - 1 and - 3 are one f64: compared through it, min and max kept C's value.
        let (hi, lo) = (i64::MAX - 1, i64::MAX - 3);
        let c = Csr::try_new(1, 2, vec![0, 2], vec![0, 1], vec![hi, lo]).unwrap();
        let t = Csr::try_new(1, 2, vec![0, 2], vec![0, 1], vec![lo, hi]).unwrap();
        let min = write_back(&c, &t, None, Some(AccumulateOp::Min)).unwrap();
        assert_eq!(min.values(), &[lo, lo]);
        let max = write_back(&c, &t, None, Some(AccumulateOp::Max)).unwrap();
        assert_eq!(max.values(), &[hi, hi]);
        let (top, below) = (u64::MAX, u64::MAX - 2);
        let c = Csr::try_new(1, 1, vec![0, 1], vec![0], vec![top]).unwrap();
        let t = Csr::try_new(1, 1, vec![0, 1], vec![0], vec![below]).unwrap();
        let min = write_back(&c, &t, None, Some(AccumulateOp::Min)).unwrap();
        assert_eq!(min.values(), &[below]);
        let max = write_back(&t, &c, None, Some(AccumulateOp::Max)).unwrap();
        assert_eq!(max.values(), &[top]);
    }
}
