//! Device memory: budgeted allocations, an arena for pipelined loops, transfers, pinned
//! host staging.
//!
//! Every allocation goes through a [`MemoryTracker`], which enforces the budget the caller
//! set with [`crate::CudaBackend::with_memory_budget`]. Loops that run many kernels (the
//! SpGEMM pipeline, chunked products) allocate one [`DeviceArena`] up front and carve it per
//! step, so that nothing is allocated inside the loop (Xia et al. §IV.B).

use std::cell::Cell;
use std::marker::PhantomData;
use std::mem::size_of;
use std::os::raw::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use cust::memory::{DeviceCopy, LockedBuffer};
use hetsparse_core::Result;

use crate::context::{Arg, Stream};
use crate::error::{check, from_cust, out_of_memory};
use crate::ffi::{self, CUcontext, CUdeviceptr};

/// Device bytes in use and the limit they must stay under.
#[derive(Debug)]
pub struct MemoryTracker {
    budget: AtomicU64,
    device_total: AtomicU64,
    used: AtomicU64,
}

impl MemoryTracker {
    /// A tracker with an optional budget in bytes (`None`: the device's memory).
    pub fn new(budget: Option<u64>) -> Self {
        MemoryTracker {
            budget: AtomicU64::new(budget.unwrap_or(u64::MAX)),
            device_total: AtomicU64::new(u64::MAX),
            used: AtomicU64::new(0),
        }
    }
    pub(crate) fn set_device_total(&self, bytes: u64) {
        self.device_total.store(bytes, Ordering::Relaxed);
    }
    pub(crate) fn set_budget(&self, bytes: u64) {
        self.budget.store(bytes, Ordering::Relaxed);
    }
    /// The limit: the budget or the device's memory, whichever is smaller.
    pub fn limit(&self) -> u64 {
        self.budget
            .load(Ordering::Relaxed)
            .min(self.device_total.load(Ordering::Relaxed))
    }
    /// Bytes allocated now.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }
    /// Bytes that may still be allocated under the budget (device memory may run out first).
    pub fn available(&self) -> u64 {
        self.limit().saturating_sub(self.used())
    }
    fn reserve(&self, bytes: u64, what: &str) -> Result<()> {
        let limit = self.limit();
        let mut used = self.used.load(Ordering::Relaxed);
        loop {
            let next = used.saturating_add(bytes);
            if next > limit {
                return Err(out_of_memory(what, bytes, limit.saturating_sub(used)));
            }
            match self
                .used
                .compare_exchange_weak(used, next, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => return Ok(()),
                Err(now) => used = now,
            }
        }
    }
    fn release(&self, bytes: u64) {
        self.used.fetch_sub(bytes, Ordering::AcqRel);
    }
}

/// A typed view of device memory: a pointer and a length. It borrows the buffer or arena it
/// came from, so it cannot outlive the memory.
#[derive(Debug)]
pub struct DeviceSlice<'a, T> {
    ptr: CUdeviceptr,
    len: usize,
    _memory: PhantomData<&'a T>,
}

impl<T> Clone for DeviceSlice<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for DeviceSlice<'_, T> {}

