//! `multiply --dist`: the product distributed over the MPI ranks the command runs on
//! (`mpiexec -n P hetsparse multiply ...`), through `hetsparse-mpi`.
//!
//! Every rank runs this with the same arguments. A is read with the collective Matrix Market
//! reader (each rank its byte range of the file, its rows in the end), the layout is the one
//! the time model predicts quickest on the machine measured on samples of the product (or
//! `--dist`'s), the operands are converted to it, multiplied,
//! C is brought back to rows and written with the collective writer. Every error is
//! collective: each rank returns the same one, so each prints it and exits nonzero.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use hetsparse_mpi::mpi::traits::*;
use hetsparse_mpi::{
    agree, choose_algorithm, choose_algorithm_by_time, measure_machine, model_volume,
    spgemm_summa3d_with, spgemm_summa_with, spgemm_with, Algorithm, CommReport, Dist2dCsr, DistCsr,
    DistOptions, Error, Grid3, Layout3, Machine, ProductStats, TimeEstimate,
};

use crate::error::CliError;
use crate::{chain_check, devices, mib, right_source, AlgorithmArg, DistArg, MultiplyArgs, Op};

/// Refuses the options that do not go with `--dist` (the same on every rank, before MPI starts).
fn check_args(args: &MultiplyArgs) -> Result<(), CliError> {
    if args.op != Op::Spgemm {
        return Err(CliError::Usage(
            "a distributed run (--dist, or under mpiexec) multiplies two sparse matrices: it goes \
             with --op spgemm"
                .into(),
        ));
    }
    if args.right.b.is_none() && !args.right.square && !args.right.aat {
        return Err(CliError::Usage(
            "spgemm needs B: give B.mtx, --square or --aat".into(),
        ));
    }
    if args.algorithm != AlgorithmArg::Auto {
        return Err(CliError::Usage(
            "--algorithm does not go with a distributed run (--dist, or under mpiexec): each rank's \
             products use its device's own choice"
                .into(),
        ));
    }
    Ok(())
}

/// Multiplies under MPI: starts MPI, runs the product on every rank, ends MPI.
pub fn multiply(args: &MultiplyArgs, dist: DistArg) -> Result<(), CliError> {
    check_args(args)?;
    let universe = hetsparse_mpi::mpi::initialize().ok_or_else(|| {
        CliError::Usage("MPI was initialised before the command started it".into())
    })?;
    let world = universe.world();
    run(&world, args, dist)
}

/// The temporary file C is written to before it takes the output's name: beside it, so that
/// renaming it is atomic; the same name on every rank.
fn partial_path(output: &Path) -> PathBuf {
    let name = output
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    output.with_file_name(format!(".{name}.hetsparse-partial"))
}

/// A file of A or B that the collective reader found wrong, named.
fn read_error(path: &Path) -> impl Fn(Error) -> CliError + '_ {
    move |source| CliError::DistRead {
        path: path.to_path_buf(),
        source,
    }
}

/// One stage of the run, for the summary.
struct Stage {
    name: String,
    time: Duration,
    detail: String,
    report: Option<CommReport>,
}

/// `bytes in messages` of a report, summed over ranks.
fn moved(report: &CommReport) -> String {
    format!(
        "{} in {} messages",
        mib(report.total.bytes_sent),
        report.total.messages_sent
    )
}

/// `n rank` or `n ranks`.
fn ranks(n: usize) -> String {
    format!("{n} rank{}", if n == 1 { "" } else { "s" })
}

/// An algorithm as the summary names it.
fn name(algorithm: Algorithm) -> String {
    match algorithm {
        Algorithm::RowFetch { ranks: n } => format!("1D row fetch on {}", ranks(n)),
        Algorithm::Summa2d(g) => format!("2D Sparse SUMMA on a {}×{} grid", g.rows, g.cols),
        Algorithm::Summa3d(g) => format!(
            "3D split SUMMA on a {}×{}×{} grid",
            g.rows, g.cols, g.layers
        ),
    }
}

/// What `--dist auto` chose from: the measured machine and every layout's predicted time,
/// least first.
struct Timed {
    machine: Machine,
    ranked: Vec<(Algorithm, TimeEstimate)>,
}

/// `0.123 s (compute 0.1 + local 0.02 + network 0.003)`.
fn predicted(t: &TimeEstimate) -> String {
    format!(
        "{:.3} s (compute {:.3} + local {:.3} + network {:.3})",
        t.total, t.compute, t.local, t.communication
    )
}

