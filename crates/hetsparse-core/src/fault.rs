//! A backend that fails on purpose, for testing schedulers that must survive a failing device.
//!
//! [`FaultyBackend`] wraps another backend and injects one [`Fault`] into its units of work. A
//! unit is one chunk of [`Backend::spgemm_chunks`] (counted when the chunk starts), or one call
//! of `spgemm_with`, `spmm_with`, `spmv_with`, `spgemm_resident`, `plan_spgemm`,
//! `execute_spgemm`, `dia_spgemm` or `dia_spgemm_rows`. Units are numbered from 0 across all
//! calls. Everything else (residency, requirements, resident SpMM/SpMV, BSR products) goes to
//! the wrapped backend unchanged and is not counted.
//!
//! ```
//! use std::sync::Arc;
//! use hetsparse_core::fault::{Fault, FaultKind, FaultyBackend};
//! use hetsparse_core::{Backend, Csr, ReferenceBackend, SpgemmAlgorithm};
//! let fault = Fault::FailOnUnit { unit: 1, kind: FaultKind::DeviceLost, sticky: false };
//! let backend = FaultyBackend::<f64>::new(Arc::new(ReferenceBackend), fault);
//! let a = Csr::<f64>::identity(3)?;
//! assert!(backend.spgemm(&a, &a, SpgemmAlgorithm::Auto).is_ok());
//! let lost = backend.spgemm(&a, &a, SpgemmAlgorithm::Auto);
//! assert!(matches!(lost, Err(e) if e.is_retryable()));
//! assert!(backend.spgemm(&a, &a, SpgemmAlgorithm::Auto).is_ok());
//! assert_eq!((backend.units_started(), backend.units_failed()), (3, 1));
//! # Ok::<(), hetsparse_core::Error>(())
//! ```

use std::mem::size_of;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::backend::memory::csr_bytes;
use crate::backend::{
    Backend, Capabilities, ChunkPipeline, ChunkProduct, ChunkSink, CsrOperand, DenseOperand,
    Device, DeviceInfo, DeviceProfile, MemoryPool, MemoryRequirement, MemorySpace, ProductChunk,
    Residency, ResidentCsr, ResidentDense, ResidentOps, RunControl, SparseOperand, SpgemmOptions,
    SpgemmPlan, SpmmOptions, SpmvOptions, Validated, VectorOperand, VectorProductKind,
    VectorProductOptions,
};
use crate::error::{DeviceFault, Error, Result};
use crate::format::{Bsr, Csr, Dense, Dia, SparseRef};
use crate::scalar::Scalar;

/// The backend name of a [`FaultyBackend`] and of the errors it injects.
const NAME: crate::BackendKind = crate::BackendKind::Other("faulty");

/// How long a hanging unit waits for its cancellation before giving up with
/// [`Error::Internal`], so that a broken test cannot hang forever.
const HANG_CAP: Duration = Duration::from_secs(60);

/// What goes wrong, and when.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Fault {
    /// Nothing: the wrapped backend's behaviour.
    None,
    /// The `unit`-th unit of work (0-based, counted across calls) fails with `kind`, and every
    /// later one too if `sticky`.
    FailOnUnit {
        /// The first unit to fail.
        unit: u64,
        /// How it fails.
        kind: FaultKind,
        /// Whether every later unit fails too (a lost device stays lost).
        sticky: bool,
    },
    /// A unit whose memory need exceeds `bytes` fails with [`Error::OutOfMemory`] whose
    /// `available_bytes` is `bytes`. The need is the bytes of the unit's operands (A's rows in
    /// the chunk and all of B for SpGEMM) and of its output (for SpGEMM a bound: per row, the
    /// lesser of its products and the chunk's width). A SpGEMM unit whose operands are resident
    /// but not held in host memory needs 0.
    MemoryLimit {
        /// The memory the backend pretends to have.
        bytes: u64,
    },
    /// The `unit`-th unit hangs until the [`RunControl`] it was given is cancelled, then
    /// returns [`Error::Cancelled`]. A unit with no `RunControl` (`plan_spgemm`), or one never
    /// cancelled, gives up after 60 s with [`Error::Internal`].
    HangOnUnit {
        /// The unit that hangs.
        unit: u64,
    },
    /// Every unit waits `per_unit` before it runs, as a slow device would (or a fast one
    /// behind a slow link): for testing choices made from measured speeds.
    Delay {
        /// The wait before each unit.
        per_unit: Duration,
    },
}

