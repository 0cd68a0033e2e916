//! GraphBLAS-style products from Python: `mxm`, `mxv` and `vxm` over a named semiring, with
//! a mask, replace and an accumulator into an existing result.
//!
//! The Python layer hands every vector over as a `1 × len` CSR operand, so vectors and
//! matrices share one conversion ([`Parts`]); names are python-graphblas's.

use hetsparse::{
    write_back, AccumulateOp, Csr, Mask, RunControl, SemiringKind, SparseVector, SpgemmOptions,
    VectorProductOptions,
};
// `PyArray1` and `Complex` name the dtypes in `with_scalar!`.
use hetsparse::Complex;
use numpy::PyArray1;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::convert::{csr_to_py, Parts, View};
use crate::devices::{self, context, PyScalar};
use crate::errors::{to_py, value};
use crate::{detached, unsupported_dtype};

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

    /// The mask `m` says, in these modes.
    fn mask<T: hetsparse::Scalar>(&self, m: &Csr<T>) -> Mask {
        let mut mask = if self.structural {
            Mask::structural(m)
        } else {
            Mask::valued(m)
        };
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

/// Operands of one call: the inputs, and the optional mask and existing result.
struct Operands<'py> {
    left: Parts<'py>,
    right: Parts<'py>,
    mask: Option<Parts<'py>>,
    out: Option<Parts<'py>>,
}

impl<'py> Operands<'py> {
    fn extract(
        left: (&Bound<'py, PyTuple>, &str),
        right: (&Bound<'py, PyTuple>, &str),
        mask: Option<&Bound<'py, PyTuple>>,
        out: Option<&Bound<'py, PyTuple>>,
    ) -> PyResult<Self> {
        Ok(Operands {
            left: Parts::extract(left.0, left.1)?,
            right: Parts::extract(right.0, right.1)?,
            mask: mask.map(|m| Parts::extract(m, "mask")).transpose()?,
            out: out.map(|c| Parts::extract(c, "out")).transpose()?,
        })
    }
}

/// `C⟨M, replace⟩ = accum(C, A ⊕.⊗ B)` from operand tuples (`mask`, `c`: optional, as
/// `(format, nrows, ncols, major, minor, data)` of A's dtype); returns the CSR tuple of the
/// new C (the product itself without `c`).
#[pyfunction]
#[pyo3(signature = (a, b, mask, c, semiring, structural, complement, replace, accum, device))]
#[allow(clippy::too_many_arguments)]
pub fn mxm<'py>(
    py: Python<'py>,
    a: &Bound<'py, PyTuple>,
    b: &Bound<'py, PyTuple>,
    mask: Option<&Bound<'py, PyTuple>>,
    c: Option<&Bound<'py, PyTuple>>,
    semiring: &str,
    structural: bool,
    complement: bool,
    replace: bool,
    accum: Option<&str>,
    device: &str,
) -> PyResult<Bound<'py, PyTuple>> {
    let choice = devices::parse(device)?;
    let modes = Modes::parse(semiring, structural, complement, replace, accum)?;
    let operands = Operands::extract((a, "A"), (b, "B"), mask, c)?;
    with_scalar!(&operands.left.data, "A", exact too, |T| mxm_t::<T>(
        py, &operands, modes, &choice
    ))
}

/// Borrows `parts`' arrays as `T` (`name` names it in errors).
fn data_of<'py, T: PyScalar>(
    parts: Option<&Parts<'py>>,
    name: &str,
) -> PyResult<Option<numpy::PyReadonlyArray1<'py, T>>> {
    parts.map(|p| p.data::<T>(name)).transpose()
}

/// The views of `parts` over `data`, where both are given.
fn view_of<'a, 'py, T: PyScalar>(
    parts: &'a Option<Parts<'py>>,
    data: &'a Option<numpy::PyReadonlyArray1<'py, T>>,
) -> PyResult<Option<View<'a, T>>> {
    match (parts, data) {
        (Some(p), Some(d)) => p.view(d).map(Some),
        _ => Ok(None),
    }
}

