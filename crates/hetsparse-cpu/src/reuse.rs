//! Plan reuse: the numeric phase of a planned SpGEMM, with less work per product than a full
//! product.
//!
//! A full product finds each product's place in C as it goes (a dense window with a column
//! bitmap, a hash table, a sort) and writes C's column indices. A plan already holds C's
//! structure, so an execution only needs each product's position in its row of C:
//!
//! - **Positions**: where the plan can afford it, it stores, for every intermediate product
//!   in order, the position of its entry in its row of C, in the narrowest integer that holds
//!   C's longest row (a byte for road networks). An execution is then a gather-multiply-
//!   scatter into a row-sized accumulator: no search, and no read of B's column indices nor of
//!   C's. The table is kept only while it is no larger than C itself ([`POSITION_BUDGET`]),
//!   which products of few products per entry of C (road, power law) stay within.
//! - **Dense windows**: other rows (stencils, whose rows revisit each entry many times) are
//!   accumulated in a dense array over their window of C (first to last column), then read out
//!   by the row's columns: no bitmap, no hash, no probing. Where B's rows are made of runs of
//!   consecutive columns (a node's unknowns, neighbours along a grid line), the plan keeps
//!   them ([`Runs`]) and each run is one contiguous, vectorised update of the window.
//! - Rows too wide for a dense window search their position: a binary search in short rows, a
//!   per-thread column→position map in long ones.
//!
//! Operands are matched to the plan by their pattern identities (shape, entry count and a hash
//! of offsets and column indices, `SpgemmPlan::check_operands`) before anything runs: the
//! tables trust that match for where values go. Every path also checks what it can afford
//! without slowing down: the products of each batch of rows against the table's, each
//! position against its row, each column or run against its row's window, each row of B
//! against its runs; none writes outside C's values, whatever it is given.

use std::mem::MaybeUninit;

use hetsparse_core::backend::plan::HostStructure;
use hetsparse_core::{Csr, Error, Result, RunControl, Scalar, Semiring};
use rayon::prelude::*;

/// Rows per unit of parallel work, per cancellation check and per entry of the position
/// table's batch offsets.
const BATCH_ROWS: usize = 256;

/// The position table is kept while its bytes are at most C's (offsets, indices and values)
/// divided by this: a plan then holds at most twice the memory of the product it describes.
const POSITION_BUDGET: u64 = 1;

/// Widest window of C (in columns) a row accumulates densely: 256 KiB of f64, within a core's
/// L2 cache.
const DENSE_WINDOW_MAX: usize = 1 << 15;

/// Rows of C up to this length find a product's position by binary search in the row (which
/// sits in L1); longer rows through a per-thread map from B's columns to positions.
const SEARCH_MAX_ROW: usize = 16;

/// Above this many columns the map would no longer fit any cache: binary search everywhere.
const POSITION_MAP_MAX_COLS: usize = 1 << 24;

/// Entries of A ahead whose row of B is prefetched, as in the full product.
const PREFETCH_AHEAD: usize = 4;

/// The position of each product in its row of C, in the narrowest integer for C's longest
/// row, and where each batch of [`BATCH_ROWS`] rows starts in it.
#[derive(Debug)]
pub(crate) struct Positions {
    table: Table,
    /// `batches + 1` offsets into the table.
    batch_starts: Vec<u64>,
}

#[derive(Debug)]
enum Table {
    Byte(Vec<u8>),
    Half(Vec<u16>),
    Word(Vec<u32>),
}

/// A position in a row of C.
trait Position: Copy + Send + Sync + TryFrom<usize> {
    fn at(self) -> usize;
}

impl Position for u8 {
    #[inline(always)]
    fn at(self) -> usize {
        self as usize
    }
}
impl Position for u16 {
    #[inline(always)]
    fn at(self) -> usize {
        self as usize
    }
}
impl Position for u32 {
    #[inline(always)]
    fn at(self) -> usize {
        self as usize
    }
}

impl Positions {
    /// Bytes of the table and its batch offsets.
    pub(crate) fn bytes(&self) -> u64 {
        let table = match &self.table {
            Table::Byte(t) => t.len() as u64,
            Table::Half(t) => 2 * t.len() as u64,
            Table::Word(t) => 4 * t.len() as u64,
        };
        table + 8 * self.batch_starts.len() as u64
    }

