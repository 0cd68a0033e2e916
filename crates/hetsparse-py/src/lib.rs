//! The native part of the `hetsparse` Python package (`hetsparse._hetsparse`).
//!
//! The Python layer (`python/hetsparse/__init__.py`) takes scipy.sparse matrices and NumPy
//! arrays apart into their arrays and builds scipy results from the arrays returned here;
//! this module converts and checks the arrays, runs the products on a [`hetsparse::Context`]
//! with the GIL released, and turns Ctrl-C into cancellation of the run.
#![warn(missing_docs)]

mod chunked;
mod convert;
mod devices;
mod errors;

use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};

use hetsparse::generate::{self, MatrixClass};
use hetsparse::{Complex, Csr, Dense, Layout, RunControl, SpgemmOptions, SpmmOptions, SpmvOptions};
use numpy::{PyArray1, PyArrayMethods, PyReadonlyArray1, PyReadonlyArray2, PyUntypedArrayMethods};
use pyo3::exceptions::{PyRuntimeError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};

use convert::{csr_to_py, Parts};
use devices::context;
use errors::{to_py, value, DeviceError};
use hetsparse::DeviceChoice;

/// Runs `work` on a thread of its own with the GIL released; the calling thread waits, and
/// every 50 ms takes the GIL for a moment to let Python handle signals and to hand the run's
/// progress to `progress`, when there is one. When a signal handler or the progress callable
/// raises (Ctrl-C gives `KeyboardInterrupt`), `run` is cancelled, the worker stops at its
/// next checkpoint, and that exception is raised.
///
/// Work of less than [`INLINE_WORK`] (`size`: entries read, or for SpGEMM a bound on the
/// intermediate products) runs on the calling thread, still without the GIL: it ends within a
/// moment of a signal, and a thread of its own would cost a good share of the product.
/// `progress` then hears only the end.
fn detached<R: Send>(
    py: Python<'_>,
    run: &RunControl,
    size: usize,
    mut progress: Option<ProgressReport<'_>>,
    work: impl FnOnce() -> PyResult<R> + Send,
) -> PyResult<R> {
    if size < INLINE_WORK {
        let result = py.allow_threads(work)?;
        if let Some(report) = &mut progress {
            report.finished(py, run)?;
        }
        return Ok(result);
    }
    py.allow_threads(|| {
        std::thread::scope(|scope| {
            let (sender, receiver) = std::sync::mpsc::channel();
            let worker = scope.spawn(move || {
                // The receiver lives until the worker is joined below.
                let _ = sender.send(work());
            });
            let mut interrupted: Option<PyErr> = None;
            let result = loop {
                match receiver.recv_timeout(Duration::from_millis(50)) {
                    Ok(result) => break Some(result),
                    Err(RecvTimeoutError::Disconnected) => break None,
                    Err(RecvTimeoutError::Timeout) => {
                        if interrupted.is_none() {
                            let looked = Python::with_gil(|py| {
                                py.check_signals()?;
                                match &mut progress {
                                    Some(report) => report.moved(py, run),
                                    None => Ok(()),
                                }
                            });
                            if let Err(e) = looked {
                                run.cancel();
                                interrupted = Some(e);
                            }
                        }
                    }
                }
            };
            let panicked = worker.join().is_err();
            match (interrupted, result) {
                (Some(e), _) => Err(e),
                (None, Some(Ok(result))) if !panicked => {
                    if let Some(report) = &mut progress {
                        Python::with_gil(|py| report.finished(py, run))?;
                    }
                    Ok(result)
                }
                (None, Some(Err(e))) if !panicked => Err(e),
                _ => Err(PyRuntimeError::new_err(
                    "hetsparse: the computation panicked (a bug, please report it)",
                )),
            }
        })
    })
}

/// Work of this size or more runs on a thread of its own, watched for Ctrl-C (see
/// [`detached`]). Two million products or entries read take milliseconds on one core, and
/// starting, waiting for and joining a thread cost tens of microseconds: on a product of that
/// size, a few per cent; on the AMG hierarchy's coarse products, which take less than a
/// millisecond, up to half of the call.
const INLINE_WORK: usize = 1 << 21;

