//! [`Context`]: every device the enabled features reach, used as one.

use std::fmt;
use std::sync::Arc;

use hetsparse_core::{
    Backend, Csr, CsrOperand, Dense, DeviceInfo, Error, Operation, ResidentCsr, ResidentDense,
    Result, RunControl, Scalar, ScalarType, SparseRef, SpgemmAlgorithm, SpgemmOptions,
};
use hetsparse_sched::Scheduler;

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
    /// `cpu`, `cuda` or `opencl`.
    pub backend: String,
    /// What the backend said.
    pub reason: String,
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
    let capabilities = backend.capabilities();
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
        info: backend.info(),
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
    /// (see the [type docs](Context) for which are left out). [`Error::NoDevice`] when none is
    /// usable.
    pub fn auto() -> Result<Self> {
        let _span = tracing::info_span!("context_auto").entered();
        let mut candidates: Vec<Candidate<T>> = Vec::new();
        let mut unavailable = Vec::new();

        #[cfg(feature = "cpu")]
        match hetsparse_cpu::CpuBackend::new() {
            Ok(cpu) => candidates.push(candidate("cpu".into(), Arc::new(cpu))),
            Err(e) => unavailable.push(Unavailable {
                backend: "cpu".into(),
                reason: reason_of(e),
            }),
        }

        #[cfg(feature = "cuda")]
        {
            let mut ordinal = 0u32;
            loop {
                match hetsparse_cuda::CudaBackend::with_device(ordinal) {
                    Ok(gpu) => candidates.push(candidate(format!("cuda:{ordinal}"), Arc::new(gpu))),
                    Err(e) => {
                        if ordinal == 0 {
                            unavailable.push(Unavailable {
                                backend: "cuda".into(),
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
                    .filter(|c| c.found.info.backend == "cuda")
                    .map(|c| (c.found.info.name.clone(), c.found.id.clone()))
                    .collect();
                let cpu_on = candidates
                    .iter()
                    .any(|c| c.found.info.backend == "cpu" && c.backend.is_some());
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
                    match hetsparse_opencl::OpenClBackend::with_device_index(
                        d.platform_index,
                        d.device_index,
                    ) {
                        Ok(backend) => {
                            let mut c = candidate(id, Arc::new(backend) as Arc<dyn Backend<T>>);
                            if skip.is_some() {
                                c.found.skipped = skip;
                                c.backend = None;
                            }
                            candidates.push(c);
                        }
                        Err(e) => unavailable.push(Unavailable {
                            backend: id,
                            reason: reason_of(e),
                        }),
                    }
                }
            }
            Err(e) => unavailable.push(Unavailable {
                backend: "opencl".into(),
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
        Self::build(devices, unavailable, backends, false)
    }

    /// A context over backends the caller chose (for example a single device), listed as
    /// `ids` in [`devices`](Self::devices): one backend runs directly, several through a
    /// [`Scheduler`]. [`Error::NoDevice`] for an empty list, [`Error::InvalidArgument`] when
    /// `ids` and `backends` differ in length.
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
    pub fn share_always(self) -> Result<Self> {
        let backends = self.backends();
        Self::build(self.devices, self.unavailable, backends, true)
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
                    .map(|u| format!("{}: {}", u.backend, u.reason))
                    .chain(
                        devices
                            .iter()
                            .filter_map(|d| Some(format!("{}: {}", d.id, d.skipped.as_ref()?))),
                    )
                    .collect();
                return Err(Error::NoDevice {
                    backend: "context".into(),
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
        Ok(Context {
            devices,
            unavailable,
            engine,
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
        self.backend().spgemm(a, b, SpgemmAlgorithm::Auto)
    }

    /// `C = A · B` on host or resident operands, with options and a [`RunControl`] to cancel
    /// the run or watch its progress.
    pub fn spgemm_with(
        &self,
        a: CsrOperand<'_, T>,
        b: CsrOperand<'_, T>,
        options: &SpgemmOptions,
        run: &RunControl,
    ) -> Result<Csr<T>> {
        self.backend().spgemm_with(a, b, options, run)
    }

    /// `C = A · B` for a sparse A of any format (`&csr` converts) and a dense B.
    pub fn spmm<'a>(&self, a: impl Into<SparseRef<'a, T>>, b: &Dense<T>) -> Result<Dense<T>> {
        self.backend().spmm(a.into(), b)
    }

    /// `y = A · x` for a sparse A of any format (`&csr` converts).
    pub fn spmv<'a>(&self, a: impl Into<SparseRef<'a, T>>, x: &[T]) -> Result<Vec<T>> {
        self.backend().spmv(a.into(), x)
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

    /// Copies a dense matrix (or, with one column, a vector) into the context's memory.
    pub fn upload_dense(&self, d: &Dense<T>) -> Result<ResidentDense<T>> {
        self.backend().upload_dense(d)
    }

    /// Copies a resident dense matrix to the host.
    pub fn download_dense(&self, d: &ResidentDense<T>) -> Result<Dense<T>> {
        self.backend().download_dense(d)
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
    use hetsparse_core::{generate, ReferenceBackend};

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
    fn no_backend_is_an_error_that_says_so() {
        let err = Context::<f64>::from_backends(&[], Vec::new()).unwrap_err();
        assert!(matches!(err, Error::NoDevice { .. }), "{err}");
        let err = Context::<f64>::from_backends(&["x"], Vec::new()).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    }
}
