//! scipy.sparse arrays in, hetsparse matrices out, and back.
//!
//! A canonical CSR or CSC operand (indices sorted and unique in each line, as scipy's own
//! products leave them) is read in place: hetsparse's matrices take `u64` row offsets, `u32`
//! indices and values of the compute dtype as [`HostArray`]s, which may be NumPy's memory. So
//! `int64` offsets are NumPy's (the same bits once checked non-negative), `int32` ones are
//! widened (only `rows + 1` of them); `int32` indices are NumPy's (the same bits once checked
//! to lie in `0..columns`), `int64` ones are narrowed into a vector of ours; values are
//! NumPy's. [`Csr::try_from_arrays`] then checks every invariant in one parallel pass that only
//! reads. An operand it rejects (unsorted or repeated indices, which scipy allows, or a
//! malformed one) takes the copying path: indices converted and checked in one parallel pass,
//! values copied, lines sorted and repeats summed, faults reported in NumPy's terms. COO
//! operands are always converted.
//!
//! NumPy's memory is read while the GIL is released. It is kept alive by references to the
//! arrays ([`NumpyArrays`], held by the matrices that read them) and kept from writers in this
//! process that follow NumPy's borrow rules by read-only borrows (`PyReadonlyArray`) that the
//! caller holds for the whole call; that no borrowed matrix outlives the call is checked
//! ([`View::released`]). Python code that writes an operand's arrays from another thread
//! during a call is not supported (as with scipy's own products): the result is undefined.
//!
//! Results go the other way without copying values: NumPy takes ownership of the vectors.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use hetsparse::{Coo, Csc, Csr, HostArray, Scalar};
use numpy::{PyArray1, PyArrayMethods, PyReadonlyArray1};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use rayon::prelude::*;

use crate::errors::{to_py, value};

/// How scipy stores an operand.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// `indptr` over rows, column `indices`.
    Csr,
    /// `indptr` over columns, row `indices`.
    Csc,
    /// `row` and `col` per entry.
    Coo,
}

/// A scipy index array, borrowed.
pub enum Index<'py> {
    /// `int32` indices.
    I32(PyReadonlyArray1<'py, i32>),
    /// `int64` indices.
    I64(PyReadonlyArray1<'py, i64>),
}

/// The contents of an [`Index`], for use with the GIL released.
#[derive(Clone, Copy)]
pub enum IndexSlice<'a> {
    /// `int32` indices.
    I32(&'a [i32]),
    /// `int64` indices.
    I64(&'a [i64]),
}

impl IndexSlice<'_> {
    fn len(&self) -> usize {
        match self {
            IndexSlice::I32(s) => s.len(),
            IndexSlice::I64(s) => s.len(),
        }
    }
    fn get(&self, k: usize) -> i64 {
        match self {
            IndexSlice::I32(s) => i64::from(s[k]),
            IndexSlice::I64(s) => s[k],
        }
    }
}

impl<'py> Index<'py> {
    fn extract(obj: &Bound<'py, PyAny>, what: &str) -> PyResult<Self> {
        if let Ok(a) = obj.downcast::<PyArray1<i32>>() {
            Ok(Index::I32(a.try_readonly().map_err(|_| busy(what))?))
        } else if let Ok(a) = obj.downcast::<PyArray1<i64>>() {
            Ok(Index::I64(a.try_readonly().map_err(|_| busy(what))?))
        } else {
            Err(PyTypeError::new_err(format!(
                "{what} must be a one-dimensional int32 or int64 NumPy array"
            )))
        }
    }

    /// A new reference to the array (the GIL is held: `'py`).
    fn reference(&self) -> Py<PyAny> {
        match self {
            Index::I32(a) => a.as_any().clone().unbind(),
            Index::I64(a) => a.as_any().clone().unbind(),
        }
    }

    fn slice(&self, what: &str) -> PyResult<IndexSlice<'_>> {
        Ok(match self {
            Index::I32(a) => IndexSlice::I32(contents(a, what)?),
            Index::I64(a) => IndexSlice::I64(contents(a, what)?),
        })
    }
}

