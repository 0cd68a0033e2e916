//! The distributed suite, run by every rank: `mpiexec -n P target/debug/deps/distributed-HASH`
//! (CI runs P = 1, 2, 3, 4; `cargo test -p hetsparse-mpi --test distributed` runs one rank).
//!
//! Each case builds the same operands on every rank (the generators are deterministic), computes
//! the distributed product, gathers it on a root and compares it there with the single-process
//! product of the CPU backend; each rank checks its communication report against the volume
//! 1D row fetch must move, worked out here from the whole operands. The error cases check that a
//! problem on one rank gives the same error on every rank. Rank 0 prints one summary line,
//! which CI looks for: `hetsparse-mpi distributed: N cases passed on P ranks`.

use std::collections::BTreeSet;
use std::process::ExitCode;

use hetsparse::generate::{self, Stencil};
use hetsparse::Backend;
use hetsparse::{Context, Csr, DeviceChoice};
use hetsparse_core::fault::{Fault, FaultyBackend};
use hetsparse_mpi::mpi::collective::SystemOperation;
use hetsparse_mpi::mpi::traits::*;
use hetsparse_mpi::{
    spgemm, spgemm_summa, spgemm_with, Dist2dCsr, DistCsr, DistOptions, Error, Grid, MpiScalar,
    RowPartition,
};
use num_complex::Complex;
use std::sync::Arc;

type Check = Result<(), String>;

/// A named case: each rank runs it and reports how it went.
type Case<'a> = (&'a str, Box<dyn Fn() -> Check + 'a>);

fn ensure(ok: bool, what: impl FnOnce() -> String) -> Check {
    if ok {
        Ok(())
    } else {
        Err(what())
    }
}

/// Same structure, values within 1e-12 relative.
fn same_product<T: MpiScalar>(got: &Csr<T>, want: &Csr<T>) -> Check {
    ensure(got.shape() == want.shape(), || {
        format!("shape {:?}, expected {:?}", got.shape(), want.shape())
    })?;
    ensure(got.row_offsets() == want.row_offsets(), || {
        "row offsets differ".into()
    })?;
    ensure(got.col_indices() == want.col_indices(), || {
        "column indices differ".into()
    })?;
    for (i, (x, y)) in got.values().iter().zip(want.values()).enumerate() {
        let (x, y) = (x.to_parts(), y.to_parts());
        let diff = ((x.0 - y.0).powi(2) + (x.1 - y.1).powi(2)).sqrt();
        let scale = (y.0.powi(2) + y.1.powi(2))
            .sqrt()
            .max((x.0.powi(2) + x.1.powi(2)).sqrt());
        ensure(diff <= 1e-12 * scale, || {
            format!("value {i}: {x:?}, expected {y:?}")
        })?;
    }
    Ok(())
}

/// What 1D row fetch must move for `rank`: (rows fetched, their entries, request messages,
/// row messages), from the whole operands.
fn expected_fetch<T: MpiScalar>(
    a: &Csr<T>,
    a_part: &RowPartition,
    b: &Csr<T>,
    b_part: &RowPartition,
    rank: usize,
    chunk: u64,
) -> (u64, u64, u64, u64) {
    let rows = a_part.rows(rank);
    let needed: BTreeSet<u32> = (rows.start as usize..rows.end as usize)
        .flat_map(|i| a.row(i).0.iter().copied())
        .collect();
    let (mut fetched, mut entries) = (0u64, 0u64);
    let mut per_peer = vec![(0u64, 0u64); b_part.ranks()];
    for id in needed {
        let owner = b_part.owner(u64::from(id)).expect("a row of B");
        if owner != rank {
            fetched += 1;
            entries += b.row_nnz(id as usize);
            per_peer[owner].0 += 1;
            per_peer[owner].1 += b.row_nnz(id as usize);
        }
    }
    let bytes_per_entry = 4 + T::BYTES as u64;
    let request_messages = per_peer.iter().map(|p| (4 * p.0).div_ceil(chunk)).sum();
    let row_messages = per_peer
        .iter()
        .map(|p| (8 * p.0 + bytes_per_entry * p.1).div_ceil(chunk))
        .sum();
    (fetched, entries, request_messages, row_messages)
}

