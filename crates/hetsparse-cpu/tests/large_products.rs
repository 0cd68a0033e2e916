//! A product with more than 2^32 intermediate products (past both the i32 and the u32 limit)
//! is computed correctly.
//!
//! A (512 × K, every entry stored) times B (K × 512, every entry stored) with K = 16 400 has
//! 512 · 16 400 · 512 ≈ 4.3 · 10⁹ products but only 512² entries in C, so the operands take
//! about 130 MB and the result is small. Values are small integers, so every partial sum is an
//! integer below 2^24 and exact in f32: the check is exact, against closed-form computations
//! that do not go through any hetsparse kernel.

use hetsparse_core::format::Csr;
use hetsparse_core::{analysis, Backend, ProductChunk, RunControl, SpgemmAlgorithm};
use hetsparse_cpu::CpuBackend;

const P: usize = 512;
const K: usize = 16_400;
const Q: usize = 512;

fn a_value(i: usize, k: usize) -> f32 {
    ((i * 7 + k * 3) % 11) as f32 - 5.0
}

fn b_value(k: usize, j: usize) -> f32 {
    ((k * 5 + j * 2) % 13) as f32 - 6.0
}

/// An `nrows × ncols` matrix with every entry stored, values from `f`.
fn full(nrows: usize, ncols: usize, f: impl Fn(usize, usize) -> f32) -> Csr<f32> {
    let offsets: Vec<u64> = (0..=nrows as u64).map(|i| i * ncols as u64).collect();
    let cols: Vec<u32> = (0..nrows).flat_map(|_| 0..ncols as u32).collect();
    let vals: Vec<f32> = (0..nrows)
        .flat_map(|i| (0..ncols).map(move |j| (i, j)))
        .map(|(i, j)| f(i, j))
        .collect();
    Csr::try_new(nrows, ncols, offsets, cols, vals).expect("full matrix")
}

#[test]
fn more_than_two_to_the_32_products() {
    let a = full(P, K, a_value);
    let b = full(K, Q, b_value);
    let products = analysis::total_products(&a, &b).expect("analysis");
    assert_eq!(products, (P * K * Q) as u64);
    assert!(products > u64::from(u32::MAX));

    let cpu = CpuBackend::new().expect("backend");
    let c = cpu.spgemm(&a, &b, SpgemmAlgorithm::Auto).expect("spgemm");
    assert_eq!(c.shape(), (P, Q));
    assert_eq!(c.nnz(), (P * Q) as u64);
    assert!(c
        .row_offsets()
        .iter()
        .enumerate()
        .all(|(i, &o)| o == (i * Q) as u64));

    // Row sums: Σ_j C[i, j] = Σ_k A[i, k] · (Σ_j B[k, j]), every term an exact integer.
    let b_row_sums: Vec<f64> = (0..K)
        .map(|k| (0..Q).map(|j| f64::from(b_value(k, j))).sum())
        .collect();
    for i in 0..P {
        let expected: f64 = (0..K)
            .map(|k| f64::from(a_value(i, k)) * b_row_sums[k])
            .sum();
        let actual: f64 = c.row(i).1.iter().map(|&v| f64::from(v)).sum();
        assert_eq!(actual, expected, "row sum {i}");
    }
    // A few entries by their dot products.
    for (i, j) in [(0, 0), (1, 511), (300, 7), (511, 256), (128, 129)] {
        let expected: f64 = (0..K)
            .map(|k| f64::from(a_value(i, k)) * f64::from(b_value(k, j)))
            .sum();
        assert_eq!(
            f64::from(c.get(i, j).expect("entry")),
            expected,
            "C[{i}, {j}]"
        );
    }

    // The chunk entry point on the same operands: a row range times a column panel.
    let chunk = ProductChunk {
        rows: 100..356,
        cols: 200..400,
    };
    cpu.spgemm_chunks(
        (&a).into(),
        (&b).into(),
        &[chunk],
        &SpgemmAlgorithm::RowRow.into(),
        &RunControl::new(),
        &mut |part| {
            let (i, j) = (5, 17);
            let expected: f64 = (0..K)
                .map(|k| f64::from(a_value(100 + i, k)) * f64::from(b_value(k, 200 + j)))
                .sum();
            assert_eq!(part.product.nnz(), 256 * 200);
            assert_eq!(f64::from(part.product.get(i, j).expect("entry")), expected);
            Ok(())
        },
    )
    .expect("chunks");
}
