//! Matrix Market reading and writing: every error path with its line number, the tolerated
//! variations, symmetry expansion, round trips for every format × field × symmetry, gzip, the
//! fixture files in `tests/data`, and property-based round trips.
//!
//! One test program with its modules, so that the reader is compiled once for all of them:
//! `parallel` (files of many chunks, any thread count) and `limits` (hostile input).

#[path = "matrix_market/limits.rs"]
mod limits;
#[path = "matrix_market/parallel.rs"]
mod parallel;

use std::io::{BufReader, Write};
use std::path::PathBuf;

use flate2::write::GzEncoder;
use flate2::Compression;
use hetsparse_core::matrix_market::{
    self, Field, Format, Header, MatrixMarket, ReadOptions, Symmetry,
};
use hetsparse_core::{Complex, Coo, Csc, Csr, Dense, Layout, MatrixMarketError, Scalar};
use proptest::prelude::*;

type C64 = Complex<f64>;

fn read_str<T: Scalar>(s: &str) -> Result<MatrixMarket<T>, MatrixMarketError> {
    matrix_market::read(s.as_bytes())
}

/// Asserts that reading `s` as f64 fails at `line` with a message containing every needle.
#[track_caller]
fn assert_parse_error(s: &str, line: u64, needles: &[&str]) {
    match read_str::<f64>(s) {
        Err(MatrixMarketError::Parse { line: l, message }) => {
            assert_eq!(l, line, "wrong line for `{message}`");
            for n in needles {
                assert!(message.contains(n), "`{message}` does not mention `{n}`");
            }
        }
        other => panic!("expected a parse error at line {line}, got {other:?}"),
    }
}

fn data_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("hetsparse-mm-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Equal values, with NaN equal to NaN (the text `NaN` drops the sign and payload).
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
    let (r, c) = a.shape();
    a.shape() == b.shape() && (0..r).all(|i| (0..c).all(|j| same(a.get(i, j), b.get(i, j))))
}

fn sparse<T: Scalar>(m: MatrixMarket<T>) -> Coo<T> {
    match m {
        MatrixMarket::Sparse(c) => c,
        MatrixMarket::Dense(_) => panic!("expected a sparse matrix"),
    }
}

fn dense<T: Scalar>(m: MatrixMarket<T>) -> Dense<T> {
    match m {
        MatrixMarket::Dense(d) => d,
        MatrixMarket::Sparse(_) => panic!("expected a dense matrix"),
    }
}

// ---------------------------------------------------------------------------------------------
// Errors, each with its line.

#[test]
fn banner_errors() {
    assert_parse_error("", 1, &["banner", "empty file"]);
    assert_parse_error("\n", 1, &["banner"]);
    assert_parse_error("3 3 1\n1 1 1\n", 1, &["banner", "found `3 3 1`"]);
    assert_parse_error(
        "%MatrixMarket matrix coordinate real general\n1 1 0\n",
        1,
        &["banner"],
    );
    assert_parse_error(
        "%%MatrixMarket matrix coordinate real\n1 1 0\n",
        1,
        &["banner", "coordinate real"],
    );
    assert_parse_error(
        "%%MatrixMarket matrix coordinate real general extra\n1 1 0\n",
        1,
        &["banner"],
    );
    assert_parse_error(
        "%%MatrixMarket vector coordinate real general\n1 1 0\n",
        1,
        &["object `matrix`", "found `vector`"],
    );
    assert_parse_error(
        "%%MatrixMarket matrix sparse real general\n1 1 0\n",
        1,
        &["unknown format `sparse`", "coordinate, array"],
    );
    assert_parse_error(
        "%%MatrixMarket matrix coordinate double general\n1 1 0\n",
        1,
        &["unknown field `double`", "real, integer, complex, pattern"],
    );
    assert_parse_error(
        "%%MatrixMarket matrix coordinate real upper\n1 1 0\n",
        1,
        &["unknown symmetry `upper`", "skew-symmetric"],
    );
}

#[test]
fn invalid_banner_combinations_are_refused() {
    assert_parse_error(
        "%%MatrixMarket matrix array pattern general\n1 1\n",
        1,
        &["array", "pattern"],
    );
    assert_parse_error(
        "%%MatrixMarket matrix coordinate real hermitian\n1 1 0\n",
        1,
        &["hermitian", "complex"],
    );
    assert_parse_error(
        "%%MatrixMarket matrix coordinate integer hermitian\n1 1 0\n",
        1,
        &["hermitian", "complex"],
    );
    assert_parse_error(
        "%%MatrixMarket matrix coordinate pattern skew-symmetric\n1 1 0\n",
        1,
        &["pattern", "skew-symmetric"],
    );
    assert_parse_error(
        "%%MatrixMarket matrix coordinate pattern hermitian\n1 1 0\n",
        1,
        &["pattern", "hermitian"],
    );
}

#[test]
fn size_line_errors() {
    let coo = "%%MatrixMarket matrix coordinate real general\n% comment\n";
    assert_parse_error(coo, 3, &["size line", "end of the file"]);
    assert_parse_error(&format!("{coo}\n%\n"), 5, &["size line", "end of the file"]);
    assert_parse_error(&format!("{coo}3 3\n"), 3, &["expected 3 values", "found 2"]);
    assert_parse_error(
        &format!("{coo}3 3 1 1\n"),
        3,
        &["expected 3 values", "found 4"],
    );
    assert_parse_error(&format!("{coo}3 x 1\n"), 3, &["number of columns", "`x`"]);
    assert_parse_error(&format!("{coo}-3 3 1\n"), 3, &["number of rows", "`-3`"]);
    assert_parse_error(
        &format!("{coo}3 3 1.5\n"),
        3,
        &["number of entries", "`1.5`"],
    );
    assert_parse_error(
        &format!("{coo}4294967296 1 0\n"),
        3,
        &["4294967296 rows", "4294967295"],
    );
    assert_parse_error(
        &format!("{coo}1 99999999999999999999999 0\n"),
        3,
        &["number of columns"],
    );
    let arr = "%%MatrixMarket matrix array real general\n";
    assert_parse_error(
        &format!("{arr}3 3 9\n"),
        2,
        &["expected 2 values", "found 3"],
    );
    assert_parse_error(
        &format!("{arr}18446744073709551615 18446744073709551615\n"),
        2,
        &["rows", "supported"],
    );
    let sym = "%%MatrixMarket matrix coordinate real symmetric\n";
    assert_parse_error(&format!("{sym}3 4 0\n"), 2, &["must be square", "3×4"]);
    let skew = "%%MatrixMarket matrix array real skew-symmetric\n";
    assert_parse_error(&format!("{skew}2 1\n"), 2, &["must be square"]);
}

