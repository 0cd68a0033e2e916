//! SpGEMM over a semiring other than plus-times, with a mask, or over the integer types and
//! `bool` (GraphBLAS semantics, [`hetsparse_core::semiring`]): `kernels-cuda/semiring.cu`.
//!
//! A product's pattern does not depend on its semiring, so C's structure is found first and
//! its values second, by one kernel per semiring and type (a precompiled set: 126 small
//! kernels in one module and 78 for heavy rows, loaded on first use, instead of the plus-times pipeline's dozens of
//! kernels per type multiplied by thirteen semirings):
//!
//! - **Unmasked**: the structure is the plus-times pipeline's, run on ones (values of `f32`
//!   that share A's and B's structure on the device), so that every method and size the
//!   pipeline handles (hub rows, long rows, ESC) gives the pattern here too.
//! - **Mask, not complemented**: the structure is the mask's positions some product lands on
//!   (`sr_mask_hits`): each product's column is looked up in the mask row before anything is
//!   multiplied, and only the admitted products are multiplied in the values' pass, so that
//!   triangle counting's `C⟨L⟩ = L·L` does a fraction of the unmasked multiply-adds
//!   ([`RunControl::masked_work`] says how many).
//! - **Complemented mask**: it admits what its matrix does not hold, so there is no row of
//!   candidates to look products up in: the unmasked structure less the mask's positions
//!   (`sr_filter_*`), then the values of the admitted entries alone.
//! - **Values** (`sr_numeric_<semiring>_<type>`): a group of lanes per row of C, over the
//!   structure. For one entry `A(i,k)` the entries of B's row `k` have distinct columns, so
//!   the group's lanes update distinct slots of C's row; the group synchronises before the next
//!   `k`. No atomics, so every type and semiring works alike (bool's byte, 64-bit integers)
//!   and "any" keeps the last product in A's row order, as the reference does.
//! - **Heavy rows**: a row of more than [`HEAVY_ROW_PRODUCTS`] products (a hub of a power-law
//!   graph: 10⁵ and more in triangle counting) would keep one group of lanes busy long after
//!   the rest of the GPU is done, so it is split into pieces of about [`PIECE_PRODUCTS`]
//!   products, a range of its entries of A each, and a block per piece runs them
//!   (`sr_mask_hits_heavy`, `sr_numeric_heavy_*`) with groups of lanes sized by the heavy
//!   rows' mean products per entry ([`heavy_lanes`]), its row's columns staged in shared
//!   memory where they fit. Hits are byte stores of 1, so pieces of one row need no atomics for the
//!   structure; their values are combined with atomics (compare-and-swap where the hardware
//!   has no atomic for the add), which exist for the 4- and 8-byte accumulators: `f32`, `f64`
//!   and the integers. Over the other types a heavy row stays on its group of lanes for its
//!   values. Split rows sum floating-point products in no fixed order, and "any" keeps
//!   whichever product lands last.
//!
//! Replace and merge are the same for a product made as a new C (there is no C to merge
//! into); accumulating into an existing C is [`hetsparse_core::write_back`]'s.
//!
//! A plan made here keeps the structure: executing it runs the values' kernel alone.

use std::sync::Arc;

use hetsparse_core::{
    Error, Mask, MaskedWork, MemoryRequirement, MemorySpace, Result, RunControl, ScalarType,
    SemiringKind, SpgemmAlgorithm, SpgemmOptions,
};

use super::{multiply_resident, Operand};
use crate::context::{Arg, Gpu, LaunchConfig, Stream};
use crate::memory::{DeviceArena, DeviceBuffer};
use crate::resident::{DeviceCsr, Held, Kept};
use crate::scalar::{kernel_name, DeviceScalar};

/// The kernel module.
const MODULE: &str = "semiring";
/// Threads per block of every kernel here.
const BLOCK: u32 = 256;
/// Products above which a row is heavy (split into pieces over blocks): far more than a group
/// of lanes does in the time the GPU's groups get through the usual rows of a graph (a few
/// dozen products each), so that the split rows are the few that would otherwise finish last.
const HEAVY_ROW_PRODUCTS: u64 = 2048;
/// Products per piece of a heavy row, a block's share: enough that staging the row's columns
/// (up to [`SHARED_COLS`]) is a small part of a piece's work, few enough that a hub is spread
/// over many blocks.
const PIECE_PRODUCTS: u64 = 8192;
/// Columns of a heavy row (the mask's or C's) a block stages in shared memory: 32 KiB, under
/// the 48 KiB a block gets without opting in, leaving room for several blocks per
/// multiprocessor. Longer rows are searched in global memory.
const SHARED_COLS: u64 = 8192;
/// Most blocks of a launch over pieces (the kernels stride over the rest).
const MAX_PIECE_BLOCKS: u64 = 1 << 20;

