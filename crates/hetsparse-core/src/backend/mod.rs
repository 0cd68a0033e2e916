//! The Backend trait: what a device can tell about itself and the operations it runs.
//!
//! Two traits, split so that the scheduler can hold a run-time list of backends:
//! [`Device`] (information, capabilities and memory, independent of the scalar type) and
//! [`Backend<T>`] (the operations over one scalar type). Both are object safe, so
//! `Vec<Box<dyn Backend<f64>>>` can mix CPU, CUDA and OpenCL backends.
//!
//! A backend implements seven methods: [`Device::info`], [`Device::capabilities`],
//! [`Device::memory_space`], the three operations [`Backend::spgemm_checked`],
//! [`Backend::spmm_checked`] and [`Backend::spmv_checked`], and [`Backend::residency`], which
//! says how it keeps resident matrices ([`residency`]: in host memory, built from the
//! operations, or through its own [`ResidentOps`]). Everything else is provided and correct for
//! any backend: the public methods ([`Backend::spgemm_with`] and the others) [`validate`] their
//! operands once and hand the backend a [`Validated`], residency dispatches on that answer, the
//! chunk protocol the scheduler drives runs the [`chunks::plain`] one unless the backend
//! pipelines chunks ([`ChunkPipeline`]), and DIA×DIA and BSR×BSR go through CSR SpGEMM unless
//! the backend has kernels of its own. The guide `docs/backend-guide.md` walks through a
//! minimal backend.
//!
//! Data flows through the submodules in order: operands on the host or [`resident`] in a
//! backend's memory (a chunk of a product reads [`window`]s of them), the operation's
//! [`options`], a [`plan`] with its [`memory`] requirement, and a [`run`] that can be
//! cancelled and watched; [`chunks`] of one product are laid into one matrix with
//! [`assemble_chunks`] or written into their [`place`]s.

pub mod assemble;
pub mod chunks;
pub mod memory;
pub mod options;
pub mod place;
pub mod plan;
pub mod profile;
pub mod residency;
pub mod resident;
pub mod run;
pub mod validate;
pub mod window;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::mem::MaybeUninit;
use std::ops::Range;

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::format::{Bsr, Csr, Dense, Dia, Layout, SparseFormat, SparseRef, SplicedCsr};
use crate::scalar::{Scalar, ScalarType};

pub use assemble::assemble_chunks;
pub use chunks::ChunkPipeline;
pub use memory::{MemoryPool, MemoryRequirement, Reservation};
pub use options::{
    AccumulateOp, Mask, MaskKind, SemiringKind, SpgemmFeatures, SpgemmOptions, SpmmOptions,
    SpmvOptions, VectorProductKind, VectorProductOptions,
};
pub use place::{ChunkPlace, ProductBuffer, ProductLayout, RowSegments};
pub use plan::{PlanState, SpgemmPlan};
pub use profile::DeviceProfile;
pub use residency::{Residency, ResidentOps};
pub use resident::{
    CsrOperand, DenseOperand, MemorySpace, PatternId, ResidentCsr, ResidentDense, SparseOperand,
    VectorOperand,
};
pub use run::{ChunkTiming, MaskedWork, Progress, RunControl};
pub use validate::Validated;
pub use window::{CsrWindow, Shaped};

/// What kind of processor a backend runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DeviceKind {
    /// CPU cores of the host.
    Cpu,
    /// A GPU.
    Gpu,
    /// Another accelerator.
    Accelerator,
}

/// Which kind of backend something belongs to: a device description, a resident matrix's
/// memory, an error. Its [`Display`](fmt::Display) is the short name messages use (`cpu`,
/// `cuda`, ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum BackendKind {
    /// hetsparse-core's own host-side work outside any backend: host buffers, conversions,
    /// assembling chunks into one matrix.
    Host,
    /// The serial reference kernels ([`ReferenceBackend`](crate::ReferenceBackend)).
    Reference,
    /// The CPU backend (hetsparse-cpu).
    Cpu,
    /// The CUDA backend (hetsparse-cuda).
    Cuda,
    /// The OpenCL backend (hetsparse-opencl).
    OpenCl,
    /// The scheduler over several backends (hetsparse-sched).
    Scheduler,
    /// The distributed layer (hetsparse-mpi).
    Mpi,
    /// The facade's `Context`, finding and choosing the devices it runs on.
    Context,
    /// A backend outside this project, by the short name it gives itself.
    Other(&'static str),
}

impl BackendKind {
    /// The short name messages use: `host`, `reference`, `cpu`, `cuda`, `opencl`, `sched`,
    /// `mpi`, `context`, or another backend's own.
    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Host => "host",
            BackendKind::Reference => "reference",
            BackendKind::Cpu => "cpu",
            BackendKind::Cuda => "cuda",
            BackendKind::OpenCl => "opencl",
            BackendKind::Scheduler => "sched",
            BackendKind::Mpi => "mpi",
            BackendKind::Context => "context",
            BackendKind::Other(name) => name,
        }
    }
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A backend's description of its device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    /// The kind of backend.
    pub backend: BackendKind,
    /// The device's name as its driver reports it.
    pub name: String,
    /// Processor kind.
    pub kind: DeviceKind,
    /// Memory the device can use for operands and results, in bytes (after any budget the caller
    /// set). For the CPU, the host's memory.
    pub memory_bytes: u64,
    /// Parallel units: threads for a CPU, multiprocessors or compute units for a GPU.
    pub compute_units: u32,
}

/// The SpGEMM algorithms a backend may offer, named after the papers' methods.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SpgemmAlgorithm {
    /// The backend's own choice from the operands' analysis.
    Auto,
    /// Row-Row (Gustavson): row `i` of C from the rows of B that row `i` of A selects
    /// (Matam et al. §II.A, Alg. 1).
    RowRow,
    /// Column-Row: C as the sum of outer products of A's columns and B's rows (Matam Alg. 2).
    ColumnRow,
    /// Expansion, sorting, compression (Polok et al. Alg. 1–3).
    Esc,
    /// Rows binned by their product count, each bin with its own accumulator (hash, dense, or
    /// global memory for the longest rows): the production path of GPU backends.
    Adaptive,
}

impl SpgemmAlgorithm {
    /// Every algorithm.
    pub const ALL: [SpgemmAlgorithm; 5] = [
        SpgemmAlgorithm::Auto,
        SpgemmAlgorithm::RowRow,
        SpgemmAlgorithm::ColumnRow,
        SpgemmAlgorithm::Esc,
        SpgemmAlgorithm::Adaptive,
    ];
}

