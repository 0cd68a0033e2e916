//! Device memory: budgeted allocations, an arena for pipelined loops, transfers, pinned
//! host staging.
//!
//! Every allocation reserves its bytes in the device's [`MemoryPool`] (hetsparse-core's), whose
//! limit is the device's memory or the budget the caller set with
//! [`crate::CudaBackend::with_memory_budget`]; the reservation is held as long as the memory. Loops that run many kernels (the
//! SpGEMM pipeline, chunked products) allocate one [`DeviceArena`] up front and carve it per
//! step, so that nothing is allocated inside the loop (Xia et al. §IV.B).

use std::cell::Cell;
use std::marker::PhantomData;
use std::mem::size_of;
use std::os::raw::c_void;
use std::sync::{Arc, Mutex};

use cust::memory::{DeviceCopy, LockedBuffer};
use hetsparse_core::{MemoryPool, Reservation, Result};

use crate::context::{Arg, Event, Gpu, Stream};
use crate::error::{check, from_cust, out_of_memory};
use crate::ffi::{self, CUcontext, CUdeviceptr};

/// A read-only view of device memory: a pointer and a length. It borrows the buffer or arena
/// it came from, so it cannot outlive the memory, and may be copied freely: nothing is written
/// through it. Writes go through a [`DeviceSliceMut`], which only `&mut` access hands out.
///
/// A view is for work queued on the stream it was obtained for ([`DeviceBuffer::read`]): that
/// call ordered the stream after the buffer's writers and noted the use for the free.
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

/// A writable view of device memory, handed out for `&mut` of the memory
/// ([`DeviceBuffer::write`], [`DeviceArena::alloc`]), so that at most one exists for a range:
/// it is not `Copy`, and a read view of it ([`DeviceSliceMut::view`]) borrows it. Kernel
/// outputs take their pointer from [`DeviceSliceMut::arg_mut`].
///
/// ```compile_fail,E0382
/// fn two_writers(w: hetsparse_cuda::DeviceSliceMut<'_, u32>) {
///     let copy = w; // moves: a write view is not Copy
///     let again = w;
/// }
/// ```
///
/// ```compile_fail,E0596
/// fn write_through_shared(b: &hetsparse_cuda::DeviceBuffer<u32>, s: &hetsparse_cuda::Stream) {
///     let _ = b.write(s); // writing needs `&mut DeviceBuffer`
/// }
/// ```
#[derive(Debug)]
pub struct DeviceSliceMut<'a, T> {
    ptr: CUdeviceptr,
    len: usize,
    _memory: PhantomData<&'a mut T>,
}

