//! Matrix Market files read and written collectively: every rank reads its own byte range of
//! the entries and writes its own rows at its own offset.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;

use hetsparse::matrix_market::{self, Field, Format, Symmetry};
use hetsparse::{Csr, Scalar};
use mpi::collective::SystemOperation;
use mpi::traits::*;

use crate::error::{agree, Error, Result};
use crate::matrix::{all_gather_u64, comm_span, DistCsr, DistOptions};
use crate::partition::RowPartition;
use crate::report::{CommReport, Traffic};
use crate::wire::{self, MpiScalar};

/// Tag of the messages that carry entries to the ranks owning their rows.
const TAG_ENTRIES: i32 = 41;

/// Longest line accepted before the entries (banner, comments, size line), in bytes.
const MAX_HEADER_LINE: usize = 1 << 20;

/// Bytes read at a time past a rank's range, looking for the end of its last line.
const TAIL_STEP: usize = 1 << 16;

/// What rank 0 finds before the entries and broadcasts: the shape, the announced count, the
/// field and symmetry, where the entries start, the file's length and the lines before them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Prologue {
    nrows: u64,
    ncols: u64,
    entries: u64,
    field: Field,
    symmetry: Symmetry,
    data_start: u64,
    file_len: u64,
    header_lines: u64,
}

const PROLOGUE_WORDS: usize = 8;

impl Prologue {
    fn to_words(self) -> [u64; PROLOGUE_WORDS] {
        let field = match self.field {
            Field::Real => 0,
            Field::Integer => 1,
            Field::Complex => 2,
            Field::Pattern => 3,
        };
        let symmetry = match self.symmetry {
            Symmetry::General => 0,
            Symmetry::Symmetric => 1,
            Symmetry::SkewSymmetric => 2,
            Symmetry::Hermitian => 3,
        };
        [
            self.nrows,
            self.ncols,
            self.entries,
            field,
            symmetry,
            self.data_start,
            self.file_len,
            self.header_lines,
        ]
    }

    fn from_words(w: &[u64; PROLOGUE_WORDS]) -> Option<Self> {
        let field = match w[3] {
            0 => Field::Real,
            1 => Field::Integer,
            2 => Field::Complex,
            3 => Field::Pattern,
            _ => return None,
        };
        let symmetry = match w[4] {
            0 => Symmetry::General,
            1 => Symmetry::Symmetric,
            2 => Symmetry::SkewSymmetric,
            3 => Symmetry::Hermitian,
            _ => return None,
        };
        (w[5] <= w[6]).then_some(Prologue {
            nrows: w[0],
            ncols: w[1],
            entries: w[2],
            field,
            symmetry,
            data_start: w[5],
            file_len: w[6],
            header_lines: w[7],
        })
    }
}

fn io_error(rank: i32, path: &Path, what: &str, e: impl std::fmt::Display) -> Error {
    Error::Io {
        rank,
        reason: format!("{what} {}: {e}", path.display()),
    }
}

fn mm_error(rank: i32, line: Option<u64>, reason: impl Into<String>) -> Error {
    Error::MatrixMarket {
        rank,
        line,
        reason: reason.into(),
    }
}

/// What rank 0 finds at the start of a file: a plain file's prologue, or gzip's magic bytes.
enum Opening {
    Plain(Prologue),
    Gzip,
}

