//! Cutting a product into chunks: column panels of B sized to the devices' memory, row panels
//! of A weighed by their intermediate products (Xia et al. §III: a chunk of C per row panel ×
//! column panel pair).

use std::ops::Range;
use std::sync::atomic::{AtomicU32, Ordering};

use hetsparse_core::backend::memory::csr_bytes;
use hetsparse_core::{Csr, ProductChunk, Scalar};
use rayon::prelude::*;

/// A chunk of the product and what it costs.
#[derive(Clone, Debug)]
pub(crate) struct Task {
    /// Which part of C.
    pub chunk: ProductChunk,
    /// Its intermediate products.
    pub products: u64,
    /// Devices (by position in the scheduler) that cannot compute it: they ran out of memory on
    /// it at the smallest size, or do not support it.
    pub excluded: Vec<usize>,
    /// How many times the chunk it came from was halved.
    pub splits: u32,
}

/// Halvings of a chunk that ran out of memory before the device is given up on for it: chunks
/// are planned to fit, so 64 pieces cover a device whose memory is mostly taken by others,
/// without a run of thousands of failing calls.
pub(crate) const MAX_SPLITS: u32 = 6;

impl Task {
    pub fn new(rows: Range<usize>, cols: Range<usize>, products: u64) -> Task {
        Task {
            chunk: ProductChunk { rows, cols },
            products,
            excluded: Vec::new(),
            splits: 0,
        }
    }

    /// Where the chunk lies in C, as the work-stealing queue orders it: B's panel, then rows.
    pub fn place(&self) -> (usize, usize) {
        (self.chunk.cols.start, self.chunk.rows.start)
    }
}

/// Column panels of `b` whose CSR bytes each stay within `budget` (one panel when all of B
/// does, a single column when one column alone exceeds it).
pub(crate) fn column_panels<T: Scalar>(b: &Csr<T>, budget: u64) -> Vec<Range<usize>> {
    let value_bytes = std::mem::size_of::<T>() as u64;
    let ncols = b.ncols();
    if ncols == 0 || csr_bytes(b.nrows(), b.nnz(), value_bytes as usize) <= budget {
        return std::iter::once(0..ncols).collect();
    }
    // Every panel holds all of B's row offsets. Where they leave little of the budget, the
    // panels would be slivers of B, so many that their offsets alone took more host memory
    // than four times B: then B stays whole, and a device that cannot hold it is out of
    // memory on its chunks.
    let fixed = (b.nrows() as u64 + 1) * 8;
    let entries = b.nnz() * (4 + value_bytes);
    let room = budget.saturating_sub(fixed);
    let panels_needed = if room == 0 {
        u64::MAX
    } else {
        entries.div_ceil(room)
    };
    if panels_needed.saturating_mul(fixed)
        > csr_bytes(b.nrows(), b.nnz(), value_bytes as usize).saturating_mul(4)
    {
        return std::iter::once(0..ncols).collect();
    }
    // A column holds at most one entry per row, so its count fits a u32.
    let per_column: Vec<AtomicU32> = (0..ncols).map(|_| AtomicU32::new(0)).collect();
    b.col_indices().par_chunks(1 << 16).for_each(|piece| {
        for &c in piece {
            per_column[c as usize].fetch_add(1, Ordering::Relaxed);
        }
    });
    let mut panels = Vec::new();
    let (mut start, mut bytes) = (0, 0u64);
    for (j, count) in per_column.iter().enumerate() {
        let add = u64::from(count.load(Ordering::Relaxed)) * (4 + value_bytes);
        if j > start && bytes + add > room {
            panels.push(start..j);
            (start, bytes) = (j, 0);
        }
        bytes += add;
    }
    panels.push(start..ncols);
    panels
}

/// Each column panel's share of B's entries, by which a chunk's products are estimated from
/// its rows' products: rows `r` of panel `p` get `⌊P·c[p+1]⌋ − ⌊P·c[p]⌋` of the `P` products
/// of those rows, `c` the shares summed over the panels before, so that a row range's
/// estimates over all panels add up to its products exactly.
pub(crate) struct PanelShares {
    /// `before[p]`: the share of B's entries in the panels before `p` (`before[0] = 0`, the
    /// last `1`).
    before: Vec<f64>,
}