    /// The table of `structure`, the product of A's and B's patterns, or `None` where it
    /// would exceed [`POSITION_BUDGET`] or the host's memory; runs on the current pool.
    pub(crate) fn build<T: Scalar>(
        structure: &HostStructure,
        a: &Csr<T>,
        b: &Csr<T>,
        value_bytes: usize,
    ) -> Result<Option<Positions>> {
        let offsets = structure.row_offsets();
        let nrows = structure.nrows();
        let longest = (0..nrows)
            .into_par_iter()
            .map(|i| offsets[i + 1] - offsets[i])
            .max()
            .unwrap_or(0);
        let width: u64 = if longest <= 1 << 8 {
            1
        } else if longest <= 1 << 16 {
            2
        } else {
            4
        };
        let batch_products: Vec<u64> = (0..nrows.div_ceil(BATCH_ROWS))
            .into_par_iter()
            .map(|batch| {
                let rows = batch * BATCH_ROWS..((batch + 1) * BATCH_ROWS).min(nrows);
                rows.map(|i| row_products(a, b, i)).sum()
            })
            .collect();
        let mut batch_starts = Vec::with_capacity(batch_products.len() + 1);
        batch_starts.push(0u64);
        let mut total = 0u64;
        for p in &batch_products {
            total += p;
            batch_starts.push(total);
        }
        let c_bytes = hetsparse_core::backend::memory::csr_bytes(
            nrows,
            structure.col_indices().len() as u64,
            value_bytes,
        );
        if total.saturating_mul(width) > c_bytes / POSITION_BUDGET {
            return Ok(None);
        }
        let Ok(len) = usize::try_from(total) else {
            return Ok(None);
        };
        let table = match width {
            1 => fill(structure, a, b, &batch_starts, len)?.map(Table::Byte),
            2 => fill(structure, a, b, &batch_starts, len)?.map(Table::Half),
            _ => fill(structure, a, b, &batch_starts, len)?.map(Table::Word),
        };
        Ok(table.map(|table| Positions {
            table,
            batch_starts,
        }))
    }
}

/// B's rows as runs of consecutive columns, `(first column, length)`, for products without a
/// position table whose B is made of such runs (stencils: a node's unknowns, neighbours along
/// a grid line): a row of C then accumulates each run as one contiguous, vectorised update of
/// its dense window, with no column index per product.
#[derive(Debug)]
pub(crate) struct Runs {
    /// `B.nrows + 1` offsets into `runs`.
    row_starts: Vec<u64>,
    runs: Vec<(u32, u32)>,
}

/// B's entries per run at least this many on average for [`Runs`] to pay (and the runs then
/// take at most a quarter of B's column indices' memory, twice over).
const MIN_RUN: u64 = 4;

impl Runs {
    /// Bytes held.
    pub(crate) fn bytes(&self) -> u64 {
        8 * self.row_starts.len() as u64 + 8 * self.runs.len() as u64
    }

    /// B's runs, or `None` where they are shorter than [`MIN_RUN`] on average.
    pub(crate) fn build<T: Scalar>(b: &Csr<T>) -> Option<Runs> {
        let runs_of = |i: usize| -> u64 {
            let cols = b.row(i).0;
            cols.windows(2).filter(|w| w[1] != w[0] + 1).count() as u64
                + u64::from(!cols.is_empty())
        };
        let counts: Vec<u64> = (0..b.nrows()).into_par_iter().map(runs_of).collect();
        let total: u64 = counts.iter().sum();
        if total.saturating_mul(MIN_RUN) > b.nnz() {
            return None;
        }
        let mut row_starts = Vec::with_capacity(counts.len() + 1);
        row_starts.push(0u64);
        let mut sum = 0;
        for c in &counts {
            sum += c;
            row_starts.push(sum);
        }
        let runs: Vec<(u32, u32)> = (0..b.nrows())
            .into_par_iter()
            .flat_map_iter(|i| {
                let cols = b.row(i).0;
                let mut out = Vec::with_capacity(counts[i] as usize);
                let mut e = 0;
                while e < cols.len() {
                    let mut end = e + 1;
                    while end < cols.len() && cols[end] == cols[end - 1] + 1 {
                        end += 1;
                    }
                    out.push((cols[e], (end - e) as u32));
                    e = end;
                }
                out
            })
            .collect();
        Some(Runs { row_starts, runs })
    }

    #[inline(always)]
    fn row(&self, k: usize) -> &[(u32, u32)] {
        &self.runs[self.row_starts[k] as usize..self.row_starts[k + 1] as usize]
    }
}

/// What a CPU plan keeps beside C's structure (an extension of its
/// [`HostStructure`](hetsparse_core::backend::plan::HostStructure)).
#[derive(Debug, Default)]
pub(crate) struct Tables {
    pub(crate) positions: Option<Positions>,
    pub(crate) runs: Option<Runs>,
}

