//! Strong scaling on one host: the same products on P ranks × T threads (P·T = the cores), every
//! distributed algorithm, against one process with all the threads.
//!
//! ```sh
//! cargo build --release -p hetsparse-mpi --example strong
//! for p in 1 2 4 8 16; do
//!     RAYON_NUM_THREADS=$((16 / p)) mpiexec -n $p target/release/examples/strong --side 100
//! done
//! ```
//!
//! Options: `--side N` (the grid: `N³` nodes, default 100), `--reps R` (timed repetitions, the
//! least kept; default 3), `--aggregate K` (aggregates of `K³` nodes, default 3), `--only 1D`
//! (or `2D`, `3D`: that algorithm alone), `--by-entries` (1D: each operand's rows split over
//! the ranks by entries, [`RowPartition::by_entries`], rather than evenly).
//!
//! The products, all on the grid's 27-point stencil `A`:
//! - `A·A`, the stencil squared;
//! - the two Galerkin products of a smoothed-aggregation AMG setup: `A·P` and `R·(AP)` with
//!   `R = Pᵀ`, where `P = (I − ω D⁻¹ A) P₀` smooths the tentative prolongator `P₀` of
//!   aggregates of `K³` neighbouring nodes (one per row), as PyAMG's smoothed aggregation
//!   builds it on a structured grid (every row of `P` holds the aggregates its 27 neighbours
//!   belong to: 1 to 8).
//!
//! Rank 0 prints one line per product and algorithm: `| P | threads | product | algorithm |
//! seconds | equal to one process |`, the product alone (operands already distributed,
//! barrier to barrier, least of the repetitions), and whether the product gathered on rank 0
//! is the one computed in one process (same structure, values within 1e-12 of their row's
//! largest; a difference ends the run on every rank with an error). With one rank it also times the product in the
//! process itself (`Context::spgemm` on the CPU backend with every thread), the baseline the
//! distributed runs are compared with.

use hetsparse::generate::{self, Stencil};
use hetsparse::{Context, Csr, DeviceChoice};
use hetsparse_mpi::mpi::traits::*;
use hetsparse_mpi::{
    spgemm_summa3d_with, spgemm_summa_with, spgemm_with, Dist2dCsr, Dist3dCsr, DistCsr,
    DistOptions, Grid, Grid3, Layout3, RowPartition,
};

#[path = "common/mod.rs"]
mod common;
use common::{arg, timed, Res};

/// A product's two operands, on rank 0.
type Operands<'a> = (&'a Csr<f64>, &'a Csr<f64>);

/// The damping of the prolongator's smoothing, PyAMG's default for smoothed aggregation.
const OMEGA: f64 = 4.0 / 3.0;

/// The smoothed prolongator of aggregates of `k³` nodes on a grid of `side³` nodes with the
/// 27-point stencil: row `i` (node `(x, y, z)`) has, for every aggregate that one of its
/// neighbours (itself included) belongs to, `[own] − ω/ρ · (neighbours in it) / 27` — the
/// pattern of `(I − ω D⁻¹ A) P₀`, with values of that shape.
fn prolongator(side: usize, k: usize) -> Res<Csr<f64>> {
    let k = k.max(1);
    let per_axis = side.div_ceil(k);
    let n = side * side * side;
    let mut offsets = Vec::with_capacity(n + 1);
    let mut cols: Vec<u32> = Vec::with_capacity(n * 8);
    let mut vals = Vec::with_capacity(n * 8);
    offsets.push(0u64);
    let near = |c: usize| (c.saturating_sub(1)..(c + 2).min(side)).collect::<Vec<_>>();
    for z in 0..side {
        for y in 0..side {
            for x in 0..side {
                let own = ((z / k) * per_axis + y / k) * per_axis + x / k;
                // Neighbours per aggregate, in aggregate order.
                let mut counts: Vec<(usize, u32)> = Vec::with_capacity(8);
                for &nz in &near(z) {
                    for &ny in &near(y) {
                        for &nx in &near(x) {
                            let agg = ((nz / k) * per_axis + ny / k) * per_axis + nx / k;
                            match counts.iter_mut().find(|(a, _)| *a == agg) {
                                Some((_, c)) => *c += 1,
                                None => counts.push((agg, 1)),
                            }
                        }
                    }
                }
                counts.sort_unstable();
                for (agg, c) in counts {
                    let smoothing = OMEGA * f64::from(c) / 27.0;
                    cols.push(u32::try_from(agg)?);
                    vals.push(f64::from(u8::from(agg == own)) - smoothing);
                }
                offsets.push(cols.len() as u64);
            }
        }
    }
    let aggregates = per_axis * per_axis * per_axis;
    Ok(Csr::try_new(n, aggregates, offsets, cols, vals)?)
}

