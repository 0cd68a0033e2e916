//! DIA × DIA for band matrices (Matam et al. Alg. 3).
//!
//! Diagonal `a` of A (offset `oa`) times diagonal `b` of B (offset `ob`) lands on the diagonal
//! of offset `oa + ob` of C, element by element: `C[i, i+oa+ob] += A[i, i+oa] · B[i+oa,
//! i+oa+ob]`. Each diagonal of C is therefore a sum of shifted element-wise products of
//! contiguous arrays, computed here in blocks of rows in parallel with no index arithmetic in
//! the inner loop. C's diagonals are every reachable `oa + ob`; a diagonal whose products all
//! cancel is kept, holding zeros.

use std::collections::BTreeMap;

use hetsparse_core::format::Dia;
use hetsparse_core::{Result, Scalar, Semiring};
use rayon::prelude::*;

use crate::memory::filled;

/// Rows of one diagonal one task computes.
const BLOCK: usize = 4096;

/// One contribution to a diagonal of C: diagonals `a` and `b` over rows `first..last`.
#[derive(Clone, Copy, Debug)]
struct Pair {
    a: usize,
    b: usize,
    /// Offset of diagonal `a`: B's diagonal is read `oa` rows further down.
    shift: i64,
    first: usize,
    last: usize,
}

/// `C = A · B`; shapes must chain (the caller checks).
pub(crate) fn multiply<T: Scalar, S: Semiring<T>>(a: &Dia<T>, b: &Dia<T>) -> Result<Dia<T>> {
    let (m, k, n) = (a.nrows(), a.ncols(), b.ncols());
    let _s = tracing::debug_span!(
        "cpu_dia_spgemm",
        rows = m,
        cols = n,
        diagonals_a = a.ndiags(),
        diagonals_b = b.ndiags()
    )
    .entered();
    // The pairs feeding each diagonal of C, keyed (and so sorted) by C's offset.
    let mut diagonals: BTreeMap<i64, Vec<Pair>> = BTreeMap::new();
    for (da, &oa) in a.offsets().iter().enumerate() {
        for (db, &ob) in b.offsets().iter().enumerate() {
            // Rows i with 0 <= i < m, 0 <= i + oa < k and 0 <= i + oa + ob < n.
            let first = 0i64.max(-oa).max(-oa - ob);
            let last = (m as i64).min(k as i64 - oa).min(n as i64 - oa - ob);
            if first < last {
                diagonals.entry(oa + ob).or_default().push(Pair {
                    a: da,
                    b: db,
                    shift: oa,
                    first: first as usize,
                    last: last as usize,
                });
            }
        }
    }
    let offsets: Vec<i64> = diagonals.keys().copied().collect();
    let pairs: Vec<Vec<Pair>> = diagonals.into_values().collect();
    let mut data = filled(m * offsets.len(), T::zero(), "DIA×DIA result")?;
    if m > 0 {
        data.par_chunks_mut(m)
            .zip(pairs.par_iter())
            .for_each(|(diagonal, pairs)| {
                diagonal
                    .par_chunks_mut(BLOCK)
                    .enumerate()
                    .for_each(|(blk, out)| {
                        let r0 = blk * BLOCK;
                        block::<T, S>(a, b, pairs, r0, out);
                    });
            });
    }
    Ok(Dia::try_new(m, n, offsets, data)?)
}

/// Rows `r0..r0 + out.len()` of one diagonal of C.
fn block<T: Scalar, S: Semiring<T>>(
    a: &Dia<T>,
    b: &Dia<T>,
    pairs: &[Pair],
    r0: usize,
    out: &mut [T],
) {
    let r1 = r0 + out.len();
    let zero = T::zero();
    let mut acc = [S::zero(); BLOCK];
    let mut touched = (usize::MAX, 0usize);
    for p in pairs {
        let (first, last) = (p.first.max(r0), p.last.min(r1));
        if first >= last {
            continue;
        }
        touched = (touched.0.min(first), touched.1.max(last));
        let a_part = &a.diagonal(p.a)[first..last];
        let b_from = (first as i64 + p.shift) as usize;
        let b_part = &b.diagonal(p.b)[b_from..b_from + (last - first)];
        let acc_part = &mut acc[first - r0..last - r0];
        for ((c, &x), &y) in acc_part.iter_mut().zip(a_part).zip(b_part) {
            // Zeros of a diagonal are band padding, not entries: never multiplied (`0 × ∞`).
            if x != zero && y != zero {
                *c = S::fma(*c, x, y);
            }
        }
    }
    // Rows no pair reaches are padding of C's diagonal and stay zero.
    if touched.0 < touched.1 {
        for (o, &c) in out[touched.0 - r0..touched.1 - r0]
            .iter_mut()
            .zip(&acc[touched.0 - r0..touched.1 - r0])
        {
            *o = T::from_acc(c);
        }
    }
}
