//! Matrix Market reading and writing, plain or gzip-compressed.
//!
//! [Matrix Market](https://math.nist.gov/MatrixMarket/formats.html) is the text format the
//! SuiteSparse collection ships its matrices in. A file starts with a banner
//! `%%MatrixMarket matrix <format> <field> <symmetry>`, then `%` comment lines, a size line and
//! the entries, one per line:
//!
//! - `coordinate` files list `row column [value]` triplets with 1-based indices and read into a
//!   [`Coo`]; `array` files list every value column by column and read into a column-major
//!   [`Dense`]. [`read`] returns whichever the file holds as a [`MatrixMarket`];
//!   [`MatrixMarket::into_csr`] and [`MatrixMarket::into_dense`] convert between the two, and
//!   [`read_csr`] / [`read_csr_path`] accept both.
//! - Fields `real`, `integer`, `complex` and `pattern` are read into any [`Scalar`]; `pattern`
//!   entries get the value 1. A `complex` file read into a real scalar is
//!   [`MatrixMarketError::Unsupported`] (it fails at the banner, before any entry is read);
//!   real and integer files read into complex scalars with a zero imaginary part. Values are
//!   rounded to the scalar's precision (a value beyond the range of `f16` becomes infinite).
//! - Symmetries are expanded on read: an off-diagonal entry `(i, j, v)` of a `symmetric` file also
//!   stores `(j, i, v)`, of a `skew-symmetric` file `(j, i, -v)`, of a `hermitian` file
//!   `(j, i, conj(v))`. The specification stores the lower triangle only; entries of the upper
//!   triangle are mirrored all the same, and if both `(i, j)` and `(j, i)` are listed the
//!   expansion holds both copies of each, which [`Coo::to_csr`] then sums, as it sums every
//!   repeated entry. A diagonal entry in a `skew-symmetric` file is an error, since the
//!   diagonal of a skew-symmetric matrix is zero and not stored; the diagonal of a `hermitian`
//!   file is taken as written (its imaginary parts should be zero, and are not checked).
//! - Following the specification (and its reference C library, `mm_is_valid`), `hermitian`
//!   requires the `complex` field, `pattern` is neither `skew-symmetric` nor `hermitian`, and
//!   `array` is not `pattern`: these banners are rejected rather than guessed at. Symmetric
//!   matrices of any kind must be square.
//! - Gzip input is recognised by its magic bytes, not by the file name, both by [`read_path`]
//!   and by [`read`]. As gzip(1) does, members are read one after another (as `pigz` and
//!   `bgzip` write them) and zero bytes after the last member are ignored; any other data after
//!   a member is an [`MatrixMarketError::Io`] error that names the compressed byte offset where
//!   it starts, not a puzzling "invalid gzip header".
//! - Comment lines and blank lines may appear anywhere after the banner; leading and trailing
//!   whitespace, CRLF line ends and a UTF-8 byte-order mark are tolerated; banner keywords are
//!   case-insensitive. Fortran exponents (`1.5D+03`) are accepted in real values.
//! - Every malformed line is a [`MatrixMarketError::Parse`] carrying its 1-based line number
//!   and what was expected and found. A file that ends early is reported at the line after
//!   its last one.
//! - Memory is bounded whatever the file says ([`ReadOptions`]): no line may be longer than
//!   [`ReadOptions::max_line_bytes`] (1 MiB by default), and what the size line announces
//!   must fit [`ReadOptions::max_bytes`] (the machine's available memory by default), or the read fails
//!   at the size line with [`MatrixMarketError::MemoryLimit`] — a gzip file announcing 10^12
//!   entries fails before its first entry. The arrays then grow with the entries actually
//!   read (a short file announcing many entries fails with "fewer entries than announced" at
//!   its end, having allocated for what it held) and never past the announced count. The
//!   `read_csr*` functions count the CSR arrays in the limit too, and every allocation they
//!   make is fallible ([`MatrixMarketError::OutOfMemory`]), so the 47 bytes
//!   `%%MatrixMarket matrix coordinate real general` / `4294967295 1 0`, which ask for 32 GiB
//!   of row offsets, are an error rather than an abort.
//! - Reading is parallel: the calling thread reads (and decompresses) the text in chunks of
//!   about 1 MiB of whole lines, and tasks on the current rayon pool parse them while it reads
//!   on; entries are assembled in file order, so the result and the line numbers in errors are
//!   those of a reading line by line. Writing formats blocks of lines in parallel and writes
//!   them in order. Run inside [`rayon::ThreadPool::install`] to choose the thread count.
//!
//! Writing produces `coordinate real general` (or `complex` for complex scalars) for sparse
//! matrices and `array … general` for dense ones, with a `% written by hetsparse` comment.
//! Values are printed in Rust's shortest round-trip notation of their `f64` value, so reading a
//! written file gives back exactly the values that were written (for `f32`, `f16` and `bf16`
//! too, since their `f64` widening is exact and rounds back to the same value).
//!
//! ```
//! use hetsparse_core::format::Csr;
//! use hetsparse_core::matrix_market::{self, MatrixMarket};
//!
//! // [[1.5, 0, -2],
//! //  [0, 3.25, 0]]
//! let a = Csr::try_new(2, 3, vec![0, 2, 3], vec![0, 2, 1], vec![1.5, -2.0, 3.25])?;
//! let mut bytes = Vec::new();
//! matrix_market::write_sparse(&mut bytes, &a)?;
//! assert!(bytes.starts_with(b"%%MatrixMarket matrix coordinate real general\n"));
//!
//! let back: Csr<f64> = matrix_market::read_csr(&bytes[..])?;
//! assert_eq!(back, a);
//! match matrix_market::read::<f64, _>(&bytes[..])? {
//!     MatrixMarket::Sparse(coo) => assert_eq!(coo.nnz(), 3),
//!     MatrixMarket::Dense(_) => unreachable!("a coordinate file reads as sparse"),
//! }
//! # Ok::<(), hetsparse_core::Error>(())
//! ```

