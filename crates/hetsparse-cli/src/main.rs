//! `hetsparse`: list the devices hetsparse finds, analyse Matrix Market files, multiply them.
//!
//! ```text
//! hetsparse devices
//! hetsparse calibrate [--rows N] [--rounds N]
//! hetsparse generate CLASS --size N -o A.mtx[.gz]
//! hetsparse info A.mtx [B.mtx | --square | --aat]
//! hetsparse multiply A.mtx [B.mtx | --square | --aat] -o C.mtx[.gz] [--device D] [--algorithm X] [--op spgemm|spmm|spmv] [--explain]
//! mpiexec -n P hetsparse multiply A.mtx [B.mtx | --square] -o C.mtx [--dist auto|1d|2d|3d]   (feature `mpi`)
//! ```

mod devices;
#[cfg(feature = "mpi")]
mod dist;
mod error;
mod files;
mod progress;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Args, Parser, Subcommand, ValueEnum};
use hetsparse::analysis;
use hetsparse::backend::memory::csr_bytes;
use hetsparse::generate::MatrixClass;
use hetsparse::matrix_market::MatrixMarket;
use hetsparse::{
    Context, Csr, Dense, DeviceChoice, DeviceKind, Layout, Operation, RunControl, ScalarType,
    SpgemmAlgorithm, SpgemmOptions, SpmmOptions, SpmvOptions,
};

use error::CliError;
use files::{Output, PendingOutput};
use progress::{Stage, Unit};

/// Sparse matrix multiplication on every device this machine has.
#[derive(Parser, Debug)]
#[command(name = "hetsparse", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Lists every device found (CPU, CUDA GPUs, OpenCL devices), what each runs, and which
    /// `--device auto` uses.
    Devices,
    /// Times short products on each device `--device auto` uses and keeps their speeds in the
    /// calibration file ($HETSPARSE_CACHE_DIR, else $XDG_CACHE_HOME/hetsparse, else
    /// ~/.cache/hetsparse), which later runs load to choose a device from the first call.
    Calibrate {
        /// Rows of the larger products timed (16 entries per row).
        #[arg(long, default_value_t = 100_000)]
        rows: usize,
        /// Runs of each product; the quickest counts.
        #[arg(long, default_value_t = 3)]
        rounds: usize,
    },
    /// Shape, entries and row lengths of A; with B (or --square, --aat), what the product
    /// A·B costs and whether it fits each device.
    Info {
        /// Matrix Market file of A (gzip too).
        a: PathBuf,
        #[command(flatten)]
        right: RightOperand,
    },
    /// Writes a matrix of one of the benchmark classes, to try the other commands on.
    Generate {
        /// stencil3d, banded, powerlaw, uniform, road, skewed, lp, dense.
        class: MatrixClass,
        /// About this many rows.
        #[arg(long, default_value_t = 100_000)]
        size: usize,
        /// Seed of the random values and structure.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Where to write it (gzip-compressed when the name ends in `.gz`).
        #[arg(short, long)]
        output: PathBuf,
    },
    /// Multiplies A by B (or by itself, or by its transpose) and writes the result.
    Multiply(MultiplyArgs),
}

/// The right operand: a file, A itself or A's transpose.
#[derive(Args, Debug)]
#[group(multiple = false)]
struct RightOperand {
    /// Matrix Market file of B (for spmm a dense or sparse matrix, for spmv one column).
    b: Option<PathBuf>,
    /// B = A.
    #[arg(long)]
    square: bool,
    /// B = Aᵀ.
    #[arg(long)]
    aat: bool,
}