impl<'a, T: Copy> DeviceSliceMut<'a, T> {
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
    /// The device address, for a kernel argument the kernel may write through.
    pub fn arg_mut(&mut self) -> Arg {
        Arg::U64(self.ptr)
    }
    /// A read view, borrowing this one (no write through it meanwhile).
    pub fn view(&self) -> DeviceSlice<'_, T> {
        DeviceSlice {
            ptr: self.ptr,
            len: self.len,
            _memory: PhantomData,
        }
    }
    /// The memory as a read view for the rest of its borrow: what was written is only read
    /// from here on.
    pub fn into_view(self) -> DeviceSlice<'a, T> {
        DeviceSlice {
            ptr: self.ptr,
            len: self.len,
            _memory: PhantomData,
        }
    }
    /// Elements `start..start + len`, writable while this one is borrowed.
    pub fn sub_mut(&mut self, start: usize, len: usize) -> DeviceSliceMut<'_, T> {
        assert!(start + len <= self.len, "device sub-slice out of range");
        DeviceSliceMut {
            ptr: self.ptr + (start * size_of::<T>()) as u64,
            len,
            _memory: PhantomData,
        }
    }
    /// Splits into elements `..mid` and `mid..`, both writable.
    pub fn split_at_mut(self, mid: usize) -> (DeviceSliceMut<'a, T>, DeviceSliceMut<'a, T>) {
        assert!(mid <= self.len, "device split out of range");
        (
            DeviceSliceMut {
                ptr: self.ptr,
                len: mid,
                _memory: PhantomData,
            },
            DeviceSliceMut {
                ptr: self.ptr + (mid * size_of::<T>()) as u64,
                len: self.len - mid,
                _memory: PhantomData,
            },
        )
    }
    /// Copies `host` into the start of the slice, queued on `stream`; `host` may be reused as
    /// soon as this returns. Pageable host memory is staged by the driver before the call
    /// returns; from page-locked memory the copy is truly asynchronous, so the stream is
    /// waited for (use [`DeviceSliceMut::upload_async`] to overlap such a copy).
    pub fn upload(&mut self, stream: &Stream, host: &[T]) -> Result<()> {
        // SAFETY: the copy is over, or has staged `host`, before it is handed back.
        unsafe { self.upload_async(stream, host)? };
        if !host.is_empty() && is_page_locked(host.as_ptr() as *const c_void) {
            stream.synchronize()?;
        }
        Ok(())
    }
    /// Copies `host` into the start of the slice, queued on `stream` behind what is there;
    /// `host` may be reused as soon as this returns (large copies are waited for). Pageable
    /// memory is copied by the driver at a fraction of the link's speed, so large arrays go
    /// through [`STAGES`] page-locked buffers of
    /// [`STAGE_BYTES`] from `pool`, filled by the host's threads while earlier pieces cross.
    pub fn upload_staged(&mut self, stream: &Stream, pool: &PinnedPool, host: &[T]) -> Result<()>
    where
        T: DeviceCopy + Send + Sync,
    {
        assert!(
            host.len() <= self.len,
            "upload larger than the device slice"
        );
        let size = size_of::<T>().max(1);
        if (std::mem::size_of_val(host) as u64) < STAGE_MIN_BYTES
            || is_page_locked(host.as_ptr() as *const c_void)
        {
            return self.upload(stream, host);
        }
        // A copy smaller than a stage locks (when the pool has nothing to lend) only what it
        // needs: locking costs time in proportion to the bytes.
        let piece = (STAGE_BYTES as usize / size).max(1).min(host.len().max(1));
        let pieces = host.len().div_ceil(piece);
        let stages = STAGES.min(pieces);
        let mut stage = Vec::with_capacity(stages);
        let mut sent = Vec::with_capacity(stages);
        for _ in 0..stages {
            stage.push(pool.take(piece * size, "pinned upload staging")?);
            sent.push(Event::new(false)?);
        }
        let result = (|| -> Result<()> {
            for k in 0..pieces {
                let i = k % stages;
                if k >= stages {
                    // The copy that read this buffer last is over.
                    sent[i].synchronize()?;
                }
                let (start, n) = (k * piece, piece.min(host.len() - k * piece));
                let to = stage[i].typed_mut::<T>(n);
                // SAFETY: a view of initialised values as MaybeUninit<T> (same layout), through
                // which only values of T are written.
                let to = unsafe { &mut *(to as *mut [T] as *mut [std::mem::MaybeUninit<T>]) };
                parallel_copy(to, &host[start..start + n]);
                // SAFETY: the staging buffer is page-locked; it is written again or returned
                // to the pool only after its event has been waited for.
                unsafe {
                    self.sub_mut(start, n)
                        .upload_async(stream, stage[i].typed::<T>(n))?
                };
                sent[i].record(stream)?;
            }
            for event in sent.iter().take(pieces.min(stages)) {
                event.synchronize()?;
            }
            Ok(())
        })();
        if result.is_err() {
            let _ = stream.synchronize();
        }
        result
    }
    /// Queues a copy of `host` into the start of the slice on `stream`.
    ///
    /// # Safety
    /// If `host` is page-locked the copy runs after this returns: `host` must be neither
    /// written nor freed until `stream` has passed this point.
    pub unsafe fn upload_async(&mut self, stream: &Stream, host: &[T]) -> Result<()> {
        assert!(
            host.len() <= self.len,
            "upload larger than the device slice"
        );
        if host.is_empty() {
            return Ok(());
        }
        // SAFETY: both ranges are valid for `host.len()` elements; `host`'s lifetime by the
        // caller's contract.
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
    /// Copies `src` (device memory of the same context) into the start of the slice, queued on
    /// `stream` behind what is there, and waits for it: both may be reused or freed once this
    /// returns.
    pub fn copy_from(&mut self, stream: &Stream, src: DeviceSlice<'_, T>) -> Result<()> {
        assert!(src.len <= self.len, "copy larger than the device slice");
        if src.len == 0 {
            return Ok(());
        }
        // SAFETY: both ranges are device memory valid for `src.len` elements while borrowed,
        // and the stream is waited for before the borrows end.
        check(
            unsafe {
                ffi::cuMemcpyDtoDAsync_v2(self.ptr, src.ptr, src.len * size_of::<T>(), stream.raw())
            },
            "copying within the device",
        )?;
        stream.synchronize()
    }
    /// Fills the slice with zero bytes, queued on `stream`.
    pub fn zero(&mut self, stream: &Stream) -> Result<()> {
        self.fill_bytes(stream, 0)
    }
    /// Fills every byte with `byte`, queued on `stream`.
    pub fn fill_bytes(&mut self, stream: &Stream, byte: u8) -> Result<()> {
        if self.len == 0 {
            return Ok(());
        }
        // SAFETY: the range is the slice, borrowed mutably.
        check(
            unsafe { ffi::cuMemsetD8Async(self.ptr, byte, self.bytes() as usize, stream.raw()) },
            "filling device memory",
        )
    }
}

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
    /// The device address, for a kernel argument the kernel only reads.
    pub fn arg(&self) -> Arg {
        Arg::U64(self.ptr)
    }
    /// The same memory as bytes: what a download of values that not every byte pattern is
    /// (`bool`) reads before it checks them. `None` unless `T` is one byte.
    pub(crate) fn as_bytes(&self) -> Option<DeviceSlice<'a, u8>> {
        (size_of::<T>() == 1).then_some(DeviceSlice {
            ptr: self.ptr,
            len: self.len,
            _memory: PhantomData,
        })
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
    /// Downloads the whole slice into a new vector through page-locked staging buffers from
    /// `pool` ([`DeviceSlice::download_staged`]).
    pub fn to_vec_staged(&self, stream: &Stream, pool: &PinnedPool) -> Result<Vec<T>>
    where
        T: DeviceCopy + Send + Sync,
    {
        let mut out = hetsparse_core::host::try_with_capacity::<T>(self.len, "downloaded array")?;
        hetsparse_core::advise_huge_pages(out.spare_capacity_mut());
        self.download_staged(stream, pool, &mut out.spare_capacity_mut()[..self.len])?;
        // SAFETY: download_staged wrote all `len` elements.
        unsafe { out.set_len(self.len) };
        Ok(out)
    }
    /// Copies the slice into `out` (of the slice's length), waiting for `stream` first and for
    /// the copy. Copies into pageable memory run at a fraction of the link's speed and the
    /// fresh pages they fault in cost more than the copy, so large slices come through
    /// [`STAGES`] page-locked buffers of [`STAGE_BYTES`] from `pool`: while one piece lands in
    /// a buffer, the host's threads copy the piece before it out of another.
    pub fn download_staged(
        &self,
        stream: &Stream,
        pool: &PinnedPool,
        out: &mut [std::mem::MaybeUninit<T>],
    ) -> Result<()>
    where
        T: DeviceCopy + Send + Sync,
    {
        self.download_staged_into(stream, pool, &mut [out])
    }

    /// [`download_staged`](Self::download_staged) into several host slices: the slice's
    /// elements in order fill `outs[0]`, then `outs[1]`, and so on (their lengths must add up
    /// to the slice's), one pipeline for them all.
    pub fn download_staged_into(
        &self,
        stream: &Stream,
        pool: &PinnedPool,
        outs: &mut [&mut [std::mem::MaybeUninit<T>]],
    ) -> Result<()>
    where
        T: DeviceCopy + Send + Sync,
    {
        assert_eq!(
            outs.iter().map(|o| o.len()).sum::<usize>(),
            self.len,
            "download into buffers of another length"
        );
        let size = size_of::<T>().max(1);
        if self.bytes() < STAGE_MIN_BYTES {
            let mut start = 0;
            for out in outs.iter_mut() {
                // SAFETY: zero bytes first, so that the slice of T made below is initialised
                // (all zero bits are a valid value of the plain integer and floating-point
                // types this crate copies, as `PooledPinned::typed` relies on too);
                // MaybeUninit<T> has T's layout. The copy into pageable memory is over when
                // the call returns, and the stream is waited for anyway.
                let direct = unsafe {
                    std::ptr::write_bytes(out.as_mut_ptr(), 0, out.len());
                    std::slice::from_raw_parts_mut(out.as_mut_ptr() as *mut T, out.len())
                };
                unsafe {
                    self.sub(start, direct.len())
                        .download_unchecked(stream, direct)?
                };
                start += direct.len();
            }
            return stream.synchronize();
        }
        // Where each output starts in the slice, to scatter a landed piece.
        let mut starts = Vec::with_capacity(outs.len() + 1);
        starts.push(0usize);
        for out in outs.iter() {
            starts.push(starts[starts.len() - 1] + out.len());
        }
        let mut scatter = |from: usize, landed: &[T]| {
            let to = from + landed.len();
            let mut o = starts.partition_point(|&s| s <= from) - 1;
            while o < outs.len() && starts[o] < to {
                let (lo, hi) = (from.max(starts[o]), to.min(starts[o + 1]));
                if lo < hi {
                    parallel_copy(
                        &mut outs[o][lo - starts[o]..hi - starts[o]],
                        &landed[lo - from..hi - from],
                    );
                }
                o += 1;
            }
        };
        // As for uploads: a copy smaller than a stage locks only what it needs.
        let piece = (STAGE_BYTES as usize / size).max(1).min(self.len.max(1));
        let pieces = self.len.div_ceil(piece);
        let stages = STAGES.min(pieces);
        let mut stage = Vec::with_capacity(stages);
        let mut landed = Vec::with_capacity(stages);
        for _ in 0..stages {
            stage.push(pool.take(piece * size, "pinned download staging")?);
            landed.push(Event::new(false)?);
        }
        let queue = |k: usize, stage: &mut [PooledPinned<'_>]| -> Result<()> {
            let (start, n) = (k * piece, piece.min(self.len - k * piece));
            // SAFETY: the staging buffer is page-locked, and read or returned to the pool
            // only after its event has been waited for.
            unsafe {
                self.sub(start, n)
                    .download_unchecked(stream, stage[k % stages].typed_mut::<T>(n))?
            };
            landed[k % stages].record(stream)
        };
        let result = (|| -> Result<()> {
            for k in 0..stages {
                queue(k, &mut stage)?;
            }
            for k in 0..pieces {
                let i = k % stages;
                landed[i].synchronize()?;
                let (start, n) = (k * piece, piece.min(self.len - k * piece));
                scatter(start, stage[i].typed::<T>(n));
                if k + stages < pieces {
                    queue(k + stages, &mut stage)?;
                }
            }
            Ok(())
        })();
        if result.is_err() {
            // Copies may still be queued into the staging buffers, which go back to the pool.
            let _ = stream.synchronize();
        }
        result
    }
    /// Queues a copy of `len` elements into `host[host_start..]` (pinned, so truly
    /// asynchronous).
    ///
    /// # Safety
    /// The copy runs after this returns: `host` must be neither read, written nor dropped
    /// until `stream` has passed this point (a [`Stream::synchronize`] or an event recorded
    /// after it and waited for).
    pub unsafe fn download_async(
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
        // SAFETY: a LockedBuffer is page-locked; the caller waits for the stream before
        // touching or freeing it (this function's contract).
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
}

