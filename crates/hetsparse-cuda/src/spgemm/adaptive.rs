//! The production path: rows binned by their work, each bin with the accumulator that suits it
//! (the family of nsparse, spECK and OpSparse that Xia et al. §III.B build on):
//!
//! - the tiniest rows (tables of up to [`THREAD_TABLE`] slots: at most 16 entries): a thread
//!   per row, its entries kept sorted in registers (8 or 16 of them, by the row's bin);
//! - short rows (tables of up to [`WARP_TABLE_MAX`] slots): a warp per row, its hash table in
//!   the warp's share of shared memory, the row's products spread evenly over the lanes, and
//!   each entry written at its rank among the table's keys (no sort, no block barrier); in the
//!   numeric phase a row of at most 32 entries of A and 33 to 64 products is instead sorted in
//!   the warp's registers and its runs of one column summed (no table at all);
//! - medium rows: a block per row with a hash table sized to the bin in shared memory. In the
//!   numeric phase the row comes out in column order by ranking through a bitmap of the window
//!   beside the table where that is cheaper than sorting the table (bitonic, in place) and fits
//!   ([`bitmap_words`]); in the symbolic phase a bitmap of the window replaces the table where it
//!   is no larger;
//! - long rows whose window is at most [`DENSE_WIDTH_FACTOR`] times their table (in the numeric
//!   phase also large shared tables, whose sort costs more): where the bin's rows of A are short
//!   against their products ([`ranges_pay`]), the window cut into column ranges, each
//!   accumulated densely in one block's shared memory (a value and a bit per column) and written
//!   from there in column order straight into C ([`RangePlan`]); otherwise a dense
//!   accumulator per row in global memory, filled by several blocks per row (each an equal
//!   share of the row's products, so a row of 10^6 products keeps many SMs busy), columns in
//!   order by a scan over the flags;
//! - long rows of very wide windows: a block per row with a hash table in global memory;
//! - rows beyond a warp's tables whose whole window is no wider than their table and fits one
//!   column range: that range, dense in shared memory (coarse AMG levels' narrow products).
//!
//! The symbolic phase bins by products (an upper bound of a row's entries), the numeric phase by
//! the exact counts.

use std::ops::Range;
use std::sync::Arc;

use hetsparse_core::{Error, Result};

use crate::context::{Arg, Function, LaunchConfig, Stream};
use crate::memory::{DeviceArena, DeviceSlice, DeviceSliceMut};
use crate::scalar::{kernel_name, DeviceScalar};

use super::binning::{self, Binned, Histogram, KeptBins, Weights};
use super::{acc_bytes, footprint, ColsOut, Job, Scratch};

/// Shared memory a bin's table may take per block: what the GPU allows after opting in,
/// less room for the kernels' static shared variables.
fn shared_table_bytes(gpu: &crate::Gpu) -> u64 {
    u64::from(gpu.max_shared_optin())
        .saturating_sub(u64::from(crate::context::STATIC_SHARED_BYTES))
        .max(8 * 1024)
}
/// Threads per block for rows with global-memory tables.
const GLOBAL_THREADS: u32 = 512;

fn threads_for(size: u64) -> u32 {
    match size {
        0..=128 => 32,
        129..=512 => 64,
        513..=2048 => 128,
        2049..=8192 => 256,
        _ => 512,
    }
}

/// Rows whose table has at most this many slots get a warp each.
pub(super) const WARP_TABLE_MAX: u64 = 256;
/// Threads per block of the warp-per-row kernels: 8 rows per block.
const WARP_THREADS: u64 = 256;
const WARP_ROWS_PER_BLOCK: u64 = WARP_THREADS / 32;
/// Rows whose table has at most this many slots (the first two bins, 16 and 32 slots) get a
/// thread each, with their entries (at most half the table) in registers: the `thread`
/// kernels, one instance per bin.
const THREAD_TABLE: u64 = 32;
/// Threads per block of the thread-per-row kernels; `TR_THREADS` in the kernels.
const THREAD_ROWS_PER_BLOCK: u64 = 128;
/// A long row gets a dense accumulator when its window is at most this many times its table:
/// clearing and scanning a dense row costs a pass over the window, but a hash table in global
/// memory costs a sort of the table, which is dearer up to about this ratio.
pub(super) const DENSE_WIDTH_FACTOR: u64 = 32;
/// Weight (products in the symbolic phase, entries in the numeric) one block of a dense row
/// takes: a row gets as many blocks as the largest weight of its bin has such shares, at most
/// [`DENSE_MAX_PARTS`].
const DENSE_WEIGHT_PER_BLOCK: u64 = 16 * 1024;
const DENSE_MAX_PARTS: u64 = 4096;
/// Threads of the dense kernels; `DN_THREADS` in the kernels.
const DENSE_THREADS: u32 = 512;

/// Bytes between two dense rows (flags: one per column; values: one accumulator per column).
pub(super) fn dense_stride(width: u64) -> u64 {
    width.div_ceil(16) * 16
}

/// Threads of a block of the range kernels, which stage as many A entries at a time.
const RANGE_THREADS: u64 = 1024;
/// Shared memory of a staged A entry: its first B position in the range and its B row's end
/// (u64 each), the start of its products (u32), and in the numeric phase its value.
const RANGE_STAGE_BYTES: u64 = 8 + 8 + 4;
/// Narrowest and widest column range (powers of two; the kernels need multiples of 64, and
/// a range's products, at most `RANGE_THREADS` times its width at a time, count in 32 bits).
pub(super) const RANGE_MIN_COLS: u64 = 1024;
const RANGE_MAX_COLS: u64 = 1 << 20;
/// Weight (products in the symbolic phase, entries in the numeric) a range takes at most
/// where shared memory allows: ranges narrower than the widest that fits cost a walk over
/// the row's A entries each, so a row is cut finer only as far as its weight asks.
const RANGE_MAX_WEIGHT: u64 = 256 * 1024;
/// Weight one block takes at least where a row has ranges enough: lighter ranges are taken
/// by one block one after another (clearing, the walk over A and the write are per range;
/// the block's launch and its first search are per block).
const RANGE_BLOCK_WEIGHT: u64 = 16 * 1024;
/// Most (row, range) entry counts one group of rows keeps (the numeric phase's placing of
/// rows split over several blocks): 16 MiB.
const RANGE_COUNTS_MAX: u64 = 1 << 22;

/// How the long rows of one bin are cut into column ranges, and how the ranges go to blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct RangePlan {
    /// Columns of a range (a power of two); the last range of the window may be narrower.
    pub range_cols: u64,
    /// Ranges of the window.
    pub ranges: u64,
    /// Consecutive ranges one block takes, one after another.
    pub ranges_per_block: u64,
    /// Blocks per row.
    pub blocks_per_row: u64,
}

impl RangePlan {
    /// The ranges of rows of weight up to `size / 2` (tables of `size` slots) in a window of
    /// `width` columns, with `value_bytes` per accumulator (0: counting, a bit per column)
    /// and `stored_bytes` per stored value (staged with each A entry; 0 when counting), given
    /// `shared_bytes` of shared memory per block; `None` where not even the narrowest range
    /// fits.
    pub(super) fn choose(
        size: u64,
        width: u64,
        value_bytes: u64,
        stored_bytes: u64,
        shared_bytes: u64,
    ) -> Option<RangePlan> {
        let stage = RANGE_THREADS * (RANGE_STAGE_BYTES + stored_bytes);
        let room = shared_bytes.checked_sub(stage)?;
        // A column takes its value and one bit.
        let fit = (room * 8 / (8 * value_bytes + 1)).min(RANGE_MAX_COLS);
        if fit < RANGE_MIN_COLS {
            return None;
        }
        let widest = 1u64 << (63 - fit.leading_zeros());
        let width = width.max(1);
        let weight = (size / 2).max(1);
        let wanted = weight.div_ceil(RANGE_MAX_WEIGHT);
        let range_cols = width
            .div_ceil(wanted)
            .next_power_of_two()
            .clamp(RANGE_MIN_COLS, widest);
        let ranges = width.div_ceil(range_cols);
        let per_range = (weight / ranges).max(1);
        let together = (RANGE_BLOCK_WEIGHT / per_range).clamp(1, ranges);
        let blocks_per_row = ranges.div_ceil(together);
        Some(RangePlan {
            range_cols,
            ranges,
            ranges_per_block: ranges.div_ceil(blocks_per_row),
            blocks_per_row,
        })
    }

