//! Serial reference kernels, written to be obviously correct: the oracle of every test.
//!
//! [`ReferenceBackend`] wraps them in the [`Backend`] trait and passes the conformance suite.

use crate::backend::{
    check, host_operands, Backend, Capabilities, ChunkPipeline, ChunkProduct, ChunkSink,
    ChunkTiming, CsrOperand, CsrWindow, DenseOperand, Device, DeviceInfo, DeviceKind, MemorySpace,
    Operation, ProductChunk, Residency, RunControl, SparseOperand, SpgemmAlgorithm, SpgemmOptions,
    SpmmOptions, SpmvOptions, Validated, VectorOperand, VectorProductKind, VectorProductOptions,
};
use crate::vector::SparseVector;
use std::sync::OnceLock;
use std::time::Instant;

use crate::backend::Mask;
use crate::error::Result;
use crate::format::{Csr, Dense, SparseFormat, SparseRef};
use crate::scalar::{Scalar, ScalarType};
use crate::semiring::{with_semiring, PlusTimes, Semiring, SemiringVisitor};

/// `C = A · B` over semiring `S` (Gustavson, one row at a time). A row's products are sorted
/// by column (stably, so each column's products are summed in the order of A's row) and summed
/// column by column: the work memory is one row's products, never a dense row of `B.ncols()`
/// slots, so a matrix with few entries and `u32::MAX` columns multiplies like a small one.
/// Every product creates an entry, also where values cancel.
pub fn spgemm<T: Scalar, S: Semiring<T>>(a: &Csr<T>, b: &Csr<T>) -> Result<Csr<T>> {
    spgemm_windows::<T, S>(&CsrWindow::whole(a), &CsrWindow::whole(b))
}

/// [`spgemm`] of two windows, read in place: `a`'s columns (relative to its window) are
/// `b`'s rows (relative to its window), and C's columns are relative to `b`'s first column.
pub fn spgemm_windows<T: Scalar, S: Semiring<T>>(
    a: &CsrWindow<&Csr<T>>,
    b: &CsrWindow<&Csr<T>>,
) -> Result<Csr<T>> {
    spgemm_windows_in::<T, S>(a, b, None, None, false)
}

/// `C⟨M⟩ = A · B` over semiring `S`: [`spgemm`] keeping only the products whose position
/// `mask` admits (all of them without a mask). C's pattern is the masked structural product:
/// an entry wherever an admitted product lands, whatever its value.
pub fn spgemm_masked<T: Scalar, S: Semiring<T>>(
    a: &Csr<T>,
    b: &Csr<T>,
    mask: Option<&Mask>,
) -> Result<Csr<T>> {
    let (wa, wb) = (CsrWindow::whole(a), CsrWindow::whole(b));
    let mask = mask.map(|m| MaskWindow::new(m, &wa, &wb)).transpose()?;
    spgemm_windows_in::<T, S>(&wa, &wb, mask.as_ref(), None, false)
}

/// `C⟨M⟩ = A · B` with the semiring and mask of `options` ([`spgemm_masked`] over the
/// semiring [`SpgemmOptions::semiring`] names). The accumulator and the algorithm are not
/// looked at: this is the product `T` that [`crate::write_back`] merges into a C.
///
/// ```
/// use hetsparse_core::{reference, Csr, Mask, SemiringKind, SpgemmOptions};
/// // A path 0 → 1 → 2 with weights 1 and 2: min_plus gives the two-hop distance.
/// let a = Csr::try_new(3, 3, vec![0, 1, 2, 2], vec![1, 2], vec![1.0, 2.0])?;
/// let options = SpgemmOptions::new().with_semiring(SemiringKind::MinPlus);
/// let c = reference::spgemm_with_options(&a, &a, &options)?;
/// assert_eq!((c.row(0).0, c.row(0).1), (&[2u32][..], &[3.0][..]));
/// // A mask admitting nothing leaves nothing.
/// let none = SpgemmOptions::new().with_mask(Mask::structural(&Csr::<f64>::zeros(3, 3)?));
/// assert_eq!(reference::spgemm_with_options(&a, &a, &none)?.nnz(), 0);
/// # Ok::<(), hetsparse_core::Error>(())
/// ```
pub fn spgemm_with_options<T: Scalar>(
    a: &Csr<T>,
    b: &Csr<T>,
    options: &SpgemmOptions,
) -> Result<Csr<T>> {
    options.check_mask_shape((a.nrows(), b.ncols()))?;
    struct Masked<'m, T> {
        a: &'m Csr<T>,
        b: &'m Csr<T>,
        mask: Option<&'m Mask>,
    }
    impl<T: Scalar> SemiringVisitor<T> for Masked<'_, T> {
        type Output = Result<Csr<T>>;
        fn visit<S: Semiring<T>>(self) -> Result<Csr<T>> {
            spgemm_masked::<T, S>(self.a, self.b, self.mask)
        }
    }
    with_semiring(
        options.semiring,
        Masked {
            a,
            b,
            mask: options.mask.as_ref(),
        },
    )?
}

