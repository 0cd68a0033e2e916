//! Product analysis: intermediate products, exact nnz(C), compression ratio.
//!
//! Before a product `C = A · B` runs, planners need to know how much work each row is and how
//! large C will be: the row split of hybrid execution weighs rows by their products (Matam's
//! heuristics, Xia's flop ratio), out-of-core execution sizes its chunks by them, and ESC
//! (Polok) allocates its expansion from them. The counts here are structural: every product
//! counts, also where values would cancel, so they match [`crate::reference::spgemm`].
//!
//! All counts are `u64`: a product of modest operands can have more than 2^32 intermediate
//! products. Work is split over rayon in fixed row chunks and reduced with integer arithmetic,
//! so results do not depend on the number of threads.
//!
//! ```
//! use hetsparse_core::{analysis, format::Csr};
//! // [[1, 1], [0, 1]] squared: row 0 expands to 2 + 1 products that land on 2 columns.
//! let a = Csr::try_new(2, 2, vec![0, 2, 3], vec![0, 1, 1], vec![1.0, 1.0, 1.0])?;
//! let p = analysis::analyze(&a, &a)?;
//! assert_eq!(p.row_products, vec![3, 1]);
//! assert_eq!(p.row_nnz, vec![2, 1]);
//! assert_eq!((p.total_products, p.nnz), (4, 3));
//! assert!((p.compression_ratio - 4.0 / 3.0).abs() < 1e-12);
//! # Ok::<(), hetsparse_core::Error>(())
//! ```

use std::ops::Range;
use std::sync::{Mutex, MutexGuard};

use rayon::prelude::*;

use crate::backend::check;
use crate::error::{Error, Result};
use crate::format::Csr;
use crate::scalar::Scalar;

/// Rows one rayon task handles: large enough to amortise the task, small enough to balance
/// skewed rows.
const ROWS_PER_TASK: usize = 256;

/// Rows of C with at most this many products are counted by sorting them, which beats random
/// access into a marker array of `B.ncols()` entries.
const SORT_PRODUCTS: u64 = 32;

/// Intermediate products of each row of `A · B`: for row `i`, the sum over the entries `(i, k)`
/// of A of the length of row `k` of B (the expansion size of Polok et al., eq. 1; the papers'
/// flops are twice it).
///
/// Returns [`Error::ShapeMismatch`](crate::Error::ShapeMismatch) when `A.ncols() != B.nrows()`.
pub fn row_products<T: Scalar>(a: &Csr<T>, b: &Csr<T>) -> Result<Vec<u64>> {
    check::spgemm(a, b)?;
    let span = tracing::debug_span!(
        "row_products",
        rows = a.nrows(),
        total_products = tracing::field::Empty
    );
    let _enter = span.enter();
    let products: Vec<u64> = (0..a.nrows())
        .into_par_iter()
        .with_min_len(ROWS_PER_TASK)
        .map(|i| row_product_count(a, b, i))
        .collect();
    if !span.is_disabled() {
        span.record("total_products", products.iter().sum::<u64>());
    }
    Ok(products)
}

/// Sums before each row: `prefix[i]` is the sum of `per_row[..i]`, and `prefix[n]` the total
/// (row offsets from row lengths). Written in parallel, the sums of blocks of rows first: a
/// fresh array of millions of rows costs more in first touches of its pages than in
/// additions.
///
/// ```
/// assert_eq!(hetsparse_core::analysis::prefix_sums(&[2, 0, 3]), [0, 2, 2, 5]);
/// ```
pub fn prefix_sums(per_row: &[u64]) -> Vec<u64> {
    const BLOCK: usize = 1 << 16;
    let block_sums: Vec<u64> = per_row.par_chunks(BLOCK).map(|b| b.iter().sum()).collect();
    let mut prefix = vec![0u64; per_row.len() + 1];
    let mut before = 0u64;
    let starts: Vec<u64> = block_sums
        .iter()
        .map(|s| {
            let at = before;
            before += s;
            at
        })
        .collect();
    prefix[1..]
        .par_chunks_mut(BLOCK)
        .zip(per_row.par_chunks(BLOCK))
        .zip(starts)
        .for_each(|((out, rows), start)| {
            let mut total = start;
            for (slot, &p) in out.iter_mut().zip(rows) {
                total += p;
                *slot = total;
            }
        });
    prefix
}

