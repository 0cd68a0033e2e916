//! The scheduler's one executor: the tasks of a shared run (SpGEMM chunks, SpMV/SpMM row
//! blocks, band rows) on several backends at once. One thread per backend taking part takes
//! work — its own assigned list first, then the shared queue — and computes it in calls to its
//! backend; what a [`Job`] says is particular to its kind of work: how a batch is taken from
//! the queue, where a device keeps its operands, how a call computes a batch, how a task is
//! halved.
//!
//! Everything else is here, once:
//! - **Failover.** Failures are sorted by what they say about the device:
//!   - out of memory on a task: the task is split ([`Job::split`]) and the pieces queued; a
//!     task that cannot be split is left to the other devices;
//!   - unsupported or too large for this device: the device is excluded from that task;
//!   - anything else (a failed launch, a lost device, an internal error, a panic): the device
//!     is out of this run and its unfinished tasks go to the others.
//!
//!   A task every remaining device is excluded from, or work left with no device alive, ends
//!   the run with the error that stopped it.
//! - **Progress.** The tasks' units are planned in the caller's progress at the start; a
//!   device's own progress inside a call is passed on before its tasks are done (the relay),
//!   and every unit counts once, also for a task given back and computed again.
//! - **Cancellation.** Cancelling the caller's run stops every device; a run that fails stops
//!   the devices still computing.
//! - **Panics.** A backend's panic is that backend's failure; a panic of the caller's own
//!   progress callback reaches the caller as the panic it was.
//!
//! A task is held by one device at a time: one given back is queued again only after the call
//! that held it has returned, so a task that owns a part of the result (a place in C, rows of
//! a band) is written by one call at a time.

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use hetsparse_core::{Backend, Error, Progress, Result, RunControl, Scalar};

use crate::chunking::MAX_SPLITS;
use crate::guard::{self, EscapedPanic};
use crate::report::DeviceReport;

/// How long an idle worker sleeps before it looks at the caller's cancellation again.
const IDLE_POLL: Duration = Duration::from_millis(20);

/// A unit of scheduled work, as the executor sees it.
pub(crate) trait Task: Send {
    /// Its work in the run's unit (intermediate products, or entries times columns): its
    /// share of the caller's progress and of a device's measured speed.
    fn units(&self) -> u64;
    /// How many of the run's tasks it stands for: more than one for tasks merged into one
    /// call, which go back to the queue as those tasks.
    fn pieces(&self) -> usize {
        1
    }
    /// Devices (by position) that cannot compute it.
    fn excluded(&self) -> &[usize];
    /// Device `d` cannot compute it.
    fn exclude(&mut self, d: usize);
    /// Of its units, those already counted in the caller's progress (passed on while a device
    /// computed it, before the device gave it back).
    fn credited(&self) -> u64;
    /// Sets [`Task::credited`].
    fn set_credited(&mut self, units: u64);
}

/// A task of rows: a block of the rows of a result (SpMV's, SpMM's or a band product's), with
/// what it owns of that result (`slots`: where it writes its rows, for a result written in
/// place).
pub(crate) struct RowTask<S> {
    pub rows: Range<usize>,
    pub units: u64,
    pub excluded: Vec<usize>,
    pub credited: u64,
    /// How many times the block it came from was halved.
    pub splits: u32,
    pub slots: S,
}

impl<S> RowTask<S> {
    /// The rows `rows` worth `units`, owning `slots`.
    pub(crate) fn new(rows: Range<usize>, units: u64, slots: S) -> Self {
        RowTask {
            rows,
            units,
            excluded: Vec::new(),
            credited: 0,
            splits: 0,
            slots,
        }
    }

    /// The first `rows` of the block and the rest, each owning its part of `slots` (split by
    /// `split_slots`), or the block itself where it cannot be split: a single row, or halved
    /// [`MAX_SPLITS`] times already.
    pub(crate) fn halve(
        self,
        units: impl Fn(Range<usize>) -> u64,
        split_slots: impl FnOnce(S, usize) -> (S, S),
    ) -> std::result::Result<[Self; 2], Self> {
        if self.rows.len() < 2 || self.splits >= MAX_SPLITS {
            return Err(self);
        }
        let half = self.rows.len() / 2;
        let mid = self.rows.start + half;
        let (first, second) = split_slots(self.slots, half);
        let piece = |rows: Range<usize>, slots| RowTask {
            units: units(rows.clone()),
            rows,
            excluded: self.excluded.clone(),
            credited: 0,
            splits: self.splits + 1,
            slots,
        };
        Ok([
            piece(self.rows.start..mid, first),
            piece(mid..self.rows.end, second),
        ])
    }
}