/// `w⟨m⟩ = A ⊕.⊗ u` (`kind` [`VectorProductKind::Mxv`]) or `wᵀ⟨mᵀ⟩ = uᵀ ⊕.⊗ A`
/// ([`VectorProductKind::Vxm`]) over semiring `S`: the [`spgemm`] of A and `u` as a one-column
/// matrix, or of `u` as a one-row matrix and A, the same products in the same order (inner
/// index `k` for [`Semiring::mul_at`]), then the positions `mask` (a `1 × len` mask on `w`)
/// refuses dropped. A position's value depends only on the products landing there, so
/// dropping after the product gives what a masked kernel computes.
pub fn vector_product<T: Scalar, S: Semiring<T>>(
    kind: VectorProductKind,
    a: &Csr<T>,
    u: &SparseVector<T>,
    mask: Option<&Mask>,
) -> Result<SparseVector<T>> {
    let (u_len, w_len) = kind.lengths(a.shape());
    let (op, left, right) = match kind {
        VectorProductKind::Mxv => ("mxv", a.shape(), (u.size(), 1)),
        VectorProductKind::Vxm => ("vxm", (1, u.size()), a.shape()),
    };
    if u.size() != u_len {
        check::shapes(op, left, right)?;
    }
    let product = match kind {
        VectorProductKind::Mxv => {
            // u as a u_len × 1 column: row k holds u(k) in column 0.
            let mut offsets = crate::host::try_with_capacity(u_len + 1, "mxv column offsets")?;
            offsets.push(0u64);
            let mut next = u.indices().iter().peekable();
            let mut stored = 0u64;
            for k in 0..u_len {
                if next.next_if(|&&i| i as usize == k).is_some() {
                    stored += 1;
                }
                offsets.push(stored);
            }
            let column = Csr::try_new(
                u_len,
                1,
                offsets,
                vec![0; u.indices().len()],
                u.values().to_vec(),
            )?;
            let c = spgemm::<T, S>(a, &column)?;
            let mut indices = Vec::new();
            let mut values = Vec::new();
            for i in 0..c.nrows() {
                if let Some(&v) = c.row(i).1.first() {
                    indices.push(i as u32);
                    values.push(v);
                }
            }
            SparseVector::try_new(w_len, indices, values)?
        }
        VectorProductKind::Vxm => SparseVector::from_row(spgemm::<T, S>(u.as_row(), a)?)?,
    };
    let Some(mask) = mask else {
        return Ok(product);
    };
    if mask.shape() != (1, w_len) {
        return Err(crate::Error::InvalidArgument(format!(
            "{op}: a {:?} mask for a vector of {w_len} positions",
            mask.shape()
        )));
    }
    let (indices, values): (Vec<u32>, Vec<T>) = product
        .indices()
        .iter()
        .zip(product.values())
        .filter(|(&j, _)| mask.admits(0, j))
        .map(|(&j, &v)| (j, v))
        .unzip();
    SparseVector::try_new(w_len, indices, values)
}

