//! Errors: what was wrong and where.

use crate::backend::{BackendKind, MemorySpace, Operation};
use crate::scalar::ScalarType;

/// A structural problem in the arrays handed to a matrix constructor.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FormatError {
    /// An array has the wrong length.
    #[error("{format}: `{array}` has length {found}, expected {expected}")]
    LengthMismatch {
        /// The format being built.
        format: &'static str,
        /// The array at fault.
        array: &'static str,
        /// The length it must have.
        expected: u64,
        /// The length it has.
        found: u64,
    },
    /// An index points outside the matrix.
    #[error("{format}: {axis} index {index} at position {position} is out of bounds (dimension {bound})")]
    IndexOutOfBounds {
        /// The format being built.
        format: &'static str,
        /// `row`, `column`, `block row`, ...
        axis: &'static str,
        /// Position in the index array.
        position: u64,
        /// The offending index.
        index: u64,
        /// The dimension it must be below.
        bound: u64,
    },
    /// Offsets decrease somewhere.
    #[error("{format}: offsets decrease at position {position} ({previous} then {next})")]
    OffsetsNotMonotone {
        /// The format being built.
        format: &'static str,
        /// Position of the smaller offset.
        position: u64,
        /// The offset before it.
        previous: u64,
        /// The offending offset.
        next: u64,
    },
    /// Offsets do not start at zero or do not end at the number of stored entries.
    #[error("{format}: offsets must run from 0 to {nnz}, they run from {first} to {last}")]
    OffsetsEnds {
        /// The format being built.
        format: &'static str,
        /// The first offset.
        first: u64,
        /// The last offset.
        last: u64,
        /// The number of stored entries.
        nnz: u64,
    },
    /// Indices within one row (or column, block row, ...) are not strictly increasing.
    #[error("{format}: indices in {axis} {line} are not sorted at position {position} ({previous} then {next}); use a sorting constructor")]
    Unsorted {
        /// The format being built.
        format: &'static str,
        /// `row`, `column`, ...
        axis: &'static str,
        /// Which row (or column).
        line: u64,
        /// Position in the index array.
        position: u64,
        /// The index before.
        previous: u64,
        /// The offending index.
        next: u64,
    },
    /// The same entry is stored twice where canonical form is required.
    #[error("{format}: entry ({row}, {col}) is stored twice (position {position}); use a constructor that sums duplicates")]
    Duplicate {
        /// The format being built.
        format: &'static str,
        /// Row of the entry.
        row: u64,
        /// Column of the entry.
        col: u64,
        /// Position of the second copy.
        position: u64,
    },
    /// A dimension or a size derived from it does not fit the index types.
    #[error("{format}: shape {nrows}×{ncols} is too large: {reason}")]
    ShapeOverflow {
        /// The format being built.
        format: &'static str,
        /// Rows.
        nrows: u64,
        /// Columns.
        ncols: u64,
        /// Which limit was passed.
        reason: &'static str,
    },
    /// A parameter is out of its range (block size 0, diagonal offset outside the matrix, ...).
    #[error("{format}: {what}")]
    InvalidParameter {
        /// The format being built.
        format: &'static str,
        /// What is wrong.
        what: String,
    },
}

/// A Matrix Market file that could not be read or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MatrixMarketError {
    /// The underlying reader or writer failed.
    #[error("Matrix Market I/O failed: {0}")]
    Io(#[from] std::io::Error),
    /// A line does not hold what the format says it must.
    #[error("Matrix Market line {line}: {message}")]
    Parse {
        /// 1-based line number.
        line: u64,
        /// What was expected and what was found.
        message: String,
    },
    /// The file is well formed but holds something the target type cannot (complex into real).
    #[error("Matrix Market: {0}")]
    Unsupported(String),
    /// Reading the file would take more memory than the reader was allowed
    /// ([`ReadOptions::max_bytes`](crate::matrix_market::ReadOptions::max_bytes)): the size line
    /// announces more than the limit, or a conversion needs more.
    #[error(
        "Matrix Market: {what} needs {needed_bytes} bytes, more than the limit of {limit_bytes} \
         bytes (ReadOptions::max_bytes)"
    )]
    MemoryLimit {
        /// What would have been allocated.
        what: String,
        /// Bytes it needs.
        needed_bytes: u64,
        /// The limit in force.
        limit_bytes: u64,
    },
    /// The allocator refused memory the matrix needs.
    #[error("Matrix Market: out of memory allocating {needed_bytes} bytes for {what}")]
    OutOfMemory {
        /// What was being allocated.
        what: String,
        /// Bytes asked for.
        needed_bytes: u64,
    },
    /// A file could not be opened; says which.
    #[error("cannot open Matrix Market file `{}`: {source}", path.display())]
    Open {
        /// The path as given.
        path: std::path::PathBuf,
        /// What the operating system said.
        source: std::io::Error,
    },
}

