//! Entry lines: a fast scanner over chunks of whole lines, run on every core, and the careful
//! per-line parser that it falls back to for anything unusual, which also words the errors.

use super::float;
use super::header::{line_too_long, parse_error, parse_u64, quote, split_exact};
use super::{Field, Format, Header, Symmetry};
use crate::error::MatrixMarketError;
use crate::scalar::Scalar;

/// A real value; Fortran `D` exponents are retried as `e`.
#[inline]
pub(super) fn parse_real(word: &[u8], line: u64, what: &str) -> Result<f64, MatrixMarketError> {
    fast_real(word)
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
pub(super) fn parse_integer(word: &[u8], line: u64) -> Result<f64, MatrixMarketError> {
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
pub(super) fn parse_index(
    word: &[u8],
    axis: &str,
    bound: u64,
    line: u64,
) -> Result<u32, MatrixMarketError> {
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
pub(super) fn real_value<T: Scalar>(
    field: Field,
    word: &[u8],
    line: u64,
) -> Result<T, MatrixMarketError> {
    let x = match field {
        Field::Integer => parse_integer(word, line)?,
        _ => parse_real(word, line, "a value")?,
    };
    Ok(T::from_f64(x))
}

/// The value of a `complex` entry, which only complex scalars reach (the reader refuses the
/// field for real ones before any entry is read).
#[inline]
pub(super) fn complex_value<T: Scalar>(
    re: &[u8],
    im: &[u8],
    line: u64,
) -> Result<T, MatrixMarketError> {
    let (re, im) = (
        parse_real(re, line, "a real part")?,
        parse_real(im, line, "an imaginary part")?,
    );
    T::try_from_parts(re, im).ok_or_else(|| {
        MatrixMarketError::Unsupported(format!("a complex value cannot be stored in {}", T::TYPE))
    })
}

/// One entry line parsed the careful way: `(row, column, value)` 0-based for `coordinate`
/// files, `(0, 0, value)` for `array` ones.
fn parse_entry_line<T: Scalar>(
    header: &Header,
    l: &[u8],
    line: u64,
) -> Result<(u32, u32, T), MatrixMarketError> {
    let (nrows, ncols) = (header.nrows, header.ncols);
    match (header.format, header.field) {
        (Format::Coordinate, Field::Pattern) => {
            let [r, c] = split_exact::<2>(l, line, "row column")?;
            Ok((
                parse_index(r, "row", nrows, line)?,
                parse_index(c, "column", ncols, line)?,
                T::from_f64(1.0),
            ))
        }
        (Format::Coordinate, Field::Real | Field::Integer) => {
            let [r, c, v] = split_exact::<3>(l, line, "row column value")?;
            Ok((
                parse_index(r, "row", nrows, line)?,
                parse_index(c, "column", ncols, line)?,
                real_value(header.field, v, line)?,
            ))
        }
        (Format::Coordinate, Field::Complex) => {
            let [r, c, re, im] = split_exact::<4>(l, line, "row column real imaginary")?;
            Ok((
                parse_index(r, "row", nrows, line)?,
                parse_index(c, "column", ncols, line)?,
                complex_value(re, im, line)?,
            ))
        }
        (Format::Array, Field::Complex) => {
            let [re, im] = split_exact::<2>(l, line, "real imaginary")?;
            Ok((0, 0, complex_value(re, im, line)?))
        }
        // `pattern` arrays are refused at the banner.
        (Format::Array, Field::Real | Field::Integer | Field::Pattern) => {
            let [v] = split_exact::<1>(l, line, "value")?;
            Ok((0, 0, real_value(header.field, v, line)?))
        }
    }
}

/// A cursor over one trimmed line for the fast path, which accepts only the plain forms
/// (unsigned decimal indices, single spaces or tabs between words) and leaves everything else
/// to [`parse_entry_line`].
struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    #[inline(always)]
    fn blanks(&mut self) -> bool {
        let start = self.pos;
        while let Some(b' ' | b'\t') = self.bytes.get(self.pos) {
            self.pos += 1;
        }
        self.pos > start
    }

    /// A 1-based index in `1..=bound`, returned 0-based; followed by a blank or the end.
    #[inline(always)]
    fn index(&mut self, bound: u64) -> Option<u32> {
        // Up to seven digits and the byte after them within the next eight bytes: all at once.
        if let Some(chunk) = self
            .bytes
            .get(self.pos..)
            .and_then(|t| t.first_chunk::<8>())
        {
            // Digits become 0..=9, every other byte 10 or more.
            let a = u64::from_le_bytes(*chunk) ^ 0x3030_3030_3030_3030;
            let non_digit =
                (((a & 0x7F7F_7F7F_7F7F_7F7F) + 0x7676_7676_7676_7676) | a) & 0x8080_8080_8080_8080;
            let n = non_digit.trailing_zeros() / 8;
            if n == 0 {
                return None;
            }
            if n < 8 {
                // The digits moved to the top bytes, zeros before them.
                let v = float::eight_digits(a << (64 - 8 * n));
                if v == 0 || v > bound {
                    return None;
                }
                self.pos += n as usize;
                return Some((v - 1) as u32);
            }
        }
        let start = self.pos;
        let mut v: u64 = 0;
        while let Some(&b) = self.bytes.get(self.pos) {
            let d = b.wrapping_sub(b'0');
            // u32::MAX has 10 digits: an eleventh means the index is out of range, and
            // stopping there keeps the sum from overflowing.
            if d > 9 || self.pos - start > 10 {
                break;
            }
            v = v * 10 + u64::from(d);
            self.pos += 1;
        }
        let digits = self.pos - start;
        if digits == 0 || digits > 10 || v == 0 || v > bound {
            return None;
        }
        Some((v - 1) as u32)
    }

    /// The next word: the bytes up to a blank or the end.
    #[inline(always)]
    fn word(&mut self) -> &'a [u8] {
        let start = self.pos;
        while let Some(&b) = self.bytes.get(self.pos) {
            if matches!(b, b' ' | b'\t' | b'\r' | b'\n') {
                break;
            }
            self.pos += 1;
        }
        &self.bytes[start..self.pos]
    }

    /// Past trailing blanks and a line end (`\n`, `\r\n`, or the end of the text), if that is
    /// what comes next.
    #[inline(always)]
    fn line_end(&mut self) -> bool {
        self.blanks();
        match self.bytes.get(self.pos) {
            None => true,
            Some(b'\n') => {
                self.pos += 1;
                true
            }
            Some(b'\r') if self.bytes.get(self.pos + 1) == Some(&b'\n') => {
                self.pos += 2;
                true
            }
            _ => false,
        }
    }
}

/// A real value as `str::parse::<f64>` reads it (bit for bit): our exact fast path for plain
/// decimals, std for the rest.
#[inline(always)]
fn fast_real(word: &[u8]) -> Option<f64> {
    float::parse_f64(word).or_else(|| std::str::from_utf8(word).ok()?.parse().ok())
}

impl Cursor<'_> {
    /// An integer value at the cursor, read in place up to 17 digits (the caller checks what
    /// follows), else as a word by std.
    #[inline(always)]
    fn integer(&mut self) -> Option<i64> {
        let start = self.pos;
        let negative = match self.bytes.get(self.pos) {
            Some(b'-') => {
                self.pos += 1;
                true
            }
            Some(b'+') => {
                self.pos += 1;
                false
            }
            _ => false,
        };
        let digits = self.pos;
        let mut v: i64 = 0;
        while let Some(&b) = self.bytes.get(self.pos) {
            let d = b.wrapping_sub(b'0');
            if d > 9 || self.pos - digits == 18 {
                break;
            }
            v = v * 10 + i64::from(d);
            self.pos += 1;
        }
        match self.pos - digits {
            1..=17 => Some(if negative { -v } else { v }),
            _ => {
                self.pos = start;
                std::str::from_utf8(self.word()).ok()?.parse().ok()
            }
        }
    }

    /// A real value at the cursor, read in place by the exact fast path when it can (what
    /// follows is checked by the caller: a blank or the line end), else as a word by std.
    #[inline(always)]
    fn real(&mut self) -> Option<f64> {
        if let Some((v, len)) = float::parse_prefix(&self.bytes[self.pos..]) {
            self.pos += len;
            return Some(v);
        }
        fast_real(self.word())
    }
}

