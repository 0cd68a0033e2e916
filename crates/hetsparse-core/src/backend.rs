//! The Backend trait: what a device can tell about itself and the operations it runs.
//!
//! Two traits, split so that the scheduler can hold a run-time list of backends:
//! [`Device`] (information and capabilities, independent of the scalar type) and
//! [`Backend<T>`] (the operations over one scalar type). Both are object safe, so
//! `Vec<Box<dyn Backend<f64>>>` can mix CPU, CUDA and OpenCL backends.
//!
//! Operations that can be built from others have defaults: every format's SpMV and SpMM go
//! through CSR, DIA×DIA and BSR×BSR through CSR SpGEMM, and the chunk entry point through
//! [`Backend::spgemm`] on slices. A backend overrides what it does natively.

use std::collections::BTreeSet;
use std::fmt;
use std::ops::Range;

use crate::error::{Error, Result};
use crate::format::{Bsr, Csr, Dense, Dia, SparseFormat, SparseRef};
use crate::scalar::{Scalar, ScalarType};

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

/// A backend's description of its device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    /// The backend's short name: `reference`, `cpu`, `cuda`, `opencl`, ...
    pub backend: String,
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
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Operation::Spgemm(a) => write!(f, "SpGEMM ({a:?})"),
            Operation::DiaSpgemm => f.write_str("DIA×DIA SpGEMM"),
            Operation::BsrSpgemm => f.write_str("BSR×BSR SpGEMM"),
            Operation::Spmm(fmt_) => write!(f, "{fmt_}×dense SpMM"),
            Operation::Spmv(fmt_) => write!(f, "{fmt_} SpMV"),
        }
    }
}

/// The set of (operation, scalar type) pairs a backend supports.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Capabilities {
    entries: BTreeSet<(Operation, ScalarType)>,
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
}

/// Receives computed chunks as they complete, in any order; an error stops the run.
pub type ChunkSink<'a, T> = dyn FnMut(ChunkProduct<T>) -> Result<()> + 'a;

/// What a backend is and can do, independent of the scalar type.
pub trait Device: Send + Sync {
    /// The device this backend runs on.
    fn info(&self) -> DeviceInfo;
    /// The operations and scalar types it runs.
    fn capabilities(&self) -> Capabilities;
}

/// The operations of a backend over scalar type `T`.
///
/// Every operation validates its operands' shapes and returns [`Error::Unsupported`] for what
/// [`Device::capabilities`] does not list. Results are canonical. SpGEMM keeps every entry the
/// product's structure creates, also where values cancel to zero, so the result's structure
/// depends only on the operands' structures.
pub trait Backend<T: Scalar>: Device {
    /// `C = A · B` with the given algorithm.
    fn spgemm(&self, a: &Csr<T>, b: &Csr<T>, algorithm: SpgemmAlgorithm) -> Result<Csr<T>>;

    /// Computes the listed chunks of `A · B`, handing each to `sink` as it completes. A GPU
    /// backend pipelines them, overlapping transfers with computation; results need not fit in
    /// device memory together.
    fn spgemm_chunks(
        &self,
        a: &Csr<T>,
        b: &Csr<T>,
        chunks: &[ProductChunk],
        algorithm: SpgemmAlgorithm,
        sink: &mut ChunkSink<'_, T>,
    ) -> Result<()> {
        check::spgemm(a, b)?;
        check::chunks(a, b, chunks)?;
        for (index, chunk) in chunks.iter().enumerate() {
            let rows = a.rows(chunk.rows.clone())?;
            let panel = b.column_panel(chunk.cols.clone())?;
            let product = self.spgemm(&rows, &panel, algorithm)?;
            sink(ChunkProduct {
                index,
                chunk: chunk.clone(),
                product,
            })?;
        }
        Ok(())
    }

    /// `C = A · B` for a sparse A of any format and a dense B; C has B's layout.
    fn spmm(&self, a: SparseRef<'_, T>, b: &Dense<T>) -> Result<Dense<T>>;

    /// `y = A · x` for a sparse A of any format.
    fn spmv(&self, a: SparseRef<'_, T>, x: &[T]) -> Result<Vec<T>>;

    /// `C = A · B` for band matrices in DIA format.
    fn dia_spgemm(&self, a: &Dia<T>, b: &Dia<T>) -> Result<Dia<T>> {
        check::shapes("DIA×DIA SpGEMM", a.shape(), b.shape())?;
        let c = self.spgemm(&a.to_csr(), &b.to_csr(), SpgemmAlgorithm::Auto)?;
        Ok(Dia::from_csr(&c, u64::MAX)?)
    }

    /// `C = A · B` for block matrices; C has blocks of A's rows × B's columns.
    fn bsr_spgemm(&self, a: &Bsr<T>, b: &Bsr<T>) -> Result<Bsr<T>> {
        check::bsr_spgemm(a, b)?;
        let c = self.spgemm(&a.to_csr(), &b.to_csr(), SpgemmAlgorithm::Auto)?;
        Ok(Bsr::from_csr(&c, (a.block_shape().0, b.block_shape().1))?)
    }
}

/// Operand checks shared by every backend, so that each returns the same errors.
pub mod check {
    use super::*;

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

    /// SpMV operands.
    pub fn spmv<T: Scalar>(a: &SparseRef<'_, T>, x: &[T]) -> Result<()> {
        shapes("SpMV", a.shape(), (x.len(), 1))
    }

    /// SpMM operands.
    pub fn spmm<T: Scalar>(a: &SparseRef<'_, T>, b: &Dense<T>) -> Result<()> {
        shapes("SpMM", a.shape(), b.shape())
    }

    /// Chunks must lie inside C.
    pub fn chunks<T: Scalar>(a: &Csr<T>, b: &Csr<T>, chunks: &[ProductChunk]) -> Result<()> {
        for (k, c) in chunks.iter().enumerate() {
            if c.rows.start > c.rows.end
                || c.rows.end > a.nrows()
                || c.cols.start > c.cols.end
                || c.cols.end > b.ncols()
            {
                return Err(Error::InvalidArgument(format!(
                    "chunk {k} (rows {:?}, columns {:?}) is outside the {}×{} product",
                    c.rows,
                    c.cols,
                    a.nrows(),
                    b.ncols()
                )));
            }
        }
        Ok(())
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
            })
        }
    }
}
