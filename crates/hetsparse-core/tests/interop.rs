//! Conversions to and from sprs, nalgebra-sparse, faer and ndarray (the features of the same
//! names): round trips on random and edge matrices, products through hetsparse compared with
//! each library's own, which parts move without a copy, and the errors at the boundary.
//!
//! The crate's dev-dependencies turn the four features on: `cargo test` runs these
//! (`cargo test -p hetsparse-core --test interop` alone).
#![cfg(any(
    feature = "sprs",
    feature = "nalgebra-sparse",
    feature = "faer",
    feature = "ndarray"
))]

use hetsparse_core::{generate, Complex, Csc, Csr, Dense, Layout, Scalar};

/// Empty, degenerate, 1×1, rectangular, with empty rows and an explicit zero, and random.
fn matrices<T: Scalar>() -> Vec<Csr<T>> {
    let v = |x: f64| T::from_f64(x);
    let mut out = vec![
        Csr::zeros(0, 0).unwrap(),
        Csr::zeros(0, 5).unwrap(),
        Csr::zeros(5, 0).unwrap(),
        Csr::zeros(1, 1).unwrap(),
        Csr::try_new(1, 1, vec![0, 1], vec![0], vec![v(2.5)]).unwrap(),
        Csr::try_new(
            3,
            4,
            vec![0, 2, 2, 4],
            vec![0, 3, 1, 2],
            vec![v(1.0), v(0.0), v(-3.0), v(4.0)],
        )
        .unwrap(),
        Csr::identity(6).unwrap(),
    ];
    for seed in 0..6u64 {
        let (r, c) = (1 + (seed as usize * 7) % 40, 1 + (seed as usize * 13) % 33);
        out.push(generate::uniform(r, c, 1 + seed as usize % 5, seed));
    }
    out
}

/// Largest difference between two matrices of one shape, relative to the largest entry.
fn max_rel_diff<T: Scalar>(a: &Csr<T>, b: &Csr<T>) -> f64 {
    assert_eq!(a.shape(), b.shape());
    let (da, db) = (
        a.to_dense(Layout::RowMajor).unwrap(),
        b.to_dense(Layout::RowMajor).unwrap(),
    );
    let mut scale = 1e-300f64;
    let mut diff = 0f64;
    for (&x, &y) in da.data().iter().zip(db.data()) {
        let ((xr, xi), (yr, yi)) = (x.to_parts(), y.to_parts());
        scale = scale.max(xr.hypot(xi));
        diff = diff.max((xr - yr).hypot(xi - yi));
    }
    diff / scale
}

fn product<T: Scalar>(a: &Csr<T>, b: &Csr<T>) -> Csr<T> {
    use hetsparse_core::{Backend, ReferenceBackend, SpgemmAlgorithm};
    ReferenceBackend
        .spgemm(a, b, SpgemmAlgorithm::Auto)
        .unwrap()
}

#[cfg(feature = "sprs")]
mod sprs_interop {
    use super::*;
    use hetsparse_core::interop::InteropError;
    use hetsparse_core::FormatError;
    use sprs::{CsMat, CsMatI};

    fn round_trip<T: Scalar>() {
        for m in matrices::<T>() {
            let s: CsMat<T> = m.clone().try_into().unwrap();
            assert!(s.is_csr());
            assert_eq!(s.shape(), m.shape());
            assert_eq!(Csr::try_from(s.clone()).unwrap(), m);
            // CSC storage converts to CSR by transposing, and to Csc by moving.
            let csc = s.to_csc();
            assert_eq!(Csr::try_from(csc.clone()).unwrap(), m);
            let ours = Csc::try_from(csc).unwrap();
            assert_eq!(ours.to_csr().unwrap(), m);
            let back: CsMat<T> = ours.try_into().unwrap();
            assert!(back.is_csc());
            assert_eq!(back.to_csr(), s);
            // Other index types.
            let narrow: CsMatI<T, u16, u32> = m.clone().try_into().unwrap();
            assert_eq!(Csr::try_from(narrow).unwrap(), m);
        }
    }

