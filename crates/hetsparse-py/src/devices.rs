//! `device=`: which devices a call computes on, and the contexts kept for each.
//!
//! Making a context finds devices and, for OpenCL, compiles kernels, so each (device, dtype)
//! context is made once per process and kept.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use hetsparse::DeviceChoice;
use hetsparse::{Complex, Context, ContextScalar, Error};
use pyo3::exceptions::PyRuntimeError;
use pyo3::PyResult;

use crate::errors::to_py;

/// A device as named in Python: `auto`, `all`, `cpu`, `cuda[:N]`, `opencl[:NAME|P.D]`
/// (`ValueError` for anything else).
pub fn parse(s: &str) -> PyResult<DeviceChoice> {
    s.parse().map_err(to_py)
}

/// The contexts made so far, per dtype.
#[derive(Default)]
pub struct Contexts {
    f32: HashMap<DeviceChoice, Arc<Context<f32>>>,
    f64: HashMap<DeviceChoice, Arc<Context<f64>>>,
    c64: HashMap<DeviceChoice, Arc<Context<Complex<f32>>>>,
    c128: HashMap<DeviceChoice, Arc<Context<Complex<f64>>>>,
    bool: HashMap<DeviceChoice, Arc<Context<bool>>>,
    i32: HashMap<DeviceChoice, Arc<Context<i32>>>,
    i64: HashMap<DeviceChoice, Arc<Context<i64>>>,
    u32: HashMap<DeviceChoice, Arc<Context<u32>>>,
    u64: HashMap<DeviceChoice, Arc<Context<u64>>>,
}

/// The scalar types the package computes in, with their NumPy dtypes.
pub trait PyScalar: ContextScalar + numpy::Element {
    /// This type's contexts.
    fn contexts(all: &mut Contexts) -> &mut HashMap<DeviceChoice, Arc<Context<Self>>>;
}

impl PyScalar for f32 {
    fn contexts(all: &mut Contexts) -> &mut HashMap<DeviceChoice, Arc<Context<Self>>> {
        &mut all.f32
    }
}
impl PyScalar for f64 {
    fn contexts(all: &mut Contexts) -> &mut HashMap<DeviceChoice, Arc<Context<Self>>> {
        &mut all.f64
    }
}
impl PyScalar for Complex<f32> {
    fn contexts(all: &mut Contexts) -> &mut HashMap<DeviceChoice, Arc<Context<Self>>> {
        &mut all.c64
    }
}
impl PyScalar for Complex<f64> {
    fn contexts(all: &mut Contexts) -> &mut HashMap<DeviceChoice, Arc<Context<Self>>> {
        &mut all.c128
    }
}

/// The types of the semiring products (`mxm`, `mxv`, `vxm`) only.
macro_rules! exact_py_scalar {
    ($($t:ident),*) => {$(
        impl PyScalar for $t {
            fn contexts(all: &mut Contexts) -> &mut HashMap<DeviceChoice, Arc<Context<Self>>> {
                &mut all.$t
            }
        }
    )*};
}

exact_py_scalar!(bool, i32, i64, u32, u64);

fn cache() -> &'static Mutex<Contexts> {
    static CACHE: OnceLock<Mutex<Contexts>> = OnceLock::new();
    CACHE.get_or_init(Mutex::default)
}

/// The context for `choice` in `T`, made on first use (call it without the GIL: finding
/// devices and compiling OpenCL kernels takes a while).
pub fn context<T: PyScalar>(choice: &DeviceChoice) -> PyResult<Arc<Context<T>>> {
    let mut all = cache()
        .lock()
        .map_err(|_| PyRuntimeError::new_err("hetsparse: a previous call panicked"))?;
    let map = T::contexts(&mut all);
    if let Some(ctx) = map.get(choice) {
        return Ok(Arc::clone(ctx));
    }
    if !cfg!(feature = "cuda") && matches!(choice, DeviceChoice::Cuda(_)) {
        // Said here rather than by the facade, with how a Python user gets CUDA.
        return Err(to_py(Error::NoDevice {
            backend: hetsparse::BackendKind::Cuda,
            reason: "this hetsparse was built without CUDA (build the package with the `cuda` \
                     feature: MATURIN_PEP517_ARGS=\"--features cuda\" pip install \
                     crates/hetsparse-py)"
                .into(),
        }));
    }
    let ctx = Arc::new(Context::on(choice).map_err(to_py)?);
    map.insert(choice.clone(), Arc::clone(&ctx));
    Ok(ctx)
}

/// Writes what every context's runs taught to the calibration file (the module registers this
/// with `atexit`: the contexts live as long as the process, so they are never dropped, which
/// is where a context saves otherwise). The number of contexts that wrote something; a write
/// that fails is a `tracing` warning, never an exception at exit.
pub fn save_calibrations() -> usize {
    let Ok(all) = cache().lock() else {
        return 0;
    };
    fn save<T: ContextScalar>(map: &HashMap<DeviceChoice, Arc<Context<T>>>) -> usize {
        map.values()
            .filter(|ctx| match ctx.save_calibration() {
                Ok(saved) => saved,
                Err(e) => {
                    tracing::warn!(error = %e, "what runs taught was not saved to the calibration file");
                    false
                }
            })
            .count()
    }
    save(&all.f32)
        + save(&all.f64)
        + save(&all.c64)
        + save(&all.c128)
        + save(&all.bool)
        + save(&all.i32)
        + save(&all.i64)
        + save(&all.u32)
        + save(&all.u64)
}
