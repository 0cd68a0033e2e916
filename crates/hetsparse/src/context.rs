//! [`Context`]: every device the enabled features reach, used as one.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use hetsparse_core::vector::write_back_vector_owned;
use hetsparse_core::{
    Backend, BackendKind, Capabilities, Csr, CsrOperand, Dense, DenseOperand, DeviceInfo, Error,
    Operation, ResidentCsr, ResidentDense, Result, RunControl, Scalar, ScalarType, SparseOperand,
    SparseRef, SparseVector, SpgemmAlgorithm, SpgemmOptions, SplicedCsr, SpmmOptions, SpmvOptions,
    VectorOperand, VectorProductOptions,
};
use hetsparse_sched::{Choice, Chosen, Measured, OpKind, Scheduler, Workload};

use crate::calibration::{device_key, Calibration, CalibrationCache, Entry, Origin};

/// The scalar types a [`Context`] computes in: every [`Scalar`] (`f32`, `f64`, their complex
/// types, `f16`, `bf16`); with the `cuda` feature, those the CUDA kernels are built for, which
/// are the same six.
#[cfg(feature = "cuda")]
pub trait ContextScalar: Scalar + hetsparse_cuda::DeviceScalar {}
#[cfg(feature = "cuda")]
impl<T: Scalar + hetsparse_cuda::DeviceScalar> ContextScalar for T {}

/// The scalar types a [`Context`] computes in: every [`Scalar`] (`f32`, `f64`, their complex
/// types, `f16`, `bf16`); with the `cuda` feature, those the CUDA kernels are built for, which
/// are the same six.
#[cfg(not(feature = "cuda"))]
pub trait ContextScalar: Scalar {}
#[cfg(not(feature = "cuda"))]
impl<T: Scalar> ContextScalar for T {}

/// One device [`Context::auto`] found, used or not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FoundDevice {
    /// How to name this device alone: `cpu`, `cuda:N`, `opencl:P.D` (platform and device
    /// index as `hetsparse::opencl::list_devices` numbers them).
    pub id: String,
    /// What the backend reports about its device.
    pub info: DeviceInfo,
    /// The scalar types it runs SpGEMM for.
    pub scalars: Vec<ScalarType>,
    /// The SpGEMM algorithms it offers (for the context's scalar type).
    pub algorithms: Vec<SpgemmAlgorithm>,
    /// `None` when the context computes on it; else why it is left out.
    pub skipped: Option<String>,
}

impl fmt::Display for FoundDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:<12} {} ({:?}, {} compute units, {} MiB)",
            self.id,
            self.info.name,
            self.info.kind,
            self.info.compute_units,
            self.info.memory_bytes >> 20
        )?;
        if let Some(reason) = &self.skipped {
            write!(f, " — not used: {reason}")?;
        }
        Ok(())
    }
}

/// A backend family the enabled features include that found no device, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unavailable {
    /// [`Cpu`](BackendKind::Cpu), [`Cuda`](BackendKind::Cuda) or
    /// [`OpenCl`](BackendKind::OpenCl).
    pub backend: BackendKind,
    /// The one device that could not be opened (`opencl:P.D`, named as
    /// [`FoundDevice::id`] names it); `None` when the backend found no device at all.
    pub device: Option<String>,
    /// What the backend said.
    pub reason: String,
}

impl Unavailable {
    /// The device's id where one device failed, else the backend's name (`cuda`, ...).
    pub fn name(&self) -> &str {
        self.device.as_deref().unwrap_or(self.backend.name())
    }
}

/// What runs the operations: one backend, or the scheduler over several.
enum Engine<T: Scalar> {
    Single(Arc<dyn Backend<T>>),
    Scheduled(Box<Scheduler<T>>),
}

/// Every device a machine has, through the backends this build enables, as one.
///
/// [`Context::auto`] finds the devices: the CPU's cores (feature `cpu`), each CUDA GPU (feature
/// `cuda`) and each OpenCL device (feature `opencl`). No hardware is used twice:
///
/// - An OpenCL **GPU** is left out when a CUDA backend runs on the same card. Neither driver
///   API tells the other's device apart by anything both report (hetsparse's backends expose no
///   PCI bus id), so cards are matched by name: each CUDA GPU claims one OpenCL GPU of the
///   same name (NVIDIA's OpenCL reports the name CUDA does), so with two CUDA cards of a model
///   and three OpenCL devices of that name, one OpenCL device is used.
/// - An OpenCL **CPU** device (PoCL, Intel's CPU runtime) is left out when the CPU backend is
///   on: both would run on the same cores.
/// - A device that cannot run scalar type `T` (an OpenCL device without `cl_khr_fp64` for
///   `f64`) is left out.
///
/// An OpenCL device left out for the first two reasons is listed ([`Context::devices`]) but
/// not opened: no OpenCL context is made on it.
///
/// With one device left, operations run on its backend directly; with several, on a
/// [`Scheduler`] over all of them, which shares each product out by the devices' speeds.
/// [`Context::devices`] lists every device found, with why one is not used.
///
/// ```
/// use hetsparse::{generate, Context, Csr};
/// let ctx = Context::<f64>::auto()?;
/// let a: Csr<f64> = generate::uniform(300, 300, 6, 7);
/// let c = ctx.spgemm(&a, &a)?;
/// let y = ctx.spmv(&a, &vec![1.0; 300])?;
/// assert_eq!((c.nrows(), y.len()), (300, 300));
/// for device in ctx.devices() {
///     println!("{device}");
/// }
/// # Ok::<(), hetsparse::Error>(())
/// ```
pub struct Context<T: ContextScalar> {
    devices: Vec<FoundDevice>,
    unavailable: Vec<Unavailable>,
    engine: Engine<T>,
    share_always: bool,
    /// Each backend's key in the calibration file, in the engine's order.
    keys: Vec<String>,
    /// The calibration file, where one is kept.
    cache_file: Option<PathBuf>,
    /// What the file held, updated by calibrations and learned runs.
    calibration: Mutex<Calibration>,
    /// The cost model's last decision.
    last_choice: Mutex<Option<Choice>>,
    /// Runs were learned from since the file was last written.
    learned_unsaved: AtomicBool,
    /// The (backend, operation) pairs that have run alone in this context: a device's first
    /// call in a process pays its warm-up (kernels loaded, pinned buffers and memory pools
    /// grown), so only later calls teach its speed.
    warmed: Mutex<Vec<(usize, OpKind)>>,
    /// Calls of each operation the cost model decided in this context.
    decided: Mutex<BTreeMap<OpKind, u64>>,
    /// What this context's runs taught of each (backend, operation): the model's correction.
    learned: Mutex<BTreeMap<(usize, OpKind), Measured>>,
    /// The calls weighed last ([`WEIGHED_KEPT`] of them, the latest last): a call on the same
    /// operands again (an iterative solver's SpMV, an AMG setup's products redone with new
    /// values) reuses its [`Workload`] instead of sampling the operands once more.
    weighed: Mutex<Vec<(Operands, Workload)>>,
    /// The CUDA backends readying themselves in the background: held while a routed call
    /// runs, so that their page-locking does not stall a host call's page faults.
    #[cfg(feature = "cuda")]
    warming: Vec<Arc<hetsparse_cuda::CudaBackend>>,
}

