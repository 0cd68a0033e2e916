//! C written in place: a product computed in chunks gets its arrays once, sized from the
//! symbolic counts, and every chunk's rows go straight to their final positions, written by
//! whichever backend computes the chunk. No chunk is a matrix of its own and nothing is
//! assembled afterwards, so host memory for C is the only allocation proportional to C.
//!
//! [`ProductLayout`] says where everything goes: C's row offsets and, for a product cut into
//! column panels of B, where each panel's share of each row starts. [`ProductBuffer`] is C's
//! arrays while they are written; a [`ChunkPlace`] is one chunk's positions in them, handed to
//! [`Backend::spgemm_chunks_into`](super::Backend::spgemm_chunks_into).
//!
//! ```
//! use hetsparse_core::backend::place::{ProductBuffer, ProductLayout};
//! use hetsparse_core::{generate, reference, Backend, PlusTimes, ProductChunk, ReferenceBackend};
//! let a = generate::uniform::<f64>(100, 80, 4, 1);
//! let b = generate::uniform::<f64>(80, 60, 3, 2);
//! // Two column panels of B, each a chunk of all rows.
//! let layout = ProductLayout::count(&a, &b, vec![0..25, 25..60])?;
//! let c = ProductBuffer::<f64>::new(layout)?;
//! let mut places = Vec::new();
//! for (p, cols) in c.layout().panels().to_vec().into_iter().enumerate() {
//!     let chunk = ProductChunk { rows: 0..100, cols: cols.clone() };
//!     let segments = c.layout().segments(p, 0..100);
//!     // SAFETY: the two panels' segments of a row do not overlap.
//!     places.push(unsafe { c.place(chunk, cols.start, segments)? });
//! }
//! let options = Default::default();
//! let run = hetsparse_core::RunControl::unwatched();
//! ReferenceBackend.spgemm_chunks_into((&a).into(), (&b).into(), &mut places, &options, &run,
//!     &mut |_, _| Ok(()))?;
//! assert!(places.iter().all(|p| p.is_complete()));
//! drop(places);
//! // SAFETY: both places were complete, and together they cover C.
//! let c = unsafe { c.into_csr()? };
//! assert_eq!(c, reference::spgemm::<f64, PlusTimes>(&a, &b)?);
//! # Ok::<(), hetsparse_core::Error>(())
//! ```

use std::borrow::Cow;
use std::marker::PhantomData;
use std::mem::MaybeUninit;
use std::ops::Range;
use std::ptr::NonNull;

use rayon::prelude::*;

use super::ProductChunk;
use crate::analysis;
use crate::error::{Error, Result};
use crate::format::Csr;
use crate::host;
use crate::scalar::Scalar;

/// Entries one parallel task copies.
const ENTRIES_PER_TASK: usize = 1 << 16;

/// Where each row of a chunk starts and where it ends in C's arrays.
pub type RowSegments<'c> = (Cow<'c, [u64]>, Cow<'c, [u64]>);

/// Where every entry of a product goes: C's row offsets and, for each column panel after the
/// first, where each row's entries of that panel start (a row's panels lie side by side, in
/// column order).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProductLayout {
    nrows: usize,
    ncols: usize,
    panels: Vec<Range<usize>>,
    offsets: Vec<u64>,
    /// `cuts[p - 1][i]`: where row `i`'s entries of panel `p` start, for `p` in
    /// `1..panels.len()`.
    cuts: Vec<Vec<u64>>,
}

impl ProductLayout {
    /// The layout of `A · B` in the column panels `panels` (which must run from column 0 to
    /// B's last without gap or overlap), from the structural counts
    /// ([`analysis::symbolic_panel_nnz`]).
    pub fn count<T: Scalar>(a: &Csr<T>, b: &Csr<T>, panels: Vec<Range<usize>>) -> Result<Self> {
        let _span =
            tracing::debug_span!("count C", rows = a.nrows(), panels = panels.len()).entered();
        let counts = analysis::symbolic_panel_nnz(a, 0..a.nrows(), b, &panels)?;
        Self::from_counts(a.nrows(), b.ncols(), panels, &counts)
    }

    /// The layout of an `nrows × ncols` product whose row `i` has `counts[i * P + p]` entries
    /// in panel `p` of the `P` column panels `panels`.
    pub fn from_counts(
        nrows: usize,
        ncols: usize,
        panels: Vec<Range<usize>>,
        counts: &[u64],
    ) -> Result<Self> {
        let width = panels.len();
        if counts.len() as u128 != nrows as u128 * width as u128 {
            return Err(Error::InvalidArgument(format!(
                "{} counts for {nrows} rows in {width} panels",
                counts.len()
            )));
        }
        Self::build(nrows, ncols, panels, |i, p| counts[i * width + p])
    }

