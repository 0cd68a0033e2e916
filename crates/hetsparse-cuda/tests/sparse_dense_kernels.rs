//! Targeted tests of the SpMV, SpMM, DIA×DIA and BSR×BSR kernel choices (engineer B): each
//! variant the backend can pick (CSR scalar and vector, every ELLR-T `T`, every `L_c`, the
//! streamed SpMM path under a small memory budget) against the serial reference, on shapes that
//! reach the kernels' edges (rows longer than a warp, runs of a row across warps, partial passes).
//! Without a GPU they skip, unless `HETSPARSE_REQUIRE_DEVICE=1`.

mod common;

use hetsparse_core::generate::{self, Rng};
use hetsparse_core::{bf16, f16, Complex};
use hetsparse_core::{
    reference, Backend, Bsr, Coo, Csc, Cspr, Csr, Dense, Dia, Ellr, Error, Layout, PlusTimes,
    Scalar, SparseRef,
};
use hetsparse_cuda::{CudaBackend, DeviceScalar, SpmmKernel, SpmmKernelOptions, SpmvKernel};

fn backend() -> Option<CudaBackend> {
    backend_with(None)
}

fn backend_with(budget: Option<u64>) -> Option<CudaBackend> {
    let made = CudaBackend::new().map(|b| match budget {
        Some(bytes) => b.with_memory_budget(bytes),
        None => b,
    });
    common::obtain("sparse_dense_kernels", made)
}

fn storage_eps<T: Scalar>() -> f64 {
    match T::TYPE {
        hetsparse_core::ScalarType::F16 => 9.8e-4,
        hetsparse_core::ScalarType::Bf16 => 7.9e-3,
        hetsparse_core::ScalarType::F32 | hetsparse_core::ScalarType::C32 => 1.2e-7,
        _ => 2.3e-16,
    }
}

fn magnitudes<T: Scalar>(a: &Csr<T>) -> Csr<f64> {
    let mut m = a.map_scalar::<f64>();
    for (d, s) in m.values_mut().iter_mut().zip(a.values()) {
        *d = s.magnitude();
    }
    m
}

/// `actual[k]` within `(terms + 2)·ε·Σ|a||x|` of `expected[k]`, the sum per element in `scale`.
fn assert_close<T: Scalar>(actual: &[T], expected: &[T], scale: &[f64], terms: u64, what: &str) {
    assert_eq!(actual.len(), expected.len(), "{what}: length");
    for k in 0..expected.len() {
        let (ar, ai) = actual[k].to_parts();
        let (er, ei) = expected[k].to_parts();
        let diff = ((ar - er).powi(2) + (ai - ei).powi(2)).sqrt();
        let tol = (terms as f64 + 2.0) * storage_eps::<T>() * (scale[k] + expected[k].magnitude())
            + f64::MIN_POSITIVE;
        assert!(
            diff <= tol,
            "{what}: element {k} is {:?}, expected {:?} (difference {diff:e}, tolerance {tol:e})",
            actual[k],
            expected[k]
        );
    }
}

fn vector<T: Scalar>(n: usize, seed: u64) -> Vec<T> {
    let mut rng = Rng::new(seed);
    (0..n)
        .map(|_| T::from_parts_lossy(rng.next_f64() * 2.0 - 1.0, rng.next_f64() - 0.5))
        .collect()
}

fn check_spmv<T: DeviceScalar>(
    b: &CudaBackend,
    a: &Csr<T>,
    sparse: SparseRef<'_, T>,
    kernel: SpmvKernel,
    what: &str,
) {
    let x = vector::<T>(a.ncols(), 7);
    let expected = reference::spmv::<T, PlusTimes>(a, &x).expect("reference");
    let mx: Vec<f64> = x.iter().map(|v| v.magnitude()).collect();
    let scale = reference::spmv::<f64, PlusTimes>(&magnitudes(a), &mx).expect("scale");
    let terms = (0..a.nrows()).map(|i| a.row_nnz(i)).max().unwrap_or(0);
    let y = b
        .spmv_with_kernel(sparse, &x, kernel)
        .unwrap_or_else(|e| panic!("{what} {kernel:?}: {e}"));
    assert_close(
        &y,
        &expected,
        &scale,
        terms,
        &format!("{what} {kernel:?} ({})", T::TYPE),
    );
}