impl<T: ContextScalar> fmt::Debug for Context<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context")
            .field("devices", &self.devices)
            .field("unavailable", &self.unavailable)
            .finish()
    }
}

/// A device found, with its backend when it is used.
struct Candidate<T: Scalar> {
    found: FoundDevice,
    backend: Option<Arc<dyn Backend<T>>>,
}

fn describe<T: Scalar>(id: String, backend: &dyn Backend<T>) -> FoundDevice {
    described::<T>(id, backend.info(), backend.capabilities())
}

/// A device as [`describe`] says it, from what its backend would report.
fn described<T: Scalar>(id: String, info: DeviceInfo, capabilities: &Capabilities) -> FoundDevice {
    let scalars = ScalarType::ALL
        .into_iter()
        .filter(|&s| capabilities.supports(Operation::Spgemm(SpgemmAlgorithm::Auto), s))
        .collect();
    let algorithms = SpgemmAlgorithm::ALL
        .into_iter()
        .filter(|&a| capabilities.supports(Operation::Spgemm(a), T::TYPE))
        .collect();
    FoundDevice {
        id,
        info,
        scalars,
        algorithms,
        skipped: None,
    }
}

/// What a backend that found no device said, without repeating the backend's name.
fn reason_of(e: Error) -> String {
    match e {
        Error::NoDevice { reason, .. } => reason,
        other => other.to_string(),
    }
}

fn candidate<T: Scalar>(id: String, backend: Arc<dyn Backend<T>>) -> Candidate<T> {
    let mut found = describe(id, backend.as_ref());
    let runs_t = found.scalars.contains(&T::TYPE);
    if !runs_t {
        found.skipped = Some(format!("does not run {}", T::TYPE));
    }
    Candidate {
        found,
        backend: runs_t.then_some(backend),
    }
}

impl<T: ContextScalar> Context<T> {
    /// Finds every device the enabled features reach and makes a context over those it uses
    /// (see the [type docs](Context) for which are left out), with the calibration file of
    /// [`CalibrationCache::FromEnvironment`] loaded. [`Error::NoDevice`] when none is usable.
    ///
    /// Each call goes where the cost model predicts it finishes first (see
    /// [`Context::spgemm_with`]); the file's calibration, or what the context learns from its
    /// own runs, takes precedence over the model's defaults.
    pub fn auto() -> Result<Self> {
        Self::auto_with(CalibrationCache::FromEnvironment)
    }

    /// [`Context::auto`] with the calibration kept in `cache` (another directory, or none).
    pub fn auto_with(cache: CalibrationCache) -> Result<Self> {
        Ok(Self::find_devices()?.with_calibration_cache(cache))
    }

    fn find_devices() -> Result<Self> {
        let _span = tracing::info_span!("context_auto").entered();
        let mut candidates: Vec<Candidate<T>> = Vec::new();
        let mut unavailable = Vec::new();

        #[cfg(feature = "cpu")]
        match hetsparse_cpu::CpuBackend::new() {
            Ok(cpu) => candidates.push(candidate("cpu".into(), Arc::new(cpu))),
            Err(e) => unavailable.push(Unavailable {
                backend: BackendKind::Cpu,
                device: None,
                reason: reason_of(e),
            }),
        }

        #[cfg(feature = "cuda")]
        let mut warming = Vec::new();
        #[cfg(feature = "cuda")]
        {
            let mut ordinal = 0u32;
            loop {
                match hetsparse_cuda::CudaBackend::with_device(ordinal) {
                    Ok(gpu) => {
                        // Kernels, memory and the staging buffers of host copies readied
                        // while the caller gets its operands ready: a first call from host
                        // memory as quick as later ones.
                        gpu.warm_up();
                        let gpu = Arc::new(gpu);
                        warming.push(Arc::clone(&gpu));
                        candidates.push(candidate(format!("cuda:{ordinal}"), gpu))
                    }
                    Err(e) => {
                        if ordinal == 0 {
                            unavailable.push(Unavailable {
                                backend: BackendKind::Cuda,
                                device: None,
                                reason: reason_of(e),
                            });
                        }
                        break;
                    }
                }
                ordinal += 1;
            }
        }

        #[cfg(feature = "opencl")]
        match hetsparse_opencl::list_devices() {
            Ok(listed) => {
                // CUDA GPUs by name, each able to claim one OpenCL device of that name.
                let mut unclaimed_cuda: Vec<(String, String)> = candidates
                    .iter()
                    .filter(|c| c.found.info.backend == BackendKind::Cuda)
                    .map(|c| (c.found.info.name.clone(), c.found.id.clone()))
                    .collect();
                let cpu_on = candidates
                    .iter()
                    .any(|c| c.found.info.backend == BackendKind::Cpu && c.backend.is_some());
                for d in listed {
                    let id = format!("opencl:{}.{}", d.platform_index, d.device_index);
                    let skip = if d.kind == hetsparse_core::DeviceKind::Cpu && cpu_on {
                        Some("same cores as `cpu`".to_string())
                    } else if d.kind == hetsparse_core::DeviceKind::Gpu {
                        same_card(&mut unclaimed_cuda, &d.name)
                            .map(|cuda| format!("same card as `{cuda}`"))
                    } else {
                        None
                    };
                    if let Some(reason) = skip {
                        // Listed, not opened: a context on a device left out would hold a
                        // second context on a CUDA card and threads of a CPU runtime.
                        let mut found = described::<T>(id, d.info(), &d.capabilities());
                        found.skipped = Some(reason);
                        candidates.push(Candidate {
                            found,
                            backend: None,
                        });
                        continue;
                    }
                    match hetsparse_opencl::OpenClBackend::with_device_index(
                        d.platform_index,
                        d.device_index,
                    ) {
                        Ok(backend) => {
                            candidates.push(candidate(id, Arc::new(backend) as Arc<dyn Backend<T>>))
                        }
                        Err(e) => unavailable.push(Unavailable {
                            backend: BackendKind::OpenCl,
                            device: Some(id),
                            reason: reason_of(e),
                        }),
                    }
                }
            }
            Err(e) => unavailable.push(Unavailable {
                backend: BackendKind::OpenCl,
                device: None,
                reason: reason_of(e),
            }),
        }

        let backends: Vec<Arc<dyn Backend<T>>> = candidates
            .iter()
            .filter_map(|c| c.backend.clone())
            .collect();
        let devices: Vec<FoundDevice> = candidates.into_iter().map(|c| c.found).collect();
        tracing::info!(
            found = devices.len(),
            used = backends.len(),
            "devices found"
        );
        #[allow(unused_mut)]
        let mut ctx = Self::build(devices, unavailable, backends, false)?;
        #[cfg(feature = "cuda")]
        {
            ctx.warming = warming;
        }
        Ok(ctx)
    }

