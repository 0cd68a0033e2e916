//! Double-buffered output (Matam et al. Alg. 1's OutputBuffer/TransferBuffer, Xia et al.
//! §IV.C): a batch of C's rows is written into one of two device buffers on the compute
//! stream, then copied into pinned host memory on the copy stream while the next batch is
//! computed into the other buffer. The host drains a buffer only when it needs that buffer
//! again, or at the end: into the chunk's place in C where the caller gave places
//! ([`Delivery::Places`]), else into the chunk's own arrays.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use hetsparse_core::{ChunkPlace, ChunkProduct, ChunkTiming, Csr, Error, ProductChunk, Result};

use crate::context::{Event, Gpu, Stream};
use crate::error::out_of_memory;
use crate::memory::{parallel_append, DeviceBuffer, DeviceSliceMut, PooledPinned};
use crate::scalar::{from_device, DeviceScalar};

use super::{entry_bytes, offsets, ColsOut};

struct Slot<'g, T: DeviceScalar> {
    capacity: u64,
    dev_cols: DeviceBuffer<u32>,
    dev_vals: DeviceBuffer<T::Device>,
    host_cols: PooledPinned<'g>,
    host_vals: PooledPinned<'g>,
    /// Timing events around the batch's kernels (compute stream) and its copy (copy stream).
    launched: Event,
    computed: Event,
    copy_started: Event,
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
    /// The chunk's row offsets where its symbolic phase left them on the host (else they
    /// are summed from `counts` once its last batch is in).
    offsets: Option<Vec<u64>>,
    cols: Vec<u32>,
    vals: Vec<T>,
    started: Instant,
    timing: ChunkTiming,
}

impl<T: DeviceScalar> Assembly<T> {
    /// The chunk's timing, its wall time taken now.
    fn timing(&self) -> ChunkTiming {
        let mut timing = self.timing;
        timing.wall = self.started.elapsed();
        timing
    }

    /// Hands the finished chunk out.
    fn hand_out(self, product: Csr<T>, out: &mut Delivery<'_, '_, '_, T>) -> Result<()> {
        out.product(ChunkProduct {
            index: self.index,
            timing: self.timing(),
            chunk: self.chunk,
            product,
        })
    }

    /// Tells the caller the chunk is written into its place in C.
    fn placed(self, out: &mut Delivery<'_, '_, '_, T>) -> Result<()> {
        match out {
            Delivery::Places { done, .. } => done(self.index, self.timing()),
            _ => Err(Error::Internal {
                backend: crate::error::BACKEND,
                what: format!("chunk {} written into a place it was not given", self.index),
            }),
        }
    }
}

/// A chunk computed whole on the device and brought to the host
/// ([`OutputPipeline::complete_directly`]).
pub(crate) enum Landed<T> {
    /// As a matrix of its own.
    Matrix(Csr<T>),
    /// Straight into its place in C: its entries.
    InPlace(u64),
}

/// Where finished chunks go.
pub(crate) enum Delivery<'d, 'c, 'f, T> {
    /// Each chunk handed out as a matrix of its own.
    Chunks(&'d mut (dyn FnMut(ChunkProduct<T>) -> Result<()> + 'f)),
    /// Each chunk written into its place in C (the chunk's position in the call is its
    /// place's), and its position handed out once it is.
    Places {
        places: &'d mut [ChunkPlace<'c, T>],
        done: &'d mut (dyn FnMut(usize, ChunkTiming) -> Result<()> + 'f),
    },
    /// Only each chunk's entries per row (its symbolic phase), with its position: nothing
    /// goes through the output buffers.
    Counts(&'d mut (dyn FnMut(usize, &[u64]) -> Result<()> + 'f)),
}

