//! SpMV, `y = A·x`, on the device for every sparse format (kernels in `kernels-cuda/spmv.cu`).
//!
//! Each format has its own kernel, so no format is converted on the host:
//!
//! | format | kernel |
//! |---|---|
//! | CSR | equal shares of entries per warp, whatever the rows (balanced), where a few rows are far longer than the others; otherwise a warp per row (vector) for long rows, 4 lanes a row (sub-warp) for rows of 4 to 32 entries, a thread per row (scalar) for shorter ones; row blocks of whole rows staged in shared memory (CSR-stream) on request |
//! | ELLPACK-R | ELLR-T: `T` threads per row (Ortega et al.) |
//! | CSPR | a thread per entry, rows summed with atomics (Neelima & Raghavendra, Fig. 2) |
//! | COO | a thread per triplet, rows summed with atomics |
//! | CSC | a thread per column scattering into the rows with atomics (no transpose) |
//! | DIA | a thread per row walking the diagonals |
//! | BSR | a thread per row walking its block row |
//!
//! Kernels that sum with atomics add into an accumulator buffer (`f32` for f16/bf16, so that half
//! precision is rounded once), which a last kernel rounds to the storage type.

use std::mem::size_of;
use std::sync::Arc;

use hetsparse_core::backend::check;
use hetsparse_core::{Error, Result, SparseFormat, SparseRef};

use crate::context::{Arg, Gpu, LaunchConfig, Stream};
use crate::memory::DeviceBuffer;
use crate::resident::{put, DeviceCsr, Held};
use crate::scalar::{as_device, kernel_name, DeviceScalar};
use crate::spmm::SparseIn;

/// Threads per block of every SpMV and SpMM launch (`TILE_WARPS` warps in `spmv.cu`).
pub(crate) const BLOCK: u32 = 256;
/// Mean entries per row from which CSR SpMV gives each row a whole warp: below it most lanes
/// of a warp would idle and a few lanes a row ([`SpmvKernel::CsrSubwarp`]) serve better; the
/// scalar 27-point stencil's rows of 27 took 194 us a warp each on an H200 and 124 us with 4
/// lanes, the 3-unknown stencil's rows of 77 took 48 us a warp each and 55 with 16 lanes.
pub const CSR_VECTOR_MIN_MEAN_ROW: f64 = 32.0;

/// Whether a CSR matrix of `nrows` rows, `nnz` entries and a longest row of `longest` entries
/// has rows so much longer than the others that a row per thread or per warp would wait on
/// them: the longest row is at least 256 entries and 16 times the mean. Such matrices (hubs of
/// power-law graphs, dense rows of circuits and LP constraints) get the balanced kernels; the
/// others keep the per-row ones, whose fixed cost per row is lower.
pub fn csr_rows_skewed(nrows: usize, nnz: u64, longest: u64) -> bool {
    longest >= 256 && longest as f64 >= 16.0 * mean(nnz, nrows).max(1.0)
}

/// Entries from which a row counts as long for [`SpmvKernel::CsrLongRowsApart`]: 16 times the
/// mean and at least 256, the rows that make a matrix skewed ([`csr_rows_skewed`]).
pub(crate) fn long_row_threshold(nrows: usize, nnz: u64) -> u64 {
    ((16.0 * mean(nnz, nrows).max(1.0)).ceil() as u64).max(256)
}

/// Whether the rows other than the long ones are even enough for a few lanes a row: the
/// longest at most 16 times their mean. Circuit-like matrices (a few dense rows among rows of
/// tens of entries) are; power-law graphs, whose rows take every length, are not and keep the
/// balanced kernel.
pub(crate) fn short_rows_even(short_rows: u64, short_entries: u64, longest_short: u64) -> bool {
    short_rows > 0 && longest_short as f64 <= 16.0 * (short_entries as f64 / short_rows as f64)
}

/// Lanes a row [`SpmvKernel::CsrLongRowsApart`] gives the rows other than the long ones, by
/// their mean length (as [`SpmvKernel::Auto`] picks for whole matrices).
pub(crate) fn short_row_lanes(short_rows: u64, short_entries: u64) -> u32 {
    let mean = short_entries as f64 / short_rows.max(1) as f64;
    if mean >= CSR_VECTOR_MIN_MEAN_ROW {
        32
    } else if mean >= CSR_SUBWARP_MIN_MEAN_ROW {
        CSR_SUBWARP_LANES
    } else {
        2
    }
}

/// Entries a warp of the long-row kernel of [`SpmvKernel::CsrLongRowsApart`] takes at a time
/// (`LONG_TILE` in `spmv.cu`).
const CSR_LONG_TILE_ENTRIES: u64 = 1024;

/// Entries a warp of the balanced CSR kernel takes at a time: 32 lanes × `TILE_ITEMS`.
pub(crate) const CSR_TILE_ENTRIES: u64 = 32 * 8;

/// Rows plus entries of a row block of the CSR-stream kernel (`STREAM_SPAN` in `spmv.cu`): row
/// `i` belongs to block `(i + offsets[i]) / CSR_STREAM_SPAN`. It is also the longest row for
/// which [`SpmvKernel::Auto`] picks the kernel: a block holds fewer entries than this before
/// its last row, so with rows no longer, all of a block's products fit shared memory
/// (`STREAM_BUDGET`, 2048), and rows shared by several blocks are rare or absent.
pub(crate) const CSR_STREAM_SPAN: u64 = 1024;

/// Mean row length from which [`SpmvKernel::Auto`] gives rows a group of lanes
/// ([`SpmvKernel::CsrSubwarp`]) rather than a thread each: rows shorter than this leave a
/// warp's reads nearly contiguous already (road's rows of 3.4: a thread per row 470 us on an
/// H200, two lanes 507 us).
pub(crate) const CSR_SUBWARP_MIN_MEAN_ROW: f64 = 4.0;

/// Lanes per row [`SpmvKernel::Auto`] gives rows of 4 to 32 entries on average: on an H200,
/// banded rows of 11 took 232 us with 2 or 4 lanes, 328 with 8, 350 staged in row blocks
/// ([`SpmvKernel::CsrStream`]); uniform rows of 8 took 389 us with 4 lanes, 385 with 8, 407
/// staged.
pub(crate) const CSR_SUBWARP_LANES: u32 = 4;

/// The CSR kernel [`SpmvKernel::Auto`] picks for `nrows` rows of `nnz` entries whose longest
/// has `longest`.
pub(crate) fn csr_auto_kernel(nrows: usize, nnz: u64, longest: u64) -> SpmvKernel {
    let rows = nrows as f64;
    if csr_rows_skewed(nrows, nnz, longest) {
        SpmvKernel::CsrBalanced
    } else if nnz as f64 >= CSR_VECTOR_MIN_MEAN_ROW * rows {
        SpmvKernel::CsrVector
    } else if nnz as f64 >= CSR_SUBWARP_MIN_MEAN_ROW * rows {
        SpmvKernel::CsrSubwarp {
            lanes: CSR_SUBWARP_LANES,
        }
    } else {
        SpmvKernel::CsrScalar
    }
}

