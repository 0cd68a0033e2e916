//! SpGEMM over several GPUs (issue 17): every benchmark class, f64, whole calls from host
//! memory, on one GPU alone (the CUDA backend, no scheduler), then on schedulers over the first
//! two GPUs, over all GPUs (when there are more than two) and over all GPUs and the CPU, each
//! under work stealing (the default: it learns speeds and may run the fastest device alone) and
//! always shared (every product cut into chunks over every device). Every result is checked
//! against the first one of its class (same structure, values to a relative 1e-9). Then one
//! out-of-core product, whose C is several times a per-GPU memory budget, on one budgeted GPU
//! and on all of them.
//!
//! ```text
//! cargo bench -p hetsparse-bench --features cuda --bench multi_gpu [-- OPTIONS] [CLASS...]
//! ```
//!
//! Options (most also as an environment variable, which reaches the binary through `cargo
//! bench` too):
//! - `CLASS...` or `--classes a,b` (`HETSPARSE_BENCH_CLASSES`): only these classes (`stencil3d
//!   banded powerlaw uniform road skewed lp dense`);
//! - `--sizes gpu|full|quick` (`HETSPARSE_BENCH_SIZES`, default `gpu`): the GPU sizes of
//!   `hetsparse_bench::cases::gpu_cases` (10^8–10^9 intermediate products), or the `cargo
//!   xtask bench` sizes; `--divisor N` (`HETSPARSE_BENCH_SIZE_DIVISOR`) divides every size;
//! - `--reps N` (`HETSPARSE_BENCH_REPS`, default 3): timed calls after the warm-up (one call;
//!   for work stealing one plus one per device, the calls in which it learns);
//! - `--variants stealing,shared` (`HETSPARSE_BENCH_VARIANTS`): which scheduler variants;
//! - `--cpu-threads N` (`HETSPARSE_BENCH_HYBRID_THREADS`): the CPU backend's threads in the
//!   schedulers (default: the cores less one per GPU, which drive the GPUs);
//! - `--ooc-class C --ooc-size N --ooc-budget-gb G` (`HETSPARSE_OOC_CLASS`, `HETSPARSE_OOC_SIZE`,
//!   `HETSPARSE_OOC_BUDGET_GB`; default uniform at its GPU size whatever `--sizes` says (over
//!   `--divisor`): A and B 0.4 GB each, C 3.1 GB, budget 1 GB per GPU); `--no-ooc` leaves it
//!   out, `--ooc-only` runs only it;
//! - `--deadline S` (`HETSPARSE_BENCH_DEADLINE_S`, default 330): no call starts after S seconds
//!   (the classes stop 60 s earlier to leave the out-of-core case its time), and at S + 45 s a
//!   watchdog ends the process (status 124) whatever is in flight: with the defaults the run
//!   ends within 6.25 minutes (about 2–4 expected on two H100s);
//! - `--standin N`: N one-thread CPU backends play the GPUs (budgets are not applied), to check
//!   the harness on a machine without a GPU.
//!
//! Output: on standard output the tables in markdown, a row as soon as it is measured (so a
//! run cut short keeps what it measured), then a summary line; progress on standard error.
//! Exit status 0 when every result agreed, 1 when one disagreed or failed, 2 for bad options,
//! 124 when the watchdog ended the run. Without a GPU it prints that it skipped and exits 0
//! (1 with `HETSPARSE_REQUIRE_DEVICE=1`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use hetsparse_bench::cases::{cases, gpu_cases, Case, Scale, SEED};
use hetsparse_core::backend::memory::csr_bytes;
use hetsparse_core::generate::{self, MatrixClass};
use hetsparse_core::{analysis, Backend, Csr, Error, SpgemmAlgorithm};
use hetsparse_cpu::CpuBackend;
use hetsparse_cuda::CudaBackend;
use hetsparse_sched::{Policy, RunReport, Scheduler};

type Shared = Arc<dyn Backend<f64>>;

