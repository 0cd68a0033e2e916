//! The writer: `coordinate … general` for sparse matrices, `array … general` for dense ones.

use std::fmt;
use std::io::{BufWriter, Write};

use crate::error::MatrixMarketError;
use crate::format::{Dense, SparseRef};
use crate::scalar::Scalar;

/// Writes a sparse matrix of any format as `coordinate real general` (`complex` for complex
/// scalars), one line per stored entry with 1-based indices.
///
/// A [`Coo`](crate::format::Coo) is written triplet by triplet in its own order, repeated
/// entries included (a reader sums them); other formats are written row by row through CSR.
/// The output is buffered internally, so `w` may be an unbuffered file. Lines are formatted in
/// blocks on every core of the current rayon pool and written in order.
pub fn write_sparse<'a, T: Scalar, W: Write>(
    w: W,
    a: impl Into<SparseRef<'a, T>>,
) -> Result<(), MatrixMarketError> {
    let a = a.into();
    let (nrows, ncols) = a.shape();
    let _span = tracing::debug_span!("matrix_market::write_sparse", nrows, ncols).entered();
    let mut w = BufWriter::new(w);
    let field = field_keyword::<T>();
    let header = |w: &mut BufWriter<W>, nnz: u64| {
        write!(
            w,
            "%%MatrixMarket matrix coordinate {field} general\n% written by hetsparse\n\
             {nrows} {ncols} {nnz}\n"
        )
    };
    match a {
        SparseRef::Coo(c) => {
            header(&mut w, c.nnz())?;
            let (rows, cols, values) = (c.row_indices(), c.col_indices(), c.values());
            write_blocks(&mut w, values.len(), |range, out| {
                for k in range {
                    entry_line(out, u64::from(rows[k]), cols[k], values[k]);
                }
            })?;
        }
        other => {
            // The only way the conversion fails is memory for the CSR copy.
            let csr = other.to_csr().map_err(|e| match e {
                crate::Error::OutOfMemory {
                    what, needed_bytes, ..
                } => MatrixMarketError::OutOfMemory { what, needed_bytes },
                other => MatrixMarketError::Unsupported(other.to_string()),
            })?;
            header(&mut w, csr.nnz())?;
            let offsets = csr.row_offsets();
            let (cols, values) = (csr.col_indices(), csr.values());
            write_blocks(&mut w, values.len(), |range, out| {
                // The row of the block's first entry, then row by row.
                let mut i = offsets.partition_point(|&o| o <= range.start as u64) - 1;
                for k in range {
                    while offsets[i + 1] <= k as u64 {
                        i += 1;
                    }
                    entry_line(out, i as u64, cols[k], values[k]);
                }
            })?;
        }
    }
    w.flush()?;
    Ok(())
}

/// Writes a dense matrix as `array real general` (`complex` for complex scalars): every value,
/// column by column, whatever the matrix's [`Layout`](crate::format::Layout).
pub fn write_dense<T: Scalar, W: Write>(w: W, a: &Dense<T>) -> Result<(), MatrixMarketError> {
    let (nrows, ncols) = a.shape();
    let _span = tracing::debug_span!("matrix_market::write_dense", nrows, ncols).entered();
    let mut w = BufWriter::new(w);
    let field = field_keyword::<T>();
    write!(
        w,
        "%%MatrixMarket matrix array {field} general\n% written by hetsparse\n{nrows} {ncols}\n"
    )?;
    // Column-major position k is row k % nrows of column k / nrows.
    let total = nrows.saturating_mul(ncols);
    write_blocks(&mut w, total, |range, out| {
        for k in range {
            value_line(out, a.get(k % nrows, k / nrows));
        }
    })?;
    w.flush()?;
    Ok(())
}

/// Entries per formatting task.
const BLOCK_ENTRIES: usize = 1 << 15;