/// Rank 0's reading of the banner, comments and size line, checked by the single-process
/// header parser of `hetsparse::matrix_market`; or that the file is gzip-compressed.
fn read_prologue<T: Scalar>(rank: i32, path: &Path) -> Result<Opening> {
    let file = File::open(path).map_err(|e| io_error(rank, path, "cannot open", e))?;
    let file_len = file
        .metadata()
        .map_err(|e| io_error(rank, path, "cannot read the length of", e))?
        .len();
    let mut reader = BufReader::new(file);
    let mut text = Vec::new();
    let mut lines = 0u64;
    loop {
        let before = text.len();
        let read = (&mut reader)
            .take(MAX_HEADER_LINE as u64 + 1)
            .read_until(b'\n', &mut text)
            .map_err(|e| io_error(rank, path, "cannot read", e))?;
        if read == 0 {
            return Err(mm_error(
                rank,
                Some(lines + 1),
                "the file ends before its size line",
            ));
        }
        lines += 1;
        if lines == 1 && text.starts_with(&GZIP_MAGIC) {
            return Ok(Opening::Gzip);
        }
        if read > MAX_HEADER_LINE && text.last() != Some(&b'\n') {
            return Err(mm_error(
                rank,
                Some(lines),
                format!("longer than {MAX_HEADER_LINE} bytes"),
            ));
        }
        let line = text[before..].trim_ascii();
        // The banner is line 1; the first line after it that is neither blank nor a comment
        // is the size line.
        if lines > 1 && !line.is_empty() && !line.starts_with(b"%") {
            break;
        }
    }
    let header = matrix_market::read_header(&text[..]).map_err(|e| match e {
        hetsparse::MatrixMarketError::Parse { line, message } => {
            mm_error(rank, Some(line), message)
        }
        other => mm_error(rank, None, other.to_string()),
    })?;
    if header.format != Format::Coordinate {
        return Err(mm_error(
            rank,
            Some(1),
            "only `coordinate` files are read collectively (an `array` file is dense)",
        ));
    }
    if header.field == Field::Complex && !T::TYPE.is_complex() {
        return Err(mm_error(
            rank,
            Some(1),
            format!("a complex file cannot be read into {}", T::TYPE),
        ));
    }
    Ok(Opening::Plain(Prologue {
        nrows: header.nrows,
        ncols: header.ncols,
        entries: header.entries,
        field: header.field,
        symmetry: header.symmetry,
        data_start: text.len() as u64,
        file_len,
        header_lines: lines,
    }))
}

/// The first two bytes of every gzip member.
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// A gzip-compressed file, which has no byte ranges to split: rank 0 reads the whole matrix
/// with the single-process reader (which reads gzip members one after another) and scatters
/// it in even blocks of rows. Collective; called on every rank once rank 0 found the magic.
fn read_gzip<T: MpiScalar, C: Communicator>(
    comm: &C,
    path: &Path,
    options: &DistOptions,
    sizes: Traffic,
) -> Result<(DistCsr<T>, CommReport)> {
    let rank = comm.rank();
    let whole = if rank == 0 {
        matrix_market::read_csr_path::<T>(path)
            .map(Some)
            .map_err(|e| match e {
                hetsparse::MatrixMarketError::Parse { line, message } => {
                    mm_error(rank, Some(line), message)
                }
                hetsparse::MatrixMarketError::Io(e) => io_error(rank, path, "cannot read", e),
                other => mm_error(rank, None, other.to_string()),
            })
    } else {
        Ok(None)
    };
    let whole = agree(comm, whole)?;
    DistCsr::scatter_counted(comm, 0, whole.as_ref(), None, options, sizes)
}

/// Where the entries handed to `part` of `parts` start: the data's start for the first part,
/// otherwise `offset` (the part's even share of the bytes) found in `buf`, which holds the
/// file from `base`: just after the first newline at or past `offset`.
fn line_start(buf: &[u8], base: u64, offset: u64) -> u64 {
    let from = (offset - base) as usize;
    match buf
        .get(from..)
        .and_then(|b| b.iter().position(|&c| c == b'\n'))
    {
        Some(k) => base + (from + k + 1) as u64,
        None => base + buf.len() as u64,
    }
}

