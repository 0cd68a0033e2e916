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
            let per_rank = nnz_a / p;
            let distinct = inner * (1.0 - (per_rank * (-1.0 / inner).ln_1p()).exp());
            let fetched = distinct * (p - 1.0) / p;
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

/// Every algorithm and layout for `ranks` ranks (1D; every `pr × pc` grid; every
/// `pr × pc × c` grid with `c > 1`) with its modelled volume ([`model_volume`]), least first:
/// the first is the one to use.
pub fn choose_algorithm(stats: &ProductStats, ranks: usize) -> Vec<(Algorithm, f64)> {
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
    let mut scored: Vec<(Algorithm, f64)> = all
        .into_iter()
        .map(|a| (a, model_volume(stats, a)))
        .collect();
    scored.sort_by(|x, y| x.1.total_cmp(&y.1));
    scored
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
}