impl<T: DeviceScalar> Delivery<'_, '_, '_, T> {
    /// Whether chunks are written into places as their batches land.
    pub fn in_place(&self) -> bool {
        matches!(self, Delivery::Places { .. })
    }

    /// A chunk complete as a matrix (computed whole, or collected from its batches).
    pub fn product(&mut self, c: ChunkProduct<T>) -> Result<()> {
        match self {
            Delivery::Chunks(done) => done(c),
            Delivery::Places { places, done } => {
                place_of(places, c.index)?.write_csr(&c.product)?;
                done(c.index, c.timing)
            }
            Delivery::Counts(_) => Err(Error::Internal {
                backend: crate::error::BACKEND,
                what: format!(
                    "chunk {} computed where only its counts were asked",
                    c.index
                ),
            }),
        }
    }
}

fn place_of<'p, 'c, T: DeviceScalar>(
    places: &'p mut [ChunkPlace<'c, T>],
    index: usize,
) -> Result<&'p mut ChunkPlace<'c, T>> {
    let n = places.len();
    places.get_mut(index).ok_or_else(|| Error::Internal {
        backend: crate::error::BACKEND,
        what: format!("SpGEMM chunk {index} of {n} has no place in C"),
    })
}

/// The two output buffers, the copy stream and the chunks not yet handed out.
pub(crate) struct OutputPipeline<'g, T: DeviceScalar> {
    gpu: &'g Gpu,
    slot_bytes: u64,
    slots: [Option<Slot<'g, T>>; 2],
    next: usize,
    copy: Stream,
    chunks: VecDeque<Assembly<T>>,
    /// Whether each batch's kernels count as the chunk's kernel time (else the caller times
    /// the chunk's kernels as a whole and [`OutputPipeline::charge`]s them).
    batch_kernels: bool,
}

/// Device memory one output buffer takes at most; its pinned twin is as large.
pub(super) const MAX_SLOT_BYTES: u64 = 64 << 20;

type Done<'d, 'c, 'f, T> = Delivery<'d, 'c, 'f, T>;

impl<'g, T: DeviceScalar> OutputPipeline<'g, T> {
    /// A pipeline whose buffers may take up to `slot_bytes` of device memory each (capped at
    /// [`MAX_SLOT_BYTES`]: larger outputs take more batches).
    pub fn new(gpu: &'g Gpu, slot_bytes: u64, batch_kernels: bool) -> Result<Self> {
        Ok(OutputPipeline {
            gpu,
            slot_bytes: slot_bytes.min(MAX_SLOT_BYTES),
            slots: [None, None],
            next: 0,
            copy: Stream::new()?,
            chunks: VecDeque::new(),
            batch_kernels,
        })
    }

    /// Starts collecting a chunk of `nrows` rows and `width` columns, begun at `started`. A
    /// chunk without rows is handed out at once.
    pub fn begin_chunk(
        &mut self,
        index: usize,
        chunk: ProductChunk,
        width: u64,
        started: Instant,
        done: &mut Done<'_, '_, '_, T>,
    ) -> Result<bool> {
        if chunk.rows.is_empty() {
            let product = Csr::zeros(0, width as usize)?;
            let mut timing = ChunkTiming::default();
            timing.wall = started.elapsed();
            done.product(ChunkProduct {
                index,
                chunk,
                product,
                timing,
            })?;
            return Ok(false);
        }
        self.chunks.push_back(Assembly {
            index,
            chunk,
            width: width as usize,
            counts: Vec::new(),
            offsets: None,
            cols: Vec::new(),
            vals: Vec::new(),
            started,
            timing: ChunkTiming::default(),
        });
        Ok(true)
    }

