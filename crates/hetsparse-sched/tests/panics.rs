//! A device's panic never reaches the caller through the scheduler: every path that calls a
//! backend (a product run whole on one device, SpMV and SpMM on one device or by row blocks,
//! the speed measurement of the measured policies, the band calibration of DIA × DIA, a shared
//! run) treats it as that device's failure and reruns its work on the healthy one, giving the
//! single-device result. With no healthy device left the answer is an error, never a panic.
//! A panic of the caller's own progress callback goes back to the caller as the caller's.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use hetsparse_core::fault::{Fault, FaultKind, FaultyBackend};
use hetsparse_core::generate::{self, MatrixClass};
use hetsparse_core::{
    Backend, Csr, Dense, Error, Layout, PlusTimes, RunControl, SpgemmAlgorithm, SpgemmOptions,
    SpmmOptions, SpmvOptions,
};
use hetsparse_cpu::CpuBackend;
use hetsparse_sched::{Policy, Scheduler};

type Shared = Arc<dyn Backend<f64>>;

fn cpu() -> Shared {
    Arc::new(CpuBackend::with_threads(1).expect("CPU backend"))
}

/// A CPU backend that panics on its `unit`-th unit of work (and every later one if `sticky`).
fn panicking(unit: u64, sticky: bool) -> Shared {
    Arc::new(FaultyBackend::new(
        cpu(),
        Fault::FailOnUnit {
            unit,
            kind: FaultKind::Panic,
            sticky,
        },
    ))
}

fn policies() -> Vec<Policy> {
    vec![
        Policy::WorkStealing,
        Policy::RowSplitAssumed(vec![1.0, 1.0]),
        Policy::RowSplitMeasured,
        Policy::DensestFirst,
    ]
}

/// Runs `call`, failing the test with `what` where it panicked instead of returning.
fn no_panic<R>(what: &str, call: impl FnOnce() -> R) -> R {
    catch_unwind(AssertUnwindSafe(call))
        .unwrap_or_else(|_| panic!("{what}: a device's panic reached the caller"))
}

fn assert_same_csr(what: &str, c: &Csr<f64>, expected: &Csr<f64>) {
    assert_eq!(c.shape(), expected.shape(), "{what}");
    assert_eq!(c.row_offsets(), expected.row_offsets(), "{what}");
    assert_eq!(c.col_indices(), expected.col_indices(), "{what}");
    for (x, y) in c.values().iter().zip(expected.values()) {
        assert!(
            (x - y).abs() <= 1e-12 * (1.0 + y.abs()),
            "{what}: {x} vs {y}"
        );
    }
}

fn assert_same_values(what: &str, got: &[f64], expected: &[f64]) {
    assert_eq!(got.len(), expected.len(), "{what}");
    for (x, y) in got.iter().zip(expected) {
        assert!(
            (x - y).abs() <= 1e-12 * (1.0 + y.abs()),
            "{what}: {x} vs {y}"
        );
    }
}