/// The scalar types the plus-times pipeline runs: the others (integers, `bool`) take this
/// module's path for every product.
pub(crate) fn pipeline_runs(ty: ScalarType) -> bool {
    !ty.is_exact()
}

/// Whether a product with `options` over `T` is this module's: a semiring, a mask, or a type
/// the plus-times pipeline does not run.
pub(crate) fn is_needed<T: DeviceScalar>(options: &SpgemmOptions) -> bool {
    !options.is_plain() || !pipeline_runs(T::TYPE)
}

/// C's structure on the device: what the values' kernel fills, and what a plan keeps.
pub(crate) struct SemiringStructure {
    pub nrows: usize,
    pub ncols: usize,
    pub nnz: u64,
    pub offsets: Arc<DeviceBuffer<u64>>,
    pub cols: Arc<DeviceBuffer<u32>>,
    /// Products of the unmasked product.
    pub products: u64,
    /// Whether a mask shaped it (the values' pass then counts the multiply-adds it does).
    pub masked: bool,
    /// The heavy rows' pieces, where the values' pass splits them (found with the structure,
    /// so that a plan's executions reuse them).
    pub pieces: Option<RowPieces>,
}

/// The pieces of heavy rows (`semiring.cu`'s `sr_row_pieces`): the exclusive scan of each row's
/// pieces (`nrows + 1` offsets), each piece's row, their number, and the lanes per entry of A
/// their kernels take.
pub(crate) struct RowPieces {
    offsets: Arc<DeviceBuffer<u64>>,
    rows: Arc<DeviceBuffer<u64>>,
    count: u64,
    lanes: u32,
}

/// Lanes per entry of A in the heavy rows' kernels: about their mean products per entry, a
/// power of two up to a warp. A hub's row holds a few entries whose rows of B are long (other
/// hubs) among many short ones, and those few hold most of its products: a warp sweeps each
/// of them, where the light rows' lanes (about B's mean row) would leave the rest of the
/// block waiting on one group.
fn heavy_lanes(heavy_products: u64, heavy_entries: u64) -> u32 {
    let mean = heavy_products.div_ceil(heavy_entries.max(1)).max(1);
    mean.next_power_of_two().min(32) as u32
}

/// Whether the values' kernels of `ty` split heavy rows: those whose accumulator is the stored
/// type in a 4- or 8-byte word, which the GPU's atomics (or compare-and-swap) combine.
fn splits_heavy_rows(ty: ScalarType) -> bool {
    matches!(
        ty,
        ScalarType::F32
            | ScalarType::F64
            | ScalarType::I32
            | ScalarType::I64
            | ScalarType::U32
            | ScalarType::U64
    )
}

/// Lanes per row of C: about one per entry of an average row of B, a power of two from 1 to
/// 32, so that short rows of B (graphs) do not leave most of a warp idle.
fn lanes_per_row(b_nnz: u64, b_rows: usize) -> u32 {
    let mean = b_nnz.div_ceil(b_rows.max(1) as u64).max(1);
    mean.next_power_of_two().min(32) as u32
}

/// A launch with `groups` groups of `lanes` threads (grid-stride kernels).
fn config(groups: u64, lanes: u32) -> LaunchConfig {
    LaunchConfig::for_threads(groups.saturating_mul(u64::from(lanes)).max(1), BLOCK)
}

/// A launch of a block per piece (kernels over heavy rows), with the shared memory they stage
/// rows in.
fn piece_config(pieces: u64) -> LaunchConfig {
    LaunchConfig {
        grid: pieces.clamp(1, MAX_PIECE_BLOCKS) as u32,
        block: BLOCK,
        shared_bytes: (SHARED_COLS * 4) as u32,
    }
}

/// The entry point of the values' kernel of `kind` over `T`.
fn numeric_kernel<T: DeviceScalar>(kind: SemiringKind) -> Result<&'static str> {
    if !kind.is_defined_for(T::TYPE) {
        return Err(Error::InvalidArgument(format!(
            "the {kind} semiring is not defined over {}",
            T::TYPE
        )));
    }
    Ok(kernel_name::<T>(&format!("sr_numeric_{}", kind.name())))
}

