use std::ops::Range;

use super::{
    check_len, check_shape, sort_and_sum_lines, validate_compressed, CompressedNames, Coo, Dense,
    HostArray, Layout,
};
use crate::error::{Error, FormatError};
use crate::host;
use crate::scalar::Scalar;

const CSR: CompressedNames = CompressedNames {
    format: "CSR",
    major: "row",
    minor: "column",
};
const CSC: CompressedNames = CompressedNames {
    format: "CSC",
    major: "column",
    minor: "row",
};

/// Compressed sparse rows in canonical form: column indices strictly increasing within each row.
///
/// Row offsets are `u64`, so more than 2^32 entries are representable.
///
/// ```
/// use hetsparse_core::format::Csr;
/// // [[1, 0, 2],
/// //  [0, 3, 0]]
/// let a = Csr::try_new(2, 3, vec![0, 2, 3], vec![0, 2, 1], vec![1.0, 2.0, 3.0])?;
/// assert_eq!(a.nnz(), 3);
/// assert_eq!(a.get(0, 2), Some(2.0));
/// # Ok::<(), hetsparse_core::FormatError>(())
/// ```
///
/// The three arrays are [`HostArray`]s: reference-counted, so clones share them (values are
/// copied when one clone writes them, [`Csr::values_mut`]) and matrices of one pattern with
/// different values (a plan's results, `Backend::upload_values` on the host) share the
/// structure; and they may be memory that someone else owns, read in place
/// ([`Csr::try_from_arrays`] over [`HostArray::from_foreign`] arrays: NumPy's, say).
///
/// A matrix also keeps its transpose once one is asked for ([`Csr::transpose_kept`]): a
/// breadth-first search pulls through Aᵀ level after level.
#[derive(Clone)]
pub struct Csr<T> {
    nrows: usize,
    ncols: usize,
    row_offsets: HostArray<u64>,
    col_indices: HostArray<u32>,
    values: HostArray<T>,
    /// Aᵀ once asked for; shared by clones (which share the arrays), dropped when the values
    /// change.
    transpose: TransposeCache<T>,
}

impl<T: std::fmt::Debug> std::fmt::Debug for Csr<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Csr")
            .field("nrows", &self.nrows)
            .field("ncols", &self.ncols)
            .field("row_offsets", &self.row_offsets)
            .field("col_indices", &self.col_indices)
            .field("values", &self.values)
            .finish()
    }
}

/// Equal shapes and entries; what a matrix keeps besides ([`Csr::transpose_kept`]) is not
/// compared.
impl<T: PartialEq> PartialEq for Csr<T> {
    fn eq(&self, other: &Self) -> bool {
        self.nrows == other.nrows
            && self.ncols == other.ncols
            && self.row_offsets == other.row_offsets
            && self.col_indices == other.col_indices
            && self.values == other.values
    }
}

/// A matrix's transpose as [`Csr::transpose_kept`] keeps it.
enum KeptTranspose<T> {
    /// The matrix equals its transpose.
    Itself,
    /// A transpose built once.
    Built(Csr<T>),
}

/// The slot of a matrix's kept transpose, and the work done so far by products that wanted
/// one ([`Csr::transpose_if_worth_it`]).
struct TransposeCache<T>(std::sync::Arc<TransposeSlot<T>>);

struct TransposeSlot<T> {
    wanted: std::sync::atomic::AtomicU64,
    kept: std::sync::OnceLock<KeptTranspose<T>>,
}

impl<T> Default for TransposeCache<T> {
    fn default() -> Self {
        TransposeCache(std::sync::Arc::new(TransposeSlot {
            wanted: std::sync::atomic::AtomicU64::new(0),
            kept: std::sync::OnceLock::new(),
        }))
    }
}

impl<T> Clone for TransposeCache<T> {
    fn clone(&self) -> Self {
        TransposeCache(self.0.clone())
    }
}

impl<T: Scalar> Csr<T> {
    /// Builds a CSR matrix from canonical arrays, checking every invariant.
    pub fn try_new(
        nrows: usize,
        ncols: usize,
        row_offsets: Vec<u64>,
        col_indices: Vec<u32>,
        values: Vec<T>,
    ) -> Result<Self, FormatError> {
        Self::check_parts(CSR, nrows, ncols, &row_offsets, &col_indices, &values, true)?;
        Ok(Csr {
            nrows,
            ncols,
            row_offsets: HostArray::from(row_offsets),
            col_indices: HostArray::from(col_indices),
            values: HostArray::from(values),
            transpose: TransposeCache::default(),
        })
    }

    /// Builds a CSR matrix from rows whose column indices may be unsorted and repeated: each row
    /// is sorted and repeated entries are summed. Offsets and bounds are still checked.
    pub fn try_from_unsorted(
        nrows: usize,
        ncols: usize,
        row_offsets: Vec<u64>,
        mut col_indices: Vec<u32>,
        mut values: Vec<T>,
    ) -> Result<Self, FormatError> {
        Self::check_parts(
            CSR,
            nrows,
            ncols,
            &row_offsets,
            &col_indices,
            &values,
            false,
        )?;
        let row_offsets = sort_and_sum_lines(&row_offsets, &mut col_indices, &mut values);
        Ok(Csr {
            nrows,
            ncols,
            row_offsets: HostArray::from(row_offsets),
            col_indices: HostArray::from(col_indices),
            values: HostArray::from(values),
            transpose: TransposeCache::default(),
        })
    }

    /// Builds a CSR matrix from canonical arrays wherever they are stored (owned vectors,
    /// shared ones, or foreign memory: [`HostArray::from_foreign`]), checking every invariant
    /// that [`Csr::try_new`] checks, in a pass that only reads them (in parallel on large
    /// matrices). Nothing is copied: the matrix reads the arrays in place.
    ///
    /// ```
    /// use hetsparse_core::format::{Csr, HostArray};
    /// let offsets = HostArray::from(vec![0u64, 1, 2]);
    /// let a = Csr::try_from_arrays(2, 2, offsets.clone(), vec![1].into(), vec![5.0].into());
    /// assert!(a.is_err()); // two rows' offsets end at 2: one column index is too few
    /// let a = Csr::try_from_arrays(2, 2, offsets, vec![1, 0].into(), vec![5.0, 6.0].into())?;
    /// assert_eq!(a.get(1, 0), Some(6.0));
    /// # Ok::<(), hetsparse_core::FormatError>(())
    /// ```
    pub fn try_from_arrays(
        nrows: usize,
        ncols: usize,
        row_offsets: HostArray<u64>,
        col_indices: HostArray<u32>,
        values: HostArray<T>,
    ) -> Result<Self, FormatError> {
        Self::check_parts(CSR, nrows, ncols, &row_offsets, &col_indices, &values, true)?;
        Ok(Csr {
            nrows,
            ncols,
            row_offsets,
            col_indices,
            values,
            transpose: TransposeCache::default(),
        })
    }

