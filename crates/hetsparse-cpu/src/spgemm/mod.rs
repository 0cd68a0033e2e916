//! SpGEMM on CSR operands: plan, then one pass (Row-Row) or a symbolic and a numeric phase.
//!
//! One product (or one chunk of it: rows of A × a column panel of B) starts with the **plan**:
//! intermediate products per row, and ranges of rows holding equal numbers of them
//! ([`crate::plan`]); for B of even rows ([`Operands::even_b_rows`]) the one-pass product cuts
//! ranges by A's entries instead and counts no products up front. Then:
//! - **Row-Row** (Gustavson, [`row_row`]) computes each row once ([`staged`]): C is reserved at
//!   an upper bound of its size, rows are computed into per-thread staging and copied into
//!   place as soon as the ranges before them have counted their entries;
//! - **Column-Row** (outer products, [`column_row`]), and Row-Row when C's bound cannot be
//!   reserved, run two phases: **symbolic**, the exact number of entries of each row (hence
//!   C's row offsets, u64, and one exact allocation), then **numeric**, each row computed
//!   straight into its place. Both phases choose each row's accumulator by the same rule; the
//!   symbolic phase only counts (with a column bitmap wherever C's row window is narrow enough
//!   for one), and the numeric phase checks that every row writes exactly the entries counted.
//!
//! Every range of rows looks at the run's cancellation before it starts and reports its share
//! of the products when it is done ([`RangeReports`]), so a long product stops within a range
//! and its progress moves range by range.

mod column_row;
mod masked;
mod row_row;
mod scratch;
mod staged;

use std::mem::MaybeUninit;
use std::ops::Range;

use hetsparse_core::format::{Csr, SplicedCsr};
use hetsparse_core::semiring::with_semiring;
use hetsparse_core::{
    CsrWindow, Error, Mask, Result, RunControl, Scalar, Semiring, SemiringVisitor, SpgemmAlgorithm,
    SpgemmOptions,
};
use rayon::prelude::*;

use crate::memory::reserved;
use crate::plan::{self, split_mut};
use scratch::ScratchPool;

/// The operands of one product or chunk, read in place: a window of A's rows and one of B's
/// columns ([`CsrWindow`]), unpacked into the fields the kernels' inner loops read.
pub(crate) struct Operands<'a, T> {
    a: &'a Csr<T>,
    b: RowsOfB<'a, T>,
    /// First row of A in the chunk.
    row_base: usize,
    /// Rows in the chunk.
    nrows: usize,
    /// Column window of B: entries with `lo <= j < hi`, reported as `j - lo`.
    lo: u32,
    hi: u32,
    /// Whether the window is all of B, so rows need no trimming.
    whole_width: bool,
    /// How far B's entries lie from the diagonal (see [`Reach`]); `None` when B is empty.
    reach: Option<Reach>,
    /// Entries of B's longest row (in all of B, not only the window).
    longest_b_row: usize,
    /// B's rows that hold entries (in all of B).
    nonempty_b_rows: usize,
    /// Rows of B on either side of a row's diagonal that stay in cache while rows of A near
    /// the diagonal are computed in turn (see [`Operands::near_diagonal`]).
    near_rows: i64,
    /// Whether the kernels prefetch B's rows ([`Operands::quiet`] turns it off).
    prefetch: bool,
    /// Whether rows whose window B's reach leaves too wide for a dense accumulator look for
    /// their own ([`Operands::reached_columns`]): decided once for the chunk from a sample of
    /// its rows ([`Operands::sampling_own_windows`]), since looking costs rows it does not
    /// help (scattered products, rows of few products) a tenth of their time.
    own_windows: bool,
}

/// B's rows as the kernels read them, in place: from one matrix, or from the two blocks of a
/// [`SplicedCsr`]. Row `k` is row `k - block.first` of `block` where that is one of its rows,
/// else row `k - base.first` of `base` where that is one, else empty. B of one matrix is all
/// `block` (and no `base`), so its rows cost one comparison more than a plain row.
#[derive(Clone, Copy)]
pub(crate) struct RowsOfB<'a, T> {
    block: RowBlock<'a, T>,
    base: RowBlock<'a, T>,
    nnz: u64,
}

/// A block of B's rows: its arrays, held as slices so that the kernels' loops read them
/// without going through the matrix each time.
#[derive(Clone, Copy)]
struct RowBlock<'a, T> {
    offsets: &'a [u64],
    cols: &'a [u32],
    vals: &'a [T],
    /// B's row that is the block's first.
    first: usize,
    /// Rows in the block.
    rows: usize,
}

impl<'a, T: Scalar> RowBlock<'a, T> {
    fn of(m: &'a Csr<T>, first: usize) -> Self {
        RowBlock {
            offsets: m.row_offsets(),
            cols: m.col_indices(),
            vals: m.values(),
            first,
            rows: m.nrows(),
        }
    }

    /// The block's row `i` when B's row `k` is one of its rows.
    #[inline(always)]
    fn holds(&self, k: usize) -> Option<usize> {
        let i = k.wrapping_sub(self.first);
        (i < self.rows).then_some(i)
    }

    /// The block's row `i`, which must be one of its rows.
    #[inline(always)]
    fn row(&self, i: usize) -> (&'a [u32], &'a [T]) {
        debug_assert!(i < self.rows);
        // SAFETY: `i < rows` (the caller's [`RowBlock::holds`]), and `rows + 1` offsets of a
        // valid CSR matrix, which do not decrease and end at the length of both arrays, so
        // `s <= e <= len`. This runs for every row of B a product takes.
        unsafe {
            let (s, e) = (
                *self.offsets.get_unchecked(i) as usize,
                *self.offsets.get_unchecked(i + 1) as usize,
            );
            (self.cols.get_unchecked(s..e), self.vals.get_unchecked(s..e))
        }
    }

    /// Where the block's row `i` starts in its arrays.
    #[inline(always)]
    fn start(&self, i: usize) -> usize {
        debug_assert!(i < self.rows);
        // SAFETY: as in [`RowBlock::row`].
        unsafe { *self.offsets.get_unchecked(i) as usize }
    }
}

impl<'a, T: Scalar> RowsOfB<'a, T> {
    /// Every row of `b`.
    pub(crate) fn whole(b: &'a Csr<T>) -> Self {
        let block = RowBlock::of(b, 0);
        RowsOfB {
            block,
            base: RowBlock { rows: 0, ..block },
            nnz: b.nnz(),
        }
    }

    /// The rows of `b`, read from its two blocks.
    pub(crate) fn spliced(b: &SplicedCsr<'a, T>) -> Self {
        let ((block, block_first), (base, base_first)) = (b.block(), b.base());
        RowsOfB {
            block: RowBlock::of(block, block_first),
            base: RowBlock::of(base, base_first),
            nnz: b.nnz(),
        }
    }

    /// The block holding row `k` and its row there; `None` for a row neither holds.
    #[inline(always)]
    fn locate(&self, k: usize) -> Option<(&RowBlock<'a, T>, usize)> {
        if let Some(i) = self.block.holds(k) {
            return Some((&self.block, i));
        }
        self.base.holds(k).map(|i| (&self.base, i))
    }