/// An operation a backend may support, for capability queries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Operation {
    /// CSR × CSR with the given algorithm.
    Spgemm(SpgemmAlgorithm),
    /// DIA × DIA.
    DiaSpgemm,
    /// BSR × BSR.
    BsrSpgemm,
    /// Sparse (of the given format) × dense.
    Spmm(SparseFormat),
    /// Sparse (of the given format) × vector.
    Spmv(SparseFormat),
    /// A semiring product of a CSR matrix and a sparse vector (mxv or vxm). Errors name it;
    /// what a backend runs of it is claimed in [`Capabilities::vector_product_features`]
    /// (semirings and masks), not with [`Capabilities::with`].
    VectorProduct(VectorProductKind),
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Operation::Spgemm(a) => write!(f, "SpGEMM ({a:?})"),
            Operation::DiaSpgemm => f.write_str("DIA×DIA SpGEMM"),
            Operation::BsrSpgemm => f.write_str("BSR×BSR SpGEMM"),
            Operation::Spmm(fmt_) => write!(f, "{fmt_}×dense SpMM"),
            Operation::Spmv(fmt_) => write!(f, "{fmt_} SpMV"),
            Operation::VectorProduct(kind) => write!(f, "sparse-vector {kind}"),
        }
    }
}

/// The set of (operation, scalar type) pairs a backend supports, and for each scalar type the
/// SpGEMM options beyond plain plus-times it runs ([`SpgemmFeatures`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Capabilities {
    entries: BTreeSet<(Operation, ScalarType)>,
    spgemm_features: BTreeMap<ScalarType, SpgemmFeatures>,
    vector_product_features: BTreeMap<ScalarType, SpgemmFeatures>,
}

impl Capabilities {
    /// No operations.
    pub fn new() -> Self {
        Self::default()
    }
    /// Adds `op` for each of `scalars`.
    pub fn with(mut self, op: Operation, scalars: &[ScalarType]) -> Self {
        self.entries.extend(scalars.iter().map(|&s| (op, s)));
        self
    }
    /// Adds each of `ops` for each of `scalars`.
    pub fn with_all(mut self, ops: &[Operation], scalars: &[ScalarType]) -> Self {
        for &op in ops {
            self = self.with(op, scalars);
        }
        self
    }
    /// Whether `op` is supported for `scalar`.
    pub fn supports(&self, op: Operation, scalar: ScalarType) -> bool {
        self.entries.contains(&(op, scalar))
    }
    /// The operations supported for `scalar`.
    pub fn operations(&self, scalar: ScalarType) -> Vec<Operation> {
        self.entries
            .iter()
            .filter(|(_, s)| *s == scalar)
            .map(|(op, _)| *op)
            .collect()
    }
    /// Every (operation, scalar type) pair.
    pub fn iter(&self) -> impl Iterator<Item = (Operation, ScalarType)> + '_ {
        self.entries.iter().copied()
    }
    /// Declares that SpGEMM over each of `scalars` runs `features` (semirings, masks,
    /// accumulators); without it, plain plus-times alone.
    pub fn with_spgemm_features(
        mut self,
        scalars: &[ScalarType],
        features: SpgemmFeatures,
    ) -> Self {
        for &s in scalars {
            self.spgemm_features.insert(s, features.clone());
        }
        self
    }
    /// The SpGEMM options run for `scalar` ([`SpgemmFeatures::plain`] unless declared).
    pub fn spgemm_features(&self, scalar: ScalarType) -> SpgemmFeatures {
        self.spgemm_features
            .get(&scalar)
            .cloned()
            .unwrap_or_default()
    }
    /// Declares that the sparse-vector products mxv and vxm over each of `scalars` run, with
    /// `features` (semirings, masks; the accumulator is applied above the backends and need
    /// not be claimed).
    pub fn with_vector_product_features(
        mut self,
        scalars: &[ScalarType],
        features: SpgemmFeatures,
    ) -> Self {
        for &s in scalars {
            self.vector_product_features.insert(s, features.clone());
        }
        self
    }
    /// What the sparse-vector products run over `scalar`; `None` where the backend runs none.
    pub fn vector_product_features(&self, scalar: ScalarType) -> Option<&SpgemmFeatures> {
        self.vector_product_features.get(&scalar)
    }
}

/// Part of a product: rows `rows` of A times columns `cols` of B.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ProductChunk {
    /// Rows of A (and of C).
    pub rows: Range<usize>,
    /// Columns of B (and of C).
    pub cols: Range<usize>,
}

/// One computed chunk: `product` is `rows.len() × cols.len()`, its column indices relative to
/// `chunk.cols.start`.
#[derive(Clone, Debug, PartialEq)]
pub struct ChunkProduct<T> {
    /// Position of the chunk in the list that was asked for.
    pub index: usize,
    /// Which part of C this is.
    pub chunk: ProductChunk,
    /// The values of that part.
    pub product: Csr<T>,
    /// What computing it cost.
    pub timing: ChunkTiming,
}

/// Receives computed chunks as they complete, in any order; an error stops the run.
pub type ChunkSink<'a, T> = dyn FnMut(ChunkProduct<T>) -> Result<()> + 'a;

/// Told each chunk written in place (its position in the list, what it cost) as it completes,
/// in any order; an error stops the run.
pub type PlaceDone<'a> = dyn FnMut(usize, ChunkTiming) -> Result<()> + 'a;

/// What a backend is and can do, independent of the scalar type.
pub trait Device: Send + Sync {
    /// The device this backend runs on.
    fn info(&self) -> DeviceInfo;
    /// The operations and scalar types it runs: computed once when the backend is made, so
    /// that operations can check it on every call.
    fn capabilities(&self) -> &Capabilities;
    /// The memory its resident matrices live in. Backends on the same memory share handles.
    /// [`MemorySpace::Host`] for a backend that computes in host memory; required, so that a
    /// device backend cannot claim the host's by leaving it out.
    fn memory_space(&self) -> MemorySpace;
    /// The pool its device memory is reserved from, for backends with one: its limit is the
    /// device memory the backend may use, and its peak what calls actually held.
    fn memory_pool(&self) -> Option<Arc<MemoryPool>> {
        None
    }
    /// How fast the device is, for cost models ([`DeviceProfile`]). The default is
    /// [`DeviceProfile::defaults`] for its [`info`](Self::info) and
    /// [`memory_space`](Self::memory_space); a backend overrides it with what its driver
    /// reports.
    fn profile(&self) -> DeviceProfile {
        DeviceProfile::defaults(&self.info(), &self.memory_space())
    }
    /// The driver's version where the backend knows it (the OpenCL driver's version string):
    /// a calibration measured under another driver is not reused.
    fn driver_version(&self) -> Option<String> {
        None
    }
    /// [`Error::NoDevice`] when the backend has nothing to run on now (a scheduler holding no
    /// backends); every operation asks first. The default is always available.
    fn available(&self) -> Result<()> {
        Ok(())
    }
}

