//! OpenCL backend of hetsparse (`opencl3`): any OpenCL device — PoCL on CPU cores, NVIDIA's
//! OpenCL on a GPU, ... — runs SpGEMM by ESC (Polok, Ila, Smrz), block SpGEMM, SpMV and SpMM.
//!
//! Kernels are OpenCL C in `kernels-opencl/`, embedded in the crate and compiled at run time,
//! once per device and scalar type (the compiled programs are cached for the process).
//!
//! ```
//! use hetsparse_core::{format::Csr, Backend, RunControl, SpgemmAlgorithm, SpgemmOptions};
//! use hetsparse_opencl::OpenClBackend;
//!
//! let backend = match OpenClBackend::new() {
//!     Ok(b) => b,
//!     Err(e) => { println!("no OpenCL device: {e}"); return Ok(()); }
//! };
//! let a = Csr::<f32>::identity(4)?;
//! let c = backend.spgemm(&a, &a, SpgemmAlgorithm::Esc)?;
//! assert_eq!(c, a);
//!
//! // Resident: A goes to the device once, A·A and (A·A)·A stay there.
//! let ra = backend.upload(&a)?;
//! let run = RunControl::new();
//! let opts = SpgemmOptions::new();
//! let aa = backend.spgemm_resident((&ra).into(), (&ra).into(), &opts, &run)?;
//! let aaa = backend.spgemm_resident((&aa).into(), (&ra).into(), &opts, &run)?;
//! assert_eq!(backend.download(&aaa)?, a);
//! # Ok::<(), hetsparse_core::Error>(())
//! ```
//!
//! | operation | kernel |
//! |---|---|
//! | SpGEMM (`Esc`, `Auto`) | ESC: balanced expansion, segmented merge sort, compression; B in column slices when the expansion exceeds the memory budget |
//! | SpGEMM over a semiring (`SpgemmOptions::with_semiring`, every one defined over the type) | ESC, from a program compiled for the semiring (once per context) |
//! | SpGEMM with a mask (structural or valued) | a masked row-by-row kernel that multiplies only the products the mask admits; complemented: ESC, then the refused entries dropped on the device |
//! | BSR × BSR | ESC over the block structure, blocks multiplied during compression |
//! | DIA × DIA | through CSR SpGEMM (the trait's default) |
//! | SpMV | CSR scalar or vector (by mean row length), ELLR-T, CSPR with atomic row sums; CSC, COO, DIA and BSR converted to CSR on the host |
//! | SpMM | csrmm, ELLR-T; CSC, COO, DIA, CSPR and BSR converted to CSR on the host |
//!
//! ## Residency
//!
//! Resident matrices ([`Backend::upload`], results of the `*_resident` operations) live in
//! device buffers of one OpenCL context: [`Device::memory_space`] is `opencl` device *n*, *n*
//! numbering the contexts of the process. Every backend made for a device (and every clone)
//! shares that device's context, so they share handles; [`OpenClBackend::with_own_context`]
//! makes a separate space. Handles of another space are [`Error::WrongDevice`]. A CSR matrix is
//! its row offsets, column indices and values; [`Backend::upload_values`] shares the structure.
//! SpMV, SpMM and SpGEMM run their kernels on resident operands where they lie (host operands
//! are copied for the call); a resident SpGEMM counts its expansion on the device (one
//! synchronisation more than from host operands, where the host counts it during the upload).
//! Only when the expansion does not fit the memory left do resident operands go through the
//! host, which cuts B into column slices. Plans keep the product's structure on the device;
//! executing one recomputes the values only (a work-item per row of C over the planned
//! structure; rows of more than 256 products, counted at plan time, get a work-group per
//! segment of the row that fits local memory, which adds there with compare-and-swap and
//! writes each entry once, where the device has those atomics for the type). Chunks run one
//! by one, each on a profiling queue (kernel and transfer times
//! from OpenCL events): host operands are cut on the host (the next chunk's parts on another
//! thread while the device computes this one) and their parts copied, resident ones cut on the
//! device (kernels copying a range of rows of A or a panel of columns of B).
//!
//! [`Device::memory_pool`] accounts for the device memory a backend (and its clones) uses: its
//! limit is the device's global memory, or [`OpenClBackend::with_memory_budget`]; resident
//! matrices hold reservations for their bytes, each call for what it allocates, and
//! [`Backend::spgemm_requirement`] bounds a product's peak.
//!
//! f64 and `Complex<f64>` need `cl_khr_fp64`; f16 and bf16 are stored as 16 bits and summed in
//! f32 on every device. `bool` is a byte, 0 or 1, on the device and is summed in a `uint` (with
//! GraphBLAS's arithmetic: `+` is `or`, `×` is `and`); results are read back as bytes and
//! converted (any byte but 0 is `true`), never viewed as `bool`s.
//!
//! What a call keeps for the next one, per device: the compiled programs, a 32 MiB pinned
//! staging buffer that every transfer goes through (in 4 MiB slots, so host copies overlap the
//! DMA; the host side of the copies runs on rayon's threads), and a pool of device buffers of
//! up to 64 MiB each and 256 MiB in all, so that small products do not pay for allocating and
//! releasing device memory. `spgemm(&a, &a, ..)` (one matrix as both operands) copies it to the
//! device once. On Linux, large results are advised (`madvise`) to use transparent huge pages.
#![warn(missing_docs)]

mod device;
mod esc;
mod kernels;
mod masked;
mod multiply;
mod ops;
mod resident;
mod runtime;
mod scalar;
mod slice;

use std::sync::Arc;

use opencl3::program::Program;

