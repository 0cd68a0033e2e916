//! SpMV and SpMM: a sparse matrix of any format times a vector or a dense matrix.
//!
//! SpMV is SpMM with one column, except on CSR, whose SpMV has its own kernel
//! ([`csr_spmv`]). Formats that can list the entries of a range of rows (CSR,
//! DIA, ELLPACK-R, BSR, CSPR, and COO when its triplets are in row order) run
//! [`rows_times_dense`]: blocks of rows in parallel, each accumulated in a small buffer that
//! stays in cache, with inner loops over contiguous data. CSC and unordered COO have no row
//! access: [`scatter_times_dense`] gives each thread a share of the entries and a private
//! result, and sums the results.

use std::ops::Range;

use hetsparse_core::format::{Bsr, Coo, Csc, Cspr, Csr, Dense, Dia, Ellr, Layout, SparseRef};
use hetsparse_core::{Error, Result, Scalar, Semiring};

use crate::csr_spmv::csr_spmv;
use crate::memory::{filled, reserved};
use rayon::prelude::*;

/// `y = A · x`.
pub(crate) fn spmv<T: Scalar, S: Semiring<T>>(a: SparseRef<'_, T>, x: &[T]) -> Result<Vec<T>> {
    let _s = tracing::debug_span!("cpu_spmv", format = %a.format(), rows = a.shape().0).entered();
    times_dense::<T, S>(a, x, 1, Layout::ColMajor)
}

/// `C = A · B`, C in B's layout.
pub(crate) fn spmm<T: Scalar, S: Semiring<T>>(
    a: SparseRef<'_, T>,
    b: &Dense<T>,
) -> Result<Dense<T>> {
    let _s = tracing::debug_span!(
        "cpu_spmm",
        format = %a.format(),
        rows = a.shape().0,
        cols = b.ncols()
    )
    .entered();
    let (m, n) = (a.shape().0, b.ncols());
    let data = times_dense::<T, S>(a, b.data(), n, b.layout())?;
    Ok(Dense::try_new(m, n, b.layout(), data)?)
}

/// Below this many stored entries × dense columns (and result values), a product runs on the
/// calling thread: waking the pool's threads would cost more than the work.
const SERIAL_WORK: u64 = 1 << 15;

/// Entries of A a row-wise kernel reads (a DIA's or BSR's stored slots), `None` for CSC and COO.
fn stored_entries<T: Scalar>(a: &SparseRef<'_, T>) -> Option<u64> {
    Some(match a {
        SparseRef::Csr(m) => m.nnz(),
        SparseRef::Dia(m) => (m.ndiags() as u64).saturating_mul(m.nrows() as u64),
        SparseRef::Ellr(m) => m.nnz(),
        SparseRef::Cspr(m) => m.nnz(),
        SparseRef::Bsr(m) => {
            let (r, c) = m.block_shape();
            m.nnz_blocks().saturating_mul((r * c) as u64)
        }
        SparseRef::Coo(_) | SparseRef::Csc(_) => return None,
    })
}

/// Whether `A · B` for B of `n` columns is small enough to run serially on the calling thread
/// (never for CSC and COO, whose kernel always runs in the pool).
pub(crate) fn runs_serially<T: Scalar>(a: &SparseRef<'_, T>, n: usize) -> bool {
    let Some(stored) = stored_entries(a) else {
        return false;
    };
    let n = n as u64;
    stored.saturating_mul(n) < SERIAL_WORK && (a.shape().0 as u64).saturating_mul(n) < SERIAL_WORK
}

