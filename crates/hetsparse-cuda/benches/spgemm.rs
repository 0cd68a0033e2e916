//! Criterion benchmarks of every CUDA SpGEMM algorithm on generated matrices of three classes
//! (C = A·A). Without a GPU the benchmark prints that it skipped.
//! Its last results on the GPU machine are in the git history of docs/benchmarks.md, which
//! records the GPU-size bench instead (benches/benches/gpu_spgemm.rs).

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use hetsparse_core::generate::{self, Stencil};
use hetsparse_core::{Backend, Csr, SpgemmAlgorithm};
use hetsparse_cuda::CudaBackend;

fn operands() -> Vec<(&'static str, Csr<f64>)> {
    vec![
        (
            "stencil27_40",
            generate::stencil_3d(40, Stencil::TwentySeven, 1, 1),
        ),
        ("rmat_s14_e8", generate::rmat(14, 8, 2)),
        ("uniform_100k_8", generate::uniform(100_000, 100_000, 8, 3)),
    ]
}

fn products(a: &Csr<f64>) -> u64 {
    a.col_indices().iter().map(|&k| a.row_nnz(k as usize)).sum()
}

fn spgemm(c: &mut Criterion) {
    let gpu = match CudaBackend::new() {
        Ok(g) => g,
        Err(e) => {
            eprintln!("cuda spgemm benchmarks: SKIPPED, {e}");
            return;
        }
    };
    let mut group = c.benchmark_group("cuda_spgemm_f64");
    group.sample_size(10);
    group.warm_up_time(std::time::Duration::from_millis(500));
    group.measurement_time(std::time::Duration::from_secs(2));
    for (name, a) in operands() {
        group.throughput(Throughput::Elements(products(&a)));
        for alg in [
            SpgemmAlgorithm::Adaptive,
            SpgemmAlgorithm::RowRow,
            SpgemmAlgorithm::ColumnRow,
            SpgemmAlgorithm::Esc,
        ] {
            group.bench_with_input(
                BenchmarkId::new(format!("{alg:?}"), name),
                &a,
                |bench, a| bench.iter(|| gpu.spgemm(a, a, alg).expect("SpGEMM on the GPU")),
            );
        }
    }
    group.finish();
}

criterion_group!(benches, spgemm);
criterion_main!(benches);