const USAGE: &str =
    "usage: multi_gpu [CLASS...] [--classes a,b] [--sizes gpu|full|quick] [--divisor N]
                 [--reps N] [--variants stealing,shared] [--cpu-threads N]
                 [--ooc-class C] [--ooc-size N] [--ooc-budget-gb G] [--no-ooc] [--ooc-only]
                 [--deadline SECONDS] [--standin N]";

/// Time the out-of-core case is left at the end of the run.
const OOC_RESERVE: Duration = Duration::from_secs(60);

/// How long after the deadline the watchdog ends the process.
const GRACE: Duration = Duration::from_secs(45);

/// A warm-up call slower than this leaves one timed call instead of `reps`.
const SLOW_CALL: Duration = Duration::from_secs(20);

/// Relative tolerance of values against the first result.
const TOLERANCE: f64 = 1e-9;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Sizes {
    Gpu,
    Scale(Scale),
}

struct Options {
    classes: Vec<String>,
    sizes: Sizes,
    divisor: usize,
    reps: usize,
    stealing: bool,
    shared: bool,
    cpu_threads: Option<usize>,
    ooc_class: MatrixClass,
    ooc_size: Option<usize>,
    ooc_budget_gb: f64,
    ooc: bool,
    classes_on: bool,
    deadline: Duration,
    standin: usize,
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

fn number<T: std::str::FromStr>(what: &str, v: &str) -> Result<T, String> {
    v.parse()
        .map_err(|_| format!("{what}: `{v}` is not a valid number"))
}

fn class_named(v: &str) -> Result<MatrixClass, String> {
    MatrixClass::ALL
        .into_iter()
        .find(|c| c.name() == v)
        .ok_or_else(|| {
            let names: Vec<&str> = MatrixClass::ALL.iter().map(|c| c.name()).collect();
            format!("unknown class `{v}`; classes: {}", names.join(" "))
        })
}

fn parse_sizes(v: &str) -> Result<Sizes, String> {
    match v {
        "gpu" => Ok(Sizes::Gpu),
        other => other
            .parse::<Scale>()
            .map(Sizes::Scale)
            .map_err(|_| format!("--sizes `{other}`: expected gpu, full or quick")),
    }
}

fn parse(args: &[String]) -> Result<Options, String> {
    let mut o = Options {
        classes: Vec::new(),
        sizes: Sizes::Gpu,
        divisor: 1,
        reps: 3,
        stealing: true,
        shared: true,
        cpu_threads: None,
        ooc_class: MatrixClass::Uniform,
        ooc_size: None,
        ooc_budget_gb: 1.0,
        ooc: true,
        classes_on: true,
        deadline: Duration::from_secs(330),
        standin: 0,
    };
    // The environment first, so that the command line overrides it.
    if let Some(v) = env("HETSPARSE_BENCH_CLASSES") {
        o.classes = v.split(',').map(str::to_string).collect();
    }
    let mut variants = env("HETSPARSE_BENCH_VARIANTS");
    let mut set = |o: &mut Options, flag: &str, v: &str| -> Result<(), String> {
        match flag {
            "--classes" => o.classes = v.split(',').map(str::to_string).collect(),
            "--sizes" => o.sizes = parse_sizes(v)?,
            "--divisor" => o.divisor = number::<usize>(flag, v)?.max(1),
            "--reps" => o.reps = number::<usize>(flag, v)?.max(1),
            "--variants" => variants = Some(v.to_string()),
            "--cpu-threads" => o.cpu_threads = Some(number::<usize>(flag, v)?.max(1)),
            "--ooc-class" => o.ooc_class = class_named(v)?,
            "--ooc-size" => o.ooc_size = Some(number::<usize>(flag, v)?.max(1)),
            "--ooc-budget-gb" => {
                o.ooc_budget_gb = number::<f64>(flag, v)?;
                if o.ooc_budget_gb.is_nan() || o.ooc_budget_gb <= 0.0 {
                    return Err(format!("{flag}: the budget must be positive"));
                }
            }
            "--deadline" => o.deadline = Duration::from_secs(number::<u64>(flag, v)?),
            "--standin" => o.standin = number(flag, v)?,
            _ => return Err(format!("unknown flag {flag}")),
        }
        Ok(())
    };
    for (var, flag) in [
        ("HETSPARSE_BENCH_SIZES", "--sizes"),
        ("HETSPARSE_BENCH_SIZE_DIVISOR", "--divisor"),
        ("HETSPARSE_BENCH_REPS", "--reps"),
        ("HETSPARSE_BENCH_HYBRID_THREADS", "--cpu-threads"),
        ("HETSPARSE_OOC_CLASS", "--ooc-class"),
        ("HETSPARSE_OOC_SIZE", "--ooc-size"),
        ("HETSPARSE_OOC_BUDGET_GB", "--ooc-budget-gb"),
        ("HETSPARSE_BENCH_DEADLINE_S", "--deadline"),
    ] {
        if let Some(v) = env(var) {
            set(&mut o, flag, &v).map_err(|e| format!("{var}: {e}"))?;
        }
    }
    let mut positional = Vec::new();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            // `cargo bench` passes `--bench`.
            "--bench" => {}
            // Test runners ask for a list of tests first; this harness has none to give.
            "--list" => return Err("--list".into()),
            "--no-ooc" => o.ooc = false,
            "--ooc-only" => o.classes_on = false,
            "--help" | "-h" => return Err(String::new()),
            flag if flag.starts_with("--") => {
                let v = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
                set(&mut o, flag, v)?;
            }
            class => positional.push(class.to_string()),
        }
    }
    if !positional.is_empty() {
        o.classes = positional;
    }
    o.classes.retain(|c| !c.is_empty());
    for c in &o.classes {
        class_named(c)?;
    }
    if let Some(v) = variants {
        o.stealing = false;
        o.shared = false;
        for variant in v.split(',') {
            match variant {
                "stealing" => o.stealing = true,
                "shared" => o.shared = true,
                other => return Err(format!("--variants: unknown variant `{other}`")),
            }
        }
    }
    Ok(o)
}