/// The elements of a contiguous, aligned array (`ValueError` for another: the Python layer
/// passes only such arrays, copying others).
pub fn contents<'a, X: numpy::Element, D: numpy::ndarray::Dimension>(
    array: &'a numpy::PyReadonlyArray<'_, X, D>,
    what: &str,
) -> PyResult<&'a [X]> {
    if !array.data().cast_const().is_aligned() {
        return Err(value(format!("{what} is not aligned")));
    }
    array
        .as_slice()
        .map_err(|_| value(format!("{what} is not contiguous")))
}

/// One sparse operand as the Python layer hands it over:
/// `(format, nrows, ncols, major, minor, data)`, where `major, minor` are `indptr, indices`
/// (CSR, CSC) or `row, col` (COO).
pub struct Parts<'py> {
    /// How the arrays are to be read.
    pub format: Format,
    /// Rows.
    pub nrows: usize,
    /// Columns.
    pub ncols: usize,
    major: Index<'py>,
    minor: Index<'py>,
    /// The values, of any dtype (checked where the scalar type is known).
    pub data: Bound<'py, PyAny>,
}

impl<'py> Parts<'py> {
    /// Reads the tuple `(format, nrows, ncols, major, minor, data)`; `name` names the operand
    /// in errors.
    pub fn extract(tuple: &Bound<'py, PyTuple>, name: &str) -> PyResult<Self> {
        if tuple.len() != 6 {
            return Err(value(format!(
                "{name}: expected (format, nrows, ncols, major, minor, data)"
            )));
        }
        let format = match tuple.get_item(0)?.extract::<String>()?.as_str() {
            "csr" => Format::Csr,
            "csc" => Format::Csc,
            "coo" => Format::Coo,
            other => {
                return Err(value(format!(
                    "{name}: format `{other}` is not csr, csc or coo"
                )))
            }
        };
        let nrows = tuple.get_item(1)?.extract::<i64>()?;
        let ncols = tuple.get_item(2)?.extract::<i64>()?;
        let dim = |d: i64| {
            usize::try_from(d)
                .map_err(|_| value(format!("{name}: shape ({nrows}, {ncols}) is negative")))
        };
        Ok(Parts {
            format,
            nrows: dim(nrows)?,
            ncols: dim(ncols)?,
            major: Index::extract(&tuple.get_item(3)?, &format!("{name}: indptr or row"))?,
            minor: Index::extract(&tuple.get_item(4)?, &format!("{name}: indices or col"))?,
            data: tuple.get_item(5)?,
        })
    }

    /// Borrows the arrays for a computation without the GIL (`data`, from [`Parts::data`], is
    /// the data as the compute dtype). The read-only borrows (`self`'s and `data`) must be held
    /// until the view is dropped: matrices made from the view read the arrays in place.
    pub fn view<'a, T: Scalar + numpy::Element>(
        &'a self,
        data: &'a PyReadonlyArray1<'py, T>,
    ) -> PyResult<View<'a, T>> {
        Ok(View {
            format: self.format,
            nrows: self.nrows,
            ncols: self.ncols,
            major: self.major.slice("indptr")?,
            minor: self.minor.slice("indices")?,
            data: contents(data, "data")?,
            arrays: Arc::new(NumpyArrays {
                _references: [
                    self.major.reference(),
                    self.minor.reference(),
                    data.as_any().clone().unbind(),
                ],
            }),
        })
    }

    /// The data as a `T` array (`TypeError` when it holds another dtype).
    pub fn data<T: numpy::Element>(&self, name: &str) -> PyResult<PyReadonlyArray1<'py, T>> {
        self.data
            .downcast::<PyArray1<T>>()
            .map_err(|_| {
                PyTypeError::new_err(format!(
                    "{name}: data must be a one-dimensional {} array, like the other operand",
                    std::any::type_name::<T>()
                ))
            })?
            .try_readonly()
            .map_err(|_| busy(name))
    }
}

