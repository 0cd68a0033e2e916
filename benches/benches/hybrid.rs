//! The scheduler against its backends alone: SpGEMM of every benchmark class on each backend
//! compiled in, then on a scheduler over the CPU and the first GPU backend under each policy
//! (Matam's Heuristics I and II, Xia's densest-first with calibrated speeds, work stealing),
//! and on one over every backend. Whole calls from host memory, each result checked against
//! the CPU backend's.
//!
//! `cargo bench -p hetsparse-bench --features cuda,opencl --bench hybrid` prints one markdown
//! table (and writes it to `$HETSPARSE_BENCH_OUT/hybrid.md` when that is set).
//! `HETSPARSE_BENCH_QUICK=1` for small sizes, `HETSPARSE_BENCH_REPS=N` timed repetitions after
//! one warm-up (default 3), `HETSPARSE_BENCH_CLASSES=stencil3d,powerlaw` to pick classes,
//! `HETSPARSE_BENCH_HYBRID_THREADS=N` for the CPU backend inside the schedulers (default: every
//! core but one, left to the threads that drive the GPUs; the CPU backend alone has every
//! core), `HETSPARSE_BENCH_SPGEMM_ONLY=1` to leave out the SpMV and
//! SpMM table, `HETSPARSE_BENCH_PROFILE=1` for one more call of each backend and scheduler with
//! its spans printed as they close (busy and idle time of each stage) on standard error.
//! For studying a policy: `HETSPARSE_BENCH_POLICIES=work stealing;H-I` keeps the schedulers
//! whose label contains one of the `;`-separated parts, `HETSPARSE_BENCH_HI_SPEEDS=1,3` sets
//! Heuristic I's assumed speeds (CPU, GPU), `HETSPARSE_BENCH_HYBRID_THREADS=0` puts the CPU
//! backend inside the schedulers on rayon's global pool (as `Context::auto()` does), and
//! `HETSPARSE_BENCH_CALLS=1` prints every call of a scheduler (its time, shares and busy
//! times) on standard error.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hetsparse_bench::backends::{backends, Selection};
use hetsparse_bench::cases::{cases, Scale};
use hetsparse_core::{Backend, Csr, DeviceKind, SpgemmAlgorithm};
use hetsparse_sched::{Policy, Scheduler};

#[path = "common/spans.rs"]
mod spans;

fn env_usize(name: &str) -> Option<usize> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// Minimum and median of `reps` timed calls after one warm-up; `None` if a call failed.
fn time(
    reps: usize,
    mut f: impl FnMut() -> Option<Csr<f64>>,
) -> Option<(Duration, Duration, Csr<f64>)> {
    let mut last = f()?;
    let mut times = Vec::with_capacity(reps);
    for _ in 0..reps {
        let start = Instant::now();
        let c = f()?;
        times.push(start.elapsed());
        // The previous result is freed outside the timed call.
        last = c;
    }
    times.sort();
    Some((times[0], times[times.len() / 2], last))
}

/// Minimum of `reps` timed calls after one warm-up; `None` if a call failed.
fn time_call(reps: usize, mut f: impl FnMut() -> bool) -> Option<Duration> {
    if !f() {
        return None;
    }
    let mut best = Duration::MAX;
    for _ in 0..reps {
        let start = Instant::now();
        if !f() {
            return None;
        }
        best = best.min(start.elapsed());
    }
    Some(best)
}

