//! The reader: the header is read line by line, then the entries in chunks of whole lines that
//! are parsed on every core of the current rayon pool while the calling thread reads (and
//! decompresses) the next ones, and assembled in file order.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::sync::mpsc;

use super::convert::{checked_bytes, try_vec};
use super::gzip::GzipMembers;
use super::header::{line_too_long, parse_error, parse_header, Lines};
use super::parse::{for_each_line, is_content, parse_chunk, ParsedChunk};
use super::{Field, Format, Header, MatrixMarket, ReadOptions, Symmetry};
use crate::error::MatrixMarketError;
use crate::format::{Coo, Csr, Dense, Layout};
use crate::scalar::Scalar;

/// Buffer size for files and decompressed streams.
const READ_BUFFER: usize = 1 << 16;

/// Bytes of text per chunk handed to a parsing task: large enough that a task's overhead is
/// lost in its work, small enough that every core gets several per batch.
const CHUNK_BYTES: usize = 1 << 20;

/// Most entries reserved before they arrive: the size line is only a promise, so the arrays
/// grow with what is actually read beyond this.
const MAX_INITIAL_RESERVE: u64 = 1 << 20;

/// Reads a Matrix Market file from any buffered reader, plain or gzip-compressed, with the
/// default [`ReadOptions`].
///
/// Returns [`MatrixMarket::Sparse`] for `coordinate` files and [`MatrixMarket::Dense`] for
/// `array` files; see the [module documentation](super) for how fields and symmetries are
/// interpreted.
pub fn read<T: Scalar, R: BufRead>(reader: R) -> Result<MatrixMarket<T>, MatrixMarketError> {
    read_with(reader, &ReadOptions::default())
}

/// [`read`] with explicit limits.
pub fn read_with<T: Scalar, R: BufRead>(
    reader: R,
    options: &ReadOptions,
) -> Result<MatrixMarket<T>, MatrixMarketError> {
    read_any(reader, options, Target::AsRead)
}

/// Reads a Matrix Market file, gzip-compressed or not (decided by its first bytes).
pub fn read_path<T: Scalar>(path: impl AsRef<Path>) -> Result<MatrixMarket<T>, MatrixMarketError> {
    read_path_with(path, &ReadOptions::default())
}

/// [`read_path`] with explicit limits.
pub fn read_path_with<T: Scalar>(
    path: impl AsRef<Path>,
    options: &ReadOptions,
) -> Result<MatrixMarket<T>, MatrixMarketError> {
    read_with(open(path.as_ref())?, options)
}

/// Reads a `coordinate` or `array` file into CSR (see [`MatrixMarket::into_csr`]).
pub fn read_csr<T: Scalar, R: BufRead>(reader: R) -> Result<Csr<T>, MatrixMarketError> {
    read_csr_with(reader, &ReadOptions::default())
}

/// [`read_csr`] with explicit limits; [`ReadOptions::max_bytes`] then also covers the CSR arrays,
/// so a file announcing more rows than memory holds fails at its size line.
pub fn read_csr_with<T: Scalar, R: BufRead>(
    reader: R,
    options: &ReadOptions,
) -> Result<Csr<T>, MatrixMarketError> {
    let m = read_any(reader, options, Target::Csr)?;
    let _span = tracing::debug_span!("matrix_market::to_csr").entered();
    m.into_csr()
}

/// Reads a `coordinate` or `array` file from a path into CSR, gzip-compressed or not.
pub fn read_csr_path<T: Scalar>(path: impl AsRef<Path>) -> Result<Csr<T>, MatrixMarketError> {
    read_csr_path_with(path, &ReadOptions::default())
}

/// [`read_csr_path`] with explicit limits.
pub fn read_csr_path_with<T: Scalar>(
    path: impl AsRef<Path>,
    options: &ReadOptions,
) -> Result<Csr<T>, MatrixMarketError> {
    read_csr_with(open(path.as_ref())?, options)
}

/// Reads the banner and the size line only, not the entries: what a file holds and how large it
/// claims to be, without reading it. Gzip input is decompressed just far enough.
pub fn read_header<R: BufRead>(mut reader: R) -> Result<Header, MatrixMarketError> {
    let mut buf = Vec::new();
    let max_line = ReadOptions::default().max_line_bytes;
    if is_gzip(&mut reader)? {
        let mut lines = Lines::new(BufReader::new(GzipMembers::new(reader)), max_line);
        parse_header(&mut lines, &mut buf)
    } else {
        parse_header(&mut Lines::new(reader, max_line), &mut buf)
    }
}

