//! Errors of the distributed layer, and how every rank comes to hold the same one.

use mpi::traits::*;

/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong in a distributed operation, and on which rank it was found.
///
/// Every operation of this crate is collective, and so are its errors: when one rank finds a
/// problem, every rank of the communicator returns the same `Error` (the one found by the
/// lowest-numbered failing rank), instead of some ranks waiting forever for the others.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A rank's block of rows does not fit the others' (its column count, its number of rows).
    #[error("rank {rank}: invalid block of rows: {reason}")]
    InvalidBlock {
        /// The rank whose block is wrong.
        rank: i32,
        /// What is wrong with it.
        reason: String,
    },
    /// A row partition does not fit the matrix or the communicator.
    #[error("rank {rank}: invalid row partition: {reason}")]
    Partition {
        /// The rank that found the problem.
        rank: i32,
        /// What is wrong.
        reason: String,
    },
    /// The operands of a product have shapes that do not multiply.
    #[error("rank {rank}: operand shapes do not match: {a_rows}×{a_cols} and {b_rows}×{b_cols}")]
    ShapeMismatch {
        /// The rank that found the mismatch.
        rank: i32,
        /// Rows of A.
        a_rows: u64,
        /// Columns of A.
        a_cols: u64,
        /// Rows of B.
        b_rows: u64,
        /// Columns of B.
        b_cols: u64,
    },
    /// An argument is out of range (a root rank, a message size limit).
    #[error("rank {rank}: invalid argument: {reason}")]
    InvalidArgument {
        /// The rank that found it.
        rank: i32,
        /// What is wrong.
        reason: String,
    },
    /// A message received from another rank is not what was agreed (lengths, indices).
    #[error("rank {rank}: malformed message from rank {from}: {reason}")]
    Message {
        /// The receiving rank.
        rank: i32,
        /// The sending rank.
        from: i32,
        /// What is wrong with it.
        reason: String,
    },
    /// The local computation (through a `hetsparse::Context`) failed on a rank.
    #[error("rank {rank}: local computation failed: {message}")]
    Compute {
        /// The rank whose computation failed.
        rank: i32,
        /// The local error, as text.
        message: String,
    },
    /// A file could not be opened, read or written.
    #[error("rank {rank}: {reason}")]
    Io {
        /// The rank that failed.
        rank: i32,
        /// What failed, naming the file.
        reason: String,
    },
    /// A Matrix Market file is malformed or of a kind that cannot be read collectively.
    #[error("rank {rank}: Matrix Market{}: {reason}", at_line(*.line))]
    MatrixMarket {
        /// The rank that found the problem.
        rank: i32,
        /// The 1-based line of the file where it is, when one line is to blame.
        line: Option<u64>,
        /// What is wrong.
        reason: String,
    },
    /// A caller's callback (the batches of a batched product) returned an error on a rank.
    #[error("rank {rank}: the callback failed: {message}")]
    Callback {
        /// The rank whose callback failed.
        rank: i32,
        /// The callback's error.
        message: String,
    },
}

/// `" line N"`, or nothing.
fn at_line(line: Option<u64>) -> String {
    line.map(|l| format!(" line {l}")).unwrap_or_default()
}

impl Error {
    /// The rank on which the error was found.
    pub fn rank(&self) -> i32 {
        match self {
            Error::InvalidBlock { rank, .. }
            | Error::Partition { rank, .. }
            | Error::ShapeMismatch { rank, .. }
            | Error::InvalidArgument { rank, .. }
            | Error::Message { rank, .. }
            | Error::Compute { rank, .. }
            | Error::Io { rank, .. }
            | Error::MatrixMarket { rank, .. }
            | Error::Callback { rank, .. } => *rank,
        }
    }

