//! Per-thread scratch memory of the SpGEMM kernels, reused across rows and ranges.
//!
//! Each rayon thread owns one [`Scratch`] for the duration of a product: accumulators grow to
//! the largest row they have seen and are never freed between rows. Every row leaves the
//! column set empty and the dense values zero, resetting only what it touched, so no row
//! allocates or clears more than it used.

use std::sync::Mutex;

use hetsparse_core::Accumulator;

/// Marks an empty hash slot: column indices are below `u32::MAX` (dimensions are at most
/// `u32::MAX`).
pub(super) const EMPTY: u32 = u32::MAX;

/// The scratch of one thread.
pub(crate) struct Scratch<A> {
    /// Which columns (of the current window) the current row has touched.
    pub set: ColumnSet,
    /// Dense accumulator, indexed like `set`. It holds the semiring's zero between rows
    /// (kernels reset each slot as they read it out), so products are always added, with no
    /// branch on whether a column is new. One product uses one semiring, so the zero
    /// it is grown with never changes.
    pub dense: Vec<A>,
    /// Open-addressing hash accumulator: keys ([`EMPTY`] when free) and values.
    pub keys: Vec<u32>,
    pub values: Vec<A>,
    /// Sort accumulator of short rows, and Column-Row expansions: (column, product) pairs.
    pub pairs: Vec<(u32, A)>,
    /// Positions inside the rows of B, for walking them panel by panel.
    pub cursors: Vec<usize>,
    /// Column indices, for distinct-column lists.
    pub columns: Vec<u32>,
}

impl<A: Accumulator> Scratch<A> {
    fn new() -> Self {
        Scratch {
            set: ColumnSet::default(),
            dense: Vec::new(),
            keys: Vec::new(),
            values: Vec::new(),
            pairs: Vec::new(),
            cursors: Vec::new(),
            columns: Vec::new(),
        }
    }

    /// The column set over `width` columns and the dense accumulator's first `width` slots
    /// (empty unless `values`), which hold `zero` wherever the set is empty.
    #[inline]
    pub fn dense_row(&mut self, width: usize, values: bool, zero: A) -> (Columns<'_>, &mut [A]) {
        let dense = if values {
            if self.dense.len() < width {
                self.grow_dense(width, zero);
            }
            &mut self.dense[..width]
        } else {
            &mut []
        };
        (self.set.cover(width), dense)
    }

    /// Room for `width` dense values (`zero`), out of the per-row path.
    #[cold]
    fn grow_dense(&mut self, width: usize, zero: A) {
        self.dense.resize(width, zero);
    }

    /// Empties a hash table of at least `2 * entries` slots (a power of two) and returns its
    /// mask.
    pub fn hash_table(&mut self, entries: usize) -> usize {
        let capacity = (2 * entries).max(16).next_power_of_two();
        if self.keys.len() < capacity {
            self.keys.resize(capacity, EMPTY);
            self.values.resize(capacity, A::ZERO);
        }
        self.keys[..capacity].fill(EMPTY);
        capacity - 1
    }
}

/// A set of columns as a two-level bitmap: bit `j` of `words` holds column `j`, and bit `w` of
/// `summary` says that word `w` is not zero. Inserting costs OR operations and no branch on the
/// data; listing the set in order costs `O(width / 4096 + words touched + entries)`, so a row of C
/// comes out sorted without a comparison sort and without scanning the whole width. Every row
/// leaves the set empty.
#[derive(Default)]
pub(crate) struct ColumnSet {
    words: Vec<u64>,
    summary: Vec<u64>,
}

impl ColumnSet {
    /// The (empty) set over columns `0..width`, growing it with zeros when needed.
    #[inline]
    pub fn cover(&mut self, width: usize) -> Columns<'_> {
        let words = width.div_ceil(64);
        if self.words.len() < words {
            self.grow(words);
        }
        Columns {
            words: &mut self.words[..words],
            summary: &mut self.summary[..words.div_ceil(64)],
        }
    }

    /// Room for `words` words of bits (zero), out of the per-row path.
    #[cold]
    fn grow(&mut self, words: usize) {
        self.words.resize(words, 0);
        self.summary.resize(words.div_ceil(64), 0);
    }
}

/// A [`ColumnSet`] over one window, borrowed as plain slices so that the kernels' loops keep
/// them in registers.
pub(crate) struct Columns<'s> {
    words: &'s mut [u64],
    summary: &'s mut [u64],
}

