//! The cost model's choices in a context (with faked devices posing as GPUs, fast or slowed
//! down, beside the CPU backend and PoCL where installed), and the calibration file: round
//! trip, damaged files, another version, learned speeds saved, writers at once.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use hetsparse::calibration::{Calibration, Entry, Origin, FILE_NAME, LIBRARY_VERSION};
use hetsparse::{
    generate, Backend, BackendKind, CalibrationCache, CalibrationOptions, Chosen, Context, Csr,
    DeviceInfo, DeviceKind, DeviceProfile, Measured, MemorySpace, OpKind, ReferenceBackend, Source,
    SpgemmAlgorithm,
};
use hetsparse_core::fault::{Fault, FaultyBackend};

/// A device that computes on the host but reports itself as `kind` with `units` units in
/// memory of its own (a GPU's profile when `kind` is `Gpu`), each call delayed by `delay`.
fn posing(
    kind: DeviceKind,
    units: u32,
    own_memory: bool,
    delay: Duration,
) -> Arc<dyn Backend<f64>> {
    posing_with_memory(kind, units, own_memory, delay, 1 << 34)
}

/// [`posing`] with `memory_bytes` of memory.
fn posing_with_memory(
    kind: DeviceKind,
    units: u32,
    own_memory: bool,
    delay: Duration,
    memory_bytes: u64,
) -> Arc<dyn Backend<f64>> {
    let info = DeviceInfo {
        backend: BackendKind::Other("fake"),
        name: format!("fake {kind:?} {units}"),
        kind,
        memory_bytes,
        compute_units: units,
    };
    let space = if own_memory {
        MemorySpace::Device {
            backend: BackendKind::Other("fake"),
            id: 0,
        }
    } else {
        MemorySpace::Host
    };
    let mut profile = DeviceProfile::defaults(&info, &space);
    // The host's cores behind the pose have nothing to ready.
    profile.cold_start = 0.0;
    let cpu = hetsparse::cpu::CpuBackend::new().expect("the CPU backend");
    let fault = if delay.is_zero() {
        Fault::None
    } else {
        Fault::Delay { per_unit: delay }
    };
    Arc::new(FaultyBackend::new(Arc::new(cpu), fault).posing_as(info, profile))
}

/// A 16-thread host CPU and a 132-unit GPU (as on the H200 machine), both faked.
fn cpu_and_gpu(gpu_delay: Duration) -> Context<f64> {
    Context::from_backends(
        &["cpu", "gpu"],
        vec![
            posing(DeviceKind::Cpu, 16, false, Duration::ZERO),
            posing(DeviceKind::Gpu, 132, true, gpu_delay),
        ],
    )
    .unwrap()
}

fn chosen(ctx: &Context<f64>) -> Chosen {
    ctx.last_choice().expect("the model decided").chosen
}

fn source(ctx: &Context<f64>, device: usize) -> Source {
    let choice = ctx.last_choice().expect("the model decided");
    choice
        .predictions
        .iter()
        .find(|p| p.device == device)
        .expect("a prediction for the device")
        .source
}

fn tiny_calibration() -> CalibrationOptions {
    CalibrationOptions {
        rows: 3_000,
        small_rows: 200,
        rounds: 1,
    }
}

