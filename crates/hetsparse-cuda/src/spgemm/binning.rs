//! Per-row work on the GPU, so that no array of a row's size visits the host: rows binned by
//! their weight (products in the symbolic phase, entries in the numeric one) into lists on the
//! device, of which the host reads only how many rows each bin has; and the exclusive scan that
//! turns entries per row into C's row offsets, of which the host reads only the total.

use hetsparse_core::Result;

use std::sync::Arc;

use crate::context::{Arg, Gpu, LaunchConfig, Stream};
use crate::memory::{DeviceArena, DeviceBuffer, DeviceSlice, DeviceSliceMut};

use super::{footprint, Job};

/// Bins: tables of `16 << b` slots for bin `b` below [`BIN_EMPTY`]; rows of weight 0 in
/// [`BIN_EMPTY`] (counted, never listed). `BIN_COUNT` and `BIN_EMPTY` in the kernels.
pub(super) const BIN_COUNT: usize = 29;
pub(super) const BIN_EMPTY: usize = 28;

/// Bins from which the GPU's histogram records the longest row of A among a bin's rows
/// (`LONG_A_MIN_BIN` in the kernels): tables of 4096 slots and more, the rows that may go to
/// column ranges.
pub(super) const LONG_A_MIN_BIN: usize = 8;

/// Rows per bin of a list of rows, and the sums of their weights, uncapped and capped; from
/// the GPU also the longest row of A among each bin's rows from [`LONG_A_MIN_BIN`] on (0 where
/// not known: a histogram of host weights).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Histogram {
    pub rows: [u64; BIN_COUNT],
    pub weight: u64,
    pub capped_weight: u64,
    pub longest_a: [u64; BIN_COUNT],
}

impl Histogram {
    /// The histogram of host `weights`, each capped at `cap` for its bin (the kernels' rule).
    pub fn of(weights: &[u64], cap: u64) -> Histogram {
        let mut h = Histogram::default();
        for &w in weights {
            h.rows[bin_of(w, cap)] += 1;
            h.weight += w;
            h.capped_weight += w.min(cap);
        }
        h
    }

    /// Slots of the tables of bin `b`.
    pub fn table_size(b: usize) -> u64 {
        16u64 << b
    }

    /// The listed (non-empty) bins with their rows.
    pub fn bins(&self) -> impl Iterator<Item = (usize, u64)> + '_ {
        self.rows[..BIN_EMPTY]
            .iter()
            .enumerate()
            .filter(|(_, &n)| n > 0)
            .map(|(b, &n)| (b, n))
    }
}

/// Most weight a row of many more products than its window's columns keeps beyond the window
/// (`WIDE_ROW_WEIGHT_MAX` in the kernels): tables of up to 8192 slots, which stay in shared
/// memory (larger ones went to a dense row in global memory and were slower).
const WIDE_ROW_WEIGHT_MAX: u64 = 4096;

/// The bin of a row of weight `w` in a window of `cap` columns: the kernels' `weight_bin`. The
/// weight is capped at the window, except that a row of many more products than columns keeps
/// a quarter of its weight, up to 32 windows and [`WIDE_ROW_WEIGHT_MAX`]: more lanes share its
/// products.
pub(super) fn bin_of(w: u64, cap: u64) -> usize {
    let wide = (w / 4).min(cap.saturating_mul(32)).min(WIDE_ROW_WEIGHT_MAX);
    let w = w.min(cap.max(wide));
    if w == 0 {
        return BIN_EMPTY;
    }
    let slots = 2 * w;
    if slots <= 16 {
        return 0;
    }
    let bits = 64 - (slots - 1).leading_zeros() as usize;
    (bits - 4).min(BIN_EMPTY - 1)
}