/// Seconds since the start, for progress lines.
struct Clock(Instant);

impl Clock {
    fn log(&self, what: &str) {
        eprintln!("[{:6.1} s] {what}", self.0.elapsed().as_secs_f64());
    }
}

/// Ends the process at `limit`: a lost GPU or a driver call that never returns must not hold
/// a remote machine. Rows already printed stay on standard output.
fn watchdog(limit: Duration) {
    let spawned = std::thread::Builder::new()
        .name("watchdog".into())
        .spawn(move || {
            std::thread::sleep(limit);
            let message = format!(
                "TIMEOUT: the run passed {:.0} s (deadline + {:.0} s) and was ended; the rows \
                 above are what was measured",
                limit.as_secs_f64(),
                GRACE.as_secs_f64()
            );
            println!("\n{message}");
            eprintln!("{message}");
            std::process::exit(124);
        });
    if let Err(e) = spawned {
        eprintln!("could not start the watchdog ({e}): the run is not bounded");
    }
}

/// A device that plays a GPU: its label in the tables, its backend, and how to make another
/// backend of it with a memory budget.
struct Gpu {
    label: String,
    backend: Shared,
    ordinal: u32,
    standin: bool,
}

impl Gpu {
    /// A backend of its own on the same device, limited to `bytes`: the budget is set on the
    /// backend object, so the unlimited one stays as it is.
    fn budgeted(&self, bytes: u64) -> Result<Shared, Error> {
        if self.standin {
            return Ok(Arc::new(CpuBackend::with_threads(1)?));
        }
        Ok(Arc::new(
            CudaBackend::with_device(self.ordinal)?.with_memory_budget(bytes),
        ))
    }
}