    /// The layout of an `nrows × ncols` product whose row `i` has `per_panel[p][i]` entries in
    /// panel `p` of the column panels `panels`.
    pub fn from_panel_counts(
        nrows: usize,
        ncols: usize,
        panels: Vec<Range<usize>>,
        per_panel: &[Vec<u64>],
    ) -> Result<Self> {
        if per_panel.len() != panels.len() || per_panel.iter().any(|c| c.len() != nrows) {
            return Err(Error::InvalidArgument(format!(
                "counts of {} panels for {} panels of {nrows} rows",
                per_panel.len(),
                panels.len()
            )));
        }
        Self::build(nrows, ncols, panels, |i, p| per_panel[p][i])
    }

    fn build(
        nrows: usize,
        ncols: usize,
        panels: Vec<Range<usize>>,
        count: impl Fn(usize, usize) -> u64 + Sync,
    ) -> Result<Self> {
        let mut next = 0;
        for p in &panels {
            if p.start != next || p.end < p.start {
                return Err(Error::InvalidArgument(format!(
                    "column panels {panels:?} do not run from column 0 without gap or overlap"
                )));
            }
            next = p.end;
        }
        let width = panels.len();
        if next != ncols || width == 0 && nrows > 0 {
            return Err(Error::InvalidArgument(format!(
                "column panels {panels:?} do not cover the product's {ncols} columns"
            )));
        }
        let totals: Vec<u64> = (0..nrows)
            .into_par_iter()
            .with_min_len(4096)
            .map(|i| (0..width).map(|p| count(i, p)).sum())
            .collect();
        let offsets = analysis::prefix_sums(&totals);
        drop(totals);
        let mut cuts: Vec<Vec<u64>> = Vec::with_capacity(width.saturating_sub(1));
        for p in 1..width {
            let before = cuts.last().map_or(&offsets[..nrows], |c| &c[..]);
            let cut: Vec<u64> = before
                .par_iter()
                .enumerate()
                .with_min_len(4096)
                .map(|(i, &start)| start + count(i, p - 1))
                .collect();
            cuts.push(cut);
        }
        Ok(ProductLayout {
            nrows,
            ncols,
            panels,
            offsets,
            cuts,
        })
    }

    /// Rows of C.
    pub fn nrows(&self) -> usize {
        self.nrows
    }

    /// Columns of C.
    pub fn ncols(&self) -> usize {
        self.ncols
    }

    /// Entries of C.
    pub fn nnz(&self) -> u64 {
        self.offsets[self.nrows]
    }

    /// The column panels, in order.
    pub fn panels(&self) -> &[Range<usize>] {
        &self.panels
    }

    /// C's row offsets.
    pub fn offsets(&self) -> &[u64] {
        &self.offsets
    }

    /// The panels whose columns together are `cols` (a run of whole panels), if there are.
    pub fn panels_spanned(&self, cols: &Range<usize>) -> Option<Range<usize>> {
        let first = self
            .panels
            .binary_search_by_key(&cols.start, |p| p.start)
            .ok()?;
        let last = first
            + self.panels[first..]
                .binary_search_by_key(&cols.end, |p| p.end)
                .ok()?;
        Some(first..last + 1)
    }

    /// Where rows `rows`' entries of panel `p` start and end in C's arrays, for
    /// [`ProductBuffer::place`]. Panics if `p` or `rows` is out of range.
    pub fn segments(&self, p: usize, rows: Range<usize>) -> RowSegments<'_> {
        self.panels_segments(p..p + 1, rows)
    }

    /// Where rows `rows`' entries of the run of panels `panels` start and end in C's arrays
    /// (each row's entries of those panels lie together, in column order). Panics if `panels`
    /// is empty or out of range, or `rows` out of range.
    pub fn panels_segments(&self, panels: Range<usize>, rows: Range<usize>) -> RowSegments<'_> {
        let starts = match panels.start {
            0 => &self.offsets[rows.clone()],
            p => &self.cuts[p - 1][rows.clone()],
        };
        let ends = if panels.end == self.panels.len() {
            &self.offsets[rows.start + 1..rows.end + 1]
        } else {
            &self.cuts[panels.end - 1][rows]
        };
        (Cow::Borrowed(starts), Cow::Borrowed(ends))
    }
}

