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
    choose_algorithm_by_time, measure_machine, model_volume, spgemm, spgemm_summa, spgemm_summa3d,
    spgemm_summa3d_batched, spgemm_summa3d_with, spgemm_with, summa3d_batches_for_memory,
    Algorithm, Dist2dCsr, Dist3dCsr, DistCsr, DistOptions, Error, Grid, Grid3, Layout3, MpiScalar,
    ProductStats, RowPartition,
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

/// A context on `cpu`, except on rank `bad`, whose backend has no memory: every product there
/// fails.
fn failing_on<C: Communicator>(
    world: &C,
    bad: i32,
    cpu: Arc<dyn Backend<f64>>,
) -> Result<Context<f64>, String> {
    let backend: Arc<dyn Backend<f64>> = if world.rank() == bad {
        Arc::new(FaultyBackend::new(cpu, Fault::MemoryLimit { bytes: 0 }))
    } else {
        cpu
    };
    Context::from_backends(&["cpu"], vec![backend]).map_err(|e| e.to_string())
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
    let ctx = failing_on(world, bad, cpu)?;
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
    summa_layout_case(world, a, b, root, options, false)
}

/// `n` over `parts` unevenly: the first part empty (with two parts or more), the others
/// growing with their number.
fn skewed(n: u64, parts: usize) -> RowPartition {
    if parts == 1 {
        return RowPartition::from_counts(&[n]);
    }
    let weights: u64 = (1..parts as u64).sum();
    let mut counts: Vec<u64> = (0..parts as u64).map(|r| n * r / weights).collect();
    counts[parts - 1] += n - counts.iter().sum::<u64>();
    RowPartition::from_counts(&counts)
}