#[test]
fn spgemm_goes_to_the_gpu_and_spmv_to_the_cpu_before_anything_is_learned() {
    let ctx = cpu_and_gpu(Duration::ZERO);
    let a: Csr<f64> = generate::uniform(20_000, 20_000, 16, 1);
    let expected = ReferenceBackend
        .spgemm(&a, &a, SpgemmAlgorithm::Auto)
        .unwrap();
    assert_eq!(ctx.spgemm(&a, &a).unwrap(), expected);
    assert_eq!(chosen(&ctx), Chosen::Alone(1), "{:?}", ctx.last_choice());
    assert_eq!(source(&ctx, 0), Source::Model);
    // A device's first call pays its warm-up and teaches nothing: the second is decided on
    // the model too.
    ctx.spgemm(&a, &a).unwrap();
    assert_eq!(source(&ctx, 1), Source::Model);
    // The GPU's second run alone taught its speed, which takes the model's place.
    ctx.spgemm(&a, &a).unwrap();
    assert_eq!(source(&ctx, 1), Source::Learned);
    assert_eq!(source(&ctx, 0), Source::Model);

    let x = vec![1.0; a.ncols()];
    let y = ctx.spmv(&a, &x).unwrap();
    let want = ReferenceBackend.spmv((&a).into(), &x).unwrap();
    for (got, want) in y.iter().zip(&want) {
        assert!(
            (got - want).abs() <= 1e-12 * want.abs().max(1.0),
            "{got} {want}"
        );
    }
    assert_eq!(chosen(&ctx), Chosen::Alone(0), "{:?}", ctx.last_choice());
    let gpu = &ctx.last_choice().unwrap().predictions[1];
    assert!(
        gpu.transfer > gpu.compute,
        "SpMV from host is transfer-bound: {gpu:?}"
    );
    let explained = ctx.describe(&ctx.last_choice().unwrap());
    assert!(
        explained.contains("cpu alone") && explained.contains("gpu"),
        "{explained}"
    );

    // A small product goes where a call costs least: the CPU.
    let small: Csr<f64> = generate::uniform(50, 50, 2, 1);
    ctx.spgemm(&small, &small).unwrap();
    assert_eq!(chosen(&ctx), Chosen::Alone(0), "{:?}", ctx.last_choice());
}

#[test]
fn a_device_that_cannot_hold_the_product_is_not_chosen_alone() {
    let ctx = Context::from_backends(
        &["cpu", "gpu"],
        vec![
            posing(DeviceKind::Cpu, 16, false, Duration::ZERO),
            posing_with_memory(DeviceKind::Gpu, 132, true, Duration::ZERO, 8 << 20),
        ],
    )
    .unwrap();
    // A, B and C take about 40 MB: more than half the GPU's 8 MiB.
    let a: Csr<f64> = generate::uniform(20_000, 20_000, 16, 7);
    ctx.spgemm(&a, &a).unwrap();
    assert_eq!(chosen(&ctx), Chosen::Alone(0), "{:?}", ctx.last_choice());
    assert_eq!(source(&ctx, 1), Source::DoesNotFit);
    // A small product fits, and the GPU is weighed as usual.
    let small: Csr<f64> = generate::uniform(100, 100, 2, 7);
    ctx.spgemm(&small, &small).unwrap();
    assert_eq!(source(&ctx, 1), Source::Model);
}

/// A faked 16-thread CPU beside a faked 132-SM GPU (computing on the host) whose profile
/// charges `cold_start` seconds until it has run a call.
fn cpu_and_cold_gpu(cold_start: f64) -> Context<f64> {
    let info = DeviceInfo {
        backend: BackendKind::Other("fake"),
        name: "fake cold GPU".into(),
        kind: DeviceKind::Gpu,
        memory_bytes: 1 << 34,
        compute_units: 132,
    };
    let space = MemorySpace::Device {
        backend: BackendKind::Other("fake"),
        id: 0,
    };
    let mut profile = DeviceProfile::defaults(&info, &space);
    profile.cold_start = cold_start;
    let cpu = hetsparse::cpu::CpuBackend::new().expect("the CPU backend");
    let cold = FaultyBackend::new(Arc::new(cpu), Fault::None).posing_as(info, profile);
    Context::from_backends(
        &["cpu", "gpu"],
        vec![
            posing(DeviceKind::Cpu, 16, false, Duration::ZERO),
            Arc::new(cold),
        ],
    )
    .unwrap()
}

#[test]
fn a_device_not_ready_pays_its_cold_start() {
    let ctx = cpu_and_cold_gpu(30.0);
    let a: Csr<f64> = generate::uniform(20_000, 20_000, 16, 1);
    ctx.spgemm(&a, &a).unwrap();
    let choice = ctx.last_choice().expect("the model decided");
    assert_eq!(choice.chosen, Chosen::Alone(0), "{choice:?}");
    let gpu = &choice.predictions[1];
    assert!(gpu.latency >= 30.0, "{gpu:?}");
}