    /// Row `k`.
    #[inline(always)]
    fn row(&self, k: usize) -> (&'a [u32], &'a [T]) {
        match self.locate(k) {
            Some((block, i)) => block.row(i),
            None => (&[], &[]),
        }
    }

    /// The blocks holding rows, each with the row of B it starts at.
    fn parts(&self) -> impl Iterator<Item = RowBlock<'a, T>> {
        [self.block, self.base].into_iter().filter(|p| p.rows > 0)
    }
}

/// B as a product takes it: a window of its columns (all of its rows), or all of a B spliced
/// from two row blocks.
#[derive(Clone, Copy)]
pub(crate) enum BOperand<'w, 'a, T> {
    Window(&'w CsrWindow<&'a Csr<T>>),
    Spliced(&'w SplicedCsr<'a, T>),
}

/// Rows of a chunk sampled to decide [`Operands::own_windows`].
const OWN_WINDOW_SAMPLES: usize = 64;

/// What [`Operands::reached_columns`] finds of one row of C.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ReachedColumns {
    /// The columns of C (relative to the chunk's window) from the row's first to one past
    /// its last.
    pub start: usize,
    pub end: usize,
    /// The row's intermediate products.
    pub products: u64,
}

/// Bytes of B's rows that a core's L2 cache keeps around the current row (half on each
/// side) while rows near the diagonal are computed in turn.
const NEAR_DIAGONAL_BYTES: u64 = 1 << 20;

/// What the kernels need to know of B as a whole: computed once per call of the backend by
/// [`shape_of_b`] and shared by all of its chunks, since it reads every row of B.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ShapeOfB {
    /// See [`Reach`]; `None` when B is empty.
    reach: Option<Reach>,
    /// Entries of B's longest row.
    longest_row: usize,
    /// Rows of B that hold entries: those a row of A can take products from. A product's
    /// local B may be mostly empty rows (a distributed product's window of B's rows), which
    /// no entry of A names.
    nonempty_rows: usize,
}

/// B's rows count as even when the longest holds at most this many times the mean of the rows
/// that hold entries (empty rows are named by no entry of A where B is a window of a larger
/// matrix's rows, and cost an entry that names one nothing): a row of A then carries at most
/// this many times its share of products for its entries, so ranges cut by A's entries hold
/// about equal work, and an upper bound of C follows from A's row offsets alone.
const EVEN_B_ROWS: u64 = 4;

/// Bounds on `j - k` over the entries `(k, j)` of B: row `i` of C then lies within columns
/// `first(A_i) + below ..= last(A_i) + above`, known without reading any row of B. Banded,
/// stencil and grid-like products thus get a narrow window per row, where a dense accumulator
/// stays in cache however wide C is; for scattered matrices the bounds span all of C and cost
/// nothing per row.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Reach {
    below: i64,
    above: i64,
}

/// [`ShapeOfB`] of `b`: the [`Reach`] from the first and last entry of each row, and the
/// longest row.
pub(crate) fn shape_of_b<T: Scalar>(b: &Csr<T>) -> ShapeOfB {
    shape_of_rows(RowsOfB::whole(b))
}

/// [`ShapeOfB`] of B's rows read from their blocks.
pub(crate) fn shape_of_rows<T: Scalar>(rows: RowsOfB<'_, T>) -> ShapeOfB {
    let shapes: Vec<ShapeOfB> = rows.parts().map(shape_of_part).collect();
    shapes
        .into_iter()
        .reduce(|x, y| ShapeOfB {
            reach: match (x.reach, y.reach) {
                (Some(p), Some(q)) => Some(Reach {
                    below: p.below.min(q.below),
                    above: p.above.max(q.above),
                }),
                (p, q) => p.or(q),
            },
            longest_row: x.longest_row.max(y.longest_row),
            nonempty_rows: x.nonempty_rows + y.nonempty_rows,
        })
        .unwrap_or(ShapeOfB {
            reach: None,
            longest_row: 0,
            nonempty_rows: 0,
        })
}

/// [`ShapeOfB`] of the rows of `b`, which are B's rows from row `b.first` on.
fn shape_of_part<T: Scalar>(b: RowBlock<'_, T>) -> ShapeOfB {
    /// Rows per task: the loop over them is a few instructions a row.
    const ROWS_PER_TASK: usize = 1 << 16;
    let first = b.first as i64;
    let (offsets, cols) = (b.offsets, b.cols);
    // Over every row at once: (least first - k, greatest last - k, longest row, rows with
    // entries), with i64::MAX / i64::MIN where no row has entries.
    let rows = |start: usize| {
        let end = (start + ROWS_PER_TASK).min(b.rows);
        let (mut below, mut above, mut longest, mut nonempty) = (i64::MAX, i64::MIN, 0u64, 0);
        for k in start..end {
            let (s, e) = (offsets[k], offsets[k + 1]);
            longest = longest.max(e - s);
            if s < e {
                let row = first + k as i64;
                below = below.min(i64::from(cols[s as usize]) - row);
                above = above.max(i64::from(cols[e as usize - 1]) - row);
                nonempty += 1;
            }
        }
        (below, above, longest, nonempty)
    };
    let (below, above, longest, nonempty) = (0..b.rows)
        .into_par_iter()
        .step_by(ROWS_PER_TASK)
        .map(rows)
        .reduce(
            || (i64::MAX, i64::MIN, 0, 0),
            |x, y| (x.0.min(y.0), x.1.max(y.1), x.2.max(y.2), x.3 + y.3),
        );
    ShapeOfB {
        reach: (below <= above).then_some(Reach { below, above }),
        // At most nnz(B), which is a usize.
        longest_row: longest as usize,
        nonempty_rows: nonempty,
    }
}

/// Entries of A ahead of the current one whose row of B is prefetched, and whose offsets into
/// B are. The rows of B are read in random order; a miss to memory costs the time of tens of
/// products, so the look-ahead has to cover several short rows of B.
/// [`Operands::prefetch_next_rows`] covers the first entries of the next rows, up to where
/// the in-row look-ahead starts; more would cost short rows (banded, road) more than it saves.
const PREFETCH_ROWS_AHEAD: usize = 4;
const PREFETCH_OFFSETS_AHEAD: usize = 8;

impl<'a, T: Scalar> Operands<'a, T> {
    /// Rows of A (`a`, all of its columns) times columns of B (`b`, all of its rows);
    /// [`Error::Internal`] for windows of another kind, which the kernels do not read.
    fn new(
        a: &CsrWindow<&'a Csr<T>>,
        b: &CsrWindow<&'a Csr<T>>,
        b_shape: ShapeOfB,
    ) -> Result<Self> {
        Self::of(a, BOperand::Window(b), b_shape)
    }

