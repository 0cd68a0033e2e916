//! hetsparse: sparse matrix multiplication on CPU cores, CUDA GPUs and OpenCL devices.
//!
//! This crate re-exports [`hetsparse_core`] and, behind Cargo features, the backend crates:
//! `cpu` (default), `cuda` and `opencl`. [`Context::auto`] finds every device they reach and
//! uses them as one.
//!
//! The features `sprs`, `nalgebra-sparse`, `faer` and `ndarray` add conversions (`TryFrom`)
//! between hetsparse's matrices and those libraries' in [`interop`](hetsparse_core::interop),
//! moving the values rather than copying them.
#![warn(missing_docs)]

pub mod calibration;
mod choice;
mod context;

pub use calibration::CalibrationCache;
pub use choice::DeviceChoice;
pub use context::{
    Calibrated, CalibrationOptions, Context, ContextScalar, FoundDevice, Unavailable,
};
pub use hetsparse_core::*;
pub use hetsparse_sched::{Choice, Chosen, Measured, OpKind, Prediction, Source, Workload};

/// The CPU backend (feature `cpu`).
#[cfg(feature = "cpu")]
pub use hetsparse_cpu as cpu;
/// The CUDA backend (feature `cuda`).
#[cfg(feature = "cuda")]
pub use hetsparse_cuda as cuda;
/// The OpenCL backend (feature `opencl`).
#[cfg(feature = "opencl")]
pub use hetsparse_opencl as opencl;
/// Schedulers that compose backends.
pub use hetsparse_sched as sched;

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeExamples;
