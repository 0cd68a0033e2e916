//! Semiring products of a CSR matrix and a sparse vector (GraphBLAS's mxv and vxm), parallel
//! with rayon, masked before multiplying.
//!
//! - **mxv** `w = A ⊕.⊗ u` pulls: each admitted row `i` of A is a dot product with `u`, read
//!   through a dense copy of `u` (one pass over its length, then a lookup per entry of A).
//!   A non-complemented mask lists the rows to compute, so a masked mxv reads only those rows.
//! - **vxm** `wᵀ = uᵀ ⊕.⊗ A` chooses between push and pull, as SuiteSparse:GraphBLAS and
//!   Beamer's direction-optimising breadth-first search do ([`Direction::for_frontier`],
//!   [`Direction::for_any_frontier`]):
//!   - *push* scatters each entry `u(k)` along row `k` of A: the work is the products of the
//!     frontier's rows, sorted by column to sum them (an "any" semiring claims each position
//!     once instead); best while the frontier is small.
//!   - *pull* computes each admitted `w(j)` from column `j` of A (a row of Aᵀ) against the
//!     dense `u`: no sort, and an "any" semiring stops at the first product found, so a BFS
//!     level reaching most of a graph reads a few entries per unvisited vertex instead of
//!     every edge of the frontier. It reads Aᵀ as the matrix keeps it
//!     ([`Csr::transpose_kept`]: A itself when symmetric, else built once): an "any" semiring
//!     pushes until the pushes that wanted a pull on this matrix add up to its entries, about
//!     a transpose's cost ([`Csr::transpose_if_worth_it`]), so that an operand seen once is
//!     never transposed for one product and a matrix searched again and again is, once.
//!
//! Products land in the order of the inner index `k`, as the reference's, so results match
//! it up to the rounding of partial sums (and up to which product an "any" semiring keeps).

use hetsparse_core::backend::Mask;
use hetsparse_core::semiring::{with_semiring, Semiring, SemiringVisitor};
use hetsparse_core::{
    Csr, Result, RunControl, Scalar, SemiringKind, SparseVector, VectorProductKind,
    VectorProductOptions,
};
use rayon::prelude::*;

/// Entries of A (or frontier entries) per rayon task: enough to amortise a task.
const MIN_ENTRIES_PER_TASK: usize = 4096;

/// Push while the frontier's products are fewer than A's entries over this: beyond it the
/// sort of the pushed products costs about what transposing A and pulling does.
const PULL_WHEN_PRODUCTS_EXCEED_NNZ_OVER: u64 = 4;

/// Beamer's α: an "any" vxm pulls once the frontier's products exceed the unexplored
/// positions' products over this (each pulled position stops at its first product, so a
/// pull reads far fewer than it could).
const PULL_ANY_WHEN_UNEXPLORED_OVER: f64 = 14.0;

/// An "any" vxm of a frontier under `1 / PULL_ANY_FROM_FRONTIER_SHARE` of the positions
/// pushes.
const PULL_ANY_FROM_FRONTIER_SHARE: u64 = 64;

/// How a vxm reaches A's entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Direction {
    /// Scatter along the frontier's rows of A.
    Push,
    /// Gather each admitted column of A (through Aᵀ).
    Pull,
}

impl Direction {
    /// An "any" semiring's direction, after Beamer's direction-optimising search: pull once
    /// the frontier's products exceed `1 / PULL_ANY_WHEN_UNEXPLORED_OVER` of the products
    /// the admitted positions' columns hold (their count times A's mean column, for the
    /// exact sum would cost a pass over A); push a frontier under
    /// `1 / PULL_ANY_FROM_FRONTIER_SHARE` of the positions without looking (a level of a
    /// road graph: the decision must cost less than its push). With the direction, the
    /// frontier's products where they were counted (always for a pull), which the pull's
    /// [`Csr::transpose_if_worth_it`] weighs again.
    pub(crate) fn for_any_frontier<T: Scalar>(
        a: &Csr<T>,
        u: &SparseVector<T>,
        mask: Option<&Mask>,
    ) -> (Direction, Option<u64>) {
        let len = a.ncols();
        if u.nnz().saturating_mul(PULL_ANY_FROM_FRONTIER_SHARE) < len as u64 || len == 0 {
            return (Direction::Push, None);
        }
        let admitted = Admitted::new(mask, len).map_or(len as u64, |m| m.count(len));
        let unexplored = admitted as f64 * a.nnz() as f64 / len as f64;
        let products = frontier_products(a, u);
        let direction = if products as f64 * PULL_ANY_WHEN_UNEXPLORED_OVER > unexplored {
            Direction::Pull
        } else {
            Direction::Push
        };
        (direction, Some(products))
    }