use hetsparse_core::backend::{
    ChunkSink, CsrOperand, DenseOperand, MemoryPool, MemoryRequirement, MemorySpace, PatternId,
    ProductChunk, ResidentCsr, ResidentDense, SparseOperand, SpgemmOptions, SpgemmPlan,
    SpmmOptions, SpmvOptions, VectorOperand,
};
use hetsparse_core::format::{Bsr, Csr, Dense, Layout, SparseFormat, SparseRef};
use hetsparse_core::{
    Backend, Capabilities, ChunkPipeline, Device, DeviceInfo, DeviceKind, Error, Mask, Operation,
    Residency, ResidentOps, Result, RunControl, Scalar, ScalarType, SemiringKind, SparseVector,
    SpgemmAlgorithm, SpgemmFeatures, Validated, VectorProductKind, VectorProductOptions,
};

pub use device::{list_devices, DeviceDescription};
pub use esc::ExpansionSearch;
pub use runtime::KERNEL_TIMES;

use device::Selector;
use esc::{Compressed, EscJob, Multiply};
use kernels::KernelSemiring;
use runtime::{DeviceState, Variant};

/// The backend's name in [`DeviceInfo`] and errors.
pub(crate) const BACKEND: hetsparse_core::BackendKind = hetsparse_core::BackendKind::OpenCl;

/// The environment variable [`OpenClBackend::from_env`] reads: a substring of the device's,
/// platform's or vendor's name.
pub const DEVICE_ENV: &str = "HETSPARSE_OPENCL_DEVICE";

/// An OpenCL device running hetsparse's operations.
///
/// Clones share the device state (context, programs) and the memory pool; every backend on a
/// device shares its context, and so each other's resident matrices, while each constructed
/// backend accounts for its own memory (its pool, the limit of
/// [`with_memory_budget`](Self::with_memory_budget)). Every backend's pool reserves from one
/// pool of the device's global memory too, backends with a context of their own
/// ([`with_own_context`](Self::with_own_context)) included, so that backends on one device
/// cannot together reserve more than it has.
#[derive(Clone)]
pub struct OpenClBackend {
    state: Arc<DeviceState>,
    pool: Arc<MemoryPool>,
    capabilities: Arc<Capabilities>,
    budget_bytes: Option<u64>,
    search: ExpansionSearch,
}

impl std::fmt::Debug for OpenClBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenClBackend")
            .field("device", &self.state.description)
            .field("budget_bytes", &self.budget_bytes)
            .field("search", &self.search)
            .finish()
    }
}

impl OpenClBackend {
    /// The first GPU of any platform, else the first device. [`Error::NoDevice`] when there is
    /// no OpenCL library, platform or device.
    pub fn new() -> Result<Self> {
        Self::select(&Selector::PreferGpu)
    }

    /// The first device of `kind`.
    pub fn with_device_kind(kind: DeviceKind) -> Result<Self> {
        Self::select(&Selector::Kind(kind))
    }

    /// The first device whose name, platform name or vendor contains `name` (case-insensitive),
    /// e.g. `"nvidia"` or `"portable"`.
    pub fn with_device_name(name: &str) -> Result<Self> {
        if name.trim().is_empty() {
            return Err(Error::InvalidArgument(
                "OpenCL device name to look for is empty".into(),
            ));
        }
        Self::select(&Selector::Name(name.trim().to_string()))
    }

    /// Device `device_index` of platform `platform_index`, as [`list_devices`] numbers them
    /// ([`DeviceDescription::platform_index`], [`DeviceDescription::device_index`]): the way
    /// to open each of several devices of the same name.
    pub fn with_device_index(platform_index: usize, device_index: usize) -> Result<Self> {
        Self::select(&Selector::Index(platform_index, device_index))
    }

    /// The device named by the environment variable [`DEVICE_ENV`] when it is set and not
    /// empty, else [`OpenClBackend::new`].
    pub fn from_env() -> Result<Self> {
        match std::env::var(DEVICE_ENV) {
            Ok(name) if !name.trim().is_empty() => Self::with_device_name(&name),
            _ => Self::new(),
        }
    }

    fn select(selector: &Selector) -> Result<Self> {
        let devices = device::enumerate()?;
        let (id, description) = device::pick(&devices, selector)?;
        tracing::info!(device = %description, "OpenCL device chosen");
        let capabilities = Arc::new(capabilities_of(&description));
        let state = runtime::device_state(id, description)?;
        Ok(OpenClBackend {
            pool: MemoryPool::with_parent(
                BACKEND,
                state.description.global_memory_bytes,
                &state.device_memory,
            ),
            state,
            capabilities,
            budget_bytes: None,
            search: ExpansionSearch::default(),
        })
    }

    /// A backend on the same device with an OpenCL context of its own: a memory space of its
    /// own too, so resident matrices of either are refused by the other
    /// ([`Error::WrongDevice`]). Programs are compiled again for the new context. Its memory
    /// is still the device's: its pool reserves from the same device pool as every other
    /// backend on the device.
    pub fn with_own_context(&self) -> Result<Self> {
        let devices = device::enumerate()?;
        let (id, description) = devices
            .iter()
            .find(|(_, d)| *d == self.state.description)
            .cloned()
            .ok_or_else(|| Error::NoDevice {
                backend: BACKEND,
                reason: format!("{} is no longer listed", self.state.description),
            })?;
        let state = runtime::new_context(id, description)?;
        let global = state.description.global_memory_bytes;
        let pool = MemoryPool::with_parent(
            BACKEND,
            self.budget_bytes.map_or(global, |b| b.min(global)),
            &state.device_memory,
        );
        Ok(OpenClBackend {
            state,
            pool,
            capabilities: Arc::clone(&self.capabilities),
            budget_bytes: self.budget_bytes,
            search: self.search,
        })
    }

