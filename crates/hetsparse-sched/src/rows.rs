//! SpMV and SpMM over several backends: row blocks of A, balanced by entries, handed out from
//! one queue (the fastest backend takes the largest blocks, the others the smallest); each
//! backend computes its blocks' rows of the result, which are copied into place. A backend
//! that fails has its blocks rerun on the others; out of memory halves the block.

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use hetsparse_core::{Backend, Csr, Error, Result, RunControl, Scalar};

use crate::chunking::row_panels;
use crate::guard::{self, EscapedPanic};
use crate::report::DeviceReport;

/// How long an idle worker sleeps before it looks at the caller's cancellation again.
const IDLE_POLL: Duration = Duration::from_millis(20);

/// Row blocks of `a` of about `entries` entries each (at least one row): row panels weighed
/// by entries, whose prefix sums are A's row offsets.
pub(crate) fn blocks<T: Scalar>(a: &Csr<T>, entries: u64) -> Vec<Range<usize>> {
    row_panels(a, a.row_offsets(), 0..a.nrows(), entries, u64::MAX)
}

/// What a backend computes for one row block: its rows of the result.
pub(crate) type BlockFn<'a, T, R> =
    dyn Fn(&dyn Backend<T>, &Csr<T>, &RunControl) -> Result<R> + Sync + 'a;

/// Computed row blocks, in any order.
pub(crate) type Pieces<R> = Vec<(Range<usize>, R)>;

struct State<R> {
    queue: VecDeque<Range<usize>>,
    outstanding: usize,
    live: Vec<bool>,
    abort: Option<Error>,
    last_failure: Option<Error>,
    pieces: Pieces<R>,
    reports: Vec<DeviceReport>,
}

