//! Matrices resident in device memory: the storage behind this backend's
//! [`ResidentCsr`](hetsparse_core::ResidentCsr) and [`ResidentDense`](hetsparse_core::ResidentDense)
//! handles.
//!
//! A resident CSR matrix keeps its three arrays in device buffers and, on the host, its entry
//! count and, where they are already there or once something on the host needs them (a
//! download, ESC's batch planning), its row offsets: an upload has them, a product computes
//! them on the device and leaves them there. Offsets and column indices are shared (`Arc`) between
//! matrices of one pattern: [`upload_values`](hetsparse_core::Backend::upload_values) and plan
//! executions copy or compute only values.

use std::sync::{Arc, OnceLock};

use hetsparse_core::{Csr, Dense, Error, HostArray, Layout, Result};

use crate::context::{Arg, Gpu, LaunchConfig, Stream};
use crate::error::BACKEND;
use cust::memory::DeviceCopy;

use crate::memory::{DeviceBuffer, DeviceSlice, PinnedPool};
use crate::scalar::{as_device, DeviceScalar};

/// A CSR matrix in device memory (64-bit offsets, 32-bit column indices).
pub(crate) struct DeviceCsr<T: DeviceScalar> {
    pub nrows: usize,
    pub ncols: usize,
    nnz: u64,
    /// The row offsets on the host, where they have been needed (or came from there); shared
    /// with the matrices downloaded from this one.
    host_offsets: OnceLock<HostArray<u64>>,
    /// Entries of the longest row, once SpMV or SpMM asked (it picks their kernel).
    longest_row: OnceLock<u64>,
    /// The row blocks of the CSR-stream SpMV kernel, once it ran (they depend on the pattern
    /// only, so matrices of one pattern share them).
    stream_blocks: OnceLock<Arc<DeviceBuffer<u64>>>,
    /// The first row of each tile of the balanced CSR SpMV kernel, once it ran (pattern only,
    /// like the row blocks).
    tile_rows: OnceLock<Arc<DeviceBuffer<u64>>>,
    /// The long rows, once SpMV asked (pattern only).
    long_rows: OnceLock<Arc<LongRows>>,
    pub offsets: Arc<DeviceBuffer<u64>>,
    pub cols: Arc<DeviceBuffer<u32>>,
    pub vals: DeviceBuffer<T::Device>,
}

/// The long rows of a CSR matrix ([`DeviceCsr::long_rows`]) and what is known of the others.
pub(crate) struct LongRows {
    /// The long rows, ascending.
    pub rows: DeviceBuffer<u64>,
    /// Entries of the long rows before each, in that order, and their total last.
    pub prefix: DeviceBuffer<u64>,
    /// Long rows, and their entries.
    pub count: u64,
    pub entries: u64,
    /// Rows, entries and the longest row of the others.
    pub short_rows: u64,
    pub short_entries: u64,
    pub longest_short: u64,
}

impl<T: DeviceScalar> DeviceCsr<T> {
    /// Copies `m` to the device, queued on `stream` (the copies read `m` before returning).
    pub fn upload(gpu: &Gpu, stream: &Stream, m: &Csr<T>, name: &str) -> Result<Self> {
        Self::upload_to(gpu, stream, None, m, name)
    }

    /// Copies `m` to the device, queued on `stream`, into plain buffers or, with `home`
    /// (`stream` itself), stream-ordered ones (see [`put`]).
    pub fn upload_to(
        gpu: &Gpu,
        stream: &Stream,
        home: Option<&Arc<Stream>>,
        m: &Csr<T>,
        name: &str,
    ) -> Result<Self> {
        let _span = tracing::debug_span!("H2D", matrix = name, nnz = m.nnz()).entered();
        Ok(DeviceCsr {
            nrows: m.nrows(),
            ncols: m.ncols(),
            nnz: m.nnz(),
            // The host matrix's own offsets, shared (not copied: a copy on every upload cost as
            // much as the upload on matrices of many short rows), for when the host needs them
            // (ESC) or a download.
            host_offsets: OnceLock::from(m.arrays().0.clone()),
            longest_row: OnceLock::new(),
            stream_blocks: OnceLock::new(),
            tile_rows: OnceLock::new(),
            long_rows: OnceLock::new(),
            offsets: Arc::new(put(gpu, stream, home, m.row_offsets(), name)?),
            cols: Arc::new(put(gpu, stream, home, m.col_indices(), name)?),
            vals: put(gpu, stream, home, as_device(m.values()), name)?,
        })
    }