/// `A · B` for B of `n` columns stored in `layout` (`b.len() == A.ncols() · n`).
fn times_dense<T: Scalar, S: Semiring<T>>(
    a: SparseRef<'_, T>,
    b: &[T],
    n: usize,
    layout: Layout,
) -> Result<Vec<T>> {
    let m = a.shape().0;
    let len = m.checked_mul(n).ok_or_else(|| Error::TooLarge {
        what: format!("a {m}×{n} product"),
        needed: m as u64 * n as u64,
        limit: usize::MAX as u64,
        unit: "values",
    })?;
    let what = "SpMM/SpMV result";
    let serial = runs_serially(&a, n);
    let stored = stored_entries(&a).unwrap_or(0);
    let dense = DenseOperand {
        data: b,
        rows: a.shape().1,
        n,
        layout,
    };
    Ok(match a {
        SparseRef::Csr(m) if n == 1 => csr_spmv::<T, S>(m, b, serial)?,
        SparseRef::Csr(m) => {
            rows_times_dense::<T, S, _>(m, &dense, reserved(len, what)?, stored, serial)
        }
        SparseRef::Dia(m) => {
            rows_times_dense::<T, S, _>(m, &dense, reserved(len, what)?, stored, serial)
        }
        SparseRef::Ellr(m) => {
            rows_times_dense::<T, S, _>(m, &dense, reserved(len, what)?, stored, serial)
        }
        SparseRef::Bsr(m) => {
            rows_times_dense::<T, S, _>(m, &dense, reserved(len, what)?, stored, serial)
        }
        SparseRef::Cspr(m) => {
            rows_times_dense::<T, S, _>(m, &dense, reserved(len, what)?, stored, serial)
        }
        SparseRef::Coo(m) if rows_in_order(m) => {
            let stored = m.nnz();
            rows_times_dense::<T, S, _>(&OrderedCoo(m), &dense, reserved(len, what)?, stored, false)
        }
        SparseRef::Coo(m) => {
            scatter_times_dense::<T, S, _>(m, &dense, filled(len, T::zero(), what)?)
        }
        SparseRef::Csc(m) => {
            scatter_times_dense::<T, S, _>(m, &dense, filled(len, T::zero(), what)?)
        }
    })
}

/// The dense operand: `rows × n` in `layout`.
struct DenseOperand<'b, T> {
    data: &'b [T],
    rows: usize,
    n: usize,
    layout: Layout,
}

/// A sparse matrix that can list the entries of any range of its rows.
trait RowSource<T>: Sync {
    /// Number of rows.
    fn nrows(&self) -> usize;
    /// Calls `f(i, k, a)` for each stored entry `A[i, k] = a` with `i` in `rows`, in any order.
    fn visit(&self, rows: Range<usize>, f: impl FnMut(usize, usize, T));

    /// Adds `A[rows, :] · B` to `c` (row-major, `n` columns; `b` row-major with `n` columns).
    #[inline(always)]
    fn rows_times_row_major<S: Semiring<T>>(
        &self,
        rows: Range<usize>,
        b: &[T],
        n: usize,
        c: &mut [T::Acc],
    ) where
        T: Scalar,
    {
        let r0 = rows.start;
        self.visit(rows, |i, k, av| {
            let c_row = &mut c[(i - r0) * n..(i - r0 + 1) * n];
            for (c, &bv) in c_row.iter_mut().zip(&b[k * n..(k + 1) * n]) {
                *c = S::fma(*c, av, bv);
            }
        });
    }

    /// Writes `A[rows, :] · B` to `dst` (row-major, `n` columns; `b` row-major with `n`
    /// columns), summing in `acc` (room for `rows.len() × n` values).
    ///
    /// # Safety
    /// `dst` has room for `rows.len() × n` values, written by no one else meanwhile.
    #[inline(always)]
    unsafe fn rows_into_row_major<S: Semiring<T>>(
        &self,
        rows: Range<usize>,
        b: &[T],
        n: usize,
        acc: &mut [T::Acc],
        dst: *mut T,
    ) where
        T: Scalar,
    {
        acc.fill(S::zero());
        self.rows_times_row_major::<S>(rows, b, n, acc);
        for (p, &v) in acc.iter().enumerate() {
            dst.add(p).write(T::from_acc(v));
        }
    }

    /// Adds `A[rows, :] · x` to `y` (one slot per row of `rows`).
    #[inline(always)]
    fn dot_rows<S: Semiring<T>>(&self, rows: Range<usize>, x: &[T], y: &mut [T::Acc])
    where
        T: Scalar,
    {
        let r0 = rows.start;
        self.visit(rows, |i, k, av| {
            let c = &mut y[i - r0];
            *c = S::fma(*c, av, x[k]);
        });
    }
}

