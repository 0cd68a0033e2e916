//! Cutting a product into chunks: column panels of B sized to the devices' memory, row panels
//! of A weighed by their intermediate products (Xia et al. §III: a chunk of C per row panel ×
//! column panel pair).

use std::borrow::Cow;
use std::ops::Range;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use hetsparse_core::backend::memory::csr_bytes;
use hetsparse_core::backend::RowSegments;
use hetsparse_core::{analysis, Csr, Error, ProductChunk, ProductLayout, Result, Scalar};
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
    /// Where its rows go in C, for a chunk that is not one panel of the layout's (a half of
    /// one cut by columns, and the row halves of that); `None`: its panel's positions.
    pub own_place: Option<Arc<Segments>>,
    /// The tasks it was merged from (none for a task as planned or split): a merged task
    /// lives only in one device's batch, and goes back to the queue as these.
    pub parts: Vec<Task>,
    /// Of its products, those already counted in the caller's progress: passed on while a
    /// device computed it, before the device gave it back. Its completion adds the rest, so
    /// that every product counts once.
    pub credited: u64,
}

/// Where each row of a chunk starts and ends in C.
#[derive(Debug)]
pub(crate) struct Segments {
    pub starts: Vec<u64>,
    pub ends: Vec<u64>,
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
            own_place: None,
            parts: Vec::new(),
            credited: 0,
        }
    }

    /// Where the chunk's rows go in C (`layout`'s).
    pub fn segments<'c>(&'c self, layout: &'c ProductLayout) -> Result<RowSegments<'c>> {
        if let Some(own) = &self.own_place {
            return Ok((Cow::Borrowed(&own.starts), Cow::Borrowed(&own.ends)));
        }
        let cols = &self.chunk.cols;
        match layout.panels_spanned(cols) {
            Some(panels) => Ok(layout.panels_segments(panels, self.chunk.rows.clone())),
            None => Err(Error::Internal {
                backend: hetsparse_core::BackendKind::Scheduler,
                what: format!("chunk columns {cols:?} are not a run of C's panels"),
            }),
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
    let entry_bytes = 4 + value_bytes;
    // Panels end at the edges of buckets of columns, counted per thread without atomics;
    // where one bucket alone exceeds the room, per column.
    let width = ncols.div_ceil(PANEL_BUCKETS).max(1);
    let per_bucket = entries_per_bucket(b, width);
    let (width, counts) = if width > 1 && per_bucket.iter().any(|&n| n * entry_bytes > room) {
        (1, entries_per_column(b))
    } else {
        (width, per_bucket)
    };
    let mut panels = Vec::new();
    let (mut start, mut bytes) = (0, 0u64);
    for (k, count) in counts.iter().enumerate() {
        let j = k * width;
        let add = count * entry_bytes;
        if j > start && bytes + add > room {
            panels.push(start..j);
            (start, bytes) = (j, 0);
        }
        bytes += add;
    }
    panels.push(start..ncols);
    panels
}

/// Buckets of columns whose entries place column panels' edges: few enough that each
/// thread's counts stay in its cache (counting every column with atomics took 19 ms for
/// B of 16 M entries on 16 cores).
const PANEL_BUCKETS: usize = 1 << 16;

/// B's entries in each run of `width` columns (the last run may be shorter).
fn entries_per_bucket<T: Scalar>(b: &Csr<T>, width: usize) -> Vec<u64> {
    count_entries(b, b.ncols().div_ceil(width), |c| c as usize / width)
}

/// B's entries counted into `keys` counters, an entry of column `c` into counter `key(c)`:
/// per thread, then summed.
fn count_entries<T: Scalar>(
    b: &Csr<T>,
    keys: usize,
    key: impl Fn(u32) -> usize + Sync,
) -> Vec<u64> {
    b.col_indices()
        .par_chunks(1 << 16)
        .fold(
            || vec![0u64; keys],
            |mut counts, piece| {
                for &c in piece {
                    counts[key(c)] += 1;
                }
                counts
            },
        )
        .reduce(
            || vec![0u64; keys],
            |mut x, y| {
                x.iter_mut().zip(&y).for_each(|(x, y)| *x += y);
                x
            },
        )
}

/// B's entries in each column.
fn entries_per_column<T: Scalar>(b: &Csr<T>) -> Vec<u64> {
    // A column holds at most one entry per row, so its count fits a u32.
    let per_column: Vec<AtomicU32> = (0..b.ncols()).map(|_| AtomicU32::new(0)).collect();
    b.col_indices().par_chunks(1 << 16).for_each(|piece| {
        for &c in piece {
            per_column[c as usize].fetch_add(1, Ordering::Relaxed);
        }
    });
    per_column
        .iter()
        .map(|n| u64::from(n.load(Ordering::Relaxed)))
        .collect()
}

/// What one chunk costs beside its bytes, as bytes uploaded in the same time: its symbolic
/// phase and the host's wait for it, its row offsets' read-back, its last output batch and
/// its hand-over, about 3 ms a chunk out of core on an H200 host (16 cores), where a
/// chunk's rows of A crossed at 13 GB/s.
const CHUNK_COST_BYTES: u64 = 32 << 20;

/// Splits `window` bytes of device memory for a chunk's operands between its rows of A and
/// its column panel of B, as `(a_bytes, b_bytes)`, by the least estimated cost: a chunk per
/// row panel × column panel pair ([`CHUNK_COST_BYTES`] each), all of A uploaded once per
/// column panel, and B's row offsets once per column panel (every panel holds all of them).
/// A's share never exceeds `window / 2`, the even split, so no chunk has more rows than an
/// even split gives it (the device's per-row arrays come out of the rest of its memory);
/// B's may take the rest: out of core, with B in twenty panels of a budget that B's row
/// offsets took most of, A crossed the link twenty times.
pub(crate) fn window_split<T: Scalar>(a: &Csr<T>, b: &Csr<T>, window: u64) -> (u64, u64) {
    let half = window / 2;
    let value_bytes = std::mem::size_of::<T>();
    let a_bytes = csr_bytes(a.nrows(), a.nnz(), value_bytes);
    let b_bytes = csr_bytes(b.nrows(), b.nnz(), value_bytes);
    if window == u64::MAX || b_bytes <= half {
        return (half, window - half);
    }
    let b_offsets = (b.nrows() as u64 + 1) * 8;
    let b_entries = b_bytes - b_offsets;
    let cost = |a_share: u64| -> Option<u64> {
        let b_share = window - a_share;
        let panels = if b_bytes <= b_share {
            1
        } else {
            b_entries.div_ceil(b_share.checked_sub(b_offsets).filter(|&r| r > 0)?)
        };
        let row_panels = a_bytes.div_ceil(a_share.max(1)).max(1);
        let chunks = panels.saturating_mul(row_panels);
        Some(
            chunks
                .saturating_mul(CHUNK_COST_BYTES)
                .saturating_add(panels.saturating_mul(a_bytes.saturating_add(b_offsets)))
                .saturating_add(b_entries),
        )
    };
    // A's share from a sixteenth of the window up to half of it.
    let best = (1..=8u64)
        .map(|k| window / 16 * k)
        .filter(|&share| share > 0)
        .filter_map(|share| cost(share).map(|c| (c, std::cmp::Reverse(share), share)))
        .min()
        .map(|(_, _, share)| share);
    match best {
        Some(share) => (share, window - share),
        None => (half, window - half),
    }
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
            let counts =
                count_entries(b, bounds.len(), |j| bounds.partition_point(|&end| end <= j));
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
/// or a chunk halved [`MAX_SPLITS`] times already. Where C is written in place (`layout`), the
/// halves' places are the task's, cut where the first half's rows end, or where its columns'
/// entries of the one row end (counted here).
pub(crate) fn split<T: Scalar>(
    a: &Csr<T>,
    b: &Csr<T>,
    layout: Option<&ProductLayout>,
    task: &Task,
) -> Option<(Task, Task)> {
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
    // Row halves of a panel's chunk are chunks of that panel; other halves get places of
    // their own.
    let places: [Option<Segments>; 2] = match (&task.own_place, rows.len() > 1) {
        _ if layout.is_none() => [None, None],
        (None, true) => [None, None],
        (Some(own), true) => {
            let mid = r1.len();
            [
                (own.starts[..mid].to_vec(), own.ends[..mid].to_vec()),
                (own.starts[mid..].to_vec(), own.ends[mid..].to_vec()),
            ]
            .map(|(starts, ends)| Some(Segments { starts, ends }))
        }
        (_, false) => {
            let (starts, ends) = task.segments(layout?).ok()?;
            let panel = std::slice::from_ref(&c1);
            let left = analysis::symbolic_panel_nnz(a, r1.clone(), b, panel).ok()?;
            let cut = starts[0].checked_add(left[0]).filter(|&c| c <= ends[0])?;
            [(starts[0], cut), (cut, ends[0])].map(|(s, e)| {
                Some(Segments {
                    starts: vec![s],
                    ends: vec![e],
                })
            })
        }
    };
    let [p1, p2] = places;
    let [first, second] = [
        (r1, c1, first_products, p1),
        (r2, c2, task.products - first_products, p2),
    ]
    .map(|(r, c, p, place)| {
        let mut t = Task::new(r, c, p);
        t.excluded.clone_from(&task.excluded);
        t.splits = task.splits + 1;
        t.own_place = place.map(Arc::new);
        t
    });
    let mut halves = [first, second];
    share_credit(task.credited, &mut halves);
    let [first, second] = halves;
    Some((first, second))
}

/// Spreads `credit` (products of a task already counted in the caller's progress) over the
/// tasks it is cut into, in order, each up to its products.
pub(crate) fn share_credit(mut credit: u64, tasks: &mut [Task]) {
    for t in tasks {
        t.credited = credit.min(t.products);
        credit -= t.credited;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hetsparse_core::analysis::prefix_sums;
    use hetsparse_core::generate;

    #[test]
    fn credit_is_spread_in_order_up_to_each_tasks_products() {
        let mut tasks = [
            Task::new(0..1, 0..1, 10),
            Task::new(1..2, 0..1, 20),
            Task::new(2..3, 0..1, 5),
        ];
        share_credit(25, &mut tasks);
        let credits: Vec<u64> = tasks.iter().map(|t| t.credited).collect();
        assert_eq!(credits, vec![10, 15, 0]);
    }

    #[test]
    fn the_window_goes_to_b_where_its_panels_would_repeat_a() {
        // B's offsets take most of an even share: many panels, each uploading all of A.
        let a = generate::uniform::<f64>(20_000, 20_000, 8, 1);
        let b = generate::uniform::<f64>(20_000, 20_000, 8, 2);
        let b_bytes = csr_bytes(b.nrows(), b.nnz(), 8);
        let offsets = (b.nrows() as u64 + 1) * 8;
        let window = 2 * (offsets + (b_bytes - offsets) / 20);
        let (a_share, b_share) = window_split(&a, &b, window);
        assert_eq!(a_share + b_share, window);
        assert!(a_share < window / 2, "{a_share} of {window}");
        let even = column_panels(&b, window / 2).len();
        let now = column_panels(&b, b_share).len();
        assert!(now < even, "{now} panels, {even} at an even split");
        // B fits in half: the even split, as before.
        assert_eq!(
            window_split(&a, &b, 4 * b_bytes),
            (2 * b_bytes, 2 * b_bytes)
        );
        // No budget: none.
        assert_eq!(window_split(&a, &b, u64::MAX).0, u64::MAX / 2);
    }

    /// `panels` are B's columns in order, each within `budget` unless a single column.
    fn assert_panels_fit(b: &Csr<f64>, panels: &[Range<usize>], budget: u64) {
        assert_eq!(panels.first().unwrap().start, 0);
        assert_eq!(panels.last().unwrap().end, b.ncols());
        for w in panels.windows(2) {
            assert_eq!(w[0].end, w[1].start);
        }
        for p in panels {
            let panel = b.column_panel(p.clone()).unwrap();
            let bytes = csr_bytes(panel.nrows(), panel.nnz(), 8);
            assert!(p.len() == 1 || bytes <= budget, "{p:?}: {bytes} > {budget}");
        }
    }

    #[test]
    fn panels_cover_and_respect_the_budget() {
        let b = generate::uniform::<f64>(50, 400, 6, 3);
        let whole = csr_bytes(b.nrows(), b.nnz(), 8);
        assert_eq!(column_panels(&b, whole), vec![0..400]);
        let panels = column_panels(&b, whole / 3);
        assert!(panels.len() >= 3, "{panels:?}");
        assert_panels_fit(&b, &panels, whole / 3);
        // A budget that B's row offsets take nearly all of: B is not cut into slivers.
        let offsets = (b.nrows() as u64 + 1) * 8;
        assert_eq!(column_panels(&b, offsets + 16), vec![0..400]);
    }

    #[test]
    fn wide_panels_end_at_buckets_and_a_dense_bucket_is_cut_per_column() {
        // More columns than buckets: panels end at the edges of runs of 4 columns.
        let ncols = 4 * PANEL_BUCKETS;
        let b = generate::uniform::<f64>(2000, ncols, 8, 4);
        let whole = csr_bytes(b.nrows(), b.nnz(), 8);
        let panels = column_panels(&b, whole / 5);
        assert!(panels.len() >= 5, "{} panels", panels.len());
        assert!(panels.iter().all(|p| p.start % 4 == 0), "{panels:?}");
        assert_panels_fit(&b, &panels, whole / 5);
        // Every row holds columns 0..4 (one bucket) and one more: the first bucket alone is
        // over the budget, so the panels are cut per column, the first four one column each.
        let rows = 3000;
        let (mut offsets, mut cols) = (vec![0u64], Vec::new());
        for i in 0..rows {
            cols.extend([0, 1, 2, 3, 4 + (i * 7919 % (ncols - 4)) as u32]);
            cols[5 * i..].sort_unstable();
            offsets.push(cols.len() as u64);
        }
        let values = vec![1.0; cols.len()];
        let b = Csr::try_new(rows, ncols, offsets, cols, values).unwrap();
        let fixed = (rows as u64 + 1) * 8;
        let budget = fixed + 2 * rows as u64 * 12;
        let panels = column_panels(&b, budget);
        assert_eq!(&panels[..2], &[0..2, 2..4], "{:?}", &panels[..3]);
        assert_panels_fit(&b, &panels, budget);
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
    fn split_halves_rows_then_columns_and_their_places() {
        let a = Csr::<f64>::identity(4).unwrap();
        let layout = ProductLayout::count(&a, &a, std::iter::once(0..4).collect()).unwrap();
        let t = Task::new(0..4, 0..4, 4);
        let (x, y) = split(&a, &a, Some(&layout), &t).unwrap();
        assert_eq!((x.chunk.rows.clone(), y.chunk.rows.clone()), (0..2, 2..4));
        assert_eq!((x.products, y.products), (2, 2));
        let (xs, xe) = x.segments(&layout).unwrap();
        assert_eq!((&xs[..], &xe[..]), (&[0, 1][..], &[1, 2][..]));
        let (x, y) = split(&a, &a, Some(&layout), &Task::new(1..2, 0..4, 1)).unwrap();
        assert_eq!((x.chunk.cols.clone(), y.chunk.cols.clone()), (0..2, 2..4));
        assert_eq!((x.products, y.products), (1, 0));
        // Row 1's one entry (column 1) is the first half's.
        let place = |t: &Task| {
            let (s, e) = t.segments(&layout).unwrap();
            (s[0], e[0])
        };
        assert_eq!((place(&x), place(&y)), ((1, 2), (2, 2)));
        assert!(split(&a, &a, Some(&layout), &y).is_some());
        assert!(split(&a, &a, Some(&layout), &Task::new(1..2, 1..2, 1)).is_none());
        // Without C in place, no half has a place of its own.
        let (x, y) = split(&a, &a, None, &Task::new(1..2, 0..4, 1)).unwrap();
        assert!(x.own_place.is_none() && y.own_place.is_none());
    }
}