impl Columns<'_> {
    /// Adds the columns `c - offset` for `c` in `sorted` (increasing, as in a row of B), a
    /// word at a time.
    ///
    /// A row of B often holds runs of nearby columns (stencils, bands, grids). Setting their
    /// bits one by one would chain every product on the previous one's store to the same
    /// word; OR-ing each run in a register first leaves one read-modify-write per word the
    /// row touches, and likewise one per summary word rather than one per word.
    #[inline(always)]
    pub fn insert_sorted(&mut self, sorted: &[u32], offset: u32) {
        self.insert_sorted_each(sorted, sorted, offset, |_, _| {});
    }

    /// [`Columns::insert_sorted`] over the columns `c` of `sorted` that have an entry `v` in
    /// `payload` (of the same length), calling `each(c - offset, v)` on the way: one walk of
    /// a row of B both accumulates and marks it.
    #[inline(always)]
    pub fn insert_sorted_each<V: Copy>(
        &mut self,
        sorted: &[u32],
        payload: &[V],
        offset: u32,
        mut each: impl FnMut(usize, V),
    ) {
        let mut entries = sorted.iter().zip(payload);
        let Some((&first, &v)) = entries.next() else {
            return;
        };
        let j = (first - offset) as usize;
        each(j, v);
        let (mut w, mut bits) = (j >> 6, 1u64 << (j & 63));
        let (mut s, mut marks) = (w >> 6, 0u64);
        for (&c, &v) in entries {
            let j = (c - offset) as usize;
            each(j, v);
            if j >> 6 != w {
                self.words[w] |= bits;
                marks |= 1u64 << (w & 63);
                (w, bits) = (j >> 6, 0);
                if w >> 6 != s {
                    self.summary[s] |= marks;
                    (s, marks) = (w >> 6, 0);
                }
            }
            bits |= 1u64 << (j & 63);
        }
        self.words[w] |= bits;
        self.summary[s] |= marks | 1u64 << (w & 63);
    }

    /// Adds column `j`, testing it first: for rows where most products land on columns
    /// already in the set, a well-predicted branch that skips the store is cheaper than
    /// always setting the bit.
    #[inline(always)]
    pub fn insert_checked(&mut self, j: usize) {
        let (w, bit) = (j >> 6, 1u64 << (j & 63));
        if self.words[w] & bit == 0 {
            self.or_word(w, bit);
        }
    }

    /// Sets `bits` in word `w`.
    #[inline(always)]
    fn or_word(&mut self, w: usize, bits: u64) {
        self.words[w] |= bits;
        self.summary[w >> 6] |= 1u64 << (w & 63);
    }

    /// Adds column `j`, which the caller knows to be new (as a hash table does).
    #[inline(always)]
    pub fn insert_new(&mut self, j: usize) {
        self.or_word(j >> 6, 1u64 << (j & 63));
    }

    /// Calls `f` on every column of the set in increasing order, emptying it.
    #[inline(always)]
    pub fn drain(&mut self, mut f: impl FnMut(usize)) {
        for (s, summary) in self.summary.iter_mut().enumerate() {
            let mut bits = std::mem::take(summary);
            while bits != 0 {
                let w = s * 64 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                let mut word = std::mem::take(&mut self.words[w]);
                while word != 0 {
                    f(w * 64 + word.trailing_zeros() as usize);
                    word &= word - 1;
                }
            }
        }
    }

    /// Empties the set without listing it; returns how many columns it held (counted once
    /// per word here, not per insertion).
    pub fn clear(&mut self) -> usize {
        let mut count = 0;
        for (s, summary) in self.summary.iter_mut().enumerate() {
            let mut bits = std::mem::take(summary);
            while bits != 0 {
                let word = std::mem::take(&mut self.words[s * 64 + bits.trailing_zeros() as usize]);
                count += word.count_ones() as usize;
                bits &= bits - 1;
            }
        }
        count
    }
}

/// Spreads column indices over a hash table: Fibonacci hashing keeps consecutive columns
/// (common in banded rows) apart.
#[inline(always)]
pub(super) fn hash(j: u32, mask: usize) -> usize {
    ((u64::from(j).wrapping_mul(0x9E37_79B9_7F4A_7C15)) >> 32) as usize & mask
}

/// One [`Scratch`] per thread of the current rayon pool.
pub(crate) struct ScratchPool<A> {
    slots: Vec<Mutex<Scratch<A>>>,
}

impl<A: Accumulator> ScratchPool<A> {
    /// Scratch for every thread of the current pool (allocated lazily by the kernels).
    pub fn new() -> Self {
        ScratchPool {
            slots: (0..rayon::current_num_threads().max(1))
                .map(|_| Mutex::new(Scratch::new()))
                .collect(),
        }
    }

    /// Runs `f` with the calling thread's scratch. Kernels do not call into rayon while they
    /// hold it, so the lock is never contended.
    pub fn with<R>(&self, f: impl FnOnce(&mut Scratch<A>) -> R) -> R {
        let index = rayon::current_thread_index().unwrap_or(0) % self.slots.len();
        let mut scratch = self.slots[index]
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        f(&mut scratch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn column_sets_list_in_order_and_end_empty() {
        let mut set = ColumnSet::default();
        let mut columns = set.cover(10_000);
        // Columns offset by 10, as a row of B's columns relative to a window.
        columns.insert_sorted(&[10, 73, 74, 4_105, 4_106, 5_010], 10);
        columns.insert_sorted(&[73, 74, 75, 10_009], 10);
        columns.insert_sorted(&[], 10);
        let mut visited = Vec::new();
        columns.insert_sorted_each(&[20, 8_010], &[1.5, 2.5], 10, |j, v| visited.push((j, v)));
        assert_eq!(visited, [(10, 1.5), (8_000, 2.5)]);
        columns.insert_new(7_000);
        columns.insert_checked(65);
        columns.insert_checked(65);
        let mut listed = Vec::new();
        columns.drain(|j| listed.push(j));
        assert_eq!(
            listed,
            [0, 10, 63, 64, 65, 4_095, 4_096, 5_000, 7_000, 8_000, 9_999]
        );
        assert!(set.words.iter().chain(&set.summary).all(|&w| w == 0));
        // A narrower window afterwards, then a clear.
        let mut columns = set.cover(100);
        columns.insert_sorted(&[99, 99], 0);
        columns.insert_sorted(&[0, 98, 99], 0);
        assert_eq!(columns.clear(), 3);
        assert!(set.words.iter().chain(&set.summary).all(|&w| w == 0));
    }
}