/// How SpMV maps threads to rows, for the formats where there is a choice.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SpmvKernel {
    /// The backend's choice: for CSR [`SpmvKernel::CsrBalanced`] where the longest row is far
    /// longer than the mean ([`csr_rows_skewed`]) ([`SpmvKernel::CsrLongRowsApart`] where the
    /// other rows are even), else vector for long rows
    /// ([`CSR_VECTOR_MIN_MEAN_ROW`]), [`SpmvKernel::CsrSubwarp`] with 4 lanes for rows of 4 to
    /// 32 entries on average, scalar for shorter ones; for ELLPACK-R `T` from
    /// the mean row length
    /// ([`ellr_threads_per_row`]); the only kernel of every other format.
    #[default]
    Auto,
    /// CSR, one thread per row (Bell & Garland's scalar kernel): rows of a few entries only.
    CsrScalar,
    /// CSR, one warp per row (Bell & Garland's vector kernel): rows of similar, long lengths.
    CsrVector,
    /// CSR, each warp an equal share of the entries whatever the rows they belong to, rows
    /// summed in segments and the pieces of a row shared by several warps added atomically:
    /// no row, however long, holds up the others, and short rows leave no lane idle. The row
    /// where each share starts is found once per matrix (and kept with a resident one).
    CsrBalanced,
    /// CSR with its long rows apart: rows of at least 16 times the mean and 256 entries are
    /// laid end to end and cut into equal tiles, a warp a tile (a long row is shared by many
    /// warps, its parts added atomically), and the other rows take a few lanes each, as
    /// [`SpmvKernel::CsrSubwarp`]. The long rows are found once per matrix (and kept with a
    /// resident one). [`SpmvKernel::Auto`]'s choice for skewed matrices whose other rows are
    /// even (circuit-like: dense rows among short ones).
    CsrLongRowsApart,
    /// CSR in row blocks (the CSR-stream part of Greathouse & Daga's CSR-Adaptive): rows are
    /// grouped once per matrix (and kept with a resident one) into blocks of whole rows, about
    /// 1024 rows plus entries each; a thread block loads its block's products into shared
    /// memory, consecutive threads on consecutive entries whatever the rows, then sums each
    /// row there with a thread, a few lanes or a warp by how many rows the block has. Reads of
    /// A coalesce even where rows are short and uneven, and y is written without atomics. A
    /// block's last row, if too long for shared memory, is summed by the whole thread block;
    /// a row of 1024 entries or more is shared by the row blocks its entries span, and the one
    /// that finishes it last adds their parts in order, so no sum depends on scheduling.
    CsrStream,
    /// CSR with `lanes` lanes per row (a power of two from 2 to 32), `32 / lanes` rows per warp:
    /// a warp's reads of A cover its rows' consecutive entries, and rows of a few to a few tens
    /// of entries leave few lanes idle.
    CsrSubwarp {
        /// Lanes per row.
        lanes: u32,
    },
    /// ELLPACK-R with `threads_per_row` threads per row (a power of two from 1 to 32).
    EllrT {
        /// `T`.
        threads_per_row: u32,
    },
}

/// `T` for ELLR-T: about four entries per thread, a power of two from 1 to 32 (Ortega et al.
/// tune `T` per matrix; this keeps each thread's loop short without idling threads).
pub fn ellr_threads_per_row(mean_row_length: f64) -> u32 {
    let wanted = (mean_row_length / 4.0).max(1.0);
    let mut t = 1u32;
    while t < 32 && f64::from(t * 2) <= wanted {
        t *= 2;
    }
    t
}

/// Checks a requested `T`.
pub(crate) fn check_threads_per_row(t: u32) -> Result<()> {
    if t == 0 || t > 32 || !t.is_power_of_two() {
        return Err(Error::InvalidArgument(format!(
            "ELLR-T threads per row must be a power of two from 1 to 32, not {t}"
        )));
    }
    Ok(())
}

/// Checks the lanes per row of [`SpmvKernel::CsrSubwarp`].
pub(crate) fn check_subwarp_lanes(lanes: u32) -> Result<()> {
    if !(2..=32).contains(&lanes) || !lanes.is_power_of_two() {
        return Err(Error::InvalidArgument(format!(
            "CSR sub-warp SpMV lanes per row must be a power of two from 2 to 32, not {lanes}"
        )));
    }
    Ok(())
}

/// A sparse matrix on the device in its own format: uploaded for the call, or (CSR) resident.
pub(crate) enum DeviceSparse<'a, T: DeviceScalar> {
    Csr(Held<'a, DeviceCsr<T>>),
    Csc {
        ncols: usize,
        offsets: DeviceBuffer<u64>,
        rows: DeviceBuffer<u32>,
        vals: DeviceBuffer<T::Device>,
    },
    Coo {
        nnz: u64,
        rows: DeviceBuffer<u32>,
        cols: DeviceBuffer<u32>,
        vals: DeviceBuffer<T::Device>,
    },
    Dia {
        nrows: usize,
        ncols: usize,
        offsets: DeviceBuffer<i64>,
        data: DeviceBuffer<T::Device>,
    },
    Ellr {
        nrows: usize,
        padded_rows: usize,
        mean_row: f64,
        row_lengths: DeviceBuffer<u32>,
        cols: DeviceBuffer<u32>,
        vals: DeviceBuffer<T::Device>,
    },
    Cspr {
        nnz: u64,
        ncols: usize,
        indices: DeviceBuffer<u64>,
        vals: DeviceBuffer<T::Device>,
    },
    Bsr {
        nrows: usize,
        block_shape: (usize, usize),
        offsets: DeviceBuffer<u64>,
        cols: DeviceBuffer<u32>,
        vals: DeviceBuffer<T::Device>,
    },
}

/// Mean entries per row (0 without rows).
fn mean(entries: u64, rows: usize) -> f64 {
    if rows == 0 {
        0.0
    } else {
        entries as f64 / rows as f64
    }
}

impl<'a, T: DeviceScalar> DeviceSparse<'a, T> {
    /// A resident CSR matrix, used in place.
    pub(crate) fn resident(m: &'a DeviceCsr<T>) -> Self {
        DeviceSparse::Csr(Held::Borrowed(m))
    }