impl Tables {
    /// The tables of `structure`, the product of A's and B's patterns (see [`Positions`] and
    /// [`Runs`]); runs on the current pool.
    pub(crate) fn build<T: Scalar>(
        structure: &HostStructure,
        a: &Csr<T>,
        b: &Csr<T>,
    ) -> Result<Tables> {
        let positions = Positions::build(structure, a, b, std::mem::size_of::<T>())?;
        let runs = if positions.is_none() {
            Runs::build(b)
        } else {
            None
        };
        Ok(Tables { positions, runs })
    }

    /// Bytes held.
    pub(crate) fn bytes(&self) -> u64 {
        self.positions.as_ref().map_or(0, Positions::bytes)
            + self.runs.as_ref().map_or(0, Runs::bytes)
    }
}

/// Intermediate products of row `i` of A·B.
fn row_products<T: Scalar>(a: &Csr<T>, b: &Csr<T>, i: usize) -> u64 {
    a.row(i).0.iter().map(|&k| b.row_nnz(k as usize)).sum()
}

/// The position table: every product's position in its row, found as the reference numeric
/// phase finds it.
fn fill<P: Position, T: Scalar>(
    structure: &HostStructure,
    a: &Csr<T>,
    b: &Csr<T>,
    batch_starts: &[u64],
    len: usize,
) -> Result<Option<Vec<P>>> {
    let mut table: Vec<P> = Vec::new();
    if table.try_reserve_exact(len).is_err() {
        // The table is an acceleration: a plan without it runs on.
        return Ok(None);
    }
    let mut pieces = Vec::with_capacity(batch_starts.len() - 1);
    let mut rest = &mut table.spare_capacity_mut()[..len];
    for w in batch_starts.windows(2) {
        let (piece, tail) = rest.split_at_mut((w[1] - w[0]) as usize);
        pieces.push(piece);
        rest = tail;
    }
    let (offsets, cols) = (structure.row_offsets(), structure.col_indices());
    let ncols = structure.ncols();
    let map_allowed = ncols <= POSITION_MAP_MAX_COLS;
    pieces.into_par_iter().enumerate().try_for_each_init(
        Vec::<u32>::new,
        |map, (batch, piece): (usize, &mut [MaybeUninit<P>])| -> Result<()> {
            let rows = batch * BATCH_ROWS..((batch + 1) * BATCH_ROWS).min(a.nrows());
            let mut cursor = 0;
            for i in rows {
                let row_cols = &cols[offsets[i] as usize..offsets[i + 1] as usize];
                let use_map = map_allowed && row_cols.len() > SEARCH_MAX_ROW;
                if use_map {
                    if map.len() < ncols {
                        map.resize(ncols, 0);
                    }
                    for (p, &j) in row_cols.iter().enumerate() {
                        map[j as usize] = p as u32;
                    }
                }
                for &k in a.row(i).0 {
                    for &j in b.row(k as usize).0 {
                        let at = if use_map {
                            let at = map[j as usize] as usize;
                            (row_cols.get(at) == Some(&j)).then_some(at)
                        } else {
                            row_cols.binary_search(&j).ok()
                        };
                        let position = at.and_then(|at| P::try_from(at).ok()).ok_or_else(|| {
                            Error::PatternMismatch {
                                operand: "A·B",
                                detail: format!(
                                    "product entry ({i}, {j}) is not in the planned structure"
                                ),
                            }
                        })?;
                        piece[cursor].write(position);
                        cursor += 1;
                    }
                }
            }
            if cursor != piece.len() {
                return Err(mismatch(batch, piece.len() as u64, cursor as u64));
            }
            Ok(())
        },
    )?;
    // SAFETY: the pieces tile the table and each wrote every one of its slots (checked above).
    unsafe { table.set_len(len) };
    Ok(Some(table))
}

/// Batch `batch`'s products do not match the plan's: `planned` of them, `found` where the
/// mismatch showed (a count, or the product whose position fell outside its row).
fn mismatch(batch: usize, planned: u64, found: u64) -> Error {
    let rows = batch * BATCH_ROWS;
    Error::PatternMismatch {
        operand: "A·B",
        detail: format!(
            "rows {rows}..{} do not match the plan: {planned} products planned, a mismatch at \
             product {found}",
            rows + BATCH_ROWS
        ),
    }
}

