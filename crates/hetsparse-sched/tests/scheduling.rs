//! Policies, failover and out-of-core execution of the scheduler, checked against the serial
//! reference: every run must give the reference's product exactly (the CPU backend and the
//! reference sum in the same order for f64 on these small rows) and the report must show the
//! work where the policy put it.

use std::sync::Arc;
use std::time::Duration;

use hetsparse_core::fault::{Fault, FaultKind, FaultyBackend};
use hetsparse_core::generate::{self, MatrixClass};
use hetsparse_core::{
    Backend, Csr, Error, PlusTimes, ReferenceBackend, RunControl, SpgemmAlgorithm, SpgemmOptions,
};
use hetsparse_cpu::CpuBackend;
use hetsparse_opencl::OpenClBackend;
use hetsparse_sched::{Policy, Scheduler};

type Shared = Arc<dyn Backend<f64>>;

fn cpu() -> Shared {
    Arc::new(CpuBackend::with_threads(1).expect("CPU backend"))
}

fn faulty(fault: Fault) -> Arc<FaultyBackend<f64>> {
    Arc::new(FaultyBackend::new(cpu(), fault))
}

fn reference(a: &Csr<f64>, b: &Csr<f64>) -> Csr<f64> {
    hetsparse_core::reference::spgemm::<f64, PlusTimes>(a, b).expect("reference")
}

/// Compares structure exactly and values to a relative 1e-12 (sums may be split differently).
fn assert_same(c: &Csr<f64>, expected: &Csr<f64>) {
    assert_eq!(c.shape(), expected.shape());
    assert_eq!(c.row_offsets(), expected.row_offsets());
    assert_eq!(c.col_indices(), expected.col_indices());
    for (x, y) in c.values().iter().zip(expected.values()) {
        assert!((x - y).abs() <= 1e-12 * (1.0 + y.abs()), "{x} vs {y}");
    }
}

fn operands(class: MatrixClass) -> (Csr<f64>, Csr<f64>) {
    generate::product_operands::<f64>(class, 3000, 7)
}

fn scheduler(backends: Vec<Shared>, policy: Policy) -> Scheduler<f64> {
    Scheduler::from_shared(backends)
        .policy(policy)
        .min_chunk_products(1)
}

/// Runs `attempt` until it reports that the run went the way the test needs (which backend
/// took which chunk depends on thread timing), at most 20 times.
fn until(mut attempt: impl FnMut() -> bool) -> bool {
    (0..20).any(|_| attempt())
}

fn multiply(s: &Scheduler<f64>, a: &Csr<f64>, b: &Csr<f64>) -> Result<Csr<f64>, Error> {
    s.spgemm(a, b, SpgemmAlgorithm::Auto)
}

#[test]
fn every_policy_gives_the_product_on_every_class() {
    let policies = [
        Policy::WorkStealing,
        Policy::RowSplitAssumed(vec![1.0, 3.0]),
        Policy::RowSplitMeasured,
        Policy::DensestFirst,
    ];
    for class in [
        MatrixClass::Stencil3d,
        MatrixClass::PowerLaw,
        MatrixClass::Skewed,
        MatrixClass::LpRectangular,
        MatrixClass::Road,
    ] {
        let (a, b) = operands(class);
        let expected = reference(&a, &b);
        for policy in &policies {
            let s = scheduler(vec![cpu(), Arc::new(ReferenceBackend)], policy.clone());
            let c = multiply(&s, &a, &b).expect("product");
            assert_same(&c, &expected);
            let report = s.last_report().expect("report");
            let products: u64 = report.devices.iter().map(|d| d.products).sum();
            assert_eq!(
                products,
                hetsparse_core::analysis::total_products(&a, &b).unwrap(),
                "{class:?} {policy:?}"
            );
        }
    }
}

#[test]
fn heuristic_one_splits_rows_at_the_assumed_share() {
    let (a, b) = operands(MatrixClass::Uniform);
    let s = scheduler(
        vec![cpu(), Arc::new(ReferenceBackend)],
        Policy::RowSplitAssumed(vec![1.0, 3.0]),
    );
    assert_same(&multiply(&s, &a, &b).unwrap(), &reference(&a, &b));
    let shares = s.last_report().unwrap().shares();
    assert!((shares[0] - 0.25).abs() < 0.01, "{shares:?}");
    // Each backend got one contiguous row range.
    assert_eq!(s.last_report().unwrap().chunks_planned, 2);
}