    /// Rows of A (`a`, all of its columns) times B (`b`: a window of its columns, or all of a
    /// spliced B); [`Error::Internal`] for windows of another kind, which the kernels do not
    /// read.
    fn of(a: &CsrWindow<&'a Csr<T>>, b: BOperand<'_, 'a, T>, b_shape: ShapeOfB) -> Result<Self> {
        let (rows, lo, hi, whole_width) = match b {
            BOperand::Window(w) => {
                if !w.all_rows() {
                    return Err(Self::unread(a, w.rows(), w.cols()));
                }
                (
                    RowsOfB::whole(w.matrix()),
                    w.col_lo(),
                    w.col_hi(),
                    w.all_columns(),
                )
            }
            // At most `MAX_DIMENSION` columns, as every matrix's.
            BOperand::Spliced(s) => (RowsOfB::spliced(s), 0, s.ncols() as u32, true),
        };
        let b_rows = match b {
            BOperand::Window(w) => w.nrows(),
            BOperand::Spliced(s) => s.nrows(),
        };
        if !a.all_columns() || a.ncols() != b_rows {
            return Err(Self::unread(a, 0..b_rows, lo as usize..hi as usize));
        }
        let a_matrix: &'a Csr<T> = a.matrix();
        Ok(Operands {
            a: a_matrix,
            b: rows,
            row_base: a.rows().start,
            nrows: a.nrows(),
            lo,
            hi,
            whole_width,
            reach: b_shape.reach,
            longest_b_row: b_shape.longest_row,
            nonempty_b_rows: b_shape.nonempty_rows,
            near_rows: near_rows::<T>(rows.nnz, b_shape.nonempty_rows),
            prefetch: true,
            own_windows: false,
        }
        .sampling_own_windows())
    }

    /// The error for operands the kernels do not read.
    fn unread(a: &CsrWindow<&'a Csr<T>>, b_rows: Range<usize>, b_cols: Range<usize>) -> Error {
        Error::Internal {
            backend: hetsparse_core::BackendKind::Cpu,
            what: format!(
                "SpGEMM of a {:?} window of A by a {:?} window of B: the kernels read rows of A by columns of B",
                (a.rows(), a.cols()),
                (b_rows, b_cols)
            ),
        }
    }

    /// These operands with [`Operands::own_windows`] decided: on when at least half of up to
    /// [`OWN_WINDOW_SAMPLES`] rows spread over the chunk, among those whose window B's reach
    /// leaves wider than a dense accumulator, would accumulate densely in their own.
    fn sampling_own_windows(mut self) -> Self {
        if !self.whole_width || self.nrows == 0 {
            return self;
        }
        let step = self.nrows.div_ceil(OWN_WINDOW_SAMPLES);
        let (mut wide, mut pays) = (0usize, 0usize);
        for i in (0..self.nrows).step_by(step) {
            let a_cols = self.a_row(i).0;
            if self.too_wide_for_dense(a_cols, self.row_window(a_cols)) {
                wide += 1;
                pays += usize::from(
                    self.reached_columns(a_cols)
                        .is_some_and(|r| row_row::own_window_pays::<T::Acc>(&r)),
                );
            }
        }
        self.own_windows = wide > 0 && 2 * pays >= wide;
        self
    }

    /// The same operands with prefetching off, for rows [`Operands::near_diagonal`].
    fn quiet(&self) -> Self {
        Operands {
            prefetch: false,
            ..*self
        }
    }

    /// The operands to compute row `i` with: these, or `quiet` (these, [`Operands::quiet`])
    /// for a row [`Operands::near_diagonal`].
    #[inline]
    fn for_row<'s>(&'s self, quiet: &'s Self, i: usize) -> &'s Self {
        if self.near_diagonal(i) {
            quiet
        } else {
            self
        }
    }

    /// Whether row `i` of the chunk takes only rows of B near the diagonal (see
    /// [`NEAR_DIAGONAL_BYTES`]). Consecutive such rows read B in a sliding window, which stays
    /// in cache and which the hardware prefetchers follow; software prefetches would only add
    /// instructions (a tenth of the time of road products). Other rows read B's rows from all
    /// over memory, and prefetching them is what keeps the kernels from waiting on each.
    #[inline]
    fn near_diagonal(&self, i: usize) -> bool {
        let cols = self.a_row(i).0;
        let (Some(&first), Some(&last)) = (cols.first(), cols.last()) else {
            return true;
        };
        let row = (self.row_base + i) as i64;
        i64::from(first) >= row - self.near_rows && i64::from(last) <= row + self.near_rows
    }

    /// Whether B's rows are of even length (see [`EVEN_B_ROWS`]).
    fn even_b_rows(&self) -> bool {
        let (rows, nnz) = (self.nonempty_b_rows as u128, self.b.nnz as u128);
        self.longest_b_row as u128 * rows <= u128::from(EVEN_B_ROWS) * nnz.max(rows)
    }

    /// Rows cut into about `per_thread` ranges per thread by their entries of A, each weighed
    /// by B's longest row: costs on the scale of products (what a plan's smallest range is
    /// measured in), without a pass over the rows — about equal work where B's rows are even
    /// ([`Operands::even_b_rows`]).
    fn ranges_by_entries(&self, per_thread: usize) -> Vec<Range<usize>> {
        let longest = self.longest_b_row as u64;
        crate::plan::split_prefix(
            self.nrows,
            |i| {
                self.a_offset(i)
                    .saturating_mul(longest)
                    .saturating_add(i as u64)
            },
            per_thread,
        )
    }

    /// Offset of row `i` of the chunk in A's entries, counted from the chunk's first row.
    #[inline]
    fn a_offset(&self, i: usize) -> u64 {
        let offsets = self.a.row_offsets();
        offsets[self.row_base + i] - offsets[self.row_base]
    }

    /// Width of the column window: the number of columns of C.
    #[inline]
    fn width(&self) -> usize {
        (self.hi - self.lo) as usize
    }

    /// Columns of C (relative to the window) that the row of C whose row of A has columns
    /// `a_cols` can reach: all of them, or a narrower range from B's [`Reach`].
    #[inline]
    fn row_window(&self, a_cols: &[u32]) -> (usize, usize) {
        let width = self.width();
        let (Some(r), Some(&first), Some(&last)) = (self.reach, a_cols.first(), a_cols.last())
        else {
            return (0, width);
        };
        let (lo, hi) = (i64::from(self.lo), i64::from(self.hi));
        let start = (i64::from(first) + r.below).max(lo);
        let end = (i64::from(last) + r.above + 1).min(hi);
        if start < end {
            ((start - lo) as usize, (end - lo) as usize)
        } else {
            (0, width)
        }
    }

    /// Whether the row of C whose row of A has columns `a_cols` (more than one), in `window`
    /// (from [`Operands::row_window`]), is wider than a dense accumulator: the rows that may
    /// look for their own window.
    #[inline]
    fn too_wide_for_dense(&self, a_cols: &[u32], (start, end): (usize, usize)) -> bool {
        end - start > row_row::dense_columns::<T::Acc>() && a_cols.len() > 1
    }

