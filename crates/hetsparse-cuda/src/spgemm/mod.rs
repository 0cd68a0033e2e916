//! SpGEMM on the GPU: operands uploaded once, then each chunk of C (a row range of A times a
//! column window of B; the whole product is one chunk) goes through
//!
//! 1. row analysis (Adaptive, which bins rows by it): products per row, on the GPU
//!    (`spgemm_row_products`);
//! 2. symbolic: exact entries per row, by the chosen algorithm's kernels
//!    (ESC counts inside its batches instead, see [`esc`]);
//! 3. numeric: for a product that fits on the device, in one pass into C allocated whole
//!    there ([`multiply_resident`]; a host call then downloads and checks C once); for a chunk
//!    (the scheduler's) or a C larger than the device, in row batches sized to the output
//!    buffers: each batch is written into one of two device buffers and copied to pinned host
//!    memory on a second stream while the next batch computes ([`pipeline`]).
//!
//! All counts and offsets are 64-bit. Work memory comes from grow-only arenas allocated
//! outside the loops (Xia et al. §IV.B).

mod adaptive;
mod binning;
mod esc;
mod pipeline;
pub(crate) mod semiring;
mod tiled;

use std::borrow::Cow;
use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hetsparse_core::backend::memory::csr_bytes;
use hetsparse_core::{
    ChunkPlace, ChunkProduct, ChunkTiming, Csr, CsrWindow, Error, MemoryRequirement, ProductChunk,
    Result, RunControl, Shaped, SpgemmAlgorithm,
};

use crate::context::{Event, Gpu, LaunchConfig, Stream};
use crate::error::out_of_memory;
use crate::memory::{DeviceArena, DeviceBuffer, DeviceSlice, DeviceSliceMut};
use crate::resident::{DeviceCsr, Held};
use crate::scalar::DeviceScalar;

use binning::{Histogram, KeptBins, Weights};
pub(crate) use pipeline::Delivery;
use pipeline::{Landed, OutputPipeline};

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

/// One chunk's operands: its windows of A (rows, every column) and of B (columns, every row)
/// on the device, as [`ProductChunk::windows`] made them. ESC plans its batches on the host
/// from A's column indices (and B's, for a column window): those are `a_cols` and `b_cols`
/// where it runs.
pub(crate) struct Job<'a, T: DeviceScalar> {
    pub gpu: &'a Gpu,
    pub stream: &'a Stream,
    pub a: CsrWindow<&'a DeviceCsr<T>>,
    pub b: CsrWindow<&'a DeviceCsr<T>>,
    pub a_cols: Option<&'a [u32]>,
    pub b_cols: Option<&'a [u32]>,
}

impl<T: DeviceScalar> Shaped for &DeviceCsr<T> {
    fn shape(&self) -> (usize, usize) {
        (self.nrows, self.ncols)
    }
}

impl<'a, T: DeviceScalar> Job<'a, T> {
    /// The job of `chunk` of `a · b` (which must lie inside the product: an error otherwise).
    fn of_chunk(
        gpu: &'a Gpu,
        stream: &'a Stream,
        (a, b): (&'a DeviceCsr<T>, &'a DeviceCsr<T>),
        chunk: &ProductChunk,
        (a_cols, b_cols): (Option<&'a [u32]>, Option<&'a [u32]>),
    ) -> Result<Self> {
        let (a, b) = chunk.windows(a, b)?;
        Ok(Job {
            gpu,
            stream,
            a,
            b,
            a_cols,
            b_cols,
        })
    }
    /// The job of all of `a · b`.
    fn whole(
        gpu: &'a Gpu,
        stream: &'a Stream,
        (a, b): (&'a DeviceCsr<T>, &'a DeviceCsr<T>),
        a_cols: Option<&'a [u32]>,
    ) -> Result<Self> {
        let whole = ProductChunk {
            rows: 0..a.nrows,
            cols: 0..b.ncols,
        };
        Self::of_chunk(gpu, stream, (a, b), &whole, (a_cols, None))
    }
}

impl<T: DeviceScalar> Job<'_, T> {
    /// Rows of A (and of C).
    pub fn rows(&self) -> Range<usize> {
        self.a.rows()
    }
    pub fn nrows(&self) -> usize {
        self.a.nrows()
    }
    /// First column of B (and of C) in the window.
    pub fn col_lo(&self) -> u32 {
        self.b.col_lo()
    }
    /// One past the last column of B (and of C) in the window.
    pub fn col_hi(&self) -> u32 {
        self.b.col_hi()
    }
    pub fn width(&self) -> u64 {
        self.b.ncols() as u64
    }
    /// Whether the window is all of B's columns.
    pub fn full_width(&self) -> bool {
        self.b.all_columns()
    }
}

/// Where the numeric kernels put C's column indices.
pub(crate) enum ColsOut<'a> {
    /// Memory the kernels write the columns into.
    Write(DeviceSliceMut<'a, u32>),
    /// C's columns already (a plan's shared structure): kernels that can read them place each
    /// value under its column and write no column.
    Known(DeviceSlice<'a, u32>),
}

impl<'a> ColsOut<'a> {
    /// Elements.
    fn len(&self) -> usize {
        match self {
            ColsOut::Write(c) => c.len(),
            ColsOut::Known(c) => c.len(),
        }
    }

    /// Elements `start..start + len`, of the same kind.
    fn sub(&mut self, start: usize, len: usize) -> ColsOut<'_> {
        match self {
            ColsOut::Write(c) => ColsOut::Write(c.sub_mut(start, len)),
            ColsOut::Known(c) => ColsOut::Known(c.sub(start, len)),
        }
    }

    /// The memory to write, for kernels that always write C's columns (`who`); known columns
    /// are an error (no caller gives them to such kernels).
    fn written(self, who: &str) -> Result<DeviceSliceMut<'a, u32>> {
        match self {
            ColsOut::Write(c) => Ok(c),
            ColsOut::Known(_) => Err(Error::Internal {
                backend: crate::error::BACKEND,
                what: format!("{who} write C's columns, and were given a plan's to read"),
            }),
        }
    }
}

/// Where the numeric phase writes C's rows: batches of entries, each written by a `launch`
/// into the column and value slices it is given.
pub(crate) trait Output<T: DeviceScalar> {
    /// Entries one batch may hold, for a chunk of `wanted` entries.
    fn capacity_for(&mut self, wanted: u64, stream: &Stream) -> Result<u64>;
    /// Runs one batch of `len` entries (rows with `counts` entries each); `last` ends the chunk.
    fn batch(
        &mut self,
        stream: &Stream,
        counts: &[u64],
        len: u64,
        last: bool,
        launch: impl FnOnce(ColsOut<'_>, DeviceSliceMut<'_, T::Device>) -> Result<()>,
    ) -> Result<()>;
    /// The chunk's exact entry count, once known (where the output can make room for it).
    fn expect_entries(&mut self, _entries: u64) -> Result<()> {
        Ok(())
    }
}

/// Batches through the double-buffered pipeline to the host, chunks handed to `done`.
pub(crate) struct ToHost<'p, 'g, 'd, 'c, 'f, T: DeviceScalar> {
    pub pipeline: &'p mut OutputPipeline<'g, T>,
    pub done: &'p mut Delivery<'d, 'c, 'f, T>,
}

impl<T: DeviceScalar> Output<T> for ToHost<'_, '_, '_, '_, '_, T> {
    fn capacity_for(&mut self, wanted: u64, stream: &Stream) -> Result<u64> {
        self.pipeline.capacity_for(wanted, stream, self.done)
    }
    fn expect_entries(&mut self, entries: u64) -> Result<()> {
        let in_place = self.done.in_place();
        self.pipeline.expect_entries(entries, in_place)
    }
    fn batch(
        &mut self,
        stream: &Stream,
        counts: &[u64],
        len: u64,
        last: bool,
        launch: impl FnOnce(ColsOut<'_>, DeviceSliceMut<'_, T::Device>) -> Result<()>,
    ) -> Result<()> {
        self.pipeline
            .batch(stream, counts, len, last, self.done, launch)
    }
}

