//! The reader: a line scanner over a reused buffer, the header parser and the entry loops.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;

use flate2::bufread::MultiGzDecoder;

use super::{Field, Format, Header, MatrixMarket, Symmetry};
use crate::error::MatrixMarketError;
use crate::format::{Coo, Csr, Dense, Layout, MAX_DIMENSION};
use crate::scalar::Scalar;

/// Most entries reserved before they arrive: the size line is only a promise, and a short file
/// announcing 10^12 entries must fail at its end, not in the allocator.
const MAX_INITIAL_RESERVE: u64 = 1 << 20;

/// Buffer size for files and decompressed streams: lines are short, so a larger buffer mostly
/// saves system calls.
const READ_BUFFER: usize = 1 << 16;

/// Longest excerpt of offending input quoted in an error message.
const MAX_QUOTE: usize = 40;

const BANNER: &str = "%%MatrixMarket matrix <coordinate|array> <real|integer|complex|pattern> \
                      <general|symmetric|skew-symmetric|hermitian>";

/// Reads a Matrix Market file from any buffered reader, plain or gzip-compressed.
///
/// Returns [`MatrixMarket::Sparse`] for `coordinate` files and [`MatrixMarket::Dense`] for
/// `array` files; see the [module documentation](super) for how fields and symmetries are
/// interpreted.
pub fn read<T: Scalar, R: BufRead>(mut reader: R) -> Result<MatrixMarket<T>, MatrixMarketError> {
    let _span = tracing::debug_span!("matrix_market::read", scalar = %T::TYPE).entered();
    if is_gzip(&mut reader)? {
        tracing::debug!("gzip input");
        read_plain(BufReader::with_capacity(
            READ_BUFFER,
            MultiGzDecoder::new(reader),
        ))
    } else {
        read_plain(reader)
    }
}

/// Reads a Matrix Market file, gzip-compressed or not (decided by its first bytes).
pub fn read_path<T: Scalar>(path: impl AsRef<Path>) -> Result<MatrixMarket<T>, MatrixMarketError> {
    read(open(path.as_ref())?)
}

/// Reads a `coordinate` or `array` file into CSR (see [`MatrixMarket::into_csr`]).
pub fn read_csr<T: Scalar, R: BufRead>(reader: R) -> Result<Csr<T>, MatrixMarketError> {
    let m = read(reader)?;
    let _span = tracing::debug_span!("matrix_market::to_csr").entered();
    Ok(m.into_csr())
}

/// Reads a `coordinate` or `array` file from a path into CSR, gzip-compressed or not.
pub fn read_csr_path<T: Scalar>(path: impl AsRef<Path>) -> Result<Csr<T>, MatrixMarketError> {
    read_csr(open(path.as_ref())?)
}

/// Reads the banner and the size line only, not the entries: what a file holds and how large it
/// claims to be, without reading it. Gzip input is decompressed just far enough.
pub fn read_header<R: BufRead>(mut reader: R) -> Result<Header, MatrixMarketError> {
    let mut buf = Vec::new();
    if is_gzip(&mut reader)? {
        let mut lines = Lines::new(BufReader::new(MultiGzDecoder::new(reader)));
        parse_header(&mut lines, &mut buf)
    } else {
        parse_header(&mut Lines::new(reader), &mut buf)
    }
}

fn open(path: &Path) -> Result<BufReader<File>, MatrixMarketError> {
    let file = File::open(path).map_err(|source| MatrixMarketError::Open {
        path: path.to_path_buf(),
        source,
    })?;
    Ok(BufReader::with_capacity(READ_BUFFER, file))
}

/// Whether the input is gzip (magic bytes 1f 8b). A plain Matrix Market file starts with `%`,
/// whitespace or a byte-order mark, never with 0x1f, so the first byte decides, which also keeps
/// the answer independent of how many bytes the reader happens to buffer; the decoder then
/// rejects a stream whose second byte is not 0x8b as an invalid gzip header.
fn is_gzip<R: BufRead>(reader: &mut R) -> Result<bool, MatrixMarketError> {
    Ok(reader.fill_buf()?.first() == Some(&0x1f))
}

