//! The CPU backend of hetsparse: every operation on the host's cores, with rayon.
//!
//! [`CpuBackend`] implements [`Device`] and [`Backend<T>`] for every scalar type (f16 and bf16
//! accumulate in f32) and passes the conformance suite.
//!
//! - **SpGEMM** Row-Row (Gustavson, Matam et al. §II.A) computes every row of C once: C is
//!   reserved at an upper bound of its size (untouched memory costs nothing), ranges of rows
//!   are computed into per-thread staging and copied into place as soon as the ranges before
//!   them are counted. Where that bound cannot be reserved it runs in two phases (Xia Alg. 1):
//!   a symbolic pass counts the exact entries of each row, then the numeric pass writes every
//!   row straight into the exactly sized result. Work is split into ranges of rows holding
//!   equal numbers of intermediate products, so power-law and skewed matrices keep every core
//!   busy; where B's rows are of even length, equal numbers of A's entries stand in for them
//!   and no pass counts products up front. Each row picks its accumulator from its product
//!   count and B's width: sort and merge for very short rows, open-addressing hash for sparse
//!   rows of wide products, a dense array for the rest (B's columns cut into cache-sized
//!   panels where the product is wide).
//!   Column-Row (outer products, Matam Alg. 2), DIA×DIA (Matam Alg. 3) and BSR×BSR are native
//!   kernels too.
//! - **Plans** keep C's structure and, where they fit in C's own memory, each product's position
//!   in its row of C (else B's runs of consecutive columns): executing one with new values is a
//!   gather-multiply-scatter with no search and no column index written.
//! - **Chunks** (row range × column panel) read A and B in place: B's panel is never copied.
//! - **SpMV and SpMM** run native loops per format (CSR, CSC, COO, DIA, ELLPACK-R, CSPR, BSR),
//!   parallel over rows.
//! - **Semirings and masks** (GraphBLAS semantics, [`hetsparse_core::semiring`]): every
//!   semiring of [`SemiringKind`] defined over the scalar type runs in the kernels above;
//!   a masked product `C⟨M⟩ = A · B` (structural or valued, complemented or not) runs a masked
//!   Row-Row kernel that skips the products the mask refuses before multiplying them. Plans
//!   are plus-times only, and no accumulator is claimed (the product is a new C).
//! - **Sparse-vector products** (GraphBLAS's mxv and vxm, every semiring and mask mode): mxv
//!   pulls row by row; vxm pushes a small frontier along its rows of A and pulls (through
//!   Aᵀ) a large one, as direction-optimising breadth-first search does.
//! - **Run control**: a SpGEMM (whole, chunk or plan execution) looks at cancellation before
//!   each range of rows and reports the range's products as it completes, so a long product
//!   stops within a range of rows and its progress moves while it runs.
//!
//! ```
//! use hetsparse_core::{format::Csr, Backend, SpgemmAlgorithm};
//! use hetsparse_cpu::CpuBackend;
//!
//! let cpu = CpuBackend::with_threads(2)?;
//! // [[1, 2], [0, 3]]²  = [[1, 8], [0, 9]]
//! let a = Csr::try_new(2, 2, vec![0, 2, 3], vec![0, 1, 1], vec![1.0, 2.0, 3.0])?;
//! let c = cpu.spgemm(&a, &a, SpgemmAlgorithm::Auto)?;
//! assert_eq!(c.values(), &[1.0, 8.0, 9.0]);
//! # Ok::<(), hetsparse_core::Error>(())
//! ```
//!
//! Triangles of a graph, as `C⟨L⟩ = L · L` over `plus_pair` (L the strictly lower triangle of
//! its adjacency matrix), and shortest two-hop paths over `min_plus`:
//!
//! ```
//! use hetsparse_core::{Backend, Csr, Mask, RunControl, SemiringKind, SpgemmOptions};
//! use hetsparse_cpu::CpuBackend;
//!
//! let cpu = CpuBackend::with_threads(2)?;
//! // The complete graph on 4 vertices: L holds (i, j) for i > j; 4 triangles.
//! let l = Csr::try_new(4, 4, vec![0, 0, 1, 3, 6], vec![0, 0, 1, 0, 1, 2], vec![1.0; 6])?;
//! let options = SpgemmOptions::new()
//!     .with_semiring(SemiringKind::PlusPair)
//!     .with_mask(Mask::structural(&l));
//! let c = cpu.spgemm_with((&l).into(), (&l).into(), &options, &RunControl::new())?;
//! assert_eq!(c.values().iter().sum::<f64>(), 4.0);
//!
//! // Edge weights 0 → 1 (1.0), 1 → 2 (2.0), 0 → 2 (5.0): the shortest two-hop path 0 → 2.
//! let w = Csr::try_new(3, 3, vec![0, 2, 3, 3], vec![1, 2, 2], vec![1.0, 5.0, 2.0])?;
//! let min_plus = SpgemmOptions::new().with_semiring("min_plus".parse()?);
//! let two_hops = cpu.spgemm_with((&w).into(), (&w).into(), &min_plus, &RunControl::new())?;
//! assert_eq!(two_hops.row(0), (&[2u32][..], &[3.0][..]));
//! # Ok::<(), hetsparse_core::Error>(())
//! ```
#![warn(missing_docs)]

