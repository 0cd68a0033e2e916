//! Fallible allocation and the conversion of what was read into CSR, in parallel.

use rayon::prelude::*;

use crate::error::MatrixMarketError;
use crate::format::{Coo, Csr, Dense};
use crate::scalar::Scalar;

/// Bytes of `len` elements of `X`, saturating.
pub(super) fn checked_bytes<X>(len: u64) -> u64 {
    len.saturating_mul(std::mem::size_of::<X>() as u64)
}

/// An empty vector with room for `len` elements, or [`MatrixMarketError::OutOfMemory`].
pub(super) fn try_vec<X>(len: u64, what: &str) -> Result<Vec<X>, MatrixMarketError> {
    let refused = || MatrixMarketError::OutOfMemory {
        what: what.to_string(),
        needed_bytes: checked_bytes::<X>(len),
    };
    let len = usize::try_from(len).map_err(|_| refused())?;
    let mut v = Vec::new();
    v.try_reserve_exact(len).map_err(|_| refused())?;
    Ok(v)
}

/// `len` copies of `x`, allocated fallibly.
fn try_filled<X: Clone>(len: u64, x: X, what: &str) -> Result<Vec<X>, MatrixMarketError> {
    let mut v = try_vec(len, what)?;
    v.resize(len as usize, x);
    Ok(v)
}

/// Entries per task below which the conversion stays on one thread.
const PARALLEL_MIN: usize = 1 << 16;

/// Canonical CSR from triplets in any order with repeats: rows bucketed (a counting sort, which
/// keeps file order within a row), then each row sorted by column and repeated entries summed,
/// rows in parallel. Every allocation is fallible.
pub(super) fn coo_to_csr<T: Scalar>(coo: Coo<T>) -> Result<Csr<T>, MatrixMarketError> {
    let (nrows, ncols, rows, cols, values) = coo.into_parts();
    let nnz = rows.len();
    let mut offsets = try_filled(nrows as u64 + 1, 0u64, "CSR row offsets")?;
    for &r in &rows {
        offsets[r as usize + 1] += 1;
    }
    for i in 0..nrows {
        offsets[i + 1] += offsets[i];
    }
    let mut next = try_vec::<u64>(nrows as u64, "CSR row positions")?;
    next.extend_from_slice(&offsets[..nrows]);
    let mut csr_cols = try_filled(nnz as u64, 0u32, "CSR column indices")?;
    let mut csr_values = try_filled(nnz as u64, T::zero(), "CSR values")?;
    for ((&r, &c), &v) in rows.iter().zip(&cols).zip(&values) {
        let slot = &mut next[r as usize];
        let k = *slot as usize;
        csr_cols[k] = c;
        csr_values[k] = v;
        *slot += 1;
    }
    drop((rows, cols, values, next));

    // Rows in blocks of about equal entries; each block sorts and compacts its rows in place
    // and reports its rows' new lengths.
    let threads = rayon::current_num_threads().max(1);
    let blocks = if nnz < PARALLEL_MIN { 1 } else { threads * 4 };
    let mut bounds = Vec::with_capacity(blocks + 1);
    bounds.push(0usize);
    for b in 1..blocks {
        let goal = nnz as u64 * b as u64 / blocks as u64;
        let row = offsets.partition_point(|&o| o < goal).min(nrows);
        let previous = bounds[bounds.len() - 1];
        bounds.push(row.max(previous));
    }
    bounds.push(nrows);
    // Disjoint slices of the entry arrays, one per block.
    let mut pieces = Vec::with_capacity(blocks);
    let (mut rest_cols, mut rest_values) = (&mut csr_cols[..], &mut csr_values[..]);
    for w in bounds.windows(2) {
        let len = (offsets[w[1]] - offsets[w[0]]) as usize;
        let (c, rc) = rest_cols.split_at_mut(len);
        let (v, rv) = rest_values.split_at_mut(len);
        pieces.push((w[0], w[1], c, v));
        rest_cols = rc;
        rest_values = rv;
    }
    let compacted: Vec<(usize, Vec<u64>)> = pieces
        .into_par_iter()
        .map(|(first, last, c, v)| {
            let base = offsets[first];
            let mut lengths = Vec::with_capacity(last - first);
            let mut write = 0usize;
            let mut pairs: Vec<(u32, T)> = Vec::new();
            for i in first..last {
                let (s, e) = (
                    (offsets[i] - base) as usize,
                    (offsets[i + 1] - base) as usize,
                );
                let row_start = write;
                if c[s..e].windows(2).all(|w| w[0] < w[1]) {
                    c.copy_within(s..e, write);
                    v.copy_within(s..e, write);
                    write += e - s;
                } else {
                    pairs.clear();
                    pairs.extend(c[s..e].iter().copied().zip(v[s..e].iter().copied()));
                    // Stable, so repeated entries are summed in file order.
                    pairs.sort_by_key(|p| p.0);
                    let mut k = 0;
                    while k < pairs.len() {
                        let j = pairs[k].0;
                        let mut acc = pairs[k].1.to_acc();
                        k += 1;
                        while k < pairs.len() && pairs[k].0 == j {
                            acc += pairs[k].1.to_acc();
                            k += 1;
                        }
                        c[write] = j;
                        v[write] = T::from_acc(acc);
                        write += 1;
                    }
                }
                lengths.push((write - row_start) as u64);
            }
            (write, lengths)
        })
        .collect();
    // Close the gaps that summed repeats left between blocks, and rebuild the offsets (which
    // overwrites the old ones, so the blocks' old starts are taken first).
    let starts: Vec<usize> = bounds.iter().map(|&r| offsets[r] as usize).collect();
    let mut write = 0usize;
    let mut row = 0usize;
    for (start, (kept, lengths)) in starts.into_iter().zip(compacted) {
        if start != write {
            csr_cols.copy_within(start..start + kept, write);
            csr_values.copy_within(start..start + kept, write);
        }
        for len in lengths {
            offsets[row + 1] = offsets[row] + len;
            row += 1;
        }
        write += kept;
    }
    csr_cols.truncate(write);
    csr_values.truncate(write);
    Csr::try_new(nrows, ncols, offsets, csr_cols, csr_values)
        .map_err(|e| MatrixMarketError::Unsupported(e.to_string()))
}

/// CSR of the non-zero values of a dense matrix, every allocation fallible.
pub(super) fn dense_to_csr<T: Scalar>(d: &Dense<T>) -> Result<Csr<T>, MatrixMarketError> {
    let (nrows, ncols) = d.shape();
    let zero = T::zero();
    let mut offsets = try_filled(nrows as u64 + 1, 0u64, "CSR row offsets")?;
    for i in 0..nrows {
        let row = (0..ncols).filter(|&j| d.get(i, j) != zero).count() as u64;
        offsets[i + 1] = offsets[i] + row;
    }
    let nnz = offsets[nrows];
    let mut cols = try_vec::<u32>(nnz, "CSR column indices")?;
    let mut values = try_vec::<T>(nnz, "CSR values")?;
    for i in 0..nrows {
        for j in 0..ncols {
            let v = d.get(i, j);
            if v != zero {
                cols.push(j as u32);
                values.push(v);
            }
        }
    }
    Csr::try_new(nrows, ncols, offsets, cols, values)
        .map_err(|e| MatrixMarketError::Unsupported(e.to_string()))
}