/// Where a list's weights are on the device.
#[derive(Clone, Copy)]
pub(super) enum Weights<'a> {
    /// One weight per row.
    PerRow(DeviceSlice<'a, u64>),
    /// Row offsets of C (one more than rows): weights are their differences, each non-zero
    /// one raised to the row's entries of A times `a_scale / 256` (a weight for the row's
    /// products, which a row of few entries may have many of; 0 for none) where that is more
    /// than 4 times the entries, or the entries are at most 16 (the kernels' `bin_weight`).
    OffsetsOrWork {
        offsets: DeviceSlice<'a, u64>,
        a_scale: u32,
    },
}

impl Weights<'_> {
    fn rows(&self) -> usize {
        match self {
            Weights::PerRow(w) => w.len(),
            Weights::OffsetsOrWork { offsets, .. } => offsets.len().saturating_sub(1),
        }
    }
    /// The kernels' `values`, `from_offsets` and `a_scale`.
    fn args(&self) -> [Arg; 3] {
        match self {
            Weights::PerRow(w) => [w.arg(), Arg::U32(0), Arg::U32(0)],
            Weights::OffsetsOrWork { offsets, a_scale } => {
                [offsets.arg(), Arg::U32(1), Arg::U32(*a_scale)]
            }
        }
    }
}

/// Bytes a [`Binned`] list of `n` rows takes with its counters (what [`histogram`] and
/// [`scatter`] allocate).
pub(super) fn bytes(n: u64) -> u64 {
    footprint(&[
        (8, 2 * BIN_COUNT as u64 + 2),
        (8, 2 * BIN_COUNT as u64),
        (4, n),
    ])
}

fn grid_for(n: u64, threads: u32) -> LaunchConfig {
    LaunchConfig {
        grid: n.div_ceil(u64::from(threads)).clamp(1, 1 << 16) as u32,
        block: threads,
        shared_bytes: 0,
    }
}

/// The first bin of warp tables (64 slots; bins 0 and 1 are a thread's).
const WARP_BIN: u32 = 2;

/// Rows per multiprocessor up to which a product's rows count as few: as many warps as one
/// multiprocessor holds at once (2048 threads). Few rows get a warp each at least, which still
/// runs in one wave while a thread per row would leave the GPU nearly idle and walk each row's
/// products (a coarse AMG level's: hundreds per row of a few entries) one after another; and
/// their rows of narrow windows go to one dense column range (`adaptive::narrow_window`).
const FEW_ROWS_PER_SM: u64 = 64;

/// Whether the job's rows are few ([`FEW_ROWS_PER_SM`] per multiprocessor at most).
pub(super) fn rows_are_few<T: crate::scalar::DeviceScalar>(job: &Job<'_, T>) -> bool {
    job.nrows() as u64 <= FEW_ROWS_PER_SM * u64::from(job.gpu.multiprocessors())
}

/// The kernels' `floor_bin` for a job: [`WARP_BIN`] where its rows are few, else 0. Histogram
/// and scatter of one list take the same.
fn floor_bin<T: crate::scalar::DeviceScalar>(job: &Job<'_, T>) -> u32 {
    if rows_are_few(job) {
        WARP_BIN
    } else {
        0
    }
}