/// How `got` differs from `want` (the same structure, each value within 1e-12 of its row's
/// largest), if it does.
fn difference(got: &Csr<f64>, want: &Csr<f64>) -> Option<String> {
    if got.shape() != want.shape() || got.nnz() != want.nnz() {
        return Some(format!(
            "{:?} with {} entries, not {:?} with {}",
            got.shape(),
            got.nnz(),
            want.shape(),
            want.nnz()
        ));
    }
    if let Some(row) = (0..got.nrows()).find(|&i| got.row(i).0 != want.row(i).0) {
        return Some(format!("row {row}'s columns differ"));
    }
    // Within 1e-12 of the row's largest value: a sum in another order (SUMMA's stages, 3D's
    // layers) can differ by a few units in the last place of its terms, which is far more
    // than that of the sum where the terms cancel.
    for i in 0..got.nrows() {
        let (got_v, want_v) = (got.row(i).1, want.row(i).1);
        let scale = want_v.iter().fold(f64::MIN_POSITIVE, |m, v| m.max(v.abs()));
        if let Some(k) = (0..got_v.len()).find(|&k| (got_v[k] - want_v[k]).abs() > 1e-12 * scale) {
            return Some(format!(
                "row {i}, column {}: {} instead of {}",
                want.row(i).0[k],
                got_v[k],
                want_v[k]
            ));
        }
    }
    None
}

/// The 2D grid of `p` ranks closest to square (more columns than rows where it cannot be).
fn square_grid(p: usize) -> Grid {
    let rows = (1..=p)
        .filter(|r| p % r == 0 && r * r <= p)
        .max()
        .unwrap_or(1);
    Grid::new(rows, p / rows)
}

/// The algorithms timed on `p` ranks: 1D, the squarest 2D grid, and 3D with 2 layers on the
/// squarest grid of the rest (where `p` is even and above 2).
fn algorithms(p: usize, by_entries: bool) -> Vec<(String, Layout)> {
    let mut all = vec![("1D".to_string(), Layout::RowFetch { by_entries })];
    let g = square_grid(p);
    all.push((format!("2D {}×{}", g.rows, g.cols), Layout::Summa2d(g)));
    if p > 2 && p % 2 == 0 {
        let g = square_grid(p / 2);
        all.push((
            format!("3D {}×{}×2", g.rows, g.cols),
            Layout::Summa3d(Grid3::new(g.rows, g.cols, 2)),
        ));
    }
    all
}

#[derive(Clone, Copy)]
enum Layout {
    /// 1D row fetch; `by_entries`: rows split by entries rather than evenly.
    RowFetch {
        by_entries: bool,
    },
    Summa2d(Grid),
    Summa3d(Grid3),
}

/// Times `a·b` with `layout` (`a` and `b` given on rank 0), and gathers the last product on
/// rank 0.
fn run_one<C: Communicator>(
    world: &C,
    a: Option<&Csr<f64>>,
    b: Option<&Csr<f64>>,
    layout: Layout,
    ctx: &Context<f64>,
    reps: usize,
) -> Res<(f64, Option<Csr<f64>>)> {
    let options = DistOptions::default();
    Ok(match layout {
        Layout::RowFetch { by_entries } => {
            let ranks = world.size() as usize;
            let part = |m: Option<&Csr<f64>>| {
                m.filter(|_| by_entries)
                    .map(|m| RowPartition::by_entries(m.row_offsets(), ranks))
            };
            let (pa, pb) = (part(a), part(b));
            let (da, _) = DistCsr::scatter(world, 0, a, pa.as_ref(), &options)?;
            let (db, _) = DistCsr::scatter(world, 0, b, pb.as_ref(), &options)?;
            let (t, (c, _)) = timed(world, reps, || spgemm_with(world, &da, &db, ctx, &options))?;
            (t, c.gather(world, 0, &options)?.0)
        }
        Layout::Summa2d(g) => {
            let (da, _) = Dist2dCsr::scatter(world, 0, a, g, &options)?;
            let (db, _) = Dist2dCsr::scatter(world, 0, b, g, &options)?;
            let (t, (c, _)) = timed(world, reps, || {
                spgemm_summa_with(world, &da, &db, ctx, &options)
            })?;
            (t, c.gather(world, 0, &options)?.0)
        }
        Layout::Summa3d(g) => {
            let (da, _) = Dist3dCsr::scatter(world, 0, a, g, Layout3::ColumnLayers, &options)?;
            let (db, _) = Dist3dCsr::scatter(world, 0, b, g, Layout3::RowLayers, &options)?;
            let (t, (c, _)) = timed(world, reps, || {
                spgemm_summa3d_with(world, &da, &db, 1, ctx, &options)
            })?;
            (t, c.gather(world, 0, &options)?.0)
        }
    })
}