/// The operations of a backend over scalar type `T`.
///
/// Every public operation validates its operands once, above the backend ([`validate`]): shapes,
/// handles of this backend's memory, and [`Error::Unsupported`] for what
/// [`Device::capabilities`] does not list; the backend's `*_checked` methods receive what
/// passed. Results are canonical. SpGEMM keeps every entry the
/// product's structure creates, also where values cancel to zero, so the result's structure
/// depends only on the operands' structures.
///
/// SpMV and SpMM give one IEEE answer whatever A's format: **stored entries are multiplied,
/// padding is not.** The entries of a CSR, CSC, COO, CSPR or ELLPACK-R matrix are what it
/// stores (explicit zeros included; ELLPACK-R's row padding is not an entry); the entries of a
/// DIA or BSR matrix are the non-zero values of its diagonals or blocks, a zero there being
/// padding of the band or fill of the block. So `0 × ∞` or `0 × NaN` is computed only for an
/// explicit zero of a format that stores them, and a DIA or BSR matrix gives the answer of its
/// `to_csr()`. An empty row gives `+0.0`.
///
/// Sizes that come from the operands' shapes (results, offsets, accumulators) are asked of the
/// host without aborting: a result the host cannot hold is [`Error::OutOfMemory`] with the
/// bytes it needs ([`crate::host`]), checked before any work, the same on every backend.
///
/// Operands are host matrices or [`ResidentCsr`] / [`ResidentDense`] handles of this backend's
/// [`Device::memory_space`] (a handle from another memory is [`Error::WrongDevice`]). Each
/// operation comes as `*_with` (result on the host) and `*_resident` (result left in the
/// backend's memory); `spgemm`, `spmm` and `spmv` are the host-in, host-out conveniences.
///
/// ```
/// use hetsparse_core::{Backend, Csr, ReferenceBackend, RunControl, SpgemmOptions};
/// let backend = ReferenceBackend;
/// let a = Csr::<f64>::identity(3)?;
/// let a_res = backend.upload(&a)?;                       // into the backend's memory
/// let run = RunControl::new();
/// let c = backend.spgemm_resident((&a_res).into(), (&a_res).into(), &SpgemmOptions::new(), &run)?;
/// let cc = backend.spgemm_resident((&c).into(), (&a_res).into(), &SpgemmOptions::new(), &run)?;
/// assert_eq!(backend.download(&cc)?, a);                   // the only copy to the host
/// # Ok::<(), hetsparse_core::Error>(())
/// ```
pub trait Backend<T: Scalar>: Device {
    /// [`Backend::spgemm_with`] on operands it has [`validate`]d: shapes that chain, handles in
    /// this backend's memory, SpGEMM over `T` with `options` in its capabilities.
    fn spgemm_checked(
        &self,
        a: CsrOperand<'_, T>,
        b: CsrOperand<'_, T>,
        options: &SpgemmOptions,
        run: &RunControl,
        checked: Validated,
    ) -> Result<Csr<T>>;

    /// [`Backend::spmm_with`] on operands it has [`validate`]d: shapes that chain, handles in
    /// this backend's memory, SpMM of A's format over `T` in its capabilities, a result the
    /// host can hold.
    fn spmm_checked(
        &self,
        a: SparseOperand<'_, T>,
        b: DenseOperand<'_, T>,
        options: &SpmmOptions,
        run: &RunControl,
        checked: Validated,
    ) -> Result<Dense<T>>;

    /// [`Backend::spmv_with`] on operands it has [`validate`]d: shapes that chain, handles in
    /// this backend's memory (a resident vector of one column), SpMV of A's format over `T` in
    /// its capabilities, a result the host can hold.
    fn spmv_checked(
        &self,
        a: SparseOperand<'_, T>,
        x: VectorOperand<'_, T>,
        options: &SpmvOptions,
        run: &RunControl,
        checked: Validated,
    ) -> Result<Vec<T>>;

    /// How the backend keeps resident matrices: [`Residency::Host`] (handles hold host
    /// matrices, everything built from the operations above) or [`Residency::Own`] (its own
    /// [`ResidentOps`]). Required, so that a device backend cannot inherit host residency by
    /// leaving it out.
    fn residency(&self) -> Residency<'_, T>;

    /// The backend's own chunk protocol, if it pipelines chunks ([`ChunkPipeline`]); `None`,
    /// the default, runs the [`chunks::plain`] one.
    fn chunk_pipeline(&self) -> Option<&dyn ChunkPipeline<T>> {
        None
    }

    // --- The operations, validated once here ---------------------------------------------------

    /// `C = A · B`, the result on the host.
    fn spgemm_with(
        &self,
        a: CsrOperand<'_, T>,
        b: CsrOperand<'_, T>,
        options: &SpgemmOptions,
        run: &RunControl,
    ) -> Result<Csr<T>> {
        let checked = validate::spgemm(self, &a, &b, options)?;
        self.spgemm_checked(a, b, options, run, checked)
    }

    /// `C = A · B` with B given as two row blocks read in place ([`SplicedCsr`]: a
    /// distributed product's own rows of B and those it fetched), host in, host out.
    fn spgemm_spliced(
        &self,
        a: &Csr<T>,
        b: &SplicedCsr<'_, T>,
        options: &SpgemmOptions,
        run: &RunControl,
    ) -> Result<Csr<T>> {
        let checked = validate::spgemm_spliced(self, a, b, options)?;
        self.spgemm_spliced_checked(a, b, options, run, checked)
    }

    /// [`Backend::spgemm_spliced`] on operands it has [`validate`]d.
    ///
    /// By default the rows of B that A's columns reach are copied into one matrix and A's
    /// columns shifted to them ([`SplicedCsr::reached_by`]), then multiplied by
    /// [`Backend::spgemm_checked`]; a backend that reads B's rows one at a time (the CPU's)
    /// overrides this and copies nothing.
    fn spgemm_spliced_checked(
        &self,
        a: &Csr<T>,
        b: &SplicedCsr<'_, T>,
        options: &SpgemmOptions,
        run: &RunControl,
        checked: Validated,
    ) -> Result<Csr<T>> {
        let (a, b) = b.reached_by(a)?;
        self.spgemm_checked(a.as_ref().into(), (&b).into(), options, run, checked)
    }

