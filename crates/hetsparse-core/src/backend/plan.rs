//! Plans: a SpGEMM's symbolic work done once, its numeric work run many times.
//!
//! A [`SpgemmPlan`] holds what the backend learned from the operands' patterns (the product's
//! structure, its size, the memory it needs). Executing it with operands of the same patterns
//! and new values recomputes only values: AMG's Galerkin product after a change of
//! coefficients, Newton steps with a fixed pattern (cuSPARSE's SpGEMMreuse, faer's
//! symbolic/numeric split). Operands of another pattern are an
//! [`Error::PatternMismatch`].
//!
//! The plan's symbolic result is typed ([`PlanState`]): in host memory it is C's structure
//! ([`HostStructure`]), which the numeric phase ([`numeric`]) takes; a device backend keeps its
//! own state (C's structure and bins in device memory), which only it reads. A plan remembers
//! each operand's pattern ([`OperandPattern`]): the structure itself where it lies on the host
//! (shared with the operand, not copied), so that executing with host operands compares
//! structures and no hash stands in for them; a handle's identity otherwise.

use std::any::Any;
use std::fmt;
use std::marker::PhantomData;
use std::mem::MaybeUninit;
use std::sync::Arc;

use rayon::prelude::*;

use super::memory::{csr_bytes, MemoryRequirement};
use super::options::SpgemmOptions;
use super::resident::{CsrOperand, MemorySpace, PatternId, ResidentCsr};
use super::run::RunControl;
use super::validate::Validated;
use super::{host_operands, Device};
use crate::error::{Error, Result};
use crate::format::{Csr, HostArray};
use crate::scalar::Scalar;
use crate::semiring::{PlusTimes, Semiring};

/// The symbolic result of a SpGEMM, to be executed with values.
pub struct SpgemmPlan<T> {
    space: MemorySpace,
    options: SpgemmOptions,
    a: OperandPattern,
    b: OperandPattern,
    c_nnz: u64,
    products: u64,
    requirement: MemoryRequirement,
    state: Arc<PlanState>,
    _scalar: PhantomData<fn() -> T>,
}

/// A plan's symbolic result.
pub enum PlanState {
    /// C's structure in host memory: what the numeric phase of host backends takes.
    Host(HostStructure),
    /// A device backend's own state (C's structure and bins in its memory), read back by that
    /// backend alone ([`SpgemmPlan::device_state`]).
    Device(Box<dyn Any + Send + Sync>),
}

impl PlanState {
    /// A device backend's state.
    pub fn device<S: Any + Send + Sync>(state: S) -> Self {
        PlanState::Device(Box::new(state))
    }
}

impl<T> fmt::Debug for SpgemmPlan<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SpgemmPlan")
            .field("space", &self.space)
            .field("options", &self.options)
            .field("shape", &(self.a.shape.0, self.b.shape.1))
            .field("c_nnz", &self.c_nnz)
            .field("products", &self.products)
            .field("requirement", &self.requirement)
            .finish_non_exhaustive()
    }
}

/// What a plan records of one operand: its shape, entry count and pattern identity, and its
/// structure where it lies on the host (the operand's own arrays, shared, not copied).
#[derive(Clone)]
pub struct OperandPattern {
    /// Its pattern identity.
    pub pattern: PatternId,
    /// `(rows, columns)`.
    pub shape: (usize, usize),
    /// Stored entries.
    pub nnz: u64,
    structure: Option<(HostArray<u64>, HostArray<u32>)>,
}

impl fmt::Debug for OperandPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OperandPattern")
            .field("pattern", &self.pattern)
            .field("shape", &self.shape)
            .field("nnz", &self.nnz)
            .field("on_host", &self.structure.is_some())
            .finish()
    }
}

/// The structure of an operand that lies on the host: a host matrix, or a handle kept in host
/// storage.
fn host_structure_of<'m, T: Scalar>(m: &CsrOperand<'m, T>) -> Option<&'m Csr<T>> {
    match *m {
        CsrOperand::Host(h) => Some(h),
        CsrOperand::Resident(r) => r.host(),
    }
}

impl OperandPattern {
    /// What `m` is.
    pub fn of<T: Scalar>(m: &CsrOperand<'_, T>) -> Self {
        let structure = host_structure_of(m).map(|h| {
            let (row_offsets, col_indices, _) = h.arrays();
            (row_offsets.clone(), col_indices.clone())
        });
        OperandPattern {
            pattern: m.pattern(),
            shape: m.shape(),
            nnz: m.nnz(),
            structure,
        }
    }