/// Every GPU the driver reports, or `Err` with why there is none.
fn find_gpus(o: &Options, clock: &Clock) -> Result<Vec<Gpu>, String> {
    if o.standin > 0 {
        return (0..o.standin as u32)
            .map(|i| {
                Ok(Gpu {
                    label: format!("standin:{i}"),
                    backend: Arc::new(CpuBackend::with_threads(1).map_err(|e| e.to_string())?),
                    ordinal: i,
                    standin: true,
                })
            })
            .collect();
    }
    let count = hetsparse_cuda::device_count().map_err(|e| e.to_string())?;
    if count == 0 {
        return Err("the CUDA driver reports no GPU".into());
    }
    let mut gpus = Vec::new();
    for ordinal in 0..count {
        let backend = CudaBackend::with_device(ordinal).map_err(|e| {
            format!("the driver reports {count} GPUs but GPU {ordinal} did not open: {e}")
        })?;
        let info = hetsparse_core::Device::info(&backend);
        clock.log(&format!(
            "cuda:{ordinal}: {} ({:.1} GiB, {} SMs)",
            info.name,
            info.memory_bytes as f64 / f64::from(1u32 << 30),
            info.compute_units
        ));
        gpus.push(Gpu {
            label: format!("cuda:{ordinal}"),
            backend: Arc::new(backend),
            ordinal,
            standin: false,
        });
    }
    Ok(gpus)
}

/// What differs between `c` and `expected`, if anything.
fn difference(c: &Csr<f64>, expected: &Csr<f64>) -> Option<String> {
    if c.shape() != expected.shape() {
        return Some(format!("shape {:?} vs {:?}", c.shape(), expected.shape()));
    }
    if c.row_offsets() != expected.row_offsets() {
        return Some(format!(
            "row offsets differ (nnz {} vs {})",
            c.nnz(),
            expected.nnz()
        ));
    }
    if c.col_indices() != expected.col_indices() {
        return Some("column indices differ".into());
    }
    c.values()
        .iter()
        .zip(expected.values())
        .position(|(x, y)| (x - y).abs() > TOLERANCE * (1.0 + y.abs()))
        .map(|i| format!("value {i}: {} vs {}", c.values()[i], expected.values()[i]))
}

/// The timed calls of one run.
struct Timed {
    /// Sorted.
    times: Vec<Duration>,
    /// The last call's result.
    last: Csr<f64>,
    /// Whether the times are of warm-up calls only (the deadline came first).
    warm_up_only: bool,
}

impl Timed {
    fn min(&self) -> Duration {
        self.times[0]
    }

    fn median(&self) -> Duration {
        self.times[self.times.len() / 2]
    }
}

/// `warm_ups` untimed calls then up to `reps` timed ones, none started after `stop`.
fn time_calls(
    warm_ups: usize,
    reps: usize,
    stop: Instant,
    mut f: impl FnMut() -> Result<Csr<f64>, Error>,
) -> Result<Timed, Error> {
    let mut warm_times = Vec::new();
    let mut last = None;
    for k in 0..warm_ups.max(1) {
        if k > 0 && Instant::now() >= stop {
            break;
        }
        let start = Instant::now();
        last = Some(f()?);
        warm_times.push(start.elapsed());
    }
    let reps = if warm_times[0] > SLOW_CALL { 1 } else { reps };
    let mut times = Vec::new();
    for _ in 0..reps {
        if Instant::now() >= stop {
            break;
        }
        // The previous result goes first, so that two large results are never held at once.
        drop(last.take());
        let start = Instant::now();
        last = Some(f()?);
        times.push(start.elapsed());
    }
    let warm_up_only = times.is_empty();
    if warm_up_only {
        times = warm_times;
    }
    times.sort();
    let last = last.ok_or_else(|| Error::InvalidArgument("no call ran".into()))?;
    Ok(Timed {
        times,
        last,
        warm_up_only,
    })
}

fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1e3)
}

fn gb(bytes: u64) -> f64 {
    bytes as f64 / 1e9
}

/// "cuda:0 48%, cuda:1 52%" from a report, or for a run on one device alone.
fn shares(labels: &[String], report: Option<&RunReport>) -> String {
    match report {
        Some(r) => labels
            .iter()
            .zip(r.shares())
            .zip(&r.devices)
            .map(|((label, share), d)| {
                let failed = if d.failure.is_some() { " (failed)" } else { "" };
                format!("{label} {:.0}%{failed}", share * 100.0)
            })
            .collect::<Vec<_>>()
            .join(", "),
        None => format!("{} 100%", labels.join(", ")),
    }
}