/// Every error hetsparse returns.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Matrix arrays are not a valid matrix.
    #[error(transparent)]
    Format(#[from] FormatError),
    /// Matrix Market reading or writing failed.
    #[error(transparent)]
    MatrixMarket(#[from] MatrixMarketError),
    /// Operand shapes do not fit the operation.
    #[error(
        "{op}: operand shapes do not match: {left_rows}×{left_cols} and {right_rows}×{right_cols}"
    )]
    ShapeMismatch {
        /// The operation.
        op: &'static str,
        /// Rows of the left operand.
        left_rows: u64,
        /// Columns of the left operand.
        left_cols: u64,
        /// Rows of the right operand (or length of the vector).
        right_rows: u64,
        /// Columns of the right operand (1 for a vector).
        right_cols: u64,
    },
    /// The backend does not implement this operation for this scalar type.
    #[error(
        "backend `{backend}` does not support {op} for {scalar}{}",
        .detail.as_ref().map(|d| format!(" ({d})")).unwrap_or_default()
    )]
    Unsupported {
        /// The kind of backend.
        backend: BackendKind,
        /// The operation asked for.
        op: Operation,
        /// The scalar type asked for.
        scalar: ScalarType,
        /// Why, where the backend can say more (the device lacks double precision, ...).
        detail: Option<String>,
    },
    /// An argument other than a matrix is invalid.
    #[error("{0}")]
    InvalidArgument(String),
    /// A result or a buffer would exceed a limit of the index types or of memory.
    #[error("{what} needs {needed} {unit}, more than the limit of {limit}")]
    TooLarge {
        /// What would be too large.
        what: String,
        /// How much is needed.
        needed: u64,
        /// The limit.
        limit: u64,
        /// Unit of both numbers.
        unit: &'static str,
    },
    /// Device memory ran out, or a budget set by the caller was exceeded.
    #[error("{backend}: out of device memory: {what} needs {needed_bytes} bytes, {available_bytes} available")]
    OutOfMemory {
        /// The kind of backend.
        backend: BackendKind,
        /// What was being allocated.
        what: String,
        /// Bytes needed.
        needed_bytes: u64,
        /// Bytes available (free memory or the budget left).
        available_bytes: u64,
    },
    /// No device of the kind asked for is present.
    #[error("{backend}: no device: {reason}")]
    NoDevice {
        /// The kind of backend.
        backend: BackendKind,
        /// Why none was found (no driver, a link stub, no platform, ...).
        reason: String,
    },
    /// A device, driver or runtime call failed.
    #[error("{backend}: {context}: {message}")]
    Device {
        /// The kind of backend.
        backend: BackendKind,
        /// What was being done.
        context: String,
        /// What the driver or runtime said.
        message: String,
        /// What kind of failure it was: whether the work may succeed elsewhere.
        fault: DeviceFault,
        /// The driver's or runtime's own error, where there is one.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
    /// The run was cancelled through its [`RunControl`](crate::RunControl).
    #[error("the run was cancelled")]
    Cancelled,
    /// A resident matrix or plan was handed to a backend on another memory.
    #[error("{what} lives in {found}, this backend computes in {expected}")]
    WrongDevice {
        /// What was handed over.
        what: String,
        /// Where it lives.
        found: MemorySpace,
        /// Where the backend computes.
        expected: MemorySpace,
    },
    /// A plan was executed with an operand of another sparsity pattern.
    #[error("SpGEMM plan: operand {operand} does not have the planned pattern: {detail}")]
    PatternMismatch {
        /// `A` or `B` (or `A·B` for a product outside the planned structure).
        operand: &'static str,
        /// What differs.
        detail: String,
    },
    /// A bug in hetsparse: an invariant of the backend failed. Please report it.
    #[error("{backend}: internal error (a bug, please report it): {what}")]
    Internal {
        /// The kind of backend.
        backend: BackendKind,
        /// The invariant that failed.
        what: String,
    },
    /// The computation of one chunk of a product failed.
    #[error("chunk {index}: {source}")]
    InChunk {
        /// Position of the chunk in the list asked for.
        index: usize,
        /// Why it failed.
        source: Box<Error>,
    },
}

