//! Validation once, above the backends.
//!
//! Every public method of [`Backend`](super::Backend) that takes operands checks them here
//! before it hands them to the backend: the device can run now, shapes chain, handles live in
//! the backend's memory, the backend runs the operation (format, scalar type, SpGEMM options),
//! a result the host receives fits its buffer limit, chunks lie inside the product, a plan was
//! made for these operands. The backend's method then receives a [`Validated`]: it converts
//! its operands and computes, and every backend refuses the same inputs with the same errors.

use std::mem::MaybeUninit;
use std::ops::Range;

use super::{
    check, CsrOperand, DenseOperand, Device, MemorySpace, Operation, ProductChunk, ResidentCsr,
    ResidentDense, SparseOperand, SpgemmOptions, SpgemmPlan, VectorOperand, VectorProductKind,
    VectorProductOptions,
};
use crate::error::{Error, Result};
use crate::format::{Bsr, Csr, Dia, SparseFormat, SplicedCsr};
use crate::scalar::Scalar;

/// Evidence that the operands of the call it comes with were checked by the public method the
/// caller used. Only hetsparse-core makes one, so a backend's required methods
/// ([`Backend::spgemm_checked`](super::Backend::spgemm_checked), the [`ResidentOps`](super::ResidentOps)
/// and [`ChunkPipeline`](super::ChunkPipeline) methods) cannot be reached around the checks.
#[derive(Clone, Copy, Debug)]
pub struct Validated(());

/// [`Error::WrongDevice`] unless a handle of `space` belongs to `device`'s memory.
fn in_memory_of(device: &(impl Device + ?Sized), space: &MemorySpace, what: &str) -> Result<()> {
    check::same_space(device, space, what)
}

fn csr_operand<T: Scalar>(device: &(impl Device + ?Sized), m: &CsrOperand<'_, T>) -> Result<()> {
    match m {
        CsrOperand::Host(_) => Ok(()),
        CsrOperand::Resident(r) => in_memory_of(device, r.space(), "a resident matrix"),
    }
}

/// `C = A · B`: the device is available, shapes chain, resident operands are in the device's
/// memory, the device runs SpGEMM over `T` with `options`, and a mask has C's shape.
pub(crate) fn spgemm<T: Scalar>(
    device: &(impl Device + ?Sized),
    a: &CsrOperand<'_, T>,
    b: &CsrOperand<'_, T>,
    options: &SpgemmOptions,
) -> Result<Validated> {
    device.available()?;
    check::shapes("SpGEMM", a.shape(), b.shape())?;
    csr_operand(device, a)?;
    csr_operand(device, b)?;
    check::spgemm_supported::<T>(device, options)?;
    options.check_mask_shape((a.shape().0, b.shape().1))?;
    Ok(Validated(()))
}

/// `C = A · B` with a spliced B: as [`spgemm`], for a host A and B.
pub(crate) fn spgemm_spliced<T: Scalar>(
    device: &(impl Device + ?Sized),
    a: &Csr<T>,
    b: &SplicedCsr<'_, T>,
    options: &SpgemmOptions,
) -> Result<Validated> {
    device.available()?;
    check::shapes("SpGEMM", a.shape(), (b.nrows(), b.ncols()))?;
    check::spgemm_supported::<T>(device, options)?;
    options.check_mask_shape((a.nrows(), b.ncols()))?;
    Ok(Validated(()))
}

