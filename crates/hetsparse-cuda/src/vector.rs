//! The sparse-vector products mxv and vxm as SpGEMMs of the semiring kernels
//! ([`crate::spgemm::semiring`]): `uᵀ·A` is a one-row matrix times A, `A·u` is A times a
//! one-column matrix, with the vector's mask as a mask of that row or column. A frontier of a
//! few entries costs what its rows of A cost, as the semiring kernels' work follows the
//! entries stored.

use hetsparse_core::{
    Csr, Error, Mask, Result, RunControl, SparseVector, SpgemmOptions, VectorProductKind,
    VectorProductOptions,
};

use crate::context::Gpu;
use crate::scalar::DeviceScalar;
use crate::spgemm::{semiring, Operand};

/// `u` as a `len × 1` matrix.
fn column<T: DeviceScalar>(u: &SparseVector<T>) -> Result<Csr<T>> {
    let mut offsets = Vec::with_capacity(u.size() + 1);
    offsets.push(0u64);
    let mut stored = u.indices().iter().peekable();
    for k in 0..u.size() {
        if stored.next_if(|&&i| i as usize == k).is_some() {
            offsets.push(offsets[k] + 1);
        } else {
            offsets.push(offsets[k]);
        }
    }
    let cols = vec![0u32; u.indices().len()];
    Ok(Csr::try_new(
        u.size(),
        1,
        offsets,
        cols,
        u.values().to_vec(),
    )?)
}

/// A `1 × len` vector mask as the `len × 1` mask of a column (its positions, complement and
/// replace flag; a valued mask's positions were taken when it was made).
fn column_mask(mask: &Mask) -> Result<Mask> {
    let len = mask.shape().1;
    let row = mask.row(0);
    let mut offsets = Vec::with_capacity(len + 1);
    offsets.push(0u64);
    let mut stored = row.iter().peekable();
    for k in 0..len {
        let here = u64::from(stored.next_if(|&&i| i as usize == k).is_some());
        offsets.push(offsets[k] + here);
    }
    let positions = Csr::<u32>::try_new(
        len,
        1,
        offsets,
        vec![0u32; row.len()],
        vec![1u32; row.len()],
    )?;
    let mut column = Mask::structural(&positions);
    if mask.is_complemented() {
        column = column.complemented();
    }
    if mask.is_replacing() {
        column = column.replacing();
    }
    Ok(column)
}

/// A `len × 1` matrix as a vector of `len` positions.
fn vector_of_column<T: DeviceScalar>(c: Csr<T>) -> Result<SparseVector<T>> {
    let len = c.nrows();
    let indices = (0..len)
        .filter(|&i| c.row_nnz(i) > 0)
        .map(|i| {
            u32::try_from(i).map_err(|_| {
                Error::InvalidArgument(format!(
                    "a sparse vector of {len} positions: indices are 32-bit"
                ))
            })
        })
        .collect::<Result<Vec<u32>>>()?;
    let (_, _, _, _, values) = c.into_parts();
    SparseVector::try_new(len, indices, values)
}

/// `w⟨m⟩ = A ⊕.⊗ u` or `wᵀ⟨mᵀ⟩ = uᵀ ⊕.⊗ A` over `options`' semiring and mask (the accumulator
/// is applied above the backends).
pub(crate) fn product<T: DeviceScalar>(
    gpu: &Gpu,
    kind: VectorProductKind,
    a: &Csr<T>,
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
            semiring::multiply(
                gpu,
                Operand::Host(u.as_row()),
                Operand::Host(a),
                &spgemm,
                run,
            )?
            .0
        }
        VectorProductKind::Mxv => {
            let u_column = column(u)?;
            spgemm.mask = options.mask.as_ref().map(column_mask).transpose()?;
            semiring::multiply(
                gpu,
                Operand::Host(a),
                Operand::Host(&u_column),
                &spgemm,
                run,
            )?
            .0
        }
    };
    let c = c.download(gpu, &**gpu.stream()?)?;
    match kind {
        VectorProductKind::Vxm => SparseVector::from_row(c),
        VectorProductKind::Mxv => vector_of_column(c),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vectors_and_masks_become_columns_and_back() {
        let u = SparseVector::try_new(5, vec![1, 4], vec![2.0f32, 3.0]).unwrap();
        let c = column(&u).unwrap();
        assert_eq!(c.shape(), (5, 1));
        assert_eq!(c.row_offsets(), &[0, 0, 1, 1, 1, 2]);
        assert_eq!(vector_of_column(c).unwrap(), u);
        let m = u.structural_mask().complemented().replacing();
        let cm = column_mask(&m).unwrap();
        assert_eq!(cm.shape(), (5, 1));
        assert_eq!(cm.row_offsets(), &[0, 0, 1, 1, 1, 2]);
        assert!(cm.is_complemented() && cm.is_replacing());
        assert!(!cm.admits(1, 0) && cm.admits(0, 0));
        let empty = SparseVector::<f32>::empty(3).unwrap();
        assert_eq!(vector_of_column(column(&empty).unwrap()).unwrap(), empty);
    }
}