/// Columns of C one CSR row keeps in registers at a time (four 256-bit registers of f64).
const TILE: usize = 16;

/// Multiply-adds below which a block of rows is not worth a task of its own.
const MIN_BLOCK_WORK: u64 = 1 << 14;

/// Rows per block of a product with `m` rows, `stored` entries and `n` dense columns over
/// `threads` threads: few enough that the block's accumulator (`rows × n` values) stays in
/// L1/L2, and that every thread gets several blocks (a product of few long rows, such as a
/// dense 512 × 512 times 8 columns, was a single block on one thread), but not so few that a
/// block's work does not pay for its task.
fn block_rows(m: usize, stored: u64, n: usize, threads: usize) -> usize {
    let in_cache = (8192 / n.max(1)).clamp(16, 1024);
    let per_row = (stored.saturating_mul(n as u64) / (m as u64).max(1)).max(1);
    let worth_a_task = usize::try_from(MIN_BLOCK_WORK.div_ceil(per_row))
        .unwrap_or(usize::MAX)
        .max(1);
    let spread = m.div_ceil(4 * threads.max(1)).max(1);
    in_cache.min(spread.max(worth_a_task))
}

/// A raw pointer to the result that tasks write disjoint parts of.
struct SharedOut<T>(*mut T);
// SAFETY: tasks write disjoint index sets (each its own block of rows), and the buffer outlives
// the parallel loop.
unsafe impl<T: Send> Send for SharedOut<T> {}
unsafe impl<T: Send> Sync for SharedOut<T> {}

/// Blocks of rows in parallel (or in turn when `serial`), each accumulated in a per-thread
/// buffer and written into `c`, which comes empty with room for the `m × n` result: the
/// blocks write every element once, so the result is never zeroed first (a whole extra pass
/// over memory for SpMM's large results).
fn rows_times_dense<T: Scalar, S: Semiring<T>, R: RowSource<T>>(
    a: &R,
    b: &DenseOperand<'_, T>,
    mut c: Vec<T>,
    stored: u64,
    serial: bool,
) -> Vec<T> {
    let (m, n) = (a.nrows(), b.n);
    assert!(
        c.capacity() >= m * n,
        "the result buffer has room for m × n values"
    );
    if n == 0 || m == 0 {
        return c;
    }
    let threads = if serial {
        1
    } else {
        rayon::current_num_threads()
    };
    let block = block_rows(m, stored, n, threads);
    let out = SharedOut(c.as_mut_ptr());
    let out = &out;
    let wide = wide_vectors();
    let run = |acc: &mut Vec<T::Acc>, blk: usize| {
        let rows = blk * block..((blk + 1) * block).min(m);
        if wide {
            // SAFETY: the processor has AVX2 and FMA (checked by `wide_vectors`).
            #[cfg(target_arch = "x86_64")]
            unsafe {
                rows_block_avx2::<T, S, R>(a, b, rows, acc, out, m)
            };
        } else {
            rows_block::<T, S, R>(a, b, rows, acc, out, m);
        }
    };
    let blocks = m.div_ceil(block);
    // At most as many rows as C has, so the scratch is never larger than the result.
    let scratch = || vec![S::zero(); block.min(m) * n];
    if serial {
        let mut acc = scratch();
        (0..blocks).for_each(|blk| run(&mut acc, blk));
    } else {
        (0..blocks).into_par_iter().for_each_init(scratch, run);
    }
    // SAFETY: the blocks tile rows 0..m and each wrote its rows of every column, so all m × n
    // values are initialised (and the capacity was checked above).
    unsafe { c.set_len(m * n) };
    c
}

/// Whether this processor runs the 256-bit instantiation of the kernels (the crate is built
/// for the baseline x86-64, whose vectors hold two f64).
pub(crate) fn wide_vectors() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// [`rows_block`] compiled for AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn rows_block_avx2<T: Scalar, S: Semiring<T>, R: RowSource<T>>(
    a: &R,
    b: &DenseOperand<'_, T>,
    rows: Range<usize>,
    acc: &mut [T::Acc],
    out: &SharedOut<T>,
    m: usize,
) {
    rows_block::<T, S, R>(a, b, rows, acc, out, m);
}