/// A sparse-vector product `kind` of A and `u`: the device is available, `u`'s length chains
/// with A, a resident A is in the device's memory, the device claims the product over `T`
/// with the semiring and mask of `options` (backends claim only semirings defined over `T`),
/// and a mask has the result's length.
pub(crate) fn vector_product<T: Scalar>(
    device: &(impl Device + ?Sized),
    kind: VectorProductKind,
    a: &CsrOperand<'_, T>,
    u: &crate::SparseVector<T>,
    options: &VectorProductOptions,
) -> Result<Validated> {
    device.available()?;
    let (u_len, w_len) = kind.lengths(a.shape());
    if u.size() != u_len {
        let (left, right) = match kind {
            VectorProductKind::Mxv => (a.shape(), (u.size(), 1)),
            VectorProductKind::Vxm => ((1, u.size()), a.shape()),
        };
        return Err(Error::ShapeMismatch {
            op: kind.name(),
            left_rows: left.0 as u64,
            left_cols: left.1 as u64,
            right_rows: right.0 as u64,
            right_cols: right.1 as u64,
        });
    }
    let unsupported = |detail: Option<String>| Error::Unsupported {
        backend: device.info().backend,
        op: Operation::VectorProduct(kind),
        scalar: T::TYPE,
        detail,
    };
    let Some(features) = device.capabilities().vector_product_features(T::TYPE) else {
        return Err(unsupported(None));
    };
    // The accumulator is applied above the backends (write_back_vector): not a claim.
    let mut asked = options.as_spgemm();
    asked.accumulator = None;
    if let Some(what) = asked.unsupported_by(features) {
        return Err(unsupported(Some(what)));
    }
    options.check_mask_length(w_len)?;
    csr_operand(device, a)?;
    Ok(Validated(()))
}

/// A sparse operand's format as the kernels see it (a resident one is CSR), and whether the
/// host would hold a CSR copy of it (every format but CSR and ELLPACK-R, which the row kernels
/// read as they are): its row offsets count against the host's buffer limit with the result.
fn sparse_format<T: Scalar>(
    device: &(impl Device + ?Sized),
    a: &SparseOperand<'_, T>,
) -> Result<(SparseFormat, u64)> {
    match a {
        SparseOperand::Host(m) => Ok((m.format(), check::copy_offsets(m.format(), m.shape().0))),
        SparseOperand::Resident(r) => {
            in_memory_of(device, r.space(), "a resident matrix")?;
            Ok((SparseFormat::Csr, 0))
        }
    }
}

/// Whether a result lands in host memory: always when it is returned, and when it stays
/// resident on a device that computes in host memory.
fn lands_on_host(device: &(impl Device + ?Sized), resident: bool) -> bool {
    !resident || device.memory_space() == MemorySpace::Host
}

/// `C = A · B` for a sparse A and a dense B; `resident` when C stays in the device's memory.
pub(crate) fn spmm<T: Scalar>(
    device: &(impl Device + ?Sized),
    a: &SparseOperand<'_, T>,
    b: &DenseOperand<'_, T>,
    resident: bool,
) -> Result<Validated> {
    device.available()?;
    check::shapes("SpMM", a.shape(), b.shape())?;
    let (format, copy) = sparse_format(device, a)?;
    if let DenseOperand::Resident(d) = b {
        in_memory_of(device, d.space(), "a resident dense matrix")?;
    }
    check::supported::<T>(device, Operation::Spmm(format))?;
    if lands_on_host(device, resident) {
        let values = (a.shape().0 as u64).saturating_mul(b.shape().1 as u64);
        check::host_result::<T>(values, copy, "SpMM")?;
    }
    Ok(Validated(()))
}

/// `y = A · x`; `resident` when y stays in the device's memory.
pub(crate) fn spmv<T: Scalar>(
    device: &(impl Device + ?Sized),
    a: &SparseOperand<'_, T>,
    x: &VectorOperand<'_, T>,
    resident: bool,
) -> Result<Validated> {
    device.available()?;
    check::shapes("SpMV", a.shape(), (x.len(), 1))?;
    let (format, copy) = sparse_format(device, a)?;
    if let VectorOperand::Resident(d) = x {
        in_memory_of(device, d.space(), "a resident vector")?;
        if d.ncols() != 1 {
            return Err(Error::InvalidArgument(format!(
                "SpMV: the resident vector is a {}×{} matrix, not one column",
                d.nrows(),
                d.ncols()
            )));
        }
    }
    check::supported::<T>(device, Operation::Spmv(format))?;
    if lands_on_host(device, resident) {
        check::host_result::<T>(a.shape().0 as u64, copy, "SpMV")?;
    }
    Ok(Validated(()))
}