/// The size of `A · B` (with `transpose`, of `Bᵀ · Aᵀ`) for [`detached`]: the operands'
/// entries plus a bound on the intermediate products — the left operand's entries times the
/// right operand's longest row, where its arrays give that (CSR rows, or CSC columns for a
/// transpose), else its width. Operands that alone reach [`INLINE_WORK`] skip the bound's
/// pass over the offsets.
fn product_size<T: Storable>(a: &Operand<'_, T>, b: &Operand<'_, T>, transpose: bool) -> usize {
    let entries = a.nnz().saturating_add(b.nnz());
    if entries >= INLINE_WORK {
        return entries;
    }
    let (left, right_rows) = if transpose {
        (b.nnz(), a.longest_line(false).unwrap_or(a.shape().0))
    } else {
        (a.nnz(), b.longest_line(true).unwrap_or(b.shape().1))
    };
    entries.saturating_add(left.saturating_mul(right_rows))
}

/// Hands a run's progress to a Python callable as `progress(done, planned)`: intermediate
/// products done of those planned.
struct ProgressReport<'a> {
    callable: &'a Py<PyAny>,
    /// What the callable was last given.
    last: Option<(u64, u64)>,
}

impl<'a> ProgressReport<'a> {
    fn new(callable: &'a Py<PyAny>) -> Self {
        ProgressReport {
            callable,
            last: None,
        }
    }

    /// Calls the callable when the run's progress moved since its last call, once the
    /// backend has planned the run's work (`done` never above `planned`).
    fn moved(&mut self, py: Python<'_>, run: &RunControl) -> PyResult<()> {
        let p = run.progress();
        if p.planned == 0 {
            return Ok(());
        }
        self.give(py, (p.done.min(p.planned), p.planned))
    }

    /// The last call, once the run has finished: all of it done.
    fn finished(&mut self, py: Python<'_>, run: &RunControl) -> PyResult<()> {
        let p = run.progress();
        let total = p.planned.max(p.done);
        self.give(py, (total, total))
    }

    fn give(&mut self, py: Python<'_>, now: (u64, u64)) -> PyResult<()> {
        if self.last == Some(now) {
            return Ok(());
        }
        self.last = Some(now);
        self.callable.call1(py, now).map(drop)
    }
}

/// A run that can be cancelled; watched (its backends count the products they plan and do)
/// only where someone reads its progress.
fn run_control(watched: bool) -> RunControl {
    if watched {
        RunControl::new()
    } else {
        RunControl::unwatched()
    }
}

/// Calls `$body` with `$t` the scalar type of the NumPy array `$data` (`TypeError` for a
/// dtype hetsparse does not compute in).
macro_rules! with_scalar {
    ($data:expr, $name:expr, |$t:ident| $body:expr) => {{
        let data: &Bound<'_, PyAny> = $data;
        if data.downcast::<PyArray1<f64>>().is_ok() {
            type $t = f64;
            $body
        } else if data.downcast::<PyArray1<f32>>().is_ok() {
            type $t = f32;
            $body
        } else if data.downcast::<PyArray1<Complex<f64>>>().is_ok() {
            type $t = Complex<f64>;
            $body
        } else if data.downcast::<PyArray1<Complex<f32>>>().is_ok() {
            type $t = Complex<f32>;
            $body
        } else {
            Err(unsupported_dtype(data, $name))
        }
    }};
    // The semiring products also compute in the integer types and `bool`.
    ($data:expr, $name:expr, exact too, |$t:ident| $body:expr) => {{
        let data: &Bound<'_, PyAny> = $data;
        if data.downcast::<PyArray1<bool>>().is_ok() {
            type $t = bool;
            $body
        } else if data.downcast::<PyArray1<i32>>().is_ok() {
            type $t = i32;
            $body
        } else if data.downcast::<PyArray1<i64>>().is_ok() {
            type $t = i64;
            $body
        } else if data.downcast::<PyArray1<u32>>().is_ok() {
            type $t = u32;
            $body
        } else if data.downcast::<PyArray1<u64>>().is_ok() {
            type $t = u64;
            $body
        } else {
            with_scalar!(data, $name, |$t| $body)
        }
    }};
}

// After `with_scalar!`, which they use.
mod matrix;
mod semiring;

use matrix::{call_device, product_kept, Operand, Outcome, Source, Storable};

