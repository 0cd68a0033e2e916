//! Running the chunks of a product on several backends at once: one thread per backend takes
//! work (its own assigned list first, then the shared queue), has each chunk written straight
//! into its place in C (or hands it back as a matrix of its own, for the assembly), and on a
//! failure gives its unfinished chunks back for the others.
//!
//! A chunk is held by one device at a time, and a device writes into a chunk's place only
//! during its call: a chunk given back is placed anew after that call has returned, so no two
//! places alive at once share a position of C. A chunk counts as finished once its device said
//! so and its place is complete.
//!
//! Failures are sorted by what they say about the device:
//! - out of memory on a chunk: the chunk is split in two (rows, then columns) and both halves
//!   queued; at a single entry the device is excluded from that chunk;
//! - unsupported or too large for this device: the device is excluded from that chunk;
//! - anything else (a failed launch, a lost device, an internal error, a panic): the device is
//!   out of this run and its unfinished chunks go to the others.
//!
//! A chunk every remaining device is excluded from, or work left with no device alive, ends the
//! run with the error that stopped it; cancelling the caller's run stops every device.

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use hetsparse_core::backend::assemble::Tile;
use hetsparse_core::backend::memory::csr_bytes;
use hetsparse_core::{
    Backend, ChunkPlace, Csr, CsrOperand, Error, MemorySpace, ProductBuffer, ProductChunk,
    Progress, ResidentCsr, Result, RunControl, Scalar, SpgemmOptions,
};

use crate::chunking::{share_credit, split, Task};
use crate::guard::{self, EscapedPanic};
use crate::report::DeviceReport;

/// How long an idle worker sleeps before it looks at the caller's cancellation again.
const IDLE_POLL: Duration = Duration::from_millis(20);

/// What runs: the operands and, for each device, its own tasks; `shared` is the queue any
/// device takes from.
pub(crate) struct Work<'a, T: Scalar> {
    pub a: &'a Csr<T>,
    pub b: &'a Csr<T>,
    pub options: &'a SpgemmOptions,
    /// Every backend of the scheduler, by position.
    pub devices: &'a [Arc<dyn Backend<T>>],
    /// Whether each takes part.
    pub taking_part: Vec<bool>,
    /// Each device's assigned tasks, in the order it runs them.
    pub own: Vec<Vec<Task>>,
    /// Tasks for whichever device is free, in row order per panel of B.
    pub shared: Vec<Task>,
    /// Each device's speed from earlier runs (products per second), where known.
    pub speeds: Vec<Option<f64>>,
    /// B's column panels (the chunks' column ranges), cut once on the host for the devices
    /// that take their operands chunk by chunk; empty when B is not cut.
    pub panels: Vec<(Range<usize>, Csr<T>)>,
    /// C, which the chunks are written into; `None`: each chunk comes back as a matrix of its
    /// own.
    pub c: Option<&'a ProductBuffer<T>>,
    /// A and B already on a device (the one that counted C), by device: its worker computes
    /// from them instead of uploading them again.
    pub uploaded: Vec<Option<(ResidentCsr<T>, ResidentCsr<T>)>>,
}

/// What a run did: the chunks that came back as matrices (none where C was written in
/// place) and each device's report.
pub(crate) struct Finished<T> {
    pub tiles: Vec<Tile<T>>,
    pub devices: Vec<DeviceReport>,
}

struct State<T> {
    own: Vec<VecDeque<Task>>,
    queue: VecDeque<Task>,
    /// Tasks not yet finished (queued or being computed).
    outstanding: usize,
    live: Vec<bool>,
    abort: Option<Error>,
    /// The most recent device failure, returned if no device is left.
    last_failure: Option<Error>,
    tiles: Vec<Tile<T>>,
    reports: Vec<DeviceReport>,
}

impl<T> State<T> {
    /// Puts `task` back in the queue at its place: by B's panel, then by rows. A merged task
    /// goes back as the tasks it was made of (with its exclusions and halvings), so that a
    /// device that takes B panel by panel can take them.
    fn requeue(&mut self, mut task: Task) {
        if !task.parts.is_empty() {
            let mut parts = std::mem::take(&mut task.parts);
            share_credit(task.credited, &mut parts);
            self.outstanding += parts.len() - 1;
            for mut part in parts {
                part.excluded.clone_from(&task.excluded);
                part.splits = task.splits;
                self.requeue(part);
            }
            return;
        }
        let at = self.queue.partition_point(|t| t.place() < task.place());
        self.queue.insert(at, task);
    }

