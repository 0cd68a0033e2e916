//! Where a backend keeps resident matrices, and the operations that need to know: uploads and
//! downloads, products left resident, plans and what a product needs in memory.
//!
//! Every backend answers [`Backend::residency`](super::Backend::residency) with one of two
//! choices, so that none inherits host-memory behaviour by omission:
//!
//! - [`Residency::Host`]: resident handles hold host matrices, and every operation here is
//!   built from the backend's host operations ([`in_host`]). Right for a backend that computes
//!   in host memory, and nothing more to write.
//! - [`Residency::Own`]: the backend implements [`ResidentOps`], each method required. A
//!   device backend stores matrices in its memory; a host backend may also choose it to plan
//!   products its own way (using [`in_host`] for the rest).
//!
//! Callers never call [`ResidentOps`] themselves: [`Backend::upload`](super::Backend::upload),
//! [`Backend::download`](super::Backend::download), [`Backend::spgemm_resident`](super::Backend::spgemm_resident),
//! [`Backend::plan_spgemm`](super::Backend::plan_spgemm) and the others dispatch on the answer.

use super::{
    check, host_operands, memory, plan, Backend, CsrOperand, DenseOperand, MemoryRequirement,
    PatternId, ResidentCsr, ResidentDense, RunControl, SparseOperand, SpgemmOptions, SpgemmPlan,
    SpmmOptions, SpmvOptions, Validated, VectorOperand,
};
use crate::error::Result;
use crate::format::{Csr, Dense, Layout};
use crate::scalar::Scalar;

/// How a backend keeps resident matrices ([`Backend::residency`](super::Backend::residency)).
pub enum Residency<'a, T> {
    /// In host memory, through the backend's host operations ([`in_host`]). The backend's
    /// [`Device::memory_space`](super::Device::memory_space) must be
    /// [`MemorySpace::Host`](super::MemorySpace::Host).
    Host,
    /// Through the backend's own [`ResidentOps`].
    Own(&'a dyn ResidentOps<T>),
}

/// What a backend that keeps resident matrices its own way implements. Each method is
/// required: none has a host-memory default that a device backend could inherit by mistake.
///
/// Operands arrive as the public methods received them, [`Validated`] there: handles are of
/// this backend's memory, shapes chain, the operation is in its capabilities, a plan was made
/// for the operands it is executed with.
pub trait ResidentOps<T: Scalar>: Send + Sync {
    /// Copies `m` into the backend's memory ([`Backend::upload`](super::Backend::upload)).
    fn store(&self, m: &Csr<T>) -> Result<ResidentCsr<T>>;

    /// Takes `m` into the backend's memory ([`Backend::upload_owned`](super::Backend::upload_owned)).
    /// A backend in host memory keeps it where it is.
    fn store_owned(&self, m: Csr<T>) -> Result<ResidentCsr<T>>;

    /// `pattern`'s structure with new values, keeping its identity
    /// ([`Backend::upload_values`](super::Backend::upload_values)).
    fn store_values(
        &self,
        pattern: &ResidentCsr<T>,
        values: &[T],
        checked: Validated,
    ) -> Result<ResidentCsr<T>>;

    /// Copies a resident matrix to the host ([`Backend::download`](super::Backend::download)).
    fn load(&self, m: &ResidentCsr<T>, checked: Validated) -> Result<Csr<T>>;

    /// Copies a resident matrix's values alone to the host
    /// ([`Backend::download_values`](super::Backend::download_values)).
    fn load_values(&self, m: &ResidentCsr<T>, checked: Validated) -> Result<Vec<T>>;

    /// Copies a dense matrix into the backend's memory
    /// ([`Backend::upload_dense`](super::Backend::upload_dense)).
    fn store_dense(&self, d: &Dense<T>) -> Result<ResidentDense<T>>;

    /// Copies a resident dense matrix to the host
    /// ([`Backend::download_dense`](super::Backend::download_dense)).
    fn load_dense(&self, d: &ResidentDense<T>, checked: Validated) -> Result<Dense<T>>;

    /// `C = A · B` left resident, with pattern identity [`PatternId::of_product`] of the
    /// operands' ([`Backend::spgemm_resident`](super::Backend::spgemm_resident)).
    fn spgemm_stored(
        &self,
        a: CsrOperand<'_, T>,
        b: CsrOperand<'_, T>,
        options: &SpgemmOptions,
        run: &RunControl,
        checked: Validated,
    ) -> Result<ResidentCsr<T>>;

    /// SpMM left resident ([`Backend::spmm_resident`](super::Backend::spmm_resident)).
    fn spmm_stored(
        &self,
        a: SparseOperand<'_, T>,
        b: DenseOperand<'_, T>,
        options: &SpmmOptions,
        run: &RunControl,
        checked: Validated,
    ) -> Result<ResidentDense<T>>;

