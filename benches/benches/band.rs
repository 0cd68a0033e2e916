//! Matam et al.'s hybrid split for band matrices (§IV.C): DIA × DIA of band matrices on the CPU
//! backend alone, on the first GPU backend alone, and on a scheduler over both that splits C's
//! rows by the costs it calibrated on the machine (α, β, γ) on every call (`share_always`),
//! beside a sweep of the CPU's share of the rows, t = 0, 10, …, 100 %
//! (`Policy::RowSplitAssumed`), to check the split it chose; then the scheduler as users get it,
//! which splits only while its runs say the split beats the faster backend alone. Each result
//! is checked against the CPU backend's.
//!
//! `cargo bench -p hetsparse-bench --features cuda --bench band` prints markdown tables (and
//! writes them to `$HETSPARSE_BENCH_OUT/band.md` when that is set). `HETSPARSE_BENCH_QUICK=1`
//! for small sizes, `HETSPARSE_BENCH_REPS=N` timed calls after one warm-up (default 3; the
//! minimum is reported), `HETSPARSE_BENCH_HYBRID_THREADS=N` for the CPU backend inside the
//! scheduler (default: all cores but one, which drives the GPU). With the `cuda` feature,
//! `HETSPARSE_BENCH_BAND_BIG_ROWS=N` adds one product of `N` rows on a CUDA backend whose
//! memory budget is `HETSPARSE_BENCH_BAND_BUDGET_GB` (default 70), to run a product larger than
//! the device (4.5e8 rows make about 94 GB of A, B and C); `HETSPARSE_BENCH_BAND_ONLY_BIG=1`
//! runs only that one.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hetsparse_bench::backends::{backends, Selection};
use hetsparse_core::{Backend, DeviceKind, Dia};
use hetsparse_sched::{BandWork, Policy, Scheduler};

#[path = "common/timing.rs"]
mod timing;
use timing::best_of;

fn env_usize(name: &str) -> Option<usize> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// A square band matrix of `rows` rows with `width` diagonals centred on the main one.
fn band(rows: usize, width: usize, seed: u64) -> Dia<f64> {
    let low = -((width / 2) as i64);
    let offsets: Vec<i64> = (0..width as i64).map(|d| low + d).collect();
    hetsparse_core::generate::band_dia(rows, rows, &offsets, seed).expect("band matrix")
}

/// `A · A` for a band of width 9 and `rows` rows on a CUDA backend limited to `budget_gb`,
/// so that A, B and C together exceed the device's budget; three blocks of 1000 rows are
/// checked against the CPU backend's rows.
#[cfg(feature = "cuda")]
fn largest_product(rows: usize, budget_gb: u64, cpu: &Arc<dyn Backend<f64>>) -> String {
    use std::mem::MaybeUninit;
    let start = Instant::now();
    let a = band(rows, 9, 7);
    let made = start.elapsed();
    let gpu = match hetsparse_cuda::CudaBackend::new() {
        Ok(g) => g.with_memory_budget(budget_gb << 30),
        Err(e) => return format!("no CUDA device: {e}\n"),
    };
    let start = Instant::now();
    let c = match gpu.dia_spgemm(&a, &a) {
        Ok(c) => c,
        Err(e) => return format!("out-of-core DIA product of {rows} rows failed: {e}\n"),
    };
    let secs = start.elapsed().as_secs_f64();
    let gb = |n: usize| (n * 8) as f64 / 1e9;
    let offsets = c.offsets().to_vec();
    let mut correct = true;
    for r0 in [0, rows / 2, rows.saturating_sub(1000)] {
        let range = r0..(r0 + 1000).min(rows);
        let mut block = vec![MaybeUninit::<f64>::uninit(); range.len() * offsets.len()];
        let mut slots: Vec<&mut [MaybeUninit<f64>]> = block.chunks_mut(range.len()).collect();
        if cpu
            .dia_spgemm_rows(&a, &a, range.clone(), &offsets, &mut slots)
            .is_err()
        {
            correct = false;
            continue;
        }
        for (d, piece) in block.chunks(range.len()).enumerate() {
            for (k, x) in piece.iter().enumerate() {
                // SAFETY: dia_spgemm_rows wrote every slot.
                let x = unsafe { x.assume_init() };
                let y = c.diagonal(d)[range.start + k];
                correct &= (x - y).abs() <= 1e-12 * (1.0 + y.abs());
            }
        }
    }
    let total = a.data().len() * 2 + c.data().len();
    format!(
        "\nOut of core: A · A, band of 9 diagonals, {rows} rows ({:.1} s to make A): A {:.1} GB, B (the same matrix, its rows uploaded once per block and A's copied from them on the device) {:.1} GB, C {:.1} GB ({} diagonals), {:.1} GB in all against a device budget of {budget_gb} GB on the {}; {:.2} s, C at {:.1} GB/s; rows checked against the CPU backend: {correct}\n",
        made.as_secs_f64(),
        gb(a.data().len()),
        gb(a.data().len()),
        gb(c.data().len()),
        offsets.len(),
        gb(total),
        hetsparse_core::Device::info(&gpu).name,
        secs,
        gb(c.data().len()) / secs,
    )
}

