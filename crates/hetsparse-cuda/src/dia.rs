//! DIA × DIA SpGEMM on the device (Matam et al. §IV.C, Alg. 4; kernel in `kernels-cuda/dia.cu`).
//!
//! Diagonal `a` of A (offset `oa`) times diagonal `b` of B (offset `ob`) contributes to the
//! diagonal `oa + ob` of C, so C's diagonals and which pairs reach each are known on the host
//! from the offsets alone. The kernel gives each row of C a thread; a block of rows first stages
//! the rows of B it touches in shared memory, as Alg. 4 does.

use std::mem::{size_of, MaybeUninit};
use std::ops::Range;

use hetsparse_core::backend::check;
use hetsparse_core::host::try_with_capacity;
use hetsparse_core::{Dia, DiaRowBlock, Error, Result};

use crate::context::{Arg, Gpu, LaunchConfig};
use crate::memory::DeviceBuffer;
use crate::scalar::{as_device, kernel_name, DeviceScalar};

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
    /// The pairs of diagonals of A and B (offsets `a`, `b`) whose sum is one of `offsets`
    /// (increasing), grouped by it; the kernel writes C's diagonals in that order, all of
    /// them (one no pair reaches is zero). Pairs whose sum is not listed are left out: the
    /// caller lists every diagonal that holds a product.
    fn new(a: &[i64], b: &[i64], offsets: &[i64]) -> Self {
        let mut pairs: Vec<(usize, u32, u32)> = Vec::with_capacity(a.len() * b.len());
        for (ia, &oa) in a.iter().enumerate() {
            for (ib, &ob) in b.iter().enumerate() {
                if let Ok(s) = offsets.binary_search(&(oa + ob)) {
                    pairs.push((s, ia as u32, ib as u32));
                }
            }
        }
        pairs.sort_unstable();
        let mut pair_start = Vec::with_capacity(offsets.len() + 1);
        pair_start.push(0u64);
        let mut next = 0;
        for s in 0..offsets.len() {
            while next < pairs.len() && pairs[next].0 == s {
                next += 1;
            }
            pair_start.push(next as u64);
        }
        DiagonalPlan {
            offsets: offsets.to_vec(),
            pair_start,
            pair_a: pairs.iter().map(|p| p.1).collect(),
            pair_b: pairs.iter().map(|p| p.2).collect(),
        }
    }
}

fn count_u32(n: usize, what: &str) -> Result<u32> {
    u32::try_from(n)
        .map_err(|_| Error::InvalidArgument(format!("DIA×DIA SpGEMM: {n} {what}, more than 2^32")))
}

/// `C = A·B` for band matrices, on the device.
pub(crate) fn dia_spgemm<T: DeviceScalar>(gpu: &Gpu, a: &Dia<T>, b: &Dia<T>) -> Result<Dia<T>> {
    check::shapes("DIA×DIA SpGEMM", a.shape(), b.shape())?;
    let m = a.nrows();
    let offsets = a.product_offsets(b);
    let len = m
        .checked_mul(offsets.len())
        .ok_or_else(|| Error::InvalidArgument("DIA×DIA SpGEMM: C's size overflows".into()))?;
    let mut data: Vec<T> = try_with_capacity(len, "DIA×DIA result")?;
    hetsparse_core::advise_huge_pages(data.spare_capacity_mut());
    if len > 0 {
        let mut c: Vec<&mut [MaybeUninit<T>]> =
            data.spare_capacity_mut()[..len].chunks_mut(m).collect();
        dia_spgemm_rows(gpu, a, b, 0..m, &offsets, &mut c)?;
    }
    // SAFETY: `dia_spgemm_rows` wrote every slot of every diagonal (rows 0..m).
    unsafe { data.set_len(len) };
    Ok(Dia::try_new(m, b.ncols(), offsets, data)?)
}