/// One run to measure: a label, the devices' labels, and what it calls.
struct Run {
    label: String,
    labels: Vec<String>,
    warm_ups: usize,
    backend: RunOn,
}

enum RunOn {
    Alone(Shared),
    Scheduler(Box<Scheduler<f64>>),
}

impl Run {
    fn call(&self, a: &Csr<f64>, b: &Csr<f64>) -> Result<Csr<f64>, Error> {
        match &self.backend {
            RunOn::Alone(backend) => backend.spgemm(a, b, SpgemmAlgorithm::Auto),
            RunOn::Scheduler(s) => s.spgemm(a, b, SpgemmAlgorithm::Auto),
        }
    }

    fn report(&self) -> Option<RunReport> {
        match &self.backend {
            RunOn::Alone(_) => None,
            RunOn::Scheduler(s) => s.last_report(),
        }
    }
}

/// The runs of one class, each scheduler made fresh so that learned speeds start over.
fn class_runs(o: &Options, gpus: &[Gpu], cpu: &Shared) -> Vec<Run> {
    let mut runs = vec![Run {
        label: format!("1 GPU ({} alone)", gpus[0].label),
        labels: vec![gpus[0].label.clone()],
        warm_ups: 1,
        backend: RunOn::Alone(Arc::clone(&gpus[0].backend)),
    }];
    let mut sets: Vec<(String, Vec<(String, Shared)>)> = Vec::new();
    let gpu = |g: &Gpu| (g.label.clone(), Arc::clone(&g.backend));
    if gpus.len() >= 2 {
        sets.push(("2 GPUs".into(), gpus[..2].iter().map(gpu).collect()));
    }
    if gpus.len() > 2 {
        sets.push((
            format!("{} GPUs", gpus.len()),
            gpus.iter().map(gpu).collect(),
        ));
    }
    let mut with_cpu: Vec<(String, Shared)> = gpus.iter().map(gpu).collect();
    with_cpu.push(("cpu".into(), Arc::clone(cpu)));
    sets.push((
        format!(
            "{} GPU{} + CPU",
            gpus.len(),
            if gpus.len() > 1 { "s" } else { "" }
        ),
        with_cpu,
    ));
    for (name, members) in sets {
        let (labels, backends): (Vec<String>, Vec<Shared>) = members.into_iter().unzip();
        let n = backends.len();
        if o.stealing {
            runs.push(Run {
                label: format!("{name}, work stealing"),
                labels: labels.clone(),
                // One shared call, then one alone per device: what it learns before it settles.
                warm_ups: 1 + n,
                backend: RunOn::Scheduler(Box::new(
                    Scheduler::from_shared(backends.clone()).policy(Policy::WorkStealing),
                )),
            });
        }
        if o.shared {
            runs.push(Run {
                label: format!("{name}, always shared"),
                labels,
                warm_ups: 1,
                backend: RunOn::Scheduler(Box::new(
                    Scheduler::from_shared(backends)
                        .policy(Policy::WorkStealing)
                        .share_always(),
                )),
            });
        }
    }
    runs
}

/// The size of `class` under the chosen sizes.
fn size_of(o: &Options, class: MatrixClass) -> usize {
    let list: Vec<Case> = match o.sizes {
        Sizes::Gpu => gpu_cases(),
        Sizes::Scale(scale) => cases(scale),
    };
    let size = list.iter().find(|c| c.class == class).map_or(1, |c| c.size);
    (size / o.divisor).max(1)
}

/// Tallies of the whole run, for the summary and the exit status.
#[derive(Default)]
struct Tally {
    agreed: usize,
    wrong: Vec<String>,
    skipped: Vec<String>,
}

/// Header of both tables.
fn table_header() {
    println!(
        "| class | products | nnz(C) | run | min ms | median ms | speed-up vs 1 GPU | shares of products (last call) | chunks | check |"
    );
    println!("|---|---:|---:|---|---:|---:|---:|---|---|---|");
}