    /// Builds a CSR matrix without checking.
    ///
    /// # Safety
    /// The arrays must satisfy every invariant [`Csr::try_new`] checks: kernels index with them
    /// without bounds checks. Debug builds check anyway.
    pub unsafe fn from_parts_unchecked(
        nrows: usize,
        ncols: usize,
        row_offsets: Vec<u64>,
        col_indices: Vec<u32>,
        values: Vec<T>,
    ) -> Self {
        debug_assert_eq!(
            Self::check_parts(CSR, nrows, ncols, &row_offsets, &col_indices, &values, true),
            Ok(())
        );
        Csr {
            nrows,
            ncols,
            row_offsets: HostArray::from(row_offsets),
            col_indices: HostArray::from(col_indices),
            values: HostArray::from(values),
            transpose: TransposeCache::default(),
        }
    }

    fn check_parts(
        names: CompressedNames,
        nrows: usize,
        ncols: usize,
        row_offsets: &[u64],
        col_indices: &[u32],
        values: &[T],
        canonical: bool,
    ) -> Result<(), FormatError> {
        check_shape(names.format, nrows, ncols)?;
        check_len(
            names.format,
            "values",
            col_indices.len() as u64,
            values.len(),
        )?;
        validate_compressed(names, nrows, ncols, row_offsets, col_indices, canonical)
    }

    /// An `nrows × ncols` matrix with no entries. Its `nrows + 1` row offsets are allocated
    /// fallibly: [`Error::OutOfMemory`] when the host cannot hold them.
    pub fn zeros(nrows: usize, ncols: usize) -> Result<Self, Error> {
        check_shape("CSR", nrows, ncols)?;
        Ok(Csr {
            nrows,
            ncols,
            row_offsets: HostArray::from(host::try_filled(nrows + 1, 0, "CSR row offsets")?),
            col_indices: HostArray::default(),
            values: HostArray::default(),
            transpose: TransposeCache::default(),
        })
    }

    /// The `n × n` identity ([`Error::OutOfMemory`] when the host cannot hold it).
    pub fn identity(n: usize) -> Result<Self, Error> {
        check_shape("CSR", n, n)?;
        let mut row_offsets = host::try_with_capacity(n + 1, "CSR row offsets")?;
        row_offsets.extend(0..=n as u64);
        let mut col_indices = host::try_with_capacity(n, "CSR column indices")?;
        col_indices.extend(0..n as u32);
        Ok(Csr {
            nrows: n,
            ncols: n,
            row_offsets: HostArray::from(row_offsets),
            col_indices: HostArray::from(col_indices),
            values: HostArray::from(host::try_filled(n, T::from_f64(1.0), "CSR values")?),
            transpose: TransposeCache::default(),
        })
    }

    /// Number of rows.
    pub fn nrows(&self) -> usize {
        self.nrows
    }
    /// Number of columns.
    pub fn ncols(&self) -> usize {
        self.ncols
    }
    /// `(rows, columns)`.
    pub fn shape(&self) -> (usize, usize) {
        (self.nrows, self.ncols)
    }
    /// Number of stored entries (explicit zeros included).
    pub fn nnz(&self) -> u64 {
        self.col_indices.len() as u64
    }
    /// Whether `other` is this matrix or a clone of it, whose arrays it shares: a test of
    /// identity that reads no entry (equal matrices in arrays of their own are not the same).
    /// A product `A · A` whose operands are one matrix can then read, or upload, it once.
    pub fn shares_arrays(&self, other: &Csr<T>) -> bool {
        fn same<X>(x: &[X], y: &[X]) -> bool {
            std::ptr::eq(x.as_ptr(), y.as_ptr()) && x.len() == y.len()
        }
        self.shape() == other.shape()
            && same(&self.row_offsets, &other.row_offsets)
            && same(&self.col_indices, &other.col_indices)
            && same(&self.values, &other.values)
    }
    /// Row offsets, `nrows + 1` of them.
    pub fn row_offsets(&self) -> &[u64] {
        &self.row_offsets
    }
    /// Column indices, row by row.
    pub fn col_indices(&self) -> &[u32] {
        &self.col_indices
    }
    /// Stored values, row by row.
    pub fn values(&self) -> &[T] {
        &self.values
    }
    /// Stored values, mutable (the structure stays fixed). Values that are shared with a
    /// clone or that are someone else's memory are copied first (copy on write).
    pub fn values_mut(&mut self) -> &mut [T] {
        // A kept transpose has the old values (and a clone may keep using it).
        self.transpose = TransposeCache::default();
        self.values.make_mut()
    }
    /// The three arrays, as stored: `(row_offsets, col_indices, values)` (clone one to share
    /// it, or ask whether it is foreign memory).
    pub fn arrays(&self) -> (&HostArray<u64>, &HostArray<u32>, &HostArray<T>) {
        (&self.row_offsets, &self.col_indices, &self.values)
    }
    /// Row `i`'s column indices and values. Panics if `i >= nrows` (a programming error).
    #[inline]
    pub fn row(&self, i: usize) -> (&[u32], &[T]) {
        let (s, e) = (
            self.row_offsets[i] as usize,
            self.row_offsets[i + 1] as usize,
        );
        (&self.col_indices[s..e], &self.values[s..e])
    }
    /// Number of entries in row `i`.
    pub fn row_nnz(&self, i: usize) -> u64 {
        self.row_offsets[i + 1] - self.row_offsets[i]
    }
    /// The value at `(i, j)` if it is stored.
    pub fn get(&self, i: usize, j: usize) -> Option<T> {
        if i >= self.nrows || j >= self.ncols {
            return None;
        }
        let (cols, vals) = self.row(i);
        cols.binary_search(&(j as u32)).ok().map(|k| vals[k])
    }
    /// This matrix's structure with other `values` (one per stored entry), sharing the
    /// structure instead of copying it.
    ///
    /// ```
    /// use hetsparse_core::format::Csr;
    /// let a = Csr::try_new(2, 2, vec![0, 1, 2], vec![1, 0], vec![1.0, 2.0])?;
    /// let b = a.with_values(vec![5.0, 6.0])?;
    /// assert_eq!(b.get(0, 1), Some(5.0));
    /// assert!(a.with_values(vec![1.0]).is_err());
    /// # Ok::<(), hetsparse_core::FormatError>(())
    /// ```
    pub fn with_values(&self, values: Vec<T>) -> Result<Csr<T>, FormatError> {
        check_len(
            CSR.format,
            "values",
            self.col_indices.len() as u64,
            values.len(),
        )?;
        Ok(Csr {
            nrows: self.nrows,
            ncols: self.ncols,
            row_offsets: self.row_offsets.clone(),
            col_indices: self.col_indices.clone(),
            values: HostArray::from(values),
            transpose: TransposeCache::default(),
        })
    }

    /// A matrix over arrays as they are stored (shared or foreign), without checking.
    ///
    /// # Safety
    /// The arrays must satisfy every invariant [`Csr::try_new`] checks (a structure canonical
    /// for `nrows × ncols`, as many values as column indices): kernels index with them without
    /// bounds checks. Debug builds check anyway.
    pub unsafe fn from_arrays_unchecked(
        nrows: usize,
        ncols: usize,
        row_offsets: HostArray<u64>,
        col_indices: HostArray<u32>,
        values: HostArray<T>,
    ) -> Self {
        debug_assert_eq!(
            Self::check_parts(CSR, nrows, ncols, &row_offsets, &col_indices, &values, true),
            Ok(())
        );
        Csr {
            nrows,
            ncols,
            row_offsets,
            col_indices,
            values,
            transpose: TransposeCache::default(),
        }
    }

