//! SpGEMM from Python that says when C cannot fit in host memory, rather than leaving it to
//! the operating system's out-of-memory killer.
//!
//! Every backend looks at its [`RunControl`] while it computes (the CPU backend before each
//! range of rows), so Ctrl-C and a progress callback reach a whole product. What a whole
//! product cannot do is stop before the host runs out of memory. So a product that may be
//! large (more than [`CHECKED`] intermediate products), or any product given a memory limit,
//! is checked first against the memory the system reports available (or that limit): C has
//! at least, in each row, the entries of the longest row of B that row of A selects, and
//! when even that cannot fit, the product is refused before it starts
//! ([`Error::TooLarge`], a Python `MemoryError`). Where C might not fit (an entry per
//! intermediate product does not) on a context of CPU devices only, the product runs as row
//! chunks of about [`CHUNK`] products each, whose entries are held to that memory as they
//! come (twice, for the copy into C), and C is assembled from them: one more copy of C, paid
//! only where memory is short. Other contexts get the whole product.

use hetsparse::{
    Context, ContextScalar, Csr, CsrOperand, Error, ProductChunk, RunControl, Scalar, SpgemmOptions,
};
use rayon::prelude::*;

/// Intermediate products above which C's size is checked against the host's memory (about a
/// second on 2 cores).
pub const CHECKED: u64 = 1 << 28;
/// Intermediate products per chunk (a tenth of a second or so on 2 cores).
pub const CHUNK: u64 = 1 << 26;

/// `C = A · B` on `ctx`, cancelled and watched through `run`, C held to `memory_limit` bytes
/// (by default, the memory the system reports available). `a` and `b` are the operands in host
/// memory, which the checks read; `operands` what a whole product reads: the same, or copies
/// of them in the memory of `ctx`'s device (which is then no CPU, so never chunked).
pub fn spgemm<T: ContextScalar>(
    ctx: &Context<T>,
    (a, b): (&Csr<T>, &Csr<T>),
    operands: (CsrOperand<'_, T>, CsrOperand<'_, T>),
    run: &RunControl,
    memory_limit: Option<u64>,
) -> Result<Csr<T>, Error> {
    let whole = || ctx.spgemm_with(operands.0, operands.1, &SpgemmOptions::new(), run);
    if a.ncols() != b.nrows() {
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
    if memory_limit.is_none() && a.nnz().saturating_mul(longest_b_row) <= CHECKED {
        return whole();
    }
    let rows = row_costs(a, b);
    let least_nnz: u64 = rows.iter().map(|r| r.least_nnz).sum();
    let Some(available) = memory_limit.or_else(available_memory) else {
        return whole();
    };
    let entry = entry_bytes::<T>();
    let needed = least_nnz.saturating_mul(entry);
    if needed > available {
        return Err(out_of_memory(
            "C in host memory (at least, from the operands' structure)",
            needed,
            available,
        ));
    }
    let products: u64 = rows.iter().map(|r| r.products).sum();
    let cpu_only = ctx
        .devices()
        .iter()
        .filter(|d| d.skipped.is_none())
        .all(|d| d.info.backend == hetsparse::BackendKind::Cpu);
    if !cpu_only || a.nrows() < 2 || products.saturating_mul(entry) <= available {
        return whole();
    }
    // At least two rows per thread in a chunk, so that every core has work.
    let min_rows = 2 * rayon::current_num_threads();
    let mut chunks = Vec::new();
    let mut chunk_products = Vec::new();
    let (mut start, mut sum) = (0, 0u64);
    for (i, r) in rows.iter().enumerate() {
        sum += r.products;
        if sum >= CHUNK && i + 1 - start >= min_rows {
            chunks.push(ProductChunk {
                rows: start..i + 1,
                cols: 0..b.ncols(),
            });
            chunk_products.push(sum);
            (start, sum) = (i + 1, 0);
        }
    }
    if start < a.nrows() {
        chunks.push(ProductChunk {
            rows: start..a.nrows(),
            cols: 0..b.ncols(),
        });
        chunk_products.push(sum);
    }
    // The whole product is planned up front and counted chunk by chunk, so that a watcher
    // sees one total rather than one that grows as the backend plans each chunk.
    run.add_planned(products);
    let chunk_run = run.child();
    let mut parts: Vec<Option<Csr<T>>> = vec![None; chunks.len()];
    let mut held = 0u64;
    ctx.backend().spgemm_chunks(
        a.into(),
        b.into(),
        &chunks,
        &SpgemmOptions::new(),
        &chunk_run,
        &mut |done| {
            held += done.product.nnz() * entry;
            // The parts and C beside them while C is assembled.
            if held.saturating_mul(2) > available {
                return Err(out_of_memory(
                    "C and its chunks in host memory (so far)",
                    held.saturating_mul(2),
                    available,
                ));
            }
            run.add_done(chunk_products.get(done.index).copied().unwrap_or(0));
            let slot = parts.get_mut(done.index).ok_or_else(|| Error::Internal {
                backend: hetsparse::BackendKind::Cpu,
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
    Error::TooLarge {
        what: what.into(),
        needed,
        limit: available,
        unit: "bytes",
    }
}

/// The row blocks `parts`, in order, as one `nrows × ncols` matrix.
fn stack<T: ContextScalar>(
    nrows: usize,
    ncols: usize,
    parts: Vec<Option<Csr<T>>>,
) -> Result<Csr<T>, Error> {
    let missing = || Error::Internal {
        backend: hetsparse::BackendKind::Cpu,
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
