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
//! Every product asks whether its column is in the mask row, so the lookup is the inner loop:
//! a bit per column of C's window, set for the mask row's columns and cleared after the row,
//! answers it from a table small enough to stay in cache (a 4-million-column window's bitmap is
//! half a MiB, where a `u32` per column would be 16 MiB); only a product that hits asks for its
//! position in the mask row, from a slot table of the window's width (a `u32` per column)
//! where the window is at most [`SLOT_COLUMNS`] wide, else by binary search in the mask row.
//! Windows wider than [`BITMAP_COLUMNS`] search the mask row for every product. The tables
//! belong to the thread and outlive the product (see [`ColumnTables`]). Every algorithm of the
//! CPU backend routes masked products here.

use std::cell::RefCell;
use std::ops::Range;

use hetsparse_core::format::Csr;
use hetsparse_core::{Mask, MaskedWork, Result, Scalar, Semiring};
use rayon::prelude::*;

use super::{Operands, RangeReports, Watch};
use crate::{memory, plan};

/// Widest window of C whose columns' positions in the mask row come from a slot table (a
/// `u32` per column: up to 32 MiB per thread while such a product runs); wider windows search
/// the mask row on a hit.
const SLOT_COLUMNS: usize = 1 << 23;

/// Widest window of C with a bitmap of the mask row (a bit per column: up to 32 MiB per
/// thread); wider windows search the mask row for every product.
const BITMAP_COLUMNS: usize = 1 << 28;

/// Columns of the tables a thread keeps once a product is over (4.5 MiB): a product over a
/// wider window frees its larger tables when it ends.
const KEPT_COLUMNS: usize = 1 << 20;

/// How a row's products find their column in the mask row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lookup {
    /// The bitmap, then the slot table on a hit.
    BitsAndSlots,
    /// The bitmap, then binary search on a hit.
    Bits,
    /// Binary search for every product.
    Search,
}

impl Lookup {
    /// The fastest lookup whose tables fit a window `width` columns wide.
    fn for_width(width: usize) -> Self {
        if width <= SLOT_COLUMNS {
            Lookup::BitsAndSlots
        } else if width <= BITMAP_COLUMNS {
            Lookup::Bits
        } else {
            Lookup::Search
        }
    }
}

/// One thread's tables of the mask row's columns, indexed by column of the window: a bit per
/// column and the column's position + 1 in the mask row (0: not in it). All zero between rows.
///
/// Kept in a thread-local between products rather than made per task: a graph algorithm runs
/// thousands of products, and a fresh table costs its allocation and a page fault for every
/// page a row touches. Tables wider than [`KEPT_COLUMNS`] are freed when their product ends
/// ([`ColumnTables::release_wide`]).
#[derive(Default)]
struct ColumnTables {
    bits: Vec<u64>,
    slot: Vec<u32>,
    /// False while a row's columns are set: a panic in between leaves it false, and the next
    /// use clears the tables whole.
    clean: bool,
}

thread_local! {
    static COLUMN_TABLES: RefCell<ColumnTables> = RefCell::default();
}

impl ColumnTables {
    /// Makes the tables clean and large enough for `lookup` over `width` columns.
    fn fit(&mut self, lookup: Lookup, width: usize) {
        if !self.clean {
            self.bits.fill(0);
            self.slot.fill(0);
            self.clean = true;
        }
        if lookup != Lookup::Search && self.bits.len() < width.div_ceil(64) {
            self.bits.resize(width.div_ceil(64), 0);
        }
        if lookup == Lookup::BitsAndSlots && self.slot.len() < width {
            self.slot.resize(width, 0);
        }
    }
}

impl ColumnTables {
    /// Frees this thread's tables where they are wider than [`KEPT_COLUMNS`].
    fn release_wide() {
        COLUMN_TABLES.with(|cell| {
            if let Ok(mut tables) = cell.try_borrow_mut() {
                if tables.slot.len() > KEPT_COLUMNS {
                    tables.slot = Vec::new();
                }
                if tables.bits.len() > KEPT_COLUMNS.div_ceil(64) {
                    tables.bits = Vec::new();
                }
            }
        });
    }
}