    /// Push while the products of the frontier's rows (`products`) are under
    /// `nnz / PULL_WHEN_PRODUCTS_EXCEED_NNZ_OVER`, else pull.
    pub(crate) fn for_frontier(products: u64, nnz: u64) -> Direction {
        if products.saturating_mul(PULL_WHEN_PRODUCTS_EXCEED_NNZ_OVER) < nnz {
            Direction::Push
        } else {
            Direction::Pull
        }
    }
}

/// The positions of `w` a mask admits: a lookup per candidate entry without a search in the
/// mask's row. A mask made from a bitmap or from bytes lends its own; a listed one is spread
/// into bits.
struct Admitted<'m> {
    held: Held<'m>,
    /// The mask is complemented and `held` is its own (not yet flipped).
    flip: bool,
}

/// The admitting positions as [`Admitted`] reads them.
enum Held<'m> {
    /// A bit a position.
    Bits(std::borrow::Cow<'m, [u64]>),
    /// A byte a position, admitting where not zero ([`Mask::from_bytes`]).
    Bytes(&'m [u8]),
}

impl<'m> Admitted<'m> {
    /// The positions of a `1 × len` mask's row 0 (complemented as the mask says); `None` for
    /// no mask (everything admitted).
    fn new(mask: Option<&'m Mask>, len: usize) -> Option<Admitted<'m>> {
        let mask = mask?;
        let flip = mask.is_complemented();
        if let Some(bits) = mask.bitmap() {
            return Some(Admitted {
                held: Held::Bits(bits.into()),
                flip,
            });
        }
        if let Some(bytes) = mask.bytes() {
            return Some(Admitted {
                held: Held::Bytes(bytes),
                flip,
            });
        }
        let fill = if flip { u64::MAX } else { 0 };
        let mut bits = vec![fill; len.div_ceil(64)];
        for &j in mask.row(0) {
            bits[j as usize / 64] ^= 1 << (j % 64);
        }
        Some(Admitted {
            held: Held::Bits(bits.into()),
            flip: false,
        })
    }

    #[inline]
    fn admits(&self, j: u32) -> bool {
        let held = match &self.held {
            Held::Bits(bits) => bits[j as usize / 64] >> (j % 64) & 1 == 1,
            Held::Bytes(bytes) => bytes[j as usize] != 0,
        };
        held != self.flip
    }

    /// The admission bits of positions `64 w .. 64 w + 64` (beyond the length: garbage, to
    /// be cut off by the caller).
    #[inline]
    fn word(&self, w: usize) -> u64 {
        let held = match &self.held {
            Held::Bits(bits) => bits[w],
            Held::Bytes(bytes) => {
                let piece = &bytes[w * 64..bytes.len().min(w * 64 + 64)];
                piece
                    .iter()
                    .enumerate()
                    .fold(0u64, |word, (b, &x)| word | u64::from(x != 0) << b)
            }
        };
        if self.flip {
            !held
        } else {
            held
        }
    }

    /// How many of the `len` positions are admitted.
    fn count(&self, len: usize) -> u64 {
        (0..len.div_ceil(64))
            .into_par_iter()
            .with_min_len(1024)
            .map(|w| u64::from((self.word(w) & in_range(w, len)).count_ones()))
            .sum()
    }
}

/// `u` spread over its length: its values, and a bit per position saying it is stored.
struct DenseVector<T> {
    values: Vec<T>,
    stored: Vec<std::sync::atomic::AtomicU64>,
}

impl<T: Scalar> DenseVector<T> {
    /// A frontier of this many entries or more is spread in parallel.
    const PARALLEL_FROM: usize = 1 << 16;

    fn new(u: &SparseVector<T>) -> Self {
        use std::sync::atomic::{AtomicU64, Ordering};
        let mut values = vec![T::zero(); u.size()];
        let mut stored: Vec<AtomicU64> = (0..u.size().div_ceil(64))
            .map(|_| AtomicU64::new(0))
            .collect();
        let (ks, vs) = (u.indices(), u.values());
        if ks.len() < Self::PARALLEL_FROM {
            for (&k, &v) in ks.iter().zip(vs) {
                values[k as usize] = v;
                *stored[k as usize / 64].get_mut() |= 1 << (k % 64);
            }
        } else {
            let slots = DenseSlots(values.as_mut_ptr().cast::<std::mem::MaybeUninit<T>>());
            ks.par_chunks(MIN_ENTRIES_PER_TASK)
                .zip(vs.par_chunks(MIN_ENTRIES_PER_TASK))
                .for_each(|(ks, vs)| {
                    for (&k, &v) in ks.iter().zip(vs) {
                        // SAFETY: `k < size` (a sparse vector's indices are below its
                        // size) and distinct, so each slot is written by one thread.
                        unsafe { (*slots.at(k as usize)).write(v) };
                        stored[k as usize / 64].fetch_or(1 << (k % 64), Ordering::Relaxed);
                    }
                });
        }
        DenseVector { values, stored }
    }

    #[inline]
    fn get(&self, k: u32) -> Option<T> {
        let word = self.stored[k as usize / 64].load(std::sync::atomic::Ordering::Relaxed);
        (word >> (k % 64) & 1 == 1).then(|| self.values[k as usize])
    }
}

/// `⊕ₖ x(k) ⊗ u(k)` over the stored `k` of both (`u_first`: `u(k) ⊗ x(k)`), `None` where no
/// product lands; an "any" semiring (`any`) stops at the first.
#[inline]
fn dot<T: Scalar, S: Semiring<T>>(
    ks: &[u32],
    xs: &[T],
    u: &DenseVector<T>,
    u_first: bool,
    any: bool,
) -> Option<T::Acc> {
    let mut sum: Option<T::Acc> = None;
    for (&k, &x) in ks.iter().zip(xs) {
        let Some(uk) = u.get(k) else { continue };
        let product = if u_first {
            S::mul_at(uk, x, k)
        } else {
            S::mul_at(x, uk, k)
        };
        sum = Some(sum.map_or(product, |s| S::add(s, product)));
        if any {
            break;
        }
    }
    sum
}

/// Each admitted position `j` whose row of `rows` (A for mxv, Aᵀ for a pulled vxm) meets
/// `u`, with its value: the pull of both products. A mask that lists its positions (not
/// complemented, not a bitmap) is visited position by position; otherwise the admitted
/// positions are read 64 at a time from the mask's bits, each position found is written
/// into a dense array and marked, and the marks are read back in order
/// ([`positions_in_order`]), every pass parallel.
fn pull<T: Scalar, S: Semiring<T>>(
    rows: &Csr<T>,
    u: &SparseVector<T>,
    mask: Option<&Mask>,
    u_first: bool,
    any: bool,
) -> Result<SparseVector<T>> {
    use std::sync::atomic::{AtomicU64, Ordering};
    /// Words of positions per rayon task.
    const WORDS_PER_TASK: usize = 16;
    let len = rows.nrows();
    let dense = DenseVector::new(u);
    if let Some(m) = mask.filter(|m| !m.is_complemented() && m.bitmap().is_none()) {
        let (indices, values): (Vec<u32>, Vec<T>) = m
            .row(0)
            .par_iter()
            .with_min_len(MIN_ENTRIES_PER_TASK / 8)
            .filter_map(|&j| {
                let (ks, xs) = rows.row(j as usize);
                dot::<T, S>(ks, xs, &dense, u_first, any).map(|s| (j, T::from_acc(s)))
            })
            .unzip();
        return SparseVector::try_new(len, indices, values);
    }
    let admitted = Admitted::new(mask, len);
    let found: Vec<AtomicU64> = (0..len.div_ceil(64)).map(|_| AtomicU64::new(0)).collect();
    let mut out: Vec<T> = crate::memory::reserved(len, "a pulled product's values")?;
    let slots = DenseSlots(out.spare_capacity_mut().as_mut_ptr());
    found
        .par_chunks(WORDS_PER_TASK)
        .enumerate()
        .for_each(|(task, words)| {
            for (at, word) in words.iter().enumerate() {
                let w = task * WORDS_PER_TASK + at;
                let mut todo = admitted.as_ref().map_or(u64::MAX, |a| a.word(w)) & in_range(w, len);
                let mut hits = 0u64;
                while todo != 0 {
                    let bit = todo.trailing_zeros();
                    todo &= todo - 1;
                    let j = w * 64 + bit as usize;
                    let (ks, xs) = rows.row(j);
                    if let Some(s) = dot::<T, S>(ks, xs, &dense, u_first, any) {
                        hits |= 1 << bit;
                        // SAFETY: `j < len`, inside the allocation; word `w` (so slot `j`)
                        // belongs to this task alone.
                        unsafe { (*slots.at(j)).write(T::from_acc(s)) };
                    }
                }
                word.store(hits, Ordering::Relaxed);
            }
        });
    positions_in_order(len, &found, &out.spare_capacity_mut()[..len])
}

/// The bits of word `w` that are positions below `len`.
#[inline]
fn in_range(w: usize, len: usize) -> u64 {
    match len.saturating_sub(w * 64) {
        0 => 0,
        left if left >= 64 => u64::MAX,
        left => (1u64 << left) - 1,
    }
}

/// `wᵀ = uᵀ ⊕.⊗ A` by scattering each `u(k)` along row `k` of A: per block of the frontier,
/// its admitted products sorted by column and summed; then the blocks' sums, in frontier
/// order, sorted by column and summed again.
fn push<T: Scalar, S: Semiring<T>>(
    a: &Csr<T>,
    u: &SparseVector<T>,
    mask: Option<&Mask>,
) -> Result<SparseVector<T>> {
    let admitted = Admitted::new(mask, a.ncols());
    let sum_by_column = |products: &mut Vec<(u32, T::Acc)>| -> Vec<(u32, T::Acc)> {
        // Stable: each column's products are summed in frontier order.
        products.sort_by_key(|p| p.0);
        let mut sums: Vec<(u32, T::Acc)> = Vec::with_capacity(products.len());
        for &(j, p) in products.iter() {
            match sums.last_mut() {
                Some(last) if last.0 == j => last.1 = S::add(last.1, p),
                _ => sums.push((j, p)),
            }
        }
        sums
    };
    let frontier: Vec<(u32, T)> = u
        .indices()
        .iter()
        .copied()
        .zip(u.values().iter().copied())
        .collect();
    let push_block = |block: &[(u32, T)]| {
        let mut products = Vec::new();
        for &(k, uk) in block {
            let (js, xs) = a.row(k as usize);
            products.extend(
                js.iter()
                    .zip(xs)
                    .filter(|(&j, _)| admitted.as_ref().is_none_or(|m| m.admits(j)))
                    .map(|(&j, &x)| (j, S::mul_at(uk, x, k))),
            );
        }
        sum_by_column(&mut products)
    };
    const BLOCK: usize = MIN_ENTRIES_PER_TASK / 16;
    // A frontier of one block is pushed on the calling thread (see `push_any`).
    let sums = if frontier.len() <= BLOCK {
        push_block(&frontier)
    } else {
        let per_block: Vec<Vec<(u32, T::Acc)>> =
            frontier.par_chunks(BLOCK).map(push_block).collect();
        let mut all: Vec<(u32, T::Acc)> = per_block.into_iter().flatten().collect();
        sum_by_column(&mut all)
    };
    let (indices, values) = sums.into_iter().map(|(j, s)| (j, T::from_acc(s))).unzip();
    SparseVector::try_new(a.ncols(), indices, values)
}

/// Consecutive ranges of the frontier `ks` (rows of `a`) of about `MIN_ENTRIES_PER_TASK`
/// products each: a task's share of a push, however unevenly the rows are filled; and the
/// products of the whole frontier.
fn frontier_blocks<T: Scalar>(a: &Csr<T>, ks: &[u32]) -> (Vec<std::ops::Range<usize>>, u64) {
    let mut blocks = Vec::new();
    let (mut start, mut products, mut total) = (0, 0u64, 0u64);
    for (at, &k) in ks.iter().enumerate() {
        products += a.row_nnz(k as usize);
        if products >= MIN_ENTRIES_PER_TASK as u64 {
            blocks.push(start..at + 1);
            total += products;
            (start, products) = (at + 1, 0);
        }
    }
    if start < ks.len() {
        blocks.push(start..ks.len());
    }
    (blocks, total + products)
}

/// The push of an "any" semiring: each admitted position keeps the first product to claim it
/// (one atomic bit per position), so no product is made for a position already claimed.
///
/// A frontier of one task sorts its products on the calling thread, keeping each position's
/// first. A larger push lists the positions each task claims and sorts them. A large one (a
/// BFS level reaching a good share of the graph) writes each claimed position's value into a
/// dense array of `w`'s length instead, and reads the positions back in order from the claim
/// bits: no list to concatenate, sort and split on one thread, every pass parallel.
fn push_any<T: Scalar, S: Semiring<T>>(
    a: &Csr<T>,
    u: &SparseVector<T>,
    mask: Option<&Mask>,
) -> Result<SparseVector<T>> {
    use std::sync::atomic::{AtomicU64, Ordering};
    let admitted = Admitted::new(mask, a.ncols());
    let (ks, us) = (u.indices(), u.values());
    let (blocks, products) = frontier_blocks(a, ks);
    if blocks.len() <= 1 {
        // A frontier of one task (a BFS level of a road graph, say) is pushed on the calling
        // thread, and its few products sorted rather than claimed: no claim bits over all of
        // `w` to allocate, so a level costs what its frontier reaches. The stable sort keeps
        // each position's first product, as a claim would.
        let mut reached: Vec<(u32, T)> = Vec::new();
        for (&k, &uk) in ks.iter().zip(us) {
            let (js, xs) = a.row(k as usize);
            for (&j, &x) in js.iter().zip(xs) {
                if admitted.as_ref().is_none_or(|m| m.admits(j)) {
                    reached.push((j, T::from_acc(S::mul_at(uk, x, k))));
                }
            }
        }
        reached.sort_by_key(|p| p.0);
        reached.dedup_by_key(|p| p.0);
        let (indices, values) = reached.into_iter().unzip();
        return SparseVector::try_new(a.ncols(), indices, values);
    }
    let claimed: Vec<AtomicU64> = (0..a.ncols().div_ceil(64))
        .map(|_| AtomicU64::new(0))
        .collect();
    // Calls `found(j, value)` for each position this block claims first.
    let claim_block = |block: std::ops::Range<usize>, found: &mut dyn FnMut(u32, T)| {
        for (&k, &uk) in ks[block.clone()].iter().zip(&us[block]) {
            let (js, xs) = a.row(k as usize);
            for (&j, &x) in js.iter().zip(xs) {
                if admitted.as_ref().is_some_and(|m| !m.admits(j)) {
                    continue;
                }
                let (word, bit) = (&claimed[j as usize / 64], 1u64 << (j % 64));
                // Relaxed: the bits only decide who keeps a position; the results are
                // read after the join.
                if word.load(Ordering::Relaxed) & bit == 0
                    && word.fetch_or(bit, Ordering::Relaxed) & bit == 0
                {
                    found(j, T::from_acc(S::mul_at(uk, x, k)));
                }
            }
        }
    };
    let listed = |block: std::ops::Range<usize>| {
        let mut found = Vec::new();
        claim_block(block, &mut |j, v| found.push((j, v)));
        found
    };
    if products >= (a.ncols() / DENSE_PUSH_COLUMNS_PER_PRODUCT) as u64 {
        let mut dense: Vec<T> = crate::memory::reserved(a.ncols(), "a push's values")?;
        let slots = DenseSlots(dense.spare_capacity_mut().as_mut_ptr());
        blocks.into_par_iter().for_each(|block| {
            // SAFETY: `j < ncols`, inside the allocation; the claim bit went to this call
            // alone (fetch_or returned it clear), so no other thread writes slot `j`.
            claim_block(block, &mut |j, v| unsafe {
                (*slots.at(j as usize)).write(v);
            });
        });
        return positions_in_order(
            a.ncols(),
            &claimed,
            &dense.spare_capacity_mut()[..a.ncols()],
        );
    }
    let found: Vec<Vec<(u32, T)>> = blocks.into_par_iter().map(listed).collect();
    let mut reached = found.concat();
    if reached.len() < MIN_ENTRIES_PER_TASK {
        reached.sort_unstable_by_key(|p| p.0);
    } else {
        reached.par_sort_unstable_by_key(|p| p.0);
    }
    let (indices, values) = reached.into_iter().unzip();
    SparseVector::try_new(a.ncols(), indices, values)
}

/// A push whose frontier makes at least one product per this many columns of `w` writes its
/// values densely ([`push_any`]): it then reaches enough positions that a pass over the
/// claim bits and a page of the dense array per few positions cost less than sorting them.
const DENSE_PUSH_COLUMNS_PER_PRODUCT: usize = 8;

/// The slots of a dense array that a push's threads write, each slot by the one thread that
/// claimed its position.
#[derive(Clone, Copy)]
struct DenseSlots<T>(*mut std::mem::MaybeUninit<T>);
// SAFETY: threads write disjoint slots (one claim per position) and the array is read only
// after they are joined.
unsafe impl<T: Send> Send for DenseSlots<T> {}
unsafe impl<T: Send> Sync for DenseSlots<T> {}

impl<T> DenseSlots<T> {
    /// Slot `j` (a method, so that closures capture the whole `Sync` wrapper).
    fn at(self, j: usize) -> *mut std::mem::MaybeUninit<T> {
        self.0.wrapping_add(j)
    }
}

/// `w` from the positions set in `claimed` (a bit each, `len` of them) and their values in
/// `dense`, written for exactly those positions: in parallel over pieces of the bits, each
/// piece's count first, then its positions and values at their place.
fn positions_in_order<T: Scalar>(
    len: usize,
    claimed: &[std::sync::atomic::AtomicU64],
    dense: &[std::mem::MaybeUninit<T>],
) -> Result<SparseVector<T>> {
    use std::sync::atomic::Ordering;
    /// Words of claim bits per piece.
    const WORDS: usize = 1024;
    let word = |w: &std::sync::atomic::AtomicU64| w.load(Ordering::Relaxed);
    let counts: Vec<usize> = claimed
        .par_chunks(WORDS)
        .map(|piece| piece.iter().map(|w| word(w).count_ones() as usize).sum())
        .collect();
    let mut starts = Vec::with_capacity(counts.len());
    let mut total = 0usize;
    for &c in &counts {
        starts.push(total..total + c);
        total += c;
    }
    let mut indices: Vec<u32> = Vec::with_capacity(total);
    let mut values: Vec<T> = Vec::with_capacity(total);
    let index_parts = crate::plan::split_mut(&mut indices.spare_capacity_mut()[..total], &starts);
    let value_parts = crate::plan::split_mut(&mut values.spare_capacity_mut()[..total], &starts);
    claimed
        .par_chunks(WORDS)
        .enumerate()
        .zip(index_parts)
        .zip(value_parts)
        .for_each(|(((p, piece), index_part), value_part)| {
            let mut at = 0;
            for (w, bits) in piece.iter().enumerate() {
                let mut bits = word(bits);
                while bits != 0 {
                    let j = (p * WORDS + w) * 64 + bits.trailing_zeros() as usize;
                    bits &= bits - 1;
                    index_part[at].write(j as u32);
                    // SAFETY: the push wrote the value of every position whose bit is set.
                    value_part[at].write(unsafe { dense[j].assume_init() });
                    at += 1;
                }
            }
        });
    // SAFETY: each piece wrote as many positions as it counted, at its place.
    unsafe {
        indices.set_len(total);
        values.set_len(total);
    }
    SparseVector::try_new(len, indices, values)
}

/// The product `kind` of A and `u` over semiring `S`, masked by `mask`; vxm's direction
/// `direction`, or chosen by [`Direction::for_frontier`].
pub(crate) fn product<T: Scalar, S: Semiring<T>>(
    kind: VectorProductKind,
    a: &Csr<T>,
    u: &SparseVector<T>,
    mask: Option<&Mask>,
    any: bool,
    direction: Option<Direction>,
) -> Result<SparseVector<T>> {
    match kind {
        VectorProductKind::Mxv => pull::<T, S>(a, u, mask, false, any),
        VectorProductKind::Vxm => {
            let (direction, products) = match direction {
                Some(d) => (d, None),
                None if any => Direction::for_any_frontier(a, u, mask),
                None => {
                    let products = frontier_products(a, u);
                    (Direction::for_frontier(products, a.nnz()), Some(products))
                }
            };
            let _span = tracing::debug_span!("vxm", ?direction, frontier = u.nnz()).entered();
            match direction {
                Direction::Push if any => push_any::<T, S>(a, u, mask),
                Direction::Push => push::<T, S>(a, u, mask),
                Direction::Pull if any => {
                    let products = products.unwrap_or_else(|| frontier_products(a, u));
                    match a.transpose_if_worth_it(products)? {
                        Some(at) => pull::<T, S>(at, u, mask, true, any),
                        // Until the pushes that wanted a pull add up to a transpose's cost:
                        // an "any" push does no more than its products.
                        None => push_any::<T, S>(a, u, mask),
                    }
                }
                Direction::Pull => pull::<T, S>(a.transpose_kept()?, u, mask, true, any),
            }
        }
    }
}

/// The products of the frontier `u`'s rows of A (`Σ |A(k, :)|` over its stored `k`).
fn frontier_products<T: Scalar>(a: &Csr<T>, u: &SparseVector<T>) -> u64 {
    let ks = u.indices();
    if ks.len() < MIN_ENTRIES_PER_TASK {
        return ks.iter().map(|&k| a.row_nnz(k as usize)).sum();
    }
    ks.par_iter()
        .with_min_len(MIN_ENTRIES_PER_TASK)
        .map(|&k| a.row_nnz(k as usize))
        .sum()
}

/// [`product`] over the semiring `options` names (already validated over `T`).
pub(crate) fn product_with_options<T: Scalar>(
    kind: VectorProductKind,
    a: &Csr<T>,
    u: &SparseVector<T>,
    options: &VectorProductOptions,
    run: &RunControl,
    direction: Option<Direction>,
) -> Result<SparseVector<T>> {
    struct Visit<'m, T> {
        kind: VectorProductKind,
        a: &'m Csr<T>,
        u: &'m SparseVector<T>,
        mask: Option<&'m Mask>,
        any: bool,
        direction: Option<Direction>,
    }
    impl<T: Scalar> SemiringVisitor<T> for Visit<'_, T> {
        type Output = Result<SparseVector<T>>;
        fn visit<S: Semiring<T>>(self) -> Self::Output {
            product::<T, S>(
                self.kind,
                self.a,
                self.u,
                self.mask,
                self.any,
                self.direction,
            )
        }
    }
    run.checkpoint()?;
    let _span = tracing::debug_span!(
        "vector_product",
        %kind,
        semiring = %options.semiring,
        nnz_a = a.nnz(),
        nnz_u = u.nnz()
    )
    .entered();
    let w = with_semiring(
        options.semiring,
        Visit {
            kind,
            a,
            u,
            mask: options.mask.as_ref(),
            // "any" keeps one product of each position: the first found will do.
            any: matches!(
                options.semiring,
                SemiringKind::AnyPair | SemiringKind::AnySecondI
            ),
            direction,
        },
    )??;
    run.checkpoint()?;
    Ok(w)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hetsparse_core::reference;

    /// Push and pull give the reference's result, masked or not (a listed mask, one made
    /// from a bitmap, each complemented or not), over a short frontier and over a frontier
    /// and a length long enough that every pass splits into several tasks.
    #[test]
    fn push_and_pull_agree_with_the_reference() {
        let a = hetsparse_core::generate::uniform::<f64>(200, 150, 6, 7);
        let u =
            SparseVector::try_new(200, vec![3, 50, 51, 199], vec![1.0, -2.0, 0.5, 3.0]).unwrap();
        push_and_pull_match(&a, &u, 3);
        let n = 140_000;
        let a = hetsparse_core::generate::uniform::<f64>(n, n - 77, 4, 11);
        let ks: Vec<u32> = (0..n as u32).step_by(2).collect();
        let vs: Vec<f64> = ks.iter().map(|&k| f64::from(k % 13) - 6.0).collect();
        push_and_pull_match(&a, &SparseVector::try_new(n, ks, vs).unwrap(), 5);
    }

    fn push_and_pull_match(a: &Csr<f64>, u: &SparseVector<f64>, mask_step: usize) {
        use hetsparse_core::MaskKind;
        let len = a.ncols();
        let listed: Vec<u32> = (0..len as u32).step_by(mask_step).collect();
        let mask_vector =
            SparseVector::try_new(len, listed.clone(), vec![1.0; listed.len()]).unwrap();
        let mut bits = vec![0u64; len.div_ceil(64)];
        for &j in &listed {
            bits[j as usize / 64] |= 1 << (j % 64);
        }
        let bitmap = Mask::from_bitmap(len, bits, MaskKind::Structural).unwrap();
        let mut bytes = vec![0u8; len];
        for &j in &listed {
            bytes[j as usize] = 1 + (j % 3) as u8;
        }
        let bytes = Mask::from_bytes(len, bytes.into(), MaskKind::Valued).unwrap();
        let run = RunControl::new();
        for mask in [
            None,
            Some(mask_vector.structural_mask()),
            Some(mask_vector.structural_mask().complemented()),
            Some(bitmap.clone()),
            Some(bitmap.complemented()),
            Some(bytes.clone()),
            Some(bytes.complemented()),
        ] {
            for semiring in [SemiringKind::PlusTimes, SemiringKind::MinPlus] {
                let mut options = VectorProductOptions::new().with_semiring(semiring);
                options.mask = mask.clone();
                let want =
                    reference::vector_product_with_options(VectorProductKind::Vxm, a, u, &options)
                        .unwrap();
                for direction in [Direction::Push, Direction::Pull] {
                    let got = product_with_options(
                        VectorProductKind::Vxm,
                        a,
                        u,
                        &options,
                        &run,
                        Some(direction),
                    )
                    .unwrap();
                    assert_eq!(got.indices(), want.indices(), "{direction:?} {semiring}");
                    for (x, y) in got.values().iter().zip(want.values()) {
                        assert!((x - y).abs() <= 1e-12 * y.abs().max(1.0), "{x} vs {y}");
                    }
                }
            }
            // mxv pulls over A's rows, masked the same way (a mask of A's row count).
            if len == a.nrows() {
                let x = SparseVector::try_new(
                    len,
                    u.indices()
                        .iter()
                        .copied()
                        .filter(|&k| (k as usize) < len)
                        .collect(),
                    u.values()
                        .iter()
                        .zip(u.indices())
                        .filter(|(_, &k)| (k as usize) < len)
                        .map(|(&v, _)| v)
                        .collect(),
                )
                .unwrap();
                let mut options = VectorProductOptions::new();
                options.mask = mask.clone();
                let want =
                    reference::vector_product_with_options(VectorProductKind::Mxv, a, &x, &options)
                        .unwrap();
                let got = product_with_options(VectorProductKind::Mxv, a, &x, &options, &run, None)
                    .unwrap();
                assert_eq!(got.indices(), want.indices(), "mxv {mask:?}");
            }
        }
        assert_eq!(Direction::for_frontier(10, 1000), Direction::Push);
        assert_eq!(Direction::for_frontier(500, 1000), Direction::Pull);
    }

    /// An "any" vxm pulls through the transpose the matrix keeps — A itself where symmetric,
    /// a built one where not — and reaches the reference's positions with valid products;
    /// the pull waits for the matrix's second call; a small frontier, or a large one whose
    /// admitted positions are few against its products, is decided without error.
    #[test]
    fn any_pull_reaches_the_references_positions_through_the_kept_transpose() {
        use hetsparse_core::MaskKind;
        let n = 30_000;
        let directed = hetsparse_core::generate::uniform::<f64>(n, n, 6, 5);
        let symmetric = {
            let mut coo = hetsparse_core::Coo::new(n, n).unwrap();
            for i in 0..n {
                for &j in directed.row(i).0 {
                    coo.try_push(i, j as usize, 1.0).unwrap();
                    coo.try_push(j as usize, i, 1.0).unwrap();
                }
            }
            let s = coo.to_csr().unwrap();
            let ones = vec![1.0; s.nnz() as usize];
            s.with_values(ones).unwrap()
        };
        let frontier: Vec<u32> = (0..n as u32).step_by(4).collect();
        let u = SparseVector::try_new(n, frontier.clone(), vec![1.0; frontier.len()]).unwrap();
        let mut bits = vec![0u64; n.div_ceil(64)];
        for j in (0..n).step_by(3) {
            bits[j / 64] |= 1 << (j % 64);
        }
        let visited = Mask::from_bitmap(n, bits, MaskKind::Structural).unwrap();
        let run = RunControl::new();
        for a in [&directed, &symmetric] {
            let mut options = VectorProductOptions::new().with_semiring(SemiringKind::AnySecondI);
            options.mask = Some(visited.clone().complemented());
            let want =
                reference::vector_product_with_options(VectorProductKind::Vxm, a, &u, &options)
                    .unwrap();
            assert_eq!(
                Direction::for_any_frontier(a, &u, options.mask.as_ref()).0,
                Direction::Pull
            );
            assert!(
                a.clone()
                    .transpose_if_worth_it(a.nnz() - 1)
                    .unwrap()
                    .is_none(),
                "less work than the matrix's entries"
            );
            for _call in 0..2 {
                let got = product_with_options(VectorProductKind::Vxm, a, &u, &options, &run, None)
                    .unwrap();
                assert_eq!(got.indices(), want.indices());
                for (&j, &k) in got.indices().iter().zip(got.values()) {
                    let k = k as u32;
                    assert!(
                        k % 4 == 0 && a.get(k as usize, j as usize).is_some(),
                        "{k} → {j}"
                    );
                }
            }
            let kept = a.transpose_if_worth_it(0).unwrap().expect("kept by then");
            assert_eq!(std::ptr::eq(kept, a), std::ptr::eq(a, &symmetric));
        }
        // A frontier of a few positions pushes without looking at the mask.
        let few = SparseVector::try_new(n, vec![7, 9], vec![1.0, 1.0]).unwrap();
        assert_eq!(
            Direction::for_any_frontier(&directed, &few, None).0,
            Direction::Push
        );
        // A large frontier whose admitted positions are most of the matrix's pushes while
        // its products are under their share, and pulls once it holds most positions.
        let wide =
            SparseVector::try_new(n, (0..n as u32).step_by(40).collect(), vec![1.0; 750]).unwrap();
        assert_eq!(
            Direction::for_any_frontier(&directed, &wide, None).0,
            Direction::Push
        );
        let most =
            SparseVector::try_new(n, (0..n as u32).step_by(2).collect(), vec![1.0; 15000]).unwrap();
        assert_eq!(
            Direction::for_any_frontier(&directed, &most, None).0,
            Direction::Pull
        );
    }

    /// An "any" push (claiming each position once) reaches the reference's positions, each
    /// with a valid product, under no mask and under a mask listed or made from a bitmap or
    /// bytes, complemented or not: a push of one task (sorted on the calling thread), one of
    /// several tasks (claimed, listed and sorted) and a large one (written densely, read back
    /// from the claim bits in parallel).
    #[test]
    fn any_push_reaches_the_references_positions_with_valid_products() {
        for (n, step) in [(300, 7), (200_000, 100), (20_000, 3)] {
            any_push_matches(n, step);
        }
    }

    fn any_push_matches(n: usize, step: usize) {
        use hetsparse_core::MaskKind;
        let a = hetsparse_core::generate::uniform::<f64>(n, n, 8, 3);
        let frontier: Vec<u32> = (0..n as u32).step_by(step).collect();
        let u = SparseVector::try_new(n, frontier.clone(), vec![1.0; frontier.len()]).unwrap();
        let visited: Vec<u32> = (0..n as u32).step_by(5).collect();
        let listed = SparseVector::try_new(n, visited.clone(), vec![1.0; visited.len()])
            .unwrap()
            .structural_mask();
        let mut bits = vec![0u64; n.div_ceil(64)];
        for &j in &visited {
            bits[j as usize / 64] |= 1 << (j % 64);
        }
        let bitmap = Mask::from_bitmap(n, bits, MaskKind::Structural).unwrap();
        let mut bytes = vec![0u8; n];
        for &j in &visited {
            bytes[j as usize] = 7;
        }
        let bytes = Mask::from_bytes(n, bytes.into(), MaskKind::Valued).unwrap();
        let run = RunControl::new();
        for mask in [
            None,
            Some(listed.clone()),
            Some(listed.complemented()),
            Some(bitmap.clone()),
            Some(bitmap.complemented()),
            Some(bytes.clone()),
            Some(bytes.complemented()),
        ] {
            let mut options = VectorProductOptions::new().with_semiring(SemiringKind::AnySecondI);
            options.mask = mask.clone();
            let want =
                reference::vector_product_with_options(VectorProductKind::Vxm, &a, &u, &options)
                    .unwrap();
            let push = Some(Direction::Push);
            let got =
                product_with_options(VectorProductKind::Vxm, &a, &u, &options, &run, push).unwrap();
            assert!(!want.indices().is_empty());
            assert_eq!(got.indices(), want.indices(), "{mask:?}");
            for (&j, &k) in got.indices().iter().zip(got.values()) {
                let k = k as u32;
                assert!(
                    frontier.contains(&k) && a.row(k as usize).0.contains(&j),
                    "{k} → {j}"
                );
            }
        }
    }
}
