//! `cargo xtask kernels`: compiles `kernels-cuda/*.cu` to the PTX the CUDA backend embeds.
//!
//! PTX target: `compute_75` (Turing and newer; nvcc 13's oldest target) with the PTX ISA
//! header restamped to 8.0. nvcc 13 writes ISA 9.0, which CUDA 12 drivers refuse
//! (CUDA_ERROR_UNSUPPORTED_PTX_VERSION); the kernels use nothing newer than ISA 8.0 (CUDA
//! 12.0), and the restamped file is checked by assembling it with ptxas from CUDA 12.0. So
//! the committed PTX loads on CUDA 12.0+ and 13 drivers, on sm_75 and newer GPUs.
//!
//! Beside the PTX, each module is compiled ahead of time for the architectures in
//! [`BINARY_ARCHS`] (`NAME.sm_90.cubin`): on such a GPU the backend loads the binary and the
//! driver has nothing to compile when a process starts; elsewhere, or if a driver refuses the
//! binary, it loads the PTX. `kernels-cuda/SOURCES` records a fingerprint of the sources
//! both were built from, which a test of the CUDA crate compares with the sources in the tree,
//! so an edited kernel without rebuilt images fails the tests.

use std::env;
use std::ffi::OsStr;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// PTX ISA the committed files declare.
const PTX_ISA: &str = "8.0";
/// Virtual architecture compiled for.
const ARCH: &str = "compute_75";
/// Real architecture the ptxas check assembles for.
const CHECK_SM: &str = "sm_75";
/// Real architectures every module is also compiled for, as a binary the driver loads as is.
/// sm_90: the H100 and H200 (a binary runs on its major version's later minors too).
const BINARY_ARCHS: &[&str] = &["sm_90"];

const HOW_TO_GET_NVCC: &str = "nvcc not found: set CUDA_PATH to a CUDA toolkit or put nvcc on PATH. \
Without a toolkit: `python3 -m venv /tmp/nvcc && /tmp/nvcc/bin/pip install nvidia-cuda-nvcc` and add \
/tmp/nvcc/lib/python3*/site-packages/nvidia/cu13/bin and .../cu13/nvvm/bin to PATH";

const HOW_TO_GET_PTXAS12: &str = "install the ptxas of CUDA 12.0 with \
`python3 -m venv /tmp/nvcc12 && /tmp/nvcc12/bin/pip install nvidia-cuda-nvcc-cu12==12.0.140` and set \
PTXAS12=/tmp/nvcc12/lib/python3*/site-packages/nvidia/cuda_nvcc/bin/ptxas (or put it on PATH)";

