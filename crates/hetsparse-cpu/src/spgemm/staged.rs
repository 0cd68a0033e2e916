//! Row-Row SpGEMM in one pass: every row of C is computed once, with no symbolic phase.
//!
//! The two-phase product computes each row twice, once to count it and once to write it; on
//! short rows (roads, bands) the count costs nearly as much as the row. Here C is reserved at
//! an upper bound (each row at most `min(products, width)` entries) that the address space
//! holds without touching it, and ranges of rows, taken in order, are computed into staging
//! buffers. A range's place in C is known once every range before it has been counted; the
//! thread whose count completes such a prefix copies the staged ranges it places. No thread
//! waits for another: a range finished early stays staged until the ranges before it are
//! done. Ranges are small, so staging stays in cache. C's untouched tail is handed back at
//! the end.

use std::mem::MaybeUninit;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

use hetsparse_core::format::Csr;
use hetsparse_core::{Error, Result, Scalar, Semiring};

use super::row_row;
use super::scratch::ScratchPool;
use super::{Operands, RangeReports, Watch};
use crate::memory::reserved;
use crate::plan;

/// Ranges per thread: many, so that a range's staging stays in cache and few ranges wait,
/// staged, for a slow one before them.
const RANGES_PER_THREAD: usize = 64;

/// How many times its entries C's unwritten reserved tail may be and still be kept (see
/// [`multiply`]).
const KEPT_TAIL: usize = 3;

/// Bytes of entries up to which C is copied out of its reservation, not cut down in place
/// (see [`multiply`]).
const COPIED_BYTES: usize = 8 << 20;

/// Slots a row of `products` intermediate products may need in C of `width` columns.
#[inline]
pub(super) fn row_bound(products: u64, width: usize) -> usize {
    // At most `width`, so the cast is exact.
    products.min(width as u64) as usize
}

