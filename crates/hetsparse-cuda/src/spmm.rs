//! SpMM, `C = A·B` with A sparse and B dense, on the device (kernels in `kernels-cuda/spmm.cu`).
//!
//! - CSR: csrmm with a half-warp per row of A (Matam et al. §V), for row- and column-major B.
//! - ELLPACK-R: ELLR-T SpMM (Ortega et al., Alg. 1): `T` threads per row, `L_c` columns of C
//!   per pass.
//! - Every other format: one SpMV kernel of that format per column of B, on the device (the
//!   paper's "SetSpMMs" baseline), so no format is converted on the host.
//!
//! B and C move in panels of `L_GPU` columns (Ortega §3, FastSpMM). When B and C do not fit in
//! the device memory budget, or are large enough for transfers to matter, the panels alternate
//! between two streams, each with its own pinned staging and device buffers: while one stream
//! copies its panel of B in, computes and copies its panel of C out, the host packs the next
//! panel for the other, so transfers overlap computation.

use std::mem::size_of;
use std::ops::Range;
use std::sync::Arc;

use hetsparse_core::backend::check;
use hetsparse_core::{Dense, Error, Layout, Result, SparseRef};

use crate::context::{Arg, Gpu, LaunchConfig, Stream};
use crate::error::out_of_memory;
use crate::memory::{pinned, DeviceBuffer, DeviceSlice, PinnedBuffer};
use crate::resident::{put, DeviceCsr};
use crate::scalar::{as_device, from_device, kernel_name, DeviceScalar};
use crate::spmv::{
    check_threads_per_row, ellr_threads_per_row, DeviceSparse, SpmvKernel, SpmvOutput, SpmvScratch,
    BLOCK,
};

/// B and C together from this size stream in panels even when they fit, so that copies overlap
/// computation (below it the extra launches and synchronisations cost more than they hide).
pub const STREAM_MIN_BYTES: u64 = 64 << 20;

/// Panels B and C are split into at least when they stream although they fit.
const MIN_PANELS: usize = 4;

/// Which SpMM kernel runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SpmmKernel {
    /// The format's kernel: for CSR the balanced kernel where B is row-major and A's rows are
    /// skewed ([`crate::csr_rows_skewed`]), csrmm otherwise, ELLR-T with `T` from the mean row length and the largest `L_c` up to 8
    /// for ELLPACK-R, column-by-column SpMV for the other formats.
    #[default]
    Auto,
    /// CSR: csrmm, a half-warp per row.
    CsrHalfWarp,
    /// CSR with B row-major: each warp an equal share of A's entries whatever the rows, its
    /// lanes over the columns; rows shared by several warps are added atomically, so no long
    /// row holds up the product.
    CsrBalanced,
    /// ELLPACK-R: ELLR-T SpMM.
    EllrT {
        /// `T`, a power of two from 1 to 32.
        threads_per_row: u32,
        /// `L_c`: 1, 2, 4 or 8.
        columns_per_pass: u32,
    },
}

/// How an SpMM runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpmmKernelOptions {
    /// The kernel.
    pub kernel: SpmmKernel,
    /// `L_GPU`, the columns of B and C per transfer; `None` lets the backend choose from the
    /// device memory budget and the operands' size. More than one panel streams over two
    /// streams.
    pub panel_columns: Option<usize>,
}

/// Entries a warp of the balanced CSR kernel takes at a time (`SPMM_TILE` in `spmm.cu`).
const SPMM_TILE_ENTRIES: u64 = 256;

/// What runs on each panel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Method {
    CsrTiles,
    CsrRowMajor,
    CsrColMajor,
    Ellr { t: u32, lc: u32 },
    ColumnSpmv(SpmvKernel),
}

/// Whether `nrows` rows of `nnz` entries are too few to keep the GPU busy with a half-warp
/// each (under half of its resident threads) and long enough on average that the equal tiles
/// of the balanced kernel ([`SPMM_TILE_ENTRIES`] a warp) give more warps than rows, and few
/// rows cut by a tile: a 512×512 dense A had 256 warps on 132 SMs.
fn few_long_rows(gpu: &Gpu, nrows: u64, nnz: u64) -> bool {
    let half_the_threads = u64::from(gpu.multiprocessors()) * 1024;
    nrows > 0 && nrows * 16 < half_the_threads && nnz / nrows >= SPMM_TILE_ENTRIES / 2
}