/// Scatters A and B from `root` (B over `b_part`), multiplies, gathers C on `root` and compares
/// with the CPU backend's product there; checks this rank's report and the totals.
fn product_case<T: MpiScalar, C: Communicator>(
    world: &C,
    a: &Csr<T>,
    b: &Csr<T>,
    b_part: Option<&RowPartition>,
    root: i32,
    options: &DistOptions,
) -> Check {
    let (rank, size) = (world.rank(), world.size());
    let on_root = |m| (rank == root).then_some(m);
    let (da, _) =
        DistCsr::scatter(world, root, on_root(a), None, options).map_err(|e| e.to_string())?;
    let (db, scatter_report) =
        DistCsr::scatter(world, root, on_root(b), b_part, options).map_err(|e| e.to_string())?;
    ensure(
        da.local().nrows() as u64
            == da.partition().rows(rank as usize).end - da.partition().rows(rank as usize).start,
        || "A's block has the wrong number of rows".into(),
    )?;
    // The scatter: the root sends every other rank its rows, nothing else moves.
    let chunk = options.max_message_bytes as u64;
    let scattered: u64 = (0..size as usize)
        .filter(|&r| r != root as usize)
        .map(|r| {
            let rows = db.partition().rows(r);
            8 * (rows.end - rows.start) + (4 + T::BYTES as u64) * db.nnz_per_rank()[r]
        })
        .sum();
    let own = {
        let rows = db.partition().rows(rank as usize);
        8 * (rows.end - rows.start) + (4 + T::BYTES as u64) * db.nnz_per_rank()[rank as usize]
    };
    let rows_moved = if rank == root {
        scatter_report.rows.bytes_sent
    } else {
        scatter_report.rows.bytes_received
    };
    let want = if rank == root { scattered } else { own };
    ensure(rows_moved == want, || {
        format!(
            "scatter moved {:?}, expected {want} bytes of rows",
            scatter_report.rows
        )
    })?;
    ensure(
        scatter_report.total.bytes_sent == scatter_report.total.bytes_received,
        || "scatter: bytes sent and received differ".into(),
    )?;

    let (dc, report) = spgemm(world, &da, &db, options).map_err(|e| e.to_string())?;

    // This rank's traffic, against the volume worked out from the whole operands.
    let me = rank as usize;
    let (fetched, entries, request_messages, row_messages) =
        expected_fetch(a, da.partition(), b, db.partition(), me, chunk);
    let others = size as u64 - 1;
    let r = &report;
    ensure(
        r.fetched_rows == fetched && r.fetched_entries == entries,
        || {
            format!(
                "fetched {} rows of {} entries, expected {fetched} of {entries}",
                r.fetched_rows, r.fetched_entries
            )
        },
    )?;
    ensure(
        r.requests.bytes_sent == 4 * fetched && r.requests.messages_sent == request_messages,
        || {
            format!(
                "requests sent {:?}, expected {} bytes in {request_messages} messages",
                r.requests,
                4 * fetched
            )
        },
    )?;
    let row_bytes = 8 * fetched + (4 + T::BYTES as u64) * entries;
    ensure(
        r.rows.bytes_received == row_bytes && r.rows.messages_received == row_messages,
        || {
            format!(
                "rows received {:?}, expected {row_bytes} bytes in {row_messages} messages",
                r.rows
            )
        },
    )?;
    ensure(
        r.sizes.bytes_sent == 24 * others && r.sizes.messages_sent == 3 * others,
        || format!("sizes sent {:?}, expected {} bytes", r.sizes, 24 * others),
    )?;
    // Totals: every rank's expected volume, summed.
    let mut total = 0u64;
    for q in 0..size as usize {
        let (f, e, _, _) = expected_fetch(a, da.partition(), b, db.partition(), q, chunk);
        total += 4 * f + 8 * f + (4 + T::BYTES as u64) * e + 24 * others;
    }
    ensure(
        r.total.bytes_sent == total && r.total.bytes_received == total,
        || format!("total {:?}, expected {total} bytes", r.total),
    )?;
    ensure(
        r.local.bytes_sent <= r.max.bytes_sent && r.max.bytes_sent <= r.total.bytes_sent,
        || "max is not between local and total".into(),
    )?;

    let (whole, _) = dc.gather(world, root, options).map_err(|e| e.to_string())?;
    ensure(dc.shape() == (a.nrows() as u64, b.ncols() as u64), || {
        "C's shape".into()
    })?;
    match whole {
        Some(c) => {
            ensure(rank == root, || {
                "C gathered on a rank that is not the root".into()
            })?;
            let want = Context::<T>::on(&DeviceChoice::Cpu)
                .and_then(|ctx| ctx.spgemm(a, b))
                .map_err(|e| e.to_string())?;
            ensure(dc.nnz() == want.nnz(), || "C's nnz per rank".into())?;
            same_product(&c, &want)
        }
        None => ensure(rank != root, || "no C on the root".into()),
    }
}