    #[test]
    fn round_trips_every_scalar() {
        round_trip::<f32>();
        round_trip::<f64>();
        round_trip::<Complex<f32>>();
        round_trip::<Complex<f64>>();
        round_trip::<hetsparse_core::f16>();
    }

    #[test]
    fn our_index_types_move_every_array() {
        let m = generate::uniform::<f64>(50, 40, 4, 9);
        let ptrs = (
            m.row_offsets().as_ptr(),
            m.col_indices().as_ptr(),
            m.values().as_ptr(),
        );
        let s: CsMatI<f64, u32, u64> = m.try_into().unwrap();
        assert_eq!(
            (
                s.indptr().raw_storage().as_ptr(),
                s.indices().as_ptr(),
                s.data().as_ptr()
            ),
            ptrs
        );
        let back = Csr::try_from(s).unwrap();
        assert_eq!(
            (
                back.row_offsets().as_ptr(),
                back.col_indices().as_ptr(),
                back.values().as_ptr()
            ),
            ptrs
        );
        // usize indices: the values still move.
        let s: CsMat<f64> = back.try_into().unwrap();
        assert_eq!(s.data().as_ptr(), ptrs.2);
        assert_eq!(Csr::try_from(s).unwrap().values().as_ptr(), ptrs.2);
    }

    #[test]
    fn product_matches_sprs() {
        for seed in 0..4u64 {
            let a = generate::uniform::<f64>(60, 45, 5, seed);
            let b = generate::uniform::<f64>(45, 70, 4, seed + 100);
            let (sa, sb): (CsMat<f64>, CsMat<f64>) =
                (a.clone().try_into().unwrap(), b.clone().try_into().unwrap());
            let theirs = Csr::try_from(&sa * &sb).unwrap();
            let ours = product(&Csr::try_from(sa).unwrap(), &Csr::try_from(sb).unwrap());
            assert!(max_rel_diff(&ours, &theirs) < 1e-14);
            let c = product(&a, &b);
            let sc: CsMat<f64> = c.try_into().unwrap();
            assert_eq!(Csr::try_from(sc).unwrap(), ours);
        }
    }

    #[test]
    fn too_wide_or_too_narrow_is_an_error() {
        // 5·10^9 columns do not fit u32 indices.
        let wide: CsMat<f64> = CsMat::new(
            (1, 5_000_000_000),
            vec![0, 1],
            vec![4_999_999_999],
            vec![1.0],
        );
        let e = Csr::try_from(wide).unwrap_err();
        assert!(
            matches!(e, InteropError::Format(FormatError::ShapeOverflow { .. })),
            "{e}"
        );
        // u16 indices cannot address column 70 000.
        let m = Csr::try_new(1, 70_001, vec![0, 1], vec![70_000], vec![1.0]).unwrap();
        let e = CsMatI::<f64, u16>::try_from(m).unwrap_err();
        match &e {
            InteropError::IndexOverflow {
                library: "sprs",
                position: 0,
                value,
                ..
            } => assert_eq!(value, "70000"),
            other => panic!("{other}"),
        }
        assert!(e.to_string().contains("70000"), "{e}");
    }
}

#[cfg(feature = "nalgebra-sparse")]
mod nalgebra_interop {
    use super::*;
    use hetsparse_core::interop::InteropError;
    use hetsparse_core::FormatError;
    use nalgebra_sparse::{CscMatrix, CsrMatrix};

    fn round_trip<T: Scalar>() {
        for m in matrices::<T>() {
            let n = CsrMatrix::try_from(m.clone()).unwrap();
            assert_eq!((n.nrows(), n.ncols()), m.shape());
            assert_eq!(n.values(), m.values());
            assert_eq!(Csr::try_from(n).unwrap(), m);
            let c = Csc::from_csr(&m).unwrap();
            let nc = CscMatrix::try_from(c.clone()).unwrap();
            assert_eq!(nc.row_indices().len() as u64, c.nnz());
            assert_eq!(Csc::try_from(nc).unwrap(), c);
        }
    }

