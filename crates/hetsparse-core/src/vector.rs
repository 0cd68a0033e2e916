//! Sparse vectors as GraphBLAS has them: a length, and sorted indices with their values. They
//! are the operands and results of the semiring matrix–vector products
//! ([`VectorProductKind::Mxv`](crate::VectorProductKind) `w⟨m⟩ = A ⊕.⊗ u` and `Vxm`
//! `wᵀ⟨mᵀ⟩ = uᵀ ⊕.⊗ A`), where a breadth-first search's frontier holds a few vertices of
//! millions: the work of a product follows the entries stored, not the length.
//!
//! A [`SparseVector`] is stored as a `1 × len` CSR row, so that validation, masks
//! ([`Mask`]) and the accumulating write-back ([`crate::write_back`]) are the matrices' own.

use crate::backend::{AccumulateOp, Mask};
use crate::error::Result;
use crate::format::Csr;
use crate::scalar::Scalar;

/// A sparse vector: `len` positions, of which those in [`indices`](Self::indices) (strictly
/// increasing) hold the [`values`](Self::values) beside them.
///
/// ```
/// use hetsparse_core::SparseVector;
/// let v = SparseVector::try_new(5, vec![1, 4], vec![2.0, 3.0])?;
/// assert_eq!((v.size(), v.nnz(), v.get(4), v.get(0)), (5, 2, Some(3.0), None));
/// assert_eq!(v.to_dense(0.0), vec![0.0, 2.0, 0.0, 0.0, 3.0]);
/// assert!(SparseVector::try_new(5, vec![4, 1], vec![2.0, 3.0]).is_err(), "unsorted");
/// # Ok::<(), hetsparse_core::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct SparseVector<T> {
    /// The entries as row 0 of a `1 × len` matrix.
    row: Csr<T>,
}

impl<T: Scalar> SparseVector<T> {
    /// A vector of `len` positions holding `values[p]` at `indices[p]`;
    /// [`crate::FormatError`] for indices that are unsorted, repeated or not below `len`, or
    /// lengths that differ.
    pub fn try_new(len: usize, indices: Vec<u32>, values: Vec<T>) -> Result<Self> {
        let nnz = indices.len() as u64;
        Ok(SparseVector {
            row: Csr::try_new(1, len, vec![0, nnz], indices, values)?,
        })
    }

    /// A vector of `len` positions holding nothing.
    pub fn empty(len: usize) -> Result<Self> {
        Self::try_new(len, Vec::new(), Vec::new())
    }

    /// Every position of `values` stored (a full vector in GraphBLAS's words), zeros too.
    pub fn from_dense(values: &[T]) -> Result<Self> {
        let len = u32::try_from(values.len()).map_err(|_| {
            crate::Error::InvalidArgument(format!(
                "a sparse vector of {} positions: indices are 32-bit",
                values.len()
            ))
        })?;
        Self::try_new(values.len(), (0..len).collect(), values.to_vec())
    }

    /// The vector held by row 0 of a `1 × len` matrix; [`crate::Error::InvalidArgument`] for
    /// a matrix of more than one row.
    pub fn from_row(row: Csr<T>) -> Result<Self> {
        if row.nrows() != 1 {
            return Err(crate::Error::InvalidArgument(format!(
                "a sparse vector from a {}×{} matrix: it must have one row",
                row.nrows(),
                row.ncols()
            )));
        }
        Ok(SparseVector { row })
    }

    /// The vector as row 0 of a `1 × len` matrix (moved, not copied).
    pub fn into_row(self) -> Csr<T> {
        self.row
    }

    /// The vector as row 0 of a `1 × len` matrix.
    pub fn as_row(&self) -> &Csr<T> {
        &self.row
    }

    /// The vector as a `len × 1` matrix (copied): `A · u` is A times this column.
    pub fn to_column(&self) -> Result<Csr<T>> {
        let nnz = self.indices().len();
        Ok(Csr::try_new(
            self.size(),
            1,
            column_offsets(self.indices(), self.size()),
            vec![0; nnz],
            self.values().to_vec(),
        )?)
    }

    /// The vector held by the one column of a `len × 1` matrix (the result of A times a
    /// [`to_column`](Self::to_column)); [`crate::Error::InvalidArgument`] for a matrix of more
    /// than one column or more rows than 32-bit indices reach.
    pub fn from_column(column: Csr<T>) -> Result<Self> {
        let (len, ncols) = column.shape();
        if ncols != 1 || len > u32::MAX as usize {
            return Err(crate::Error::InvalidArgument(format!(
                "a sparse vector from a {len}×{ncols} matrix: it must have one column and \
                 at most {} rows",
                u32::MAX
            )));
        }
        let indices = (0..len)
            .filter(|&i| column.row_nnz(i) > 0)
            .map(|i| i as u32)
            .collect();
        let (_, _, _, _, values) = column.into_parts();
        Self::try_new(len, indices, values)
    }