/// Formats entries `0..count` in blocks on every core of the current rayon pool and writes
/// the blocks in order; at most two windows of a few blocks per thread are held at a time.
/// The calling thread writes one window while the pool formats the next: writing the text
/// out is one thread's work, and with 16 threads formatting it was as long as the formatting.
fn write_blocks<W: Write>(
    w: &mut W,
    count: usize,
    format: impl Fn(std::ops::Range<usize>, &mut Vec<u8>) + Sync,
) -> Result<(), MatrixMarketError> {
    use rayon::prelude::*;
    let blocks = count.div_ceil(BLOCK_ENTRIES);
    let window = 4 * rayon::current_num_threads().max(1);
    let format_window = |first: usize| -> Vec<Vec<u8>> {
        let last = (first + window).min(blocks);
        (first..last)
            .into_par_iter()
            .map(|b| {
                let range = b * BLOCK_ENTRIES..((b + 1) * BLOCK_ENTRIES).min(count);
                let mut out = Vec::with_capacity(range.len() * 48);
                format(range, &mut out);
                out
            })
            .collect()
    };
    let write_window = |w: &mut W, texts: &[Vec<u8>]| -> std::io::Result<()> {
        texts.iter().try_for_each(|t| w.write_all(t))
    };
    let mut ready = format_window(0);
    let mut first = ready.len();
    while first < blocks {
        let mut next = Vec::new();
        // The scope runs its body on this thread (`w` need not be Send) and returns once the
        // spawned formatting is done too.
        let written = rayon::in_place_scope(|scope| {
            scope.spawn(|_| next = format_window(first));
            write_window(w, &ready)
        });
        written?;
        first += next.len();
        ready = next;
    }
    write_window(w, &ready)?;
    Ok(())
}

/// One `row column value` line, 1-based.
#[inline]
fn entry_line<T: Scalar>(out: &mut Vec<u8>, row: u64, col: u32, v: T) {
    decimal(out, row + 1);
    out.push(b' ');
    decimal(out, u64::from(col) + 1);
    out.push(b' ');
    value_line(out, v);
}

/// A value (two for complex scalars) and the line's end.
#[inline]
fn value_line<T: Scalar>(out: &mut Vec<u8>, v: T) {
    let (re, im) = v.to_parts();
    real(out, re);
    if T::TYPE.is_complex() {
        out.push(b' ');
        real(out, im);
    }
    out.push(b'\n');
}

/// An f64 as [`Real`] writes it. Whole numbers below 2^53 (integer and pattern matrices read
/// as reals, counts) take the integer path: the same digits, without the float formatter,
/// which made integer and pattern files the slowest to write.
#[inline]
fn real(out: &mut Vec<u8>, x: f64) {
    const EXACT: f64 = 9_007_199_254_740_992.0; // 2^53
    if x.fract() == 0.0 && x.abs() < EXACT && x != 0.0 {
        if x < 0.0 {
            out.push(b'-');
        }
        decimal(out, x.abs() as u64);
    } else {
        // Writing into a Vec cannot fail.
        let _ = write!(out, "{}", Real(x));
    }
}

/// A decimal integer, without going through `fmt`.
#[inline]
fn decimal(out: &mut Vec<u8>, mut x: u64) {
    let mut digits = [0u8; 20];
    let mut k = digits.len();
    loop {
        k -= 1;
        digits[k] = b'0' + (x % 10) as u8;
        x /= 10;
        if x == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[k..]);
}

fn field_keyword<T: Scalar>() -> &'static str {
    if T::TYPE.is_complex() {
        "complex"
    } else {
        "real"
    }
}

/// An f64 in the shortest text that parses back to the same value. Rust's `{}` and `{:e}` are
/// both shortest round-trip; positional notation is kept for moderate magnitudes because it is
/// what people expect to read, exponent notation elsewhere so that 1e300 is not 301 digits.
struct Real(f64);

impl fmt::Display for Real {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let x = self.0;
        let magnitude = x.abs();
        if x == 0.0 || !x.is_finite() || (1e-4..1e16).contains(&magnitude) {
            write!(f, "{x}")
        } else {
            write!(f, "{x:e}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_numbers_are_written_as_the_float_formatter_writes_them() {
        let two53 = 9_007_199_254_740_992.0;
        for x in [
            1.0,
            -1.0,
            3.0,
            -42.0,
            1e15,
            -1e15,
            two53 - 1.0,
            two53,
            two53 + 2.0,
            1e16,
            1e300,
            0.0,
            -0.0,
            0.5,
            -2.5,
            1e-5,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
        ] {
            let mut out = Vec::new();
            real(&mut out, x);
            assert_eq!(
                String::from_utf8(out).unwrap(),
                Real(x).to_string(),
                "{x:e}"
            );
        }
    }
}
