//! Row-Row SpGEMM in one pass: every row of C is computed once, with no symbolic phase.
//!
//! The two-phase product computes each row twice, once to count it and once to write it; on
//! short rows (roads, bands) the count costs nearly as much as the row. Here C is reserved at
//! an upper bound (each row at most `min(products, width)` entries) that the kernel's address
//! space holds without touching it, and each range of rows is computed into a per-thread
//! staging buffer. Ranges are taken in order; a range learns where its entries start once the
//! range before it has counted its own (a chain of prefix sums, so no thread waits for another
//! one's copy), then copies its staged rows into place. C's untouched tail is handed back at
//! the end. Ranges are small, so staging stays in cache and a thread rarely waits.

use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use hetsparse_core::format::Csr;
use hetsparse_core::{Error, Result, Scalar, Semiring};

use super::row_row;
use super::scratch::ScratchPool;
use super::Operands;
use crate::memory::reserved;
use crate::plan;

/// Ranges per thread: many, so that a range's staging stays in cache and the wait for the
/// range before it (at most its spread in finishing time) stays short.
const RANGES_PER_THREAD: usize = 64;

/// A base offset not published yet.
const UNKNOWN: u64 = u64::MAX;

/// Slots a row of `products` intermediate products may need in C of `width` columns.
#[inline]
pub(super) fn row_bound(products: u64, width: usize) -> usize {
    // At most `width`, so the cast is exact.
    products.min(width as u64) as usize
}

/// `C = A · B` over `ops` in one pass, or `Ok(None)` when the upper bound of C cannot be
/// reserved (the caller then counts first and allocates C exactly).
pub(super) fn multiply<T: Scalar, S: Semiring<T>>(
    ops: &Operands<'_, T>,
    products: &[u64],
    pool: &ScratchPool<T::Acc>,
) -> Result<Option<Csr<T>>> {
    let width = ops.width();
    let ranges = plan::balanced_ranges_per_thread(products, RANGES_PER_THREAD);
    let bounds: Vec<u64> = ranges
        .iter()
        .map(|r| {
            products[r.clone()]
                .iter()
                .map(|&p| row_bound(p, width) as u64)
                .sum()
        })
        .collect();
    let total: u64 = bounds.iter().sum();
    let Ok(total) = usize::try_from(total) else {
        return Ok(None);
    };
    let (Ok(mut cols), Ok(mut vals)) = (
        reserved::<u32>(total, "column indices of C"),
        reserved::<T>(total, "values of C"),
    ) else {
        return Ok(None);
    };
    let mut offsets = vec![0u64; ops.nrows + 1];

    let _s = tracing::debug_span!("one_pass", rows = ops.nrows, ranges = ranges.len()).entered();
    let chain = Chain::new(ranges.len());
    let next = AtomicUsize::new(0);
    let first_error: Mutex<Option<Error>> = Mutex::new(None);
    // Each range's row counts, handed to whichever thread takes the range.
    let count_parts: Vec<Mutex<&mut [u64]>> = plan::split_mut(&mut offsets[1..], &ranges)
        .into_iter()
        .map(Mutex::new)
        .collect();
    let c_cols = SharedSlots::new(cols.spare_capacity_mut());
    let c_vals = SharedSlots::new(vals.spare_capacity_mut());

    rayon::broadcast(|_| {
        let _unwinding = FailOnUnwind(&chain.failed);
        let mut staged_cols: Vec<MaybeUninit<u32>> = Vec::new();
        let mut staged_vals: Vec<MaybeUninit<T>> = Vec::new();
        loop {
            let r = next.fetch_add(1, Ordering::Relaxed);
            if r >= ranges.len() || chain.failed.load(Ordering::Relaxed) {
                return;
            }
            let result = (|| -> Result<()> {
                let bound = bounds[r] as usize;
                grow(&mut staged_cols, bound, "staged column indices of C")?;
                grow(&mut staged_vals, bound, "staged values of C")?;
                let mut counts = count_parts[r]
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
                let written = pool.with(|s| {
                    row_row::compute_rows_staged::<T, S>(
                        ops,
                        ranges[r].clone(),
                        products,
                        &mut staged_cols[..bound],
                        &mut staged_vals[..bound],
                        &mut counts[..],
                        s,
                    )
                })?;
                let Some(base) = chain.publish(r, written as u64) else {
                    return Ok(());
                };
                // SAFETY: `base..base + written` is this range's own part of C: the chain
                // gives every range the sum of the entries of the ranges before it, and each
                // range's entries are at most its bound, whose sum over all is C's length.
                unsafe {
                    c_cols.copy_in(base as usize, &staged_cols[..written]);
                    c_vals.copy_in(base as usize, &staged_vals[..written]);
                }
                let mut end = base;
                for count in counts.iter_mut() {
                    end += *count;
                    *count = end;
                }
                Ok(())
            })();
            if let Err(e) = result {
                chain.failed.store(true, Ordering::Relaxed);
                let mut slot = first_error
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
                slot.get_or_insert(e);
                return;
            }
        }
    });
    if let Some(e) = first_error
        .into_inner()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
    {
        return Err(e);
    }
    if chain.failed.load(Ordering::Relaxed) {
        return Err(Error::Device {
            backend: "cpu".into(),
            context: "SpGEMM".into(),
            message: "a worker thread stopped before finishing its rows".into(),
        });
    }
    drop(count_parts);
    let nnz = chain.bases[ranges.len()].load(Ordering::Acquire);
    // Every range published (none failed), so the last base is C's entry count, at most
    // `total`.
    let len = nnz as usize;
    // SAFETY: the ranges' parts of C tile `0..len` and each range wrote all of its part.
    unsafe {
        cols.set_len(len);
        vals.set_len(len);
    }
    cols.shrink_to_fit();
    vals.shrink_to_fit();
    // SAFETY: rows were written sorted and without repeats by the Row-Row accumulators, with
    // columns inside the window; offsets are the prefix sums of the rows' entries.
    Ok(Some(unsafe {
        Csr::from_parts_unchecked(ops.nrows, width, offsets, cols, vals)
    }))
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

/// Where each range's entries start in C: `bases[r]` is published by range `r - 1` once it
/// has counted its entries.
struct Chain {
    bases: Vec<AtomicU64>,
    failed: AtomicBool,
}

impl Chain {
    fn new(ranges: usize) -> Self {
        let bases = (0..=ranges)
            .map(|r| AtomicU64::new(if r == 0 { 0 } else { UNKNOWN }))
            .collect();
        Chain {
            bases,
            failed: AtomicBool::new(false),
        }
    }

    /// Waits for range `r`'s base, publishes range `r + 1`'s as `base + entries`, and returns
    /// `r`'s; `None` when another range failed (its base will never come).
    fn publish(&self, r: usize, entries: u64) -> Option<u64> {
        let mut spins = 0u32;
        let base = loop {
            let base = self.bases[r].load(Ordering::Acquire);
            if base != UNKNOWN {
                break base;
            }
            if self.failed.load(Ordering::Relaxed) {
                return None;
            }
            // The range before is being computed by another thread and is due about now.
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        };
        self.bases[r + 1].store(base + entries, Ordering::Release);
        Some(base)
    }
}

/// Marks the product failed when a worker unwinds, so that no other worker waits for a base
/// the unwinding one would have published.
struct FailOnUnwind<'f>(&'f AtomicBool);

impl Drop for FailOnUnwind<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.store(true, Ordering::Relaxed);
        }
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