    /// `(nrows, ncols, row_offsets, col_indices, values)`: each array handed over as it is when
    /// this matrix owns it alone, copied when it is shared with another matrix or is someone
    /// else's memory.
    pub fn into_parts(self) -> (usize, usize, Vec<u64>, Vec<u32>, Vec<T>) {
        (
            self.nrows,
            self.ncols,
            self.row_offsets.into_vec(),
            self.col_indices.into_vec(),
            self.values.into_vec(),
        )
    }

    /// Rows `range` as a matrix of `range.len()` rows.
    pub fn rows(&self, range: Range<usize>) -> Result<Self, Error> {
        if range.start > range.end || range.end > self.nrows {
            return Err(Error::InvalidArgument(format!(
                "row range {range:?} is outside a matrix of {} rows",
                self.nrows
            )));
        }
        let (s, e) = (
            self.row_offsets[range.start] as usize,
            self.row_offsets[range.end] as usize,
        );
        let base = self.row_offsets[range.start];
        Ok(Csr {
            nrows: range.len(),
            ncols: self.ncols,
            row_offsets: HostArray::from(
                self.row_offsets[range.start..=range.end]
                    .iter()
                    .map(|o| o - base)
                    .collect::<Vec<u64>>(),
            ),
            col_indices: HostArray::from(self.col_indices[s..e].to_vec()),
            values: HostArray::from(self.values[s..e].to_vec()),
            transpose: TransposeCache::default(),
        })
    }

    /// Columns `range` as a matrix of `range.len()` columns, indices shifted to start at 0.
    pub fn column_panel(&self, range: Range<usize>) -> Result<Self, Error> {
        if range.start > range.end || range.end > self.ncols {
            return Err(Error::InvalidArgument(format!(
                "column range {range:?} is outside a matrix of {} columns",
                self.ncols
            )));
        }
        if range.start == 0 && range.end == self.ncols {
            return Ok(self.clone());
        }
        use rayon::prelude::*;
        /// Rows per parallel task.
        const ROWS: usize = 1 << 12;
        let (lo, hi) = (range.start as u32, range.end as u32);
        // Where each row's entries in the range lie, as positions in the row.
        let part = |i: usize| {
            let cols = self.row(i).0;
            (
                cols.partition_point(|&c| c < lo),
                cols.partition_point(|&c| c < hi),
            )
        };
        let n = self.nrows;
        let mut row_offsets: Vec<u64> = host::try_filled(n + 1, 0, "column panel row offsets")?;
        // Each row's count, then the offsets: sums within each piece of rows, the pieces'
        // starts, and those added back.
        row_offsets[1..]
            .par_chunks_mut(ROWS)
            .enumerate()
            .for_each(|(p, out)| {
                let mut at = 0;
                for (k, slot) in out.iter_mut().enumerate() {
                    let (a, b) = part(p * ROWS + k);
                    at += (b - a) as u64;
                    *slot = at;
                }
            });
        let mut base = 0;
        let starts: Vec<u64> = row_offsets[1..]
            .chunks(ROWS)
            .map(|piece| {
                let start = base;
                base += piece.last().copied().unwrap_or(0);
                start
            })
            .collect();
        row_offsets[1..]
            .par_chunks_mut(ROWS)
            .zip(&starts)
            .for_each(|(out, &start)| out.iter_mut().for_each(|o| *o += start));
        let nnz = host::entry_count(base, "a column panel's entries")?;
        let mut col_indices: Vec<u32> = host::try_with_capacity(nnz, "column panel indices")?;
        let mut values: Vec<T> = host::try_with_capacity(nnz, "column panel values")?;
        {
            let mut cols_left = &mut col_indices.spare_capacity_mut()[..nnz];
            let mut vals_left = &mut values.spare_capacity_mut()[..nnz];
            let mut pieces = Vec::with_capacity(starts.len());
            for (p, &start) in starts.iter().enumerate() {
                let end = row_offsets[((p + 1) * ROWS).min(n)];
                let len = (end - start) as usize;
                let (c, rest_c) = std::mem::take(&mut cols_left).split_at_mut(len);
                let (v, rest_v) = std::mem::take(&mut vals_left).split_at_mut(len);
                (cols_left, vals_left) = (rest_c, rest_v);
                pieces.push((p, c, v));
            }
            pieces.into_par_iter().for_each(|(p, c, v)| {
                let mut at = 0;
                for i in p * ROWS..((p + 1) * ROWS).min(n) {
                    let (a, b) = part(i);
                    let (cols, vals) = self.row(i);
                    for ((slot, value), (&col, &val)) in c[at..at + b - a]
                        .iter_mut()
                        .zip(&mut v[at..at + b - a])
                        .zip(cols[a..b].iter().zip(&vals[a..b]))
                    {
                        slot.write(col - lo);
                        value.write(val);
                    }
                    at += b - a;
                }
            });
        }
        // SAFETY: the pieces above cover positions 0..nnz once each (piece p is
        // `row_offsets[p·ROWS]..row_offsets[min((p+1)·ROWS, n)]`, and those offsets were summed
        // from the same `part` counts its rows write), and every position was written.
        unsafe {
            col_indices.set_len(nnz);
            values.set_len(nnz);
        }
        Ok(Csr {
            nrows: self.nrows,
            ncols: range.len(),
            row_offsets: HostArray::from(row_offsets),
            col_indices: HostArray::from(col_indices),
            values: HostArray::from(values),
            transpose: TransposeCache::default(),
        })
    }

    /// The transpose (a counting sort, so rows come out sorted). Its `ncols + 1` row offsets
    /// are allocated fallibly: [`Error::OutOfMemory`] when the host cannot hold them.
    pub fn transpose(&self) -> Result<Self, Error> {
        let nnz = self.col_indices.len();
        let mut counts = host::try_filled(self.ncols + 1, 0u64, "CSR row offsets of a transpose")?;
        for &j in self.col_indices.iter() {
            counts[j as usize + 1] += 1;
        }
        for j in 0..self.ncols {
            counts[j + 1] += counts[j];
        }
        let mut row_offsets =
            host::try_with_capacity(counts.len(), "CSR row offsets of a transpose")?;
        row_offsets.extend_from_slice(&counts);
        let mut next = counts;
        let mut col_indices = host::try_filled(nnz, 0u32, "CSR column indices")?;
        let mut values = host::try_filled(nnz, T::zero(), "CSR values")?;
        for i in 0..self.nrows {
            let (cols, vals) = self.row(i);
            for (&j, &v) in cols.iter().zip(vals) {
                let dst = next[j as usize] as usize;
                col_indices[dst] = i as u32;
                values[dst] = v;
                next[j as usize] += 1;
            }
        }
        Ok(Csr {
            nrows: self.ncols,
            ncols: self.nrows,
            row_offsets: HostArray::from(row_offsets),
            col_indices: HostArray::from(col_indices),
            values: HostArray::from(values),
            transpose: TransposeCache::default(),
        })
    }

