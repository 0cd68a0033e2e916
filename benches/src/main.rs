//! `hetsparse-bench`: the timing tool behind `cargo xtask bench`.
//!
//! ```text
//! hetsparse-bench list   [--quick]                        shapes and costs of every case
//! hetsparse-bench export --dir DIR [--quick]              operands as .mtx + manifest.tsv
//! hetsparse-bench export --dir DIR --matrix FILE.mtx...   manifest.tsv of matrix files
//! hetsparse-bench export --dir DIR --real REAL [--classes LIST]  manifest.tsv of real products
//! hetsparse-bench time   [--quick] [--threads N[,N...]] [--reference] [--ops LIST]
//!                        [--classes LIST] [--budget quick|full] [--suffix S] [--out FILE]
//!                        [--matrix FILE.mtx]... [--real REAL]
//! hetsparse-bench report [--html FILE] [--svg DIR] FILE...  markdown table of result files
//! ```
//!
//! `time` measures every backend compiled in (Cargo features `cpu`, `cuda`, `opencl`) and
//! writes a result file (see `hetsparse_bench::results`). Options of `time`:
//! - `--threads 1,2,4`: the CPU backend's threads; with several counts every backend is
//!   measured once per count and its name gets `@N` (a scaling run);
//! - `--ops spgemm,spmv`: only these operations (names as in the table: `spgemm` is the
//!   backend's default algorithm, `spgemm:RowRow` one chosen algorithm, `spmm32`, `spmv`);
//! - `--classes road,banded`: only these matrix classes (names as in the table);
//! - `--budget quick`: the quick scale's repetitions at any size (for short runs);
//! - `--suffix S`: appended to every implementation name;
//! - `--matrix FILE.mtx` (repeatable): time these matrices instead of the generated classes,
//!   each named by its file stem and multiplied as the papers do (`A·A`, or `A·Aᵀ` when
//!   rectangular);
//! - `--real REAL`: time the products listed in `REAL/products.tsv` (the folder
//!   `benches/peers/real_products.py` writes) instead, each as listed, `A · B`; `--classes`
//!   then selects products by name (see `hetsparse_bench::real`).
//!
//! `export --matrix FILE.mtx...` writes `DIR/manifest.tsv` for the peers' script instead of
//! the generated operands: one line per file, named, multiplied and counted as `time --matrix`
//! does, pointing at the file itself (and at its transpose, written into DIR, when
//! rectangular). `export --real REAL` writes it for real products: their operands are read
//! where they are, as raw arrays (`a_file` and `b_file` are their stems' absolute paths).
//!
//! `report` prints the markdown table; `--html FILE` also writes one self-contained HTML page
//! with charts (GFLOP/s per class and implementation, speedup over each peer, thread scaling
//! when the files hold several thread counts), `--svg DIR` each chart as its own SVG file.

use std::path::PathBuf;
use std::process::ExitCode;

use hetsparse_bench::backends::{backends, Selection};
use hetsparse_bench::cases::{cases, Case, Operands, Scale};
use hetsparse_bench::operation::Measured;
use hetsparse_bench::results::{comments, parse_tsv, to_tsv, Record};
use hetsparse_bench::timing::Budget;
use hetsparse_bench::{export, measure_backend, real, report};
use hetsparse_core::{Error, Result};

const USAGE: &str = "usage: hetsparse-bench list [--quick]
       hetsparse-bench export --dir DIR [--quick]
       hetsparse-bench export --dir DIR --matrix FILE.mtx...
       hetsparse-bench export --dir DIR --real REAL [--classes LIST]
       hetsparse-bench time [--quick] [--threads N[,N...]] [--reference] [--ops LIST]
                            [--classes LIST] [--budget quick|full] [--suffix S] [--out FILE]
                            [--matrix FILE.mtx]... [--real REAL]
       hetsparse-bench report [--html FILE] [--svg DIR] FILE...";

const HELP: &str =
    "report prints the markdown table of result files; --html FILE also writes one self-contained
HTML page with charts (GFLOP/s per class and implementation, speedup over each peer, thread
scaling when the files hold several thread counts), --svg DIR each chart as DIR/<chart>.svg.";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hetsparse-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Options shared by the subcommands.
#[derive(Default)]
struct Options {
    scale: Option<Scale>,
    dir: Option<PathBuf>,
    out: Option<PathBuf>,
    html: Option<PathBuf>,
    svg: Option<PathBuf>,
    threads: Vec<usize>,
    ops: Vec<String>,
    classes: Vec<String>,
    budget: Option<Scale>,
    reference: bool,
    suffix: String,
    files: Vec<PathBuf>,
    matrices: Vec<PathBuf>,
    real: Option<PathBuf>,
}