fn open(path: &Path) -> Result<BufReader<File>, MatrixMarketError> {
    let file = File::open(path).map_err(|source| MatrixMarketError::Open {
        path: path.to_path_buf(),
        source,
    })?;
    Ok(BufReader::with_capacity(READ_BUFFER, file))
}

/// What the caller will make of the matrix, for the memory check at the size line.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Target {
    /// COO or dense, as the file holds it.
    AsRead,
    /// CSR, converted after reading.
    Csr,
}

/// Whether the input is gzip (magic bytes 1f 8b). A plain Matrix Market file starts with `%`,
/// whitespace or a byte-order mark, never with 0x1f, so the first byte decides, which also keeps
/// the answer independent of how many bytes the reader happens to buffer; the decoder then
/// rejects a stream whose second byte is not 0x8b as an invalid gzip header.
fn is_gzip<R: BufRead>(reader: &mut R) -> Result<bool, MatrixMarketError> {
    Ok(reader.fill_buf()?.first() == Some(&0x1f))
}

fn read_any<T: Scalar, R: BufRead>(
    mut reader: R,
    options: &ReadOptions,
    target: Target,
) -> Result<MatrixMarket<T>, MatrixMarketError> {
    let _span = tracing::debug_span!("matrix_market::read", scalar = %T::TYPE).entered();
    if is_gzip(&mut reader)? {
        tracing::debug!("gzip input");
        read_plain(
            BufReader::with_capacity(READ_BUFFER, GzipMembers::new(reader)),
            options,
            target,
        )
    } else {
        read_plain(reader, options, target)
    }
}

/// Bytes the matrix announced by `header` needs once read as `T` (and converted for `target`):
/// what [`ReadOptions::max_bytes`] is checked against before any entry is read.
fn announced_bytes<T: Scalar>(header: &Header, target: Target) -> Option<u64> {
    let value = std::mem::size_of::<T>() as u64;
    let (stored, converted) = match header.format {
        Format::Coordinate => {
            let mirrored = if header.symmetry == Symmetry::General {
                1
            } else {
                2
            };
            let triplets = header.entries.checked_mul(mirrored)?;
            let coo = triplets.checked_mul(8 + value)?;
            let csr = triplets.checked_mul(4 + value)?;
            (coo, csr)
        }
        Format::Array => {
            let read = header.entries.checked_mul(value)?;
            let full = if header.symmetry == Symmetry::General {
                0
            } else {
                header.nrows.checked_mul(header.ncols)?.checked_mul(value)?
            };
            (read.checked_add(full)?, 0)
        }
    };
    match target {
        Target::AsRead => Some(stored),
        Target::Csr => {
            let offsets = header.nrows.checked_add(1)?.checked_mul(8)?;
            stored.checked_add(converted)?.checked_add(offsets)
        }
    }
}

fn read_plain<T: Scalar, R: BufRead>(
    reader: R,
    options: &ReadOptions,
    target: Target,
) -> Result<MatrixMarket<T>, MatrixMarketError> {
    let mut lines = Lines::new(reader, options.max_line_bytes);
    let mut buf = Vec::with_capacity(256);
    let header = parse_header(&mut lines, &mut buf)?;
    tracing::debug!(
        format = %header.format,
        field = %header.field,
        symmetry = %header.symmetry,
        nrows = header.nrows,
        ncols = header.ncols,
        entries = header.entries,
        "Matrix Market header"
    );
    if header.field == Field::Complex && !T::TYPE.is_complex() {
        return Err(MatrixMarketError::Unsupported(format!(
            "the file holds complex values, which {} cannot hold; read it as Complex<f32> or \
             Complex<f64>",
            T::TYPE
        )));
    }
    let what = || {
        format!(
            "a {}×{} {} {} matrix of {} entries as {}{}",
            header.nrows,
            header.ncols,
            header.format,
            header.symmetry,
            header.entries,
            T::TYPE,
            if target == Target::Csr {
                " and CSR"
            } else {
                ""
            }
        )
    };
    match announced_bytes::<T>(&header, target) {
        Some(needed) if needed <= options.max_bytes => {}
        needed => {
            return Err(MatrixMarketError::MemoryLimit {
                what: what(),
                needed_bytes: needed.unwrap_or(u64::MAX),
                limit_bytes: options.max_bytes,
            })
        }
    }
    let size_line = lines.line;
    let mut entries = Entries::<T>::new(&header, size_line)?;
    read_entries(&header, lines, options, &mut entries)?;
    let (nrows, ncols) = (header.nrows as usize, header.ncols as usize);
    match header.format {
        Format::Coordinate => Ok(MatrixMarket::Sparse(Coo::from_sorted_parts(
            nrows,
            ncols,
            entries.rows,
            entries.cols,
            entries.values,
        ))),
        Format::Array => Ok(MatrixMarket::Dense(expand_array(&header, entries.values)?)),
    }
}