/// A's rows built on each rank from its own block (an uneven split), B scattered evenly.
fn local_rows_case<C: Communicator>(world: &C) -> Check {
    let (rank, size) = (world.rank() as usize, world.size() as usize);
    let a = generate::uniform::<f64>(500, 400, 6, 7);
    let b = generate::uniform::<f64>(400, 300, 5, 8);
    // Rank r gets a share proportional to r + 1 (rank 0 the least).
    let weights: u64 = (1..=size as u64).sum();
    let mut counts: Vec<u64> = (0..size as u64).map(|r| 500 * (r + 1) / weights).collect();
    counts[size - 1] += 500 - counts.iter().sum::<u64>();
    let part = RowPartition::from_counts(&counts);
    let rows = part.rows(rank);
    let mine = a
        .rows(rows.start as usize..rows.end as usize)
        .map_err(|e| e.to_string())?;
    let options = DistOptions::default();
    let (da, _) = DistCsr::from_local_rows(world, mine).map_err(|e| e.to_string())?;
    ensure(
        da.partition() == &part && da.shape() == (500, 400) && da.nnz() == a.nnz(),
        || format!("partition {:?}", da.partition()),
    )?;
    let root = (size - 1) as i32;
    let (db, _) = DistCsr::scatter(
        world,
        root,
        (rank == root as usize).then_some(&b),
        None,
        &options,
    )
    .map_err(|e| e.to_string())?;
    let (dc, _) = spgemm(world, &da, &db, &options).map_err(|e| e.to_string())?;
    ensure(dc.partition() == &part, || "C has not A's partition".into())?;
    // Gather A back too: it must be A exactly.
    let (a_back, _) = da
        .gather(world, root, &options)
        .map_err(|e| e.to_string())?;
    let (c, _) = dc
        .gather(world, root, &options)
        .map_err(|e| e.to_string())?;
    if let (Some(a_back), Some(c)) = (a_back, c) {
        ensure(a_back == a, || "gathered A is not A".into())?;
        let want = Context::<f64>::on(&DeviceChoice::Cpu)
            .and_then(|ctx| ctx.spgemm(&a, &b))
            .map_err(|e| e.to_string())?;
        same_product(&c, &want)?;
    }
    Ok(())
}

/// `result` must be `Err(want)` on this rank (every rank checks the same `want`).
fn expect_error<T>(result: Result<T, Error>, want: &Error) -> Check {
    match result {
        Err(e) if &e == want => Ok(()),
        Err(e) => Err(format!("error {e:?}, expected {want:?}")),
        Ok(_) => Err(format!("succeeded, expected {want:?}")),
    }
}

/// Shapes that do not multiply: the same error on every rank.
fn shape_mismatch_case<C: Communicator>(world: &C) -> Check {
    let options = DistOptions::default();
    let a = generate::uniform::<f64>(40, 30, 3, 1);
    let b = generate::uniform::<f64>(31, 20, 3, 2);
    let on_root = |m| (world.rank() == 0).then_some(m);
    let (da, _) =
        DistCsr::scatter(world, 0, on_root(&a), None, &options).map_err(|e| e.to_string())?;
    let (db, _) =
        DistCsr::scatter(world, 0, on_root(&b), None, &options).map_err(|e| e.to_string())?;
    let want = Error::ShapeMismatch {
        rank: 0,
        a_rows: 40,
        a_cols: 30,
        b_rows: 31,
        b_cols: 20,
    };
    expect_error(spgemm(world, &da, &db, &options), &want)
}

