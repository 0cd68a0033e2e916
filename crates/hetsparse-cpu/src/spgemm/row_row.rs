//! Row-Row (Gustavson) rows: row `i` of C accumulates `A[i, k] · B[k, :]` over the entries of
//! row `i` of A, in an accumulator chosen for that row.
//!
//! The same kernels run the symbolic phase (`NUMERIC = false`: distinct columns are counted,
//! no value is touched) and the numeric phase (`NUMERIC = true`: values are accumulated and the
//! row is written sorted). Rows that the numeric phase accumulates densely or in a hash table
//! are counted in a column bitmap when their window of C is narrow enough (a bit per column,
//! no values, no probing); the numeric phase checks every row against its count.
//!
//! Dense accumulators pair the values with a [`ColumnSet`](super::scratch::ColumnSet), whose
//! two-level bitmap lists the touched columns in order: rows come out sorted with no sort, at
//! a cost that grows with the row's entries and not with C's width.

use hetsparse_core::{PlusTimes, Result, Scalar, Semiring};

use super::scratch::{hash, Scratch, EMPTY};
use super::{bound_exceeded, count_mismatch, Like, Operands, Output, ReachedColumns, RowOut};
use std::mem::MaybeUninit;
use std::ops::Range;

/// Rows with at most this many products are sorted and merged: for so few, a sort of a
/// register-sized array beats touching any table.
const SORT_MAX_PRODUCTS: u64 = 32;

/// A row is hashed when its window of C is wider than a dense accumulator allows and at least
/// this many times wider than its products: its table (two slots per product) is then far
/// smaller than a dense array, and its few entries are cheaper to sort than a bitmap is to
/// walk. Denser rows go to dense panels, where neither probing nor sorting is needed.
const HASH_SPARSITY: u64 = 16;

/// Rows found in their own narrow window (see [`row`]) are accumulated densely there above
/// this many products: 3D AMG's A·P rows (25 products) go faster so, 2D's (12) as they were
/// (sorted).
const OWN_WINDOW_MIN_PRODUCTS: u64 = 16;

/// Whether a row's own window (see [`row`]) is worth accumulating in densely: it fits a
/// dense accumulator, and the row has more than [`OWN_WINDOW_MIN_PRODUCTS`] products.
pub(super) fn own_window_pays<A>(reached: &ReachedColumns) -> bool {
    reached.end - reached.start <= dense_columns::<A>()
        && reached.products > OWN_WINDOW_MIN_PRODUCTS
}

/// Smallest guess of a one-pass hash row's length (see [`row`]).
const HASH_MIN_GUESS: usize = 64;

/// Bytes of dense values that should stay in a core's L2 cache (the bitmap adds a bit per
/// column). Rows whose window of C is at most this wide are accumulated densely in one pass;
/// wider ones by hashing or panel by panel.
const DENSE_BYTES: usize = 512 * 1024;

/// Widest window the symbolic phase counts in a bitmap (256 KiB of bits): beyond it, rows are
/// counted by the numeric phase's accumulator.
const COUNT_BITMAP_COLUMNS: usize = 1 << 21;

/// Whether a row of `entries` products or entries over `width` columns is worth a column
/// bitmap rather than hashing and sorting: the bitmap fits [`COUNT_BITMAP_COLUMNS`], and
/// walking its summary (a word per 4096 columns, read for every row) costs less than the row
/// itself.
fn bitmap_pays(entries: u64, width: usize) -> bool {
    width <= COUNT_BITMAP_COLUMNS && width.div_ceil(4096) as u64 <= entries
}

/// Dense rows with at least this many products per entry of C test columns before marking
/// them (see [`dense_row`]): banded rows (6 products per entry) and stencil rows (17) measured
/// faster tested, scattered rows (power-law, LP: under 2) faster unconditional.
const REVISITS: u64 = 4;

/// A row walks its A entries once per panel, reading at least a cache line of each of their
/// rows of B per pass (16 column indices); panels pay off when each entry of A brings at least
/// that many products per panel on average. With fewer, one pass over a window wider than the
/// cache is faster, its values missing L2 but B read once: with its dense rows (11 products
/// per entry and panel, 3 panels) in one pass, skewed's whole product took 30 % less time.
const PANEL_MIN_PRODUCTS_PER_PASS: u64 = 16;

/// Columns of a cache-sized dense accumulator (a whole window, or one panel) for accumulator
/// type `A`.
pub(super) fn dense_columns<A>() -> usize {
    DENSE_BYTES / std::mem::size_of::<A>()
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
    /// A dense array over the row's whole window, with a column bitmap.
    Dense,
    /// A dense array over one cache-sized panel of the window at a time.
    Panels,
}

