//! The reader and writer on files of many chunks (the reader cuts about 1 MiB per task): the
//! same matrix and the same error lines whatever the thread count, from plain text and gzip,
//! and from inside a rayon pool of one thread (the reader then runs its own tasks).

use std::io::Write;

use flate2::write::GzEncoder;
use flate2::Compression;
use hetsparse_core::matrix_market::{self, MatrixMarket};
use hetsparse_core::{Coo, Csr, MatrixMarketError};

/// A general real file of `n` entries (about 30 bytes a line) with comments and blank lines
/// sprinkled in, and the triplets it holds.
fn big_file(n: usize, symmetric: bool) -> (String, Vec<(u32, u32, f64)>) {
    let size = 100_000u32;
    let symmetry = if symmetric { "symmetric" } else { "general" };
    let mut text = format!("%%MatrixMarket matrix coordinate real {symmetry}\n% big\n");
    text += &format!("{size} {size} {n}\n");
    let mut triplets = Vec::with_capacity(n);
    let mut x: u64 = 12345;
    for k in 0..n {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        let (mut i, mut j) = ((x >> 33) as u32 % size, (x >> 13) as u32 % size);
        if symmetric && j > i {
            std::mem::swap(&mut i, &mut j);
        }
        let v = (x >> 11) as f64 / (1u64 << 53) as f64 - 0.5;
        if k % 1000 == 0 {
            text += "% a comment between entries\n\n";
        }
        if k % 777 == 0 {
            text += &format!("  {}\t{}   {v:e}  \r\n", i + 1, j + 1);
        } else {
            text += &format!("{} {} {v}\n", i + 1, j + 1);
        }
        triplets.push((i, j, v));
    }
    (text, triplets)
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut e = GzEncoder::new(Vec::new(), Compression::fast());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

fn in_pool<R: Send>(threads: usize, f: impl FnOnce() -> R + Send) -> R {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap()
        .install(f)
}

fn expected(triplets: &[(u32, u32, f64)], symmetric: bool) -> Coo<f64> {
    let (mut r, mut c, mut v) = (Vec::new(), Vec::new(), Vec::new());
    for &(i, j, x) in triplets {
        r.push(i);
        c.push(j);
        v.push(x);
        if symmetric && i != j {
            r.push(j);
            c.push(i);
            v.push(x);
        }
    }
    Coo::try_new(100_000, 100_000, r, c, v).unwrap()
}

#[test]
fn many_chunks_read_the_same_on_any_thread_count() {
    for symmetric in [false, true] {
        let (text, triplets) = big_file(150_000, symmetric);
        assert!(text.len() > 4 << 20, "{}", text.len());
        let want = expected(&triplets, symmetric);
        let want_csr: Csr<f64> = want.to_csr().unwrap();
        let gz = gzip(text.as_bytes());
        for threads in [1, 3] {
            for input in [text.as_bytes(), &gz[..]] {
                let got = in_pool(threads, || matrix_market::read::<f64, _>(input)).unwrap();
                match got {
                    MatrixMarket::Sparse(c) => assert_eq!(c, want),
                    MatrixMarket::Dense(_) => panic!("dense"),
                }
                let csr = in_pool(threads, || matrix_market::read_csr::<f64, _>(input)).unwrap();
                assert_eq!(csr, want_csr);
            }
        }
        // The writer, in parallel, gives the text that reads back to the same matrix.
        let mut written = Vec::new();
        in_pool(3, || matrix_market::write_sparse(&mut written, &want)).unwrap();
        let mut serial = Vec::new();
        in_pool(1, || matrix_market::write_sparse(&mut serial, &want)).unwrap();
        assert_eq!(written, serial);
        let back = matrix_market::read::<f64, _>(&written[..]).unwrap();
        assert_eq!(back, MatrixMarket::Sparse(want.clone()));
        let mut from_csr = Vec::new();
        in_pool(3, || matrix_market::write_sparse(&mut from_csr, &want_csr)).unwrap();
        let back: Csr<f64> = matrix_market::read_csr(&from_csr[..]).unwrap();
        assert_eq!(back, want_csr);
    }
}

/// The 1-based line of the `k`-th entry (0-based) of `text`.
fn line_of_entry(text: &str, k: usize) -> u64 {
    let mut seen = 0;
    for (n, l) in text.lines().enumerate().skip(3) {
        let t = l.trim();
        if t.is_empty() || t.starts_with('%') {
            continue;
        }
        if seen == k {
            return n as u64 + 1;
        }
        seen += 1;
    }
    panic!("no entry {k}");
}

#[track_caller]
fn assert_error_at(input: &[u8], threads: usize, line: u64, needle: &str) {
    match in_pool(threads, || matrix_market::read::<f64, _>(input)) {
        Err(MatrixMarketError::Parse { line: l, message }) => {
            assert_eq!(l, line, "{message}");
            assert!(message.contains(needle), "{message}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn errors_deep_in_the_file_name_their_line_on_any_thread_count() {
    let n = 150_000;
    let (text, _) = big_file(n, false);
    // A bad value in the last chunks, and a second one after it that must not be reported.
    let bad_at = line_of_entry(&text, 140_000);
    let mut lines: Vec<String> = text.lines().map(String::from).collect();
    lines[bad_at as usize - 1] = "1 1 oops".into();
    let later = line_of_entry(&text, 149_000);
    lines[later as usize - 1] = "0 1 1".into();
    let bad = lines.join("\n") + "\n";
    // Too many entries: the size line says fewer than there are.
    let announced = 100_000;
    let too_many = text.replacen(&format!(" {n}\n"), &format!(" {announced}\n"), 1);
    let excess = line_of_entry(&text, announced);
    // Too few: the file is cut after 120 000 entries.
    let cut_line = line_of_entry(&text, 120_000);
    let cut: String = text
        .lines()
        .take(cut_line as usize - 1)
        .map(|l| format!("{l}\n"))
        .collect();
    for threads in [1, 3] {
        for gz in [false, true] {
            let enc = |s: &str| {
                if gz {
                    gzip(s.as_bytes())
                } else {
                    s.as_bytes().to_vec()
                }
            };
            assert_error_at(&enc(&bad), threads, bad_at, "`oops`");
            assert_error_at(
                &enc(&too_many),
                threads,
                excess,
                "more entries than the 100000",
            );
            assert_error_at(
                &enc(&cut),
                threads,
                cut_line,
                "ends after 120000 entries, fewer than the 150000",
            );
        }
    }
}

#[test]
fn csr_conversion_sums_repeats_across_row_blocks_like_coo_to_csr() {
    // 200 000 entries on 1000 × 50: every row is hit about 200 times, most columns repeated,
    // rows spread over every block of the parallel conversion.
    let (mut r, mut c, mut v) = (Vec::new(), Vec::new(), Vec::new());
    let mut x: u64 = 99;
    for _ in 0..200_000 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        r.push((x >> 40) as u32 % 1000);
        c.push((x >> 20) as u32 % 50);
        v.push(((x >> 11) % 1000) as f64 - 500.0);
    }
    // Some rows empty, some sorted without repeats.
    for i in 0..50 {
        r.push(999);
        c.push(i);
        v.push(1.0);
    }
    let coo = Coo::try_new(1001, 50, r, c, v).unwrap();
    let want = coo.to_csr().unwrap();
    for threads in [1, 3] {
        let got = in_pool(threads, || MatrixMarket::Sparse(coo.clone()).into_csr()).unwrap();
        assert_eq!(got, want);
    }
}