    /// Ends the run when some queued task has no live device left to take it.
    fn check_stranded(&mut self) {
        if self.abort.is_some() {
            return;
        }
        let live: Vec<usize> = (0..self.live.len()).filter(|&d| self.live[d]).collect();
        if live.is_empty() {
            if self.outstanding > 0 {
                self.abort = Some(self.last_failure.take().unwrap_or_else(|| Error::Internal {
                    backend: hetsparse_core::BackendKind::Scheduler,
                    what: "no backend is left to compute the remaining chunks".into(),
                }));
            }
            return;
        }
        let stranded = self
            .queue
            .iter()
            .chain(self.own.iter().flatten())
            .position(|t| live.iter().all(|d| t.excluded.contains(d)));
        if let Some(i) = stranded {
            let chunk = self
                .queue
                .iter()
                .chain(self.own.iter().flatten())
                .nth(i)
                .map(|t| t.chunk.clone());
            let cause = self.last_failure.take();
            self.abort = Some(match (cause, chunk) {
                (Some(e), _) => e,
                (None, chunk) => Error::Internal {
                    backend: hetsparse_core::BackendKind::Scheduler,
                    what: format!("no backend can compute the chunk {chunk:?}"),
                },
            });
        }
    }
}

struct Shared<T> {
    state: Mutex<State<T>>,
    wake: Condvar,
    /// One run per device, cancelled with the caller's and when the run is aborted, whose
    /// progress goes to the device's relay.
    runs: Vec<RunControl>,
    relays: Vec<Arc<Mutex<Relay>>>,
    caller: RunControl,
}

/// Passes a device's progress inside a call on to the caller before the call's chunks are
/// done, in the caller's measure (the chunks' products, which for a panel of B are estimates
/// the device does not know): the chunk being computed (the first of the call not yet done)
/// gets the share of its products that the device reports done of what it planned since that
/// chunk became the current one. A chunk's completion adds what was not passed on for it, and
/// what was passed on for a chunk given back stays with it ([`Task::credited`]), so every
/// product counts once.
#[derive(Default)]
struct Relay {
    /// Each chunk of the call: its products, those passed on, and whether it is done.
    chunks: Vec<(u64, u64, bool)>,
    /// Where the call's chunks start in the device's batch.
    at: usize,
    current: Option<usize>,
    /// The device's progress when the current chunk became current.
    base: Progress,
}

impl Relay {
    /// A call of `tasks` (from position `at` of the batch) begins.
    fn begin(&mut self, tasks: &[Task], at: usize, device: Progress) {
        self.chunks = tasks
            .iter()
            .map(|t| (t.products, t.credited, false))
            .collect();
        self.at = at;
        self.current = (!tasks.is_empty()).then_some(0);
        self.base = device;
    }

    /// The device's progress moved: the products to pass on now.
    fn moved(&mut self, device: Progress) -> u64 {
        let Some((products, passed, _)) = self.current.and_then(|i| self.chunks.get_mut(i)) else {
            return 0;
        };
        let planned = device.planned.saturating_sub(self.base.planned);
        if planned == 0 {
            return 0;
        }
        let done = device.done.saturating_sub(self.base.done).min(planned);
        // At most `products`, as `done <= planned`.
        let reached = (u128::from(*products) * u128::from(done) / u128::from(planned)) as u64;
        let more = reached.saturating_sub(*passed);
        *passed += more;
        more
    }

    /// Chunk `i` of the call is done: the products left to count for it.
    fn finished(&mut self, i: usize, device: Progress) -> u64 {
        let Some((products, passed, done)) = self.chunks.get_mut(i) else {
            return 0;
        };
        *done = true;
        let rest = products.saturating_sub(*passed);
        if self.current == Some(i) {
            self.current = (i + 1..self.chunks.len()).find(|&k| !self.chunks[k].2);
            self.base = device;
        }
        rest
    }

    /// The call is over (returned, failed or panicked): what was passed on for its chunks
    /// goes to `credited`, by position in the batch.
    fn end(&mut self, credited: &mut [u64]) {
        for (k, &(_, passed, _)) in self.chunks.iter().enumerate() {
            if let Some(c) = credited.get_mut(self.at + k) {
                *c = passed;
            }
        }
        self.chunks.clear();
        self.current = None;
    }
}

/// Locks a relay; one left by a panicking device thread holds consistent numbers.
fn lock_relay(relay: &Mutex<Relay>) -> MutexGuard<'_, Relay> {
    relay.lock().unwrap_or_else(|p| p.into_inner())
}

impl<T> Shared<T> {
    fn lock(&self) -> MutexGuard<'_, State<T>> {
        // A worker that panicked while holding the lock left the state consistent (every
        // update is a few assignments), so keep going with it.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn abort(&self, state: &mut State<T>, error: Error) {
        if state.abort.is_none() {
            state.abort = Some(error);
        }
        for r in &self.runs {
            r.cancel();
        }
        self.wake.notify_all();
    }
}

