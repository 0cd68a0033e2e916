//! Criterion benchmarks of what API v2 promises, for every backend compiled in:
//!
//! - `resident-spmv/CLASS`: SpMV with A and x already in the backend's memory and y left there
//!   (`resident`), against the same SpMV from host memory (`host`): the cost of a call in a
//!   solver loop against the cost of moving the data each time.
//! - `plan-reuse/CLASS`: a SpGEMM whose plan is executed with new values (`numeric`), against
//!   the full product on the same resident operands (`full`). The target is numeric at least
//!   1.5× faster than full.
//! - `chain/CLASS`: `A·A·A` with the intermediate resident and one download at the end.
//!
//! With the `opencl` feature, each class also prints a line `kernel-time resident-spmv/CLASS`:
//! the OpenCL resident SpMV's time per call in a loop of calls (host clock, up to the last
//! result's completion) beside its kernel's own device time from profiling events, so one run
//! shows how far a call is above its kernel.
//!
//! Classes: stencil, power law and road, at the sizes of `cargo xtask bench`
//! (`HETSPARSE_BENCH_QUICK=1` for small ones; `HETSPARSE_BENCH_THREADS=N` for the CPU).

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, SamplingMode, Throughput};
use hetsparse_bench::backends::{backends, Selection};
use hetsparse_bench::cases::{cases, Scale};
use hetsparse_core::generate::MatrixClass;
use hetsparse_core::{RunControl, SpgemmOptions, SpmvOptions};

fn v2(c: &mut Criterion) {
    let selection = Selection {
        threads: std::env::var("HETSPARSE_BENCH_THREADS")
            .ok()
            .and_then(|v| v.parse().ok()),
        reference: false,
    };
    let (ready, unavailable) = backends(selection).expect("constructing the backends");
    for u in &unavailable {
        eprintln!("skipping backend {}: {}", u.name, u.reason);
    }
    let classes = [
        MatrixClass::Stencil3d,
        MatrixClass::PowerLaw,
        MatrixClass::Road,
    ];
    for case in cases(Scale::from_env())
        .into_iter()
        .filter(|c| classes.contains(&c.class))
    {
        let operands = case.generate().expect("generating the operands");
        let (a, b, x) = (&operands.a, &operands.b, &operands.vector);
        let configure = |g: &mut criterion::BenchmarkGroup<'_, _>| {
            g.sampling_mode(SamplingMode::Flat)
                .sample_size(10)
                .warm_up_time(Duration::from_millis(500))
                .measurement_time(Duration::from_secs(3));
        };
        for reg in &ready {
            let be = reg.backend.as_ref();
            let run = RunControl::unwatched();
            let (ra, rb) = match (be.upload(a), be.upload(b)) {
                (Ok(ra), Ok(rb)) => (ra, rb),
                (Err(e), _) | (_, Err(e)) => {
                    eprintln!("skipping {} on {}: {e}", reg.name, case.stem());
                    continue;
                }
            };
            let rx = be.upload_vector(x).expect("upload x");

            let mut g = c.benchmark_group(format!("resident-spmv/{}", case.class));
            configure(&mut g);
            g.throughput(Throughput::Elements(2 * a.nnz()));
            let opts = SpmvOptions::new();
            g.bench_function(format!("{}:resident", reg.name), |bench| {
                bench.iter(|| {
                    be.spmv_resident((&ra).into(), (&rx).into(), &opts, &run)
                        .expect("SpMV")
                })
            });
            g.bench_function(format!("{}:host", reg.name), |bench| {
                bench.iter(|| be.spmv_with(a.into(), x.into(), &opts, &run).expect("SpMV"))
            });
            g.finish();
            #[cfg(feature = "opencl")]
            if reg.backend.info().backend == hetsparse_core::BackendKind::OpenCl {
                kernel_time::report(case.class, be, || {
                    be.spmv_resident((&ra).into(), (&rx).into(), &opts, &run)
                        .expect("SpMV")
                });
            }

            let mut g = c.benchmark_group(format!("plan-reuse/{}", case.class));
            configure(&mut g);
            g.throughput(Throughput::Elements(2 * operands.products));
            let opts = SpgemmOptions::new();
            let plan = be
                .plan_spgemm((&ra).into(), (&rb).into(), &opts)
                .expect("plan");
            g.bench_function(format!("{}:full", reg.name), |bench| {
                bench.iter(|| {
                    be.spgemm_resident((&ra).into(), (&rb).into(), &opts, &run)
                        .expect("SpGEMM")
                })
            });
            g.bench_function(format!("{}:numeric", reg.name), |bench| {
                bench.iter(|| {
                    be.execute_spgemm(&plan, (&ra).into(), (&rb).into(), &run)
                        .expect("plan")
                })
            });
            g.finish();

            if matches!(case.class, MatrixClass::Stencil3d | MatrixClass::Road) {
                let mut g = c.benchmark_group(format!("chain/{}", case.class));
                configure(&mut g);
                g.bench_function(reg.name.clone(), |bench| {
                    bench.iter(|| {
                        let c1 = be
                            .spgemm_resident((&ra).into(), (&ra).into(), &opts, &run)
                            .expect("A·A");
                        let c2 = be
                            .spgemm_resident((&c1).into(), (&ra).into(), &opts, &run)
                            .expect("(A·A)·A");
                        be.download(&c2).expect("download")
                    })
                });
                g.finish();
            }
        }
    }
}

