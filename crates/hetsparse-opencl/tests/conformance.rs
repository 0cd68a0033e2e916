//! The conformance suite on the OpenCL device chosen by `HETSPARSE_OPENCL_DEVICE` (a name
//! substring, e.g. `NVIDIA`), else the first GPU, else the first device (PoCL in CI).

hetsparse_core::conformance_suite! {
    backend: hetsparse_opencl::OpenClBackend::from_env(),
    scalars: [f32, f64, c32, c64, f16, bf16, bool, i32, i64, u32, u64],
}
