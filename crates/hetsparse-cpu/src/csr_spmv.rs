//! CSR SpMV, `y = A · x`: the CPU backend's default SpMV.
//!
//! SpMV does two flops per stored entry and reads each entry once, so what a row costs beyond
//! its products shows directly, and large matrices run at the speed one core can stream A's
//! values and column indices. Hence:
//! - the rows are cut into parts of equal work (entries plus rows), a few per thread, so that
//!   a 512-row dense matrix keeps both threads busy as well as a 4-million-row road network
//!   does, and a thread slowed by another process hands its last parts to the others (rows in
//!   blocks of a fixed count left the 512-row matrix on one thread);
//! - each row is summed in registers and written to `y` once, straight into the uninitialised
//!   result: no zeroing pass, no staging buffer;
//! - when A is larger than the cache, every row (and in the f64 kernel every step of a long
//!   row) asks for A's values and column indices 8 KiB ahead ([`prefetch_ahead`]): the
//!   hardware prefetcher alone kept one core at about two thirds of the speed on the streamed
//!   classes;
//! - on x86-64 with AVX2, f64 plus-times (the common case) sums four entries per step, and the
//!   last 0 to 4 entries of a row as one step whose extra lanes are masked off: a road
//!   network's rows hold 2 to 5 entries in no pattern, and a loop over each row's remainder
//!   mispredicted its exit about once per row (the masked steps made the road class 1.6×
//!   faster on one thread). The four `x` values of a step are loaded one by one: AVX2
//!   gathers were slower on the development machine (AMD Zen 5) on every class tried
//!   (dense, stencil3d, banded, road).

use std::any::TypeId;
use std::mem::MaybeUninit;
use std::ops::Range;

use hetsparse_core::backend::check;
use hetsparse_core::format::{Csr, SparseRef};
use hetsparse_core::{PlusTimes, Result, Scalar, Semiring};
use rayon::prelude::*;

use crate::memory::reserved;
use crate::multiply::wide_vectors;

/// Parts per thread: several, so that the threads even out through work stealing when one
/// runs late; not many more, since each part costs a task (about a microsecond).
const PARTS_PER_THREAD: u64 = 16;

/// Least work (entries plus rows) of a part, so that a part outweighs the task that runs it.
const MIN_PART_WORK: u64 = 16 * 1024;

/// `y = A · x` over the semiring `S`; on the calling thread when `serial`, else on the current
/// rayon pool.
pub(crate) fn csr_spmv<T: Scalar, S: Semiring<T>>(
    a: &Csr<T>,
    x: &[T],
    serial: bool,
) -> Result<Vec<T>> {
    // The kernels load `x[k]` for A's column indices `k` without bounds checks: every `Csr`
    // keeps `k < ncols`, and this check gives `x.len() == ncols`.
    check::spmv(&SparseRef::Csr(a), x)?;
    let m = a.nrows();
    let mut y = reserved::<T>(m, "SpMV result")?;
    let offsets = a.row_offsets();
    let work = a.nnz().saturating_add(m as u64);
    let parts = if serial {
        1
    } else {
        let most = (rayon::current_num_threads() as u64).saturating_mul(PARTS_PER_THREAD);
        (work / MIN_PART_WORK).clamp(1, most.max(1))
    };
    // The result, cut at the parts' first rows into disjoint slices.
    let mut pieces = Vec::with_capacity(parts as usize);
    let mut rest = &mut y.spare_capacity_mut()[..m];
    let mut start = 0;
    for p in 1..=parts {
        let end = if p == parts {
            m
        } else {
            let target = (u128::from(work) * u128::from(p) / u128::from(parts)) as u64;
            first_row_with_work(offsets, target)
        };
        let (head, tail) = std::mem::take(&mut rest).split_at_mut(end - start);
        pieces.push((start..end, head));
        rest = tail;
        start = end;
    }
    let kernel = Kernel {
        wide: wide_vectors(),
        ahead: prefetch_ahead::<T>(a.nnz()),
    };
    let run = |(rows, out): (Range<usize>, &mut [MaybeUninit<T>])| {
        rows_dot::<T, S>(a, x, rows, out, kernel);
    };
    if pieces.len() == 1 {
        pieces.into_iter().for_each(run);
    } else {
        pieces.into_par_iter().for_each(run);
    }
    // SAFETY: the pieces tile rows 0..m and each kernel wrote every slot of its piece.
    unsafe { y.set_len(m) };
    Ok(y)
}