/// A sparse operand's arrays, borrowed from NumPy.
pub struct View<'a, T> {
    format: Format,
    nrows: usize,
    ncols: usize,
    major: IndexSlice<'a>,
    minor: IndexSlice<'a>,
    data: &'a [T],
    /// What keeps the arrays alive for the matrices that read them in place.
    arrays: Arc<NumpyArrays>,
}

/// References to an operand's three NumPy arrays, taken with the GIL held: the owner of the
/// [`HostArray`]s that read NumPy's memory in place. It is `Send + Sync` (`Py` is): dropped
/// without the GIL, as it may be on a worker thread, PyO3 defers the reference count's
/// decrement to the next time a thread holds the GIL; the [`View`] it came from holds one
/// more reference and drops it with the GIL held, so in practice the arrays are released
/// there.
pub struct NumpyArrays {
    _references: [Py<PyAny>; 3],
}

/// A host sparse matrix in the format scipy gave, for SpMV and SpMM.
pub enum Owned<T> {
    /// From CSR arrays.
    Csr(Csr<T>),
    /// From CSC arrays.
    Csc(Csc<T>),
    /// From COO arrays.
    Coo(Coo<T>),
}

impl<T: Scalar> Owned<T> {
    /// A borrowed view for the backends.
    pub fn as_ref(&self) -> hetsparse::SparseRef<'_, T> {
        match self {
            Owned::Csr(m) => m.into(),
            Owned::Csc(m) => m.into(),
            Owned::Coo(m) => m.into(),
        }
    }
}

impl<T: Scalar> View<'_, T> {
    /// `(rows, columns)`.
    pub fn shape(&self) -> (usize, usize) {
        (self.nrows, self.ncols)
    }

    /// Stored entries.
    pub fn nnz(&self) -> usize {
        self.data.len()
    }

    /// The most entries in one row (`rows`) or one column, where the arrays say it without a
    /// pass over the indices: rows of CSR arrays, columns of CSC arrays; `None` otherwise.
    /// Read before the arrays are validated, so only an estimate for deciding how to run
    /// (offsets that decrease count as empty lines).
    pub fn longest_line(&self, rows: bool) -> Option<usize> {
        match (self.format, rows) {
            (Format::Csr, true) | (Format::Csc, false) => {}
            _ => return None,
        }
        let longest = match self.major {
            IndexSlice::I32(s) => s
                .windows(2)
                .map(|w| i64::from(w[1]) - i64::from(w[0]))
                .max(),
            IndexSlice::I64(s) => s.windows(2).map(|w| w[1].saturating_sub(w[0])).max(),
        };
        Some(usize::try_from(longest.unwrap_or(0)).unwrap_or(0))
    }

    /// The matrix in its own format (CSC and COO are not converted).
    pub fn matrix(&self) -> PyResult<Owned<T>> {
        Ok(match self.format {
            Format::Csr => Owned::Csr(self.csr(false)?),
            // CSC arrays are the CSR arrays of the transpose.
            Format::Csc => Owned::Csc(Csc::from_transpose(self.csr(true)?)),
            Format::Coo => Owned::Coo(self.coo(false)?),
        })
    }

    /// Checks that no matrix made from this view (which may read NumPy's memory) is still
    /// alive: called once a computation is over, before the read-only borrows are released.
    /// One that is would be a bug of this module (`RuntimeError`).
    pub fn released(&self) -> PyResult<()> {
        if Arc::strong_count(&self.arrays) == 1 {
            Ok(())
        } else {
            Err(pyo3::exceptions::PyRuntimeError::new_err(
                "hetsparse: a matrix reading an operand's arrays outlived the call (a bug, \
                 please report it)",
            ))
        }
    }

    /// The matrix (or, with `transpose`, its transpose) in canonical CSR. CSR arrays are the
    /// CSR of the matrix and CSC arrays the CSR of its transpose, so one of the two reads the
    /// arrays in place where it can (see the module's documentation); the other transposes
    /// after that.
    pub fn csr(&self, transpose: bool) -> PyResult<Csr<T>> {
        let (nrows, ncols) = (self.nrows, self.ncols);
        let lines = |nmajor, nminor| {
            compressed(
                nmajor,
                nminor,
                self.major,
                self.minor,
                self.data,
                &self.arrays,
            )
        };
        match (self.format, transpose) {
            (Format::Csr, false) => lines(nrows, ncols),
            (Format::Csc, true) => lines(ncols, nrows),
            (Format::Csr, true) => lines(nrows, ncols)?.transpose().map_err(to_py),
            (Format::Csc, false) => lines(ncols, nrows)?.transpose().map_err(to_py),
            (Format::Coo, t) => self.coo(t)?.to_csr().map_err(to_py),
        }
    }

    fn coo(&self, transpose: bool) -> PyResult<Coo<T>> {
        OPERANDS_READ.fetch_add(1, Ordering::Relaxed);
        let n = self.data.len();
        if self.major.len() != n || self.minor.len() != n {
            return Err(value(format!(
                "COO: row, col and data have lengths {}, {} and {}; they must be equal",
                self.major.len(),
                self.minor.len(),
                n
            )));
        }
        let rows = indices(self.major, self.nrows, "row")?;
        let cols = indices(self.minor, self.ncols, "column")?;
        let values = copy_values(self.data)?;
        let coo = if transpose {
            Coo::try_new(self.ncols, self.nrows, cols, rows, values)
        } else {
            Coo::try_new(self.nrows, self.ncols, rows, cols, values)
        };
        coo.map_err(|e| to_py(e.into()))
    }
}

