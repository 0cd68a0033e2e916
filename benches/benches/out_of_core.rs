//! Out-of-core SpGEMM: a product whose B exceeds a GPU backend's memory budget and whose C is
//! several times it, through a scheduler over that one backend (B in column panels, A in row
//! panels, C streamed back chunk by chunk), against the same backend without a budget and the
//! CPU, and once more with C written in place (`Scheduler::host_memory(0)`: C counted first, on
//! the host as the GPU cannot hold A and B, each chunk written straight into it). The table gives bytes of A, B and C, the
//! budget, times, and C's bytes per second (the rate to compare with the pinned device-to-host
//! bandwidth). Then the budgeted backend beside the CPU backend (Xia et al.'s hybrid out of
//! core): under work stealing (the default, which shares only where its learned speeds say it
//! pays), with every product shared, and under densest-first (Xia's Algorithm 4).
//!
//! `cargo bench -p hetsparse-bench --features cuda --bench out_of_core`;
//! `HETSPARSE_OOC_CLASS` (default `uniform`), `HETSPARSE_OOC_SIZE` (the class's size argument,
//! default 2 000 000), `HETSPARSE_OOC_BUDGET_FRACTION` (budget as a fraction of B's bytes,
//! default 0.5), `HETSPARSE_BENCH_REPS` (default 3), `HETSPARSE_BENCH_OUT` (writes
//! `out_of_core.md` there), `HETSPARSE_BENCH_PROFILE=1` (every span and event down to DEBUG
//! printed on standard error as it closes, from every thread: each chunk's stages),
//! `HETSPARSE_OOC_LANES=1` (two more CUDA rows: the budget halved between two backends on the
//! one GPU, every product shared, against one backend of half the budget: what overlapping
//! one chunk's host work with another's GPU work gains at the same chunks).

use std::fmt::Write as _;
use std::sync::Arc;

use hetsparse_core::backend::memory::csr_bytes;
use hetsparse_core::generate::{self, MatrixClass};
use hetsparse_core::{Backend, BackendKind, Csr, SpgemmAlgorithm};
use hetsparse_sched::{Policy, Scheduler};

#[path = "common/timing.rs"]
mod timing;
use timing::best_of;

fn env<T: std::str::FromStr>(name: &str) -> Option<T> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

fn gb(bytes: u64) -> f64 {
    bytes as f64 / 1e9
}

type Shared = Arc<dyn Backend<f64>>;

/// GPU backends with and without the budget, by name.
#[allow(unused_variables, unused_mut)]
fn gpus(budget: u64) -> Vec<(BackendKind, Shared, Shared)> {
    let mut found: Vec<(BackendKind, Shared, Shared)> = Vec::new();
    #[cfg(feature = "cuda")]
    match (
        hetsparse_cuda::CudaBackend::new(),
        hetsparse_cuda::CudaBackend::new(),
    ) {
        (Ok(free), Ok(limited)) => found.push((
            BackendKind::Cuda,
            Arc::new(free),
            Arc::new(limited.with_memory_budget(budget)),
        )),
        (Err(e), _) | (_, Err(e)) => eprintln!("skipping cuda: {e}"),
    }
    #[cfg(feature = "opencl")]
    match hetsparse_opencl::OpenClBackend::with_device_kind(hetsparse_core::DeviceKind::Gpu) {
        Ok(free) => match free.with_own_context() {
            Ok(limited) => found.push((
                BackendKind::OpenCl,
                Arc::new(free),
                Arc::new(limited.with_memory_budget(budget)),
            )),
            Err(e) => eprintln!("skipping opencl: {e}"),
        },
        Err(e) => eprintln!("skipping opencl: {e}"),
    }
    found
}

