//! The machine the time model predicts for, measured on the ranks a product runs on: the
//! network between them and one rank's local rates, on samples of the product itself.
//!
//! Every rank ends with the same [`Machine`]: the rates are sums of integer counts and
//! nanoseconds all-reduced (exact, the same everywhere), the network is measured by rank 0 and
//! broadcast. So a choice made from it is the same on every rank without a further agreement.

use std::ops::Range;
use std::time::Instant;

use hetsparse::{Context, Csr};
use mpi::collective::SystemOperation;
use mpi::traits::*;

use crate::error::{agree, check_chain, Error, Result};
use crate::matrix::{comm_span, DistCsr};
use crate::model::{measure_entry_rate, Machine, Network, ProductStats};
use crate::wire::MpiScalar;

/// Bytes of the message whose round trips give the bandwidth: long enough for MPI's protocol
/// for large messages (rendezvous), short enough to cost milliseconds.
const LONG_MESSAGE: usize = 2 << 20;

/// The most other ranks rank 0 measures its link to.
const MAX_PEERS: usize = 7;

/// The most multiplications a rank's sample product has. A sample far smaller than the rank's
/// share understates the rate (per-row and per-call costs dominate), one as large costs as much
/// as the product: a thirty-second of the share (timed twice), up to this.
const MAX_SAMPLE_FLOPS: u64 = 1 << 21;

/// The most entries a rank's entry-rate sample has (see [`MAX_SAMPLE_FLOPS`]).
const MAX_SAMPLE_ENTRIES: u64 = 1 << 18;

/// The ranks rank 0 measures its link to among `size`: at most [`MAX_PEERS`], spread evenly
/// over the communicator, rank 1 and the last rank included (with ranks placed on nodes in
/// blocks, the first is likely on rank 0's node and the last on another).
fn peers(size: usize) -> Vec<usize> {
    if size <= 1 {
        return Vec::new();
    }
    let others = size - 1;
    let n = others.min(MAX_PEERS);
    let mut picked: Vec<usize> = (0..n)
        .map(|i| {
            1 + if n == 1 {
                0
            } else {
                i * (others - 1) / (n - 1)
            }
        })
        .collect();
    picked.dedup();
    picked
}

/// The network as the time model sees it, measured (collective): rank 0 times round trips with
/// up to seven other ranks spread over `comm` (the last one included) — 8 bytes for the
/// latency (half the least round trip), 2 MiB for the bandwidth (the bytes over half the least
/// round trip less the latency) — and keeps the slowest link's latency and bandwidth, which it
/// broadcasts. Ranks it does not measure wait for the broadcast. On one rank there is no
/// network: a latency of 0 and a bandwidth of `f64::MAX`, which the model multiplies by no
/// bytes.
///
/// Taken where the product runs, with the ranks it runs on: on a cluster the link to a rank of
/// another node is the one that counts; ranks sharing cores time each other's waits too.
pub fn measure_network<C: Communicator>(comm: &C) -> Network {
    let span = comm_span("mpi_measure_network", comm);
    let _enter = span.enter();
    let (rank, size) = (comm.rank() as usize, comm.size() as usize);
    let mut measured = [0.0f64, f64::MAX];
    let peers = peers(size);
    // Rank 0 and the peers time round trips; the others only wait for the broadcast.
    let takes_part = rank == 0 && !peers.is_empty() || peers.contains(&rank);
    let mut short = [0u8; 8];
    let mut long = vec![0u8; if takes_part { LONG_MESSAGE } else { 0 }];
    for peer in peers {
        if rank != 0 && rank != peer {
            continue;
        }
        let other = comm.process_at_rank(if rank == 0 { peer as i32 } else { 0 });
        let least_round_trip = |buf: &mut [u8], warm: usize, timed: usize| {
            let mut least = f64::INFINITY;
            for rep in 0..warm + timed {
                let start = Instant::now();
                if rank == 0 {
                    other.send(&buf[..]);
                    other.receive_into(&mut buf[..]);
                } else {
                    other.receive_into(&mut buf[..]);
                    other.send(&buf[..]);
                }
                if rep >= warm {
                    least = least.min(start.elapsed().as_secs_f64());
                }
            }
            least
        };
        let latency = least_round_trip(&mut short, 10, 50) / 2.0;
        let one_way = least_round_trip(&mut long, 1, 3) / 2.0;
        if rank == 0 {
            let bandwidth = LONG_MESSAGE as f64 / (one_way - latency).max(1e-9);
            measured = [measured[0].max(latency), measured[1].min(bandwidth)];
        }
    }
    comm.process_at_rank(0).broadcast_into(&mut measured[..]);
    Network {
        latency: measured[0],
        bandwidth: measured[1],
    }
}

