//! Column-Row rows (Matam et al. §II.A, Alg. 2): C as the sum of the outer products
//! `A[:, k] ⊗ B[k, :]`.
//!
//! A block of rows of C is built by walking the columns `k` of A that the block uses, and for
//! each scattering the outer product of the column's entries in the block with row `k` of B
//! into per-row segments of an expansion buffer (every product gets its own slot, as in the
//! GPU formulation). Each row's segment is then sorted by column and merged. Blocks are cut so
//! that their expansion stays within [`EXPANSION_BUDGET`] products per thread; a row with more
//! products than that on its own is accumulated row-wise instead, since its expansion would
//! not fit the budget.

use std::ops::Range;

use hetsparse_core::format::Csr;
use hetsparse_core::{Accumulator, Result, Scalar, Semiring};

use super::row_row::{row, write_merged};
use super::scratch::Scratch;
use super::{count_mismatch, Operands, Output};

/// Products one thread expands at a time (each takes a column index and an accumulator).
const EXPANSION_BUDGET: u64 = 1 << 20;

/// Numeric phase over `range` by outer products. `a_columns` holds the chunk's rows of A by
/// columns (the transpose of those rows), row indices relative to the chunk.
pub(super) fn compute_rows<T: Scalar, S: Semiring<T>>(
    ops: &Operands<'_, T>,
    a_columns: &Csr<T>,
    range: Range<usize>,
    products: &[u64],
    mut out: Output<'_, T>,
    s: &mut Scratch<T::Acc>,
) -> Result<()> {
    let mut start = range.start;
    while start < range.end {
        if products[start] > EXPANSION_BUDGET {
            let mut row_out = out.row(start);
            let expected = row_out.len();
            let written = row::<T, S, true>(ops, start, products[start], s, &mut row_out);
            if written != expected {
                return Err(count_mismatch(ops.row_base + start, expected, written));
            }
            start += 1;
            continue;
        }
        let mut end = start;
        let mut expansion = 0u64;
        while end < range.end
            && products[end] <= EXPANSION_BUDGET
            && expansion + products[end] <= EXPANSION_BUDGET
        {
            expansion += products[end];
            end += 1;
        }
        block::<T, S>(ops, a_columns, start..end, products, &mut out, s)?;
        start = end;
    }
    Ok(())
}

/// Rows `rows` of C by outer products.
fn block<T: Scalar, S: Semiring<T>>(
    ops: &Operands<'_, T>,
    a_columns: &Csr<T>,
    rows: Range<usize>,
    products: &[u64],
    out: &mut Output<'_, T>,
    s: &mut Scratch<T::Acc>,
) -> Result<()> {
    // The columns of A this block uses, in order.
    let ks = &mut s.columns;
    ks.clear();
    for i in rows.clone() {
        ks.extend_from_slice(ops.a_row(i).0);
    }
    ks.sort_unstable();
    ks.dedup();

    // Each row's segment of the expansion starts where the previous row's ends.
    let cursors = &mut s.cursors;
    cursors.clear();
    let mut total = 0usize;
    for i in rows.clone() {
        cursors.push(total);
        total += products[i] as usize;
    }
    let pairs = &mut s.pairs;
    pairs.clear();
    pairs.resize(total, (0, <T::Acc as Accumulator>::ZERO));

    let (first, last) = (rows.start as u32, rows.end as u32);
    for &k in ks.iter() {
        let (a_rows, a_vals) = a_columns.row(k as usize);
        let from = a_rows.partition_point(|&i| i < first);
        let to = from + a_rows[from..].partition_point(|&i| i < last);
        let (b_cols, b_vals) = ops.b_row(k);
        for (&i, &av) in a_rows[from..to].iter().zip(&a_vals[from..to]) {
            let cursor = &mut cursors[(i - first) as usize];
            let segment = &mut pairs[*cursor..*cursor + b_cols.len()];
            for ((slot, &j), &bv) in segment.iter_mut().zip(b_cols).zip(b_vals) {
                *slot = (j, S::mul_at(av, bv, k));
            }
            *cursor += b_cols.len();
        }
    }

    let mut segment_start = 0usize;
    for i in rows {
        let segment_end = segment_start + products[i] as usize;
        let segment = &mut pairs[segment_start..segment_end];
        segment.sort_unstable_by_key(|p| p.0);
        let mut row_out = out.row(i);
        let written = write_merged::<T, S>(segment, ops.lo, &mut row_out);
        if written != row_out.len() {
            return Err(count_mismatch(ops.row_base + i, row_out.len(), written));
        }
        segment_start = segment_end;
    }
    Ok(())
}