fn read_plain<T: Scalar, R: BufRead>(reader: R) -> Result<MatrixMarket<T>, MatrixMarketError> {
    let mut lines = Lines::new(reader);
    let mut buf = Vec::with_capacity(256);
    let header = parse_header(&mut lines, &mut buf)?;
    tracing::debug!(
        format = %header.format,
        field = %header.field,
        symmetry = %header.symmetry,
        nrows = header.nrows,
        ncols = header.ncols,
        entries = header.entries,
        "Matrix Market header"
    );
    if header.field == Field::Complex && !T::TYPE.is_complex() {
        return Err(MatrixMarketError::Unsupported(format!(
            "the file holds complex values, which {} cannot hold; read it as Complex<f32> or \
             Complex<f64>",
            T::TYPE
        )));
    }
    let size_line = lines.line;
    let m = match header.format {
        Format::Coordinate => MatrixMarket::Sparse(read_coordinate(&header, &mut lines, &mut buf)?),
        Format::Array => MatrixMarket::Dense(read_array(&header, &mut lines, &mut buf)?),
    };
    if lines.next_content(&mut buf)?.is_some() {
        return Err(parse_error(
            lines.line,
            format!(
                "more entries than the {} announced by the size line (line {size_line})",
                header.entries
            ),
        ));
    }
    Ok(m)
}

/// Counts lines; the line itself lives in a buffer the caller owns, so that a returned line can
/// be borrowed while the count is read.
struct Lines<R> {
    reader: R,
    /// 1-based number of the last line read, 0 before the first.
    line: u64,
}

impl<R: BufRead> Lines<R> {
    fn new(reader: R) -> Self {
        Lines { reader, line: 0 }
    }

    /// The next line, trimmed, or `None` at the end of the input.
    fn next_line<'b>(
        &mut self,
        buf: &'b mut Vec<u8>,
    ) -> Result<Option<&'b [u8]>, MatrixMarketError> {
        buf.clear();
        if self.reader.read_until(b'\n', buf)? == 0 {
            return Ok(None);
        }
        self.line += 1;
        Ok(Some(buf.trim_ascii()))
    }

    /// The next line that is neither blank nor a comment, trimmed.
    fn next_content<'b>(
        &mut self,
        buf: &'b mut Vec<u8>,
    ) -> Result<Option<&'b [u8]>, MatrixMarketError> {
        loop {
            buf.clear();
            if self.reader.read_until(b'\n', buf)? == 0 {
                return Ok(None);
            }
            self.line += 1;
            match buf.trim_ascii().first() {
                None | Some(b'%') => continue,
                Some(_) => break,
            }
        }
        Ok(Some(buf.trim_ascii()))
    }
}

fn parse_error(line: u64, message: String) -> MatrixMarketError {
    MatrixMarketError::Parse { line, message }
}

/// Offending input for an error message, shortened and made printable.
fn quote(bytes: &[u8]) -> String {
    let cut = bytes.len().min(MAX_QUOTE);
    let mut s = String::from_utf8_lossy(&bytes[..cut]).into_owned();
    if cut < bytes.len() {
        s.push('…');
    }
    s
}

fn words(line: &[u8]) -> impl Iterator<Item = &[u8]> {
    line.split(|b| b.is_ascii_whitespace())
        .filter(|w| !w.is_empty())
}

/// Exactly `N` whitespace-separated words, or an error naming what they should have been.
#[inline]
fn split_exact<'a, const N: usize>(
    line: &'a [u8],
    lineno: u64,
    expected: &str,
) -> Result<[&'a [u8]; N], MatrixMarketError> {
    let mut out = [&line[..0]; N];
    let mut n = 0;
    for w in words(line) {
        if n < N {
            out[n] = w;
        }
        n += 1;
    }
    if n != N {
        return Err(parse_error(
            lineno,
            format!(
                "expected {N} {} `{expected}`, found {n}: `{}`",
                if N == 1 { "value" } else { "values" },
                quote(line)
            ),
        ));
    }
    Ok(out)
}

/// A non-negative decimal integer; `None` on anything else or on overflow.
#[inline]
fn parse_u64(word: &[u8]) -> Option<u64> {
    let digits = word.strip_prefix(b"+").unwrap_or(word);
    if digits.is_empty() {
        return None;
    }
    let mut v: u64 = 0;
    for &b in digits {
        let d = b.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(u64::from(d))?;
    }
    Some(v)
}