    /// The same ranges, all taken by one block per row (no per-range counts needed).
    fn one_block_per_row(self) -> RangePlan {
        RangePlan {
            ranges_per_block: self.ranges,
            blocks_per_row: 1,
            ..self
        }
    }

    /// Dynamic shared memory of a block, as the kernels lay it out (`value_bytes`,
    /// `stored_bytes`: as for [`RangePlan::choose`]).
    pub(super) fn shared_bytes(&self, value_bytes: u64, stored_bytes: u64) -> u64 {
        self.range_cols * value_bytes
            + self.range_cols / 8
            + RANGE_THREADS * (RANGE_STAGE_BYTES + stored_bytes)
    }

    /// Scratch bytes of the per-range entry counts of `n` rows.
    fn counts_bytes(&self, n: u64) -> u64 {
        footprint(&[(4, n * self.ranges)])
    }
}

/// The most scratch memory the ranges of `rows` long rows in a window of `width` columns ask
/// for (their entry counts, in groups of at most [`RANGE_COUNTS_MAX`]).
pub(super) fn range_counts_bound(rows: u64, width: u64) -> u64 {
    if rows == 0 {
        0
    } else {
        let ranges = width.max(1).div_ceil(RANGE_MIN_COLS);
        footprint(&[(4, rows.saturating_mul(ranges).min(RANGE_COUNTS_MAX))])
    }
}

/// Rows of a bin take column ranges rather than a dense row in global memory where walking
/// the bin's longest row of A once per range costs at most an eighth of the table (the bin's
/// rows have more than a quarter of it in weight): each range walks all of a row's A entries
/// with a search in each one's B row, while a dense row costs its products' atomics and a pass
/// over the window. Power-law hubs (rows of A of a few hundred entries, 10^4-10^5 products, 8
/// ranges of 131 072 columns) take ranges; the skewed class's rows of A of 450 000 entries
/// (31 ranges) a dense row.
fn ranges_pay(ranges: u64, longest_a: u64, size: u64) -> bool {
    ranges.saturating_mul(longest_a) <= size / 8
}

/// How the rows of one bin (tables of one size) accumulate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Accumulator {
    /// A warp per row, the table in shared memory.
    Warp,
    /// A block per row, the table in shared memory.
    Shared,
    /// Several blocks per row, a dense row in global memory.
    Dense,
    /// Column ranges, each dense in one block's shared memory ([`RangePlan`]).
    Ranges,
    /// A block per row, the table in global memory.
    Global,
}

/// In the numeric phase, tables of at least this many slots go dense where the window is at
/// most [`DENSE_OVER_SHARED_FACTOR`] times the table, even if they fit shared memory, unless
/// the window's bitmap goes beside the table ([`bitmap_words`]) and both take at most half the
/// shared memory a block may have: sorting a table this large (bitonic, a block per row) costs
/// more than clearing and scanning a dense row of the window, while ranking through the bitmap
/// in shared memory costs less, as long as at least two blocks share an SM (one's products
/// loading while another ranks).
const DENSE_OVER_SHARED_MIN: u64 = 4096;
const DENSE_OVER_SHARED_FACTOR: u64 = 16;

/// Words (32 columns each) of a bitmap of a window of `width` columns.
fn window_words(width: u64) -> u64 {
    width.div_ceil(32)
}

/// Thread steps of the numeric phase's tail that the bitmap ranking replaces: the bitonic sort
/// of a row's keys (a bin's rows have more than `size / 4` entries, so `m = size / 2` keys:
/// `L (L + 1) / 2` barrier-separated passes over them, `L = log2 m`). The compaction before
/// the sort costs a pass over the slots, as does the ranking's setting of bits, so neither
/// counts.
fn sort_steps(size: u64) -> u64 {
    let m = size / 2;
    let l = u64::from(m.max(1).trailing_zeros());
    m * l * (l + 1) / 2
}

/// Thread steps of the ranking through a bitmap of `words` words: clear and count them, and
/// write each one's prefix.
fn ranking_steps(words: u64) -> u64 {
    3 * words
}

/// Shared bytes of the numeric ranking's bitmap of `words` words: the words and a 16-bit
/// prefix (the bits before it) per word.
fn ranking_bytes(words: u64) -> u64 {
    6 * words
}

/// Largest table whose rows (at most half its slots) have prefixes that fit 16 bits.
const RANKING_TABLE_MAX: u64 = 1 << 16;

/// Words of the window's bitmap that a bin of shared tables of `size` slots (`slot_bytes`
/// each) uses in a window of `width` columns, or 0 for none; `numeric` for the phase that
/// ranks the row's columns.
///
/// - Symbolic: the bitmap replaces the table where it has at most as many words as the table
///   has slots: no more memory (so no fewer blocks per SM) and no more clearing than the
///   table, while each product costs one atomicOr per run of a warp's neighbouring columns
///   instead of a probe.
/// - Numeric: the bitmap and its prefixes ([`ranking_bytes`]) go beside the table, and rank
///   the columns instead of the sort, where table and bitmap fit the shared memory a block may
///   have, the bitmap takes no more memory than the table (so that blocks per SM, which hide
///   the latency of the products' loads, at most halve), and the ranking's steps
///   ([`ranking_steps`]) are no more than the sort's ([`sort_steps`]); otherwise the sort
///   stays. Both paths make two passes over the table besides (compaction and output, or bits
///   and output), so those do not count.
fn bitmap_words(size: u64, width: u64, slot_bytes: u64, shared_bytes: u64, numeric: bool) -> u64 {
    let words = window_words(width);
    let use_bitmap = if numeric {
        let table = size * slot_bytes;
        let bitmap = ranking_bytes(words);
        size <= RANKING_TABLE_MAX
            && table + bitmap <= shared_bytes
            && bitmap <= table
            && ranking_steps(words) <= sort_steps(size)
    } else {
        words <= size
    };
    if use_bitmap {
        words
    } else {
        0
    }
}

#[cfg(test)]
mod bitmap_rule_tests {
    use super::*;

    /// An H100's or H200's opt-in shared memory per block (227 KiB) less the static variables.
    const HOPPER: u64 = 227 * 1024 - 1024;
    /// Without the opt-in.
    const DEFAULT: u64 = 48 * 1024 - 1024;
    const F32: u64 = 8;
    const F64: u64 = 12;
    const C64: u64 = 20;

    #[test]
    fn linear_programming_rows_rank_through_the_bitmap() {
        // A·Aᵀ of 100 000 rows: ~917 entries per row, tables of 2048 (and 4096) slots.
        assert_eq!(bitmap_words(2048, 100_000, F64, HOPPER, true), 3125);
        assert_eq!(bitmap_words(4096, 100_000, F64, HOPPER, true), 3125);
        assert_eq!(bitmap_words(2048, 100_000, F64, DEFAULT, true), 3125);
        // A width that is no multiple of 32 rounds up.
        assert_eq!(bitmap_words(2048, 100_001, F64, HOPPER, true), 3126);
        // Tables of 1024 f64 slots (12 KiB) are smaller than the bitmap and its prefixes
        // (18.3 KiB): sort.
        assert_eq!(bitmap_words(1024, 100_000, F64, HOPPER, true), 0);
        // Complex f64 slots are larger, so the bitmap is the smaller part.
        assert_eq!(bitmap_words(1024, 100_000, C64, HOPPER, true), 3125);
    }

