//! The sparse-vector products mxv and vxm as SpGEMMs of the semiring kernels
//! ([`crate::spgemm::semiring`]): `uᵀ·A` is a one-row matrix times A, `A·u` is A times a
//! one-column matrix, with the vector's mask as a mask of that row or column. A frontier of a
//! few entries costs what its rows of A cost, as the semiring kernels' work follows the
//! entries stored; A resident in the GPU's memory is read there (a graph searched level after
//! level is copied over once, not once a level).

use std::sync::Arc;

use hetsparse_core::{
    Mask, Result, RunControl, SparseVector, SpgemmOptions, VectorProductKind, VectorProductOptions,
};

use crate::context::Gpu;
use crate::scalar::DeviceScalar;
use crate::spgemm::{semiring, Operand};

/// `w⟨m⟩ = A ⊕.⊗ u` or `wᵀ⟨mᵀ⟩ = uᵀ ⊕.⊗ A` over `options`' semiring and mask (the accumulator
/// is applied above the backends).
pub(crate) fn product<T: DeviceScalar>(
    gpu: &Arc<Gpu>,
    kind: VectorProductKind,
    a: Operand<'_, T>,
    u: &SparseVector<T>,
    options: &VectorProductOptions,
    run: &RunControl,
) -> Result<SparseVector<T>> {
    let _span = tracing::info_span!(
        "sparse-vector product",
        backend = "cuda",
        kind = kind.name(),
        u_nnz = u.nnz()
    )
    .entered();
    let mut spgemm: SpgemmOptions = options.as_spgemm();
    spgemm.accumulator = None;
    let c = match kind {
        VectorProductKind::Vxm => {
            semiring::multiply(gpu, Operand::Host(u.as_row()), a, &spgemm, run)?.0
        }
        VectorProductKind::Mxv => {
            let u_column = u.to_column()?;
            spgemm.mask = options.mask.as_ref().map(Mask::to_column).transpose()?;
            semiring::multiply(gpu, a, Operand::Host(&u_column), &spgemm, run)?.0
        }
    };
    let c = c.download(gpu, &**gpu.stream()?)?;
    match kind {
        VectorProductKind::Vxm => SparseVector::from_row(c),
        VectorProductKind::Mxv => SparseVector::from_column(c),
    }
}