/// `f` with this thread's [`ColumnTables`], fitted to `lookup` over `width` columns (fresh
/// ones should the thread's be in use already).
fn with_tables<R>(lookup: Lookup, width: usize, f: impl FnOnce(&mut ColumnTables) -> R) -> R {
    COLUMN_TABLES.with(|cell| match cell.try_borrow_mut() {
        Ok(mut tables) => {
            tables.fit(lookup, width);
            f(&mut tables)
        }
        Err(_) => {
            let mut tables = ColumnTables::default();
            tables.fit(lookup, width);
            f(&mut tables)
        }
    })
}

/// Longest mask row (not complemented) that each row of B is merged with, in order, rather
/// than looked up in the thread's tables: setting and clearing a short row's columns in the
/// tables costs more than the merge (graphs of a few edges per vertex, such as road networks'
/// triangle counts, have mask rows of one or two entries), and its accumulators fit the stack.
const MERGED_MASK_ROW: usize = 8;

/// Row `i` of C (A's row `a_cols`/`a_vals`) over a mask row `m` of at most [`MERGED_MASK_ROW`]
/// columns (inside the window, not complemented): each row of B merged with `m` (both
/// sorted), the admitted products summed by their position in `m`. Appends the row's entries
/// to `out` and adds the row's unmasked products to `counted`; returns the entries written
/// and the multiply-adds done.
fn merged_row<T: Scalar, S: Semiring<T>>(
    ops: &Operands<'_, T>,
    a_cols: &[u32],
    a_vals: &[T],
    m: &[u32],
    lo: u32,
    out: &mut RangeOut<T>,
    counted: &mut u64,
) -> (u64, u64) {
    let mut values = [S::zero(); MERGED_MASK_ROW];
    let mut seen = [false; MERGED_MASK_ROW];
    let (Some(&first), Some(&last)) = (m.first(), m.last()) else {
        return (0, 0);
    };
    let mut multiply_adds = 0u64;
    for (e, (&k, &av)) in a_cols.iter().zip(a_vals).enumerate() {
        ops.prefetch(a_cols, e);
        let (b_cols, b_vals) = ops.b_row(k);
        *counted += b_cols.len() as u64;
        // B's row from the mask row's first column on (its columns are sorted).
        let from = if b_cols.first().is_some_and(|&j| j < first) {
            b_cols.partition_point(|&j| j < first)
        } else {
            0
        };
        let mut p = 0;
        for (&j, bv) in b_cols[from..].iter().zip(&b_vals[from..]) {
            if j > last {
                break;
            }
            while m[p] < j {
                p += 1;
            }
            if m[p] == j {
                let x = S::mul_at(av, *bv, k);
                values[p] = if seen[p] { S::add(values[p], x) } else { x };
                seen[p] = true;
                multiply_adds += 1;
            }
        }
    }
    let mut found = 0;
    for ((&j, &v), &seen) in m.iter().zip(&values).zip(&seen) {
        if seen {
            out.cols.push(j - lo);
            out.vals.push(T::from_acc(v));
            found += 1;
        }
    }
    (found, multiply_adds)
}

/// One task's accumulators (by position in the mask row) and admitted products.
struct MaskScratch<A> {
    /// Accumulators by position in the mask row, and whether a product landed there.
    values: Vec<A>,
    seen: Vec<bool>,
    /// Admitted products of a complemented row.
    pairs: Vec<(u32, A)>,
}