/// One rank's block has a column too many: every rank names that rank.
fn bad_block_case<C: Communicator>(world: &C) -> Check {
    let (rank, size) = (world.rank(), world.size());
    let bad = size - 1;
    let ncols = if rank == bad && size > 1 { 11 } else { 10 };
    let local = generate::uniform::<f64>(5, ncols, 2, rank as u64);
    let result = DistCsr::from_local_rows(world, local);
    if size == 1 {
        return ensure(result.is_ok(), || "one rank's block refused".into());
    }
    let want = Error::InvalidBlock {
        rank: bad,
        reason: "its block has 11 columns, rank 0's has 10".into(),
    };
    expect_error(result, &want)
}

/// An option out of range on one rank only: the product fails everywhere, naming that rank.
fn one_rank_option_case<C: Communicator>(world: &C) -> Check {
    let (rank, size) = (world.rank(), world.size());
    let a = generate::uniform::<f64>(30, 30, 3, 3);
    let good = DistOptions::default();
    let (da, _) = DistCsr::scatter(world, 0, (rank == 0).then_some(&a), None, &good)
        .map_err(|e| e.to_string())?;
    let bad_rank = size - 1;
    let options = if rank == bad_rank {
        DistOptions {
            max_message_bytes: 0,
        }
    } else {
        good
    };
    let want = Error::InvalidArgument {
        rank: bad_rank,
        reason: format!("max_message_bytes 0 is not between 1 and {}", i32::MAX),
    };
    expect_error(spgemm(world, &da, &da, &options), &want)
}

/// The root's partition does not fit its matrix: every rank gets the root's error; then ranks
/// that disagree on the root.
fn scatter_errors_case<C: Communicator>(world: &C) -> Check {
    let (rank, size) = (world.rank(), world.size());
    let a = generate::uniform::<f64>(20, 20, 2, 4);
    let options = DistOptions::default();
    let root = size - 1;
    let wrong = RowPartition::even(21, size as usize);
    let result = DistCsr::scatter(
        world,
        root,
        (rank == root).then_some(&a),
        Some(&wrong),
        &options,
    );
    let want = Error::Partition {
        rank: root,
        reason: format!("21 rows over {size} ranks given for a matrix of 20 rows on {size} ranks"),
    };
    expect_error(result, &want)?;
    // The root missing on the root.
    let want = Error::InvalidArgument {
        rank: 0,
        reason: "no matrix given on the root".into(),
    };
    expect_error(
        DistCsr::<f64>::scatter(world, 0, None, None, &options),
        &want,
    )?;
    if size > 1 {
        let my_root = i32::from(rank != 0);
        let want = Error::InvalidArgument {
            rank: 0,
            reason: "ranks disagree on the root: from 0 to 1".into(),
        };
        expect_error(
            DistCsr::scatter(world, my_root, Some(&a), None, &options),
            &want,
        )?;
    }
    Ok(())
}