    /// `Aᵀ`, found on first use and kept with the matrix (its clones share it): the matrix
    /// itself where it equals its transpose (a symmetric matrix, an undirected graph: the
    /// transpose, built in parallel, is compared with it and dropped, so nothing is kept
    /// twice), else that transpose. A product that reads
    /// A by columns call after call (a pulled vxm, a breadth-first search's levels) pays for
    /// it once. Writing the values ([`Csr::values_mut`]) drops it.
    pub fn transpose_kept(&self) -> Result<&Csr<T>, Error> {
        let slot = &self.transpose.0;
        if slot.kept.get().is_none() {
            let _span =
                tracing::debug_span!("csr_transpose_kept", rows = self.nrows, nnz = self.nnz())
                    .entered();
            let transposed = self.transpose_in_parallel()?;
            let kept = if transposed == *self {
                KeptTranspose::Itself
            } else {
                KeptTranspose::Built(transposed)
            };
            // Another thread may have kept its own meanwhile: the same matrix either way.
            let _ = slot.kept.set(kept);
        }
        Ok(match slot.kept.get() {
            Some(KeptTranspose::Built(t)) => t,
            _ => self,
        })
    }

    /// [`Csr::transpose_kept`] once it pays: a product that could read Aᵀ but can do without
    /// it (a pushed vxm instead of a pulled one) says how much work it does without
    /// (`work`, in entries of A read), and gets the transpose once the work of such products
    /// on this matrix (and its clones) adds up to A's entries, about what building it costs;
    /// `None` before. As renting before buying: the products never
    /// pay more than about twice what they would had they known their future, an operand
    /// seen once (converted for one call, say) is never transposed for it, and a matrix read
    /// again and again (the levels of breadth-first searches) is, once.
    pub fn transpose_if_worth_it(&self, work: u64) -> Result<Option<&Csr<T>>, Error> {
        use std::sync::atomic::Ordering;
        let slot = &self.transpose.0;
        if slot.kept.get().is_none() {
            let before = slot.wanted.fetch_add(work, Ordering::Relaxed);
            if before.saturating_add(work) < self.nnz().max(1) {
                return Ok(None);
            }
        }
        self.transpose_kept().map(Some)
    }

    /// The transpose, as [`Csr::transpose`] makes it, by every thread of the pool: each takes
    /// a range of A's columns (Aᵀ's rows), counts them over all of A, then writes its own
    /// rows of Aᵀ, so no two threads write one place and each row comes out sorted. Each
    /// thread reads all of A's columns in order (a stream) and writes only its share.
    fn transpose_in_parallel(&self) -> Result<Self, Error> {
        use rayon::prelude::*;
        let (nrows, ncols) = (self.nrows, self.ncols);
        let nnz = self.col_indices.len();
        let parts = rayon::current_num_threads().clamp(1, ncols.max(1));
        if parts == 1 || nnz < 1 << 16 {
            return self.transpose();
        }
        // Column ranges of about equal width for the count.
        let even: Vec<Range<usize>> = (0..parts)
            .map(|p| p * ncols / parts..(p + 1) * ncols / parts)
            .collect();
        let mut row_offsets = host::try_filled(ncols + 1, 0u64, "CSR row offsets of a transpose")?;
        host::split_mut(&mut row_offsets[1..], &even)
            .into_par_iter()
            .zip(even.par_iter())
            .for_each(|(piece, range)| {
                for &j in self.col_indices.iter() {
                    let j = j as usize;
                    if range.contains(&j) {
                        piece[j - range.start] += 1;
                    }
                }
            });
        for j in 0..ncols {
            row_offsets[j + 1] += row_offsets[j];
        }
        // Column ranges of about equal entries for the writes.
        let mut cuts = vec![0usize];
        for p in 1..parts {
            let target = (nnz as u64 * p as u64 / parts as u64).max(row_offsets[cuts[p - 1]]);
            cuts.push(row_offsets.partition_point(|&o| o < target).min(ncols));
        }
        cuts.push(ncols);
        let columns: Vec<Range<usize>> = cuts.windows(2).map(|w| w[0]..w[1]).collect();
        let spans: Vec<Range<usize>> = columns
            .iter()
            .map(|c| row_offsets[c.start] as usize..row_offsets[c.end] as usize)
            .collect();
        let mut col_indices: Vec<u32> = host::try_with_capacity(nnz, "CSR column indices")?;
        let mut values: Vec<T> = host::try_with_capacity(nnz, "CSR values")?;
        let index_parts = host::split_mut(&mut col_indices.spare_capacity_mut()[..nnz], &spans);
        let value_parts = host::split_mut(&mut values.spare_capacity_mut()[..nnz], &spans);
        index_parts
            .into_par_iter()
            .zip(value_parts)
            .zip(columns.par_iter())
            .for_each(|((index_part, value_part), range)| {
                let base = row_offsets[range.start];
                let mut next: Vec<u64> = row_offsets[range.clone()]
                    .iter()
                    .map(|&o| o - base)
                    .collect();
                for i in 0..nrows {
                    let (cols, vals) = self.row(i);
                    for (&j, &v) in cols.iter().zip(vals) {
                        let j = j as usize;
                        if range.contains(&j) {
                            let at = next[j - range.start] as usize;
                            index_part[at].write(i as u32);
                            value_part[at].write(v);
                            next[j - range.start] += 1;
                        }
                    }
                }
            });
        // SAFETY: the spans cover positions 0..nnz once each, and each range wrote every
        // position of its span: as many entries as were counted for its columns.
        unsafe {
            col_indices.set_len(nnz);
            values.set_len(nnz);
        }
        Ok(Csr {
            nrows: ncols,
            ncols: nrows,
            row_offsets: HostArray::from(row_offsets),
            col_indices: HostArray::from(col_indices),
            values: HostArray::from(values),
            transpose: TransposeCache::default(),
        })
    }

    /// Drops stored entries whose value is exactly zero.
    pub fn without_explicit_zeros(&self) -> Self {
        let zero = T::zero();
        let mut row_offsets = Vec::with_capacity(self.nrows + 1);
        row_offsets.push(0);
        let mut col_indices = Vec::with_capacity(self.col_indices.len());
        let mut values = Vec::with_capacity(self.values.len());
        for i in 0..self.nrows {
            let (cols, vals) = self.row(i);
            for (&j, &v) in cols.iter().zip(vals) {
                if v != zero {
                    col_indices.push(j);
                    values.push(v);
                }
            }
            row_offsets.push(col_indices.len() as u64);
        }
        Csr {
            nrows: self.nrows,
            ncols: self.ncols,
            row_offsets: HostArray::from(row_offsets),
            col_indices: HostArray::from(col_indices),
            values: HostArray::from(values),
            transpose: TransposeCache::default(),
        }
    }

    /// The same matrix as triplets, row by row.
    pub fn to_coo(&self) -> Coo<T> {
        let mut rows = Vec::with_capacity(self.col_indices.len());
        for i in 0..self.nrows {
            rows.extend(std::iter::repeat_n(i as u32, self.row_nnz(i) as usize));
        }
        Coo::from_sorted_parts(
            self.nrows,
            self.ncols,
            rows,
            self.col_indices.to_vec(),
            self.values.to_vec(),
        )
    }

