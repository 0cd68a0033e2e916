//! CUDA backend of hetsparse: the [`Backend`] operations on an NVIDIA GPU through `cust`.
//!
//! Kernels are CUDA C in `kernels-cuda/`, compiled by `cargo xtask kernels` to PTX (ISA 8.0,
//! `compute_75`: Turing and newer GPUs, CUDA 12.0 and newer drivers) and to sm_90 binaries
//! (H100, H200), both embedded, so building the crate needs no CUDA toolkit, only a `libcuda`
//! to link against (the toolkit's stub is enough; see the README). An sm_90 GPU loads the
//! binaries as they are; on other GPUs (or if a driver refuses a binary) the driver compiles
//! the PTX when the backend starts ([`Gpu::kernel_binaries`] tells which happened).
//!
//! SpMV and SpMM of CSR matrices whose longest row is far longer than the mean
//! ([`csr_rows_skewed`]) give each warp an equal share of the entries, whatever the rows they
//! belong to ([`SpmvKernel::CsrBalanced`], [`SpmmKernel::CsrBalanced`]), so that the hub rows of
//! a power-law graph or the dense rows of a circuit matrix do not hold up the product. SpMV of
//! other CSR matrices whose rows average 4 to 32 entries gives each row 4 lanes of a warp
//! ([`SpmvKernel::CsrSubwarp`]), so that their reads of A coalesce; the rest, and SpMM, keep a
//! thread, a warp or a half-warp per row (SpMM of a few long rows: the balanced tiles).
//!
//! Without a GPU, without a driver, or linked against the stub, [`CudaBackend::new`] returns
//! [`Error::NoDevice`].
//!
//! ```no_run
//! use hetsparse_core::{Backend, Csr, SpgemmAlgorithm};
//! use hetsparse_cuda::CudaBackend;
//!
//! # fn main() -> hetsparse_core::Result<()> {
//! let gpu = CudaBackend::new()?.with_memory_budget(1 << 30);
//! let a = Csr::<f64>::identity(4)?;
//! let c = gpu.spgemm(&a, &a, SpgemmAlgorithm::Auto)?;
//! assert_eq!(c, a);
//! # Ok(())
//! # }
//! ```
//!
//! SpGEMM algorithms (all with 64-bit offsets and product counts):
//! - [`SpgemmAlgorithm::Adaptive`] (and `Auto`): rows binned by their product count, hash
//!   accumulators in shared memory per bin size, global-memory tables for the longest rows;
//! - [`SpgemmAlgorithm::RowRow`]: Matam et al. Alg. 1, a warp per row with dense tiles;
//! - [`SpgemmAlgorithm::ColumnRow`]: Matam et al. Alg. 2, a block per part of A;
//! - [`SpgemmAlgorithm::Esc`]: Polok et al., expansion, sorting, compression.
//!
//! Semirings, masks and the exact types: a SpGEMM over any of GraphBLAS's built-in semirings
//! ([`hetsparse_core::SemiringKind`]), with a structural or valued mask (complemented or not),
//! and every SpGEMM over `bool`, `i32`, `i64`, `u32` and `u64`, runs `kernels-cuda/semiring.cu`:
//! C's structure first (the plus-times pipeline's on ones, or the mask's positions products
//! land on, computing no product the mask refuses), then its values by one kernel per
//! semiring and type, precompiled. Their plans keep the structure; executions compute the
//! values alone. Accumulating into an existing C is `hetsparse_core::write_back`'s. The
//! sparse-vector products mxv and vxm are the same kernels' products of A and a one-column or
//! one-row matrix. The other operations run over the float types only.
//!
//! Host results (`spgemm_with`, `spgemm_chunks`) are produced in row batches copied to
//! pinned host buffers while the next batch computes (two buffers), so the product may be
//! larger than device memory. `spgemm_with` needs A and B to fit, with room for the work
//! buffers; `spgemm_chunks` of host operands that do not fit together (more than half the
//! memory left) places each chunk's rows of A and window of B in turn, so only the largest
//! chunk's must fit (out of core: the scheduler cuts the chunks to the budget).
//!
//! # Native residency
//!
//! Resident matrices live in this GPU's memory ([`MemorySpace::Device`] `{ backend: "cuda",
//! id: ordinal }`; handles of another memory are [`Error::WrongDevice`]): CSR matrices as three
//! device arrays (offsets and column indices shared between matrices of one pattern, so
//! [`Backend::upload_values`] copies values only) plus their row offsets on the host, dense
//! matrices in their layout. Operations use resident operands in place:
//! - SpMV and SpMM run their kernels on the resident buffers; `spmv_resident` and
//!   `spmm_resident` leave the result on the device. (SpMM of a host matrix in a format without
//!   an SpMM kernel of its own — COO, CSC, CSPR, DIA, BSR — by a row-major resident dense
//!   matrix is the one case that goes through the host.)
//! - SpGEMM reads what it needs of resident operands on the device (row products by the
//!   analysis kernel; the row offsets kept on the host). `spgemm_resident` runs the symbolic
//!   phase (exact entries per row), allocates C once and writes the numeric phase straight
//!   into it. ESC plans its batches on the host from A's column indices, which it copies back
//!   once per call for a resident A (4 bytes per entry), and, where a chunk has a column
//!   window, B's too; the other algorithms read nothing back.
//! - [`Backend::plan_spgemm`] keeps C's structure (offsets and columns) on the device;
//!   [`Backend::execute_spgemm`] runs only the numeric phase into a new value array and
//!   shares the structure with the plan (the hash kernels read the plan's columns to place
//!   each value: no table sort, no columns written).
//!
//! `spmv_resident` and `spmm_resident` return without waiting for the GPU: the result comes
//! from the device's stream-ordered pool (`cuMemAllocAsync` on a pooled stream; the pool keeps
//! up to the budget of freed memory cached) and carries an event that later operations on
//! other streams, and downloads, wait for; temporaries and dropped results are freed on their
//! stream behind the events of every use. Operand reservations in the [`MemoryPool`] are held
//! exactly as long as the buffers.
//!
//! Every device allocation reserves its bytes in the backend's [`MemoryPool`]
//! ([`Device::memory_pool`]), and through it in the device's pool, which every backend on the
//! device shares (so backends on one GPU cannot together reserve more than it has); [`Backend::spgemm_requirement`] and plan requirements bound
//! what the calls reserve (the calls cap their work memory at the bound they report). Driver
//! failures become [`Error::Device`] with a [`DeviceFault`](hetsparse_core::DeviceFault)
//! (launch failures 701, 702, 719: `LaunchFailed`; faults that leave the context unusable,
//! such as 700, ECC errors, a destroyed context or 999: `DeviceLost`) and the code in the
//! message. Chunks of [`Backend::spgemm_chunks`] carry their
//! [`ChunkTiming`](hetsparse_core::ChunkTiming), measured with device events.
//!
//! Writing an operation on this backend (what `spgemm/` does):
//! 1. [`Gpu::bind`] first (the context is current per thread), then a [`Stream`];
//! 2. operands into [`DeviceBuffer`]s (`DeviceBuffer::from_host(gpu.memory(), &stream,
//!    scalar::as_device(values), "what")`, counted against the budget), or into a
//!    [`DeviceArena`] allocated once outside a loop;
//! 3. a kernel from `kernels-cuda/NAME.cu`, listed in `src/kernels.rs`:
//!    `gpu.function("NAME", scalar::kernel_name::<T>("kernel"))` for one instantiated with
//!    `HS_INSTANTIATE` (common.cuh), launched with [`Gpu::launch`] and [`Arg`]s
//!    ([`DeviceSlice::arg`] for pointers);
//! 4. results back with [`DeviceSlice::download`] (or asynchronously into pinned memory from
//!    [`Gpu::pinned_pool`]), every driver failure already a [`hetsparse_core::Error`].
#![warn(missing_docs)]

