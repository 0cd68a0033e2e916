//! [`sprs`](::sprs) matrices (feature `sprs`): `CsMatI<T, I, Iptr>` ↔ [`Csr`] and [`Csc`].
//!
//! A `CsMatI` carries its storage order at run time. Converting into [`Csr`] moves a CSR-stored
//! matrix and transposes a CSC-stored one (a copy of the arrays); into [`Csc`] the other way
//! round. Going out, [`Csr`] becomes a CSR-stored and [`Csc`] a CSC-stored `CsMatI`.
//!
//! Values always move. Index arrays move when the index types are ours —
//! `CsMatI<T, u32, u64>` moves everything — and are converted otherwise (the usual
//! `CsMat<T> = CsMatI<T, usize>` converts offsets and indices).
//!
//! ```
//! use hetsparse_core::{Csr, ReferenceBackend, Backend, SpgemmAlgorithm};
//! use sprs::{CsMat, CsMatI};
//!
//! let a: CsMat<f64> = CsMat::new((2, 3), vec![0, 2, 3], vec![0, 2, 1], vec![1.0, 2.0, 3.0]);
//! let ours = Csr::try_from(a)?;
//! let c = ReferenceBackend.spgemm(&ours, &ours.transpose()?, SpgemmAlgorithm::Auto)?;
//! let back: CsMat<f64> = c.try_into()?;
//! assert_eq!(back.get(0, 0), Some(&5.0));
//!
//! // With hetsparse's index types, nothing is copied.
//! let same: CsMatI<f64, u32, u64> = ours.try_into()?;
//! assert_eq!(same.nnz(), 3);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use ::sprs::{CompressedStorage, CsMatI, SpIndex};

use super::{convert_indices, InteropError, Target};
use crate::format::{check_shape, Csc, Csr};
use crate::scalar::Scalar;

const LIBRARY: &str = "sprs";

/// `(outer, inner, offsets, indices, values)` of a compressed matrix, offsets from zero.
type Parts<T> = (usize, usize, Vec<u64>, Vec<u32>, Vec<T>);

/// Takes the arrays of `m` in its own storage order, converted to hetsparse's index types.
fn take_parts<T, I, Iptr>(m: CsMatI<T, I, Iptr>) -> Result<Parts<T>, InteropError>
where
    T: Scalar,
    I: SpIndex + 'static,
    Iptr: SpIndex + 'static,
{
    let (outer, inner) = (m.outer_dims(), m.inner_dims());
    let format = if m.is_csr() { "CSR" } else { "CSC" };
    let (nrows, ncols) = m.shape();
    check_shape(format, nrows, ncols)?;
    let (indptr, mut indices, mut data) = m.into_raw_storage();
    let mut offsets = convert_indices(
        indptr,
        Target {
            library: LIBRARY,
            array: "offsets",
            type_name: "u64",
        },
        |x: Iptr| x.try_index().map(|v| v as u64),
    )?;
    // A sprs offset array may start past zero (a matrix cut from a larger one): keep the part
    // it covers.
    if let (Some(&first), Some(&last)) = (offsets.first(), offsets.last()) {
        if first != 0 {
            let (first, last) = (first as usize, last as usize);
            if first <= last && last <= indices.len() && last <= data.len() {
                indices.truncate(last);
                data.truncate(last);
                indices.drain(..first);
                data.drain(..first);
                offsets.iter_mut().for_each(|o| *o -= first as u64);
            }
        }
    }
    let indices = convert_indices(
        indices,
        Target {
            library: LIBRARY,
            array: "indices",
            type_name: "u32",
        },
        |x: I| x.try_index().and_then(|v| u32::try_from(v).ok()),
    )?;
    Ok((outer, inner, offsets, indices, data))
}

/// Builds a `CsMatI` in the given storage from hetsparse's arrays.
fn build<T, I, Iptr>(
    storage: CompressedStorage,
    shape: (usize, usize),
    offsets: Vec<u64>,
    indices: Vec<u32>,
    values: Vec<T>,
) -> Result<CsMatI<T, I, Iptr>, InteropError>
where
    T: Scalar,
    I: SpIndex + 'static,
    Iptr: SpIndex + 'static,
{
    let indptr = convert_indices(
        offsets,
        Target {
            library: LIBRARY,
            array: "offsets",
            type_name: std::any::type_name::<Iptr>(),
        },
        |x: u64| usize::try_from(x).ok().and_then(Iptr::try_from_usize),
    )?;
    let indices = convert_indices(
        indices,
        Target {
            library: LIBRARY,
            array: "indices",
            type_name: std::any::type_name::<I>(),
        },
        |x: u32| I::try_from_usize(x as usize),
    )?;
    let made = match storage {
        CompressedStorage::CSR => CsMatI::try_new(shape, indptr, indices, values),
        CompressedStorage::CSC => CsMatI::try_new_csc(shape, indptr, indices, values),
    };
    made.map_err(|(_, _, _, e)| InteropError::Rejected {
        library: LIBRARY,
        reason: e.to_string(),
    })
}

impl<T, I, Iptr> TryFrom<CsMatI<T, I, Iptr>> for Csr<T>
where
    T: Scalar,
    I: SpIndex + 'static,
    Iptr: SpIndex + 'static,
{
    type Error = InteropError;

    /// Moves a CSR-stored matrix; transposes a CSC-stored one into CSR.
    fn try_from(m: CsMatI<T, I, Iptr>) -> Result<Self, InteropError> {
        if m.is_csr() {
            let (nrows, ncols, offsets, indices, values) = take_parts(m)?;
            Ok(Csr::try_new(nrows, ncols, offsets, indices, values)?)
        } else {
            Ok(Csc::try_from(m)?.to_csr()?)
        }
    }
}

impl<T, I, Iptr> TryFrom<CsMatI<T, I, Iptr>> for Csc<T>
where
    T: Scalar,
    I: SpIndex + 'static,
    Iptr: SpIndex + 'static,
{
    type Error = InteropError;

    /// Moves a CSC-stored matrix; transposes a CSR-stored one into CSC.
    fn try_from(m: CsMatI<T, I, Iptr>) -> Result<Self, InteropError> {
        if m.is_csc() {
            let (ncols, nrows, offsets, indices, values) = take_parts(m)?;
            Ok(Csc::try_new(nrows, ncols, offsets, indices, values)?)
        } else {
            Ok(Csc::from_csr(&Csr::try_from(m)?)?)
        }
    }
}

impl<T, I, Iptr> TryFrom<Csr<T>> for CsMatI<T, I, Iptr>
where
    T: Scalar,
    I: SpIndex + 'static,
    Iptr: SpIndex + 'static,
{
    type Error = InteropError;

    /// A CSR-stored `CsMatI`; values move, index arrays move or are converted.
    fn try_from(a: Csr<T>) -> Result<Self, InteropError> {
        let (nrows, ncols, offsets, indices, values) = a.into_parts();
        build(
            CompressedStorage::CSR,
            (nrows, ncols),
            offsets,
            indices,
            values,
        )
    }
}

impl<T, I, Iptr> TryFrom<Csc<T>> for CsMatI<T, I, Iptr>
where
    T: Scalar,
    I: SpIndex + 'static,
    Iptr: SpIndex + 'static,
{
    type Error = InteropError;

    /// A CSC-stored `CsMatI`; values move, index arrays move or are converted.
    fn try_from(a: Csc<T>) -> Result<Self, InteropError> {
        let (ncols, nrows, offsets, indices, values) = a.into_transpose().into_parts();
        build(
            CompressedStorage::CSC,
            (nrows, ncols),
            offsets,
            indices,
            values,
        )
    }
}