/// The first row `i` whose preceding work, `offsets[i] + i`, is at least `target` (`nrows`
/// when none is); nondecreasing in `target`.
fn first_row_with_work(offsets: &[u64], target: u64) -> usize {
    let (mut lo, mut hi) = (0, offsets.len() - 1);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if offsets[mid].saturating_add(mid as u64) < target {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

/// Writes `out[r] = (A · x)[rows.start + r]` for every row of `rows`, picking the kernel.
fn rows_dot<T: Scalar, S: Semiring<T>>(
    a: &Csr<T>,
    x: &[T],
    rows: Range<usize>,
    out: &mut [MaybeUninit<T>],
    kernel: Kernel,
) {
    let offsets = &a.row_offsets()[rows.start..=rows.end];
    let (cols, vals) = (a.col_indices(), a.values());
    let ahead = kernel.ahead;
    #[cfg(target_arch = "x86_64")]
    if kernel.wide {
        if TypeId::of::<T>() == TypeId::of::<f64>()
            && TypeId::of::<S>() == TypeId::of::<PlusTimes>()
        {
            // SAFETY: `T` is f64, so the casts change no type; the processor has AVX2 and FMA
            // (`wide`); `x.len() == ncols` was checked by `csr_spmv`.
            unsafe {
                let vals = std::slice::from_raw_parts(vals.as_ptr().cast::<f64>(), vals.len());
                let x = std::slice::from_raw_parts(x.as_ptr().cast::<f64>(), x.len());
                let out = std::slice::from_raw_parts_mut(
                    out.as_mut_ptr().cast::<MaybeUninit<f64>>(),
                    out.len(),
                );
                f64_rows_avx2(offsets, cols, vals, x, out, ahead);
            }
            return;
        }
        // SAFETY: the processor has AVX2 and FMA (`wide`).
        unsafe { rows_dot_avx2::<T, S>(offsets, cols, vals, x, out, ahead) };
        return;
    }
    rows_dot_generic::<T, S>(offsets, cols, vals, x, out, ahead);
}

/// [`rows_dot_generic`] compiled for AVX2 and FMA (other scalar types and semirings).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn rows_dot_avx2<T: Scalar, S: Semiring<T>>(
    offsets: &[u64],
    cols: &[u32],
    vals: &[T],
    x: &[T],
    out: &mut [MaybeUninit<T>],
    ahead: Option<usize>,
) {
    rows_dot_generic::<T, S>(offsets, cols, vals, x, out, ahead);
}

/// Each row of `offsets` (`out.len() + 1` row offsets) summed in registers: four running sums
/// on rows of four entries or more, so that consecutive products do not wait for each other.
#[inline(always)]
fn rows_dot_generic<T: Scalar, S: Semiring<T>>(
    offsets: &[u64],
    cols: &[u32],
    vals: &[T],
    x: &[T],
    out: &mut [MaybeUninit<T>],
    ahead: Option<usize>,
) {
    // SAFETY (every `get_unchecked` below): column indices are below `ncols == x.len()`.
    let load = |k: u32| unsafe { *x.get_unchecked(k as usize) };
    for (slot, ends) in out.iter_mut().zip(offsets.windows(2)) {
        let (s, e) = (ends[0] as usize, ends[1] as usize);
        if let Some(ahead) = ahead {
            prefetch(cols, vals, e + ahead);
        }
        let (cols, vals) = (&cols[s..e], &vals[s..e]);
        let mut sum = S::zero();
        if cols.len() >= 4 {
            let mut sums = [S::zero(); 4];
            let (cols4, vals4) = (cols.chunks_exact(4), vals.chunks_exact(4));
            for (c, v) in cols4.zip(vals4) {
                for lane in 0..4 {
                    sums[lane] = S::fma(sums[lane], v[lane], load(c[lane]));
                }
            }
            sum = S::add(S::add(sums[0], sums[1]), S::add(sums[2], sums[3]));
        }
        let tail = cols.len() / 4 * 4;
        for (&k, &v) in cols[tail..].iter().zip(&vals[tail..]) {
            sum = S::fma(sum, v, load(k));
        }
        slot.write(T::from_acc(sum));
    }
}

/// f64 plus-times rows (see the module documentation).
///
/// # Safety
/// The processor has AVX2 and FMA; `offsets` are a CSR matrix's offsets for `out.len()` rows
/// of `cols` and `vals`, and every column index is below `x.len()`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn f64_rows_avx2(
    offsets: &[u64],
    cols: &[u32],
    vals: &[f64],
    x: &[f64],
    out: &mut [MaybeUninit<f64>],
    ahead: Option<usize>,
) {
    use std::arch::x86_64::*;
    /// `MASKS[r]` keeps the first `r` of four lanes.
    const MASKS: [[u64; 4]; 5] = [
        [0, 0, 0, 0],
        [!0, 0, 0, 0],
        [!0, !0, 0, 0],
        [!0, !0, !0, 0],
        [!0, !0, !0, !0],
    ];
    let nnz = vals.len();
    let (cp, vp, xp) = (cols.as_ptr(), vals.as_ptr(), x.as_ptr());
    // The products of the four entries at `j`: four scalar loads of x, which beat a gather.
    let products = |j: usize| {
        let x_at = |k: usize| *xp.add(*cp.add(j + k) as usize);
        _mm256_mul_pd(
            _mm256_loadu_pd(vp.add(j)),
            _mm256_setr_pd(x_at(0), x_at(1), x_at(2), x_at(3)),
        )
    };
    for (slot, ends) in out.iter_mut().zip(offsets.windows(2)) {
        let (s, e) = (ends[0] as usize, ends[1] as usize);
        if let Some(ahead) = ahead {
            prefetch(cols, vals, e + ahead);
        }
        // A step of eight reads one cache line of values, and the row's own prefetch covers
        // about one line: rows of more than two lines prefetch every step as well.
        let step_ahead = ahead.filter(|_| e - s > 16);
        let sum = if e + 4 <= nnz {
            // Whole steps of four, then the last 0 to 4 entries as a step whose extra lanes
            // (entries of the next rows, valid indices) are masked off: no branch depends on
            // the row's length modulo 4, and a row of up to four entries is one step.
            let (mut a0, mut a1) = (_mm256_setzero_pd(), _mm256_setzero_pd());
            let mut j = s;
            while j + 8 < e {
                if let Some(ahead) = step_ahead {
                    prefetch(cols, vals, j + ahead);
                }
                a0 = _mm256_add_pd(a0, products(j));
                a1 = _mm256_add_pd(a1, products(j + 4));
                j += 8;
            }
            if j + 4 < e {
                a0 = _mm256_add_pd(a0, products(j));
                j += 4;
            }
            let mask = _mm256_loadu_pd(MASKS[e - j].as_ptr().cast());
            a1 = _mm256_add_pd(a1, _mm256_and_pd(products(j), mask));
            let a = _mm256_add_pd(a0, a1);
            let half = _mm_add_pd(_mm256_castpd256_pd128(a), _mm256_extractf128_pd::<1>(a));
            _mm_cvtsd_f64(_mm_add_sd(half, _mm_unpackhi_pd(half, half)))
        } else {
            // The last rows, whose masked step would read past the arrays. Summed from +0.0
            // like every other row (`Sum for f64` starts at −0.0, which an empty row kept).
            (s..e).fold(0.0, |sum, j| {
                sum + *vp.add(j) * *xp.add(*cp.add(j) as usize)
            })
        };
        slot.write(sum);
    }
}