/// [`vector_product`] with the semiring and mask of `options` (the accumulator is not looked
/// at: this is the product that [`crate::vector::write_back_vector`] merges into a `w`).
///
/// ```
/// use hetsparse_core::{reference, Csr, SemiringKind, SparseVector, VectorProductKind,
///     VectorProductOptions};
/// // Edges 0 → 1 (weight 1), 0 → 2 (4), 1 → 2 (2); distances from 0 after one step.
/// let a = Csr::try_new(3, 3, vec![0, 2, 3, 3], vec![1, 2, 2], vec![1.0, 4.0, 2.0])?;
/// let d = SparseVector::try_new(3, vec![0], vec![0.0])?;
/// let options = VectorProductOptions::new().with_semiring(SemiringKind::MinPlus);
/// let next = reference::vector_product_with_options(VectorProductKind::Vxm, &a, &d, &options)?;
/// assert_eq!((next.indices(), next.values()), (&[1, 2][..], &[1.0, 4.0][..]));
/// # Ok::<(), hetsparse_core::Error>(())
/// ```
pub fn vector_product_with_options<T: Scalar>(
    kind: VectorProductKind,
    a: &Csr<T>,
    u: &SparseVector<T>,
    options: &VectorProductOptions,
) -> Result<SparseVector<T>> {
    struct Product<'m, T> {
        kind: VectorProductKind,
        a: &'m Csr<T>,
        u: &'m SparseVector<T>,
        mask: Option<&'m Mask>,
    }
    impl<T: Scalar> SemiringVisitor<T> for Product<'_, T> {
        type Output = Result<SparseVector<T>>;
        fn visit<S: Semiring<T>>(self) -> Result<SparseVector<T>> {
            vector_product::<T, S>(self.kind, self.a, self.u, self.mask)
        }
    }
    with_semiring(
        options.semiring,
        Product {
            kind,
            a,
            u,
            mask: options.mask.as_ref(),
        },
    )?
}

/// A mask seen from a window of the product: row `i` of the window is the mask's row
/// `row_base + i`, column `j` its column `col_lo + j`.
struct MaskWindow<'m> {
    mask: &'m Mask,
    row_base: usize,
    col_lo: u32,
}

impl<'m> MaskWindow<'m> {
    /// The mask for the product of windows `a` and `b` ([`Error::InvalidArgument`] unless the
    /// windows lie inside the mask's shape).
    fn new<T: Scalar>(
        mask: &'m Mask,
        a: &CsrWindow<&Csr<T>>,
        b: &CsrWindow<&Csr<T>>,
    ) -> Result<Self> {
        let (rows, cols) = mask.shape();
        if a.rows().end > rows || b.col_lo() as usize + b.ncols() > cols {
            return Err(crate::Error::InvalidArgument(format!(
                "SpGEMM: a {rows}×{cols} mask for rows {:?} and columns from {} of C",
                a.rows(),
                b.col_lo()
            )));
        }
        Ok(MaskWindow {
            mask,
            row_base: a.rows().start,
            col_lo: b.col_lo(),
        })
    }

    fn admits(&self, i: usize, j: u32) -> bool {
        self.mask.admits(self.row_base + i, self.col_lo + j)
    }
}

/// Products between two looks at a run's cancellation (and reports of its progress) in the
/// backend's SpGEMM: a few milliseconds of this serial code.
const CHECK_EVERY_PRODUCTS: u64 = 1 << 16;

/// [`spgemm_windows`] for a run: cancellation looked at every [`CHECK_EVERY_PRODUCTS`]
/// products, and progress reported as it goes where `progress` (and the run is watched, so
/// its plan counted the products).
fn spgemm_windows_in<T: Scalar, S: Semiring<T>>(
    a: &CsrWindow<&Csr<T>>,
    b: &CsrWindow<&Csr<T>>,
    mask: Option<&MaskWindow<'_>>,
    run: Option<&RunControl>,
    progress: bool,
) -> Result<Csr<T>> {
    check::shapes("SpGEMM", a.shape(), b.shape())?;
    let report = |run: &RunControl, products: u64| {
        if progress && run.is_watched() {
            run.add_done(products);
        }
    };
    let mut since_check = 0u64;
    let a_lo = a.col_lo();
    let mut products: Vec<(u32, T, T, u32)> = Vec::new();
    let mut row_offsets = crate::host::try_with_capacity(a.nrows() + 1, "CSR row offsets")?;
    row_offsets.push(0u64);
    let mut cols: Vec<u32> = Vec::new();
    let mut vals: Vec<T> = Vec::new();
    for i in 0..a.nrows() {
        let (acols, avals) = a.row(i);
        for (&k, &av) in acols.iter().zip(avals) {
            let k = k - a_lo;
            products.extend(
                b.row_entries(k as usize)
                    .filter(|&(j, _)| mask.is_none_or(|m| m.admits(i, j)))
                    .map(|(j, bv)| (j, av, bv, k)),
            );
        }
        products.sort_by_key(|p| p.0);
        for same in products.chunk_by(|p, q| p.0 == q.0) {
            let sum = same
                .iter()
                .fold(S::zero(), |acc, &(_, av, bv, k)| S::fma_at(acc, av, bv, k));
            cols.push(same[0].0);
            vals.push(T::from_acc(sum));
        }
        since_check += products.len() as u64;
        products.clear();
        row_offsets.push(cols.len() as u64);
        if let Some(run) = run.filter(|_| since_check >= CHECK_EVERY_PRODUCTS) {
            report(run, since_check);
            since_check = 0;
            run.checkpoint()?;
        }
    }
    if let Some(run) = run {
        report(run, since_check);
    }
    // SAFETY: columns come from B's window (in bounds, relative to its start) and each row was
    // sorted and deduplicated.
    Ok(unsafe { Csr::from_parts_unchecked(a.nrows(), b.ncols(), row_offsets, cols, vals) })
}

