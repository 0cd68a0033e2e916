//! `hetsparse.Matrix`'s native half: a sparse matrix converted and checked once, kept in
//! hetsparse's own memory, and handed by reference to the products (plain and over a
//! semiring) of every later call (where a scipy.sparse operand is converted and checked again
//! on each call).
//!
//! A stored matrix is built through the path every scipy operand takes ([`Parts`],
//! [`View::csr`]), so it is checked the same way; arrays that path reads in place (NumPy's
//! memory) are then copied into vectors of ours, so the matrix owns its memory, outlives the
//! call and is not changed when the scipy matrix it came from is written.

use std::any::Any;
use std::marker::PhantomData;
use std::sync::OnceLock;

use hetsparse::{
    Complex, Context, Csr, CsrOperand, DeviceChoice, Mask, MemorySpace, ResidentCsr, RunControl,
    Scalar, ScalarType, SparseOperand, SparseRef, SpgemmOptions,
};
use numpy::PyArray1;
use pyo3::exceptions::{PyRuntimeError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::convert::{csr_to_py, Owned, Parts, View};
use crate::devices::{self, context, PyScalar};
use crate::errors::to_py;
use crate::unsupported_dtype;

/// A stored matrix's CSR, in one of the dtypes the semiring products compute in.
pub enum Stored {
    /// `float32`.
    F32(Csr<f32>),
    /// `float64`.
    F64(Csr<f64>),
    /// `complex64`.
    C64(Csr<Complex<f32>>),
    /// `complex128`.
    C128(Csr<Complex<f64>>),
    /// `bool`.
    Bool(Csr<bool>),
    /// `int32`.
    I32(Csr<i32>),
    /// `int64`.
    I64(Csr<i64>),
    /// `uint32`.
    U32(Csr<u32>),
    /// `uint64`.
    U64(Csr<u64>),
}

/// Evaluates `$body` with `$m` bound to the `Csr` of the [`Stored`] `$stored`, whatever its
/// scalar type (`$t` names that type in `$body`).
macro_rules! with_stored {
    ($stored:expr, |$m:ident: $t:ident| $body:expr) => {
        match $stored {
            Stored::F32($m) => {
                #[allow(dead_code)]
                type $t = f32;
                $body
            }
            Stored::F64($m) => {
                #[allow(dead_code)]
                type $t = f64;
                $body
            }
            Stored::C64($m) => {
                #[allow(dead_code)]
                type $t = Complex<f32>;
                $body
            }
            Stored::C128($m) => {
                #[allow(dead_code)]
                type $t = Complex<f64>;
                $body
            }
            Stored::Bool($m) => {
                #[allow(dead_code)]
                type $t = bool;
                $body
            }
            Stored::I32($m) => {
                #[allow(dead_code)]
                type $t = i32;
                $body
            }
            Stored::I64($m) => {
                #[allow(dead_code)]
                type $t = i64;
                $body
            }
            Stored::U32($m) => {
                #[allow(dead_code)]
                type $t = u32;
                $body
            }
            Stored::U64($m) => {
                #[allow(dead_code)]
                type $t = u64;
                $body
            }
        }
    };
}

/// Evaluates `$body` with `$t` the scalar type `$scalar` (a [`ScalarType`]) names, for the
/// types a [`Stored`] matrix holds; `$other` (given the type) for any other.
macro_rules! with_scalar_type {
    ($scalar:expr, |$t:ident| $body:expr, else |$o:ident| $other:expr) => {
        match $scalar {
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
            hetsparse::ScalarType::Bool => {
                type $t = bool;
                $body
            }
            hetsparse::ScalarType::I32 => {
                type $t = i32;
                $body
            }
            hetsparse::ScalarType::I64 => {
                type $t = i64;
                $body
            }
            hetsparse::ScalarType::U32 => {
                type $t = u32;
                $body
            }
            hetsparse::ScalarType::U64 => {
                type $t = u64;
                $body
            }
            #[allow(unreachable_patterns)]
            $o => $other,
        }
    };
}
pub(crate) use with_scalar_type;

/// The error for a stored matrix of a scalar type no [`Stored`] variant holds: none is ever
/// made.
pub fn unknown_scalar(scalar: ScalarType) -> PyErr {
    PyRuntimeError::new_err(format!(
        "hetsparse: a stored matrix of scalar type {scalar:?} (a bug, please report it)"
    ))
}

/// The scalar types a [`Stored`] matrix holds: their variant, and their NumPy name.
pub trait Storable: PyScalar {
    /// NumPy's name of the dtype.
    const DTYPE: &'static str;
    /// `m` as a [`Stored`].
    fn store(m: Csr<Self>) -> Stored;
    /// The CSR of `stored` when it holds this type.
    fn stored(stored: &Stored) -> Option<&Csr<Self>>;
}

macro_rules! storable {
    ($($t:ty => $variant:ident, $name:literal;)*) => {$(
        impl Storable for $t {
            const DTYPE: &'static str = $name;
            fn store(m: Csr<Self>) -> Stored {
                Stored::$variant(m)
            }
            fn stored(stored: &Stored) -> Option<&Csr<Self>> {
                match stored {
                    Stored::$variant(m) => Some(m),
                    _ => None,
                }
            }
        }
    )*};
}

storable! {
    f32 => F32, "float32";
    f64 => F64, "float64";
    Complex<f32> => C64, "complex64";
    Complex<f64> => C128, "complex128";
    bool => Bool, "bool";
    i32 => I32, "int32";
    i64 => I64, "int64";
    u32 => U32, "uint32";
    u64 => U64, "uint64";
}

impl Stored {
    /// The scalar type.
    pub fn scalar(&self) -> ScalarType {
        fn of<T: Storable>(_: &Csr<T>) -> ScalarType {
            T::TYPE
        }
        with_stored!(self, |m: T| of(m))
    }

    /// `(rows, columns)`.
    pub fn shape(&self) -> (usize, usize) {
        with_stored!(self, |m: T| (m.nrows(), m.ncols()))
    }

    /// Stored entries.
    pub fn nnz(&self) -> u64 {
        with_stored!(self, |m: T| m.nnz())
    }

    /// A mask over this matrix, in its own dtype: `structural` admits every stored entry,
    /// else only the non-zero ones.
    pub fn mask(&self, structural: bool) -> Mask {
        with_stored!(self, |m: T| if structural {
            Mask::structural(m)
        } else {
            Mask::valued(m)
        })
    }
}

/// NumPy's name of a stored matrix's scalar type.
pub fn dtype_name(scalar: ScalarType) -> &'static str {
    with_scalar_type!(scalar, |T| <T as Storable>::DTYPE, else |_o| "?")
}