/// Counts the rows of each bin (one small read-back); list row `i` is row `first_row + i` of A.
pub(super) fn histogram<T: crate::scalar::DeviceScalar>(
    job: &Job<'_, T>,
    weights: Weights<'_>,
    first_row: usize,
    cap: u64,
    arena: &DeviceArena,
) -> Result<Histogram> {
    let n = weights.rows() as u64;
    if n == 0 {
        return Ok(Histogram::default());
    }
    // Rows per bin, the two sums, the longest rows of A per bin.
    let mut counters = arena.alloc::<u64>(2 * BIN_COUNT + 2, "bin counters")?;
    counters.zero(job.stream)?;
    let f = job.gpu.function("spgemm", "spgemm_bin_count")?;
    let [values, from_offsets, a_scale] = weights.args();
    // SAFETY: arguments match spgemm_bin_count; `counters` has 2 * BIN_COUNT + 2 slots; A's
    // offsets cover rows first_row .. first_row + n (the job's rows).
    unsafe {
        job.gpu.launch(
            f,
            grid_for(n, 256),
            job.stream,
            &[
                Arg::U64(n),
                values,
                from_offsets,
                a_scale,
                Arg::U64(cap),
                counters.arg_mut(),
                counters.sub_mut(BIN_COUNT, 2).arg_mut(),
                job.a.matrix().offsets.read(job.stream)?.arg(),
                Arg::U64(first_row as u64),
                counters.sub_mut(BIN_COUNT + 2, BIN_COUNT).arg_mut(),
                Arg::U32(floor_bin(job)),
            ],
        )?;
    }
    let c = counters.view().to_vec(job.stream)?;
    let mut h = Histogram {
        weight: c[BIN_COUNT],
        capped_weight: c[BIN_COUNT + 1],
        ..Histogram::default()
    };
    h.rows.copy_from_slice(&c[..BIN_COUNT]);
    h.longest_a.copy_from_slice(&c[BIN_COUNT + 2..]);
    Ok(h)
}

/// Rows listed by bin on the device: bin `b`'s rows (absolute indices) are
/// `list[start[b] .. start[b] + hist.rows[b]]`.
pub(super) struct Binned<'a> {
    pub list: DeviceSlice<'a, u32>,
    pub start: [u64; BIN_COUNT],
    pub hist: Histogram,
}

impl<'a> Binned<'a> {
    /// The rows of bin `b`.
    pub fn rows(&self, b: usize) -> DeviceSlice<'a, u32> {
        self.list
            .sub(self.start[b] as usize, self.hist.rows[b] as usize)
    }
}

/// Where each bin's rows start in a list by bin of `hist`'s rows (the empty bin's start is
/// the end of the listed ones), and how many rows are listed.
fn starts(hist: &Histogram) -> ([u64; BIN_COUNT], u64) {
    let mut start = [0u64; BIN_COUNT];
    let mut at = 0;
    for (s, &rows) in start.iter_mut().zip(&hist.rows[..BIN_EMPTY]) {
        *s = at;
        at += rows;
    }
    start[BIN_EMPTY] = at;
    (start, at)
}

/// Writes the list of rows by bin; `first_row` is the absolute index of the weights' first row.
pub(super) fn scatter<'a, T: crate::scalar::DeviceScalar>(
    job: &Job<'_, T>,
    weights: Weights<'_>,
    first_row: usize,
    cap: u64,
    hist: Histogram,
    arena: &'a DeviceArena,
) -> Result<Binned<'a>> {
    let (start, listed) = starts(&hist);
    let mut list = arena.alloc::<u32>(listed as usize, "rows by bin")?;
    scatter_into(job, weights, first_row, cap, &start, &mut list, arena)?;
    Ok(Binned {
        list: list.into_view(),
        start,
        hist,
    })
}

/// Rows listed by bin in device memory of their own, for a plan to keep: what [`scatter`]
/// lists, where the bins depend on C's structure only (the numeric phase's), made once.
pub(super) struct KeptBins {
    list: DeviceBuffer<u32>,
    start: [u64; BIN_COUNT],
    hist: Histogram,
}

impl KeptBins {
    /// The bins as the kernels' launches take them.
    pub fn binned(&self, stream: &Stream) -> Result<Binned<'_>> {
        Ok(Binned {
            list: self.list.read(stream)?,
            start: self.start,
            hist: self.hist,
        })
    }
}