impl<'a, T: Copy> DeviceSlice<'a, T> {
    /// Elements.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether the slice is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Size in bytes.
    pub fn bytes(&self) -> u64 {
        (self.len * size_of::<T>()) as u64
    }
    /// The device address, for kernel arguments.
    pub fn arg(&self) -> Arg {
        Arg::U64(self.ptr)
    }
    /// Elements `start..start + len`.
    pub fn sub(&self, start: usize, len: usize) -> DeviceSlice<'a, T> {
        assert!(start + len <= self.len, "device sub-slice out of range");
        DeviceSlice {
            ptr: self.ptr + (start * size_of::<T>()) as u64,
            len,
            _memory: PhantomData,
        }
    }
    /// Copies `host` into the start of the slice, queued on `stream`. Pageable host memory
    /// is staged by the driver before the call returns, so `host` may be reused at once.
    pub fn upload(&self, stream: &Stream, host: &[T]) -> Result<()> {
        assert!(
            host.len() <= self.len,
            "upload larger than the device slice"
        );
        if host.is_empty() {
            return Ok(());
        }
        // SAFETY: both ranges are valid for `host.len()` elements.
        check(
            unsafe {
                ffi::cuMemcpyHtoDAsync_v2(
                    self.ptr,
                    host.as_ptr() as *const c_void,
                    std::mem::size_of_val(host),
                    stream.raw(),
                )
            },
            "copying to the device",
        )
    }
    /// Copies the start of the slice into `host`, waiting for `stream` first and for the copy.
    pub fn download(&self, stream: &Stream, host: &mut [T]) -> Result<()> {
        // SAFETY: the stream is synchronised before `host` is released to the caller, so the
        // copy (asynchronous only into pinned memory) is over by then.
        unsafe { self.download_unchecked(stream, host)? };
        stream.synchronize()
    }
    /// Downloads the whole slice into a new vector.
    pub fn to_vec(&self, stream: &Stream) -> Result<Vec<T>>
    where
        T: Default,
    {
        let mut v = vec![T::default(); self.len];
        self.download(stream, &mut v)?;
        Ok(v)
    }
    /// Queues a copy of `len` elements into `host[host_start..]` (pinned, so truly
    /// asynchronous); the host must not read them before the stream reaches this point.
    pub fn download_async(
        &self,
        stream: &Stream,
        host: &mut LockedBuffer<T>,
        host_start: usize,
        len: usize,
    ) -> Result<()>
    where
        T: DeviceCopy,
    {
        assert!(
            host_start + len <= host.len(),
            "download past the pinned buffer"
        );
        // SAFETY: a LockedBuffer is page-locked; callers wait for the stream before reading
        // it, and it cannot be freed while borrowed here.
        unsafe { self.download_unchecked(stream, &mut host[host_start..host_start + len]) }
    }

    /// Queues a copy of the first `host.len()` elements into `host` on `stream`.
    ///
    /// # Safety
    /// `host` must be page-locked (else the copy is not asynchronous and the driver may read
    /// it later) and must be neither read, written nor freed until `stream` has passed this
    /// point.
    pub unsafe fn download_unchecked(&self, stream: &Stream, host: &mut [T]) -> Result<()> {
        assert!(
            host.len() <= self.len,
            "download larger than the device slice"
        );
        if host.is_empty() {
            return Ok(());
        }
        // SAFETY: ranges checked above; lifetime by the caller's contract.
        check(
            unsafe {
                ffi::cuMemcpyDtoHAsync_v2(
                    host.as_mut_ptr() as *mut c_void,
                    self.ptr,
                    std::mem::size_of_val(host),
                    stream.raw(),
                )
            },
            "copying from the device (asynchronous)",
        )
    }
    /// Fills the slice with zero bytes, queued on `stream`.
    pub fn zero(&self, stream: &Stream) -> Result<()> {
        self.fill_bytes(stream, 0)
    }
    /// Fills every byte with `byte`, queued on `stream`.
    pub fn fill_bytes(&self, stream: &Stream, byte: u8) -> Result<()> {
        if self.len == 0 {
            return Ok(());
        }
        // SAFETY: the range is the slice.
        check(
            unsafe { ffi::cuMemsetD8Async(self.ptr, byte, self.bytes() as usize, stream.raw()) },
            "filling device memory",
        )
    }
}

/// An owned device allocation of `len` elements of `T`, counted against the budget.
pub struct DeviceBuffer<T> {
    ptr: CUdeviceptr,
    len: usize,
    bytes: u64,
    context: CUcontext,
    tracker: Arc<MemoryTracker>,
    _type: PhantomData<T>,
}

// SAFETY: device memory is not tied to a host thread.
unsafe impl<T: Send> Send for DeviceBuffer<T> {}
unsafe impl<T: Sync> Sync for DeviceBuffer<T> {}

