//! ESC SpGEMM (Polok, Ila, Smrz): setup, perfectly balanced expansion, segmented sort,
//! compression — with one host synchronisation (the size of the product; the paper's first, the
//! expansion size, is computed on the host while the operands upload) — and column slicing of B
//! when the expansion exceeds the memory budget: the slices are core's windows of B
//! ([`CsrWindow`]), their products laid side by side by core's [`assemble_chunks`], the
//! assembly every product cut into chunks goes through.
//!
//! The same pipeline multiplies block matrices: then the expansion carries the indices of the two
//! operand blocks instead of a value, and the blocks are multiplied during compression. Core's
//! windows and assembly hold scalars, so a block product over the budget is cut the other way,
//! into bands of A's block rows: a band is a contiguous part of A's arrays, and the bands'
//! products are C's rows in order, one after the other.

use std::borrow::Cow;
use std::ops::Range;

use opencl3::program::Program;

use std::sync::Arc;

use hetsparse_core::backend::assemble_chunks;
use hetsparse_core::{
    host, Csr, CsrWindow, DeviceKind, Error, MemoryPool, ProductChunk, Reservation, Result,
    RunControl, Scalar,
};

use crate::kernels::{EXP_CHUNK, EXP_WG, SCAN_BLOCK, SCAN_WG, SORT_WG};
use crate::runtime::{DeviceBuffer, DeviceState, Incoming, IncomingValues, Queue};
use crate::scalar::bytes_of;
use crate::BACKEND;

/// Expansions of at least this many products run stage by stage, the host waiting for each
/// while it looks at cancellation ([`Queue::finish_or_cancel`]); smaller ones are queued
/// whole, as a wait costs the device an idle gap and they finish within a cancel's latency.
const STAGED_FROM: u64 = 1 << 20;

/// How a work-item finds its first product in the prefix sum of products per entry of A.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ExpansionSearch {
    /// Interpolation search, as in the paper (bisection after a few probes, so skewed prefix sums
    /// cannot make it linear).
    #[default]
    Interpolation,
    /// Binary search.
    Binary,
}

/// A compressed-row matrix whose entries are scalars (`block == 1`) or dense row-major blocks of
/// `block` values: the host side of both SpGEMM flavours.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Compressed<'a, T: Clone> {
    pub nrows: usize,
    pub ncols: usize,
    pub offsets: Cow<'a, [u64]>,
    pub index: Cow<'a, [u32]>,
    pub values: Cow<'a, [T]>,
    pub block: usize,
}

impl<'a, T: Scalar> Compressed<'a, T> {
    /// A block matrix's arrays, borrowed: its entries are its blocks.
    pub(crate) fn of_bsr(m: &'a hetsparse_core::Bsr<T>) -> Self {
        Compressed {
            nrows: m.block_rows(),
            ncols: m.block_cols(),
            offsets: m.row_offsets().into(),
            index: m.col_indices().into(),
            values: m.values().into(),
            block: m.block_shape().0 * m.block_shape().1,
        }
    }
}

impl<T: Scalar> Compressed<'_, T> {
    fn nnz(&self) -> u64 {
        self.index.len() as u64
    }

    fn empty(nrows: usize, ncols: usize, block: usize) -> Result<Self> {
        Ok(Compressed {
            nrows,
            ncols,
            offsets: host::try_filled(nrows + 1, 0, "CSR row offsets")?.into(),
            index: Vec::new().into(),
            values: Vec::new().into(),
            block,
        })
    }

    /// Whether `other` is this very matrix (the same arrays in memory), so that one copy on
    /// the device serves as both operands.
    fn same_as(&self, other: &Self) -> bool {
        fn same<X>(x: &[X], y: &[X]) -> bool {
            std::ptr::eq(x.as_ptr(), y.as_ptr()) && x.len() == y.len()
        }
        self.nrows == other.nrows
            && self.ncols == other.ncols
            && self.block == other.block
            && same(&self.offsets, &other.offsets)
            && same(&self.index, &other.index)
            && same(&self.values, &other.values)
    }

    /// Rows `rows`, for a band of a block matrix (which has no window type in core): its
    /// entries are a contiguous part of the arrays, borrowed; only the offsets are copied, to
    /// start at 0. `rows` lies inside the matrix.
    fn row_band(&self, rows: &Range<usize>) -> Result<Compressed<'_, T>> {
        let offsets = &self.offsets[rows.start..=rows.end];
        let first = offsets[0];
        let (s, e) = (first as usize, offsets[rows.len()] as usize);
        let mut rebased = host::try_with_capacity(rows.len() + 1, "ESC SpGEMM row band offsets")?;
        rebased.extend(offsets.iter().map(|&o| o - first));
        Ok(Compressed {
            nrows: rows.len(),
            ncols: self.ncols,
            offsets: rebased.into(),
            index: Cow::Borrowed(&self.index[s..e]),
            values: Cow::Borrowed(&self.values[s * self.block..e * self.block]),
            block: self.block,
        })
    }
}

/// The first attempt at a product of host operands: all of it in one pipeline.
enum Whole<T: Scalar> {
    /// The product, and whether the device checked its CSR invariants.
    Done(Compressed<'static, T>, bool),
    /// The expansion exceeds what the pool has left: the operands' copies on the device (B's
    /// `None` when B is A), for the caller to cut the product into parts that fit.
    OverBudget { a: Uploaded, b: Option<Uploaded> },
}

/// What is multiplied: scalars, or blocks of `r×k` (A) by `k×s` (B).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Multiply {
    Scalar,
    Block { r: usize, k: usize, s: usize },
}

/// Everything a product needs besides its operands.
pub(crate) struct EscJob<'a> {
    pub state: &'a DeviceState,
    pub program: &'a Program,
    pub search: ExpansionSearch,
    /// The device memory accounts the product reserves its buffers in.
    pub pool: &'a Arc<MemoryPool>,
    /// Bytes each product carries through the sort besides its 8-byte key.
    pub payload_bytes: usize,
    pub multiply: Multiply,
}

/// Operand arrays on the device, borrowed from an upload or a resident matrix.
#[derive(Clone, Copy)]
pub(crate) struct DeviceOperand<'a> {
    pub nrows: usize,
    pub nnz: u64,
    pub offsets: &'a DeviceBuffer<u64>,
    pub index: &'a DeviceBuffer<u32>,
    pub values: &'a DeviceBuffer<u8>,
}

