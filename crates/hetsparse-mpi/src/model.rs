//! A communication-volume model of the distributed products, and the choice of one from it.

use hetsparse::Csr;
use mpi::collective::SystemOperation;
use mpi::traits::*;

use crate::error::{agree, check_chain, Error, Result};
use crate::matrix::DistCsr;
use crate::partition::RowPartition;
use crate::summa::Grid;
use crate::summa3d::Grid3;
use crate::wire::MpiScalar;

/// What the volume model knows of a product `C = A·B`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProductStats {
    /// Rows of A (and C).
    pub nrows: u64,
    /// Columns of A, rows of B.
    pub inner: u64,
    /// Columns of B (and C).
    pub ncols: u64,
    /// Entries of A.
    pub nnz_a: u64,
    /// Entries of B.
    pub nnz_b: u64,
    /// Multiplications of the product: `Σ_k nnz(A(:, k)) · nnz(B(k, :))`.
    pub flops: u64,
    /// Bytes of one value on the wire (`MpiScalar::BYTES`).
    pub scalar_bytes: u64,
}

impl ProductStats {
    /// The statistics of `A·B` from the whole operands (on one rank).
    pub fn of<T: MpiScalar>(a: &Csr<T>, b: &Csr<T>) -> Self {
        let mut col_counts = vec![0u64; a.ncols()];
        for &c in a.col_indices() {
            col_counts[c as usize] += 1;
        }
        let flops = col_counts
            .iter()
            .enumerate()
            .filter(|&(k, _)| k < b.nrows())
            .fold(0u64, |f, (k, &n)| {
                f.saturating_add(n.saturating_mul(b.row_nnz(k)))
            });
        ProductStats {
            nrows: a.nrows() as u64,
            inner: a.ncols() as u64,
            ncols: b.ncols() as u64,
            nnz_a: a.nnz(),
            nnz_b: b.nnz(),
            flops,
            scalar_bytes: T::BYTES as u64,
        }
    }

    /// The statistics of `A·B` from 1D-distributed operands (collective): an all-reduce of
    /// A's column counts (one u64 per column of A), then each rank's share of the flops from
    /// its rows of B, summed.
    ///
    /// Errors (on every rank): shapes that do not multiply, a communicator that is not the
    /// operands'.
    pub fn of_distributed<T: MpiScalar, C: Communicator>(
        comm: &C,
        a: &DistCsr<T>,
        b: &DistCsr<T>,
    ) -> Result<Self> {
        let rank = comm.rank();
        let checks = (|| {
            a.check_comm(comm)?;
            b.check_comm(comm)?;
            check_chain(rank, a.shape(), b.shape())?;
            let a_cols = a.shape().1;
            let too_many = || Error::InvalidArgument {
                rank,
                reason: format!("{a_cols} column counts do not fit in memory here"),
            };
            let inner = usize::try_from(a_cols).map_err(|_| too_many())?;
            let mut counts: Vec<u64> = Vec::new();
            counts.try_reserve_exact(inner).map_err(|_| too_many())?;
            counts.resize(inner, 0);
            Ok(counts)
        })();
        let mut mine = agree(comm, checks)?;
        let inner = mine.len();
        for &c in a.local().col_indices() {
            mine[c as usize] += 1;
        }
        let mut counts = vec![0u64; inner];
        comm.all_reduce_into(&mine[..], &mut counts[..], SystemOperation::sum());
        let first = b.partition().rows(rank as usize).start as usize;
        let local = (0..b.local().nrows()).fold(0u64, |f, r| {
            f.saturating_add(counts[first + r].saturating_mul(b.local().row_nnz(r)))
        });
        let mut flops = 0u64;
        comm.all_reduce_into(&local, &mut flops, SystemOperation::sum());
        Ok(ProductStats {
            nrows: a.shape().0,
            inner: a.shape().1,
            ncols: b.shape().1,
            nnz_a: a.nnz(),
            nnz_b: b.nnz(),
            flops,
            scalar_bytes: T::BYTES as u64,
        })
    }
}

/// A distributed product algorithm and its layout of ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    /// 1D row fetch ([`spgemm`](crate::spgemm)) on that many ranks.
    RowFetch {
        /// Ranks.
        ranks: usize,
    },
    /// 2D Sparse SUMMA ([`spgemm_summa`](crate::spgemm_summa)) on even blocks of this grid.
    Summa2d(Grid),
    /// 3D split SUMMA ([`spgemm_summa3d`](crate::spgemm_summa3d)) on this grid, in one batch.
    Summa3d(Grid3),
}

/// The number of SUMMA stages: the pieces of `inner` cut at the ends of both even partitions.
fn stages(inner: u64, pr: usize, pc: usize) -> u64 {
    let mut cuts: Vec<u64> = RowPartition::even(inner, pc)
        .offsets()
        .iter()
        .chain(RowPartition::even(inner, pr).offsets())
        .copied()
        .collect();
    cuts.sort_unstable();
    cuts.dedup();
    cuts.len() as u64 - 1
}

/// The distinct rows of B that `entries` entries of A reach when their columns are uniformly
/// random among `inner`: `inner · (1 − (1 − 1/inner)^entries)`.
fn distinct_rows(inner: f64, entries: f64) -> f64 {
    // (No entries touch no rows: 0 · ln(0) would be NaN when inner = 1.)
    if entries > 0.0 {
        inner * (1.0 - (entries * (-1.0 / inner).ln_1p()).exp())
    } else {
        0.0
    }
}

/// The widest slice of `inner` cut evenly into `layers` (3D SUMMA's layers run at once, so the
/// widest is the slowest) and its share of `inner`.
fn widest_slice(inner: u64, layers: usize) -> (u64, f64) {
    let slices = RowPartition::even(inner, layers);
    let widest = (0..layers)
        .map(|l| {
            let k = slices.rows(l);
            k.end - k.start
        })
        .max()
        .unwrap_or(0);
    (widest, widest as f64 / inner.max(1) as f64)
}

/// Bytes 2D SUMMA sends in all on a `pr × pc` grid (exact for even blocks).
fn summa2d_bytes(
    nrows: u64,
    inner: u64,
    nnz_a: f64,
    nnz_b: f64,
    s: f64,
    pr: usize,
    pc: usize,
) -> f64 {
    let st = stages(inner, pr, pc) as f64;
    let (prf, pcf) = (pr as f64, pc as f64);
    let p = prf * pcf;
    (pcf - 1.0) * (8.0 * nrows as f64 * st + (4.0 + s) * nnz_a)
        + (prf - 1.0) * (8.0 * pcf * inner as f64 + (4.0 + s) * nnz_b)
        + 8.0 * st * (prf * (pcf - 1.0) + pcf * (prf - 1.0))
        + 8.0 * p * (p - 1.0)
}

