//! Per-thread scratch memory of the SpGEMM kernels, reused across rows and ranges.
//!
//! Each rayon thread owns one [`Scratch`] for the duration of a product: accumulators grow to
//! the largest row they have seen and are never freed or zeroed between rows (the dense marker
//! uses generation stamps), so no row allocates.

use std::sync::Mutex;

use hetsparse_core::Accumulator;

/// Marks an empty hash slot: column indices are below `u32::MAX` (dimensions are at most
/// `u32::MAX`).
pub(super) const EMPTY: u32 = u32::MAX;

/// The scratch of one thread.
pub(crate) struct Scratch<A> {
    /// Dense marker: `stamps[j] == generation` when column `j` (of the current panel) has been
    /// touched by the current row.
    pub stamps: Vec<u32>,
    generation: u32,
    /// Dense accumulator, indexed like `stamps`.
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
            stamps: Vec::new(),
            generation: 0,
            dense: Vec::new(),
            keys: Vec::new(),
            values: Vec::new(),
            pairs: Vec::new(),
            cursors: Vec::new(),
            columns: Vec::new(),
        }
    }

    /// Makes the dense marker and accumulator at least `width` long and starts a new row:
    /// returns the generation that marks this row's columns.
    pub fn dense_row(&mut self, width: usize) -> u32 {
        if self.stamps.len() < width {
            self.stamps.resize(width, 0);
            self.dense.resize(width, A::ZERO);
        }
        self.generation = self.generation.wrapping_add(1);
        if self.generation == 0 {
            // After 2^32 - 1 rows a stale stamp could match again: clear once and restart.
            self.stamps.fill(0);
            self.generation = 1;
        }
        self.generation
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