/// Calls `$body` with `$t` the scalar type of the plain products' operand `$source` (a
/// [`Source`]): its data's dtype, or a stored matrix's. `TypeError` for a dtype the plain
/// products do not compute in: a stored matrix of an exact dtype, which only the semiring
/// products take.
macro_rules! with_source {
    ($source:expr, $name:expr, |$t:ident| $body:expr) => {
        match $source {
            Source::Parts(p) => with_scalar!(&p.data, $name, |$t| $body),
            Source::Stored(m) => match m.get().scalar() {
                hetsparse::ScalarType::F32 => {
                    type $t = f32;
                    $body
                }
                hetsparse::ScalarType::F64 => {
                    type $t = f64;
                    $body
                }
                hetsparse::ScalarType::C32 => {
                    type $t = Complex<f32>;
                    $body
                }
                hetsparse::ScalarType::C64 => {
                    type $t = Complex<f64>;
                    $body
                }
                other => Err(PyTypeError::new_err(format!(
                    "{}: a Matrix of dtype {} in a product computed in float32, float64, \
                     complex64 or complex128 (the dtypes of spgemm, spmm and spmv)",
                    $name,
                    matrix::dtype_name(other)
                ))),
            },
        }
    };
}

fn unsupported_dtype(data: &Bound<'_, PyAny>, name: &str) -> PyErr {
    let dtype = data
        .getattr("dtype")
        .and_then(|d| d.str())
        .map_or_else(|_| "?".to_string(), |s| s.to_string());
    PyTypeError::new_err(format!(
        "{name}: dtype {dtype} is not one hetsparse computes in (float32, float64, complex64, \
         complex128)"
    ))
}

/// `C = A · B` (with `transpose`, `Cᵀ = Bᵀ · Aᵀ`, which is how CSC operands give a CSC
/// result without conversion) from operand tuples or stored matrices (never transposed: the
/// Python layer does not ask for `transpose` with one); returns `(nrows, ncols, indptr,
/// indices, data)` of the CSR result. `same` says A and B are one matrix, converted once; `progress`
/// is called as `progress(done, planned)` while the product runs and at its end;
/// `memory_limit` is the host memory, in bytes, C may take (by default what the system
/// reports available; see [`chunked`]). With `keep`, the result is a `StoredMatrix`: left where
/// a device with memory of its own computed it, without a host copy (else the host result).
#[pyfunction]
#[pyo3(signature = (a, b, device, transpose=false, same=false, progress=None, memory_limit=None, keep=false))]
#[allow(clippy::too_many_arguments)]
fn spgemm<'py>(
    py: Python<'py>,
    a: &Bound<'py, PyAny>,
    b: &Bound<'py, PyAny>,
    device: &str,
    transpose: bool,
    same: bool,
    progress: Option<Bound<'py, PyAny>>,
    memory_limit: Option<u64>,
    keep: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let choice = devices::parse(device)?;
    if let Some(p) = &progress {
        if !p.is_callable() {
            return Err(PyTypeError::new_err(
                "progress: expected a callable taking (done, planned)",
            ));
        }
    }
    let product = Product {
        choice: &choice,
        transpose,
        same,
        progress: progress.map(Bound::unbind),
        memory_limit,
        keep,
    };
    let a = Source::extract(a, "A")?;
    let b = Source::extract(b, "B")?;
    let ((m, k), (k_b, n)) = (a.shape(), b.shape());
    if k != k_b {
        return Err(value(format!(
            "dimension mismatch: A is {m}×{k}, B is {k_b}×{n}"
        )));
    }
    with_source!(&a, "A", |T| spgemm_t::<T>(py, &a, &b, &product))
}

/// How [`spgemm`] was asked to compute its product.
struct Product<'c> {
    choice: &'c DeviceChoice,
    transpose: bool,
    same: bool,
    progress: Option<Py<PyAny>>,
    memory_limit: Option<u64>,
    keep: bool,
}

fn spgemm_t<'py, T: Storable>(
    py: Python<'py>,
    a: &Source<'py>,
    b: &Source<'py>,
    product: &Product<'_>,
) -> PyResult<Bound<'py, PyAny>> {
    let Product {
        choice,
        transpose,
        same,
        ref progress,
        memory_limit,
        keep,
    } = *product;
    let a_data = a.data::<T>("A")?;
    let b_data = b.data::<T>("B")?;
    let (a, b) = (a.operand(&a_data, "A")?, b.operand(&b_data, "B")?);
    let run = run_control(progress.is_some());
    let report = progress.as_ref().map(ProgressReport::new);
    // A stored matrix is never transposed (the Python layer computes those products with
    // operands it converts), so only an untransposed product finds device copies.
    let device = call_device(choice, [&a, &b]);
    let c = detached(py, &run, product_size(&a, &b, transpose), report, || {
        let ctx = context::<T>(&device)?;
        let (left_op, right_op) = if transpose { (&b, &a) } else { (&a, &b) };
        let left = left_op.placed(&device, transpose)?;
        let right_owned;
        let right = if same {
            &left
        } else {
            right_owned = right_op.placed(&device, transpose)?;
            &right_owned
        };
        let operands = (left.operand(), right.operand());
        if keep {
            if let Some(kept) = product_kept(&ctx, &device, operands, &SpgemmOptions::new(), &run)?
            {
                return Ok(Outcome::Stored(kept));
            }
        }
        let c = match (left.host(), right.host()) {
            (Some(l), Some(r)) => chunked::spgemm(&ctx, (l, r), operands, &run, memory_limit),
            // An operand with no host copy (a result kept on the device) is multiplied there
            // whole: the checks of C's size against host memory read host operands.
            _ => ctx.spgemm_with(operands.0, operands.1, &SpgemmOptions::new(), &run),
        }
        .map_err(to_py)?;
        Outcome::of_host(c, keep, &device)
    })?;
    a.released()?;
    b.released()?;
    c.into_py(py)
}