/// The bytes `algorithm` is expected to send in all (summed over ranks) for a product of
/// `stats`; see `docs/distributed.md` for the formulas. 2D SUMMA's is exact for even blocks;
/// 1D row fetch's and 3D SUMMA's assume entries scattered uniformly at random (the 1D volume
/// of a banded or well-ordered matrix is far lower, its rows reaching only nearby ranks).
pub fn model_volume(stats: &ProductStats, algorithm: Algorithm) -> f64 {
    let s = stats.scalar_bytes as f64;
    let (nnz_a, nnz_b) = (stats.nnz_a as f64, stats.nnz_b as f64);
    let inner = stats.inner.max(1) as f64;
    match algorithm {
        Algorithm::RowFetch { ranks } => {
            let p = ranks.max(1) as f64;
            // Distinct columns among a rank's nnz(A)/P entries, of which (P−1)/P are rows
            // another rank owns.
            let fetched = distinct_rows(inner, nnz_a / p) * (p - 1.0) / p;
            p * fetched * (12.0 + (4.0 + s) * nnz_b / inner) + 24.0 * p * (p - 1.0)
        }
        Algorithm::Summa2d(g) => {
            summa2d_bytes(stats.nrows, stats.inner, nnz_a, nnz_b, s, g.rows, g.cols)
        }
        Algorithm::Summa3d(g) => {
            let c = g.layers.max(1);
            let per = (g.rows * g.cols) as f64;
            let p = per * c as f64;
            let slices = RowPartition::even(stats.inner, c);
            let mut bytes = 0.0;
            for l in 0..c {
                let k = slices.rows(l);
                let share = (k.end - k.start) as f64 / inner;
                bytes += summa2d_bytes(
                    stats.nrows,
                    k.end - k.start,
                    nnz_a * share,
                    nnz_b * share,
                    s,
                    g.rows,
                    g.cols,
                );
            }
            // The reduce-scatter: each layer's partial C, (c − 1)/c of it to the other layers.
            let cells = (stats.nrows as f64 * stats.ncols as f64).max(1.0);
            let partial = cells * (1.0 - (-(stats.flops as f64) / c as f64 / cells).exp());
            let cf = c as f64;
            bytes += cf * (cf - 1.0) * g.cols as f64 * 8.0 * stats.nrows as f64
                + (4.0 + s) * (cf - 1.0) * partial
                + 8.0 * p * (cf - 1.0);
            // The all-gather of C's nnz per rank.
            bytes + 8.0 * p * (p - 1.0)
        }
    }
}

/// Every algorithm and layout for `ranks` ranks: 1D; every `pr × pc` grid; every `pr × pc × c`
/// grid with `c > 1`.
fn layouts(ranks: usize) -> Vec<Algorithm> {
    let ranks = ranks.max(1);
    let mut all = vec![Algorithm::RowFetch { ranks }];
    for c in (1..=ranks).filter(|c| ranks % c == 0) {
        let per = ranks / c;
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

/// Every algorithm and layout for `ranks` ranks (1D; every `pr × pc` grid; every
/// `pr × pc × c` grid with `c > 1`) with its modelled volume ([`model_volume`]), least first:
/// the first is the one that moves the fewest bytes. [`choose_algorithm_by_time`] weighs
/// latency, the local work and the products too, where the machine is known.
pub fn choose_algorithm(stats: &ProductStats, ranks: usize) -> Vec<(Algorithm, f64)> {
    let mut scored: Vec<(Algorithm, f64)> = layouts(ranks)
        .into_iter()
        .map(|a| (a, model_volume(stats, a)))
        .collect();
    scored.sort_by(|x, y| x.1.total_cmp(&y.1));
    scored
}

/// Every algorithm and layout for `ranks` ranks, as [`choose_algorithm`], with its predicted
/// time on `machine` ([`model_time`] of a balanced product), least first: the first is the one
/// to use. Ties keep [`choose_algorithm`]'s order of enumeration (1D first).
///
/// Errors: those of [`model_time`] (a machine's parameter out of its range; more than
/// [`MAX_MODEL_RANKS`] ranks).
pub fn choose_algorithm_by_time(
    stats: &ProductStats,
    ranks: usize,
    machine: &Machine,
) -> Result<Vec<(Algorithm, TimeEstimate)>, ModelError> {
    let mut timed = layouts(ranks)
        .into_iter()
        .map(|a| model_time(stats, a, machine, 1.0).map(|t| (a, t)))
        .collect::<Result<Vec<_>, _>>()?;
    timed.sort_by(|x, y| x.1.total.total_cmp(&y.1.total));
    Ok(timed)
}

/// The time model's errors: inputs it cannot predict from.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ModelError {
    /// The algorithm's layout has no ranks (a grid with a zero dimension), or more than a
    /// `usize` counts.
    #[error("the layout {0:?} has no ranks or too many to count")]
    NoRanks(Algorithm),
    /// More ranks than the model enumerates (`MAX_MODEL_RANKS`).
    #[error("{ranks} ranks: the model handles at most {max}")]
    TooManyRanks {
        /// The layout's ranks.
        ranks: usize,
        /// The most the model handles.
        max: usize,
    },
    /// A parameter that is not a finite number in its range.
    #[error("{name} is {value}: {expected}")]
    Parameter {
        /// Which parameter.
        name: &'static str,
        /// Its value.
        value: f64,
        /// What it must be.
        expected: &'static str,
    },
    /// Operands whose shapes do not multiply.
    #[error("A is {a_rows}×{a_cols} and B {b_rows}×{b_cols}: they do not multiply")]
    Shape {
        /// Rows of A.
        a_rows: u64,
        /// Columns of A.
        a_cols: u64,
        /// Rows of B.
        b_rows: u64,
        /// Columns of B.
        b_cols: u64,
    },
    /// The per-rank counts of a layout do not fit in memory here.
    #[error("{0} counts do not fit in memory here")]
    TooLarge(u64),
    /// The sample of [`measure_entry_rate`] could not be packed, unpacked or merged.
    #[error("the entry rate's sample could not be measured: {0}")]
    Sample(String),
}

/// The most ranks the time model and [`critical_path_flops`] take (2^24): their work and memory
/// grow with the grid's dimensions.
pub const MAX_MODEL_RANKS: usize = 1 << 24;

/// A network as the time model sees it: a message of `b` bytes takes `latency + b / bandwidth`
/// seconds, and every rank can send and receive at `bandwidth` at once (full duplex).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Network {
    /// Bytes per second into (and out of) one rank; finite and above 0.
    pub bandwidth: f64,
    /// Seconds per message, whatever its size; finite and at least 0.
    pub latency: f64,
}