impl<S: Send> Task for RowTask<S> {
    fn units(&self) -> u64 {
        self.units
    }
    fn excluded(&self) -> &[usize] {
        &self.excluded
    }
    fn exclude(&mut self, d: usize) {
        self.excluded.push(d);
    }
    fn credited(&self) -> u64 {
        self.credited
    }
    fn set_credited(&mut self, units: u64) {
        self.credited = units;
    }
}

/// What a device may take from the queue, by its speed against the others'.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Share {
    /// No live device is known to be faster.
    pub fastest: bool,
    /// About half the device's share (by speed) of the units left in the queue; 0 for a device
    /// of unknown speed, which should take one task and be measured on it.
    pub goal: u64,
}

/// One kind of work for the executor.
pub(crate) trait Job<T: Scalar>: Sync {
    /// The task.
    type Task: Task;
    /// What a finished task may leave behind (a product's tile, rows of a result); tasks that
    /// write into the result in place leave nothing.
    type Output: Send;
    /// Where a device keeps its operands from one call to the next, made on its first call.
    type Placement: Send;

    /// Places the operands on device `d` before its first call.
    fn place(&self, device: &dyn Backend<T>, d: usize) -> Result<Self::Placement>;

    /// Device `d`'s own tasks as its next batch (`placement`: where it keeps its operands,
    /// `None` before its first call).
    fn own_batch(
        &self,
        _d: usize,
        _placement: Option<&Self::Placement>,
        own: Vec<Self::Task>,
    ) -> Vec<Self::Task> {
        own
    }

    /// Device `d`'s next batch from the queue (empty when nothing is left that it may
    /// compute). By default one task it is not excluded from: from the front for the fastest
    /// device, else from the back.
    fn take(
        &self,
        queue: &mut VecDeque<Self::Task>,
        d: usize,
        _placement: Option<&Self::Placement>,
        share: Share,
    ) -> Vec<Self::Task> {
        let eligible = |t: &Self::Task| !t.excluded().contains(&d);
        let at = if share.fastest {
            queue.iter().position(eligible)
        } else {
            queue.iter().rposition(eligible)
        };
        at.and_then(|i| queue.remove(i)).into_iter().collect()
    }

    /// Puts a task given back into the queue (by default at its back).
    fn requeue(&self, queue: &mut VecDeque<Self::Task>, task: Self::Task) {
        queue.push_back(task);
    }

    /// Splits a task a device ran out of memory on into smaller ones, or gives it back
    /// (`Err`) where it cannot be split.
    fn split(&self, task: Self::Task) -> std::result::Result<Vec<Self::Task>, Self::Task>;

    /// Computes `batch` on `device`, telling `call` of each task it finished.
    fn compute(
        &self,
        device: &dyn Backend<T>,
        placement: &Self::Placement,
        batch: &mut [Self::Task],
        call: &mut Call<'_, Self::Output>,
    ) -> Result<()>;
}

/// What a run is given: the backends, each one's own tasks and the queue.
pub(crate) struct Plan<'a, T: Scalar, Tk> {
    /// Every backend of the scheduler, by position.
    pub devices: &'a [Arc<dyn Backend<T>>],
    /// Whether each takes part.
    pub taking_part: Vec<bool>,
    /// Each device's assigned tasks, in the order it runs them.
    pub own: Vec<Vec<Tk>>,
    /// Tasks for whichever device is free, in the queue's order.
    pub shared: Vec<Tk>,
    /// Each device's speed from earlier runs (units per second), where known.
    pub speeds: Vec<Option<f64>>,
}

/// What a run did: the tasks that left an output, with it, and each device's report.
pub(crate) struct Finished<Tk, O> {
    pub outputs: Vec<(Tk, O)>,
    pub reports: Vec<DeviceReport>,
}