/// `C = A · B` over `ops` in one pass, or `Ok(None)` when the upper bound of C cannot be
/// reserved (the caller then counts first and allocates C exactly).
///
/// With each row's intermediate `products`, ranges hold equal numbers of them and C's bound
/// is tight. Without (for B of even rows, see [`Operands::even_b_rows`]), ranges hold equal
/// numbers of A's entries, and the bounds, of each row and of C, take every entry of A to
/// bring a row of B of the longest length. Each range reports to `watch` (weighed by its
/// products, or its entries of A without them).
pub(super) fn multiply<T: Scalar, S: Semiring<T>>(
    ops: &Operands<'_, T>,
    products: Option<&[u64]>,
    pool: &ScratchPool<T::Acc>,
    watch: Watch<'_>,
) -> Result<Option<Csr<T>>> {
    let width = ops.width();
    let (ranges, bounds): (Vec<Range<usize>>, Vec<u64>) = match products {
        Some(products) => {
            let ranges = plan::balanced_ranges_per_thread(products, RANGES_PER_THREAD);
            let bounds = ranges
                .iter()
                .map(|r| {
                    products[r.clone()]
                        .iter()
                        .map(|&p| row_bound(p, width) as u64)
                        .sum()
                })
                .collect();
            (ranges, bounds)
        }
        None => {
            let longest = ops.longest_b_row as u64;
            let ranges = ops.ranges_by_entries(RANGES_PER_THREAD);
            let bounds = ranges
                .iter()
                .map(|r| {
                    let entries = ops.a_offset(r.end) - ops.a_offset(r.start);
                    entries
                        .saturating_mul(longest)
                        .min((r.len() as u64).saturating_mul(width as u64))
                })
                .collect();
            (ranges, bounds)
        }
    };
    let total = bounds.iter().fold(0u64, |t, &b| t.saturating_add(b));
    let Ok(total) = usize::try_from(total) else {
        return Ok(None);
    };
    let (Ok(mut cols), Ok(mut vals)) = (
        reserved::<u32>(total, "column indices of C"),
        reserved::<T>(total, "values of C"),
    ) else {
        return Ok(None);
    };
    let reports = match products {
        Some(products) => RangeReports::by_products(watch, &ranges, products),
        None => RangeReports::new(watch, &ranges, |r| {
            ops.a_offset(r.end) - ops.a_offset(r.start)
        }),
    };
    let mut offsets = vec![0u64; ops.nrows + 1];

    let _s = tracing::debug_span!("one_pass", rows = ops.nrows, ranges = ranges.len()).entered();
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let first_error: Mutex<Option<Error>> = Mutex::new(None);
    let frontier = Mutex::new(Frontier {
        next: 0,
        base: 0,
        counts: vec![None; ranges.len()],
    });
    // Each range's row counts (then offsets), and its staged entries until they are copied.
    let parts: Vec<Mutex<Part<'_, T>>> = plan::split_mut(&mut offsets[1..], &ranges)
        .into_iter()
        .map(|counts| {
            Mutex::new(Part {
                counts,
                staged: None,
            })
        })
        .collect();
    let spare: Mutex<Vec<Staging<T>>> = Mutex::new(Vec::new());
    let c_cols = SharedSlots::new(cols.spare_capacity_mut());
    let c_vals = SharedSlots::new(vals.spare_capacity_mut());

    let work = || {
        loop {
            let r = next.fetch_add(1, Ordering::Relaxed);
            if r >= ranges.len() || failed.load(Ordering::Relaxed) {
                return;
            }
            let result = (|| -> Result<()> {
                reports.start()?;
                let bound = bounds[r] as usize;
                let mut staging = lock(&spare).pop().unwrap_or_default();
                grow(&mut staging.cols, bound, "staged column indices of C")?;
                grow(&mut staging.vals, bound, "staged values of C")?;
                let written = {
                    let mut part = lock(&parts[r]);
                    let written = pool.with(|s| {
                        row_row::compute_rows_staged::<T, S>(
                            ops,
                            ranges[r].clone(),
                            products,
                            &mut staging.cols[..bound],
                            &mut staging.vals[..bound],
                            &mut part.counts[..],
                            s,
                        )
                    })?;
                    staging.len = written;
                    part.staged = Some(staging);
                    written
                };
                reports.finished(r);
                // Ranges whose place in C became known: this one and any finished ones after
                // it, when the ranges before are all counted; else a later range's thread
                // copies this one.
                let placed = lock(&frontier).count(r, written as u64);
                for (q, base) in placed {
                    let mut part = lock(&parts[q]);
                    let Some(staged) = part.staged.take() else {
                        // Ranges are staged before they are counted, so this is a bug; C
                        // would keep a hole.
                        return Err(Error::Internal {
                            backend: hetsparse_core::BackendKind::Cpu,
                            what: format!("SpGEMM: range {q} of rows was placed but not staged"),
                        });
                    };
                    // SAFETY: `base..base + staged.len` is range `q`'s own part of C: each
                    // range is placed once, at the sum of the entries of the ranges before it,
                    // and each range's entries are at most its bound, whose sum is C's length.
                    unsafe {
                        c_cols.copy_in(base as usize, &staged.cols[..staged.len]);
                        c_vals.copy_in(base as usize, &staged.vals[..staged.len]);
                    }
                    let mut end = base;
                    for count in part.counts.iter_mut() {
                        end += *count;
                        *count = end;
                    }
                    drop(part);
                    lock(&spare).push(staged);
                }
                Ok(())
            })();
            if let Err(e) = result {
                failed.store(true, Ordering::Relaxed);
                lock(&first_error).get_or_insert(e);
                return;
            }
        }
    };
    // One range (a product too small to split, see `plan::split_prefix`) runs on the calling
    // thread: waking every thread of the pool for it costs more than the product itself, and
    // a caller outside the pool (Python's thread) would also sleep until the pool is done.
    if ranges.len() <= 1 {
        work();
    } else {
        rayon::broadcast(|_| work());
    }
    if let Some(e) = first_error
        .into_inner()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
    {
        return Err(e);
    }
    drop(parts);
    let frontier = frontier
        .into_inner()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if frontier.next != ranges.len() {
        return Err(Error::Internal {
            backend: hetsparse_core::BackendKind::Cpu,
            what: format!(
                "SpGEMM: only {} of {} ranges of rows were placed in C",
                frontier.next,
                ranges.len()
            ),
        });
    }
    // Every range was placed, so the frontier's base is C's entry count, at most `total`.
    let len = frontier.base as usize;
    // SAFETY: the ranges' parts of C tile `0..len` and each range's part was copied in.
    unsafe {
        cols.set_len(len);
        vals.set_len(len);
    }
    // C's tail past `len` was reserved but never written: address space, no memory. Handing
    // it back splits the allocator's block, and the next product's C then lands partly on
    // memory never touched, whose first write costs a page fault and the zeroing of a page (a
    // tenth of the time of road products on the development machine). So a tail of at most
    // `KEPT_TAIL` times the entries stays; a larger one is handed back.
    if total - len > KEPT_TAIL.saturating_mul(len) {
        if len * (std::mem::size_of::<u32>() + std::mem::size_of::<T>()) <= COPIED_BYTES {
            // A small C is copied out rather than cut down: cut in place, its block stays
            // one the allocator mapped for this product alone and unmaps when C is dropped,
            // so every product of that size maps, faults in and unmaps its pages anew (coarse
            // AMG levels, a graph algorithm's loops: more than some products' rows). Freed,
            // the reservation teaches the allocator to serve the next one from memory it
            // keeps; up to `COPIED_BYTES`, the copy costs less than faulting the pages in.
            cols = copied(&cols, "column indices of C")?;
            vals = copied(&vals, "values of C")?;
        } else {
            cols.shrink_to_fit();
            vals.shrink_to_fit();
        }
    }
    // SAFETY: rows were written sorted and without repeats by the Row-Row accumulators, with
    // columns inside the window; offsets are the prefix sums of the rows' entries.
    Ok(Some(unsafe {
        Csr::from_parts_unchecked(ops.nrows, width, offsets, cols, vals)
    }))
}

