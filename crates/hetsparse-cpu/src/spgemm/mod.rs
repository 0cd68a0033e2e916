//! SpGEMM on CSR operands: plan, symbolic phase, numeric phase.
//!
//! One product (or one chunk of it: rows of A × a column panel of B) runs in three passes over
//! the same ranges of rows:
//! 1. **plan**: intermediate products per row, and ranges of rows holding equal numbers of them
//!    ([`crate::plan`]);
//! 2. **symbolic**: the exact number of entries of each row of C, hence C's row offsets (u64)
//!    and one allocation of the result;
//! 3. **numeric**: each row computed straight into its place in the result, by Row-Row
//!    (Gustavson, [`row_row`]) or Column-Row (outer products, [`column_row`]).
//!
//! Both phases use the same per-row accumulators, so they agree on every row's structure.

mod column_row;
mod row_row;
mod scratch;

use std::ops::Range;

use hetsparse_core::format::Csr;
use hetsparse_core::{Error, ProductChunk, Result, Scalar, Semiring, SpgemmAlgorithm};
use rayon::prelude::*;

use crate::memory::filled;
use crate::plan::{self, split_mut};
use scratch::ScratchPool;

/// The operands of one product or chunk, read in place: rows `rows` of A, columns `cols` of B.
pub(crate) struct Operands<'a, T> {
    a: &'a Csr<T>,
    b: &'a Csr<T>,
    /// First row of A in the chunk.
    row_base: usize,
    /// Rows in the chunk.
    nrows: usize,
    /// Column window of B: entries with `lo <= j < hi`, reported as `j - lo`.
    lo: u32,
    hi: u32,
    /// Whether the window is all of B, so rows need no trimming.
    whole_width: bool,
}

impl<'a, T: Scalar> Operands<'a, T> {
    fn new(a: &'a Csr<T>, b: &'a Csr<T>, chunk: &ProductChunk) -> Self {
        Operands {
            a,
            b,
            row_base: chunk.rows.start,
            nrows: chunk.rows.len(),
            // Dimensions are at most u32::MAX (the formats check), so the casts are exact.
            lo: chunk.cols.start as u32,
            hi: chunk.cols.end as u32,
            whole_width: chunk.cols.start == 0 && chunk.cols.end == b.ncols(),
        }
    }

    /// Width of the column window: the number of columns of C.
    #[inline]
    fn width(&self) -> usize {
        (self.hi - self.lo) as usize
    }

    /// Row `i` of the chunk (row `row_base + i` of A).
    #[inline]
    fn a_row(&self, i: usize) -> (&'a [u32], &'a [T]) {
        slice_row(self.a, self.row_base + i)
    }

    /// Row `k` of B inside the column window.
    #[inline(always)]
    fn b_row(&self, k: u32) -> (&'a [u32], &'a [T]) {
        let (cols, vals) = slice_row(self.b, k as usize);
        if self.whole_width {
            return (cols, vals);
        }
        let s = cols.partition_point(|&j| j < self.lo);
        let e = s + cols[s..].partition_point(|&j| j < self.hi);
        (&cols[s..e], &vals[s..e])
    }

    /// Asks the cache for what the kernels will read a few entries of A ahead: the row
    /// offsets of B for entry `e + 4` of `a_cols`, and the row of B of entry `e + 2` (whose
    /// offsets were asked for two entries earlier). Rows of B are read in random order, and
    /// without this each one waits for memory in turn.
    #[inline(always)]
    fn prefetch(&self, a_cols: &[u32], e: usize) {
        if let Some(&k) = a_cols.get(e + 4) {
            self.prefetch_offsets(k);
        }
        if let Some(&k) = a_cols.get(e + 2) {
            self.prefetch_b_row(k);
        }
    }

    /// The same across rows, called when row `i` of the chunk starts: the first rows of B of
    /// row `i + 1` and the first offsets of row `i + 2`, which the in-row look-ahead of
    /// [`Operands::prefetch`] does not reach.
    #[inline(always)]
    fn prefetch_next_rows(&self, i: usize) {
        if i + 1 < self.nrows {
            for &k in self.a_row(i + 1).0.iter().take(2) {
                self.prefetch_b_row(k);
            }
        }
        if i + 2 < self.nrows {
            for &k in self.a_row(i + 2).0.iter().take(4) {
                self.prefetch_offsets(k);
            }
        }
    }

    #[inline(always)]
    fn prefetch_offsets(&self, k: u32) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a prefetch never faults, and the address lies inside B's offsets.
        unsafe {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            let offsets = self.b.row_offsets().as_ptr().add(k as usize);
            _mm_prefetch::<_MM_HINT_T0>(offsets.cast());
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = k;
    }