/// Total intermediate products of `A · B`, without the per-row vector.
///
/// Returns [`Error::ShapeMismatch`](crate::Error::ShapeMismatch) when `A.ncols() != B.nrows()`.
pub fn total_products<T: Scalar>(a: &Csr<T>, b: &Csr<T>) -> Result<u64> {
    check::spgemm(a, b)?;
    let _span = tracing::debug_span!("total_products", rows = a.nrows()).entered();
    Ok((0..a.nrows())
        .into_par_iter()
        .with_min_len(ROWS_PER_TASK)
        .map(|i| row_product_count(a, b, i))
        .sum())
}

/// Intermediate products of row `i` of `A · B`: the lengths of the rows of B that row `i` of A
/// takes. For operands already checked to chain ([`row_products`] checks them); a column of A
/// beyond B's rows panics.
pub fn row_product_count<T: Scalar>(a: &Csr<T>, b: &Csr<T>, i: usize) -> u64 {
    a.row(i).0.iter().map(|&k| b.row_nnz(k as usize)).sum()
}

/// Exact number of entries in each row of `C = A · B` (structural: every product creates an
/// entry, also where values cancel), as [`crate::reference::spgemm`] would store them.
///
/// This is the symbolic phase of Gustavson's algorithm: O(products) time. Short rows are
/// counted by sorting their columns; longer ones with a per-task marker array of `B.ncols()`
/// generation stamps, which is not cleared between rows. Rows that take a single row of B, or
/// that reach a full row of B, are counted without touching the columns.
///
/// Returns [`Error::ShapeMismatch`](crate::Error::ShapeMismatch) when `A.ncols() != B.nrows()`.
pub fn symbolic_row_nnz<T: Scalar>(a: &Csr<T>, b: &Csr<T>) -> Result<Vec<u64>> {
    check::spgemm(a, b)?;
    let span = tracing::debug_span!(
        "symbolic",
        rows = a.nrows(),
        cols = b.ncols(),
        nnz = tracing::field::Empty
    );
    let _enter = span.enter();
    let mut counts = vec![0u64; a.nrows()];
    let counters = Counter::per_thread(b.ncols());
    counts
        .par_chunks_mut(ROWS_PER_TASK)
        .enumerate()
        .for_each(|(chunk, out)| {
            let mut counter = Counter::this_threads(&counters);
            let first = chunk * ROWS_PER_TASK;
            for (r, count) in out.iter_mut().enumerate() {
                *count = counter.row_nnz(a, b, first + r);
            }
        });
    if !span.is_disabled() {
        span.record("nnz", counts.iter().sum::<u64>());
    }
    Ok(counts)
}