    /// Columns of C (relative to the window) from the least first column to the greatest
    /// last one of the rows of B that `a_cols` take: the window the row of C actually spans,
    /// with the row's exact number of products (read on the way). `None` when the chunk's
    /// window is not all of B (each row of B would have to be cut to it first) or those rows
    /// are empty.
    #[inline]
    fn reached_columns(&self, a_cols: &[u32]) -> Option<ReachedColumns> {
        if !self.whole_width {
            return None;
        }
        let (mut first, mut last, mut products) = (u32::MAX, 0u32, 0u64);
        for &k in a_cols {
            let cols = self.b.row(k as usize).0;
            products += cols.len() as u64;
            if let (Some(&f), Some(&l)) = (cols.first(), cols.last()) {
                first = first.min(f);
                last = last.max(l);
            }
        }
        (first <= last).then(|| ReachedColumns {
            start: (first - self.lo) as usize,
            end: (last - self.lo) as usize + 1,
            products,
        })
    }

    /// Row `i` of the chunk (row `row_base + i` of A).
    #[inline]
    fn a_row(&self, i: usize) -> (&'a [u32], &'a [T]) {
        slice_row(self.a, self.row_base + i)
    }

    /// Row `k` of B inside the column window.
    #[inline(always)]
    fn b_row(&self, k: u32) -> (&'a [u32], &'a [T]) {
        let (cols, vals) = self.b.row(k as usize);
        if self.whole_width {
            return (cols, vals);
        }
        let s = cols.partition_point(|&j| j < self.lo);
        let e = s + cols[s..].partition_point(|&j| j < self.hi);
        (&cols[s..e], &vals[s..e])
    }

    /// Asks the cache for what the kernels will read a few entries of A ahead: the row
    /// offsets of B for entry `e + PREFETCH_OFFSETS_AHEAD` of `a_cols`, and the row of B of
    /// entry `e + PREFETCH_ROWS_AHEAD` (whose offsets were asked for earlier). Without this
    /// each row of B waits for memory in turn.
    #[inline(always)]
    fn prefetch(&self, a_cols: &[u32], e: usize) {
        if !self.prefetch {
            return;
        }
        if let Some(&k) = a_cols.get(e + PREFETCH_OFFSETS_AHEAD) {
            self.prefetch_offsets(k);
        }
        if let Some(&k) = a_cols.get(e + PREFETCH_ROWS_AHEAD) {
            self.prefetch_b_row(k);
        }
    }

    /// The same across rows, called when row `i` of the chunk starts: the first rows of B of
    /// row `i + 1` and the first offsets of row `i + 2`, which the in-row look-ahead of
    /// [`Operands::prefetch`] does not reach.
    #[inline(always)]
    fn prefetch_next_rows(&self, i: usize) {
        if !self.prefetch {
            return;
        }
        if i + 1 < self.nrows {
            for &k in self.a_row(i + 1).0.iter().take(PREFETCH_ROWS_AHEAD) {
                self.prefetch_b_row(k);
            }
        }
        if i + 2 < self.nrows {
            for &k in self.a_row(i + 2).0.iter().take(PREFETCH_OFFSETS_AHEAD) {
                self.prefetch_offsets(k);
            }
        }
    }