    #[inline(always)]
    fn prefetch_b_row(&self, k: u32) {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            let start = self.b.row_offsets()[k as usize] as usize;
            // SAFETY: a prefetch never faults; `start` is at most nnz(B), one past the end at
            // worst, which pointer arithmetic may name.
            unsafe {
                _mm_prefetch::<_MM_HINT_T0>(self.b.col_indices().as_ptr().add(start).cast());
                _mm_prefetch::<_MM_HINT_T0>(self.b.values().as_ptr().add(start).cast());
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = k;
    }

    /// Intermediate products of row `i` inside the window.
    fn row_products(&self, i: usize) -> u64 {
        let (cols, _) = self.a_row(i);
        cols.iter().map(|&k| self.b_row(k).0.len() as u64).sum()
    }
}

/// Row `i` of `m` (as [`Csr::row`], inlined into the kernels' loops).
#[inline(always)]
fn slice_row<T: Scalar>(m: &Csr<T>, i: usize) -> (&[u32], &[T]) {
    let offsets = m.row_offsets();
    let (s, e) = (offsets[i] as usize, offsets[i + 1] as usize);
    (&m.col_indices()[s..e], &m.values()[s..e])
}

/// `C = A[rows, :] · B[:, cols]` over semiring `S`, column indices relative to `cols.start`.
/// The chunk must lie inside the product (the caller checks).
pub(crate) fn multiply<T: Scalar, S: Semiring<T>>(
    a: &Csr<T>,
    b: &Csr<T>,
    chunk: &ProductChunk,
    algorithm: SpgemmAlgorithm,
) -> Result<Csr<T>> {
    let ops = Operands::new(a, b, chunk);
    let span = tracing::debug_span!(
        "cpu_spgemm",
        ?algorithm,
        rows = ops.nrows,
        cols = ops.width(),
        nnz_a = a.nnz(),
        nnz_b = b.nnz()
    );
    let _enter = span.enter();

    let (products, ranges) = {
        let _s = tracing::debug_span!("analysis", rows = ops.nrows).entered();
        let products: Vec<u64> = (0..ops.nrows)
            .into_par_iter()
            .with_min_len(512)
            .map(|i| ops.row_products(i))
            .collect();
        let ranges = plan::balanced_ranges(&products);
        tracing::debug!(
            total_products = products.iter().sum::<u64>(),
            ranges = ranges.len(),
            "planned"
        );
        (products, ranges)
    };
    let pool = ScratchPool::<T::Acc>::new();
    // Column-Row reads A by columns: the transpose of the chunk's rows.
    let a_columns = match algorithm {
        SpgemmAlgorithm::ColumnRow => {
            let _s = tracing::debug_span!("transpose_a", nnz = a.nnz()).entered();
            Some(if chunk.rows == (0..a.nrows()) {
                a.transpose()
            } else {
                a.rows(chunk.rows.clone())?.transpose()
            })
        }
        _ => None,
    };

    let row_nnz = {
        let _s = tracing::debug_span!("symbolic", rows = ops.nrows).entered();
        let mut row_nnz = vec![0u64; ops.nrows];
        let parts = split_mut(&mut row_nnz, &ranges);
        parts
            .into_par_iter()
            .zip(ranges.par_iter())
            .for_each(|(counts, range)| {
                pool.with(|s| row_row::count_rows(&ops, range.clone(), &products, counts, s))
            });
        row_nnz
    };

    let mut offsets = Vec::with_capacity(ops.nrows + 1);
    offsets.push(0u64);
    let mut nnz = 0u64;
    for &n in &row_nnz {
        nnz += n;
        offsets.push(nnz);
    }
    let len = usize::try_from(nnz).map_err(|_| Error::TooLarge {
        what: "SpGEMM result".into(),
        needed: nnz,
        limit: usize::MAX as u64,
        unit: "entries",
    })?;
    let mut cols = filled(len, 0u32, "column indices of C")?;
    let mut vals = filled(len, T::zero(), "values of C")?;

    {
        let _s = tracing::debug_span!("numeric", rows = ops.nrows, nnz).entered();
        let entry_ranges: Vec<Range<usize>> = ranges
            .iter()
            .map(|r| offsets[r.start] as usize..offsets[r.end] as usize)
            .collect();
        let col_parts = split_mut(&mut cols, &entry_ranges);
        let val_parts = split_mut(&mut vals, &entry_ranges);
        let result: Result<()> = col_parts
            .into_par_iter()
            .zip(val_parts)
            .zip(ranges.par_iter())
            .try_for_each(|((c, v), range)| {
                let out = Output {
                    offsets: &offsets,
                    first_row: range.start,
                    cols: c,
                    vals: v,
                };
                pool.with(|s| match &a_columns {
                    Some(at) => {
                        column_row::compute_rows::<T, S>(&ops, at, range.clone(), &products, out, s)
                    }
                    None => row_row::compute_rows::<T, S>(&ops, range.clone(), &products, out, s),
                })
            });
        result?;
    }
    // SAFETY: every row was written sorted and without repeats (the accumulators sort their
    // output), with columns inside the window, and offsets come from the exact counts.
    Ok(unsafe { Csr::from_parts_unchecked(ops.nrows, ops.width(), offsets, cols, vals) })
}

/// Where a range of rows writes its part of C: `cols`/`vals` start at row `first_row`.
pub(crate) struct Output<'o, T> {
    offsets: &'o [u64],
    first_row: usize,
    cols: &'o mut [u32],
    vals: &'o mut [T],
}

impl<T> Output<'_, T> {
    /// The slots of row `i` (a row of the chunk).
    #[inline]
    fn row(&mut self, i: usize) -> (&mut [u32], &mut [T]) {
        let base = self.offsets[self.first_row];
        let (s, e) = (
            (self.offsets[i] - base) as usize,
            (self.offsets[i + 1] - base) as usize,
        );
        (&mut self.cols[s..e], &mut self.vals[s..e])
    }
}

/// The error when a row's numeric pass disagrees with its symbolic count: a bug, reported
/// instead of returning a wrong matrix.
fn count_mismatch(row: usize, counted: usize, written: usize) -> Error {
    Error::Device {
        backend: "cpu".into(),
        context: format!("SpGEMM row {row}"),
        message: format!(
            "the numeric phase produced {written} entries, the symbolic phase counted {counted}"
        ),
    }
}
