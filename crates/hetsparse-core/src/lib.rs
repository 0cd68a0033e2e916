//! Core of hetsparse: sparse formats, scalars, errors, Matrix Market I/O, product analysis,
//! matrix generators, serial reference kernels, the [`Backend`] trait every device implements,
//! and the conformance suite every backend must pass.
//!
//! Data flows format → analysis → plan → kernel → result: a product `A · B` starts as matrices
//! in one of the [`format`](mod@format)s, is measured by [`analysis`], and is run by a [`Backend`].
//!
//! The Cargo features `sprs`, `nalgebra-sparse`, `faer` and `ndarray` add the module `interop`:
//! `TryFrom` conversions between these formats and those libraries' matrices, moving the values.
//!
//! ```
//! use hetsparse_core::{format::Csr, Backend, ReferenceBackend, SpgemmAlgorithm};
//! let a = Csr::<f64>::identity(3)?;
//! let c = ReferenceBackend.spgemm(&a, &a, SpgemmAlgorithm::Auto)?;
//! assert_eq!(c, a);
//! # Ok::<(), hetsparse_core::Error>(())
//! ```
#![warn(missing_docs)]

pub mod analysis;
pub mod backend;
#[cfg(feature = "conformance")]
pub mod conformance;
pub mod error;
#[cfg(feature = "conformance")]
pub mod fault;
pub mod format;
pub mod generate;
pub mod host;
#[cfg(any(
    feature = "sprs",
    feature = "nalgebra-sparse",
    feature = "faer",
    feature = "ndarray"
))]
pub mod interop;
pub mod matrix_market;
pub mod reference;
pub mod scalar;
pub mod semiring;
pub mod vector;
mod write_back;

pub use backend::{
    AccumulateOp, Backend, BackendKind, Capabilities, ChunkPipeline, ChunkPlace, ChunkProduct,
    ChunkSink, ChunkTiming, CsrOperand, CsrWindow, DenseOperand, Device, DeviceInfo, DeviceKind,
    DeviceProfile, Mask, MaskKind, MaskedWork, MemoryPool, MemoryRequirement, MemorySpace,
    Operation, PatternId, PlaceDone, PlanState, ProductBuffer, ProductChunk, ProductLayout,
    Progress, Reservation, Residency, ResidentCsr, ResidentDense, ResidentOps, RunControl,
    SemiringKind, Shaped, SparseOperand, SpgemmAlgorithm, SpgemmFeatures, SpgemmOptions,
    SpgemmPlan, SpmmOptions, SpmvOptions, Validated, VectorOperand, VectorProductKind,
    VectorProductOptions,
};
pub use error::{DeviceFault, Error, FormatError, MatrixMarketError, Result};
pub use format::{
    Bsr, Coo, Csc, Cspr, Csr, Dense, Dia, DiaRowBlock, Ellr, HostArray, Layout, SparseFormat,
    SparseRef, SplicedCsr,
};
pub use reference::ReferenceBackend;
pub use scalar::{Accumulator, Boolean, Scalar, ScalarType};
pub use semiring::{PlusTimes, Semiring, SemiringVisitor};
pub use vector::SparseVector;
pub use write_back::{write_back, write_back_new, write_back_owned};

/// Re-exported scalar crates, so users name the same `f16`, `bf16` and `Complex` types.
pub use half::{bf16, f16};
pub use num_complex::Complex;

/// Asks the operating system to back the whole pages inside `buffer` with transparent huge
/// pages, for backends about to write a large result into fresh memory: faulting it in 2 MiB
/// pages rather than 4 KiB ones costs a fraction of the page faults (and of the TLB misses
/// afterwards). Linux only (`madvise(MADV_HUGEPAGE)`, which matters where the system leaves
/// huge pages to the program); buffers under 4 MiB are left alone. Only advice: when it is
/// refused nothing changes but speed.
pub fn advise_huge_pages<X>(buffer: &mut [X]) {
    const MIN_BYTES: usize = 4 << 20;
    let bytes = std::mem::size_of_val(buffer);
    if bytes < MIN_BYTES {
        return;
    }
    #[cfg(target_os = "linux")]
    {
        // SAFETY: sysconf has no preconditions.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
            .ok()
            .filter(|&p| p > 0)
            .unwrap_or(4096);
        let start = buffer.as_mut_ptr() as usize;
        let first = start.next_multiple_of(page);
        let last = (start + bytes) / page * page;
        if last > first {
            // SAFETY: the range lies inside `buffer`, memory this process owns; MADV_HUGEPAGE
            // changes how pages are backed, never their contents.
            let rc = unsafe {
                libc::madvise(
                    first as *mut libc::c_void,
                    last - first,
                    libc::MADV_HUGEPAGE,
                )
            };
            if rc != 0 {
                tracing::trace!("madvise(MADV_HUGEPAGE) refused; small pages");
            }
        }
    }
}

