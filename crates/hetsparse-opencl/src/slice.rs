//! Windows of resident matrices for chunked products ([`CsrWindow`]s of a [`ClCsr`], made and
//! checked above the backend): a whole matrix is used where it lies; a range of rows of A or a
//! panel of columns of B is cut on the device into arrays of its own (the resident matrices
//! stay as they are).

use std::ops::Range;
use std::sync::Arc;

use opencl3::program::Program;

use hetsparse_core::{CsrWindow, Error, MemoryPool, Result, Scalar, Shaped};

use crate::esc::{exclusive_scan, DeviceOperand, Uploaded};
use crate::resident::{structure_bytes, value_bytes, ClCsr};
use crate::runtime::Queue;
use crate::BACKEND;

impl Shaped for &ClCsr {
    fn shape(&self) -> (usize, usize) {
        (self.structure.nrows, self.structure.ncols)
    }
}

/// A window on the device: the resident matrix itself, or the window cut into arrays of its
/// own.
pub(crate) enum Part<'a> {
    Whole(DeviceOperand<'a>),
    Cut(Uploaded),
}

impl Part<'_> {
    /// The window as an ESC operand.
    pub(crate) fn view(&self) -> DeviceOperand<'_> {
        match self {
            Part::Whole(m) => *m,
            Part::Cut(u) => u.view(),
        }
    }
}

/// Window `w` of a resident matrix on the device: not copied where it is the whole matrix,
/// otherwise its rows and then its columns cut by kernels.
pub(crate) fn window<'a, T: Scalar>(
    q: &Queue<'_>,
    prog: &Program,
    pool: &Arc<MemoryPool>,
    w: &CsrWindow<&'a ClCsr>,
) -> Result<Part<'a>> {
    let m = w.matrix().operand();
    Ok(match (w.all_rows(), w.all_columns()) {
        (true, true) => Part::Whole(m),
        (false, true) => Part::Cut(rows::<T>(q, prog, pool, m, w.rows())?),
        (true, false) => Part::Cut(column_panel::<T>(q, prog, pool, m, w.col_lo(), w.col_hi())?),
        (false, false) => {
            let rows = rows::<T>(q, prog, pool, m, w.rows())?;
            Part::Cut(column_panel::<T>(
                q,
                prog,
                pool,
                rows.view(),
                w.col_lo(),
                w.col_hi(),
            )?)
        }
    })
}

fn len_of(n: u64, what: &str) -> Result<usize> {
    hetsparse_core::host::entry_count(n, what)
}

/// Rows `rows` of `m` (rows of a window, inside `m`).
fn rows<T: Scalar>(
    q: &Queue<'_>,
    prog: &Program,
    pool: &Arc<MemoryPool>,
    m: DeviceOperand<'_>,
    rows: Range<usize>,
) -> Result<Uploaded> {
    let n = rows.len();
    let _span = tracing::debug_span!("slice rows", start = rows.start, n).entered();
    let base = q.download_at(m.offsets, rows.start, 1, "first offset of the rows")?[0];
    let end = q.download_at(m.offsets, rows.end, 1, "last offset of the rows")?[0];
    let nnz = end.checked_sub(base).ok_or_else(|| Error::Internal {
        backend: BACKEND,
        what: "resident offsets decrease".into(),
    })?;
    let len = len_of(nnz, "a row slice")?;
    let reservation = pool.reserve(
        structure_bytes(n, nnz).saturating_add(value_bytes::<T>(nnz)),
        "rows of A for a chunk",
    )?;
    let offsets = q.alloc::<u64>(n + 1, "chunk row offsets")?;
    let index = q.alloc::<u32>(len, "chunk column indices")?;
    let values = q.alloc::<u8>(len * std::mem::size_of::<T>(), "chunk values")?;
    q.kernel(prog, "slice_rows_offsets")?
        .arg(n as u64)?
        .arg(m.offsets.arg())?
        .arg(rows.start as u64)?
        .arg(offsets.arg())?
        .run(&[n + 1], None)?;
    q.kernel(prog, "slice_entries")?
        .arg(nnz)?
        .arg(base)?
        .arg(m.index.arg())?
        .arg(m.values.arg())?
        .arg(index.arg())?
        .arg(values.arg())?
        .run(&[len], None)?;
    Ok(Uploaded::from_parts(
        n,
        nnz,
        offsets,
        index,
        values,
        reservation,
    ))
}

/// Columns `c0..c1` of `m` (columns of a window, inside `m`), shifted to start at 0.
fn column_panel<T: Scalar>(
    q: &Queue<'_>,
    prog: &Program,
    pool: &Arc<MemoryPool>,
    m: DeviceOperand<'_>,
    c0: u32,
    c1: u32,
) -> Result<Uploaded> {
    let nrows = m.nrows;
    let _span = tracing::debug_span!("column panel", c0, c1, nrows).entered();
    let offsets_reservation = pool.reserve(structure_bytes(nrows, 0), "panel of B offsets")?;
    let offsets = q.alloc::<u64>(nrows + 1, "panel row offsets")?;
    q.kernel(prog, "panel_count")?
        .arg(nrows as u64)?
        .arg(m.offsets.arg())?
        .arg(m.index.arg())?
        .arg(c0)?
        .arg(c1)?
        .arg(offsets.arg())?
        .run(&[nrows.max(1)], None)?;
    exclusive_scan(q, prog, &offsets, nrows + 1)?;
    let nnz = q.download_at(&offsets, nrows, 1, "panel size")?[0];
    let len = len_of(nnz, "a column panel")?;
    // The whole panel, offsets included, under one reservation from here on.
    let reservation = pool.reserve(
        structure_bytes(nrows, nnz).saturating_add(value_bytes::<T>(nnz)),
        "panel of B",
    )?;
    drop(offsets_reservation);
    let index = q.alloc::<u32>(len, "panel column indices")?;
    let values = q.alloc::<u8>(len * std::mem::size_of::<T>(), "panel values")?;
    q.kernel(prog, "panel_copy")?
        .arg(nrows as u64)?
        .arg(m.offsets.arg())?
        .arg(m.index.arg())?
        .arg(m.values.arg())?
        .arg(c0)?
        .arg(offsets.arg())?
        .arg(index.arg())?
        .arg(values.arg())?
        .run(&[nrows], None)?;
    Ok(Uploaded::from_parts(
        nrows,
        nnz,
        offsets,
        index,
        values,
        reservation,
    ))
}