/// Runs `job`'s tasks to the end: every one finished, or the error that stopped the run.
pub(crate) fn run<T: Scalar, J: Job<T>>(
    job: &J,
    plan: Plan<'_, T, J::Task>,
    caller: &RunControl,
) -> Result<Finished<J::Task, J::Output>> {
    let Plan {
        devices,
        taking_part,
        own,
        shared,
        speeds,
    } = plan;
    let n = devices.len();
    let all = || shared.iter().chain(own.iter().flatten());
    let outstanding = all().map(Task::pieces).sum();
    caller.add_planned(all().map(Task::units).sum());
    let relays: Vec<Arc<Mutex<Relay>>> = (0..n).map(|_| Arc::default()).collect();
    let runs = relays
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
        .collect();
    let shared = Shared {
        state: Mutex::new(State {
            own: own.into_iter().map(VecDeque::from).collect(),
            queue: shared.into(),
            outstanding,
            live: taking_part.clone(),
            abort: None,
            last_failure: None,
            outputs: Vec::new(),
            reports: devices
                .iter()
                .map(|d| DeviceReport::new(d.info().name))
                .collect(),
        }),
        wake: Condvar::new(),
        runs,
        relays,
        caller: caller.clone(),
        devices,
        speeds,
    };
    let escaped = EscapedPanic::default();
    std::thread::scope(|scope| {
        for d in (0..n).filter(|&d| taking_part[d]) {
            let (shared, escaped) = (&shared, &escaped);
            scope.spawn(move || escaped.catch(|| worker(job, shared, d)));
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
            what: format!("{} tasks were left unfinished", state.outstanding),
        }));
    }
    Ok(Finished {
        outputs: state.outputs,
        reports: state.reports,
    })
}

struct State<Tk, O> {
    own: Vec<VecDeque<Tk>>,
    queue: VecDeque<Tk>,
    /// Tasks not yet finished (queued or being computed), counted in [`Task::pieces`].
    outstanding: usize,
    live: Vec<bool>,
    abort: Option<Error>,
    /// The most recent device failure, returned if no device is left.
    last_failure: Option<Error>,
    outputs: Vec<(Tk, O)>,
    reports: Vec<DeviceReport>,
}

impl<Tk: Task, O> State<Tk, O> {
    /// Ends the run when some task has no live device left to take it.
    fn check_stranded(&mut self) {
        if self.abort.is_some() {
            return;
        }
        let live: Vec<usize> = (0..self.live.len()).filter(|&d| self.live[d]).collect();
        if live.is_empty() {
            if self.outstanding > 0 {
                self.abort = Some(self.last_failure.take().unwrap_or_else(|| Error::Internal {
                    backend: hetsparse_core::BackendKind::Scheduler,
                    what: "no backend is left to compute the remaining tasks".into(),
                }));
            }
            return;
        }
        let stranded = self
            .queue
            .iter()
            .chain(self.own.iter().flatten())
            .any(|t| live.iter().all(|d| t.excluded().contains(d)));
        if stranded {
            self.abort = Some(self.last_failure.take().unwrap_or_else(|| Error::Internal {
                backend: hetsparse_core::BackendKind::Scheduler,
                what: "no backend can compute a task of the run".into(),
            }));
        }
    }

    /// The speed device `k` reached in this run, else in earlier ones.
    fn speed(&self, k: usize, speeds: &[Option<f64>]) -> Option<f64> {
        self.reports[k].speed().or(speeds.get(k).copied().flatten())
    }

    /// What device `d` may take from the queue now: guided self-scheduling with shares by
    /// speed, so that batches shrink towards the end of the run.
    fn share(&self, d: usize, speeds: &[Option<f64>]) -> Share {
        let live: Vec<usize> = (0..self.live.len()).filter(|&k| self.live[k]).collect();
        let known: Vec<f64> = live.iter().filter_map(|&k| self.speed(k, speeds)).collect();
        let Some(mine) = self.speed(d, speeds) else {
            return Share {
                fastest: false,
                goal: 0,
            };
        };
        let mean = known.iter().sum::<f64>() / known.len().max(1) as f64;
        let total = known.iter().sum::<f64>() + mean * (live.len() - known.len()) as f64;
        let left: u64 = self.queue.iter().map(Task::units).sum();
        Share {
            fastest: known.iter().all(|&o| o <= mine),
            goal: (left as f64 * mine / total.max(f64::MIN_POSITIVE) / 2.0) as u64,
        }
    }
}