    /// Its number of positions (GraphBLAS's `size`).
    pub fn size(&self) -> usize {
        self.row.ncols()
    }

    /// How many positions hold an entry.
    pub fn nnz(&self) -> u64 {
        self.row.nnz()
    }

    /// The positions holding an entry, increasing.
    pub fn indices(&self) -> &[u32] {
        self.row.col_indices()
    }

    /// The entries' values, beside [`indices`](Self::indices).
    pub fn values(&self) -> &[T] {
        self.row.values()
    }

    /// The entry at position `i`, if one is stored.
    pub fn get(&self, i: usize) -> Option<T> {
        self.row.get(0, i)
    }

    /// The vector with `fill` where no entry is stored.
    pub fn to_dense(&self, fill: T) -> Vec<T> {
        let mut dense = vec![fill; self.size()];
        for (&i, &v) in self.indices().iter().zip(self.values()) {
            dense[i as usize] = v;
        }
        dense
    }

    /// A mask admitting the positions this vector stores, whatever their values.
    pub fn structural_mask(&self) -> Mask {
        Mask::structural(&self.row)
    }

    /// A mask admitting the positions this vector stores a non-zero value at.
    pub fn valued_mask(&self) -> Mask {
        Mask::valued(&self.row)
    }
}

/// The row offsets of a `len × 1` matrix holding an entry at each of `positions` (strictly
/// increasing, below `len`): a vector's positions, or a vector mask's, as one column.
pub(crate) fn column_offsets(positions: &[u32], len: usize) -> Vec<u64> {
    let mut offsets = Vec::with_capacity(len + 1);
    offsets.push(0u64);
    let mut listed = positions.iter().peekable();
    for k in 0..len {
        let here = u64::from(listed.next_if(|&&j| j as usize == k).is_some());
        offsets.push(offsets[k] + here);
    }
    offsets
}

/// `w⟨mask, replace⟩ = accum(w, t)` for vectors: [`crate::write_back`] of their rows.
///
/// ```
/// use hetsparse_core::{vector::write_back_vector, AccumulateOp, SparseVector};
/// // Relaxing distances: d = min(d, t).
/// let d = SparseVector::try_new(3, vec![0, 1], vec![0.0, 5.0])?;
/// let t = SparseVector::try_new(3, vec![1, 2], vec![2.0, 7.0])?;
/// let d = write_back_vector(&d, &t, None, Some(AccumulateOp::Min))?;
/// assert_eq!(d.values(), &[0.0, 2.0, 7.0]);
/// # Ok::<(), hetsparse_core::Error>(())
/// ```
pub fn write_back_vector<T: Scalar>(
    w: &SparseVector<T>,
    t: &SparseVector<T>,
    mask: Option<&Mask>,
    accumulator: Option<AccumulateOp>,
) -> Result<SparseVector<T>> {
    SparseVector::from_row(crate::write_back(&w.row, &t.row, mask, accumulator)?)
}