/// Measures `run` on `a · b` and prints its row (`prefix`: the class and products columns):
/// its result checked against `expected` (none: it is the reference), its minimum against
/// `baseline`. The measurement, if the calls succeeded.
#[allow(clippy::too_many_arguments)]
fn measure_row(
    o: &Options,
    clock: &Clock,
    tally: &mut Tally,
    stop: Instant,
    prefix: &str,
    run: &Run,
    (a, b): (&Csr<f64>, &Csr<f64>),
    expected: Option<&Csr<f64>>,
    baseline: Option<Duration>,
) -> Option<Timed> {
    let what = format!("{} {}", prefix.replace(" | ", " "), run.label);
    if Instant::now() >= stop {
        tally.skipped.push(what.clone());
        clock.log(&format!("{what}: skipped, out of time"));
        println!(
            "| {prefix} | | {} | | | | | | skipped: out of time |",
            run.label
        );
        return None;
    }
    clock.log(&format!(
        "{what}: {} warm-up call(s), then up to {} timed",
        run.warm_ups, o.reps
    ));
    let timed = match time_calls(run.warm_ups, o.reps, stop, || run.call(a, b)) {
        Ok(t) => t,
        Err(e) => {
            tally.wrong.push(format!("{what}: failed: {e}"));
            clock.log(&format!("{what}: FAILED: {e}"));
            println!("| {prefix} | | {} | | | | | | FAILED: {e} |", run.label);
            return None;
        }
    };
    let check = match expected {
        Some(expected) => match difference(&timed.last, expected) {
            None => {
                tally.agreed += 1;
                "agrees".to_string()
            }
            Some(d) => {
                tally.wrong.push(format!("{what}: {d}"));
                format!("WRONG: {d}")
            }
        },
        None => "reference".to_string(),
    };
    let speedup = baseline.map_or("1.00x".to_string(), |first| {
        format!("{:.2}x", first.as_secs_f64() / timed.min().as_secs_f64())
    });
    let report = run.report();
    let chunks = report.as_ref().map_or("1".to_string(), |r| {
        let done: usize = r.devices.iter().map(|d| d.chunks).sum();
        format!("{done} ({} planned)", r.chunks_planned)
    });
    let note = if timed.warm_up_only {
        " (warm-up calls only: out of time)"
    } else {
        ""
    };
    println!(
        "| {prefix} | {} | {}{note} | {} | {} | {speedup} | {} | {chunks} | {check} |",
        timed.last.nnz(),
        run.label,
        ms(timed.min()),
        ms(timed.median()),
        shares(&run.labels, report.as_ref())
    );
    clock.log(&format!(
        "{what}: min {} ms, median {} ms of {} call(s), {speedup}, {check}",
        ms(timed.min()),
        ms(timed.median()),
        timed.times.len()
    ));
    Some(timed)
}

fn classes_table(o: &Options, clock: &Clock, tally: &mut Tally, gpus: &[Gpu], cpu: &Shared) {
    let reserve = if o.ooc { OOC_RESERVE } else { Duration::ZERO };
    let stop = clock.0 + o.deadline.saturating_sub(reserve);
    println!();
    table_header();
    for class in MatrixClass::ALL {
        if !o.classes.is_empty() && !o.classes.iter().any(|c| c == class.name()) {
            continue;
        }
        let name = class.name();
        if Instant::now() >= stop {
            tally.skipped.push(name.to_string());
            clock.log(&format!("{name}: skipped, out of time"));
            println!("| {name} | | | (every run) | | | | | | skipped: out of time |");
            continue;
        }
        let size = size_of(o, class);
        clock.log(&format!("{name}: generating at size {size}"));
        let (a, b) = generate::product_operands::<f64>(class, size, SEED);
        let products = match analysis::total_products(&a, &b) {
            Ok(p) => p,
            Err(e) => {
                tally.wrong.push(format!("{name}: {e}"));
                println!("| {name} | | | | | | | | | FAILED: {e} |");
                continue;
            }
        };
        clock.log(&format!(
            "{name}: {}x{} times {}x{}, {} and {} entries, {products} products",
            a.nrows(),
            a.ncols(),
            b.nrows(),
            b.ncols(),
            a.nnz(),
            b.nnz()
        ));
        let prefix = format!("{name} | {products}");
        // The first result that comes back: what the others are checked and timed against.
        let mut reference: Option<(Csr<f64>, Duration)> = None;
        for run in class_runs(o, gpus, cpu) {
            let timed = measure_row(
                o,
                clock,
                tally,
                stop,
                &prefix,
                &run,
                (&a, &b),
                reference.as_ref().map(|r| &r.0),
                reference.as_ref().map(|r| r.1),
            );
            if let (None, Some(t)) = (&reference, timed) {
                let first = t.min();
                reference = Some((t.last, first));
            }
        }
    }
}