/// `y = A · x` over semiring `S`.
pub fn spmv<T: Scalar, S: Semiring<T>>(a: &Csr<T>, x: &[T]) -> Result<Vec<T>> {
    check::spmv(&SparseRef::Csr(a), x)?;
    let mut y = crate::host::try_with_capacity(a.nrows(), "SpMV result")?;
    y.extend((0..a.nrows()).map(|i| {
        let (cols, vals) = a.row(i);
        let mut sum = S::zero();
        for (&j, &v) in cols.iter().zip(vals) {
            sum = S::fma(sum, v, x[j as usize]);
        }
        T::from_acc(sum)
    }));
    Ok(y)
}

/// `C = A · B` for dense B over semiring `S`; C has B's layout.
pub fn spmm<T: Scalar, S: Semiring<T>>(a: &Csr<T>, b: &Dense<T>) -> Result<Dense<T>> {
    check::spmm(&SparseRef::Csr(a), b)?;
    let mut c = Dense::zeros(a.nrows(), b.ncols(), b.layout())?;
    for i in 0..a.nrows() {
        let (cols, vals) = a.row(i);
        for j in 0..b.ncols() {
            let mut sum = S::zero();
            for (&k, &v) in cols.iter().zip(vals) {
                sum = S::fma(sum, v, b.get(k as usize, j));
            }
            c.set(i, j, T::from_acc(sum));
        }
    }
    Ok(c)
}

/// The serial reference kernels as a backend: every operation, every scalar type.
#[derive(Clone, Copy, Debug, Default)]
pub struct ReferenceBackend;

impl Device for ReferenceBackend {
    fn info(&self) -> DeviceInfo {
        DeviceInfo {
            backend: crate::BackendKind::Reference,
            name: "serial reference kernels".into(),
            kind: DeviceKind::Cpu,
            memory_bytes: crate::host_memory_bytes(),
            compute_units: 1,
        }
    }

    fn capabilities(&self) -> &Capabilities {
        static CAPABILITIES: OnceLock<Capabilities> = OnceLock::new();
        CAPABILITIES.get_or_init(|| {
            let mut ops = vec![
                Operation::Spgemm(SpgemmAlgorithm::Auto),
                Operation::Spgemm(SpgemmAlgorithm::RowRow),
                Operation::DiaSpgemm,
                Operation::BsrSpgemm,
            ];
            ops.extend(SparseFormat::ALL.iter().map(|&f| Operation::Spmv(f)));
            ops.extend(SparseFormat::ALL.iter().map(|&f| Operation::Spmm(f)));
            // Every semiring, mask and mode for the sparse-vector products: the reference is
            // the oracle the conformance suite compares the backends' claims with.
            ScalarType::ALL.iter().fold(
                Capabilities::new().with_all(&ops, &ScalarType::ALL),
                |caps, &scalar| {
                    let mut features = crate::SpgemmFeatures::plain();
                    features.semirings = crate::SemiringKind::defined_for(scalar).collect();
                    features.masks = [crate::MaskKind::Structural, crate::MaskKind::Valued].into();
                    features.complemented_masks = true;
                    features.replacing_masks = true;
                    caps.with_vector_product_features(&[scalar], features)
                },
            )
        })
    }

    fn memory_space(&self) -> MemorySpace {
        MemorySpace::Host
    }
}

