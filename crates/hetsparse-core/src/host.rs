//! Host buffers whose size comes from the input (a dimension, an entry count, a block shape):
//! asked for without aborting, and refused above a per-buffer limit.
//!
//! Rust's infallible allocation aborts the process when the allocator says no, and on Linux it
//! often says yes to far more than the machine has and the process dies later, when the pages are
//! touched. Every buffer sized from user-controlled numbers therefore goes through
//! [`try_filled`] or [`try_with_capacity`]: a buffer above [`buffer_limit`] (the host's physical
//! memory unless [`set_buffer_limit`] lowered it) is refused at once, and a smaller one the
//! allocator refuses is refused too, both as [`Error::OutOfMemory`] naming the buffer and the
//! bytes it needs. The same input therefore gets the same answer from every backend that computes
//! in host memory.
//!
//! ```
//! use hetsparse_core::{host, Error};
//! let v: Vec<u64> = host::try_filled(4, 0, "row offsets")?;
//! assert_eq!(v, [0; 4]);
//! // 2^61 eight-byte values cannot exist on any host.
//! let e = host::try_filled(1usize << 61, 0u64, "row offsets").unwrap_err();
//! assert!(matches!(e, Error::OutOfMemory { needed_bytes, .. } if needed_bytes == u64::MAX));
//! # Ok::<(), hetsparse_core::Error>(())
//! ```

use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, Result};

/// 0 means "not set": the host's physical memory.
static LIMIT: AtomicU64 = AtomicU64::new(0);

/// `count` entries as a length, or [`Error::TooLarge`] naming `what` where this host's
/// addresses cannot reach that many (counts are 64-bit everywhere, lengths are `usize`).
pub fn entry_count(count: u64, what: &str) -> Result<usize> {
    usize::try_from(count).map_err(|_| Error::TooLarge {
        what: what.into(),
        needed: count,
        limit: usize::MAX as u64,
        unit: "entries",
    })
}

/// The most bytes one host buffer sized from the input may take: the host's physical memory
/// (or unlimited where it cannot be read), unless [`set_buffer_limit`] set another.
pub fn buffer_limit() -> u64 {
    match LIMIT.load(Ordering::Relaxed) {
        0 => {
            static PHYSICAL: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
            *PHYSICAL.get_or_init(|| match crate::host_memory_bytes() {
                0 => u64::MAX,
                bytes => bytes,
            })
        }
        set => set,
    }
}

/// Sets the most bytes one host buffer sized from the input may take, for the whole process
/// (0 restores the default, the host's physical memory). A service reading untrusted matrices
/// sets it to what one request may use.
pub fn set_buffer_limit(bytes: u64) {
    LIMIT.store(bytes, Ordering::Relaxed);
}

/// The error for a host buffer of `needed_bytes` named `what` that cannot be had.
pub fn out_of_memory(what: &str, needed_bytes: u64) -> Error {
    Error::OutOfMemory {
        backend: crate::BackendKind::Host,
        what: what.into(),
        needed_bytes,
        available_bytes: buffer_limit(),
    }
}

/// Checks that `len` elements of `X` fit under [`buffer_limit`]; [`Error::OutOfMemory`] with
/// the bytes they need otherwise.
pub fn check_buffer<X>(len: u64, what: &str) -> Result<()> {
    let bytes = u128::from(len) * std::mem::size_of::<X>() as u128;
    if bytes > u128::from(buffer_limit()) || bytes > isize::MAX as u128 {
        return Err(out_of_memory(
            what,
            u64::try_from(bytes).unwrap_or(u64::MAX),
        ));
    }
    Ok(())
}

/// An empty vector with room for `len` elements, or [`Error::OutOfMemory`].
pub fn try_with_capacity<X>(len: usize, what: &str) -> Result<Vec<X>> {
    check_buffer::<X>(len as u64, what)?;
    let mut v = Vec::new();
    v.try_reserve_exact(len).map_err(|_| {
        out_of_memory(
            what,
            (len as u64).saturating_mul(std::mem::size_of::<X>() as u64),
        )
    })?;
    Ok(v)
}

/// `len` copies of `fill`, or [`Error::OutOfMemory`].
pub fn try_filled<X: Clone>(len: usize, fill: X, what: &str) -> Result<Vec<X>> {
    let mut v = try_with_capacity(len, what)?;
    v.resize(len, fill);
    Ok(v)
}

/// `data` cut into the consecutive, non-overlapping `ranges` (in order, tiling a prefix of
/// it), one slice each: the parts of an output that parallel tasks write.
pub fn split_mut<'d, X>(
    mut data: &'d mut [X],
    ranges: &[std::ops::Range<usize>],
) -> Vec<&'d mut [X]> {
    let mut parts = Vec::with_capacity(ranges.len());
    let mut consumed = 0;
    for r in ranges {
        let (head, tail) = std::mem::take(&mut data).split_at_mut(r.end - consumed);
        parts.push(&mut head[r.start - consumed..]);
        consumed = r.end;
        data = tail;
    }
    parts
}

