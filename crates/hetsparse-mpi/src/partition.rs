//! Which rank owns which rows.

use std::ops::Range;

/// A 1D partition of `nrows` rows over `ranks` ranks: rank `r` owns the contiguous rows
/// `offsets[r]..offsets[r + 1]`. Every rank holds the whole table.
///
/// ```
/// use hetsparse_mpi::RowPartition;
/// let p = RowPartition::even(10, 3);
/// assert_eq!(p.offsets(), &[0, 4, 7, 10]);
/// assert_eq!(p.owner(6), Some(1));
/// assert_eq!(p.rows(2), 7..10);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowPartition {
    offsets: Vec<u64>,
}

impl RowPartition {
    /// Rows dealt out as evenly as can be, the first `nrows % ranks` ranks one row more.
    /// `ranks` of 0 is taken as 1.
    pub fn even(nrows: u64, ranks: usize) -> Self {
        let ranks = ranks.max(1) as u64;
        let (base, extra) = (nrows / ranks, nrows % ranks);
        let mut offsets = Vec::with_capacity(ranks as usize + 1);
        let mut at = 0u64;
        offsets.push(0);
        for r in 0..ranks {
            at += base + u64::from(r < extra);
            offsets.push(at);
        }
        RowPartition { offsets }
    }

    /// Rows split so that every rank holds about as many entries plus rows as the others,
    /// from a CSR matrix's row offsets (`nrows + 1` of them, not decreasing): for a product
    /// whose rows of A cost about their entries (A·B with B's rows of similar length, such as
    /// AMG's R·(AP)), where an even split of rows leaves ranks of denser rows doing more.
    /// `ranks` of 0 is taken as 1.
    ///
    /// ```
    /// use hetsparse_mpi::RowPartition;
    /// // Rows of 1, 1, 1, 1, 4 and 4 entries over 2 ranks: 4 rows of 4 entries on rank 0,
    /// // 2 rows of 8 on rank 1.
    /// let p = RowPartition::by_entries(&[0, 1, 2, 3, 4, 8, 12], 2);
    /// assert_eq!(p.offsets(), &[0, 4, 6]);
    /// ```
    pub fn by_entries(row_offsets: &[u64], ranks: usize) -> Self {
        let ranks = ranks.max(1) as u64;
        let nrows = row_offsets.len().saturating_sub(1);
        // Cost of the rows before row i: their entries and the rows themselves.
        let before = |i: usize| {
            row_offsets[i]
                .saturating_sub(row_offsets[0])
                .saturating_add(i as u64)
        };
        let total = if nrows == 0 { 0 } else { before(nrows) };
        let mut offsets = Vec::with_capacity(ranks as usize + 1);
        offsets.push(0u64);
        for r in 1..ranks {
            let target = (u128::from(total) * u128::from(r) / u128::from(ranks)) as u64;
            // The first row whose cost before it reaches the target.
            let (mut lo, mut hi) = (0usize, nrows);
            while lo < hi {
                let mid = lo + (hi - lo) / 2;
                if before(mid) < target {
                    lo = mid + 1;
                } else {
                    hi = mid;
                }
            }
            // Of the rows on either side of the target, the nearer.
            if lo > 0 && target - before(lo - 1) < before(lo).saturating_sub(target) {
                lo -= 1;
            }
            let last = *offsets.last().unwrap_or(&0);
            offsets.push((lo as u64).max(last));
        }
        offsets.push(nrows as u64);
        RowPartition { offsets }
    }

    /// A partition from each rank's number of rows.
    pub fn from_counts(counts: &[u64]) -> Self {
        let mut offsets = Vec::with_capacity(counts.len() + 1);
        let mut at = 0u64;
        offsets.push(0);
        for &c in counts {
            at = at.saturating_add(c);
            offsets.push(at);
        }
        RowPartition { offsets }
    }

