//! Criterion benchmarks: SpGEMM (every algorithm a backend lists, and DIA×DIA and BSR×BSR where
//! the class suits them), SpMM with 32 dense columns and SpMV (in every format the backend lists
//! and the class suits), on one generated matrix of every class, for every backend compiled in.
//!
//! Groups are named `operation/class`, functions after the implementation (`cpu`,
//! `cpu:RowRow`, `cpu:Ellr`, ...); throughput is in elements = flops (two per intermediate product), so
//! criterion's `Gelem/s` reads as GFLOP/s.
//!
//! Environment: `HETSPARSE_BENCH_QUICK=1` for small sizes, `HETSPARSE_BENCH_THREADS=N` for the
//! CPU backend's threads, `HETSPARSE_BENCH_REFERENCE=1` to include the serial reference.
//! `cargo xtask bench` prints the same measurements as one table beside the peers.

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, SamplingMode, Throughput};
use hetsparse_bench::backends::{backends, Selection};
use hetsparse_bench::cases::{cases, Scale};
use hetsparse_bench::operation::measured_operations;
use hetsparse_bench::report::OPERATIONS;

fn flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| !v.is_empty() && v != "0")
}

fn products(c: &mut Criterion) {
    let selection = Selection {
        threads: std::env::var("HETSPARSE_BENCH_THREADS")
            .ok()
            .and_then(|v| v.parse().ok()),
        reference: flag("HETSPARSE_BENCH_REFERENCE"),
    };
    let (ready, unavailable) = backends(selection).expect("constructing the backends");
    for u in &unavailable {
        eprintln!("skipping backend {}: {}", u.name, u.reason);
    }
    let scale = Scale::from_env();
    for case in cases(scale) {
        let operands = case.generate().expect("generating the operands");
        for label in OPERATIONS {
            let mut group = c.benchmark_group(format!("{label}/{}", case.class));
            // Products of up to seconds: flat sampling, few samples.
            group
                .sampling_mode(SamplingMode::Flat)
                .sample_size(10)
                .warm_up_time(Duration::from_millis(500))
                .measurement_time(Duration::from_secs(3));
            for reg in &ready {
                let backend = reg.backend.as_ref();
                for op in measured_operations(backend, &operands) {
                    if op.label() != label {
                        continue;
                    }
                    if let Err(e) = op.run_checked(backend, &operands) {
                        eprintln!(
                            "skipping {} on {}: {e}",
                            op.implementation(&reg.name),
                            case.stem()
                        );
                        continue;
                    }
                    group.throughput(Throughput::Elements(op.flops(&operands)));
                    group.bench_function(op.implementation(&reg.name), |b| {
                        b.iter(|| {
                            op.run(backend, &operands)
                                .expect("a run that passed before")
                        })
                    });
                }
            }
            group.finish();
        }
    }
}

criterion_group!(benches, products);
criterion_main!(benches);