#[derive(Args, Debug)]
struct MultiplyArgs {
    /// Matrix Market file of A (gzip too).
    a: PathBuf,
    #[command(flatten)]
    right: RightOperand,
    /// Where to write C (Matrix Market; gzip-compressed when the name ends in `.gz`).
    #[arg(short, long)]
    output: PathBuf,
    /// auto (every device found, through the scheduler when there are several), all (the
    /// same, every large product shared), cpu, cuda[:N], opencl[:NAME or P.D].
    #[arg(long, default_value = "auto")]
    device: DeviceChoice,
    /// The SpGEMM algorithm (the device must offer it; `hetsparse devices` lists them).
    #[arg(long, value_enum, default_value_t = AlgorithmArg::Auto)]
    algorithm: AlgorithmArg,
    /// spgemm: C = A·B, both sparse. spmm: B dense (a sparse file is densified). spmv: B one
    /// column (all ones without B).
    #[arg(long, value_enum, default_value_t = Op::Spgemm)]
    op: Op,
    /// No progress bars and no summary.
    #[arg(short, long)]
    quiet: bool,
    /// Say which device computed and why: every device's predicted time (compute, transfer,
    /// per-call latency) and where the numbers come from (model, calibration, learned).
    /// With --dist: every layout's modelled communication, and with auto its predicted time
    /// on the machine measured.
    #[arg(long)]
    explain: bool,
    /// Multiply distributed over the MPI ranks the command runs on (`mpiexec -n P hetsparse
    /// multiply ...`; needs a build with the `mpi` feature): 1d (row fetch), 2d (Sparse
    /// SUMMA), 3d (split SUMMA), or auto (the layout the time model predicts quickest on
    /// the network and local rates measured on samples of the product). Under mpiexec, auto
    /// without it. A and B are read and C written collectively
    /// (plain Matrix Market files every rank can reach).
    #[arg(long, value_enum)]
    dist: Option<DistArg>,
}

/// `--dist`: the distributed algorithm.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum DistArg {
    Auto,
    #[value(name = "1d")]
    OneD,
    #[value(name = "2d")]
    TwoD,
    #[value(name = "3d")]
    ThreeD,
}

/// The number of ranks when an MPI launcher (mpiexec of MPICH or Open MPI, MVAPICH) started
/// this process.
fn launched_ranks() -> Option<u64> {
    ["PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE"]
        .iter()
        .find_map(|v| std::env::var(v).ok()?.trim().parse().ok())
}