impl<T: Scalar> Backend<T> for ReferenceBackend {
    fn spgemm_checked(
        &self,
        a: CsrOperand<'_, T>,
        b: CsrOperand<'_, T>,
        _options: &SpgemmOptions,
        run: &RunControl,
        _checked: Validated,
    ) -> Result<Csr<T>> {
        let (a, b) = (host_operands::csr(self, a)?, host_operands::csr(self, b)?);
        run.checkpoint()?;
        run.plan_product(a, b)?;
        // A watcher told of the plan may have cancelled it.
        run.checkpoint()?;
        let (wa, wb) = (CsrWindow::whole(a), CsrWindow::whole(b));
        spgemm_windows_in::<T, PlusTimes>(&wa, &wb, None, Some(run), true)
    }

    fn spmm_checked(
        &self,
        a: SparseOperand<'_, T>,
        b: DenseOperand<'_, T>,
        _options: &SpmmOptions,
        run: &RunControl,
        _checked: Validated,
    ) -> Result<Dense<T>> {
        let (a, b) = (
            host_operands::sparse(self, a)?,
            host_operands::dense(self, b)?,
        );
        run.checkpoint()?;
        spmm::<T, PlusTimes>(&*a.to_csr()?, b)
    }

    fn spmv_checked(
        &self,
        a: SparseOperand<'_, T>,
        x: VectorOperand<'_, T>,
        _options: &SpmvOptions,
        run: &RunControl,
        _checked: Validated,
    ) -> Result<Vec<T>> {
        let (a, x) = (
            host_operands::sparse(self, a)?,
            host_operands::vector(self, x)?,
        );
        run.checkpoint()?;
        spmv::<T, PlusTimes>(&*a.to_csr()?, x)
    }

    fn vector_product_checked(
        &self,
        kind: VectorProductKind,
        a: CsrOperand<'_, T>,
        u: &SparseVector<T>,
        options: &VectorProductOptions,
        run: &RunControl,
        _checked: Validated,
    ) -> Result<SparseVector<T>> {
        let a = host_operands::csr(self, a)?;
        run.checkpoint()?;
        vector_product_with_options(kind, a, u, options)
    }

    fn residency(&self) -> Residency<'_, T> {
        Residency::Host
    }

    fn chunk_pipeline(&self) -> Option<&dyn ChunkPipeline<T>> {
        Some(self)
    }
}

impl<T: Scalar> ChunkPipeline<T> for ReferenceBackend {
    /// Each chunk from its windows of the operands, read in place.
    fn chunks(
        &self,
        a: CsrOperand<'_, T>,
        b: CsrOperand<'_, T>,
        chunks: &[ProductChunk],
        _options: &SpgemmOptions,
        run: &RunControl,
        sink: &mut ChunkSink<'_, T>,
        _checked: Validated,
    ) -> Result<()> {
        let (a, b) = (host_operands::csr(self, a)?, host_operands::csr(self, b)?);
        for (index, chunk) in chunks.iter().enumerate() {
            run.checkpoint()?;
            let start = Instant::now();
            let compute = || -> Result<Csr<T>> {
                let (wa, wb) = chunk.windows(a, b)?;
                // Counted over whole rows of B, as planned: reported at the chunk's end.
                let products = run.plan_product_rows(a, chunk.rows.clone(), b);
                run.checkpoint()?;
                let c = spgemm_windows_in::<T, PlusTimes>(&wa, &wb, None, Some(run), false)?;
                run.add_done(products);
                Ok(c)
            };
            let product = compute().map_err(|e| e.in_chunk(index))?;
            sink(ChunkProduct {
                index,
                chunk: chunk.clone(),
                product,
                timing: ChunkTiming::host(start.elapsed()),
            })?;
        }
        Ok(())
    }
}