struct Shared<'a, T: Scalar, Tk, O> {
    state: Mutex<State<Tk, O>>,
    wake: Condvar,
    /// One run per device, cancelled with the caller's and when the run is aborted, whose
    /// progress goes to the device's relay.
    runs: Vec<RunControl>,
    relays: Vec<Arc<Mutex<Relay>>>,
    caller: RunControl,
    devices: &'a [Arc<dyn Backend<T>>],
    speeds: Vec<Option<f64>>,
}

impl<T: Scalar, Tk, O> Shared<'_, T, Tk, O> {
    fn lock(&self) -> MutexGuard<'_, State<Tk, O>> {
        // A worker that panicked while holding the lock left the state consistent (every
        // update is a few assignments), so keep going with it.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn abort(&self, state: &mut State<Tk, O>, error: Error) {
        if state.abort.is_none() {
            state.abort = Some(error);
        }
        for r in &self.runs {
            r.cancel();
        }
        self.wake.notify_all();
    }

    /// Wakes idle workers, and stops every device if the run was aborted.
    fn settle(&self, state: &mut State<Tk, O>) {
        if let Some(e) = state.abort.take() {
            self.abort(state, e);
        }
        self.wake.notify_all();
    }
}

fn worker<T: Scalar, J: Job<T>>(job: &J, shared: &Shared<'_, T, J::Task, J::Output>, d: usize) {
    let device = shared.devices[d].as_ref();
    let _span = tracing::debug_span!("worker", device = d).entered();
    // Placed on the first batch, so that a device that gets no work uploads nothing.
    let mut placement: Option<J::Placement> = None;
    loop {
        let Some(mut batch) = next_batch(job, shared, d, placement.as_ref()) else {
            return;
        };
        let begun = Instant::now();
        let mut call = Call {
            run: &shared.runs[d],
            caller: &shared.caller,
            relay: &shared.relays[d],
            finished: (0..batch.len()).map(|_| None).collect(),
            credited: batch.iter().map(Task::credited).collect(),
        };
        let outcome = guard::device_call(device, &shared.caller, || {
            if placement.is_none() {
                placement = Some(job.place(device, d)?);
            }
            match placement.as_ref() {
                Some(placement) => job.compute(device, placement, &mut batch, &mut call),
                None => Ok(()),
            }
        });
        // A call that panicked did not close its relay.
        call.end();
        let Call {
            finished, credited, ..
        } = call;
        shared.lock().reports[d].busy += begun.elapsed();
        let mut rest = Vec::new();
        let mut delivered = Ok(());
        for (i, ((mut task, finished), credited)) in
            batch.into_iter().zip(finished).zip(credited).enumerate()
        {
            match finished {
                // The tasks finished before a failure count too.
                Some(output) if delivered.is_ok() => delivered = deliver(shared, d, task, output),
                Some(_) => {}
                None => {
                    task.set_credited(credited);
                    rest.push((i, task));
                }
            }
        }
        if let Err(e) = outcome.and(delivered) {
            if !handle_failure(job, shared, d, e, rest) {
                return;
            }
        }
    }
}

/// The next tasks for device `d`: its own list, else some of the queue; `None` when the run
/// is over for it.
fn next_batch<T: Scalar, J: Job<T>>(
    job: &J,
    shared: &Shared<'_, T, J::Task, J::Output>,
    d: usize,
    placement: Option<&J::Placement>,
) -> Option<Vec<J::Task>> {
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
            let own: Vec<J::Task> = state.own[d].drain(..).collect();
            return Some(job.own_batch(d, placement, own));
        }
        let share = state.share(d, &shared.speeds);
        let batch = job.take(&mut state.queue, d, placement, share);
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