fn parse(args: &[String]) -> Result<Options> {
    let mut o = Options::default();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = |flag: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| usage(&format!("{flag} needs a value")))
        };
        match arg.as_str() {
            "--quick" => o.scale = Some(Scale::Quick),
            "--reference" => o.reference = true,
            "--dir" => o.dir = Some(value("--dir")?.into()),
            "--out" => o.out = Some(value("--out")?.into()),
            "--matrix" => o.matrices.push(value("--matrix")?.into()),
            "--real" => o.real = Some(value("--real")?.into()),
            "--html" => o.html = Some(value("--html")?.into()),
            "--svg" => o.svg = Some(value("--svg")?.into()),
            "--suffix" => o.suffix = value("--suffix")?,
            "--threads" => {
                for v in value("--threads")?.split(',') {
                    let n = v.parse::<usize>().ok().filter(|&n| n > 0).ok_or_else(|| {
                        usage(&format!("--threads `{v}` is not a positive count"))
                    })?;
                    o.threads.push(n);
                }
            }
            "--ops" => o.ops.extend(
                value("--ops")?
                    .split(',')
                    .filter(|s| !s.is_empty())
                    .map(String::from),
            ),
            "--classes" => o.classes.extend(
                value("--classes")?
                    .split(',')
                    .filter(|s| !s.is_empty())
                    .map(String::from),
            ),
            "--budget" => o.budget = Some(value("--budget")?.parse()?),
            flag if flag.starts_with("--") => return Err(usage(&format!("unknown flag {flag}"))),
            file => o.files.push(file.into()),
        }
    }
    Ok(o)
}

fn usage(problem: &str) -> Error {
    Error::InvalidArgument(format!("{problem}\n{USAGE}"))
}

fn run(args: &[String]) -> Result<()> {
    let Some((command, rest)) = args.split_first() else {
        return Err(usage("no subcommand"));
    };
    let o = parse(rest)?;
    if command != "report" && !o.files.is_empty() {
        return Err(usage(&format!(
            "unexpected argument {}",
            o.files[0].display()
        )));
    }
    if command != "report" && (o.html.is_some() || o.svg.is_some()) {
        return Err(usage("--html and --svg belong to report"));
    }
    let scale = o.scale.unwrap_or_else(Scale::from_env);
    match command.as_str() {
        "help" | "--help" | "-h" => {
            println!("{USAGE}\n\n{HELP}");
            Ok(())
        }
        "list" => list(scale),
        "export" => {
            let dir = o.dir.ok_or_else(|| usage("export needs --dir DIR"))?;
            if !o.matrices.is_empty() {
                let manifest = export::export_matrices(&dir, &o.matrices)?;
                eprintln!("wrote {}", manifest.display());
                return Ok(());
            }
            if let Some(products) = &o.real {
                let manifest = real::export_manifest(&dir, products, &o.classes)?;
                eprintln!("wrote {}", manifest.display());
                return Ok(());
            }
            let all = generate_all(scale)?;
            let manifest = export::export(&dir, scale, &all)?;
            eprintln!("wrote {}", manifest.display());
            Ok(())
        }
        "time" => time(scale, &o),
        "report" => {
            if o.files.is_empty() {
                return Err(usage("report needs at least one result file"));
            }
            let mut records = Vec::new();
            let mut setup = Vec::new();
            for f in &o.files {
                let text = std::fs::read_to_string(f).map_err(|e| {
                    Error::InvalidArgument(format!("cannot read {}: {e}", f.display()))
                })?;
                records.extend(parse_tsv(&text, &f.display().to_string())?);
                // Files of several classes or rounds repeat the same setup lines.
                for line in comments(&text) {
                    if !setup.contains(&line) {
                        setup.push(line);
                    }
                }
            }
            print!("{}", report::markdown(&records));
            if !setup.is_empty() {
                println!("\nSetup:");
                for line in &setup {
                    println!("- {line}");
                }
            }
            if let Some(path) = &o.html {
                save(Some(path), &report::html(&records, &setup))?;
                eprintln!("wrote {}", path.display());
            }
            if let Some(dir) = &o.svg {
                let written = report::write_svgs(dir, &records)?;
                eprintln!("wrote {} charts to {}", written.len(), dir.display());
            }
            Ok(())
        }
        other => Err(usage(&format!("unknown subcommand {other}"))),
    }
}

fn generate_all(scale: Scale) -> Result<Vec<Operands>> {
    cases(scale)
        .iter()
        .map(|c| {
            eprintln!("generating {}", c.stem());
            c.generate()
        })
        .collect()
}

fn list(scale: Scale) -> Result<()> {
    println!("| class | size | A | nnz(A) | B | products | nnz(C) |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for case in cases(scale) {
        let ops = case.generate()?;
        println!(
            "| {} | {} | {}×{} | {} | {}×{} | {} | {} |",
            case.class,
            case.size,
            ops.a.nrows(),
            ops.a.ncols(),
            ops.a.nnz(),
            ops.b.nrows(),
            ops.b.ncols(),
            ops.products,
            ops.product_nnz
        );
    }
    Ok(())
}

