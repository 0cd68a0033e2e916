//! 3D (split) Sparse SUMMA on a `pr × pc × c` grid of ranks, whole or in batches of C's
//! columns.

use std::ops::Range;

use hetsparse::{Context, Csr, DeviceChoice};
use mpi::traits::*;

use crate::error::{agree, check_chain, Error, Result};
use crate::matrix::{all_gather_u64, check_root, comm_span, DistOptions};
use crate::partition::RowPartition;
use crate::report::{CommReport, Traffic};
use crate::summa::{
    add, count_broadcast, csr_from_bytes, len, spgemm_summa_with, split, Dist2dCsr, Grid,
};
use crate::wire::{self, MpiScalar};

const TAG_BLOCK_3D: i32 = 51;
const TAG_FIBER: i32 = 52;

/// A `rows × cols × layers` grid of ranks: rank `l · rows · cols + i · cols + j` sits at row
/// `i`, column `j` of layer `l`, so every layer is a `rows × cols` [`Grid`] of consecutive
/// ranks, and the ranks at one `(i, j)` of every layer make a fiber.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grid3 {
    /// Rows of each layer's grid (`pr`).
    pub rows: usize,
    /// Columns of each layer's grid (`pc`).
    pub cols: usize,
    /// Layers (`c`).
    pub layers: usize,
}

impl Grid3 {
    /// A `rows × cols × layers` grid.
    pub fn new(rows: usize, cols: usize, layers: usize) -> Self {
        Grid3 { rows, cols, layers }
    }

    /// The number of ranks (`None` on overflow).
    pub fn size(&self) -> Option<usize> {
        self.rows.checked_mul(self.cols)?.checked_mul(self.layers)
    }

    /// The grid position (row, column, layer) of `rank`.
    pub fn position(&self, rank: usize) -> (usize, usize, usize) {
        let per = (self.rows * self.cols).max(1);
        let (l, r) = (rank / per, rank % per);
        (r / self.cols.max(1), r % self.cols.max(1), l)
    }

    /// One layer's `rows × cols` grid.
    pub fn layer(&self) -> Grid {
        Grid::new(self.rows, self.cols)
    }

    /// Checks the grid has `comm`'s size and is the same on every rank (collective).
    pub(crate) fn check<C: Communicator>(&self, comm: &C) -> Result<()> {
        let dims = [self.rows as i64, self.cols as i64, self.layers as i64];
        let mine = [dims[0], -dims[0], dims[1], -dims[1], dims[2], -dims[2]];
        let mut max = [0i64; 6];
        comm.all_reduce_into(
            &mine[..],
            &mut max[..],
            mpi::collective::SystemOperation::max(),
        );
        let rank = comm.rank();
        let local = if max.chunks_exact(2).any(|m| m[0] != -m[1]) {
            Err(Error::InvalidArgument {
                rank,
                reason: "ranks disagree on the grid".to_string(),
            })
        } else if self.size() != Some(comm.size() as usize) {
            Err(Error::InvalidArgument {
                rank,
                reason: format!(
                    "a {}×{}×{} grid for {} ranks",
                    self.rows,
                    self.cols,
                    self.layers,
                    comm.size()
                ),
            })
        } else {
            Ok(())
        };
        agree(comm, local)
    }
}

/// How a matrix is laid out on a [`Grid3`]: which block rank `(i, j, l)` holds.
///
/// `even(n, q)` below is [`RowPartition::even`]; "`x` split in `q`, each part split in `r`"
/// is the nested partition, part `(u, v)` being part `v` of `even` over part `u`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout3 {
    /// The left operand A of 3D SUMMA: columns split in `c` layers, each layer's columns
    /// split in `pc`; rank `(i, j, l)` holds rows `even(nrows, pr)` part `i` and the column
    /// part `(l, j)`.
    ColumnLayers,
    /// The right operand B: rows split in `c` layers, each layer's rows split in `pr`; rank
    /// `(i, j, l)` holds the row part `(l, i)` and columns `even(ncols, pc)` part `j`.
    RowLayers,
    /// The product C: rows `even(nrows, pr)` part `i`; columns `even(ncols, pc)`, each part
    /// split in `c` layers; rank `(i, j, l)` holds column part `(j, l)`.
    Output,
}

/// `n` split in `outer` parts, each split in `inner`: part `(u, v)` is part `u · inner + v`.
fn nested(n: u64, outer: usize, inner: usize) -> RowPartition {
    let top = RowPartition::even(n, outer);
    let mut counts = Vec::with_capacity(outer.max(1) * inner.max(1));
    for u in 0..top.ranks() {
        let r = top.rows(u);
        let sub = RowPartition::even(r.end - r.start, inner);
        counts.extend((0..sub.ranks()).map(|v| len(&sub, v)));
    }
    RowPartition::from_counts(&counts)
}