/// The machine the time model predicts for (collective), measured on `comm` for the product
/// `A·B` of `stats` ([`ProductStats::of_distributed`]) with `ctx`, the context each rank's
/// local products run on:
///
/// - the network: [`measure_network`];
/// - the local rate: every rank multiplies a sample of its own part of the product — its first
///   rows of A restricted to the columns whose rows of B it holds, by those rows of B: the part
///   of its 1D product it needs no message for — of up to a thirty-second of its share of the
///   multiplications (at most 2^21), twice, the quicker kept; the rate is the samples'
///   multiplications over their seconds, summed over ranks;
/// - the entry rate: [`measure_entry_rate`] on each rank's first rows of B (of A where it holds
///   no entries of B) up to a sixteenth of its share (at most 2^18 entries), summed likewise.
///
/// Where no rank's sample has a multiplication (no rank holds rows of B that its rows of A
/// reach), the local rate is taken as the entry rate: every layout then multiplies the same
/// products and only the other terms tell them apart.
///
/// Costs about a tenth of the product's local work plus a few milliseconds of messages.
///
/// Errors (the same on every rank): operands not distributed over `comm` or whose shapes do
/// not multiply; a sample the context could not multiply ([`Error::Compute`]).
pub fn measure_machine<T: MpiScalar, C: Communicator>(
    comm: &C,
    a: &DistCsr<T>,
    b: &DistCsr<T>,
    stats: &ProductStats,
    ctx: &Context<T>,
) -> Result<Machine> {
    let rank = comm.rank();
    let checks = (|| {
        a.check_comm(comm)?;
        b.check_comm(comm)?;
        check_chain(rank, a.shape(), b.shape())
    })();
    agree(comm, checks)?;
    let network = measure_network(comm);
    let span = comm_span("mpi_measure_rates", comm);
    let _enter = span.enter();
    let ranks = (comm.size() as u64).max(1);

    let flops_target = (stats.flops / ranks / 32).clamp(1, MAX_SAMPLE_FLOPS);
    let own = b.partition().rows(rank as usize);
    let product = diagonal_sample(a.local(), own, b.local(), flops_target)
        .map_err(|reason| Error::Compute {
            rank,
            message: reason,
        })
        .and_then(|sample| match sample {
            Some((sample, flops)) => {
                time_product(ctx, &sample, b.local(), rank).map(|ns| (flops, ns))
            }
            None => Ok((0, 0)),
        });
    let (flops, flops_ns) = agree(comm, product)?;

    let entries_target = ((stats.nnz_b / ranks) / 16).clamp(1, MAX_SAMPLE_ENTRIES);
    let source = if b.local().nnz() > 0 {
        b.local()
    } else {
        a.local()
    };
    let entries = first_rows(source, entries_target).map_or(Ok((0, 0)), |sample| {
        let n = sample.nnz();
        measure_entry_rate(&sample, 2)
            .map(|rate| (n, (4.0 * n as f64 / rate * 1e9).ceil() as u64))
            .map_err(|e| Error::Compute {
                rank,
                message: e.to_string(),
            })
    });
    let (entries, entries_ns) = agree(comm, entries)?;

    let mut sums = [0u64; 4];
    comm.all_reduce_into(
        &[flops, flops_ns, entries, entries_ns][..],
        &mut sums[..],
        SystemOperation::sum(),
    );
    let per_second = |count: u64, ns: u64| (count > 0).then(|| count as f64 / (ns as f64 * 1e-9));
    let entry_rate = per_second(4 * sums[2], sums[3]);
    let rate = per_second(sums[0], sums[1]).or(entry_rate).unwrap_or(1.0);
    tracing::debug!(
        rate,
        entry_rate,
        latency = network.latency,
        bandwidth = network.bandwidth,
        "measured machine"
    );
    Ok(Machine {
        network,
        rate,
        entry_rate,
    })
}

/// Nanoseconds of the least of two runs of `a·b` on `ctx` (at least 1).
fn time_product<T: MpiScalar>(ctx: &Context<T>, a: &Csr<T>, b: &Csr<T>, rank: i32) -> Result<u64> {
    let mut least = u64::MAX;
    for _ in 0..2 {
        let start = Instant::now();
        let c = ctx.spgemm(a, b).map_err(|e| Error::Compute {
            rank,
            message: format!("the local rate's sample product: {e}"),
        })?;
        std::hint::black_box(&c);
        least = least.min(u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX));
    }
    Ok(least.max(1))
}

