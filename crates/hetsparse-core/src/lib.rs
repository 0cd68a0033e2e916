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

pub use backend::{
    Backend, Capabilities, ChunkPlace, ChunkProduct, ChunkSink, ChunkTiming, CsrOperand, CsrWindow,
    DenseOperand, Device, DeviceInfo, DeviceKind, DeviceProfile, MemoryPool, MemoryRequirement,
    MemorySpace, Operation, PatternId, PlaceDone, ProductBuffer, ProductChunk, ProductLayout,
    Progress, Reservation, ResidentCsr, ResidentDense, RunControl, Shaped, SparseOperand,
    SpgemmAlgorithm, SpgemmOptions, SpgemmPlan, SpmmOptions, SpmvOptions, VectorOperand,
};
pub use error::{DeviceFault, Error, FormatError, MatrixMarketError, Result};
pub use format::{
    Bsr, Coo, Csc, Cspr, Csr, Dense, Dia, DiaRowBlock, Ellr, HostArray, Layout, SparseFormat,
    SparseRef,
};
pub use reference::ReferenceBackend;
pub use scalar::{Accumulator, Scalar, ScalarType};
pub use semiring::{PlusTimes, Semiring};

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

/// Physical memory of the host in bytes, from `/proc/meminfo` where there is one, else 0.
pub fn host_memory_bytes() -> u64 {
    meminfo_bytes("MemTotal:")
}

/// Memory the host can give a process now without swapping, in bytes (`MemAvailable` in
/// `/proc/meminfo`), else 0.
pub fn host_available_bytes() -> u64 {
    meminfo_bytes("MemAvailable:")
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