/// Batches written one after another into C's arrays on the device.
pub(crate) struct ToDevice<'c, T: DeviceScalar> {
    pub cols: ColsOut<'c>,
    pub vals: DeviceSliceMut<'c, T::Device>,
    pub at: u64,
}

impl<T: DeviceScalar> Output<T> for ToDevice<'_, T> {
    fn capacity_for(&mut self, _wanted: u64, _stream: &Stream) -> Result<u64> {
        // C is allocated whole: a batch is limited by work memory only (`batch` checks that
        // each one lands inside C).
        Ok(u64::MAX)
    }
    fn batch(
        &mut self,
        _stream: &Stream,
        counts: &[u64],
        len: u64,
        _last: bool,
        launch: impl FnOnce(ColsOut<'_>, DeviceSliceMut<'_, T::Device>) -> Result<()>,
    ) -> Result<()> {
        let sum: u64 = counts.iter().sum();
        let room = self.cols.len() as u64 - self.at;
        if sum != len || len > room {
            return Err(Error::Internal {
                backend: crate::error::BACKEND,
                what: format!(
                    "SpGEMM batch of {len} entries (rows counting {sum}) at entry {} of a \
                     product of {}",
                    self.at,
                    self.cols.len()
                ),
            });
        }
        let (at, n) = (self.at as usize, len as usize);
        launch(self.cols.sub(at, n), self.vals.sub_mut(at, n))?;
        self.at += len;
        Ok(())
    }
}

/// A grow-only device arena: reallocated (larger) only when a phase needs more than it has,
/// never beyond `cap`.
pub(crate) struct Scratch {
    arena: Option<DeviceArena>,
    cap: u64,
    /// The one stream that uses the arena, where it is stream-ordered memory on that stream.
    home: Option<Arc<Stream>>,
}

impl Scratch {
    fn new(cap: u64) -> Self {
        Scratch {
            arena: None,
            cap,
            home: None,
        }
    }
    /// An arena of stream-ordered memory for a call whose kernels all run on `home`: replacing
    /// or dropping it queues the free behind them instead of waiting for them, and the pool
    /// keeps the memory for the next call (a plan's executions ask for the same sizes each
    /// time).
    fn on(cap: u64, home: &Arc<Stream>) -> Self {
        Scratch {
            home: Some(Arc::clone(home)),
            ..Scratch::new(cap)
        }
    }
    /// The most a phase may ask for.
    pub fn cap(&self) -> u64 {
        self.cap
    }
    /// An empty arena of at least `bytes`. Waits for `stream` before replacing a smaller one
    /// of plain memory (kernels queued earlier may still use it).
    pub fn get(
        &mut self,
        gpu: &Gpu,
        stream: &Stream,
        bytes: u64,
        what: &str,
    ) -> Result<&mut DeviceArena> {
        if bytes > self.cap {
            return Err(out_of_memory(what, bytes, self.cap));
        }
        let have = self.arena.as_ref().map_or(0, |a| a.capacity());
        if have < bytes {
            let size = bytes.max(have.saturating_mul(2)).min(self.cap);
            let home = self.home.clone().filter(|h| h.raw() == stream.raw());
            if self.arena.is_some() && home.is_none() {
                stream.synchronize()?;
            }
            // Dropped first, so that its memory can serve the larger one: stream-ordered
            // memory is freed on `home` behind the kernels queued there that use it.
            self.arena = None;
            self.arena = Some(match &home {
                Some(home) => DeviceArena::new_on(gpu, home, size, what)?,
                None => DeviceArena::new(gpu.memory(), stream, size, what)?,
            });
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

/// Products per row of the job's rows (row analysis on the GPU), left on the device, and
/// their histogram by the bins of the window's width (one small read-back).
fn analyse<'a, T: DeviceScalar>(
    job: &Job<'_, T>,
    arena: &'a DeviceArena,
    bin_arena: &mut DeviceArena,
) -> Result<(DeviceSlice<'a, u64>, Histogram)> {
    let n = job.nrows();
    let _span = tracing::debug_span!("analysis", rows = n).entered();
    let mut products = arena.alloc::<u64>(n, "row products")?;
    if n == 0 {
        return Ok((products.into_view(), Histogram::default()));
    }
    // Rows too long for one warp are listed (at most one per row; the count after the list).
    let huge = arena.alloc::<u32>(n + 1, "rows of A too long for a warp")?;
    let (mut huge_rows, mut huge_count) = huge.split_at_mut(n);
    huge_count.zero(job.stream)?;
    let a_off = job.a.matrix().offsets.read(job.stream)?.arg();
    let a_col = job.a.matrix().cols.read(job.stream)?.arg();
    let b_off = job.b.matrix().offsets.read(job.stream)?.arg();
    let row0 = crate::Arg::U64(job.rows().start as u64);
    let mut args = vec![
        crate::Arg::U64(n as u64),
        row0,
        a_off,
        a_col,
        b_off,
        products.arg_mut(),
        huge_rows.arg_mut(),
        huge_count.arg_mut(),
    ];
    // A's rows as the matrix has them on average (a window's rows are not counted on the host).
    let mean_a = job.a.matrix().nnz() / (job.a.matrix().nrows as u64).max(1);
    let (function, config) = match analysis_warps_per_row(mean_a) {
        None => (
            "spgemm_row_products",
            LaunchConfig::for_threads(n as u64, 256),
        ),
        Some(warps) => {
            args.push(crate::Arg::U32(warps));
            let rows_per_block = u64::from(ANALYSIS_THREADS / 32 / warps);
            (
                "spgemm_row_products_wide",
                LaunchConfig {
                    grid: (n as u64).div_ceil(rows_per_block).clamp(1, 1 << 20) as u32,
                    block: ANALYSIS_THREADS,
                    shared_bytes: 0,
                },
            )
        }
    };
    // SAFETY: arguments match spgemm_row_products (or _wide, with its warps per row, which
    // divide the block's warps) and spgemm_row_products_huge; all buffers cover the rows read,
    // the list holds every row of the job.
    unsafe {
        job.gpu.launch(
            job.gpu.function("spgemm", function)?,
            config,
            job.stream,
            &args,
        )?;
        job.gpu.launch(
            job.gpu.function("spgemm", "spgemm_row_products_huge")?,
            LaunchConfig {
                grid: 4 * job.gpu.multiprocessors(),
                block: 256,
                shared_bytes: 0,
            },
            job.stream,
            &[
                row0,
                a_off,
                a_col,
                b_off,
                huge_rows.view().arg(),
                huge_count.view().arg(),
                products.arg_mut(),
            ],
        )?;
    }
    let products = products.into_view();
    bin_arena.reset();
    let hist = binning::histogram(
        job,
        Weights::PerRow(products),
        job.rows().start,
        job.width(),
        bin_arena,
    )?;
    Ok((products, hist))
}

/// Threads of a block of the row analysis.
const ANALYSIS_THREADS: u32 = 256;

/// Entries of A per row from which the row analysis gives every row warps of its own
/// (`RP_LONG` in the kernels), and entries per lane and step it aims at beyond that.
const ANALYSIS_LONG_ROWS: u64 = 32;
const ANALYSIS_ENTRIES_PER_LANE: u64 = 8;

/// Warps per row of the row analysis for rows of A of `mean_a` entries on average: `None`
/// (a thread per row, the long ones by their warp in turn) up to [`ANALYSIS_LONG_ROWS`], else
/// enough warps (1, 2, 4 or 8) for about [`ANALYSIS_ENTRIES_PER_LANE`] entries per lane. A warp
/// that walked 32 rows of 2000 entries in turn held a product of a thousand such rows (a
/// coarse AMG level's restriction) for most of a millisecond.
fn analysis_warps_per_row(mean_a: u64) -> Option<u32> {
    if mean_a <= ANALYSIS_LONG_ROWS {
        return None;
    }
    let lanes = mean_a.div_ceil(ANALYSIS_ENTRIES_PER_LANE);
    Some(lanes.div_ceil(32).next_power_of_two().clamp(1, 8) as u32)
}

/// Bytes of the row analysis of `n` rows: products per row and the list of rows too long
/// for a warp.
fn analysis_bytes(n: u64) -> u64 {
    footprint(&[(8, n), (4, n + 1)])
}

/// Bytes of the per-chunk row arrays of a chunk of `n` rows: the row analysis, entries and
/// offsets per row, and the scan's block sums.
fn row_arrays_bytes(n: u64) -> u64 {
    analysis_bytes(n) + footprint(&[(8, n), (8, n + 1)]) + binning::scan_bytes(n)
}

/// How an algorithm computes a chunk.
#[derive(Clone, Copy, Debug)]
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

/// An operand on the device, and its host matrix where it came from the host.
type Placed<'a, T> = (Held<'a, DeviceCsr<T>>, Option<&'a Csr<T>>);

/// A SpGEMM operand: a host matrix (uploaded for the call) or a resident one.
#[derive(Clone, Copy)]
pub(crate) enum Operand<'a, T: DeviceScalar> {
    Host(&'a Csr<T>),
    Device(&'a DeviceCsr<T>),
}

impl<'a, T: DeviceScalar> Operand<'a, T> {
    fn shape(&self) -> (usize, usize) {
        match self {
            Operand::Host(m) => m.shape(),
            Operand::Device(m) => (m.nrows, m.ncols),
        }
    }
    /// Whether both operands are one host matrix (`A · A`: the same or a clone), uploaded
    /// once.
    fn same_host_matrix(&self, other: &Self) -> bool {
        matches!((self, other), (Operand::Host(x), Operand::Host(y)) if x.shares_arrays(y))
    }
    /// The operand on the device (uploaded on `stream` if it is on the host, into
    /// stream-ordered memory the call's end frees without waiting), and the host matrix where
    /// there is one.
    fn place(self, gpu: &Gpu, stream: &Arc<Stream>, name: &str) -> Result<Placed<'a, T>> {
        Ok(match self {
            Operand::Host(m) => (
                Held::Owned(DeviceCsr::upload_to(gpu, stream, Some(stream), m, name)?),
                Some(m),
            ),
            // A resident operand may still be written on another stream (stream-ordered
            // results of other calls): its buffers' reads order this stream after the writer.
            Operand::Device(m) => (Held::Borrowed(m), None),
        })
    }
}

/// Where the chunks of one call read A and B on the device.
enum Operands<'a, T: DeviceScalar> {
    /// A and B placed whole for the call (uploaded once, or resident; `b` is `None` for
    /// `A · A` of one host matrix), with ESC's host column indices where it runs.
    Whole {
        a: Held<'a, DeviceCsr<T>>,
        b: Option<Held<'a, DeviceCsr<T>>>,
        a_cols: Option<Cow<'a, [u32]>>,
        b_cols: Option<Cow<'a, [u32]>>,
        /// Bytes of the upload, charged to the first chunk, and its events.
        upload: Option<(u64, Event, Event)>,
    },
    /// Host operands too large to place whole (Xia et al. §III): each chunk uploads its rows
    /// of A, and its window of B unless the chunk before had the same one.
    Windowed(Windows<'a, T>),
}

/// Host operands taken chunk by chunk, and the windows of the last chunk on the device.
struct Windows<'a, T: DeviceScalar> {
    a: &'a Csr<T>,
    b: &'a Csr<T>,
    esc: bool,
    /// Device bytes of the largest chunk's rows of A and window of B.
    peak: u64,
    rows: Option<(Range<usize>, DeviceCsr<T>)>,
    cols: Option<(Range<usize>, DeviceCsr<T>)>,
}

impl<'a, T: DeviceScalar> Operands<'a, T> {
    /// Places the operands of `chunks`: whole, unless both come from the host and together
    /// would take more than half the memory left.
    fn place(
        gpu: &Gpu,
        stream: &Arc<Stream>,
        a: Operand<'a, T>,
        b: Operand<'a, T>,
        chunks: &[ProductChunk],
        esc: bool,
    ) -> Result<Self> {
        if let (Operand::Host(ha), Operand::Host(hb)) = (a, b) {
            let value = std::mem::size_of::<T>();
            let a_bytes = csr_bytes(ha.nrows(), ha.nnz(), value);
            let b_bytes = if a.same_host_matrix(&b) {
                0
            } else {
                csr_bytes(hb.nrows(), hb.nnz(), value)
            };
            if a_bytes.saturating_add(b_bytes) > gpu.memory().available() / 2 {
                let peak = Windows::peak_bytes(ha, hb, chunks);
                tracing::debug!(a_bytes, b_bytes, peak, "operands placed chunk by chunk");
                return Ok(Operands::Windowed(Windows {
                    a: ha,
                    b: hb,
                    esc,
                    peak,
                    rows: None,
                    cols: None,
                }));
            }
        }
        let uploaded = Event::new(true)?;
        uploaded.record(stream)?;
        let (da, a_host) = a.place(gpu, stream, "A")?;
        let (db, b_host) = if a.same_host_matrix(&b) {
            (None, a_host)
        } else {
            let (db, b_host) = b.place(gpu, stream, "B")?;
            (Some(db), b_host)
        };
        let placed = Event::new(true)?;
        placed.record(stream)?;
        let ncols = db.as_ref().map_or(da.ncols, |m| m.ncols);
        let windowed = chunks
            .iter()
            .any(|c| c.cols.start != 0 || c.cols.end != ncols);
        let a_cols = esc_columns(stream, &da, a_host, esc)?;
        let b_cols = esc_columns(
            stream,
            db.as_deref().unwrap_or(&da),
            b_host,
            esc && windowed,
        )?;
        let host_bytes = |m: Operand<'_, T>| match m {
            Operand::Host(h) => csr_bytes(h.nrows(), h.nnz(), std::mem::size_of::<T>()),
            Operand::Device(_) => 0,
        };
        let bytes = if a.same_host_matrix(&b) {
            host_bytes(a)
        } else {
            host_bytes(a) + host_bytes(b)
        };
        Ok(Operands::Whole {
            a: da,
            b: db,
            a_cols,
            b_cols,
            upload: Some((bytes, uploaded, placed)),
        })
    }

