//! The conformance suite against the CPU backend, the OpenCL backend and the scheduler, in one
//! test program: each backend is compiled once for the eleven scalar types, for its own suite
//! and for the scheduler's (see the package's manifest).

mod cpu {
    //! The CPU backend passes the conformance suite for every scalar type, the integer types and
    //! `bool` included.

    hetsparse_core::conformance_suite! {
        backend: hetsparse_cpu::CpuBackend::with_threads(2),
        scalars: [f32, f64, c32, c64, f16, bf16, bool, i32, i64, u32, u64],
    }
}

mod opencl {
    //! The conformance suite on the OpenCL device chosen by `HETSPARSE_OPENCL_DEVICE` (a name
    //! substring, e.g. `NVIDIA`), else the first GPU, else the first device (PoCL in CI).

    hetsparse_core::conformance_suite! {
        backend: hetsparse_opencl::OpenClBackend::from_env(),
        scalars: [f32, f64, c32, c64, f16, bf16, bool, i32, i64, u32, u64],
    }
}

mod scheduler {
    //! The scheduler passes the conformance suite, over two sets of backends in one test program
    //! (the suite and the scheduler compiled once for both).

    mod over_cpu_and_reference {
        //! The scheduler passes the conformance suite over a CPU backend and the serial reference,
        //! with work stealing and every product cut into chunks and shared, each chunk written
        //! straight into its place in C (no host memory for the chunks beside C). The OpenCL set
        //! (`over_cpu_and_opencl`) has the chunks come back and laid into C.

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
            scalars: [f32, f64, c32, c64, f16, bf16, bool, i32, i64, u32, u64],
        }
    }

    mod over_cpu_and_opencl {
        //! The scheduler passes the conformance suite over the CPU and an OpenCL device (PoCL in CI),
        //! with Xia's densest-first assignment and the OpenCL device given a memory budget. (Products
        //! larger than a budget are tested in `scheduling.rs`: here the suite's tests share the device
        //! at once, and algorithms only OpenCL runs, such as ESC, must not run out of memory because of
        //! each other.)

        use hetsparse_core::{Backend, Error};
        use hetsparse_cpu::CpuBackend;
        use hetsparse_opencl::OpenClBackend;
        use hetsparse_sched::{Policy, Scheduler};

        /// Room for the suite's operands several times over.
        const BUDGET: u64 = 16 << 20;

        fn cpu_and_opencl<T>() -> Result<Scheduler<T>, Error>
        where
            T: hetsparse_core::Scalar,
            CpuBackend: Backend<T>,
            OpenClBackend: Backend<T>,
        {
            let backends: Vec<Box<dyn Backend<T>>> = vec![
                Box::new(CpuBackend::with_threads(1)?),
                Box::new(OpenClBackend::from_env()?.with_memory_budget(BUDGET)),
            ];
            Scheduler::new(backends)
                .policy(Policy::DensestFirst)
                .min_chunk_products(1)
                .with_speeds(&[1.0, 1.0])
        }

        hetsparse_core::conformance_suite! {
            backend: cpu_and_opencl(),
            scalars: [f32, f64, c32, c64, f16, bf16, bool, i32, i64, u32, u64],
        }
    }
}