    /// A context over backends the caller chose (for example a single device), listed as
    /// `ids` in [`devices`](Self::devices): one backend runs directly, several through a
    /// [`Scheduler`]. No calibration file is used unless
    /// [`with_calibration_cache`](Self::with_calibration_cache) names one.
    /// [`Error::NoDevice`] for an empty list, [`Error::InvalidArgument`] when `ids` and
    /// `backends` differ in length.
    pub fn from_backends(ids: &[&str], backends: Vec<Arc<dyn Backend<T>>>) -> Result<Self> {
        if ids.len() != backends.len() {
            return Err(Error::InvalidArgument(format!(
                "{} names given for {} backends",
                ids.len(),
                backends.len()
            )));
        }
        let devices = ids
            .iter()
            .zip(&backends)
            .map(|(id, b)| describe(id.to_string(), b.as_ref()))
            .collect();
        Self::build(devices, Vec::new(), backends, false)
    }

    /// The same devices, with every product large enough to cut shared over all of them even
    /// where the speeds learned so far say the fastest alone would win (the scheduler's
    /// [`share_always`](Scheduler::share_always)); no change with one device.
    pub fn share_always(mut self) -> Result<Self> {
        let backends = self.backends();
        let devices = std::mem::take(&mut self.devices);
        let unavailable = std::mem::take(&mut self.unavailable);
        let cache_file = self.cache_file.take();
        let calibration = std::mem::take(&mut *lock(&self.calibration));
        let mut shared = Self::build(devices, unavailable, backends, true)?;
        shared.cache_file = cache_file;
        shared.calibration = Mutex::new(calibration);
        Ok(shared)
    }

    /// Keeps the calibration in `cache`: loads the file there (a missing, stale, corrupted or
    /// truncated file is ignored, with a `tracing` warning) and writes to it what
    /// [`calibrate`](Self::calibrate) measures and what runs teach. [`CalibrationCache::Off`]
    /// keeps nothing.
    pub fn with_calibration_cache(mut self, cache: CalibrationCache) -> Self {
        self.cache_file = cache.file();
        let loaded = match &self.cache_file {
            Some(path) => Calibration::load(path),
            None => Calibration::default(),
        };
        *lock(&self.calibration) = loaded;
        self
    }

    /// The calibration file in use, if any.
    pub fn calibration_file(&self) -> Option<&Path> {
        self.cache_file.as_deref()
    }

    fn build(
        devices: Vec<FoundDevice>,
        unavailable: Vec<Unavailable>,
        mut backends: Vec<Arc<dyn Backend<T>>>,
        share_always: bool,
    ) -> Result<Self> {
        let engine = match backends.len() {
            0 => {
                let reasons: Vec<String> = unavailable
                    .iter()
                    .map(|u| format!("{}: {}", u.name(), u.reason))
                    .chain(
                        devices
                            .iter()
                            .filter_map(|d| Some(format!("{}: {}", d.id, d.skipped.as_ref()?))),
                    )
                    .collect();
                return Err(Error::NoDevice {
                    backend: BackendKind::Context,
                    reason: if reasons.is_empty() {
                        "this build enables no backend (features `cpu`, `cuda`, `opencl`)".into()
                    } else {
                        format!("no usable device ({})", reasons.join("; "))
                    },
                });
            }
            1 => Engine::Single(backends.remove(0)),
            _ => {
                let scheduler = Scheduler::from_shared(backends);
                Engine::Scheduled(Box::new(if share_always {
                    scheduler.share_always()
                } else {
                    scheduler
                }))
            }
        };
        let keys = match &engine {
            Engine::Single(b) => vec![device_key(b.as_ref())],
            Engine::Scheduled(s) => s
                .backends()
                .iter()
                .map(|b| device_key(b.as_ref()))
                .collect(),
        };
        Ok(Context {
            devices,
            unavailable,
            engine,
            share_always,
            keys,
            cache_file: None,
            calibration: Mutex::new(Calibration::default()),
            last_choice: Mutex::new(None),
            learned_unsaved: AtomicBool::new(false),
            warmed: Mutex::new(Vec::new()),
            decided: Mutex::new(BTreeMap::new()),
            learned: Mutex::new(BTreeMap::new()),
            weighed: Mutex::new(Vec::new()),
            #[cfg(feature = "cuda")]
            warming: Vec::new(),
        })
    }

    fn backends(&self) -> Vec<Arc<dyn Backend<T>>> {
        match &self.engine {
            Engine::Single(b) => vec![Arc::clone(b)],
            Engine::Scheduled(s) => s.backends().to_vec(),
        }
    }

    /// Every device found, used or not (in the order: CPU, CUDA GPUs, OpenCL devices).
    pub fn devices(&self) -> &[FoundDevice] {
        &self.devices
    }

    /// Backends the enabled features include that found no device, with the reason.
    pub fn unavailable(&self) -> &[Unavailable] {
        &self.unavailable
    }

    /// What runs the operations: the one device's backend or the scheduler over all, for
    /// everything the conveniences below do not cover (plans, chunks, other formats, run
    /// control). Resident handles from it work with every method of the context.
    pub fn backend(&self) -> &dyn Backend<T> {
        match &self.engine {
            Engine::Single(b) => b.as_ref(),
            Engine::Scheduled(s) => s.as_ref(),
        }
    }

    /// The scheduler when the context spans several devices (its
    /// [`last_report`](Scheduler::last_report) says who computed what).
    pub fn scheduler(&self) -> Option<&Scheduler<T>> {
        match &self.engine {
            Engine::Single(_) => None,
            Engine::Scheduled(s) => Some(s.as_ref()),
        }
    }

    /// `C = A · B`, host in, host out, with the backend's choice of algorithm.
    pub fn spgemm(&self, a: &Csr<T>, b: &Csr<T>) -> Result<Csr<T>> {
        self.spgemm_with(
            a.into(),
            b.into(),
            &SpgemmOptions::new(),
            &RunControl::unwatched(),
        )
    }

    /// `C = A · B` on host or resident operands, with options and a [`RunControl`] to cancel
    /// the run or watch its progress.
    ///
    /// With several devices and host operands, the cost model decides who computes
    /// ([`last_choice`](Self::last_choice) says what it predicted): one device alone when
    /// its predicted time is the least, else the scheduler, which shares the product. A device
    /// chosen that fails hands the call to the scheduler, which runs it elsewhere.
    pub fn spgemm_with(
        &self,
        a: CsrOperand<'_, T>,
        b: CsrOperand<'_, T>,
        options: &SpgemmOptions,
        run: &RunControl,
    ) -> Result<Csr<T>> {
        // A semiring or a mask goes to the scheduler, which gives it only to the devices that
        // run it; the cost model knows plain products only.
        if !options.is_plain() {
            return self.backend().spgemm_with(a, b, options, run);
        }
        let (CsrOperand::Host(ha), CsrOperand::Host(hb)) = (a, b) else {
            return self.backend().spgemm_with(a, b, options, run);
        };
        self.route(
            Operands::of(OpKind::Spgemm, ha, Footprint::of(hb)),
            || Workload::spgemm(ha, hb),
            run,
            |backend| backend.spgemm_with(a, b, options, run),
        )
    }