impl<A> MaskScratch<A> {
    fn new() -> Self {
        MaskScratch {
            values: Vec::new(),
            seen: Vec::new(),
            pairs: Vec::new(),
        }
    }
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
    // Ranges of equal work: where B's rows are of even length, cut by A's entries (weighed
    // by B's longest row), which needs no pass over the rows — the rows' products are then
    // counted as they are computed; else by each row's products, counted first.
    let products: Option<Vec<u64>> = (!ops.even_b_rows()).then(|| {
        (0..ops.nrows)
            .into_par_iter()
            .with_min_len(512)
            .map(|i| ops.row_products(i))
            .collect()
    });
    let (ranges, reports) = match &products {
        Some(products) => {
            let ranges = plan::balanced_ranges(products);
            let reports = RangeReports::by_products(watch, &ranges, products);
            (ranges, reports)
        }
        None => {
            let ranges = ops.ranges_by_entries(plan::RANGES_PER_THREAD);
            let reports = RangeReports::new(watch, &ranges, |r| {
                ops.a_offset(r.end) - ops.a_offset(r.start)
            });
            (ranges, reports)
        }
    };
    let lookup = Lookup::for_width(ops.width());
    let outs: Vec<RangeOut<T>> = ranges
        .par_iter()
        .enumerate()
        .map_init(MaskScratch::<T::Acc>::new, |s, (r, range)| {
            reports.start()?;
            let out = with_tables(lookup, ops.width(), |tables| {
                compute_range::<T, S>(
                    ops,
                    mask,
                    products.as_deref(),
                    range.clone(),
                    s,
                    (lookup, tables),
                )
            });
            reports.finished(r);
            Ok(out)
        })
        .collect::<Result<_>>()?;
    if ops.width() > KEPT_COLUMNS {
        // Every thread of the pool, whichever ran a range.
        rayon::broadcast(|_| ColumnTables::release_wide());
    }
    let (c, work) = assemble(ops.nrows, ops.width(), &outs)?;
    drop(outs);
    watch.run.add_masked_work(work);
    tracing::debug!(
        multiply_adds = work.multiply_adds,
        unmasked_multiply_adds = work.unmasked_multiply_adds,
        nnz = c.nnz(),
        "masked SpGEMM"
    );
    Ok((c, work))
}

/// C from its ranges' rows, copied into place in parallel — each range's rows and entries
/// after those of the ranges before it — rather than appended one range after another on
/// one thread, a serial pass over all of C. `outs` tile C's `nrows` rows in order.
fn assemble<T: Scalar>(
    nrows: usize,
    ncols: usize,
    outs: &[RangeOut<T>],
) -> Result<(Csr<T>, MaskedWork)> {
    let mut work = MaskedWork::default();
    let (mut rows, mut entries) = (
        Vec::with_capacity(outs.len()),
        Vec::with_capacity(outs.len()),
    );
    let (mut row, mut entry) = (0usize, 0usize);
    for o in outs {
        rows.push(row..row + o.counts.len());
        entries.push(entry..entry + o.cols.len());
        row += o.counts.len();
        entry += o.cols.len();
        work += o.work;
    }
    // Checked, not assumed: the unsafe lengths below rely on it.
    assert_eq!(row, nrows, "the ranges tile the rows");
    let nnz = entry;
    let mut offsets: Vec<u64> = memory::reserved(nrows + 1, "the masked product's row offsets")?;
    let mut cols: Vec<u32> = memory::reserved(nnz, "the masked product's column indices")?;
    let mut vals: Vec<T> = memory::reserved(nnz, "the masked product's values")?;
    let offset_slots = &mut offsets.spare_capacity_mut()[..nrows + 1];
    offset_slots[0].write(0);
    let offset_parts = plan::split_mut(&mut offset_slots[1..], &rows);
    let col_parts = plan::split_mut(&mut cols.spare_capacity_mut()[..nnz], &entries);
    let val_parts = plan::split_mut(&mut vals.spare_capacity_mut()[..nnz], &entries);
    outs.par_iter()
        .zip(offset_parts)
        .zip(col_parts)
        .zip(val_parts)
        .zip(&entries)
        .for_each(|((((o, offset_part), col_part), val_part), at)| {
            let mut end = at.start as u64;
            for (slot, &n) in offset_part.iter_mut().zip(&o.counts) {
                end += n;
                slot.write(end);
            }
            for (slot, &j) in col_part.iter_mut().zip(&o.cols) {
                slot.write(j);
            }
            for (slot, &v) in val_part.iter_mut().zip(&o.vals) {
                slot.write(v);
            }
        });
    // SAFETY: offset 0 and each range's slots of `rows` (tiling the other `nrows`) and of
    // `entries` (tiling `nnz`) were written just above.
    unsafe {
        offsets.set_len(nrows + 1);
        cols.set_len(nnz);
        vals.set_len(nnz);
    }
    // SAFETY: the ranges tile the rows in order; each row's columns are sorted and distinct
    // (mask row order, or sorted and merged) and inside the window.
    let c = unsafe { Csr::from_parts_unchecked(nrows, ncols, offsets, cols, vals) };
    Ok((c, work))
}

