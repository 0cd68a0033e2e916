//! `C = A·B` with 1D row fetch: every rank fetches the rows of B its rows of A touch.

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};

use hetsparse::format::HostArray;
use hetsparse::{Context, Csr, DeviceChoice, SplicedCsr};
use mpi::traits::*;
use rayon::prelude::*;

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

    // Where A's local rows reach in B: the least and greatest column, and the distinct columns
    // outside this rank's own rows of B (the rows to fetch), split by owner (owners' ranges
    // ascend). Alone, the rank holds all of B, and A's block multiplies it as it is.
    let b_part = b.partition();
    let reach = (size > 1).then(|| {
        let _stage = tracing::debug_span!("reach", entries = a.local().nnz()).entered();
        Reach::new(a.local(), b_part.rows(me), b.shape().0)
    });
    let wanted: Vec<Vec<u32>> = (0..size)
        .map(|r| match &reach {
            Some(reach) if r != me => reach.halo.ids_in(b_part.rows(r)),
            _ => Vec::new(),
        })
        .collect();

    // Counts, then the ids themselves.
    let mut sizes = Traffic::default();
    let counts: Vec<u64> = wanted.iter().map(|w| w.len() as u64).collect();
    let asked = wire::all_to_all_u64(comm, &counts, &mut sizes);
    let requests: Vec<Vec<u8>> = wanted.iter().map(|w| wire::u32s_to_bytes(w)).collect();
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
        let _stage = tracing::debug_span!("pack_replies").entered();
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

    // The local A and B, then the local product.
    let mut fetched = (0u64, 0u64);
    let local = (|| {
        let local = Local {
            rank,
            me,
            a: a.local(),
            b,
            reach: reach.as_ref(),
            wanted: &wanted,
            rows: &rows,
        };
        let operands = {
            let _stage = tracing::debug_span!("local_operands").entered();
            local.operands(&mut fetched)?
        };
        let _product = tracing::info_span!(
            "local_spgemm",
            rows = a.local().nrows(),
            fetched_rows = reach.as_ref().map(|r| r.halo.count())
        )
        .entered();
        let product = match &operands {
            LocalOperands::Copied(local_a, local_b) => ctx.spgemm(local_a, local_b),
            LocalOperands::Halo { rows, first } => {
                let own = (b.local(), b_part.rows(me).start as usize);
                // Valid by construction (the halo's rows are B's, empty under the own block),
                // so an error here is this crate's.
                SplicedCsr::new(
                    b.shape().0 as usize,
                    b.shape().1 as usize,
                    (rows, *first),
                    own,
                )
                .and_then(|b| ctx.spgemm_spliced(a.local(), &b))
            }
        };
        product.map_err(|e| Error::Compute {
            rank,
            message: e.to_string(),
        })
    })();
    let local = agree(comm, local)?;
    let nnz_per_rank = all_gather_u64(comm, &[local.nnz()], &mut sizes);
    span.record("fetched_rows", fetched.0);
    let report = CommReport::finish(comm, sizes, request_traffic, rows_traffic, fetched);
    let c = DistCsr::from_parts(a.partition().clone(), b.shape().1, nnz_per_rank, local);
    Ok((c, report))
}

/// The operands of a rank's local product.
enum LocalOperands<T> {
    /// A and B as one matrix each, multiplied as they are.
    Copied(Csr<T>, Csr<T>),
    /// The rank's block of A as it is, times B spliced from the rank's own block of B's rows
    /// and `rows`: B's rows from row `first` on that A reaches, the fetched ones in their
    /// places and the rest (the own block's among them) empty.
    Halo { rows: Csr<T>, first: usize },
}

/// What one rank has for its local product: its block of A, B, the rows of B the block needs,
/// those it asked other ranks for and the messages that brought them.
struct Local<'a, T> {
    rank: i32,
    me: usize,
    a: &'a Csr<T>,
    b: &'a DistCsr<T>,
    /// Where A's block reaches in B: `None` where it was not needed (one rank).
    reach: Option<&'a Reach>,
    wanted: &'a [Vec<u32>],
    rows: &'a [Vec<u8>],
}