/// The local product fails on one rank (a backend that runs out of memory there): every rank
/// gets that rank's `Compute` error, with the same text. The others multiply through a
/// one-thread CPU context of their own (`spgemm_with`).
fn one_rank_compute_case<C: Communicator>(world: &C) -> Check {
    let (rank, size) = (world.rank(), world.size());
    let options = DistOptions::default();
    let a = generate::uniform::<f64>(60, 60, 4, 5);
    let (da, _) = DistCsr::scatter(world, 0, (rank == 0).then_some(&a), None, &options)
        .map_err(|e| e.to_string())?;
    let cpu: Arc<dyn Backend<f64>> =
        Arc::new(hetsparse::cpu::CpuBackend::with_threads(1).map_err(|e| e.to_string())?);
    // First every rank on its own CPU context: the product is right.
    let ctx = Context::from_backends(&["cpu"], vec![cpu.clone()]).map_err(|e| e.to_string())?;
    let (dc, _) = spgemm_with(world, &da, &da, &ctx, &options).map_err(|e| e.to_string())?;
    let (c, _) = dc.gather(world, 0, &options).map_err(|e| e.to_string())?;
    if let Some(c) = c {
        same_product(
            &c,
            &cpu.spgemm(&a, &a, hetsparse::SpgemmAlgorithm::Auto)
                .map_err(|e| e.to_string())?,
        )?;
    }
    // Then the last rank's backend has no memory.
    let bad = size - 1;
    let backend: Arc<dyn Backend<f64>> = if rank == bad {
        Arc::new(FaultyBackend::new(cpu, Fault::MemoryLimit { bytes: 0 }))
    } else {
        cpu
    };
    let ctx = Context::from_backends(&["cpu"], vec![backend]).map_err(|e| e.to_string())?;
    let message = match spgemm_with(world, &da, &da, &ctx, &options) {
        Err(Error::Compute { rank: r, message }) if r == bad && !message.is_empty() => message,
        other => return Err(format!("{other:?}, expected a Compute error of rank {bad}")),
    };
    // The same text on every rank: its length and a checksum agree.
    let sum = message
        .bytes()
        .fold(0u64, |h, b| h.wrapping_mul(131).wrapping_add(u64::from(b)));
    let mine = [message.len() as u64, sum];
    let mut all = vec![0u64; 2 * size as usize];
    world.all_gather_into(&mine[..], &mut all[..]);
    ensure(all.chunks_exact(2).all(|x| x == mine), || {
        format!("ranks hold different messages: {all:?}")
    })
}

/// Bytes of rows `rows` of `m`, columns `cols` only, as a message of rows.
fn block_bytes<T: MpiScalar>(
    m: &Csr<T>,
    rows: std::ops::Range<u64>,
    cols: std::ops::Range<u64>,
) -> u64 {
    let entries: u64 = (rows.start as usize..rows.end as usize)
        .map(|r| {
            m.row(r)
                .0
                .iter()
                .filter(|&&c| cols.contains(&u64::from(c)))
                .count() as u64
        })
        .sum();
    8 * (rows.end - rows.start) + (4 + T::BYTES as u64) * entries
}

/// Sparse SUMMA on every `pr × pc` grid of the communicator's size: C gathered on `root`
/// against the CPU backend's product, and the bytes broadcast against the volume worked out
/// from the whole operands.
fn summa_case<T: MpiScalar, C: Communicator>(
    world: &C,
    a: &Csr<T>,
    b: &Csr<T>,
    root: i32,
    options: &DistOptions,
) -> Check {
    let (rank, size) = (world.rank(), world.size() as usize);
    let want = Context::<T>::on(&DeviceChoice::Cpu)
        .and_then(|ctx| ctx.spgemm(a, b))
        .map_err(|e| e.to_string())?;
    for pr in (1..=size).filter(|pr| size % pr == 0) {
        let grid = Grid::new(pr, size / pr);
        let on_root = |m| (rank == root).then_some(m);
        let (da, _) = Dist2dCsr::scatter(world, root, on_root(a), grid, options)
            .map_err(|e| e.to_string())?;
        let (db, _) = Dist2dCsr::scatter(world, root, on_root(b), grid, options)
            .map_err(|e| e.to_string())?;
        let (dc, report) = spgemm_summa(world, &da, &db, options).map_err(|e| e.to_string())?;
        // Every piece of the inner dimension: A(i, piece) goes to the other pc - 1 ranks of
        // grid row i, B(piece, j) to the other pr - 1 ranks of grid column j.
        let mut cuts: Vec<u64> = da
            .col_partition()
            .offsets()
            .iter()
            .chain(db.row_partition().offsets())
            .copied()
            .collect();
        cuts.sort_unstable();
        cuts.dedup();
        let stages = cuts.len() as u64 - 1;
        let pc = grid.cols;
        let (mut total, mut mine) = (0u64, 0u64);
        let (i, j) = grid.position(rank as usize);
        for piece in cuts.windows(2) {
            let inner = piece[0]..piece[1];
            let a_owner = da.col_partition().owner(piece[0]).expect("an owner");
            let b_owner = db.row_partition().owner(piece[0]).expect("an owner");
            for gi in 0..pr {
                let bytes = block_bytes(a, da.row_partition().rows(gi), inner.clone());
                total += (pc as u64 - 1) * bytes;
                if gi == i && j != a_owner {
                    mine += bytes;
                }
            }
            for gj in 0..pc {
                let bytes = block_bytes(b, inner.clone(), db.col_partition().rows(gj));
                total += (pr as u64 - 1) * bytes;
                if gj == j && i != b_owner {
                    mine += bytes;
                }
            }
        }
        ensure(report.rows.bytes_received == mine, || {
            format!(
                "{pr}×{pc}: rows received {:?}, expected {mine} bytes",
                report.rows
            )
        })?;
        ensure(report_rows_total(world, &report) == total, || {
            format!(
                "{pr}×{pc}: {} bytes of blocks sent in all, expected {total}",
                report_rows_total(world, &report)
            )
        })?;
        let sizes =
            stages * 8 * (pr * (pc - 1) + pc * (pr - 1)) as u64 + 8 * (size * (size - 1)) as u64;
        ensure(report.total.bytes_sent == total + sizes, || {
            format!(
                "{pr}×{pc}: total {:?}, expected {} bytes",
                report.total,
                total + sizes
            )
        })?;
        let (c, _) = dc.gather(world, root, options).map_err(|e| e.to_string())?;
        ensure(dc.nnz() == want.nnz(), || {
            format!("{pr}×{pc}: C's nnz {} expected {}", dc.nnz(), want.nnz())
        })?;
        if let Some(c) = c {
            same_product(&c, &want).map_err(|e| format!("{pr}×{pc}: {e}"))?;
        }
    }
    Ok(())
}