/// This rank's whole lines of entries: the bytes `[begin, end)` of the file, where every
/// rank's `begin` is the one before's `end`. Splitting at `data_start + len · r / P` and
/// moving each cut past the next newline gives every line to exactly one rank.
fn read_range(rank: i32, size: usize, path: &Path, p: &Prologue) -> Result<(Vec<u8>, u64, u64)> {
    let me = rank as u64;
    let len = p.file_len - p.data_start;
    let cut = |r: u64| p.data_start + (u128::from(len) * u128::from(r) / size as u128) as u64;
    let (lo, hi) = (cut(me), cut(me + 1));
    let mut file = File::open(path).map_err(|e| io_error(rank, path, "cannot open", e))?;
    let read_err = |e| io_error(rank, path, "cannot read", e);
    file.seek(SeekFrom::Start(lo)).map_err(read_err)?;
    let mut buf = vec![0u8; (hi - lo) as usize];
    file.read_exact(&mut buf).map_err(read_err)?;
    // Read on past `hi` until the line running across it ends (or the file does).
    let mut seen = buf.len();
    if me + 1 < size as u64 {
        let mut step = vec![0u8; TAIL_STEP];
        loop {
            if buf[seen.min(buf.len())..].contains(&b'\n') {
                break;
            }
            seen = buf.len();
            let n = file.read(&mut step).map_err(read_err)?;
            if n == 0 {
                break;
            }
            buf.extend_from_slice(&step[..n]);
        }
    }
    let begin = if me == 0 {
        lo
    } else {
        line_start(&buf, lo, lo)
    };
    let end = if me + 1 < size as u64 {
        line_start(&buf, lo, hi)
    } else {
        lo + buf.len() as u64
    };
    let (b, e) = ((begin.min(end) - lo) as usize, (end - lo) as usize);
    buf.truncate(e);
    buf.drain(..b);
    Ok((buf, begin.min(end), end))
}

/// A real number, Fortran `D` exponents accepted.
fn parse_real(word: &str) -> Option<f64> {
    word.parse::<f64>().ok().or_else(|| {
        word.contains(['d', 'D'])
            .then(|| word.replace(['d', 'D'], "e").parse().ok())
            .flatten()
    })
}

/// One entry line: `row column [value [imaginary]]`, 0-based indices out.
fn parse_entry<T: Scalar>(line: &str, p: &Prologue) -> std::result::Result<(u32, u32, T), String> {
    let mut words = line.split_ascii_whitespace();
    let mut index = |axis: &str, bound: u64| -> std::result::Result<u32, String> {
        let w = words
            .next()
            .ok_or_else(|| format!("expected a {axis} index, found the end of the line"))?;
        match w.parse::<u64>() {
            Ok(i) if i >= 1 && i <= bound => Ok((i - 1) as u32),
            Ok(i) => Err(format!("{axis} index {i} is out of range 1..={bound}")),
            Err(_) => Err(format!("expected a {axis} index, found `{w}`")),
        }
    };
    let row = index("row", p.nrows)?;
    let col = index("column", p.ncols)?;
    let mut number = |what: &str, integer: bool| -> std::result::Result<f64, String> {
        let w = words
            .next()
            .ok_or_else(|| format!("expected {what}, found the end of the line"))?;
        let v = if integer {
            w.parse::<i64>().ok().map(|v| v as f64)
        } else {
            parse_real(w)
        };
        v.ok_or_else(|| format!("expected {what}, found `{w}`"))
    };
    let value = match p.field {
        Field::Pattern => T::from_f64(1.0),
        Field::Real => T::from_f64(number("a real value", false)?),
        Field::Integer => T::from_f64(number("an integer value", true)?),
        Field::Complex => {
            let re = number("a real part", false)?;
            let im = number("an imaginary part", false)?;
            T::try_from_parts(re, im).ok_or_else(|| "a complex value".to_string())?
        }
    };
    if let Some(w) = words.next() {
        return Err(format!("unexpected `{w}` after the entry"));
    }
    if row != col {
        match p.symmetry {
            Symmetry::General => {}
            _ if p.nrows != p.ncols => {
                return Err("a symmetric matrix must be square".to_string());
            }
            _ => {}
        }
    } else if p.symmetry == Symmetry::SkewSymmetric {
        return Err("a diagonal entry in a skew-symmetric file".to_string());
    }
    Ok((row, col, value))
}