/// A stored matrix's copy in a device's memory (`hetsparse.Matrix(A, device=...)`, or a
/// product's result kept where it was computed).
pub struct KeptCopy {
    /// The device it is on, as the products' `device=` names it.
    pub choice: DeviceChoice,
    /// The matrix's `ResidentCsr<T>`, `T` the stored matrix's type.
    resident: Box<dyn Any + Send + Sync>,
}

impl KeptCopy {
    /// The copy, where it holds `T` (the stored matrix's type).
    pub fn resident<T: Scalar>(&self) -> Option<&ResidentCsr<T>> {
        self.resident.downcast_ref()
    }
}

/// A sparse matrix converted and checked once (the native half of `hetsparse.Matrix`; use
/// that). Immutable: the products read it by reference, with the GIL released.
///
/// It is in host memory, in a device's memory ([`KeptCopy`]), or both: a product's result
/// kept where it was computed has no host copy until something reads one ([`Self::host`]:
/// host-only products, a conversion to scipy, a mask), which then downloads it once.
#[pyclass(frozen, module = "hetsparse._hetsparse", name = "StoredMatrix")]
pub struct StoredMatrix {
    /// The matrix in host memory, in canonical CSR: set when made from host arrays, else on
    /// its first read ([`Self::host`]).
    host: OnceLock<Stored>,
    /// `(rows, columns)`.
    shape: (usize, usize),
    /// Stored entries.
    nnz: u64,
    /// The scalar type of its values.
    scalar: ScalarType,
    /// Its structural and valued masks, made on first use: a loop masking every product by
    /// the same matrix (triangle counting's `C⟨L⟩`) lists its positions once, and a device
    /// copies them once (the mask keeps its copy, [`Mask::kept_in`]).
    masks: [OnceLock<Mask>; 2],
    /// Its copy in the memory of the device it was made for or computed on, if any.
    pub kept: Option<KeptCopy>,
}