/// Every operation, on every policy, with the panicking device first or second, panicking on
/// its first or second unit, once or from then on: each result is the CPU backend's alone.
#[test]
fn a_panicking_device_beside_a_healthy_one_never_reaches_the_caller() {
    let (small_a, small_b) = generate::product_operands::<f64>(MatrixClass::Road, 40, 3);
    let (a, b) = generate::product_operands::<f64>(MatrixClass::PowerLaw, 2000, 5);
    let alone = CpuBackend::with_threads(1).unwrap();
    let expected_small = alone
        .spgemm(&small_a, &small_b, SpgemmAlgorithm::Auto)
        .unwrap();
    let expected = alone.spgemm(&a, &b, SpgemmAlgorithm::Auto).unwrap();
    let x: Vec<f64> = (0..a.ncols()).map(|i| 1.0 + (i % 7) as f64).collect();
    let expected_x = alone
        .spmv_with(
            (&a).into(),
            (&x).into(),
            &SpmvOptions::new(),
            &RunControl::new(),
        )
        .unwrap();
    let dense = Dense::from_fn(a.ncols(), 3, Layout::RowMajor, |i, j| (i + 2 * j) as f64).unwrap();
    let expected_dense = alone
        .spmm_with(
            (&a).into(),
            (&dense).into(),
            &SpmmOptions::new(),
            &RunControl::new(),
        )
        .unwrap();
    let band_a = generate::band_dia::<f64>(3000, 3000, &[-2, -1, 0, 1, 2], 1).unwrap();
    let band_b = generate::band_dia::<f64>(3000, 3000, &[-1, 0, 1], 2).unwrap();
    let expected_band = alone.dia_spgemm(&band_a, &band_b).unwrap();

    let mut checks = 0;
    for policy in policies() {
        for unit in [0, 1] {
            for sticky in [false, true] {
                for bad_first in [true, false] {
                    for share_always in [false, true] {
                        let what = format!(
                            "{policy:?}, panic on unit {unit} (sticky {sticky}), panicking \
                             device first {bad_first}, share always {share_always}"
                        );
                        let backends = if bad_first {
                            vec![panicking(unit, sticky), cpu()]
                        } else {
                            vec![cpu(), panicking(unit, sticky)]
                        };
                        let mut s = Scheduler::from_shared(backends)
                            .policy(policy.clone())
                            .min_chunk_products(500);
                        if share_always {
                            s = s.share_always();
                        }
                        // Small enough to run whole on one device.
                        let c = no_panic(&what, || {
                            s.spgemm(&small_a, &small_b, SpgemmAlgorithm::Auto)
                        })
                        .unwrap_or_else(|e| panic!("{what}: small SpGEMM: {e}"));
                        assert_same_csr(&what, &c, &expected_small);
                        let c = no_panic(&what, || s.spgemm(&a, &b, SpgemmAlgorithm::Auto))
                            .unwrap_or_else(|e| panic!("{what}: SpGEMM: {e}"));
                        assert_same_csr(&what, &c, &expected);
                        let y = no_panic(&what, || {
                            s.spmv_with(
                                (&a).into(),
                                (&x).into(),
                                &SpmvOptions::new(),
                                &RunControl::new(),
                            )
                        })
                        .unwrap_or_else(|e| panic!("{what}: SpMV: {e}"));
                        assert_same_values(&what, &y, &expected_x);
                        let d = no_panic(&what, || {
                            s.spmm_with(
                                (&a).into(),
                                (&dense).into(),
                                &SpmmOptions::new(),
                                &RunControl::new(),
                            )
                        })
                        .unwrap_or_else(|e| panic!("{what}: SpMM: {e}"));
                        assert_same_values(&what, d.data(), expected_dense.data());
                        let c = no_panic(&what, || s.dia_spgemm(&band_a, &band_b))
                            .unwrap_or_else(|e| panic!("{what}: DIA×DIA: {e}"));
                        assert_eq!(c.offsets(), expected_band.offsets(), "{what}");
                        assert_same_values(&what, c.data(), expected_band.data());
                        checks += 1;
                    }
                }
            }
        }
    }
    assert_eq!(checks, 4 * 2 * 2 * 2 * 2);
}

/// The measured policies' speed measurement and the band calibration, asked for directly, on
/// a device that panics at once: no panic, the healthy device measured.
#[test]
fn calibrations_survive_a_panicking_device() {
    let (a, b) = generate::product_operands::<f64>(MatrixClass::Uniform, 2000, 9);
    let s = Scheduler::from_shared(vec![panicking(0, true), cpu()]);
    let speeds = no_panic("calibrate", || s.calibrate(&a, &b)).unwrap();
    assert!(speeds[0].is_none() && speeds[1].is_some(), "{speeds:?}");
    let costs = no_panic("calibrate_band", || s.calibrate_band(2000)).unwrap();
    assert!(costs[0].is_none() && costs[1].is_some(), "{costs:?}");
}

