//! The serial reference backend passes the conformance suite it anchors.

hetsparse_core::conformance_suite! {
    backend: Ok::<_, hetsparse_core::Error>(hetsparse_core::ReferenceBackend),
    scalars: [f32, f64, c32, c64, f16, bf16],
}