/// The out-of-core product on one budgeted GPU and on all of them, checked against the same
/// product on a GPU without a budget.
fn out_of_core(o: &Options, clock: &Clock, tally: &mut Tally, gpus: &[Gpu]) {
    let stop = clock.0 + o.deadline;
    let class = o.ooc_class;
    // At the GPU size whatever `--sizes` says: at the smaller ones C would fit the budget.
    let size = o.ooc_size.unwrap_or_else(|| {
        let gpu_size = gpu_cases()
            .iter()
            .find(|c| c.class == class)
            .map_or(1, |c| c.size);
        (gpu_size / o.divisor).max(1)
    });
    println!();
    if Instant::now() >= stop {
        tally.skipped.push("out of core".into());
        println!("Out of core: skipped, out of time");
        return;
    }
    clock.log(&format!(
        "out of core: generating {} at size {size}",
        class.name()
    ));
    let (a, b) = generate::product_operands::<f64>(class, size, SEED);
    let products = analysis::total_products(&a, &b).unwrap_or(0);
    let budget = (o.ooc_budget_gb * 1e9) as u64;
    let bytes = |m: &Csr<f64>| csr_bytes(m.nrows(), m.nnz(), 8);
    // The reference first, on a GPU without a budget: a budgeted backend also lowers what the
    // driver keeps cached for its device.
    clock.log("out of core: reference product on one GPU without a budget");
    let reference = match gpus[0].backend.spgemm(&a, &b, SpgemmAlgorithm::Auto) {
        Ok(c) => Some(c),
        Err(e) => {
            clock.log(&format!(
                "out of core: the unbudgeted reference failed ({e}); the first run is the reference"
            ));
            None
        }
    };
    let c_bytes = reference.as_ref().map(bytes);
    println!(
        "Out of core: {} size {size}: A {:.2} GB, B {:.2} GB, C {} GB; budget {:.3} GB per GPU{}{}",
        class.name(),
        gb(bytes(&a)),
        gb(bytes(&b)),
        c_bytes.map_or("?".to_string(), |c| format!("{:.2}", gb(c))),
        gb(budget),
        c_bytes.map_or(String::new(), |c| format!(
            " (C is {:.1}x the budget)",
            c as f64 / budget as f64
        )),
        if gpus[0].standin {
            " (stand-ins: budget not applied)"
        } else {
            ""
        }
    );
    if c_bytes.is_some_and(|c| c <= budget) {
        println!(
            "NOTE: C fits the budget, so this is not out of core; raise --ooc-size or lower --ooc-budget-gb"
        );
    }
    println!();
    table_header();
    let prefix = format!("{} out of core | {products}", class.name());
    let mut limited = Vec::new();
    for g in gpus {
        match g.budgeted(budget) {
            Ok(backend) => limited.push((g.label.clone(), backend)),
            Err(e) => {
                tally.wrong.push(format!("out of core: {}: {e}", g.label));
                println!(
                    "| {prefix} | | {} with a budget | | | | | | FAILED: {e} |",
                    g.label
                );
                return;
            }
        }
    }
    let mut sets = vec![(
        format!("1 GPU ({}), budget", limited[0].0),
        limited[..1].to_vec(),
    )];
    if limited.len() > 1 {
        sets.push((
            format!("{} GPUs, budget each", limited.len()),
            limited.clone(),
        ));
    }
    let mut expected = reference;
    let mut baseline: Option<Duration> = None;
    for (label, members) in sets {
        let (labels, backends): (Vec<String>, Vec<Shared>) = members.into_iter().unzip();
        let run = Run {
            label,
            labels,
            warm_ups: 1,
            backend: RunOn::Scheduler(Box::new(
                Scheduler::from_shared(backends)
                    .policy(Policy::WorkStealing)
                    .share_always(),
            )),
        };
        let timed = measure_row(
            o,
            clock,
            tally,
            stop,
            &prefix,
            &run,
            (&a, &b),
            expected.as_ref(),
            baseline,
        );
        if let Some(t) = timed {
            baseline = baseline.or(Some(t.min()));
            if expected.is_none() {
                expected = Some(t.last);
            }
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let o = match parse(&args) {
        Ok(o) => o,
        Err(e) if e == "--list" => return,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("multi_gpu: {e}");
            }
            eprintln!("{USAGE}");
            std::process::exit(if e.is_empty() { 0 } else { 2 });
        }
    };
    let clock = Clock(Instant::now());
    watchdog(o.deadline + GRACE);
    let gpus = match find_gpus(&o, &clock) {
        Ok(g) => g,
        Err(e) => {
            println!("multi_gpu: SKIPPED, no GPU: {e}");
            eprintln!("multi_gpu: SKIPPED, no GPU: {e}");
            let required = std::env::var("HETSPARSE_REQUIRE_DEVICE").as_deref() == Ok("1");
            std::process::exit(i32::from(required));
        }
    };
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let threads = o
        .cpu_threads
        .unwrap_or_else(|| cores.saturating_sub(gpus.len()).max(1));
    let cpu: Shared = match CpuBackend::with_threads(threads) {
        Ok(c) => Arc::new(c),
        Err(e) => {
            eprintln!("multi_gpu: the CPU backend: {e}");
            std::process::exit(1);
        }
    };
    println!("# SpGEMM over several GPUs (hetsparse-sched)");
    println!();
    println!(
        "{} GPU(s): {}; CPU backend in the schedulers: {threads} of {cores} threads. f64, whole \
         calls from host memory, sizes: {}; min and median of up to {} timed calls after the \
         warm-up (work stealing: 1 + one per device); speed-ups are of minima; every result \
         checked against the first of its class (structure exact, values to {TOLERANCE:e}).",
        gpus.len(),
        gpus.iter()
            .map(|g| g.label.as_str())
            .collect::<Vec<_>>()
            .join(", "),
        match o.sizes {
            Sizes::Gpu => "GPU (gpu_cases)".to_string(),
            Sizes::Scale(s) => format!("{s} (cargo xtask bench)"),
        } + &if o.divisor > 1 {
            format!(" / {}", o.divisor)
        } else {
            String::new()
        },
        o.reps
    );
    if gpus.len() < 2 {
        println!();
        println!("NOTE: only 1 GPU: multi-GPU was NOT measured (1 GPU and 1 GPU + CPU only).");
    }
    let mut tally = Tally::default();
    if o.classes_on {
        classes_table(&o, &clock, &mut tally, &gpus, &cpu);
    }
    if o.ooc {
        out_of_core(&o, &clock, &mut tally, &gpus);
    }
    println!();
    println!(
        "Summary: {} result(s) agreed with the first of their table, {} wrong or failed{}; {:.0} s.",
        tally.agreed,
        tally.wrong.len(),
        if tally.skipped.is_empty() {
            String::new()
        } else {
            format!("; skipped for time: {}", tally.skipped.join(", "))
        },
        clock.0.elapsed().as_secs_f64()
    );
    for w in &tally.wrong {
        println!("- {w}");
    }
    std::process::exit(i32::from(!tally.wrong.is_empty()));
}
