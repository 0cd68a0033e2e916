//! Conversions to and from other Rust matrix libraries, one module and one Cargo feature each:
//!
//! | feature | module | hetsparse type | their type |
//! |---|---|---|---|
//! | `sprs` | [`sprs`](self::sprs) | [`Csr`](crate::Csr), [`Csc`](crate::Csc) | `CsMatI<T, I, Iptr>` (any index types, CSR or CSC storage) |
//! | `nalgebra-sparse` | [`nalgebra_sparse`](self::nalgebra_sparse) | [`Csr`](crate::Csr), [`Csc`](crate::Csc) | `CsrMatrix<T>`, `CscMatrix<T>` |
//! | `faer` | [`faer`](self::faer) | [`Csr`](crate::Csr), [`Csc`](crate::Csc) | `SparseRowMat<I, T>`, `SparseColMat<I, T>` |
//! | `ndarray` | [`ndarray`](self::ndarray) | [`Dense`](crate::Dense) | `Array2<T>` (and from `ArrayView2<T>`) |
//!
//! Every conversion is a [`TryFrom`] impl (so `try_into()` works too), owned in both directions,
//! for every [`Scalar`](crate::Scalar) type: `f32`, `f64`, `Complex<f32>`, `Complex<f64>` and the
//! storage-only `f16`/`bf16` (the other libraries store any element type; their arithmetic
//! covers fewer).
//!
//! # What moves and what is converted
//!
//! * **Values always move**: the `Vec<T>` of values changes hands without a copy, both ways,
//!   when the source is compact (a `faer` matrix with per-row counts, an `ndarray` array that is
//!   a slice of a larger buffer or neither row- nor column-contiguous, are gathered into new
//!   storage).
//! * **Index arrays move when their element types are the same** as ours — `u64` offsets and
//!   `u32` indices, e.g. `sprs::CsMatI<T, u32, u64>`, faer's `SparseRowMat<u32, T>` (indices
//!   move, offsets are converted) — and are converted element by element otherwise (`usize`
//!   indices, the default of all three libraries). Conversion checks every value.
//! * A dense `Dense` ↔ `Array2` moves its buffer in both layouts: row-major is ndarray's
//!   standard layout, column-major its Fortran layout.
//!
//! # Validation
//!
//! What comes in is checked as if built by [`Csr::try_new`](crate::Csr::try_new): shapes past
//! [`MAX_DIMENSION`](crate::format::MAX_DIMENSION), indices out of bounds or past `u32`, offsets
//! that do not fit, are an [`InteropError`] that names the library, the array and the
//! position. `sprs` and `nalgebra-sparse` matrices are always sorted without duplicates. faer
//! allows unsorted rows (its `new_unsorted_checked`): such input is canonicalised as
//! [`Csr::try_from_unsorted`](crate::Csr::try_from_unsorted) does — each row sorted, repeated
//! entries summed — since a faer matrix with unsorted rows is a valid matrix, not a mistake.
//! Explicit zeros are kept both ways. Nothing panics on bad input.
//!
//! A conversion the other library refuses (its own limits, e.g. faer's `u32` index needs
//! dimensions below 2^31) is [`InteropError::Rejected`] or [`InteropError::IndexOverflow`].

use std::any::Any;
use std::fmt::Debug;

use crate::error::FormatError;

#[cfg(feature = "faer")]
pub mod faer;
#[cfg(feature = "nalgebra-sparse")]
pub mod nalgebra_sparse;
#[cfg(feature = "ndarray")]
pub mod ndarray;
#[cfg(feature = "sprs")]
pub mod sprs;