impl StoredMatrix {
    /// A matrix in host memory, with its copy on a device where `kept` is one.
    pub fn in_host(csr: Stored, kept: Option<KeptCopy>) -> Self {
        StoredMatrix {
            shape: csr.shape(),
            nnz: csr.nnz(),
            scalar: csr.scalar(),
            host: OnceLock::from(csr),
            masks: Default::default(),
            kept,
        }
    }

    /// A matrix in the memory of `choice`'s device alone (a product's result kept there).
    pub fn on_device<T: Storable>(resident: ResidentCsr<T>, choice: DeviceChoice) -> Self {
        StoredMatrix {
            shape: resident.shape(),
            nnz: resident.nnz(),
            scalar: T::TYPE,
            host: OnceLock::new(),
            masks: Default::default(),
            kept: Some(KeptCopy {
                choice,
                resident: Box::new(resident),
            }),
        }
    }

    /// The scalar type of its values.
    pub fn scalar(&self) -> ScalarType {
        self.scalar
    }

    /// `(rows, columns)`.
    pub fn shape(&self) -> (usize, usize) {
        self.shape
    }

    /// Whether a host copy exists now (a device-only result has none until [`Self::host`]).
    pub fn host_now(&self) -> Option<&Stored> {
        self.host.get()
    }

    /// The matrix in host memory: downloaded from its device copy on the first call for a
    /// result kept on a device (with the GIL released where the caller released it).
    pub fn host(&self) -> PyResult<&Stored> {
        if let Some(h) = self.host.get() {
            return Ok(h);
        }
        let kept = self.kept.as_ref().ok_or_else(|| {
            PyRuntimeError::new_err(
                "hetsparse: a stored matrix with neither a host nor a device copy (a bug, \
                 please report it)",
            )
        })?;
        let downloaded = with_scalar_type!(
            self.scalar,
            |T| download_stored::<T>(kept),
            else |other| Err(unknown_scalar(other))
        )?;
        // Another thread may have downloaded it meanwhile: either copy is the matrix.
        Ok(self.host.get_or_init(|| downloaded))
    }

    /// A mask over this matrix, in its own dtype ([`Stored::mask`]), made once (downloading
    /// a device-only matrix's host copy first).
    pub fn mask(&self, structural: bool) -> PyResult<Mask> {
        let slot = &self.masks[usize::from(structural)];
        if let Some(m) = slot.get() {
            return Ok(m.clone());
        }
        let mask = self.host()?.mask(structural);
        Ok(slot.get_or_init(|| mask).clone())
    }
}

/// The host copy of a device copy of a `T` matrix.
fn download_stored<T: Storable>(kept: &KeptCopy) -> PyResult<Stored> {
    let resident = kept.resident::<T>().ok_or_else(|| wrong_copy::<T>())?;
    let ctx = context::<T>(&kept.choice)?;
    ctx.download(resident).map(T::store).map_err(to_py)
}

/// The error for a device copy that does not hold the stored matrix's type: none is made.
fn wrong_copy<T: Storable>() -> PyErr {
    PyRuntimeError::new_err(format!(
        "hetsparse: a stored matrix's device copy is not of its dtype {} (a bug, please \
         report it)",
        T::DTYPE
    ))
}