    #[test]
    fn round_trips_every_scalar() {
        round_trip::<f32>();
        round_trip::<f64>();
        round_trip::<Complex<f32>>();
        round_trip::<Complex<f64>>();
        round_trip::<hetsparse_core::bf16>();
    }

    #[test]
    fn values_move() {
        let m = generate::uniform::<f64>(30, 30, 3, 1);
        let p = m.values().as_ptr();
        let n = CsrMatrix::try_from(m).unwrap();
        assert_eq!(n.values().as_ptr(), p);
        assert_eq!(Csr::try_from(n).unwrap().values().as_ptr(), p);
    }

    #[test]
    fn product_matches_nalgebra_sparse() {
        for seed in 0..4u64 {
            let a = generate::uniform::<f64>(50, 35, 4, seed);
            let b = generate::uniform::<f64>(35, 20, 3, seed + 50);
            let (na, nb) = (
                CsrMatrix::try_from(a.clone()).unwrap(),
                CsrMatrix::try_from(b.clone()).unwrap(),
            );
            let theirs = Csr::try_from(&na * &nb).unwrap();
            let ours = product(&Csr::try_from(na).unwrap(), &Csr::try_from(nb).unwrap());
            assert!(max_rel_diff(&ours, &theirs) < 1e-14);
            // Complex too.
            let ca: Csr<Complex<f64>> = generate::uniform(20, 20, 3, seed);
            let na = CsrMatrix::try_from(ca.clone()).unwrap();
            let theirs = Csr::try_from(&na * &na).unwrap();
            assert!(max_rel_diff(&product(&ca, &ca), &theirs) < 1e-14);
        }
    }

    #[test]
    fn too_wide_is_an_error() {
        let wide = CsrMatrix::try_from_csr_data(
            1,
            5_000_000_000,
            vec![0, 1],
            vec![4_000_000_000],
            vec![1.0],
        )
        .unwrap();
        let e = Csr::try_from(wide).unwrap_err();
        assert!(
            matches!(e, InteropError::Format(FormatError::ShapeOverflow { .. })),
            "{e}"
        );
    }
}

#[cfg(feature = "faer")]
mod faer_interop {
    use super::*;
    use faer::sparse::{SparseColMat, SparseRowMat, SymbolicSparseRowMat};
    use faer::Index;
    use hetsparse_core::interop::InteropError;