    #[inline(always)]
    fn prefetch_offsets(&self, k: u32) {
        #[cfg(target_arch = "x86_64")]
        if let Some((block, i)) = self.b.locate(k as usize) {
            // SAFETY: a prefetch never faults, and the address lies inside the block's offsets.
            unsafe {
                use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
                let offsets = block.offsets.as_ptr().add(i);
                _mm_prefetch::<_MM_HINT_T0>(offsets.cast());
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = k;
    }

    #[inline(always)]
    fn prefetch_b_row(&self, k: u32) {
        #[cfg(target_arch = "x86_64")]
        if let Some((block, i)) = self.b.locate(k as usize) {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            let start = block.start(i);
            // SAFETY: a prefetch never faults; `start` is at most the block's entries, one past
            // the end at worst, which pointer arithmetic may name.
            unsafe {
                _mm_prefetch::<_MM_HINT_T0>(block.cols.as_ptr().add(start).cast());
                _mm_prefetch::<_MM_HINT_T0>(block.vals.as_ptr().add(start).cast());
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

/// Rows of B on either side of the diagonal that [`NEAR_DIAGONAL_BYTES`] hold, from B's mean
/// row that holds entries (`nonempty` of B's `nnz`; its entries and its offset).
fn near_rows<T: Scalar>(nnz: u64, nonempty: usize) -> i64 {
    let entry = (std::mem::size_of::<u32>() + std::mem::size_of::<T>()) as u64;
    let row_bytes = nnz.saturating_mul(entry) / (nonempty as u64).max(1) + 8;
    (NEAR_DIAGONAL_BYTES / 2 / row_bytes) as i64
}

/// Row `i` of `m` (as [`Csr::row`], inlined into the kernels' loops); `i` must be a row of
/// `m`, which the kernels' callers check (rows of a chunk inside A, columns of A inside B's
/// rows).
#[inline(always)]
fn slice_row<T: Scalar>(m: &Csr<T>, i: usize) -> (&[u32], &[T]) {
    let offsets = m.row_offsets();
    assert!(i < m.nrows());
    // SAFETY: `i + 1 < offsets.len()` (checked above); a CSR matrix's offsets do not decrease
    // and end at its entry count, the length of both arrays (the invariants every constructor
    // checks or, unchecked, requires), so `s <= e <= len`. This runs for every row of B a
    // product takes: six bounds tests each were a tenth of the instructions of road rows.
    unsafe {
        let (s, e) = (
            *offsets.get_unchecked(i) as usize,
            *offsets.get_unchecked(i + 1) as usize,
        );
        (
            m.col_indices().get_unchecked(s..e),
            m.values().get_unchecked(s..e),
        )
    }
}

/// The run a product reports to, and the intermediate products the run planned for it (as
/// [`RunControl::plan_product_rows`] counts them: 0 for an unwatched run).
#[derive(Clone, Copy)]
pub(crate) struct Watch<'r> {
    pub(crate) run: &'r RunControl,
    pub(crate) planned: u64,
}

/// A [`Watch`] shared out over the ranges of rows a phase computes: each range checks the
/// run's cancellation before it starts and, once done, reports its part of the planned
/// products, in proportion to its part of a cost (its rows' products where they are known,
/// else A's entries). The parts are differences of rounded prefix shares, so together the
/// ranges report exactly the planned products, whatever order they finish in.
pub(crate) struct RangeReports<'r> {
    watch: Watch<'r>,
    /// Cost of the ranges before each range, and of all of them at the end.
    prefix: Vec<u64>,
}

impl<'r> RangeReports<'r> {
    /// Reports over `ranges` costing `cost(range)` each (not weighed where nothing was
    /// planned: an unwatched run pays no pass over the rows).
    fn new(
        watch: Watch<'r>,
        ranges: &[Range<usize>],
        cost: impl Fn(Range<usize>) -> u64 + Sync,
    ) -> Self {
        if watch.planned == 0 {
            return RangeReports {
                watch,
                prefix: Vec::new(),
            };
        }
        let costs: Vec<u64> = ranges.par_iter().map(|r| cost(r.clone())).collect();
        let mut prefix = Vec::with_capacity(costs.len() + 1);
        prefix.push(0u64);
        let mut total = 0u64;
        for c in costs {
            total = total.saturating_add(c);
            prefix.push(total);
        }
        RangeReports { watch, prefix }
    }

    /// Reports over `ranges` costing their rows' `products`.
    fn by_products(watch: Watch<'r>, ranges: &[Range<usize>], products: &[u64]) -> Self {
        Self::new(watch, ranges, |r| products[r].iter().sum())
    }

    /// [`Error::Cancelled`] once the run is cancelled: before a range starts.
    fn start(&self) -> Result<()> {
        self.watch.run.checkpoint()
    }

    /// Range `r` is done.
    fn finished(&self, r: usize) {
        if self.watch.planned == 0 {
            return;
        }
        let part = self.share(r + 1) - self.share(r);
        if part > 0 {
            self.watch.run.add_done(part);
        }
    }

    /// The planned products of the ranges before range `r`.
    fn share(&self, r: usize) -> u64 {
        let ranges = self.prefix.len() - 1;
        let total = self.prefix[ranges];
        if total == 0 {
            // Nothing to weigh by: the last range reports it all.
            return if r == ranges { self.watch.planned } else { 0 };
        }
        // At most `planned`, as `prefix[r] <= total`.
        (u128::from(self.watch.planned) * u128::from(self.prefix[r]) / u128::from(total)) as u64
    }
}

/// `C = A[rows, :] · B[:, cols]` over semiring `S` for windows `a` (rows of A) and `b`
/// (columns of B), column indices relative to `cols.start`; `b_shape` is
/// [`shape_of_b`] of B. Reports to `watch` range by range.
pub(crate) fn multiply<T: Scalar, S: Semiring<T>>(
    a: &CsrWindow<&Csr<T>>,
    b: BOperand<'_, '_, T>,
    b_shape: ShapeOfB,
    algorithm: SpgemmAlgorithm,
    watch: Watch<'_>,
) -> Result<Csr<T>> {
    let ops = Operands::of(a, b, b_shape)?;
    let span = tracing::debug_span!(
        "cpu_spgemm",
        ?algorithm,
        rows = ops.nrows,
        cols = ops.width(),
        nnz_a = ops.a.nnz(),
        nnz_b = ops.b.nnz
    );
    let _enter = span.enter();

    let pool = ScratchPool::<T::Acc>::new();
    // With B's rows of even length, the one-pass product needs no products per row up front:
    // ranges are cut by A's entries and rows are bounded by them, saving a pass over every
    // entry of A (a tenth of the time of short-row products such as roads).
    let one_pass = algorithm != SpgemmAlgorithm::ColumnRow;
    if one_pass && ops.even_b_rows() {
        if let Some(c) = staged::multiply::<T, S>(&ops, None, &pool, watch)? {
            return Ok(c);
        }
    }
    watch.run.checkpoint()?;
    let products: Vec<u64> = {
        let _s = tracing::debug_span!("analysis", rows = ops.nrows).entered();
        let products: Vec<u64> = (0..ops.nrows)
            .into_par_iter()
            .with_min_len(512)
            .map(|i| ops.row_products(i))
            .collect();
        tracing::debug!(total_products = products.iter().sum::<u64>(), "planned");
        products
    };
    if one_pass {
        // Also after the even-rows path failed to reserve its looser bound.
        if let Some(c) = staged::multiply::<T, S>(&ops, Some(&products), &pool, watch)? {
            return Ok(c);
        }
        tracing::debug!("C's upper bound cannot be reserved: counting first");
    }
    multiply_counted::<T, S>(&ops, &products, &pool, a, algorithm, watch)
}

/// [`multiply`] over the semiring `options` names, with its mask where it has one (then
/// [`masked`] computes it, whatever the algorithm).
pub(crate) fn multiply_with<T: Scalar>(
    a: &CsrWindow<&Csr<T>>,
    b: BOperand<'_, '_, T>,
    b_shape: ShapeOfB,
    options: &SpgemmOptions,
    watch: Watch<'_>,
) -> Result<Csr<T>> {
    struct Product<'x, 'm, T> {
        a: &'x CsrWindow<&'m Csr<T>>,
        b: BOperand<'x, 'm, T>,
        b_shape: ShapeOfB,
        algorithm: SpgemmAlgorithm,
        mask: Option<&'x Mask>,
        watch: Watch<'x>,
    }
    impl<T: Scalar> SemiringVisitor<T> for Product<'_, '_, T> {
        type Output = Result<Csr<T>>;
        fn visit<S: Semiring<T>>(self) -> Result<Csr<T>> {
            match self.mask {
                Some(mask) => {
                    let ops = Operands::of(self.a, self.b, self.b_shape)?;
                    Ok(masked::multiply::<T, S>(&ops, mask, self.watch)?.0)
                }
                None => multiply::<T, S>(self.a, self.b, self.b_shape, self.algorithm, self.watch),
            }
        }
    }
    with_semiring(
        options.semiring,
        Product {
            a,
            b,
            b_shape,
            algorithm: options.algorithm,
            mask: options.mask.as_ref(),
            watch,
        },
    )?
}

/// [`multiply_into`] over the semiring `options` names; [`Error::Internal`] for a mask, whose
/// chunks are computed whole ([`multiply_with`]) and copied in.
#[allow(clippy::too_many_arguments)]
pub(crate) fn multiply_into_with<T: Scalar>(
    a: &CsrWindow<&Csr<T>>,
    b: &CsrWindow<&Csr<T>>,
    b_shape: ShapeOfB,
    options: &SpgemmOptions,
    watch: Watch<'_>,
    counts: &[u64],
    cols: &mut [MaybeUninit<u32>],
    vals: &mut [MaybeUninit<T>],
) -> Result<()> {
    struct Into<'x, 'm, T> {
        a: &'x CsrWindow<&'m Csr<T>>,
        b: &'x CsrWindow<&'m Csr<T>>,
        b_shape: ShapeOfB,
        algorithm: SpgemmAlgorithm,
        watch: Watch<'x>,
        counts: &'x [u64],
        cols: &'x mut [MaybeUninit<u32>],
        vals: &'x mut [MaybeUninit<T>],
    }
    impl<T: Scalar> SemiringVisitor<T> for Into<'_, '_, T> {
        type Output = Result<()>;
        fn visit<S: Semiring<T>>(self) -> Result<()> {
            multiply_into::<T, S>(
                self.a,
                self.b,
                self.b_shape,
                self.algorithm,
                self.watch,
                self.counts,
                self.cols,
                self.vals,
            )
        }
    }
    if options.mask.is_some() {
        return Err(Error::Internal {
            backend: hetsparse_core::BackendKind::Cpu,
            what: "a masked chunk computed into its place: masked chunks are copied in".into(),
        });
    }
    with_semiring(
        options.semiring,
        Into {
            a,
            b,
            b_shape,
            algorithm: options.algorithm,
            watch,
            counts,
            cols,
            vals,
        },
    )?
}

/// The two-phase product: the symbolic phase counts every row, C is allocated exactly, and the
/// numeric phase writes it (Column-Row, and Row-Row when C's upper bound is too large to
/// reserve). Both phases look at cancellation range by range; the numeric one reports the
/// products.
fn multiply_counted<T: Scalar, S: Semiring<T>>(
    ops: &Operands<'_, T>,
    products: &[u64],
    pool: &ScratchPool<T::Acc>,
    a: &CsrWindow<&Csr<T>>,
    algorithm: SpgemmAlgorithm,
    watch: Watch<'_>,
) -> Result<Csr<T>> {
    let ranges = plan::balanced_ranges(products);
    let reports = RangeReports::by_products(watch, &ranges, products);
    let a_columns = columns_of_a(a, ops, algorithm)?;

    // The symbolic phase writes each row's count at its row's end offset; a prefix sum then
    // turns the counts into offsets in place.
    let mut offsets = vec![0u64; ops.nrows + 1];
    {
        let _s = tracing::debug_span!("symbolic", rows = ops.nrows).entered();
        let parts = split_mut(&mut offsets[1..], &ranges);
        parts
            .into_par_iter()
            .zip(ranges.par_iter())
            .try_for_each(|(counts, range)| {
                reports.start()?;
                pool.with(|s| row_row::count_rows(ops, range.clone(), products, counts, s));
                Ok::<_, Error>(())
            })?;
    }
    let mut nnz = 0u64;
    for offset in &mut offsets[1..] {
        nnz += *offset;
        *offset = nnz;
    }
    let len = hetsparse_core::host::entry_count(nnz, "SpGEMM result")?;
    // Not filled: the numeric phase writes every entry once, so its threads are also the first
    // to touch (and place) each page.
    let mut cols = reserved::<u32>(len, "column indices of C")?;
    let mut vals = reserved::<T>(len, "values of C")?;
    numeric::<T, S>(
        ops,
        products,
        pool,
        a_columns.as_ref(),
        &ranges,
        &reports,
        &offsets,
        &mut cols.spare_capacity_mut()[..len],
        &mut vals.spare_capacity_mut()[..len],
    )?;
    // SAFETY: `numeric` returned without error, so it wrote all `len` slots.
    unsafe {
        cols.set_len(len);
        vals.set_len(len);
    }
    // SAFETY: every row was written sorted and without repeats (the accumulators emit their
    // columns in order), with columns inside the window, and offsets come from the exact
    // counts.
    Ok(unsafe { Csr::from_parts_unchecked(ops.nrows, ops.width(), offsets, cols, vals) })
}

/// The numeric phase alone of `C = A[rows, :] · B[:, cols]` (as [`multiply`]) whose rows'
/// entries are known (`counts`, exact: C's symbolic counts), written one row after another
/// into `cols`/`vals` (the counts' sum of slots, every one written where it returns `Ok`):
/// a chunk computed straight into its place in C. A row whose entries are not its count is an
/// error. Reports to `watch` range by range.
#[allow(clippy::too_many_arguments)]
pub(crate) fn multiply_into<T: Scalar, S: Semiring<T>>(
    a: &CsrWindow<&Csr<T>>,
    b: &CsrWindow<&Csr<T>>,
    b_shape: ShapeOfB,
    algorithm: SpgemmAlgorithm,
    watch: Watch<'_>,
    counts: &[u64],
    cols: &mut [MaybeUninit<u32>],
    vals: &mut [MaybeUninit<T>],
) -> Result<()> {
    let ops = Operands::new(a, b, b_shape)?;
    let _span = tracing::debug_span!(
        "cpu_spgemm_into",
        ?algorithm,
        rows = ops.nrows,
        cols = ops.width(),
    )
    .entered();
    let mut offsets = Vec::with_capacity(counts.len() + 1);
    offsets.push(0u64);
    for &n in counts {
        offsets.push(offsets[offsets.len() - 1] + n);
    }
    if counts.len() != ops.nrows || offsets[counts.len()] != cols.len() as u64 {
        return Err(Error::Internal {
            backend: hetsparse_core::BackendKind::Cpu,
            what: format!(
                "{} rows counting {} entries for a chunk of {} rows written into {} slots",
                counts.len(),
                offsets[counts.len()],
                ops.nrows,
                cols.len()
            ),
        });
    }
    let products: Vec<u64> = (0..ops.nrows)
        .into_par_iter()
        .with_min_len(512)
        .map(|i| ops.row_products(i))
        .collect();
    let pool = ScratchPool::<T::Acc>::new();
    let a_columns = columns_of_a(a, &ops, algorithm)?;
    let ranges = plan::balanced_ranges(&products);
    let reports = RangeReports::by_products(watch, &ranges, &products);
    numeric::<T, S>(
        &ops,
        &products,
        &pool,
        a_columns.as_ref(),
        &ranges,
        &reports,
        &offsets,
        cols,
        vals,
    )
}

/// Column-Row reads A by columns: the transpose of the chunk's rows (copied first only where
/// they are not all of A). `None` for the other algorithms.
fn columns_of_a<T: Scalar>(
    a: &CsrWindow<&Csr<T>>,
    ops: &Operands<'_, T>,
    algorithm: SpgemmAlgorithm,
) -> Result<Option<Csr<T>>> {
    match algorithm {
        SpgemmAlgorithm::ColumnRow => {
            let _s = tracing::debug_span!("transpose_a", nnz = ops.a.nnz()).entered();
            Ok(Some(a.as_csr()?.transpose()?))
        }
        _ => Ok(None),
    }
}

/// The numeric phase: each range of rows computed into its slots of `cols`/`vals`, row `i` at
/// `offsets[i]..offsets[i + 1]` (C's exact counts), each range reported to `reports`. Every
/// slot is written where it returns `Ok`; a row whose entries are not its count is an error.
#[allow(clippy::too_many_arguments)]
fn numeric<T: Scalar, S: Semiring<T>>(
    ops: &Operands<'_, T>,
    products: &[u64],
    pool: &ScratchPool<T::Acc>,
    a_columns: Option<&Csr<T>>,
    ranges: &[Range<usize>],
    reports: &RangeReports<'_>,
    offsets: &[u64],
    cols: &mut [MaybeUninit<u32>],
    vals: &mut [MaybeUninit<T>],
) -> Result<()> {
    let nnz = offsets[ops.nrows];
    let _s = tracing::debug_span!("numeric", rows = ops.nrows, nnz).entered();
    let entry_ranges: Vec<Range<usize>> = ranges
        .iter()
        .map(|r| offsets[r.start] as usize..offsets[r.end] as usize)
        .collect();
    let col_parts = split_mut(cols, &entry_ranges);
    let val_parts = split_mut(vals, &entry_ranges);
    // Every row writes exactly as many entries as its slots, through `RowOut::push` (which
    // writes slot `n` and then counts it), or the phase fails: the ranges tile the rows, and
    // their entry ranges tile the slots.
    col_parts
        .into_par_iter()
        .zip(val_parts)
        .zip(ranges.par_iter().enumerate())
        .try_for_each(|((c, v), (r, range))| {
            reports.start()?;
            let out = Output {
                offsets,
                first_row: range.start,
                cols: c,
                vals: v,
            };
            pool.with(|s| match a_columns {
                Some(at) => {
                    column_row::compute_rows::<T, S>(ops, at, range.clone(), products, out, s)
                }
                None => row_row::compute_rows::<T, S>(ops, range.clone(), products, out, s),
            })?;
            reports.finished(r);
            Ok(())
        })
}

/// Where a range of rows writes its part of C: `cols`/`vals` start at row `first_row`. The
/// slots start uninitialised.
pub(crate) struct Output<'o, T> {
    offsets: &'o [u64],
    first_row: usize,
    cols: &'o mut [MaybeUninit<u32>],
    vals: &'o mut [MaybeUninit<T>],
}

impl<T> Output<'_, T> {
    /// The slots of row `i` (a row of the chunk).
    #[inline]
    fn row(&mut self, i: usize) -> RowOut<'_, T> {
        let base = self.offsets[self.first_row];
        let (s, e) = (
            (self.offsets[i] - base) as usize,
            (self.offsets[i + 1] - base) as usize,
        );
        RowOut::slots(
            &mut self.cols[s..e],
            &mut self.vals[s..e],
            true,
            Like::Counted,
        )
    }
}

/// The slots of one row of C, written in order from the first.
pub(crate) struct RowOut<'r, T> {
    cols: &'r mut [MaybeUninit<u32>],
    vals: &'r mut [MaybeUninit<T>],
    /// Entries pushed so far (may exceed the slots if the row disagrees with its count).
    n: usize,
    /// Whether the slots are exactly the row's entries, as the symbolic phase counted them;
    /// otherwise they are an upper bound (one-pass products, see [`staged`]).
    exact: bool,
    /// What the row's number of entries is likely to be, which only steers the accumulator's
    /// strategy.
    like: Like,
}