mod context;
mod error;
mod ffi;
mod kernels;
pub mod memory;
mod resident;
pub mod scalar;
mod spgemm;

mod bsr;
mod dia;
mod spmm;
mod spmv;
mod vector;

use std::sync::Arc;

use hetsparse_core::backend::chunks;
use hetsparse_core::backend::plan::{OperandPattern, PlanState};
use hetsparse_core::{
    Backend, Bsr, Capabilities, ChunkPipeline, ChunkPlace, ChunkSink, Csr, CsrOperand, Dense,
    DenseOperand, Device, DeviceInfo, DeviceKind, DeviceProfile, Dia, Error, Layout, MemoryPool,
    MemoryRequirement, MemorySpace, Operation, PatternId, PlaceDone, ProductChunk, Residency,
    ResidentCsr, ResidentDense, ResidentOps, Result, RunControl, Scalar, ScalarType, SparseFormat,
    SparseOperand, SparseRef, SparseVector, SpgemmAlgorithm, SpgemmFeatures, SpgemmOptions,
    SpgemmPlan, SpmmOptions, SpmvOptions, Validated, VectorOperand, VectorProductKind,
    VectorProductOptions,
};

use resident::{DeviceCsr, DeviceDense, Kept};
use spmm::{DenseIn, SparseIn};
use spmv::VecIn;

pub use context::{device_count, Arg, Event, Function, Gpu, LaunchConfig, Stream, WarmUpPause};
pub use memory::{
    DeviceArena, DeviceBuffer, DeviceSlice, DeviceSliceMut, PinnedBuffer, PinnedPool, PooledPinned,
};
pub use scalar::DeviceScalar;
pub use spmm::{SpmmKernel, SpmmKernelOptions, STREAM_MIN_BYTES};
pub use spmv::{csr_rows_skewed, ellr_threads_per_row, SpmvKernel, CSR_VECTOR_MIN_MEAN_ROW};

/// The CUDA backend on one GPU. Cheap to clone (the device is shared) and usable from several
/// threads at once: every operation makes the device's context current on its thread.
#[derive(Clone)]
pub struct CudaBackend {
    gpu: Arc<Gpu>,
    /// The kernel of [`Backend`] SpMVs of CSR matrices ([`CudaBackend::with_csr_spmv_kernel`]).
    csr_spmv_kernel: SpmvKernel,
}