/// `f32` ones sharing `m`'s structure: what the plus-times pipeline multiplies to find the
/// structure of a product of `m` (the values are never read back).
fn ones_like<T: DeviceScalar>(
    gpu: &Gpu,
    stream: &Stream,
    m: &DeviceCsr<T>,
) -> Result<DeviceCsr<f32>> {
    let n = m.nnz();
    let len = usize::try_from(n).map_err(|_| too_large("an operand", n))?;
    let mut ones = DeviceBuffer::<f32>::new_on(gpu, stream, len, "ones for the structure")?;
    if len > 0 {
        let f = gpu.function(MODULE, "sr_ones_f32")?;
        // SAFETY: `ones` holds n floats.
        unsafe {
            gpu.launch(
                f,
                LaunchConfig::for_threads(n, BLOCK),
                stream,
                &[Arg::U64(n), ones.write(stream)?.arg_mut()],
            )?;
        }
    }
    ones.mark_done(stream)?;
    Ok(DeviceCsr::from_device(
        m.nrows,
        m.ncols,
        n,
        Arc::clone(&m.offsets),
        Arc::clone(&m.cols),
        ones,
    ))
}

fn too_large(what: &str, n: u64) -> Error {
    Error::InvalidArgument(format!(
        "{what} of {n} entries is too large for this machine"
    ))
}

/// A and B on the device for a call: B is `None` for `A · A` of one host matrix.
type Placed<'a, T> = (Held<'a, DeviceCsr<T>>, Option<Held<'a, DeviceCsr<T>>>);

/// The operands on the device for the call (uploaded on `stream` where they are on the host;
/// `A · A` of one host matrix once).
fn place<'a, T: DeviceScalar>(
    gpu: &Gpu,
    stream: &Arc<Stream>,
    a: Operand<'a, T>,
    b: Operand<'a, T>,
) -> Result<Placed<'a, T>> {
    let (da, _) = a.place(gpu, stream, "A")?;
    let db = if a.same_host_matrix(&b) {
        None
    } else {
        Some(b.place(gpu, stream, "B")?.0)
    };
    Ok((da, db))
}

/// The mask's positions on the device.
struct DeviceMask {
    offsets: DeviceBuffer<u64>,
    cols: DeviceBuffer<u32>,
}

impl DeviceMask {
    fn upload(gpu: &Gpu, stream: &Stream, mask: &Mask) -> Result<Self> {
        let mut offsets =
            DeviceBuffer::<u64>::new_on(gpu, stream, mask.row_offsets().len(), "mask offsets")?;
        offsets
            .write(stream)?
            .upload_staged(stream, gpu.pinned_pool(), mask.row_offsets())?;
        let mut cols =
            DeviceBuffer::<u32>::new_on(gpu, stream, mask.col_indices().len(), "mask columns")?;
        cols.write(stream)?
            .upload_staged(stream, gpu.pinned_pool(), mask.col_indices())?;
        Ok(DeviceMask { offsets, cols })
    }

    /// The mask's positions on `gpu`: the copy the mask keeps in this device's memory
    /// ([`Mask::kept_in`]), uploaded on `stream` the first time a product here reads the mask.
    /// Later products, on any stream, read it after the upload (the buffers' events order
    /// them).
    fn kept(gpu: &Arc<Gpu>, stream: &Stream, mask: &Mask) -> Result<Arc<Kept<DeviceMask>>> {
        let space = MemorySpace::Device {
            backend: crate::error::BACKEND,
            id: u64::from(gpu.ordinal()),
        };
        mask.kept_in(space, |mask| {
            let _span = tracing::debug_span!("mask uploaded", entries = mask.entries()).entered();
            let m = DeviceMask::upload(gpu, stream, mask)?;
            m.offsets.mark_done(stream)?;
            m.cols.mark_done(stream)?;
            Ok(Kept::new(m, gpu))
        })
    }
}

