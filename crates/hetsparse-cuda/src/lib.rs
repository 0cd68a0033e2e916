//! CUDA backend of hetsparse: the [`Backend`] operations on an NVIDIA GPU through `cust`.
//!
//! Kernels are CUDA C in `kernels-cuda/`, compiled by `cargo xtask kernels` to PTX (ISA 8.0,
//! `compute_75`: Turing and newer GPUs, CUDA 12.0 and newer drivers) that this crate embeds,
//! so building it needs no CUDA toolkit, only a `libcuda` to link against (the toolkit's stub
//! is enough; see the README). At run time the driver JIT-compiles the PTX for the GPU.
//!
//! Without a GPU, without a driver, or linked against the stub, [`CudaBackend::new`] returns
//! [`Error::NoDevice`](hetsparse_core::Error::NoDevice).
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
//! Results are produced in row batches copied to pinned host buffers while the next batch
//! computes (two buffers), so the product may be larger than device memory; only A and B
//! must fit, with room for the work buffers.
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
pub mod scalar;
mod spgemm;

mod bsr;
mod dia;
mod spmm;
mod spmv;

use std::sync::Arc;

use hetsparse_core::backend::check;
use hetsparse_core::{
    Backend, Bsr, Capabilities, ChunkSink, Csr, CsrOperand, Dense, DenseOperand, Device,
    DeviceInfo, DeviceKind, Dia, Operation, ProductChunk, Result, RunControl, ScalarType,
    SparseFormat, SparseOperand, SpgemmAlgorithm, SpgemmOptions, SpmvOptions, VectorOperand,
};

pub use context::{Arg, Event, Function, Gpu, LaunchConfig, Stream};
pub use memory::{DeviceArena, DeviceBuffer, DeviceSlice, PinnedBuffer, PinnedPool, PooledPinned};
pub use scalar::DeviceScalar;
pub use spmm::{SpmmKernel, SpmmKernelOptions, STREAM_MIN_BYTES};
pub use spmv::{ellr_threads_per_row, SpmvKernel, CSR_VECTOR_MIN_MEAN_ROW};

/// The CUDA backend on one GPU. Cheap to clone (the device is shared) and usable from several
/// threads at once: every operation makes the device's context current on its thread.
#[derive(Clone)]
pub struct CudaBackend {
    gpu: Arc<Gpu>,
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
        })
    }

    /// Limits the device memory this backend allocates to `bytes` (operands, work buffers and
    /// result batches together). Products larger than the budget are still computed, in more
    /// batches; operations whose operands do not fit return
    /// [`Error::OutOfMemory`](hetsparse_core::Error::OutOfMemory).
    pub fn with_memory_budget(self, bytes: u64) -> Self {
        self.gpu
            .memory()
            .set_limit(bytes.min(self.gpu.total_memory()));
        self
    }

    /// The device and its kernels, for code built on this backend.
    pub fn gpu(&self) -> &Gpu {
        &self.gpu
    }
}

/// Every scalar type the kernels are instantiated for.
const SCALARS: [ScalarType; 6] = ScalarType::ALL;

impl Device for CudaBackend {
    fn info(&self) -> DeviceInfo {
        DeviceInfo {
            backend: error::BACKEND.into(),
            name: self.gpu.name().to_string(),
            kind: DeviceKind::Gpu,
            memory_bytes: self.gpu.memory().limit(),
            compute_units: self.gpu.multiprocessors(),
        }
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::new()
            .with_all(&spgemm::ALGORITHMS.map(Operation::Spgemm), &SCALARS)
            .with_all(&SparseFormat::ALL.map(Operation::Spmv), &SCALARS)
            .with_all(&SparseFormat::ALL.map(Operation::Spmm), &SCALARS)
            .with_all(&[Operation::DiaSpgemm, Operation::BsrSpgemm], &SCALARS)
    }
}

impl<T: DeviceScalar> Backend<T> for CudaBackend {
    fn spgemm_with(
        &self,
        a: CsrOperand<'_, T>,
        b: CsrOperand<'_, T>,
        options: &SpgemmOptions,
        run: &RunControl,
    ) -> Result<Csr<T>> {
        check::shapes("SpGEMM", a.shape(), b.shape())?;
        check::supported::<T>(self, Operation::Spgemm(options.algorithm))?;
        run.checkpoint()?;
        let (a, b) = (check::csr_operand(self, a)?, check::csr_operand(self, b)?);
        let products = run.plan_product(a, b)?;
        let c = spgemm::multiply(&self.gpu, a, b, options.algorithm)?;
        run.add_done(products);
        Ok(c)
    }

    fn spmm_with(
        &self,
        a: SparseOperand<'_, T>,
        b: DenseOperand<'_, T>,
        _options: &hetsparse_core::SpmmOptions,
        run: &RunControl,
    ) -> Result<Dense<T>> {
        run.checkpoint()?;
        let (a, b) = (
            check::sparse_operand(self, a)?,
            check::dense_operand(self, b)?,
        );
        spmm::spmm(&self.gpu, a, b, SpmmKernelOptions::default())
    }

    fn spmv_with(
        &self,
        a: SparseOperand<'_, T>,
        x: VectorOperand<'_, T>,
        _options: &SpmvOptions,
        run: &RunControl,
    ) -> Result<Vec<T>> {
        run.checkpoint()?;
        let (a, x) = (
            check::sparse_operand(self, a)?,
            check::vector_operand(self, x)?,
        );
        spmv::spmv(&self.gpu, a, x, SpmvKernel::Auto)
    }

    fn spgemm_chunks(
        &self,
        a: CsrOperand<'_, T>,
        b: CsrOperand<'_, T>,
        chunks: &[ProductChunk],
        options: &SpgemmOptions,
        run: &RunControl,
        sink: &mut ChunkSink<'_, T>,
    ) -> Result<()> {
        check::shapes("SpGEMM", a.shape(), b.shape())?;
        check::chunks(a.shape(), b.shape(), chunks)?;
        check::supported::<T>(self, Operation::Spgemm(options.algorithm))?;
        run.checkpoint()?;
        let (a, b) = (check::csr_operand(self, a)?, check::csr_operand(self, b)?);
        spgemm::multiply_chunks(&self.gpu, a, b, chunks, options.algorithm, sink)
    }

    fn dia_spgemm(&self, a: &Dia<T>, b: &Dia<T>) -> Result<Dia<T>> {
        dia::dia_spgemm(&self.gpu, a, b)
    }

    fn bsr_spgemm(&self, a: &Bsr<T>, b: &Bsr<T>) -> Result<Bsr<T>> {
        bsr::bsr_spgemm(&self.gpu, a, b, |pa, pb| {
            <Self as Backend<f32>>::spgemm(self, pa, pb, SpgemmAlgorithm::Auto)
        })
    }
}