/// Short rows, a few rows far longer than a warp, and a tall matrix with an odd row count.
fn spmv_matrices<T: Scalar>() -> Vec<(&'static str, Csr<T>)> {
    vec![
        ("skewed", generate::skewed(700, 3, 3, 2, 1)),
        ("power law", generate::rmat(9, 12, 2)),
        ("uniform 40 per row", generate::uniform(333, 500, 40, 3)),
        ("banded", generate::banded(257, 9, 4)),
        (
            "row lengths at and across tile edges, runs of empty rows",
            from_row_lengths(
                &[
                    0, 0, 3, 0, 0, 0, 256, 0, 1, 8, 7, 9, 0, 248, 8, 0, 0, 1, 1, 1, 300, 0, 255, 2,
                    0, 0, 0,
                ],
                400,
            ),
        ),
        (
            "a row of 100 000 entries among short ones",
            from_row_lengths(&[2, 5, 100_000, 1, 0, 3, 70_000, 0], 120_000),
        ),
        (
            "more empty rows in a tile than the balanced kernel keeps in shared memory",
            from_row_lengths(&runs_of_empty_rows(), 700),
        ),
    ]
}

/// Row lengths with runs of hundreds of empty rows inside tiles of 256 entries, beside tiles
/// of ordinary rows.
fn runs_of_empty_rows() -> Vec<u64> {
    let mut lengths = vec![5];
    lengths.extend([0; 600]);
    lengths.extend([7, 3]);
    lengths.extend([0; 300]);
    lengths.extend((0..200).map(|i| i % 6));
    lengths.extend([0; 1000]);
    lengths.extend([300, 1, 0, 2]);
    lengths
}

/// A matrix whose rows have the given lengths, columns spread over `ncols`, values varied.
fn from_row_lengths<T: Scalar>(lengths: &[u64], ncols: usize) -> Csr<T> {
    let mut offsets = vec![0u64];
    let mut cols = Vec::new();
    for (i, &len) in lengths.iter().enumerate() {
        let step = (ncols as u64 / len.max(1)).max(1);
        cols.extend((0..len).map(|j| ((j * step + i as u64) % ncols as u64) as u32));
        let row = &mut cols[offsets[i] as usize..];
        row.sort_unstable();
        offsets.push(cols.len() as u64);
    }
    let vals = (0..cols.len())
        .map(|k| T::from_parts_lossy(1.0 + (k % 7) as f64 * 0.5, (k % 3) as f64 - 1.0))
        .collect();
    Csr::try_new(lengths.len(), ncols, offsets, cols, vals).expect("row-length matrix")
}

fn csr_scalar_and_vector<T: DeviceScalar>() {
    let Some(b) = backend() else { return };
    for (what, a) in spmv_matrices::<T>() {
        for kernel in [
            SpmvKernel::Auto,
            SpmvKernel::CsrScalar,
            SpmvKernel::CsrVector,
            SpmvKernel::CsrBalanced,
            SpmvKernel::CsrStream,
            SpmvKernel::CsrLongRowsApart,
        ] {
            check_spmv(&b, &a, SparseRef::Csr(&a), kernel, what);
        }
        // Every group width: rows shorter and longer than a group, and (with 2 lanes) 16
        // rows a warp.
        for lanes in [2, 4, 8, 16, 32] {
            let kernel = SpmvKernel::CsrSubwarp { lanes };
            check_spmv(&b, &a, SparseRef::Csr(&a), kernel, what);
        }
    }
}