    #[test]
    fn power_law_rows_rank_through_the_bitmap_where_it_is_no_larger_than_the_table() {
        // 131 072 columns: a 16 KiB bitmap and 8 KiB of prefixes, as large as a table of 2048
        // f64 slots.
        assert_eq!(bitmap_words(2048, 131_072, F64, HOPPER, true), 4096);
        assert_eq!(bitmap_words(2048, 131_072, F32, HOPPER, true), 0);
        assert_eq!(bitmap_words(4096, 131_072, F32, HOPPER, true), 4096);
        assert_eq!(bitmap_words(1024, 131_072, F64, HOPPER, true), 0);
        assert_eq!(bitmap_words(8192, 131_072, F64, HOPPER, true), 4096);
    }

    #[test]
    fn windows_too_wide_for_shared_memory_keep_the_sort() {
        // 3 million columns: a 366 KiB bitmap.
        for size in [512, 1024, 2048, 4096, 8192, 16384] {
            for slot in [F32, F64, C64] {
                assert_eq!(bitmap_words(size, 3_000_000, slot, HOPPER, true), 0);
            }
        }
        // Table and bitmap must fit together: 4096 f64 slots (48 KiB) and 12 KiB of bitmap
        // and prefixes fit 227 KiB but not 47 KiB.
        assert_eq!(bitmap_words(4096, 65_536, F64, HOPPER, true), 2048);
        assert_eq!(bitmap_words(4096, 65_536, F64, DEFAULT, true), 0);
    }

    #[test]
    fn narrow_windows_rank_through_the_bitmap() {
        assert_eq!(bitmap_words(512, 1000, F32, HOPPER, true), 32);
        assert_eq!(bitmap_words(512, 1, F64, HOPPER, true), 1);
    }

    #[test]
    fn chosen_bitmaps_fit_are_no_larger_than_the_table_and_cheaper_than_the_sort() {
        let mut chosen = 0;
        for shift in 9..16 {
            let size = 1u64 << shift;
            for width in [
                1,
                31,
                1000,
                40_000,
                100_000,
                131_072,
                400_000,
                1 << 20,
                1 << 32,
            ] {
                for slot in [F32, F64, C64] {
                    for shared in [HOPPER, DEFAULT] {
                        if size * slot > shared {
                            continue; // not a shared table
                        }
                        let words = bitmap_words(size, width, slot, shared, true);
                        if words == 0 {
                            continue;
                        }
                        chosen += 1;
                        assert_eq!(words, width.div_ceil(32));
                        assert!(size * slot + 6 * words <= shared);
                        assert!(6 * words <= size * slot);
                        assert!(ranking_steps(words) <= sort_steps(size));
                    }
                }
            }
        }
        assert!(chosen > 20, "{chosen} cases chose the bitmap");
    }

    #[test]
    fn sort_steps_count_the_bitonic_passes() {
        // 1024 keys: 55 passes.
        assert_eq!(sort_steps(2048), 1024 * 55);
        assert_eq!(sort_steps(512), 256 * 36);
    }

    #[test]
    fn large_shared_tables_rank_through_the_bitmap_rather_than_go_dense() {
        // 4096 f64 slots (48 KiB) and 12 KiB of bitmap: 60 KiB, three blocks per SM.
        assert_eq!(
            accumulator(4096, 65_536, F64, HOPPER, true),
            Accumulator::Shared
        );
        // 8192 f32 slots (64 KiB) and 24 KiB of bitmap in 131 072 columns: two blocks.
        assert_eq!(
            accumulator(8192, 131_072, F32, HOPPER, true),
            Accumulator::Shared
        );
        // 8192 f64 slots (96 KiB) and 24 KiB: one block per SM, dense.
        assert_eq!(
            accumulator(8192, 131_072, F64, HOPPER, true),
            Accumulator::Dense
        );
        // 16 384 f64 slots (192 KiB) in 262 144 columns leave no room for the bitmap: dense.
        assert_eq!(
            accumulator(16_384, 262_144, F64, HOPPER, true),
            Accumulator::Dense
        );
        // Without the opt-in, tables of 4096 f64 slots are too large for shared memory.
        assert_eq!(
            accumulator(4096, 65_536, F64, DEFAULT, true),
            Accumulator::Dense
        );
        // The symbolic phase is unchanged.
        assert_eq!(
            accumulator(8192, 131_072, 4, HOPPER, false),
            Accumulator::Shared
        );
    }

    #[test]
    fn symbolic_bitmaps_replace_tables_no_smaller_than_them() {
        // The LP rows' symbolic tables (~1060 products: 4096 slots).
        assert_eq!(bitmap_words(4096, 100_000, 4, HOPPER, false), 3125);
        assert_eq!(bitmap_words(4096, 131_072, 4, HOPPER, false), 4096);
        assert_eq!(bitmap_words(2048, 100_000, 4, HOPPER, false), 0);
        assert_eq!(bitmap_words(512, 16_384, 4, HOPPER, false), 512);
        assert_eq!(bitmap_words(512, 16_385, 4, HOPPER, false), 0);
    }
}

/// The accumulator of rows with tables of `size` slots of `slot_bytes` each, in a window of
/// `width` columns, given the shared memory a block may have; `numeric` for the phase whose
/// tables are sorted.
fn accumulator(
    size: u64,
    width: u64,
    slot_bytes: u64,
    shared_bytes: u64,
    numeric: bool,
) -> Accumulator {
    // Numeric warp tables take 4 bytes more per slot (their compacted keys and slots).
    let warp_slot = if numeric { slot_bytes + 4 } else { slot_bytes };
    let warp_max = WARP_TABLE_MAX.min(shared_bytes / (WARP_ROWS_PER_BLOCK * warp_slot));
    if size <= warp_max {
        Accumulator::Warp
    } else if numeric
        && size >= DENSE_OVER_SHARED_MIN
        && width <= DENSE_OVER_SHARED_FACTOR * size
        && !shared_ranking_fits_twice(size, width, slot_bytes, shared_bytes)
    {
        Accumulator::Dense
    } else if size * slot_bytes <= shared_bytes {
        Accumulator::Shared
    } else if width <= DENSE_WIDTH_FACTOR * size {
        Accumulator::Dense
    } else {
        Accumulator::Global
    }
}

/// The one column range that takes rows of tables of `size` slots (accumulated by `kind`) in
/// a window of `width` columns, where the window is no wider than the table, one range covers
/// it (`value_bytes`, `stored_bytes`, `shared_bytes`: as for [`RangePlan::choose`]) and the
/// product's rows are few ([`binning::rows_are_few`]). Such rows (a coarse level's Galerkin
/// product: a hundred columns, thousands of products per row) are accumulated densely in
/// shared memory by a block of `RANGE_THREADS` lanes: no probing, no contended key slots, no
/// sort, and four times the lanes of a block's hash table. Where the rows are many (a fine
/// level's A·P into a narrow P), the hash kernels' smaller blocks keep more rows in flight and
/// stay. A single range walks the row's A entries once, as every accumulator does, so their
/// number does not matter here (it does for several ranges: [`ranges_pay`]). Warp tables stay.
fn narrow_window(
    kind: Accumulator,
    size: u64,
    width: u64,
    rows_are_few: bool,
    value_bytes: u64,
    stored_bytes: u64,
    shared_bytes: u64,
) -> Option<RangePlan> {
    if kind == Accumulator::Warp || width > size || !rows_are_few {
        return None;
    }
    RangePlan::choose(size, width, value_bytes, stored_bytes, shared_bytes)
        .filter(|p| p.ranges == 1)
}

/// Whether a numeric shared table of `size` slots ranks through the window's bitmap with table
/// and bitmap in at most half of `shared_bytes`.
fn shared_ranking_fits_twice(size: u64, width: u64, slot_bytes: u64, shared_bytes: u64) -> bool {
    let words = bitmap_words(size, width, slot_bytes, shared_bytes, true);
    words > 0 && 2 * (size * slot_bytes + ranking_bytes(words)) <= shared_bytes
}

/// Whether rows of tables of `size` slots may get dense rows (whatever the GPU's shared
/// memory): what bounds the work memory before the GPU is asked.
pub(super) fn may_be_dense(size: u64, width: u64) -> bool {
    size > WARP_TABLE_MAX && width <= DENSE_WIDTH_FACTOR * size
}