    /// A dense copy ([`Error::OutOfMemory`] when the host cannot hold `rows × columns` values).
    pub fn to_dense(&self, layout: Layout) -> Result<Dense<T>, Error> {
        let mut d = Dense::zeros(self.nrows, self.ncols, layout)?;
        for i in 0..self.nrows {
            let (cols, vals) = self.row(i);
            for (&j, &v) in cols.iter().zip(vals) {
                d.set(i, j as usize, v);
            }
        }
        Ok(d)
    }

    /// The stored entries of a dense matrix that are not zero; [`Error::OutOfMemory`] when the
    /// host cannot hold the `rows + 1` row offsets.
    pub fn from_dense(d: &Dense<T>) -> Result<Self, Error> {
        let zero = T::zero();
        let mut row_offsets = host::try_with_capacity(d.nrows() + 1, "CSR row offsets")?;
        row_offsets.push(0);
        let mut col_indices = Vec::new();
        let mut values = Vec::new();
        for i in 0..d.nrows() {
            for j in 0..d.ncols() {
                let v = d.get(i, j);
                if v != zero {
                    col_indices.push(j as u32);
                    values.push(v);
                }
            }
            row_offsets.push(col_indices.len() as u64);
        }
        Ok(Csr {
            nrows: d.nrows(),
            ncols: d.ncols(),
            row_offsets: HostArray::from(row_offsets),
            col_indices: HostArray::from(col_indices),
            values: HostArray::from(values),
            transpose: TransposeCache::default(),
        })
    }

    /// Converts every value to another scalar type (through its real and imaginary parts).
    pub fn map_scalar<U: Scalar>(&self) -> Csr<U> {
        Csr {
            nrows: self.nrows,
            ncols: self.ncols,
            row_offsets: self.row_offsets.clone(),
            col_indices: self.col_indices.clone(),
            values: HostArray::from(
                self.values
                    .iter()
                    .map(|v| {
                        let (re, im) = v.to_parts();
                        U::from_parts_lossy(re, im)
                    })
                    .collect::<Vec<U>>(),
            ),
            transpose: TransposeCache::default(),
        }
    }
}

/// Compressed sparse columns in canonical form: row indices strictly increasing within each
/// column.
#[derive(Clone, Debug, PartialEq)]
pub struct Csc<T> {
    /// Stored as the CSR matrix of the transpose: same arrays, roles swapped.
    transposed: Csr<T>,
}

impl<T: Scalar> Csc<T> {
    /// Builds a CSC matrix from canonical arrays, checking every invariant.
    pub fn try_new(
        nrows: usize,
        ncols: usize,
        col_offsets: Vec<u64>,
        row_indices: Vec<u32>,
        values: Vec<T>,
    ) -> Result<Self, FormatError> {
        check_shape(CSC.format, nrows, ncols)?;
        Csr::check_parts(CSC, ncols, nrows, &col_offsets, &row_indices, &values, true)?;
        Ok(Csc {
            transposed: Csr {
                nrows: ncols,
                ncols: nrows,
                row_offsets: HostArray::from(col_offsets),
                col_indices: HostArray::from(row_indices),
                values: HostArray::from(values),
                transpose: TransposeCache::default(),
            },
        })
    }

    /// Builds a CSC matrix whose row indices may be unsorted and repeated (summed).
    pub fn try_from_unsorted(
        nrows: usize,
        ncols: usize,
        col_offsets: Vec<u64>,
        mut row_indices: Vec<u32>,
        mut values: Vec<T>,
    ) -> Result<Self, FormatError> {
        check_shape(CSC.format, nrows, ncols)?;
        Csr::check_parts(
            CSC,
            ncols,
            nrows,
            &col_offsets,
            &row_indices,
            &values,
            false,
        )?;
        let col_offsets = sort_and_sum_lines(&col_offsets, &mut row_indices, &mut values);
        Ok(Csc {
            transposed: Csr {
                nrows: ncols,
                ncols: nrows,
                row_offsets: HostArray::from(col_offsets),
                col_indices: HostArray::from(row_indices),
                values: HostArray::from(values),
                transpose: TransposeCache::default(),
            },
        })
    }

    /// Number of rows.
    pub fn nrows(&self) -> usize {
        self.transposed.ncols()
    }
    /// Number of columns.
    pub fn ncols(&self) -> usize {
        self.transposed.nrows()
    }
    /// `(rows, columns)`.
    pub fn shape(&self) -> (usize, usize) {
        (self.nrows(), self.ncols())
    }
    /// Number of stored entries.
    pub fn nnz(&self) -> u64 {
        self.transposed.nnz()
    }
    /// Column offsets, `ncols + 1` of them.
    pub fn col_offsets(&self) -> &[u64] {
        &self.transposed.row_offsets
    }
    /// Row indices, column by column.
    pub fn row_indices(&self) -> &[u32] {
        &self.transposed.col_indices
    }
    /// Stored values, column by column.
    pub fn values(&self) -> &[T] {
        &self.transposed.values
    }
    /// Column `j`'s row indices and values.
    pub fn col(&self, j: usize) -> (&[u32], &[T]) {
        self.transposed.row(j)
    }
    /// The same matrix in CSR ([`Error::OutOfMemory`] when the host cannot hold it).
    pub fn to_csr(&self) -> Result<Csr<T>, Error> {
        self.transposed.transpose()
    }
    /// A CSR matrix in CSC ([`Error::OutOfMemory`] when the host cannot hold it).
    pub fn from_csr(a: &Csr<T>) -> Result<Self, Error> {
        Ok(Csc {
            transposed: a.transpose()?,
        })
    }
    /// The CSR matrix with the same arrays: the transpose of this matrix, at no cost.
    pub fn into_transpose(self) -> Csr<T> {
        self.transposed
    }
    /// The CSC matrix with the arrays of `transposed` (its column offsets are `transposed`'s
    /// row offsets): the transpose of `transposed`, at no cost.
    pub fn from_transpose(transposed: Csr<T>) -> Self {
        Csc { transposed }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// The parallel transpose equals the serial one on a skewed (R-MAT) matrix, a wide
    /// rectangular one with empty columns and a tall one, over pools of 2, 3 and 7 threads.
    #[test]
    fn the_parallel_transpose_is_the_serial_one() {
        let skewed = crate::generate::rmat::<f64>(14, 8, 1);
        let wide = crate::generate::uniform::<f64>(3000, 90_000, 30, 2);
        let tall = crate::generate::uniform::<f64>(70_000, 500, 3, 3);
        for threads in [2, 3, 7] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            for m in [&skewed, &wide, &tall] {
                assert!(m.nnz() >= 1 << 16);
                let got = pool.install(|| m.transpose_in_parallel()).unwrap();
                assert_eq!(
                    got,
                    m.transpose().unwrap(),
                    "{threads} threads, {:?}",
                    m.shape()
                );
            }
        }
    }