/// The entries assembled so far, in file order, and where the file stands.
struct Entries<T> {
    rows: Vec<u32>,
    cols: Vec<u32>,
    values: Vec<T>,
    /// Entry lines read so far (symmetric partners not counted).
    found: u64,
    /// Lines of the file consumed so far.
    lines: u64,
    /// Line number of the size line.
    size_line: u64,
    /// Most array elements the announced entries can take (twice the count when mirrored).
    limit: u64,
}

impl<T: Scalar> Entries<T> {
    fn new(header: &Header, size_line: u64) -> Result<Self, MatrixMarketError> {
        let mirrored = header.format == Format::Coordinate && header.symmetry != Symmetry::General;
        let limit = header.entries.saturating_mul(if mirrored { 2 } else { 1 });
        let reserve = limit.min(MAX_INITIAL_RESERVE);
        let index_reserve = if header.format == Format::Coordinate {
            reserve
        } else {
            0
        };
        Ok(Entries {
            rows: try_vec(index_reserve, "row indices")?,
            cols: try_vec(index_reserve, "column indices")?,
            values: try_vec(reserve, "values")?,
            found: 0,
            lines: size_line,
            size_line,
            limit,
        })
    }

    /// Appends a parsed chunk, or returns the first error in file order: too many entries, or
    /// the chunk's own error with its line number made absolute.
    fn append(
        &mut self,
        header: &Header,
        chunk: ParsedChunk<T>,
        bytes: &[u8],
    ) -> Result<(), MatrixMarketError> {
        let remaining = header.entries - self.found;
        if chunk.entries > remaining || (chunk.entries == remaining && chunk.error.is_some()) {
            // The first entry line past the announced count is the error, unless the chunk's
            // own error comes before it.
            let error_line = match &chunk.error {
                Some(MatrixMarketError::Parse { line, .. }) => *line,
                _ => u64::MAX,
            };
            let mut seen = 0;
            let mut excess_line = None;
            for_each_line(bytes, |line, raw| {
                if line > error_line {
                    return false;
                }
                if is_content(raw.trim_ascii()) {
                    seen += 1;
                    if seen > remaining {
                        excess_line = Some(line);
                        return false;
                    }
                }
                true
            });
            if let Some(line) = excess_line {
                return Err(parse_error(
                    self.lines + line,
                    format!(
                        "more entries than the {} announced by the size line (line {})",
                        header.entries, self.size_line
                    ),
                ));
            }
        }
        if let Some(e) = chunk.error {
            return Err(match e {
                MatrixMarketError::Parse { line, message } => MatrixMarketError::Parse {
                    line: self.lines + line,
                    message,
                },
                other => other,
            });
        }
        let added = chunk.values.len() as u64;
        let len = self.values.len() as u64;
        grow(&mut self.values, added, self.limit, "values")?;
        self.values.extend_from_slice(&chunk.values);
        if header.format == Format::Coordinate {
            grow(&mut self.rows, added, self.limit, "row indices")?;
            grow(&mut self.cols, added, self.limit, "column indices")?;
            self.rows.extend_from_slice(&chunk.rows);
            self.cols.extend_from_slice(&chunk.cols);
        }
        debug_assert!(len + added <= self.limit);
        self.found += chunk.entries;
        self.lines += chunk.lines;
        Ok(())
    }
}

/// Room for `additional` more elements, doubling as a vector does but never past `limit`
/// elements, and failing with [`MatrixMarketError::OutOfMemory`] rather than aborting.
fn grow<X>(
    v: &mut Vec<X>,
    additional: u64,
    limit: u64,
    what: &str,
) -> Result<(), MatrixMarketError> {
    let len = v.len() as u64;
    let need = len + additional;
    if need <= v.capacity() as u64 {
        return Ok(());
    }
    let target = (v.capacity() as u64 * 2).max(need).min(limit.max(need));
    let more = (target - len) as usize;
    v.try_reserve_exact(more)
        .map_err(|_| MatrixMarketError::OutOfMemory {
            what: what.to_string(),
            needed_bytes: checked_bytes::<X>(target),
        })
}