/// The first rows of `a` whose entries in columns `own` (B's rows this rank holds, `b`)
/// reach at least `target` multiplications, those columns shifted to start at 0, and their
/// multiplications; `None` where they have none.
fn diagonal_sample<T: MpiScalar>(
    a: &Csr<T>,
    own: Range<u64>,
    b: &Csr<T>,
    target: u64,
) -> std::result::Result<Option<(Csr<T>, u64)>, String> {
    let (mut offsets, mut cols, mut values) = (vec![0u64], Vec::new(), Vec::new());
    let mut flops = 0u64;
    for i in 0..a.nrows() {
        if flops >= target {
            break;
        }
        let (row_cols, row_values) = a.row(i);
        for (&c, &v) in row_cols.iter().zip(row_values) {
            if own.contains(&u64::from(c)) {
                let k = (u64::from(c) - own.start) as u32;
                flops = flops.saturating_add(b.row_nnz(k as usize));
                cols.push(k);
                values.push(v);
            }
        }
        offsets.push(cols.len() as u64);
    }
    if flops == 0 {
        return Ok(None);
    }
    let rows = offsets.len() - 1;
    Csr::try_new(rows, b.nrows(), offsets, cols, values)
        .map(|s| Some((s, flops)))
        .map_err(|e| format!("the local rate's sample: {e}"))
}

/// The first rows of `m` holding at least `target` entries (all of them if it holds fewer), as
/// a matrix of their own; `None` where `m` has no entries.
fn first_rows<T: MpiScalar>(m: &Csr<T>, target: u64) -> Option<Csr<T>> {
    if m.nnz() == 0 {
        return None;
    }
    let offsets = m.row_offsets();
    let rows = offsets
        .iter()
        .position(|&o| o >= target)
        .unwrap_or(m.nrows())
        .min(m.nrows());
    let end = offsets[rows] as usize;
    Csr::try_new(
        rows,
        m.ncols(),
        offsets[..=rows].to_vec(),
        m.col_indices()[..end].to_vec(),
        m.values()[..end].to_vec(),
    )
    .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_are_spread_and_include_the_last_rank() {
        assert!(peers(1).is_empty());
        assert_eq!(peers(2), vec![1]);
        assert_eq!(peers(4), vec![1, 2, 3]);
        assert_eq!(peers(8), vec![1, 2, 3, 4, 5, 6, 7]);
        let many = peers(1024);
        assert_eq!(many.len(), MAX_PEERS);
        assert_eq!((many[0], *many.last().unwrap()), (1, 1023));
        assert!(many.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn the_diagonal_sample_keeps_the_own_columns_of_the_first_rows() {
        // A: 3 rows over 6 columns; this rank holds rows 2..4 of B (2 and 1 entries).
        let a = Csr::try_new(
            3,
            6,
            vec![0, 3, 4, 6],
            vec![0, 2, 3, 5, 2, 3],
            vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
        )
        .unwrap();
        let b = Csr::try_new(2, 4, vec![0, 2, 3], vec![0, 1, 3], vec![1.0; 3]).unwrap();
        let (s, flops) = diagonal_sample(&a, 2..4, &b, u64::MAX).unwrap().unwrap();
        assert_eq!((s.nrows(), s.ncols()), (3, 2));
        assert_eq!(s.row_offsets(), &[0, 2, 2, 4]);
        assert_eq!(s.col_indices(), &[0, 1, 0, 1]);
        assert_eq!(s.values(), &[2.0, 3.0, 5.0, 6.0]);
        assert_eq!(flops, 2 + 1 + 2 + 1);
        // Stops after the row that reaches the target.
        let (s, flops) = diagonal_sample(&a, 2..4, &b, 1).unwrap().unwrap();
        assert_eq!((s.nrows(), flops), (1, 3));
        // No column of A in the rows held: no sample.
        assert!(diagonal_sample(&a, 4..5, &b, u64::MAX).unwrap().is_none());
    }

    #[test]
    fn first_rows_reach_the_target() {
        let m = Csr::try_new(3, 4, vec![0, 2, 3, 5], vec![0, 1, 3, 0, 2], vec![1.0; 5]).unwrap();
        assert_eq!(first_rows(&m, 2).unwrap().nrows(), 1);
        assert_eq!(first_rows(&m, 3).unwrap().nnz(), 3);
        assert_eq!(first_rows(&m, 100).unwrap().nnz(), 5);
        assert!(first_rows(&Csr::<f64>::zeros(2, 2).unwrap(), 1).is_none());
    }
}
