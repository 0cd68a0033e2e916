//! Windows of a CSR matrix: a range of its rows × a range of its columns, read in place.
//!
//! A chunk of a product is rows of A times a column panel of B ([`ProductChunk`]); every
//! backend computes it from the same two windows, made and checked once by
//! [`ProductChunk::windows`] above the backends. A window is generic over what holds the
//! matrix: a host matrix (`&Csr`), an operand ([`CsrOperand`], host or resident), or a
//! backend's own device storage, which a backend gets by [`CsrWindow::resolve`] (the ranges,
//! already checked, carry over). A window of a host matrix is read in place: its rows trimmed
//! to the column range, columns reported relative to the range's start
//! ([`CsrWindow::row_entries`]); [`CsrWindow::as_csr`] makes it a matrix of its own only where
//! a backend needs one (to upload it, say), and copies nothing when the window is the whole
//! matrix.

use std::borrow::Cow;
use std::ops::Range;

use super::resident::{CsrOperand, ResidentCsr};
use super::ProductChunk;
use crate::error::{Error, Result};
use crate::format::Csr;
use crate::scalar::Scalar;

/// What a window can be taken of: anything with a matrix's shape.
pub trait Shaped {
    /// `(rows, columns)`.
    fn shape(&self) -> (usize, usize);
}

impl<T: Scalar> Shaped for &Csr<T> {
    fn shape(&self) -> (usize, usize) {
        Csr::shape(self)
    }
}

impl<T: Scalar> Shaped for &ResidentCsr<T> {
    fn shape(&self) -> (usize, usize) {
        ResidentCsr::shape(self)
    }
}

impl<T: Scalar> Shaped for CsrOperand<'_, T> {
    fn shape(&self) -> (usize, usize) {
        CsrOperand::shape(self)
    }
}

/// Rows `rows` × columns `cols` of a matrix held by `M` (`&Csr`, [`CsrOperand`], or a
/// backend's device storage), without copying it. The ranges lie inside the matrix: every
/// constructor checks them against its shape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CsrWindow<M> {
    matrix: M,
    rows: Range<usize>,
    cols: Range<usize>,
}

fn outside(what: &str, range: &Range<usize>, len: usize, unit: &str) -> Error {
    Error::InvalidArgument(format!(
        "{what} {range:?} is outside a matrix of {len} {unit}"
    ))
}

impl<M: Shaped> CsrWindow<M> {
    /// Rows `rows` × columns `cols` of `matrix`; [`Error::InvalidArgument`] unless both lie
    /// inside it.
    pub fn new(matrix: M, rows: Range<usize>, cols: Range<usize>) -> Result<Self> {
        let (nrows, ncols) = matrix.shape();
        if rows.start > rows.end || rows.end > nrows {
            return Err(outside("row range", &rows, nrows, "rows"));
        }
        if cols.start > cols.end || cols.end > ncols {
            return Err(outside("column range", &cols, ncols, "columns"));
        }
        Ok(CsrWindow { matrix, rows, cols })
    }

    /// All of `matrix`.
    pub fn whole(matrix: M) -> Self {
        let (nrows, ncols) = matrix.shape();
        CsrWindow {
            matrix,
            rows: 0..nrows,
            cols: 0..ncols,
        }
    }

    /// Rows `rows` of `matrix`, all of its columns.
    pub fn rows_of(matrix: M, rows: Range<usize>) -> Result<Self> {
        let ncols = matrix.shape().1;
        Self::new(matrix, rows, 0..ncols)
    }

    /// Columns `cols` of `matrix`, all of its rows.
    pub fn columns_of(matrix: M, cols: Range<usize>) -> Result<Self> {
        let nrows = matrix.shape().0;
        Self::new(matrix, 0..nrows, cols)
    }

    /// Whether the window holds every row of the matrix.
    pub fn all_rows(&self) -> bool {
        self.rows.start == 0 && self.rows.end == self.matrix.shape().0
    }

    /// Whether the window holds every column of the matrix, so that its rows need no trimming.
    pub fn all_columns(&self) -> bool {
        self.cols.start == 0 && self.cols.end == self.matrix.shape().1
    }

    /// Whether the window is the whole matrix.
    pub fn is_whole(&self) -> bool {
        self.all_rows() && self.all_columns()
    }

    /// The same window of another holder of the matrix, for a backend resolving an operand to
    /// its own storage: `f` maps the holder, the ranges carry over. A holder of another shape
    /// is [`Error::Internal`] (a bug of the backend).
    pub fn resolve<N: Shaped>(self, f: impl FnOnce(M) -> Result<N>) -> Result<CsrWindow<N>> {
        let shape = self.matrix.shape();
        let matrix = f(self.matrix)?;
        if matrix.shape() != shape {
            return Err(Error::Internal {
                backend: crate::BackendKind::Host,
                what: format!(
                    "a window's matrix resolved to a {:?} matrix from a {shape:?} one",
                    matrix.shape()
                ),
            });
        }
        Ok(CsrWindow {
            matrix,
            rows: self.rows,
            cols: self.cols,
        })
    }
}