/// [`scatter`] into a list of its own (counters from `arena`), stream-ordered memory whose
/// home is `home`, the job's stream.
pub(super) fn scatter_kept<T: crate::scalar::DeviceScalar>(
    job: &Job<'_, T>,
    home: &Arc<Stream>,
    weights: Weights<'_>,
    first_row: usize,
    cap: u64,
    hist: Histogram,
    arena: &DeviceArena,
) -> Result<KeptBins> {
    let (start, listed) = starts(&hist);
    let mut list = DeviceBuffer::<u32>::new_on(job.gpu, home, listed as usize, "rows of C by bin")?;
    scatter_into(
        job,
        weights,
        first_row,
        cap,
        &start,
        &mut list.write(home)?,
        arena,
    )?;
    // Kept by a plan, read by its executions on other streams.
    list.mark_done(home)?;
    Ok(KeptBins { list, start, hist })
}

/// Lists the rows of every listed bin from `start`, the bins' starts in `list`.
fn scatter_into<T: crate::scalar::DeviceScalar>(
    job: &Job<'_, T>,
    weights: Weights<'_>,
    first_row: usize,
    cap: u64,
    start: &[u64; BIN_COUNT],
    list: &mut DeviceSliceMut<'_, u32>,
    arena: &DeviceArena,
) -> Result<()> {
    if list.is_empty() {
        return Ok(());
    }
    let n = weights.rows() as u64;
    let mut counters = arena.alloc::<u64>(2 * BIN_COUNT, "bin starts and cursors")?;
    counters.zero(job.stream)?;
    counters.upload(job.stream, start)?;
    let (starts, mut cursors) = counters.split_at_mut(BIN_COUNT);
    let f = job.gpu.function("spgemm", "spgemm_bin_scatter")?;
    let [values, from_offsets, a_scale] = weights.args();
    // SAFETY: arguments match spgemm_bin_scatter; `list` has a slot for every row of a
    // listed bin, as counted by the histogram `start` came from, over the same weights.
    unsafe {
        job.gpu.launch(
            f,
            grid_for(n, 256),
            job.stream,
            &[
                Arg::U64(n),
                Arg::U64(first_row as u64),
                values,
                from_offsets,
                a_scale,
                job.a.matrix().offsets.read(job.stream)?.arg(),
                Arg::U64(cap),
                starts.view().arg(),
                cursors.arg_mut(),
                list.arg_mut(),
                Arg::U32(floor_bin(job)),
            ],
        )
    }
}

/// Items per block of the scan kernels (`SCAN_THREADS * SCAN_ITEMS`).
const SCAN_BLOCK: u64 = 1024 * 8;

/// Bytes [`exclusive_scan`] takes from its arena for `n` counts.
pub(super) fn scan_bytes(n: u64) -> u64 {
    footprint(&[(8, n.div_ceil(SCAN_BLOCK) + 1)])
}

/// Writes the exclusive prefix sums of `counts` into `offsets` (one longer: the last is the
/// total) and returns the total.
pub(super) fn exclusive_scan<T: crate::scalar::DeviceScalar>(
    job: &Job<'_, T>,
    counts: DeviceSlice<'_, u64>,
    offsets: &mut DeviceSliceMut<'_, u64>,
    arena: &DeviceArena,
) -> Result<u64> {
    exclusive_scan_on(job.gpu, job.stream, counts, offsets, arena)
}

