//! The backend conformance suite on the GPU, for every scalar type. Without a device (no
//! driver, the link stub) the tests skip, unless HETSPARSE_REQUIRE_DEVICE=1.

hetsparse_core::conformance_suite! {
    backend: hetsparse_cuda::CudaBackend::new(),
    scalars: [f32, f64, c32, c64, f16, bf16, bool, i32, i64, u32, u64],
}
