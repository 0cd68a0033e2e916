//! Conversions between the 1D, 2D and 3D layouts.
//!
//! Every layout is a tiling: a partition of the rows, one of the columns, and for each rank the
//! row part and column part of the one block it holds. Converting is the same for every pair
//! of layouts: each rank cuts its block along the new tiling's boundaries, an all-to-all of
//! byte counts tells every rank what to expect, the pieces travel (non-blocking, in messages
//! of at most `max_message_bytes`), and each rank puts the pieces of its new block together.

use std::ops::Range;

use hetsparse::Csr;
use mpi::collective::SystemOperation;
use mpi::traits::*;

use crate::error::{agree, Error, Result};
use crate::matrix::{all_gather_u64, comm_span, DistCsr, DistOptions};
use crate::partition::RowPartition;
use crate::report::{CommReport, Traffic};
use crate::summa::{csr_from_bytes, Dist2dCsr, Grid};
use crate::summa3d::{partitions, parts_of, Dist3dCsr, Grid3, Layout3};
use crate::wire::{self, MpiScalar};

/// Tag of the messages that carry pieces of blocks between layouts.
const TAG_CONVERT: i32 = 61;

/// A matrix cut into one block per rank: rank `r` holds rows `rows.rows(parts[r].0)` and
/// columns `cols.rows(parts[r].1)`.
struct Tiling {
    rows: RowPartition,
    cols: RowPartition,
    parts: Vec<(usize, usize)>,
}

impl Tiling {
    /// Blocks of rows (`partition`), every column in each.
    fn rows(partition: RowPartition, ncols: u64) -> Tiling {
        let parts = (0..partition.ranks()).map(|r| (r, 0)).collect();
        Tiling {
            rows: partition,
            cols: RowPartition::from_counts(&[ncols]),
            parts,
        }
    }

    /// Blocks `rows × cols` on `grid`.
    fn grid(grid: Grid, rows: RowPartition, cols: RowPartition) -> Tiling {
        let parts = (0..grid.rows * grid.cols)
            .map(|r| grid.position(r))
            .collect();
        Tiling { rows, cols, parts }
    }

    /// The blocks of `layout` on `grid` of a `shape` matrix.
    fn grid3(grid: Grid3, layout: Layout3, shape: (u64, u64)) -> Tiling {
        let (rows, cols) = partitions(grid, layout, shape.0, shape.1);
        let parts = (0..grid.size().unwrap_or(0))
            .map(|r| parts_of(grid, layout, r))
            .collect();
        Tiling { rows, cols, parts }
    }

    /// Rank `rank`'s rows and columns (global numbers).
    fn block(&self, rank: usize) -> (Range<u64>, Range<u64>) {
        match self.parts.get(rank) {
            Some(&(rp, cp)) => (self.rows.rows(rp), self.cols.rows(cp)),
            None => (0..0, 0..0),
        }
    }

    fn shape(&self) -> (u64, u64) {
        (self.rows.nrows(), self.cols.nrows())
    }
}

/// The rows or columns in both ranges (empty when none).
fn overlap(a: &Range<u64>, b: &Range<u64>) -> Range<u64> {
    let start = a.start.max(b.start);
    start..a.end.min(b.end).max(start)
}

/// The entries of `block` (whose first row and column are `at`) in rows `rows` and columns
/// `cols` (global numbers, within the block), packed as [`wire::pack_rows`] does with columns
/// numbered from `cols.start`; empty when there are none.
fn pack_piece<T: MpiScalar>(
    block: &Csr<T>,
    at: (u64, u64),
    rows: &Range<u64>,
    cols: &Range<u64>,
) -> Vec<u8> {
    if rows.is_empty() || cols.is_empty() {
        return Vec::new();
    }
    let (lo, hi) = (cols.start - at.1, cols.end - at.1);
    // Each row's entries in the columns: a slice of its sorted indices.
    let spans: Vec<(usize, Range<usize>)> = (rows.start - at.0..rows.end - at.0)
        .map(|r| {
            let r = r as usize;
            let c = block.row(r).0;
            let from = c.partition_point(|&x| u64::from(x) < lo);
            let to = c.partition_point(|&x| u64::from(x) < hi);
            (r, from..to)
        })
        .collect();
    let entries: u64 = spans.iter().map(|(_, s)| s.len() as u64).sum();
    if entries == 0 {
        return Vec::new();
    }
    let mut out = Vec::with_capacity(wire::rows_bytes::<T>(spans.len() as u64, entries) as usize);
    for (_, s) in &spans {
        out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    }
    for (r, s) in &spans {
        for &c in &block.row(*r).0[s.clone()] {
            // Below `hi - lo`, the piece's width, which fits the block's u32 columns.
            out.extend_from_slice(&((u64::from(c) - lo) as u32).to_le_bytes());
        }
    }
    for (r, s) in &spans {
        for &v in &block.row(*r).1[s.clone()] {
            v.put(&mut out);
        }
    }
    out
}

