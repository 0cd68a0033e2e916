//! The scheduler on the GPU: the conformance suite over two CUDA backends on the same device
//! (one with a memory budget small enough that larger operands go chunk by chunk, out of core)
//! and the CPU, and a product larger than a small budget checked against the CPU. Without a
//! device the tests skip, unless HETSPARSE_REQUIRE_DEVICE=1.

use std::sync::Arc;

use hetsparse_core::backend::memory::csr_bytes;
use hetsparse_core::generate::{self, MatrixClass};
use hetsparse_core::{Backend, Error, SpgemmAlgorithm};
use hetsparse_cpu::CpuBackend;
use hetsparse_cuda::CudaBackend;
use hetsparse_sched::{Policy, Scheduler};

/// Small enough that the suite's larger operands do not fit the second backend.
const SMALL_BUDGET: u64 = 1 << 20;

fn two_gpus_and_cpu<T>() -> Result<Scheduler<T>, Error>
where
    T: hetsparse_core::Scalar,
    CudaBackend: Backend<T>,
    CpuBackend: Backend<T>,
{
    let backends: Vec<Box<dyn Backend<T>>> = vec![
        Box::new(CudaBackend::new()?),
        Box::new(CudaBackend::new()?.with_memory_budget(SMALL_BUDGET)),
        Box::new(CpuBackend::with_threads(2)?),
    ];
    Ok(Scheduler::new(backends)
        .policy(Policy::WorkStealing)
        .min_chunk_products(1)
        .share_always())
}

hetsparse_core::conformance_suite! {
    backend: two_gpus_and_cpu(),
    scalars: [f32, f64, c32, c64, f16, bf16],
}

/// B larger than the budget and C several times it: the product goes through column panels of
/// B and comes back chunk by chunk, identical in structure to the CPU's.
#[test]
fn out_of_core_product_on_the_gpu() {
    let gpu = match CudaBackend::new() {
        Ok(g) => g,
        Err(e @ Error::NoDevice { .. }) => {
            assert_ne!(
                std::env::var("HETSPARSE_REQUIRE_DEVICE").as_deref(),
                Ok("1"),
                "{e}"
            );
            eprintln!("out_of_core_product_on_the_gpu: SKIPPED, {e}");
            return;
        }
        Err(e) => panic!("{e}"),
    };
    for class in [
        MatrixClass::Uniform,
        MatrixClass::PowerLaw,
        MatrixClass::LpRectangular,
    ] {
        let size = match class {
            MatrixClass::PowerLaw => 1 << 13,
            _ => 100_000,
        };
        let (a, b) = generate::product_operands::<f64>(class, size, 9);
        let budget = csr_bytes(b.nrows(), b.nnz(), 8) / 2;
        let limited: Arc<dyn Backend<f64>> =
            Arc::new(CudaBackend::new().unwrap().with_memory_budget(budget));
        let s = Scheduler::from_shared(vec![limited]);
        let c = s.spgemm(&a, &b, SpgemmAlgorithm::Auto).unwrap();
        let expected = gpu.spgemm(&a, &b, SpgemmAlgorithm::Auto).unwrap();
        let c_bytes = csr_bytes(c.nrows(), c.nnz(), 8);
        assert!(
            c_bytes >= 4 * budget,
            "{class:?}: C {c_bytes} bytes, budget {budget}"
        );
        assert_eq!(c.row_offsets(), expected.row_offsets(), "{class:?}");
        assert_eq!(c.col_indices(), expected.col_indices(), "{class:?}");
        for (x, y) in c.values().iter().zip(expected.values()) {
            assert!(
                (x - y).abs() <= 1e-9 * (1.0 + y.abs()),
                "{class:?}: {x} vs {y}"
            );
        }
        let report = s.last_report().unwrap();
        assert!(report.devices[0].chunks > 1, "{class:?}: {report:?}");
    }
}
