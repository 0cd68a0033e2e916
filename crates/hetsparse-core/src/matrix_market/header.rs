//! The banner and size line, the bounded line scanner they are read with, and the helpers that
//! error messages share.

use std::io::BufRead;

use super::{Field, Format, Header, Symmetry};
use crate::error::MatrixMarketError;
use crate::format::MAX_DIMENSION;

/// Longest excerpt of offending input quoted in an error message.
const MAX_QUOTE: usize = 40;

const BANNER: &str = "%%MatrixMarket matrix <coordinate|array> <real|integer|complex|pattern> \
                      <general|symmetric|skew-symmetric|hermitian>";

/// Counts lines and reads them into a buffer the caller owns, so that a returned line can be
/// borrowed while the count is read. No line may be longer than `max_line_bytes`: a longer one
/// is an error as soon as that many bytes have been read, so one huge line cannot take memory.
pub(super) struct Lines<R> {
    pub(super) reader: R,
    /// 1-based number of the last line read, 0 before the first.
    pub(super) line: u64,
    max_line_bytes: usize,
}

impl<R: BufRead> Lines<R> {
    pub(super) fn new(reader: R, max_line_bytes: usize) -> Self {
        Lines {
            reader,
            line: 0,
            max_line_bytes,
        }
    }

    /// Reads one line, newline included, into `buf`; false at the end of the input.
    fn read_bounded(&mut self, buf: &mut Vec<u8>) -> Result<bool, MatrixMarketError> {
        buf.clear();
        let mut any = false;
        loop {
            let available = match self.reader.fill_buf() {
                Ok(b) => b,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e.into()),
            };
            if available.is_empty() {
                return Ok(any);
            }
            any = true;
            let (take, done) = match available.iter().position(|&b| b == b'\n') {
                Some(k) => (k + 1, true),
                None => (available.len(), false),
            };
            let content = buf.len() + take - usize::from(done);
            if content > self.max_line_bytes {
                return Err(line_too_long(self.line + 1, self.max_line_bytes));
            }
            buf.extend_from_slice(&available[..take]);
            self.reader.consume(take);
            if done {
                return Ok(true);
            }
        }
    }

    /// The next line, trimmed, or `None` at the end of the input.
    pub(super) fn next_line<'b>(
        &mut self,
        buf: &'b mut Vec<u8>,
    ) -> Result<Option<&'b [u8]>, MatrixMarketError> {
        if !self.read_bounded(buf)? {
            return Ok(None);
        }
        self.line += 1;
        Ok(Some(buf.trim_ascii()))
    }

    /// The next line that is neither blank nor a comment, trimmed.
    pub(super) fn next_content<'b>(
        &mut self,
        buf: &'b mut Vec<u8>,
    ) -> Result<Option<&'b [u8]>, MatrixMarketError> {
        loop {
            if !self.read_bounded(buf)? {
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

/// The error for a line longer than the limit.
pub(super) fn line_too_long(line: u64, limit: usize) -> MatrixMarketError {
    parse_error(
        line,
        format!(
            "the line is longer than {limit} bytes (ReadOptions::max_line_bytes); Matrix Market \
             lines are short, so the file is probably not Matrix Market text"
        ),
    )
}

pub(super) fn parse_error(line: u64, message: String) -> MatrixMarketError {
    MatrixMarketError::Parse { line, message }
}

/// Offending input for an error message, shortened and made printable.
pub(super) fn quote(bytes: &[u8]) -> String {
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
pub(super) fn split_exact<'a, const N: usize>(
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
pub(super) fn parse_u64(word: &[u8]) -> Option<u64> {
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

pub(super) fn parse_header<R: BufRead>(
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
