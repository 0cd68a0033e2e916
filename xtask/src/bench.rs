//! `cargo xtask bench`: our backends and the peers on the same matrices, one markdown table.
//!
//! Steps: build the `hetsparse-bench` tool in release mode; export the generated operands as
//! Matrix Market files into `target/bench-matrices/<scale>/` (kept between runs); then class by
//! class, time our backends and, with `--peers`, scipy, Intel MKL, SuiteSparse:GraphBLAS and
//! cuSPARSE on those files with `benches/peers/peers.py`, so that both sides of a ratio are
//! measured within the same minute; with `--rounds N` all of it N times, each cell showing its
//! best round. Print the table and save it with the raw results in
//! `target/bench-results/<scale>/` (`table.md`), beside `report.html`: the same results as
//! charts. Every program gets the same thread count.
//!
//! `--matrices SET|DIR` times real Matrix Market files instead, each as `A·A` (`A·Aᵀ` when
//! rectangular), with results in `target/bench-results/matrices-<name>/`. With `--peers` the
//! tool first writes a manifest of the files there (`operands/manifest.tsv`: each file where it
//! is, and the transpose of a rectangular one), with the names and flop counts of our own
//! results, and the peers time each file right after our backends, as for the classes.
//!
//! `--matrices real` times the real-workload products instead (AMG Galerkin products, FEM
//! stiffness squares, Markov clustering, a power-law graph, PyAMG's examples): made first by
//! `benches/peers/real_products.py` into `target/bench-matrices/real[-quick]/` (kept between
//! runs), each timed as listed, `A · B`, SpGEMM only, with results in
//! `target/bench-results/matrices-real[-quick]/`; `--matrices DIR` does the same for a folder
//! holding such a `products.tsv`.

use std::path::{Path, PathBuf};
use std::process::Command;

const USAGE: &str = "usage: cargo xtask bench [--quick] [--peers] [--threads N] [--rounds N] [--features LIST] [--reference] [--python PATH] [--matrices SET|DIR] [--gpu]
  --quick          small matrices (a smoke run of a minute)
  --gpu            SpGEMM at GPU sizes (10^8-10^9 products) instead: the CPU backend and
                   CUDA on resident operands and from host memory (the gpu_spgemm bench,
                   needs a CUDA GPU), with --peers cuSPARSE on device data and in whole calls
                   (CuPy) on the same operands, in one table with the ratios; then SpMV and
                   SpMM on resident operands; then the default device choice's
                   first call in new processes (without and with a calibration
                   file) against each device alone, with --peers on the
                   real-workload products too (benches/peers/real_products.py
                   into target/bench-matrices/real[-quick]/); --quick divides
                   every size by 16
  --matrices SET|DIR
                   real matrices instead of the generated classes: a set of
                   `cargo xtask download` (downloaded first if missing) or every .mtx file
                   under DIR (auxiliary Name/Name_*.mtx files left out); each is multiplied
                   as A·A, or A·Aᵀ when rectangular; with --peers the peers time the
                   same products (the manifest they read: <results>/operands/);
                   `real`: the real-workload products (benches/peers/real_products.py, run
                   with the peers' Python; needs numpy, scipy, pyamg, scikit-fem), each
                   timed as A·B, SpGEMM only; a DIR holding products.tsv is such a set
  --peers          also time scipy, MKL, GraphBLAS and cuSPARSE (benches/peers/peers.py);
                   missing ones are reported as missing
  --threads N      threads for everybody (default: all cores)
  --rounds N       time every class N times, ours and the peers' in turn; the table shows
                   each cell's best round (default 1)
  --features LIST  bench-crate features beside the default `cpu`: cuda, opencl
  --reference      also time the serial reference kernels
  --python PATH    Python of the peers (default: $HETSPARSE_PEERS_PYTHON, else python3)
Writes target/bench-results/<full|quick>/table.md (the table printed) and report.html (charts:
GFLOP/s per class and implementation, speedup over each peer) beside the raw results.";

#[derive(Debug, Default, PartialEq)]
struct Options {
    quick: bool,
    peers: bool,
    threads: Option<usize>,
    rounds: Option<usize>,
    features: Vec<String>,
    reference: bool,
    python: Option<String>,
    matrices: Option<String>,
    gpu: bool,
}

fn parse(args: &[String]) -> Result<Options, String> {
    let mut o = Options::default();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = |flag: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))
        };
        match arg.as_str() {
            "--quick" => o.quick = true,
            "--peers" => o.peers = true,
            "--reference" => o.reference = true,
            "--gpu" => o.gpu = true,
            "--threads" => o.threads = Some(positive("--threads", &value("--threads")?)?),
            "--rounds" => o.rounds = Some(positive("--rounds", &value("--rounds")?)?),
            "--features" => o.features.extend(
                value("--features")?
                    .split(',')
                    .filter(|f| !f.is_empty())
                    .map(String::from),
            ),
            "--python" => o.python = Some(value("--python")?),
            "--matrices" => o.matrices = Some(value("--matrices")?),
            "-h" | "--help" => return Err(USAGE.to_string()),
            other => return Err(format!("unknown argument `{other}`\n{USAGE}")),
        }
    }
    Ok(o)
}