    /// Whether `m` has this pattern. Where both structures lie on the host they are compared
    /// (the same arrays at once, else entry by entry); otherwise the identities are.
    pub fn admits<T: Scalar>(&self, m: &CsrOperand<'_, T>) -> bool {
        if m.shape() != self.shape || m.nnz() != self.nnz {
            return false;
        }
        match (&self.structure, host_structure_of(m)) {
            (Some((offsets, indices)), Some(h)) => {
                let (given_offsets, given_indices, _) = h.arrays();
                same_array(offsets, given_offsets) && same_array(indices, given_indices)
            }
            _ => m.pattern() == self.pattern,
        }
    }
}

/// Equal contents: at once for the same memory (a shared array does not change), else by
/// comparing entries.
fn same_array<E: PartialEq>(x: &HostArray<E>, y: &HostArray<E>) -> bool {
    let (x, y) = (x.as_slice(), y.as_slice());
    std::ptr::eq(x, y) || x == y
}

impl<T: Scalar> SpgemmPlan<T> {
    /// For backends: a plan over `state`, the backend's symbolic result.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        space: MemorySpace,
        options: SpgemmOptions,
        a: OperandPattern,
        b: OperandPattern,
        c_nnz: u64,
        products: u64,
        requirement: MemoryRequirement,
        state: PlanState,
    ) -> Self {
        SpgemmPlan {
            space,
            options,
            a,
            b,
            c_nnz,
            products,
            requirement,
            state: Arc::new(state),
            _scalar: PhantomData,
        }
    }
    /// The memory it was made for.
    pub fn space(&self) -> &MemorySpace {
        &self.space
    }
    /// The options it was made with.
    pub fn options(&self) -> &SpgemmOptions {
        &self.options
    }
    /// `(rows, columns)` of the product.
    pub fn shape(&self) -> (usize, usize) {
        (self.a.shape.0, self.b.shape.1)
    }
    /// Entries of the product.
    pub fn c_nnz(&self) -> u64 {
        self.c_nnz
    }
    /// Intermediate products one execution computes (flops are twice that).
    pub fn products(&self) -> u64 {
        self.products
    }
    /// What one execution needs in memory beyond what the plan holds (C's structure may live
    /// in the plan and be shared by every result), resident operands assumed.
    pub fn requirement(&self) -> MemoryRequirement {
        self.requirement
    }
    /// The pattern identity of the products it makes (a mask among its options shapes it).
    pub fn c_pattern(&self) -> PatternId {
        match &self.options.mask {
            Some(mask) => PatternId::of_masked_product(self.a.pattern, self.b.pattern, mask),
            None => PatternId::of_product(self.a.pattern, self.b.pattern),
        }
    }
    /// The symbolic result.
    pub fn state(&self) -> &PlanState {
        &self.state
    }
    /// C's structure, for a plan of host memory.
    pub fn host_structure(&self) -> Option<&HostStructure> {
        match &*self.state {
            PlanState::Host(structure) => Some(structure),
            PlanState::Device(_) => None,
        }
    }
    /// A device backend's state, if the plan holds one of type `S`.
    pub fn device_state<S: Any>(&self) -> Option<&S> {
        match &*self.state {
            PlanState::Device(state) => state.downcast_ref::<S>(),
            PlanState::Host(_) => None,
        }
    }

    /// [`Error::WrongDevice`] unless the plan was made in `space`, [`Error::PatternMismatch`]
    /// unless `a` and `b` have the shapes, entry counts and patterns it was made for.
    pub fn check_operands(
        &self,
        space: &MemorySpace,
        a: &CsrOperand<'_, T>,
        b: &CsrOperand<'_, T>,
    ) -> Result<()> {
        if &self.space != space {
            return Err(Error::WrongDevice {
                what: "SpGEMM plan".into(),
                found: self.space.clone(),
                expected: space.clone(),
            });
        }
        for (name, planned, given) in [("A", &self.a, a), ("B", &self.b, b)] {
            if !planned.admits(given) {
                let (shape, nnz) = (given.shape(), given.nnz());
                return Err(Error::PatternMismatch {
                    operand: name,
                    detail: format!(
                        "the plan was made for a {}×{} operand with {} entries and pattern {:#x}, \
                         this one is {}×{} with {} entries and pattern {:#x}",
                        planned.shape.0,
                        planned.shape.1,
                        planned.nnz,
                        planned.pattern.value(),
                        shape.0,
                        shape.1,
                        nnz,
                        given.pattern().value()
                    ),
                });
            }
        }
        Ok(())
    }
}

impl<T: Scalar> SpgemmPlan<T> {
    /// For backends that compute in host memory: the plan of `c = A·B`, already computed,
    /// whose structure every execution shares. `products` are A·B's intermediate products,
    /// `work_bytes` what one execution needs beside C.
    pub fn on_host(
        space: MemorySpace,
        options: SpgemmOptions,
        a: &CsrOperand<'_, T>,
        b: &CsrOperand<'_, T>,
        c: &Csr<T>,
        products: u64,
        work_bytes: u64,
    ) -> Self {
        let requirement = MemoryRequirement {
            output_bytes: csr_bytes(c.nrows(), c.nnz(), std::mem::size_of::<T>()),
            work_bytes,
            ..MemoryRequirement::default()
        };
        Self::new(
            space,
            options,
            OperandPattern::of(a),
            OperandPattern::of(b),
            c.nnz(),
            products,
            requirement,
            PlanState::Host(HostStructure::of(c)),
        )
    }
}