impl<T: MpiScalar> Local<'_, T> {
    /// The local A and B of the product: `C_local = A_local · B_local` is this rank's rows of C.
    ///
    /// - Where this rank owns every row of B and fetched none (one rank), A's and B's local
    ///   blocks themselves, shared, not copied.
    /// - Where the rows needed lie in a window of B's rows not much longer than A's local entries
    ///   (stencils, AMG transfer operators: the rank's own rows and a halo), A's block as it
    ///   is, times B spliced from this rank's own block of B (not copied: a third of the
    ///   rank's time on a Galerkin product went into copying it) and the window's fetched
    ///   rows, each in its place ([`LocalOperands::Halo`]).
    /// - Otherwise (a hypersparse block of a huge B) the local B holds the needed rows only,
    ///   in global order, and A's columns are renumbered into them.
    ///
    /// Nothing is checked again that is valid by construction: own rows come from a valid
    /// CSR, the fetched ones were checked when unpacked, and offsets and column indices are
    /// built here from those.
    fn operands(&self, fetched: &mut (u64, u64)) -> Result<LocalOperands<T>> {
        let a = self.a;
        let b_rows = self.b.shape().0;
        let mine = self.b.partition().rows(self.me);
        let nothing_fetched = self.wanted.iter().all(Vec::is_empty);
        if nothing_fetched && mine.start == 0 && mine.end == b_rows {
            return Ok(LocalOperands::Copied(a.clone(), self.b.local().clone()));
        }
        let (first, last) = match self.reach {
            Some(reach) => (reach.first, reach.last),
            None => {
                let reach = Reach::new(a, mine.clone(), b_rows);
                (reach.first, reach.last)
            }
        };
        let entries = a.nnz();
        let window = first
            .zip(last)
            .map(|(f, l)| (u64::from(f), u64::from(l) + 1));
        match window {
            Some((lo, hi)) if hi - lo <= 2 * entries + 1024 => Ok(LocalOperands::Halo {
                rows: self.halo(lo..hi, fetched)?,
                first: lo as usize,
            }),
            _ => {
                let columns = ColumnSet::new(&[a.col_indices()], b_rows);
                let local_b = self.compacted(&columns, fetched)?;
                let renumbered = columns.renumber(a.col_indices());
                Ok(LocalOperands::Copied(
                    self.with_columns(renumbered.into(), local_b.nrows()),
                    local_b,
                ))
            }
        }
    }

    /// A's local block with `cols` for column indices and `ncols` columns, sharing its row
    /// offsets and values.
    ///
    /// `cols` must be A's column indices under a map that keeps each row's order strictly
    /// increasing and sends every one below `ncols`: shifted down by at most the least of
    /// them, or renumbered among the distinct ones, as [`Local::operands`] does.
    fn with_columns(&self, cols: HostArray<u32>, ncols: usize) -> Csr<T> {
        let (offsets, _, values) = self.a.arrays();
        // SAFETY: the row offsets and values are those of A's valid local block, and the
        // column indices are A's under a map that keeps each row's order strictly increasing
        // and below `ncols` (this function's contract, which its callers in this module keep;
        // with no entries, any `ncols` holds).
        unsafe {
            Csr::from_arrays_unchecked(self.a.nrows(), ncols, offsets.clone(), cols, values.clone())
        }
    }

    /// Rows `rows` of B with only the fetched ones in their places: the rest, this rank's
    /// own among them, empty.
    fn halo(&self, rows: Range<u64>, fetched: &mut (u64, u64)) -> Result<Csr<T>> {
        let (b, me, rank) = (self.b, self.me, self.rank);
        let (base, hi) = (rows.start, rows.end);
        let b_cols = b.shape().1;
        let part = b.partition();
        // Every entry's room at once: what the messages announce (checked exactly when
        // unpacked).
        let per_entry = 4 + T::BYTES;
        let incoming: usize = (0..self.rows.len())
            .filter(|&r| r != me)
            .map(|r| (self.rows[r].len().saturating_sub(8 * self.wanted[r].len())) / per_entry)
            .sum();
        let capacity = incoming;
        let mut offsets = Vec::with_capacity((hi - base) as usize + 1);
        offsets.push(0u64);
        let mut cols: Vec<u32> = Vec::with_capacity(capacity);
        let mut values: Vec<T> = Vec::with_capacity(capacity);
        for r in 0..part.ranks() {
            let range = part.rows(r);
            let range = range.start.max(base)..range.end.min(hi);
            if range.start >= range.end {
                continue;
            }
            if r == me {
                offsets.resize(
                    offsets.len() + (range.end - range.start) as usize,
                    cols.len() as u64,
                );
                continue;
            }
            // The fetched rows' ends, then each in its place among rank r's rows.
            let start = cols.len() as u64;
            let wanted = &self.wanted[r];
            let mut ends = Vec::with_capacity(wanted.len() + 1);
            ends.push(start);
            let out = RowsOut {
                offsets: &mut ends,
                cols: &mut cols,
                values: &mut values,
            };
            wire::unpack_rows(&self.rows[r], wanted.len(), b_cols, out, (rank, r as i32))?;
            fetched.0 += wanted.len() as u64;
            fetched.1 += cols.len() as u64 - start;
            let mut next_row = range.start;
            let mut end = start;
            for (&id, &e) in wanted.iter().zip(&ends[1..]) {
                let id = u64::from(id);
                offsets.resize(offsets.len() + (id - next_row) as usize, end);
                offsets.push(e);
                (next_row, end) = (id + 1, e);
            }
            offsets.resize(offsets.len() + (range.end - next_row) as usize, end);
        }
        debug_assert_eq!(offsets.len() as u64, hi - base + 1);
        // SAFETY: the offsets start at 0 and never decrease, one for each row of the window
        // and the last `cols.len()`; the fetched rows were checked by `unpack_rows` (columns below B's, strictly
        // increasing in each row); there is a value for every column index.
        Ok(unsafe {
            Csr::from_parts_unchecked((hi - base) as usize, b_cols as usize, offsets, cols, values)
        })
    }

    /// The needed rows of B alone, in global order.
    fn compacted(&self, columns: &ColumnSet, fetched: &mut (u64, u64)) -> Result<Csr<T>> {
        let (b, me, rank) = (self.b, self.me, self.rank);
        let b_cols = b.shape().1;
        let part = b.partition();
        let own = b.local();
        let mine = part.rows(me);
        let count = columns.count() as usize;
        let mut offsets = Vec::with_capacity(count + 1);
        offsets.push(0u64);
        let (mut cols, mut values) = (Vec::new(), Vec::new());
        for r in 0..part.ranks() {
            if r == me {
                for id in columns.ids_in(mine.clone()) {
                    let (c, v) = own.row((u64::from(id) - mine.start) as usize);
                    cols.extend_from_slice(c);
                    values.extend_from_slice(v);
                    offsets.push(cols.len() as u64);
                }
            } else {
                let before = cols.len() as u64;
                let wanted = &self.wanted[r];
                let out = RowsOut {
                    offsets: &mut offsets,
                    cols: &mut cols,
                    values: &mut values,
                };
                wire::unpack_rows(&self.rows[r], wanted.len(), b_cols, out, (rank, r as i32))?;
                fetched.0 += wanted.len() as u64;
                fetched.1 += cols.len() as u64 - before;
            }
        }
        debug_assert_eq!(offsets.len(), count + 1);
        // SAFETY: one row for each needed row of B, offsets from 0 without decreasing to
        // `cols.len()`; own rows copied from a valid CSR, fetched ones checked by
        // `unpack_rows`; a value for every column index.
        Ok(unsafe { Csr::from_parts_unchecked(count, b_cols as usize, offsets, cols, values) })
    }
}

