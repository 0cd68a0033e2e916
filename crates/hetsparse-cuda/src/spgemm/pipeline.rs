//! Double-buffered output (Matam et al. Alg. 1's OutputBuffer/TransferBuffer, Xia et al.
//! §IV.C): a batch of C's rows is written into one of two device buffers on the compute
//! stream, then copied into pinned host memory on the copy stream while the next batch is
//! computed into the other buffer. The host drains a buffer into the chunk's arrays only when
//! it needs that buffer again, or at the end.

use std::collections::VecDeque;
use std::sync::Arc;

use hetsparse_core::{ChunkProduct, Csr, ProductChunk, Result};

use crate::context::{Event, Stream};
use crate::error::out_of_memory;
use crate::memory::{pinned, DeviceBuffer, DeviceSlice, MemoryTracker, PinnedBuffer};
use crate::scalar::{from_device, DeviceScalar};

use super::{entry_bytes, offsets};

struct Slot<T: DeviceScalar> {
    capacity: u64,
    dev_cols: DeviceBuffer<u32>,
    dev_vals: DeviceBuffer<T::Device>,
    host_cols: PinnedBuffer<u32>,
    host_vals: PinnedBuffer<T::Device>,
    computed: Event,
    copied: Event,
    pending: Option<Pending>,
}

/// A batch whose copy to the host is queued.
struct Pending {
    len: usize,
    counts: Vec<u64>,
    last_of_chunk: bool,
}

/// A chunk of C being collected on the host.
struct Assembly<T> {
    index: usize,
    chunk: ProductChunk,
    width: usize,
    counts: Vec<u64>,
    cols: Vec<u32>,
    vals: Vec<T>,
}

/// The two output buffers, the copy stream and the chunks not yet handed out.
pub(crate) struct OutputPipeline<T: DeviceScalar> {
    tracker: Arc<MemoryTracker>,
    slot_bytes: u64,
    slots: [Option<Slot<T>>; 2],
    next: usize,
    copy: Stream,
    chunks: VecDeque<Assembly<T>>,
}

type Done<'d, T> = dyn FnMut(ChunkProduct<T>) -> Result<()> + 'd;

impl<T: DeviceScalar> OutputPipeline<T> {
    /// A pipeline whose buffers may take up to `slot_bytes` of device memory each.
    pub fn new(tracker: Arc<MemoryTracker>, slot_bytes: u64) -> Result<Self> {
        Ok(OutputPipeline {
            tracker,
            slot_bytes,
            slots: [None, None],
            next: 0,
            copy: Stream::new()?,
            chunks: VecDeque::new(),
        })
    }

    /// Starts collecting a chunk of `nrows` rows and `width` columns. A chunk without rows is
    /// handed out at once.
    pub fn begin_chunk(
        &mut self,
        index: usize,
        chunk: ProductChunk,
        width: u64,
        done: &mut Done<'_, T>,
    ) -> Result<bool> {
        if chunk.rows.is_empty() {
            let product = Csr::zeros(0, width as usize)?;
            done(ChunkProduct {
                index,
                chunk,
                product,
            })?;
            return Ok(false);
        }
        self.chunks.push_back(Assembly {
            index,
            chunk,
            width: width as usize,
            counts: Vec::new(),
            cols: Vec::new(),
            vals: Vec::new(),
        });
        Ok(true)
    }

    /// Entries one buffer holds, after growing the buffers towards `wanted` entries (never
    /// beyond the memory they were given).
    pub fn capacity_for(
        &mut self,
        wanted: u64,
        compute: &Stream,
        done: &mut Done<'_, T>,
    ) -> Result<u64> {
        let max = self.slot_bytes / entry_bytes::<T>();
        if max == 0 {
            return Err(out_of_memory(
                "output buffers of SpGEMM",
                2 * entry_bytes::<T>(),
                2 * self.slot_bytes,
            ));
        }
        let target = wanted.clamp(1, max);
        let have = self.slots[0].as_ref().map_or(0, |s| s.capacity);
        if have >= target {
            return Ok(have);
        }
        // Growing: finish what the old buffers hold first.
        compute.synchronize()?;
        self.drain_all(done)?;
        self.slots = [None, None];
        for slot in &mut self.slots {
            *slot = Some(Slot::new(&self.tracker, target)?);
        }
        Ok(target)
    }