/// Exact number of entries of each of rows `rows` of `C = A · B` in each of the column ranges
/// `panels` (ascending and disjoint; columns outside them are not counted): `panels.len()`
/// counts per row, row by row. Structural as [`symbolic_row_nnz`], of which this is the form
/// a product computed in column panels of B needs to place each panel's share of a row of C.
///
/// Returns [`Error::ShapeMismatch`](crate::Error::ShapeMismatch) when `A.ncols() != B.nrows()`
/// and [`Error::InvalidArgument`](crate::Error::InvalidArgument) for rows outside A or panels
/// out of order or outside B.
///
/// ```
/// use hetsparse_core::{analysis, format::Csr};
/// // [[1, 1], [0, 1]] squared: row 0 has entries in columns 0 and 1, row 1 in column 1.
/// let a = Csr::try_new(2, 2, vec![0, 2, 3], vec![0, 1, 1], vec![1.0, 1.0, 1.0])?;
/// assert_eq!(analysis::symbolic_panel_nnz(&a, 0..2, &a, &[0..1, 1..2])?, [1, 1, 0, 1]);
/// # Ok::<(), hetsparse_core::Error>(())
/// ```
pub fn symbolic_panel_nnz<T: Scalar>(
    a: &Csr<T>,
    rows: Range<usize>,
    b: &Csr<T>,
    panels: &[Range<usize>],
) -> Result<Vec<u64>> {
    check::spgemm(a, b)?;
    if rows.start > rows.end || rows.end > a.nrows() {
        return Err(Error::InvalidArgument(format!(
            "symbolic counts of rows {rows:?} of a product of {} rows",
            a.nrows()
        )));
    }
    let mut end = 0;
    for p in panels {
        if p.start < end || p.start > p.end || p.end > b.ncols() {
            return Err(Error::InvalidArgument(format!(
                "column panels {panels:?} of a product of {} columns: out of order or outside it",
                b.ncols()
            )));
        }
        end = p.end;
    }
    let _span =
        tracing::debug_span!("symbolic_panels", rows = rows.len(), panels = panels.len()).entered();
    let width = panels.len();
    let whole = matches!(panels, [p] if p.start == 0 && p.end == b.ncols());
    let len = rows.len().saturating_mul(width);
    let mut counts: Vec<u64> = crate::host::try_with_capacity(len, "symbolic counts per panel")?;
    if width == 0 {
        return Ok(counts);
    }
    let counters = Counter::per_thread(b.ncols());
    counts.spare_capacity_mut()[..len]
        .par_chunks_mut(ROWS_PER_TASK * width)
        .enumerate()
        .for_each(|(task, out)| {
            let mut counter = Counter::this_threads(&counters);
            let mut row = vec![0u64; width];
            let first = rows.start + task * ROWS_PER_TASK;
            for (r, slots) in out.chunks_mut(width).enumerate() {
                if whole {
                    row[0] = counter.row_nnz(a, b, first + r);
                } else {
                    counter.row_panel_nnz(a, b, first + r, panels, &mut row);
                }
                for (slot, &n) in slots.iter_mut().zip(&row) {
                    slot.write(n);
                }
            }
        });
    // SAFETY: the tasks' pieces cover the first `len` slots, and each task wrote every slot of
    // its piece (a row's `width` counts for each of its rows).
    unsafe { counts.set_len(len) };
    Ok(counts)
}

/// Per-task scratch of [`symbolic_row_nnz`].
struct Counter {
    ncols: usize,
    /// `stamps[j] == generation` marks column `j` as seen in the current row. Allocated on the
    /// first row that needs it, since many tasks only see short rows.
    stamps: Vec<u32>,
    generation: u32,
    sorted: Vec<u32>,
    /// For counts per column panel (fewer than [`NO_PANEL`] panels): `panel_generation`s
    /// shifted up by 8 bits, each column's panel (or [`NO_PANEL`]) in the low 8.
    panel_stamps: Vec<u32>,
    panel_generation: u32,
}

/// The panel of a column that is in none.
const NO_PANEL: u8 = u8::MAX;

impl Counter {
    fn new(ncols: usize) -> Self {
        Counter {
            ncols,
            stamps: Vec::new(),
            generation: 0,
            sorted: Vec::new(),
            panel_stamps: Vec::new(),
            panel_generation: 0,
        }
    }

    /// One counter for each thread of the current rayon pool: a marker array of `B.ncols()`
    /// stamps is allocated and first touched once per thread, not once per rayon job (of
    /// which there are hundreds per thread, each otherwise faulting in megabytes).
    fn per_thread(ncols: usize) -> Vec<Mutex<Counter>> {
        (0..rayon::current_num_threads())
            .map(|_| Mutex::new(Counter::new(ncols)))
            .collect()
    }