/// What a row's number of entries is likely to be before it is computed.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Like {
    /// Exactly its slots (counted by the symbolic phase).
    Counted,
    /// As many per product as a neighbouring row had: `entries` of `products`. Kept as the
    /// pair rather than a quotient, so that the common uses need no division on every row.
    Ratio { entries: u64, products: u64 },
}

impl<'r, T> RowOut<'r, T> {
    /// No slots: the symbolic phase, which only counts.
    fn none() -> Self {
        RowOut {
            cols: &mut [],
            vals: &mut [],
            n: 0,
            exact: true,
            like: Like::Counted,
        }
    }

    /// At most `cols.len()` entries, probably as many per product as `like` says.
    fn bounded(
        cols: &'r mut [MaybeUninit<u32>],
        vals: &'r mut [MaybeUninit<T>],
        like: Like,
    ) -> Self {
        RowOut::slots(cols, vals, false, like)
    }

    /// Column and value slots cut to the same length, which [`RowOut::push`] relies on.
    #[inline]
    fn slots(
        cols: &'r mut [MaybeUninit<u32>],
        vals: &'r mut [MaybeUninit<T>],
        exact: bool,
        like: Like,
    ) -> Self {
        let len = cols.len().min(vals.len());
        RowOut {
            cols: &mut cols[..len],
            vals: &mut vals[..len],
            n: 0,
            exact,
            like,
        }
    }