mod bsr;
mod csr_spmv;
mod dia;
mod memory;
mod multiply;
mod plan;
mod reuse;
mod spgemm;
mod vector;

use std::sync::Arc;
use std::time::Instant;

use hetsparse_core::backend::host_operands;
use hetsparse_core::backend::memory::csr_bytes;
use hetsparse_core::backend::plan::{HostStructure, OperandPattern, PlanState};
use hetsparse_core::backend::residency::in_host;
use hetsparse_core::format::{Bsr, Csr, Dense, Dia, SparseFormat, SplicedCsr};
use hetsparse_core::{
    Backend, Capabilities, ChunkPipeline, ChunkPlace, ChunkProduct, ChunkSink, ChunkTiming,
    CsrOperand, CsrWindow, DenseOperand, Device, DeviceInfo, DeviceKind, DeviceProfile, Error,
    MemoryRequirement, MemorySpace, Operation, PlaceDone, PlusTimes, ProductChunk, Residency,
    ResidentCsr, ResidentDense, ResidentOps, Result, RunControl, Scalar, ScalarType, SemiringKind,
    SparseOperand, SparseVector, SpgemmAlgorithm, SpgemmFeatures, SpgemmOptions, SpgemmPlan,
    SpmmOptions, SpmvOptions, Validated, VectorOperand, VectorProductKind, VectorProductOptions,
};
use spgemm::{BOperand, Watch};

/// The SpGEMM algorithms this backend runs.
const ALGORITHMS: [SpgemmAlgorithm; 3] = [
    SpgemmAlgorithm::Auto,
    SpgemmAlgorithm::RowRow,
    SpgemmAlgorithm::ColumnRow,
];

/// The host's cores as a hetsparse backend.
///
/// Cheap to clone (the thread pool is shared). Every operation runs on the backend's threads:
/// rayon's global pool for [`CpuBackend::new`], a pool of its own for
/// [`CpuBackend::with_threads`].
#[derive(Clone, Debug)]
pub struct CpuBackend {
    /// `None`: rayon's global pool.
    pool: Option<Arc<rayon::ThreadPool>>,
    threads: usize,
    capabilities: Arc<Capabilities>,
}

/// Every SpGEMM algorithm of [`ALGORITHMS`], DIA×DIA, BSR×BSR, SpMV and SpMM in every format, for
/// every scalar type.
fn capabilities() -> Capabilities {
    let mut ops: Vec<Operation> = ALGORITHMS.iter().map(|&a| Operation::Spgemm(a)).collect();
    ops.extend([Operation::DiaSpgemm, Operation::BsrSpgemm]);
    ops.extend(SparseFormat::ALL.iter().map(|&f| Operation::Spmv(f)));
    ops.extend(SparseFormat::ALL.iter().map(|&f| Operation::Spmm(f)));
    ScalarType::ALL.iter().fold(
        Capabilities::new().with_all(&ops, &ScalarType::ALL),
        |caps, &scalar| {
            // Masks of every kind are computed by the masked Row-Row kernel, whatever the
            // algorithm asked for.
            let features = SpgemmFeatures::every_semiring_and_mask(scalar);
            caps.with_spgemm_features(&[scalar], features.clone())
                .with_vector_product_features(&[scalar], features)
        },
    )
}

