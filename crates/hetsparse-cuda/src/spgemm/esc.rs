//! ESC (Polok et al. Alg. 1–3): expansion of every product, sorting by column within each row
//! of C, compression of equal columns. Rows are processed in batches whose expansion fits the
//! work memory (the paper slices when the expansion does not fit). Per batch there are two
//! host synchronisations, as in the paper: the entry counts before compression, and the
//! output copy.

use hetsparse_core::{Error, Result};

use crate::context::{Arg, LaunchConfig};
use crate::error::out_of_memory;
use crate::scalar::{kernel_name, DeviceScalar};

use super::{acc_bytes, footprint, offsets, Job, Output, Scratch};

/// Products each expansion thread forms (the balanced split of Polok's Alg. 1).
const PER_THREAD: u64 = 4;

/// The error for host structure ESC was not given (a bug of the caller in this crate).
fn missing(what: &str) -> Error {
    Error::Internal {
        backend: crate::error::BACKEND,
        what: format!("ESC was not given {what} on the host"),
    }
}

/// Work memory a batch of `rows` rows with `entries` entries of A and `products` products
/// asks for at most: keys and values, a sort scratch as large again, and the per-entry and
/// per-row arrays.
pub(super) fn need(rows: u64, entries: u64, products: u64, acc: u64) -> u64 {
    footprint(&[
        (3 * (4 + acc), products),
        (16, entries + 1),
        (8, 3 * (rows + 1)),
        (4, rows),
    ]) + 16 * 1024 // alignment of the per-size sort lists
}

