//! The predicted strong scaling of squaring a Graph500 R-MAT matrix (default scale 24, edge
//! factor 16) on `N` nodes, from statistics measured at smaller scales and extrapolated:
//!
//! ```sh
//! cargo build -p hetsparse-mpi --example graph500
//! RAYON_NUM_THREADS=1 target/debug/examples/graph500 [--from 16] [--to 20] [--target 24]
//! ```
//!
//! One process, no MPI. For every scale from `--products-from` to `--products-to` (12 to 16)
//! it computes `A·A` and each 3D layer's partial product `A(:, K_l)·A(K_l, :)` for 4 and 16
//! layers and fits `log2` of their compression (multiplications per entry) linearly in the
//! scale, for the 3D reduce-scatter's volume (the model's estimate for random entries is far
//! too high for R-MAT: its products collide). For every scale from `--from` to `--to` it
//! generates
//! `generate::rmat(scale, 16, 1)` and computes `ProductStats::of(A, A)`; it fits `log2` of the
//! share of edges merged as duplicates and `log2 flops` linearly in the scale (least squares; R-MAT's sizes grow geometrically with
//! the scale) and extrapolates both to `--target`. At the largest measured scale it computes
//! each layout's imbalance with `critical_path_flops`. It then predicts, with `model_time`,
//! 1D, 2D (`√N × √N`) and 3D (`c = 4, 16` layers of square grids) on N = 16, 64, 256 and 1024
//! nodes, one rank a node, for a node that multiplies at the CPU backend's rate on the H200
//! host's 16 cores (docs/benchmarks.md: the power-law product of 326 465 716 products in
//! 371.96 ms, 0.878 G products/s) over a network of 25 GB/s and 2 µs.

use std::error::Error;

use hetsparse::generate;
use hetsparse::{Context, Csr, DeviceChoice};
use hetsparse_mpi::{
    critical_path_flops, model_time_with, Algorithm, Grid, Grid3, Machine, Network, ProductStats,
};

type Res<T> = Result<T, Box<dyn Error>>;

fn arg(args: &[String], flag: &str, default: u32) -> Res<u32> {
    match args.iter().position(|a| a == flag) {
        Some(i) => Ok(args.get(i + 1).ok_or("a value after the flag")?.parse()?),
        None => Ok(default),
    }
}

/// Least squares `y = a + b x`: `(a, b)`.
fn fit(xs: &[f64], ys: &[f64]) -> (f64, f64) {
    let n = xs.len() as f64;
    let (mx, my) = (xs.iter().sum::<f64>() / n, ys.iter().sum::<f64>() / n);
    let sxy: f64 = xs.iter().zip(ys).map(|(x, y)| (x - mx) * (y - my)).sum();
    let sxx: f64 = xs.iter().map(|x| (x - mx) * (x - mx)).sum();
    let b = if sxx > 0.0 { sxy / sxx } else { 0.0 };
    (my - b * mx, b)
}

/// The square root of `n` when `n` is a perfect square.
fn square_side(n: usize) -> Option<usize> {
    let r = (n as f64).sqrt().round() as usize;
    (r * r == n).then_some(r)
}

/// The layouts predicted on `nodes`: 1D, the square 2D grid, 3D with 4 and 16 square layers.
fn layouts(nodes: usize) -> Vec<(String, Algorithm)> {
    let mut out = vec![("1D".to_string(), Algorithm::RowFetch { ranks: nodes })];
    if let Some(q) = square_side(nodes) {
        out.push((format!("2D {q}×{q}"), Algorithm::Summa2d(Grid::new(q, q))));
    }
    for c in [4usize, 16] {
        if nodes % c == 0 {
            if let Some(q) = square_side(nodes / c) {
                out.push((
                    format!("3D {q}×{q}×{c}"),
                    Algorithm::Summa3d(Grid3::new(q, q, c)),
                ));
            }
        }
    }
    out
}

const NODES: [usize; 4] = [16, 64, 256, 1024];

/// Layers of 3D SUMMA predicted.
const LAYERS: [usize; 2] = [4, 16];

