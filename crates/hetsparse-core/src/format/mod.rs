//! Sparse and dense matrix formats.
//!
//! Every format has a validating constructor that returns [`FormatError`] naming the problem and
//! where, accessors, and conversion to and from [`Csr`], the format every operation understands.
//! Indices along a dimension are `u32`, so dimensions are at most [`MAX_DIMENSION`]; offsets and
//! entry counts are `u64`, so a matrix may hold more than 2^32 entries.

mod bsr;
mod coo;
mod cspr;
mod csr;
mod dense;
mod dia;
mod ellr;
mod host_array;
mod spliced;

use std::borrow::Cow;

pub use bsr::Bsr;
pub use coo::Coo;
pub use cspr::Cspr;
pub use csr::{Csc, Csr};
pub use dense::{Dense, Layout};
pub use dia::{Dia, DiaRowBlock};
pub use ellr::{Ellr, ELLR_ROW_ALIGN};
pub use host_array::HostArray;
pub use spliced::SplicedCsr;

use crate::error::{Error, FormatError};
use crate::scalar::Scalar;

/// Largest number of rows or columns: indices are `u32`.
pub const MAX_DIMENSION: usize = u32::MAX as usize;

/// The sparse formats hetsparse stores.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SparseFormat {
    /// Compressed sparse rows.
    Csr,
    /// Compressed sparse columns.
    Csc,
    /// Coordinate triplets.
    Coo,
    /// Diagonals (band matrices).
    Dia,
    /// ELLPACK-R.
    Ellr,
    /// CSPR: one 64-bit linear index per entry.
    Cspr,
    /// Block CSR with fixed dense blocks.
    Bsr,
}

impl SparseFormat {
    /// Every sparse format, in a fixed order.
    pub const ALL: [SparseFormat; 7] = [
        SparseFormat::Csr,
        SparseFormat::Csc,
        SparseFormat::Coo,
        SparseFormat::Dia,
        SparseFormat::Ellr,
        SparseFormat::Cspr,
        SparseFormat::Bsr,
    ];
}

impl std::fmt::Display for SparseFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SparseFormat::Csr => "CSR",
            SparseFormat::Csc => "CSC",
            SparseFormat::Coo => "COO",
            SparseFormat::Dia => "DIA",
            SparseFormat::Ellr => "ELLPACK-R",
            SparseFormat::Cspr => "CSPR",
            SparseFormat::Bsr => "BSR",
        })
    }
}

