//! The operations on device buffers behind the [`Backend`](hetsparse_core::Backend) impl:
//! operand resolution (host matrices copied for the call, resident ones used where they
//! lie), SpGEMM, SpMV and SpMM with results left on the device, plans' numeric phase, and
//! chunks.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Instant;

use opencl3::program::Program;

use hetsparse_core::backend::plan::{OperandPattern, PlanState};
use hetsparse_core::backend::{
    ChunkSink, CsrOperand, CsrWindow, DenseOperand, MemoryRequirement, PatternId, ProductChunk,
    ResidentCsr, ResidentDense, SparseOperand, SpgemmOptions, SpgemmPlan, VectorOperand,
};
use hetsparse_core::format::{Csr, Dense, Layout, SparseRef};
use hetsparse_core::{ChunkProduct, DeviceKind, Error, Reservation, Result, RunControl, Scalar};

use crate::esc::{self, Compressed, DeviceOperand, DeviceProduct, Multiply, Uploaded};
use crate::kernels;
use crate::multiply::{self, DenseIn, RowOperand};
use crate::resident::{self, ClCsr, ClDense, ClStructure};
use crate::runtime::{DeviceBuffer, Queue, Ready};
use crate::scalar::{bytes_of, is_device_scalar};
use crate::slice;
use crate::{compressed, OpenClBackend, BACKEND};

/// Products per batch of a plan's numeric phase on a CPU device (PoCL) and on a GPU: the
/// phase runs in batches with a wait between them (at most 64), so that a cancel waits for one
/// batch. A GPU computes far more per batch, and each wait leaves it idle for a moment.
const NUMERIC_BATCH_PRODUCTS_CPU: u64 = 1 << 22;
const NUMERIC_BATCH_PRODUCTS_GPU: u64 = 1 << 27;

/// A product computed on the device, or (when its expansion did not fit) on the host path
/// that cuts B into column slices.
pub(crate) enum Product<T> {
    Device(DeviceProduct),
    Host(Csr<T>),
}

/// The plan state: the product's structure, resident, and its rows split by product count.
///
/// Fields drop in order: the split's buffer before the structure (and the state it holds).
pub(crate) struct ClPlan {
    split: Option<RowSplit>,
    structure: Arc<ClStructure>,
}

/// The rows of a planned product with medium or long rows, for a program with atomics, in
/// three tiers by their products (see [`kernels::MEDIUM_ROW_PRODUCTS`] and
/// [`kernels::LONG_ROW_PRODUCTS`]): `rows` holds the short rows (one work-item each), then the
/// medium ones ([`kernels::MEDIUM_LANES`] work-items each), then the long ones, so that each
/// kernel reads a contiguous list. `groups` holds the medium rows' work-groups, group `g` the
/// rows at positions `groups[g]..groups[g + 1]` of `rows`: at most [`kernels::MEDIUM_ROWS`]
/// consecutive ones whose entries of C fit [`kernels::numeric_medium_entries`] together.
/// `segments` holds the long rows' segments of at most [`kernels::numeric_segment`] entries of
/// C, one work-group each, as `row << 32 | segment`.
struct RowSplit {
    rows: DeviceBuffer<u32>,
    groups: DeviceBuffer<u32>,
    segments: DeviceBuffer<u64>,
    short: usize,
    medium: usize,
    long: usize,
    group_count: usize,
    segment_count: usize,
    /// Device bytes of the three buffers, which the plan holds for every execution.
    bytes: u64,
    _reservation: Reservation,
}

/// Which numeric kernel a row of a planned product runs through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tier {
    Short,
    Medium,
    Long,
}

/// The arguments the numeric kernels share after their own (`a_offsets` to `flag` in esc.cl).
fn numeric_args<'q>(
    launch: crate::runtime::Launch<'q>,
    (a, b): (&DeviceOperand<'_>, &DeviceOperand<'_>),
    s: &ClStructure,
    acc: &DeviceBuffer<u8>,
    flag: &DeviceBuffer<u32>,
) -> Result<crate::runtime::Launch<'q>> {
    launch
        .arg(a.offsets.arg())?
        .arg(a.index.arg())?
        .arg(a.values.arg())?
        .arg(b.offsets.arg())?
        .arg(b.index.arg())?
        .arg(b.values.arg())?
        .arg(s.offsets.arg())?
        .arg(s.index.arg())?
        .arg(acc.arg())?
        .arg(flag.arg())
}

impl OpenClBackend {
    /// [`Error::InvalidArgument`] unless `T` is the Rust type of a scalar type whose bytes the
    /// device holds (every [`hetsparse_core::ScalarType`]).
    pub(crate) fn holds<T: Scalar>(&self) -> Result<()> {
        if is_device_scalar::<T>() {
            Ok(())
        } else {
            Err(Error::InvalidArgument(format!(
                "{BACKEND}: {} values of this Rust type cannot be held on the device (only the \
                 Rust types of hetsparse's scalar types)",
                T::TYPE
            )))
        }
    }