/// Computes the chunk in batches of rows and hands them to `output`.
pub(super) fn chunk<T: DeviceScalar>(
    job: &Job<'_, T>,
    scratch: &mut Scratch,
    output: &mut impl Output<T>,
) -> Result<()> {
    let a_off = job.a.matrix().host_offsets(job.stream)?.as_slice();
    let b_off = job.b.matrix().host_offsets(job.stream)?.as_slice();
    let e0 = a_off[job.rows().start] as usize;
    let e1 = a_off[job.rows().end] as usize;
    let a_col = &job.a_cols.ok_or_else(|| missing("A's column indices"))?[e0..e1];
    // A column window inside B's rows needs B's columns; the whole width only B's offsets.
    let b_cols = if job.full_width() {
        None
    } else {
        Some(job.b_cols.ok_or_else(|| missing("B's column indices"))?)
    };
    // Per nonzero of A: its products inside the window and where they start in B.
    let mut b_start = Vec::with_capacity(e1 - e0);
    let mut per_entry = Vec::with_capacity(e1 - e0);
    for &k in a_col.iter() {
        let (start, end) = (b_off[k as usize], b_off[k as usize + 1]);
        let (lo, hi) = match &b_cols {
            None => (start, end),
            Some(cols) => {
                let row = &cols[start as usize..end as usize];
                (
                    start + row.partition_point(|&c| c < job.col_lo()) as u64,
                    start + row.partition_point(|&c| c < job.col_hi()) as u64,
                )
            }
        };
        b_start.push(lo);
        per_entry.push(hi - lo);
    }
    let entry_prefix = offsets(&per_entry);
    let row_products: Vec<u64> = job
        .rows()
        .map(|r| entry_prefix[a_off[r + 1] as usize - e0] - entry_prefix[a_off[r] as usize - e0])
        .collect();
    let total: u64 = row_products.iter().sum();
    let capacity = output.capacity_for(total, job.stream)?;
    let need =
        |rows: u64, entries: u64, products: u64| need(rows, entries, products, acc_bytes::<T>());
    let n = job.nrows();
    let mut start = 0usize;
    while start < n {
        let mut end = start;
        let mut products = 0u64;
        while end < n {
            let p = products + row_products[end];
            let entries = a_off[job.rows().start + end + 1] - a_off[job.rows().start + start];
            if p > capacity || need((end - start + 1) as u64, entries, p) > scratch.cap() {
                break;
            }
            products = p;
            end += 1;
        }
        if end == start {
            return Err(out_of_memory(
                &format!("ESC expansion of row {} of C", job.rows().start + start),
                need(
                    1,
                    a_off[job.rows().start + start + 1] - a_off[job.rows().start + start],
                    row_products[start],
                ),
                scratch.cap(),
            ));
        }
        batch(
            job,
            start..end,
            products,
            &entry_prefix,
            &b_start,
            e0,
            end == n,
            scratch,
            output,
        )?;
        start = end;
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn batch<T: DeviceScalar>(
    job: &Job<'_, T>,
    rows: std::ops::Range<usize>,
    products: u64,
    entry_prefix: &[u64],
    b_start: &[u64],
    e0: usize,
    last: bool,
    scratch: &mut Scratch,
    output: &mut impl Output<T>,
) -> Result<()> {
    let a_off = job.a.matrix().host_offsets(job.stream)?.as_slice();
    let first = job.rows().start + rows.start;
    let nrows = rows.len();
    let be0 = a_off[first] as usize - e0;
    let be1 = a_off[first + nrows] as usize - e0;
    let p0 = entry_prefix[be0];
    let prefix: Vec<u64> = entry_prefix[be0..=be1].iter().map(|&p| p - p0).collect();
    let seg: Vec<u64> = (0..=nrows)
        .map(|i| entry_prefix[a_off[first + i] as usize - e0] - p0)
        .collect();
    let acc = acc_bytes::<T>();
    let _span = tracing::debug_span!("esc batch", rows = nrows, products).entered();
    // Sort plan: segments by padded size; long ones one by one in a global scratch.
    // Shared memory a sort block may use for its segment (opted in beyond 48 KiB).
    let shared_sort_bytes = u64::from(job.gpu.max_shared_optin()).saturating_sub(1024);
    let mut max_shared = 32u64;
    while max_shared * 2 * (4 + acc) <= shared_sort_bytes {
        max_shared *= 2;
    }
    let mut sort_bins: Vec<(u64, Vec<u32>)> = Vec::new();
    let mut long = Vec::new();
    for i in 0..nrows {
        let len = seg[i + 1] - seg[i];
        if len <= 1 {
            continue;
        }
        let size = len.max(32).next_power_of_two();
        if size <= max_shared {
            match sort_bins.iter_mut().find(|(s, _)| *s == size) {
                Some((_, r)) => r.push(i as u32),
                None => sort_bins.push((size, vec![i as u32])),
            }
        } else {
            long.push((i, size));
        }
    }
    let long_max = long.iter().map(|l| l.1).max().unwrap_or(0);
    let entries = (be1 - be0) as u64;
    let need = footprint(&[
        (4, products),
        (acc, products),
        (8, entries + 1),
        (8, entries),
        (8, nrows as u64 + 1),
        (8, nrows as u64),
        (8, nrows as u64 + 1),
        (4, nrows as u64),
        (4 + acc, long_max),
    ]) + 256 * (sort_bins.len() as u64 + 2); // each sort list is aligned on its own
    let arena = scratch.get(job.gpu, job.stream, need, "ESC work memory")?;
    let stream = job.stream;
    let mut keys = arena.alloc::<u32>(products as usize, "ESC keys")?;
    let mut vals = arena.alloc::<u8>((products * acc) as usize, "ESC values")?;
    let prefix_dev = arena.upload(stream, &prefix, "ESC product prefix")?;
    let b_start_dev = arena.upload(stream, &b_start[be0..be1], "ESC B positions")?;
    let seg_dev = arena.upload(stream, &seg, "ESC row segments")?;
    let gpu = job.gpu;
    if products > 0 {
        let f = gpu.function("spgemm", kernel_name::<T>("spgemm_esc_expand"))?;
        // SAFETY: arguments match spgemm_esc_expand; keys/vals hold `products` entries.
        unsafe {
            gpu.launch(
                f,
                LaunchConfig::for_threads(products.div_ceil(PER_THREAD), 256),
                stream,
                &[
                    Arg::U64(entries),
                    Arg::U64(products),
                    Arg::U64(PER_THREAD),
                    Arg::U64(a_off[first]),
                    prefix_dev.arg(),
                    b_start_dev.arg(),
                    job.a.matrix().vals.read(stream)?.arg(),
                    job.b.matrix().cols.read(stream)?.arg(),
                    job.b.matrix().vals.read(stream)?.arg(),
                    Arg::U32(job.col_lo()),
                    keys.arg_mut(),
                    vals.arg_mut(),
                ],
            )?;
        }
        let sort = gpu.function("spgemm", kernel_name::<T>("spgemm_esc_sort"))?;
        for (size, list) in &sort_bins {
            let list_dev = arena.upload(stream, list, "ESC sort rows")?;
            let config = LaunchConfig {
                grid: list.len().min(1 << 20) as u32,
                block: (*size / 2).clamp(32, 512) as u32,
                shared_bytes: (*size * (4 + acc)) as u32,
            };
            gpu.allow_shared(sort, config.shared_bytes)?;
            // SAFETY: arguments match spgemm_esc_sort; every listed segment lies in keys/vals.
            unsafe {
                gpu.launch(
                    sort,
                    config,
                    stream,
                    &[
                        list_dev.arg(),
                        Arg::U64(list.len() as u64),
                        seg_dev.arg(),
                        Arg::U32(*size as u32),
                        keys.arg_mut(),
                        vals.arg_mut(),
                    ],
                )?;
            }
        }
        if !long.is_empty() {
            let sort_long = gpu.function("spgemm", kernel_name::<T>("spgemm_esc_sort_long"))?;
            let mut scratch_keys = arena.alloc::<u32>(long_max as usize, "ESC sort scratch")?;
            let mut scratch_vals =
                arena.alloc::<u8>((long_max * acc) as usize, "ESC sort scratch")?;
            for &(i, size) in &long {
                // SAFETY: arguments match spgemm_esc_sort_long; the scratch holds `size`.
                unsafe {
                    gpu.launch(
                        sort_long,
                        LaunchConfig {
                            grid: 1,
                            block: 1024,
                            shared_bytes: 0,
                        },
                        stream,
                        &[
                            Arg::U64(seg[i]),
                            Arg::U64(seg[i + 1] - seg[i]),
                            Arg::U64(size),
                            scratch_keys.arg_mut(),
                            scratch_vals.arg_mut(),
                            keys.arg_mut(),
                            vals.arg_mut(),
                        ],
                    )?;
                }
            }
        }
    }
    // Sorted: only read from here on.
    let (keys, vals) = (keys.into_view(), vals.into_view());
    let mut row_nnz = arena.alloc::<u64>(nrows, "ESC entries per row")?;
    let count = gpu.function("spgemm", "spgemm_esc_count")?;
    // SAFETY: arguments match spgemm_esc_count.
    unsafe {
        gpu.launch(
            count,
            LaunchConfig {
                grid: nrows.clamp(1, 1 << 20) as u32,
                block: 128,
                shared_bytes: 0,
            },
            stream,
            &[
                Arg::U64(nrows as u64),
                seg_dev.arg(),
                keys.arg(),
                row_nnz.arg_mut(),
            ],
        )?;
    }
    let counts = row_nnz.view().to_vec(stream)?;
    let c_off = offsets(&counts);
    let c_off_dev = arena.upload(stream, &c_off, "ESC row offsets")?;
    let len = c_off[nrows];
    let compress = gpu.function("spgemm", kernel_name::<T>("spgemm_esc_compress"))?;
    output.batch(stream, &counts, len, last, |out_cols, mut out_vals| {
        let mut out_cols = out_cols.written("ESC's kernels")?;
        // SAFETY: arguments match spgemm_esc_compress; the output buffers hold `len` entries.
        unsafe {
            gpu.launch(
                compress,
                LaunchConfig {
                    grid: nrows.clamp(1, 1 << 20) as u32,
                    block: 256,
                    shared_bytes: 0,
                },
                stream,
                &[
                    Arg::U64(nrows as u64),
                    seg_dev.arg(),
                    keys.arg(),
                    vals.arg(),
                    c_off_dev.arg(),
                    Arg::U64(0),
                    out_cols.arg_mut(),
                    out_vals.arg_mut(),
                ],
            )
        }
    })
}
