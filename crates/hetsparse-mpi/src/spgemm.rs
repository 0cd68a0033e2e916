//! `C = A·B` with 1D row fetch: every rank fetches the rows of B its rows of A touch.

use hetsparse::{Context, Csr, DeviceChoice};
use mpi::traits::*;

use crate::error::{agree, check_chain, Error, Result};
use crate::matrix::{all_gather_u64, comm_span, DistCsr, DistOptions};
use crate::report::{CommReport, Traffic};
use crate::wire::{self, MpiScalar, RowsOut};

const TAG_REQUEST: i32 = 21;
const TAG_ROWS: i32 = 22;

/// `C = A·B` on the CPU backend of each rank; see [`spgemm_with`].
pub fn spgemm<T: MpiScalar, C: Communicator>(
    comm: &C,
    a: &DistCsr<T>,
    b: &DistCsr<T>,
    options: &DistOptions,
) -> Result<(DistCsr<T>, CommReport)> {
    let ctx = Context::on(&DeviceChoice::Cpu).map_err(|e| Error::Compute {
        rank: comm.rank(),
        message: e.to_string(),
    });
    let ctx = agree(comm, ctx)?;
    spgemm_with(comm, a, b, &ctx, options)
}

/// `C = A·B` with 1D row fetch (as PETSc's MPIAIJ product): each rank finds the distinct rows
/// of B that the columns of its rows of A name, asks their owners for them (an all-to-all of
/// counts, then the row ids), receives only those rows, and multiplies its rows of A by them
/// locally through `ctx`. C has A's row partition and B's columns.
///
/// Collective. Errors (on every rank): shapes that do not multiply, a communicator that is not
/// the operands', a malformed message, a local product that failed on some rank.
pub fn spgemm_with<T: MpiScalar, C: Communicator>(
    comm: &C,
    a: &DistCsr<T>,
    b: &DistCsr<T>,
    ctx: &Context<T>,
    options: &DistOptions,
) -> Result<(DistCsr<T>, CommReport)> {
    let span = comm_span("mpi_spgemm", comm);
    let _enter = span.enter();
    let rank = comm.rank();
    let (size, me) = (comm.size() as usize, rank as usize);
    let checks = (|| {
        let chunk = options.check(rank)?;
        a.check_comm(comm)?;
        b.check_comm(comm)?;
        check_chain(rank, a.shape(), b.shape())?;
        Ok(chunk)
    })();
    let chunk = agree(comm, checks)?;

    // The distinct columns of A's local rows: the rows of B this rank needs.
    let columns = ColumnSet::new(a.local().col_indices(), b.shape().0);
    let needed = columns.sorted();
    // Split by the owner of each row of B (`needed` is sorted; owners' ranges ascend).
    let b_part = b.partition();
    let mut wanted: Vec<&[u32]> = Vec::with_capacity(size);
    let mut at = 0usize;
    for r in 0..size {
        let end = b_part.rows(r).end;
        let len = needed[at..].partition_point(|&id| u64::from(id) < end);
        wanted.push(&needed[at..at + len]);
        at += len;
    }

    // Counts, then the ids themselves.
    let mut sizes = Traffic::default();
    let counts: Vec<u64> = (0..size)
        .map(|r| if r == me { 0 } else { wanted[r].len() as u64 })
        .collect();
    let asked = wire::all_to_all_u64(comm, &counts, &mut sizes);
    let requests: Vec<Vec<u8>> = (0..size)
        .map(|r| {
            if r == me {
                Vec::new()
            } else {
                wire::u32s_to_bytes(wanted[r])
            }
        })
        .collect();
    let request_sizes: Vec<u64> = asked.iter().map(|n| 4 * n).collect();
    let mut request_traffic = Traffic::default();
    let received = wire::exchange(
        comm,
        &requests,
        &request_sizes,
        chunk,
        TAG_REQUEST,
        &mut request_traffic,
    );

    // Answer: the rows asked for, each checked to be one of ours.
    let mine = b_part.rows(me);
    let replies = (|| {
        let mut replies = vec![Vec::new(); size];
        for (r, bytes) in received.iter().enumerate() {
            if r == me {
                continue;
            }
            let ids = wire::bytes_to_u32s(bytes);
            if let Some(bad) = ids.iter().find(|&&id| !mine.contains(&u64::from(id))) {
                return Err(Error::Message {
                    rank,
                    from: r as i32,
                    reason: format!("asked for row {bad}, not among rows {mine:?}"),
                });
            }
            replies[r] = wire::pack_rows(
                b.local(),
                ids.iter().map(|&id| (u64::from(id) - mine.start) as usize),
            );
        }
        Ok(replies)
    })();
    let replies = agree(comm, replies)?;
    let reply_sizes: Vec<u64> = replies.iter().map(|r| r.len() as u64).collect();
    let incoming = wire::all_to_all_u64(comm, &reply_sizes, &mut sizes);
    let mut rows_traffic = Traffic::default();
    let rows = wire::exchange(
        comm,
        &replies,
        &incoming,
        chunk,
        TAG_ROWS,
        &mut rows_traffic,
    );
    drop(replies);

    // The local B and A, then the local product. Where B's row offsets take no more room than
    // A's local entries, the local B keeps every row of B, in place (those not needed empty):
    // A's local block is used as it is, and this rank's own rows are copied as one block.
    // Otherwise (a hypersparse block of a huge B) the local B holds the fetched rows only, in
    // global order, and A's columns are renumbered into them.
    let mut fetched = (0u64, 0u64);
    let local = (|| {
        let b_cols = b.shape().1;
        let b_rows = b.shape().0;
        let a_local = a.local();
        let compute = |e: hetsparse::Error| Error::Compute {
            rank,
            message: e.to_string(),
        };
        let full_height = b_rows <= 2 * a_local.nnz() + 1024;
        let (mut cols, mut values) = (Vec::new(), Vec::new());
        let (local_a, local_b) = if full_height {
            let mut offsets = Vec::with_capacity(b_rows as usize + 1);
            offsets.push(0u64);
            for r in 0..size {
                if r == me {
                    let own = b.local();
                    let base = cols.len() as u64;
                    offsets.extend(own.row_offsets()[1..].iter().map(|&o| base + o));
                    cols.extend_from_slice(own.col_indices());
                    values.extend_from_slice(own.values());
                    continue;
                }
                // The fetched rows' ends, then each in its place among rank r's rows.
                let start = cols.len() as u64;
                let mut ends = vec![start];
                let out = RowsOut {
                    offsets: &mut ends,
                    cols: &mut cols,
                    values: &mut values,
                };
                wire::unpack_rows(&rows[r], wanted[r].len(), b_cols, out, (rank, r as i32))?;
                fetched.0 += wanted[r].len() as u64;
                fetched.1 += cols.len() as u64 - start;
                let mut next = wanted[r].iter().zip(&ends[1..]).peekable();
                let mut end = start;
                for row in b_part.rows(r) {
                    if let Some((_, &e)) = next.next_if(|(&id, _)| u64::from(id) == row) {
                        end = e;
                    }
                    offsets.push(end);
                }
            }
            let local_b = Csr::try_new(b_rows as usize, b_cols as usize, offsets, cols, values)
                .map_err(|e| compute(e.into()))?;
            (a_local.clone(), local_b)
        } else {
            let mut offsets = Vec::with_capacity(needed.len() + 1);
            offsets.push(0u64);
            for r in 0..size {
                if r == me {
                    for &id in wanted[r] {
                        let (c, v) = b.local().row((u64::from(id) - mine.start) as usize);
                        cols.extend_from_slice(c);
                        values.extend_from_slice(v);
                        offsets.push(cols.len() as u64);
                    }
                } else {
                    let before_entries = cols.len() as u64;
                    let out = RowsOut {
                        offsets: &mut offsets,
                        cols: &mut cols,
                        values: &mut values,
                    };
                    wire::unpack_rows(&rows[r], wanted[r].len(), b_cols, out, (rank, r as i32))?;
                    fetched.0 += wanted[r].len() as u64;
                    fetched.1 += cols.len() as u64 - before_entries;
                }
            }
            let local_b = Csr::try_new(needed.len(), b_cols as usize, offsets, cols, values)
                .map_err(|e| compute(e.into()))?;
            let renumbered = columns.renumber(a_local.col_indices());
            let local_a = Csr::try_new(
                a_local.nrows(),
                needed.len(),
                a_local.row_offsets().to_vec(),
                renumbered,
                a_local.values().to_vec(),
            )
            .map_err(|e| compute(e.into()))?;
            (local_a, local_b)
        };
        let _product = tracing::info_span!(
            "local_spgemm",
            rows = local_a.nrows(),
            fetched_rows = needed.len()
        )
        .entered();
        ctx.spgemm(&local_a, &local_b).map_err(compute)
    })();
    let local = agree(comm, local)?;
    let nnz_per_rank = all_gather_u64(comm, &[local.nnz()], &mut sizes);
    span.record("fetched_rows", fetched.0);
    let report = CommReport::finish(comm, sizes, request_traffic, rows_traffic, fetched);
    let c = DistCsr::from_parts(a.partition().clone(), b.shape().1, nnz_per_rank, local);
    Ok((c, report))
}