/// Entries of A read by one task while building a [`ColumnSet`].
const COLUMN_PIECE: usize = 1 << 15;

/// Rows of A looked at by one task while finding its [`Reach`].
const REACH_ROWS: usize = 1 << 12;

/// Where a block of A reaches in B: its least and greatest column index, and the set of its
/// column indices outside the rows of B this rank owns (the rows it fetches).
struct Reach {
    first: Option<u32>,
    last: Option<u32>,
    halo: ColumnSet,
}

impl Reach {
    /// The reach of `a` (a block of A) in B of `nrows_b` rows, of which this rank owns `own`.
    ///
    /// A's rows are sorted, so a row's columns outside `own` are a prefix and a suffix of it,
    /// found by binary search; a row that starts and ends inside `own` (most rows of a
    /// stencil's or an AMG operator's block) costs two reads, not one per entry. Rows in
    /// pieces, in parallel (on the current rayon pool).
    fn new<T: MpiScalar>(a: &Csr<T>, own: Range<u64>, nrows_b: u64) -> Self {
        let (offsets, cols) = (a.row_offsets(), a.col_indices());
        let pieces: Vec<(u32, u32, Vec<u32>)> = (0..a.nrows().div_ceil(REACH_ROWS))
            .into_par_iter()
            .map(|piece| {
                let rows = piece * REACH_ROWS..((piece + 1) * REACH_ROWS).min(a.nrows());
                let (mut first, mut last) = (u32::MAX, 0u32);
                let mut halo = Vec::new();
                for i in rows {
                    let row = &cols[offsets[i] as usize..offsets[i + 1] as usize];
                    let (Some(&lo), Some(&hi)) = (row.first(), row.last()) else {
                        continue;
                    };
                    (first, last) = (first.min(lo), last.max(hi));
                    if own.contains(&u64::from(lo)) && own.contains(&u64::from(hi)) {
                        continue;
                    }
                    let below = row.partition_point(|&c| u64::from(c) < own.start);
                    let above = below + row[below..].partition_point(|&c| u64::from(c) < own.end);
                    halo.extend_from_slice(&row[..below]);
                    halo.extend_from_slice(&row[above..]);
                }
                (first, last, halo)
            })
            .collect();
        let first = pieces.iter().map(|p| p.0).min().filter(|&f| f != u32::MAX);
        let last = first.and(pieces.iter().map(|p| p.1).max());
        let halo: Vec<&[u32]> = pieces.iter().map(|p| p.2.as_slice()).collect();
        Reach {
            first,
            last,
            halo: ColumnSet::new(&halo, nrows_b),
        }
    }
}

