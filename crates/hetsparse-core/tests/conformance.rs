//! The serial reference backend passes the conformance suite it anchors, and so does the
//! minimal backend of `examples/minimal_backend.rs` (the required methods only), which
//! docs/backend-guide.md walks through.

hetsparse_core::conformance_suite! {
    backend: Ok::<_, hetsparse_core::Error>(hetsparse_core::ReferenceBackend),
    scalars: [f32, f64, c32, c64, f16, bf16, bool, i32, i64, u32, u64],
}

#[path = "../examples/minimal_backend.rs"]
mod minimal_example;

/// The example backend, whose every other method is the trait's.
mod minimal {
    use super::minimal_example::MinimalBackend;

    hetsparse_core::conformance_suite! {
        backend: MinimalBackend::new(),
        scalars: [f32, f64, c32, c64, f16, bf16, bool, i32, i64, u32, u64],
    }
}

/// A backend with memory of its own (handles over a private storage type, in a device memory
/// space) and no chunk pipeline: its residency is [`ResidentOps`], and the plain chunk
/// protocol, plans and requirement queries must work on its handles, which hold no host
/// matrix.
mod own_memory {
    use hetsparse_core::backend::check;
    use hetsparse_core::{
        Backend, BackendKind, Capabilities, Csr, CsrOperand, Dense, DenseOperand, Device,
        DeviceInfo, Error, MemoryRequirement, MemorySpace, PatternId, ReferenceBackend, Residency,
        ResidentCsr, ResidentDense, ResidentOps, Result, RunControl, Scalar, SparseOperand,
        SparseRef, SparseVector, SpgemmOptions, SpgemmPlan, SpmmOptions, SpmvOptions, Validated,
        VectorOperand, VectorProductKind, VectorProductOptions,
    };

    const KIND: BackendKind = BackendKind::Other("own-memory");

    /// The reference kernels, with handles they cannot read.
    pub struct OwnMemory;

    /// What a handle holds: not a host matrix the plain protocol could borrow.
    struct Stored<M>(M);

    /// A plan's state: the structure, checked against the operands it is run with.
    struct Planned<T>(Csr<T>);

