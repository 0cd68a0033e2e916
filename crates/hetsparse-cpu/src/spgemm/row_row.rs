//! Row-Row (Gustavson) rows: row `i` of C accumulates `A[i, k] · B[k, :]` over the entries of
//! row `i` of A, in an accumulator chosen for that row.
//!
//! The same kernel runs the symbolic phase (`NUMERIC = false`: distinct columns are counted,
//! no value is touched) and the numeric phase (`NUMERIC = true`: values are accumulated and the
//! row is written sorted), so the two phases cannot disagree on a row's structure.

use std::ops::Range;

use hetsparse_core::{PlusTimes, Result, Scalar, Semiring};

use super::scratch::{hash, Scratch, EMPTY};
use super::{count_mismatch, Operands, Output};

/// Rows with at most this many products are sorted and merged: for so few, a sort of a
/// register-sized array beats touching any table.
const SORT_MAX_PRODUCTS: u64 = 32;

/// A row of a wide product is hashed when C is at least this many times wider than its
/// products: its table (two slots per product) is then far smaller than a dense array, and its
/// few entries are cheaper to sort than a marker is to scan. Denser rows go to dense panels,
/// where neither probing nor sorting is needed.
const HASH_SPARSITY: u64 = 16;

/// Bytes of dense accumulator (values + marker) that should stay in a core's L2 cache.
const PANEL_BYTES: usize = 256 * 1024;

/// A row walks its A entries once per panel; panels pay off when each entry of A brings at
/// least this many products per panel on average.
const PANEL_MIN_PRODUCTS_PER_PASS: u64 = 4;

/// Columns of a cache-sized dense panel for accumulator type `A`.
pub(super) fn panel_columns<A>() -> usize {
    PANEL_BYTES / (std::mem::size_of::<A>() + std::mem::size_of::<u32>())
}

/// How a row is accumulated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    /// One entry in A's row: C's row is a scaled row of B.
    Scale,
    /// Few products: (column, value) pairs sorted and merged.
    Sort,
    /// Few products for C's width: open addressing sized from the row.
    Hash,
    /// A dense array over all of C's columns with a generation marker.
    Dense,
    /// A dense array over one cache-sized panel of C's columns at a time.
    Panels,
}

/// Picks the accumulator of a row from its product count, A's row length and C's width.
pub(super) fn choose<A>(products: u64, a_len: usize, width: usize) -> Kind {
    let panel = panel_columns::<A>();
    if a_len == 1 {
        Kind::Scale
    } else if products <= SORT_MAX_PRODUCTS {
        Kind::Sort
    } else if width <= panel {
        Kind::Dense
    } else if products.saturating_mul(HASH_SPARSITY) <= width as u64 {
        Kind::Hash
    } else if (a_len * width.div_ceil(panel)) as u64 * PANEL_MIN_PRODUCTS_PER_PASS <= products {
        Kind::Panels
    } else {
        Kind::Dense
    }
}

/// Symbolic phase over `range`: the number of entries of each row, into `counts`.
pub(super) fn count_rows<T: Scalar>(
    ops: &Operands<'_, T>,
    range: Range<usize>,
    products: &[u64],
    counts: &mut [u64],
    s: &mut Scratch<T::Acc>,
) {
    let width = ops.width();
    for (count, i) in counts.iter_mut().zip(range) {
        ops.prefetch_next_rows(i);
        let p = products[i];
        *count = if p >= width as u64 && reaches_full_row(ops, i) {
            width as u64
        } else {
            row::<T, PlusTimes, false>(ops, i, p, s, &mut [], &mut []) as u64
        };
    }
}

/// Whether row `i` of A takes a row of B that fills the whole window (then so does C's row).
fn reaches_full_row<T: Scalar>(ops: &Operands<'_, T>, i: usize) -> bool {
    let width = ops.width();
    ops.a_row(i)
        .0
        .iter()
        .any(|&k| ops.b_row(k).0.len() == width)
}

/// Numeric phase over `range`: each row written into its slots of `out`.
pub(super) fn compute_rows<T: Scalar, S: Semiring<T>>(
    ops: &Operands<'_, T>,
    range: Range<usize>,
    products: &[u64],
    mut out: Output<'_, T>,
    s: &mut Scratch<T::Acc>,
) -> Result<()> {
    for i in range {
        ops.prefetch_next_rows(i);
        let (cols, vals) = out.row(i);
        let expected = cols.len();
        let written = row::<T, S, true>(ops, i, products[i], s, cols, vals);
        if written != expected {
            return Err(count_mismatch(ops.row_base + i, expected, written));
        }
    }
    Ok(())
}