    /// `C = A · B` with B given as two row blocks read in place ([`SplicedCsr`]), as a
    /// distributed product's rank holds it: its own rows of B and those it fetched. A context
    /// of one device hands it to that device's backend (the CPU's copies nothing); over
    /// several devices, the rows of B that A reaches are copied into one matrix
    /// ([`SplicedCsr::reached_by`]) and multiplied as [`spgemm`](Self::spgemm) does.
    pub fn spgemm_spliced(&self, a: &Csr<T>, b: &SplicedCsr<'_, T>) -> Result<Csr<T>> {
        match &self.engine {
            Engine::Single(backend) => {
                backend.spgemm_spliced(a, b, &SpgemmOptions::new(), &RunControl::unwatched())
            }
            Engine::Scheduled(_) => {
                let (a, b) = b.reached_by(a)?;
                self.spgemm(&a, &b)
            }
        }
    }

    /// `w⟨m⟩ = A ⊕.⊗ u` (GraphBLAS's mxv) over the semiring of `options`, on the positions
    /// its mask admits: `w(i) = ⊕ₖ A(i,k) ⊗ u(k)`, an entry wherever an admitted product
    /// lands. A new `w` ([`mxv_into`](Self::mxv_into) merges into an existing one). A is a
    /// host CSR matrix or a resident one ([`Backend::upload`]), read where it lies.
    ///
    /// ```
    /// use hetsparse::{Context, Csr, SemiringKind, SparseVector, VectorProductOptions};
    /// let ctx = Context::<f64>::auto()?;
    /// // Longest one-hop path into each vertex of 0 → 1 (weight 2), 2 → 1 (weight 5).
    /// let a = Csr::try_new(3, 3, vec![0, 1, 1, 2], vec![1, 1], vec![2.0, 5.0])?.transpose()?;
    /// let u = SparseVector::from_dense(&[0.0, 0.0, 0.0])?;
    /// let options = VectorProductOptions::new().with_semiring(SemiringKind::MaxPlus);
    /// let w = ctx.mxv(&a, &u, &options)?;
    /// assert_eq!((w.indices(), w.values()), (&[1u32][..], &[5.0][..]));
    /// # Ok::<(), hetsparse::Error>(())
    /// ```
    pub fn mxv<'a>(
        &self,
        a: impl Into<CsrOperand<'a, T>>,
        u: &SparseVector<T>,
        options: &VectorProductOptions,
    ) -> Result<SparseVector<T>> {
        let a = a.into();
        let mut w = SparseVector::empty(a.shape().0)?;
        self.mxv_into(&mut w, a, u, options)?;
        Ok(w)
    }

    /// `w⟨m, replace⟩ = accum(w, A ⊕.⊗ u)`: [`mxv`](Self::mxv) merged into `w` through the
    /// accumulator of `options` (none: the product replaces `w`'s entries where admitted), on
    /// the positions its mask admits; refused positions keep `w`'s entries, or lose them with
    /// a replacing mask. `w` is left as it was on error.
    pub fn mxv_into<'a>(
        &self,
        w: &mut SparseVector<T>,
        a: impl Into<CsrOperand<'a, T>>,
        u: &SparseVector<T>,
        options: &VectorProductOptions,
    ) -> Result<()> {
        let a = a.into();
        let _span = tracing::debug_span!("mxv", nnz_a = a.nnz(), nnz_u = u.nnz()).entered();
        let (backend, a) = self.vector_backend(a);
        let t = backend.mxv_with(a, u, options, &RunControl::unwatched())?;
        *w = write_back_vector_owned(w, t, options.mask.as_ref(), options.accumulator)?;
        Ok(())
    }

    /// `wᵀ⟨mᵀ⟩ = uᵀ ⊕.⊗ A` (GraphBLAS's vxm): `w(j) = ⊕ₖ u(k) ⊗ A(k,j)`, a frontier `u`
    /// pushed along A's edges `k → j` (`any_secondi` gives each `j` a parent `k`). A new `w`
    /// ([`vxm_into`](Self::vxm_into) merges into an existing one). A is a host CSR matrix or a
    /// resident one, as for [`mxv`](Self::mxv): a graph searched level after level is best
    /// uploaded once.
    ///
    /// ```
    /// use hetsparse::{Context, Csr, SemiringKind, SparseVector, VectorProductOptions};
    /// let ctx = Context::<f64>::auto()?;
    /// // Edges 0 → 1, 0 → 2, 1 → 2; vertex 0 visited: the next frontier, with parents.
    /// let a = Csr::try_new(3, 3, vec![0, 2, 3, 3], vec![1, 2, 2], vec![1.0; 3])?;
    /// let frontier = SparseVector::try_new(3, vec![0], vec![1.0])?;
    /// let options = VectorProductOptions::new()
    ///     .with_semiring(SemiringKind::AnySecondI)
    ///     .with_mask(frontier.structural_mask().complemented().replacing());
    /// let parents = ctx.vxm(&frontier, &a, &options)?;
    /// assert_eq!((parents.indices(), parents.values()), (&[1u32, 2][..], &[0.0, 0.0][..]));
    /// # Ok::<(), hetsparse::Error>(())
    /// ```
    pub fn vxm<'a>(
        &self,
        u: &SparseVector<T>,
        a: impl Into<CsrOperand<'a, T>>,
        options: &VectorProductOptions,
    ) -> Result<SparseVector<T>> {
        let a = a.into();
        let mut w = SparseVector::empty(a.shape().1)?;
        self.vxm_into(&mut w, u, a, options)?;
        Ok(w)
    }

    /// `wᵀ⟨mᵀ, replace⟩ = accum(wᵀ, uᵀ ⊕.⊗ A)`: [`vxm`](Self::vxm) merged into `w` as
    /// [`mxv_into`](Self::mxv_into) merges.
    pub fn vxm_into<'a>(
        &self,
        w: &mut SparseVector<T>,
        u: &SparseVector<T>,
        a: impl Into<CsrOperand<'a, T>>,
        options: &VectorProductOptions,
    ) -> Result<()> {
        let a = a.into();
        let _span = tracing::debug_span!("vxm", nnz_a = a.nnz(), nnz_u = u.nnz()).entered();
        let (backend, a) = self.vector_backend(a);
        let t = backend.vxm_with(u, a, options, &RunControl::unwatched())?;
        *w = write_back_vector_owned(w, t, options.mask.as_ref(), options.accumulator)?;
        Ok(())
    }

    /// Who computes a sparse-vector product of `a`, and what it reads: the one device; of
    /// several, the one whose memory holds a resident A, else the first that claims vector
    /// products over `T` (the scheduler shares matrix products only; a vector product is one
    /// pass over A, bound by memory, and the host's copy of A is where the CPU reads it) — a
    /// resident A kept by the scheduler in host memory is read there. Without a claiming
    /// device, the scheduler, which refuses with [`Error::Unsupported`].
    fn vector_backend<'a>(&self, a: CsrOperand<'a, T>) -> (&dyn Backend<T>, CsrOperand<'a, T>) {
        let s = match &self.engine {
            Engine::Single(b) => return (b.as_ref(), a),
            Engine::Scheduled(s) => s,
        };
        let a = match a {
            CsrOperand::Resident(r) => {
                if let Some(b) = s.backends().iter().find(|b| b.memory_space() == *r.space()) {
                    return (b.as_ref(), a);
                }
                r.host().map_or(a, CsrOperand::Host)
            }
            host => host,
        };
        let claiming = s
            .backends()
            .iter()
            .find(|b| b.capabilities().vector_product_features(T::TYPE).is_some())
            .map_or(s.as_ref() as &dyn Backend<T>, |b| b.as_ref());
        (claiming, a)
    }

    /// `C = A · B` for a sparse A of any format (`&csr` converts) and a dense B.
    pub fn spmm<'a>(&self, a: impl Into<SparseRef<'a, T>>, b: &Dense<T>) -> Result<Dense<T>> {
        self.spmm_with(
            SparseOperand::Host(a.into()),
            b.into(),
            &SpmmOptions::new(),
            &RunControl::unwatched(),
        )
    }

    /// `C = A · B` for a sparse A and a dense B, host or resident, with options and a
    /// [`RunControl`]; a host CSR A goes where the cost model says (as for
    /// [`spgemm_with`](Self::spgemm_with)).
    pub fn spmm_with(
        &self,
        a: SparseOperand<'_, T>,
        b: DenseOperand<'_, T>,
        options: &SpmmOptions,
        run: &RunControl,
    ) -> Result<Dense<T>> {
        let (SparseOperand::Host(SparseRef::Csr(csr)), DenseOperand::Host(dense)) = (a, b) else {
            return self.backend().spmm_with(a, b, options, run);
        };
        self.route(
            Operands::of(OpKind::Spmm, csr, Footprint::columns(dense.ncols())),
            || Ok(Workload::spmm(csr, dense.ncols())),
            run,
            |backend| backend.spmm_with(a, b, options, run),
        )
    }

    /// `y = A · x` for a sparse A of any format (`&csr` converts).
    pub fn spmv<'a>(&self, a: impl Into<SparseRef<'a, T>>, x: &[T]) -> Result<Vec<T>> {
        self.spmv_with(
            SparseOperand::Host(a.into()),
            x.into(),
            &SpmvOptions::new(),
            &RunControl::unwatched(),
        )
    }

    /// `y = A · x`, host or resident, with options and a [`RunControl`]; a host CSR A goes
    /// where the cost model says (from host memory a GPU's SpMV is bound by copying A, so
    /// this is usually the CPU).
    pub fn spmv_with(
        &self,
        a: SparseOperand<'_, T>,
        x: VectorOperand<'_, T>,
        options: &SpmvOptions,
        run: &RunControl,
    ) -> Result<Vec<T>> {
        let (SparseOperand::Host(SparseRef::Csr(csr)), VectorOperand::Host(_)) = (a, x) else {
            return self.backend().spmv_with(a, x, options, run);
        };
        self.route(
            Operands::of(OpKind::Spmv, csr, Footprint::columns(1)),
            || Ok(Workload::spmv(csr)),
            run,
            |backend| backend.spmv_with(a, x, options, run),
        )
    }

    /// Runs a call of `op` where the cost model predicts it finishes first: `call` on the one
    /// device chosen, timed and learned from, or on the scheduler.
    fn route<R>(
        &self,
        operands: Operands,
        workload: impl FnOnce() -> Result<Workload>,
        run: &RunControl,
        call: impl Fn(&dyn Backend<T>) -> Result<R>,
    ) -> Result<R> {
        let op = operands.op;
        let scheduler = match &self.engine {
            Engine::Single(b) => return call(b.as_ref()),
            Engine::Scheduled(s) if self.share_always => return call(s.as_ref()),
            Engine::Scheduled(s) => s,
        };
        let known = lock(&self.weighed)
            .iter()
            .rev()
            .find(|(o, _)| *o == operands)
            .map(|(_, w)| w.clone());
        let workload = match known {
            Some(w) => w,
            None => {
                // Operands the model cannot weigh (shapes that do not chain) go to the
                // scheduler, which says what is wrong.
                let Ok(w) = workload() else {
                    return call(scheduler.as_ref());
                };
                let mut weighed = lock(&self.weighed);
                if weighed.len() >= WEIGHED_KEPT {
                    weighed.remove(0);
                }
                weighed.push((operands, w.clone()));
                w
            }
        };
        let calibrated = self.calibrated(op);
        let learned: Vec<Option<Measured>> = {
            let learned = lock(&self.learned);
            (0..calibrated.len())
                .map(|d| learned.get(&(d, op)).copied())
                .collect()
        };
        let ran: Vec<bool> = {
            let warmed = lock(&self.warmed);
            (0..calibrated.len())
                .map(|d| warmed.iter().any(|&(w, _)| w == d))
                .collect()
        };
        let calls_before = {
            let mut decided = lock(&self.decided);
            let calls = decided.entry(op).or_insert(0);
            *calls += 1;
            *calls - 1
        };
        let choice = scheduler.predict(&workload, &calibrated, &learned, &ran, calls_before)?;
        let chosen = choice.chosen;
        if tracing::enabled!(tracing::Level::INFO) {
            tracing::info!(op = %op, work = workload.work, "cost model: {}", self.describe(&choice));
        }
        *lock(&self.last_choice) = Some(choice);
        let Chosen::Alone(d) = chosen else {
            return call(scheduler.as_ref());
        };
        let backend = &scheduler.backends()[d];
        #[cfg(feature = "cuda")]
        let _paused: Vec<_> = self.warming.iter().map(|g| g.pause_warm_up()).collect();
        let started = Instant::now();
        match call(backend.as_ref()) {
            Ok(r) => {
                let wall = started.elapsed();
                let warm = {
                    let mut warmed = lock(&self.warmed);
                    let warm = warmed.contains(&(d, op));
                    if !warm {
                        warmed.push((d, op));
                    }
                    warm
                };
                if warm {
                    scheduler.record_alone_run(op, d, workload.work, wall);
                    let profile = backend.profile();
                    let predicted = workload.modelled_on(d, &profile);
                    let before = learned[d].or(calibrated[d]).unwrap_or(Measured {
                        factor: 1.0,
                        per_call: profile.call_latency,
                    });
                    if let Some(taught) = before.from_run(&predicted, wall.as_secs_f64()) {
                        let mut learned = lock(&self.learned);
                        let entry = learned.entry((d, op)).or_insert(taught);
                        *entry = entry.blended(&taught);
                        self.learned_unsaved.store(true, Ordering::Release);
                    }
                }
                Ok(r)
            }
            Err(e)
                if e.is_caller_error() || matches!(e, Error::Cancelled) || run.is_cancelled() =>
            {
                Err(e)
            }
            Err(e) => {
                tracing::warn!(device = %backend.info().name, error = %e, "the device the cost model chose failed; the scheduler takes the call");
                scheduler.record_alone_failure(op, d);
                call(scheduler.as_ref())
            }
        }
    }

    /// The calibration's entry for `op` of each backend, in the engine's order.
    fn calibrated(&self, op: OpKind) -> Vec<Option<Measured>> {
        let calibration = lock(&self.calibration);
        self.keys
            .iter()
            .map(|key| calibration.get(key, op).map(|e| e.measured))
            .collect()
    }

    /// The ids of the devices computing, in the engine's order.
    fn used_ids(&self) -> Vec<&str> {
        self.devices
            .iter()
            .filter(|d| d.skipped.is_none())
            .map(|d| d.id.as_str())
            .collect()
    }

    /// The cost model's last decision (`None` before the first call it decided, and on a
    /// context of one device, or sharing always).
    pub fn last_choice(&self) -> Option<Choice> {
        lock(&self.last_choice).clone()
    }

    /// A decision in words: the device chosen and every device's predicted time.
    pub fn describe(&self, choice: &Choice) -> String {
        let ids = self.used_ids();
        let name = |d: usize| {
            ids.get(d)
                .map_or_else(|| format!("#{d}"), |id| id.to_string())
        };
        let ms = |s: f64| format!("{:.3} ms", s * 1e3);
        let chosen = match choice.chosen {
            Chosen::Alone(d) => format!("{} alone", name(d)),
            Chosen::Shared => "shared by the scheduler".to_string(),
        };
        let mut text = format!(
            "{} of {} work units: {chosen} (predicted {});",
            choice.workload.op,
            choice.workload.work,
            ms(choice.predicted())
        );
        for p in &choice.predictions {
            text.push_str(&format!(
                " {} {} [{}: compute {} + transfer {} + latency {}]",
                name(p.device),
                ms(p.total),
                p.source,
                ms(p.compute),
                ms(p.transfer),
                ms(p.latency)
            ));
        }
        if let Some(shared) = choice.shared {
            text.push_str(&format!(" shared {}", ms(shared)));
        }
        text
    }

    /// Copies `m` into the context's memory, for chains of operations that keep their
    /// intermediates resident ([`spgemm_resident`](Self::spgemm_resident)).
    pub fn upload(&self, m: &Csr<T>) -> Result<ResidentCsr<T>> {
        self.backend().upload(m)
    }

    /// `C = A · B` with the result left resident.
    pub fn spgemm_resident(
        &self,
        a: CsrOperand<'_, T>,
        b: CsrOperand<'_, T>,
    ) -> Result<ResidentCsr<T>> {
        self.backend()
            .spgemm_resident(a, b, &SpgemmOptions::new(), &RunControl::unwatched())
    }

    /// Copies a resident matrix to the host.
    pub fn download(&self, m: &ResidentCsr<T>) -> Result<Csr<T>> {
        self.backend().download(m)
    }

    /// Copies a resident matrix's values alone to the host, in CSR order: a reduction over
    /// its entries without the structure's copy ([`Backend::download_values`]).
    pub fn download_values(&self, m: &ResidentCsr<T>) -> Result<Vec<T>> {
        self.backend().download_values(m)
    }

    /// Copies a dense matrix (or, with one column, a vector) into the context's memory.
    pub fn upload_dense(&self, d: &Dense<T>) -> Result<ResidentDense<T>> {
        self.backend().upload_dense(d)
    }

    /// Copies a resident dense matrix to the host.
    pub fn download_dense(&self, d: &ResidentDense<T>) -> Result<Dense<T>> {
        self.backend().download_dense(d)
    }
}