    /// Limits the device memory this backend may use, in bytes (default: the device's global
    /// memory): [`Device::memory_pool`] is then a new pool with this limit, shared by the
    /// clones made after. Resident matrices count against the pool of the backend that made
    /// them while they live; when an ESC expansion would exceed what is left, B is cut into
    /// column slices.
    pub fn with_memory_budget(mut self, bytes: u64) -> Self {
        self.budget_bytes = Some(bytes);
        let limit = bytes.min(self.state.description.global_memory_bytes);
        self.pool = MemoryPool::with_parent(BACKEND, limit, &self.state.device_memory);
        self
    }

    /// How expansion work-items find their first product (default: interpolation search).
    pub fn with_expansion_search(mut self, search: ExpansionSearch) -> Self {
        self.search = search;
        self
    }

    /// The device in use.
    pub fn device(&self) -> &DeviceDescription {
        &self.state.description
    }

    /// Whether the device runs `ty` (f64 and complex f64 need `cl_khr_fp64`).
    pub fn supports_scalar(&self, ty: ScalarType) -> bool {
        device_runs(&self.state.description, ty)
    }

    fn memory_bytes(&self) -> u64 {
        self.pool.limit()
    }

    /// Unsupported for types the device cannot run (saying why).
    fn check_scalar<T: Scalar>(&self, op: Operation) -> Result<()> {
        if scalar::is_device_scalar::<T>() && self.supports_scalar(T::TYPE) {
            return Ok(());
        }
        let why = if scalar::is_device_scalar::<T>() {
            format!("{} has no cl_khr_fp64", self.state.description.name)
        } else {
            "not the Rust type of a hetsparse scalar type".to_string()
        };
        Err(Error::Unsupported {
            backend: BACKEND,
            op,
            scalar: T::TYPE,
            detail: Some(why),
        })
    }

    /// Unsupported for types the device cannot run (saying why), the compiled plus-times
    /// program otherwise (scalar or block).
    fn program<T: Scalar>(&self, op: Operation, block: bool) -> Result<Arc<Program>> {
        self.check_scalar::<T>(op)?;
        let d = &self.state.description;
        let ty = T::TYPE;
        if block {
            self.state.program(Variant::Block(ty), || {
                kernels::block_program(ty, KernelSemiring::PLUS_TIMES, d)
            })
        } else {
            self.state
                .program(Variant::Scalar(ty, SemiringKind::PlusTimes), || {
                    kernels::scalar_program(ty, KernelSemiring::PLUS_TIMES, d)
                })
        }
    }

    /// The program of SpMV or SpMM (`spmm`) with a sparse A of `a`'s format (CSR if resident).
    fn program_for<T: Scalar>(&self, a: &SparseOperand<'_, T>, spmm: bool) -> Result<Arc<Program>> {
        let format = match a {
            SparseOperand::Host(m) => m.format(),
            SparseOperand::Resident(_) => SparseFormat::Csr,
        };
        let op = if spmm {
            Operation::Spmm(format)
        } else {
            Operation::Spmv(format)
        };
        self.program::<T>(op, false)
    }

    fn job<'a>(&'a self, program: &'a Program, multiply: Multiply, payload: usize) -> EscJob<'a> {
        EscJob {
            state: &self.state,
            program,
            search: self.search,
            pool: &self.pool,
            payload_bytes: payload,
            multiply,
        }
    }
}

impl Device for OpenClBackend {
    fn info(&self) -> DeviceInfo {
        DeviceInfo {
            memory_bytes: self.memory_bytes(),
            ..self.state.description.info()
        }
    }

    fn capabilities(&self) -> &Capabilities {
        &self.capabilities
    }

    /// The device's OpenCL version string, which names the driver (PoCL's includes its
    /// release, NVIDIA's the CUDA version).
    fn driver_version(&self) -> Option<String> {
        let version = self.state.description.version.trim();
        (!version.is_empty()).then(|| version.to_string())
    }

    /// `opencl` device *n*, where *n* numbers the OpenCL contexts of the process: backends
    /// made for one device share its context (and clones share it), so they share handles;
    /// [`OpenClBackend::with_own_context`] makes another space.
    fn memory_space(&self) -> MemorySpace {
        self.state.space()
    }

    fn memory_pool(&self) -> Option<Arc<MemoryPool>> {
        Some(Arc::clone(&self.pool))
    }
}

/// Whether a device runs scalar type `ty`: the kernels are written for every scalar type
/// (`bool` as a byte 0 or 1, see the `scalar` module), and double precision needs
/// `cl_khr_fp64`.
fn device_runs(d: &DeviceDescription, ty: ScalarType) -> bool {
    !matches!(ty, ScalarType::F64 | ScalarType::C64) || d.fp64
}

impl DeviceDescription {
    /// What a backend on this device reports ([`Backend::info`]), without making one (no
    /// context, no queue): for listing a device that will not be used.
    pub fn info(&self) -> DeviceInfo {
        DeviceInfo {
            backend: BACKEND,
            name: format!("{} ({})", self.name, self.platform),
            kind: self.kind,
            memory_bytes: self.global_memory_bytes,
            compute_units: self.compute_units,
        }
    }

    /// What a backend on this device runs ([`Backend::capabilities`]), without making one.
    pub fn capabilities(&self) -> Capabilities {
        capabilities_of(self)
    }
}

/// Every operation, for every scalar type the device runs.
fn capabilities_of(d: &DeviceDescription) -> Capabilities {
    let scalars: Vec<ScalarType> = ScalarType::ALL
        .into_iter()
        .filter(|&t| device_runs(d, t))
        .collect();
    let mut ops = vec![
        Operation::Spgemm(SpgemmAlgorithm::Auto),
        Operation::Spgemm(SpgemmAlgorithm::Esc),
        Operation::BsrSpgemm,
        Operation::DiaSpgemm,
    ];
    for f in SparseFormat::ALL {
        ops.push(Operation::Spmv(f));
        ops.push(Operation::Spmm(f));
    }
    ops.extend([VectorProductKind::Mxv, VectorProductKind::Vxm].map(Operation::VectorProduct));
    scalars.iter().fold(
        Capabilities::new().with_all(&ops, &scalars),
        // Every semiring compiled into its own programs on first use; masks by the masked
        // program, or ESC and a pass dropping the refused entries for a complemented mask.
        // Vector products are SpGEMMs of a one-row or one-column matrix: the same features.
        |caps, &scalar| {
            let features = SpgemmFeatures::every_semiring_and_mask(scalar);
            caps.with_spgemm_features(&[scalar], features.clone())
                .with_vector_product_features(&[scalar], features)
        },
    )
}