    /// Makes room on the host for the `entries` of the chunk begun last, known once its
    /// symbolic phase is done, so that its batches land in place rather than in a growing
    /// array (huge pages asked for, its pages faulted in at once); nothing where the chunks
    /// have places in C (`in_place`).
    pub fn expect_entries(&mut self, entries: u64, in_place: bool) -> Result<()> {
        if in_place {
            return Ok(());
        }
        if let Some(asm) = self.chunks.back_mut() {
            let n = usize::try_from(entries).unwrap_or(usize::MAX);
            hetsparse_core::host::try_reserve(&mut asm.cols, n, "column indices of C")?;
            hetsparse_core::host::try_reserve(&mut asm.vals, n, "values of C")?;
            hetsparse_core::advise_huge_pages(asm.cols.spare_capacity_mut());
            hetsparse_core::advise_huge_pages(asm.vals.spare_capacity_mut());
            // The batches fill it a few MB at a time, each copy spread over every thread.
            hetsparse_core::host::prefault(asm.cols.spare_capacity_mut());
            hetsparse_core::host::prefault(asm.vals.spare_capacity_mut());
        }
        Ok(())
    }

    /// Keeps the row offsets of chunk `index` (by position in the call), read back after its
    /// symbolic phase, for the matrix it is handed out as: summing them again from the
    /// batches' counts into fresh memory cost a chunk out of core 0.4 ms. Nothing where the
    /// chunk is already handed out; unused where it goes into a place in C.
    pub fn keep_offsets(&mut self, index: usize, offsets: Vec<u64>) {
        if let Some(asm) = self.chunks.iter_mut().find(|c| c.index == index) {
            asm.offsets = Some(offsets);
        }
    }

    /// Adds to the timing of the chunk begun last (its analysis and symbolic kernels, the
    /// operands' upload).
    pub fn charge(&mut self, kernel: Duration, h2d: Duration, h2d_bytes: u64) {
        if let Some(asm) = self.chunks.back_mut() {
            asm.timing.kernel += kernel;
            asm.timing.h2d += h2d;
            asm.timing.h2d_bytes += h2d_bytes;
        }
    }