/// Picks the accumulator of a row from its product count, A's row length and the width of
/// its window of C, `narrowed` when B's reach made that window narrower than C.
///
/// Short rows are sorted, unless their window was narrowed and fits a dense accumulator: such
/// windows slide along with the row (grids, bands), so consecutive rows keep reusing the same
/// cached slots, where short rows scattered over C would touch a cold line per product.
pub(super) fn choose<A>(products: u64, a_len: usize, width: usize, narrowed: bool) -> Kind {
    let panel = dense_columns::<A>();
    let short = products <= SORT_MAX_PRODUCTS;
    if a_len == 1 {
        Kind::Scale
    } else if width <= panel && (narrowed || !short) {
        Kind::Dense
    } else if short {
        Kind::Sort
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
    let quiet = ops.quiet();
    for (count, i) in counts.iter_mut().zip(range) {
        let ops = ops.for_row(&quiet, i);
        ops.prefetch_next_rows(i);
        let p = products[i];
        *count = if p >= width as u64 && reaches_full_row(ops, i) {
            width as u64
        } else {
            row::<T, PlusTimes, false>(ops, i, p, s, &mut RowOut::none()) as u64
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
    let quiet = ops.quiet();
    for i in range {
        let ops = ops.for_row(&quiet, i);
        ops.prefetch_next_rows(i);
        let mut row_out = out.row(i);
        let expected = row_out.len();
        let written = row::<T, S, true>(ops, i, products[i], s, &mut row_out);
        if written != expected {
            return Err(count_mismatch(ops.row_base + i, expected, written));
        }
    }
    Ok(())
}

/// One-pass numeric phase over `range` (see [`super::staged`]): rows written one after the
/// other into `cols`/`vals`, each given at most `min(products, width)` slots, and each row's
/// number of entries into `counts`. Returns the entries written; `cols` and `vals` must hold
/// the range's bound ([`super::staged::row_bound`] summed over it). Each row's products come
/// from `products`; without it (B of even rows, see [`Operands::even_b_rows`]) each row takes
/// the bound of its entries times B's longest row in their place, which the range's bound
/// then covers.
pub(super) fn compute_rows_staged<T: Scalar, S: Semiring<T>>(
    ops: &Operands<'_, T>,
    range: Range<usize>,
    products: Option<&[u64]>,
    cols: &mut [MaybeUninit<u32>],
    vals: &mut [MaybeUninit<T>],
    counts: &mut [u64],
    s: &mut Scratch<T::Acc>,
) -> Result<usize> {
    let width = ops.width();
    let mut written = 0;
    // Neighbouring rows have similar shapes (that is what the estimate is for): the row before
    // gives the entries per product; the first row of a range has none before it.
    let mut previous: Option<(u64, u64)> = None;
    let quiet = ops.quiet();
    for (count, i) in counts.iter_mut().zip(range) {
        let ops = ops.for_row(&quiet, i);
        ops.prefetch_next_rows(i);
        // The bound steers the accumulators about as well as the exact count, which would cost
        // a read of B's offsets for every entry of A (a tenth of the time of road products).
        let p = products.map_or_else(
            || ops.a_row(i).0.len() as u64 * ops.longest_b_row as u64,
            |products| products[i],
        );
        let bound = super::staged::row_bound(p, width);
        let like = match previous {
            Some((entries, products)) if products > 0 => Like::Ratio { entries, products },
            _ => Like::Ratio {
                entries: bound as u64,
                products: p,
            },
        };
        let mut out = RowOut::bounded(
            &mut cols[written..written + bound],
            &mut vals[written..written + bound],
            like,
        );
        let n = row::<T, S, true>(ops, i, p, s, &mut out);
        if n > bound {
            return Err(bound_exceeded(ops.row_base + i, bound, n));
        }
        written += n;
        *count = n as u64;
        previous = Some((n as u64, p));
    }
    Ok(written)
}

/// Row `i` of C: returns its number of entries, and with `NUMERIC` writes them, sorted, into
/// `out` (which must have room for exactly that many, or, when its slots are only a bound, for
/// at least that many). `products` is the row's number of intermediate products, or for a
/// one-pass row (whose slots are a bound) possibly only an upper bound of it.
pub(super) fn row<T: Scalar, S: Semiring<T>, const NUMERIC: bool>(
    ops: &Operands<'_, T>,
    i: usize,
    products: u64,
    s: &mut Scratch<T::Acc>,
    out: &mut RowOut<'_, T>,
) -> usize {
    if products == 0 {
        return 0;
    }
    let (a_cols, a_vals) = ops.a_row(i);
    let full = if out.exact {
        out.counted_full(ops.width())
    } else {
        products >= ops.width() as u64 && reaches_full_row(ops, i)
    };
    if NUMERIC && full && a_cols.len() > 1 {
        return full_row::<T, S>(ops, a_cols, a_vals, s, out);
    }
    let (mut start, mut end) = ops.row_window(a_cols);
    let mut narrowed = end - start < ops.width();
    let mut products = products;
    // Rows whose window B's reach leaves wider than a dense accumulator may still take
    // columns close together (AMG's A·P at the finest level: C far narrower than A, each row
    // of C a handful of neighbouring aggregates): their own window, from the first and last
    // column of each row of B they take, lets them accumulate densely like banded rows, once
    // they have products enough to pay for walking it.
    if ops.own_windows && ops.too_wide_for_dense(a_cols, (start, end)) {
        if let Some(reached) = ops
            .reached_columns(a_cols)
            .filter(own_window_pays::<T::Acc>)
        {
            (start, end) = (reached.start, reached.end);
            narrowed = true;
            products = reached.products;
        }
    }
    let mut kind = choose::<T::Acc>(products, a_cols.len(), end - start, narrowed);
    if !NUMERIC
        && matches!(kind, Kind::Hash | Kind::Panels | Kind::Dense)
        && bitmap_pays(products, end - start)
    {
        kind = Kind::Dense;
    }
    match kind {
        Kind::Scale => {
            let (b_cols, b_vals) = ops.b_row(a_cols[0]);
            if NUMERIC {
                let (av, lo, k) = (a_vals[0], ops.lo, a_cols[0]);
                for (&j, &bv) in b_cols.iter().zip(b_vals) {
                    out.push(j - lo, T::from_acc(S::mul_at(av, bv, k)));
                }
            }
            b_cols.len()
        }
        Kind::Sort => sort_row::<T, S, NUMERIC>(ops, a_cols, a_vals, s, out),
        Kind::Hash if NUMERIC && !out.exact => {
            // The table is sized from the row's likely length, not its bound: rows with many
            // products per entry would otherwise probe a table several times too large. A
            // row that outgrows the guess stops early, having written nothing, and is redone
            // with a table for its bound.
            let guess = (2 * out.expected(products)).max(HASH_MIN_GUESS);
            if guess < out.len() {
                let n = hash_row::<T, S, true>(ops, a_cols, a_vals, guess, s, out);
                if n <= guess {
                    return n;
                }
            }
            hash_row::<T, S, true>(ops, a_cols, a_vals, out.len(), s, out)
        }
        Kind::Hash => {
            let entries = if NUMERIC {
                out.len()
            } else {
                products as usize
            };
            hash_row::<T, S, NUMERIC>(ops, a_cols, a_vals, entries, s, out)
        }
        Kind::Dense => {
            dense_row::<T, S, NUMERIC>(ops, a_cols, a_vals, products, start..end, s, out)
        }
        Kind::Panels => panel_row::<T, S, NUMERIC>(ops, a_cols, a_vals, start..end, s, out),
    }
}

/// Few products: collect, sort by column, merge equal columns.
fn sort_row<T: Scalar, S: Semiring<T>, const NUMERIC: bool>(
    ops: &Operands<'_, T>,
    a_cols: &[u32],
    a_vals: &[T],
    s: &mut Scratch<T::Acc>,
    out: &mut RowOut<'_, T>,
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
                .map(|(&j, &bv)| (j, S::mul_at(av, bv, k))),
        );
    }
    pairs.sort_unstable_by_key(|p| p.0);
    write_merged::<T, S>(pairs, ops.lo, out)
}

/// Writes sorted (column, value) pairs, summing equal columns; returns the entries written.
pub(super) fn write_merged<T: Scalar, S: Semiring<T>>(
    pairs: &[(u32, T::Acc)],
    lo: u32,
    out: &mut RowOut<'_, T>,
) -> usize {
    let mut p = 0;
    while p < pairs.len() {
        let (j, mut acc) = pairs[p];
        p += 1;
        while p < pairs.len() && pairs[p].0 == j {
            acc = S::add(acc, pairs[p].1);
            p += 1;
        }
        out.push(j - lo, T::from_acc(acc));
    }
    out.written()
}

/// Open addressing (linear probing) in a table of at least twice `entries` slots. The
/// numeric phase lists the row in order through the column bitmap where that pays (a bit set
/// per new column, a walk of the set's words), else by sorting the keys.
fn hash_row<T: Scalar, S: Semiring<T>, const NUMERIC: bool>(
    ops: &Operands<'_, T>,
    a_cols: &[u32],
    a_vals: &[T],
    entries: usize,
    s: &mut Scratch<T::Acc>,
    out: &mut RowOut<'_, T>,
) -> usize {
    let mask = s.hash_table(entries);
    // Slices of exactly the table: indices masked by `mask` need no bounds test, and the loop
    // keeps them in registers.
    let (keys, values) = (&mut s.keys[..=mask], &mut s.values[..=mask]);
    let ordered = NUMERIC && bitmap_pays(entries as u64, ops.width());
    let mut set = s.set.cover(if ordered { ops.width() } else { 0 });
    let lo = ops.lo;
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
                        values[h] = S::add(values[h], S::mul_at(av, bv, k));
                    }
                    break;
                }
                if key == EMPTY {
                    keys[h] = j;
                    if NUMERIC {
                        values[h] = S::mul_at(av, bv, k);
                    }
                    if ordered {
                        set.insert_new((j - lo) as usize);
                    }
                    n += 1;
                    if n > entries {
                        // More columns than the symbolic phase counted: a bug, which the
                        // caller reports; stop before the table fills up.
                        set.clear();
                        return n;
                    }
                    break;
                }
                h = (h + 1) & mask;
            }
        }
    }
    if !NUMERIC || (out.exact && n != out.len()) {
        set.clear();
        return n;
    }
    let value = |j: u32| {
        let mut h = hash(j, mask);
        while keys[h] != j {
            h = (h + 1) & mask;
        }
        T::from_acc(values[h])
    };
    if ordered {
        set.drain(|j| out.push(j as u32, value(j as u32 + lo)));
    } else {
        // Sorting the bare columns and probing again for each value is cheaper than sorting
        // (column, value) pairs.
        // Half the slots are empty, at random: compacting without a branch on each one.
        let columns = &mut s.columns;
        columns.clear();
        columns.resize(mask + 1, 0);
        let mut m = 0;
        for &key in &keys[..=mask] {
            columns[m] = key;
            m += usize::from(key != EMPTY);
        }
        let columns = &mut columns[..m];
        columns.sort_unstable();
        for &j in columns.iter() {
            out.push(j - lo, value(j));
        }
    }
    out.written()
}