/// The value of `flag`, a count of at least one.
fn positive(flag: &str, v: &str) -> Result<usize, String> {
    v.parse::<usize>()
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| format!("{flag} `{v}` is not a positive count"))
}

/// Runs `cargo xtask bench ARGS`.
pub fn run(args: &[String]) -> Result<(), String> {
    let o = parse(args)?;
    let root = workspace_root();
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let scale = if o.quick { "quick" } else { "full" };
    let threads = o
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let scale_flag: &[&str] = if o.quick { &["--quick"] } else { &[] };
    if o.gpu {
        return gpu_bench(&root, &target, &o);
    }
    if let Some(which) = &o.matrices {
        if let Some(dir) = real_products_dir(&root, &target, &o, which)? {
            let name = if which == REAL_SET {
                format!("matrices-real{}", if o.quick { "-quick" } else { "" })
            } else {
                format!("matrices-{}", folder_name(Path::new(which)))
            };
            let results = target.join("bench-results").join(name);
            let tool = build_tool(&root, &target, &o.features)?;
            return time_products(&root, &tool, &o, threads, scale_flag, &dir, &results);
        }
        let files = real_matrices(which)?;
        let results = target
            .join("bench-results")
            .join(format!("matrices-{}", folder_name(Path::new(which))));
        let tool = build_tool(&root, &target, &o.features)?;
        return time_files(&root, &tool, &o, threads, scale_flag, &files, &results);
    }

    let matrices = target.join("bench-matrices");
    let results = target.join("bench-results").join(scale);
    std::fs::create_dir_all(&results)
        .map_err(|e| format!("cannot create {}: {e}", results.display()))?;
    let tool = build_tool(&root, &target, &o.features)?;

    eprintln!("== exporting the operands to {}", matrices.display());
    let mut export = Command::new(&tool);
    export
        .arg("export")
        .arg("--dir")
        .arg(&matrices)
        .args(scale_flag);
    status(&mut export, "hetsparse-bench export")?;

    let folder = matrices.join(scale);
    let classes = manifest_classes(&folder.join("manifest.tsv"))?;
    let rounds = o.rounds.unwrap_or(1);
    let mut files = Vec::new();
    let mut peers = o.peers;
    for round in 1..=rounds {
        for class in &classes {
            eprintln!("== round {round} of {rounds}, {class}: hetsparse with {threads} threads");
            let ours = results.join(format!("hetsparse-{round}-{class}.tsv"));
            let mut time = Command::new(&tool);
            time.arg("time")
                .args(scale_flag)
                .args(class_args(threads, class))
                .arg(&ours);
            if o.reference {
                time.arg("--reference");
            }
            status(with_threads(&mut time, threads), "hetsparse-bench time")?;
            files.push(ours);
            if peers {
                let out = results.join(format!("peers-{round}-{class}.tsv"));
                match run_peers(&root, &o, threads, &folder, class, &out, &[]) {
                    Ok(()) => files.push(out),
                    // Peers are optional: say why they are absent and print our numbers anyway.
                    Err(e) => {
                        eprintln!("peers not measured: {e}");
                        peers = false;
                    }
                }
            }
        }
    }

    print_report(&tool, &files, &results)
}

/// The name `--matrices` takes for the real-workload products.
const REAL_SET: &str = "real";

/// The manifest of a folder of real-workload products.
const PRODUCTS: &str = "products.tsv";

