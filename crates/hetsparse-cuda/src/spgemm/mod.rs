//! SpGEMM on the GPU: operands uploaded once, then each chunk of C (a row range of A times a
//! column window of B; the whole product is one chunk) goes through
//!
//! 1. row analysis (Adaptive, which bins rows by it): products per row, on the GPU
//!    (`spgemm_row_products`);
//! 2. symbolic: exact entries per row, by the chosen algorithm's kernels
//!    (ESC counts inside its batches instead, see [`esc`]);
//! 3. numeric in row batches sized to the output buffers: each batch is written into one of
//!    two device buffers and copied to pinned host memory on a second stream while the next
//!    batch computes ([`pipeline`]), so C may be larger than device memory.
//!
//! All counts and offsets are 64-bit. Work memory comes from grow-only arenas allocated
//! outside the loops (Xia et al. §IV.B).

mod adaptive;
mod esc;
mod pipeline;
mod tiled;

use std::ops::Range;

use hetsparse_core::{ChunkProduct, Csr, Error, ProductChunk, Result, SpgemmAlgorithm};

use crate::context::{Gpu, LaunchConfig, Stream};
use crate::error::out_of_memory;
use crate::memory::{DeviceArena, DeviceBuffer, DeviceSlice};
use crate::scalar::{as_device, DeviceScalar};
use hetsparse_core::MemoryPool;

use pipeline::OutputPipeline;

/// The algorithms this backend runs (each passes the conformance suite on the GPU).
pub(crate) const ALGORITHMS: [SpgemmAlgorithm; 5] = [
    SpgemmAlgorithm::Auto,
    SpgemmAlgorithm::Adaptive,
    SpgemmAlgorithm::RowRow,
    SpgemmAlgorithm::ColumnRow,
    SpgemmAlgorithm::Esc,
];

/// Bytes of the accumulator of `T` on the device.
pub(crate) fn acc_bytes<T: DeviceScalar>() -> u64 {
    std::mem::size_of::<T::Acc>() as u64
}

/// Bytes of one output entry (column index and value).
pub(crate) fn entry_bytes<T: DeviceScalar>() -> u64 {
    4 + std::mem::size_of::<T>() as u64
}

/// A CSR matrix on the device.
pub(crate) struct DeviceCsr<T: DeviceScalar> {
    pub offsets: DeviceBuffer<u64>,
    pub cols: DeviceBuffer<u32>,
    pub vals: DeviceBuffer<T::Device>,
}

impl<T: DeviceScalar> DeviceCsr<T> {
    fn upload(gpu: &Gpu, stream: &Stream, m: &Csr<T>, name: &str) -> Result<Self> {
        let _span = tracing::debug_span!("H2D", matrix = name, nnz = m.nnz()).entered();
        let mem = gpu.memory();
        Ok(DeviceCsr {
            offsets: DeviceBuffer::from_host(mem, stream, m.row_offsets(), name)?,
            cols: DeviceBuffer::from_host(mem, stream, m.col_indices(), name)?,
            vals: DeviceBuffer::from_host(mem, stream, as_device(m.values()), name)?,
        })
    }
}

/// One chunk's operands and window: rows `rows` of A, columns `cols` of B.
pub(crate) struct Job<'a, T: DeviceScalar> {
    pub gpu: &'a Gpu,
    pub stream: &'a Stream,
    pub a: &'a DeviceCsr<T>,
    pub b: &'a DeviceCsr<T>,
    pub a_host: &'a Csr<T>,
    pub b_host: &'a Csr<T>,
    pub rows: Range<usize>,
    pub col_lo: u32,
    pub col_hi: u32,
}

impl<T: DeviceScalar> Job<'_, T> {
    pub fn nrows(&self) -> usize {
        self.rows.len()
    }
    pub fn width(&self) -> u64 {
        u64::from(self.col_hi - self.col_lo)
    }
}

/// A grow-only device arena: reallocated (larger) only when a phase needs more than it has,
/// never beyond `cap`.
pub(crate) struct Scratch {
    arena: Option<DeviceArena>,
    cap: u64,
}

