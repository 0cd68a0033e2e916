//! Masked Row-Row products, `C⟨M⟩ = A · B` (GraphBLAS's masked `mxm`, without accumulator).
//!
//! Row `i` of C is accumulated over the entries of row `i` of A as in [`super::row_row`], but
//! each product first asks the mask whether its column is admitted and is skipped, before it
//! is multiplied, when it is not. So a mask admitting few entries costs few multiply-adds:
//! triangle counting's `C⟨L⟩ = L · L` does a fraction of the unmasked product's.
//!
//! - **Mask not complemented**: C's row can only hold the mask row's columns, so the row is
//!   accumulated in a small array indexed by position in the mask row (its columns come out
//!   sorted, as the mask's are). A row whose mask row is empty is skipped outright.
//! - **Complemented**: the mask row lists the refused columns; admitted products are collected
//!   as (column, value) pairs, sorted and merged.
//!
//! A column is looked up in the mask row through a per-thread table of C's width (a slot per
//! column, set for the mask row's columns and cleared after the row) where C's window is at most
//! [`TABLE_COLUMNS`] wide, else by binary search in the mask row. Every algorithm of the CPU
//! backend routes masked products here.

use std::ops::Range;

use hetsparse_core::format::Csr;
use hetsparse_core::{Mask, MaskedWork, Result, Scalar, Semiring};
use rayon::prelude::*;

use super::{Operands, RangeReports, Watch};
use crate::plan;

/// Widest window of C whose columns are looked up in a table (4 MiB of `u32` per thread).
const TABLE_COLUMNS: usize = 1 << 20;

/// One thread's working memory.
struct MaskScratch<A> {
    /// Position + 1 in the mask row of each column of the window (0: not in it); all zero
    /// between rows. Empty where the window is too wide for a table.
    slot: Vec<u32>,
    /// Accumulators by position in the mask row, and whether a product landed there.
    values: Vec<A>,
    seen: Vec<bool>,
    /// Admitted products of a complemented row.
    pairs: Vec<(u32, A)>,
}

/// What one range of rows produced.
struct RangeOut<T> {
    counts: Vec<u64>,
    cols: Vec<u32>,
    vals: Vec<T>,
    work: MaskedWork,
}

/// `C⟨mask⟩ = A[rows, :] · B[:, cols]` over `S` for the operands `ops` of a product or chunk
/// (the mask has the whole product's shape: the chunk reads its rows and columns of it), with
/// the multiply-adds it did. Reports to `watch` range by range.
pub(super) fn multiply<T: Scalar, S: Semiring<T>>(
    ops: &Operands<'_, T>,
    mask: &Mask,
    watch: Watch<'_>,
) -> Result<(Csr<T>, MaskedWork)> {
    let _span = tracing::debug_span!(
        "masked",
        rows = ops.nrows,
        cols = ops.width(),
        mask_entries = mask.entries(),
        complemented = mask.is_complemented()
    )
    .entered();
    let products: Vec<u64> = (0..ops.nrows)
        .into_par_iter()
        .with_min_len(512)
        .map(|i| ops.row_products(i))
        .collect();
    let ranges = plan::balanced_ranges(&products);
    let reports = RangeReports::by_products(watch, &ranges, &products);
    let table = ops.width() <= TABLE_COLUMNS;
    let outs: Vec<RangeOut<T>> = ranges
        .par_iter()
        .enumerate()
        .map_init(
            || MaskScratch::<T::Acc> {
                slot: if table {
                    vec![0; ops.width()]
                } else {
                    Vec::new()
                },
                values: Vec::new(),
                seen: Vec::new(),
                pairs: Vec::new(),
            },
            |s, (r, range)| {
                reports.start()?;
                let out = compute_range::<T, S>(ops, mask, range.clone(), s);
                reports.finished(r);
                Ok(out)
            },
        )
        .collect::<Result<_>>()?;
    let nnz: usize = outs.iter().map(|o| o.cols.len()).sum();
    let mut offsets = Vec::with_capacity(ops.nrows + 1);
    offsets.push(0u64);
    let mut cols = Vec::with_capacity(nnz);
    let mut vals = Vec::with_capacity(nnz);
    let mut work = MaskedWork::default();
    for o in outs {
        for n in o.counts {
            offsets.push(offsets[offsets.len() - 1] + n);
        }
        cols.extend_from_slice(&o.cols);
        vals.extend_from_slice(&o.vals);
        work += o.work;
    }
    watch.run.add_masked_work(work);
    tracing::debug!(
        multiply_adds = work.multiply_adds,
        unmasked_multiply_adds = work.unmasked_multiply_adds,
        nnz,
        "masked SpGEMM"
    );
    // SAFETY: the ranges tile the rows in order; each row's columns are sorted and distinct
    // (mask row order, or sorted and merged) and inside the window.
    let c = unsafe { Csr::from_parts_unchecked(ops.nrows, ops.width(), offsets, cols, vals) };
    Ok((c, work))
}