/// Runs the task from the workspace root.
pub fn run(root: &Path) -> Result<(), String> {
    let dir = root.join("kernels-cuda");
    let nvcc = find_nvcc().ok_or_else(|| HOW_TO_GET_NVCC.to_string())?;
    let ptxas12 = find_ptxas12();
    if ptxas12.is_none() {
        eprintln!("warning: no ptxas from CUDA 12 found, the PTX is not checked against CUDA 12 drivers; {HOW_TO_GET_PTXAS12}");
    }
    let mut sources: Vec<PathBuf> = fs::read_dir(&dir)
        .map_err(|e| format!("cannot read {}: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension() == Some(OsStr::new("cu")))
        .collect();
    sources.sort();
    if sources.is_empty() {
        return Err(format!("no .cu files in {}", dir.display()));
    }
    for source in sources {
        let ptx = source.with_extension("ptx");
        compile(&nvcc, "-ptx", ARCH, &dir, &source, &ptx)?;
        let text = fs::read_to_string(&ptx).map_err(|e| format!("{}: {e}", ptx.display()))?;
        let restamped = restamp(&text)?;
        fs::write(&ptx, restamped).map_err(|e| format!("{}: {e}", ptx.display()))?;
        if let Some(ptxas) = &ptxas12 {
            let out = Command::new(ptxas)
                .arg(format!("-arch={CHECK_SM}"))
                .arg(&ptx)
                .args(["-o", "/dev/null"])
                .output()
                .map_err(|e| format!("cannot run {}: {e}", ptxas.display()))?;
            if !out.status.success() {
                return Err(format!(
                    "{} does not assemble with CUDA 12.0's ptxas (so CUDA 12 drivers would reject it):\n{}",
                    ptx.display(),
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
        }
        eprintln!("built {} (PTX ISA {PTX_ISA}, {ARCH})", ptx.display());
        for sm in BINARY_ARCHS {
            let stem = source
                .file_stem()
                .and_then(OsStr::to_str)
                .unwrap_or("module");
            let cubin = dir.join(format!("{stem}.{sm}.cubin"));
            compile(&nvcc, "-cubin", sm, &dir, &source, &cubin)?;
            eprintln!("built {}", cubin.display());
        }
    }
    let fingerprint = sources_fingerprint(&dir)?;
    let record = dir.join("SOURCES");
    fs::write(&record, format!("{fingerprint:016x}\n"))
        .map_err(|e| format!("{}: {e}", record.display()))?;
    Ok(())
}

/// Runs nvcc on `source` (headers from `dir`): `kind` is `-ptx` or `-cubin`, `arch` the
/// virtual or real architecture.
fn compile(
    nvcc: &Path,
    kind: &str,
    arch: &str,
    dir: &Path,
    source: &Path,
    out: &Path,
) -> Result<(), String> {
    let status = Command::new(nvcc)
        .args([kind, "-O3", "-std=c++17"])
        .arg(format!("-arch={arch}"))
        .arg("-I")
        .arg(dir)
        .arg(source)
        .arg("-o")
        .arg(out)
        .status()
        .map_err(|e| format!("cannot run {}: {e}", nvcc.display()))?;
    if !status.success() {
        return Err(format!("nvcc failed on {} for {arch}", source.display()));
    }
    Ok(())
}

/// FNV-1a (64 bits) over the names and contents of every `.cu` and `.cuh` file in `dir`, in
/// name order. The CUDA crate's test `embedded_kernels_match_their_sources` computes the same.
fn sources_fingerprint(dir: &Path) -> Result<u64, String> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .map_err(|e| format!("cannot read {}: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| matches!(p.extension().and_then(OsStr::to_str), Some("cu" | "cuh")))
        .collect();
    files.sort();
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for file in files {
        let name = file.file_name().and_then(OsStr::to_str).unwrap_or_default();
        let text = fs::read(&file).map_err(|e| format!("{}: {e}", file.display()))?;
        for &byte in name
            .as_bytes()
            .iter()
            .chain([0u8].iter())
            .chain(text.iter())
        {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    Ok(hash)
}

/// Replaces the `.version` directive with [`PTX_ISA`].
fn restamp(ptx: &str) -> Result<String, String> {
    let mut found = false;
    let out: Vec<String> = ptx
        .lines()
        .map(|line| {
            if !found && line.trim_start().starts_with(".version ") {
                found = true;
                format!(".version {PTX_ISA}")
            } else {
                line.to_string()
            }
        })
        .collect();
    if !found {
        return Err("nvcc's PTX has no .version directive".into());
    }
    Ok(out.join("\n") + "\n")
}

fn find_nvcc() -> Option<PathBuf> {
    if let Some(root) = env::var_os("CUDA_PATH") {
        let p = Path::new(&root).join("bin").join("nvcc");
        if p.is_file() {
            return Some(p);
        }
    }
    on_path("nvcc").into_iter().next()
}

fn find_ptxas12() -> Option<PathBuf> {
    let mut candidates: Vec<PathBuf> = env::var_os("PTXAS12")
        .map(PathBuf::from)
        .into_iter()
        .collect();
    candidates.extend(on_path("ptxas"));
    candidates.into_iter().find(|p| {
        Command::new(p)
            .arg("--version")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).contains("release 12."))
            .unwrap_or(false)
    })
}

fn on_path(tool: &str) -> Vec<PathBuf> {
    env::var_os("PATH")
        .map(|paths| {
            env::split_paths(&paths)
                .map(|d| d.join(tool))
                .filter(|p| p.is_file())
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restamps_only_the_version_line() {
        let ptx = "//\n.version 9.0\n.target sm_75\n.version 1.0 // not a directive position\n";
        let out = restamp(ptx).unwrap();
        assert!(out.starts_with("//\n.version 8.0\n.target sm_75\n"));
        assert!(out.contains(".version 1.0"));
        assert!(restamp(".target sm_75\n").is_err());
    }
}
