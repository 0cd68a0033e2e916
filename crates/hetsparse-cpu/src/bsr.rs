//! BSR × BSR: Gustavson over blocks (the block extension of Polok et al.).
//!
//! Block row `I` of C is the sum over the blocks `(I, K)` of A of that block times block row
//! `K` of B; each block product is a small dense product whose inner loop runs along a block
//! row of B. Like CSR SpGEMM it runs in two phases over ranges of block rows balanced by block
//! products: the symbolic phase counts each block row's distinct block columns, the numeric
//! phase writes the sorted block columns and the summed blocks straight into the result. C
//! keeps every block the structure creates, also where its values cancel.

use std::ops::Range;

use hetsparse_core::format::Bsr;
use hetsparse_core::{Accumulator, Result, Scalar, Semiring};
use rayon::prelude::*;

use crate::memory::filled;
use crate::plan::{balanced_ranges, split_mut};

/// `C = A · B`; shapes and block sizes must chain (the caller checks).
pub(crate) fn multiply<T: Scalar, S: Semiring<T>>(a: &Bsr<T>, b: &Bsr<T>) -> Result<Bsr<T>> {
    let ((r, inner), (_, c)) = (a.block_shape(), b.block_shape());
    let _s = tracing::debug_span!(
        "cpu_bsr_spgemm",
        block_rows = a.block_rows(),
        block_cols = b.block_cols(),
        blocks_a = a.nnz_blocks(),
        blocks_b = b.nnz_blocks()
    )
    .entered();
    let products: Vec<u64> = (0..a.block_rows())
        .into_par_iter()
        .map(|i| {
            blocks(a, i)
                .map(|p| blocks(b, a.col_indices()[p] as usize).len() as u64)
                .sum::<u64>()
                * (r * inner * c) as u64
        })
        .collect();
    let ranges = balanced_ranges(&products);

    let mut counts = vec![0u64; a.block_rows()];
    split_mut(&mut counts, &ranges)
        .into_par_iter()
        .zip(ranges.par_iter())
        .for_each_init(Vec::new, |columns, (out, range)| {
            for (count, i) in out.iter_mut().zip(range.clone()) {
                block_columns(a, b, i, columns);
                *count = columns.len() as u64;
            }
        });
    let mut offsets = Vec::with_capacity(counts.len() + 1);
    offsets.push(0u64);
    let mut total = 0u64;
    for &n in &counts {
        total += n;
        offsets.push(total);
    }
    let block_len = r * c;
    let mut cols = filled(total as usize, 0u32, "BSR×BSR block columns")?;
    let mut vals = filled(total as usize * block_len, T::zero(), "BSR×BSR result")?;
    let block_ranges: Vec<Range<usize>> = ranges
        .iter()
        .map(|rg| offsets[rg.start] as usize..offsets[rg.end] as usize)
        .collect();
    let value_ranges: Vec<Range<usize>> = block_ranges
        .iter()
        .map(|rg| rg.start * block_len..rg.end * block_len)
        .collect();
    split_mut(&mut cols, &block_ranges)
        .into_par_iter()
        .zip(split_mut(&mut vals, &value_ranges))
        .zip(ranges.par_iter())
        .for_each_init(
            || (Vec::new(), Vec::new()),
            |(columns, acc), ((out_cols, out_vals), range)| {
                let base = offsets[range.start] as usize;
                for i in range.clone() {
                    let (s, e) = (offsets[i] as usize - base, offsets[i + 1] as usize - base);
                    block_columns(a, b, i, columns);
                    out_cols[s..e].copy_from_slice(columns);
                    block_row::<T, S>(
                        a,
                        b,
                        i,
                        columns,
                        acc,
                        &mut out_vals[s * block_len..e * block_len],
                    );
                }
            },
        );
    Ok(Bsr::try_new(
        (r, c),
        a.block_rows(),
        b.block_cols(),
        offsets,
        cols,
        vals,
    )?)
}

/// Block columns of block row `i` of a BSR matrix.
fn blocks<T: Scalar>(m: &Bsr<T>, i: usize) -> std::ops::Range<usize> {
    m.row_offsets()[i] as usize..m.row_offsets()[i + 1] as usize
}

/// The sorted distinct block columns of block row `i` of C, into `columns`.
fn block_columns<T: Scalar>(a: &Bsr<T>, b: &Bsr<T>, i: usize, columns: &mut Vec<u32>) {
    columns.clear();
    for p in blocks(a, i) {
        let k = a.col_indices()[p] as usize;
        columns.extend_from_slice(&b.col_indices()[blocks(b, k)]);
    }
    columns.sort_unstable();
    columns.dedup();
}

/// The blocks of block row `i` of C, whose sorted block columns are `columns`, into `out`.
fn block_row<T: Scalar, S: Semiring<T>>(
    a: &Bsr<T>,
    b: &Bsr<T>,
    i: usize,
    columns: &[u32],
    acc: &mut Vec<T::Acc>,
    out: &mut [T],
) {
    let ((r, inner), (_, c)) = (a.block_shape(), b.block_shape());
    let block_len = r * c;
    let zero = T::zero();
    acc.clear();
    acc.resize(columns.len() * block_len, <T::Acc as Accumulator>::ZERO);
    acc.fill(S::zero());
    for p in blocks(a, i) {
        let k = a.col_indices()[p] as usize;
        let a_block = &a.values()[p * r * inner..(p + 1) * r * inner];
        for q in blocks(b, k) {
            let slot = columns.partition_point(|&j| j < b.col_indices()[q]);
            let b_block = &b.values()[q * inner * c..(q + 1) * inner * c];
            let c_block = &mut acc[slot * block_len..(slot + 1) * block_len];
            for ii in 0..r {
                let c_row = &mut c_block[ii * c..(ii + 1) * c];
                for kk in 0..inner {
                    let av = a_block[ii * inner + kk];
                    // Zeros of a block are fill, not entries: never multiplied (`0 × ∞`).
                    if av == zero {
                        continue;
                    }
                    for (x, &bv) in c_row.iter_mut().zip(&b_block[kk * c..(kk + 1) * c]) {
                        if bv != zero {
                            *x = S::fma(*x, av, bv);
                        }
                    }
                }
            }
        }
    }
    for (o, &x) in out.iter_mut().zip(acc.iter()) {
        *o = T::from_acc(x);
    }
}