impl<M> CsrWindow<M> {
    /// What holds the matrix (all of it, not only the window).
    pub fn matrix(&self) -> &M {
        &self.matrix
    }
    /// The matrix's rows in the window.
    pub fn rows(&self) -> Range<usize> {
        self.rows.clone()
    }
    /// The matrix's columns in the window.
    pub fn cols(&self) -> Range<usize> {
        self.cols.clone()
    }
    /// The window's rows.
    pub fn nrows(&self) -> usize {
        self.rows.len()
    }
    /// The window's columns.
    pub fn ncols(&self) -> usize {
        self.cols.len()
    }
    /// The window's `(rows, columns)`.
    pub fn shape(&self) -> (usize, usize) {
        (self.nrows(), self.ncols())
    }
    /// The first column in the window, as a column index (matrices have at most `u32::MAX`
    /// columns, which the formats check, so it is exact).
    pub fn col_lo(&self) -> u32 {
        self.cols.start as u32
    }
    /// One past the last column in the window, as a column index.
    pub fn col_hi(&self) -> u32 {
        self.cols.end as u32
    }
}

impl<'a, T: Scalar> CsrWindow<&'a Csr<T>> {
    /// Row `i` of the window (row `rows().start + i` of the matrix): its entries inside the
    /// column range, column indices as the matrix has them (subtract [`CsrWindow::col_lo`] for
    /// the window's). `i` must be below [`CsrWindow::nrows`].
    #[inline]
    pub fn row(&self, i: usize) -> (&'a [u32], &'a [T]) {
        let m: &'a Csr<T> = self.matrix;
        let (cols, vals) = m.row(self.rows.start + i);
        if self.cols.start == 0 && self.cols.end == m.ncols() {
            return (cols, vals);
        }
        let (lo, hi) = (self.col_lo(), self.col_hi());
        let s = cols.partition_point(|&j| j < lo);
        let e = s + cols[s..].partition_point(|&j| j < hi);
        (&cols[s..e], &vals[s..e])
    }

    /// Row `i` of the window as `(column, value)` pairs, columns relative to the window's
    /// first.
    pub fn row_entries(&self, i: usize) -> impl Iterator<Item = (u32, T)> + 'a {
        let (cols, vals) = self.row(i);
        let lo = self.col_lo();
        cols.iter().zip(vals).map(move |(&j, &v)| (j - lo, v))
    }

    /// Stored entries inside the window (a binary search per row unless the window holds
    /// every column).
    pub fn nnz(&self) -> u64 {
        if self.all_columns() {
            let offsets = self.matrix.row_offsets();
            return offsets[self.rows.end] - offsets[self.rows.start];
        }
        (0..self.nrows()).map(|i| self.row(i).0.len() as u64).sum()
    }

    /// The window as a matrix of its own (columns shifted to start at 0): a copy, what
    /// `Csr::rows(rows).column_panel(cols)` gives.
    pub fn to_csr(&self) -> Result<Csr<T>> {
        let nnz = self.nnz();
        let len = crate::host::entry_count(nnz, "a window of a matrix")?;
        let mut offsets = crate::host::try_with_capacity(self.nrows() + 1, "window row offsets")?;
        let mut cols = crate::host::try_with_capacity(len, "window column indices")?;
        let mut vals = crate::host::try_with_capacity(len, "window values")?;
        offsets.push(0u64);
        let lo = self.col_lo();
        for i in 0..self.nrows() {
            let (c, v) = self.row(i);
            cols.extend(c.iter().map(|&j| j - lo));
            vals.extend_from_slice(v);
            offsets.push(cols.len() as u64);
        }
        // SAFETY: rows of a CSR matrix, each trimmed to columns `lo..hi` and shifted by `lo`,
        // stay sorted and without repeats, and lie inside `0..ncols`; the offsets count them.
        Ok(unsafe { Csr::from_parts_unchecked(self.nrows(), self.ncols(), offsets, cols, vals) })
    }

    /// The window as a matrix: the matrix itself where the window is all of it, else
    /// [`CsrWindow::to_csr`].
    pub fn as_csr(&self) -> Result<Cow<'a, Csr<T>>> {
        if self.is_whole() {
            return Ok(Cow::Borrowed(self.matrix));
        }
        self.to_csr().map(Cow::Owned)
    }
}