/// Operand arrays copied to the device for one call, with their reservation.
pub(crate) struct Uploaded {
    nrows: usize,
    nnz: u64,
    offsets: DeviceBuffer<u64>,
    index: DeviceBuffer<u32>,
    values: DeviceBuffer<u8>,
    _reservation: Reservation,
}

impl Uploaded {
    /// Arrays made on the device for the call, under `reservation`.
    pub(crate) fn from_parts(
        nrows: usize,
        nnz: u64,
        offsets: DeviceBuffer<u64>,
        index: DeviceBuffer<u32>,
        values: DeviceBuffer<u8>,
        reservation: Reservation,
    ) -> Self {
        Uploaded {
            nrows,
            nnz,
            offsets,
            index,
            values,
            _reservation: reservation,
        }
    }

    pub(crate) fn view(&self) -> DeviceOperand<'_> {
        DeviceOperand {
            nrows: self.nrows,
            nnz: self.nnz,
            offsets: &self.offsets,
            index: &self.index,
            values: &self.values,
        }
    }
}

/// A product's arrays on the device, and the flag of its device check when it ran.
pub(crate) struct DeviceProduct {
    pub nrows: usize,
    pub ncols: usize,
    pub nnz: u64,
    pub offsets: DeviceBuffer<u64>,
    pub index: DeviceBuffer<u32>,
    pub values: DeviceBuffer<u8>,
    pub flag: Option<DeviceBuffer<u32>>,
}

/// Copies a host operand to the device, reserving its bytes in `pool`.
pub(crate) fn upload<T: Scalar>(
    q: &Queue<'_>,
    pool: &Arc<MemoryPool>,
    m: &Compressed<'_, T>,
    name: &str,
) -> Result<Uploaded> {
    let _span = tracing::debug_span!("h2d", operand = name, nnz = m.nnz()).entered();
    let reservation = pool.reserve(operand_bytes(m), &format!("ESC SpGEMM operand {name}"))?;
    let values = bytes_of(&m.values);
    let d = Uploaded {
        nrows: m.nrows,
        nnz: m.nnz(),
        offsets: q.alloc(m.offsets.len(), name)?,
        index: q.alloc(m.index.len(), name)?,
        values: q.alloc(values.len(), name)?,
        _reservation: reservation,
    };
    // One pipeline for the three arrays: small ones share a staging slot, and copying one part
    // into pinned memory overlaps the transfer of the parts before.
    q.write_all(
        &[
            d.offsets.upload_of(&m.offsets, name)?,
            d.index.upload_of(&m.index, name)?,
            d.values.upload_of(values, name)?,
        ],
        name,
    )?;
    Ok(d)
}

fn operand_bytes<T: Clone>(m: &Compressed<'_, T>) -> u64 {
    (m.offsets.len() as u64) * 8
        + m.index.len() as u64 * 4
        + (m.values.len() * std::mem::size_of::<T>()) as u64
}

/// Device bytes of the setup arrays for `nnz_a` entries of A: the row and the scanned
/// product count of each.
fn setup_bytes(nnz_a: u64) -> u64 {
    nnz_a.saturating_mul(4) + (nnz_a + 1).saturating_mul(8)
}