/// An owned device allocation of `len` elements of `T`, reserved in the device's pool.
///
/// A buffer has a *home* stream, the one it was allocated for, and knows which streams used
/// it since: the last writer and the readers after it. Its memory is reached only through
/// [`DeviceBuffer::read`] and [`DeviceBuffer::write`] (`&mut`), which take the stream the
/// work goes to: they make that stream wait for the last write (and a write for the reads)
/// queued on other streams, and note the use. Uses are not followed by an event each: the
/// event of a use on another stream is recorded when something has to wait for it (a use on
/// a third stream, the free), at the end of what that stream had queued by then, which
/// covers the use. Work that stays on one stream records no event at all.
///
/// Buffers made with [`DeviceBuffer::new_on`] come from the device's stream-ordered pool
/// (`cuMemAllocAsync`) and are freed on their home stream (`cuMemFreeAsync`) behind every
/// use noted on other streams, without waiting on the host. Those from [`DeviceBuffer::new`]
/// (`cuMemAlloc`) are freed once the host has waited for their own uses (the home stream's
/// work and the noted uses), not for the whole context.
pub struct DeviceBuffer<T> {
    ptr: CUdeviceptr,
    len: usize,
    bytes: u64,
    context: CUcontext,
    /// Allocated by `cuMemAllocAsync` (freed with `cuMemFreeAsync` on the home stream).
    stream_ordered: bool,
    uses: Uses,
    _reservation: Reservation,
    _type: PhantomData<T>,
}

