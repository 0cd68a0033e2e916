//! 2D distribution on a `pr × pc` grid of ranks and Sparse SUMMA.

use hetsparse::{Context, Csr, DeviceChoice};
use mpi::topology::Color;
use mpi::traits::*;

use crate::error::{agree, check_chain, Error, Result};
use crate::matrix::{all_gather_u64, check_root, comm_span, DistOptions};
use crate::partition::RowPartition;
use crate::report::{CommReport, Traffic};
use crate::wire::{self, MpiScalar, RowsOut};

const TAG_BLOCK_2D: i32 = 31;

/// A `rows × cols` grid of ranks: rank `i · cols + j` sits at row `i`, column `j`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grid {
    /// Rows of the grid (`pr`).
    pub rows: usize,
    /// Columns of the grid (`pc`).
    pub cols: usize,
}

impl Grid {
    /// A `rows × cols` grid.
    pub fn new(rows: usize, cols: usize) -> Self {
        Grid { rows, cols }
    }

    /// The grid position (row, column) of `rank`.
    pub fn position(&self, rank: usize) -> (usize, usize) {
        (rank / self.cols.max(1), rank % self.cols.max(1))
    }

    /// Checks the grid has `size` ranks and is the same on every rank (collective).
    pub(crate) fn check<C: Communicator>(&self, comm: &C) -> Result<()> {
        let mine = [
            self.rows as i64,
            -(self.rows as i64),
            self.cols as i64,
            -(self.cols as i64),
        ];
        let mut max = [0i64; 4];
        comm.all_reduce_into(
            &mine[..],
            &mut max[..],
            mpi::collective::SystemOperation::max(),
        );
        let rank = comm.rank();
        let local = if max[0] != -max[1] || max[2] != -max[3] {
            Err(Error::InvalidArgument {
                rank,
                reason: "ranks disagree on the grid".to_string(),
            })
        } else if self.rows.checked_mul(self.cols) != Some(comm.size() as usize) {
            Err(Error::InvalidArgument {
                rank,
                reason: format!(
                    "a {}×{} grid for {} ranks",
                    self.rows,
                    self.cols,
                    comm.size()
                ),
            })
        } else {
            Ok(())
        };
        agree(comm, local)
    }
}

/// A sparse matrix distributed in 2D blocks: rows split over the grid's rows, columns over
/// its columns (evenly, [`RowPartition::even`], unless other boundaries are given), rank
/// `(i, j)` holding block `(i, j)` as a [`Csr`] of its own columns (indices from 0 at the
/// block's first column).
#[derive(Debug, Clone, PartialEq)]
pub struct Dist2dCsr<T> {
    grid: Grid,
    rows: RowPartition,
    cols: RowPartition,
    nnz_per_rank: Vec<u64>,
    local: Csr<T>,
}

impl<T: MpiScalar> Dist2dCsr<T> {
    /// Distributes `matrix`, given on rank `root` (`None` elsewhere), over `grid` in even
    /// blocks; see [`Dist2dCsr::scatter_blocks`] for other block boundaries.
    ///
    /// Errors (on every rank): a grid whose size is not the communicator's or that differs
    /// between ranks, a root that is not a rank or differs between ranks, no matrix on the root.
    pub fn scatter<C: Communicator>(
        comm: &C,
        root: i32,
        matrix: Option<&Csr<T>>,
        grid: Grid,
        options: &DistOptions,
    ) -> Result<(Dist2dCsr<T>, CommReport)> {
        Self::scatter_blocks(comm, root, matrix, grid, None, None, options)
    }

