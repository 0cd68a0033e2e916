//! CUDA SpGEMM beyond the conformance suite: the memory-budget path (output larger than the
//! device memory allowed), a product past 2^31 intermediate products, use from several
//! threads, device errors. Without a device every test skips (fails with
//! HETSPARSE_REQUIRE_DEVICE=1).

mod common;

use hetsparse_core::generate;
use hetsparse_core::{
    Accumulator, Backend, Csr, Error, ProductChunk, ReferenceBackend, RunControl, Scalar,
    SpgemmAlgorithm, SpgemmOptions,
};
use hetsparse_cuda::{CudaBackend, DeviceScalar};

fn backend(test: &str) -> Option<CudaBackend> {
    common::obtain(test, CudaBackend::new())
}

const EXPLICIT: [SpgemmAlgorithm; 4] = [
    SpgemmAlgorithm::Adaptive,
    SpgemmAlgorithm::RowRow,
    SpgemmAlgorithm::ColumnRow,
    SpgemmAlgorithm::Esc,
];

fn assert_close(actual: &Csr<f64>, expected: &Csr<f64>, what: &str) {
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
    for (k, (x, y)) in actual.values().iter().zip(expected.values()).enumerate() {
        assert!(
            (x - y).abs() <= 1e-12 * (1.0 + y.abs()),
            "{what}: value {k}: {x} vs {y}"
        );
    }
}

/// `chunks` of `a · b` on `gpu` with `alg`: each arrives once, equal to the reference's
/// product of its rows of A and columns of B.
fn every_chunk_as_the_reference(
    gpu: &CudaBackend,
    a: &Csr<f64>,
    b: &Csr<f64>,
    chunks: &[ProductChunk],
    alg: SpgemmAlgorithm,
) {
    let mut seen = vec![false; chunks.len()];
    gpu.spgemm_chunks(
        a.into(),
        b.into(),
        chunks,
        &alg.into(),
        &RunControl::new(),
        &mut |c| {
            assert!(!seen[c.index], "{alg:?}: chunk {} twice", c.index);
            seen[c.index] = true;
            let expected = ReferenceBackend
                .spgemm(
                    &a.rows(c.chunk.rows.clone())?,
                    &b.column_panel(c.chunk.cols.clone())?,
                    SpgemmAlgorithm::Auto,
                )
                .unwrap();
            assert_close(&c.product, &expected, &format!("{alg:?} chunk {}", c.index));
            Ok(())
        },
    )
    .unwrap();
    assert!(seen.iter().all(|&s| s), "{alg:?}: every chunk arrives");
}

/// The output (about 2.4 MB) and the work memory exceed a 1.5 MB budget that the operands
/// fit in: every algorithm must still get the product, in batches through the two output
/// buffers.
#[test]
fn output_larger_than_the_memory_budget() {
    let Some(gpu) = backend("output_larger_than_the_memory_budget") else {
        return;
    };
    let gpu = gpu.with_memory_budget(1_500_000);
    let a = generate::uniform::<f64>(2000, 2000, 10, 1);
    let b = generate::uniform::<f64>(2000, 2000, 10, 2);
    let expected = ReferenceBackend
        .spgemm(&a, &b, SpgemmAlgorithm::Auto)
        .unwrap();
    assert!(
        expected.nnz() * 12 > 1_500_000,
        "the product must exceed the budget"
    );
    for alg in EXPLICIT {
        let c = gpu.spgemm(&a, &b, alg).unwrap();
        assert_close(&c, &expected, &format!("{alg:?} under a 1.5 MB budget"));
    }
}

/// Eight chunks (row ranges × column panels) pipelined under the same small budget: each
/// chunk arrives once, equal to the reference's product of A's rows and B's column panel.
#[test]
fn pipelined_chunks_under_a_memory_budget() {
    let Some(gpu) = backend("pipelined_chunks_under_a_memory_budget") else {
        return;
    };
    let gpu = gpu.with_memory_budget(1_500_000);
    let a = generate::uniform::<f64>(2000, 2000, 10, 11);
    let b = generate::uniform::<f64>(2000, 1800, 10, 12);
    let mut chunks = Vec::new();
    for rows in [0..700, 700..701, 701..1500, 1500..2000] {
        for cols in [0..900, 900..1800] {
            chunks.push(ProductChunk {
                rows: rows.clone(),
                cols,
            });
        }
    }
    for alg in EXPLICIT {
        every_chunk_as_the_reference(&gpu, &a, &b, &chunks, alg);
    }
}

/// Out of core (Xia et al. §III): A and B together are larger than the budget, so each chunk
/// places its own rows of A and window of B (kept for the next chunk on the same window).
/// Every chunk arrives once, equal to the reference's; and asked for the whole product as
/// one chunk, the backend says it does not fit.
#[test]
fn chunks_of_operands_larger_than_the_memory_budget() {
    let Some(gpu) = backend("chunks_of_operands_larger_than_the_memory_budget") else {
        return;
    };
    let budget = 1_000_000;
    let gpu = gpu.with_memory_budget(budget);
    let a = generate::uniform::<f64>(4000, 4000, 10, 21);
    let b = generate::uniform::<f64>(4000, 3000, 10, 22);
    let bytes = |m: &Csr<f64>| hetsparse_core::backend::memory::csr_bytes(m.nrows(), m.nnz(), 8);
    assert!(
        bytes(&a) + bytes(&b) > budget,
        "A and B must not fit together"
    );
    let mut chunks = Vec::new();
    // Column windows outside, rows inside: a window is placed once for the rows under it.
    for cols in [0..1000, 1000..1001, 1001..3000] {
        for r in 0..8 {
            chunks.push(ProductChunk {
                rows: r * 500..(r + 1) * 500,
                cols: cols.clone(),
            });
        }
    }
    for alg in EXPLICIT {
        every_chunk_as_the_reference(&gpu, &a, &b, &chunks, alg);
        let whole = ProductChunk {
            rows: 0..a.nrows(),
            cols: 0..b.ncols(),
        };
        let result = gpu.spgemm_chunks(
            (&a).into(),
            (&b).into(),
            std::slice::from_ref(&whole),
            &alg.into(),
            &RunControl::new(),
            &mut |_| Ok(()),
        );
        assert!(
            matches!(&result, Err(e) if e.is_retryable()),
            "{alg:?}: the whole product cannot fit: {result:?}"
        );
    }
}

