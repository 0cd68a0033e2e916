//! A CSR matrix distributed over the ranks of a communicator in 1D blocks of rows.

use hetsparse::Csr;
use mpi::collective::SystemOperation;
use mpi::traits::*;

use crate::error::{agree, Error, Result};
use crate::partition::RowPartition;
use crate::report::{CommReport, Traffic};
use crate::wire::{self, MpiScalar, RowsOut};

/// Tag of the messages that carry blocks of rows (scatter, gather).
const TAG_BLOCK: i32 = 11;

/// Options of the distributed operations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DistOptions {
    /// The largest message sent, in bytes: longer buffers go in pieces of this size, so that
    /// no count passed to MPI overflows its 32-bit `int`. Between 1 and `i32::MAX`; 1 GiB by
    /// default.
    pub max_message_bytes: usize,
}

impl Default for DistOptions {
    fn default() -> Self {
        DistOptions {
            max_message_bytes: 1 << 30,
        }
    }
}

impl DistOptions {
    /// Checks the options on rank `rank`.
    pub(crate) fn check(&self, rank: i32) -> Result<usize> {
        if self.max_message_bytes == 0 || self.max_message_bytes > i32::MAX as usize {
            return Err(Error::InvalidArgument {
                rank,
                reason: format!(
                    "max_message_bytes {} is not between 1 and {}",
                    self.max_message_bytes,
                    i32::MAX
                ),
            });
        }
        Ok(self.max_message_bytes)
    }
}

/// A sparse matrix in CSR distributed in 1D blocks of rows: rank `r` holds the rows
/// [`RowPartition::rows`]`(r)` as a local [`Csr`] with global column indices. Every rank knows
/// the partition, the shape and how many entries each rank holds.
///
/// Every function taking a communicator is collective: all ranks of it must call it, in the
/// same order, and all get the same error when one rank finds a problem.
#[derive(Debug, Clone, PartialEq)]
pub struct DistCsr<T> {
    partition: RowPartition,
    ncols: u64,
    nnz_per_rank: Vec<u64>,
    local: Csr<T>,
}

/// Checks that `root` is a rank of `comm` and the same on every rank (collective).
pub(crate) fn check_root<C: Communicator>(comm: &C, root: i32) -> Result<()> {
    let mine = [i64::from(root), -i64::from(root)];
    let mut max = [0i64; 2];
    comm.all_reduce_into(&mine[..], &mut max[..], SystemOperation::max());
    let local = if root < 0 || root >= comm.size() {
        Err(Error::InvalidArgument {
            rank: comm.rank(),
            reason: format!("root {root} is not a rank of {} ranks", comm.size()),
        })
    } else if max[0] != -max[1] {
        Err(Error::InvalidArgument {
            rank: comm.rank(),
            reason: format!("ranks disagree on the root: from {} to {}", -max[1], max[0]),
        })
    } else {
        Ok(())
    };
    agree(comm, local)
}

/// Every rank's `u64`s gathered on every rank, in rank order; counted in `traffic` as one
/// message of `8 * mine.len()` bytes to and from every other rank.
pub(crate) fn all_gather_u64<C: Communicator>(
    comm: &C,
    mine: &[u64],
    traffic: &mut Traffic,
) -> Vec<u64> {
    let size = comm.size() as usize;
    let mut all = vec![0u64; mine.len() * size];
    comm.all_gather_into(mine, &mut all[..]);
    let others = size as u64 - 1;
    traffic.bytes_sent += others * 8 * mine.len() as u64;
    traffic.bytes_received += others * 8 * mine.len() as u64;
    traffic.messages_sent += others;
    traffic.messages_received += others;
    all
}