#[test]
fn a_cold_start_is_spread_over_repeated_calls_until_the_device_is_tried() {
    // A GPU predicted quicker than the CPU once ready, but whose cold start outweighs that
    // on one call: the first calls stay on the CPU, and once the calls made spread the cold
    // start thin enough the GPU is tried.
    let a: Csr<f64> = generate::uniform(20_000, 20_000, 16, 1);
    // The gain per call the model predicts for the GPU once ready.
    let warm = cpu_and_cold_gpu(0.0);
    warm.spgemm(&a, &a).unwrap();
    let p = warm.last_choice().expect("the model decided").predictions;
    let gain = p[0].total - p[1].total;
    assert!(gain > 0.0, "{p:?}");
    // A cold start of thirty gains: not tried on the first calls, but within a hundred (the
    // CPU's learned speed moves the gain, not by thirty times).
    let cold_start = 30.0 * gain;
    let ctx = cpu_and_cold_gpu(cold_start);
    let mut tried = None;
    for call in 1..=100u64 {
        ctx.spgemm(&a, &a).unwrap();
        let choice = ctx.last_choice().expect("the model decided");
        let latency = choice.predictions[1].latency;
        if choice.chosen == Chosen::Alone(1) {
            tried = Some(call);
            break;
        }
        let share = cold_start / (call - 1).max(1) as f64;
        assert!(latency >= share, "call {call}: {choice:?}");
    }
    let tried = tried.expect("the GPU was tried");
    assert!(tried > 2, "tried on call {tried}");
}

#[test]
fn a_slow_device_measured_is_no_longer_chosen() {
    // The GPU's profile says fast; every call on it takes half a second more (far more than
    // the CPU's whole run of these products, also on a loaded machine).
    let slow = Duration::from_millis(500);
    let ctx = cpu_and_gpu(slow);
    // 2.3 million products: enough to learn a speed from (twice min_chunk_products).
    let a: Csr<f64> = generate::uniform(9_000, 9_000, 16, 2);
    ctx.spgemm(&a, &a).unwrap();
    assert_eq!(chosen(&ctx), Chosen::Alone(1));
    // Calibrated, it is slow: the CPU is chosen, on calibrated numbers.
    let fresh = cpu_and_gpu(slow);
    let measured = fresh.calibrate_with(&tiny_calibration()).unwrap();
    assert_eq!(measured.len(), 6, "{measured:?}");
    let gpu_spgemm = measured
        .iter()
        .find(|c| c.device == "gpu" && c.op == OpKind::Spgemm)
        .unwrap();
    assert!(gpu_spgemm.measured.per_call >= 0.5, "{gpu_spgemm:?}");
    fresh.spgemm(&a, &a).unwrap();
    assert_eq!(
        chosen(&fresh),
        Chosen::Alone(0),
        "{:?}",
        fresh.last_choice()
    );
    assert_eq!(source(&fresh, 1), Source::Calibrated);
    // What the CPU's second run taught now takes the calibration's place (a first call
    // teaches nothing).
    fresh.spgemm(&a, &a).unwrap();
    assert_eq!(source(&fresh, 0), Source::Calibrated);
    fresh.spgemm(&a, &a).unwrap();
    assert_eq!(source(&fresh, 0), Source::Learned);
    assert_eq!(chosen(&fresh), Chosen::Alone(0));
}

#[cfg(feature = "opencl")]
fn pocl() -> Option<Arc<dyn Backend<f64>>> {
    let d = hetsparse::opencl::list_devices()
        .ok()?
        .into_iter()
        .find(|d| d.kind == DeviceKind::Cpu)?;
    let backend =
        hetsparse::opencl::OpenClBackend::with_device_index(d.platform_index, d.device_index)
            .ok()?;
    Some(Arc::new(backend))
}

#[cfg(not(feature = "opencl"))]
fn pocl() -> Option<Arc<dyn Backend<f64>>> {
    None
}