/// Rows `rows` of C, accumulated in `acc` and written to `out` (C has `m` rows).
#[inline(always)]
fn rows_block<T: Scalar, S: Semiring<T>, R: RowSource<T>>(
    a: &R,
    b: &DenseOperand<'_, T>,
    rows: Range<usize>,
    acc: &mut [T::Acc],
    out: &SharedOut<T>,
    m: usize,
) {
    let (n, k_dim) = (b.n, b.rows);
    let (r0, len) = (rows.start, rows.len());
    let acc = &mut acc[..len * n];
    match b.layout {
        Layout::RowMajor => {
            // SAFETY: rows r0..r0+len of a row-major C are this task's alone.
            let dst = unsafe { out.0.add(r0 * n) };
            // SAFETY: `dst` has room for the `len × n` values of these rows.
            unsafe { a.rows_into_row_major::<S>(rows, b.data, n, acc, dst) };
        }
        Layout::ColMajor => {
            acc.fill(S::zero());
            for j in 0..n {
                let c_col = &mut acc[j * len..(j + 1) * len];
                let b_col = &b.data[j * k_dim..(j + 1) * k_dim];
                a.dot_rows::<S>(rows.clone(), b_col, c_col);
                for (p, &v) in c_col.iter().enumerate() {
                    // SAFETY: rows r0..r0+len of each column are this task's alone.
                    unsafe { out.0.add(j * m + r0 + p).write(T::from_acc(v)) };
                }
            }
        }
    }
}

/// A sparse matrix whose entries can be split into parts that are listed independently.
trait EntrySource<T>: Sync {
    /// Number of rows.
    fn nrows(&self) -> usize;
    /// Number of stored entries.
    fn nnz(&self) -> usize;
    /// Calls `f(i, k, a)` for each entry of part `part` of `parts` (about equal parts).
    fn visit_part(&self, part: usize, parts: usize, f: impl FnMut(usize, usize, T));
}

/// Bytes of private results the scatter kernel may hold at once.
const SCATTER_BUDGET_BYTES: usize = 256 << 20;

/// Each part of the entries accumulates into a private `m × n` result, then the results are
/// summed. The number of parts is bounded by the threads and by [`SCATTER_BUDGET_BYTES`].
fn scatter_times_dense<T: Scalar, S: Semiring<T>, E: EntrySource<T>>(
    a: &E,
    b: &DenseOperand<'_, T>,
    mut c: Vec<T>,
) -> Vec<T> {
    let (m, n, k_dim) = (a.nrows(), b.n, b.rows);
    let size = (m * n).max(1) * std::mem::size_of::<T::Acc>();
    let parts = rayon::current_num_threads()
        .min(SCATTER_BUDGET_BYTES / size)
        .min(a.nnz() / 4096)
        .max(1);
    let partials: Vec<Vec<T::Acc>> = (0..parts)
        .into_par_iter()
        .map(|part| {
            let mut acc = vec![S::zero(); m * n];
            a.visit_part(part, parts, |i, k, av| match b.layout {
                Layout::RowMajor => {
                    let c_row = &mut acc[i * n..(i + 1) * n];
                    for (c, &bv) in c_row.iter_mut().zip(&b.data[k * n..(k + 1) * n]) {
                        *c = S::fma(*c, av, bv);
                    }
                }
                Layout::ColMajor => {
                    for j in 0..n {
                        let c = &mut acc[j * m + i];
                        *c = S::fma(*c, av, b.data[j * k_dim + k]);
                    }
                }
            });
            acc
        })
        .collect();
    c.par_chunks_mut(4096).enumerate().for_each(|(chunk, out)| {
        let base = chunk * 4096;
        for (p, o) in out.iter_mut().enumerate() {
            let mut sum = partials[0][base + p];
            for partial in &partials[1..] {
                sum = S::add(sum, partial[base + p]);
            }
            *o = T::from_acc(sum);
        }
    });
    c
}