/// Where a buffer was used: its home stream, its last writer and the readers after it.
struct Uses {
    /// Allocated for this stream; uses on it are ordered with the free without events.
    home: Stream,
    marks: Mutex<Marks>,
}

#[derive(Default)]
struct Marks {
    /// The stream of the last write; `None` while it is the home stream.
    write: Option<Mark>,
    /// The latest read on each stream other than the home and the writer since that write
    /// (a stream runs in order, so one per stream is enough).
    reads: Vec<Mark>,
}

/// A use of a buffer on `stream`: up to `event` where one was recorded after it, else up to
/// whatever the stream has queued when an event is needed (recorded then, and kept).
struct Mark {
    stream: Stream,
    event: Option<Arc<Event>>,
}

impl Mark {
    fn on(stream: &Stream) -> Self {
        Mark {
            stream: stream.clone(),
            event: None,
        }
    }

    /// An event after the use: the one recorded before, or one recorded now at the end of the
    /// stream (behind the use, which was queued before the mark was made).
    fn event(&mut self) -> Result<&Arc<Event>> {
        let event = match self.event.take() {
            Some(event) => event,
            None => Arc::new(event_now(&self.stream)?),
        };
        Ok(self.event.insert(event))
    }
}

/// An event recorded now at the end of `stream`.
fn event_now(stream: &Stream) -> Result<Event> {
    let event = Event::new(false)?;
    event.record(stream)?;
    Ok(event)
}

impl Uses {
    fn new(home: &Stream) -> Self {
        Uses {
            home: home.clone(),
            marks: Mutex::new(Marks::default()),
        }
    }

    fn marks(&self) -> std::sync::MutexGuard<'_, Marks> {
        self.marks.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Orders a read on `stream` after the last write, and notes it.
    fn read(&self, stream: &Stream) -> Result<()> {
        let mut marks = self.marks();
        let writer = marks.write.as_ref().map_or(&self.home, |w| &w.stream);
        if writer.is(stream) {
            // In order behind the write; the free waits for the writer.
            return Ok(());
        }
        match marks.write.as_mut() {
            Some(w) => stream.wait(w.event()?)?,
            None => {
                // Written on the home stream (or not at all): wait for what it has queued,
                // and keep the event for the next reader until the next write.
                let event = Arc::new(event_now(&self.home)?);
                stream.wait(&event)?;
                marks.write = Some(Mark {
                    stream: self.home.clone(),
                    event: Some(event),
                });
            }
        }
        if !stream.is(&self.home) {
            marks.reads.retain(|r| !r.stream.is(stream));
            marks.reads.push(Mark::on(stream));
        }
        Ok(())
    }

    /// Orders a write on `stream` after every earlier use on other streams, and notes it.
    fn write(&self, stream: &Stream) -> Result<()> {
        let mut marks = self.marks();
        let mut waited_home = false;
        if let Some(w) = marks.write.as_mut() {
            if !w.stream.is(stream) {
                stream.wait(w.event()?)?;
            }
        }
        for r in marks.reads.iter_mut() {
            if !r.stream.is(stream) {
                stream.wait(r.event()?)?;
            }
        }
        if !stream.is(&self.home) {
            // Reads on the home stream are not noted: wait for all it has queued.
            stream.wait(&event_now(&self.home)?)?;
            waited_home = true;
        }
        marks.reads.clear();
        marks.write = waited_home.then(|| Mark::on(stream));
        Ok(())
    }

    /// Records one event now at the end of `stream` for the uses queued there: the last write,
    /// where it was queued on `stream`, and the read noted there.
    fn mark_done(&self, stream: &Stream) -> Result<()> {
        let mut marks = self.marks();
        let wrote_here = marks
            .write
            .as_ref()
            .map_or(&self.home, |w| &w.stream)
            .is(stream);
        let read_here = marks.reads.iter().any(|r| r.stream.is(stream));
        if !wrote_here && !read_here {
            return Ok(());
        }
        let event = Arc::new(event_now(stream)?);
        if wrote_here {
            marks.write = Some(Mark {
                stream: stream.clone(),
                event: Some(Arc::clone(&event)),
            });
        }
        for r in marks.reads.iter_mut().filter(|r| r.stream.is(stream)) {
            r.event = Some(Arc::clone(&event));
        }
        Ok(())
    }

    /// Every noted use on a stream other than the home one, with an event after it (recorded
    /// now where none was); a use whose event could not be recorded is waited for on the host.
    fn events_for_free(&self) -> Vec<Arc<Event>> {
        let mut marks = self.marks();
        let Marks { write, reads } = &mut *marks;
        let mut events = Vec::new();
        let home = &self.home;
        for mark in write.iter_mut().chain(reads.iter_mut()) {
            if mark.stream.is(home) {
                continue;
            }
            match mark.event() {
                Ok(event) => events.push(Arc::clone(event)),
                Err(_) => {
                    let _ = mark.stream.synchronize();
                }
            }
        }
        events
    }
}

// SAFETY: device memory is not tied to a host thread; the marks are behind a mutex.
unsafe impl<T: Send> Send for DeviceBuffer<T> {}
unsafe impl<T: Sync> Sync for DeviceBuffer<T> {}

/// Reserves `len` elements of `T` in `pool`.
fn reserve<T>(pool: &Arc<MemoryPool>, len: usize, what: &str) -> Result<(u64, Reservation)> {
    let bytes = (len as u64)
        .checked_mul(size_of::<T>() as u64)
        .ok_or_else(|| out_of_memory(what, u64::MAX, pool.available()))?;
    Ok((bytes, pool.reserve(bytes, what)?))
}