/// Operands larger than the budget: a clear out-of-memory error, no panic.
#[test]
fn operands_over_the_budget_are_out_of_memory() {
    let Some(gpu) = backend("operands_over_the_budget_are_out_of_memory") else {
        return;
    };
    let gpu = gpu.with_memory_budget(10_000);
    let a = generate::uniform::<f64>(2000, 2000, 10, 3);
    for alg in EXPLICIT {
        match gpu.spgemm(&a, &a, alg) {
            Err(Error::OutOfMemory { .. }) => {}
            other => panic!("{alg:?}: expected OutOfMemory, got {other:?}"),
        }
    }
}

/// 2^32 intermediate products (cuSPARSE returns an empty matrix past 2^31): A is 32768 × 256
/// with every entry 1, B is 256 × 512 dense, so every row of C is B's column sums.
#[test]
fn more_than_2_pow_31_intermediate_products() {
    let Some(gpu) = backend("more_than_2_pow_31_intermediate_products") else {
        return;
    };
    let (m, k, n) = (1usize << 15, 256usize, 512usize);
    let a = Csr::try_new(
        m,
        k,
        (0..=m as u64).map(|i| i * k as u64).collect(),
        (0..m).flat_map(|_| 0..k as u32).collect(),
        vec![1.0f64; m * k],
    )
    .unwrap();
    let b_val = |r: usize, c: usize| ((r * 7 + c * 3) % 11) as f64 - 5.0;
    let b = Csr::try_new(
        k,
        n,
        (0..=k as u64).map(|i| i * n as u64).collect(),
        (0..k).flat_map(|_| 0..n as u32).collect(),
        (0..k)
            .flat_map(|r| (0..n).map(move |c| b_val(r, c)))
            .collect(),
    )
    .unwrap();
    let products = (m * k * n) as u64;
    assert!(products > 1 << 31);
    let colsum: Vec<f64> = (0..n).map(|c| (0..k).map(|r| b_val(r, c)).sum()).collect();
    for alg in [SpgemmAlgorithm::Auto, SpgemmAlgorithm::RowRow] {
        let c = gpu.spgemm(&a, &b, alg).unwrap();
        assert_eq!(c.shape(), (m, n), "{alg:?}");
        assert_eq!(
            c.nnz(),
            (m * n) as u64,
            "{alg:?}: every entry of C is stored"
        );
        for i in 0..m {
            let (cols, vals) = c.row(i);
            assert!(
                cols.iter().enumerate().all(|(j, &c)| c as usize == j),
                "{alg:?} row {i}"
            );
            assert_eq!(vals, &colsum[..], "{alg:?} row {i}");
        }
    }
}

/// One backend shared by four threads.
#[test]
fn usable_from_several_threads() {
    let Some(gpu) = backend("usable_from_several_threads") else {
        return;
    };
    let a = generate::uniform::<f64>(500, 400, 8, 5);
    let b = generate::uniform::<f64>(400, 300, 8, 6);
    let expected = ReferenceBackend
        .spgemm(&a, &b, SpgemmAlgorithm::Auto)
        .unwrap();
    std::thread::scope(|s| {
        for (t, alg) in EXPLICIT.into_iter().enumerate() {
            let (gpu, a, b, expected) = (&gpu, &a, &b, &expected);
            s.spawn(move || {
                for _ in 0..5 {
                    let c = gpu.spgemm(a, b, alg).unwrap();
                    assert_close(&c, expected, &format!("thread {t} ({alg:?})"));
                }
            });
        }
    });
}

/// A device ordinal that does not exist is "no device", not a panic.
#[test]
fn missing_device_ordinal_is_no_device() {
    if backend("missing_device_ordinal_is_no_device").is_none() {
        return;
    }
    assert!(matches!(
        CudaBackend::with_device(1000),
        Err(Error::NoDevice { .. })
    ));
}

/// Rows with very many products, in every algorithm: a row whose window is narrow enough for a
/// dense accumulator (several blocks per row), one so wide that its table stays a hash table in
/// global memory, rows whose shared-memory tables need the opt-in beyond 48 KiB, and short ones
/// (a warp per row).
#[test]
fn long_rows_use_the_global_memory_path() {
    let Some(gpu) = backend("long_rows_use_the_global_memory_path") else {
        return;
    };
    let n = 3000;
    let base = generate::uniform::<f64>(n, n, 3, 7);
    // (columns of B, entries of row 0 of A): row 0 of C has 20 products per entry of row 0.
    // 3000 × 20 products over 20 000 columns: dense; 600 × 20 over 3 million: global hash;
    // 100 × 20 over 3 million: a shared table of 4096 slots, whose f64 numeric table takes
    // exactly 48 KiB (beside the kernel's static shared memory: the opt-in's edge).
    for (width, first_row) in [(20_000usize, n), (3_000_000, 600), (3_000_000, 100)] {
        let mut offsets = vec![0u64];
        let mut cols: Vec<u32> = (0..first_row as u32)
            .map(|j| j * (n / first_row) as u32)
            .collect();
        let mut vals: Vec<f64> = (0..first_row).map(|j| 1.0 + (j % 5) as f64).collect();
        offsets.push(cols.len() as u64);
        // Row 1 has 300 entries: 6000 products, a table beyond 48 KiB of shared memory.
        cols.extend(0..300u32);
        vals.extend((0..300).map(|j| 0.5 + f64::from(j % 3)));
        offsets.push(cols.len() as u64);
        for i in 2..n {
            let (c, v) = base.row(i);
            cols.extend_from_slice(c);
            vals.extend_from_slice(v);
            offsets.push(cols.len() as u64);
        }
        let a = Csr::try_new(n, n, offsets, cols, vals).unwrap();
        let b = generate::uniform::<f64>(n, width, 20, 8);
        let expected = ReferenceBackend
            .spgemm(&a, &b, SpgemmAlgorithm::Auto)
            .unwrap();
        for alg in EXPLICIT {
            let c = gpu.spgemm(&a, &b, alg).unwrap();
            assert_close(
                &c,
                &expected,
                &format!("{alg:?} with a long row, {width} columns"),
            );
        }
        check_plan_and_windows(
            &gpu,
            (&a, &b, &expected),
            2.0,
            &[0..width / 3, width / 3..width],
            &format!("a long row, {width} columns"),
        );
    }
}