/// Runs `work` to the end: every chunk finished, or the error that stopped the run.
pub(crate) fn run<T: Scalar>(work: Work<'_, T>, caller: &RunControl) -> Result<Finished<T>> {
    let _span = tracing::debug_span!("run_chunks").entered();
    let n = work.devices.len();
    let outstanding = work.shared.len() + work.own.iter().map(Vec::len).sum::<usize>();
    let planned: u64 = work
        .shared
        .iter()
        .chain(work.own.iter().flatten())
        .map(|t| t.products)
        .sum();
    caller.add_planned(planned);
    let relays: Vec<Arc<Mutex<Relay>>> = (0..n).map(|_| Arc::default()).collect();
    let shared = Shared {
        state: Mutex::new(State {
            own: work
                .own
                .iter()
                .map(|l| l.iter().cloned().collect())
                .collect(),
            queue: work.shared.iter().cloned().collect(),
            outstanding,
            live: work.taking_part.clone(),
            abort: None,
            last_failure: None,
            tiles: Vec::new(),
            reports: work
                .devices
                .iter()
                .map(|d| DeviceReport::new(d.info().name))
                .collect(),
        }),
        wake: Condvar::new(),
        runs: relays
            .iter()
            .map(|relay| {
                let (relay, caller_now) = (Arc::clone(relay), caller.clone());
                caller.child_with_progress(move |device| {
                    let more = lock_relay(&relay).moved(device);
                    if more > 0 {
                        caller_now.add_done(more);
                    }
                })
            })
            .collect(),
        relays,
        caller: caller.clone(),
    };
    let escaped = EscapedPanic::default();
    std::thread::scope(|scope| {
        for d in (0..n).filter(|&d| work.taking_part[d]) {
            let (shared, work, escaped) = (&shared, &work, &escaped);
            scope.spawn(move || escaped.catch(|| worker(shared, work, d)));
        }
    });
    // The caller's progress callback panicked on a worker: the panic is the caller's.
    escaped.resume();
    let state = shared.state.into_inner().unwrap_or_else(|p| p.into_inner());
    if let Some(e) = state.abort {
        return Err(e);
    }
    if state.outstanding > 0 {
        return Err(state.last_failure.unwrap_or_else(|| Error::Internal {
            backend: hetsparse_core::BackendKind::Scheduler,
            what: format!("{} chunks were left unfinished", state.outstanding),
        }));
    }
    Ok(Finished {
        tiles: state.tiles,
        devices: state.reports,
    })
}

/// Where a device reads its operands from.
enum Placement<T: Scalar> {
    /// In place: the device computes in host memory, or A and B were uploaded once.
    Whole(Option<(ResidentCsr<T>, ResidentCsr<T>)>),
    /// A and B handed over from the host with each batch, when they do not fit the device
    /// together: the backend places each chunk's rows of A and window of B itself (one call
    /// for the batch, so it keeps what chunks share and pipelines them). The chunks were cut
    /// to fit, so a batch's chunks are not merged.
    PerChunk,
}

fn worker<T: Scalar>(shared: &Shared<T>, work: &Work<'_, T>, d: usize) {
    let device = &work.devices[d];
    let run = &shared.runs[d];
    // Placed on the first batch, so that a device that gets no work uploads nothing.
    let mut placement: Option<Placement<T>> = None;
    loop {
        let per_chunk = match &placement {
            Some(Placement::PerChunk) => true,
            Some(Placement::Whole(_)) => false,
            None => !fits_whole(device.as_ref(), work),
        };
        let Some(batch) = next_batch(shared, work, d, per_chunk) else {
            return;
        };
        let begun = Instant::now();
        let mut finished = vec![false; batch.len()];
        let mut credited: Vec<u64> = batch.iter().map(|t| t.credited).collect();
        let mut tiles: Vec<Option<Csr<T>>> = (0..batch.len()).map(|_| None).collect();
        let outcome = guard::device_call(device.as_ref(), &shared.caller, || {
            if placement.is_none() {
                placement = Some(place(device.as_ref(), work, d)?);
            }
            let Some(placement) = placement.as_ref() else {
                return Ok(());
            };
            let mut call = Call {
                device: device.as_ref(),
                work,
                run,
                relay: &shared.relays[d],
                caller: &shared.caller,
                finished: &mut finished,
                credited: &mut credited,
                tiles: &mut tiles,
            };
            call.compute(placement, &batch)
        });
        // A call that panicked did not close its relay.
        lock_relay(&shared.relays[d]).end(&mut credited);
        shared.lock().reports[d].busy += begun.elapsed();
        // The chunks finished before a failure count too.
        let delivered = batch
            .iter()
            .zip(&finished)
            .zip(tiles)
            .filter(|((_, f), _)| **f)
            .try_for_each(|((task, _), tile)| deliver(shared, d, task, tile));
        let outcome = outcome.and(delivered);
        if let Err(e) = outcome {
            let rest: Vec<(usize, Task)> = batch
                .into_iter()
                .enumerate()
                .filter(|(i, _)| !finished[*i])
                .map(|(i, mut task)| {
                    task.credited = credited[i];
                    (i, task)
                })
                .collect();
            if !handle_failure(shared, work, d, e, rest) {
                return;
            }
        }
    }
}

/// Whether A and B (`operands` bytes, [`operands_bytes`]) may be placed on `device` whole:
/// always for host memory, else where they take at most half of the device's own budget (a
/// device beside one of a smaller budget holds them if it can; the chunks are cut for the
/// smallest).
pub(crate) fn holds_whole<T: Scalar>(device: &dyn Backend<T>, operands: u64) -> bool {
    device.memory_space() == MemorySpace::Host || operands <= crate::memory_budget(device) / 2
}

