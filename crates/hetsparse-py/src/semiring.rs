//! GraphBLAS-style products from Python: `mxm`, `mxv` and `vxm` over a named semiring, with
//! a mask, replace and an accumulator into an existing result.
//!
//! The Python layer hands every vector over as a `1 × len` CSR operand, so vectors and
//! matrices share one conversion ([`crate::convert::Parts`]); any operand may be a stored matrix
//! ([`crate::matrix`]) instead. Names are python-graphblas's.

use hetsparse::{
    write_back_new, write_back_owned, AccumulateOp, HostArray, Mask, MaskKind, RunControl,
    SemiringKind, SparseVector, SpgemmOptions, VectorProductOptions,
};
// `PyArray1` and `Complex` name the dtypes in `with_scalar!`.
use hetsparse::Complex;
use numpy::PyArray1;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::convert::csr_to_py;
use crate::devices::{self, context, PyScalar};
use crate::errors::{to_py, value};
use crate::matrix::{
    call_device, product_kept, unknown_scalar, with_scalar_type, MaskOperand, Operand, Outcome,
    Source, Storable,
};
use crate::{detached, product_size, unsupported_dtype};

/// The semiring, mask modes and accumulator of one call, parsed from their Python names.
#[derive(Clone, Copy)]
struct Modes {
    semiring: SemiringKind,
    structural: bool,
    complement: bool,
    replace: bool,
    accumulator: Option<AccumulateOp>,
}

impl Modes {
    /// `ValueError` for a semiring or an accumulator no python-graphblas name matches.
    fn parse(
        semiring: &str,
        structural: bool,
        complement: bool,
        replace: bool,
        accum: Option<&str>,
    ) -> PyResult<Modes> {
        let semiring = semiring
            .parse::<SemiringKind>()
            .map_err(|e| value(format!("semiring: {e} (known: {})", semiring_names())))?;
        let accumulator = accum.map(accumulator).transpose()?;
        Ok(Modes {
            semiring,
            structural,
            complement,
            replace,
            accumulator,
        })
    }

    /// `mask` (structural or valued, as `self.structural` asked) in these modes: complemented
    /// and replacing where asked.
    fn modes_of(&self, mut mask: Mask) -> Mask {
        if self.complement {
            mask = mask.complemented();
        }
        if self.replace {
            mask = mask.replacing();
        }
        mask
    }
}

/// Every semiring's name, for error messages.
fn semiring_names() -> String {
    SemiringKind::ALL
        .iter()
        .map(|k| k.name())
        .collect::<Vec<_>>()
        .join(", ")
}

/// An accumulator by its python-graphblas binary operator name.
fn accumulator(name: &str) -> PyResult<AccumulateOp> {
    Ok(match name {
        "plus" => AccumulateOp::Plus,
        "times" => AccumulateOp::Times,
        "min" => AccumulateOp::Min,
        "max" => AccumulateOp::Max,
        "second" => AccumulateOp::Second,
        other => {
            return Err(value(format!(
                "accum: no accumulator is named {other:?} (known: plus, times, min, max, second)"
            )))
        }
    })
}

/// Operands of one call: the inputs, and the optional mask and existing result; each an
/// operand tuple or a stored matrix.
struct Operands<'py> {
    left: Source<'py>,
    right: Source<'py>,
    mask: Option<Source<'py>>,
    out: Option<Source<'py>>,
}

