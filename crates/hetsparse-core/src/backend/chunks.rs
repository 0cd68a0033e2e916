//! The chunk protocol the scheduler drives: parts of one product computed on one backend,
//! handed back as they complete or written straight into their places in C, their symbolic
//! counts alone, and rows of a band product.
//!
//! It is apart from the operations. Every backend gets the [`plain`] protocol, built from its
//! operations and correct whatever memory it computes in; a backend that pipelines chunks
//! (overlapping transfers with kernels, reading windows in place, writing C once) implements
//! [`ChunkPipeline`] and answers [`Backend::chunk_pipeline`](super::Backend::chunk_pipeline)
//! with itself. Callers use [`Backend::spgemm_chunks`](super::Backend::spgemm_chunks) and its
//! siblings, which dispatch.

use std::borrow::Cow;
use std::mem::MaybeUninit;
use std::ops::Range;
use std::time::Instant;

use super::{
    check, Backend, ChunkPlace, ChunkProduct, ChunkSink, ChunkTiming, CsrOperand, CsrWindow,
    PlaceDone, ProductChunk, RunControl, SpgemmOptions, Validated,
};
use crate::error::{Error, Result};
use crate::format::{Csr, Dia, DiaRowBlock};
use crate::scalar::Scalar;

/// A backend's own chunk protocol. Only [`ChunkPipeline::chunks`] is required; the others
/// default to the [`plain`] protocol, which builds them from it and the backend's operations.
///
/// Each method receives what the public method [`Validated`]: the product as SpGEMM checks it,
/// chunks inside it, the arguments of a band product's rows.
// A chunk call carries the operands, the chunks, the options, the run, where results go and
// the validation's evidence: one argument more than clippy's default.
#[allow(clippy::too_many_arguments)]
pub trait ChunkPipeline<T: Scalar>: Backend<T> {
    /// Computes the listed chunks of `A · B`, handing each to `sink` as it completes
    /// ([`Backend::spgemm_chunks`](super::Backend::spgemm_chunks), whose contract this keeps).
    fn chunks(
        &self,
        a: CsrOperand<'_, T>,
        b: CsrOperand<'_, T>,
        chunks: &[ProductChunk],
        options: &SpgemmOptions,
        run: &RunControl,
        sink: &mut ChunkSink<'_, T>,
        checked: Validated,
    ) -> Result<()>;

    /// Computes chunks straight into their places in C
    /// ([`Backend::spgemm_chunks_into`](super::Backend::spgemm_chunks_into)). The default
    /// copies each chunk [`ChunkPipeline::chunks`] computes into its place.
    fn chunks_into(
        &self,
        a: CsrOperand<'_, T>,
        b: CsrOperand<'_, T>,
        places: &mut [ChunkPlace<'_, T>],
        options: &SpgemmOptions,
        run: &RunControl,
        done: &mut PlaceDone<'_>,
        checked: Validated,
    ) -> Result<()> {
        plain::spgemm_chunks_into(self, a, b, places, options, run, done, checked)
    }

    /// The entries of each row of each chunk, the symbolic phase alone
    /// ([`Backend::spgemm_chunk_counts`](super::Backend::spgemm_chunk_counts)). The default
    /// counts on the host.
    fn chunk_counts(
        &self,
        a: CsrOperand<'_, T>,
        b: CsrOperand<'_, T>,
        chunks: &[ProductChunk],
        options: &SpgemmOptions,
        run: &RunControl,
        counts: &mut dyn FnMut(usize, &[u64]) -> Result<()>,
        checked: Validated,
    ) -> Result<()> {
        plain::spgemm_chunk_counts(self, a, b, chunks, options, run, counts, checked)
    }

    /// Rows of a band product written where they lie
    /// ([`Backend::dia_spgemm_rows`](super::Backend::dia_spgemm_rows)). The default multiplies
    /// the rows' block with [`Backend::dia_spgemm`](super::Backend::dia_spgemm).
    fn dia_rows(
        &self,
        a: &Dia<T>,
        b: &Dia<T>,
        rows: Range<usize>,
        offsets: &[i64],
        c: &mut [&mut [MaybeUninit<T>]],
        checked: Validated,
    ) -> Result<()> {
        plain::dia_spgemm_rows(self, a, b, rows, offsets, c, checked)
    }
}

/// The chunk protocol of any backend, built from its operations: what a backend without a
/// [`ChunkPipeline`] runs, and the defaults of one.
pub mod plain {
    use super::*;