/// [`holds_whole`] for the run's A and B.
fn fits_whole<T: Scalar>(device: &dyn Backend<T>, work: &Work<'_, T>) -> bool {
    holds_whole(device, operands_bytes(work.a, work.b))
}

/// Bytes of A and B in CSR form: what a device holding them whole takes for them.
pub(crate) fn operands_bytes<T: Scalar>(a: &Csr<T>, b: &Csr<T>) -> u64 {
    let value = std::mem::size_of::<T>();
    csr_bytes(a.nrows(), a.nnz(), value).saturating_add(csr_bytes(b.nrows(), b.nnz(), value))
}

/// Uploads A and B once where device `d` has memory of its own and they fit (or takes them
/// where they were uploaded before the run).
fn place<T: Scalar>(device: &dyn Backend<T>, work: &Work<'_, T>, d: usize) -> Result<Placement<T>> {
    if device.memory_space() == MemorySpace::Host {
        return Ok(Placement::Whole(None));
    }
    if let Some(ab) = work.uploaded.get(d).and_then(Option::as_ref) {
        return Ok(Placement::Whole(Some(ab.clone())));
    }
    if !fits_whole(device, work) {
        return Ok(Placement::PerChunk);
    }
    match upload_operands(device, work.a, work.b) {
        Ok(ab) => Ok(Placement::Whole(Some(ab))),
        Err(Error::OutOfMemory { .. }) => Ok(Placement::PerChunk),
        Err(e) => Err(e),
    }
}

/// A and B uploaded to `device`, once each (once in all where they are one matrix, as in
/// `A · A`: the same or a clone, [`Csr::shares_arrays`]).
pub(crate) fn upload_operands<T: Scalar>(
    device: &dyn Backend<T>,
    a: &Csr<T>,
    b: &Csr<T>,
) -> Result<(ResidentCsr<T>, ResidentCsr<T>)> {
    let ra = device.upload(a)?;
    let rb = if a.shares_arrays(b) {
        ra.clone()
    } else {
        device.upload(b)?
    };
    Ok((ra, rb))
}

/// The next tasks for device `d`: its own list, else some of the queue; `None` when the run
/// is over for it. The tasks of a device that takes its operands chunk by chunk (`per_chunk`)
/// stay apart.
fn next_batch<T: Scalar>(
    shared: &Shared<T>,
    work: &Work<'_, T>,
    d: usize,
    per_chunk: bool,
) -> Option<Vec<Task>> {
    let mut state = shared.lock();
    loop {
        if state.abort.is_some() || !state.live[d] {
            return None;
        }
        if shared.caller.is_cancelled() {
            shared.abort(&mut state, Error::Cancelled);
            return None;
        }
        if !state.own[d].is_empty() {
            let mut own: Vec<Task> = state.own[d].drain(..).collect();
            if per_chunk {
                // Chunks of one panel of B one after another: the device keeps the panel.
                own.sort_by_key(Task::place);
                return Some(own);
            }
            let taken = own.len();
            let batch = merge_adjacent(own);
            state.outstanding -= taken - batch.len();
            return Some(batch);
        }
        let batch = take_from_queue(&mut state, work, d, per_chunk);
        if !batch.is_empty() {
            return Some(batch);
        }
        if state.outstanding == 0 {
            return None;
        }
        // Work may still come back from a device that fails.
        state = shared
            .wake
            .wait_timeout(state, IDLE_POLL)
            .map(|(g, _)| g)
            .unwrap_or_else(|p| p.into_inner().0);
    }
}