impl CudaBackend {
    /// The backend on device 0.
    pub fn new() -> Result<Self> {
        Self::with_device(0)
    }

    /// The backend on device `ordinal`.
    pub fn with_device(ordinal: u32) -> Result<Self> {
        Ok(CudaBackend {
            gpu: Arc::new(Gpu::new(ordinal)?),
            csr_spmv_kernel: SpmvKernel::Auto,
        })
    }

    /// Starts readying, on a thread of its own, what a process's first call on the device would
    /// otherwise wait for, and returns at once: the kernels (the driver loads each on its first
    /// look-up where module loading is lazy, its default), streams, device memory in the
    /// stream-ordered pool, and then the host staging buffers that copies between host memory
    /// and the device go through (the pool's [`PINNED_POOL_KEEP`](memory::PINNED_POOL_KEEP)
    /// buffers of [`STAGE_BYTES`](memory::STAGE_BYTES)), whose page-locking made a first call
    /// from host memory several times as long as a later one. Started when the backend is made
    /// (as `hetsparse::Context` does), it overlaps with whatever the caller does before its
    /// first call (reading the operands). The first call stops it (loading and page-locking
    /// hold driver locks the call would wait behind) and takes what is ready. What it readied
    /// stays while the backend lives (later calls need it anyway); dropping the backend stops
    /// the thread.
    pub fn warm_up(&self) {
        // Making the backend may have taken a stream; only calls from now on stop the fill.
        self.gpu.pinned_pool().allow_filling();
        let gpu = Arc::downgrade(&self.gpu);
        let spawned = std::thread::Builder::new()
            .name("hetsparse-cuda-warm-up".into())
            .spawn(move || {
                let Some(bound) = gpu.upgrade() else { return };
                if bound.bind().is_err() {
                    return;
                }
                let started = std::time::Instant::now();
                let kernels = bound.warm_up();
                let pool = bound.pinned_pool();
                let locked = pool.fill(|| gpu.strong_count() > 1 && bound.may_warm_up());
                if kernels.is_some() && !pool.call_begun() && pool.is_full() {
                    bound.mark_ready();
                }
                tracing::debug!(
                    kernels,
                    locked,
                    ms = started.elapsed().as_secs_f64() * 1e3,
                    "device readied ahead of the first call"
                );
            });
        if let Err(e) = spawned {
            tracing::debug!(error = %e, "no thread to page-lock staging buffers ahead");
        }
    }

    /// Holds this backend's [warm-up](Self::warm_up) while the caller computes on another
    /// device (a host call beside it, as `hetsparse::Context` makes): the warm-up's
    /// page-locking would stall the call's page faults. It resumes when the returned guard is
    /// dropped; a call on this device ends it instead.
    pub fn pause_warm_up(&self) -> WarmUpPause<'_> {
        self.gpu.pause_warm_up()
    }

    /// Limits the device memory this backend allocates to `bytes` (operands, work buffers and
    /// result batches together). Products larger than the budget are still computed, in more
    /// batches; operations whose operands do not fit return
    /// [`Error::OutOfMemory`].
    pub fn with_memory_budget(self, bytes: u64) -> Self {
        // Setting the driver pool's release threshold can only fail on a broken context,
        // which the next operation reports; the limit itself is always set.
        let _ = self
            .gpu
            .set_memory_limit(bytes.min(self.gpu.total_memory()));
        self
    }

    /// Runs the [`Backend`] SpMVs (`spmv_with`, `spmv_resident`) of CSR matrices, host or
    /// resident, with `kernel` instead of the backend's choice ([`SpmvKernel::Auto`]), for
    /// comparing the CSR kernels where only those calls are at hand; other formats keep theirs.
    /// [`Error::InvalidArgument`] for a kernel that is not a CSR one.
    pub fn with_csr_spmv_kernel(self, kernel: SpmvKernel) -> Result<Self> {
        if let SpmvKernel::CsrSubwarp { lanes } = kernel {
            spmv::check_subwarp_lanes(lanes)?;
        }
        match kernel {
            SpmvKernel::Auto
            | SpmvKernel::CsrScalar
            | SpmvKernel::CsrVector
            | SpmvKernel::CsrBalanced
            | SpmvKernel::CsrStream
            | SpmvKernel::CsrLongRowsApart
            | SpmvKernel::CsrSubwarp { .. } => Ok(CudaBackend {
                csr_spmv_kernel: kernel,
                ..self
            }),
            SpmvKernel::EllrT { .. } => Err(Error::InvalidArgument(format!(
                "{kernel:?} is not a CSR SpMV kernel"
            ))),
        }
    }

    /// The SpMV kernel of the [`Backend`] calls for `a`.
    fn spmv_kernel_for<T: DeviceScalar>(&self, a: &SparseIn<'_, T>) -> SpmvKernel {
        match a {
            SparseIn::Host(SparseRef::Csr(_)) | SparseIn::Device(_) => self.csr_spmv_kernel,
            SparseIn::Host(_) => SpmvKernel::Auto,
        }
    }

    /// The device and its kernels, for code built on this backend.
    pub fn gpu(&self) -> &Gpu {
        &self.gpu
    }
}

