//! Where a triangle count on a graph kept on the GPU spends its time: `C⟨L⟩ = L plus.pair L`
//! on the CUDA backend with L resident and one mask kept across calls (what
//! `hetsparse.Matrix(L, device="cuda")` gives the Python package), for the generated road and
//! uniform graphs of 2^20 and 2^22 vertices (made undirected, L the strict lower triangle, as
//! `benches/peers/graph_algorithms.py` makes them).
//!
//! ```sh
//! cargo bench -p hetsparse-bench --features cuda --bench triangle_stages [-- road/4194304 ...]
//! ```
//!
//! Arguments keep the graphs whose `class/rows` contains one of them (all without any), so a
//! profiler can be pointed at one graph's calls.
//!
//! For each graph: the least of five calls, and of what the Python package does with each
//! result before handing it back (`write_back_new`'s check against the mask, the row offsets
//! narrowed to scipy's `int32`); the count with C kept on the GPU (`spgemm_resident`) and only
//! its values copied back (`download_values`), as `mxm(..., keep=True).reduce_scalar()` gives
//! it; then, for the larger graphs, one more call with the CUDA backend's tracing spans
//! printed as they close (the kernels, C's download and its check).
//! Without a GPU it prints that it skipped.

#[path = "common/spans.rs"]
mod spans;

use std::time::Instant;

use hetsparse_core::backend::CsrOperand;
use hetsparse_core::generate::{product_operands, MatrixClass};
use hetsparse_core::{Backend, Coo, Csr, Mask, RunControl, SemiringKind, SpgemmOptions};

/// The strictly lower triangle of `class`'s generated matrix made undirected, ones.
fn lower(class: MatrixClass, n: usize) -> Csr<i64> {
    let (a, _) = product_operands::<f64>(class, n, 2026);
    let mut edges: Vec<(u32, u32)> = Vec::new();
    for i in 0..a.nrows() {
        let i = i as u32;
        for &j in a.row(i as usize).0 {
            if i != j {
                edges.push((i.max(j), i.min(j)));
            }
        }
    }
    edges.sort_unstable();
    edges.dedup();
    let mut coo = Coo::new(a.nrows(), a.nrows()).expect("shape");
    for (i, j) in edges {
        coo.try_push(i as usize, j as usize, 1i64).expect("entry");
    }
    coo.to_csr().expect("L")
}

fn main() {
    let cuda = match hetsparse_cuda::CudaBackend::new() {
        Ok(b) => b,
        Err(e) => {
            println!("skipped: no CUDA device ({e})");
            return;
        }
    };
    // `cargo bench` passes `--bench` to a benchmark without a harness: flags are not filters.
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    println!("C<L> = L plus.pair L, L resident on the GPU, the mask kept; least of 5, ms");
    println!(
        "| graph | rows | nnz(L) | nnz(C) | triangles | call | check against the mask | int32 \
         offsets | C kept, its values back |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (name, class) in [
        ("road", MatrixClass::Road),
        ("uniform", MatrixClass::Uniform),
    ] {
        for n in [1usize << 20, 1 << 22] {
            let graph = format!("{name}/{n}");
            if !filters.is_empty() && !filters.iter().any(|f| graph.contains(f.as_str())) {
                continue;
            }
            let l = lower(class, n);
            let kept = Backend::<i64>::upload(&cuda, &l).expect("upload");
            let mask = Mask::structural(&l);
            let options = SpgemmOptions::new()
                .with_semiring(SemiringKind::PlusPair)
                .with_mask(mask.clone());
            let run = RunControl::unwatched();
            let call = || {
                let operand = CsrOperand::Resident(&kept);
                Backend::<i64>::spgemm_with(&cuda, operand, operand, &options, &run)
                    .expect("triangle count")
            };
            let first = call();
            let (mut product, mut check, mut narrow) = (f64::MAX, f64::MAX, f64::MAX);
            for _ in 0..5 {
                let t = Instant::now();
                let c = call();
                product = product.min(t.elapsed().as_secs_f64());
                let t = Instant::now();
                let c = hetsparse_core::write_back_new(c, Some(&mask), None).expect("check");
                check = check.min(t.elapsed().as_secs_f64());
                let t = Instant::now();
                let offsets: Vec<i32> = c.row_offsets().iter().map(|&o| o as i32).collect();
                narrow = narrow.min(t.elapsed().as_secs_f64());
                std::hint::black_box(offsets);
            }
            let triangles: i64 = first.values().iter().sum();
            let counted = || {
                let operand = CsrOperand::Resident(&kept);
                let c = Backend::<i64>::spgemm_resident(&cuda, operand, operand, &options, &run)
                    .expect("triangle count, C kept");
                let values = Backend::<i64>::download_values(&cuda, &c).expect("values");
                values.iter().fold(0i64, |s, &v| s.wrapping_add(v))
            };
            assert_eq!(counted(), triangles, "{name} {n}: the kept count");
            let mut kept_count = f64::MAX;
            for _ in 0..5 {
                let t = Instant::now();
                std::hint::black_box(counted());
                kept_count = kept_count.min(t.elapsed().as_secs_f64());
            }
            println!(
                "| {name} | {} | {} | {} | {triangles} | {:.2} | {:.2} | {:.2} | {:.2} |",
                l.nrows(),
                l.nnz(),
                first.nnz(),
                product * 1e3,
                check * 1e3,
                narrow * 1e3,
                kept_count * 1e3
            );
            if n == 1 << 22 {
                spans::printed(|| drop(call()));
            }
        }
    }
}