/// Work stealing, weighted by speed. A device's speed is what it reached in this run, else in
/// earlier ones. The queue holds the chunks in row order (per panel of B); the fastest device
/// takes from its front, the others from its back, so each batch is a run of adjacent rows,
/// computed as one chunk (one call, one part of C). A batch is about half the device's share
/// of what is left (guided self-scheduling with shares by speed), so batches shrink towards
/// the end; a device of unknown speed takes one chunk, which measures it. The chunks of a
/// device that places them one by one (`per_chunk`) stay apart, in the queue's order. A
/// device that holds A and B whole takes a chunk together with the chunks of the same rows in
/// B's other panels, all of whose columns it computes as one chunk: B is cut into panels for
/// the devices that cannot hold it, and a panel costs the others a walk over A's rows and
/// their rows of B per panel, for no gain.
fn take_from_queue<T: Scalar>(
    state: &mut State<T>,
    work: &Work<'_, T>,
    d: usize,
    per_chunk: bool,
) -> Vec<Task> {
    let speed = |k: usize| state.reports[k].speed().or(work.speeds[k]);
    let live: Vec<usize> = (0..state.live.len()).filter(|&k| state.live[k]).collect();
    let known: Vec<f64> = live.iter().filter_map(|&k| speed(k)).collect();
    let mine = speed(d);
    let fastest = match mine {
        Some(s) => known.iter().all(|&o| o <= s),
        None => false,
    };
    let goal = match mine {
        Some(s) => {
            let mean = known.iter().sum::<f64>() / known.len().max(1) as f64;
            let total = known.iter().sum::<f64>() + mean * (live.len() - known.len()) as f64;
            let left: u64 = state.queue.iter().map(|t| t.products).sum();
            (left as f64 * s / total.max(f64::MIN_POSITIVE) / 2.0) as u64
        }
        _ => 0,
    };
    let eligible = |t: &Task| !t.excluded.contains(&d);
    let mut batch = Vec::new();
    let mut products = 0u64;
    loop {
        let next = if fastest {
            state.queue.iter().position(eligible)
        } else {
            state.queue.iter().rposition(eligible)
        };
        let Some(task) = next.and_then(|i| state.queue.remove(i)) else {
            break;
        };
        products += task.products;
        if !per_chunk && !work.panels.is_empty() {
            let rows = task.chunk.rows.clone();
            let mut i = 0;
            while i < state.queue.len() {
                let t = &state.queue[i];
                if t.chunk.rows == rows && eligible(t) {
                    if let Some(sibling) = state.queue.remove(i) {
                        products += sibling.products;
                        batch.push(sibling);
                    }
                } else {
                    i += 1;
                }
            }
        }
        batch.push(task);
        if products >= goal {
            break;
        }
    }
    if per_chunk {
        batch.sort_by_key(Task::place);
        return batch;
    }
    let taken = batch.len();
    let batch = merge_adjacent(batch);
    state.outstanding -= taken - batch.len();
    batch
}

/// `batch` with every run of chunks of the same rows in adjacent panels of B made one chunk of
/// their columns, then every run of chunks of adjacent rows (same columns) made one chunk: one
/// call and one part of C instead of several. Only chunks with the same exclusions merge;
/// halves of a chunk that ran out of memory stay apart.
fn merge_adjacent(mut batch: Vec<Task>) -> Vec<Task> {
    let mergeable = |x: &Task, y: &Task| x.excluded == y.excluded && x.splits == 0 && y.splits == 0;
    batch.sort_by_key(|t| (t.chunk.rows.start, t.chunk.cols.start));
    let mut across = merge_runs(
        batch,
        |last, next| {
            last.chunk.rows == next.chunk.rows
                && last.chunk.cols.end == next.chunk.cols.start
                && mergeable(last, next)
        },
        |last, next| last.chunk.cols.end = next.chunk.cols.end,
    );
    across.sort_by_key(Task::place);
    merge_runs(
        across,
        |last, next| {
            last.chunk.cols == next.chunk.cols
                && last.chunk.rows.end == next.chunk.rows.start
                && mergeable(last, next)
        },
        |last, next| last.chunk.rows.end = next.chunk.rows.end,
    )
}

/// `tasks` with each task that `joins` the one before it folded into it by `extend` (its
/// products added, the tasks it is made of kept in `parts`).
fn merge_runs(
    tasks: Vec<Task>,
    joins: impl Fn(&Task, &Task) -> bool,
    extend: impl Fn(&mut Task, &Task),
) -> Vec<Task> {
    let mut merged: Vec<Task> = Vec::with_capacity(tasks.len());
    for mut task in tasks {
        match merged.last_mut() {
            Some(last) if joins(last, &task) => {
                if last.parts.is_empty() {
                    let first = last.clone();
                    last.parts.push(first);
                }
                extend(last, &task);
                last.products += task.products;
                last.credited += task.credited;
                if task.parts.is_empty() {
                    last.parts.push(task);
                } else {
                    last.parts.append(&mut task.parts);
                }
            }
            _ => merged.push(task),
        }
    }
    merged
}

/// One device's work on one batch: `finished[i]` set for each chunk of the batch the device
/// finished, written into its complete place in C, or come back as `tiles[i]`; `credited[i]`
/// the products of chunk `i` counted in the caller's progress so far.
struct Call<'w, 'a, T: Scalar> {
    device: &'w dyn Backend<T>,
    work: &'w Work<'a, T>,
    run: &'w RunControl,
    relay: &'w Mutex<Relay>,
    caller: &'w RunControl,
    finished: &'w mut [bool],
    credited: &'w mut [u64],
    tiles: &'w mut [Option<Csr<T>>],
}

impl<T: Scalar> Call<'_, '_, T> {
    /// Runs `batch` as one call, or one call per panel of B for a device that takes its
    /// operands chunk by chunk.
    fn compute(&mut self, placement: &Placement<T>, batch: &[Task]) -> Result<()> {
        let work = self.work;
        let (a, b): (CsrOperand<'_, T>, CsrOperand<'_, T>) = match placement {
            Placement::Whole(Some((ra, rb))) => {
                (CsrOperand::Resident(ra), CsrOperand::Resident(rb))
            }
            Placement::Whole(None) => (work.a.into(), work.b.into()),
            Placement::PerChunk => return self.compute_by_panel(batch),
        };
        let chunks = batch.iter().map(|t| t.chunk.clone()).collect();
        self.call(a, b, batch, chunks, 0)
    }