/// What the time model knows of the machine: its network and how fast one rank multiplies.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Machine {
    /// The network between ranks.
    pub network: Network,
    /// Intermediate products (multiply-adds of the local SpGEMM, as [`ProductStats::flops`]
    /// counts them) one rank computes per second; finite and above 0. Measure it with one rank
    /// on the whole product, on the device and threads each rank will have.
    pub rate: f64,
    /// Entries of sparse blocks one rank packs, unpacks or merges per second: the local work
    /// outside the products ([`model_entries`]), finite and above 0; `None` leaves it out of
    /// the prediction. Measure it with [`measure_entry_rate`] on the rank's threads.
    pub entry_rate: Option<f64>,
}

/// The communication one rank waits for in a product, as the time model counts it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CommEstimate {
    /// Bytes on one rank's critical path. Point-to-point exchanges (1D row fetch, the 3D
    /// reduce-scatter) count the bytes an average rank receives, `V / P` of the volume
    /// [`model_volume`] counts; a broadcast of `m` bytes among `q` ranks counts
    /// `2 (q − 1)/q · m` (scatter then all-gather, MPICH's broadcast of long messages; a
    /// binomial tree takes `m` for `q = 2` too), which summed over SUMMA's stages is twice the
    /// broadcasts' `V / P`.
    pub bytes: f64,
    /// Messages on one rank's critical path, each costing the latency: `q − 1` for an exchange
    /// or all-to-all among `q` ranks, `⌈log2 q⌉` for a broadcast, all-gather or all-reduce
    /// (binomial tree, recursive doubling), the agreements after each stage included.
    pub messages: f64,
    /// SUMMA's stages (one layer's for 3D); 1 for 1D row fetch.
    pub stages: u64,
}

/// A predicted time for one product, in seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TimeEstimate {
    /// Ranks of the layout.
    pub ranks: usize,
    /// The local products on the critical path: `flops / P · imbalance / rate`.
    pub compute: f64,
    /// The local work on blocks' entries outside the products, `entries / entry_rate` (0
    /// without an entry rate).
    pub local: f64,
    /// Entries one rank packs, unpacks and merges ([`model_entries`]).
    pub entries: f64,
    /// The network: `comm.bytes / bandwidth + comm.messages · latency`.
    pub communication: f64,
    /// `compute + local + communication`: none of the algorithms overlaps them (every
    /// stage's broadcasts are blocking and finish before its product starts).
    pub total: f64,
    /// What the communication is made of.
    pub comm: CommEstimate,
}

/// The ranks of `algorithm`'s layout.
fn ranks_of(algorithm: Algorithm) -> Result<usize, ModelError> {
    let p = match algorithm {
        Algorithm::RowFetch { ranks } => Some(ranks),
        Algorithm::Summa2d(g) => g.rows.checked_mul(g.cols),
        Algorithm::Summa3d(g) => g.size(),
    };
    match p {
        Some(0) | None => Err(ModelError::NoRanks(algorithm)),
        Some(p) if p > MAX_MODEL_RANKS => Err(ModelError::TooManyRanks {
            ranks: p,
            max: MAX_MODEL_RANKS,
        }),
        Some(p) => Ok(p),
    }
}

/// `⌈log2 q⌉`: the rounds of a tree among `q` ranks (0 for one).
fn rounds(q: usize) -> f64 {
    if q <= 1 {
        0.0
    } else {
        f64::from(usize::BITS - (q - 1).leading_zeros())
    }
}

/// One 2D SUMMA on a `pr × pc` grid (of `world` ranks in all, whose agreements span them all):
/// the bytes and messages on a rank's critical path, and the stages.
fn summa2d_comm(
    nrows: u64,
    inner: u64,
    nnz_a: f64,
    nnz_b: f64,
    s: f64,
    (pr, pc): (usize, usize),
) -> CommEstimate {
    let st = stages(inner, pr, pc);
    let stf = st as f64;
    let (prf, pcf) = (pr as f64, pc as f64);
    let p = prf * pcf;
    // Σ_s bytes(A(i, s)) over a grid row's stages, and Σ_s bytes(B(s, j)) over a column's.
    let a_row = 8.0 * nrows as f64 / prf * stf + (4.0 + s) * nnz_a / prf;
    let b_col = 8.0 * inner as f64 + (4.0 + s) * nnz_b / pcf;
    let spread = |q: f64| 2.0 * (q - 1.0) / q;
    let bytes = spread(pcf) * (a_row + 8.0 * stf)
        + spread(prf) * (b_col + 8.0 * stf)
        // The all-gather of C's nnz per rank.
        + 8.0 * (p - 1.0);
    // Each stage: the length and the data along the row and along the column, and two
    // agreements of the layer; before, the checks, the grid's check and the two splits
    // (seven agreements or reductions); after, the all-gather and the report's two reductions.
    let (lr, lc, lp) = (rounds(pr), rounds(pc), rounds(pr * pc));
    let messages = stf * (2.0 * lc + 2.0 * lr + 2.0 * lp) + 10.0 * lp;
    CommEstimate {
        bytes,
        messages,
        stages: st,
    }
}

/// The communication `algorithm` waits for on one rank in a product of `stats`: the bytes and
/// messages of [`CommEstimate`], from the same analytic volumes as [`model_volume`] (2D
/// exact for even blocks, 1D and 3D's reduce-scatter for entries scattered at random).
///
/// Errors: a layout of no ranks or more than [`MAX_MODEL_RANKS`].
pub fn model_comm(stats: &ProductStats, algorithm: Algorithm) -> Result<CommEstimate, ModelError> {
    model_comm_with(stats, algorithm, None)
}

