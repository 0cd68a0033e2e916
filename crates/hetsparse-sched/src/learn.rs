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

/// Speeds (work units per second: intermediate products for SpGEMM, entries of A times columns
/// of the dense operand for SpMM and SpMV) and the sharing overhead: how much longer shared runs
/// took than their work over the speeds together (threads, placing operands, the tail,
/// assembling the result).
#[derive(Clone, Debug)]
pub(crate) struct Learned {
    pub speeds: Vec<Option<f64>>,
    pub overhead: Option<f64>,
}

fn blend(old: Option<f64>, new: f64) -> f64 {
    match old {
        Some(old) => old * (1.0 - UPDATE) + new * UPDATE,
        None => new,
    }
}

impl Learned {
    pub fn new(backends: usize) -> Self {
        Learned {
            speeds: vec![None; backends],
            overhead: None,
        }
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

    /// The fastest of `members` among those with a known speed.
    pub fn fastest(&self, members: &[usize]) -> Option<usize> {
        members
            .iter()
            .filter_map(|&d| self.speeds[d].map(|s| (d, s)))
            .max_by(|x, y| x.1.total_cmp(&y.1))
            .map(|(d, _)| d)
    }

    /// The backend that should run alone, when every member's speed is known and sharing is not
    /// expected to pay: the overhead-weighted shared time `overhead · W / Σ s` is at least
    /// [`SHARING_GAIN`] of the fastest's `W / s_max` (before any shared run, when the fastest
    /// has over [`DOMINANT_SHARE`] of the speeds). `None`: share (also to learn).
    pub fn alone(&self, members: &[usize]) -> Option<usize> {
        let known: Option<Vec<f64>> = members.iter().map(|&d| self.speeds[d]).collect();
        let known = known?;
        let total: f64 = known.iter().sum();
        let best = self.fastest(members)?;
        let fastest = self.speeds[best]?;
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
        let mut l = Learned::new(2);
        assert_eq!(l.alone(&[0, 1]), None);
        // 1000 and 100 units per ms; the shared run took 1.5× its ideal.
        let ideal_ms = 1100.0 / 1100.0;
        l.record(
            &[report(1000, 1), report(100, 1)],
            Duration::from_secs_f64(1.5 * ideal_ms / 1000.0),
        );
        assert!((l.overhead.unwrap() - 1.5).abs() < 1e-9);
        // Shared: 1.5 / 1.1e6 s per unit; alone 1 / 1e6: alone is faster.
        assert_eq!(l.alone(&[0, 1]), Some(0));
        // Two equal partners with that overhead share: 1.5 / 2 < 0.95.
        let mut even = Learned::new(2);
        even.speeds = vec![Some(1.0), Some(1.0)];
        even.overhead = Some(1.5);
        assert_eq!(even.alone(&[0, 1]), None);
    }

    #[test]
    fn before_any_shared_run_a_dominant_backend_runs_alone() {
        let mut l = Learned::new(3);
        l.speeds = vec![Some(95.0), Some(5.0), None];
        assert_eq!(l.alone(&[0, 1]), Some(0));
        assert_eq!(l.alone(&[0, 1, 2]), None);
        l.speeds[1] = Some(20.0);
        assert_eq!(l.alone(&[0, 1]), None);
        assert_eq!(l.fastest(&[1, 2]), Some(1));
    }
}