#[test]
fn the_cpu_backend_beside_pocl_keeps_every_operation() {
    // PoCL computes on the same cores behind copies and a runtime's per-call cost: the CPU
    // backend is predicted faster for all three operations.
    let Some(pocl) = pocl() else {
        eprintln!("no OpenCL CPU device (PoCL), or a build without `opencl`: skipped");
        return;
    };
    let cpu = hetsparse::cpu::CpuBackend::new().unwrap();
    let ctx = Context::from_backends(&["cpu", "opencl"], vec![Arc::new(cpu), pocl]).unwrap();
    let a: Csr<f64> = generate::uniform(5_000, 5_000, 8, 3);
    ctx.spgemm(&a, &a).unwrap();
    assert_eq!(chosen(&ctx), Chosen::Alone(0), "{:?}", ctx.last_choice());
    let x = vec![1.0; a.ncols()];
    ctx.spmv(&a, &x).unwrap();
    assert_eq!(chosen(&ctx), Chosen::Alone(0), "{:?}", ctx.last_choice());
    let b = hetsparse::Dense::try_new(5_000, 4, hetsparse::Layout::RowMajor, vec![1.0; 20_000])
        .unwrap();
    ctx.spmm(&a, &b).unwrap();
    assert_eq!(chosen(&ctx), Chosen::Alone(0), "{:?}", ctx.last_choice());
}

#[test]
fn a_calibration_is_kept_and_loaded_by_the_next_context() {
    let dir = tempfile::tempdir().unwrap();
    let cache = CalibrationCache::Dir(dir.path().to_path_buf());
    let first = cpu_and_gpu(Duration::from_millis(500)).with_calibration_cache(cache.clone());
    let measured = first.calibrate_with(&tiny_calibration()).unwrap();
    drop(first);
    let file = dir.path().join(FILE_NAME);
    assert!(file.exists());
    let second = cpu_and_gpu(Duration::from_millis(500)).with_calibration_cache(cache);
    let mut loaded = second.calibration();
    let mut want = measured.clone();
    let by_key = |c: &hetsparse::Calibrated| (c.device.clone(), c.op);
    loaded.sort_by_key(by_key);
    want.sort_by_key(by_key);
    assert_eq!(loaded.len(), want.len());
    for (l, w) in loaded.iter().zip(&want) {
        assert_eq!((&l.device, l.op, &l.key), (&w.device, w.op, &w.key));
        let close = |x: f64, y: f64| (x - y).abs() <= 1e-12 * x.abs().max(y.abs());
        assert!(close(l.measured.factor, w.measured.factor), "{l:?} {w:?}");
        assert!(
            close(l.measured.per_call, w.measured.per_call),
            "{l:?} {w:?}"
        );
    }
    // The first call of the new context is decided on it: the slow GPU is not chosen.
    let a: Csr<f64> = generate::uniform(9_000, 9_000, 16, 4);
    second.spgemm(&a, &a).unwrap();
    assert_eq!(chosen(&second), Chosen::Alone(0));
    assert_eq!(source(&second, 1), Source::Calibrated);
}