/// Rows `rows` of `C = A·B` for band matrices, computed on the device from the rows of A and
/// B they need ([`DiaRowBlock`], uploaded diagonal by diagonal from where they lie) and
/// downloaded into `c` (`c[d]`: those rows of C's diagonal `offsets[d]`), every slot. The
/// caller checks the arguments.
///
/// Rows whose operands and output would not fit half the device memory left to this backend
/// (its budget, or what the driver reports free) go through in blocks of rows that do: A, B
/// and C may each be larger than the device. The blocks run on two lanes, each with its own
/// stream and half that memory, so that one block's download overlaps the next one's upload
/// and kernel (a block alone uses the link one way at a time).
pub(crate) fn dia_spgemm_rows<T: DeviceScalar>(
    gpu: &Gpu,
    a: &Dia<T>,
    b: &Dia<T>,
    rows: Range<usize>,
    offsets: &[i64],
    c: &mut [&mut [MaybeUninit<T>]],
) -> Result<()> {
    // Per row of C: a slot of each diagonal of A, of C, and of B (whose rows run ahead of
    // A's by the band's width, counted once per block below).
    let per_row = ((a.ndiags() + b.ndiags() + offsets.len()) * size_of::<T>()) as u64;
    let span = match (a.offsets().first(), a.offsets().last()) {
        (Some(lo), Some(hi)) => (hi - lo) as u64,
        _ => 0,
    };
    gpu.bind()?;
    let free = match crate::memory::free_device_memory() {
        0 => u64::MAX,
        bytes => bytes,
    };
    let budget = gpu.memory().available().min(free) / 2;
    let fits = (budget / per_row.max(1)).saturating_sub(span) as usize;
    if fits == 0 {
        return Err(Error::OutOfMemory {
            backend: hetsparse_core::BackendKind::Cuda,
            what: format!("one row of a DIA×DIA product ({per_row} bytes a row, band of {span})"),
            needed_bytes: per_row.saturating_mul(span + 1),
            available_bytes: budget,
        });
    }
    if rows.len() <= fits {
        return dia_rows_on_device(gpu, a, b, rows, offsets, c);
    }
    // Each lane's block fits half the memory; where half fits no row, one lane.
    let (lanes, block_rows) = match (budget / 2 / per_row.max(1)).saturating_sub(span) as usize {
        0 => (1, fits),
        half => (DIA_LANES, half),
    };
    let _span = tracing::debug_span!(
        "dia_out_of_core",
        rows = ?rows,
        rows_per_block = block_rows,
        lanes
    )
    .entered();
    // Every block's rows of every diagonal of C, split up front so that the lanes own them.
    let mut blocks: Vec<(Range<usize>, RowsOfC<'_, T>)> = (rows.start..rows.end)
        .step_by(block_rows)
        .map(|start| {
            let end = (start + block_rows).min(rows.end);
            (start..end, Vec::with_capacity(c.len()))
        })
        .collect();
    for out in c.iter_mut() {
        for (block, piece) in blocks.iter_mut().zip(out.chunks_mut(block_rows)) {
            block.1.push(piece);
        }
    }
    let queue = std::sync::Mutex::new(blocks.into_iter());
    let failed = std::sync::atomic::AtomicBool::new(false);
    let parent = tracing::Span::current();
    let run_lane = |lane: usize| -> Result<()> {
        let _lane = tracing::debug_span!(parent: &parent, "dia_lane", lane).entered();
        while !failed.load(std::sync::atomic::Ordering::Relaxed) {
            let next = queue.lock().unwrap_or_else(|p| p.into_inner()).next();
            let Some((block, mut part)) = next else {
                break;
            };
            if let Err(e) = dia_rows_on_device(gpu, a, b, block, offsets, &mut part) {
                failed.store(true, std::sync::atomic::Ordering::Relaxed);
                return Err(e);
            }
        }
        Ok(())
    };
    let results: Vec<Result<()>> = std::thread::scope(|s| {
        // A lane whose thread cannot be started leaves its blocks to the others.
        let others: Vec<_> = (1..lanes)
            .filter_map(|k| {
                std::thread::Builder::new()
                    .name(format!("hetsparse-dia-lane-{k}"))
                    .spawn_scoped(s, move || run_lane(k))
                    .ok()
            })
            .collect();
        let mut results = vec![run_lane(0)];
        for other in others {
            results.push(
                other
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
            );
        }
        results
    });
    results.into_iter().collect()
}

/// A block's rows of every diagonal of C.
type RowsOfC<'c, T> = Vec<&'c mut [MaybeUninit<T>]>;

/// Lanes an out-of-core DIA product runs its blocks on: two keep the link busy both ways.
const DIA_LANES: usize = 2;

/// [`dia_spgemm_rows`] for rows whose block fits the device.
fn dia_rows_on_device<T: DeviceScalar>(
    gpu: &Gpu,
    a: &Dia<T>,
    b: &Dia<T>,
    rows: Range<usize>,
    offsets: &[i64],
    c: &mut [&mut [MaybeUninit<T>]],
) -> Result<()> {
    let zero = |c: &mut [&mut [MaybeUninit<T>]]| {
        for out in c.iter_mut() {
            out.iter_mut().for_each(|x| {
                x.write(T::zero());
            });
        }
    };
    let Some(block) = DiaRowBlock::new(a, b, rows.clone()) else {
        zero(c);
        return Ok(());
    };
    let (nrows, inner, ncols) = (rows.len(), block.inner.len(), b.ncols());
    let offsets_a: Vec<i64> = block.a_diagonals.iter().map(|&(_, o)| o).collect();
    let offsets_b: Vec<i64> = block.b_diagonals.iter().map(|&(_, o)| o).collect();
    // C's diagonals in the block's coordinates, in the caller's order: the kernel writes them
    // as `c` lays them out.
    let wanted: Vec<i64> = offsets.iter().map(|s| s + rows.start as i64).collect();
    let plan = DiagonalPlan::new(&offsets_a, &offsets_b, &wanted);
    let _span = tracing::debug_span!(
        "dia_spgemm",
        rows = ?rows,
        inner,
        ncols,
        a_diagonals = offsets_a.len(),
        b_diagonals = offsets_b.len(),
        c_diagonals = plan.offsets.len()
    )
    .entered();
    if plan.pair_a.is_empty() {
        zero(c);
        return Ok(());
    }
    gpu.bind()?;
    let stream = gpu.stream()?;
    let mem = gpu.memory();
    let c_len = nrows
        .checked_mul(plan.offsets.len())
        .ok_or_else(|| Error::InvalidArgument("DIA×DIA SpGEMM: C's size overflows".into()))?;
    // The block's diagonals, each copied from its rows of A or B through page-locked staging.
    let diagonals = |m: &Dia<T>, kept: &[(usize, i64)], range: &Range<usize>, what: &str| {
        let mut buffer =
            DeviceBuffer::<T::Device>::new(mem, &stream, kept.len() * range.len(), what)?;
        let mut to = buffer.write(&stream)?;
        for (k, &(d, _)) in kept.iter().enumerate() {
            to.sub_mut(k * range.len(), range.len()).upload_staged(
                &stream,
                gpu.pinned_pool(),
                as_device(&m.diagonal(d)[range.clone()]),
            )?;
        }
        Ok::<_, Error>(buffer)
    };
    // For A · A with one matrix, the block's rows of B (`inner`, the band around its rows)
    // hold its rows of A: A's diagonals are copied on the device from B's instead of crossing
    // the link (and the host's memory) a second time.
    let a_within_b = std::ptr::eq(a, b)
        && block.inner.start <= block.rows.start
        && block.rows.end <= block.inner.end;
    let (off_a, data_b, data_a, off_c, pair_start, pair_a, pair_b) = {
        let _h = tracing::debug_span!("H2D", pairs = plan.pair_a.len(), a_within_b).entered();
        let data_b = diagonals(b, &block.b_diagonals, &block.inner, "DIA data of B")?;
        let data_a = if a_within_b {
            let rows = block.rows.len();
            let shift = block.rows.start - block.inner.start;
            let mut data_a = DeviceBuffer::<T::Device>::new(
                mem,
                &stream,
                block.a_diagonals.len() * rows,
                "DIA data of A",
            )?;
            let mut all = data_a.write(&stream)?;
            let from_b = data_b.read(&stream)?;
            for (k, &(d, _)) in block.a_diagonals.iter().enumerate() {
                let mut to = all.sub_mut(k * rows, rows);
                match block.b_diagonals.iter().position(|&(e, _)| e == d) {
                    Some(kb) => {
                        to.copy_from(&stream, from_b.sub(kb * block.inner.len() + shift, rows))?
                    }
                    None => to.upload_staged(
                        &stream,
                        gpu.pinned_pool(),
                        as_device(&a.diagonal(d)[block.rows.clone()]),
                    )?,
                }
            }
            data_a
        } else {
            diagonals(a, &block.a_diagonals, &block.rows, "DIA data of A")?
        };
        (
            DeviceBuffer::from_host(mem, &stream, &offsets_a, "DIA offsets of A")?,
            data_b,
            data_a,
            DeviceBuffer::from_host(mem, &stream, &plan.offsets, "DIA offsets of C")?,
            DeviceBuffer::from_host(mem, &stream, &plan.pair_start, "DIA pair starts")?,
            DeviceBuffer::from_host(mem, &stream, &plan.pair_a, "DIA pairs (A)")?,
            DeviceBuffer::from_host(mem, &stream, &plan.pair_b, "DIA pairs (B)")?,
        )
    };
    let mut data_c = DeviceBuffer::<T::Device>::new(mem, &stream, c_len, "DIA data of C")?;

    // The tile holds BlockSize + (max oa - min oa) rows of every diagonal of B.
    let span = (offsets_a[offsets_a.len() - 1] - offsets_a[0]) as u64;
    let tile_bytes = (u64::from(ROWS_PER_BLOCK) + span)
        .saturating_mul(offsets_b.len() as u64)
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
                    Arg::U32(count_u32(offsets_a.len(), "diagonals in A")?),
                    off_a.read(&stream)?.arg(),
                    data_a.read(&stream)?.arg(),
                    Arg::U32(count_u32(offsets_b.len(), "diagonals in B")?),
                    data_b.read(&stream)?.arg(),
                    Arg::U64(ncols as u64),
                    Arg::U32(count_u32(plan.offsets.len(), "diagonals in C")?),
                    off_c.read(&stream)?.arg(),
                    pair_start.read(&stream)?.arg(),
                    pair_a.read(&stream)?.arg(),
                    pair_b.read(&stream)?.arg(),
                    data_c.write(&stream)?.arg_mut(),
                    Arg::U32(u32::from(staged)),
                ],
            )?;
        }
    }
    let _d = tracing::debug_span!("D2H", bytes = c_len * size_of::<T>()).entered();
    // Every diagonal straight into its place in C, one pipeline through page-locked staging.
    let mut outs: Vec<&mut [MaybeUninit<T::Device>]> = c
        .iter_mut()
        .map(|out| {
            // SAFETY: `T::Device` has `T`'s layout (DeviceScalar's contract), so uninitialised
            // slots of one are uninitialised slots of the other.
            unsafe {
                std::slice::from_raw_parts_mut(
                    out.as_mut_ptr() as *mut MaybeUninit<T::Device>,
                    out.len(),
                )
            }
        })
        .collect();
    data_c
        .read(&stream)?
        .download_staged_into(&stream, gpu.pinned_pool(), &mut outs)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_are_grouped_by_the_diagonals_asked_for() {
        // A's diagonals -1, 0, 2 and B's 0, 1: sums -1, 0, 0, 1, 2, 3. Asked for -1, 0, 2, 5:
        // 1 and 3 are left out, 5 has no pair.
        let p = DiagonalPlan::new(&[-1, 0, 2], &[0, 1], &[-1, 0, 2, 5]);
        assert_eq!(p.offsets, vec![-1, 0, 2, 5]);
        assert_eq!(p.pair_start, vec![0, 1, 3, 4, 4]);
        assert_eq!(p.pair_a, vec![0, 0, 1, 2]);
        assert_eq!(p.pair_b, vec![0, 1, 0, 0]);
        let empty = DiagonalPlan::new(&[], &[0], &[0]);
        assert!(empty.pair_a.is_empty() && empty.pair_start == vec![0, 0]);
    }
}