    /// Runs `batch` on a device that takes its operands chunk by chunk: one call per panel of
    /// B the batch reaches (the panel cut beforehand, or B), its chunks' columns made relative
    /// to the panel, so that the device is handed no more of B than one panel.
    fn compute_by_panel(&mut self, batch: &[Task]) -> Result<()> {
        let work = self.work;
        let panel_of = |cols: &Range<usize>| {
            work.panels
                .iter()
                .find(|(p, _)| p.start <= cols.start && cols.end <= p.end)
                .map_or((0, work.b), |(p, panel)| (p.start, panel))
        };
        let mut start = 0;
        while start < batch.len() {
            let (first, panel) = panel_of(&batch[start].chunk.cols);
            let mut end = start + 1;
            while end < batch.len() && std::ptr::eq(panel_of(&batch[end].chunk.cols).1, panel) {
                end += 1;
            }
            let chunks = batch[start..end]
                .iter()
                .map(|t| ProductChunk {
                    rows: t.chunk.rows.clone(),
                    cols: t.chunk.cols.start - first..t.chunk.cols.end - first,
                })
                .collect();
            self.call(
                work.a.into(),
                panel.into(),
                &batch[start..end],
                chunks,
                start,
            )
            .map_err(|e| match e {
                Error::InChunk { index, source } => (*source).in_chunk(start + index),
                e => e,
            })?;
            start = end;
        }
        Ok(())
    }

    /// One call for `tasks` (from position `at` of the batch), computed as `chunks` of `a` and
    /// `b`, each chunk written into C or handed back.
    fn call(
        &mut self,
        a: CsrOperand<'_, T>,
        b: CsrOperand<'_, T>,
        tasks: &[Task],
        chunks: Vec<ProductChunk>,
        at: usize,
    ) -> Result<()> {
        lock_relay(self.relay).begin(tasks, at, self.run.progress());
        let outcome = match self.work.c {
            Some(c) => self.call_into(c, a, b, tasks, chunks, at),
            None => self.call_for_tiles(a, b, tasks, chunks, at),
        };
        lock_relay(self.relay).end(self.credited);
        outcome
    }

    /// One call whose chunks are written into their places in `c`.
    fn call_into(
        &mut self,
        c: &ProductBuffer<T>,
        a: CsrOperand<'_, T>,
        b: CsrOperand<'_, T>,
        tasks: &[Task],
        chunks: Vec<ProductChunk>,
        at: usize,
    ) -> Result<()> {
        let mut places: Vec<ChunkPlace<'_, T>> = Vec::with_capacity(tasks.len());
        for (task, chunk) in tasks.iter().zip(chunks) {
            let segments = task.segments(c.layout())?;
            // SAFETY: the tasks of a run cover C without overlap (a panel's rows, or a
            // split's halves of its task's positions), a task is in one batch at a time, and
            // a batch's places live only for this call: a task given back is placed again
            // only after the call that held it has returned.
            places.push(unsafe { c.place(chunk, task.chunk.cols.start, segments)? });
        }
        let mut told = vec![false; tasks.len()];
        let (caller, relay, run) = (self.caller, self.relay, self.run);
        let outcome = self.device.spgemm_chunks_into(
            a,
            b,
            &mut places,
            self.work.options,
            self.run,
            &mut |i, _timing| {
                let task = task_at(tasks, i)?;
                told[i] = true;
                let rest = lock_relay(relay).finished(i, run.progress());
                count_done(caller, task, rest);
                Ok(())
            },
        );
        for (i, place) in places.iter().enumerate() {
            if told[i] && !place.is_complete() {
                return Err(Error::Internal {
                    backend: self.device.info().backend,
                    what: format!(
                        "chunk of rows {:?} finished with {} of its rows written",
                        place.chunk().rows,
                        place.rows_written()
                    ),
                }
                .in_chunk(i));
            }
            self.finished[at + i] = told[i];
        }
        outcome
    }

    /// One call whose chunks come back as matrices of their own.
    fn call_for_tiles(
        &mut self,
        a: CsrOperand<'_, T>,
        b: CsrOperand<'_, T>,
        tasks: &[Task],
        chunks: Vec<ProductChunk>,
        at: usize,
    ) -> Result<()> {
        let (caller, relay, run) = (self.caller, self.relay, self.run);
        let (finished, tiles) = (&mut *self.finished, &mut *self.tiles);
        self.device
            .spgemm_chunks(a, b, &chunks, self.work.options, self.run, &mut |part| {
                let i = part.index;
                let task = task_at(tasks, i)?;
                let chunk = &task.chunk;
                if part.product.shape() != (chunk.rows.len(), chunk.cols.len()) {
                    return Err(Error::Internal {
                        backend: hetsparse_core::BackendKind::Scheduler,
                        what: format!(
                            "a chunk of rows {:?}, columns {:?} came back {}×{}",
                            chunk.rows,
                            chunk.cols,
                            part.product.nrows(),
                            part.product.ncols()
                        ),
                    });
                }
                let rest = lock_relay(relay).finished(i, run.progress());
                count_done(caller, task, rest);
                tiles[at + i] = Some(part.product);
                finished[at + i] = true;
                Ok(())
            })
    }
}