    /// SpMV left resident, one column ([`Backend::spmv_resident`](super::Backend::spmv_resident)).
    fn spmv_stored(
        &self,
        a: SparseOperand<'_, T>,
        x: VectorOperand<'_, T>,
        options: &SpmvOptions,
        run: &RunControl,
        checked: Validated,
    ) -> Result<ResidentDense<T>>;

    /// The symbolic part of `A · B` ([`Backend::plan_spgemm`](super::Backend::plan_spgemm)).
    fn plan(
        &self,
        a: CsrOperand<'_, T>,
        b: CsrOperand<'_, T>,
        options: &SpgemmOptions,
        checked: Validated,
    ) -> Result<SpgemmPlan<T>>;

    /// The numeric part of a plan this backend made
    /// ([`Backend::execute_spgemm`](super::Backend::execute_spgemm)).
    fn execute(
        &self,
        plan: &SpgemmPlan<T>,
        a: CsrOperand<'_, T>,
        b: CsrOperand<'_, T>,
        run: &RunControl,
        checked: Validated,
    ) -> Result<ResidentCsr<T>>;

    /// What `A · B` needs in memory before it runs
    /// ([`Backend::spgemm_requirement`](super::Backend::spgemm_requirement)).
    fn requirement(
        &self,
        a: CsrOperand<'_, T>,
        b: CsrOperand<'_, T>,
        options: &SpgemmOptions,
        checked: Validated,
    ) -> Result<MemoryRequirement>;
}

/// Residency in host memory, built from a backend's host operations: what
/// [`Residency::Host`] does, and the parts a host backend with [`Residency::Own`] keeps.
///
/// Each function refuses (with [`Error::Internal`](crate::Error::Internal)) a backend whose
/// memory is not the host's: such a backend has its own [`ResidentOps`].
pub mod in_host {
    use super::*;

    /// [`ResidentOps::store_owned`]: the matrix becomes the handle, nothing is copied.
    pub fn store_owned<T: Scalar, B: Backend<T> + ?Sized>(
        backend: &B,
        m: Csr<T>,
    ) -> Result<ResidentCsr<T>> {
        let space = check::host_space(backend, "its residency")?;
        Ok(ResidentCsr::from_host(space, m))
    }

    /// [`ResidentOps::store_values`]: a copy of the pattern's host matrix with new values.
    pub fn store_values<T: Scalar, B: Backend<T> + ?Sized>(
        backend: &B,
        pattern: &ResidentCsr<T>,
        values: &[T],
        _checked: Validated,
    ) -> Result<ResidentCsr<T>> {
        let host = host_operands::csr_handle(backend, pattern, "upload_values")?;
        let m = host.with_values(values.to_vec())?;
        // SAFETY: `m` has the structure of `pattern`'s host matrix, whose identity it keeps.
        Ok(unsafe {
            ResidentCsr::from_host_with_pattern(pattern.space().clone(), m, pattern.pattern())
        })
    }

    /// [`ResidentOps::load`]: a copy of the handle's host matrix.
    pub fn load<T: Scalar, B: Backend<T> + ?Sized>(
        backend: &B,
        m: &ResidentCsr<T>,
        _checked: Validated,
    ) -> Result<Csr<T>> {
        Ok(host_operands::csr_handle(backend, m, "download")?.clone())
    }

    /// [`ResidentOps::load_values`]: a copy of the handle's host matrix's values.
    pub fn load_values<T: Scalar, B: Backend<T> + ?Sized>(
        backend: &B,
        m: &ResidentCsr<T>,
        _checked: Validated,
    ) -> Result<Vec<T>> {
        let m = host_operands::csr_handle(backend, m, "download_values")?;
        let mut values = crate::host::try_with_capacity(m.values().len(), "downloaded values")?;
        values.extend_from_slice(m.values());
        Ok(values)
    }

    /// [`ResidentOps::store_dense`]: a copy in host storage.
    pub fn store_dense<T: Scalar, B: Backend<T> + ?Sized>(
        backend: &B,
        d: &Dense<T>,
    ) -> Result<ResidentDense<T>> {
        let space = check::host_space(backend, "its residency")?;
        Ok(ResidentDense::from_host(space, d.clone()))
    }

    /// [`ResidentOps::load_dense`]: a copy of the handle's host matrix.
    pub fn load_dense<T: Scalar, B: Backend<T> + ?Sized>(
        backend: &B,
        d: &ResidentDense<T>,
        _checked: Validated,
    ) -> Result<Dense<T>> {
        Ok(host_operands::dense_handle(backend, d, "download_dense")?.clone())
    }