    /// Rows `rows` of `m` (every column) as a matrix of their own on the device, uploaded on
    /// `home` into stream-ordered buffers: the rows' column indices and values straight from
    /// `m`'s arrays, their offsets shifted to start at 0 (the one host copy, `rows + 1`
    /// entries). `rows` must lie inside `m`.
    pub fn upload_rows(
        gpu: &Gpu,
        home: &Arc<Stream>,
        m: &Csr<T>,
        rows: std::ops::Range<usize>,
        name: &str,
    ) -> Result<Self> {
        let all = m.row_offsets();
        let (first, last) = (all[rows.start], all[rows.end]);
        let _span =
            tracing::debug_span!("H2D", matrix = name, rows = rows.len(), nnz = last - first)
                .entered();
        let offsets: Vec<u64> = all[rows.start..=rows.end]
            .iter()
            .map(|&o| o - first)
            .collect();
        // Offsets of a CSR matrix lie inside its arrays, which a slice of memory holds.
        let (lo, hi) = (first as usize, last as usize);
        let device_offsets = Arc::new(put(gpu, home, Some(home), &offsets, name)?);
        Ok(DeviceCsr {
            nrows: rows.len(),
            ncols: m.ncols(),
            nnz: last - first,
            host_offsets: OnceLock::from(HostArray::from(offsets)),
            longest_row: OnceLock::new(),
            stream_blocks: OnceLock::new(),
            tile_rows: OnceLock::new(),
            long_rows: OnceLock::new(),
            offsets: device_offsets,
            cols: Arc::new(put(gpu, home, Some(home), &m.col_indices()[lo..hi], name)?),
            vals: put(gpu, home, Some(home), as_device(&m.values()[lo..hi]), name)?,
        })
    }

    /// A matrix computed on the device: its offsets stay there until the host needs them.
    pub fn from_device(
        nrows: usize,
        ncols: usize,
        nnz: u64,
        offsets: Arc<DeviceBuffer<u64>>,
        cols: Arc<DeviceBuffer<u32>>,
        vals: DeviceBuffer<T::Device>,
    ) -> Self {
        DeviceCsr {
            nrows,
            ncols,
            nnz,
            host_offsets: OnceLock::new(),
            longest_row: OnceLock::new(),
            stream_blocks: OnceLock::new(),
            tile_rows: OnceLock::new(),
            long_rows: OnceLock::new(),
            offsets,
            cols,
            vals,
        }
    }

    /// The row offsets on the host: copied from the device (after `stream`) the first time
    /// they are asked for.
    pub fn host_offsets(&self, stream: &Stream) -> Result<&HostArray<u64>> {
        if let Some(h) = self.host_offsets.get() {
            return Ok(h);
        }
        let _span = tracing::debug_span!("D2H", what = "row offsets", rows = self.nrows).entered();
        let h = HostArray::from(self.offsets.read(stream)?.to_vec(stream)?);
        Ok(self.host_offsets.get_or_init(|| h))
    }

    /// Entries of the longest row, by a reduction on the device after `stream` (one 8-byte
    /// read-back; a host pass over the offsets, even where they are on the host, costs more
    /// on matrices of millions of rows), the first time it is asked for.
    pub fn longest_row(&self, gpu: &Gpu, stream: &Stream) -> Result<u64> {
        if let Some(&n) = self.longest_row.get() {
            return Ok(n);
        }
        let n = if self.nrows == 0 {
            0
        } else {
            let _span = tracing::debug_span!("longest row", rows = self.nrows).entered();
            let mut out = DeviceBuffer::<u64>::new(gpu.memory(), stream, 1, "longest row")?;
            out.write(stream)?.zero(stream)?;
            let f = gpu.function("spmv", "csr_longest_row")?;
            // SAFETY: the offsets hold nrows + 1 values, `out` one.
            unsafe {
                gpu.launch(
                    f,
                    LaunchConfig::for_threads(self.nrows as u64, 256),
                    stream,
                    &[
                        Arg::U64(self.nrows as u64),
                        self.offsets.read(stream)?.arg(),
                        out.write(stream)?.arg_mut(),
                    ],
                )?
            };
            out.read(stream)?
                .to_vec(stream)?
                .first()
                .copied()
                .unwrap_or(0)
        };
        Ok(*self.longest_row.get_or_init(|| n))
    }

