//! [`ndarray`](::ndarray) arrays (feature `ndarray`): `Array2<T>` ↔ [`Dense`], and
//! `ArrayView2<T>` → [`Dense`].
//!
//! The buffer moves both ways when it holds exactly the array's elements in row-major
//! (ndarray's standard layout, our [`Layout::RowMajor`]) or column-major order (ndarray's
//! Fortran layout, our [`Layout::ColMajor`]); any other array — a strided slice, a view of part
//! of a larger buffer — is copied into a row-major [`Dense`]. A view is always copied, in its
//! own order when it is row- or column-contiguous.
//!
//! ```
//! use hetsparse_core::{Csr, Dense, Layout, ReferenceBackend, Backend};
//! use ndarray::{array, Array2};
//!
//! let a = Csr::try_new(2, 2, vec![0, 1, 2], vec![1, 0], vec![1.0, 2.0])?;
//! let b = Dense::try_from(array![[1.0, 2.0], [3.0, 4.0]])?;
//! assert_eq!(b.layout(), Layout::RowMajor);
//! let c: Array2<f64> = ReferenceBackend.spmm((&a).into(), &b)?.try_into()?;
//! assert_eq!(c, array![[3.0, 4.0], [2.0, 4.0]]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use ::ndarray::{Array2, ArrayView2, ShapeBuilder};

use super::InteropError;
use crate::format::{check_shape, Dense, Layout};
use crate::scalar::Scalar;

const LIBRARY: &str = "ndarray";

impl<T: Scalar> TryFrom<Dense<T>> for Array2<T> {
    type Error = InteropError;

    /// Moves the buffer: a row-major matrix becomes a standard-layout array, a column-major
    /// one a Fortran-layout array.
    fn try_from(d: Dense<T>) -> Result<Self, InteropError> {
        let (nrows, ncols) = d.shape();
        let layout = d.layout();
        let data = d.into_data();
        let made = match layout {
            Layout::RowMajor => Array2::from_shape_vec((nrows, ncols), data),
            Layout::ColMajor => Array2::from_shape_vec((nrows, ncols).f(), data),
        };
        made.map_err(|e| InteropError::Rejected {
            library: LIBRARY,
            reason: e.to_string(),
        })
    }
}

impl<T: Scalar> TryFrom<Array2<T>> for Dense<T> {
    type Error = InteropError;

    /// Moves the buffer of a row- or column-contiguous array that owns exactly its elements;
    /// copies any other array into row-major order.
    fn try_from(a: Array2<T>) -> Result<Self, InteropError> {
        let (nrows, ncols) = a.dim();
        check_shape("dense", nrows, ncols)?;
        let len = nrows * ncols;
        let layout = if a.is_standard_layout() {
            Some(Layout::RowMajor)
        } else if a.t().is_standard_layout() {
            Some(Layout::ColMajor)
        } else {
            None
        };
        if let Some(layout) = layout {
            let (data, offset) = a.into_raw_vec_and_offset();
            if data.len() == len && offset.unwrap_or(0) == 0 {
                return Ok(Dense::try_new(nrows, ncols, layout, data)?);
            }
            // The array was a part of its buffer: copy that part.
            let start = offset.unwrap_or(0);
            let part = data.get(start..start + len).ok_or(InteropError::Rejected {
                library: LIBRARY,
                reason: format!(
                    "a contiguous {nrows}×{ncols} array at offset {start} of a buffer of {}",
                    data.len()
                ),
            })?;
            return Ok(Dense::try_new(nrows, ncols, layout, part.to_vec())?);
        }
        Dense::try_from(a.view())
    }
}

impl<T: Scalar> TryFrom<ArrayView2<'_, T>> for Dense<T> {
    type Error = InteropError;

    /// Copies the view, in its own order when it is row- or column-contiguous, else in
    /// row-major order.
    fn try_from(a: ArrayView2<'_, T>) -> Result<Self, InteropError> {
        let (nrows, ncols) = a.dim();
        check_shape("dense", nrows, ncols)?;
        if let Some(s) = a.as_slice() {
            return Ok(Dense::try_new(nrows, ncols, Layout::RowMajor, s.to_vec())?);
        }
        if let Some(s) = a.t().as_slice() {
            return Ok(Dense::try_new(nrows, ncols, Layout::ColMajor, s.to_vec())?);
        }
        let data: Vec<T> = a.iter().copied().collect();
        Ok(Dense::try_new(nrows, ncols, Layout::RowMajor, data)?)
    }
}
