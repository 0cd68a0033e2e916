//! `cargo xtask`: project tasks. Each task lives in its own module; this file only dispatches.
mod bench;
mod download;
mod kernels;
mod mmio;
mod sets;

use std::process::ExitCode;

const USAGE: &str = "usage: cargo xtask <task> [ARGS]
tasks:
  kernels
        compile kernels-cuda/*.cu to the committed PTX (nvcc; ISA 8.0, checked with ptxas 12.0)
        and sm_90 binaries
  bench [--quick] [--peers] [--threads N] [--features LIST] [--reference] [--python PATH]
        [--matrices SET|DIR] [--gpu]
        benchmark every backend (and with --peers scipy, MKL, GraphBLAS, cuSPARSE) on the
        generated matrix classes, or on real .mtx files, and print one markdown table
        (docs/benchmarks.md); --gpu: SpGEMM at GPU sizes, CUDA resident and from host
        against the CPU backend and (--peers) cuSPARSE, one table
  download [--dir DIR] [--base-url URL] [--timeout SECS] NAME... | --set SET | --list-sets
        SuiteSparse matrices (Group/Name or Name, or a named set of the papers') into the
        cache folder ($HETSPARSE_DATA, else the user's cache folder)
  mmio [--mb N] [--threads LIST] [--repeat R] [--python PATH]
        Matrix Market read/write speed against scipy.io.mmread/mmwrite on generated files";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("bench") => bench::run(&args[1..]),
        Some("mmio") => mmio::run(&args[1..]),
        Some("download") => download::run(&args[1..]),
        Some("kernels") => {
            kernels::run(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(".."))
        }
        Some("-h" | "--help") | None => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Some(other) => Err(format!("unknown task `{other}`\n{USAGE}")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cargo xtask: {e}");
            ExitCode::FAILURE
        }
    }
}