impl CpuBackend {
    /// A backend on every core, through rayon's global pool (which honours `RAYON_NUM_THREADS`).
    pub fn new() -> Result<CpuBackend> {
        host_cache_bytes();
        Ok(CpuBackend {
            pool: None,
            threads: rayon::current_num_threads().max(1),
            capabilities: Arc::new(capabilities()),
        })
    }

    /// A backend with its own pool of `threads` threads; `threads == 0` is an
    /// [`Error::InvalidArgument`].
    ///
    /// ```
    /// let cpu = hetsparse_cpu::CpuBackend::with_threads(3)?;
    /// assert_eq!(cpu.threads(), 3);
    /// assert!(hetsparse_cpu::CpuBackend::with_threads(0).is_err());
    /// # Ok::<(), hetsparse_core::Error>(())
    /// ```
    pub fn with_threads(threads: usize) -> Result<CpuBackend> {
        host_cache_bytes();
        if threads == 0 {
            return Err(Error::InvalidArgument(
                "CPU backend: the thread count must be at least 1, got 0".into(),
            ));
        }
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("hetsparse-cpu-{i}"))
            .build()
            .map_err(|e| Error::Device {
                backend: hetsparse_core::BackendKind::Cpu,
                context: format!("starting a pool of {threads} threads"),
                message: e.to_string(),
                fault: hetsparse_core::DeviceFault::Other,
                source: Some(Box::new(e)),
            })?;
        Ok(CpuBackend {
            pool: Some(Arc::new(pool)),
            threads,
            capabilities: Arc::new(capabilities()),
        })
    }

    /// Number of threads operations run on.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Runs `f` on this backend's threads.
    fn install<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        match &self.pool {
            Some(pool) => pool.install(f),
            None => f(),
        }
    }
}

/// The processor's model name from `/proc/cpuinfo` where there is one, read once: the kernel
/// makes that file with a pass over every core, and [`Device::info`] is asked on every
/// scheduled run.
fn cpu_model() -> String {
    static MODEL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    MODEL.get_or_init(read_cpu_model).clone()
}

fn read_cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .filter(|m| !m.is_empty())
        .unwrap_or_else(|| format!("host CPU ({})", std::env::consts::ARCH))
}

/// The host's last-level cache, read from sysfs once per process (hundreds of small files:
/// milliseconds, where the profile is asked for at every call a context routes); the backend
/// reads it when it is made, so that no call pays for it.
fn host_cache_bytes() -> Option<u64> {
    static CACHE_BYTES: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    *CACHE_BYTES.get_or_init(hetsparse_core::host_cache_bytes)
}

impl Device for CpuBackend {
    fn info(&self) -> DeviceInfo {
        DeviceInfo {
            backend: hetsparse_core::BackendKind::Cpu,
            name: cpu_model(),
            kind: DeviceKind::Cpu,
            memory_bytes: hetsparse_core::host_memory_bytes(),
            compute_units: u32::try_from(self.threads).unwrap_or(u32::MAX),
        }
    }

    fn capabilities(&self) -> &Capabilities {
        &self.capabilities
    }

    fn memory_space(&self) -> MemorySpace {
        MemorySpace::Host
    }

    fn profile(&self) -> DeviceProfile {
        let mut profile = DeviceProfile::defaults(&self.info(), &self.memory_space());
        if let Some(bytes) = host_cache_bytes() {
            profile.cache_bytes = bytes;
        }
        profile
    }
}

impl<T: Scalar> Backend<T> for CpuBackend {
    fn spgemm_checked(
        &self,
        a: CsrOperand<'_, T>,
        b: CsrOperand<'_, T>,
        options: &SpgemmOptions,
        run: &RunControl,
        _checked: Validated,
    ) -> Result<Csr<T>> {
        let (a, b) = (host_operands::csr(self, a)?, host_operands::csr(self, b)?);
        run.checkpoint()?;
        self.install(|| {
            let planned = run.plan_product(a, b)?;
            spgemm::multiply_with(
                &CsrWindow::whole(a),
                BOperand::Window(&CsrWindow::whole(b)),
                spgemm::shape_of_b(b),
                options,
                Watch { run, planned },
            )
        })
    }

