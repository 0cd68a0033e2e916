//! What travels between ranks: scalars and rows as little-endian bytes, sent in messages of a
//! bounded size, and counted.

use half::{bf16, f16};
use hetsparse::{host, ContextScalar, Csr};
use mpi::traits::*;
use num_complex::Complex;
use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::report::Traffic;

mod sealed {
    pub trait Sealed {}
}

/// A scalar type the distributed layer can send: the six types of `hetsparse`.
///
/// Values travel as their little-endian bytes (`BYTES` each), so one send path serves every
/// type and no MPI datatype has to be derived. The trait is sealed.
pub trait MpiScalar: ContextScalar + sealed::Sealed {
    /// Bytes of one value on the wire.
    const BYTES: usize;
    /// Writes the value's bytes into exactly `BYTES` bytes.
    fn write(self, out: &mut [u8]);
    /// Appends the value's bytes.
    fn put(self, out: &mut Vec<u8>) {
        let at = out.len();
        out.resize(at + Self::BYTES, 0);
        self.write(&mut out[at..]);
    }
    /// Reads a value from exactly `BYTES` bytes.
    fn get(bytes: &[u8]) -> Self;
}

macro_rules! wire_real {
    ($t:ty, $n:expr) => {
        impl sealed::Sealed for $t {}
        impl MpiScalar for $t {
            const BYTES: usize = $n;
            fn write(self, out: &mut [u8]) {
                out[..$n].copy_from_slice(&self.to_le_bytes());
            }
            fn get(bytes: &[u8]) -> Self {
                let mut b = [0u8; $n];
                b.copy_from_slice(&bytes[..$n]);
                <$t>::from_le_bytes(b)
            }
        }
    };
}
wire_real!(f32, 4);
wire_real!(f64, 8);
wire_real!(f16, 2);
wire_real!(bf16, 2);

macro_rules! wire_complex {
    ($t:ty, $n:expr) => {
        impl sealed::Sealed for Complex<$t> {}
        impl MpiScalar for Complex<$t> {
            const BYTES: usize = 2 * $n;
            fn write(self, out: &mut [u8]) {
                out[..$n].copy_from_slice(&self.re.to_le_bytes());
                out[$n..2 * $n].copy_from_slice(&self.im.to_le_bytes());
            }
            fn get(bytes: &[u8]) -> Self {
                Complex::new(
                    <$t as MpiScalar>::get(&bytes[..$n]),
                    <$t as MpiScalar>::get(&bytes[$n..2 * $n]),
                )
            }
        }
    };
}
wire_complex!(f32, 4);
wire_complex!(f64, 8);

/// Bytes of `rows` rows holding `entries` entries in the row format of [`pack_rows`].
pub(crate) fn rows_bytes<T: MpiScalar>(rows: u64, entries: u64) -> u64 {
    8 * rows + (4 + T::BYTES as u64) * entries
}

/// Rows packed or unpacked by one task.
const ROWS_PIECE: usize = 512;