/// The kinds of device failure, for a scheduler deciding whether to retry elsewhere.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DeviceFault {
    /// A kernel failed to launch or aborted (too many resources, a trap, a timeout).
    LaunchFailed,
    /// The device or its context is gone (reset, unplugged, an unrecoverable fault).
    DeviceLost,
    /// Any other driver or runtime failure.
    Other,
}

impl Error {
    /// A device failure of kind [`DeviceFault::Other`] with no source error.
    pub fn device(
        backend: BackendKind,
        context: impl Into<String>,
        message: impl Into<String>,
    ) -> Error {
        Error::Device {
            backend,
            context: context.into(),
            message: message.into(),
            fault: DeviceFault::Other,
            source: None,
        }
    }

    /// This error, said to have happened in chunk `index`.
    pub fn in_chunk(self, index: usize) -> Error {
        match self {
            e @ (Error::InChunk { .. } | Error::Cancelled) => e,
            e => Error::InChunk {
                index,
                source: Box::new(e),
            },
        }
    }

    /// Whether the same work may succeed when tried again, on this device later or on another:
    /// out of memory, a failed launch, a lost device. Caller errors (shapes, formats,
    /// arguments, wrong handles), cancellation and internal bugs are not.
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::OutOfMemory { .. } => true,
            Error::Device { fault, .. } => {
                matches!(fault, DeviceFault::LaunchFailed | DeviceFault::DeviceLost)
            }
            Error::InChunk { source, .. } => source.is_retryable(),
            _ => false,
        }
    }

    /// Whether the caller asked for something invalid (operands, arguments, handles, plans,
    /// an operation the backend does not offer).
    pub fn is_caller_error(&self) -> bool {
        match self {
            Error::Format(_)
            | Error::MatrixMarket(_)
            | Error::ShapeMismatch { .. }
            | Error::Unsupported { .. }
            | Error::InvalidArgument(_)
            | Error::TooLarge { .. }
            | Error::WrongDevice { .. }
            | Error::PatternMismatch { .. } => true,
            Error::InChunk { source, .. } => source.is_caller_error(),
            _ => false,
        }
    }
}

/// `Result` with hetsparse's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scheduler_can_sort_errors() {
        let oom = Error::OutOfMemory {
            backend: crate::BackendKind::Cuda,
            what: "C".into(),
            needed_bytes: 10,
            available_bytes: 4,
        };
        assert!(oom.is_retryable() && !oom.is_caller_error());
        let lost = Error::Device {
            backend: crate::BackendKind::Cuda,
            context: "launch".into(),
            message: "device lost".into(),
            fault: DeviceFault::DeviceLost,
            source: None,
        };
        assert!(lost.is_retryable());
        assert!(!Error::device(BackendKind::Cuda, "query", "odd").is_retryable());
        let shape = Error::ShapeMismatch {
            op: "SpGEMM",
            left_rows: 1,
            left_cols: 2,
            right_rows: 3,
            right_cols: 4,
        };
        assert!(shape.is_caller_error() && !shape.is_retryable());
        let internal = Error::Internal {
            backend: crate::BackendKind::Cpu,
            what: "a hole in C".into(),
        };
        assert!(!internal.is_retryable() && !internal.is_caller_error());
        assert!(!Error::Cancelled.is_retryable());

        let in_chunk = oom.in_chunk(3);
        assert!(in_chunk.is_retryable());
        assert!(in_chunk
            .to_string()
            .starts_with("chunk 3: cuda: out of device memory"));
        // Naming the chunk twice keeps the first name; cancellation names none.
        assert!(matches!(
            in_chunk.in_chunk(5),
            Error::InChunk { index: 3, .. }
        ));
        assert!(matches!(Error::Cancelled.in_chunk(1), Error::Cancelled));
    }

    #[test]
    fn a_driver_error_keeps_its_source() {
        let io = std::io::Error::other("driver said no");
        let e = Error::Device {
            backend: crate::BackendKind::OpenCl,
            context: "enqueue".into(),
            message: io.to_string(),
            fault: DeviceFault::LaunchFailed,
            source: Some(Box::new(io)),
        };
        let source = std::error::Error::source(&e).expect("a source");
        assert_eq!(source.to_string(), "driver said no");
    }
}