    /// B's two blocks read in place: the kernels look up each row of B in the block that
    /// holds it, so nothing is copied.
    fn spgemm_spliced_checked(
        &self,
        a: &Csr<T>,
        b: &SplicedCsr<'_, T>,
        options: &SpgemmOptions,
        run: &RunControl,
        _checked: Validated,
    ) -> Result<Csr<T>> {
        run.checkpoint()?;
        self.install(|| {
            let planned = run.plan_product_spliced(a, b);
            spgemm::multiply_with(
                &CsrWindow::whole(a),
                BOperand::Spliced(b),
                spgemm::shape_of_rows(spgemm::RowsOfB::spliced(b)),
                options,
                Watch { run, planned },
            )
        })
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
        if multiply::runs_serially(&a, b.ncols()) {
            return multiply::spmm::<T, PlusTimes>(a, b);
        }
        self.install(|| multiply::spmm::<T, PlusTimes>(a, b))
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
        if multiply::runs_serially(&a, 1) {
            return multiply::spmv::<T, PlusTimes>(a, x);
        }
        self.install(|| multiply::spmv::<T, PlusTimes>(a, x))
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
        self.install(|| vector::product_with_options(kind, a, u, options, run, None))
    }

    fn dia_spgemm_checked(&self, a: &Dia<T>, b: &Dia<T>, _checked: Validated) -> Result<Dia<T>> {
        self.install(|| dia::multiply::<T, PlusTimes>(a, b))
    }

    fn bsr_spgemm_checked(&self, a: &Bsr<T>, b: &Bsr<T>, _checked: Validated) -> Result<Bsr<T>> {
        self.install(|| bsr::multiply::<T, PlusTimes>(a, b))
    }

    fn residency(&self) -> Residency<'_, T> {
        Residency::Own(self)
    }

    fn chunk_pipeline(&self) -> Option<&dyn ChunkPipeline<T>> {
        Some(self)
    }
}

impl<T: Scalar> ResidentOps<T> for CpuBackend {
    fn store(&self, m: &Csr<T>) -> Result<ResidentCsr<T>> {
        in_host::store_owned(self, m.clone())
    }

    fn store_owned(&self, m: Csr<T>) -> Result<ResidentCsr<T>> {
        in_host::store_owned(self, m)
    }

    fn store_values(
        &self,
        pattern: &ResidentCsr<T>,
        values: &[T],
        checked: Validated,
    ) -> Result<ResidentCsr<T>> {
        in_host::store_values(self, pattern, values, checked)
    }

    fn load(&self, m: &ResidentCsr<T>, checked: Validated) -> Result<Csr<T>> {
        in_host::load(self, m, checked)
    }

    fn load_values(&self, m: &ResidentCsr<T>, checked: Validated) -> Result<Vec<T>> {
        in_host::load_values(self, m, checked)
    }

    fn store_dense(&self, d: &Dense<T>) -> Result<ResidentDense<T>> {
        in_host::store_dense(self, d)
    }

    fn load_dense(&self, d: &ResidentDense<T>, checked: Validated) -> Result<Dense<T>> {
        in_host::load_dense(self, d, checked)
    }

    fn spgemm_stored(
        &self,
        a: CsrOperand<'_, T>,
        b: CsrOperand<'_, T>,
        options: &SpgemmOptions,
        run: &RunControl,
        checked: Validated,
    ) -> Result<ResidentCsr<T>> {
        in_host::spgemm_stored(self, a, b, options, run, checked)
    }

    fn spmm_stored(
        &self,
        a: SparseOperand<'_, T>,
        b: DenseOperand<'_, T>,
        options: &SpmmOptions,
        run: &RunControl,
        checked: Validated,
    ) -> Result<ResidentDense<T>> {
        in_host::spmm_stored(self, a, b, options, run, checked)
    }

    fn spmv_stored(
        &self,
        a: SparseOperand<'_, T>,
        x: VectorOperand<'_, T>,
        options: &SpmvOptions,
        run: &RunControl,
        checked: Validated,
    ) -> Result<ResidentDense<T>> {
        in_host::spmv_stored(self, a, x, options, run, checked)
    }