/// A dense accumulator over `window` (columns of C relative to the chunk's window), which the
/// row's products stay within; the symbolic phase uses only its column bitmap.
///
/// Rows whose products mostly revisit columns (stencils: many times more products than
/// entries) test each column's bit before setting it in the numeric phase, a branch that is
/// then nearly always predicted; other rows, and the symbolic phase (which does not know the
/// row's entries yet), set bits unconditionally, a run of B's row at a time.
fn dense_row<T: Scalar, S: Semiring<T>, const NUMERIC: bool>(
    ops: &Operands<'_, T>,
    a_cols: &[u32],
    a_vals: &[T],
    products: u64,
    window: Range<usize>,
    s: &mut Scratch<T::Acc>,
    out: &mut RowOut<'_, T>,
) -> usize {
    let revisits = NUMERIC && out.revisits(products, REVISITS);
    let (mut set, dense) = s.dense_row(window.len(), NUMERIC, S::zero());
    let lo = ops.lo + window.start as u32;
    for (e, (&k, &av)) in a_cols.iter().zip(a_vals).enumerate() {
        ops.prefetch(a_cols, e);
        let (b_cols, b_vals) = ops.b_row(k);
        if revisits {
            for (&j, &bv) in b_cols.iter().zip(b_vals) {
                let j = (j - lo) as usize;
                if NUMERIC {
                    dense[j] = S::add(dense[j], S::mul_at(av, bv, k));
                }
                set.insert_checked(j);
            }
        } else if NUMERIC {
            set.insert_sorted_each(b_cols, b_vals, lo, |j, bv| {
                dense[j] = S::add(dense[j], S::mul_at(av, bv, k));
            });
        } else {
            set.insert_sorted(b_cols, lo);
        }
    }
    if !NUMERIC {
        return set.clear();
    }
    let base = window.start as u32;
    set.drain(|j| {
        let acc = std::mem::replace(&mut dense[j], S::zero());
        out.push(base + j as u32, T::from_acc(acc));
    });
    out.written()
}