/// `Y = A · X` for a dense two-dimensional `X` (C or Fortran order), A an operand tuple or a
/// stored matrix; returns `(data, row_major)`: the flat result, in C order when `row_major`,
/// else in Fortran order.
#[pyfunction]
#[pyo3(name = "spmm")]
fn spmm_dense<'py>(
    py: Python<'py>,
    a: &Bound<'py, PyAny>,
    x: &Bound<'py, PyAny>,
    device: &str,
) -> PyResult<(Bound<'py, PyAny>, bool)> {
    let choice = devices::parse(device)?;
    let a = Source::extract(a, "A")?;
    with_source!(&a, "A", |T| spmm_t::<T>(py, &a, x, &choice))
}

fn spmm_t<'py, T: Storable>(
    py: Python<'py>,
    a: &Source<'py>,
    x: &Bound<'py, PyAny>,
    choice: &DeviceChoice,
) -> PyResult<(Bound<'py, PyAny>, bool)> {
    let a_data = a.data::<T>("A")?;
    let a = a.operand(&a_data, "A")?;
    let x: PyReadonlyArray2<'py, T> = x
        .downcast::<numpy::PyArray2<T>>()
        .map_err(|_| PyTypeError::new_err("X must be a two-dimensional array of A's dtype"))?
        .try_readonly()
        .map_err(|_| value("X is being written elsewhere"))?;
    let (nrows, ncols) = (x.shape()[0], x.shape()[1]);
    let layout = if x.is_c_contiguous() {
        Layout::RowMajor
    } else if x.is_fortran_contiguous() {
        Layout::ColMajor
    } else {
        return Err(value("X is neither C- nor Fortran-contiguous"));
    };
    if a.shape().1 != nrows {
        return Err(value(format!(
            "dimension mismatch: A is {}×{}, X is {nrows}×{ncols}",
            a.shape().0,
            a.shape().1
        )));
    }
    let x_data = convert::contents(&x, "X")?;
    let run = run_control(false);
    let size = a.nnz().saturating_mul(ncols).saturating_add(x_data.len());
    let device = call_device(choice, [&a]);
    let y = detached(py, &run, size, None, || {
        let ctx = context::<T>(&device)?;
        let a = a.placed_sparse(&device)?;
        let a = a.operand();
        let mut data = Vec::new();
        data.try_reserve_exact(x_data.len())
            .map_err(|_| pyo3::exceptions::PyMemoryError::new_err("cannot allocate a copy of X"))?;
        data.extend_from_slice(x_data);
        let x = Dense::try_new(nrows, ncols, layout, data).map_err(|e| to_py(e.into()))?;
        ctx.spmm_with(a, (&x).into(), &SpmmOptions::new(), &run)
            .map_err(to_py)
    })?;
    a.released()?;
    let row_major = y.layout() == Layout::RowMajor;
    Ok((PyArray1::from_vec(py, y.into_data()).into_any(), row_major))
}

/// `y = A · x` for a one-dimensional `x`, which is read in place; A an operand tuple or a
/// stored matrix.
#[pyfunction]
fn spmv<'py>(
    py: Python<'py>,
    a: &Bound<'py, PyAny>,
    x: &Bound<'py, PyAny>,
    device: &str,
) -> PyResult<Bound<'py, PyAny>> {
    let choice = devices::parse(device)?;
    let a = Source::extract(a, "A")?;
    with_source!(&a, "A", |T| spmv_t::<T>(py, &a, x, &choice))
}