#[test]
fn measured_speeds_are_learned_and_used() {
    let (a, b) = operands(MatrixClass::PowerLaw);
    let s = scheduler(vec![cpu(), cpu()], Policy::RowSplitMeasured);
    assert!(s.speeds().iter().all(Option::is_none));
    assert_same(&multiply(&s, &a, &b).unwrap(), &reference(&a, &b));
    assert!(s.speeds().iter().all(Option::is_some), "{:?}", s.speeds());
    let s = s.with_speeds(&[1.0, 4.0]).unwrap();
    // A fresh run from set speeds: the second backend takes about 80 %.
    let s = Scheduler::from_shared(s.backends().to_vec())
        .policy(Policy::RowSplitMeasured)
        .with_speeds(&[1.0, 4.0])
        .unwrap();
    multiply(&s, &a, &b).unwrap();
    let shares = s.last_report().unwrap().shares();
    assert!((shares[1] - 0.8).abs() < 0.05, "{shares:?}");
}

#[test]
fn densest_chunks_go_to_the_fastest_backend() {
    let (a, b) = operands(MatrixClass::Skewed);
    let s = scheduler(vec![cpu(), cpu()], Policy::DensestFirst)
        .with_speeds(&[1.0, 3.0])
        .unwrap();
    assert_same(&multiply(&s, &a, &b).unwrap(), &reference(&a, &b));
    let report = s.last_report().unwrap();
    let shares = report.shares();
    assert!(shares[1] >= 0.7, "{shares:?}");
    assert!(report.devices[0].chunks > 0 && report.devices[1].chunks > 0);
}

#[test]
fn work_stealing_uses_every_backend_and_counts_progress() {
    let (a, b) = operands(MatrixClass::Uniform);
    let shared_by_several = until(|| {
        let s = scheduler(vec![cpu(), cpu(), cpu()], Policy::WorkStealing);
        let run = RunControl::new();
        let c = s
            .spgemm_with((&a).into(), (&b).into(), &SpgemmOptions::new(), &run)
            .unwrap();
        assert_same(&c, &reference(&a, &b));
        let progress = run.progress();
        assert_eq!(progress.done, progress.planned);
        assert_eq!(
            progress.planned,
            hetsparse_core::analysis::total_products(&a, &b).unwrap()
        );
        let report = s.last_report().unwrap();
        assert!(report.chunks_planned >= 3 * 8 / 2, "{report:?}");
        report.devices.iter().filter(|d| d.chunks > 0).count() >= 2
    });
    assert!(shared_by_several);
}

#[test]
fn a_much_faster_backend_runs_alone_unless_sharing_is_forced() {
    let (a, b) = operands(MatrixClass::Uniform);
    let products = hetsparse_core::analysis::total_products(&a, &b).unwrap();
    let make = || {
        Scheduler::from_shared(vec![cpu(), Arc::new(ReferenceBackend)])
            .min_chunk_products(1)
            .with_speeds(&[1e9, 1e3])
            .unwrap()
    };
    let adaptive = make();
    assert_same(&multiply(&adaptive, &a, &b).unwrap(), &reference(&a, &b));
    let report = adaptive.last_report().unwrap();
    assert_eq!(report.chunks_planned, 1);
    assert_eq!(report.devices[0].products, products);
    let shared = make().share_always();
    assert_same(&multiply(&shared, &a, &b).unwrap(), &reference(&a, &b));
    assert!(shared.last_report().unwrap().chunks_planned > 1);
}

#[test]
fn a_failing_backend_has_its_chunks_rerun_on_the_others() {
    let (a, b) = operands(MatrixClass::PowerLaw);
    let expected = reference(&a, &b);
    for kind in [
        FaultKind::LaunchFailed,
        FaultKind::DeviceLost,
        FaultKind::OutOfMemory,
        FaultKind::Panic,
    ] {
        for policy in [
            Policy::WorkStealing,
            Policy::RowSplitAssumed(vec![1.0, 1.0]),
            Policy::DensestFirst,
        ] {
            // A row split gives the backend one chunk: fail that one.
            let unit = u64::from(!matches!(policy, Policy::RowSplitAssumed(_)));
            let failed = until(|| {
                let bad = faulty(Fault::FailOnUnit {
                    unit,
                    kind,
                    sticky: true,
                });
                let s = scheduler(vec![bad.clone(), cpu()], policy.clone())
                    .with_speeds(&[1.0, 1.0])
                    .unwrap();
                let c = multiply(&s, &a, &b).unwrap_or_else(|e| panic!("{kind:?} {policy:?}: {e}"));
                assert_same(&c, &expected);
                let report = s.last_report().unwrap();
                assert!(report.devices[1].chunks > 0);
                if bad.units_failed() == 0 {
                    return false;
                }
                if kind != FaultKind::OutOfMemory {
                    assert!(report.devices[0].failure.is_some(), "{report:?}");
                }
                true
            });
            assert!(
                failed,
                "{kind:?} {policy:?}: the backend never reached its fault"
            );
        }
    }
}