/// A row of C known to fill every column: a dense accumulator with no bitmap, and every
/// column written in order.
fn full_row<T: Scalar, S: Semiring<T>>(
    ops: &Operands<'_, T>,
    a_cols: &[u32],
    a_vals: &[T],
    s: &mut Scratch<T::Acc>,
    out: &mut RowOut<'_, T>,
) -> usize {
    let width = ops.width();
    let (_, dense) = s.dense_row(width, true, S::zero());
    let lo = ops.lo;
    for (e, (&k, &av)) in a_cols.iter().zip(a_vals).enumerate() {
        ops.prefetch(a_cols, e);
        let (b_cols, b_vals) = ops.b_row(k);
        if b_cols.len() == width {
            // A full row of B: contiguous, no indices needed.
            for (c, &bv) in dense.iter_mut().zip(b_vals) {
                *c = S::add(*c, S::mul_at(av, bv, k));
            }
        } else {
            for (&j, &bv) in b_cols.iter().zip(b_vals) {
                let c = &mut dense[(j - lo) as usize];
                *c = S::add(*c, S::mul_at(av, bv, k));
            }
        }
    }
    for (j, acc) in dense.iter_mut().enumerate() {
        out.push(j as u32, T::from_acc(std::mem::replace(acc, S::zero())));
    }
    out.written()
}