/// Room for `additional` more elements in `v`, or [`Error::OutOfMemory`] naming `what`.
pub fn try_reserve<X>(v: &mut Vec<X>, additional: usize, what: &str) -> Result<()> {
    let total = (v.len() as u64).saturating_add(additional as u64);
    check_buffer::<X>(total, what)?;
    v.try_reserve(additional)
        .map_err(|_| out_of_memory(what, total.saturating_mul(std::mem::size_of::<X>() as u64)))
}

/// Copies `from` into `to` (of the same length) for data the CPU will not read again soon: a
/// result landing in fresh memory, a staging buffer a device copy reads. On x86-64 the stores
/// are non-temporal (`movntdq`): they go to memory without first reading each destination
/// line into the cache (an ordinary store does, and for fresh memory that read is a third
/// stream of traffic beside the copy's two) and without evicting what the caches hold. Copies
/// under 256 KiB, and other architectures, use an ordinary copy.
///
/// ```
/// use std::mem::MaybeUninit;
/// let from: Vec<u32> = (0..100_000).collect();
/// let mut to = vec![MaybeUninit::<u32>::uninit(); from.len()];
/// hetsparse_core::host::copy_streaming(&mut to, &from);
/// // SAFETY: copy_streaming wrote every element.
/// let to: Vec<u32> = to.into_iter().map(|x| unsafe { x.assume_init() }).collect();
/// assert_eq!(to, from);
/// ```
///
/// # Panics
/// If the slices' lengths differ.
pub fn copy_streaming<X: Copy>(to: &mut [std::mem::MaybeUninit<X>], from: &[X]) {
    assert_eq!(
        to.len(),
        from.len(),
        "streaming copy between slices of other lengths"
    );
    let bytes = std::mem::size_of_val(from);
    let dst = to.as_mut_ptr().cast::<u8>();
    let src = from.as_ptr().cast::<u8>();
    #[cfg(target_arch = "x86_64")]
    if bytes >= STREAMING_MIN_BYTES {
        // SAFETY: `to` and `from` are valid for `bytes` bytes each and cannot overlap (one is
        // borrowed mutably); any bytes are valid contents of MaybeUninit<X>, and after the
        // call `to` holds a bit copy of `from`, as for X: Copy.
        unsafe { copy_non_temporal(dst, src, bytes) };
        return;
    }
    // SAFETY: as above.
    unsafe { std::ptr::copy_nonoverlapping(src, dst, bytes) };
}

/// Faults in every page of `buffer` (fresh memory about to be filled piece by piece), on the
/// host's threads, each taking 2 MiB runs of it, by writing one zero byte a page.
///
/// Filling fresh memory in pieces of a few MB, each spread over every thread, faults its
/// pages in with every thread inside the same few page-table ranges at once: on a 16-core
/// host, 32 chunks of 55 MB written in batches of 14 MB took 170–190 ms; faulted in first,
/// 67–90 ms, then 35–38 ms to write. Only worth it for such piecewise fills: one large
/// parallel copy spreads its threads over the buffer by itself. Buffers under 4 MiB are
/// left alone.
///
/// ```
/// use std::mem::MaybeUninit;
/// let mut v: Vec<f64> = Vec::with_capacity(1 << 20);
/// hetsparse_core::host::prefault(v.spare_capacity_mut());
/// v.extend((0..1 << 20).map(|i| i as f64)); // its pages are already there
/// assert_eq!(v[12345], 12345.0);
/// ```
pub fn prefault<X>(buffer: &mut [std::mem::MaybeUninit<X>]) {
    use rayon::prelude::*;
    const MIN_BYTES: usize = 4 << 20;
    const RUN_BYTES: usize = 2 << 20;
    const PAGE_BYTES: usize = 4096;
    let bytes = std::mem::size_of_val(buffer);
    if bytes < MIN_BYTES {
        return;
    }
    // SAFETY: the same memory as bytes that may hold anything (MaybeUninit<u8> has no
    // validity invariant and alignment 1), borrowed mutably through `buffer`.
    let raw = unsafe {
        std::slice::from_raw_parts_mut(
            buffer.as_mut_ptr().cast::<std::mem::MaybeUninit<u8>>(),
            bytes,
        )
    };
    raw.par_chunks_mut(RUN_BYTES).for_each(|run| {
        for byte in run.iter_mut().step_by(PAGE_BYTES) {
            byte.write(0);
        }
    });
}