impl Scratch {
    fn new(cap: u64) -> Self {
        Scratch { arena: None, cap }
    }
    /// The most a phase may ask for.
    pub fn cap(&self) -> u64 {
        self.cap
    }
    /// An empty arena of at least `bytes`. Waits for `stream` before replacing a smaller one
    /// (kernels queued earlier may still use it).
    pub fn get(
        &mut self,
        tracker: &std::sync::Arc<MemoryPool>,
        stream: &Stream,
        bytes: u64,
        what: &str,
    ) -> Result<&mut DeviceArena> {
        if bytes > self.cap {
            return Err(out_of_memory(what, bytes, self.cap));
        }
        let have = self.arena.as_ref().map_or(0, |a| a.capacity());
        if have < bytes {
            stream.synchronize()?;
            self.arena = None;
            let size = bytes.max(have.saturating_mul(2)).min(self.cap);
            self.arena = Some(DeviceArena::new(tracker, size, what)?);
        }
        let arena = self.arena.as_mut().expect("allocated above");
        arena.reset();
        Ok(arena)
    }
}

/// Bytes an arena needs for the listed arrays (element size, count).
pub(crate) fn footprint(parts: &[(u64, u64)]) -> u64 {
    parts
        .iter()
        .map(|&(size, n)| (size * n).div_ceil(256) * 256)
        .sum::<u64>()
        + 256
}

/// Exclusive prefix sum with the total appended.
pub(crate) fn offsets(counts: &[u64]) -> Vec<u64> {
    let mut off = Vec::with_capacity(counts.len() + 1);
    let mut s = 0u64;
    off.push(0);
    for &c in counts {
        s += c;
        off.push(s);
    }
    off
}

/// Products per row of the job's rows (row analysis on the GPU).
fn row_products<T: DeviceScalar>(job: &Job<'_, T>, arena: &DeviceArena) -> Result<Vec<u64>> {
    let n = job.nrows();
    let _span = tracing::debug_span!("analysis", rows = n).entered();
    let products = arena.alloc::<u64>(n, "row products")?;
    if n == 0 {
        return Ok(Vec::new());
    }
    let f = job.gpu.function("spgemm", "spgemm_row_products")?;
    // SAFETY: arguments match spgemm_row_products; all buffers cover the rows read.
    unsafe {
        job.gpu.launch(
            f,
            LaunchConfig::for_threads(n as u64, 256),
            job.stream,
            &[
                crate::Arg::U64(n as u64),
                crate::Arg::U64(job.rows.start as u64),
                job.a.offsets.slice().arg(),
                job.a.cols.slice().arg(),
                job.b.offsets.slice().arg(),
                products.arg(),
            ],
        )?;
    }
    products.to_vec(job.stream)
}

/// How an algorithm computes a chunk.
enum Method {
    Adaptive,
    RowRow,
    ColumnRow,
    Esc,
}

impl Method {
    fn of(algorithm: SpgemmAlgorithm) -> Self {
        match algorithm {
            SpgemmAlgorithm::Auto | SpgemmAlgorithm::Adaptive => Method::Adaptive,
            SpgemmAlgorithm::RowRow => Method::RowRow,
            SpgemmAlgorithm::ColumnRow => Method::ColumnRow,
            SpgemmAlgorithm::Esc => Method::Esc,
        }
    }
}

/// The listed chunks of `A · B`, handing each finished chunk to `done` in order. Chunks are
/// pipelined: a chunk's copy to the host overlaps the next one's kernels.
pub(crate) fn multiply_chunks<T: DeviceScalar>(
    gpu: &Gpu,
    a: &Csr<T>,
    b: &Csr<T>,
    chunks: &[ProductChunk],
    algorithm: SpgemmAlgorithm,
    done: &mut dyn FnMut(ChunkProduct<T>) -> Result<()>,
) -> Result<()> {
    if b.ncols() > u32::MAX as usize {
        return Err(Error::TooLarge {
            what: "columns of B on the CUDA backend (column indices are 32-bit, one value is reserved)".into(),
            needed: b.ncols() as u64,
            limit: u64::from(u32::MAX),
            unit: "columns",
        });
    }
    if a.nrows() > u32::MAX as usize {
        return Err(Error::TooLarge {
            what: "rows of A on the CUDA backend (row lists are 32-bit)".into(),
            needed: a.nrows() as u64,
            limit: u64::from(u32::MAX),
            unit: "rows",
        });
    }
    gpu.bind()?;
    let method = Method::of(algorithm);
    let _span = tracing::info_span!(
        "spgemm",
        backend = "cuda",
        ?algorithm,
        chunks = chunks.len()
    )
    .entered();
    let stream = Stream::new()?;
    let da = DeviceCsr::upload(gpu, &stream, a, "A")?;
    let db = DeviceCsr::upload(gpu, &stream, b, "B")?;
    let max_rows = chunks.iter().map(|c| c.rows.len()).max().unwrap_or(0) as u64;
    let tracker = gpu.memory();
    // Per-chunk arrays: products, row counts and offsets.
    let chunk_bytes = footprint(&[(8, max_rows), (8, max_rows), (8, max_rows + 1)]);
    let mut chunk_arena = DeviceArena::new(tracker, chunk_bytes, "per-chunk row arrays")?;
    let rest = tracker.available();
    // Work memory gets 5/8 of what is left, the two output buffers 3/8.
    let mut scratch = Scratch::new(rest / 8 * 5);
    let mut output = OutputPipeline::<T>::new(gpu, rest / 8 * 3 / 2)?;
    for (index, chunk) in chunks.iter().enumerate() {
        chunk_arena.reset();
        let job = Job {
            gpu,
            stream: &stream,
            a: &da,
            b: &db,
            a_host: a,
            b_host: b,
            rows: chunk.rows.clone(),
            col_lo: chunk.cols.start as u32,
            col_hi: chunk.cols.end as u32,
        };
        if !output.begin_chunk(index, chunk.clone(), job.width(), done)? {
            continue;
        }
        match method {
            Method::Esc => esc::chunk(&job, &mut scratch, &mut output, done)?,
            _ => {
                let counts = match method {
                    Method::Adaptive => {
                        let products = row_products(&job, &chunk_arena)?;
                        adaptive::symbolic(&job, &products, &mut scratch, &chunk_arena)?
                    }
                    Method::RowRow => tiled::symbolic(&job, tiled::Tiling::RowRow, &chunk_arena)?,
                    _ => tiled::symbolic(&job, tiled::Tiling::ColumnRow, &chunk_arena)?,
                };
                let c_off = offsets(&counts);
                let c_off_dev = chunk_arena.upload(&stream, &c_off, "row offsets of C")?;
                numeric_batches(
                    &job,
                    &method,
                    &counts,
                    &c_off,
                    c_off_dev,
                    &mut scratch,
                    &mut output,
                    done,
                )?;
            }
        }
    }
    output.finish(done)
}