    fn round_trip<I: Index + 'static, T: Scalar>() {
        for m in matrices::<T>() {
            let f: SparseRowMat<I, T> = m.clone().try_into().unwrap();
            assert_eq!((f.nrows(), f.ncols()), m.shape());
            assert_eq!(f.val(), m.values());
            assert_eq!(Csr::try_from(f).unwrap(), m);
            let c = Csc::from_csr(&m).unwrap();
            let fc: SparseColMat<I, T> = c.clone().try_into().unwrap();
            assert_eq!(Csc::try_from(fc).unwrap(), c);
        }
    }

    #[test]
    fn round_trips_every_index_type_and_scalar() {
        round_trip::<u32, f64>();
        round_trip::<u64, f32>();
        round_trip::<usize, f64>();
        round_trip::<usize, Complex<f32>>();
        round_trip::<u32, Complex<f64>>();
        round_trip::<usize, hetsparse_core::f16>();
    }

    #[test]
    fn matching_index_arrays_move() {
        let m = generate::uniform::<f64>(30, 30, 3, 2);
        let (pi, pv) = (m.col_indices().as_ptr(), m.values().as_ptr());
        let f: SparseRowMat<u32, f64> = m.try_into().unwrap();
        assert_eq!(f.symbolic().col_idx().as_ptr(), pi);
        assert_eq!(f.val().as_ptr(), pv);
        let back = Csr::try_from(f).unwrap();
        assert_eq!(
            (back.col_indices().as_ptr(), back.values().as_ptr()),
            (pi, pv)
        );
        let po = back.row_offsets().as_ptr();
        let f: SparseRowMat<u64, f64> = back.try_into().unwrap();
        assert_eq!(f.symbolic().row_ptr().as_ptr(), po);
        assert_eq!(Csr::try_from(f).unwrap().row_offsets().as_ptr(), po);
    }

    #[test]
    fn unsorted_rows_and_row_counts_are_canonicalised() {
        // Row 0 holds columns 2, 0, 2 (the repeat is summed); row 1 is empty.
        let s = SymbolicSparseRowMat::<usize>::new_unsorted_checked(
            2,
            3,
            vec![0, 3, 3],
            None,
            vec![2, 0, 2],
        );
        let a = Csr::try_from(SparseRowMat::new(s, vec![1.0, 2.0, 3.0])).unwrap();
        assert_eq!(
            a,
            Csr::try_new(2, 3, vec![0, 2, 2], vec![0, 2], vec![2.0, 4.0]).unwrap()
        );
        // Per-row counts: row 0 uses 1 of its 2 slots, row 1 both of its 2.
        let s = SymbolicSparseRowMat::<u32>::new_checked(
            2,
            3,
            vec![0, 2, 4],
            Some(vec![1, 2]),
            vec![1, 7, 0, 2],
        );
        let a = Csr::try_from(SparseRowMat::new(s, vec![1.0, 9.0, 3.0, 4.0])).unwrap();
        assert_eq!(
            a,
            Csr::try_new(2, 3, vec![0, 1, 3], vec![1, 0, 2], vec![1.0, 3.0, 4.0]).unwrap()
        );
    }

    #[test]
    fn product_matches_faer() {
        for seed in 0..4u64 {
            let a = generate::uniform::<f64>(40, 30, 4, seed);
            let b = generate::uniform::<f64>(30, 25, 3, seed + 7);
            let fa: SparseColMat<usize, f64> = Csc::from_csr(&a).unwrap().try_into().unwrap();
            let fb: SparseColMat<usize, f64> = Csc::from_csr(&b).unwrap().try_into().unwrap();
            let theirs = Csc::try_from(&fa * &fb).unwrap().to_csr().unwrap();
            let (ca, cb) = (
                Csc::try_from(fa).unwrap().to_csr().unwrap(),
                Csc::try_from(fb).unwrap().to_csr().unwrap(),
            );
            assert!(max_rel_diff(&product(&ca, &cb), &theirs) < 1e-14);
        }
    }

    #[test]
    fn dimensions_past_faer_u32_range_are_an_error() {
        let wide = Csr::<f64>::zeros(1, 1 << 31).unwrap();
        let e = SparseRowMat::<u32, f64>::try_from(wide.clone()).unwrap_err();
        assert!(
            matches!(
                e,
                InteropError::IndexOverflow {
                    library: "faer",
                    position: 1,
                    ..
                }
            ),
            "{e}"
        );
        // u64 holds it.
        let f = SparseRowMat::<u64, f64>::try_from(wide.clone()).unwrap();
        assert_eq!(Csr::try_from(f).unwrap(), wide);
    }
}

#[cfg(feature = "ndarray")]
mod ndarray_interop {
    use super::*;
    use hetsparse_core::interop::InteropError;
    use hetsparse_core::FormatError;
    use ndarray::{s, Array2, ShapeBuilder};

    fn sample(nrows: usize, ncols: usize, layout: Layout) -> Dense<f64> {
        Dense::from_fn(nrows, ncols, layout, |i, j| (i * 100 + j) as f64 + 0.5).unwrap()
    }

    fn same(d: &Dense<f64>, a: &Array2<f64>) -> bool {
        d.shape() == a.dim()
            && (0..d.nrows()).all(|i| (0..d.ncols()).all(|j| d.get(i, j) == a[[i, j]]))
    }

