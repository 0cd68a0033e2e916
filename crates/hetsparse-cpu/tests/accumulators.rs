//! Products shaped to reach each accumulator of the CPU SpGEMM kernels (the conformance suite's
//! small operands only reach the sort and dense ones), every algorithm and the chunk entry
//! point, against the serial reference.

use hetsparse_core::format::{Coo, Csr, Dense, Layout, SparseRef};
use hetsparse_core::generate::{self, Rng};
use hetsparse_core::{
    reference, Backend, Complex, PlusTimes, ProductChunk, RunControl, Scalar, ScalarType,
    SpgemmAlgorithm,
};
use hetsparse_cpu::CpuBackend;

fn cpu() -> CpuBackend {
    CpuBackend::with_threads(2).expect("backend")
}

/// Same structure as the reference, values within a relative tolerance.
fn assert_matches<T: Scalar>(actual: &Csr<T>, expected: &Csr<T>, what: &str) {
    assert_eq!(actual.shape(), expected.shape(), "{what}: shape");
    assert_eq!(
        actual.row_offsets(),
        expected.row_offsets(),
        "{what}: row offsets"
    );
    assert_eq!(
        actual.col_indices(),
        expected.col_indices(),
        "{what}: columns"
    );
    // Half types round the f32 sum once: a different summation order may land one ulp away.
    let relative = match T::TYPE {
        ScalarType::F16 | ScalarType::Bf16 => 1e-2,
        _ => 1e-4,
    };
    for (k, (x, y)) in actual.values().iter().zip(expected.values()).enumerate() {
        let (xr, xi) = x.to_parts();
        let (yr, yi) = y.to_parts();
        let diff = ((xr - yr).powi(2) + (xi - yi).powi(2)).sqrt();
        assert!(
            diff <= relative * (1.0 + y.magnitude()),
            "{what}: value {k} is {x:?}, expected {y:?}"
        );
    }
}

/// Every algorithm, and chunks cutting C into row ranges and column panels, against the
/// reference.
fn check_product<T: Scalar>(a: &Csr<T>, b: &Csr<T>, what: &str) {
    let expected = reference::spgemm::<T, PlusTimes>(a, b).expect("reference");
    let cpu = cpu();
    for alg in [
        SpgemmAlgorithm::Auto,
        SpgemmAlgorithm::RowRow,
        SpgemmAlgorithm::ColumnRow,
    ] {
        let c = cpu.spgemm(a, b, alg).expect("spgemm");
        assert_matches(&c, &expected, &format!("{what} {alg:?}"));
    }
    let (m, n) = (a.nrows(), b.ncols());
    let chunks = [
        ProductChunk {
            rows: 0..m / 2,
            cols: 0..n / 3,
        },
        ProductChunk {
            rows: m / 2..m,
            cols: n / 3..n,
        },
        ProductChunk {
            rows: 1..m,
            cols: 7..n - 5,
        },
    ];
    for alg in [SpgemmAlgorithm::RowRow, SpgemmAlgorithm::ColumnRow] {
        let mut delivered = 0;
        cpu.spgemm_chunks(
            a.into(),
            b.into(),
            &chunks,
            &alg.into(),
            &RunControl::new(),
            &mut |part| {
                // A chunk of C is C's block: rows of A times a column panel of B.
                let rows = expected.rows(part.chunk.rows.clone())?;
                let expected = rows.column_panel(part.chunk.cols.clone())?;
                assert_matches(
                    &part.product,
                    &expected,
                    &format!("{what} {alg:?} chunk {}", part.index),
                );
                delivered += 1;
                Ok(())
            },
        )
        .expect("chunks");
        assert_eq!(delivered, chunks.len());
    }
}

#[test]
fn sparse_rows_of_wide_products_use_the_hash_accumulator() {
    // ~10 × 20 products per row over 200 000 columns: too wide for a dense panel.
    let a = generate::uniform::<f64>(300, 60, 10, 1);
    let b = generate::uniform::<f64>(60, 200_000, 20, 2);
    check_product(&a, &b, "hash f64");
    let a = generate::uniform::<Complex<f32>>(100, 60, 10, 3);
    let b = generate::uniform::<Complex<f32>>(60, 200_000, 20, 4);
    check_product(&a, &b, "hash c32");
    // Wider than the column bitmap: the keys are sorted instead.
    let b = generate::uniform::<f64>(60, 3_000_000, 20, 24);
    let a = generate::uniform::<f64>(50, 60, 10, 25);
    check_product(&a, &b, "hash sorted f64");
}

#[test]
fn banded_rows_of_wide_products_use_a_dense_window() {
    // 11 entries per row, 121 products per row, over 120 000 columns: too wide for one dense
    // accumulator, but every row of C lies within 10 columns of the diagonal.
    let a = generate::banded::<f64>(120_000, 11, 21);
    check_product(&a, &a, "banded window f64");
    // B's band is shifted 20 000 columns left of its diagonal, and C is rectangular.
    let b = a.column_panel(20_000..120_000).expect("panel");
    let a = a.rows(0..90_000).expect("rows");
    check_product(&a, &b, "shifted window f64");
}

#[test]
fn scattered_rows_of_a_cache_sized_product_use_the_column_bitmap() {
    // Power-law rows from a few to thousands of products over 16 384 columns.
    let a = generate::rmat::<f64>(14, 8, 22);
    check_product(&a, &a, "bitmap f64");
    let a = generate::rmat::<Complex<f64>>(12, 8, 23);
    check_product(&a, &a, "bitmap c64");
}

