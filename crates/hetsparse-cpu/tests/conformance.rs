//! The CPU backend passes the conformance suite for every scalar type, the integer types and
//! `bool` included.

hetsparse_core::conformance_suite! {
    backend: hetsparse_cpu::CpuBackend::with_threads(2),
    scalars: [f32, f64, c32, c64, f16, bf16, bool, i32, i64, u32, u64],
}
