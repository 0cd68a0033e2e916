//! Run control: cancelling a run, watching its progress, and what each computed chunk cost.

use std::ops::Range;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::format::Csr;
use crate::scalar::Scalar;

/// Cancellation and progress of one run, shared between the caller and the backend.
///
/// Clones share the same state: keep one, hand another to the operation, call
/// [`cancel`](RunControl::cancel) from any thread. Backends check it between batches of work
/// (row ranges, chunks, kernel batches), so a run stops within one batch and returns
/// [`Error::Cancelled`]; nothing it produced so far is returned. Progress counts intermediate
/// products (the work of a SpGEMM; entries of A times columns of the dense operand for SpMM
/// and SpMV): [`Progress::planned`] grows when the backend has analysed what it will do,
/// [`Progress::done`] as batches complete. Read it with [`progress`](RunControl::progress), or
/// have it handed to a callback as it moves ([`with_progress`](RunControl::with_progress)).
///
/// ```
/// use hetsparse_core::RunControl;
/// let run = RunControl::new();
/// let handle = run.clone();
/// handle.cancel();
/// assert!(run.is_cancelled());
/// assert!(run.checkpoint().is_err());
/// ```
#[derive(Clone, Debug)]
pub struct RunControl {
    state: Arc<RunState>,
    watched: bool,
}

impl Default for RunControl {
    fn default() -> Self {
        RunControl {
            state: Arc::default(),
            watched: true,
        }
    }
}

#[derive(Debug, Default)]
struct RunState {
    cancelled: AtomicBool,
    /// A run whose cancellation this one follows.
    parent: Option<Arc<RunState>>,
    /// A run whose progress this one's adds to.
    counts_into: Option<Arc<RunState>>,
    planned: AtomicU64,
    done: AtomicU64,
    /// Multiply-adds of masked products ([`MaskedWork`]), this run's and its children's.
    masked_multiply_adds: AtomicU64,
    unmasked_multiply_adds: AtomicU64,
    /// Called with this run's progress each time it moves.
    on_progress: Option<ProgressCallback>,
    /// Set when the callback panicked: the panic is the caller's, not a device's.
    callback_panicked: AtomicBool,
}

impl RunState {
    /// Tells the callback, if any, where the run is now. A panic in it cancels the run,
    /// marks it as the caller's ([`RunControl::callback_panicked`]) and goes on unwinding.
    fn moved(&self) {
        if let Some(callback) = &self.on_progress {
            if let Err(payload) = catch_unwind(AssertUnwindSafe(|| (callback.0)(self.progress()))) {
                self.callback_panicked.store(true, Ordering::Release);
                self.cancelled.store(true, Ordering::Release);
                resume_unwind(payload);
            }
        }
    }

    fn progress(&self) -> Progress {
        Progress {
            done: self.done.load(Ordering::Acquire),
            planned: self.planned.load(Ordering::Acquire),
        }
    }
}

/// What [`RunControl::with_progress`] calls.
struct ProgressCallback(Box<dyn Fn(Progress) + Send + Sync>);

impl std::fmt::Debug for ProgressCallback {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProgressCallback")
    }
}

/// Products done of products planned.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Progress {
    /// Intermediate products computed so far.
    pub done: u64,
    /// Intermediate products the run will compute (known once the backend has analysed it).
    pub planned: u64,
}

impl Progress {
    /// `done / planned`, 1 when nothing is planned.
    pub fn fraction(&self) -> f64 {
        if self.planned == 0 {
            1.0
        } else {
            self.done as f64 / self.planned as f64
        }
    }
}

/// What the mask of a masked product saved: the multiply-adds done (products the mask let
/// through) against those of the same product without its mask. Triangle counting's
/// `C⟨L⟩ = L·L`, for one, does a fraction of `L·L`'s. Read from the run after the product
/// ([`RunControl::masked_work`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MaskedWork {
    /// Multiply-adds done.
    pub multiply_adds: u64,
    /// Multiply-adds of the products without their masks.
    pub unmasked_multiply_adds: u64,
}