/// The values of the `T` matrix `m`, as a NumPy array: its host copy's, else downloaded
/// alone from its device copy (without the structure).
fn values_of<'py, T: Storable>(py: Python<'py>, m: &StoredMatrix) -> PyResult<Bound<'py, PyAny>> {
    if let Some(h) = m.host_now() {
        let csr = T::stored(h).ok_or_else(|| wrong_copy::<T>())?;
        return Ok(PyArray1::from_slice(py, csr.values()).into_any());
    }
    let kept = m.kept.as_ref().ok_or_else(|| wrong_copy::<T>())?;
    let resident = kept.resident::<T>().ok_or_else(|| wrong_copy::<T>())?;
    let values = py.allow_threads(|| {
        let ctx = context::<T>(&kept.choice)?;
        ctx.download_values(resident).map_err(to_py)
    })?;
    Ok(PyArray1::from_vec(py, values).into_any())
}

/// `m` copied into the memory of the device `choice` names, kept beside the host copy; `None`
/// where that device computes in host memory (the CPU, or `auto`'s scheduler), which reads the
/// host copy.
fn kept_copy<T: PyScalar>(m: &Csr<T>, choice: DeviceChoice) -> PyResult<Option<KeptCopy>> {
    let ctx = context::<T>(&choice)?;
    if ctx.backend().memory_space() == MemorySpace::Host {
        return Ok(None);
    }
    let resident = ctx.upload(m).map_err(to_py)?;
    Ok(Some(KeptCopy {
        choice,
        resident: Box::new(resident),
    }))
}

#[pymethods]
impl StoredMatrix {
    /// Converts and checks an operand tuple `(format, nrows, ncols, major, minor, data)`, as
    /// the products take them, into a matrix of the data's dtype. `ValueError` for malformed
    /// arrays, `TypeError` for a dtype the semiring products do not compute in.
    ///
    /// With `device` (a name as the products' `device=` takes it), the matrix is also copied
    /// into that device's memory, where the products on that device read it.
    #[new]
    #[pyo3(signature = (parts, device=None))]
    fn new(py: Python<'_>, parts: &Bound<'_, PyTuple>, device: Option<&str>) -> PyResult<Self> {
        let choice = device.map(devices::parse).transpose()?;
        let parts = Parts::extract(parts, "A")?;
        let csr = with_scalar!(&parts.data, "A", exact too, |T| stored_from::<T>(
            py, &parts
        ))?;
        let kept = match choice {
            Some(choice) => {
                py.allow_threads(|| with_stored!(&csr, |m: T| kept_copy::<T>(m, choice)))?
            }
            None => None,
        };
        Ok(StoredMatrix::in_host(csr, kept))
    }

    /// The device whose memory holds a copy (`cuda:0`, `opencl:0.1`), or `None`.
    #[getter]
    fn device(&self) -> Option<String> {
        self.kept.as_ref().map(|k| k.choice.to_string())
    }

    /// `(rows, columns)`.
    #[getter(shape)]
    fn py_shape(&self) -> (usize, usize) {
        self.shape
    }

    /// Stored entries (explicit zeros included).
    #[getter]
    fn nnz(&self) -> u64 {
        self.nnz
    }

    /// NumPy's name of the values' dtype.
    #[getter]
    fn dtype(&self) -> &'static str {
        dtype_name(self.scalar)
    }

    /// Whether the matrix has a copy in host memory now (a result kept on a device gets one
    /// when first read there).
    #[getter]
    fn in_host_memory(&self) -> bool {
        self.host.get().is_some()
    }

    /// A copy as the CSR tuple `(nrows, ncols, indptr, indices, data)` the products return
    /// (a device-only matrix's host copy is downloaded first, and kept).
    fn to_csr<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let host = py.allow_threads(|| self.host())?;
        // The clone shares the arrays, so `csr_to_py` copies them (the NumPy arrays it
        // makes are the caller's to write).
        with_stored!(host, |m: T| csr_to_py(py, m.clone()))
    }

    /// The stored values, one per entry in CSR order, as a NumPy array: from the host copy,
    /// or downloaded alone from the device copy of a matrix that has no host copy (its
    /// structure stays where it is).
    fn values<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        with_scalar_type!(self.scalar, |T| values_of::<T>(py, self), else |other| Err(
            unknown_scalar(other)
        ))
    }
}