/// A plan of `A·B` executed with A's values times `factor` (the planned columns read out of
/// the accumulators), then the column windows `windows` of `A·B` (windows that start inside B:
/// the accumulators cover the window only), each against `expected`'s panel.
fn check_plan_and_windows(
    gpu: &CudaBackend,
    (a, b, expected): (&Csr<f64>, &Csr<f64>, &Csr<f64>),
    factor: f64,
    windows: &[std::ops::Range<usize>],
    what: &str,
) {
    let (ra, rb) = (gpu.upload(a).unwrap(), gpu.upload(b).unwrap());
    let plan = gpu
        .plan_spgemm((&ra).into(), (&rb).into(), &SpgemmOptions::new())
        .unwrap();
    let scaled: Vec<f64> = a.values().iter().map(|v| factor * v).collect();
    let ra2 = gpu.upload_values(&ra, &scaled).unwrap();
    let c2 = gpu
        .execute_spgemm(&plan, (&ra2).into(), (&rb).into(), &RunControl::new())
        .unwrap();
    let a2 = Csr::try_new(
        a.nrows(),
        a.ncols(),
        a.row_offsets().to_vec(),
        a.col_indices().to_vec(),
        scaled,
    )
    .unwrap();
    let expected2 = ReferenceBackend
        .spgemm(&a2, b, SpgemmAlgorithm::Auto)
        .unwrap();
    assert_close(
        &gpu.download(&c2).unwrap(),
        &expected2,
        &format!("{what}: plan with new values"),
    );
    let chunks: Vec<ProductChunk> = windows
        .iter()
        .map(|cols| ProductChunk {
            rows: 0..a.nrows(),
            cols: cols.clone(),
        })
        .collect();
    gpu.spgemm_chunks(
        a.into(),
        b.into(),
        &chunks,
        &SpgemmAlgorithm::Adaptive.into(),
        &RunControl::new(),
        &mut |c| {
            let want = expected.column_panel(c.chunk.cols.clone())?;
            assert_close(
                &c.product,
                &want,
                &format!("{what}: window {:?}", c.chunk.cols),
            );
            Ok(())
        },
    )
    .unwrap();
}

/// On sm_90 (H100, H200) every kernel module comes from its binary compiled ahead of time, so
/// nothing is compiled when a process starts; elsewhere the PTX is, and gives the same results
/// (the rest of the suite runs on whichever was loaded).
#[test]
fn sm_90_loads_the_kernel_binaries() {
    let Some(gpu) = backend("sm_90_loads_the_kernel_binaries") else {
        return;
    };
    let (major, minor) = gpu.gpu().compute_capability();
    eprintln!(
        "compute capability {major}.{minor}: kernels from {}",
        if gpu.gpu().kernel_binaries() {
            "sm_90 binaries"
        } else {
            "PTX"
        }
    );
    assert_eq!(gpu.gpu().kernel_binaries(), major == 9);
}

/// Rows of C of every length from 0 to 40 entries, each entry the sum of one or two products:
/// the edges of the thread-per-row bins (8 and 16 entries, 8 and 16 products) and of the
/// warp-per-row ones, for every algorithm, a plan executed with new values, and column windows
/// that start inside B.
#[test]
fn short_rows_at_the_edges_of_their_bins() {
    let Some(gpu) = backend("short_rows_at_the_edges_of_their_bins") else {
        return;
    };
    let n = 4100usize;
    // Row i of A: m = i % 41 consecutive columns from (7 i) mod n; row k of B: columns k and
    // k + 1 + k % 3 (mod n). Row i of C then has between m + 1 and 2 m entries.
    let mut offsets = vec![0u64];
    let (mut cols, mut vals) = (Vec::new(), Vec::new());
    for i in 0..n {
        let m = i % 41;
        let mut row: Vec<u32> = (0..m).map(|j| ((7 * i + j) % n) as u32).collect();
        row.sort_unstable();
        vals.extend(row.iter().map(|&c| 1.0 + f64::from(c % 7)));
        cols.extend(row);
        offsets.push(cols.len() as u64);
    }
    let a = Csr::try_new(n, n, offsets, cols, vals).unwrap();
    let mut offsets = vec![0u64];
    let (mut cols, mut vals) = (Vec::new(), Vec::new());
    for k in 0..n {
        let mut row = vec![k as u32, ((k + 1 + k % 3) % n) as u32];
        row.sort_unstable();
        vals.extend(row.iter().map(|&c| 0.5 + f64::from(c % 5)));
        cols.extend(row);
        offsets.push(cols.len() as u64);
    }
    let b = Csr::try_new(n, n, offsets, cols, vals).unwrap();
    let expected = ReferenceBackend
        .spgemm(&a, &b, SpgemmAlgorithm::Auto)
        .unwrap();
    let lengths: std::collections::BTreeSet<u64> = expected
        .row_offsets()
        .windows(2)
        .map(|w| w[1] - w[0])
        .collect();
    for len in [0, 8, 9, 16, 17, 32, 33, 40] {
        assert!(lengths.contains(&len), "no row of C has {len} entries");
    }
    for alg in EXPLICIT {
        let c = gpu.spgemm(&a, &b, alg).unwrap();
        assert_close(&c, &expected, &format!("{alg:?}, short rows"));
    }
    check_plan_and_windows(
        &gpu,
        (&a, &b, &expected),
        3.0,
        &[0..1000, 1000..n],
        "short rows",
    );
}

