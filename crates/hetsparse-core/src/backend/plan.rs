//! Plans: a SpGEMM's symbolic work done once, its numeric work run many times.
//!
//! A [`SpgemmPlan`] holds what the backend learned from the operands' patterns (the product's
//! structure, its size, the memory it needs). Executing it with operands of the same patterns
//! and new values recomputes only values: AMG's Galerkin product after a change of
//! coefficients, Newton steps with a fixed pattern (cuSPARSE's SpGEMMreuse, faer's
//! symbolic/numeric split). Operands of another pattern are an
//! [`Error::PatternMismatch`].

use std::any::Any;
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use rayon::prelude::*;

use super::memory::MemoryRequirement;
use super::options::SpgemmOptions;
use super::resident::{CsrOperand, MemorySpace, PatternId};
use super::run::RunControl;
use crate::error::{Error, Result};
use crate::format::Csr;
use crate::scalar::Scalar;
use crate::semiring::Semiring;

/// The symbolic result of a SpGEMM, to be executed with values.
pub struct SpgemmPlan<T> {
    space: MemorySpace,
    options: SpgemmOptions,
    a: (PatternId, (usize, usize), u64),
    b: (PatternId, (usize, usize), u64),
    c_nnz: u64,
    products: u64,
    requirement: MemoryRequirement,
    state: Arc<dyn Any + Send + Sync>,
    _scalar: PhantomData<fn() -> T>,
}

impl<T> fmt::Debug for SpgemmPlan<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SpgemmPlan")
            .field("space", &self.space)
            .field("options", &self.options)
            .field("shape", &(self.a.1 .0, self.b.1 .1))
            .field("c_nnz", &self.c_nnz)
            .field("products", &self.products)
            .field("requirement", &self.requirement)
            .finish_non_exhaustive()
    }
}

/// What a plan records of one operand.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OperandPattern {
    /// Its pattern identity.
    pub pattern: PatternId,
    /// `(rows, columns)`.
    pub shape: (usize, usize),
    /// Stored entries.
    pub nnz: u64,
}

impl OperandPattern {
    /// What `m` is.
    pub fn of<T: Scalar>(m: &CsrOperand<'_, T>) -> Self {
        OperandPattern {
            pattern: m.pattern(),
            shape: m.shape(),
            nnz: m.nnz(),
        }
    }
}

impl<T: Scalar> SpgemmPlan<T> {
    /// For backends: a plan over `state`, the backend's own symbolic result.
    #[allow(clippy::too_many_arguments)]
    pub fn from_state<S: Any + Send + Sync>(
        space: MemorySpace,
        options: SpgemmOptions,
        a: OperandPattern,
        b: OperandPattern,
        c_nnz: u64,
        products: u64,
        requirement: MemoryRequirement,
        state: S,
    ) -> Self {
        SpgemmPlan {
            space,
            options,
            a: (a.pattern, a.shape, a.nnz),
            b: (b.pattern, b.shape, b.nnz),
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
        (self.a.1 .0, self.b.1 .1)
    }
    /// Entries of the product.
    pub fn c_nnz(&self) -> u64 {
        self.c_nnz
    }
    /// Intermediate products one execution computes (flops are twice that).
    pub fn products(&self) -> u64 {
        self.products
    }
    /// What one execution needs in memory, resident operands assumed.
    pub fn requirement(&self) -> MemoryRequirement {
        self.requirement
    }
    /// The pattern identity of the products it makes.
    pub fn c_pattern(&self) -> PatternId {
        PatternId::of_product(self.a.0, self.b.0)
    }
    /// For backends: the symbolic state, if it is of type `S`.
    pub fn state<S: Any>(&self) -> Option<&S> {
        self.state.downcast_ref::<S>()
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
                found: self.space.to_string(),
                expected: space.to_string(),
            });
        }
        for (name, planned, given) in [("A", self.a, a), ("B", self.b, b)] {
            let (shape, nnz) = (given.shape(), given.nnz());
            if shape != planned.1 || nnz != planned.2 || given.pattern() != planned.0 {
                return Err(Error::PatternMismatch {
                    operand: name,
                    detail: format!(
                        "the plan was made for a {}×{} operand with {} entries and pattern {:#x}, \
                         this one is {}×{} with {} entries and pattern {:#x}",
                        planned.1 .0,
                        planned.1 .1,
                        planned.2,
                        planned.0.value(),
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

/// The product's structure in host memory: the plan state of backends that compute there.
/// Made only from a valid matrix, so it is always canonical.
#[derive(Debug)]
pub struct HostStructure {
    ncols: usize,
    row_offsets: Vec<u64>,
    col_indices: Vec<u32>,
}

impl HostStructure {
    /// The structure of a computed product.
    pub fn of<T: Scalar>(c: &Csr<T>) -> Self {
        HostStructure {
            ncols: c.ncols(),
            row_offsets: c.row_offsets().to_vec(),
            col_indices: c.col_indices().to_vec(),
        }
    }
    /// Bytes it holds.
    pub fn bytes(&self) -> u64 {
        (self.row_offsets.len() as u64) * 8 + (self.col_indices.len() as u64) * 4
    }
}

/// Rows per unit of parallel work and per cancellation check in [`numeric`].
const NUMERIC_ROWS: usize = 256;
/// Above this many columns, [`numeric`] finds positions by binary search in C's row instead of
/// a per-thread map of B's columns (which would no longer fit any cache).
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
    let mut values = vec![T::zero(); nnz];
    // Split C's values at batch boundaries so each batch writes its own rows.
    let mut pieces: Vec<(usize, &mut [T])> = Vec::with_capacity(nrows.div_ceil(NUMERIC_ROWS));
    let mut rest: &mut [T] = &mut values;
    let mut consumed = 0u64;
    for first in (0..nrows).step_by(NUMERIC_ROWS) {
        let last = (first + NUMERIC_ROWS).min(nrows);
        let end = structure.row_offsets[last];
        let (piece, tail) = rest.split_at_mut((end - consumed) as usize);
        pieces.push((first, piece));
        rest = tail;
        consumed = end;
    }
    let use_map = ncols <= POSITION_MAP_MAX_COLS;
    pieces.into_par_iter().try_for_each_init(
        || {
            let map = if use_map {
                vec![0u32; ncols]
            } else {
                Vec::new()
            };
            (map, Vec::<T::Acc>::new())
        },
        |(map, acc), (first, piece)| -> Result<()> {
            run.checkpoint()?;
            let last = (first + NUMERIC_ROWS).min(nrows);
            let base = structure.row_offsets[first];
            let mut products = 0u64;
            for i in first..last {
                let lo = (structure.row_offsets[i] - base) as usize;
                let hi = (structure.row_offsets[i + 1] - base) as usize;
                let row_cols = &structure.col_indices
                    [structure.row_offsets[i] as usize..structure.row_offsets[i + 1] as usize];
                acc.clear();
                acc.resize(hi - lo, S::zero());
                if use_map {
                    for (k, &j) in row_cols.iter().enumerate() {
                        map[j as usize] = k as u32;
                    }
                }
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
                for (dst, &v) in piece[lo..hi].iter_mut().zip(acc.iter()) {
                    *dst = T::from_acc(v);
                }
            }
            run.add_done(products);
            Ok(())
        },
    )?;
    // SAFETY: the structure is that of a canonical product (sorted, in bounds), checked
    // against A's rows above; values were written for every entry.
    Ok(unsafe {
        Csr::from_parts_unchecked(
            nrows,
            ncols,
            structure.row_offsets.clone(),
            structure.col_indices.clone(),
            values,
        )
    })
}