/// The heavy rows of `a · b` split into pieces, and the products of all rows (each entry of A
/// times its row of B), counted on the device with `lanes` per row.
fn row_pieces<T: DeviceScalar>(
    gpu: &Gpu,
    stream: &Arc<Stream>,
    a: &DeviceCsr<T>,
    b: &DeviceCsr<T>,
    lanes: u32,
) -> Result<(RowPieces, u64)> {
    let mut pieces = DeviceBuffer::<u64>::new_on(gpu, stream, a.nrows, "pieces per row")?;
    // The products of all rows, and the heavy rows' products and entries of A.
    let mut total = DeviceBuffer::<u64>::new_on(gpu, stream, 3, "product counts")?;
    total.write(stream)?.zero(stream)?;
    if a.nrows > 0 {
        let f = gpu.function(MODULE, "sr_row_pieces")?;
        // SAFETY: A's offsets have nrows + 1 entries, its columns index B's rows; `pieces` has
        // a slot per row.
        unsafe {
            gpu.launch(
                f,
                config(a.nrows as u64, lanes),
                stream,
                &[
                    Arg::U64(a.nrows as u64),
                    Arg::U32(lanes),
                    a.offsets.read(stream)?.arg(),
                    a.cols.read(stream)?.arg(),
                    b.offsets.read(stream)?.arg(),
                    Arg::U64(HEAVY_ROW_PRODUCTS),
                    Arg::U64(PIECE_PRODUCTS),
                    // A piece has an entry of A for each warp of its block at least.
                    Arg::U64(u64::from(BLOCK / 32)),
                    pieces.write(stream)?.arg_mut(),
                    total.write(stream)?.arg_mut(),
                ],
            )?;
        }
    }
    let counts = total.read(stream)?.to_vec(stream)?;
    let (products, heavy_products, heavy_entries) = (counts[0], counts[1], counts[2]);
    let (offsets, count) = offsets_of(gpu, stream, &pieces, "first piece of each row")?;
    let len = usize::try_from(count).map_err(|_| too_large("the heavy rows' pieces", count))?;
    let mut rows = DeviceBuffer::<u64>::new_on(gpu, stream, len, "row of each piece")?;
    if count > 0 {
        let f = gpu.function(MODULE, "sr_piece_rows")?;
        // SAFETY: `offsets` has nrows + 1 entries scanning to `count`, `rows` a slot per piece.
        unsafe {
            gpu.launch(
                f,
                LaunchConfig::for_threads(a.nrows as u64, BLOCK),
                stream,
                &[
                    Arg::U64(a.nrows as u64),
                    offsets.read(stream)?.arg(),
                    rows.write(stream)?.arg_mut(),
                ],
            )?;
        }
    }
    offsets.mark_done(stream)?;
    rows.mark_done(stream)?;
    Ok((
        RowPieces {
            offsets: Arc::new(offsets),
            rows: Arc::new(rows),
            count,
            lanes: heavy_lanes(heavy_products, heavy_entries),
        },
        products,
    ))
}

/// Exclusive scan of `counts` (one per row) into new row offsets on the device; the total.
fn offsets_of(
    gpu: &Gpu,
    stream: &Arc<Stream>,
    counts: &DeviceBuffer<u64>,
    what: &str,
) -> Result<(DeviceBuffer<u64>, u64)> {
    let n = counts.len() as u64;
    let arena = DeviceArena::new_on(gpu, stream, super::binning::scan_bytes(n), "scan")?;
    let mut offsets = DeviceBuffer::<u64>::new_on(gpu, stream, counts.len() + 1, what)?;
    let total = super::binning::exclusive_scan_on(
        gpu,
        stream,
        counts.read(stream)?,
        &mut offsets.write(stream)?,
        &arena,
    )?;
    Ok((offsets, total))
}