/// Runs `compute` on row blocks of `a` over the backends taking part; returns the pieces (in
/// any order) and what each backend did. `units_per_entry` weighs an entry of A (the dense
/// operand's columns).
#[allow(clippy::too_many_arguments)]
pub(crate) fn run<T: Scalar, R: Send>(
    a: &Csr<T>,
    devices: &[Arc<dyn Backend<T>>],
    taking_part: &[bool],
    mut blocks: Vec<Range<usize>>,
    units_per_entry: u64,
    speeds: &[Option<f64>],
    caller: &RunControl,
    compute: &BlockFn<'_, T, R>,
) -> Result<(Pieces<R>, Vec<DeviceReport>)> {
    let entries = |r: &Range<usize>| a.row_offsets()[r.end] - a.row_offsets()[r.start];
    blocks.sort_by_key(|r| std::cmp::Reverse(entries(r)));
    caller.add_planned(a.nnz().saturating_mul(units_per_entry));
    let state = Mutex::new(State {
        outstanding: blocks.len(),
        queue: blocks.into(),
        live: taking_part.to_vec(),
        abort: None,
        last_failure: None,
        pieces: Vec::new(),
        reports: devices
            .iter()
            .map(|d| DeviceReport::new(d.info().name))
            .collect(),
    });
    let wake = Condvar::new();
    let runs: Vec<RunControl> = devices.iter().map(|_| caller.child()).collect();
    let lock = || state.lock().unwrap_or_else(|p| p.into_inner());
    let abort = |s: &mut MutexGuard<'_, State<R>>, e: Error| {
        if s.abort.is_none() {
            s.abort = Some(e);
        }
        for r in &runs {
            r.cancel();
        }
        wake.notify_all();
    };
    let worker = |d: usize| {
        let device = devices[d].as_ref();
        loop {
            // The next block: the fastest known backend takes from the front.
            let block = {
                let mut s = lock();
                loop {
                    if s.abort.is_some() || !s.live[d] {
                        return;
                    }
                    if caller.is_cancelled() {
                        abort(&mut s, Error::Cancelled);
                        return;
                    }
                    let speed = |k: usize| s.reports[k].speed().or(speeds[k]);
                    let mine = speed(d);
                    let fastest = mine.is_some_and(|m| {
                        (0..s.live.len())
                            .filter(|&k| s.live[k])
                            .all(|k| speed(k).is_none_or(|o| o <= m))
                    });
                    let next = if fastest {
                        s.queue.pop_front()
                    } else {
                        s.queue.pop_back()
                    };
                    if let Some(b) = next {
                        break b;
                    }
                    if s.outstanding == 0 {
                        return;
                    }
                    s = wake
                        .wait_timeout(s, IDLE_POLL)
                        .map(|(g, _)| g)
                        .unwrap_or_else(|p| p.into_inner().0);
                }
            };
            let begun = Instant::now();
            let outcome = guard::device_call(device, &runs[d], || {
                let rows = a.rows(block.clone())?;
                compute(device, &rows, &runs[d])
            });
            let mut s = lock();
            s.reports[d].busy += begun.elapsed();
            match outcome {
                Ok(piece) => {
                    let units = entries(&block).saturating_mul(units_per_entry);
                    s.reports[d].chunks += 1;
                    s.reports[d].products += units;
                    s.pieces.push((block, piece));
                    s.outstanding -= 1;
                    if s.outstanding == 0 {
                        wake.notify_all();
                    }
                    // Told outside the lock: the caller's callback may be slow, or panic.
                    drop(s);
                    caller.add_done(units);
                }
                Err(Error::Cancelled) if caller.is_cancelled() || s.abort.is_some() => {
                    abort(&mut s, Error::Cancelled);
                    return;
                }
                Err(e @ Error::OutOfMemory { .. }) if block.len() > 1 => {
                    tracing::info!(device = d, rows = ?block, error = %e, "out of memory on a row block; splitting it");
                    let mid = block.start + block.len() / 2;
                    s.queue.push_back(block.start..mid);
                    s.queue.push_back(mid..block.end);
                    s.outstanding += 1;
                    wake.notify_all();
                }
                Err(e) => {
                    tracing::warn!(device = d, error = %e, "a backend failed; its rows go to the others");
                    s.live[d] = false;
                    s.reports[d].failure = Some(e.to_string());
                    s.queue.push_back(block);
                    s.last_failure = Some(e);
                    if !s.live.iter().any(|l| *l) {
                        let e = s.last_failure.take().unwrap_or(Error::Cancelled);
                        abort(&mut s, e);
                    }
                    wake.notify_all();
                    return;
                }
            }
        }
    };
    let escaped = EscapedPanic::default();
    std::thread::scope(|scope| {
        for d in (0..devices.len()).filter(|&d| taking_part[d]) {
            let (worker, escaped) = (&worker, &escaped);
            scope.spawn(move || escaped.catch(|| worker(d)));
        }
    });
    // The caller's progress callback panicked on a worker: the panic is the caller's.
    escaped.resume();
    let s = state.into_inner().unwrap_or_else(|p| p.into_inner());
    if let Some(e) = s.abort {
        return Err(e);
    }
    if s.outstanding > 0 {
        return Err(s.last_failure.unwrap_or_else(|| Error::Internal {
            backend: hetsparse_core::BackendKind::Scheduler,
            what: format!("{} row blocks were left unfinished", s.outstanding),
        }));
    }
    Ok((s.pieces, s.reports))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_cover_the_rows_by_entries() {
        let a = hetsparse_core::generate::uniform::<f64>(100, 50, 4, 1);
        let b = blocks(&a, 40);
        assert_eq!(b.first().unwrap().start, 0);
        assert_eq!(b.last().unwrap().end, 100);
        for w in b.windows(2) {
            assert_eq!(w[0].end, w[1].start);
        }
        assert!(b.iter().all(|r| r.len() <= 10 && !r.is_empty()), "{b:?}");
        assert_eq!(blocks(&Csr::<f64>::zeros(0, 3).unwrap(), 10), vec![]);
    }
}