    #[test]
    fn round_trips_move_the_buffer_in_both_layouts() {
        for layout in [Layout::RowMajor, Layout::ColMajor] {
            for (r, c) in [(0, 0), (0, 4), (4, 0), (1, 1), (3, 5), (17, 2)] {
                let d = sample(r, c, layout);
                let moved = d.clone();
                let p = moved.data().as_ptr();
                let a: Array2<f64> = moved.try_into().unwrap();
                assert!(same(&d, &a));
                if r * c > 0 {
                    assert_eq!(a.as_ptr(), p);
                }
                let back = Dense::try_from(a).unwrap();
                assert_eq!(back.shape(), (r, c));
                if r > 1 && c > 1 {
                    assert_eq!(back.layout(), layout);
                    assert_eq!(back.data().as_ptr(), p);
                }
                assert!(same(&back, &Array2::try_from(d).unwrap()));
            }
        }
    }

    #[test]
    fn other_layouts_and_views_are_copied() {
        let full = Array2::from_shape_fn((6, 8), |(i, j)| (i * 10 + j) as f64);
        // Every other column: not contiguous.
        let mut strided = full.clone();
        strided.slice_collapse(s![.., ..;2]);
        let d = Dense::try_from(strided.clone()).unwrap();
        assert_eq!(d.layout(), Layout::RowMajor);
        assert!(same(&d, &strided));
        // Rows 2..4: contiguous, but a part of the buffer.
        let mut rows = full.clone();
        rows.slice_collapse(s![2..4, ..]);
        let d = Dense::try_from(rows.clone()).unwrap();
        assert!(same(&d, &rows));
        // Views: row-major, transposed (column-major), strided.
        let d = Dense::try_from(full.view()).unwrap();
        assert_eq!(d.layout(), Layout::RowMajor);
        assert!(same(&d, &full));
        let t = full.t();
        let d = Dense::try_from(t).unwrap();
        assert_eq!(d.layout(), Layout::ColMajor);
        assert!(same(&d, &t.to_owned()));
        let v = full.slice(s![1..5;2, 3..]);
        assert!(same(&Dense::try_from(v).unwrap(), &v.to_owned()));
        // A Fortran-layout array moves as column-major.
        let f = Array2::<f64>::zeros((3, 4).f());
        assert_eq!(Dense::try_from(f).unwrap().layout(), Layout::ColMajor);
    }

    #[test]
    fn complex_and_f32_arrays() {
        let a = Array2::from_shape_fn((3, 2), |(i, j)| Complex::new(i as f32, j as f32));
        let d = Dense::try_from(a.clone()).unwrap();
        assert_eq!(Array2::try_from(d).unwrap(), a);
    }

    #[test]
    fn spmm_matches_ndarray_dot() {
        use hetsparse_core::{Backend, ReferenceBackend};
        for seed in 0..3u64 {
            let a = generate::uniform::<f64>(25, 30, 4, seed);
            let b = Array2::from_shape_fn((30, 7), |(i, j)| ((i * 7 + j) % 11) as f64 - 5.0);
            let c = ReferenceBackend
                .spmm((&a).into(), &Dense::try_from(b.view()).unwrap())
                .unwrap();
            let c: Array2<f64> = c.try_into().unwrap();
            let dense_a: Array2<f64> = a.to_dense(Layout::RowMajor).unwrap().try_into().unwrap();
            let expected = dense_a.dot(&b);
            let err = (&c - &expected).iter().fold(0f64, |m, x| m.max(x.abs()));
            assert!(err < 1e-12, "{err}");
        }
    }

    #[test]
    fn too_wide_view_is_an_error() {
        let one = [1.0f64];
        let base = ndarray::ArrayView2::from_shape((1, 1), &one).unwrap();
        let wide = base.broadcast((1, (u32::MAX as usize) + 1)).unwrap();
        let e = Dense::try_from(wide).unwrap_err();
        assert!(
            matches!(e, InteropError::Format(FormatError::ShapeOverflow { .. })),
            "{e}"
        );
    }
}