impl Method {
    fn choose<T: DeviceScalar>(
        gpu: &Gpu,
        stream: &Stream,
        a: &DeviceSparse<'_, T>,
        kernel: SpmmKernel,
        layout: Layout,
        ncols: usize,
    ) -> Result<Self> {
        Ok(match (a, kernel) {
            (DeviceSparse::Csr(_), SpmmKernel::CsrBalanced) if layout == Layout::RowMajor => {
                Method::CsrTiles
            }
            (DeviceSparse::Csr(m), SpmmKernel::Auto)
                if layout == Layout::RowMajor
                    && (few_long_rows(gpu, m.nrows as u64, m.nnz())
                        || m.rows_skewed(gpu, stream)?) =>
            {
                Method::CsrTiles
            }
            (DeviceSparse::Csr(_), SpmmKernel::CsrBalanced) => {
                return Err(Error::InvalidArgument(
                    "the balanced CSR SpMM kernel needs B row-major".into(),
                ))
            }
            (DeviceSparse::Csr(_), SpmmKernel::Auto | SpmmKernel::CsrHalfWarp) => match layout {
                Layout::RowMajor => Method::CsrRowMajor,
                Layout::ColMajor => Method::CsrColMajor,
            },
            (DeviceSparse::Ellr { mean_row, .. }, SpmmKernel::Auto) => Method::Ellr {
                t: ellr_threads_per_row(*mean_row),
                lc: [8, 4, 2, 1]
                    .into_iter()
                    .find(|&lc| lc as usize <= ncols)
                    .unwrap_or(1),
            },
            (
                DeviceSparse::Ellr { .. },
                SpmmKernel::EllrT {
                    threads_per_row,
                    columns_per_pass,
                },
            ) => {
                check_threads_per_row(threads_per_row)?;
                if ![1, 2, 4, 8].contains(&columns_per_pass) {
                    return Err(Error::InvalidArgument(format!(
                        "ELLR-T SpMM columns per pass (L_c) must be 1, 2, 4 or 8, not {columns_per_pass}"
                    )));
                }
                Method::Ellr {
                    t: threads_per_row,
                    lc: columns_per_pass,
                }
            }
            (_, SpmmKernel::Auto) => {
                Method::ColumnSpmv(a.resolve(gpu, stream, SpmvKernel::Auto)?)
            }
            (_, kernel) => {
                return Err(Error::InvalidArgument(format!(
                    "SpMM kernel {kernel:?} does not apply to this matrix's format"
                )))
            }
        })
    }

    /// The SpMV kernel that writes C column by column, where one does (it decides whether C is
    /// summed atomically into a zeroed buffer).
    fn spmv_kernel(self) -> SpmvKernel {
        match self {
            Method::ColumnSpmv(kernel) => kernel,
            // Sums rows shared by several warps atomically, as the balanced SpMV does.
            Method::CsrTiles => SpmvKernel::CsrBalanced,
            _ => SpmvKernel::Auto,
        }
    }

    /// The layout panels of B and C take on the device.
    fn panel_layout(self, b_layout: Layout) -> Layout {
        match self {
            Method::CsrRowMajor | Method::CsrTiles => Layout::RowMajor,
            Method::CsrColMajor | Method::ColumnSpmv(_) => Layout::ColMajor,
            Method::Ellr { .. } => b_layout,
        }
    }
}

