//! SpMV and SpMM: CSR scalar and vector, ELLR-T, CSPR with atomic row sums, csrmm. Formats
//! without a kernel of their own (CSC, COO, DIA, BSR) are converted to CSR on the host.
//!
//! The kernels run on device buffers, whether copied for the call or resident; the result
//! stays on the device for the caller to read back or keep.

use std::ops::Deref;

use opencl3::program::Program;

use hetsparse_core::format::{Cspr, Csr, Ellr, Layout};
use hetsparse_core::{Error, Result, Scalar};

use crate::kernels::{ELL_LC, ELL_T, LANE_WG, VEC_LANES};
use crate::runtime::{DeviceBuffer, Launch, Queue};
use crate::scalar::{bytes_of, bytes_of_mut};

/// Rows at least this long on average go to the CSR vector kernel (a work-item per row wastes
/// the lanes that share its loads on shorter ones).
const VECTOR_MIN_ROW: u64 = 16;

/// Reads `len` values of `T` from the start of `b` (`bool`s as bytes, converted).
pub(crate) fn download_values<T: Scalar>(
    q: &Queue<'_>,
    b: &DeviceBuffer<u8>,
    len: usize,
) -> Result<Vec<T>> {
    if !crate::scalar::is_plain_device_scalar::<T>() {
        let bytes = len
            .checked_mul(std::mem::size_of::<T>())
            .ok_or_else(|| Error::InvalidArgument(format!("{len} result values overflow")))?;
        let mut raw = hetsparse_core::host::try_filled(bytes, 0u8, "result")?;
        q.download_bytes(b, &mut raw, "result")?;
        return crate::scalar::from_device_bytes(&raw);
    }
    let mut out = hetsparse_core::host::try_filled(len, T::zero(), "result")?;
    q.download_bytes(b, bytes_of_mut(&mut out), "result")?;
    Ok(out)
}

/// A device buffer copied for the call or borrowed from a resident matrix.
pub(crate) enum Buf<'a, T> {
    Owned(DeviceBuffer<T>),
    Borrowed(&'a DeviceBuffer<T>),
}

impl<T> Deref for Buf<'_, T> {
    type Target = DeviceBuffer<T>;
    fn deref(&self) -> &DeviceBuffer<T> {
        match self {
            Buf::Owned(b) => b,
            Buf::Borrowed(b) => b,
        }
    }
}

/// A sparse operand with a row-wise kernel, on the host: CSR (csrmm, CSR scalar and vector) or
/// ELLPACK-R (ELLR-T).
#[derive(Clone, Copy)]
pub(crate) enum RowOperand<'a, T> {
    Csr(&'a Csr<T>),
    Ellr(&'a Ellr<T>),
}

/// A row operand's arrays on the device.
pub(crate) struct DeviceRows<'a> {
    nrows: usize,
    kind: RowsKind<'a>,
}

enum RowsKind<'a> {
    Csr {
        nnz: u64,
        offsets: Buf<'a, u64>,
        index: Buf<'a, u32>,
        vals: Buf<'a, u8>,
    },
    Ellr {
        padded: u64,
        lengths: Buf<'a, u32>,
        index: Buf<'a, u32>,
        vals: Buf<'a, u8>,
    },
}

impl<T: Scalar> RowOperand<'_, T> {
    /// Device bytes its copy takes.
    pub(crate) fn bytes(&self) -> u64 {
        let value = std::mem::size_of::<T>() as u64;
        match self {
            RowOperand::Csr(a) => hetsparse_core::backend::memory::csr_bytes(
                a.nrows(),
                a.nnz(),
                std::mem::size_of::<T>(),
            ),
            RowOperand::Ellr(a) => {
                (a.row_lengths().len() as u64) * 4 + (a.col_indices().len() as u64) * (4 + value)
            }
        }
    }

    /// Stored entries.
    pub(crate) fn nnz(&self) -> u64 {
        match self {
            RowOperand::Csr(a) => a.nnz(),
            RowOperand::Ellr(a) => a.nnz(),
        }
    }

    /// Copies it to the device.
    pub(crate) fn upload(&self, q: &Queue<'_>) -> Result<DeviceRows<'static>> {
        Ok(match self {
            RowOperand::Csr(a) => DeviceRows {
                nrows: a.nrows(),
                kind: RowsKind::Csr {
                    nnz: a.nnz(),
                    offsets: Buf::Owned(q.upload(a.row_offsets(), "A row offsets")?),
                    index: Buf::Owned(q.upload(a.col_indices(), "A column indices")?),
                    vals: Buf::Owned(q.upload(bytes_of(a.values()), "A values")?),
                },
            },
            RowOperand::Ellr(a) => DeviceRows {
                nrows: a.nrows(),
                kind: RowsKind::Ellr {
                    padded: a.padded_rows() as u64,
                    lengths: Buf::Owned(q.upload(a.row_lengths(), "A row lengths")?),
                    index: Buf::Owned(q.upload(a.col_indices(), "A column indices")?),
                    vals: Buf::Owned(q.upload(bytes_of(a.values()), "A values")?),
                },
            },
        })
    }
}

impl<'a> DeviceRows<'a> {
    /// A CSR matrix already on the device.
    pub(crate) fn csr(
        nrows: usize,
        nnz: u64,
        offsets: &'a DeviceBuffer<u64>,
        index: &'a DeviceBuffer<u32>,
        vals: &'a DeviceBuffer<u8>,
    ) -> Self {
        DeviceRows {
            nrows,
            kind: RowsKind::Csr {
                nnz,
                offsets: Buf::Borrowed(offsets),
                index: Buf::Borrowed(index),
                vals: Buf::Borrowed(vals),
            },
        }
    }