/// A product's result: host CSR (returned as scipy arrays), or with `keep=` a stored matrix.
pub enum Outcome<T> {
    /// For scipy.
    Host(Csr<T>),
    /// A `hetsparse.Matrix`'s native half.
    Stored(StoredMatrix),
}

impl<T: Storable> Outcome<T> {
    /// `keep`'s result of a product computed to host memory on `choice`'s device: kept
    /// there too where the device has memory of its own, so that the next product reads it
    /// there; else the host result.
    pub fn of_host(c: Csr<T>, keep: bool, choice: &DeviceChoice) -> PyResult<Self> {
        if !keep {
            return Ok(Outcome::Host(c));
        }
        let kept = kept_copy(&c, choice.clone())?;
        Ok(Outcome::Stored(StoredMatrix::in_host(T::store(c), kept)))
    }

    /// The result for Python: the CSR tuple, or the `StoredMatrix`.
    pub fn into_py(self, py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
        match self {
            Outcome::Host(c) => csr_to_py(py, c).map(Bound::into_any),
            Outcome::Stored(m) => Ok(Bound::new(py, m)?.into_any()),
        }
    }
}

/// `A ⊕.⊗ B` as `options` say, left where `ctx`'s device (`choice`) computes it, as a stored
/// matrix with no host copy; `None` where that device computes in host memory (the CPU,
/// `auto`'s scheduler), whose result is the host one.
pub fn product_kept<T: Storable>(
    ctx: &Context<T>,
    choice: &DeviceChoice,
    (a, b): (CsrOperand<'_, T>, CsrOperand<'_, T>),
    options: &SpgemmOptions,
    run: &RunControl,
) -> PyResult<Option<StoredMatrix>> {
    if ctx.backend().memory_space() == MemorySpace::Host {
        return Ok(None);
    }
    let c = ctx
        .backend()
        .spgemm_resident(a, b, options, run)
        .map_err(to_py)?;
    Ok(Some(StoredMatrix::on_device(c, choice.clone())))
}

/// The matrix of `parts`, converted and checked as every operand is, in memory of its own.
fn stored_from<T: Storable>(py: Python<'_>, parts: &Parts<'_>) -> PyResult<Stored> {
    let data = parts.data::<T>("A")?;
    let view = parts.view(&data)?;
    let csr = py.allow_threads(|| view.csr(false).map(owned))?;
    view.released()?;
    Ok(T::store(csr))
}

/// `m` in vectors of its own: the arrays it reads in place (NumPy's) are copied.
fn owned<T: Scalar>(m: Csr<T>) -> Csr<T> {
    let (offsets, indices, values) = m.arrays();
    if !(offsets.is_foreign() || indices.is_foreign() || values.is_foreign()) {
        return m;
    }
    let (nrows, ncols, offsets, indices, values) = m.into_parts();
    // SAFETY: the arrays of a `Csr`, which met every invariant `Csr::try_new` checks; copying
    // them changes none.
    unsafe { Csr::from_parts_unchecked(nrows, ncols, offsets, indices, values) }
}

