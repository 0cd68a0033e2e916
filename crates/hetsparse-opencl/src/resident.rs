//! Matrices resident in an OpenCL context: the storage behind this backend's
//! [`ResidentCsr`] and [`ResidentDense`] handles.
//!
//! A CSR matrix is its structure (row offsets, column indices), shared through an `Arc` by the
//! matrices [`upload_values`](hetsparse_core::Backend::upload_values) makes from it and by the
//! products of a plan, and its values. Every buffer holds a reservation in the memory pool of
//! the backend that made it, and an `Arc` of the device state, so that the context outlives
//! them whatever queue filled them.

use std::sync::Arc;

use hetsparse_core::backend::memory::csr_bytes;
use hetsparse_core::format::{Csr, Dense, Layout};
use hetsparse_core::{Error, MemoryPool, Reservation, Result, Scalar};

use crate::esc::{DeviceOperand, DeviceProduct};
use crate::multiply::{download_values, DenseIn, DeviceRows};
use crate::runtime::{DeviceBuffer, DeviceState, Incoming, IncomingValues, Queue, Ready};
use crate::scalar::bytes_of;
use crate::BACKEND;

/// The structure of a resident CSR matrix.
///
/// Fields drop in order: the buffers before the state (and context) they belong to.
pub(crate) struct ClStructure {
    pub(crate) nrows: usize,
    pub(crate) ncols: usize,
    pub(crate) nnz: u64,
    pub(crate) offsets: DeviceBuffer<u64>,
    pub(crate) index: DeviceBuffer<u32>,
    /// Whether every CSR invariant of these arrays is known to hold: uploaded from a valid
    /// matrix, or checked on the device. Downloads check the others on the host.
    pub(crate) verified: bool,
    pub(crate) _reservation: Reservation,
    pub(crate) _state: Arc<DeviceState>,
}

/// A resident CSR matrix: a structure and values of one scalar type.
pub(crate) struct ClCsr {
    pub(crate) structure: Arc<ClStructure>,
    pub(crate) values: DeviceBuffer<u8>,
    pub(crate) _reservation: Reservation,
}

/// A resident dense matrix (or vector, one column).
pub(crate) struct ClDense {
    pub(crate) nrows: usize,
    pub(crate) ncols: usize,
    pub(crate) layout: Layout,
    pub(crate) data: DeviceBuffer<u8>,
    /// When `data` is complete: results of the device's stream may still be computed.
    pub(crate) ready: Ready,
    /// Whether `data` came from the device's stream, which takes it back on drop.
    pub(crate) from_stream: bool,
    pub(crate) _reservation: Reservation,
    /// Last: dropped after the buffer.
    pub(crate) _state: Arc<DeviceState>,
}

impl Drop for ClDense {
    fn drop(&mut self) {
        if self.from_stream {
            self._state.recycle(&self.data);
        }
    }
}

/// Bytes of the structure of a CSR matrix: 64-bit offsets, 32-bit columns.
pub(crate) fn structure_bytes(nrows: usize, nnz: u64) -> u64 {
    csr_bytes(nrows, nnz, 0)
}

/// Bytes of `n` values of `T`.
pub(crate) fn value_bytes<T>(n: u64) -> u64 {
    n.saturating_mul(std::mem::size_of::<T>() as u64)
}

impl ClCsr {
    /// As an ESC operand.
    pub(crate) fn operand(&self) -> DeviceOperand<'_> {
        DeviceOperand {
            nrows: self.structure.nrows,
            nnz: self.structure.nnz,
            offsets: &self.structure.offsets,
            index: &self.structure.index,
            values: &self.values,
        }
    }

    /// Keeps the arrays alive until the commands `q` queued so far finished.
    pub(crate) fn hold(&self, q: &Queue<'_>) -> Result<()> {
        q.hold(&self.structure.offsets)?;
        q.hold(&self.structure.index)?;
        q.hold(&self.values)
    }

    /// As an operand of the row kernels (SpMV, SpMM).
    pub(crate) fn rows(&self) -> DeviceRows<'_> {
        let s = &self.structure;
        DeviceRows::csr(s.nrows, s.nnz, &s.offsets, &s.index, &self.values)
    }
}

impl ClDense {
    /// Blocks until the contents are complete: before a queue other than the device's stream
    /// reads them.
    pub(crate) fn wait_ready(&self) -> Result<()> {
        if self.ready.is_pending() {
            self.ready.wait()?;
            self._state.settle_stream()?;
        }
        Ok(())
    }