/// Locks `m`; a poisoned lock (a panicking worker) still holds consistent data here, because
/// the panic is re-raised by rayon once every worker has returned.
fn lock<X>(m: &Mutex<X>) -> std::sync::MutexGuard<'_, X> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// `v` in a vector of exactly its length (`what` names it in an out-of-memory error).
fn copied<X: Copy>(v: &[X], what: &str) -> Result<Vec<X>> {
    let mut exact = hetsparse_core::host::try_with_capacity(v.len(), what)?;
    exact.extend_from_slice(v);
    Ok(exact)
}

/// Grows `v` to at least `len` (uninitialised) slots.
fn grow<X>(v: &mut Vec<MaybeUninit<X>>, len: usize, what: &str) -> Result<()> {
    if v.len() < len {
        let mut more = reserved::<MaybeUninit<X>>(len, what)?;
        // SAFETY: `MaybeUninit` slots need no initialisation.
        unsafe { more.set_len(len) };
        *v = more;
    }
    Ok(())
}

/// A range's entries computed ahead of knowing where they go in C; reused across ranges.
struct Staging<T> {
    cols: Vec<MaybeUninit<u32>>,
    vals: Vec<MaybeUninit<T>>,
    /// Entries staged.
    len: usize,
}

impl<T> Default for Staging<T> {
    fn default() -> Self {
        Staging {
            cols: Vec::new(),
            vals: Vec::new(),
            len: 0,
        }
    }
}

/// One range of rows: its rows' entry counts (offsets once placed) and its staged entries.
struct Part<'o, T> {
    counts: &'o mut [u64],
    staged: Option<Staging<T>>,
}

/// The first range not yet placed in C, and where it starts.
struct Frontier {
    next: usize,
    base: u64,
    /// Entries of each finished range.
    counts: Vec<Option<u64>>,
}

impl Frontier {
    /// Records that range `r` has `entries` entries; returns the ranges this places, with
    /// their first entry in C: every finished range from the frontier up to the first one
    /// still being computed.
    fn count(&mut self, r: usize, entries: u64) -> Vec<(usize, u64)> {
        self.counts[r] = Some(entries);
        let mut placed = Vec::new();
        while let Some(&Some(n)) = self.counts.get(self.next) {
            placed.push((self.next, self.base));
            self.base += n;
            self.next += 1;
        }
        placed
    }
}

/// C's slots, written by several threads at disjoint places that are only known while the
/// product runs.
struct SharedSlots<X> {
    ptr: *mut MaybeUninit<X>,
    len: usize,
}

// SAFETY: the slots are only written through `copy_in`, whose callers write disjoint parts.
unsafe impl<X: Send> Sync for SharedSlots<X> {}

impl<X: Copy> SharedSlots<X> {
    fn new(slots: &mut [MaybeUninit<X>]) -> Self {
        SharedSlots {
            ptr: slots.as_mut_ptr(),
            len: slots.len(),
        }
    }

    /// Copies `from` to the slots starting at `at`.
    ///
    /// # Safety
    /// No other thread reads or writes `at..at + from.len()` meanwhile.
    unsafe fn copy_in(&self, at: usize, from: &[MaybeUninit<X>]) {
        assert!(at <= self.len && from.len() <= self.len - at);
        // SAFETY: in bounds (checked above), and the caller owns these slots.
        unsafe {
            std::ptr::copy_nonoverlapping(from.as_ptr(), self.ptr.add(at), from.len());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_placed_in_order_whatever_order_they_finish_in() {
        let mut f = Frontier {
            next: 0,
            base: 0,
            counts: vec![None; 5],
        };
        assert_eq!(f.count(2, 7), []);
        assert_eq!(f.count(1, 0), []);
        assert_eq!(f.count(0, 4), [(0, 0), (1, 4), (2, 4)]);
        assert_eq!(f.count(4, 1), []);
        assert_eq!(f.count(3, 2), [(3, 11), (4, 13)]);
        assert_eq!((f.next, f.base), (5, 14));
    }
}