/// C's structure from a pair of kernels over its rows (a group of `lanes` lanes per row, about
/// one per entry of the rows they read): `count` writes the entries each row keeps, scanned
/// here into C's row offsets, and `compact` writes the kept columns in order from them. The
/// offsets and columns, and C's entries.
///
/// # Safety
///
/// `count_args` are the count kernel's arguments before its counts (a slot per row), and
/// `compact_args` the compact kernel's before the offsets and the columns, over `nrows` rows,
/// both with `lanes` as their group size.
unsafe fn compacted_rows(
    gpu: &Gpu,
    stream: &Arc<Stream>,
    nrows: usize,
    lanes: u32,
    (count, count_args): (&'static str, &[Arg]),
    (compact, compact_args): (&'static str, &[Arg]),
) -> Result<(DeviceBuffer<u64>, DeviceBuffer<u32>, u64)> {
    let mut counts = DeviceBuffer::<u64>::new_on(gpu, stream, nrows, "entries per row of C")?;
    if nrows > 0 {
        let f = gpu.function(MODULE, count)?;
        let mut args = count_args.to_vec();
        args.push(counts.write(stream)?.arg_mut());
        // SAFETY: the caller's arguments (this function's contract), then a count per row.
        unsafe {
            gpu.launch(f, config(nrows as u64, lanes), stream, &args)?;
        }
    }
    let (offsets, nnz) = offsets_of(gpu, stream, &counts, "row offsets of C")?;
    let len = usize::try_from(nnz).map_err(|_| too_large("the product", nnz))?;
    let mut cols = DeviceBuffer::<u32>::new_on(gpu, stream, len, "column indices of C")?;
    if nnz > 0 {
        let f = gpu.function(MODULE, compact)?;
        let mut args = compact_args.to_vec();
        args.push(offsets.read(stream)?.arg());
        args.push(cols.write(stream)?.arg_mut());
        // SAFETY: as the count, with the scanned counts and a column slot per kept entry.
        unsafe {
            gpu.launch(f, config(nrows as u64, lanes), stream, &args)?;
        }
    }
    offsets.mark_done(stream)?;
    cols.mark_done(stream)?;
    Ok((offsets, cols, nnz))
}

/// C's structure for `options`' mask (or none): see the module's documentation.
fn structure<T: DeviceScalar>(
    gpu: &Arc<Gpu>,
    stream: &Arc<Stream>,
    (a, b): (&DeviceCsr<T>, &DeviceCsr<T>),
    same: bool,
    mask: Option<&Mask>,
    run: &RunControl,
) -> Result<SemiringStructure> {
    let (nrows, ncols) = (a.nrows, b.ncols);
    let lanes = lanes_per_row(b.nnz(), b.nrows);
    if let Some(mask) = mask.filter(|m| !m.is_complemented()) {
        let _span =
            tracing::debug_span!("masked structure", mask_entries = mask.entries()).entered();
        let (pieces, products) = row_pieces(gpu, stream, a, b, lanes)?;
        let kept = DeviceMask::kept(gpu, stream, mask)?;
        let m = &kept.data;
        let slots =
            usize::try_from(mask.entries()).map_err(|_| too_large("the mask", mask.entries()))?;
        let mut hit = DeviceBuffer::<u8>::new_on(gpu, stream, slots, "mask hits")?;
        hit.write(stream)?.zero(stream)?;
        run.checkpoint()?;
        if nrows > 0 {
            let hits = gpu.function(MODULE, "sr_mask_hits")?;
            // SAFETY: the operands' and the mask's arrays are CSR of C's rows (validated), the
            // pieces' offsets have a slot per row and one; `hit` has a slot per mask entry.
            unsafe {
                gpu.launch(
                    hits,
                    config(nrows as u64, lanes),
                    stream,
                    &[
                        Arg::U64(nrows as u64),
                        Arg::U32(lanes),
                        pieces.offsets.read(stream)?.arg(),
                        a.offsets.read(stream)?.arg(),
                        a.cols.read(stream)?.arg(),
                        b.offsets.read(stream)?.arg(),
                        b.cols.read(stream)?.arg(),
                        m.offsets.read(stream)?.arg(),
                        m.cols.read(stream)?.arg(),
                        hit.write(stream)?.arg_mut(),
                    ],
                )?;
            }
        }
        if pieces.count > 0 {
            let heavy = gpu.function(MODULE, "sr_mask_hits_heavy")?;
            // SAFETY: as the one-group hits, over the pieces counted; the launch gives the
            // shared memory of SHARED_COLS columns.
            unsafe {
                gpu.launch(
                    heavy,
                    piece_config(pieces.count),
                    stream,
                    &[
                        Arg::U32(pieces.lanes),
                        pieces.offsets.read(stream)?.arg(),
                        pieces.rows.read(stream)?.arg(),
                        Arg::U64(pieces.count),
                        Arg::U64(SHARED_COLS),
                        a.offsets.read(stream)?.arg(),
                        a.cols.read(stream)?.arg(),
                        b.offsets.read(stream)?.arg(),
                        b.cols.read(stream)?.arg(),
                        m.offsets.read(stream)?.arg(),
                        m.cols.read(stream)?.arg(),
                        hit.write(stream)?.arg_mut(),
                    ],
                )?;
            }
        }
        let m_offsets = m.offsets.read(stream)?.arg();
        let hit_arg = hit.read(stream)?.arg();
        let mask_lanes = lanes_per_row(mask.entries(), nrows);
        // SAFETY: the mask's CSR arrays and a hit per mask entry, over C's rows.
        let (offsets, cols, nnz) = unsafe {
            compacted_rows(
                gpu,
                stream,
                nrows,
                mask_lanes,
                (
                    "sr_hits_count",
                    &[
                        Arg::U64(nrows as u64),
                        Arg::U32(mask_lanes),
                        m_offsets,
                        hit_arg,
                    ],
                ),
                (
                    "sr_hits_compact",
                    &[
                        Arg::U64(nrows as u64),
                        Arg::U32(mask_lanes),
                        m_offsets,
                        m.cols.read(stream)?.arg(),
                        hit_arg,
                    ],
                ),
            )?
        };
        run.add_done(products);
        return Ok(SemiringStructure {
            nrows,
            ncols,
            nnz,
            offsets: Arc::new(offsets),
            cols: Arc::new(cols),
            products,
            masked: true,
            pieces: Some(pieces),
        });
    }
    // The unmasked structure: the plus-times pipeline on ones (it reports the products).
    let full = {
        let _span = tracing::debug_span!("structure by the plus-times pipeline").entered();
        let a_ones = ones_like(gpu, stream, a)?;
        let b_ones = if same {
            None
        } else {
            Some(ones_like(gpu, stream, b)?)
        };
        let b_ones_ref = b_ones.as_ref().unwrap_or(&a_ones);
        let (c, structure) = multiply_resident(
            gpu,
            Operand::Device(&a_ones),
            Operand::Device(b_ones_ref),
            SpgemmAlgorithm::Auto,
            None,
            run,
        )?;
        drop(c);
        structure
    };
    // The values' pass splits heavy rows only over the types with atomics for them.
    let pieces = if splits_heavy_rows(T::TYPE) {
        Some(row_pieces(gpu, stream, a, b, lanes)?.0)
    } else {
        None
    };
    let Some(mask) = mask else {
        return Ok(SemiringStructure {
            nrows,
            ncols,
            nnz: full.nnz,
            offsets: full.offsets,
            cols: full.cols,
            products: full.products,
            masked: false,
            pieces,
        });
    };
    // A complemented mask: the unmasked entries its matrix does not hold.
    let _span = tracing::debug_span!("complemented mask", mask_entries = mask.entries()).entered();
    run.checkpoint()?;
    let kept = DeviceMask::kept(gpu, stream, mask)?;
    let m = &kept.data;
    let keep_listed = Arg::U32(0);
    let c_lanes = lanes_per_row(full.nnz, nrows);
    let filter_args = [
        Arg::U64(nrows as u64),
        Arg::U32(c_lanes),
        keep_listed,
        full.offsets.read(stream)?.arg(),
        full.cols.read(stream)?.arg(),
        m.offsets.read(stream)?.arg(),
        m.cols.read(stream)?.arg(),
    ];
    // SAFETY: C's and the mask's arrays are CSR over C's rows.
    let (offsets, cols, nnz) = unsafe {
        compacted_rows(
            gpu,
            stream,
            nrows,
            c_lanes,
            ("sr_filter_count", &filter_args),
            ("sr_filter_compact", &filter_args),
        )?
    };
    Ok(SemiringStructure {
        nrows,
        ncols,
        nnz,
        offsets: Arc::new(offsets),
        cols: Arc::new(cols),
        products: full.products,
        masked: true,
        pieces,
    })
}

/// C's values over `s` by the semiring `kind`: C on the device. A masked structure's
/// multiply-adds are counted and reported to `run`.
fn values<T: DeviceScalar>(
    gpu: &Gpu,
    stream: &Arc<Stream>,
    (a, b): (&DeviceCsr<T>, &DeviceCsr<T>),
    s: &SemiringStructure,
    kind: SemiringKind,
    run: &RunControl,
) -> Result<DeviceCsr<T>> {
    let _span = tracing::debug_span!("semiring values", semiring = %kind, nnz = s.nnz).entered();
    let kernel = numeric_kernel::<T>(kind)?;
    let len = usize::try_from(s.nnz).map_err(|_| too_large("the product", s.nnz))?;
    let mut vals = DeviceBuffer::<T::Device>::new_on(gpu, stream, len, "values of C")?;
    // The accumulator apart from C's values where it is another type (f16 and bf16 add in
    // f32, bool in a byte of its own).
    let acc_size = accumulator_bytes(T::TYPE);
    let separate = acc_size != std::mem::size_of::<T>() || T::TYPE == ScalarType::Bool;
    let mut acc = if separate {
        Some(DeviceBuffer::<u8>::new_on(
            gpu,
            stream,
            len.saturating_mul(acc_size),
            "accumulators of C",
        )?)
    } else {
        None
    };
    let mut work = DeviceBuffer::<u64>::new_on(gpu, stream, 1, "multiply-adds")?;
    work.write(stream)?.zero(stream)?;
    run.checkpoint()?;
    if s.nnz > 0 {
        let f = gpu.function(MODULE, kernel)?;
        let lanes = lanes_per_row(b.nnz(), b.nrows);
        let mut vals_out = vals.write(stream)?;
        let vals_arg = vals_out.arg_mut();
        let acc_arg = match acc.as_mut() {
            Some(acc) => acc.write(stream)?.arg_mut(),
            None => vals_arg,
        };
        let work_arg = if s.masked {
            work.write(stream)?.arg_mut()
        } else {
            Arg::U64(0)
        };
        // Heavy rows: set to the zero by the one-group kernel, filled by the pieces' kernel
        // after it (C's values are the accumulators over these types).
        let split = s
            .pieces
            .as_ref()
            .filter(|p| p.count > 0 && splits_heavy_rows(T::TYPE) && !separate);
        let piece_off = match split {
            Some(p) => p.offsets.read(stream)?.arg(),
            None => Arg::U64(0),
        };
        let operands = [
            a.offsets.read(stream)?.arg(),
            a.cols.read(stream)?.arg(),
            a.vals.read(stream)?.arg(),
            b.offsets.read(stream)?.arg(),
            b.cols.read(stream)?.arg(),
            b.vals.read(stream)?.arg(),
            s.offsets.read(stream)?.arg(),
            s.cols.read(stream)?.arg(),
        ];
        let mut args = vec![Arg::U64(s.nrows as u64), Arg::U32(lanes), piece_off];
        args.extend_from_slice(&operands);
        args.extend_from_slice(&[acc_arg, vals_arg, work_arg]);
        // SAFETY: the operands are CSR (validated or made here), C's structure has its rows'
        // entries, the pieces' offsets a slot per row and one (or null); the accumulators hold
        // one of `acc_size` bytes per entry (C's values themselves where that is the stored
        // type); `work` one counter or null.
        unsafe {
            gpu.launch(f, config(s.nrows as u64, lanes), stream, &args)?;
        }
        if let Some(p) = split {
            let heavy = gpu.function(MODULE, heavy_kernel::<T>(kind))?;
            let mut args = vec![
                Arg::U32(p.lanes),
                piece_off,
                p.rows.read(stream)?.arg(),
                Arg::U64(p.count),
                Arg::U64(SHARED_COLS),
            ];
            args.extend_from_slice(&operands);
            args.extend_from_slice(&[vals_arg, work_arg]);
            // SAFETY: as the one-group kernel, over the pieces counted, with C's values as the
            // accumulators (checked above); the launch gives the shared memory of SHARED_COLS
            // columns.
            unsafe {
                gpu.launch(heavy, piece_config(p.count), stream, &args)?;
            }
        }
    }
    vals.mark_done(stream)?;
    if s.masked {
        let done = work.read(stream)?.to_vec(stream)?[0];
        run.add_masked_work(MaskedWork {
            multiply_adds: done,
            unmasked_multiply_adds: s.products,
        });
    }
    tracing::debug_span!("wait for the semiring kernels").in_scope(|| stream.synchronize())?;
    Ok(DeviceCsr::from_device(
        s.nrows,
        s.ncols,
        s.nnz,
        Arc::clone(&s.offsets),
        Arc::clone(&s.cols),
        vals,
    ))
}

/// The entry point of the heavy rows' values' kernel of `kind` over `T` (a type that
/// [`splits_heavy_rows`], a semiring defined over it).
fn heavy_kernel<T: DeviceScalar>(kind: SemiringKind) -> &'static str {
    kernel_name::<T>(&format!("sr_numeric_heavy_{}", kind.name()))
}

/// Bytes of the values' kernel's accumulator of a stored type (`semiring.cu`'s `sr_scalar`).
fn accumulator_bytes(ty: ScalarType) -> usize {
    match ty {
        ScalarType::F16 | ScalarType::Bf16 => 4,
        other => other.size_bytes(),
    }
}

/// `C⟨M⟩ = A·B` over `options`' semiring and mask, C left on the device; with its structure
/// (what a plan keeps).
pub(crate) fn multiply<T: DeviceScalar>(
    gpu: &Arc<Gpu>,
    a: Operand<'_, T>,
    b: Operand<'_, T>,
    options: &SpgemmOptions,
    run: &RunControl,
) -> Result<(DeviceCsr<T>, SemiringStructure)> {
    super::check_limits(a.shape(), b.shape())?;
    gpu.bind()?;
    let _span = tracing::info_span!(
        "spgemm over a semiring",
        backend = "cuda",
        semiring = %options.semiring,
        masked = options.mask.is_some(),
        m = a.shape().0,
        n = b.shape().1
    )
    .entered();
    // Refused before any work: a semiring not defined over the type.
    numeric_kernel::<T>(options.semiring)?;
    let stream = gpu.stream()?;
    let (da, db) = place(gpu, &stream, a, b)?;
    let db_ref: &DeviceCsr<T> = db.as_deref().unwrap_or(&da);
    let s = structure(
        gpu,
        &stream,
        (&da, db_ref),
        db.is_none(),
        options.mask.as_ref(),
        run,
    )?;
    let c = values(gpu, &stream, (&da, db_ref), &s, options.semiring, run)?;
    Ok((c, s))
}

/// Executes a plan made here: the values' kernel alone, over the plan's structure.
pub(crate) fn execute<T: DeviceScalar>(
    gpu: &Gpu,
    s: &SemiringStructure,
    a: Operand<'_, T>,
    b: Operand<'_, T>,
    kind: SemiringKind,
    run: &RunControl,
) -> Result<DeviceCsr<T>> {
    gpu.bind()?;
    let _span =
        tracing::info_span!("spgemm plan over a semiring", backend = "cuda", semiring = %kind)
            .entered();
    let stream = gpu.stream()?;
    let (da, db) = place(gpu, &stream, a, b)?;
    let db_ref: &DeviceCsr<T> = db.as_deref().unwrap_or(&da);
    run.add_planned(s.products);
    let c = values(gpu, &stream, (&da, db_ref), s, kind, run)?;
    run.add_done(s.products);
    Ok(c)
}

/// What a product here needs on the device: the plus-times pipeline's (for the structure, or
/// bounding the masked one), the ones it multiplies, and the accumulators and mask arrays.
pub(crate) fn requirement<T: DeviceScalar>(
    gpu: &Gpu,
    a: Operand<'_, T>,
    b: Operand<'_, T>,
    options: &SpgemmOptions,
) -> Result<MemoryRequirement> {
    let mut r = super::requirement(gpu, a, b, SpgemmAlgorithm::Auto)?;
    let nnz = |m: Operand<'_, T>| match m {
        Operand::Host(h) => h.nnz(),
        Operand::Device(d) => d.nnz(),
    };
    let ones = 4 * (nnz(a) + nnz(b));
    // C's bound in entries, from the output bytes of the pipeline's C.
    let entry = 4 + std::mem::size_of::<T>() as u64;
    let c_bound = r.output_bytes / entry.max(1);
    let acc = c_bound.saturating_mul(accumulator_bytes(T::TYPE) as u64);
    let mask = options.mask.as_ref().map_or(0, |m| {
        (m.row_offsets().len() as u64) * 8 + m.entries() * 5 + (a.shape().0 as u64) * 16
    });
    // The pipeline's C of ones (f32) stands beside C of the stored type.
    let ones_c = c_bound.saturating_mul(8);
    // The heavy rows' pieces: a count and an offset per row, and a row per piece (at most one
    // piece per entry of A).
    let pieces = (a.shape().0 as u64 + 1)
        .saturating_mul(16)
        .saturating_add(nnz(a).saturating_mul(8));
    r.work_bytes = r
        .work_bytes
        .saturating_add(ones)
        .saturating_add(pieces)
        .saturating_add(acc)
        .saturating_add(mask)
        .saturating_add(ones_c);
    Ok(r)
}

