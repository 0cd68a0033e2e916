//! SpGEMM over a semiring other than plus-times, and with a mask (GraphBLAS semantics,
//! [`hetsparse_core::semiring`]).
//!
//! - Without a mask, the ESC pipeline runs as for plus-times, from the scalar program compiled
//!   for the semiring ([`KernelSemiring`]): only its expansion's multiply and its reduction's
//!   add differ.
//! - With a mask that is not complemented, the masked program (masked.cl) computes only the
//!   entries the mask admits: one work-item per row of C accumulates in the mask row's slots,
//!   and a product whose column the mask row does not hold is skipped before it is multiplied.
//!   Structural and valued masks are the same here: a valued mask's zeros were left out when
//!   it was made. The kernel counts, per row, the products it multiplied and those of the
//!   row without the mask, and the totals (scanned on the device, read back with C's size)
//!   go to [`RunControl::add_masked_work`], counted as the CPU backend counts them, so
//!   [`RunControl::masked_work`] tells what the mask saved on either backend.
//! - With a complemented mask there is no row of candidates to accumulate into (it admits
//!   every position its matrix does *not* hold), so the product is computed whole by ESC and
//!   the refused entries are dropped on the device afterwards: cheaper than a mask-driven
//!   kernel whenever the mask's matrix is sparse, which complemented masks (BFS's visited set)
//!   usually are. ESC multiplies every product, so the mask saves none, and no masked work is
//!   reported for it.
//!
//! Replace and merge are the same for a product made as a new C (there is no C to merge
//! into); accumulating into an existing C is [`hetsparse_core::write_back`]'s.

use std::sync::Arc;

use opencl3::program::Program;

use hetsparse_core::backend::{CsrOperand, SpgemmOptions};
use hetsparse_core::format::Csr;
use hetsparse_core::{
    Error, Mask, MaskedWork, Operation, Result, RunControl, Scalar, SemiringKind,
};

use crate::esc::{self, DeviceOperand, DeviceProduct};
use crate::kernels::{self, KernelSemiring};
use crate::ops::Product;
use crate::resident::{structure_bytes, upload_positions, ClStructure};
use crate::runtime::{Queue, Variant};
use crate::OpenClBackend;

impl OpenClBackend {
    /// The mask's positions on this device: the copy the mask keeps in this context's memory
    /// ([`Mask::kept_in`]), uploaded the first time a product here reads the mask.
    fn kept_mask(&self, q: &Queue<'_>, mask: &Mask) -> Result<Arc<ClStructure>> {
        mask.kept_in(self.state.space(), |mask| {
            let _span = tracing::debug_span!("mask uploaded", entries = mask.entries()).entered();
            upload_positions(
                &self.state,
                &self.pool,
                q,
                mask.shape(),
                mask.row_offsets(),
                mask.col_indices(),
            )
        })
    }

    /// The program of `kind` over `T`: the scalar kernels, or the masked ones when `masked`;
    /// compiled once per context and cached by [`Variant`].
    pub(crate) fn semiring_program<T: Scalar>(
        &self,
        op: Operation,
        kind: SemiringKind,
        masked: bool,
    ) -> Result<Arc<Program>> {
        self.check_scalar::<T>(op)?;
        let ty = T::TYPE;
        let semiring = KernelSemiring::new(kind, ty)?;
        let d = &self.state.description;
        if masked {
            self.state.program(Variant::Masked(ty, kind), || {
                kernels::masked_program(ty, semiring)
            })
        } else {
            self.state.program(Variant::Scalar(ty, kind), || {
                kernels::scalar_program(ty, semiring, d)
            })
        }
    }