    /// The same error with every rank it names (the finder, a sender) renumbered by `f`: from
    /// a sub-communicator's numbering to the parent's.
    pub(crate) fn map_ranks(self, f: impl Fn(i32) -> i32) -> Error {
        match self {
            Error::InvalidBlock { rank, reason } => Error::InvalidBlock {
                rank: f(rank),
                reason,
            },
            Error::Partition { rank, reason } => Error::Partition {
                rank: f(rank),
                reason,
            },
            Error::ShapeMismatch {
                rank,
                a_rows,
                a_cols,
                b_rows,
                b_cols,
            } => Error::ShapeMismatch {
                rank: f(rank),
                a_rows,
                a_cols,
                b_rows,
                b_cols,
            },
            Error::InvalidArgument { rank, reason } => Error::InvalidArgument {
                rank: f(rank),
                reason,
            },
            Error::Message { rank, from, reason } => Error::Message {
                rank: f(rank),
                from: f(from),
                reason,
            },
            Error::Compute { rank, message } => Error::Compute {
                rank: f(rank),
                message,
            },
            Error::Io { rank, reason } => Error::Io {
                rank: f(rank),
                reason,
            },
            Error::MatrixMarket { rank, line, reason } => Error::MatrixMarket {
                rank: f(rank),
                line,
                reason,
            },
            Error::Callback { rank, message } => Error::Callback {
                rank: f(rank),
                message,
            },
        }
    }

    /// The error as bytes, to be broadcast from the rank that found it.
    fn encode(&self) -> Vec<u8> {
        let (code, numbers, text): (u8, Vec<u64>, &str) = match self {
            Error::InvalidBlock { reason, .. } => (0, vec![], reason),
            Error::Partition { reason, .. } => (1, vec![], reason),
            Error::ShapeMismatch {
                a_rows,
                a_cols,
                b_rows,
                b_cols,
                ..
            } => (2, vec![*a_rows, *a_cols, *b_rows, *b_cols], ""),
            Error::InvalidArgument { reason, .. } => (3, vec![], reason),
            Error::Message { from, reason, .. } => (4, vec![*from as u64], reason),
            Error::Compute { message, .. } => (5, vec![], message),
            Error::Io { reason, .. } => (6, vec![], reason),
            Error::MatrixMarket { line, reason, .. } => (7, line.iter().copied().collect(), reason),
            Error::Callback { message, .. } => (8, vec![], message),
        };
        let mut out = vec![code];
        out.extend_from_slice(&self.rank().to_le_bytes());
        out.push(numbers.len() as u8);
        for n in numbers {
            out.extend_from_slice(&n.to_le_bytes());
        }
        out.extend_from_slice(text.as_bytes());
        out
    }

    /// Reads what [`Error::encode`] wrote; `None` when the bytes are not such an error.
    fn decode(bytes: &[u8]) -> Option<Error> {
        let code = *bytes.first()?;
        let rank = i32::from_le_bytes(bytes.get(1..5)?.try_into().ok()?);
        let count = usize::from(*bytes.get(5)?);
        let mut numbers = Vec::with_capacity(count);
        for i in 0..count {
            let at = 6 + 8 * i;
            numbers.push(u64::from_le_bytes(bytes.get(at..at + 8)?.try_into().ok()?));
        }
        let text = String::from_utf8_lossy(bytes.get(6 + 8 * count..)?).into_owned();
        Some(match (code, numbers.as_slice()) {
            (0, []) => Error::InvalidBlock { rank, reason: text },
            (1, []) => Error::Partition { rank, reason: text },
            (2, &[a_rows, a_cols, b_rows, b_cols]) => Error::ShapeMismatch {
                rank,
                a_rows,
                a_cols,
                b_rows,
                b_cols,
            },
            (3, []) => Error::InvalidArgument { rank, reason: text },
            (4, &[from]) => Error::Message {
                rank,
                from: i32::try_from(from).ok()?,
                reason: text,
            },
            (5, []) => Error::Compute {
                rank,
                message: text,
            },
            (6, []) => Error::Io { rank, reason: text },
            (7, []) => Error::MatrixMarket {
                rank,
                line: None,
                reason: text,
            },
            (7, &[line]) => Error::MatrixMarket {
                rank,
                line: Some(line),
                reason: text,
            },
            (8, []) => Error::Callback {
                rank,
                message: text,
            },
            _ => return None,
        })
    }
}