    /// As the dense operand of SpMM.
    pub(crate) fn input(&self) -> DenseIn<'_> {
        DenseIn {
            data: &self.data,
            nrows: self.nrows,
            ncols: self.ncols,
            layout: self.layout,
        }
    }
}

/// Copies the structure of `m` to the device.
pub(crate) fn upload_structure<T: Scalar>(
    state: &Arc<DeviceState>,
    pool: &Arc<MemoryPool>,
    q: &Queue<'_>,
    m: &Csr<T>,
) -> Result<Arc<ClStructure>> {
    let shape = (m.nrows(), m.ncols());
    upload_positions(state, pool, q, shape, m.row_offsets(), m.col_indices()).map(Arc::new)
}

/// Copies a CSR structure of `shape` (`offsets`, one more than its rows, and the sorted
/// columns of each row) to the device, in memory of its own, reserved in `pool` for as long
/// as it lives.
pub(crate) fn upload_positions(
    state: &Arc<DeviceState>,
    pool: &Arc<MemoryPool>,
    q: &Queue<'_>,
    (nrows, ncols): (usize, usize),
    row_offsets: &[u64],
    col_indices: &[u32],
) -> Result<ClStructure> {
    let nnz = col_indices.len() as u64;
    let reservation = pool.reserve(structure_bytes(nrows, nnz), "resident matrix structure")?;
    let offsets = q.alloc_kept::<u64>(row_offsets.len(), "resident row offsets")?;
    let index = q.alloc_kept::<u32>(col_indices.len(), "resident column indices")?;
    q.write_all(
        &[
            offsets.upload_of(row_offsets, "row offsets")?,
            index.upload_of(col_indices, "column indices")?,
        ],
        "a resident matrix's structure",
    )?;
    Ok(ClStructure {
        _state: Arc::clone(state),
        nrows,
        ncols,
        nnz,
        offsets,
        index,
        verified: true,
        _reservation: reservation,
    })
}

/// Copies `values` (one per entry of `structure`) to the device beside it.
pub(crate) fn upload_values<T: Scalar>(
    pool: &Arc<MemoryPool>,
    q: &Queue<'_>,
    structure: Arc<ClStructure>,
    values: &[T],
) -> Result<ClCsr> {
    if values.len() as u64 != structure.nnz {
        return Err(Error::InvalidArgument(format!(
            "new values: {} given for a pattern of {} entries",
            values.len(),
            structure.nnz
        )));
    }
    let reservation = pool.reserve(value_bytes::<T>(structure.nnz), "resident matrix values")?;
    let bytes = bytes_of(values);
    let data = q.alloc_kept::<u8>(bytes.len(), "resident values")?;
    q.write_all(
        &[data.upload_of(bytes, "values")?],
        "a resident matrix's values",
    )?;
    Ok(ClCsr {
        structure,
        values: data,
        _reservation: reservation,
    })
}

/// Copies a resident matrix to the host; its arrays are checked there unless the device
/// verified them.
pub(crate) fn download_csr<T: Scalar>(q: &Queue<'_>, c: &ClCsr) -> Result<Csr<T>> {
    let s = &c.structure;
    download_operand(q, c.operand(), s.ncols, s.verified)
}

/// Copies arrays of a CSR matrix on the device to the host; they are checked there unless
/// `verified` says they are known to be valid.
pub(crate) fn download_operand<T: Scalar>(
    q: &Queue<'_>,
    m: DeviceOperand<'_>,
    ncols: usize,
    verified: bool,
) -> Result<Csr<T>> {
    let nnz = hetsparse_core::host::entry_count(m.nnz, "a resident matrix on this host")?;
    let _span = tracing::info_span!("download", nrows = m.nrows, nnz).entered();
    let mut offsets = Incoming::<u64>::new(m.nrows + 1);
    let mut index = Incoming::<u32>::new(nnz);
    let mut values = IncomingValues::<T>::new(nnz);
    let mut pieces = vec![
        offsets.piece_of(m.offsets, "row offsets")?,
        index.piece_of(m.index, "column indices")?,
        values.piece_of_bytes(m.values, "values")?,
    ];
    q.read_all(&mut pieces, "a resident matrix")?;
    drop(pieces);
    // SAFETY: read_all returned Ok, so it wrote every byte of the three vectors; u64, u32 and
    // the plain device scalar types (checked by piece_of_bytes) are plain data, and bool's
    // bytes are converted.
    let (offsets, index, values) = unsafe {
        (
            offsets.assume_filled(),
            index.assume_filled(),
            values.assume_filled()?,
        )
    };
    if verified {
        // SAFETY: the arrays were uploaded from a valid matrix or checked on the device
        // (`verified`), and the lengths are those they were made with.
        Ok(unsafe { Csr::from_parts_unchecked(m.nrows, ncols, offsets, index, values) })
    } else {
        Ok(Csr::try_new(m.nrows, ncols, offsets, index, values)?)
    }
}