/// A piece of this rank's new block: its rows and first column (global numbers) and entries.
struct Piece<T> {
    rows: Range<u64>,
    first_col: u64,
    block: Csr<T>,
}

/// This rank's block of the new tiling, put together from the pieces: for each row, the
/// pieces holding it (those from the ranks of one row part of the old tiling) in column order.
fn assemble<T: MpiScalar>(
    mut pieces: Vec<Piece<T>>,
    rows: Range<u64>,
    cols: Range<u64>,
    rank: i32,
) -> Result<Csr<T>> {
    pieces.sort_by_key(|p| (p.rows.start, p.first_col));
    let nnz: u64 = pieces.iter().map(|p| p.block.nnz()).sum();
    let nrows = (rows.end - rows.start) as usize;
    let mut offsets = Vec::with_capacity(nrows + 1);
    offsets.push(0u64);
    let mut out_cols = Vec::with_capacity(nnz as usize);
    let mut values = Vec::with_capacity(nnz as usize);
    let mut first = 0;
    for r in rows.clone() {
        while first < pieces.len() && pieces[first].rows.end <= r {
            first += 1;
        }
        for p in pieces[first..].iter().take_while(|p| p.rows.start <= r) {
            let (c, v) = p.block.row((r - p.rows.start) as usize);
            let shift = (p.first_col - cols.start) as u32;
            out_cols.extend(c.iter().map(|c| c + shift));
            values.extend_from_slice(v);
        }
        offsets.push(out_cols.len() as u64);
    }
    Csr::try_new(
        nrows,
        (cols.end - cols.start) as usize,
        offsets,
        out_cols,
        values,
    )
    .map_err(|e| Error::Compute {
        rank,
        message: format!("putting the converted block together: {e}"),
    })
}

/// Moves a matrix from tiling `from` (this rank's block `local`) to tiling `to`: returns this
/// rank's new block, every rank's entries and the report. Collective.
fn redistribute<T: MpiScalar, C: Communicator>(
    comm: &C,
    from: &Tiling,
    local: &Csr<T>,
    to: &Tiling,
    options: &DistOptions,
) -> Result<(Csr<T>, Vec<u64>, CommReport)> {
    let (rank, size) = (comm.rank(), comm.size() as usize);
    let me = rank as usize;
    let checks = (|| {
        let chunk = options.check(rank)?;
        for (what, t) in [("old", from), ("new", to)] {
            if t.parts.len() != size {
                return Err(Error::Partition {
                    rank,
                    reason: format!(
                        "the {what} layout has {} blocks for {size} ranks",
                        t.parts.len()
                    ),
                });
            }
        }
        let (rows, cols) = from.block(me);
        let want = (rows.end - rows.start, cols.end - cols.start);
        if (local.nrows() as u64, local.ncols() as u64) != want {
            return Err(Error::InvalidBlock {
                rank,
                reason: format!(
                    "its block is {}×{}, its layout gives it {}×{}",
                    local.nrows(),
                    local.ncols(),
                    want.0,
                    want.1
                ),
            });
        }
        if from.shape() != to.shape() {
            return Err(Error::InvalidArgument {
                rank,
                reason: format!(
                    "a {:?} matrix converted to a layout of a {:?} one",
                    from.shape(),
                    to.shape()
                ),
            });
        }
        Ok(chunk)
    })();
    let chunk = agree(comm, checks)?;

    let (my_rows, my_cols) = from.block(me);
    let mut sends: Vec<Vec<u8>> = (0..size)
        .map(|d| {
            let (rows, cols) = to.block(d);
            pack_piece(
                local,
                (my_rows.start, my_cols.start),
                &overlap(&my_rows, &rows),
                &overlap(&my_cols, &cols),
            )
        })
        .collect();
    let own = std::mem::take(&mut sends[me]);
    let send_sizes: Vec<u64> = sends.iter().map(|s| s.len() as u64).collect();
    let mut sizes = Traffic::default();
    let mut recv_sizes = wire::all_to_all_u64(comm, &send_sizes, &mut sizes);
    recv_sizes[me] = 0;
    let mut traffic = Traffic::default();
    let mut received = wire::exchange(comm, &sends, &recv_sizes, chunk, TAG_CONVERT, &mut traffic);
    drop(sends);
    received[me] = own;

    let (new_rows, new_cols) = to.block(me);
    let block = (|| {
        let mut pieces = Vec::new();
        for (s, bytes) in received.iter().enumerate() {
            if bytes.is_empty() {
                continue;
            }
            let (rows, cols) = from.block(s);
            let (rows, cols) = (overlap(&rows, &new_rows), overlap(&cols, &new_cols));
            let block = csr_from_bytes::<T>(
                bytes,
                (rows.end - rows.start, cols.end - cols.start),
                (rank, s as i32),
            )?;
            pieces.push(Piece {
                rows,
                first_col: cols.start,
                block,
            });
        }
        assemble(pieces, new_rows.clone(), new_cols.clone(), rank)
    })();
    let block = agree(comm, block)?;
    let nnz_per_rank = all_gather_u64(comm, &[block.nnz()], &mut sizes);
    let report = CommReport::finish(comm, sizes, Traffic::default(), traffic, (0, 0));
    Ok((block, nnz_per_rank, report))
}