    /// `C⟨M⟩ = A·B` over the semiring and mask of `options` (either operand host or
    /// resident), C on the device where it fits there; with the program that made it (for
    /// [`OpenClBackend::fetch`], so that nothing else is compiled to bring C back).
    pub(crate) fn spgemm_over<T: Scalar>(
        &self,
        q: &Queue<'_>,
        a: CsrOperand<'_, T>,
        b: CsrOperand<'_, T>,
        options: &SpgemmOptions,
        run: &RunControl,
    ) -> Result<(Product<T>, Arc<Program>)> {
        let op = Operation::Spgemm(options.algorithm);
        let _span = tracing::info_span!(
            "spgemm over a semiring",
            semiring = %options.semiring,
            masked = options.mask.is_some(),
            m = a.shape().0,
            k = a.shape().1,
            n = b.shape().1
        )
        .entered();
        let mask = match &options.mask {
            None => {
                let program = self.semiring_program::<T>(op, options.semiring, false)?;
                let c = match (a, b) {
                    (CsrOperand::Host(ha), CsrOperand::Host(hb)) => {
                        Product::Host(self.spgemm_host(q, &program, ha, hb, run)?)
                    }
                    _ => self.spgemm_on_device(q, &program, a, b, run)?,
                };
                return Ok((c, program));
            }
            Some(mask) => mask,
        };
        let masked = self.semiring_program::<T>(op, options.semiring, true)?;
        if !mask.is_complemented() {
            let a_up = self.upload_operand(q, a, "A")?;
            let same =
                matches!((a, b), (CsrOperand::Host(x), CsrOperand::Host(y)) if x.shares_arrays(y));
            let b_up = if same {
                None
            } else {
                self.upload_operand(q, b, "B")?
            };
            let a_dev = self.device_view(a, &a_up)?;
            let b_dev = if same {
                a_dev
            } else {
                self.device_view(b, &b_up)?
            };
            // Progress in the unmasked product's intermediate products (counted on the host
            // for host operands; a resident operand's are not counted), as ESC reports it.
            let products = match (a, b) {
                (CsrOperand::Host(ha), CsrOperand::Host(hb)) => run.plan_product(ha, hb)?,
                _ => 0,
            };
            let c = self.masked_product::<T>(q, &masked, (a_dev, b_dev), b.shape().1, mask, run)?;
            run.add_done(products);
            return Ok((Product::Device(c), masked));
        }
        let program = self.semiring_program::<T>(op, options.semiring, false)?;
        let c = match self.spgemm_on_device(q, &program, a, b, run)? {
            Product::Device(c) => Product::Device(self.drop_refused::<T>(q, &masked, c, mask)?),
            // The expansion did not fit the device: C came back in column slices, and the
            // refused entries are dropped on the host (the write-back of C into an empty C
            // under the mask).
            Product::Host(c) => {
                let empty = Csr::<T>::zeros(c.nrows(), c.ncols())?;
                Product::Host(hetsparse_core::write_back(&empty, &c, Some(mask), None)?)
            }
        };
        Ok((c, masked))
    }