    /// The calling thread's counter of `counters` (from [`Counter::per_thread`], in the same
    /// pool: uncontended, as a job runs on one thread from start to end).
    fn this_threads(counters: &[Mutex<Counter>]) -> MutexGuard<'_, Counter> {
        let i = rayon::current_thread_index().unwrap_or(0) % counters.len();
        counters[i].lock().unwrap_or_else(|p| p.into_inner())
    }

    fn row_nnz<T: Scalar>(&mut self, a: &Csr<T>, b: &Csr<T>, i: usize) -> u64 {
        let arow = a.row(i).0;
        match arow {
            [] => 0,
            // B's rows are canonical: one row of B has no repeats.
            [k] => b.row_nnz(*k as usize),
            [k, l] => union_len(b.row(*k as usize).0, b.row(*l as usize).0),
            _ => {
                let (mut products, mut longest) = (0u64, 0u64);
                for &k in arow {
                    let len = b.row_nnz(k as usize);
                    products += len;
                    longest = longest.max(len);
                }
                if longest == self.ncols as u64 {
                    self.ncols as u64
                } else if products <= SORT_PRODUCTS {
                    self.sorted.clear();
                    for &k in arow {
                        self.sorted.extend_from_slice(b.row(k as usize).0);
                    }
                    self.sorted.sort_unstable();
                    count_distinct_sorted(&self.sorted)
                } else {
                    self.mark(arow.iter().map(|&k| b.row(k as usize).0))
                }
            }
        }
    }

    /// Row `i`'s entries in each of `panels` (ascending, disjoint), into `out`.
    fn row_panel_nnz<T: Scalar>(
        &mut self,
        a: &Csr<T>,
        b: &Csr<T>,
        i: usize,
        panels: &[Range<usize>],
        out: &mut [u64],
    ) {
        out.fill(0);
        let panel_of = |j: u32| {
            let p = panels.partition_point(|p| p.end <= j as usize);
            (p < panels.len() && panels[p].start <= j as usize).then_some(p)
        };
        let arow = a.row(i).0;
        if let [k] = arow {
            // One row of B has no repeats: its columns are counted where they fall.
            for (p, cols) in panels.iter().enumerate() {
                let row = b.row(*k as usize).0;
                let lo = row.partition_point(|&c| (c as usize) < cols.start);
                let hi = row.partition_point(|&c| (c as usize) < cols.end);
                out[p] = (hi - lo) as u64;
            }
            return;
        }
        let products: u64 = arow.iter().map(|&k| b.row_nnz(k as usize)).sum();
        if products <= SORT_PRODUCTS {
            self.sorted.clear();
            for &k in arow {
                self.sorted.extend_from_slice(b.row(k as usize).0);
            }
            self.sorted.sort_unstable();
            self.sorted.dedup();
            for &j in &self.sorted {
                if let Some(p) = panel_of(j) {
                    out[p] += 1;
                }
            }
            return;
        }
        if panels.len() < usize::from(NO_PANEL) {
            // Each column's stamp holds its panel beside the row's generation: one memory
            // access per product marks the column and says where to count it.
            let generation = self.next_panel_generation(panel_of);
            for &k in arow {
                for &j in b.row(k as usize).0 {
                    let stamp = &mut self.panel_stamps[j as usize];
                    if *stamp & !0xff != generation {
                        *stamp = generation | (*stamp & 0xff);
                        if let Some(count) = out.get_mut((*stamp & 0xff) as usize) {
                            *count += 1;
                        }
                    }
                }
            }
            return;
        }
        self.next_generation();
        for &k in arow {
            for &j in b.row(k as usize).0 {
                let stamp = &mut self.stamps[j as usize];
                if *stamp != self.generation {
                    *stamp = self.generation;
                    if let Some(p) = panel_of(j) {
                        out[p] += 1;
                    }
                }
            }
        }
    }

    /// A generation no stamp holds yet (the stamps allocated on first use).
    fn next_generation(&mut self) {
        if self.stamps.is_empty() {
            self.stamps = vec![0; self.ncols];
        }
        self.generation = self.generation.wrapping_add(1);
        if self.generation == 0 {
            // After 2^32 - 1 rows stale stamps could match again: clear once and restart.
            self.stamps.fill(0);
            self.generation = 1;
        }
    }

    /// A generation no panel stamp holds yet, shifted into place (the panel stamps made on
    /// first use, each column's panel from `panel_of`).
    fn next_panel_generation(&mut self, panel_of: impl Fn(u32) -> Option<usize>) -> u32 {
        self.panel_generation += 1;
        if self.panel_generation >= 1 << 24 {
            // Generations take the stamps' top 24 bits: start again from fresh stamps.
            self.panel_generation = 1;
            self.panel_stamps.clear();
        }
        if self.panel_stamps.is_empty() {
            self.panel_stamps = (0..self.ncols as u32)
                .map(|j| panel_of(j).map_or(NO_PANEL, |p| p as u8).into())
                .collect();
        }
        self.panel_generation << 8
    }

    /// Distinct columns of the given rows, by stamping each column with this row's generation.
    fn mark<'a>(&mut self, rows: impl Iterator<Item = &'a [u32]>) -> u64 {
        self.next_generation();
        let mut count = 0u64;
        for row in rows {
            for &j in row {
                let stamp = &mut self.stamps[j as usize];
                if *stamp != self.generation {
                    *stamp = self.generation;
                    count += 1;
                }
            }
        }
        count
    }
}