    /// Copies `a`'s arrays to the device, queued on `stream`, into plain buffers or, with
    /// `home` (`stream` itself), stream-ordered ones for the one operation on that stream.
    pub(crate) fn upload(
        gpu: &Gpu,
        stream: &Stream,
        home: Option<&Arc<Stream>>,
        a: SparseRef<'_, T>,
    ) -> Result<Self> {
        let (nrows, ncols) = a.shape();
        let _span = tracing::debug_span!("H2D", what = "sparse operand", format = %a.format(), nrows, ncols).entered();
        Ok(match a {
            SparseRef::Csr(m) => DeviceSparse::Csr(Held::Owned(DeviceCsr::upload_to(
                gpu, stream, home, m, "CSR A",
            )?)),
            SparseRef::Csc(m) => DeviceSparse::Csc {
                ncols,
                offsets: put(gpu, stream, home, m.col_offsets(), "CSC offsets")?,
                rows: put(gpu, stream, home, m.row_indices(), "CSC rows")?,
                vals: put(gpu, stream, home, as_device(m.values()), "CSC values")?,
            },
            SparseRef::Coo(m) => DeviceSparse::Coo {
                nnz: m.nnz(),
                rows: put(gpu, stream, home, m.row_indices(), "COO rows")?,
                cols: put(gpu, stream, home, m.col_indices(), "COO columns")?,
                vals: put(gpu, stream, home, as_device(m.values()), "COO values")?,
            },
            SparseRef::Dia(m) => DeviceSparse::Dia {
                nrows,
                ncols,
                offsets: put(gpu, stream, home, m.offsets(), "DIA offsets")?,
                data: put(gpu, stream, home, as_device(m.data()), "DIA data")?,
            },
            SparseRef::Ellr(m) => DeviceSparse::Ellr {
                nrows,
                padded_rows: m.padded_rows(),
                mean_row: mean(m.nnz(), nrows),
                row_lengths: put(gpu, stream, home, m.row_lengths(), "ELLPACK-R row lengths")?,
                cols: put(gpu, stream, home, m.col_indices(), "ELLPACK-R J")?,
                vals: put(gpu, stream, home, as_device(m.values()), "ELLPACK-R E")?,
            },
            SparseRef::Cspr(m) => DeviceSparse::Cspr {
                nnz: m.nnz(),
                ncols,
                indices: put(gpu, stream, home, m.indices(), "CSPR indices")?,
                vals: put(gpu, stream, home, as_device(m.values()), "CSPR values")?,
            },
            SparseRef::Bsr(m) => DeviceSparse::Bsr {
                nrows,
                block_shape: m.block_shape(),
                offsets: put(gpu, stream, home, m.row_offsets(), "BSR offsets")?,
                cols: put(gpu, stream, home, m.col_indices(), "BSR block columns")?,
                vals: put(gpu, stream, home, as_device(m.values()), "BSR values")?,
            },
        })
    }

    fn format(&self) -> SparseFormat {
        match self {
            DeviceSparse::Csr(_) => SparseFormat::Csr,
            DeviceSparse::Csc { .. } => SparseFormat::Csc,
            DeviceSparse::Coo { .. } => SparseFormat::Coo,
            DeviceSparse::Dia { .. } => SparseFormat::Dia,
            DeviceSparse::Ellr { .. } => SparseFormat::Ellr,
            DeviceSparse::Cspr { .. } => SparseFormat::Cspr,
            DeviceSparse::Bsr { .. } => SparseFormat::Bsr,
        }
    }

    /// Whether `kernel` (resolved) sums rows with atomics into a zeroed accumulator buffer.
    pub(crate) fn sums_atomically(&self, kernel: SpmvKernel) -> bool {
        matches!(
            self,
            DeviceSparse::Csc { .. } | DeviceSparse::Coo { .. } | DeviceSparse::Cspr { .. }
        ) || kernel == SpmvKernel::CsrBalanced
    }

    /// The kernel `kernel` resolves to for this matrix, checked against its format. A CSR
    /// matrix's longest row is found on `stream` the first time it is needed.
    pub(crate) fn resolve(
        &self,
        gpu: &Gpu,
        stream: &Stream,
        kernel: SpmvKernel,
    ) -> Result<SpmvKernel> {
        let resolved = match (self, kernel) {
            (DeviceSparse::Csr(m), SpmvKernel::Auto) => {
                match csr_auto_kernel(m.nrows, m.nnz(), m.longest_row(gpu, stream)?) {
                    SpmvKernel::CsrBalanced => {
                        let long = m.long_rows(gpu, stream)?;
                        if short_rows_even(long.short_rows, long.short_entries, long.longest_short)
                        {
                            SpmvKernel::CsrLongRowsApart
                        } else {
                            SpmvKernel::CsrBalanced
                        }
                    }
                    other => other,
                }
            }
            (
                DeviceSparse::Csr(_),
                SpmvKernel::CsrScalar
                | SpmvKernel::CsrVector
                | SpmvKernel::CsrBalanced
                | SpmvKernel::CsrStream
                | SpmvKernel::CsrLongRowsApart,
            ) => kernel,
            (DeviceSparse::Csr(_), SpmvKernel::CsrSubwarp { lanes }) => {
                check_subwarp_lanes(lanes)?;
                kernel
            }
            (DeviceSparse::Ellr { mean_row, .. }, SpmvKernel::Auto) => SpmvKernel::EllrT {
                threads_per_row: ellr_threads_per_row(*mean_row),
            },
            (DeviceSparse::Ellr { .. }, SpmvKernel::EllrT { threads_per_row }) => {
                check_threads_per_row(threads_per_row)?;
                kernel
            }
            (_, SpmvKernel::Auto) => SpmvKernel::Auto,
            _ => {
                return Err(Error::InvalidArgument(format!(
                    "SpMV kernel {kernel:?} does not apply to a {} matrix",
                    self.format()
                )))
            }
        };
        Ok(resolved)
    }

