//! Arbitrary bytes into the Matrix Market reader, as `f64` and as `Complex<f64>`. The reader must
//! never panic, hang or allocate beyond the input; whatever it accepts must write and read back
//! to the same matrix, bit for bit (NaN payloads and signs aside, which text does not keep).
#![no_main]

use hetsparse_core::matrix_market::{self, MatrixMarket};
use hetsparse_core::{Complex, Coo, Dense, Scalar};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = matrix_market::read_header(data);
    round_trip::<f64>(data);
    round_trip::<Complex<f64>>(data);
});

/// Largest row count converted to CSR here: CSR stores an offset per row, so a tiny file with a
/// size line of 4294967295 rows would measure the allocator, not the reader.
const MAX_CSR_ROWS: usize = 1 << 16;

fn round_trip<T: Scalar>(data: &[u8]) {
    let Ok(m) = matrix_market::read::<T, _>(data) else {
        return;
    };
    let mut bytes = Vec::new();
    match &m {
        MatrixMarket::Sparse(c) => matrix_market::write_sparse(&mut bytes, c),
        MatrixMarket::Dense(d) => matrix_market::write_dense(&mut bytes, d),
    }
    .expect("writing to a Vec cannot fail");
    let again = matrix_market::read::<T, _>(&bytes[..]).unwrap_or_else(|e| {
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
    if m.shape().0 <= MAX_CSR_ROWS {
        let csr = m.into_csr();
        let mut bytes = Vec::new();
        matrix_market::write_sparse(&mut bytes, &csr).expect("writing to a Vec cannot fail");
        let back = matrix_market::read_csr::<T, _>(&bytes[..]).expect("CSR reads back");
        assert_eq!(back.shape(), csr.shape());
        assert_eq!(back.row_offsets(), csr.row_offsets());
        assert_eq!(back.col_indices(), csr.col_indices());
        assert!(back
            .values()
            .iter()
            .zip(csr.values())
            .all(|(&x, &y)| same(x, y)));
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