fn spmv_t<'py, T: Storable>(
    py: Python<'py>,
    a: &Source<'py>,
    x: &Bound<'py, PyAny>,
    choice: &DeviceChoice,
) -> PyResult<Bound<'py, PyAny>> {
    let a_data = a.data::<T>("A")?;
    let a = a.operand(&a_data, "A")?;
    let x: PyReadonlyArray1<'py, T> = x
        .downcast::<PyArray1<T>>()
        .map_err(|_| PyTypeError::new_err("x must be a one-dimensional array of A's dtype"))?
        .try_readonly()
        .map_err(|_| value("x is being written elsewhere"))?;
    let x = convert::contents(&x, "x")?;
    if a.shape().1 != x.len() {
        return Err(value(format!(
            "dimension mismatch: A is {}×{}, x has length {}",
            a.shape().0,
            a.shape().1,
            x.len()
        )));
    }
    let run = run_control(false);
    let device = call_device(choice, [&a]);
    let y = detached(py, &run, a.nnz(), None, || {
        let ctx = context::<T>(&device)?;
        let a = a.placed_sparse(&device)?;
        ctx.spmv_with(a.operand(), x.into(), &SpmvOptions::new(), &run)
            .map_err(to_py)
    })?;
    a.released()?;
    Ok(PyArray1::from_vec(py, y).into_any())
}

/// Every device `device` finds (`auto` and `all`: every device the build reaches), as dicts:
/// `id`, `name`, `backend`, `kind`, `compute_units`, `memory_bytes`, `dtypes` (those its
/// SpGEMM runs: `bool` and the integer ones through `mxm`, `mxv` and `vxm`), `used`, and `reason` (why it is not used, or `None`). Backends compiled in
/// that found no device are listed with `used` false and their reason.
#[pyfunction]
#[pyo3(name = "devices", signature = (device="auto"))]
fn list_devices<'py>(py: Python<'py>, device: &str) -> PyResult<Bound<'py, PyList>> {
    let choice = devices::parse(device)?;
    let ctx = py.allow_threads(|| context::<f64>(&choice))?;
    let list = PyList::empty(py);
    for d in ctx.devices() {
        let dict = PyDict::new(py);
        dict.set_item("id", &d.id)?;
        dict.set_item("name", &d.info.name)?;
        dict.set_item("backend", d.info.backend.name())?;
        dict.set_item("kind", format!("{:?}", d.info.kind).to_lowercase())?;
        dict.set_item("compute_units", d.info.compute_units)?;
        dict.set_item("memory_bytes", d.info.memory_bytes)?;
        let dtypes: Vec<&str> = d.scalars.iter().filter_map(|s| numpy_name(*s)).collect();
        dict.set_item("dtypes", dtypes)?;
        dict.set_item("used", d.skipped.is_none())?;
        dict.set_item("reason", d.skipped.as_deref())?;
        list.append(dict)?;
    }
    for u in ctx.unavailable() {
        let dict = PyDict::new(py);
        dict.set_item("id", u.name())?;
        dict.set_item("name", py.None())?;
        dict.set_item("backend", u.backend.name())?;
        dict.set_item("kind", py.None())?;
        dict.set_item("compute_units", 0)?;
        dict.set_item("memory_bytes", 0)?;
        dict.set_item("dtypes", PyList::empty(py))?;
        dict.set_item("used", false)?;
        dict.set_item("reason", &u.reason)?;
        list.append(dict)?;
    }
    Ok(list)
}

fn numpy_name(s: hetsparse::ScalarType) -> Option<&'static str> {
    use hetsparse::ScalarType as S;
    match s {
        S::F32 => Some("float32"),
        S::F64 => Some("float64"),
        S::C32 => Some("complex64"),
        S::C64 => Some("complex128"),
        S::Bool => Some("bool"),
        S::I32 => Some("int32"),
        S::I64 => Some("int64"),
        S::U32 => Some("uint32"),
        S::U64 => Some("uint64"),
        _ => None,
    }
}

fn class_of(name: &str) -> PyResult<MatrixClass> {
    name.parse::<MatrixClass>().map_err(to_py)
}

/// The operands `(A, B)` hetsparse's benchmarks multiply for matrix class `class` at `size`
/// (see `hetsparse_core::generate::product_operands`), each as `(nrows, ncols, indptr,
/// indices, data)` in float64.
#[pyfunction]
#[pyo3(name = "generate")]
fn generate_operands<'py>(
    py: Python<'py>,
    class: &str,
    size: usize,
    seed: u64,
) -> PyResult<(Bound<'py, PyTuple>, Bound<'py, PyTuple>)> {
    let class = class_of(class)?;
    let (a, b) = py.allow_threads(|| generate::product_operands::<f64>(class, size, seed));
    Ok((csr_to_py(py, a)?, csr_to_py(py, b)?))
}