/// [`Error::ShapeMismatch`], found by `rank`, unless A's columns (of `a`, rows × columns) are
/// B's rows.
pub(crate) fn check_chain(rank: i32, a: (u64, u64), b: (u64, u64)) -> Result<()> {
    let ((a_rows, a_cols), (b_rows, b_cols)) = (a, b);
    if a_cols != b_rows {
        return Err(Error::ShapeMismatch {
            rank,
            a_rows,
            a_cols,
            b_rows,
            b_cols,
        });
    }
    Ok(())
}

/// Makes a local outcome collective: `Ok` on every rank when every rank succeeded, otherwise
/// the error of the lowest-numbered failing rank, on every rank.
///
/// Costs one all-reduce of an `i32` when all went well, plus two broadcasts when not. Every rank
/// of `comm` must call it at the same point. Every function of this crate ends its fallible
/// local steps with it; a caller does the same with its own steps (opening an output, making
/// a `Context`) so that no rank goes on to a collective call that another has abandoned.
pub fn agree<C: Communicator, T>(comm: &C, local: Result<T>) -> Result<T> {
    let rank = comm.rank();
    let mine = if local.is_err() { rank } else { i32::MAX };
    let mut first = i32::MAX;
    comm.all_reduce_into(&mine, &mut first, mpi::collective::SystemOperation::min());
    if first == i32::MAX {
        return local;
    }
    let root = comm.process_at_rank(first);
    let mut encoded = match &local {
        Err(e) if rank == first => e.encode(),
        _ => Vec::new(),
    };
    let mut len = encoded.len() as u64;
    root.broadcast_into(&mut len);
    // An error's text is short (a few hundred bytes): one message of at most i32::MAX bytes.
    let len = usize::try_from(len).unwrap_or(0).min(1 << 20);
    encoded.resize(len, 0);
    root.broadcast_into(&mut encoded[..]);
    match local {
        Err(e) if rank == first => Err(e),
        _ => Err(Error::decode(&encoded).unwrap_or_else(|| Error::Message {
            rank,
            from: first,
            reason: "an error report that could not be read".to_string(),
        })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_error_survives_encoding() {
        let errors = [
            Error::InvalidBlock {
                rank: 3,
                reason: "ncols 5, rank 0 has 6".into(),
            },
            Error::Partition {
                rank: 0,
                reason: "sums to 9".into(),
            },
            Error::ShapeMismatch {
                rank: 1,
                a_rows: 1 << 40,
                a_cols: 2,
                b_rows: 3,
                b_cols: 4,
            },
            Error::InvalidArgument {
                rank: 2,
                reason: "root 7".into(),
            },
            Error::Message {
                rank: 1,
                from: 2,
                reason: "short".into(),
            },
            Error::Compute {
                rank: 4,
                message: "out of memory".into(),
            },
            Error::Io {
                rank: 1,
                reason: "/tmp/x.mtx: not found".into(),
            },
            Error::MatrixMarket {
                rank: 2,
                line: Some(1 << 33),
                reason: "bad value".into(),
            },
            Error::MatrixMarket {
                rank: 0,
                line: None,
                reason: "12 entries".into(),
            },
            Error::Callback {
                rank: 3,
                message: "disk full".into(),
            },
        ];
        for e in errors {
            assert_eq!(Error::decode(&e.encode()), Some(e));
        }
        assert_eq!(Error::decode(&[9, 0, 0, 0, 0, 0]), None);
        assert_eq!(Error::decode(&[2, 0, 0, 0, 0, 1, 0]), None);
    }
}