/// Adds what is left of a finished chunk's products (`rest`: those not passed on while it was
/// computed) to the caller's progress, and says so in a `tracing` event with the products
/// done of those planned.
fn count_done(caller: &RunControl, task: &Task, rest: u64) {
    caller.add_done(rest);
    let progress = caller.progress();
    tracing::debug!(
        rows = ?task.chunk.rows,
        cols = ?task.chunk.cols,
        products = task.products,
        done = progress.done,
        planned = progress.planned,
        "chunk done"
    );
}

/// The task of chunk `i` of a call's batch, which its device said it finished.
fn task_at(tasks: &[Task], i: usize) -> Result<&Task> {
    tasks.get(i).ok_or_else(|| Error::Internal {
        backend: hetsparse_core::BackendKind::Scheduler,
        what: format!("chunk {i} of a batch of {} finished", tasks.len()),
    })
}

/// Counts a chunk as finished, keeping it where it came back as a matrix.
fn deliver<T>(shared: &Shared<T>, d: usize, task: &Task, tile: Option<Csr<T>>) -> Result<()> {
    let mut state = shared.lock();
    if state.abort.is_some() {
        return Err(Error::Cancelled);
    }
    state.outstanding -= 1;
    let report = &mut state.reports[d];
    report.chunks += 1;
    report.products += task.products;
    if let Some(tile) = tile {
        state.tiles.push((task.chunk.clone(), tile));
    }
    if state.outstanding == 0 {
        shared.wake.notify_all();
    }
    Ok(())
}

/// Deals with a failed batch (`rest`: the tasks not delivered, by position in the batch).
/// Returns whether the device goes on.
fn handle_failure<T: Scalar>(
    shared: &Shared<T>,
    work: &Work<'_, T>,
    d: usize,
    error: Error,
    rest: Vec<(usize, Task)>,
) -> bool {
    let (index, cause) = match error {
        Error::InChunk { index, source } => (Some(index), *source),
        e => (None, e),
    };
    // The failing task: the one the error names, else the first not delivered.
    let failing = index.or_else(|| rest.first().map(|(i, _)| *i));
    let mut state = shared.lock();
    if matches!(cause, Error::Cancelled) && (shared.caller.is_cancelled() || state.abort.is_some())
    {
        shared.abort(&mut state, Error::Cancelled);
        return false;
    }
    let mut others = Vec::new();
    let mut failed = None;
    for (i, task) in rest {
        if Some(i) == failing {
            failed = Some(task);
        } else {
            others.push(task);
        }
    }
    for t in others {
        state.requeue(t);
    }
    let name = work.devices[d].info().name;
    match (&cause, failed) {
        (Error::OutOfMemory { .. }, Some(mut task)) if !task.parts.is_empty() => {
            // The chunks it was merged from were planned to fit: back to them, not merged
            // again.
            tracing::info!(device = %name, rows = ?task.chunk.rows, cols = ?task.chunk.cols,
                "out of memory on a merged chunk; back to its parts");
            task.splits += 1;
            state.requeue(task);
            settle(shared, &mut state);
            true
        }
        (Error::OutOfMemory { .. }, Some(task)) => {
            match split(work.a, work.b, work.c.map(ProductBuffer::layout), &task) {
                Some((x, y)) => {
                    tracing::info!(device = %name, rows = ?task.chunk.rows, cols = ?task.chunk.cols,
                        "out of memory on a chunk; splitting it");
                    state.outstanding += 1;
                    state.requeue(x);
                    state.requeue(y);
                }
                None => exclude(&mut state, d, task, cause),
            }
            settle(shared, &mut state);
            true
        }
        (Error::Unsupported { .. } | Error::TooLarge { .. }, Some(task)) => {
            exclude(&mut state, d, task, cause);
            settle(shared, &mut state);
            true
        }
        (_, failed) => {
            drop(state);
            fail_device(shared, d, cause, failed.into_iter().collect());
            false
        }
    }
}

/// `d` cannot compute `task`: queue it for the others.
fn exclude<T>(state: &mut State<T>, d: usize, mut task: Task, cause: Error) {
    task.excluded.push(d);
    state.last_failure = Some(cause);
    state.requeue(task);
    state.check_stranded();
}

/// `d` is out of the run: its tasks go to the others.
fn fail_device<T>(shared: &Shared<T>, d: usize, cause: Error, held: Vec<Task>) {
    let mut state = shared.lock();
    tracing::warn!(device = d, error = %cause, "a backend failed; its chunks go to the others");
    state.live[d] = false;
    state.reports[d].failure = Some(cause.to_string());
    let own: Vec<Task> = state.own[d].drain(..).collect();
    for t in held.into_iter().chain(own) {
        state.requeue(t);
    }
    state.last_failure = Some(cause);
    state.check_stranded();
    settle(shared, &mut state);
}

