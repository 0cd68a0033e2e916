//! CUDA SpGEMM beyond the conformance suite: the memory-budget path (output larger than the
//! device memory allowed), a product past 2^31 intermediate products, use from several
//! threads, device errors. Without a device every test skips (fails with
//! HETSPARSE_REQUIRE_DEVICE=1).

mod common;

use hetsparse_core::generate;
use hetsparse_core::{
    Backend, Csr, Error, ProductChunk, ReferenceBackend, RunControl, SpgemmAlgorithm, SpgemmOptions,
};
use hetsparse_cuda::CudaBackend;

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
        let mut seen = vec![false; chunks.len()];
        let run = RunControl::new();
        gpu.spgemm_chunks(
            (&a).into(),
            (&b).into(),
            &chunks,
            &alg.into(),
            &run,
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
        // A plan executed with new values reads the planned columns out of the accumulators.
        let (ra, rb) = (gpu.upload(&a).unwrap(), gpu.upload(&b).unwrap());
        let options = SpgemmOptions::new();
        let plan = gpu
            .plan_spgemm((&ra).into(), (&rb).into(), &options)
            .unwrap();
        let doubled: Vec<f64> = a.values().iter().map(|v| 2.0 * v).collect();
        let ra2 = gpu.upload_values(&ra, &doubled).unwrap();
        let c2 = gpu
            .execute_spgemm(&plan, (&ra2).into(), (&rb).into(), &RunControl::new())
            .unwrap();
        let a2 = Csr::try_new(
            n,
            n,
            a.row_offsets().to_vec(),
            a.col_indices().to_vec(),
            doubled,
        )
        .unwrap();
        let expected2 = ReferenceBackend
            .spgemm(&a2, &b, SpgemmAlgorithm::Auto)
            .unwrap();
        assert_close(
            &gpu.download(&c2).unwrap(),
            &expected2,
            "plan with new values",
        );
        // Column windows that start inside B: the accumulators cover the window only.
        let chunks: Vec<ProductChunk> = [0..width / 3, width / 3..width]
            .into_iter()
            .map(|cols| ProductChunk { rows: 0..n, cols })
            .collect();
        gpu.spgemm_chunks(
            (&a).into(),
            (&b).into(),
            &chunks,
            &SpgemmAlgorithm::Adaptive.into(),
            &RunControl::new(),
            &mut |c| {
                let want = expected.column_panel(c.chunk.cols.clone())?;
                assert_close(&c.product, &want, &format!("window {:?}", c.chunk.cols));
                Ok(())
            },
        )
        .unwrap();
    }
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
    let (ra, rb) = (gpu.upload(&a).unwrap(), gpu.upload(&b).unwrap());
    let plan = gpu
        .plan_spgemm((&ra).into(), (&rb).into(), &SpgemmOptions::new())
        .unwrap();
    let tripled: Vec<f64> = a.values().iter().map(|v| 3.0 * v).collect();
    let ra3 = gpu.upload_values(&ra, &tripled).unwrap();
    let c3 = gpu
        .execute_spgemm(&plan, (&ra3).into(), (&rb).into(), &RunControl::new())
        .unwrap();
    let a3 = Csr::try_new(
        n,
        n,
        a.row_offsets().to_vec(),
        a.col_indices().to_vec(),
        tripled,
    )
    .unwrap();
    let expected3 = ReferenceBackend
        .spgemm(&a3, &b, SpgemmAlgorithm::Auto)
        .unwrap();
    assert_close(
        &gpu.download(&c3).unwrap(),
        &expected3,
        "short rows, plan with new values",
    );
    let chunks: Vec<ProductChunk> = [0..1000, 1000..n]
        .into_iter()
        .map(|cols| ProductChunk { rows: 0..n, cols })
        .collect();
    gpu.spgemm_chunks(
        (&a).into(),
        (&b).into(),
        &chunks,
        &SpgemmAlgorithm::Adaptive.into(),
        &RunControl::new(),
        &mut |c| {
            let want = expected.column_panel(c.chunk.cols.clone())?;
            assert_close(
                &c.product,
                &want,
                &format!("short rows, window {:?}", c.chunk.cols),
            );
            Ok(())
        },
    )
    .unwrap();
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