fn busy(what: &str) -> PyErr {
    value(format!("{what}: the array is being written elsewhere"))
}

/// Room for `n` elements, failing with `MemoryError` rather than aborting; large buffers are
/// backed by huge pages where the system allows (a fresh copy of an operand otherwise costs
/// as much in page faults as in copying).
fn try_vec<X>(n: usize, what: &str) -> PyResult<Vec<X>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| {
        pyo3::exceptions::PyMemoryError::new_err(format!(
            "cannot allocate {} bytes for {what}",
            n.saturating_mul(std::mem::size_of::<X>())
        ))
    })?;
    hetsparse::advise_huge_pages(v.spare_capacity_mut());
    Ok(v)
}

fn copy_values<T: Copy>(data: &[T]) -> PyResult<Vec<T>> {
    let mut v = try_vec(data.len(), "the values")?;
    v.extend_from_slice(data);
    Ok(v)
}

/// Entries per parallel piece of a conversion.
const PIECE: usize = 1 << 16;

/// Indices in `[0, bound)` as `u32` (`ValueError` naming the first one outside).
fn indices(src: IndexSlice<'_>, bound: usize, axis: &str) -> PyResult<Vec<u32>> {
    let n = src.len();
    let mut out: Vec<u32> = try_vec(n, "indices")?;
    out.resize(n, 0);
    let fill = |(p, chunk): (usize, &mut [u32])| {
        let start = p * PIECE;
        for (k, slot) in chunk.iter_mut().enumerate() {
            let i = src.get(start + k);
            *slot = in_bounds(i, bound).ok_or_else(|| out_of_bounds(axis, start + k, i, bound))?;
        }
        Ok::<(), PyErr>(())
    };
    if n <= PIECE {
        // A piece alone is converted on the calling thread, with no hand-off to the pool.
        fill((0, &mut out))?;
    } else {
        out.par_chunks_mut(PIECE).enumerate().try_for_each(fill)?;
    }
    Ok(out)
}

fn in_bounds(i: i64, bound: usize) -> Option<u32> {
    u32::try_from(i).ok().filter(|&u| (u as usize) < bound)
}

fn out_of_bounds(axis: &str, position: usize, index: i64, bound: usize) -> PyErr {
    value(format!(
        "{axis} index {index} at position {position} is out of bounds (dimension {bound})"
    ))
}