    fn plan(
        &self,
        a: CsrOperand<'_, T>,
        b: CsrOperand<'_, T>,
        options: &SpgemmOptions,
        checked: Validated,
    ) -> Result<SpgemmPlan<T>> {
        options.check_plain_plan(hetsparse_core::BackendKind::Cpu, T::TYPE)?;
        let (ha, hb) = (host_operands::csr(self, a)?, host_operands::csr(self, b)?);
        let _span =
            tracing::debug_span!("symbolic", nrows = ha.nrows(), ncols = hb.ncols()).entered();
        // The symbolic pass is one product: its structure is what every execution fills.
        let (c, products) = self.install(|| -> Result<_> {
            let unwatched = RunControl::unwatched();
            let c = <Self as Backend<T>>::spgemm_checked(self, a, b, options, &unwatched, checked)?;
            Ok((c, hetsparse_core::analysis::total_products(ha, hb)?))
        })?;
        let structure = HostStructure::of(&c);
        let tables = self.install(|| reuse::Tables::build(&structure, ha, hb))?;
        // Each thread's buffers, and the tables, which the plan holds and every execution
        // reads.
        let per_thread = reuse::scratch_bytes::<T>(&structure, tables.positions.is_some());
        let mut requirement = MemoryRequirement::default();
        requirement.output_bytes = csr_bytes(c.nrows(), c.nnz(), std::mem::size_of::<T>());
        requirement.work_bytes = per_thread
            .saturating_mul(self.threads as u64)
            .saturating_add(tables.bytes());
        tracing::debug!(
            position_table = tables.positions.is_some(),
            runs_of_b = tables.runs.is_some(),
            table_bytes = tables.bytes(),
            c_bytes = requirement.output_bytes,
            "SpGEMM plan"
        );
        let structure = structure.with_extension(tables);
        Ok(SpgemmPlan::new(
            self.memory_space(),
            options.clone(),
            OperandPattern::of(&a),
            OperandPattern::of(&b),
            c.nnz(),
            products,
            requirement,
            PlanState::Host(structure),
        ))
    }

    fn execute(
        &self,
        plan: &SpgemmPlan<T>,
        a: CsrOperand<'_, T>,
        b: CsrOperand<'_, T>,
        run: &RunControl,
        _checked: Validated,
    ) -> Result<ResidentCsr<T>> {
        let space = self.memory_space();
        let (ha, hb) = (host_operands::csr(self, a)?, host_operands::csr(self, b)?);
        // Plans of other host backends hold the structure alone.
        let structure = plan.host_structure().ok_or_else(|| Error::Internal {
            backend: hetsparse_core::BackendKind::Cpu,
            what: "a SpGEMM plan of host memory without its structure".into(),
        })?;
        run.checkpoint()?;
        run.add_planned(plan.products());
        let _span = tracing::debug_span!("numeric", nnz = plan.c_nnz()).entered();
        let c = self.install(|| {
            reuse::numeric::<T, PlusTimes>(structure, structure.extension(), ha, hb, run)
        })?;
        // SAFETY: `c` has the plan's structure, computed for operands checked to have the
        // planned identities.
        Ok(unsafe { ResidentCsr::from_host_with_pattern(space, c, plan.c_pattern()) })
    }

    fn requirement(
        &self,
        a: CsrOperand<'_, T>,
        b: CsrOperand<'_, T>,
        options: &SpgemmOptions,
        checked: Validated,
    ) -> Result<MemoryRequirement> {
        in_host::requirement(self, a, b, options, checked)
    }
}

impl<T: Scalar> ChunkPipeline<T> for CpuBackend {
    fn chunks(
        &self,
        a: CsrOperand<'_, T>,
        b: CsrOperand<'_, T>,
        chunks: &[ProductChunk],
        options: &SpgemmOptions,
        run: &RunControl,
        sink: &mut ChunkSink<'_, T>,
        _checked: Validated,
    ) -> Result<()> {
        let (a, b) = (host_operands::csr(self, a)?, host_operands::csr(self, b)?);
        let b_shape = self.install(|| spgemm::shape_of_b(b));
        for (index, chunk) in chunks.iter().enumerate() {
            run.checkpoint()?;
            let start = Instant::now();
            // A's rows and B's column panel are read in place: each chunk costs its own
            // products plus a binary search per B row it touches, never a copy of B (only
            // Column-Row copies the chunk's rows of A, to read them by columns).
            let product = self
                .install(|| {
                    let (wa, wb) = chunk.windows(a, b)?;
                    let planned = run.plan_product_rows(a, chunk.rows.clone(), b);
                    let watch = Watch { run, planned };
                    spgemm::multiply_with(&wa, BOperand::Window(&wb), b_shape, options, watch)
                })
                .map_err(|e: Error| e.in_chunk(index))?;
            sink(ChunkProduct {
                index,
                chunk: chunk.clone(),
                product,
                timing: ChunkTiming::host(start.elapsed()),
            })?;
        }
        Ok(())
    }

