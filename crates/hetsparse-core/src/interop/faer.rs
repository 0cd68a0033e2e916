//! [`faer`](::faer) sparse matrices (feature `faer`): `SparseRowMat<I, T>` ↔ [`Csr`],
//! `SparseColMat<I, T>` ↔ [`Csc`], for every faer index type `I` (`u32`, `u64`, `usize`).
//!
//! Values move both ways when faer's arrays are compact (offsets from zero, no per-row
//! counts). faer keeps offsets and indices in one type `I`; ours are `u64` offsets and `u32`
//! indices, so with `I = u32` the indices move and the offsets are converted, with `I = u64`
//! the other way round, with `usize` both are converted.
//!
//! faer allows rows (columns) with unsorted indices; such input is sorted on the way in, and
//! repeated entries summed, as [`Csr::try_from_unsorted`] does. Sorted input is moved as it is.
//! faer needs dimensions below `I`'s signed maximum (2^31 for `u32`): a larger matrix is an
//! [`InteropError::IndexOverflow`] on the way out.
//!
//! ```
//! use faer::sparse::{SparseRowMat, SymbolicSparseRowMat};
//! use hetsparse_core::Csr;
//!
//! let a = Csr::try_new(2, 3, vec![0, 2, 3], vec![0, 2, 1], vec![1.0, 2.0, 3.0])?;
//! let f: SparseRowMat<u32, f64> = a.try_into()?;
//! assert_eq!(f.val(), &[1.0, 2.0, 3.0]);
//! let back = Csr::try_from(f)?;
//! assert_eq!(back.get(1, 1), Some(3.0));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use ::faer::sparse::{SparseColMat, SparseRowMat, SymbolicSparseColMat, SymbolicSparseRowMat};
use ::faer::Index;

use super::{convert_indices, lines_sorted, InteropError, Target};
use crate::format::{check_shape, Csc, Csr};
use crate::scalar::Scalar;

const LIBRARY: &str = "faer";

/// `(offsets, indices, values)` in hetsparse's types.
type Compressed<T> = (Vec<u64>, Vec<u32>, Vec<T>);

/// faer's compressed arrays converted to ours: `(offsets, indices, values)`, compact and from
/// zero. `counts` (faer's per-line entry counts) gathers the entries into new storage.
fn ours<I: Index + 'static, T: Scalar>(
    ptr: Vec<I>,
    counts: Option<Vec<I>>,
    idx: Vec<I>,
    val: Vec<T>,
) -> Result<Compressed<T>, InteropError> {
    let offsets = convert_indices(
        ptr,
        Target {
            library: LIBRARY,
            array: "offsets",
            type_name: "u64",
        },
        |x: I| u64::try_from(x.zx()).ok(),
    )?;
    let nmajor = offsets.len().saturating_sub(1);
    let start = offsets.first().copied().unwrap_or(0);
    let end = offsets.last().copied().unwrap_or(0);
    let compact = counts.is_none() && start == 0 && end == idx.len() as u64;
    let (offsets, idx, val) = if compact {
        (offsets, idx, val)
    } else {
        // Gather each line's live entries `offsets[i] .. offsets[i] + count[i]`.
        let counts: Vec<u64> = match counts {
            Some(c) => c.iter().map(|x| x.zx() as u64).collect(),
            None => offsets
                .windows(2)
                .map(|w| w[1].saturating_sub(w[0]))
                .collect(),
        };
        let mut new_offsets = Vec::with_capacity(nmajor + 1);
        new_offsets.push(0u64);
        let mut new_idx = Vec::new();
        let mut new_val = Vec::new();
        for (line, (&first, &count)) in offsets.iter().zip(&counts).enumerate() {
            let range = usize::try_from(first)
                .ok()
                .zip(usize::try_from(first.saturating_add(count)).ok())
                .filter(|&(s, e)| e <= idx.len() && e <= val.len() && s <= e);
            let Some((s, e)) = range else {
                return Err(InteropError::IndexOverflow {
                    library: LIBRARY,
                    array: "offsets",
                    position: line as u64,
                    value: format!("{first}+{count}"),
                    target: "the index array",
                });
            };
            new_idx.extend_from_slice(&idx[s..e]);
            new_val.extend_from_slice(&val[s..e]);
            new_offsets.push(new_idx.len() as u64);
        }
        (new_offsets, new_idx, new_val)
    };
    let indices = convert_indices(
        idx,
        Target {
            library: LIBRARY,
            array: "indices",
            type_name: "u32",
        },
        |x: I| u32::try_from(x.zx()).ok(),
    )?;
    Ok((offsets, indices, val))
}