impl PanelShares {
    pub fn of<T: Scalar>(b: &Csr<T>, panels: &[Range<usize>]) -> PanelShares {
        let mut before = vec![0.0; panels.len() + 1];
        if panels.len() > 1 && b.nnz() > 0 {
            let bounds: Vec<u32> = panels.iter().map(|p| p.end as u32).collect();
            let counts = b
                .col_indices()
                .par_chunks(1 << 16)
                .map(|piece| {
                    let mut counts = vec![0u64; bounds.len()];
                    for &j in piece {
                        counts[bounds.partition_point(|&end| end <= j)] += 1;
                    }
                    counts
                })
                .reduce(
                    || vec![0u64; bounds.len()],
                    |mut x, y| {
                        x.iter_mut().zip(&y).for_each(|(x, y)| *x += y);
                        x
                    },
                );
            let mut sum = 0u64;
            for (p, c) in counts.iter().enumerate() {
                sum += c;
                before[p + 1] = sum as f64 / b.nnz() as f64;
            }
        } else {
            // One panel, or no entries: the panels share evenly.
            for (p, x) in before.iter_mut().enumerate() {
                *x = p as f64 / panels.len().max(1) as f64;
            }
        }
        *before.last_mut().expect("one share per panel and one more") = 1.0;
        PanelShares { before }
    }

    /// Estimated products before row `i` in panel `p`, from the products before it in all of
    /// B's columns (`before_row`).
    fn before(&self, p: usize, before_row: u64) -> u64 {
        let cut = |x: f64| (before_row as f64 * x).floor() as u64;
        cut(self.before[p + 1]) - cut(self.before[p])
    }

    /// Estimated products of rows `rows` in panel `p`, from the products before each row in
    /// all of B's columns.
    pub fn products(&self, p: usize, prefix: &[u64], rows: &Range<usize>) -> u64 {
        self.before(p, prefix[rows.end])
            .saturating_sub(self.before(p, prefix[rows.start]))
    }

    /// Products of all of B's columns that make `target` in panel `p`.
    pub fn rows_target(&self, p: usize, target: u64) -> u64 {
        let share = self.before[p + 1] - self.before[p];
        if share <= 0.0 {
            u64::MAX
        } else {
            (target as f64 / share).min(u64::MAX as f64) as u64
        }
    }
}

/// Intermediate products of each of rows `rows` of `a` that land in columns `cols` of `b`.
pub(crate) fn panel_row_products<T: Scalar>(
    a: &Csr<T>,
    rows: Range<usize>,
    b: &Csr<T>,
    cols: &Range<usize>,
) -> Vec<u64> {
    let (lo, hi) = (cols.start as u32, cols.end as u32);
    let whole = cols.start == 0 && cols.end == b.ncols();
    let b_rows: Vec<u64> = (0..b.nrows())
        .into_par_iter()
        .with_min_len(1024)
        .map(|k| {
            if whole {
                b.row_nnz(k)
            } else {
                let row = b.row(k).0;
                (row.partition_point(|&c| c < hi) - row.partition_point(|&c| c < lo)) as u64
            }
        })
        .collect();
    rows.into_par_iter()
        .with_min_len(256)
        .map(|i| a.row(i).0.iter().map(|&k| b_rows[k as usize]).sum())
        .collect()
}

/// Products before each row: `prefix[i]` is the sum over rows `0..i`. Written in parallel (the
/// sums of blocks of rows first): a fresh array of millions of rows costs more in first touches
/// of its pages than in additions.
pub(crate) fn prefix_sums(per_row: &[u64]) -> Vec<u64> {
    const BLOCK: usize = 1 << 16;
    let block_sums: Vec<u64> = per_row.par_chunks(BLOCK).map(|b| b.iter().sum()).collect();
    let mut prefix = vec![0u64; per_row.len() + 1];
    let mut before = 0u64;
    let starts: Vec<u64> = block_sums
        .iter()
        .map(|s| {
            let at = before;
            before += s;
            at
        })
        .collect();
    prefix[1..]
        .par_chunks_mut(BLOCK)
        .zip(per_row.par_chunks(BLOCK))
        .zip(starts)
        .for_each(|((out, rows), start)| {
            let mut total = start;
            for (slot, &p) in out.iter_mut().zip(rows) {
                total += p;
                *slot = total;
            }
        });
    prefix
}