/// Bytes of a group of `n` dense rows: flags and (numeric) values.
pub(super) fn dense_footprint(n: u64, stride: u64, value_bytes: u64) -> u64 {
    footprint(&[(1, n * stride), (value_bytes, n * stride)])
}

/// The rows of one bin on the device, and what the launch of its kernel needs.
struct BinLaunch<'s> {
    warp: bool,
    rows: DeviceSlice<'s, u32>,
    table_size: u64,
    table_offsets: Arg,
    keys: Arg,
    vals: Arg,
    /// Words of the window's bitmap (block per row, shared tables; else 0): [`bitmap_words`].
    bitmap_words: u64,
}

/// The kernels of one phase: thread per row (rows of at most 8 and 16 entries), warp per row,
/// block per row (shared or global hash table), and the builder of their argument lists.
struct HashKernels<'a> {
    thread: [Function; 2],
    warp: Function,
    block: Function,
    args: &'a dyn Fn(&BinLaunch<'_>) -> Vec<Arg>,
}

/// What the dense rows of one group need: the kernels' row list and memory (flags, and in
/// the numeric phase values, both written by the accumulation).
struct DenseGroup<'s> {
    rows: DeviceSlice<'s, u32>,
    parts_per_row: u64,
    flags: DeviceSliceMut<'s, u8>,
    vals: Arg,
}

/// What the column-range rows of one group need: the kernels' row list, their ranges and
/// (numeric phase, rows split over several blocks) the per-range entry counts.
struct RangeGroup<'s> {
    rows: DeviceSlice<'s, u32>,
    ranges: RangePlan,
    counts: Option<DeviceSliceMut<'s, u32>>,
}

/// The kernels of a phase's long rows: dense rows in global memory, and column ranges.
struct LongRowKernels<'a> {
    dense: &'a dyn Fn(&mut DenseGroup<'_>) -> Result<()>,
    ranges: &'a dyn Fn(&mut RangeGroup<'_>) -> Result<()>,
}

/// How the rows of one bin (tables of `size` slots) run: their accumulator and, for the
/// accumulators in scratch memory, the rows of a group and the blocks of a dense row; for
/// column ranges their plan.
#[derive(Clone, Copy)]
struct BinPlan {
    kind: Accumulator,
    size: u64,
    per_group: u64,
    parts_per_row: u64,
    ranges: Option<RangePlan>,
}

impl BinPlan {
    /// The plan of bin `b`'s `count` rows, whose longest row of A has `longest_a` entries,
    /// with `value_bytes` per accumulator (0 in the symbolic phase), `shared_bytes` of shared
    /// memory per block and `cap` bytes of scratch memory at most. Column ranges count their
    /// entries per range (numeric phase, rows split over several blocks) in groups of rows
    /// whose counts fit `cap`; where not even one row's do, each row gets one block.
    fn of<T: DeviceScalar>(
        job: &Job<'_, T>,
        (b, count): (usize, u64),
        longest_a: u64,
        value_bytes: u64,
        shared_bytes: u64,
        cap: u64,
    ) -> Result<BinPlan> {
        let size = Histogram::table_size(b);
        if size > u64::from(u32::MAX) / 2 {
            return Err(Error::TooLarge {
                what: format!(
                    "hash tables of {count} rows of C (rows {}..{})",
                    job.rows().start,
                    job.rows().end
                ),
                needed: size,
                limit: u64::from(u32::MAX) / 2,
                unit: "slots",
            });
        }
        let width = job.width();
        let stride = dense_stride(width);
        let slot_bytes = 4 + value_bytes;
        let numeric = value_bytes > 0;
        let mut kind = accumulator(size, width, slot_bytes, shared_bytes, numeric);
        let stored_bytes = if numeric {
            std::mem::size_of::<T::Device>() as u64
        } else {
            0
        };
        let mut ranges = None;
        if kind == Accumulator::Dense && b >= binning::LONG_A_MIN_BIN {
            ranges = RangePlan::choose(size, width, value_bytes, stored_bytes, shared_bytes)
                .filter(|p| ranges_pay(p.ranges, longest_a, size));
            if ranges.is_some() {
                kind = Accumulator::Ranges;
            }
        }
        if kind != Accumulator::Ranges {
            let few = binning::rows_are_few(job);
            if let Some(whole) = narrow_window(
                kind,
                size,
                width,
                few,
                value_bytes,
                stored_bytes,
                shared_bytes,
            ) {
                kind = Accumulator::Ranges;
                ranges = Some(whole);
            }
        }
        if kind == Accumulator::Dense && dense_footprint(1, stride, value_bytes) > cap {
            kind = Accumulator::Global;
        }
        let (per_group, parts_per_row) = match kind {
            Accumulator::Warp | Accumulator::Shared => (count, 1),
            Accumulator::Ranges => {
                let mut per_group = count;
                if let Some(plan) = ranges.as_mut() {
                    if numeric && plan.blocks_per_row > 1 {
                        per_group = (RANGE_COUNTS_MAX / plan.ranges)
                            .min(cap / plan.counts_bytes(1))
                            .min(count);
                        if per_group == 0 {
                            *plan = plan.one_block_per_row();
                            per_group = count;
                        }
                    }
                    let blocks_limit = u64::from(i32::MAX as u32) / plan.blocks_per_row;
                    per_group = per_group.clamp(1, blocks_limit);
                }
                (per_group, 1)
            }
            Accumulator::Dense => {
                let parts_per_row = (size / 2)
                    .div_ceil(DENSE_WEIGHT_PER_BLOCK)
                    .clamp(1, DENSE_MAX_PARTS);
                let per_group = (cap / dense_footprint(1, stride, value_bytes))
                    .clamp(1, (1 << 30) / parts_per_row);
                (per_group, parts_per_row)
            }
            Accumulator::Global => {
                // Groups of rows whose tables fit the scratch memory together.
                let per_row = footprint(&[(8, 1), (4, size), (value_bytes, size)]);
                let per_group = (cap / per_row).min(1 << 20);
                if per_group == 0 {
                    return Err(crate::error::out_of_memory(
                        &format!("global hash table of a row of C ({size} slots)"),
                        per_row,
                        cap,
                    ));
                }
                (per_group, 1)
            }
        };
        Ok(BinPlan {
            kind,
            size,
            per_group,
            parts_per_row,
            ranges,
        })
    }

    /// The ranges whose entries a group counts first: the numeric phase's rows split over
    /// several blocks.
    fn counted_ranges(&self, value_bytes: u64) -> Option<RangePlan> {
        self.ranges
            .filter(|p| value_bytes > 0 && p.blocks_per_row > 1)
    }

    /// Scratch bytes of a group of `n` rows (none for tables in shared memory).
    fn group_bytes(&self, n: u64, stride: u64, value_bytes: u64) -> u64 {
        match self.kind {
            Accumulator::Warp | Accumulator::Shared => 0,
            Accumulator::Ranges => self
                .counted_ranges(value_bytes)
                .map_or(0, |p| p.counts_bytes(n)),
            Accumulator::Dense => dense_footprint(n, stride, value_bytes),
            Accumulator::Global => {
                let entries = n * self.size;
                footprint(&[(8, n), (4, entries), (value_bytes, entries)])
            }
        }
    }
}

/// The most scratch memory [`run_bins`] asks for at once for `binned`, so that it can be had
/// before the first kernel is queued (no wait for the stream to grow it half way).
fn scratch_need<T: DeviceScalar>(
    job: &Job<'_, T>,
    binned: &Binned<'_>,
    value_bytes: u64,
    cap: u64,
) -> Result<u64> {
    let shared_bytes = shared_table_bytes(job.gpu);
    let stride = dense_stride(job.width());
    let mut need = 0;
    for bin in binned.hist.bins() {
        let longest_a = binned.hist.longest_a[bin.0];
        let plan = BinPlan::of(job, bin, longest_a, value_bytes, shared_bytes, cap)?;
        need = need.max(plan.group_bytes(plan.per_group.min(bin.1), stride, value_bytes));
    }
    Ok(need)
}