/// Row `i` of C: returns its number of entries, and with `NUMERIC` writes them, sorted, into
/// `cols` and `vals` (which must have room for exactly that many).
pub(super) fn row<T: Scalar, S: Semiring<T>, const NUMERIC: bool>(
    ops: &Operands<'_, T>,
    i: usize,
    products: u64,
    s: &mut Scratch<T::Acc>,
    cols: &mut [u32],
    vals: &mut [T],
) -> usize {
    if products == 0 {
        return 0;
    }
    let (a_cols, a_vals) = ops.a_row(i);
    if NUMERIC && cols.len() == ops.width() && a_cols.len() > 1 {
        return full_row::<T, S>(ops, a_cols, a_vals, s, cols, vals);
    }
    let kind = choose::<T::Acc>(products, a_cols.len(), ops.width());
    if matches!(kind, Kind::Hash | Kind::Dense | Kind::Panels) {
        // Rows whose columns lie close together (banded, stencil, road-like matrices) use a
        // dense accumulator over just their span, which stays in cache however wide C is.
        let (first, last) = column_span(ops, a_cols);
        if last - first < panel_columns::<T::Acc>() {
            return dense_row::<T, S, NUMERIC>(ops, a_cols, a_vals, first, last + 1, s, cols, vals);
        }
    }
    match kind {
        Kind::Scale => {
            let (b_cols, b_vals) = ops.b_row(a_cols[0]);
            if NUMERIC {
                let (av, lo) = (a_vals[0], ops.lo);
                for (((c, v), &j), &bv) in
                    cols.iter_mut().zip(vals.iter_mut()).zip(b_cols).zip(b_vals)
                {
                    *c = j - lo;
                    *v = T::from_acc(S::mul(av, bv));
                }
            }
            b_cols.len()
        }
        Kind::Sort => sort_row::<T, S, NUMERIC>(ops, a_cols, a_vals, s, cols, vals),
        Kind::Hash => {
            let entries = if NUMERIC {
                cols.len()
            } else {
                products as usize
            };
            hash_row::<T, S, NUMERIC>(ops, a_cols, a_vals, entries, s, cols, vals)
        }
        Kind::Dense => {
            dense_row::<T, S, NUMERIC>(ops, a_cols, a_vals, 0, ops.width(), s, cols, vals)
        }
        Kind::Panels => panel_row::<T, S, NUMERIC>(ops, a_cols, a_vals, s, cols, vals),
    }
}

/// Few products: collect, sort by column, merge equal columns.
fn sort_row<T: Scalar, S: Semiring<T>, const NUMERIC: bool>(
    ops: &Operands<'_, T>,
    a_cols: &[u32],
    a_vals: &[T],
    s: &mut Scratch<T::Acc>,
    cols: &mut [u32],
    vals: &mut [T],
) -> usize {
    if !NUMERIC {
        let columns = &mut s.columns;
        columns.clear();
        for (e, &k) in a_cols.iter().enumerate() {
            ops.prefetch(a_cols, e);
            columns.extend_from_slice(ops.b_row(k).0);
        }
        columns.sort_unstable();
        return 1 + columns.windows(2).filter(|w| w[0] != w[1]).count();
    }
    let pairs = &mut s.pairs;
    pairs.clear();
    for (e, (&k, &av)) in a_cols.iter().zip(a_vals).enumerate() {
        ops.prefetch(a_cols, e);
        let (b_cols, b_vals) = ops.b_row(k);
        pairs.extend(
            b_cols
                .iter()
                .zip(b_vals)
                .map(|(&j, &bv)| (j, S::mul(av, bv))),
        );
    }
    pairs.sort_unstable_by_key(|p| p.0);
    write_merged::<T, S>(pairs, ops.lo, cols, vals)
}

/// Writes sorted (column, value) pairs, summing equal columns; returns the entries written
/// (stopping at the room in `cols`).
pub(super) fn write_merged<T: Scalar, S: Semiring<T>>(
    pairs: &[(u32, T::Acc)],
    lo: u32,
    cols: &mut [u32],
    vals: &mut [T],
) -> usize {
    let mut n = 0;
    let mut p = 0;
    while p < pairs.len() {
        let (j, mut acc) = pairs[p];
        p += 1;
        while p < pairs.len() && pairs[p].0 == j {
            acc = S::add(acc, pairs[p].1);
            p += 1;
        }
        if n < cols.len() {
            cols[n] = j - lo;
            vals[n] = T::from_acc(acc);
        }
        n += 1;
    }
    n
}