    /// A SpGEMM operand's matrix on the host: itself, the host matrix behind a host-stored
    /// handle of `backend`'s memory, or a download of a handle the backend keeps elsewhere.
    pub fn host_operand<'m, T: Scalar, B: Backend<T> + ?Sized>(
        backend: &B,
        m: CsrOperand<'m, T>,
    ) -> Result<Cow<'m, Csr<T>>> {
        match m {
            CsrOperand::Host(m) => Ok(Cow::Borrowed(m)),
            CsrOperand::Resident(r) => {
                check::same_space(backend, r.space(), "a resident matrix")?;
                match r.host() {
                    Some(h) => Ok(Cow::Borrowed(h)),
                    None => Ok(Cow::Owned(backend.download(r)?)),
                }
            }
        }
    }

    /// Each chunk by [`Backend::spgemm_with`]: the operands themselves where a chunk's window
    /// of one is all of it, else a copy of the window ([`CsrWindow::to_csr`]).
    #[allow(clippy::too_many_arguments)]
    pub fn spgemm_chunks<T: Scalar, B: Backend<T> + ?Sized>(
        backend: &B,
        a: CsrOperand<'_, T>,
        b: CsrOperand<'_, T>,
        chunks: &[ProductChunk],
        options: &SpgemmOptions,
        run: &RunControl,
        sink: &mut ChunkSink<'_, T>,
        checked: Validated,
    ) -> Result<()> {
        // Host copies only where some chunk takes part of an operand.
        let (nrows, ncols) = (a.shape().0, b.shape().1);
        let ha = if chunks.iter().any(|c| c.rows != (0..nrows)) {
            Some(host_operand(backend, a)?)
        } else {
            None
        };
        let hb = if chunks.iter().any(|c| c.cols != (0..ncols)) {
            Some(host_operand(backend, b)?)
        } else {
            None
        };
        for (index, chunk) in chunks.iter().enumerate() {
            run.checkpoint()?;
            let start = Instant::now();
            let compute = || -> Result<Csr<T>> {
                let ca = match (&ha, chunk.rows != (0..nrows)) {
                    (Some(h), true) => {
                        Some(CsrWindow::rows_of(&**h, chunk.rows.clone())?.to_csr()?)
                    }
                    _ => None,
                };
                let cb = match (&hb, chunk.cols != (0..ncols)) {
                    (Some(h), true) => {
                        Some(CsrWindow::columns_of(&**h, chunk.cols.clone())?.to_csr()?)
                    }
                    _ => None,
                };
                match (&ca, &cb) {
                    // The operands as validated.
                    (None, None) => backend.spgemm_checked(a, b, options, run, checked),
                    // A window is a product of its own, validated as one.
                    _ => {
                        let pa = ca.as_ref().map_or(a, CsrOperand::from);
                        let pb = cb.as_ref().map_or(b, CsrOperand::from);
                        backend.spgemm_with(pa, pb, &chunk_options(options, chunk)?, run)
                    }
                }
            };
            let product = compute().map_err(|e| e.in_chunk(index))?;
            sink(ChunkProduct {
                index,
                chunk: chunk.clone(),
                product,
                timing: ChunkTiming::host(start.elapsed()),
            })?;
        }
        Ok(())
    }

    /// `options` for the product of one chunk as a product of its own: its mask, if any, cut to
    /// the chunk ([`Mask::window`](crate::Mask::window)).
    fn chunk_options(options: &SpgemmOptions, chunk: &ProductChunk) -> Result<SpgemmOptions> {
        match &options.mask {
            None => Ok(options.clone()),
            Some(mask) => Ok(options
                .clone()
                .with_mask(mask.window(chunk.rows.clone(), chunk.cols.clone())?)),
        }
    }

    /// Each chunk from [`plain::spgemm_chunks`](spgemm_chunks) or the backend's own
    /// [`ChunkPipeline::chunks`], copied into its place.
    #[allow(clippy::too_many_arguments)]
    pub fn spgemm_chunks_into<T: Scalar, B: Backend<T> + ?Sized>(
        backend: &B,
        a: CsrOperand<'_, T>,
        b: CsrOperand<'_, T>,
        places: &mut [ChunkPlace<'_, T>],
        options: &SpgemmOptions,
        run: &RunControl,
        done: &mut PlaceDone<'_>,
        checked: Validated,
    ) -> Result<()> {
        let chunks: Vec<ProductChunk> = places.iter().map(|p| p.chunk().clone()).collect();
        let mut sink = |c: ChunkProduct<T>| {
            let place = places.get_mut(c.index).ok_or_else(|| Error::Internal {
                backend: backend.info().backend,
                what: format!("chunk {} of {} came back", c.index, chunks.len()),
            })?;
            place.write_csr(&c.product)?;
            done(c.index, c.timing)
        };
        match backend.chunk_pipeline() {
            Some(p) => p.chunks(a, b, &chunks, options, run, &mut sink, checked),
            None => spgemm_chunks(backend, a, b, &chunks, options, run, &mut sink, checked),
        }
    }

    /// Counts on the host ([`crate::analysis::symbolic_panel_nnz`]).
    #[allow(clippy::too_many_arguments)]
    pub fn spgemm_chunk_counts<T: Scalar, B: Backend<T> + ?Sized>(
        backend: &B,
        a: CsrOperand<'_, T>,
        b: CsrOperand<'_, T>,
        chunks: &[ProductChunk],
        options: &SpgemmOptions,
        run: &RunControl,
        counts: &mut dyn FnMut(usize, &[u64]) -> Result<()>,
        checked: Validated,
    ) -> Result<()> {
        if options.mask.is_some() {
            // A masked chunk's pattern is known once it is computed: the backend computes it.
            return spgemm_chunks(
                backend,
                a,
                b,
                chunks,
                options,
                run,
                &mut |part| {
                    let c = &part.product;
                    let rows: Vec<u64> = (0..c.nrows()).map(|i| c.row_nnz(i)).collect();
                    counts(part.index, &rows)
                },
                checked,
            );
        }
        let (ha, hb) = (host_operand(backend, a)?, host_operand(backend, b)?);
        for (index, chunk) in chunks.iter().enumerate() {
            run.checkpoint()?;
            let panel = std::slice::from_ref(&chunk.cols);
            let rows = crate::analysis::symbolic_panel_nnz(&ha, chunk.rows.clone(), &hb, panel)
                .map_err(|e| e.in_chunk(index))?;
            counts(index, &rows)?;
        }
        Ok(())
    }

    /// The rows' [`DiaRowBlock`] multiplied as a product of its own, its diagonals copied in.
    pub fn dia_spgemm_rows<T: Scalar, B: Backend<T> + ?Sized>(
        backend: &B,
        a: &Dia<T>,
        b: &Dia<T>,
        rows: Range<usize>,
        offsets: &[i64],
        c: &mut [&mut [MaybeUninit<T>]],
        _checked: Validated,
    ) -> Result<()> {
        let product = match DiaRowBlock::new(a, b, rows.clone()) {
            None => None,
            Some(block) => {
                let (ba, bb) = block.operands(a, b)?;
                Some(backend.dia_spgemm(&ba, &bb)?)
            }
        };
        let shift = rows.start as i64;
        if let Some(p) = &product {
            for (d, &off) in p.offsets().iter().enumerate() {
                let s = off - shift;
                if offsets.binary_search(&s).is_err()
                    && p.diagonal(d).iter().any(|x| *x != T::zero())
                {
                    return Err(Error::InvalidArgument(format!(
                        "DIA×DIA rows {rows:?}: C has a diagonal of offset {s}, not among the offsets given"
                    )));
                }
            }
        }
        for (&s, out) in offsets.iter().zip(c.iter_mut()) {
            let diagonal = product.as_ref().and_then(|p| {
                let d = p.offsets().binary_search(&(s + shift)).ok()?;
                Some(p.diagonal(d))
            });
            match diagonal {
                Some(from) => crate::host::copy_streaming(out, from),
                None => out.iter_mut().for_each(|x| {
                    x.write(T::zero());
                }),
            }
        }
        Ok(())
    }
}