/// `C = A·B` into `structure`, the structure of the product of A's and B's patterns, with its
/// position table where the plan kept one. Runs on the current rayon pool, checking `run`
/// between batches of rows and reporting each batch's products to it.
pub(crate) fn numeric<T: Scalar, S: Semiring<T>>(
    structure: &HostStructure,
    tables: Option<&Tables>,
    a: &Csr<T>,
    b: &Csr<T>,
    run: &RunControl,
) -> Result<Csr<T>> {
    let positions = tables.and_then(|t| t.positions.as_ref());
    let runs = tables.and_then(|t| t.runs.as_ref());
    if runs.is_some_and(|r| r.row_starts.len() != b.nrows() + 1) {
        return Err(Error::PatternMismatch {
            operand: "B",
            detail: format!("the plan's runs of B are not of a B of {} rows", b.nrows()),
        });
    }
    let nrows = a.nrows();
    if structure.nrows() != nrows || structure.ncols() != b.ncols() || a.ncols() != b.nrows() {
        return Err(Error::PatternMismatch {
            operand: "A·B",
            detail: format!(
                "the plan's product is {}×{}, the operands {}×{} and {}×{}",
                structure.nrows(),
                structure.ncols(),
                a.nrows(),
                a.ncols(),
                b.nrows(),
                b.ncols()
            ),
        });
    }
    let offsets = structure.row_offsets();
    let nnz = structure.col_indices().len();
    let batches = nrows.div_ceil(BATCH_ROWS);
    if let Some(p) = positions {
        if p.batch_starts.len() != batches + 1 {
            return Err(Error::PatternMismatch {
                operand: "A·B",
                detail: format!(
                    "the plan's position table covers {} batches of rows, A has {batches}",
                    p.batch_starts.len() - 1
                ),
            });
        }
    }
    // Every value is written exactly once below, so C's values start uninitialised (no pass
    // to zero them).
    let mut values: Vec<T> = Vec::with_capacity(nnz);
    hetsparse_core::advise_huge_pages(values.spare_capacity_mut());
    let mut pieces: Vec<(usize, &mut [MaybeUninit<T>])> = Vec::with_capacity(batches);
    let mut rest = &mut values.spare_capacity_mut()[..nnz];
    let mut consumed = 0u64;
    for batch in 0..batches {
        let end = offsets[((batch + 1) * BATCH_ROWS).min(nrows)];
        let (piece, tail) = rest.split_at_mut((end - consumed) as usize);
        pieces.push((batch, piece));
        rest = tail;
        consumed = end;
    }
    let (ra, rb) = (Rows::of(a), Rows::of(b));
    pieces.into_par_iter().try_for_each_init(
        Scratch::<T::Acc>::default,
        |scratch, (batch, piece)| -> Result<()> {
            run.checkpoint()?;
            let rows = batch * BATCH_ROWS..((batch + 1) * BATCH_ROWS).min(nrows);
            let out = Out {
                offsets,
                cols: structure.col_indices(),
                base: offsets[rows.start],
                piece,
            };
            let products = match positions {
                Some(p) => {
                    let span = p.batch_starts[batch] as usize..p.batch_starts[batch + 1] as usize;
                    match &p.table {
                        Table::Byte(t) => {
                            by_position::<T, S, u8>(ra, rb, rows, &t[span], out, scratch)
                        }
                        Table::Half(t) => {
                            by_position::<T, S, u16>(ra, rb, rows, &t[span], out, scratch)
                        }
                        Table::Word(t) => {
                            by_position::<T, S, u32>(ra, rb, rows, &t[span], out, scratch)
                        }
                    }
                    .map_err(|(planned, found)| mismatch(batch, planned, found))?
                }
                None => by_window::<T, S>(ra, rb, runs, b.ncols(), rows, out, scratch)?,
            };
            run.add_done(products);
            Ok(())
        },
    )?;
    // SAFETY: the batches tile C's entries and each row wrote every value of its range.
    unsafe { values.set_len(nnz) };
    structure.with_values(values)
}

/// Bytes of one thread's buffers in an execution of a plan over `structure`, with or without
/// a position table: an accumulator as long as C's longest row, or as a dense window, and
/// without a table a column map for long rows of wide windows.
pub(crate) fn scratch_bytes<T: Scalar>(structure: &HostStructure, table: bool) -> u64 {
    let offsets = structure.row_offsets();
    let longest = (0..structure.nrows())
        .into_par_iter()
        .map(|i| offsets[i + 1] - offsets[i])
        .max()
        .unwrap_or(0);
    let ncols = structure.ncols() as u64;
    let (acc, map) = if table {
        (longest, 0)
    } else {
        let map = if ncols <= POSITION_MAP_MAX_COLS as u64 {
            ncols
        } else {
            0
        };
        (longest.max(ncols.min(DENSE_WINDOW_MAX as u64)), map)
    };
    acc * std::mem::size_of::<T::Acc>() as u64 + map * 4
}

/// Per-thread buffers of an execution.
struct Scratch<A> {
    /// A row of C (positions) or a row's window (dense), zero between rows.
    acc: Vec<A>,
    /// Column → position in the row, for long rows of wide products.
    map: Vec<u32>,
}

impl<A> Default for Scratch<A> {
    fn default() -> Self {
        Scratch {
            acc: Vec::new(),
            map: Vec::new(),
        }
    }
}

