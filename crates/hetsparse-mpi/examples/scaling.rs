//! Measured against predicted time of every distributed product, on the ranks it is run on:
//!
//! ```sh
//! cargo build -p hetsparse-mpi --example scaling
//! for np in 1 2 3 4; do
//!     MPIR_CVAR_POLLS_BEFORE_YIELD=1 MPIR_CVAR_ASYNC_PROGRESS=0 RAYON_NUM_THREADS=1 \
//!         mpiexec -n $np target/debug/examples/scaling
//! done
//! ```
//!
//! Options: `--scale S` (R-MAT scale, default 14, edge factor 16), `--side N` (27-point stencil
//! of `N³` rows, default 30), `--reps R` (timed repetitions, the least kept; default 3).
//!
//! Each run
//! 1. measures the "network" with `measure_network` (ping-pongs of rank 0 with ranks spread over
//!    the communicator; latency: half the least round trip of 8 bytes; bandwidth: 2 MiB over
//!    half its least round trip less the latency; the slowest link);
//! 2. for an R-MAT product `A·A` and a 27-point stencil product `A·A`, measures the local rate
//!    (products per second of the CPU backend on rank 0 alone, the others asleep) and the entry
//!    rate (`measure_entry_rate` on the product C, rank 0 alone), then times
//!    1D row fetch, 2D SUMMA on every grid and 3D SUMMA on every grid of 2 layers or more (the
//!    product only, operands already distributed: barrier to barrier, least of the repetitions);
//! 3. prints, per algorithm, the measured time, `model_time`'s prediction (its compute, local
//!    entry work and communication parts), their ratio, the ratio to the prediction without the
//!    local entry work, the imbalance from `critical_path_flops`, and the
//!    model's bytes per rank against the report's most received by one rank;
//! 4. prints the machine `measure_machine` samples on the ranks (what `hetsparse multiply
//!    --dist auto` chooses from) and the layouts ranked by time on it. With more ranks
//!    than cores the ranks share them: `pred×share` scales the compute by `P / cores`.

use hetsparse::generate::{self, Stencil};
use hetsparse::{Context, Csr, DeviceChoice};
use hetsparse_mpi::mpi::traits::*;
use hetsparse_mpi::{
    choose_algorithm_by_time, critical_path_flops, measure_entry_rate, measure_machine,
    measure_network, model_time, spgemm_summa3d_with, spgemm_summa_with, spgemm_with, Algorithm,
    CommReport, Dist2dCsr, Dist3dCsr, DistCsr, DistOptions, Grid, Grid3, Layout3, Machine,
    ProductStats,
};

#[path = "common/mod.rs"]
mod common;
use common::{arg, timed, Res};

/// Every layout of `p` ranks: 1D, every 2D grid, every 3D grid of 2 layers or more.
fn layouts(p: usize) -> Vec<Algorithm> {
    let mut all = vec![Algorithm::RowFetch { ranks: p }];
    for c in (1..=p).filter(|c| p % c == 0) {
        let per = p / c;
        for pr in (1..=per).filter(|pr| per % pr == 0) {
            all.push(if c == 1 {
                Algorithm::Summa2d(Grid::new(pr, per / pr))
            } else {
                Algorithm::Summa3d(Grid3::new(pr, per / pr, c))
            });
        }
    }
    all
}

fn name(alg: Algorithm) -> String {
    match alg {
        Algorithm::RowFetch { ranks } => format!("1D ×{ranks}"),
        Algorithm::Summa2d(g) => format!("2D {}×{}", g.rows, g.cols),
        Algorithm::Summa3d(g) => format!("3D {}×{}×{}", g.rows, g.cols, g.layers),
    }
}

/// Times `alg` on `a·a` (`a` given on every rank; rank 0 scatters its copy).
fn run_one<C: Communicator>(
    world: &C,
    a: &Csr<f64>,
    alg: Algorithm,
    ctx: &Context<f64>,
    reps: usize,
) -> Res<(f64, CommReport)> {
    let options = DistOptions::default();
    let root = (world.rank() == 0).then_some(a);
    Ok(match alg {
        Algorithm::RowFetch { .. } => {
            let (d, _) = DistCsr::scatter(world, 0, root, None, &options)?;
            let (t, (_, r)) = timed(world, reps, || spgemm_with(world, &d, &d, ctx, &options))?;
            (t, r)
        }
        Algorithm::Summa2d(g) => {
            let (d, _) = Dist2dCsr::scatter(world, 0, root, g, &options)?;
            let (t, (_, r)) = timed(world, reps, || {
                spgemm_summa_with(world, &d, &d, ctx, &options)
            })?;
            (t, r)
        }
        Algorithm::Summa3d(g) => {
            let (da, _) = Dist3dCsr::scatter(world, 0, root, g, Layout3::ColumnLayers, &options)?;
            let (db, _) = Dist3dCsr::scatter(world, 0, root, g, Layout3::RowLayers, &options)?;
            let (t, (_, r)) = timed(world, reps, || {
                spgemm_summa3d_with(world, &da, &db, 1, ctx, &options)
            })?;
            (t, r)
        }
    })
}