/// `nnz(A·A)` and, for each of [`LAYERS`], the mean `nnz(A(:, K_l)·A(K_l, :))` over its layers.
fn product_sizes(ctx: &Context<f64>, a: &Csr<f64>) -> Res<(f64, Vec<f64>)> {
    let whole = ctx.spgemm(a, a)?.nnz() as f64;
    let mut partial = Vec::new();
    for c in LAYERS {
        let slices = hetsparse_mpi::RowPartition::even(a.ncols() as u64, c);
        let mut sum = 0u64;
        for l in 0..c {
            let k = slices.rows(l);
            let (lo, hi) = (k.start as usize, k.end as usize);
            sum += ctx
                .spgemm(&a.column_panel(lo..hi)?, &a.rows(lo..hi)?)?
                .nnz();
        }
        partial.push(sum as f64 / c as f64);
    }
    Ok((whole, partial))
}

fn main() -> Res<()> {
    let args: Vec<String> = std::env::args().collect();
    let (from, to, target) = (
        arg(&args, "--from", 16)?,
        arg(&args, "--to", 20)?,
        arg(&args, "--target", 24)?,
    );
    let (pfrom, pto) = (
        arg(&args, "--products-from", 12)?,
        arg(&args, "--products-to", 16)?,
    );
    if from > to || to > 26 || target > 31 || pfrom > pto {
        return Err(
            "need --from <= --to <= 26, --products-from <= --products-to, --target <= 31".into(),
        );
    }
    let ctx = Context::<f64>::on(&DeviceChoice::Cpu)?;
    // The products themselves (their sizes) at small scales only.
    println!("| scale | flops | nnz(C) | flops / nnz(C) | nnz(C_l), c = 4 | nnz(C_l), c = 16 |");
    println!("|---:|---:|---:|---:|---:|---:|");
    let (mut pxs, mut pc, mut pl): (Vec<f64>, Vec<f64>, Vec<Vec<f64>>) =
        (Vec::new(), Vec::new(), vec![Vec::new(); LAYERS.len()]);
    for scale in pfrom..=pto {
        let a = generate::rmat::<f64>(scale, 16, 1);
        let s = ProductStats::of(&a, &a);
        let (whole, partial) = product_sizes(&ctx, &a)?;
        println!(
            "| {scale} | {} | {whole} | {:.2} | {:.0} | {:.0} |",
            s.flops,
            s.flops as f64 / whole,
            partial[0],
            partial[1]
        );
        // Fitted: the compression, multiplications per entry (of the layer's share of them).
        pxs.push(f64::from(scale));
        pc.push((s.flops as f64 / whole).log2());
        for (i, p) in partial.iter().enumerate() {
            pl[i].push((s.flops as f64 / LAYERS[i] as f64 / p).log2());
        }
    }
    println!();
    println!("| scale | n | nnz(A) | edges kept | flops | flops / nnz(A) |");
    println!("|---:|---:|---:|---:|---:|---:|");
    let (mut xs, mut nnz, mut flops) = (Vec::new(), Vec::new(), Vec::new());
    let mut imbalance = Vec::new();
    for scale in from..=to {
        let a = generate::rmat::<f64>(scale, 16, 1);
        let s = ProductStats::of(&a, &a);
        println!(
            "| {scale} | {} | {} | {:.4} | {} | {:.1} |",
            s.nrows,
            s.nnz_a,
            s.nnz_a as f64 / (16.0 * s.nrows as f64),
            s.flops,
            s.flops as f64 / s.nnz_a as f64
        );
        xs.push(f64::from(scale));
        // Fitted: the share of edges lost as duplicates (a power law of n would pass the edge
        // count itself within a few scales).
        nnz.push((1.0 - s.nnz_a as f64 / (16.0 * s.nrows as f64)).log2());
        flops.push((s.flops as f64).log2());
        if scale == to {
            for nodes in NODES {
                for (name, alg) in layouts(nodes) {
                    let critical = critical_path_flops(&a, &a, alg)?;
                    let f = critical as f64 * nodes as f64 / s.flops as f64;
                    imbalance.push((nodes, name, f.max(1.0)));
                }
            }
        }
    }
    let (na, nb) = fit(&xs, &nnz);
    let (fa, fb) = fit(&xs, &flops);
    println!(
        "\nfit: log2 (1 − nnz(A) / edges) = {na:.4} + {nb:.4}·scale; log2 flops = {fa:.4} + {fb:.4}·scale"
    );
    println!("| scale | duplicates measured / fit | flops measured / fit |");
    println!("|---:|---:|---:|");
    for (i, x) in xs.iter().enumerate() {
        println!(
            "| {x} | {:.4} | {:.4} |",
            (nnz[i] - (na + nb * x)).exp2(),
            (flops[i] - (fa + fb * x)).exp2()
        );
    }
    let t = f64::from(target);
    let (ca, cb) = fit(&pxs, &pc);
    println!("fit: log2 (flops / nnz(C)) = {ca:.4} + {cb:.4}·scale");
    let flops_at_target = (fa + fb * t).exp2();
    // Each product's entries at the target: its multiplications over the extrapolated
    // compression (at least 1: an entry takes one multiplication or more).
    let entries =
        |(a, b): (f64, f64), share: f64| flops_at_target / share / (a + b * t).exp2().max(1.0);
    let mut partial_at_target = Vec::new();
    for (i, c) in LAYERS.iter().enumerate() {
        let (la, lb) = fit(&pxs, &pl[i]);
        println!("fit: log2 (flops / c / nnz(C_l)), c = {c}: {la:.4} + {lb:.4}·scale");
        partial_at_target.push((*c, entries((la, lb), *c as f64)));
    }
    println!("| scale | flops / nnz(C): measured / fit | c = 4 | c = 16 |");
    println!("|---:|---:|---:|---:|");
    for (i, x) in pxs.iter().enumerate() {
        let r = |v: &[f64]| {
            let (a, b) = fit(&pxs, v);
            (v[i] - (a + b * x)).exp2()
        };
        println!(
            "| {x} | {:.4} | {:.4} | {:.4} |",
            r(&pc),
            r(&pl[0]),
            r(&pl[1])
        );
    }
    println!(
        "scale {target} (extrapolated): nnz(C) {:.4e}; nnz(C_l) {}",
        entries((ca, cb), 1.0),
        partial_at_target
            .iter()
            .map(|(c, n)| format!("c = {c}: {n:.4e}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let kept = 16.0 * f64::from(1u32 << target) * (1.0 - (na + nb * t).exp2()).max(0.0);
    let stats = ProductStats {
        nrows: 1 << target,
        inner: 1 << target,
        ncols: 1 << target,
        nnz_a: kept.round() as u64,
        nnz_b: kept.round() as u64,
        flops: (fa + fb * t).exp2().round() as u64,
        scalar_bytes: 8,
    };
    println!(
        "\nscale {target} (extrapolated): n {}, nnz(A) {:.4e}, flops {:.4e}",
        stats.nrows, stats.nnz_a as f64, stats.flops as f64
    );
    let machine = Machine {
        network: Network {
            bandwidth: 25e9,
            latency: 2e-6,
        },
        rate: 326_465_716.0 / 0.37196,
        // Not measured at this scale: the prediction counts the products and the network.
        entry_rate: None,
    };
    println!(
        "node: {:.3} G products/s; network 25 GB/s, 2 µs; one rank a node\n",
        machine.rate / 1e9
    );
    println!(
        "| nodes | cores | layout | imbalance (scale {to}) | compute s | communication s | MB / rank | messages / rank | predicted s | balanced s |"
    );
    println!("|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|");
    for (nodes, name, f) in &imbalance {
        let alg = layouts(*nodes)
            .into_iter()
            .find(|(n, _)| n == name)
            .map(|(_, a)| a)
            .ok_or("layout")?;
        let partial = match alg {
            Algorithm::Summa3d(g) => partial_at_target
                .iter()
                .find(|(c, _)| *c == g.layers)
                .map(|(_, n)| *n),
            _ => None,
        };
        let p = model_time_with(&stats, alg, &machine, *f, partial)?;
        let balanced = model_time_with(&stats, alg, &machine, 1.0, partial)?;
        println!(
            "| {nodes} | {} | {name} | {f:.2} | {:.3} | {:.3} | {:.0} | {:.0} | **{:.3}** | {:.3} |",
            nodes * 16,
            p.compute,
            p.communication,
            p.comm.bytes / 1e6,
            p.comm.messages,
            p.total,
            balanced.total
        );
    }
    Ok(())
}