impl<T: MpiScalar> DistCsr<T> {
    /// Distributes `matrix`, given on rank `root` (`None` elsewhere), in blocks of rows:
    /// `partition` (read on the root only) or, when `None`, [`RowPartition::even`].
    ///
    /// Errors (on every rank): a root that is not a rank or differs between ranks, no matrix
    /// on the root, a partition that does not fit the matrix's rows or the communicator's size.
    pub fn scatter<C: Communicator>(
        comm: &C,
        root: i32,
        matrix: Option<&Csr<T>>,
        partition: Option<&RowPartition>,
        options: &DistOptions,
    ) -> Result<(DistCsr<T>, CommReport)> {
        Self::scatter_counted(comm, root, matrix, partition, options, Traffic::default())
    }

    /// [`DistCsr::scatter`], its report also counting `sizes`: what a caller agreed on before
    /// (the collective reader's opening of a gzip file).
    pub(crate) fn scatter_counted<C: Communicator>(
        comm: &C,
        root: i32,
        matrix: Option<&Csr<T>>,
        partition: Option<&RowPartition>,
        options: &DistOptions,
        mut sizes: Traffic,
    ) -> Result<(DistCsr<T>, CommReport)> {
        let span = comm_span("mpi_scatter", comm);
        let _enter = span.enter();
        let (rank, size) = (comm.rank(), comm.size() as usize);
        let chunk = agree(comm, options.check(rank))?;
        check_root(comm, root)?;
        let is_root = rank == root;
        // The root checks its input and sends the header: ncols, the offsets, nnz per rank.
        let header =
            if is_root {
                (|| {
                    let m = matrix.ok_or_else(|| Error::InvalidArgument {
                        rank,
                        reason: "no matrix given on the root".to_string(),
                    })?;
                    let p = partition
                        .cloned()
                        .unwrap_or_else(|| RowPartition::even(m.nrows() as u64, size));
                    if p.ranks() != size || p.nrows() != m.nrows() as u64 {
                        return Err(Error::Partition {
                            rank,
                            reason: format!(
                            "{} rows over {} ranks given for a matrix of {} rows on {size} ranks",
                            p.nrows(),
                            p.ranks(),
                            m.nrows()
                        ),
                        });
                    }
                    let offsets = m.row_offsets();
                    let mut header = vec![m.ncols() as u64];
                    header.extend_from_slice(p.offsets());
                    header.extend((0..size).map(|r| {
                        offsets[p.rows(r).end as usize] - offsets[p.rows(r).start as usize]
                    }));
                    Ok(header)
                })()
            } else {
                Ok(vec![0u64; 2 * size + 2])
            };
        let mut header = agree(comm, header)?;
        comm.process_at_rank(root).broadcast_into(&mut header[..]);
        let header_bytes = 8 * header.len() as u64;
        if is_root {
            sizes.bytes_sent += header_bytes * (size as u64 - 1);
            sizes.messages_sent += size as u64 - 1;
        } else {
            sizes.bytes_received += header_bytes;
            sizes.messages_received += 1;
        }
        let ncols = header[0];
        let partition = RowPartition::from_offsets(header[1..size + 2].to_vec()).ok_or_else(|| {
            Error::Message {
                rank,
                from: root,
                reason: "row offsets decrease".to_string(),
            }
        });
        let partition = agree(comm, partition)?;
        let nnz_per_rank = header[size + 2..].to_vec();

        let mut sends = vec![Vec::new(); size];
        let mut own = None;
        if let (true, Some(m)) = (is_root, matrix) {
            for (r, send) in sends.iter_mut().enumerate() {
                let rows = partition.rows(r);
                let rows = rows.start as usize..rows.end as usize;
                if r == rank as usize {
                    own = Some(m.rows(rows).map_err(|e| Error::Compute {
                        rank,
                        message: e.to_string(),
                    }));
                } else {
                    *send = wire::pack_rows(m, rows);
                }
            }
        }
        let mut recv_sizes = vec![0u64; size];
        if !is_root {
            let me = rank as usize;
            recv_sizes[root as usize] = wire::rows_bytes::<T>(
                partition.rows(me).end - partition.rows(me).start,
                nnz_per_rank[me],
            );
        }
        let mut rows_traffic = Traffic::default();
        let received = wire::exchange(
            comm,
            &sends,
            &recv_sizes,
            chunk,
            TAG_BLOCK,
            &mut rows_traffic,
        );
        let local = match own {
            Some(own) => own,
            None => block_from_bytes(&received[root as usize], &partition, ncols, (rank, root)),
        };
        let local = agree(comm, local)?;
        let report = CommReport::finish(comm, sizes, Traffic::default(), rows_traffic, (0, 0));
        Ok((
            DistCsr {
                partition,
                ncols,
                nnz_per_rank,
                local,
            },
            report,
        ))
    }