    /// `C⟨M⟩ = A·B` for a mask that is not complemented, by the masked program: C's buffers
    /// are allocated to stay (outside the reuse pool), as ESC's are for a resident product.
    fn masked_product<T: Scalar>(
        &self,
        q: &Queue<'_>,
        program: &Program,
        (a, b): (DeviceOperand<'_>, DeviceOperand<'_>),
        ncols: usize,
        mask: &Mask,
        run: &RunControl,
    ) -> Result<DeviceProduct> {
        let nrows = a.nrows;
        let slots = mask.entries();
        let slots_len = usize::try_from(slots).map_err(|_| too_large("the mask", slots))?;
        let _span = tracing::info_span!("masked spgemm", nrows, mask_entries = slots).entered();
        // The mask's copy holds a reservation of its own for as long as it is kept.
        let kept = self.kept_mask(q, mask)?;
        let (m_offsets, m_index) = (&kept.offsets, &kept.index);
        let _work = self
            .pool
            .reserve(masked_work_bytes::<T>(nrows, mask), "masked SpGEMM")?;
        let acc = q.alloc::<u8>(slots_len * kernels::acc_bytes(T::TYPE), "mask accumulators")?;
        let hit = q.alloc::<u8>(slots_len, "mask hits")?;
        // The counts, once scanned, are C's offsets: allocated to stay.
        let counts = q.alloc_kept::<u64>(nrows + 1, "C row offsets")?;
        // Each row's multiply-adds and unmasked products, scanned into totals.
        let done = q.alloc::<u64>(nrows + 1, "masked multiply-adds")?;
        let all = q.alloc::<u64>(nrows + 1, "unmasked multiply-adds")?;
        run.checkpoint()?;
        q.kernel(program, "masked_rows")?
            .arg(nrows as u64)?
            .arg(a.offsets.arg())?
            .arg(a.index.arg())?
            .arg(a.values.arg())?
            .arg(b.offsets.arg())?
            .arg(b.index.arg())?
            .arg(b.values.arg())?
            .arg(m_offsets.arg())?
            .arg(m_index.arg())?
            .arg(acc.arg())?
            .arg(hit.arg())?
            .arg(counts.arg())?
            .arg(done.arg())?
            .arg(all.arg())?
            .run(&[nrows + 1], None)?;
        for totals in [&counts, &done, &all] {
            esc::exclusive_scan(q, program, totals, nrows + 1)?;
        }
        q.finish_or_cancel(run)?;
        // The one host synchronisation: C's size, to allocate it, with the work's totals.
        let (mut nnz_c, mut work) = ([0u64], [0u64; 2]);
        {
            let (done_total, all_total) = work.split_at_mut(1);
            q.read_all(
                &mut [
                    counts.download_from(nrows, &mut nnz_c, "masked product size")?,
                    done.download_from(nrows, done_total, "masked multiply-adds")?,
                    all.download_from(nrows, all_total, "unmasked multiply-adds")?,
                ],
                "masked product size",
            )?;
        }
        let work = MaskedWork {
            multiply_adds: work[0],
            unmasked_multiply_adds: work[1],
        };
        run.add_masked_work(work);
        tracing::debug!(
            multiply_adds = work.multiply_adds,
            unmasked_multiply_adds = work.unmasked_multiply_adds,
            nnz_c = nnz_c[0],
            "masked SpGEMM"
        );
        let nnz_c = nnz_c[0];
        let nnz_len = usize::try_from(nnz_c).map_err(|_| too_large("the product", nnz_c))?;
        let c_index = q.alloc_kept::<u32>(nnz_len, "C column indices")?;
        let c_values = q.alloc_kept::<u8>(nnz_len * std::mem::size_of::<T>(), "C values")?;
        if nrows > 0 {
            q.kernel(program, "masked_compact")?
                .arg(nrows as u64)?
                .arg(m_offsets.arg())?
                .arg(m_index.arg())?
                .arg(acc.arg())?
                .arg(hit.arg())?
                .arg(counts.arg())?
                .arg(c_index.arg())?
                .arg(c_values.arg())?
                .run(&[nrows], None)?;
        }
        Ok(DeviceProduct {
            nrows,
            ncols,
            nnz: nnz_c,
            offsets: counts,
            index: c_index,
            values: c_values,
            flag: None,
        })
    }