    /// Distributes `matrix`, given on rank `root` (`None` elsewhere), over `grid` with the
    /// block boundaries `rows` (over the grid's rows) and `cols` (over its columns), read on
    /// the root only; `None` for [`RowPartition::even`]. The root broadcasts the boundaries
    /// with the blocks' sizes, so every rank holds them.
    ///
    /// Errors (on every rank): a grid whose size is not the communicator's or that differs
    /// between ranks, a root that is not a rank or differs between ranks, no matrix on the
    /// root, boundaries that do not fit the matrix or the grid.
    pub fn scatter_blocks<C: Communicator>(
        comm: &C,
        root: i32,
        matrix: Option<&Csr<T>>,
        grid: Grid,
        rows: Option<&RowPartition>,
        cols: Option<&RowPartition>,
        options: &DistOptions,
    ) -> Result<(Dist2dCsr<T>, CommReport)> {
        let span = comm_span("mpi_scatter", comm);
        let _enter = span.enter();
        let (rank, size) = (comm.rank(), comm.size() as usize);
        let chunk = agree(comm, options.check(rank))?;
        grid.check(comm)?;
        check_root(comm, root)?;
        let is_root = rank == root;
        // The header: rows and columns of the matrix, the boundaries, each block's entries.
        let header_len = 2 + (grid.rows + 1) + (grid.cols + 1) + size;
        let blocks = if is_root {
            (|| {
                let m = matrix.ok_or_else(|| Error::InvalidArgument {
                    rank,
                    reason: "no matrix given on the root".to_string(),
                })?;
                let rows = rows
                    .cloned()
                    .unwrap_or_else(|| RowPartition::even(m.nrows() as u64, grid.rows));
                let cols = cols
                    .cloned()
                    .unwrap_or_else(|| RowPartition::even(m.ncols() as u64, grid.cols));
                for (what, p, parts, n) in [
                    ("row", &rows, grid.rows, m.nrows()),
                    ("column", &cols, grid.cols, m.ncols()),
                ] {
                    if p.ranks() != parts || p.nrows() != n as u64 {
                        return Err(Error::Partition {
                            rank,
                            reason: format!(
                                "{what} blocks of {} over {} parts for {n} {what}s on {parts} \
                                 grid {what}s",
                                p.nrows(),
                                p.ranks()
                            ),
                        });
                    }
                }
                let mut blocks = Vec::with_capacity(size);
                for r in 0..size {
                    let (i, j) = grid.position(r);
                    blocks.push(block_of(m, &rows, &cols, i, j, rank)?);
                }
                let mut header = vec![m.nrows() as u64, m.ncols() as u64];
                header.extend_from_slice(rows.offsets());
                header.extend_from_slice(cols.offsets());
                header.extend(blocks.iter().map(|b| b.nnz()));
                Ok((blocks, header))
            })()
        } else {
            Ok((Vec::new(), vec![0u64; header_len]))
        };
        let (mut blocks, mut header) = agree(comm, blocks)?;
        comm.process_at_rank(root).broadcast_into(&mut header[..]);
        let mut sizes = Traffic::default();
        count_broadcast(&mut sizes, is_root, 8 * header.len() as u64, size, chunk);
        let (row_end, col_end) = (2 + grid.rows + 1, 2 + grid.rows + 1 + grid.cols + 1);
        let parts = RowPartition::from_offsets(header[2..row_end].to_vec())
            .zip(RowPartition::from_offsets(
                header[row_end..col_end].to_vec(),
            ))
            .ok_or_else(|| Error::Message {
                rank,
                from: root,
                reason: "block boundaries that decrease".to_string(),
            });
        let (rows, cols) = agree(comm, parts)?;
        let nnz_per_rank = header[col_end..].to_vec();
        let mut sends = vec![Vec::new(); size];
        let mut own = None;
        if is_root {
            for (r, b) in blocks.drain(..).enumerate() {
                if r == rank as usize {
                    own = Some(b);
                } else {
                    sends[r] = wire::pack_rows(&b, 0..b.nrows());
                }
            }
        }
        let (i, j) = grid.position(rank as usize);
        let shape = (len(&rows, i), len(&cols, j));
        let mut recv_sizes = vec![0u64; size];
        if !is_root {
            recv_sizes[root as usize] = wire::rows_bytes::<T>(shape.0, nnz_per_rank[rank as usize]);
        }
        let mut traffic = Traffic::default();
        let received = wire::exchange(comm, &sends, &recv_sizes, chunk, TAG_BLOCK_2D, &mut traffic);
        let local = match own {
            Some(b) => Ok(b),
            None => csr_from_bytes(&received[root as usize], shape, (rank, root)),
        };
        let local = agree(comm, local)?;
        let report = CommReport::finish(comm, sizes, Traffic::default(), traffic, (0, 0));
        Ok((
            Dist2dCsr {
                grid,
                rows,
                cols,
                nnz_per_rank,
                local,
            },
            report,
        ))
    }

