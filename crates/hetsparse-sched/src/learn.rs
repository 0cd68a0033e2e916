//! What a scheduler learns from its runs, per operation: each backend's speed and what sharing
//! a product between backends costs; and the decision it drives, whether to share at all.

use std::time::Duration;

use crate::report::DeviceReport;

/// Weight of the newest run when speeds and the sharing overhead are updated.
const UPDATE: f64 = 0.5;

/// A shared run must be expected to take at most this share of the fastest backend's time
/// alone, or the fastest runs alone: a 5 % gain is within what the estimate can miss.
pub(crate) const SHARING_GAIN: f64 = 0.95;

/// Before any shared run has been timed: the share of the known speeds above which the fastest
/// backend runs alone (the others would take under a tenth).
pub(crate) const DOMINANT_SHARE: f64 = 0.9;

/// The operations a scheduler learns about separately: a backend's speed differs between them
/// (a GPU's SpMV from host memory is bound by the upload; its SpGEMM by its kernels).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Spgemm = 0,
    Spmm = 1,
    Spmv = 2,
}

/// A host backend not yet timed alone is tried alone once when its speed in shared runs is at
/// least this share of the fastest's; only one far behind is left untried. A device with
/// memory of its own is tried alone once whatever its speed in shared runs, which says little
/// about it: its busy time there includes placing A and B, which a small share of the
/// products does not amortise, and its chunks pay per-call costs a whole call does not (on the
/// H200 machine CUDA's speed in the first shared run of a dense product was under 5 % of the
/// CPU's, and alone it was faster than the CPU).
pub(crate) const TRY_ALONE_SHARE: f64 = 0.05;

/// A backend timed alone once is timed alone a second time when that first speed is at least
/// this share of the fastest's: a first whole run may pay a cold start (buffers, memory pools,
/// pages not yet mapped) that later runs do not, and one slow first run must not keep a
/// backend that is as fast or faster out for good.
pub(crate) const RETRY_ALONE_SHARE: f64 = 0.7;

/// Speeds (work units per second: intermediate products for SpGEMM, entries of A times columns
/// of the dense operand for SpMM and SpMV) and the sharing overhead: how much longer shared runs
/// took than their work over the speeds together (threads, placing operands, the tail,
/// assembling the result). `alone` holds the speeds of whole runs on one backend, which is
/// what running alone is decided on where known.
#[derive(Clone, Debug)]
pub(crate) struct Learned {
    pub speeds: Vec<Option<f64>>,
    pub alone: Vec<Option<f64>>,
    /// Whole runs alone timed per backend (speeds set by the caller count none).
    pub alone_runs: Vec<u32>,
    pub overhead: Option<f64>,
    /// Seconds of the quickest small product each backend ran alone: what a call costs it
    /// whatever the work (a GPU's launches, transfers and synchronisations; a host backend's
    /// threads), which decides small products.
    pub per_call: Vec<Option<f64>>,
    /// Whether each backend computes in memory of its own (see [`TRY_ALONE_SHARE`]).
    pub own_memory: Vec<bool>,
}

fn blend(old: Option<f64>, new: f64) -> f64 {
    match old {
        Some(old) => old * (1.0 - UPDATE) + new * UPDATE,
        None => new,
    }
}

impl Learned {
    /// Nothing learned yet about backends that compute in host memory or, where
    /// `own_memory[d]`, in memory of their own.
    pub fn new(own_memory: Vec<bool>) -> Self {
        let backends = own_memory.len();
        Learned {
            speeds: vec![None; backends],
            alone: vec![None; backends],
            alone_runs: vec![0; backends],
            overhead: None,
            per_call: vec![None; backends],
            own_memory,
        }
    }

    /// Learns from a small product run on backend `d` alone: only what a call costs it. Its
    /// speed is not learned from such a run, where the call's own cost dominates (a GPU
    /// timed on products of a fraction of a millisecond would look a hundred times slower
    /// than it is on large ones).
    pub fn record_small(&mut self, d: usize, wall: Duration) {
        let secs = wall.as_secs_f64();
        self.per_call[d] = Some(self.per_call[d].map_or(secs, |old| old.min(secs)));
    }