    /// `C = A · B` for a sparse A of any format (CSR if resident) and a dense B; C has B's
    /// layout and is returned on the host.
    fn spmm_with(
        &self,
        a: SparseOperand<'_, T>,
        b: DenseOperand<'_, T>,
        options: &SpmmOptions,
        run: &RunControl,
    ) -> Result<Dense<T>> {
        let checked = validate::spmm(self, &a, &b, false)?;
        self.spmm_checked(a, b, options, run, checked)
    }

    /// `y = A · x` for a sparse A of any format (CSR if resident), `y` on the host.
    fn spmv_with(
        &self,
        a: SparseOperand<'_, T>,
        x: VectorOperand<'_, T>,
        options: &SpmvOptions,
        run: &RunControl,
    ) -> Result<Vec<T>> {
        let checked = validate::spmv(self, &a, &x, false)?;
        self.spmv_checked(a, x, options, run, checked)
    }

    /// The sparse-vector product `kind` on operands [`Backend::mxv_with`] or
    /// [`Backend::vxm_with`] validated: `u`'s length chains with A, the mask has `w`'s
    /// length, the backend claims the semiring and mask over `T`
    /// ([`Capabilities::vector_product_features`]). Computes only the positions of `w` the
    /// mask admits; `w` holds an entry wherever an admitted product lands. The default, for
    /// backends claiming none: [`Error::Unsupported`].
    fn vector_product_checked(
        &self,
        kind: VectorProductKind,
        a: CsrOperand<'_, T>,
        u: &crate::SparseVector<T>,
        options: &VectorProductOptions,
        run: &RunControl,
        checked: Validated,
    ) -> Result<crate::SparseVector<T>> {
        let _ = (a, u, options, run, checked);
        Err(Error::Unsupported {
            backend: self.info().backend,
            op: Operation::VectorProduct(kind),
            scalar: T::TYPE,
            detail: None,
        })
    }

    /// `w⟨m⟩ = A ⊕.⊗ u` over the semiring of `options`, masked by its mask: `w(i) = ⊕ₖ
    /// A(i,k) ⊗ u(k)` for the positions `i` the mask admits. The accumulator of `options` is
    /// not applied here ([`crate::vector::write_back_vector`] merges the product into a `w`).
    fn mxv_with(
        &self,
        a: CsrOperand<'_, T>,
        u: &crate::SparseVector<T>,
        options: &VectorProductOptions,
        run: &RunControl,
    ) -> Result<crate::SparseVector<T>> {
        let kind = VectorProductKind::Mxv;
        let checked = validate::vector_product(self, kind, &a, u, options)?;
        self.vector_product_checked(kind, a, u, options, run, checked)
    }

    /// `wᵀ⟨mᵀ⟩ = uᵀ ⊕.⊗ A` over the semiring of `options`, masked by its mask: `w(j) = ⊕ₖ
    /// u(k) ⊗ A(k,j)` (so `any_secondi` gives, for each `j`, a `k` of `u` with an edge `k → j`:
    /// a parent in a breadth-first search). The accumulator is not applied, as for
    /// [`Backend::mxv_with`].
    fn vxm_with(
        &self,
        u: &crate::SparseVector<T>,
        a: CsrOperand<'_, T>,
        options: &VectorProductOptions,
        run: &RunControl,
    ) -> Result<crate::SparseVector<T>> {
        let kind = VectorProductKind::Vxm;
        let checked = validate::vector_product(self, kind, &a, u, options)?;
        self.vector_product_checked(kind, a, u, options, run, checked)
    }

    // --- Specialised formats: overridden by backends with kernels of their own -------------

    /// `C = A · B` for band matrices in DIA format.
    fn dia_spgemm(&self, a: &Dia<T>, b: &Dia<T>) -> Result<Dia<T>> {
        let checked = validate::dia(self, a, b)?;
        self.dia_spgemm_checked(a, b, checked)
    }

    /// [`Backend::dia_spgemm`] on operands whose shapes chain. The default multiplies their
    /// CSR forms.
    fn dia_spgemm_checked(&self, a: &Dia<T>, b: &Dia<T>, _checked: Validated) -> Result<Dia<T>> {
        if a.ndiags() == 0 || b.ndiags() == 0 {
            // No band, no product: and the CSR detour would cost row offsets sized by the
            // shape (32 GiB for u32::MAX rows) for an operand of a few bytes.
            return Ok(Dia::try_new(a.nrows(), b.ncols(), Vec::new(), Vec::new())?);
        }
        let c = self.spgemm(&a.to_csr()?, &b.to_csr()?, SpgemmAlgorithm::Auto)?;
        Dia::from_csr(&c, u64::MAX)
    }

    /// `C = A · B` for block matrices; C has blocks of A's rows × B's columns.
    fn bsr_spgemm(&self, a: &Bsr<T>, b: &Bsr<T>) -> Result<Bsr<T>> {
        let checked = validate::bsr(self, a, b)?;
        self.bsr_spgemm_checked(a, b, checked)
    }

    /// [`Backend::bsr_spgemm`] on operands whose shapes and blocks chain. The default
    /// multiplies their CSR forms.
    fn bsr_spgemm_checked(&self, a: &Bsr<T>, b: &Bsr<T>, _checked: Validated) -> Result<Bsr<T>> {
        let c = self.spgemm(&a.to_csr()?, &b.to_csr()?, SpgemmAlgorithm::Auto)?;
        Bsr::from_csr(&c, (a.block_shape().0, b.block_shape().1))
    }

    // --- Residency: dispatched on `residency()`, not overridden ----------------------------

    /// Copies `m` into the backend's memory.
    fn upload(&self, m: &Csr<T>) -> Result<ResidentCsr<T>> {
        match self.residency() {
            Residency::Host => residency::in_host::store_owned(self, m.clone()),
            Residency::Own(r) => r.store(m),
        }
    }

    /// Takes `m` into the backend's memory; a backend that computes in host memory keeps it
    /// where it is, copying nothing.
    fn upload_owned(&self, m: Csr<T>) -> Result<ResidentCsr<T>> {
        match self.residency() {
            Residency::Host => residency::in_host::store_owned(self, m),
            Residency::Own(r) => r.store_owned(m),
        }
    }

    /// A resident matrix with `pattern`'s structure and new `values` (one per stored entry):
    /// only the values are copied, and the result keeps `pattern`'s identity, so plans made
    /// for it accept it.
    fn upload_values(&self, pattern: &ResidentCsr<T>, values: &[T]) -> Result<ResidentCsr<T>> {
        let checked = validate::new_values(self, pattern, values)?;
        match self.residency() {
            Residency::Host => residency::in_host::store_values(self, pattern, values, checked),
            Residency::Own(r) => r.store_values(pattern, values, checked),
        }
    }

