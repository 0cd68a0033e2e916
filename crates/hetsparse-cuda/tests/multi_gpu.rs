//! The scheduler over every GPU of the host (issue 17), one `CudaBackend` per device the driver
//! reports:
//! - the conformance suite over all GPUs and the CPU, every product cut into chunks and shared;
//! - a product shared by all GPUs and the CPU, each of which must compute part of it;
//! - an out-of-core product spread over all GPUs, each with a budget far below the product;
//! - one GPU's backend failing mid-run (an injected device loss after its first chunk), its
//!   chunks finished by the other GPUs, the result the same as one GPU's alone.
//!
//! Run with `cargo test -p hetsparse-cuda --test multi_gpu -- --nocapture`.
//!
//! Without a GPU every test skips with a line saying so, unless `HETSPARSE_REQUIRE_DEVICE=1`
//! (then they fail). With one GPU they run their one-GPU variants (the failing backend then
//! shares its GPU with a second backend) and print that multi-GPU was NOT exercised;
//! `HETSPARSE_REQUIRE_GPUS=N` makes fewer than N GPUs a failure, for runs on a multi-GPU host
//! that must not pass by skipping. No test can hang: a watchdog ends the process after
//! `HETSPARSE_TEST_TIMEOUT_S` seconds (default 600) with a message and exit status 124.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use hetsparse_core::backend::memory::csr_bytes;
use hetsparse_core::fault::{Fault, FaultKind, FaultyBackend};
use hetsparse_core::generate::{self, MatrixClass};
use hetsparse_core::{Backend, Csr, Error, Scalar, SpgemmAlgorithm};
use hetsparse_cpu::CpuBackend;
use hetsparse_cuda::CudaBackend;
use hetsparse_sched::{Policy, RunReport, Scheduler};

type Shared = Arc<dyn Backend<f64>>;

/// Default of `HETSPARSE_TEST_TIMEOUT_S`: several times what the whole file should take on an
/// H100 pair (a minute or two), well below what a remote run can afford to lose.
const DEFAULT_TIMEOUT_S: u64 = 600;

fn env_flag(name: &str) -> bool {
    std::env::var(name).as_deref() == Ok("1")
}

/// GPUs the run must have (`HETSPARSE_REQUIRE_GPUS`; 1 with `HETSPARSE_REQUIRE_DEVICE=1`).
fn required_gpus() -> u32 {
    let asked = std::env::var("HETSPARSE_REQUIRE_GPUS")
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
        .unwrap_or(0);
    asked.max(u32::from(env_flag("HETSPARSE_REQUIRE_DEVICE")))
}

/// Starts, once per process, the thread that ends a run gone on too long: a lost GPU or a
/// driver wait that never returns would otherwise hold the remote machine until its lease
/// ends, with nothing printed.
fn watchdog() {
    static STARTED: OnceLock<()> = OnceLock::new();
    STARTED.get_or_init(|| {
        let limit = std::env::var("HETSPARSE_TEST_TIMEOUT_S")
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(DEFAULT_TIMEOUT_S);
        let spawned = std::thread::Builder::new()
            .name("multi_gpu watchdog".into())
            .spawn(move || {
                std::thread::sleep(Duration::from_secs(limit));
                eprintln!(
                    "multi_gpu: TIMEOUT: the tests ran over {limit} s (HETSPARSE_TEST_TIMEOUT_S); \
                     ending the process"
                );
                std::process::exit(124);
            });
        if let Err(e) = spawned {
            eprintln!("multi_gpu: could not start the watchdog ({e}); runs are not bounded");
        }
    });
}