/// Entries of this rank's lines, each with its mirror for symmetric files, split by the rank
/// owning its row; `first_line` is the number of the range's first line. Also returns the
/// number of entry lines.
#[allow(clippy::type_complexity)]
fn parse_range<T: MpiScalar>(
    rank: i32,
    text: &[u8],
    first_line: u64,
    p: &Prologue,
    rows: &RowPartition,
) -> Result<(Vec<Vec<u8>>, u64)> {
    let mut out = vec![Vec::new(); rows.ranks()];
    let mut put = |r: u32, c: u32, v: T| {
        let owner = rows.owner(u64::from(r)).unwrap_or(0);
        let buf = &mut out[owner];
        buf.extend_from_slice(&r.to_le_bytes());
        buf.extend_from_slice(&c.to_le_bytes());
        v.put(buf);
    };
    let mut count = 0u64;
    for (k, line) in text.split(|&c| c == b'\n').enumerate() {
        let number = first_line + k as u64;
        let line = line.trim_ascii();
        if line.is_empty() || line.starts_with(b"%") {
            continue;
        }
        let line = std::str::from_utf8(line)
            .map_err(|_| mm_error(rank, Some(number), "not UTF-8 text"))?;
        let (r, c, v) =
            parse_entry::<T>(line, p).map_err(|reason| mm_error(rank, Some(number), reason))?;
        count += 1;
        put(r, c, v);
        if r != c {
            match p.symmetry {
                Symmetry::General => {}
                Symmetry::Symmetric => put(c, r, v),
                Symmetry::SkewSymmetric => put(c, r, v.neg()),
                Symmetry::Hermitian => put(c, r, v.conj()),
            }
        }
    }
    Ok((out, count))
}

/// The line of the `n`-th (0-based) entry of `text`, whose first line is `first_line`.
fn nth_entry_line(text: &[u8], first_line: u64, n: u64) -> Option<u64> {
    text.split(|&c| c == b'\n')
        .enumerate()
        .filter(|(_, l)| {
            let l = l.trim_ascii();
            !l.is_empty() && !l.starts_with(b"%")
        })
        .nth(n as usize)
        .map(|(k, _)| first_line + k as u64)
}

/// This rank's block of rows from the triplets every rank sent it (in rank order): rows
/// sorted, repeated entries summed.
fn block_from_triplets<T: MpiScalar>(
    rank: i32,
    parts: &[Vec<u8>],
    rows: std::ops::Range<u64>,
    ncols: u64,
) -> Result<Csr<T>> {
    let width = 8 + T::BYTES;
    let nrows = (rows.end - rows.start) as usize;
    let mut counts = vec![0u64; nrows + 1];
    for (from, part) in parts.iter().enumerate() {
        if part.len() % width != 0 {
            return Err(Error::Message {
                rank,
                from: from as i32,
                reason: format!("{} bytes of entries of {width} bytes", part.len()),
            });
        }
        for e in part.chunks_exact(width) {
            let r = u64::from(u32::from_le_bytes([e[0], e[1], e[2], e[3]]));
            let c = u64::from(u32::from_le_bytes([e[4], e[5], e[6], e[7]]));
            if !rows.contains(&r) || c >= ncols {
                return Err(Error::Message {
                    rank,
                    from: from as i32,
                    reason: format!("entry ({r}, {c}) is not in this rank's rows"),
                });
            }
            counts[(r - rows.start) as usize + 1] += 1;
        }
    }
    for i in 0..nrows {
        counts[i + 1] += counts[i];
    }
    let nnz = counts[nrows] as usize;
    let mut next = counts.clone();
    let mut cols = vec![0u32; nnz];
    let mut values = vec![T::zero(); nnz];
    for part in parts {
        for e in part.chunks_exact(width) {
            let r = u64::from(u32::from_le_bytes([e[0], e[1], e[2], e[3]])) - rows.start;
            let at = next[r as usize] as usize;
            cols[at] = u32::from_le_bytes([e[4], e[5], e[6], e[7]]);
            values[at] = T::get(&e[8..]);
            next[r as usize] += 1;
        }
    }
    Csr::try_from_unsorted(nrows, ncols as usize, counts, cols, values).map_err(|e| {
        Error::Compute {
            rank,
            message: e.to_string(),
        }
    })
}