/// Every scalar type the kernels are instantiated for: the floats, not yet the integer types
/// and `bool`.
const SCALARS: [ScalarType; 6] = ScalarType::FLOATS;
/// The types SpGEMM runs over through the semiring kernels alone (every product over them,
/// plus-times included): the integers and `bool`.
const EXACT_SCALARS: [ScalarType; 5] = [
    ScalarType::Bool,
    ScalarType::I32,
    ScalarType::I64,
    ScalarType::U32,
    ScalarType::U64,
];

impl Device for CudaBackend {
    fn info(&self) -> DeviceInfo {
        DeviceInfo {
            backend: error::BACKEND,
            name: self.gpu.name().to_string(),
            kind: DeviceKind::Gpu,
            memory_bytes: self.gpu.memory().limit(),
            compute_units: self.gpu.multiprocessors(),
        }
    }

    fn memory_space(&self) -> MemorySpace {
        self.space()
    }

    fn profile(&self) -> DeviceProfile {
        let mut profile = DeviceProfile::defaults(&self.info(), &self.memory_space());
        if let Some(bandwidth) = self.gpu.memory_bandwidth() {
            profile.memory_bandwidth = bandwidth;
            profile.gather_bandwidth = bandwidth / 4.0;
            profile.reported = true;
        }
        if let Some(bytes) = self.gpu.l2_bytes() {
            profile.cache_bytes = bytes;
        }
        if self.gpu.call_begun() {
            profile.cold_start = 0.0;
        } else if self.gpu.is_ready() {
            profile.cold_start = hetsparse_core::backend::profile::GPU_READIED_COLD_START;
        }
        profile
    }

    fn driver_version(&self) -> Option<String> {
        self.gpu.driver_version().map(str::to_string)
    }

    fn memory_pool(&self) -> Option<Arc<MemoryPool>> {
        Some(Arc::clone(self.gpu.memory()))
    }

    fn capabilities(&self) -> &Capabilities {
        // The same on every GPU the PTX loads on: computed once.
        static CAPABILITIES: std::sync::OnceLock<Capabilities> = std::sync::OnceLock::new();
        CAPABILITIES.get_or_init(|| {
            let caps = Capabilities::new()
                .with_all(&spgemm::ALGORITHMS.map(Operation::Spgemm), &SCALARS)
                .with_all(&SparseFormat::ALL.map(Operation::Spmv), &SCALARS)
                .with_all(&SparseFormat::ALL.map(Operation::Spmm), &SCALARS)
                .with_all(&[Operation::DiaSpgemm, Operation::BsrSpgemm], &SCALARS)
                .with(Operation::Spgemm(SpgemmAlgorithm::Auto), &EXACT_SCALARS);
            // Every semiring and mask by the semiring kernels (spgemm::semiring).
            SCALARS
                .iter()
                .chain(&EXACT_SCALARS)
                .fold(caps, |caps, &scalar| {
                    let features = SpgemmFeatures::every_semiring_and_mask(scalar);
                    caps.with_spgemm_features(&[scalar], features.clone())
                        .with_vector_product_features(&[scalar], features)
                })
        })
    }
}

/// The error for a resident handle of this device that this backend did not make.
fn foreign_storage(what: &str) -> Error {
    Error::Internal {
        backend: error::BACKEND,
        what: format!("{what} of this CUDA device is not in this backend's storage"),
    }
}

impl CudaBackend {
    /// This device's memory.
    fn space(&self) -> MemorySpace {
        MemorySpace::Device {
            backend: error::BACKEND,
            id: u64::from(self.gpu.ordinal()),
        }
    }

