//! Per-thread scratch memory of the SpGEMM kernels, reused across rows and ranges.
//!
//! Each rayon thread owns one [`Scratch`] for the duration of a product: accumulators grow to
//! the largest row they have seen and are never freed between rows. The column set is left
//! empty by every row that uses it, and the dense values need no clearing (a column's first
//! product is stored, not added), so no row allocates or clears more than it touched.

use std::sync::Mutex;

use hetsparse_core::Accumulator;

/// Marks an empty hash slot: column indices are below `u32::MAX` (dimensions are at most
/// `u32::MAX`).
pub(super) const EMPTY: u32 = u32::MAX;

/// The scratch of one thread.
pub(crate) struct Scratch<A> {
    /// Which columns (of the current window) the current row has touched.
    pub set: ColumnSet,
    /// Dense accumulator, indexed like `set`; an entry is meaningful only while its column is
    /// in the set.
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

    /// Makes the column set cover `width` columns, and with `values` the dense accumulator
    /// too.
    pub fn dense_row(&mut self, width: usize, values: bool) {
        self.set.cover(width);
        if values && self.dense.len() < width {
            self.dense.resize(width, A::ZERO);
        }
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
/// `summary` says that word `w` is not zero. Inserting costs two OR operations and no branch;
/// listing the set in order costs `O(width / 4096 + words touched + entries)`, so a row of C
/// comes out sorted without a comparison sort and without scanning the whole width. Every row
/// leaves the set empty.
#[derive(Default)]
pub(crate) struct ColumnSet {
    words: Vec<u64>,
    summary: Vec<u64>,
    /// Summary words of the current window.
    active: usize,
}

impl ColumnSet {
    /// Covers columns `0..width` (growing with zeros when needed).
    pub fn cover(&mut self, width: usize) {
        let words = width.div_ceil(64);
        if self.words.len() < words {
            self.words.resize(words, 0);
            self.summary.resize(words.div_ceil(64), 0);
        }
        self.active = words.div_ceil(64);
    }

    /// Adds column `j`; returns whether it was new.
    #[inline(always)]
    pub fn insert(&mut self, j: usize) -> bool {
        let (w, bit) = (j >> 6, 1u64 << (j & 63));
        let word = self.words[w];
        self.words[w] = word | bit;
        self.summary[w >> 6] |= 1u64 << (w & 63);
        word & bit == 0
    }

    /// Calls `f` on every column of the set in increasing order, emptying it.
    #[inline(always)]
    pub fn drain(&mut self, mut f: impl FnMut(usize)) {
        for s in 0..self.active {
            let mut summary = std::mem::take(&mut self.summary[s]);
            while summary != 0 {
                let w = s * 64 + summary.trailing_zeros() as usize;
                summary &= summary - 1;
                let mut word = std::mem::take(&mut self.words[w]);
                while word != 0 {
                    f(w * 64 + word.trailing_zeros() as usize);
                    word &= word - 1;
                }
            }
        }
    }

    /// Empties the set without listing it.
    pub fn clear(&mut self) {
        for s in 0..self.active {
            let mut summary = std::mem::take(&mut self.summary[s]);
            while summary != 0 {
                self.words[s * 64 + summary.trailing_zeros() as usize] = 0;
                summary &= summary - 1;
            }
        }
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
        set.cover(10_000);
        let columns = [9_999, 0, 63, 64, 4_095, 4_096, 5_000, 63, 9_999];
        let new: Vec<bool> = columns.iter().map(|&j| set.insert(j)).collect();
        assert_eq!(
            new,
            [true, true, true, true, true, true, true, false, false]
        );
        let mut listed = Vec::new();
        set.drain(|j| listed.push(j));
        assert_eq!(listed, [0, 63, 64, 4_095, 4_096, 5_000, 9_999]);
        assert!(set.words.iter().chain(&set.summary).all(|&w| w == 0));
        // A narrower window afterwards, then a clear.
        set.cover(100);
        assert!(set.insert(99));
        set.clear();
        assert!(set.words.iter().chain(&set.summary).all(|&w| w == 0));
    }
}
