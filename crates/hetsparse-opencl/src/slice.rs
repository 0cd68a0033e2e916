//! Parts of resident matrices cut on the device, for chunked products: a range of rows of A
//! and a panel of columns of B, as matrices of their own (copies; the resident matrices stay
//! as they are).

use std::ops::Range;
use std::sync::Arc;

use opencl3::program::Program;

use hetsparse_core::{Error, MemoryPool, Result, Scalar};

use crate::esc::{exclusive_scan, DeviceOperand, Uploaded};
use crate::resident::{structure_bytes, value_bytes};
use crate::runtime::Queue;
use crate::BACKEND;

fn len_of(n: u64, what: &str) -> Result<usize> {
    usize::try_from(n).map_err(|_| Error::TooLarge {
        what: what.into(),
        needed: n,
        limit: usize::MAX as u64,
        unit: "entries",
    })
}

/// Rows `rows` of `m` (which has at least `rows.end` rows).
pub(crate) fn rows<T: Scalar>(
    q: &Queue<'_>,
    prog: &Program,
    pool: &Arc<MemoryPool>,
    m: DeviceOperand<'_>,
    rows: Range<usize>,
) -> Result<Uploaded> {
    if rows.start > rows.end || rows.end > m.nrows {
        return Err(Error::Internal {
            backend: BACKEND.into(),
            what: format!("rows {rows:?} of a matrix of {} rows", m.nrows),
        });
    }
    let n = rows.len();
    let _span = tracing::debug_span!("slice rows", start = rows.start, n).entered();
    let base = q.download_at(m.offsets, rows.start, 1, "first offset of the rows")?[0];
    let end = q.download_at(m.offsets, rows.end, 1, "last offset of the rows")?[0];
    let nnz = end.checked_sub(base).ok_or_else(|| Error::Internal {
        backend: BACKEND.into(),
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

/// Columns `cols` of `m` (which has at least `cols.end` columns), shifted to start at 0.
pub(crate) fn column_panel<T: Scalar>(
    q: &Queue<'_>,
    prog: &Program,
    pool: &Arc<MemoryPool>,
    m: DeviceOperand<'_>,
    cols: Range<usize>,
) -> Result<Uploaded> {
    let (c0, c1) = match (u32::try_from(cols.start), u32::try_from(cols.end)) {
        (Ok(c0), Ok(c1)) if c0 <= c1 => (c0, c1),
        _ => {
            return Err(Error::Internal {
                backend: BACKEND.into(),
                what: format!("column range {cols:?} of a resident matrix"),
            })
        }
    };
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
