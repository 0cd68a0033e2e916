//! The production path: rows binned by their work, a block per row with an open-addressing
//! hash table sized to the bin (in shared memory), global-memory tables for the longest rows
//! (the family of nsparse and spECK that Xia et al. §III.B build on). The symbolic phase bins
//! by products (an upper bound of a row's entries), the numeric phase by the exact counts; the
//! numeric tables are sorted in place (bitonic) so every row comes out in column order.

use std::ops::Range;

use hetsparse_core::{Error, Result};

use crate::context::{Arg, Function, LaunchConfig};
use crate::memory::DeviceSlice;
use crate::scalar::{kernel_name, DeviceScalar};

use super::{acc_bytes, footprint, Job, Scratch};

/// Shared memory a bin's table may take per block: what the GPU allows after opting in,
/// less room for the kernels' static shared variables.
fn shared_table_bytes(gpu: &crate::Gpu) -> u64 {
    u64::from(gpu.max_shared_optin())
        .saturating_sub(1024)
        .max(8 * 1024)
}
/// Threads per block for rows with global-memory tables.
const GLOBAL_THREADS: u32 = 512;

/// Slots of a table for `weight` distinct columns: a power of two, at most half full.
pub(super) fn table_size(weight: u64) -> u64 {
    (2 * weight).max(32).next_power_of_two()
}

fn threads_for(size: u64) -> u32 {
    match size {
        0..=128 => 32,
        129..=512 => 64,
        513..=2048 => 128,
        2049..=8192 => 256,
        _ => 512,
    }
}

/// Rows grouped by table size; `global` holds rows whose table does not fit shared memory.
struct Bins {
    shared: Vec<(u64, Vec<u32>)>,
    global: Vec<(u32, u64)>,
}

fn bin(weights: &[u64], first_row: usize, slot_bytes: u64, shared_bytes: u64) -> Result<Bins> {
    let mut max_shared = 32u64;
    while max_shared * 2 * slot_bytes <= shared_bytes {
        max_shared *= 2;
    }
    let mut shared: Vec<(u64, Vec<u32>)> = Vec::new();
    let mut global = Vec::new();
    for (i, &w) in weights.iter().enumerate() {
        if w == 0 {
            continue;
        }
        let size = table_size(w);
        if size > u64::from(u32::MAX) / 2 {
            return Err(Error::TooLarge {
                what: format!("hash table of row {} of C", first_row + i),
                needed: size,
                limit: u64::from(u32::MAX) / 2,
                unit: "slots",
            });
        }
        let row = (first_row + i) as u32;
        if size <= max_shared {
            match shared.iter_mut().find(|(s, _)| *s == size) {
                Some((_, rows)) => rows.push(row),
                None => shared.push((size, vec![row])),
            }
        } else {
            global.push((row, size));
        }
    }
    Ok(Bins { shared, global })
}

/// One launch over a list of rows: what the argument builders need.
struct BinLaunch<'s> {
    rows: DeviceSlice<'s, u32>,
    table_size: u64,
    table_offsets: Arg,
    keys: Arg,
    vals: Arg,
}