/// Size of the union of two sorted, repeat-free slices.
fn union_len(x: &[u32], y: &[u32]) -> u64 {
    let (mut p, mut q, mut common) = (0, 0, 0u64);
    while p < x.len() && q < y.len() {
        match x[p].cmp(&y[q]) {
            std::cmp::Ordering::Less => p += 1,
            std::cmp::Ordering::Greater => q += 1,
            std::cmp::Ordering::Equal => {
                common += 1;
                p += 1;
                q += 1;
            }
        }
    }
    (x.len() + y.len()) as u64 - common
}

fn count_distinct_sorted(v: &[u32]) -> u64 {
    match v.first() {
        None => 0,
        Some(_) => 1 + v.windows(2).filter(|w| w[0] != w[1]).count() as u64,
    }
}

/// Summary of a list of row lengths (entries or products per row).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RowLengthStats {
    /// Number of rows.
    pub rows: u64,
    /// Sum of the lengths.
    pub total: u64,
    /// Shortest row (0 when there are no rows).
    pub min: u64,
    /// Longest row (0 when there are no rows).
    pub max: u64,
    /// Mean length (0 when there are no rows).
    pub mean: f64,
    /// Population standard deviation of the lengths (0 when there are no rows).
    pub std_dev: f64,
    /// Rows of length 0.
    pub empty: u64,
}

impl RowLengthStats {
    /// `max / mean`, the load imbalance of rows split evenly: 1 for equal rows, 0 when every
    /// row is empty.
    pub fn max_over_mean(&self) -> f64 {
        if self.total == 0 {
            0.0
        } else {
            self.max as f64 / self.mean
        }
    }
}

/// Count, total, extremes, mean and standard deviation of `lengths`.
///
/// Sums are exact integers (squares in `u128`), so the result does not depend on how rayon
/// splits the work.
///
/// ```
/// let s = hetsparse_core::analysis::row_length_stats(&[0, 2, 4]);
/// assert_eq!((s.rows, s.total, s.min, s.max, s.empty), (3, 6, 0, 4, 1));
/// assert_eq!(s.mean, 2.0);
/// ```
pub fn row_length_stats(lengths: &[u64]) -> RowLengthStats {
    #[derive(Clone, Copy)]
    struct Sums {
        total: u64,
        squares: u128,
        min: u64,
        max: u64,
        empty: u64,
    }
    let identity = || Sums {
        total: 0,
        squares: 0,
        min: u64::MAX,
        max: 0,
        empty: 0,
    };
    let s = lengths
        .par_iter()
        .with_min_len(4096)
        .fold(identity, |s, &l| Sums {
            total: s.total + l,
            squares: s.squares + u128::from(l) * u128::from(l),
            min: s.min.min(l),
            max: s.max.max(l),
            empty: s.empty + u64::from(l == 0),
        })
        .reduce(identity, |x, y| Sums {
            total: x.total + y.total,
            squares: x.squares + y.squares,
            min: x.min.min(y.min),
            max: x.max.max(y.max),
            empty: x.empty + y.empty,
        });
    if lengths.is_empty() {
        return RowLengthStats::default();
    }
    let n = lengths.len() as f64;
    let mean = s.total as f64 / n;
    // E[l²] − mean², clamped at 0 against rounding.
    let variance = (s.squares as f64 / n - mean * mean).max(0.0);
    RowLengthStats {
        rows: lengths.len() as u64,
        total: s.total,
        min: s.min,
        max: s.max,
        mean,
        std_dev: variance.sqrt(),
        empty: s.empty,
    }
}