    /// Entries one buffer holds, after growing the buffers towards `wanted` entries (never
    /// beyond the memory they were given).
    pub fn capacity_for(
        &mut self,
        wanted: u64,
        compute: &Stream,
        done: &mut Done<'_, '_, '_, T>,
    ) -> Result<u64> {
        let max = self.slot_bytes / entry_bytes::<T>();
        if max == 0 {
            return Err(out_of_memory(
                "output buffers of SpGEMM",
                2 * entry_bytes::<T>(),
                2 * self.slot_bytes,
            ));
        }
        let have = self.slots[0].as_ref().map_or(0, |s| s.capacity);
        // Sized to the first chunk's output; when a later chunk needs more, to the most they
        // may take, so that chunks of varying sizes (out of core, many) do not wait for the
        // copies and reallocate the buffers one after another.
        let needed = wanted.clamp(1, max);
        if have >= needed {
            return Ok(have);
        }
        let target = if have == 0 { needed } else { max };
        // Growing: finish what the old buffers hold first.
        compute.synchronize()?;
        self.drain_all(done)?;
        self.slots = [None, None];
        for slot in &mut self.slots {
            *slot = Some(Slot::new(self.gpu, compute, target)?);
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
        done: &mut Done<'_, '_, '_, T>,
        launch: impl FnOnce(ColsOut<'_>, DeviceSliceMut<'_, T::Device>) -> Result<()>,
    ) -> Result<()> {
        let i = self.next;
        self.next ^= 1;
        if let Some(p) = self.slots[i].as_mut().and_then(|s| s.pending.take()) {
            let slot = self.slots[i].as_mut().expect("slot with a pending copy");
            tracing::debug_span!("wait for the copy").in_scope(|| slot.copied.synchronize())?;
            let _span = tracing::debug_span!("copy out", entries = p.len).entered();
            drain(&mut self.chunks, slot, p, self.batch_kernels, done)?;
        }
        let slot = self.slots[i]
            .as_mut()
            .expect("capacity_for allocates the buffers before the first batch");
        if len > slot.capacity {
            return Err(Error::Internal {
                backend: crate::error::BACKEND,
                what: format!(
                    "SpGEMM batch of {len} entries for an output buffer of {}",
                    slot.capacity
                ),
            });
        }
        slot.launched.record(compute)?;
        launch(
            ColsOut::Write(slot.dev_cols.write(compute)?),
            slot.dev_vals.write(compute)?,
        )?;
        slot.computed.record(compute)?;
        self.copy.wait(&slot.computed)?;
        slot.copy_started.record(&self.copy)?;
        let _span = tracing::debug_span!("D2H", entries = len).entered();
        let n = len as usize;
        // SAFETY: the host buffers are pinned and are read only after `copied` has happened
        // (drain); they are dropped only after drain_all, or with the pipeline, whose users
        // finish it first or fail, in which case the streams are synchronised on drop.
        unsafe {
            slot.dev_cols
                .read(&self.copy)?
                .download_unchecked(&self.copy, slot.host_cols.typed_mut(n))?;
            slot.dev_vals
                .read(&self.copy)?
                .download_unchecked(&self.copy, slot.host_vals.typed_mut(n))?;
        }
        slot.copied.record(&self.copy)?;
        // The next batch into this slot waits for this copy only, not for the other slot's,
        // queued on the copy stream by then: the buffers' next write would otherwise wait for
        // all the copy stream holds, and the two batches would no longer overlap.
        slot.dev_cols.mark_done(&self.copy)?;
        slot.dev_vals.mark_done(&self.copy)?;
        slot.pending = Some(Pending {
            len: n,
            counts: counts.to_vec(),
            last_of_chunk,
        });
        Ok(())
    }

    fn drain_all(&mut self, done: &mut Done<'_, '_, '_, T>) -> Result<()> {
        // The older batch sits in the slot that would be used next.
        for i in [self.next, self.next ^ 1] {
            if let Some(slot) = self.slots[i].as_mut() {
                if let Some(p) = slot.pending.take() {
                    slot.copied.synchronize()?;
                    drain(&mut self.chunks, slot, p, self.batch_kernels, done)?;
                }
            }
        }
        Ok(())
    }

    /// Hands out the chunk begun last, computed without the output buffers (whole on the
    /// device, then downloaded): `product` with the time its numeric kernels and its download
    /// took. Chunks begun before it are handed out first, in order.
    pub fn complete_directly(
        &mut self,
        landed: Landed<T>,
        kernel: Duration,
        d2h: Duration,
        done: &mut Done<'_, '_, '_, T>,
    ) -> Result<()> {
        self.drain_all(done)?;
        let mut asm = self.chunks.pop_back().ok_or_else(|| Error::Internal {
            backend: crate::error::BACKEND,
            what: "a SpGEMM chunk completed directly was never begun".into(),
        })?;
        asm.timing.kernel += kernel;
        asm.timing.d2h += d2h;
        // Entries only, as for batches: the offsets came back with the symbolic phase.
        match landed {
            Landed::Matrix(product) => {
                asm.timing.d2h_bytes += product.nnz() * entry_bytes::<T>();
                asm.hand_out(product, done)
            }
            Landed::InPlace(nnz) => {
                asm.timing.d2h_bytes += nnz * entry_bytes::<T>();
                asm.placed(done)
            }
        }
    }

    /// Waits for the last copies and hands out the remaining chunks.
    pub fn finish(mut self, done: &mut Done<'_, '_, '_, T>) -> Result<()> {
        self.drain_all(done)?;
        debug_assert!(self.chunks.is_empty(), "every chunk ends with a last batch");
        Ok(())
    }
}

impl<'g, T: DeviceScalar> Slot<'g, T> {
    /// Buffers whose device half is allocated for `home` (the compute stream, which writes
    /// them; the copy stream reads them).
    fn new(gpu: &'g Gpu, home: &Stream, capacity: u64) -> Result<Self> {
        let n = capacity as usize;
        let tracker = gpu.memory();
        let pool = gpu.pinned_pool();
        Ok(Slot {
            capacity,
            dev_cols: DeviceBuffer::new(tracker, home, n, "SpGEMM output buffer (columns)")?,
            dev_vals: DeviceBuffer::new(tracker, home, n, "SpGEMM output buffer (values)")?,
            host_cols: pool.take(n * 4, "pinned SpGEMM output buffer (columns)")?,
            host_vals: pool.take(
                n * std::mem::size_of::<T>(),
                "pinned SpGEMM output buffer (values)",
            )?,
            launched: Event::new(true)?,
            computed: Event::new(true)?,
            copy_started: Event::new(true)?,
            copied: Event::new(true)?,
            pending: None,
        })
    }
}

impl<T: DeviceScalar> Drop for Slot<'_, T> {
    fn drop(&mut self) {
        // After an error a copy may still be writing into the pinned buffers, which go back
        // to the pool now: wait for it.
        if self.pending.is_some() {
            let _ = self.copied.synchronize();
        }
    }
}