    /// The storage of a resident CSR matrix of this backend's memory (the public methods
    /// validated that).
    pub(crate) fn csr_storage<'a, T: Scalar>(&self, m: &'a ResidentCsr<T>) -> Result<&'a ClCsr> {
        m.storage::<ClCsr>()
            .ok_or_else(|| resident::foreign_storage("a resident matrix"))
    }

    /// The storage of a resident dense matrix of this backend's memory (the public methods
    /// validated that).
    pub(crate) fn dense_storage<'a, T: Scalar>(
        &self,
        d: &'a ResidentDense<T>,
    ) -> Result<&'a ClDense> {
        d.storage::<ClDense>()
            .ok_or_else(|| resident::foreign_storage("a resident dense matrix"))
    }

    pub(crate) fn wrap_csr<T: Scalar>(&self, c: ClCsr, pattern: PatternId) -> ResidentCsr<T> {
        let s = &c.structure;
        let (shape, nnz) = ((s.nrows, s.ncols), s.nnz);
        ResidentCsr::from_storage(self.state.space(), shape, nnz, pattern, c)
    }

    pub(crate) fn wrap_dense<T: Scalar>(&self, d: ClDense) -> ResidentDense<T> {
        let (shape, layout) = ((d.nrows, d.ncols), d.layout);
        ResidentDense::from_storage(self.state.space(), shape, layout, d)
    }

    /// Copies `m` to the device, to stay.
    pub(crate) fn upload_csr<T: Scalar>(&self, q: &Queue<'_>, m: &Csr<T>) -> Result<ClCsr> {
        self.holds::<T>()?;
        let _span = tracing::info_span!("upload", nrows = m.nrows(), nnz = m.nnz()).entered();
        let structure = resident::upload_structure(&self.state, &self.pool, q, m)?;
        resident::upload_values(&self.pool, q, structure, m.values())
    }

    /// A host operand copied to the device for the call (`None` for a resident one).
    pub(crate) fn upload_operand<T: Scalar>(
        &self,
        q: &Queue<'_>,
        op: CsrOperand<'_, T>,
        name: &str,
    ) -> Result<Option<Uploaded>> {
        match op {
            CsrOperand::Host(m) => Ok(Some(esc::upload(q, &self.pool, &compressed(m), name)?)),
            CsrOperand::Resident(_) => Ok(None),
        }
    }

    /// An operand's arrays on the device: its upload or its resident storage.
    pub(crate) fn device_view<'o, T: Scalar>(
        &self,
        op: CsrOperand<'o, T>,
        up: &'o Option<Uploaded>,
    ) -> Result<DeviceOperand<'o>> {
        match (op, up) {
            (_, Some(u)) => Ok(u.view()),
            (CsrOperand::Resident(r), None) => Ok(self.csr_storage(r)?.operand()),
            (CsrOperand::Host(_), None) => Err(not_uploaded()),
        }
    }

    /// An operand on the host: itself, or a resident one downloaded.
    fn host_view<'o, T: Scalar>(
        &self,
        q: &Queue<'_>,
        op: CsrOperand<'o, T>,
    ) -> Result<Cow<'o, Csr<T>>> {
        Ok(match op {
            CsrOperand::Host(m) => Cow::Borrowed(m),
            CsrOperand::Resident(r) => Cow::Owned(resident::download_csr(q, self.csr_storage(r)?)?),
        })
    }

    // --- SpGEMM --------------------------------------------------------------------------

    /// The host path: both operands copied to the device for the call, C back on the host.
    pub(crate) fn spgemm_host<T: Scalar>(
        &self,
        q: &Queue<'_>,
        program: &Program,
        a: &Csr<T>,
        b: &Csr<T>,
        run: &RunControl,
    ) -> Result<Csr<T>> {
        let _span = tracing::info_span!("spgemm esc", m = a.nrows(), k = a.ncols(), n = b.ncols())
            .entered();
        let job = self.job(program, Multiply::Scalar, kernels::acc_bytes(T::TYPE));
        job.spgemm(q, a, b, run)
    }

    /// `C = A·B` with any operand resident: C stays on the device unless its expansion does
    /// not fit what the pool has left; then the operands go through the host path, which cuts
    /// B into column slices, and C comes back on the host.
    pub(crate) fn spgemm_on_device<T: Scalar>(
        &self,
        q: &Queue<'_>,
        program: &Program,
        a: CsrOperand<'_, T>,
        b: CsrOperand<'_, T>,
        run: &RunControl,
    ) -> Result<Product<T>> {
        let _span = tracing::info_span!(
            "spgemm esc on device",
            m = a.shape().0,
            k = a.shape().1,
            n = b.shape().1
        )
        .entered();
        let job = self.job(program, Multiply::Scalar, kernels::acc_bytes(T::TYPE));
        let on_device = {
            let (a_up, b_up): (Option<Uploaded>, Option<Uploaded>);
            a_up = match a {
                CsrOperand::Host(m) => Some(esc::upload(q, &self.pool, &compressed(m), "A")?),
                CsrOperand::Resident(_) => None,
            };
            let same =
                matches!((a, b), (CsrOperand::Host(x), CsrOperand::Host(y)) if x.shares_arrays(y));
            b_up = match b {
                CsrOperand::Host(m) if !same => {
                    Some(esc::upload(q, &self.pool, &compressed(m), "B")?)
                }
                _ => None,
            };
            let a_dev = self.device_view(a, &a_up)?;
            let b_dev = if same {
                a_dev
            } else {
                self.device_view(b, &b_up)?
            };
            job.product_on_device::<T>(q, (a_dev, b_dev), b.shape().1, run)?
        };
        if let Some(c) = on_device {
            return Ok(Product::Device(c));
        }
        let (ha, hb) = (self.host_view(q, a)?, self.host_view(q, b)?);
        Ok(Product::Host(self.spgemm_host(q, program, &ha, &hb, run)?))
    }

    /// A product kept on the device as a resident matrix with identity `pattern`.
    pub(crate) fn keep<T: Scalar>(
        &self,
        q: &Queue<'_>,
        c: Product<T>,
        pattern: PatternId,
    ) -> Result<ResidentCsr<T>> {
        let kept = match c {
            Product::Device(c) => {
                resident::keep_product(&self.state, &self.pool, q, c, std::mem::size_of::<T>())?
            }
            Product::Host(c) => self.upload_csr(q, &c)?,
        };
        Ok(self.wrap_csr(kept, pattern))
    }

    /// A product brought to the host.
    pub(crate) fn fetch<T: Scalar>(
        &self,
        q: &Queue<'_>,
        program: &Program,
        c: Product<T>,
    ) -> Result<Csr<T>> {
        match c {
            Product::Device(c) => {
                let job = self.job(program, Multiply::Scalar, kernels::acc_bytes(T::TYPE));
                let (c, checked) = job.download::<T>(q, c)?;
                assemble(c, checked)
            }
            Product::Host(c) => Ok(c),
        }
    }

    /// The plan of `A·B`: the product computed once on the device, its structure kept there.
    pub(crate) fn plan<T: Scalar>(
        &self,
        program: &Program,
        a: CsrOperand<'_, T>,
        b: CsrOperand<'_, T>,
        options: &SpgemmOptions,
    ) -> Result<SpgemmPlan<T>> {
        let _span = tracing::info_span!("plan spgemm").entered();
        let run = RunControl::new();
        let q = self.state.queue()?;
        let c = self.spgemm_on_device(&q, program, a, b, &run)?;
        let c = self.keep(&q, c, PatternId::of_product(a.pattern(), b.pattern()))?;
        let storage = self.csr_storage(&c)?;
        let structure = Arc::clone(&storage.structure);
        let (nrows, nnz_c) = (structure.nrows, structure.nnz);
        // Without atomics (double on a device without 64-bit compare-and-swap) the program has
        // neither the medium- nor the long-row kernel: every row runs on one work-item.
        let split = if kernels::has_atomics(T::TYPE, &self.state.description) {
            self.row_split(&q, program, a, b, &structure)?
        } else {
            None
        };
        let split_bytes = split.as_ref().map_or(0, |s| s.bytes);
        let mut requirement = MemoryRequirement::default();
        requirement.operand_bytes = [a, b]
            .iter()
            .map(|m| match m {
                CsrOperand::Host(m) => {
                    hetsparse_core::backend::memory::csr_bytes(m.nrows(), m.nnz(), size::<T>())
                }
                CsrOperand::Resident(_) => 0,
            })
            .sum();
        // The accumulators and flag of an execution, and the split's buffers, which the plan
        // holds on the device for as long as it lives.
        requirement.work_bytes = numeric_work_bytes::<T>(nnz_c).saturating_add(split_bytes);
        // The product as a matrix (executions share the plan's structure and add values).
        requirement.output_bytes =
            hetsparse_core::backend::memory::csr_bytes(nrows, nnz_c, size::<T>());
        Ok(SpgemmPlan::new(
            self.state.space(),
            options.clone(),
            OperandPattern::of(&a),
            OperandPattern::of(&b),
            nnz_c,
            run.progress().planned,
            requirement,
            PlanState::device(ClPlan { split, structure }),
        ))
    }

    /// The rows of `A·B` split by their number of products into tiers: `None` when every row is
    /// short.
    fn row_split<T: Scalar>(
        &self,
        q: &Queue<'_>,
        program: &Program,
        a: CsrOperand<'_, T>,
        b: CsrOperand<'_, T>,
        structure: &ClStructure,
    ) -> Result<Option<RowSplit>> {
        let nrows = structure.nrows;
        if nrows == 0 || u32::try_from(nrows).is_err() {
            return Ok(None);
        }
        let counts: Vec<u32> = if let (CsrOperand::Host(ha), CsrOperand::Host(hb)) = (a, b) {
            // Host operands are counted where they are (the plan's product copied them for
            // its own call only).
            (0..nrows)
                .map(|i| {
                    let n: u64 = ha.row(i).0.iter().map(|&k| hb.row_nnz(k as usize)).sum();
                    u32::try_from(n).unwrap_or(u32::MAX)
                })
                .collect()
        } else {
            let (a_up, b_up) = (
                self.upload_operand(q, a, "A")?,
                self.upload_operand(q, b, "B")?,
            );
            let (a_dev, b_dev) = (self.device_view(a, &a_up)?, self.device_view(b, &b_up)?);
            let _work = self.pool.reserve(4 * nrows as u64, "SpGEMM row products")?;
            let counts = q.alloc::<u32>(nrows, "row products")?;
            q.kernel(program, "spgemm_row_products")?
                .arg(nrows as u64)?
                .arg(a_dev.offsets.arg())?
                .arg(a_dev.index.arg())?
                .arg(b_dev.offsets.arg())?
                .arg(counts.arg())?
                .run(&[nrows], None)?;
            q.download_at(&counts, 0, nrows, "row products")?
        };
        // Every row short (road networks, for one): no split, and C's offsets stay on the
        // device.
        if counts.iter().all(|&c| c <= kernels::MEDIUM_ROW_PRODUCTS) {
            return Ok(None);
        }
        // C's row lengths decide whether a medium row fits a medium group's local memory (else
        // it goes to the long rows, whose segments take any length) and cut the long rows
        // into segments.
        let c_offsets = q.download_at(&structure.offsets, 0, nrows + 1, "C offsets")?;
        let c_len = |i: u32| c_offsets[i as usize + 1] - c_offsets[i as usize];
        let medium_entries = kernels::numeric_medium_entries(T::TYPE, &self.state.description);
        let medium_entries = medium_entries as u64;
        let tiers: Vec<Tier> = (0..nrows as u32)
            .map(|i| match counts[i as usize] {
                c if c <= kernels::MEDIUM_ROW_PRODUCTS => Tier::Short,
                c if c <= kernels::LONG_ROW_PRODUCTS && c_len(i) <= medium_entries => Tier::Medium,
                _ => Tier::Long,
            })
            .collect();
        let tiers = &tiers;
        let in_tier = |t: Tier| (0..nrows as u32).filter(move |&i| tiers[i as usize] == t);
        let rows: Vec<u32> = in_tier(Tier::Short)
            .chain(in_tier(Tier::Medium))
            .chain(in_tier(Tier::Long))
            .collect();
        let short = tiers.iter().filter(|&&t| t == Tier::Short).count();
        let medium = tiers.iter().filter(|&&t| t == Tier::Medium).count();
        let long = nrows - short - medium;
        // The medium rows' groups, packed in order: a group closes when it has a row for each
        // of its MEDIUM_ROWS sets of lanes or the next row's entries would not fit beside
        // its rows' in local memory.
        let mut groups = vec![short as u32];
        let (mut in_group, mut entries) = (0usize, 0u64);
        for (p, &i) in rows.iter().enumerate().skip(short).take(medium) {
            if in_group == kernels::MEDIUM_ROWS || entries + c_len(i) > medium_entries {
                groups.push(p as u32);
                (in_group, entries) = (0, 0);
            }
            in_group += 1;
            entries += c_len(i);
        }
        groups.push((short + medium) as u32);
        if medium == 0 {
            groups.truncate(1);
        }
        // The long rows' segments (a row without entries still gets one, whose products all
        // fall outside the structure and are flagged).
        let seg = kernels::numeric_segment(T::TYPE, &self.state.description) as u64;
        let mut segments = Vec::new();
        for &i in &rows[short + medium..] {
            let n = c_len(i).div_ceil(seg).max(1);
            if n > u64::from(u32::MAX) {
                return Err(Error::TooLarge {
                    what: "segments of a row of the planned product".into(),
                    needed: n,
                    limit: u64::from(u32::MAX),
                    unit: "segments",
                });
            }
            segments.extend((0..n).map(|k| (u64::from(i) << 32) | k));
        }
        let bytes = 4 * nrows as u64 + 4 * groups.len() as u64 + 8 * segments.len() as u64;
        let reservation = self.pool.reserve(bytes, "SpGEMM plan rows")?;
        let buffer = q.alloc_kept::<u32>(nrows, "plan rows")?;
        let group_buffer = q.alloc_kept::<u32>(groups.len(), "plan row groups")?;
        let segment_buffer = q.alloc_kept::<u64>(segments.len(), "plan row segments")?;
        q.write_all(
            &[
                buffer.upload_of(&rows, "plan rows")?,
                group_buffer.upload_of(&groups, "plan row groups")?,
                segment_buffer.upload_of(&segments, "plan row segments")?,
            ],
            "plan rows",
        )?;
        tracing::debug!(
            short,
            medium,
            long,
            segments = segments.len(),
            "plan row split"
        );
        Ok(Some(RowSplit {
            rows: buffer,
            groups: group_buffer,
            segments: segment_buffer,
            short,
            medium,
            long,
            group_count: groups.len() - 1,
            segment_count: segments.len(),
            bytes,
            _reservation: reservation,
        }))
    }

    /// The numeric phase of `plan` on the device: C's values into the planned structure.
    pub(crate) fn execute<T: Scalar>(
        &self,
        program: &Program,
        plan: &SpgemmPlan<T>,
        a: CsrOperand<'_, T>,
        b: CsrOperand<'_, T>,
        run: &RunControl,
    ) -> Result<ResidentCsr<T>> {
        let state = plan
            .device_state::<ClPlan>()
            .ok_or_else(|| Error::Internal {
                backend: BACKEND,
                what: "the SpGEMM plan holds no OpenCL structure".into(),
            })?;
        let s = &state.structure;
        let _span =
            tracing::info_span!("execute spgemm plan", nrows = s.nrows, nnz = s.nnz).entered();
        run.checkpoint()?;
        run.add_planned(plan.products());
        run.checkpoint()?;
        let q = self.state.queue()?;
        let (a_up, b_up) = (
            self.upload_operand(&q, a, "A")?,
            self.upload_operand(&q, b, "B")?,
        );
        let (a_dev, b_dev) = (self.device_view(a, &a_up)?, self.device_view(b, &b_up)?);
        let nnz = hetsparse_core::host::entry_count(s.nnz, "the planned product")?;
        let _work = self
            .pool
            .reserve(numeric_work_bytes::<T>(s.nnz), "SpGEMM numeric phase")?;
        let values_reservation = self
            .pool
            .reserve(resident::value_bytes::<T>(s.nnz), "resident product values")?;
        let values = q.alloc_kept::<u8>(nnz * size::<T>(), "C values")?;
        let in_place = accumulates_in_place::<T>();
        let separate = if in_place {
            None
        } else {
            Some(q.alloc::<u8>(nnz * kernels::acc_bytes(T::TYPE), "C accumulators")?)
        };
        let acc = separate.as_ref().unwrap_or(&values);
        let mut flag = q.alloc::<u32>(1, "pattern flag")?;
        q.zero(&mut flag, "pattern flag")?;
        let ops = (&a_dev, &b_dev);
        match &state.split {
            None => {
                // Rows in batches with a wait between them, so that a cancel waits for one
                // batch, not the whole phase; the kernel's bound is the batch's last row.
                let per_batch = if self.state.description.kind == DeviceKind::Cpu {
                    NUMERIC_BATCH_PRODUCTS_CPU
                } else {
                    NUMERIC_BATCH_PRODUCTS_GPU
                };
                let batches = plan.products().div_ceil(per_batch).clamp(1, 64) as usize;
                for k in 0..batches {
                    let rows = k * s.nrows / batches..(k + 1) * s.nrows / batches;
                    if k > 0 {
                        q.finish_or_cancel(run)?;
                    }
                    let launch = q.kernel(program, "spgemm_numeric")?.arg(rows.end as u64)?;
                    numeric_args(launch, ops, s, acc, &flag)?.run_from(
                        rows.start,
                        &[rows.len()],
                        None,
                    )?;
                }
            }
            Some(split) => {
                let _span = tracing::debug_span!(
                    "split numeric phase",
                    medium_rows = split.medium,
                    groups = split.group_count,
                    long_rows = split.long,
                    segments = split.segment_count
                )
                .entered();
                // Short rows one work-item each, as above; medium rows MEDIUM_LANES
                // work-items each, several rows per group; long rows one work-group per
                // segment. Each tier writes its rows' accumulators, every entry exactly once.
                let launch = q
                    .kernel(program, "spgemm_numeric_rows")?
                    .arg(split.short as u64)?
                    .arg(split.rows.arg())?;
                numeric_args(launch, ops, s, acc, &flag)?.run(&[split.short], None)?;
                q.finish_or_cancel(run)?;
                let launch = q
                    .kernel(program, "spgemm_numeric_medium")?
                    .arg(split.group_count as u64)?
                    .arg(split.rows.arg())?
                    .arg(split.groups.arg())?;
                numeric_args(launch, ops, s, acc, &flag)?.run(
                    &[split.group_count * kernels::NUM_WG],
                    Some(&[kernels::NUM_WG]),
                )?;
                q.finish_or_cancel(run)?;
                let launch = q
                    .kernel(program, "spgemm_numeric_segments")?
                    .arg(split.segment_count as u64)?
                    .arg(split.segments.arg())?;
                numeric_args(launch, ops, s, acc, &flag)?.run(
                    &[split.segment_count * kernels::NUM_WG],
                    Some(&[kernels::NUM_WG]),
                )?;
            }
        }
        if let Some(acc) = &separate {
            q.kernel(program, "acc_to_store")?
                .arg(s.nnz)?
                .arg(acc.arg())?
                .arg(values.arg())?
                .run(&[nnz], None)?;
        }
        q.finish_or_cancel(run)?;
        if q.download_at(&flag, 0, 1, "pattern flag")?[0] != 0 {
            return Err(Error::PatternMismatch {
                operand: "A·B",
                detail: "a product of the operands falls outside the planned structure".into(),
            });
        }
        run.add_done(plan.products());
        let c = ClCsr {
            structure: Arc::clone(s),
            values,
            _reservation: values_reservation,
        };
        Ok(self.wrap_csr(c, plan.c_pattern()))
    }

    /// What `A·B` needs on the device: operands copied for the call, the expansion (setup
    /// arrays, keys and payloads with their merge copies, run starts) and the product, at most
    /// one entry per product and per column of B in each row. The expansion's size is counted
    /// on the host for host operands, on the device (setup kernels and a reduction) otherwise.
    pub(crate) fn requirement<T: Scalar>(
        &self,
        program: &Program,
        a: CsrOperand<'_, T>,
        b: CsrOperand<'_, T>,
    ) -> Result<MemoryRequirement> {
        let _span = tracing::info_span!("spgemm requirement").entered();
        let job = self.job(program, Multiply::Scalar, kernels::acc_bytes(T::TYPE));
        let (nrows, ncols) = (a.shape().0, b.shape().1);
        let host_bytes = |m: &CsrOperand<'_, T>| match m {
            CsrOperand::Host(m) => {
                hetsparse_core::backend::memory::csr_bytes(m.nrows(), m.nnz(), size::<T>())
            }
            CsrOperand::Resident(_) => 0,
        };
        let same =
            matches!((a, b), (CsrOperand::Host(x), CsrOperand::Host(y)) if x.shares_arrays(y));
        let operand_bytes = host_bytes(&a) + if same { 0 } else { host_bytes(&b) };
        let exp = match (a, b) {
            (CsrOperand::Host(ha), CsrOperand::Host(hb)) => {
                esc::expansion_sizes(&compressed(ha), &compressed(hb)).0
            }
            _ => {
                let q = self.state.queue()?;
                let (a_up, b_up) = (
                    self.upload_operand(&q, a, "A")?,
                    self.upload_operand(&q, b, "B")?,
                );
                let views = (self.device_view(a, &a_up)?, self.device_view(b, &b_up)?);
                job.sizes_on_device(&q, views)?.0
            }
        };
        let mut requirement = MemoryRequirement::default();
        requirement.operand_bytes = operand_bytes;
        // What the pipeline reserves: the product is bounded by the expansion (and the
        // product's cells), which is what it reserves for before C's size is known.
        let (work, output) = job.expansion_bytes::<T>(a.nnz(), nrows, ncols, exp);
        requirement.work_bytes = work;
        requirement.output_bytes = output;
        Ok(requirement)
    }

    /// Each chunk on its own profiling queue, timed by its events: from host operands, rows
    /// of A times a column panel of B cut on the host and copied (the host path); with a
    /// resident operand, its part cut on the device (kernels copying the rows or the panel)
    /// and C computed there, then brought back.
    pub(crate) fn chunks<T: Scalar>(
        &self,
        program: &Program,
        a: CsrOperand<'_, T>,
        b: CsrOperand<'_, T>,
        chunks: &[ProductChunk],
        run: &RunControl,
        sink: &mut ChunkSink<'_, T>,
    ) -> Result<()> {
        let _span = tracing::info_span!("spgemm chunks", count = chunks.len()).entered();
        if let (CsrOperand::Host(ha), CsrOperand::Host(hb)) = (a, b) {
            return self.host_chunks(program, (ha, hb), chunks, run, sink);
        }
        for (index, chunk) in chunks.iter().enumerate() {
            run.checkpoint()?;
            let start = Instant::now();
            let _chunk = tracing::debug_span!("chunk", index).entered();
            let compute = || -> Result<(Csr<T>, crate::runtime::Timing)> {
                let q = self.state.timed_queue()?;
                let c = self.chunk_on_device(&q, program, a, b, chunk, run)?;
                q.finish()?;
                Ok((c, q.timing()))
            };
            let (product, timing) = compute().map_err(|e| e.in_chunk(index))?;
            sink(ChunkProduct {
                index,
                chunk: chunk.clone(),
                product,
                timing: timing.chunk(start.elapsed()),
            })?;
        }
        Ok(())
    }

    /// Chunks of host operands: the parts of the next chunk (its windows of A and B, copied
    /// where they are not a whole operand) are cut on another thread while the device
    /// computes this one. A chunk's wall time is its own cutting plus its computation.
    fn host_chunks<'m, T: Scalar>(
        &self,
        program: &Program,
        (ha, hb): (&'m Csr<T>, &'m Csr<T>),
        chunks: &[ProductChunk],
        run: &RunControl,
        sink: &mut ChunkSink<'_, T>,
    ) -> Result<()> {
        type Parts<'m, T> = Result<(Cow<'m, Csr<T>>, Cow<'m, Csr<T>>, std::time::Duration)>;
        let cut = |chunk: &ProductChunk| -> Parts<'m, T> {
            let start = Instant::now();
            let _span = tracing::debug_span!("cut chunk").entered();
            let (rows, panel) = chunk.windows(ha, hb)?;
            Ok((rows.as_csr()?, panel.as_csr()?, start.elapsed()))
        };
        let cut = &cut;
        std::thread::scope(|s| -> Result<()> {
            let spawn = |k: usize| {
                std::thread::Builder::new()
                    .name("hetsparse-opencl chunk cutter".into())
                    .spawn_scoped(s, move || cut(&chunks[k]))
                    .map_err(|e| Error::Internal {
                        backend: BACKEND,
                        what: format!("no thread to cut chunks on: {e}"),
                    })
            };
            let mut next = if chunks.is_empty() {
                None
            } else {
                Some(spawn(0)?)
            };
            for (index, chunk) in chunks.iter().enumerate() {
                let Some(cutting) = next.take() else {
                    break;
                };
                let parts = cutting.join().map_err(|_| Error::Internal {
                    backend: BACKEND,
                    what: format!("the thread cutting chunk {index} panicked"),
                })?;
                run.checkpoint()?;
                if index + 1 < chunks.len() {
                    next = Some(spawn(index + 1)?);
                }
                let _chunk = tracing::debug_span!("chunk", index).entered();
                let compute =
                    || -> Result<(Csr<T>, crate::runtime::Timing, std::time::Duration)> {
                        let (rows, panel, cutting) = parts?;
                        let start = Instant::now();
                        let q = self.state.timed_queue()?;
                        let c = self.spgemm_host(&q, program, &rows, &panel, run)?;
                        q.finish()?;
                        Ok((c, q.timing(), cutting + start.elapsed()))
                    };
                let (product, timing, wall) = compute().map_err(|e| e.in_chunk(index))?;
                sink(ChunkProduct {
                    index,
                    chunk: chunk.clone(),
                    product,
                    timing: timing.chunk(wall),
                })?;
            }
            Ok(())
        })
    }

    /// One chunk with a resident operand: its windows used where they lie or cut there
    /// (resident) or copied to the device (host), C computed there; through the host path
    /// when its expansion does not fit.
    fn chunk_on_device<T: Scalar>(
        &self,
        q: &Queue<'_>,
        program: &Program,
        a: CsrOperand<'_, T>,
        b: CsrOperand<'_, T>,
        chunk: &ProductChunk,
        run: &RunControl,
    ) -> Result<Csr<T>> {
        let (a_window, b_window) = chunk.windows(a, b)?;
        let a_part = self.window_on_device(q, program, a_window, "rows of A")?;
        let b_part = self.window_on_device(q, program, b_window, "panel of B")?;
        let job = self.job(program, Multiply::Scalar, kernels::acc_bytes(T::TYPE));
        let width = chunk.cols.len();
        match job.product_on_device::<T>(q, (a_part.view(), b_part.view()), width, run)? {
            Some(c) => {
                let (c, checked) = job.download::<T>(q, c)?;
                assemble(c, checked)
            }
            None => {
                let ha = resident::download_operand::<T>(q, a_part.view(), a.shape().1, false)?;
                let hb = resident::download_operand::<T>(q, b_part.view(), width, false)?;
                drop((a_part, b_part));
                self.spgemm_host(q, program, &ha, &hb, run)
            }
        }
    }

    /// Window `w` of an operand on the device: a resident one where it lies or cut there
    /// ([`slice::window`]), a host one copied (only the window).
    fn window_on_device<'a, T: Scalar>(
        &self,
        q: &Queue<'_>,
        program: &Program,
        w: CsrWindow<CsrOperand<'a, T>>,
        what: &str,
    ) -> Result<slice::Part<'a>> {
        match *w.matrix() {
            CsrOperand::Host(m) => {
                let part = w.resolve(|_| Ok(m))?.as_csr()?;
                Ok(slice::Part::Cut(esc::upload(
                    q,
                    &self.pool,
                    &compressed(&part),
                    what,
                )?))
            }
            CsrOperand::Resident(r) => {
                let storage = self.csr_storage(r)?;
                slice::window::<T>(q, program, &self.pool, &w.resolve(|_| Ok(storage))?)
            }
        }
    }

    // --- SpMV and SpMM ---------------------------------------------------------------------

    /// `y = A·x` on the device, y left there: its buffer, length and reservation. Host
    /// operands are copied for the call (formats without a row kernel as CSR).
    pub(crate) fn spmv_on_device<T: Scalar>(
        &self,
        q: &Queue<'_>,
        program: &Program,
        a: SparseOperand<'_, T>,
        x: VectorOperand<'_, T>,
        keep: bool,
        run: &RunControl,
    ) -> Result<(DeviceBuffer<u8>, usize, Reservation)> {
        let mut owned = None;
        let host_rows = match a {
            SparseOperand::Resident(_) => None,
            SparseOperand::Host(m) => Some(row_operand(m, &mut owned)?),
        };
        let n = a.shape().0;
        // Reserved before anything is allocated: what is copied for the call, and y.
        let copied = host_rows.as_ref().map_or(0, RowOperand::bytes)
            + match x {
                VectorOperand::Host(v) => resident::value_bytes::<T>(v.len() as u64),
                VectorOperand::Resident(_) => 0,
            };
        let _work = self.pool.reserve(copied, "SpMV operands")?;
        let y_reservation = self
            .pool
            .reserve(resident::value_bytes::<T>(n as u64), "SpMV result")?;
        let rows = match (a, &host_rows) {
            (SparseOperand::Resident(r), _) => self.csr_storage(r)?.rows(),
            (_, Some(h)) => h.upload(q)?,
            (SparseOperand::Host(_), None) => return Err(not_uploaded()),
        };
        let x_up;
        let x_dev: &DeviceBuffer<u8> = match x {
            VectorOperand::Resident(d) => {
                let d = self.dense_storage(d)?;
                d.wait_ready()?;
                &d.data
            }
            VectorOperand::Host(v) => {
                x_up = q.upload(bytes_of(v), "x")?;
                &x_up
            }
        };
        // Progress: one product per entry of A.
        let products = match (a, &host_rows) {
            (SparseOperand::Resident(r), _) => r.nnz(),
            (_, Some(h)) => h.nnz(),
            _ => 0,
        };
        run.add_planned(products);
        run.checkpoint()?;
        let y = multiply::spmv_device::<T>(q, program, &rows, x_dev, keep)?;
        q.finish_or_cancel(run)?;
        run.add_done(products);
        Ok((y, n, y_reservation))
    }

    /// `C = A·B` on the device, C (in B's layout) left there: its buffer, shape, layout and
    /// reservation.
    #[allow(clippy::type_complexity)]
    pub(crate) fn spmm_on_device<T: Scalar>(
        &self,
        q: &Queue<'_>,
        program: &Program,
        a: SparseOperand<'_, T>,
        b: DenseOperand<'_, T>,
        keep: bool,
        run: &RunControl,
    ) -> Result<(DeviceBuffer<u8>, (usize, usize), Layout, Reservation)> {
        let mut owned = None;
        let host_rows = match a {
            SparseOperand::Resident(_) => None,
            SparseOperand::Host(m) => Some(row_operand(m, &mut owned)?),
        };
        let (m, n) = (a.shape().0, b.shape().1);
        // Reserved before anything is allocated: what is copied for the call, and C.
        let copied = host_rows.as_ref().map_or(0, RowOperand::bytes)
            + match b {
                DenseOperand::Host(d) => resident::value_bytes::<T>(d.data().len() as u64),
                DenseOperand::Resident(_) => 0,
            };
        let _work = self.pool.reserve(copied, "SpMM operands")?;
        let c_reservation = self.pool.reserve(
            resident::value_bytes::<T>((m as u64).saturating_mul(n as u64)),
            "SpMM result",
        )?;
        let rows = match (a, &host_rows) {
            (SparseOperand::Resident(r), _) => self.csr_storage(r)?.rows(),
            (_, Some(h)) => h.upload(q)?,
            (SparseOperand::Host(_), None) => return Err(not_uploaded()),
        };
        let b_up;
        let b_in = match b {
            DenseOperand::Resident(d) => {
                let d = self.dense_storage(d)?;
                d.wait_ready()?;
                d.input()
            }
            DenseOperand::Host(d) => {
                b_up = q.upload(bytes_of(d.data()), "B")?;
                DenseIn {
                    data: &b_up,
                    nrows: d.nrows(),
                    ncols: d.ncols(),
                    layout: d.layout(),
                }
            }
        };
        let layout = b_in.layout;
        // Progress: each entry of A times each column of B.
        let products = match (a, &host_rows) {
            (SparseOperand::Resident(r), _) => r.nnz(),
            (_, Some(h)) => h.nnz(),
            _ => 0,
        }
        .saturating_mul(n as u64);
        run.add_planned(products);
        run.checkpoint()?;
        let c = multiply::spmm_device::<T>(q, program, &rows, &b_in, keep)?;
        q.finish_or_cancel(run)?;
        run.add_done(products);
        Ok((c, (m, n), layout, c_reservation))
    }

    /// A result of SpMV or SpMM kept on the device.
    pub(crate) fn keep_dense<T: Scalar>(
        &self,
        data: DeviceBuffer<u8>,
        (nrows, ncols): (usize, usize),
        layout: Layout,
        reservation: Reservation,
    ) -> ResidentDense<T> {
        self.wrap_dense(ClDense {
            _state: Arc::clone(&self.state),
            nrows,
            ncols,
            layout,
            data,
            ready: Ready::default(),
            from_stream: false,
            _reservation: reservation,
        })
    }

    /// `A·x` (or `A·B`) with every operand and the result resident, queued on the device's
    /// stream by `launch`: returns before the kernel finishes; the result waits for it before
    /// any other queue reads it. `products` for progress, counted when queued.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn queued<T: Scalar>(
        &self,
        a: &ResidentCsr<T>,
        b: &ResidentDense<T>,
        (nrows, ncols): (usize, usize),
        products: u64,
        what: &str,
        run: &RunControl,
        launch: impl FnOnce(&Queue<'_>, &ClCsr, &ClDense) -> Result<DeviceBuffer<u8>>,
    ) -> Result<ResidentDense<T>> {
        let (a_dev, b_dev) = (self.csr_storage(a)?, self.dense_storage(b)?);
        let reservation = self.pool.reserve(
            resident::value_bytes::<T>((nrows as u64).saturating_mul(ncols as u64)),
            what,
        )?;
        run.add_planned(products);
        let (data, ready) = self.state.on_stream(|q| {
            a_dev.hold(q)?;
            q.hold(&b_dev.data)?;
            launch(q, a_dev, b_dev)
        })?;
        run.add_done(products);
        Ok(self.wrap_dense(ClDense {
            _state: Arc::clone(&self.state),
            nrows,
            ncols,
            layout: b_dev.layout,
            data,
            ready,
            from_stream: true,
            _reservation: reservation,
        }))
    }

    /// A dense result brought to the host.
    pub(crate) fn fetch_dense<T: Scalar>(
        &self,
        q: &Queue<'_>,
        data: &DeviceBuffer<u8>,
        (nrows, ncols): (usize, usize),
        layout: Layout,
    ) -> Result<Dense<T>> {
        let len = nrows * ncols;
        let values = if len == 0 {
            Vec::new()
        } else {
            multiply::download_values::<T>(q, data, len)?
        };
        Ok(Dense::try_new(nrows, ncols, layout, values)?)
    }
}