/// Counts a broadcast of `bytes` from `root` among `size` ranks.
fn count_broadcast(t: &mut Traffic, is_root: bool, bytes: u64, size: usize) {
    let others = size as u64 - 1;
    if is_root {
        t.bytes_sent += bytes * others;
        t.messages_sent += others;
    } else {
        t.bytes_received += bytes;
        t.messages_received += 1;
    }
}

/// Counts an exclusive scan of one `u64`: one message from each rank to the next.
fn count_scan(t: &mut Traffic, rank: usize, size: usize) {
    if rank + 1 < size {
        t.bytes_sent += 8;
        t.messages_sent += 1;
    }
    if rank > 0 {
        t.bytes_received += 8;
        t.messages_received += 1;
    }
}

impl<T: MpiScalar> DistCsr<T> {
    /// Reads a `coordinate` Matrix Market file collectively into even blocks of rows
    /// ([`RowPartition::even`]): every rank opens `path` (one file every rank can read, on a
    /// shared file system), rank 0 reads the banner and size line and broadcasts them, every
    /// rank parses its own byte range of the entry lines (the ranges split at line
    /// boundaries), and an all-to-all sends each entry to the rank owning its row.
    ///
    /// Fields `real`, `integer`, `pattern` (value 1) and `complex` (into complex scalars);
    /// symmetries `general`, `symmetric` (an off-diagonal entry also stored mirrored),
    /// `skew-symmetric` (mirrored negated) and `hermitian` (mirrored conjugated). Repeated
    /// entries are summed, as the single-process reader does. `array` files are refused. A
    /// gzip-compressed file (found by its magic bytes) has no byte ranges to split: rank 0
    /// reads it whole with the single-process reader and scatters its rows
    /// ([`DistCsr::scatter`]), so it needs the memory for the whole matrix.
    ///
    /// Collective. Errors (on every rank): [`Error::Io`] when a rank cannot open or read the
    /// file, [`Error::MatrixMarket`] for a malformed banner or size line, a malformed entry
    /// line or an index out of range (naming its line), or a number of entries other than
    /// the size line announced.
    pub fn read_matrix_market<C: Communicator>(
        comm: &C,
        path: impl AsRef<Path>,
        options: &DistOptions,
    ) -> Result<(DistCsr<T>, CommReport)> {
        let path = path.as_ref();
        let span = comm_span("mpi_read_matrix_market", comm);
        let _enter = span.enter();
        let (rank, size) = (comm.rank(), comm.size() as usize);
        let chunk = agree(comm, options.check(rank))?;
        let mut sizes = Traffic::default();

        // Rank 0 reads the banner and the size line.
        let opening = if rank == 0 {
            read_prologue::<T>(rank, path)
        } else {
            Ok(Opening::Plain(Prologue {
                nrows: 0,
                ncols: 0,
                entries: 0,
                field: Field::Real,
                symmetry: Symmetry::General,
                data_start: 0,
                file_len: 0,
                header_lines: 0,
            }))
        };
        let opening = agree(comm, opening)?;
        let mut gzip = i32::from(matches!(opening, Opening::Gzip));
        comm.process_at_rank(0).broadcast_into(&mut gzip);
        count_broadcast(&mut sizes, rank == 0, 4, size);
        // Rank 0 alone read the start of the file: every rank follows its broadcast.
        let prologue = match opening {
            Opening::Plain(p) if gzip == 0 => p,
            _ => return read_gzip(comm, path, options, sizes),
        };
        let mut words = prologue.to_words();
        comm.process_at_rank(0).broadcast_into(&mut words[..]);
        count_broadcast(&mut sizes, rank == 0, 8 * PROLOGUE_WORDS as u64, size);
        let p = Prologue::from_words(&words).ok_or_else(|| Error::Message {
            rank,
            from: 0,
            reason: "a malformed Matrix Market header".to_string(),
        });
        let p = agree(comm, p)?;
        let rows = RowPartition::even(p.nrows, size);

        // Every rank reads its lines.
        let range = read_range(rank, size, path, &p);
        let (text, _begin, _end) = agree(comm, range)?;
        // Line numbers: the newlines before this rank's range (an exclusive scan).
        let newlines = text.iter().filter(|&&c| c == b'\n').count() as u64;
        let mut before = 0u64;
        comm.exclusive_scan_into(&newlines, &mut before, SystemOperation::sum());
        if rank == 0 {
            before = 0;
        }
        count_scan(&mut sizes, rank as usize, size);
        let first_line = p.header_lines + 1 + before;
        let parsed = parse_range::<T>(rank, &text, first_line, &p, &rows);
        let (sends, count) = agree(comm, parsed)?;

        // The number of entries against the size line's: a surplus is named at the line of
        // the first entry past the count, a shortfall at the line after the file's last.
        let counts = all_gather_u64(comm, &[count, newlines], &mut sizes);
        let total: u64 = counts.chunks_exact(2).map(|c| c[0]).sum();
        let check = if total > p.entries {
            let earlier: u64 = counts
                .chunks_exact(2)
                .take(rank as usize)
                .map(|c| c[0])
                .sum();
            let extra = p.entries.checked_sub(earlier).filter(|&n| n < count);
            match extra {
                Some(n) => Err(mm_error(
                    rank,
                    nth_entry_line(&text, first_line, n),
                    format!(
                        "more entries than the {} the size line announced ({total} in all)",
                        p.entries
                    ),
                )),
                None => Ok(()),
            }
        } else if total < p.entries && rank == 0 {
            let all_newlines: u64 = counts.chunks_exact(2).map(|c| c[1]).sum();
            Err(mm_error(
                rank,
                Some(p.header_lines + all_newlines + 1),
                format!(
                    "fewer entries than the {} the size line announced: the file ends after {total}",
                    p.entries
                ),
            ))
        } else {
            Ok(())
        };
        agree(comm, check)?;

        // Every entry to the rank owning its row.
        let me = rank as usize;
        let mut sends = sends;
        let own = std::mem::take(&mut sends[me]);
        let send_sizes: Vec<u64> = sends.iter().map(|s| s.len() as u64).collect();
        let recv_sizes = wire::all_to_all_u64(comm, &send_sizes, &mut sizes);
        let mut recv_sizes = recv_sizes;
        recv_sizes[me] = 0;
        let mut traffic = Traffic::default();
        let mut received =
            wire::exchange(comm, &sends, &recv_sizes, chunk, TAG_ENTRIES, &mut traffic);
        received[me] = own;
        drop(sends);
        let local = block_from_triplets::<T>(rank, &received, rows.rows(me), p.ncols);
        let local = agree(comm, local)?;
        let nnz_per_rank = all_gather_u64(comm, &[local.nnz()], &mut sizes);
        let report = CommReport::finish(comm, sizes, Traffic::default(), traffic, (0, 0));
        Ok((
            DistCsr::from_parts(rows, p.ncols, nnz_per_rank, local),
            report,
        ))
    }