/// An operand of a product (plain or over a semiring): arrays handed over by the Python layer
/// (converted for this call) or a stored matrix.
pub enum Source<'py> {
    /// An operand tuple.
    Parts(Parts<'py>),
    /// A `StoredMatrix`.
    Stored(Bound<'py, StoredMatrix>),
}

impl<'py> Source<'py> {
    /// `obj` (an operand tuple or a `StoredMatrix`); `name` names it in errors.
    pub fn extract(obj: &Bound<'py, PyAny>, name: &str) -> PyResult<Self> {
        if let Ok(m) = obj.downcast::<StoredMatrix>() {
            Ok(Source::Stored(m.clone()))
        } else if let Ok(t) = obj.downcast::<PyTuple>() {
            Parts::extract(t, name).map(Source::Parts)
        } else {
            Err(PyTypeError::new_err(format!(
                "{name}: expected an operand tuple or a StoredMatrix"
            )))
        }
    }

    /// `(rows, columns)`.
    pub fn shape(&self) -> (usize, usize) {
        match self {
            Source::Parts(p) => (p.nrows, p.ncols),
            Source::Stored(m) => m.get().shape(),
        }
    }

    /// The values as a `T` array, for [`Source::operand`]: `None` for a stored matrix.
    pub fn data<T: numpy::Element>(
        &self,
        name: &str,
    ) -> PyResult<Option<numpy::PyReadonlyArray1<'py, T>>> {
        match self {
            Source::Parts(p) => p.data::<T>(name).map(Some),
            Source::Stored(_) => Ok(None),
        }
    }

    /// The operand for a computation in `T` without the GIL (`data` from [`Source::data`],
    /// borrowed until the operand is dropped); `TypeError` for a stored matrix of another
    /// dtype (the Python layer converts those).
    pub fn operand<'a, T: Storable>(
        &'a self,
        data: &'a Option<numpy::PyReadonlyArray1<'py, T>>,
        name: &str,
    ) -> PyResult<Operand<'a, T>> {
        match (self, data) {
            (Source::Parts(p), Some(d)) => p.view(d).map(Operand::View),
            (Source::Stored(m), _) => {
                let stored = m.get();
                if stored.scalar() != T::TYPE {
                    return Err(PyTypeError::new_err(format!(
                        "{name}: a Matrix of dtype {} in a product computed in {}",
                        dtype_name(stored.scalar()),
                        T::DTYPE
                    )));
                }
                Ok(Operand::Stored(stored, PhantomData))
            }
            (Source::Parts(_), None) => Err(PyRuntimeError::new_err(
                "hetsparse: an operand's values were not borrowed (a bug, please report it)",
            )),
        }
    }

    /// This operand as a mask (stored matrices in their own dtype, arrays in `T`).
    pub fn mask_operand<'a, T: Storable>(
        &'a self,
        data: &'a Option<numpy::PyReadonlyArray1<'py, T>>,
    ) -> PyResult<MaskOperand<'a, T>> {
        match self {
            Source::Parts(_) => self.operand(data, "mask").map(MaskOperand::Operand),
            Source::Stored(m) => Ok(MaskOperand::Stored(m.get())),
        }
    }
}

/// An operand ready for a product in `T`: a view of NumPy's arrays or a stored matrix.
pub enum Operand<'a, T> {
    /// Arrays borrowed for this call.
    View(View<'a, T>),
    /// A stored matrix of dtype `T` (checked when the operand was made), read by reference:
    /// its host copy, its device copy, or both.
    Stored(&'a StoredMatrix, PhantomData<T>),
}

/// The device a call on `operands` computes on: `choice`, or where that is `auto`, the device
/// holding a copy of the first operand that has one (the data decides, as with CuPy's arrays),
/// so that a matrix made with `device=` is read where it lies.
pub fn call_device<T: Storable, const N: usize>(
    choice: &DeviceChoice,
    operands: [&Operand<'_, T>; N],
) -> DeviceChoice {
    if *choice != DeviceChoice::Auto {
        return choice.clone();
    }
    operands
        .iter()
        .find_map(|o| o.kept_on())
        .cloned()
        .unwrap_or(DeviceChoice::Auto)
}

/// A CSR matrix made for one call, or a stored one borrowed.
pub enum Held<'a, T> {
    /// Made from a view (it may read NumPy's memory in place).
    Made(Csr<T>),
    /// A stored matrix.
    Borrowed(&'a Csr<T>),
}

impl<T> std::ops::Deref for Held<'_, T> {
    type Target = Csr<T>;
    fn deref(&self) -> &Csr<T> {
        match self {
            Held::Made(m) => m,
            Held::Borrowed(m) => m,
        }
    }
}

impl<T: Scalar> Held<'_, T> {
    /// The matrix itself, a clone sharing the stored one's arrays where it is borrowed.
    pub fn into_owned(self) -> Csr<T> {
        match self {
            Held::Made(m) => m,
            Held::Borrowed(m) => m.clone(),
        }
    }
}