mod convert;
mod float;
mod gzip;
mod header;
mod parse;
mod read;
mod write;

use std::fmt;

pub use read::{
    read, read_csr, read_csr_path, read_csr_path_with, read_csr_with, read_header, read_path,
    read_path_with, read_with,
};
pub use write::{write_dense, write_sparse};

use crate::error::MatrixMarketError;
use crate::format::{Coo, Csr, Dense, Layout};
use crate::scalar::Scalar;

/// How the entries are laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Format {
    /// `coordinate`: one `row column [value]` line per stored entry (sparse).
    Coordinate,
    /// `array`: every value, column by column (dense).
    Array,
}

/// What the values are.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Field {
    /// `real`: one floating-point number per entry.
    Real,
    /// `integer`: one integer per entry.
    Integer,
    /// `complex`: real and imaginary parts per entry.
    Complex,
    /// `pattern`: no value; every listed entry is 1.
    Pattern,
}

/// Which part of the matrix the file stores.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Symmetry {
    /// `general`: every entry.
    General,
    /// `symmetric`: the lower triangle of `A = Aᵀ`.
    Symmetric,
    /// `skew-symmetric`: the strict lower triangle of `A = -Aᵀ`.
    SkewSymmetric,
    /// `hermitian`: the lower triangle of `A = Aᴴ` (complex only).
    Hermitian,
}

impl Format {
    /// The banner keyword.
    pub fn keyword(self) -> &'static str {
        match self {
            Format::Coordinate => "coordinate",
            Format::Array => "array",
        }
    }
}

impl Field {
    /// The banner keyword.
    pub fn keyword(self) -> &'static str {
        match self {
            Field::Real => "real",
            Field::Integer => "integer",
            Field::Complex => "complex",
            Field::Pattern => "pattern",
        }
    }
}

impl Symmetry {
    /// The banner keyword.
    pub fn keyword(self) -> &'static str {
        match self {
            Symmetry::General => "general",
            Symmetry::Symmetric => "symmetric",
            Symmetry::SkewSymmetric => "skew-symmetric",
            Symmetry::Hermitian => "hermitian",
        }
    }
}

macro_rules! display_keyword {
    ($($t:ty),*) => {$(
        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.keyword())
            }
        }
    )*};
}
display_keyword!(Format, Field, Symmetry);

/// The banner and size line of a Matrix Market file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Header {
    /// `coordinate` or `array`.
    pub format: Format,
    /// The kind of values.
    pub field: Field,
    /// Which part of the matrix is stored.
    pub symmetry: Symmetry,
    /// Rows, at most `u32::MAX`.
    pub nrows: u64,
    /// Columns, at most `u32::MAX`.
    pub ncols: u64,
    /// Entry lines that follow the size line: the announced count for `coordinate` files; for
    /// `array` files the number of stored values, `nrows × ncols` for `general` and the
    /// (strict, for `skew-symmetric`) lower triangle otherwise. Symmetric expansion is not
    /// counted.
    pub entries: u64,
}