    /// Writes the matrix to `path` as `coordinate real general` (`complex` for complex
    /// scalars), collectively, without gathering it: every rank formats its own rows (1-based
    /// global indices, values in Rust's shortest round-trip notation), an all-gather of the
    /// byte lengths gives each rank its offset, rank 0 creates the file (truncating any old
    /// one), writes the header and sets the file's length, and then every rank writes its
    /// lines at its offset with a positioned write and flushes them to the file system
    /// (`fsync`) before the call returns. Rows are written in order, so the file is the one
    /// the single-process writer gives for the whole matrix, comment line included.
    ///
    /// `path` must name one file every rank can write (a shared file system; ranks of one
    /// machine share the local one). Ranks write disjoint byte ranges, so no locking is
    /// needed.
    ///
    /// Collective. Errors (on every rank): [`Error::Io`] when a rank cannot create, open or
    /// write the file.
    pub fn write_matrix_market<C: Communicator>(
        &self,
        comm: &C,
        path: impl AsRef<Path>,
    ) -> Result<CommReport> {
        self.write_text(comm, path.as_ref(), false)
    }

    /// Writes the matrix to `path` as [`DistCsr::write_matrix_market`] does, gzip-compressed:
    /// every rank compresses its own lines (in pieces of about 4 MiB of lines, on its rayon
    /// threads) as gzip members of their own, rank 0's first member holding the header,
    /// and writes them at its offset. A file of gzip members one after another is one gzip
    /// file: `gzip -d`, `zcat` and every reader of `hetsparse::matrix_market` read the whole
    /// text back, the same text the uncompressed writer gives. The name is not looked at:
    /// the caller chooses it (`.mtx.gz` by custom).
    ///
    /// Collective. Errors (on every rank): [`Error::Io`] when a rank cannot compress, create,
    /// open or write the file.
    pub fn write_matrix_market_gzip<C: Communicator>(
        &self,
        comm: &C,
        path: impl AsRef<Path>,
    ) -> Result<CommReport> {
        self.write_text(comm, path.as_ref(), true)
    }