/// Returns the memory the stream-ordered pool of the current context's device caches to the
/// device, after waiting for the context (so that pending frees have happened): a plain
/// `cuMemAlloc` cannot use what that pool holds.
fn trim_cached_memory() {
    let mut device = 0;
    let mut pool: ffi::CUmemoryPool = std::ptr::null_mut();
    // SAFETY: queries into locals; trimming frees only memory no allocation holds.
    unsafe {
        if ffi::cuCtxGetDevice(&mut device) == ffi::CUDA_SUCCESS
            && ffi::cuDeviceGetDefaultMemPool(&mut pool, device) == ffi::CUDA_SUCCESS
        {
            ffi::cuCtxSynchronize();
            ffi::cuMemPoolTrimTo(pool, 0);
        }
    }
}

impl<T: Copy> DeviceBuffer<T> {
    /// Allocates `len` uninitialised elements on the current context with `cuMemAlloc`, for
    /// work on `stream` (its home), reserving their bytes in `pool` first: over the pool's
    /// limit, or when the device has too little free memory,
    /// [`Error::OutOfMemory`](hetsparse_core::Error::OutOfMemory) with the bytes needed and
    /// available.
    pub fn new(pool: &Arc<MemoryPool>, stream: &Stream, len: usize, what: &str) -> Result<Self> {
        let (bytes, reservation) = reserve::<T>(pool, len, what)?;
        let mut ptr: CUdeviceptr = 0;
        let mut context: CUcontext = std::ptr::null_mut();
        if bytes > 0 {
            // SAFETY: allocation into a local.
            let mut code = unsafe { ffi::cuMemAlloc_v2(&mut ptr, bytes as usize) };
            if code == ffi::CUDA_ERROR_OUT_OF_MEMORY {
                // Freed stream-ordered memory may be cached by the driver: return it, retry.
                trim_cached_memory();
                // SAFETY: allocation into a local.
                code = unsafe { ffi::cuMemAlloc_v2(&mut ptr, bytes as usize) };
            }
            if code != ffi::CUDA_SUCCESS {
                if code == ffi::CUDA_ERROR_OUT_OF_MEMORY {
                    let available = free_device_memory().min(pool.available());
                    return Err(out_of_memory(what, bytes, available));
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
            stream_ordered: false,
            uses: Uses::new(stream),
            _reservation: reservation,
            _type: PhantomData,
        })
    }

    /// Allocates `len` uninitialised elements from `gpu`'s stream-ordered pool on `stream`,
    /// their home (a plain [`DeviceBuffer::new`] where the driver has no such pool).
    pub(crate) fn new_on(gpu: &Gpu, stream: &Stream, len: usize, what: &str) -> Result<Self> {
        let pool = gpu.memory();
        if gpu.mempool().is_none() {
            return Self::new(pool, stream, len, what);
        }
        let (bytes, reservation) = reserve::<T>(pool, len, what)?;
        let mut ptr: CUdeviceptr = 0;
        let mut context: CUcontext = std::ptr::null_mut();
        if bytes > 0 {
            // SAFETY: allocation into a local, ordered on a valid stream.
            let mut code = unsafe { ffi::cuMemAllocAsync(&mut ptr, bytes as usize, stream.raw()) };
            if code == ffi::CUDA_ERROR_OUT_OF_MEMORY {
                // Frees queued on other streams may not have happened yet: wait for them and
                // give the cache back, then retry once.
                trim_cached_memory();
                // SAFETY: as above.
                code = unsafe { ffi::cuMemAllocAsync(&mut ptr, bytes as usize, stream.raw()) };
            }
            if code != ffi::CUDA_SUCCESS {
                if code == ffi::CUDA_ERROR_OUT_OF_MEMORY {
                    let available = free_device_memory().min(pool.available());
                    return Err(out_of_memory(what, bytes, available));
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
            stream_ordered: bytes > 0,
            uses: Uses::new(stream),
            _reservation: reservation,
            _type: PhantomData,
        })
    }

    /// Allocates (for `stream`, its home) and fills from `host`.
    pub fn from_host(
        tracker: &Arc<MemoryPool>,
        stream: &Stream,
        host: &[T],
        what: &str,
    ) -> Result<Self> {
        let mut b = Self::new(tracker, stream, host.len(), what)?;
        b.write(stream)?.upload(stream, host)?;
        Ok(b)
    }

    /// The whole buffer, to be read by work queued on `stream` from here on: `stream` waits
    /// for the last write queued on another stream, and the use is noted, so that a later
    /// write elsewhere and the free wait for it.
    pub fn read(&self, stream: &Stream) -> Result<DeviceSlice<'_, T>> {
        self.uses.read(stream)?;
        Ok(DeviceSlice {
            ptr: self.ptr,
            len: self.len,
            _memory: PhantomData,
        })
    }

    /// The whole buffer, to be written (and read) by work queued on `stream` from here on:
    /// `stream` waits for every use queued on other streams, and the write is noted, so that
    /// later uses elsewhere and the free wait for it.
    pub fn write(&mut self, stream: &Stream) -> Result<DeviceSliceMut<'_, T>> {
        self.uses.write(stream)?;
        Ok(DeviceSliceMut {
            ptr: self.ptr,
            len: self.len,
            _memory: PhantomData,
        })
    }

    /// Records now, at the end of what `stream` has queued, the event that later uses on other
    /// streams (and the free) wait for instead of this buffer's uses queued on `stream` so
    /// far: its last write, where that was queued on `stream`, and its read noted there.
    ///
    /// An optimisation for a buffer used beyond the work that queued those uses (a result
    /// handed out, a buffer read on a second stream and written again on the first): without
    /// it the event is recorded when first needed, at the end of what `stream` has queued by
    /// then, which may be later work unrelated to this buffer (the next calls of a pooled
    /// stream), so that the later use waits for that too. Correctness does not depend on
    /// it, as long as nothing more is queued on `stream` through views taken before the call
    /// (a view taken after it is noted anew): the crate calls it once an operation has queued
    /// its last use of the buffer, which is why it is not public.
    pub(crate) fn mark_done(&self, stream: &Stream) -> Result<()> {
        self.uses.mark_done(stream)
    }