/// A scheduler whose only devices panic returns an error on every operation.
#[test]
fn only_panicking_devices_give_an_error_not_a_panic() {
    let (a, b) = generate::product_operands::<f64>(MatrixClass::Stencil3d, 1500, 2);
    let x = vec![1.0; a.ncols()];
    let dense = Dense::from_fn(a.ncols(), 2, Layout::ColMajor, |i, _| i as f64).unwrap();
    let band = generate::band_dia::<f64>(500, 500, &[-1, 0, 1], 4).unwrap();
    for devices in [1, 2] {
        for policy in policies() {
            let backends: Vec<Shared> = (0..devices).map(|_| panicking(0, true)).collect();
            let policy = match policy {
                Policy::RowSplitAssumed(_) => Policy::RowSplitAssumed(vec![1.0; devices]),
                p => p,
            };
            let what = format!("{devices} panicking devices, {policy:?}");
            let s = Scheduler::from_shared(backends)
                .policy(policy)
                .min_chunk_products(100);
            let r = no_panic(&what, || s.spgemm(&a, &b, SpgemmAlgorithm::Auto));
            assert!(r.is_err(), "{what}: SpGEMM gave {r:?}");
            let r = no_panic(&what, || {
                s.spmv_with(
                    (&a).into(),
                    (&x).into(),
                    &SpmvOptions::new(),
                    &RunControl::new(),
                )
            });
            assert!(r.is_err(), "{what}: SpMV gave {r:?}");
            let r = no_panic(&what, || {
                s.spmm_with(
                    (&a).into(),
                    (&dense).into(),
                    &SpmmOptions::new(),
                    &RunControl::new(),
                )
            });
            assert!(r.is_err(), "{what}: SpMM gave {r:?}");
            let r = no_panic(&what, || s.dia_spgemm(&band, &band));
            assert!(r.is_err(), "{what}: DIA×DIA gave {r:?}");
        }
    }
}

/// A panic in the caller's progress callback comes back to the caller as that panic, with its
/// own message, on every path: not as a device's internal error, and no device is blamed.
#[test]
fn a_panicking_progress_callback_is_the_callers_panic() {
    let (a, b) = generate::product_operands::<f64>(MatrixClass::Uniform, 3000, 11);
    let x = vec![1.0; a.ncols()];
    for policy in policies() {
        for share_always in [false, true] {
            let what = format!("{policy:?}, share always {share_always}");
            let mut s = Scheduler::from_shared(vec![cpu(), cpu()])
                .policy(policy.clone())
                .min_chunk_products(100);
            if share_always {
                s = s.share_always();
            }
            let run = RunControl::with_progress(|p| {
                if p.done > 0 {
                    panic!("the caller's own callback bug");
                }
            });
            let caught = catch_unwind(AssertUnwindSafe(|| {
                s.spgemm_with((&a).into(), (&b).into(), &SpgemmOptions::new(), &run)
            }));
            let message = match caught {
                Ok(r) => panic!("{what}: SpGEMM returned {r:?} instead of the caller's panic"),
                Err(payload) => payload
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_default(),
            };
            assert_eq!(message, "the caller's own callback bug", "{what}");
            if let Some(report) = s.last_report() {
                assert!(
                    report.devices.iter().all(|d| d.failure.is_none()),
                    "{what}: a device was blamed: {report:?}"
                );
            }
            if share_always {
                // Shared by row blocks, SpMV's progress is the scheduler's, told from its
                // workers.
                let run = RunControl::with_progress(|p| {
                    if p.done > 0 {
                        panic!("SpMV callback bug");
                    }
                });
                let caught = catch_unwind(AssertUnwindSafe(|| {
                    s.spmv_with((&a).into(), (&x).into(), &SpmvOptions::new(), &run)
                }));
                let message = caught
                    .err()
                    .and_then(|p| p.downcast_ref::<&str>().map(|s| s.to_string()));
                assert_eq!(message.as_deref(), Some("SpMV callback bug"), "{what}");
            }
            // Usable right after, with the devices still in it.
            let c = s.spgemm(&a, &b, SpgemmAlgorithm::Auto).unwrap();
            let expected = hetsparse_core::reference::spgemm::<f64, PlusTimes>(&a, &b).unwrap();
            assert_same_csr(&what, &c, &expected);
        }
    }
    // An error, not a panic, stays an error.
    let s = Scheduler::<f64>::from_shared(vec![]);
    assert!(matches!(
        s.spgemm(&a, &b, SpgemmAlgorithm::Auto),
        Err(Error::NoDevice { .. })
    ));
}
