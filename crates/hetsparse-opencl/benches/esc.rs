//! ESC SpGEMM on the power-law (R-MAT), uniform and road classes: interpolation against binary
//! search for the expansion's start, and the time of a whole product (transfers included).
//!
//! Sizes are the generators' `size` argument (see `hetsparse_core::generate::product_operands`):
//! `HETSPARSE_BENCH_SIZE` sets it for every class (default 16384, for PoCL on a small CPU).
//! `HETSPARSE_OPENCL_DEVICE` picks the device by name. With `HETSPARSE_BENCH_MTX_DIR` set, each
//! class's operand is also written there as `CLASS.mtx`, so that peers (cuSPARSE through CuPy,
//! see `cusparse_peer.py`) multiply the very same matrices.

use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use hetsparse_core::generate::{product_operands, MatrixClass};
use hetsparse_core::{analysis, Backend, SpgemmAlgorithm};
use hetsparse_opencl::{ExpansionSearch, OpenClBackend};

fn size() -> usize {
    std::env::var("HETSPARSE_BENCH_SIZE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(16384)
}

fn esc(c: &mut Criterion) {
    let backend = match OpenClBackend::from_env() {
        Ok(b) => b,
        Err(e) => {
            eprintln!("esc bench skipped: {e}");
            return;
        }
    };
    eprintln!("device: {}", backend.device());
    let mut group = c.benchmark_group("esc_spgemm_f64");
    group.sample_size(10);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(3));
    for class in [
        MatrixClass::PowerLaw,
        MatrixClass::Uniform,
        MatrixClass::Road,
    ] {
        let (a, b) = product_operands::<f64>(class, size(), 42);
        if let Ok(dir) = std::env::var("HETSPARSE_BENCH_MTX_DIR") {
            let path = std::path::Path::new(&dir).join(format!("{}.mtx", class.name()));
            let file = std::fs::File::create(&path).expect("create the .mtx file");
            hetsparse_core::matrix_market::write_sparse(file, &a).expect("write the .mtx file");
        }
        let products = analysis::total_products(&a, &b).expect("analysis");
        eprintln!(
            "{}: {}x{}, nnz {}, products {products}",
            class.name(),
            a.nrows(),
            a.ncols(),
            a.nnz()
        );
        group.throughput(Throughput::Elements(products));
        for search in [ExpansionSearch::Interpolation, ExpansionSearch::Binary] {
            let bk = backend.clone().with_expansion_search(search);
            group.bench_with_input(
                BenchmarkId::new(class.name(), format!("{search:?}")),
                &(&a, &b),
                |bench, (a, b)| {
                    bench.iter(|| bk.spgemm(a, b, SpgemmAlgorithm::Esc).expect("spgemm"))
                },
            );
        }
    }
    group.finish();
}

criterion_group!(benches, esc);
criterion_main!(benches);