impl<T: Copy> DeviceBuffer<T> {
    /// Allocates `len` uninitialised elements on the current context.
    pub fn new(tracker: &Arc<MemoryTracker>, len: usize, what: &str) -> Result<Self> {
        let bytes = (len as u64)
            .checked_mul(size_of::<T>() as u64)
            .ok_or_else(|| out_of_memory(what, u64::MAX, tracker.available()))?;
        tracker.reserve(bytes, what)?;
        let mut ptr: CUdeviceptr = 0;
        let mut context: CUcontext = std::ptr::null_mut();
        if bytes > 0 {
            // SAFETY: allocation into a local.
            let code = unsafe { ffi::cuMemAlloc_v2(&mut ptr, bytes as usize) };
            if code != ffi::CUDA_SUCCESS {
                tracker.release(bytes);
                if code == 2 {
                    return Err(out_of_memory(what, bytes, free_device_memory()));
                }
                check(code, what)?;
            }
            // SAFETY: query into a local.
            unsafe { ffi::cuCtxGetCurrent(&mut context) };
        }
        Ok(DeviceBuffer {
            ptr,
            len,
            bytes,
            context,
            tracker: tracker.clone(),
            _type: PhantomData,
        })
    }
    /// Allocates and fills from `host`.
    pub fn from_host(
        tracker: &Arc<MemoryTracker>,
        stream: &Stream,
        host: &[T],
        what: &str,
    ) -> Result<Self> {
        let b = Self::new(tracker, host.len(), what)?;
        b.slice().upload(stream, host)?;
        Ok(b)
    }
    /// The whole buffer as a slice.
    pub fn slice(&self) -> DeviceSlice<'_, T> {
        DeviceSlice {
            ptr: self.ptr,
            len: self.len,
            _memory: PhantomData,
        }
    }
    /// Elements.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether the buffer is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl<T> Drop for DeviceBuffer<T> {
    fn drop(&mut self) {
        if self.bytes > 0 {
            // SAFETY: allocated by cuMemAlloc on `context`, freed once; the context is made
            // current first because the dropping thread may have another one.
            unsafe {
                ffi::cuCtxSetCurrent(self.context);
                ffi::cuMemFree_v2(self.ptr);
            }
        }
        self.tracker.release(self.bytes);
    }
}

fn free_device_memory() -> u64 {
    let (mut free, mut total) = (0usize, 0usize);
    // SAFETY: query into locals.
    unsafe { ffi::cuMemGetInfo_v2(&mut free, &mut total) };
    free as u64
}

/// Alignment of arena allocations (the driver's own is 256 bytes).
const ARENA_ALIGN: u64 = 256;

/// One device allocation carved into slices by a bump pointer; [`DeviceArena::reset`] frees
/// everything at once. Slices borrow the arena, so a reset cannot happen while one is alive.
pub struct DeviceArena {
    buffer: DeviceBuffer<u8>,
    top: Cell<u64>,
}

impl DeviceArena {
    /// Allocates an arena of `bytes`.
    pub fn new(tracker: &Arc<MemoryTracker>, bytes: u64, what: &str) -> Result<Self> {
        Ok(DeviceArena {
            buffer: DeviceBuffer::new(tracker, bytes as usize, what)?,
            top: Cell::new(0),
        })
    }
    /// Bytes in the arena.
    pub fn capacity(&self) -> u64 {
        self.buffer.bytes
    }
    /// Bytes not handed out yet.
    pub fn remaining(&self) -> u64 {
        self.capacity() - self.top.get()
    }
    /// Bytes `len` elements of `T` take in the arena, alignment included.
    pub fn footprint<T>(len: u64) -> u64 {
        (len * size_of::<T>() as u64).div_ceil(ARENA_ALIGN) * ARENA_ALIGN
    }
    /// A slice of `len` uninitialised elements.
    pub fn alloc<T: Copy>(&self, len: usize, what: &str) -> Result<DeviceSlice<'_, T>> {
        let need = Self::footprint::<T>(len as u64);
        if need > self.remaining() {
            return Err(out_of_memory(what, need, self.remaining()));
        }
        let start = self.top.get();
        self.top.set(start + need);
        Ok(DeviceSlice {
            ptr: self.buffer.ptr + start,
            len,
            _memory: PhantomData,
        })
    }
    /// Allocates and uploads `host`.
    pub fn upload<T: Copy>(
        &self,
        stream: &Stream,
        host: &[T],
        what: &str,
    ) -> Result<DeviceSlice<'_, T>> {
        let s = self.alloc(host.len(), what)?;
        s.upload(stream, host)?;
        Ok(s)
    }
    /// Hands the whole arena out again.
    pub fn reset(&mut self) {
        self.top.set(0);
    }
}