fn main() -> Res<()> {
    let universe = hetsparse_mpi::mpi::initialize().ok_or("MPI was already initialised")?;
    let world = universe.world();
    let (rank, size) = (world.rank(), world.size() as usize);
    let args: Vec<String> = std::env::args().collect();
    let scale = arg(&args, "--scale", 14)? as u32;
    let side = arg(&args, "--side", 30)?;
    let reps = arg(&args, "--reps", 3)?;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let share = (size as f64 / cores as f64).max(1.0);
    let ctx = Context::<f64>::on(&DeviceChoice::Cpu)?;

    let network = measure_network(&world);
    if rank == 0 {
        println!(
            "P = {size} ranks on {cores} cores; ping-pong: latency {:.2} µs, bandwidth {:.2} GB/s",
            network.latency * 1e6,
            network.bandwidth / 1e9
        );
    }
    let products = [
        (
            format!("R-MAT scale {scale}, edge factor 16"),
            generate::rmat::<f64>(scale, 16, 1),
        ),
        (
            format!("27-point stencil {side}³"),
            generate::stencil_3d::<f64>(side, Stencil::TwentySeven, 1, 2),
        ),
    ];
    for (what, a) in &products {
        let stats = ProductStats::of(a, a);
        // The local rate: rank 0 alone, the others asleep (a rank waiting in MPI polls and
        // would take a core from it) until rank 0 sends them the rate.
        // The entry rate likewise, on the product C (the entries SUMMA's stage products and 3D's
        // partial products have, in all).
        let mut rates = [0.0f64; 2];
        if rank == 0 {
            let mut best = f64::INFINITY;
            let mut c = None;
            for _ in 0..reps.max(1) {
                let start = hetsparse_mpi::mpi::time();
                let product = ctx.spgemm(a, a)?;
                best = best.min(hetsparse_mpi::mpi::time() - start);
                c = Some(product);
            }
            rates[0] = stats.flops as f64 / best;
            rates[1] = measure_entry_rate(&c.ok_or("no product")?, reps)?;
            for r in 1..size as i32 {
                world.process_at_rank(r).send(&rates[..]);
            }
        } else {
            let root = world.process_at_rank(0);
            while root.immediate_probe().is_none() {
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            root.receive_into(&mut rates[..]);
        }
        let [rate, entry_rate] = rates;
        let machine = Machine {
            network,
            rate,
            entry_rate: Some(entry_rate),
        };
        // What `hetsparse multiply --dist auto` measures instead: samples on every rank.
        let (d, _) = DistCsr::scatter(
            &world,
            0,
            (rank == 0).then_some(a),
            None,
            &DistOptions::default(),
        )?;
        let sampled = measure_machine(&world, &d, &d, &stats, &ctx)?;
        let by_time = choose_algorithm_by_time(&stats, size, &sampled)?;
        if rank == 0 {
            println!(
                "\n{what}: sampled on the ranks (measure_machine): {:.1} M products/s, {:.1} M entries/s; layouts by time on it: {}",
                sampled.rate / 1e6,
                sampled.entry_rate.unwrap_or(0.0) / 1e6,
                by_time
                    .iter()
                    .map(|(a, t)| format!("{} {:.4} s", name(*a), t.total))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        if rank == 0 {
            println!(
                "\n{what}: {} rows, nnz {}, {} products; local rate {:.1} M products/s ({:.3} s on rank 0 alone), entry rate {:.1} M entries/s",
                a.nrows(),
                a.nnz(),
                stats.flops,
                rate / 1e6,
                stats.flops as f64 / rate,
                entry_rate / 1e6
            );
            println!(
                "| P | algorithm | measured s | predicted s (compute + local + comm) | measured / predicted | pred×share | measured / pred×share | without local | imbalance | model MB/rank | max received MB |"
            );
            println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
        }
        for alg in layouts(size) {
            let (t, report) = run_one(&world, a, alg, &ctx, reps)?;
            if rank == 0 {
                let critical = critical_path_flops(a, a, alg)?;
                let imbalance =
                    (critical as f64 * size as f64 / stats.flops.max(1) as f64).max(1.0);
                let p = model_time(&stats, alg, &machine, imbalance)?;
                let shared = (p.compute + p.local) * share + p.communication;
                println!(
                    "| {size} | {} | {t:.4} | {:.4} ({:.4} + {:.4} + {:.4}) | {:.2} | {shared:.4} | {:.2} | {:.2} | {imbalance:.2} | {:.2} | {:.2} |",
                    name(alg),
                    p.total,
                    p.compute,
                    p.local,
                    p.communication,
                    t / p.total,
                    t / shared,
                    t / (p.total - p.local),
                    p.comm.bytes / 1e6,
                    report.max.bytes_received as f64 / 1e6,
                );
            }
        }
    }
    Ok(())
}