/// `L_GPU`: columns per panel, from the request or from the memory left after A.
fn panel_columns(
    requested: Option<usize>,
    ncols: usize,
    bytes_per_column: u64,
    available: u64,
) -> Result<usize> {
    if let Some(w) = requested {
        if w == 0 {
            return Err(Error::InvalidArgument(
                "SpMM panel columns (L_GPU) must be at least 1".into(),
            ));
        }
        return Ok(w.min(ncols));
    }
    let total = bytes_per_column.saturating_mul(ncols as u64);
    if total <= available && total < STREAM_MIN_BYTES {
        return Ok(ncols);
    }
    // Two streams, each with a panel of B and one of C.
    let fit = (available / bytes_per_column.max(1) / 2) as usize;
    if fit == 0 {
        return Err(out_of_memory(
            "SpMM: a panel of one column of B and C on each of two streams",
            bytes_per_column.saturating_mul(2),
            available,
        ));
    }
    Ok(fit.min(ncols.div_ceil(MIN_PANELS)).max(1))
}

/// Walks columns `cols` of an `nrows × ncols` matrix stored in `full_layout` and of its panel
/// (`nrows × cols.len()` in `panel_layout`) in runs contiguous in both, calling
/// `copy(full_start, panel_start, len)` for each.
fn panel_runs(
    full_layout: Layout,
    panel_layout: Layout,
    (nrows, ncols): (usize, usize),
    cols: Range<usize>,
    mut copy: impl FnMut(usize, usize, usize),
) {
    let w = cols.len();
    match (full_layout, panel_layout) {
        (Layout::ColMajor, Layout::ColMajor) => copy(cols.start * nrows, 0, w * nrows),
        (Layout::RowMajor, Layout::RowMajor) => {
            for i in 0..nrows {
                copy(i * ncols + cols.start, i * w, w);
            }
        }
        (Layout::RowMajor, Layout::ColMajor) => {
            for i in 0..nrows {
                for q in 0..w {
                    copy(i * ncols + cols.start + q, q * nrows + i, 1);
                }
            }
        }
        (Layout::ColMajor, Layout::RowMajor) => {
            for q in 0..w {
                for i in 0..nrows {
                    copy((cols.start + q) * nrows + i, i * w + q, 1);
                }
            }
        }
    }
}

/// One stream's buffers: pinned staging and device memory for a panel of B and one of C.
struct Slot<T: DeviceScalar> {
    stream: Stream,
    b_host: PinnedBuffer<T::Device>,
    c_host: PinnedBuffer<T::Device>,
    b_dev: DeviceBuffer<T::Device>,
    c_dev: SpmvOutput<T>,
    /// Columns whose C panel is on its way to `c_host`.
    pending: Option<Range<usize>>,
}

/// `C = A·B` on the device.
pub(crate) fn spmm<T: DeviceScalar>(
    gpu: &Gpu,
    a: SparseRef<'_, T>,
    b: &Dense<T>,
    options: SpmmKernelOptions,
) -> Result<Dense<T>> {
    check::spmm(&a, b)?;
    gpu.bind()?;
    let (nrows, inner) = a.shape();
    let ncols = b.ncols();
    let layout = b.layout();
    let _span =
        tracing::debug_span!("spmm", format = %a.format(), nrows, inner, ncols, ?layout).entered();
    if nrows == 0 || ncols == 0 {
        return Dense::zeros(nrows, ncols, layout);
    }
    let first = Stream::new()?;
    let dev = DeviceSparse::upload(gpu, &first, None, a)?;
    let method = Method::choose(gpu, &first, &dev, options.kernel, layout, ncols)?;
    let panel_layout = method.panel_layout(layout);
    let bytes_per_column = (inner * size_of::<T>()) as u64
        + nrows as u64 * SpmvOutput::bytes_per_element(&dev, method.spmv_kernel());
    let w = panel_columns(
        options.panel_columns,
        ncols,
        bytes_per_column,
        gpu.memory().available(),
    )?;
    let panels: Vec<Range<usize>> = (0..ncols)
        .step_by(w)
        .map(|c0| c0..(c0 + w).min(ncols))
        .collect();
    tracing::debug!(
        ?method,
        panel_columns = w,
        panels = panels.len(),
        "SpMM plan"
    );

    let mut slots = Vec::new();
    for _ in 0..panels.len().min(2) {
        let stream = Stream::new()?;
        slots.push(Slot::<T> {
            b_host: pinned(inner * w, "SpMM B panel staging")?,
            c_host: pinned(nrows * w, "SpMM C panel staging")?,
            b_dev: DeviceBuffer::new(gpu.memory(), &stream, inner * w, "SpMM B panel")?,
            c_dev: SpmvOutput::new(gpu, &stream, &dev, method.spmv_kernel(), nrows * w)?,
            stream,
            pending: None,
        });
    }
    // A's upload was queued on `first`; the panel streams must not start before it lands.
    first.synchronize()?;

    let mut c_full =
        hetsparse_core::host::try_filled(nrows * ncols, T::Device::default(), "SpMM result")?;
    let shape = Shape {
        inner,
        nrows,
        ncols,
        layout,
        panel_layout,
    };
    let streamed = stream_panels(
        gpu,
        &dev,
        method,
        shape,
        &panels,
        &mut slots,
        b,
        &mut c_full,
    );
    if streamed.is_err() {
        // Copies into the pinned staging may still be queued; they must land before it is freed.
        for slot in &slots {
            let _ = slot.stream.synchronize();
        }
    }
    streamed?;
    Dense::try_new(nrows, ncols, layout, from_device::<T>(&c_full).to_vec()).map_err(Error::from)
}