/// Chunks of whole lines from the reader: about [`CHUNK_BYTES`] each, cut after a newline.
struct Chunker<R> {
    reader: R,
    /// The start of a line that the previous chunk could not end with.
    carry: Vec<u8>,
    at_end: bool,
    max_line_bytes: usize,
}

/// A line that grew past the limit: the first line of the chunk being read.
struct Overlong;

impl<R: BufRead> Chunker<R> {
    fn next_chunk(&mut self) -> Result<Result<Option<Vec<u8>>, Overlong>, MatrixMarketError> {
        if self.at_end && self.carry.is_empty() {
            return Ok(Ok(None));
        }
        let mut chunk = Vec::new();
        chunk
            .try_reserve_exact(CHUNK_BYTES + self.carry.len() + READ_BUFFER)
            .map_err(|_| MatrixMarketError::OutOfMemory {
                what: "a chunk of text".into(),
                needed_bytes: (CHUNK_BYTES + self.carry.len()) as u64,
            })?;
        chunk.append(&mut self.carry);
        // How long the chunk may grow before it is cut, and where the search for its last
        // newline starts.
        let mut want = CHUNK_BYTES;
        let mut searched = 0;
        loop {
            while !self.at_end && chunk.len() < want {
                // Straight into the chunk: a buffered reader whose buffer is empty hands a
                // large read to the file or decoder beneath, sparing a copy.
                let room = want - chunk.len();
                // Room enough that reading never grows the chunk by doubling.
                chunk
                    .try_reserve(room + 64)
                    .map_err(|_| MatrixMarketError::OutOfMemory {
                        what: "a chunk of text".into(),
                        needed_bytes: (chunk.len() + room) as u64,
                    })?;
                match (&mut self.reader).take(room as u64).read_to_end(&mut chunk) {
                    // Less than asked for: the input has ended.
                    Ok(n) if n < room => self.at_end = true,
                    Ok(_) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e.into()),
                }
            }
            if self.at_end {
                return Ok(Ok((!chunk.is_empty()).then_some(chunk)));
            }
            match chunk[searched..].iter().rposition(|&b| b == b'\n') {
                Some(k) => {
                    let cut = searched + k + 1;
                    self.carry.extend_from_slice(&chunk[cut..]);
                    chunk.truncate(cut);
                    return Ok(Ok(Some(chunk)));
                }
                None => {
                    // One line longer than a chunk: read on until it ends or passes the limit
                    // (its newline may be the byte after the last one allowed).
                    if chunk.len() > self.max_line_bytes {
                        return Ok(Err(Overlong));
                    }
                    searched = chunk.len();
                    want = (chunk.len() + READ_BUFFER).min(self.max_line_bytes.saturating_add(2));
                    chunk.try_reserve(want - chunk.len()).map_err(|_| {
                        MatrixMarketError::OutOfMemory {
                            what: "a long line".into(),
                            needed_bytes: want as u64,
                        }
                    })?;
                }
            }
        }
    }
}

/// What came back from a parsing task: its chunk's number, its text and what it held.
type Parsed<T> = (u64, Vec<u8>, ParsedChunk<T>);