/// A batch's rows of C: the structure and the batch's values, from offset `base`.
struct Out<'a, T> {
    offsets: &'a [u64],
    cols: &'a [u32],
    base: u64,
    piece: &'a mut [MaybeUninit<T>],
}

impl<T> Out<'_, T> {
    /// Row `i`'s columns and value slots.
    #[inline(always)]
    fn row(&mut self, i: usize) -> (&[u32], &mut [MaybeUninit<T>]) {
        let (lo, hi) = (self.offsets[i] as usize, self.offsets[i + 1] as usize);
        let base = self.base as usize;
        (&self.cols[lo..hi], &mut self.piece[lo - base..hi - base])
    }
}

/// A CSR operand's arrays, read row by row.
#[derive(Clone, Copy)]
struct Rows<'a, T> {
    offsets: &'a [u64],
    cols: &'a [u32],
    values: &'a [T],
}

impl<'a, T: Scalar> Rows<'a, T> {
    fn of(m: &'a Csr<T>) -> Self {
        Rows {
            offsets: m.row_offsets(),
            cols: m.col_indices(),
            values: m.values(),
        }
    }

    #[inline(always)]
    fn span(&self, i: usize) -> std::ops::Range<usize> {
        self.offsets[i] as usize..self.offsets[i + 1] as usize
    }

    #[inline(always)]
    fn row(&self, i: usize) -> (&'a [u32], &'a [T]) {
        let span = self.span(i);
        (&self.cols[span.clone()], &self.values[span])
    }

    #[inline(always)]
    fn row_values(&self, i: usize) -> &'a [T] {
        &self.values[self.span(i)]
    }

    /// Prefetches the values of the row of B of entry `e + PREFETCH_AHEAD` of `a_cols`.
    #[inline(always)]
    fn prefetch_values(&self, a_cols: &[u32], e: usize) {
        #[cfg(target_arch = "x86_64")]
        if let Some(&k) = a_cols.get(e + PREFETCH_AHEAD) {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            let start = self.offsets[k as usize] as usize;
            // SAFETY: a prefetch never faults; `start` is at most the number of entries, one
            // past the end at worst, which pointer arithmetic may name.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(self.values.as_ptr().add(start).cast()) };
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (a_cols, e);
    }
}

/// Rows `rows` through their positions `table` (the batch's): returns the products, or the
/// planned and found products where they disagree or a position falls outside its row.
fn by_position<T: Scalar, S: Semiring<T>, P: Position>(
    a: Rows<'_, T>,
    b: Rows<'_, T>,
    rows: std::ops::Range<usize>,
    table: &[P],
    mut out: Out<'_, T>,
    scratch: &mut Scratch<T::Acc>,
) -> std::result::Result<u64, (u64, u64)> {
    let planned = table.len() as u64;
    let mut cursor = 0usize;
    for i in rows {
        let (row_cols, slots) = out.row(i);
        let n = row_cols.len();
        if scratch.acc.len() < n {
            scratch.acc.resize(n, S::zero());
        }
        let acc = &mut scratch.acc[..n];
        let (a_cols, a_vals) = a.row(i);
        for (e, (&k, &av)) in a_cols.iter().zip(a_vals).enumerate() {
            b.prefetch_values(a_cols, e);
            let b_vals = b.row_values(k as usize);
            let Some(at) = table.get(cursor..cursor + b_vals.len()) else {
                return Err((planned, (cursor + b_vals.len()) as u64));
            };
            cursor += b_vals.len();
            for (&p, &bv) in at.iter().zip(b_vals) {
                let Some(slot) = acc.get_mut(p.at()) else {
                    return Err((planned, cursor as u64));
                };
                *slot = S::fma(*slot, av, bv);
            }
        }
        for (dst, acc) in slots.iter_mut().zip(acc.iter_mut()) {
            dst.write(T::from_acc(std::mem::replace(acc, S::zero())));
        }
    }
    if cursor != table.len() {
        return Err((planned, cursor as u64));
    }
    Ok(planned)
}

