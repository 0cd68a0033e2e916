//! SpGEMM at GPU sizes (10^8–10^9 intermediate products, `gpu_cases`; then the output-heavy
//! products of `output_heavy_names`, and the real products of `HETSPARSE_BENCH_REAL`): the CUDA
//! backend on resident operands and from host memory, against the CPU backend, every result
//! checked against the CPU's. The operands are also written, in a raw binary form, for
//! `benches/peers/cusparse_spgemm.py`, which times cuSPARSE (through CuPy) on the same
//! matrices; the two tables together are the comparison.
//!
//! ```text
//! cargo bench -p hetsparse-bench --features cuda --bench gpu_spgemm
//! python3 benches/peers/cusparse_spgemm.py target/gpu-spgemm
//! ```
//!
//! or both at once, in one table: `cargo xtask bench --gpu --peers`.
//!
//! Beside each whole call from host memory, the "host write floor": the time the host's
//! threads take to write C's bytes into fresh memory ([`host_write_floor`]), the part of a
//! download into a new host CSR no GPU or link can shorten.
//!
//! Environment: `HETSPARSE_BENCH_DIR` (where the operands go; `target/gpu-spgemm`),
//! `HETSPARSE_BENCH_REAL` (a folder of real products, `products.tsv` and raw operands as
//! `benches/peers/real_products.py` writes them: SpGEMM only),
//! `HETSPARSE_BENCH_REPS` (timed calls per implementation, 5), `HETSPARSE_BENCH_CLASSES`
//! (comma-separated class names, or `stencil27` for the scalar 27-point stencil of 10^6 rows; all), `HETSPARSE_BENCH_SIZE_DIVISOR` (divides every size, for
//! a smoke run), `HETSPARSE_BENCH_NO_HOST=1` (skips the whole calls from host memory),
//! `HETSPARSE_BENCH_PEERS` (a Python with CuPy: runs `benches/peers/cusparse_spgemm.py` on the
//! operands after our classes and prints one table of both, with the ratios),
//! `HETSPARSE_BENCH_PROFILE=1` (one more resident call per class with the time of each stage,
//! from the backend's tracing spans, on standard error), `HETSPARSE_BENCH_OPS` (`spgemm`,
//! `spmv`, `spmm`, comma-separated; all), `HETSPARSE_BENCH_SPMV_KERNEL` (the CUDA SpMV kernel
//! of CSR matrices: `auto`, `scalar`, `vector`, `balanced`, `stream`, `apart` (long rows
//! apart) or `subwarpN` for N lanes per row; `auto`).
//! Without a GPU it prints that it skipped.
//!
//! SpMV and SpMM (32 columns, B row-major as a numpy array is) are timed on A of the same
//! classes, resident: A, x or B already on the GPU and the result left there; SpMM also in
//! whole calls from host memory, beside the host write floor of its C. A resident call
//! returns once its kernel is queued, so each timing is a loop of [`LOOP`] calls ended by the
//! download of the last result, divided by the calls; `benches/peers/cusparse_spmv_spmm.py`
//! times cuSPARSE the same way on the same A, and measures the device-to-device copy bandwidth
//! that SpMV's effective bandwidth is compared with.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use hetsparse_bench::cases::{gpu_operand_names, gpu_operands, output_heavy_names};
use hetsparse_bench::gpu_table::{combined_table, parse_cusparse_table, OursRow};
use hetsparse_bench::raw::{read_csr, write_csr};
use hetsparse_bench::real::read_manifest;
use hetsparse_core::backend::ResidentDense;
use hetsparse_core::{
    analysis, Backend, Csr, Dense, Device, Layout, RunControl, SpgemmAlgorithm, SpgemmOptions,
    SpmmOptions, SpmvOptions,
};
use hetsparse_cpu::CpuBackend;
use hetsparse_cuda::{CudaBackend, SpmvKernel};