    /// Slots of the row.
    #[inline]
    fn len(&self) -> usize {
        self.cols.len()
    }

    /// Whether the row is known to fill every one of `width` columns.
    #[inline]
    fn counted_full(&self, width: usize) -> bool {
        self.exact && self.cols.len() == width
    }

    /// The row's likely number of entries, for a row of `products` products (see `like`).
    fn expected(&self, products: u64) -> usize {
        match self.like {
            Like::Counted => self.len(),
            Like::Ratio {
                entries,
                products: of,
            } if of > 0 => {
                let e = (u128::from(entries) * u128::from(products)).div_ceil(u128::from(of));
                usize::try_from(e).map_or(self.len(), |e| e.min(self.len()))
            }
            Like::Ratio { .. } => self.len(),
        }
    }

    /// Whether the row's `products` products likely land at least `times` times on each of its
    /// entries: `products >= times * expected(products)`, without the division.
    #[inline]
    fn revisits(&self, products: u64, times: u64) -> bool {
        match self.like {
            Like::Ratio {
                entries,
                products: of,
            } if of > 0 => of >= times.saturating_mul(entries),
            _ => products >= times.saturating_mul(self.len() as u64),
        }
    }

    /// Writes the next entry (column relative to the window); entries beyond the slots are
    /// counted, not written, so that the caller can report the mismatch.
    #[inline(always)]
    fn push(&mut self, j: u32, v: T) {
        if self.n < self.cols.len() {
            // SAFETY: `n` is below the slots of both, which have the same length (the
            // constructors cut them so), so one test covers both.
            unsafe {
                self.cols.get_unchecked_mut(self.n).write(j);
                self.vals.get_unchecked_mut(self.n).write(v);
            }
        }
        self.n += 1;
    }

    /// Entries pushed.
    #[inline]
    fn written(&self) -> usize {
        self.n
    }
}

/// The error when a row's numeric pass disagrees with its symbolic count: a bug, reported
/// instead of returning a wrong matrix.
fn count_mismatch(row: usize, counted: usize, written: usize) -> Error {
    Error::Internal {
            backend: hetsparse_core::BackendKind::Cpu,
        what: format!(
            "SpGEMM row {row}: the numeric phase produced {written} entries, the symbolic phase counted {counted}"
        ),
    }
}