fn compressed<T: Scalar>(a: &Csr<T>) -> Compressed<'_, T> {
    Compressed {
        nrows: a.nrows(),
        ncols: a.ncols(),
        offsets: a.row_offsets().into(),
        index: a.col_indices().into(),
        values: a.values().into(),
        block: 1,
    }
}

impl<T: Scalar> Backend<T> for OpenClBackend {
    fn spgemm_checked(
        &self,
        a: CsrOperand<'_, T>,
        b: CsrOperand<'_, T>,
        options: &SpgemmOptions,
        run: &RunControl,
        _checked: Validated,
    ) -> Result<Csr<T>> {
        let op = Operation::Spgemm(options.algorithm);
        run.checkpoint()?;
        if !options.is_plain() {
            let q = self.state.queue()?;
            let (c, program) = self.spgemm_over(&q, a, b, options, run)?;
            return self.fetch(&q, &program, c);
        }
        let program = self.program::<T>(op, false)?;
        let q = self.state.queue()?;
        match (a, b) {
            (CsrOperand::Host(a), CsrOperand::Host(b)) => self.spgemm_host(&q, &program, a, b, run),
            _ => {
                let c = self.spgemm_on_device(&q, &program, a, b, run)?;
                self.fetch(&q, &program, c)
            }
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
        let _ = options;
        let (a, b) = match (a, b) {
            (SparseOperand::Host(a), DenseOperand::Host(b)) => (a, b),
            (a, b) => {
                let program = self.program_for(&a, true)?;
                run.checkpoint()?;
                let q = self.state.queue()?;
                let (c, shape, layout, _held) =
                    self.spmm_on_device(&q, &program, a, b, false, run)?;
                return self.fetch_dense(&q, &c, shape, layout);
            }
        };
        let op = Operation::Spmm(a.format());
        run.checkpoint()?;
        let program = self.program::<T>(op, false)?;
        let (m, n) = (a.shape().0, b.ncols());
        if m == 0 || n == 0 || b.nrows() == 0 {
            return Dense::zeros(m, n, b.layout());
        }
        let q = self.state.queue()?;
        let (c, shape, layout, _held) =
            self.spmm_on_device(&q, &program, SparseOperand::Host(a), b.into(), false, run)?;
        self.fetch_dense(&q, &c, shape, layout)
    }

    fn spmv_checked(
        &self,
        a: SparseOperand<'_, T>,
        x: VectorOperand<'_, T>,
        options: &SpmvOptions,
        run: &RunControl,
        _checked: Validated,
    ) -> Result<Vec<T>> {
        let _ = options;
        let (a, x) = match (a, x) {
            (SparseOperand::Host(a), VectorOperand::Host(x)) => (a, x),
            (a, x) => {
                let program = self.program_for(&a, false)?;
                run.checkpoint()?;
                let q = self.state.queue()?;
                let (y, n, _held) = self.spmv_on_device(&q, &program, a, x, false, run)?;
                return Ok(self
                    .fetch_dense::<T>(&q, &y, (n, 1), Layout::ColMajor)?
                    .into_data());
            }
        };
        let op = Operation::Spmv(a.format());
        run.checkpoint()?;
        let program = self.program::<T>(op, false)?;
        if a.shape().0 == 0 || x.is_empty() {
            return hetsparse_core::host::try_filled(a.shape().0, T::zero(), "SpMV result");
        }
        let q = self.state.queue()?;
        match a {
            SparseRef::Cspr(c) if kernels::has_cspr_kernel(T::TYPE, &self.state.description) => {
                run.add_planned(c.nnz());
                let y = multiply::spmv_cspr(&q, &program, c, x)?;
                run.add_done(c.nnz());
                Ok(y)
            }
            a => {
                let (y, n, _held) = self.spmv_on_device(
                    &q,
                    &program,
                    SparseOperand::Host(a),
                    x.into(),
                    false,
                    run,
                )?;
                Ok(self
                    .fetch_dense::<T>(&q, &y, (n, 1), Layout::ColMajor)?
                    .into_data())
            }
        }
    }

    /// GraphBLAS's own way: the vector is a one-row matrix (vxm: `u · A`) or a one-column
    /// one (mxv: `A · u`, the mask turned to a column), multiplied by the masked semiring
    /// SpGEMM: only the admitted positions are computed. The accumulator is applied above the
    /// backends.
    fn vector_product_checked(
        &self,
        kind: VectorProductKind,
        a: CsrOperand<'_, T>,
        u: &SparseVector<T>,
        options: &VectorProductOptions,
        run: &RunControl,
        checked: Validated,
    ) -> Result<SparseVector<T>> {
        let _span = tracing::info_span!(
            "sparse-vector product",
            backend = "opencl",
            kind = kind.name(),
            u_nnz = u.nnz()
        )
        .entered();
        let mut spgemm = options.as_spgemm();
        spgemm.accumulator = None;
        match kind {
            VectorProductKind::Vxm => {
                let row = CsrOperand::Host(u.as_row());
                SparseVector::from_row(self.spgemm_checked(row, a, &spgemm, run, checked)?)
            }
            VectorProductKind::Mxv => {
                let column = u.to_column()?;
                spgemm.mask = options.mask.as_ref().map(Mask::to_column).transpose()?;
                let column = CsrOperand::Host(&column);
                SparseVector::from_column(self.spgemm_checked(a, column, &spgemm, run, checked)?)
            }
        }
    }

    fn bsr_spgemm_checked(&self, a: &Bsr<T>, b: &Bsr<T>, _checked: Validated) -> Result<Bsr<T>> {
        let program = self.program::<T>(Operation::BsrSpgemm, true)?;
        let ((r, k), (_, s)) = (a.block_shape(), b.block_shape());
        let _span =
            tracing::info_span!("bsr spgemm esc", blocks_a = a.nnz_blocks(), r, k, s).entered();
        let job = self.job(
            &program,
            Multiply::Block { r, k, s },
            kernels::BLOCK_PAYLOAD_BYTES,
        );
        // Bsr::try_new checks again on the host (the block path is not on a measured hot path).
        let q = self.state.queue()?;
        let c = job.block_product(
            &q,
            &Compressed::of_bsr(a),
            &Compressed::of_bsr(b),
            &RunControl::unwatched(),
        )?;
        Ok(Bsr::try_new(
            (r, s),
            c.nrows,
            c.ncols,
            c.offsets.into_owned(),
            c.index.into_owned(),
            c.values.into_owned(),
        )?)
    }

    fn residency(&self) -> Residency<'_, T> {
        Residency::Own(self)
    }