    /// Makes a 2D-distributed matrix of the block each rank holds: rank `(i, j)`'s `local` is
    /// block `(i, j)` (its own column numbering). Blocks of one grid row must have the same
    /// number of rows and blocks of one grid column the same number of columns; the boundaries
    /// follow from the blocks' shapes (an all-gather of `(rows, columns, nnz)` per rank), so
    /// they may be uneven.
    ///
    /// Errors (on every rank): a grid that does not fit the communicator, a block whose shape
    /// differs from its grid row's or grid column's first (naming the rank holding it).
    pub fn from_local_blocks<C: Communicator>(
        comm: &C,
        grid: Grid,
        local: Csr<T>,
    ) -> Result<(Dist2dCsr<T>, CommReport)> {
        let span = comm_span("mpi_from_local_rows", comm);
        let _enter = span.enter();
        grid.check(comm)?;
        let mut sizes = Traffic::default();
        let mine = [local.nrows() as u64, local.ncols() as u64, local.nnz()];
        let all = all_gather_u64(comm, &mine, &mut sizes);
        let shape = |r: usize| (all[3 * r], all[3 * r + 1]);
        for r in 0..grid.rows * grid.cols {
            let (i, j) = grid.position(r);
            let (row_first, col_first) = (shape(i * grid.cols), shape(j));
            if shape(r).0 != row_first.0 || shape(r).1 != col_first.1 {
                return Err(Error::InvalidBlock {
                    rank: r as i32,
                    reason: format!(
                        "its block is {}×{}; grid row {i} has blocks of {} rows, grid column {j} \
                         of {} columns",
                        shape(r).0,
                        shape(r).1,
                        row_first.0,
                        col_first.1
                    ),
                });
            }
        }
        let row_counts: Vec<u64> = (0..grid.rows).map(|i| shape(i * grid.cols).0).collect();
        let col_counts: Vec<u64> = (0..grid.cols).map(|j| shape(j).1).collect();
        let nnz_per_rank = all.chunks_exact(3).map(|b| b[2]).collect();
        let report =
            CommReport::finish(comm, sizes, Traffic::default(), Traffic::default(), (0, 0));
        Ok((
            Dist2dCsr {
                grid,
                rows: RowPartition::from_counts(&row_counts),
                cols: RowPartition::from_counts(&col_counts),
                nnz_per_rank,
                local,
            },
            report,
        ))
    }

