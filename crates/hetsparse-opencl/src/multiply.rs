//! SpMV and SpMM: CSR scalar and vector, ELLR-T, CSPR with atomic row sums, csrmm. Formats
//! without a kernel of their own (CSC, COO, DIA, BSR) are converted to CSR on the host.

use opencl3::program::Program;

use hetsparse_core::format::{Cspr, Csr, Dense, Ellr, Layout};
use hetsparse_core::{Result, Scalar};

use crate::kernels::{ELL_LC, ELL_T, LANE_WG, VEC_LANES};
use crate::runtime::{DeviceBuffer, Launch, Queue};
use crate::scalar::{bytes_of, bytes_of_mut};

/// Rows at least this long on average go to the CSR vector kernel (a work-item per row wastes
/// the lanes that share its loads on shorter ones).
const VECTOR_MIN_ROW: u64 = 16;

fn download_values<T: Scalar>(q: &Queue<'_>, b: &DeviceBuffer<u8>, len: usize) -> Result<Vec<T>> {
    let mut out = vec![T::zero(); len];
    q.download_bytes(b, bytes_of_mut(&mut out), "result")?;
    Ok(out)
}

/// A sparse operand with a row-wise kernel: CSR (csrmm, CSR scalar and vector) or ELLPACK-R
/// (ELLR-T).
#[derive(Clone, Copy)]
pub(crate) enum RowOperand<'a, T> {
    Csr(&'a Csr<T>),
    Ellr(&'a Ellr<T>),
}

/// A row operand's arrays on the device.
enum DeviceRows {
    Csr {
        offsets: DeviceBuffer<u64>,
        index: DeviceBuffer<u32>,
        vals: DeviceBuffer<u8>,
    },
    Ellr {
        padded: u64,
        lengths: DeviceBuffer<u32>,
        index: DeviceBuffer<u32>,
        vals: DeviceBuffer<u8>,
    },
}

impl<T: Scalar> RowOperand<'_, T> {
    fn nrows(&self) -> usize {
        match self {
            RowOperand::Csr(a) => a.nrows(),
            RowOperand::Ellr(a) => a.nrows(),
        }
    }

    fn upload(&self, q: &Queue<'_>) -> Result<DeviceRows> {
        Ok(match self {
            RowOperand::Csr(a) => DeviceRows::Csr {
                offsets: q.upload(a.row_offsets(), "A row offsets")?,
                index: q.upload(a.col_indices(), "A column indices")?,
                vals: q.upload(bytes_of(a.values()), "A values")?,
            },
            RowOperand::Ellr(a) => DeviceRows::Ellr {
                padded: a.padded_rows() as u64,
                lengths: q.upload(a.row_lengths(), "A row lengths")?,
                index: q.upload(a.col_indices(), "A column indices")?,
                vals: q.upload(bytes_of(a.values()), "A values")?,
            },
        })
    }
}

impl DeviceRows {
    /// Appends the arguments every row kernel takes after its sizes: `[padded,] rows, index,
    /// values`.
    fn args<'q>(&self, launch: Launch<'q>) -> Result<Launch<'q>> {
        match self {
            DeviceRows::Csr {
                offsets,
                index,
                vals,
            } => launch.arg(offsets.arg())?.arg(index.arg())?.arg(vals.arg()),
            DeviceRows::Ellr {
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

/// `y = A·x` by the ELLR-T kernel, or the CSR scalar or vector kernel (by mean row length).
pub(crate) fn spmv_rows<T: Scalar>(
    q: &Queue<'_>,
    prog: &Program,
    a: RowOperand<'_, T>,
    x: &[T],
) -> Result<Vec<T>> {
    let n = a.nrows();
    let (name, global, local) = match a {
        RowOperand::Ellr(_) => ("spmv_ellr", n * ELL_T, Some(LANE_WG)),
        RowOperand::Csr(c) if c.nnz() >= VECTOR_MIN_ROW * n as u64 => {
            ("spmv_csr_vector", n * VEC_LANES, Some(LANE_WG))
        }
        RowOperand::Csr(_) => ("spmv_csr_scalar", n, None),
    };
    let _span = tracing::info_span!("spmv", kernel = name, nrows = n).entered();
    let rows = a.upload(q)?;
    let xd = q.upload(bytes_of(x), "x")?;
    let y = q.alloc::<u8>(n * std::mem::size_of::<T>(), "y")?;
    rows.args(q.kernel(prog, name)?.arg(n as u64)?)?
        .arg(xd.arg())?
        .arg(y.arg())?
        .run(&[global], local.as_ref().map(std::slice::from_ref))?;
    download_values(q, &y, n)
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

/// Row and column strides of element (r, c) of a dense matrix: r·rs + c·cs.
fn strides<T: Scalar>(d: &Dense<T>) -> (u64, u64) {
    match d.layout() {
        Layout::RowMajor => (d.ncols() as u64, 1),
        Layout::ColMajor => (1, d.nrows() as u64),
    }
}

/// `C = A·B`, C in B's layout, by csrmm or ELLR-T.
pub(crate) fn spmm<T: Scalar>(
    q: &Queue<'_>,
    prog: &Program,
    a: RowOperand<'_, T>,
    b: &Dense<T>,
) -> Result<Dense<T>> {
    let (nrows, ncols) = (a.nrows(), b.ncols());
    let c_strides = match b.layout() {
        Layout::RowMajor => (ncols as u64, 1),
        Layout::ColMajor => (1, nrows as u64),
    };
    let b_strides = strides(b);
    let (name, global, local) = match a {
        RowOperand::Csr(_) => ("spmm_csr", [ncols, nrows], None),
        RowOperand::Ellr(_) => (
            "spmm_ellr",
            [nrows * ELL_T, ncols.div_ceil(ELL_LC)],
            Some([LANE_WG, 1]),
        ),
    };
    let _span = tracing::info_span!("spmm", kernel = name, nrows, ncols).entered();
    let rows = a.upload(q)?;
    let bd = q.upload(bytes_of(b.data()), "B")?;
    let c = q.alloc::<u8>(nrows * ncols * std::mem::size_of::<T>(), "C")?;
    let launch = q.kernel(prog, name)?.arg(nrows as u64)?.arg(ncols as u64)?;
    rows.args(launch)?
        .arg(bd.arg())?
        .arg(b_strides.0)?
        .arg(b_strides.1)?
        .arg(c.arg())?
        .arg(c_strides.0)?
        .arg(c_strides.1)?
        .run(&global, local.as_ref().map(|l| &l[..]))?;
    let data = download_values(q, &c, nrows * ncols)?;
    Ok(Dense::try_new(nrows, ncols, b.layout(), data)?)
}