fn parse_header<R: BufRead>(
    lines: &mut Lines<R>,
    buf: &mut Vec<u8>,
) -> Result<Header, MatrixMarketError> {
    let Some(banner) = lines.next_line(buf)? else {
        return Err(parse_error(
            1,
            format!("expected the banner `{BANNER}`, found an empty file"),
        ));
    };
    let banner = banner.strip_prefix("\u{feff}".as_bytes()).unwrap_or(banner);
    let (format, field, symmetry) = parse_banner(banner)?;
    let banner_line = lines.line;

    let invalid = match (format, field, symmetry) {
        (Format::Array, Field::Pattern, _) => Some("an `array` file cannot be `pattern`"),
        (_, Field::Pattern, Symmetry::SkewSymmetric | Symmetry::Hermitian) => {
            Some("a `pattern` matrix has no values to negate or conjugate")
        }
        (_, Field::Real | Field::Integer, Symmetry::Hermitian) => {
            Some("`hermitian` requires the `complex` field; a real hermitian matrix is `symmetric`")
        }
        _ => None,
    };
    if let Some(why) = invalid {
        return Err(parse_error(
            banner_line,
            format!("invalid banner `{format} {field} {symmetry}`: {why}"),
        ));
    }

    let Some(size) = lines.next_content(buf)? else {
        return Err(parse_error(
            lines.line + 1,
            "expected the size line, found the end of the file".to_string(),
        ));
    };
    let line = lines.line;
    let number = |word: &[u8], what: &str| {
        parse_u64(word).ok_or_else(|| {
            parse_error(
                line,
                format!(
                    "expected the number of {what} (a non-negative integer) in the size line, \
                     found `{}`",
                    quote(word)
                ),
            )
        })
    };
    let dimension = |word: &[u8], what: &str| {
        let n = number(word, what)?;
        if n > MAX_DIMENSION as u64 {
            return Err(parse_error(
                line,
                format!(
                    "{n} {what} is more than the {MAX_DIMENSION} supported (indices are 32-bit)"
                ),
            ));
        }
        Ok(n)
    };
    let (nrows, ncols, announced) = match format {
        Format::Coordinate => {
            let [r, c, e] = split_exact::<3>(size, line, "rows columns entries")?;
            (
                dimension(r, "rows")?,
                dimension(c, "columns")?,
                Some(number(e, "entries")?),
            )
        }
        Format::Array => {
            let [r, c] = split_exact::<2>(size, line, "rows columns")?;
            (dimension(r, "rows")?, dimension(c, "columns")?, None)
        }
    };
    if symmetry != Symmetry::General && nrows != ncols {
        return Err(parse_error(
            line,
            format!("a {symmetry} matrix must be square, the size line says {nrows}×{ncols}"),
        ));
    }
    let entries = match announced {
        Some(e) => e,
        None => {
            // Both dimensions are below 2^32, so neither product can overflow u64; checked all
            // the same so that a change of limit cannot turn into a wrap.
            let stored = match symmetry {
                Symmetry::General => nrows.checked_mul(ncols),
                Symmetry::Symmetric | Symmetry::Hermitian => {
                    nrows.checked_mul(nrows + 1).map(|p| p / 2)
                }
                Symmetry::SkewSymmetric => {
                    nrows.checked_mul(nrows.saturating_sub(1)).map(|p| p / 2)
                }
            };
            stored.ok_or_else(|| {
                parse_error(
                    line,
                    format!("{nrows}×{ncols} values overflow a 64-bit count"),
                )
            })?
        }
    };
    Ok(Header {
        format,
        field,
        symmetry,
        nrows,
        ncols,
        entries,
    })
}

fn parse_banner(banner: &[u8]) -> Result<(Format, Field, Symmetry), MatrixMarketError> {
    let found = || {
        parse_error(
            1,
            format!("expected the banner `{BANNER}`, found `{}`", quote(banner)),
        )
    };
    let [magic, object, format, field, symmetry] =
        split_exact::<5>(banner, 1, BANNER).map_err(|_| found())?;
    if !magic.eq_ignore_ascii_case(b"%%MatrixMarket") {
        return Err(found());
    }
    if !object.eq_ignore_ascii_case(b"matrix") {
        return Err(parse_error(
            1,
            format!(
                "expected the object `matrix` in the banner, found `{}` (only matrices are supported)",
                quote(object)
            ),
        ));
    }
    let keyword = |word: &[u8], what: &str, options: &[&'static str]| {
        options
            .iter()
            .position(|o| word.eq_ignore_ascii_case(o.as_bytes()))
            .ok_or_else(|| {
                parse_error(
                    1,
                    format!(
                        "unknown {what} `{}` in the banner, expected one of {}",
                        quote(word),
                        options.join(", ")
                    ),
                )
            })
    };
    let format =
        [Format::Coordinate, Format::Array][keyword(format, "format", &["coordinate", "array"])?];
    let field = [Field::Real, Field::Integer, Field::Complex, Field::Pattern]
        [keyword(field, "field", &["real", "integer", "complex", "pattern"])?];
    let symmetry = [
        Symmetry::General,
        Symmetry::Symmetric,
        Symmetry::SkewSymmetric,
        Symmetry::Hermitian,
    ][keyword(
        symmetry,
        "symmetry",
        &["general", "symmetric", "skew-symmetric", "hermitian"],
    )?];
    Ok((format, field, symmetry))
}