/// Calls whose [`Workload`] a context keeps for the next call on the same operands.
const WEIGHED_KEPT: usize = 8;

/// What a routed call's [`Workload`] depends on: the operation and the structure of its
/// operands, each told by where its arrays lie, its shape and its entries. A matrix made anew
/// at the same addresses with the same shape and entries but another pattern would be taken
/// for the one weighed before: the device choice may then be off, never the result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Operands {
    op: OpKind,
    a: Footprint,
    b: Footprint,
}

impl Operands {
    fn of<T: Scalar>(op: OpKind, a: &Csr<T>, b: Footprint) -> Self {
        Operands {
            op,
            a: Footprint::of(a),
            b,
        }
    }
}

/// One operand of [`Operands`]: a sparse matrix's arrays, shape and entries, or a dense
/// operand's columns (its values do not change the workload).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Footprint {
    offsets: usize,
    cols: usize,
    nrows: usize,
    ncols: usize,
    nnz: u64,
}

impl Footprint {
    fn of<T: Scalar>(m: &Csr<T>) -> Self {
        Footprint {
            offsets: m.row_offsets().as_ptr() as usize,
            cols: m.col_indices().as_ptr() as usize,
            nrows: m.nrows(),
            ncols: m.ncols(),
            nnz: m.nnz(),
        }
    }