    /// Whether the chunks take their operands one by one.
    fn windowed(&self) -> bool {
        matches!(self, Operands::Windowed(_))
    }

    /// Device bytes the chunks' windows take beside what the call reserves (none when the
    /// operands are placed whole).
    fn window_bytes(&self) -> u64 {
        match self {
            Operands::Whole { .. } => 0,
            Operands::Windowed(w) => w.peak,
        }
    }

    /// The work memory bound of the chunks ([`work_bound`]): from the histogram of the whole
    /// product, by the analysis kernel, on operands placed whole. Out of core there is no
    /// bound below the memory left (a pass over A and B on the host per call to find one
    /// cost more than the chunks' kernels): the work memory grows to what the chunks ask,
    /// up to its share.
    fn work_bound(&self, gpu: &Gpu, stream: &Arc<Stream>, method: Method) -> Result<u64> {
        match self {
            Operands::Whole { a, b, .. } => {
                let db = b.as_deref().unwrap_or(a);
                let hist = whole_histogram(gpu, stream, a, db)?;
                Ok(work_bound::<T>(method, &hist, db.ncols as u64, a.nnz()))
            }
            Operands::Windowed(_) => Ok(u64::MAX),
        }
    }

    /// Puts `chunk`'s operands on the device where they are not yet: the time and bytes of
    /// the upload, to charge to the chunk.
    fn prepare(
        &mut self,
        gpu: &Gpu,
        stream: &Arc<Stream>,
        chunk: &ProductChunk,
    ) -> Result<(Duration, u64)> {
        match self {
            Operands::Whole { upload, .. } => match upload.take() {
                Some((bytes, uploaded, placed)) => {
                    placed.synchronize()?;
                    Ok((pipeline::elapsed(&uploaded, &placed)?, bytes))
                }
                None => Ok((Duration::ZERO, 0)),
            },
            Operands::Windowed(w) => w.prepare(gpu, stream, chunk),
        }
    }

    /// The job of `chunk`, once [`Operands::prepare`]d.
    fn job<'s>(
        &'s self,
        gpu: &'s Gpu,
        stream: &'s Stream,
        chunk: &ProductChunk,
    ) -> Result<Job<'s, T>> {
        match self {
            Operands::Whole {
                a,
                b,
                a_cols,
                b_cols,
                ..
            } => Job::of_chunk(
                gpu,
                stream,
                (a, b.as_deref().unwrap_or(a)),
                chunk,
                (a_cols.as_deref(), b_cols.as_deref()),
            ),
            Operands::Windowed(w) => w.job(gpu, stream),
        }
    }
}