    /// Copies a resident matrix to the host.
    fn download(&self, m: &ResidentCsr<T>) -> Result<Csr<T>> {
        let checked = validate::resident_csr(self, m)?;
        match self.residency() {
            Residency::Host => residency::in_host::load(self, m, checked),
            Residency::Own(r) => r.load(m, checked),
        }
    }

    /// Copies a resident matrix's stored values to the host, one per stored entry in CSR
    /// order (row by row), without its structure: what a reduction over the entries reads
    /// (a triangle count sums `C⟨L⟩ = L·L`'s values), at a fraction of a whole
    /// [`download`](Self::download) where the matrix has far fewer entries than rows.
    fn download_values(&self, m: &ResidentCsr<T>) -> Result<Vec<T>> {
        let checked = validate::resident_csr(self, m)?;
        match self.residency() {
            Residency::Host => residency::in_host::load_values(self, m, checked),
            Residency::Own(r) => r.load_values(m, checked),
        }
    }

    /// Copies a dense matrix into the backend's memory.
    fn upload_dense(&self, d: &Dense<T>) -> Result<ResidentDense<T>> {
        match self.residency() {
            Residency::Host => residency::in_host::store_dense(self, d),
            Residency::Own(r) => r.store_dense(d),
        }
    }

    /// Copies a vector into the backend's memory, as a one-column dense matrix.
    fn upload_vector(&self, x: &[T]) -> Result<ResidentDense<T>> {
        let column = Dense::try_new(x.len(), 1, Layout::ColMajor, x.to_vec())?;
        self.upload_dense(&column)
    }

    /// Copies a resident dense matrix to the host.
    fn download_dense(&self, d: &ResidentDense<T>) -> Result<Dense<T>> {
        let checked = validate::resident_dense(self, d)?;
        match self.residency() {
            Residency::Host => residency::in_host::load_dense(self, d, checked),
            Residency::Own(r) => r.load_dense(d, checked),
        }
    }

    /// `C = A · B`, the result left in the backend's memory with pattern identity
    /// [`PatternId::of_product`] of the operands'.
    fn spgemm_resident(
        &self,
        a: CsrOperand<'_, T>,
        b: CsrOperand<'_, T>,
        options: &SpgemmOptions,
        run: &RunControl,
    ) -> Result<ResidentCsr<T>> {
        let checked = validate::spgemm(self, &a, &b, options)?;
        match self.residency() {
            Residency::Host => residency::in_host::spgemm_stored(self, a, b, options, run, checked),
            Residency::Own(r) => r.spgemm_stored(a, b, options, run, checked),
        }
    }

    /// SpMM with the result left in the backend's memory.
    fn spmm_resident(
        &self,
        a: SparseOperand<'_, T>,
        b: DenseOperand<'_, T>,
        options: &SpmmOptions,
        run: &RunControl,
    ) -> Result<ResidentDense<T>> {
        let checked = validate::spmm(self, &a, &b, true)?;
        match self.residency() {
            Residency::Host => residency::in_host::spmm_stored(self, a, b, options, run, checked),
            Residency::Own(r) => r.spmm_stored(a, b, options, run, checked),
        }
    }

    /// SpMV with the result left in the backend's memory (one column).
    fn spmv_resident(
        &self,
        a: SparseOperand<'_, T>,
        x: VectorOperand<'_, T>,
        options: &SpmvOptions,
        run: &RunControl,
    ) -> Result<ResidentDense<T>> {
        let checked = validate::spmv(self, &a, &x, true)?;
        match self.residency() {
            Residency::Host => residency::in_host::spmv_stored(self, a, x, options, run, checked),
            Residency::Own(r) => r.spmv_stored(a, x, options, run, checked),
        }
    }

    /// The symbolic part of `A · B`: the product's structure and what executing it needs.
    fn plan_spgemm(
        &self,
        a: CsrOperand<'_, T>,
        b: CsrOperand<'_, T>,
        options: &SpgemmOptions,
    ) -> Result<SpgemmPlan<T>> {
        let checked = validate::spgemm(self, &a, &b, options)?;
        match self.residency() {
            Residency::Host => residency::in_host::plan(self, a, b, options, checked),
            Residency::Own(r) => r.plan(a, b, options, checked),
        }
    }

    /// Runs `plan` with `a` and `b` (the planned patterns, any values): only the numeric
    /// phase. The result is left in the backend's memory.
    fn execute_spgemm(
        &self,
        plan: &SpgemmPlan<T>,
        a: CsrOperand<'_, T>,
        b: CsrOperand<'_, T>,
        run: &RunControl,
    ) -> Result<ResidentCsr<T>> {
        let checked = validate::execute(self, plan, &a, &b)?;
        match self.residency() {
            Residency::Host => residency::in_host::execute(self, plan, a, b, run, checked),
            Residency::Own(r) => r.execute(plan, a, b, run, checked),
        }
    }

    /// What `A · B` with these options needs in memory, before anything runs. The output is
    /// bounded by the intermediate products (each creates at most one entry); a plan's
    /// [`SpgemmPlan::requirement`] is exact.
    fn spgemm_requirement(
        &self,
        a: CsrOperand<'_, T>,
        b: CsrOperand<'_, T>,
        options: &SpgemmOptions,
    ) -> Result<MemoryRequirement> {
        let checked = validate::spgemm(self, &a, &b, options)?;
        match self.residency() {
            Residency::Host => residency::in_host::requirement(self, a, b, options, checked),
            Residency::Own(r) => r.requirement(a, b, options, checked),
        }
    }

    // --- Chunks: dispatched on `chunk_pipeline()`, not overridden ----------------------------

    /// Computes the listed chunks of `A · B`, handing each to `sink` as it completes. A GPU
    /// backend pipelines them, overlapping transfers with computation; results need not fit in
    /// device memory together. `run` is checked between chunks; an error names its chunk.
    ///
    /// A chunk multiplies two windows of the operands, [`ProductChunk::windows`]: backends read
    /// them where they lie. The [`chunks::plain`] protocol hands each chunk to
    /// [`Backend::spgemm_with`], as the operands themselves where a window is a whole matrix
    /// and as copies of the windows ([`CsrWindow::to_csr`]) otherwise.
    fn spgemm_chunks(
        &self,
        a: CsrOperand<'_, T>,
        b: CsrOperand<'_, T>,
        chunks: &[ProductChunk],
        options: &SpgemmOptions,
        run: &RunControl,
        sink: &mut ChunkSink<'_, T>,
    ) -> Result<()> {
        let checked = validate::chunks(self, &a, &b, chunks, options)?;
        match self.chunk_pipeline() {
            Some(p) => p.chunks(a, b, chunks, options, run, sink, checked),
            None => chunks::plain::spgemm_chunks(self, a, b, chunks, options, run, sink, checked),
        }
    }