/// [`summa_case`] with even blocks, or (`uneven`) A scattered with skewed boundaries and B
/// made of blocks each rank cuts for itself with other skewed boundaries.
fn summa_layout_case<T: MpiScalar, C: Communicator>(
    world: &C,
    a: &Csr<T>,
    b: &Csr<T>,
    root: i32,
    options: &DistOptions,
    uneven: bool,
) -> Check {
    let (rank, size) = (world.rank(), world.size() as usize);
    let want = Context::<T>::on(&DeviceChoice::Cpu)
        .and_then(|ctx| ctx.spgemm(a, b))
        .map_err(|e| e.to_string())?;
    for pr in (1..=size).filter(|pr| size % pr == 0) {
        let grid = Grid::new(pr, size / pr);
        let on_root = |m| (rank == root).then_some(m);
        let (da, db) = if uneven {
            let (a_rows, a_cols) = (
                skewed(a.nrows() as u64, pr),
                skewed(a.ncols() as u64, size / pr),
            );
            let (da, _) = Dist2dCsr::scatter_blocks(
                world,
                root,
                on_root(a),
                grid,
                Some(&a_rows),
                Some(&a_cols),
                options,
            )
            .map_err(|e| e.to_string())?;
            ensure(
                da.row_partition() == &a_rows && da.col_partition() == &a_cols,
                || "A's boundaries were not kept".into(),
            )?;
            // B's rows split the other way round: the last part empty.
            let counts: Vec<u64> = (0..pr)
                .map(|i| {
                    let r = skewed(b.nrows() as u64, pr).rows(pr - 1 - i);
                    r.end - r.start
                })
                .collect();
            let b_rows = RowPartition::from_counts(&counts);
            let b_cols = skewed(b.ncols() as u64, size / pr);
            let (i, j) = grid.position(rank as usize);
            let (r, c) = (b_rows.rows(i), b_cols.rows(j));
            let mine = b
                .rows(r.start as usize..r.end as usize)
                .and_then(|m| m.column_panel(c.start as usize..c.end as usize))
                .map_err(|e| e.to_string())?;
            let (db, _) =
                Dist2dCsr::from_local_blocks(world, grid, mine).map_err(|e| e.to_string())?;
            ensure(
                db.row_partition() == &b_rows && db.col_partition() == &b_cols,
                || "B's boundaries were not found".into(),
            )?;
            (da, db)
        } else {
            let (da, _) = Dist2dCsr::scatter(world, root, on_root(a), grid, options)
                .map_err(|e| e.to_string())?;
            let (db, _) = Dist2dCsr::scatter(world, root, on_root(b), grid, options)
                .map_err(|e| e.to_string())?;
            (da, db)
        };
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
        if !uneven {
            // The model is exact for even blocks.
            let model = model_volume(&ProductStats::of(a, b), Algorithm::Summa2d(grid));
            ensure(model == report.total.bytes_sent as f64, || {
                format!(
                    "{pr}×{pc}: the model says {model} bytes, {:?} moved",
                    report.total
                )
            })?;
        }
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

/// A directory every rank can reach: rank 0 makes it and broadcasts its path.
fn shared_dir<C: Communicator>(world: &C) -> Result<std::path::PathBuf, String> {
    let mut bytes = Vec::new();
    let mut ok = 1i32;
    if world.rank() == 0 {
        let dir = std::env::temp_dir().join(format!("hetsparse-mpi-test-{}", std::process::id()));
        match std::fs::create_dir_all(&dir) {
            Ok(()) => bytes = dir.to_string_lossy().into_owned().into_bytes(),
            Err(_) => ok = 0,
        }
    }
    let root = world.process_at_rank(0);
    root.broadcast_into(&mut ok);
    if ok == 0 {
        return Err("rank 0 could not make a temporary directory".into());
    }
    let mut len = bytes.len() as u64;
    root.broadcast_into(&mut len);
    bytes.resize(len as usize, 0);
    root.broadcast_into(&mut bytes[..]);
    String::from_utf8(bytes)
        .map(std::path::PathBuf::from)
        .map_err(|e| e.to_string())
}

/// Rank 0 writes `text` to `path`; every rank waits for it.
fn put_file<C: Communicator>(world: &C, path: &std::path::Path, text: &[u8]) -> Check {
    let mut ok = 1i32;
    if world.rank() == 0 && std::fs::write(path, text).is_err() {
        ok = 0;
    }
    world.process_at_rank(0).broadcast_into(&mut ok);
    ensure(ok == 1, || {
        format!("rank 0 could not write {}", path.display())
    })
}

/// Reads `text` (written by rank 0 to `name` in `dir`) collectively, gathers it on rank 0 and
/// compares it there with the single-process reader's matrix; checks the report's entry
/// traffic against the entries that left each rank's byte range.
fn read_case<T: MpiScalar, C: Communicator>(
    world: &C,
    dir: &std::path::Path,
    name: &str,
    text: &[u8],
    options: &DistOptions,
) -> Check {
    let path = dir.join(name);
    put_file(world, &path, text)?;
    let (d, report) = DistCsr::<T>::read_matrix_market(world, &path, options)
        .map_err(|e| format!("{name}: {e}"))?;
    ensure(
        report.total.bytes_sent == report.total.bytes_received,
        || format!("{name}: sent and received differ: {:?}", report.total),
    )?;
    ensure(report.rows.bytes_sent % (8 + T::BYTES as u64) == 0, || {
        format!("{name}: {:?} is not whole entries", report.rows)
    })?;
    let (whole, _) = d.gather(world, 0, options).map_err(|e| e.to_string())?;
    if let Some(got) = whole {
        let want: Csr<T> = hetsparse::matrix_market::read_csr_path(&path)
            .map_err(|e| format!("{name}: the single-process reader: {e}"))?;
        same_product(&got, &want).map_err(|e| format!("{name}: {e}"))?;
        ensure(d.nnz() == want.nnz(), || format!("{name}: nnz per rank"))?;
    }
    Ok(())
}

/// `text` with comment lines, blank lines and CRLF line ends mixed into its entries.
fn roughen(text: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len() * 2);
    for (k, line) in text.split_inclusive(|&c| c == b'\n').enumerate() {
        if k > 3 && k % 97 == 0 {
            out.extend_from_slice(b"% a comment among the entries\n\n   \n");
        }
        if k > 3 && k % 5 == 0 && line.ends_with(b"\n") {
            out.extend_from_slice(&line[..line.len() - 1]);
            out.extend_from_slice(b"  \r\n");
        } else {
            out.extend_from_slice(line);
        }
    }
    out
}

/// Collective Matrix Market reading against the single-process reader, and writing read back.
fn matrix_market_case<C: Communicator>(world: &C) -> Check {
    let dir = shared_dir(world)?;
    let options = DistOptions::default();
    let small = DistOptions {
        max_message_bytes: 100,
    };
    let rmat = generate::rmat::<f64>(9, 6, 21);
    let mut general = Vec::new();
    hetsparse::matrix_market::write_sparse(&mut general, &rmat).map_err(|e| e.to_string())?;
    read_case::<f64, _>(world, &dir, "general.mtx", &general, &options)?;
    read_case::<f64, _>(world, &dir, "rough.mtx", &roughen(&general), &small)?;
    read_case::<f32, _>(world, &dir, "general32.mtx", &general, &options)?;
    // Symmetric: the lower triangle of a stencil (integer values, one repeated entry).
    let stencil = generate::stencil_3d::<f64>(5, Stencil::Seven, 1, 22);
    let mut lower = String::new();
    let mut count = 0;
    for i in 0..stencil.nrows() {
        for &c in stencil.row(i).0 {
            if c as usize <= i {
                lower.push_str(&format!(
                    "{} {} {}\n",
                    i + 1,
                    c + 1,
                    (i * 7 + c as usize) % 13
                ));
                count += 1;
            }
        }
    }
    lower.push_str("3 2 -4\n");
    count += 1;
    let symmetric = format!(
        "%%MatrixMarket matrix coordinate integer symmetric\n% lower triangle\n{n} {n} {count}\n{lower}",
        n = stencil.nrows()
    );
    read_case::<f64, _>(world, &dir, "symmetric.mtx", symmetric.as_bytes(), &options)?;
    // Pattern, rectangular, fewer lines than ranks, no newline at the end.
    let pattern = b"%%MatrixMarket matrix coordinate pattern general\n3 5 2\n1 5\n3 1";
    read_case::<f64, _>(world, &dir, "pattern.mtx", pattern, &options)?;
    let empty = b"%%MatrixMarket matrix coordinate real general\n4 4 0\n";
    read_case::<f64, _>(world, &dir, "empty.mtx", empty, &options)?;
    let skew = b"%%MatrixMarket matrix coordinate real skew-symmetric\n3 3 2\n2 1 1.5\n3 2 -2e-3\n";
    read_case::<f64, _>(world, &dir, "skew.mtx", skew, &options)?;
    let complex = b"%%MatrixMarket matrix coordinate complex hermitian\n3 3 3\n1 1 2 0\n2 1 1.5 -1\n3 2 0 2\n";
    read_case::<Complex<f64>, _>(world, &dir, "hermitian.mtx", complex, &options)?;

    // Written collectively, read back by the single-process reader: the same matrix.
    let lp = generate::lp_rectangular::<f64>(60, 700, 3, 23);
    let (d, _) = DistCsr::scatter(world, 0, (world.rank() == 0).then_some(&lp), None, &options)
        .map_err(|e| e.to_string())?;
    let written = dir.join("written.mtx");
    d.write_matrix_market(world, &written)
        .map_err(|e| e.to_string())?;
    if world.rank() == 0 {
        let back: Csr<f64> =
            hetsparse::matrix_market::read_csr_path(&written).map_err(|e| e.to_string())?;
        ensure(back == lp, || {
            "the written file does not read back as A".into()
        })?;
    }
    // And read back collectively, over the partition it was written from.
    let (again, _) =
        DistCsr::<f64>::read_matrix_market(world, &written, &options).map_err(|e| e.to_string())?;
    ensure(again.local() == d.local(), || {
        "reading the written file gives other blocks".into()
    })?;
    let c = generate::rmat::<Complex<f64>>(6, 4, 24);
    let (dc, _) = DistCsr::scatter(world, 0, (world.rank() == 0).then_some(&c), None, &options)
        .map_err(|e| e.to_string())?;
    dc.write_matrix_market(world, dir.join("complex.mtx"))
        .map_err(|e| e.to_string())?;
    if world.rank() == 0 {
        let back: Csr<Complex<f64>> =
            hetsparse::matrix_market::read_csr_path(dir.join("complex.mtx"))
                .map_err(|e| e.to_string())?;
        ensure(back == c, || "the complex file does not read back".into())?;
    }

    // Gzip: written collectively as members (small pieces of rank 0's header and every
    // rank's lines), it decompresses to the plain writer's text, reads back with the
    // single-process reader, and is read collectively (rank 0 reads, then scatters).
    let gz = dir.join("written.mtx.gz");
    d.write_matrix_market_gzip(world, &gz)
        .map_err(|e| e.to_string())?;
    if world.rank() == 0 {
        use std::io::Read;
        let mut text = Vec::new();
        let file = std::fs::File::open(&gz).map_err(|e| e.to_string())?;
        flate2::read::MultiGzDecoder::new(file)
            .read_to_end(&mut text)
            .map_err(|e| format!("decompressing the gzip file: {e}"))?;
        let plain = std::fs::read(&written).map_err(|e| e.to_string())?;
        ensure(text == plain, || {
            "the gzip file's text is not the plain writer's".into()
        })?;
        let back: Csr<f64> =
            hetsparse::matrix_market::read_csr_path(&gz).map_err(|e| e.to_string())?;
        ensure(back == lp, || {
            "the gzip file does not read back as A".into()
        })?;
    }
    let (again, report) =
        DistCsr::<f64>::read_matrix_market(world, &gz, &options).map_err(|e| e.to_string())?;
    ensure(again.local() == d.local(), || {
        "reading the gzip file collectively gives other blocks".into()
    })?;
    ensure(
        report.total.bytes_sent == report.total.bytes_received
            && (world.size() == 1 || report.sizes.bytes_sent + report.sizes.bytes_received > 0),
        || format!("the gzip read's report: {report:?}"),
    )?;
    // A malformed gzip file is rank 0's error on every rank, naming the line.
    let mut bad_gz = Vec::new();
    {
        use std::io::Write;
        let mut e = flate2::write::GzEncoder::new(&mut bad_gz, flate2::Compression::fast());
        e.write_all(b"%%MatrixMarket matrix coordinate real general\n2 2 1\n1 x 1\n")
            .and_then(|_| e.finish().map(|_| ()))
            .map_err(|e| e.to_string())?;
    }
    let bad_path = dir.join("bad.mtx.gz");
    put_file(world, &bad_path, &bad_gz)?;
    match DistCsr::<f64>::read_matrix_market(world, &bad_path, &options) {
        Err(Error::MatrixMarket {
            rank: 0,
            line: Some(3),
            ..
        }) => {}
        other => return Err(format!("{other:?}, expected rank 0's error at line 3")),
    }

    // Errors: the same on every rank, naming the line.
    let expect_mm = |name: &str, text: &[u8], line: Option<u64>, words: &str| -> Check {
        let path = dir.join(name);
        put_file(world, &path, text)?;
        match DistCsr::<f64>::read_matrix_market(world, &path, &options) {
            Err(Error::MatrixMarket {
                line: l, reason, ..
            }) if l == line && reason.contains(words) => Ok(()),
            other => Err(format!(
                "{name}: {other:?}, expected a Matrix Market error at line {line:?} saying `{words}`"
            )),
        }
    };
    let mut bad = general.clone();
    // Line 40 (the file has a banner, a comment and a size line before its entries).
    let at = bad
        .split_inclusive(|&c| c == b'\n')
        .take(39)
        .map(|l| l.len())
        .sum::<usize>();
    bad.splice(at..at, b"7 x 1.0\n".iter().copied());
    let more = format!("{} entries", rmat.nnz());
    let _ = more;
    expect_mm("bad-line.mtx", &bad, Some(40), "expected a column index")?;
    expect_mm(
        "bad-index.mtx",
        b"%%MatrixMarket matrix coordinate real general\n%\n3 3 2\n1 1 1\n\n4 1 1\n",
        Some(6),
        "row index 4 is out of range",
    )?;
    expect_mm(
        "fewer.mtx",
        b"%%MatrixMarket matrix coordinate real general\n3 3 3\n1 1 1\n2 2 2\n",
        Some(5),
        "fewer entries",
    )?;
    expect_mm(
        "more.mtx",
        b"%%MatrixMarket matrix coordinate real general\n3 3 2\n1 1 1\n2 2 2\n3 3 3\n1 2 4\n",
        Some(5),
        "more entries",
    )?;
    expect_mm(
        "array.mtx",
        b"%%MatrixMarket matrix array real general\n2 2\n1\n2\n3\n4\n",
        Some(1),
        "only `coordinate`",
    )?;
    expect_mm(
        "banner.mtx",
        b"%%MatrixMarket matrix coordinate real weird\n3 3 0\n",
        Some(1),
        "",
    )?;
    expect_mm(
        "short.mtx",
        b"%%MatrixMarket matrix coordinate real general\n% only\n",
        Some(3),
        "ends before its size line",
    )?;
    match DistCsr::<f64>::read_matrix_market(world, dir.join("missing.mtx"), &options) {
        Err(Error::Io { rank: 0, reason }) if reason.contains("missing.mtx") => {}
        other => return Err(format!("{other:?}, expected rank 0's Io error")),
    }
    world.barrier();
    if world.rank() == 0 {
        let _ = std::fs::remove_dir_all(&dir);
    }
    Ok(())
}

/// `Aᵀ` distributed against the single-process transpose, over even rows and an uneven
/// partition (the ranks' blocks of A and of Aᵀ cut differently); every entry moves once.
fn transpose_case<T: MpiScalar, C: Communicator>(
    world: &C,
    a: &Csr<T>,
    rows_of_at: Option<&RowPartition>,
    options: &DistOptions,
) -> Check {
    let (d, _) = DistCsr::scatter(world, 0, (world.rank() == 0).then_some(a), None, options)
        .map_err(|e| e.to_string())?;
    let (t, report) = d
        .transpose(world, rows_of_at, options)
        .map_err(|e| e.to_string())?;
    ensure(t.shape() == (a.ncols() as u64, a.nrows() as u64), || {
        format!("Aᵀ is {:?}", t.shape())
    })?;
    if let Some(p) = rows_of_at {
        ensure(t.partition() == p, || "Aᵀ is not in the rows asked".into())?;
    }
    ensure(
        report.total.bytes_sent == report.total.bytes_received,
        || format!("sent and received differ: {:?}", report.total),
    )?;
    // Entries that stay on their rank do not travel: the rows sent are those whose row of Aᵀ
    // (column of A) another rank owns.
    let want = a.transpose().map_err(|e| e.to_string())?;
    let me = world.rank() as usize;
    let mine = d.partition().rows(me);
    let leaving: u64 = (mine.start as usize..mine.end as usize)
        .flat_map(|i| a.row(i).0.iter())
        .filter(|&&c| !t.partition().rows(me).contains(&u64::from(c)))
        .count() as u64;
    ensure(
        report.local.bytes_sent >= leaving * (4 + T::BYTES as u64),
        || {
            format!(
                "{leaving} entries leave this rank, but it sent {} bytes",
                report.local.bytes_sent
            )
        },
    )?;
    let (whole, _) = t.gather(world, 0, options).map_err(|e| e.to_string())?;
    if let Some(got) = whole {
        ensure(got == want, || "Aᵀ differs from the transpose".into())?;
    }
    Ok(())
}

/// Bytes of rows `rows` of `m`, columns in `cols` only, as a message of rows.
fn block_bytes_in<T: MpiScalar>(
    m: &Csr<T>,
    rows: std::ops::Range<u64>,
    cols: &[std::ops::Range<u64>],
) -> u64 {
    let entries: u64 = (rows.start as usize..rows.end as usize)
        .map(|r| {
            m.row(r)
                .0
                .iter()
                .filter(|&&c| cols.iter().any(|s| s.contains(&u64::from(c))))
                .count() as u64
        })
        .sum();
    8 * (rows.end - rows.start) + (4 + T::BYTES as u64) * entries
}

/// Rows `rows`, columns `cols` of `m`.
fn sub_matrix<T: MpiScalar>(
    m: &Csr<T>,
    rows: std::ops::Range<u64>,
    cols: std::ops::Range<u64>,
) -> Result<Csr<T>, String> {
    m.rows(rows.start as usize..rows.end as usize)
        .and_then(|b| b.column_panel(cols.start as usize..cols.end as usize))
        .map_err(|e| e.to_string())
}

/// Batch `t` of `batches` of `r`.
fn batch_of(r: std::ops::Range<u64>, t: usize, batches: usize) -> std::ops::Range<u64> {
    let sub = RowPartition::even(r.end - r.start, batches).rows(t);
    r.start + sub.start..r.start + sub.end
}

/// What 3D SUMMA on `grid` in `batches` batches must move in all: (bytes of blocks, bytes of
/// sizes), worked out from the whole operands.
fn summa3d_volume<T: MpiScalar>(
    a: &Csr<T>,
    b: &Csr<T>,
    grid: Grid3,
    batches: usize,
) -> Result<(u64, u64), String> {
    let (pr, pc, c) = (grid.rows, grid.cols, grid.layers);
    let (per, p) = ((pr * pc) as u64, (pr * pc * c) as u64);
    let s = T::BYTES as u64;
    let ctx = Context::<T>::on(&DeviceChoice::Cpu).map_err(|e| e.to_string())?;
    let slices = RowPartition::even(a.ncols() as u64, c);
    let c_rows = RowPartition::even(a.nrows() as u64, pr);
    let b_cols = RowPartition::even(b.ncols() as u64, pc);
    // Column part (j, l) of C: part l of block j split in c.
    let piece = |j: usize, l: usize| batch_of(b_cols.rows(j), l, c);
    let (mut blocks, mut sizes) = (0u64, 0u64);
    for t in 0..batches {
        let colsets: Vec<Vec<std::ops::Range<u64>>> = (0..pc)
            .map(|j| (0..c).map(|l| batch_of(piece(j, l), t, batches)).collect())
            .collect();
        for l in 0..c {
            let k = slices.rows(l);
            let shift = |o: &u64| o + k.start;
            let mut cuts: Vec<u64> = RowPartition::even(k.end - k.start, pc)
                .offsets()
                .iter()
                .chain(RowPartition::even(k.end - k.start, pr).offsets())
                .map(shift)
                .collect();
            cuts.sort_unstable();
            cuts.dedup();
            for w in cuts.windows(2) {
                for gi in 0..pr {
                    blocks += (pc as u64 - 1) * block_bytes(a, c_rows.rows(gi), w[0]..w[1]);
                }
                for set in &colsets {
                    blocks += (pr as u64 - 1) * block_bytes_in(b, w[0]..w[1], set);
                }
            }
            let stages = cuts.len() as u64 - 1;
            sizes += stages * 8 * (pr * (pc - 1) + pc * (pr - 1)) as u64 + 8 * per * (per - 1);
            // Layer l's partial block (i, j) sends the columns of every other layer there.
            for gi in 0..pr {
                let a_part = sub_matrix(a, c_rows.rows(gi), k.clone())?;
                for set in &colsets {
                    for (to, cols) in set.iter().enumerate() {
                        if to == l {
                            continue;
                        }
                        let b_part = sub_matrix(b, k.clone(), cols.clone())?;
                        let nnz = ctx
                            .spgemm(&a_part, &b_part)
                            .map_err(|e| e.to_string())?
                            .nnz();
                        let r = c_rows.rows(gi);
                        blocks += 8 * (r.end - r.start) + (4 + s) * nnz;
                    }
                }
            }
        }
        sizes += 8 * p * (c as u64 - 1);
    }
    Ok((blocks, sizes))
}

/// 3D SUMMA on every `pr × pc × c` grid of the communicator's size with `c` of 1, 2 and P,
/// in 1 batch, and in 3 on the grids with `pr = 1`: C gathered on `root` against the CPU backend's product, the bytes
/// moved against the volume worked out from the whole operands, and the batches handed to a
/// callback against the blocks of the product.
fn summa3d_case<T: MpiScalar, C: Communicator>(
    world: &C,
    a: &Csr<T>,
    b: &Csr<T>,
    root: i32,
    options: &DistOptions,
) -> Check {
    let (rank, size) = (world.rank(), world.size() as usize);
    let ctx = Context::<T>::on(&DeviceChoice::Cpu).map_err(|e| e.to_string())?;
    let want = ctx.spgemm(a, b).map_err(|e| e.to_string())?;
    let mut layer_counts = vec![1usize, 2, size];
    layer_counts.sort_unstable();
    layer_counts.dedup();
    for layers in layer_counts.into_iter().filter(|c| size % c == 0) {
        let per = size / layers;
        for pr in (1..=per).filter(|pr| per % pr == 0) {
            let grid = Grid3::new(pr, per / pr, layers);
            let name = format!("{}×{}×{layers}", grid.rows, grid.cols);
            let on_root = |m| (rank == root).then_some(m);
            let (da, _) = Dist3dCsr::scatter(
                world,
                root,
                on_root(a),
                grid,
                Layout3::ColumnLayers,
                options,
            )
            .map_err(|e| format!("{name}: {e}"))?;
            let (db, _) =
                Dist3dCsr::scatter(world, root, on_root(b), grid, Layout3::RowLayers, options)
                    .map_err(|e| format!("{name}: {e}"))?;
            // Three batches on one grid of each layer count (pr = 1), one on the others: the
            // suite runs oversubscribed, and every batch is a round of collectives.
            let counts: &[usize] = if pr == 1 { &[1, 3] } else { &[1] };
            for &batches in counts {
                let name = format!("{name} in {batches} batches");
                let (dc, report) = spgemm_summa3d_with(world, &da, &db, batches, &ctx, options)
                    .map_err(|e| format!("{name}: {e}"))?;
                let (blocks, sizes) = summa3d_volume(a, b, grid, batches)?;
                let sizes = sizes + 8 * (size * (size - 1)) as u64;
                if batches == 1 && layers == 1 {
                    // One layer: the model is 2D SUMMA's, exact.
                    let model = model_volume(&ProductStats::of(a, b), Algorithm::Summa3d(grid));
                    ensure(model == report.total.bytes_sent as f64, || {
                        format!(
                            "{name}: the model says {model} bytes, {:?} moved",
                            report.total
                        )
                    })?;
                }
                let moved = report_rows_total(world, &report);
                ensure(moved == blocks, || {
                    format!("{name}: {moved} bytes of blocks sent in all, expected {blocks}")
                })?;
                ensure(report.total.bytes_sent == blocks + sizes, || {
                    format!(
                        "{name}: total {:?}, expected {} bytes",
                        report.total,
                        blocks + sizes
                    )
                })?;
                ensure(dc.nnz() == want.nnz(), || {
                    format!("{name}: C's nnz {} expected {}", dc.nnz(), want.nnz())
                })?;
                let (c, _) = dc.gather(world, root, options).map_err(|e| e.to_string())?;
                if let Some(c) = c {
                    same_product(&c, &want).map_err(|e| format!("{name}: {e}"))?;
                }
            }
            // A budget of the whole product's multiplications needs one batch; a quarter of
            // the busiest rank's estimate, four (or fewer, rounding).
            let flops: u64 = (0..a.nrows())
                .flat_map(|r| a.row(r).0.iter())
                .map(|&k| b.row_nnz(k as usize))
                .sum();
            let one = summa3d_batches_for_memory(
                world,
                &da,
                &db,
                2 * (4 + T::BYTES as u64) * flops.max(1),
            )
            .map_err(|e| format!("{name}: {e}"))?;
            ensure(one == 1, || {
                format!("{name}: {one} batches for the whole product")
            })?;
            let tiny = summa3d_batches_for_memory(world, &da, &db, 1).map_err(|e| e.to_string())?;
            let quarter = summa3d_batches_for_memory(world, &da, &db, (tiny as u64).div_ceil(4))
                .map_err(|e| e.to_string())?;
            let expected = (tiny as u64).div_ceil((tiny as u64).div_ceil(4));
            ensure(quarter as u64 == expected && tiny > 1, || {
                format!("{name}: {quarter} batches for a quarter of {tiny} bytes")
            })?;
            // The batches handed over one by one (on one grid of each layer count): each is
            // its block of the product.
            if pr != 1 {
                continue;
            }
            let mut seen = Vec::new();
            let mut check = Ok(());
            spgemm_summa3d_batched(world, &da, &db, 3, &ctx, options, |batch| {
                seen.push(batch.index);
                if check.is_ok() {
                    check = sub_matrix(&want, batch.rows.clone(), batch.cols.clone())
                        .and_then(|w| same_product(&batch.block, &w))
                        .map_err(|e| format!("{name}: batch {}: {e}", batch.index));
                }
                Ok(())
            })
            .map_err(|e| format!("{name}: {e}"))?;
            check?;
            ensure(seen == [0, 1, 2], || format!("{name}: batches {seen:?}"))?;
        }
    }
    Ok(())
}

/// 3D errors: a grid of the wrong size, operands in the wrong layouts, and a callback failing
/// on the last rank: the same error on every rank, and no batch after it.
fn summa3d_errors_case<C: Communicator>(world: &C) -> Check {
    let (rank, size) = (world.rank(), world.size() as usize);
    let options = DistOptions::default();
    let a = generate::uniform::<f64>(30, 20, 3, 31);
    let on_root = |m| (rank == 0).then_some(m);
    let want = Error::InvalidArgument {
        rank: 0,
        reason: format!("a 1×1×{} grid for {size} ranks", size + 1),
    };
    expect_error(
        Dist3dCsr::scatter(
            world,
            0,
            on_root(&a),
            Grid3::new(1, 1, size + 1),
            Layout3::RowLayers,
            &options,
        ),
        &want,
    )?;
    let grid = Grid3::new(1, 1, size);
    let (da, _) = Dist3dCsr::scatter(world, 0, on_root(&a), grid, Layout3::ColumnLayers, &options)
        .map_err(|e| e.to_string())?;
    let want = Error::InvalidArgument {
        rank: 0,
        reason: "A in ColumnLayers and B in ColumnLayers: 3D SUMMA takes A in ColumnLayers and \
                 B in RowLayers"
            .into(),
    };
    expect_error(spgemm_summa3d(world, &da, &da, &options), &want)?;
    let at = generate::uniform::<f64>(20, 30, 3, 32);
    let (db, _) = Dist3dCsr::scatter(world, 0, on_root(&at), grid, Layout3::RowLayers, &options)
        .map_err(|e| e.to_string())?;
    let ctx = Context::<f64>::on(&DeviceChoice::Cpu).map_err(|e| e.to_string())?;
    let last = world.size() - 1;
    let mut calls = 0;
    let result = spgemm_summa3d_batched(world, &da, &db, 3, &ctx, &options, |batch| {
        calls += 1;
        if batch.index == 1 && rank == last {
            Err("disk full".to_string())
        } else {
            Ok(())
        }
    });
    let want = Error::Callback {
        rank: last,
        message: "disk full".into(),
    };
    expect_error(result, &want)?;
    ensure(calls == 2, || {
        format!("{calls} batches handed over, expected 2")
    })
}

/// Blocks whose shapes do not line up along the grid: every rank names the first bad one.
fn bad_local_blocks_case<C: Communicator>(world: &C) -> Check {
    let (rank, size) = (world.rank(), world.size());
    let grid = Grid::new(1, size as usize);
    let rows = if rank == size - 1 && size > 1 { 4 } else { 5 };
    let local = generate::uniform::<f64>(rows, 3, 1, rank as u64);
    let result = Dist2dCsr::from_local_blocks(world, grid, local);
    if size == 1 {
        return ensure(result.is_ok(), || "one rank's block refused".into());
    }
    let want = Error::InvalidBlock {
        rank: size - 1,
        reason: format!(
            "its block is 4×3; grid row 0 has blocks of 5 rows, grid column {} of 3 columns",
            size - 1
        ),
    };
    expect_error(result, &want)
}

/// The volume model against what moved, for uniformly random operands (the model's
/// assumption): 1D and 3D within 20%, and the statistics gathered from distributed operands
/// equal to those of the whole ones; the choice lists every layout, least volume first.
fn model_case<C: Communicator>(world: &C, a: &Csr<f64>, b: &Csr<f64>) -> Check {
    let (rank, size) = (world.rank(), world.size() as usize);
    let options = DistOptions::default();
    let stats = ProductStats::of(a, b);
    let on_root = |m| (rank == 0).then_some(m);
    let (da, _) =
        DistCsr::scatter(world, 0, on_root(a), None, &options).map_err(|e| e.to_string())?;
    let (db, _) =
        DistCsr::scatter(world, 0, on_root(b), None, &options).map_err(|e| e.to_string())?;
    let gathered = ProductStats::of_distributed(world, &da, &db).map_err(|e| e.to_string())?;
    ensure(gathered == stats, || {
        format!("{gathered:?}, expected {stats:?}")
    })?;
    let close = |what: String, model: f64, moved: u64| {
        let moved = moved as f64;
        ensure((model - moved).abs() <= 0.2 * moved.max(1.0), || {
            format!("{what}: the model says {model} bytes, {moved} moved")
        })
    };
    let (_, report) = spgemm(world, &da, &db, &options).map_err(|e| e.to_string())?;
    close(
        "1D".into(),
        model_volume(&stats, Algorithm::RowFetch { ranks: size }),
        report.total.bytes_sent,
    )?;
    let choices = hetsparse_mpi::choose_algorithm(&stats, size);
    ensure(choices.windows(2).all(|w| w[0].1 <= w[1].1), || {
        "choices not ordered".into()
    })?;
    for c in (2..=size).filter(|c| size % c == 0) {
        let per = size / c;
        for pr in (1..=per).filter(|pr| per % pr == 0) {
            let grid = Grid3::new(pr, per / pr, c);
            ensure(
                choices.iter().any(|x| x.0 == Algorithm::Summa3d(grid)),
                || format!("{grid:?} not among the choices"),
            )?;
            let (a3, _) =
                Dist3dCsr::scatter(world, 0, on_root(a), grid, Layout3::ColumnLayers, &options)
                    .map_err(|e| e.to_string())?;
            let (b3, _) =
                Dist3dCsr::scatter(world, 0, on_root(b), grid, Layout3::RowLayers, &options)
                    .map_err(|e| e.to_string())?;
            let (_, report) =
                spgemm_summa3d(world, &a3, &b3, &options).map_err(|e| e.to_string())?;
            close(
                format!("{grid:?}"),
                model_volume(&stats, Algorithm::Summa3d(grid)),
                report.total.bytes_sent,
            )?;
        }
    }
    Ok(())
}

/// The machine measured on samples of a product: the same on every rank (bit for bit, so a
/// choice made from it is the same everywhere), every rate positive and finite, no network on
/// one rank; and a rank whose sample product fails fails every rank.
fn measure_case<C: Communicator>(world: &C, a: &Csr<f64>) -> Check {
    let (rank, size) = (world.rank(), world.size());
    let options = DistOptions::default();
    let (da, _) = DistCsr::scatter(world, 0, (rank == 0).then_some(a), None, &options)
        .map_err(|e| e.to_string())?;
    let stats = ProductStats::of_distributed(world, &da, &da).map_err(|e| e.to_string())?;
    let cpu: Arc<dyn Backend<f64>> =
        Arc::new(hetsparse::cpu::CpuBackend::with_threads(1).map_err(|e| e.to_string())?);
    let ctx = Context::from_backends(&["cpu"], vec![cpu.clone()]).map_err(|e| e.to_string())?;
    let machine = measure_machine(world, &da, &da, &stats, &ctx).map_err(|e| e.to_string())?;
    let n = machine.network;
    let mine = [
        machine.rate.to_bits(),
        machine.entry_rate.unwrap_or(-1.0).to_bits(),
        n.latency.to_bits(),
        n.bandwidth.to_bits(),
    ];
    let mut all = vec![0u64; 4 * size as usize];
    world.all_gather_into(&mine[..], &mut all[..]);
    ensure(all.chunks_exact(4).all(|x| x == mine), || {
        format!("ranks measured different machines: {all:?}")
    })?;
    let positive = |x: f64| x.is_finite() && x > 0.0;
    ensure(
        positive(machine.rate) && machine.entry_rate.is_some_and(positive),
        || format!("rates {machine:?}"),
    )?;
    if size == 1 {
        ensure(n.latency == 0.0 && n.bandwidth == f64::MAX, || {
            format!("one rank has no network: {n:?}")
        })?;
    } else {
        ensure(
            n.latency.is_finite() && n.latency > 0.0 && positive(n.bandwidth),
            || format!("network {n:?}"),
        )?;
    }
    // The layouts by time from it: every one, ordered.
    let ranked =
        choose_algorithm_by_time(&stats, size as usize, &machine).map_err(|e| e.to_string())?;
    ensure(
        !ranked.is_empty() && ranked.windows(2).all(|w| w[0].1.total <= w[1].1.total),
        || format!("{ranked:?}"),
    )?;
    // The last rank's sample product fails: a Compute error of that rank everywhere.
    let bad = size - 1;
    let ctx = failing_on(world, bad, cpu)?;
    match measure_machine(world, &da, &da, &stats, &ctx) {
        Err(Error::Compute { rank: r, .. }) if r == bad => Ok(()),
        other => Err(format!("{other:?}, expected a Compute error of rank {bad}")),
    }
}

/// Each rank's block: (rows, columns), global numbers.
type Blocks = Vec<(std::ops::Range<u64>, std::ops::Range<u64>)>;

fn blocks_1d<T: MpiScalar>(d: &DistCsr<T>) -> Blocks {
    (0..d.partition().ranks())
        .map(|r| (d.partition().rows(r), 0..d.shape().1))
        .collect()
}

fn blocks_2d<T: MpiScalar>(d: &Dist2dCsr<T>) -> Blocks {
    let g = d.grid();
    (0..g.rows * g.cols)
        .map(|r| {
            let (i, j) = g.position(r);
            (d.row_partition().rows(i), d.col_partition().rows(j))
        })
        .collect()
}

fn blocks_3d<T: MpiScalar>(d: &Dist3dCsr<T>) -> Blocks {
    (0..d.grid().size().unwrap_or(0))
        .map(|r| (d.block_rows(r), d.block_cols(r)))
        .collect()
}

fn overlap(a: &std::ops::Range<u64>, b: &std::ops::Range<u64>) -> std::ops::Range<u64> {
    let start = a.start.max(b.start);
    start..a.end.min(b.end).max(start)
}

/// What converting `m` from blocks `from` to blocks `to` must move in all: every piece with
/// entries between two different ranks, its rows' lengths and its entries; and the sizes, an
/// all-to-all of byte counts and an all-gather of the new blocks' entries (8 bytes each way
/// between every two ranks).
fn conversion_bytes<T: MpiScalar>(m: &Csr<T>, from: &Blocks, to: &Blocks) -> u64 {
    let p = from.len() as u64;
    let mut bytes = 16 * p * (p - 1);
    for (s, (sr, sc)) in from.iter().enumerate() {
        for (d, (dr, dc)) in to.iter().enumerate() {
            let (rows, cols) = (overlap(sr, dr), overlap(sc, dc));
            if s == d || rows.is_empty() || cols.is_empty() {
                continue;
            }
            let piece = block_bytes(m, rows.clone(), cols);
            if piece > 8 * (rows.end - rows.start) {
                bytes += piece;
            }
        }
    }
    bytes
}

/// A conversion of `m` checked: the bytes its report counts in all against
/// [`conversion_bytes`], and the converted matrix gathered on `root` against `m`.
fn check_conversion<T: MpiScalar>(
    what: &str,
    m: &Csr<T>,
    (from, to): (&Blocks, &Blocks),
    report: &hetsparse_mpi::CommReport,
    gathered: Option<Csr<T>>,
) -> Check {
    let want = conversion_bytes(m, from, to);
    ensure(report.total.bytes_sent == want, || {
        format!(
            "{what}: {} bytes moved in all, expected {want}",
            report.total.bytes_sent
        )
    })?;
    match gathered {
        Some(g) => ensure(&g == m, || {
            format!("{what}: the converted matrix is not the matrix")
        }),
        None => Ok(()),
    }
}

/// Every `(pr, pc)` with `pr · pc = p`.
fn grids(p: usize) -> Vec<Grid> {
    (1..=p)
        .filter(|r| p % r == 0)
        .map(|r| Grid::new(r, p / r))
        .collect()
}

/// Every `(pr, pc, c)` with `pr · pc · c = p`.
fn grids3(p: usize) -> Vec<Grid3> {
    (1..=p)
        .filter(|c| p % c == 0)
        .flat_map(|c| {
            grids(p / c)
                .into_iter()
                .map(move |g| Grid3::new(g.rows, g.cols, c))
        })
        .collect()
}

/// Conversions between the layouts on every grid of the communicator's size: A brought by
/// each rank as its own uneven rows (the first rank none) and B scattered in even rows, both
/// converted to 2D and to 3D (checked against what scatter makes, the bytes against what the
/// blocks' overlaps hold, and gathered against the whole), multiplied there, and C brought back
/// to rows (even after 2D, A's uneven rows after 3D) and compared with the single-process
/// product; 3D blocks made of each rank's own equal the scattered ones; 2D and 3D convert into
/// each other.
fn conversion_case<T: MpiScalar, C: Communicator>(
    world: &C,
    a: &Csr<T>,
    b: &Csr<T>,
    root: i32,
    options: &DistOptions,
) -> Check {
    let (rank, p) = (world.rank() as usize, world.size() as usize);
    let on_root = |m| (world.rank() == root).then_some(m);
    let gather1 = |d: &DistCsr<T>| -> Result<Option<Csr<T>>, String> {
        Ok(d.gather(world, root, options).map_err(|e| e.to_string())?.0)
    };
    let gather2 = |d: &Dist2dCsr<T>| -> Result<Option<Csr<T>>, String> {
        Ok(d.gather(world, root, options).map_err(|e| e.to_string())?.0)
    };
    let gather3 = |d: &Dist3dCsr<T>| -> Result<Option<Csr<T>>, String> {
        Ok(d.gather(world, root, options).map_err(|e| e.to_string())?.0)
    };
    let a_part = skewed(a.nrows() as u64, p);
    let mine = sub_matrix(a, a_part.rows(rank), 0..a.ncols() as u64)?;
    let (da, _) = DistCsr::from_local_rows(world, mine).map_err(|e| e.to_string())?;
    let (db, _) =
        DistCsr::scatter(world, root, on_root(b), None, options).map_err(|e| e.to_string())?;
    let want = Context::<T>::on(&DeviceChoice::Cpu)
        .and_then(|ctx| ctx.spgemm(a, b))
        .map_err(|e| e.to_string())?;
    let even_c = RowPartition::even(a.nrows() as u64, p);

    // 1D to other rows and back.
    let (even_a, report) = da
        .to_rows(world, None, options)
        .map_err(|e| e.to_string())?;
    ensure(
        even_a.partition() == &RowPartition::even(a.nrows() as u64, p),
        || "to_rows(None) did not give even rows".into(),
    )?;
    check_conversion(
        "uneven rows to even rows",
        a,
        (&blocks_1d(&da), &blocks_1d(&even_a)),
        &report,
        gather1(&even_a)?,
    )?;
    let (back, _) = even_a
        .to_rows(world, Some(&a_part), options)
        .map_err(|e| e.to_string())?;
    ensure(back == da, || "rows converted back differ".into())?;

    for grid in grids(p) {
        let what = format!("{}×{}", grid.rows, grid.cols);
        let (a2, report) = da.to_2d(world, grid, options).map_err(|e| e.to_string())?;
        let (scattered, _) = Dist2dCsr::scatter(world, root, on_root(a), grid, options)
            .map_err(|e| e.to_string())?;
        ensure(a2 == scattered, || {
            format!("A on {what}: not what scatter makes")
        })?;
        check_conversion(
            &format!("A rows to {what}"),
            a,
            (&blocks_1d(&da), &blocks_2d(&a2)),
            &report,
            gather2(&a2)?,
        )?;
        let (b2, _) = db.to_2d(world, grid, options).map_err(|e| e.to_string())?;
        let (c2, _) = spgemm_summa(world, &a2, &b2, options).map_err(|e| e.to_string())?;
        let (c, report) = c2
            .to_rows(world, None, options)
            .map_err(|e| e.to_string())?;
        ensure(c.partition() == &even_c, || {
            format!("C from {what}: not in even rows")
        })?;
        check_conversion(
            &format!("C {what} to rows"),
            &want,
            (&blocks_2d(&c2), &blocks_1d(&c)),
            &report,
            None,
        )?;
        if let Some(c) = gather1(&c)? {
            same_product(&c, &want).map_err(|e| format!("2D {what}: {e}"))?;
        }
    }

    for grid in grids3(p) {
        let what = format!("{}×{}×{}", grid.rows, grid.cols, grid.layers);
        let mut operands = Vec::new();
        for (m, d, layout) in [
            (a, &da, Layout3::ColumnLayers),
            (b, &db, Layout3::RowLayers),
        ] {
            let (m3, report) = d
                .to_3d(world, grid, layout, options)
                .map_err(|e| e.to_string())?;
            let (scattered, _) = Dist3dCsr::scatter(world, root, on_root(m), grid, layout, options)
                .map_err(|e| e.to_string())?;
            ensure(m3 == scattered, || {
                format!("{layout:?} on {what}: not what scatter makes")
            })?;
            check_conversion(
                &format!("rows to {layout:?} on {what}"),
                m,
                (&blocks_1d(d), &blocks_3d(&m3)),
                &report,
                gather3(&m3)?,
            )?;
            // The same blocks, each rank bringing its own.
            let own = sub_matrix(m, m3.block_rows(rank), m3.block_cols(rank))?;
            let (made, _) = Dist3dCsr::from_local_blocks(world, grid, layout, own)
                .map_err(|e| e.to_string())?;
            ensure(made == m3, || {
                format!("{layout:?} on {what}: from_local_blocks differs")
            })?;
            operands.push(m3);
        }
        let (c3, _) = spgemm_summa3d(world, &operands[0], &operands[1], options)
            .map_err(|e| e.to_string())?;
        let (c, report) = c3
            .to_rows(world, Some(&a_part), options)
            .map_err(|e| e.to_string())?;
        ensure(c.partition() == &a_part, || {
            format!("C from {what}: not in A's rows")
        })?;
        check_conversion(
            &format!("C {what} to rows"),
            &want,
            (&blocks_3d(&c3), &blocks_1d(&c)),
            &report,
            None,
        )?;
        let whole_c = gather1(&c)?;
        if let Some(c) = &whole_c {
            same_product(c, &want).map_err(|e| format!("3D {what}: {e}"))?;
        }
        // C (Output) as the left operand of another product, and 2D ⇄ 3D.
        let (left, _) = c3
            .to_3d(world, grid, Layout3::ColumnLayers, options)
            .map_err(|e| e.to_string())?;
        let flat = Grid::new(grid.rows, grid.cols * grid.layers);
        let (c2, _) = left
            .to_2d(world, flat, options)
            .map_err(|e| e.to_string())?;
        let (again, _) = c2
            .to_3d(world, grid, Layout3::Output, options)
            .map_err(|e| e.to_string())?;
        ensure(again == c3, || {
            format!("C on {what}: 3D to 2D to 3D differs")
        })?;
        if let (Some(x), Some(y)) = (gather3(&left)?, whole_c) {
            ensure(x == y, || format!("C on {what} in ColumnLayers differs"))?;
        }
    }
    Ok(())
}

/// Conversions and 3D blocks that go wrong: one rank's 3D block of the wrong shape, and a row
/// partition that differs between ranks, each the same error on every rank.
fn conversion_errors_case<C: Communicator>(world: &C) -> Check {
    let (rank, size) = (world.rank(), world.size());
    let options = DistOptions::default();
    let a = generate::uniform::<f64>(23, 17, 3, 5);
    let grid = Grid3::new(1, 1, size as usize);
    let (a3, _) = Dist3dCsr::scatter(
        world,
        0,
        (rank == 0).then_some(&a),
        grid,
        Layout3::RowLayers,
        &options,
    )
    .map_err(|e| e.to_string())?;
    let bad = size - 1;
    let rows = a3.block_rows(rank as usize);
    // The last rank's block one column short.
    let cols = 0..17 - u64::from(rank == bad);
    let own = sub_matrix(&a, rows, cols)?;
    let made = Dist3dCsr::from_local_blocks(world, grid, Layout3::RowLayers, own);
    if size == 1 {
        // One block is a whole matrix of any shape.
        return ensure(made.is_ok(), || "one rank's 3D block refused".into());
    }
    match made {
        Err(Error::InvalidBlock { rank: r, reason })
            if r == bad && reason.starts_with("its block is") => {}
        other => return Err(format!("a short 3D block: {other:?}")),
    }
    {
        let (da, _) = DistCsr::scatter(world, 0, (rank == 0).then_some(&a), None, &options)
            .map_err(|e| e.to_string())?;
        // Every rank puts its extra row elsewhere.
        let mut counts = vec![23 / size as u64; size as usize];
        counts[rank as usize] += 23 % size as u64;
        let part = RowPartition::from_counts(&counts);
        let want = Error::Partition {
            rank: 0,
            reason: "ranks disagree on the row partition".into(),
        };
        if 23 % size != 0 {
            expect_error(da.to_rows(world, Some(&part), &options), &want)?;
        }
        let short = RowPartition::from_counts(&vec![1; size as usize]);
        let want = Error::Partition {
            rank: 0,
            reason: format!(
                "{size} rows over {size} ranks given for a matrix of 23 rows on {size} ranks"
            ),
        };
        expect_error(a3.to_rows(world, Some(&short), &options), &want)?;
    }
    Ok(())
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
    // Few entries a row near the diagonal: on most ranks the local B is a window of B's rows
    // that starts past row 0, and A's columns are shifted into it.
    let band = generate::banded::<f64>(3000, 3, 20);
    let diagonal = generate::banded::<f64>(3000, 1, 21);

    // Smaller operands for 3D: every grid, layer count and batch count of P runs.
    let rmat3 = generate::rmat::<f64>(8, 6, 41);
    let uniform3 = generate::uniform::<f64>(250, 250, 5, 42);
    let stencil3 = generate::stencil_3d::<f64>(6, Stencil::TwentySeven, 1, 43);
    let lp3 = generate::lp_rectangular::<f64>(50, 600, 3, 44);
    let lp3_t = lp3.transpose().expect("a transpose");
    let complex3_a = generate::uniform::<Complex<f64>>(90, 130, 4, 45);
    let complex3_b = generate::uniform::<Complex<f64>>(130, 70, 3, 46);

    // Conversions: shapes no rank count divides.
    let conv_a = generate::uniform::<f64>(97, 61, 4, 47);
    let conv_b = generate::uniform::<f64>(61, 43, 3, 48);
    let conv_c = generate::uniform::<Complex<f64>>(53, 71, 3, 49);
    let conv_c_t = conv_c.transpose().expect("a transpose");

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
            "banded A·B, windows of B's rows (diagonal A: nothing fetched; uneven B)",
            Box::new(|| {
                product_case(&world, &diagonal, &band, None, 0, &options)?;
                product_case(&world, &band, &band, None, last, &small)?;
                product_case(
                    &world,
                    &band,
                    &band,
                    Some(&uneven(band.nrows() as u64)),
                    0,
                    &options,
                )
            }),
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
            "3D SUMMA: power-law R-MAT A·A on every grid, layers and batches",
            Box::new(|| summa3d_case(&world, &rmat3, &rmat3, 0, &options)),
        ),
        (
            "3D SUMMA: uniform A·A, small messages",
            Box::new(|| summa3d_case(&world, &uniform3, &uniform3, last, &small)),
        ),
        (
            "3D SUMMA: 3D stencil A·A and rectangular A·Aᵀ",
            Box::new(|| {
                summa3d_case(&world, &stencil3, &stencil3, 0, &options)?;
                summa3d_case(&world, &lp3, &lp3_t, last, &options)
            }),
        ),
        (
            "3D SUMMA: complex rectangular A·B",
            Box::new(|| summa3d_case(&world, &complex3_a, &complex3_b, 0, &options)),
        ),
        (
            "error: 3D grid, layouts and a failing batch callback",
            Box::new(|| summa3d_errors_case(&world)),
        ),
        (
            "Matrix Market read and written collectively",
            Box::new(|| matrix_market_case(&world)),
        ),
        (
            "transpose of a rectangular matrix, even rows",
            Box::new(|| transpose_case(&world, &lp, None, &small)),
        ),
        (
            "transpose of a power-law matrix, uneven rows",
            Box::new(|| {
                transpose_case(&world, &rmat, Some(&uneven(rmat.nrows() as u64)), &options)
            }),
        ),
        (
            "transpose of a complex matrix (not conjugated)",
            Box::new(|| transpose_case(&world, &conv_c, None, &options)),
        ),
        (
            "2D Sparse SUMMA on uneven blocks (given, and from each rank's own)",
            Box::new(|| {
                summa_layout_case(&world, &rmat3, &rmat3, 0, &options, true)?;
                summa_layout_case(&world, &lp3, &lp3_t, last, &small, true)
            }),
        ),
        (
            "conversions 1D ⇄ 2D ⇄ 3D: rectangular uneven A·B, every grid",
            Box::new(|| conversion_case(&world, &conv_a, &conv_b, 0, &options)),
        ),
        (
            "conversions 1D ⇄ 2D ⇄ 3D: complex A·Aᵀ, small messages",
            Box::new(|| conversion_case(&world, &conv_c, &conv_c_t, last, &small)),
        ),
        (
            "error: a 3D block of the wrong shape, partitions that disagree",
            Box::new(|| conversion_errors_case(&world)),
        ),
        (
            "volume model against what moved (uniform operands)",
            Box::new(|| model_case(&world, &uniform3, &uniform3)),
        ),
        (
            "the machine measured on samples of a product (stencil A·A)",
            Box::new(|| measure_case(&world, &stencil)),
        ),
        (
            "error: 2D blocks that do not line up",
            Box::new(|| bad_local_blocks_case(&world)),
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