    fn chunk_pipeline(&self) -> Option<&dyn ChunkPipeline<T>> {
        Some(self)
    }
}

impl<T: Scalar> ResidentOps<T> for OpenClBackend {
    // --- Residency ---------------------------------------------------------------------------

    fn store(&self, m: &Csr<T>) -> Result<ResidentCsr<T>> {
        let q = self.state.queue()?;
        let c = self.upload_csr(&q, m)?;
        Ok(self.wrap_csr(c, PatternId::of(m)))
    }

    fn store_owned(&self, m: Csr<T>) -> Result<ResidentCsr<T>> {
        Backend::upload(self, &m)
    }

    fn store_values(
        &self,
        pattern: &ResidentCsr<T>,
        values: &[T],
        _checked: Validated,
    ) -> Result<ResidentCsr<T>> {
        let storage = self.csr_storage(pattern)?;
        self.holds::<T>()?;
        let _span = tracing::info_span!("upload values", nnz = pattern.nnz()).entered();
        let q = self.state.queue()?;
        let c = resident::upload_values(&self.pool, &q, Arc::clone(&storage.structure), values)?;
        Ok(self.wrap_csr(c, pattern.pattern()))
    }

    fn load(&self, m: &ResidentCsr<T>, _checked: Validated) -> Result<Csr<T>> {
        let storage = self.csr_storage(m)?;
        self.holds::<T>()?;
        let q = self.state.queue()?;
        resident::download_csr(&q, storage)
    }

    fn load_values(&self, m: &ResidentCsr<T>, _checked: Validated) -> Result<Vec<T>> {
        let storage = self.csr_storage(m)?;
        self.holds::<T>()?;
        let q = self.state.queue()?;
        let m = storage.operand();
        let nnz = hetsparse_core::host::entry_count(m.nnz, "a resident matrix on this host")?;
        multiply::download_values::<T>(&q, m.values, nnz)
    }

    fn store_dense(&self, d: &Dense<T>) -> Result<ResidentDense<T>> {
        self.holds::<T>()?;
        let _span = tracing::info_span!("upload dense", shape = ?d.shape()).entered();
        let q = self.state.queue()?;
        let stored = resident::upload_dense(&self.state, &self.pool, &q, d)?;
        Ok(self.wrap_dense(stored))
    }

    fn load_dense(&self, d: &ResidentDense<T>, _checked: Validated) -> Result<Dense<T>> {
        let storage = self.dense_storage(d)?;
        self.holds::<T>()?;
        let q = self.state.queue()?;
        resident::download_dense(&q, storage)
    }

    // --- Results left resident -----------------------------------------------------------------

    fn spgemm_stored(
        &self,
        a: CsrOperand<'_, T>,
        b: CsrOperand<'_, T>,
        options: &SpgemmOptions,
        run: &RunControl,
        _checked: Validated,
    ) -> Result<ResidentCsr<T>> {
        let op = Operation::Spgemm(options.algorithm);
        run.checkpoint()?;
        let q = self.state.queue()?;
        if !options.is_plain() {
            // A mask changes the pattern; a semiring alone does not.
            let pattern = match &options.mask {
                Some(mask) => PatternId::of_masked_product(a.pattern(), b.pattern(), mask),
                None => PatternId::of_product(a.pattern(), b.pattern()),
            };
            let (c, _) = self.spgemm_over(&q, a, b, options, run)?;
            return self.keep(&q, c, pattern);
        }
        let program = self.program::<T>(op, false)?;
        let pattern = PatternId::of_product(a.pattern(), b.pattern());
        let c = self.spgemm_on_device(&q, &program, a, b, run)?;
        self.keep(&q, c, pattern)
    }

    fn spmm_stored(
        &self,
        a: SparseOperand<'_, T>,
        b: DenseOperand<'_, T>,
        options: &SpmmOptions,
        run: &RunControl,
        _checked: Validated,
    ) -> Result<ResidentDense<T>> {
        let _ = options;
        let program = self.program_for(&a, true)?;
        run.checkpoint()?;
        if let (SparseOperand::Resident(ra), DenseOperand::Resident(rb)) = (a, b) {
            let shape = (ra.shape().0, rb.ncols());
            let products = ra.nnz().saturating_mul(rb.ncols() as u64);
            return self.queued(ra, rb, shape, products, "SpMM result", run, |q, a, b| {
                multiply::spmm_device::<T>(q, &program, &a.rows(), &b.input(), true)
            });
        }
        let q = self.state.queue()?;
        let (c, shape, layout, held) = self.spmm_on_device(&q, &program, a, b, true, run)?;
        Ok(self.keep_dense(c, shape, layout, held))
    }