/// Packs the rows `rows` (local row numbers) of `m`: each row's length (u64), then every column
/// index (u32), then every value. The message is sized exactly up front and written in place,
/// pieces of rows in parallel (on the current rayon pool), each into its own part of the three
/// sections.
pub(crate) fn pack_rows<T: MpiScalar>(m: &Csr<T>, rows: impl Iterator<Item = usize>) -> Vec<u8> {
    let offsets = m.row_offsets();
    let rows: Vec<usize> = rows.collect();
    let length = |r: usize| (offsets[r + 1] - offsets[r]) as usize;
    let pieces: Vec<&[usize]> = rows.chunks(ROWS_PIECE).collect();
    // Entries before each piece.
    let piece_entries: Vec<usize> = pieces
        .par_iter()
        .map(|piece| piece.iter().map(|&r| length(r)).sum())
        .collect();
    let mut before = Vec::with_capacity(pieces.len() + 1);
    before.push(0usize);
    for n in &piece_entries {
        before.push(before[before.len() - 1] + n);
    }
    let entries = before[pieces.len()];
    let head = 8 * rows.len();
    // Zeroed by the allocator (fresh pages), written once below.
    let mut out = vec![0u8; rows_bytes::<T>(rows.len() as u64, entries as u64) as usize];
    let (lengths, rest) = out.split_at_mut(head);
    let (cols, values) = rest.split_at_mut(4 * entries);
    let bytes_of = |width: usize| -> Vec<std::ops::Range<usize>> {
        before
            .windows(2)
            .map(|p| width * p[0]..width * p[1])
            .collect()
    };
    let col_parts = host::split_mut(cols, &bytes_of(4));
    let value_parts = host::split_mut(values, &bytes_of(T::BYTES));
    lengths
        .par_chunks_mut(8 * ROWS_PIECE)
        .zip(col_parts)
        .zip(value_parts)
        .zip(pieces.par_iter())
        .for_each(|(((lengths, cols), values), piece)| {
            let (mut c, mut v) = (0usize, 0usize);
            for (out, &r) in lengths.chunks_exact_mut(8).zip(piece.iter()) {
                out.copy_from_slice(&(length(r) as u64).to_le_bytes());
                let (row_cols, row_values) = m.row(r);
                let c_end = c + 4 * row_cols.len();
                for (out, col) in cols[c..c_end].chunks_exact_mut(4).zip(row_cols) {
                    out.copy_from_slice(&col.to_le_bytes());
                }
                let v_end = v + T::BYTES * row_values.len();
                for (out, &value) in values[v..v_end].chunks_exact_mut(T::BYTES).zip(row_values) {
                    value.write(out);
                }
                (c, v) = (c_end, v_end);
            }
        });
    out
}

/// Rows read from a message of [`pack_rows`], appended to CSR arrays.
pub(crate) struct RowsOut<'a, T> {
    /// Row offsets (starts with 0 before the first append).
    pub offsets: &'a mut Vec<u64>,
    /// Column indices.
    pub cols: &'a mut Vec<u32>,
    /// Values.
    pub values: &'a mut Vec<T>,
}

/// Unpacks `rows` rows from `bytes` (sent by rank `from`, received on `rank`) into `out`,
/// checking lengths, that every column index is below `ncols` and that each row's column
/// indices strictly increase: the rows appended are canonical CSR rows.
pub(crate) fn unpack_rows<T: MpiScalar>(
    bytes: &[u8],
    rows: usize,
    ncols: u64,
    out: RowsOut<'_, T>,
    (rank, from): (i32, i32),
) -> Result<()> {
    let bad = |reason: String| Error::Message { rank, from, reason };
    let head = rows
        .checked_mul(8)
        .filter(|&h| h <= bytes.len())
        .ok_or_else(|| {
            bad(format!(
                "{} bytes cannot hold {rows} row lengths",
                bytes.len()
            ))
        })?;
    let mut entries = 0u64;
    let first = out.offsets.len();
    let mut base = *out.offsets.last().unwrap_or(&0);
    let start = base;
    for len in bytes[..head].chunks_exact(8) {
        let len = u64::from_le_bytes(len.try_into().unwrap_or([0; 8]));
        entries = entries
            .checked_add(len)
            .ok_or_else(|| bad("row lengths overflow".to_string()))?;
        base += len;
        out.offsets.push(base);
    }
    let expected = (4 + T::BYTES as u64)
        .checked_mul(entries)
        .and_then(|b| b.checked_add(head as u64));
    if expected != Some(bytes.len() as u64) {
        return Err(bad(format!(
            "{} bytes for {rows} rows of {entries} entries (expected {expected:?})",
            bytes.len()
        )));
    }
    let entries = entries as usize;
    let cols_end = head + 4 * entries;
    let cols = &bytes[head..cols_end];
    let col = |k: usize| u32::from_le_bytes(cols[4 * k..4 * k + 4].try_into().unwrap_or([0; 4]));
    // The rows' ends in this message: the offsets just appended.
    let ends = &out.offsets[first..];
    // Every row checked in parallel, in pieces of rows; the first fault in row order is the
    // one reported.
    let check = |i: usize| -> Option<String> {
        let row_start = if i == 0 { start } else { ends[i - 1] };
        let (s, e) = ((row_start - start) as usize, (ends[i] - start) as usize);
        let mut previous = None;
        for k in s..e {
            let c = col(k);
            if u64::from(c) >= ncols {
                return Some(format!("column index {c} past {ncols} columns"));
            }
            if let Some(p) = previous.filter(|&p| p >= c) {
                return Some(format!("row {i} of the message: column {c} after {p}"));
            }
            previous = Some(c);
        }
        None
    };
    let fault = (0..rows)
        .into_par_iter()
        .with_min_len(ROWS_PIECE)
        .filter_map(check)
        .find_first(|_| true);
    if let Some(reason) = fault {
        return Err(bad(reason));
    }
    out.cols.par_extend(
        cols.par_chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap_or([0; 4]))),
    );
    out.values
        .par_extend(bytes[cols_end..].par_chunks_exact(T::BYTES).map(T::get));
    Ok(())
}