    fn columns(ncols: usize) -> Self {
        Footprint {
            offsets: 0,
            cols: 0,
            nrows: 0,
            ncols,
            nnz: 0,
        }
    }
}

/// A poisoned lock's data: a panic elsewhere leaves the calibration or the last choice
/// usable (both are replaced whole).
fn lock<V>(m: &Mutex<V>) -> MutexGuard<'_, V> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// How long [`Context::calibrate_with`] measures: the size of its products.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CalibrationOptions {
    /// Rows (and columns) of the larger matrix timed against the model: uniformly random with 16
    /// entries per row, so SpGEMM does 256 products per row (default 100 000: 25.6 million
    /// products, a fraction of a second on a few cores).
    pub rows: usize,
    /// Rows of the small matrix timed for a call's own cost (default 1 000, 4 entries per row).
    pub small_rows: usize,
    /// Runs of each, the quickest kept (default 3; at least 1).
    pub rounds: usize,
}

impl Default for CalibrationOptions {
    fn default() -> Self {
        CalibrationOptions {
            rows: 100_000,
            small_rows: 1_000,
            rounds: 3,
        }
    }
}

/// What a calibration measured for one device and operation.
#[derive(Clone, Debug, PartialEq)]
pub struct Calibrated {
    /// The device's id, as [`Context::devices`] lists it.
    pub device: String,
    /// Its key in the calibration file (backend, name, driver version, compute units).
    pub key: String,
    /// The operation.
    pub op: OpKind,
    /// The model's correction (measured over predicted time of copies and computing) and the
    /// per-call cost (seconds), measured or learned.
    pub measured: Measured,
    /// Whether a calibration measured it or real runs taught it.
    pub origin: Origin,
}

impl<T: ContextScalar> Context<T> {
    /// [`calibrate_with`](Self::calibrate_with) the default sizes (a few seconds).
    pub fn calibrate(&self) -> Result<Vec<Calibrated>> {
        self.calibrate_with(&CalibrationOptions::default())
    }