#[test]
fn a_backend_that_fails_every_chunk_leaves_the_work_to_the_others() {
    let (a, b) = operands(MatrixClass::Stencil3d);
    let failed = until(|| {
        let dead = faulty(Fault::FailOnUnit {
            unit: 0,
            kind: FaultKind::DeviceLost,
            sticky: true,
        });
        let s = scheduler(vec![dead, cpu(), cpu()], Policy::WorkStealing);
        assert_same(&multiply(&s, &a, &b).unwrap(), &reference(&a, &b));
        let report = s.last_report().unwrap();
        assert_eq!(report.devices[0].chunks, 0);
        report.devices[0].failure.is_some()
    });
    assert!(failed, "the failing backend never took a chunk");
}

#[test]
fn when_every_backend_fails_the_error_comes_back() {
    let (a, b) = operands(MatrixClass::Uniform);
    let fault = || Fault::FailOnUnit {
        unit: 0,
        kind: FaultKind::LaunchFailed,
        sticky: true,
    };
    let s = scheduler(vec![faulty(fault()), faulty(fault())], Policy::WorkStealing);
    let e = multiply(&s, &a, &b).unwrap_err();
    assert!(e.is_retryable(), "{e}");
}

#[test]
fn out_of_memory_splits_the_chunk_until_it_fits() {
    let (a, b) = operands(MatrixClass::PowerLaw);
    let b_bytes = hetsparse_core::backend::memory::csr_bytes(b.nrows(), b.nnz(), 8);
    // Room for B and a 32nd of the output bound: the planned chunks (an 8th of the products
    // each) fail, their halves of halves pass.
    let products = hetsparse_core::analysis::total_products(&a, &b).unwrap();
    let bound = hetsparse_core::backend::memory::csr_bytes(a.nrows(), products, 8);
    let small = faulty(Fault::MemoryLimit {
        bytes: b_bytes + bound / 32,
    });
    let s = scheduler(vec![small.clone()], Policy::WorkStealing);
    assert_same(&multiply(&s, &a, &b).unwrap(), &reference(&a, &b));
    let report = s.last_report().unwrap();
    assert!(small.units_failed() > 0);
    assert!(
        report.devices[0].chunks > report.chunks_planned,
        "{report:?}"
    );
    assert!(report.devices[0].failure.is_none());
}

#[test]
fn a_chunk_no_backend_can_hold_is_an_out_of_memory_error() {
    let (a, b) = operands(MatrixClass::Uniform);
    let tiny = faulty(Fault::MemoryLimit { bytes: 1024 });
    let s = scheduler(vec![tiny], Policy::WorkStealing);
    let e = multiply(&s, &a, &b).unwrap_err();
    assert!(
        matches!(e, Error::OutOfMemory { .. }) || e.to_string().contains("memory"),
        "{e}"
    );
}

#[test]
fn a_hanging_backend_stops_when_the_run_is_cancelled() {
    let (a, b) = operands(MatrixClass::Uniform);
    let hang = faulty(Fault::HangOnUnit { unit: 0 });
    let s = scheduler(vec![hang, cpu()], Policy::RowSplitAssumed(vec![1.0, 1.0]));
    let run = RunControl::new();
    let canceller = run.clone();
    let stopper = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        canceller.cancel();
    });
    let e = s
        .spgemm_with((&a).into(), (&b).into(), &SpgemmOptions::new(), &run)
        .unwrap_err();
    stopper.join().unwrap();
    assert!(matches!(e, Error::Cancelled), "{e}");
}

#[test]
fn spmv_and_spmm_move_to_the_next_backend_on_a_failure() {
    let (a, _) = operands(MatrixClass::Road);
    let x: Vec<f64> = (0..a.ncols()).map(|i| i as f64 * 0.5).collect();
    let dead = faulty(Fault::FailOnUnit {
        unit: 0,
        kind: FaultKind::DeviceLost,
        sticky: true,
    });
    let s = scheduler(vec![dead, cpu()], Policy::WorkStealing);
    let y = s.spmv((&a).into(), &x).unwrap();
    let expected = ReferenceBackend.spmv((&a).into(), &x).unwrap();
    for (u, v) in y.iter().zip(&expected) {
        assert!((u - v).abs() <= 1e-12 * (1.0 + v.abs()), "{u} vs {v}");
    }
}

