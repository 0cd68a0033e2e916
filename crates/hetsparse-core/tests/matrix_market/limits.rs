//! Hostile Matrix Market input: sizes that a tiny file announces, over-long lines, gzip bombs of
//! one comment line or of more entries than announced, and data after the last gzip member.
//! Every case must end in an error (never an abort) after reading little of the input.

use std::io::{BufRead, Read, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use flate2::write::GzEncoder;
use flate2::Compression;
use hetsparse_core::matrix_market::{self, MatrixMarket, ReadOptions};
use hetsparse_core::{Csr, MatrixMarketError};

/// A reader that counts the bytes taken from it, to show that a reader stopped early.
struct Counting<R> {
    inner: R,
    taken: Arc<AtomicU64>,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.taken.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

impl<R: BufRead> BufRead for Counting<R> {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        self.inner.fill_buf()
    }
    fn consume(&mut self, amt: usize) {
        self.taken.fetch_add(amt as u64, Ordering::Relaxed);
        self.inner.consume(amt);
    }
}

fn counting(bytes: &[u8]) -> (Counting<&[u8]>, Arc<AtomicU64>) {
    let taken = Arc::new(AtomicU64::new(0));
    (
        Counting {
            inner: bytes,
            taken: taken.clone(),
        },
        taken,
    )
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut e = GzEncoder::new(Vec::new(), Compression::default());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

/// Gzip of `head`, then `repeat` written `times` times: large text, small file.
fn gzip_repeated(head: &[u8], repeat: &[u8], times: usize) -> Vec<u8> {
    let mut e = GzEncoder::new(Vec::new(), Compression::default());
    e.write_all(head).unwrap();
    let block: Vec<u8> = repeat.repeat((1 << 16) / repeat.len().max(1) + 1);
    let mut left = repeat.len() * times;
    while left > 0 {
        let n = left.min(block.len());
        e.write_all(&block[..n]).unwrap();
        left -= n;
    }
    e.finish().unwrap()
}

const GIB: u64 = 1 << 30;

#[test]
fn a_tiny_file_with_u32_max_rows_is_an_error_as_csr() {
    let file = b"%%MatrixMarket matrix coordinate real general\n4294967295 1 0\n";
    // As COO it is an empty matrix of that shape.
    let m = matrix_market::read::<f64, _>(&file[..]).unwrap();
    assert_eq!(m.shape(), (4294967295, 1));
    // As CSR it needs 32 GiB of row offsets: refused at the size line under a limit...
    let limited = ReadOptions::default().with_max_bytes(GIB);
    match matrix_market::read_csr_with::<f64, _>(&file[..], &limited) {
        Err(MatrixMarketError::MemoryLimit {
            needed_bytes,
            limit_bytes,
            what,
        }) => {
            assert_eq!(needed_bytes, 4294967296 * 8);
            assert_eq!(limit_bytes, GIB);
            assert!(
                what.contains("4294967295×1") && what.contains("CSR"),
                "{what}"
            );
        }
        other => panic!("{other:?}"),
    }
    // ...and on a machine with less than 32 GiB by default.
    if ReadOptions::default().max_bytes < 4294967296 * 8 {
        assert!(matches!(
            matrix_market::read_csr::<f64, _>(&file[..]),
            Err(MatrixMarketError::MemoryLimit { .. })
        ));
    }
}

#[test]
fn into_csr_reports_memory_it_cannot_have() {
    // An allocation no allocator grants: 2^64 / 8 offsets.
    let m = matrix_market::read::<f64, _>(
        &b"%%MatrixMarket matrix coordinate real general\n4294967295 1 0\n"[..],
    )
    .unwrap();
    // 32 GiB may be granted lazily on a large machine; the conversion of this one must then
    // succeed, and fail with OutOfMemory (not abort) elsewhere.
    match m.into_csr() {
        Ok(c) => assert_eq!(c.shape(), (4294967295, 1)),
        Err(MatrixMarketError::OutOfMemory { needed_bytes, .. }) => {
            assert_eq!(needed_bytes, 4294967296 * 8)
        }
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn an_array_with_no_columns_and_u32_max_rows_is_an_error_as_csr() {
    let file = b"%%MatrixMarket matrix array real general\n4294967295 0\n";
    let m = matrix_market::read::<f64, _>(&file[..]).unwrap();
    assert_eq!(m.shape(), (4294967295, 0));
    let limited = ReadOptions::default().with_max_bytes(GIB);
    match matrix_market::read_csr_with::<f64, _>(&file[..], &limited) {
        Err(MatrixMarketError::MemoryLimit { needed_bytes, .. }) => {
            assert_eq!(needed_bytes, 4294967296 * 8)
        }
        other => panic!("{other:?}"),
    }
    // Zero rows and many columns is an empty CSR matrix.
    let wide = b"%%MatrixMarket matrix array real general\n0 4294967295\n";
    let c: Csr<f64> = matrix_market::read_csr_with(&wide[..], &limited).unwrap();
    assert_eq!((c.shape(), c.nnz()), ((0, 4294967295), 0));
}

#[test]
fn the_memory_limit_counts_what_the_size_line_announces() {
    let file = b"%%MatrixMarket matrix coordinate real symmetric\n10 10 3\n2 1 1\n3 1 1\n3 3 1\n";
    // 3 entries, mirrored: 6 triplets of 16 bytes.
    let exact = ReadOptions::default().with_max_bytes(96);
    assert!(matrix_market::read_with::<f64, _>(&file[..], &exact).is_ok());
    let short = ReadOptions::default().with_max_bytes(95);
    match matrix_market::read_with::<f64, _>(&file[..], &short) {
        Err(MatrixMarketError::MemoryLimit {
            needed_bytes: 96,
            limit_bytes: 95,
            ..
        }) => {}
        other => panic!("{other:?}"),
    }
    // As CSR: the triplets, the CSR entries (6 × 12 bytes) and 11 row offsets.
    let csr = ReadOptions::default().with_max_bytes(96 + 72 + 88);
    assert!(matrix_market::read_csr_with::<f64, _>(&file[..], &csr).is_ok());
    let csr = ReadOptions::default().with_max_bytes(96 + 72 + 87);
    assert!(matches!(
        matrix_market::read_csr_with::<f64, _>(&file[..], &csr),
        Err(MatrixMarketError::MemoryLimit { .. })
    ));
}

#[test]
fn lines_longer_than_the_limit_are_errors_at_their_line() {
    let options = ReadOptions::default().with_max_line_bytes(64);
    let long = "9".repeat(65);
    let ok = "9".repeat(64);
    let h = "%%MatrixMarket matrix coordinate real general\n";
    let cases = [
        (format!("%{long}\n"), 1),
        (format!("{h}% {long}\n1 1 1\n1 1 1\n"), 2),
        (format!("{h}1 1 1\n1 1 {long}\n"), 3),
        (format!("{h}1 1 1\n%{}\n1 1 {long}", &ok[1..]), 4),
        (format!("{h}1 1 2\n1 1 1\n\n% {long}\n"), 5),
    ];
    for (text, line) in cases {
        for input in [text.as_bytes().to_vec(), gzip(text.as_bytes())] {
            match matrix_market::read_with::<f64, _>(&input[..], &options) {
                Err(MatrixMarketError::Parse { line: l, message }) => {
                    assert_eq!(l, line, "{message}\n{text}");
                    assert!(message.contains("longer than 64 bytes"), "{message}");
                }
                other => panic!("{other:?} for\n{text}"),
            }
        }
    }
    // Lines of exactly the limit, comments included, are fine.
    let text = format!("{h}% {}\n2 2 1\n1 1 {}\n", &ok[2..], "1".repeat(60));
    assert!(matrix_market::read_with::<f64, _>(text.as_bytes(), &options).is_ok());
}

#[test]
fn a_gzip_of_one_huge_comment_line_fails_after_reading_little() {
    // 512 MiB of comment in one line, compressed to about half a MiB.
    let bomb = gzip_repeated(
        b"%%MatrixMarket matrix coordinate real general\n% ",
        b"x",
        512 << 20,
    );
    assert!(bomb.len() < 1 << 20, "{}", bomb.len());
    let (reader, taken) = counting(&bomb);
    match matrix_market::read::<f64, _>(reader) {
        Err(MatrixMarketError::Parse { line: 2, message }) => {
            assert!(message.contains("longer than 1048576 bytes"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    // The default limit is 1 MiB of text: a few KiB of the compressed file.
    let taken = taken.load(Ordering::Relaxed);
    assert!(taken < 64 << 10, "read {taken} compressed bytes");
    // The same line among the entries.
    let bomb = gzip_repeated(
        b"%%MatrixMarket matrix coordinate real general\n2 2 1\n1 1 1\n%",
        b"y",
        512 << 20,
    );
    let (reader, taken) = counting(&bomb);
    match matrix_market::read::<f64, _>(reader) {
        Err(MatrixMarketError::Parse { line: 4, message }) => {
            assert!(message.contains("longer than"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    assert!(taken.load(Ordering::Relaxed) < 64 << 10);
}

#[test]
fn a_gzip_announcing_ten_to_the_twelve_entries_fails_at_its_size_line() {
    let bomb = gzip_repeated(
        b"%%MatrixMarket matrix coordinate real general\n1000000 1000000 1000000000000\n",
        b"1 1 1\n",
        100 << 20,
    );
    // 600 MB of text in a few MB.
    assert!(bomb.len() < 4 << 20, "{}", bomb.len());
    let (reader, taken) = counting(&bomb);
    match matrix_market::read::<f64, _>(reader) {
        Err(MatrixMarketError::MemoryLimit { needed_bytes, .. }) => {
            assert_eq!(needed_bytes, 16_000_000_000_000)
        }
        other => panic!("{other:?}"),
    }
    assert!(taken.load(Ordering::Relaxed) < 64 << 10);
    // Announcing what fits but holding far more: the error comes at the first line too many,
    // and the arrays never grow past the announced count.
    let bomb = gzip_repeated(
        b"%%MatrixMarket matrix coordinate real general\n1000000 1000000 1000\n",
        b"1 1 1\n",
        100 << 20,
    );
    let (reader, taken) = counting(&bomb);
    match matrix_market::read::<f64, _>(reader) {
        Err(MatrixMarketError::Parse {
            line: 1003,
            message,
        }) => {
            assert!(message.contains("more entries than the 1000"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    // Only the chunks in flight were decompressed, not the 600 MB.
    let taken = taken.load(Ordering::Relaxed);
    assert!(
        taken < bomb.len() as u64 / 4,
        "read {taken} of {}",
        bomb.len()
    );
}

const GOOD: &[u8] = b"%%MatrixMarket matrix coordinate real general\n2 2 2\n1 1 1.5\n2 2 -4\n";

fn check_good(m: MatrixMarket<f64>) {
    let a = m.into_csr().unwrap();
    assert_eq!(
        (a.get(0, 0), a.get(1, 1), a.nnz()),
        (Some(1.5), Some(-4.0), 2)
    );
}

#[test]
fn trailing_zeros_after_gzip_members_are_accepted_as_gzip_does() {
    let mut padded = gzip(GOOD);
    padded.extend([0u8; 1000]);
    check_good(matrix_market::read(&padded[..]).unwrap());
    let mut members = gzip(&GOOD[..30]);
    members.extend(gzip(&GOOD[30..]));
    members.extend([0u8; 7]);
    check_good(matrix_market::read(&members[..]).unwrap());
    // One byte at a time through the reader's buffer.
    let r = std::io::BufReader::with_capacity(1, &members[..]);
    check_good(matrix_market::read(r).unwrap());
}

#[test]
fn garbage_after_a_gzip_member_is_named_with_its_offset() {
    let good = gzip(GOOD);
    let end = good.len();
    for (tail, at, zeros) in [
        (&b"garbage"[..], end, 0),
        (&b"\0\0\0junk"[..], end + 3, 3),
        (&b"\n"[..], end, 0),
    ] {
        let mut file = good.clone();
        file.extend(tail);
        match matrix_market::read::<f64, _>(&file[..]) {
            Err(MatrixMarketError::Io(e)) => {
                let m = e.to_string();
                assert!(m.contains("trailing data that is not gzip"), "{m}");
                assert!(m.contains(&format!("at compressed byte {at}")), "{m}");
                assert!(m.contains("after the end of gzip member 1"), "{m}");
                assert_eq!(
                    m.contains(&format!("and {zeros} zero bytes")),
                    zeros > 0,
                    "{m}"
                );
                assert!(!m.contains("invalid gzip header"), "{m}");
            }
            other => panic!("{other:?}"),
        }
    }
    // A second member whose header is broken says which member.
    let mut file = good.clone();
    file.extend(b"\x1f\x00broken");
    match matrix_market::read::<f64, _>(&file[..]) {
        Err(MatrixMarketError::Io(e)) => assert!(e.to_string().contains("gzip member 2"), "{e}"),
        other => panic!("{other:?}"),
    }
}