    /// Queues on `stream` what `kernel` (resolved) needs before [`DeviceSparse::launch`]: the
    /// tile rows of the balanced kernel, the long rows, or the row blocks of the CSR-stream
    /// kernel, computed the first time (and kept with a resident matrix); the zeroed sums of
    /// the long rows; and for CSR-stream, where a row is long enough to span several row
    /// blocks, the buffers in which they share it (for this product only: stream-ordered on
    /// `stream`).
    pub(crate) fn prepare(
        &self,
        gpu: &Gpu,
        stream: &Arc<Stream>,
        kernel: SpmvKernel,
    ) -> Result<SpmvScratch> {
        let mut scratch = SpmvScratch::none();
        if let (DeviceSparse::Csr(m), SpmvKernel::CsrBalanced) = (self, kernel) {
            m.tile_rows(gpu, stream)?;
        }
        if let (DeviceSparse::Csr(m), SpmvKernel::CsrLongRowsApart) = (self, kernel) {
            let long = m.long_rows(gpu, stream)?;
            if long.count > 0 {
                let count = usize::try_from(long.count)
                    .map_err(|_| Error::InvalidArgument("too many long rows".into()))?;
                let mut sums = DeviceBuffer::<u8>::new_on(
                    gpu,
                    stream,
                    count * size_of::<T::Acc>(),
                    "sums of long rows",
                )?;
                sums.write(stream)?.zero(stream)?;
                scratch.long_sums = Some(sums);
            }
        }
        if let (DeviceSparse::Csr(m), SpmvKernel::CsrStream) = (self, kernel) {
            if m.stream_blocks(gpu, stream)?.is_some()
                && m.longest_row(gpu, stream)? >= CSR_STREAM_SPAN
            {
                let nblocks = usize::try_from(m.stream_block_count())
                    .map_err(|_| Error::InvalidArgument("too many CSR-stream row blocks".into()))?;
                let partials = DeviceBuffer::<u8>::new_on(
                    gpu,
                    stream,
                    nblocks * size_of::<T::Acc>(),
                    "CSR-stream parts of long rows",
                )?;
                let mut arrivals =
                    DeviceBuffer::<u32>::new_on(gpu, stream, nblocks, "CSR-stream part counts")?;
                arrivals.write(stream)?.zero(stream)?;
                scratch.stream_parts = Some((partials, arrivals));
            }
        }
        Ok(scratch)
    }

    /// Queues `y = A·x` on `stream`. `x` is the device address of `ncols` values; `y` of
    /// `nrows` values of `T` or, where [`DeviceSparse::sums_atomically`], of a zeroed buffer of
    /// `nrows` accumulators (`T::Acc`). `kernel` must come from [`DeviceSparse::resolve`], and
    /// `scratch` from [`DeviceSparse::prepare`] for it (queued on `stream` or before it), or
    /// [`SpmvScratch::none`] for a kernel that needs none.
    ///
    /// # Safety
    /// `x` and `y` must be valid device addresses of those sizes.
    pub(crate) unsafe fn launch(
        &self,
        gpu: &Gpu,
        stream: &Stream,
        kernel: SpmvKernel,
        x: Arg,
        y: Arg,
        scratch: &mut SpmvScratch,
    ) -> Result<()> {
        let run = |base: &str, threads: u64, args: &[Arg]| -> Result<()> {
            let f = gpu.function("spmv", kernel_name::<T>(base))?;
            // SAFETY: each call below passes the arguments of `base` in `spmv.cu`, in order.
            unsafe { gpu.launch(f, LaunchConfig::for_threads(threads, BLOCK), stream, args) }
        };
        match self {
            DeviceSparse::Csr(m) => {
                let nrows = m.nrows as u64;
                let args = [
                    Arg::U64(nrows),
                    m.offsets.read(stream)?.arg(),
                    m.cols.read(stream)?.arg(),
                    m.vals.read(stream)?.arg(),
                    x,
                    y,
                ];
                match kernel {
                    SpmvKernel::CsrVector => run("spmv_csr_vector", nrows * 32, &args),
                    SpmvKernel::CsrSubwarp { lanes } => run(
                        "spmv_csr_subwarp",
                        nrows * u64::from(lanes),
                        &[
                            Arg::U64(nrows),
                            Arg::U32(lanes),
                            m.offsets.read(stream)?.arg(),
                            m.cols.read(stream)?.arg(),
                            m.vals.read(stream)?.arg(),
                            x,
                            y,
                        ],
                    ),
                    SpmvKernel::CsrStream => {
                        let Some(blocks) = m.prepared_stream_blocks() else {
                            return unprepared(nrows == 0, "CSR-stream SpMV", "row blocks");
                        };
                        let nblocks = m.stream_block_count();
                        // Null where no row spans several row blocks: each is summed whole.
                        let (partials, arrivals) = match &mut scratch.stream_parts {
                            Some((p, a)) => {
                                (p.write(stream)?.arg_mut(), a.write(stream)?.arg_mut())
                            }
                            None => (Arg::U64(0), Arg::U64(0)),
                        };
                        run(
                            "spmv_csr_stream",
                            nblocks * u64::from(BLOCK),
                            &[
                                Arg::U64(nblocks),
                                blocks.read(stream)?.arg(),
                                m.offsets.read(stream)?.arg(),
                                m.cols.read(stream)?.arg(),
                                m.vals.read(stream)?.arg(),
                                x,
                                y,
                                partials,
                                arrivals,
                            ],
                        )
                    }
                    SpmvKernel::CsrLongRowsApart => {
                        let long = m.long_rows(gpu, stream)?;
                        let lanes = short_row_lanes(long.short_rows, long.short_entries);
                        let sums = match &mut scratch.long_sums {
                            Some(sums) => sums.write(stream)?.arg_mut(),
                            None if long.count == 0 => Arg::U64(0),
                            None => {
                                return unprepared(false, "CSR SpMV with long rows apart", "sums")
                            }
                        };
                        // Capped at an eighth of the largest grid, so that the other rows keep
                        // threads of their own whatever the size (both parts stride).
                        let long_warps = long.entries.div_ceil(CSR_LONG_TILE_ENTRIES).min(1 << 20);
                        run(
                            "spmv_csr_apart",
                            long_warps * 32 + nrows * u64::from(lanes),
                            &[
                                Arg::U64(nrows),
                                Arg::U32(lanes),
                                Arg::U64(long_row_threshold(m.nrows, m.nnz())),
                                Arg::U64(long_warps),
                                Arg::U64(long.count),
                                long.rows.read(stream)?.arg(),
                                long.prefix.read(stream)?.arg(),
                                m.offsets.read(stream)?.arg(),
                                m.cols.read(stream)?.arg(),
                                m.vals.read(stream)?.arg(),
                                x,
                                y,
                                sums,
                            ],
                        )?;
                        if long.count == 0 {
                            return Ok(());
                        }
                        run(
                            "spmv_long_rows_store",
                            long.count,
                            &[Arg::U64(long.count), long.rows.read(stream)?.arg(), sums, y],
                        )
                    }
                    SpmvKernel::CsrBalanced => {
                        let nnz = m.nnz();
                        let Some(tile_rows) = m.prepared_tile_rows() else {
                            return unprepared(nnz == 0, "balanced CSR SpMV", "tile rows");
                        };
                        run(
                            "spmv_csr_tiles",
                            nnz.div_ceil(CSR_TILE_ENTRIES) * 32,
                            &[
                                Arg::U64(nnz),
                                tile_rows.read(stream)?.arg(),
                                m.offsets.read(stream)?.arg(),
                                m.cols.read(stream)?.arg(),
                                m.vals.read(stream)?.arg(),
                                x,
                                y,
                            ],
                        )
                    }
                    _ => run("spmv_csr_scalar", nrows, &args),
                }
            }
            DeviceSparse::Ellr {
                nrows,
                padded_rows,
                row_lengths,
                cols,
                vals,
                ..
            } => {
                let t = match kernel {
                    SpmvKernel::EllrT { threads_per_row } => threads_per_row,
                    _ => 1,
                };
                run(
                    "spmv_ellr",
                    *nrows as u64 * u64::from(t),
                    &[
                        Arg::U64(*nrows as u64),
                        Arg::U64(*padded_rows as u64),
                        Arg::U32(t),
                        row_lengths.read(stream)?.arg(),
                        cols.read(stream)?.arg(),
                        vals.read(stream)?.arg(),
                        x,
                        y,
                    ],
                )
            }
            DeviceSparse::Coo {
                nnz,
                rows,
                cols,
                vals,
            } => run(
                "spmv_coo",
                *nnz,
                &[
                    Arg::U64(*nnz),
                    rows.read(stream)?.arg(),
                    cols.read(stream)?.arg(),
                    vals.read(stream)?.arg(),
                    x,
                    y,
                ],
            ),
            DeviceSparse::Cspr {
                nnz,
                ncols,
                indices,
                vals,
            } => run(
                "spmv_cspr",
                *nnz,
                &[
                    Arg::U64(*nnz),
                    Arg::U64(*ncols as u64),
                    indices.read(stream)?.arg(),
                    vals.read(stream)?.arg(),
                    x,
                    y,
                ],
            ),
            DeviceSparse::Csc {
                ncols,
                offsets,
                rows,
                vals,
            } => run(
                "spmv_csc",
                *ncols as u64,
                &[
                    Arg::U64(*ncols as u64),
                    offsets.read(stream)?.arg(),
                    rows.read(stream)?.arg(),
                    vals.read(stream)?.arg(),
                    x,
                    y,
                ],
            ),
            DeviceSparse::Dia {
                nrows,
                ncols,
                offsets,
                data,
            } => run(
                "spmv_dia",
                *nrows as u64,
                &[
                    Arg::U64(*nrows as u64),
                    Arg::U64(*ncols as u64),
                    Arg::U32(u32::try_from(offsets.len()).map_err(|_| {
                        Error::InvalidArgument(format!(
                            "DIA SpMV: {} diagonals, more than 2^32",
                            offsets.len()
                        ))
                    })?),
                    offsets.read(stream)?.arg(),
                    data.read(stream)?.arg(),
                    x,
                    y,
                ],
            ),
            DeviceSparse::Bsr {
                nrows,
                block_shape: (r, c),
                offsets,
                cols,
                vals,
            } => run(
                "spmv_bsr",
                *nrows as u64,
                &[
                    Arg::U64(*nrows as u64),
                    Arg::U32(block_side(*r)?),
                    Arg::U32(block_side(*c)?),
                    offsets.read(stream)?.arg(),
                    cols.read(stream)?.arg(),
                    vals.read(stream)?.arg(),
                    x,
                    y,
                ],
            ),
        }
    }
}