    /// Whether the longest row is far longer than the mean ([`crate::csr_rows_skewed`]).
    pub fn rows_skewed(&self, gpu: &Gpu, stream: &Stream) -> Result<bool> {
        Ok(crate::csr_rows_skewed(
            self.nrows,
            self.nnz,
            self.longest_row(gpu, stream)?,
        ))
    }

    /// Row blocks of the CSR-stream SpMV kernel (`spmv_csr_stream`).
    pub fn stream_block_count(&self) -> u64 {
        (self.nrows as u64 + self.nnz).div_ceil(crate::spmv::CSR_STREAM_SPAN)
    }

    /// The first row of each row block of the CSR-stream SpMV kernel and the row count last
    /// ([`DeviceCsr::stream_block_count`] + 1 values), computed on the device on `stream` the
    /// first time they are asked for (stream-ordered, `stream` their home) and ready for work
    /// queued on `stream` from here on. `None` for a matrix without rows.
    pub fn stream_blocks(
        &self,
        gpu: &Gpu,
        stream: &Arc<Stream>,
    ) -> Result<Option<&DeviceBuffer<u64>>> {
        if self.nrows == 0 {
            return Ok(None);
        }
        let nblocks = self.stream_block_count();
        self.row_partition(
            &self.stream_blocks,
            (gpu, stream),
            ("csr_stream_blocks", nblocks),
            nblocks,
            "CSR-stream row blocks",
        )
        .map(Some)
    }

    /// The row holding the first entry of each tile of the balanced CSR SpMV kernel
    /// (`spmv_csr_tiles`, [`crate::spmv::CSR_TILE_ENTRIES`] entries a tile) and the row of the
    /// last entry last, computed on the device on `stream` the first time they are asked for,
    /// as [`DeviceCsr::stream_blocks`]. `None` for a matrix without entries.
    pub fn tile_rows(&self, gpu: &Gpu, stream: &Arc<Stream>) -> Result<Option<&DeviceBuffer<u64>>> {
        if self.nnz == 0 {
            return Ok(None);
        }
        let tiles = self.nnz.div_ceil(crate::spmv::CSR_TILE_ENTRIES);
        self.row_partition(
            &self.tile_rows,
            (gpu, stream),
            ("csr_tile_rows", self.nnz),
            tiles,
            "balanced SpMV tile rows",
        )
        .map(Some)
    }