    /// The device storage behind a resident matrix of this device (the public methods
    /// validated its memory).
    fn csr<'a, T: DeviceScalar>(&self, m: &'a ResidentCsr<T>) -> Result<&'a DeviceCsr<T>> {
        m.storage::<Kept<DeviceCsr<T>>>()
            .map(|k| &k.data)
            .ok_or_else(|| foreign_storage("a resident matrix"))
    }

    /// The device storage behind a resident dense matrix of this device.
    fn dense<'a, T: DeviceScalar>(&self, d: &'a ResidentDense<T>) -> Result<&'a DeviceDense<T>> {
        d.storage::<Kept<DeviceDense<T>>>()
            .map(|k| &k.data)
            .ok_or_else(|| foreign_storage("a resident dense matrix"))
    }

    fn operand<'a, T: DeviceScalar>(&self, m: CsrOperand<'a, T>) -> Result<spgemm::Operand<'a, T>> {
        Ok(match m {
            CsrOperand::Host(m) => spgemm::Operand::Host(m),
            CsrOperand::Resident(r) => spgemm::Operand::Device(self.csr(r)?),
        })
    }

    fn sparse_in<'a, T: DeviceScalar>(&self, m: SparseOperand<'a, T>) -> Result<SparseIn<'a, T>> {
        Ok(match m {
            SparseOperand::Host(m) => SparseIn::Host(m),
            SparseOperand::Resident(r) => SparseIn::Device(self.csr(r)?),
        })
    }

    fn dense_in<'a, T: DeviceScalar>(&self, d: DenseOperand<'a, T>) -> Result<DenseIn<'a, T>> {
        Ok(match d {
            DenseOperand::Host(d) => DenseIn::Host(d),
            DenseOperand::Resident(r) => DenseIn::Device {
                data: &self.dense(r)?.data,
                shape: r.shape(),
                layout: r.layout(),
            },
        })
    }

    fn vec_in<'a, T: DeviceScalar>(&self, x: VectorOperand<'a, T>) -> Result<VecIn<'a, T>> {
        Ok(match x {
            VectorOperand::Host(x) => VecIn::Host(x),
            // One column, as validated.
            VectorOperand::Resident(r) => VecIn::Device(&self.dense(r)?.data),
        })
    }

    /// One chunk call of the SpGEMM pipeline (its operands validated), its results delivered
    /// as `delivery` says: [`spgemm::multiply_chunks`].
    fn chunk_call<T: DeviceScalar>(
        &self,
        a: CsrOperand<'_, T>,
        b: CsrOperand<'_, T>,
        chunks: &[ProductChunk],
        options: &SpgemmOptions,
        run: &RunControl,
        delivery: spgemm::Delivery<'_, '_, '_, T>,
    ) -> Result<()> {
        let (a, b) = (self.operand(a)?, self.operand(b)?);
        run.checkpoint()?;
        spgemm::multiply_chunks(&self.gpu, a, b, chunks, options.algorithm, run, delivery)
    }

    /// The pattern identity of `C⟨M⟩ = A·B` (a mask changes the pattern; a semiring does not).
    fn product_pattern<T: Scalar>(
        a: &CsrOperand<'_, T>,
        b: &CsrOperand<'_, T>,
        options: &SpgemmOptions,
    ) -> PatternId {
        match &options.mask {
            Some(mask) => PatternId::of_masked_product(a.pattern(), b.pattern(), mask),
            None => PatternId::of_product(a.pattern(), b.pattern()),
        }
    }

    fn wrap_csr<T: DeviceScalar>(&self, m: DeviceCsr<T>, pattern: PatternId) -> ResidentCsr<T> {
        let (shape, nnz) = ((m.nrows, m.ncols), m.nnz());
        ResidentCsr::from_storage(self.space(), shape, nnz, pattern, Kept::new(m, &self.gpu))
    }

    fn wrap_dense<T: DeviceScalar>(
        &self,
        data: DeviceBuffer<T::Device>,
        shape: (usize, usize),
        layout: Layout,
    ) -> ResidentDense<T> {
        let dense = Kept::new(DeviceDense::<T> { data }, &self.gpu);
        ResidentDense::from_storage(self.space(), shape, layout, dense)
    }
}

impl<T: DeviceScalar> Backend<T> for CudaBackend {
    fn spgemm_checked(
        &self,
        a: CsrOperand<'_, T>,
        b: CsrOperand<'_, T>,
        options: &SpgemmOptions,
        run: &RunControl,
        _checked: Validated,
    ) -> Result<Csr<T>> {
        let (a, b) = (self.operand(a)?, self.operand(b)?);
        run.checkpoint()?;
        if spgemm::semiring::is_needed::<T>(options) {
            let (c, _) = spgemm::semiring::multiply(&self.gpu, a, b, options, run)?;
            return c.download(&self.gpu, &**self.gpu.stream()?);
        }
        spgemm::multiply(&self.gpu, a, b, options.algorithm, run)
    }

    fn spmm_checked(
        &self,
        a: SparseOperand<'_, T>,
        b: DenseOperand<'_, T>,
        _options: &SpmmOptions,
        run: &RunControl,
        _checked: Validated,
    ) -> Result<Dense<T>> {
        let (nrows, ncols) = (a.shape().0, b.shape().1);
        let (a, b) = (self.sparse_in(a)?, self.dense_in(b)?);
        run.checkpoint()?;
        let layout = match &b {
            DenseIn::Host(d) => d.layout(),
            DenseIn::Device { layout, .. } => *layout,
        };
        // Whole on the device where A, B and C fit there, then one staged download; host
        // operands that do not fit go through panels of B and C streamed over two streams.
        let c = match (spmm::spmm_device(&self.gpu, a, b, SpmmKernel::Auto), a, b) {
            (Ok(c), _, _) => c,
            (
                Err(Error::OutOfMemory {
                    backend: error::BACKEND,
                    ..
                }),
                SparseIn::Host(a),
                DenseIn::Host(b),
            ) => {
                tracing::debug!("SpMM operands do not fit on the device: streamed in panels");
                return spmm::spmm(&self.gpu, a, b, SpmmKernelOptions::default());
            }
            (Err(e), _, _) => return Err(e),
        };
        let data = spmv::download_vec::<T>(&self.gpu, &c)?;
        Ok(Dense::try_new(nrows, ncols, layout, data)?)
    }