impl ProductChunk {
    /// The two windows the chunk multiplies: its rows of `a` (all columns) and its columns of
    /// `b` (all rows). [`Error::ShapeMismatch`] unless `a` and `b` chain,
    /// [`Error::InvalidArgument`] for a chunk outside the product.
    pub fn windows<M: Shaped + Copy>(&self, a: M, b: M) -> Result<(CsrWindow<M>, CsrWindow<M>)> {
        super::check::shapes("SpGEMM", a.shape(), b.shape())?;
        let inside = |w: Result<CsrWindow<M>>| {
            w.map_err(|_| {
                Error::InvalidArgument(format!(
                    "chunk (rows {:?}, columns {:?}) is outside the {}×{} product",
                    self.rows,
                    self.cols,
                    a.shape().0,
                    b.shape().1
                ))
            })
        };
        Ok((
            inside(CsrWindow::rows_of(a, self.rows.clone()))?,
            inside(CsrWindow::columns_of(b, self.cols.clone()))?,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generate;

    fn sample() -> Csr<f64> {
        // 4×5:
        // [1 0 2 0 3]
        // [0 0 0 0 0]
        // [0 4 0 5 0]
        // [6 0 0 0 7]
        Csr::try_new(
            4,
            5,
            vec![0, 3, 3, 5, 7],
            vec![0, 2, 4, 1, 3, 0, 4],
            vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0],
        )
        .unwrap()
    }

    #[test]
    fn ranges_outside_the_matrix_are_errors() {
        let m = sample();
        // Reversed ranges, built from variables: what a caller computing them might pass.
        let (three, two) = (3, 2);
        for (rows, cols) in [
            (0..5, 0..5),
            (0..4, 0..6),
            (three..two, 0..5),
            (0..4, three + 1..three),
        ] {
            let r = CsrWindow::new(&m, rows.clone(), cols.clone());
            assert!(
                matches!(r, Err(Error::InvalidArgument(_))),
                "{rows:?} × {cols:?}: {r:?}"
            );
        }
        assert!(CsrWindow::rows_of(&m, 2..5).is_err());
        assert!(CsrWindow::columns_of(&m, 5..6).is_err());
        assert!(CsrWindow::new(&m, 4..4, 5..5).is_ok());
    }

    #[test]
    fn rows_are_trimmed_and_columns_relative() {
        let m = sample();
        let w = CsrWindow::new(&m, 0..4, 1..4).unwrap();
        assert_eq!(w.shape(), (4, 3));
        assert!(w.all_rows() && !w.all_columns() && !w.is_whole());
        assert_eq!(w.row(0), (&[2u32][..], &[2.0][..]));
        assert_eq!(w.row(1).0.len(), 0);
        assert_eq!(w.row(2), (&[1u32, 3][..], &[4.0, 5.0][..]));
        assert_eq!(w.row(3).0.len(), 0);
        let relative: Vec<(u32, f64)> = w.row_entries(2).collect();
        assert_eq!(relative, vec![(0, 4.0), (2, 5.0)]);
        assert_eq!(w.nnz(), 3);
        let rows = CsrWindow::rows_of(&m, 2..4).unwrap();
        assert_eq!(rows.row(1), (&[0u32, 4][..], &[6.0, 7.0][..]));
        assert_eq!(rows.nnz(), 4);
    }

    #[test]
    fn empty_windows() {
        let m = sample();
        for (rows, cols) in [(2..2, 0..5), (0..4, 3..3), (1..2, 0..5), (0..0, 0..0)] {
            let w = CsrWindow::new(&m, rows.clone(), cols.clone()).unwrap();
            let c = w.to_csr().unwrap();
            assert_eq!(c.shape(), (rows.len(), cols.len()));
            assert_eq!(c.nnz(), 0, "{rows:?} × {cols:?}");
            assert_eq!(w.nnz(), 0);
        }
        let empty = Csr::<f64>::zeros(0, 0).unwrap();
        let w = CsrWindow::whole(&empty);
        assert!(w.is_whole());
        assert_eq!(w.to_csr().unwrap(), empty);
    }

    #[test]
    fn to_csr_is_the_copy_of_rows_and_panel() {
        let m = generate::uniform::<f64>(60, 80, 7, 3);
        for (rows, cols) in [
            (0..60, 0..80),
            (10..35, 0..80),
            (0..60, 17..52),
            (5..6, 79..80),
            (20..50, 0..1),
            (59..60, 30..31),
        ] {
            let w = CsrWindow::new(&m, rows.clone(), cols.clone()).unwrap();
            let copy = m
                .rows(rows.clone())
                .unwrap()
                .column_panel(cols.clone())
                .unwrap();
            assert_eq!(w.to_csr().unwrap(), copy, "{rows:?} × {cols:?}");
            assert_eq!(*w.as_csr().unwrap(), copy);
            assert_eq!(w.nnz(), copy.nnz());
        }
        let whole = CsrWindow::whole(&m);
        assert!(matches!(whole.as_csr().unwrap(), Cow::Borrowed(b) if std::ptr::eq(b, &m)));
    }

    /// The reference kernels behind only the required methods, so that `spgemm_chunks` is
    /// the plain protocol.
    struct Defaults;
    impl crate::Device for Defaults {
        fn info(&self) -> crate::DeviceInfo {
            crate::ReferenceBackend.info()
        }
        fn capabilities(&self) -> &crate::Capabilities {
            crate::ReferenceBackend.capabilities()
        }
        fn memory_space(&self) -> crate::MemorySpace {
            crate::MemorySpace::Host
        }
    }
    impl crate::Backend<f64> for Defaults {
        fn spgemm_checked(
            &self,
            a: CsrOperand<'_, f64>,
            b: CsrOperand<'_, f64>,
            options: &crate::SpgemmOptions,
            run: &crate::RunControl,
            _checked: crate::Validated,
        ) -> Result<Csr<f64>> {
            crate::ReferenceBackend.spgemm_with(a, b, options, run)
        }
        fn spmm_checked(
            &self,
            a: crate::SparseOperand<'_, f64>,
            b: crate::DenseOperand<'_, f64>,
            options: &crate::SpmmOptions,
            run: &crate::RunControl,
            _checked: crate::Validated,
        ) -> Result<crate::Dense<f64>> {
            crate::ReferenceBackend.spmm_with(a, b, options, run)
        }
        fn spmv_checked(
            &self,
            a: crate::SparseOperand<'_, f64>,
            x: crate::VectorOperand<'_, f64>,
            options: &crate::SpmvOptions,
            run: &crate::RunControl,
            _checked: crate::Validated,
        ) -> Result<Vec<f64>> {
            crate::ReferenceBackend.spmv_with(a, x, options, run)
        }
        fn residency(&self) -> crate::Residency<'_, f64> {
            crate::Residency::Host
        }
    }

    #[test]
    fn the_default_chunk_entry_point_multiplies_windows() {
        use crate::Backend;
        let a = generate::uniform::<f64>(40, 30, 4, 5);
        let b = generate::uniform::<f64>(30, 50, 4, 6);
        let resident = Defaults.upload(&b).unwrap();
        let chunks = [
            ProductChunk {
                rows: 0..40,
                cols: 0..50,
            },
            ProductChunk {
                rows: 7..29,
                cols: 0..50,
            },
            ProductChunk {
                rows: 0..40,
                cols: 11..12,
            },
            ProductChunk {
                rows: 3..3,
                cols: 20..45,
            },
        ];
        for b_operand in [CsrOperand::Host(&b), CsrOperand::Resident(&resident)] {
            let mut got = Vec::new();
            Defaults
                .spgemm_chunks(
                    (&a).into(),
                    b_operand,
                    &chunks,
                    &crate::SpgemmOptions::new(),
                    &crate::RunControl::new(),
                    &mut |c| {
                        got.push(c);
                        Ok(())
                    },
                )
                .unwrap();
            assert_eq!(got.len(), chunks.len());
            for c in got {
                let (wa, wb) = c.chunk.windows(&a, &b).unwrap();
                let want = crate::reference::spgemm::<f64, crate::PlusTimes>(
                    &wa.to_csr().unwrap(),
                    &wb.to_csr().unwrap(),
                )
                .unwrap();
                assert_eq!(c.product, want, "chunk {}", c.index);
            }
        }
    }

    #[test]
    fn product_chunks_check_their_windows() {
        let a = generate::uniform::<f64>(30, 20, 3, 1);
        let b = generate::uniform::<f64>(20, 40, 3, 2);
        let chunk = ProductChunk {
            rows: 5..25,
            cols: 10..30,
        };
        let (wa, wb) = chunk.windows(&a, &b).unwrap();
        assert_eq!((wa.rows(), wa.cols()), (5..25, 0..20));
        assert_eq!((wb.rows(), wb.cols()), (0..20, 10..30));
        let outside = ProductChunk {
            rows: 0..31,
            cols: 0..40,
        };
        assert!(matches!(
            outside.windows(&a, &b),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            chunk.windows(&a, &a),
            Err(Error::ShapeMismatch { .. })
        ));
        // An operand resolves to the same window of its host matrix.
        let op: CsrOperand<'_, f64> = (&a).into();
        let w = CsrWindow::rows_of(op, 3..9).unwrap();
        let host = w.resolve(|m| match m {
            CsrOperand::Host(m) => Ok(m),
            CsrOperand::Resident(_) => unreachable!(),
        });
        assert_eq!(host.unwrap().to_csr().unwrap(), a.rows(3..9).unwrap());
    }
}