/// Rows `rows` without positions: dense windows where narrow, else a search per product.
/// Returns the products.
fn by_window<T: Scalar, S: Semiring<T>>(
    a: Rows<'_, T>,
    b: Rows<'_, T>,
    runs: Option<&Runs>,
    ncols: usize,
    rows: std::ops::Range<usize>,
    mut out: Out<'_, T>,
    scratch: &mut Scratch<T::Acc>,
) -> Result<u64> {
    let mut products = 0u64;
    for i in rows {
        let (row_cols, slots) = out.row(i);
        let (a_cols, a_vals) = a.row(i);
        let (Some(&first), Some(&last)) = (row_cols.first(), row_cols.last()) else {
            // An empty row of C: every product would be outside it.
            if let Some(&j) = a_cols.iter().find_map(|&k| b.row(k as usize).0.first()) {
                return Err(outside(i, j));
            }
            continue;
        };
        let window = (last - first) as usize + 1;
        if window <= DENSE_WINDOW_MAX {
            if scratch.acc.len() < window {
                scratch.acc.resize(window, S::zero());
            }
            let dense = &mut scratch.acc[..window];
            if let Some(runs) = runs {
                for (e, (&k, &av)) in a_cols.iter().zip(a_vals).enumerate() {
                    b.prefetch_values(a_cols, e);
                    let b_vals = b.row_values(k as usize);
                    products += b_vals.len() as u64;
                    let mut p = 0;
                    for &(col, len) in runs.row(k as usize) {
                        let (start, len) = (col.wrapping_sub(first) as usize, len as usize);
                        let (Some(dst), Some(src)) =
                            (dense.get_mut(start..start + len), b_vals.get(p..p + len))
                        else {
                            return Err(outside(i, col));
                        };
                        for (d, &bv) in dst.iter_mut().zip(src) {
                            *d = S::fma(*d, av, bv);
                        }
                        p += len;
                    }
                    if p != b_vals.len() {
                        return Err(Error::PatternMismatch {
                            operand: "B",
                            detail: format!(
                                "row {k} has {} entries, the plan's runs {p}",
                                b_vals.len()
                            ),
                        });
                    }
                }
            } else {
                for (e, (&k, &av)) in a_cols.iter().zip(a_vals).enumerate() {
                    b.prefetch_values(a_cols, e);
                    let (b_cols, b_vals) = b.row(k as usize);
                    products += b_cols.len() as u64;
                    for (&j, &bv) in b_cols.iter().zip(b_vals) {
                        let Some(slot) = dense.get_mut(j.wrapping_sub(first) as usize) else {
                            return Err(outside(i, j));
                        };
                        *slot = S::fma(*slot, av, bv);
                    }
                }
            }
            for (dst, &j) in slots.iter_mut().zip(row_cols) {
                let acc = std::mem::replace(&mut dense[(j - first) as usize], S::zero());
                dst.write(T::from_acc(acc));
            }
            continue;
        }
        let n = row_cols.len();
        let use_map = ncols <= POSITION_MAP_MAX_COLS && n > SEARCH_MAX_ROW;
        if use_map {
            if scratch.map.len() < ncols {
                scratch.map.resize(ncols, 0);
            }
            for (p, &j) in row_cols.iter().enumerate() {
                scratch.map[j as usize] = p as u32;
            }
        }
        if scratch.acc.len() < n {
            scratch.acc.resize(n, S::zero());
        }
        let acc = &mut scratch.acc[..n];
        for (e, (&k, &av)) in a_cols.iter().zip(a_vals).enumerate() {
            b.prefetch_values(a_cols, e);
            let (b_cols, b_vals) = b.row(k as usize);
            products += b_cols.len() as u64;
            for (&j, &bv) in b_cols.iter().zip(b_vals) {
                let at = if use_map {
                    let at = scratch.map[j as usize] as usize;
                    (row_cols.get(at) == Some(&j)).then_some(at)
                } else {
                    row_cols.binary_search(&j).ok()
                };
                let Some(at) = at else {
                    return Err(outside(i, j));
                };
                acc[at] = S::fma(acc[at], av, bv);
            }
        }
        for (dst, acc) in slots.iter_mut().zip(acc.iter_mut()) {
            dst.write(T::from_acc(std::mem::replace(acc, S::zero())));
        }
    }
    Ok(products)
}