#[path = "common/spans.rs"]
mod spans;

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Minimum and median of `reps` timed calls of `f`.
fn time(reps: usize, mut f: impl FnMut()) -> (Duration, Duration) {
    let mut t: Vec<Duration> = (0..reps.max(1))
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed()
        })
        .collect();
    t.sort();
    (t[0], t[t.len() / 2])
}

/// Same structure, values equal to rounding (the order of additions differs).
fn check(name: &str, got: &Csr<f64>, want: &Csr<f64>) {
    assert_eq!(got.shape(), want.shape(), "{name}: shape");
    assert_eq!(got.row_offsets(), want.row_offsets(), "{name}: row offsets");
    assert_eq!(got.col_indices(), want.col_indices(), "{name}: columns");
    for (i, (x, y)) in got.values().iter().zip(want.values()).enumerate() {
        let tol = 1e-9 * x.abs().max(y.abs()).max(1.0);
        assert!((x - y).abs() <= tol, "{name}: value {i}: {x} against {y}");
    }
}

fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1e3)
}

/// Resident calls per timed loop of SpMV and SpMM.
const LOOP: u32 = 50;

/// Columns of SpMM's dense operand.
const SPMM_COLUMNS: usize = 32;

/// The value of x (and of B, `i * SPMM_COLUMNS + j`) at `i`; the peer script uses the same.
fn dense_input(i: usize) -> f64 {
    1.0 + (i % 13) as f64 * 0.25
}

/// Time per call of `call` in loops of [`LOOP`] calls, each loop ended by `finish` on the
/// last result (which waits for every call of the loop): min and median of `reps` loops.
fn time_loop(
    reps: usize,
    mut call: impl FnMut() -> ResidentDense<f64>,
    finish: impl Fn(&ResidentDense<f64>),
) -> (Duration, Duration) {
    finish(&call());
    time(reps, || {
        let mut last = call();
        for _ in 1..LOOP {
            last = call();
        }
        finish(&last);
    })
    .map_both(|d| d / LOOP)
}

trait MapBoth {
    fn map_both(self, f: impl Fn(Duration) -> Duration) -> Self;
}

impl MapBoth for (Duration, Duration) {
    fn map_both(self, f: impl Fn(Duration) -> Duration) -> Self {
        (f(self.0), f(self.1))
    }
}

/// Largest difference between `got` and `want`, relative to the larger magnitude (at least 1).
fn max_relative_error(got: &[f64], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len(), "result length");
    got.iter()
        .zip(want)
        .map(|(x, y)| (x - y).abs() / x.abs().max(y.abs()).max(1.0))
        .fold(0.0, f64::max)
}