/// Runs every listed bin with its accumulator: hash bins through `kernels`, long rows through
/// `long` (a group of rows at a time: dense rows with flags and values cleared, column ranges
/// with scratch for their range counts where the numeric phase needs them). `bitmaps`:
/// whether block per row kernels may get a bitmap of the window ([`bitmap_words`]; not where
/// a plan's columns are known, which needs no ranking).
fn run_bins<T: DeviceScalar>(
    job: &Job<'_, T>,
    binned: &Binned<'_>,
    value_bytes: u64,
    bitmaps: bool,
    scratch: &mut Scratch,
    kernels: &HashKernels<'_>,
    long: &LongRowKernels<'_>,
) -> Result<()> {
    let slot_bytes = 4 + value_bytes;
    // The numeric warp kernels also compact the occupied slots: a key and a slot index for
    // every two slots.
    let warp_slot_bytes = if value_bytes > 0 {
        slot_bytes + 4
    } else {
        slot_bytes
    };
    let shared_bytes = shared_table_bytes(job.gpu);
    let stride = dense_stride(job.width());
    for (b, count) in binned.hist.bins() {
        let longest_a = binned.hist.longest_a[b];
        let plan = BinPlan::of(
            job,
            (b, count),
            longest_a,
            value_bytes,
            shared_bytes,
            scratch.cap(),
        )?;
        let size = plan.size;
        let rows = binned.rows(b);
        match plan.kind {
            Accumulator::Warp | Accumulator::Shared => {
                let warp = plan.kind == Accumulator::Warp;
                let words = if bitmaps && !warp {
                    bitmap_words(size, job.width(), slot_bytes, shared_bytes, value_bytes > 0)
                } else {
                    0
                };
                let launch = BinLaunch {
                    warp,
                    rows,
                    table_size: size,
                    table_offsets: Arg::U64(0),
                    keys: Arg::U64(0),
                    vals: Arg::U64(0),
                    bitmap_words: words,
                };
                let (function, config) = if warp && size <= THREAD_TABLE {
                    (
                        kernels.thread[usize::from(size > THREAD_TABLE / 2)],
                        LaunchConfig {
                            grid: count.div_ceil(THREAD_ROWS_PER_BLOCK).min(1 << 20) as u32,
                            block: THREAD_ROWS_PER_BLOCK as u32,
                            shared_bytes: 0,
                        },
                    )
                } else if warp {
                    (
                        kernels.warp,
                        LaunchConfig {
                            grid: count.div_ceil(WARP_ROWS_PER_BLOCK).min(1 << 20) as u32,
                            block: WARP_THREADS as u32,
                            shared_bytes: (WARP_ROWS_PER_BLOCK * size * warp_slot_bytes) as u32,
                        },
                    )
                } else {
                    // The symbolic bitmap replaces the table; the numeric one (with its
                    // prefixes) follows it.
                    let shared = match (words, value_bytes) {
                        (0, _) => size * slot_bytes,
                        (_, 0) => 4 * words,
                        _ => size * slot_bytes + ranking_bytes(words),
                    };
                    (
                        kernels.block,
                        LaunchConfig {
                            grid: count.min(1 << 20) as u32,
                            block: threads_for(size),
                            shared_bytes: shared as u32,
                        },
                    )
                };
                job.gpu.allow_shared(function, config.shared_bytes)?;
                // SAFETY: `args` builds the kernel's parameter list; buffers cover what it
                // reads, the row list holds `count` rows.
                unsafe {
                    job.gpu
                        .launch(function, config, job.stream, &(kernels.args)(&launch))?
                };
            }
            Accumulator::Dense => {
                let mut first = 0;
                while first < count {
                    let n = plan.per_group.min(count - first);
                    let arena = scratch.get(
                        job.gpu,
                        job.stream,
                        plan.group_bytes(n, stride, value_bytes),
                        "dense accumulators of long rows",
                    )?;
                    let mut flags = arena.alloc::<u8>((n * stride) as usize, "dense row flags")?;
                    flags.zero(job.stream)?;
                    let vals = if value_bytes > 0 {
                        let mut v = arena
                            .alloc::<u8>((n * stride * value_bytes) as usize, "dense row values")?;
                        // Zero bits are the additive identity of every accumulator type.
                        v.zero(job.stream)?;
                        v.arg_mut()
                    } else {
                        Arg::U64(0)
                    };
                    (long.dense)(&mut DenseGroup {
                        rows: rows.sub(first as usize, n as usize),
                        parts_per_row: plan.parts_per_row,
                        flags,
                        vals,
                    })?;
                    first += n;
                }
            }
            Accumulator::Ranges => {
                let ranges = plan.ranges.ok_or_else(|| Error::Internal {
                    backend: crate::error::BACKEND,
                    what: format!("column ranges of bin {b} without a plan"),
                })?;
                let mut first = 0;
                while first < count {
                    let n = plan.per_group.min(count - first);
                    let rows = rows.sub(first as usize, n as usize);
                    match plan.counted_ranges(value_bytes) {
                        Some(counted) => {
                            let arena = scratch.get(
                                job.gpu,
                                job.stream,
                                plan.group_bytes(n, stride, value_bytes),
                                "entry counts of the column ranges of long rows",
                            )?;
                            // Every (row, range) count is written by the counting pass.
                            let counts = arena.alloc::<u32>(
                                (n * counted.ranges) as usize,
                                "entry counts of column ranges",
                            )?;
                            (long.ranges)(&mut RangeGroup {
                                rows,
                                ranges,
                                counts: Some(counts),
                            })?;
                        }
                        None => (long.ranges)(&mut RangeGroup {
                            rows,
                            ranges,
                            counts: None,
                        })?,
                    }
                    first += n;
                }
            }
            Accumulator::Global => {
                let mut first = 0;
                while first < count {
                    let n = plan.per_group.min(count - first);
                    let entries = n * size;
                    let need = plan.group_bytes(n, stride, value_bytes);
                    let arena = scratch.get(job.gpu, job.stream, need, "global hash tables")?;
                    let table_offsets: Vec<u64> = (0..n).map(|k| k * size).collect();
                    let offsets = arena.upload(job.stream, &table_offsets, "table offsets")?;
                    let mut keys = arena.alloc::<u32>(entries as usize, "global hash keys")?;
                    let mut vals = arena
                        .alloc::<u8>((entries * value_bytes) as usize, "global hash values")?;
                    let launch = BinLaunch {
                        warp: false,
                        rows: rows.sub(first as usize, n as usize),
                        table_size: size,
                        table_offsets: offsets.arg(),
                        keys: keys.arg_mut(),
                        vals: vals.arg_mut(),
                        bitmap_words: 0,
                    };
                    let config = LaunchConfig {
                        grid: n as u32,
                        block: GLOBAL_THREADS,
                        shared_bytes: 0,
                    };
                    // SAFETY: as above; each row's table lies inside `keys`/`vals`.
                    unsafe {
                        job.gpu.launch(
                            kernels.block,
                            config,
                            job.stream,
                            &(kernels.args)(&launch),
                        )?
                    };
                    first += n;
                }
            }
        }
    }
    Ok(())
}

/// Launch configuration of the dense accumulation (`parts_per_row` blocks per row) and of the
/// per-row passes after it (a block per row).
fn dense_configs(group: &DenseGroup<'_>) -> (LaunchConfig, LaunchConfig) {
    let n = group.rows.len() as u64;
    (
        LaunchConfig {
            grid: (n * group.parts_per_row) as u32,
            block: DENSE_THREADS,
            shared_bytes: 0,
        },
        LaunchConfig {
            grid: n.min(1 << 20) as u32,
            block: 256,
            shared_bytes: 0,
        },
    )
}