    /// Elements.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether the buffer is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The stream the buffer was allocated for.
    pub fn home(&self) -> &Stream {
        &self.uses.home
    }
}

impl<T> Drop for DeviceBuffer<T> {
    fn drop(&mut self) {
        if self.bytes == 0 {
            return;
        }
        // Work queued before this drop may still use the memory, also after a failure (an
        // operation that failed half way drops its buffers without waiting for its stream):
        // the home stream's and every noted use's.
        let events = self.uses.events_for_free();
        let home = &self.uses.home;
        if self.stream_ordered {
            // SAFETY: allocated by cuMemAllocAsync on `context`, freed once, on the home
            // stream, which first waits for the other streams' uses (a destroyed event's
            // pending wait still completes, so dropping the events after is fine). The
            // context is made current because the dropping thread may have another one.
            unsafe {
                ffi::cuCtxSetCurrent(self.context);
                for event in &events {
                    ffi::cuStreamWaitEvent(home.raw(), event.raw(), 0);
                }
                ffi::cuMemFreeAsync(self.ptr, home.raw());
            }
        } else {
            // SAFETY: allocated by cuMemAlloc on `context`, freed once, after the host has
            // waited for the home stream and the other uses' events: nothing queued before
            // this drop touches the memory any more.
            unsafe {
                ffi::cuCtxSetCurrent(self.context);
                for event in &events {
                    ffi::cuEventSynchronize(event.raw());
                }
                ffi::cuStreamSynchronize(home.raw());
                ffi::cuMemFree_v2(self.ptr);
            }
        }
        // The reservation is released after the free is queued: the memory is the driver
        // pool's again, reused by the next allocation, and what it caches is bounded by the
        // pool's release threshold (the budget).
    }
}

/// Whether the driver knows `ptr` as page-locked host memory (copies from it are
/// asynchronous). Memory it does not know (pageable) is an error of the query: not locked.
fn is_page_locked(ptr: *const c_void) -> bool {
    let mut kind: u32 = 0;
    // SAFETY: a query into a local; the driver reads no memory at `ptr`.
    let code = unsafe {
        ffi::cuPointerGetAttribute(
            &mut kind as *mut u32 as *mut c_void,
            ffi::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
            ptr as CUdeviceptr,
        )
    };
    code == ffi::CUDA_SUCCESS && kind == ffi::CU_MEMORYTYPE_HOST
}

/// Free device memory as the driver reports it for the current context (0 if it cannot say).
pub(crate) fn free_device_memory() -> u64 {
    let (mut free, mut total) = (0usize, 0usize);
    // SAFETY: query into locals.
    let code = unsafe { ffi::cuMemGetInfo_v2(&mut free, &mut total) };
    if code == ffi::CUDA_SUCCESS {
        free as u64
    } else {
        0
    }
}

/// Bytes of one piece of a staged copy ([`DeviceSlice::download_staged`],
/// [`DeviceSlice::upload_staged`]): pieces of 64 MiB through four buffers brought 3 GiB from
/// an H100 into fresh host memory fastest (16 MiB pieces took 1.5 times as long).
pub const STAGE_BYTES: u64 = 64 << 20;
/// Staging buffers a copy keeps in flight.
pub const STAGES: usize = 4;
/// From this size copies are staged through page-locked memory.
const STAGE_MIN_BYTES: u64 = 1 << 20;
/// Bytes one host thread copies at a time between staging and pageable memory.
const COPY_GRAIN_BYTES: usize = 256 << 10;

/// Copies `from` into `to` (of the same length) on the host's threads, with streaming stores
/// ([`hetsparse_core::host::copy_streaming`]): one thread copies well under the link's speed,
/// and into fresh pages far less.
pub(crate) fn parallel_copy<X: Copy + Send + Sync>(
    to: &mut [std::mem::MaybeUninit<X>],
    from: &[X],
) {
    use rayon::prelude::*;
    assert_eq!(
        to.len(),
        from.len(),
        "parallel copy between slices of other lengths"
    );
    let grain = (COPY_GRAIN_BYTES / size_of::<X>().max(1)).max(1);
    to.par_chunks_mut(grain)
        .zip(from.par_chunks(grain))
        .for_each(|(to, from)| hetsparse_core::host::copy_streaming(to, from));
}

/// Appends `from` to `v` ([`parallel_copy`]), growing it without aborting.
pub(crate) fn parallel_append<X: Copy + Send + Sync>(
    v: &mut Vec<X>,
    from: &[X],
    what: &str,
) -> Result<()> {
    hetsparse_core::host::try_reserve(v, from.len(), what)?;
    let len = v.len();
    parallel_copy(&mut v.spare_capacity_mut()[..from.len()], from);
    // SAFETY: the `from.len()` slots after `len` were all written just above.
    unsafe { v.set_len(len + from.len()) };
    Ok(())
}

/// Alignment of arena allocations (the driver's own is 256 bytes).
const ARENA_ALIGN: u64 = 256;

/// One device allocation carved into slices by a bump pointer; [`DeviceArena::reset`] frees
/// everything at once. Slices borrow the arena, so a reset cannot happen while one is alive;
/// each carved range is handed out once, writable ([`DeviceArena::alloc`]).
///
/// An arena is work memory of the stream it was made for (its home): its slices are used by
/// work queued there only, so that their uses are ordered with one another and with the free
/// by the stream itself.
pub struct DeviceArena {
    buffer: DeviceBuffer<u8>,
    top: Cell<u64>,
}