/// Rows of A longer than a warp's share of the row analysis (16 384 entries; the skewed class's
/// dense rows) are summed by every block of the grid: rows at and around that length, beside
/// short rows, for every algorithm and a column window.
#[test]
fn rows_of_a_too_long_for_one_warp() {
    let Some(gpu) = backend("rows_of_a_too_long_for_one_warp") else {
        return;
    };
    let n = 60_000usize;
    let long = [16_384usize, 16_385, 40_000, 59_999];
    let mut offsets = vec![0u64];
    let (mut cols, mut vals) = (Vec::new(), Vec::new());
    for i in 0..n {
        let len = if i % 1000 == 7 {
            long[(i / 1000) % long.len()]
        } else {
            i % 5
        };
        let stride = n / len.max(1);
        let row = (0..len).map(|j| ((j * stride + i) % n) as u32);
        let mut row: Vec<u32> = row.collect();
        row.sort_unstable();
        row.dedup();
        vals.extend(row.iter().map(|&c| 1.0 + f64::from(c % 3)));
        cols.extend(row);
        offsets.push(cols.len() as u64);
    }
    let a = Csr::try_new(n, n, offsets, cols, vals).unwrap();
    let b = generate::uniform::<f64>(n, n, 2, 11);
    let expected = ReferenceBackend
        .spgemm(&a, &b, SpgemmAlgorithm::Auto)
        .unwrap();
    for alg in EXPLICIT {
        let c = gpu.spgemm(&a, &b, alg).unwrap();
        assert_close(
            &c,
            &expected,
            &format!("{alg:?}, rows of A of 16 384 entries and more"),
        );
    }
    let chunks = [ProductChunk {
        rows: 1000..n,
        cols: 20_000..n,
    }];
    gpu.spgemm_chunks(
        (&a).into(),
        (&b).into(),
        &chunks,
        &SpgemmAlgorithm::Adaptive.into(),
        &RunControl::new(),
        &mut |c| {
            let want = expected
                .rows(c.chunk.rows.clone())?
                .column_panel(c.chunk.cols.clone())?;
            assert_close(&c.product, &want, "long rows of A, a chunk");
            Ok(())
        },
    )
    .unwrap();
}

// ---------------------------------------------------------------------------------------------
// Medium rows (a block per row, shared hash tables): rows of C with 500 to 5000 entries, whose
// numeric phase ranks the columns through a bitmap of the window where it fits shared memory
// beside the table (and whose symbolic phase counts them in one where it is no larger than the
// table), or sorts the table where the window is too wide.

/// The accumulator's machine epsilon and the storage's of `T`.
fn epsilons<T: Scalar>() -> (f64, f64) {
    let acc = <T::Acc as Accumulator>::EPSILON;
    (acc, T::TYPE.epsilon())
}

/// `|a|` entrywise, as f64.
fn magnitudes<T: Scalar>(a: &Csr<T>) -> Csr<f64> {
    let (nrows, ncols) = a.shape();
    Csr::try_new(
        nrows,
        ncols,
        a.row_offsets().to_vec(),
        a.col_indices().to_vec(),
        a.values().iter().map(|v| v.magnitude()).collect(),
    )
    .unwrap()
}

/// What a product of `a` and `b` must equal: the reference's C, Σ|a||b| per entry (the same
/// structure) and the terms of each row of A.
struct Reference<T> {
    c: Csr<T>,
    magnitude: Csr<f64>,
    terms: Vec<u64>,
}

impl<T: Scalar> Reference<T> {
    fn of(a: &Csr<T>, b: &Csr<T>) -> Self {
        let c = ReferenceBackend
            .spgemm(a, b, SpgemmAlgorithm::Auto)
            .unwrap();
        let magnitude = ReferenceBackend
            .spgemm(&magnitudes(a), &magnitudes(b), SpgemmAlgorithm::Auto)
            .unwrap();
        assert_eq!(c.col_indices(), magnitude.col_indices());
        let terms = (0..a.nrows()).map(|i| a.row_nnz(i)).collect();
        Reference {
            c,
            magnitude,
            terms,
        }
    }

    /// Columns `cols` of the reference.
    fn panel(&self, cols: std::ops::Range<usize>) -> Self {
        Reference {
            c: self.c.column_panel(cols.clone()).unwrap(),
            magnitude: self.magnitude.column_panel(cols).unwrap(),
            terms: self.terms.clone(),
        }
    }

    /// `actual` has the reference's structure exactly and its values within the rounding of
    /// either order of summation.
    fn check(&self, actual: &Csr<T>, what: &str) {
        let expected = &self.c;
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
        let (acc_eps, storage_eps) = epsilons::<T>();
        for i in 0..expected.nrows() {
            let (_, want) = expected.row(i);
            let (_, got) = actual.row(i);
            let (_, mag) = self.magnitude.row(i);
            let terms = self.terms[i].max(1) as f64;
            for (j, ((x, y), m)) in got.iter().zip(want).zip(mag).enumerate() {
                let ((xr, xi), (yr, yi)) = (x.to_parts(), y.to_parts());
                let err = (xr - yr).hypot(xi - yi);
                let tol = 2.0 * terms * acc_eps * m + 2.0 * storage_eps * y.magnitude();
                assert!(
                    err <= tol + f64::MIN_POSITIVE,
                    "{what}: row {i}, entry {j}: {x:?} vs {y:?}"
                );
            }
        }
    }
}

/// A `nrows × k` matrix whose row `i` has `lengths[i % lengths.len()]` distinct random columns,
/// with values `±[0.1, 1)` in each part.
fn rows_of_lengths<T: Scalar>(nrows: usize, k: usize, lengths: &[usize], seed: u64) -> Csr<T> {
    let mut rng = generate::Rng::new(seed);
    let value = |rng: &mut generate::Rng| {
        let mut part = || {
            let m = 0.1 + 0.9 * rng.next_f64();
            if rng.next_u64() & 1 == 0 {
                m
            } else {
                -m
            }
        };
        let (re, im) = (part(), part());
        T::from_parts_lossy(re, im)
    };
    let (mut offsets, mut cols, mut vals) = (vec![0u64], Vec::new(), Vec::new());
    for i in 0..nrows {
        let len = lengths[i % lengths.len()].min(k);
        let mut row = std::collections::BTreeSet::new();
        while row.len() < len {
            row.insert(rng.below(k as u64) as u32);
        }
        for c in row {
            cols.push(c);
            vals.push(value(&mut rng));
        }
        offsets.push(cols.len() as u64);
    }
    Csr::try_new(nrows, k, offsets, cols, vals).unwrap()
}