    /// A symmetric matrix is kept as its own transpose (nothing built, clones share the
    /// answer), any other as a built transpose equal to `transpose()`; a symmetric pattern
    /// with unequal values, a missing mirror, one more entry below the diagonal than above and
    /// a non-square matrix are not symmetric; writing the values drops what was kept; the
    /// transpose is handed out by `transpose_if_worth_it` once the work asked adds up to the
    /// matrix's entries.
    #[test]
    fn the_transpose_is_kept_and_is_the_matrix_itself_where_symmetric() {
        let symmetric = Csr::try_new(
            3,
            3,
            vec![0, 2, 4, 5],
            vec![0, 1, 0, 2, 1],
            vec![4.0, 1.0, 1.0, 2.0, 2.0],
        )
        .unwrap();
        assert!(symmetric
            .clone()
            .transpose_if_worth_it(3)
            .unwrap()
            .is_none());
        assert!(symmetric.transpose_if_worth_it(1).unwrap().is_none());
        let again = symmetric
            .transpose_if_worth_it(1)
            .unwrap()
            .expect("five entries' work asked");
        assert!(std::ptr::eq(again, &symmetric));
        let clone = symmetric.clone();
        assert!(std::ptr::eq(clone.transpose_kept().unwrap(), &clone));
        // (0, 1) = 1 but (1, 0) = 3.
        let unequal = Csr::try_new(
            3,
            3,
            vec![0, 2, 4, 5],
            vec![0, 1, 0, 2, 1],
            vec![4.0, 1.0, 3.0, 2.0, 2.0],
        )
        .unwrap();
        // (0, 1) without (1, 0); (1, 0) and (2, 0) below against (0, 1) above.
        let missing = Csr::try_new(3, 3, vec![0, 1, 2, 3], vec![1, 2, 0], vec![1.0; 3]).unwrap();
        let extra_below =
            Csr::try_new(3, 3, vec![0, 1, 2, 3], vec![1, 0, 0], vec![1.0; 3]).unwrap();
        let wide = Csr::try_new(2, 3, vec![0, 1, 2], vec![2, 0], vec![1.0, 2.0]).unwrap();
        for m in [&unequal, &missing, &extra_below, &wide, &sample()] {
            let kept = m.transpose_kept().unwrap();
            assert!(!std::ptr::eq(kept, m));
            assert_eq!(*kept, m.transpose().unwrap());
            // Kept: asked again, the same one.
            assert!(std::ptr::eq(m.transpose_kept().unwrap(), kept));
        }
        let mut written = symmetric.clone();
        written.values_mut()[1] = 5.0;
        let kept = written.transpose_kept().unwrap();
        assert!(!std::ptr::eq(kept, &written));
        assert_eq!(kept.get(1, 0), Some(5.0));
        assert!(std::ptr::eq(
            symmetric.transpose_kept().unwrap(),
            &symmetric
        ));
    }

    fn sample() -> Csr<f64> {
        Csr::try_new(
            3,
            4,
            vec![0, 2, 2, 5],
            vec![0, 3, 0, 1, 2],
            vec![1.0, 2.0, 3.0, 4.0, 5.0],
        )
        .unwrap()
    }

    #[test]
    fn only_a_clone_shares_the_arrays() {
        let m = sample();
        assert!(m.shares_arrays(&m));
        assert!(m.shares_arrays(&m.clone()));
        let copy = Csr::try_new(
            m.nrows(),
            m.ncols(),
            m.row_offsets().to_vec(),
            m.col_indices().to_vec(),
            m.values().to_vec(),
        )
        .unwrap();
        assert_eq!(copy, m);
        assert!(!m.shares_arrays(&copy));
        let empty = |n| Csr::<f64>::try_new(n, n, vec![0; n + 1], vec![], vec![]).unwrap();
        assert!(!empty(3).shares_arrays(&empty(3)));
    }

    #[test]
    fn rejects_each_broken_invariant() {
        let e = Csr::<f64>::try_new(2, 2, vec![0, 1], vec![0], vec![1.0]).unwrap_err();
        assert!(matches!(
            e,
            FormatError::LengthMismatch {
                array: "offsets",
                ..
            }
        ));
        let e = Csr::<f64>::try_new(2, 2, vec![0, 1, 1], vec![0], vec![]).unwrap_err();
        assert!(matches!(
            e,
            FormatError::LengthMismatch {
                array: "values",
                ..
            }
        ));
        let e = Csr::try_new(2, 2, vec![0, 2, 1], vec![0, 1], vec![1.0, 1.0]).unwrap_err();
        assert!(matches!(e, FormatError::OffsetsEnds { last: 1, .. }));
        let e = Csr::try_new(2, 2, vec![1, 1, 2], vec![0, 1], vec![1.0, 1.0]).unwrap_err();
        assert!(matches!(e, FormatError::OffsetsEnds { first: 1, .. }));
        let e = Csr::try_new(3, 2, vec![0, 2, 1, 2], vec![0, 1], vec![1.0, 1.0]).unwrap_err();
        assert!(matches!(
            e,
            FormatError::OffsetsNotMonotone { position: 2, .. }
        ));
        let e = Csr::try_new(1, 2, vec![0, 1], vec![2], vec![1.0]).unwrap_err();
        assert!(matches!(
            e,
            FormatError::IndexOutOfBounds {
                axis: "column",
                index: 2,
                bound: 2,
                ..
            }
        ));
        let e = Csr::try_new(1, 3, vec![0, 2], vec![2, 1], vec![1.0, 1.0]).unwrap_err();
        assert!(matches!(e, FormatError::Unsorted { line: 0, .. }));
        let e = Csr::try_new(1, 3, vec![0, 2], vec![1, 1], vec![1.0, 1.0]).unwrap_err();
        assert!(matches!(
            e,
            FormatError::Duplicate {
                row: 0,
                col: 1,
                position: 1,
                ..
            }
        ));
        let e = Csr::<f64>::zeros(1, MAX_DIM_PLUS).unwrap_err();
        assert!(matches!(
            e,
            Error::Format(FormatError::ShapeOverflow { .. })
        ));
        assert!(e.to_string().contains("u32::MAX"));
    }

    const MAX_DIM_PLUS: usize = super::super::MAX_DIMENSION + 1;

    #[test]
    fn large_matrices_are_validated_in_parallel_and_report_the_first_error() {
        let n = 200_000usize;
        let offsets: Vec<u64> = (0..=n as u64).collect();
        let mut cols: Vec<u32> = vec![0; n];
        cols[150_000] = 7;
        cols[190_000] = 9;
        let e = Csr::try_new(n, 5, offsets, cols, vec![1.0f32; n]).unwrap_err();
        assert!(matches!(
            e,
            FormatError::IndexOutOfBounds {
                position: 150_000,
                index: 7,
                ..
            }
        ));
    }

    #[test]
    fn unsorted_rows_are_sorted_and_duplicates_summed() {
        let a = Csr::try_from_unsorted(
            2,
            3,
            vec![0, 3, 4],
            vec![2, 0, 2, 1],
            vec![1.0, 2.0, 3.0, 4.0],
        )
        .unwrap();
        assert_eq!(a.row_offsets(), &[0, 2, 3]);
        assert_eq!(a.col_indices(), &[0, 2, 1]);
        assert_eq!(a.values(), &[2.0, 4.0, 4.0]);
        // Bounds are still checked.
        assert!(Csr::try_from_unsorted(1, 2, vec![0, 1], vec![5], vec![1.0]).is_err());
    }