/// [`model_comm`] with, for 3D SUMMA, the entries of one layer's partial product `C_l =
/// A(:, K_l)·B(K_l, :)` (the mean over layers) when they are known, measured or extrapolated,
/// instead of the estimate for random entries (`nnz(C_l) ≈ n m (1 − e^{−flops / (c n m)})`),
/// which for power-law operands can be far too high: their products collide more. Ignored by
/// the other algorithms; `None` is the estimate.
///
/// Errors: a layout of no ranks or more than [`MAX_MODEL_RANKS`]; a partial count that is not
/// finite and at least 0.
pub fn model_comm_with(
    stats: &ProductStats,
    algorithm: Algorithm,
    partial_nnz: Option<f64>,
) -> Result<CommEstimate, ModelError> {
    if let Some(nnz) = partial_nnz {
        check_parameter("partial_nnz", nnz, 0.0, false, "entries, at least 0")?;
    }
    let p = ranks_of(algorithm)?;
    let pf = p as f64;
    let s = stats.scalar_bytes as f64;
    let (nnz_a, nnz_b) = (stats.nnz_a as f64, stats.nnz_b as f64);
    Ok(match algorithm {
        Algorithm::RowFetch { .. } => {
            // Every rank sends and receives about V / P; the three exchanges of sizes, the
            // requests and the rows each reach every other rank, and five agreements and the
            // report's two reductions are trees.
            let volume = model_volume(stats, algorithm);
            CommEstimate {
                bytes: volume / pf,
                messages: 5.0 * (pf - 1.0) + 7.0 * rounds(p),
                stages: 1,
            }
        }
        Algorithm::Summa2d(g) => {
            summa2d_comm(stats.nrows, stats.inner, nnz_a, nnz_b, s, (g.rows, g.cols))
        }
        Algorithm::Summa3d(g) => {
            let c = g.layers;
            let cf = c as f64;
            // The layers run at once; the largest slice is the slowest.
            let (widest, share) = widest_slice(stats.inner, c);
            let layer = summa2d_comm(
                stats.nrows,
                widest,
                nnz_a * share,
                nnz_b * share,
                s,
                (g.rows, g.cols),
            );
            // The reduce-scatter: a rank sends (c − 1)/c of its partial block (estimated for
            // random entries, as model_volume does) and the row lengths of each piece, and
            // receives as much; an all-to-all of sizes and the exchange, along the fiber.
            let cells = (stats.nrows as f64 * stats.ncols as f64).max(1.0);
            let partial = partial_nnz
                .unwrap_or_else(|| cells * (1.0 - (-(stats.flops as f64) / cf / cells).exp()));
            let per_layer = (g.rows * g.cols) as f64;
            let reduce = (4.0 + s) * (cf - 1.0) / cf * partial / per_layer
                + 8.0 * (cf - 1.0) * stats.nrows as f64 / g.rows as f64
                + 8.0 * (cf - 1.0);
            CommEstimate {
                bytes: layer.bytes + reduce + 8.0 * (pf - 1.0),
                // The layer's SUMMA, two all-to-alls along the fiber, and the product's own
                // checks and agreements (about a dozen trees over all ranks).
                messages: layer.messages + 2.0 * (cf - 1.0) + 12.0 * rounds(p),
                stages: layer.stages,
            }
        }
    })
}

/// Entries that `products` products scattered uniformly at random over `cells` cells hit:
/// `cells · (1 − e^{−products / cells})` (0 for no cells).
fn hit(cells: f64, products: f64) -> f64 {
    if cells <= 0.0 {
        0.0
    } else {
        -cells * (-products / cells).exp_m1()
    }
}

/// Entries one rank of a 2D SUMMA on a `pr × pc` grid handles outside its products, for a
/// product of `flops` multiplications over an `nrows × inner` A of `nnz_a` entries and an
/// `inner × ncols` B of `nnz_b`: its own blocks packed once, the blocks it receives unpacked,
/// and from the second stage on the sum so far merged with the stage's product (entries of both
/// read), stage products from the random-entry estimate ([`hit`]) on its block of C.
fn summa2d_entries(
    (nrows, inner, ncols): (u64, u64, u64),
    (nnz_a, nnz_b, flops): (f64, f64, f64),
    (pr, pc): (usize, usize),
) -> f64 {
    let st = stages(inner, pr, pc);
    let (prf, pcf) = (pr as f64, pc as f64);
    let p = prf * pcf;
    let packed = (nnz_a + nnz_b) / p;
    let unpacked = nnz_a / prf * (pcf - 1.0) / pcf + nnz_b / pcf * (prf - 1.0) / prf;
    let cells = nrows as f64 / prf * (ncols as f64 / pcf);
    let per_stage = flops / p / st.max(1) as f64;
    let mut merged = 0.0;
    for done in 1..st {
        merged += hit(cells, per_stage * done as f64) + hit(cells, per_stage);
    }
    if p > 1.0 {
        packed + unpacked + merged
    } else {
        merged
    }
}

/// Entries of sparse blocks one rank packs, unpacks or merges in `algorithm` for a product of
/// `stats`, outside its local products (those the products write are in the rate): for 1D row
/// fetch the rows of B it fetches, packed by their owners and unpacked (random entries, as
/// [`model_volume`]); for 2D SUMMA its blocks packed, the blocks it receives unpacked and each
/// stage's product merged into the sum of the earlier ones; for 3D SUMMA a layer's 2D SUMMA on
/// its slice, then the rank's piece of the partial product `C_l` cut and packed, the pieces
/// from the other layers unpacked, and all of them summed. The entries of stage products and of
/// `C_l` are the random-entry estimate unless `partial_nnz` (3D: the mean `nnz(C_l)`) is
/// given. One rank handles none.
///
/// Errors: a layout of no ranks or more than [`MAX_MODEL_RANKS`]; a partial count that is not
/// finite and at least 0.
pub fn model_entries(
    stats: &ProductStats,
    algorithm: Algorithm,
    partial_nnz: Option<f64>,
) -> Result<f64, ModelError> {
    if let Some(nnz) = partial_nnz {
        check_parameter("partial_nnz", nnz, 0.0, false, "entries, at least 0")?;
    }
    let p = ranks_of(algorithm)?;
    let (nnz_a, nnz_b) = (stats.nnz_a as f64, stats.nnz_b as f64);
    let flops = stats.flops as f64;
    let shape = (stats.nrows, stats.inner, stats.ncols);
    Ok(match algorithm {
        Algorithm::RowFetch { .. } => {
            let pf = p as f64;
            let inner = stats.inner.max(1) as f64;
            // Packed by their owners, unpacked here: about as many either way on average.
            2.0 * distinct_rows(inner, nnz_a / pf) * (pf - 1.0) / pf * nnz_b / inner
        }
        Algorithm::Summa2d(g) => summa2d_entries(shape, (nnz_a, nnz_b, flops), (g.rows, g.cols)),
        Algorithm::Summa3d(g) => {
            let c = g.layers;
            let cf = c as f64;
            let (widest, share) = widest_slice(stats.inner, c);
            let layer = summa2d_entries(
                (stats.nrows, widest, stats.ncols),
                (nnz_a * share, nnz_b * share, flops * share),
                (g.rows, g.cols),
            );
            if c == 1 {
                layer
            } else {
                let cells = (stats.nrows as f64 * stats.ncols as f64).max(1.0);
                let partial = partial_nnz.unwrap_or_else(|| hit(cells, flops / cf));
                let mine = partial / (g.rows * g.cols) as f64;
                // Cut and packed: (c − 1)/c of it; unpacked: as much from the others; summed:
                // all c pieces, as many entries as the rank's piece of every layer's C_l.
                layer + mine * (2.0 * (cf - 1.0) / cf) + mine
            }
        }
    })
}