fn mxm_t<'py, T: PyScalar>(
    py: Python<'py>,
    operands: &Operands<'py>,
    modes: Modes,
    choice: &hetsparse::DeviceChoice,
) -> PyResult<Bound<'py, PyTuple>> {
    let (a_data, b_data) = (
        operands.left.data::<T>("A")?,
        operands.right.data::<T>("B")?,
    );
    let mask_data = data_of::<T>(operands.mask.as_ref(), "mask")?;
    let out_data = data_of::<T>(operands.out.as_ref(), "out")?;
    let (a, b) = (operands.left.view(&a_data)?, operands.right.view(&b_data)?);
    let mask = view_of(&operands.mask, &mask_data)?;
    let out = view_of(&operands.out, &out_data)?;
    let run = RunControl::unwatched();
    let c = detached(py, &run, a.nnz() + b.nnz(), None, || {
        let ctx = context::<T>(choice)?;
        let (a, b) = (a.csr(false)?, b.csr(false)?);
        let mask = mask.as_ref().map(|m| m.csr(false)).transpose()?;
        let mask = mask.as_ref().map(|m| modes.mask(m));
        let mut options = SpgemmOptions::new().with_semiring(modes.semiring);
        if let Some(m) = &mask {
            options = options.with_mask(m.clone());
        }
        let t = ctx
            .spgemm_with((&a).into(), (&b).into(), &options, &run)
            .map_err(to_py)?;
        let c = match &out {
            Some(c) => c.csr(false)?,
            None => Csr::zeros(t.nrows(), t.ncols()).map_err(to_py)?,
        };
        write_back(&c, &t, mask.as_ref(), modes.accumulator).map_err(to_py)
    })?;
    for view in [Some(&a), Some(&b), mask.as_ref(), out.as_ref()]
        .into_iter()
        .flatten()
    {
        view.released()?;
    }
    csr_to_py(py, c)
}

/// `w⟨m, replace⟩ = accum(w, A ⊕.⊗ u)` (`kind` `"mxv"`) or `wᵀ⟨mᵀ, replace⟩ = accum(wᵀ, uᵀ
/// ⊕.⊗ A)` (`"vxm"`): `u`, `mask` and `w` are `1 × len` operand tuples; returns the `1 ×
/// len` CSR tuple of the new `w`.
#[pyfunction]
#[pyo3(signature = (kind, a, u, mask, w, semiring, structural, complement, replace, accum, device))]
#[allow(clippy::too_many_arguments)]
pub fn vector_product<'py>(
    py: Python<'py>,
    kind: &str,
    a: &Bound<'py, PyTuple>,
    u: &Bound<'py, PyTuple>,
    mask: Option<&Bound<'py, PyTuple>>,
    w: Option<&Bound<'py, PyTuple>>,
    semiring: &str,
    structural: bool,
    complement: bool,
    replace: bool,
    accum: Option<&str>,
    device: &str,
) -> PyResult<Bound<'py, PyTuple>> {
    let vxm = match kind {
        "mxv" => false,
        "vxm" => true,
        other => return Err(value(format!("{other:?} is not mxv or vxm"))),
    };
    let choice = devices::parse(device)?;
    let modes = Modes::parse(semiring, structural, complement, replace, accum)?;
    let operands = Operands::extract((a, "A"), (u, "u"), mask, w)?;
    with_scalar!(&operands.left.data, "A", exact too, |T| vector_product_t::<T>(
        py, &operands, vxm, modes, &choice
    ))
}

/// A `1 × len` view as a vector.
fn vector_of<T: PyScalar>(v: &View<'_, T>) -> PyResult<SparseVector<T>> {
    SparseVector::from_row(v.csr(false)?).map_err(to_py)
}

fn vector_product_t<'py, T: PyScalar>(
    py: Python<'py>,
    operands: &Operands<'py>,
    vxm: bool,
    modes: Modes,
    choice: &hetsparse::DeviceChoice,
) -> PyResult<Bound<'py, PyTuple>> {
    let (a_data, u_data) = (
        operands.left.data::<T>("A")?,
        operands.right.data::<T>("u")?,
    );
    let mask_data = data_of::<T>(operands.mask.as_ref(), "mask")?;
    let out_data = data_of::<T>(operands.out.as_ref(), "out")?;
    let (a, u) = (operands.left.view(&a_data)?, operands.right.view(&u_data)?);
    let mask = view_of(&operands.mask, &mask_data)?;
    let out = view_of(&operands.out, &out_data)?;
    let run = RunControl::unwatched();
    let w = detached(py, &run, a.nnz() + u.nnz(), None, || {
        let ctx = context::<T>(choice)?;
        let (a, u) = (a.csr(false)?, vector_of(&u)?);
        let mut options = VectorProductOptions::new().with_semiring(modes.semiring);
        if let Some(m) = &mask {
            options = options.with_mask(modes.mask(&m.csr(false)?));
        }
        if let Some(acc) = modes.accumulator {
            options = options.with_accumulator(acc);
        }
        let len = if vxm { a.ncols() } else { a.nrows() };
        let mut w = match &out {
            Some(w) => vector_of(w)?,
            None => SparseVector::empty(len).map_err(to_py)?,
        };
        if vxm {
            ctx.vxm_into(&mut w, &u, &a, &options)
        } else {
            ctx.mxv_into(&mut w, &a, &u, &options)
        }
        .map_err(to_py)?;
        Ok(w.into_row())
    })?;
    for view in [Some(&a), Some(&u), mask.as_ref(), out.as_ref()]
        .into_iter()
        .flatten()
    {
        view.released()?;
    }
    csr_to_py(py, w)
}