/// Counts a task as finished, keeping what it left.
fn deliver<T: Scalar, Tk: Task, O>(
    shared: &Shared<'_, T, Tk, O>,
    d: usize,
    task: Tk,
    output: Option<O>,
) -> Result<()> {
    let mut state = shared.lock();
    if state.abort.is_some() {
        return Err(Error::Cancelled);
    }
    state.outstanding -= task.pieces();
    let report = &mut state.reports[d];
    report.chunks += 1;
    report.products += task.units();
    if let Some(output) = output {
        state.outputs.push((task, output));
    }
    if state.outstanding == 0 {
        shared.wake.notify_all();
    }
    Ok(())
}

/// Deals with a failed batch (`rest`: the tasks not delivered, by position in the batch).
/// Returns whether the device goes on.
fn handle_failure<T: Scalar, J: Job<T>>(
    job: &J,
    shared: &Shared<'_, T, J::Task, J::Output>,
    d: usize,
    error: Error,
    rest: Vec<(usize, J::Task)>,
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
    let mut failed = None;
    for (i, task) in rest {
        if Some(i) == failing {
            failed = Some(task);
        } else {
            job.requeue(&mut state.queue, task);
        }
    }
    let name = shared.devices[d].info().name;
    match (&cause, failed) {
        (Error::OutOfMemory { .. }, Some(task)) => {
            let pieces = task.pieces();
            match job.split(task) {
                Ok(parts) => {
                    tracing::info!(device = %name, error = %cause, "out of memory on a task; splitting it");
                    state.outstanding += parts.iter().map(Task::pieces).sum::<usize>();
                    state.outstanding -= pieces;
                    for part in parts {
                        job.requeue(&mut state.queue, part);
                    }
                }
                Err(task) => exclude(job, &mut state, d, task, cause),
            }
            shared.settle(&mut state);
            true
        }
        (Error::Unsupported { .. } | Error::TooLarge { .. }, Some(task)) => {
            exclude(job, &mut state, d, task, cause);
            shared.settle(&mut state);
            true
        }
        (_, failed) => {
            tracing::warn!(device = %name, error = %cause, "a backend failed; its work goes to the others");
            state.live[d] = false;
            state.reports[d].failure = Some(cause.to_string());
            let own: Vec<J::Task> = state.own[d].drain(..).collect();
            for t in failed.into_iter().chain(own) {
                job.requeue(&mut state.queue, t);
            }
            state.last_failure = Some(cause);
            state.check_stranded();
            shared.settle(&mut state);
            false
        }
    }
}

/// `d` cannot compute `task`: queue it for the others.
fn exclude<T: Scalar, J: Job<T>>(
    job: &J,
    state: &mut State<J::Task, J::Output>,
    d: usize,
    mut task: J::Task,
    cause: Error,
) {
    task.exclude(d);
    state.last_failure = Some(cause);
    job.requeue(&mut state.queue, task);
    state.check_stranded();
}

/// One device's call on a batch, as a [`Job::compute`] sees it: the device's run (progress,
/// cancellation), and where it says which tasks it finished.
pub(crate) struct Call<'c, O> {
    run: &'c RunControl,
    caller: &'c RunControl,
    relay: &'c Mutex<Relay>,
    /// Per task of the batch: `Some` once finished, with what it left.
    finished: Vec<Option<Option<O>>>,
    /// Per task of the batch: its units counted in the caller's progress so far.
    credited: Vec<u64>,
}

impl<'c, O> Call<'c, O> {
    /// The device's run, to hand to the backend.
    pub(crate) fn run(&self) -> &'c RunControl {
        self.run
    }

    /// A call of the backend on `tasks`, from position `at` of the batch, begins: the
    /// device's progress is passed on for them from here on.
    pub(crate) fn begin<Tk: Task>(&mut self, tasks: &[Tk], at: usize) {
        lock_relay(self.relay).begin(tasks, at, self.run.progress());
    }

    /// The backend's call is over: what was passed on for its tasks is kept with them.
    pub(crate) fn end(&mut self) {
        lock_relay(self.relay).end(&mut self.credited);
    }

    /// Task `i` of the backend's current call (from [`Call::begin`]) is done: what was not
    /// yet passed on of its units goes to the caller's progress.
    pub(crate) fn count_done(&self, i: usize) {
        let rest = lock_relay(self.relay).finished(i, self.run.progress());
        self.caller.add_done(rest);
        let progress = self.caller.progress();
        tracing::debug!(
            task = i,
            done = progress.done,
            planned = progress.planned,
            "task done"
        );
    }

    /// Task `index` of the batch is finished, leaving `output`.
    pub(crate) fn finish(&mut self, index: usize, output: Option<O>) {
        if let Some(slot) = self.finished.get_mut(index) {
            *slot = Some(output);
        }
    }

    /// Runs one backend call on `tasks` (from position `at` of the batch) between
    /// [`Call::begin`] and [`Call::end`].
    pub(crate) fn within<Tk: Task, R>(
        &mut self,
        tasks: &[Tk],
        at: usize,
        body: impl FnOnce(&mut Self) -> Result<R>,
    ) -> Result<R> {
        self.begin(tasks, at);
        let outcome = body(self);
        self.end();
        outcome
    }
}