fn main() -> Res<()> {
    let universe = hetsparse_mpi::mpi::initialize().ok_or("MPI was already initialised")?;
    let world = universe.world();
    let (rank, size) = (world.rank(), world.size() as usize);
    let args: Vec<String> = std::env::args().collect();
    let side = arg(&args, "--side", 100)?;
    let reps = arg(&args, "--reps", 3)?;
    let k = arg(&args, "--aggregate", 3)?;
    let by_entries = args.iter().any(|a| a == "--by-entries");
    let only = args
        .iter()
        .position(|a| a == "--only")
        .and_then(|i| args.get(i + 1))
        .map(|o| o.to_ascii_uppercase());
    // The CPU backend's threads: RAYON_NUM_THREADS where set, else every core.
    let threads = std::env::var("RAYON_NUM_THREADS")
        .ok()
        .and_then(|t| t.parse::<usize>().ok())
        .filter(|&t| t > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let ctx = Context::<f64>::on(&DeviceChoice::Cpu)?;

    // The operands, on rank 0 only.
    let operands = if rank == 0 {
        let a = generate::stencil_3d::<f64>(side, Stencil::TwentySeven, 1, 2);
        let p = prolongator(side, k)?;
        let ap = ctx.spgemm(&a, &p)?;
        let r = p.transpose()?;
        Some((a, p, ap, r))
    } else {
        None
    };
    let products: [(&str, Option<Operands<'_>>); 3] = match &operands {
        Some((a, p, ap, r)) => [
            ("A·A", Some((a, a))),
            ("A·P", Some((a, p))),
            ("R·(AP)", Some((r, ap))),
        ],
        None => [("A·A", None), ("A·P", None), ("R·(AP)", None)],
    };
    if rank == 0 {
        if let Some((a, p, ap, _)) = &operands {
            println!(
                "27-point stencil {side}³ ({} rows, nnz {}); P {}×{} (nnz {}), AP nnz {}; {size} ranks × {threads} threads",
                a.nrows(),
                a.nnz(),
                p.nrows(),
                p.ncols(),
                p.nnz(),
                ap.nnz()
            );
        }
        println!("| P | threads | product | algorithm | seconds | equal to one process |");
        println!("|---:|---:|---|---|---:|---|");
    }
    for (what, ab) in products {
        // The product in this process (rank 0), what every distributed result is checked
        // against; timed with one rank, where it is the baseline.
        let mut local = None;
        if let Some((a, b)) = ab {
            let mut best = f64::INFINITY;
            let runs = if size == 1 { reps.max(1) } else { 1 };
            for _ in 0..runs {
                drop(local.take());
                let start = hetsparse_mpi::mpi::time();
                local = Some(ctx.spgemm(a, b)?);
                best = best.min(hetsparse_mpi::mpi::time() - start);
            }
            if size == 1 {
                println!("| 1 | {threads} | {what} | one process | {best:.4} | |");
            }
        }
        for (name, layout) in algorithms(size, by_entries) {
            if only.as_ref().is_some_and(|o| !name.starts_with(o.as_str())) {
                continue;
            }
            let (a, b) = (ab.map(|x| x.0), ab.map(|x| x.1));
            let (t, c) = run_one(&world, a, b, layout, &ctx, reps)?;
            let mut diff = None;
            if let (Some(c), Some(want)) = (&c, &local) {
                diff = difference(c, want);
                let equal = diff.is_none();
                println!("| {size} | {threads} | {what} | {name} | {t:.4} | {equal} |");
            }
            // Every rank stops on a wrong product, not rank 0 alone (the others would wait
            // for it in the next collective).
            let mut wrong = u8::from(diff.is_some());
            world.process_at_rank(0).broadcast_into(&mut wrong);
            if wrong != 0 {
                let why = diff.unwrap_or_else(|| "see rank 0".into());
                let what = format!("{what} by {name} is not the product in one process");
                return Err(format!("{what}: {why}").into());
            }
        }
    }
    Ok(())
}