/// How an injected failure shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FaultKind {
    /// [`Error::Device`] with [`DeviceFault::LaunchFailed`].
    LaunchFailed,
    /// [`Error::Device`] with [`DeviceFault::DeviceLost`].
    DeviceLost,
    /// [`Error::OutOfMemory`] for the unit's memory need, with nothing available.
    OutOfMemory,
    /// A panic, as a bug in a backend or driver would cause.
    Panic,
}

/// A backend that runs another and injects a [`Fault`] into its units of work.
pub struct FaultyBackend<T> {
    inner: Arc<dyn Backend<T>>,
    fault: Fault,
    started: AtomicU64,
    failed: AtomicU64,
    /// The SpGEMM chunks it was asked for, in order.
    chunks: Mutex<Vec<ProductChunk>>,
    /// What it reports as its device (`None`: the wrapped backend's).
    posing_as: Option<(DeviceInfo, DeviceProfile)>,
}

impl<T: Scalar> FaultyBackend<T> {
    /// Wraps `inner`, injecting `fault`.
    pub fn new(inner: Arc<dyn Backend<T>>, fault: Fault) -> Self {
        FaultyBackend {
            inner,
            fault,
            started: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            chunks: Mutex::new(Vec::new()),
            posing_as: None,
        }
    }

    /// Reports `info` and `profile` as its device instead of the wrapped backend's (its
    /// backend name stays `faulty`): for testing cost models with a device that claims to be a
    /// GPU while it computes on the host.
    pub fn posing_as(mut self, info: DeviceInfo, profile: DeviceProfile) -> Self {
        self.posing_as = Some((info, profile));
        self
    }