/// A's stored entries (values and column indices) above which the kernels prefetch: smaller
/// matrices stay in the last-level cache from one call to the next (32 MiB on the development
/// machine), where the prefetches cost more than they save (dense and stencil3d classes 8%
/// slower with them).
const PREFETCH_MIN_BYTES: u64 = 16 << 20;

/// Bytes of A's values the kernels ask for ahead of the entry they are at.
const PREFETCH_BYTES: usize = 8 << 10;

/// The kernels' choices for one product.
#[derive(Clone, Copy)]
struct Kernel {
    /// The processor runs AVX2 and FMA.
    wide: bool,
    /// How many entries ahead A's values and column indices are prefetched, if they are.
    ahead: Option<usize>,
}

/// How far ahead the kernels prefetch A's values and column indices for `nnz` entries of
/// `T`: [`PREFETCH_BYTES`] of values when A is larger than [`PREFETCH_MIN_BYTES`], where the
/// hardware prefetcher alone kept a core at about two thirds of the speed on the streamed
/// classes (banded, uniform, road; LP and skewed, whose long rows need a prefetch per step,
/// by a third more).
fn prefetch_ahead<T>(nnz: u64) -> Option<usize> {
    let size = std::mem::size_of::<T>();
    let bytes = nnz.saturating_mul(size as u64 + 4);
    (bytes >= PREFETCH_MIN_BYTES).then(|| PREFETCH_BYTES / size.max(1))
}