/// A handle to download: in the device's memory.
pub(crate) fn resident_csr<T: Scalar>(
    device: &(impl Device + ?Sized),
    m: &ResidentCsr<T>,
) -> Result<Validated> {
    in_memory_of(device, m.space(), "a resident matrix")?;
    Ok(Validated(()))
}

/// A dense handle to download: in the device's memory.
pub(crate) fn resident_dense<T: Scalar>(
    device: &(impl Device + ?Sized),
    d: &ResidentDense<T>,
) -> Result<Validated> {
    in_memory_of(device, d.space(), "a resident dense matrix")?;
    Ok(Validated(()))
}

/// New values for a resident pattern: the pattern is in the device's memory and there is one
/// value per stored entry.
pub(crate) fn new_values<T: Scalar>(
    device: &(impl Device + ?Sized),
    pattern: &ResidentCsr<T>,
    values: &[T],
) -> Result<Validated> {
    in_memory_of(device, pattern.space(), "a resident matrix")?;
    check::value_count(pattern.nnz(), values.len())?;
    Ok(Validated(()))
}

/// A plan's numeric phase: operands in the device's memory, and the plan made by this memory
/// for operands of these shapes, entry counts and patterns.
pub(crate) fn execute<T: Scalar>(
    device: &(impl Device + ?Sized),
    plan: &SpgemmPlan<T>,
    a: &CsrOperand<'_, T>,
    b: &CsrOperand<'_, T>,
) -> Result<Validated> {
    device.available()?;
    csr_operand(device, a)?;
    csr_operand(device, b)?;
    plan.check_operands(&device.memory_space(), a, b)?;
    Ok(Validated(()))
}

/// Chunks of `A · B`: the product as [`spgemm`] checks it, and every chunk inside it.
pub(crate) fn chunks<T: Scalar>(
    device: &(impl Device + ?Sized),
    a: &CsrOperand<'_, T>,
    b: &CsrOperand<'_, T>,
    chunks: &[ProductChunk],
    options: &SpgemmOptions,
) -> Result<Validated> {
    let validated = spgemm(device, a, b, options)?;
    check::chunks(a.shape(), b.shape(), chunks)?;
    Ok(validated)
}

/// Band matrices: the device available and running DIA×DIA over `T`, shapes that chain.
pub(crate) fn dia<T: Scalar>(
    device: &(impl Device + ?Sized),
    a: &Dia<T>,
    b: &Dia<T>,
) -> Result<Validated> {
    device.available()?;
    check::shapes("DIA×DIA SpGEMM", a.shape(), b.shape())?;
    check::supported::<T>(device, Operation::DiaSpgemm)?;
    Ok(Validated(()))
}

/// Rows of a band product: shapes that chain, rows inside A, increasing offsets, one output
/// slice of the rows' length per offset ([`check::dia_rows`]).
pub(crate) fn dia_rows<T: Scalar>(
    a: &Dia<T>,
    b: &Dia<T>,
    rows: &Range<usize>,
    offsets: &[i64],
    c: &[&mut [MaybeUninit<T>]],
) -> Result<Validated> {
    check::dia_rows(a, b, rows, offsets, c)?;
    Ok(Validated(()))
}

