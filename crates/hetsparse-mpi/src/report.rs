//! What a distributed operation moved between ranks.

use mpi::collective::SystemOperation;
use mpi::traits::*;

/// Bytes and messages moved by one rank (or summed over ranks).
///
/// Only traffic between different ranks counts (a rank's own rows are never sent). A message
/// larger than the operation's `max_message_bytes` is counted as the pieces it is sent in; an
/// all-to-all of one `u64` per rank as one 8-byte message to and from every other rank. The
/// single-integer all-reduces that make errors collective are not counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Traffic {
    /// Bytes sent to other ranks.
    pub bytes_sent: u64,
    /// Bytes received from other ranks.
    pub bytes_received: u64,
    /// Messages sent to other ranks.
    pub messages_sent: u64,
    /// Messages received from other ranks.
    pub messages_received: u64,
}

impl Traffic {
    fn to_array(self) -> [u64; 4] {
        [
            self.bytes_sent,
            self.bytes_received,
            self.messages_sent,
            self.messages_received,
        ]
    }

    fn from_array(a: [u64; 4]) -> Self {
        Traffic {
            bytes_sent: a[0],
            bytes_received: a[1],
            messages_sent: a[2],
            messages_received: a[3],
        }
    }

    /// The sum of two.
    pub fn plus(self, other: Traffic) -> Traffic {
        Traffic {
            bytes_sent: self.bytes_sent + other.bytes_sent,
            bytes_received: self.bytes_received + other.bytes_received,
            messages_sent: self.messages_sent + other.messages_sent,
            messages_received: self.messages_received + other.messages_received,
        }
    }
}

/// The communication of one distributed call: this rank's traffic by phase, and the sums and
/// maxima over all ranks (the same on every rank).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommReport {
    /// This rank.
    pub rank: i32,
    /// Ranks in the communicator.
    pub size: i32,
    /// Sizes agreed before data moved (counts of rows, bytes to expect).
    pub sizes: Traffic,
    /// Requests: the row ids a rank asks others for (row fetch only).
    pub requests: Traffic,
    /// Matrix rows themselves.
    pub rows: Traffic,
    /// Rows of B this rank received from other ranks (row fetch only).
    pub fetched_rows: u64,
    /// Entries in those rows.
    pub fetched_entries: u64,
    /// This rank's traffic over all phases.
    pub local: Traffic,
    /// Every rank's traffic summed (each byte counted once as sent and once as received).
    pub total: Traffic,
    /// The most any one rank sent and received.
    pub max: Traffic,
}

impl CommReport {
    /// Adds up the phases, reduces over `comm` (collective) and records the result in the
    /// current `tracing` span's fields `bytes_sent`, `bytes_received`, `messages_sent`,
    /// `messages_received` and `total_bytes`.
    pub(crate) fn finish<C: Communicator>(
        comm: &C,
        sizes: Traffic,
        requests: Traffic,
        rows: Traffic,
        fetched: (u64, u64),
    ) -> CommReport {
        let local = sizes.plus(requests).plus(rows);
        let mine = local.to_array();
        let mut total = [0u64; 4];
        let mut max = [0u64; 4];
        comm.all_reduce_into(&mine[..], &mut total[..], SystemOperation::sum());
        comm.all_reduce_into(&mine[..], &mut max[..], SystemOperation::max());
        let report = CommReport {
            rank: comm.rank(),
            size: comm.size(),
            sizes,
            requests,
            rows,
            fetched_rows: fetched.0,
            fetched_entries: fetched.1,
            local,
            total: Traffic::from_array(total),
            max: Traffic::from_array(max),
        };
        let span = tracing::Span::current();
        span.record("bytes_sent", local.bytes_sent);
        span.record("bytes_received", local.bytes_received);
        span.record("messages_sent", local.messages_sent);
        span.record("messages_received", local.messages_received);
        span.record("total_bytes", report.total.bytes_sent);
        tracing::debug!(?report, "communication");
        report
    }
}