    /// Makes a distributed matrix of the rows each rank holds: rank `r`'s `local` is its block
    /// of rows (global column indices), the blocks in rank order make the matrix.
    ///
    /// Errors (on every rank): blocks with different numbers of columns (naming the first rank
    /// whose block differs from rank 0's).
    pub fn from_local_rows<C: Communicator>(
        comm: &C,
        local: Csr<T>,
    ) -> Result<(DistCsr<T>, CommReport)> {
        let span = comm_span("mpi_from_local_rows", comm);
        let _enter = span.enter();
        let mut sizes = Traffic::default();
        let mine = [local.nrows() as u64, local.ncols() as u64, local.nnz()];
        let all = all_gather_u64(comm, &mine, &mut sizes);
        let ncols = all[1];
        if let Some(bad) = all.chunks_exact(3).position(|b| b[1] != ncols) {
            return Err(Error::InvalidBlock {
                rank: bad as i32,
                reason: format!(
                    "its block has {} columns, rank 0's has {ncols}",
                    all[3 * bad + 1]
                ),
            });
        }
        let counts: Vec<u64> = all.chunks_exact(3).map(|b| b[0]).collect();
        let nnz_per_rank = all.chunks_exact(3).map(|b| b[2]).collect();
        let report =
            CommReport::finish(comm, sizes, Traffic::default(), Traffic::default(), (0, 0));
        Ok((
            DistCsr {
                partition: RowPartition::from_counts(&counts),
                ncols,
                nnz_per_rank,
                local,
            },
            report,
        ))
    }

    /// Builds a distributed matrix from parts already agreed by every rank.
    pub(crate) fn from_parts(
        partition: RowPartition,
        ncols: u64,
        nnz_per_rank: Vec<u64>,
        local: Csr<T>,
    ) -> Self {
        DistCsr {
            partition,
            ncols,
            nnz_per_rank,
            local,
        }
    }

    /// Collects the whole matrix on rank `root` (`Some` there, `None` elsewhere).
    ///
    /// Errors (on every rank): a root that is not a rank or differs between ranks, a
    /// communicator whose size is not the partition's.
    pub fn gather<C: Communicator>(
        &self,
        comm: &C,
        root: i32,
        options: &DistOptions,
    ) -> Result<(Option<Csr<T>>, CommReport)> {
        let span = comm_span("mpi_gather", comm);
        let _enter = span.enter();
        let rank = comm.rank();
        let chunk = agree(comm, options.check(rank))?;
        agree(comm, self.check_comm(comm))?;
        check_root(comm, root)?;
        let size = comm.size() as usize;
        let me = rank as usize;
        let mut sends = vec![Vec::new(); size];
        let mut recv_sizes = vec![0u64; size];
        if rank == root {
            for (r, s) in recv_sizes.iter_mut().enumerate() {
                if r != me {
                    let rows = self.partition.rows(r);
                    *s = wire::rows_bytes::<T>(rows.end - rows.start, self.nnz_per_rank[r]);
                }
            }
        } else {
            sends[root as usize] = wire::pack_rows(&self.local, 0..self.local.nrows());
        }
        let mut rows_traffic = Traffic::default();
        let received = wire::exchange(
            comm,
            &sends,
            &recv_sizes,
            chunk,
            TAG_BLOCK,
            &mut rows_traffic,
        );
        let whole = if rank == root {
            (|| {
                let nnz: u64 = self.nnz_per_rank.iter().sum();
                let mut offsets = Vec::with_capacity(self.partition.nrows() as usize + 1);
                offsets.push(0u64);
                let mut cols = Vec::with_capacity(nnz as usize);
                let mut values = Vec::with_capacity(nnz as usize);
                for (r, bytes) in received.iter().enumerate() {
                    if r == me {
                        let base = *offsets.last().unwrap_or(&0);
                        offsets.extend(self.local.row_offsets()[1..].iter().map(|o| o + base));
                        cols.extend_from_slice(self.local.col_indices());
                        values.extend_from_slice(self.local.values());
                    } else {
                        let rows = self.partition.rows(r);
                        let out = RowsOut {
                            offsets: &mut offsets,
                            cols: &mut cols,
                            values: &mut values,
                        };
                        wire::unpack_rows(
                            bytes,
                            (rows.end - rows.start) as usize,
                            self.ncols,
                            out,
                            (rank, r as i32),
                        )?;
                    }
                }
                Csr::try_new(
                    self.partition.nrows() as usize,
                    self.ncols as usize,
                    offsets,
                    cols,
                    values,
                )
                .map(Some)
                .map_err(|e| Error::Compute {
                    rank,
                    message: e.to_string(),
                })
            })()
        } else {
            Ok(None)
        };
        let whole = agree(comm, whole)?;
        let report = CommReport::finish(
            comm,
            Traffic::default(),
            Traffic::default(),
            rows_traffic,
            (0, 0),
        );
        Ok((whole, report))
    }