/// Same structure as `expected`, values within a relative 1e-9.
fn agrees(c: &Csr<f64>, expected: &Csr<f64>) -> bool {
    c.shape() == expected.shape()
        && c.row_offsets() == expected.row_offsets()
        && c.col_indices() == expected.col_indices()
        && c.values()
            .iter()
            .zip(expected.values())
            .all(|(x, y)| (x - y).abs() <= 1e-9 * (1.0 + y.abs()))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else is taken.
    let reps = env_usize("HETSPARSE_BENCH_REPS").unwrap_or(3).max(1);
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let hybrid_threads =
        env_usize("HETSPARSE_BENCH_HYBRID_THREADS").unwrap_or(cores.saturating_sub(1).max(1));
    let profile = std::env::var("HETSPARSE_BENCH_PROFILE").is_ok_and(|v| v == "1");
    let spgemm_only = std::env::var("HETSPARSE_BENCH_SPGEMM_ONLY").is_ok_and(|v| v == "1");
    let each_call = std::env::var("HETSPARSE_BENCH_CALLS").is_ok_and(|v| v == "1");
    let policies: Option<Vec<String>> = std::env::var("HETSPARSE_BENCH_POLICIES")
        .ok()
        .map(|v| v.split(';').map(str::to_string).collect());
    let hi_speeds: Vec<f64> = std::env::var("HETSPARSE_BENCH_HI_SPEEDS")
        .ok()
        .map(|v| v.split(',').filter_map(|x| x.trim().parse().ok()).collect())
        .filter(|v: &Vec<f64>| v.len() == 2)
        .unwrap_or_else(|| vec![1.0, 3.0]);
    let hi_label = if hi_speeds[0] > 0.0 {
        format!("H-I (gpu {}x)", hi_speeds[1] / hi_speeds[0])
    } else {
        "H-I (all on the gpu)".to_string()
    };
    let wanted: Option<Vec<String>> = std::env::var("HETSPARSE_BENCH_CLASSES")
        .ok()
        .map(|v| v.split(',').map(str::to_string).collect());

    let (single, unavailable) = backends(Selection::default()).expect("constructing the backends");
    for u in &unavailable {
        eprintln!("skipping backend {}: {}", u.name, u.reason);
    }
    let single: Vec<Arc<dyn Backend<f64>>> =
        single.into_iter().map(|r| Arc::from(r.backend)).collect();
    let hybrid_cpu: Arc<dyn Backend<f64>> = Arc::new(
        if hybrid_threads == 0 {
            hetsparse_cpu::CpuBackend::new()
        } else {
            hetsparse_cpu::CpuBackend::with_threads(hybrid_threads)
        }
        .expect("CPU backend"),
    );
    let gpu = single
        .iter()
        .find(|b| b.info().kind == DeviceKind::Gpu)
        .cloned();

    // (label, scheduler) pairs, made fresh for each class so learned speeds start over.
    let schedulers = |gpu: &Arc<dyn Backend<f64>>| -> Vec<(String, Scheduler<f64>)> {
        let pair = || vec![hybrid_cpu.clone(), gpu.clone()];
        let mut s = vec![
            (
                hi_label.clone(),
                Scheduler::from_shared(pair()).policy(Policy::RowSplitAssumed(hi_speeds.clone())),
            ),
            (
                format!("{hi_label}, C in place"),
                Scheduler::from_shared(pair())
                    .policy(Policy::RowSplitAssumed(hi_speeds.clone()))
                    .host_memory(0),
            ),
            (
                "H-II (measured)".to_string(),
                Scheduler::from_shared(pair()).policy(Policy::RowSplitMeasured),
            ),
            (
                "densest-first".to_string(),
                Scheduler::from_shared(pair()).policy(Policy::DensestFirst),
            ),
            (
                "work stealing".to_string(),
                Scheduler::from_shared(pair()).policy(Policy::WorkStealing),
            ),
            (
                "stealing, always shared".to_string(),
                Scheduler::from_shared(pair())
                    .policy(Policy::WorkStealing)
                    .share_always(),
            ),
            // The GPU's chunk path on its own: two workers on the one GPU, no CPU work beside.
            (
                "gpu + gpu, always shared".to_string(),
                Scheduler::from_shared(vec![gpu.clone(), gpu.clone()])
                    .policy(Policy::WorkStealing)
                    .share_always(),
            ),
            // The same with C counted by the GPU and each chunk written straight into C.
            (
                "gpu + gpu, always shared, C in place".to_string(),
                Scheduler::from_shared(vec![gpu.clone(), gpu.clone()])
                    .policy(Policy::WorkStealing)
                    .share_always()
                    .host_memory(0),
            ),
        ];
        if single.len() > 2 {
            let mut all = vec![hybrid_cpu.clone()];
            all.extend(
                single
                    .iter()
                    .filter(|b| b.info().kind != DeviceKind::Cpu)
                    .cloned(),
            );
            s.push((
                format!("all {} (stealing)", all.len()),
                Scheduler::from_shared(all).policy(Policy::WorkStealing),
            ));
        }
        if let Some(keep) = &policies {
            s.retain(|(label, _)| keep.iter().any(|k| label.contains(k.as_str())));
        }
        s
    };

    let mut table = String::new();
    let mut dense_table = String::from(
        "| class | operation | cpu ms | gpu ms | work stealing ms | always shared ms |\n|---|---|---|---|---|---|\n",
    );
    let _ = writeln!(
        table,
        "| class | products | backend / policy | min ms | median ms | vs best single | shares (cpu, gpu, ...) | busy ms (cpu, gpu, ...) | counting C ms | assembly ms |"
    );
    let _ = writeln!(table, "|---|---|---|---|---|---|---|---|---|---|");
    for case in cases(Scale::from_env()) {
        if let Some(w) = &wanted {
            if !w.iter().any(|c| c == case.class.name()) {
                continue;
            }
        }
        let ops = case.generate().expect("generating the operands");
        let (a, b) = (&ops.a, &ops.b);
        let class = case.class.name();
        eprintln!("{class}: {} products", ops.products);
        let mut expected: Option<Csr<f64>> = None;
        let mut best_single = f64::INFINITY;
        let mut rows = Vec::new();
        for backend in &single {
            let name = backend.info().backend.to_string();
            match time(reps, || {
                backend
                    .spgemm(a, b, SpgemmAlgorithm::Auto)
                    .map_err(|e| eprintln!("{name}: {e}"))
                    .ok()
            }) {
                Some((min, median, c)) => {
                    let ok = expected.as_ref().is_none_or(|e| agrees(&c, e));
                    if expected.is_none() {
                        expected = Some(c);
                    }
                    best_single = best_single.min(ms(min));
                    if profile {
                        eprintln!("profile of {class}, {name} alone:");
                        let _ = spans::printed(|| backend.spgemm(a, b, SpgemmAlgorithm::Auto));
                    }
                    rows.push((name, min, median, ok, " | | | ".to_string()));
                }
                None => rows.push((
                    name,
                    Duration::ZERO,
                    Duration::ZERO,
                    false,
                    "failed | | | ".into(),
                )),
            }
        }
        if let Some(gpu) = &gpu {
            for (label, s) in schedulers(gpu) {
                match time(reps, || {
                    let started = Instant::now();
                    let c = s
                        .spgemm(a, b, SpgemmAlgorithm::Auto)
                        .map_err(|e| eprintln!("{label}: {e}"))
                        .ok();
                    let elapsed = started.elapsed();
                    if each_call {
                        if let Some(r) = s.last_report() {
                            eprintln!(
                                "{class}, {label}: {:.2} ms, shares {:?}, busy ms {:?}, counting {:.2}, assembly {:.2}",
                                ms(elapsed),
                                r.shares().iter().map(|x| (x * 100.0).round()).collect::<Vec<_>>(),
                                r.devices.iter().map(|d| (ms(d.busy) * 10.0).round() / 10.0).collect::<Vec<_>>(),
                                ms(r.counting),
                                ms(r.assembly),
                            );
                        }
                    }
                    c
                }) {
                    Some((min, median, c)) => {
                        let ok = expected.as_ref().is_none_or(|e| agrees(&c, e));
                        let shares = s
                            .last_report()
                            .map(|r| {
                                let shares = r
                                    .shares()
                                    .iter()
                                    .map(|x| format!("{:.0}%", x * 100.0))
                                    .collect::<Vec<_>>()
                                    .join(", ");
                                let busy = r
                                    .devices
                                    .iter()
                                    .map(|d| format!("{:.1}", ms(d.busy)))
                                    .collect::<Vec<_>>()
                                    .join(", ");
                                format!(
                                    "{shares} | {busy} | {:.2} | {:.2}",
                                    ms(r.counting),
                                    ms(r.assembly)
                                )
                            })
                            .unwrap_or_default();
                        if profile {
                            eprintln!("profile of {class}, {label}:");
                            let _ = spans::printed(|| s.spgemm(a, b, SpgemmAlgorithm::Auto));
                        }
                        rows.push((label, min, median, ok, shares));
                    }
                    None => rows.push((
                        label,
                        Duration::ZERO,
                        Duration::ZERO,
                        false,
                        "failed | | | ".into(),
                    )),
                }
            }
        }
        if let Some(gpu) = gpu.as_ref().filter(|_| !spgemm_only) {
            let cpu = single[0].clone();
            let pair = || vec![hybrid_cpu.clone(), gpu.clone()];
            let stealing = Scheduler::from_shared(pair());
            let shared = Scheduler::from_shared(pair()).share_always();
            let x = &ops.vector;
            let d = &ops.dense;
            type Call<'a> = Box<dyn Fn(&dyn Backend<f64>) -> bool + 'a>;
            let ops_list: [(&str, Call<'_>); 2] = [
                (
                    "SpMV",
                    Box::new(|be: &dyn Backend<f64>| be.spmv(a.into(), x).is_ok()),
                ),
                (
                    "SpMM (32 columns)",
                    Box::new(|be: &dyn Backend<f64>| be.spmm(a.into(), d).is_ok()),
                ),
            ];
            for (name, call) in &ops_list {
                let t = |be: &dyn Backend<f64>| time_call(reps, || call(be));
                let (tc, tg) = (t(cpu.as_ref()), t(gpu.as_ref()));
                let (ts, tf) = (t(&stealing), t(&shared));
                let fmt = |t: Option<Duration>| {
                    t.map_or("failed".to_string(), |t| format!("{:.2}", ms(t)))
                };
                let _ = writeln!(
                    dense_table,
                    "| {class} | {name} | {} | {} | {} | {} |",
                    fmt(tc),
                    fmt(tg),
                    fmt(ts),
                    fmt(tf)
                );
            }
        }
        let mut class_rows = String::new();
        for (label, min, median, ok, shares) in rows {
            let gain = if min > Duration::ZERO {
                best_single / ms(min)
            } else {
                0.0
            };
            let _ = writeln!(
                class_rows,
                "| {class} | {} | {label}{} | {:.2} | {:.2} | {:.2}x | {shares} |",
                ops.products,
                if ok { "" } else { " (WRONG or failed)" },
                ms(min),
                ms(median),
                gain,
            );
        }
        eprint!("{class_rows}");
        table.push_str(&class_rows);
    }
    println!("{table}");
    println!("{dense_table}");
    if let Ok(dir) = std::env::var("HETSPARSE_BENCH_OUT") {
        let _ = std::fs::write(
            std::path::Path::new(&dir).join("hybrid.md"),
            format!("{table}\n{dense_table}"),
        );
    }
}