    #[test]
    fn slicing_transposing_and_converting_round_trip() {
        let a = sample();
        let t = a.transpose().unwrap();
        assert_eq!(t.shape(), (4, 3));
        assert_eq!(t.transpose().unwrap(), a);
        assert_eq!(t.get(3, 0), Some(2.0));
        let r = a.rows(1..3).unwrap();
        assert_eq!(r.row_offsets(), &[0, 0, 3]);
        let p = a.column_panel(1..3).unwrap();
        assert_eq!(p.shape(), (3, 2));
        assert_eq!(p.col_indices(), &[0, 1]);
        assert_eq!(p.values(), &[4.0, 5.0]);
        assert!(a.rows(2..4).is_err());
        assert!(a.column_panel(3..5).is_err());
        assert_eq!(
            Csr::from_dense(&a.to_dense(Layout::ColMajor).unwrap()).unwrap(),
            a
        );
        assert_eq!(a.to_coo().to_csr().unwrap(), a);
        let c = Csc::from_csr(&a).unwrap();
        assert_eq!(c.col(0), (&[0u32, 2][..], &[1.0, 3.0][..]));
        assert_eq!(c.to_csr().unwrap(), a);
        let e = Csc::<f64>::try_new(2, 1, vec![0, 2], vec![1, 0], vec![1.0, 1.0]).unwrap_err();
        assert!(matches!(
            e,
            FormatError::Unsorted {
                format: "CSC",
                axis: "column",
                ..
            }
        ));
    }

    #[test]
    fn csc_errors_name_the_shape_as_given() {
        let e = Csc::<f64>::try_new(5, MAX_DIM_PLUS, vec![0], vec![], vec![]).unwrap_err();
        assert!(
            matches!(e, FormatError::ShapeOverflow { format: "CSC", nrows: 5, ncols, .. } if ncols == MAX_DIM_PLUS as u64),
            "{e}"
        );
        assert!(e.to_string().contains(&format!("5×{MAX_DIM_PLUS}")), "{e}");
        let e =
            Csc::<f64>::try_from_unsorted(MAX_DIM_PLUS, 2, vec![0], vec![], vec![]).unwrap_err();
        assert!(e.to_string().contains(&format!("{MAX_DIM_PLUS}×2")), "{e}");
    }

    /// Foreign memory for the tests: vectors that are not the matrix's, and a count of the
    /// owners still alive.
    struct Foreign {
        offsets: Vec<u64>,
        cols: Vec<u32>,
        values: Vec<f64>,
    }

    /// A matrix over `f`'s arrays, read in place, and a handle that says whether any array of
    /// it is still held.
    fn over(f: &Arc<Foreign>) -> Result<Csr<f64>, FormatError> {
        let nrows = f.offsets.len() - 1;
        // SAFETY: the vectors live, unwritten, as long as any clone of `f` (each array holds
        // one).
        let (offsets, cols, values) = unsafe {
            (
                HostArray::from_foreign(f.offsets.as_ptr(), f.offsets.len(), Arc::clone(f)),
                HostArray::from_foreign(f.cols.as_ptr(), f.cols.len(), Arc::clone(f)),
                HostArray::from_foreign(f.values.as_ptr(), f.values.len(), Arc::clone(f)),
            )
        };
        Csr::try_from_arrays(nrows, 4, offsets, cols, values)
    }

    fn foreign_sample() -> Arc<Foreign> {
        let (_, _, offsets, cols, values) = sample().into_parts();
        Arc::new(Foreign {
            offsets,
            cols,
            values,
        })
    }

    #[test]
    fn foreign_arrays_are_read_in_place() {
        let f = foreign_sample();
        let a = over(&f).unwrap();
        assert_eq!(a, sample());
        assert_eq!(a.row_offsets().as_ptr(), f.offsets.as_ptr());
        assert_eq!(a.col_indices().as_ptr(), f.cols.as_ptr());
        assert_eq!(a.values().as_ptr(), f.values.as_ptr());
        let (o, c, v) = a.arrays();
        assert!(o.is_foreign() && c.is_foreign() && v.is_foreign());
        // Products and transposes read them like any other matrix.
        assert_eq!(a.transpose().unwrap(), sample().transpose().unwrap());
        assert_eq!(a.get(2, 2), Some(5.0));
        // Each array holds its owner (here one reference to `f` each); clones share the arrays,
        // and the last one lets go of the owners.
        let b = a.clone();
        assert_eq!(Arc::strong_count(&f), 4);
        assert!(b.arrays().2.is_shared());
        drop(a);
        assert_eq!(Arc::strong_count(&f), 4);
        assert!(!b.arrays().2.is_shared());
        drop(b);
        assert_eq!(Arc::strong_count(&f), 1);
    }

    #[test]
    fn clones_share_values_until_one_writes_them() {
        let a = sample();
        let mut b = a.clone();
        assert_eq!(a.values().as_ptr(), b.values().as_ptr());
        assert_eq!(a.col_indices().as_ptr(), b.col_indices().as_ptr());
        b.values_mut()[0] = 10.0;
        assert_ne!(a.values().as_ptr(), b.values().as_ptr());
        assert_eq!((a.values()[0], b.values()[0]), (1.0, 10.0));
        // The structure stays shared.
        assert_eq!(a.col_indices().as_ptr(), b.col_indices().as_ptr());
        // Not shared: written in place.
        let mut c = sample();
        let at = c.values().as_ptr();
        c.values_mut()[1] = 0.5;
        assert_eq!(c.values().as_ptr(), at);
    }

    #[test]
    fn writing_foreign_values_copies_them_and_leaves_the_memory_alone() {
        let f = foreign_sample();
        let mut a = over(&f).unwrap();
        a.values_mut()[0] = -1.0;
        assert_eq!(f.values[0], 1.0);
        assert_eq!(a.values()[0], -1.0);
        assert!(!a.arrays().2.is_foreign());
        // The structure is still read in place.
        assert_eq!(a.col_indices().as_ptr(), f.cols.as_ptr());
    }

    #[test]
    fn into_parts_copies_only_what_the_matrix_does_not_own_alone() {
        let a = sample();
        let (offsets_at, values_at) = (a.row_offsets().as_ptr(), a.values().as_ptr());
        let (_, _, offsets, _, values) = a.into_parts();
        assert_eq!((offsets.as_ptr(), values.as_ptr()), (offsets_at, values_at));
        // A clone alive: copies, and the clone keeps its arrays.
        let a = sample();
        let b = a.clone();
        let (_, _, offsets, _, values) = a.into_parts();
        assert_ne!(offsets.as_ptr(), b.row_offsets().as_ptr());
        assert_ne!(values.as_ptr(), b.values().as_ptr());
        assert_eq!((&offsets[..], &values[..]), (b.row_offsets(), b.values()));
        // Foreign memory: copied, and the owner let go.
        let f = foreign_sample();
        let (_, _, offsets, cols, values) = over(&f).unwrap().into_parts();
        assert_eq!(Arc::strong_count(&f), 1);
        assert_ne!(cols.as_ptr(), f.cols.as_ptr());
        assert_eq!(
            (offsets, cols, values),
            (f.offsets.clone(), f.cols.clone(), f.values.clone())
        );
    }