/// Sizes and layouts of an SpMM: A is `nrows × inner`, B `inner × ncols` in `layout`, panels of
/// B and C in `panel_layout` on the device.
#[derive(Clone, Copy)]
struct Shape {
    inner: usize,
    nrows: usize,
    ncols: usize,
    layout: Layout,
    panel_layout: Layout,
}

/// Runs every panel, alternating between the slots' streams: while one stream copies and
/// computes, the host unpacks the other's finished C panel and packs its next B panel.
#[allow(clippy::too_many_arguments)]
fn stream_panels<T: DeviceScalar>(
    gpu: &Gpu,
    dev: &DeviceSparse<'_, T>,
    method: Method,
    shape: Shape,
    panels: &[Range<usize>],
    slots: &mut [Slot<T>],
    b: &Dense<T>,
    c_full: &mut [T::Device],
) -> Result<()> {
    let Shape {
        inner,
        nrows,
        ncols,
        layout,
        panel_layout,
    } = shape;
    let b_full = as_device(b.data());
    let n_slots = slots.len();
    for (k, cols) in panels.iter().enumerate() {
        let slot = &mut slots[k % n_slots];
        unpack_finished(slot, shape, c_full)?;
        let pw = cols.len();
        {
            let _p = tracing::trace_span!("pack B panel", columns = pw).entered();
            let b_host = &mut slot.b_host;
            panel_runs(
                layout,
                panel_layout,
                (inner, ncols),
                cols.clone(),
                |f, p, len| {
                    b_host[p..p + len].copy_from_slice(&b_full[f..f + len]);
                },
            );
        }
        {
            let _h = tracing::debug_span!("H2D", bytes = inner * pw * size_of::<T>()).entered();
            // SAFETY: `b_host` is written again only after `unpack_finished` has synchronised
            // the slot's stream (every panel leaves a pending C copy behind it), and on an
            // error `spmm` synchronises every slot's stream before the staging is dropped.
            unsafe {
                slot.b_dev
                    .write(&slot.stream)?
                    .sub_mut(0, inner * pw)
                    .upload_async(&slot.stream, &slot.b_host[..inner * pw])?
            };
        }
        {
            let _k = tracing::debug_span!("kernel", ?method, columns = pw).entered();
            run_panel(
                gpu,
                dev,
                method,
                panel_layout,
                &slot.stream,
                slot.b_dev.read(&slot.stream)?,
                &mut slot.c_dev,
                (inner, nrows, pw),
            )?;
        }
        let _d = tracing::debug_span!("D2H", bytes = nrows * pw * size_of::<T>()).entered();
        // SAFETY: `c_host` is read only in `unpack_finished`, after the slot's stream is
        // synchronised; on an error `spmm` synchronises every slot's stream before the
        // staging buffers are dropped.
        unsafe {
            slot.c_dev.out.read(&slot.stream)?.download_async(
                &slot.stream,
                &mut slot.c_host,
                0,
                nrows * pw,
            )?;
        }
        slot.pending = Some(cols.clone());
    }
    for slot in slots.iter_mut() {
        unpack_finished(slot, shape, c_full)?;
    }
    Ok(())
}