#[inline(always)]
fn fast_value<T: Scalar>(field: Field, c: &mut Cursor<'_>) -> Option<T> {
    match field {
        Field::Pattern => Some(T::from_f64(1.0)),
        Field::Real => Some(T::from_f64(c.real()?)),
        Field::Integer => Some(T::from_f64(c.integer()? as f64)),
        Field::Complex => {
            let re = c.real()?;
            if !c.blanks() {
                return None;
            }
            let im = c.real()?;
            T::try_from_parts(re, im)
        }
    }
}

/// A plain entry line starting at the cursor, which is left after its line end; `None` for
/// anything the careful parser must look at (leading blanks, comments, signs, errors, ...).
#[inline(always)]
fn fast_entry<T: Scalar>(header: &Header, c: &mut Cursor<'_>) -> Option<(u32, u32, T)> {
    let (i, j) = match header.format {
        Format::Coordinate => {
            let i = c.index(header.nrows)?;
            if !c.blanks() {
                return None;
            }
            let j = c.index(header.ncols)?;
            if header.field != Field::Pattern && !c.blanks() {
                return None;
            }
            (i, j)
        }
        Format::Array => (0, 0),
    };
    let v = fast_value(header.field, c)?;
    c.line_end().then_some((i, j, v))
}

/// What one chunk of whole lines holds: its entries (symmetric partners included, right after
/// their entry, as the serial reader stored them), how many lines and entry lines it has, and
/// the first error in it, with its line number counted from the chunk's first line (1).
pub(super) struct ParsedChunk<T> {
    pub(super) rows: Vec<u32>,
    pub(super) cols: Vec<u32>,
    pub(super) values: Vec<T>,
    /// Lines in the chunk, up to the error if there is one.
    pub(super) lines: u64,
    /// Entry lines (neither blank nor comment) before the error, if any.
    pub(super) entries: u64,
    pub(super) error: Option<MatrixMarketError>,
}