/// Encodes `u32`s as little-endian bytes.
pub(crate) fn u32s_to_bytes(xs: &[u32]) -> Vec<u8> {
    xs.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Decodes little-endian `u32`s (`bytes.len()` a multiple of 4).
pub(crate) fn bytes_to_u32s(bytes: &[u8]) -> Vec<u32> {
    bytes
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap_or([0; 4])))
        .collect()
}

/// Messages of `bytes` bytes cut into pieces of at most `chunk` bytes (none for 0 bytes).
pub(crate) fn messages(bytes: u64, chunk: u64) -> u64 {
    bytes.div_ceil(chunk)
}

/// Sends `sends[r]` to every rank `r` with bytes to send and receives `recv_sizes[r]` bytes
/// from every rank `r`, all at once (non-blocking), each cut into messages of at most `chunk`
/// bytes. Sizes must have been agreed beforehand; nothing is sent to or received from this rank
/// itself (its entries must be empty and 0). Adds what moved to `traffic`.
pub(crate) fn exchange<C: Communicator>(
    comm: &C,
    sends: &[Vec<u8>],
    recv_sizes: &[u64],
    chunk: usize,
    tag: i32,
    traffic: &mut Traffic,
) -> Vec<Vec<u8>> {
    let me = comm.rank() as usize;
    let mut received: Vec<Vec<u8>> = recv_sizes
        .iter()
        .enumerate()
        .map(|(r, &n)| {
            if r == me {
                Vec::new()
            } else {
                vec![0u8; n as usize]
            }
        })
        .collect();
    let mut count = 0usize;
    for (r, s) in sends.iter().enumerate() {
        if r != me {
            count += s.len().div_ceil(chunk);
            traffic.bytes_sent += s.len() as u64;
            traffic.messages_sent += messages(s.len() as u64, chunk as u64);
        }
    }
    for (r, buf) in received.iter().enumerate() {
        if r != me {
            count += buf.len().div_ceil(chunk);
            traffic.bytes_received += buf.len() as u64;
            traffic.messages_received += messages(buf.len() as u64, chunk as u64);
        }
    }
    mpi::request::multiple_scope(count, |scope, requests| {
        for (r, buf) in received.iter_mut().enumerate() {
            if r == me {
                continue;
            }
            let source = comm.process_at_rank(r as i32);
            for piece in buf.chunks_mut(chunk) {
                requests.add(source.immediate_receive_into_with_tag(scope, piece, tag));
            }
        }
        for (r, buf) in sends.iter().enumerate() {
            if r == me {
                continue;
            }
            let destination = comm.process_at_rank(r as i32);
            for piece in buf.chunks(chunk) {
                requests.add(destination.immediate_send_with_tag(scope, piece, tag));
            }
        }
        let mut done = Vec::with_capacity(count);
        requests.wait_all(&mut done);
    });
    received
}