/// A · B on the adaptive path, whole and in column windows (`panels`), and a plan of it executed
/// with new values of A (the planned columns read out of the tables).
fn check_medium_rows<T: DeviceScalar>(
    gpu: &CudaBackend,
    a: &Csr<T>,
    b: &Csr<T>,
    panels: &[std::ops::Range<usize>],
    what: &str,
) {
    let expected = Reference::of(a, b);
    let c = gpu.spgemm(a, b, SpgemmAlgorithm::Adaptive).unwrap();
    expected.check(&c, &format!("{what}: whole"));
    let chunks: Vec<ProductChunk> = panels
        .iter()
        .map(|cols| ProductChunk {
            rows: 0..a.nrows(),
            cols: cols.clone(),
        })
        .collect();
    let mut seen = vec![false; chunks.len()];
    gpu.spgemm_chunks(
        a.into(),
        b.into(),
        &chunks,
        &SpgemmAlgorithm::Adaptive.into(),
        &RunControl::new(),
        &mut |c| {
            seen[c.index] = true;
            expected
                .panel(c.chunk.cols.clone())
                .check(&c.product, &format!("{what}: window {:?}", c.chunk.cols));
            Ok(())
        },
    )
    .unwrap();
    assert!(seen.iter().all(|&s| s), "{what}: every window arrives");
    let (ra, rb) = (gpu.upload(a).unwrap(), gpu.upload(b).unwrap());
    let plan = gpu
        .plan_spgemm((&ra).into(), (&rb).into(), &SpgemmOptions::new())
        .unwrap();
    let negated: Vec<T> = a.values().iter().map(|v| v.neg()).collect();
    let ra2 = gpu.upload_values(&ra, &negated).unwrap();
    let c2 = gpu
        .execute_spgemm(&plan, (&ra2).into(), (&rb).into(), &RunControl::new())
        .unwrap();
    let (nrows, ncols) = a.shape();
    let a2 = Csr::try_new(
        nrows,
        ncols,
        a.row_offsets().to_vec(),
        a.col_indices().to_vec(),
        negated,
    )
    .unwrap();
    Reference::of(&a2, b).check(
        &gpu.download(&c2).unwrap(),
        &format!("{what}: plan with new values"),
    );
}

/// Wide windows (100 000 and 200 000 columns, as in the LP class; and windows of them that
/// start inside B): A's rows have 13 to 110 entries, B's 40, so rows of C have about 500 to
/// 4400 entries, in tables of 1024 to 16 384 slots; most rank through the bitmap, tables
/// smaller than the bitmap sort.
fn medium_rows_in_wide_windows<T: DeviceScalar>() {
    let Some(gpu) = backend("medium_rows_in_wide_windows") else {
        return;
    };
    let (n, k) = (600, 3000);
    let a = rows_of_lengths::<T>(n, k, &[13, 30, 60, 110, 45], 21);
    for width in [100_000, 200_000] {
        let b = generate::uniform::<T>(k, width, 40, 22);
        let panels = [0..width / 4, width / 4..width];
        check_medium_rows(&gpu, &a, &b, &panels, &format!("{width} columns"));
    }
}

/// Narrow windows (a B of 8000 columns, and windows of 3000 and 4000 columns from column 3000
/// on): many products per column, rows of C with about 500 to 3000 entries.
fn medium_rows_in_narrow_windows<T: DeviceScalar>() {
    let Some(gpu) = backend("medium_rows_in_narrow_windows") else {
        return;
    };
    let (n, k, width) = (600, 3000, 8000);
    let a = rows_of_lengths::<T>(n, k, &[15, 25, 40, 60], 23);
    let b = generate::uniform::<T>(k, width, 40, 24);
    let panels = [0..3000, 3000..7000, 7000..8000];
    check_medium_rows(&gpu, &a, &b, &panels, "8000 columns");
}

/// Windows too wide for a bitmap beside the table (1 million columns: the bitmap takes more
/// than the table; 3 million: more than shared memory): the tables are sorted.
fn medium_rows_in_windows_too_wide_for_the_bitmap<T: DeviceScalar>() {
    let Some(gpu) = backend("medium_rows_in_windows_too_wide_for_the_bitmap") else {
        return;
    };
    let (n, k) = (400, 3000);
    let a = rows_of_lengths::<T>(n, k, &[13, 30, 60], 25);
    for width in [1_000_000, 3_000_000] {
        let b = generate::uniform::<T>(k, width, 40, 26);
        let panels = [1000..width / 2, width / 2..width - 1000];
        check_medium_rows(&gpu, &a, &b, &panels, &format!("{width} columns"));
    }
}

macro_rules! medium_rows_per_scalar {
    ($($module:ident: $ty:ty),+) => {
        $(
            mod $module {
                #[test]
                fn medium_rows_in_wide_windows() {
                    super::medium_rows_in_wide_windows::<$ty>()
                }
                #[test]
                fn medium_rows_in_narrow_windows() {
                    super::medium_rows_in_narrow_windows::<$ty>()
                }
                #[test]
                fn medium_rows_in_windows_too_wide_for_the_bitmap() {
                    super::medium_rows_in_windows_too_wide_for_the_bitmap::<$ty>()
                }
            }
        )+
    };
}

medium_rows_per_scalar!(
    f32_: f32,
    f64_: f64,
    c32: hetsparse_core::Complex<f32>,
    c64: hetsparse_core::Complex<f64>,
    f16_: hetsparse_core::f16
);

/// Exact equality (the column-range tests use small integers, whose sums every type holds
/// exactly, in any order).
fn assert_same<T: hetsparse_core::Scalar>(actual: &Csr<T>, expected: &Csr<T>, what: &str) {
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
    for (k, (x, y)) in actual.values().iter().zip(expected.values()).enumerate() {
        assert_eq!(x.to_parts(), y.to_parts(), "{what}: value {k}");
    }
}