/// A SpGEMM operand placed for a call on one device. A stored matrix with a copy on the
/// call's device is not downloaded for it.
pub enum Placed<'a, T> {
    /// Its copy in the call's device's memory, and its host matrix where it has one now.
    Kept(&'a ResidentCsr<T>, Option<Held<'a, T>>),
    /// Its host matrix.
    Host(Held<'a, T>),
}

impl<T: Scalar> Placed<'_, T> {
    /// What the product reads: the device copy, else the host matrix.
    pub fn operand(&self) -> CsrOperand<'_, T> {
        match self {
            Placed::Kept(copy, _) => CsrOperand::Resident(copy),
            Placed::Host(host) => CsrOperand::Host(host),
        }
    }

    /// The host matrix, where the operand has one now.
    pub fn host(&self) -> Option<&Csr<T>> {
        match self {
            Placed::Kept(_, host) => host.as_deref(),
            Placed::Host(host) => Some(host),
        }
    }
}

/// A sparse operand of SpMV or SpMM: made for one call in the format scipy gave, or a stored
/// matrix (CSR) borrowed.
pub enum Sparse<'a, T> {
    /// Made from a view (it may read NumPy's memory in place).
    Made(Owned<T>),
    /// A stored matrix.
    Borrowed(&'a Csr<T>),
    /// A stored matrix's copy in the memory of the call's device.
    Kept(&'a ResidentCsr<T>),
}

impl<T: Scalar> Sparse<'_, T> {
    /// What the backends read.
    pub fn operand(&self) -> SparseOperand<'_, T> {
        match self {
            Sparse::Made(m) => SparseOperand::Host(m.as_ref()),
            Sparse::Borrowed(m) => SparseOperand::Host(SparseRef::from(*m)),
            Sparse::Kept(copy) => SparseOperand::Resident(copy),
        }
    }
}

/// The `T` matrix of a stored matrix's host copy (its dtype was checked when the operand was
/// made).
fn typed<T: Storable>(stored: &Stored) -> PyResult<&Csr<T>> {
    T::stored(stored).ok_or_else(wrong_copy::<T>)
}

impl<'a, T: Storable> Operand<'a, T> {
    /// The device whose memory holds a copy of this operand (a stored matrix made with
    /// `device=`, or a result kept there), if any.
    pub fn kept_on(&self) -> Option<&DeviceChoice> {
        match self {
            Operand::Stored(m, _) => m.kept.as_ref().map(|k| &k.choice),
            Operand::View(_) => None,
        }
    }