impl<'py> Operands<'py> {
    fn extract(
        left: (&Bound<'py, PyAny>, &str),
        right: (&Bound<'py, PyAny>, &str),
        mask: Option<&Bound<'py, PyAny>>,
        out: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Self> {
        Ok(Operands {
            left: Source::extract(left.0, left.1)?,
            right: Source::extract(right.0, right.1)?,
            mask: mask.map(|m| Source::extract(m, "mask")).transpose()?,
            out: out.map(|c| Source::extract(c, "out")).transpose()?,
        })
    }
}

/// Calls `$body` with `$t` the scalar type of the left operand of `$operands`: its data's
/// dtype, or a stored matrix's (`TypeError` for a dtype the products do not compute in).
macro_rules! with_left {
    ($operands:expr, |$t:ident| $body:expr) => {
        match &$operands.left {
            Source::Parts(p) => with_scalar!(&p.data, "A", exact too, |$t| $body),
            Source::Stored(m) => with_scalar_type!(m.get().scalar(), |$t| $body, else |other| Err(
                unknown_scalar(other)
            )),
        }
    };
}

/// `C⟨M, replace⟩ = accum(C, A ⊕.⊗ B)` from operand tuples `(format, nrows, ncols, major,
/// minor, data)` of A's dtype or stored matrices (a stored mask of any dtype; `mask`, `c`
/// optional); returns the CSR tuple of the new C (the product itself without `c`), or with
/// `keep` a `StoredMatrix`: left where a device with memory of its own computed it, without
/// a host copy, where there is no `c` to merge into (else the host result, copied there).
#[pyfunction]
#[pyo3(signature = (a, b, mask, c, semiring, structural, complement, replace, accum, device, keep=false))]
#[allow(clippy::too_many_arguments)]
pub fn mxm<'py>(
    py: Python<'py>,
    a: &Bound<'py, PyAny>,
    b: &Bound<'py, PyAny>,
    mask: Option<&Bound<'py, PyAny>>,
    c: Option<&Bound<'py, PyAny>>,
    semiring: &str,
    structural: bool,
    complement: bool,
    replace: bool,
    accum: Option<&str>,
    device: &str,
    keep: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let choice = devices::parse(device)?;
    let modes = Modes::parse(semiring, structural, complement, replace, accum)?;
    let operands = Operands::extract((a, "A"), (b, "B"), mask, c)?;
    with_left!(operands, |T| mxm_t::<T>(
        py, &operands, modes, &choice, keep
    ))
}

/// Borrows the values of an optional operand as `T` (`name` names it in errors).
fn data_of<'py, T: PyScalar>(
    source: Option<&Source<'py>>,
    name: &str,
) -> PyResult<Option<numpy::PyReadonlyArray1<'py, T>>> {
    Ok(source.map(|s| s.data::<T>(name)).transpose()?.flatten())
}

/// The operand of an optional `source` (`data` from [`data_of`]).
fn operand_of<'a, 'py, T: Storable>(
    source: &'a Option<Source<'py>>,
    data: &'a Option<numpy::PyReadonlyArray1<'py, T>>,
    name: &str,
) -> PyResult<Option<Operand<'a, T>>> {
    source.as_ref().map(|s| s.operand(data, name)).transpose()
}

/// The mask operand of an optional `source` (`data` from [`data_of`]).
fn mask_of<'a, 'py, T: Storable>(
    source: &'a Option<Source<'py>>,
    data: &'a Option<numpy::PyReadonlyArray1<'py, T>>,
) -> PyResult<Option<MaskOperand<'a, T>>> {
    source.as_ref().map(|s| s.mask_operand(data)).transpose()
}

/// Checks, once a computation is over, that no matrix made from an operand's arrays
/// outlived it ([`Operand::released`]).
fn released<T: Storable>(
    operands: [Option<&Operand<'_, T>>; 3],
    mask: Option<&MaskOperand<'_, T>>,
) -> PyResult<()> {
    for operand in operands.into_iter().flatten() {
        operand.released()?;
    }
    mask.map_or(Ok(()), MaskOperand::released)
}

fn mxm_t<'py, T: Storable>(
    py: Python<'py>,
    operands: &Operands<'py>,
    modes: Modes,
    choice: &hetsparse::DeviceChoice,
    keep: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let (a_data, b_data) = (
        operands.left.data::<T>("A")?,
        operands.right.data::<T>("B")?,
    );
    let mask_data = data_of::<T>(operands.mask.as_ref(), "mask")?;
    let out_data = data_of::<T>(operands.out.as_ref(), "out")?;
    let a = operands.left.operand(&a_data, "A")?;
    let b = operands.right.operand(&b_data, "B")?;
    let mask = mask_of(&operands.mask, &mask_data)?;
    let out = operand_of(&operands.out, &out_data, "out")?;
    let run = RunControl::unwatched();
    let device = call_device(choice, [&a, &b]);
    let c = detached(py, &run, product_size(&a, &b, false), None, || {
        let ctx = context::<T>(&device)?;
        let (a, b) = (a.placed(&device, false)?, b.placed(&device, false)?);
        let operands = (a.operand(), b.operand());
        let mask = mask
            .as_ref()
            .map(|m| m.mask(modes.structural).map(|m| modes.modes_of(m)))
            .transpose()?;
        let mut options = SpgemmOptions::new().with_semiring(modes.semiring);
        if let Some(m) = &mask {
            options = options.with_mask(m.clone());
        }
        if keep && out.is_none() {
            // A new C is the masked product itself (the backends compute only the positions
            // the mask admits; with no C to merge into, replace and the accumulator change
            // nothing), so it can stay where it was computed.
            if let Some(kept) = product_kept(&ctx, &device, operands, &options, &run)? {
                return Ok(Outcome::Stored(kept));
            }
        }
        let t = ctx
            .spgemm_with(operands.0, operands.1, &options, &run)
            .map_err(to_py)?;
        let c = match &out {
            Some(c) => write_back_owned(&*c.csr()?, t, mask.as_ref(), modes.accumulator),
            None => write_back_new(t, mask.as_ref(), modes.accumulator),
        }
        .map_err(to_py)?;
        Outcome::of_host(c, keep, &device)
    })?;
    released([Some(&a), Some(&b), out.as_ref()], mask.as_ref())?;
    c.into_py(py)
}