    fn spmv_checked(
        &self,
        a: SparseOperand<'_, T>,
        x: VectorOperand<'_, T>,
        _options: &SpmvOptions,
        run: &RunControl,
        _checked: Validated,
    ) -> Result<Vec<T>> {
        let (a, x) = (self.sparse_in(a)?, self.vec_in(x)?);
        run.checkpoint()?;
        let y = spmv::spmv_device(&self.gpu, a, x, self.spmv_kernel_for(&a))?;
        spmv::download_vec::<T>(&self.gpu, &y)
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
        run.checkpoint()?;
        vector::product(&self.gpu, kind, self.operand(a)?, u, options, run)
    }

    fn dia_spgemm_checked(&self, a: &Dia<T>, b: &Dia<T>, _checked: Validated) -> Result<Dia<T>> {
        dia::dia_spgemm(&self.gpu, a, b)
    }

    fn bsr_spgemm_checked(&self, a: &Bsr<T>, b: &Bsr<T>, _checked: Validated) -> Result<Bsr<T>> {
        bsr::bsr_spgemm(&self.gpu, a, b, |pa, pb| {
            <Self as Backend<f32>>::spgemm(self, pa, pb, SpgemmAlgorithm::Auto)
        })
    }

    fn residency(&self) -> Residency<'_, T> {
        Residency::Own(self)
    }

    fn chunk_pipeline(&self) -> Option<&dyn ChunkPipeline<T>> {
        Some(self)
    }
}

impl<T: DeviceScalar> ResidentOps<T> for CudaBackend {
    fn store(&self, m: &Csr<T>) -> Result<ResidentCsr<T>> {
        self.gpu.bind()?;
        let stream = self.gpu.stream()?;
        let dev = DeviceCsr::upload(&self.gpu, &stream, m, "uploaded matrix")?;
        dev.mark_done(&stream)?;
        stream.synchronize()?;
        Ok(self.wrap_csr(dev, PatternId::of(m)))
    }

    fn store_owned(&self, m: Csr<T>) -> Result<ResidentCsr<T>> {
        self.upload(&m)
    }

    fn store_values(
        &self,
        pattern: &ResidentCsr<T>,
        values: &[T],
        _checked: Validated,
    ) -> Result<ResidentCsr<T>> {
        let dev = self.csr(pattern)?;
        self.gpu.bind()?;
        let stream = self.gpu.stream()?;
        let new = dev.with_values(&self.gpu, &stream, values)?;
        // The structure is the pattern's: only the values are new.
        new.vals.mark_done(&stream)?;
        stream.synchronize()?;
        Ok(self.wrap_csr(new, pattern.pattern()))
    }

    fn load(&self, m: &ResidentCsr<T>, _checked: Validated) -> Result<Csr<T>> {
        let dev = self.csr(m)?;
        self.gpu.bind()?;
        dev.download(&self.gpu, &**self.gpu.stream()?)
    }

    fn load_values(&self, m: &ResidentCsr<T>, _checked: Validated) -> Result<Vec<T>> {
        let dev = self.csr(m)?;
        self.gpu.bind()?;
        dev.download_values(&self.gpu, &**self.gpu.stream()?)
    }

    fn store_dense(&self, d: &Dense<T>) -> Result<ResidentDense<T>> {
        self.gpu.bind()?;
        let stream = self.gpu.stream()?;
        let dev = DeviceDense::upload(&self.gpu, &stream, d)?;
        dev.data.mark_done(&stream)?;
        stream.synchronize()?;
        Ok(self.wrap_dense(dev.data, d.shape(), d.layout()))
    }

    fn load_dense(&self, d: &ResidentDense<T>, _checked: Validated) -> Result<Dense<T>> {
        let dev = self.dense(d)?;
        self.gpu.bind()?;
        dev.download(&self.gpu, &**self.gpu.stream()?, d.shape(), d.layout())
    }

    fn spgemm_stored(
        &self,
        a: CsrOperand<'_, T>,
        b: CsrOperand<'_, T>,
        options: &SpgemmOptions,
        run: &RunControl,
        _checked: Validated,
    ) -> Result<ResidentCsr<T>> {
        let pattern = Self::product_pattern(&a, &b, options);
        let (a, b) = (self.operand(a)?, self.operand(b)?);
        run.checkpoint()?;
        let c = if spgemm::semiring::is_needed::<T>(options) {
            spgemm::semiring::multiply(&self.gpu, a, b, options, run)?.0
        } else {
            spgemm::multiply_resident(&self.gpu, a, b, options.algorithm, None, run)?.0
        };
        Ok(self.wrap_csr(c, pattern))
    }