    /// `c` without the entries a complemented `mask` refuses (those its matrix holds), on the
    /// device; C's check flag, where ESC ran one, goes with the result.
    fn drop_refused<T: Scalar>(
        &self,
        q: &Queue<'_>,
        program: &Program,
        c: DeviceProduct,
        mask: &Mask,
    ) -> Result<DeviceProduct> {
        let nrows = c.nrows;
        let _span = tracing::info_span!("drop refused entries", nrows, nnz_c = c.nnz).entered();
        if c.nnz == 0 || mask.entries() == 0 || nrows == 0 {
            return Ok(c);
        }
        let kept = self.kept_mask(q, mask)?;
        let (m_offsets, m_index) = (&kept.offsets, &kept.index);
        let _work = self
            .pool
            .reserve(refused_work_bytes(nrows), "complemented mask")?;
        let counts = q.alloc_kept::<u64>(nrows + 1, "C row offsets")?;
        q.kernel(program, "keep_count")?
            .arg(nrows as u64)?
            .arg(c.offsets.arg())?
            .arg(c.index.arg())?
            .arg(m_offsets.arg())?
            .arg(m_index.arg())?
            .arg(counts.arg())?
            .run(&[nrows + 1], None)?;
        esc::exclusive_scan(q, program, &counts, nrows + 1)?;
        let nnz = q.download_at(&counts, nrows, 1, "masked product size")?[0];
        let nnz_len = usize::try_from(nnz).map_err(|_| too_large("the product", nnz))?;
        let index = q.alloc_kept::<u32>(nnz_len, "C column indices")?;
        let values = q.alloc_kept::<u8>(nnz_len * std::mem::size_of::<T>(), "C values")?;
        q.kernel(program, "keep_copy")?
            .arg(nrows as u64)?
            .arg(c.offsets.arg())?
            .arg(c.index.arg())?
            .arg(c.values.arg())?
            .arg(m_offsets.arg())?
            .arg(m_index.arg())?
            .arg(counts.arg())?
            .arg(index.arg())?
            .arg(values.arg())?
            .run(&[nrows], None)?;
        Ok(DeviceProduct {
            nrows,
            ncols: c.ncols,
            nnz,
            offsets: counts,
            index,
            values,
            flag: c.flag,
        })
    }
}

/// What the masked kernels reserve for `C⟨M⟩ = A·B` with `nrows` rows over `T`, a mask that
/// is not complemented, beside the mask's copy ([`mask_copy_bytes`]): an accumulator and a hit
/// flag per admitted position, and three counts per row (C's entries, for the scan that makes
/// C's offsets, and the row's masked and unmasked multiply-adds).
fn masked_work_bytes<T: Scalar>(nrows: usize, mask: &Mask) -> u64 {
    (nrows as u64 + 1).saturating_mul(24).saturating_add(
        mask.entries()
            .saturating_mul(1 + kernels::acc_bytes(T::TYPE) as u64),
    )
}

/// What dropping the entries a complemented mask refuses from a product of `nrows` rows
/// reserves beside the mask's copy: the kept entries' counts (C's new offsets).
fn refused_work_bytes(nrows: usize) -> u64 {
    (nrows as u64 + 1).saturating_mul(8)
}

/// The bytes of `mask`'s copy on the device (its offsets and columns), which the mask keeps
/// with a reservation of its own ([`OpenClBackend::kept_mask`]).
fn mask_copy_bytes(mask: &Mask) -> u64 {
    structure_bytes(mask.shape().0, mask.entries())
}

/// The work a product of `nrows` rows with `options` reserves beside the ESC pipeline's (the
/// mask's copy and the masked kernels', or the pass that applies a complemented mask), for a
/// requirement: what [`OpenClBackend::spgemm_over`] adds to plus-times' ESC (which bounds the
/// masked kernels' operands and product too).
pub(crate) fn extra_work_bytes<T: Scalar>(nrows: usize, options: &SpgemmOptions) -> u64 {
    match &options.mask {
        None => 0,
        Some(mask) if mask.is_complemented() => {
            refused_work_bytes(nrows).saturating_add(mask_copy_bytes(mask))
        }
        Some(mask) => masked_work_bytes::<T>(nrows, mask).saturating_add(mask_copy_bytes(mask)),
    }
}

/// [`Error::InvalidArgument`] for a size the host cannot address.
fn too_large(what: &str, n: u64) -> Error {
    Error::InvalidArgument(format!(
        "{}: {what} has {n} entries, more than this host can address",
        crate::BACKEND
    ))
}