/// Keeps a product computed on the device: its device check's flag is read first (a product
/// it flags is refused), then its bytes are reserved for as long as it lives.
pub(crate) fn keep_product(
    state: &Arc<DeviceState>,
    pool: &Arc<MemoryPool>,
    q: &Queue<'_>,
    c: DeviceProduct,
    value_size: usize,
) -> Result<ClCsr> {
    let verified = match &c.flag {
        Some(flag) => {
            if q.download_at(flag, 0, 1, "check flag")?[0] != 0 {
                return Err(crate::esc::refused());
            }
            true
        }
        None => false,
    };
    let structure = pool.reserve(
        structure_bytes(c.nrows, c.nnz),
        "resident product structure",
    )?;
    let values = pool.reserve(
        c.nnz.saturating_mul(value_size as u64),
        "resident product values",
    )?;
    Ok(ClCsr {
        structure: Arc::new(ClStructure {
            _state: Arc::clone(state),
            nrows: c.nrows,
            ncols: c.ncols,
            nnz: c.nnz,
            offsets: c.offsets,
            index: c.index,
            verified,
            _reservation: structure,
        }),
        values: c.values,
        _reservation: values,
    })
}

/// Copies a dense matrix to the device.
pub(crate) fn upload_dense<T: Scalar>(
    state: &Arc<DeviceState>,
    pool: &Arc<MemoryPool>,
    q: &Queue<'_>,
    d: &Dense<T>,
) -> Result<ClDense> {
    let bytes = bytes_of(d.data());
    let reservation = pool.reserve(bytes.len() as u64, "resident dense matrix")?;
    let data = q.alloc_kept::<u8>(bytes.len(), "resident dense matrix")?;
    q.write_all(&[data.upload_of(bytes, "dense matrix")?], "a dense matrix")?;
    Ok(ClDense {
        _state: Arc::clone(state),
        nrows: d.nrows(),
        ncols: d.ncols(),
        layout: d.layout(),
        data,
        ready: Ready::default(),
        from_stream: false,
        _reservation: reservation,
    })
}

/// Copies a resident dense matrix to the host.
pub(crate) fn download_dense<T: Scalar>(q: &Queue<'_>, d: &ClDense) -> Result<Dense<T>> {
    d.wait_ready()?;
    let len = d.nrows * d.ncols;
    let data = if len == 0 {
        Vec::new()
    } else {
        download_values::<T>(q, &d.data, len)?
    };
    Ok(Dense::try_new(d.nrows, d.ncols, d.layout, data)?)
}

/// [`Error::Internal`] for a handle of this backend's memory whose storage is not its own.
pub(crate) fn foreign_storage(what: &str) -> Error {
    Error::Internal {
        backend: BACKEND,
        what: format!("{what} of this backend's memory space holds storage of another type"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes the device holds that are not 0 or 1 (no kernel writes them, but the host must
    /// not trust that) read back as `true`, through both paths that read values: a dense
    /// matrix's (and SpMV's) and a sparse matrix's.
    #[test]
    fn every_device_byte_reads_back_as_a_valid_bool() {
        let Some(b) = crate::tests::device_backend("bool bytes") else {
            return;
        };
        let q = b.state.queue().unwrap();
        let bytes = [0u8, 1, 2, 0, 255, 128];
        let values = q.upload(&bytes, "bool bytes").unwrap();
        let want = [false, true, true, false, true, true];
        assert_eq!(download_values::<bool>(&q, &values, 6).unwrap(), want);
        let offsets = q.upload(&[0u64, 4, 6], "offsets").unwrap();
        let index = q.upload(&[0u32, 1, 2, 3, 0, 3], "index").unwrap();
        let m = DeviceOperand {
            nrows: 2,
            nnz: 6,
            offsets: &offsets,
            index: &index,
            values: &values,
        };
        let c = download_operand::<bool>(&q, m, 4, false).unwrap();
        assert_eq!(c.values(), want);
        assert_eq!(c.col_indices(), [0, 1, 2, 3, 0, 3]);
    }
}