/// Checks `offsets` (length, first 0, last `nnz`, never decreasing) and converts them.
fn offsets(src: IndexSlice<'_>, nmajor: usize, nnz: usize, axis: &str) -> PyResult<Vec<u64>> {
    if src.len() != nmajor + 1 {
        return Err(value(format!(
            "indptr has length {}, expected {} (one more than the number of {axis}s)",
            src.len(),
            nmajor + 1
        )));
    }
    let n = nmajor + 1;
    let mut out: Vec<u64> = try_vec(n, "indptr")?;
    // Negative offsets become huge here and are caught, as i64, by the order check.
    match src {
        IndexSlice::I32(s) => widen(s, &mut out.spare_capacity_mut()[..n]),
        IndexSlice::I64(s) => widen(s, &mut out.spare_capacity_mut()[..n]),
    }
    // SAFETY: `widen` wrote all n elements.
    unsafe { out.set_len(n) };
    let first_decrease = |r: std::ops::Range<usize>| {
        let end = (r.end + 1).min(n);
        out[r.start..end]
            .windows(2)
            .position(|w| (w[0] as i64) > (w[1] as i64))
            .map(|p| r.start + p + 1)
    };
    let decrease = if (out[0] as i64) < 0 {
        Some(0)
    } else if n <= PIECE {
        first_decrease(0..n)
    } else {
        pieces_of(n).filter_map(first_decrease).min()
    };
    if let Some(k) = decrease {
        let previous = if k == 0 { 0 } else { out[k - 1] as i64 };
        return Err(value(format!(
            "indptr decreases at position {k} ({previous} then {})",
            out[k] as i64
        )));
    }
    let (first, last) = (src.get(0), src.get(nmajor));
    if first != 0 || last != nnz as i64 {
        return Err(value(format!(
            "indptr must run from 0 to nnz = {nnz} (the length of indices and data), it runs \
             from {first} to {last}"
        )));
    }
    Ok(out)
}

/// `0..len` in ranges of [`PIECE`], in parallel: plain loops inside each range, where a
/// parallel iterator per element costs more than the work.
pub fn pieces_of(len: usize) -> impl ParallelIterator<Item = std::ops::Range<usize>> {
    (0..len.div_ceil(PIECE))
        .into_par_iter()
        .map(move |c| c * PIECE..((c + 1) * PIECE).min(len))
}

/// `write(out piece, src piece)` over `out` and `src` (of one length) in pieces of [`PIECE`],
/// in parallel; whether every call returned true. A single piece is written on the calling
/// thread: a small conversion (a BFS frontier's, every level) is not worth a hand-off to the
/// pool from Python's thread.
fn each_piece<O: Send, S: Sync>(
    out: &mut [O],
    src: &[S],
    write: impl Fn((&mut [O], &[S])) -> bool + Sync + Send,
) -> bool {
    if src.len() <= PIECE {
        write((out, src))
    } else {
        out.par_chunks_mut(PIECE)
            .zip(src.par_chunks(PIECE))
            .map(write)
            .reduce(|| true, |a, b| a && b)
    }
}

/// `src` as `u64` (negative values wrap) into `out`, of the same length, in parallel.
fn widen<I: Copy + Into<i64> + Sync>(src: &[I], out: &mut [std::mem::MaybeUninit<u64>]) {
    each_piece(out, src, |(out, src)| {
        for (slot, &o) in out.iter_mut().zip(src) {
            slot.write(o.into() as u64);
        }
        true
    });
}

/// Canonical CSR of `nmajor` lines over `nminor` from compressed arrays that may be unsorted
/// or hold duplicates (those are summed, as scipy means them): NumPy's arrays read in place
/// when they are canonical ([`in_place`]), else converted ([`converted`]).
///
/// `arrays` must hold references to the arrays of `major`, `minor` and `data`, and the caller
/// must keep read-only borrows of them until every matrix made here is dropped.
fn compressed<T: Scalar>(
    nmajor: usize,
    nminor: usize,
    major: IndexSlice<'_>,
    minor: IndexSlice<'_>,
    data: &[T],
    arrays: &Arc<NumpyArrays>,
) -> PyResult<Csr<T>> {
    OPERANDS_READ.fetch_add(1, Ordering::Relaxed);
    // SAFETY: forwarded from this function's contract.
    match unsafe { in_place(nmajor, nminor, major, minor, data, arrays) }? {
        Some(matrix) => Ok(matrix),
        None => converted(nmajor, nminor, major, minor, data),
    }
}