fn outside(i: usize, j: u32) -> Error {
    Error::PatternMismatch {
        operand: "A·B",
        detail: format!("product entry ({i}, {j}) is not in the planned structure"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hetsparse_core::generate::{product_operands, MatrixClass};
    use hetsparse_core::{reference, PlusTimes};

    /// The plan state of `a·b` (its structure from the reference product) and its tables.
    fn planned(a: &Csr<f64>, b: &Csr<f64>) -> (HostStructure, Tables) {
        let c = reference::spgemm::<f64, PlusTimes>(a, b).expect("reference product");
        let structure = HostStructure::of(&c);
        let tables = Tables::build(&structure, a, b).expect("tables");
        (structure, tables)
    }

    /// Other values on the same pattern.
    fn revalued(m: &Csr<f64>, seed: f64) -> Csr<f64> {
        let values = (0..m.nnz())
            .map(|e| ((e as f64 + seed) * 0.618).fract() - 0.5)
            .collect();
        m.with_values(values).expect("values")
    }

    /// Every path (with the plan's tables, with each alone, with none) gives the reference
    /// product of new values. `table` says which position table the plan should keep, if any.
    fn every_path_matches(a: &Csr<f64>, b: &Csr<f64>, table: Option<fn(&Table) -> bool>) {
        let (structure, tables) = planned(a, b);
        match (table, &tables.positions) {
            (Some(expected), Some(p)) => assert!(expected(&p.table), "table {:?}", p.table),
            (None, None) => {}
            (t, p) => panic!("expected a table: {}, got {p:?}", t.is_some()),
        }
        let (a2, b2) = (revalued(a, 0.3), revalued(b, 0.7));
        let expected = reference::spgemm::<f64, PlusTimes>(&a2, &b2).expect("reference");
        let runs = Runs::build(b);
        let variants = [
            Some(&tables),
            Some(&Tables {
                positions: None,
                runs,
            }),
            None,
        ];
        for t in variants {
            let run = RunControl::new();
            let c = numeric::<f64, PlusTimes>(&structure, t, &a2, &b2, &run).expect("numeric");
            assert_eq!(c.row_offsets(), expected.row_offsets());
            assert_eq!(c.col_indices(), expected.col_indices());
            for (x, y) in c.values().iter().zip(expected.values()) {
                assert!((x - y).abs() <= 1e-12 * (1.0 + y.abs()), "{x} != {y}");
            }
            let progress = run.progress();
            let products: u64 = (0..a.nrows()).map(|i| row_products(a, b, i)).sum();
            assert_eq!(progress.done, products, "products reported");
        }
    }

    #[test]
    fn road_products_keep_a_byte_table_stencils_runs() {
        let (a, b) = product_operands::<f64>(MatrixClass::Road, 2000, 3);
        every_path_matches(&a, &b, Some(|t| matches!(t, Table::Byte(_))));
        // 27-point stencils bring about 17 products per entry of C: a table would outgrow C,
        // and rows are accumulated in dense windows, a run of B's columns at a time.
        let (a, b) = product_operands::<f64>(MatrixClass::Stencil3d, 3000, 3);
        let (_, tables) = planned(&a, &b);
        assert!(
            tables.positions.is_none() && tables.runs.is_some(),
            "{tables:?}"
        );
        every_path_matches(&a, &b, None);
        let (a, b) = product_operands::<f64>(MatrixClass::PowerLaw, 1 << 10, 3);
        let (_, tables) = planned(&a, &b);
        assert!(
            tables.positions.is_some(),
            "power-law products keep their table"
        );
        every_path_matches(&a, &b, Some(|_| true));
    }

    /// A row of `len` entries spread over `ncols` columns, times the identity.
    fn one_long_row(len: usize, ncols: usize) -> (Csr<f64>, Csr<f64>) {
        let step = ncols / len;
        let cols: Vec<u32> = (0..len).map(|e| (e * step) as u32).collect();
        let a = Csr::try_new(
            2,
            ncols,
            vec![0, len as u64, len as u64 + 1],
            cols.iter().copied().chain([5]).collect(),
            (0..=len).map(|e| e as f64 + 1.0).collect(),
        )
        .expect("a");
        let b = Csr::try_new(
            ncols,
            ncols,
            (0..=ncols as u64).collect(),
            (0..ncols as u32).collect(),
            vec![2.0; ncols],
        )
        .expect("b");
        (a, b)
    }

    #[test]
    fn tables_widen_with_the_longest_row() {
        let (a, b) = one_long_row(300, 1200);
        every_path_matches(&a, &b, Some(|t| matches!(t, Table::Half(_))));
        // A row of 70 000 entries over 140 000 columns: too wide for a dense window, so the
        // path without a table goes through the column map.
        let (a, b) = one_long_row(70_000, 140_000);
        every_path_matches(&a, &b, Some(|t| matches!(t, Table::Word(_))));
        // Short rows over a wide window: binary search.
        let (a, b) = one_long_row(10, 100_000);
        every_path_matches(&a, &b, Some(|t| matches!(t, Table::Byte(_))));
    }

    /// `m` with the last entry of row `from` moved to the end of row `to` (at the column
    /// after that row's last): the same entry count, other row lengths.
    fn moved_entry(m: &Csr<f64>, from: usize, to: usize) -> Csr<f64> {
        let mut rows: Vec<Vec<(u32, f64)>> = (0..m.nrows())
            .map(|i| {
                let (c, v) = m.row(i);
                c.iter().copied().zip(v.iter().copied()).collect()
            })
            .collect();
        let entry = rows[from].pop().expect("an entry to move");
        let next = rows[to].last().map_or(0, |&(j, _)| j + 1);
        rows[to].push((next, entry.1));
        let mut off = vec![0u64];
        for r in &rows {
            off.push(off.last().copied().unwrap_or(0) + r.len() as u64);
        }
        let cols = rows.iter().flatten().map(|e| e.0).collect();
        let vals = rows.iter().flatten().map(|e| e.1).collect();
        Csr::try_new(m.nrows(), m.ncols(), off, cols, vals).expect("moved entry")
    }

    #[test]
    fn operands_that_do_not_match_the_table_are_errors() {
        let (a, b) = product_operands::<f64>(MatrixClass::Road, 500, 5);
        let (structure, tables) = planned(&a, &b);
        assert!(tables.positions.is_some());
        // The pattern identity tells such operands apart before anything runs; this checks
        // that the tables alone never write out of place, whatever they are given.
        let from = (0..b.nrows()).find(|&i| b.row_nnz(i) >= 2).expect("a row");
        let to = (0..b.nrows())
            .rev()
            .find(|&i| {
                b.row(i)
                    .0
                    .last()
                    .is_some_and(|&j| (j as usize) + 1 < b.ncols())
            })
            .expect("a row with room");
        let other = moved_entry(&b, from, to);
        let r =
            numeric::<f64, PlusTimes>(&structure, Some(&tables), &a, &other, &RunControl::new());
        assert!(matches!(r, Err(Error::PatternMismatch { .. })), "{r:?}");
        // A longer row of A than planned: its products run past the table.
        let to = (0..a.nrows()).find(|&i| a.row_nnz(i) > 0).expect("a row");
        let from = (to + 1..a.nrows())
            .rev()
            .find(|&i| a.row_nnz(i) >= 2)
            .expect("a row");
        let other = moved_entry(&a, from, to);
        let r =
            numeric::<f64, PlusTimes>(&structure, Some(&tables), &other, &b, &RunControl::new());
        assert!(matches!(r, Err(Error::PatternMismatch { .. })), "{r:?}");
        // Runs of B that do not cover B's rows.
        let (a, b) = product_operands::<f64>(MatrixClass::Stencil3d, 600, 5);
        let (structure, tables) = planned(&a, &b);
        assert!(tables.runs.is_some());
        let from = (0..b.nrows()).find(|&i| b.row_nnz(i) >= 2).expect("a row");
        let to = (from + 1..b.nrows())
            .find(|&i| {
                b.row(i)
                    .0
                    .last()
                    .is_some_and(|&j| (j as usize) + 1 < b.ncols())
            })
            .expect("a row with room");
        let other = moved_entry(&b, from, to);
        let r =
            numeric::<f64, PlusTimes>(&structure, Some(&tables), &a, &other, &RunControl::new());
        assert!(matches!(r, Err(Error::PatternMismatch { .. })), "{r:?}");

        // Without a table: a product outside a row's window.
        let (a, b) = one_long_row(10, 1000);
        let (structure, _) = planned(&a, &b);
        let n = b.ncols() as u32;
        let shifted = Csr::try_new(
            b.nrows(),
            b.ncols(),
            (0..=u64::from(n)).collect(),
            (0..n).map(|j| if j + 1 < n { j + 1 } else { j }).collect(),
            b.values().to_vec(),
        )
        .expect("shifted");
        let r = numeric::<f64, PlusTimes>(&structure, None, &a, &shifted, &RunControl::new());
        assert!(matches!(r, Err(Error::PatternMismatch { .. })), "{r:?}");
        // ... and a product whose column a short row of a wide window does not have.
        let (a, b) = one_long_row(10, 100_000);
        let (structure, _) = planned(&a, &b);
        let r =
            numeric::<f64, PlusTimes>(&structure, None, &a, &shifted_wide(&b), &RunControl::new());
        assert!(matches!(r, Err(Error::PatternMismatch { .. })), "{r:?}");
    }

    /// The identity with row 0's entry moved to column 1: row 0 of `one_long_row`'s A·B then
    /// has a product at column 1, between its planned columns.
    fn shifted_wide(b: &Csr<f64>) -> Csr<f64> {
        let n = b.ncols() as u32;
        Csr::try_new(
            b.nrows(),
            b.ncols(),
            (0..=u64::from(n)).collect(),
            (0..n).map(|j| if j == 0 { 1 } else { j }).collect(),
            b.values().to_vec(),
        )
        .expect("shifted")
    }

    #[test]
    fn cancelled_executions_stop() {
        let (a, b) = product_operands::<f64>(MatrixClass::Road, 2000, 3);
        let (structure, tables) = planned(&a, &b);
        let run = RunControl::new();
        run.cancel();
        let r = numeric::<f64, PlusTimes>(&structure, Some(&tables), &a, &b, &run);
        assert!(matches!(r, Err(Error::Cancelled)), "{r:?}");
    }
}