fn main() {
    let class_name: String = env("HETSPARSE_OOC_CLASS").unwrap_or_else(|| "uniform".into());
    let class = MatrixClass::ALL
        .into_iter()
        .find(|c| c.name() == class_name)
        .expect("HETSPARSE_OOC_CLASS names a class");
    let size: usize = env("HETSPARSE_OOC_SIZE").unwrap_or(2_000_000);
    let fraction: f64 = env("HETSPARSE_OOC_BUDGET_FRACTION").unwrap_or(0.5);
    let reps: usize = env("HETSPARSE_BENCH_REPS").unwrap_or(3);
    if std::env::var("HETSPARSE_BENCH_PROFILE").is_ok_and(|v| v == "1") {
        // Global, so that the scheduler's worker threads print theirs too.
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_span_events(tracing_subscriber::fmt::format::FmtSpan::CLOSE)
            .with_writer(std::io::stderr)
            .init();
    }

    let (a, b) = generate::product_operands::<f64>(class, size, 1);
    let bytes = |m: &Csr<f64>| csr_bytes(m.nrows(), m.nnz(), 8);
    let budget = (bytes(&b) as f64 * fraction) as u64;
    let cpu = hetsparse_cpu::CpuBackend::new().expect("CPU backend");
    let (cpu_time, expected) =
        best_of(reps, || cpu.spgemm(&a, &b, SpgemmAlgorithm::Auto).ok()).expect("CPU product");
    let c_bytes = bytes(&expected);
    let mut table = String::new();
    let _ = writeln!(
        table,
        "{class_name} size {size}: A {:.2} GB, B {:.2} GB, C {:.2} GB ({} entries); budget {:.3} GB (C is {:.1}x the budget)\n",
        gb(bytes(&a)),
        gb(bytes(&b)),
        gb(c_bytes),
        expected.nnz(),
        gb(budget),
        c_bytes as f64 / budget as f64
    );
    let _ = writeln!(table, "| run | ms | C GB/s | correct |\n|---|---|---|---|");
    let _ = writeln!(
        table,
        "| cpu | {:.1} | {:.2} | reference |",
        cpu_time.as_secs_f64() * 1e3,
        gb(c_bytes) / cpu_time.as_secs_f64()
    );
    // Beside a GPU, the CPU backend leaves one core to the thread that drives it.
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let host: Shared = Arc::new(
        hetsparse_cpu::CpuBackend::with_threads(cores.saturating_sub(1).max(1))
            .expect("CPU backend"),
    );
    for (name, free, limited) in gpus(budget) {
        let hybrid = || vec![host.clone(), limited.clone()];
        // Pushed to only with the cuda feature.
        #[allow(unused_mut)]
        let mut runs: Vec<(String, Scheduler<f64>)> = vec![
            (
                format!("{name} (no budget)"),
                Scheduler::from_shared(vec![free]),
            ),
            (
                format!("{name} out-of-core"),
                Scheduler::from_shared(vec![limited.clone()]),
            ),
            (
                format!("{name} out-of-core, C in place"),
                Scheduler::from_shared(vec![limited.clone()]).host_memory(0),
            ),
            (
                format!("cpu + {name} out-of-core, work stealing"),
                Scheduler::from_shared(hybrid()),
            ),
            (
                format!("cpu + {name} out-of-core, stealing, always shared"),
                Scheduler::from_shared(hybrid()).share_always(),
            ),
            (
                format!("cpu + {name} out-of-core, densest-first"),
                Scheduler::from_shared(hybrid()).policy(Policy::DensestFirst),
            ),
        ];
        #[cfg(feature = "cuda")]
        if name == BackendKind::Cuda && std::env::var("HETSPARSE_OOC_LANES").is_ok_and(|v| v == "1")
        {
            let lane = || -> Shared {
                Arc::new(
                    hetsparse_cuda::CudaBackend::new()
                        .expect("cuda")
                        .with_memory_budget(budget / 2),
                )
            };
            runs.push((
                "cuda out-of-core, two lanes of half the budget".into(),
                Scheduler::from_shared(vec![lane(), lane()]).share_always(),
            ));
            runs.push((
                "cuda out-of-core, one lane of half the budget".into(),
                Scheduler::from_shared(vec![lane()]),
            ));
        }
        for (label, s) in runs {
            match best_of(reps, || {
                s.spgemm(&a, &b, SpgemmAlgorithm::Auto)
                    .map_err(|e| eprintln!("{label}: {e}"))
                    .ok()
            }) {
                Some((t, c)) => {
                    let (chunks, shares) = s.last_report().map_or((1, String::new()), |r| {
                        let chunks: usize = r.devices.iter().map(|d| d.chunks).sum();
                        let shares = if r.devices.len() > 1 {
                            let parts: Vec<String> = r
                                .shares()
                                .iter()
                                .map(|x| format!("{:.0}%", x * 100.0))
                                .collect();
                            format!(", shares {}", parts.join(" + "))
                        } else {
                            String::new()
                        };
                        (chunks.max(1), shares)
                    });
                    let _ = writeln!(
                        table,
                        "| {label} ({chunks} chunks{shares}) | {:.1} | {:.2} | {} |",
                        t.as_secs_f64() * 1e3,
                        gb(c_bytes) / t.as_secs_f64(),
                        c == expected
                            || (c.col_indices() == expected.col_indices()
                                && c.values()
                                    .iter()
                                    .zip(expected.values())
                                    .all(|(x, y)| (x - y).abs() <= 1e-9 * (1.0 + y.abs())))
                    );
                }
                None => {
                    let _ = writeln!(table, "| {label} | failed | | |");
                }
            }
        }
    }
    println!("{table}");
    if let Ok(dir) = std::env::var("HETSPARSE_BENCH_OUT") {
        let _ = std::fs::write(std::path::Path::new(&dir).join("out_of_core.md"), &table);
    }
}