/// C's arrays while its chunks are written into them ([`ProductBuffer::place`]), then C
/// ([`ProductBuffer::into_csr`]). Allocated once, backed by huge pages where the system
/// allows, written once.
pub struct ProductBuffer<T> {
    layout: ProductLayout,
    cols: Vec<u32>,
    vals: Vec<T>,
    /// The arrays' memory, taken once: places write through these, never through the vectors.
    cols_at: NonNull<u32>,
    vals_at: NonNull<T>,
}

// SAFETY: a shared ProductBuffer only reads its layout and hands out places, whose writes the
// contract of `place` keeps apart.
unsafe impl<T: Send + Sync> Sync for ProductBuffer<T> {}
// SAFETY: the buffer owns its arrays.
unsafe impl<T: Send> Send for ProductBuffer<T> {}

impl<T: Scalar> ProductBuffer<T> {
    /// C's arrays for `layout`, not yet written; [`Error::OutOfMemory`] where the host cannot
    /// hold them.
    pub fn new(layout: ProductLayout) -> Result<Self> {
        let nnz = host::entry_count(layout.nnz(), "the product's entries")?;
        let mut cols: Vec<u32> = host::try_with_capacity(nnz, "column indices of C")?;
        let mut vals: Vec<T> = host::try_with_capacity(nnz, "values of C")?;
        crate::advise_huge_pages(cols.spare_capacity_mut());
        crate::advise_huge_pages(vals.spare_capacity_mut());
        let cols_at = NonNull::new(cols.as_mut_ptr()).unwrap_or(NonNull::dangling());
        let vals_at = NonNull::new(vals.as_mut_ptr()).unwrap_or(NonNull::dangling());
        Ok(ProductBuffer {
            layout,
            cols,
            vals,
            cols_at,
            vals_at,
        })
    }

    /// Where everything goes.
    pub fn layout(&self) -> &ProductLayout {
        &self.layout
    }

    /// The place of `chunk` (rows of A, columns of B as the backend that computes it is given
    /// them) in C: row `chunk.rows.start + k` of C gets the chunk's row `k` at positions
    /// `starts[k]..ends[k]`, its columns moved by `first_col` (C's column of the chunk's first).
    /// An error unless each row's positions lie inside that row of C and hold at most the
    /// chunk's width.
    ///
    /// # Safety
    /// No other place of this buffer that is alive at the same time may share a position with
    /// this one.
    pub unsafe fn place<'c>(
        &'c self,
        chunk: ProductChunk,
        first_col: usize,
        (starts, ends): RowSegments<'c>,
    ) -> Result<ChunkPlace<'c, T>> {
        let rows = chunk.rows.clone();
        let width = chunk.cols.len() as u64;
        let bad = |what: String| Error::Internal {
            backend: crate::BackendKind::Host,
            what: format!("the place of chunk {chunk:?} in C: {what}"),
        };
        if rows.end > self.layout.nrows
            || starts.len() != rows.len()
            || ends.len() != rows.len()
            || first_col.saturating_add(chunk.cols.len()) > self.layout.ncols
        {
            return Err(bad(format!(
                "{} starts and {} ends from column {first_col} in a {}×{} product",
                starts.len(),
                ends.len(),
                self.layout.nrows,
                self.layout.ncols
            )));
        }
        let offsets = &self.layout.offsets[rows.start..rows.end + 1];
        let outside = (0..rows.len())
            .into_par_iter()
            .with_min_len(4096)
            .find_any(|&k| {
                let (s, e) = (starts[k], ends[k]);
                s < offsets[k] || e > offsets[k + 1] || s > e || e - s > width
            });
        if let Some(k) = outside {
            return Err(bad(format!(
                "row {} at {}..{}, outside the row's {}..{}",
                rows.start + k,
                starts[k],
                ends[k],
                offsets[k],
                offsets[k + 1]
            )));
        }
        Ok(ChunkPlace {
            first_col: u32::try_from(first_col).map_err(|_| bad("first column".into()))?,
            chunk,
            starts,
            ends,
            cols: Dest(self.cols_at),
            vals: Dest(self.vals_at),
            written: 0,
            _buffer: PhantomData,
        })
    }

    /// C, checked (every row's columns in bounds and ascending: [`Error::Internal`] if not).
    ///
    /// # Safety
    /// Every position of C was written: by places that were complete
    /// ([`ChunkPlace::is_complete`]) and together covered C.
    pub unsafe fn into_csr(self) -> Result<Csr<T>> {
        let ProductBuffer {
            layout,
            mut cols,
            mut vals,
            ..
        } = self;
        let nnz = layout.nnz() as usize;
        // SAFETY: the capacity is nnz (`new`), and the caller's contract says every position
        // below it was written.
        unsafe {
            cols.set_len(nnz);
            vals.set_len(nnz);
        }
        let _check = tracing::debug_span!("check C").entered();
        Csr::try_new(layout.nrows, layout.ncols, layout.offsets, cols, vals).map_err(|e| {
            Error::Internal {
                backend: crate::BackendKind::Host,
                what: format!("C written in place is not a valid CSR matrix: {e}"),
            }
        })
    }
}

