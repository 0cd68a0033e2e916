//! Result buffers: allocated without aborting on failure, backed by huge pages where the
//! kernel offers them, and first written in parallel.

use hetsparse_core::{Error, Result};
use rayon::prelude::*;

/// Buffers of more elements are filled in parallel.
const PARALLEL_FILL_MIN: usize = 1 << 15;

/// `len` copies of `fill`, written in parallel, or [`Error::OutOfMemory`] when the host cannot
/// provide them. `what` names the buffer in the error.
pub(crate) fn filled<X: Copy + Send + Sync>(len: usize, fill: X, what: &str) -> Result<Vec<X>> {
    let mut v = reserved(len, what)?;
    let write = |chunk: &mut [std::mem::MaybeUninit<X>]| {
        for slot in chunk {
            slot.write(fill);
        }
    };
    let slots = &mut v.spare_capacity_mut()[..len];
    if len <= PARALLEL_FILL_MIN {
        // Small buffers are filled on the calling thread, which may be outside any pool.
        write(slots);
    } else {
        slots.par_chunks_mut(PARALLEL_FILL_MIN).for_each(write);
    }
    // SAFETY: the first `len` slots were all written just above.
    unsafe { v.set_len(len) };
    Ok(v)
}

/// An empty vector with room for exactly `len` elements (huge pages asked for), for kernels
/// that write every element themselves; [`Error::OutOfMemory`] when the host cannot provide it.
pub(crate) fn reserved<X>(len: usize, what: &str) -> Result<Vec<X>> {
    let mut v = Vec::new();
    v.try_reserve_exact(len).map_err(|_| Error::OutOfMemory {
        backend: "cpu".into(),
        what: what.into(),
        needed_bytes: (len as u64).saturating_mul(std::mem::size_of::<X>() as u64),
        available_bytes: hetsparse_core::host_memory_bytes(),
    })?;
    hetsparse_core::advise_huge_pages(v.spare_capacity_mut());
    Ok(v)
}