/// SpMV and SpMM on resident A, and SpMM in a whole call from host memory unless `no_host`,
/// checked against the CPU backend; one table row.
fn sparse_dense_row(
    name: &str,
    a: &Csr<f64>,
    cuda: &CudaBackend,
    cpu: &CpuBackend,
    reps: usize,
    ops: &[String],
    no_host: bool,
) {
    let run = RunControl::unwatched();
    let ra = cuda.upload(a).expect("upload A");
    let finish = |y: &ResidentDense<f64>| {
        cuda.download_dense(y).expect("download");
    };
    let bytes_a = a.nnz() as f64 * 12.0 + (a.nrows() as f64 + 1.0) * 8.0;
    let mut cells = Vec::new();
    if ops.iter().any(|o| o == "spmv") {
        let x: Vec<f64> = (0..a.ncols()).map(dense_input).collect();
        let want = cpu.spmv(a.into(), &x).expect("CPU SpMV");
        let rx = cuda.upload_vector(&x).expect("upload x");
        let opts = SpmvOptions::new();
        let call = || {
            cuda.spmv_resident((&ra).into(), (&rx).into(), &opts, &run)
                .expect("CUDA SpMV, resident")
        };
        let got = cuda.download_dense(&call()).expect("download y");
        let err = max_relative_error(got.data(), &want);
        // Rows of thousands of terms summed in another order than the CPU's.
        assert!(err <= 1e-10, "{name}: SpMV error {err}");
        let (min, med) = time_loop(reps, call, finish);
        let bytes = bytes_a + (a.ncols() + a.nrows()) as f64 * 8.0;
        cells.push(format!(
            "{} / {} | {:.0}",
            us(min),
            us(med),
            bytes / min.as_secs_f64() / 1e9
        ));
    } else {
        cells.push("– | –".into());
    }
    if ops.iter().any(|o| o == "spmm") {
        let b = Dense::try_new(
            a.ncols(),
            SPMM_COLUMNS,
            Layout::RowMajor,
            (0..a.ncols() * SPMM_COLUMNS).map(dense_input).collect(),
        )
        .expect("B");
        let want = cpu.spmm(a.into(), &b).expect("CPU SpMM");
        let rb = cuda.upload_dense(&b).expect("upload B");
        let opts = SpmmOptions::new();
        let call = || {
            cuda.spmm_resident((&ra).into(), (&rb).into(), &opts, &run)
                .expect("CUDA SpMM, resident")
        };
        let got = cuda.download_dense(&call()).expect("download C");
        let err = max_relative_error(
            got.to_layout(Layout::RowMajor).data(),
            want.to_layout(Layout::RowMajor).data(),
        );
        assert!(err <= 1e-12, "{name}: SpMM error {err}");
        let (min, med) = time_loop(reps, call, finish);
        cells.push(format!(
            "{} / {} | {:.1}",
            us(min),
            us(med),
            2.0 * a.nnz() as f64 * SPMM_COLUMNS as f64 / min.as_secs_f64() / 1e9
        ));
        if no_host {
            cells.push("– | –".into());
        } else {
            let whole = || cuda.spmm(a.into(), &b).expect("CUDA SpMM from host");
            let got = whole();
            let err = max_relative_error(
                got.to_layout(Layout::RowMajor).data(),
                want.to_layout(Layout::RowMajor).data(),
            );
            assert!(err <= 1e-12, "{name}: SpMM from host, error {err}");
            drop(got);
            let (min, med) = time(reps, || drop(whole()));
            let c_bytes = a.nrows() * SPMM_COLUMNS * size_of::<f64>();
            cells.push(format!(
                "{} / {} | {}",
                ms(min),
                ms(med),
                ms(host_write_floor(c_bytes, reps))
            ));
        }
    } else {
        cells.push("– | –".into());
        cells.push("– | –".into());
    }
    println!(
        "| {name} | {} | {} | {} |",
        a.nrows(),
        a.nnz(),
        cells.join(" | ")
    );
    std::io::stdout().flush().ok();
}

/// The cuSPARSE peer script (`benches/peers/cusparse_spgemm.py`, found from the working
/// directory, which is the repository's root or, under `cargo bench`, the bench crate's) run
/// by `python` on the operands in `dir`, and the one table of ours and its times.
fn cusparse_table(python: &str, dir: &Path, reps: usize, ours: &[OursRow]) {
    let script = [
        "benches/peers/cusparse_spgemm.py",
        "peers/cusparse_spgemm.py",
    ]
    .iter()
    .map(PathBuf::from)
    .find(|p| p.is_file());
    let Some(script) = script else {
        eprintln!(
            "gpu_spgemm: benches/peers/cusparse_spgemm.py not found from here: no peer table"
        );
        return;
    };
    let output = std::process::Command::new(python)
        .arg(&script)
        .arg(dir)
        .arg(reps.min(3).to_string())
        .stderr(std::process::Stdio::inherit())
        .output();
    let text = match output {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).into_owned(),
        Ok(o) => {
            eprintln!("gpu_spgemm: the cuSPARSE peer script failed ({})", o.status);
            String::from_utf8_lossy(&o.stdout).into_owned()
        }
        Err(e) => {
            eprintln!("gpu_spgemm: cannot run {python}: {e}");
            return;
        }
    };
    println!();
    print!("{text}");
    println!();
    println!("One table: ours (above) and cuSPARSE (through CuPy, just above) on the same operands, min, ms");
    println!();
    print!("{}", combined_table(ours, &parse_cusparse_table(&text)));
    std::io::stdout().flush().ok();
}

