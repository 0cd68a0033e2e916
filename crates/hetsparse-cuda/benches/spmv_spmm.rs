//! Criterion benchmarks of the CUDA SpMV and SpMM kernel variants (f32), end to end through the
//! public API: each iteration copies A and x (or B) to the device and the result back, as a
//! caller's single call does. Without a GPU the benchmark prints that it skipped.
//! Its last results on the GPU machine are in the git history of docs/benchmarks.md, which
//! records resident SpMV and SpMM at GPU sizes instead (benches/benches/gpu_spgemm.rs).

use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use hetsparse_core::generate;
use hetsparse_core::{Csc, Cspr, Csr, Dense, Ellr, Layout, SparseRef};
use hetsparse_cuda::{CudaBackend, SpmmKernel, SpmmKernelOptions, SpmvKernel};

fn gpu() -> Option<CudaBackend> {
    match CudaBackend::new() {
        Ok(g) => Some(g),
        Err(e) => {
            eprintln!("cuda spmv/spmm benchmarks: SKIPPED, {e}");
            None
        }
    }
}

fn configure<'a>(
    c: &'a mut Criterion,
    name: &str,
) -> criterion::BenchmarkGroup<'a, criterion::measurement::WallTime> {
    let mut group = c.benchmark_group(name);
    group.sample_size(10);
    group.warm_up_time(Duration::from_millis(300));
    group.measurement_time(Duration::from_secs(1));
    group
}

fn spmv(c: &mut Criterion) {
    let Some(gpu) = gpu() else { return };
    let mut group = configure(c, "cuda_spmv_f32");
    // Short rows (8 per row) and long rows (96 per row), and a power-law graph.
    let matrices: Vec<(&str, Csr<f32>)> = vec![
        ("uniform_1M_8", generate::uniform(1 << 20, 1 << 20, 8, 1)),
        ("uniform_64k_96", generate::uniform(1 << 16, 1 << 16, 96, 2)),
        ("rmat_s18_e8", generate::rmat(18, 8, 3)),
    ];
    for (name, a) in &matrices {
        let x = vec![1.0f32; a.ncols()];
        group.throughput(Throughput::Elements(a.nnz()));
        let ellr = Ellr::from_csr(a, 1 << 32).ok();
        let cspr = Cspr::from_csr(a);
        let csc = Csc::from_csr(a).expect("CSC form of A");
        let coo = a.to_coo();
        let mut variants: Vec<(String, SparseRef<'_, f32>, SpmvKernel)> = vec![
            (
                "csr_scalar".into(),
                SparseRef::Csr(a),
                SpmvKernel::CsrScalar,
            ),
            (
                "csr_vector".into(),
                SparseRef::Csr(a),
                SpmvKernel::CsrVector,
            ),
            ("cspr".into(), SparseRef::Cspr(&cspr), SpmvKernel::Auto),
            ("coo".into(), SparseRef::Coo(&coo), SpmvKernel::Auto),
            ("csc".into(), SparseRef::Csc(&csc), SpmvKernel::Auto),
        ];
        if let Some(e) = &ellr {
            for t in [1, 4, 16] {
                variants.push((
                    format!("ellr_t{t}"),
                    SparseRef::Ellr(e),
                    SpmvKernel::EllrT { threads_per_row: t },
                ));
            }
        }
        for (variant, m, kernel) in variants {
            group.bench_function(BenchmarkId::new(variant, name), |bench| {
                bench.iter(|| {
                    gpu.spmv_with_kernel(m, &x, kernel)
                        .expect("SpMV on the GPU")
                })
            });
        }
    }
    group.finish();
}

fn spmm(c: &mut Criterion) {
    let Some(gpu) = gpu() else { return };
    let mut group = configure(c, "cuda_spmm_f32");
    let a: Csr<f32> = generate::uniform(1 << 18, 1 << 18, 16, 4);
    let e = Ellr::from_csr(&a, 1 << 32).expect("ELLPACK-R");
    let ncols = 32;
    group.throughput(Throughput::Elements(a.nnz() * ncols as u64));
    for layout in [Layout::RowMajor, Layout::ColMajor] {
        let b = Dense::<f32>::from_fn(a.ncols(), ncols, layout, |i, j| ((i + j) % 7) as f32)
            .expect("dense B");
        let whole = |kernel| SpmmKernelOptions {
            kernel,
            panel_columns: None,
        };
        let mut variants: Vec<(String, SparseRef<'_, f32>, SpmmKernelOptions)> = vec![(
            "csrmm_half_warp".into(),
            SparseRef::Csr(&a),
            whole(SpmmKernel::CsrHalfWarp),
        )];
        for (t, lc) in [(1, 8), (4, 1), (4, 4), (4, 8), (16, 8)] {
            variants.push((
                format!("ellr_t{t}_lc{lc}"),
                SparseRef::Ellr(&e),
                whole(SpmmKernel::EllrT {
                    threads_per_row: t,
                    columns_per_pass: lc,
                }),
            ));
        }
        variants.push((
            "csrmm_panels_8x4".into(),
            SparseRef::Csr(&a),
            SpmmKernelOptions {
                kernel: SpmmKernel::CsrHalfWarp,
                panel_columns: Some(8),
            },
        ));
        for (variant, m, options) in variants {
            group.bench_function(BenchmarkId::new(variant, format!("{layout:?}")), |bench| {
                bench.iter(|| {
                    gpu.spmm_with_kernel(m, &b, options)
                        .expect("SpMM on the GPU")
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, spmv, spmm);
criterion_main!(benches);