/// Waits for the slot's C panel, if one is on its way, and copies it into C.
fn unpack_finished<T: DeviceScalar>(
    slot: &mut Slot<T>,
    shape: Shape,
    c_full: &mut [T::Device],
) -> Result<()> {
    if let Some(done) = slot.pending.take() {
        slot.stream.synchronize()?;
        let c_host = &slot.c_host;
        panel_runs(
            shape.layout,
            shape.panel_layout,
            (shape.nrows, shape.ncols),
            done,
            |f, p, len| c_full[f..f + len].copy_from_slice(&c_host[p..p + len]),
        );
    }
    Ok(())
}

/// Queues the kernels for one panel of `pw` columns on `stream`: `b_panel` holds
/// `inner × pw` values in `panel_layout`, `c_panel` room for `nrows × pw`.
#[allow(clippy::too_many_arguments)]
fn run_panel<T: DeviceScalar>(
    gpu: &Gpu,
    a: &DeviceSparse<'_, T>,
    method: Method,
    panel_layout: Layout,
    stream: &Stream,
    b_panel: DeviceSlice<'_, T::Device>,
    c_panel: &mut SpmvOutput<T>,
    (inner, nrows, pw): (usize, usize, usize),
) -> Result<()> {
    let b = b_panel.arg();
    let c = c_panel.out.write(stream)?.arg_mut();
    let launch = |base: &str, threads: u64, args: &[Arg]| -> Result<()> {
        let f = gpu.function("spmm", kernel_name::<T>(base))?;
        // SAFETY: the callers below pass the parameters of `base` in `spmm.cu`, in order; the
        // panels hold `inner × pw` and `nrows × pw` elements.
        unsafe { gpu.launch(f, LaunchConfig::for_threads(threads, BLOCK), stream, args) }
    };
    let (n, w) = (nrows as u64, pw as u64);
    match (method, a) {
        (Method::CsrRowMajor | Method::CsrColMajor, DeviceSparse::Csr(m)) => {
            let (base, ldb, ldc) = if method == Method::CsrRowMajor {
                ("spmm_csr_rowmajor", w, w)
            } else {
                ("spmm_csr_colmajor", inner as u64, n)
            };
            launch(
                base,
                n * 16,
                &[
                    Arg::U64(n),
                    Arg::U64(w),
                    m.offsets.read(stream)?.arg(),
                    m.cols.read(stream)?.arg(),
                    m.vals.read(stream)?.arg(),
                    b,
                    Arg::U64(ldb),
                    c,
                    Arg::U64(ldc),
                ],
            )
        }
        (
            Method::Ellr { t, lc },
            DeviceSparse::Ellr {
                padded_rows,
                row_lengths,
                cols,
                vals,
                ..
            },
        ) => {
            let ((b_rs, b_cs), (c_rs, c_cs)) = match panel_layout {
                Layout::RowMajor => ((w, 1), (w, 1)),
                Layout::ColMajor => ((1, inner as u64), (1, n)),
            };
            launch(
                &format!("spmm_ellr_lc{lc}"),
                n * u64::from(t),
                &[
                    Arg::U64(n),
                    Arg::U64(*padded_rows as u64),
                    Arg::U32(t),
                    row_lengths.read(stream)?.arg(),
                    cols.read(stream)?.arg(),
                    vals.read(stream)?.arg(),
                    Arg::U64(w),
                    b,
                    Arg::U64(b_rs),
                    Arg::U64(b_cs),
                    c,
                    Arg::U64(c_rs),
                    Arg::U64(c_cs),
                ],
            )
        }
        (Method::CsrTiles, DeviceSparse::Csr(m)) => {
            c_panel.prepare(stream)?;
            let nnz = m.nnz();
            launch(
                "spmm_csr_tiles",
                nnz.div_ceil(SPMM_TILE_ENTRIES) * 32,
                &[
                    Arg::U64(n),
                    Arg::U64(nnz),
                    Arg::U64(w),
                    m.offsets.read(stream)?.arg(),
                    m.cols.read(stream)?.arg(),
                    m.vals.read(stream)?.arg(),
                    b,
                    Arg::U64(w),
                    Arg::U64(1),
                    c_panel.target(stream, 0)?,
                    Arg::U64(w),
                    Arg::U64(1),
                ],
            )?;
            c_panel.finish(gpu, stream, nrows * pw)
        }
        (Method::ColumnSpmv(kernel), _) => {
            c_panel.prepare(stream)?;
            for q in 0..pw {
                let x = b_panel.sub(q * inner, inner).arg();
                // SAFETY: column q of the B panel holds `inner` values, the output `nrows`.
                unsafe {
                    a.launch(
                        gpu,
                        stream,
                        kernel,
                        x,
                        c_panel.target(stream, q * nrows)?,
                        &mut SpmvScratch::none(),
                    )?
                };
            }
            c_panel.finish(gpu, stream, nrows * pw)
        }
        _ => Err(Error::InvalidArgument(format!(
            "SpMM method {method:?} does not match the uploaded matrix"
        ))),
    }
}

