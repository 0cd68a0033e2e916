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

criterion_group!(benches, v2);
criterion_main!(benches);