    fn spmv_stored(
        &self,
        a: SparseOperand<'_, T>,
        x: VectorOperand<'_, T>,
        options: &SpmvOptions,
        run: &RunControl,
        _checked: Validated,
    ) -> Result<ResidentDense<T>> {
        let _ = options;
        let program = self.program_for(&a, false)?;
        run.checkpoint()?;
        if let (SparseOperand::Resident(ra), VectorOperand::Resident(rx)) = (a, x) {
            let shape = (ra.shape().0, 1);
            return self.queued(ra, rx, shape, ra.nnz(), "SpMV result", run, |q, a, x| {
                multiply::spmv_device::<T>(q, &program, &a.rows(), &x.data, true)
            });
        }
        let q = self.state.queue()?;
        let (y, n, held) = self.spmv_on_device(&q, &program, a, x, true, run)?;
        Ok(self.keep_dense(y, (n, 1), Layout::ColMajor, held))
    }

    // --- Plans and requirements ------------------------------------------------------------------

    fn plan(
        &self,
        a: CsrOperand<'_, T>,
        b: CsrOperand<'_, T>,
        options: &SpgemmOptions,
        _checked: Validated,
    ) -> Result<SpgemmPlan<T>> {
        // A plan's executions recompute plus-times over the unmasked product's structure (its
        // numeric kernels add with compare-and-swap `+`).
        options.check_plain_plan(BACKEND, T::TYPE)?;
        let op = Operation::Spgemm(options.algorithm);
        let program = self.program::<T>(op, false)?;
        self.plan(&program, a, b, options)
    }

    fn execute(
        &self,
        plan: &SpgemmPlan<T>,
        a: CsrOperand<'_, T>,
        b: CsrOperand<'_, T>,
        run: &RunControl,
        _checked: Validated,
    ) -> Result<ResidentCsr<T>> {
        let program = self.program::<T>(Operation::Spgemm(plan.options().algorithm), false)?;
        self.execute(&program, plan, a, b, run)
    }

    fn requirement(
        &self,
        a: CsrOperand<'_, T>,
        b: CsrOperand<'_, T>,
        options: &SpgemmOptions,
        _checked: Validated,
    ) -> Result<MemoryRequirement> {
        let op = Operation::Spgemm(options.algorithm);
        let program = self.program::<T>(op, false)?;
        let mut need = self.requirement(&program, a, b)?;
        // A semiring changes no size; a mask adds its kernels' work (the ESC bound covers
        // the operands and a masked C, which is never larger than the unmasked one).
        need.work_bytes = need
            .work_bytes
            .saturating_add(masked::extra_work_bytes::<T>(a.shape().0, options));
        Ok(need)
    }
}

impl<T: Scalar> ChunkPipeline<T> for OpenClBackend {
    fn chunks(
        &self,
        a: CsrOperand<'_, T>,
        b: CsrOperand<'_, T>,
        chunks: &[ProductChunk],
        options: &SpgemmOptions,
        run: &RunControl,
        sink: &mut ChunkSink<'_, T>,
        checked: Validated,
    ) -> Result<()> {
        if !options.is_plain() {
            // Each chunk as a product of its own (its mask cut to it), computed by
            // `spgemm_with`: the device pipeline below runs plus-times only.
            return hetsparse_core::backend::chunks::plain::spgemm_chunks(
                self, a, b, chunks, options, run, sink, checked,
            );
        }
        let op = Operation::Spgemm(options.algorithm);
        let program = self.program::<T>(op, false)?;
        self.chunks(&program, a, b, chunks, run, sink)
    }
}

hetsparse_core::every_scalar!(OpenClBackend);

#[cfg(test)]
mod tests {
    use super::*;

    /// The device under test, or `None` when there is none and none is required
    /// (`HETSPARSE_REQUIRE_DEVICE=1` makes a missing device fail).
    pub(crate) fn device_backend(what: &str) -> Option<OpenClBackend> {
        match OpenClBackend::from_env() {
            Ok(b) => Some(b),
            Err(e @ Error::NoDevice { .. }) => {
                assert_ne!(
                    std::env::var("HETSPARSE_REQUIRE_DEVICE").as_deref(),
                    Ok("1"),
                    "{what}: {e}"
                );
                None
            }
            Err(e) => panic!("{what}: {e}"),
        }
    }

    /// A GPU with 48 KiB of local memory, with or without fp64.
    fn gpu(fp64: bool) -> DeviceDescription {
        DeviceDescription {
            platform_index: 0,
            device_index: 0,
            platform: "p".into(),
            name: "d".into(),
            vendor: String::new(),
            kind: DeviceKind::Gpu,
            version: String::new(),
            compute_units: 1,
            global_memory_bytes: 1 << 30,
            max_buffer_bytes: 1 << 28,
            local_memory_bytes: 48 << 10,
            fp64,
            int64_atomics: false,
        }
    }

    #[test]
    fn double_precision_is_claimed_only_with_fp64() {
        let mut d = gpu(false);
        let esc = Operation::Spgemm(SpgemmAlgorithm::Esc);
        let caps = capabilities_of(&d);
        for ty in [ScalarType::F64, ScalarType::C64] {
            assert!(!caps.supports(esc, ty), "{ty}");
            assert!(caps.operations(ty).is_empty(), "{ty}");
        }
        for ty in [
            ScalarType::F16,
            ScalarType::Bf16,
            ScalarType::F32,
            ScalarType::C32,
        ] {
            assert!(caps.supports(esc, ty), "{ty}");
            assert!(
                caps.supports(Operation::Spmv(SparseFormat::Cspr), ty),
                "{ty}"
            );
        }
        d.fp64 = true;
        assert!(capabilities_of(&d).supports(esc, ScalarType::C64));
        // Without 64-bit atomics the double CSPR kernel is left out (SpMV converts to CSR).
        assert!(!kernels::has_cspr_kernel(ScalarType::F64, &d));
        assert!(kernels::has_cspr_kernel(ScalarType::F32, &d));
    }