    /// The backend expected to finish a small product of `work` units first: each member
    /// not yet timed on a small product is tried once (small products make that cheap); then
    /// the least of its per-call cost plus `work` over its speed alone, among members whose
    /// speed is known.
    pub fn quickest_for(&self, members: &[usize], work: u64) -> Option<usize> {
        if let Some(&untried) = members.iter().find(|&&d| self.per_call[d].is_none()) {
            return Some(untried);
        }
        members
            .iter()
            .filter_map(|&d| {
                let speed = self.alone_speed(d).filter(|&s| s > 0.0)?;
                Some((d, self.per_call[d].unwrap_or(0.0) + work as f64 / speed))
            })
            .min_by(|x, y| x.1.total_cmp(&y.1))
            .map(|(d, _)| d)
    }

    /// Learns from a whole run of `work` units on backend `d` alone. The second run keeps the
    /// better of the first two speeds (the first may have paid a cold start); later ones blend.
    pub fn record_alone(&mut self, d: usize, work: u64, wall: Duration) {
        let secs = wall.as_secs_f64();
        if work > 0 && secs > 0.0 {
            let speed = work as f64 / secs;
            self.alone[d] = Some(match (self.alone[d], self.alone_runs[d]) {
                (Some(first), 1) => first.max(speed),
                (old, _) => blend(old, speed),
            });
            self.alone_runs[d] += 1;
        }
    }

    /// Learns that backend `d` failed a whole run: it is no longer tried first (its speed
    /// counts as 0) but stays a fallback.
    pub fn record_failed(&mut self, d: usize) {
        self.alone[d] = Some(0.0);
        self.alone_runs[d] = self.alone_runs[d].saturating_add(1);
    }

    /// The backend to run an operation whole on, where it is not shared (SpMV and SpMM): each
    /// member not timed yet once, in order (so a GPU's speed is learned, not assumed from the
    /// first backend's); then one timed once within [`RETRY_ALONE_SHARE`] of the fastest once
    /// more (a first run can pay a cold start); then the fastest.
    pub fn next_alone(&self, members: &[usize]) -> Option<usize> {
        if let Some(untried) = members
            .iter()
            .copied()
            .find(|&d| self.alone_speed(d).is_none())
        {
            return Some(untried);
        }
        let best = self.fastest(members)?;
        let fastest = self.alone_speed(best)?;
        members
            .iter()
            .copied()
            .find(|&d| {
                d != best
                    && self.alone_runs[d] == 1
                    && self.alone[d].is_some_and(|s| s >= RETRY_ALONE_SHARE * fastest)
            })
            .or(Some(best))
    }

    /// What `d` is expected to do alone: its speed in whole runs where known, else in shared
    /// runs.
    fn alone_speed(&self, d: usize) -> Option<f64> {
        self.alone[d].or(self.speeds[d])
    }

    /// Learns from a finished run.
    pub fn record(&mut self, devices: &[DeviceReport], wall: Duration) {
        let speeds: Vec<f64> = devices.iter().filter_map(DeviceReport::speed).collect();
        let work: u64 = devices.iter().map(|d| d.products).sum();
        let secs = wall.as_secs_f64();
        if speeds.len() > 1 && secs > 0.0 {
            let ideal = work as f64 / speeds.iter().sum::<f64>();
            self.overhead = Some(blend(self.overhead, secs / ideal.max(f64::MIN_POSITIVE)));
        }
        for (s, d) in self.speeds.iter_mut().zip(devices) {
            if let Some(measured) = d.speed() {
                *s = Some(blend(*s, measured));
            }
        }
    }

    /// The fastest of `members` alone among those with a known speed.
    pub fn fastest(&self, members: &[usize]) -> Option<usize> {
        members
            .iter()
            .filter_map(|&d| self.alone_speed(d).map(|s| (d, s)))
            .max_by(|x, y| x.1.total_cmp(&y.1))
            .map(|(d, _)| d)
    }