/// `multiply`, in this process or distributed over MPI ranks: with `--dist`, or under an MPI
/// launcher (`--dist auto`) when built with the `mpi` feature.
fn multiply_any(args: &MultiplyArgs) -> Result<(), CliError> {
    let launched = launched_ranks();
    let dist = args.dist.or(launched.map(|_| DistArg::Auto));
    match dist {
        #[cfg(feature = "mpi")]
        Some(d) => dist::multiply(args, d),
        #[cfg(not(feature = "mpi"))]
        Some(_) if args.dist.is_some() || launched.is_some_and(|n| n > 1) => {
            Err(CliError::Usage(format!(
                "{}this hetsparse was built without MPI: build it with \
                 `cargo build -p hetsparse-cli --features mpi` (see the README's Distributed \
                 section)",
                if args.dist.is_some() {
                    "--dist: "
                } else {
                    "started by mpiexec on several ranks, each would compute the whole product \
                     and write the same file: "
                }
            )))
        }
        _ => multiply(args),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum AlgorithmArg {
    Auto,
    RowRow,
    ColumnRow,
    Esc,
    Adaptive,
}

impl From<AlgorithmArg> for SpgemmAlgorithm {
    fn from(a: AlgorithmArg) -> Self {
        match a {
            AlgorithmArg::Auto => SpgemmAlgorithm::Auto,
            AlgorithmArg::RowRow => SpgemmAlgorithm::RowRow,
            AlgorithmArg::ColumnRow => SpgemmAlgorithm::ColumnRow,
            AlgorithmArg::Esc => SpgemmAlgorithm::Esc,
            AlgorithmArg::Adaptive => SpgemmAlgorithm::Adaptive,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Op {
    Spgemm,
    Spmm,
    Spmv,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Past a file-size limit (ulimit -f) the kernel's default for SIGXFSZ ends the process in
    // the middle of a write, leaving the temporary output behind; ignored, the write fails
    // with EFBIG, which is reported and cleaned up like any other write error.
    #[cfg(unix)]
    // SAFETY: setting a signal's disposition to SIG_IGN runs no handler code; done once,
    // before any other thread exists.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
    // Interrupted, the process ends without destructors: remove the temporary output first.
    if let Err(e) = ctrlc::set_handler(|| {
        files::remove_unfinished();
        eprintln!("hetsparse: interrupted; nothing was written");
        std::process::exit(130);
    }) {
        eprintln!("hetsparse: warning: cannot watch for interrupts ({e})");
    }
    let result = match cli.command {
        Command::Devices => devices(),
        Command::Calibrate { rows, rounds } => calibrate(rows, rounds),
        Command::Generate {
            class,
            size,
            seed,
            output,
        } => generate_matrix(class, size, seed, &output),
        Command::Info { a, right } => info(&a, &right),
        Command::Multiply(args) => multiply_any(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hetsparse: error: {e}");
            ExitCode::from(e.exit_code() as u8)
        }
    }
}

/// Bytes in the largest binary unit that keeps a whole number in front.
fn mib(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

fn devices() -> Result<(), CliError> {
    let ctx = Context::<f64>::auto().map_err(|e| CliError::Device {
        device: "auto".into(),
        reason: e.to_string(),
    })?;
    println!("Devices found:");
    for d in ctx.devices() {
        let kind = match d.info.kind {
            DeviceKind::Cpu => "CPU",
            DeviceKind::Gpu => "GPU",
            DeviceKind::Accelerator => "accelerator",
        };
        let units = if d.info.kind == DeviceKind::Cpu {
            "threads"
        } else {
            "compute units"
        };
        println!("  {:<12} {} ({kind})", d.id, d.info.name);
        println!(
            "  {:<12} {} {units}, {} memory",
            "",
            d.info.compute_units,
            mib(d.info.memory_bytes)
        );
        let scalars: Vec<String> = d.scalars.iter().map(ScalarType::to_string).collect();
        let algorithms: Vec<String> = d.algorithms.iter().map(|a| format!("{a:?}")).collect();
        println!("  {:<12} scalars: {}", "", scalars.join(", "));
        println!(
            "  {:<12} SpGEMM algorithms (f64): {}",
            "",
            algorithms.join(", ")
        );
        match &d.skipped {
            None => println!("  {:<12} used by --device auto", ""),
            Some(reason) => println!("  {:<12} not used by --device auto: {reason}", ""),
        }
    }
    for u in ctx.unavailable() {
        println!("  {:<12} none: {}", u.name(), u.reason);
    }
    match ctx.scheduler() {
        Some(s) => println!(
            "--device auto computes on {} devices through the scheduler.",
            s.backends().len()
        ),
        None => println!("--device auto computes on one device."),
    }
    match ctx.calibration_file() {
        None => println!(
            "Calibration: no file (HETSPARSE_CACHE_DIR is off or no cache directory is known)."
        ),
        Some(path) => {
            let entries = ctx.calibration();
            if entries.is_empty() {
                println!(
                    "Calibration: none in `{}` (the cost model's defaults are used; run `hetsparse calibrate`).",
                    path.display()
                );
            } else {
                println!("Calibration (`{}`):", path.display());
                print_calibration(&entries);
            }
        }
    }
    Ok(())
}

fn print_calibration(entries: &[hetsparse::Calibrated]) {
    for c in entries {
        println!(
            "  {:<12} {:<6} ×{:<8.3} the model's time  per call {:>9.3} ms  ({:?})",
            c.device,
            c.op.name(),
            c.measured.factor,
            c.measured.per_call * 1e3,
            c.origin
        );
    }
}

fn calibrate(rows: usize, rounds: usize) -> Result<(), CliError> {
    let ctx = Context::<f64>::auto().map_err(|e| CliError::Device {
        device: "auto".into(),
        reason: e.to_string(),
    })?;
    let started = Instant::now();
    let options = hetsparse::CalibrationOptions {
        rows,
        rounds,
        ..Default::default()
    };
    let measured = ctx.calibrate_with(&options)?;
    println!(
        "Calibrated {} devices in {:.1} s:",
        ctx.devices().iter().filter(|d| d.skipped.is_none()).count(),
        started.elapsed().as_secs_f64()
    );
    print_calibration(&measured);
    match ctx.calibration_file() {
        Some(path) => println!("Saved to `{}`.", path.display()),
        None => println!("Not saved: HETSPARSE_CACHE_DIR is off or no cache directory is known."),
    }
    Ok(())
}

fn generate_matrix(
    class: MatrixClass,
    size: usize,
    seed: u64,
    path: &Path,
) -> Result<(), CliError> {
    let output = PendingOutput::create(path)?;
    let (a, _) = hetsparse::generate::product_operands::<f64>(class, size, seed);
    let (written, _) = output.commit(Output::Sparse(&a), true)?;
    println!(
        "{class}: {}×{}, {} entries, {} written to `{}`",
        a.nrows(),
        a.ncols(),
        a.nnz(),
        mib(written),
        path.display()
    );
    Ok(())
}

/// Reads a sparse matrix, with its read time.
fn read_csr(path: &Path, label: &str, progress: bool) -> Result<(Csr<f64>, Duration), CliError> {
    let read = files::read_matrix(path, label, progress)?;
    let csr = read.matrix.into_csr().map_err(|source| CliError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    Ok((csr, read.time))
}

fn row_stats(label: &str, m: &Csr<f64>) {
    let lengths: Vec<u64> = (0..m.nrows()).map(|i| m.row_nnz(i)).collect();
    let s = analysis::row_length_stats(&lengths);
    println!("{label}: {}×{}, {} entries", m.nrows(), m.ncols(), m.nnz());
    println!(
        "  entries per row: min {}, max {}, mean {:.2}, std dev {:.2}, empty rows {}",
        s.min, s.max, s.mean, s.std_dev, s.empty
    );
}

/// Where the right operand of a product comes from, for messages: its file, or how it is made
/// from A, or (SpMV without x) all ones.
fn right_source(a_path: &Path, right: &RightOperand) -> String {
    let a = a_path.display();
    match &right.b {
        Some(path) => format!("`{}`", path.display()),
        None if right.square => format!("`{a}` again, --square"),
        None if right.aat => format!("the transpose of `{a}`, --aat"),
        None => "all ones".into(),
    }
}

fn chain_check(
    op: &'static str,
    (what, b_file): (&'static str, String),
    (a_path, a): (&Path, (usize, usize)),
    b: (usize, usize),
) -> Result<(), CliError> {
    if a.1 != b.0 {
        return Err(CliError::Shapes {
            op,
            what,
            a_file: format!("`{}`", a_path.display()),
            b_file,
            a_rows: a.0,
            a_cols: a.1,
            b_rows: b.0,
            b_cols: b.1,
        });
    }
    Ok(())
}

fn info(a_path: &Path, right: &RightOperand) -> Result<(), CliError> {
    let (a, _) = read_csr(a_path, "reading A", true)?;
    row_stats("A", &a);
    let b_owned;
    let b = if let Some(path) = &right.b {
        b_owned = read_csr(path, "reading B", true)?.0;
        row_stats("B", &b_owned);
        &b_owned
    } else if right.square {
        &a
    } else if right.aat {
        b_owned = a.transpose()?;
        &b_owned
    } else {
        return Ok(());
    };
    chain_check(
        "SpGEMM",
        ("B", right_source(a_path, right)),
        (a_path, a.shape()),
        b.shape(),
    )?;
    let product = analysis::analyze(&a, b)?;
    let c_bytes = csr_bytes(a.nrows(), product.nnz, 8);
    println!("C = A·B: {}×{}", a.nrows(), b.ncols());
    println!(
        "  intermediate products: {} ({} flops)",
        product.total_products,
        product.flops()
    );
    println!("  nnz(C): {}", product.nnz);
    println!(
        "  compression ratio (products per entry of C): {:.2}",
        product.compression_ratio
    );
    println!("  C in CSR (f64): {}", mib(c_bytes));
    let operands = csr_bytes(a.nrows(), a.nnz(), 8) + csr_bytes(b.nrows(), b.nnz(), 8);
    let need = operands + c_bytes;
    println!("  A, B and C together: {}", mib(need));
    if let Ok(ctx) = Context::<f64>::auto() {
        for d in ctx.devices().iter().filter(|d| d.skipped.is_none()) {
            let fits = if need <= d.info.memory_bytes {
                "fits".to_string()
            } else {
                format!(
                    "does not fit ({} memory): the scheduler cuts it into panels (out of core)",
                    mib(d.info.memory_bytes)
                )
            };
            println!("  on {:<10} {fits}", d.id);
        }
    }
    Ok(())
}

/// What a multiplication produced.
enum Product {
    Sparse(Csr<f64>),
    Dense(Dense<f64>),
}

/// The right operand as the operation needs it.
enum Right<'a> {
    Sparse(&'a Csr<f64>),
    Dense(Dense<f64>),
    Vector(Vec<f64>),
}

fn multiply(args: &MultiplyArgs) -> Result<(), CliError> {
    let total = Instant::now();
    let progress = !args.quiet;
    let right = &args.right;
    // Flags that conflict are named before anything found missing.
    match args.op {
        Op::Spmm | Op::Spmv if right.square || right.aat => {
            let flag = if right.square { "--square" } else { "--aat" };
            let op = if args.op == Op::Spmm { "spmm" } else { "spmv" };
            return Err(CliError::Usage(format!(
                "{flag} makes a sparse B from A: it goes with --op spgemm, not --op {op}"
            )));
        }
        Op::Spgemm if right.b.is_none() && !right.square && !right.aat => {
            return Err(CliError::Usage(
                "spgemm needs B: give B.mtx, --square or --aat".into(),
            ))
        }
        Op::Spmm if right.b.is_none() => {
            return Err(CliError::Usage("spmm needs B.mtx (a dense matrix)".into()))
        }
        _ => {}
    }
    if args.op != Op::Spgemm && args.algorithm != AlgorithmArg::Auto {
        return Err(CliError::Usage(
            "--algorithm chooses a SpGEMM algorithm: it goes with --op spgemm".into(),
        ));
    }
    // Fail on an unwritable output or a missing device before reading anything.
    let output = PendingOutput::create(&args.output)?;
    let ctx = devices::context(&args.device)?;
    let algorithm = SpgemmAlgorithm::from(args.algorithm);
    if args.op == Op::Spgemm
        && !ctx
            .backend()
            .capabilities()
            .supports(Operation::Spgemm(algorithm), ScalarType::F64)
    {
        let offered: Vec<String> = SpgemmAlgorithm::ALL
            .into_iter()
            .filter(|&x| {
                ctx.backend()
                    .capabilities()
                    .supports(Operation::Spgemm(x), ScalarType::F64)
            })
            .map(|x| format!("{x:?}"))
            .collect();
        return Err(CliError::Device {
            device: args.device.to_string(),
            reason: format!(
                "it does not offer SpGEMM algorithm {algorithm:?} for f64 (it offers {})",
                offered.join(", ")
            ),
        });
    }

    let mut stages: Vec<(String, Duration, String)> = Vec::new();
    let (a, a_time) = read_csr(&args.a, "reading A", progress)?;
    stages.push((
        "read A".into(),
        a_time,
        format!("{}×{}, {} entries", a.nrows(), a.ncols(), a.nnz()),
    ));
    let transposed;
    let b_file;
    let operand = match (&right.b, args.op) {
        (Some(path), Op::Spgemm) => {
            let (b, time) = read_csr(path, "reading B", progress)?;
            stages.push((
                "read B".into(),
                time,
                format!("{}×{}, {} entries", b.nrows(), b.ncols(), b.nnz()),
            ));
            b_file = b;
            Right::Sparse(&b_file)
        }
        (Some(path), op) => {
            let read = files::read_matrix(path, "reading B", progress)?;
            let dense = match read.matrix {
                MatrixMarket::Dense(d) => d,
                sparse @ MatrixMarket::Sparse(_) => sparse
                    .into_csr()
                    .map_err(|source| CliError::Read {
                        path: path.clone(),
                        source,
                    })?
                    .to_dense(Layout::RowMajor)?,
            };
            stages.push((
                "read B".into(),
                read.time,
                format!("{}×{} dense", dense.nrows(), dense.ncols()),
            ));
            if op == Op::Spmv {
                if dense.ncols() != 1 {
                    return Err(CliError::Usage(format!(
                        "spmv needs x with one column; `{}` is {}×{}",
                        path.display(),
                        dense.nrows(),
                        dense.ncols()
                    )));
                }
                Right::Vector(dense.into_data())
            } else {
                Right::Dense(dense)
            }
        }
        (None, Op::Spmv) => Right::Vector(vec![1.0; a.ncols()]),
        (None, _) if right.square => Right::Sparse(&a),
        (None, _) => {
            transposed = a.transpose()?;
            Right::Sparse(&transposed)
        }
    };
    let a_at = (args.a.as_path(), a.shape());
    let source = right_source(&args.a, right);
    let (op_name, flops) = match &operand {
        Right::Sparse(b) => {
            chain_check("SpGEMM", ("B", source), a_at, b.shape())?;
            ("SpGEMM", 2 * analysis::total_products(&a, b)?)
        }
        Right::Dense(b) => {
            chain_check("SpMM", ("B", source), a_at, b.shape())?;
            ("SpMM", 2 * a.nnz() * b.ncols() as u64)
        }
        Right::Vector(x) => {
            chain_check("SpMV", ("x", source), a_at, (x.len(), 1))?;
            ("SpMV", 2 * a.nnz())
        }
    };

    let run = RunControl::new();
    let stage = Stage::new("multiply", Unit::Products, Some(flops / 2), progress);
    let context = &ctx;
    let waiting = std::thread::current();
    let product = std::thread::scope(|scope| {
        let worker = scope.spawn(|| -> Result<Product, hetsparse::Error> {
            let result = (|| {
                Ok(match &operand {
                    Right::Sparse(b) => Product::Sparse(context.spgemm_with(
                        (&a).into(),
                        (*b).into(),
                        &SpgemmOptions::new().with_algorithm(algorithm),
                        &run,
                    )?),
                    Right::Dense(b) => Product::Dense(context.spmm_with(
                        (&a).into(),
                        b.into(),
                        &SpmmOptions::new(),
                        &run,
                    )?),
                    Right::Vector(x) => {
                        let y = context.spmv_with(
                            (&a).into(),
                            x.as_slice().into(),
                            &SpmvOptions::new(),
                            &run,
                        )?;
                        let n = y.len();
                        Product::Dense(Dense::try_new(n, 1, Layout::ColMajor, y)?)
                    }
                })
            })();
            waiting.unpark();
            result
        });
        while !worker.is_finished() {
            std::thread::park_timeout(Duration::from_millis(100));
            let p = run.progress();
            if p.planned > 0 {
                stage.set_total(p.planned);
            }
            stage.set(p.done);
        }
        worker.join()
    });
    let product = match product {
        Ok(result) => result?,
        Err(_) => {
            return Err(CliError::Compute(hetsparse::Error::Internal {
                backend: ctx.backend().info().backend,
                what: "the multiplication panicked".into(),
            }))
        }
    };
    let compute_time = stage.finish();
    let gflops = flops as f64 / compute_time.as_secs_f64().max(1e-9) / 1e9;
    stages.push((
        "multiply".into(),
        compute_time,
        format!("{op_name}, {flops} flops, {gflops:.2} GFLOP/s"),
    ));

    let (written, write_time, what) = match &product {
        Product::Sparse(c) => {
            let (w, t) = output.commit(Output::Sparse(c), progress)?;
            (
                w,
                t,
                format!("{}×{}, {} entries", c.nrows(), c.ncols(), c.nnz()),
            )
        }
        Product::Dense(d) => {
            let (w, t) = output.commit(Output::Dense(d), progress)?;
            (w, t, format!("{}×{} dense", d.nrows(), d.ncols()))
        }
    };
    stages.push((
        "write C".into(),
        write_time,
        format!("{what}, {} to `{}`", mib(written), args.output.display()),
    ));

    let choice = ctx.last_choice();
    if !args.quiet {
        let chosen = choice.as_ref().and_then(|c| match c.chosen {
            hetsparse::Chosen::Alone(d) => ctx.scheduler().map(|s| s.backends()[d].info()),
            hetsparse::Chosen::Shared => None,
        });
        let info = chosen.unwrap_or_else(|| ctx.backend().info());
        println!("{op_name} on {} ({})", info.name, info.backend);
        for (label, time, detail) in &stages {
            println!("  {label:<9} {:>9.3} s  {detail}", time.as_secs_f64());
        }
        println!("  {:<9} {:>9.3} s", "total", total.elapsed().as_secs_f64());
    }
    if args.explain {
        match &choice {
            Some(c) => println!("device choice: {}", ctx.describe(c)),
            None => println!(
                "device choice: {} (one device, or every product shared: nothing to choose)",
                args.device
            ),
        }
    }
    Ok(())
}