/// Block matrices: the device available and running BSR×BSR over `T`, shapes and inner block
/// sizes that chain.
pub(crate) fn bsr<T: Scalar>(
    device: &(impl Device + ?Sized),
    a: &Bsr<T>,
    b: &Bsr<T>,
) -> Result<Validated> {
    device.available()?;
    check::bsr_spgemm(a, b)?;
    check::supported::<T>(device, Operation::BsrSpgemm)?;
    Ok(Validated(()))
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::backend::{
        Backend, Capabilities, DeviceInfo, Mask, MaskKind, Residency, RunControl, SemiringKind,
        SpgemmAlgorithm, SpgemmFeatures, SpmmOptions, SpmvOptions,
    };
    use crate::format::{Csr, Dense, Layout};
    use crate::ReferenceBackend;

    /// The reference kernels, counting how often a `*_checked` method is reached; `available`
    /// says no when `off` is set.
    struct Counting {
        reached: AtomicUsize,
        off: bool,
        capabilities: Capabilities,
    }

    impl Default for Counting {
        fn default() -> Self {
            Counting {
                reached: AtomicUsize::new(0),
                off: false,
                capabilities: ReferenceBackend.capabilities().clone(),
            }
        }
    }

    impl Device for Counting {
        fn info(&self) -> DeviceInfo {
            ReferenceBackend.info()
        }
        fn capabilities(&self) -> &Capabilities {
            &self.capabilities
        }
        fn memory_space(&self) -> MemorySpace {
            MemorySpace::Host
        }
        fn available(&self) -> Result<()> {
            if self.off {
                return Err(Error::NoDevice {
                    backend: crate::BackendKind::Reference,
                    reason: "switched off".into(),
                });
            }
            Ok(())
        }
    }

    impl Backend<f64> for Counting {
        fn spgemm_checked(
            &self,
            a: CsrOperand<'_, f64>,
            b: CsrOperand<'_, f64>,
            options: &SpgemmOptions,
            run: &RunControl,
            _checked: Validated,
        ) -> Result<Csr<f64>> {
            self.reached.fetch_add(1, Ordering::Relaxed);
            ReferenceBackend.spgemm_with(a, b, options, run)
        }
        fn spmm_checked(
            &self,
            a: SparseOperand<'_, f64>,
            b: DenseOperand<'_, f64>,
            options: &SpmmOptions,
            run: &RunControl,
            _checked: Validated,
        ) -> Result<Dense<f64>> {
            self.reached.fetch_add(1, Ordering::Relaxed);
            ReferenceBackend.spmm_with(a, b, options, run)
        }
        fn spmv_checked(
            &self,
            a: SparseOperand<'_, f64>,
            x: VectorOperand<'_, f64>,
            options: &SpmvOptions,
            run: &RunControl,
            _checked: Validated,
        ) -> Result<Vec<f64>> {
            self.reached.fetch_add(1, Ordering::Relaxed);
            ReferenceBackend.spmv_with(a, x, options, run)
        }
        fn residency(&self) -> Residency<'_, f64> {
            Residency::Host
        }
    }

    fn other_memory() -> MemorySpace {
        MemorySpace::Device {
            backend: crate::BackendKind::Other("elsewhere"),
            id: 3,
        }
    }

    #[test]
    fn refused_calls_never_reach_the_backend() {
        let backend = Counting::default();
        let run = RunControl::unwatched();
        let a = Csr::<f64>::identity(3).unwrap();
        let wide = Csr::<f64>::zeros(4, 5).unwrap();
        let plain = SpgemmOptions::new();
        let shape = backend.spgemm_with((&a).into(), (&wide).into(), &plain, &run);
        assert!(
            matches!(shape, Err(Error::ShapeMismatch { .. })),
            "{shape:?}"
        );
        let foreign = ResidentCsr::from_host(other_memory(), a.clone());
        let wrong = backend.spgemm_with((&foreign).into(), (&a).into(), &plain, &run);
        assert!(matches!(wrong, Err(Error::WrongDevice { .. })), "{wrong:?}");
        let esc = SpgemmOptions::from(SpgemmAlgorithm::Esc);
        let algorithm = backend.spgemm_with((&a).into(), (&a).into(), &esc, &run);
        assert!(
            matches!(algorithm, Err(Error::Unsupported { .. })),
            "{algorithm:?}"
        );
        let min_plus = SpgemmOptions::new().with_semiring(SemiringKind::MinPlus);
        let semiring = backend.spgemm_with((&a).into(), (&a).into(), &min_plus, &run);
        assert!(
            matches!(semiring, Err(Error::Unsupported { .. })),
            "{semiring:?}"
        );
        let b = Dense::<f64>::zeros(4, 2, Layout::RowMajor).unwrap();
        let spmm = backend.spmm_with((&a).into(), (&b).into(), &SpmmOptions::new(), &run);
        assert!(matches!(spmm, Err(Error::ShapeMismatch { .. })), "{spmm:?}");
        let two_columns = ResidentDense::from_host(
            MemorySpace::Host,
            Dense::zeros(3, 2, Layout::ColMajor).unwrap(),
        );
        let spmv = backend.spmv_with(
            (&a).into(),
            (&two_columns).into(),
            &SpmvOptions::new(),
            &run,
        );
        assert!(matches!(spmv, Err(Error::InvalidArgument(_))), "{spmv:?}");
        let download = backend.download(&foreign);
        assert!(
            matches!(download, Err(Error::WrongDevice { .. })),
            "{download:?}"
        );
        let resident = backend.upload(&a).unwrap();
        let values = backend.upload_values(&resident, &[1.0; 2]);
        assert!(
            matches!(values, Err(Error::InvalidArgument(_))),
            "{values:?}"
        );
        let chunk = [crate::ProductChunk {
            rows: 0..4,
            cols: 0..3,
        }];
        let chunks =
            backend.spgemm_chunks((&a).into(), (&a).into(), &chunk, &plain, &run, &mut |_| {
                Ok(())
            });
        assert!(
            matches!(chunks, Err(Error::InvalidArgument(_))),
            "{chunks:?}"
        );
        assert_eq!(backend.reached.load(Ordering::Relaxed), 0);
        // What passes is computed once, by the backend.
        let c = backend
            .spgemm_with((&a).into(), (&a).into(), &plain, &run)
            .unwrap();
        assert_eq!(c, a);
        assert_eq!(backend.reached.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn an_unavailable_device_is_no_device_before_anything_else() {
        let backend = Counting {
            off: true,
            ..Counting::default()
        };
        let run = RunControl::unwatched();
        // Shapes that do not chain, too: the device is asked first.
        let (a, b) = (
            Csr::<f64>::zeros(2, 3).unwrap(),
            Csr::<f64>::zeros(2, 3).unwrap(),
        );
        let r = backend.spgemm_with((&a).into(), (&b).into(), &SpgemmOptions::new(), &run);
        assert!(matches!(r, Err(Error::NoDevice { .. })), "{r:?}");
        let r = backend.spmv_with(
            (&a).into(),
            (&[1.0; 3][..]).into(),
            &SpmvOptions::new(),
            &run,
        );
        assert!(matches!(r, Err(Error::NoDevice { .. })), "{r:?}");
        assert_eq!(backend.reached.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_mask_must_have_the_shape_of_c() {
        let mut features = SpgemmFeatures::plain();
        features.masks.insert(MaskKind::Structural);
        let claims_masks = Counting {
            capabilities: ReferenceBackend
                .capabilities()
                .clone()
                .with_spgemm_features(&[crate::ScalarType::F64], features),
            ..Counting::default()
        };
        let a = Csr::<f64>::identity(3).unwrap();
        let mask = Mask::structural(&Csr::<f64>::identity(4).unwrap());
        let options = SpgemmOptions::new().with_mask(mask);
        let r = claims_masks.spgemm_with((&a).into(), (&a).into(), &options, &RunControl::new());
        assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
        // Without the claim, the mask itself is refused.
        let r =
            Counting::default().spgemm_with((&a).into(), (&a).into(), &options, &RunControl::new());
        assert!(matches!(r, Err(Error::Unsupported { .. })), "{r:?}");
        assert_eq!(claims_masks.reached.load(Ordering::Relaxed), 0);
    }
}