/// Whether a trimmed line is an entry rather than blank or a comment.
#[inline(always)]
pub(super) fn is_content(trimmed: &[u8]) -> bool {
    !matches!(trimmed.first(), None | Some(b'%'))
}

/// Splits `bytes` into lines (the last may lack its newline) and calls `f` with each line's
/// 1-based number and bytes, newline excluded, until `f` returns false.
#[inline(always)]
pub(super) fn for_each_line(bytes: &[u8], mut f: impl FnMut(u64, &[u8]) -> bool) {
    let mut start = 0;
    let mut line = 0;
    while start < bytes.len() {
        let end = bytes[start..]
            .iter()
            .position(|&b| b == b'\n')
            .map_or(bytes.len(), |k| start + k);
        line += 1;
        if !f(line, &bytes[start..end]) {
            return;
        }
        start = end + 1;
    }
}

/// Parses a chunk of whole lines of entries. Coordinate chunks fill rows, columns and values;
/// array chunks fill values only.
pub(super) fn parse_chunk<T: Scalar>(
    header: &Header,
    bytes: &[u8],
    max_line_bytes: usize,
) -> ParsedChunk<T> {
    // Room for lines as long as the first, with a margin; the arrays grow if the guess is
    // short (counting the newlines first took a fifth of the parsing time).
    let first_line = bytes
        .iter()
        .take(4096)
        .position(|&b| b == b'\n')
        .map_or(64, |k| k + 1);
    let lines_guess = bytes.len() / first_line.max(4) * 5 / 4 + 16;
    let capacity = lines_guess
        * if header.symmetry == Symmetry::General {
            1
        } else {
            2
        };
    let coordinate = header.format == Format::Coordinate;
    let index_capacity = if coordinate { capacity } else { 0 };
    let mut out = ParsedChunk {
        rows: Vec::with_capacity(index_capacity),
        cols: Vec::with_capacity(index_capacity),
        values: Vec::with_capacity(capacity),
        lines: 0,
        entries: 0,
        error: None,
    };
    let mut pos = 0;
    let mut line = 0;
    while pos < bytes.len() {
        line += 1;
        out.lines = line;
        let start = pos;
        let mut c = Cursor { bytes, pos };
        let fast = fast_entry::<T>(header, &mut c);
        // A line that the fast path took is at most its length (the newline included).
        let (i, j, v) = match fast {
            Some(e) if c.pos - start <= max_line_bytes => {
                pos = c.pos;
                e
            }
            _ => {
                let end = bytes[start..]
                    .iter()
                    .position(|&b| b == b'\n')
                    .map_or(bytes.len(), |k| start + k);
                pos = end + 1;
                let raw = &bytes[start..end];
                if raw.len() > max_line_bytes {
                    out.error = Some(line_too_long(line, max_line_bytes));
                    break;
                }
                let l = raw.trim_ascii();
                if !is_content(l) {
                    continue;
                }
                match parse_entry_line::<T>(header, l, line) {
                    Ok(e) => e,
                    Err(e) => {
                        out.error = Some(e);
                        break;
                    }
                }
            }
        };
        if !coordinate {
            out.values.push(v);
            out.entries += 1;
            continue;
        }
        if i != j {
            let partner = match header.symmetry {
                Symmetry::General => None,
                Symmetry::Symmetric => Some(v),
                Symmetry::SkewSymmetric => Some(v.neg()),
                Symmetry::Hermitian => Some(v.conj()),
            };
            out.rows.push(i);
            out.cols.push(j);
            out.values.push(v);
            if let Some(w) = partner {
                out.rows.push(j);
                out.cols.push(i);
                out.values.push(w);
            }
        } else if header.symmetry == Symmetry::SkewSymmetric {
            out.error = Some(parse_error(
                line,
                format!(
                    "diagonal entry ({}, {}) in a skew-symmetric file, whose diagonal is zero \
                     and not stored",
                    u64::from(i) + 1,
                    u64::from(j) + 1
                ),
            ));
            break;
        } else {
            out.rows.push(i);
            out.cols.push(j);
            out.values.push(v);
        }
        out.entries += 1;
    }
    out
}