/// Page-locked host memory for truly asynchronous copies.
pub type PinnedBuffer<T> = LockedBuffer<T>;

/// Allocates a pinned buffer of `len` elements (at least one, the driver rejects zero).
pub fn pinned<T: DeviceCopy + Default>(len: usize, what: &str) -> Result<PinnedBuffer<T>> {
    LockedBuffer::new(&T::default(), len.max(1)).map_err(|e| from_cust(e, what))
}

/// Pinned host buffers kept between operations: page-locking memory takes milliseconds per
/// tens of megabytes, far longer than the copies it speeds up, so staging buffers are reused.
#[derive(Default)]
pub struct PinnedPool {
    free: Mutex<Vec<LockedBuffer<u8>>>,
}

/// Buffers the pool keeps when they come back.
const PINNED_POOL_KEEP: usize = 4;

impl PinnedPool {
    /// A buffer of at least `bytes`, reused when the pool has one.
    pub fn take(&self, bytes: usize, what: &str) -> Result<PooledPinned<'_>> {
        let bytes = bytes.max(1);
        let reused = {
            let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
            let best = free
                .iter()
                .enumerate()
                .filter(|(_, b)| b.len() >= bytes)
                .min_by_key(|(_, b)| b.len())
                .map(|(i, _)| i);
            best.map(|i| free.swap_remove(i))
        };
        let buffer = match reused {
            Some(b) => b,
            // SAFETY: every bit pattern is a valid u8.
            None => {
                unsafe { LockedBuffer::uninitialized(bytes) }.map_err(|e| from_cust(e, what))?
            }
        };
        Ok(PooledPinned {
            buffer: Some(buffer),
            pool: self,
        })
    }
}

/// A pinned buffer on loan from a [`PinnedPool`]; it goes back when dropped.
pub struct PooledPinned<'p> {
    buffer: Option<LockedBuffer<u8>>,
    pool: &'p PinnedPool,
}

impl PooledPinned<'_> {
    /// The first `len` elements of `T` (the buffer is page-aligned).
    pub fn typed<T: DeviceCopy>(&self, len: usize) -> &[T] {
        let b = self.buffer.as_ref().expect("present until drop");
        assert!(
            len * size_of::<T>() <= b.len() && b.as_ptr() as usize % std::mem::align_of::<T>() == 0
        );
        // SAFETY: in bounds and aligned (checked); any bits are valid for the DeviceCopy
        // types used here (integers, floats and their wrappers).
        unsafe { std::slice::from_raw_parts(b.as_ptr() as *const T, len) }
    }
    /// The first `len` elements of `T`, writable.
    pub fn typed_mut<T: DeviceCopy>(&mut self, len: usize) -> &mut [T] {
        let b = self.buffer.as_mut().expect("present until drop");
        assert!(
            len * size_of::<T>() <= b.len() && b.as_ptr() as usize % std::mem::align_of::<T>() == 0
        );
        // SAFETY: as in `typed`, and borrowed mutably.
        unsafe { std::slice::from_raw_parts_mut(b.as_mut_ptr() as *mut T, len) }
    }
}

impl Drop for PooledPinned<'_> {
    fn drop(&mut self) {
        if let Some(b) = self.buffer.take() {
            let mut free = self.pool.free.lock().unwrap_or_else(|p| p.into_inner());
            free.push(b);
            if free.len() > PINNED_POOL_KEEP {
                // Keep the largest ones.
                free.sort_by_key(|b| std::cmp::Reverse(b.len()));
                free.truncate(PINNED_POOL_KEEP);
            }
        }
    }
}