/// A borrowed sparse matrix of any format: the operand type of SpMV and SpMM.
#[derive(Clone, Copy, Debug)]
pub enum SparseRef<'a, T> {
    /// CSR.
    Csr(&'a Csr<T>),
    /// CSC.
    Csc(&'a Csc<T>),
    /// COO.
    Coo(&'a Coo<T>),
    /// DIA.
    Dia(&'a Dia<T>),
    /// ELLPACK-R.
    Ellr(&'a Ellr<T>),
    /// CSPR.
    Cspr(&'a Cspr<T>),
    /// BSR.
    Bsr(&'a Bsr<T>),
}

impl<'a, T: Scalar> SparseRef<'a, T> {
    /// The format of the matrix.
    pub fn format(&self) -> SparseFormat {
        match self {
            SparseRef::Csr(_) => SparseFormat::Csr,
            SparseRef::Csc(_) => SparseFormat::Csc,
            SparseRef::Coo(_) => SparseFormat::Coo,
            SparseRef::Dia(_) => SparseFormat::Dia,
            SparseRef::Ellr(_) => SparseFormat::Ellr,
            SparseRef::Cspr(_) => SparseFormat::Cspr,
            SparseRef::Bsr(_) => SparseFormat::Bsr,
        }
    }

    /// `(rows, columns)`.
    pub fn shape(&self) -> (usize, usize) {
        match self {
            SparseRef::Csr(m) => m.shape(),
            SparseRef::Csc(m) => m.shape(),
            SparseRef::Coo(m) => m.shape(),
            SparseRef::Dia(m) => m.shape(),
            SparseRef::Ellr(m) => m.shape(),
            SparseRef::Cspr(m) => m.shape(),
            SparseRef::Bsr(m) => m.shape(),
        }
    }

    /// The matrix as CSR, borrowed when it already is; [`Error::OutOfMemory`] when the host
    /// cannot hold the copy (its `rows + 1` row offsets are sized by the shape, not the entries).
    /// DIA and BSR keep the non-zero values of their bands and blocks: a zero there is padding.
    pub fn to_csr(&self) -> Result<Cow<'a, Csr<T>>, Error> {
        Ok(match *self {
            SparseRef::Csr(m) => Cow::Borrowed(m),
            SparseRef::Csc(m) => Cow::Owned(m.to_csr()?),
            SparseRef::Coo(m) => Cow::Owned(m.to_csr()?),
            SparseRef::Dia(m) => Cow::Owned(m.to_csr()?),
            SparseRef::Ellr(m) => Cow::Owned(m.to_csr()?),
            SparseRef::Cspr(m) => Cow::Owned(m.to_csr()?),
            SparseRef::Bsr(m) => Cow::Owned(m.to_csr()?),
        })
    }
}

macro_rules! sparse_ref_from {
    ($($ty:ident),*) => {$(
        impl<'a, T> From<&'a $ty<T>> for SparseRef<'a, T> {
            fn from(m: &'a $ty<T>) -> Self {
                SparseRef::$ty(m)
            }
        }
    )*};
}
sparse_ref_from!(Csr, Csc, Coo, Dia, Ellr, Cspr, Bsr);

/// Checks that a shape fits the index types.
pub(crate) fn check_shape(
    format: &'static str,
    nrows: usize,
    ncols: usize,
) -> Result<(), FormatError> {
    if nrows > MAX_DIMENSION || ncols > MAX_DIMENSION {
        return Err(FormatError::ShapeOverflow {
            format,
            nrows: nrows as u64,
            ncols: ncols as u64,
            reason: "dimensions are limited to u32::MAX because indices are u32",
        });
    }
    Ok(())
}

pub(crate) fn check_len(
    format: &'static str,
    array: &'static str,
    expected: u64,
    found: usize,
) -> Result<(), FormatError> {
    if expected != found as u64 {
        return Err(FormatError::LengthMismatch {
            format,
            array,
            expected,
            found: found as u64,
        });
    }
    Ok(())
}

/// Names used in errors for a compressed format (CSR, CSC, BSR).
#[derive(Clone, Copy)]
pub(crate) struct CompressedNames {
    pub format: &'static str,
    pub major: &'static str,
    pub minor: &'static str,
}

/// Entries (and, for offsets, positions) per parallel piece of a validation.
const VALIDATION_PIECE: usize = 1 << 16;

/// Validates offsets (length, ends, monotone) and minor indices (bounds; strictly increasing
/// within a line when `canonical`), reading them only. Large matrices are checked in parallel,
/// in pieces of whole lines of about [`VALIDATION_PIECE`] entries, each piece first in one
/// pass without early exits (which vectorises) and, only where that finds a fault, line by
/// line to say which; the first fault in order is reported, as a serial check would.
pub(crate) fn validate_compressed(
    names: CompressedNames,
    nmajor: usize,
    nminor: usize,
    offsets: &[u64],
    indices: &[u32],
    canonical: bool,
) -> Result<(), FormatError> {
    use rayon::prelude::*;
    let format = names.format;
    check_len(format, "offsets", nmajor as u64 + 1, offsets.len())?;
    let nnz = indices.len() as u64;
    let (first, last) = (offsets[0], offsets[nmajor]);
    if first != 0 || last != nnz {
        return Err(FormatError::OffsetsEnds {
            format,
            first,
            last,
            nnz,
        });
    }
    let parallel = nnz >= VALIDATION_PIECE as u64 || nmajor >= VALIDATION_PIECE;
    let decrease_in = |start: usize, end: usize| {
        let piece = &offsets[start..end];
        // One pass without an early exit (which vectorises), the position only on a fault.
        let next = piece.get(1..).unwrap_or(&[]);
        let any = piece
            .iter()
            .zip(next)
            .fold(false, |any, (&o, &p)| any | (o > p));
        any.then(|| piece.windows(2).position(|w| w[0] > w[1]))
            .flatten()
            .map(|p| start + p)
    };
    let decrease = if parallel {
        (0..offsets.len().div_ceil(VALIDATION_PIECE))
            .into_par_iter()
            .map(|c| {
                let start = c * VALIDATION_PIECE;
                decrease_in(start, (start + VALIDATION_PIECE + 1).min(offsets.len()))
            })
            .find_first(Option::is_some)
            .flatten()
    } else {
        decrease_in(0, offsets.len())
    };
    if let Some(p) = decrease {
        return Err(FormatError::OffsetsNotMonotone {
            format,
            position: p as u64 + 1,
            previous: offsets[p],
            next: offsets[p + 1],
        });
    }
    // From here on, offsets run from 0 to nnz without decreasing: every line is in bounds.
    let check_line = |line: usize| -> Result<(), FormatError> {
        let (s, e) = (offsets[line] as usize, offsets[line + 1] as usize);
        let mut prev: Option<u32> = None;
        for (k, &j) in indices[s..e].iter().enumerate() {
            if j as usize >= nminor {
                return Err(FormatError::IndexOutOfBounds {
                    format,
                    axis: names.minor,
                    position: (s + k) as u64,
                    index: u64::from(j),
                    bound: nminor as u64,
                });
            }
            if let (true, Some(p)) = (canonical, prev) {
                if j == p {
                    let (row, col) = if names.major == "row" || names.major == "block row" {
                        (line as u64, u64::from(j))
                    } else {
                        (u64::from(j), line as u64)
                    };
                    return Err(FormatError::Duplicate {
                        format,
                        row,
                        col,
                        position: (s + k) as u64,
                    });
                }
                if j < p {
                    return Err(FormatError::Unsorted {
                        format,
                        axis: names.major,
                        line: line as u64,
                        position: (s + k) as u64,
                        previous: u64::from(p),
                        next: u64::from(j),
                    });
                }
            }
            prev = Some(j);
        }
        Ok(())
    };
    let check_lines = |lines: std::ops::Range<usize>| -> Result<(), FormatError> {
        let (s, e) = (offsets[lines.start] as usize, offsets[lines.end] as usize);
        let piece = &indices[s..e];
        // Over the piece's entries as one run, no line by line: the largest index, and the
        // pairs of neighbours that do not increase. Each line start that follows a non-empty
        // line is such a pair when the lines' indices happen to fall there; only pairs
        // inside a line are faults.
        let largest = piece.iter().copied().max().map_or(0, |j| j as usize);
        let mut fault = largest >= nminor;
        if canonical && !fault {
            let next = piece.get(1..).unwrap_or(&[]);
            let not_increasing = piece
                .iter()
                .zip(next)
                .map(|(&j, &k)| usize::from(j >= k))
                .sum::<usize>();
            let mut at_line_starts = 0;
            if not_increasing > 0 {
                for line in lines.start + 1..lines.end {
                    let (prev, start) = (offsets[line - 1] as usize, offsets[line] as usize);
                    if prev < start && start < e {
                        at_line_starts += usize::from(indices[start - 1] >= indices[start]);
                    }
                }
            }
            fault = not_increasing > at_line_starts;
        }
        if fault {
            lines.into_iter().try_for_each(check_line)
        } else {
            Ok(())
        }
    };
    if !parallel {
        return check_lines(0..nmajor);
    }
    // Pieces end at the first line end at or past the next cut, or after VALIDATION_PIECE
    // lines.
    let mut bounds = vec![0usize];
    let mut next_cut = VALIDATION_PIECE as u64;
    while let Some(&start) = bounds.last().filter(|&&l| l < nmajor) {
        let end = offsets
            .partition_point(|&o| o < next_cut)
            .clamp(start + 1, (start + VALIDATION_PIECE).min(nmajor));
        bounds.push(end);
        next_cut = offsets[end] + VALIDATION_PIECE as u64;
    }
    bounds
        .par_windows(2)
        .map(|w| check_lines(w[0]..w[1]))
        .find_first(Result::is_err)
        .unwrap_or(Ok(()))
}

/// Sorts each line of a compressed matrix by minor index and sums duplicates, in place; returns
/// the compacted offsets. Offsets and bounds must already be valid.
pub(crate) fn sort_and_sum_lines<T: Scalar>(
    offsets: &[u64],
    indices: &mut Vec<u32>,
    values: &mut Vec<T>,
) -> Vec<u64> {
    let nmajor = offsets.len() - 1;
    let mut new_offsets = Vec::with_capacity(offsets.len());
    new_offsets.push(0u64);
    let mut write = 0usize;
    let mut pairs: Vec<(u32, T)> = Vec::new();
    for line in 0..nmajor {
        let (s, e) = (offsets[line] as usize, offsets[line + 1] as usize);
        pairs.clear();
        pairs.extend(
            indices[s..e]
                .iter()
                .copied()
                .zip(values[s..e].iter().copied()),
        );
        pairs.sort_by_key(|p| p.0);
        let mut k = 0;
        while k < pairs.len() {
            let j = pairs[k].0;
            let mut acc = pairs[k].1.to_acc();
            k += 1;
            while k < pairs.len() && pairs[k].0 == j {
                acc += pairs[k].1.to_acc();
                k += 1;
            }
            indices[write] = j;
            values[write] = T::from_acc(acc);
            write += 1;
        }
        new_offsets.push(write as u64);
    }
    indices.truncate(write);
    values.truncate(write);
    new_offsets
}