/// The OpenCL kernels' own time, from the device times the backend reports on
/// [`hetsparse_opencl::KERNEL_TIMES`] while a subscriber listens.
#[cfg(feature = "opencl")]
mod kernel_time {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Instant;

    use hetsparse_core::backend::ResidentDense;
    use hetsparse_core::generate::MatrixClass;
    use hetsparse_core::Backend;

    /// Sums the `device_ns` of kernel-time events; enables nothing else.
    #[derive(Default)]
    struct KernelTimes {
        ns: AtomicU64,
        launches: AtomicU64,
    }

    struct DeviceNs(u64);

    impl tracing::field::Visit for DeviceNs {
        fn record_u64(&mut self, field: &tracing::field::Field, value: u64) {
            if field.name() == "device_ns" {
                self.0 = value;
            }
        }
        fn record_debug(&mut self, _: &tracing::field::Field, _: &dyn std::fmt::Debug) {}
    }

    impl tracing::Subscriber for &'static KernelTimes {
        fn enabled(&self, m: &tracing::Metadata<'_>) -> bool {
            m.target() == hetsparse_opencl::KERNEL_TIMES
        }
        fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
            tracing::span::Id::from_u64(1)
        }
        fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
        fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
        fn event(&self, event: &tracing::Event<'_>) {
            let mut v = DeviceNs(0);
            event.record(&mut v);
            self.ns.fetch_add(v.0, Ordering::Relaxed);
            self.launches.fetch_add(1, Ordering::Relaxed);
        }
        fn enter(&self, _: &tracing::span::Id) {}
        fn exit(&self, _: &tracing::span::Id) {}
    }

    const CALLS: u32 = 200;

    /// Prints the time per call of `call` in a loop (a resident SpMV may return once its
    /// kernel is queued: the loop ends with a download of its last result, which waits for
    /// all of them) beside the mean device time of the kernels each call launches.
    pub fn report(
        class: MatrixClass,
        be: &dyn Backend<f64>,
        mut call: impl FnMut() -> ResidentDense<f64>,
    ) {
        let finish = |y: &ResidentDense<f64>| {
            be.download_dense(y).expect("download");
        };
        for _ in 0..20 {
            call();
        }
        finish(&call());
        let start = Instant::now();
        let mut last = call();
        for _ in 1..CALLS {
            last = call();
        }
        finish(&last);
        let in_loop = start.elapsed().as_secs_f64() / f64::from(CALLS);
        let times: &'static KernelTimes = Box::leak(Box::default());
        let (per_launch, launches) = tracing::subscriber::with_default(times, || {
            for _ in 0..CALLS {
                finish(&call());
            }
            let launches = times.launches.load(Ordering::Relaxed).max(1) as f64;
            (
                times.ns.load(Ordering::Relaxed) as f64 / launches,
                (launches / f64::from(CALLS)).round().max(1.0),
            )
        });
        let kernel = per_launch * launches * 1e-9;
        eprintln!(
            "kernel-time resident-spmv/{class}: call {:.1} us in a loop, kernel {:.1} us \
             ({launches:.0} launches per call), call/kernel {:.2}",
            in_loop * 1e6,
            kernel * 1e6,
            in_loop / kernel.max(1e-12),
        );
    }
}

criterion_group!(benches, v2);
criterion_main!(benches);
