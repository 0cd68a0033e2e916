//! DIA × DIA SpGEMM on the device (Matam et al. §IV.C, Alg. 4; kernel in `kernels-cuda/dia.cu`).
//!
//! Diagonal `a` of A (offset `oa`) times diagonal `b` of B (offset `ob`) contributes to the
//! diagonal `oa + ob` of C, so C's diagonals and which pairs reach each are known on the host
//! from the offsets alone. The kernel gives each row of C a thread; a block of rows first stages
//! the rows of B it touches in shared memory, as Alg. 4 does.

use std::mem::size_of;

use hetsparse_core::backend::check;
use hetsparse_core::{Dia, Error, Result};

use crate::context::{Arg, Gpu, LaunchConfig, Stream};
use crate::memory::DeviceBuffer;
use crate::scalar::{as_device, from_device, kernel_name, DeviceScalar};

/// Rows of C per thread block (Alg. 4's BlockSize).
const ROWS_PER_BLOCK: u32 = 128;

/// Shared memory the B tile may use: the 48 KiB every GPU grants a block without opting in.
const MAX_TILE_BYTES: u64 = 48 << 10;

/// C's diagonals and, for each, the (diagonal of A, diagonal of B) pairs that reach it.
#[derive(Debug, PartialEq, Eq)]
struct DiagonalPlan {
    offsets: Vec<i64>,
    /// Pairs of output diagonal `s` are `pair_start[s]..pair_start[s + 1]`.
    pair_start: Vec<u64>,
    pair_a: Vec<u32>,
    pair_b: Vec<u32>,
}

impl DiagonalPlan {
    /// Pairs whose diagonal lies inside the `nrows × ncols` product, grouped by that diagonal.
    fn new(a: &[i64], b: &[i64], nrows: usize, ncols: usize) -> Self {
        let mut pairs: Vec<(i64, u32, u32)> = Vec::with_capacity(a.len() * b.len());
        for (ia, &oa) in a.iter().enumerate() {
            for (ib, &ob) in b.iter().enumerate() {
                let s = oa + ob;
                if s > -(nrows as i64) && s < ncols as i64 {
                    pairs.push((s, ia as u32, ib as u32));
                }
            }
        }
        pairs.sort_unstable();
        let mut plan = DiagonalPlan {
            offsets: Vec::new(),
            pair_start: vec![0],
            pair_a: Vec::with_capacity(pairs.len()),
            pair_b: Vec::with_capacity(pairs.len()),
        };
        for (k, &(s, ia, ib)) in pairs.iter().enumerate() {
            if plan.offsets.last() != Some(&s) {
                if k > 0 {
                    plan.pair_start.push(k as u64);
                }
                plan.offsets.push(s);
            }
            plan.pair_a.push(ia);
            plan.pair_b.push(ib);
        }
        if !pairs.is_empty() {
            plan.pair_start.push(pairs.len() as u64);
        }
        plan
    }
}

fn count_u32(n: usize, what: &str) -> Result<u32> {
    u32::try_from(n)
        .map_err(|_| Error::InvalidArgument(format!("DIA×DIA SpGEMM: {n} {what}, more than 2^32")))
}