    /// Collects the whole matrix on rank `root` (`Some` there, `None` elsewhere).
    pub fn gather<C: Communicator>(
        &self,
        comm: &C,
        root: i32,
        options: &DistOptions,
    ) -> Result<(Option<Csr<T>>, CommReport)> {
        let span = comm_span("mpi_gather", comm);
        let _enter = span.enter();
        let (rank, size) = (comm.rank(), comm.size() as usize);
        let chunk = agree(comm, options.check(rank))?;
        self.grid.check(comm)?;
        check_root(comm, root)?;
        let mut sends = vec![Vec::new(); size];
        let mut recv_sizes = vec![0u64; size];
        if rank == root {
            for (r, s) in recv_sizes.iter_mut().enumerate() {
                if r != rank as usize {
                    let (i, _) = self.grid.position(r);
                    *s = wire::rows_bytes::<T>(len(&self.rows, i), self.nnz_per_rank[r]);
                }
            }
        } else {
            sends[root as usize] = wire::pack_rows(&self.local, 0..self.local.nrows());
        }
        let mut traffic = Traffic::default();
        let received = wire::exchange(comm, &sends, &recv_sizes, chunk, TAG_BLOCK_2D, &mut traffic);
        let whole = if rank == root {
            (|| {
                let mut blocks = Vec::with_capacity(size);
                for (r, bytes) in received.iter().enumerate() {
                    let (i, j) = self.grid.position(r);
                    blocks.push(if r == rank as usize {
                        self.local.clone()
                    } else {
                        csr_from_bytes(
                            bytes,
                            (len(&self.rows, i), len(&self.cols, j)),
                            (rank, r as i32),
                        )?
                    });
                }
                self.assemble(&blocks, rank).map(Some)
            })()
        } else {
            Ok(None)
        };
        let whole = agree(comm, whole)?;
        let report = CommReport::finish(
            comm,
            Traffic::default(),
            Traffic::default(),
            traffic,
            (0, 0),
        );
        Ok((whole, report))
    }

    /// The whole matrix from every rank's block (in rank order).
    fn assemble(&self, blocks: &[Csr<T>], rank: i32) -> Result<Csr<T>> {
        let nnz: u64 = self.nnz_per_rank.iter().sum();
        let mut offsets = Vec::with_capacity(self.rows.nrows() as usize + 1);
        offsets.push(0u64);
        let mut cols = Vec::with_capacity(nnz as usize);
        let mut values = Vec::with_capacity(nnz as usize);
        for i in 0..self.grid.rows {
            for row in 0..len(&self.rows, i) as usize {
                for j in 0..self.grid.cols {
                    let first = self.cols.rows(j).start as u32;
                    let (c, v) = blocks[i * self.grid.cols + j].row(row);
                    cols.extend(c.iter().map(|c| c + first));
                    values.extend_from_slice(v);
                }
                offsets.push(cols.len() as u64);
            }
        }
        Csr::try_new(
            self.rows.nrows() as usize,
            self.cols.nrows() as usize,
            offsets,
            cols,
            values,
        )
        .map_err(|e| Error::Compute {
            rank,
            message: e.to_string(),
        })
    }

    /// A matrix from parts every rank of the grid agrees on (any row and column partitions).
    pub(crate) fn from_parts(
        grid: Grid,
        rows: RowPartition,
        cols: RowPartition,
        nnz_per_rank: Vec<u64>,
        local: Csr<T>,
    ) -> Self {
        Dist2dCsr {
            grid,
            rows,
            cols,
            nnz_per_rank,
            local,
        }
    }

    /// Takes the local block out.
    pub(crate) fn into_local(self) -> Csr<T> {
        self.local
    }

    /// This rank's block, with column indices from the block's first column.
    pub fn local(&self) -> &Csr<T> {
        &self.local
    }

    /// The grid.
    pub fn grid(&self) -> Grid {
        self.grid
    }

    /// How rows are dealt over the grid's rows.
    pub fn row_partition(&self) -> &RowPartition {
        &self.rows
    }

    /// How columns are dealt over the grid's columns.
    pub fn col_partition(&self) -> &RowPartition {
        &self.cols
    }

    /// The global shape (rows, columns).
    pub fn shape(&self) -> (u64, u64) {
        (self.rows.nrows(), self.cols.nrows())
    }

    /// Entries held by each rank.
    pub fn nnz_per_rank(&self) -> &[u64] {
        &self.nnz_per_rank
    }

    /// Entries of the whole matrix.
    pub fn nnz(&self) -> u64 {
        self.nnz_per_rank.iter().sum()
    }
}