/// For backends that compute in host memory: executes a plan made by
/// [`SpgemmPlan::on_host`] with [`numeric`], on the current rayon pool.
pub fn execute_on_host<T: Scalar>(
    device: &(impl Device + ?Sized),
    plan: &SpgemmPlan<T>,
    a: CsrOperand<'_, T>,
    b: CsrOperand<'_, T>,
    run: &RunControl,
    _checked: Validated,
) -> Result<ResidentCsr<T>> {
    let space = device.memory_space();
    let (ha, hb) = (
        host_operands::csr(device, a)?,
        host_operands::csr(device, b)?,
    );
    let structure = plan.host_structure().ok_or_else(|| Error::Internal {
        backend: device.info().backend,
        what: "a SpGEMM plan of host memory without its structure".into(),
    })?;
    run.checkpoint()?;
    run.add_planned(plan.products());
    let _span = tracing::debug_span!("numeric", nnz = plan.c_nnz()).entered();
    let c = numeric::<T, PlusTimes>(structure, ha, hb, run)?;
    // SAFETY: `c` has the plan's structure, computed for operands checked to have the
    // planned identities.
    Ok(unsafe { ResidentCsr::from_host_with_pattern(space, c, plan.c_pattern()) })
}

/// The product's structure in host memory: the plan state of backends that compute there.
/// Made only from a valid matrix, so it is always canonical.
/// Every result of the plan shares it: an execution writes only values.
///
/// A backend may attach an extension of its own (say, where each product lands in C) that its
/// executions use; every host backend can still execute the plan from the structure alone.
pub struct HostStructure {
    ncols: usize,
    row_offsets: HostArray<u64>,
    col_indices: HostArray<u32>,
    extension: Option<Box<dyn Any + Send + Sync>>,
}

impl fmt::Debug for HostStructure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostStructure")
            .field("nrows", &self.nrows())
            .field("ncols", &self.ncols)
            .field("nnz", &self.col_indices.len())
            .field("extension", &self.extension.is_some())
            .finish()
    }
}

impl HostStructure {
    /// The structure of a computed product (shared with it, not copied).
    pub fn of<T: Scalar>(c: &Csr<T>) -> Self {
        let (row_offsets, col_indices, _) = c.arrays();
        HostStructure {
            ncols: c.ncols(),
            row_offsets: row_offsets.clone(),
            col_indices: col_indices.clone(),
            extension: None,
        }
    }
    /// The same structure with a backend's extension attached.
    pub fn with_extension<E: Any + Send + Sync>(self, extension: E) -> Self {
        HostStructure {
            extension: Some(Box::new(extension)),
            ..self
        }
    }
    /// The backend's extension, if there is one of type `E`.
    pub fn extension<E: Any>(&self) -> Option<&E> {
        self.extension.as_ref()?.downcast_ref::<E>()
    }
    /// Rows of the product.
    #[inline]
    pub fn nrows(&self) -> usize {
        self.row_offsets.len() - 1
    }
    /// Columns of the product.
    #[inline]
    pub fn ncols(&self) -> usize {
        self.ncols
    }
    /// Row offsets (`nrows + 1`, from 0 to the number of entries).
    #[inline]
    pub fn row_offsets(&self) -> &[u64] {
        &self.row_offsets
    }
    /// Column indices, sorted within each row.
    #[inline]
    pub fn col_indices(&self) -> &[u32] {
        &self.col_indices
    }
    /// The product with this structure and `values` (one per entry, in order), sharing the
    /// structure; values of another length are an [`Error::InvalidArgument`].
    pub fn with_values<T: Scalar>(&self, values: Vec<T>) -> Result<Csr<T>> {
        if values.len() != self.col_indices.len() {
            return Err(Error::InvalidArgument(format!(
                "a planned product of {} entries was given {} values",
                self.col_indices.len(),
                values.len()
            )));
        }
        // SAFETY: the structure is that of a valid matrix of these dimensions (it was made
        // from one), and there is one value per entry.
        Ok(unsafe {
            Csr::from_arrays_unchecked(
                self.nrows(),
                self.ncols,
                self.row_offsets.clone(),
                self.col_indices.clone(),
                values.into(),
            )
        })
    }
}