impl<T: DeviceScalar> Windows<'_, T> {
    /// Device bytes of the largest rows of `a` and the largest window of `b` among `chunks`.
    fn peak_bytes(a: &Csr<T>, b: &Csr<T>, chunks: &[ProductChunk]) -> u64 {
        let value = std::mem::size_of::<T>();
        let offsets = a.row_offsets();
        let rows = chunks
            .iter()
            .map(|c| {
                let nnz = offsets[c.rows.end] - offsets[c.rows.start];
                csr_bytes(c.rows.len(), nnz, value)
            })
            .max()
            .unwrap_or(0);
        let whole = |c: &ProductChunk| c.cols.start == 0 && c.cols.end == b.ncols();
        let window = if chunks.iter().all(whole) {
            csr_bytes(b.nrows(), b.nnz(), value)
        } else {
            // Entries of B up to each column, so that a window's are one subtraction.
            let mut before = vec![0u64; b.ncols() + 1];
            for &j in b.col_indices() {
                before[j as usize + 1] += 1;
            }
            for j in 0..b.ncols() {
                before[j + 1] += before[j];
            }
            chunks
                .iter()
                .map(|c| csr_bytes(b.nrows(), before[c.cols.end] - before[c.cols.start], value))
                .max()
                .unwrap_or(0)
        };
        rows + window
    }

    fn prepare(
        &mut self,
        gpu: &Gpu,
        stream: &Arc<Stream>,
        chunk: &ProductChunk,
    ) -> Result<(Duration, u64)> {
        let started = Instant::now();
        let value = std::mem::size_of::<T>();
        // The last chunk's rows make room for this one's (freed in stream order, after the
        // kernels that read them).
        self.rows = None;
        let rows = DeviceCsr::upload_rows(gpu, stream, self.a, chunk.rows.clone(), "rows of A")?;
        let mut bytes = csr_bytes(rows.nrows, rows.nnz(), value);
        self.rows = Some((chunk.rows.clone(), rows));
        if !matches!(&self.cols, Some((cols, _)) if cols == &chunk.cols) {
            self.cols = None;
            let panel = CsrWindow::columns_of(self.b, chunk.cols.clone())?.as_csr()?;
            let window = DeviceCsr::upload_to(gpu, stream, Some(stream), &panel, "window of B")?;
            bytes += csr_bytes(window.nrows, window.nnz(), value);
            self.cols = Some((chunk.cols.clone(), window));
        }
        Ok((started.elapsed(), bytes))
    }

    /// The job of the chunk last prepared: all of its rows and window.
    fn job<'s>(&'s self, gpu: &'s Gpu, stream: &'s Stream) -> Result<Job<'s, T>> {
        let (Some((rows, a)), Some((_, b))) = (&self.rows, &self.cols) else {
            return Err(Error::Internal {
                backend: crate::error::BACKEND,
                what: "a chunk's operands were not placed".into(),
            });
        };
        let a_cols = self.esc.then(|| {
            let offsets = self.a.row_offsets();
            &self.a.col_indices()[offsets[rows.start] as usize..offsets[rows.end] as usize]
        });
        let local = ProductChunk {
            rows: 0..a.nrows,
            cols: 0..b.ncols,
        };
        Job::of_chunk(gpu, stream, (a, b), &local, (a_cols, None))
    }
}

/// A matrix's column indices on the host where `needed`: the host matrix's own, or for a
/// resident one a copy from the device (4 bytes per entry, once per call).
fn esc_columns<'a, T: DeviceScalar>(
    stream: &Stream,
    dev: &DeviceCsr<T>,
    host: Option<&'a Csr<T>>,
    needed: bool,
) -> Result<Option<Cow<'a, [u32]>>> {
    Ok(match (needed, host) {
        (false, _) => None,
        (true, Some(h)) => Some(Cow::Borrowed(h.col_indices())),
        (true, None) => {
            let _span =
                tracing::debug_span!("D2H", what = "ESC: column indices", entries = dev.nnz())
                    .entered();
            Some(Cow::Owned(dev.cols.read(stream)?.to_vec(stream)?))
        }
    })
}

/// The index limits of the kernels: 32-bit column indices (one value reserved) and row lists.
fn check_limits(a: (usize, usize), b: (usize, usize)) -> Result<()> {
    if b.1 > u32::MAX as usize {
        return Err(Error::TooLarge {
            what: "columns of B on the CUDA backend (column indices are 32-bit, one value is reserved)".into(),
            needed: b.1 as u64,
            limit: u64::from(u32::MAX),
            unit: "columns",
        });
    }
    if a.0 > u32::MAX as usize {
        return Err(Error::TooLarge {
            what: "rows of A on the CUDA backend (row lists are 32-bit)".into(),
            needed: a.0 as u64,
            limit: u64::from(u32::MAX),
            unit: "rows",
        });
    }
    Ok(())
}

/// Fractions of the memory left after the operands: work memory 5/8, the two output buffers
/// of the host pipeline 3/16 each.
pub(crate) fn scratch_cap(available: u64) -> u64 {
    available / 8 * 5
}

/// The most work memory (the scratch arena) one call asks for, given the histogram of the
/// product's rows (every chunk's rows and window need no more): Adaptive's hash tables as if
/// every row's table were in global memory, or a group of dense rows where rows may get one;
/// ESC's expansion of all rows at once, and Adaptive's symbolic tables, which it borrows; the
/// tiled algorithms use shared memory only. Calls cap their scratch arena at this, so it bounds
/// what they reserve.
fn work_bound<T: DeviceScalar>(method: Method, hist: &Histogram, width: u64, a_nnz: u64) -> u64 {
    let n: u64 = hist.rows.iter().sum();
    let acc = acc_bytes::<T>();
    let slots: u64 = hist
        .bins()
        .map(|(b, rows)| rows * Histogram::table_size(b))
        .sum();
    // Rows that may get a dense accumulator or column ranges (the GPU's shared memory and the
    // rows of A decide which exactly), up to as many as make a group wide enough to keep the
    // GPU busy.
    let dense_rows: u64 = hist
        .bins()
        .filter(|&(b, _)| adaptive::may_be_dense(Histogram::table_size(b), width))
        .map(|(_, rows)| rows)
        .sum();
    let stride = adaptive::dense_stride(width);
    let dense = |value_bytes: u64| {
        if dense_rows == 0 {
            0
        } else {
            adaptive::dense_footprint(dense_rows.min(1024), stride, value_bytes)
                .max(adaptive::range_counts_bound(dense_rows, width))
        }
    };
    let hash = |value_bytes: u64| {
        (footprint(&[(8, n), (4, slots), (value_bytes, slots)]) + 64 * 256).max(dense(value_bytes))
    };
    match method {
        Method::RowRow | Method::ColumnRow => 0,
        Method::Adaptive => hash(acc),
        Method::Esc => hash(0).max(esc::need(n, a_nnz, hist.weight, acc)),
    }
}

/// The histogram of the products of every row of `A·B` (the whole product), by the analysis
/// kernel.
fn whole_histogram<T: DeviceScalar>(
    gpu: &Gpu,
    stream: &Arc<Stream>,
    a: &DeviceCsr<T>,
    b: &DeviceCsr<T>,
) -> Result<Histogram> {
    let n = a.nrows as u64;
    let arena = DeviceArena::new_on(gpu, stream, analysis_bytes(n), "row analysis")?;
    let mut bin_arena = DeviceArena::new_on(gpu, stream, binning::bytes(0), "row bins")?;
    let job = Job::whole(gpu, stream, (a, b), None)?;
    Ok(analyse(&job, &arena, &mut bin_arena)?.1)
}

/// Bytes of one entry of C in the host pipeline's buffers, and the entries one buffer holds
/// at most.
fn pipeline_entries<T: DeviceScalar>(bound: u64) -> u64 {
    bound
        .max(1)
        .min(pipeline::MAX_SLOT_BYTES / entry_bytes::<T>())
}