/// Checks (collectively) that `partition` has one part per rank, covers `nrows` rows and is
/// the same on every rank; [`RowPartition::even`] when `None` (on every rank).
fn agreed_partition<C: Communicator>(
    comm: &C,
    partition: Option<&RowPartition>,
    nrows: u64,
) -> Result<RowPartition> {
    let (rank, size) = (comm.rank(), comm.size() as usize);
    let given = i32::from(partition.is_some());
    let mut all_given = [0i32; 2];
    comm.all_reduce_into(
        &[given, -given][..],
        &mut all_given[..],
        SystemOperation::max(),
    );
    let local = if all_given[0] != -all_given[1] {
        Err(Error::InvalidArgument {
            rank,
            reason: "a row partition given on some ranks and not on others".to_string(),
        })
    } else {
        match partition {
            Some(p) if p.ranks() != size || p.nrows() != nrows => Err(Error::Partition {
                rank,
                reason: format!(
                    "{} rows over {} ranks given for a matrix of {nrows} rows on {size} ranks",
                    p.nrows(),
                    p.ranks()
                ),
            }),
            Some(p) => Ok(p.clone()),
            None => Ok(RowPartition::even(nrows, size)),
        }
    };
    let p = agree(comm, local)?;
    // The same offsets everywhere: their maxima and minima agree.
    let mine: Vec<i64> = p
        .offsets()
        .iter()
        .flat_map(|&o| [o as i64, -(o as i64)])
        .collect();
    let mut max = vec![0i64; mine.len()];
    comm.all_reduce_into(&mine[..], &mut max[..], SystemOperation::max());
    let same = if max.chunks_exact(2).all(|m| m[0] == -m[1]) {
        Ok(p)
    } else {
        Err(Error::Partition {
            rank,
            reason: "ranks disagree on the row partition".to_string(),
        })
    };
    agree(comm, same)
}

/// Conversions from one layout: each type's `to_rows`, `to_2d` and `to_3d` are these.
fn to_rows<T: MpiScalar, C: Communicator>(
    comm: &C,
    from: &Tiling,
    local: &Csr<T>,
    partition: Option<&RowPartition>,
    options: &DistOptions,
) -> Result<(DistCsr<T>, CommReport)> {
    let (nrows, ncols) = from.shape();
    let partition = agreed_partition(comm, partition, nrows)?;
    let to = Tiling::rows(partition.clone(), ncols);
    let (block, nnz, report) = redistribute(comm, from, local, &to, options)?;
    Ok((DistCsr::from_parts(partition, ncols, nnz, block), report))
}