    /// `parts` + 1 row indices that split the matrix for an SpMV kernel, kept in `cell`:
    /// computed the first time by `kernel(u64 nrows, u64 n, offsets, out)` of `spmv.cu`.
    fn row_partition<'s>(
        &'s self,
        cell: &'s OnceLock<Arc<DeviceBuffer<u64>>>,
        (gpu, stream): (&Gpu, &Arc<Stream>),
        (kernel, n): (&'static str, u64),
        parts: u64,
        what: &'static str,
    ) -> Result<&'s DeviceBuffer<u64>> {
        if let Some(kept) = cell.get() {
            return Ok(kept);
        }
        let len = usize::try_from(parts + 1)
            .map_err(|_| Error::InvalidArgument(format!("{parts} {what} do not fit memory")))?;
        let _span =
            tracing::debug_span!("SpMV row partition", what, rows = self.nrows, parts).entered();
        let mut out = DeviceBuffer::<u64>::new_on(gpu, stream, len, what)?;
        let f = gpu.function("spmv", kernel)?;
        // SAFETY: both kernels take `(u64 nrows, u64 n, offsets, out)`, read the nrows + 1
        // offsets and write the parts + 1 values of `out`.
        unsafe {
            gpu.launch(
                f,
                LaunchConfig::for_threads(parts + 1, 256),
                stream,
                &[
                    Arg::U64(self.nrows as u64),
                    Arg::U64(n),
                    self.offsets.read(stream)?.arg(),
                    out.write(stream)?.arg_mut(),
                ],
            )?
        };
        // Another thread may have computed them meanwhile: theirs are kept (the caller's read
        // orders `stream` after their writer) and these freed on `stream` behind the kernel
        // that wrote them.
        Ok(cell.get_or_init(|| Arc::new(out)))
    }

    /// The row blocks of the CSR-stream kernel, where [`DeviceCsr::stream_blocks`] has made them.
    pub fn prepared_stream_blocks(&self) -> Option<&DeviceBuffer<u64>> {
        self.stream_blocks.get().map(|b| &**b)
    }

    /// The rows of at least [`crate::spmv::long_row_threshold`] entries, for SpMV with them
    /// apart ([`crate::SpmvKernel::CsrLongRowsApart`]): found on the device after `stream`,
    /// sorted on the host (a few values: at most nnz / 256 rows), the first time they are
    /// asked for, and kept (plain buffers, complete when this returns).
    pub fn long_rows(&self, gpu: &Gpu, stream: &Stream) -> Result<&LongRows> {
        if let Some(kept) = self.long_rows.get() {
            return Ok(kept);
        }
        let threshold = crate::spmv::long_row_threshold(self.nrows, self.nnz);
        let _span = tracing::debug_span!("long rows", rows = self.nrows, threshold).entered();
        let cap = usize::try_from((self.nnz / threshold).min(self.nrows as u64))
            .map_err(|_| Error::InvalidArgument("too many long rows for memory".into()))?;
        let mut found: Vec<(u64, u64)> = Vec::new();
        let mut longest_short = 0;
        if self.nrows > 0 {
            let mem = gpu.memory();
            let mut counters = DeviceBuffer::<u64>::new(mem, stream, 2, "long-row counters")?;
            let mut rows = DeviceBuffer::<u64>::new(mem, stream, cap.max(1), "long rows")?;
            let mut lengths =
                DeviceBuffer::<u64>::new(mem, stream, cap.max(1), "long-row lengths")?;
            let f = gpu.function("spmv", "csr_find_long_rows")?;
            let mut counters_out = counters.write(stream)?;
            counters_out.zero(stream)?;
            let found_count = counters_out.sub_mut(0, 1).arg_mut();
            let longest_out = counters_out.sub_mut(1, 1).arg_mut();
            // SAFETY: `csr_find_long_rows(nrows, threshold, offsets, found, rows, lengths,
            // longest_short)`; the offsets hold nrows + 1 values; at most nnz / threshold rows
            // have `threshold` entries or more, so `rows` and `lengths` hold every slot taken.
            unsafe {
                gpu.launch(
                    f,
                    LaunchConfig::for_threads(self.nrows as u64, 256),
                    stream,
                    &[
                        Arg::U64(self.nrows as u64),
                        Arg::U64(threshold),
                        self.offsets.read(stream)?.arg(),
                        found_count,
                        rows.write(stream)?.arg_mut(),
                        lengths.write(stream)?.arg_mut(),
                        longest_out,
                    ],
                )?
            };
            let counts = counters.read(stream)?.to_vec(stream)?;
            let (n, longest) = (counts[0], counts[1]);
            let n = usize::try_from(n)
                .ok()
                .filter(|&n| n <= cap)
                .ok_or_else(|| Error::Internal {
                    backend: BACKEND,
                    what: format!("{n} long rows found, at most {cap} possible"),
                })?;
            longest_short = longest;
            let rows = rows.read(stream)?.sub(0, n).to_vec(stream)?;
            let lengths = lengths.read(stream)?.sub(0, n).to_vec(stream)?;
            found = rows.into_iter().zip(lengths).collect();
        }
        // In row order: the order in which their tiles read A.
        found.sort_unstable();
        let mut prefix = Vec::with_capacity(found.len() + 1);
        let mut total = 0u64;
        prefix.push(0);
        for &(_, len) in &found {
            total += len;
            prefix.push(total);
        }
        let rows: Vec<u64> = found.iter().map(|&(row, _)| row).collect();
        let long = LongRows {
            count: rows.len() as u64,
            entries: total,
            rows: DeviceBuffer::from_host(gpu.memory(), stream, &rows, "long rows")?,
            prefix: DeviceBuffer::from_host(gpu.memory(), stream, &prefix, "long-row prefix")?,
            short_rows: (self.nrows - rows.len()) as u64,
            short_entries: self.nnz - total,
            longest_short,
        };
        Ok(self.long_rows.get_or_init(|| Arc::new(long)))
    }

    /// The tile rows of the balanced kernel, where [`DeviceCsr::tile_rows`] has made them.
    pub fn prepared_tile_rows(&self) -> Option<&DeviceBuffer<u64>> {
        self.tile_rows.get().map(|b| &**b)
    }

    /// Records the event after the writes of the matrix's arrays queued on `stream`, for a
    /// matrix handed out ([`DeviceBuffer::mark_done`]: an optimisation, so that later uses on
    /// other streams wait for those writes only).
    pub(crate) fn mark_done(&self, stream: &Stream) -> Result<()> {
        self.offsets.mark_done(stream)?;
        self.cols.mark_done(stream)?;
        self.vals.mark_done(stream)
    }

    /// This matrix's structure with new `values` (one per entry, checked by the caller).
    pub fn with_values(&self, gpu: &Gpu, stream: &Stream, values: &[T]) -> Result<Self> {
        let _span =
            tracing::debug_span!("H2D", matrix = "new values", nnz = values.len()).entered();
        Ok(DeviceCsr {
            nrows: self.nrows,
            ncols: self.ncols,
            nnz: self.nnz,
            host_offsets: self.host_offsets.clone(),
            longest_row: self.longest_row.clone(),
            stream_blocks: self.stream_blocks.clone(),
            tile_rows: self.tile_rows.clone(),
            long_rows: self.long_rows.clone(),
            offsets: Arc::clone(&self.offsets),
            cols: Arc::clone(&self.cols),
            vals: put(gpu, stream, None, as_device(values), "new values")?,
        })
    }

    /// Stored entries.
    pub fn nnz(&self) -> u64 {
        self.nnz
    }

    /// Copies the matrix to the host (through page-locked staging), waiting for `stream`.
    pub fn download(&self, gpu: &Gpu, stream: &Stream) -> Result<Csr<T>> {
        let _span = tracing::debug_span!("D2H", what = "CSR matrix", nnz = self.nnz()).entered();
        let offsets = match self.host_offsets.get() {
            Some(h) => h.clone(),
            None => HostArray::from(
                self.offsets
                    .read(stream)?
                    .to_vec_staged(stream, gpu.pinned_pool())?,
            ),
        };
        let (cols, vals) = (self.cols.read(stream)?, self.vals.read(stream)?);
        let cols = tracing::debug_span!("column indices")
            .in_scope(|| cols.to_vec_staged(stream, gpu.pinned_pool()))?;
        let vals = tracing::debug_span!("values")
            .in_scope(|| download_values::<T>(vals, stream, gpu.pinned_pool()))?;
        let invalid = |e: String| Error::Internal {
            backend: BACKEND,
            what: format!("a resident matrix is not a valid CSR matrix: {e}"),
        };
        if self.nrows == 0 || !self.valid_on_device(gpu, stream)? {
            // The host check says what is wrong (and where).
            return Csr::try_from_arrays(self.nrows, self.ncols, offsets, cols.into(), vals.into())
                .map_err(|e| invalid(e.to_string()));
        }
        // SAFETY: the arrays are copies of the device's, which `valid_on_device` found to
        // satisfy every CSR invariant (offsets from 0 to nnz, monotone; columns in bounds,
        // sorted, without repeats); their lengths are the matrix's by construction.
        Ok(unsafe {
            Csr::from_arrays_unchecked(self.nrows, self.ncols, offsets, cols.into(), vals.into())
        })
    }

    /// Copies the values alone to the host (through page-locked staging), waiting for
    /// `stream`.
    pub fn download_values(&self, gpu: &Gpu, stream: &Stream) -> Result<Vec<T>> {
        let _span = tracing::debug_span!("D2H", what = "values", nnz = self.nnz()).entered();
        download_values::<T>(self.vals.read(stream)?, stream, gpu.pinned_pool())
    }

    /// Whether the matrix satisfies the CSR invariants, checked where it lies
    /// ([`csr_valid_on_device`]).
    pub(crate) fn valid_on_device(&self, gpu: &Gpu, stream: &Stream) -> Result<bool> {
        csr_valid_on_device(
            gpu,
            stream,
            (self.nrows, self.ncols, self.nnz),
            self.offsets.read(stream)?,
            self.cols.read(stream)?,
        )
    }
}