    fn spmm_stored(
        &self,
        a: SparseOperand<'_, T>,
        b: DenseOperand<'_, T>,
        _options: &SpmmOptions,
        run: &RunControl,
        _checked: Validated,
    ) -> Result<ResidentDense<T>> {
        let shape = (a.shape().0, b.shape().1);
        let (a, b) = (self.sparse_in(a)?, self.dense_in(b)?);
        let layout = match &b {
            DenseIn::Host(d) => d.layout(),
            DenseIn::Device { layout, .. } => *layout,
        };
        run.checkpoint()?;
        let c = spmm::spmm_device(&self.gpu, a, b, SpmmKernel::Auto)?;
        Ok(self.wrap_dense(c, shape, layout))
    }

    fn spmv_stored(
        &self,
        a: SparseOperand<'_, T>,
        x: VectorOperand<'_, T>,
        _options: &SpmvOptions,
        run: &RunControl,
        _checked: Validated,
    ) -> Result<ResidentDense<T>> {
        let nrows = a.shape().0;
        let (a, x) = (self.sparse_in(a)?, self.vec_in(x)?);
        run.checkpoint()?;
        let y = spmv::spmv_device(&self.gpu, a, x, self.spmv_kernel_for(&a))?;
        Ok(self.wrap_dense(y, (nrows, 1), Layout::ColMajor))
    }

    fn plan(
        &self,
        a: CsrOperand<'_, T>,
        b: CsrOperand<'_, T>,
        options: &SpgemmOptions,
        _checked: Validated,
    ) -> Result<SpgemmPlan<T>> {
        let (pa, pb) = (OperandPattern::of(&a), OperandPattern::of(&b));
        let (da, db) = (self.operand(a)?, self.operand(b)?);
        // Watched, so that the plan learns the product count whatever the algorithm.
        let run = RunControl::new();
        if spgemm::semiring::is_needed::<T>(options) {
            // The structure (masked or not) is kept; executions compute the values alone.
            let (c, structure) = spgemm::semiring::multiply(&self.gpu, da, db, options, &run)?;
            drop(c);
            let requirement = spgemm::semiring::plan_requirement::<T>(&structure);
            return Ok(SpgemmPlan::new(
                self.space(),
                options.clone(),
                pa,
                pb,
                structure.nnz,
                structure.products,
                requirement,
                PlanState::device(Kept::new(structure, &self.gpu)),
            ));
        }
        let (c, structure) =
            spgemm::multiply_resident(&self.gpu, da, db, options.algorithm, None, &run)?;
        let nnz = c.nnz();
        drop(c);
        let requirement = spgemm::plan_requirement::<T>(&structure);
        Ok(SpgemmPlan::new(
            self.space(),
            options.clone(),
            pa,
            pb,
            nnz,
            structure.products,
            requirement,
            PlanState::device(Kept::new(structure, &self.gpu)),
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
        if let Some(structure) = plan.device_state::<Kept<spgemm::semiring::SemiringStructure>>() {
            let (a, b) = (self.operand(a)?, self.operand(b)?);
            run.checkpoint()?;
            let kind = plan.options().semiring;
            let c = spgemm::semiring::execute(&self.gpu, &structure.data, a, b, kind, run)?;
            return Ok(self.wrap_csr(c, plan.c_pattern()));
        }
        let structure = plan
            .device_state::<Kept<spgemm::Structure>>()
            .map(|k| &k.data)
            .ok_or_else(|| foreign_storage("a SpGEMM plan"))?;
        let (a, b) = (self.operand(a)?, self.operand(b)?);
        run.checkpoint()?;
        let (c, _) =
            spgemm::multiply_resident(&self.gpu, a, b, structure.algorithm, Some(structure), run)?;
        Ok(self.wrap_csr(c, plan.c_pattern()))
    }

    fn requirement(
        &self,
        a: CsrOperand<'_, T>,
        b: CsrOperand<'_, T>,
        options: &SpgemmOptions,
        _checked: Validated,
    ) -> Result<MemoryRequirement> {
        let (a, b) = (self.operand(a)?, self.operand(b)?);
        if spgemm::semiring::is_needed::<T>(options) {
            return spgemm::semiring::requirement(&self.gpu, a, b, options);
        }
        spgemm::requirement(&self.gpu, a, b, options.algorithm)
    }
}

impl<T: DeviceScalar> ChunkPipeline<T> for CudaBackend {
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
        if spgemm::semiring::is_needed::<T>(options) {
            // Each chunk as a product of its own (its mask cut to it): the pipeline below
            // runs plus-times over the float types only.
            return chunks::plain::spgemm_chunks(self, a, b, chunks, options, run, sink, checked);
        }
        self.chunk_call(a, b, chunks, options, run, spgemm::Delivery::Chunks(sink))
    }

    /// The chunks through the same pipeline as [`Backend::spgemm_chunks`], each output batch
    /// written from its pinned buffer straight into the chunk's place in C (a chunk computed
    /// whole on the device is downloaded, then copied into its place).
    fn chunks_into(
        &self,
        a: CsrOperand<'_, T>,
        b: CsrOperand<'_, T>,
        places: &mut [ChunkPlace<'_, T>],
        options: &SpgemmOptions,
        run: &RunControl,
        done: &mut PlaceDone<'_>,
        checked: Validated,
    ) -> Result<()> {
        if spgemm::semiring::is_needed::<T>(options) {
            return chunks::plain::spgemm_chunks_into(
                self, a, b, places, options, run, done, checked,
            );
        }
        let chunks: Vec<ProductChunk> = places.iter().map(|p| p.chunk().clone()).collect();
        let delivery = spgemm::Delivery::Places { places, done };
        self.chunk_call(a, b, &chunks, options, run, delivery)
    }

    /// The chunks' analysis, symbolic and scan kernels alone (as in
    /// [`Backend::spgemm_chunks`]), each chunk's counts read back.
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
        if spgemm::semiring::is_needed::<T>(options) {
            return chunks::plain::spgemm_chunk_counts(
                self, a, b, chunks, options, run, counts, checked,
            );
        }
        let delivery = spgemm::Delivery::Counts(counts);
        self.chunk_call(a, b, chunks, options, run, delivery)
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
        dia::dia_spgemm_rows(&self.gpu, a, b, rows, offsets, c)
    }
}

hetsparse_core::every_scalar!(CudaBackend);

#[cfg(test)]
mod tests {
    use super::*;
    use memory::DeviceBuffer;
    use resident::DeviceCsr;