/// Physical memory of the host in bytes, from `/proc/meminfo` where there is one, else 0;
/// read once per process (a host backend's [`Device::info`] asks for it at every call a
/// context routes).
pub fn host_memory_bytes() -> u64 {
    static TOTAL: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *TOTAL.get_or_init(|| meminfo_bytes("MemTotal:"))
}

/// Memory the host can give a process now without swapping, in bytes (`MemAvailable` in
/// `/proc/meminfo`), else 0.
pub fn host_available_bytes() -> u64 {
    meminfo_bytes("MemAvailable:")
}

/// The host's last-level caches together, in bytes, as Linux lists them under
/// `/sys/devices/system/cpu/cpu*/cache`: each distinct cache of the highest level counted once
/// (a chip with one L3 per group of cores has several). `None` where the system does not say.
pub fn host_cache_bytes() -> Option<u64> {
    let cpus = std::fs::read_dir("/sys/devices/system/cpu").ok()?;
    // (level, the CPUs sharing it) -> bytes
    let mut caches: std::collections::BTreeMap<(u32, String), u64> = Default::default();
    for cpu in cpus.flatten() {
        let name = cpu.file_name();
        let name = name.to_string_lossy();
        if !(name.starts_with("cpu") && name[3..].bytes().all(|b| b.is_ascii_digit())) {
            continue;
        }
        let Ok(indices) = std::fs::read_dir(cpu.path().join("cache")) else {
            continue;
        };
        for index in indices.flatten() {
            let read = |f: &str| std::fs::read_to_string(index.path().join(f)).ok();
            let (Some(level), Some(size), Some(shared)) =
                (read("level"), read("size"), read("shared_cpu_list"))
            else {
                continue;
            };
            if read("type").is_some_and(|t| t.trim() == "Instruction") {
                continue;
            }
            let (Ok(level), Some(bytes)) = (level.trim().parse::<u32>(), parse_size(&size)) else {
                continue;
            };
            caches.insert((level, shared.trim().to_string()), bytes);
        }
    }
    let top = caches.keys().map(|(level, _)| *level).max()?;
    let total: u64 = caches
        .iter()
        .filter(|((level, _), _)| *level == top)
        .map(|(_, bytes)| bytes)
        .sum();
    (total > 0).then_some(total)
}

/// `32768K`, `2M`, `1024` (bytes) as sysfs writes cache sizes.
fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (digits, unit) = match s.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((at, _)) => s.split_at(at),
        None => (s, ""),
    };
    let n: u64 = digits.parse().ok()?;
    let scale = match unit.trim() {
        "" => 1,
        "K" | "KB" | "KiB" => 1 << 10,
        "M" | "MB" | "MiB" => 1 << 20,
        "G" | "GB" | "GiB" => 1 << 30,
        _ => return None,
    };
    n.checked_mul(scale)
}

fn meminfo_bytes(field: &str) -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb.saturating_mul(1024))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_sizes_parse_as_sysfs_writes_them() {
        assert_eq!(parse_size("32768K\n"), Some(32 << 20));
        assert_eq!(parse_size("2M"), Some(2 << 20));
        assert_eq!(parse_size("512"), Some(512));
        assert_eq!(parse_size("12Q"), None);
        assert_eq!(parse_size(""), None);
        if cfg!(target_os = "linux")
            && std::path::Path::new("/sys/devices/system/cpu/cpu0/cache").exists()
        {
            let bytes = host_cache_bytes().expect("sysfs lists the caches");
            assert!(
                (64 << 10..1 << 40).contains(&bytes),
                "{bytes} bytes of cache"
            );
        }
    }
}