impl MaskedWork {
    /// `multiply_adds / unmasked_multiply_adds`, 1 when nothing was unmasked.
    pub fn fraction(&self) -> f64 {
        if self.unmasked_multiply_adds == 0 {
            1.0
        } else {
            self.multiply_adds as f64 / self.unmasked_multiply_adds as f64
        }
    }
}

impl std::ops::AddAssign for MaskedWork {
    fn add_assign(&mut self, other: Self) {
        self.multiply_adds += other.multiply_adds;
        self.unmasked_multiply_adds += other.unmasked_multiply_adds;
    }
}

impl RunControl {
    /// A run that is not cancelled and has no progress yet.
    pub fn new() -> Self {
        Self::default()
    }
    /// A run nobody watches (what the host conveniences such as
    /// [`Backend::spgemm`](crate::Backend::spgemm) pass): backends may skip counting the
    /// products they plan, where that would cost a pass of its own.
    pub fn unwatched() -> Self {
        RunControl {
            state: Arc::default(),
            watched: false,
        }
    }
    /// A run that calls `callback` with its progress each time it moves: when a backend has
    /// planned or finished a batch of work (a range of rows, a chunk, a kernel batch), and,
    /// for a scheduler, when a chunk is done. It is called on the thread that did the work,
    /// from several threads at once where a backend computes in parallel, so it should be
    /// short (keep the numbers, wake a thread that draws them); calls from different threads
    /// may arrive out of order, so the largest `done` seen is the progress.
    ///
    /// ```
    /// use std::sync::atomic::{AtomicU64, Ordering};
    /// use std::sync::Arc;
    /// use hetsparse_core::RunControl;
    /// let seen = Arc::new(AtomicU64::new(0));
    /// let kept = Arc::clone(&seen);
    /// let run = RunControl::with_progress(move |p| {
    ///     kept.fetch_max(p.done, Ordering::Relaxed);
    /// });
    /// run.add_planned(10);
    /// run.add_done(4);
    /// assert_eq!(seen.load(Ordering::Relaxed), 4);
    /// ```
    pub fn with_progress(callback: impl Fn(Progress) + Send + Sync + 'static) -> Self {
        RunControl {
            state: Arc::new(RunState {
                on_progress: Some(ProgressCallback(Box::new(callback))),
                ..RunState::default()
            }),
            watched: true,
        }
    }
    /// Whether someone may read the progress (false only for [`unwatched`](Self::unwatched)).
    pub fn is_watched(&self) -> bool {
        self.watched
    }
    /// Asks the run to stop at its next checkpoint.
    pub fn cancel(&self) {
        self.state.cancelled.store(true, Ordering::Release);
    }
    /// A run of its own (own cancellation, own progress) that is also cancelled when this one
    /// is: what a scheduler hands each device, so that it can stop one device's work without
    /// stopping the caller's run, and count progress itself.
    ///
    /// ```
    /// use hetsparse_core::RunControl;
    /// let run = RunControl::new();
    /// let (first, second) = (run.child(), run.child());
    /// first.cancel();
    /// assert!(!run.is_cancelled() && !second.is_cancelled());
    /// run.cancel();
    /// assert!(second.is_cancelled());
    /// ```
    pub fn child(&self) -> RunControl {
        RunControl {
            state: Arc::new(RunState {
                parent: Some(Arc::clone(&self.state)),
                ..RunState::default()
            }),
            watched: self.watched,
        }
    }
    /// A [`child`](Self::child) that calls `callback` as its progress moves (see
    /// [`with_progress`](Self::with_progress)): what a scheduler hands a device to pass the
    /// device's progress inside a chunk on to its caller, in the caller's measure.
    ///
    /// ```
    /// use std::sync::atomic::{AtomicU64, Ordering};
    /// use std::sync::Arc;
    /// use hetsparse_core::RunControl;
    /// let run = RunControl::new();
    /// let heard = Arc::new(AtomicU64::new(0));
    /// let kept = Arc::clone(&heard);
    /// let device = run.child_with_progress(move |p| kept.store(p.done, Ordering::Relaxed));
    /// device.add_done(3);
    /// assert_eq!((heard.load(Ordering::Relaxed), run.progress().done), (3, 0));
    /// run.cancel();
    /// assert!(device.is_cancelled());
    /// ```
    pub fn child_with_progress(
        &self,
        callback: impl Fn(Progress) + Send + Sync + 'static,
    ) -> RunControl {
        RunControl {
            state: Arc::new(RunState {
                parent: Some(Arc::clone(&self.state)),
                on_progress: Some(ProgressCallback(Box::new(callback))),
                ..RunState::default()
            }),
            watched: self.watched,
        }
    }
    /// A run of its own progress whose products also count as this one's, cancelled when
    /// this one is, and watched as it is: what a scheduler hands a device that runs a product
    /// alone, to learn from the device how many products the run had while its caller still
    /// sees them come in.
    ///
    /// ```
    /// use hetsparse_core::RunControl;
    /// let run = RunControl::new();
    /// let device = run.tracked();
    /// device.add_planned(10);
    /// device.add_done(4);
    /// run.add_done(1);
    /// assert_eq!((device.progress().planned, device.progress().done), (10, 4));
    /// assert_eq!((run.progress().planned, run.progress().done), (10, 5));
    /// run.cancel();
    /// assert!(device.is_cancelled());
    /// ```
    pub fn tracked(&self) -> RunControl {
        RunControl {
            state: Arc::new(RunState {
                parent: Some(Arc::clone(&self.state)),
                counts_into: Some(Arc::clone(&self.state)),
                ..RunState::default()
            }),
            watched: self.watched,
        }
    }
    /// Whether [`cancel`](Self::cancel) was called, on this run or one it is a
    /// [`child`](Self::child) of.
    pub fn is_cancelled(&self) -> bool {
        let mut state = Some(&self.state);
        while let Some(s) = state {
            if s.cancelled.load(Ordering::Acquire) {
                return true;
            }
            state = s.parent.as_ref();
        }
        false
    }
    /// Whether a progress callback of this run, or of one it is a [`child`](Self::child) of,
    /// panicked. Such a panic unwinds through the backend that reported the progress; whoever
    /// catches panics of devices (a scheduler) asks this to tell the caller's panic from a
    /// device's failure, and passes it on to the caller
    /// ([`std::panic::resume_unwind`]) instead of blaming the device.
    ///
    /// ```
    /// use hetsparse_core::RunControl;
    /// let run = RunControl::with_progress(|_| panic!("the caller's own bug"));
    /// let device = run.child();
    /// let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run.add_done(1)));
    /// assert!(caught.is_err());
    /// assert!(device.callback_panicked() && device.is_cancelled());
    /// ```
    pub fn callback_panicked(&self) -> bool {
        let mut state = Some(&self.state);
        while let Some(s) = state {
            if s.callback_panicked.load(Ordering::Acquire) {
                return true;
            }
            state = s.parent.as_ref();
        }
        false
    }
    /// [`Error::Cancelled`] once the run was cancelled: backends call it between batches.
    pub fn checkpoint(&self) -> Result<()> {
        if self.is_cancelled() {
            Err(Error::Cancelled)
        } else {
            Ok(())
        }
    }
    /// Products done and planned so far.
    pub fn progress(&self) -> Progress {
        self.state.progress()
    }
    /// For backends: counts the intermediate products of `a · b` and adds them to the plan,
    /// returning them (0, and no pass over the operands, when the run is
    /// [`unwatched`](Self::unwatched)). Call [`add_done`](Self::add_done) with the count when
    /// the product is computed.
    pub fn plan_product<T: Scalar>(&self, a: &Csr<T>, b: &Csr<T>) -> Result<u64> {
        if !self.watched {
            return Ok(0);
        }
        let products = crate::analysis::total_products(a, b)?;
        self.add_planned(products);
        Ok(products)
    }
    /// For backends: [`plan_product`](Self::plan_product) of rows `rows` of `a` only (a chunk),
    /// without copying them. `a · b` must have been checked to chain and `rows` to lie in `a`.
    pub fn plan_product_rows<T: Scalar>(&self, a: &Csr<T>, rows: Range<usize>, b: &Csr<T>) -> u64 {
        if !self.watched {
            return 0;
        }
        let offsets = a.row_offsets();
        let entries = offsets[rows.start] as usize..offsets[rows.end] as usize;
        let products = a.col_indices()[entries]
            .par_iter()
            .map(|&k| b.row_nnz(k as usize))
            .sum();
        self.add_planned(products);
        products
    }
    /// For backends: [`plan_product`](Self::plan_product) with a spliced B. `a · b` must
    /// have been checked to chain.
    pub fn plan_product_spliced<T: Scalar>(
        &self,
        a: &Csr<T>,
        b: &crate::format::SplicedCsr<'_, T>,
    ) -> u64 {
        if !self.watched {
            return 0;
        }
        let products = a
            .col_indices()
            .par_iter()
            .map(|&k| b.row(k as usize).0.len() as u64)
            .sum();
        self.add_planned(products);
        products
    }
    /// For backends: `products` more will be computed.
    pub fn add_planned(&self, products: u64) {
        let mut state = Some(&self.state);
        while let Some(s) = state {
            s.planned.fetch_add(products, Ordering::AcqRel);
            s.moved();
            state = s.counts_into.as_ref();
        }
    }
    /// For backends: `products` more were computed.
    pub fn add_done(&self, products: u64) {
        let mut state = Some(&self.state);
        while let Some(s) = state {
            s.done.fetch_add(products, Ordering::AcqRel);
            s.moved();
            state = s.counts_into.as_ref();
        }
    }
    /// The multiply-adds of the masked products run under this run and its children (a
    /// scheduler's chunks, a context's devices) so far, as the backends that compute masks
    /// report them; zero where none was masked or the backend does not count them (the CPU
    /// backend does, and the OpenCL backend for masks that are not complemented).
    ///
    /// ```
    /// use hetsparse_core::{MaskedWork, RunControl};
    /// let run = RunControl::new();
    /// let work = MaskedWork { multiply_adds: 3, unmasked_multiply_adds: 12 };
    /// run.child().add_masked_work(work);
    /// assert_eq!(run.masked_work(), work);
    /// assert_eq!(run.masked_work().fraction(), 0.25);
    /// ```
    pub fn masked_work(&self) -> MaskedWork {
        MaskedWork {
            multiply_adds: self.state.masked_multiply_adds.load(Ordering::Acquire),
            unmasked_multiply_adds: self.state.unmasked_multiply_adds.load(Ordering::Acquire),
        }
    }
    /// For backends: a masked product did `work`. Counted in this run and every run it is a
    /// child of, so the caller's run sees the work of every chunk and device.
    pub fn add_masked_work(&self, work: MaskedWork) {
        let mut state = Some(&self.state);
        while let Some(s) = state {
            s.masked_multiply_adds
                .fetch_add(work.multiply_adds, Ordering::AcqRel);
            s.unmasked_multiply_adds
                .fetch_add(work.unmasked_multiply_adds, Ordering::AcqRel);
            state = s.parent.as_ref();
        }
    }
}