    /// Computes chunks of `A · B` straight into their places in C: each [`ChunkPlace`] names
    /// its chunk (rows of A, columns of B as given here) and takes the chunk's rows in order,
    /// each with the entries the symbolic counts gave it; `done` is told each chunk (by
    /// position) with its timing once its place is complete. An error names its chunk as
    /// [`Backend::spgemm_chunks`]' do; a place whose rows do not match the chunk's product
    /// refuses them with [`Error::Internal`].
    ///
    /// The [`chunks::plain`] protocol computes each chunk with [`Backend::spgemm_chunks`] and
    /// copies it into its place. A backend whose results pass through a staging buffer (a
    /// GPU's pinned output buffers) writes from there into the places instead, so that C is
    /// written once.
    fn spgemm_chunks_into(
        &self,
        a: CsrOperand<'_, T>,
        b: CsrOperand<'_, T>,
        places: &mut [ChunkPlace<'_, T>],
        options: &SpgemmOptions,
        run: &RunControl,
        done: &mut PlaceDone<'_>,
    ) -> Result<()> {
        let chunks: Vec<ProductChunk> = places.iter().map(|p| p.chunk().clone()).collect();
        let checked = validate::chunks(self, &a, &b, &chunks, options)?;
        match self.chunk_pipeline() {
            Some(p) => p.chunks_into(a, b, places, options, run, done, checked),
            None => {
                chunks::plain::spgemm_chunks_into(self, a, b, places, options, run, done, checked)
            }
        }
    }

    /// The entries of each row of each listed chunk of `A · B`, the symbolic phase alone, for
    /// a caller that places C before computing it ([`ProductLayout`]): `counts` gets each
    /// chunk's position and one count per row, in any order. An error names its chunk.
    ///
    /// The [`chunks::plain`] protocol counts on the host
    /// ([`crate::analysis::symbolic_panel_nnz`]); a device backend counts with its own
    /// symbolic kernels.
    fn spgemm_chunk_counts(
        &self,
        a: CsrOperand<'_, T>,
        b: CsrOperand<'_, T>,
        chunks: &[ProductChunk],
        options: &SpgemmOptions,
        run: &RunControl,
        counts: &mut dyn FnMut(usize, &[u64]) -> Result<()>,
    ) -> Result<()> {
        let checked = validate::chunks(self, &a, &b, chunks, options)?;
        match self.chunk_pipeline() {
            Some(p) => p.chunk_counts(a, b, chunks, options, run, counts, checked),
            None => chunks::plain::spgemm_chunk_counts(
                self, a, b, chunks, options, run, counts, checked,
            ),
        }
    }

    /// Rows `rows` of `C = A · B` for band matrices, written where they lie: `c[d]` receives
    /// rows `rows` of C's diagonal of offset `offsets[d]`, and every one of its slots is
    /// written (zeros where nothing lands). `offsets` must be C's diagonals,
    /// [`Dia::product_offsets`] (a scheduler splitting C by rows writes each device's rows
    /// into C itself, with no copy). The [`chunks::plain`] protocol multiplies the rows'
    /// [`DiaRowBlock`](crate::format::DiaRowBlock) as a product of its own and copies its diagonals in.
    fn dia_spgemm_rows(
        &self,
        a: &Dia<T>,
        b: &Dia<T>,
        rows: Range<usize>,
        offsets: &[i64],
        c: &mut [&mut [MaybeUninit<T>]],
    ) -> Result<()> {
        let checked = validate::dia_rows(a, b, &rows, offsets, c)?;
        match self.chunk_pipeline() {
            Some(p) => p.dia_rows(a, b, rows, offsets, c, checked),
            None => chunks::plain::dia_spgemm_rows(self, a, b, rows, offsets, c, checked),
        }
    }

    // --- Host conveniences ---------------------------------------------------------------------

    /// `C = A · B` with the given algorithm, host in, host out.
    fn spgemm(&self, a: &Csr<T>, b: &Csr<T>, algorithm: SpgemmAlgorithm) -> Result<Csr<T>> {
        self.spgemm_with(
            a.into(),
            b.into(),
            &algorithm.into(),
            &RunControl::unwatched(),
        )
    }

    /// `C = A · B` for a sparse A of any format and a dense B; C has B's layout.
    fn spmm(&self, a: SparseRef<'_, T>, b: &Dense<T>) -> Result<Dense<T>> {
        self.spmm_with(
            a.into(),
            b.into(),
            &SpmmOptions::new(),
            &RunControl::unwatched(),
        )
    }

    /// `y = A · x` for a sparse A of any format.
    fn spmv(&self, a: SparseRef<'_, T>, x: &[T]) -> Result<Vec<T>> {
        self.spmv_with(
            a.into(),
            x.into(),
            &SpmvOptions::new(),
            &RunControl::unwatched(),
        )
    }
}

/// Operand checks shared by every backend, so that each returns the same errors.
pub mod check {
    use super::*;

    /// The arguments of [`Backend::dia_spgemm_rows`]: shapes that chain, rows inside A,
    /// increasing offsets, and one output slice of `rows.len()` per offset.
    pub fn dia_rows<T: Scalar>(
        a: &Dia<T>,
        b: &Dia<T>,
        rows: &Range<usize>,
        offsets: &[i64],
        c: &[&mut [MaybeUninit<T>]],
    ) -> Result<()> {
        shapes("DIA×DIA SpGEMM", a.shape(), b.shape())?;
        if rows.start > rows.end || rows.end > a.nrows() {
            return Err(Error::InvalidArgument(format!(
                "DIA×DIA rows {rows:?}: outside A's {} rows",
                a.nrows()
            )));
        }
        if offsets.windows(2).any(|w| w[0] >= w[1]) {
            return Err(Error::InvalidArgument(
                "DIA×DIA rows: C's offsets must be strictly increasing".into(),
            ));
        }
        if c.len() != offsets.len() {
            return Err(Error::InvalidArgument(format!(
                "DIA×DIA rows: {} output diagonals for {} offsets",
                c.len(),
                offsets.len()
            )));
        }
        if let Some(d) = c.iter().position(|out| out.len() != rows.len()) {
            return Err(Error::InvalidArgument(format!(
                "DIA×DIA rows {rows:?}: output diagonal {d} holds {} slots, not {}",
                c[d].len(),
                rows.len()
            )));
        }
        Ok(())
    }

    /// `left` × `right` must agree on the inner dimension.
    pub fn shapes(op: &'static str, left: (usize, usize), right: (usize, usize)) -> Result<()> {
        if left.1 != right.0 {
            return Err(Error::ShapeMismatch {
                op,
                left_rows: left.0 as u64,
                left_cols: left.1 as u64,
                right_rows: right.0 as u64,
                right_cols: right.1 as u64,
            });
        }
        Ok(())
    }