    /// A matrix put on the device as given, valid or not.
    fn on_device(
        gpu: &Gpu,
        nrows: usize,
        ncols: usize,
        offsets: &[u64],
        cols: &[u32],
    ) -> DeviceCsr<f64> {
        let stream = gpu.stream().expect("stream");
        let vals: Vec<f64> = (0..cols.len()).map(|k| k as f64 + 1.0).collect();
        let (m, s) = (gpu.memory(), &**stream);
        let matrix = DeviceCsr::from_device(
            nrows,
            ncols,
            cols.len() as u64,
            Arc::new(DeviceBuffer::from_host(m, s, offsets, "offsets").expect("offsets")),
            Arc::new(DeviceBuffer::from_host(m, s, cols, "columns").expect("columns")),
            DeviceBuffer::from_host(m, s, &vals, "values").expect("values"),
        );
        stream.synchronize().expect("upload");
        matrix
    }

    #[test]
    fn the_device_check_finds_every_broken_invariant() {
        let backend = match CudaBackend::new() {
            Ok(b) => b,
            Err(e) => {
                assert_ne!(
                    std::env::var("HETSPARSE_REQUIRE_DEVICE").as_deref(),
                    Ok("1"),
                    "HETSPARSE_REQUIRE_DEVICE=1 but {e}"
                );
                eprintln!("the_device_check_finds_every_broken_invariant: skipped, {e}");
                return;
            }
        };
        let gpu = &backend.gpu;
        gpu.bind().expect("bind");
        let stream = gpu.stream().expect("stream");
        let good = on_device(gpu, 3, 4, &[0, 2, 2, 3], &[0, 3, 1]);
        assert!(good.valid_on_device(gpu, &stream).expect("check"));
        let host = good.download(gpu, &stream).expect("download");
        assert_eq!(host.col_indices(), [0, 3, 1]);
        assert_eq!(host.row_offsets(), [0, 2, 2, 3]);
        // Rows longer than a warp, with a swapped pair where one lane's entries meet the next
        // lane's (31, 32) and inside one lane's stride (64, 65 wrap to the same lanes again).
        let sorted: Vec<u32> = (0..100).collect();
        let wide = on_device(
            gpu,
            2,
            100,
            &[0, 100, 200],
            &[sorted.clone(), sorted.clone()].concat(),
        );
        assert!(wide.valid_on_device(gpu, &stream).expect("check"));
        for swap in [31, 64, 98] {
            let mut cols = [sorted.clone(), sorted.clone()].concat();
            cols.swap(100 + swap, 100 + swap + 1);
            let m = on_device(gpu, 2, 100, &[0, 100, 200], &cols);
            assert!(
                !m.valid_on_device(gpu, &stream).expect("check"),
                "swap at {swap}"
            );
        }
        let broken: [(&str, &[u64], &[u32]); 6] = [
            ("unsorted", &[0, 2, 2, 3], &[3, 0, 1]),
            ("repeated", &[0, 2, 2, 3], &[1, 1, 1]),
            ("column out of bounds", &[0, 2, 2, 3], &[0, 4, 1]),
            ("offsets decreasing", &[0, 2, 1, 3], &[0, 3, 1]),
            ("first offset not 0", &[1, 2, 2, 3], &[0, 3, 1]),
            ("last offset not nnz", &[0, 1, 2, 2], &[0, 3, 1]),
        ];
        for (what, offsets, cols) in broken {
            let m = on_device(gpu, 3, 4, offsets, cols);
            assert!(!m.valid_on_device(gpu, &stream).expect("check"), "{what}");
            assert!(
                matches!(m.download(gpu, &stream), Err(Error::Internal { .. })),
                "{what}: downloaded as valid"
            );
        }
    }
}