/// Columns `j0..j0 + W` of one row of C (the row's entries `cols`, `vals` times a row-major B
/// of `n` columns), summed in `W` registers over the row's entries and written to `c_row`
/// once. A tile narrower than [`TILE`] holds too few independent sums to hide the
/// multiply-add's latency: two sets of sums take alternate entries there, so that each entry's
/// multiply-adds do not wait for the previous entry's (on a full tile the second set costs
/// more than it hides, on rows of a few entries most).
///
/// # Safety
/// `c_row` has room for `j0 + W` values, written by no one else meanwhile.
#[inline(always)]
unsafe fn row_tile<T: Scalar, S: Semiring<T>, const W: usize>(
    cols: &[u32],
    vals: &[T],
    b: &[T],
    n: usize,
    j0: usize,
    c_row: *mut T,
) {
    let mut even = [S::zero(); W];
    let mut odd = [S::zero(); W];
    let tile = |k: u32| -> &[T] {
        let at = k as usize * n + j0;
        &b[at..at + W]
    };
    if W >= TILE {
        for (&k, &v) in cols.iter().zip(vals) {
            let b0 = tile(k);
            for t in 0..W {
                even[t] = S::fma(even[t], v, b0[t]);
            }
        }
        for (t, &sum) in even.iter().enumerate() {
            c_row.add(j0 + t).write(T::from_acc(sum));
        }
        return;
    }
    let (pairs, last) = (cols.chunks_exact(2), vals.chunks_exact(2));
    let (col_left, val_left) = (pairs.remainder(), last.remainder());
    for (k, v) in pairs.zip(last) {
        let (b0, b1) = (tile(k[0]), tile(k[1]));
        for t in 0..W {
            even[t] = S::fma(even[t], v[0], b0[t]);
            odd[t] = S::fma(odd[t], v[1], b1[t]);
        }
    }
    if let (Some(&k), Some(&v)) = (col_left.first(), val_left.first()) {
        let b0 = tile(k);
        for t in 0..W {
            even[t] = S::fma(even[t], v, b0[t]);
        }
    }
    for t in 0..W {
        c_row
            .add(j0 + t)
            .write(T::from_acc(S::add(even[t], odd[t])));
    }
}

impl<T: Scalar> RowSource<T> for Csr<T> {
    fn nrows(&self) -> usize {
        Csr::nrows(self)
    }

    /// Each row of C in tiles of [`TILE`] columns, summed in registers over the row's entries
    /// (adding every product into memory would load and store the row once per entry) and
    /// stored straight into C, once: staging the block in `acc` as the other formats do cost
    /// a zeroing pass, a store, a load and a copy of every value of C (banded class SpMM 1.5×
    /// faster without). Where fewer than a tile are left, one tile of 8 and one of 4 columns,
    /// then the last few summed in `acc`.
    #[inline(always)]
    unsafe fn rows_into_row_major<S: Semiring<T>>(
        &self,
        rows: Range<usize>,
        b: &[T],
        n: usize,
        acc: &mut [T::Acc],
        dst: *mut T,
    ) {
        let (all_cols, all_vals) = (self.col_indices(), self.values());
        let offsets = &self.row_offsets()[rows.start..=rows.end];
        for (r, ends) in offsets.windows(2).enumerate() {
            let (s, e) = (ends[0] as usize, ends[1] as usize);
            let (cols, vals) = (&all_cols[s..e], &all_vals[s..e]);
            let c_row = dst.add(r * n);
            // Tiles of 16 columns, then one of 8 and one of 4 where as many are left (SpMM's
            // usual 4, 8 and 32 columns all in registers; 8 columns used to go through `acc`
            // a product at a time, several times slower), then the last few in `acc`. SAFETY
            // of each tile: `j0 + W <= n`, inside this row of C, which `dst` has room for.
            let mut j0 = 0;
            while j0 + TILE <= n {
                row_tile::<T, S, TILE>(cols, vals, b, n, j0, c_row);
                j0 += TILE;
            }
            if j0 + 8 <= n {
                row_tile::<T, S, 8>(cols, vals, b, n, j0, c_row);
                j0 += 8;
            }
            if j0 + 4 <= n {
                row_tile::<T, S, 4>(cols, vals, b, n, j0, c_row);
                j0 += 4;
            }
            if j0 < n {
                let tail = &mut acc[..n - j0];
                tail.fill(S::zero());
                for (&k, &av) in cols.iter().zip(vals) {
                    let b_tail = &b[k as usize * n + j0..(k as usize + 1) * n];
                    for (dst, &bv) in tail.iter_mut().zip(b_tail) {
                        *dst = S::fma(*dst, av, bv);
                    }
                }
                for (t, &v) in tail.iter().enumerate() {
                    c_row.add(j0 + t).write(T::from_acc(v));
                }
            }
        }
    }