/// `C = A·B` by Sparse SUMMA on the CPU backend of each rank; see [`spgemm_summa_with`].
pub fn spgemm_summa<T: MpiScalar, C: Communicator>(
    comm: &C,
    a: &Dist2dCsr<T>,
    b: &Dist2dCsr<T>,
    options: &DistOptions,
) -> Result<(Dist2dCsr<T>, CommReport)> {
    let ctx = Context::on(&DeviceChoice::Cpu).map_err(|e| Error::Compute {
        rank: comm.rank(),
        message: e.to_string(),
    });
    let ctx = agree(comm, ctx)?;
    spgemm_summa_with(comm, a, b, &ctx, options)
}

/// `C = A·B` by Sparse SUMMA (Buluç and Gilbert) on A's and B's grid: the inner dimension is
/// cut where A's column blocks or B's row blocks end, and for each piece `s` the rank holding
/// `A(i, s)` broadcasts it along grid row `i`, the rank holding `B(s, j)` along grid column `j`,
/// and every rank adds `A(i, s)·B(s, j)` (through `ctx`) to its block of C. C has A's rows and
/// B's columns on the same grid.
///
/// Collective. Errors (on every rank): different grids, shapes that do not multiply, a
/// malformed message, a local product that failed on some rank.
pub fn spgemm_summa_with<T: MpiScalar, C: Communicator>(
    comm: &C,
    a: &Dist2dCsr<T>,
    b: &Dist2dCsr<T>,
    ctx: &Context<T>,
    options: &DistOptions,
) -> Result<(Dist2dCsr<T>, CommReport)> {
    let span = comm_span("mpi_spgemm", comm);
    let _enter = span.enter();
    let rank = comm.rank();
    let checks = (|| {
        let chunk = options.check(rank)?;
        if a.grid != b.grid {
            return Err(Error::InvalidArgument {
                rank,
                reason: format!("A on a {:?} grid, B on a {:?} grid", a.grid, b.grid),
            });
        }
        check_chain(rank, a.shape(), b.shape())?;
        Ok(chunk)
    })();
    let chunk = agree(comm, checks)?;
    a.grid.check(comm)?;
    let grid = a.grid;
    let (i, j) = grid.position(rank as usize);
    let row_comm = split(comm, i)?;
    let col_comm = split(comm, j)?;
    let (mut sizes, mut rows_traffic) = (Traffic::default(), Traffic::default());

    // The pieces of the inner dimension: every end of A's column blocks and B's row blocks.
    let mut cuts: Vec<u64> = a
        .cols
        .offsets()
        .iter()
        .chain(b.rows.offsets())
        .copied()
        .collect();
    cuts.sort_unstable();
    cuts.dedup();
    let (c_rows, c_cols) = (len(&a.rows, i), len(&b.cols, j));
    let mut c_local =
        Csr::<T>::zeros(c_rows as usize, c_cols as usize).map_err(|e| Error::Compute {
            rank,
            message: e.to_string(),
        });
    for piece in cuts.windows(2) {
        let (lo, hi) = (piece[0], piece[1]);
        // Owners: A's column block and B's row block holding the piece (`lo` is in both).
        let a_owner = a.cols.owner(lo).unwrap_or(0);
        let b_owner = b.rows.owner(lo).unwrap_or(0);
        let a_piece = (j == a_owner).then(|| {
            let first = a.cols.rows(a_owner).start;
            a.local
                .column_panel((lo - first) as usize..(hi - first) as usize)
                .map(|p| wire::pack_rows(&p, 0..p.nrows()))
        });
        let b_piece = (i == b_owner).then(|| {
            let first = b.rows.rows(b_owner).start;
            b.local
                .rows((lo - first) as usize..(hi - first) as usize)
                .map(|p| wire::pack_rows(&p, 0..p.nrows()))
        });
        let packed = match (a_piece.transpose(), b_piece.transpose()) {
            (Ok(a), Ok(b)) => Ok((a.unwrap_or_default(), b.unwrap_or_default())),
            (Err(e), _) | (_, Err(e)) => Err(Error::Compute {
                rank,
                message: e.to_string(),
            }),
        };
        let (mut a_bytes, mut b_bytes) = agree(comm, packed)?;
        broadcast_bytes(
            &row_comm,
            a_owner as i32,
            &mut a_bytes,
            chunk,
            &mut sizes,
            &mut rows_traffic,
        );
        broadcast_bytes(
            &col_comm,
            b_owner as i32,
            &mut b_bytes,
            chunk,
            &mut sizes,
            &mut rows_traffic,
        );
        let step = (|| {
            let a_part = csr_from_bytes::<T>(&a_bytes, (c_rows, hi - lo), (rank, a_owner as i32))?;
            let b_part = csr_from_bytes::<T>(&b_bytes, (hi - lo, c_cols), (rank, b_owner as i32))?;
            let product = ctx.spgemm(&a_part, &b_part).map_err(|e| Error::Compute {
                rank,
                message: e.to_string(),
            })?;
            let sum = match &c_local {
                Ok(c) => add(c, &product),
                Err(e) => return Err(e.clone()),
            };
            sum.map_err(|e| Error::Compute {
                rank,
                message: e.to_string(),
            })
        })();
        c_local = Ok(agree(comm, step)?);
    }
    let c_local = agree(comm, c_local)?;
    let nnz_per_rank = all_gather_u64(comm, &[c_local.nnz()], &mut sizes);
    let report = CommReport::finish(comm, sizes, Traffic::default(), rows_traffic, (0, 0));
    Ok((
        Dist2dCsr {
            grid,
            rows: a.rows.clone(),
            cols: b.cols.clone(),
            nnz_per_rank,
            local: c_local,
        },
        report,
    ))
}