/// Entries per second this rank packs, unpacks and merges (`Machine::entry_rate`), measured on
/// `sample`: its rows packed into a message and unpacked (as 1D row fetch and SUMMA move rows),
/// and the sample merged with itself (as SUMMA sums stage products), on the current rayon pool;
/// the best of `reps` rounds (at least one). Time it on a sample the size of a rank's blocks:
/// a block far smaller than the caches overstates the rate.
///
/// Errors: a sample with no entries ([`ModelError::Parameter`]); [`ModelError::Sample`] where
/// its rows or their sum cannot be built (memory).
pub fn measure_entry_rate<T: MpiScalar>(sample: &Csr<T>, reps: usize) -> Result<f64, ModelError> {
    let entries = sample.nnz();
    if entries == 0 {
        return Err(ModelError::Parameter {
            name: "sample entries",
            value: 0.0,
            expected: "a sample with entries",
        });
    }
    let mut best = f64::INFINITY;
    for _ in 0..reps.max(1) {
        let start = std::time::Instant::now();
        let bytes = crate::wire::pack_rows(sample, 0..sample.nrows());
        let (mut offsets, mut cols, mut values) = (vec![0u64], Vec::new(), Vec::<T>::new());
        let out = crate::wire::RowsOut {
            offsets: &mut offsets,
            cols: &mut cols,
            values: &mut values,
        };
        crate::wire::unpack_rows(&bytes, sample.nrows(), sample.ncols() as u64, out, (0, 0))
            .map_err(|e| ModelError::Sample(e.to_string()))?;
        let sum =
            crate::summa::add(sample, sample).map_err(|e| ModelError::Sample(e.to_string()))?;
        std::hint::black_box((&cols, &values, &sum));
        best = best.min(start.elapsed().as_secs_f64());
    }
    // Packed, unpacked, and two operands' entries merged.
    Ok(4.0 * entries as f64 / best.max(f64::MIN_POSITIVE))
}

/// Checks that `value` is finite and at least (or above, `strict`) `min`.
fn check_parameter(
    name: &'static str,
    value: f64,
    min: f64,
    strict: bool,
    expected: &'static str,
) -> Result<(), ModelError> {
    let ok = value.is_finite() && if strict { value > min } else { value >= min };
    if ok {
        Ok(())
    } else {
        Err(ModelError::Parameter {
            name,
            value,
            expected,
        })
    }
}

/// The predicted time of `algorithm` for a product of `stats` on `machine`: the local products
/// on the critical path (`flops / P`, times `imbalance`, over `machine.rate`) plus the
/// communication of [`model_comm`] (`bytes / bandwidth + messages · latency`). The two add:
/// 1D row fetch multiplies after all rows arrived, and 2D and 3D SUMMA's broadcasts of a stage
/// are blocking and finish before its product starts (a stage's product does not overlap the
/// next stage's broadcasts), so the sum over stages is the sum of the totals.
///
/// `imbalance` (at least 1) is the critical path's multiplications over the mean's,
/// `critical_path_flops · P / flops`, from [`critical_path_flops`] when the operands are at
/// hand; 1 for a perfectly balanced product. On one rank the time is `flops / rate`.
///
/// With `machine.entry_rate`, the local work on entries outside the products (packing and
/// unpacking blocks and rows, SUMMA's merge of each stage's product into C, 3D's cutting and
/// summing of the partial products: [`model_entries`]) adds `entries / entry_rate`. Not
/// modelled: a local rate that changes with the block's size or shape.
///
/// Errors: a layout of no ranks or more than [`MAX_MODEL_RANKS`]; a rate or bandwidth that is
/// not finite and above 0, a latency not finite and at least 0, an imbalance not finite and at
/// least 1.
pub fn model_time(
    stats: &ProductStats,
    algorithm: Algorithm,
    machine: &Machine,
    imbalance: f64,
) -> Result<TimeEstimate, ModelError> {
    model_time_with(stats, algorithm, machine, imbalance, None)
}

/// [`model_time`] with a known partial product's size for 3D SUMMA (see [`model_comm_with`]).
///
/// Errors: those of [`model_time`] and [`model_comm_with`].
pub fn model_time_with(
    stats: &ProductStats,
    algorithm: Algorithm,
    machine: &Machine,
    imbalance: f64,
    partial_nnz: Option<f64>,
) -> Result<TimeEstimate, ModelError> {
    check_parameter(
        "rate",
        machine.rate,
        0.0,
        true,
        "products per second above 0",
    )?;
    check_parameter(
        "bandwidth",
        machine.network.bandwidth,
        0.0,
        true,
        "bytes per second above 0",
    )?;
    check_parameter(
        "latency",
        machine.network.latency,
        0.0,
        false,
        "seconds, at least 0",
    )?;
    check_parameter("imbalance", imbalance, 1.0, false, "at least 1")?;
    if let Some(rate) = machine.entry_rate {
        check_parameter("entry_rate", rate, 0.0, true, "entries per second above 0")?;
    }
    let ranks = ranks_of(algorithm)?;
    let comm = model_comm_with(stats, algorithm, partial_nnz)?;
    let entries = model_entries(stats, algorithm, partial_nnz)?;
    let compute = stats.flops as f64 / ranks as f64 * imbalance / machine.rate;
    let local = machine.entry_rate.map_or(0.0, |rate| entries / rate);
    let communication =
        comm.bytes / machine.network.bandwidth + comm.messages * machine.network.latency;
    Ok(TimeEstimate {
        ranks,
        compute,
        local,
        entries,
        communication,
        total: compute + local + communication,
        comm,
    })
}

/// Entries of `a` in each column, counted separately for each part of `parts` over its rows:
/// `counts[part · ncols + column]`.
fn column_counts_by_rows<T: MpiScalar>(
    a: &Csr<T>,
    parts: &RowPartition,
) -> Result<Vec<u64>, ModelError> {
    let len = (parts.ranks() as u64).saturating_mul(a.ncols() as u64);
    let mut counts: Vec<u64> = Vec::new();
    let n = usize::try_from(len).map_err(|_| ModelError::TooLarge(len))?;
    counts
        .try_reserve_exact(n)
        .map_err(|_| ModelError::TooLarge(len))?;
    counts.resize(n, 0);
    for part in 0..parts.ranks() {
        let rows = parts.rows(part);
        let base = part * a.ncols();
        for r in rows.start as usize..rows.end as usize {
            for &c in a.row(r).0 {
                counts[base + c as usize] += 1;
            }
        }
    }
    Ok(counts)
}