/// The last component of `dir`, naming its results folder.
fn folder_name(dir: &Path) -> String {
    dir.file_name()
        .map_or_else(|| "dir".into(), |n| n.to_string_lossy().into_owned())
}

/// The folder of real-workload products that `--matrices which` names: a folder holding
/// `products.tsv`, or for `real` the one `benches/peers/real_products.py` makes; `None` for
/// anything else (Matrix Market files).
fn real_products_dir(
    root: &Path,
    target: &Path,
    o: &Options,
    which: &str,
) -> Result<Option<PathBuf>, String> {
    let dir = Path::new(which);
    if dir.is_dir() {
        return Ok(dir.join(PRODUCTS).is_file().then(|| dir.to_path_buf()));
    }
    if which == REAL_SET {
        return make_real_products(root, target, o).map(Some);
    }
    Ok(None)
}

/// Runs `benches/peers/real_products.py` (with the peers' Python) into
/// `target/bench-matrices/real[-quick]/`, which keeps a complete folder as it is.
fn make_real_products(root: &Path, target: &Path, o: &Options) -> Result<PathBuf, String> {
    let dir = target
        .join("bench-matrices")
        .join(if o.quick { "real-quick" } else { "real" });
    let python = peers_python(o);
    eprintln!("== the real-workload products into {}", dir.display());
    let mut make = Command::new(&python);
    make.arg(root.join("benches/peers/real_products.py"))
        .arg(&dir);
    if o.quick {
        make.arg("--quick");
    }
    status(&mut make, "real_products.py")?;
    Ok(dir)
}

/// The product names of a real-workload manifest (`products.tsv`: `name<TAB>A<TAB>B`, and
/// optionally `<TAB>source`), in its order; `origin` names it in errors, which give the line.
fn product_names(text: &str, origin: &str) -> Result<Vec<String>, String> {
    let mut names = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let fields: Vec<&str> = line.split('\t').collect();
        if !(3..=4).contains(&fields.len()) || fields.iter().any(|f| f.trim().is_empty()) {
            return Err(format!(
                "{origin} line {}: expected 3 or 4 non-empty tab-separated fields \
                 (name, A, B[, source]), found `{line}`",
                i + 1
            ));
        }
        names.push(fields[0].to_string());
    }
    if names.is_empty() {
        return Err(format!("{origin} lists no product"));
    }
    Ok(names)
}

/// Times our backends on each real-workload product of `dir`, as `A · B` and SpGEMM only,
/// round by round, and with `--peers` the peers right after ours on the same product (their
/// manifest, with our names and counts, written first by `export --real`), and prints one
/// table.
fn time_products(
    root: &Path,
    tool: &Path,
    o: &Options,
    threads: usize,
    scale_flag: &[&str],
    dir: &Path,
    results: &Path,
) -> Result<(), String> {
    let manifest = dir.join(PRODUCTS);
    let text = std::fs::read_to_string(&manifest)
        .map_err(|e| format!("cannot read {}: {e}", manifest.display()))?;
    let names = product_names(&text, &manifest.display().to_string())?;
    std::fs::create_dir_all(results)
        .map_err(|e| format!("cannot create {}: {e}", results.display()))?;
    let operands = results.join("operands");
    if o.peers {
        eprintln!(
            "== the peers' manifest of the products in {}",
            operands.display()
        );
        let mut export = Command::new(tool);
        export
            .arg("export")
            .arg("--dir")
            .arg(&operands)
            .arg("--real")
            .arg(dir);
        status(&mut export, "hetsparse-bench export")?;
    }
    let rounds = o.rounds.unwrap_or(1);
    let mut outs = Vec::new();
    let mut peers = o.peers;
    for round in 1..=rounds {
        for name in &names {
            eprintln!("== round {round} of {rounds}, {name}: hetsparse with {threads} threads");
            let out = results.join(format!("hetsparse-{round}-{name}.tsv"));
            let mut time = Command::new(tool);
            time.arg("time")
                .args(scale_flag)
                .arg("--real")
                .arg(dir)
                .args(["--ops", "spgemm"])
                .args(class_args(threads, name))
                .arg(&out);
            if o.reference {
                time.arg("--reference");
            }
            status(with_threads(&mut time, threads), "hetsparse-bench time")?;
            outs.push(out);
            if peers {
                let out = results.join(format!("peers-{round}-{name}.tsv"));
                match run_peers(
                    root,
                    o,
                    threads,
                    &operands,
                    name,
                    &out,
                    &["--ops", "spgemm"],
                ) {
                    // As for the generated classes: our numbers are printed without the peers.
                    Ok(()) => outs.push(out),
                    Err(e) => {
                        eprintln!("peers not measured: {e}");
                        peers = false;
                    }
                }
            }
        }
    }
    print_report(tool, &outs, results)
}

