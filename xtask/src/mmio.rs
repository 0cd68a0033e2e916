//! `cargo xtask mmio`: Matrix Market read and write speed against scipy on generated files of
//! about 150 MB; runs hetsparse-core's `matrix_market_io` example in release mode, which prints
//! one markdown table (docs/benchmarks.md, "Matrix Market I/O").

use std::path::Path;
use std::process::Command;

const USAGE: &str =
    "usage: cargo xtask mmio [--mb N] [--threads 1,2,...] [--repeat R] [--python PATH] [--dir DIR]
  --mb N           size of each generated file in MB (default 150)
  --threads LIST   thread counts to time, comma-separated (default 1, 2 and all cores)
  --repeat R       best of R runs per cell (default 3)
  --python PATH    Python with scipy: time scipy.io.mmread/mmwrite on the same files
                   (default: $HETSPARSE_PEERS_PYTHON if set, else scipy is left out)
  --dir DIR        where the generated files are kept (default target/mmio-bench)";

/// Runs `cargo xtask mmio ARGS`.
pub fn run(args: &[String]) -> Result<(), String> {
    if args.iter().any(|a| a == "-h" || a == "--help") {
        println!("{USAGE}");
        return Ok(());
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .ok_or("xtask has no parent folder")?;
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut command = Command::new(cargo);
    command
        .current_dir(&root)
        .args(["run", "--release", "--quiet", "-p", "hetsparse-core"])
        .args(["--example", "matrix_market_io", "--"])
        .args(args);
    if !args.iter().any(|a| a == "--python") {
        if let Some(python) = std::env::var_os("HETSPARSE_PEERS_PYTHON") {
            command.arg("--python").arg(python);
        }
    }
    let status = command
        .status()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!(
            "the matrix_market_io example failed ({status})\n{USAGE}"
        ))
    }
}