/// The CUDA backend of every GPU the driver reports, opened once and shared by the tests
/// (a backend is cheap to clone and usable from several threads). `Err` holds why there is
/// none; a device the driver lists but that fails to open is an error, not a skip.
fn gpus() -> &'static Result<Vec<CudaBackend>, Error> {
    static GPUS: OnceLock<Result<Vec<CudaBackend>, Error>> = OnceLock::new();
    GPUS.get_or_init(|| {
        watchdog();
        let count = hetsparse_cuda::device_count()?;
        if count == 0 {
            return Err(Error::NoDevice {
                backend: hetsparse_core::BackendKind::Cuda,
                reason: "the driver reports no GPU".into(),
            });
        }
        let mut opened = Vec::with_capacity(count as usize);
        for ordinal in 0..count {
            let gpu = CudaBackend::with_device(ordinal).map_err(|e| {
                Error::InvalidArgument(format!(
                    "the driver reports {count} GPUs but GPU {ordinal} did not open: {e}"
                ))
            })?;
            opened.push(gpu);
        }
        let names: Vec<String> = opened
            .iter()
            .enumerate()
            .map(|(d, g)| {
                let info = hetsparse_core::Device::info(g);
                format!(
                    "cuda:{d} {} ({:.1} GiB)",
                    info.name,
                    info.memory_bytes as f64 / f64::from(1u32 << 30)
                )
            })
            .collect();
        eprintln!("multi_gpu: {count} GPU(s): {}", names.join(", "));
        Ok(opened)
    })
}

/// Every GPU the driver reports, or why the tests cannot run as asked, as the error the
/// conformance suite's `obtain` expects: [`Error::NoDevice`] skips (fails with
/// `HETSPARSE_REQUIRE_DEVICE=1`), anything else fails. With one GPU, says that multi-GPU is not
/// exercised.
fn usable_gpus(test: &str) -> Result<Vec<CudaBackend>, Error> {
    let found = match gpus() {
        Ok(found) => found.clone(),
        Err(Error::NoDevice { backend, reason }) => {
            let reason = reason.clone();
            if required_gpus() > 0 {
                return Err(Error::InvalidArgument(format!(
                    "{test}: {} GPU(s) required (HETSPARSE_REQUIRE_DEVICE / HETSPARSE_REQUIRE_GPUS) \
                     but there is none: {backend}: {reason}",
                    required_gpus()
                )));
            }
            return Err(Error::NoDevice {
                backend: *backend,
                reason: format!("{reason} (these tests are for 2 GPUs or more)"),
            });
        }
        // The error is kept for every test; each gets its text.
        Err(e) => return Err(Error::InvalidArgument(format!("{test}: {e}"))),
    };
    let n = found.len() as u32;
    if n < required_gpus() {
        return Err(Error::InvalidArgument(format!(
            "{test}: HETSPARSE_REQUIRE_GPUS={} but the driver reports {n} GPU(s)",
            required_gpus()
        )));
    }
    if n == 1 {
        eprintln!("{test}: NOTE: only 1 GPU; ran the 1-GPU variant, multi-GPU was NOT exercised");
    }
    Ok(found)
}

/// The GPUs for a test of this file, or `None` (skipped, with a line saying why).
fn gpus_or_skip(test: &str) -> Option<Vec<CudaBackend>> {
    match usable_gpus(test) {
        Ok(found) => Some(found),
        Err(e @ Error::NoDevice { .. }) => {
            if env_flag("HETSPARSE_REQUIRE_DEVICE") {
                panic!("{test}: HETSPARSE_REQUIRE_DEVICE=1 but {e}");
            }
            eprintln!("{test}: SKIPPED, {e}");
            None
        }
        Err(e) => panic!("{e}"),
    }
}

/// Every GPU and the CPU, work stealing, every product from one intermediate product up cut
/// into chunks and shared, so that each device takes chunks of the suite's products.
fn every_gpu_and_cpu<T>() -> Result<Scheduler<T>, Error>
where
    T: Scalar,
    CudaBackend: Backend<T>,
    CpuBackend: Backend<T>,
{
    let mut backends: Vec<Box<dyn Backend<T>>> = Vec::new();
    for gpu in usable_gpus("conformance suite over every GPU and the CPU")? {
        backends.push(Box::new(gpu));
    }
    backends.push(Box::new(CpuBackend::with_threads(2)?));
    Ok(Scheduler::new(backends)
        .policy(Policy::WorkStealing)
        .min_chunk_products(1)
        .share_always())
}

hetsparse_core::conformance_suite! {
    backend: every_gpu_and_cpu(),
    scalars: [f32, f64, c32, c64, f16, bf16],
}