/// Whether `x` and `y` hold the same values on every diagonal (a diagonal one lacks is zeros),
/// to a relative 1e-12.
fn same(x: &Dia<f64>, y: &Dia<f64>) -> bool {
    if x.shape() != y.shape() {
        return false;
    }
    let rows = x.nrows();
    let zeros = vec![0.0; rows];
    let diagonal = |m: &Dia<f64>, off: i64| -> Vec<f64> {
        m.offsets()
            .binary_search(&off)
            .map_or_else(|_| zeros.clone(), |d| m.diagonal(d).to_vec())
    };
    let mut offsets: Vec<i64> = x.offsets().iter().chain(y.offsets()).copied().collect();
    offsets.sort_unstable();
    offsets.dedup();
    offsets.iter().all(|&off| {
        let (a, b) = (diagonal(x, off), diagonal(y, off));
        a.iter()
            .zip(&b)
            .all(|(p, q)| (p - q).abs() <= 1e-12 * (1.0 + q.abs()))
    })
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn main() {
    let quick = std::env::var("HETSPARSE_BENCH_QUICK").is_ok_and(|v| v == "1");
    let only_largest = std::env::var("HETSPARSE_BENCH_BAND_ONLY_BIG").is_ok_and(|v| v == "1");
    let reps = env_usize("HETSPARSE_BENCH_REPS").unwrap_or(3).max(1);
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let hybrid_threads =
        env_usize("HETSPARSE_BENCH_HYBRID_THREADS").unwrap_or(cores.saturating_sub(1).max(1));
    let rows = if quick { 1 << 16 } else { 1 << 22 };
    let calibration_rows = if quick { 1 << 14 } else { 1 << 20 };

    let (single, unavailable) = backends(Selection::default()).expect("constructing the backends");
    for u in &unavailable {
        eprintln!("skipping backend {}: {}", u.name, u.reason);
    }
    let single: Vec<Arc<dyn Backend<f64>>> =
        single.into_iter().map(|r| Arc::from(r.backend)).collect();
    let Some(cpu) = single
        .iter()
        .find(|b| b.info().kind == DeviceKind::Cpu)
        .cloned()
    else {
        eprintln!("no CPU backend compiled in (--features cpu)");
        return;
    };
    let Some(gpu) = single
        .iter()
        .find(|b| b.info().kind == DeviceKind::Gpu)
        .cloned()
    else {
        eprintln!("no GPU backend found: the band split needs a CPU and a GPU");
        return;
    };
    if only_largest {
        #[cfg(feature = "cuda")]
        if let Some(big) = env_usize("HETSPARSE_BENCH_BAND_BIG_ROWS") {
            let budget = env_usize("HETSPARSE_BENCH_BAND_BUDGET_GB").unwrap_or(70) as u64;
            let largest = largest_product(big, budget, &cpu);
            print!("{largest}");
            if let Ok(dir) = std::env::var("HETSPARSE_BENCH_OUT") {
                let _ = std::fs::write(std::path::Path::new(&dir).join("band-largest.md"), largest);
            }
        }
        return;
    }
    let hybrid_cpu: Arc<dyn Backend<f64>> =
        Arc::new(hetsparse_cpu::CpuBackend::with_threads(hybrid_threads).expect("CPU backend"));
    let scheduler = Scheduler::from_shared(vec![hybrid_cpu.clone(), gpu.clone()]);

    let start = Instant::now();
    let costs = scheduler
        .calibrate_band(calibration_rows)
        .expect("calibration");
    let calibration = start.elapsed();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Calibration: {calibration_rows} and {} rows, 4 band widths, {:.0} ms in all. CPU {} ({hybrid_threads} threads), GPU {}.\n",
        calibration_rows / 8,
        ms(calibration),
        cpu.info().name,
        gpu.info().name
    );
    let _ = writeln!(
        out,
        "| backend | fixed µs | ns per product (α, β) | ns per output slot (γ) |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|");
    for (name, cost) in ["cpu", "gpu"].iter().zip(&costs) {
        match cost {
            Some(c) => {
                let _ = writeln!(
                    out,
                    "| {name} | {:.1} | {:.4} | {:.4} |",
                    c.fixed_secs * 1e6,
                    c.secs_per_product * 1e9,
                    c.secs_per_output * 1e9
                );
            }
            None => {
                let _ = writeln!(out, "| {name} | failed | | |");
            }
        }
    }
    print!("{out}");
    let Some(known) = costs.iter().copied().collect::<Option<Vec<_>>>() else {
        eprintln!("a backend failed its calibration");
        return;
    };
    // Splits every product by the calibrated model (Matam's t), whatever runs measure.
    let modelled = Scheduler::from_shared(vec![hybrid_cpu.clone(), gpu.clone()])
        .share_always()
        .with_band_costs(&known)
        .expect("costs");

    let sweep: Vec<usize> = (0..=10).map(|k| k * 10).collect();
    let mut table = String::new();
    let _ = writeln!(
        table,
        "\n| Ad × Bd | rows | R (products) | S (slots) | cpu ms | gpu ms | model t | model split ms | best sweep t | best sweep ms | model split vs best sweep | scheduler ms | scheduler vs best single | correct |"
    );
    let _ = writeln!(
        table,
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
    );
    let mut sweep_table = String::new();
    let _ = writeln!(
        sweep_table,
        "\n| Ad × Bd | {} |",
        sweep
            .iter()
            .map(|t| format!("t = {t} %"))
            .collect::<Vec<_>>()
            .join(" | ")
    );
    let _ = writeln!(sweep_table, "|---|{}", "---:|".repeat(sweep.len()));
    for (k, &(wa, wb)) in [(3, 3), (7, 7), (15, 15), (31, 31)].iter().enumerate() {
        let a = band(rows, wa, 2 * k as u64);
        let b = band(rows, wb, 2 * k as u64 + 1);
        let work = BandWork::of(&a, &b).expect("work");
        let (cpu_time, expected) =
            best_of(reps, || cpu.dia_spgemm(&a, &b).ok()).expect("CPU DIA×DIA");
        let gpu_run = best_of(reps, || gpu.dia_spgemm(&a, &b).ok());
        // The model's split on every call, then the scheduler as users get it: it splits
        // while its runs say the split beats the faster backend alone.
        let split = best_of(reps, || modelled.dia_spgemm(&a, &b).ok());
        let model_t = modelled
            .last_report()
            .map(|r| r.shares()[0] * 100.0)
            .unwrap_or(f64::NAN);
        let learned = Scheduler::from_shared(vec![hybrid_cpu.clone(), gpu.clone()])
            .with_band_costs(&known)
            .expect("costs");
        let chosen = best_of(reps, || learned.dia_spgemm(&a, &b).ok());
        let mut correct = gpu_run.as_ref().is_some_and(|(_, c)| same(c, &expected))
            && split.as_ref().is_some_and(|(_, c)| same(c, &expected))
            && chosen.as_ref().is_some_and(|(_, c)| same(c, &expected));
        let mut swept = Vec::with_capacity(sweep.len());
        for &t in &sweep {
            let forced = Scheduler::from_shared(vec![hybrid_cpu.clone(), gpu.clone()])
                .policy(Policy::RowSplitAssumed(vec![t as f64, (100 - t) as f64]))
                .min_chunk_products(1);
            let run = best_of(reps, || forced.dia_spgemm(&a, &b).ok());
            correct &= run.as_ref().is_some_and(|(_, c)| same(c, &expected));
            swept.push(run.map(|(d, _)| d));
        }
        let best = swept
            .iter()
            .enumerate()
            .filter_map(|(i, d)| Some((sweep[i], (*d)?)))
            .min_by_key(|(_, d)| *d);
        let gpu_time = gpu_run.as_ref().map(|(d, _)| *d);
        let best_single = gpu_time.map_or(cpu_time, |g| g.min(cpu_time));
        let split_time = split.as_ref().map(|(d, _)| *d);
        let chosen_time = chosen.as_ref().map(|(d, _)| *d);
        let fmt = |d: Option<Duration>| d.map_or("failed".into(), |d| format!("{:.2}", ms(d)));
        let ratio = |x: Duration, y: Option<Duration>| {
            y.map_or("-".into(), |y| {
                format!("{:.2}x", x.as_secs_f64() / y.as_secs_f64())
            })
        };
        let _ = writeln!(
            table,
            "| {wa} × {wb} | {rows} | {} | {} | {:.2} | {} | {model_t:.1} % | {} | {} | {} | {} | {} | {} | {correct} |",
            work.products,
            work.outputs,
            ms(cpu_time),
            fmt(gpu_time),
            fmt(split_time),
            best.map_or("-".into(), |(t, _)| format!("{t} %")),
            fmt(best.map(|(_, d)| d)),
            best.map_or("-".into(), |(_, d)| ratio(d, split_time)),
            fmt(chosen_time),
            ratio(best_single, chosen_time),
        );
        let _ = writeln!(
            sweep_table,
            "| {wa} × {wb} | {} |",
            swept
                .iter()
                .map(|d| fmt(*d))
                .collect::<Vec<_>>()
                .join(" | ")
        );
        eprintln!("done {wa} × {wb}");
    }
    print!("{table}{sweep_table}");
    #[allow(unused_mut)]
    let mut largest = String::new();
    #[cfg(feature = "cuda")]
    if let Some(big) = env_usize("HETSPARSE_BENCH_BAND_BIG_ROWS") {
        let budget = env_usize("HETSPARSE_BENCH_BAND_BUDGET_GB").unwrap_or(70) as u64;
        largest = largest_product(big, budget, &cpu);
        print!("{largest}");
    }
    if let Ok(dir) = std::env::var("HETSPARSE_BENCH_OUT") {
        let _ = std::fs::write(
            std::path::Path::new(&dir).join("band.md"),
            format!("{out}{table}{sweep_table}{largest}"),
        );
    }
}