/// What a launch does without the per-matrix partition its kernel needs: nothing where the
/// matrix is `empty` (no partition is made for it), else an error, a bug of the caller (which
/// skipped [`DeviceSparse::prepare`]).
fn unprepared(empty: bool, kernel: &str, partition: &str) -> Result<()> {
    if empty {
        Ok(())
    } else {
        Err(Error::Internal {
            backend: crate::error::BACKEND,
            what: format!("{kernel} launched without its {partition}"),
        })
    }
}

/// Buffers a kernel needs for one product besides A, x and y.
pub(crate) struct SpmvScratch {
    /// CSR-stream: a partial sum per row block and a counter per row block (zeroed), for rows
    /// shared by several row blocks.
    stream_parts: Option<(DeviceBuffer<u8>, DeviceBuffer<u32>)>,
    /// Long rows apart: an accumulator per long row (zeroed).
    long_sums: Option<DeviceBuffer<u8>>,
}

impl SpmvScratch {
    /// Nothing.
    pub(crate) fn none() -> Self {
        SpmvScratch {
            stream_parts: None,
            long_sums: None,
        }
    }
}

/// A block side as the kernels take it.
pub(crate) fn block_side(side: usize) -> Result<u32> {
    u32::try_from(side)
        .map_err(|_| Error::InvalidArgument(format!("block side {side} is larger than 2^32")))
}

/// Whether `T`'s accumulator is wider than `T` (f16, bf16), so that atomic sums need their own
/// buffer and a rounding kernel.
pub(crate) fn accumulates_wider<T: DeviceScalar>() -> bool {
    size_of::<T::Acc>() != size_of::<T>()
}

/// Queues the rounding of `n` accumulators at `acc` into `n` values of `T` at `out`.
///
/// # Safety
/// Both addresses must be valid for `n` elements of their types.
pub(crate) unsafe fn round_accumulators<T: DeviceScalar>(
    gpu: &Gpu,
    stream: &Stream,
    n: u64,
    acc: Arg,
    out: Arg,
) -> Result<()> {
    let f = gpu.function("spmv", kernel_name::<T>("acc_to_storage"))?;
    // SAFETY: `acc_to_storage(u64 n, const void* in, void* out)`; addresses by the caller.
    unsafe {
        gpu.launch(
            f,
            LaunchConfig::for_threads(n, BLOCK),
            stream,
            &[Arg::U64(n), acc, out],
        )
    }
}

/// Device memory for the results of `columns` SpMVs of `nrows` rows each: `out` in `T` and,
/// where the kernel sums atomically into a wider accumulator, a separate accumulator buffer.
pub(crate) struct SpmvOutput<T: DeviceScalar> {
    pub(crate) out: DeviceBuffer<T::Device>,
    acc: Option<DeviceBuffer<u8>>,
    atomic: bool,
}

impl<T: DeviceScalar> SpmvOutput<T> {
    /// The buffers in plain memory, for work on `home`.
    pub(crate) fn new(
        gpu: &Gpu,
        home: &Stream,
        a: &DeviceSparse<'_, T>,
        kernel: SpmvKernel,
        len: usize,
    ) -> Result<Self> {
        Self::new_in(gpu, (home, false), a, kernel, len)
    }

    /// The buffers for work on `home`: in plain memory or, `ordered`, stream-ordered there.
    pub(crate) fn new_in(
        gpu: &Gpu,
        (home, ordered): (&Stream, bool),
        a: &DeviceSparse<'_, T>,
        kernel: SpmvKernel,
        len: usize,
    ) -> Result<Self> {
        fn alloc<X: Copy>(
            gpu: &Gpu,
            (home, ordered): (&Stream, bool),
            len: usize,
            what: &str,
        ) -> Result<DeviceBuffer<X>> {
            if ordered {
                DeviceBuffer::new_on(gpu, home, len, what)
            } else {
                DeviceBuffer::new(gpu.memory(), home, len, what)
            }
        }
        let atomic = a.sums_atomically(kernel);
        let acc = if atomic && accumulates_wider::<T>() {
            Some(alloc(
                gpu,
                (home, ordered),
                len * size_of::<T::Acc>(),
                "SpMV accumulators",
            )?)
        } else {
            None
        };
        Ok(SpmvOutput {
            out: alloc(gpu, (home, ordered), len, "SpMV result")?,
            acc,
            atomic,
        })
    }