/// The `.mtx` files of `--matrices`: a folder's, or a download set's (downloaded if missing).
fn real_matrices(which: &str) -> Result<Vec<PathBuf>, String> {
    let dir = Path::new(which);
    if dir.is_dir() {
        let mut files = Vec::new();
        mtx_files(dir, &mut files)?;
        files.sort();
        if files.is_empty() {
            return Err(format!("{} holds no .mtx file", dir.display()));
        }
        return Ok(files);
    }
    let Some(members) = crate::sets::members(which) else {
        return Err(format!(
            "--matrices `{which}` is neither a folder nor a set ({})",
            crate::sets::names()
        ));
    };
    let names: Vec<String> = members.into_iter().map(String::from).collect();
    crate::download::download_all(&crate::download::default_config()?, &names)
}

/// Every `.mtx` file under `dir`, less the collection's auxiliary files (`Name/Name_*.mtx`).
fn mtx_files(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), String> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    for entry in entries {
        let path = entry
            .map_err(|e| format!("cannot read {}: {e}", dir.display()))?
            .path();
        if path.is_dir() {
            mtx_files(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "mtx") && !auxiliary(&path) {
            out.push(path);
        }
    }
    Ok(())
}

/// Whether `path` is `Name/Name_*.mtx`, an auxiliary file of a SuiteSparse archive.
fn auxiliary(path: &Path) -> bool {
    let folder = path.parent().and_then(Path::file_name);
    let stem = path.file_stem();
    match (folder, stem) {
        (Some(f), Some(s)) => s
            .to_string_lossy()
            .strip_prefix(f.to_string_lossy().as_ref())
            .is_some_and(|rest| rest.starts_with('_')),
        _ => false,
    }
}

/// Times our backends on each file, round by round, and with `--peers` the peers right after
/// ours on the same file, and prints one table.
///
/// The peers read a manifest of the files that our tool writes (`export --matrix`, into
/// `results/operands/`), so that both sides name each matrix alike and divide the same flop
/// counts; its classes, in the files' order, name the peers' rows.
fn time_files(
    root: &Path,
    tool: &Path,
    o: &Options,
    threads: usize,
    scale_flag: &[&str],
    files: &[PathBuf],
    results: &Path,
) -> Result<(), String> {
    std::fs::create_dir_all(results)
        .map_err(|e| format!("cannot create {}: {e}", results.display()))?;
    let operands = results.join("operands");
    let names = if o.peers {
        eprintln!(
            "== the peers' manifest of the matrices in {}",
            operands.display()
        );
        let mut export = Command::new(tool);
        export.arg("export").arg("--dir").arg(&operands);
        for file in files {
            export.arg("--matrix").arg(file);
        }
        status(&mut export, "hetsparse-bench export")?;
        let names = manifest_classes(&operands.join("manifest.tsv"))?;
        if names.len() != files.len() {
            return Err(format!(
                "{} lists {} matrices for {} files",
                operands.join("manifest.tsv").display(),
                names.len(),
                files.len()
            ));
        }
        names
    } else {
        Vec::new()
    };
    let rounds = o.rounds.unwrap_or(1);
    let mut outs = Vec::new();
    let mut peers = o.peers;
    for round in 1..=rounds {
        for (i, file) in files.iter().enumerate() {
            let stem = file
                .file_stem()
                .map_or_else(|| "matrix".into(), |s| s.to_string_lossy().into_owned());
            eprintln!(
                "== round {round} of {rounds}, {}: hetsparse with {threads} threads",
                file.display()
            );
            let out = results.join(format!("hetsparse-{round}-{stem}.tsv"));
            let mut time = Command::new(tool);
            time.arg("time")
                .args(scale_flag)
                .args(["--threads", &threads.to_string(), "--matrix"])
                .arg(file)
                .arg("--out")
                .arg(&out);
            if o.reference {
                time.arg("--reference");
            }
            status(with_threads(&mut time, threads), "hetsparse-bench time")?;
            outs.push(out);
            if let Some(name) = names.get(i).filter(|_| peers) {
                let out = results.join(format!("peers-{round}-{stem}.tsv"));
                match run_peers(root, o, threads, &operands, name, &out, &[]) {
                    Ok(()) => outs.push(out),
                    // As for the generated classes: our numbers are printed without the peers.
                    Err(e) => {
                        eprintln!("peers not measured: {e}");
                        peers = false;
                    }
                }
            }
        }
    }
    print_report(tool, &outs, results)
}