/// A pointer into C's arrays that a place's parallel copies share: each writes positions of
/// its own.
#[derive(Clone, Copy)]
struct Dest<X>(NonNull<X>);

// SAFETY: used only to write disjoint positions from several threads (see the copies below).
unsafe impl<X: Send> Send for Dest<X> {}
// SAFETY: as above.
unsafe impl<X: Send> Sync for Dest<X> {}

impl<X> Dest<X> {
    /// Positions `at..at + len` of the array.
    ///
    /// # Safety
    /// Inside the array's capacity, and written by no one else while the slice lives.
    #[allow(clippy::mut_from_ref)]
    unsafe fn slice(&self, at: u64, len: usize) -> &mut [MaybeUninit<X>] {
        // SAFETY: the caller's contract.
        unsafe { std::slice::from_raw_parts_mut(self.0.as_ptr().add(at as usize).cast(), len) }
    }
}

/// One chunk's positions in C ([`ProductBuffer::place`]). The backend that computes the chunk
/// writes its rows in order ([`ChunkPlace::write_rows`], [`ChunkPlace::write_csr`]), columns
/// relative to the chunk's first as in a [`ChunkProduct`](super::ChunkProduct); each row must
/// have exactly the entries the symbolic counts gave it.
pub struct ChunkPlace<'c, T> {
    chunk: ProductChunk,
    first_col: u32,
    starts: Cow<'c, [u64]>,
    ends: Cow<'c, [u64]>,
    cols: Dest<u32>,
    vals: Dest<T>,
    /// Rows written so far (the first ones).
    written: usize,
    _buffer: PhantomData<&'c ProductBuffer<T>>,
}

