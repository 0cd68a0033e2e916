//! DIA × DIA for band matrices (Matam et al. Alg. 3).
//!
//! Diagonal `a` of A (offset `oa`) times diagonal `b` of B (offset `ob`) lands on the diagonal
//! of offset `oa + ob` of C, element by element: `C[i, i+oa+ob] += A[i, i+oa] · B[i+oa,
//! i+oa+ob]`. Each diagonal of C is therefore a sum of shifted element-wise products of
//! contiguous arrays, computed here in blocks of rows in parallel with no index arithmetic in
//! the inner loop. C's diagonals are every reachable `oa + ob`; a diagonal whose products all
//! cancel is kept, holding zeros.

use std::mem::MaybeUninit;
use std::ops::Range;

use hetsparse_core::format::Dia;
use hetsparse_core::{Error, Result, Scalar, Semiring};
use rayon::prelude::*;

use crate::memory::reserved;

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
    let m = a.nrows();
    let offsets = a.product_offsets(b);
    let len = m * offsets.len();
    let mut data: Vec<T> = reserved(len, "DIA×DIA result")?;
    if len > 0 {
        let mut c: Vec<&mut [MaybeUninit<T>]> =
            data.spare_capacity_mut()[..len].chunks_mut(m).collect();
        multiply_rows::<T, S>(a, b, 0..m, &offsets, &mut c)?;
    }
    // SAFETY: `multiply_rows` wrote every slot of every diagonal (rows 0..m).
    unsafe { data.set_len(len) };
    Ok(Dia::try_new(m, b.ncols(), offsets, data)?)
}

/// Rows `rows` of `C = A · B` written into `c` (`c[d]`: those rows of diagonal `offsets[d]`),
/// every slot; the caller checks the arguments ([`hetsparse_core::backend::check::dia_rows`]).
pub(crate) fn multiply_rows<T: Scalar, S: Semiring<T>>(
    a: &Dia<T>,
    b: &Dia<T>,
    rows: Range<usize>,
    offsets: &[i64],
    c: &mut [&mut [MaybeUninit<T>]],
) -> Result<()> {
    let (k, n) = (a.ncols() as i64, b.ncols() as i64);
    let (r0, r1) = (rows.start as i64, rows.end as i64);
    let _s = tracing::debug_span!(
        "cpu_dia_spgemm",
        rows = ?rows,
        cols = n,
        diagonals_a = a.ndiags(),
        diagonals_b = b.ndiags()
    )
    .entered();
    // The pairs feeding each diagonal of C, over the rows asked for.
    let mut pairs: Vec<Vec<Pair>> = vec![Vec::new(); offsets.len()];
    for (da, &oa) in a.offsets().iter().enumerate() {
        for (db, &ob) in b.offsets().iter().enumerate() {
            // Rows i in `rows` with 0 <= i + oa < k and 0 <= i + oa + ob < n.
            let first = r0.max(-oa).max(-oa - ob);
            let last = r1.min(k - oa).min(n - oa - ob);
            if first >= last {
                continue;
            }
            let Ok(d) = offsets.binary_search(&(oa + ob)) else {
                return Err(Error::InvalidArgument(format!(
                    "DIA×DIA rows {rows:?}: C has a diagonal of offset {}, not among the offsets given",
                    oa + ob
                )));
            };
            pairs[d].push(Pair {
                a: da,
                b: db,
                shift: oa,
                first: first as usize,
                last: last as usize,
            });
        }
    }
    c.par_iter_mut()
        .zip(pairs.par_iter())
        .for_each(|(diagonal, pairs)| {
            diagonal
                .par_chunks_mut(BLOCK)
                .enumerate()
                .for_each(|(blk, out)| block::<T, S>(a, b, pairs, rows.start + blk * BLOCK, out));
        });
    Ok(())
}

/// Rows `r0..r0 + out.len()` of one diagonal of C.
fn block<T: Scalar, S: Semiring<T>>(
    a: &Dia<T>,
    b: &Dia<T>,
    pairs: &[Pair],
    r0: usize,
    out: &mut [MaybeUninit<T>],
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
    // Rows no pair reaches are padding of C's diagonal, or hold no product: zero.
    let (from, to) = if touched.0 < touched.1 {
        (touched.0 - r0, touched.1 - r0)
    } else {
        (0, 0)
    };
    for o in &mut out[..from] {
        o.write(zero);
    }
    for (o, &c) in out[from..to].iter_mut().zip(&acc[from..to]) {
        o.write(T::from_acc(c));
    }
    for o in &mut out[to..] {
        o.write(zero);
    }
}