impl DeviceArena {
    /// Allocates an arena of `bytes` for work on `stream` ([`DeviceBuffer::new`]).
    pub fn new(tracker: &Arc<MemoryPool>, stream: &Stream, bytes: u64, what: &str) -> Result<Self> {
        Ok(DeviceArena {
            buffer: DeviceBuffer::new(tracker, stream, bytes as usize, what)?,
            top: Cell::new(0),
        })
    }
    /// Allocates an arena of `bytes` from `gpu`'s stream-ordered pool on `stream`, its home
    /// ([`DeviceBuffer::new_on`]). Dropping it queues the free behind the work queued there
    /// (no wait on the host), and the pool keeps the memory for the next call's arena.
    pub(crate) fn new_on(gpu: &Gpu, stream: &Stream, bytes: u64, what: &str) -> Result<Self> {
        Ok(DeviceArena {
            buffer: DeviceBuffer::new_on(gpu, stream, bytes as usize, what)?,
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
    /// The stream the arena's slices are used on.
    pub fn home(&self) -> &Stream {
        self.buffer.home()
    }
    /// Bytes `len` elements of `T` take in the arena, alignment included.
    pub fn footprint<T>(len: u64) -> u64 {
        (len * size_of::<T>() as u64).div_ceil(ARENA_ALIGN) * ARENA_ALIGN
    }
    /// A writable slice of `len` uninitialised elements, for work on the arena's home stream.
    pub fn alloc<T: Copy>(&self, len: usize, what: &str) -> Result<DeviceSliceMut<'_, T>> {
        let need = Self::footprint::<T>(len as u64);
        if need > self.remaining() {
            return Err(out_of_memory(what, need, self.remaining()));
        }
        let start = self.top.get();
        self.top.set(start + need);
        // The bump pointer hands every range out once: no other view of it exists until a
        // reset, which needs `&mut self` and so outlives every slice.
        Ok(DeviceSliceMut {
            ptr: self.buffer.ptr + start,
            len,
            _memory: PhantomData,
        })
    }
    /// Allocates and uploads `host` on `stream` (the arena's home), then reads it.
    pub fn upload<T: Copy>(
        &self,
        stream: &Stream,
        host: &[T],
        what: &str,
    ) -> Result<DeviceSlice<'_, T>> {
        let mut s = self.alloc(host.len(), what)?;
        s.upload(stream, host)?;
        Ok(s.into_view())
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

/// Host memory page-locked by registering it with the driver, prepared so that no step holds
/// the process's memory map for long: allocated aligned to huge pages and advised to use them,
/// its pages touched in [`TOUCH_STEP_BYTES`] steps (each fault takes the memory map's lock
/// briefly; between steps the preparation can wait or stop), and only then registered, which
/// locks pages already present. Page-locked in one call (`cuMemHostAlloc`), 64 MiB held that
/// lock for tens of milliseconds, in which every page fault and allocation of the process's
/// other threads waited: a host call beside the warm-up took ten times as long.
pub(crate) struct RegisteredBytes {
    ptr: std::ptr::NonNull<u8>,
    layout: std::alloc::Layout,
    /// The driver holds the range page-locked (until it is unregistered).
    registered: bool,
}

// SAFETY: the allocation is owned (no aliasing handle exists); access goes through `&self` and
// `&mut self` as for a `Vec<u8>`.
unsafe impl Send for RegisteredBytes {}
// SAFETY: as above; `&self` gives only reads.
unsafe impl Sync for RegisteredBytes {}

/// Alignment of [`RegisteredBytes`]: a huge page of x86-64 and aarch64 (4 KiB base pages).
const HUGE_PAGE_BYTES: usize = 2 << 20;

/// Bytes of a [`RegisteredBytes`] touched between two looks at whether to go on.
const TOUCH_STEP_BYTES: usize = 2 << 20;

impl RegisteredBytes {
    /// `bytes` of page-locked memory, or `Ok(None)` when `go_on` said to stop (checked before
    /// each step; it may wait). Errors where the memory cannot be allocated or registered.
    pub(crate) fn prepare(bytes: usize, go_on: impl Fn() -> bool) -> Result<Option<Self>> {
        use std::alloc::{alloc, Layout};
        let layout = Layout::from_size_align(bytes.max(1), HUGE_PAGE_BYTES)
            .map_err(|e| hetsparse_core::Error::InvalidArgument(format!("staging buffer: {e}")))?;
        // SAFETY: the layout's size is not zero.
        let raw = unsafe { alloc(layout) };
        let Some(ptr) = std::ptr::NonNull::new(raw) else {
            return Err(out_of_memory("host staging buffer", bytes as u64, 0));
        };
        let mut owned = RegisteredBytes {
            ptr,
            layout,
            registered: false,
        };
        owned.advise_huge_pages();
        let len = layout.size();
        let mut from = 0;
        while from < len {
            if !go_on() {
                return Ok(None);
            }
            let to = (from + TOUCH_STEP_BYTES).min(len);
            let page = 4096;
            let mut at = from;
            while at < to {
                // SAFETY: `at` is within the allocation; volatile so that the touch is kept.
                unsafe { owned.ptr.as_ptr().add(at).write_volatile(0) };
                at += page;
            }
            from = to;
        }
        // SAFETY: the range is one live allocation of this process, of `len` bytes.
        let code = unsafe {
            ffi::cuMemHostRegister_v2(
                owned.ptr.as_ptr().cast(),
                len,
                ffi::CU_MEMHOSTREGISTER_PORTABLE,
            )
        };
        check(code, "registering a staging buffer")?;
        owned.registered = true;
        Ok(Some(owned))
    }

    #[cfg(target_os = "linux")]
    fn advise_huge_pages(&mut self) {
        // SAFETY: advice on a range of this allocation; failure only leaves base pages.
        let _ = unsafe {
            libc::madvise(
                self.ptr.as_ptr().cast(),
                self.layout.size(),
                libc::MADV_HUGEPAGE,
            )
        };
    }

    #[cfg(not(target_os = "linux"))]
    fn advise_huge_pages(&mut self) {}

    fn len(&self) -> usize {
        self.layout.size()
    }
}

impl Drop for RegisteredBytes {
    fn drop(&mut self) {
        if self.registered {
            // SAFETY: the range was registered by `prepare`; copies from it were waited for by
            // their callers before the buffer went back to the pool.
            let code = unsafe { ffi::cuMemHostUnregister(self.ptr.as_ptr().cast()) };
            if code != ffi::CUDA_SUCCESS {
                // Memory the driver may still hold page-locked is never handed back to the
                // allocator (a later allocation there could be written by a stale transfer):
                // leaked, the safe side (where the context is gone, so is the registration).
                tracing::debug!(code, "a staging buffer could not be unregistered; kept");
                return;
            }
        }
        // SAFETY: allocated by `prepare` with this layout, and no longer registered.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) };
    }
}

/// A page-locked buffer of the pool: registered ahead by the warm-up, or allocated
/// page-locked by a call that found none free.
enum Staging {
    Locked(LockedBuffer<u8>),
    Registered(RegisteredBytes),
}

impl Staging {
    fn len(&self) -> usize {
        match self {
            Staging::Locked(b) => b.len(),
            Staging::Registered(b) => b.len(),
        }
    }

    fn as_ptr(&self) -> *const u8 {
        match self {
            Staging::Locked(b) => b.as_ptr(),
            Staging::Registered(b) => b.ptr.as_ptr(),
        }
    }

    fn as_mut_ptr(&mut self) -> *mut u8 {
        match self {
            Staging::Locked(b) => b.as_mut_ptr(),
            Staging::Registered(b) => b.ptr.as_ptr(),
        }
    }
}

/// Pinned host buffers kept between operations: page-locking memory takes milliseconds per
/// tens of megabytes, far longer than the copies it speeds up, so staging buffers are reused.
#[derive(Default)]
pub struct PinnedPool {
    free: Mutex<Vec<Staging>>,
    /// A call has begun on the device: [`fill`](Self::fill) stops (page-locking holds a lock
    /// of the driver's that the call's own allocations and launches would wait for).
    taken: std::sync::atomic::AtomicBool,
}

/// Buffers the pool keeps when they come back: a SpGEMM call's output pipeline holds four
/// (two batches, columns and values) while its staged uploads take [`STAGES`] more, so with
/// fewer every call that uploads chunks beside its pipeline page-locks a new buffer (tens of
/// milliseconds for 64 MiB) and unlocks one at its end.
pub const PINNED_POOL_KEEP: usize = 4 + STAGES;

impl PinnedPool {
    /// Page-locks buffers of [`STAGE_BYTES`] ([`RegisteredBytes`]) until the pool holds as
    /// many as it keeps ([`PINNED_POOL_KEEP`]), one at a time, each put in the pool as soon
    /// as it is locked. Stops once a call has begun ([`stop_filling`](Self::stop_filling):
    /// the process's first call takes the buffers ready, locks only what it lacks, and does
    /// not wait behind the rest), when `still_wanted` says so (the device was dropped; it may
    /// also wait, and is asked between steps of a buffer's preparation), or when locking fails
    /// (memory that cannot be page-locked is not an error here: copies lock their own).
    pub fn fill(&self, still_wanted: impl Fn() -> bool) -> usize {
        use std::sync::atomic::Ordering;
        let go_on = || still_wanted() && !self.taken.load(Ordering::Acquire);
        let mut locked = 0;
        while go_on() {
            {
                let free = self.free.lock().unwrap_or_else(|p| p.into_inner());
                if free.len() >= PINNED_POOL_KEEP {
                    break;
                }
            }
            match RegisteredBytes::prepare(STAGE_BYTES as usize, go_on) {
                Ok(Some(buffer)) => {
                    self.give_back(Staging::Registered(buffer));
                    locked += 1;
                }
                Ok(None) => break,
                Err(e) => {
                    tracing::debug!(error = %e, "page-locking a staging buffer ahead failed");
                    break;
                }
            }
        }
        locked
    }

    /// Lets a [`fill`](Self::fill) run (again) until the next call begins.
    pub fn allow_filling(&self) {
        self.taken
            .store(false, std::sync::atomic::Ordering::Release);
    }

    /// Says that a call has begun on the device: a [`fill`](Self::fill) under way stops after
    /// the buffer it is locking.
    pub fn stop_filling(&self) {
        self.taken.store(true, std::sync::atomic::Ordering::Release);
    }

    /// Whether the pool holds all the buffers it keeps.
    pub fn is_full(&self) -> bool {
        self.free.lock().unwrap_or_else(|p| p.into_inner()).len() >= PINNED_POOL_KEEP
    }

    /// Whether a call has begun since the last [`allow_filling`](Self::allow_filling).
    pub fn call_begun(&self) -> bool {
        self.taken.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Puts `buffer` in the pool, which keeps its [`PINNED_POOL_KEEP`] largest.
    fn give_back(&self, buffer: Staging) {
        let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
        free.push(buffer);
        if free.len() > PINNED_POOL_KEEP {
            free.sort_by_key(|b| std::cmp::Reverse(b.len()));
            free.truncate(PINNED_POOL_KEEP);
        }
    }

    /// A buffer of at least `bytes`, reused when the pool has one.
    pub fn take(&self, bytes: usize, what: &str) -> Result<PooledPinned<'_>> {
        self.stop_filling();
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
            None => Staging::Locked(
                unsafe { LockedBuffer::uninitialized(bytes) }.map_err(|e| from_cust(e, what))?,
            ),
        };
        Ok(PooledPinned {
            buffer: Some(buffer),
            pool: self,
        })
    }
}

/// A pinned buffer on loan from a [`PinnedPool`]; it goes back when dropped.
pub struct PooledPinned<'p> {
    buffer: Option<Staging>,
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
            self.pool.give_back(b);
        }
    }
}