    /// The copy of this operand in the memory of `choice`'s device, if it has one there.
    pub fn kept_copy(&self, choice: &DeviceChoice) -> Option<&'a ResidentCsr<T>> {
        match self {
            Operand::Stored(m, _) => match &m.kept {
                Some(kept) if kept.choice == *choice => kept.resident(),
                _ => None,
            },
            Operand::View(_) => None,
        }
    }

    /// The operand of a SpGEMM on `choice` (with `transpose`, its transpose's, which only a
    /// view gives): its copy there, and its host matrix where it has one; a stored matrix
    /// without a copy there is read in host memory (downloaded first if it had none).
    pub fn placed(&self, choice: &DeviceChoice, transpose: bool) -> PyResult<Placed<'a, T>> {
        let kept = if transpose {
            None
        } else {
            self.kept_copy(choice)
        };
        Ok(match (self, kept) {
            (Operand::Stored(m, _), Some(copy)) => {
                let host = m.host_now().map(typed).transpose()?;
                Placed::Kept(copy, host.map(Held::Borrowed))
            }
            _ => Placed::Host(self.csr_of(transpose)?),
        })
    }

    /// The operand of a SpMV or SpMM on `choice`: its copy there, else the matrix in the
    /// view's format (CSC and COO not converted) or the stored one's host matrix.
    pub fn placed_sparse(&self, choice: &DeviceChoice) -> PyResult<Sparse<'a, T>> {
        if let Some(copy) = self.kept_copy(choice) {
            return Ok(Sparse::Kept(copy));
        }
        match self {
            Operand::View(v) => v.matrix().map(Sparse::Made),
            Operand::Stored(m, _) => Ok(Sparse::Borrowed(typed(m.host()?)?)),
        }
    }

    /// The matrix in canonical CSR: made from the view, or the stored one borrowed.
    pub fn csr(&self) -> PyResult<Held<'a, T>> {
        self.csr_of(false)
    }

    /// The matrix, or with `transpose` its transpose, in canonical CSR: made from the view
    /// (which reads CSC arrays as the transpose's CSR), or the stored one's host matrix
    /// borrowed (downloaded first for a result kept on a device). A stored matrix is never
    /// asked for its transpose (the Python layer computes products with one untransposed);
    /// asked anyway, `RuntimeError`.
    pub fn csr_of(&self, transpose: bool) -> PyResult<Held<'a, T>> {
        match self {
            Operand::View(v) => v.csr(transpose).map(Held::Made),
            Operand::Stored(..) if transpose => Err(PyRuntimeError::new_err(
                "hetsparse: a stored matrix's transpose was asked for (a bug, please report it)",
            )),
            Operand::Stored(m, _) => Ok(Held::Borrowed(typed(m.host()?)?)),
        }
    }

    /// `(rows, columns)`.
    pub fn shape(&self) -> (usize, usize) {
        match self {
            Operand::View(v) => v.shape(),
            Operand::Stored(m, _) => m.shape(),
        }
    }

    /// Stored entries.
    pub fn nnz(&self) -> usize {
        match self {
            Operand::View(v) => v.nnz(),
            Operand::Stored(m, _) => usize::try_from(m.nnz).unwrap_or(usize::MAX),
        }
    }

    /// The most entries in one row (`rows`) or column, where that is known without a pass
    /// over the indices (see [`View::longest_line`]); a stored matrix (CSR) knows its rows
    /// where it has a host copy.
    pub fn longest_line(&self, rows: bool) -> Option<usize> {
        match self {
            Operand::View(v) => v.longest_line(rows),
            Operand::Stored(m, _) if rows => {
                let offsets = T::stored(m.host_now()?)?.row_offsets();
                let longest = offsets.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0);
                Some(usize::try_from(longest).unwrap_or(usize::MAX))
            }
            Operand::Stored(..) => None,
        }
    }

    /// As [`View::released`]; nothing to check for a stored matrix.
    pub fn released(&self) -> PyResult<()> {
        match self {
            Operand::View(v) => v.released(),
            Operand::Stored(..) => Ok(()),
        }
    }
}

/// A mask operand: arrays (in the product's dtype) or a stored matrix (in its own).
pub enum MaskOperand<'a, T> {
    /// As any operand.
    Operand(Operand<'a, T>),
    /// A stored matrix of any dtype.
    Stored(&'a StoredMatrix),
}

impl<T: Storable> MaskOperand<'_, T> {
    /// The mask, `structural` or valued (complement and replace are the caller's).
    pub fn mask(&self, structural: bool) -> PyResult<Mask> {
        Ok(match self {
            MaskOperand::Operand(o) => {
                let m = o.csr()?;
                if structural {
                    Mask::structural(&m)
                } else {
                    Mask::valued(&m)
                }
            }
            MaskOperand::Stored(s) => s.mask(structural)?,
        })
    }

    /// As [`Operand::released`].
    pub fn released(&self) -> PyResult<()> {
        match self {
            MaskOperand::Operand(o) => o.released(),
            MaskOperand::Stored(_) => Ok(()),
        }
    }
}