fn us(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1e6)
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let spmv_kernel = match std::env::var("HETSPARSE_BENCH_SPMV_KERNEL").as_deref() {
        Err(_) | Ok("auto") => SpmvKernel::Auto,
        Ok("scalar") => SpmvKernel::CsrScalar,
        Ok("vector") => SpmvKernel::CsrVector,
        Ok("balanced") => SpmvKernel::CsrBalanced,
        Ok("stream") => SpmvKernel::CsrStream,
        Ok("apart") => SpmvKernel::CsrLongRowsApart,
        Ok(other) => match other.strip_prefix("subwarp").map(str::parse::<u32>) {
            Some(Ok(lanes)) => SpmvKernel::CsrSubwarp { lanes },
            _ => panic!("HETSPARSE_BENCH_SPMV_KERNEL={other}: not a CSR SpMV kernel"),
        },
    };
    let cuda = match CudaBackend::new().and_then(|b| b.with_csr_spmv_kernel(spmv_kernel)) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("gpu_spgemm: SKIPPED, {e}");
            return;
        }
    };
    let cpu = CpuBackend::new().expect("CPU backend");
    let reps: usize = env_or("HETSPARSE_BENCH_REPS", 5);
    let divisor: usize = env_or("HETSPARSE_BENCH_SIZE_DIVISOR", 1);
    let no_host = std::env::var("HETSPARSE_BENCH_NO_HOST").is_ok_and(|v| v == "1");
    let profile = std::env::var("HETSPARSE_BENCH_PROFILE").is_ok_and(|v| v == "1");
    let dir = PathBuf::from(
        std::env::var("HETSPARSE_BENCH_DIR").unwrap_or_else(|_| "target/gpu-spgemm".into()),
    );
    std::fs::create_dir_all(&dir).expect("creating the operand folder");
    let only: Vec<String> = std::env::var("HETSPARSE_BENCH_CLASSES")
        .map(|v| v.split(',').map(str::to_string).collect())
        .unwrap_or_default();
    let ops: Vec<String> = std::env::var("HETSPARSE_BENCH_OPS")
        .unwrap_or_else(|_| "spgemm,spmv,spmm".into())
        .split(',')
        .map(|o| o.trim().to_ascii_lowercase())
        .collect();
    let mut sparse_dense_rows = Vec::new();
    // This run's classes only: the peer script times every class the manifest lists.
    let mut manifest = std::fs::File::create(dir.join("manifest.tsv")).expect("manifest");
    let peers_python = std::env::var("HETSPARSE_BENCH_PEERS")
        .ok()
        .filter(|p| !p.is_empty());
    let mut spgemm_rows = Vec::new();
    let info = cuda.info();
    println!(
        "SpGEMM A·B at GPU sizes, f64, {} ({}), CPU backend with {} threads; min / median of {reps} calls, ms",
        info.name,
        info.backend,
        rayon_threads()
    );
    println!();
    println!("| class | rows | nnz(A) | products | nnz(C) | cpu | cuda resident | cuda from host | host write floor | cuda resident GFLOP/s |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let options = SpgemmOptions::new();
    let run = RunControl::unwatched();
    // The generated classes, then the output-heavy products (SpGEMM only), then the real
    // products of HETSPARSE_BENCH_REAL (SpGEMM only).
    let mut names: Vec<(String, Source)> = gpu_operand_names()
        .into_iter()
        .map(|n| (n.to_string(), Source::Class))
        .collect();
    names.extend(
        output_heavy_names()
            .into_iter()
            .map(|n| (n.to_string(), Source::OutputHeavy)),
    );
    if let Ok(real) = std::env::var("HETSPARSE_BENCH_REAL") {
        let real = PathBuf::from(real);
        match read_manifest(&real) {
            Ok(list) => names.extend(
                list.into_iter()
                    .map(|p| (p.name, Source::Real(real.clone(), p.a, p.b))),
            ),
            Err(e) => eprintln!("gpu_spgemm: no real products: {e}"),
        }
    }
    for (name, source) in &names {
        let name = name.as_str();
        if !only.is_empty() && !only.iter().any(|o| o.eq_ignore_ascii_case(name)) {
            continue;
        }
        let (a, b) = match source {
            Source::Real(dir, a, b) => (
                read_csr(dir, a).expect("reading A"),
                read_csr(dir, b).expect("reading B"),
            ),
            _ => gpu_operands(name, divisor).expect("a GPU class"),
        };
        if matches!(source, Source::Class) && ops.iter().any(|o| o == "spmv" || o == "spmm") {
            sparse_dense_rows.push((name, a.clone()));
        }
        if !ops.iter().any(|o| o == "spgemm") {
            continue;
        }
        let square = a == b;
        // A square product is `A · A` (one matrix, uploaded once), as a user writes it.
        let b_host = if square { &a } else { &b };
        let products = analysis::total_products(&a, &b).expect("products");
        write_csr(&dir, &format!("{name}.a"), &a).expect("writing A");
        if !square {
            write_csr(&dir, &format!("{name}.b"), &b).expect("writing B");
        }
        let expected = cpu
            .spgemm(&a, &b, SpgemmAlgorithm::Auto)
            .expect("CPU SpGEMM");
        writeln!(
            manifest,
            "{name}\t{}\t{}\t{}\t{}\t{}\t{}",
            a.nrows(),
            a.ncols(),
            b.ncols(),
            u8::from(square),
            products,
            expected.nnz()
        )
        .expect("manifest");
        let (cpu_min, cpu_med) = time(reps, || {
            cpu.spgemm(&a, &b, SpgemmAlgorithm::Auto)
                .expect("CPU SpGEMM");
        });

        let ra = cuda.upload(&a).expect("upload A");
        let rb = if square {
            None
        } else {
            Some(cuda.upload(&b).expect("upload B"))
        };
        let rb_ref = rb.as_ref().unwrap_or(&ra);
        let c = cuda
            .spgemm_resident((&ra).into(), rb_ref.into(), &options, &run)
            .expect("CUDA SpGEMM, resident");
        check(
            &format!("{name} resident"),
            &cuda.download(&c).expect("download C"),
            &expected,
        );
        drop(c);
        let (res_min, res_med) = time(reps, || {
            cuda.spgemm_resident((&ra).into(), rb_ref.into(), &options, &run)
                .expect("CUDA SpGEMM, resident");
        });
        if profile {
            // One more call with the backend's spans printed as they close (busy and idle
            // time of each stage), on standard error.
            eprintln!("profile of {name}, resident, then from host:");
            spans::printed(|| {
                cuda.spgemm_resident((&ra).into(), rb_ref.into(), &options, &run)
                    .expect("CUDA SpGEMM, resident");
                if !no_host {
                    cuda.spgemm(&a, b_host, SpgemmAlgorithm::Auto)
                        .expect("CUDA SpGEMM from host");
                }
            });
        }
        let mut host_min = None;
        let host = if no_host {
            "–".to_string()
        } else {
            let got = cuda
                .spgemm(&a, b_host, SpgemmAlgorithm::Auto)
                .expect("CUDA SpGEMM from host");
            check(&format!("{name} from host"), &got, &expected);
            drop(got);
            let (min, med) = time(reps, || {
                cuda.spgemm(&a, b_host, SpgemmAlgorithm::Auto)
                    .expect("CUDA SpGEMM from host");
            });
            host_min = Some(min.as_secs_f64() * 1e3);
            format!("{} / {}", ms(min), ms(med))
        };
        let floor = if no_host {
            "–".to_string()
        } else {
            let c_bytes = expected.nnz() as usize * (size_of::<u32>() + size_of::<f64>())
                + (a.nrows() + 1) * size_of::<u64>();
            ms(host_write_floor(c_bytes, reps))
        };
        spgemm_rows.push(OursRow {
            class: name.to_string(),
            products,
            nnz: expected.nnz(),
            cpu_ms: cpu_min.as_secs_f64() * 1e3,
            resident_ms: res_min.as_secs_f64() * 1e3,
            from_host_ms: host_min,
        });
        println!(
            "| {name} | {} | {} | {products} | {} | {} / {} | {} / {} | {host} | {floor} | {:.1} |",
            a.nrows(),
            a.nnz(),
            expected.nnz(),
            ms(cpu_min),
            ms(cpu_med),
            ms(res_min),
            ms(res_med),
            2.0 * products as f64 / res_min.as_secs_f64() / 1e9
        );
        std::io::stdout().flush().ok();
    }
    if let Some(python) = peers_python {
        if !spgemm_rows.is_empty() {
            drop(manifest);
            cusparse_table(&python, &dir, reps, &spgemm_rows);
        }
    }
    if sparse_dense_rows.is_empty() {
        return;
    }
    println!();
    println!(
        "SpMV and SpMM ({SPMM_COLUMNS} columns, B row-major) on resident A, f64; time per call \
         in loops of {LOOP} calls, min / median of {reps} loops, us; SpMV GB/s counts A, x and y \
         once; SpMM GFLOP/s counts 2 flops per entry and column; SpMM from host is a whole \
         call (A and B uploaded, C downloaded into a new host matrix), min / median of {reps} \
         calls"
    );
    println!();
    println!(
        "| class | rows | nnz(A) | spmv resident | spmv GB/s | spmm resident | spmm GFLOP/s | spmm from host (ms) | host write floor of C (ms) |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    let mut sparse_dense_manifest =
        std::fs::File::create(dir.join("sparse_dense.tsv")).expect("SpMV/SpMM manifest");
    for (name, a) in sparse_dense_rows {
        // Files for the peer script, unless the SpGEMM part wrote them already.
        if !ops.iter().any(|o| o == "spgemm") {
            write_csr(&dir, &format!("{name}.a"), &a).expect("writing A");
        }
        writeln!(
            sparse_dense_manifest,
            "{name}\t{}\t{}",
            a.nrows(),
            a.ncols()
        )
        .expect("SpMV/SpMM manifest");
        sparse_dense_row(name, &a, &cuda, &cpu, reps, &ops, no_host);
    }
}

/// Where a product's operands come from.
enum Source {
    /// A generated class of `gpu_operand_names`.
    Class,
    /// A generated output-heavy product of `output_heavy_names`.
    OutputHeavy,
    /// A real product: the folder and the stems of A and B.
    Real(PathBuf, String, String),
}

/// The least a result of `bytes` downloaded into a new host CSR costs the host, min of `reps`:
/// the bytes written into fresh memory (huge pages asked for, as the backend does) by every
/// thread from a warm buffer of the staging buffers' size, as the download's host side does.
/// Fresh pages are zeroed by the operating system as they are first touched, so this is
/// bounded by the host's memory bandwidth, not by the link.
fn host_write_floor(bytes: usize, reps: usize) -> Duration {
    use rayon::prelude::*;
    const SOURCE: usize = 64 << 20;
    const GRAIN: usize = 256 << 10;
    let source = vec![0x5au8; SOURCE];
    time(reps, || {
        let mut out: Vec<u8> = Vec::with_capacity(bytes);
        hetsparse_core::advise_huge_pages(out.spare_capacity_mut());
        out.spare_capacity_mut()
            .par_chunks_mut(GRAIN)
            .enumerate()
            .for_each(|(i, to)| {
                let at = i * GRAIN % SOURCE;
                hetsparse_core::host::copy_streaming(to, &source[at..at + to.len()]);
            });
        // SAFETY: every byte of the capacity was written above.
        unsafe { out.set_len(bytes) };
        std::hint::black_box(&out);
    })
    .0
}

fn rayon_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}
