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
/// The output is buffered internally, so `w` may be an unbuffered file.
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
            let triplets = c.row_indices().iter().zip(c.col_indices()).zip(c.values());
            for ((&i, &j), &v) in triplets {
                writeln!(w, "{} {} {}", u64::from(i) + 1, u64::from(j) + 1, Value(v))?;
            }
        }
        other => {
            let csr = other.to_csr();
            header(&mut w, csr.nnz())?;
            for i in 0..nrows {
                let (cols, vals) = csr.row(i);
                for (&j, &v) in cols.iter().zip(vals) {
                    writeln!(w, "{} {} {}", i as u64 + 1, u64::from(j) + 1, Value(v))?;
                }
            }
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
    for j in 0..ncols {
        for i in 0..nrows {
            writeln!(w, "{}", Value(a.get(i, j)))?;
        }
    }
    w.flush()?;
    Ok(())
}

fn field_keyword<T: Scalar>() -> &'static str {
    if T::TYPE.is_complex() {
        "complex"
    } else {
        "real"
    }
}

/// A value as Matrix Market text: the real part, and the imaginary part for complex scalars.
struct Value<T>(T);

impl<T: Scalar> fmt::Display for Value<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (re, im) = self.0.to_parts();
        if T::TYPE.is_complex() {
            write!(f, "{} {}", Real(re), Real(im))
        } else {
            write!(f, "{}", Real(re))
        }
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