impl EscJob<'_> {
    /// Device bytes per product: key and payload, their merge copies, the run starts, and the
    /// product's entry (at most one per product).
    pub(crate) fn bytes_per_product<T>(&self) -> u64 {
        let entry = 4 + std::mem::size_of::<T>() * self.entry_values();
        (2 * (8 + self.payload_bytes) + 8 + entry) as u64
    }

    fn entry_values(&self) -> usize {
        match self.multiply {
            Multiply::Scalar => 1,
            Multiply::Block { r, s, .. } => r * s,
        }
    }

    /// Most products one expansion may hold: what the pool has left after the setup arrays of
    /// A (`nnz_a` entries, `nrows` rows), C's offsets and `more` bytes still to be reserved,
    /// and the device's largest buffer.
    fn max_products<T>(&self, nnz_a: u64, nrows: usize, more: u64) -> u64 {
        let (fixed, _) = self.expansion_bytes::<T>(nnz_a, nrows, 0, 0);
        let left = self
            .pool
            .available()
            .saturating_sub(fixed)
            .saturating_sub(8 * (nrows as u64 + 1))
            .saturating_sub(more);
        // One byte more per product covers the scan's block sums (16 bytes per 1024).
        let by_budget = left / (self.bytes_per_product::<T>() + 1);
        let widest = 8.max(self.payload_bytes) as u64;
        by_budget.min(self.state.description.max_buffer_bytes / widest)
    }

    /// Device bytes an expansion of `exp` products needs beside its operands, as (work,
    /// output): the setup arrays of A's `nnz_a` entries, keys and payloads with their merge
    /// copies, run starts, the scans' block sums and the check flag; and C (`nrows` rows),
    /// with at most one entry per product and `ncols` per row.
    pub(crate) fn expansion_bytes<T>(
        &self,
        nnz_a: u64,
        nrows: usize,
        ncols: usize,
        exp: u64,
    ) -> (u64, u64) {
        let entry = (4 + std::mem::size_of::<T>() * self.entry_values()) as u64;
        let per_product = self.bytes_per_product::<T>() - entry;
        let blocks = (exp / SCAN_BLOCK as u64 + 2).saturating_mul(16);
        let work = setup_bytes(nnz_a)
            .saturating_add(exp.saturating_mul(per_product))
            .saturating_add(blocks)
            .saturating_add(12);
        let entries = exp.min((nrows as u64).saturating_mul(ncols as u64));
        let output = (nrows as u64 + 1)
            .saturating_mul(8)
            .saturating_add(entries.saturating_mul(entry));
        (work, output)
    }

    /// The whole of `C = A·B` from host operands in one pipeline, unless its expansion exceeds
    /// what the pool has left.
    fn whole<T: Scalar>(
        &self,
        q: &Queue<'_>,
        a: &Compressed<'_, T>,
        b: &Compressed<'_, T>,
        run: &RunControl,
    ) -> Result<Whole<T>> {
        if a.nnz() == 0 || b.nnz() == 0 {
            let c = Compressed::empty(a.nrows, b.ncols, self.entry_values())?;
            return Ok(Whole::Done(c, false));
        }
        // The expansion's size and longest row, on another thread while A goes to the device.
        let mut sizes = None;
        let a_dev = rayon::in_place_scope(|s| {
            s.spawn(|_| sizes = Some(expansion_sizes(a, b)));
            upload(q, self.pool, a, "A")
        })?;
        let sizes = sizes.ok_or_else(|| Error::Internal {
            backend: BACKEND,
            what: "the expansion sizes were not computed".into(),
        })?;
        run.add_planned(sizes.0);
        run.checkpoint()?;
        // A·A (the papers' usual benchmark, and squaring in general): B is already there.
        let b_dev = if a.same_as(b) {
            None
        } else {
            Some(upload(q, self.pool, b, "B")?)
        };
        let limit = self.max_products::<T>(a.nnz(), a.nrows, 0);
        let b_view = b_dev.as_ref().map_or_else(|| a_dev.view(), Uploaded::view);
        let done = self.pipeline::<T>(
            q,
            (a_dev.view(), b_view),
            b.ncols,
            Some(sizes),
            limit,
            false,
            run,
        )?;
        match done {
            Some(c) => {
                let (c, checked) = self.download(q, c)?;
                Ok(Whole::Done(c, checked))
            }
            None => Ok(Whole::OverBudget { a: a_dev, b: b_dev }),
        }
    }

    /// One part of a product cut to fit the budget (its expansion size counted on the host
    /// when it was cut), computed and brought back.
    fn part<T: Scalar>(
        &self,
        q: &Queue<'_>,
        operands: (DeviceOperand<'_>, DeviceOperand<'_>),
        ncols: usize,
        sizes: (u64, u64),
        run: &RunControl,
    ) -> Result<(Compressed<'static, T>, bool)> {
        let c = self
            .pipeline::<T>(q, operands, ncols, Some(sizes), u64::MAX, false, run)?
            .ok_or_else(|| Error::Internal {
                backend: BACKEND,
                what: "a part of a product without a limit was refused".into(),
            })?;
        self.download(q, c)
    }

    /// `C = A·B` of scalar host operands, C on the host. When the expansion does not fit what
    /// the pool has left, A stays on the device and B goes in column slices (the paper's
    /// slicing): each a window of B copied for its upload, its product brought back, and the
    /// products laid side by side by [`assemble_chunks`].
    pub(crate) fn spgemm<T: Scalar>(
        &self,
        q: &Queue<'_>,
        a: &Csr<T>,
        b: &Csr<T>,
        run: &RunControl,
    ) -> Result<Csr<T>> {
        let (ca, cb) = (crate::compressed(a), crate::compressed(b));
        let a_dev = match self.whole(q, &ca, &cb, run)? {
            Whole::Done(c, checked) => return crate::ops::assemble(c, checked),
            // B's copy makes room for its slices.
            Whole::OverBudget { a: a_dev, b: b_dev } => {
                drop(b_dev);
                a_dev
            }
        };
        // Each slice of B is copied while A stays: it takes at most B's bytes.
        let limit = self.max_products::<T>(ca.nnz(), a.nrows(), operand_bytes(&cb));
        let slices = column_slices(
            a,
            b,
            limit,
            self.bytes_per_product::<T>(),
            self.pool.available(),
        )?;
        let _span = tracing::info_span!("column slices", count = slices.len()).entered();
        let mut parts = Vec::with_capacity(slices.len());
        for cols in slices {
            run.checkpoint()?;
            let panel = CsrWindow::columns_of(b, cols.clone())?.to_csr()?;
            let panel = crate::compressed(&panel);
            let b_dev = upload(q, self.pool, &panel, "B column slice")?;
            let sizes = expansion_sizes(&ca, &panel);
            let (part, checked) =
                self.part::<T>(q, (a_dev.view(), b_dev.view()), panel.ncols, sizes, run)?;
            let chunk = ProductChunk {
                rows: 0..a.nrows(),
                cols,
            };
            parts.push((chunk, crate::ops::assemble(part, checked)?));
        }
        assemble_chunks(a.nrows(), b.ncols(), parts)
    }

    /// `C = A·B` of block host operands ([`Multiply::Block`]), C on the host. When the
    /// expansion does not fit what the pool has left, B stays on the device and A goes in
    /// bands of block rows, whose products are C's rows in order. The arrays are not checked
    /// here: the caller makes a checked matrix of them.
    pub(crate) fn block_product<T: Scalar>(
        &self,
        q: &Queue<'_>,
        a: &Compressed<'_, T>,
        b: &Compressed<'_, T>,
        run: &RunControl,
    ) -> Result<Compressed<'static, T>> {
        let b_dev = match self.whole(q, a, b, run)? {
            Whole::Done(c, _) => return Ok(c),
            // A's copy makes room for its bands, unless it is B's too.
            Whole::OverBudget {
                a: a_dev,
                b: Some(b_dev),
            } => {
                drop(a_dev);
                b_dev
            }
            Whole::OverBudget { a: a_dev, b: None } => a_dev,
        };
        // Each band of A is copied while B stays: it takes at most A's bytes.
        let limit = self.max_products::<T>(a.nnz(), a.nrows, operand_bytes(a));
        let bands = row_bands(
            a,
            b,
            limit,
            self.bytes_per_product::<T>(),
            self.pool.available(),
        )?;
        let _span = tracing::info_span!("row bands", count = bands.len()).entered();
        let mut offsets = host::try_with_capacity(a.nrows + 1, "ESC SpGEMM block product offsets")?;
        offsets.push(0u64);
        let (mut index, mut values) = (Vec::new(), Vec::new());
        for rows in bands {
            run.checkpoint()?;
            let band = a.row_band(&rows)?;
            let a_dev = upload(q, self.pool, &band, "A row band")?;
            let sizes = expansion_sizes(&band, b);
            let (part, _) = self.part::<T>(q, (a_dev.view(), b_dev.view()), b.ncols, sizes, run)?;
            // The band's rows follow the rows before: its offsets continue from their entries.
            let before = index.len() as u64;
            offsets.extend(part.offsets.iter().skip(1).map(|&o| o + before));
            host::try_reserve(&mut index, part.index.len(), "ESC SpGEMM block product")?;
            index.extend_from_slice(&part.index);
            host::try_reserve(&mut values, part.values.len(), "ESC SpGEMM block product")?;
            values.extend_from_slice(&part.values);
        }
        Ok(Compressed {
            nrows: a.nrows,
            ncols: b.ncols,
            offsets: offsets.into(),
            index: index.into(),
            values: values.into(),
            block: self.entry_values(),
        })
    }

    /// `C = A·B` from operands on the device, C left there (its buffers of exact sizes);
    /// `None` when the expansion does not fit what the pool has left (the caller then goes
    /// through the host, which cuts B into column slices). The expansion's size and longest
    /// row are computed on the device: one synchronisation more than from host operands.
    pub(crate) fn product_on_device<T: Scalar>(
        &self,
        q: &Queue<'_>,
        (a, b): (DeviceOperand<'_>, DeviceOperand<'_>),
        ncols: usize,
        run: &RunControl,
    ) -> Result<Option<DeviceProduct>> {
        run.checkpoint()?;
        let limit = self.max_products::<T>(a.nnz, a.nrows, 0);
        self.pipeline::<T>(q, (a, b), ncols, None, limit, true, run)
    }

    /// Copies a product to the host, refusing it when the device check flagged it.
    pub(crate) fn download<T: Scalar>(
        &self,
        q: &Queue<'_>,
        c: DeviceProduct,
    ) -> Result<(Compressed<'static, T>, bool)> {
        let per_entry = self.entry_values();
        let nnz_c_len = usize::try_from(c.nnz).map_err(|_| too_large("the product", c.nnz))?;
        let _span = tracing::info_span!("d2h", nnz_c = c.nnz).entered();
        let mut offsets = Incoming::<u64>::new(c.nrows + 1);
        let mut index = Incoming::<u32>::new(nnz_c_len);
        let mut values = IncomingValues::<T>::new(nnz_c_len * per_entry);
        let mut bad = [0u32];
        // One pipeline for the three arrays of C and the check's flag.
        let mut pieces = vec![
            offsets.piece_of(&c.offsets, "C row offsets")?,
            index.piece_of(&c.index, "C column indices")?,
            values.piece_of_bytes(&c.values, "C values")?,
        ];
        if let Some(flag) = &c.flag {
            // Last, so that the large arrays start at aligned places in staging.
            pieces.push(flag.download_into(&mut bad, "check flag")?);
        }
        q.read_all(&mut pieces, "the product")?;
        drop(pieces);
        if bad[0] != 0 {
            return Err(refused());
        }
        // SAFETY: read_all returned Ok, so it wrote every byte of the three vectors; u64, u32
        // and the plain device scalar types (checked by piece_of_bytes) are plain data, and
        // bool's bytes are converted.
        let (offsets, index, values) = unsafe {
            (
                offsets.assume_filled(),
                index.assume_filled(),
                values.assume_filled()?,
            )
        };
        Ok((
            Compressed {
                nrows: c.nrows,
                ncols: c.ncols,
                offsets: offsets.into(),
                index: index.into(),
                values: values.into(),
                block: per_entry,
            },
            c.flag.is_some(),
        ))
    }

    /// The whole pipeline for one pair of device operands; `None` when the expansion has more
    /// than `limit` products. `sizes` (the expansion size and its longest row) come from the
    /// host, or are computed on the device when `None`. `keep`: C's buffers are allocated at
    /// their exact sizes outside the reuse pool, to stay on the device. The product's device
    /// check runs on GPUs (its flag is returned with C), not on CPU devices.
    #[allow(clippy::too_many_arguments)]
    fn pipeline<T: Scalar>(
        &self,
        q: &Queue<'_>,
        (a, b): (DeviceOperand<'_>, DeviceOperand<'_>),
        ncols: usize,
        sizes: Option<(u64, u64)>,
        limit: u64,
        keep: bool,
        run: &RunControl,
    ) -> Result<Option<DeviceProduct>> {
        let prog = self.program;
        let nrows = a.nrows;
        if sizes == Some((0, 0)) || a.nnz == 0 || b.nnz == 0 {
            return self.empty_product(q, nrows, ncols, keep).map(Some);
        }
        // Setup (Alg. 1): a_rows, and a_prods scanned in place. With host operands the paper's
        // first host synchronisation (reading back the expansion size) is not needed: the host
        // computed the size and the longest row while the operands were uploading, so
        // everything up to the size of the product is queued without a wait.
        if let Some((exp, _)) = sizes {
            if exp > limit {
                tracing::info!(exp, limit, "expansion exceeds the memory budget");
                return Ok(None);
            }
        }
        let _setup = self.pool.reserve(setup_bytes(a.nnz), "ESC SpGEMM setup")?;
        let (a_rows, a_prods) = self.setup(q, (a, b))?;
        let (exp, longest) = match sizes {
            Some(s) => s,
            None => device_sizes(q, prog, a, &a_prods)?,
        };
        if exp > limit {
            // The caller goes another way, which plans these products itself.
            tracing::info!(exp, limit, "expansion exceeds the memory budget");
            return Ok(None);
        }
        if sizes.is_none() {
            run.add_planned(exp);
        }
        if exp == 0 {
            return self.empty_product(q, nrows, ncols, keep).map(Some);
        }
        // The rest of the expansion's bytes (the setup arrays are held above).
        let (work, output) = self.expansion_bytes::<T>(a.nnz, nrows, ncols, exp);
        let rest = (work - setup_bytes(a.nnz)).saturating_add(output);
        let _work = self.pool.reserve(rest, "ESC SpGEMM expansion")?;
        run.checkpoint()?;
        let exp_len = usize::try_from(exp).map_err(|_| too_large("the expansion", exp))?;

        // Expansion (Alg. 2 l. 15-38).
        let keys = q.alloc::<u64>(exp_len, "expansion keys")?;
        let vals = q.alloc::<u8>(exp_len * self.payload_bytes, "expansion values")?;
        {
            let _span = tracing::info_span!("expand", products = exp).entered();
            let groups = exp_len.div_ceil(EXP_CHUNK);
            q.kernel(prog, "esc_expand")?
                .arg(exp)?
                .arg(u32::from(self.search == ExpansionSearch::Interpolation))?
                .arg(a.nnz)?
                .arg(a_prods.arg())?
                .arg(a_rows.arg())?
                .arg(a.index.arg())?
                .arg(a.values.arg())?
                .arg(b.offsets.arg())?
                .arg(b.index.arg())?
                .arg(b.values.arg())?
                .arg(keys.arg())?
                .arg(vals.arg())?
                .run(&[groups * EXP_WG], Some(&[EXP_WG]))?;
        }
        drop((a_rows, a_prods));
        // Waits between the stages where a cancel may have to wait for them: the expansion,
        // the sort, the compression and the reduction each run one to a few kernels, and the
        // queue's end waits for what is in flight.
        let staged = exp >= STAGED_FROM;
        if staged {
            q.finish_or_cancel(run)?;
        }

        let (keys, vals) = self.segmented_sort(q, keys, vals, exp_len, longest)?;
        if staged {
            q.finish_or_cancel(run)?;
        }

        // Compression (Alg. 2 l. 40-49, Alg. 3).
        let _span = tracing::info_span!("compress", products = exp).entered();
        let nb = exp_len.div_ceil(SCAN_BLOCK);
        let mut block_offsets = q.alloc::<u64>(nb + 1, "head counts per block")?;
        q.zero(&mut block_offsets, "head counts per block")?;
        q.kernel(prog, "count_heads")?
            .arg(keys.arg())?
            .arg(exp)?
            .arg(block_offsets.arg())?
            .run(&[nb * SCAN_WG], Some(&[SCAN_WG]))?;
        exclusive_scan(q, prog, &block_offsets, nb + 1)?;
        if staged {
            q.finish_or_cancel(run)?;
        }
        // The only host synchronisation with host operands: the size of the product, to
        // allocate it.
        let nnz_c = q.download_at(&block_offsets, nb, 1, "product size")?[0];
        let nnz_c_len = usize::try_from(nnz_c).map_err(|_| too_large("the product", nnz_c))?;
        let run_start = q.alloc::<u64>(nnz_c_len + 1, "run starts")?;
        let c_index = q.alloc_in::<u32>(nnz_c_len, "C column indices", !keep)?;
        let c_offsets = q.alloc_in::<u64>(nrows + 1, "C row offsets", !keep)?;
        q.kernel(prog, "compress")?
            .arg(keys.arg())?
            .arg(exp)?
            .arg(block_offsets.arg())?
            .arg(nnz_c)?
            .arg(nrows as u64)?
            .arg(run_start.arg())?
            .arg(c_index.arg())?
            .arg(c_offsets.arg())?
            .run(&[nb * SCAN_WG], Some(&[SCAN_WG]))?;
        // The CSR invariants of C, checked on the device: its flag comes back with C, so a
        // wrong product is still refused, without walking C again on the host (0.7 ms of the
        // road class's 3.9 ms call on the H100's host). Not on CPU devices: there the device is
        // the host's own cores, and the kernel took 40 ms of PoCL's road call where the host's
        // check of the same arrays takes a few.
        let flag = if self.state.description.kind != DeviceKind::Cpu {
            let mut flag = q.alloc::<u32>(1, "check flag")?;
            q.zero(&mut flag, "check flag")?;
            q.kernel(prog, "check_product")?
                .arg(keys.arg())?
                .arg(exp)?
                .arg(run_start.arg())?
                .arg(nnz_c)?
                .arg(nrows as u64)?
                .arg(ncols as u64)?
                .arg(c_offsets.arg())?
                .arg(c_index.arg())?
                .arg(flag.arg())?
                .run(&[nnz_c_len.max(nrows + 1)], None)?;
            Some(flag)
        } else {
            None
        };

        let per_entry = self.entry_values();
        let value_bytes = std::mem::size_of::<T>();
        let c_vals = q.alloc_in::<u8>(nnz_c_len * per_entry * value_bytes, "C values", !keep)?;
        match self.multiply {
            Multiply::Scalar => q
                .kernel(prog, "esc_reduce")?
                .arg(nnz_c)?
                .arg(run_start.arg())?
                .arg(vals.arg())?
                .arg(c_vals.arg())?
                .run(&[nnz_c_len], None)?,
            Multiply::Block { r, k, s } => q
                .kernel(prog, "bsr_multiply")?
                .arg(nnz_c)?
                .arg(r as u32)?
                .arg(k as u32)?
                .arg(s as u32)?
                .arg(run_start.arg())?
                .arg(vals.arg())?
                .arg(a.values.arg())?
                .arg(b.values.arg())?
                .arg(c_vals.arg())?
                .run(&[nnz_c_len * per_entry], None)?,
        }
        if staged {
            q.finish_or_cancel(run)?;
        }
        run.add_done(exp);
        Ok(Some(DeviceProduct {
            nrows,
            ncols,
            nnz: nnz_c,
            offsets: c_offsets,
            index: c_index,
            values: c_vals,
            flag,
        }))
    }

    /// Setup (Alg. 1): the row of each entry of A and its number of products, scanned.
    fn setup(
        &self,
        q: &Queue<'_>,
        (a, b): (DeviceOperand<'_>, DeviceOperand<'_>),
    ) -> Result<(DeviceBuffer<u32>, DeviceBuffer<u64>)> {
        let prog = self.program;
        let nnz_a = a.nnz as usize;
        let _span = tracing::info_span!("setup", nnz_a).entered();
        let a_rows = q.alloc::<u32>(nnz_a, "row of each entry of A")?;
        let a_prods = q.alloc::<u64>(nnz_a + 1, "products per entry of A")?;
        q.kernel(prog, "esc_setup")?
            .arg(a.nnz)?
            .arg(a.nrows as u64)?
            .arg(a.offsets.arg())?
            .arg(a.index.arg())?
            .arg(b.offsets.arg())?
            .arg(a_rows.arg())?
            .arg(a_prods.arg())?
            .run(&[nnz_a.max(1)], None)?;
        exclusive_scan(q, prog, &a_prods, nnz_a + 1)?;
        Ok((a_rows, a_prods))
    }

    /// The expansion's size and longest row for operands on the device, counted there.
    pub(crate) fn sizes_on_device(
        &self,
        q: &Queue<'_>,
        (a, b): (DeviceOperand<'_>, DeviceOperand<'_>),
    ) -> Result<(u64, u64)> {
        if a.nnz == 0 || b.nnz == 0 {
            return Ok((0, 0));
        }
        let _setup = self.pool.reserve(setup_bytes(a.nnz), "ESC SpGEMM setup")?;
        let (_rows, a_prods) = self.setup(q, (a, b))?;
        device_sizes(q, self.program, a, &a_prods)
    }

    /// An `nrows × ncols` product without entries, on the device.
    fn empty_product(
        &self,
        q: &Queue<'_>,
        nrows: usize,
        ncols: usize,
        keep: bool,
    ) -> Result<DeviceProduct> {
        let mut offsets = q.alloc_in::<u64>(nrows + 1, "C row offsets", !keep)?;
        q.zero(&mut offsets, "C row offsets")?;
        Ok(DeviceProduct {
            nrows,
            ncols,
            nnz: 0,
            offsets,
            index: q.alloc_in::<u32>(0, "C column indices", !keep)?,
            values: q.alloc_in::<u8>(0, "C values", !keep)?,
            flag: None,
        })
    }

    /// Sorts each row's run of (column, payload) pairs: tiles in local memory, then global
    /// merge passes that move only the rows crossing run boundaries, alternating between the
    /// expansion's buffers and a second pair (returns the pair that holds the result). Passes
    /// over pairs of runs double the sorted width while it is below the `longest` row; then
    /// one pass across every run boundary finishes (a row no longer than the width crosses at
    /// most one).
    fn segmented_sort(
        &self,
        q: &Queue<'_>,
        keys: DeviceBuffer<u64>,
        vals: DeviceBuffer<u8>,
        n: usize,
        longest: u64,
    ) -> Result<(DeviceBuffer<u64>, DeviceBuffer<u8>)> {
        let prog = self.program;
        let tile = crate::kernels::sort_tile(&self.state.description, self.payload_bytes);
        let _span = tracing::info_span!("sort", n, tile, longest).entered();
        let tiles = n.div_ceil(tile);
        q.kernel(prog, "sort_tiles")?
            .arg(keys.arg())?
            .arg(vals.arg())?
            .arg(n as u64)?
            .run(&[tiles * SORT_WG], Some(&[SORT_WG]))?;
        if n <= tile {
            return Ok((keys, vals));
        }
        let mut from = (keys, vals);
        let mut to = (
            q.alloc::<u64>(n, "merge keys")?,
            q.alloc::<u8>(n * self.payload_bytes, "merge values")?,
        );
        let mut w = tile as u64;
        while w < n as u64 {
            let last = w >= longest;
            let kernel = if last {
                "merge_boundaries"
            } else {
                "merge_pass"
            };
            q.kernel(prog, kernel)?
                .arg(from.0.arg())?
                .arg(from.1.arg())?
                .arg(to.0.arg())?
                .arg(to.1.arg())?
                .arg(n as u64)?
                .arg(w)?
                .run(&[n], Some(&[256]))?;
            std::mem::swap(&mut from, &mut to);
            if last {
                break;
            }
            w *= 2;
        }
        Ok(from)
    }
}