crate::every_scalar!(ReferenceBackend);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::Layout;

    #[test]
    fn small_product_by_hand() {
        // [[1, 2], [0, 3]] · [[4, 0], [5, 6]] = [[14, 12], [15, 18]]
        let a = Csr::try_new(2, 2, vec![0, 2, 3], vec![0, 1, 1], vec![1.0, 2.0, 3.0]).unwrap();
        let b = Csr::try_new(2, 2, vec![0, 1, 3], vec![0, 0, 1], vec![4.0, 5.0, 6.0]).unwrap();
        let c = spgemm::<f64, PlusTimes>(&a, &b).unwrap();
        assert_eq!(
            c.to_dense(Layout::RowMajor).unwrap().data(),
            &[14.0, 12.0, 15.0, 18.0]
        );
        let y = spmv::<f64, PlusTimes>(&a, &[1.0, 1.0]).unwrap();
        assert_eq!(y, vec![3.0, 3.0]);
        let d = spmm::<f64, PlusTimes>(&a, &b.to_dense(Layout::ColMajor).unwrap()).unwrap();
        assert_eq!(d, c.to_dense(Layout::ColMajor).unwrap());
    }

    #[test]
    fn cancelling_products_keep_their_entry() {
        let a = Csr::try_new(1, 2, vec![0, 2], vec![0, 1], vec![1.0, -1.0]).unwrap();
        let b = Csr::try_new(2, 1, vec![0, 1, 2], vec![0, 0], vec![2.0, 2.0]).unwrap();
        let c = spgemm::<f64, PlusTimes>(&a, &b).unwrap();
        assert_eq!(c.nnz(), 1);
        assert_eq!(c.values(), &[0.0]);
    }

    #[test]
    fn windows_multiply_like_their_copies() {
        let a = crate::generate::uniform::<f64>(50, 40, 6, 1);
        let b = crate::generate::uniform::<f64>(60, 70, 6, 2);
        // A's columns 5..35 meet B's rows 20..50.
        let wa = CsrWindow::new(&a, 10..45, 5..35).unwrap();
        let wb = CsrWindow::new(&b, 20..50, 13..61).unwrap();
        let c = spgemm_windows::<f64, PlusTimes>(&wa, &wb).unwrap();
        let want = spgemm::<f64, PlusTimes>(&wa.to_csr().unwrap(), &wb.to_csr().unwrap()).unwrap();
        assert_eq!(c, want);
        assert_eq!(c.shape(), (35, 48));
        let wrong = CsrWindow::new(&b, 0..31, 0..70).unwrap();
        assert!(spgemm_windows::<f64, PlusTimes>(&wa, &wrong).is_err());
    }

    #[test]
    fn semirings_and_masks_by_hand() {
        use crate::semiring::{AnySecondI, MinPlus, PlusPair};
        // A = [[1, 2], [0, 3]] (row 1 has A(1,0) missing), B = [[4, 0], [5, -6]].
        let a = Csr::try_new(2, 2, vec![0, 2, 3], vec![0, 1, 1], vec![1.0, 2.0, 3.0]).unwrap();
        let b = Csr::try_new(2, 2, vec![0, 1, 3], vec![0, 0, 1], vec![4.0, 5.0, -6.0]).unwrap();
        let dense = |c: &Csr<f64>| c.to_dense(Layout::RowMajor).unwrap().data().to_vec();
        let c = spgemm::<f64, MinPlus>(&a, &b).unwrap();
        assert_eq!(dense(&c), vec![5.0, -4.0, 8.0, -3.0]);
        let c = spgemm::<f64, PlusPair>(&a, &b).unwrap();
        assert_eq!(dense(&c), vec![2.0, 1.0, 1.0, 1.0]);
        let c = spgemm::<f64, AnySecondI>(&a, &b).unwrap();
        assert_eq!(
            dense(&c),
            vec![1.0, 1.0, 1.0, 1.0],
            "the last k of each entry"
        );
        // A valued mask holding an explicit zero at (0, 1) admits only (0, 0) and (1, 1).
        let m = Csr::try_new(2, 2, vec![0, 2, 3], vec![0, 1, 1], vec![1.0, 0.0, 1.0]).unwrap();
        let c = spgemm_masked::<f64, PlusTimes>(&a, &b, Some(&Mask::valued(&m))).unwrap();
        assert_eq!(
            (c.col_indices(), c.values()),
            (&[0, 1][..], &[14.0, -18.0][..])
        );
        let c = spgemm_masked::<f64, PlusTimes>(&a, &b, Some(&Mask::structural(&m))).unwrap();
        assert_eq!(c.nnz(), 3);
        let complement = Mask::valued(&m).complemented();
        let c = spgemm_masked::<f64, PlusTimes>(&a, &b, Some(&complement)).unwrap();
        assert_eq!(
            (c.row_offsets(), c.values()),
            (&[0, 1, 2][..], &[-12.0, 15.0][..])
        );
    }

    #[test]
    fn shape_mismatch_is_an_error() {
        let a = Csr::<f32>::zeros(2, 3).unwrap();
        let e = spgemm::<f32, PlusTimes>(&a, &a).unwrap_err();
        assert!(e.to_string().contains("2×3 and 2×3"));
        assert!(spmv::<f32, PlusTimes>(&a, &[1.0]).is_err());
    }
}