    /// Each chunk whose rows are one run in C (whole rows of C, or one row) computed straight
    /// into its place: its numeric phase alone, from the place's counts, with no copy. Other
    /// chunks (several rows of a column panel) are computed, then copied in.
    fn chunks_into(
        &self,
        a: CsrOperand<'_, T>,
        b: CsrOperand<'_, T>,
        places: &mut [ChunkPlace<'_, T>],
        options: &SpgemmOptions,
        run: &RunControl,
        done: &mut PlaceDone<'_>,
        _checked: Validated,
    ) -> Result<()> {
        let (a, b) = (host_operands::csr(self, a)?, host_operands::csr(self, b)?);
        let chunks: Vec<ProductChunk> = places.iter().map(|p| p.chunk().clone()).collect();
        let b_shape = self.install(|| spgemm::shape_of_b(b));
        for (index, (place, chunk)) in places.iter_mut().zip(&chunks).enumerate() {
            run.checkpoint()?;
            let start = Instant::now();
            self.install(|| -> Result<()> {
                let (wa, wb) = chunk.windows(a, b)?;
                let planned = run.plan_product_rows(a, chunk.rows.clone(), b);
                let watch = Watch { run, planned };
                let counts: Vec<u64> = (0..chunk.rows.len()).map(|k| place.row_len(k)).collect();
                // A masked chunk is computed, then copied in.
                // SAFETY: `multiply_into_with` writes every slot it is given where it returns
                // `Ok`.
                let filled = options.mask.is_none()
                    && unsafe {
                        place.fill_rows(&counts, |cols, vals| {
                            spgemm::multiply_into_with(
                                &wa, &wb, b_shape, options, watch, &counts, cols, vals,
                            )
                        })?
                    };
                if !filled {
                    let c =
                        spgemm::multiply_with(&wa, BOperand::Window(&wb), b_shape, options, watch)?;
                    place.write_csr(&c)?;
                }
                Ok(())
            })
            .map_err(|e| e.in_chunk(index))?;
            done(index, ChunkTiming::host(start.elapsed()))?;
        }
        Ok(())
    }

    /// A masked product's chunks are counted by computing them (the masked kernel is one
    /// pass); others on the host's symbolic counts, as by default.
    fn chunk_counts(
        &self,
        a: CsrOperand<'_, T>,
        b: CsrOperand<'_, T>,
        chunks: &[ProductChunk],
        options: &SpgemmOptions,
        run: &RunControl,
        counts: &mut dyn FnMut(usize, &[u64]) -> Result<()>,
        checked: Validated,
    ) -> Result<()> {
        if options.mask.is_none() {
            return hetsparse_core::backend::chunks::plain::spgemm_chunk_counts(
                self, a, b, chunks, options, run, counts, checked,
            );
        }
        let (a, b) = (host_operands::csr(self, a)?, host_operands::csr(self, b)?);
        let b_shape = self.install(|| spgemm::shape_of_b(b));
        // The pattern is the semiring's whatever it is: counted over plus-times.
        let structural = options.clone().with_semiring(SemiringKind::PlusTimes);
        for (index, chunk) in chunks.iter().enumerate() {
            run.checkpoint()?;
            let rows = self
                .install(|| -> Result<Vec<u64>> {
                    let (wa, wb) = chunk.windows(a, b)?;
                    let unwatched = RunControl::unwatched();
                    let watch = Watch {
                        run: &unwatched,
                        planned: 0,
                    };
                    let c = spgemm::multiply_with(
                        &wa,
                        BOperand::Window(&wb),
                        b_shape,
                        &structural,
                        watch,
                    )?;
                    Ok(c.row_offsets().windows(2).map(|w| w[1] - w[0]).collect())
                })
                .map_err(|e| e.in_chunk(index))?;
            counts(index, &rows)?;
        }
        Ok(())
    }

    fn dia_rows(
        &self,
        a: &Dia<T>,
        b: &Dia<T>,
        rows: std::ops::Range<usize>,
        offsets: &[i64],
        c: &mut [&mut [std::mem::MaybeUninit<T>]],
        _checked: Validated,
    ) -> Result<()> {
        self.install(|| dia::multiply_rows::<T, PlusTimes>(a, b, rows, offsets, c))
    }
}

hetsparse_core::every_scalar!(CpuBackend);