/// `C = A·B` for band matrices, on the device.
pub(crate) fn dia_spgemm<T: DeviceScalar>(gpu: &Gpu, a: &Dia<T>, b: &Dia<T>) -> Result<Dia<T>> {
    check::shapes("DIA×DIA SpGEMM", a.shape(), b.shape())?;
    let (nrows, inner) = a.shape();
    let ncols = b.ncols();
    let plan = DiagonalPlan::new(a.offsets(), b.offsets(), nrows, ncols);
    let _span = tracing::debug_span!(
        "dia_spgemm",
        nrows,
        inner,
        ncols,
        a_diagonals = a.ndiags(),
        b_diagonals = b.ndiags(),
        c_diagonals = plan.offsets.len()
    )
    .entered();
    if plan.offsets.is_empty() || nrows == 0 {
        return Ok(Dia::try_new(nrows, ncols, Vec::new(), Vec::new())?);
    }
    gpu.bind()?;
    let stream = Stream::new()?;
    let mem = gpu.memory();
    let c_len = nrows
        .checked_mul(plan.offsets.len())
        .ok_or_else(|| Error::InvalidArgument("DIA×DIA SpGEMM: C's size overflows".into()))?;
    let (off_a, data_a, data_b, off_c, pair_start, pair_a, pair_b) = {
        let _h = tracing::debug_span!("H2D", pairs = plan.pair_a.len()).entered();
        (
            DeviceBuffer::from_host(mem, &stream, a.offsets(), "DIA offsets of A")?,
            DeviceBuffer::from_host(mem, &stream, as_device(a.data()), "DIA data of A")?,
            DeviceBuffer::from_host(mem, &stream, as_device(b.data()), "DIA data of B")?,
            DeviceBuffer::from_host(mem, &stream, &plan.offsets, "DIA offsets of C")?,
            DeviceBuffer::from_host(mem, &stream, &plan.pair_start, "DIA pair starts")?,
            DeviceBuffer::from_host(mem, &stream, &plan.pair_a, "DIA pairs (A)")?,
            DeviceBuffer::from_host(mem, &stream, &plan.pair_b, "DIA pairs (B)")?,
        )
    };
    let data_c = DeviceBuffer::<T::Device>::new(mem, c_len, "DIA data of C")?;

    // The tile holds BlockSize + (max oa - min oa) rows of every diagonal of B.
    let offsets_a = a.offsets();
    let span = (offsets_a[offsets_a.len() - 1] - offsets_a[0]) as u64;
    let tile_bytes = (u64::from(ROWS_PER_BLOCK) + span)
        .saturating_mul(b.ndiags() as u64)
        .saturating_mul(size_of::<T>() as u64);
    let staged = tile_bytes <= MAX_TILE_BYTES.min(u64::from(gpu.max_shared_per_block()));
    let mut config = LaunchConfig::for_threads(nrows as u64, ROWS_PER_BLOCK);
    if staged {
        config.shared_bytes = tile_bytes as u32;
    }
    {
        let _k = tracing::debug_span!("kernel", staged, tile_bytes).entered();
        let f = gpu.function("dia", kernel_name::<T>("dia_spgemm"))?;
        // SAFETY: the arguments of `dia_spgemm` in `dia.cu`, in order, over buffers of the
        // sizes the kernel reads (A: ndiags_a × nrows, B: ndiags_b × inner, C: ndiags_c × nrows).
        unsafe {
            gpu.launch(
                f,
                config,
                &stream,
                &[
                    Arg::U64(nrows as u64),
                    Arg::U64(inner as u64),
                    Arg::U32(count_u32(a.ndiags(), "diagonals in A")?),
                    off_a.slice().arg(),
                    data_a.slice().arg(),
                    Arg::U32(count_u32(b.ndiags(), "diagonals in B")?),
                    data_b.slice().arg(),
                    Arg::U64(ncols as u64),
                    Arg::U32(count_u32(plan.offsets.len(), "diagonals in C")?),
                    off_c.slice().arg(),
                    pair_start.slice().arg(),
                    pair_a.slice().arg(),
                    pair_b.slice().arg(),
                    data_c.slice().arg(),
                    Arg::U32(u32::from(staged)),
                ],
            )?;
        }
    }
    let _d = tracing::debug_span!("D2H", bytes = c_len * size_of::<T>()).entered();
    let data = data_c.slice().to_vec(&stream)?;
    Ok(Dia::try_new(
        nrows,
        ncols,
        plan.offsets,
        from_device::<T>(&data).to_vec(),
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_diagonals_are_the_sums_inside_the_product() {
        // A: 4×5 with diagonals -1, 0, 2; B: 5×3 with diagonals 0, 1.
        let p = DiagonalPlan::new(&[-1, 0, 2], &[0, 1], 4, 3);
        // Sums -1, 0, 0, 1, 2, 3: 3 lies outside a 4×3 product.
        assert_eq!(p.offsets, vec![-1, 0, 1, 2]);
        assert_eq!(p.pair_start, vec![0, 1, 3, 4, 5]);
        assert_eq!(p.pair_a, vec![0, 0, 1, 1, 2]);
        assert_eq!(p.pair_b, vec![0, 1, 0, 1, 0]);
        let empty = DiagonalPlan::new(&[], &[0], 3, 3);
        assert!(empty.offsets.is_empty() && empty.pair_start == vec![0]);
    }
}