fn to_2d<T: MpiScalar, C: Communicator>(
    comm: &C,
    from: &Tiling,
    local: &Csr<T>,
    grid: Grid,
    options: &DistOptions,
) -> Result<(Dist2dCsr<T>, CommReport)> {
    grid.check(comm)?;
    let (nrows, ncols) = from.shape();
    let (rows, cols) = (
        RowPartition::even(nrows, grid.rows),
        RowPartition::even(ncols, grid.cols),
    );
    let to = Tiling::grid(grid, rows.clone(), cols.clone());
    let (block, nnz, report) = redistribute(comm, from, local, &to, options)?;
    Ok((Dist2dCsr::from_parts(grid, rows, cols, nnz, block), report))
}

fn to_3d<T: MpiScalar, C: Communicator>(
    comm: &C,
    from: &Tiling,
    local: &Csr<T>,
    grid: Grid3,
    layout: Layout3,
    options: &DistOptions,
) -> Result<(Dist3dCsr<T>, CommReport)> {
    grid.check(comm)?;
    let shape = from.shape();
    let to = Tiling::grid3(grid, layout, shape);
    let (block, nnz, report) = redistribute(comm, from, local, &to, options)?;
    Ok((
        Dist3dCsr::from_parts(grid, layout, shape, nnz, block),
        report,
    ))
}

impl<T: MpiScalar> DistCsr<T> {
    fn tiling(&self) -> Tiling {
        Tiling::rows(self.partition().clone(), self.shape().1)
    }

    /// The transpose `Aᵀ` (not conjugated), in blocks of rows: `partition`, the same on every
    /// rank, or [`RowPartition::even`] when `None` on every rank. Each rank transposes its
    /// block of rows, which makes it a block of columns of `Aᵀ`, and the blocks are converted
    /// to rows like any other layout: every entry travels once.
    ///
    /// Collective. Errors (on every rank): a matrix made for another communicator, a partition
    /// that does not fit `Aᵀ` or the communicator or that differs between ranks, a rank that
    /// cannot hold its transposed block, a malformed message.
    ///
    /// ```no_run
    /// use hetsparse_mpi::{mpi::traits::*, DistCsr, DistOptions};
    /// let universe = hetsparse_mpi::mpi::initialize().expect("MPI");
    /// let world = universe.world();
    /// let options = DistOptions::default();
    /// let (a, _) = DistCsr::<f64>::read_matrix_market(&world, "A.mtx", &options)?;
    /// let (at, _report) = a.transpose(&world, None, &options)?;
    /// assert_eq!(at.shape(), (a.shape().1, a.shape().0));
    /// # Ok::<(), hetsparse_mpi::Error>(())
    /// ```
    pub fn transpose<C: Communicator>(
        &self,
        comm: &C,
        partition: Option<&RowPartition>,
        options: &DistOptions,
    ) -> Result<(DistCsr<T>, CommReport)> {
        let span = comm_span("mpi_transpose", comm);
        let _enter = span.enter();
        let rank = comm.rank();
        agree(comm, self.check_comm(comm))?;
        let block = self.local().transpose().map_err(|e| Error::Compute {
            rank,
            message: format!("transposing its block of rows: {e}"),
        });
        let block = agree(comm, block)?;
        // Aᵀ's rows are A's columns, all of them in every rank's block; its columns are A's
        // rows, cut as A's rows are.
        let ncols = self.shape().1;
        let from = Tiling {
            rows: RowPartition::from_counts(&[ncols]),
            cols: self.partition().clone(),
            parts: (0..self.partition().ranks()).map(|r| (0, r)).collect(),
        };
        to_rows(comm, &from, &block, partition, options)
    }

    /// The matrix in other blocks of rows: `partition`, the same on every rank, or
    /// [`RowPartition::even`] when `None` on every rank.
    ///
    /// Collective. Errors (on every rank): a partition that does not fit the matrix or the
    /// communicator, or that differs between ranks; a malformed message.
    pub fn to_rows<C: Communicator>(
        &self,
        comm: &C,
        partition: Option<&RowPartition>,
        options: &DistOptions,
    ) -> Result<(DistCsr<T>, CommReport)> {
        let span = comm_span("mpi_redistribute", comm);
        let _enter = span.enter();
        to_rows(comm, &self.tiling(), self.local(), partition, options)
    }