/// The row and column partitions of a `nrows × ncols` matrix in `layout` on `grid`.
pub(crate) fn partitions(
    grid: Grid3,
    layout: Layout3,
    nrows: u64,
    ncols: u64,
) -> (RowPartition, RowPartition) {
    let (pr, pc, c) = (grid.rows, grid.cols, grid.layers);
    match layout {
        Layout3::ColumnLayers => (RowPartition::even(nrows, pr), nested(ncols, c, pc)),
        Layout3::RowLayers => (nested(nrows, c, pr), RowPartition::even(ncols, pc)),
        Layout3::Output => (RowPartition::even(nrows, pr), nested(ncols, pc, c)),
    }
}

/// The (row part, column part) rank `rank` holds.
pub(crate) fn parts_of(grid: Grid3, layout: Layout3, rank: usize) -> (usize, usize) {
    let (i, j, l) = grid.position(rank);
    let (pr, pc, c) = (grid.rows, grid.cols, grid.layers);
    match layout {
        Layout3::ColumnLayers => (i, l * pc + j),
        Layout3::RowLayers => (l * pr + i, j),
        Layout3::Output => (i, j * c + l),
    }
}

/// A sparse matrix distributed in blocks on a [`Grid3`] in one of the [`Layout3`]s, rank
/// `(i, j, l)` holding its block as a [`Csr`] of its own columns (indices from 0 at the
/// block's first column).
#[derive(Debug, Clone, PartialEq)]
pub struct Dist3dCsr<T> {
    grid: Grid3,
    layout: Layout3,
    rows: RowPartition,
    cols: RowPartition,
    nnz_per_rank: Vec<u64>,
    local: Csr<T>,
}

impl<T: MpiScalar> Dist3dCsr<T> {
    /// Distributes `matrix`, given on rank `root` (`None` elsewhere), over `grid` in `layout`.
    ///
    /// Errors (on every rank): a grid whose size is not the communicator's or that differs
    /// between ranks, a root that is not a rank or differs between ranks, no matrix on the
    /// root.
    pub fn scatter<C: Communicator>(
        comm: &C,
        root: i32,
        matrix: Option<&Csr<T>>,
        grid: Grid3,
        layout: Layout3,
        options: &DistOptions,
    ) -> Result<(Dist3dCsr<T>, CommReport)> {
        let span = comm_span("mpi_scatter", comm);
        let _enter = span.enter();
        let (rank, size) = (comm.rank(), comm.size() as usize);
        let chunk = agree(comm, options.check(rank))?;
        grid.check(comm)?;
        check_root(comm, root)?;
        let is_root = rank == root;
        let blocks = if is_root {
            (|| {
                let m = matrix.ok_or_else(|| Error::InvalidArgument {
                    rank,
                    reason: "no matrix given on the root".to_string(),
                })?;
                let (rows, cols) = partitions(grid, layout, m.nrows() as u64, m.ncols() as u64);
                (0..size)
                    .map(|r| {
                        let (rp, cp) = parts_of(grid, layout, r);
                        let (rr, cr) = (rows.rows(rp), cols.rows(cp));
                        m.rows(rr.start as usize..rr.end as usize)
                            .and_then(|b| b.column_panel(cr.start as usize..cr.end as usize))
                            .map_err(|e| Error::Compute {
                                rank,
                                message: e.to_string(),
                            })
                    })
                    .collect::<Result<Vec<_>>>()
            })()
        } else {
            Ok(Vec::new())
        };
        let mut blocks = agree(comm, blocks)?;
        let mut header = vec![0u64; 2 + size];
        if let (true, Some(m)) = (is_root, matrix) {
            header[0] = m.nrows() as u64;
            header[1] = m.ncols() as u64;
            for (h, b) in header[2..].iter_mut().zip(&blocks) {
                *h = b.nnz();
            }
        }
        comm.process_at_rank(root).broadcast_into(&mut header[..]);
        let mut sizes = Traffic::default();
        count_broadcast(&mut sizes, is_root, 8 * header.len() as u64, size, chunk);
        let (rows, cols) = partitions(grid, layout, header[0], header[1]);
        let nnz_per_rank = header[2..].to_vec();
        let mut sends = vec![Vec::new(); size];
        let mut own = None;
        for (r, b) in blocks.drain(..).enumerate() {
            if r == rank as usize {
                own = Some(b);
            } else {
                sends[r] = wire::pack_rows(&b, 0..b.nrows());
            }
        }
        let (rp, cp) = parts_of(grid, layout, rank as usize);
        let shape = (len(&rows, rp), len(&cols, cp));
        let mut recv_sizes = vec![0u64; size];
        if !is_root {
            recv_sizes[root as usize] = wire::rows_bytes::<T>(shape.0, nnz_per_rank[rank as usize]);
        }
        let mut traffic = Traffic::default();
        let received = wire::exchange(comm, &sends, &recv_sizes, chunk, TAG_BLOCK_3D, &mut traffic);
        let local = match own {
            Some(b) => Ok(b),
            None => csr_from_bytes(&received[root as usize], shape, (rank, root)),
        };
        let local = agree(comm, local)?;
        let report = CommReport::finish(comm, sizes, Traffic::default(), traffic, (0, 0));
        Ok((
            Dist3dCsr {
                grid,
                layout,
                rows,
                cols,
                nnz_per_rank,
                local,
            },
            report,
        ))
    }

