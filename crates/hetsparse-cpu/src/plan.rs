//! Work split: contiguous ranges of rows that hold equal shares of the work.
//!
//! Splitting rows evenly starves cores on power-law and skewed matrices, where a few rows hold
//! most of the intermediate products. The ranges here are cut on the prefix sum of each row's
//! cost (its products plus one, so that empty rows still count), so each range carries about
//! the same work; a single row heavier than a share becomes a range of its own.

use std::ops::Range;

/// Ranges per thread: more than one, so rayon's work stealing can even out what the cost model
/// misses (cache behaviour, accumulator choice).
pub(crate) const RANGES_PER_THREAD: usize = 8;

/// Below this much work per range, splitting costs more than it gains.
const MIN_RANGE_COST: u64 = 1 << 14;

/// Splits `0..costs.len()` into contiguous ranges of about equal total cost, in order.
pub(crate) fn balanced_ranges(costs: &[u64]) -> Vec<Range<usize>> {
    balanced_ranges_per_thread(costs, RANGES_PER_THREAD)
}

/// [`balanced_ranges`] with about `per_thread` ranges for each thread of the pool.
pub(crate) fn balanced_ranges_per_thread(costs: &[u64], per_thread: usize) -> Vec<Range<usize>> {
    let prefix = prefix_sums(costs);
    split_prefix(costs.len(), |i| prefix[i], per_thread)
}

/// Rows per piece of [`prefix_sums`]' parallel passes.
const PREFIX_PIECE: usize = 1 << 15;

/// Prefix sums of cost + 1 per row (u64: products can exceed 2^32), `costs.len() + 1` of them
/// from 0: two parallel passes (each piece's total, then each piece's sums from the totals
/// before it) where there are many rows, since a product of millions of short rows would
/// otherwise spend a serial pass here on top of its parallel kernel.
fn prefix_sums(costs: &[u64]) -> Vec<u64> {
    use rayon::prelude::*;
    let add = |total: u64, &c: &u64| total.saturating_add(c.saturating_add(1));
    if costs.len() <= 4 * PREFIX_PIECE {
        let mut prefix = Vec::with_capacity(costs.len() + 1);
        prefix.push(0u64);
        let mut total = 0u64;
        for c in costs {
            total = add(total, c);
            prefix.push(total);
        }
        return prefix;
    }
    let totals: Vec<u64> = costs
        .par_chunks(PREFIX_PIECE)
        .map(|piece| piece.iter().fold(0, add))
        .collect();
    let mut prefix = vec![0u64; costs.len() + 1];
    let mut start = 0u64;
    let starts: Vec<u64> = totals
        .iter()
        .map(|&t| {
            let s = start;
            start = start.saturating_add(t);
            s
        })
        .collect();
    prefix[1..]
        .par_chunks_mut(PREFIX_PIECE)
        .zip(costs.par_chunks(PREFIX_PIECE))
        .zip(starts)
        .for_each(|((out, piece), mut total)| {
            for (o, c) in out.iter_mut().zip(piece) {
                total = add(total, c);
                *o = total;
            }
        });
    prefix
}

/// Splits rows `0..n` into contiguous ranges of about equal total cost, in order, about
/// `per_thread` for each thread of the pool. `prefix(i)` is the total cost of rows `0..i`,
/// counting each row's cost plus one (so that empty rows still count), for `i` in `0..=n`;
/// it must not decrease. Where the prefix sums already exist (a CSR matrix's row offsets),
/// no per-row cost array is needed.
pub(crate) fn split_prefix(
    n: usize,
    prefix: impl Fn(usize) -> u64,
    per_thread: usize,
) -> Vec<Range<usize>> {
    if n == 0 {
        return Vec::new();
    }
    let total = prefix(n);
    let parts = (rayon::current_num_threads() * per_thread.max(1))
        .min(usize::try_from(total / MIN_RANGE_COST).unwrap_or(usize::MAX))
        .max(1);
    let mut ranges = Vec::with_capacity(parts);
    let mut start = 0usize;
    for p in 1..=parts {
        // The first row whose prefix reaches the p-th share ends the range.
        let target = ((u128::from(total) * p as u128) / parts as u128) as u64;
        let end = first_reaching(start, n, |i| prefix(i) >= target);
        let end = if p == parts { n } else { end };
        if end > start {
            // A row heavier than a share goes alone, not with the light rows before it.
            let last = end - 1;
            let last_cost = prefix(end) - prefix(last) - 1;
            if last > start && last_cost >= total / parts as u64 {
                ranges.push(start..last);
                start = last;
            }
            ranges.push(start..end);
            start = end;
        }
    }
    if start < n {
        ranges.push(start..n);
    }
    ranges
}

/// The first `i` in `lo..=hi` with `reached(i)`, or `hi`; `reached` must be monotone (false,
/// then true).
fn first_reaching(mut lo: usize, mut hi: usize, reached: impl Fn(usize) -> bool) -> usize {
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if reached(mid) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    lo
}

/// Sum of `costs` over each range, in parallel.
#[cfg(test)]
fn range_totals(costs: &[u64], ranges: &[Range<usize>]) -> Vec<u64> {
    ranges
        .iter()
        .map(|r| costs[r.clone()].iter().sum())
        .collect()
}

pub(crate) use hetsparse_core::host::split_mut;

#[cfg(test)]
mod tests {
    use super::*;

    fn check_cover(ranges: &[Range<usize>], n: usize) {
        let mut next = 0;
        for r in ranges {
            assert_eq!(r.start, next);
            assert!(r.end > r.start);
            next = r.end;
        }
        assert_eq!(next, n);
    }

    #[test]
    fn prefix_sums_in_parallel_match_the_serial_ones() {
        for n in [
            0usize,
            5,
            4 * PREFIX_PIECE,
            4 * PREFIX_PIECE + 1,
            9 * PREFIX_PIECE + 123,
        ] {
            let costs: Vec<u64> = (0..n as u64).map(|i| (i * 7919) % 1000).collect();
            let mut want = vec![0u64];
            for &c in &costs {
                want.push(want[want.len() - 1] + c + 1);
            }
            assert_eq!(prefix_sums(&costs), want, "{n} rows");
        }
        // Saturating, not wrapping.
        let huge = vec![u64::MAX / 2; 5 * PREFIX_PIECE];
        assert_eq!(prefix_sums(&huge).last(), Some(&u64::MAX));
    }

    #[test]
    fn ranges_cover_the_rows_in_order() {
        for n in [0usize, 1, 2, 7, 1000, 100_000] {
            let costs: Vec<u64> = (0..n as u64).map(|i| (i * 7919) % 1000).collect();
            check_cover(&balanced_ranges(&costs), n);
        }
    }

    #[test]
    fn heavy_rows_get_ranges_of_their_own() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(4)
            .build()
            .unwrap();
        let mut costs = vec![10u64; 100_000];
        costs[50_000] = 1 << 40;
        let ranges = pool.install(|| balanced_ranges(&costs));
        check_cover(&ranges, costs.len());
        assert!(ranges.contains(&(50_000..50_001)), "{ranges:?}");
        // Even costs give ranges of even length.
        let even = vec![1000u64; 64_000];
        let ranges = pool.install(|| balanced_ranges(&even));
        assert_eq!(ranges.len(), 4 * RANGES_PER_THREAD);
        assert!(ranges.iter().all(|r| r.len() == 2000));
        assert_eq!(range_totals(&even, &ranges)[0], 2_000_000);
    }
}