    impl OwnMemory {
        /// A handle's matrix: in this memory, as the public methods validated.
        fn csr<'a, T: Scalar>(&self, m: &'a ResidentCsr<T>) -> Result<&'a Csr<T>> {
            m.storage::<Stored<Csr<T>>>()
                .map(|s| &s.0)
                .ok_or_else(|| internal("a handle of this memory over another storage"))
        }
        fn dense<'a, T: Scalar>(&self, d: &'a ResidentDense<T>) -> Result<&'a Dense<T>> {
            d.storage::<Stored<Dense<T>>>()
                .map(|s| &s.0)
                .ok_or_else(|| internal("a dense handle of this memory over another storage"))
        }
        /// A host operand itself, a handle's matrix read from its storage.
        fn matrix<'a, T: Scalar>(&self, m: CsrOperand<'a, T>) -> Result<&'a Csr<T>> {
            match m {
                CsrOperand::Host(m) => Ok(m),
                CsrOperand::Resident(r) => self.csr(r),
            }
        }
        /// Host operands as they are, handles read from their storage.
        fn host<'a, T: Scalar>(&self, m: CsrOperand<'a, T>) -> Result<CsrOperand<'a, T>> {
            Ok(CsrOperand::Host(self.matrix(m)?))
        }
        fn host_sparse<'a, T: Scalar>(
            &self,
            m: SparseOperand<'a, T>,
        ) -> Result<SparseOperand<'a, T>> {
            Ok(match m {
                SparseOperand::Host(m) => SparseOperand::Host(m),
                SparseOperand::Resident(r) => SparseOperand::Host(SparseRef::Csr(self.csr(r)?)),
            })
        }
        fn keep<T: Scalar>(&self, m: Csr<T>, pattern: PatternId) -> ResidentCsr<T> {
            let (shape, nnz) = (m.shape(), m.nnz());
            ResidentCsr::from_storage(self.memory_space(), shape, nnz, pattern, Stored(m))
        }
        fn keep_dense<T: Scalar>(&self, d: Dense<T>) -> ResidentDense<T> {
            let (shape, layout) = (d.shape(), d.layout());
            ResidentDense::from_storage(self.memory_space(), shape, layout, Stored(d))
        }
    }

    fn internal(what: &str) -> Error {
        Error::Internal {
            backend: KIND,
            what: what.into(),
        }
    }

    impl Device for OwnMemory {
        fn info(&self) -> DeviceInfo {
            DeviceInfo {
                backend: KIND,
                name: "reference kernels behind handles of their own".into(),
                ..ReferenceBackend.info()
            }
        }
        fn capabilities(&self) -> &Capabilities {
            ReferenceBackend.capabilities()
        }
        fn memory_space(&self) -> MemorySpace {
            MemorySpace::Device {
                backend: KIND,
                id: 0,
            }
        }
    }

    impl<T: Scalar> Backend<T> for OwnMemory {
        fn spgemm_checked(
            &self,
            a: CsrOperand<'_, T>,
            b: CsrOperand<'_, T>,
            options: &SpgemmOptions,
            run: &RunControl,
            _checked: Validated,
        ) -> Result<Csr<T>> {
            ReferenceBackend.spgemm_with(self.host(a)?, self.host(b)?, options, run)
        }
        // The reference's vector products, on A's host matrix.
        fn vector_product_checked(
            &self,
            kind: VectorProductKind,
            a: CsrOperand<'_, T>,
            u: &SparseVector<T>,
            options: &VectorProductOptions,
            run: &RunControl,
            _checked: Validated,
        ) -> Result<SparseVector<T>> {
            let a = self.host(a)?;
            match kind {
                VectorProductKind::Mxv => ReferenceBackend.mxv_with(a, u, options, run),
                VectorProductKind::Vxm => ReferenceBackend.vxm_with(u, a, options, run),
            }
        }
        fn spmm_checked(
            &self,
            a: SparseOperand<'_, T>,
            b: DenseOperand<'_, T>,
            options: &SpmmOptions,
            run: &RunControl,
            _checked: Validated,
        ) -> Result<Dense<T>> {
            let b = match b {
                DenseOperand::Host(d) => DenseOperand::Host(d),
                DenseOperand::Resident(r) => DenseOperand::Host(self.dense(r)?),
            };
            ReferenceBackend.spmm_with(self.host_sparse(a)?, b, options, run)
        }
        fn spmv_checked(
            &self,
            a: SparseOperand<'_, T>,
            x: VectorOperand<'_, T>,
            options: &SpmvOptions,
            run: &RunControl,
            _checked: Validated,
        ) -> Result<Vec<T>> {
            let x = match x {
                VectorOperand::Host(x) => VectorOperand::Host(x),
                VectorOperand::Resident(r) => VectorOperand::Host(self.dense(r)?.data()),
            };
            ReferenceBackend.spmv_with(self.host_sparse(a)?, x, options, run)
        }
        fn residency(&self) -> Residency<'_, T> {
            Residency::Own(self)
        }
    }

    impl<T: Scalar> ResidentOps<T> for OwnMemory {
        fn store(&self, m: &Csr<T>) -> Result<ResidentCsr<T>> {
            Ok(self.keep(m.clone(), PatternId::of(m)))
        }
        fn store_owned(&self, m: Csr<T>) -> Result<ResidentCsr<T>> {
            let pattern = PatternId::of(&m);
            Ok(self.keep(m, pattern))
        }
        fn store_values(
            &self,
            pattern: &ResidentCsr<T>,
            values: &[T],
            _checked: Validated,
        ) -> Result<ResidentCsr<T>> {
            let m = self.csr(pattern)?;
            Ok(self.keep(m.with_values(values.to_vec())?, pattern.pattern()))
        }
        fn load(&self, m: &ResidentCsr<T>, _checked: Validated) -> Result<Csr<T>> {
            Ok(self.csr(m)?.clone())
        }
        fn load_values(&self, m: &ResidentCsr<T>, _checked: Validated) -> Result<Vec<T>> {
            Ok(self.csr(m)?.values().to_vec())
        }
        fn store_dense(&self, d: &Dense<T>) -> Result<ResidentDense<T>> {
            Ok(self.keep_dense(d.clone()))
        }
        fn load_dense(&self, d: &ResidentDense<T>, _checked: Validated) -> Result<Dense<T>> {
            Ok(self.dense(d)?.clone())
        }
        fn spgemm_stored(
            &self,
            a: CsrOperand<'_, T>,
            b: CsrOperand<'_, T>,
            options: &SpgemmOptions,
            run: &RunControl,
            checked: Validated,
        ) -> Result<ResidentCsr<T>> {
            let pattern = PatternId::of_product(a.pattern(), b.pattern());
            Ok(self.keep(self.spgemm_checked(a, b, options, run, checked)?, pattern))
        }
        fn spmm_stored(
            &self,
            a: SparseOperand<'_, T>,
            b: DenseOperand<'_, T>,
            options: &SpmmOptions,
            run: &RunControl,
            checked: Validated,
        ) -> Result<ResidentDense<T>> {
            Ok(self.keep_dense(self.spmm_checked(a, b, options, run, checked)?))
        }
        fn spmv_stored(
            &self,
            a: SparseOperand<'_, T>,
            x: VectorOperand<'_, T>,
            options: &SpmvOptions,
            run: &RunControl,
            checked: Validated,
        ) -> Result<ResidentDense<T>> {
            let y = self.spmv_checked(a, x, options, run, checked)?;
            Ok(self.keep_dense(Dense::try_new(
                y.len(),
                1,
                hetsparse_core::Layout::ColMajor,
                y,
            )?))
        }
        fn plan(
            &self,
            a: CsrOperand<'_, T>,
            b: CsrOperand<'_, T>,
            options: &SpgemmOptions,
            checked: Validated,
        ) -> Result<SpgemmPlan<T>> {
            let c = self.spgemm_checked(a, b, options, &RunControl::unwatched(), checked)?;
            let (ha, hb) = (self.matrix(a)?, self.matrix(b)?);
            let products = hetsparse_core::analysis::total_products(ha, hb)?;
            let mut requirement = MemoryRequirement::default();
            requirement.output_bytes = hetsparse_core::backend::memory::csr_bytes(
                c.nrows(),
                c.nnz(),
                std::mem::size_of::<T>(),
            );
            Ok(SpgemmPlan::new(
                self.memory_space(),
                options.clone(),
                hetsparse_core::backend::plan::OperandPattern::of(&a),
                hetsparse_core::backend::plan::OperandPattern::of(&b),
                c.nnz(),
                products,
                requirement,
                hetsparse_core::PlanState::device(Planned(c)),
            ))
        }
        fn execute(
            &self,
            plan: &SpgemmPlan<T>,
            a: CsrOperand<'_, T>,
            b: CsrOperand<'_, T>,
            run: &RunControl,
            checked: Validated,
        ) -> Result<ResidentCsr<T>> {
            let planned = plan
                .device_state::<Planned<T>>()
                .ok_or_else(|| internal("a plan without its state"))?;
            let c = self.spgemm_checked(a, b, plan.options(), run, checked)?;
            if c.row_offsets() != planned.0.row_offsets()
                || c.col_indices() != planned.0.col_indices()
            {
                return Err(internal("the product left its planned structure"));
            }
            Ok(self.keep(c, plan.c_pattern()))
        }
        fn requirement(
            &self,
            a: CsrOperand<'_, T>,
            b: CsrOperand<'_, T>,
            _options: &SpgemmOptions,
            _checked: Validated,
        ) -> Result<MemoryRequirement> {
            let (a, b) = (self.matrix(a)?, self.matrix(b)?);
            let bound = check::output_bound(a, b)?;
            let mut requirement = MemoryRequirement::default();
            requirement.output_bytes = hetsparse_core::backend::memory::csr_bytes(
                a.nrows(),
                bound,
                std::mem::size_of::<T>(),
            );
            Ok(requirement)
        }
    }

    hetsparse_core::conformance_suite! {
        backend: Ok::<_, Error>(OwnMemory),
        scalars: [f64, c32],
    }
}