/// The distinct column indices of a block of A, and each one's place among them.
///
/// A bit set over B's rows with a count of the set bits before each 64-bit word, which finds a
/// column's place in O(1), when B's rows are not many more than 64 times the block's entries;
/// otherwise (a hypersparse block of a huge matrix) the sorted distinct indices, searched.
/// Built and renumbered in parallel (on the current rayon pool).
enum ColumnSet {
    Bits { bits: Vec<u64>, before: Vec<u64> },
    Sorted(Vec<u32>),
}

impl ColumnSet {
    /// The set of the indices in `pieces`, each below `nrows_b`.
    fn new(pieces: &[&[u32]], nrows_b: u64) -> Self {
        let words = nrows_b.div_ceil(64);
        let len: usize = pieces.iter().map(|p| p.len()).sum();
        if words > len as u64 + 1024 {
            let mut sorted = pieces.concat();
            sorted.par_sort_unstable();
            sorted.dedup();
            return ColumnSet::Sorted(sorted);
        }
        let shared: Vec<AtomicU64> = (0..words).map(|_| AtomicU64::new(0)).collect();
        let set = |word: usize, mask: u64| {
            let w = &shared[word];
            if w.load(Ordering::Relaxed) & mask != mask {
                w.fetch_or(mask, Ordering::Relaxed);
            }
        };
        pieces
            .par_iter()
            .flat_map(|p| p.par_chunks(COLUMN_PIECE))
            .for_each(|piece| {
                // Neighbouring entries tend to share a word: one write per run of them.
                let (mut word, mut mask) = (usize::MAX, 0u64);
                for &c in piece {
                    let w = (c / 64) as usize;
                    if w != word {
                        if mask != 0 {
                            set(word, mask);
                        }
                        (word, mask) = (w, 0);
                    }
                    mask |= 1u64 << (c % 64);
                }
                if mask != 0 {
                    set(word, mask);
                }
            });
        let bits: Vec<u64> = shared.into_iter().map(AtomicU64::into_inner).collect();
        let mut before = Vec::with_capacity(bits.len());
        let mut k = 0u64;
        for w in &bits {
            before.push(k);
            k += u64::from(w.count_ones());
        }
        ColumnSet::Bits { bits, before }
    }

    /// How many distinct indices.
    fn count(&self) -> u64 {
        match self {
            ColumnSet::Sorted(sorted) => sorted.len() as u64,
            ColumnSet::Bits { bits, before } => {
                before.last().copied().unwrap_or(0)
                    + bits.last().map_or(0, |w| u64::from(w.count_ones()))
            }
        }
    }