/// `w⟨m, replace⟩ = accum(w, A ⊕.⊗ u)` (`kind` `"mxv"`) or `wᵀ⟨mᵀ, replace⟩ = accum(wᵀ, uᵀ
/// ⊕.⊗ A)` (`"vxm"`): `u`, `mask` and `w` are `1 × len` operands; each argument an operand
/// tuple or a stored matrix, as for [`mxm`]. Returns the `1 × len` CSR tuple of the new `w`.
#[pyfunction]
#[pyo3(signature = (kind, a, u, mask, w, semiring, structural, complement, replace, accum, device, mask_bits=None, mask_bytes=None))]
#[allow(clippy::too_many_arguments)]
pub fn vector_product<'py>(
    py: Python<'py>,
    kind: &str,
    a: &Bound<'py, PyAny>,
    u: &Bound<'py, PyAny>,
    mask: Option<&Bound<'py, PyAny>>,
    w: Option<&Bound<'py, PyAny>>,
    semiring: &str,
    structural: bool,
    complement: bool,
    replace: bool,
    accum: Option<&str>,
    device: &str,
    mask_bits: Option<numpy::PyReadonlyArray1<'py, u64>>,
    mask_bytes: Option<numpy::PyReadonlyArray1<'py, bool>>,
) -> PyResult<Bound<'py, PyTuple>> {
    let vxm = match kind {
        "mxv" => false,
        "vxm" => true,
        other => return Err(value(format!("{other:?} is not mxv or vxm"))),
    };
    let choice = devices::parse(device)?;
    let modes = Modes::parse(semiring, structural, complement, replace, accum)?;
    let operands = Operands::extract((a, "A"), (u, "u"), mask, w)?;
    // A dense mask comes packed, one bit a position (copied as it is, never listed), or as
    // NumPy's booleans, read in place.
    let dense_mask = match (mask_bits, &mask_bytes) {
        (Some(_), Some(_)) => return Err(value("a packed mask and a boolean mask at once")),
        (Some(_), _) | (_, Some(_)) if mask.is_some() => {
            return Err(value("a mask and a dense mask at once"))
        }
        (Some(bits), None) => Some(DenseMask::Bits(
            bits.as_slice()
                .map_err(|e| value(format!("mask: {e}")))?
                .to_vec(),
        )),
        (None, Some(bytes)) => Some(DenseMask::Bytes(
            bytes.as_slice().map_err(|e| value(format!("mask: {e}")))?,
            std::sync::Arc::new(bytes.as_any().clone().unbind()),
        )),
        (None, None) => None,
    };
    let w = with_left!(operands, |T| vector_product_t::<T>(
        py,
        &operands,
        vxm,
        modes,
        dense_mask.clone(),
        &choice
    ));
    if let Some(DenseMask::Bytes(_, owner)) = &dense_mask {
        if std::sync::Arc::strong_count(owner) != 1 {
            return Err(pyo3::exceptions::PyRuntimeError::new_err(
                "hetsparse: a mask reading a boolean array outlived the call (a bug, please \
                 report it)",
            ));
        }
    }
    w
}