    /// The SpGEMM chunks it was asked to compute so far, in the order asked (each chunk once
    /// per call that asked for it).
    pub fn chunks_asked(&self) -> Vec<ProductChunk> {
        self.chunks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// How many units of work it has begun (failed ones included).
    pub fn units_started(&self) -> u64 {
        self.started.load(Ordering::Acquire)
    }

    /// How many units of work an injected fault made fail (hangs and panics included).
    pub fn units_failed(&self) -> u64 {
        self.failed.load(Ordering::Acquire)
    }

    /// Starts a unit of work: counts it and injects the fault if it is due. `need` gives the
    /// unit's memory need, computed only when a fault asks for it.
    fn begin(
        &self,
        what: &str,
        need: impl FnOnce() -> u64,
        run: Option<&RunControl>,
    ) -> Result<()> {
        let k = self.started.fetch_add(1, Ordering::AcqRel);
        let outcome = match self.fault {
            Fault::None => Ok(()),
            Fault::FailOnUnit { unit, kind, sticky } if k == unit || (sticky && k > unit) => {
                Err(self.injected(k, kind, what, need))
            }
            Fault::FailOnUnit { .. } => Ok(()),
            Fault::MemoryLimit { bytes } => {
                let needed = need();
                if needed > bytes {
                    Err(out_of_memory(k, what, needed, bytes))
                } else {
                    Ok(())
                }
            }
            Fault::HangOnUnit { unit } if k == unit => Err(hang(k, run)),
            Fault::HangOnUnit { .. } => Ok(()),
            Fault::Delay { per_unit } => {
                std::thread::sleep(per_unit);
                Ok(())
            }
        };
        if outcome.is_err() {
            self.failed.fetch_add(1, Ordering::AcqRel);
        }
        outcome
    }

    fn injected(&self, k: u64, kind: FaultKind, what: &str, need: impl FnOnce() -> u64) -> Error {
        let device = |fault, message: &str| Error::Device {
            backend: NAME,
            context: format!("unit {k}"),
            message: message.into(),
            fault,
            source: None,
        };
        match kind {
            FaultKind::LaunchFailed => device(DeviceFault::LaunchFailed, "injected launch failure"),
            FaultKind::DeviceLost => device(DeviceFault::DeviceLost, "injected device loss"),
            FaultKind::OutOfMemory => out_of_memory(k, what, need().max(1), 0),
            FaultKind::Panic => {
                self.failed.fetch_add(1, Ordering::AcqRel);
                panic!("{NAME}: injected panic in unit {k} ({what})")
            }
        }
    }
}

fn out_of_memory(k: u64, what: &str, needed_bytes: u64, available_bytes: u64) -> Error {
    Error::OutOfMemory {
        backend: NAME,
        what: format!("{what} (unit {k})"),
        needed_bytes,
        available_bytes,
    }
}

/// Waits for `run` to be cancelled (at most [`HANG_CAP`]) and returns the error to report.
fn hang(k: u64, run: Option<&RunControl>) -> Error {
    let start = Instant::now();
    while start.elapsed() < HANG_CAP {
        if run.is_some_and(RunControl::is_cancelled) {
            return Error::Cancelled;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Error::Internal {
        backend: NAME,
        what: format!("unit {k} hung for {HANG_CAP:?} and was never cancelled"),
    }
}

/// Memory need of rows `rows` of `a` times columns `cols` of `b` (0 unless both are in host
/// memory): A's rows, all of B, and a bound of the output.
fn spgemm_need<T: Scalar>(
    a: CsrOperand<'_, T>,
    b: CsrOperand<'_, T>,
    rows: Range<usize>,
    cols: Range<usize>,
) -> u64 {
    let host = |m| match m {
        CsrOperand::Host(m) => Some(m),
        CsrOperand::Resident(r) => r.host(),
    };
    let (Some(a), Some(b)) = (host(a), host(b)) else {
        return 0;
    };
    if a.ncols() != b.nrows() || rows.end > a.nrows() {
        return 0; // the wrapped backend reports the error
    }
    let width = cols.len() as u64;
    let offsets = a.row_offsets();
    let a_nnz = offsets[rows.end] - offsets[rows.start];
    let bound: u64 = rows
        .clone()
        .map(|i| {
            let products: u64 = a.row(i).0.iter().map(|&k| b.row_nnz(k as usize)).sum();
            products.min(width)
        })
        .sum();
    let vb = size_of::<T>();
    csr_bytes(rows.len(), a_nnz, vb)
        .saturating_add(csr_bytes(b.nrows(), b.nnz(), vb))
        .saturating_add(csr_bytes(rows.len(), bound, vb))
}

/// Memory need of a whole product.
fn product_need<T: Scalar>(a: CsrOperand<'_, T>, b: CsrOperand<'_, T>) -> u64 {
    spgemm_need(a, b, 0..a.shape().0, 0..b.shape().1)
}

/// Memory need of SpMV or SpMM: A as CSR, the dense operand (`cols` columns) and the output.
fn dense_need<T: Scalar>(a: SparseOperand<'_, T>, cols: usize) -> u64 {
    let (rows, inner) = a.shape();
    let nnz = match a {
        SparseOperand::Host(SparseRef::Csr(m)) => m.nnz(),
        // A matrix whose CSR copy the host cannot hold needs more than any budget.
        SparseOperand::Host(m) => m.to_csr().map_or(u64::MAX, |c| c.nnz()),
        SparseOperand::Resident(r) => r.nnz(),
    };
    let dense = ((inner + rows) as u64).saturating_mul(cols as u64);
    csr_bytes(rows, nnz, size_of::<T>()).saturating_add(dense.saturating_mul(size_of::<T>() as u64))
}

/// Memory need of DIA × DIA: both operands' diagonals and a bound of C's (one per sum of
/// offsets).
fn dia_need<T: Scalar>(a: &Dia<T>, b: &Dia<T>) -> u64 {
    let mut sums: Vec<i64> = a
        .offsets()
        .iter()
        .flat_map(|oa| b.offsets().iter().map(move |ob| oa + ob))
        .collect();
    sums.sort_unstable();
    sums.dedup();
    let slots = (a.data().len() as u64)
        .saturating_add(b.data().len() as u64)
        .saturating_add((a.nrows() as u64).saturating_mul(sums.len() as u64));
    slots.saturating_mul(size_of::<T>() as u64)
}

/// Memory need of `rows` rows of DIA × DIA: those rows of A's diagonals, as many of B's (the
/// rows A's band reaches there, to within its width) and of C's `diagonals`.
fn dia_rows_need<T: Scalar>(a: &Dia<T>, b: &Dia<T>, rows: usize, diagonals: usize) -> u64 {
    let per_row = a.offsets().len() + b.offsets().len() + diagonals;
    (rows as u64)
        .saturating_mul(per_row as u64)
        .saturating_mul(size_of::<T>() as u64)
}

impl<T: Scalar> Device for FaultyBackend<T> {
    fn info(&self) -> DeviceInfo {
        let inner = match &self.posing_as {
            Some((info, _)) => info.clone(),
            None => self.inner.info(),
        };
        DeviceInfo {
            backend: NAME,
            name: format!("{NAME} {}", inner.name),
            ..inner
        }
    }
    fn capabilities(&self) -> &Capabilities {
        self.inner.capabilities()
    }
    fn memory_space(&self) -> MemorySpace {
        self.inner.memory_space()
    }
    fn memory_pool(&self) -> Option<Arc<MemoryPool>> {
        self.inner.memory_pool()
    }
    fn profile(&self) -> DeviceProfile {
        match &self.posing_as {
            Some((_, profile)) => profile.clone(),
            None => self.inner.profile(),
        }
    }
    fn driver_version(&self) -> Option<String> {
        self.inner.driver_version()
    }
    fn available(&self) -> Result<()> {
        self.inner.available()
    }
}

impl<T: Scalar> Backend<T> for FaultyBackend<T> {
    fn spgemm_checked(
        &self,
        a: CsrOperand<'_, T>,
        b: CsrOperand<'_, T>,
        options: &SpgemmOptions,
        run: &RunControl,
        _checked: Validated,
    ) -> Result<Csr<T>> {
        self.begin("SpGEMM", || product_need(a, b), Some(run))?;
        self.inner.spgemm_with(a, b, options, run)
    }

    fn spmm_checked(
        &self,
        a: SparseOperand<'_, T>,
        b: DenseOperand<'_, T>,
        options: &SpmmOptions,
        run: &RunControl,
        _checked: Validated,
    ) -> Result<Dense<T>> {
        self.begin("SpMM", || dense_need(a, b.shape().1), Some(run))?;
        self.inner.spmm_with(a, b, options, run)
    }

    fn spmv_checked(
        &self,
        a: SparseOperand<'_, T>,
        x: VectorOperand<'_, T>,
        options: &SpmvOptions,
        run: &RunControl,
        _checked: Validated,
    ) -> Result<Vec<T>> {
        self.begin("SpMV", || dense_need(a, 1), Some(run))?;
        self.inner.spmv_with(a, x, options, run)
    }

    fn vector_product_checked(
        &self,
        kind: VectorProductKind,
        a: CsrOperand<'_, T>,
        u: &crate::SparseVector<T>,
        options: &VectorProductOptions,
        run: &RunControl,
        _checked: Validated,
    ) -> Result<crate::SparseVector<T>> {
        // A, u and a dense result of w's length.
        let need = || {
            let (u_len, w_len) = kind.lengths(a.shape());
            csr_bytes(a.shape().0, a.nnz(), size_of::<T>())
                .saturating_add(((u_len + w_len) as u64).saturating_mul(size_of::<T>() as u64))
        };
        self.begin(kind.name(), need, Some(run))?;
        match kind {
            VectorProductKind::Mxv => self.inner.mxv_with(a, u, options, run),
            VectorProductKind::Vxm => self.inner.vxm_with(u, a, options, run),
        }
    }

    fn dia_spgemm_checked(&self, a: &Dia<T>, b: &Dia<T>, _checked: Validated) -> Result<Dia<T>> {
        self.begin("DIA×DIA SpGEMM", || dia_need(a, b), None)?;
        self.inner.dia_spgemm(a, b)
    }
    fn bsr_spgemm_checked(&self, a: &Bsr<T>, b: &Bsr<T>, _checked: Validated) -> Result<Bsr<T>> {
        self.inner.bsr_spgemm(a, b)
    }

    fn residency(&self) -> Residency<'_, T> {
        Residency::Own(self)
    }

    fn chunk_pipeline(&self) -> Option<&dyn ChunkPipeline<T>> {
        Some(self)
    }
}

impl<T: Scalar> ResidentOps<T> for FaultyBackend<T> {
    fn store(&self, m: &Csr<T>) -> Result<ResidentCsr<T>> {
        self.inner.upload(m)
    }
    fn store_owned(&self, m: Csr<T>) -> Result<ResidentCsr<T>> {
        self.inner.upload_owned(m)
    }
    fn store_values(
        &self,
        pattern: &ResidentCsr<T>,
        values: &[T],
        _checked: Validated,
    ) -> Result<ResidentCsr<T>> {
        self.inner.upload_values(pattern, values)
    }
    fn load(&self, m: &ResidentCsr<T>, _checked: Validated) -> Result<Csr<T>> {
        self.inner.download(m)
    }
    fn load_values(&self, m: &ResidentCsr<T>, _checked: Validated) -> Result<Vec<T>> {
        self.inner.download_values(m)
    }
    fn store_dense(&self, d: &Dense<T>) -> Result<ResidentDense<T>> {
        self.inner.upload_dense(d)
    }
    fn load_dense(&self, d: &ResidentDense<T>, _checked: Validated) -> Result<Dense<T>> {
        self.inner.download_dense(d)
    }

    fn spgemm_stored(
        &self,
        a: CsrOperand<'_, T>,
        b: CsrOperand<'_, T>,
        options: &SpgemmOptions,
        run: &RunControl,
        _checked: Validated,
    ) -> Result<ResidentCsr<T>> {
        self.begin("SpGEMM", || product_need(a, b), Some(run))?;
        self.inner.spgemm_resident(a, b, options, run)
    }
    fn spmm_stored(
        &self,
        a: SparseOperand<'_, T>,
        b: DenseOperand<'_, T>,
        options: &SpmmOptions,
        run: &RunControl,
        _checked: Validated,
    ) -> Result<ResidentDense<T>> {
        self.inner.spmm_resident(a, b, options, run)
    }
    fn spmv_stored(
        &self,
        a: SparseOperand<'_, T>,
        x: VectorOperand<'_, T>,
        options: &SpmvOptions,
        run: &RunControl,
        _checked: Validated,
    ) -> Result<ResidentDense<T>> {
        self.inner.spmv_resident(a, x, options, run)
    }

    fn plan(
        &self,
        a: CsrOperand<'_, T>,
        b: CsrOperand<'_, T>,
        options: &SpgemmOptions,
        _checked: Validated,
    ) -> Result<SpgemmPlan<T>> {
        self.begin("SpGEMM plan", || product_need(a, b), None)?;
        self.inner.plan_spgemm(a, b, options)
    }

    fn execute(
        &self,
        plan: &SpgemmPlan<T>,
        a: CsrOperand<'_, T>,
        b: CsrOperand<'_, T>,
        run: &RunControl,
        _checked: Validated,
    ) -> Result<ResidentCsr<T>> {
        let need = || {
            let vb = size_of::<T>();
            csr_bytes(a.shape().0, a.nnz(), vb)
                .saturating_add(csr_bytes(b.shape().0, b.nnz(), vb))
                .saturating_add(csr_bytes(plan.shape().0, plan.c_nnz(), vb))
        };
        self.begin("SpGEMM execution", need, Some(run))?;
        self.inner.execute_spgemm(plan, a, b, run)
    }

    fn requirement(
        &self,
        a: CsrOperand<'_, T>,
        b: CsrOperand<'_, T>,
        options: &SpgemmOptions,
        _checked: Validated,
    ) -> Result<MemoryRequirement> {
        self.inner.spgemm_requirement(a, b, options)
    }
}

impl<T: Scalar> ChunkPipeline<T> for FaultyBackend<T> {
    /// Runs the wrapped backend's `spgemm_chunks` one chunk at a time, so that a fault hits
    /// exactly its chunk; chunks keep their positions in `chunks`.
    fn chunks(
        &self,
        a: CsrOperand<'_, T>,
        b: CsrOperand<'_, T>,
        chunks: &[ProductChunk],
        options: &SpgemmOptions,
        run: &RunControl,
        sink: &mut ChunkSink<'_, T>,
        _checked: Validated,
    ) -> Result<()> {
        self.chunks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend_from_slice(chunks);
        for (index, chunk) in chunks.iter().enumerate() {
            run.checkpoint()?;
            let need = || spgemm_need(a, b, chunk.rows.clone(), chunk.cols.clone());
            self.begin("SpGEMM chunk", need, Some(run))
                .map_err(|e| e.in_chunk(index))?;
            let mut sink_failed = false;
            let mut forward = |product: ChunkProduct<T>| {
                let result = sink(ChunkProduct { index, ..product });
                sink_failed = result.is_err();
                result
            };
            let one = std::slice::from_ref(chunk);
            let result = self
                .inner
                .spgemm_chunks(a, b, one, options, run, &mut forward);
            result.map_err(|e| match e {
                e if sink_failed => e,
                Error::InChunk { source, .. } => source.in_chunk(index),
                e => e.in_chunk(index),
            })?;
        }
        Ok(())
    }

    fn dia_rows(
        &self,
        a: &Dia<T>,
        b: &Dia<T>,
        rows: Range<usize>,
        offsets: &[i64],
        c: &mut [&mut [std::mem::MaybeUninit<T>]],
        _checked: Validated,
    ) -> Result<()> {
        let need = || dia_rows_need::<T>(a, b, rows.len(), offsets.len());
        self.begin("DIA×DIA SpGEMM rows", need, None)?;
        self.inner.dia_spgemm_rows(a, b, rows, offsets, c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::Layout;
    use crate::generate;
    use crate::reference::ReferenceBackend;
    use crate::SpgemmAlgorithm;

    fn faulty(fault: Fault) -> FaultyBackend<f64> {
        FaultyBackend::new(Arc::new(ReferenceBackend), fault)
    }

    fn operands() -> (Csr<f64>, Csr<f64>) {
        (
            generate::uniform(40, 30, 4, 1),
            generate::uniform(30, 50, 5, 2),
        )
    }

    fn chunks(rows: &[Range<usize>], cols: Range<usize>) -> Vec<ProductChunk> {
        rows.iter()
            .map(|r| ProductChunk {
                rows: r.clone(),
                cols: cols.clone(),
            })
            .collect()
    }

    /// Runs `spgemm_chunks`, returning what reached the sink and the outcome.
    fn run_chunks(
        backend: &FaultyBackend<f64>,
        a: &Csr<f64>,
        b: &Csr<f64>,
        list: &[ProductChunk],
        run: &RunControl,
    ) -> (Vec<ChunkProduct<f64>>, Result<()>) {
        let mut got = Vec::new();
        let result = backend.spgemm_chunks(
            a.into(),
            b.into(),
            list,
            &SpgemmOptions::new(),
            run,
            &mut |p| {
                got.push(p);
                Ok(())
            },
        );
        (got, result)
    }

    fn expected(a: &Csr<f64>, b: &Csr<f64>, chunk: &ProductChunk) -> Csr<f64> {
        let rows = a.rows(chunk.rows.clone()).expect("rows");
        let panel = b.column_panel(chunk.cols.clone()).expect("panel");
        ReferenceBackend
            .spgemm(&rows, &panel, SpgemmAlgorithm::Auto)
            .expect("product")
    }

    #[test]
    fn fails_exactly_on_the_kth_chunk() {
        let (a, b) = operands();
        let backend = faulty(Fault::FailOnUnit {
            unit: 2,
            kind: FaultKind::LaunchFailed,
            sticky: false,
        });
        let list = chunks(&[0..10, 10..20, 20..30, 30..40], 5..45);
        let (got, result) = run_chunks(&backend, &a, &b, &list, &RunControl::new());
        assert_eq!(got.iter().map(|p| p.index).collect::<Vec<_>>(), [0, 1]);
        for p in &got {
            assert_eq!(p.chunk, list[p.index]);
            assert_eq!(p.product, expected(&a, &b, &list[p.index]));
        }
        let e = result.expect_err("chunk 2 fails");
        assert!(e.is_retryable());
        match &e {
            Error::InChunk { index: 2, source } => assert!(matches!(
                **source,
                Error::Device {
                    fault: DeviceFault::LaunchFailed,
                    backend: NAME,
                    ..
                }
            )),
            other => panic!("unexpected error {other:?}"),
        }
        assert_eq!((backend.units_started(), backend.units_failed()), (3, 1));
        // Counting goes on across calls; the fault is not sticky, so every later chunk passes.
        let (got, result) = run_chunks(&backend, &a, &b, &list, &RunControl::new());
        result.expect("no fault due");
        assert_eq!(
            got.iter().map(|p| p.index).collect::<Vec<_>>(),
            [0, 1, 2, 3]
        );
        assert_eq!(got[3].product, expected(&a, &b, &list[3]));
        assert_eq!((backend.units_started(), backend.units_failed()), (7, 1));
    }

    #[test]
    fn a_sticky_fault_keeps_failing() {
        let (a, b) = operands();
        let backend = faulty(Fault::FailOnUnit {
            unit: 1,
            kind: FaultKind::DeviceLost,
            sticky: true,
        });
        let list = chunks(&[0..20, 20..40], 0..50);
        let (got, result) = run_chunks(&backend, &a, &b, &list, &RunControl::new());
        assert_eq!(got.len(), 1);
        assert!(matches!(result, Err(Error::InChunk { index: 1, .. })));
        let e = backend
            .spgemm(&a, &b, SpgemmAlgorithm::Auto)
            .expect_err("lost");
        assert!(
            matches!(
                e,
                Error::Device {
                    fault: DeviceFault::DeviceLost,
                    ..
                }
            ) && e.is_retryable()
        );
        assert!(backend.spmv((&a).into(), &[1.0; 30]).is_err());
        // Residency is not a unit: it still works and is not counted.
        let resident = backend.upload(&a).expect("upload");
        assert_eq!(backend.download(&resident).expect("download"), a);
        assert_eq!((backend.units_started(), backend.units_failed()), (4, 3));

        let oom = faulty(Fault::FailOnUnit {
            unit: 0,
            kind: FaultKind::OutOfMemory,
            sticky: false,
        });
        let e = oom.spgemm(&a, &b, SpgemmAlgorithm::Auto).expect_err("oom");
        assert!(
            matches!(e, Error::OutOfMemory { needed_bytes, available_bytes: 0, .. } if needed_bytes > 0)
        );
    }

    #[test]
    fn a_memory_limit_fails_big_chunks_only() {
        let (a, b) = operands();
        let list = chunks(&[0..2, 2..40, 0..40], 0..50);
        let need = |c: &ProductChunk| {
            spgemm_need((&a).into(), (&b).into(), c.rows.clone(), c.cols.clone())
        };
        let limit = need(&list[0]);
        assert!(need(&list[1]) > limit);
        let backend = faulty(Fault::MemoryLimit { bytes: limit });
        let (got, result) = run_chunks(&backend, &a, &b, &list, &RunControl::new());
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].product, expected(&a, &b, &list[0]));
        match result.expect_err("chunk 1 is too big") {
            Error::InChunk { index: 1, source } => assert!(matches!(
                *source,
                Error::OutOfMemory { needed_bytes, available_bytes, .. }
                    if needed_bytes == need(&list[1]) && available_bytes == limit
            )),
            other => panic!("unexpected error {other:?}"),
        }
        // Small SpMV fits, the whole product does not.
        let x = vec![1.0; 2];
        let small = generate::uniform::<f64>(2, 2, 1, 3);
        assert!(backend.spmv((&small).into(), &x).is_ok());
        assert!(backend.spgemm(&a, &b, SpgemmAlgorithm::Auto).is_err());
        assert_eq!(backend.units_failed(), 2);
    }

    #[test]
    fn a_hanging_unit_returns_cancelled_once_cancelled() {
        let (a, b) = operands();
        let backend = faulty(Fault::HangOnUnit { unit: 1 });
        let run = RunControl::new();
        let canceller = {
            let run = run.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                run.cancel();
            })
        };
        let list = chunks(&[0..20, 20..40], 0..50);
        let start = Instant::now();
        let (got, result) = run_chunks(&backend, &a, &b, &list, &run);
        canceller.join().expect("canceller");
        assert!(start.elapsed() >= Duration::from_millis(50));
        assert_eq!(got.len(), 1);
        assert!(matches!(result, Err(Error::Cancelled)));
        assert_eq!((backend.units_started(), backend.units_failed()), (2, 1));
    }