    #[test]
    fn every_program_variant_has_its_kernels_and_types() {
        let d = gpu(true);
        for ty in ScalarType::ALL {
            let s = kernels::scalar_program(ty, KernelSemiring::PLUS_TIMES, &d);
            for k in [
                "esc_expand",
                "sort_tiles",
                "merge_pass",
                "compress",
                "spmv_ellr",
                "spmm_csr",
            ] {
                assert!(s.contains(k), "{ty}: {k}");
            }
            let double = matches!(ty, ScalarType::F64 | ScalarType::C64);
            assert_eq!(s.contains("cl_khr_fp64"), double, "{ty}");
            // Without 64-bit atomics on this device, double and the 64-bit integers have none.
            let wide = double || matches!(ty, ScalarType::I64 | ScalarType::U64);
            assert_eq!(s.contains("#define HAS_ATOMICS 1"), !wide, "{ty}");
            assert!(!s.contains("#error"), "{ty}");
            let b = kernels::block_program(ty, KernelSemiring::PLUS_TIMES, &d);
            assert!(
                b.contains("bsr_multiply") && b.contains("#define PAYLOAD ulong2"),
                "{ty}"
            );
        }
        // Tiles fit two key and payload buffers in 48 KiB of local memory, less 4 KiB.
        assert_eq!(kernels::sort_tile(&d, 16), 512);
        assert_eq!(kernels::sort_tile(&d, 8), 1024);
    }

    #[test]
    fn every_semiring_has_its_macros_and_the_masked_program_its_kernels() {
        let d = gpu(true);
        for ty in ScalarType::ALL {
            for kind in SemiringKind::ALL {
                let Ok(semiring) = KernelSemiring::new(kind, ty) else {
                    assert!(!kind.is_defined_for(ty), "{kind} over {ty} is refused");
                    continue;
                };
                let s = kernels::scalar_program(ty, semiring, &d);
                for m in [
                    "#define ADD(a, b)",
                    "#define MUL_AT(a, b, k)",
                    "#define ZERO",
                ] {
                    assert!(s.contains(m), "{kind} over {ty}: {m}");
                }
                let masked = kernels::masked_program(ty, semiring);
                for k in ["masked_rows", "masked_compact", "keep_count", "scan_blocks"] {
                    assert!(masked.contains(k), "{kind} over {ty}: {k}");
                }
            }
        }
        let min_plus = KernelSemiring::new(SemiringKind::MinPlus, ScalarType::F32).unwrap();
        let s = kernels::scalar_program(ScalarType::F32, min_plus, &d);
        assert!(
            s.contains("#define ZERO ACC_MAX") && s.contains("#define ACC_MAX ((ACC)(INFINITY))")
        );
        assert!(s.contains("#define ADD(a, b) MINOF((a), (b))") && s.contains("fmin((a), (b))"));
        assert!(KernelSemiring::new(SemiringKind::MinPlus, ScalarType::C64).is_err());
        // Integers: min and max of their own, their bounds as ±∞, signed sums on unsigned bits.
        let s = kernels::scalar_program(ScalarType::I64, min_plus, &d);
        assert!(s.contains("#define ACC_MAX ((ACC)(LONG_MAX))") && s.contains(" min((a), (b))"));
        assert!(s.contains("#define PLUS(a, b) (as_long(as_ulong(a) + as_ulong(b)))"));
        let max_times = KernelSemiring::new(SemiringKind::MaxTimes, ScalarType::U32).unwrap();
        let s = kernels::scalar_program(ScalarType::U32, max_times, &d);
        assert!(s.contains("#define ZERO ACC_MIN") && s.contains("#define ACC_MIN ((ACC)(0))"));
    }

    #[test]
    fn semiring_programs_compile_once_per_context() {
        let Some(b) = device_backend("program cache") else {
            return;
        };
        // A context of its own: no other test compiles into its cache.
        let b = b.with_own_context().expect("a context of its own");
        let esc = Operation::Spgemm(SpgemmAlgorithm::Esc);
        let min_plus = Variant::Scalar(ScalarType::F32, SemiringKind::MinPlus);
        assert_eq!(b.state.builds(), 0);
        assert!(!b.state.is_cached(min_plus));
        let first = b
            .semiring_program::<f32>(esc, SemiringKind::MinPlus, false)
            .expect("min_plus");
        assert!(b.state.is_cached(min_plus));
        let again = b
            .semiring_program::<f32>(esc, SemiringKind::MinPlus, false)
            .expect("min_plus again");
        assert!(Arc::ptr_eq(&first, &again), "the second call rebuilt it");
        assert_eq!(b.state.builds(), 1);
        // Masked, and another semiring, are programs of their own.
        b.semiring_program::<f32>(esc, SemiringKind::MinPlus, true)
            .expect("masked min_plus");
        assert!(b
            .state
            .is_cached(Variant::Masked(ScalarType::F32, SemiringKind::MinPlus)));
        assert_eq!(b.state.builds(), 2);
        // Products through the trait: the first compiles what it needs, the second nothing.
        let a = Csr::<f32>::identity(5).expect("identity");
        let options = SpgemmOptions::new()
            .with_semiring(SemiringKind::MaxMin)
            .with_mask(hetsparse_core::Mask::structural(&a));
        let run = RunControl::new();
        let c = b
            .spgemm_with((&a).into(), (&a).into(), &options, &run)
            .expect("masked max_min");
        assert_eq!(c, a);
        let after_first = b.state.builds();
        assert_eq!(after_first, 3, "only the masked max_min program");
        let any_pair = options.clone().with_semiring(SemiringKind::AnyPair);
        for _ in 0..2 {
            b.spgemm_with((&a).into(), (&a).into(), &options, &run)
                .expect("masked max_min again");
            b.spgemm_with((&a).into(), (&a).into(), &any_pair, &run)
                .expect("any_pair");
        }
        assert_eq!(
            b.state.builds(),
            after_first + 1,
            "only the masked any_pair"
        );
        // A semiring not defined over the type is refused before anything is compiled.
        let refused =
            b.semiring_program::<hetsparse_core::Complex<f32>>(esc, SemiringKind::MinPlus, false);
        assert!(matches!(refused, Err(Error::Unsupported { .. })));
        assert_eq!(b.state.builds(), after_first + 1);
    }