/// Our compressed arrays converted to faer's index type, after checking faer's limits on the
/// dimensions (which it asserts).
fn theirs<I: Index + 'static>(
    nrows: usize,
    ncols: usize,
    offsets: Vec<u64>,
    indices: Vec<u32>,
) -> Result<(Vec<I>, Vec<I>), InteropError> {
    // faer requires dimensions up to the signed maximum of `I`.
    let signed_max = I::MAX.zx() >> 1;
    for (position, dim) in [nrows, ncols].into_iter().enumerate() {
        if dim > signed_max {
            return Err(InteropError::IndexOverflow {
                library: LIBRARY,
                array: "dimensions (rows, columns)",
                position: position as u64,
                value: dim.to_string(),
                target: "the signed range of faer's index type",
            });
        }
    }
    let max = I::MAX.zx();
    let fit = |x: usize| (x <= max).then(|| I::truncate(x));
    let ptr = convert_indices(
        offsets,
        Target {
            library: LIBRARY,
            array: "offsets",
            type_name: std::any::type_name::<I>(),
        },
        |x: u64| usize::try_from(x).ok().and_then(fit),
    )?;
    let idx = convert_indices(
        indices,
        Target {
            library: LIBRARY,
            array: "indices",
            type_name: std::any::type_name::<I>(),
        },
        |x: u32| usize::try_from(x).ok().and_then(fit),
    )?;
    Ok((ptr, idx))
}

impl<I: Index + 'static, T: Scalar> TryFrom<SparseRowMat<I, T>> for Csr<T> {
    type Error = InteropError;

    /// Moves the values (sorting unsorted rows, gathering rows with per-row counts).
    fn try_from(m: SparseRowMat<I, T>) -> Result<Self, InteropError> {
        let (symbolic, val) = m.into_parts();
        let (nrows, ncols, ptr, counts, idx) = symbolic.into_parts();
        check_shape("CSR", nrows, ncols)?;
        let (offsets, indices, values) = ours(ptr, counts, idx, val)?;
        if lines_sorted(&offsets, &indices) {
            Ok(Csr::try_new(nrows, ncols, offsets, indices, values)?)
        } else {
            Ok(Csr::try_from_unsorted(
                nrows, ncols, offsets, indices, values,
            )?)
        }
    }
}

impl<I: Index + 'static, T: Scalar> TryFrom<SparseColMat<I, T>> for Csc<T> {
    type Error = InteropError;

    /// Moves the values (sorting unsorted columns, gathering columns with per-column counts).
    fn try_from(m: SparseColMat<I, T>) -> Result<Self, InteropError> {
        let (symbolic, val) = m.into_parts();
        let (nrows, ncols, ptr, counts, idx) = symbolic.into_parts();
        check_shape("CSC", nrows, ncols)?;
        let (offsets, indices, values) = ours(ptr, counts, idx, val)?;
        if lines_sorted(&offsets, &indices) {
            Ok(Csc::try_new(nrows, ncols, offsets, indices, values)?)
        } else {
            Ok(Csc::try_from_unsorted(
                nrows, ncols, offsets, indices, values,
            )?)
        }
    }
}

impl<I: Index + 'static, T: Scalar> TryFrom<Csr<T>> for SparseRowMat<I, T> {
    type Error = InteropError;

    /// Moves the values; index arrays move when `I` is ours, else are converted.
    fn try_from(a: Csr<T>) -> Result<Self, InteropError> {
        let (nrows, ncols, offsets, indices, values) = a.into_parts();
        let (ptr, idx) = theirs::<I>(nrows, ncols, offsets, indices)?;
        // Our arrays are canonical and fit `I` (checked above): faer's checks pass.
        let symbolic = SymbolicSparseRowMat::new_checked(nrows, ncols, ptr, None, idx);
        Ok(SparseRowMat::new(symbolic, values))
    }
}

impl<I: Index + 'static, T: Scalar> TryFrom<Csc<T>> for SparseColMat<I, T> {
    type Error = InteropError;

    /// Moves the values; index arrays move when `I` is ours, else are converted.
    fn try_from(a: Csc<T>) -> Result<Self, InteropError> {
        let (ncols, nrows, offsets, indices, values) = a.into_transpose().into_parts();
        let (ptr, idx) = theirs::<I>(nrows, ncols, offsets, indices)?;
        // Our arrays are canonical and fit `I` (checked above): faer's checks pass.
        let symbolic = SymbolicSparseColMat::new_checked(nrows, ncols, ptr, None, idx);
        Ok(SparseColMat::new(symbolic, values))
    }
}