/// How compressed operands were read, counted for the tests (`_hetsparse._conversions`): the
/// operands whose offsets, indices and values were read in place, and those converted.
pub static CONVERSIONS: [AtomicU64; 4] = [const { AtomicU64::new(0) }; 4];

/// How many sparse operands were taken from NumPy's arrays (read in place or converted, any
/// format), counted for the tests (`_hetsparse._operands_read`): a stored matrix used as an
/// operand is not counted, only its making.
pub static OPERANDS_READ: AtomicU64 = AtomicU64::new(0);

fn count(which: usize) {
    CONVERSIONS[which].fetch_add(1, Ordering::Relaxed);
}

/// The canonical CSR matrix over NumPy's arrays, or `None` when they are not canonical (or
/// malformed: the converting path says how). Reads in place what it can (see the module's
/// documentation); [`Csr::try_from_arrays`] checks every invariant.
///
/// # Safety
/// As for [`compressed`]: `arrays` keeps the arrays behind `major`, `minor` and `data` alive
/// and the caller holds read-only borrows of them for as long as the matrix made here lives.
unsafe fn in_place<T: Scalar>(
    nmajor: usize,
    nminor: usize,
    major: IndexSlice<'_>,
    minor: IndexSlice<'_>,
    data: &[T],
    arrays: &Arc<NumpyArrays>,
) -> PyResult<Option<Csr<T>>> {
    let max = hetsparse::format::MAX_DIMENSION;
    if nmajor > max || nminor > max {
        return Ok(None);
    }
    // SAFETY (each `from_foreign` below): the slice is NumPy's array, which `arrays` keeps
    // alive and the caller's read-only borrow keeps unwritten (this function's contract), and
    // the element type read has the size and alignment of the stored one with every bit
    // pattern valid (i64 as u64, i32 as u32, T as T). Values read as u64 or u32 that were
    // negative become huge and fail the bounds and order checks of `try_from_arrays`, whose
    // rejection drops the arrays unread further.
    let offsets = match major {
        IndexSlice::I64(s) => unsafe {
            HostArray::from_foreign(s.as_ptr().cast::<u64>(), s.len(), Arc::clone(arrays))
        },
        IndexSlice::I32(s) => {
            let mut widened: Vec<u64> = try_vec(s.len(), "indptr")?;
            widen(s, &mut widened.spare_capacity_mut()[..s.len()]);
            // SAFETY: `widen` wrote all of them.
            unsafe { widened.set_len(s.len()) };
            HostArray::from(widened)
        }
    };
    let indices = match minor {
        // Only then is every non-negative i32 a valid index and every negative one (read as
        // u32, at least 2^31) out of bounds.
        IndexSlice::I32(s) if nminor <= 1 << 31 => unsafe {
            HostArray::from_foreign(s.as_ptr().cast::<u32>(), s.len(), Arc::clone(arrays))
        },
        IndexSlice::I32(_) => return Ok(None),
        IndexSlice::I64(s) => match narrow(s)? {
            Some(narrowed) => HostArray::from(narrowed),
            None => return Ok(None),
        },
    };
    let values = unsafe { HostArray::from_foreign(data.as_ptr(), data.len(), Arc::clone(arrays)) };
    let Ok(matrix) = Csr::try_from_arrays(nmajor, nminor, offsets, indices, values) else {
        return Ok(None);
    };
    let (offsets, indices, values) = matrix.arrays();
    for (which, in_place) in [
        offsets.is_foreign(),
        indices.is_foreign(),
        values.is_foreign(),
    ]
    .into_iter()
    .enumerate()
    {
        if in_place {
            count(which);
        }
    }
    Ok(Some(matrix))
}

/// `src` as `u32` in a vector of ours, or `None` when one is outside `0..2^32`.
fn narrow(src: &[i64]) -> PyResult<Option<Vec<u32>>> {
    let n = src.len();
    let mut out: Vec<u32> = try_vec(n, "indices")?;
    let all_fit = each_piece(&mut out.spare_capacity_mut()[..n], src, |(out, src)| {
        let mut outside = false;
        for (slot, &i) in out.iter_mut().zip(src) {
            outside |= i as u64 > u64::from(u32::MAX);
            slot.write(i as u32);
        }
        !outside
    });
    // SAFETY: every chunk wrote each of its elements.
    unsafe { out.set_len(n) };
    Ok(all_fit.then_some(out))
}