/// Every rank's `u64`s to every other: `send[r]` goes to rank `r`, the result's `[r]` came from
/// rank `r`. Counted as one message of 8 bytes to and from each other rank.
pub(crate) fn all_to_all_u64<C: Communicator>(
    comm: &C,
    send: &[u64],
    traffic: &mut Traffic,
) -> Vec<u64> {
    let mut recv = vec![0u64; send.len()];
    comm.all_to_all_into(send, &mut recv[..]);
    let others = send.len().saturating_sub(1) as u64;
    traffic.bytes_sent += 8 * others;
    traffic.bytes_received += 8 * others;
    traffic.messages_sent += others;
    traffic.messages_received += others;
    recv
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_round_trip_and_bad_messages_are_refused() {
        let m = Csr::try_new(
            3,
            5,
            vec![0, 2, 2, 5],
            vec![0, 4, 1, 2, 3],
            vec![1.0f64, 2.0, 3.0, 4.0, 5.0],
        )
        .unwrap();
        let bytes = pack_rows(&m, [2usize, 0, 1].into_iter());
        assert_eq!(bytes.len() as u64, rows_bytes::<f64>(3, 5));
        let (mut offsets, mut cols, mut values) = (vec![0u64], vec![], vec![]);
        let out = RowsOut {
            offsets: &mut offsets,
            cols: &mut cols,
            values: &mut values,
        };
        unpack_rows::<f64>(&bytes, 3, 5, out, (0, 1)).unwrap();
        assert_eq!(offsets, vec![0, 3, 5, 5]);
        assert_eq!(cols, vec![1, 2, 3, 0, 4]);
        assert_eq!(values, vec![3.0, 4.0, 5.0, 1.0, 2.0]);
        let out = RowsOut {
            offsets: &mut vec![0],
            cols: &mut vec![],
            values: &mut Vec::<f64>::new(),
        };
        // A column past the matrix, and a message one byte short.
        assert!(matches!(
            unpack_rows::<f64>(&bytes, 3, 4, out, (0, 1)),
            Err(Error::Message {
                rank: 0,
                from: 1,
                ..
            })
        ));
        let out = RowsOut {
            offsets: &mut vec![0],
            cols: &mut vec![],
            values: &mut Vec::<f64>::new(),
        };
        assert!(unpack_rows::<f64>(&bytes[..bytes.len() - 1], 3, 5, out, (0, 1)).is_err());
        // A row whose columns do not increase.
        let mut unsorted = bytes.clone();
        let first_col = 8 * 3;
        unsorted[first_col..first_col + 4].copy_from_slice(&2u32.to_le_bytes());
        let out = RowsOut {
            offsets: &mut vec![0],
            cols: &mut vec![],
            values: &mut Vec::<f64>::new(),
        };
        assert!(matches!(
            unpack_rows::<f64>(&unsorted, 3, 5, out, (0, 1)),
            Err(Error::Message { reason, .. }) if reason.contains("column 2 after 2")
        ));
    }

    #[test]
    fn many_rows_round_trip_and_the_first_bad_row_is_named() {
        let m = hetsparse::generate::banded::<f64>(3000, 5, 3);
        let rows: Vec<usize> = (0..3000).rev().step_by(2).collect();
        let bytes = pack_rows(&m, rows.iter().copied());
        let (mut offsets, mut cols, mut values) = (vec![7u64], vec![], vec![]);
        let out = RowsOut {
            offsets: &mut offsets,
            cols: &mut cols,
            values: &mut values,
        };
        unpack_rows::<f64>(&bytes, rows.len(), 3000, out, (0, 1)).unwrap();
        let mut at = 0usize;
        for (i, &r) in rows.iter().enumerate() {
            let (c, v) = m.row(r);
            assert_eq!(offsets[i + 1] - offsets[i], c.len() as u64);
            assert_eq!((&cols[at..at + c.len()], &values[at..at + c.len()]), (c, v));
            at += c.len();
        }
        assert_eq!(offsets.last(), Some(&(7 + cols.len() as u64)));
        // Rows 1200 and 100 of the message out of order: row 100 is named.
        let mut bad = bytes.clone();
        let head = 8 * rows.len();
        let entry = |row: usize| (0..row).map(|i| m.row_nnz(rows[i]) as usize).sum::<usize>();
        for row in [1200, 100] {
            let k = head + 4 * entry(row);
            bad[k..k + 4].copy_from_slice(&2999u32.to_le_bytes());
        }
        let out = RowsOut {
            offsets: &mut vec![0],
            cols: &mut vec![],
            values: &mut Vec::<f64>::new(),
        };
        assert!(matches!(
            unpack_rows::<f64>(&bad, rows.len(), 3000, out, (0, 1)),
            Err(Error::Message { reason, .. }) if reason.starts_with("row 100 of the message")
        ));
    }

    #[test]
    fn complex_and_half_values_travel_exactly() {
        let mut out = Vec::new();
        Complex::new(1.5f64, -2.25).put(&mut out);
        f16::from_f32(0.333).put(&mut out);
        assert_eq!(out.len(), 18);
        assert_eq!(Complex::<f64>::get(&out[..16]), Complex::new(1.5, -2.25));
        assert_eq!(f16::get(&out[16..]), f16::from_f32(0.333));
    }
}