    /// The matrix in even 2D blocks on `grid` (as [`Dist2dCsr::scatter`] makes them), for
    /// [`spgemm_summa`](crate::spgemm_summa): every rank sends each rank of the grid the part
    /// of its rows in that rank's block.
    ///
    /// Collective. Errors (on every rank): a grid that does not fit the communicator or
    /// differs between ranks, a malformed message.
    pub fn to_2d<C: Communicator>(
        &self,
        comm: &C,
        grid: Grid,
        options: &DistOptions,
    ) -> Result<(Dist2dCsr<T>, CommReport)> {
        let span = comm_span("mpi_redistribute", comm);
        let _enter = span.enter();
        to_2d(comm, &self.tiling(), self.local(), grid, options)
    }

    /// The matrix in `layout` on `grid` (as [`Dist3dCsr::scatter`] makes it), for
    /// [`spgemm_summa3d`](crate::spgemm_summa3d): A in [`Layout3::ColumnLayers`], B in
    /// [`Layout3::RowLayers`].
    ///
    /// Collective. Errors (on every rank): a grid that does not fit the communicator or
    /// differs between ranks, a malformed message.
    pub fn to_3d<C: Communicator>(
        &self,
        comm: &C,
        grid: Grid3,
        layout: Layout3,
        options: &DistOptions,
    ) -> Result<(Dist3dCsr<T>, CommReport)> {
        let span = comm_span("mpi_redistribute", comm);
        let _enter = span.enter();
        to_3d(comm, &self.tiling(), self.local(), grid, layout, options)
    }
}

impl<T: MpiScalar> Dist2dCsr<T> {
    fn tiling(&self) -> Tiling {
        Tiling::grid(
            self.grid(),
            self.row_partition().clone(),
            self.col_partition().clone(),
        )
    }

    /// The matrix in blocks of rows (global column indices): `partition`, the same on every
    /// rank, or [`RowPartition::even`] when `None` on every rank. A product of
    /// [`spgemm_summa`](crate::spgemm_summa) goes back to rows this way, to be written by
    /// [`DistCsr::write_matrix_market`].
    ///
    /// Collective. Errors (on every rank): a grid that does not fit the communicator, a
    /// partition that does not fit the matrix or the communicator or differs between ranks,
    /// a malformed message.
    pub fn to_rows<C: Communicator>(
        &self,
        comm: &C,
        partition: Option<&RowPartition>,
        options: &DistOptions,
    ) -> Result<(DistCsr<T>, CommReport)> {
        let span = comm_span("mpi_redistribute", comm);
        let _enter = span.enter();
        self.grid().check(comm)?;
        to_rows(comm, &self.tiling(), self.local(), partition, options)
    }

    /// The matrix in even 2D blocks on another `grid` (of the same number of ranks).
    ///
    /// Collective. Errors (on every rank): a grid that does not fit the communicator or
    /// differs between ranks, a malformed message.
    pub fn to_2d<C: Communicator>(
        &self,
        comm: &C,
        grid: Grid,
        options: &DistOptions,
    ) -> Result<(Dist2dCsr<T>, CommReport)> {
        let span = comm_span("mpi_redistribute", comm);
        let _enter = span.enter();
        self.grid().check(comm)?;
        to_2d(comm, &self.tiling(), self.local(), grid, options)
    }

    /// The matrix in `layout` on `grid`.
    ///
    /// Collective. Errors (on every rank): a grid that does not fit the communicator or
    /// differs between ranks, a malformed message.
    pub fn to_3d<C: Communicator>(
        &self,
        comm: &C,
        grid: Grid3,
        layout: Layout3,
        options: &DistOptions,
    ) -> Result<(Dist3dCsr<T>, CommReport)> {
        let span = comm_span("mpi_redistribute", comm);
        let _enter = span.enter();
        self.grid().check(comm)?;
        to_3d(comm, &self.tiling(), self.local(), grid, layout, options)
    }
}

impl<T: MpiScalar> Dist3dCsr<T> {
    fn tiling(&self) -> Tiling {
        let (rows, cols) = self.partitions();
        let grid = self.grid();
        let parts = (0..grid.size().unwrap_or(0))
            .map(|r| parts_of(grid, self.layout(), r))
            .collect();
        Tiling {
            rows: rows.clone(),
            cols: cols.clone(),
            parts,
        }
    }