/// A small deterministic generator for the column-range tests.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

/// Rows of `cols` (sorted, without repeats) with small integer values.
fn integer_csr<T: hetsparse_core::Scalar>(ncols: usize, rows: Vec<Vec<u32>>, seed: u64) -> Csr<T> {
    let mut rng = Lcg(seed);
    let mut offsets = vec![0u64];
    let (mut cols, mut vals) = (Vec::new(), Vec::new());
    let nrows = rows.len();
    for mut row in rows {
        row.sort_unstable();
        row.dedup();
        for c in row {
            cols.push(c);
            let re = 1.0 + rng.below(3) as f64;
            let im = rng.below(3) as f64 - 1.0;
            vals.push(T::from_parts_lossy(re, im));
        }
        offsets.push(cols.len() as u64);
    }
    Csr::try_new(nrows, ncols, offsets, cols, vals).unwrap()
}

/// `A·B` of long rows (`premise` checks the fixture's shape on the reference product) as a
/// whole product, a plan executed with new values (the known columns of C take their values
/// from the accumulators), and chunks: column windows starting inside B (ranges start at the
/// window's first column) and a row range starting past the first long rows.
fn check_long_rows<T: DeviceScalar>(
    gpu: &CudaBackend,
    (a, b): (Csr<T>, Csr<T>),
    premise: impl Fn(&Csr<T>),
    what: &str,
) {
    let width = b.ncols();
    let expected = ReferenceBackend
        .spgemm(&a, &b, SpgemmAlgorithm::Auto)
        .unwrap();
    premise(&expected);
    let c = gpu.spgemm(&a, &b, SpgemmAlgorithm::Adaptive).unwrap();
    assert_same(&c, &expected, &format!("{what}: A·B"));
    // Resident product, then a plan executed with new values: the known columns of C take
    // their values from the ranges' accumulators.
    let (ra, rb) = (gpu.upload(&a).unwrap(), gpu.upload(&b).unwrap());
    let plan = gpu
        .plan_spgemm((&ra).into(), (&rb).into(), &SpgemmOptions::new())
        .unwrap();
    let tripled: Vec<T> = a
        .values()
        .iter()
        .map(|v| {
            let (re, im) = v.to_parts();
            T::from_parts_lossy(3.0 * re, 3.0 * im)
        })
        .collect();
    let ra3 = gpu.upload_values(&ra, &tripled).unwrap();
    let c3 = gpu
        .execute_spgemm(&plan, (&ra3).into(), (&rb).into(), &RunControl::new())
        .unwrap();
    let a3 = Csr::try_new(
        a.nrows(),
        a.ncols(),
        a.row_offsets().to_vec(),
        a.col_indices().to_vec(),
        tripled,
    )
    .unwrap();
    let expected3 = ReferenceBackend
        .spgemm(&a3, &b, SpgemmAlgorithm::Auto)
        .unwrap();
    assert_same(
        &gpu.download(&c3).unwrap(),
        &expected3,
        &format!("{what}: plan with new values"),
    );
    // Column windows starting inside B (ranges start at the window's first column) and row
    // ranges starting past the long rows.
    let chunks: Vec<ProductChunk> = [
        (0..a.nrows(), 0..25_000),
        (0..a.nrows(), 25_000..width),
        (3..45, 1_000..width - 1),
    ]
    .into_iter()
    .map(|(rows, cols)| ProductChunk { rows, cols })
    .collect();
    let mut seen = 0;
    gpu.spgemm_chunks(
        (&a).into(),
        (&b).into(),
        &chunks,
        &SpgemmAlgorithm::Adaptive.into(),
        &RunControl::new(),
        &mut |c| {
            let want = ReferenceBackend
                .spgemm(
                    &a.rows(c.chunk.rows.clone())?,
                    &b.column_panel(c.chunk.cols.clone())?,
                    SpgemmAlgorithm::Auto,
                )
                .unwrap();
            assert_same(&c.product, &want, &format!("{what}: chunk {:?}", c.chunk));
            seen += 1;
            Ok(())
        },
    )
    .unwrap();
    assert_eq!(seen, chunks.len(), "{what}: every chunk arrives");
}

/// Width of the long-row fixtures: wider than one column range of every type (f32: 32 768
/// columns on an H100, f64 16 384, complex f64 8 192), a multiple of none.
const LONG_ROW_WIDTH: usize = 70_000;

/// Rows of `count` random columns of `width`.
fn random_rows(rng: &mut Lcg, rows: usize, count: usize, width: usize) -> Vec<Vec<u32>> {
    (0..rows)
        .map(|_| (0..count).map(|_| rng.below(width as u64) as u32).collect())
        .collect()
}

/// Long rows whose rows of A are short (power-law hubs): column ranges in both phases.
/// B: 64 hub rows (about 1 340 entries) holding every column next to a range edge (each
/// multiple of 1024 and the column before it, from 0 and from the chunk start 25 000) and
/// 1 200 columns of a pool of 1 500; 64 wide rows of 2 000 random columns; the other rows 4
/// random columns. A: rows 0..4 the hubs, the wide rows and 1 300 others (more A entries
/// than a block stages at once), 4..8 the same with 600 others (staged once for all of a
/// block's ranges), 8..40 the hubs only (85 000 products on at most 1 700 columns: long in
/// the symbolic phase, short in the numeric one), 40..42 the wide rows only (128 000 products);
/// the rest 5 random entries. Rows 0..8 and 40..42 have over 32 768 entries of C: tables of
/// 2^17 slots, ranges split over several blocks.
fn hub_operands<T: Scalar>() -> (Csr<T>, Csr<T>) {
    const N: usize = 3000;
    const HUBS: u32 = 64;
    const WIDE: u32 = 64;
    let width = LONG_ROW_WIDTH;
    let mut rng = Lcg(0x5eed);
    let mut edges: Vec<u32> = Vec::new();
    for start in [0usize, 25_000] {
        for m in 0.. {
            let c = start + m * 1024;
            if c >= width {
                break;
            }
            edges.push(c as u32);
            if c > 0 {
                edges.push(c as u32 - 1);
            }
        }
    }
    edges.push(width as u32 - 1);
    let pool: Vec<u32> = (0..1500).map(|_| rng.below(width as u64) as u32).collect();
    let mut b_rows: Vec<Vec<u32>> = (0..HUBS)
        .map(|_| {
            let mut r = edges.clone();
            r.extend((0..1200).map(|_| pool[rng.below(1500) as usize]));
            r
        })
        .collect();
    b_rows.extend(random_rows(&mut rng, WIDE as usize, 2000, width));
    b_rows.extend(random_rows(&mut rng, N - b_rows.len(), 4, width));
    let first_other = u64::from(HUBS + WIDE);
    let others = |rng: &mut Lcg, count: usize| -> Vec<u32> {
        (0..count)
            .map(|_| (first_other + rng.below(N as u64 - first_other)) as u32)
            .collect()
    };
    let a_rows = (0..N)
        .map(|i| match i {
            0..8 => {
                let mut row: Vec<u32> = (0..HUBS + WIDE).collect();
                row.extend(others(&mut rng, if i < 4 { 1300 } else { 600 }));
                row
            }
            8..40 => (0..HUBS).collect(),
            40..42 => (HUBS..HUBS + WIDE).collect(),
            _ => (0..5).map(|_| rng.below(N as u64) as u32).collect(),
        })
        .collect();
    (integer_csr(N, a_rows, 1), integer_csr(width, b_rows, 2))
}

