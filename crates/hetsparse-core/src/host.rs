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

/// The backend name host buffer errors carry.
pub const HOST: &str = "host";

/// 0 means "not set": the host's physical memory.
static LIMIT: AtomicU64 = AtomicU64::new(0);

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
        backend: HOST.into(),
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

/// Room for `additional` more elements in `v`, or [`Error::OutOfMemory`] naming `what`.
pub fn try_reserve<X>(v: &mut Vec<X>, additional: usize, what: &str) -> Result<()> {
    let total = (v.len() as u64).saturating_add(additional as u64);
    check_buffer::<X>(total, what)?;
    v.try_reserve(additional)
        .map_err(|_| out_of_memory(what, total.saturating_mul(std::mem::size_of::<X>() as u64)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_above_the_limit_are_refused_with_their_size() {
        let e = check_buffer::<u64>(1 << 62, "offsets").unwrap_err();
        assert!(matches!(
            e,
            Error::OutOfMemory { ref backend, ref what, needed_bytes, .. }
                if backend == HOST && what == "offsets" && needed_bytes == u64::MAX
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