/// Canonical CSR of `nmajor` lines over `nminor` from compressed arrays converted into vectors
/// of ours, lines sorted and repeats summed where they are not canonical; faults reported in
/// NumPy's terms (`ValueError`).
fn converted<T: Scalar>(
    nmajor: usize,
    nminor: usize,
    major: IndexSlice<'_>,
    minor: IndexSlice<'_>,
    data: &[T],
) -> PyResult<Csr<T>> {
    count(3);
    if minor.len() != data.len() {
        return Err(value(format!(
            "indices and data have lengths {} and {}; they must be equal",
            minor.len(),
            data.len()
        )));
    }
    let max = hetsparse::format::MAX_DIMENSION;
    if nmajor > max || nminor > max {
        return Err(value(format!(
            "a dimension of {} is more than hetsparse's limit of {max}",
            nmajor.max(nminor)
        )));
    }
    let offsets = offsets(major, nmajor, data.len(), "line")?;
    // Lines in pieces of about PIECE entries; each piece's indices are one contiguous slice.
    // A piece ends at the first line end at or past the next cut, or after PIECE lines.
    let mut bounds = vec![0usize];
    let mut next_cut = PIECE as u64;
    while let Some(&last) = bounds.last().filter(|&&l| l < nmajor) {
        let line = (offsets.partition_point(|&o| o < next_cut))
            .clamp(last + 1, (last + PIECE).min(nmajor));
        bounds.push(line);
        next_cut = offsets[line] + PIECE as u64;
    }
    let nnz = data.len();
    let mut out_indices: Vec<u32> = try_vec(nnz, "indices")?;
    let mut out_values: Vec<T> = try_vec(nnz, "values")?;
    let mut pieces = Vec::with_capacity(bounds.len());
    {
        let mut rest_i = &mut out_indices.spare_capacity_mut()[..nnz];
        let mut rest_v = &mut out_values.spare_capacity_mut()[..nnz];
        for w in bounds.windows(2) {
            let (l0, l1) = (w[0], w[1]);
            let len = (offsets[l1] - offsets[l0]) as usize;
            let (head_i, tail_i) = rest_i.split_at_mut(len);
            let (head_v, tail_v) = rest_v.split_at_mut(len);
            pieces.push((l0, l1, head_i, head_v));
            (rest_i, rest_v) = (tail_i, tail_v);
        }
    }
    // Each piece converts, checks and copies its lines' entries in one pass.
    let sorted = pieces
        .into_par_iter()
        .map(|(l0, l1, out_i, out_v)| -> PyResult<bool> {
            let lines = &offsets[l0..=l1];
            let sorted = match minor {
                IndexSlice::I32(src) => convert_lines(src, lines, nminor, out_i)?,
                IndexSlice::I64(src) => convert_lines(src, lines, nminor, out_i)?,
            };
            let (start, end) = (offsets[l0] as usize, offsets[l1] as usize);
            for (slot, &v) in out_v.iter_mut().zip(&data[start..end]) {
                slot.write(v);
            }
            Ok(sorted)
        })
        .try_reduce(|| true, |a, b| Ok(a && b))?;
    // SAFETY: the pieces cover entries 0..nnz (lines 0..nmajor, whose offsets run from 0 to
    // nnz), and each wrote every index and value of its lines.
    unsafe {
        out_indices.set_len(nnz);
        out_values.set_len(nnz);
    }
    if sorted {
        // SAFETY: everything `Csr::try_new` checks was checked above: dimensions within
        // MAX_DIMENSION, nmajor + 1 offsets from 0 to nnz never decreasing, as many values as
        // indices, every index below nminor and strictly increasing within its line.
        Ok(unsafe { Csr::from_parts_unchecked(nmajor, nminor, offsets, out_indices, out_values) })
    } else {
        Csr::try_from_unsorted(nmajor, nminor, offsets, out_indices, out_values)
            .map_err(|e| to_py(e.into()))
    }
}