/// Whether `offsets` (`nrows + 1`) and `cols` (`nnz`) on the device form a valid CSR
/// structure of `nrows × ncols` (kernel `csr_check`, after what `stream` has queued): a walk
/// of C on the host took a fifth of a whole product's time.
pub(crate) fn csr_valid_on_device(
    gpu: &Gpu,
    stream: &Stream,
    (nrows, ncols, nnz): (usize, usize, u64),
    offsets: DeviceSlice<'_, u64>,
    cols: DeviceSlice<'_, u32>,
) -> Result<bool> {
    let _span = tracing::debug_span!("check C on the device", rows = nrows, nnz).entered();
    assert!(
        offsets.len() > nrows && cols.len() as u64 >= nnz,
        "CSR check of arrays shorter than the matrix"
    );
    let mut flag = DeviceBuffer::<u32>::new(gpu.memory(), stream, 1, "flag of the CSR check")?;
    flag.write(stream)?.zero(stream)?;
    const THREADS: u64 = 256;
    let warps_wanted = (nrows as u64).div_ceil(THREADS / 32);
    let grid = warps_wanted.clamp(1, u64::from(gpu.multiprocessors()) * 16);
    let function = gpu.function("spgemm", "csr_check")?;
    // SAFETY: the arguments match `csr_check`; offsets hold nrows + 1 entries and cols nnz
    // (asserted), and the kernel reads only inside them (it checks the offsets before it uses
    // them as bounds).
    unsafe {
        gpu.launch(
            function,
            LaunchConfig {
                grid: grid as u32,
                block: THREADS as u32,
                shared_bytes: 0,
            },
            stream,
            &[
                Arg::U64(nrows as u64),
                Arg::U64(ncols as u64),
                Arg::U64(nnz),
                offsets.arg(),
                cols.arg(),
                flag.write(stream)?.arg_mut(),
            ],
        )?;
    }
    Ok(flag.read(stream)?.to_vec(stream)?[0] == 0)
}