/// Rows `range` of the chunk (`products`: each row's products, unmasked, where counted
/// already), their columns looked up by `lookup` in `tables`.
fn compute_range<T: Scalar, S: Semiring<T>>(
    ops: &Operands<'_, T>,
    mask: &Mask,
    products: Option<&[u64]>,
    range: Range<usize>,
    s: &mut MaskScratch<T::Acc>,
    (lookup, tables): (Lookup, &mut ColumnTables),
) -> RangeOut<T> {
    let mut out = RangeOut {
        counts: Vec::with_capacity(range.len()),
        cols: Vec::new(),
        vals: Vec::new(),
        work: MaskedWork::default(),
    };
    let (lo, hi) = (ops.lo, ops.hi);
    let trimmed = lo > 0 || (hi as usize) < mask.shape().1;
    let complemented = mask.is_complemented();
    // The mask's arrays once, not a row at a time through the mask.
    let (m_offsets, m_cols) = (mask.row_offsets(), mask.col_indices());
    let quiet = ops.quiet();
    for i in range {
        // B's rows of the next rows and entries asked for ahead, as the unmasked kernels do:
        // a product's lookup is cheap, so waiting on each row of B would be most of its time.
        let ops = ops.for_row(&quiet, i);
        ops.prefetch_next_rows(i);
        let before = out.cols.len();
        // This row's products, unless counted below as they are computed.
        let unmasked = products.map(|p| p[i]);
        let r = ops.row_base + i;
        let mut m = &m_cols[m_offsets[r] as usize..m_offsets[r + 1] as usize];
        if trimmed {
            // The mask row inside the window.
            m = &m[m.partition_point(|&j| j < lo)..];
            m = &m[..m.partition_point(|&j| j < hi)];
        }
        if m.is_empty() && !complemented {
            out.work.unmasked_multiply_adds += unmasked.unwrap_or_else(|| ops.row_products(i));
            out.counts.push(0);
            continue;
        }
        let mut counted = 0u64;
        let (a_cols, a_vals) = ops.a_row(i);
        if !complemented && m.len() <= MERGED_MASK_ROW {
            let (found, multiply_adds) =
                merged_row::<T, S>(ops, a_cols, a_vals, m, lo, &mut out, &mut counted);
            out.work.multiply_adds += multiply_adds;
            out.work.unmasked_multiply_adds += unmasked.unwrap_or(counted);
            out.counts.push(found);
            continue;
        }
        tables.clean = false;
        if lookup != Lookup::Search {
            for &j in m {
                let w = (j - lo) as usize;
                tables.bits[w >> 6] |= 1 << (w & 63);
            }
        }
        if lookup == Lookup::BitsAndSlots {
            for (p, &j) in m.iter().enumerate() {
                // At most the window's width, below u32::MAX.
                tables.slot[(j - lo) as usize] = p as u32 + 1;
            }
        }
        let (bits, slot) = (&tables.bits, &tables.slot);
        let in_row = |j: u32| -> bool {
            if lookup == Lookup::Search {
                m.binary_search(&j).is_ok()
            } else {
                let w = (j - lo) as usize;
                bits[w >> 6] >> (w & 63) & 1 != 0
            }
        };
        if !complemented {
            s.values.clear();
            s.values.resize(m.len(), S::zero());
            s.seen.clear();
            s.seen.resize(m.len(), false);
            for (e, (&k, &av)) in a_cols.iter().zip(a_vals).enumerate() {
                ops.prefetch(a_cols, e);
                let (b_cols, b_vals) = ops.b_row(k);
                counted += b_cols.len() as u64;
                // B's value is read only for a product the mask admits: most are refused.
                for (&j, bv) in b_cols.iter().zip(b_vals) {
                    if !in_row(j) {
                        continue;
                    }
                    let bv = *bv;
                    let p = match lookup {
                        Lookup::BitsAndSlots => slot[(j - lo) as usize] as usize - 1,
                        // In the row: the bitmap or the search said so.
                        _ => m.partition_point(|&x| x < j),
                    };
                    let (v, seen) = (&mut s.values[p], &mut s.seen[p]);
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
        } else {
            s.pairs.clear();
            for (e, (&k, &av)) in a_cols.iter().zip(a_vals).enumerate() {
                ops.prefetch(a_cols, e);
                let (b_cols, b_vals) = ops.b_row(k);
                counted += b_cols.len() as u64;
                for (&j, &bv) in b_cols.iter().zip(b_vals) {
                    if !in_row(j) {
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
        if lookup != Lookup::Search {
            for &j in m {
                let w = (j - lo) as usize;
                tables.bits[w >> 6] = 0;
            }
        }
        if lookup == Lookup::BitsAndSlots {
            for &j in m {
                tables.slot[(j - lo) as usize] = 0;
            }
        }
        tables.clean = true;
        out.work.unmasked_multiply_adds += unmasked.unwrap_or(counted);
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
        let mut rows_by_path = [0usize; 2];
        for mask in [
            Mask::structural(&full),
            Mask::valued(&generate::uniform::<f64>(full.nrows(), full.ncols(), 3, 9)),
            Mask::structural(&a).complemented(),
        ] {
            let want = reference::spgemm_masked::<f64, PlusTimes>(&a, &b, Some(&mask)).unwrap();
            if !mask.is_complemented() {
                // Short mask rows merged with B's rows, long ones looked up in the tables.
                for n in mask
                    .row_offsets()
                    .windows(2)
                    .map(|w| (w[1] - w[0]) as usize)
                {
                    rows_by_path[usize::from(n > MERGED_MASK_ROW)] += usize::from(n > 0);
                }
            }
            let ops = Operands::new(&wa, &wb, super::super::shape_of_b(&b)).unwrap();
            let (c, work) = multiply::<f64, PlusTimes>(&ops, &mask, watch).unwrap();
            assert_eq!(c.row_offsets(), want.row_offsets());
            assert_eq!(c.col_indices(), want.col_indices());
            assert!(work.multiply_adds <= work.unmasked_multiply_adds);
            // The same by each lookup, from tables left dirty by a row cut short (the next
            // use clears them).
            let products: Vec<u64> = (0..ops.nrows).map(|i| ops.row_products(i)).collect();
            let counted = [Some(&products[..]), None];
            for (lookup, products) in [Lookup::BitsAndSlots, Lookup::Bits, Lookup::Search]
                .into_iter()
                .flat_map(|l| counted.map(|p| (l, p)))
            {
                let mut tables = ColumnTables {
                    bits: vec![u64::MAX; ops.width().div_ceil(64)],
                    slot: vec![7; ops.width()],
                    clean: false,
                };
                tables.fit(lookup, ops.width());
                let mut s = MaskScratch::<f64>::new();
                let o = compute_range::<f64, PlusTimes>(
                    &ops,
                    &mask,
                    products,
                    0..ops.nrows,
                    &mut s,
                    (lookup, &mut tables),
                );
                assert_eq!(o.cols, c.col_indices(), "{lookup:?}");
                assert_eq!(o.vals, c.values(), "{lookup:?}");
                assert!(
                    tables.clean && tables.bits.iter().all(|&w| w == 0),
                    "{lookup:?}"
                );
                assert!(tables.slot.iter().all(|&x| x == 0), "{lookup:?}");
                assert_eq!(o.work, work);
            }
        }
        assert!(rows_by_path.iter().all(|&n| n > 10), "{rows_by_path:?}");
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