#[test]
fn speeds_learned_from_runs_are_saved() {
    let dir = tempfile::tempdir().unwrap();
    let cache = CalibrationCache::Dir(dir.path().to_path_buf());
    let ctx = cpu_and_gpu(Duration::ZERO).with_calibration_cache(cache.clone());
    let a: Csr<f64> = generate::uniform(20_000, 20_000, 16, 5);
    // The first call warms the GPU up; the second teaches its speed.
    for _ in 0..2 {
        ctx.spgemm(&a, &a).unwrap();
        assert_eq!(chosen(&ctx), Chosen::Alone(1));
    }
    drop(ctx);
    let saved = Calibration::load(&dir.path().join(FILE_NAME));
    let learned: Vec<_> = saved
        .entries
        .iter()
        .filter(|((_, op), e)| *op == OpKind::Spgemm && e.origin == Origin::Learned)
        .collect();
    assert_eq!(learned.len(), 1, "{saved:?}");
    assert!(learned[0].0 .0.contains("fake Gpu 132"), "{learned:?}");
    // The next context starts from it.
    let next = cpu_and_gpu(Duration::ZERO).with_calibration_cache(cache);
    next.spgemm(&a, &a).unwrap();
    assert_eq!(source(&next, 1), Source::Calibrated);
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

#[test]
fn damaged_stale_or_foreign_files_are_ignored_and_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let cache = CalibrationCache::Dir(dir.path().to_path_buf());
    let file = dir.path().join(FILE_NAME);
    let ctx = cpu_and_gpu(Duration::ZERO).with_calibration_cache(cache.clone());
    ctx.calibrate_with(&tiny_calibration()).unwrap();
    drop(ctx);
    let good = std::fs::read_to_string(&file).unwrap();
    assert!(!Calibration::parse(&good).unwrap().entries.is_empty());
    let stale = good.replace(&format!("library {LIBRARY_VERSION}"), "library 0.0.1");
    let truncated = good[..good.len() * 2 / 3].to_string();
    let corrupted = good.replace("spgemm", "sp\u{0}gemm");
    let binary = String::from_utf8_lossy(&[0xff, 0x00, 0x13, 0x37]).into_owned();
    for damaged in [stale, truncated, corrupted, binary, String::new()] {
        write(&file, &damaged);
        let ctx = cpu_and_gpu(Duration::ZERO).with_calibration_cache(cache.clone());
        assert!(ctx.calibration().is_empty(), "loaded from {damaged:?}");
        // The model decides, and runs work.
        let a: Csr<f64> = generate::uniform(2_000, 2_000, 4, 6);
        ctx.spgemm(&a, &a).unwrap();
        assert_eq!(source(&ctx, 1), Source::Model);
        drop(ctx);
    }
    // A file that is not valid UTF-8 at all, and a directory in its place.
    std::fs::write(&file, [0xff, 0xfe, 0x00]).unwrap();
    assert!(cpu_and_gpu(Duration::ZERO)
        .with_calibration_cache(cache.clone())
        .calibration()
        .is_empty());
    std::fs::remove_file(&file).unwrap();
    std::fs::create_dir(&file).unwrap();
    let ctx = cpu_and_gpu(Duration::ZERO).with_calibration_cache(cache.clone());
    assert!(ctx.calibration().is_empty());
    // Saving there fails with a warning, not an error.
    assert_eq!(ctx.calibrate_with(&tiny_calibration()).unwrap().len(), 6);
    drop(ctx);
    std::fs::remove_dir(&file).unwrap();
    // A calibration replaces a damaged file with a whole one.
    write(&file, "hetsparse-calibration 1\nlibrary");
    let ctx = cpu_and_gpu(Duration::ZERO).with_calibration_cache(cache);
    ctx.calibrate_with(&tiny_calibration()).unwrap();
    assert_eq!(
        Calibration::parse(&std::fs::read_to_string(&file).unwrap())
            .unwrap()
            .entries
            .len(),
        6
    );
}

#[test]
fn writers_at_once_leave_a_whole_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join(FILE_NAME);
    let writers = 6;
    let rounds = 40;
    Calibration::default().save(&file).unwrap();
    std::thread::scope(|scope| {
        for w in 0..writers {
            let file = &file;
            scope.spawn(move || {
                for r in 0..rounds {
                    let mut c = Calibration::default();
                    for e in 0..50 {
                        c.entries.insert(
                            (format!("writer {w} device {e}"), OpKind::ALL[r % 3]),
                            Entry {
                                measured: Measured {
                                    factor: 1.0 + (w * 1000 + r) as f64,
                                    per_call: 1e-4,
                                },
                                origin: Origin::Calibrated,
                            },
                        );
                    }
                    c.save(file).unwrap();
                }
            });
        }
        // Every read while they write finds a whole file.
        let file = &file;
        scope.spawn(move || {
            let mut whole = 0;
            for _ in 0..400 {
                if let Ok(text) = std::fs::read_to_string(file) {
                    let parsed = Calibration::parse(&text);
                    assert!(parsed.is_ok(), "{parsed:?}");
                    whole += 1;
                }
            }
            assert!(whole > 0);
        });
    });
    let last = Calibration::parse(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert!(last.entries.len() >= 50);
    // No temporary file is left behind.
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from(FILE_NAME)]);
}