/// Same structure as `expected`, values to a relative 1e-9 (chunks of rows and columns sum
/// each entry's products in the same order, but the GPU's accumulators may not).
fn assert_same(what: &str, c: &Csr<f64>, expected: &Csr<f64>) {
    assert_eq!(c.shape(), expected.shape(), "{what}: shape");
    assert_eq!(
        c.row_offsets(),
        expected.row_offsets(),
        "{what}: row offsets"
    );
    assert_eq!(c.col_indices(), expected.col_indices(), "{what}: columns");
    for (i, (x, y)) in c.values().iter().zip(expected.values()).enumerate() {
        assert!(
            (x - y).abs() <= 1e-9 * (1.0 + y.abs()),
            "{what}: value {i}: {x} against {y}"
        );
    }
}

/// One line per device of a run, by position in the scheduler (GPUs by ordinal, then the
/// CPU): chunks, products, share, busy time, failure.
fn describe(report: &RunReport) -> String {
    let shares = report.shares();
    report
        .devices
        .iter()
        .zip(shares)
        .enumerate()
        .map(|(k, (d, share))| {
            format!(
                "  [{k}] {}: {} chunks, {} products ({:.0}%), busy {:.0} ms{}",
                d.name,
                d.chunks,
                d.products,
                share * 100.0,
                d.busy.as_secs_f64() * 1e3,
                d.failure
                    .as_ref()
                    .map(|f| format!(", FAILED: {f}"))
                    .unwrap_or_default()
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Runs `attempt` until it says the run went the way the test needs (which device takes which
/// chunk depends on thread timing), at most `tries` times.
fn until(tries: usize, mut attempt: impl FnMut(usize) -> bool) -> bool {
    (0..tries).any(&mut attempt)
}

/// A product shared by every GPU and the CPU: each device computes part of it, and C is the
/// CPU backend's.
#[test]
fn every_gpu_and_the_cpu_compute_part_of_a_shared_product() {
    const TEST: &str = "every_gpu_and_the_cpu_compute_part_of_a_shared_product";
    let Some(found) = gpus_or_skip(TEST) else {
        return;
    };
    let started = Instant::now();
    let cpu = CpuBackend::new().expect("CPU backend");
    let (a, b) = generate::product_operands::<f64>(MatrixClass::PowerLaw, 1 << 15, 5);
    let expected = cpu
        .spgemm(&a, &b, SpgemmAlgorithm::Auto)
        .expect("CPU product");
    let mut backends: Vec<Shared> = found
        .iter()
        .map(|g| Arc::new(g.clone()) as Shared)
        .collect();
    backends.push(Arc::new(cpu));
    let every_device = until(5, |attempt| {
        let s = Scheduler::from_shared(backends.clone())
            .policy(Policy::WorkStealing)
            .min_chunk_products(1 << 12)
            .share_always();
        let c = s
            .spgemm(&a, &b, SpgemmAlgorithm::Auto)
            .expect("shared product");
        assert_same(TEST, &c, &expected);
        let report = s.last_report().expect("a report");
        eprintln!(
            "{TEST}: attempt {attempt}, {} chunks planned, {:.0} ms:\n{}",
            report.chunks_planned,
            report.wall.as_secs_f64() * 1e3,
            describe(&report)
        );
        assert!(
            report.devices.iter().all(|d| d.failure.is_none()),
            "{report:?}"
        );
        report.devices.iter().all(|d| d.chunks > 0)
    });
    assert!(
        every_device,
        "{TEST}: in 5 runs some device never took a chunk"
    );
    eprintln!(
        "{TEST}: passed on {} GPU(s) + CPU in {:.1} s",
        found.len(),
        started.elapsed().as_secs_f64()
    );
}

/// Out of core over every GPU: each GPU's budget is half of B, so B goes in column panels,
/// A in row panels, and C (at least 4 budgets) comes back chunk by chunk from all GPUs.
#[test]
fn an_out_of_core_product_is_spread_over_every_gpu() {
    const TEST: &str = "an_out_of_core_product_is_spread_over_every_gpu";
    let Some(found) = gpus_or_skip(TEST) else {
        return;
    };
    let started = Instant::now();
    let (a, b) = generate::product_operands::<f64>(MatrixClass::Uniform, 200_000, 11);
    let budget = csr_bytes(b.nrows(), b.nnz(), 8) / 2;
    let expected = CpuBackend::new()
        .expect("CPU backend")
        .spgemm(&a, &b, SpgemmAlgorithm::Auto)
        .expect("CPU product");
    let c_bytes = csr_bytes(expected.nrows(), expected.nnz(), 8);
    assert!(
        c_bytes >= 4 * budget,
        "{TEST}: C is {c_bytes} bytes for a budget of {budget}: not out of core"
    );
    // Backends of their own: a budget is set on the device's backend object and would limit
    // the other tests' backends too.
    let limited: Vec<Shared> = (0..found.len() as u32)
        .map(|ordinal| {
            let gpu = CudaBackend::with_device(ordinal)
                .unwrap_or_else(|e| panic!("{TEST}: GPU {ordinal}: {e}"));
            Arc::new(gpu.with_memory_budget(budget)) as Shared
        })
        .collect();
    let every_gpu = until(3, |attempt| {
        let s = Scheduler::from_shared(limited.clone())
            .policy(Policy::WorkStealing)
            .share_always();
        let c = s
            .spgemm(&a, &b, SpgemmAlgorithm::Auto)
            .expect("out-of-core product");
        assert_same(TEST, &c, &expected);
        let report = s.last_report().expect("a report");
        eprintln!(
            "{TEST}: attempt {attempt}: budget {budget} B per GPU, C {c_bytes} B ({:.1} budgets), \
             bitwise equal to the CPU's: {}, {} chunks planned, {:.0} ms:\n{}",
            c_bytes as f64 / budget as f64,
            c == expected,
            report.chunks_planned,
            report.wall.as_secs_f64() * 1e3,
            describe(&report)
        );
        assert!(report.chunks_planned > found.len(), "{report:?}");
        assert!(
            report.devices.iter().all(|d| d.failure.is_none()),
            "{report:?}"
        );
        report.devices.iter().all(|d| d.chunks > 0)
    });
    assert!(every_gpu, "{TEST}: in 3 runs some GPU never took a chunk");
    eprintln!(
        "{TEST}: passed on {} GPU(s) in {:.1} s",
        found.len(),
        started.elapsed().as_secs_f64()
    );
}

/// Out of core beside a GPU that holds B: the first GPU's backend has a budget of half of B,
/// so B goes in column panels for it; the last GPU's backend (a second one on the same GPU
/// where there is one) has none, holds A and B whole, and computes a row panel's chunks in
/// every panel of B as one chunk of all columns (its list of a row split), or whatever
/// panels are left of a row panel (work stealing), into C's assembly and into C in place.
#[test]
fn an_out_of_core_gpu_beside_one_that_computes_whole_rows() {
    const TEST: &str = "an_out_of_core_gpu_beside_one_that_computes_whole_rows";
    let Some(found) = gpus_or_skip(TEST) else {
        return;
    };
    let (a, b) = generate::product_operands::<f64>(MatrixClass::Uniform, 200_000, 13);
    let budget = csr_bytes(b.nrows(), b.nnz(), 8) / 2;
    let expected = CpuBackend::new()
        .expect("CPU backend")
        .spgemm(&a, &b, SpgemmAlgorithm::Auto)
        .expect("CPU product");
    let limited: Shared = Arc::new(
        CudaBackend::with_device(0)
            .unwrap_or_else(|e| panic!("{TEST}: GPU 0: {e}"))
            .with_memory_budget(budget),
    );
    let last = found.len() as u32 - 1;
    for (policy, in_place) in [
        (Policy::RowSplitAssumed(vec![1.0, 1.0]), false),
        (Policy::RowSplitAssumed(vec![1.0, 1.0]), true),
        (Policy::WorkStealing, false),
        (Policy::WorkStealing, true),
    ] {
        let whole = Arc::new(FaultyBackend::new(
            Arc::new(CudaBackend::with_device(last).unwrap_or_else(|e| panic!("{TEST}: {e}"))),
            Fault::None,
        ));
        let mut s = Scheduler::from_shared(vec![limited.clone(), whole.clone() as Shared])
            .policy(policy.clone())
            .share_always()
            .with_speeds(&[1.0, 1.0])
            .expect("two speeds");
        if in_place {
            s = s.host_memory(0);
        }
        let c = s
            .spgemm(&a, &b, SpgemmAlgorithm::Auto)
            .unwrap_or_else(|e| panic!("{TEST}: {policy:?}, C in place {in_place}: {e}"));
        assert_same(TEST, &c, &expected);
        let report = s.last_report().expect("a report");
        let asked = whole.chunks_asked();
        eprintln!(
            "{TEST}: {policy:?}, C in place {in_place}: {} chunks planned, the GPU holding B \
             asked for {} chunks ({} of all columns):\n{}",
            report.chunks_planned,
            asked.len(),
            asked.iter().filter(|c| c.cols == (0..b.ncols())).count(),
            describe(&report)
        );
        assert!(report.devices.iter().all(|d| d.products > 0), "{report:?}");
        if policy != Policy::WorkStealing {
            assert!(
                asked.iter().all(|c| c.cols == (0..b.ncols())),
                "{TEST}: {policy:?}: the GPU holding B was asked for {asked:?}"
            );
        }
    }
}

/// The last GPU's backend loses its device on its second chunk (the first succeeds: the
/// failure comes mid-run, with chunks of its own done and others held); the other GPUs finish
/// its work and C is GPU 0's product alone. With one GPU, a second backend on the same GPU
/// plays the others.
#[test]
fn a_gpu_failing_mid_run_has_its_chunks_finished_by_the_others() {
    const TEST: &str = "a_gpu_failing_mid_run_has_its_chunks_finished_by_the_others";
    let Some(found) = gpus_or_skip(TEST) else {
        return;
    };
    let started = Instant::now();
    let (a, b) = generate::product_operands::<f64>(MatrixClass::Uniform, 200_000, 5);
    let single = found[0]
        .spgemm(&a, &b, SpgemmAlgorithm::Auto)
        .expect("GPU 0 alone");
    let mut healthy: Vec<Shared> = found
        .iter()
        .map(|g| Arc::new(g.clone()) as Shared)
        .collect();
    let failing_gpu: Shared = if found.len() == 1 {
        // A backend of its own on the one GPU, beside the healthy one.
        Arc::new(CudaBackend::new().expect("a second backend on GPU 0"))
    } else {
        healthy.pop().expect("two GPUs or more")
    };
    let failed_mid_run = until(10, |attempt| {
        let bad = Arc::new(FaultyBackend::new(
            Arc::clone(&failing_gpu),
            Fault::FailOnUnit {
                unit: 1,
                kind: FaultKind::DeviceLost,
                sticky: true,
            },
        ));
        let mut backends = healthy.clone();
        backends.push(Arc::clone(&bad) as Shared);
        let last = backends.len() - 1;
        let s = Scheduler::from_shared(backends)
            .policy(Policy::WorkStealing)
            .chunks_per_device(8)
            .min_chunk_products(1 << 16)
            .share_always();
        let c = s
            .spgemm(&a, &b, SpgemmAlgorithm::Auto)
            .unwrap_or_else(|e| panic!("{TEST}: the product failed with a GPU lost: {e}"));
        assert_same(TEST, &c, &single);
        let report = s.last_report().expect("a report");
        eprintln!(
            "{TEST}: attempt {attempt}, bitwise equal to GPU 0 alone: {}, {} chunks planned, \
             failing backend's units: {} started, {} failed:\n{}",
            c == single,
            report.chunks_planned,
            bad.units_started(),
            bad.units_failed(),
            describe(&report)
        );
        for (d, device) in report.devices.iter().enumerate().take(last) {
            assert!(
                device.failure.is_none(),
                "{TEST}: device {d} failed: {report:?}"
            );
        }
        if bad.units_failed() == 0 {
            return false; // the others finished everything before its second chunk
        }
        assert!(
            report.devices[last].failure.is_some(),
            "{TEST}: the failure was not reported: {report:?}"
        );
        assert!(
            report.devices[..last].iter().all(|d| d.chunks > 0),
            "{TEST}: some healthy GPU took no chunk: {report:?}"
        );
        report.devices[last].chunks > 0
    });
    assert!(
        failed_mid_run,
        "{TEST}: in 10 runs the failing backend never computed a chunk and then failed"
    );
    eprintln!(
        "{TEST}: passed, {} in {:.1} s",
        if found.len() == 1 {
            "two backends on the one GPU".to_string()
        } else {
            format!(
                "GPU {} failing, {} GPU(s) finishing",
                found.len() - 1,
                found.len() - 1
            )
        },
        started.elapsed().as_secs_f64()
    );
}

/// A band product (DIA × DIA) split by rows over every GPU and the CPU (Matam et al. §IV.C):
/// with equal costs every device computes rows; with costs calibrated on the machine the split
/// follows them; with the first GPU losing its device its rows are rerun on the others. C is
/// the CPU backend's every time.
#[test]
fn a_band_product_is_split_by_rows_over_every_gpu_and_the_cpu() {
    use hetsparse_core::Dia;
    use hetsparse_sched::BandCost;
    watchdog();
    let test = "a_band_product_is_split_by_rows_over_every_gpu_and_the_cpu";
    let Some(gpus) = gpus_or_skip(test) else {
        return;
    };
    let band = |rows: usize, width: i64, seed: u64| -> Dia<f64> {
        let offsets: Vec<i64> = (-width / 2..=width / 2).collect();
        generate::band_dia(rows, rows, &offsets, seed).expect("band")
    };
    let (a, b) = (band(1 << 17, 9, 1), band(1 << 17, 5, 2));
    let cpu = CpuBackend::with_threads(2).expect("CPU backend");
    let expected = cpu.dia_spgemm(&a, &b).expect("CPU alone");
    let same = |what: &str, c: &Dia<f64>| {
        assert_same(
            what,
            &c.to_csr().expect("csr"),
            &expected.to_csr().expect("csr"),
        );
    };
    let every = |fail_first: bool| -> Vec<Shared> {
        let mut backends: Vec<Shared> = Vec::new();
        for (k, gpu) in gpus.iter().enumerate() {
            let gpu: Shared = Arc::new(gpu.clone());
            backends.push(if fail_first && k == 0 {
                let fault = Fault::FailOnUnit {
                    unit: 0,
                    kind: FaultKind::DeviceLost,
                    sticky: true,
                };
                Arc::new(FaultyBackend::new(gpu, fault))
            } else {
                gpu
            });
        }
        backends.push(Arc::new(CpuBackend::with_threads(2).expect("CPU backend")));
        backends
    };
    let equal = BandCost {
        fixed_secs: 0.0,
        secs_per_product: 1e-9,
        secs_per_output: 1e-9,
    };
    let n = gpus.len() + 1;
    let s = Scheduler::from_shared(every(false))
        .with_band_costs(&vec![equal; n])
        .expect("costs");
    same("equal costs", &s.dia_spgemm(&a, &b).expect("split"));
    let report = s.last_report().expect("report");
    eprintln!("{test}: equal costs\n{}", describe(&report));
    assert!(
        report.devices.iter().all(|d| d.chunks == 1),
        "every device computes rows"
    );

    let s = Scheduler::from_shared(every(false));
    let costs = s.calibrate_band(1 << 16).expect("calibration");
    eprintln!("{test}: calibrated costs {costs:?}");
    assert!(costs.iter().all(Option::is_some), "every device calibrated");
    same("calibrated", &s.dia_spgemm(&a, &b).expect("split"));
    eprintln!(
        "{test}: calibrated\n{}",
        describe(&s.last_report().expect("report"))
    );

    // A budget far below the product: the GPU goes through its rows in blocks that fit.
    let budgeted = CudaBackend::with_device(gpus[0].gpu().ordinal())
        .expect("a second backend on the first GPU")
        .with_memory_budget(8 << 20);
    same(
        "budgeted GPU",
        &budgeted.dia_spgemm(&a, &b).expect("out of core"),
    );
    let s = Scheduler::from_shared(vec![
        Arc::new(budgeted) as Shared,
        Arc::new(CpuBackend::with_threads(2).expect("CPU backend")),
    ])
    .with_band_costs(&[equal; 2])
    .expect("costs");
    same(
        "budgeted GPU and CPU",
        &s.dia_spgemm(&a, &b).expect("split"),
    );

    let s = Scheduler::from_shared(every(true))
        .with_band_costs(&vec![equal; n])
        .expect("costs");
    same("first GPU lost", &s.dia_spgemm(&a, &b).expect("rerun"));
    let report = s.last_report().expect("report");
    eprintln!("{test}: first GPU lost\n{}", describe(&report));
    assert!(report.devices[0].failure.is_some());
    assert_eq!(report.devices.iter().map(|d| d.chunks).sum::<usize>(), n);
}
