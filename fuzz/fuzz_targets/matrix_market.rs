//! Arbitrary bytes into the Matrix Market reader, as `f64` and as `Complex<f64>`. The reader must
//! never panic, hang or abort; whatever it accepts must write and read back to the same matrix,
//! bit for bit (NaN payloads and signs aside, which text does not keep), and convert to CSR or
//! fail with an error. Memory is bounded by `ReadOptions::max_bytes` (set below to what the
//! fuzzer's `-malloc_limit_mb` allows), not by skipping large matrices.
#![no_main]

use hetsparse_core::matrix_market::{self, MatrixMarket, ReadOptions};
use hetsparse_core::{Complex, Coo, Dense, Scalar};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = matrix_market::read_header(data);
    round_trip::<f64>(data);
    round_trip::<Complex<f64>>(data);
});

/// Most bytes a matrix may take: the reader refuses larger ones at the size line. A quarter of
/// the `-malloc_limit_mb=256` the README runs with: the round trip holds a few copies, and a
/// single allocation past the fuzzer's limit is reported as a crash.
const MAX_BYTES: u64 = 64 << 20;

fn round_trip<T: Scalar>(data: &[u8]) {
    let options = ReadOptions::default().with_max_bytes(MAX_BYTES);
    // Through CSR first: the limit covers the CSR arrays too, so a file that announces
    // 4294967295 rows is an error here, not an abort.
    if let Ok(csr) = matrix_market::read_csr_with::<T, _>(data, &options) {
        let mut bytes = Vec::new();
        matrix_market::write_sparse(&mut bytes, &csr).expect("writing to a Vec cannot fail");
        let back = matrix_market::read_csr_with::<T, _>(&bytes[..], &options)
            .expect("CSR reads back");
        assert_eq!(back.shape(), csr.shape());
        assert_eq!(back.row_offsets(), csr.row_offsets());
        assert_eq!(back.col_indices(), csr.col_indices());
        assert!(back
            .values()
            .iter()
            .zip(csr.values())
            .all(|(&x, &y)| same(x, y)));
    }
    let Ok(m) = matrix_market::read_with::<T, _>(data, &options) else {
        return;
    };
    let mut bytes = Vec::new();
    match &m {
        MatrixMarket::Sparse(c) => matrix_market::write_sparse(&mut bytes, c),
        MatrixMarket::Dense(d) => matrix_market::write_dense(&mut bytes, d),
    }
    .expect("writing to a Vec cannot fail");
    let again = matrix_market::read_with::<T, _>(&bytes[..], &options).unwrap_or_else(|e| {
        panic!(
            "written file does not read back: {e}\n{}",
            String::from_utf8_lossy(&bytes)
        )
    });
    match (&m, &again) {
        (MatrixMarket::Sparse(a), MatrixMarket::Sparse(b)) => assert!(same_coo(a, b)),
        (MatrixMarket::Dense(a), MatrixMarket::Dense(b)) => assert!(same_dense(a, b)),
        _ => panic!("sparse and dense swapped in the round trip"),
    }
}

fn same<T: Scalar>(a: T, b: T) -> bool {
    let (ar, ai) = a.to_parts();
    let (br, bi) = b.to_parts();
    let eq = |x: f64, y: f64| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan());
    eq(ar, br) && eq(ai, bi)
}

fn same_coo<T: Scalar>(a: &Coo<T>, b: &Coo<T>) -> bool {
    a.shape() == b.shape()
        && a.row_indices() == b.row_indices()
        && a.col_indices() == b.col_indices()
        && a.values().len() == b.values().len()
        && a.values().iter().zip(b.values()).all(|(&x, &y)| same(x, y))
}

fn same_dense<T: Scalar>(a: &Dense<T>, b: &Dense<T>) -> bool {
    a.shape() == b.shape()
        && a.layout() == b.layout()
        && a.data().iter().zip(b.data()).all(|(&x, &y)| same(x, y))
}