    /// This rank's rows, with global column indices.
    pub fn local(&self) -> &Csr<T> {
        &self.local
    }

    /// Which rank holds which rows.
    pub fn partition(&self) -> &RowPartition {
        &self.partition
    }

    /// The global shape (rows, columns).
    pub fn shape(&self) -> (u64, u64) {
        (self.partition.nrows(), self.ncols)
    }

    /// Entries held by each rank.
    pub fn nnz_per_rank(&self) -> &[u64] {
        &self.nnz_per_rank
    }

    /// Entries of the whole matrix.
    pub fn nnz(&self) -> u64 {
        self.nnz_per_rank.iter().sum()
    }

    /// The partition has as many ranks as `comm` (checked locally).
    pub(crate) fn check_comm<C: Communicator>(&self, comm: &C) -> Result<()> {
        if self.partition.ranks() != comm.size() as usize {
            return Err(Error::Partition {
                rank: comm.rank(),
                reason: format!(
                    "the matrix is distributed over {} ranks, the communicator has {}",
                    self.partition.ranks(),
                    comm.size()
                ),
            });
        }
        Ok(())
    }
}

/// Rank `rank`'s block unpacked from what `from` sent.
fn block_from_bytes<T: MpiScalar>(
    bytes: &[u8],
    partition: &RowPartition,
    ncols: u64,
    (rank, from): (i32, i32),
) -> Result<Csr<T>> {
    let rows = partition.rows(rank as usize);
    let nrows = (rows.end - rows.start) as usize;
    let mut offsets = Vec::with_capacity(nrows + 1);
    offsets.push(0);
    let (mut cols, mut values) = (Vec::new(), Vec::new());
    let out = RowsOut {
        offsets: &mut offsets,
        cols: &mut cols,
        values: &mut values,
    };
    wire::unpack_rows(bytes, nrows, ncols, out, (rank, from))?;
    Csr::try_new(nrows, ncols as usize, offsets, cols, values).map_err(|e| Error::Message {
        rank,
        from,
        reason: e.to_string(),
    })
}

/// A `tracing` span for a distributed call (`call` names it: `mpi_scatter`, `mpi_spgemm`, ...),
/// with the report's fields to be recorded.
pub(crate) fn comm_span<C: Communicator>(call: &'static str, comm: &C) -> tracing::Span {
    use tracing::field::Empty;
    tracing::info_span!(
        "mpi",
        call,
        rank = comm.rank(),
        size = comm.size(),
        bytes_sent = Empty,
        bytes_received = Empty,
        messages_sent = Empty,
        messages_received = Empty,
        total_bytes = Empty,
        fetched_rows = Empty
    )
}