/// Seconds each of `runs` products `A · B` take when called from Rust on `device`: the
/// operands (tuples as for [`spgemm`], float64) are made into hetsparse matrices once (read
/// in place or converted, as [`spgemm`] does), untimed, then `Context::spgemm` is timed on
/// them, the result dropped after its time is taken. The benchmark's measure of what the Python layer adds.
#[pyfunction]
#[pyo3(signature = (a, b, device="auto", runs=5, same=false))]
fn time_spgemm<'py>(
    py: Python<'py>,
    a: &Bound<'py, PyTuple>,
    b: &Bound<'py, PyTuple>,
    device: &str,
    runs: usize,
    same: bool,
) -> PyResult<Vec<f64>> {
    let choice = devices::parse(device)?;
    let (a, b) = (Parts::extract(a, "A")?, Parts::extract(b, "B")?);
    let (a_data, b_data) = (a.data::<f64>("A")?, b.data::<f64>("B")?);
    let (a_view, b_view) = (a.view(&a_data)?, b.view(&b_data)?);
    let (a, b) = (&a_view, &b_view);
    let times = py.allow_threads(|| {
        let ctx = context::<f64>(&choice)?;
        let a: Csr<f64> = a.csr(false)?;
        let b_owned;
        let b = if same {
            &a
        } else {
            b_owned = b.csr(false)?;
            &b_owned
        };
        let mut times = Vec::with_capacity(runs);
        for _ in 0..runs {
            let start = Instant::now();
            let c = ctx.spgemm(&a, b).map_err(to_py)?;
            times.push(start.elapsed().as_secs_f64());
            drop(c);
        }
        Ok::<_, PyErr>(times)
    })?;
    a_view.released()?;
    b_view.released()?;
    Ok(times)
}

/// Writes what the process's contexts learned to the calibration file; registered with
/// `atexit` by the package. The number of contexts that wrote something. Not part of the
/// package's API.
#[pyfunction]
#[pyo3(name = "_save_calibrations")]
fn save_calibrations(py: Python<'_>) -> usize {
    py.allow_threads(devices::save_calibrations)
}

/// How many compressed operands were read in place (their offsets, their indices, their
/// values) and how many were converted, since the module was loaded: `(offsets, indices,
/// values, converted)`. For the tests; not part of the package's API.
#[pyfunction]
#[pyo3(name = "_conversions")]
fn conversions() -> (u64, u64, u64, u64) {
    let [offsets, indices, values, converted] = &convert::CONVERSIONS;
    let read = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
    (read(offsets), read(indices), read(values), read(converted))
}

/// How many sparse operands were taken from NumPy's arrays (read in place or converted) since
/// the module was loaded; operands that are stored matrices (`hetsparse.Matrix`) are not
/// counted. For the tests; not part of the package's API.
#[pyfunction]
#[pyo3(name = "_operands_read")]
fn operands_read() -> u64 {
    convert::OPERANDS_READ.load(std::sync::atomic::Ordering::Relaxed)
}

/// The native module.
#[pymodule]
fn _hetsparse(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(spgemm, m)?)?;
    m.add_function(wrap_pyfunction!(spmm_dense, m)?)?;
    m.add_function(wrap_pyfunction!(spmv, m)?)?;
    m.add_function(wrap_pyfunction!(semiring::mxm, m)?)?;
    m.add_function(wrap_pyfunction!(semiring::vector_product, m)?)?;
    m.add_function(wrap_pyfunction!(list_devices, m)?)?;
    m.add_function(wrap_pyfunction!(generate_operands, m)?)?;
    m.add_function(wrap_pyfunction!(time_spgemm, m)?)?;
    m.add_function(wrap_pyfunction!(conversions, m)?)?;
    m.add_function(wrap_pyfunction!(operands_read, m)?)?;
    m.add_class::<matrix::StoredMatrix>()?;
    m.add_function(wrap_pyfunction!(save_calibrations, m)?)?;
    m.add("DeviceError", m.py().get_type::<DeviceError>())?;
    m.add(
        "FEATURES",
        vec![
            "cpu",
            #[cfg(feature = "cuda")]
            "cuda",
            #[cfg(feature = "opencl")]
            "opencl",
        ],
    )?;
    Ok(())
}