#[test]
fn entry_errors() {
    let h = "%%MatrixMarket matrix coordinate real general\n% c\n3 4 2\n";
    assert_parse_error(&format!("{h}1 1\n"), 4, &["expected 3 values", "found 2"]);
    assert_parse_error(
        &format!("{h}1 1 1 1\n"),
        4,
        &["expected 3 values", "found 4"],
    );
    assert_parse_error(&format!("{h}1 1 abc\n"), 4, &["a real number", "`abc`"]);
    assert_parse_error(&format!("{h}x 1 1\n"), 4, &["row index", "`x`"]);
    assert_parse_error(&format!("{h}1 -1 1\n"), 4, &["column index", "`-1`"]);
    assert_parse_error(&format!("{h}0 1 1\n"), 4, &["row index 0", "1-based"]);
    assert_parse_error(&format!("{h}1 0 1\n"), 4, &["column index 0", "1-based"]);
    assert_parse_error(&format!("{h}4 1 1\n"), 4, &["row index 4", "3 rows"]);
    assert_parse_error(&format!("{h}1 5 1\n"), 4, &["column index 5", "4 columns"]);
    assert_parse_error(&format!("{h}1 1 1\n\n% c\n2 2 x\n"), 7, &["`x`"]);

    let int = "%%MatrixMarket matrix coordinate integer general\n2 2 1\n";
    assert_parse_error(&format!("{int}1 1 1.5\n"), 3, &["integer", "`1.5`"]);
    let cplx = "%%MatrixMarket matrix coordinate complex general\n2 2 1\n";
    match matrix_market::read::<C64, _>(format!("{cplx}1 1 1\n").as_bytes()) {
        Err(MatrixMarketError::Parse { line: 3, message }) => {
            assert!(message.contains("expected 4 values"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    match matrix_market::read::<C64, _>(format!("{cplx}1 1 1 i\n").as_bytes()) {
        Err(MatrixMarketError::Parse { line: 3, message }) => {
            assert!(message.contains("imaginary part"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    let pat = "%%MatrixMarket matrix coordinate pattern general\n2 2 1\n";
    assert_parse_error(
        &format!("{pat}1 1 1\n"),
        3,
        &["expected 2 values", "found 3"],
    );
    let arr = "%%MatrixMarket matrix array real general\n1 2\n";
    assert_parse_error(
        &format!("{arr}1 2\n"),
        3,
        &["expected 1 value `value`", "found 2"],
    );
    assert_parse_error(&format!("{arr}1\nnope\n"), 4, &["a real number", "`nope`"]);
}

#[test]
fn invalid_utf8_is_a_parse_error_at_its_line() {
    let mut bytes = b"%%MatrixMarket matrix coordinate real general\n1 1 1\n1 1 ".to_vec();
    bytes.extend([0xff, 0xfe, b'\n']);
    match matrix_market::read::<f64, _>(&bytes[..]) {
        Err(MatrixMarketError::Parse { line: 3, message }) => {
            assert!(message.contains("a real number"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    match matrix_market::read::<f64, _>(&b"\xfe\xff%%MatrixMarket\n"[..]) {
        Err(MatrixMarketError::Parse { line: 1, message }) => {
            assert!(message.contains("banner"), "{message}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn long_offending_words_are_shortened_in_messages() {
    let word = "9".repeat(1000);
    let s = format!("%%MatrixMarket matrix coordinate real general\n1 1 1\n1 1 {word}x\n");
    match read_str::<f64>(&s) {
        Err(MatrixMarketError::Parse { line: 3, message }) => {
            assert!(message.len() < 200, "{message}");
            assert!(message.contains('…'));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn entry_counts_must_match() {
    let h = "%%MatrixMarket matrix coordinate real general\n3 3 3\n";
    assert_parse_error(
        &format!("{h}1 1 1\n2 2 2\n"),
        5,
        &["after 2 entries", "fewer than the 3 announced"],
    );
    assert_parse_error(
        &format!("{h}1 1 1\n2 2 2\n% trailing comment\n\n"),
        7,
        &["after 2 entries"],
    );
    // Exactly the announced count, the last line without a newline: fine.
    let a = read_str::<f64>(&format!("{h}1 1 1\n2 2 2\n3 3 3")).unwrap();
    assert_eq!(a.into_csr().unwrap().nnz(), 3);
}

#[test]
fn more_entries_than_announced() {
    let h = "%%MatrixMarket matrix coordinate real general\n3 3 2\n";
    assert_parse_error(
        &format!("{h}1 1 1\n2 2 2\n% c\n3 3 3\n"),
        6,
        &["more entries than the 2 announced", "line 2"],
    );
    let arr = "%%MatrixMarket matrix array real general\n1 2\n";
    assert_parse_error(&format!("{arr}1\n2\n3\n"), 5, &["more entries than the 2"]);
    let none = "%%MatrixMarket matrix coordinate real general\n3 3 0\n";
    assert_parse_error(&format!("{none}1 1 1\n"), 3, &["more entries than the 0"]);
}

#[test]
fn array_entry_counts_must_match() {
    let arr = "%%MatrixMarket matrix array real general\n2 3\n";
    assert_parse_error(
        &format!("{arr}1\n2\n3\n4\n5\n"),
        8,
        &["after 5 entries", "fewer than the 6 announced"],
    );
    // The lower triangle of a 3 × 3 symmetric matrix is 6 values, of a skew one 3.
    let sym = "%%MatrixMarket matrix array real symmetric\n3 3\n";
    assert_parse_error(&format!("{sym}1\n2\n3\n4\n5\n"), 8, &["fewer than the 6"]);
    let skew = "%%MatrixMarket matrix array real skew-symmetric\n3 3\n";
    assert_parse_error(
        &format!("{skew}1\n2\n3\n4\n"),
        6,
        &["more entries than the 3"],
    );
}

#[test]
fn skew_symmetric_diagonal_is_an_error() {
    let h = "%%MatrixMarket matrix coordinate real skew-symmetric\n3 3 2\n";
    assert_parse_error(
        &format!("{h}2 1 1\n3 3 0\n"),
        4,
        &["diagonal entry (3, 3)", "skew-symmetric"],
    );
}

/// Reading `s` as f64 without a memory limit fails at `line` with every needle.
#[track_caller]
fn assert_unlimited_parse_error(s: &str, line: u64, needles: &[&str]) {
    let unlimited = ReadOptions::default().with_max_bytes(u64::MAX);
    match matrix_market::read_with::<f64, _>(s.as_bytes(), &unlimited) {
        Err(MatrixMarketError::Parse { line: l, message }) => {
            assert_eq!(l, line, "wrong line for `{message}`");
            for n in needles {
                assert!(message.contains(n), "`{message}` does not mention `{n}`");
            }
        }
        other => panic!("expected a parse error at line {line}, got {other:?}"),
    }
}

#[test]
fn huge_announcements_fail_at_the_size_line_or_without_memory_limit_at_the_end() {
    // Each of these would need terabytes if the reader trusted the size line: with the default
    // limit (physical memory) they fail before any entry is read; without a limit they fail at
    // the end of the file, having allocated for what was read only.
    let cases = [
        (
            "%%MatrixMarket matrix coordinate real general\n4294967295 4294967295 1000000000000000\n1 1 1\n",
            4,
            &["after 1 entries", "fewer than the 1000000000000000"][..],
        ),
        (
            "%%MatrixMarket matrix coordinate real symmetric\n4294967295 4294967295 100000000000000000\n",
            3,
            &["after 0 entries"][..],
        ),
        (
            "%%MatrixMarket matrix array real general\n100000000 100000\n1\n2\n",
            5,
            &["after 2 entries", "fewer than the 10000000000000 announced"][..],
        ),
    ];
    for (text, line, needles) in cases {
        match read_str::<f64>(text) {
            Err(MatrixMarketError::MemoryLimit {
                needed_bytes,
                limit_bytes,
                ..
            }) => assert!(needed_bytes > limit_bytes),
            other => panic!("expected a memory limit error, got {other:?}"),
        }
        assert_unlimited_parse_error(text, line, needles);
    }
    // Arrays whose bytes do not even fit in 64 bits fail at the size line whatever the limit.
    let unlimited = ReadOptions::default().with_max_bytes(u64::MAX);
    for text in [
        "%%MatrixMarket matrix array real general\n4294967295 4294967295\n1\n",
        "%%MatrixMarket matrix array real symmetric\n4294967295 4294967295\n1\n",
    ] {
        assert!(matches!(
            matrix_market::read_with::<f64, _>(text.as_bytes(), &unlimited),
            Err(MatrixMarketError::MemoryLimit {
                needed_bytes: u64::MAX,
                ..
            })
        ));
    }
    // A large but empty sparse matrix is fine: COO has no per-row storage.
    let c = sparse(
        read_str::<f64>("%%MatrixMarket matrix coordinate real general\n4294967295 4294967295 0\n")
            .unwrap(),
    );
    assert_eq!(c.shape(), (4294967295, 4294967295));
    assert_eq!(c.nnz(), 0);
}

#[test]
fn complex_into_a_real_scalar_is_unsupported() {
    let s = "%%MatrixMarket matrix coordinate complex general\n1 1 1\n1 1 1 2\n";
    match read_str::<f64>(s) {
        Err(MatrixMarketError::Unsupported(m)) => {
            assert!(m.contains("complex") && m.contains("f64"), "{m}");
        }
        other => panic!("{other:?}"),
    }
    match matrix_market::read_csr::<f32, _>(s.as_bytes()) {
        Err(MatrixMarketError::Unsupported(m)) => assert!(m.contains("f32"), "{m}"),
        other => panic!("{other:?}"),
    }
    let c = matrix_market::read_csr::<Complex<f32>, _>(s.as_bytes()).unwrap();
    assert_eq!(c.get(0, 0), Some(Complex::new(1.0, 2.0)));
}

#[test]
fn missing_file_names_the_path() {
    let path = data_path("does-not-exist.mtx");
    match matrix_market::read_path::<f64>(&path) {
        Err(e @ MatrixMarketError::Open { .. }) => {
            assert!(e.to_string().contains("does-not-exist.mtx"), "{e}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn corrupt_gzip_is_an_io_error() {
    let mut gz = gzip(b"%%MatrixMarket matrix coordinate real general\n1 1 1\n1 1 1\n");
    let n = gz.len();
    gz.truncate(n - 6);
    assert!(matches!(
        matrix_market::read::<f64, _>(&gz[..]),
        Err(MatrixMarketError::Io(_))
    ));
    // 0x1f without the second magic byte: the decoder refuses the header, however the bytes
    // are buffered.
    for capacity in [1, 2, 64] {
        let r = BufReader::with_capacity(capacity, &b"\x1f\x00rest"[..]);
        assert!(matches!(
            matrix_market::read::<f64, _>(r),
            Err(MatrixMarketError::Io(_))
        ));
    }
}

// ---------------------------------------------------------------------------------------------
// What the reader tolerates and how it expands.

#[test]
fn whitespace_case_comments_crlf_and_bom_are_tolerated() {
    let s = "\u{feff}  %%matrixmarket MATRIX Coordinate REAL General  \r\n\
             % comment\r\n\
             \r\n\
             \t 2   3 3 \r\n\
             % between entries\r\n\
             1 1 1.0\r\n\
             \r\n\
             \t2 3   -2.5e1\r\n\
             2 1 4.0d-1\r\n\
             % trailing\r\n\
             \r\n";
    let a = read_str::<f64>(s).unwrap().into_csr().unwrap();
    assert_eq!(a.shape(), (2, 3));
    assert_eq!(a.get(0, 0), Some(1.0));
    assert_eq!(a.get(1, 2), Some(-25.0));
    assert_eq!(a.get(1, 0), Some(0.4));
    // No trailing newline after the last entry.
    let b = read_str::<f64>("%%MatrixMarket matrix coordinate real general\n1 1 1\n1 1 7").unwrap();
    assert_eq!(b.into_csr().unwrap().get(0, 0), Some(7.0));
}

#[test]
fn special_values_are_read() {
    let s = "%%MatrixMarket matrix array real general\n4 1\ninf\n-Infinity\nNaN\n-0\n";
    let d = dense(read_str::<f64>(s).unwrap());
    assert_eq!(d.get(0, 0), f64::INFINITY);
    assert_eq!(d.get(1, 0), f64::NEG_INFINITY);
    assert!(d.get(2, 0).is_nan());
    assert!(d.get(3, 0) == 0.0 && d.get(3, 0).is_sign_negative());
}

#[test]
fn coordinate_symmetries_expand() {
    let sym = "%%MatrixMarket matrix coordinate real symmetric\n3 3 3\n1 1 1\n3 1 2\n2 3 5\n";
    let c = sparse(read_str::<f64>(sym).unwrap());
    // Partners follow their entry; an upper-triangle entry is mirrored too.
    assert_eq!(c.row_indices(), &[0, 2, 0, 1, 2]);
    assert_eq!(c.col_indices(), &[0, 0, 2, 2, 1]);
    assert_eq!(c.values(), &[1.0, 2.0, 2.0, 5.0, 5.0]);

    let skew = "%%MatrixMarket matrix coordinate real skew-symmetric\n3 3 1\n3 1 2\n";
    let a = read_str::<f64>(skew).unwrap().into_csr().unwrap();
    assert_eq!(
        (a.get(2, 0), a.get(0, 2), a.nnz()),
        (Some(2.0), Some(-2.0), 2)
    );

    let herm = "%%MatrixMarket matrix coordinate complex hermitian\n2 2 2\n1 1 4 0\n2 1 1.5 -2\n";
    let a = read_str::<C64>(herm).unwrap().into_csr().unwrap();
    assert_eq!(a.get(0, 0), Some(C64::new(4.0, 0.0)));
    assert_eq!(a.get(1, 0), Some(C64::new(1.5, -2.0)));
    assert_eq!(a.get(0, 1), Some(C64::new(1.5, 2.0)));

    // Both triangles listed: each entry and its partner are summed.
    let both = "%%MatrixMarket matrix coordinate real symmetric\n2 2 2\n2 1 1\n1 2 3\n";
    let a = read_str::<f64>(both).unwrap().into_csr().unwrap();
    assert_eq!((a.get(0, 1), a.get(1, 0)), (Some(4.0), Some(4.0)));
}

#[test]
fn array_symmetries_expand() {
    // Lower triangle column by column: (1,1) (2,1) (3,1) (2,2) (3,2) (3,3).
    let sym = "%%MatrixMarket matrix array real symmetric\n3 3\n1\n2\n3\n4\n5\n6\n";
    let d = dense(read_str::<f64>(sym).unwrap());
    assert_eq!(d.layout(), Layout::ColMajor);
    assert_eq!(d.data(), &[1.0, 2.0, 3.0, 2.0, 4.0, 5.0, 3.0, 5.0, 6.0]);

    let skew = "%%MatrixMarket matrix array integer skew-symmetric\n3 3\n1\n2\n3\n";
    let d = dense(read_str::<f64>(skew).unwrap());
    assert_eq!(d.data(), &[0.0, 1.0, 2.0, -1.0, 0.0, 3.0, -2.0, -3.0, 0.0]);

    let herm = "%%MatrixMarket matrix array complex hermitian\n2 2\n1 0\n2 3\n4 0\n";
    let d = dense(read_str::<C64>(herm).unwrap());
    assert_eq!(d.get(1, 0), C64::new(2.0, 3.0));
    assert_eq!(d.get(0, 1), C64::new(2.0, -3.0));
    assert_eq!(d.get(1, 1), C64::new(4.0, 0.0));
}

#[test]
fn pattern_integer_and_duplicates() {
    let pat = "%%MatrixMarket matrix coordinate pattern general\n2 2 2\n1 2\n2 1\n";
    let a = read_str::<Complex<f32>>(pat).unwrap().into_csr().unwrap();
    assert_eq!(a.values(), &[Complex::new(1.0, 0.0); 2]);

    let int = "%%MatrixMarket matrix coordinate integer general\n2 2 3\n1 1 -7\n1 1 +2\n2 2 9007199254740993\n";
    let c = sparse(read_str::<C64>(int).unwrap());
    assert_eq!(c.nnz(), 3, "duplicates are kept in COO");
    let a = c.to_csr().unwrap();
    assert_eq!(a.get(0, 0), Some(C64::new(-5.0, 0.0)), "and summed in CSR");
    assert_eq!(a.get(1, 1), Some(C64::new(9007199254740992.0, 0.0)));
}

#[test]
fn sparse_and_dense_convert_into_each_other() {
    let arr = "%%MatrixMarket matrix array real general\n2 2\n1\n0\n0\n4\n";
    let a = matrix_market::read_csr::<f64, _>(arr.as_bytes()).unwrap();
    assert_eq!(a.nnz(), 2, "zeros of an array file are not stored");
    assert_eq!((a.get(0, 0), a.get(1, 1)), (Some(1.0), Some(4.0)));

    let coo = "%%MatrixMarket matrix coordinate real general\n2 3 3\n1 3 1\n2 1 2\n1 3 5\n";
    let d = read_str::<f64>(coo)
        .unwrap()
        .into_dense(Layout::RowMajor)
        .unwrap();
    assert_eq!(d.data(), &[0.0, 0.0, 6.0, 2.0, 0.0, 0.0]);
    let d = read_str::<f64>(arr)
        .unwrap()
        .into_dense(Layout::RowMajor)
        .unwrap();
    assert_eq!(d.data(), &[1.0, 0.0, 0.0, 4.0]);

    let huge = "%%MatrixMarket matrix coordinate real general\n4294967295 4294967295 0\n";
    assert!(matches!(
        read_str::<f64>(huge).unwrap().into_dense(Layout::ColMajor),
        Err(MatrixMarketError::Unsupported(_))
    ));
}

#[test]
fn header_only() {
    let s = "%%MatrixMarket matrix array complex hermitian\n% c\n3 3\n1 0\n";
    let h = matrix_market::read_header(s.as_bytes()).unwrap();
    assert_eq!(
        h,
        Header {
            format: Format::Array,
            field: Field::Complex,
            symmetry: Symmetry::Hermitian,
            nrows: 3,
            ncols: 3,
            entries: 6,
        }
    );
    let gz = gzip(b"%%MatrixMarket matrix coordinate pattern symmetric\n5 5 7\n");
    let h = matrix_market::read_header(&gz[..]).unwrap();
    assert_eq!(
        (h.format, h.field, h.symmetry, h.entries),
        (Format::Coordinate, Field::Pattern, Symmetry::Symmetric, 7)
    );
    assert_eq!(Symmetry::SkewSymmetric.to_string(), "skew-symmetric");
}

// ---------------------------------------------------------------------------------------------
// Round trips through every format × field × symmetry the specification allows.

/// A test matrix: full `nrows × ncols` values as (re, im) in f64, already symmetric as asked.
struct Case {
    format: Format,
    field: Field,
    symmetry: Symmetry,
    nrows: usize,
    ncols: usize,
    full: Vec<(f64, f64)>, // row-major
}

fn case(format: Format, field: Field, symmetry: Symmetry) -> Case {
    let (nrows, ncols) = if symmetry == Symmetry::General {
        (4, 6)
    } else {
        (5, 5)
    };
    // Deterministic values with about half the entries zero, the diagonal included at times.
    let value = |i: usize, j: usize| -> (f64, f64) {
        let k = (i * 7 + j * 13 + 3) % 11;
        if k < 5 {
            return (0.0, 0.0);
        }
        match field {
            Field::Pattern => (1.0, 0.0),
            Field::Integer => (k as f64 - 8.0, 0.0),
            Field::Real => (k as f64 * 0.37 - 1.1e-3, 0.0),
            Field::Complex => (k as f64 * 0.37 - 2.0, 1.0 / k as f64),
        }
    };
    let mut full = vec![(0.0, 0.0); nrows * ncols];
    for i in 0..nrows {
        for j in 0..ncols {
            let stored = match symmetry {
                Symmetry::General => true,
                Symmetry::SkewSymmetric => i > j,
                _ => i >= j,
            };
            if !stored {
                continue;
            }
            let (re, mut im) = value(i, j);
            if symmetry == Symmetry::Hermitian && i == j {
                im = 0.0;
            }
            full[i * ncols + j] = (re, im);
            if i != j && symmetry != Symmetry::General {
                full[j * ncols + i] = match symmetry {
                    Symmetry::General | Symmetry::Symmetric => (re, im),
                    // `+ 0.0` turns the -0 of a negated zero into the +0 a reader fills in.
                    Symmetry::SkewSymmetric => (-re + 0.0, -im + 0.0),
                    Symmetry::Hermitian => (re, -im + 0.0),
                };
            }
        }
    }
    Case {
        format,
        field,
        symmetry,
        nrows,
        ncols,
        full,
    }
}

impl Case {
    /// The file as the specification lays it out: the stored triangle, column by column.
    fn text(&self) -> String {
        let mut out = format!(
            "%%MatrixMarket matrix {} {} {}\n% test case\n",
            self.format, self.field, self.symmetry
        );
        let stored = |i: usize, j: usize| match self.symmetry {
            Symmetry::General => true,
            Symmetry::SkewSymmetric => i > j,
            _ => i >= j,
        };
        let mut lines = Vec::new();
        for j in 0..self.ncols {
            for i in 0..self.nrows {
                if !stored(i, j) {
                    continue;
                }
                let (re, im) = self.full[i * self.ncols + j];
                let value = match self.field {
                    Field::Pattern => String::new(),
                    Field::Integer => format!(" {}", re as i64),
                    Field::Real => format!(" {re:e}"),
                    Field::Complex => format!(" {re} {im}"),
                };
                match self.format {
                    Format::Array => lines.push(value.trim_start().to_string()),
                    Format::Coordinate if (re, im) != (0.0, 0.0) => {
                        lines.push(format!("{} {}{value}", i + 1, j + 1))
                    }
                    Format::Coordinate => {}
                }
            }
        }
        match self.format {
            Format::Array => out += &format!("{} {}\n", self.nrows, self.ncols),
            Format::Coordinate => {
                out += &format!("{} {} {}\n", self.nrows, self.ncols, lines.len())
            }
        }
        for l in lines {
            out += &l;
            out.push('\n');
        }
        out
    }

    fn expected<T: Scalar>(&self) -> Dense<T> {
        Dense::from_fn(self.nrows, self.ncols, Layout::ColMajor, |i, j| {
            let (re, im) = self.full[i * self.ncols + j];
            T::try_from_parts(re, im).unwrap()
        })
        .unwrap()
    }

    fn check<T: Scalar>(&self) {
        let what = format!(
            "{} {} {} as {}",
            self.format,
            self.field,
            self.symmetry,
            T::TYPE
        );
        let text = self.text();
        let read = matrix_market::read::<T, _>(text.as_bytes());
        if self.field == Field::Complex && !T::TYPE.is_complex() {
            assert!(
                matches!(read, Err(MatrixMarketError::Unsupported(_))),
                "{what}: {read:?}"
            );
            return;
        }
        let m = read.unwrap_or_else(|e| panic!("{what}: {e}\n{text}"));
        assert_eq!(
            matches!(m, MatrixMarket::Dense(_)),
            self.format == Format::Array,
            "{what}"
        );
        let d = m.clone().into_dense(Layout::ColMajor).unwrap();
        // `==`, not bits: a negated or conjugated zero part is -0.
        assert_eq!(d, self.expected::<T>(), "{what}\n{text}");

        // Written back (general) and read again: the same matrix, in the same form.
        let mut bytes = Vec::new();
        match &m {
            MatrixMarket::Sparse(c) => matrix_market::write_sparse(&mut bytes, c).unwrap(),
            MatrixMarket::Dense(d) => matrix_market::write_dense(&mut bytes, d).unwrap(),
        }
        let again = matrix_market::read::<T, _>(&bytes[..]).unwrap();
        match (&m, &again) {
            (MatrixMarket::Sparse(a), MatrixMarket::Sparse(b)) => {
                assert!(same_coo(a, b), "{what}")
            }
            (MatrixMarket::Dense(a), MatrixMarket::Dense(b)) => {
                assert!(same_dense(a, b), "{what}")
            }
            _ => panic!("{what}: format changed"),
        }
        let csr = m.into_csr().unwrap();
        let mut bytes = Vec::new();
        matrix_market::write_sparse(&mut bytes, &csr).unwrap();
        assert_eq!(
            matrix_market::read_csr::<T, _>(&bytes[..]).unwrap(),
            csr,
            "{what}"
        );
    }
}

#[test]
fn every_format_field_and_symmetry_round_trips() {
    let mut checked = 0;
    for format in [Format::Coordinate, Format::Array] {
        for field in [Field::Real, Field::Integer, Field::Complex, Field::Pattern] {
            for symmetry in [
                Symmetry::General,
                Symmetry::Symmetric,
                Symmetry::SkewSymmetric,
                Symmetry::Hermitian,
            ] {
                let c = case(format, field, symmetry);
                let refused = matrix_market::read_header(c.text().as_bytes()).is_err();
                let allowed = !matches!(
                    (format, field, symmetry),
                    (Format::Array, Field::Pattern, _)
                        | (_, Field::Pattern, Symmetry::SkewSymmetric)
                        | (
                            _,
                            Field::Real | Field::Integer | Field::Pattern,
                            Symmetry::Hermitian
                        )
                );
                assert_eq!(refused, !allowed, "{format} {field} {symmetry}");
                if allowed {
                    c.check::<f64>();
                    c.check::<f32>();
                    c.check::<C64>();
                    checked += 1;
                }
            }
        }
    }
    // coordinate: 4 fields × 4 symmetries minus real/integer/pattern hermitian and pattern
    // skew = 12; array: 3 fields (no pattern) × 4 minus real/integer hermitian = 10.
    assert_eq!(checked, 22);
}

#[test]
fn other_sparse_formats_are_written_through_csr() {
    let a = Csr::try_new(2, 3, vec![0, 2, 3], vec![0, 2, 1], vec![1.0, 2.0, 3.0]).unwrap();
    let csc = Csc::from_csr(&a).unwrap();
    let mut bytes = Vec::new();
    matrix_market::write_sparse(&mut bytes, &csc).unwrap();
    assert_eq!(
        String::from_utf8(bytes).unwrap(),
        "%%MatrixMarket matrix coordinate real general\n% written by hetsparse\n2 3 3\n\
         1 1 1\n1 3 2\n2 2 3\n"
    );
}

#[test]
fn written_text_is_shortest_and_exact() {
    let vals = [
        0.1,
        -2.5e-300,
        1e300,
        123456.0,
        f64::MIN_POSITIVE,
        -0.0,
        1.0 / 3.0,
    ];
    let d = Dense::try_new(vals.len(), 1, Layout::ColMajor, vals.to_vec()).unwrap();
    let mut bytes = Vec::new();
    matrix_market::write_dense(&mut bytes, &d).unwrap();
    let text = String::from_utf8(bytes.clone()).unwrap();
    assert!(
        text.starts_with("%%MatrixMarket matrix array real general\n% written by hetsparse\n7 1\n")
    );
    assert!(text.contains("\n0.1\n-2.5e-300\n1e300\n123456\n"), "{text}");
    let back = dense(matrix_market::read::<f64, _>(&bytes[..]).unwrap());
    assert!(same_dense(&back, &d));

    // f32 goes through its exact f64 value and comes back identical.
    let d32 = Dense::try_new(2, 1, Layout::ColMajor, vec![0.1f32, f32::MAX]).unwrap();
    let mut bytes = Vec::new();
    matrix_market::write_dense(&mut bytes, &d32).unwrap();
    assert_eq!(
        dense(matrix_market::read::<f32, _>(&bytes[..]).unwrap()),
        d32
    );
}

// ---------------------------------------------------------------------------------------------
// gzip.

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut e = GzEncoder::new(Vec::new(), Compression::default());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

#[test]
fn gzip_round_trip_by_content_not_name() {
    let a = Csr::try_new(
        3,
        3,
        vec![0, 1, 3, 3],
        vec![2, 0, 1],
        vec![
            C64::new(1.0, -1.0),
            C64::new(0.5, 0.0),
            C64::new(-3.0, 2e-8),
        ],
    )
    .unwrap();
    let mut text = Vec::new();
    matrix_market::write_sparse(&mut text, &a).unwrap();
    let dir = temp_dir("gz");
    for name in ["a.mtx.gz", "a.mtx", "a"] {
        let path = dir.join(name);
        let mut f = GzEncoder::new(std::fs::File::create(&path).unwrap(), Compression::fast());
        matrix_market::write_sparse(&mut f, &a).unwrap();
        f.finish().unwrap();
        assert_eq!(
            matrix_market::read_csr_path::<C64>(&path).unwrap(),
            a,
            "{name}"
        );
    }
    let plain = dir.join("plain.mtx.gz");
    std::fs::write(&plain, &text).unwrap();
    assert_eq!(matrix_market::read_csr_path::<C64>(&plain).unwrap(), a);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn gzip_members_are_read_through_and_one_byte_reads_work() {
    let text = b"%%MatrixMarket matrix coordinate real general\n2 2 2\n1 1 1.5\n2 2 -4\n";
    let cut = 55;
    let mut multi = gzip(&text[..cut]);
    multi.extend(gzip(&text[cut..]));
    let a = matrix_market::read_csr::<f64, _>(&multi[..]).unwrap();
    assert_eq!((a.get(0, 0), a.get(1, 1)), (Some(1.5), Some(-4.0)));
    // A reader that hands out one byte at a time still recognises gzip and plain text.
    let b = matrix_market::read_csr::<f64, _>(BufReader::with_capacity(1, &multi[..])).unwrap();
    assert_eq!(a, b);
    let c = matrix_market::read_csr::<f64, _>(BufReader::with_capacity(1, &text[..])).unwrap();
    assert_eq!(a, c);
}

// ---------------------------------------------------------------------------------------------
// Fixture files.

#[test]
fn fixture_general_real() {
    let c = sparse(matrix_market::read_path::<f64>(data_path("general_real.mtx")).unwrap());
    assert_eq!((c.shape(), c.nnz()), ((3, 4), 5));
    let a = c.to_csr().unwrap();
    assert_eq!(a.nnz(), 4);
    assert_eq!(a.get(0, 0), Some(1.5));
    assert_eq!(a.get(1, 2), Some(-2e-3 + 0.5));
    assert_eq!(a.get(2, 3), Some(100.0));
    assert_eq!(a.get(0, 3), Some(7.0));
}

#[test]
fn fixture_symmetric_pattern() {
    let a = matrix_market::read_csr_path::<f32>(data_path("symmetric_pattern.mtx")).unwrap();
    assert_eq!(a.row_offsets(), &[0, 2, 4, 5, 6]);
    assert_eq!(a.col_indices(), &[0, 1, 0, 3, 2, 1]);
    assert!(a.values().iter().all(|&v| v == 1.0));
}

#[test]
fn fixture_hermitian_complex() {
    let a = matrix_market::read_csr_path::<C64>(data_path("hermitian_complex.mtx")).unwrap();
    let d = a.to_dense(Layout::RowMajor).unwrap();
    assert_eq!(
        d.data(),
        &[
            C64::new(2.0, 0.0),
            C64::new(1.0, -1.0),
            C64::new(1.0, 1.0),
            C64::new(3.0, 0.0)
        ]
    );
    assert!(matches!(
        matrix_market::read_path::<f64>(data_path("hermitian_complex.mtx")),
        Err(MatrixMarketError::Unsupported(_))
    ));
}

#[test]
fn fixture_skew_integer_array() {
    let d = dense(matrix_market::read_path::<f64>(data_path("skew_integer_array.mtx")).unwrap());
    assert_eq!(
        d.to_layout(Layout::RowMajor).data(),
        &[0.0, -1.0, -2.0, 1.0, 0.0, 3.0, 2.0, -3.0, 0.0]
    );
}

#[test]
fn fixture_crlf_array() {
    let bytes = std::fs::read(data_path("crlf_array.mtx")).unwrap();
    assert!(
        bytes.windows(2).any(|w| w == b"\r\n"),
        "fixture lost its CRLF"
    );
    let d = dense(matrix_market::read_path::<f64>(data_path("crlf_array.mtx")).unwrap());
    assert_eq!(d.data(), &[1.0, 2.5, 3.0, -4.0]);
}

// ---------------------------------------------------------------------------------------------
// Property-based round trips.

fn coo_strategy<T: Scalar + std::fmt::Debug>(
    value: impl Strategy<Value = T> + Clone,
) -> impl Strategy<Value = Coo<T>> {
    (1usize..24, 1usize..24).prop_flat_map(move |(r, c)| {
        prop::collection::vec((0..r as u32, 0..c as u32, value.clone()), 0..60).prop_map(move |t| {
            let (rows, rest): (Vec<u32>, Vec<(u32, T)>) =
                t.into_iter().map(|(i, j, v)| (i, (j, v))).unzip();
            let (cols, vals) = rest.into_iter().unzip();
            Coo::try_new(r, c, rows, cols, vals).unwrap()
        })
    })
}

fn dense_strategy<T: Scalar + std::fmt::Debug>(
    value: impl Strategy<Value = T> + Clone,
) -> impl Strategy<Value = Dense<T>> {
    (0usize..12, 0usize..12, any::<bool>()).prop_flat_map(move |(r, c, row_major)| {
        prop::collection::vec(value.clone(), r * c).prop_map(move |data| {
            let layout = if row_major {
                Layout::RowMajor
            } else {
                Layout::ColMajor
            };
            Dense::try_new(r, c, layout, data).unwrap()
        })
    })
}

fn check_coo_round_trip<T: Scalar>(c: &Coo<T>) -> Result<(), TestCaseError> {
    let mut bytes = Vec::new();
    matrix_market::write_sparse(&mut bytes, c).unwrap();
    let back = sparse(matrix_market::read::<T, _>(&bytes[..]).unwrap());
    prop_assert!(same_coo(c, &back), "{c:?}\n{back:?}");
    let csr = c.to_csr().unwrap();
    let mut bytes = Vec::new();
    matrix_market::write_sparse(&mut bytes, &csr).unwrap();
    let back = matrix_market::read_csr::<T, _>(&bytes[..]).unwrap();
    prop_assert!(same_coo(&csr.to_coo(), &back.to_coo()));
    Ok(())
}

fn check_dense_round_trip<T: Scalar>(d: &Dense<T>) -> Result<(), TestCaseError> {
    let mut bytes = Vec::new();
    matrix_market::write_dense(&mut bytes, d).unwrap();
    let back = dense(matrix_market::read::<T, _>(&bytes[..]).unwrap());
    prop_assert_eq!(back.layout(), Layout::ColMajor);
    prop_assert!(same_dense(d, &back));
    Ok(())
}

proptest! {
    #[test]
    fn random_f64_sparse_round_trips(c in coo_strategy(any::<f64>())) {
        check_coo_round_trip(&c)?;
    }

    #[test]
    fn random_f32_sparse_round_trips(c in coo_strategy(any::<f32>())) {
        check_coo_round_trip(&c)?;
    }

    #[test]
    fn random_complex_sparse_round_trips(
        c in coo_strategy((any::<f64>(), any::<f64>()).prop_map(|(re, im)| C64::new(re, im)))
    ) {
        check_coo_round_trip(&c)?;
    }

    #[test]
    fn random_dense_round_trips(
        a in dense_strategy(any::<f64>()),
        b in dense_strategy(any::<f32>()),
        c in dense_strategy((any::<f32>(), any::<f32>()).prop_map(|(re, im)| Complex::new(re, im))),
    ) {
        check_dense_round_trip(&a)?;
        check_dense_round_trip(&b)?;
        check_dense_round_trip(&c)?;
    }

    #[test]
    fn random_half_precision_round_trips(
        bits in prop::collection::vec(any::<u16>(), 0..40)
    ) {
        let h: Vec<hetsparse_core::f16> = bits.iter().map(|&b| hetsparse_core::f16::from_bits(b)).collect();
        let d = Dense::try_new(h.len(), 1, Layout::ColMajor, h).unwrap();
        check_dense_round_trip(&d)?;
        let b: Vec<hetsparse_core::bf16> = bits.iter().map(|&b| hetsparse_core::bf16::from_bits(b)).collect();
        let d = Dense::try_new(b.len(), 1, Layout::ColMajor, b).unwrap();
        check_dense_round_trip(&d)?;
    }
}

/// Mutations of a valid file (bytes overwritten, lines cut short) never panic: they read, or they
/// fail with an error. The fuzz target in `fuzz/` does this at scale; this keeps a cheap version
/// in `cargo test`.
fn mutate(text: &[u8], edits: &[(usize, u8)], cut: usize) -> Vec<u8> {
    let mut bytes = text.to_vec();
    for &(at, b) in edits {
        let at = at % bytes.len();
        bytes[at] = b;
    }
    bytes.truncate(bytes.len() - cut % bytes.len());
    bytes
}

proptest! {
    #[test]
    fn mutated_files_fail_cleanly(
        c in coo_strategy(any::<f64>()),
        edits in prop::collection::vec(
            (any::<usize>(), prop::sample::select(b" \n\r%-+0123456789.eE:x\x1f".to_vec())),
            0..4,
        ),
        cut in any::<usize>(),
        symmetric in any::<bool>(),
    ) {
        let mut text = Vec::new();
        matrix_market::write_sparse(&mut text, &c).unwrap();
        if symmetric {
            // Same entries under another banner: a square matrix or a size-line error.
            let s = String::from_utf8(text).unwrap().replacen(" general", " skew-symmetric", 1);
            text = s.into_bytes();
        }
        let bytes = mutate(&text, &edits, cut);
        if let Ok(MatrixMarket::Sparse(c)) = matrix_market::read::<f64, _>(&bytes[..]) {
            check_coo_round_trip(&c)?;
        }
        let _ = matrix_market::read::<C64, _>(&bytes[..]);
    }
}

/// Real values are read bit for bit as `str::parse::<f64>` reads them, on the scanner's fast
/// path (plain decimals) and off it (signs, exponents, `inf`, `nan`, Fortran `D`, 20+ digits).
#[test]
fn real_values_are_read_exactly_as_std_parses_them() {
    let words = [
        "0.8364128047185735",
        "0.12345678901234567",
        "-0.1",
        "+1.5",
        ".5",
        "5.",
        "-.25e1",
        "1E-5",
        "6.02214076e+23",
        "1.7976931348623157e308",
        "2.2250738585072014e-308",
        "2.2250738585072011e-308",
        "4.9e-324",
        "1e-400",
        "1e400",
        "9007199254740993",
        "4503599627370497.5",
        "0.30000000000000004",
        "12345678901234567890123",
        "1.00000000000000011102230246251565",
        "-0",
        "inf",
        "-infinity",
        "NaN",
    ];
    let mut text = format!(
        "%%MatrixMarket matrix coordinate real general\n{} 1 {}\n",
        words.len(),
        words.len()
    );
    for (i, w) in words.iter().enumerate() {
        text.push_str(&format!("{} 1 {w}\n", i + 1));
    }
    let coo = sparse(read_str::<f64>(&text).unwrap());
    for (k, w) in words.iter().enumerate() {
        let expected: f64 = w.parse().unwrap();
        let got = coo.values()[k];
        assert!(
            got.to_bits() == expected.to_bits() || (got.is_nan() && expected.is_nan()),
            "`{w}`: {got:e}, std {expected:e}"
        );
    }
    // `D` exponents (Fortran) are read as `e`.
    let coo = sparse(
        read_str::<f64>("%%MatrixMarket matrix coordinate real general\n1 1 1\n1 1 1.5D3\n")
            .unwrap(),
    );
    assert_eq!(coo.values(), &[1500.0]);
}

/// Indices of every length the scanner reads at once (up to 7 digits) or one by one, and
/// integer values with signs and up to 19 digits.
#[test]
fn indices_and_integers_of_every_length() {
    let rows: [u64; 8] = [
        1,
        9,
        1_234_567,
        9_999_999,
        12_345_678,
        123_456_789,
        4_294_967_294,
        4_294_967_295,
    ];
    let values = [
        "+5",
        "-12",
        "0",
        "1234567",
        "12345678901234567",
        "123456789012345678",
        "-9223372036854775808",
        "9223372036854775807",
    ];
    let mut text = format!(
        "%%MatrixMarket matrix coordinate integer general\n4294967295 3 {}\n",
        rows.len()
    );
    for (r, v) in rows.iter().zip(values) {
        text.push_str(&format!("{r} 2 {v}\n"));
    }
    let coo = sparse(read_str::<f64>(&text).unwrap());
    let expected_rows: Vec<u32> = rows.iter().map(|&r| (r - 1) as u32).collect();
    assert_eq!(coo.row_indices(), &expected_rows[..]);
    let expected: Vec<f64> = values
        .iter()
        .map(|v| v.parse::<i64>().unwrap() as f64)
        .collect();
    assert_eq!(coo.values(), &expected[..]);
    // Past the bound, zero, and past u32 are errors at their line.
    for (bad, line) in [("4294967296 1 1", 3), ("0 1 1", 3), ("1 4 1", 3)] {
        let text =
            format!("%%MatrixMarket matrix coordinate integer general\n4294967295 3 1\n{bad}\n");
        assert_parse_error(&text, line, &[]);
    }
}