/// Below this, a copy's destination lines are as likely to be wanted in the cache soon.
const STREAMING_MIN_BYTES: usize = 256 << 10;

/// Byte copy with non-temporal 16-byte stores (SSE2, part of every x86-64): the unaligned head
/// of `dst` and the tail are copied ordinarily, the body four stores at a time, then a store
/// fence, so that the data is visible to whatever reads it next (another thread, a DMA
/// engine) in order with the stores after this call.
///
/// # Safety
/// `dst` and `src` valid for `bytes` bytes, not overlapping.
#[cfg(target_arch = "x86_64")]
unsafe fn copy_non_temporal(dst: *mut u8, src: *const u8, bytes: usize) {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_sfence, _mm_stream_si128};
    const UNIT: usize = 64;
    let head = dst.align_offset(16).min(bytes);
    // SAFETY (every block below): the offsets stay within `bytes`; the caller's contract.
    unsafe { std::ptr::copy_nonoverlapping(src, dst, head) };
    let body = (bytes - head) / UNIT * UNIT;
    let mut k = head;
    while k < head + body {
        unsafe {
            let s = src.add(k).cast::<__m128i>();
            let d = dst.add(k).cast::<__m128i>();
            let a0 = _mm_loadu_si128(s);
            let a1 = _mm_loadu_si128(s.add(1));
            let a2 = _mm_loadu_si128(s.add(2));
            let a3 = _mm_loadu_si128(s.add(3));
            // `d` is 16-aligned: `head` aligned it and UNIT keeps it so.
            _mm_stream_si128(d, a0);
            _mm_stream_si128(d.add(1), a1);
            _mm_stream_si128(d.add(2), a2);
            _mm_stream_si128(d.add(3), a3);
        }
        k += UNIT;
    }
    unsafe {
        std::ptr::copy_nonoverlapping(src.add(k), dst.add(k), bytes - k);
        _mm_sfence();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streaming_copies_every_byte_at_any_alignment_and_length() {
        use std::mem::MaybeUninit;
        // Above and below the streaming threshold, with heads, bodies and tails of every
        // remainder: destinations and sources start at every offset within 16 bytes.
        let len = STREAMING_MIN_BYTES + 1000;
        let source: Vec<u8> = (0..len + 16).map(|i| (i * 7 + i / 251) as u8).collect();
        for (n, src_off, dst_off) in [
            (len, 0, 0),
            (len, 3, 5),
            (len - 63, 15, 1),
            (len, 8, 0),
            (5, 1, 2),
            (0, 0, 0),
        ] {
            let mut target = vec![MaybeUninit::<u8>::new(0xAA); len + 16];
            let from = &source[src_off..src_off + n];
            copy_streaming(&mut target[dst_off..dst_off + n], from);
            // SAFETY: every element was initialised by `new` or by the copy.
            let got: Vec<u8> = target.iter().map(|x| unsafe { x.assume_init() }).collect();
            assert_eq!(
                &got[dst_off..dst_off + n],
                from,
                "n {n} src {src_off} dst {dst_off}"
            );
            assert!(got[..dst_off].iter().all(|&b| b == 0xAA), "before the copy");
            assert!(
                got[dst_off + n..].iter().all(|&b| b == 0xAA),
                "after the copy"
            );
        }
        // Wider elements.
        let wide: Vec<f64> = (0..100_000).map(|i| i as f64 * 0.5).collect();
        let mut to = vec![MaybeUninit::<f64>::uninit(); wide.len()];
        copy_streaming(&mut to, &wide);
        // SAFETY: the copy wrote every element.
        assert!(to
            .iter()
            .zip(&wide)
            .all(|(a, b)| unsafe { a.assume_init() } == *b));
    }

    #[test]
    fn buffers_above_the_limit_are_refused_with_their_size() {
        let e = check_buffer::<u64>(1 << 62, "offsets").unwrap_err();
        assert!(matches!(
            e,
            Error::OutOfMemory { backend, ref what, needed_bytes, .. }
                if backend == crate::BackendKind::Host && what == "offsets" && needed_bytes == u64::MAX
        ));
        assert!(check_buffer::<u64>(16, "offsets").is_ok());
        let e = try_filled(usize::MAX / 2, 0u32, "counts").unwrap_err();
        assert!(matches!(e, Error::OutOfMemory { needed_bytes, .. } if needed_bytes == u64::MAX));
        let e = try_filled(1usize << 40, 0u32, "counts").unwrap_err();
        assert!(matches!(e, Error::OutOfMemory { needed_bytes, .. } if needed_bytes == 1 << 42));
        let mut v = vec![1u8];
        assert!(try_reserve(&mut v, usize::MAX - 4, "bytes").is_err());
        try_reserve(&mut v, 3, "bytes").unwrap();
        assert!(v.capacity() >= 4);
    }
}