    /// Makes a matrix in `layout` on `grid` of the block each rank holds: rank `(i, j, l)`'s
    /// `local` is the block `layout` gives it (its own column numbering, from 0 at the block's
    /// first column). An all-gather of `(rows, columns, nnz)` per rank gives the matrix's shape
    /// (the rows of the first block of each row part, the columns of the first block of each
    /// column part); every block must then have the shape the layout's even partitions give
    /// it, as [`spgemm_summa3d`] relies on them.
    ///
    /// Collective. Errors (on every rank): a grid that does not fit the communicator or
    /// differs between ranks, [`Error::InvalidBlock`] naming the first rank whose block does
    /// not have its shape.
    pub fn from_local_blocks<C: Communicator>(
        comm: &C,
        grid: Grid3,
        layout: Layout3,
        local: Csr<T>,
    ) -> Result<(Dist3dCsr<T>, CommReport)> {
        let span = comm_span("mpi_from_local_blocks", comm);
        let _enter = span.enter();
        grid.check(comm)?;
        let size = comm.size() as usize;
        let mut sizes = Traffic::default();
        let mine = [local.nrows() as u64, local.ncols() as u64, local.nnz()];
        let all = all_gather_u64(comm, &mine, &mut sizes);
        let shape = |r: usize| (all[3 * r], all[3 * r + 1]);
        // How many row and column parts the layout has, and the first block of each.
        let (row_parts, col_parts) = partitions(grid, layout, 0, 0);
        let mut row_counts = vec![None; row_parts.ranks()];
        let mut col_counts = vec![None; col_parts.ranks()];
        for r in 0..size {
            let (rp, cp) = parts_of(grid, layout, r);
            if let Some(slot) = row_counts.get_mut(rp) {
                slot.get_or_insert(shape(r).0);
            }
            if let Some(slot) = col_counts.get_mut(cp) {
                slot.get_or_insert(shape(r).1);
            }
        }
        let sum = |counts: &[Option<u64>]| {
            counts
                .iter()
                .fold(0u64, |s, c| s.saturating_add(c.unwrap_or(0)))
        };
        let (nrows, ncols) = (sum(&row_counts), sum(&col_counts));
        let (rows, cols) = partitions(grid, layout, nrows, ncols);
        let wrong = (0..size).find_map(|r| {
            let (rp, cp) = parts_of(grid, layout, r);
            let (want_rows, want_cols) = (rows.rows(rp), cols.rows(cp));
            let want = (
                want_rows.end - want_rows.start,
                want_cols.end - want_cols.start,
            );
            let (i, j, l) = grid.position(r);
            (shape(r) != want).then(|| Error::InvalidBlock {
                rank: r as i32,
                reason: format!(
                    "its block is {}×{}; a {nrows}×{ncols} matrix in {layout:?} layout on a \
                     {}×{}×{} grid gives rank {r} (row {i}, column {j}, layer {l}) rows \
                     {want_rows:?} and columns {want_cols:?}, a {}×{} block",
                    shape(r).0,
                    shape(r).1,
                    grid.rows,
                    grid.cols,
                    grid.layers,
                    want.0,
                    want.1
                ),
            })
        });
        agree(comm, wrong.map_or(Ok(()), Err))?;
        let nnz_per_rank = all.chunks_exact(3).map(|b| b[2]).collect();
        let report =
            CommReport::finish(comm, sizes, Traffic::default(), Traffic::default(), (0, 0));
        Ok((
            Dist3dCsr {
                grid,
                layout,
                rows,
                cols,
                nnz_per_rank,
                local,
            },
            report,
        ))
    }

    /// A matrix from parts every rank agrees on: the layout's partitions of `shape`.
    pub(crate) fn from_parts(
        grid: Grid3,
        layout: Layout3,
        shape: (u64, u64),
        nnz_per_rank: Vec<u64>,
        local: Csr<T>,
    ) -> Self {
        let (rows, cols) = partitions(grid, layout, shape.0, shape.1);
        Dist3dCsr {
            grid,
            layout,
            rows,
            cols,
            nnz_per_rank,
            local,
        }
    }

