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
/// ```
/// use hetsparse_core::MemoryPool;
/// let pool = MemoryPool::new("example", 1000);
/// let first = pool.reserve(600, "A")?;
/// assert!(pool.reserve(600, "B").is_err()); // would overcommit
/// drop(first);
/// assert_eq!(pool.reserve(600, "B")?.bytes(), 600);
/// assert_eq!(pool.peak(), 600);
/// # Ok::<(), hetsparse_core::Error>(())
/// ```
#[derive(Debug)]
pub struct MemoryPool {
    backend: &'static str,
    limit: AtomicU64,
    reserved: AtomicU64,
    peak: AtomicU64,
}

impl MemoryPool {
    /// A pool of `limit` bytes for the backend named `backend`.
    pub fn new(backend: &'static str, limit: u64) -> Arc<Self> {
        Arc::new(MemoryPool {
            backend,
            limit: AtomicU64::new(limit),
            reserved: AtomicU64::new(0),
            peak: AtomicU64::new(0),
        })
    }
    /// The most that may be reserved at once.
    pub fn limit(&self) -> u64 {
        self.limit.load(Ordering::Acquire)
    }
    /// Changes the limit; reservations already held stay.
    pub fn set_limit(&self, bytes: u64) {
        self.limit.store(bytes, Ordering::Release);
    }
    /// Bytes reserved now.
    pub fn reserved(&self) -> u64 {
        self.reserved.load(Ordering::Acquire)
    }
    /// Bytes that can still be reserved.
    pub fn available(&self) -> u64 {
        self.limit().saturating_sub(self.reserved())
    }
    /// The most reserved at once since the pool was made or [`reset_peak`](Self::reset_peak).
    pub fn peak(&self) -> u64 {
        self.peak.load(Ordering::Acquire)
    }
    /// Starts measuring the peak again from what is reserved now.
    pub fn reset_peak(&self) {
        self.peak.store(self.reserved(), Ordering::Release);
    }

    /// Reserves `bytes` for `what`, or [`Error::OutOfMemory`] with the bytes needed and
    /// available. Released when the reservation is dropped.
    pub fn reserve(self: &Arc<Self>, bytes: u64, what: &str) -> Result<Reservation> {
        let limit = self.limit();
        let mut now = self.reserved.load(Ordering::Acquire);
        loop {
            let next = now.saturating_add(bytes);
            if next > limit {
                return Err(Error::OutOfMemory {
                    backend: self.backend.into(),
                    what: what.into(),
                    needed_bytes: bytes,
                    available_bytes: limit.saturating_sub(now),
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
                    return Ok(Reservation {
                        pool: Arc::clone(self),
                        bytes,
                    });
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