/// Row lengths that put a row block's entries at the kernel's limits. Row `i` is in block
/// `(i + offsets[i]) / 1024`; a block's products are staged in shared memory if they are at
/// most 2048, else its last row is summed apart by the whole thread block, or shared with the
/// blocks after it where it spans them (1024 entries or more).
fn stream_edge_matrices<T: Scalar>() -> Vec<(&'static str, Csr<T>)> {
    let mut lengths_and_names: Vec<(&'static str, Vec<u64>, usize)> = vec![
        // Block 0: rows 0 and 1 (1 + 1022 < 1024), 2048 entries: the budget exactly.
        (
            "a block of exactly 2048 entries",
            vec![1022, 1026, 3, 4],
            3000,
        ),
        // 2049 entries: the last row of block 0 is summed apart.
        (
            "a block one entry over its budget",
            vec![1022, 1027, 3, 4],
            3000,
        ),
        // Block 0 is row 0 alone, over the budget; blocks 1 to 4 hold no row.
        ("a single row of 5000 entries", vec![5000], 6000),
        ("a single short row", vec![5], 10),
        ("a single empty row", vec![0], 10),
        // A short row then a long one in the same block, the long one spanning empty blocks.
        (
            "a long row behind a short one",
            vec![3, 5000, 2, 0, 7],
            6000,
        ),
        // 1024 and 1025 entries: the longest rows Auto sends to the stream kernel and beyond.
        (
            "rows of 1024 and 1025 entries",
            vec![1024, 1, 1025, 1024, 0, 1024],
            2000,
        ),
        // Eight rows of 120 (a warp per row), then rows of 60 (half-warps).
        (
            "rows that take a warp or half a warp",
            [vec![120; 8], vec![60; 20], vec![1; 3]].concat(),
            500,
        ),
    ];
    // More than 1024 empty rows: blocks of rows without entries (y is never zeroed).
    let mut empty_runs = vec![0u64; 2500];
    empty_runs[1300] = 4;
    empty_runs[2499] = 2;
    lengths_and_names.push(("runs of over 1024 empty rows", empty_runs, 50));
    // Exactly 256 and 128 rows per block and a block of 1024 rows of one entry.
    lengths_and_names.push((
        "rows of 3 and 7 entries",
        [vec![3; 600], vec![7; 300]].concat(),
        900,
    ));
    lengths_and_names.push(("rows of one entry", vec![1; 5000], 5000));
    // Rows of 1024 entries and more are shared by the row blocks they span: one ending at a
    // span's end (1 + 2047 positions), neighbours, and many at once among short rows.
    lengths_and_names.push(("a row ending at a span's end", vec![2047], 3000));
    lengths_and_names.push((
        "long neighbours",
        vec![3000, 3000, 1, 3000, 1024, 1023],
        4000,
    ));
    lengths_and_names.push((
        "many long rows among short ones",
        (0..400u64)
            .map(|i| if i % 8 == 0 { 12_000 } else { i % 13 })
            .collect(),
        20_000,
    ));
    let mut out: Vec<(&'static str, Csr<T>)> = lengths_and_names
        .into_iter()
        .map(|(what, lengths, ncols)| (what, from_row_lengths::<T>(&lengths, ncols)))
        .collect();
    out.push((
        "no rows",
        Csr::try_new(0, 7, vec![0], Vec::new(), Vec::new()).expect("empty"),
    ));
    out.push((
        "rows without entries only",
        Csr::try_new(3000, 7, vec![0; 3001], Vec::new(), Vec::new()).expect("no entries"),
    ));
    out.push(("short uneven rows", generate::uniform(20_000, 20_000, 3, 6)));
    out.push(("banded, 11 per row", generate::banded(30_000, 11, 5)));
    out
}

fn csr_stream_row_blocks<T: DeviceScalar>() {
    let Some(b) = backend() else { return };
    for (what, a) in stream_edge_matrices::<T>() {
        for kernel in [SpmvKernel::CsrStream, SpmvKernel::Auto] {
            check_spmv(&b, &a, SparseRef::Csr(&a), kernel, what);
        }
    }
}

fn ellr_every_t<T: DeviceScalar>() {
    let Some(b) = backend() else { return };
    for (what, a) in spmv_matrices::<T>() {
        let e = Ellr::from_csr(&a, 1 << 30).expect("ellr");
        check_spmv(&b, &a, SparseRef::Ellr(&e), SpmvKernel::Auto, what);
        for t in [1, 2, 4, 8, 16, 32] {
            check_spmv(
                &b,
                &a,
                SparseRef::Ellr(&e),
                SpmvKernel::EllrT { threads_per_row: t },
                what,
            );
        }
    }
}

fn atomic_formats<T: DeviceScalar>() {
    let Some(b) = backend() else { return };
    for (what, a) in spmv_matrices::<T>() {
        // CSPR's rows span warps and share warps; CSC and COO scatter with atomics.
        check_spmv(
            &b,
            &a,
            SparseRef::Cspr(&Cspr::from_csr(&a)),
            SpmvKernel::Auto,
            what,
        );
        check_spmv(
            &b,
            &a,
            SparseRef::Csc(&Csc::from_csr(&a).unwrap()),
            SpmvKernel::Auto,
            what,
        );
        check_spmv(&b, &a, SparseRef::Coo(&a.to_coo()), SpmvKernel::Auto, what);
        let d = Dia::from_csr(&a, 1 << 30).expect("dia");
        check_spmv(&b, &a, SparseRef::Dia(&d), SpmvKernel::Auto, what);
    }
    // COO with repeated triplets in reverse order: the repeats add up.
    let mut coo = Coo::<T>::new(3, 3).expect("coo");
    for k in (0..40).rev() {
        coo.try_push(k % 3, (k * 7) % 3, T::from_f64(0.25 * (k % 5) as f64))
            .expect("push");
    }
    let a = coo.to_csr().expect("CSR");
    check_spmv(
        &b,
        &a,
        SparseRef::Coo(&coo),
        SpmvKernel::Auto,
        "COO with repeats",
    );
}

fn bsr_spmv<T: DeviceScalar>() {
    let Some(b) = backend() else { return };
    let a = generate::stencil_3d::<T>(5, generate::Stencil::Seven, 3, 5);
    for shape in [(1, 1), (3, 3), (3, 5), (5, 1)] {
        if a.nrows() % shape.0 != 0 || a.ncols() % shape.1 != 0 {
            continue;
        }
        let s = Bsr::from_csr(&a, shape).expect("bsr");
        let dense_a = s.to_csr().unwrap();
        check_spmv(&b, &dense_a, SparseRef::Bsr(&s), SpmvKernel::Auto, "BSR");
    }
}

fn check_spmm<T: DeviceScalar>(
    b: &CudaBackend,
    a: &Csr<T>,
    sparse: SparseRef<'_, T>,
    layout: Layout,
    ncols: usize,
    options: SpmmKernelOptions,
    what: &str,
) {
    let d =
        Dense::try_new(a.ncols(), ncols, layout, vector::<T>(a.ncols() * ncols, 9)).expect("dense");
    let expected = reference::spmm::<T, PlusTimes>(a, &d).expect("reference");
    let md = Dense::try_new(
        d.nrows(),
        ncols,
        layout,
        d.data().iter().map(|v| v.magnitude()).collect(),
    )
    .expect("dense");
    let scale = reference::spmm::<f64, PlusTimes>(&magnitudes(a), &md).expect("scale");
    let terms = (0..a.nrows()).map(|i| a.row_nnz(i)).max().unwrap_or(0);
    let c = b
        .spmm_with_kernel(sparse, &d, options)
        .unwrap_or_else(|e| panic!("{what} {options:?}: {e}"));
    assert_eq!(c.layout(), layout, "{what}: C takes B's layout");
    let (c, e, s) = (
        c.to_layout(Layout::RowMajor),
        expected.to_layout(Layout::RowMajor),
        scale.to_layout(Layout::RowMajor),
    );
    assert_close(
        c.data(),
        e.data(),
        s.data(),
        terms,
        &format!("{what} {layout:?}×{ncols} {options:?} ({})", T::TYPE),
    );
}

fn spmm_csr_half_warp<T: DeviceScalar>() {
    let Some(b) = backend() else { return };
    let opts = SpmmKernelOptions {
        kernel: SpmmKernel::CsrHalfWarp,
        panel_columns: None,
    };
    for (what, a) in spmv_matrices::<T>() {
        // 70 columns: more than one 64-column pass of a half-warp; 1: a single column.
        for (layout, ncols) in [
            (Layout::RowMajor, 1),
            (Layout::RowMajor, 70),
            (Layout::ColMajor, 1),
            (Layout::ColMajor, 70),
        ] {
            check_spmm(&b, &a, SparseRef::Csr(&a), layout, ncols, opts, what);
        }
    }
}

fn spmm_csr_balanced<T: DeviceScalar>() {
    let Some(b) = backend() else { return };
    for (what, a) in spmv_matrices::<T>() {
        // 1 column; 32: one pass of the lanes; 70: three passes, the last partial; with panels
        // of 24 columns, several panels (each summed atomically into its own zeroed C).
        for (ncols, panel_columns) in [(1, None), (32, None), (70, None), (70, Some(24))] {
            let opts = SpmmKernelOptions {
                kernel: SpmmKernel::CsrBalanced,
                panel_columns,
            };
            check_spmm(
                &b,
                &a,
                SparseRef::Csr(&a),
                Layout::RowMajor,
                ncols,
                opts,
                what,
            );
        }
    }
    // Few long rows (a dense 300×300 A): Auto gives them the balanced kernel's tiles, which cut
    // every row; 32 columns as a user's B of that width.
    let dense = generate::dense::<T>(300, 300, 5);
    let auto = SpmmKernelOptions {
        kernel: SpmmKernel::Auto,
        panel_columns: None,
    };
    for ncols in [1, 32] {
        check_spmm(
            &b,
            &dense,
            SparseRef::Csr(&dense),
            Layout::RowMajor,
            ncols,
            auto,
            "dense A, Auto",
        );
    }
    let a = generate::uniform::<T>(50, 40, 4, 9);
    let d = Dense::zeros(40, 3, Layout::ColMajor).expect("B");
    let opts = SpmmKernelOptions {
        kernel: SpmmKernel::CsrBalanced,
        panel_columns: None,
    };
    match b.spmm_with_kernel(SparseRef::Csr(&a), &d, opts) {
        Err(Error::InvalidArgument(_)) => {}
        other => panic!("a column-major B with the balanced kernel: {other:?}"),
    }
}

fn spmm_ellr_t_and_lc<T: DeviceScalar>() {
    let Some(b) = backend() else { return };
    for (what, a) in spmv_matrices::<T>() {
        let e = Ellr::from_csr(&a, 1 << 30).expect("ellr");
        for layout in [Layout::RowMajor, Layout::ColMajor] {
            check_spmm(
                &b,
                &a,
                SparseRef::Ellr(&e),
                layout,
                13,
                SpmmKernelOptions::default(),
                what,
            );
            for t in [1, 4, 32] {
                for lc in [1, 2, 4, 8] {
                    let opts = SpmmKernelOptions {
                        kernel: SpmmKernel::EllrT {
                            threads_per_row: t,
                            columns_per_pass: lc,
                        },
                        panel_columns: None,
                    };
                    // 13 columns: the last pass of every L_c is partial.
                    check_spmm(&b, &a, SparseRef::Ellr(&e), layout, 13, opts, what);
                }
            }
        }
    }
}

fn spmm_other_formats<T: DeviceScalar>() {
    let Some(b) = backend() else { return };
    let a = generate::skewed::<T>(120, 4, 2, 2, 11);
    let opts = SpmmKernelOptions::default();
    for layout in [Layout::RowMajor, Layout::ColMajor] {
        check_spmm(
            &b,
            &a,
            SparseRef::Cspr(&Cspr::from_csr(&a)),
            layout,
            9,
            opts,
            "CSPR",
        );
        check_spmm(
            &b,
            &a,
            SparseRef::Csc(&Csc::from_csr(&a).unwrap()),
            layout,
            9,
            opts,
            "CSC",
        );
        check_spmm(&b, &a, SparseRef::Coo(&a.to_coo()), layout, 9, opts, "COO");
        let d = Dia::from_csr(&a, 1 << 30).expect("dia");
        check_spmm(&b, &a, SparseRef::Dia(&d), layout, 9, opts, "DIA");
        let s = Bsr::from_csr(&a, (2, 4)).expect("bsr");
        check_spmm(
            &b,
            &s.to_csr().unwrap(),
            SparseRef::Bsr(&s),
            layout,
            9,
            opts,
            "BSR",
        );
    }
}

/// Panels of L_GPU columns over two streams: asked for explicitly, and forced by a memory budget
/// too small for B and C at once.
fn spmm_streamed<T: DeviceScalar>() {
    let Some(b) = backend() else { return };
    let a = generate::rmat::<T>(10, 8, 12);
    let e = Ellr::from_csr(&a, 1 << 30).expect("ellr");
    let c = Cspr::from_csr(&a);
    for panel in [1, 3, 16] {
        let opts = SpmmKernelOptions {
            kernel: SpmmKernel::Auto,
            panel_columns: Some(panel),
        };
        for layout in [Layout::RowMajor, Layout::ColMajor] {
            check_spmm(&b, &a, SparseRef::Csr(&a), layout, 37, opts, "CSR panels");
            check_spmm(&b, &a, SparseRef::Ellr(&e), layout, 37, opts, "ELLR panels");
            check_spmm(&b, &a, SparseRef::Cspr(&c), layout, 11, opts, "CSPR panels");
        }
    }
    // Budgets with room for A and panels of 24 columns per stream, while B and C of 200
    // columns need 2·1024·200·size bytes: the product only succeeds if B and C stream in panels.
    let size = std::mem::size_of::<T>() as u64;
    let panels = 2 * 2 * 1024 * 24 * size;
    let csr_bytes = 8 * 1025 + a.nnz() * (size + 4);
    let ellr_bytes = (e.values().len() as u64) * (size + 4) + 4 * 1024;
    for (what, sparse, bytes) in [
        ("CSR under a budget", SparseRef::Csr(&a), csr_bytes),
        ("ELLR under a budget", SparseRef::Ellr(&e), ellr_bytes),
    ] {
        let Some(small) = backend_with(Some(bytes + panels + 4096)) else {
            return;
        };
        for layout in [Layout::RowMajor, Layout::ColMajor] {
            check_spmm(
                &small,
                &a,
                sparse,
                layout,
                200,
                SpmmKernelOptions::default(),
                what,
            );
        }
    }
    // Room for A (offsets, columns, values) and half a kilobyte: not one column of B and C.
    let tiny = backend_with(Some(8 * 1025 + a.nnz() * (size + 4) + 512)).expect("backend");
    let d = Dense::<T>::zeros(a.ncols(), 8, Layout::RowMajor).unwrap();
    match tiny.spmm_with_kernel(SparseRef::Csr(&a), &d, SpmmKernelOptions::default()) {
        Err(Error::OutOfMemory { .. }) => {}
        other => panic!("SpMM beyond the budget: expected out of memory, got {other:?}"),
    }
}

fn dia_and_bsr_products<T: DeviceScalar>() {
    let Some(b) = backend() else { return };
    // Narrow bands stage B in shared memory; a band of A wider than the tile reads B directly.
    let cases: Vec<(Csr<T>, Csr<T>)> = vec![
        (generate::banded(300, 5, 1), generate::banded(300, 7, 2)),
        (
            generate::banded(3000, 1601, 3),
            generate::banded(3000, 3, 4),
        ),
    ];
    for (x, y) in cases {
        let (dx, dy) = (
            Dia::from_csr(&x, u64::MAX).expect("dia"),
            Dia::from_csr(&y, u64::MAX).expect("dia"),
        );
        let c = b.dia_spgemm(&dx, &dy).expect("DIA×DIA").to_csr().unwrap();
        assert_product_close(&c, &x, &y, "DIA×DIA");
    }
    // A · A with one matrix, whole and in blocks of rows (a budget of a quarter of what the
    // product's rows take: 17 blocks over two lanes): the block's rows of A are copied on the
    // device from its rows of B. A · B of two bands in blocks too.
    let x = generate::banded::<T>(3000, 5, 7);
    let y = generate::banded::<T>(3000, 9, 8);
    let (dx, dy) = (
        Dia::from_csr(&x, u64::MAX).expect("dia"),
        Dia::from_csr(&y, u64::MAX).expect("dia"),
    );
    let c_diagonals = dx.product_offsets(&dx).len();
    let per_row = ((2 * dx.ndiags() + c_diagonals) * std::mem::size_of::<T>()) as u64;
    let blocked = backend_with(Some(per_row * 3000 / 4)).expect("a budgeted backend");
    for (backend, what) in [(&b, "A·A whole"), (&blocked, "A·A in blocks")] {
        let c = backend.dia_spgemm(&dx, &dx).expect(what).to_csr().unwrap();
        assert_product_close(&c, &x, &x, what);
    }
    let c = blocked.dia_spgemm(&dx, &dy).expect("A·B in blocks");
    let whole = b.dia_spgemm(&dx, &dy).expect("A·B whole");
    assert_eq!(c.offsets(), whole.offsets(), "A·B in blocks: C's diagonals");
    assert_eq!(c.data(), whole.data(), "A·B in blocks against whole");
    assert_product_close(&c.to_csr().unwrap(), &x, &y, "A·B in blocks");
    let x = generate::uniform::<T>(64, 96, 20, 5);
    let y = generate::uniform::<T>(96, 40, 12, 6);
    for (bx, by) in [((4, 8), (8, 5)), ((16, 3), (3, 8))] {
        let (sx, sy) = (
            Bsr::from_csr(&x, bx).expect("bsr"),
            Bsr::from_csr(&y, by).expect("bsr"),
        );
        let c = b.bsr_spgemm(&sx, &sy).expect("BSR×BSR");
        assert_eq!(c.block_shape(), (bx.0, by.1));
        let (ex, ey) = (sx.to_csr().unwrap(), sy.to_csr().unwrap());
        assert_product_close(&c.to_csr().unwrap(), &ex, &ey, "BSR×BSR");
    }
}

/// Checks `c` against the reference `x · y`, entry by entry, within the rounding its sums of
/// products allow (the product of the magnitudes scales each entry's error).
fn assert_product_close<T: DeviceScalar>(c: &Csr<T>, x: &Csr<T>, y: &Csr<T>, what: &str) {
    let e = reference::spgemm::<T, PlusTimes>(x, y).expect("reference");
    let scale = reference::spgemm::<f64, PlusTimes>(&magnitudes(x), &magnitudes(y))
        .expect("scale")
        .to_dense(Layout::RowMajor)
        .unwrap();
    let terms = (0..x.nrows()).map(|i| x.row_nnz(i)).max().unwrap_or(0);
    assert_close(
        c.to_dense(Layout::RowMajor).unwrap().data(),
        e.to_dense(Layout::RowMajor).unwrap().data(),
        scale.data(),
        terms,
        what,
    );
}

#[test]
fn kernel_choices_are_checked() {
    let Some(b) = backend() else { return };
    let a = generate::banded::<f32>(40, 3, 1);
    let x = vec![1.0f32; 40];
    let e = Ellr::from_csr(&a, 1 << 20).expect("ellr");
    for kernel in [
        SpmvKernel::EllrT { threads_per_row: 3 },
        SpmvKernel::EllrT {
            threads_per_row: 64,
        },
    ] {
        assert!(matches!(
            b.spmv_with_kernel(SparseRef::Ellr(&e), &x, kernel),
            Err(Error::InvalidArgument(_))
        ));
    }
    assert!(matches!(
        b.spmv_with_kernel(
            SparseRef::Csr(&a),
            &x,
            SpmvKernel::EllrT { threads_per_row: 4 }
        ),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        b.clone()
            .with_csr_spmv_kernel(SpmvKernel::EllrT { threads_per_row: 4 }),
        Err(Error::InvalidArgument(_))
    ));
    for lanes in [0, 1, 3, 64] {
        let kernel = SpmvKernel::CsrSubwarp { lanes };
        assert!(matches!(
            b.spmv_with_kernel(SparseRef::Csr(&a), &x, kernel),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            b.clone().with_csr_spmv_kernel(kernel),
            Err(Error::InvalidArgument(_))
        ));
    }
    // The Backend calls with a chosen CSR kernel, and other formats keeping theirs.
    let expected = reference::spmv::<f32, PlusTimes>(&a, &x).expect("reference");
    // Three terms a row, summed in any order.
    let near = |y: &[f32], what: &str| {
        assert_eq!(y.len(), expected.len(), "{what}");
        for (k, (u, v)) in y.iter().zip(&expected).enumerate() {
            assert!(
                (u - v).abs() <= 1e-5 * (1.0 + v.abs()),
                "{what}: {k}: {u} vs {v}"
            );
        }
    };
    for kernel in [
        SpmvKernel::CsrScalar,
        SpmvKernel::CsrVector,
        SpmvKernel::CsrBalanced,
        SpmvKernel::CsrStream,
        SpmvKernel::CsrLongRowsApart,
        SpmvKernel::CsrSubwarp { lanes: 4 },
    ] {
        let chosen = b
            .clone()
            .with_csr_spmv_kernel(kernel)
            .expect("a CSR kernel");
        let ra = chosen.upload(&a).expect("upload");
        let y = Backend::spmv(&chosen, SparseRef::Csr(&a), &x).expect("SpMV");
        near(&y, &format!("{kernel:?}, from the host"));
        let y = chosen
            .spmv_resident(
                (&ra).into(),
                x.as_slice().into(),
                &hetsparse_core::SpmvOptions::new(),
                &hetsparse_core::RunControl::new(),
            )
            .expect("resident SpMV");
        let y = chosen.download_dense(&y).expect("download");
        near(y.data(), &format!("{kernel:?}, resident"));
        let y = Backend::spmv(&chosen, SparseRef::Ellr(&e), &x).expect("ELLPACK-R SpMV");
        near(&y, &format!("ELLPACK-R beside {kernel:?}"));
    }
    let d = Dense::<f32>::zeros(40, 4, Layout::RowMajor).unwrap();
    let bad_lc = SpmmKernelOptions {
        kernel: SpmmKernel::EllrT {
            threads_per_row: 4,
            columns_per_pass: 3,
        },
        panel_columns: None,
    };
    assert!(matches!(
        b.spmm_with_kernel(SparseRef::Ellr(&e), &d, bad_lc),
        Err(Error::InvalidArgument(_))
    ));
    let no_panel = SpmmKernelOptions {
        kernel: SpmmKernel::Auto,
        panel_columns: Some(0),
    };
    assert!(matches!(
        b.spmm_with_kernel(SparseRef::Csr(&a), &d, no_panel),
        Err(Error::InvalidArgument(_))
    ));
}

type F32 = f32;
type F64 = f64;
type C32 = Complex<f32>;
type C64 = Complex<f64>;
type F16 = f16;
type Bf16 = bf16;

macro_rules! per_scalar {
    ($($check:ident),+) => {
        per_scalar!(@one f32_, F32, $($check),+);
        per_scalar!(@one f64_, F64, $($check),+);
        per_scalar!(@one c32, C32, $($check),+);
        per_scalar!(@one c64, C64, $($check),+);
        per_scalar!(@one f16_, F16, $($check),+);
        per_scalar!(@one bf16_, Bf16, $($check),+);
    };
    (@one $module:ident, $ty:ident, $($check:ident),+) => {
        mod $module {
            $( #[test] fn $check() { super::$check::<super::$ty>() } )+
        }
    };
}

per_scalar!(
    csr_scalar_and_vector,
    csr_stream_row_blocks,
    ellr_every_t,
    atomic_formats,
    bsr_spmv,
    spmm_csr_half_warp,
    spmm_csr_balanced,
    spmm_ellr_t_and_lc,
    spmm_other_formats,
    spmm_streamed,
    dia_and_bsr_products
);
