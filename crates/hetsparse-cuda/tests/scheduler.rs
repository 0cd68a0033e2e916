//! The scheduler on the GPU: the conformance suite over two CUDA backends (on the first two
//! devices, or both on the one there is; the second with a memory budget small enough that
//! larger operands go chunk by chunk, out of core) and the CPU; a product larger than a small
//! budget checked against the CPU; a product shared by every GPU of the host, also with one of
//! them failing. Without a device the tests skip, unless HETSPARSE_REQUIRE_DEVICE=1.

use std::sync::Arc;

use hetsparse_core::backend::memory::csr_bytes;
use hetsparse_core::fault::{Fault, FaultKind, FaultyBackend};
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
    let second = match CudaBackend::with_device(1) {
        Ok(gpu) => gpu,
        Err(Error::NoDevice { .. }) => CudaBackend::new()?,
        Err(e) => return Err(e),
    };
    let backends: Vec<Box<dyn Backend<T>>> = vec![
        Box::new(CudaBackend::new()?),
        Box::new(second.with_memory_budget(SMALL_BUDGET)),
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

/// One backend per GPU of the host (two on the one device where there is only one).
fn every_gpu() -> Result<Vec<CudaBackend>, Error> {
    let mut gpus = vec![CudaBackend::new()?];
    for ordinal in 1.. {
        match CudaBackend::with_device(ordinal) {
            Ok(gpu) => gpus.push(gpu),
            Err(Error::NoDevice { .. }) => break,
            Err(e) => return Err(e),
        }
    }
    if gpus.len() == 1 {
        gpus.push(CudaBackend::new()?);
    }
    Ok(gpus)
}

/// A product shared by every GPU (and the CPU): each takes chunks, and the result is the CPU's;
/// then the same with the last GPU failing on its first chunk (device lost), whose work the
/// others finish.
#[test]
fn every_gpu_shares_a_product_and_covers_a_failing_one() {
    let gpus = match every_gpu() {
        Ok(g) => g,
        Err(e @ Error::NoDevice { .. }) => {
            assert_ne!(
                std::env::var("HETSPARSE_REQUIRE_DEVICE").as_deref(),
                Ok("1"),
                "{e}"
            );
            eprintln!("every_gpu_shares_a_product_and_covers_a_failing_one: SKIPPED, {e}");
            return;
        }
        Err(e) => panic!("{e}"),
    };
    let cpu = CpuBackend::with_threads(2).unwrap();
    let (a, b) = generate::product_operands::<f64>(MatrixClass::Uniform, 200_000, 5);
    let expected = cpu.spgemm(&a, &b, SpgemmAlgorithm::Auto).unwrap();
    let check = |c: &hetsparse_core::Csr<f64>, what: &str| {
        assert_eq!(c.row_offsets(), expected.row_offsets(), "{what}");
        assert_eq!(c.col_indices(), expected.col_indices(), "{what}");
        for (x, y) in c.values().iter().zip(expected.values()) {
            assert!(
                (x - y).abs() <= 1e-9 * (1.0 + y.abs()),
                "{what}: {x} vs {y}"
            );
        }
    };
    let names: Vec<String> = gpus
        .iter()
        .map(|g| hetsparse_core::Device::info(g).name)
        .collect();
    for failing in [false, true] {
        let mut backends: Vec<Arc<dyn Backend<f64>>> = Vec::new();
        let mut faulty = None;
        for (d, gpu) in gpus.iter().enumerate() {
            let gpu: Arc<dyn Backend<f64>> = Arc::new(gpu.clone());
            if failing && d + 1 == gpus.len() {
                let bad = Arc::new(FaultyBackend::new(
                    gpu,
                    Fault::FailOnUnit {
                        unit: 0,
                        kind: FaultKind::DeviceLost,
                        sticky: true,
                    },
                ));
                faulty = Some(Arc::clone(&bad));
                backends.push(bad);
            } else {
                backends.push(gpu);
            }
        }
        backends.push(Arc::new(cpu.clone()));
        let s = Scheduler::from_shared(backends)
            .policy(Policy::WorkStealing)
            .chunks_per_device(8)
            .share_always();
        let c = s.spgemm(&a, &b, SpgemmAlgorithm::Auto).unwrap();
        check(
            &c,
            if failing {
                "one GPU failing"
            } else {
                "every GPU"
            },
        );
        let report = s.last_report().unwrap();
        eprintln!(
            "{} GPUs ({names:?}) + CPU, failing last: {failing}: {:?}",
            gpus.len(),
            report
                .devices
                .iter()
                .map(|d| (d.chunks, d.products, d.failure.is_some()))
                .collect::<Vec<_>>()
        );
        let last = gpus.len() - 1;
        for (d, device) in report.devices.iter().enumerate().take(gpus.len()) {
            if failing && d == last {
                assert!(device.failure.is_some(), "{report:?}");
            } else {
                assert!(device.chunks > 0, "GPU {d} took no chunk: {report:?}");
                assert!(device.failure.is_none(), "{report:?}");
            }
        }
        if let Some(bad) = faulty {
            assert!(bad.units_failed() > 0, "the failing GPU never failed");
        }
    }
}