/// What computing one chunk cost: what the scheduler calibrates device speeds from (Matam's
/// Heuristic II reads t_c and t_g from these).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct ChunkTiming {
    /// From the chunk's start to its result being ready for the sink.
    pub wall: Duration,
    /// Time in kernels (measured with device events on a GPU; the computation's time on a CPU).
    pub kernel: Duration,
    /// Time copying host to device.
    pub h2d: Duration,
    /// Time copying device to host.
    pub d2h: Duration,
    /// Bytes copied host to device.
    pub h2d_bytes: u64,
    /// Bytes copied device to host.
    pub d2h_bytes: u64,
}

impl ChunkTiming {
    /// A chunk computed in host memory: all of `wall` is computation, nothing moved.
    pub fn host(wall: Duration) -> Self {
        ChunkTiming {
            wall,
            kernel: wall,
            ..Self::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[test]
    fn the_callback_hears_of_the_products_of_a_tracked_run_but_not_of_a_child() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let kept = Arc::clone(&seen);
        let run =
            RunControl::with_progress(move |p| kept.lock().unwrap().push((p.done, p.planned)));
        let device = run.tracked();
        device.add_planned(10);
        device.add_done(4);
        // A child counts for itself: the caller hears nothing of it.
        run.child().add_done(100);
        run.add_done(6);
        assert_eq!(*seen.lock().unwrap(), vec![(0, 10), (4, 10), (10, 10)]);
        assert!(run.is_watched());
    }
}