    /// Device memory one output element needs, in bytes.
    pub(crate) fn bytes_per_element(a: &DeviceSparse<'_, T>, kernel: SpmvKernel) -> u64 {
        let acc = if a.sums_atomically(kernel) && accumulates_wider::<T>() {
            size_of::<T::Acc>()
        } else {
            0
        };
        (size_of::<T>() + acc) as u64
    }

    /// Zeroes what the kernel sums into (atomic kernels only), on `stream`.
    pub(crate) fn prepare(&mut self, stream: &Stream) -> Result<()> {
        match (&mut self.acc, self.atomic) {
            (Some(acc), _) => acc.write(stream)?.zero(stream),
            (None, true) => self.out.write(stream)?.zero(stream),
            (None, false) => Ok(()),
        }
    }

    /// The device address of element `start` of what the kernel writes, on `stream`.
    pub(crate) fn target(&mut self, stream: &Stream, start: usize) -> Result<Arg> {
        Ok(match &mut self.acc {
            Some(acc) => {
                let width = size_of::<T::Acc>();
                let len = acc.len() - start * width;
                acc.write(stream)?.sub_mut(start * width, len).arg_mut()
            }
            None => {
                let len = self.out.len() - start;
                self.out.write(stream)?.sub_mut(start, len).arg_mut()
            }
        })
    }

    /// Rounds the first `len` accumulators into `out` where they are separate.
    pub(crate) fn finish(&mut self, gpu: &Gpu, stream: &Stream, len: usize) -> Result<()> {
        match &mut self.acc {
            // SAFETY: both buffers hold at least `len` elements of their types.
            Some(acc) => unsafe {
                round_accumulators::<T>(
                    gpu,
                    stream,
                    len as u64,
                    acc.read(stream)?.arg(),
                    self.out.write(stream)?.arg_mut(),
                )
            },
            None => Ok(()),
        }
    }
}

/// `y = A·x` with `y` left on the device (`nrows` values). A resident A and x are used in
/// place, host ones uploaded.
///
/// Nothing here waits on the host: `y` is stream-ordered, allocated on a pooled stream that it
/// knows as its writer, so that a later use on another stream (or a download) waits for the
/// kernel; temporaries are freed on that stream behind the kernel, and the resident operands'
/// reads on it are noted, so that their own frees wait for it. The stream is waited for when
/// something fails after work was queued, before the error is reported.
pub(crate) fn spmv_device<T: DeviceScalar>(
    gpu: &Gpu,
    a: SparseIn<'_, T>,
    x: VecIn<'_, T>,
    kernel: SpmvKernel,
) -> Result<DeviceBuffer<T::Device>> {
    gpu.bind()?;
    let (nrows, ncols) = a.shape();
    let _span = tracing::debug_span!("spmv_device", nrows, ncols).entered();
    let stream = gpu.stream()?;
    // Handed out: a later use on another stream waits for this call's writes only, not for
    // what the pooled stream runs for other calls by then.
    let queued = spmv_queue(gpu, &stream, a, x, kernel).and_then(|y| {
        y.mark_done(&stream)?;
        Ok(y)
    });
    if queued.is_err() {
        let _ = stream.synchronize();
    }
    queued
}

fn spmv_queue<T: DeviceScalar>(
    gpu: &Gpu,
    stream: &Arc<Stream>,
    a: SparseIn<'_, T>,
    x: VecIn<'_, T>,
    kernel: SpmvKernel,
) -> Result<DeviceBuffer<T::Device>> {
    let nrows = a.shape().0;
    let dev = a.place_on(gpu, stream)?;
    let kernel = dev.resolve(gpu, stream, kernel)?;
    let mut scratch = dev.prepare(gpu, stream, kernel)?;
    let uploaded;
    let x_dev = match x {
        VecIn::Host(x) => {
            uploaded = put(gpu, stream, Some(stream), as_device(x), "SpMV x")?;
            &uploaded
        }
        VecIn::Device(x) => x,
    };
    let mut y = SpmvOutput::new_in(gpu, (stream, true), &dev, kernel, nrows)?;
    y.prepare(stream)?;
    {
        let _k = tracing::debug_span!("kernel", ?kernel, nrows).entered();
        // SAFETY: x holds ncols values and y's target nrows elements of the kernel's type;
        // every buffer stays allocated until the stream has passed the kernel (module doc).
        unsafe {
            dev.launch(
                gpu,
                stream,
                kernel,
                x_dev.read(stream)?.arg(),
                y.target(stream, 0)?,
                &mut scratch,
            )?
        };
        y.finish(gpu, stream, nrows)?;
    }
    Ok(y.out)
}