    #[test]
    fn plans_refuse_semirings_and_masks_rather_than_compute_plus_times() {
        let Some(b) = device_backend("plans") else {
            return;
        };
        let a = Csr::<f32>::identity(4).expect("identity");
        let refused = [
            SpgemmOptions::new().with_semiring(SemiringKind::MinPlus),
            SpgemmOptions::new().with_mask(hetsparse_core::Mask::structural(&a)),
        ];
        for options in refused {
            match b.plan_spgemm((&a).into(), (&a).into(), &options) {
                Err(Error::Unsupported {
                    detail: Some(why), ..
                }) => assert!(why.contains("semiring or a mask"), "{why}"),
                other => panic!("{options:?}: {:?}", other.map(|_| "a plan")),
            }
        }
        assert!(b
            .plan_spgemm((&a).into(), (&a).into(), &SpgemmOptions::new())
            .is_ok());
    }

    /// Runs `check_product` on hand-made arrays of C (each entry its own run of one product,
    /// whose key names `rows[k]`) and returns whether it flagged them.
    fn device_flags(
        backend: &OpenClBackend,
        (nrows, ncols): (usize, usize),
        offsets: &[u64],
        index: &[u32],
        rows: &[u64],
        run_start: &[u64],
    ) -> bool {
        let program = backend
            .program::<f32>(Operation::Spgemm(SpgemmAlgorithm::Esc), false)
            .expect("program");
        let q = backend.state.queue().expect("queue");
        let keys: Vec<u64> = rows
            .iter()
            .zip(index)
            .map(|(&r, &c)| (r << 32) | u64::from(c))
            .collect();
        let d_keys = q.upload(&keys, "keys").expect("keys");
        let d_runs = q.upload(run_start, "run starts").expect("runs");
        let d_offsets = q.upload(offsets, "offsets").expect("offsets");
        let d_index = q.upload(index, "index").expect("index");
        let mut flag = q.alloc::<u32>(1, "flag").expect("flag");
        q.zero(&mut flag, "flag").expect("zero");
        q.kernel(&program, "check_product")
            .expect("kernel")
            .arg(d_keys.arg())
            .and_then(|k| k.arg(keys.len() as u64))
            .and_then(|k| k.arg(d_runs.arg()))
            .and_then(|k| k.arg(index.len() as u64))
            .and_then(|k| k.arg(nrows as u64))
            .and_then(|k| k.arg(ncols as u64))
            .and_then(|k| k.arg(d_offsets.arg()))
            .and_then(|k| k.arg(d_index.arg()))
            .and_then(|k| k.arg(flag.arg()))
            .expect("args")
            .run(&[index.len().max(nrows + 1)], None)
            .expect("launch");
        q.download_at(&flag, 0, 1, "flag").expect("flag back")[0] != 0
    }

    #[test]
    fn the_device_check_refuses_every_broken_invariant_of_c() {
        let Some(b) = device_backend("opencl check") else {
            return;
        };
        // 3×5: row 0 holds columns 1 and 3, row 1 is empty, row 2 holds 0, 2 and 4.
        let shape = (3, 5);
        let offsets = [0u64, 2, 2, 5];
        let index = [1u32, 3, 0, 2, 4];
        let rows = [0u64, 0, 2, 2, 2];
        let runs = [0u64, 1, 2, 3, 4, 5];
        assert!(!device_flags(&b, shape, &offsets, &index, &rows, &runs));
        let bad_index: [(&str, [u32; 5]); 3] = [
            ("unsorted row", [1, 3, 0, 4, 2]),
            ("repeated column", [1, 3, 0, 2, 2]),
            ("column out of bounds", [1, 3, 0, 2, 5]),
        ];
        for (what, idx) in bad_index {
            assert!(
                device_flags(&b, shape, &offsets, &idx, &rows, &runs),
                "{what}"
            );
        }
        let bad_offsets: [(&str, [u64; 4]); 4] = [
            ("last offset short of nnz", [0, 2, 2, 4]),
            ("first offset not 0", [1, 2, 2, 5]),
            ("offsets not monotone", [0, 3, 2, 5]),
            // Row 0 swallows entry 2 (column 0 after 3): only the keys' rows show it.
            ("row boundary moved", [0, 3, 3, 5]),
        ];
        for (what, off) in bad_offsets {
            assert!(
                device_flags(&b, shape, &off, &index, &rows, &runs),
                "{what}"
            );
        }
        // Keys naming rows the offsets do not place the entries in, or no row at all.
        assert!(device_flags(
            &b,
            shape,
            &offsets,
            &index,
            &[0, 0, 1, 2, 2],
            &runs
        ));
        assert!(device_flags(
            &b,
            shape,
            &offsets,
            &index,
            &[0, 0, 2, 2, 3],
            &runs
        ));
        // A run starting beyond the expansion.
        assert!(device_flags(
            &b,
            shape,
            &offsets,
            &index,
            &rows,
            &[0, 1, 2, 3, 9, 5]
        ));
    }
}