/// The size of the expansion of `A·B` (Σ over A's entries (i, k) of the length of B's row k) and
/// its longest row (the sort's longest segment), from the host's copies of the operands. Counts
/// saturate at `u64::MAX`, which no budget admits. The operands were checked (columns of A
/// index rows of B).
pub(crate) fn expansion_sizes<T: Scalar>(
    a: &Compressed<'_, T>,
    b: &Compressed<'_, T>,
) -> (u64, u64) {
    use rayon::prelude::*;
    let row = |i: usize| -> u64 {
        let (s, e) = (a.offsets[i] as usize, a.offsets[i + 1] as usize);
        a.index[s..e].iter().fold(0u64, |sum, &k| {
            let k = k as usize;
            sum.saturating_add(b.offsets[k + 1] - b.offsets[k])
        })
    };
    (0..a.nrows)
        .into_par_iter()
        .with_min_len(4096)
        .map(|i| {
            let n = row(i);
            (n, n)
        })
        .reduce(|| (0, 0), |x, y| (x.0.saturating_add(y.0), x.1.max(y.1)))
}

/// The expansion's size and longest row, on the device, from the scanned products per entry
/// of A: the size is the scan's last element, the longest row the largest difference of the
/// scan at A's row offsets (reduced over blocks of rows).
fn device_sizes(
    q: &Queue<'_>,
    prog: &Program,
    a: DeviceOperand<'_>,
    a_prods: &DeviceBuffer<u64>,
) -> Result<(u64, u64)> {
    let _span = tracing::info_span!("expansion size", nrows = a.nrows).entered();
    let nb = a.nrows.div_ceil(SCAN_BLOCK).max(1);
    let mut maxima = q.alloc::<u64>(nb, "longest row per block")?;
    q.kernel(prog, "row_products_max")?
        .arg(a.nrows as u64)?
        .arg(a.offsets.arg())?
        .arg(a_prods.arg())?
        .arg(maxima.arg())?
        .run(&[nb * SCAN_WG], Some(&[SCAN_WG]))?;
    let mut n = nb;
    while n > 1 {
        let next = n.div_ceil(SCAN_BLOCK);
        let reduced = q.alloc::<u64>(next, "longest row per block")?;
        q.kernel(prog, "max_blocks")?
            .arg(maxima.arg())?
            .arg(n as u64)?
            .arg(reduced.arg())?
            .run(&[next * SCAN_WG], Some(&[SCAN_WG]))?;
        maxima = reduced;
        n = next;
    }
    let exp = q.download_at(a_prods, a.nnz as usize, 1, "expansion size")?[0];
    let longest = q.download_at(&maxima, 0, 1, "longest row")?[0];
    Ok((exp, longest))
}