#[test]
fn dense_rows_of_wide_products_go_panel_by_panel() {
    // 150 entries per row of A times rows of 2000 over 100 000 columns: 300 000 products per
    // row, several panels, each entry of A bringing hundreds of products per panel.
    let a = generate::uniform::<f64>(16, 300, 150, 5);
    let b = generate::uniform::<f64>(300, 100_000, 2000, 6);
    check_product(&a, &b, "panels f64");
    let a = generate::uniform::<hetsparse_core::f16>(8, 300, 150, 7);
    let b = generate::uniform::<hetsparse_core::f16>(300, 100_000, 2000, 8);
    check_product(&a, &b, "panels f16");
}

#[test]
fn long_rows_of_single_products_use_the_wide_dense_accumulator() {
    // Rows of A with 30 000 entries, rows of B with one: many products, little reuse.
    let a = generate::uniform::<f32>(6, 40_000, 30_000, 9);
    let b = generate::uniform::<f32>(40_000, 100_000, 1, 10);
    check_product(&a, &b, "wide dense f32");
}

#[test]
fn rows_beyond_the_expansion_budget_and_skewed_rows() {
    // A few rows of 1000 × 1500 products exceed Column-Row's expansion budget.
    let a = generate::skewed::<f64>(3000, 4, 3, 3, 11);
    let b = generate::uniform::<f64>(3000, 3000, 1500, 12);
    check_product(&a, &b, "skewed f64");
}

#[test]
fn unordered_coo_and_csc_multiply_by_scattering() {
    let a = generate::uniform::<f64>(500, 300, 7, 13);
    let coo = a.to_coo();
    // The same triplets in a scrambled order.
    let mut order: Vec<usize> = (0..coo.row_indices().len()).collect();
    let mut rng = Rng::new(14);
    for p in (1..order.len()).rev() {
        order.swap(p, rng.below(p as u64 + 1) as usize);
    }
    let pick = |v: &[u32]| order.iter().map(|&p| v[p]).collect::<Vec<u32>>();
    let scrambled = Coo::try_new(
        500,
        300,
        pick(coo.row_indices()),
        pick(coo.col_indices()),
        order.iter().map(|&p| coo.values()[p]).collect(),
    )
    .expect("coo");
    let x: Vec<f64> = (0..300).map(|i| (i % 7) as f64 - 3.0).collect();
    let expected = reference::spmv::<f64, PlusTimes>(&a, &x).expect("reference");
    let cpu = cpu();
    for m in [
        SparseRef::Coo(&scrambled),
        SparseRef::Csc(&hetsparse_core::Csc::from_csr(&a).unwrap()),
    ] {
        let y = cpu.spmv(m, &x).expect("spmv");
        for (u, v) in y.iter().zip(&expected) {
            assert!((u - v).abs() <= 1e-12 * (1.0 + v.abs()), "{u} vs {v}");
        }
        for layout in [Layout::RowMajor, Layout::ColMajor] {
            let d = Dense::from_fn(300, 5, layout, |i, j| (i * 3 + j) as f64 / 100.0).unwrap();
            let c = cpu.spmm(m, &d).expect("spmm");
            let e = reference::spmm::<f64, PlusTimes>(&a, &d).expect("reference");
            assert_eq!(c.layout(), layout);
            for (u, v) in c.data().iter().zip(e.data()) {
                assert!((u - v).abs() <= 1e-12 * (1.0 + v.abs()), "{u} vs {v}");
            }
        }
    }
}

#[test]
fn thread_counts_give_the_same_structure() {
    let (a, b) = generate::product_operands::<f64>(generate::MatrixClass::PowerLaw, 4000, 15);
    let one = CpuBackend::with_threads(1).expect("backend");
    let three = CpuBackend::with_threads(3).expect("backend");
    let x = one.spgemm(&a, &b, SpgemmAlgorithm::Auto).expect("spgemm");
    let y = three.spgemm(&a, &b, SpgemmAlgorithm::Auto).expect("spgemm");
    assert_eq!(x.row_offsets(), y.row_offsets());
    assert_eq!(x.col_indices(), y.col_indices());
    assert!(CpuBackend::with_threads(0).is_err());
}

#[test]
fn row_major_spmm_in_register_tiles_and_a_tail() {
    // 16-column tiles plus a tail of 4 and of 5 columns, and fewer columns than a tile.
    let a = generate::rmat::<f64>(9, 6, 16);
    let cpu = cpu();
    for n in [3, 20, 37] {
        let d = Dense::from_fn(a.ncols(), n, Layout::RowMajor, |i, j| {
            ((i * 31 + j * 7) % 97) as f64 / 97.0 - 0.5
        })
        .unwrap();
        let c = cpu.spmm(SparseRef::Csr(&a), &d).expect("spmm");
        let e = reference::spmm::<f64, PlusTimes>(&a, &d).expect("reference");
        assert_eq!(c.layout(), Layout::RowMajor);
        for (u, v) in c.data().iter().zip(e.data()) {
            assert!(
                (u - v).abs() <= 1e-12 * (1.0 + v.abs()),
                "{n} columns: {u} vs {v}"
            );
        }
    }
}
