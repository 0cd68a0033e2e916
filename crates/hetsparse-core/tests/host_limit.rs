//! Buffers sized by a dimension rather than by the entries, under a lowered host buffer limit
//! (this test binary is its own process, so the limit is this file's alone): every conversion
//! of a matrix with a few entries and `u32::MAX` rows or columns is `Error::OutOfMemory` with
//! the bytes it asked for, never an abort, whatever memory the machine running it has.

use hetsparse_core::format::{Bsr, Coo, Csc, Cspr, Csr, Dense, Dia, Layout, MAX_DIMENSION};
use hetsparse_core::{host, Backend, Error, FormatError, ReferenceBackend, SparseRef};

const LIMIT: u64 = 1 << 30;
const WIDE: usize = u32::MAX as usize;
/// `u32::MAX + 1` row offsets of 8 bytes.
const OFFSETS_BYTES: u64 = (WIDE as u64 + 1) * 8;

fn limited() {
    host::set_buffer_limit(LIMIT);
}

#[track_caller]
fn out_of_memory<R: std::fmt::Debug>(r: Result<R, Error>, bytes: u64) {
    match r {
        Err(Error::OutOfMemory {
            backend,
            needed_bytes,
            available_bytes,
            ..
        }) => {
            assert_eq!(backend, hetsparse_core::BackendKind::Host);
            assert_eq!(needed_bytes, bytes);
            assert_eq!(available_bytes, LIMIT);
        }
        other => panic!("expected out of memory for {bytes} bytes, got {other:?}"),
    }
}

fn one_wide_row() -> Csr<f64> {
    Csr::try_new(1, WIDE, vec![0, 1], vec![WIDE as u32 - 1], vec![3.0]).unwrap()
}

#[test]
fn transposes_of_a_wide_row() {
    limited();
    let row = one_wide_row();
    out_of_memory(row.transpose(), OFFSETS_BYTES);
    out_of_memory(Csc::from_csr(&row), OFFSETS_BYTES);
    let tall = Csc::try_new(WIDE, 1, vec![0, 1], vec![5], vec![1.0f64]).unwrap();
    out_of_memory(tall.to_csr(), OFFSETS_BYTES);
}

#[test]
fn conversions_of_a_tall_matrix() {
    limited();
    let coo = Coo::try_new(WIDE, 1, vec![7], vec![0], vec![1.0f64]).unwrap();
    out_of_memory(coo.to_csr(), OFFSETS_BYTES);
    out_of_memory(SparseRef::Coo(&coo).to_csr(), OFFSETS_BYTES);
    let dia = Dia::<f64>::try_new(WIDE, 1, vec![], vec![]).unwrap();
    out_of_memory(dia.to_csr(), OFFSETS_BYTES);
    let cspr = Cspr::try_new(WIDE, 1, vec![7], vec![1.0f64]).unwrap();
    out_of_memory(cspr.to_csr(), OFFSETS_BYTES);
    let bsr = Bsr::<f64>::try_new((WIDE, 1), 1, 1, vec![0, 0], vec![], vec![]).unwrap();
    out_of_memory(bsr.to_csr(), OFFSETS_BYTES);
    out_of_memory(Csr::<f64>::zeros(WIDE, 1), OFFSETS_BYTES);
    out_of_memory(Csr::<f64>::identity(WIDE), OFFSETS_BYTES);
    // An `array` matrix of no columns holds no values, but its CSR has a row offset per row.
    let no_columns = Dense::<f64>::try_new(WIDE, 0, Layout::ColMajor, vec![]).unwrap();
    out_of_memory(Csr::from_dense(&no_columns), OFFSETS_BYTES);
}

#[test]
fn blocks_and_diagonals_sized_by_the_shape() {
    limited();
    let row = one_wide_row();
    // One 1×u32::MAX block holds u32::MAX values for one entry.
    out_of_memory(Bsr::from_csr(&row, (1, WIDE)), WIDE as u64 * 8);
    // DIA's working flags: one byte per row and column.
    out_of_memory(Dia::from_csr(&row, u64::MAX), WIDE as u64 + 1);
    let mut coo = Coo::<f64>::new(1, 1).unwrap();
    out_of_memory(coo.try_reserve(1 << 40), 4 << 40);
}

#[test]
fn dense_shapes() {
    limited();
    let e = Dense::<f64>::try_new(0, usize::MAX, Layout::RowMajor, vec![]).unwrap_err();
    assert!(matches!(e, FormatError::ShapeOverflow { ncols, .. } if ncols == usize::MAX as u64));
    let e = Dense::<f64>::zeros(0, MAX_DIMENSION + 1, Layout::RowMajor).unwrap_err();
    assert!(
        matches!(e, Error::Format(FormatError::ShapeOverflow { .. })),
        "{e}"
    );
    out_of_memory(
        Dense::<f64>::zeros(WIDE, WIDE, Layout::RowMajor),
        (WIDE as u64 * WIDE as u64).saturating_mul(8),
    );
    out_of_memory(
        Dense::<f32>::from_fn(WIDE, 1, Layout::ColMajor, |_, _| 1.0),
        WIDE as u64 * 4,
    );
    assert_eq!(
        Dense::<f64>::zeros(300, 300, Layout::ColMajor)
            .unwrap()
            .data()
            .len(),
        90_000
    );
}

#[test]
fn the_reference_backend_refuses_results_before_converting() {
    limited();
    let coo = Coo::try_new(WIDE, 1, vec![7], vec![0], vec![1.0f64]).unwrap();
    out_of_memory(
        ReferenceBackend.spmv(SparseRef::Coo(&coo), &[2.0]),
        WIDE as u64 * 8,
    );
    let b = Dense::try_new(1, 2, Layout::RowMajor, vec![1.0, 2.0]).unwrap();
    out_of_memory(
        ReferenceBackend.spmm(SparseRef::Coo(&coo), &b),
        WIDE as u64 * 16,
    );
    // A result that fits alone, but not beside the CSR copy of a COO A: refused before either
    // is allocated; the same A in CSR (offsets already held) is multiplied.
    let rows = (LIMIT / 8 - 8) as usize;
    let coo = Coo::try_new(rows, 1, vec![7], vec![0], vec![1.0f64]).unwrap();
    out_of_memory(
        ReferenceBackend.spmv(SparseRef::Coo(&coo), &[2.0]),
        rows as u64 * 8 + (rows as u64 + 1) * 8,
    );
    let csr = coo.to_csr().unwrap();
    let y = ReferenceBackend.spmv(SparseRef::Csr(&csr), &[2.0]).unwrap();
    assert_eq!((y.len(), y[7]), (rows, 2.0));
    // A wide product of one entry needs no buffer of one slot per column.
    let one = Csr::try_new(1, 1, vec![0, 1], vec![0], vec![2.0]).unwrap();
    let c = ReferenceBackend
        .spgemm(&one, &one_wide_row(), hetsparse_core::SpgemmAlgorithm::Auto)
        .unwrap();
    assert_eq!(
        (c.col_indices(), c.values()),
        (&[WIDE as u32 - 1][..], &[6.0][..])
    );
}
