//! ESC SpGEMM on the power-law (R-MAT), uniform and road classes: interpolation against binary
//! search for the expansion's start, and the time of a whole product (transfers included).
//!
//! Sizes are the generators' `size` argument (see `hetsparse_core::generate::product_operands`):
//! `HETSPARSE_BENCH_SIZE` sets it for every class (default 16384, for PoCL on a small CPU).
//! `HETSPARSE_BENCH_CLASSES` (comma-separated names) limits the classes;
//! `HETSPARSE_OPENCL_DEVICE` picks the device by name. With `HETSPARSE_BENCH_MTX_DIR` set, each
//! class's operand is also written there as `CLASS.mtx`, so that peers (cuSPARSE through CuPy,
//! see `cusparse_peer.py`) multiply the very same matrices. With `HETSPARSE_BENCH_PROFILE=1`,
//! one product per class is first run under a small tracing subscriber that prints where the
//! time goes: host time per stage span and device time per kernel.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use hetsparse_core::format::Csr;
use hetsparse_core::generate::{product_operands, MatrixClass};
use hetsparse_core::{analysis, Backend, SpgemmAlgorithm};
use hetsparse_opencl::{ExpansionSearch, OpenClBackend};

fn size() -> usize {
    std::env::var("HETSPARSE_BENCH_SIZE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(16384)
}

/// Host time per span name and device time per kernel, summed.
#[derive(Default)]
struct Profile {
    names: Mutex<Vec<&'static str>>,
    entered: Mutex<BTreeMap<u64, Instant>>,
    host: Mutex<BTreeMap<&'static str, Duration>>,
    device: Mutex<BTreeMap<String, (u64, u32)>>,
}

struct KernelVisitor(String, u64);

impl tracing::field::Visit for KernelVisitor {
    fn record_u64(&mut self, field: &tracing::field::Field, value: u64) {
        if field.name() == "device_ns" {
            self.1 = value;
        }
    }
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        if field.name() == "kernel" {
            self.0 = value.to_string();
        }
    }
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "kernel" {
            self.0 = format!("{value:?}");
        }
    }
}

impl tracing::Subscriber for &'static Profile {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, span: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        let mut names = self.names.lock().unwrap();
        names.push(span.metadata().name());
        tracing::span::Id::from_u64(names.len() as u64)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        if event.metadata().target() == hetsparse_opencl::KERNEL_TIMES {
            let mut v = KernelVisitor(String::new(), 0);
            event.record(&mut v);
            let mut device = self.device.lock().unwrap();
            let e = device.entry(v.0).or_default();
            e.0 += v.1;
            e.1 += 1;
        }
    }
    fn enter(&self, span: &tracing::span::Id) {
        self.entered
            .lock()
            .unwrap()
            .insert(span.into_u64(), Instant::now());
    }
    fn exit(&self, span: &tracing::span::Id) {
        if let Some(t) = self.entered.lock().unwrap().remove(&span.into_u64()) {
            let name = self.names.lock().unwrap()[span.into_u64() as usize - 1];
            *self.host.lock().unwrap().entry(name).or_default() += t.elapsed();
        }
    }
}

/// Runs one product under the profiling subscriber and prints the breakdown.
fn profile(backend: &OpenClBackend, class: MatrixClass, a: &Csr<f64>, b: &Csr<f64>) {
    let p: &'static Profile = Box::leak(Box::default());
    let start = Instant::now();
    tracing::subscriber::with_default(p, || {
        backend.spgemm(a, b, SpgemmAlgorithm::Esc).expect("spgemm");
    });
    let total = start.elapsed();
    eprintln!(
        "profile {}: total {:.3} ms",
        class.name(),
        total.as_secs_f64() * 1e3
    );
    for (name, d) in p.host.lock().unwrap().iter() {
        eprintln!("  host span {name:<16} {:>10.3} ms", d.as_secs_f64() * 1e3);
    }
    for (name, (ns, n)) in p.device.lock().unwrap().iter() {
        eprintln!(
            "  kernel {name:<20} {:>10.3} ms ({n} launches)",
            *ns as f64 / 1e6
        );
    }
}

fn esc(c: &mut Criterion) {
    let backend = match OpenClBackend::from_env() {
        Ok(b) => b,
        Err(e) => {
            eprintln!("esc bench skipped: {e}");
            return;
        }
    };
    eprintln!("device: {}", backend.device());
    let mut group = c.benchmark_group("esc_spgemm_f64");
    group.sample_size(10);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(3));
    for class in [
        MatrixClass::PowerLaw,
        MatrixClass::Uniform,
        MatrixClass::Road,
    ] {
        let wanted = std::env::var("HETSPARSE_BENCH_CLASSES").unwrap_or_default();
        if !wanted.is_empty() && !wanted.split(',').any(|w| w == class.name()) {
            continue;
        }
        // Every class here is a square: C = A·A with one matrix passed as both operands (so it
        // is copied to the device once), as the cuSPARSE peer computes `A @ A`.
        let (a, _) = product_operands::<f64>(class, size(), 42);
        let b = &a;
        if let Ok(dir) = std::env::var("HETSPARSE_BENCH_MTX_DIR") {
            let path = std::path::Path::new(&dir).join(format!("{}.mtx", class.name()));
            let file = std::fs::File::create(&path).expect("create the .mtx file");
            hetsparse_core::matrix_market::write_sparse(file, &a).expect("write the .mtx file");
        }
        let products = analysis::total_products(&a, b).expect("analysis");
        eprintln!(
            "{}: {}x{}, nnz {}, products {products}",
            class.name(),
            a.nrows(),
            a.ncols(),
            a.nnz()
        );
        if std::env::var("HETSPARSE_BENCH_PROFILE").as_deref() == Ok("1") {
            backend
                .spgemm(&a, b, SpgemmAlgorithm::Esc)
                .expect("warm-up");
            profile(&backend, class, &a, b);
        }
        group.throughput(Throughput::Elements(products));
        for search in [ExpansionSearch::Interpolation, ExpansionSearch::Binary] {
            let bk = backend.clone().with_expansion_search(search);
            group.bench_with_input(
                BenchmarkId::new(class.name(), format!("{search:?}")),
                &(&a, b),
                |bench, (a, b)| {
                    bench.iter(|| bk.spgemm(a, b, SpgemmAlgorithm::Esc).expect("spgemm"))
                },
            );
        }
    }
    group.finish();
}

criterion_group!(benches, esc);
criterion_main!(benches);