    /// The distinct indices in `range`, ascending.
    fn ids_in(&self, range: Range<u64>) -> Vec<u32> {
        match self {
            ColumnSet::Sorted(sorted) => {
                let from = sorted.partition_point(|&c| u64::from(c) < range.start);
                let to = sorted.partition_point(|&c| u64::from(c) < range.end);
                sorted[from..to.max(from)].to_vec()
            }
            ColumnSet::Bits { bits, before } => {
                let end = range.end.min(bits.len() as u64 * 64);
                if range.start >= end {
                    return Vec::new();
                }
                let (w0, w1) = ((range.start / 64) as usize, end.div_ceil(64) as usize);
                let upto = |w: usize| before[w] + u64::from(bits[w].count_ones());
                let mut out = Vec::with_capacity((upto(w1 - 1) - before[w0]) as usize);
                for (w, &word) in bits.iter().enumerate().take(w1).skip(w0) {
                    let at = w as u64 * 64;
                    let mut word = word;
                    if at < range.start {
                        word &= !0u64 << (range.start - at);
                    }
                    if end - at < 64 {
                        word &= (1u64 << (end - at)) - 1;
                    }
                    while word != 0 {
                        out.push((at + u64::from(word.trailing_zeros())) as u32);
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
                .par_iter()
                .map(|c| sorted.partition_point(|x| x < c) as u32)
                .collect(),
            ColumnSet::Bits { bits, before } => cols
                .par_iter()
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
        // The same indices in one piece and in three.
        let pieces: [&[u32]; 3] = [&cols[..2], &[], &cols[2..]];
        let bits = ColumnSet::new(&[&cols], 300);
        let bits_in_pieces = ColumnSet::new(&pieces, 300);
        let sorted = ColumnSet::new(&pieces, 1 << 20);
        assert!(matches!(bits, ColumnSet::Bits { .. }));
        assert!(matches!(bits_in_pieces, ColumnSet::Bits { .. }));
        assert!(matches!(sorted, ColumnSet::Sorted(_)));
        for set in [bits, bits_in_pieces, sorted] {
            assert_eq!(set.ids_in(0..u64::MAX), vec![0, 3, 7, 63, 64, 129, 200]);
            assert_eq!(set.ids_in(3..129), vec![3, 7, 63, 64]);
            assert_eq!(set.ids_in(64..65), vec![64]);
            assert_eq!(set.ids_in(130..200), Vec::<u32>::new());
            assert_eq!(set.ids_in(8..8), Vec::<u32>::new());
            assert_eq!(set.count(), 7);
            assert_eq!(set.renumber(&cols), vec![2, 1, 6, 1, 4, 3, 0, 6, 5]);
        }
        let empty = ColumnSet::new(&[], 300);
        assert_eq!(empty.count(), 0);
        assert_eq!(empty.ids_in(0..300), Vec::<u32>::new());
    }

    /// The reach of a block against a brute-force scan of its entries: rows inside the own
    /// range, rows reaching out below, above and on both sides, empty rows, and more rows than
    /// one piece.
    #[test]
    fn reach_is_every_column_outside_the_own_rows() {
        let ncols = 1000u32;
        let nrows = 3 * REACH_ROWS + 5;
        let (mut offsets, mut cols) = (vec![0u64], Vec::new());
        for i in 0..nrows as u32 {
            // Every eleventh row empty.
            if i % 11 != 0 {
                let centre = (i * 7) % ncols;
                for d in [0u32, 1, 5, 40, 300] {
                    cols.push((centre + d) % ncols);
                    cols.push((centre + ncols - d) % ncols);
                }
            }
            offsets.push(cols.len() as u64);
        }
        let values = vec![1.0f64; cols.len()];
        let a = Csr::try_from_unsorted(nrows, ncols as usize, offsets, cols, values).unwrap();
        for own in [400..600u64, 0..1000, 0..0, 999..1000, 0..10] {
            let reach = Reach::new(&a, own.clone(), u64::from(ncols));
            let all = a.col_indices();
            assert_eq!(reach.first, all.iter().copied().min(), "{own:?}");
            assert_eq!(reach.last, all.iter().copied().max(), "{own:?}");
            let mut outside: Vec<u32> = all
                .iter()
                .copied()
                .filter(|&c| !own.contains(&u64::from(c)))
                .collect();
            outside.sort_unstable();
            outside.dedup();
            assert_eq!(reach.halo.ids_in(0..u64::MAX), outside, "{own:?}");
        }
        let empty = Csr::<f64>::zeros(4, 10).unwrap();
        let reach = Reach::new(&empty, 2..5, 10);
        assert_eq!(
            (reach.first, reach.last, reach.halo.count()),
            (None, None, 0)
        );
    }
}