    /// SpGEMM operands.
    pub fn spgemm<T: Scalar>(a: &Csr<T>, b: &Csr<T>) -> Result<()> {
        shapes("SpGEMM", a.shape(), b.shape())
    }

    /// BSR SpGEMM operands: shapes and matching inner block size.
    pub fn bsr_spgemm<T: Scalar>(a: &Bsr<T>, b: &Bsr<T>) -> Result<()> {
        shapes("BSR×BSR SpGEMM", a.shape(), b.shape())?;
        if a.block_shape().1 != b.block_shape().0 {
            return Err(Error::InvalidArgument(format!(
                "BSR×BSR SpGEMM: blocks of {:?} and {:?} do not chain (inner sizes {} and {})",
                a.block_shape(),
                b.block_shape(),
                a.block_shape().1,
                b.block_shape().0
            )));
        }
        Ok(())
    }

    /// SpMV operands, and a result `y` the host can hold ([`crate::host::check_buffer`]):
    /// checked before anything is converted or allocated, so every backend refuses the same
    /// sizes with the same error.
    pub fn spmv<T: Scalar>(a: &SparseRef<'_, T>, x: &[T]) -> Result<()> {
        shapes("SpMV", a.shape(), (x.len(), 1))?;
        let copy = copy_offsets(a.format(), a.shape().0);
        host_result::<T>(a.shape().0 as u64, copy, "SpMV")
    }

    /// Row offsets of A's CSR copy where some backend multiplies A through one (every format
    /// but CSR and ELLPACK-R, which the row kernels read as they are), else 0: sized by the
    /// shape, so they are counted before anything is converted.
    pub(crate) fn copy_offsets(format: SparseFormat, nrows: usize) -> u64 {
        match format {
            SparseFormat::Csr | SparseFormat::Ellr => 0,
            _ => nrows as u64 + 1,
        }
    }

    /// A result of `values` values, together with A's CSR copy of `copy_offsets` row offsets
    /// where one is made, under the host's buffer limit: both are sized by the shape, so a
    /// matrix of a few entries and `u32::MAX` rows must not get the one and then the other.
    /// Every backend checks the same sum, so the same operands give the same outcome
    /// everywhere.
    pub(crate) fn host_result<T: Scalar>(values: u64, copy_offsets: u64, op: &str) -> Result<()> {
        crate::host::check_buffer::<T>(values, &format!("{op} result"))?;
        if copy_offsets == 0 {
            return Ok(());
        }
        let bytes = u128::from(values) * size_of::<T>() as u128 + u128::from(copy_offsets) * 8;
        if bytes > u128::from(crate::host::buffer_limit()) {
            return Err(crate::host::out_of_memory(
                &format!("{op} result and the CSR copy of A"),
                u64::try_from(bytes).unwrap_or(u64::MAX),
            ));
        }
        Ok(())
    }

    /// SpMM operands, and a result `C` the host can hold ([`crate::host::check_buffer`]): a
    /// matrix of `u32::MAX` rows stored in a few bytes times a few columns asks for terabytes,
    /// which is [`Error::OutOfMemory`] before anything is converted or allocated.
    pub fn spmm<T: Scalar>(a: &SparseRef<'_, T>, b: &Dense<T>) -> Result<()> {
        shapes("SpMM", a.shape(), b.shape())?;
        let values = (a.shape().0 as u64).saturating_mul(b.ncols() as u64);
        host_result::<T>(values, copy_offsets(a.format(), a.shape().0), "SpMM")
    }

    /// Chunks must lie inside the `a.0 × b.1` product.
    pub fn chunks(a: (usize, usize), b: (usize, usize), chunks: &[ProductChunk]) -> Result<()> {
        for (k, c) in chunks.iter().enumerate() {
            if c.rows.start > c.rows.end
                || c.rows.end > a.0
                || c.cols.start > c.cols.end
                || c.cols.end > b.1
            {
                return Err(Error::InvalidArgument(format!(
                    "chunk {k} (rows {:?}, columns {:?}) is outside the {}×{} product",
                    c.rows, c.cols, a.0, b.1
                )));
            }
        }
        Ok(())
    }

    /// [`Error::Unsupported`] unless `device` runs SpGEMM over `T` with `options`: its
    /// algorithm, and its semiring, mask and accumulator where they are not the plain ones
    /// ([`Capabilities::spgemm_features`]). Every SpGEMM entry point calls it, so that options
    /// a backend does not run are refused, never ignored.
    pub fn spgemm_supported<T: Scalar>(
        device: &(impl Device + ?Sized),
        options: &SpgemmOptions,
    ) -> Result<()> {
        let op = Operation::Spgemm(options.algorithm);
        supported::<T>(device, op)?;
        if options.is_plain() {
            return Ok(());
        }
        match options.unsupported_by(&device.capabilities().spgemm_features(T::TYPE)) {
            None => Ok(()),
            Some(what) => Err(Error::Unsupported {
                backend: device.info().backend,
                op,
                scalar: T::TYPE,
                detail: Some(what),
            }),
        }
    }

    /// [`Error::Unsupported`] unless `device` lists `op` for `T`.
    pub fn supported<T: Scalar>(device: &(impl Device + ?Sized), op: Operation) -> Result<()> {
        if device.capabilities().supports(op, T::TYPE) {
            Ok(())
        } else {
            Err(Error::Unsupported {
                backend: device.info().backend,
                op,
                scalar: T::TYPE,
                detail: None,
            })
        }
    }

    /// [`Error::WrongDevice`] unless `space` is `device`'s memory.
    pub fn same_space(
        device: &(impl Device + ?Sized),
        space: &MemorySpace,
        what: &str,
    ) -> Result<()> {
        let own = device.memory_space();
        if &own != space {
            return Err(Error::WrongDevice {
                what: what.into(),
                found: space.clone(),
                expected: own,
            });
        }
        Ok(())
    }

    /// `device`'s memory when it is the host's; for the defaults that keep results there.
    pub fn host_space(device: &(impl Device + ?Sized), method: &str) -> Result<MemorySpace> {
        let space = device.memory_space();
        if space != MemorySpace::Host {
            return Err(Error::Internal {
                backend: device.info().backend,
                what: format!("a backend computing in {space} must implement `{method}`"),
            });
        }
        Ok(space)
    }

    /// `values` must hold one value per stored entry.
    pub fn value_count(nnz: u64, values: usize) -> Result<()> {
        if values as u64 != nnz {
            return Err(Error::InvalidArgument(format!(
                "new values: {values} given for a pattern of {nnz} entries"
            )));
        }
        Ok(())
    }