    /// The matrix in blocks of rows (global column indices): `partition`, the same on every
    /// rank, or [`RowPartition::even`] when `None` on every rank. A product of
    /// [`spgemm_summa3d`](crate::spgemm_summa3d) goes back to rows this way, to be written by
    /// [`DistCsr::write_matrix_market`].
    ///
    /// Collective. Errors (on every rank): a grid that does not fit the communicator, a
    /// partition that does not fit the matrix or the communicator or differs between ranks,
    /// a malformed message.
    pub fn to_rows<C: Communicator>(
        &self,
        comm: &C,
        partition: Option<&RowPartition>,
        options: &DistOptions,
    ) -> Result<(DistCsr<T>, CommReport)> {
        let span = comm_span("mpi_redistribute", comm);
        let _enter = span.enter();
        self.grid().check(comm)?;
        to_rows(comm, &self.tiling(), self.local(), partition, options)
    }

    /// The matrix in even 2D blocks on `grid`.
    ///
    /// Collective. Errors (on every rank): a grid that does not fit the communicator or
    /// differs between ranks, a malformed message.
    pub fn to_2d<C: Communicator>(
        &self,
        comm: &C,
        grid: Grid,
        options: &DistOptions,
    ) -> Result<(Dist2dCsr<T>, CommReport)> {
        let span = comm_span("mpi_redistribute", comm);
        let _enter = span.enter();
        self.grid().check(comm)?;
        to_2d(comm, &self.tiling(), self.local(), grid, options)
    }

    /// The matrix in `layout` on `grid` (another layout of the same grid, to use a product in
    /// [`Layout3::Output`] as the operand of another product, or another grid).
    ///
    /// Collective. Errors (on every rank): a grid that does not fit the communicator or
    /// differs between ranks, a malformed message.
    pub fn to_3d<C: Communicator>(
        &self,
        comm: &C,
        grid: Grid3,
        layout: Layout3,
        options: &DistOptions,
    ) -> Result<(Dist3dCsr<T>, CommReport)> {
        let span = comm_span("mpi_redistribute", comm);
        let _enter = span.enter();
        self.grid().check(comm)?;
        to_3d(comm, &self.tiling(), self.local(), grid, layout, options)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_cut_and_put_back_together() {
        // A 3×6 block whose first row is global row 10 and first column global column 4.
        let block = Csr::try_new(
            3,
            6,
            vec![0, 3, 3, 6],
            vec![0, 2, 5, 1, 3, 4],
            vec![1.0f64, 2., 3., 4., 5., 6.],
        )
        .unwrap();
        let at = (10, 4);
        // Rows 10..13, columns 4..7 and 7..10: the left and right halves.
        let left = pack_piece(&block, at, &(10..13), &(4..7));
        let right = pack_piece(&block, at, &(10..13), &(7..10));
        assert_eq!(left.len() as u64, wire::rows_bytes::<f64>(3, 3));
        assert_eq!(right.len() as u64, wire::rows_bytes::<f64>(3, 3));
        assert!(pack_piece(&block, at, &(11..12), &(4..10)).is_empty());
        assert!(pack_piece(&block, at, &(10..13), &(7..7)).is_empty());
        let piece = |bytes: &[u8], first_col| Piece {
            rows: 10..13,
            first_col,
            block: csr_from_bytes::<f64>(bytes, (3, 3), (0, 0)).unwrap(),
        };
        // Given in the wrong order: sorted by column before they are joined.
        let back = assemble(vec![piece(&right, 7), piece(&left, 4)], 10..13, 4..10, 0).unwrap();
        assert_eq!(back, block);
        // Only the last row of a piece that starts two rows earlier.
        let tail = assemble(vec![piece(&right, 7)], 12..13, 7..10, 0).unwrap();
        assert_eq!(tail.col_indices(), &[0, 1]);
        assert_eq!(tail.values(), &[5.0, 6.0]);
        assert_eq!(overlap(&(3..5), &(6..9)), 6..6);
        assert_eq!(overlap(&(3..8), &(6..9)), 6..8);
    }
}