/// The ranks sharing `color` (a grid row or column), ordered by rank.
pub(crate) fn split<C: Communicator>(
    comm: &C,
    color: usize,
) -> Result<mpi::topology::SimpleCommunicator> {
    let sub = comm.split_by_color(Color::with_value(color as i32));
    let sub = sub.ok_or_else(|| Error::Compute {
        rank: comm.rank(),
        message: "splitting the grid's communicators failed".to_string(),
    });
    agree(comm, sub)
}

/// Broadcasts `data` from `root` of `comm` (its length first), in pieces of at most `chunk`
/// bytes; counts the length in `sizes` and the data in `traffic`.
fn broadcast_bytes<C: Communicator>(
    comm: &C,
    root: i32,
    data: &mut Vec<u8>,
    chunk: usize,
    sizes: &mut Traffic,
    traffic: &mut Traffic,
) {
    let is_root = comm.rank() == root;
    let process = comm.process_at_rank(root);
    let mut bytes = data.len() as u64;
    process.broadcast_into(&mut bytes);
    if !is_root {
        data.clear();
        data.resize(bytes as usize, 0);
    }
    for piece in data.chunks_mut(chunk) {
        process.broadcast_into(piece);
    }
    let size = comm.size() as usize;
    count_broadcast(sizes, is_root, 8, size, usize::MAX);
    count_broadcast(traffic, is_root, bytes, size, chunk);
}

/// Counts a broadcast of `bytes` among `size` ranks: the root sends them to each other rank.
pub(crate) fn count_broadcast(
    traffic: &mut Traffic,
    is_root: bool,
    bytes: u64,
    size: usize,
    chunk: usize,
) {
    let others = size as u64 - 1;
    let messages = wire::messages(bytes, chunk as u64);
    if is_root {
        traffic.bytes_sent += bytes * others;
        traffic.messages_sent += messages * others;
    } else {
        traffic.bytes_received += bytes;
        traffic.messages_received += messages;
    }
}