/// The operands as the kernels of both phases take them after their own leading arguments:
/// A's offsets and columns, B's, then the window's first and last column; with `values` each
/// matrix's values after its columns.
fn operand_args<T: DeviceScalar>(job: &Job<'_, T>, values: bool) -> Result<Vec<Arg>> {
    let (a, b) = (job.a.matrix(), job.b.matrix());
    let mut v = vec![
        a.offsets.read(job.stream)?.arg(),
        a.cols.read(job.stream)?.arg(),
    ];
    if values {
        v.push(a.vals.read(job.stream)?.arg());
    }
    v.extend([
        b.offsets.read(job.stream)?.arg(),
        b.cols.read(job.stream)?.arg(),
    ]);
    if values {
        v.push(b.vals.read(job.stream)?.arg());
    }
    v.extend([Arg::U32(job.col_lo()), Arg::U32(job.col_hi())]);
    Ok(v)
}

/// Launch configuration of the range kernels for a group: `blocks_per_row` blocks per row,
/// with `shared_bytes` of dynamic shared memory.
fn range_config(group: &RangeGroup<'_>, shared_bytes: u64) -> LaunchConfig {
    LaunchConfig {
        grid: (group.rows.len() as u64 * group.ranges.blocks_per_row) as u32,
        block: RANGE_THREADS as u32,
        shared_bytes: shared_bytes as u32,
    }
}

/// The range kernels' leading arguments: the group's rows and how they are cut.
fn range_args(group: &RangeGroup<'_>, row_base: usize) -> [Arg; 6] {
    let plan = group.ranges;
    [
        group.rows.arg(),
        Arg::U64(group.rows.len() as u64),
        Arg::U64(row_base as u64),
        Arg::U32(plan.range_cols as u32),
        Arg::U32(plan.ranges_per_block as u32),
        Arg::U32(plan.blocks_per_row as u32),
    ]
}

/// Entries per row of the chunk into `row_nnz` (chunk-relative, zeroed here), from the
/// products per row (`products`, on the device) and their histogram capped at the window's
/// width. Row lists come from `bin_arena`, reset here.
pub(super) fn symbolic<T: DeviceScalar>(
    job: &Job<'_, T>,
    products: DeviceSlice<'_, u64>,
    hist: Histogram,
    row_nnz: &mut DeviceSliceMut<'_, u64>,
    scratch: &mut Scratch,
    bin_arena: &mut DeviceArena,
) -> Result<()> {
    let n = job.nrows();
    let _span = tracing::debug_span!("symbolic", algorithm = "adaptive", rows = n).entered();
    let width = job.width();
    row_nnz.zero(job.stream)?;
    // Every kernel below adds to the counts.
    let row_nnz = row_nnz.arg_mut();
    bin_arena.reset();
    let binned = binning::scatter(
        job,
        Weights::PerRow(products),
        job.rows().start,
        width,
        hist,
        bin_arena,
    )?;
    let operands = operand_args(job, false)?;
    let args = |l: &BinLaunch<'_>| {
        let mut v = vec![
            l.rows.arg(),
            Arg::U64(l.rows.len() as u64),
            Arg::U64(job.rows().start as u64),
            Arg::U32(l.table_size as u32),
        ];
        if !l.warp {
            v.extend([l.table_offsets, l.keys]);
        }
        v.extend(operands.iter().copied());
        v.push(row_nnz);
        if !l.warp {
            v.push(Arg::U32(l.bitmap_words as u32));
        }
        v
    };
    let kernels = HashKernels {
        thread: [
            job.gpu.function("spgemm", "spgemm_thread8_symbolic")?,
            job.gpu.function("spgemm", "spgemm_thread16_symbolic")?,
        ],
        warp: job.gpu.function("spgemm", "spgemm_warp_symbolic")?,
        block: job.gpu.function("spgemm", "spgemm_hash_symbolic")?,
        args: &args,
    };
    let accumulate = job.gpu.function("spgemm", "spgemm_dense_symbolic")?;
    let count = job.gpu.function("spgemm", "spgemm_dense_count")?;
    let stride = dense_stride(width);
    let dense = |g: &mut DenseGroup<'_>| {
        let (blocks, rows) = dense_configs(g);
        let n = g.rows.len() as u64;
        // SAFETY: arguments match spgemm_dense_symbolic and spgemm_dense_count; the group's
        // flags hold `stride` bytes for each of its rows.
        unsafe {
            job.gpu.launch(
                accumulate,
                blocks,
                job.stream,
                &[
                    &[
                        g.rows.arg(),
                        Arg::U32(g.parts_per_row as u32),
                        Arg::U64(n),
                        Arg::U64(stride),
                        g.flags.arg_mut(),
                    ][..],
                    &operand_args(job, false)?,
                ]
                .concat(),
            )?;
            job.gpu.launch(
                count,
                rows,
                job.stream,
                &[
                    g.rows.arg(),
                    Arg::U64(n),
                    Arg::U64(job.rows().start as u64),
                    Arg::U64(stride),
                    g.flags.view().arg(),
                    row_nnz,
                ],
            )
        }
    };
    let count = job.gpu.function("spgemm", "spgemm_range_count")?;
    let ranges = |g: &mut RangeGroup<'_>| {
        let config = range_config(g, g.ranges.shared_bytes(0, 0));
        job.gpu.allow_shared(count, config.shared_bytes)?;
        let mut args = range_args(g, job.rows().start).to_vec();
        args.extend(operand_args(job, false)?);
        args.extend([row_nnz, Arg::U64(0)]);
        // SAFETY: arguments match spgemm_range_count, which adds each range's entries to its
        // row's count in `row_nnz` (zeroed above; one slot per row of the chunk).
        unsafe { job.gpu.launch(count, config, job.stream, &args) }
    };
    let long = LongRowKernels {
        dense: &dense,
        ranges: &ranges,
    };
    run_bins(job, &binned, 0, true, scratch, &kernels, &long)
}

/// Products of a row, on average, that the numeric phase weighs as one entry of C: a row of
/// few entries and many products (AMG's coarse Galerkin products: 15 entries from 170
/// products, or 45 from 20 000) is binned by its products over this, so that it gets a warp
/// rather than a thread, or a block rather than a warp (a table larger than its entries need),
/// and no lane walks more than a few of its products in turn. Only rows of at most 16 entries
/// (a thread's) or raised at least fourfold: the kernels' `bin_weight`.
const PRODUCTS_PER_WEIGHT: u64 = 8;

/// The numeric phase's histogram of rows `range` (chunk-relative) of C: their entries
/// (`c_off`'s differences), each raised to the row's products (estimated from its entries of
/// A and B's mean row length) over [`PRODUCTS_PER_WEIGHT`], capped at the window's width;
/// the weights it counted and the absolute index of their first row (one small read-back).
fn numeric_histogram<'c, T: DeviceScalar>(
    job: &Job<'_, T>,
    range: Range<usize>,
    c_off: DeviceSlice<'c, u64>,
    arena: &DeviceArena,
) -> Result<(Weights<'c>, usize, Histogram)> {
    let b = job.b.matrix();
    let a_scale = (b.nnz().saturating_mul(256) / (b.nrows.max(1) as u64 * PRODUCTS_PER_WEIGHT))
        .min(u64::from(u32::MAX)) as u32;
    let weights = Weights::OffsetsOrWork {
        offsets: c_off.sub(range.start, range.len() + 1),
        a_scale,
    };
    let first_row = job.rows().start + range.start;
    let hist = binning::histogram(job, weights, first_row, job.width(), arena)?;
    Ok((weights, first_row, hist))
}

/// Rows `range` (chunk-relative) of C listed by the bins of the numeric phase, in `arena`
/// (reset here).
fn numeric_bins<'a, T: DeviceScalar>(
    job: &Job<'_, T>,
    range: Range<usize>,
    c_off: DeviceSlice<'_, u64>,
    arena: &'a mut DeviceArena,
) -> Result<Binned<'a>> {
    arena.reset();
    let arena: &'a DeviceArena = arena;
    let (weights, first_row, hist) = numeric_histogram(job, range, c_off, arena)?;
    binning::scatter(job, weights, first_row, job.width(), hist, arena)
}