/// Passes a device's progress inside a call on to the caller before the call's tasks are done,
/// in the caller's measure (the tasks' units, which for a panel of B are estimates the device
/// does not know): the task being computed (the first of the call not yet done) gets the share
/// of its units that the device reports done of what it planned since that task became the
/// current one. A task's completion adds what was not passed on for it, and what was passed on
/// for a task given back stays with it ([`Task::credited`]), so every unit counts once.
#[derive(Default)]
pub(crate) struct Relay {
    /// Each task of the call: its units, those passed on, and whether it is done.
    tasks: Vec<(u64, u64, bool)>,
    /// Where the call's tasks start in the device's batch.
    at: usize,
    current: Option<usize>,
    /// The device's progress when the current task became current.
    base: Progress,
}

impl Relay {
    /// A call of `tasks` (from position `at` of the batch) begins.
    fn begin<Tk: Task>(&mut self, tasks: &[Tk], at: usize, device: Progress) {
        self.tasks = tasks
            .iter()
            .map(|t| (t.units(), t.credited(), false))
            .collect();
        self.at = at;
        self.current = (!tasks.is_empty()).then_some(0);
        self.base = device;
    }

    /// The device's progress moved: the units to pass on now.
    fn moved(&mut self, device: Progress) -> u64 {
        let Some((units, passed, _)) = self.current.and_then(|i| self.tasks.get_mut(i)) else {
            return 0;
        };
        let planned = device.planned.saturating_sub(self.base.planned);
        if planned == 0 {
            return 0;
        }
        let done = device.done.saturating_sub(self.base.done).min(planned);
        // At most `units`, as `done <= planned`.
        let reached = (u128::from(*units) * u128::from(done) / u128::from(planned)) as u64;
        let more = reached.saturating_sub(*passed);
        *passed += more;
        more
    }

    /// Task `i` of the call is done: the units left to count for it.
    fn finished(&mut self, i: usize, device: Progress) -> u64 {
        let Some((units, passed, done)) = self.tasks.get_mut(i) else {
            return 0;
        };
        *done = true;
        let rest = units.saturating_sub(*passed);
        if self.current == Some(i) {
            self.current = (i + 1..self.tasks.len()).find(|&k| !self.tasks[k].2);
            self.base = device;
        }
        rest
    }

    /// The call is over (returned, failed or panicked): what was passed on for its tasks goes
    /// to `credited`, by position in the batch.
    fn end(&mut self, credited: &mut [u64]) {
        for (k, &(_, passed, _)) in self.tasks.iter().enumerate() {
            if let Some(c) = credited.get_mut(self.at + k) {
                *c = passed;
            }
        }
        self.tasks.clear();
        self.current = None;
    }
}

/// Locks a relay; one left by a panicking device thread holds consistent numbers.
fn lock_relay(relay: &Mutex<Relay>) -> MutexGuard<'_, Relay> {
    relay.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Progress passed on inside a call stays with the chunk it was passed on for, and its
    /// completion adds the rest.
    #[test]
    fn the_relay_passes_on_a_chunks_progress_once() {
        let progress = |planned, done| Progress { done, planned };
        let mut second = crate::chunking::Task::new(4..8, 0..5, 50);
        second.credited = 10;
        let tasks = [crate::chunking::Task::new(0..4, 0..5, 100), second];
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
}
