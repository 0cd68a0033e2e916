//! SpGEMM that Ctrl-C can stop in the middle on the CPU, and that says when C cannot fit.
//!
//! The CPU backend checks its [`RunControl`] before a whole product and between the chunks of
//! [`Backend::spgemm_chunks`](hetsparse::Backend::spgemm_chunks), not inside one product. So
//! a product that may run long (more than [`CANCELLABLE`] intermediate products) on a
//! context of CPU devices only is run as row chunks of about [`CHUNK`] products each, and C is
//! assembled from them: one more copy of C, paid only by products of a second or more. GPU
//! backends and the scheduler check the run themselves and get the whole product.
//!
//! Products that large are also checked against the host's available memory: C has at least,
//! in each row, the entries of the longest row of B that row of A selects, and when even that
//! cannot fit, the product is refused before it starts ([`Error::OutOfMemory`], a Python
//! `MemoryError`) rather than left to the operating system's out-of-memory killer. While
//! chunks are collected, their size (twice, for the copy into C) is held to that memory too.

use hetsparse::{
    Context, ContextScalar, Csr, Error, ProductChunk, RunControl, Scalar, SpgemmOptions,
};
use rayon::prelude::*;

/// Intermediate products above which a CPU product runs in chunks (about a second on 2 cores).
pub const CANCELLABLE: u64 = 1 << 28;
/// Intermediate products per chunk (a tenth of a second or so on 2 cores).
pub const CHUNK: u64 = 1 << 26;

/// `C = A · B` on `ctx`, cancellable through `run` within about a chunk's time.
pub fn spgemm<T: ContextScalar>(
    ctx: &Context<T>,
    a: &Csr<T>,
    b: &Csr<T>,
    run: &RunControl,
) -> Result<Csr<T>, Error> {
    let whole = || ctx.spgemm_with(a.into(), b.into(), &SpgemmOptions::new(), run);
    if a.ncols() != b.nrows() || a.nrows() < 2 {
        return whole();
    }
    // A bound first (B's longest row for each entry of A), the exact count only past it.
    let b_offsets = b.row_offsets();
    let longest_b_row = crate::convert::pieces_of(b.nrows())
        .map(|r| {
            b_offsets[r.start..=r.end]
                .windows(2)
                .map(|w| w[1] - w[0])
                .max()
                .unwrap_or(0)
        })
        .max()
        .unwrap_or(0);
    if a.nnz().saturating_mul(longest_b_row) <= CANCELLABLE {
        return whole();
    }
    let rows = row_costs(a, b);
    let least_nnz: u64 = rows.iter().map(|r| r.least_nnz).sum();
    let available = available_memory();
    let entry = entry_bytes::<T>();
    if let Some(limit) = available {
        let needed = least_nnz.saturating_mul(entry);
        if needed > limit {
            return Err(out_of_memory(
                "C (at least this many bytes, from its structure)",
                needed,
                limit,
            ));
        }
    }
    let cpu_only = ctx
        .devices()
        .iter()
        .filter(|d| d.skipped.is_none())
        .all(|d| d.info.backend == "cpu");
    if !cpu_only || rows.iter().map(|r| r.products).sum::<u64>() <= CANCELLABLE {
        return whole();
    }
    // At least two rows per thread in a chunk, so that every core has work.
    let min_rows = 2 * rayon::current_num_threads();
    let mut chunks = Vec::new();
    let (mut start, mut products) = (0, 0u64);
    for (i, r) in rows.iter().enumerate() {
        products += r.products;
        if products >= CHUNK && i + 1 - start >= min_rows {
            chunks.push(ProductChunk {
                rows: start..i + 1,
                cols: 0..b.ncols(),
            });
            (start, products) = (i + 1, 0);
        }
    }
    if start < a.nrows() {
        chunks.push(ProductChunk {
            rows: start..a.nrows(),
            cols: 0..b.ncols(),
        });
    }
    let mut parts: Vec<Option<Csr<T>>> = vec![None; chunks.len()];
    let mut held = 0u64;
    ctx.backend().spgemm_chunks(
        a.into(),
        b.into(),
        &chunks,
        &SpgemmOptions::new(),
        run,
        &mut |done| {
            held += done.product.nnz() * entry;
            if let Some(limit) = available {
                // The parts and C beside them while C is assembled.
                if held.saturating_mul(2) > limit {
                    return Err(out_of_memory(
                        "C and its chunks (so far)",
                        held.saturating_mul(2),
                        limit,
                    ));
                }
            }
            let slot = parts.get_mut(done.index).ok_or_else(|| Error::Internal {
                backend: "cpu".into(),
                what: format!("chunk {} of {} returned", done.index, chunks.len()),
            })?;
            *slot = Some(done.product);
            Ok(())
        },
    )?;
    run.checkpoint()?;
    stack(a.nrows(), b.ncols(), parts)
}

/// What one row of `A · B` costs.
struct RowCost {
    /// Intermediate products.
    products: u64,
    /// Entries C's row has at least: those of the longest row of B it adds.
    least_nnz: u64,
}

fn row_costs<T: Scalar>(a: &Csr<T>, b: &Csr<T>) -> Vec<RowCost> {
    let b_offsets = b.row_offsets();
    (0..a.nrows())
        .into_par_iter()
        .with_min_len(1024)
        .map(|i| {
            let (cols, _) = a.row(i);
            let mut cost = RowCost {
                products: 0,
                least_nnz: 0,
            };
            for &k in cols {
                let len = b_offsets[k as usize + 1] - b_offsets[k as usize];
                cost.products += len;
                cost.least_nnz = cost.least_nnz.max(len);
            }
            cost
        })
        .collect()
}

/// Bytes of one entry of C: its column index and its value.
fn entry_bytes<T>() -> u64 {
    (std::mem::size_of::<u32>() + std::mem::size_of::<T>()) as u64
}

/// `MemAvailable` of `/proc/meminfo`, where there is one.
fn available_memory() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib.saturating_mul(1024))
}

fn out_of_memory(what: &str, needed: u64, available: u64) -> Error {
    Error::OutOfMemory {
        backend: "host".into(),
        what: what.into(),
        needed_bytes: needed,
        available_bytes: available,
    }
}

/// The row blocks `parts`, in order, as one `nrows × ncols` matrix.
fn stack<T: ContextScalar>(
    nrows: usize,
    ncols: usize,
    parts: Vec<Option<Csr<T>>>,
) -> Result<Csr<T>, Error> {
    let missing = || Error::Internal {
        backend: "cpu".into(),
        what: "a chunk of the product was not returned".into(),
    };
    let parts: Vec<Csr<T>> = parts
        .into_iter()
        .map(|p| p.ok_or_else(missing))
        .collect::<Result<_, _>>()?;
    let nnz: u64 = parts.iter().map(|p| p.nnz()).sum();
    let nnz = hetsparse::host::entry_count(nnz, "the product")?;
    let mut offsets = hetsparse::host::try_with_capacity(nrows + 1, "C row offsets")?;
    let mut indices = hetsparse::host::try_with_capacity(nnz, "C column indices")?;
    let mut values = hetsparse::host::try_with_capacity(nnz, "C values")?;
    offsets.push(0u64);
    for p in parts {
        let base = indices.len() as u64;
        offsets.extend(p.row_offsets()[1..].iter().map(|&o| base + o));
        indices.extend_from_slice(p.col_indices());
        values.extend_from_slice(p.values());
    }
    Ok(Csr::try_new(nrows, ncols, offsets, indices, values)?)
}