/// Merges result files into the markdown table, prints it and saves it as `table.md`.
fn print_report(tool: &Path, files: &[PathBuf], results: &Path) -> Result<(), String> {
    let html_path = results.join("report.html");
    let mut report = Command::new(tool);
    report
        .arg("report")
        .arg("--html")
        .arg(&html_path)
        .args(files);
    let out = report
        .output()
        .map_err(|e| format!("cannot run {}: {e}", tool.display()))?;
    if !out.status.success() {
        return Err(format!(
            "hetsparse-bench report failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let table = String::from_utf8_lossy(&out.stdout);
    let table_path = results.join("table.md");
    std::fs::write(&table_path, table.as_bytes())
        .map_err(|e| format!("cannot write {}: {e}", table_path.display()))?;
    println!("{table}");
    eprintln!(
        "(table saved to {}, charts to {})",
        table_path.display(),
        html_path.display()
    );
    Ok(())
}

fn workspace_root() -> PathBuf {
    // xtask/ sits in the workspace root.
    let xtask = Path::new(env!("CARGO_MANIFEST_DIR"));
    xtask.parent().unwrap_or(xtask).to_path_buf()
}

/// Builds the timing tool in release mode with its default features (the `cpu` backend) and
/// the requested ones.
fn build_tool(root: &Path, target: &Path, features: &[String]) -> Result<PathBuf, String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    eprintln!(
        "== building hetsparse-bench (default features + [{}])",
        features.join(",")
    );
    let mut build = Command::new(cargo);
    build.current_dir(root).args([
        "build",
        "--release",
        "-p",
        "hetsparse-bench",
        "--bin",
        "hetsparse-bench",
    ]);
    if !features.is_empty() {
        build.args(["--features", &features.join(",")]);
    }
    status(&mut build, "cargo build")?;
    Ok(target
        .join("release")
        .join(format!("hetsparse-bench{}", std::env::consts::EXE_SUFFIX)))
}

/// The arguments our tool and the peers' script share for one class: threads, class, and
/// `--out`, whose file follows.
fn class_args(threads: usize, class: &str) -> [String; 5] {
    [
        "--threads".into(),
        threads.to_string(),
        "--classes".into(),
        class.into(),
        "--out".into(),
    ]
}

/// The classes of an exported manifest, in its order.
fn manifest_classes(manifest: &Path) -> Result<Vec<String>, String> {
    let text = std::fs::read_to_string(manifest)
        .map_err(|e| format!("cannot read {}: {e}", manifest.display()))?;
    let classes: Vec<String> = text
        .lines()
        .skip(1)
        .filter_map(|line| line.split('\t').next())
        .filter(|class| !class.is_empty())
        .map(String::from)
        .collect();
    if classes.is_empty() {
        return Err(format!("{} lists no class", manifest.display()));
    }
    Ok(classes)
}

/// `--gpu`: the `gpu_spgemm` bench (and with `--peers` the cuSPARSE peer script it runs),
/// then the `first_call` bench (the default device choice on a process's first call; with
/// `--peers`, on the real-workload products too, made first by `benches/peers/real_products.py`
/// into `target/bench-matrices/real[-quick]/`), their output printed and saved in
/// `target/bench-results/gpu[-quick]/table.md`.
fn gpu_bench(root: &Path, target: &Path, o: &Options) -> Result<(), String> {
    let results = target
        .join("bench-results")
        .join(if o.quick { "gpu-quick" } else { "gpu" });
    std::fs::create_dir_all(&results)
        .map_err(|e| format!("cannot create {}: {e}", results.display()))?;
    let mut features = vec!["cuda".to_string()];
    features.extend(o.features.iter().filter(|f| *f != "cuda").cloned());
    let real = if o.peers {
        Some(make_real_products(root, target, o)?)
    } else {
        None
    };
    let mut table = String::new();
    for bench_name in ["gpu_spgemm", "first_call"] {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut bench = Command::new(cargo);
        bench
            .current_dir(root)
            .args([
                "bench",
                "-p",
                "hetsparse-bench",
                "--bench",
                bench_name,
                "--features",
                &features.join(","),
            ])
            .env("HETSPARSE_BENCH_DIR", target.join("gpu-spgemm"))
            .stdout(std::process::Stdio::piped());
        if o.quick {
            bench.env("HETSPARSE_BENCH_SIZE_DIVISOR", "16");
        }
        if let Some(rounds) = o.rounds {
            bench.env("HETSPARSE_BENCH_REPS", rounds.to_string());
        }
        if let Some(threads) = o.threads {
            bench.env("RAYON_NUM_THREADS", threads.to_string());
        }
        if o.peers && bench_name == "gpu_spgemm" {
            bench.env("HETSPARSE_BENCH_PEERS", peers_python(o));
        }
        if let Some(dir) = &real {
            bench.env("HETSPARSE_BENCH_REAL", dir);
        }
        eprintln!(
            "== the {bench_name} bench{}",
            if o.peers && bench_name == "gpu_spgemm" {
                " and cuSPARSE"
            } else {
                ""
            }
        );
        let output = bench
            .spawn()
            .and_then(|c| c.wait_with_output())
            .map_err(|e| format!("cannot start cargo bench: {e}"))?;
        let part = String::from_utf8_lossy(&output.stdout);
        print!("{part}");
        if !output.status.success() {
            return Err(format!(
                "cargo bench --bench {bench_name} failed ({})",
                output.status
            ));
        }
        if part.trim().is_empty() {
            return Err(format!("the {bench_name} bench found no CUDA GPU"));
        }
        table.push_str(&part);
        table.push('\n');
    }
    let path = results.join("table.md");
    std::fs::write(&path, table.as_bytes())
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    eprintln!("== saved {}", path.display());
    Ok(())
}

/// The Python that runs the peers' scripts.
fn peers_python(o: &Options) -> String {
    o.python
        .clone()
        .or_else(|| std::env::var("HETSPARSE_PEERS_PYTHON").ok())
        .unwrap_or_else(|| "python3".into())
}

fn run_peers(
    root: &Path,
    o: &Options,
    threads: usize,
    folder: &Path,
    class: &str,
    out: &Path,
    extra: &[&str],
) -> Result<(), String> {
    let python = peers_python(o);
    eprintln!("== {class}: the peers with {python}, {threads} threads");
    let mut peers = Command::new(&python);
    peers
        .arg(root.join("benches/peers/peers.py"))
        .arg("--manifest")
        .arg(folder.join("manifest.tsv"))
        .args(class_args(threads, class))
        .arg(out)
        .args(extra);
    if o.quick {
        peers.arg("--quick");
    }
    status(with_threads(&mut peers, threads), "peers.py")
}

/// The same environment for our timings and the peers': one thread count for rayon, OpenMP
/// (GraphBLAS, MKL) and MKL itself, and glibc's allocator keeping freed memory.
///
/// Every timed run allocates its result anew and the harness frees it. By default glibc hands
/// large blocks back to the kernel, so each run first-touches fresh pages; on virtual machines
/// that return freed memory to the host (free page reporting, as on the development machine)
/// that costs up to 3 s per GB and varies from run to run, swamping the products being timed.
/// With one arena (so that allocations on worker threads, such as the CPU backend's pool,
/// follow the same rules), no `mmap` and no trimming, each run reuses the pages of the run
/// before, for every implementation alike.
fn with_threads(cmd: &mut Command, threads: usize) -> &mut Command {
    let n = threads.to_string();
    for var in ["RAYON_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"] {
        cmd.env(var, &n);
    }
    cmd.env(
        "GLIBC_TUNABLES",
        "glibc.malloc.arena_max=1:glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736",
    )
}

fn status(cmd: &mut Command, what: &str) -> Result<(), String> {
    let s = cmd
        .status()
        .map_err(|e| format!("cannot start {what}: {e}"))?;
    if s.success() {
        Ok(())
    } else {
        Err(format!("{what} failed ({s})"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn parses_every_flag() {
        let o = parse(&args(
            "--quick --peers --threads 4 --rounds 2 --features cuda,opencl --reference --python /v/bin/python",
        ))
        .unwrap();
        assert_eq!(
            o,
            Options {
                quick: true,
                peers: true,
                threads: Some(4),
                rounds: Some(2),
                features: vec!["cuda".into(), "opencl".into()],
                reference: true,
                python: Some("/v/bin/python".into()),
                matrices: None,
                gpu: false,
            }
        );
        assert!(parse(&args("--gpu --peers")).unwrap().gpu);
        assert_eq!(
            parse(&args("--matrices spgemm"))
                .unwrap()
                .matrices
                .as_deref(),
            Some("spgemm")
        );
        assert_eq!(parse(&[]).unwrap(), Options::default());
    }

    #[test]
    fn rejects_bad_arguments() {
        assert!(parse(&args("--threads 0"))
            .unwrap_err()
            .contains("positive"));
        assert!(parse(&args("--rounds x"))
            .unwrap_err()
            .contains("--rounds `x` is not a positive count"));
        assert!(parse(&args("--threads"))
            .unwrap_err()
            .contains("needs a value"));
        assert!(parse(&args("--fast"))
            .unwrap_err()
            .contains("unknown argument"));
        assert!(parse(&args("--matrices"))
            .unwrap_err()
            .contains("needs a value"));
    }

    #[test]
    fn reads_product_names_of_three_and_four_columns() {
        let text = "sa.l0.AP\tA\tP\nsa.l0.RAP\tR\tAP\tPyAMG 5.4.1\n\n";
        assert_eq!(
            product_names(text, "p.tsv").unwrap(),
            ["sa.l0.AP", "sa.l0.RAP"]
        );
        assert!(product_names("x\ta\tb\ny\ta", "p.tsv")
            .unwrap_err()
            .starts_with("p.tsv line 2: expected 3 or 4"));
        assert!(product_names("x\ta\tb\ts\textra", "p.tsv")
            .unwrap_err()
            .starts_with("p.tsv line 1:"));
        assert!(product_names("x\ta\t\n", "p.tsv")
            .unwrap_err()
            .contains("line 1"));
        assert!(product_names("\n", "p.tsv")
            .unwrap_err()
            .contains("lists no product"));
    }

    #[test]
    fn a_folder_with_products_tsv_is_a_real_set() {
        let dir = std::env::temp_dir().join(format!("hetsparse-xtask-real-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let o = Options::default();
        let root = Path::new("/nonexistent");
        let which = dir.to_str().unwrap();
        assert_eq!(real_products_dir(root, root, &o, which).unwrap(), None);
        std::fs::write(dir.join(PRODUCTS), "p\ta\tb\n").unwrap();
        assert_eq!(
            real_products_dir(root, root, &o, which).unwrap(),
            Some(dir.clone())
        );
        assert_eq!(real_products_dir(root, root, &o, "spgemm").unwrap(), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn finds_the_matrices_of_a_folder_without_auxiliary_files() {
        let dir = std::env::temp_dir().join(format!("hetsparse-xtask-mtx-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for f in [
            "G/cant/cant.mtx",
            "G/cant/cant_b.mtx",
            "G/x/y.mtx",
            "top.mtx",
            "G/notes.txt",
        ] {
            let p = dir.join(f);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, "").unwrap();
        }
        let files = real_matrices(dir.to_str().unwrap()).unwrap();
        let rel: Vec<_> = files
            .iter()
            .map(|f| f.strip_prefix(&dir).unwrap())
            .collect();
        assert_eq!(
            rel,
            [
                Path::new("G/cant/cant.mtx"),
                Path::new("G/x/y.mtx"),
                Path::new("top.mtx")
            ]
        );
        let empty = dir.join("G/empty");
        std::fs::create_dir_all(&empty).unwrap();
        assert!(real_matrices(empty.to_str().unwrap())
            .unwrap_err()
            .contains("holds no .mtx file"));
        assert!(real_matrices("no-such-set-or-folder")
            .unwrap_err()
            .contains("neither a folder nor a set"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
