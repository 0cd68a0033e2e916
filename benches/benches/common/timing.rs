//! Timing of whole calls that give a result, shared by the benchmarks that keep the last one
//! to check it.

use std::time::{Duration, Instant};

/// Minimum of `reps` timed calls after one warm-up, and the last result; `None` if a call
/// failed. Each call's result is freed before the next call starts, outside its time: a
/// product of GBs handing its pages back inside the next call's time would be counted, and
/// kept alive through it, it would keep the allocator from reusing them.
pub fn best_of<R>(reps: usize, mut f: impl FnMut() -> Option<R>) -> Option<(Duration, R)> {
    let mut last = f()?;
    let mut best = Duration::MAX;
    for _ in 0..reps {
        drop(last);
        let start = Instant::now();
        last = f()?;
        best = best.min(start.elapsed());
    }
    Some((best, last))
}