    /// Appends the arguments every row kernel takes after its sizes: `[padded,] rows, index,
    /// values`.
    fn args<'q>(&self, launch: Launch<'q>) -> Result<Launch<'q>> {
        match &self.kind {
            RowsKind::Csr {
                offsets,
                index,
                vals,
                ..
            } => launch.arg(offsets.arg())?.arg(index.arg())?.arg(vals.arg()),
            RowsKind::Ellr {
                padded,
                lengths,
                index,
                vals,
            } => launch
                .arg(*padded)?
                .arg(lengths.arg())?
                .arg(index.arg())?
                .arg(vals.arg()),
        }
    }
}

/// `y = A·x` by the ELLR-T kernel, or the CSR scalar or vector kernel (by mean row length); y
/// (A's rows) stays on the device, allocated outside the reuse pool when `keep`.
pub(crate) fn spmv_device<T: Scalar>(
    q: &Queue<'_>,
    prog: &Program,
    a: &DeviceRows<'_>,
    x: &DeviceBuffer<u8>,
    keep: bool,
) -> Result<DeviceBuffer<u8>> {
    let n = a.nrows;
    let (name, global, local) = match a.kind {
        RowsKind::Ellr { .. } => ("spmv_ellr", n * ELL_T, Some(LANE_WG)),
        RowsKind::Csr { nnz, .. } if nnz >= VECTOR_MIN_ROW * n as u64 => {
            ("spmv_csr_vector", n * VEC_LANES, Some(LANE_WG))
        }
        RowsKind::Csr { .. } => ("spmv_csr_scalar", n, None),
    };
    let _span = tracing::info_span!("spmv", kernel = name, nrows = n).entered();
    let y = q.alloc_in::<u8>(n * std::mem::size_of::<T>(), "y", !keep)?;
    a.args(q.kernel(prog, name)?.arg(n as u64)?)?
        .arg(x.arg())?
        .arg(y.arg())?
        .run(&[global], local.as_ref().map(std::slice::from_ref))?;
    Ok(y)
}

/// `y = A·x` by the CSPR kernel: a work-item per entry, atomic sums per row in the accumulator
/// type, then one rounding to storage.
pub(crate) fn spmv_cspr<T: Scalar>(
    q: &Queue<'_>,
    prog: &Program,
    a: &Cspr<T>,
    x: &[T],
) -> Result<Vec<T>> {
    let (n, nnz) = (a.nrows(), a.nnz() as usize);
    let _span = tracing::info_span!("spmv cspr", nrows = n, nnz).entered();
    let linear = q.upload(a.indices(), "A linear indices")?;
    let vals = q.upload(bytes_of(a.values()), "A values")?;
    let xd = q.upload(bytes_of(x), "x")?;
    let acc_bytes = crate::kernels::acc_bytes(T::TYPE);
    let mut y_acc = q.alloc::<u8>(n * acc_bytes, "y accumulator")?;
    q.zero(&mut y_acc, "y accumulator")?;
    q.kernel(prog, "spmv_cspr")?
        .arg(nnz as u64)?
        .arg(a.ncols() as u64)?
        .arg(linear.arg())?
        .arg(vals.arg())?
        .arg(xd.arg())?
        .arg(y_acc.arg())?
        .run(&[nnz], None)?;
    let y = q.alloc::<u8>(n * std::mem::size_of::<T>(), "y")?;
    q.kernel(prog, "acc_to_store")?
        .arg(n as u64)?
        .arg(y_acc.arg())?
        .arg(y.arg())?
        .run(&[n], None)?;
    download_values(q, &y, n)
}

/// Row and column strides of element (r, c) of a dense `nrows × ncols` matrix: r·rs + c·cs.
pub(crate) fn strides(layout: Layout, nrows: usize, ncols: usize) -> (u64, u64) {
    match layout {
        Layout::RowMajor => (ncols as u64, 1),
        Layout::ColMajor => (1, nrows as u64),
    }
}

/// The dense operand of SpMM on the device: its buffer, shape and layout.
pub(crate) struct DenseIn<'b> {
    pub data: &'b DeviceBuffer<u8>,
    pub nrows: usize,
    pub ncols: usize,
    pub layout: Layout,
}

/// `C = A·B` by csrmm or ELLR-T, C (A's rows × B's columns, in B's layout) left on the device,
/// allocated outside the reuse pool when `keep`.
pub(crate) fn spmm_device<T: Scalar>(
    q: &Queue<'_>,
    prog: &Program,
    a: &DeviceRows<'_>,
    b: &DenseIn<'_>,
    keep: bool,
) -> Result<DeviceBuffer<u8>> {
    let (nrows, ncols) = (a.nrows, b.ncols);
    let c_strides = strides(b.layout, nrows, ncols);
    let b_strides = strides(b.layout, b.nrows, b.ncols);
    let (name, global, local) = match a.kind {
        RowsKind::Csr { .. } => ("spmm_csr", [ncols, nrows], None),
        RowsKind::Ellr { .. } => (
            "spmm_ellr",
            [nrows * ELL_T, ncols.div_ceil(ELL_LC)],
            Some([LANE_WG, 1]),
        ),
    };
    let _span = tracing::info_span!("spmm", kernel = name, nrows, ncols).entered();
    let c = q.alloc_in::<u8>(nrows * ncols * std::mem::size_of::<T>(), "C", !keep)?;
    let launch = q.kernel(prog, name)?.arg(nrows as u64)?.arg(ncols as u64)?;
    a.args(launch)?
        .arg(b.data.arg())?
        .arg(b_strides.0)?
        .arg(b_strides.1)?
        .arg(c.arg())?
        .arg(c_strides.0)?
        .arg(c_strides.1)?
        .run(&global, local.as_ref().map(|l| &l[..]))?;
    Ok(c)
}
