//! Policies, failover and out-of-core execution of the scheduler, checked against the serial
//! reference: every run must give the reference's product exactly (the CPU backend and the
//! reference sum in the same order for f64 on these small rows) and the report must show the
//! work where the policy put it.

use std::sync::{Arc, Mutex};
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

/// The OpenCL device the environment names (PoCL in CI), or `None` after saying the test is
/// skipped (a failure with HETSPARSE_REQUIRE_DEVICE=1).
fn opencl_device() -> Option<OpenClBackend> {
    let device = OpenClBackend::from_env().ok();
    if device.is_none() {
        assert_ne!(
            std::env::var("HETSPARSE_REQUIRE_DEVICE").as_deref(),
            Ok("1"),
            "no OpenCL device"
        );
        eprintln!("SKIPPED: no OpenCL device");
    }
    device
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

/// Progress counts every product once, and a callback given the run sees it move chunk by
/// chunk.
#[test]
fn work_stealing_uses_every_backend_and_counts_progress() {
    let (a, b) = operands(MatrixClass::Uniform);
    let products = hetsparse_core::analysis::total_products(&a, &b).unwrap();
    let shared_by_several = until(|| {
        let s = scheduler(vec![cpu(), cpu(), cpu()], Policy::WorkStealing);
        let seen = Arc::new(Mutex::new(Vec::new()));
        let kept = Arc::clone(&seen);
        let run = RunControl::with_progress(move |p| kept.lock().unwrap().push(p));
        let c = s
            .spgemm_with((&a).into(), (&b).into(), &SpgemmOptions::new(), &run)
            .unwrap();
        assert_same(&c, &reference(&a, &b));
        let progress = run.progress();
        assert_eq!(progress.done, progress.planned);
        assert_eq!(progress.planned, products);
        let report = s.last_report().unwrap();
        assert!(report.chunks_planned >= 3 * 8 / 2, "{report:?}");
        let seen = seen.lock().unwrap();
        let largest = seen.iter().map(|p| p.done).max();
        assert_eq!(largest, Some(products), "the callback saw the end");
        let chunks: usize = report.devices.iter().map(|d| d.chunks).sum();
        let between = seen
            .iter()
            .filter(|p| p.done > 0 && p.done < products)
            .count();
        assert!(
            between + 1 >= chunks,
            "{between} calls in between for {chunks} chunks"
        );
        report.devices.iter().filter(|d| d.chunks > 0).count() >= 2
    });
    assert!(shared_by_several);
}

/// A chunk's progress reaches the caller while its device computes it (here each backend's
/// list is one merged chunk), and every product still counts once.
#[test]
fn progress_moves_while_a_chunk_is_computed() {
    let a = generate::uniform::<f64>(1 << 16, 1 << 16, 16, 5);
    let products = hetsparse_core::analysis::total_products(&a, &a).unwrap();
    let s = scheduler(vec![cpu(), cpu()], Policy::RowSplitAssumed(vec![1.0, 1.0]));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let kept = Arc::clone(&seen);
    let run = RunControl::with_progress(move |p| kept.lock().unwrap().push(p.done));
    let c = s
        .spgemm_with((&a).into(), (&a).into(), &SpgemmOptions::new(), &run)
        .unwrap();
    assert_same(&c, &cpu().spgemm(&a, &a, SpgemmAlgorithm::Auto).unwrap());
    assert_eq!(run.progress().done, products);
    assert_eq!(run.progress().planned, products);
    let seen = seen.lock().unwrap();
    assert_eq!(seen.iter().max(), Some(&products));
    let chunks: usize = s
        .last_report()
        .unwrap()
        .devices
        .iter()
        .map(|d| d.chunks)
        .sum();
    let between = seen.iter().filter(|&&d| d > 0 && d < products).count();
    assert!(
        between >= 8 * chunks,
        "{between} steps of progress before the end for {chunks} chunks"
    );
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

/// A device run alone counts the products beside its run (not before it): the report and the
/// learned speed still get them exactly.
#[test]
fn a_device_alone_reports_every_product() {
    let Some(device) = opencl_device() else {
        return;
    };
    let (a, b) = operands(MatrixClass::Uniform);
    let products = hetsparse_core::analysis::total_products(&a, &b).unwrap();
    let device: Shared = Arc::new(device);
    // Told by the device as it plans its run, watched or not, and seen by the caller's run
    // once, not twice.
    for run in [RunControl::new(), RunControl::unwatched()] {
        // A fresh scheduler each time: one that has seen a run alone may try sharing next.
        let s = Scheduler::from_shared(vec![Arc::clone(&device), cpu()])
            .min_chunk_products(1)
            .with_speeds(&[1e9, 1e3])
            .unwrap();
        let c = s
            .spgemm_with((&a).into(), (&b).into(), &SpgemmOptions::new(), &run)
            .unwrap();
        assert_same(&c, &reference(&a, &b));
        let report = s.last_report().unwrap();
        assert_eq!(report.chunks_planned, 1);
        assert_eq!(report.devices[0].chunks, 1);
        assert_eq!(report.devices[0].products, products);
        assert_eq!(report.devices[1].products, 0);
        if run.is_watched() {
            assert_eq!(run.progress().done, products);
            assert_eq!(run.progress().planned, products);
        }
    }
}

/// Before anything is learned, a product large enough to share runs whole on the device with
/// memory of its own (on the GPU machines the better first guess than a shared run); the next
/// one is shared, which times the host backend.
#[test]
fn a_first_product_runs_alone_on_the_device_with_memory_of_its_own() {
    let Some(device) = opencl_device() else {
        return;
    };
    let (a, b) = operands(MatrixClass::Uniform);
    let expected = reference(&a, &b);
    let products = hetsparse_core::analysis::total_products(&a, &b).unwrap();
    let s = scheduler(vec![cpu(), Arc::new(device)], Policy::WorkStealing);
    assert_same(&multiply(&s, &a, &b).unwrap(), &expected);
    let first = s.last_report().unwrap();
    assert_eq!(first.chunks_planned, 1);
    assert_eq!(first.devices[0].products, 0);
    assert_eq!(first.devices[1].products, products);
    assert_same(&multiply(&s, &a, &b).unwrap(), &expected);
    assert!(s.last_report().unwrap().chunks_planned > 1);
    // With host backends only, the first product is shared.
    let host_only = scheduler(vec![cpu(), cpu()], Policy::WorkStealing);
    assert_same(&multiply(&host_only, &a, &b).unwrap(), &expected);
    assert!(host_only.last_report().unwrap().chunks_planned > 1);
    // So it is where the device cannot hold A and B (half of B's bytes for a budget); the
    // exploration that follows times the CPU alone, the one backend that can run it whole.
    let Some(device) = opencl_device() else {
        return;
    };
    let budget = hetsparse_core::backend::memory::csr_bytes(b.nrows(), b.nnz(), 8) / 2;
    let small: Shared = Arc::new(device.with_memory_budget(budget));
    let s = scheduler(vec![cpu(), small], Policy::WorkStealing);
    let mut cpu_alone = 0;
    for _ in 0..3 {
        assert_same(&multiply(&s, &a, &b).unwrap(), &expected);
        let report = s.last_report().unwrap();
        if report.chunks_planned == 1 {
            assert_eq!(report.devices[0].products, products, "{report:?}");
            cpu_alone += 1;
        }
    }
    assert!(cpu_alone > 0);
}

#[test]
fn a_backend_that_fails_a_small_product_is_not_tried_on_small_ones_again() {
    // 3000-row operands: far below twice the default smallest chunk, so never shared by
    // choice. Each backend is tried once on a small product; the first fails (for good).
    let (a, b) = operands(MatrixClass::Uniform);
    let expected = reference(&a, &b);
    let bad = faulty(Fault::FailOnUnit {
        unit: 0,
        kind: FaultKind::LaunchFailed,
        sticky: true,
    });
    let s = Scheduler::from_shared(vec![Arc::clone(&bad) as Shared, cpu()]);
    for _ in 0..3 {
        assert_same(&multiply(&s, &a, &b).unwrap(), &expected);
    }
    // Its one failure, then the shared run's chunks it was handed before it was left out:
    // the later products went to the CPU without asking it.
    let tried = bad.units_started();
    assert_same(&multiply(&s, &a, &b).unwrap(), &expected);
    assert_eq!(bad.units_started(), tried);
    let report = s.last_report().unwrap();
    assert_eq!(report.chunks_planned, 1);
    assert_eq!(report.devices[1].chunks, 1);
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
    out_of_memory_splits(false);
}

/// As above, with C written in place: the halves of a chunk get their halves of its place
/// (cut by rows, or by columns at the entries counted in the first half's).
#[test]
fn out_of_memory_splits_the_chunk_and_its_place_in_c() {
    out_of_memory_splits(true);
}

fn out_of_memory_splits(in_place: bool) {
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
    let s = if in_place { s.host_memory(0) } else { s };
    assert_same(&multiply(&s, &a, &b).unwrap(), &reference(&a, &b));
    let report = s.last_report().unwrap();
    assert_eq!(report.counting > Duration::ZERO, in_place, "{report:?}");
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
    let Some(device) = opencl_device() else {
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
    let expected = reference(&a, &b);
    assert_same(&c, &expected);
    let report = s.last_report().unwrap();
    assert!(report.chunks_planned > 1, "{report:?}");
    // With C in place, counted by the device over the same chunks.
    let s = s.host_memory(0);
    assert_same(&multiply(&s, &a, &b).unwrap(), &expected);
    let report = s.last_report().unwrap();
    assert!(report.counting > Duration::ZERO, "{report:?}");
}

/// A, B, the budgeted device and the reference product.
type BesideTheCpu = (Csr<f64>, Csr<f64>, Shared, Csr<f64>);

/// A product for an out-of-core device beside the CPU: uniform operands of 20 000 rows, the
/// OpenCL device with half of B's bytes for a budget (so B is cut into panels for it), and
/// the reference product; `None` where there is no OpenCL device (the test is skipped).
fn out_of_core_beside_the_cpu() -> Option<BesideTheCpu> {
    let device = opencl_device()?;
    let (a, b) = generate::product_operands::<f64>(MatrixClass::Uniform, 20_000, 3);
    let budget = hetsparse_core::backend::memory::csr_bytes(b.nrows(), b.nnz(), 8) / 2;
    let gpu: Shared = Arc::new(device.with_memory_budget(budget));
    let expected = reference(&a, &b);
    Some((a, b, gpu, expected))
}

/// Out of core beside the CPU: B is cut into panels for the device, and the CPU, which holds
/// A and B in place, computes a row panel's chunks in every panel of B as one chunk of all
/// columns where it was given them together (a row split, densest-first's row panels), into
/// C's assembly and into C in place. Under work stealing it takes a chunk with the same rows'
/// chunks still queued in the other panels (which ones are left depends on the device's
/// pace): the product is checked.
#[test]
fn the_cpu_computes_whole_rows_of_an_out_of_core_product_beside_the_device() {
    let Some((a, b, gpu, expected)) = out_of_core_beside_the_cpu() else {
        return;
    };
    for (policy, in_place) in [
        (Policy::RowSplitAssumed(vec![1.0, 1.0]), false),
        (Policy::RowSplitAssumed(vec![1.0, 1.0]), true),
        (Policy::DensestFirst, false),
        (Policy::DensestFirst, true),
        (Policy::WorkStealing, false),
        (Policy::WorkStealing, true),
    ] {
        let host = faulty(Fault::None);
        let mut s = scheduler(vec![host.clone(), gpu.clone()], policy.clone())
            .with_speeds(&[1.0, 1.0])
            .unwrap()
            .share_always();
        if in_place {
            s = s.host_memory(0);
        }
        assert_same(&multiply(&s, &a, &b).unwrap(), &expected);
        let report = s.last_report().unwrap();
        assert!(report.devices[1].products > 0, "{policy:?}: {report:?}");
        if policy == Policy::WorkStealing {
            continue;
        }
        let asked = host.chunks_asked();
        assert!(!asked.is_empty(), "{policy:?}: {report:?}");
        assert!(
            asked.iter().all(|c| c.cols == (0..b.ncols())),
            "{policy:?}: the CPU was asked for {asked:?}"
        );
        // B was cut: the device's chunks outnumber the CPU's.
        assert!(
            report.chunks_planned > 2 * asked.len(),
            "{policy:?}: {report:?}"
        );
    }
}

/// A chunk of all of B's columns made from a row panel's chunks in every panel runs out of
/// memory on the CPU: it goes back as the chunks it was made of (planned to fit), which are
/// not merged again, into C's assembly and into C in place.
#[test]
fn a_chunk_across_the_panels_that_runs_out_of_memory_goes_back_to_its_chunks() {
    let Some((a, b, gpu, expected)) = out_of_core_beside_the_cpu() else {
        return;
    };
    let b_bytes = hetsparse_core::backend::memory::csr_bytes(b.nrows(), b.nnz(), 8);
    let c_bytes = hetsparse_core::backend::memory::csr_bytes(expected.nrows(), expected.nnz(), 8);
    for in_place in [false, true] {
        // Room for B and about an eighth of the rows of A and C: the CPU's half of the rows
        // fails as one chunk, its planned chunks fit.
        let host = Arc::new(FaultyBackend::new(
            cpu(),
            Fault::MemoryLimit {
                bytes: b_bytes + c_bytes / 8,
            },
        ));
        let mut s = scheduler(
            vec![host.clone(), gpu.clone()],
            Policy::RowSplitAssumed(vec![1.0, 1.0]),
        )
        .share_always();
        if in_place {
            s = s.host_memory(0);
        }
        assert_same(&multiply(&s, &a, &b).unwrap(), &expected);
        let report = s.last_report().unwrap();
        assert!(host.units_failed() >= 1, "{report:?}");
        assert!(report.devices[0].products > 0, "{report:?}");
        let asked = host.chunks_asked();
        assert!(asked.len() > 2, "the CPU was asked for {asked:?}");
        assert_eq!(
            asked[0].cols,
            0..b.ncols(),
            "the CPU was asked for {asked:?}"
        );
        assert!(
            asked[1..].iter().all(|c| c.cols.len() < b.ncols()),
            "the CPU was asked for {asked:?}"
        );
    }
}

/// The CPU fails on the chunk of all columns it made of its row panels: the chunk goes back
/// as the chunks it was made of, one per panel of B, which the out-of-core device (which
/// cannot hold B) computes, into C's assembly and into C in place.
#[test]
fn a_chunk_across_the_panels_given_back_is_cut_into_its_panels_again() {
    let Some((a, b, gpu, expected)) = out_of_core_beside_the_cpu() else {
        return;
    };
    for (kind, in_place) in [
        (FaultKind::DeviceLost, false),
        (FaultKind::OutOfMemory, true),
    ] {
        let host = faulty(Fault::FailOnUnit {
            unit: 0,
            kind,
            sticky: true,
        });
        let mut s = scheduler(
            vec![host.clone(), gpu.clone()],
            Policy::RowSplitAssumed(vec![1.0, 1.0]),
        )
        .share_always();
        if in_place {
            s = s.host_memory(0);
        }
        let c =
            multiply(&s, &a, &b).unwrap_or_else(|e| panic!("{kind:?}, C in place {in_place}: {e}"));
        assert_same(&c, &expected);
        let report = s.last_report().unwrap();
        assert_eq!(report.devices[0].products, 0, "{report:?}");
        assert!(host.units_failed() > 0, "{report:?}");
        assert!(
            host.chunks_asked()[0].cols == (0..b.ncols()),
            "{:?}",
            host.chunks_asked()
        );
    }
}

/// C in place on a device that holds A and B: the device counts C over the planned chunks,
/// then the device and the CPU write their chunks into it.
#[test]
fn c_in_place_is_counted_by_a_device_that_holds_the_operands() {
    let Some(device) = opencl_device() else {
        return;
    };
    let (a, b) = operands(MatrixClass::Skewed);
    let gpu: Shared = Arc::new(device);
    let s = scheduler(vec![gpu, cpu()], Policy::WorkStealing)
        .share_always()
        .host_memory(0);
    assert_same(&multiply(&s, &a, &b).unwrap(), &reference(&a, &b));
    let report = s.last_report().unwrap();
    assert!(report.counting > Duration::ZERO, "{report:?}");
    assert!(report.chunks_planned > 1, "{report:?}");
}

#[test]
fn c_is_written_in_place_where_a_device_counts_it_and_c_may_be_large_beside_a_and_b() {
    let Some(device) = opencl_device() else {
        return;
    };
    let gpu: Shared = Arc::new(device);
    // Intermediate products far beyond A's and B's entries: the device counts C and every
    // chunk is written into its place.
    let (a, b) = operands(MatrixClass::Skewed);
    let shared = scheduler(vec![gpu.clone(), cpu()], Policy::WorkStealing).share_always();
    assert_same(&multiply(&shared, &a, &b).unwrap(), &reference(&a, &b));
    let report = shared.last_report().unwrap();
    assert!(report.counting > Duration::ZERO, "{report:?}");
    // One product per entry of A: C is no larger than A, so counting it would cost more than
    // the chunks' assembly.
    let a = generate::uniform::<f64>(20_000, 20_000, 1, 3);
    let b = generate::uniform::<f64>(20_000, 20_000, 1, 4);
    assert_same(&multiply(&shared, &a, &b).unwrap(), &reference(&a, &b));
    let report = shared.last_report().unwrap();
    assert!(report.chunks_planned > 1, "{report:?}");
    assert_eq!(report.counting, Duration::ZERO, "{report:?}");
    // With no device to count C, the host would: the chunks are assembled.
    let (a, b) = operands(MatrixClass::Skewed);
    let host_only = scheduler(vec![cpu(), cpu()], Policy::WorkStealing).share_always();
    assert_same(&multiply(&host_only, &a, &b).unwrap(), &reference(&a, &b));
    let report = host_only.last_report().unwrap();
    assert!(report.chunks_planned > 1, "{report:?}");
    assert_eq!(report.counting, Duration::ZERO, "{report:?}");
}

mod band {
    //! DIA × DIA split by rows (Matam et al. §IV.C).

    use super::*;
    use hetsparse_core::Dia;
    use hetsparse_sched::BandCost;

    fn band(rows: usize, cols: usize, offsets: &[i64], seed: u64) -> Dia<f64> {
        generate::band_dia(rows, cols, offsets, seed).expect("band")
    }

    fn cases() -> Vec<(Dia<f64>, Dia<f64>)> {
        vec![
            (
                band(3000, 3000, &[-2, -1, 0, 1, 2], 1),
                band(3000, 3000, &[-1, 0, 1], 2),
            ),
            (
                band(2000, 2500, &[-40, -3, 0, 9, 300], 3),
                band(2500, 1800, &[-700, -1, 0, 4], 4),
            ),
            (
                band(1500, 1500, &[-1400, 1400], 5),
                band(1500, 1500, &[0, 3], 6),
            ),
        ]
    }

    const EQUAL: BandCost = BandCost {
        fixed_secs: 0.0,
        secs_per_product: 1e-9,
        secs_per_output: 1e-9,
    };

    #[test]
    fn split_rows_give_one_backends_product() {
        for (k, (a, b)) in cases().iter().enumerate() {
            let whole = cpu().dia_spgemm(a, b).expect("CPU alone");
            for policy in [
                Policy::WorkStealing,
                Policy::RowSplitAssumed(vec![1.0, 3.0]),
            ] {
                let s = scheduler(vec![cpu(), cpu()], policy.clone())
                    .with_band_costs(&[EQUAL, EQUAL])
                    .expect("costs");
                let c = s.dia_spgemm(a, b).expect("split");
                // The same pairs summed in the same order: bit for bit the CPU's product.
                assert_eq!(c, whole, "case {k}, {policy:?}");
                let report = s.last_report().expect("report");
                let chunks: Vec<usize> = report.devices.iter().map(|d| d.chunks).collect();
                assert_eq!(chunks, vec![1, 1], "case {k}, {policy:?}");
                // Rows are cut at the share; on a full band, products follow rows.
                if k == 0 {
                    let shares = report.shares();
                    let first = if matches!(policy, Policy::WorkStealing) {
                        0.5
                    } else {
                        0.25
                    };
                    assert!((shares[0] - first).abs() < 0.01, "{policy:?}: {shares:?}");
                }
            }
        }
    }

    #[test]
    fn costs_decide_the_rows_and_small_products_run_whole() {
        let (a, b) = &cases()[0];
        // The second backend three times as fast per row: a quarter of the rows to the first.
        let slow = BandCost {
            secs_per_product: 3e-9,
            secs_per_output: 3e-9,
            ..EQUAL
        };
        let s = scheduler(vec![cpu(), cpu()], Policy::RowSplitMeasured)
            .with_band_costs(&[slow, EQUAL])
            .expect("costs");
        s.dia_spgemm(a, b).expect("split");
        let shares = s.last_report().expect("report").shares();
        assert!((shares[0] - 0.25).abs() < 0.02, "{shares:?}");
        // Below min_chunk_products the product is not cut: the cheaper backend runs it.
        let s = Scheduler::from_shared(vec![cpu(), cpu()])
            .with_band_costs(&[slow, EQUAL])
            .expect("costs");
        s.dia_spgemm(a, b).expect("whole");
        let chunks: Vec<usize> = s
            .last_report()
            .expect("report")
            .devices
            .iter()
            .map(|d| d.chunks)
            .collect();
        assert_eq!(chunks, vec![0, 1]);
        // Costs are checked.
        let bad = BandCost {
            secs_per_product: -1.0,
            ..EQUAL
        };
        assert!(Scheduler::from_shared(vec![cpu(), cpu()])
            .with_band_costs(&[bad, EQUAL])
            .is_err());
        assert!(Scheduler::from_shared(vec![cpu(), cpu()])
            .with_band_costs(&[EQUAL])
            .is_err());
    }

    #[test]
    fn calibration_measures_every_backend_and_the_split_follows() {
        let s = scheduler(
            vec![cpu(), Arc::new(ReferenceBackend)],
            Policy::WorkStealing,
        );
        assert_eq!(s.band_costs(), vec![None, None]);
        let costs = s.calibrate_band(4096).expect("calibration");
        assert_eq!(s.band_costs(), costs);
        for cost in &costs {
            let c = cost.expect("both backends run DIA × DIA");
            assert!(c.fixed_secs >= 0.0 && c.secs_per_product >= 0.0 && c.secs_per_output >= 0.0);
            assert!(c.secs_per_product + c.secs_per_output > 0.0, "{c:?}");
        }
        for (a, b) in cases() {
            let expected = cpu().dia_spgemm(&a, &b).expect("CPU alone");
            let c = s.dia_spgemm(&a, &b).expect("split");
            assert_eq!(c.to_csr().expect("csr"), expected.to_csr().expect("csr"));
        }
        // Without costs, a product large enough to cut calibrates first.
        let s = scheduler(
            vec![cpu(), Arc::new(ReferenceBackend)],
            Policy::WorkStealing,
        );
        let (a, b) = &cases()[0];
        s.dia_spgemm(a, b).expect("split");
        assert!(s.band_costs().iter().all(Option::is_some));
    }

    #[test]
    fn a_failing_backend_has_its_rows_rerun_on_the_other() {
        let (a, b) = &cases()[1];
        let whole = cpu().dia_spgemm(a, b).expect("CPU alone");
        for kind in [FaultKind::DeviceLost, FaultKind::Panic] {
            let fault = Fault::FailOnUnit {
                unit: 0,
                kind,
                sticky: true,
            };
            let failing = faulty(fault);
            let s = scheduler(vec![failing.clone(), cpu()], Policy::WorkStealing)
                .with_band_costs(&[EQUAL, EQUAL])
                .expect("costs");
            let c = s.dia_spgemm(a, b).expect("rerun");
            assert_eq!(c, whole, "{kind:?}");
            let report = s.last_report().expect("report");
            assert!(report.devices[0].failure.is_some(), "{kind:?}");
            assert_eq!(report.devices[1].chunks, 2, "{kind:?}");
            assert_eq!(failing.units_failed(), 1, "{kind:?}");
        }
        // Out of memory on every call: the part is halved (up to the limit of halvings), and
        // every piece goes to the other backend, without the failing one dropping out.
        let failing = faulty(Fault::FailOnUnit {
            unit: 0,
            kind: FaultKind::OutOfMemory,
            sticky: true,
        });
        let s = scheduler(vec![failing.clone(), cpu()], Policy::WorkStealing)
            .with_band_costs(&[EQUAL, EQUAL])
            .expect("costs");
        assert_eq!(s.dia_spgemm(a, b).expect("pieces rerun"), whole);
        let report = s.last_report().expect("report");
        assert!(report.devices[0].failure.is_none());
        assert_eq!(report.devices[0].chunks, 0);
        assert!(report.devices[1].chunks > 2, "{report:?}");
        assert!(failing.units_failed() > 1);
        // Both failing: the error comes back.
        let lost = || {
            faulty(Fault::FailOnUnit {
                unit: 0,
                kind: FaultKind::DeviceLost,
                sticky: true,
            })
        };
        let s = scheduler(vec![lost(), lost()], Policy::WorkStealing)
            .with_band_costs(&[EQUAL, EQUAL])
            .expect("costs");
        assert!(matches!(s.dia_spgemm(a, b), Err(e) if e.is_retryable()));
    }

    #[test]
    fn a_part_too_large_for_its_backend_is_halved_until_it_fits() {
        let (a, b) = &cases()[1];
        let whole = cpu().dia_spgemm(a, b).expect("CPU alone");
        // Memory for 300 rows: the first backend's 1000 rows are cut to pieces of 250.
        let per_row = a.offsets().len() + b.offsets().len() + whole.offsets().len();
        let bytes = (300 * per_row * std::mem::size_of::<f64>()) as u64;
        let small = faulty(Fault::MemoryLimit { bytes });
        let s = scheduler(vec![small.clone(), cpu()], Policy::WorkStealing)
            .with_band_costs(&[EQUAL, EQUAL])
            .expect("costs");
        let c = s.dia_spgemm(a, b).expect("halved");
        assert_eq!(c, whole);
        let report = s.last_report().expect("report");
        assert!(report.devices.iter().all(|d| d.failure.is_none()));
        // It computed pieces of its part itself.
        assert!(report.devices[0].chunks >= 1, "{report:?}");
        assert!(small.units_failed() >= 2);
        let total: u64 = report.devices.iter().map(|d| d.products).sum();
        assert!(total > 0);
    }

    #[test]
    fn a_product_run_whole_moves_to_the_next_backend_on_a_failure() {
        let (a, b) = &cases()[0];
        let whole = cpu().dia_spgemm(a, b).expect("CPU alone");
        let cheap = BandCost {
            secs_per_product: 1e-12,
            ..EQUAL
        };
        for kind in [FaultKind::DeviceLost, FaultKind::Panic] {
            let failing = faulty(Fault::FailOnUnit {
                unit: 0,
                kind,
                sticky: true,
            });
            // Not cut (below min_chunk_products): the cheaper, failing backend runs it whole.
            let s = Scheduler::from_shared(vec![failing.clone(), cpu()])
                .with_band_costs(&[cheap, EQUAL])
                .expect("costs");
            assert_eq!(s.dia_spgemm(a, b).expect("rerun"), whole, "{kind:?}");
            let report = s.last_report().expect("report");
            assert!(report.devices[0].failure.is_some(), "{kind:?}");
            assert_eq!(report.devices[1].chunks, 1, "{kind:?}");
            assert_eq!(failing.units_failed(), 1, "{kind:?}");
        }
    }

    #[test]
    fn empty_and_edge_products() {
        let s = scheduler(vec![cpu(), cpu()], Policy::WorkStealing)
            .with_band_costs(&[EQUAL, EQUAL])
            .expect("costs");
        let none = Dia::<f64>::try_new(20, 20, vec![], vec![]).expect("empty");
        let c = s
            .dia_spgemm(&none, &band(20, 20, &[0], 1))
            .expect("empty product");
        assert_eq!((c.shape(), c.ndiags()), ((20, 20), 0));
        // Diagonals that never meet: no product.
        let (x, y) = (band(10, 10, &[9], 1), band(10, 10, &[5], 2));
        assert_eq!(s.dia_spgemm(&x, &y).expect("no product").ndiags(), 0);
        // One row, and shapes that do not chain.
        let (x, y) = (band(1, 30, &[0, 29], 1), band(30, 30, &[-29, 0, 1], 2));
        assert_eq!(
            s.dia_spgemm(&x, &y).expect("one row"),
            cpu().dia_spgemm(&x, &y).expect("cpu")
        );
        assert!(matches!(
            s.dia_spgemm(&band(5, 6, &[0], 1), &band(5, 5, &[0], 1)),
            Err(Error::ShapeMismatch { .. })
        ));
    }
}

mod band_learning {
    use super::*;
    use hetsparse_sched::BandCost;

    #[test]
    fn a_split_slower_than_predicted_is_not_made_again() {
        let offsets: Vec<i64> = (-4..=4).collect();
        let a = generate::band_dia::<f64>(4000, 4000, &offsets, 1).expect("band");
        // Costs that predict nanoseconds: the first product is split (two equal backends
        // finish in half the time), and takes far longer than predicted.
        let tiny = BandCost {
            fixed_secs: 0.0,
            secs_per_product: 1e-15,
            secs_per_output: 1e-15,
        };
        let s = scheduler(vec![cpu(), cpu()], Policy::WorkStealing)
            .with_band_costs(&[tiny, tiny])
            .expect("costs");
        let chunks = |s: &Scheduler<f64>| -> usize {
            s.last_report()
                .expect("report")
                .devices
                .iter()
                .map(|d| d.chunks)
                .sum()
        };
        let expected = cpu().dia_spgemm(&a, &a).expect("CPU alone");
        assert_eq!(s.dia_spgemm(&a, &a).expect("first"), expected);
        assert_eq!(chunks(&s), 2, "the first product is split");
        assert_eq!(s.dia_spgemm(&a, &a).expect("second"), expected);
        assert_eq!(
            chunks(&s),
            1,
            "the split took longer than predicted: one backend alone"
        );
        let alone_on = |s: &Scheduler<f64>| -> Vec<usize> {
            s.last_report()
                .expect("report")
                .devices
                .iter()
                .map(|d| d.chunks)
                .collect()
        };
        let first = alone_on(&s);
        // The other backend, never run alone and as fast by the model, runs the next one.
        assert_eq!(s.dia_spgemm(&a, &a).expect("third"), expected);
        let second = alone_on(&s);
        assert_eq!(chunks(&s), 1);
        assert_ne!(first, second, "each backend ran one product alone");
        // Forced sharing splits whatever was learned.
        let forced = scheduler(vec![cpu(), cpu()], Policy::WorkStealing)
            .share_always()
            .with_band_costs(&[tiny, tiny])
            .expect("costs");
        for _ in 0..2 {
            assert_eq!(forced.dia_spgemm(&a, &a).expect("forced"), expected);
            assert_eq!(chunks(&forced), 2);
        }
    }
}

/// A product with a semiring and a mask is shared only among the backends that claim them
/// (here the CPU, not the serial reference, which runs plain products only), however the
/// policy would share it; with no such backend it is refused.
#[test]
fn semiring_and_mask_products_go_only_to_backends_that_claim_them() {
    use hetsparse_core::{Mask, SemiringKind, SpgemmOptions};
    let (a, b) = operands(MatrixClass::PowerLaw);
    let mask = Mask::valued(&reference(&a, &b)).complemented();
    let options = SpgemmOptions::new()
        .with_semiring(SemiringKind::MinPlus)
        .with_mask(Mask::structural(&a).complemented());
    let want = hetsparse_core::reference::spgemm_with_options(&a, &b, &options).unwrap();
    let reference_backend: Shared = Arc::new(hetsparse_core::ReferenceBackend);
    for policy in [
        Policy::WorkStealing,
        Policy::RowSplitAssumed(vec![1.0, 1.0]),
    ] {
        let s = Scheduler::from_shared(vec![reference_backend.clone(), cpu()])
            .policy(policy.clone())
            .min_chunk_products(1)
            .share_always();
        let c = s
            .spgemm_with((&a).into(), (&b).into(), &options, &RunControl::new())
            .unwrap_or_else(|e| panic!("{policy:?}: {e}"));
        assert_eq!(c.row_offsets(), want.row_offsets(), "{policy:?}");
        assert_eq!(c.col_indices(), want.col_indices(), "{policy:?}");
        assert_eq!(c.values(), want.values(), "{policy:?}");
        let masked = options.clone().with_mask(mask.clone());
        let c = s
            .spgemm_with((&a).into(), (&b).into(), &masked, &RunControl::new())
            .unwrap();
        let want = hetsparse_core::reference::spgemm_with_options(&a, &b, &masked).unwrap();
        assert_eq!(c.col_indices(), want.col_indices(), "{policy:?}");
    }
    let alone = Scheduler::from_shared(vec![reference_backend]);
    let refused = alone.spgemm_with((&a).into(), (&b).into(), &options, &RunControl::new());
    assert!(
        matches!(refused, Err(Error::Unsupported { .. })),
        "{refused:?}"
    );
}