/// The vector of a device SpMV: on the host or resident.
#[derive(Clone, Copy)]
pub(crate) enum VecIn<'a, T: DeviceScalar> {
    Host(&'a [T]),
    Device(&'a DeviceBuffer<T::Device>),
}

/// `y = A·x` on the device with the given kernel choice, host in, host out.
pub(crate) fn spmv<T: DeviceScalar>(
    gpu: &Gpu,
    a: SparseRef<'_, T>,
    x: &[T],
    kernel: SpmvKernel,
) -> Result<Vec<T>> {
    check::spmv(&a, x)?;
    let y = spmv_device(gpu, SparseIn::Host(a), VecIn::Host(x), kernel)?;
    download_vec::<T>(gpu, &y)
}

/// Copies a device vector to the host.
pub(crate) fn download_vec<T: DeviceScalar>(
    gpu: &Gpu,
    y: &DeviceBuffer<T::Device>,
) -> Result<Vec<T>> {
    let stream = gpu.stream()?;
    let _d = tracing::debug_span!("D2H", bytes = y.len() * size_of::<T>()).entered();
    // The read waits for the operation that wrote `y`; the staged download waits for the
    // stream before returning.
    crate::resident::download_values::<T>(y.read(&stream)?, &stream, gpu.pinned_pool())
}

impl crate::CudaBackend {
    /// `y = A·x` with a chosen kernel, where the format offers a choice (CSR scalar or vector,
    /// ELLR-T's `T`); [`Backend::spmv`](hetsparse_core::Backend::spmv) is this with
    /// [`SpmvKernel::Auto`].
    ///
    /// ```no_run
    /// use hetsparse_core::{generate, Ellr, SparseRef};
    /// use hetsparse_cuda::{CudaBackend, SpmvKernel};
    ///
    /// # fn main() -> hetsparse_core::Result<()> {
    /// let gpu = CudaBackend::new()?;
    /// let a = Ellr::from_csr(&generate::banded::<f32>(1000, 9, 1), 1 << 20)?;
    /// let x = vec![1.0f32; 1000];
    /// let y = gpu.spmv_with_kernel(SparseRef::Ellr(&a), &x, SpmvKernel::EllrT { threads_per_row: 4 })?;
    /// assert_eq!(y.len(), 1000);
    /// # Ok(())
    /// # }
    /// ```
    pub fn spmv_with_kernel<T: DeviceScalar>(
        &self,
        a: SparseRef<'_, T>,
        x: &[T],
        kernel: SpmvKernel,
    ) -> Result<Vec<T>> {
        spmv(self.gpu(), a, x, kernel)
    }
}

#[cfg(test)]
mod tests {
    use super::{csr_rows_skewed, CSR_STREAM_SPAN};

    /// `STREAM_BUDGET` and the threads of a block in `spmv.cu`.
    const STREAM_BUDGET: u64 = 2048;
    const THREADS: u64 = super::BLOCK as u64;

    /// `csr_stream_blocks` on the host: the first row of each row block, the row count last.
    fn stream_blocks(offsets: &[u64]) -> Vec<u64> {
        let nrows = offsets.len() as u64 - 1;
        let nblocks = (nrows + offsets[nrows as usize]).div_ceil(CSR_STREAM_SPAN);
        (0..=nblocks)
            .map(|c| {
                let target = c * CSR_STREAM_SPAN;
                let (mut lo, mut hi) = (0u64, nrows + 1);
                while lo < hi {
                    let mid = lo + (hi - lo) / 2;
                    if mid + offsets[mid as usize] >= target {
                        hi = mid;
                    } else {
                        lo = mid + 1;
                    }
                }
                lo.min(nrows)
            })
            .collect()
    }

    /// `spmv_csr_stream` on the host, thread by thread, the row blocks taken in the order
    /// `order`, rows spanning several row blocks shared by them where `split`; with `x` all
    /// ones and the product of entry `k` equal to `k + 1` (exact in f64): each row's sum, and
    /// how often it was written.
    fn stream_spmv(offsets: &[u64], split: bool, order: &[u64]) -> (Vec<f64>, Vec<u32>) {
        let nrows = offsets.len() - 1;
        let first = stream_blocks(offsets);
        let nblocks = first.len() as u64 - 1;
        assert_eq!(order.len() as u64, nblocks);
        let product = |k: u64| (k + 1) as f64;
        // The whole block's sum of entries k0..k1, each thread striding over them.
        let block_sum = |k0: u64, k1: u64| -> f64 {
            let mut sum = 0.0;
            for tid in 0..THREADS {
                let mut k = k0 + tid;
                while k < k1 {
                    sum += product(k);
                    k += THREADS;
                }
            }
            sum
        };
        let (mut y, mut writes) = (vec![0.0; nrows], vec![0u32; nrows]);
        let mut partials = vec![f64::NAN; nblocks as usize];
        let mut arrivals = vec![0u64; nblocks as usize];
        let mut finish_part = |row: u64,
                               b: u64,
                               owner: u64,
                               parts: u64,
                               sum: f64,
                               y: &mut Vec<f64>,
                               writes: &mut Vec<u32>| {
            partials[b as usize] = sum;
            arrivals[owner as usize] += 1;
            if arrivals[owner as usize] == parts {
                let total = (owner..owner + parts).map(|j| partials[j as usize]).sum();
                y[row as usize] = total;
                writes[row as usize] += 1;
                arrivals[owner as usize] = 0;
            }
        };
        let span = CSR_STREAM_SPAN;
        for &b in order {
            let (r0, r1) = (first[b as usize], first[b as usize + 1]);
            if r0 == r1 {
                if !split {
                    continue;
                }
                let row = r0 - 1;
                let owner = (row + offsets[row as usize]) / span;
                let next = (row + 1 + offsets[row as usize + 1]) / span;
                if b >= next {
                    continue;
                }
                let k0 = b * span - row - 1;
                let k1 = if b + 1 == next {
                    offsets[row as usize + 1]
                } else {
                    (b + 1) * span - row - 1
                };
                assert!(
                    k0 >= offsets[row as usize] && k0 <= k1,
                    "block {b}: a part outside its row"
                );
                let sum = block_sum(k0, k1);
                finish_part(row, b, owner, next - owner, sum, &mut y, &mut writes);
                continue;
            }
            let (kb, ke) = (offsets[r0 as usize], offsets[r1 as usize]);
            let last_row = r1 - 1;
            let parts = if split {
                (last_row + 1 + ke) / span - b
            } else {
                1
            };
            let (mut staged_end, mut ks) = (r1, ke);
            if ke - kb > STREAM_BUDGET || parts > 1 {
                staged_end = last_row;
                ks = offsets[last_row as usize];
            }
            let mut staged = vec![f64::NAN; STREAM_BUDGET as usize];
            for tid in 0..THREADS {
                let mut k = kb + tid;
                while k < ks {
                    staged[(k - kb) as usize] = product(k);
                    k += THREADS;
                }
            }
            let nr = staged_end - r0;
            if nr > 0 {
                let mut t = 1u64;
                while t < 32 && nr * (2 * t) <= THREADS {
                    t *= 2;
                }
                assert!(t == 1 || nr * t <= THREADS, "a round of {t} lanes per row");
                let groups = THREADS / t;
                for round in 0..nr.div_ceil(groups) {
                    for group in 0..groups {
                        let row = r0 + group + round * groups;
                        if row >= staged_end {
                            continue;
                        }
                        let (start, end) =
                            (offsets[row as usize] - kb, offsets[row as usize + 1] - kb);
                        let mut sum = 0.0;
                        for p in 0..t {
                            let mut k = start + p;
                            while k < end {
                                sum += staged[k as usize];
                                k += t;
                            }
                        }
                        y[row as usize] = sum;
                        writes[row as usize] += 1;
                    }
                }
            }
            if staged_end < r1 {
                if parts > 1 {
                    let k1 = (b + 1) * span - last_row - 1;
                    assert!(
                        k1 >= ks && k1 <= ke,
                        "block {b}: its part of row {last_row}"
                    );
                    let sum = block_sum(ks, k1);
                    finish_part(last_row, b, b, parts, sum, &mut y, &mut writes);
                } else {
                    y[last_row as usize] = block_sum(ks, ke);
                    writes[last_row as usize] += 1;
                }
            }
        }
        assert!(
            arrivals.iter().all(|&a| a == 0),
            "a shared row was not finished"
        );
        (y, writes)
    }

    fn check_stream(lengths: &[u64], what: &str) {
        let mut offsets = vec![0u64];
        for &len in lengths {
            offsets.push(offsets.last().unwrap() + len);
        }
        let nblocks = stream_blocks(&offsets).len() as u64 - 1;
        let forward: Vec<u64> = (0..nblocks).collect();
        let backward: Vec<u64> = (0..nblocks).rev().collect();
        // Odd blocks first: parts of a row arrive out of order.
        let interleaved: Vec<u64> = (0..nblocks)
            .filter(|b| b % 2 == 1)
            .chain((0..nblocks).filter(|b| b % 2 == 0))
            .collect();
        for (split, order) in [
            (false, &forward),
            (true, &forward),
            (true, &backward),
            (true, &interleaved),
        ] {
            let (y, writes) = stream_spmv(&offsets, split, order);
            for i in 0..lengths.len() {
                assert_eq!(
                    writes[i], 1,
                    "{what} (split {split}): row {i} written {} times",
                    writes[i]
                );
                let (a, b) = (offsets[i], offsets[i + 1]);
                // Σ (k + 1) over the row's entries.
                let expected = ((b * (b + 1) - a * (a + 1)) / 2) as f64;
                assert_eq!(y[i], expected, "{what} (split {split}): row {i}");
            }
        }
    }

    /// The row blocks and the kernel's walk over them, emulated on the host: every row is
    /// written once, with its sum, and staged products stay within the budget (the index
    /// would panic), on the shapes of the GPU tests and on random ones.
    #[test]
    fn stream_row_blocks_cover_every_row_once() {
        check_stream(&[], "no rows");
        check_stream(&[0], "one empty row");
        check_stream(&[0; 3000], "rows without entries");
        check_stream(&[5000], "one long row");
        check_stream(&[1022, 1026, 3, 4], "a block of exactly the budget");
        check_stream(&[1022, 1027, 3, 4], "a block one over the budget");
        check_stream(&[3, 5000, 2, 0, 7], "a long row behind a short one");
        check_stream(&[1024, 1, 1025, 1024, 0, 1024], "rows of 1024 and 1025");
        check_stream(&[100_000, 2, 70_000], "rows of 10^5 entries");
        // Rows ending exactly at a span's end, or one short of it, last or followed by others.
        check_stream(&[2047], "a last row ending at a span's end");
        check_stream(&[2046], "a last row ending one short of a span's end");
        check_stream(&[1023, 1], "a row whose next starts a span");
        check_stream(&[1024, 1], "a row of one span");
        check_stream(&[3071, 0, 0, 5], "a row of three spans before empty rows");
        check_stream(&[vec![3; 600], vec![7; 300]].concat(), "rows of 3 and 7");
        check_stream(
            &[vec![120; 8], vec![60; 20]].concat(),
            "warps and half-warps",
        );
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for case in 0..40 {
            let nrows = next() % 20_000;
            let lengths: Vec<u64> = (0..nrows)
                .map(|_| match next() % 100 {
                    0..=29 => 0,
                    30..=94 => next() % 16,
                    95..=98 => next() % 1100,
                    _ => next() % 6000,
                })
                .collect();
            check_stream(&lengths, &format!("random case {case}"));
        }
    }

    #[test]
    fn skewed_rows_are_long_against_the_mean() {
        // A power-law graph: mean 8, a hub of 5000 entries.
        assert!(csr_rows_skewed(131_072, 1_000_000, 5_000));
        // A stencil: 77 on average, 81 at most.
        assert!(!csr_rows_skewed(151_959, 11_655_261, 81));
        // Long rows that are all alike (dense): not skewed.
        assert!(!csr_rows_skewed(512, 512 * 512, 512));
        // Short rows with one of 200: above 16 times the mean but short enough for a thread.
        assert!(!csr_rows_skewed(1000, 3000, 200));
        assert!(!csr_rows_skewed(0, 0, 0));
    }
}

#[cfg(test)]
mod auto_tests {
    use super::*;

    #[test]
    fn long_rows_apart_only_where_the_rest_is_even() {
        // Skewed at GPU size: 16 rows of 450 000 among 500 000 of about 18; the long rows are
        // those of 16 times the mean (33) and more.
        assert_eq!(long_row_threshold(500_000, 16_399_022), 525);
        assert!(short_rows_even(499_984, 9_199_022, 45));
        assert_eq!(short_row_lanes(499_984, 9_199_022), 4);
        // Power law: rows of every length below the threshold (256 at a mean of 7.6).
        assert_eq!(long_row_threshold(131_072, 999_995), 256);
        assert!(!short_rows_even(130_000, 780_000, 255));
        // Few short rows, or none; short rows of 2 and of 40 a row.
        assert!(!short_rows_even(0, 0, 0));
        assert_eq!(short_row_lanes(10, 20), 2);
        assert_eq!(short_row_lanes(10, 400), 32);
        assert_eq!(long_row_threshold(0, 0), 256);
    }

    #[test]
    fn auto_picks_by_mean_and_longest_row() {
        // The GPU-size classes: stencil (77 a row), banded (11), uniform (8), road (3.4),
        // power law and skewed (hubs), LP (140), the scalar 27-point stencil (26.5).
        assert_eq!(
            csr_auto_kernel(151_959, 11_655_261, 81),
            SpmvKernel::CsrVector
        );
        let four = SpmvKernel::CsrSubwarp { lanes: 4 };
        assert_eq!(csr_auto_kernel(4_000_000, 43_999_970, 11), four);
        assert_eq!(csr_auto_kernel(4_000_000, 32_000_000, 8), four);
        assert_eq!(
            csr_auto_kernel(16_000_000, 54_967_152, 4),
            SpmvKernel::CsrScalar
        );
        assert_eq!(
            csr_auto_kernel(131_072, 999_995, 6073),
            SpmvKernel::CsrBalanced
        );
        assert_eq!(
            csr_auto_kernel(500_000, 16_399_022, 450_005),
            SpmvKernel::CsrBalanced
        );
        assert_eq!(
            csr_auto_kernel(100_000, 14_000_312, 150),
            SpmvKernel::CsrVector
        );
        assert_eq!(csr_auto_kernel(1_000_000, 26_463_592, 27), four);
        // Edges: exactly 4 and 32 a row.
        assert_eq!(csr_auto_kernel(10, 40, 4), four);
        assert_eq!(csr_auto_kernel(10, 39, 4), SpmvKernel::CsrScalar);
        assert_eq!(csr_auto_kernel(10, 320, 32), SpmvKernel::CsrVector);
        assert_eq!(csr_auto_kernel(10, 319, 32), four);
    }
}
