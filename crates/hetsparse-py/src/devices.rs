//! `device=`: which devices a call computes on, and the contexts kept for each.
//!
//! Making a context finds devices and, for OpenCL, compiles kernels, so each (device, dtype)
//! context is made once per process and kept.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use hetsparse::{Backend, Complex, Context, ContextScalar, Error};
use pyo3::exceptions::PyRuntimeError;
use pyo3::PyResult;

use crate::errors::{to_py, value};

/// A device as named in Python: `auto`, `all`, `cpu`, `cuda[:N]`, `opencl[:NAME|P.D]`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Choice {
    /// Every device [`Context::auto`] uses.
    Auto,
    /// The same, with every large enough product shared over all of them.
    All,
    /// The CPU's cores.
    Cpu,
    /// CUDA GPU number N.
    Cuda(u32),
    /// An OpenCL device: the first GPU (else the first device), `P.D`, or a name.
    OpenCl(Option<String>),
}

impl Choice {
    /// Parses `device=` (`ValueError` for anything else).
    pub fn parse(s: &str) -> PyResult<Self> {
        let (kind, arg) = match s.split_once(':') {
            Some((k, a)) => (k, Some(a)),
            None => (s, None),
        };
        match (kind.trim().to_ascii_lowercase().as_str(), arg) {
            ("auto", None) => Ok(Choice::Auto),
            ("all", None) => Ok(Choice::All),
            ("cpu", None) => Ok(Choice::Cpu),
            ("cuda", None) => Ok(Choice::Cuda(0)),
            ("cuda", Some(n)) => n.trim().parse().map(Choice::Cuda).map_err(|_| {
                value(format!(
                    "device `{s}`: a CUDA device is numbered (cuda:0, cuda:1, ...)"
                ))
            }),
            ("opencl", None) => Ok(Choice::OpenCl(None)),
            ("opencl", Some(name)) if !name.trim().is_empty() => {
                Ok(Choice::OpenCl(Some(name.trim().to_string())))
            }
            _ => Err(value(format!(
                "`{s}` is not a device: use auto, all, cpu, cuda[:N] or opencl[:NAME]"
            ))),
        }
    }

    fn label(&self) -> String {
        match self {
            Choice::Auto => "auto".into(),
            Choice::All => "all".into(),
            Choice::Cpu => "cpu".into(),
            Choice::Cuda(n) => format!("cuda:{n}"),
            Choice::OpenCl(None) => "opencl".into(),
            Choice::OpenCl(Some(name)) => format!("opencl:{name}"),
        }
    }
}

/// The contexts made so far, per dtype.
#[derive(Default)]
pub struct Contexts {
    f32: HashMap<Choice, Arc<Context<f32>>>,
    f64: HashMap<Choice, Arc<Context<f64>>>,
    c64: HashMap<Choice, Arc<Context<Complex<f32>>>>,
    c128: HashMap<Choice, Arc<Context<Complex<f64>>>>,
}

/// The scalar types the package computes in, with their NumPy dtypes.
pub trait PyScalar: ContextScalar + numpy::Element {
    /// This type's contexts.
    fn contexts(all: &mut Contexts) -> &mut HashMap<Choice, Arc<Context<Self>>>;
}

impl PyScalar for f32 {
    fn contexts(all: &mut Contexts) -> &mut HashMap<Choice, Arc<Context<Self>>> {
        &mut all.f32
    }
}
impl PyScalar for f64 {
    fn contexts(all: &mut Contexts) -> &mut HashMap<Choice, Arc<Context<Self>>> {
        &mut all.f64
    }
}
impl PyScalar for Complex<f32> {
    fn contexts(all: &mut Contexts) -> &mut HashMap<Choice, Arc<Context<Self>>> {
        &mut all.c64
    }
}
impl PyScalar for Complex<f64> {
    fn contexts(all: &mut Contexts) -> &mut HashMap<Choice, Arc<Context<Self>>> {
        &mut all.c128
    }
}

fn cache() -> &'static Mutex<Contexts> {
    static CACHE: OnceLock<Mutex<Contexts>> = OnceLock::new();
    CACHE.get_or_init(Mutex::default)
}

/// The context for `choice` in `T`, made on first use (call it without the GIL: finding
/// devices and compiling OpenCL kernels takes a while).
pub fn context<T: PyScalar>(choice: &Choice) -> PyResult<Arc<Context<T>>> {
    let mut all = cache()
        .lock()
        .map_err(|_| PyRuntimeError::new_err("hetsparse: a previous call panicked"))?;
    let map = T::contexts(&mut all);
    if let Some(ctx) = map.get(choice) {
        return Ok(Arc::clone(ctx));
    }
    let ctx = Arc::new(make::<T>(choice).map_err(to_py)?);
    map.insert(choice.clone(), Arc::clone(&ctx));
    Ok(ctx)
}

fn make<T: PyScalar>(choice: &Choice) -> Result<Context<T>, Error> {
    let label = choice.label();
    let single = |backend: Arc<dyn Backend<T>>| Context::from_backends(&[&label], vec![backend]);
    match choice {
        Choice::Auto => Context::auto(),
        Choice::All => Context::auto().and_then(Context::share_always),
        Choice::Cpu => single(Arc::new(hetsparse::cpu::CpuBackend::new()?)),
        Choice::Cuda(n) => single(cuda::<T>(*n)?),
        Choice::OpenCl(name) => single(opencl::<T>(name.as_deref())?),
    }
}

#[cfg(feature = "cuda")]
fn cuda<T: PyScalar>(ordinal: u32) -> Result<Arc<dyn Backend<T>>, Error> {
    Ok(Arc::new(hetsparse::cuda::CudaBackend::with_device(
        ordinal,
    )?))
}

#[cfg(not(feature = "cuda"))]
fn cuda<T: PyScalar>(_ordinal: u32) -> Result<Arc<dyn Backend<T>>, Error> {
    Err(Error::NoDevice {
        backend: "cuda".into(),
        reason: "this hetsparse was built without CUDA (build the package with the `cuda` \
                 feature: MATURIN_PEP517_ARGS=\"--features cuda\" pip install \
                 crates/hetsparse-py)"
            .into(),
    })
}

#[cfg(feature = "opencl")]
fn opencl<T: PyScalar>(name: Option<&str>) -> Result<Arc<dyn Backend<T>>, Error> {
    use hetsparse::opencl::OpenClBackend;
    let index = name.and_then(|n| {
        let (p, d) = n.split_once('.')?;
        Some((p.parse::<usize>().ok()?, d.parse::<usize>().ok()?))
    });
    let backend = match (name, index) {
        (_, Some((platform, device))) => OpenClBackend::with_device_index(platform, device)?,
        (Some(name), None) => OpenClBackend::with_device_name(name)?,
        (None, None) => OpenClBackend::new()?,
    };
    Ok(Arc::new(backend))
}

#[cfg(not(feature = "opencl"))]
fn opencl<T: PyScalar>(_name: Option<&str>) -> Result<Arc<dyn Backend<T>>, Error> {
    Err(Error::NoDevice {
        backend: "opencl".into(),
        reason: "this hetsparse was built without OpenCL".into(),
    })
}