/// What a SpGEMM call needs in device memory: the operands it uploads, the row analysis and
/// arrays, the work memory bound ([`work_bound`]), and C (on the device) or the two output
/// buffers it passes through to the host, whichever is larger; C's size is bounded by the
/// products per row (each makes at most one entry) and B's width. Adaptive's numeric bins of a
/// product on the device (a list of its rows) are made once the row arrays, which are larger,
/// are freed, and take their room.
pub(crate) fn requirement<T: DeviceScalar>(
    gpu: &Gpu,
    a: Operand<'_, T>,
    b: Operand<'_, T>,
    algorithm: SpgemmAlgorithm,
) -> Result<MemoryRequirement> {
    check_limits(a.shape(), b.shape())?;
    let value = std::mem::size_of::<T>();
    let (n, width) = (a.shape().0 as u64, b.shape().1 as u64);
    let hist = match (a, b) {
        (Operand::Host(ha), Operand::Host(hb)) => {
            Histogram::of(&hetsparse_core::analysis::row_products(ha, hb)?, width)
        }
        _ => {
            gpu.bind()?;
            let stream = gpu.stream()?;
            let (da, _) = a.place(gpu, &stream, "A")?;
            let (db, _) = b.place(gpu, &stream, "B")?;
            whole_histogram(gpu, &stream, &da, &db)?
        }
    };
    let bound = hist.capped_weight;
    let operand = |m: Operand<'_, T>| match m {
        Operand::Host(h) => csr_bytes(h.nrows(), h.nnz(), value),
        Operand::Device(_) => 0,
    };
    let a_nnz = match a {
        Operand::Host(h) => h.nnz(),
        Operand::Device(d) => d.nnz(),
    };
    // ESC sizes its output buffers by the products of a chunk, the others by its entries.
    let method = Method::of(algorithm);
    let batch = match method {
        Method::Esc => hist.weight,
        _ => bound,
    };
    let pipeline = 2 * pipeline_entries::<T>(batch) * entry_bytes::<T>();
    let mut r = MemoryRequirement::default();
    r.operand_bytes = operand(a) + operand(b);
    r.work_bytes = analysis_bytes(n)
        + row_arrays_bytes(n)
        + binning::bytes(n)
        + work_bound::<T>(method, &hist, width, a_nnz);
    r.output_bytes = csr_bytes(n as usize, bound, value).max(pipeline);
    r.pinned_host_bytes = pipeline;
    Ok(r)
}

/// What executing a plan needs beyond what the plan holds (C's structure and Adaptive's
/// numeric bins, reserved while the plan lives): C's values, the columns its numeric kernels
/// write, and work memory (operands resident).
pub(crate) fn plan_requirement<T: DeviceScalar>(structure: &Structure) -> MemoryRequirement {
    let nnz = structure.nnz;
    let mut r = MemoryRequirement::default();
    // Columns computed again, where the kernels cannot read the plan's. (An execution has no
    // symbolic phase, so no row arrays, and bins nothing: Adaptive's bins are the plan's.)
    let columns = if plan_reads_columns(&Method::of(structure.algorithm)) {
        0
    } else {
        nnz * 4
    };
    r.work_bytes = columns + structure.work_bound;
    r.output_bytes = nnz * std::mem::size_of::<T>() as u64;
    r
}

/// Whether a plan's execution with `method` reads C's columns from the plan instead of
/// writing them again (the hash kernels look each value up under its known column).
fn plan_reads_columns(method: &Method) -> bool {
    matches!(method, Method::Adaptive)
}

/// The listed chunks of `A · B`, each finished chunk delivered (handed out, or written into
/// its place in C) as it completes. Chunks are pipelined: a chunk's copy to the host overlaps
/// the next one's kernels. `run` is checked between chunks; an error names the chunk it
/// happened in.
pub(crate) fn multiply_chunks<T: DeviceScalar>(
    gpu: &Gpu,
    a: Operand<'_, T>,
    b: Operand<'_, T>,
    chunks: &[ProductChunk],
    algorithm: SpgemmAlgorithm,
    run: &RunControl,
    delivery: Delivery<'_, '_, '_, T>,
) -> Result<()> {
    check_limits(a.shape(), b.shape())?;
    gpu.bind()?;
    // Counts come from the symbolic kernels, which ESC borrows from Adaptive.
    let method = match (&delivery, Method::of(algorithm)) {
        (Delivery::Counts(_), Method::Esc) => Method::Adaptive,
        (_, method) => method,
    };
    let _span = tracing::info_span!(
        "spgemm",
        backend = "cuda",
        ?algorithm,
        chunks = chunks.len()
    )
    .entered();
    // A stream of the device's pool: its work memory and chunks of C come from the
    // stream-ordered pool on it (no allocation or free waits for the device).
    let stream = gpu.stream()?;
    let tracker = gpu.memory();
    let esc = matches!(method, Method::Esc);
    let mut operands = Operands::place(gpu, &stream, a, b, chunks, esc)?;
    let max_rows = chunks.iter().map(|c| c.rows.len()).max().unwrap_or(0) as u64;
    let bound = match method {
        Method::RowRow | Method::ColumnRow => 0,
        _ => operands.work_bound(gpu, &stream, method)?,
    };
    // Per-chunk arrays: products, row counts and offsets; the rows' bin lists.
    let mut chunk_arena = DeviceArena::new_on(
        gpu,
        &stream,
        row_arrays_bytes(max_rows),
        "per-chunk row arrays",
    )?;
    let mut bin_arena = DeviceArena::new_on(gpu, &stream, binning::bytes(max_rows), "row bins")?;
    // Room for the largest chunk's windows of the operands, when they come chunk by chunk.
    let rest = tracker.available().saturating_sub(operands.window_bytes());
    let mut scratch = Scratch::on(scratch_cap(rest).min(bound), &stream);
    let mut output =
        OutputPipeline::<T>::new(gpu, rest / 8 * 3 / 2, !matches!(method, Method::Esc))?;
    let (k0, k1) = (Event::new(true)?, Event::new(true)?);
    // Errors of the sink are the caller's, not a chunk's.
    let sink_failed = std::cell::Cell::new(false);
    // A run cancelled (from the sink, say) delivers no further chunk, also where the pipeline
    // has several finished ones to hand out at once.
    let failed = &sink_failed;
    let (mut to_caller, mut to_places, mut to_counter);
    let mut sink = match delivery {
        Delivery::Chunks(done) => {
            to_caller = move |c: ChunkProduct<T>| {
                run.checkpoint()?;
                done(c).inspect_err(|_| failed.set(true))
            };
            Delivery::Chunks(&mut to_caller)
        }
        Delivery::Places { places, done } => {
            to_places = move |i: usize, timing: ChunkTiming| {
                run.checkpoint()?;
                done(i, timing).inspect_err(|_| failed.set(true))
            };
            Delivery::Places {
                places,
                done: &mut to_places,
            }
        }
        Delivery::Counts(counts) => {
            to_counter = move |i: usize, rows: &[u64]| {
                run.checkpoint()?;
                counts(i, rows).inspect_err(|_| failed.set(true))
            };
            Delivery::Counts(&mut to_counter)
        }
    };
    let tag = |e: Error, index: usize| {
        if sink_failed.get() {
            e
        } else {
            e.in_chunk(index)
        }
    };
    for (index, chunk) in chunks.iter().enumerate() {
        run.checkpoint()?;
        let started = Instant::now();
        chunk_arena.reset();
        let mut one = || -> Result<()> {
            let (h2d, h2d_bytes) = operands.prepare(gpu, &stream, chunk)?;
            let job = operands.job(gpu, &stream, chunk)?;
            if let Delivery::Counts(counts) = &mut sink {
                if chunk.rows.is_empty() {
                    return counts(index, &[]);
                }
                let (_, c_off, products) = row_offsets(
                    &job,
                    &method,
                    &mut scratch,
                    &chunk_arena,
                    &mut bin_arena,
                    run,
                )?;
                let rows: Vec<u64> = c_off.windows(2).map(|w| w[1] - w[0]).collect();
                counts(index, &rows)?;
                run.add_done(products);
                return Ok(());
            }
            if !output.begin_chunk(index, chunk.clone(), job.width(), started, &mut sink)? {
                return Ok(());
            }
            output.charge(Duration::ZERO, h2d, h2d_bytes);
            k0.record(&stream)?;
            let products = match method {
                Method::Esc => {
                    let products = if run.is_watched() {
                        analyse(&job, &chunk_arena, &mut bin_arena)?.1.weight
                    } else {
                        0
                    };
                    run.add_planned(products);
                    {
                        let mut out = ToHost {
                            pipeline: &mut output,
                            done: &mut sink,
                        };
                        esc::chunk(&job, &mut scratch, &mut out)?;
                    }
                    // ESC's kernels run before and inside its batches: timed as a whole.
                    k1.record(&stream)?;
                    k1.synchronize()?;
                    output.charge(pipeline::elapsed(&k0, &k1)?, Duration::ZERO, 0);
                    products
                }
                _ => {
                    // C's offsets come to the host (they are part of the chunk's result and
                    // split it into batches); the symbolic kernels are done once they are here.
                    let (c_off_dev, c_off, products) = row_offsets(
                        &job,
                        &method,
                        &mut scratch,
                        &chunk_arena,
                        &mut bin_arena,
                        run,
                    )?;
                    k1.record(&stream)?;
                    k1.synchronize()?;
                    output.charge(pipeline::elapsed(&k0, &k1)?, Duration::ZERO, 0);
                    let total = c_off.last().copied().unwrap_or(0);
                    // A chunk whose C fits beside the work memory is computed whole on the
                    // device and downloaded once; only larger ones go through the batches.
                    // Out of core, every chunk does: its last batch is copied out while the
                    // next chunk's rows go up and its symbolic phase runs.
                    let direct_bytes = total.saturating_mul(entry_bytes::<T>());
                    if !operands.windowed()
                        && direct_bytes.saturating_add(scratch.cap()) <= tracker.available()
                    {
                        let place = match &mut sink {
                            Delivery::Places { places, .. } => places.get_mut(index),
                            _ => None,
                        };
                        let (landed, kernel, d2h) = chunk_on_device(
                            &job,
                            &stream,
                            &method,
                            c_off,
                            c_off_dev,
                            &mut scratch,
                            &mut bin_arena,
                            place,
                        )?;
                        output.complete_directly(landed, kernel, d2h, &mut sink)?;
                        run.add_done(products);
                        return Ok(());
                    }
                    let counts: Vec<u64> = c_off.windows(2).map(|w| w[1] - w[0]).collect();
                    let mut out = ToHost {
                        pipeline: &mut output,
                        done: &mut sink,
                    };
                    numeric_batches(
                        &job,
                        &method,
                        &counts,
                        &c_off,
                        c_off_dev,
                        &mut scratch,
                        &mut bin_arena,
                        &mut out,
                    )?;
                    output.keep_offsets(index, c_off);
                    products
                }
            };
            run.add_done(products);
            Ok(())
        };
        one().map_err(|e| tag(e, index))?;
    }
    output.finish(&mut sink).map_err(|e| {
        let last = chunks.len().saturating_sub(1);
        tag(e, last)
    })
}