    /// A partition from its offsets: `None` unless they start at 0 and never decrease, with
    /// at least one rank.
    pub fn from_offsets(offsets: Vec<u64>) -> Option<Self> {
        (offsets.len() >= 2 && offsets[0] == 0 && offsets.windows(2).all(|w| w[0] <= w[1]))
            .then_some(RowPartition { offsets })
    }

    /// The offsets, one per rank and one more.
    pub fn offsets(&self) -> &[u64] {
        &self.offsets
    }

    /// The number of ranks.
    pub fn ranks(&self) -> usize {
        self.offsets.len() - 1
    }

    /// The number of rows.
    pub fn nrows(&self) -> u64 {
        self.offsets[self.offsets.len() - 1]
    }

    /// Rank `rank`'s rows (empty past the last rank).
    pub fn rows(&self, rank: usize) -> Range<u64> {
        match (self.offsets.get(rank), self.offsets.get(rank + 1)) {
            (Some(&s), Some(&e)) => s..e,
            _ => 0..0,
        }
    }

    /// The rank that owns row `row`, `None` past the last row.
    pub fn owner(&self, row: u64) -> Option<usize> {
        if row >= self.nrows() {
            return None;
        }
        // The last offset <= row, skipping ranks that own no rows.
        Some(self.offsets.partition_point(|&o| o <= row) - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_and_ranges_agree() {
        for (n, p) in [(0u64, 1usize), (1, 3), (10, 3), (7, 7), (100, 6)] {
            let part = RowPartition::even(n, p);
            assert_eq!(part.ranks(), p);
            assert_eq!(part.nrows(), n);
            for r in 0..p {
                for row in part.rows(r) {
                    assert_eq!(part.owner(row), Some(r));
                }
            }
            assert_eq!(part.owner(n), None);
        }
        let part = RowPartition::from_counts(&[0, 3, 0, 2]);
        assert_eq!(part.owner(0), Some(1));
        assert_eq!(part.owner(3), Some(3));
        assert!(RowPartition::from_offsets(vec![0, 3, 2]).is_none());
        assert!(RowPartition::from_offsets(vec![1, 3]).is_none());
        assert!(RowPartition::from_offsets(vec![0]).is_none());
    }

    /// Every rank's entries plus rows within the largest row's cost of an equal share, on
    /// rows of uneven length, and the degenerate cases.
    #[test]
    fn by_entries_balances_entries_and_rows() {
        // Rows of 1 to 40 entries, longer towards the end.
        let mut offsets = vec![0u64];
        for i in 0..1000u64 {
            offsets.push(offsets[offsets.len() - 1] + 1 + i / 25);
        }
        let cost = |r: std::ops::Range<u64>| {
            offsets[r.end as usize] - offsets[r.start as usize] + (r.end - r.start)
        };
        let total = cost(0..1000);
        for ranks in [1usize, 2, 3, 4, 7, 16] {
            let part = RowPartition::by_entries(&offsets, ranks);
            assert_eq!(part.ranks(), ranks);
            assert_eq!(part.nrows(), 1000);
            for r in 0..ranks {
                let share = total / ranks as u64;
                let c = cost(part.rows(r));
                assert!(
                    c.abs_diff(share) <= 2 * 41,
                    "{ranks} ranks, rank {r}: {c} vs {share}"
                );
            }
        }
        // Even rows split as `even` would, up to rounding; no rows or no ranks.
        let flat: Vec<u64> = (0..=10).map(|i| 3 * i).collect();
        assert_eq!(RowPartition::by_entries(&flat, 2).offsets(), &[0, 5, 10]);
        assert_eq!(RowPartition::by_entries(&[0], 3).offsets(), &[0, 0, 0, 0]);
        assert_eq!(RowPartition::by_entries(&[], 2).offsets(), &[0, 0, 0]);
        assert_eq!(RowPartition::by_entries(&[0, 5], 0).offsets(), &[0, 1]);
    }
}