/// The dense operand of a device SpMM: a host matrix or a resident one (`data` in `layout`).
#[derive(Clone, Copy)]
pub(crate) enum DenseIn<'a, T: DeviceScalar> {
    Host(&'a Dense<T>),
    Device {
        data: &'a DeviceBuffer<T::Device>,
        shape: (usize, usize),
        layout: Layout,
    },
}

/// `C = A·B` with C left on the device in B's layout (`nrows × ncols` values). A resident A
/// and B are used in place; host operands are uploaded whole (no panels: C must fit anyway).
/// The one combination whose kernel needs another layout than B's (a format without its own
/// SpMM kernel, so column-by-column SpMV, and a row-major B) runs on the host path, with a
/// resident B copied to the host first, and C uploaded.
///
/// As in [`crate::spmv::spmv_device`], nothing waits on the host except where B goes through
/// the host: C is stream-ordered and marked ready by an event, operands note their use.
pub(crate) fn spmm_device<T: DeviceScalar>(
    gpu: &Gpu,
    a: SparseIn<'_, T>,
    b: DenseIn<'_, T>,
    kernel: SpmmKernel,
) -> Result<DeviceBuffer<T::Device>> {
    gpu.bind()?;
    let stream = gpu.stream()?;
    // Handed out: a later use on another stream waits for this call's writes only, not for
    // what the pooled stream runs for other calls by then.
    let queued = spmm_queue(gpu, &stream, a, b, kernel).and_then(|c| {
        c.mark_done(&stream)?;
        Ok(c)
    });
    if queued.is_err() {
        let _ = stream.synchronize();
    }
    queued
}