/// Limits that keep a reader's memory bounded whatever the file says.
///
/// The defaults fit any real Matrix Market file: lines up to 1 MiB, and as much memory as the
/// machine has available when the options are made (on Linux; unlimited where that cannot be
/// read). A service reading files it does not trust sets [`max_bytes`](Self::max_bytes) to
/// what it can spare.
///
/// ```
/// use hetsparse_core::matrix_market::{self, ReadOptions};
/// use hetsparse_core::MatrixMarketError;
///
/// // 47 bytes that announce 4294967295 rows: CSR would need 32 GiB of row offsets.
/// let file = b"%%MatrixMarket matrix coordinate real general\n4294967295 1 0\n";
/// let options = ReadOptions::default().with_max_bytes(1 << 30);
/// let err = matrix_market::read_csr_with::<f64, _>(&file[..], &options).unwrap_err();
/// assert!(matches!(err, MatrixMarketError::MemoryLimit { .. }));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReadOptions {
    /// Longest line accepted, in bytes, its `\n` excluded (default 1 MiB). A longer line, a
    /// comment included, is a [`MatrixMarketError::Parse`] error as soon as this many bytes of it
    /// have been read.
    pub max_line_bytes: usize,
    /// Most bytes the matrix may take once read (default: the memory the machine has available
    /// when the options are made, `MemAvailable` on Linux, so that a small file announcing a
    /// huge shape is refused rather than pushing the host into swap or the OOM killer;
    /// unlimited where it cannot be read): COO triplets (twice the announced count for symmetric
    /// files), the dense array, and, for the `read_csr*` functions, the CSR arrays too. It is
    /// checked against what the size line announces, before any entry is read, so a file that
    /// announces more fails at once with [`MatrixMarketError::MemoryLimit`]; the arrays then
    /// grow with the entries actually read and never past what was announced. Beyond this,
    /// the reader holds a few MiB of text per thread.
    pub max_bytes: u64,
}

impl Default for ReadOptions {
    fn default() -> Self {
        ReadOptions {
            max_line_bytes: 1 << 20,
            max_bytes: match crate::host_available_bytes() {
                0 => match crate::host_memory_bytes() {
                    0 => u64::MAX,
                    total => total,
                },
                available => available,
            },
        }
    }
}

impl ReadOptions {
    /// With another line length limit.
    pub fn with_max_line_bytes(mut self, max_line_bytes: usize) -> Self {
        self.max_line_bytes = max_line_bytes;
        self
    }

    /// With another memory limit.
    pub fn with_max_bytes(mut self, max_bytes: u64) -> Self {
        self.max_bytes = max_bytes;
        self
    }
}

/// A matrix read from a Matrix Market file: sparse from `coordinate`, dense from `array`.
#[derive(Clone, Debug, PartialEq)]
pub enum MatrixMarket<T> {
    /// From a `coordinate` file: triplets in file order, symmetric partners right after their
    /// entry, repeated entries kept.
    Sparse(Coo<T>),
    /// From an `array` file, column-major like the file.
    Dense(Dense<T>),
}

impl<T: Scalar> MatrixMarket<T> {
    /// `(rows, columns)`.
    pub fn shape(&self) -> (usize, usize) {
        match self {
            MatrixMarket::Sparse(c) => c.shape(),
            MatrixMarket::Dense(d) => d.shape(),
        }
    }

    /// As CSR: triplets are sorted and repeated entries summed ([`Coo::to_csr`]); a dense matrix
    /// keeps its non-zero values only ([`Csr::from_dense`]). CSR stores an offset per row, so a
    /// tiny file can describe a matrix whose CSR form does not fit in memory: every allocation
    /// is fallible ([`MatrixMarketError::OutOfMemory`] instead of an abort). Rows are sorted on
    /// every core of the current rayon pool, and the triplets' memory is given back as it goes.
    pub fn into_csr(self) -> Result<Csr<T>, MatrixMarketError> {
        match self {
            MatrixMarket::Sparse(c) => convert::coo_to_csr(c),
            MatrixMarket::Dense(d) => convert::dense_to_csr(&d),
        }
    }

    /// As a dense matrix in `layout`; repeated sparse entries are summed. Fails with
    /// [`MatrixMarketError::Unsupported`] when `rows × columns` values do not fit in memory.
    pub fn into_dense(self, layout: Layout) -> Result<Dense<T>, MatrixMarketError> {
        match self {
            MatrixMarket::Dense(d) => Ok(d.to_layout(layout)),
            MatrixMarket::Sparse(c) => {
                let (nrows, ncols) = c.shape();
                let too_large = || {
                    MatrixMarketError::Unsupported(format!(
                        "a dense {nrows}×{ncols} matrix does not fit in memory"
                    ))
                };
                let len = nrows.checked_mul(ncols).ok_or_else(too_large)?;
                // Reserve fallibly: a sparse file may describe a matrix far larger than memory.
                let mut data = Vec::new();
                data.try_reserve_exact(len).map_err(|_| too_large())?;
                data.resize(len, T::zero());
                let a = convert::coo_to_csr(c)?;
                for i in 0..nrows {
                    let (cols, vals) = a.row(i);
                    for (&j, &v) in cols.iter().zip(vals) {
                        let k = match layout {
                            Layout::RowMajor => i * ncols + j as usize,
                            Layout::ColMajor => j as usize * nrows + i,
                        };
                        data[k] = v;
                    }
                }
                Dense::try_new(nrows, ncols, layout, data)
                    .map_err(|e| MatrixMarketError::Unsupported(e.to_string()))
            }
        }
    }
}