/// Why a matrix could not be converted to or from another library's type.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InteropError {
    /// The arrays break an invariant of the hetsparse format being built (shape past
    /// [`MAX_DIMENSION`](crate::format::MAX_DIMENSION), an index out of bounds, ...).
    #[error(transparent)]
    Format(#[from] FormatError),
    /// An index, offset or dimension does not fit the target's index type.
    #[error("{library}: {array} value {value} at position {position} does not fit in {target}")]
    IndexOverflow {
        /// The other library.
        library: &'static str,
        /// Which array (`row offsets`, `column indices`, `dimensions`, ...).
        array: &'static str,
        /// Position in that array.
        position: u64,
        /// The value, as written by its type's `Debug` (it may be negative).
        value: String,
        /// The type it had to fit in.
        target: &'static str,
    },
    /// A step of the conversion failed: the transposition that a change of storage order needs
    /// (CSC-stored input to [`Csr`](crate::Csr), ...) when the host cannot hold it.
    #[error(transparent)]
    Hetsparse(#[from] crate::error::Error),
    /// The other library's constructor refused the arrays.
    #[error("{library} rejected the matrix: {reason}")]
    Rejected {
        /// The other library.
        library: &'static str,
        /// What it said.
        reason: String,
    },
}

/// Where an index array is going, for error messages.
#[cfg_attr(
    not(any(feature = "sprs", feature = "nalgebra-sparse", feature = "faer")),
    allow(dead_code)
)]
#[derive(Clone, Copy)]
pub(crate) struct Target {
    pub library: &'static str,
    pub array: &'static str,
    pub type_name: &'static str,
}

/// Converts every element of `v` with `f`, or moves `v` unchanged when `A` and `B` are the same
/// type (every value then fits). The first value `f` refuses is an
/// [`InteropError::IndexOverflow`] at its position.
#[cfg_attr(
    not(any(feature = "sprs", feature = "nalgebra-sparse", feature = "faer")),
    allow(dead_code)
)]
pub(crate) fn convert_indices<A, B>(
    v: Vec<A>,
    target: Target,
    f: impl Fn(A) -> Option<B>,
) -> Result<Vec<B>, InteropError>
where
    A: Copy + Debug + 'static,
    B: 'static,
{
    let mut slot = Some(v);
    if let Some(same) = (&mut slot as &mut dyn Any).downcast_mut::<Option<Vec<B>>>() {
        if let Some(moved) = same.take() {
            return Ok(moved);
        }
    }
    let v = slot.unwrap_or_default();
    let mut out = Vec::new();
    out.try_reserve_exact(v.len())
        .map_err(|_| InteropError::Rejected {
            library: target.library,
            reason: format!(
                "the host cannot hold {} converted {}",
                v.len(),
                target.array
            ),
        })?;
    for (position, &x) in v.iter().enumerate() {
        match f(x) {
            Some(y) => out.push(y),
            None => {
                return Err(InteropError::IndexOverflow {
                    library: target.library,
                    array: target.array,
                    position: position as u64,
                    value: format!("{x:?}"),
                    target: target.type_name,
                })
            }
        }
    }
    Ok(out)
}

/// Whether every line `offsets[i]..offsets[i + 1]` of `indices` is strictly increasing.
/// Offsets must already be in bounds.
#[cfg_attr(not(feature = "faer"), allow(dead_code))]
pub(crate) fn lines_sorted(offsets: &[u64], indices: &[u32]) -> bool {
    offsets.windows(2).all(|w| {
        let (s, e) = (w[0] as usize, w[1] as usize);
        indices
            .get(s..e)
            .is_none_or(|line| line.windows(2).all(|p| p[0] < p[1]))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Target = Target {
        library: "test",
        array: "indices",
        type_name: "u32",
    };

    #[test]
    fn same_type_moves_the_buffer() {
        let v: Vec<u32> = vec![1, 2, 3];
        let ptr = v.as_ptr();
        let out = convert_indices(v, T, Some).unwrap();
        assert_eq!(out.as_ptr(), ptr);
    }

    #[test]
    fn conversion_reports_the_first_misfit() {
        let v: Vec<usize> = vec![1, 2, usize::MAX];
        let e = convert_indices(v, T, |x| u32::try_from(x).ok()).unwrap_err();
        assert!(matches!(e, InteropError::IndexOverflow { position: 2, .. }));
        assert!(e.to_string().contains("position 2"), "{e}");
    }

    #[test]
    fn sortedness_of_lines() {
        assert!(lines_sorted(&[0, 2, 2, 3], &[0, 5, 1]));
        assert!(!lines_sorted(&[0, 2, 3], &[5, 0, 1]));
        assert!(!lines_sorted(&[0, 2], &[1, 1]));
    }
}