#[test]
fn spmv_and_spmm_are_shared_by_row_blocks_and_survive_a_failure() {
    let (a, _) = operands(MatrixClass::PowerLaw);
    let x: Vec<f64> = (0..a.ncols()).map(|i| 1.0 + (i % 7) as f64).collect();
    let expected_y = ReferenceBackend.spmv((&a).into(), &x).unwrap();
    for layout in [
        hetsparse_core::Layout::RowMajor,
        hetsparse_core::Layout::ColMajor,
    ] {
        let d =
            hetsparse_core::Dense::from_fn(a.ncols(), 5, layout, |i, j| (i + 2 * j) as f64 * 0.25)
                .unwrap();
        let expected_c = ReferenceBackend.spmm((&a).into(), &d).unwrap();
        let bad = faulty(Fault::FailOnUnit {
            unit: 0,
            kind: FaultKind::LaunchFailed,
            sticky: true,
        });
        // The failing backend's thread starts first; the CPUs may still finish every block
        // before it takes one, so run until it has.
        for _ in 0..20 {
            let s = scheduler(vec![bad.clone(), cpu(), cpu()], Policy::WorkStealing).share_always();
            let run = RunControl::new();
            let y = s
                .spmv_with(
                    (&a).into(),
                    (&x).into(),
                    &hetsparse_core::SpmvOptions::new(),
                    &run,
                )
                .unwrap();
            for (u, v) in y.iter().zip(&expected_y) {
                assert!((u - v).abs() <= 1e-12 * (1.0 + v.abs()), "{u} vs {v}");
            }
            assert_eq!(run.progress().done, run.progress().planned);
            assert_eq!(run.progress().planned, a.nnz());
            let c = s.spmm((&a).into(), &d).unwrap();
            assert_eq!(c.layout(), layout);
            for i in 0..c.nrows() {
                for j in 0..c.ncols() {
                    let (u, v) = (c.get(i, j), expected_c.get(i, j));
                    assert!((u - v).abs() <= 1e-12 * (1.0 + v.abs()), "{u} vs {v}");
                }
            }
            if bad.units_started() > 0 {
                break;
            }
        }
        assert!(
            bad.units_failed() >= 1,
            "the failing backend never took a block"
        );
    }
}

#[test]
fn no_backends_is_an_error_not_a_panic() {
    let s = Scheduler::<f64>::new(Vec::new());
    let a = Csr::<f64>::identity(3).unwrap();
    assert!(matches!(multiply(&s, &a, &a), Err(Error::NoDevice { .. })));
    let bad = scheduler(vec![cpu()], Policy::RowSplitAssumed(vec![1.0, 2.0]));
    assert!(matches!(
        multiply(&bad, &a, &a),
        Err(Error::InvalidArgument(_))
    ));
}

/// Out-of-core on a real device: an OpenCL device (PoCL in CI) with a budget smaller than B,
/// and a product at least 4× the budget.
#[test]
fn out_of_core_on_an_opencl_device_with_a_small_budget() {
    let Ok(device) = OpenClBackend::from_env() else {
        assert_ne!(
            std::env::var("HETSPARSE_REQUIRE_DEVICE").as_deref(),
            Ok("1"),
            "no OpenCL device"
        );
        eprintln!("SKIPPED: no OpenCL device");
        return;
    };
    let (a, b) = generate::product_operands::<f64>(MatrixClass::Uniform, 20_000, 3);
    let b_bytes = hetsparse_core::backend::memory::csr_bytes(b.nrows(), b.nnz(), 8);
    let budget = b_bytes / 2;
    let gpu: Shared = Arc::new(device.with_memory_budget(budget));
    let s = scheduler(vec![gpu], Policy::WorkStealing);
    let c = multiply(&s, &a, &b).unwrap();
    let c_bytes = hetsparse_core::backend::memory::csr_bytes(c.nrows(), c.nnz(), 8);
    assert!(
        c_bytes >= 4 * budget,
        "C is {c_bytes} bytes for a budget of {budget}"
    );
    assert_same(&c, &reference(&a, &b));
    let report = s.last_report().unwrap();
    assert!(report.chunks_planned > 1, "{report:?}");
}