    /// Times SpGEMM, SpMM (8 columns) and SpMV from host memory on each device the context
    /// computes on, alone and in turn: a small product for what a call costs (the quickest
    /// of `rounds`), a larger one for how far the model is off on that device (its quickest
    /// time less that cost, over the model's time for its copies and computing). The results are used by the cost model from now on, take the place of the file's
    /// entries for these devices, and are written to the calibration file where one is kept
    /// (a failure to write is a `tracing` warning). A device that fails an operation is left
    /// out of it (with a warning). [`Error::InvalidArgument`] for sizes of zero.
    pub fn calibrate_with(&self, options: &CalibrationOptions) -> Result<Vec<Calibrated>> {
        if options.rows == 0 || options.small_rows == 0 {
            return Err(Error::InvalidArgument(
                "a calibration needs products of at least one row".into(),
            ));
        }
        let _span = tracing::info_span!("calibrate", rows = options.rows).entered();
        let rounds = options.rounds.max(1);
        let large: Csr<T> = hetsparse_core::generate::uniform(options.rows, options.rows, 16, 11);
        // SpMV and SpMM are timed on a banded matrix: how much of x (of B) a CPU's caches hold
        // depends on the locality of A's columns, which the model does not weigh, and most
        // matrices these products run on (meshes, stencils, AMG levels) keep theirs local,
        // where a uniformly random one would teach every SpMV a random gather's cost.
        let large_local: Csr<T> = hetsparse_core::generate::product_operands(
            hetsparse_core::generate::MatrixClass::Banded,
            options.rows,
            11,
        )
        .0;
        let small: Csr<T> =
            hetsparse_core::generate::uniform(options.small_rows, options.small_rows, 4, 12);
        let columns = 8;
        let dense_of = |m: &Csr<T>| {
            Dense::try_new(
                m.ncols(),
                columns,
                hetsparse_core::Layout::RowMajor,
                vec![T::from_f64(1.0); m.ncols() * columns],
            )
        };
        let (large_dense, small_dense) = (dense_of(&large_local)?, dense_of(&small)?);
        let (large_x, small_x) = (
            vec![T::from_f64(1.0); large_local.ncols()],
            vec![T::from_f64(1.0); small.ncols()],
        );
        let ids = self.used_ids();
        let mut results = Vec::new();
        for (d, backend) in self.backends().iter().enumerate() {
            for op in OpKind::ALL {
                if !backend.capabilities().supports(op.operation(), T::TYPE) {
                    continue;
                }
                let run = |m: &Csr<T>, dense: &Dense<T>, x: &[T]| -> Result<()> {
                    match op {
                        OpKind::Spgemm => backend.spgemm(m, m, SpgemmAlgorithm::Auto).map(drop),
                        OpKind::Spmm => backend.spmm(m.into(), dense).map(drop),
                        OpKind::Spmv => backend.spmv(m.into(), x).map(drop),
                    }
                };
                let quickest = |m: &Csr<T>, dense: &Dense<T>, x: &[T]| -> Result<f64> {
                    let mut best = f64::INFINITY;
                    for _ in 0..rounds {
                        let started = Instant::now();
                        run(m, dense, x)?;
                        best = best.min(started.elapsed().as_secs_f64());
                    }
                    Ok(best)
                };
                let workload = |m: &Csr<T>| -> Result<Workload> {
                    Ok(match op {
                        OpKind::Spgemm => Workload::spgemm(m, m)?,
                        OpKind::Spmm => Workload::spmm(m, columns),
                        OpKind::Spmv => Workload::spmv(m),
                    })
                };
                let timed_large = if op == OpKind::Spgemm {
                    &large
                } else {
                    &large_local
                };
                let timed = quickest(&small, &small_dense, &small_x).and_then(|per_call| {
                    let wall = quickest(timed_large, &large_dense, &large_x)?;
                    Ok((per_call, wall))
                });
                let (per_call, wall) = match timed {
                    Ok(t) => t,
                    Err(e) if e.is_caller_error() => return Err(e),
                    Err(e) => {
                        tracing::warn!(device = ids.get(d).copied().unwrap_or("?"), %op, error = %e, "calibration failed; the device is left out of it");
                        continue;
                    }
                };
                // The large product's time less a call's own cost (at least a tenth of it)
                // over what the model predicts for its copies and computing.
                let predicted = workload(timed_large)?.modelled_on(d, &backend.profile());
                let Some(measured) = (Measured {
                    factor: 1.0,
                    per_call,
                })
                .from_run(&predicted, wall)
                .map(|m| Measured {
                    factor: m.factor,
                    per_call,
                }) else {
                    continue;
                };
                results.push(Calibrated {
                    device: ids
                        .get(d)
                        .map_or_else(|| format!("#{d}"), |s| s.to_string()),
                    key: self.keys[d].clone(),
                    op,
                    measured,
                    origin: Origin::Calibrated,
                });
            }
        }
        let mut fresh = Calibration::default();
        for c in &results {
            fresh.entries.insert(
                (c.key.clone(), c.op),
                Entry {
                    measured: c.measured,
                    origin: Origin::Calibrated,
                },
            );
        }
        lock(&self.calibration)
            .entries
            .extend(fresh.entries.clone());
        if let Some(path) = &self.cache_file {
            if let Err(e) = fresh.save(path) {
                tracing::warn!(path = %path.display(), error = %e, "calibration not saved");
            }
        }
        Ok(results)
    }

    /// The calibration of each device the context computes on: what the file held, what
    /// [`calibrate`](Self::calibrate) measured, what runs taught and was saved.
    pub fn calibration(&self) -> Vec<Calibrated> {
        let calibration = lock(&self.calibration);
        let ids = self.used_ids();
        let mut out = Vec::new();
        for (d, key) in self.keys.iter().enumerate() {
            for op in OpKind::ALL {
                if let Some(e) = calibration.get(key, op) {
                    out.push(Calibrated {
                        device: ids
                            .get(d)
                            .map_or_else(|| format!("#{d}"), |s| s.to_string()),
                        key: key.clone(),
                        op,
                        measured: e.measured,
                        origin: e.origin,
                    });
                }
            }
        }
        out
    }

    /// Writes what runs taught (each device's correction of the model learned from its calls
    /// alone, blended half and half with the entry it had) to the calibration file.
    /// `Ok(false)` when there is no file or nothing new; the context also does this when
    /// dropped, warning on failure.
    pub fn save_calibration(&self) -> std::io::Result<bool> {
        let (Some(path), Engine::Scheduled(_)) = (&self.cache_file, &self.engine) else {
            return Ok(false);
        };
        if !self.learned_unsaved.swap(false, Ordering::AcqRel) {
            return Ok(false);
        }
        let mut fresh = Calibration::default();
        {
            let mut calibration = lock(&self.calibration);
            for (&(d, op), learned) in lock(&self.learned).iter() {
                let Some(key) = self.keys.get(d) else {
                    continue;
                };
                let measured = calibration
                    .get(key, op)
                    .map_or(*learned, |old| old.measured.blended(learned));
                let entry = Entry {
                    measured,
                    origin: Origin::Learned,
                };
                if measured.is_valid() {
                    calibration.entries.insert((key.clone(), op), entry);
                    fresh.entries.insert((key.clone(), op), entry);
                }
            }
        }
        if fresh.entries.is_empty() {
            return Ok(false);
        }
        fresh.save(path)?;
        Ok(true)
    }
}

impl<T: ContextScalar> Drop for Context<T> {
    fn drop(&mut self) {
        if let Err(e) = self.save_calibration() {
            tracing::warn!(error = %e, "what runs taught was not saved to the calibration file");
        }
    }
}