    /// Each row summed in registers, four running sums wide: adding every product into memory
    /// would chain them all through a store and a load.
    #[inline(always)]
    fn dot_rows<S: Semiring<T>>(&self, rows: Range<usize>, x: &[T], y: &mut [T::Acc]) {
        let (all_cols, all_vals) = (self.col_indices(), self.values());
        let offsets = &self.row_offsets()[rows.start..=rows.end];
        for (y, ends) in y.iter_mut().zip(offsets.windows(2)) {
            let (s, e) = (ends[0] as usize, ends[1] as usize);
            let (cols, vals) = (&all_cols[s..e], &all_vals[s..e]);
            if cols.len() < 4 {
                // Short rows (road networks, many graphs): one running sum, no set-up.
                let mut sum = S::zero();
                for (&k, &v) in cols.iter().zip(vals) {
                    sum = S::fma(sum, v, x[k as usize]);
                }
                *y = S::add(*y, sum);
                continue;
            }
            let mut sums = [S::zero(); 4];
            let (cols4, vals4) = (cols.chunks_exact(4), vals.chunks_exact(4));
            let (cols_tail, vals_tail) = (cols4.remainder(), vals4.remainder());
            for (c, v) in cols4.zip(vals4) {
                for lane in 0..4 {
                    sums[lane] = S::fma(sums[lane], v[lane], x[c[lane] as usize]);
                }
            }
            let mut sum = S::add(S::add(sums[0], sums[1]), S::add(sums[2], sums[3]));
            for (&k, &v) in cols_tail.iter().zip(vals_tail) {
                sum = S::fma(sum, v, x[k as usize]);
            }
            *y = S::add(*y, sum);
        }
    }
    #[inline(always)]
    fn visit(&self, rows: Range<usize>, mut f: impl FnMut(usize, usize, T)) {
        let (all_cols, all_vals) = (self.col_indices(), self.values());
        let offsets = &self.row_offsets()[rows.start..=rows.end];
        for (i, ends) in rows.zip(offsets.windows(2)) {
            let (s, e) = (ends[0] as usize, ends[1] as usize);
            for (&k, &v) in all_cols[s..e].iter().zip(&all_vals[s..e]) {
                f(i, k as usize, v);
            }
        }
    }
}

impl<T: Scalar> RowSource<T> for Dia<T> {
    fn nrows(&self) -> usize {
        Dia::nrows(self)
    }
    #[inline(always)]
    fn visit(&self, rows: Range<usize>, mut f: impl FnMut(usize, usize, T)) {
        let (m, n) = (self.nrows() as i64, self.ncols() as i64);
        let zero = T::zero();
        for (d, &off) in self.offsets().iter().enumerate() {
            // Rows whose column i + off lies inside the matrix.
            let first = (rows.start as i64).max(-off).max(0);
            let last = (rows.end as i64).min(n - off).min(m);
            let diagonal = self.diagonal(d);
            for i in first..last {
                // A zero slot is band padding, not an entry: it is not multiplied, so
                // `0 × inf` never turns a row into NaN (the same answer as CSR).
                let v = diagonal[i as usize];
                if v != zero {
                    f(i as usize, (i + off) as usize, v);
                }
            }
        }
    }
}

