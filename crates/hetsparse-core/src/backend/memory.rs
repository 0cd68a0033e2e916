//! What an operation needs in memory before it runs, and reservations of device memory.
//!
//! A backend answers a requirement query ([`Backend::spgemm_requirement`](super::Backend::spgemm_requirement),
//! [`SpgemmPlan::requirement`](super::SpgemmPlan::requirement)) without running anything, the way faer
//! pairs each routine with a scratch query. Device backends take memory through a
//! [`MemoryPool`]: a reservation is held for as long as the memory is, so concurrent calls on
//! one device cannot both plan on the same free bytes.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::error::{Error, Result};

/// Memory an operation needs, by purpose, in bytes.
///
/// Device bytes are what the backend's device holds while the operation runs; for a backend
/// that computes in host memory they are host bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct MemoryRequirement {
    /// Operands copied into device memory for the call (resident operands cost nothing here).
    pub operand_bytes: u64,
    /// Work buffers: analysis, accumulators, staging of partial results.
    pub work_bytes: u64,
    /// The result, or the device buffers it passes through on its way to the host.
    pub output_bytes: u64,
    /// Page-locked host memory for overlapped transfers.
    pub pinned_host_bytes: u64,
}

impl MemoryRequirement {
    /// Device bytes in all: operands, work and output.
    pub fn device_bytes(&self) -> u64 {
        self.operand_bytes
            .saturating_add(self.work_bytes)
            .saturating_add(self.output_bytes)
    }
}

/// Bytes of a CSR matrix with `nrows` rows and `nnz` entries of `value_bytes` each: 64-bit
/// offsets, 32-bit column indices, the values.
pub fn csr_bytes(nrows: usize, nnz: u64, value_bytes: usize) -> u64 {
    (nrows as u64 + 1)
        .saturating_mul(8)
        .saturating_add(nnz.saturating_mul(4 + value_bytes as u64))
}

/// A device's memory accounts: a limit, and the bytes reserved under it by every call.
///
/// A pool may have a parent ([`MemoryPool::with_parent`]): a reservation then takes its bytes
/// from both, and gives them back to both when dropped. Backends on one physical device each
/// keep a pool of their own (their budget) under one pool of the device's memory, so that
/// together they cannot reserve more than the device has.
///
/// ```
/// use hetsparse_core::{BackendKind, MemoryPool};
/// let pool = MemoryPool::new(BackendKind::Other("example"), 1000);
/// let first = pool.reserve(600, "A")?;
/// assert!(pool.reserve(600, "B").is_err()); // would overcommit
/// drop(first);
/// assert_eq!(pool.reserve(600, "B")?.bytes(), 600);
/// assert_eq!(pool.peak(), 600);
///
/// // Two budgets of 800 bytes on a device of 1000.
/// let device = MemoryPool::new(BackendKind::Other("example"), 1000);
/// let (x, y) = (
///     MemoryPool::with_parent(BackendKind::Other("example"), 800, &device),
///     MemoryPool::with_parent(BackendKind::Other("example"), 800, &device),
/// );
/// let held = x.reserve(700, "A")?;
/// assert!(y.reserve(700, "B").is_err()); // each budget allows it, the device does not
/// assert_eq!(y.available(), 300);
/// drop(held);
/// assert_eq!(y.reserve(700, "B")?.bytes(), 700);
/// # Ok::<(), hetsparse_core::Error>(())
/// ```
#[derive(Debug)]
pub struct MemoryPool {
    backend: crate::BackendKind,
    limit: AtomicU64,
    reserved: AtomicU64,
    peak: AtomicU64,
    parent: Option<Arc<MemoryPool>>,
}

impl MemoryPool {
    /// A pool of `limit` bytes for a backend of kind `backend`.
    pub fn new(backend: crate::BackendKind, limit: u64) -> Arc<Self> {
        Arc::new(MemoryPool {
            backend,
            limit: AtomicU64::new(limit),
            reserved: AtomicU64::new(0),
            peak: AtomicU64::new(0),
            parent: None,
        })
    }

    /// A pool of `limit` bytes under `parent`: reservations take from both.
    pub fn with_parent(
        backend: crate::BackendKind,
        limit: u64,
        parent: &Arc<MemoryPool>,
    ) -> Arc<Self> {
        Arc::new(MemoryPool {
            backend,
            limit: AtomicU64::new(limit),
            reserved: AtomicU64::new(0),
            peak: AtomicU64::new(0),
            parent: Some(Arc::clone(parent)),
        })
    }

    /// The pool this one reserves from as well, if any.
    pub fn parent(&self) -> Option<&Arc<MemoryPool>> {
        self.parent.as_ref()
    }
    /// The most that may be reserved at once in this pool (its parent may allow less).
    pub fn limit(&self) -> u64 {
        self.limit.load(Ordering::Acquire)
    }
    /// Changes the limit; reservations already held stay.
    pub fn set_limit(&self, bytes: u64) {
        self.limit.store(bytes, Ordering::Release);
    }
    /// Bytes reserved now in this pool.
    pub fn reserved(&self) -> u64 {
        self.reserved.load(Ordering::Acquire)
    }
    /// Bytes that can still be reserved: the smallest of what this pool and its ancestors
    /// have left.
    pub fn available(&self) -> u64 {
        let own = self.limit().saturating_sub(self.reserved());
        self.parent.as_ref().map_or(own, |p| own.min(p.available()))
    }
    /// The most reserved at once since the pool was made or [`reset_peak`](Self::reset_peak).
    pub fn peak(&self) -> u64 {
        self.peak.load(Ordering::Acquire)
    }
    /// Starts measuring the peak again from what is reserved now.
    pub fn reset_peak(&self) {
        self.peak.store(self.reserved(), Ordering::Release);
    }