/// [`Error::TooLarge`] for `what` of `n` products or entries on this host.
fn too_large(what: &str, n: u64) -> Error {
    Error::TooLarge {
        what: what.into(),
        needed: n,
        limit: usize::MAX as u64,
        unit: "entries",
    }
}

/// The product computed on the device breaks the CSR invariants: refused.
pub(crate) fn refused() -> Error {
    crate::runtime::device_error(
        "ESC SpGEMM",
        "the product computed on the device breaks the CSR invariants (offsets, column bounds \
         or order); it was not returned",
    )
}

/// Exclusive prefix sum of `data[..n]` in place (recursive over block sums).
pub(crate) fn exclusive_scan(
    q: &Queue<'_>,
    prog: &Program,
    data: &DeviceBuffer<u64>,
    n: usize,
) -> Result<()> {
    if n == 0 {
        return Ok(());
    }
    let nb = n.div_ceil(SCAN_BLOCK);
    let sums = q.alloc::<u64>(nb, "scan block sums")?;
    q.kernel(prog, "scan_blocks")?
        .arg(data.arg())?
        .arg(n as u64)?
        .arg(sums.arg())?
        .run(&[nb * SCAN_WG], Some(&[SCAN_WG]))?;
    if nb > 1 {
        exclusive_scan(q, prog, &sums, nb)?;
        q.kernel(prog, "scan_add")?
            .arg(data.arg())?
            .arg(n as u64)?
            .arg(sums.arg())?
            .run(&[n], None)?;
    }
    Ok(())
}