/// Device values downloaded straight into a vector of host values (same layout, no second
/// copy), through page-locked staging ([`DeviceSlice::download_staged`]).
pub(crate) fn download_values<T: DeviceScalar>(
    values: DeviceSlice<'_, T::Device>,
    stream: &Stream,
    pool: &PinnedPool,
) -> Result<Vec<T>> {
    let n = values.len();
    let mut out = hetsparse_core::host::try_with_capacity::<T>(n, "downloaded values")?;
    hetsparse_core::advise_huge_pages(out.spare_capacity_mut());
    download_values_into::<T>(values, stream, pool, &mut out.spare_capacity_mut()[..n])?;
    // SAFETY: download_values_into wrote all `n` values.
    unsafe { out.set_len(n) };
    Ok(out)
}

/// Device values downloaded into host slots of their number (every slot written where it
/// returns `Ok`), through page-locked staging ([`DeviceSlice::download_staged`]).
pub(crate) fn download_values_into<T: DeviceScalar>(
    values: DeviceSlice<'_, T::Device>,
    stream: &Stream,
    pool: &PinnedPool,
    out: &mut [std::mem::MaybeUninit<T>],
) -> Result<()> {
    if T::TYPE == hetsparse_core::ScalarType::Bool {
        // Not every byte is a bool: the device's bytes come down as bytes and are made 0 or
        // 1 here, so that no kernel's byte can ever become an invalid `bool`.
        let bytes = values.as_bytes().ok_or_else(|| Error::Internal {
            backend: BACKEND,
            what: "a bool that is not one byte on the device".into(),
        })?;
        // SAFETY: `T` is bool, one byte, so the slots are as many bytes; any byte may be
        // written into an uninitialised byte.
        let out = unsafe {
            std::slice::from_raw_parts_mut(
                out.as_mut_ptr() as *mut std::mem::MaybeUninit<u8>,
                out.len(),
            )
        };
        bytes.download_staged(stream, pool, out)?;
        for slot in out.iter_mut() {
            // SAFETY: the download wrote every slot.
            let byte = unsafe { slot.assume_init() };
            slot.write(u8::from(byte != 0));
        }
        return Ok(());
    }
    // SAFETY: `T::Device` has `T`'s layout (DeviceScalar's contract), so uninitialised slots
    // of one are uninitialised slots of the other.
    let out = unsafe {
        std::slice::from_raw_parts_mut(
            out.as_mut_ptr() as *mut std::mem::MaybeUninit<T::Device>,
            out.len(),
        )
    };
    values.download_staged(stream, pool, out)
}