/// Splits the chunk's rows into batches whose output fits one output buffer and runs the
/// numeric phase of each into the pipeline.
#[allow(clippy::too_many_arguments)]
fn numeric_batches<T: DeviceScalar>(
    job: &Job<'_, T>,
    method: &Method,
    counts: &[u64],
    c_off: &[u64],
    c_off_dev: DeviceSlice<'_, u64>,
    scratch: &mut Scratch,
    output: &mut OutputPipeline<'_, T>,
    done: &mut dyn FnMut(ChunkProduct<T>) -> Result<()>,
) -> Result<()> {
    let total = *c_off.last().unwrap_or(&0);
    let capacity = output.capacity_for(total, job.stream, done)?;
    let mut start = 0usize;
    let n = counts.len();
    while start < n {
        let mut end = start;
        while end < n && c_off[end + 1] - c_off[start] <= capacity {
            end += 1;
        }
        if end == start {
            return Err(out_of_memory(
                &format!("row {} of C (output buffer)", job.rows.start + start),
                counts[start] * entry_bytes::<T>(),
                capacity * entry_bytes::<T>(),
            ));
        }
        let len = c_off[end] - c_off[start];
        let base = c_off[start];
        let _span = tracing::debug_span!("numeric", rows = end - start, nnz = len).entered();
        output.batch(
            job.stream,
            &counts[start..end],
            len,
            end == n,
            done,
            |cols, vals| match method {
                Method::Adaptive => adaptive::numeric(
                    job,
                    start..end,
                    counts,
                    c_off_dev,
                    base,
                    cols,
                    vals,
                    scratch,
                ),
                Method::RowRow => tiled::numeric(
                    job,
                    tiled::Tiling::RowRow,
                    start..end,
                    c_off_dev,
                    base,
                    cols,
                    vals,
                ),
                _ => tiled::numeric(
                    job,
                    tiled::Tiling::ColumnRow,
                    start..end,
                    c_off_dev,
                    base,
                    cols,
                    vals,
                ),
            },
        )?;
        start = end;
    }
    Ok(())
}

/// `A · B` with `algorithm`.
pub(crate) fn multiply<T: DeviceScalar>(
    gpu: &Gpu,
    a: &Csr<T>,
    b: &Csr<T>,
    algorithm: SpgemmAlgorithm,
) -> Result<Csr<T>> {
    let whole = ProductChunk {
        rows: 0..a.nrows(),
        cols: 0..b.ncols(),
    };
    let mut result = None;
    multiply_chunks(
        gpu,
        a,
        b,
        std::slice::from_ref(&whole),
        algorithm,
        &mut |c| {
            result = Some(c.product);
            Ok(())
        },
    )?;
    result.ok_or_else(|| Error::InvalidArgument("cuda: SpGEMM produced no result".into()))
}
