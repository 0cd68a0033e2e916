//! Matam et al.'s dense-tile algorithms: Row-Row (Alg. 1, a warp per row of A, TR_b columns
//! of PartialOutput per warp) and Column-Row (Alg. 2, a block per part of A, a thread per
//! nonzero of the part, TC_b columns of PartialOutput per row of the part). Both mark
//! NonZeroIndices atomically and compact each tile in column order, so rows come out sorted;
//! the symbolic pass runs the same kernels without values.

use std::ops::Range;

use hetsparse_core::Result;

use crate::context::{Arg, LaunchConfig};
use crate::memory::{DeviceSlice, DeviceSliceMut};
use crate::scalar::{kernel_name, DeviceScalar};

use super::{acc_bytes, Job};

/// Which of Matam's two formulations.
#[derive(Clone, Copy, Debug)]
pub(super) enum Tiling {
    RowRow,
    ColumnRow,
}

// Must match RR_* and CR_* in kernels-cuda/spgemm.cu.
const RR_TRB: u64 = 256;
const RR_WARPS: u64 = 4;
const CR_ROWS: u64 = 8;
const CR_TCB: u64 = 128;

impl Tiling {
    fn name(self) -> &'static str {
        match self {
            Tiling::RowRow => "rowrow",
            Tiling::ColumnRow => "colrow",
        }
    }
    /// Grid, block and shared memory for `nrows` rows; `acc` is 0 for the symbolic pass.
    fn config(self, nrows: u64, acc: u64) -> LaunchConfig {
        let (per_block, block, tile_rows, tile_cols) = match self {
            Tiling::RowRow => (RR_WARPS, 32 * RR_WARPS as u32, RR_WARPS, RR_TRB),
            Tiling::ColumnRow => (CR_ROWS, 32 * CR_ROWS as u32, CR_ROWS, CR_TCB),
        };
        LaunchConfig {
            grid: nrows.div_ceil(per_block).clamp(1, 1 << 20) as u32,
            block,
            shared_bytes: (tile_rows * tile_cols * acc + tile_rows * tile_cols / 8) as u32,
        }
    }
}

/// Entries per row of the chunk, into `row_nnz` (on the device).
pub(super) fn symbolic<T: DeviceScalar>(
    job: &Job<'_, T>,
    tiling: Tiling,
    row_nnz: &mut DeviceSliceMut<'_, u64>,
) -> Result<()> {
    let n = job.nrows();
    let _span = tracing::debug_span!("symbolic", algorithm = tiling.name(), rows = n).entered();
    let name = match tiling {
        Tiling::RowRow => "spgemm_rowrow_symbolic",
        Tiling::ColumnRow => "spgemm_colrow_symbolic",
    };
    let f = job.gpu.function("spgemm", name)?;
    // SAFETY: arguments match the symbolic kernels; row_nnz has a slot per row.
    unsafe {
        job.gpu.launch(
            f,
            tiling.config(n as u64, 0),
            job.stream,
            &[
                Arg::U64(job.rows().start as u64),
                Arg::U64(n as u64),
                job.a.matrix().offsets.read(job.stream)?.arg(),
                job.a.matrix().cols.read(job.stream)?.arg(),
                job.b.matrix().offsets.read(job.stream)?.arg(),
                job.b.matrix().cols.read(job.stream)?.arg(),
                Arg::U32(job.col_lo()),
                Arg::U32(job.col_hi()),
                row_nnz.arg_mut(),
            ],
        )
    }
}

/// Writes rows `range` (chunk-relative) of C into `cols`/`vals`, entry `c_off[i] - base` first.
pub(super) fn numeric<T: DeviceScalar>(
    job: &Job<'_, T>,
    tiling: Tiling,
    range: Range<usize>,
    c_off: DeviceSlice<'_, u64>,
    base: u64,
    mut cols: DeviceSliceMut<'_, u32>,
    mut vals: DeviceSliceMut<'_, T::Device>,
) -> Result<()> {
    let n = range.len() as u64;
    if n == 0 {
        return Ok(());
    }
    let base_name = match tiling {
        Tiling::RowRow => "spgemm_rowrow_numeric",
        Tiling::ColumnRow => "spgemm_colrow_numeric",
    };
    let f = job.gpu.function("spgemm", kernel_name::<T>(base_name))?;
    // SAFETY: arguments match the numeric kernels; c_off covers the batch's rows and one more,
    // the output buffers hold the batch's entries.
    unsafe {
        job.gpu.launch(
            f,
            tiling.config(n, acc_bytes::<T>()),
            job.stream,
            &[
                Arg::U64((job.rows().start + range.start) as u64),
                Arg::U64(n),
                job.a.matrix().offsets.read(job.stream)?.arg(),
                job.a.matrix().cols.read(job.stream)?.arg(),
                job.a.matrix().vals.read(job.stream)?.arg(),
                job.b.matrix().offsets.read(job.stream)?.arg(),
                job.b.matrix().cols.read(job.stream)?.arg(),
                job.b.matrix().vals.read(job.stream)?.arg(),
                Arg::U32(job.col_lo()),
                Arg::U32(job.col_hi()),
                c_off.sub(range.start, range.len() + 1).arg(),
                Arg::U64(base),
                cols.arg_mut(),
                vals.arg_mut(),
            ],
        )
    }
}