/// The distinct column indices of a block of A, and each one's place among them.
///
/// A bit set over B's rows with a count of the set bits before each 64-bit word, which finds a
/// column's place in O(1), when B's rows are not many more than 64 times the block's entries;
/// otherwise (a hypersparse block of a huge matrix) the sorted distinct indices, searched.
enum ColumnSet {
    Bits { bits: Vec<u64>, before: Vec<u64> },
    Sorted(Vec<u32>),
}

impl ColumnSet {
    fn new(cols: &[u32], nrows_b: u64) -> Self {
        let words = nrows_b.div_ceil(64);
        if words > cols.len() as u64 + 1024 {
            let mut sorted = cols.to_vec();
            sorted.sort_unstable();
            sorted.dedup();
            return ColumnSet::Sorted(sorted);
        }
        let mut bits = vec![0u64; words as usize];
        for &c in cols {
            bits[(c / 64) as usize] |= 1u64 << (c % 64);
        }
        let mut before = Vec::with_capacity(bits.len());
        let mut k = 0u64;
        for w in &bits {
            before.push(k);
            k += u64::from(w.count_ones());
        }
        ColumnSet::Bits { bits, before }
    }

    /// The distinct indices, ascending.
    fn sorted(&self) -> Vec<u32> {
        match self {
            ColumnSet::Sorted(sorted) => sorted.clone(),
            ColumnSet::Bits { bits, before } => {
                let total = before.last().copied().unwrap_or(0)
                    + bits.last().map_or(0, |w| u64::from(w.count_ones()));
                let mut out = Vec::with_capacity(total as usize);
                for (w, &word) in bits.iter().enumerate() {
                    let mut word = word;
                    while word != 0 {
                        out.push((w as u64 * 64 + u64::from(word.trailing_zeros())) as u32);
                        word &= word - 1;
                    }
                }
                out
            }
        }
    }

    /// Each of `cols` (all in the set) replaced by its place among the distinct indices.
    fn renumber(&self, cols: &[u32]) -> Vec<u32> {
        match self {
            ColumnSet::Sorted(sorted) => cols
                .iter()
                .map(|c| sorted.partition_point(|x| x < c) as u32)
                .collect(),
            ColumnSet::Bits { bits, before } => cols
                .iter()
                .map(|&c| {
                    let w = (c / 64) as usize;
                    let below = bits[w] & ((1u64 << (c % 64)) - 1);
                    (before[w] + u64::from(below.count_ones())) as u32
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_column_sets_agree() {
        let cols = [7u32, 3, 200, 3, 64, 63, 0, 200, 129];
        let bits = ColumnSet::new(&cols, 300);
        let sorted = ColumnSet::new(&cols, 1 << 20);
        assert!(matches!(bits, ColumnSet::Bits { .. }));
        assert!(matches!(sorted, ColumnSet::Sorted(_)));
        for set in [bits, sorted] {
            assert_eq!(set.sorted(), vec![0, 3, 7, 63, 64, 129, 200]);
            assert_eq!(set.renumber(&cols), vec![2, 1, 6, 1, 4, 3, 0, 6, 5]);
        }
    }
}
