//! Native residency on the GPU beyond the conformance suite: handles in device memory, the
//! paths that use resident operands in place, requirements of every algorithm against what
//! the calls reserve, chunk timings, handles that outlive their backend. Without a device
//! every test skips (fails with HETSPARSE_REQUIRE_DEVICE=1).

mod common;

use hetsparse_core::generate;
use hetsparse_core::{
    Backend, Coo, Csr, Dense, Device, Error, Layout, MemorySpace, ProductChunk, ReferenceBackend,
    RunControl, SparseRef, SpgemmAlgorithm, SpgemmOptions, SpmmOptions, SpmvOptions,
};
use hetsparse_cuda::{CudaBackend, SpmvKernel};

const ALGORITHMS: [SpgemmAlgorithm; 4] = [
    SpgemmAlgorithm::Adaptive,
    SpgemmAlgorithm::RowRow,
    SpgemmAlgorithm::ColumnRow,
    SpgemmAlgorithm::Esc,
];

fn backend(test: &str) -> Option<CudaBackend> {
    common::obtain(test, CudaBackend::new())
}

fn assert_close(actual: &Csr<f64>, expected: &Csr<f64>, what: &str) {
    assert_eq!(actual.shape(), expected.shape(), "{what}: shape");
    assert_eq!(
        actual.row_offsets(),
        expected.row_offsets(),
        "{what}: offsets"
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

fn reference(a: &Csr<f64>, b: &Csr<f64>) -> Csr<f64> {
    ReferenceBackend
        .spgemm(a, b, SpgemmAlgorithm::Auto)
        .expect("reference product")
}

/// The backend names its device's memory, and its pool is the budget it was given.
#[test]
fn memory_space_and_pool() {
    let Some(gpu) = backend("memory_space_and_pool") else {
        return;
    };
    let gpu = gpu.with_memory_budget(123 << 20);
    assert_eq!(
        Device::memory_space(&gpu),
        MemorySpace::Device {
            backend: hetsparse_core::BackendKind::Cuda,
            id: 0
        }
    );
    let pool = Device::memory_pool(&gpu).expect("a device backend has a pool");
    assert_eq!(pool.limit(), 123 << 20);
    let a = generate::uniform::<f64>(300, 300, 5, 1);
    let before = pool.reserved();
    let r = gpu.upload(&a).unwrap();
    assert!(
        pool.reserved() >= before + a.nnz() * 12,
        "a resident matrix holds its memory in the pool"
    );
    drop(r);
    assert_eq!(pool.reserved(), before, "dropping the handle gives it back");
}

/// Every algorithm, every combination of host and resident operands, results left resident
/// and used again as operands (a chain), on a matrix with long rows (global-memory tables,
/// long ESC segments).
#[test]
fn resident_products_of_every_algorithm() {
    let Some(gpu) = backend("resident_products_of_every_algorithm") else {
        return;
    };
    let mut a = generate::uniform::<f64>(600, 600, 6, 2);
    // A dense first row: 600 × 6 products in row 0 of A·A.
    let mut rows: Vec<(usize, usize, f64)> = (0..600).map(|j| (0, j, 1.0 + j as f64)).collect();
    for i in 1..600 {
        let (c, v) = a.row(i);
        rows.extend(c.iter().zip(v).map(|(&j, &x)| (i, j as usize, x)));
    }
    let mut coo = Coo::new(600, 600).unwrap();
    for (i, j, v) in rows {
        coo.try_push(i, j, v).unwrap();
    }
    a = coo.to_csr().unwrap();
    let expected = reference(&a, &a);
    let expected2 = reference(&expected, &a);
    let ra = gpu.upload(&a).unwrap();
    for alg in ALGORITHMS {
        let options = SpgemmOptions::from(alg);
        let run = RunControl::new();
        let c = gpu
            .spgemm_resident((&ra).into(), (&ra).into(), &options, &run)
            .unwrap();
        assert_close(&gpu.download(&c).unwrap(), &expected, &format!("{alg:?}"));
        let p = run.progress();
        assert_eq!(p.done, p.planned, "{alg:?}: progress {p:?}");
        let c2 = gpu
            .spgemm_resident((&c).into(), (&a).into(), &options, &run)
            .unwrap();
        assert_close(
            &gpu.download(&c2).unwrap(),
            &expected2,
            &format!("{alg:?} chain"),
        );
        let host = gpu
            .spgemm_with((&a).into(), (&c).into(), &options, &run)
            .unwrap();
        assert_close(&host, &reference(&a, &expected), &format!("{alg:?} mixed"));
    }
}

/// A plan of every algorithm executed with new values: only the numeric phase runs, into the
/// plan's structure; another pattern is refused.
#[test]
fn plans_of_every_algorithm() {
    let Some(gpu) = backend("plans_of_every_algorithm") else {
        return;
    };
    let a = generate::uniform::<f64>(700, 500, 7, 3);
    let b = generate::uniform::<f64>(500, 800, 5, 4);
    let (ra, rb) = (gpu.upload(&a).unwrap(), gpu.upload(&b).unwrap());
    let mut a2 = a.clone();
    for v in a2.values_mut() {
        *v = 1.5 - *v;
    }
    let ra2 = gpu.upload_values(&ra, a2.values()).unwrap();
    for alg in ALGORITHMS {
        let plan = gpu
            .plan_spgemm((&ra).into(), (&rb).into(), &alg.into())
            .unwrap();
        let c = gpu
            .execute_spgemm(&plan, (&ra2).into(), (&rb).into(), &RunControl::new())
            .unwrap();
        assert_close(
            &gpu.download(&c).unwrap(),
            &reference(&a2, &b),
            &format!("{alg:?} plan, new values"),
        );
        let other = generate::uniform::<f64>(700, 500, 7, 99);
        assert!(
            matches!(
                gpu.execute_spgemm(&plan, (&other).into(), (&rb).into(), &RunControl::new()),
                Err(Error::PatternMismatch { .. })
            ),
            "{alg:?}: another pattern must be refused"
        );
    }
}

/// For every algorithm, what `spgemm_with`, `spgemm_resident` and a plan's execution reserve
/// stays within what the requirement queries said.
#[test]
fn requirements_bound_every_algorithm() {
    let Some(gpu) = backend("requirements_bound_every_algorithm") else {
        return;
    };
    let pool = Device::memory_pool(&gpu).unwrap();
    let a = generate::rmat::<f64>(11, 8, 5);
    let b = generate::uniform::<f64>(a.ncols(), 3000, 6, 6);
    for alg in ALGORITHMS {
        let options = SpgemmOptions::from(alg);
        let need = gpu
            .spgemm_requirement((&a).into(), (&b).into(), &options)
            .unwrap();
        for resident in [false, true] {
            pool.reset_peak();
            let before = pool.reserved();
            let run = RunControl::new();
            if resident {
                let c = gpu
                    .spgemm_resident((&a).into(), (&b).into(), &options, &run)
                    .unwrap();
                let used = pool.peak() - before;
                assert!(
                    used <= need.device_bytes(),
                    "{alg:?} resident: reserved {used}, requirement {need:?}"
                );
                drop(c);
            } else {
                gpu.spgemm_with((&a).into(), (&b).into(), &options, &run)
                    .unwrap();
                let used = pool.peak() - before;
                assert!(
                    used <= need.device_bytes(),
                    "{alg:?}: reserved {used}, requirement {need:?}"
                );
            }
        }
        let (ra, rb) = (gpu.upload(&a).unwrap(), gpu.upload(&b).unwrap());
        let resident_need = gpu
            .spgemm_requirement((&ra).into(), (&rb).into(), &options)
            .unwrap();
        assert_eq!(resident_need.operand_bytes, 0, "{alg:?}: resident operands");
        let plan = gpu
            .plan_spgemm((&ra).into(), (&rb).into(), &options)
            .unwrap();
        pool.reset_peak();
        let before = pool.reserved();
        let c = gpu
            .execute_spgemm(&plan, (&ra).into(), (&rb).into(), &RunControl::new())
            .unwrap();
        let used = pool.peak() - before;
        assert!(
            used <= plan.requirement().device_bytes(),
            "{alg:?} plan: reserved {used}, requirement {:?}",
            plan.requirement()
        );
        assert_eq!(c.nnz(), plan.c_nnz());
    }
}

/// Chunks carry their timing: kernel time from device events, the bytes copied back, the
/// operands' upload charged to the first chunk (nothing for resident operands).
#[test]
fn chunk_timings() {
    let Some(gpu) = backend("chunk_timings") else {
        return;
    };
    let a = generate::uniform::<f64>(1200, 1000, 8, 7);
    let b = generate::uniform::<f64>(1000, 900, 8, 8);
    let chunks: Vec<ProductChunk> = [0..500, 500..1200]
        .into_iter()
        .flat_map(|rows| {
            [0..450, 450..900].map(|cols| ProductChunk {
                rows: rows.clone(),
                cols,
            })
        })
        .collect();
    let (ra, rb) = (gpu.upload(&a).unwrap(), gpu.upload(&b).unwrap());
    for alg in ALGORITHMS {
        for resident in [false, true] {
            let mut timings = Vec::new();
            let run = RunControl::new();
            let (l, r) = if resident {
                ((&ra).into(), (&rb).into())
            } else {
                ((&a).into(), (&b).into())
            };
            gpu.spgemm_chunks(l, r, &chunks, &alg.into(), &run, &mut |c| {
                let expected = reference(
                    &a.rows(c.chunk.rows.clone()).unwrap(),
                    &b.column_panel(c.chunk.cols.clone()).unwrap(),
                );
                assert_close(&c.product, &expected, &format!("{alg:?} chunk {}", c.index));
                timings.push((c.index, c.product.nnz(), c.timing));
                Ok(())
            })
            .unwrap();
            timings.sort_by_key(|t| t.0);
            assert_eq!(timings.len(), chunks.len());
            let h2d: u64 = timings.iter().map(|t| t.2.h2d_bytes).sum();
            let operands = if resident {
                0
            } else {
                (a.nrows() as u64 + 1) * 8
                    + a.nnz() * 12
                    + (b.nrows() as u64 + 1) * 8
                    + b.nnz() * 12
            };
            assert_eq!(h2d, operands, "{alg:?} resident={resident}: upload bytes");
            for (index, nnz, t) in &timings {
                let what = format!("{alg:?} resident={resident} chunk {index}");
                assert_eq!(t.d2h_bytes, nnz * 12, "{what}: bytes copied back");
                assert!(t.kernel > std::time::Duration::ZERO, "{what}: {t:?}");
                assert!(t.wall >= t.d2h, "{what}: {t:?}");
            }
        }
    }
}

/// ESC over chunks with column windows on resident operands (it reads their structure from
/// the device), and a host matrix in COO times a resident row-major dense matrix (the one SpMM
/// combination that runs on the host path).
#[test]
fn paths_that_read_back_structure() {
    let Some(gpu) = backend("paths_that_read_back_structure") else {
        return;
    };
    let a = generate::uniform::<f64>(400, 300, 6, 9);
    let b = generate::uniform::<f64>(300, 500, 6, 10);
    let (ra, rb) = (gpu.upload(&a).unwrap(), gpu.upload(&b).unwrap());
    let chunks = [
        ProductChunk {
            rows: 0..400,
            cols: 100..350,
        },
        ProductChunk {
            rows: 17..230,
            cols: 0..500,
        },
    ];
    gpu.spgemm_chunks(
        (&ra).into(),
        (&rb).into(),
        &chunks,
        &SpgemmAlgorithm::Esc.into(),
        &RunControl::new(),
        &mut |c| {
            let expected = reference(
                &a.rows(c.chunk.rows.clone()).unwrap(),
                &b.column_panel(c.chunk.cols.clone()).unwrap(),
            );
            assert_close(&c.product, &expected, &format!("ESC chunk {}", c.index));
            Ok(())
        },
    )
    .unwrap();

    let coo = a.to_coo();
    let d = Dense::from_fn(300, 4, Layout::RowMajor, |i, j| (i * 4 + j) as f64 * 0.01).unwrap();
    let rd = gpu.upload_dense(&d).unwrap();
    let expected = ReferenceBackend.spmm(SparseRef::Csr(&a), &d).unwrap();
    for resident_result in [false, true] {
        let c = if resident_result {
            let r = gpu
                .spmm_resident(
                    SparseRef::Coo(&coo).into(),
                    (&rd).into(),
                    &SpmmOptions::new(),
                    &RunControl::new(),
                )
                .unwrap();
            gpu.download_dense(&r).unwrap()
        } else {
            gpu.spmm_with(
                SparseRef::Coo(&coo).into(),
                (&rd).into(),
                &SpmmOptions::new(),
                &RunControl::new(),
            )
            .unwrap()
        };
        assert_eq!(
            (c.shape(), c.layout()),
            (expected.shape(), Layout::RowMajor)
        );
        for (x, y) in c.data().iter().zip(expected.data()) {
            assert!((x - y).abs() <= 1e-12 * (1.0 + y.abs()), "{x} vs {y}");
        }
    }
}

/// A resident matrix outlives the backend that made it, and another backend on the same
/// device uses it; a budget too small for an upload is out of memory with the sizes.
#[test]
fn handles_outlive_their_backend() {
    let Some(first) = backend("handles_outlive_their_backend") else {
        return;
    };
    let a = generate::uniform::<f64>(200, 200, 4, 11);
    let r = first.upload(&a).unwrap();
    drop(first);
    let second = CudaBackend::new().unwrap();
    assert_eq!(second.download(&r).unwrap(), a);
    let c = second
        .spgemm_resident(
            (&r).into(),
            (&r).into(),
            &SpgemmOptions::new(),
            &RunControl::new(),
        )
        .unwrap();
    assert_close(&second.download(&c).unwrap(), &reference(&a, &a), "product");
    drop(second);
    drop(r);

    let tiny = CudaBackend::new().unwrap().with_memory_budget(1000);
    match tiny.upload(&a) {
        Err(Error::OutOfMemory {
            needed_bytes,
            available_bytes,
            ..
        }) => assert!(
            needed_bytes > available_bytes,
            "{needed_bytes} {available_bytes}"
        ),
        other => panic!("expected OutOfMemory, got {other:?}"),
    }
}

/// `A·x` on the host, for checking device results.
fn host_spmv(a: &Csr<f64>, x: &[f64]) -> Vec<f64> {
    (0..a.nrows())
        .map(|i| {
            let (lo, hi) = (a.row_offsets()[i] as usize, a.row_offsets()[i + 1] as usize);
            (lo..hi)
                .map(|k| a.values()[k] * x[a.col_indices()[k] as usize])
                .sum()
        })
        .collect()
}

fn assert_vec_close(actual: &[f64], expected: &[f64], what: &str) {
    assert_eq!(actual.len(), expected.len(), "{what}: length");
    for (k, (x, y)) in actual.iter().zip(expected).enumerate() {
        assert!(
            (x - y).abs() <= 1e-10 * (1.0 + y.abs()),
            "{what}: element {k}: {x} vs {y}"
        );
    }
}

/// The row blocks the CSR-stream SpMV keeps with a resident matrix belong to its pattern: they
/// are right for new values ([`Backend::upload_values`], which shares them), for the matrix
/// whose SpMV made them and for the other one after either handle is dropped, and for a matrix
/// computed on the device (whose offsets never were on the host).
#[test]
fn stream_row_blocks_follow_the_pattern() {
    let Some(gpu) = backend("stream_row_blocks_follow_the_pattern") else {
        return;
    };
    // Rows of 0 to 12 entries: the CSR-stream kernel's matrices.
    let a = generate::uniform::<f64>(50_000, 50_000, 6, 8);
    let a2 = Csr::try_new(
        a.nrows(),
        a.ncols(),
        a.row_offsets().to_vec(),
        a.col_indices().to_vec(),
        a.values().iter().map(|v| 1.5 - v).collect(),
    )
    .unwrap();
    let x: Vec<f64> = (0..a.ncols())
        .map(|i| ((i % 11) as f64) * 0.25 - 1.0)
        .collect();
    let (opts, run) = (SpmvOptions::new(), RunControl::new());
    let ra = gpu.upload(&a).unwrap();
    let rx = gpu.upload_vector(&x).unwrap();
    let spmv = |m: &hetsparse_core::ResidentCsr<f64>| {
        let y = gpu
            .spmv_resident(m.into(), (&rx).into(), &opts, &run)
            .unwrap();
        gpu.download_dense(&y).unwrap().data().to_vec()
    };
    assert_vec_close(&spmv(&ra), &host_spmv(&a, &x), "A");
    let ra2 = gpu.upload_values(&ra, a2.values()).unwrap();
    assert_vec_close(&spmv(&ra2), &host_spmv(&a2, &x), "A with new values");
    assert_vec_close(&spmv(&ra), &host_spmv(&a, &x), "A again");
    drop(ra);
    assert_vec_close(&spmv(&ra2), &host_spmv(&a2, &x), "new values, A dropped");
    let c = gpu
        .spgemm_resident((&ra2).into(), (&a).into(), &SpgemmOptions::new(), &run)
        .unwrap();
    let c_host = gpu.download(&c).unwrap();
    assert_vec_close(
        &spmv(&c),
        &host_spmv(&c_host, &x),
        "a product left on the device",
    );
}

/// The CSR-stream kernel on rows long enough to be shared by several row blocks, from several
/// threads at once: every result is right and all are the same bits (the parts of a row are
/// added in order, whichever block finishes it).
#[test]
fn stream_spmv_of_long_rows_is_deterministic() {
    let Some(gpu) = backend("stream_spmv_of_long_rows_is_deterministic") else {
        return;
    };
    let gpu = gpu.with_csr_spmv_kernel(SpmvKernel::CsrStream).unwrap();
    // 200 000 rows of about 4 entries, 20 rows and columns of 200 000 entries.
    let a = generate::skewed::<f64>(200_000, 4, 20, 20, 4);
    let x: Vec<f64> = (0..a.ncols())
        .map(|i| ((i % 23) as f64) * 0.1 - 1.1)
        .collect();
    let expected = host_spmv(&a, &x);
    // Σ|a||x| per row: sums of 200 000 terms in another order differ by up to n·ε of it.
    let mut abs_a = a.clone();
    abs_a.values_mut().iter_mut().for_each(|v| *v = v.abs());
    let abs_x: Vec<f64> = x.iter().map(|v| v.abs()).collect();
    let scale = host_spmv(&abs_a, &abs_x);
    let check = |y: &[f64], what: &str| {
        assert_eq!(y.len(), expected.len(), "{what}: length");
        for (k, (u, v)) in y.iter().zip(&expected).enumerate() {
            assert!(
                (u - v).abs() <= 1e-10 * (1.0 + scale[k]),
                "{what}: element {k}: {u} vs {v}"
            );
        }
    };
    let ra = gpu.upload(&a).unwrap();
    let rx = gpu.upload_vector(&x).unwrap();
    let (opts, run) = (SpmvOptions::new(), RunControl::new());
    let once = |_: usize| {
        let y = gpu
            .spmv_resident((&ra).into(), (&rx).into(), &opts, &run)
            .unwrap();
        gpu.download_dense(&y).unwrap().data().to_vec()
    };
    let reference_bits: Vec<u64> = once(0).iter().map(|v| v.to_bits()).collect();
    std::thread::scope(|s| {
        for t in 0..4 {
            let (once, reference_bits, check) = (&once, &reference_bits, &check);
            s.spawn(move || {
                for i in 0..10 {
                    let y = once(i);
                    check(&y, &format!("thread {t}, call {i}"));
                    assert!(
                        y.iter()
                            .map(|v| v.to_bits())
                            .eq(reference_bits.iter().copied()),
                        "thread {t}, call {i}: not the bits of the first call"
                    );
                }
            });
        }
    });
}

/// Resident SpMVs queued back to back from several threads, each result fed straight into the
/// next call and dropped while that call may still be running: every result is right (a read
/// before its writer finished, or memory freed and reused under a running kernel, shows as
/// wrong values), and every reservation comes back.
#[test]
fn resident_spmv_chains_from_many_threads() {
    let Some(gpu) = backend("resident_spmv_chains_from_many_threads") else {
        return;
    };
    // Large enough that a kernel is still running when the next call is queued.
    let a = generate::banded::<f64>(300_000, 7, 3);
    let x: Vec<f64> = (0..a.ncols())
        .map(|i| ((i % 17) as f64) * 0.125 - 1.0)
        .collect();
    let ax = host_spmv(&a, &x);
    let aax = host_spmv(&a, &ax);
    let pool = Device::memory_pool(&gpu).unwrap();
    let ra = gpu.upload(&a).unwrap();
    let rx = gpu.upload_vector(&x).unwrap();
    let (opts, run) = (SpmvOptions::new(), RunControl::new());
    // A first call leaves with A what its kernel keeps per matrix (the CSR-stream row blocks).
    drop(
        gpu.spmv_resident((&ra).into(), (&rx).into(), &opts, &run)
            .unwrap(),
    );
    let baseline = pool.reserved();
    std::thread::scope(|s| {
        for t in 0..4 {
            let (gpu, ra, rx, opts, run) = (&gpu, &ra, &rx, &opts, &run);
            let (ax, aax) = (&ax, &aax);
            s.spawn(move || {
                for i in 0..40 {
                    let y = gpu.spmv_resident(ra.into(), rx.into(), opts, run).unwrap();
                    let z = gpu
                        .spmv_resident(ra.into(), (&y).into(), opts, run)
                        .unwrap();
                    drop(y);
                    if i % 10 == t {
                        let z = gpu.download_dense(&z).unwrap();
                        assert_vec_close(z.data(), aax, &format!("thread {t}, call {i}: A·A·x"));
                        let y = gpu.spmv_resident(ra.into(), rx.into(), opts, run).unwrap();
                        let y = gpu.download_dense(&y).unwrap();
                        assert_vec_close(y.data(), ax, &format!("thread {t}, call {i}: A·x"));
                    }
                }
            });
        }
    });
    assert_eq!(pool.reserved(), baseline, "reservations after the calls");
}

/// A resident result used right away by a second backend on the same device (its own streams,
/// so the use is on another stream than the one that writes the result), then dropped at once:
/// the second backend waits for the first's kernel, and the first's free waits for the second's.
#[test]
fn resident_results_used_on_another_stream_at_once() {
    let Some(first) = backend("resident_results_used_on_another_stream_at_once") else {
        return;
    };
    let second = CudaBackend::new().unwrap();
    let a = generate::banded::<f64>(400_000, 9, 5);
    let x: Vec<f64> = (0..a.ncols()).map(|i| 1.0 + (i % 5) as f64).collect();
    let ax = host_spmv(&a, &x);
    let aax = host_spmv(&a, &ax);
    let ra = first.upload(&a).unwrap();
    let rx = first.upload_vector(&x).unwrap();
    let (opts, run) = (SpmvOptions::new(), RunControl::new());
    for round in 0..5 {
        let y = first
            .spmv_resident((&ra).into(), (&rx).into(), &opts, &run)
            .unwrap();
        let z = second
            .spmv_resident((&ra).into(), (&y).into(), &opts, &run)
            .unwrap();
        drop(y);
        // Reuses the memory `y` had once its free is reached, overwriting it.
        let w = first
            .spmv_resident((&ra).into(), (&rx).into(), &opts, &run)
            .unwrap();
        assert_vec_close(
            first.download_dense(&z).unwrap().data(),
            &aax,
            &format!("round {round}: A·(A·x) on the second backend"),
        );
        assert_vec_close(
            second.download_dense(&w).unwrap().data(),
            &ax,
            &format!("round {round}: A·x downloaded by the second backend"),
        );
    }

    // SpMM: a resident dense result multiplied again by the other backend at once.
    let b = Dense::try_new(
        a.ncols(),
        3,
        Layout::RowMajor,
        (0..a.ncols() * 3).map(|i| (i % 7) as f64 - 3.0).collect(),
    )
    .unwrap();
    let rb = first.upload_dense(&b).unwrap();
    let c = first
        .spmm_resident((&ra).into(), (&rb).into(), &SpmmOptions::new(), &run)
        .unwrap();
    let d = second
        .spmm_resident((&ra).into(), (&c).into(), &SpmmOptions::new(), &run)
        .unwrap();
    drop(c);
    let d = first.download_dense(&d).unwrap();
    for j in 0..3 {
        let col: Vec<f64> = (0..a.ncols()).map(|i| b.data()[i * 3 + j]).collect();
        let expected = host_spmv(&a, &host_spmv(&a, &col));
        let got: Vec<f64> = (0..a.nrows()).map(|i| d.data()[i * 3 + j]).collect();
        assert_vec_close(&got, &expected, &format!("A·(A·B), column {j}"));
    }
}

/// Stream-ordered allocations still count against the budget: a result larger than what is
/// left is refused, and dropping results gives their reservation back.
#[test]
fn resident_results_stay_within_the_budget() {
    let Some(gpu) = backend("resident_results_stay_within_the_budget") else {
        return;
    };
    let a = generate::banded::<f64>(100_000, 3, 9);
    let x = vec![1.0; a.ncols()];
    let gpu = gpu.with_memory_budget(8 << 20);
    let pool = Device::memory_pool(&gpu).unwrap();
    let ra = gpu.upload(&a).unwrap();
    let rx = gpu.upload_vector(&x).unwrap();
    let (opts, run) = (SpmvOptions::new(), RunControl::new());
    let mut kept = Vec::new();
    let refused = loop {
        match gpu.spmv_resident((&ra).into(), (&rx).into(), &opts, &run) {
            Ok(y) => kept.push(y),
            Err(e) => break e,
        }
        assert!(pool.reserved() <= pool.limit(), "reserved past the budget");
        assert!(kept.len() < 100, "8 MiB cannot hold 100 results of 800 kB");
    };
    assert!(
        matches!(refused, Error::OutOfMemory { .. }),
        "expected OutOfMemory, got {refused:?}"
    );
    assert!(!kept.is_empty());
    let expected = host_spmv(&a, &x);
    let last = gpu.download_dense(kept.last().unwrap()).unwrap();
    assert_vec_close(last.data(), &expected, "last result kept");
    let with_results = pool.reserved();
    kept.clear();
    assert!(pool.reserved() < with_results);
    // The memory freed is usable again.
    let y = gpu
        .spmv_resident((&ra).into(), (&rx).into(), &opts, &run)
        .unwrap();
    assert_vec_close(gpu.download_dense(&y).unwrap().data(), &expected, "after");
}

/// A plan's execution reads the plan's columns to place each value (the hash path no longer
/// sorts or writes columns): right for rows of every table size, shared-memory bins and
/// global-memory tables (rows of about 16 000 entries), with new values, and from two threads
/// executing the same plan at once.
#[test]
fn plan_executions_place_values_under_known_columns() {
    let Some(gpu) = backend("plan_executions_place_values_under_known_columns") else {
        return;
    };
    // Dense rows of A over B's 200 rows of 100 entries each: every row of C has about 16 000
    // columns, past any shared-memory table; B's own rows exercise the small bins below.
    let a = generate::uniform::<f64>(40, 200, 200, 21);
    let b = generate::uniform::<f64>(200, 40_000, 100, 22);
    let small = generate::uniform::<f64>(300, 200, 3, 23);
    let options = SpgemmOptions::from(SpgemmAlgorithm::Adaptive);
    for (name, a) in [("long rows", &a), ("short rows", &small)] {
        let (ra, rb) = (gpu.upload(a).unwrap(), gpu.upload(&b).unwrap());
        let plan = gpu
            .plan_spgemm((&ra).into(), (&rb).into(), &options)
            .unwrap();
        std::thread::scope(|s| {
            for t in 0..2u32 {
                let (gpu, plan, ra, rb, b) = (&gpu, &plan, &ra, &rb, &b);
                let mut a2 = a.clone();
                for (k, v) in a2.values_mut().iter_mut().enumerate() {
                    *v = f64::from(t + 1) * 0.5 - *v + (k % 3) as f64;
                }
                s.spawn(move || {
                    let ra2 = gpu.upload_values(ra, a2.values()).unwrap();
                    for round in 0..3 {
                        let c = gpu
                            .execute_spgemm(plan, (&ra2).into(), rb.into(), &RunControl::new())
                            .unwrap();
                        assert_close(
                            &gpu.download(&c).unwrap(),
                            &reference(&a2, b),
                            &format!("{name}, thread {t}, round {round}"),
                        );
                    }
                });
            }
        });
    }
}

/// A buffer written on one stream and read on another, with no host wait between: the read
/// waits for the write through the buffer's own record of its writer.
#[test]
fn a_read_on_another_stream_waits_for_the_write() {
    use hetsparse_cuda::{DeviceBuffer, Stream};
    let Some(backend) = backend("a_read_on_another_stream_waits_for_the_write") else {
        return;
    };
    let gpu = backend.gpu();
    gpu.bind().expect("bind");
    let (s1, s2) = (
        Stream::new().expect("stream"),
        Stream::new().expect("stream"),
    );
    // Large enough that the fill is still running when the read is queued.
    let n = 64 << 20;
    let mut b = DeviceBuffer::<u32>::new(gpu.memory(), &s1, n, "ordering test").expect("alloc");
    for byte in [0x11u8, 0x22, 0x33] {
        b.write(&s1)
            .expect("write view")
            .fill_bytes(&s1, byte)
            .expect("fill");
        let seen = b
            .read(&s2)
            .expect("read view")
            .to_vec(&s2)
            .expect("download");
        let want = u32::from_ne_bytes([byte; 4]);
        assert!(seen.iter().all(|&v| v == want), "fill {byte:#x} seen early");
    }
}

/// A buffer read on another stream than its own is not freed before that read is over: its
/// memory, reused by the next allocation and overwritten, still reads as before.
#[test]
fn a_buffer_used_on_another_stream_is_not_freed_early() {
    use hetsparse_cuda::{DeviceBuffer, Stream};
    let Some(backend) = backend("a_buffer_used_on_another_stream_is_not_freed_early") else {
        return;
    };
    let gpu = backend.gpu();
    gpu.bind().expect("bind");
    let (s1, s2) = (
        Stream::new().expect("stream"),
        Stream::new().expect("stream"),
    );
    let n = 16 << 20;
    for _ in 0..4 {
        let mut b = DeviceBuffer::<u32>::new(gpu.memory(), &s1, n, "freed buffer").expect("alloc");
        b.write(&s1)
            .expect("write")
            .fill_bytes(&s1, 0x11)
            .expect("fill");
        // Work queued on s2 ahead of the read keeps it from starting at once.
        let mut delay =
            DeviceBuffer::<u32>::new(gpu.memory(), &s2, 16 * n, "delay").expect("alloc");
        for _ in 0..8 {
            delay.write(&s2).expect("write").zero(&s2).expect("zero");
        }
        let mut host = hetsparse_cuda::memory::pinned::<u32>(n, "pinned").expect("pinned");
        // SAFETY: `host` is read only after s2 is synchronised below.
        unsafe {
            b.read(&s2)
                .expect("read")
                .download_async(&s2, &mut host, 0, n)
                .expect("download")
        };
        drop(b);
        let mut reused =
            DeviceBuffer::<u32>::new(gpu.memory(), &s1, n, "reusing buffer").expect("alloc");
        reused
            .write(&s1)
            .expect("write")
            .fill_bytes(&s1, 0x22)
            .expect("fill");
        s2.synchronize().expect("sync");
        s1.synchronize().expect("sync");
        assert!(
            host.iter().all(|&v| v == 0x1111_1111),
            "read after the free"
        );
    }
}