/// Rows per unit of parallel work and per cancellation check in [`numeric`].
const NUMERIC_ROWS: usize = 256;
/// Rows of C up to this length find a product's position by binary search in the row (which
/// sits in L1); longer rows through a per-thread map from B's columns to positions.
const SEARCH_MAX_ROW: usize = 16;
/// Above this many columns the map would no longer fit any cache: binary search everywhere.
const POSITION_MAP_MAX_COLS: usize = 1 << 24;

/// The numeric phase alone: `C = A·B` into `structure`, which must be the structure of the
/// product of A's and B's patterns. Runs on the current rayon pool, checking `run` between
/// batches of rows. A product that falls outside the structure is an
/// [`Error::PatternMismatch`], never a write out of place.
pub fn numeric<T: Scalar, S: Semiring<T>>(
    structure: &HostStructure,
    a: &Csr<T>,
    b: &Csr<T>,
    run: &RunControl,
) -> Result<Csr<T>> {
    let nrows = a.nrows();
    let ncols = b.ncols();
    if structure.row_offsets.len() != nrows + 1 {
        return Err(Error::PatternMismatch {
            operand: "A",
            detail: format!(
                "the plan's product has {} rows, A has {nrows}",
                structure.row_offsets.len().saturating_sub(1)
            ),
        });
    }
    if structure.ncols != ncols {
        return Err(Error::PatternMismatch {
            operand: "B",
            detail: format!(
                "the plan's product has {} columns, B has {ncols}",
                structure.ncols
            ),
        });
    }
    let nnz = structure.col_indices.len();
    // Every value is written exactly once below, so C's values start uninitialised (no pass
    // to zero them); the structure is the plan's own, shared.
    let mut values: Vec<T> = Vec::with_capacity(nnz);
    crate::advise_huge_pages(values.spare_capacity_mut());
    let mut pieces: Vec<(usize, &mut [MaybeUninit<T>])> =
        Vec::with_capacity(nrows.div_ceil(NUMERIC_ROWS));
    let mut rest = &mut values.spare_capacity_mut()[..nnz];
    let mut consumed = 0u64;
    for first in (0..nrows).step_by(NUMERIC_ROWS) {
        let last = (first + NUMERIC_ROWS).min(nrows);
        let end = structure.row_offsets[last];
        let (piece, tail) = rest.split_at_mut((end - consumed) as usize);
        pieces.push((first, piece));
        rest = tail;
        consumed = end;
    }
    let map_allowed = ncols <= POSITION_MAP_MAX_COLS;
    pieces.into_par_iter().try_for_each_init(
        || (Vec::<u32>::new(), Vec::<T::Acc>::new()),
        |(map, acc), (first, piece)| -> Result<()> {
            run.checkpoint()?;
            let last = (first + NUMERIC_ROWS).min(nrows);
            let base = structure.row_offsets[first];
            let mut products = 0u64;
            for i in first..last {
                let (lo, hi) = (structure.row_offsets[i], structure.row_offsets[i + 1]);
                let row_cols = &structure.col_indices[lo as usize..hi as usize];
                let use_map = map_allowed && row_cols.len() > SEARCH_MAX_ROW;
                if use_map {
                    if map.len() < ncols {
                        map.resize(ncols, 0);
                    }
                    for (k, &j) in row_cols.iter().enumerate() {
                        map[j as usize] = k as u32;
                    }
                }
                acc.clear();
                acc.resize(row_cols.len(), S::zero());
                let (acols, avals) = a.row(i);
                for (&k, &av) in acols.iter().zip(avals) {
                    let (bcols, bvals) = b.row(k as usize);
                    products += bcols.len() as u64;
                    for (&j, &bv) in bcols.iter().zip(bvals) {
                        let at = if use_map {
                            let at = map[j as usize] as usize;
                            (row_cols.get(at) == Some(&j)).then_some(at)
                        } else {
                            row_cols.binary_search(&j).ok()
                        };
                        let Some(at) = at else {
                            return Err(Error::PatternMismatch {
                                operand: "A·B",
                                detail: format!(
                                    "product entry ({i}, {j}) is not in the planned structure"
                                ),
                            });
                        };
                        acc[at] = S::fma(acc[at], av, bv);
                    }
                }
                let out = &mut piece[(lo - base) as usize..(hi - base) as usize];
                for (dst, &v) in out.iter_mut().zip(acc.iter()) {
                    dst.write(T::from_acc(v));
                }
            }
            run.add_done(products);
            Ok(())
        },
    )?;
    // SAFETY: the batches tile C's entries and each row wrote every value of its range.
    unsafe { values.set_len(nnz) };
    // SAFETY: the structure is that of a canonical product (sorted, in bounds: it was made
    // from a valid matrix of these dimensions, checked above); every value was written.
    Ok(unsafe {
        Csr::from_arrays_unchecked(
            nrows,
            ncols,
            structure.row_offsets.clone(),
            structure.col_indices.clone(),
            values.into(),
        )
    })
}