/// All the job's rows of C listed by the bins of the numeric phase, in memory of their own:
/// they depend on C's structure only (`c_off`, its row offsets), so a plan keeps them and its
/// executions bin nothing. Counters come from `arena`, reset here.
pub(super) fn numeric_bins_kept<T: DeviceScalar>(
    job: &Job<'_, T>,
    home: &Arc<Stream>,
    c_off: DeviceSlice<'_, u64>,
    arena: &mut DeviceArena,
) -> Result<KeptBins> {
    arena.reset();
    let (weights, first_row, hist) = numeric_histogram(job, 0..job.nrows(), c_off, arena)?;
    binning::scatter_kept(job, home, weights, first_row, job.width(), hist, arena)
}

/// Writes rows `range` (chunk-relative) of C into `cols`/`vals`, entry `c_off[i] - base` first
/// (`c_off`: the chunk's row offsets of C, on the device). Where `cols` are known (a plan's
/// structure), the kernels read them to place each value, and neither sort nor write a column.
/// Row lists come from `bin_arena`, reset here.
#[allow(clippy::too_many_arguments)]
pub(super) fn numeric<T: DeviceScalar>(
    job: &Job<'_, T>,
    range: Range<usize>,
    c_off: DeviceSlice<'_, u64>,
    base: u64,
    cols: ColsOut<'_>,
    vals: DeviceSliceMut<'_, T::Device>,
    scratch: &mut Scratch,
    bin_arena: &mut DeviceArena,
) -> Result<()> {
    let binned = numeric_bins(job, range, c_off, bin_arena)?;
    numeric_binned(job, &binned, c_off, base, cols, vals, scratch)
}

/// [`numeric`] of the rows `binned` lists, binned already ([`numeric_bins`], or
/// [`numeric_bins_kept`] for a plan): kernels only, no read-back. The scratch memory the
/// long rows need is had before the first kernel is queued.
#[allow(clippy::too_many_arguments)]
pub(super) fn numeric_binned<T: DeviceScalar>(
    job: &Job<'_, T>,
    binned: &Binned<'_>,
    c_off: DeviceSlice<'_, u64>,
    base: u64,
    mut cols: ColsOut<'_>,
    mut vals: DeviceSliceMut<'_, T::Device>,
    scratch: &mut Scratch,
) -> Result<()> {
    let (out_cols, read_cols, known_cols) = match &mut cols {
        ColsOut::Write(cols) => (cols.arg_mut(), Arg::U64(0), false),
        ColsOut::Known(cols) => (Arg::U64(0), cols.arg(), true),
    };
    let out_vals = vals.arg_mut();
    let width = job.width();
    let acc = acc_bytes::<T>();
    let need = scratch_need(job, binned, acc, scratch.cap())?;
    if need > 0 {
        scratch.get(job.gpu, job.stream, need, "numeric work memory")?;
    }
    let operands = operand_args(job, true)?;
    let args = |l: &BinLaunch<'_>| {
        let mut v = vec![
            l.rows.arg(),
            Arg::U64(l.rows.len() as u64),
            Arg::U64(job.rows().start as u64),
            Arg::U32(l.table_size as u32),
        ];
        if !l.warp {
            v.extend([l.table_offsets, l.keys, l.vals]);
        }
        v.extend(operands.iter().copied());
        v.extend([c_off.arg(), Arg::U64(base), out_cols, out_vals, read_cols]);
        if !l.warp {
            v.push(Arg::U32(l.bitmap_words as u32));
        }
        v
    };
    let kernels = HashKernels {
        thread: [
            job.gpu
                .function("spgemm", kernel_name::<T>("spgemm_thread8_numeric"))?,
            job.gpu
                .function("spgemm", kernel_name::<T>("spgemm_thread16_numeric"))?,
        ],
        warp: job
            .gpu
            .function("spgemm", kernel_name::<T>("spgemm_warp_numeric"))?,
        block: job
            .gpu
            .function("spgemm", kernel_name::<T>("spgemm_hash_numeric"))?,
        args: &args,
    };
    let accumulate = job
        .gpu
        .function("spgemm", kernel_name::<T>("spgemm_dense_numeric"))?;
    let write = job
        .gpu
        .function("spgemm", kernel_name::<T>("spgemm_dense_write"))?;
    let stride = dense_stride(width);
    let dense = |g: &mut DenseGroup<'_>| {
        let (blocks, rows) = dense_configs(g);
        let n = g.rows.len() as u64;
        // SAFETY: arguments match spgemm_dense_numeric_T and spgemm_dense_write_T; the
        // group's flags and values hold `stride` columns for each of its rows.
        unsafe {
            job.gpu.launch(
                accumulate,
                blocks,
                job.stream,
                &[
                    &[
                        g.rows.arg(),
                        Arg::U32(g.parts_per_row as u32),
                        Arg::U64(n),
                        Arg::U64(stride),
                        g.flags.arg_mut(),
                        g.vals,
                    ][..],
                    &operand_args(job, true)?,
                ]
                .concat(),
            )?;
            job.gpu.launch(
                write,
                rows,
                job.stream,
                &[
                    g.rows.arg(),
                    Arg::U64(n),
                    Arg::U64(job.rows().start as u64),
                    Arg::U64(stride),
                    Arg::U64(width),
                    g.flags.view().arg(),
                    g.vals,
                    c_off.arg(),
                    Arg::U64(base),
                    out_cols,
                    out_vals,
                    read_cols,
                ],
            )
        }
    };
    let count = job.gpu.function("spgemm", "spgemm_range_count")?;
    let range_accumulate = job
        .gpu
        .function("spgemm", kernel_name::<T>("spgemm_range_numeric"))?;
    let stored = std::mem::size_of::<T::Device>() as u64;
    let ranges = |g: &mut RangeGroup<'_>| {
        let leading = range_args(g, job.rows().start);
        let count_config = range_config(g, g.ranges.shared_bytes(0, 0));
        let blocks_per_row = g.ranges.blocks_per_row;
        // Where C's columns are to be written and a row's ranges are spread over several
        // blocks, each range's entries are counted first: a range's place in C is the row's
        // offset plus the entries of its earlier ranges.
        let counts = match g.counts.as_mut() {
            Some(counts) if !known_cols => {
                job.gpu.allow_shared(count, count_config.shared_bytes)?;
                let mut args = leading.to_vec();
                args.extend(operand_args(job, false)?);
                args.extend([Arg::U64(0), counts.arg_mut()]);
                // SAFETY: arguments match spgemm_range_count; `counts` holds a slot for each
                // range of each of the group's rows.
                unsafe { job.gpu.launch(count, count_config, job.stream, &args)? };
                counts.view().arg()
            }
            _ if known_cols || blocks_per_row == 1 => Arg::U64(0),
            _ => {
                return Err(Error::Internal {
                    backend: crate::error::BACKEND,
                    what: "rows of C split over several blocks without their range counts".into(),
                })
            }
        };
        let config = range_config(g, g.ranges.shared_bytes(acc, stored));
        job.gpu
            .allow_shared(range_accumulate, config.shared_bytes)?;
        let mut args = leading.to_vec();
        args.extend(operand_args(job, true)?);
        args.extend([
            counts,
            c_off.arg(),
            Arg::U64(base),
            out_cols,
            out_vals,
            read_cols,
        ]);
        // SAFETY: arguments match spgemm_range_numeric_T: each row's entries land inside
        // its part of `cols`/`vals` as `c_off` gives it (the ranges' counts add up to it).
        unsafe { job.gpu.launch(range_accumulate, config, job.stream, &args) }
    };
    let long = LongRowKernels {
        dense: &dense,
        ranges: &ranges,
    };
    run_bins(job, binned, acc, !known_cols, scratch, &kernels, &long)
}

#[cfg(test)]
mod range_tests {
    use super::*;

    /// Shared memory of an H100/H200 block after the opt-in, less the static variables.
    const HOPPER: u64 = 227 * 1024 - 1024;