    /// The row and column partitions of the layout.
    pub(crate) fn partitions(&self) -> (&RowPartition, &RowPartition) {
        (&self.rows, &self.cols)
    }

    /// Collects the whole matrix on rank `root` (`Some` there, `None` elsewhere).
    ///
    /// Errors (on every rank): a grid that does not fit the communicator, a root that is not
    /// a rank or differs between ranks.
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
                    *s = wire::rows_bytes::<T>(self.block_shape(r).0, self.nnz_per_rank[r]);
                }
            }
        } else {
            sends[root as usize] = wire::pack_rows(&self.local, 0..self.local.nrows());
        }
        let mut traffic = Traffic::default();
        let received = wire::exchange(comm, &sends, &recv_sizes, chunk, TAG_BLOCK_3D, &mut traffic);
        let whole = if rank == root {
            (|| {
                let mut blocks = Vec::with_capacity(size);
                for (r, bytes) in received.iter().enumerate() {
                    blocks.push(if r == rank as usize {
                        self.local.clone()
                    } else {
                        csr_from_bytes(bytes, self.block_shape(r), (rank, r as i32))?
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

    /// The shape of rank `rank`'s block.
    fn block_shape(&self, rank: usize) -> (u64, u64) {
        let (rp, cp) = parts_of(self.grid, self.layout, rank);
        (len(&self.rows, rp), len(&self.cols, cp))
    }

    /// The whole matrix from every rank's block (in rank order).
    fn assemble(&self, blocks: &[Csr<T>], rank: i32) -> Result<Csr<T>> {
        // The blocks of each row part, in column order.
        let mut by_row: Vec<Vec<(u64, usize)>> = vec![Vec::new(); self.rows.ranks()];
        for r in 0..blocks.len() {
            let (rp, cp) = parts_of(self.grid, self.layout, r);
            if let Some(v) = by_row.get_mut(rp) {
                v.push((self.cols.rows(cp).start, r));
            }
        }
        let nnz: u64 = self.nnz_per_rank.iter().sum();
        let mut offsets = Vec::with_capacity(self.rows.nrows() as usize + 1);
        offsets.push(0u64);
        let mut cols = Vec::with_capacity(nnz as usize);
        let mut values = Vec::with_capacity(nnz as usize);
        for (rp, mut row_blocks) in by_row.into_iter().enumerate() {
            row_blocks.sort_unstable();
            for row in 0..len(&self.rows, rp) as usize {
                for &(first, r) in &row_blocks {
                    let (c, v) = blocks[r].row(row);
                    cols.extend(c.iter().map(|c| c + first as u32));
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

    /// This rank's block, with column indices from the block's first column.
    pub fn local(&self) -> &Csr<T> {
        &self.local
    }

    /// The grid.
    pub fn grid(&self) -> Grid3 {
        self.grid
    }

    /// The layout.
    pub fn layout(&self) -> Layout3 {
        self.layout
    }

    /// The rows rank `rank` holds (global row numbers).
    pub fn block_rows(&self, rank: usize) -> Range<u64> {
        self.rows.rows(parts_of(self.grid, self.layout, rank).0)
    }

    /// The columns rank `rank` holds (global column numbers).
    pub fn block_cols(&self, rank: usize) -> Range<u64> {
        self.cols.rows(parts_of(self.grid, self.layout, rank).1)
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

/// One batch of C's columns as one rank holds it, handed to the callback of
/// [`spgemm_summa3d_batched`].
#[derive(Debug, Clone, PartialEq)]
pub struct Batch<T> {
    /// Which batch (from 0).
    pub index: usize,
    /// How many batches there are.
    pub batches: usize,
    /// The rows of C in `block` (global row numbers).
    pub rows: Range<u64>,
    /// The columns of C in `block` (global column numbers); `block`'s column `0` is
    /// `cols.start`.
    pub cols: Range<u64>,
    /// This rank's part of C in this batch: `C[rows, cols]`, complete (summed over layers).
    pub block: Csr<T>,
}

/// `C = A·B` by 3D SUMMA on the CPU backend of each rank, in one batch; see
/// [`spgemm_summa3d_with`].
pub fn spgemm_summa3d<T: MpiScalar, C: Communicator>(
    comm: &C,
    a: &Dist3dCsr<T>,
    b: &Dist3dCsr<T>,
    options: &DistOptions,
) -> Result<(Dist3dCsr<T>, CommReport)> {
    let ctx = Context::on(&DeviceChoice::Cpu).map_err(|e| Error::Compute {
        rank: comm.rank(),
        message: e.to_string(),
    });
    let ctx = agree(comm, ctx)?;
    spgemm_summa3d_with(comm, a, b, 1, &ctx, options)
}

/// `C = A·B` by split 3D Sparse SUMMA (Azad et al., SISC 2016) on A's and B's `pr × pc × c`
/// grid, A in [`Layout3::ColumnLayers`] and B in [`Layout3::RowLayers`]: layer `l` holds
/// `A(:, K_l)` and `B(K_l, :)` for its slice `K_l` of the inner dimension and multiplies them
/// by 2D Sparse SUMMA on its `pr × pc` grid (through `ctx`); the partial products
/// `A(:, K_l)·B(K_l, :)`, one per layer on each fiber, are summed by an all-to-all along the
/// fiber that leaves each layer one slice of the block's columns (a reduce-scatter), so C is
/// in [`Layout3::Output`].
///
/// With `batches > 1` C's columns are formed `batches` pieces at a time (Hussain et al.,
/// IPDPS 2021): each layer's column part of each block is cut in `batches`, and batch `t`
/// multiplies by B's columns of every part `t` only, so a rank holds only that batch's
/// partial products; A is broadcast again for every batch. C is the same whatever the count.
///
/// Collective. Errors (on every rank): different grids or layouts other than these, shapes
/// that do not multiply, no batches, a malformed message, a local product that failed.
pub fn spgemm_summa3d_with<T: MpiScalar, C: Communicator>(
    comm: &C,
    a: &Dist3dCsr<T>,
    b: &Dist3dCsr<T>,
    batches: usize,
    ctx: &Context<T>,
    options: &DistOptions,
) -> Result<(Dist3dCsr<T>, CommReport)> {
    let span = comm_span("mpi_spgemm_summa3d", comm);
    let _enter = span.enter();
    let rank = comm.rank();
    let mut pieces: Vec<(u64, Csr<T>)> = Vec::new();
    let mut keep = |batch: Batch<T>| {
        pieces.push((batch.cols.start, batch.block));
        Ok(())
    };
    let (mut sizes, rows) = run(comm, a, b, batches, ctx, options, &mut keep)?;
    let g = a.grid;
    let (c_rows, c_cols) = partitions(g, Layout3::Output, a.shape().0, b.shape().1);
    let (rp, cp) = parts_of(g, Layout3::Output, rank as usize);
    let cols = c_cols.rows(cp);
    let local = hstack(&pieces, len(&c_rows, rp) as usize, cols).map_err(|e| Error::Compute {
        rank,
        message: e.to_string(),
    });
    let local = agree(comm, local)?;
    let nnz_per_rank = all_gather_u64(comm, &[local.nnz()], &mut sizes);
    let report = CommReport::finish(comm, sizes, Traffic::default(), rows, (0, 0));
    Ok((
        Dist3dCsr {
            grid: g,
            layout: Layout3::Output,
            rows: c_rows,
            cols: c_cols,
            nnz_per_rank,
            local,
        },
        report,
    ))
}

/// `C = A·B` by 3D SUMMA in `batches` batches of C's columns (see [`spgemm_summa3d_with`]),
/// handing each rank's part of each batch to `callback` as soon as it is complete instead of
/// assembling C: at most one batch of C and its partial products is held at a time. Every
/// rank calls `callback` once per batch, in batch order.
///
/// Collective. Errors (on every rank): those of [`spgemm_summa3d_with`], and
/// [`Error::Callback`] when `callback` returns an error on some rank (no later batch is
/// computed).
pub fn spgemm_summa3d_batched<T, C, F>(
    comm: &C,
    a: &Dist3dCsr<T>,
    b: &Dist3dCsr<T>,
    batches: usize,
    ctx: &Context<T>,
    options: &DistOptions,
    mut callback: F,
) -> Result<CommReport>
where
    T: MpiScalar,
    C: Communicator,
    F: FnMut(Batch<T>) -> std::result::Result<(), String>,
{
    let span = comm_span("mpi_spgemm_summa3d", comm);
    let _enter = span.enter();
    let rank = comm.rank();
    let mut sink =
        |batch: Batch<T>| callback(batch).map_err(|message| Error::Callback { rank, message });
    let (sizes, rows) = run(comm, a, b, batches, ctx, options, &mut sink)?;
    Ok(CommReport::finish(
        comm,
        sizes,
        Traffic::default(),
        rows,
        (0, 0),
    ))
}

/// The number of batches that keeps every rank's partial products of 3D SUMMA within
/// `budget_bytes`: the smallest `n ≥ 1` with `estimate / n ≤ budget_bytes` on every rank.
///
/// A rank's estimate is an upper bound on its layer's partial block of C (before the sum over
/// layers) and the pieces it receives to sum: `2 · (4 + s) · flops`, where `flops` =
/// `Σ_{k ∈ K_l} nnz(A(I_i, k)) · nnz(B(k, J_j))` counts the multiplications of its block
/// (each one at most one entry) and `s` is the scalar's bytes. The column counts of A's and
/// the row counts of B's blocks are broadcast along the layer's grid rows and columns (one u64
/// per column or row of the slice, not counted in a report); batches are assumed to split the
/// product evenly. Each batch's A and B blocks are held besides, as in one product.
///
/// Collective. Errors (on every rank): those of [`spgemm_summa3d_with`]'s checks, a budget of
/// 0.
pub fn summa3d_batches_for_memory<T: MpiScalar, C: Communicator>(
    comm: &C,
    a: &Dist3dCsr<T>,
    b: &Dist3dCsr<T>,
    budget_bytes: u64,
) -> Result<usize> {
    let rank = comm.rank();
    let checks = if budget_bytes == 0 {
        Err(Error::InvalidArgument {
            rank,
            reason: "a memory budget of 0 bytes".to_string(),
        })
    } else if a.grid != b.grid
        || a.layout != Layout3::ColumnLayers
        || b.layout != Layout3::RowLayers
        || a.shape().1 != b.shape().0
    {
        Err(Error::InvalidArgument {
            rank,
            reason: "A and B are not 3D SUMMA's operands on one grid".to_string(),
        })
    } else {
        Ok(())
    };
    agree(comm, checks)?;
    a.grid.check(comm)?;
    let g = a.grid;
    let (i, j, l) = g.position(rank as usize);
    let row_comm = split(comm, l * g.rows + i)?;
    let col_comm = split(comm, l * g.cols + j)?;
    // Column counts of A(I_i, K_l), part by part along the grid row.
    let mut a_cols = Vec::new();
    for jj in 0..g.cols {
        let (_, cp) = parts_of(
            g,
            Layout3::ColumnLayers,
            l * g.rows * g.cols + i * g.cols + jj,
        );
        let mut counts = vec![0u64; len(&a.cols, cp) as usize];
        if jj == j {
            for &c in a.local.col_indices() {
                counts[c as usize] += 1;
            }
        }
        row_comm
            .process_at_rank(jj as i32)
            .broadcast_into(&mut counts[..]);
        a_cols.extend(counts);
    }
    // Row counts of B(K_l, J_j), part by part along the grid column.
    let mut b_rows = Vec::new();
    for ii in 0..g.rows {
        let (rp, _) = parts_of(g, Layout3::RowLayers, l * g.rows * g.cols + ii * g.cols + j);
        let mut counts = vec![0u64; len(&b.rows, rp) as usize];
        if ii == i {
            for (r, c) in counts.iter_mut().enumerate() {
                *c = b.local.row_nnz(r);
            }
        }
        col_comm
            .process_at_rank(ii as i32)
            .broadcast_into(&mut counts[..]);
        b_rows.extend(counts);
    }
    let flops = a_cols
        .iter()
        .zip(&b_rows)
        .fold(0u64, |f, (x, y)| f.saturating_add(x.saturating_mul(*y)));
    let estimate = flops.saturating_mul(2 * (4 + T::BYTES as u64));
    let mine = estimate.div_ceil(budget_bytes).max(1);
    let mut most = 0u64;
    comm.all_reduce_into(&mine, &mut most, mpi::collective::SystemOperation::max());
    Ok(usize::try_from(most).unwrap_or(usize::MAX))
}

/// The columns `ranges` (ascending, disjoint) of `m`, renumbered from 0 in order.
fn select_columns<T: MpiScalar>(
    m: &Csr<T>,
    ranges: &[Range<u64>],
) -> std::result::Result<Csr<T>, hetsparse::Error> {
    let mut map = vec![u32::MAX; m.ncols()];
    let mut next = 0u32;
    for r in ranges {
        for c in r.start..r.end {
            if let Some(slot) = map.get_mut(c as usize) {
                *slot = next;
                next += 1;
            }
        }
    }
    let mut offsets = Vec::with_capacity(m.nrows() + 1);
    offsets.push(0u64);
    let (mut cols, mut values) = (Vec::new(), Vec::new());
    for i in 0..m.nrows() {
        let (c, v) = m.row(i);
        for (&c, &v) in c.iter().zip(v) {
            let k = map[c as usize];
            if k != u32::MAX {
                cols.push(k);
                values.push(v);
            }
        }
        offsets.push(cols.len() as u64);
    }
    Ok(Csr::try_new(
        m.nrows(),
        next as usize,
        offsets,
        cols,
        values,
    )?)
}

/// Blocks of `nrows` rows side by side: each `(first column, block)` placed from its first
/// column, relative to `cols.start`, in order.
fn hstack<T: MpiScalar>(
    pieces: &[(u64, Csr<T>)],
    nrows: usize,
    cols: Range<u64>,
) -> std::result::Result<Csr<T>, hetsparse::Error> {
    let nnz: u64 = pieces.iter().map(|p| p.1.nnz()).sum();
    let mut offsets = Vec::with_capacity(nrows + 1);
    offsets.push(0u64);
    let (mut out_cols, mut values) = (
        Vec::with_capacity(nnz as usize),
        Vec::with_capacity(nnz as usize),
    );
    for i in 0..nrows {
        for (first, block) in pieces {
            if i < block.nrows() {
                let shift = (first - cols.start) as u32;
                let (c, v) = block.row(i);
                out_cols.extend(c.iter().map(|c| c + shift));
                values.extend_from_slice(v);
            }
        }
        offsets.push(out_cols.len() as u64);
    }
    Ok(Csr::try_new(
        nrows,
        (cols.end - cols.start) as usize,
        offsets,
        out_cols,
        values,
    )?)
}

/// Batch `t` of `batches` of C's column part `part` of `cols`.
fn batch_cols(cols: &RowPartition, part: usize, t: usize, batches: usize) -> Range<u64> {
    let whole = cols.rows(part);
    let sub = RowPartition::even(whole.end - whole.start, batches).rows(t);
    whole.start + sub.start..whole.start + sub.end
}

/// The product, batch by batch: every rank's complete part of each batch goes to `sink`.
/// Returns the traffic of the sizes and of the blocks.
fn run<T: MpiScalar, C: Communicator>(
    comm: &C,
    a: &Dist3dCsr<T>,
    b: &Dist3dCsr<T>,
    batches: usize,
    ctx: &Context<T>,
    options: &DistOptions,
    sink: &mut dyn FnMut(Batch<T>) -> Result<()>,
) -> Result<(Traffic, Traffic)> {
    let rank = comm.rank();
    let me = rank as usize;
    let checks = (|| {
        let chunk = options.check(rank)?;
        if a.grid != b.grid {
            return Err(Error::InvalidArgument {
                rank,
                reason: format!("A on a {:?} grid, B on a {:?} grid", a.grid, b.grid),
            });
        }
        if a.layout != Layout3::ColumnLayers || b.layout != Layout3::RowLayers {
            return Err(Error::InvalidArgument {
                rank,
                reason: format!(
                    "A in {:?} and B in {:?}: 3D SUMMA takes A in ColumnLayers and B in RowLayers",
                    a.layout, b.layout
                ),
            });
        }
        if batches == 0 {
            return Err(Error::InvalidArgument {
                rank,
                reason: "0 batches".to_string(),
            });
        }
        check_chain(rank, a.shape(), b.shape())?;
        Ok(chunk)
    })();
    let chunk = agree(comm, checks)?;
    a.grid.check(comm)?;
    let g = a.grid;
    let (pr, pc, c) = (g.rows, g.cols, g.layers);
    let per = pr * pc;
    let (i, j, l) = g.position(me);
    let layer_comm = split(comm, l)?;
    let fiber_comm = split(comm, i * pc + j)?;
    let to_world = |layer_rank: i32| layer_rank + (l * per) as i32;
    let (nrows, inner) = a.shape();
    let ncols = b.shape().1;
    let slice = RowPartition::even(inner, c).rows(l);
    let slice_len = slice.end - slice.start;
    let c_rows = RowPartition::even(nrows, pr);
    let (_, c_cols) = partitions(g, Layout3::Output, nrows, ncols);
    let b_cols = RowPartition::even(ncols, pc);
    let a_layer = Dist2dCsr::from_parts(
        g.layer(),
        c_rows.clone(),
        RowPartition::even(slice_len, pc),
        a.nnz_per_rank[l * per..(l + 1) * per].to_vec(),
        a.local.clone(),
    );
    let (mut sizes, mut rows) = (Traffic::default(), Traffic::default());
    let my_rows = len(&c_rows, i);
    for t in 0..batches {
        // B's columns of batch t in every column block: the layers' parts of each, in order.
        let widths: Vec<u64> = (0..pc)
            .map(|jj| {
                (0..c)
                    .map(|ll| {
                        let r = batch_cols(&c_cols, jj * c + ll, t, batches);
                        r.end - r.start
                    })
                    .sum()
            })
            .collect();
        let mine: Vec<Range<u64>> = (0..c)
            .map(|ll| batch_cols(&c_cols, j * c + ll, t, batches))
            .collect();
        let first = b_cols.rows(j).start;
        let relative: Vec<Range<u64>> = mine
            .iter()
            .map(|r| r.start - first..r.end - first)
            .collect();
        let b_block = select_columns(&b.local, &relative).map_err(|e| Error::Compute {
            rank,
            message: e.to_string(),
        });
        let b_block = agree(comm, b_block)?;
        let b_layer = Dist2dCsr::from_parts(
            g.layer(),
            RowPartition::even(slice_len, pr),
            RowPartition::from_counts(&widths),
            vec![0; per],
            b_block,
        );
        // The layer's partial product by 2D SUMMA; its errors renumbered to this communicator.
        let partial = spgemm_summa_with(&layer_comm, &a_layer, &b_layer, ctx, options)
            .map_err(|e| e.map_ranks(to_world));
        let (partial, report) = agree(comm, partial)?;
        sizes = sizes.plus(report.sizes);
        rows = rows.plus(report.rows);
        let partial = partial.into_local();

        // Reduce-scatter along the fiber: layer `ll` gets columns `mine[ll]` of every layer's
        // partial block.
        let mut at = 0u64;
        let mut panels = Vec::with_capacity(c);
        for r in &mine {
            let w = r.end - r.start;
            panels.push(at..at + w);
            at += w;
        }
        let cut = (|| {
            let mut own = None;
            let mut sends = vec![Vec::new(); c];
            for (ll, p) in panels.iter().enumerate() {
                let panel = partial.column_panel(p.start as usize..p.end as usize)?;
                if ll == l {
                    own = Some(panel);
                } else {
                    sends[ll] = wire::pack_rows(&panel, 0..panel.nrows());
                }
            }
            Ok((own, sends))
        })()
        .map_err(|e: hetsparse::Error| Error::Compute {
            rank,
            message: e.to_string(),
        });
        let (own, sends) = agree(comm, cut)?;
        let send_sizes: Vec<u64> = sends.iter().map(|s| s.len() as u64).collect();
        let mut recv_sizes = wire::all_to_all_u64(&fiber_comm, &send_sizes, &mut sizes);
        recv_sizes[l] = 0;
        let received = wire::exchange(
            &fiber_comm,
            &sends,
            &recv_sizes,
            chunk,
            TAG_FIBER,
            &mut rows,
        );
        let width = mine[l].end - mine[l].start;
        let summed = (|| {
            let mut sum =
                Csr::<T>::zeros(my_rows as usize, width as usize).map_err(|e| Error::Compute {
                    rank,
                    message: e.to_string(),
                })?;
            for (ll, bytes) in received.iter().enumerate() {
                let part = if ll == l {
                    match &own {
                        Some(p) => p.clone(),
                        None => continue,
                    }
                } else {
                    let from = (ll * per + i * pc + j) as i32;
                    csr_from_bytes::<T>(bytes, (my_rows, width), (rank, from))?
                };
                sum = add(&sum, &part).map_err(|e| Error::Compute {
                    rank,
                    message: e.to_string(),
                })?;
            }
            Ok(sum)
        })();
        let block = agree(comm, summed)?;
        let delivered = sink(Batch {
            index: t,
            batches,
            rows: c_rows.rows(i),
            cols: mine[l].clone(),
            block,
        });
        agree(comm, delivered)?;
    }
    Ok((sizes, rows))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_tile_the_matrix() {
        let g = Grid3::new(2, 3, 2);
        assert_eq!(g.position(7), (0, 1, 1));
        assert_eq!(g.size(), Some(12));
        let p = nested(10, 2, 3);
        assert_eq!(p.offsets(), &[0, 2, 4, 5, 7, 9, 10]);
        for layout in [Layout3::ColumnLayers, Layout3::RowLayers, Layout3::Output] {
            let (rows, cols) = partitions(g, layout, 9, 10);
            let mut covered = vec![0u32; 90];
            for r in 0..12 {
                let (rp, cp) = parts_of(g, layout, r);
                for i in rows.rows(rp) {
                    for j in cols.rows(cp) {
                        covered[(i * 10 + j) as usize] += 1;
                    }
                }
            }
            assert!(covered.iter().all(|&n| n == 1), "{layout:?}");
        }
    }

    #[test]
    fn columns_are_selected_and_stacked_back() {
        let m = Csr::try_new(
            2,
            5,
            vec![0, 3, 5],
            vec![0, 2, 4, 1, 3],
            vec![1.0f64, 2., 3., 4., 5.],
        )
        .unwrap();
        let s = select_columns(&m, &[1..3, 4..5]).unwrap();
        assert_eq!(s.ncols(), 3);
        assert_eq!(s.col_indices(), &[1, 2, 0]);
        let left = m.column_panel(0..2).unwrap();
        let right = m.column_panel(2..5).unwrap();
        let back = hstack(&[(10, left), (12, right)], 2, 10..15).unwrap();
        assert_eq!(back, m);
    }
}