/// Row panels of rows `rows` (products before each row in `prefix`): each holds about
/// `target` products (a row with more is a panel of its own) and at most `max_a_bytes` of A.
pub(crate) fn row_panels<T: Scalar>(
    a: &Csr<T>,
    prefix: &[u64],
    rows: Range<usize>,
    target: u64,
    max_a_bytes: u64,
) -> Vec<Range<usize>> {
    let value_bytes = std::mem::size_of::<T>();
    let offsets = a.row_offsets();
    let mut panels = Vec::new();
    let mut start = rows.start;
    let target = target.max(1);
    while start < rows.end {
        // The largest end whose products stay within the target (at least one row) ...
        let goal = prefix[start].saturating_add(target);
        let mut end = prefix[start + 1..=rows.end]
            .partition_point(|&p| p <= goal)
            .max(1)
            + start;
        // ... and whose rows of A fit in the budget (bytes grow with the end: search it).
        let fits = |end: usize| {
            csr_bytes(end - start, offsets[end] - offsets[start], value_bytes) <= max_a_bytes
        };
        if !fits(end) {
            let (mut lo, mut hi) = (start + 1, end);
            while lo + 1 < hi {
                let mid = lo + (hi - lo) / 2;
                if fits(mid) {
                    lo = mid;
                } else {
                    hi = mid;
                }
            }
            end = lo;
        }
        panels.push(start..end);
        start = end;
    }
    panels
}

/// `task` cut in two (rows first, columns for a single row), or `None` for a single entry of C
/// or a chunk halved [`MAX_SPLITS`] times already.
pub(crate) fn split<T: Scalar>(a: &Csr<T>, b: &Csr<T>, task: &Task) -> Option<(Task, Task)> {
    let ProductChunk { rows, cols } = &task.chunk;
    let halves = if task.splits >= MAX_SPLITS {
        return None;
    } else if rows.len() > 1 {
        let mid = rows.start + rows.len() / 2;
        [
            (rows.start..mid, cols.clone()),
            (mid..rows.end, cols.clone()),
        ]
    } else if cols.len() > 1 {
        let mid = cols.start + cols.len() / 2;
        [
            (rows.clone(), cols.start..mid),
            (rows.clone(), mid..cols.end),
        ]
    } else {
        return None;
    };
    // The first half's products counted, the second's the rest: the halves add up to what
    // was planned for the task (an estimate, for a panel of B).
    let [(r1, c1), (r2, c2)] = halves;
    let counted: u64 = panel_row_products(a, r1.clone(), b, &c1).iter().sum();
    let first_products = counted.min(task.products);
    let [first, second] = [
        (r1, c1, first_products),
        (r2, c2, task.products - first_products),
    ]
    .map(|(r, c, p)| {
        let mut t = Task::new(r, c, p);
        t.excluded.clone_from(&task.excluded);
        t.splits = task.splits + 1;
        t
    });
    Some((first, second))
}

#[cfg(test)]
mod tests {
    use super::*;
    use hetsparse_core::generate;

    #[test]
    fn panels_cover_and_respect_the_budget() {
        let b = generate::uniform::<f64>(50, 400, 6, 3);
        let whole = csr_bytes(b.nrows(), b.nnz(), 8);
        assert_eq!(column_panels(&b, whole), vec![0..400]);
        let panels = column_panels(&b, whole / 3);
        assert!(panels.len() >= 3, "{panels:?}");
        assert_eq!(panels.first().unwrap().start, 0);
        assert_eq!(panels.last().unwrap().end, 400);
        for w in panels.windows(2) {
            assert_eq!(w[0].end, w[1].start);
        }
        for p in &panels {
            let panel = b.column_panel(p.clone()).unwrap();
            assert!(p.len() == 1 || csr_bytes(panel.nrows(), panel.nnz(), 8) <= whole / 3);
        }
        // A budget that B's row offsets take nearly all of: B is not cut into slivers.
        let offsets = (b.nrows() as u64 + 1) * 8;
        assert_eq!(column_panels(&b, offsets + 16), vec![0..400]);
    }