/// `host` copied into a new device buffer on `stream`: a plain one, or with `home` (which
/// must be `stream`) a stream-ordered one, for data that lives only as long as one operation
/// queued on that stream.
pub(crate) fn put<X: DeviceCopy + Send + Sync>(
    gpu: &Gpu,
    stream: &Stream,
    home: Option<&Arc<Stream>>,
    host: &[X],
    what: &str,
) -> Result<DeviceBuffer<X>> {
    let mut buffer = match home {
        Some(home) => {
            debug_assert!(home.is(stream));
            DeviceBuffer::new_on(gpu, home, host.len(), what)?
        }
        None => DeviceBuffer::new(gpu.memory(), stream, host.len(), what)?,
    };
    buffer
        .write(stream)?
        .upload_staged(stream, gpu.pinned_pool(), host)?;
    Ok(buffer)
}

/// A dense matrix (or a one-column vector) in device memory, in the layout its handle names.
pub(crate) struct DeviceDense<T: DeviceScalar> {
    pub data: DeviceBuffer<T::Device>,
}

impl<T: DeviceScalar> DeviceDense<T> {
    /// Copies `d` to the device in its layout.
    pub fn upload(gpu: &Gpu, stream: &Stream, d: &Dense<T>) -> Result<Self> {
        let _span =
            tracing::debug_span!("H2D", what = "dense matrix", elements = d.data().len()).entered();
        Ok(DeviceDense {
            data: put(gpu, stream, None, as_device(d.data()), "dense")?,
        })
    }

    /// Copies the matrix to the host (through page-locked staging), waiting for `stream`.
    pub fn download(
        &self,
        gpu: &Gpu,
        stream: &Stream,
        shape: (usize, usize),
        layout: Layout,
    ) -> Result<Dense<T>> {
        let _span = tracing::debug_span!("D2H", what = "dense matrix", elements = self.data.len())
            .entered();
        // The read waits for the operation that wrote the matrix, wherever it was queued.
        let data = download_values::<T>(self.data.read(stream)?, stream, gpu.pinned_pool())?;
        Ok(Dense::try_new(shape.0, shape.1, layout, data)?)
    }
}

/// A value the operation owns (uploaded for the call) or borrows (resident).
pub(crate) enum Held<'a, X> {
    Owned(X),
    Borrowed(&'a X),
}

impl<X> std::ops::Deref for Held<'_, X> {
    type Target = X;
    fn deref(&self) -> &X {
        match self {
            Held::Owned(x) => x,
            Held::Borrowed(x) => x,
        }
    }
}

/// What a handle or plan stores: the device data, and the device it lives on, kept alive (its
/// context and the memory in it) for as long as the handle, also past the backend.
pub(crate) struct Kept<S> {
    pub data: S,
    // Dropped after `data`: the memory is freed while the context still exists.
    _gpu: Arc<Gpu>,
}

impl<S> Kept<S> {
    pub fn new(data: S, gpu: &Arc<Gpu>) -> Self {
        Kept {
            data,
            _gpu: Arc::clone(gpu),
        }
    }
}
