//! What can go wrong, each saying what and where.

use std::path::PathBuf;

use hetsparse::MatrixMarketError;

/// Every error the command reports; [`CliError::exit_code`] is its exit status.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// An input file cannot be opened.
    #[error("cannot open `{}`: {source}", path.display())]
    Open {
        /// The path as given.
        path: PathBuf,
        /// What the operating system said.
        source: std::io::Error,
    },
    /// An input file is not valid Matrix Market (the message names the line).
    #[error("`{}`: {source}", path.display())]
    Read {
        /// The path as given.
        path: PathBuf,
        /// What the reader found.
        source: MatrixMarketError,
    },
    /// The operands of the product do not chain.
    #[error(
        "{op}: the shapes do not chain: A ({a_file}) is {a_rows}×{a_cols}, {what} ({b_file}) is \
         {b_rows}×{b_cols} (A's columns must equal {what}'s rows)"
    )]
    Shapes {
        /// The operation.
        op: &'static str,
        /// The right operand: `B`, `x`, ...
        what: &'static str,
        /// A's file, quoted.
        a_file: String,
        /// Where the right operand came from: its file quoted, or how it was made from A.
        b_file: String,
        /// Rows of A.
        a_rows: usize,
        /// Columns of A.
        a_cols: usize,
        /// Rows of the right operand.
        b_rows: usize,
        /// Columns of the right operand.
        b_cols: usize,
    },
    /// The device asked for is not there (or this build cannot reach it).
    #[error("device `{device}` is not available: {reason}")]
    Device {
        /// The device as named on the command line.
        device: String,
        /// Why not.
        reason: String,
    },
    /// The output cannot be written; nothing is left at its path.
    #[error("cannot write `{}`: {reason}", path.display())]
    Write {
        /// The output path as given.
        path: PathBuf,
        /// Why not.
        reason: String,
    },
    /// Arguments that do not go together.
    #[error("{0}")]
    Usage(String),
    /// A distributed step failed: the same error on every rank, naming the rank that found it.
    #[cfg(feature = "mpi")]
    #[error("distributed: {0}")]
    Distributed(#[from] hetsparse_mpi::Error),
    /// The collective reader found a file wrong, or some rank could not read it.
    #[cfg(feature = "mpi")]
    #[error("`{}`: {source}", path.display())]
    DistRead {
        /// The path as given.
        path: PathBuf,
        /// What the reader found, and on which rank.
        source: hetsparse_mpi::Error,
    },
    /// The collective writer could not write C; nothing is left at its path.
    #[cfg(feature = "mpi")]
    #[error("cannot write `{}`: {source}", path.display())]
    DistWrite {
        /// The output path as given.
        path: PathBuf,
        /// What failed, and on which rank.
        source: hetsparse_mpi::Error,
    },
    /// The library failed while computing.
    #[error(transparent)]
    Compute(#[from] hetsparse::Error),
}

impl CliError {
    /// 2 for arguments that do not go together (as for the ones the parser rejects), 1 for
    /// everything else.
    pub fn exit_code(&self) -> i32 {
        match self {
            CliError::Usage(_) => 2,
            _ => 1,
        }
    }
}