/// Converts the minor indices of the lines whose offsets are `lines` (absolute positions in
/// `src`) into `out` (which starts at the first line), checking that each is in `[0, nminor)`
/// (`ValueError` naming the first one that is not); returns whether every line is strictly
/// increasing. The loop has no early exit, so that it vectorises.
fn convert_lines<I: Copy + Into<i64>>(
    src: &[I],
    lines: &[u64],
    nminor: usize,
    out: &mut [std::mem::MaybeUninit<u32>],
) -> PyResult<bool> {
    let base = lines[0] as usize;
    let mut sorted = true;
    let mut outside = false;
    for w in lines.windows(2) {
        let (s, e) = (w[0] as usize, w[1] as usize);
        let mut previous = -1i64;
        for (slot, &i) in out[s - base..e - base].iter_mut().zip(&src[s..e]) {
            let i: i64 = i.into();
            // A negative index is a huge u64, so one comparison checks both ends.
            outside |= i as u64 >= nminor as u64;
            sorted &= i > previous;
            previous = i;
            slot.write(i as u32);
        }
    }
    if outside {
        let end = lines[lines.len() - 1] as usize;
        if let Some(k) = (base..end).find(|&k| src[k].into() as u64 >= nminor as u64) {
            return Err(out_of_bounds("index", k, src[k].into(), nminor));
        }
    }
    Ok(sorted)
}

/// A CSR result as scipy's arrays `(indptr, indices, data)`: `int32` indices where every
/// offset fits, else `int64` (scipy's own rule), values handed over without a copy.
pub fn csr_to_py<'py, T: Scalar + numpy::Element>(
    py: Python<'py>,
    c: Csr<T>,
) -> PyResult<Bound<'py, PyTuple>> {
    let (nrows, ncols, offsets, indices, values) = c.into_parts();
    let fits_i32 = offsets.last().is_none_or(|&n| n <= i32::MAX as u64)
        && nrows <= i32::MAX as usize
        && ncols <= i32::MAX as usize;
    let (indptr, indices) = if fits_i32 {
        let mut indptr: Vec<i32> = try_vec(offsets.len(), "the result's indptr")?;
        each_piece(
            &mut indptr.spare_capacity_mut()[..offsets.len()],
            &offsets,
            |(out, src)| {
                for (o, &s) in out.iter_mut().zip(src) {
                    o.write(s as i32);
                }
                true
            },
        );
        // SAFETY: the loop above wrote every one of them.
        unsafe { indptr.set_len(offsets.len()) };
        // Every index is below ncols ≤ i32::MAX, so its bits read the same as i32.
        let indices = u32_into_i32(indices);
        (
            PyArray1::from_vec(py, indptr).into_any(),
            PyArray1::from_vec(py, indices).into_any(),
        )
    } else {
        let indptr: Vec<i64> = offsets.par_iter().map(|&o| o as i64).collect();
        let indices: Vec<i64> = indices.par_iter().map(|&i| i64::from(i)).collect();
        (
            PyArray1::from_vec(py, indptr).into_any(),
            PyArray1::from_vec(py, indices).into_any(),
        )
    };
    let data = PyArray1::from_vec(py, values).into_any();
    PyTuple::new(
        py,
        [
            nrows.into_pyobject(py)?.into_any(),
            ncols.into_pyobject(py)?.into_any(),
            indptr,
            indices,
            data,
        ],
    )
}

/// The same vector read as `i32`, without copying.
fn u32_into_i32(v: Vec<u32>) -> Vec<i32> {
    let mut v = std::mem::ManuallyDrop::new(v);
    let (ptr, len, cap) = (v.as_mut_ptr(), v.len(), v.capacity());
    // SAFETY: u32 and i32 have the same size and alignment, so the allocation made for `cap`
    // u32 is the one a Vec<i32> of capacity `cap` frees, and every bit pattern is a valid i32.
    // The original vector is not dropped.
    unsafe { Vec::from_raw_parts(ptr.cast::<i32>(), len, cap) }
}