fn time(scale: Scale, o: &Options) -> Result<()> {
    // One set of backends per thread count; several counts tag each name with `@N`.
    let counts: Vec<Option<usize>> = match o.threads.as_slice() {
        [] => vec![None],
        list => list.iter().map(|&n| Some(n)).collect(),
    };
    let mut sets = Vec::new();
    let mut records = Vec::new();
    let rayon = std::env::var("RAYON_NUM_THREADS").unwrap_or_else(|_| "unset".into());
    let sizes = if o.real.is_some() {
        "real products (A·B)".to_string()
    } else if o.matrices.is_empty() {
        format!("{scale} sizes")
    } else {
        "matrix files (A·A, A·Aᵀ if rectangular)".to_string()
    };
    let mut setup = vec![format!(
        "hetsparse-bench: {sizes}, {} timing, RAYON_NUM_THREADS={rayon}",
        o.budget.unwrap_or(scale)
    )];
    for &threads in &counts {
        let suffix = match threads {
            Some(n) if counts.len() > 1 => format!("{}@{n}", o.suffix),
            _ => o.suffix.clone(),
        };
        let (ready, unavailable) = backends(Selection {
            threads,
            reference: o.reference,
        })?;
        records.extend(unavailable.iter().map(|u| Record {
            implementation: format!("{}{suffix}", u.name),
            class: "*".into(),
            operation: "*".into(),
            seconds: None,
            flops: 0,
            note: u.reason.clone(),
        }));
        for reg in &ready {
            let info = reg.backend.info();
            setup.push(format!(
                "{}{suffix}: {} ({} compute units)",
                reg.name, info.name, info.compute_units
            ));
        }
        sets.push((suffix, ready));
    }
    if sets.iter().all(|(_, ready)| ready.is_empty()) {
        eprintln!("no backend to measure: build with --features cpu (or cuda, opencl), or pass --reference");
    }
    let wanted = |op: Measured| o.ops.is_empty() || o.ops.iter().any(|w| *w == op.to_string());
    let budget = Budget::for_scale(o.budget.unwrap_or(scale));
    let classes: Vec<Case> = if o.matrices.is_empty() && o.real.is_none() {
        cases(scale)
            .into_iter()
            .filter(|c| o.classes.is_empty() || o.classes.iter().any(|w| *w == c.class.name()))
            .collect()
    } else {
        Vec::new()
    };
    let sources = classes
        .into_iter()
        .map(Source::Generated)
        .chain(o.matrices.iter().map(|p| Source::File(p)));
    let products = match &o.real {
        Some(dir) => real::selected(dir, &o.classes)?
            .into_iter()
            .map(|p| (dir.as_path(), p))
            .collect(),
        None => Vec::new(),
    };
    let sources = sources.chain(products.into_iter().map(|(d, p)| Source::Real(d, p)));
    for source in sources {
        let ops = source.operands()?;
        for (suffix, ready) in &sets {
            for reg in ready {
                for mut r in measure_backend(reg.backend.as_ref(), &ops, budget, wanted) {
                    r.implementation.push_str(suffix);
                    progress(&r);
                    records.push(r);
                }
            }
        }
        // Save after every case, so that a run stopped at a time limit keeps what it measured.
        if o.out.is_some() {
            save(o.out.as_deref(), &to_tsv(&setup, &records))?;
        }
    }
    save(o.out.as_deref(), &to_tsv(&setup, &records))
}

/// Where the operands of one timed case come from.
enum Source<'a> {
    Generated(Case),
    File(&'a std::path::Path),
    Real(&'a std::path::Path, real::RealProduct),
}

impl Source<'_> {
    fn operands(&self) -> Result<Operands> {
        match self {
            Source::Generated(case) => {
                eprintln!("generating {}", case.stem());
                case.generate()
            }
            Source::File(path) => {
                eprintln!("reading {}", path.display());
                Operands::from_file(path)
            }
            Source::Real(dir, product) => {
                eprintln!("reading {} from {}", product.name, dir.display());
                real::operands(dir, product)
            }
        }
    }
}

/// Writes a result file, or prints it without `--out`.
fn save(out: Option<&std::path::Path>, text: &str) -> Result<()> {
    let Some(path) = out else {
        print!("{text}");
        return Ok(());
    };
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|e| {
            Error::InvalidArgument(format!("cannot create {}: {e}", parent.display()))
        })?;
    }
    std::fs::write(path, text)
        .map_err(|e| Error::InvalidArgument(format!("cannot write {}: {e}", path.display())))
}

fn progress(r: &Record) {
    match r.gflops() {
        Some(g) => eprintln!(
            "{:<24} {:<7} {:<10} {:>10.4} s {:>8.3} GFLOP/s",
            r.implementation,
            r.operation,
            r.class,
            r.seconds.unwrap_or_default(),
            g
        ),
        None => eprintln!(
            "{:<24} {:<7} {:<10} failed: {}",
            r.implementation, r.operation, r.class, r.note
        ),
    }
}