/// A host matrix as an operand of the row kernels: ELLPACK-R and CSR as they are, other formats
/// converted to CSR into `owned`.
fn row_operand<'o, T: Scalar>(
    m: SparseRef<'o, T>,
    owned: &'o mut Option<Csr<T>>,
) -> Result<RowOperand<'o, T>> {
    Ok(match m {
        SparseRef::Ellr(e) => RowOperand::Ellr(e),
        SparseRef::Csr(c) => RowOperand::Csr(c),
        other => RowOperand::Csr(owned.insert(other.to_csr()?.into_owned())),
    })
}

fn not_uploaded() -> Error {
    Error::Internal {
        backend: BACKEND,
        what: "a host operand was not uploaded".into(),
    }
}

fn size<T>() -> usize {
    std::mem::size_of::<T>()
}

/// Whether the numeric phase accumulates in the stored type itself (f32, f64 and their
/// complex types), so that its accumulators are C's values, with no rounding pass after.
fn accumulates_in_place<T: Scalar>() -> bool {
    kernels::acc_bytes(T::TYPE) == size::<T>()
}

/// Device bytes of the numeric phase beside the result: the flag, and an accumulator per
/// entry unless they are the values.
fn numeric_work_bytes<T: Scalar>(nnz_c: u64) -> u64 {
    if accumulates_in_place::<T>() {
        return 4;
    }
    nnz_c.saturating_mul(kernels::acc_bytes(T::TYPE) as u64) + 4
}