/// Open addressing (linear probing) in a table of at least twice `entries` slots.
fn hash_row<T: Scalar, S: Semiring<T>, const NUMERIC: bool>(
    ops: &Operands<'_, T>,
    a_cols: &[u32],
    a_vals: &[T],
    entries: usize,
    s: &mut Scratch<T::Acc>,
    cols: &mut [u32],
    vals: &mut [T],
) -> usize {
    let mask = s.hash_table(entries);
    let (keys, values) = (&mut s.keys, &mut s.values);
    let mut n = 0;
    for (e, (&k, &av)) in a_cols.iter().zip(a_vals).enumerate() {
        ops.prefetch(a_cols, e);
        let (b_cols, b_vals) = ops.b_row(k);
        for (&j, &bv) in b_cols.iter().zip(b_vals) {
            let mut h = hash(j, mask);
            loop {
                let key = keys[h];
                if key == j {
                    if NUMERIC {
                        values[h] = S::add(values[h], S::mul(av, bv));
                    }
                    break;
                }
                if key == EMPTY {
                    keys[h] = j;
                    if NUMERIC {
                        values[h] = S::mul(av, bv);
                    }
                    n += 1;
                    break;
                }
                h = (h + 1) & mask;
            }
            if n > entries {
                // More columns than the symbolic phase counted: a bug, which the caller
                // reports; stop before the table fills up.
                return n;
            }
        }
    }
    if NUMERIC && n == cols.len() {
        // Sorting the bare columns and probing again for each value is cheaper than sorting
        // (column, value) pairs.
        let mut p = 0;
        for &key in &keys[..=mask] {
            if key != EMPTY {
                cols[p] = key;
                p += 1;
            }
        }
        cols.sort_unstable();
        for (c, v) in cols.iter_mut().zip(vals.iter_mut()) {
            let mut h = hash(*c, mask);
            while keys[h] != *c {
                h = (h + 1) & mask;
            }
            *v = T::from_acc(values[h]);
            *c -= ops.lo;
        }
    }
    n
}

/// The smallest and largest column (relative to the window) the row's products reach; the
/// rows of B are sorted, so only their ends are read.
fn column_span<T: Scalar>(ops: &Operands<'_, T>, a_cols: &[u32]) -> (usize, usize) {
    let (mut first, mut last) = (u32::MAX, 0u32);
    for &k in a_cols {
        let b_cols = ops.b_row(k).0;
        if let (Some(&f), Some(&l)) = (b_cols.first(), b_cols.last()) {
            first = first.min(f);
            last = last.max(l);
        }
    }
    ((first - ops.lo) as usize, (last - ops.lo) as usize)
}

/// A dense accumulator over columns `start..end` of C, which the row's products stay within.
#[allow(clippy::too_many_arguments)]
fn dense_row<T: Scalar, S: Semiring<T>, const NUMERIC: bool>(
    ops: &Operands<'_, T>,
    a_cols: &[u32],
    a_vals: &[T],
    start: usize,
    end: usize,
    s: &mut Scratch<T::Acc>,
    cols: &mut [u32],
    vals: &mut [T],
) -> usize {
    let width = end - start;
    let generation = s.dense_row(width);
    let (stamps, dense) = (&mut s.stamps[..width], &mut s.dense[..width]);
    let lo = ops.lo + start as u32;
    let mut n = 0;
    for (e, (&k, &av)) in a_cols.iter().zip(a_vals).enumerate() {
        ops.prefetch(a_cols, e);
        let (b_cols, b_vals) = ops.b_row(k);
        for (&j, &bv) in b_cols.iter().zip(b_vals) {
            n += marked_add::<T, S, NUMERIC>(
                stamps,
                dense,
                generation,
                (j - lo) as usize,
                av,
                bv,
                n,
                cols,
            );
        }
    }
    if NUMERIC && n == cols.len() {
        emit_dense(stamps, dense, generation, start, cols, vals);
    }
    n
}

/// Adds `av · bv` at column `j` of a dense accumulator with a generation marker; returns 1
/// when `j` is new to the row (and, with `NUMERIC`, records it as entry `n` of `cols`).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn marked_add<T: Scalar, S: Semiring<T>, const NUMERIC: bool>(
    stamps: &mut [u32],
    dense: &mut [T::Acc],
    generation: u32,
    j: usize,
    av: T,
    bv: T,
    n: usize,
    cols: &mut [u32],
) -> usize {
    if stamps[j] != generation {
        stamps[j] = generation;
        if NUMERIC {
            dense[j] = S::mul(av, bv);
            if n < cols.len() {
                cols[n] = j as u32;
            }
        }
        1
    } else {
        if NUMERIC {
            dense[j] = S::add(dense[j], S::mul(av, bv));
        }
        0
    }
}