    fn write_text<C: Communicator>(&self, comm: &C, path: &Path, gzip: bool) -> Result<CommReport> {
        let span = comm_span("mpi_write_matrix_market", comm);
        let _enter = span.enter();
        let rank = comm.rank();
        agree(comm, self.check_comm(comm))?;
        let me = rank as usize;
        let mut sizes = Traffic::default();
        let (nrows, ncols) = self.shape();
        let field = if T::TYPE.is_complex() {
            "complex"
        } else {
            "real"
        };
        let header = format!(
            "%%MatrixMarket matrix coordinate {field} general\n% written by hetsparse\n\
             {nrows} {ncols} {}\n",
            self.nnz()
        );
        let body = format_rows(self.local(), self.partition().rows(me).start);
        // What rank 0 writes before every rank's part: the header, plain; compressed, it is
        // in rank 0's part.
        let (head, body) = if gzip {
            let mut text = Vec::new();
            if rank == 0 {
                text.extend_from_slice(header.as_bytes());
            }
            text.extend_from_slice(&body);
            drop(body);
            (
                Vec::new(),
                gzip_members(&text)
                    .map_err(|e| io_error(rank, path, "cannot compress the lines of", e)),
            )
        } else {
            (header.into_bytes(), Ok(body))
        };
        let body = agree(comm, body)?;
        let lengths = all_gather_u64(comm, &[body.len() as u64], &mut sizes);
        let offset: u64 = lengths[..me].iter().sum();
        let total: u64 = lengths.iter().sum();
        let start = head.len() as u64;
        let created = if rank == 0 {
            (|| {
                let mut f =
                    File::create(path).map_err(|e| io_error(rank, path, "cannot create", e))?;
                f.write_all(&head)
                    .and_then(|_| f.set_len(start + total))
                    .map_err(|e| io_error(rank, path, "cannot write", e))
            })()
        } else {
            Ok(())
        };
        agree(comm, created)?;
        let written = (|| {
            let f = OpenOptions::new()
                .write(true)
                .open(path)
                .map_err(|e| io_error(rank, path, "cannot open", e))?;
            f.write_all_at(&body, start + offset)
                .and_then(|_| f.sync_all())
                .map_err(|e| io_error(rank, path, "cannot write", e))
        })();
        agree(comm, written)?;
        Ok(CommReport::finish(
            comm,
            sizes,
            Traffic::default(),
            Traffic::default(),
            (0, 0),
        ))
    }
}

/// Text a rank compresses as one gzip member, about: pieces of whole lines this long are
/// compressed in parallel.
const GZIP_PIECE_BYTES: usize = 4 << 20;