/// The numeric phase of a whole chunk into C's arrays allocated on the device, checked there,
/// then downloaded (staged): straight into `place` where the chunk has one and its rows are one
/// run there, else as a host CSR matrix. With the numeric kernels' time and the download's.
/// `c_off` are C's row offsets (on the host and, as `c_off_dev`, on the device).
#[allow(clippy::too_many_arguments)]
fn chunk_on_device<T: DeviceScalar>(
    job: &Job<'_, T>,
    home: &Arc<Stream>,
    method: &Method,
    c_off: Vec<u64>,
    c_off_dev: DeviceSlice<'_, u64>,
    scratch: &mut Scratch,
    bin_arena: &mut DeviceArena,
    place: Option<&mut ChunkPlace<'_, T>>,
) -> Result<(Landed<T>, Duration, Duration)> {
    let n = job.nrows();
    let nnz = c_off.last().copied().unwrap_or(0);
    let _span = tracing::debug_span!("chunk on the device", rows = n, nnz).entered();
    let mut cols = DeviceBuffer::<u32>::new_on(job.gpu, home, nnz as usize, "column indices of C")?;
    let mut vals = DeviceBuffer::<T::Device>::new_on(job.gpu, home, nnz as usize, "values of C")?;
    let (k0, k1) = (Event::new(true)?, Event::new(true)?);
    k0.record(job.stream)?;
    numeric_rows(
        job,
        method,
        0..n,
        c_off_dev,
        0,
        ColsOut::Write(cols.write(job.stream)?),
        vals.write(job.stream)?,
        scratch,
        bin_arena,
    )?;
    k1.record(job.stream)?;
    let width = job.width() as usize;
    let valid = crate::resident::csr_valid_on_device(
        job.gpu,
        job.stream,
        (n, width, nnz),
        c_off_dev,
        cols.read(job.stream)?,
    )?;
    let kernel = pipeline::elapsed(&k0, &k1)?;
    let copying = Instant::now();
    let pool = job.gpu.pinned_pool();
    if let (true, Some(place)) = (valid, place) {
        let counts: Vec<u64> = c_off.windows(2).map(|w| w[1] - w[0]).collect();
        // SAFETY: each staged download writes every slot of its slice where it returns `Ok`.
        let filled = unsafe {
            place.fill_rows(&counts, |place_cols, place_vals| {
                cols.read(job.stream)?
                    .download_staged(job.stream, pool, place_cols)?;
                crate::resident::download_values_into::<T>(
                    vals.read(job.stream)?,
                    job.stream,
                    pool,
                    place_vals,
                )
            })?
        };
        if filled {
            return Ok((Landed::InPlace(nnz), kernel, copying.elapsed()));
        }
    }
    let host_cols = cols.read(job.stream)?.to_vec_staged(job.stream, pool)?;
    let host_vals =
        crate::resident::download_values::<T>(vals.read(job.stream)?, job.stream, pool)?;
    let d2h = copying.elapsed();
    let product = if valid {
        // SAFETY: copies of arrays `csr_valid_on_device` found to satisfy every CSR
        // invariant; `c_off` are the offsets it checked, copied before.
        unsafe { Csr::from_parts_unchecked(n, width, c_off, host_cols, host_vals) }
    } else {
        Csr::try_new(n, width, c_off, host_cols, host_vals).map_err(|e| Error::Internal {
            backend: crate::error::BACKEND,
            what: format!("a SpGEMM chunk is not a valid CSR matrix: {e}"),
        })?
    };
    Ok((Landed::Matrix(product), kernel, d2h))
}

/// C's row offsets for the job's rows, on the device and read back to the host, and the
/// job's intermediate products: its analysis, symbolic kernels and their scan.
fn row_offsets<'a, T: DeviceScalar>(
    job: &Job<'_, T>,
    method: &Method,
    scratch: &mut Scratch,
    chunk_arena: &'a DeviceArena,
    bin_arena: &mut DeviceArena,
    run: &RunControl,
) -> Result<(DeviceSlice<'a, u64>, Vec<u64>, u64)> {
    let analysed = analyse(job, chunk_arena, bin_arena)?;
    let (row_nnz, products) =
        symbolic(job, method, analysed, scratch, chunk_arena, bin_arena, run)?;
    let mut c_off_dev = chunk_arena.alloc::<u64>(job.nrows() + 1, "row offsets of C")?;
    binning::exclusive_scan(job, row_nnz, &mut c_off_dev, chunk_arena)?;
    let c_off_dev = c_off_dev.into_view();
    // Staged: a pageable copy of a chunk's offsets (MBs) took longer than its kernels.
    let c_off = tracing::debug_span!("D2H", what = "row offsets of C", rows = job.nrows())
        .in_scope(|| c_off_dev.to_vec_staged(job.stream, job.gpu.pinned_pool()))?;
    Ok((c_off_dev, c_off, products))
}

