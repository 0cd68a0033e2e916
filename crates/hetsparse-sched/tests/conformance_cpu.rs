//! The scheduler passes the conformance suite over a CPU backend and the serial reference,
//! with work stealing and every product cut into chunks and shared, each chunk written
//! straight into its place in C (no host memory for the chunks beside C). The OpenCL suite
//! (`conformance_opencl.rs`) has the chunks come back and laid into C.

use hetsparse_core::{Backend, Error, ReferenceBackend};
use hetsparse_cpu::CpuBackend;
use hetsparse_sched::{Policy, Scheduler};

fn cpu_and_reference<T>() -> Result<Scheduler<T>, Error>
where
    T: hetsparse_core::Scalar,
    CpuBackend: Backend<T>,
    ReferenceBackend: Backend<T>,
{
    let backends: Vec<Box<dyn Backend<T>>> = vec![
        Box::new(CpuBackend::with_threads(1)?),
        Box::new(ReferenceBackend),
    ];
    Ok(Scheduler::new(backends)
        .policy(Policy::WorkStealing)
        .min_chunk_products(1)
        .host_memory(0)
        .share_always())
}

hetsparse_core::conformance_suite! {
    backend: cpu_and_reference(),
    scalars: [f32, f64, c32, c64, f16, bf16],
}