/// Cuts B's columns into consecutive slices whose expansions hold at most `limit` products each.
/// The products of column j are Σ over B's entries (k, j) of the entries in column k of A.
/// The per-column counts are sized by the shapes, so they are asked of the host fallibly.
fn column_slices<T: Scalar>(
    a: &Csr<T>,
    b: &Csr<T>,
    limit: u64,
    bytes_per_product: u64,
    available_bytes: u64,
) -> Result<Vec<Range<usize>>> {
    let mut a_col = host::try_filled(a.ncols(), 0u64, "ESC SpGEMM products per column of A")?;
    for &k in a.col_indices() {
        a_col[k as usize] += 1;
    }
    let mut per_col = host::try_filled(b.ncols(), 0u64, "ESC SpGEMM products per column of B")?;
    for (k, &count) in a_col.iter().enumerate().take(b.nrows()) {
        for &j in b.row(k).0 {
            per_col[j as usize] += count;
        }
    }
    cut(
        &per_col,
        limit,
        "column",
        "B",
        bytes_per_product,
        available_bytes,
    )
}

/// Cuts A's (block) rows into consecutive bands whose expansions hold at most `limit` products
/// each. The products of row i are Σ over A's entries (i, k) of the entries in row k of B.
fn row_bands<T: Scalar>(
    a: &Compressed<'_, T>,
    b: &Compressed<'_, T>,
    limit: u64,
    bytes_per_product: u64,
    available_bytes: u64,
) -> Result<Vec<Range<usize>>> {
    let mut per_row = host::try_with_capacity(a.nrows, "ESC SpGEMM products per row of A")?;
    per_row.extend((0..a.nrows).map(|i| {
        let (s, e) = (a.offsets[i] as usize, a.offsets[i + 1] as usize);
        a.index[s..e].iter().fold(0u64, |sum, &k| {
            let k = k as usize;
            sum.saturating_add(b.offsets[k + 1] - b.offsets[k])
        })
    }));
    cut(
        &per_row,
        limit,
        "row",
        "A",
        bytes_per_product,
        available_bytes,
    )
}