/// The algorithm `--dist` asks for, and why: for auto on several ranks the least predicted
/// time (`timed`), else among the volume model's choices (least volume first).
fn pick(
    dist: DistArg,
    stats: &ProductStats,
    choices: &[(Algorithm, f64)],
    timed: Option<&Timed>,
    ranks: usize,
) -> (Algorithm, String) {
    let first = |keep: fn(&Algorithm) -> bool| choices.iter().map(|c| c.0).find(keep);
    let modelled = |a: Algorithm| modelled_volume(stats, a);
    match dist {
        DistArg::Auto => match (timed.and_then(|t| t.ranked.first()), ranks) {
            (_, 1) => (
                Algorithm::RowFetch { ranks: 1 },
                "one rank: every layout is the same local product".into(),
            ),
            (Some((a, t)), _) => {
                let runner_up = timed
                    .and_then(|t| t.ranked.get(1))
                    .map_or(String::new(), |(b, tb)| {
                        format!("; next {}: {}", name(*b), predicted(tb))
                    });
                let why = format!(
                    "the least time the model predicts on the measured machine among {} \
                     layouts: {}{runner_up}",
                    timed.map_or(0, |t| t.ranked.len()),
                    predicted(t)
                );
                (*a, why)
            }
            (None, _) => {
                let a = Algorithm::RowFetch { ranks };
                (a, format!("the only layout (modelled: {})", modelled(a)))
            }
        },
        DistArg::OneD => {
            let a = Algorithm::RowFetch { ranks };
            (a, format!("--dist 1d (modelled: {})", modelled(a)))
        }
        DistArg::TwoD => {
            let a = first(|a| matches!(a, Algorithm::Summa2d(_)))
                .unwrap_or(Algorithm::Summa2d(hetsparse_mpi::Grid::new(1, ranks)));
            let why = format!(
                "--dist 2d; the grid the volume model ranks first (modelled: {})",
                modelled(a)
            );
            (a, why)
        }
        DistArg::ThreeD => match first(|a| matches!(a, Algorithm::Summa3d(_))) {
            Some(a) => {
                let why = format!(
                    "--dist 3d; the grid of 2 layers or more the volume model ranks first \
                     (modelled: {})",
                    modelled(a)
                );
                (a, why)
            }
            None => {
                let a = Algorithm::Summa3d(Grid3::new(1, 1, ranks));
                let why = format!(
                    "--dist 3d on one rank: one layer (modelled: {})",
                    modelled(a)
                );
                (a, why)
            }
        },
    }
}

/// The whole run on every rank of `world`.
fn run<C: Communicator>(world: &C, args: &MultiplyArgs, dist: DistArg) -> Result<(), CliError> {
    let total = Instant::now();
    let rank = world.rank();
    let options = DistOptions::default();
    let partial = partial_path(&args.output);
    // Fail on an unwritable output or a missing device before reading anything.
    let writable = if rank == 0 {
        std::fs::File::create(&partial)
            .map(drop)
            .map_err(|e| Error::Io {
                rank,
                reason: format!("cannot write `{}`: {e}", partial.display()),
            })
    } else {
        Ok(())
    };
    agree(world, writable)?;
    let result = product(world, args, dist, &options, &partial, total);
    if result.is_err() && rank == 0 {
        // Nothing half-written is left behind; the error is what is reported.
        let _ = std::fs::remove_file(&partial);
    }
    result
}