/// A product's arrays as a matrix: trusted when the device checked them, checked otherwise.
pub(crate) fn assemble<T: Scalar>(c: Compressed<'static, T>, checked: bool) -> Result<Csr<T>> {
    let _assemble = tracing::debug_span!("assemble", checked).entered();
    let (offsets, index, values) = (
        c.offsets.into_owned(),
        c.index.into_owned(),
        c.values.into_owned(),
    );
    if checked && values.len() == index.len() && offsets.len() == c.nrows + 1 {
        // SAFETY: the device's check_product kernel verified the offsets (length, ends,
        // monotone) and every column (bounds, strictly increasing within its row) of exactly
        // these arrays, and the pipeline refuses the product when it flags anything; the
        // lengths are checked just above.
        Ok(unsafe { Csr::from_parts_unchecked(c.nrows, c.ncols, offsets, index, values) })
    } else {
        Ok(Csr::try_new(c.nrows, c.ncols, offsets, index, values)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hetsparse_core::generate;
    use hetsparse_core::{Backend, Device};

    /// The numeric kernel itself refuses products outside the planned structure (operands
    /// whose identities were forged to match the plan's: `check_operands` cannot see it).
    #[test]
    fn the_numeric_phase_flags_products_outside_the_structure() {
        let Some(b) = crate::tests::device_backend("numeric flag") else {
            return;
        };
        let run = RunControl::new();
        let opts = SpgemmOptions::new();
        let narrow = generate::banded::<f64>(40, 3, 1);
        let wide = generate::banded::<f64>(40, 7, 1);
        let rn = b.upload(&narrow).unwrap();
        let plan = b.plan_spgemm((&rn).into(), (&rn).into(), &opts).unwrap();
        // A plan claiming to be for wide·wide, holding narrow·narrow's structure.
        let rw = b.upload(&wide).unwrap();
        let state = ClPlan {
            split: None,
            structure: Arc::clone(&plan.device_state::<ClPlan>().unwrap().structure),
        };
        let forged = SpgemmPlan::<f64>::new(
            b.memory_space(),
            opts.clone(),
            OperandPattern::of(&(&rw).into()),
            OperandPattern::of(&(&rw).into()),
            plan.c_nnz(),
            plan.products(),
            plan.requirement(),
            PlanState::device(state),
        );
        let program = b
            .program::<f64>(hetsparse_core::Operation::Spgemm(opts.algorithm), false)
            .unwrap();
        let err = b
            .execute(&program, &forged, (&rw).into(), (&rw).into(), &run)
            .unwrap_err();
        assert!(matches!(err, Error::PatternMismatch { .. }), "{err}");
        // The honest plan still runs.
        let c = b
            .execute_spgemm(&plan, (&rn).into(), (&rn).into(), &run)
            .unwrap();
        let e =
            hetsparse_core::reference::spgemm::<f64, hetsparse_core::PlusTimes>(&narrow, &narrow)
                .unwrap();
        assert_eq!(b.download(&c).unwrap().col_indices(), e.col_indices());
    }

    /// Row 0 of `x·x` long (200 entries of A, 400 products), the others short; `extra` adds
    /// column 500 to row 0, whose products fall outside `x·x`'s row 0.
    fn one_long_row(extra: bool) -> Csr<f64> {
        let n = 600;
        let (mut offsets, mut index) = (vec![0u64], Vec::new());
        for i in 0..n as u32 {
            if i == 0 {
                index.extend((0..400).step_by(2));
                if extra {
                    index.push(500);
                }
            } else {
                index.extend((i..n as u32).take(2));
            }
            offsets.push(index.len() as u64);
        }
        let values = (0..index.len()).map(|k| 1.0 + (k % 3) as f64).collect();
        Csr::try_new(n, n, offsets, index, values).unwrap()
    }

    /// The long-row kernel computes its rows and flags products outside the structure too.
    #[test]
    fn long_rows_run_on_work_groups_and_flag_products_outside_the_structure() {
        let Some(b) = crate::tests::device_backend("numeric flag, long rows") else {
            return;
        };
        let run = RunControl::new();
        let opts = SpgemmOptions::new();
        let (x, y) = (one_long_row(false), one_long_row(true));
        let rx = b.upload(&x).unwrap();
        let plan = b.plan_spgemm((&rx).into(), (&rx).into(), &opts).unwrap();
        let atomics = kernels::has_atomics(<f64 as Scalar>::TYPE, &b.state.description);
        let split = &plan.device_state::<ClPlan>().unwrap().split;
        assert_eq!(
            split.as_ref().map(|s| (s.short, s.long)),
            atomics.then_some((599, 1))
        );
        let c = b
            .execute_spgemm(&plan, (&rx).into(), (&rx).into(), &run)
            .unwrap();
        let e =
            hetsparse_core::reference::spgemm::<f64, hetsparse_core::PlusTimes>(&x, &x).unwrap();
        let c = b.download(&c).unwrap();
        assert_eq!(c.col_indices(), e.col_indices());
        for (u, v) in c.values().iter().zip(e.values()) {
            assert!((u - v).abs() <= 1e-12 * (1.0 + v.abs()), "{u} vs {v}");
        }
        // A plan claiming to be for y·x, holding x·x's structure and y·x's split.
        let program = b
            .program::<f64>(hetsparse_core::Operation::Spgemm(opts.algorithm), false)
            .unwrap();
        let ry = b.upload(&y).unwrap();
        let q = b.state.queue().unwrap();
        let split = b
            .row_split::<f64>(
                &q,
                &program,
                (&ry).into(),
                (&rx).into(),
                &plan.device_state::<ClPlan>().unwrap().structure,
            )
            .unwrap();
        if !atomics {
            return;
        }
        assert_eq!(split.as_ref().map(|s| (s.short, s.long)), Some((599, 1)));
        let err = forged_execution(&b, &program, &plan, split, (&ry, &rx));
        assert!(matches!(err, Error::PatternMismatch { .. }), "{err}");
    }

    /// `c` has `e`'s structure and values within `tolerance`, relative to each of `e`'s.
    pub(super) fn assert_close<T: Scalar>(c: &Csr<T>, e: &Csr<T>, tolerance: f64) {
        assert_eq!(c.row_offsets(), e.row_offsets(), "{}", T::TYPE);
        assert_eq!(c.col_indices(), e.col_indices(), "{}", T::TYPE);
        for (k, (u, v)) in c.values().iter().zip(e.values()).enumerate() {
            let (u, v) = (u.to_parts(), v.to_parts());
            let scale = 1.0 + v.0.abs() + v.1.abs();
            assert!(
                (u.0 - v.0).abs() + (u.1 - v.1).abs() <= tolerance * scale,
                "{} entry {k}: {u:?} vs {v:?}",
                T::TYPE
            );
        }
    }

    /// The error of executing `plan`'s structure with `split` as its row split on `y·x`, by a
    /// plan that claims to be for those operands (so that only the kernels can notice).
    pub(super) fn forged_execution(
        b: &OpenClBackend,
        program: &Program,
        plan: &SpgemmPlan<f64>,
        split: Option<RowSplit>,
        (ry, rx): (&ResidentCsr<f64>, &ResidentCsr<f64>),
    ) -> Error {
        let state = ClPlan {
            split,
            structure: Arc::clone(&plan.device_state::<ClPlan>().unwrap().structure),
        };
        let forged = SpgemmPlan::<f64>::new(
            b.memory_space(),
            plan.options().clone(),
            OperandPattern::of(&ry.into()),
            OperandPattern::of(&rx.into()),
            plan.c_nnz(),
            plan.products(),
            plan.requirement(),
            PlanState::device(state),
        );
        b.execute(program, &forged, ry.into(), rx.into(), &RunControl::new())
            .unwrap_err()
    }
}

#[cfg(test)]
mod hub_tests {
    use super::*;
    use hetsparse_core::generate;
    use hetsparse_core::Backend;

    /// `m`'s pattern with positive values of its own (no cancellation, so a relative
    /// tolerance holds).
    fn revalued<T: Scalar>(m: &Csr<T>, salt: usize) -> Csr<T> {
        let values = (0..m.nnz() as usize)
            .map(|k| {
                if T::TYPE == hetsparse_core::ScalarType::Bool {
                    // Every value above would be true; a fifth true leaves rows of C with both.
                    T::from_f64(f64::from(u8::from((k * 7 + salt) % 5 == 0)))
                } else {
                    T::from_parts_lossy(0.5 + ((k * 7 + salt) % 13) as f64 / 13.0, 0.25)
                }
            })
            .collect();
        Csr::try_new(
            m.nrows(),
            m.ncols(),
            m.row_offsets().to_vec(),
            m.col_indices().to_vec(),
            values,
        )
        .unwrap()
    }

    /// A plan of a power-law product, whose hub rows of C are longer than a local-memory
    /// segment for types of wide accumulators (`split`), executed with new values equals the
    /// reference product of those values.
    fn hub_rows_match_the_reference<T: Scalar>(b: &OpenClBackend, tolerance: f64, split: bool) {
        if !b.supports_scalar(T::TYPE) {
            return;
        }
        let x: Csr<T> = generate::rmat(13, 8, 5);
        let run = RunControl::new();
        let rx = b.upload(&x).unwrap();
        let plan = b
            .plan_spgemm((&rx).into(), (&rx).into(), &SpgemmOptions::new())
            .unwrap();
        let x2 = revalued(&x, 3);
        let rx2 = b.upload(&x2).unwrap();
        let c = b
            .execute_spgemm(&plan, (&rx2).into(), (&rx2).into(), &run)
            .unwrap();
        let c = b.download(&c).unwrap();
        let e =
            hetsparse_core::reference::spgemm::<T, hetsparse_core::PlusTimes>(&x2, &x2).unwrap();
        super::tests::assert_close(&c, &e, tolerance);
        if !split || !kernels::has_atomics(T::TYPE, &b.state.description) {
            return;
        }
        // The product has rows split into several segments, and the test covered them.
        let segment = kernels::numeric_segment(T::TYPE, &b.state.description) as u64;
        let longest = (0..c.nrows()).map(|i| c.row_nnz(i)).max().unwrap();
        assert!(longest > segment, "{}: longest row {longest}", T::TYPE);
        let split = plan
            .device_state::<ClPlan>()
            .unwrap()
            .split
            .as_ref()
            .unwrap();
        assert!(split.segment_count > split.long, "{}", T::TYPE);
    }

    #[test]
    fn hub_rows_longer_than_a_segment_match_the_reference() {
        let Some(b) = crate::tests::device_backend("numeric hub rows") else {
            return;
        };
        // Segments of 48 KiB of local memory: 3904 entries of f64 and 2304 of complex f64 (hub
        // rows of this product reach 4323 entries), 5888 of the f32 accumulators.
        hub_rows_match_the_reference::<f64>(&b, 1e-12, true);
        hub_rows_match_the_reference::<hetsparse_core::Complex<f64>>(&b, 1e-12, true);
        hub_rows_match_the_reference::<f32>(&b, 1e-5, false);
        hub_rows_match_the_reference::<hetsparse_core::Complex<f32>>(&b, 1e-5, false);
        hub_rows_match_the_reference::<hetsparse_core::f16>(&b, 2e-3, false);
        hub_rows_match_the_reference::<hetsparse_core::bf16>(&b, 1e-2, false);
        // bool's tiers `or` into their accumulators atomically.
        hub_rows_match_the_reference::<bool>(&b, 0.0, false);
    }
}

#[cfg(test)]
mod tier_tests {
    use super::*;
    use hetsparse_core::Backend;

    const N: u32 = 4096;

    /// What row `i` of [`three_tiers`] is.
    #[derive(Clone, Copy, PartialEq, Eq, Debug)]
    enum Kind {
        /// Four hub rows: 1200 short columns (1200 products), row 0 also hub 1 (2400).
        Hub,
        /// 64 short columns: 64 products.
        Wide,
        /// Two wide columns and 20 short ones: 148 products.
        Deep,
        /// No entries.
        Empty,
        /// One short column: one product.
        Short,
    }

    fn kind(i: u32) -> Kind {
        match (i, i % 64) {
            (0..=3, _) => Kind::Hub,
            (_, 1..=4) => Kind::Wide,
            (_, 5..=8) => Kind::Deep,
            (_, 9) => Kind::Empty,
            _ => Kind::Short,
        }
    }

    /// `count` distinct columns of rows of kind `k`, spread pseudo-randomly by `seed`.
    fn columns_of(k: Kind, count: usize, seed: u64) -> Vec<u32> {
        let pool: Vec<u32> = (0..N).filter(|&j| kind(j) == k).collect();
        let mut picked = std::collections::BTreeSet::new();
        let mut h = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        while picked.len() < count {
            h ^= h << 13;
            h ^= h >> 7;
            h ^= h << 17;
            picked.insert(pool[(h % pool.len() as u64) as usize]);
        }
        picked.into_iter().collect()
    }

    /// A square matrix whose square has rows of every tier: rows of 0 and 1 products (short),
    /// of 64 and 148 (medium), of 1200 and 2400 (long). `extra` adds a column to row
    /// `extra.0`: `extra.1`.
    fn three_tiers<T: Scalar>(salt: usize, extra: Option<(u32, u32)>) -> Csr<T> {
        let (mut offsets, mut index) = (vec![0u64], Vec::new());
        for i in 0..N {
            let seed = u64::from(i) + 1;
            let mut row = match kind(i) {
                Kind::Hub => columns_of(Kind::Short, 1200, seed),
                Kind::Wide => columns_of(Kind::Short, 64, seed),
                Kind::Deep => {
                    let mut r = columns_of(Kind::Wide, 2, seed);
                    r.extend(columns_of(Kind::Short, 20, seed + 7));
                    r
                }
                Kind::Empty => Vec::new(),
                Kind::Short => columns_of(Kind::Short, 1, seed),
            };
            if i == 0 {
                row.push(1);
            }
            if let Some((r, c)) = extra {
                if r == i {
                    row.push(c);
                }
            }
            row.sort_unstable();
            row.dedup();
            index.extend(row);
            offsets.push(index.len() as u64);
        }
        let values = (0..index.len())
            .map(|k| T::from_parts_lossy(0.5 + ((k * 7 + salt) % 13) as f64 / 13.0, 0.25))
            .collect();
        Csr::try_new(N as usize, N as usize, offsets, index, values).unwrap()
    }

    /// Products of each row of `x·x`.
    fn products<T: Scalar>(x: &Csr<T>) -> Vec<u64> {
        (0..x.nrows())
            .map(|i| x.row(i).0.iter().map(|&k| x.row_nnz(k as usize)).sum())
            .collect()
    }

    /// The plan of `x·x` splits its rows into the three tiers, and executing it with new
    /// values equals the reference product of those values.
    fn every_tier_matches_the_reference<T: Scalar>(b: &OpenClBackend, tolerance: f64) {
        if !b.supports_scalar(T::TYPE) {
            return;
        }
        let x: Csr<T> = three_tiers(0, None);
        let p = products(&x);
        let (short_max, medium_max) = (
            u64::from(kernels::MEDIUM_ROW_PRODUCTS),
            u64::from(kernels::LONG_ROW_PRODUCTS),
        );
        let rows_with = |f: &dyn Fn(u64) -> bool| p.iter().filter(|&&n| f(n)).count();
        // The matrix has what the test claims: rows of 1, 50 to 200 and over 1000 products.
        assert!(p.contains(&1) && p.contains(&64) && p.contains(&148) && p.contains(&2400));
        assert!(p
            .iter()
            .all(|&n| n <= 1 || (64..=148).contains(&n) || n >= 1200));
        let run = RunControl::new();
        let rx = b.upload(&x).unwrap();
        let plan = b
            .plan_spgemm((&rx).into(), (&rx).into(), &SpgemmOptions::new())
            .unwrap();
        let split = plan.device_state::<ClPlan>().unwrap().split.as_ref();
        if kernels::has_atomics(T::TYPE, &b.state.description) {
            let split = split.unwrap();
            let tiers = (split.short, split.medium, split.long);
            // Every medium row's entries (at most 148) fit a medium group's local memory.
            let expected = (
                rows_with(&|n| n <= short_max),
                rows_with(&|n| n > short_max && n <= medium_max),
                rows_with(&|n| n > medium_max),
            );
            assert_eq!(tiers, expected, "{}", T::TYPE);
            assert_eq!(expected.2, 4, "{}", T::TYPE);
            // Groups of at most MEDIUM_ROWS rows, and the long rows' segments.
            assert!(
                split.group_count >= split.medium.div_ceil(kernels::MEDIUM_ROWS),
                "{}",
                T::TYPE
            );
            assert!(split.segment_count >= split.long, "{}", T::TYPE);
            assert!(plan.requirement().work_bytes >= split.bytes, "{}", T::TYPE);
        } else {
            assert!(split.is_none(), "{}", T::TYPE);
        }
        let x2: Csr<T> = three_tiers(5, None);
        let rx2 = b.upload_values(&rx, x2.values()).unwrap();
        let e =
            hetsparse_core::reference::spgemm::<T, hetsparse_core::PlusTimes>(&x2, &x2).unwrap();
        // Twice: an execution leaves nothing behind that the next one adds to.
        for _ in 0..2 {
            let c = b
                .execute_spgemm(&plan, (&rx2).into(), (&rx2).into(), &run)
                .unwrap();
            super::tests::assert_close(&b.download(&c).unwrap(), &e, tolerance);
        }
    }

    #[test]
    fn plans_with_short_medium_and_long_rows_match_the_reference() {
        let Some(b) = crate::tests::device_backend("numeric tiers") else {
            return;
        };
        every_tier_matches_the_reference::<f64>(&b, 1e-12);
        every_tier_matches_the_reference::<hetsparse_core::Complex<f64>>(&b, 1e-12);
        every_tier_matches_the_reference::<f32>(&b, 1e-5);
        every_tier_matches_the_reference::<hetsparse_core::bf16>(&b, 1e-2);
    }

    /// The scalar program built as for smaller devices: the medium-row kernel's local memory
    /// fits their budget and never exceeds the long-row kernel's, and programs of double types
    /// without 64-bit atomics build without either kernel (their plans have no split and run
    /// every row on one work-item).
    #[test]
    fn numeric_kernels_fit_small_devices_and_doubles_without_atomics() {
        let Some(b) = crate::tests::device_backend("numeric kernels, small devices") else {
            return;
        };
        let real = &b.state.description;
        for ty in hetsparse_core::ScalarType::ALL {
            if !b.supports_scalar(ty) {
                continue;
            }
            for (local, atomics) in [(16u64 << 10, true), (32 << 10, true), (48 << 10, false)] {
                if local > real.local_memory_bytes {
                    continue;
                }
                let mut d = real.clone();
                d.local_memory_bytes = local;
                d.int64_atomics &= atomics;
                let src = kernels::scalar_program(ty, kernels::KernelSemiring::PLUS_TIMES, &d);
                let what = format!("{ty}, {local} bytes of local memory, atomics {atomics}");
                let mut program = Program::create_from_source(&b.state.context, &src).unwrap();
                if let Err(e) = program.build(&[b.state.id], "-cl-std=CL1.2") {
                    let log = program.get_build_log(b.state.id).unwrap_or_default();
                    panic!("{what}: {e}\n{log}");
                }
                let kernel = |name| opencl3::kernel::Kernel::create(&program, name);
                assert!(kernel("spgemm_numeric").is_ok(), "{what}");
                if !kernels::has_atomics(ty, &d) {
                    assert!(kernel("spgemm_numeric_medium").is_err(), "{what}");
                    assert!(kernel("spgemm_numeric_segments").is_err(), "{what}");
                    continue;
                }
                let bytes = |name| {
                    kernel(name)
                        .unwrap()
                        .get_local_mem_size(b.state.id)
                        .unwrap()
                };
                let (medium, long) = (
                    bytes("spgemm_numeric_medium"),
                    bytes("spgemm_numeric_segments"),
                );
                assert!(medium <= long && long <= local, "{what}: {medium}, {long}");
            }
        }
    }

    /// Each tier's kernel flags a product outside the planned row: operands whose row `r` of
    /// A has one more column than the plan's (forged to pass `check_operands`).
    #[test]
    fn every_tier_flags_products_outside_the_structure() {
        let Some(b) = crate::tests::device_backend("numeric tiers, flags") else {
            return;
        };
        if !kernels::has_atomics(<f64 as Scalar>::TYPE, &b.state.description) {
            return;
        }
        let run = RunControl::new();
        let opts = SpgemmOptions::new();
        let x: Csr<f64> = three_tiers(0, None);
        let rx = b.upload(&x).unwrap();
        let plan = b.plan_spgemm((&rx).into(), (&rx).into(), &opts).unwrap();
        let e =
            hetsparse_core::reference::spgemm::<f64, hetsparse_core::PlusTimes>(&x, &x).unwrap();
        let program = b
            .program::<f64>(hetsparse_core::Operation::Spgemm(opts.algorithm), false)
            .unwrap();
        let q = b.state.queue().unwrap();
        let planned = plan.device_state::<ClPlan>().unwrap();
        let tiers = |s: &RowSplit| (s.short, s.medium, s.long);
        let honest = tiers(planned.split.as_ref().unwrap());
        // A short, a medium (wide and deep) and a long row.
        for r in [10, 65, 69, 2] {
            // A short column whose one product falls outside C's row r.
            let c_row = e.row(r as usize).0;
            let c = (0..N)
                .find(|&j| {
                    kind(j) == Kind::Short
                        && !x.row(r as usize).0.contains(&j)
                        && !c_row.contains(&x.row(j as usize).0[0])
                })
                .unwrap();
            let y: Csr<f64> = three_tiers(0, Some((r, c)));
            let ry = b.upload(&y).unwrap();
            let split = b
                .row_split::<f64>(&q, &program, (&ry).into(), (&rx).into(), &planned.structure)
                .unwrap();
            // One product more leaves the row in its tier.
            assert_eq!(split.as_ref().map(tiers), Some(honest), "row {r}");
            let err = super::tests::forged_execution(&b, &program, &plan, split, (&ry, &rx));
            assert!(
                matches!(err, Error::PatternMismatch { .. }),
                "row {r}: {err}"
            );
            // Through the public call, operands of another pattern are refused before.
            let err = b
                .execute_spgemm(&plan, (&ry).into(), (&rx).into(), &run)
                .unwrap_err();
            assert!(
                matches!(err, Error::PatternMismatch { .. }),
                "row {r}: {err}"
            );
        }
        // The honest plan still runs.
        let c = b
            .execute_spgemm(&plan, (&rx).into(), (&rx).into(), &run)
            .unwrap();
        super::tests::assert_close(&b.download(&c).unwrap(), &e, 1e-12);
    }
}