/// [`exclusive_scan`] queued on `stream` of `gpu`.
pub(super) fn exclusive_scan_on(
    gpu: &Gpu,
    stream: &Stream,
    counts: DeviceSlice<'_, u64>,
    offsets: &mut DeviceSliceMut<'_, u64>,
    arena: &DeviceArena,
) -> Result<u64> {
    let n = counts.len() as u64;
    let _span = tracing::debug_span!("scan", rows = n).entered();
    if n == 0 {
        offsets.sub_mut(0, 1).zero(stream)?;
        return Ok(0);
    }
    let blocks = n.div_ceil(SCAN_BLOCK);
    let mut sums = arena.alloc::<u64>(blocks as usize, "scan block sums")?;
    let config = LaunchConfig {
        grid: blocks as u32,
        block: 1024,
        shared_bytes: 0,
    };
    let sums_fn = gpu.function("spgemm", "scan_block_sums")?;
    let prefixes_fn = gpu.function("spgemm", "scan_block_prefixes")?;
    let apply_fn = gpu.function("spgemm", "scan_apply")?;
    // SAFETY: arguments match the three scan kernels; `sums` has a slot per block and
    // `offsets` n + 1 slots.
    unsafe {
        gpu.launch(
            sums_fn,
            config,
            stream,
            &[Arg::U64(n), counts.arg(), sums.arg_mut()],
        )?;
        gpu.launch(
            prefixes_fn,
            LaunchConfig {
                grid: 1,
                block: 1024,
                shared_bytes: 0,
            },
            stream,
            &[
                Arg::U64(blocks),
                sums.arg_mut(),
                offsets.sub_mut(n as usize, 1).arg_mut(),
            ],
        )?;
        gpu.launch(
            apply_fn,
            config,
            stream,
            &[
                Arg::U64(n),
                counts.arg(),
                sums.view().arg(),
                offsets.arg_mut(),
            ],
        )?;
    }
    Ok(offsets.view().sub(n as usize, 1).to_vec(stream)?[0])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bins_follow_table_sizes() {
        assert_eq!(bin_of(0, 100), BIN_EMPTY);
        assert_eq!(bin_of(5, 0), BIN_EMPTY);
        for w in 1..=8 {
            assert_eq!(bin_of(w, u64::MAX), 0, "{w}");
        }
        for w in 9..=16 {
            assert_eq!(bin_of(w, u64::MAX), 1, "{w}");
        }
        // Tables hold at least twice the weight, in powers of two from 16.
        for w in [9u64, 17, 100, 4096, 4097, 1 << 20, (1 << 20) + 1] {
            let b = bin_of(w, u64::MAX);
            let size = Histogram::table_size(b);
            assert!(size >= 2 * w && size / 2 < 2 * w, "{w}: {size}");
        }
        assert_eq!(bin_of(u64::MAX / 4, u64::MAX), BIN_EMPTY - 1);
        assert_eq!(Histogram::table_size(BIN_EMPTY - 1), 1 << 31);
        // Capped at the window: 8 and 10 entries at most, tables of 16 and 32 slots...
        assert_eq!(bin_of(20, 8), 0);
        assert_eq!(bin_of(40, 10), 1);
        // ... unless the products are more than four windows: a quarter of them (tables of
        // 512 slots), up to 32 windows (256 entries, 512 slots).
        assert_eq!(bin_of(1000, 10), 5);
        assert_eq!(bin_of(1000, 8), 5);
        assert_eq!(bin_of(100_000, 8), 5);
        // ... and 4096 (tables of 8192 slots).
        assert_eq!(bin_of(1_000_000, 1000), 9);
        // A window wider than that caps as before.
        assert_eq!(bin_of(1_000_000, 5000), 10);
        assert_eq!(bin_of(1_000_000, 10_000), 11);
        let h = Histogram::of(&[0, 3, 40, 40, 1 << 12], u64::MAX);
        assert_eq!(h.weight, 83 + (1 << 12));
        assert_eq!(Histogram::of(&[5, 50], 10).capped_weight, 15);
        assert_eq!(h.rows[BIN_EMPTY], 1);
        assert_eq!(h.bins().map(|(_, n)| n).sum::<u64>(), 4);
    }

    #[test]
    fn bins_are_listed_one_after_another() {
        let h = Histogram::of(&[0, 3, 40, 40, 5, 1 << 12, 0], u64::MAX);
        let (start, listed) = starts(&h);
        assert_eq!(listed, 5, "rows of weight 0 are not listed");
        assert_eq!(start[0], 0);
        for b in 1..BIN_COUNT {
            assert_eq!(start[b], start[b - 1] + h.rows[b - 1], "bin {b}");
        }
        assert_eq!(start[BIN_EMPTY], listed);
    }
}