/// Consecutive ranges of `weights` (products per column or row `what` of `operand`) each
/// summing to at most `limit`; [`Error::OutOfMemory`] when one alone exceeds it, with the
/// bytes its products need and `available_bytes` (what the memory pool has left).
fn cut(
    weights: &[u64],
    limit: u64,
    what: &str,
    operand: &str,
    bytes_per_product: u64,
    available_bytes: u64,
) -> Result<Vec<Range<usize>>> {
    let mut ranges = Vec::new();
    let (mut start, mut sum) = (0usize, 0u64);
    for (j, &w) in weights.iter().enumerate() {
        if w > limit {
            return Err(Error::OutOfMemory {
                backend: BACKEND,
                what: format!(
                    "ESC SpGEMM: {what} {j} of {operand} alone makes {w} products, more than \
                     the {limit} that fit the memory budget"
                ),
                needed_bytes: w.saturating_mul(bytes_per_product),
                available_bytes,
            });
        }
        // Both at most `limit`: no overflow.
        if sum + w > limit {
            ranges.push(start..j);
            start = j;
            sum = 0;
        }
        sum += w;
    }
    ranges.push(start..weights.len());
    Ok(ranges)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hetsparse_core::format::Bsr;
    use hetsparse_core::generate::{self, MatrixClass};
    use hetsparse_core::{reference, Backend, Operation, PlusTimes, SpgemmAlgorithm};

    use crate::{compressed, kernels, OpenClBackend};

    fn assert_close(c: &Csr<f64>, e: &Csr<f64>, what: &str) {
        assert_eq!(c.shape(), e.shape(), "{what}: shape");
        assert_eq!(c.row_offsets(), e.row_offsets(), "{what}: row offsets");
        assert_eq!(c.col_indices(), e.col_indices(), "{what}: columns");
        for (k, (x, y)) in c.values().iter().zip(e.values()).enumerate() {
            assert!(
                (x - y).abs() <= 1e-9 * (1.0 + y.abs()),
                "{what}: value {k}: {x} vs {y}"
            );
        }
    }

    /// Asserts that the whole product does not fit `backend`'s budget, so that the product
    /// goes through its parts.
    fn assert_over_budget<T: Scalar>(
        job: &EscJob<'_>,
        backend: &OpenClBackend,
        a: &Compressed<'_, T>,
        b: &Compressed<'_, T>,
    ) {
        let q = backend.state.queue().unwrap();
        let whole = job.whole(&q, a, b, &RunControl::new()).unwrap();
        assert!(
            matches!(whole, Whole::OverBudget { .. }),
            "the product fits"
        );
    }

    #[test]
    fn cuts_weigh_at_most_the_limit_and_refuse_what_cannot_be_cut() {
        let ranges = cut(&[3, 1, 0, 4, 2], 4, "column", "B", 10, 7).unwrap();
        assert_eq!(ranges, vec![0..3, 3..4, 4..5]);
        assert_eq!(cut(&[], 4, "row", "A", 10, 7).unwrap(), vec![0..0]);
        match cut(&[1, 5, 1], 4, "row", "A", 10, 7) {
            Err(
                e @ Error::OutOfMemory {
                    needed_bytes: 50,
                    available_bytes: 7,
                    ..
                },
            ) => assert!(e.to_string().contains("row 1 of A"), "{e}"),
            other => panic!("expected OutOfMemory, got {other:?}"),
        }
    }

    #[test]
    fn scalar_products_over_the_budget_are_assembled_from_column_slices() {
        let Some(backend) = crate::tests::device_backend("esc column slices") else {
            return;
        };
        let (x, y) = generate::product_operands::<f64>(MatrixClass::PowerLaw, 400, 7);
        let e = reference::spgemm::<f64, PlusTimes>(&x, &y).unwrap();
        // Room for the operands and a few hundred products: many slices.
        let operands = 12 * (x.nnz() + y.nnz()) + 8 * (x.nrows() + y.nrows()) as u64 + 16;
        let small = backend.with_memory_budget(operands + 200_000);
        let program = small
            .program::<f64>(Operation::Spgemm(SpgemmAlgorithm::Esc), false)
            .unwrap();
        let job = small.job(&program, Multiply::Scalar, kernels::acc_bytes(f64::TYPE));
        assert_over_budget(&job, &small, &compressed(&x), &compressed(&y));
        let q = small.state.queue().unwrap();
        let run = RunControl::new();
        let c = job.spgemm(&q, &x, &y, &run).unwrap();
        assert_close(&c, &e, "sliced");
        let progress = run.progress();
        assert_eq!(progress.done, progress.planned);
        // A·A: the one copy on the device is A and B both; B's slices come from it.
        let e = reference::spgemm::<f64, PlusTimes>(&x, &x).unwrap();
        assert_over_budget(&job, &small, &compressed(&x), &compressed(&x));
        let c = job.spgemm(&q, &x, &x, &RunControl::new()).unwrap();
        assert_close(&c, &e, "sliced A·A");
        // Nothing stays reserved once the products are back.
        assert_eq!(small.pool.available(), small.pool.limit());
    }

    #[test]
    fn block_products_over_the_budget_are_assembled_from_row_bands() {
        let Some(backend) = crate::tests::device_backend("esc row bands") else {
            return;
        };
        let x = generate::stencil_3d::<f64>(5, generate::Stencil::TwentySeven, 2, 3);
        let y = generate::stencil_3d::<f64>(5, generate::Stencil::Seven, 2, 4);
        let (bx, by) = (
            Bsr::from_csr(&x, (2, 2)).unwrap(),
            Bsr::from_csr(&y, (2, 2)).unwrap(),
        );
        let bytes = |m: &Bsr<f64>| m.values().len() * 8 + m.col_indices().len() * 4;
        let operands =
            (bytes(&bx) + bytes(&by) + 8 * (bx.block_rows() + by.block_rows() + 2)) as u64;
        // Room for the operands and a couple of thousand products: both the whole product and
        // the first attempt's limit are exceeded, each band fits.
        let small = backend.with_memory_budget(operands + 200_000);
        let program = small.program::<f64>(Operation::BsrSpgemm, true).unwrap();
        let multiply = Multiply::Block { r: 2, k: 2, s: 2 };
        let job = small.job(&program, multiply, kernels::BLOCK_PAYLOAD_BYTES);
        let q = small.state.queue().unwrap();
        for (a, b, what) in [(&bx, &by, "A·B"), (&bx, &bx, "A·A")] {
            let (ca, cb) = (Compressed::of_bsr(a), Compressed::of_bsr(b));
            assert_over_budget(&job, &small, &ca, &cb);
            let run = RunControl::new();
            let c = job.block_product(&q, &ca, &cb, &run).unwrap();
            let progress = run.progress();
            assert_eq!(progress.done, progress.planned, "{what}");
            let c = Bsr::try_new(
                (2, 2),
                c.nrows,
                c.ncols,
                c.offsets.into_owned(),
                c.index.into_owned(),
                c.values.into_owned(),
            )
            .unwrap();
            let e = reference::spgemm::<f64, PlusTimes>(&a.to_csr().unwrap(), &b.to_csr().unwrap())
                .unwrap();
            // C's blocks hold explicit zeros where a block's product has some: compare the
            // values at the reference's entries and require the rest to be zero.
            let got = c.to_csr().unwrap();
            for i in 0..e.nrows() {
                let (ec, ev) = e.row(i);
                for (j, v) in ec.iter().zip(ev) {
                    let g = got.get(i, *j as usize).unwrap_or(0.0);
                    assert!(
                        (g - v).abs() <= 1e-9 * (1.0 + v.abs()),
                        "{what}: C[{i},{j}]"
                    );
                }
                let (gc, gv) = got.row(i);
                for (j, g) in gc.iter().zip(gv) {
                    if e.get(i, *j as usize).is_none() {
                        assert_eq!(*g, 0.0, "{what}: C[{i},{j}] outside the product");
                    }
                }
            }
        }
        assert_eq!(small.pool.available(), small.pool.limit());
    }

    #[test]
    fn a_block_row_too_large_for_the_budget_is_an_out_of_memory_error() {
        let Some(backend) = crate::tests::device_backend("esc row bands") else {
            return;
        };
        let x = generate::stencil_3d::<f64>(4, generate::Stencil::TwentySeven, 2, 5);
        let bx = Bsr::from_csr(&x, (2, 2)).unwrap();
        // Room for A once (A·A) and a little: no band of A fits beside it.
        let operand = (bx.values().len() * 8 + bx.col_indices().len() * 4) as u64
            + 8 * (bx.block_rows() as u64 + 1);
        let small = backend.with_memory_budget(operand + 1000);
        let r = small.bsr_spgemm(&bx, &bx);
        match r {
            Err(
                e @ Error::OutOfMemory {
                    needed_bytes,
                    available_bytes,
                    ..
                },
            ) => {
                assert!(e.to_string().contains("row 0 of A"), "{e}");
                assert!(
                    available_bytes > 0
                        && available_bytes <= 1000
                        && needed_bytes > available_bytes,
                    "{e}"
                );
            }
            other => panic!("expected OutOfMemory, got {other:?}"),
        }
    }
}
