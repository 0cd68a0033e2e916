//! [`nalgebra-sparse`](::nalgebra_sparse) matrices (feature `nalgebra-sparse`): `CsrMatrix<T>` ↔
//! [`Csr`], `CscMatrix<T>` ↔ [`Csc`].
//!
//! Values move both ways (`disassemble` on theirs, `into_parts` on ours). nalgebra-sparse's
//! offsets and indices are `usize`, ours `u64` offsets and `u32` indices: those are converted,
//! and checked. Both libraries keep indices sorted without duplicates, so nothing is reordered.
//!
//! ```
//! use hetsparse_core::{Csr, ReferenceBackend, Backend, SpgemmAlgorithm};
//! use nalgebra_sparse::CsrMatrix;
//!
//! let a = CsrMatrix::try_from_csr_data(2, 2, vec![0, 1, 2], vec![1, 0], vec![2.0, 3.0])?;
//! let ours = Csr::try_from(a)?;
//! let c = ReferenceBackend.spgemm(&ours, &ours, SpgemmAlgorithm::Auto)?;
//! let back = CsrMatrix::try_from(c)?;
//! assert_eq!(back.values(), &[6.0, 6.0]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use ::nalgebra_sparse::{CscMatrix, CsrMatrix};

use super::{convert_indices, InteropError, Target};
use crate::format::{check_shape, Csc, Csr};
use crate::scalar::Scalar;

const LIBRARY: &str = "nalgebra-sparse";

/// Offsets and indices of nalgebra-sparse converted to ours.
fn ours(offsets: Vec<usize>, indices: Vec<usize>) -> Result<(Vec<u64>, Vec<u32>), InteropError> {
    let offsets = convert_indices(
        offsets,
        Target {
            library: LIBRARY,
            array: "offsets",
            type_name: "u64",
        },
        |x| u64::try_from(x).ok(),
    )?;
    let indices = convert_indices(
        indices,
        Target {
            library: LIBRARY,
            array: "indices",
            type_name: "u32",
        },
        |x| u32::try_from(x).ok(),
    )?;
    Ok((offsets, indices))
}

/// Our offsets and indices converted to nalgebra-sparse's.
fn theirs(offsets: Vec<u64>, indices: Vec<u32>) -> Result<(Vec<usize>, Vec<usize>), InteropError> {
    let offsets = convert_indices(
        offsets,
        Target {
            library: LIBRARY,
            array: "offsets",
            type_name: "usize",
        },
        |x| usize::try_from(x).ok(),
    )?;
    let indices = convert_indices(
        indices,
        Target {
            library: LIBRARY,
            array: "indices",
            type_name: "usize",
        },
        |x| usize::try_from(x).ok(),
    )?;
    Ok((offsets, indices))
}

fn rejected(e: ::nalgebra_sparse::SparseFormatError) -> InteropError {
    InteropError::Rejected {
        library: LIBRARY,
        reason: e.to_string(),
    }
}

impl<T: Scalar> TryFrom<CsrMatrix<T>> for Csr<T> {
    type Error = InteropError;

    /// Moves the values; converts offsets and column indices.
    fn try_from(m: CsrMatrix<T>) -> Result<Self, InteropError> {
        let (nrows, ncols) = (m.nrows(), m.ncols());
        check_shape("CSR", nrows, ncols)?;
        let (offsets, indices, values) = m.disassemble();
        let (offsets, indices) = ours(offsets, indices)?;
        Ok(Csr::try_new(nrows, ncols, offsets, indices, values)?)
    }
}

impl<T: Scalar> TryFrom<CscMatrix<T>> for Csc<T> {
    type Error = InteropError;

    /// Moves the values; converts offsets and row indices.
    fn try_from(m: CscMatrix<T>) -> Result<Self, InteropError> {
        let (nrows, ncols) = (m.nrows(), m.ncols());
        check_shape("CSC", nrows, ncols)?;
        let (offsets, indices, values) = m.disassemble();
        let (offsets, indices) = ours(offsets, indices)?;
        Ok(Csc::try_new(nrows, ncols, offsets, indices, values)?)
    }
}

impl<T: Scalar> TryFrom<Csr<T>> for CsrMatrix<T> {
    type Error = InteropError;

    /// Moves the values; converts offsets and column indices.
    fn try_from(a: Csr<T>) -> Result<Self, InteropError> {
        let (nrows, ncols, offsets, indices, values) = a.into_parts();
        let (offsets, indices) = theirs(offsets, indices)?;
        CsrMatrix::try_from_csr_data(nrows, ncols, offsets, indices, values).map_err(rejected)
    }
}

impl<T: Scalar> TryFrom<Csc<T>> for CscMatrix<T> {
    type Error = InteropError;

    /// Moves the values; converts offsets and row indices.
    fn try_from(a: Csc<T>) -> Result<Self, InteropError> {
        let (ncols, nrows, offsets, indices, values) = a.into_transpose().into_parts();
        let (offsets, indices) = theirs(offsets, indices)?;
        CscMatrix::try_from_csc_data(nrows, ncols, offsets, indices, values).map_err(rejected)
    }
}