/// Entries per row of the job's rows, by the method's symbolic kernels (ESC, which counts
/// inside its batches, borrows Adaptive's), left on the device, and the job's intermediate
/// products, given the job's products per row and their histogram ([`analyse`]).
fn symbolic<'a, T: DeviceScalar>(
    job: &Job<'_, T>,
    method: &Method,
    (products, hist): (DeviceSlice<'_, u64>, Histogram),
    scratch: &mut Scratch,
    chunk_arena: &'a DeviceArena,
    bin_arena: &mut DeviceArena,
    run: &RunControl,
) -> Result<(DeviceSlice<'a, u64>, u64)> {
    run.add_planned(hist.weight);
    let mut row_nnz = chunk_arena.alloc::<u64>(job.nrows(), "entries per row")?;
    match method {
        Method::Adaptive | Method::Esc => {
            adaptive::symbolic(job, products, hist, &mut row_nnz, scratch, bin_arena)?
        }
        Method::RowRow => tiled::symbolic(job, tiled::Tiling::RowRow, &mut row_nnz)?,
        Method::ColumnRow => tiled::symbolic(job, tiled::Tiling::ColumnRow, &mut row_nnz)?,
    }
    Ok((row_nnz.into_view(), hist.weight))
}

/// Splits the chunk's rows into batches whose output fits one output batch and runs the
/// numeric phase of each into `output`. `counts` and `c_off` are C's entries per row and row
/// offsets on the host, `c_off_dev` the offsets on the device.
#[allow(clippy::too_many_arguments)]
fn numeric_batches<T: DeviceScalar>(
    job: &Job<'_, T>,
    method: &Method,
    counts: &[u64],
    c_off: &[u64],
    c_off_dev: DeviceSlice<'_, u64>,
    scratch: &mut Scratch,
    bin_arena: &mut DeviceArena,
    output: &mut impl Output<T>,
) -> Result<()> {
    let total = *c_off.last().unwrap_or(&0);
    output.expect_entries(total)?;
    let capacity = output.capacity_for(total, job.stream)?;
    let mut start = 0usize;
    let n = counts.len();
    while start < n {
        let mut end = start;
        while end < n && c_off[end + 1] - c_off[start] <= capacity {
            end += 1;
        }
        if end == start {
            return Err(out_of_memory(
                &format!("row {} of C (output buffer)", job.rows().start + start),
                counts[start] * entry_bytes::<T>(),
                capacity.saturating_mul(entry_bytes::<T>()),
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
            |cols, vals| {
                numeric_rows(
                    job,
                    method,
                    start..end,
                    c_off_dev,
                    base,
                    cols,
                    vals,
                    scratch,
                    bin_arena,
                )
            },
        )?;
        start = end;
    }
    Ok(())
}

/// The numeric phase of rows `range` of the job (chunk-relative) by the method's kernels,
/// written from entry `c_off[range.start] - base` of `cols`/`vals`.
#[allow(clippy::too_many_arguments)]
fn numeric_rows<T: DeviceScalar>(
    job: &Job<'_, T>,
    method: &Method,
    range: std::ops::Range<usize>,
    c_off_dev: DeviceSlice<'_, u64>,
    base: u64,
    cols: ColsOut<'_>,
    vals: DeviceSliceMut<'_, T::Device>,
    scratch: &mut Scratch,
    bin_arena: &mut DeviceArena,
) -> Result<()> {
    match method {
        Method::Adaptive => {
            adaptive::numeric(job, range, c_off_dev, base, cols, vals, scratch, bin_arena)
        }
        Method::RowRow => tiled::numeric(
            job,
            tiled::Tiling::RowRow,
            range,
            c_off_dev,
            base,
            cols.written("the Row-Row kernels")?,
            vals,
        ),
        Method::ColumnRow => tiled::numeric(
            job,
            tiled::Tiling::ColumnRow,
            range,
            c_off_dev,
            base,
            cols.written("the Column-Row kernels")?,
            vals,
        ),
        Method::Esc => Err(Error::Internal {
            backend: crate::error::BACKEND,
            what: "ESC has its own numeric batches".into(),
        }),
    }
}

/// `A · B` with `algorithm`, the result on the host. C is computed where it fits, on the
/// device, in one symbolic and one numeric pass, then brought over by one staged download
/// ([`DeviceCsr::download`]); a C the device cannot hold goes through the double-buffered
/// pipeline in batches ([`multiply_chunks`]), each copied out while the next is computed.
pub(crate) fn multiply<T: DeviceScalar>(
    gpu: &Gpu,
    a: Operand<'_, T>,
    b: Operand<'_, T>,
    algorithm: SpgemmAlgorithm,
    run: &RunControl,
) -> Result<Csr<T>> {
    let _span = tracing::info_span!("spgemm from host", backend = "cuda").entered();
    match multiply_resident(gpu, a, b, algorithm, None, run) {
        Ok((c, _)) => {
            let stream = gpu.stream()?;
            c.download(gpu, &stream)
        }
        Err(Error::OutOfMemory {
            backend: crate::error::BACKEND,
            needed_bytes,
            available_bytes,
            ..
        }) => {
            tracing::debug!(
                needed_bytes,
                available_bytes,
                "C does not fit on the device: computed in batches"
            );
            multiply_pipelined(gpu, a, b, algorithm, run)
        }
        Err(e) => Err(e),
    }
}

/// `A · B` through the output pipeline, as one chunk.
fn multiply_pipelined<T: DeviceScalar>(
    gpu: &Gpu,
    a: Operand<'_, T>,
    b: Operand<'_, T>,
    algorithm: SpgemmAlgorithm,
    run: &RunControl,
) -> Result<Csr<T>> {
    let whole = ProductChunk {
        rows: 0..a.shape().0,
        cols: 0..b.shape().1,
    };
    let mut result = None;
    multiply_chunks(
        gpu,
        a,
        b,
        std::slice::from_ref(&whole),
        algorithm,
        run,
        Delivery::Chunks(&mut |c| {
            result = Some(c.product);
            Ok(())
        }),
    )
    .map_err(|e| match e {
        Error::InChunk { source, .. } => *source,
        e => e,
    })?;
    result.ok_or_else(|| Error::Internal {
        backend: crate::error::BACKEND,
        what: "SpGEMM produced no result".into(),
    })
}

/// The structure of a product on the device and what its numeric phase needs again: the
/// state of a plan.
pub(crate) struct Structure {
    pub algorithm: SpgemmAlgorithm,
    pub nnz: u64,
    pub offsets: Arc<DeviceBuffer<u64>>,
    pub cols: Arc<DeviceBuffer<u32>>,
    pub products: u64,
    /// The work memory bound of the numeric phase.
    pub work_bound: u64,
    /// Adaptive's numeric bins (C's rows by their entries): they depend on C's structure
    /// only, so an execution launches the numeric kernels from them with no counting, no
    /// listing and no read-back. `None` for the other methods, which do not bin.
    bins: Option<Arc<KeptBins>>,
}

/// `A · B` with `algorithm`, the result left on the device: symbolic (exact row counts, their
/// scan into C's offsets on the device), C allocated once, numeric written straight into it.
/// No array of a row's size visits the host. With `plan`, only the numeric phase runs, into
/// `plan`'s structure (shared, not copied) and a new value array.
pub(crate) fn multiply_resident<T: DeviceScalar>(
    gpu: &Gpu,
    a: Operand<'_, T>,
    b: Operand<'_, T>,
    algorithm: SpgemmAlgorithm,
    plan: Option<&Structure>,
    run: &RunControl,
) -> Result<(DeviceCsr<T>, Structure)> {
    let (nrows, ncols) = (a.shape().0, b.shape().1);
    check_limits(a.shape(), b.shape())?;
    gpu.bind()?;
    let algorithm = plan.map_or(algorithm, |p| p.algorithm);
    let method = Method::of(algorithm);
    let _span = tracing::info_span!(
        "spgemm_resident",
        backend = "cuda",
        ?algorithm,
        numeric_only = plan.is_some(),
        nrows,
        ncols
    )
    .entered();
    let stream = gpu.stream()?;
    let (da, a_host) = a.place(gpu, &stream, "A")?;
    let b_placed;
    let db: &DeviceCsr<T> = if a.same_host_matrix(&b) {
        &da
    } else {
        b_placed = b.place(gpu, &stream, "B")?;
        &b_placed.0
    };
    let tracker = gpu.memory();
    let a_cols = esc_columns(&stream, &da, a_host, matches!(method, Method::Esc))?;
    let job = Job::whole(gpu, &stream, (&da, db), a_cols.as_deref())?;
    let n = nrows as u64;
    run.checkpoint()?;
    let (c_offsets, nnz, products, bound, bins) = match plan {
        Some(p) => {
            run.add_planned(p.products);
            let bins = p.bins.as_ref().map(Arc::clone);
            (
                Arc::clone(&p.offsets),
                p.nnz,
                p.products,
                p.work_bound,
                bins,
            )
        }
        None => {
            // Row arrays and bins of the symbolic phase only: a plan's execution needs none.
            // Work memory and C come from the stream-ordered pool on the call's stream: no
            // allocation or free waits for the device, and the pool keeps the memory for the
            // next call (cuMemAlloc and cuMemFree of C's gigabytes took milliseconds).
            let chunk_arena =
                DeviceArena::new_on(gpu, &stream, row_arrays_bytes(n), "row arrays of SpGEMM")?;
            let mut bin_arena = DeviceArena::new_on(gpu, &stream, binning::bytes(n), "row bins")?;
            let analysed = analyse(&job, &chunk_arena, &mut bin_arena)?;
            let bound = match method {
                Method::RowRow | Method::ColumnRow => 0,
                _ => work_bound::<T>(method, &analysed.1, ncols as u64, da.nnz()),
            };
            let mut scratch = Scratch::on(scratch_cap(tracker.available()).min(bound), &stream);
            let symbolic_span = tracing::debug_span!("symbolic").entered();
            let (row_nnz, products) = symbolic(
                &job,
                &method,
                analysed,
                &mut scratch,
                &chunk_arena,
                &mut bin_arena,
                run,
            )?;
            drop(symbolic_span);
            let mut c_offsets =
                DeviceBuffer::<u64>::new_on(gpu, &stream, nrows + 1, "row offsets of C")?;
            let nnz = binning::exclusive_scan(
                &job,
                row_nnz,
                &mut c_offsets.write(&stream)?,
                &chunk_arena,
            )?;
            // Written: handed out with C and kept by a plan.
            c_offsets.mark_done(&stream)?;
            // The row arrays and the symbolic work memory go before the numeric bins are
            // listed, which take their room.
            drop(scratch);
            drop(chunk_arena);
            // Adaptive's numeric bins, listed once in memory of their own: the numeric phase
            // below runs from them, and a plan made from this product keeps them.
            let bins = match method {
                Method::Adaptive => Some(Arc::new(adaptive::numeric_bins_kept(
                    &job,
                    &stream,
                    c_offsets.read(&stream)?,
                    &mut bin_arena,
                )?)),
                _ => None,
            };
            (Arc::new(c_offsets), nnz, products, bound, bins)
        }
    };
    let allocation = tracing::debug_span!("allocate C", nnz).entered();
    let mut c_cols = match plan {
        Some(p) => Arc::clone(&p.cols),
        None => Arc::new(DeviceBuffer::<u32>::new_on(
            gpu,
            &stream,
            nnz as usize,
            "column indices of C",
        )?),
    };
    let mut c_vals = DeviceBuffer::<T::Device>::new_on(gpu, &stream, nnz as usize, "values of C")?;
    // A plan's structure is shared and immutable. The hash kernels read its columns to place
    // each value; the others write the columns they compute into a buffer of their own.
    let known_cols = plan.is_some() && plan_reads_columns(&method);
    let mut scratch_cols = match plan {
        Some(_) if !known_cols => Some(DeviceBuffer::<u32>::new_on(
            gpu,
            &stream,
            nnz as usize,
            "column indices of C (numeric phase)",
        )?),
        _ => None,
    };
    let cols_out = match scratch_cols.as_mut() {
        Some(cols) => ColsOut::Write(cols.write(&stream)?),
        None if known_cols => ColsOut::Known(c_cols.read(&stream)?),
        // C's columns are new (no plan): this call's alone until it hands them out.
        None => ColsOut::Write(
            Arc::get_mut(&mut c_cols)
                .ok_or_else(|| Error::Internal {
                    backend: crate::error::BACKEND,
                    what: "new column indices of C shared before they were written".into(),
                })?
                .write(&stream)?,
        ),
    };
    let c_vals_out = c_vals.write(&stream)?;
    drop(allocation);
    run.checkpoint()?;
    let mut scratch = Scratch::on(scratch_cap(tracker.available()).min(bound), &stream);
    match method {
        Method::Esc => {
            let mut out = ToDevice::<T> {
                cols: cols_out,
                vals: c_vals_out,
                at: 0,
            };
            esc::chunk(&job, &mut scratch, &mut out)?;
            if out.at != nnz {
                return Err(Error::Internal {
                    backend: crate::error::BACKEND,
                    what: format!("SpGEMM wrote {} of the {nnz} entries of C", out.at),
                });
            }
        }
        Method::Adaptive => {
            let _numeric = tracing::debug_span!("numeric", rows = nrows, nnz).entered();
            let bins = bins.as_deref().ok_or_else(|| Error::Internal {
                backend: crate::error::BACKEND,
                what: "an Adaptive SpGEMM structure without its numeric bins".into(),
            })?;
            let binned = bins.binned(&stream)?;
            let binned_rows: u64 = binned.hist.rows.iter().sum();
            if binned_rows != n {
                return Err(Error::Internal {
                    backend: crate::error::BACKEND,
                    what: format!("numeric bins of {binned_rows} rows for a product of {n}"),
                });
            }
            adaptive::numeric_binned(
                &job,
                &binned,
                c_offsets.read(&stream)?,
                0,
                cols_out,
                c_vals_out,
                &mut scratch,
            )?;
        }
        Method::RowRow | Method::ColumnRow => {
            let _numeric = tracing::debug_span!("numeric", rows = nrows, nnz).entered();
            let tiling = match method {
                Method::ColumnRow => tiled::Tiling::ColumnRow,
                _ => tiled::Tiling::RowRow,
            };
            tiled::numeric(
                &job,
                tiling,
                0..nrows,
                c_offsets.read(&stream)?,
                0,
                cols_out.written("the tiled kernels")?,
                c_vals_out,
            )?;
        }
    }
    // C is handed out (and its structure kept by a plan): later uses on other streams wait
    // for its writes only. A plan's columns are its own, written by the call that made it.
    c_vals.mark_done(&stream)?;
    if plan.is_none() {
        c_cols.mark_done(&stream)?;
    }
    // Everything queued must be done before the result is handed out and before the
    // operands uploaded for the call are freed.
    tracing::debug_span!("wait for the numeric kernels").in_scope(|| stream.synchronize())?;
    run.add_done(products);
    let structure = Structure {
        algorithm,
        nnz,
        offsets: Arc::clone(&c_offsets),
        cols: Arc::clone(&c_cols),
        products,
        work_bound: bound,
        bins,
    };
    Ok((
        DeviceCsr::from_device(nrows, ncols, nnz, c_offsets, c_cols, c_vals),
        structure,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_row_analysis_gives_long_rows_of_a_warps_of_their_own() {
        // Short rows: a thread each (the long ones by their warp in turn).
        assert_eq!(analysis_warps_per_row(0), None);
        assert_eq!(analysis_warps_per_row(ANALYSIS_LONG_ROWS), None);
        // From there on about eight entries per lane: a warp up to 256 entries, then 2, 4, 8.
        assert_eq!(analysis_warps_per_row(ANALYSIS_LONG_ROWS + 1), Some(1));
        assert_eq!(analysis_warps_per_row(256), Some(1));
        assert_eq!(analysis_warps_per_row(257), Some(2));
        assert_eq!(analysis_warps_per_row(1024), Some(4));
        assert_eq!(analysis_warps_per_row(2038), Some(8));
        assert_eq!(analysis_warps_per_row(u64::MAX), Some(8));
        // The warps of a row divide the block's.
        for mean in [33, 300, 700, 1500, 1 << 20] {
            let w = analysis_warps_per_row(mean).unwrap();
            assert_eq!(ANALYSIS_THREADS / 32 % w, 0, "{mean}");
        }
    }
}