fn spmm_queue<T: DeviceScalar>(
    gpu: &Gpu,
    stream: &Arc<Stream>,
    a: SparseIn<'_, T>,
    b: DenseIn<'_, T>,
    kernel: SpmmKernel,
) -> Result<DeviceBuffer<T::Device>> {
    let (nrows, inner) = a.shape();
    let ((_, ncols), layout) = match &b {
        DenseIn::Host(d) => (d.shape(), d.layout()),
        DenseIn::Device { shape, layout, .. } => (*shape, *layout),
    };
    let _span = tracing::debug_span!("spmm_device", nrows, inner, ncols, ?layout).entered();
    let dev = a.place_on(gpu, stream)?;
    let method = Method::choose(gpu, stream, &dev, kernel, layout, ncols.max(1))?;
    if method.panel_layout(layout) != layout {
        let host_a = match a {
            SparseIn::Host(m) => m,
            SparseIn::Device(_) => {
                return Err(hetsparse_core::Error::Internal {
                    backend: crate::error::BACKEND,
                    what: "a resident CSR matrix has its own SpMM kernels".into(),
                })
            }
        };
        let downloaded;
        let host_b = match b {
            DenseIn::Host(d) => d,
            DenseIn::Device {
                data,
                shape,
                layout,
            } => {
                // Waits for B's writer; `to_vec` waits for the copy.
                let values = data.read(stream)?.to_vec(stream)?;
                downloaded =
                    Dense::try_new(shape.0, shape.1, layout, from_device::<T>(&values).to_vec())?;
                &downloaded
            }
        };
        let c = spmm(
            gpu,
            host_a,
            host_b,
            SpmmKernelOptions {
                kernel,
                panel_columns: None,
            },
        )?;
        return put(gpu, stream, Some(stream), as_device(c.data()), "SpMM C");
    }
    let uploaded;
    let b_dev = match b {
        DenseIn::Host(d) => {
            let _h = tracing::debug_span!("H2D", what = "SpMM B").entered();
            uploaded = put(gpu, stream, Some(stream), as_device(d.data()), "SpMM B")?;
            &uploaded
        }
        DenseIn::Device { data, .. } => data,
    };
    let mut c = SpmvOutput::new_in(
        gpu,
        (stream, true),
        &dev,
        method.spmv_kernel(),
        nrows * ncols,
    )?;
    if nrows > 0 && ncols > 0 {
        let _k = tracing::debug_span!("kernel", ?method, columns = ncols).entered();
        run_panel(
            gpu,
            &dev,
            method,
            layout,
            stream,
            b_dev.read(stream)?,
            &mut c,
            (inner, nrows, ncols),
        )?;
    }
    Ok(c.out)
}

/// The sparse operand of a device SpMV or SpMM: a host matrix of any format or a resident CSR.
#[derive(Clone, Copy)]
pub(crate) enum SparseIn<'a, T: DeviceScalar> {
    Host(SparseRef<'a, T>),
    Device(&'a DeviceCsr<T>),
}

impl<'a, T: DeviceScalar> SparseIn<'a, T> {
    pub(crate) fn shape(&self) -> (usize, usize) {
        match self {
            SparseIn::Host(m) => m.shape(),
            SparseIn::Device(m) => (m.nrows, m.ncols),
        }
    }
    /// The matrix on the device: uploaded on `stream` into stream-ordered buffers freed on
    /// it, or the resident one in place.
    pub(crate) fn place_on(self, gpu: &Gpu, stream: &Arc<Stream>) -> Result<DeviceSparse<'a, T>> {
        match self {
            SparseIn::Host(m) => DeviceSparse::upload(gpu, stream, Some(stream), m),
            SparseIn::Device(m) => Ok(DeviceSparse::resident(m)),
        }
    }
}

impl crate::CudaBackend {
    /// `C = A·B` with a chosen kernel and panel width `L_GPU`;
    /// [`Backend::spmm`](hetsparse_core::Backend::spmm) is this with the default options.
    ///
    /// ```no_run
    /// use hetsparse_core::{generate, Dense, Ellr, Layout, SparseRef};
    /// use hetsparse_cuda::{CudaBackend, SpmmKernel, SpmmKernelOptions};
    ///
    /// # fn main() -> hetsparse_core::Result<()> {
    /// let gpu = CudaBackend::new()?;
    /// let a = Ellr::from_csr(&generate::banded::<f64>(1000, 9, 1), 1 << 20)?;
    /// let b = Dense::<f64>::zeros(1000, 64, Layout::RowMajor)?;
    /// let options = SpmmKernelOptions {
    ///     kernel: SpmmKernel::EllrT { threads_per_row: 2, columns_per_pass: 8 },
    ///     panel_columns: Some(16), // four panels over two streams
    /// };
    /// let c = gpu.spmm_with_kernel(SparseRef::Ellr(&a), &b, options)?;
    /// assert_eq!(c.shape(), (1000, 64));
    /// # Ok(())
    /// # }
    /// ```
    pub fn spmm_with_kernel<T: DeviceScalar>(
        &self,
        a: SparseRef<'_, T>,
        b: &Dense<T>,
        options: SpmmKernelOptions,
    ) -> Result<Dense<T>> {
        spmm(self.gpu(), a, b, options)
    }
}
