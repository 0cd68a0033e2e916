//! Result buffers: allocated without aborting on failure, backed by huge pages where the
//! kernel offers them, and first written in parallel.

use hetsparse_core::Result;
use rayon::prelude::*;

/// Buffers of more elements are filled in parallel.
const PARALLEL_FILL_MIN: usize = 1 << 15;

/// `len` copies of `fill`, written in parallel, or [`Error::OutOfMemory`](hetsparse_core::Error::OutOfMemory) when the host cannot
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
/// that write every element themselves; [`Error::OutOfMemory`](hetsparse_core::Error::OutOfMemory) when the host cannot provide it.
///
/// The host's limit on one buffer ([`hetsparse_core::host::buffer_limit`]) applies, so the CPU
/// backend refuses exactly what the reference backend refuses, with the same error.
pub(crate) fn reserved<X>(len: usize, what: &str) -> Result<Vec<X>> {
    let mut v = hetsparse_core::host::try_with_capacity(len, what)?;
    hetsparse_core::advise_huge_pages(v.spare_capacity_mut());
    Ok(v)
}