impl<T: Scalar> ChunkPlace<'_, T> {
    /// The chunk, as the backend computing it is given it.
    pub fn chunk(&self) -> &ProductChunk {
        &self.chunk
    }

    /// Entries of the chunk's row `k`.
    pub fn row_len(&self, k: usize) -> u64 {
        self.ends[k] - self.starts[k]
    }

    /// Entries of the whole chunk.
    pub fn nnz(&self) -> u64 {
        (0..self.starts.len()).map(|k| self.row_len(k)).sum()
    }

    /// Rows written so far.
    pub fn rows_written(&self) -> usize {
        self.written
    }

    /// Whether every row is written.
    pub fn is_complete(&self) -> bool {
        self.written == self.chunk.rows.len()
    }

    /// Writes the next `counts.len()` rows of the chunk, whose entries lie one row after
    /// another in `cols` (relative to the chunk's first column) and `vals`. An
    /// [`Error::Internal`] (and nothing written) where a row's count is not its place's, or the
    /// slices are not their sum.
    pub fn write_rows(&mut self, counts: &[u64], cols: &[u32], vals: &[T]) -> Result<()> {
        self.write(counts.len(), |k| counts[k], cols, vals)
    }

    /// Writes the next `part.nrows()` rows of the chunk from a matrix of them.
    pub fn write_csr(&mut self, part: &Csr<T>) -> Result<()> {
        if part.ncols() != self.chunk.cols.len() {
            return Err(self.mismatch(format!(
                "a part of {} columns for a chunk of {}",
                part.ncols(),
                self.chunk.cols.len()
            )));
        }
        let off = part.row_offsets();
        self.write(
            part.nrows(),
            |k| off[k + 1] - off[k],
            part.col_indices(),
            part.values(),
        )
    }

    fn mismatch(&self, what: String) -> Error {
        Error::Internal {
            backend: crate::BackendKind::Host,
            what: format!(
                "chunk of rows {:?}, columns {:?} written in place: {what}",
                self.chunk.rows, self.chunk.cols
            ),
        }
    }

    /// Checks that the next `n` rows have the entries `count` gives them, in all `entries`:
    /// whether their positions are one run in C, and where it starts.
    fn check_rows(
        &self,
        n: usize,
        count: impl Fn(usize) -> u64,
        entries: usize,
    ) -> Result<(bool, u64)> {
        let first = self.written;
        if first + n > self.chunk.rows.len() {
            return Err(self.mismatch(format!(
                "{n} rows after {first} of {}",
                self.chunk.rows.len()
            )));
        }
        let (starts, ends) = (&self.starts[first..first + n], &self.ends[first..first + n]);
        let mut total = 0u64;
        let mut contiguous = true;
        for k in 0..n {
            let len = ends[k] - starts[k];
            if count(k) != len {
                return Err(self.mismatch(format!(
                    "row {} has {} entries where the symbolic counts gave {len}",
                    self.chunk.rows.start + first + k,
                    count(k)
                )));
            }
            contiguous &= k == 0 || starts[k] == ends[k - 1];
            total += len;
        }
        if total != entries as u64 {
            return Err(self.mismatch(format!("{entries} entries for rows counting {total}")));
        }
        Ok((contiguous, starts.first().copied().unwrap_or(0)))
    }

    /// Has `fill` write the next `counts.len()` rows of the chunk straight into C, where
    /// their positions are one run there: `fill` gets that run's column and value slots, to
    /// write the rows one after another as in [`write_rows`](Self::write_rows) (a device's
    /// download into them, say, with no copy in between). Columns are relative to the
    /// chunk's first, as everywhere in a place, and moved into C's afterwards. `Ok(false)`,
    /// with `fill` not called, where the positions are not one run (a chunk of part of B's
    /// columns): then the rows go through [`write_rows`](Self::write_rows). An
    /// [`Error::Internal`] (and nothing marked written) where a row's count is not its
    /// place's, and `fill`'s error where it fails.
    ///
    /// # Safety
    /// Where `fill` returns `Ok`, it has written every slot of both slices it was given.
    pub unsafe fn fill_rows(
        &mut self,
        counts: &[u64],
        fill: impl FnOnce(&mut [MaybeUninit<u32>], &mut [MaybeUninit<T>]) -> Result<()>,
    ) -> Result<bool> {
        let entries = counts.iter().sum::<u64>() as usize;
        let (contiguous, at) = self.check_rows(counts.len(), |k| counts[k], entries)?;
        if !contiguous {
            return Ok(false);
        }
        // SAFETY: the rows' positions run from `at` without gap (`contiguous`), lie inside C
        // (checked by `place`) and are this place's alone (its contract).
        let (cols, vals) = unsafe { (self.cols.slice(at, entries), self.vals.slice(at, entries)) };
        fill(cols, vals)?;
        let shift = self.first_col;
        if shift != 0 {
            cols.par_chunks_mut(ENTRIES_PER_TASK).for_each(|piece| {
                for c in piece {
                    // SAFETY: `fill` wrote every slot (the caller's contract).
                    let j = unsafe { c.assume_init() };
                    c.write(j.wrapping_add(shift));
                }
            });
        }
        self.written += counts.len();
        Ok(true)
    }

    fn write(
        &mut self,
        n: usize,
        count: impl Fn(usize) -> u64 + Sync,
        cols: &[u32],
        vals: &[T],
    ) -> Result<()> {
        if cols.len() != vals.len() {
            return Err(self.mismatch(format!("{} columns for {} values", cols.len(), vals.len())));
        }
        let (contiguous, at) = self.check_rows(n, &count, cols.len())?;
        let first = self.written;
        let (starts, ends) = (&self.starts[first..first + n], &self.ends[first..first + n]);
        let shift = self.first_col;
        let (dc, dv) = (self.cols, self.vals);
        if contiguous {
            cols.par_chunks(ENTRIES_PER_TASK)
                .zip(vals.par_chunks(ENTRIES_PER_TASK))
                .enumerate()
                .for_each(|(piece, (c, v))| {
                    let from = at + (piece * ENTRIES_PER_TASK) as u64;
                    // SAFETY: the rows' positions run from `at` without gap (`contiguous`), lie
                    // inside C (checked by `place`) and are this place's alone (its contract);
                    // each piece writes its own part of them.
                    let (oc, ov) = unsafe { (dc.slice(from, c.len()), dv.slice(from, v.len())) };
                    shifted_into(oc, c, shift);
                    host::copy_streaming(ov, v);
                });
        } else {
            let mut source = Vec::with_capacity(n + 1);
            source.push(0usize);
            for k in 0..n {
                source.push(source[k] + (ends[k] - starts[k]) as usize);
            }
            (0..n).into_par_iter().with_min_len(256).for_each(|k| {
                let run = source[k]..source[k + 1];
                // SAFETY: row k's positions lie inside C (checked by `place`) and are this
                // place's alone (its contract); each row is written by one task.
                let (oc, ov) = unsafe {
                    (
                        dc.slice(starts[k], run.len()),
                        dv.slice(starts[k], run.len()),
                    )
                };
                shifted_into(oc, &cols[run.clone()], shift);
                host::copy_streaming(ov, &vals[run]);
            });
        }
        self.written += n;
        Ok(())
    }
}