    /// Checks the invariants the kernels rely on and returns the plan.
    fn checked(size: u64, width: u64, value: u64, stored: u64, shared: u64) -> RangePlan {
        let p = RangePlan::choose(size, width, value, stored, shared)
            .unwrap_or_else(|| panic!("no ranges for {size} slots, {width} columns"));
        assert!(p.range_cols.is_power_of_two(), "{p:?}");
        assert!(
            (RANGE_MIN_COLS..=RANGE_MAX_COLS).contains(&p.range_cols),
            "{p:?}"
        );
        assert!(p.shared_bytes(value, stored) <= shared, "{p:?}");
        assert!(
            p.ranges * p.range_cols >= width,
            "ranges cover the window: {p:?}"
        );
        assert!(
            (p.ranges - 1) * p.range_cols < width,
            "no empty range: {p:?}"
        );
        assert!(p.ranges_per_block * p.blocks_per_row >= p.ranges, "{p:?}");
        assert!(
            (p.blocks_per_row - 1) * p.ranges_per_block < p.ranges,
            "every block has a range: {p:?}"
        );
        p
    }

    #[test]
    fn numeric_ranges_fill_the_shared_memory_by_the_accumulator_type() {
        // f64 on Hopper: 16 384 columns of 8 bytes and a bit (130 KiB) beside 1024 staged
        // entries of 28 bytes; f32 twice as many, complex f64 half.
        for (value, stored, cols) in [(8, 8, 16_384), (4, 4, 32_768), (16, 16, 8_192)] {
            let p = checked(1 << 16, 131_072, value, stored, HOPPER);
            assert_eq!(p.range_cols, cols, "{value}-byte accumulators");
            assert_eq!(p.ranges, 131_072 / cols);
        }
        // Only 48 KiB: narrower ranges, more of them.
        let p = checked(1 << 16, 131_072, 8, 8, 48 * 1024 - 1024);
        assert_eq!(p.range_cols, 2048);
        assert_eq!(p.ranges, 64);
        // Not even the narrowest range fits: no plan (the rows take global hash tables).
        assert_eq!(RangePlan::choose(1 << 16, 131_072, 16, 16, 24 * 1024), None);
    }

    #[test]
    fn light_ranges_share_a_block_and_heavy_ones_get_their_own() {
        // Power-law rows of about 2 500 entries over 131 072 columns (f64): 8 ranges of ~300
        // entries, all taken by one block one after another.
        let p = checked(8192, 131_072, 8, 8, HOPPER);
        assert_eq!((p.ranges, p.blocks_per_row, p.ranges_per_block), (8, 1, 8));
        // Rows of up to 65 536 entries: 8 192 per range, two ranges a block.
        let p = checked(1 << 17, 131_072, 8, 8, HOPPER);
        assert_eq!((p.ranges, p.blocks_per_row, p.ranges_per_block), (8, 4, 2));
        // A window of 500 000 columns and rows of 450 000 entries: 31 ranges, a block each.
        let p = checked(1 << 20, 500_000, 8, 8, HOPPER);
        assert_eq!(
            (p.ranges, p.blocks_per_row, p.ranges_per_block),
            (31, 31, 1)
        );
    }

    #[test]
    fn counting_ranges_are_as_wide_as_the_weight_allows() {
        // Bits only: the whole window in one range while a row's products are few enough...
        let p = checked(1 << 17, 131_072, 0, 0, HOPPER);
        assert_eq!((p.range_cols, p.ranges, p.blocks_per_row), (131_072, 1, 1));
        // ...and cut finer for rows of millions of products, a block a range.
        let p = checked(1 << 23, 131_072, 0, 0, HOPPER);
        assert_eq!(p.ranges, 16);
        assert_eq!(p.blocks_per_row, 16);
        // A narrow window (a chunk's column panel): one range of at least the narrowest width.
        let p = checked(1 << 12, 700, 0, 0, HOPPER);
        assert_eq!((p.range_cols, p.ranges), (RANGE_MIN_COLS, 1));
        // The widest windows stay within the 32-bit product counts of a stage.
        let p = checked(1 << 31, u64::from(u32::MAX), 0, 0, HOPPER);
        assert!(p.range_cols <= RANGE_MAX_COLS);
    }

    #[test]
    fn one_block_per_row_takes_every_range() {
        let p = checked(1 << 17, 131_072, 8, 8, HOPPER).one_block_per_row();
        assert_eq!((p.blocks_per_row, p.ranges_per_block), (1, p.ranges));
    }

    #[test]
    fn range_counts_are_bounded() {
        assert_eq!(range_counts_bound(0, 1 << 20), 0);
        // 10 rows of 128 ranges at the narrowest width.
        assert_eq!(range_counts_bound(10, 131_072), footprint(&[(4, 10 * 128)]));
        assert_eq!(
            range_counts_bound(1 << 30, u64::from(u32::MAX)),
            footprint(&[(4, RANGE_COUNTS_MAX)])
        );
    }

    #[test]
    fn long_rows_of_narrow_windows_take_ranges() {
        // The accumulator choice is the one column ranges replace the global dense rows in.
        assert_eq!(
            accumulator(8192, 131_072, 12, HOPPER, true),
            Accumulator::Dense
        );
        assert_eq!(
            accumulator(1 << 17, 131_072, 4, HOPPER, false),
            Accumulator::Dense
        );
        assert_eq!(
            accumulator(1 << 17, 1 << 30, 4, HOPPER, false),
            Accumulator::Global
        );
    }

    #[test]
    fn narrow_windows_take_one_dense_range_beyond_warp_tables() {
        // rn-poisson3d.l1.RAP's numeric rows: tables of 8192 slots, a window of 958 columns.
        let whole = narrow_window(Accumulator::Shared, 8192, 958, true, 8, 8, HOPPER).unwrap();
        assert_eq!((whole.ranges, whole.blocks_per_row), (1, 1));
        assert!(whole.range_cols >= 958);
        // The symbolic phase's bitmap rows too, and dense or global rows of such windows.
        assert!(narrow_window(Accumulator::Shared, 2048, 105, true, 0, 0, HOPPER).is_some());
        assert!(narrow_window(Accumulator::Dense, 1 << 16, 4000, true, 8, 8, HOPPER).is_some());
        // Warp tables stay; windows wider than the table stay hashed; windows one range cannot
        // cover stay with the rules of long rows.
        assert_eq!(
            narrow_window(Accumulator::Warp, 256, 100, true, 8, 8, HOPPER),
            None
        );
        assert_eq!(
            narrow_window(Accumulator::Shared, 2048, 2049, true, 8, 8, HOPPER),
            None
        );
        assert_eq!(
            narrow_window(Accumulator::Global, 1 << 22, 1 << 21, true, 8, 8, HOPPER),
            None
        );
        // Many rows keep their hash tables (rn-poisson3d.l1.AP: 120 000 rows of 3500 products
        // into 958 columns).
        assert_eq!(
            narrow_window(Accumulator::Shared, 2048, 958, false, 0, 0, HOPPER),
            None
        );
    }

    #[test]
    fn ranges_pay_for_hubs_not_for_rows_of_a_that_span_the_window() {
        // Power law, f64: 8 ranges of 16 384 columns; a bin of tables of 2^17 slots (rows of
        // 32 768 to 65 536 entries) whose longest row of A has 346 entries.
        let hub = checked(1 << 17, 131_072, 8, 8, HOPPER);
        assert!(ranges_pay(hub.ranges, 346, 1 << 17));
        // Skewed: 31 ranges over 500 000 columns, rows of A of 450 005 entries.
        let dense_a = checked(1 << 20, 500_000, 8, 8, HOPPER);
        assert_eq!(dense_a.ranges, 31);
        assert!(!ranges_pay(dense_a.ranges, 450_005, 1 << 25));
        // The limit: the walks over A (ranges times its longest row) at most an eighth of the
        // table; no overflow for any row length.
        assert!(ranges_pay(8, 1024, 1 << 16));
        assert!(!ranges_pay(8, 1025, 1 << 16));
        assert!(!ranges_pay(31, u64::MAX, 1 << 20));
        // A histogram of host weights knows no row of A (0): ranges wherever they fit.
        assert!(ranges_pay(31, 0, 1 << 12));
    }
}