/// Writes a copied batch into the oldest unfinished chunk (its place in C, or its arrays) and
/// hands the chunk out if complete.
fn drain<T: DeviceScalar>(
    chunks: &mut VecDeque<Assembly<T>>,
    slot: &Slot<'_, T>,
    p: Pending,
    batch_kernels: bool,
    done: &mut Done<'_, '_, '_, T>,
) -> Result<()> {
    let asm = chunks.front_mut().ok_or_else(|| Error::Internal {
        backend: crate::error::BACKEND,
        what: "a copied SpGEMM batch belongs to no chunk".into(),
    })?;
    // The copy has landed (its event was waited for): both event pairs are complete.
    if batch_kernels {
        asm.timing.kernel += elapsed(&slot.launched, &slot.computed)?;
    }
    asm.timing.d2h += elapsed(&slot.copy_started, &slot.copied)?;
    asm.timing.d2h_bytes += p.len as u64 * entry_bytes::<T>();
    if let Delivery::Places { places, done: told } = done {
        let cols = slot.host_cols.typed::<u32>(p.len);
        let vals = from_device::<T>(slot.host_vals.typed::<T::Device>(p.len));
        place_of(places, asm.index)?.write_rows(&p.counts, cols, vals)?;
        if p.last_of_chunk {
            if let Some(asm) = chunks.pop_front() {
                told(asm.index, asm.timing())?;
            }
        }
        return Ok(());
    }
    parallel_append(
        &mut asm.cols,
        slot.host_cols.typed::<u32>(p.len),
        "column indices of C",
    )?;
    parallel_append(
        &mut asm.vals,
        from_device::<T>(slot.host_vals.typed::<T::Device>(p.len)),
        "values of C",
    )?;
    asm.counts.extend_from_slice(&p.counts);
    if p.last_of_chunk {
        let Some(mut asm) = chunks.pop_front() else {
            return Ok(());
        };
        let _span = tracing::debug_span!("hand out the chunk", entries = asm.cols.len()).entered();
        // `try_new` checks kept offsets against the batches' entries like any others.
        let row_offsets = match asm.offsets.take() {
            Some(kept) => kept,
            None => offsets(&asm.counts),
        };
        let product = Csr::try_new(
            asm.chunk.rows.len(),
            asm.width,
            row_offsets,
            std::mem::take(&mut asm.cols),
            std::mem::take(&mut asm.vals),
        )
        .map_err(|e| Error::Internal {
            backend: crate::error::BACKEND,
            what: format!("a SpGEMM chunk is not a valid CSR matrix: {e}"),
        })?;
        asm.hand_out(product, done)?;
    }
    Ok(())
}

/// Time between two completed timing events.
pub(super) fn elapsed(start: &Event, end: &Event) -> Result<Duration> {
    let ms = end.elapsed_ms(start)?;
    Ok(Duration::from_secs_f64(f64::from(ms.max(0.0)) / 1e3))
}
