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
}