/// The bytes of blocks every rank sent, summed.
fn report_rows_total<C: Communicator>(world: &C, report: &hetsparse_mpi::CommReport) -> u64 {
    let mut sum = 0u64;
    world.all_reduce_into(&report.rows.bytes_sent, &mut sum, SystemOperation::sum());
    sum
}

/// A grid that does not fit the communicator: the same error on every rank.
fn bad_grid_case<C: Communicator>(world: &C) -> Check {
    let size = world.size() as usize;
    let a = generate::uniform::<f64>(10, 10, 2, 3);
    let result = Dist2dCsr::scatter(
        world,
        0,
        (world.rank() == 0).then_some(&a),
        Grid::new(size + 1, 1),
        &DistOptions::default(),
    );
    let want = Error::InvalidArgument {
        rank: 0,
        reason: format!("a {}×1 grid for {size} ranks", size + 1),
    };
    expect_error(result, &want)
}

fn main() -> ExitCode {
    let Some(universe) = hetsparse_mpi::mpi::initialize() else {
        eprintln!("MPI was already initialised");
        return ExitCode::FAILURE;
    };
    let world = universe.world();
    let (rank, size) = (world.rank(), world.size());
    let options = DistOptions::default();
    // Small messages: every buffer goes in many pieces.
    let small = DistOptions {
        max_message_bytes: 200,
    };
    let uneven = |n: u64| {
        // Rank 0 owns nothing, the last rank half the rows.
        let p = size as u64;
        let mut counts = vec![0u64; p as usize];
        if p == 1 {
            counts[0] = n;
        } else {
            counts[p as usize - 1] = n / 2;
            let rest = n - n / 2;
            for (i, c) in counts[1..p as usize].iter_mut().enumerate() {
                *c += rest / (p - 1) + u64::from((i as u64) < rest % (p - 1));
            }
        }
        RowPartition::from_counts(&counts)
    };
    let last = size - 1;

    let rmat = generate::rmat::<f64>(10, 8, 11);
    let uniform = generate::uniform::<f64>(700, 700, 7, 12);
    let stencil = generate::stencil_3d::<f64>(9, Stencil::TwentySeven, 1, 13);
    let lp = generate::lp_rectangular::<f64>(80, 1200, 3, 14);
    let lp_t = lp.transpose().expect("a transpose");
    let rect_a = generate::uniform::<f64>(300, 500, 5, 15);
    let rect_b = generate::uniform::<f64>(500, 200, 4, 16);
    let complex = generate::rmat::<Complex<f64>>(8, 6, 17);
    // Few entries over many columns: the column set is sorted indices, not a bit set.
    let hyper_a = generate::uniform::<f64>(120, 300_000, 2, 18);
    let hyper_b = generate::uniform::<f64>(300_000, 40, 1, 19);

    let cases: Vec<Case> = vec![
        (
            "power-law R-MAT A·A",
            Box::new(|| product_case(&world, &rmat, &rmat, None, 0, &options)),
        ),
        (
            "power-law R-MAT A·A, small messages, uneven B",
            Box::new(|| {
                product_case(
                    &world,
                    &rmat,
                    &rmat,
                    Some(&uneven(rmat.nrows() as u64)),
                    last,
                    &small,
                )
            }),
        ),
        (
            "uniform A·A",
            Box::new(|| product_case(&world, &uniform, &uniform, None, last, &options)),
        ),
        (
            "3D stencil A·A",
            Box::new(|| {
                product_case(
                    &world,
                    &stencil,
                    &stencil,
                    Some(&uneven(stencil.nrows() as u64)),
                    0,
                    &options,
                )
            }),
        ),
        (
            "rectangular A·Aᵀ",
            Box::new(|| product_case(&world, &lp, &lp_t, None, 0, &small)),
        ),
        (
            "rectangular Aᵀ·A",
            Box::new(|| product_case(&world, &lp_t, &lp, None, last, &options)),
        ),
        (
            "rectangular A·B",
            Box::new(|| product_case(&world, &rect_a, &rect_b, None, 0, &options)),
        ),
        (
            "complex R-MAT A·A",
            Box::new(|| product_case(&world, &complex, &complex, None, 0, &small)),
        ),
        (
            "hypersparse A·B over 300000 columns",
            Box::new(|| product_case(&world, &hyper_a, &hyper_b, None, 0, &options)),
        ),
        (
            "blocks from each rank's own rows",
            Box::new(|| local_rows_case(&world)),
        ),
        (
            "2D Sparse SUMMA: R-MAT A·A on every grid",
            Box::new(|| summa_case(&world, &rmat, &rmat, 0, &options)),
        ),
        (
            "2D Sparse SUMMA: rectangular A·Aᵀ, small messages",
            Box::new(|| summa_case(&world, &lp, &lp_t, last, &small)),
        ),
        (
            "2D Sparse SUMMA: 3D stencil and rectangular A·B",
            Box::new(|| {
                summa_case(&world, &stencil, &stencil, 0, &options)?;
                summa_case(&world, &rect_a, &rect_b, last, &options)
            }),
        ),
        (
            "error: a grid of the wrong size",
            Box::new(|| bad_grid_case(&world)),
        ),
        (
            "error: shape mismatch",
            Box::new(|| shape_mismatch_case(&world)),
        ),
        (
            "error: one rank's block malformed",
            Box::new(|| bad_block_case(&world)),
        ),
        (
            "error: one rank's option out of range",
            Box::new(|| one_rank_option_case(&world)),
        ),
        (
            "error: one rank's local product fails",
            Box::new(|| one_rank_compute_case(&world)),
        ),
        (
            "error: scatter's partition and root",
            Box::new(|| scatter_errors_case(&world)),
        ),
    ];
    let mut failed = 0i32;
    for (name, case) in &cases {
        let start = std::time::Instant::now();
        let outcome = case();
        let mine = i32::from(outcome.is_err());
        let mut failing = 0i32;
        world.all_reduce_into(&mine, &mut failing, SystemOperation::sum());
        if let Err(e) = outcome {
            eprintln!("rank {rank}/{size}: {name}: FAILED: {e}");
        }
        if rank == 0 {
            let verdict = if failing == 0 { "ok" } else { "FAILED" };
            eprintln!(
                "{name} ... {verdict} ({:.2} s)",
                start.elapsed().as_secs_f64()
            );
        }
        failed += i32::from(failing > 0);
    }
    if rank == 0 {
        if failed == 0 {
            println!(
                "hetsparse-mpi distributed: {} cases passed on {size} ranks",
                cases.len()
            );
        } else {
            println!(
                "hetsparse-mpi distributed: {failed} of {} cases FAILED on {size} ranks",
                cases.len()
            );
        }
    }
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