/// Writes the column indices `src` into `dst` (of the same length), moved by `shift`.
fn shifted_into(dst: &mut [MaybeUninit<u32>], src: &[u32], shift: u32) {
    if shift == 0 {
        host::copy_streaming(dst, src);
        return;
    }
    for (d, &c) in dst.iter_mut().zip(src) {
        d.write(c.wrapping_add(shift));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{generate, reference, PlusTimes};

    fn product(a: &Csr<f64>, b: &Csr<f64>) -> Csr<f64> {
        reference::spgemm::<f64, PlusTimes>(a, b).unwrap()
    }

    /// Writes each chunk (rows × panel) from the reference product's part, in the given order.
    fn write_chunks(
        a: &Csr<f64>,
        b: &Csr<f64>,
        panels: Vec<Range<usize>>,
        row_cuts: &[usize],
        reverse: bool,
    ) -> Csr<f64> {
        let layout = ProductLayout::count(a, b, panels.clone()).unwrap();
        let c = ProductBuffer::<f64>::new(layout).unwrap();
        let mut chunks = Vec::new();
        for (p, cols) in panels.iter().enumerate() {
            for w in row_cuts.windows(2) {
                chunks.push((p, w[0]..w[1], cols.clone()));
            }
        }
        if reverse {
            chunks.reverse();
        }
        for (p, rows, cols) in chunks {
            let part = product(
                &a.rows(rows.clone()).unwrap(),
                &b.column_panel(cols.clone()).unwrap(),
            );
            let chunk = ProductChunk {
                rows: rows.clone(),
                cols: cols.clone(),
            };
            // SAFETY: one place at a time.
            let mut place =
                unsafe { c.place(chunk, cols.start, c.layout().segments(p, rows)) }.unwrap();
            // In two writes where it has rows enough.
            let half = part.nrows() / 2;
            place.write_csr(&part.rows(0..half).unwrap()).unwrap();
            place
                .write_csr(&part.rows(half..part.nrows()).unwrap())
                .unwrap();
            assert!(place.is_complete());
        }
        // SAFETY: the chunks cover C and each place was complete.
        unsafe { c.into_csr() }.unwrap()
    }

    #[test]
    fn chunks_written_in_place_give_the_product() {
        let a = generate::uniform::<f64>(3000, 400, 6, 5);
        let b = generate::uniform::<f64>(400, 300, 5, 6);
        let c = product(&a, &b);
        let one = std::iter::once(0..300).collect();
        assert_eq!(write_chunks(&a, &b, one, &[0, 1000, 1001, 3000], true), c);
        let three = vec![0..7, 7..150, 150..300];
        assert_eq!(write_chunks(&a, &b, three, &[0, 2999, 3000], false), c);
        let with_empty = vec![0..0, 0..1, 1..300, 300..300];
        assert_eq!(write_chunks(&a, &b, with_empty, &[0, 3000], true), c);
        let power = generate::rmat::<f64>(9, 6, 3);
        let panels = vec![0..100, 100..101, 101..power.ncols()];
        let n = power.nrows();
        assert_eq!(
            write_chunks(&power, &power, panels, &[0, 10, n / 2, n], true),
            product(&power, &power)
        );
    }

    /// Fills `place`'s next rows from `part` with [`ChunkPlace::fill_rows`], as a device's
    /// download would: whether they were one run.
    fn fill_from(place: &mut ChunkPlace<'_, f64>, part: &Csr<f64>) -> Result<bool> {
        let counts: Vec<u64> = (0..part.nrows()).map(|r| part.row_nnz(r)).collect();
        // SAFETY: the closure writes every slot of both slices or fails.
        unsafe {
            place.fill_rows(&counts, |cols, vals| {
                if cols.len() != part.nnz() as usize {
                    return Err(Error::InvalidArgument("slots of another length".into()));
                }
                host::copy_streaming(cols, part.col_indices());
                host::copy_streaming(vals, part.values());
                Ok(())
            })
        }
    }

    #[test]
    fn rows_in_one_run_are_filled_straight_into_c() {
        let a = generate::rmat::<f64>(9, 6, 3);
        let b = generate::uniform::<f64>(a.ncols(), 300, 4, 8);
        let expected = product(&a, &b);
        let n = a.nrows();
        let panels = vec![0..120, 120..300];
        let layout = ProductLayout::count(&a, &b, panels.clone()).unwrap();
        let c = ProductBuffer::<f64>::new(layout).unwrap();
        for (p, cols) in panels.iter().enumerate() {
            let part = product(&a, &b.column_panel(cols.clone()).unwrap());
            let chunk = ProductChunk {
                rows: 0..n,
                cols: cols.clone(),
            };
            // SAFETY: one place at a time, each a panel of its own.
            let mut place =
                unsafe { c.place(chunk, cols.start, c.layout().segments(p, 0..n)) }.unwrap();
            // One row is one run in any panel (its columns moved by the panel's first);
            // several rows of a panel are not, and are left to `write_rows`.
            let first = part.rows(0..1).unwrap();
            assert!(fill_from(&mut place, &first).unwrap());
            let rest = part.rows(1..n).unwrap();
            assert!(!fill_from(&mut place, &rest).unwrap());
            assert_eq!(place.rows_written(), 1);
            place.write_csr(&rest).unwrap();
            assert!(place.is_complete());
        }
        // SAFETY: both panels' places were complete and cover C.
        assert_eq!(unsafe { c.into_csr() }.unwrap(), expected);

        // Whole rows: every cut is one run; counts of other rows are refused, nothing written.
        let layout = ProductLayout::count(&a, &b, std::iter::once(0..300).collect()).unwrap();
        let c = ProductBuffer::<f64>::new(layout).unwrap();
        for rows in [0..n / 3, n / 3..n] {
            let chunk = ProductChunk {
                rows: rows.clone(),
                cols: 0..300,
            };
            // SAFETY: the row ranges do not overlap.
            let mut place =
                unsafe { c.place(chunk, 0, c.layout().segments(0, rows.clone())) }.unwrap();
            let part = expected.rows(rows.clone()).unwrap();
            let shifted = expected.rows(rows.start + 1..rows.end).unwrap();
            if part.nnz() != shifted.nnz() {
                assert!(fill_from(&mut place, &shifted).is_err());
            }
            assert_eq!(place.rows_written(), 0);
            assert!(fill_from(&mut place, &part).unwrap());
            assert!(place.is_complete());
        }
        // SAFETY: the two places were complete and cover C.
        assert_eq!(unsafe { c.into_csr() }.unwrap(), expected);
    }

    #[test]
    fn counts_per_panel_match_the_panels_products() {
        let a = generate::rmat::<f64>(9, 8, 4);
        let panels = vec![0..3, 3..200, 200..a.ncols()];
        let counts = analysis::symbolic_panel_nnz(&a, 5..400, &a, &panels).unwrap();
        for (p, cols) in panels.iter().enumerate() {
            let part = product(
                &a.rows(5..400).unwrap(),
                &a.column_panel(cols.clone()).unwrap(),
            );
            for r in 0..395 {
                assert_eq!(counts[r * 3 + p], part.row_nnz(r), "row {r}, panel {p}");
            }
        }
        assert!(analysis::symbolic_panel_nnz(&a, 0..a.nrows() + 1, &a, &panels).is_err());
        assert!(analysis::symbolic_panel_nnz(&a, 0..4, &a, &[5..9, 0..2]).is_err());
    }

    #[test]
    fn a_row_of_other_counts_is_refused_and_nothing_is_written() {
        let a = generate::uniform::<f64>(50, 40, 4, 1);
        let c = product(&a, &a.transpose().unwrap());
        let layout = ProductLayout::count(
            &a,
            &a.transpose().unwrap(),
            std::iter::once(0..50).collect(),
        )
        .unwrap();
        let buffer = ProductBuffer::<f64>::new(layout).unwrap();
        let chunk = ProductChunk {
            rows: 0..50,
            cols: 0..50,
        };
        // SAFETY: the only place.
        let mut place =
            unsafe { buffer.place(chunk, 0, buffer.layout().segments(0, 0..50)) }.unwrap();
        let mut counts: Vec<u64> = (0..50).map(|i| c.row_nnz(i)).collect();
        counts[3] += 1;
        counts[4] -= 1;
        let e = place.write_rows(&counts, c.col_indices(), c.values());
        assert!(matches!(e, Err(Error::Internal { .. })), "{e:?}");
        assert_eq!(place.rows_written(), 0);
        // More rows than the chunk, or entries that are not the rows' sum.
        let all: Vec<u64> = (0..50).map(|i| c.row_nnz(i)).collect();
        assert!(place
            .write_rows(&all, &c.col_indices()[1..], &c.values()[1..])
            .is_err());
        place.write_rows(&all, c.col_indices(), c.values()).unwrap();
        assert!(place.write_rows(&[0], &[], &[]).is_err());
        assert!(place.is_complete());
        drop(place);
        // SAFETY: the one place covered C and was complete.
        assert_eq!(unsafe { buffer.into_csr() }.unwrap(), c);
    }

    #[test]
    fn a_run_of_panels_is_placed_as_one() {
        // Row entries per panel: row 0 1, 2, 0; row 1 4, 0, 3.
        let per_panel = vec![vec![1, 4], vec![2, 0], vec![0, 3]];
        let panels = vec![0..2, 2..5, 5..6];
        let l = ProductLayout::from_panel_counts(2, 6, panels, &per_panel).unwrap();
        assert_eq!(l.offsets(), [0, 3, 10]);
        assert_eq!(l.panels_spanned(&(0..6)), Some(0..3));
        assert_eq!(l.panels_spanned(&(2..6)), Some(1..3));
        assert_eq!(l.panels_spanned(&(2..5)), Some(1..2));
        assert_eq!(l.panels_spanned(&(0..4)), None);
        assert_eq!(l.panels_spanned(&(1..5)), None);
        let (starts, ends) = l.panels_segments(1..3, 0..2);
        assert_eq!((&starts[..], &ends[..]), (&[1, 7][..], &[3, 10][..]));
        let (starts, ends) = l.panels_segments(0..2, 1..2);
        assert_eq!((&starts[..], &ends[..]), (&[3][..], &[7][..]));
        let (starts, ends) = l.panels_segments(0..3, 0..2);
        assert_eq!((&starts[..], &ends[..]), (&[0, 3][..], &[3, 10][..]));
        // A product of no columns has one empty panel.
        let empty =
            ProductLayout::from_panel_counts(2, 0, std::iter::once(0..0).collect(), &[vec![0, 0]])
                .unwrap();
        assert_eq!(empty.panels_spanned(&(0..0)), Some(0..1));
    }

    #[test]
    fn places_outside_their_rows_are_refused() {
        let a = generate::uniform::<f64>(20, 20, 3, 7);
        let layout = ProductLayout::count(&a, &a, vec![0..10, 10..20]).unwrap();
        let buffer = ProductBuffer::<f64>::new(layout).unwrap();
        let chunk = ProductChunk {
            rows: 0..20,
            cols: 0..10,
        };
        let offsets = buffer.layout().offsets().to_vec();
        let starts = Cow::Owned(offsets[..20].to_vec());
        let ends = Cow::Owned(offsets[1..].iter().map(|e| e + 1).collect());
        // Each row's end one past the row.
        // SAFETY: refused, so never written.
        let past = unsafe { buffer.place(chunk.clone(), 0, (starts, ends)) };
        assert!(matches!(past, Err(Error::Internal { .. })));
        let seg = buffer.layout().segments(0, 0..19);
        // SAFETY: as above.
        assert!(unsafe { buffer.place(chunk, 0, seg) }.is_err());
        assert!(ProductLayout::from_counts(2, 5, vec![0..2, 3..5], &[0; 4]).is_err());
        let per_panel = vec![vec![1, 2], vec![0, 3]];
        let l = ProductLayout::from_panel_counts(2, 5, vec![0..2, 2..5], &per_panel).unwrap();
        assert_eq!(
            l,
            ProductLayout::from_counts(2, 5, vec![0..2, 2..5], &[1, 0, 2, 3]).unwrap()
        );
        assert_eq!(l.offsets(), [0, 1, 6]);
        let (starts, ends) = l.segments(1, 0..2);
        assert_eq!((&starts[..], &ends[..]), (&[1, 3][..], &[1, 6][..]));
        assert!(ProductLayout::from_panel_counts(
            2,
            5,
            std::iter::once(0..5).collect(),
            &per_panel
        )
        .is_err());
        assert!(
            ProductLayout::from_counts(2, 5, std::iter::once(0..5).collect(), &[0; 3]).is_err()
        );
    }
}