/// [`write_back_vector`] taking the product by value: into an empty `w`, a product whose
/// entries the mask admits is the result, moved ([`crate::write_back_owned`]).
pub fn write_back_vector_owned<T: Scalar>(
    w: &SparseVector<T>,
    t: SparseVector<T>,
    mask: Option<&Mask>,
    accumulator: Option<AccumulateOp>,
) -> Result<SparseVector<T>> {
    SparseVector::from_row(crate::write_back_owned(&w.row, t.row, mask, accumulator)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_checked_and_converted() {
        let v = SparseVector::try_new(4, vec![0, 3], vec![1.0f64, 0.0]).unwrap();
        assert_eq!(v.structural_mask().entries(), 2);
        assert_eq!(v.valued_mask().entries(), 1);
        assert_eq!(SparseVector::from_dense(&[1.0f64, 0.0]).unwrap().nnz(), 2);
        assert!(SparseVector::try_new(2, vec![2], vec![1.0f64]).is_err());
        assert!(SparseVector::try_new(2, vec![1, 1], vec![1.0f64, 1.0]).is_err());
        assert!(SparseVector::from_row(Csr::<f64>::zeros(2, 2).unwrap()).is_err());
        let row = v.clone().into_row();
        assert_eq!(SparseVector::from_row(row).unwrap(), v);
    }

    /// A vector and its mask become a column and the column's mask (positions, kind,
    /// complement and replace kept), and the column comes back as the vector.
    #[test]
    fn vectors_and_masks_become_columns_and_back() {
        use crate::MaskKind;
        let u = SparseVector::try_new(5, vec![1, 4], vec![2.0f32, 3.0]).unwrap();
        let c = u.to_column().unwrap();
        assert_eq!(c.shape(), (5, 1));
        assert_eq!(c.row_offsets(), &[0, 0, 1, 1, 1, 2]);
        assert_eq!(SparseVector::from_column(c).unwrap(), u);
        let m = u.valued_mask().complemented().replacing();
        let cm = m.to_column().unwrap();
        assert_eq!((cm.shape(), cm.kind()), ((5, 1), MaskKind::Valued));
        assert_eq!(cm.row_offsets(), &[0, 0, 1, 1, 1, 2]);
        assert!(cm.is_complemented() && cm.is_replacing());
        for i in 0..5 {
            assert_eq!(cm.admits(i, 0), m.admits(0, i as u32), "{i}");
        }
        let bits = Mask::from_bitmap(5, vec![0b10010], MaskKind::Structural).unwrap();
        assert_eq!(bits.to_column().unwrap().row_offsets(), cm.row_offsets());
        assert!(cm.to_column().is_err(), "a column's mask is not a vector's");
        assert!(SparseVector::from_column(Csr::<f32>::zeros(2, 2).unwrap()).is_err());
        let empty = SparseVector::<f32>::empty(3).unwrap();
        assert_eq!(
            SparseVector::from_column(empty.to_column().unwrap()).unwrap(),
            empty
        );
    }

    /// A mask made from a bitmap admits what the same positions listed admit, equals that
    /// mask, lists its positions for devices, and is refused when its words do not fit.
    #[test]
    fn bitmap_masks_match_listed_ones() {
        use crate::MaskKind;
        let positions = vec![0u32, 5, 63, 64, 129];
        let listed = SparseVector::try_new(130, positions.clone(), vec![1.0f64; 5])
            .unwrap()
            .structural_mask();
        let mut bits = vec![0u64; 3];
        for &j in &positions {
            bits[j as usize / 64] |= 1 << (j % 64);
        }
        let bitmap = Mask::from_bitmap(130, bits.clone(), MaskKind::Structural).unwrap();
        assert_eq!(bitmap, listed);
        assert_eq!(bitmap.bitmap(), Some(&bits[..]));
        assert_eq!((bitmap.shape(), bitmap.entries()), ((1, 130), 5));
        assert_eq!(bitmap.row_offsets(), listed.row_offsets());
        assert_eq!(bitmap.col_indices(), &positions[..]);
        for j in 0..130 {
            assert_eq!(bitmap.admits(0, j), listed.admits(0, j), "{j}");
            let (b, l) = (bitmap.clone().complemented(), listed.clone().complemented());
            assert_eq!(b.admits(0, j), l.admits(0, j), "{j}");
        }
        assert_eq!(
            bitmap.window(0..1, 60..70).unwrap(),
            listed.window(0..1, 60..70).unwrap()
        );
        assert!(Mask::from_bitmap(130, vec![0; 2], MaskKind::Structural).is_err());
        assert!(Mask::from_bitmap(130, vec![0, 0, 1 << 2], MaskKind::Valued).is_err());
        assert!(Mask::from_bitmap(128, vec![u64::MAX; 2], MaskKind::Valued).is_ok());
    }

    /// A mask made from bytes (any non-zero byte admits) admits, counts, lists and windows
    /// as the same positions listed, equals that mask and the bitmap's, and is refused when
    /// its length is not the mask's.
    #[test]
    fn byte_masks_match_listed_ones() {
        use crate::{HostArray, MaskKind};
        let positions = vec![0u32, 5, 63, 64, 129];
        let listed = SparseVector::try_new(130, positions.clone(), vec![1.0f64; 5])
            .unwrap()
            .structural_mask();
        let mut bytes = vec![0u8; 130];
        for (n, &j) in positions.iter().enumerate() {
            bytes[j as usize] = [1, 2, 255, 128, 1][n];
        }
        let from_bytes =
            Mask::from_bytes(130, HostArray::from(bytes.clone()), MaskKind::Structural).unwrap();
        assert_eq!(from_bytes.bytes(), Some(&bytes[..]));
        assert_eq!(from_bytes.bitmap(), None);
        for j in 0..130 {
            assert_eq!(from_bytes.admits(0, j), listed.admits(0, j), "{j}");
            let (b, l) = (
                from_bytes.clone().complemented(),
                listed.clone().complemented(),
            );
            assert_eq!(b.admits(0, j), l.admits(0, j), "{j}");
        }
        assert_eq!((from_bytes.shape(), from_bytes.entries()), ((1, 130), 5));
        assert_eq!(from_bytes, listed);
        assert_eq!(from_bytes.row_offsets(), listed.row_offsets());
        assert_eq!(from_bytes.col_indices(), &positions[..]);
        assert_eq!(
            from_bytes.window(0..1, 60..70).unwrap(),
            listed.window(0..1, 60..70).unwrap()
        );
        assert!(Mask::from_bytes(131, HostArray::from(bytes), MaskKind::Valued).is_err());
    }
}