/// Long rows whose rows of A are long too (the skewed class's): a dense row in global memory.
/// B: 48 000 rows of 6 random columns. A: row 0 every row of B (288 000 products, nearly every
/// column: the longest bin of both phases), row 1 rows 0..2 872 (17 000 products, 15 000
/// entries: a dense row in the numeric phase, column ranges in the symbolic one); the rest 5
/// random entries.
fn long_a_operands<T: Scalar>() -> (Csr<T>, Csr<T>) {
    const N: usize = 48_000;
    let mut rng = Lcg(0xa11);
    let b_rows = random_rows(&mut rng, N, 6, LONG_ROW_WIDTH);
    let a_rows = (0..3000)
        .map(|i| match i {
            0 => (0..N as u32).collect(),
            1 => (0..2872).collect(),
            _ => (0..5).map(|_| rng.below(N as u64) as u32).collect(),
        })
        .collect();
    (
        integer_csr(N, a_rows, 3),
        integer_csr(LONG_ROW_WIDTH, b_rows, 4),
    )
}

fn long_rows_of<T: DeviceScalar>(gpu: &CudaBackend, what: &str) {
    check_long_rows(
        gpu,
        hub_operands::<T>(),
        |c| {
            for i in [0, 4, 40] {
                assert!(
                    c.row_nnz(i) > 32_768,
                    "{what}: row {i} of C must take tables of 2^17 slots ({} entries)",
                    c.row_nnz(i)
                );
            }
        },
        &format!("{what}, short rows of A"),
    );
    check_long_rows(
        gpu,
        long_a_operands::<T>(),
        |c| {
            assert!(
                c.row_nnz(0) > 65_536,
                "{what}: row 0 of C: {}",
                c.row_nnz(0)
            );
            assert!(
                (8_192..16_384).contains(&c.row_nnz(1)),
                "{what}: row 1 of C: {}",
                c.row_nnz(1)
            );
        },
        &format!("{what}, long rows of A"),
    );
}

/// Long rows (tables beyond shared memory): column ranges in shared memory where the rows of A
/// are short against their products, dense rows in global memory where they are long (both in
/// one product where both occur), checked exactly (small integers) in f32, f64 and complex f64
/// as whole products, plans and chunks.
#[test]
fn long_rows_by_column_ranges_and_dense_rows() {
    let Some(gpu) = backend("long_rows_by_column_ranges_and_dense_rows") else {
        return;
    };
    long_rows_of::<f32>(&gpu, "f32");
    long_rows_of::<f64>(&gpu, "f64");
    long_rows_of::<hetsparse_core::Complex<f64>>(&gpu, "complex f64");
}

/// The strictly lower triangle of an undirected graph of `n` vertices with hubs, values 0 to
/// 3 (zeros included, which a valued mask refuses): random edges, about 4 per vertex, the last
/// vertex joined to every second one (a row of the triangle longer than the columns a block
/// stages in shared memory), the one before it to every sixth (a row that fits) and the middle
/// one to every tenth. The hubs' rows have tens of thousands of products in `L·L`: the heavy
/// rows the semiring kernels split over blocks.
fn hub_triangle<T: Scalar>(n: usize, seed: u64) -> Csr<T> {
    let mut rng = Lcg(seed);
    let mut rows = vec![Vec::new(); n];
    let mut join = |i: usize, j: usize| {
        if i != j {
            rows[i.max(j)].push(i.min(j) as u32);
        }
    };
    for i in 0..n {
        for _ in 0..2 {
            join(i, rng.below(n as u64) as usize);
        }
    }
    for j in 0..n {
        if j % 2 == 0 {
            join(n - 1, j);
        }
        if j % 6 == 0 {
            join(n - 2, j);
        }
        if j % 10 == 0 {
            join(n / 2, j);
        }
    }
    let mut offsets = vec![0u64];
    let (mut cols, mut vals) = (Vec::new(), Vec::new());
    for mut row in rows {
        row.sort_unstable();
        row.dedup();
        for c in row {
            cols.push(c);
            vals.push(T::from_parts_lossy(rng.below(4) as f64, 0.0));
        }
        offsets.push(cols.len() as u64);
    }
    Csr::try_new(n, n, offsets, cols, vals).unwrap()
}