    /// The backend of `whole` (the members that can run the product alone) that should run
    /// it alone, rather than all `members` sharing it; `None`: share (also to learn).
    ///
    /// - Before anything is known about any member: the first of `whole` with memory of its
    ///   own (a GPU: on the GPU machines measured, a first shared run of a product large
    ///   enough to share took two to three and a half times as long as the GPU alone, and the
    ///   GPU alone at most 1.3 times as long as the CPU alone); with none, `None`.
    /// - Once every member's speed in shared runs is known, exploring first: each of `whole`
    ///   never timed alone is run alone once, the fastest in shared runs first, where it has
    ///   memory of its own or its speed in shared runs is at least [`TRY_ALONE_SHARE`] of the
    ///   fastest's (shared runs can misjudge a backend); each timed alone once within
    ///   [`RETRY_ALONE_SHARE`] of the fastest is run alone once more.
    /// - Then the fastest of `whole` (on whole-run speeds where known) runs alone when sharing
    ///   is not expected to pay: the overhead-weighted shared time `overhead · W / Σ s`
    ///   (speeds in shared runs) is at least [`SHARING_GAIN`] of its time alone `W / s_max`
    ///   (before any shared run, when it has over [`DOMINANT_SHARE`] of the speeds).
    pub fn alone(&self, members: &[usize], whole: &[usize]) -> Option<usize> {
        let nothing_known = members
            .iter()
            .all(|&d| self.speeds[d].is_none() && self.alone[d].is_none());
        if nothing_known {
            return whole.iter().copied().find(|&d| self.own_memory[d]);
        }
        let known: Option<Vec<f64>> = members.iter().map(|&d| self.speeds[d]).collect();
        let total: f64 = known?.iter().sum();
        let best = self.fastest(whole)?;
        let fastest = self.alone_speed(best)?;
        let untried = whole
            .iter()
            .copied()
            .filter(|&d| {
                self.alone[d].is_none()
                    && (self.own_memory[d]
                        || self.speeds[d].is_some_and(|s| s >= TRY_ALONE_SHARE * fastest))
            })
            // The first of the fastest.
            .min_by(|&x, &y| {
                let shared = |d: usize| self.speeds[d].unwrap_or(0.0);
                shared(y).total_cmp(&shared(x))
            });
        if untried.is_some() {
            return untried;
        }
        let once = whole.iter().copied().find(|&d| {
            d != best
                && self.alone_runs[d] == 1
                && self.alone[d].is_some_and(|s| s >= RETRY_ALONE_SHARE * fastest)
        });
        if once.is_some() {
            return once;
        }
        let alone = match self.overhead {
            Some(overhead) => overhead / total >= SHARING_GAIN / fastest,
            None => fastest >= DOMINANT_SHARE * total,
        };
        alone.then_some(best)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(products: u64, millis: u64) -> DeviceReport {
        let mut r = DeviceReport::new("d".into());
        r.products = products;
        r.busy = Duration::from_millis(millis);
        r
    }

    #[test]
    fn a_slow_partner_is_left_out_once_sharing_is_measured() {
        let mut l = Learned::new(vec![false; 2]);
        assert_eq!(l.alone(&[0, 1], &[0, 1]), None);
        // 1000 and 40 units per ms; the shared run took 1.5× its ideal.
        let ideal_ms = 1040.0 / 1040.0;
        l.record(
            &[report(1000, 1), report(40, 1)],
            Duration::from_secs_f64(1.5 * ideal_ms / 1000.0),
        );
        assert!((l.overhead.unwrap() - 1.5).abs() < 1e-9);
        // 0 has not run alone: it is timed alone once (1 is too slow to be tried).
        assert_eq!(l.alone(&[0, 1], &[0, 1]), Some(0));
        l.record_alone(0, 1000, Duration::from_millis(1));
        // Shared: 1.5 / 1.04e6 s per unit; alone 1 / 1e6: alone is faster.
        assert_eq!(l.alone(&[0, 1], &[0, 1]), Some(0));
        // Two equal partners with that overhead share, once each was timed alone.
        let mut even = Learned::new(vec![false; 2]);
        even.speeds = vec![Some(1.0), Some(1.0)];
        even.overhead = Some(1.5);
        assert_eq!(even.alone(&[0, 1], &[0, 1]), Some(0));
        even.record_alone(0, 1, Duration::from_secs(1));
        assert_eq!(even.alone(&[0, 1], &[0, 1]), Some(1));
        even.record_alone(1, 1, Duration::from_secs(1));
        // Each within RETRY_ALONE_SHARE of the other: the one not chosen is timed again.
        assert_eq!(even.alone(&[0, 1], &[0, 1]), Some(0));
        even.record_alone(0, 1, Duration::from_secs(1));
        assert_eq!(even.alone(&[0, 1], &[0, 1]), None);
    }

    #[test]
    fn a_device_with_memory_of_its_own_is_tried_alone_however_slow_it_was_shared() {
        // As on the dense product on the H200 machine: the GPU (1) took 4 % of a shared
        // run's products in as long as the CPU (0) took for its 96 %.
        let mut l = Learned::new(vec![false, true]);
        // Before anything is known it runs the first product alone; timed only in a shared
        // run, it is tried alone as well.
        assert_eq!(l.alone(&[0, 1], &[0, 1]), Some(1));
        assert_eq!(
            Learned::new(vec![false, false]).alone(&[0, 1], &[0, 1]),
            None
        );
        l.record(&[report(96, 5), report(4, 5)], Duration::from_millis(7));
        assert!(l.speeds[1].unwrap() < TRY_ALONE_SHARE * l.speeds[0].unwrap());
        assert_eq!(l.alone(&[0, 1], &[0, 1]), Some(0));
        l.record_alone(0, 100, Duration::from_millis(4));
        assert_eq!(l.alone(&[0, 1], &[0, 1]), Some(1));
        // Alone it is the faster: it runs alone from now on (the CPU, within
        // RETRY_ALONE_SHARE of it, timed once more first).
        l.record_alone(1, 100, Duration::from_micros(3500));
        assert_eq!(l.fastest(&[0, 1]), Some(1));
        assert_eq!(l.alone(&[0, 1], &[0, 1]), Some(0));
        l.record_alone(0, 100, Duration::from_millis(4));
        assert_eq!(l.alone(&[0, 1], &[0, 1]), Some(1));
        // A device that cannot hold the operands is neither run alone first nor tried.
        let mut out_of_core = Learned::new(vec![false, true]);
        assert_eq!(out_of_core.alone(&[0, 1], &[0]), None);
        out_of_core.record(&[report(96, 5), report(4, 5)], Duration::from_millis(7));
        assert_eq!(out_of_core.alone(&[0, 1], &[0]), Some(0));
        out_of_core.record_alone(0, 100, Duration::from_millis(4));
        assert_eq!(out_of_core.alone(&[0, 1], &[0]), Some(0));
        // A host backend as far behind is not tried.
        let mut host = Learned::new(vec![false, false]);
        host.record(&[report(96, 5), report(4, 5)], Duration::from_millis(7));
        assert_eq!(host.alone(&[0, 1], &[0, 1]), Some(0));
        host.record_alone(0, 100, Duration::from_millis(4));
        assert_eq!(host.alone(&[0, 1], &[0, 1]), Some(0));
    }

    #[test]
    fn whole_runs_of_spmv_and_spmm_try_each_backend_then_keep_the_fastest() {
        let mut l = Learned::new(vec![false, true, true]);
        // Each is tried once, in order; a backend that failed is no longer tried first.
        assert_eq!(l.next_alone(&[0, 1, 2]), Some(0));
        l.record_alone(0, 100, Duration::from_millis(10));
        assert_eq!(l.next_alone(&[0, 1, 2]), Some(1));
        l.record_alone(1, 100, Duration::from_millis(4));
        assert_eq!(l.next_alone(&[0, 1, 2]), Some(2));
        l.record_failed(2);
        // 1 is the fastest; 0 (at 40 % of it) is not timed again.
        assert_eq!(l.next_alone(&[0, 1, 2]), Some(1));
        assert_eq!(l.next_alone(&[0, 2]), Some(0));
        // One within RETRY_ALONE_SHARE of the fastest after one run is timed once more.
        let mut close = Learned::new(vec![false, true]);
        close.record_alone(0, 100, Duration::from_millis(5));
        close.record_alone(1, 100, Duration::from_millis(4));
        assert_eq!(close.next_alone(&[0, 1]), Some(0));
        close.record_alone(0, 100, Duration::from_millis(5));
        assert_eq!(close.next_alone(&[0, 1]), Some(1));
    }

    #[test]
    fn a_slow_first_run_alone_is_timed_again() {
        let mut l = Learned::new(vec![false; 2]);
        l.speeds = vec![Some(100.0), Some(90.0)];
        l.overhead = Some(2.0);
        // 0's first run alone was cold (60 units/s), 1's was not (80).
        l.record_alone(0, 60, Duration::from_secs(1));
        l.record_alone(1, 80, Duration::from_secs(1));
        assert_eq!(l.fastest(&[0, 1]), Some(1));
        assert_eq!(l.alone(&[0, 1], &[0, 1]), Some(0));
        // Warm, 0 does 100: the better of its two runs stands. 1, now the one timed once
        // within reach, is timed again; then 0 runs alone from now on.
        l.record_alone(0, 100, Duration::from_secs(1));
        assert_eq!(l.alone[0], Some(100.0));
        assert_eq!(l.alone(&[0, 1], &[0, 1]), Some(1));
        l.record_alone(1, 80, Duration::from_secs(1));
        assert_eq!(l.alone(&[0, 1], &[0, 1]), Some(0));
        assert_eq!(l.alone(&[0, 1], &[0, 1]), Some(0));
        // Later runs blend.
        l.record_alone(0, 50, Duration::from_secs(1));
        assert_eq!(l.alone[0], Some(75.0));
        // A backend far below the fastest after its first run is not timed again.
        let mut far = Learned::new(vec![false; 2]);
        far.speeds = vec![Some(100.0), Some(90.0)];
        far.overhead = Some(2.0);
        far.record_alone(0, 100, Duration::from_secs(1));
        far.record_alone(1, 50, Duration::from_secs(1));
        assert_eq!(far.alone(&[0, 1], &[0, 1]), Some(0));
    }

    #[test]
    fn before_any_shared_run_a_dominant_backend_runs_alone() {
        let mut l = Learned::new(vec![false; 3]);
        l.speeds = vec![Some(97.0), Some(3.0), None];
        l.alone = vec![Some(97.0), None, None];
        assert_eq!(l.alone(&[0, 1], &[0, 1]), Some(0));
        assert_eq!(l.alone(&[0, 1, 2], &[0, 1, 2]), None);
        l.speeds[1] = Some(20.0);
        l.alone[1] = Some(20.0);
        assert_eq!(l.alone(&[0, 1], &[0, 1]), None);
        assert_eq!(l.fastest(&[1, 2]), Some(1));
    }

    #[test]
    fn small_products_go_where_a_call_costs_least() {
        let mut l = Learned::new(vec![false; 2]);
        // 0: a GPU, fast on large products; 1: the host, five times slower on them.
        l.record_alone(0, 1_000_000_000, Duration::from_secs(1));
        l.record_alone(1, 200_000_000, Duration::from_secs(1));
        // Each is tried once on a small product.
        assert_eq!(l.quickest_for(&[0, 1], 10_000), Some(0));
        l.record_small(0, Duration::from_micros(300));
        assert_eq!(l.quickest_for(&[0, 1], 10_000), Some(1));
        l.record_small(1, Duration::from_micros(60));
        l.record_small(1, Duration::from_micros(50));
        assert_eq!(l.per_call[1], Some(50e-6));
        // 10^4 units: 300 µs + 10 µs against 50 µs + 50 µs.
        assert_eq!(l.quickest_for(&[0, 1], 10_000), Some(1));
        // 10^6 units: 300 µs + 1 ms against 50 µs + 5 ms.
        assert_eq!(l.quickest_for(&[0, 1], 1_000_000), Some(0));
        // Small runs leave the speeds as they were.
        assert_eq!(l.alone, vec![Some(1e9), Some(2e8)]);
        assert_eq!(l.fastest(&[0, 1]), Some(0));
        // A backend whose first small product failed (recorded as taking forever) is not
        // tried on small products again.
        let mut failing = Learned::new(vec![false; 2]);
        failing.speeds = vec![Some(1e9), Some(2e8)];
        assert_eq!(failing.quickest_for(&[0, 1], 10_000), Some(0));
        failing.record_small(0, Duration::MAX);
        assert_eq!(failing.quickest_for(&[0, 1], 10_000), Some(1));
        failing.record_small(1, Duration::from_micros(50));
        assert_eq!(failing.quickest_for(&[0, 1], 100_000_000), Some(1));
    }

    #[test]
    fn whole_runs_decide_who_runs_alone_after_each_was_tried() {
        let mut l = Learned::new(vec![false; 2]);
        // Shared runs: 0 at 100 units/s, 1 at 30 (its chunks pay per-call costs); sharing
        // overhead 1.1: the shared time 1.1·W/130 is under 0.95·W/100, so on shared speeds
        // alone the two would share. But neither has run alone: 0 (the fastest) is tried,
        // then 1 (within TRY_ALONE_SHARE).
        l.speeds = vec![Some(100.0), Some(30.0)];
        l.overhead = Some(1.1);
        assert_eq!(l.alone(&[0, 1], &[0, 1]), Some(0));
        l.record_alone(0, 100, Duration::from_secs(1));
        assert_eq!(l.alone(&[0, 1], &[0, 1]), Some(1));
        // Alone, 1 does 250 units/s: from now on it runs alone (1.1/130 ≥ 0.95/250).
        l.record_alone(1, 250, Duration::from_secs(1));
        assert_eq!(l.alone(&[0, 1], &[0, 1]), Some(1));
        assert_eq!(l.fastest(&[0, 1]), Some(1));
        // A member far below the fastest is not tried.
        let mut far = Learned::new(vec![false; 2]);
        far.speeds = vec![Some(100.0), Some(3.0)];
        far.alone = vec![Some(100.0), None];
        far.overhead = Some(2.0);
        assert_eq!(far.alone(&[0, 1], &[0, 1]), Some(0));
    }
}