    #[test]
    fn invalid_foreign_arrays_are_rejected_without_a_copy() {
        let broken = |offsets: Vec<u64>, cols: Vec<u32>| {
            let f = Arc::new(Foreign {
                values: vec![1.0; cols.len()],
                offsets,
                cols,
            });
            let e = over(&f).unwrap_err();
            // Nothing kept, nothing written.
            assert_eq!(Arc::strong_count(&f), 1);
            e
        };
        assert!(matches!(
            broken(vec![0, 2, 2, 5], vec![0, 3, 0, 1, 4]),
            FormatError::IndexOutOfBounds { position: 4, .. }
        ));
        assert!(matches!(
            broken(vec![0, 2, 2, 5], vec![3, 0, 0, 1, 2]),
            FormatError::Unsorted { line: 0, .. }
        ));
        assert!(matches!(
            broken(vec![0, 2, 2, 5], vec![0, 3, 1, 1, 2]),
            FormatError::Duplicate { row: 2, col: 1, .. }
        ));
        assert!(matches!(
            broken(vec![0, 3, 2, 5], vec![0, 1, 3, 0, 2]),
            FormatError::OffsetsNotMonotone { position: 2, .. }
        ));
        assert!(matches!(
            broken(vec![0, 2, 2, 4], vec![0, 1, 0, 1, 2]),
            FormatError::OffsetsEnds {
                last: 4,
                nnz: 5,
                ..
            }
        ));
        // Values of another length.
        let f = foreign_sample();
        let a = over(&f).unwrap();
        let (o, c, _) = a.arrays();
        let e = Csr::try_from_arrays(3, 4, o.clone(), c.clone(), vec![1.0].into()).unwrap_err();
        assert!(matches!(
            e,
            FormatError::LengthMismatch {
                array: "values",
                ..
            }
        ));
    }

    #[test]
    fn large_matrices_are_validated_in_pieces_of_whole_rows() {
        // Rows of 3 entries, faults past the first piece: the first in order is reported.
        let n = 100_000usize;
        let offsets: Vec<u64> = (0..=n as u64).map(|i| 3 * i).collect();
        let cols: Vec<u32> = (0..3 * n as u32).map(|k| k % 3).collect();
        let values = vec![1.0f64; 3 * n];
        assert!(Csr::try_new(n, 3, offsets.clone(), cols.clone(), values.clone()).is_ok());
        let mut unsorted = cols.clone();
        unsorted.swap(3 * 90_000, 3 * 90_000 + 1);
        unsorted[3 * 95_000] = 3;
        let e = Csr::try_new(n, 3, offsets.clone(), unsorted, values.clone()).unwrap_err();
        assert!(
            matches!(e, FormatError::Unsorted { line: 90_000, .. }),
            "{e}"
        );
        let mut decreasing = offsets.clone();
        decreasing[80_000] = 3 * 80_000 + 5;
        let e = Csr::try_new(n, 3, decreasing, cols.clone(), values.clone()).unwrap_err();
        assert!(
            matches!(
                e,
                FormatError::OffsetsNotMonotone {
                    position: 80_001,
                    ..
                }
            ),
            "{e}"
        );
        // One long row across many pieces, with one index out of bounds at its end.
        let mut long = (0..3 * n as u32).collect::<Vec<u32>>();
        long[3 * n - 1] = 3 * n as u32;
        let e = Csr::try_new(1, 3 * n, vec![0, 3 * n as u64], long, values).unwrap_err();
        assert!(matches!(e, FormatError::IndexOutOfBounds { .. }), "{e}");
    }

    #[test]
    fn line_starts_are_told_from_faults_inside_lines() {
        // Rows of 0 to 4 entries, each row's columns rising from a random start, so that
        // neighbours across a row start (also across empty rows) are often equal or falling:
        // valid. Then one fault inside a row, at several places; the naive check agrees.
        let mut state = 12345u64;
        let mut next = |m: u64| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (state >> 33) % m
        };
        let n = 120_000usize;
        let mut offsets = vec![0u64];
        let mut cols = Vec::new();
        for _ in 0..n {
            let len = next(5);
            let start = next(8) as u32;
            cols.extend((0..len as u32).map(|k| start + 2 * k));
            offsets.push(cols.len() as u64);
        }
        let values = vec![1.0f64; cols.len()];
        assert!(Csr::try_new(n, 16, offsets.clone(), cols.clone(), values.clone()).is_ok());
        let rows_of_two: Vec<usize> = (0..n)
            .filter(|&i| offsets[i + 1] - offsets[i] >= 2)
            .collect();
        for pick in [0, 7, rows_of_two.len() / 2, rows_of_two.len() - 1] {
            let row = rows_of_two[pick];
            let at = offsets[row] as usize;
            let mut repeated = cols.clone();
            repeated[at + 1] = repeated[at];
            let e = Csr::try_new(n, 16, offsets.clone(), repeated, values.clone()).unwrap_err();
            assert!(
                matches!(e, FormatError::Duplicate { row: r, .. } if r == row as u64),
                "{e}"
            );
            let mut falling = cols.clone();
            falling.swap(at, at + 1);
            let e = Csr::try_new(n, 16, offsets.clone(), falling, values.clone()).unwrap_err();
            assert!(
                matches!(e, FormatError::Unsorted { line, .. } if line == row as u64),
                "{e}"
            );
        }
    }

    #[test]
    fn column_panels_of_many_rows_match_a_row_by_row_cut() {
        // Over several parallel pieces of rows, some rows empty, some without an entry in
        // the panel.
        let n = 10_000usize;
        let mut offsets = vec![0u64];
        let mut cols = Vec::new();
        for i in 0..n as u32 {
            cols.extend(
                (0..i % 7)
                    .map(|k| (i * 31 + k * 97) % 1000)
                    .collect::<std::collections::BTreeSet<_>>(),
            );
            offsets.push(cols.len() as u64);
        }
        let values: Vec<f64> = (0..cols.len()).map(|k| k as f64).collect();
        let a = Csr::try_new(n, 1000, offsets, cols, values).unwrap();
        for range in [0..1000, 0..1, 250..600, 999..1000, 400..400] {
            let panel = a.column_panel(range.clone()).unwrap();
            let (lo, hi) = (range.start as u32, range.end as u32);
            let mut offsets = vec![0u64];
            let (mut cols, mut vals) = (Vec::new(), Vec::new());
            for i in 0..n {
                let (c, v) = a.row(i);
                for (&j, &x) in c.iter().zip(v) {
                    if (lo..hi).contains(&j) {
                        cols.push(j - lo);
                        vals.push(x);
                    }
                }
                offsets.push(cols.len() as u64);
            }
            let expected = Csr::try_new(n, range.len(), offsets, cols, vals).unwrap();
            assert_eq!(panel, expected, "{range:?}");
        }
    }

    #[test]
    fn explicit_zeros_can_be_dropped() {
        let a = Csr::try_new(1, 3, vec![0, 3], vec![0, 1, 2], vec![1.0, 0.0, 2.0]).unwrap();
        let b = a.without_explicit_zeros();
        assert_eq!(b.col_indices(), &[0, 2]);
        assert_eq!(a.nnz(), 3);
    }
}