/// A dense accumulator over one cache-sized panel of `window` at a time; each entry of A
/// keeps a cursor into its row of B, so every product is still visited once.
fn panel_row<T: Scalar, S: Semiring<T>, const NUMERIC: bool>(
    ops: &Operands<'_, T>,
    a_cols: &[u32],
    a_vals: &[T],
    window: Range<usize>,
    s: &mut Scratch<T::Acc>,
    out: &mut RowOut<'_, T>,
) -> usize {
    let panel = dense_columns::<T::Acc>();
    // Taken out of the scratch for the row, which lends its set and values panel by panel.
    let mut cursors = std::mem::take(&mut s.cursors);
    cursors.clear();
    cursors.resize(a_cols.len(), 0);
    let mut n = 0;
    let mut start = window.start;
    while start < window.end {
        let end = (start + panel).min(window.end);
        let (mut set, dense) = s.dense_row(end - start, NUMERIC, S::zero());
        // Columns `start..end` of the chunk's window are `lo..` of B.
        let lo = ops.lo as usize + start;
        let stop = ops.lo as usize + end;
        for ((&k, &av), cursor) in a_cols.iter().zip(a_vals).zip(cursors.iter_mut()) {
            let (b_cols, b_vals) = ops.b_row(k);
            let first = *cursor;
            let mut p = first;
            while p < b_cols.len() && (b_cols[p] as usize) < stop {
                if NUMERIC {
                    let j = b_cols[p] as usize - lo;
                    dense[j] = S::add(dense[j], S::mul_at(av, b_vals[p], k));
                }
                p += 1;
            }
            set.insert_sorted(&b_cols[first..p], lo as u32);
            *cursor = p;
        }
        if NUMERIC {
            let base = start as u32;
            set.drain(|j| {
                let acc = std::mem::replace(&mut dense[j], S::zero());
                out.push(base + j as u32, T::from_acc(acc));
            });
        } else {
            n += set.clear();
        }
        start = end;
    }
    s.cursors = cursors;
    if NUMERIC {
        out.written()
    } else {
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accumulators_follow_the_row_shape() {
        let dense = dense_columns::<f64>();
        assert_eq!(choose::<f64>(100, 1, 1 << 20, false), Kind::Scale);
        assert_eq!(choose::<f64>(20, 5, 1 << 20, false), Kind::Sort);
        assert_eq!(choose::<f64>(20, 5, 1000, false), Kind::Sort);
        assert_eq!(
            choose::<f64>(20, 5, 1000, true),
            Kind::Dense,
            "short rows in a narrowed window reuse the slots of the rows before"
        );
        assert_eq!(choose::<f64>(1000, 50, dense, false), Kind::Dense);
        assert_eq!(
            choose::<f64>(40, 5, 32_768, false),
            Kind::Dense,
            "rows of a window that fits the cache are dense, however sparse"
        );
        assert_eq!(choose::<f64>(1000, 50, 1 << 24, false), Kind::Hash);
        assert_eq!(
            choose::<f64>(1 << 24, 100, 1 << 20, false),
            Kind::Panels,
            "wide and dense rows go panel by panel"
        );
        assert_eq!(
            choose::<f64>(dense as u64 + 1, 10_000, 1 << 18, false),
            Kind::Dense,
            "long rows of A with few products each are not worth panels"
        );
        assert_eq!(
            choose::<f64>(30_000, 100, 1 << 18, false),
            Kind::Panels,
            "rows filling a good part of a wide C are not hashed"
        );
    }
}