/// `text` as gzip members of about [`GZIP_PIECE_BYTES`] of whole lines each (none for an empty
/// text), compressed in parallel and concatenated in order.
fn gzip_members(text: &[u8]) -> std::io::Result<Vec<u8>> {
    use flate2::write::GzEncoder;
    use rayon::prelude::*;
    let mut pieces = Vec::new();
    let mut from = 0;
    while from < text.len() {
        let mut to = (from + GZIP_PIECE_BYTES).min(text.len());
        // To the end of the line the piece's last byte is on.
        to += text[to..]
            .iter()
            .position(|&c| c == b'\n')
            .map_or(text.len() - to, |n| n + 1);
        pieces.push(&text[from..to]);
        from = to;
    }
    let members = pieces
        .par_iter()
        .map(|piece| {
            let mut encoder = GzEncoder::new(Vec::new(), flate2::Compression::fast());
            encoder.write_all(piece)?;
            encoder.finish()
        })
        .collect::<std::io::Result<Vec<Vec<u8>>>>()?;
    Ok(members.concat())
}

/// The entry lines of `m`'s rows, the first being global row `first_row`.
fn format_rows<T: Scalar>(m: &Csr<T>, first_row: u64) -> Vec<u8> {
    use std::fmt::Write as _;
    let mut s = String::with_capacity(m.nnz() as usize * 24);
    for i in 0..m.nrows() {
        let (cols, values) = m.row(i);
        for (&c, &v) in cols.iter().zip(values) {
            let (re, im) = v.to_parts();
            // `{:?}` prints the shortest text that reads back as the same f64.
            let _ = if T::TYPE.is_complex() {
                writeln!(
                    s,
                    "{} {} {:?} {:?}",
                    first_row + i as u64 + 1,
                    u64::from(c) + 1,
                    re,
                    im
                )
            } else {
                writeln!(
                    s,
                    "{} {} {:?}",
                    first_row + i as u64 + 1,
                    u64::from(c) + 1,
                    re
                )
            };
        }
    }
    s.into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prologue(symmetry: Symmetry, field: Field) -> Prologue {
        Prologue {
            nrows: 3,
            ncols: 3,
            entries: 0,
            field,
            symmetry,
            data_start: 0,
            file_len: 0,
            header_lines: 2,
        }
    }

    #[test]
    fn entry_lines_parse_and_bad_ones_are_named() {
        let p = prologue(Symmetry::General, Field::Real);
        assert_eq!(parse_entry::<f64>("2 3 1.5D+01", &p), Ok((1, 2, 15.0)));
        assert!(parse_entry::<f64>("4 1 1.0", &p)
            .unwrap_err()
            .contains("row index 4 is out of range"));
        assert!(parse_entry::<f64>("1 1", &p).is_err());
        assert!(parse_entry::<f64>("1 1 2 3", &p).is_err());
        let p = prologue(Symmetry::SkewSymmetric, Field::Integer);
        assert!(parse_entry::<f64>("1 1 2", &p).is_err());
        assert!(parse_entry::<f64>("2 1 2.5", &p).is_err());
        assert_eq!(parse_entry::<f64>("2 1 -7", &p), Ok((1, 0, -7.0)));
        let p = prologue(Symmetry::General, Field::Pattern);
        assert_eq!(parse_entry::<f32>("3 3", &p), Ok((2, 2, 1.0)));
        assert_eq!(Prologue::from_words(&p.to_words()), Some(p));
    }

    #[test]
    fn line_starts_move_past_the_next_newline() {
        let text = b"1 1 1\n2 2 2\n3 3 3\n";
        assert_eq!(line_start(text, 0, 0), 6);
        assert_eq!(line_start(text, 0, 5), 6);
        assert_eq!(line_start(text, 0, 6), 12);
        assert_eq!(line_start(text, 0, 17), 18);
        assert_eq!(line_start(text, 0, 18), 18);
        assert_eq!(nth_entry_line(b"% c\n1 1 1\n\n2 2 2\n", 10, 1), Some(13));
    }

    #[test]
    fn rows_are_formatted_with_global_indices() {
        let m = Csr::try_new(2, 3, vec![0, 1, 2], vec![2, 0], vec![0.5f64, 1e-300]).unwrap();
        assert_eq!(format_rows(&m, 4), b"5 3 0.5\n6 1 1e-300\n".to_vec());
    }
}