/// What executing a plan made here needs beyond the plan: C's values and accumulators.
pub(crate) fn plan_requirement<T: DeviceScalar>(s: &SemiringStructure) -> MemoryRequirement {
    let mut r = MemoryRequirement::default();
    r.output_bytes = s.nnz * std::mem::size_of::<T>() as u64;
    r.work_bytes = s.nnz * accumulator_bytes(T::TYPE) as u64 + 16;
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heavy_rows_take_lanes_by_their_products_per_entry() {
        assert_eq!(heavy_lanes(0, 0), 1);
        assert_eq!(heavy_lanes(3000, 1000), 4);
        assert_eq!(heavy_lanes(1_900_000, 5700), 32);
    }

    #[test]
    fn lanes_follow_the_rows_of_b() {
        assert_eq!(lanes_per_row(0, 0), 1);
        assert_eq!(lanes_per_row(10, 10), 1);
        assert_eq!(lanes_per_row(30, 10), 4);
        assert_eq!(lanes_per_row(1000, 10), 32);
    }

    #[test]
    fn the_exact_types_take_this_path_for_every_product() {
        assert!(is_needed::<i32>(&SpgemmOptions::new()));
        assert!(is_needed::<bool>(&SpgemmOptions::new()));
        assert!(!is_needed::<f32>(&SpgemmOptions::new()));
        assert!(is_needed::<f32>(
            &SpgemmOptions::new().with_semiring(SemiringKind::MinPlus)
        ));
    }

    #[test]
    fn kernels_are_named_per_semiring_and_type() {
        assert_eq!(
            numeric_kernel::<u64>(SemiringKind::AnySecondI).unwrap(),
            "sr_numeric_any_secondi_u64"
        );
        assert!(numeric_kernel::<bool>(SemiringKind::AnySecondI).is_err());
        assert!(numeric_kernel::<hetsparse_core::Complex<f32>>(SemiringKind::MinPlus).is_err());
        // Every kernel the Rust side can name exists in the module's PTX.
        let ptx = crate::kernels::MODULES
            .iter()
            .find(|m| m.name == MODULE)
            .unwrap()
            .ptx;
        macro_rules! every {
            ($($t:ty),*) => {$(
                for kind in SemiringKind::defined_for(<$t as hetsparse_core::Scalar>::TYPE) {
                    let name = numeric_kernel::<$t>(kind).unwrap();
                    assert!(ptx.contains(&format!(".entry {name}(")), "{name}");
                    // The heavy rows' kernel exactly where the values' pass launches it.
                    let heavy = heavy_kernel::<$t>(kind);
                    assert_eq!(
                        ptx.contains(&format!(".entry {heavy}(")),
                        splits_heavy_rows(<$t as hetsparse_core::Scalar>::TYPE),
                        "{heavy}"
                    );
                }
            )*};
        }
        every!(
            f32,
            f64,
            hetsparse_core::f16,
            hetsparse_core::bf16,
            hetsparse_core::Complex<f32>,
            hetsparse_core::Complex<f64>,
            i32,
            i64,
            u32,
            u64,
            bool
        );
    }
}