impl<T: Scalar> RowSource<T> for Ellr<T> {
    fn nrows(&self) -> usize {
        Ellr::nrows(self)
    }
    #[inline(always)]
    fn visit(&self, rows: Range<usize>, mut f: impl FnMut(usize, usize, T)) {
        // Slot k of every row is contiguous (column-major), so the block walks slot by slot.
        let lengths = &self.row_lengths()[rows.clone()];
        let width = lengths.iter().copied().max().unwrap_or(0) as usize;
        let padded = self.padded_rows();
        let (cols, vals) = (self.col_indices(), self.values());
        for k in 0..width {
            let base = k * padded;
            for (r, &len) in lengths.iter().enumerate() {
                if k < len as usize {
                    let i = rows.start + r;
                    f(i, cols[base + i] as usize, vals[base + i]);
                }
            }
        }
    }
}

impl<T: Scalar> RowSource<T> for Bsr<T> {
    fn nrows(&self) -> usize {
        Bsr::nrows(self)
    }
    #[inline(always)]
    fn visit(&self, rows: Range<usize>, mut f: impl FnMut(usize, usize, T)) {
        let (r, c) = self.block_shape();
        let zero = T::zero();
        let (offsets, block_cols, values) = (self.row_offsets(), self.col_indices(), self.values());
        for block_row in rows.start / r..rows.end.div_ceil(r) {
            // The rows of this block row that fall inside the range.
            let inner = rows.start.max(block_row * r) - block_row * r
                ..rows.end.min((block_row + 1) * r) - block_row * r;
            for b in offsets[block_row] as usize..offsets[block_row + 1] as usize {
                let block = &values[b * r * c..(b + 1) * r * c];
                let col0 = block_cols[b] as usize * c;
                for ii in inner.clone() {
                    for (jj, &v) in block[ii * c..(ii + 1) * c].iter().enumerate() {
                        // A zero in a block is fill, not an entry: not multiplied (as in DIA).
                        if v != zero {
                            f(block_row * r + ii, col0 + jj, v);
                        }
                    }
                }
            }
        }
    }
}

impl<T: Scalar> RowSource<T> for Cspr<T> {
    fn nrows(&self) -> usize {
        Cspr::nrows(self)
    }
    #[inline(always)]
    fn visit(&self, rows: Range<usize>, mut f: impl FnMut(usize, usize, T)) {
        // Linear indices are sorted, so the rows' entries are one contiguous run; the row is
        // tracked by comparing with the next row's first index instead of dividing.
        let n = self.ncols() as u64;
        let indices = self.indices();
        let from = indices.partition_point(|&x| x < rows.start as u64 * n);
        let to = indices.partition_point(|&x| x < rows.end as u64 * n);
        let (mut i, mut row_start) = (rows.start, rows.start as u64 * n);
        for (&x, &v) in indices[from..to].iter().zip(&self.values()[from..to]) {
            while x >= row_start + n {
                i += 1;
                row_start += n;
            }
            f(i, (x - row_start) as usize, v);
        }
    }
}

/// Whether a COO matrix's triplets are sorted by row (as [`Csr::to_coo`] writes them).
fn rows_in_order<T: Scalar>(a: &Coo<T>) -> bool {
    a.row_indices().par_windows(2).all(|w| w[0] <= w[1])
}

/// A COO matrix whose triplets are in row order: a row range is a run found by binary search.
struct OrderedCoo<'a, T>(&'a Coo<T>);

impl<T: Scalar> RowSource<T> for OrderedCoo<'_, T> {
    fn nrows(&self) -> usize {
        self.0.nrows()
    }
    #[inline(always)]
    fn visit(&self, rows: Range<usize>, f: impl FnMut(usize, usize, T)) {
        let r = self.0.row_indices();
        let from = r.partition_point(|&i| (i as usize) < rows.start);
        let to = r.partition_point(|&i| (i as usize) < rows.end);
        coo_entries(self.0, from..to, f);
    }
}