/// Rows `i`, columns `j` of `m` as a block with its own column numbering.
fn block_of<T: MpiScalar>(
    m: &Csr<T>,
    rows: &RowPartition,
    cols: &RowPartition,
    i: usize,
    j: usize,
    rank: i32,
) -> Result<Csr<T>> {
    let (r, c) = (rows.rows(i), cols.rows(j));
    m.rows(r.start as usize..r.end as usize)
        .and_then(|b| b.column_panel(c.start as usize..c.end as usize))
        .map_err(|e| Error::Compute {
            rank,
            message: e.to_string(),
        })
}

/// The number of rows of part `i`.
pub(crate) fn len(p: &RowPartition, i: usize) -> u64 {
    let r = p.rows(i);
    r.end - r.start
}

/// A `shape` matrix from a message of whole rows.
pub(crate) fn csr_from_bytes<T: MpiScalar>(
    bytes: &[u8],
    shape: (u64, u64),
    (rank, from): (i32, i32),
) -> Result<Csr<T>> {
    let nrows = shape.0 as usize;
    let mut offsets = Vec::with_capacity(nrows + 1);
    offsets.push(0);
    let (mut cols, mut values) = (Vec::new(), Vec::new());
    let out = RowsOut {
        offsets: &mut offsets,
        cols: &mut cols,
        values: &mut values,
    };
    wire::unpack_rows(bytes, nrows, shape.1, out, (rank, from))?;
    Csr::try_new(nrows, shape.1 as usize, offsets, cols, values).map_err(|e| Error::Message {
        rank,
        from,
        reason: e.to_string(),
    })
}

/// `x + y` for matrices of one shape: rows merged, an entry in both summed (kept when the sum
/// is zero, as SpGEMM keeps the structure).
pub(crate) fn add<T: MpiScalar>(
    x: &Csr<T>,
    y: &Csr<T>,
) -> std::result::Result<Csr<T>, hetsparse::Error> {
    if x.nnz() == 0 {
        return Ok(y.clone());
    }
    let mut offsets = Vec::with_capacity(x.nrows() + 1);
    offsets.push(0u64);
    let cap = (x.nnz() + y.nnz()) as usize;
    let (mut cols, mut values) = (Vec::with_capacity(cap), Vec::with_capacity(cap));
    for r in 0..x.nrows() {
        let ((xc, xv), (yc, yv)) = (x.row(r), y.row(r));
        let (mut p, mut q) = (0, 0);
        while p < xc.len() || q < yc.len() {
            if q == yc.len() || (p < xc.len() && xc[p] < yc[q]) {
                cols.push(xc[p]);
                values.push(xv[p]);
                p += 1;
            } else if p == xc.len() || yc[q] < xc[p] {
                cols.push(yc[q]);
                values.push(yv[q]);
                q += 1;
            } else {
                cols.push(xc[p]);
                values.push(T::from_acc(xv[p].to_acc() + yv[q].to_acc()));
                p += 1;
                q += 1;
            }
        }
        offsets.push(cols.len() as u64);
    }
    Ok(Csr::try_new(x.nrows(), x.ncols(), offsets, cols, values)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_merge_rows_and_keep_cancelled_entries() {
        let x = Csr::try_new(2, 4, vec![0, 2, 3], vec![0, 2, 3], vec![1.0f64, 2.0, 3.0]).unwrap();
        let y = Csr::try_new(2, 4, vec![0, 2, 2], vec![1, 2], vec![5.0f64, -2.0]).unwrap();
        let s = add(&x, &y).unwrap();
        assert_eq!(s.row_offsets(), &[0, 3, 4]);
        assert_eq!(s.col_indices(), &[0, 1, 2, 3]);
        assert_eq!(s.values(), &[1.0, 5.0, 0.0, 3.0]);
        assert_eq!(add(&Csr::zeros(2, 4).unwrap(), &y).unwrap(), y);
        assert_eq!(Grid::new(2, 3).position(4), (1, 1));
    }
}