    /// Runs one batch: `launch` writes `len` entries (the rows whose counts are `counts`) into
    /// the given device buffers on `compute`; the copy to the host is queued behind it.
    pub fn batch(
        &mut self,
        compute: &Stream,
        counts: &[u64],
        len: u64,
        last_of_chunk: bool,
        done: &mut Done<'_, T>,
        launch: impl FnOnce(DeviceSlice<'_, u32>, DeviceSlice<'_, T::Device>) -> Result<()>,
    ) -> Result<()> {
        let i = self.next;
        self.next ^= 1;
        if let Some(p) = self.slots[i].as_mut().and_then(|s| s.pending.take()) {
            let slot = self.slots[i].as_mut().expect("slot with a pending copy");
            slot.copied.synchronize()?;
            drain(&mut self.chunks, slot, p, done)?;
        }
        let slot = self.slots[i]
            .as_mut()
            .expect("capacity_for allocates the buffers before the first batch");
        assert!(len <= slot.capacity, "batch larger than the output buffer");
        launch(slot.dev_cols.slice(), slot.dev_vals.slice())?;
        slot.computed.record(compute)?;
        self.copy.wait(&slot.computed)?;
        let _span = tracing::debug_span!("D2H", entries = len).entered();
        let n = len as usize;
        slot.dev_cols
            .slice()
            .download_async(&self.copy, &mut slot.host_cols, 0, n)?;
        slot.dev_vals
            .slice()
            .download_async(&self.copy, &mut slot.host_vals, 0, n)?;
        slot.copied.record(&self.copy)?;
        slot.pending = Some(Pending {
            len: n,
            counts: counts.to_vec(),
            last_of_chunk,
        });
        Ok(())
    }

    fn drain_all(&mut self, done: &mut Done<'_, T>) -> Result<()> {
        // The older batch sits in the slot that would be used next.
        for i in [self.next, self.next ^ 1] {
            if let Some(slot) = self.slots[i].as_mut() {
                if let Some(p) = slot.pending.take() {
                    slot.copied.synchronize()?;
                    drain(&mut self.chunks, slot, p, done)?;
                }
            }
        }
        Ok(())
    }

    /// Waits for the last copies and hands out the remaining chunks.
    pub fn finish(mut self, done: &mut Done<'_, T>) -> Result<()> {
        self.drain_all(done)?;
        debug_assert!(self.chunks.is_empty(), "every chunk ends with a last batch");
        Ok(())
    }
}

impl<T: DeviceScalar> Slot<T> {
    fn new(tracker: &Arc<MemoryTracker>, capacity: u64) -> Result<Self> {
        let n = capacity as usize;
        Ok(Slot {
            capacity,
            dev_cols: DeviceBuffer::new(tracker, n, "SpGEMM output buffer (columns)")?,
            dev_vals: DeviceBuffer::new(tracker, n, "SpGEMM output buffer (values)")?,
            host_cols: pinned(n, "pinned SpGEMM output buffer (columns)")?,
            host_vals: pinned(n, "pinned SpGEMM output buffer (values)")?,
            computed: Event::new(false)?,
            copied: Event::new(false)?,
            pending: None,
        })
    }
}

/// Appends a copied batch to the oldest unfinished chunk and hands the chunk out if complete.
fn drain<T: DeviceScalar>(
    chunks: &mut VecDeque<Assembly<T>>,
    slot: &Slot<T>,
    p: Pending,
    done: &mut Done<'_, T>,
) -> Result<()> {
    let asm = chunks
        .front_mut()
        .expect("a pending batch belongs to an unfinished chunk");
    asm.cols
        .extend_from_slice(&slot.host_cols.as_slice()[..p.len]);
    asm.vals
        .extend_from_slice(from_device::<T>(&slot.host_vals.as_slice()[..p.len]));
    asm.counts.extend_from_slice(&p.counts);
    if p.last_of_chunk {
        let asm = chunks.pop_front().expect("checked above");
        let product = Csr::try_new(
            asm.chunk.rows.len(),
            asm.width,
            offsets(&asm.counts),
            asm.cols,
            asm.vals,
        )?;
        done(ChunkProduct {
            index: asm.index,
            chunk: asm.chunk,
            product,
        })?;
    }
    Ok(())
}