/// Writes the touched columns of a dense accumulator covering columns `base..` of C, sorted:
/// by scanning the marker when the row fills much of it, else by sorting the touched columns
/// (already in `cols`).
fn emit_dense<T: Scalar>(
    stamps: &[u32],
    dense: &[T::Acc],
    generation: u32,
    base: usize,
    cols: &mut [u32],
    vals: &mut [T],
) {
    let n = cols.len();
    if n * 16 >= stamps.len() {
        let mut p = 0;
        for (j, (&stamp, &acc)) in stamps.iter().zip(dense).enumerate() {
            if stamp == generation {
                cols[p] = (base + j) as u32;
                vals[p] = T::from_acc(acc);
                p += 1;
            }
        }
    } else {
        cols.sort_unstable();
        for (c, v) in cols.iter_mut().zip(vals.iter_mut()) {
            *v = T::from_acc(dense[*c as usize]);
            *c += base as u32;
        }
    }
}

/// A row of C known to fill every column: a dense accumulator with no marker, and every
/// column written in order.
fn full_row<T: Scalar, S: Semiring<T>>(
    ops: &Operands<'_, T>,
    a_cols: &[u32],
    a_vals: &[T],
    s: &mut Scratch<T::Acc>,
    cols: &mut [u32],
    vals: &mut [T],
) -> usize {
    let width = ops.width();
    s.dense_row(width);
    let dense = &mut s.dense[..width];
    dense.fill(S::zero());
    let lo = ops.lo;
    for (e, (&k, &av)) in a_cols.iter().zip(a_vals).enumerate() {
        ops.prefetch(a_cols, e);
        let (b_cols, b_vals) = ops.b_row(k);
        if b_cols.len() == width {
            // A full row of B: contiguous, no indices needed.
            for (c, &bv) in dense.iter_mut().zip(b_vals) {
                *c = S::add(*c, S::mul(av, bv));
            }
        } else {
            for (&j, &bv) in b_cols.iter().zip(b_vals) {
                let c = &mut dense[(j - lo) as usize];
                *c = S::add(*c, S::mul(av, bv));
            }
        }
    }
    for (j, ((c, v), &acc)) in cols
        .iter_mut()
        .zip(vals.iter_mut())
        .zip(dense.iter())
        .enumerate()
    {
        *c = j as u32;
        *v = T::from_acc(acc);
    }
    width
}

/// A dense accumulator over one cache-sized panel of C's columns at a time; each entry of A
/// keeps a cursor into its row of B, so every product is still visited once.
fn panel_row<T: Scalar, S: Semiring<T>, const NUMERIC: bool>(
    ops: &Operands<'_, T>,
    a_cols: &[u32],
    a_vals: &[T],
    s: &mut Scratch<T::Acc>,
    cols: &mut [u32],
    vals: &mut [T],
) -> usize {
    let width = ops.width();
    let panel = panel_columns::<T::Acc>();
    let lo = ops.lo as usize;
    s.cursors.clear();
    s.cursors.resize(a_cols.len(), 0);
    let mut n = 0;
    let mut start = 0;
    while start < width {
        let end = (start + panel).min(width);
        let generation = s.dense_row(panel);
        let (stamps, dense) = (&mut s.stamps[..end - start], &mut s.dense[..end - start]);
        let first = n;
        for ((&k, &av), cursor) in a_cols.iter().zip(a_vals).zip(s.cursors.iter_mut()) {
            let (b_cols, b_vals) = ops.b_row(k);
            let mut p = *cursor;
            while p < b_cols.len() {
                let j = b_cols[p] as usize - lo;
                if j >= end {
                    break;
                }
                n += marked_add::<T, S, NUMERIC>(
                    stamps,
                    dense,
                    generation,
                    j - start,
                    av,
                    b_vals[p],
                    n,
                    cols,
                );
                p += 1;
            }
            *cursor = p;
        }
        if NUMERIC && n <= cols.len() {
            emit_dense(
                stamps,
                dense,
                generation,
                start,
                &mut cols[first..n],
                &mut vals[first..n],
            );
        }
        start = end;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accumulators_follow_the_row_shape() {
        let panel = panel_columns::<f64>();
        assert_eq!(choose::<f64>(100, 1, 1 << 20), Kind::Scale);
        assert_eq!(choose::<f64>(20, 5, 1 << 20), Kind::Sort);
        assert_eq!(choose::<f64>(1000, 50, panel), Kind::Dense);
        assert_eq!(choose::<f64>(1000, 50, 1 << 24), Kind::Hash);
        assert_eq!(
            choose::<f64>(1 << 24, 100, 1 << 20),
            Kind::Panels,
            "wide and dense rows go panel by panel"
        );
        assert_eq!(
            choose::<f64>(panel as u64 + 1, 10_000, 1 << 16),
            Kind::Dense,
            "long rows of A with few products each are not worth panels"
        );
        assert_eq!(
            choose::<f64>(3000, 100, 32_768),
            Kind::Panels,
            "rows filling a good part of C are not hashed"
        );
    }
}