/// What a product `C = A · B` costs and yields, row by row.
#[derive(Clone, Debug, PartialEq)]
pub struct ProductAnalysis {
    /// Intermediate products of each row of C ([`row_products`]).
    pub row_products: Vec<u64>,
    /// Entries of each row of C ([`symbolic_row_nnz`]).
    pub row_nnz: Vec<u64>,
    /// All intermediate products (half the papers' flops).
    pub total_products: u64,
    /// Entries of C.
    pub nnz: u64,
    /// `total_products / nnz`: how many products land on each entry of C on average, the
    /// quantity that decides between ESC and accumulator-based kernels. At least 1; defined as
    /// 1 when C is empty (then there are no products either).
    pub compression_ratio: f64,
    /// Statistics of [`ProductAnalysis::row_products`].
    pub products: RowLengthStats,
    /// Statistics of [`ProductAnalysis::row_nnz`].
    pub result_rows: RowLengthStats,
}

impl ProductAnalysis {
    /// Floating-point operations of the product as the papers count them: a multiply and an
    /// add per intermediate product.
    pub fn flops(&self) -> u64 {
        self.total_products.saturating_mul(2)
    }
}

/// Products and result size of `A · B`, per row and in total.
///
/// Runs [`row_products`] and [`symbolic_row_nnz`]: O(products) time, O(rows) memory plus a
/// marker array of `B.ncols()` per rayon task.
///
/// Returns [`Error::ShapeMismatch`](crate::Error::ShapeMismatch) when `A.ncols() != B.nrows()`.
pub fn analyze<T: Scalar>(a: &Csr<T>, b: &Csr<T>) -> Result<ProductAnalysis> {
    check::spgemm(a, b)?;
    let span = tracing::debug_span!(
        "analysis",
        rows = a.nrows(),
        cols = b.ncols(),
        nnz_a = a.nnz(),
        nnz_b = b.nnz(),
        total_products = tracing::field::Empty,
        nnz = tracing::field::Empty
    );
    let _enter = span.enter();
    let row_products = row_products(a, b)?;
    let row_nnz = symbolic_row_nnz(a, b)?;
    let products = row_length_stats(&row_products);
    let result_rows = row_length_stats(&row_nnz);
    let (total_products, nnz) = (products.total, result_rows.total);
    span.record("total_products", total_products);
    span.record("nnz", nnz);
    let compression_ratio = if nnz == 0 {
        1.0
    } else {
        total_products as f64 / nnz as f64
    };
    Ok(ProductAnalysis {
        row_products,
        row_nnz,
        total_products,
        nnz,
        compression_ratio,
        products,
        result_rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generate::{self, MatrixClass};
    use crate::reference;
    use crate::semiring::PlusTimes;
    use crate::Error;
    use proptest::prelude::*;

    #[test]
    fn prefix_sums_over_several_blocks() {
        let per_row: Vec<u64> = (0..200_003u64).map(|i| i % 7 + i / 1000).collect();
        let prefix = prefix_sums(&per_row);
        assert_eq!(prefix.len(), per_row.len() + 1);
        let mut total = 0;
        for (i, &p) in per_row.iter().enumerate() {
            assert_eq!(prefix[i], total);
            total += p;
        }
        assert_eq!(prefix[per_row.len()], total);
        assert_eq!(prefix_sums(&[]), vec![0]);
    }

    fn reference_row_nnz(a: &Csr<f64>, b: &Csr<f64>) -> Vec<u64> {
        let c = reference::spgemm::<f64, PlusTimes>(a, b).unwrap();
        (0..c.nrows()).map(|i| c.row_nnz(i)).collect()
    }

    /// Products by brute force: every pair of an entry (i, k) of A and an entry (k, j) of B.
    fn brute_products(a: &Csr<f64>, b: &Csr<f64>) -> Vec<u64> {
        let b_rows = b.to_coo().row_indices().to_vec();
        (0..a.nrows())
            .map(|i| {
                let a_cols = a.row(i).0;
                let pairs = a_cols
                    .iter()
                    .map(|&k| b_rows.iter().filter(|&&r| r == k).count() as u64);
                pairs.sum()
            })
            .collect()
    }

    fn check_against_reference(a: &Csr<f64>, b: &Csr<f64>) {
        let p = analyze(a, b).unwrap();
        assert_eq!(p.row_nnz, reference_row_nnz(a, b));
        assert_eq!(p.row_products, brute_products(a, b));
        assert_eq!(p.total_products, p.row_products.iter().sum::<u64>());
        assert_eq!(p.total_products, total_products(a, b).unwrap());
        assert_eq!(p.nnz, p.row_nnz.iter().sum::<u64>());
        assert!(p.compression_ratio >= 1.0 && p.compression_ratio.is_finite());
        assert!(p.row_nnz.iter().zip(&p.row_products).all(|(n, q)| n <= q));
        assert!(p.row_nnz.iter().all(|&n| n <= b.ncols() as u64));
    }

    /// A random matrix: each entry present with probability `density`, from a proptest seed.
    fn matrix(nrows: usize, ncols: usize, density: f64, seed: u64) -> Csr<f64> {
        let mut state = seed;
        let mut next = move || {
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
        };
        let mut offsets = vec![0u64];
        let mut cols = Vec::new();
        for _ in 0..nrows {
            for j in 0..ncols {
                if next() < density {
                    cols.push(j as u32);
                }
            }
            offsets.push(cols.len() as u64);
        }
        let n = cols.len();
        Csr::try_new(nrows, ncols, offsets, cols, vec![1.0; n]).unwrap()
    }

    proptest! {
        #[test]
        fn symbolic_matches_the_reference(
            m in 0usize..24, k in 0usize..24, n in 0usize..70,
            da in 0.0f64..1.0, db in 0.0f64..1.0, seed in any::<u64>(),
        ) {
            let a = matrix(m, k, da, seed);
            let b = matrix(k, n, db, seed ^ 1);
            check_against_reference(&a, &b);
        }
    }

    #[test]
    fn symbolic_matches_the_reference_on_every_class() {
        for class in MatrixClass::ALL {
            for size in [1usize, 50, 1500] {
                let (a, b) = generate::product_operands::<f64>(class, size, 3);
                let p = analyze(&a, &b).unwrap();
                assert_eq!(p.row_nnz, reference_row_nnz(&a, &b), "{class} {size}");
                let by_rows: Vec<u64> = (0..a.nrows())
                    .map(|i| a.row(i).0.iter().map(|&k| b.row_nnz(k as usize)).sum())
                    .collect();
                assert_eq!(p.row_products, by_rows);
            }
        }
    }

    #[test]
    fn results_do_not_depend_on_the_thread_count() {
        let (a, b) = generate::product_operands::<f32>(MatrixClass::PowerLaw, 20_000, 1);
        let one = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        let three = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .unwrap();
        let x = one.install(|| analyze(&a, &b)).unwrap();
        let y = three.install(|| analyze(&a, &b)).unwrap();
        assert_eq!(x, y);
    }

    #[test]
    fn counts_beyond_u32_are_exact() {
        // A column of ones times a row of ones: every one of n² products is its own entry of C,
        // 4.9e9 of them, from 2n stored entries.
        let n = 70_000usize;
        let a = Csr::try_new(n, 1, (0..=n as u64).collect(), vec![0; n], vec![1.0f32; n]).unwrap();
        let b = Csr::try_new(
            1,
            n,
            vec![0, n as u64],
            (0..n as u32).collect(),
            vec![1.0f32; n],
        )
        .unwrap();
        let expected = 4_900_000_000u64;
        assert!(expected > u64::from(u32::MAX));
        assert_eq!(total_products(&a, &b).unwrap(), expected);
        // Each row of C takes one row of B, so the symbolic count is O(rows) here.
        let p = analyze(&a, &b).unwrap();
        assert!(p.row_products.iter().all(|&q| q == n as u64));
        assert!(p.row_nnz.iter().all(|&q| q == n as u64));
        assert_eq!((p.total_products, p.nnz), (expected, expected));
        assert_eq!(p.compression_ratio, 1.0);
        assert_eq!(p.flops(), 2 * expected);
        assert_eq!(p.products.total, expected);
    }

    #[test]
    fn marker_generations_survive_wrapping() {
        // Rows of three B rows with enough products to take the marker path.
        let b = matrix(3, 200, 0.5, 7);
        let a = Csr::try_new(1, 3, vec![0, 3], vec![0, 1, 2], vec![1.0; 3]).unwrap();
        let expected = reference_row_nnz(&a, &b)[0];
        let mut counter = Counter::new(b.ncols());
        assert_eq!(counter.row_nnz(&a, &b, 0), expected);
        counter.generation = u32::MAX - 1;
        for _ in 0..4 {
            assert_eq!(counter.row_nnz(&a, &b, 0), expected);
        }
        assert_eq!(counter.generation, 3);
    }

    #[test]
    fn full_rows_of_b_short_circuit() {
        let b = matrix(4, 50, 0.3, 2);
        let mut b_full = b.to_dense(crate::format::Layout::RowMajor).unwrap();
        for j in 0..50 {
            b_full.set(2, j, 1.0);
        }
        let b = Csr::from_dense(&b_full).unwrap();
        let a = Csr::try_new(1, 4, vec![0, 3], vec![0, 2, 3], vec![1.0; 3]).unwrap();
        assert_eq!(symbolic_row_nnz(&a, &b).unwrap(), vec![50]);
        assert_eq!(reference_row_nnz(&a, &b), vec![50]);
    }

    #[test]
    fn shapes_must_chain() {
        let a = Csr::<f64>::zeros(2, 3).unwrap();
        for e in [
            row_products(&a, &a).unwrap_err(),
            symbolic_row_nnz(&a, &a).unwrap_err(),
            total_products(&a, &a).unwrap_err(),
            analyze(&a, &a).unwrap_err(),
        ] {
            assert!(matches!(
                e,
                Error::ShapeMismatch {
                    left_cols: 3,
                    right_rows: 2,
                    ..
                }
            ));
        }
    }

    #[test]
    fn empty_products_have_ratio_one() {
        let a = Csr::<f64>::zeros(3, 0).unwrap();
        let b = Csr::<f64>::zeros(0, 4).unwrap();
        let p = analyze(&a, &b).unwrap();
        assert_eq!((p.total_products, p.nnz, p.compression_ratio), (0, 0, 1.0));
        assert_eq!(p.row_nnz, vec![0, 0, 0]);
        assert_eq!(p.products.empty, 3);
        assert_eq!(p.products.max_over_mean(), 0.0);
        let z = Csr::<f64>::zeros(0, 0).unwrap();
        let p = analyze(&z, &z).unwrap();
        assert!(p.row_nnz.is_empty());
        assert_eq!(p.result_rows, RowLengthStats::default());
    }

    #[test]
    fn stats_by_hand() {
        let s = row_length_stats(&[0, 2, 4]);
        assert_eq!((s.rows, s.total, s.min, s.max, s.empty), (3, 6, 0, 4, 1));
        assert_eq!(s.mean, 2.0);
        assert!((s.std_dev - (8.0f64 / 3.0).sqrt()).abs() < 1e-12);
        assert_eq!(s.max_over_mean(), 2.0);
        let s = row_length_stats(&[5; 10]);
        assert_eq!((s.min, s.max, s.std_dev, s.empty), (5, 5, 0.0, 0));
        assert_eq!(s.max_over_mean(), 1.0);
        // Parallel reduction over many rows equals the serial definition.
        let lengths: Vec<u64> = (0..100_000u64).map(|i| (i * 7919) % 1000).collect();
        let s = row_length_stats(&lengths);
        assert_eq!(s.total, lengths.iter().sum::<u64>());
        assert_eq!(s.max, 999);
        assert_eq!(s.empty, lengths.iter().filter(|&&l| l == 0).count() as u64);
        assert_eq!(row_length_stats(&[]), RowLengthStats::default());
    }
}