/// `C⟨M⟩ = L·L` over `kind` on the hub graph, through `spgemm_with`, against the reference:
/// the same structure, the same values (small integers: exact in every type, whatever order a
/// split row adds in), any valid product for "any"; masked, the multiply-adds counted are the
/// products landing in C.
fn check_hub_product<T: DeviceScalar>(
    gpu: &CudaBackend,
    l: &Csr<T>,
    kind: hetsparse_core::SemiringKind,
    mask: Option<hetsparse_core::Mask>,
) {
    let mut options = SpgemmOptions::new().with_semiring(kind);
    let what = format!(
        "{kind} over {}, mask {:?}",
        T::TYPE,
        mask.as_ref().map(|m| (m.kind(), m.is_complemented()))
    );
    if let Some(m) = &mask {
        options = options.with_mask(m.clone());
    }
    let want = hetsparse_core::reference::spgemm_with_options(l, l, &options).unwrap();
    let run = RunControl::new();
    let got = gpu.spgemm_with(l.into(), l.into(), &options, &run).unwrap();
    assert_eq!(got.row_offsets(), want.row_offsets(), "{what}: row offsets");
    assert_eq!(got.col_indices(), want.col_indices(), "{what}: columns");
    for i in 0..want.nrows() {
        let (cols, vals) = want.row(i);
        let (_, got_vals) = got.row(i);
        for (p, &j) in cols.iter().enumerate() {
            let ok = if kind == hetsparse_core::SemiringKind::AnySecondI {
                let k = got_vals[p].to_parts().0 as usize;
                l.row(i).0.binary_search(&(k as u32)).is_ok()
                    && l.row(k).0.binary_search(&j).is_ok()
            } else {
                got_vals[p].to_parts() == vals[p].to_parts()
            };
            assert!(
                ok,
                "{what}: C[{i}, {j}] = {:?}, expected {:?}",
                got_vals[p], vals[p]
            );
        }
    }
    if mask.is_some() {
        let landing: u64 = (0..l.nrows())
            .map(|i| {
                let admitted = want.row(i).0;
                l.row(i)
                    .0
                    .iter()
                    .map(|&k| {
                        l.row(k as usize)
                            .0
                            .iter()
                            .filter(|j| admitted.binary_search(j).is_ok())
                            .count() as u64
                    })
                    .sum::<u64>()
            })
            .sum();
        assert_eq!(
            run.masked_work().multiply_adds,
            landing,
            "{what}: multiply-adds"
        );
    }
}

/// Triangle counting's `C⟨L⟩ = L plus_pair L` and its neighbours on a graph whose hubs' rows
/// are split over blocks (heavy rows): every kind of add (+ by atomics, min and max by atomics
/// or compare-and-swap, any by stores, logical or by compare-and-swap), every mask mode, the
/// types with split values and two without (their heavy rows' hits split, their values on one
/// group), and a plan executed with new values.
#[test]
fn hub_rows_of_semiring_products() {
    use hetsparse_core::{Mask, SemiringKind as K};
    let n = 30_000;
    let heaviest = {
        let l = hub_triangle::<i64>(n, 47);
        // One hub's row longer than a block stages in shared memory, one within it.
        assert!(l.row_nnz(n - 1) > 8192 && l.row_nnz(n - 2) < 8192);
        (0..n)
            .map(|i| {
                l.row(i)
                    .0
                    .iter()
                    .map(|&k| l.row_nnz(k as usize))
                    .sum::<u64>()
            })
            .max()
            .unwrap_or(0)
    };
    assert!(heaviest > 3 * 8192, "the hubs are heavy: {heaviest}");
    let Some(gpu) = backend("hub_rows_of_semiring_products") else {
        return;
    };
    fn modes<T: Scalar>(l: &Csr<T>) -> Vec<Option<Mask>> {
        vec![
            None,
            Some(Mask::structural(l)),
            Some(Mask::valued(l)),
            Some(Mask::structural(l).complemented()),
        ]
    }
    let l = hub_triangle::<i64>(n, 47);
    for mask in modes(&l) {
        for kind in [
            K::PlusPair,
            K::PlusTimes,
            K::MinPlus,
            K::MaxTimes,
            K::AnySecondI,
        ] {
            check_hub_product(&gpu, &l, kind, mask.clone());
        }
    }
    let l = hub_triangle::<f64>(n, 47);
    for mask in modes(&l) {
        for kind in [K::PlusTimes, K::MinPlus, K::LorLand] {
            check_hub_product(&gpu, &l, kind, mask.clone());
        }
    }
    let l = hub_triangle::<f32>(n, 47);
    check_hub_product(&gpu, &l, K::MaxPlus, Some(Mask::structural(&l)));
    let l = hub_triangle::<i32>(n, 47);
    check_hub_product(&gpu, &l, K::PlusPair, Some(Mask::structural(&l)));
    check_hub_product(&gpu, &l, K::MinFirst, Some(Mask::valued(&l)));
    let l = hub_triangle::<u32>(n, 47);
    check_hub_product(&gpu, &l, K::MaxMin, Some(Mask::structural(&l)));
    let l = hub_triangle::<u64>(n, 47);
    check_hub_product(&gpu, &l, K::AnyPair, Some(Mask::structural(&l)));
    let l = hub_triangle::<bool>(n, 47);
    check_hub_product(&gpu, &l, K::PlusPair, Some(Mask::structural(&l)));
    let l = hub_triangle::<hetsparse_core::f16>(n, 47);
    check_hub_product(&gpu, &l, K::MinPlus, Some(Mask::structural(&l)));

    // A plan keeps the structure and the pieces: executed with new values.
    let l = hub_triangle::<i64>(n, 47);
    let options = SpgemmOptions::new()
        .with_semiring(K::PlusTimes)
        .with_mask(Mask::structural(&l));
    let rl = gpu.upload(&l).unwrap();
    let plan = gpu
        .plan_spgemm((&rl).into(), (&rl).into(), &options)
        .unwrap();
    let doubled: Vec<i64> = l.values().iter().map(|v| 2 * v).collect();
    let rl2 = gpu.upload_values(&rl, &doubled).unwrap();
    let c = gpu
        .execute_spgemm(&plan, (&rl2).into(), (&rl2).into(), &RunControl::new())
        .unwrap();
    let l2 = Csr::try_new(
        n,
        n,
        l.row_offsets().to_vec(),
        l.col_indices().to_vec(),
        doubled,
    )
    .unwrap();
    let want = hetsparse_core::reference::spgemm_with_options(&l2, &l2, &options).unwrap();
    assert_same(&gpu.download(&c).unwrap(), &want, "plan with new values");
}