    /// Reserves `bytes` for `what` in this pool and its ancestors, or [`Error::OutOfMemory`]
    /// with the bytes needed and available (the smallest of what the pools have left).
    /// Released from all of them when the reservation is dropped.
    pub fn reserve(self: &Arc<Self>, bytes: u64, what: &str) -> Result<Reservation> {
        self.take(bytes, what)?;
        let parent = match &self.parent {
            None => None,
            Some(p) => match p.reserve(bytes, what) {
                Ok(r) => Some(Box::new(r)),
                Err(e) => {
                    self.reserved.fetch_sub(bytes, Ordering::AcqRel);
                    return Err(match e {
                        Error::OutOfMemory {
                            available_bytes, ..
                        } => self.out_of_memory(bytes, what, available_bytes),
                        other => other,
                    });
                }
            },
        };
        Ok(Reservation {
            pool: Arc::clone(self),
            bytes,
            _parent: parent,
        })
    }

    /// [`Error::OutOfMemory`] for `bytes` of `what`, `available` bytes left in an ancestor.
    fn out_of_memory(&self, bytes: u64, what: &str, available: u64) -> Error {
        let own = self.limit().saturating_sub(self.reserved());
        Error::OutOfMemory {
            backend: self.backend,
            what: what.into(),
            needed_bytes: bytes,
            available_bytes: own.min(available),
        }
    }

    /// Adds `bytes` to this pool's reservations, unless that would pass its limit.
    fn take(&self, bytes: u64, what: &str) -> Result<()> {
        let limit = self.limit();
        let mut now = self.reserved.load(Ordering::Acquire);
        loop {
            let next = now.saturating_add(bytes);
            if next > limit {
                let own = limit.saturating_sub(now);
                let available = self.parent.as_ref().map_or(own, |p| own.min(p.available()));
                return Err(Error::OutOfMemory {
                    backend: self.backend,
                    what: what.into(),
                    needed_bytes: bytes,
                    available_bytes: available,
                });
            }
            match self.reserved.compare_exchange_weak(
                now,
                next,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    self.peak.fetch_max(next, Ordering::AcqRel);
                    return Ok(());
                }
                Err(seen) => now = seen,
            }
        }
    }
}

/// Bytes reserved in a [`MemoryPool`], given back when dropped.
#[derive(Debug)]
pub struct Reservation {
    pool: Arc<MemoryPool>,
    bytes: u64,
    /// The same bytes in the parent pool, released after this pool's.
    _parent: Option<Box<Reservation>>,
}

impl Reservation {
    /// Bytes held.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
    /// The pool it was taken from.
    pub fn pool(&self) -> &Arc<MemoryPool> {
        &self.pool
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.pool.reserved.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn out_of_memory(e: Error) -> (u64, u64) {
        match e {
            Error::OutOfMemory {
                needed_bytes,
                available_bytes,
                ..
            } => (needed_bytes, available_bytes),
            other => panic!("expected OutOfMemory, got {other}"),
        }
    }

    #[test]
    fn two_children_cannot_exceed_their_parent_together() {
        let device = MemoryPool::new(crate::BackendKind::Other("test"), 1000);
        let x = MemoryPool::with_parent(crate::BackendKind::Other("test"), 800, &device);
        let y = MemoryPool::with_parent(crate::BackendKind::Other("test"), 800, &device);
        let a = x.reserve(600, "A").unwrap();
        assert_eq!((x.reserved(), device.reserved()), (600, 600));
        // y's own budget allows 500; the device has 400 left.
        let err = y.reserve(500, "B").unwrap_err();
        let message = err.to_string();
        assert!(
            message.contains("500") && message.contains("400"),
            "{message}"
        );
        assert_eq!(out_of_memory(err), (500, 400));
        // The failed reservation left nothing behind in either pool.
        assert_eq!((y.reserved(), device.reserved()), (0, 600));
        // The child's own limit still applies: x has 200 left of its 800.
        assert_eq!(out_of_memory(x.reserve(300, "C").unwrap_err()), (300, 200));
        let b = y.reserve(400, "B").unwrap();
        assert_eq!(
            (y.available(), x.available(), device.available()),
            (0, 0, 0)
        );
        drop(a);
        assert_eq!((x.reserved(), device.reserved()), (0, 400));
        assert_eq!(x.available(), 600);
        drop(b);
        assert_eq!((y.reserved(), device.reserved()), (0, 0));
        assert_eq!(device.peak(), 1000);
    }

    #[test]
    fn concurrent_reservations_never_overcommit_the_parent() {
        let device = MemoryPool::new(crate::BackendKind::Other("test"), 10_000);
        let children: Vec<_> = (0..4)
            .map(|_| MemoryPool::with_parent(crate::BackendKind::Other("test"), 6_000, &device))
            .collect();
        let start = std::sync::Barrier::new(children.len());
        std::thread::scope(|s| {
            for (t, child) in children.iter().enumerate() {
                let (device, start) = (&device, &start);
                s.spawn(move || {
                    start.wait();
                    let mut held = Vec::new();
                    for k in 0..2_000u64 {
                        let bytes = 1 + (k * 37 + t as u64 * 11) % 700;
                        if let Ok(r) = child.reserve(bytes, "work") {
                            held.push(r);
                        }
                        assert!(device.reserved() <= device.limit());
                        assert!(child.reserved() <= child.limit());
                        if held.len() > 5 {
                            held.remove((k % 5) as usize);
                        }
                    }
                });
            }
        });
        assert!(device.peak() <= 10_000, "peak {}", device.peak());
        assert_eq!(device.reserved(), 0);
        assert!(children.iter().all(|c| c.reserved() == 0));
    }
}