/// Reads the entries: the calling thread cuts chunks and hands each to a rayon task; results
/// are put back in file order and appended. At most a few chunks per thread are in flight, so
/// memory beyond the matrix stays at a few MB per core whatever the file.
fn read_entries<T: Scalar, R: BufRead>(
    header: &Header,
    lines: Lines<R>,
    options: &ReadOptions,
    entries: &mut Entries<T>,
) -> Result<(), MatrixMarketError> {
    let _span = tracing::debug_span!(
        "matrix_market::entries",
        format = %header.format,
        entries = header.entries
    )
    .entered();
    let mut chunker = Chunker {
        reader: lines.reader,
        carry: Vec::new(),
        at_end: false,
        max_line_bytes: options.max_line_bytes,
    };
    let max_in_flight = 2 * rayon::current_num_threads() as u64 + 1;
    let (sender, receiver) = mpsc::channel::<Parsed<T>>();
    let mut pending: BTreeMap<u64, (Vec<u8>, ParsedChunk<T>)> = BTreeMap::new();
    let (mut spawned, mut assembled) = (0u64, 0u64);
    // Why the input stopped early (an over-long line, a read or decompression error): reported
    // once every chunk before it is in, so that an earlier parse error comes first, as it
    // would reading line by line.
    let mut stopped: Option<MatrixMarketError> = None;
    let mut input_done = false;
    loop {
        while !input_done && spawned - assembled < max_in_flight {
            let next = match chunker.next_chunk() {
                Ok(next) => next,
                Err(e) => {
                    stopped = Some(e);
                    input_done = true;
                    break;
                }
            };
            match next {
                Ok(Some(bytes)) => {
                    let h = *header;
                    let max_line = options.max_line_bytes;
                    let index = spawned;
                    spawned += 1;
                    if spawned - assembled == 1 && chunker.at_end && chunker.carry.is_empty() {
                        // The last chunk and nothing in flight: no task is worth its cost.
                        let parsed = parse_chunk::<T>(&h, &bytes, max_line);
                        pending.insert(index, (bytes, parsed));
                    } else {
                        let sender = sender.clone();
                        rayon::spawn(move || {
                            let parsed = parse_chunk::<T>(&h, &bytes, max_line);
                            // The reader may have stopped at an earlier error: nobody listens.
                            let _ = sender.send((index, bytes, parsed));
                        });
                    }
                }
                Ok(None) => input_done = true,
                Err(Overlong) => {
                    stopped = Some(line_too_long(0, options.max_line_bytes));
                    input_done = true;
                }
            }
        }
        while let Some((bytes, parsed)) = pending.remove(&assembled) {
            entries.append(header, parsed, &bytes)?;
            assembled += 1;
        }
        if assembled == spawned {
            match stopped {
                // The over-long line is the first of the chunk that was being cut.
                Some(MatrixMarketError::Parse { message, .. }) => {
                    return Err(parse_error(entries.lines + 1, message))
                }
                Some(e) => return Err(e),
                None => {}
            }
            if input_done {
                break;
            }
            continue;
        }
        let (index, bytes, parsed) = receive(&receiver);
        pending.insert(index, (bytes, parsed));
    }
    if entries.found < header.entries {
        return Err(parse_error(
            entries.lines + 1,
            format!(
                "the file ends after {} entries, fewer than the {} announced",
                entries.found, header.entries
            ),
        ));
    }
    Ok(())
}

/// The next parsed chunk. A rayon worker waiting here runs other tasks meanwhile (the chunks
/// it waits for may be queued behind it); any other thread blocks.
fn receive<T>(receiver: &mpsc::Receiver<Parsed<T>>) -> Parsed<T> {
    loop {
        match receiver.try_recv() {
            Ok(p) => return p,
            Err(mpsc::TryRecvError::Disconnected) => {
                unreachable!("the reader holds a sender until it returns")
            }
            Err(mpsc::TryRecvError::Empty) => match rayon::yield_now() {
                Some(rayon::Yield::Executed) => {}
                Some(rayon::Yield::Idle) => std::thread::yield_now(),
                None => {
                    return receiver
                        .recv()
                        .unwrap_or_else(|_| unreachable!("the reader holds a sender"))
                }
            },
        }
    }
}

/// The dense matrix of an `array` file: the values as read for `general`, the full square
/// from the lower triangle otherwise.
fn expand_array<T: Scalar>(header: &Header, stored: Vec<T>) -> Result<Dense<T>, MatrixMarketError> {
    let (nrows, ncols) = (header.nrows as usize, header.ncols as usize);
    let to_error = |e: crate::error::FormatError| MatrixMarketError::Unsupported(e.to_string());
    if header.symmetry == Symmetry::General {
        return Dense::try_new(nrows, ncols, Layout::ColMajor, stored).map_err(to_error);
    }
    // The lower triangle, column by column, has arrived in full, so the n × n matrix is at most
    // about twice what has been read.
    let n = nrows;
    let mut data = try_vec::<T>((n as u64) * (n as u64), "the dense matrix")?;
    data.resize(n * n, T::zero());
    let first_below = usize::from(header.symmetry == Symmetry::SkewSymmetric);
    let lower = (0..n).flat_map(|j| (j + first_below..n).map(move |i| (i, j)));
    for ((i, j), v) in lower.zip(stored) {
        data[j * n + i] = v;
        if i != j {
            data[i * n + j] = match header.symmetry {
                Symmetry::SkewSymmetric => v.neg(),
                Symmetry::Hermitian => v.conj(),
                _ => v,
            };
        }
    }
    Dense::try_new(n, n, Layout::ColMajor, data).map_err(to_error)
}