    #[test]
    fn panel_products_add_up() {
        let a = generate::rmat::<f64>(9, 4, 5);
        let n = a.nrows();
        let all = hetsparse_core::analysis::row_products(&a, &a).unwrap();
        let left = panel_row_products(&a, 0..n, &a, &(0..120));
        let right = panel_row_products(&a, 0..n, &a, &(120..n));
        for i in 0..n {
            assert_eq!(left[i] + right[i], all[i]);
        }
        assert_eq!(panel_row_products(&a, 0..n, &a, &(0..n)), all);
        assert_eq!(panel_row_products(&a, 10..20, &a, &(0..n)), all[10..20]);
    }

    #[test]
    fn prefix_sums_over_several_blocks() {
        let per_row: Vec<u64> = (0..200_003u64).map(|i| i % 7 + i / 1000).collect();
        let prefix = prefix_sums(&per_row);
        assert_eq!(prefix.len(), per_row.len() + 1);
        let mut total = 0;
        for (i, &p) in per_row.iter().enumerate() {
            assert_eq!(prefix[i], total);
            total += p;
        }
        assert_eq!(prefix[per_row.len()], total);
        assert_eq!(prefix_sums(&[]), vec![0]);
    }

    #[test]
    fn row_panels_hold_about_the_target() {
        let per_row = [5, 1, 1, 1, 20, 1, 1, 1, 1, 1];
        let prefix = prefix_sums(&per_row);
        let a = Csr::<f64>::identity(10).unwrap();
        let panels = row_panels(&a, &prefix, 0..10, 6, u64::MAX);
        assert_eq!(panels, vec![0..2, 2..4, 4..5, 5..10]);
        let panels = row_panels(&a, &prefix, 3..10, 100, u64::MAX);
        assert_eq!(panels, vec![3..10]);
        // A budget of about two rows of A.
        let panels = row_panels(&a, &prefix, 0..10, 100, csr_bytes(2, 2, 8));
        assert!(panels.iter().all(|p| p.len() <= 2), "{panels:?}");
        assert_eq!(panels.iter().map(|p| p.len()).sum::<usize>(), 10);
    }

    #[test]
    fn panel_estimates_follow_the_shares_and_add_up_exactly() {
        let n = 300;
        let a = hetsparse_core::generate::uniform::<f64>(n, n, 7, 5);
        let prefix = prefix_sums(&hetsparse_core::analysis::row_products(&a, &a).unwrap());
        let panels = vec![0..50, 50..120, 120..n];
        let shares = PanelShares::of(&a, &panels);
        for rows in [0..n, 17..18, 40..260, 5..5] {
            let all = prefix[rows.end] - prefix[rows.start];
            let per_panel: Vec<u64> = (0..panels.len())
                .map(|p| shares.products(p, &prefix, &rows))
                .collect();
            assert_eq!(
                per_panel.iter().sum::<u64>(),
                all,
                "{rows:?}: {per_panel:?}"
            );
        }
        // Over all rows, each panel's estimate is within a product of its share of the
        // exact count (which a uniform matrix spreads evenly).
        for (p, cols) in panels.iter().enumerate() {
            let exact: u64 = panel_row_products(&a, 0..n, &a, cols).iter().sum();
            let estimate = shares.products(p, &prefix, &(0..n));
            let rel = (estimate as f64 - exact as f64).abs() / exact as f64;
            assert!(rel < 0.1, "panel {p}: {estimate} against {exact}");
        }
        // A target in a panel of about a sixth of B's entries is about six times as many of
        // all columns' products.
        let t = shares.rows_target(0, 1000);
        assert!((4000..9000).contains(&t), "{t}");
        let one = PanelShares::of(&a, std::slice::from_ref(&(0..n)));
        assert_eq!(one.products(0, &prefix, &(0..n)), prefix[n]);
        assert_eq!(one.rows_target(0, 1000), 1000);
    }

    #[test]
    fn split_halves_rows_then_columns() {
        let a = Csr::<f64>::identity(4).unwrap();
        let t = Task::new(0..4, 0..4, 4);
        let (x, y) = split(&a, &a, &t).unwrap();
        assert_eq!((x.chunk.rows, y.chunk.rows), (0..2, 2..4));
        assert_eq!((x.products, y.products), (2, 2));
        let (x, y) = split(&a, &a, &Task::new(1..2, 0..4, 1)).unwrap();
        assert_eq!((x.chunk.cols, y.chunk.cols), (0..2, 2..4));
        assert_eq!((x.products, y.products), (1, 0));
        assert!(split(&a, &a, &Task::new(1..2, 1..2, 1)).is_none());
    }
}