/// The error when a row of a one-pass product has more entries than its products or C's
/// width allow: a bug, reported instead of returning a wrong matrix.
fn bound_exceeded(row: usize, bound: usize, written: usize) -> Error {
    Error::Internal {
        backend: hetsparse_core::BackendKind::Cpu,
        what: format!(
            "SpGEMM row {row}: the row produced {written} entries, more than its bound of {bound}"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hetsparse_core::generate::{self, MatrixClass};
    use hetsparse_core::PlusTimes;

    /// The one-pass product (what every Row-Row call runs) and the counted one (its fallback
    /// when C's bound cannot be reserved) give the same matrix, and each reports exactly the
    /// products planned for it.
    fn both_ways(a: &Csr<f64>, b: &Csr<f64>, what: &str) {
        let (wa, wb) = (CsrWindow::whole(a), CsrWindow::whole(b));
        let pool_threads = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .expect("pool");
        pool_threads.install(|| {
            let ops = Operands::new(&wa, &wb, shape_of_b(b)).expect("windows");
            let products: Vec<u64> = (0..ops.nrows).map(|i| ops.row_products(i)).collect();
            let pool = ScratchPool::<f64>::new();
            // Any count works: the ranges share it out.
            let planned = products.iter().sum::<u64>() * 3 + 7;
            let runs: [RunControl; 3] = Default::default();
            let watch = |k: usize| Watch {
                run: &runs[k],
                planned,
            };
            let staged = staged::multiply::<f64, PlusTimes>(&ops, Some(&products), &pool, watch(0))
                .expect("one pass")
                .expect("bound reserved");
            // The same with products counted row by row, as for B of even rows.
            let unplanned = staged::multiply::<f64, PlusTimes>(&ops, None, &pool, watch(1))
                .expect("one pass, unplanned")
                .expect("bound reserved");
            let counted = multiply_counted::<f64, PlusTimes>(
                &ops,
                &products,
                &pool,
                &wa,
                SpgemmAlgorithm::RowRow,
                watch(2),
            )
            .expect("counted");
            for (run, how) in runs
                .iter()
                .zip(["one pass", "one pass, unplanned", "counted"])
            {
                assert_eq!(
                    run.progress().done,
                    planned,
                    "{what} {how}: products reported"
                );
            }
            let expected =
                hetsparse_core::reference::spgemm::<f64, PlusTimes>(a, b).expect("reference");
            for (c, how) in [
                (&staged, "one pass"),
                (&unplanned, "one pass, unplanned"),
                (&counted, "counted"),
            ] {
                assert_eq!(c.row_offsets(), expected.row_offsets(), "{what} {how}");
                assert_eq!(c.col_indices(), expected.col_indices(), "{what} {how}");
                for (x, y) in c.values().iter().zip(expected.values()) {
                    assert!((x - y).abs() <= 1e-9 * (1.0 + y.abs()), "{what} {how}");
                }
            }
        });
    }

    #[test]
    fn one_pass_and_counted_products_agree() {
        for class in [
            MatrixClass::Stencil3d,
            MatrixClass::Banded,
            MatrixClass::PowerLaw,
            MatrixClass::Road,
            MatrixClass::Skewed,
            MatrixClass::LpRectangular,
            MatrixClass::Dense,
        ] {
            let (a, b) = generate::product_operands::<f64>(class, 3000, 5);
            both_ways(&a, &b, &class.to_string());
        }
    }

    #[test]
    fn only_b_of_even_rows_skips_counting_products() {
        for (class, even) in [
            (MatrixClass::Road, true),
            (MatrixClass::Banded, true),
            (MatrixClass::Uniform, true),
            (MatrixClass::Stencil3d, true),
            (MatrixClass::LpRectangular, true),
            (MatrixClass::Dense, true),
            (MatrixClass::PowerLaw, false),
            (MatrixClass::Skewed, false),
        ] {
            let (a, b) = generate::product_operands::<f64>(class, 3000, 5);
            let (wa, wb) = (CsrWindow::whole(&a), CsrWindow::whole(&b));
            let ops = Operands::new(&wa, &wb, shape_of_b(&b)).expect("windows");
            assert_eq!(ops.even_b_rows(), even, "{class}");
        }
    }

    #[test]
    fn rows_take_their_own_window_where_b_reaches_wide() {
        // B as smoothed aggregation makes a prolongator: row k takes the aggregates next to
        // k / 4, so C = A·B is a quarter as wide as A while B's reach (j - k) spans three
        // quarters of it, wider than a dense accumulator. The first rows of B are scattered
        // instead: rows of C there find no narrow window and are hashed, while the sample of
        // rows that decides whether to look finds the local rows' windows worth it.
        let n = 300_000usize;
        let width = n / 4;
        assert!(
            width > row_row::dense_columns::<f64>(),
            "the reach must be too wide"
        );
        let (mut offsets, mut cols, mut vals) = (vec![0u64], Vec::new(), Vec::new());
        let mut seed = 12_345u64;
        for k in 0..n {
            let mut row: Vec<u32> = if k < n / 8 {
                (0..3)
                    .map(|_| {
                        seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                        ((seed >> 33) % width as u64) as u32
                    })
                    .collect()
            } else {
                (0..3)
                    .map(|d| ((k / 4 + d).min(width - 1)) as u32)
                    .collect()
            };
            row.sort_unstable();
            row.dedup();
            vals.extend(row.iter().map(|&j| 1.0 + f64::from(j % 7)));
            cols.extend(row);
            offsets.push(cols.len() as u64);
        }
        let b = Csr::try_new(n, width, offsets, cols, vals).expect("B");
        let (mut offsets, mut cols, mut vals) = (vec![0u64], Vec::new(), Vec::new());
        for i in 0..n {
            // Seven neighbours: rows of 21 products, enough for a dense window.
            for k in i.saturating_sub(3)..(i + 4).min(n) {
                cols.push(k as u32);
                vals.push(if k == i { 2.0 } else { -0.5 });
            }
            offsets.push(cols.len() as u64);
        }
        let a = Csr::try_new(n, n, offsets, cols, vals).expect("A");
        let (wa, wb) = (CsrWindow::whole(&a), CsrWindow::whole(&b));
        let ops = Operands::new(&wa, &wb, shape_of_b(&b)).expect("windows");
        assert!(ops.own_windows, "most rows take their own window");
        let k = n as u32 / 2;
        let (start, end) = ops.row_window(&[k, k + 1]);
        assert!(
            end - start > row_row::dense_columns::<f64>(),
            "reach {start}..{end}"
        );
        assert_eq!(
            ops.reached_columns(&[k, k + 1]),
            Some(ReachedColumns {
                start: (k / 4) as usize,
                end: (k / 4) as usize + 3,
                products: 6
            }),
            "B's rows {k} and {} take columns k/4 to k/4 + 2",
            k + 1
        );
        both_ways(&a, &b, "aggregation-like B");
        // Scattered rows over as wide a C do not look.
        let (a, b) = generate::product_operands::<f64>(MatrixClass::Uniform, 100_000, 5);
        let (wa, wb) = (CsrWindow::whole(&a), CsrWindow::whole(&b));
        let ops = Operands::new(&wa, &wb, shape_of_b(&b)).expect("windows");
        assert!(!ops.own_windows, "uniform rows span all of C");
    }

    #[test]
    fn hashed_rows_longer_than_the_row_before_are_redone() {
        // Over 2^20 columns every row is hashed; rows alternate between 1 and 40 entries of A
        // (products 20 and 800), so the long rows outgrow the table guessed from the short
        // row before them.
        let b = generate::uniform::<f64>(400, 1 << 20, 20, 7);
        let wide = generate::uniform::<f64>(64, 400, 40, 8);
        let short = generate::uniform::<f64>(64, 400, 2, 9);
        let (mut offsets, mut cols, mut vals) = (vec![0u64], Vec::new(), Vec::new());
        for i in 0..64 {
            let (c, v) = if i % 2 == 0 { &short } else { &wide }.row(i);
            cols.extend_from_slice(c);
            vals.extend_from_slice(v);
            offsets.push(cols.len() as u64);
        }
        let a = Csr::try_new(64, 400, offsets, cols, vals).expect("rows");
        both_ways(&a, &b, "alternating hash rows");
    }
}
