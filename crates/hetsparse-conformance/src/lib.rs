//! Nothing to use: this package holds the test program `tests/backends.rs`, which runs the
//! conformance suite (`hetsparse_core::conformance`) against the CPU backend, the OpenCL
//! backend and the scheduler over both (`cargo test -p hetsparse-conformance`; one backend's
//! suite: `cargo test -p hetsparse-conformance cpu::`, `opencl::`, `scheduler::`).
#![warn(missing_docs)]