    #[test]
    fn a_panic_fault_panics() {
        let (a, b) = operands();
        let backend = faulty(Fault::FailOnUnit {
            unit: 0,
            kind: FaultKind::Panic,
            sticky: false,
        });
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            backend.spgemm(&a, &b, SpgemmAlgorithm::Auto)
        }));
        assert!(caught.is_err());
        assert_eq!(backend.units_failed(), 1);
        assert!(backend.spgemm(&a, &b, SpgemmAlgorithm::Auto).is_ok());
    }

    #[test]
    fn no_fault_gives_the_reference_results() {
        let (a, b) = operands();
        let backend = faulty(Fault::None);
        let info = backend.info();
        assert_eq!(info.backend, NAME);
        assert_eq!(
            info.name,
            format!("faulty {}", ReferenceBackend.info().name)
        );
        assert_eq!(backend.memory_space(), MemorySpace::Host);
        let reference = &ReferenceBackend;
        let c = reference
            .spgemm(&a, &b, SpgemmAlgorithm::Auto)
            .expect("reference");
        assert_eq!(
            backend
                .spgemm(&a, &b, SpgemmAlgorithm::Auto)
                .expect("product"),
            c
        );
        let x: Vec<f64> = (0..30).map(f64::from).collect();
        assert_eq!(
            backend.spmv((&a).into(), &x).ok(),
            reference.spmv((&a).into(), &x).ok()
        );
        let d = b.to_dense(Layout::RowMajor).unwrap();
        assert_eq!(
            backend.spmm((&a).into(), &d).ok(),
            reference.spmm((&a).into(), &d).ok()
        );
        let run = RunControl::new();
        let (ra, rb) = (
            backend.upload(&a).expect("a"),
            backend.upload(&b).expect("b"),
        );
        let rc = backend
            .spgemm_resident((&ra).into(), (&rb).into(), &SpgemmOptions::new(), &run)
            .expect("resident");
        assert_eq!(backend.download(&rc).expect("download"), c);
        let plan = backend
            .plan_spgemm((&a).into(), (&b).into(), &SpgemmOptions::new())
            .expect("plan");
        let executed = backend
            .execute_spgemm(&plan, (&a).into(), (&b).into(), &run)
            .expect("execute");
        assert_eq!(backend.download(&executed).expect("download"), c);
        let list = [ProductChunk {
            rows: 0..40,
            cols: 0..50,
        }];
        let (got, result) = run_chunks(&backend, &a, &b, &list, &run);
        result.expect("chunks");
        assert_eq!(got[0].product, c);
        assert_eq!((backend.units_started(), backend.units_failed()), (7, 0));
    }
}