fn product<C: Communicator>(
    world: &C,
    args: &MultiplyArgs,
    dist: DistArg,
    options: &DistOptions,
    partial: &Path,
    total: Instant,
) -> Result<(), CliError> {
    let (rank, size) = (world.rank(), world.size() as usize);
    let ctx = devices::context(&args.device).map_err(|e| Error::Compute {
        rank,
        message: e.to_string(),
    });
    let ctx = agree(world, ctx)?;
    let mut stages: Vec<Stage> = Vec::new();
    let shape = |m: &DistCsr<f64>| {
        let (r, c) = m.shape();
        format!("{r}×{c}, {} entries", m.nnz())
    };

    let t = Instant::now();
    let (a, report) =
        DistCsr::<f64>::read_matrix_market(world, &args.a, options).map_err(read_error(&args.a))?;
    stages.push(Stage {
        name: "read A".into(),
        time: t.elapsed(),
        detail: shape(&a),
        report: Some(report),
    });
    let b_read;
    let b = match &args.right.b {
        Some(path) => {
            let t = Instant::now();
            let (b, report) = DistCsr::<f64>::read_matrix_market(world, path, options)
                .map_err(read_error(path))?;
            stages.push(Stage {
                name: "read B".into(),
                time: t.elapsed(),
                detail: shape(&b),
                report: Some(report),
            });
            b_read = b;
            &b_read
        }
        None if args.right.aat => {
            let t = Instant::now();
            let (at, report) = a.transpose(world, None, options)?;
            stages.push(Stage {
                name: "transpose".into(),
                time: t.elapsed(),
                detail: format!("B = Aᵀ, {}", shape(&at)),
                report: Some(report),
            });
            b_read = at;
            &b_read
        }
        None => &a,
    };
    let (a_rows, a_cols) = a.shape();
    let (b_rows, b_cols) = b.shape();
    // The shapes every rank holds: the same outcome everywhere.
    chain_check(
        "SpGEMM",
        ("B", right_source(&args.a, &args.right)),
        (&args.a, (a_rows as usize, a_cols as usize)),
        (b_rows as usize, b_cols as usize),
    )?;

    let stats = ProductStats::of_distributed(world, &a, b)?;
    let choices = choose_algorithm(&stats, size);
    // auto on several ranks chooses by predicted time on this machine, measured on samples
    // of this product: the volume alone misses the local work of merging SUMMA's stages.
    let timed = if dist == DistArg::Auto && size > 1 {
        let t = Instant::now();
        let machine = measure_machine(world, &a, b, &stats, &ctx)?;
        let ranked = choose_algorithm_by_time(&stats, size, &machine).map_err(|e| {
            Error::InvalidArgument {
                rank,
                reason: format!("the time model: {e}"),
            }
        })?;
        stages.push(Stage {
            name: "measure".into(),
            time: t.elapsed(),
            detail: format!(
                "network {}; local {:.1} M products/s{}",
                network(&machine),
                machine.rate / 1e6,
                machine
                    .entry_rate
                    .map_or(String::new(), |r| format!(", {:.1} M entries/s", r / 1e6))
            ),
            report: None,
        });
        Some(Timed { machine, ranked })
    } else {
        None
    };
    let (algorithm, why) = pick(dist, &stats, &choices, timed.as_ref(), size);
    let flops = 2 * stats.flops;

    let mut convert = |name: &str, t: Instant, report: CommReport, detail: String| {
        stages.push(Stage {
            name: name.into(),
            time: t.elapsed(),
            detail,
            report: Some(report),
        })
    };
    let c = match algorithm {
        Algorithm::RowFetch { .. } => {
            let t = Instant::now();
            let (c, report) = spgemm_with(world, &a, b, &ctx, options)?;
            convert(
                "multiply",
                t,
                report,
                format!("{flops} flops, B's rows fetched"),
            );
            c
        }
        Algorithm::Summa2d(grid) => {
            let t = Instant::now();
            let (a2, report) = a.to_2d(world, grid, options)?;
            let mut detail = "A".to_string();
            let (b2, report) = if args.right.square {
                // B = A in the same blocks.
                (a2.clone(), report)
            } else {
                let (b2, report_b) = b.to_2d(world, grid, options)?;
                detail.push_str(" and B");
                (b2, add(report, &report_b))
            };
            convert("to 2D", t, report, format!("{detail} in 2D blocks"));
            let t = Instant::now();
            let (c2, report) = spgemm_summa_with(world, &a2, &b2, &ctx, options)?;
            convert("multiply", t, report, format!("{flops} flops"));
            let t = Instant::now();
            let (c, report) = Dist2dCsr::to_rows(&c2, world, None, options)?;
            convert("to rows", t, report, "C in blocks of rows".into());
            c
        }
        Algorithm::Summa3d(grid) => {
            let t = Instant::now();
            let (a3, report) = a.to_3d(world, grid, Layout3::ColumnLayers, options)?;
            let (b3, report_b) = b.to_3d(world, grid, Layout3::RowLayers, options)?;
            convert(
                "to 3D",
                t,
                add(report, &report_b),
                "A in column layers, B in row layers".into(),
            );
            let t = Instant::now();
            let (c3, report) = spgemm_summa3d_with(world, &a3, &b3, 1, &ctx, options)?;
            convert("multiply", t, report, format!("{flops} flops"));
            let t = Instant::now();
            let (c, report) = c3.to_rows(world, None, options)?;
            convert("to rows", t, report, "C in blocks of rows".into());
            c
        }
    };

    let t = Instant::now();
    // Gzip as the single-process command chooses it: by the output's name.
    let gzip = args
        .output
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("gz"));
    let written = if gzip {
        c.write_matrix_market_gzip(world, partial)
    } else {
        c.write_matrix_market(world, partial)
    };
    let report = written.map_err(|source| CliError::DistWrite {
        path: args.output.clone(),
        source,
    })?;
    let renamed = if rank == 0 {
        std::fs::rename(partial, &args.output).map_err(|e| Error::Io {
            rank,
            reason: format!(
                "cannot rename `{}` to `{}`: {e}",
                partial.display(),
                args.output.display()
            ),
        })
    } else {
        Ok(())
    };
    agree(world, renamed).map_err(|source| CliError::DistWrite {
        path: args.output.clone(),
        source,
    })?;
    stages.push(Stage {
        name: "write C".into(),
        time: t.elapsed(),
        detail: format!("{}, to `{}`", shape(&c), args.output.display()),
        report: Some(report),
    });

    if rank == 0 && !args.quiet {
        println!("SpGEMM on {} of MPI: {}", ranks(size), name(algorithm));
        println!("  why: {why}");
        let mut all = None::<CommReport>;
        for s in &stages {
            let traffic = s
                .report
                .as_ref()
                .map_or(String::new(), |r| format!("; {}", moved(r)));
            println!(
                "  {:<9} {:>9.3} s  {}{traffic}",
                s.name,
                s.time.as_secs_f64(),
                s.detail
            );
            if let Some(r) = &s.report {
                all = Some(match all {
                    Some(x) => add(x, r),
                    None => r.clone(),
                });
            }
        }
        println!("  {:<9} {:>9.3} s", "total", total.elapsed().as_secs_f64());
        if let Some(all) = all {
            println!(
                "  moved in all: {} ({} bytes) in {} messages; one rank sent at most {} in {} messages",
                mib(all.total.bytes_sent),
                all.total.bytes_sent,
                all.total.messages_sent,
                mib(all.max.bytes_sent),
                all.max.messages_sent
            );
        }
    }
    if rank == 0 && args.explain {
        if let Some(timed) = &timed {
            println!(
                "layouts by predicted time (network {}, {:.1} M products/s and {} a rank; \
                 modelled communication in all):",
                network(&timed.machine),
                timed.machine.rate / 1e6,
                timed
                    .machine
                    .entry_rate
                    .map_or("no entry rate".into(), |r| format!(
                        "{:.1} M entries/s",
                        r / 1e6
                    ))
            );
            for (a, t) in &timed.ranked {
                let mark = if *a == algorithm { "  <- used" } else { "" };
                println!(
                    "  {:<40} {:<52} {:>12}{mark}",
                    name(*a),
                    predicted(t),
                    modelled_volume(&stats, *a)
                );
            }
        } else {
            println!("layouts by modelled communication (bytes sent in all):");
            for (a, v) in &choices {
                let mark = if *a == algorithm { "  <- used" } else { "" };
                println!("  {:<40} {:>12}{mark}", name(*a), mib(v.max(0.0) as u64));
            }
            if !choices.iter().any(|c| c.0 == algorithm) {
                let v = model_volume(&stats, algorithm).max(0.0);
                println!(
                    "  {:<40} {:>12}  <- used (asked for; not a layout the model ranks)",
                    name(algorithm),
                    mib(v as u64)
                );
            }
        }
    }
    Ok(())
}

/// The modelled volume of `algorithm`, in MiB.
fn modelled_volume(stats: &ProductStats, algorithm: Algorithm) -> String {
    mib(model_volume(stats, algorithm).max(0.0) as u64)
}

/// `latency 1.2 µs, 10.3 GB/s`.
fn network(machine: &Machine) -> String {
    let n = machine.network;
    if n.latency == 0.0 && n.bandwidth == f64::MAX {
        return "none (one rank)".into();
    }
    format!(
        "latency {:.1} µs, {:.2} GB/s",
        n.latency * 1e6,
        n.bandwidth / 1e9
    )
}

/// Two reports of one run added up (the maxima added too: an upper bound on one rank's).
fn add(x: CommReport, y: &CommReport) -> CommReport {
    CommReport {
        sizes: x.sizes.plus(y.sizes),
        requests: x.requests.plus(y.requests),
        rows: x.rows.plus(y.rows),
        fetched_rows: x.fetched_rows + y.fetched_rows,
        fetched_entries: x.fetched_entries + y.fetched_entries,
        local: x.local.plus(y.local),
        total: x.total.plus(y.total),
        max: x.max.plus(y.max),
        ..x
    }
}