/// A real value; Fortran `D` exponents are retried as `e`.
#[inline]
fn parse_real(word: &[u8], line: u64, what: &str) -> Result<f64, MatrixMarketError> {
    let parsed = std::str::from_utf8(word)
        .ok()
        .and_then(|s| s.parse::<f64>().ok());
    parsed
        .or_else(|| {
            let s = std::str::from_utf8(word).ok()?;
            if s.contains(['d', 'D']) {
                s.replace(['d', 'D'], "e").parse().ok()
            } else {
                None
            }
        })
        .ok_or_else(|| {
            parse_error(
                line,
                format!("expected {what} (a real number), found `{}`", quote(word)),
            )
        })
}

#[inline]
fn parse_integer(word: &[u8], line: u64) -> Result<f64, MatrixMarketError> {
    std::str::from_utf8(word)
        .ok()
        .and_then(|s| s.parse::<i64>().ok())
        .map(|v| v as f64)
        .ok_or_else(|| {
            parse_error(
                line,
                format!(
                    "expected an integer value (the field is `integer`), found `{}`",
                    quote(word)
                ),
            )
        })
}

/// A 1-based index into `0..bound`, returned 0-based.
#[inline]
fn parse_index(word: &[u8], axis: &str, bound: u64, line: u64) -> Result<u32, MatrixMarketError> {
    match parse_u64(word) {
        Some(i) if i >= 1 && i <= bound => Ok((i - 1) as u32),
        Some(0) => Err(parse_error(
            line,
            format!("{axis} index 0 is out of range: indices are 1-based"),
        )),
        Some(i) => Err(parse_error(
            line,
            format!("{axis} index {i} is beyond the matrix's {bound} {axis}s"),
        )),
        None => Err(parse_error(
            line,
            format!(
                "expected a {axis} index (a positive integer), found `{}`",
                quote(word)
            ),
        )),
    }
}

/// The value of a `real` or `integer` word.
#[inline]
fn real_value<T: Scalar>(field: Field, word: &[u8], line: u64) -> Result<T, MatrixMarketError> {
    let x = match field {
        Field::Integer => parse_integer(word, line)?,
        _ => parse_real(word, line, "a value")?,
    };
    Ok(T::from_f64(x))
}

/// The value of a `complex` entry, which only complex scalars reach ([`read_plain`] refuses the
/// field for real ones before any entry is read).
#[inline]
fn complex_value<T: Scalar>(re: &[u8], im: &[u8], line: u64) -> Result<T, MatrixMarketError> {
    let (re, im) = (
        parse_real(re, line, "a real part")?,
        parse_real(im, line, "an imaginary part")?,
    );
    T::try_from_parts(re, im).ok_or_else(|| {
        MatrixMarketError::Unsupported(format!("a complex value cannot be stored in {}", T::TYPE))
    })
}

fn fewer_entries(header: &Header, found: u64, line: u64) -> MatrixMarketError {
    parse_error(
        line,
        format!(
            "the file ends after {found} entries, fewer than the {} announced",
            header.entries
        ),
    )
}