/// A vector product's mask given densely, over every position of `w`.
#[derive(Clone)]
enum DenseMask<'a> {
    /// Packed by the Python layer, 64 positions a word.
    Bits(Vec<u64>),
    /// NumPy's booleans, borrowed read-only for the call; the array's reference owns the
    /// memory the mask reads in place.
    Bytes(&'a [bool], std::sync::Arc<Py<PyAny>>),
}

/// A `1 × len` operand as a vector.
fn vector_of<T: Storable>(v: &Operand<'_, T>) -> PyResult<SparseVector<T>> {
    SparseVector::from_row(v.csr()?.into_owned()).map_err(to_py)
}

fn vector_product_t<'py, T: Storable>(
    py: Python<'py>,
    operands: &Operands<'py>,
    vxm: bool,
    modes: Modes,
    dense_mask: Option<DenseMask<'_>>,
    choice: &hetsparse::DeviceChoice,
) -> PyResult<Bound<'py, PyTuple>> {
    let (a_data, u_data) = (
        operands.left.data::<T>("A")?,
        operands.right.data::<T>("u")?,
    );
    let mask_data = data_of::<T>(operands.mask.as_ref(), "mask")?;
    let out_data = data_of::<T>(operands.out.as_ref(), "out")?;
    let a = operands.left.operand(&a_data, "A")?;
    let u = operands.right.operand(&u_data, "u")?;
    let mask = mask_of(&operands.mask, &mask_data)?;
    let out = operand_of(&operands.out, &out_data, "out")?;
    let run = RunControl::unwatched();
    // The entries a product reads, for `detached`: a vxm pushes the frontier's rows (about
    // A's mean row each), an mxv reads A. A BFS level over a small frontier then runs on
    // this thread rather than on a watched worker started for it.
    let reads = if vxm {
        let mean_row = a.nnz().div_ceil(a.shape().0.max(1));
        u.nnz().saturating_mul(mean_row.max(1))
    } else {
        a.nnz()
    };
    // A matrix kept on a device is read there (a graph searched level after level crosses
    // once, when it is made).
    let device = call_device(choice, [&a]);
    let w = detached(py, &run, reads.saturating_add(u.nnz()), None, || {
        let ctx = context::<T>(&device)?;
        let (a, u) = (a.placed(&device, false)?, vector_of(&u)?);
        let a = a.operand();
        let len = if vxm { a.shape().1 } else { a.shape().0 };
        let mut options = VectorProductOptions::new().with_semiring(modes.semiring);
        if let Some(m) = &mask {
            options = options.with_mask(modes.modes_of(m.mask(modes.structural)?));
        } else if let Some(dense) = dense_mask {
            let kind = if modes.structural {
                MaskKind::Structural
            } else {
                MaskKind::Valued
            };
            let m = match dense {
                DenseMask::Bits(bits) => Mask::from_bitmap(len, bits, kind),
                DenseMask::Bytes(bytes, owner) => {
                    // SAFETY: NumPy's array, borrowed read-only (`mask_bytes`) until the call
                    // returns, which checks that no mask made here is still alive; `owner`
                    // (its reference) keeps it allocated meanwhile. A bool is one byte.
                    let bytes = unsafe {
                        HostArray::from_foreign(bytes.as_ptr().cast::<u8>(), bytes.len(), owner)
                    };
                    Mask::from_bytes(len, bytes, kind)
                }
            }
            .map_err(to_py)?;
            options = options.with_mask(modes.modes_of(m));
        }
        if let Some(acc) = modes.accumulator {
            options = options.with_accumulator(acc);
        }
        let mut w = match &out {
            Some(w) => vector_of(w)?,
            None => SparseVector::empty(len).map_err(to_py)?,
        };
        if vxm {
            ctx.vxm_into(&mut w, &u, a, &options)
        } else {
            ctx.mxv_into(&mut w, a, &u, &options)
        }
        .map_err(to_py)?;
        Ok(w.into_row())
    })?;
    released([Some(&a), Some(&u), out.as_ref()], mask.as_ref())?;
    csr_to_py(py, w)
}