    /// [`ResidentOps::spgemm_stored`]: the host product, kept as the handle.
    pub fn spgemm_stored<T: Scalar, B: Backend<T> + ?Sized>(
        backend: &B,
        a: CsrOperand<'_, T>,
        b: CsrOperand<'_, T>,
        options: &SpgemmOptions,
        run: &RunControl,
        checked: Validated,
    ) -> Result<ResidentCsr<T>> {
        let space = check::host_space(backend, "its residency")?;
        let c = backend.spgemm_checked(a, b, options, run, checked)?;
        // A masked product's pattern is not the product's: it is taken from C itself.
        let pattern = match options.mask {
            Some(_) => PatternId::of(&c),
            None => PatternId::of_product(a.pattern(), b.pattern()),
        };
        // SAFETY: `c` is the product of operands whose identities these are (a handle's
        // identity is its structure's: the constructors make it so).
        Ok(unsafe { ResidentCsr::from_host_with_pattern(space, c, pattern) })
    }

    /// [`ResidentOps::spmm_stored`]: the host product, kept as the handle.
    pub fn spmm_stored<T: Scalar, B: Backend<T> + ?Sized>(
        backend: &B,
        a: SparseOperand<'_, T>,
        b: DenseOperand<'_, T>,
        options: &SpmmOptions,
        run: &RunControl,
        checked: Validated,
    ) -> Result<ResidentDense<T>> {
        let space = check::host_space(backend, "its residency")?;
        Ok(ResidentDense::from_host(
            space,
            backend.spmm_checked(a, b, options, run, checked)?,
        ))
    }

    /// [`ResidentOps::spmv_stored`]: the host product as one column, kept as the handle.
    pub fn spmv_stored<T: Scalar, B: Backend<T> + ?Sized>(
        backend: &B,
        a: SparseOperand<'_, T>,
        x: VectorOperand<'_, T>,
        options: &SpmvOptions,
        run: &RunControl,
        checked: Validated,
    ) -> Result<ResidentDense<T>> {
        let space = check::host_space(backend, "its residency")?;
        let y = backend.spmv_checked(a, x, options, run, checked)?;
        let column = Dense::try_new(y.len(), 1, Layout::ColMajor, y)?;
        Ok(ResidentDense::from_host(space, column))
    }

    /// [`ResidentOps::plan`]: one host product gives the structure every execution fills
    /// ([`SpgemmPlan::on_host`]).
    pub fn plan<T: Scalar, B: Backend<T> + ?Sized>(
        backend: &B,
        a: CsrOperand<'_, T>,
        b: CsrOperand<'_, T>,
        options: &SpgemmOptions,
        checked: Validated,
    ) -> Result<SpgemmPlan<T>> {
        let space = check::host_space(backend, "its residency")?;
        if options.semiring != crate::backend::SemiringKind::PlusTimes || options.mask.is_some() {
            // Executions recompute plus-times over the unmasked product's structure.
            return Err(crate::Error::Unsupported {
                backend: backend.info().backend,
                op: crate::backend::Operation::Spgemm(options.algorithm),
                scalar: T::TYPE,
                detail: Some("a plan of a product with a semiring or a mask".into()),
            });
        }
        let c = backend.spgemm_checked(a, b, options, &RunControl::unwatched(), checked)?;
        let (ha, hb) = (
            host_operands::csr(backend, a)?,
            host_operands::csr(backend, b)?,
        );
        let products = crate::analysis::total_products(ha, hb)?;
        let structure_bytes = (c.nrows() as u64 + 1) * 8 + c.nnz() * 4;
        Ok(SpgemmPlan::on_host(
            space,
            options.clone(),
            &a,
            &b,
            &c,
            products,
            structure_bytes,
        ))
    }

    /// [`ResidentOps::execute`]: the numeric phase on the host ([`plan::numeric`]).
    pub fn execute<T: Scalar, B: Backend<T> + ?Sized>(
        backend: &B,
        plan: &SpgemmPlan<T>,
        a: CsrOperand<'_, T>,
        b: CsrOperand<'_, T>,
        run: &RunControl,
        checked: Validated,
    ) -> Result<ResidentCsr<T>> {
        check::host_space(backend, "its residency")?;
        plan::execute_on_host(backend, plan, a, b, run, checked)
    }

    /// [`ResidentOps::requirement`]: C bounded by the intermediate products.
    pub fn requirement<T: Scalar, B: Backend<T> + ?Sized>(
        backend: &B,
        a: CsrOperand<'_, T>,
        b: CsrOperand<'_, T>,
        _options: &SpgemmOptions,
        _checked: Validated,
    ) -> Result<MemoryRequirement> {
        let (ha, hb) = (
            host_operands::csr(backend, a)?,
            host_operands::csr(backend, b)?,
        );
        let bound = check::output_bound(ha, hb)?;
        Ok(MemoryRequirement {
            output_bytes: memory::csr_bytes(ha.nrows(), bound, std::mem::size_of::<T>()),
            ..MemoryRequirement::default()
        })
    }
}