/// Wakes idle workers, and stops every device if the run was aborted.
fn settle<T>(shared: &Shared<T>, state: &mut State<T>) {
    if let Some(e) = state.abort.take() {
        shared.abort(state, e);
    }
    shared.wake.notify_all();
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Progress passed on inside a call stays with the chunk it was passed on for, and its
    /// completion adds the rest.
    #[test]
    fn the_relay_passes_on_a_chunks_progress_once() {
        let progress = |planned, done| Progress { done, planned };
        let mut second = Task::new(4..8, 0..5, 50);
        second.credited = 10;
        let tasks = [Task::new(0..4, 0..5, 100), second];
        let mut relay = Relay::default();
        relay.begin(&tasks, 3, progress(7, 7));
        // Nothing planned for the chunk yet: nothing to pass on.
        assert_eq!(relay.moved(progress(7, 7)), 0);
        // Half of what the device planned since the chunk began: half its products.
        assert_eq!(relay.moved(progress(1007, 507)), 50);
        assert_eq!(relay.moved(progress(1007, 507)), 0);
        assert_eq!(relay.finished(0, progress(1007, 1007)), 50);
        // The next chunk counts from what the device had reported then, and from its credit.
        assert_eq!(relay.moved(progress(1207, 1107)), 15);
        let mut credited = vec![0; 5];
        relay.end(&mut credited);
        assert_eq!(credited[4], 25);
        // After the call, the device's progress goes nowhere.
        assert_eq!(relay.moved(progress(3000, 3000)), 0);
    }

    #[test]
    fn a_merged_chunk_given_back_spreads_its_credit_over_its_parts() {
        let mut batch = vec![Task::new(0..4, 0..5, 30), Task::new(4..8, 0..5, 20)];
        batch[1].credited = 5;
        let mut merged = merge_adjacent(batch);
        assert_eq!(merged[0].credited, 5);
        merged[0].credited = 40;
        let mut state = State::<f64> {
            own: Vec::new(),
            queue: VecDeque::new(),
            outstanding: 1,
            live: vec![true],
            abort: None,
            last_failure: None,
            tiles: Vec::new(),
            reports: Vec::new(),
        };
        state.requeue(merged.remove(0));
        let credits: Vec<u64> = state.queue.iter().map(|t| t.credited).collect();
        assert_eq!(credits, vec![30, 10]);
        assert_eq!(state.outstanding, 2);
    }

    /// Each task's rows, columns and products.
    fn shapes<'t>(
        tasks: impl IntoIterator<Item = &'t Task>,
    ) -> Vec<(Range<usize>, Range<usize>, u64)> {
        tasks
            .into_iter()
            .map(|t| (t.chunk.rows.clone(), t.chunk.cols.clone(), t.products))
            .collect()
    }

    #[test]
    fn adjacent_chunks_of_a_batch_become_one() {
        let mut split = Task::new(8..10, 0..5, 2);
        split.splits = 1;
        let mut excluded = Task::new(14..16, 0..5, 1);
        excluded.excluded.push(1);
        let batch = vec![
            Task::new(4..8, 0..5, 4),
            excluded,
            Task::new(0..4, 0..5, 3),
            split,
            Task::new(12..14, 0..5, 1),
            Task::new(0..4, 5..9, 7),
        ];
        let merged = shapes(&merge_adjacent(batch));
        // Rows 0..4 are in both panels, so they become one chunk of all columns, which the
        // chunk of rows 4..8 in the first panel alone cannot join.
        assert_eq!(
            merged,
            vec![
                (0..4, 0..9, 10),
                (4..8, 0..5, 4),
                (8..10, 0..5, 2),
                (12..14, 0..5, 1),
                (14..16, 0..5, 1),
            ]
        );
    }

    #[test]
    fn the_same_rows_in_every_panel_become_one_chunk_of_all_columns() {
        let batch = vec![
            Task::new(4..8, 5..9, 1),
            Task::new(0..4, 0..5, 2),
            Task::new(4..8, 0..5, 3),
            Task::new(0..4, 5..9, 4),
            Task::new(4..8, 9..12, 5),
            Task::new(0..4, 9..12, 6),
        ];
        let merged = merge_adjacent(batch);
        assert_eq!(shapes(&merged), vec![(0..8, 0..12, 21)]);
        // It remembers the six chunks it was made of, each as planned.
        let mut parts = shapes(&merged[0].parts);
        parts.sort_by_key(|(r, c, _)| (r.start, c.start));
        assert_eq!(
            parts,
            vec![
                (0..4, 0..5, 2),
                (0..4, 5..9, 4),
                (0..4, 9..12, 6),
                (4..8, 0..5, 3),
                (4..8, 5..9, 1),
                (4..8, 9..12, 5),
            ]
        );
        assert!(merged[0].parts.iter().all(|t| t.parts.is_empty()));
    }
}