/// The CUDA device among `unclaimed` (name, id) whose name is `opencl_name`, removed from the
/// list so that it claims no second OpenCL device.
#[cfg_attr(not(feature = "opencl"), allow(dead_code))]
fn same_card(unclaimed: &mut Vec<(String, String)>, opencl_name: &str) -> Option<String> {
    let wanted = opencl_name.trim().to_lowercase();
    let at = unclaimed
        .iter()
        .position(|(name, _)| name.trim().to_lowercase() == wanted)?;
    Some(unclaimed.remove(at).1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hetsparse_core::{generate, Layout, ReferenceBackend};

    #[test]
    fn each_cuda_card_claims_one_opencl_device_of_its_name() {
        let mut cuda = vec![
            ("NVIDIA H100".to_string(), "cuda:0".to_string()),
            ("NVIDIA H100".to_string(), "cuda:1".to_string()),
        ];
        assert_eq!(same_card(&mut cuda, "nvidia h100 "), Some("cuda:0".into()));
        assert_eq!(same_card(&mut cuda, "AMD Radeon"), None);
        assert_eq!(same_card(&mut cuda, "NVIDIA H100"), Some("cuda:1".into()));
        assert_eq!(same_card(&mut cuda, "NVIDIA H100"), None);
    }

    #[test]
    fn auto_finds_a_device_and_matches_the_reference() {
        let ctx = Context::<f64>::auto().unwrap();
        assert!(ctx.devices().iter().any(|d| d.skipped.is_none()));
        let a: Csr<f64> = generate::uniform(200, 150, 5, 3);
        let b: Csr<f64> = generate::uniform(150, 120, 4, 4);
        let expected = ReferenceBackend
            .spgemm(&a, &b, SpgemmAlgorithm::Auto)
            .unwrap();
        assert_eq!(ctx.spgemm(&a, &b).unwrap(), expected);
        let x: Vec<f64> = (0..150).map(|i| i as f64 * 0.5).collect();
        let y = ctx.spmv(&a, &x).unwrap();
        let y_ref = ReferenceBackend.spmv((&a).into(), &x).unwrap();
        for (got, want) in y.iter().zip(&y_ref) {
            assert!((got - want).abs() <= 1e-12 * want.abs().max(1.0));
        }
        let a_res = ctx.upload(&a).unwrap();
        let b_res = ctx.upload(&b).unwrap();
        let c_res = ctx
            .spgemm_resident((&a_res).into(), (&b_res).into())
            .unwrap();
        assert_eq!(ctx.download(&c_res).unwrap(), expected);
    }

    #[test]
    fn several_backends_run_through_the_scheduler() {
        let backends: Vec<Arc<dyn Backend<f64>>> =
            vec![Arc::new(ReferenceBackend), Arc::new(ReferenceBackend)];
        let ctx = Context::from_backends(&["ref:0", "ref:1"], backends)
            .unwrap()
            .share_always()
            .unwrap();
        assert!(ctx.scheduler().is_some());
        assert_eq!(ctx.devices().len(), 2);
        let a: Csr<f64> = generate::uniform(400, 400, 8, 5);
        let expected = ReferenceBackend
            .spgemm(&a, &a, SpgemmAlgorithm::Auto)
            .unwrap();
        assert_eq!(ctx.spgemm(&a, &a).unwrap(), expected);
    }

    #[test]
    fn a_call_on_the_same_operands_is_weighed_once() {
        let backends: Vec<Arc<dyn Backend<f64>>> =
            vec![Arc::new(ReferenceBackend), Arc::new(ReferenceBackend)];
        let ctx = Context::from_backends(&["ref:0", "ref:1"], backends).unwrap();
        let a: Csr<f64> = generate::uniform(300, 300, 6, 5);
        let b: Csr<f64> = generate::uniform(300, 300, 6, 6);
        let weighed = std::cell::Cell::new(0);
        let spmv = |m: &Csr<f64>| {
            ctx.route(
                Operands::of(OpKind::Spmv, m, Footprint::columns(1)),
                || {
                    weighed.set(weighed.get() + 1);
                    Ok(Workload::spmv(m))
                },
                &RunControl::unwatched(),
                |backend| backend.spmv(m.into(), &[1.0; 300]),
            )
            .unwrap()
        };
        let y = spmv(&a);
        assert_eq!(spmv(&a), y);
        assert_eq!(weighed.get(), 1, "the same operands weighed again");
        spmv(&b);
        assert_eq!(weighed.get(), 2, "other operands not weighed");
        // The same matrix in another shape of call is another workload.
        let x = Dense::try_new(300, 4, Layout::RowMajor, vec![1.0; 1200]).unwrap();
        let weighed_spmm = std::cell::Cell::new(0);
        for _ in 0..2 {
            ctx.route(
                Operands::of(OpKind::Spmm, &a, Footprint::columns(4)),
                || {
                    weighed_spmm.set(weighed_spmm.get() + 1);
                    Ok(Workload::spmm(&a, 4))
                },
                &RunControl::unwatched(),
                |backend| backend.spmm((&a).into(), &x),
            )
            .unwrap();
        }
        assert_eq!(weighed_spmm.get(), 1);
        // Only the latest WEIGHED_KEPT calls are kept.
        let others: Vec<Csr<f64>> = (0..WEIGHED_KEPT as u64)
            .map(|seed| generate::uniform(300, 300, 6, 100 + seed))
            .collect();
        for m in &others {
            spmv(m);
        }
        let before = weighed.get();
        spmv(&a);
        assert_eq!(
            weighed.get(),
            before + 1,
            "an evicted call not weighed again"
        );
    }

    #[test]
    fn vector_products_read_a_resident_matrix() {
        use hetsparse_core::{SemiringKind, SparseVector, VectorProductOptions};
        let a: Csr<f64> = generate::uniform(300, 300, 6, 7);
        let u = SparseVector::try_new(300, vec![3, 40, 299], vec![1.0, 2.0, 3.0]).unwrap();
        let options = VectorProductOptions::new().with_semiring(SemiringKind::PlusTimes);
        let want_vxm = ReferenceBackend
            .vxm_with(&u, (&a).into(), &options, &RunControl::unwatched())
            .unwrap();
        let want_mxv = ReferenceBackend
            .mxv_with((&a).into(), &u, &options, &RunControl::unwatched())
            .unwrap();
        // One device, and several through the scheduler (whose handles are in host memory).
        let one: Vec<Arc<dyn Backend<f64>>> = vec![Arc::new(ReferenceBackend)];
        let two: Vec<Arc<dyn Backend<f64>>> =
            vec![Arc::new(ReferenceBackend), Arc::new(ReferenceBackend)];
        for ctx in [
            Context::from_backends(&["ref:0"], one).unwrap(),
            Context::from_backends(&["ref:0", "ref:1"], two).unwrap(),
        ] {
            let resident = ctx.upload(&a).unwrap();
            for operand in [CsrOperand::Host(&a), CsrOperand::Resident(&resident)] {
                assert_eq!(ctx.vxm(&u, operand, &options).unwrap(), want_vxm);
                assert_eq!(ctx.mxv(operand, &u, &options).unwrap(), want_mxv);
            }
        }
    }

    #[test]
    fn no_backend_is_an_error_that_says_so() {
        let err = Context::<f64>::from_backends(&[], Vec::new()).unwrap_err();
        assert!(matches!(err, Error::NoDevice { .. }), "{err}");
        let err = Context::<f64>::from_backends(&["x"], Vec::new()).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    }
}