/// Entries of `b` in each row, counted separately for each part of `parts` over its columns:
/// `counts[part · nrows + row]`.
fn row_counts_by_columns<T: MpiScalar>(
    b: &Csr<T>,
    parts: &RowPartition,
) -> Result<Vec<u64>, ModelError> {
    let len = (parts.ranks() as u64).saturating_mul(b.nrows() as u64);
    let mut counts: Vec<u64> = Vec::new();
    let n = usize::try_from(len).map_err(|_| ModelError::TooLarge(len))?;
    counts
        .try_reserve_exact(n)
        .map_err(|_| ModelError::TooLarge(len))?;
    counts.resize(n, 0);
    for r in 0..b.nrows() {
        for &c in b.row(r).0 {
            if let Some(part) = parts.owner(u64::from(c)) {
                counts[part * b.nrows() + r] += 1;
            }
        }
    }
    Ok(counts)
}

/// The multiplications on `algorithm`'s critical path for `A·B` in its even layout (as
/// `scatter` and the conversions make it), from the whole operands: for 1D row fetch the
/// largest rank's; for 2D SUMMA the sum over stages of the largest rank's in each stage (every
/// stage ends with an agreement of all ranks, so the slowest sets the pace); for 3D the largest
/// layer's such sum (the layers meet after their SUMMA). `critical · P / flops` is the
/// imbalance [`model_time`] takes.
///
/// Errors: a layout of no ranks or more than [`MAX_MODEL_RANKS`], shapes that do not multiply,
/// per-part counts (`(pr + pc) · k` of them) that do not fit in memory.
pub fn critical_path_flops<T: MpiScalar>(
    a: &Csr<T>,
    b: &Csr<T>,
    algorithm: Algorithm,
) -> Result<u64, ModelError> {
    let p = ranks_of(algorithm)?;
    if a.ncols() != b.nrows() {
        return Err(ModelError::Shape {
            a_rows: a.nrows() as u64,
            a_cols: a.ncols() as u64,
            b_rows: b.nrows() as u64,
            b_cols: b.ncols() as u64,
        });
    }
    let (n, k, m) = (a.nrows() as u64, a.ncols() as u64, b.ncols() as u64);
    let (pr, pc, c) = match algorithm {
        Algorithm::RowFetch { .. } => {
            let rows = RowPartition::even(n, p);
            let most = (0..p)
                .map(|r| {
                    let range = rows.rows(r);
                    (range.start as usize..range.end as usize).fold(0u64, |f, row| {
                        a.row(row)
                            .0
                            .iter()
                            .fold(f, |f, &col| f.saturating_add(b.row_nnz(col as usize)))
                    })
                })
                .max()
                .unwrap_or(0);
            return Ok(most);
        }
        Algorithm::Summa2d(g) => (g.rows, g.cols, 1),
        Algorithm::Summa3d(g) => (g.rows, g.cols, g.layers),
    };
    let row_parts = RowPartition::even(n, pr);
    let col_parts = RowPartition::even(m, pc);
    let a_counts = column_counts_by_rows(a, &row_parts)?;
    let b_counts = row_counts_by_columns(b, &col_parts)?;
    let slices = RowPartition::even(k, c);
    let mut slowest = 0u64;
    for l in 0..c {
        let slice = slices.rows(l);
        let width = slice.end - slice.start;
        let mut cuts: Vec<u64> = RowPartition::even(width, pc)
            .offsets()
            .iter()
            .chain(RowPartition::even(width, pr).offsets())
            .map(|&x| x + slice.start)
            .collect();
        cuts.sort_unstable();
        cuts.dedup();
        let mut layer = 0u64;
        for piece in cuts.windows(2) {
            let mut most = 0u64;
            for i in 0..pr {
                for j in 0..pc {
                    let f = (piece[0]..piece[1]).fold(0u64, |f, kk| {
                        let (ai, bj) = (i * k as usize + kk as usize, j * k as usize + kk as usize);
                        f.saturating_add(a_counts[ai].saturating_mul(b_counts[bj]))
                    });
                    most = most.max(f);
                }
            }
            layer = layer.saturating_add(most);
        }
        slowest = slowest.max(layer);
    }
    Ok(slowest)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(nnz: u64, n: u64, flops: u64) -> ProductStats {
        ProductStats {
            nrows: n,
            inner: n,
            ncols: n,
            nnz_a: nnz,
            nnz_b: nnz,
            flops,
            scalar_bytes: 8,
        }
    }

    #[test]
    fn one_rank_moves_nothing_and_choices_are_ordered() {
        let s = stats(1000, 100, 10_000);
        assert_eq!(model_volume(&s, Algorithm::RowFetch { ranks: 1 }), 0.0);
        assert_eq!(model_volume(&s, Algorithm::Summa2d(Grid::new(1, 1))), 0.0);
        assert_eq!(
            model_volume(&s, Algorithm::Summa3d(Grid3::new(1, 1, 1))),
            0.0
        );
        let choices = choose_algorithm(&s, 16);
        // 1D, five 2D grids, and the 3D grids of c = 2, 4, 8, 16 (4 + 3 + 2 + 1).
        assert_eq!(choices.len(), 1 + 5 + 10);
        assert!(choices.windows(2).all(|w| w[0].1 <= w[1].1));
        // Dense rows reach every row of B: 1D moves about (P − 1) copies of B, and a square
        // grid beats it.
        let dense = stats(100 * 100, 100, 100 * 100 * 100);
        let one_d = model_volume(&dense, Algorithm::RowFetch { ranks: 16 });
        let two_d = model_volume(&dense, Algorithm::Summa2d(Grid::new(4, 4)));
        assert!(one_d > 14.0 * 12.0 * 10_000.0 && two_d < one_d);
    }

    #[test]
    fn flops_come_from_column_and_row_counts() {
        let a = Csr::try_new(2, 3, vec![0, 2, 3], vec![0, 2, 2], vec![1.0f64; 3]).unwrap();
        let b = Csr::try_new(3, 2, vec![0, 1, 1, 3], vec![0, 0, 1], vec![1.0f64; 3]).unwrap();
        let s = ProductStats::of(&a, &b);
        assert_eq!(s.flops, 1 + 2 * 2);
        assert_eq!(
            (s.nrows, s.inner, s.ncols, s.nnz_a, s.nnz_b),
            (2, 3, 2, 3, 3)
        );
    }

    fn machine(bandwidth: f64, latency: f64, rate: f64) -> Machine {
        Machine {
            network: Network { bandwidth, latency },
            rate,
            entry_rate: None,
        }
    }

    #[test]
    fn a_hand_computed_2d_time() {
        // 2×2 grid, k = 100: two stages. Per rank, A's grid row sends 8·50·2 + 12·500 = 6800
        // bytes and the lengths 2·8, as B's grid column (8·100 + 12·500 + 16); a broadcast
        // between 2 ranks costs its bytes once; the all-gather 8·3. Messages: 2 stages of
        // (2 + 2 + 2·2) and 10 trees of 2 rounds.
        let s = stats(1000, 100, 10_000);
        let m = machine(1e6, 1e-3, 1e6);
        let t = model_time(&s, Algorithm::Summa2d(Grid::new(2, 2)), &m, 1.0).unwrap();
        assert_eq!(t.comm.stages, 2);
        assert_eq!(t.comm.bytes, 6816.0 * 2.0 + 24.0);
        assert_eq!(t.comm.messages, 36.0);
        let close = |x: f64, y: f64| (x - y).abs() <= 1e-12 * y.abs().max(1.0);
        assert!(close(t.compute, 2.5e-3), "{t:?}");
        assert!(close(t.communication, 13_656.0 / 1e6 + 36e-3), "{t:?}");
        assert!(close(t.total, 2.5e-3 + 0.013_656 + 0.036), "{t:?}");
        // Imbalance scales the compute only.
        let u = model_time(&s, Algorithm::Summa2d(Grid::new(2, 2)), &m, 2.0).unwrap();
        assert!(close(u.compute, 5e-3) && u.communication == t.communication);
    }

    #[test]
    fn hand_computed_entries_of_each_algorithm() {
        let close = |x: f64, y: f64| (x - y).abs() <= 1e-9 * y.abs().max(1.0);
        let s = stats(1000, 100, 10_000);
        // One rank handles no entries outside its product.
        for alg in [
            Algorithm::RowFetch { ranks: 1 },
            Algorithm::Summa2d(Grid::new(1, 1)),
            Algorithm::Summa3d(Grid3::new(1, 1, 1)),
        ] {
            assert_eq!(model_entries(&s, alg, None).unwrap(), 0.0, "{alg:?}");
        }
        // 1D on 2 ranks: 500 entries of A reach 100 (1 − 0.99^500) distinct rows, half of
        // them another rank's, 10 entries each, packed there and unpacked here.
        let one_d = model_entries(&s, Algorithm::RowFetch { ranks: 2 }, None).unwrap();
        let distinct = 100.0 * (1.0 - 0.99f64.powi(500));
        assert!(close(one_d, 2.0 * distinct / 2.0 * 10.0), "{one_d}");
        // 2D on 2×2: two stages; own blocks 2000 / 4 packed, A's and B's other blocks
        // 250 + 250 unpacked; the second stage's 1250 products merged with the first's on a
        // block of 50 × 50, each 2500 (1 − e^−0.5) entries.
        let two_d = model_entries(&s, Algorithm::Summa2d(Grid::new(2, 2)), None).unwrap();
        let stage = 2500.0 * (1.0 - (-0.5f64).exp());
        assert!(close(two_d, 500.0 + 500.0 + 2.0 * stage), "{two_d}");
        // 3D on 1×1×2: each layer alone (nothing moved within it), then the rank's partial
        // product, 10^4 (1 − e^−0.5) entries, half packed, as many unpacked, all summed.
        let three_d = model_entries(&s, Algorithm::Summa3d(Grid3::new(1, 1, 2)), None).unwrap();
        let partial = 10_000.0 * (1.0 - (-0.5f64).exp());
        assert!(close(three_d, 2.0 * partial), "{three_d}");
        // A known partial product replaces the estimate.
        let known = model_entries(&s, Algorithm::Summa3d(Grid3::new(1, 1, 2)), Some(100.0));
        assert!(close(known.unwrap(), 200.0));
        assert!(model_entries(&s, Algorithm::Summa3d(Grid3::new(1, 1, 2)), Some(-1.0)).is_err());
    }

    #[test]
    fn the_entry_rate_adds_the_local_work_and_the_choice_is_by_time() {
        let s = stats(100_000, 10_000, 2_000_000);
        let mut m = machine(1e9, 1e-6, 1e8);
        let without = choose_algorithm_by_time(&s, 4, &m).unwrap();
        m.entry_rate = Some(1e7);
        let with = choose_algorithm_by_time(&s, 4, &m).unwrap();
        // Every layout of the volume model's list, ranked by predicted time.
        assert_eq!(with.len(), choose_algorithm(&s, 4).len());
        assert!(with.windows(2).all(|w| w[0].1.total <= w[1].1.total));
        for (alg, t) in &with {
            let alone = model_time(&s, *alg, &m, 1.0).unwrap();
            assert_eq!(t, &alone);
            let entries = model_entries(&s, *alg, None).unwrap();
            assert_eq!((t.entries, t.local), (entries, entries / 1e7));
            assert_eq!(t.total, t.compute + t.local + t.communication);
            let before = without.iter().find(|(a, _)| a == alg).unwrap().1;
            assert_eq!(before.local, 0.0);
            let earlier = t.compute + t.communication;
            assert!((before.total - earlier).abs() <= 1e-12 * earlier, "{alg:?}");
        }
        // Where entries are dear, 1D comes first: on these random operands it handles the
        // fewest (the rows it fetches; SUMMA merges every stage's product).
        m.entry_rate = Some(1.0);
        let dear = choose_algorithm_by_time(&s, 4, &m).unwrap();
        assert_eq!(dear[0].0, Algorithm::RowFetch { ranks: 4 });
        m.entry_rate = Some(0.0);
        assert!(matches!(
            choose_algorithm_by_time(&s, 4, &m),
            Err(ModelError::Parameter {
                name: "entry_rate",
                ..
            })
        ));
    }

    #[test]
    fn the_entry_rate_is_measured_on_a_sample() {
        let a = hetsparse::generate::rmat::<f64>(8, 8, 3);
        let rate = measure_entry_rate(&a, 2).unwrap();
        assert!(rate.is_finite() && rate > 0.0, "{rate}");
        let empty = Csr::<f64>::zeros(4, 4).unwrap();
        assert!(matches!(
            measure_entry_rate(&empty, 1),
            Err(ModelError::Parameter { .. })
        ));
    }

    #[test]
    fn one_rank_is_pure_compute() {
        let s = stats(5000, 1000, 123_456);
        let m = machine(1e9, 1e-6, 1e8);
        for alg in [
            Algorithm::RowFetch { ranks: 1 },
            Algorithm::Summa2d(Grid::new(1, 1)),
            Algorithm::Summa3d(Grid3::new(1, 1, 1)),
        ] {
            let t = model_time(&s, alg, &m, 1.0).unwrap();
            assert_eq!(t.communication, 0.0, "{alg:?}");
            assert_eq!(t.total, 123_456.0 / 1e8, "{alg:?}");
        }
    }

    #[test]
    fn time_falls_with_bandwidth_and_rises_with_latency() {
        let s = stats(1_000_000, 100_000, 50_000_000);
        let algs = [
            Algorithm::RowFetch { ranks: 16 },
            Algorithm::Summa2d(Grid::new(4, 4)),
            Algorithm::Summa2d(Grid::new(2, 8)),
            Algorithm::Summa3d(Grid3::new(2, 2, 4)),
            Algorithm::Summa3d(Grid3::new(1, 1, 16)),
        ];
        for alg in algs {
            let mut last = f64::INFINITY;
            for bw in [1e6, 1e7, 1e8, 1e9, 1e10] {
                let t = model_time(&s, alg, &machine(bw, 1e-6, 1e8), 1.0).unwrap();
                assert!(t.total < last, "{alg:?} at {bw} B/s: {t:?}");
                last = t.total;
            }
            let mut last = 0.0;
            for lat in [0.0, 1e-6, 1e-5, 1e-4] {
                let t = model_time(&s, alg, &machine(1e9, lat, 1e8), 1.0).unwrap();
                assert!(t.total > last, "{alg:?} at {lat} s: {t:?}");
                last = t.total;
            }
        }
        // More ranks on a fixed product: less compute each.
        let m = machine(1e9, 1e-6, 1e8);
        let t4 = model_time(&s, Algorithm::Summa2d(Grid::new(2, 2)), &m, 1.0).unwrap();
        let t16 = model_time(&s, Algorithm::Summa2d(Grid::new(4, 4)), &m, 1.0).unwrap();
        assert!(t16.compute < t4.compute);
    }

    #[test]
    fn odd_inputs_are_errors_not_panics() {
        let s = stats(1000, 100, 10_000);
        let m = machine(1e9, 1e-6, 1e8);
        for alg in [
            Algorithm::RowFetch { ranks: 0 },
            Algorithm::Summa2d(Grid::new(0, 4)),
            Algorithm::Summa3d(Grid3::new(3, 0, 2)),
            Algorithm::Summa3d(Grid3::new(usize::MAX, 2, 2)),
        ] {
            assert_eq!(
                model_time(&s, alg, &m, 1.0),
                Err(ModelError::NoRanks(alg)),
                "{alg:?}"
            );
        }
        assert!(matches!(
            model_comm(&s, Algorithm::RowFetch { ranks: 1 << 30 }),
            Err(ModelError::TooManyRanks { .. })
        ));
        let alg = Algorithm::Summa2d(Grid::new(2, 2));
        for (bad, name) in [
            (machine(0.0, 1e-6, 1e8), "bandwidth"),
            (machine(f64::NAN, 1e-6, 1e8), "bandwidth"),
            (machine(1e9, -1.0, 1e8), "latency"),
            (machine(1e9, f64::INFINITY, 1e8), "latency"),
            (machine(1e9, 1e-6, 0.0), "rate"),
        ] {
            match model_time(&s, alg, &bad, 1.0) {
                Err(ModelError::Parameter { name: n, .. }) => assert_eq!(n, name),
                other => panic!("{other:?}"),
            }
        }
        assert!(matches!(
            model_time(&s, alg, &m, 0.5),
            Err(ModelError::Parameter {
                name: "imbalance",
                ..
            })
        ));
        // Counts at the top of u64 and an empty product stay finite.
        let huge = ProductStats {
            nrows: u64::MAX,
            inner: u64::MAX,
            ncols: u64::MAX,
            nnz_a: u64::MAX,
            nnz_b: u64::MAX,
            flops: u64::MAX,
            scalar_bytes: 16,
        };
        let empty = ProductStats {
            nrows: 0,
            inner: 0,
            ncols: 0,
            nnz_a: 0,
            nnz_b: 0,
            flops: 0,
            scalar_bytes: 8,
        };
        for st in [huge, empty] {
            for alg in [
                Algorithm::RowFetch { ranks: 64 },
                Algorithm::Summa2d(Grid::new(8, 8)),
                Algorithm::Summa3d(Grid3::new(4, 4, 4)),
            ] {
                let t = model_time(&st, alg, &m, 1.0).unwrap();
                assert!(
                    t.total.is_finite() && t.total >= 0.0,
                    "{st:?} {alg:?}: {t:?}"
                );
            }
        }
    }

    #[test]
    fn a_known_partial_product_replaces_the_estimate() {
        // 1×1×2: no SUMMA traffic; the reduce-scatter sends half a partial of 1000 entries
        // (12 bytes each), the row lengths of 100 rows (8 bytes each) and one size, plus the
        // all-gather's 8 bytes.
        let s = stats(1000, 100, 10_000);
        let alg = Algorithm::Summa3d(Grid3::new(1, 1, 2));
        let c = model_comm_with(&s, alg, Some(1000.0)).unwrap();
        assert_eq!(c.bytes, 12.0 * 500.0 + 800.0 + 8.0 + 8.0);
        let guessed = model_comm(&s, alg).unwrap();
        assert!(guessed.bytes > c.bytes);
        assert!(matches!(
            model_comm_with(&s, alg, Some(f64::NAN)),
            Err(ModelError::Parameter {
                name: "partial_nnz",
                ..
            })
        ));
        // Other algorithms ignore it.
        let two = Algorithm::Summa2d(Grid::new(2, 2));
        assert_eq!(model_comm_with(&s, two, Some(1.0)), model_comm(&s, two));
    }

    #[test]
    fn critical_path_of_a_hand_computed_product() {
        // A = I (2×2), B full: 4 multiplications. On a 2×2 grid each of the two stages keeps
        // one rank busy with 1, so 2 on the critical path (imbalance 2); 1D on 2 ranks and 3D
        // on 1×1×2 give each rank 2.
        let a = Csr::try_new(2, 2, vec![0, 1, 2], vec![0, 1], vec![1.0f64; 2]).unwrap();
        let b = Csr::try_new(2, 2, vec![0, 2, 4], vec![0, 1, 0, 1], vec![1.0f64; 4]).unwrap();
        let f = |alg| critical_path_flops(&a, &b, alg).unwrap();
        assert_eq!(f(Algorithm::RowFetch { ranks: 1 }), 4);
        assert_eq!(f(Algorithm::Summa2d(Grid::new(1, 1))), 4);
        assert_eq!(f(Algorithm::Summa2d(Grid::new(2, 2))), 2);
        assert_eq!(f(Algorithm::RowFetch { ranks: 2 }), 2);
        assert_eq!(f(Algorithm::Summa3d(Grid3::new(1, 1, 2))), 2);
        assert_eq!(f(Algorithm::Summa2d(Grid::new(1, 2))), 2);
        assert_eq!(
            critical_path_flops(&a, &b, Algorithm::RowFetch { ranks: 0 }),
            Err(ModelError::NoRanks(Algorithm::RowFetch { ranks: 0 }))
        );
        let c = Csr::try_new(3, 1, vec![0, 1, 1, 1], vec![0], vec![1.0f64]).unwrap();
        assert!(matches!(
            critical_path_flops(&a, &c, Algorithm::RowFetch { ranks: 1 }),
            Err(ModelError::Shape { .. })
        ));
    }
}