fn read_coordinate<T: Scalar, R: BufRead>(
    header: &Header,
    lines: &mut Lines<R>,
    buf: &mut Vec<u8>,
) -> Result<Coo<T>, MatrixMarketError> {
    let _span =
        tracing::debug_span!("matrix_market::coordinate", entries = header.entries).entered();
    let mirrored = header.symmetry != Symmetry::General;
    let reserve = header.entries.min(MAX_INITIAL_RESERVE) as usize * if mirrored { 2 } else { 1 };
    let mut rows: Vec<u32> = Vec::with_capacity(reserve);
    let mut cols: Vec<u32> = Vec::with_capacity(reserve);
    let mut values: Vec<T> = Vec::with_capacity(reserve);
    let (nrows, ncols) = (header.nrows, header.ncols);
    for found in 0..header.entries {
        let Some(l) = lines.next_content(buf)? else {
            return Err(fewer_entries(header, found, lines.line + 1));
        };
        let line = lines.line;
        let (i, j, v): (u32, u32, T) = match header.field {
            Field::Pattern => {
                let [r, c] = split_exact::<2>(l, line, "row column")?;
                (
                    parse_index(r, "row", nrows, line)?,
                    parse_index(c, "column", ncols, line)?,
                    T::from_f64(1.0),
                )
            }
            Field::Real | Field::Integer => {
                let [r, c, v] = split_exact::<3>(l, line, "row column value")?;
                (
                    parse_index(r, "row", nrows, line)?,
                    parse_index(c, "column", ncols, line)?,
                    real_value(header.field, v, line)?,
                )
            }
            Field::Complex => {
                let [r, c, re, im] = split_exact::<4>(l, line, "row column real imaginary")?;
                (
                    parse_index(r, "row", nrows, line)?,
                    parse_index(c, "column", ncols, line)?,
                    complex_value(re, im, line)?,
                )
            }
        };
        rows.push(i);
        cols.push(j);
        values.push(v);
        if i != j {
            let partner = match header.symmetry {
                Symmetry::General => None,
                Symmetry::Symmetric => Some(v),
                Symmetry::SkewSymmetric => Some(v.neg()),
                Symmetry::Hermitian => Some(v.conj()),
            };
            if let Some(w) = partner {
                rows.push(j);
                cols.push(i);
                values.push(w);
            }
        } else if header.symmetry == Symmetry::SkewSymmetric {
            return Err(parse_error(
                line,
                format!(
                    "diagonal entry ({}, {}) in a skew-symmetric file, whose diagonal is zero \
                     and not stored",
                    i as u64 + 1,
                    j as u64 + 1
                ),
            ));
        }
    }
    Coo::try_new(nrows as usize, ncols as usize, rows, cols, values)
        .map_err(|e| MatrixMarketError::Unsupported(e.to_string()))
}

fn read_array<T: Scalar, R: BufRead>(
    header: &Header,
    lines: &mut Lines<R>,
    buf: &mut Vec<u8>,
) -> Result<Dense<T>, MatrixMarketError> {
    let _span = tracing::debug_span!("matrix_market::array", entries = header.entries).entered();
    let mut stored: Vec<T> = Vec::with_capacity(header.entries.min(MAX_INITIAL_RESERVE) as usize);
    for found in 0..header.entries {
        let Some(l) = lines.next_content(buf)? else {
            return Err(fewer_entries(header, found, lines.line + 1));
        };
        let line = lines.line;
        let v = match header.field {
            Field::Complex => {
                let [re, im] = split_exact::<2>(l, line, "real imaginary")?;
                complex_value(re, im, line)?
            }
            // `pattern` arrays are refused at the banner.
            Field::Real | Field::Integer | Field::Pattern => {
                let [v] = split_exact::<1>(l, line, "value")?;
                real_value(header.field, v, line)?
            }
        };
        stored.push(v);
    }
    let (nrows, ncols) = (header.nrows as usize, header.ncols as usize);
    let to_error = |e: crate::error::FormatError| MatrixMarketError::Unsupported(e.to_string());
    if header.symmetry == Symmetry::General {
        return Dense::try_new(nrows, ncols, Layout::ColMajor, stored).map_err(to_error);
    }
    // The lower triangle, column by column, has arrived in full, so the n × n matrix is at most
    // about twice what has been read.
    let n = nrows;
    let mut data = vec![T::zero(); n * n];
    let first_below = usize::from(header.symmetry == Symmetry::SkewSymmetric);
    let lower = (0..n).flat_map(|j| (j + first_below..n).map(move |i| (i, j)));
    for ((i, j), v) in lower.zip(stored) {
        data[j * n + i] = v;
        if i != j {
            data[i * n + j] = match header.symmetry {
                Symmetry::SkewSymmetric => v.neg(),
                Symmetry::Hermitian => v.conj(),
                _ => v,
            };
        }
    }
    Dense::try_new(n, n, Layout::ColMajor, data).map_err(to_error)
}