    /// An upper bound of nnz(A·B): each row holds at most its intermediate products and at
    /// most B's columns.
    pub fn output_bound<T: Scalar>(a: &Csr<T>, b: &Csr<T>) -> Result<u64> {
        let per_row = crate::analysis::row_products(a, b)?;
        let width = b.ncols() as u64;
        Ok(per_row.iter().map(|&p| p.min(width)).sum())
    }
}

/// Operands as host matrices, for backends that compute in host memory: a host operand itself,
/// or the matrix behind a handle of the backend's memory kept in host storage. The public
/// methods have validated the operands ([`validate`]); these only convert them.
pub mod host_operands {
    use super::*;

    /// The host matrix behind a handle of `device`'s memory held in host storage;
    /// [`Error::Internal`] for a handle over other storage.
    pub fn csr_handle<'a, T: Scalar>(
        device: &(impl Device + ?Sized),
        m: &'a ResidentCsr<T>,
        what: &str,
    ) -> Result<&'a Csr<T>> {
        m.host().ok_or_else(|| Error::Internal {
            backend: device.info().backend,
            what: format!("{what}: a resident matrix of this backend is not in host storage"),
        })
    }

    /// The host matrix behind a dense handle of `device`'s memory held in host storage;
    /// [`Error::Internal`] for a handle over other storage.
    pub fn dense_handle<'a, T: Scalar>(
        device: &(impl Device + ?Sized),
        d: &'a ResidentDense<T>,
        what: &str,
    ) -> Result<&'a Dense<T>> {
        d.host().ok_or_else(|| Error::Internal {
            backend: device.info().backend,
            what: format!("{what}: a resident dense matrix of this backend is not in host storage"),
        })
    }

    /// A SpGEMM operand as a host matrix: itself, or a host-stored handle of `device`'s memory.
    pub fn csr<'a, T: Scalar>(
        device: &(impl Device + ?Sized),
        m: CsrOperand<'a, T>,
    ) -> Result<&'a Csr<T>> {
        match m {
            CsrOperand::Host(m) => Ok(m),
            CsrOperand::Resident(r) => csr_handle(device, r, "operand"),
        }
    }

    /// A SpMV/SpMM sparse operand as a host matrix of any format.
    pub fn sparse<'a, T: Scalar>(
        device: &(impl Device + ?Sized),
        m: SparseOperand<'a, T>,
    ) -> Result<SparseRef<'a, T>> {
        match m {
            SparseOperand::Host(m) => Ok(m),
            SparseOperand::Resident(r) => Ok(SparseRef::Csr(csr_handle(device, r, "operand")?)),
        }
    }

    /// A SpMM dense operand as a host matrix.
    pub fn dense<'a, T: Scalar>(
        device: &(impl Device + ?Sized),
        d: DenseOperand<'a, T>,
    ) -> Result<&'a Dense<T>> {
        match d {
            DenseOperand::Host(d) => Ok(d),
            DenseOperand::Resident(r) => dense_handle(device, r, "operand"),
        }
    }

    /// A SpMV vector as a host slice.
    pub fn vector<'a, T: Scalar>(
        device: &(impl Device + ?Sized),
        x: VectorOperand<'a, T>,
    ) -> Result<&'a [T]> {
        match x {
            VectorOperand::Host(x) => Ok(x),
            // One column, as validated.
            VectorOperand::Resident(r) => Ok(dense_handle(device, r, "operand")?.data()),
        }
    }
}

/// One backend seen as `dyn Backend<T>` for each of the six scalar types (what
/// `every_scalar!` returns; not for use otherwise).
#[doc(hidden)]
pub type EveryScalar<'b> = (
    &'b dyn Backend<f32>,
    &'b dyn Backend<f64>,
    &'b dyn Backend<crate::Complex<f32>>,
    &'b dyn Backend<crate::Complex<f64>>,
    &'b dyn Backend<crate::f16>,
    &'b dyn Backend<crate::bf16>,
);

/// Defines `pub fn every_scalar` in a backend crate: its backend seen as `dyn Backend<T>` for each
/// of the six scalar types, which makes that crate compile all of the backend's methods for every
/// scalar once.
///
/// An aid to compile times, not to users. Builds that share generic code between crates
/// (unoptimised and `opt-level = 1`: the workspace's dev profile) let the crates built on a
/// backend — the scheduler, the facade, every test binary — link that code instead of each
/// compiling a copy. The function exists only where that pays: in builds with debug assertions
/// (optimised builds share no generic code) that are tests (hetsparse-core's `conformance`
/// feature, which the backend crates' dev-dependencies turn on); elsewhere the macro expands to
/// nothing. The function is `#[inline(never)]`: without incremental compilation (CI's builds)
/// rustc would otherwise treat so small a function as inlinable across crates and compile it,
/// and the vtables with it, only where it is called.
///
/// `every_scalar!(Backend)` takes one backend value implementing `Backend<T>` for all six;
/// `every_scalar!(Backend<_>)` takes six values of a type generic over the scalar.
#[cfg(feature = "conformance")]
#[doc(hidden)]
#[macro_export]
macro_rules! every_scalar {
    ($backend:ident<_>) => {
        /// The backend's code compiled here for every scalar type (see
        /// `hetsparse_core::every_scalar!`).
        #[cfg(debug_assertions)]
        #[doc(hidden)]
        #[allow(clippy::type_complexity)]
        #[inline(never)]
        pub fn every_scalar<'b>(
            backends: (
                &'b $backend<f32>,
                &'b $backend<f64>,
                &'b $backend<$crate::Complex<f32>>,
                &'b $backend<$crate::Complex<f64>>,
                &'b $backend<$crate::f16>,
                &'b $backend<$crate::bf16>,
            ),
        ) -> $crate::backend::EveryScalar<'b> {
            let (a, b, c, d, e, f) = backends;
            (a, b, c, d, e, f)
        }
    };
    ($backend:ty) => {
        /// The backend's code compiled here for every scalar type (see
        /// `hetsparse_core::every_scalar!`).
        #[cfg(debug_assertions)]
        #[doc(hidden)]
        #[inline(never)]
        pub fn every_scalar(backend: &$backend) -> $crate::backend::EveryScalar<'_> {
            (backend, backend, backend, backend, backend, backend)
        }
    };
}

/// Without the `conformance` feature (not a test build) there is nothing to share.
#[cfg(not(feature = "conformance"))]
#[doc(hidden)]
#[macro_export]
macro_rules! every_scalar {
    ($($backend:tt)*) => {};
}