/// Asks for the cache lines of entry `j` of `cols` and `vals`. `j` may lie past their ends:
/// a prefetch never faults, so no bounds are checked (the checks cost more than the few
/// useless prefetches at the end of the arrays).
#[inline(always)]
fn prefetch<T>(cols: &[u32], vals: &[T], j: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: prefetching is a hint that never faults; `wrapping_add` only computes an
        // address, which is never dereferenced.
        unsafe {
            _mm_prefetch::<_MM_HINT_T0>(vals.as_ptr().wrapping_add(j).cast());
            _mm_prefetch::<_MM_HINT_T0>(cols.as_ptr().wrapping_add(j).cast());
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (cols, vals, j);
}

#[cfg(test)]
mod tests {
    use super::*;
    use hetsparse_core::reference;

    /// A matrix whose rows have every length from 0 to 11 (so every remainder modulo 4, masked
    /// steps at the end of the arrays, and empty rows), with values that make wrong lanes show.
    fn mixed_rows(nrows: usize, ncols: usize) -> Csr<f64> {
        let (mut offsets, mut cols, mut vals) = (vec![0u64], Vec::new(), Vec::new());
        for i in 0..nrows {
            let len = (i * 7 + i / 3) % 12;
            let mut row: Vec<u32> = (0..len)
                .map(|k| ((i * 13 + k * 29) % ncols) as u32)
                .collect();
            row.sort_unstable();
            row.dedup();
            for &c in &row {
                cols.push(c);
                vals.push(1.0 + (i % 5) as f64 * 0.25 - c as f64 * 1e-3);
            }
            offsets.push(cols.len() as u64);
        }
        Csr::try_new(nrows, ncols, offsets, cols, vals).unwrap()
    }

    fn check<S: Semiring<f64>>(a: &Csr<f64>, serial: bool) {
        let x: Vec<f64> = (0..a.ncols()).map(|k| 0.5 + (k % 11) as f64).collect();
        let got = csr_spmv::<f64, S>(a, &x, serial).unwrap();
        let want = reference::spmv::<f64, S>(a, &x).unwrap();
        assert_eq!(got.len(), want.len());
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                (g - w).abs() <= 1e-12 * w.abs().max(1.0),
                "row {i}: {g} != {w}"
            );
        }
    }

    #[test]
    fn every_row_length_matches_the_reference() {
        for (m, n) in [(1, 1), (5, 3), (37, 40), (3000, 500), (20_000, 20_000)] {
            let a = mixed_rows(m, n);
            check::<PlusTimes>(&a, true);
            check::<PlusTimes>(&a, false);
        }
    }

    #[test]
    fn parallel_parts_tile_the_rows() {
        // Enough work for many parts, all inside a pool of several threads.
        let a = mixed_rows(100_000, 1000);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .unwrap();
        pool.install(|| check::<PlusTimes>(&a, false));
    }

    #[test]
    fn infinities_past_a_row_do_not_leak_into_it() {
        // Row 0 has one entry; its masked step also loads row 1's entry, whose x is infinite
        // and whose value is zero: 0 · ∞ is NaN, and must not reach y[0]. Rows 2 to 5 make
        // the arrays long enough for the masked step to run.
        let a = Csr::try_new(
            6,
            2,
            vec![0, 1, 2, 3, 4, 5, 6],
            vec![0, 1, 0, 0, 0, 0],
            vec![2.0, 0.0, 1.0, 1.0, 1.0, 1.0],
        )
        .unwrap();
        let x = [3.0, f64::INFINITY];
        let y = csr_spmv::<f64, PlusTimes>(&a, &x, true).unwrap();
        assert_eq!(y[0], 6.0);
        assert!(y[1].is_nan(), "0 · ∞ is NaN, as in the reference");
        assert_eq!(&y[2..], &[3.0; 4]);
    }

    #[test]
    fn empty_shapes_and_wrong_vectors() {
        let a = Csr::<f64>::try_new(0, 4, vec![0], vec![], vec![]).unwrap();
        assert!(csr_spmv::<f64, PlusTimes>(&a, &[0.0; 4], false)
            .unwrap()
            .is_empty());
        let b = Csr::<f64>::try_new(3, 2, vec![0, 0, 0, 0], vec![], vec![]).unwrap();
        assert_eq!(
            csr_spmv::<f64, PlusTimes>(&b, &[1.0, 2.0], false).unwrap(),
            vec![0.0; 3]
        );
        assert!(csr_spmv::<f64, PlusTimes>(&b, &[1.0], false).is_err());
    }

    #[test]
    fn empty_rows_are_positive_zero_on_every_path() {
        // Few entries: every row takes the short tail path of the AVX2 kernel.
        let few = Csr::try_new(4, 2, vec![0, 0, 1, 1, 1], vec![0], vec![-0.0]).unwrap();
        // Many entries: the empty rows come before the last four entries (masked steps).
        let mut offsets = vec![0u64, 0, 0];
        offsets.extend((1..=16).map(|i| i * 4));
        offsets.extend([64, 64]);
        let many = Csr::try_new(
            offsets.len() - 1,
            4,
            offsets,
            [0u32, 1, 2, 3].repeat(16),
            vec![1.0; 64],
        )
        .unwrap();
        for (a, x) in [(&few, vec![1.0, 1.0]), (&many, vec![-0.0; 4])] {
            for serial in [true, false] {
                let y = csr_spmv::<f64, PlusTimes>(a, &x, serial).unwrap();
                for i in 0..a.nrows() {
                    if a.row_nnz(i) == 0 {
                        assert_eq!(y[i].to_bits(), 0.0f64.to_bits(), "row {i} of {y:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn part_boundaries_balance_entries_and_rows() {
        // Rows of 0, 10, 0, 10 entries: work before row i is offsets[i] + i.
        let offsets = [0u64, 0, 10, 10, 20];
        assert_eq!(first_row_with_work(&offsets, 0), 0);
        assert_eq!(first_row_with_work(&offsets, 1), 1);
        assert_eq!(first_row_with_work(&offsets, 2), 2);
        assert_eq!(first_row_with_work(&offsets, 12), 2);
        assert_eq!(first_row_with_work(&offsets, 13), 3);
        assert_eq!(first_row_with_work(&offsets, 24), 4);
        assert_eq!(first_row_with_work(&offsets, 1000), 4);
    }
}