/// Launches `function` once per shared bin and once per group of global-table rows.
fn run_bins<T: DeviceScalar>(
    job: &Job<'_, T>,
    bins: &Bins,
    value_bytes: u64,
    scratch: &mut Scratch,
    function: Function,
    args: &dyn Fn(&BinLaunch<'_>) -> Vec<Arg>,
) -> Result<()> {
    let tracker = job.gpu.memory();
    let slot_bytes = 4 + value_bytes;
    if !bins.shared.is_empty() {
        let parts: Vec<(u64, u64)> = bins
            .shared
            .iter()
            .map(|(_, r)| (4, r.len() as u64))
            .collect();
        let arena = scratch.get(
            tracker,
            job.stream,
            footprint(&parts),
            "row lists of the hash bins",
        )?;
        for (size, rows) in &bins.shared {
            let list = arena.upload(job.stream, rows, "row list")?;
            let launch = BinLaunch {
                rows: list,
                table_size: *size,
                table_offsets: Arg::U64(0),
                keys: Arg::U64(0),
                vals: Arg::U64(0),
            };
            let config = LaunchConfig {
                grid: rows.len().min(1 << 20) as u32,
                block: threads_for(*size),
                shared_bytes: (*size * slot_bytes) as u32,
            };
            job.gpu.allow_shared(function, config.shared_bytes)?;
            // SAFETY: `args` builds the kernel's parameter list; buffers cover what it reads.
            unsafe {
                job.gpu
                    .launch(function, config, job.stream, &args(&launch))?
            };
        }
    }
    // Global tables, in groups that fit the scratch memory.
    let mut start = 0;
    while start < bins.global.len() {
        let mut end = start;
        let mut entries = 0u64;
        loop {
            if end == bins.global.len() {
                break;
            }
            let next = entries + bins.global[end].1;
            let n = (end - start + 1) as u64;
            if footprint(&[(4, n), (8, n), (4, next), (value_bytes, next)]) > scratch.cap() {
                break;
            }
            entries = next;
            end += 1;
        }
        if end == start {
            let (row, size) = bins.global[start];
            let need = footprint(&[(4, 1), (8, 1), (slot_bytes, size)]);
            return Err(crate::error::out_of_memory(
                &format!("global hash table of row {row} of C"),
                need,
                scratch.cap(),
            ));
        }
        let group = &bins.global[start..end];
        let n = group.len() as u64;
        let need = footprint(&[(4, n), (8, n), (4, entries), (value_bytes, entries)]);
        let arena = scratch.get(tracker, job.stream, need, "global hash tables")?;
        let rows: Vec<u32> = group.iter().map(|g| g.0).collect();
        let mut table_offsets = Vec::with_capacity(group.len());
        let mut at = 0u64;
        for g in group {
            table_offsets.push(at);
            at += g.1;
        }
        let list = arena.upload(job.stream, &rows, "row list")?;
        let offsets = arena.upload(job.stream, &table_offsets, "table offsets")?;
        let keys = arena.alloc::<u32>(entries as usize, "global hash keys")?;
        let vals = arena.alloc::<u8>((entries * value_bytes) as usize, "global hash values")?;
        // Rows of a group may have different table sizes: one launch per size.
        let mut k = 0;
        while k < group.len() {
            let size = group[k].1;
            let mut j = k;
            while j < group.len() && group[j].1 == size {
                j += 1;
            }
            let launch = BinLaunch {
                rows: list.sub(k, j - k),
                table_size: size,
                table_offsets: offsets.sub(k, j - k).arg(),
                keys: keys.arg(),
                vals: vals.arg(),
            };
            let config = LaunchConfig {
                grid: (j - k).min(1 << 20) as u32,
                block: GLOBAL_THREADS,
                shared_bytes: 0,
            };
            // SAFETY: as above; each row's table lies inside `keys`/`vals`.
            unsafe {
                job.gpu
                    .launch(function, config, job.stream, &args(&launch))?
            };
            k = j;
        }
        start = end;
    }
    Ok(())
}

/// Entries per row of the chunk.
pub(super) fn symbolic<T: DeviceScalar>(
    job: &Job<'_, T>,
    products: &[u64],
    scratch: &mut Scratch,
    chunk_arena: &crate::memory::DeviceArena,
) -> Result<Vec<u64>> {
    let n = job.nrows();
    let _span = tracing::debug_span!("symbolic", algorithm = "adaptive", rows = n).entered();
    let width = job.width();
    let weights: Vec<u64> = products.iter().map(|&p| p.min(width)).collect();
    let bins = bin(&weights, job.rows.start, 4, shared_table_bytes(job.gpu))?;
    let row_nnz = chunk_arena.alloc::<u64>(n, "entries per row")?;
    row_nnz.zero(job.stream)?;
    let f = job.gpu.function("spgemm", "spgemm_hash_symbolic")?;
    let (a, b) = (job.a, job.b);
    let args = |l: &BinLaunch<'_>| {
        vec![
            l.rows.arg(),
            Arg::U64(l.rows.len() as u64),
            Arg::U64(job.rows.start as u64),
            Arg::U32(l.table_size as u32),
            l.table_offsets,
            l.keys,
            a.offsets.slice().arg(),
            a.cols.slice().arg(),
            b.offsets.slice().arg(),
            b.cols.slice().arg(),
            Arg::U32(job.col_lo),
            Arg::U32(job.col_hi),
            row_nnz.arg(),
        ]
    };
    run_bins(job, &bins, 0, scratch, f, &args)?;
    row_nnz.to_vec(job.stream)
}

/// Writes rows `range` (chunk-relative) of C into `cols`/`vals`, entry `c_off[i] - base` first.
/// With `known_cols`, `cols` already holds C's columns (a plan's structure): the kernel reads
/// them to place each value, and neither sorts its tables nor writes a column.
#[allow(clippy::too_many_arguments)]
pub(super) fn numeric<T: DeviceScalar>(
    job: &Job<'_, T>,
    range: Range<usize>,
    counts: &[u64],
    c_off: DeviceSlice<'_, u64>,
    base: u64,
    cols: DeviceSlice<'_, u32>,
    known_cols: bool,
    vals: DeviceSlice<'_, T::Device>,
    scratch: &mut Scratch,
) -> Result<()> {
    let (out_cols, read_cols) = if known_cols {
        (Arg::U64(0), cols.arg())
    } else {
        (cols.arg(), Arg::U64(0))
    };
    let bins = bin(
        &counts[range.clone()],
        job.rows.start + range.start,
        4 + acc_bytes::<T>(),
        shared_table_bytes(job.gpu),
    )?;
    let f = job
        .gpu
        .function("spgemm", kernel_name::<T>("spgemm_hash_numeric"))?;
    let (a, b) = (job.a, job.b);
    let args = |l: &BinLaunch<'_>| {
        vec![
            l.rows.arg(),
            Arg::U64(l.rows.len() as u64),
            Arg::U64(job.rows.start as u64),
            Arg::U32(l.table_size as u32),
            l.table_offsets,
            l.keys,
            l.vals,
            a.offsets.slice().arg(),
            a.cols.slice().arg(),
            a.vals.slice().arg(),
            b.offsets.slice().arg(),
            b.cols.slice().arg(),
            b.vals.slice().arg(),
            Arg::U32(job.col_lo),
            Arg::U32(job.col_hi),
            c_off.arg(),
            Arg::U64(base),
            out_cols,
            vals.arg(),
            read_cols,
        ]
    };
    run_bins(job, &bins, acc_bytes::<T>(), scratch, f, &args)
}