/// Calls `f(i, k, a)` for the triplets at positions `positions`.
#[inline]
fn coo_entries<T: Scalar>(a: &Coo<T>, positions: Range<usize>, mut f: impl FnMut(usize, usize, T)) {
    let (r, c, v) = (a.row_indices(), a.col_indices(), a.values());
    for ((&i, &k), &x) in r[positions.clone()]
        .iter()
        .zip(&c[positions.clone()])
        .zip(&v[positions])
    {
        f(i as usize, k as usize, x);
    }
}

impl<T: Scalar> EntrySource<T> for Coo<T> {
    fn nrows(&self) -> usize {
        Coo::nrows(self)
    }
    fn nnz(&self) -> usize {
        self.row_indices().len()
    }
    fn visit_part(&self, part: usize, parts: usize, f: impl FnMut(usize, usize, T)) {
        let nnz = EntrySource::nnz(self);
        coo_entries(self, nnz * part / parts..nnz * (part + 1) / parts, f);
    }
}

impl<T: Scalar> EntrySource<T> for Csc<T> {
    fn nrows(&self) -> usize {
        Csc::nrows(self)
    }
    fn nnz(&self) -> usize {
        self.row_indices().len()
    }
    fn visit_part(&self, part: usize, parts: usize, mut f: impl FnMut(usize, usize, T)) {
        // Parts are runs of whole columns holding about equal numbers of entries.
        let offsets = self.col_offsets();
        let nnz = EntrySource::nnz(self) as u64;
        let start = |p: usize| offsets.partition_point(|&o| o < nnz * p as u64 / parts as u64);
        let (first, last) = (start(part), start(part + 1));
        for k in first.min(self.ncols())..last.min(self.ncols()) {
            let (rows, vals) = self.col(k);
            for (&i, &v) in rows.iter().zip(vals) {
                f(i as usize, k, v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hetsparse_core::{generate, reference, PlusTimes};

    /// CSR times row-major B for column counts with and without whole tiles and a tail
    /// (the conformance suite's row-major cases have 1 and 32 columns), over blocks run in
    /// parallel and serially.
    #[test]
    fn csr_row_major_tiles_and_tails_match_the_reference() {
        let a = generate::uniform::<f64>(700, 300, 9, 7);
        for n in [2, 4, 5, 8, 12, 16, 20, 29, 33] {
            let b = Dense::from_fn(300, n, Layout::RowMajor, |i, j| {
                1.0 + ((i * 7 + j * 3) % 13) as f64 * 0.125
            })
            .unwrap();
            let want = reference::spmm::<f64, PlusTimes>(&a, &b).unwrap();
            for serial in [true, false] {
                let dense = DenseOperand {
                    data: b.data(),
                    rows: 300,
                    n,
                    layout: Layout::RowMajor,
                };
                let c = rows_times_dense::<f64, PlusTimes, _>(
                    &a,
                    &dense,
                    reserved(700 * n, "test").unwrap(),
                    a.nnz(),
                    serial,
                );
                for (k, (g, w)) in c.iter().zip(want.data()).enumerate() {
                    assert!(
                        (g - w).abs() <= 1e-12 * w.abs().max(1.0),
                        "n {n} value {k}: {g} != {w}"
                    );
                }
            }
        }
    }

    #[test]
    fn blocks_give_every_thread_work_and_each_block_enough() {
        // Few long rows (a dense 512 × 512 times 8 columns on 16 threads): several blocks a
        // thread, not one block for the whole product.
        let dense = block_rows(512, 512 * 512, 8, 16);
        assert!(512usize.div_ceil(dense) >= 4 * 16, "{dense} rows a block");
        // Many short rows: the cache bound (the accumulator of 1024 rows × 8 columns).
        assert_eq!(block_rows(1 << 20, 3 << 20, 8, 16), 1024);
        // Little work a row: blocks of at least MIN_BLOCK_WORK multiply-adds.
        let short = block_rows(2000, 6000, 8, 16);
        assert!(
            short as u64 * 3 * 8 >= MIN_BLOCK_WORK,
            "{short} rows a block"
        );
        // Never empty, whatever the counts.
        assert!(block_rows(1, 0, 1, 0) >= 1);
        assert!(block_rows(5, u64::MAX, usize::MAX, 1) >= 1);
    }
}