/// Rows `range` of the chunk.
fn compute_range<T: Scalar, S: Semiring<T>>(
    ops: &Operands<'_, T>,
    mask: &Mask,
    range: Range<usize>,
    s: &mut MaskScratch<T::Acc>,
) -> RangeOut<T> {
    let mut out = RangeOut {
        counts: Vec::with_capacity(range.len()),
        cols: Vec::new(),
        vals: Vec::new(),
        work: MaskedWork::default(),
    };
    let (lo, hi) = (ops.lo, ops.hi);
    for i in range {
        let before = out.cols.len();
        let m = mask.row(ops.row_base + i);
        // The mask row inside the window.
        let m = &m[m.partition_point(|&j| j < lo)..];
        let m = &m[..m.partition_point(|&j| j < hi)];
        let (a_cols, a_vals) = ops.a_row(i);
        out.work.unmasked_multiply_adds += a_cols
            .iter()
            .map(|&k| ops.b_row(k).0.len() as u64)
            .sum::<u64>();
        if !s.slot.is_empty() {
            for (p, &j) in m.iter().enumerate() {
                // At most the window's width, below u32::MAX.
                s.slot[(j - lo) as usize] = p as u32 + 1;
            }
        }
        // Position + 1 of column `j` (of B) in the mask row, 0 when not in it.
        let position = |slot: &[u32], j: u32| -> usize {
            if slot.is_empty() {
                m.binary_search(&j).map_or(0, |p| p + 1)
            } else {
                slot[(j - lo) as usize] as usize
            }
        };
        if !mask.is_complemented() {
            if !m.is_empty() {
                s.values.clear();
                s.values.resize(m.len(), S::zero());
                s.seen.clear();
                s.seen.resize(m.len(), false);
                for (&k, &av) in a_cols.iter().zip(a_vals) {
                    let (b_cols, b_vals) = ops.b_row(k);
                    for (&j, &bv) in b_cols.iter().zip(b_vals) {
                        let p = position(&s.slot, j);
                        if p == 0 {
                            continue;
                        }
                        let (v, seen) = (&mut s.values[p - 1], &mut s.seen[p - 1]);
                        let x = S::mul_at(av, bv, k);
                        *v = if *seen { S::add(*v, x) } else { x };
                        *seen = true;
                        out.work.multiply_adds += 1;
                    }
                }
                for ((&j, &v), &seen) in m.iter().zip(&s.values).zip(&s.seen) {
                    if seen {
                        out.cols.push(j - lo);
                        out.vals.push(T::from_acc(v));
                    }
                }
            }
        } else {
            s.pairs.clear();
            for (&k, &av) in a_cols.iter().zip(a_vals) {
                let (b_cols, b_vals) = ops.b_row(k);
                for (&j, &bv) in b_cols.iter().zip(b_vals) {
                    if position(&s.slot, j) == 0 {
                        s.pairs.push((j, S::mul_at(av, bv, k)));
                    }
                }
            }
            out.work.multiply_adds += s.pairs.len() as u64;
            // Stable: products of one column stay in the order of A's row.
            s.pairs.sort_by_key(|p| p.0);
            for same in s.pairs.chunk_by(|p, q| p.0 == q.0) {
                let v = same[1..].iter().fold(same[0].1, |acc, p| S::add(acc, p.1));
                out.cols.push(same[0].0 - lo);
                out.vals.push(T::from_acc(v));
            }
        }
        if !s.slot.is_empty() {
            for &j in m {
                s.slot[(j - lo) as usize] = 0;
            }
        }
        out.counts.push((out.cols.len() - before) as u64);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use hetsparse_core::{generate, reference, CsrWindow, PlusTimes, RunControl};

    #[test]
    fn masked_rows_match_the_reference_in_tables_and_by_search() {
        let (a, b) = generate::product_operands::<f64>(generate::MatrixClass::PowerLaw, 400, 3);
        let full = reference::spgemm::<f64, PlusTimes>(&a, &b).unwrap();
        let (wa, wb) = (CsrWindow::whole(&a), CsrWindow::whole(&b));
        let run = RunControl::unwatched();
        let watch = Watch {
            run: &run,
            planned: 0,
        };
        for mask in [
            Mask::structural(&full),
            Mask::valued(&generate::uniform::<f64>(full.nrows(), full.ncols(), 3, 9)),
            Mask::structural(&a).complemented(),
        ] {
            let want = reference::spgemm_masked::<f64, PlusTimes>(&a, &b, Some(&mask)).unwrap();
            let ops = Operands::new(&wa, &wb, super::super::shape_of_b(&b)).unwrap();
            let (c, work) = multiply::<f64, PlusTimes>(&ops, &mask, watch).unwrap();
            assert_eq!(c.row_offsets(), want.row_offsets());
            assert_eq!(c.col_indices(), want.col_indices());
            assert!(work.multiply_adds <= work.unmasked_multiply_adds);
            // The same by binary search.
            let mut s = MaskScratch::<f64> {
                slot: Vec::new(),
                values: Vec::new(),
                seen: Vec::new(),
                pairs: Vec::new(),
            };
            let o = compute_range::<f64, PlusTimes>(&ops, &mask, 0..ops.nrows, &mut s);
            assert_eq!(o.cols, c.col_indices());
            assert_eq!(o.work, work);
        }
    }

    #[test]
    fn triangle_counting_does_a_fraction_of_the_multiply_adds() {
        // L, the strictly lower triangle of a random symmetric-ish graph.
        let g = generate::uniform::<f64>(2000, 2000, 12, 5);
        let mut coo = hetsparse_core::Coo::new(2000, 2000).unwrap();
        for i in 0..g.nrows() {
            for &j in g.row(i).0 {
                if (j as usize) < i {
                    coo.try_push(i, j as usize, 1.0).unwrap();
                }
            }
        }
        let l = coo.to_csr().unwrap();
        let (wl, run) = (CsrWindow::whole(&l), RunControl::unwatched());
        let ops = Operands::new(&wl, &wl, super::super::shape_of_b(&l)).unwrap();
        let watch = Watch {
            run: &run,
            planned: 0,
        };
        let (_, work) =
            multiply::<f64, hetsparse_core::semiring::PlusPair>(&ops, &Mask::structural(&l), watch)
                .unwrap();
        assert_eq!(
            work.unmasked_multiply_adds,
            hetsparse_core::analysis::total_products(&l, &l).unwrap()
        );
        assert_eq!(run.masked_work(), work, "the run hears of the work");
        assert!(
            work.multiply_adds * 4 < work.unmasked_multiply_adds,
            "{} of {} multiply-adds",
            work.multiply_adds,
            work.unmasked_multiply_adds
        );
    }
}
