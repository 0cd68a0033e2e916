//! hetsparse-sched: one backend made of many. A [`Scheduler`] multiplies on every backend it
//! holds at once — CPU cores, CUDA GPUs, OpenCL devices, in any mix — and returns the same
//! canonical result as any one of them.
//!
//! A product `C = A · B` is cut into chunks (row panels of A × column panels of B, Xia et al.
//! §III), each weighed by its intermediate products. The [`Policy`] decides who computes which
//! chunk: dynamic work stealing (the default), Matam et al.'s row split with assumed or
//! measured speeds (Heuristics I and II), or Xia et al.'s densest chunks to the fastest device
//! up to a calibrated share. Column panels are sized so that a device's operands fit its
//! memory budget, so A, B and C may each be larger than a GPU's memory.
//!
//! A backend that fails mid-run (out of memory, a failed launch, a lost device, a panic) has
//! its unfinished chunks rerun on the others; out of memory on a chunk splits the chunk and
//! tries again. The result is always the complete product, identical to a single backend's.
//!
//! Work stealing learns each backend's speed and what sharing costs, and runs the fastest
//! backend alone where sharing would not pay. Products of band matrices in DIA form are split by
//! rows with Matam et al.'s model for band matrices (§IV.C), from costs calibrated on the machine
//! ([`BandCost`], [`Scheduler::calibrate_band`]), each backend writing its rows of C in place. SpMV and SpMM run whole on the fastest backend
//! known, or, with [`Scheduler::share_always`], by row blocks of A over every backend.
//!
//! The scheduler implements [`Backend`] itself, so everything that takes a backend takes a
//! scheduler. Its resident matrices live in host memory: it places operands on its devices
//! for each run.
//!
//! ```
//! use hetsparse_core::{Backend, Csr, ReferenceBackend, SpgemmAlgorithm};
//! use hetsparse_sched::{Policy, Scheduler};
//!
//! let backends: Vec<Box<dyn Backend<f64>>> = vec![Box::new(ReferenceBackend), Box::new(ReferenceBackend)];
//! let scheduler = Scheduler::new(backends).policy(Policy::WorkStealing).min_chunk_products(1);
//! let a = hetsparse_core::generate::uniform::<f64>(500, 500, 8, 1);
//! let c = scheduler.spgemm(&a, &a, SpgemmAlgorithm::Auto)?;
//! assert_eq!(c, ReferenceBackend.spgemm(&a, &a, SpgemmAlgorithm::Auto)?);
//! let report = scheduler.last_report().expect("a run happened");
//! assert_eq!(report.devices.len(), 2);
//! # Ok::<(), hetsparse_core::Error>(())
//! ```
#![warn(missing_docs)]

mod band;
mod chunking;
mod cost;
mod execute;
mod executor;
mod guard;
mod learn;
mod policy;
mod report;
mod rows;

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use hetsparse_core::backend::memory::csr_bytes;
use hetsparse_core::backend::{assemble_chunks, check, host_operands};
use hetsparse_core::{
    analysis, Backend, Capabilities, Csr, CsrOperand, Dense, DenseOperand, Device, DeviceInfo,
    DeviceKind, Dia, Error, MemorySpace, Operation, ProductBuffer, ProductChunk, ProductLayout,
    ResidentCsr, Result, RunControl, Scalar, ScalarType, SparseFormat, SparseOperand, SparseRef,
    SpgemmFeatures, SpgemmOptions, SpmmOptions, SpmvOptions, Validated, VectorOperand,
};

pub use band::{BandCost, BandWork};
pub use cost::{
    Choice, Chosen, Measured, OpKind, Prediction, Source, Workload, DEFAULT_SHARING_OVERHEAD,
};
pub use policy::Policy;
pub use report::{DeviceReport, RunReport};

use rayon::prelude::*;

use chunking::{column_panels, row_panels, window_split, PanelShares, Task};
use learn::{Kind, Learned};

/// Chunks per device that work stealing and Xia's assignment aim for: enough to balance and to
/// absorb a failure, few enough that per-call costs stay small.
const CHUNKS_PER_DEVICE: usize = 8;

/// Products below which a chunk is not worth a call of its own.
const MIN_CHUNK_PRODUCTS: u64 = 1 << 20;

/// Share of the rows' products a speed calibration measures on each device.
const CALIBRATION_SHARE: f64 = 0.03;

/// A device and A and B uploaded to it.
type Uploaded<T> = (usize, (ResidentCsr<T>, ResidentCsr<T>));

/// Several backends used as one; see the [crate docs](crate).
pub struct Scheduler<T: Scalar> {
    backends: Vec<Arc<dyn Backend<T>>>,
    policy: Policy,
    chunks_per_device: usize,
    min_chunk_products: u64,
    share_always: bool,
    /// Host memory for C and its chunks together; `None`: the host's buffer limit.
    host_memory: Option<u64>,
    /// What runs taught, per operation ([`Kind`] indexes it).
    learned: [Mutex<Learned>; 3],
    last_report: Mutex<Option<RunReport>>,
    /// Each backend's DIA × DIA cost model, where calibrated or given, and what runs taught.
    band: Mutex<band::BandState>,
    capabilities: Capabilities,
}

impl<T: Scalar> Scheduler<T> {
    /// A scheduler over `backends`, with [`Policy::WorkStealing`]. With no backends every
    /// operation returns [`Error::NoDevice`].
    pub fn new(backends: Vec<Box<dyn Backend<T>>>) -> Self {
        Self::from_shared(backends.into_iter().map(Arc::from).collect())
    }

    /// A scheduler over backends that are also used elsewhere.
    pub fn from_shared(backends: Vec<Arc<dyn Backend<T>>>) -> Self {
        let mut capabilities = Capabilities::new();
        for b in &backends {
            for (op, scalar) in b.capabilities().iter() {
                capabilities = capabilities.with(op, &[scalar]);
            }
        }
        // SpGEMM options any backend runs: a product with them is shared only among the
        // backends that run them ([`Scheduler::spgemm_part`]).
        for scalar in ScalarType::ALL {
            let mut union = SpgemmFeatures::plain();
            for b in &backends {
                let f = b.capabilities().spgemm_features(scalar);
                union.semirings.extend(f.semirings);
                union.masks.extend(f.masks);
                union.complemented_masks |= f.complemented_masks;
                union.replacing_masks |= f.replacing_masks;
                union.accumulators.extend(f.accumulators);
            }
            if union != SpgemmFeatures::plain() {
                capabilities = capabilities.with_spgemm_features(&[scalar], union);
            }
        }
        let own_memory: Vec<bool> = backends
            .iter()
            .map(|b| b.memory_space() != MemorySpace::Host)
            .collect();
        let learned = [(); 3].map(|_| Mutex::new(Learned::new(own_memory.clone())));
        Scheduler {
            backends,
            policy: Policy::default(),
            chunks_per_device: CHUNKS_PER_DEVICE,
            min_chunk_products: MIN_CHUNK_PRODUCTS,
            share_always: false,
            host_memory: None,
            learned,
            last_report: Mutex::new(None),
            band: Mutex::new(band::BandState::default()),
            capabilities,
        }
    }

    /// Sets the policy.
    pub fn policy(mut self, policy: Policy) -> Self {
        self.policy = policy;
        self
    }

    /// Chunks per device that dynamic policies cut a product into (at least 1; default 8).
    pub fn chunks_per_device(mut self, chunks: usize) -> Self {
        self.chunks_per_device = chunks.max(1);
        self
    }

    /// Products below which a product is not cut for several devices (default 2^20): smaller
    /// products run whole on one backend, where splitting would cost more than it gains.
    pub fn min_chunk_products(mut self, products: u64) -> Self {
        self.min_chunk_products = products.max(1);
        self
    }

    /// Shares every product large enough to cut (see
    /// [`min_chunk_products`](Self::min_chunk_products)), also where the speeds learned so far
    /// say that the fastest backend alone would be faster, and shares SpMV and SpMM of CSR
    /// matrices by row blocks: for tests, for measuring the sharing itself, and for backends
    /// whose data is cheap to move.
    pub fn share_always(mut self) -> Self {
        self.share_always = true;
        self
    }

    /// Host memory a shared product may take for C and its chunks together (default: the
    /// host's physical memory, or the limit set with [`hetsparse_core::host::set_buffer_limit`]).
    /// A product whose C and chunks could exceed it (judged by its intermediate products, a
    /// bound on C's entries) has C counted first and every chunk written straight into its
    /// place in C: C is then the only allocation proportional to it. So does a product that a
    /// device taking part can hold A and B of, where C's bound is at least twice their size:
    /// that device counts C from the A and B it then computes from, which costs less than
    /// the assembly it saves. Other products have their chunks come back as matrices of their
    /// own, laid into C once all are done, which is faster there (counting C on the host, or
    /// uploading A and B to count a small C, costs more than that copy).
    pub fn host_memory(mut self, bytes: u64) -> Self {
        self.host_memory = Some(bytes);
        self
    }

    /// Sets the backends' speeds (products per second, one per backend), as
    /// [`Policy::RowSplitMeasured`] and [`Policy::DensestFirst`] use them, and as work
    /// stealing takes them for both shared and whole runs; later runs keep updating them.
    pub fn with_speeds(self, speeds: &[f64]) -> Result<Self> {
        if speeds.len() != self.backends.len() {
            return Err(Error::InvalidArgument(format!(
                "{} speeds given for {} backends",
                speeds.len(),
                self.backends.len()
            )));
        }
        let speeds: Vec<Option<f64>> = speeds
            .iter()
            .map(|&s| (s.is_finite() && s > 0.0).then_some(s))
            .collect();
        let mut learned = self.learned(Kind::Spgemm);
        learned.alone = speeds.clone();
        learned.speeds = speeds;
        drop(learned);
        Ok(self)
    }

    /// The backends, in the order given.
    pub fn backends(&self) -> &[Arc<dyn Backend<T>>] {
        &self.backends
    }

    /// The policy in use.
    pub fn current_policy(&self) -> &Policy {
        &self.policy
    }

    /// Each backend's SpGEMM speed in intermediate products per second, where known.
    pub fn speeds(&self) -> Vec<Option<f64>> {
        self.learned(Kind::Spgemm).speeds.clone()
    }

    fn learned(&self, kind: Kind) -> MutexGuard<'_, Learned> {
        self.learned[kind as usize]
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// What the most recent SpGEMM run that finished did (`None` before the first).
    pub fn last_report(&self) -> Option<RunReport> {
        self.last_report
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Matam's Heuristic II measurement: `A · B` run whole on each backend alone (in turn, so
    /// they do not compete for the host), its speed recorded and returned (products per
    /// second; `None` for a backend that cannot run it).
    pub fn calibrate(&self, a: &Csr<T>, b: &Csr<T>) -> Result<Vec<Option<f64>>> {
        check::spgemm(a, b)?;
        let products = analysis::total_products(a, b)?;
        let options = SpgemmOptions::new();
        let mut measured = Vec::with_capacity(self.backends.len());
        let run = RunControl::unwatched();
        for backend in &self.backends {
            let start = Instant::now();
            let ok = guard::device_call(backend.as_ref(), &run, || {
                backend.spgemm_with(a.into(), b.into(), &options, &run)
            })
            .is_ok();
            let secs = start.elapsed().as_secs_f64();
            measured.push((ok && secs > 0.0 && products > 0).then(|| products as f64 / secs));
        }
        let mut learned = self.learned(Kind::Spgemm);
        for (d, m) in measured.iter().enumerate() {
            if m.is_some() {
                learned.speeds[d] = *m;
                learned.alone[d] = *m;
            }
        }
        drop(learned);
        Ok(measured)
    }

    fn no_device(&self) -> Error {
        Error::NoDevice {
            backend: hetsparse_core::BackendKind::Scheduler,
            reason: "the scheduler holds no backends".into(),
        }
    }

    /// Backends that run `op` for `T`, by position; [`Error::Unsupported`] if none does.
    fn taking_part(&self, op: Operation) -> Result<Vec<bool>> {
        if self.backends.is_empty() {
            return Err(self.no_device());
        }
        let part: Vec<bool> = self
            .backends
            .iter()
            .map(|b| b.capabilities().supports(op, T::TYPE))
            .collect();
        if !part.iter().any(|p| *p) {
            return Err(Error::Unsupported {
                backend: hetsparse_core::BackendKind::Scheduler,
                op,
                scalar: T::TYPE,
                detail: Some("no backend of the scheduler supports it".into()),
            });
        }
        Ok(part)
    }

    /// The backends taking part in a SpGEMM with `options`: those running its algorithm and,
    /// beyond plain plus-times, its semiring and mask ([`SpgemmFeatures`]).
    fn spgemm_part(&self, options: &SpgemmOptions) -> Result<Vec<bool>> {
        let op = Operation::Spgemm(options.algorithm);
        let mut part = self.taking_part(op)?;
        if options.is_plain() {
            return Ok(part);
        }
        for (p, b) in part.iter_mut().zip(&self.backends) {
            *p = *p
                && options
                    .unsupported_by(&b.capabilities().spgemm_features(T::TYPE))
                    .is_none();
        }
        if !part.iter().any(|p| *p) {
            return Err(Error::Unsupported {
                backend: hetsparse_core::BackendKind::Scheduler,
                op,
                scalar: T::TYPE,
                detail: Some("no backend of the scheduler runs these SpGEMM options".into()),
            });
        }
        Ok(part)
    }

    /// Device memory for the operands of one chunk: a quarter of the smallest budget among
    /// the taking-part backends with memory of their own (the rest is for work and output).
    fn operand_budget(&self, part: &[bool]) -> u64 {
        self.backends
            .iter()
            .zip(part)
            .filter(|(b, p)| **p && b.memory_space() != MemorySpace::Host)
            .map(|(b, _)| memory_budget(b.as_ref()))
            .min()
            .map(|bytes| bytes / 4)
            .unwrap_or(u64::MAX)
    }

    /// Speeds for the taking-part backends, measuring those not known yet on a sample of the
    /// product.
    fn measured_speeds(
        &self,
        a: &Csr<T>,
        b: &Csr<T>,
        options: &SpgemmOptions,
        part: &[bool],
        prefix: &[u64],
    ) -> Result<Vec<f64>> {
        let known = self.speeds();
        let missing: Vec<usize> = (0..self.backends.len())
            .filter(|&d| part[d] && known[d].is_none())
            .collect();
        if missing.is_empty() {
            return Ok(known.iter().map(|s| s.unwrap_or(0.0)).collect());
        }
        let sample = calibration_sample(prefix);
        let sample_products: u64 = sample
            .iter()
            .map(|c| prefix[c.rows.end] - prefix[c.rows.start])
            .sum();
        let _span =
            tracing::info_span!("calibrate", backends = missing.len(), sample_products).entered();
        let mut learned = self.learned(Kind::Spgemm);
        let run = RunControl::unwatched();
        for d in missing {
            let backend = &self.backends[d];
            // Operands placed first, so the sample times the computation and the copy back.
            let placed = if backend.memory_space() == MemorySpace::Host {
                None
            } else {
                guard::device_call(backend.as_ref(), &run, || {
                    backend
                        .upload(a)
                        .and_then(|ra| Ok((ra, backend.upload(b)?)))
                })
                .ok()
            };
            let (oa, ob): (CsrOperand<'_, T>, CsrOperand<'_, T>) = match &placed {
                Some((ra, rb)) => (ra.into(), rb.into()),
                None => (a.into(), b.into()),
            };
            let start = Instant::now();
            let ran = guard::device_call(backend.as_ref(), &run, || {
                backend.spgemm_chunks(oa, ob, &sample, options, &run, &mut |_| Ok(()))
            });
            let secs = start.elapsed().as_secs_f64();
            if ran.is_ok() && secs > 0.0 && sample_products > 0 {
                learned.speeds[d] = Some(sample_products as f64 / secs);
            }
        }
        Ok(learned.speeds.iter().map(|s| s.unwrap_or(0.0)).collect())
    }

    /// Learns from a shared run and keeps its report.
    fn record(&self, report: RunReport) {
        self.learned(Kind::Spgemm)
            .record(&report.devices, report.wall);
        self.record_report(report);
    }

    fn record_report(&self, report: RunReport) {
        *self.last_report.lock().unwrap_or_else(|p| p.into_inner()) = Some(report);
    }

    /// The tasks of `A · B` under the policy: per-device lists and the shared queue.
    fn assign(
        &self,
        a: &Csr<T>,
        b: &Csr<T>,
        options: &SpgemmOptions,
        part: &[bool],
        operand_budget: u64,
    ) -> Result<Assignment> {
        let _span = tracing::debug_span!("plan_chunks", policy = ?self.policy).entered();
        let n = self.backends.len();
        let live = part.iter().filter(|p| **p).count().max(1);
        // A chunk's rows of A and panel of B share twice the operand budget.
        let (rows_budget, panel_budget) = window_split(a, b, operand_budget.saturating_mul(2));
        let panels =
            tracing::debug_span!("column_panels").in_scope(|| column_panels(b, panel_budget));
        let whole_rows = analysis::row_products(a, b)?;
        let global_prefix =
            tracing::debug_span!("prefix_sums").in_scope(|| analysis::prefix_sums(&whole_rows));
        drop(whole_rows);
        // A panel's products are estimated as its share of B's entries of each row's: counted
        // exactly, they cost a pass over A per panel, more than the product's own analysis
        // when B is cut into dozens of panels.
        let shares = tracing::debug_span!("panel_shares").in_scope(|| PanelShares::of(b, &panels));
        let total = global_prefix[a.nrows()];
        // One backend needs no balancing: only memory cuts its work.
        let target = if live > 1 {
            (total / (live * self.chunks_per_device) as u64).max(self.min_chunk_products)
        } else {
            u64::MAX
        };
        // The same row panels in every panel of B (sized for the panel with the largest share
        // of B), so that a device holding B whole can take a row panel across all of them as
        // one chunk.
        let cut = |rows: std::ops::Range<usize>, target: u64| -> Vec<Task> {
            let _span = tracing::debug_span!("row_panels").entered();
            let scaled = (0..panels.len())
                .map(|k| shares.rows_target(k, target))
                .min()
                .unwrap_or(target);
            let row_cuts = row_panels(a, &global_prefix, rows, scaled, rows_budget);
            let mut tasks = Vec::with_capacity(row_cuts.len() * panels.len());
            for (k, cols) in panels.iter().enumerate() {
                for r in &row_cuts {
                    let products = shares.products(k, &global_prefix, r);
                    tasks.push(Task::new(r.clone(), cols.clone(), products));
                }
            }
            tasks
        };
        let mut own = vec![Vec::new(); n];
        let mut shared = Vec::new();
        let participants: Vec<usize> = (0..n).filter(|&d| part[d]).collect();
        match &self.policy {
            Policy::WorkStealing => {
                // In row order, per panel of B, as the queue keeps them.
                shared = cut(0..a.nrows(), target);
            }
            Policy::RowSplitAssumed(_) | Policy::RowSplitMeasured => {
                let speeds = match &self.policy {
                    Policy::RowSplitAssumed(s) => s.clone(),
                    _ => self.measured_speeds(a, b, options, part, &global_prefix)?,
                };
                let speeds: Vec<f64> = participants.iter().map(|&d| speeds[d]).collect();
                let cuts = policy::row_split(&global_prefix, &policy::shares(&speeds));
                for (k, &d) in participants.iter().enumerate() {
                    own[d] = cut(cuts[k]..cuts[k + 1], u64::MAX);
                }
            }
            Policy::DensestFirst => {
                let speeds = self.measured_speeds(a, b, options, part, &global_prefix)?;
                let shares =
                    policy::shares(&participants.iter().map(|&d| speeds[d]).collect::<Vec<_>>());
                let mut order: Vec<(usize, f64)> =
                    participants.iter().copied().zip(shares).collect();
                order.sort_by(|x, y| y.1.total_cmp(&x.1));
                // A row panel's chunks in every panel of B go to one device together: a
                // device holding B whole computes them as one chunk of all columns.
                let mut tasks = cut(0..a.nrows(), target);
                tasks.sort_by_key(|t| (t.chunk.rows.start, t.chunk.cols.start));
                let mut groups: Vec<Vec<Task>> = Vec::new();
                for task in tasks {
                    match groups.last_mut() {
                        Some(g) if g[0].chunk.rows == task.chunk.rows => g.push(task),
                        _ => groups.push(vec![task]),
                    }
                }
                let products = |g: &Vec<Task>| g.iter().map(|t| t.products).sum::<u64>();
                groups.sort_by_key(|g| std::cmp::Reverse(products(g)));
                let costs: Vec<u64> = groups.iter().map(products).collect();
                for (group, d) in groups
                    .into_iter()
                    .zip(policy::densest_first(&costs, &order))
                {
                    own[d].extend(group);
                }
            }
        }
        Ok(Assignment {
            own,
            shared,
            panels,
        })
    }

    /// The SpGEMM of host operands through the policy.
    fn spgemm_scheduled(
        &self,
        a: &Csr<T>,
        b: &Csr<T>,
        options: &SpgemmOptions,
        run: &RunControl,
    ) -> Result<Csr<T>> {
        let started = Instant::now();
        self.policy.validate(self.backends.len())?;
        let part = self.spgemm_part(options)?;
        let operand_budget = self.operand_budget(&part);
        let participants = part.iter().filter(|p| **p).count();
        let _span = tracing::info_span!(
            "sched_spgemm",
            policy = ?self.policy,
            backends = participants,
            rows = a.nrows(),
        )
        .entered();
        if self.policy.is_dynamic() {
            if let Some(c) = self.alone_if_better(a, b, options, run, &part)? {
                return Ok(c);
            }
        }
        let Assignment {
            own,
            shared,
            panels,
        } = self.assign(a, b, options, &part, operand_budget)?;
        let chunks_planned = own.iter().map(Vec::len).sum::<usize>() + shared.len();
        // C in place (its arrays allocated once from the symbolic counts of every row in
        // every panel) where C and its chunks could not be held together, or where a device
        // counts it from A and B it keeps for its share and C may be large beside them
        // (`Scheduler::host_memory`).
        let products: u64 = own
            .iter()
            .flatten()
            .chain(&shared)
            .map(|t| t.products)
            .sum();
        let value = std::mem::size_of::<T>();
        let c_entries = products.min((a.nrows() as u64).saturating_mul(b.ncols() as u64));
        let c_bound = csr_bytes(a.nrows(), c_entries, value);
        let host_memory = self
            .host_memory
            .unwrap_or_else(hetsparse_core::host::buffer_limit);
        let whole = execute::operands_bytes(a, b);
        // A device counts where one takes part and can hold A and B (the workers' budget);
        // out of core it would upload them again chunk by chunk, slower than the host's count.
        let on_device = whole <= operand_budget.saturating_mul(2)
            && (0..self.backends.len())
                .any(|d| part[d] && self.backends[d].memory_space() != MemorySpace::Host);
        let counting = Instant::now();
        let mut uploaded = vec![None; self.backends.len()];
        let in_place = c_bound.saturating_mul(2) > host_memory
            || on_device && c_bound >= whole.saturating_mul(2);
        let c = if in_place {
            let tasks = own.iter().flatten().chain(&shared);
            let layout = if on_device {
                let (layout, on) =
                    self.count_c(a, b, options, &part, tasks, panels.clone(), run)?;
                if let Some((d, ab)) = on {
                    uploaded[d] = Some(ab);
                }
                layout
            } else {
                ProductLayout::count(a, b, panels.clone())?
            };
            Some(ProductBuffer::new(layout)?)
        } else {
            None
        };
        let counting = match c {
            Some(_) => counting.elapsed(),
            None => Duration::ZERO,
        };
        // Panels cut once here, for the backends that cannot hold B whole.
        let _cut = tracing::debug_span!("cut_panels", panels = panels.len()).entered();
        let panels = if panels.len() > 1 {
            panels
                .into_par_iter()
                .map(|cols| Ok((cols.clone(), b.column_panel(cols)?)))
                .collect::<Result<Vec<_>>>()?
        } else {
            Vec::new()
        };
        drop(_cut);
        let finished = execute::run(
            execute::Work {
                a,
                b,
                options,
                devices: &self.backends,
                taking_part: part,
                own,
                shared,
                speeds: self.speeds(),
                panels,
                c: c.as_ref(),
                uploaded,
            },
            run,
        )?;
        let assembling = Instant::now();
        let c = match c {
            // SAFETY: `execute::run` returned without error, so every task was finished with
            // a complete place, and the tasks cover C (every row, every panel; a split task's
            // halves cover its positions).
            Some(c) => unsafe { c.into_csr()? },
            None => assemble_chunks(a.nrows(), b.ncols(), finished.tiles)?,
        };
        self.record(RunReport {
            devices: finished.devices,
            chunks_planned,
            wall: started.elapsed(),
            counting,
            assembly: assembling.elapsed(),
        });
        Ok(c)
    }

    /// C's layout for C written in place, where the devices can hold A and B: counted by the
    /// fastest device taking part that has memory of its own (its symbolic phase over the
    /// planned chunks, which tile C), or on the host where none takes part or its count fails.
    /// With the device and A and B on it, where they were uploaded for the count.
    #[allow(clippy::too_many_arguments)]
    fn count_c<'t>(
        &self,
        a: &Csr<T>,
        b: &Csr<T>,
        options: &SpgemmOptions,
        part: &[bool],
        tasks: impl Iterator<Item = &'t Task>,
        panels: Vec<std::ops::Range<usize>>,
        run: &RunControl,
    ) -> Result<(ProductLayout, Option<Uploaded<T>>)> {
        let speeds = self.speeds();
        let counter = (0..self.backends.len())
            .filter(|&d| part[d] && self.backends[d].memory_space() != MemorySpace::Host)
            .max_by(|&x, &y| {
                let speed = |d: usize| speeds[d].unwrap_or(0.0);
                speed(x).total_cmp(&speed(y))
            });
        let Some(d) = counter else {
            return Ok((ProductLayout::count(a, b, panels)?, None));
        };
        let chunks: Vec<ProductChunk> = tasks.map(|t| t.chunk.clone()).collect();
        let panel_of: Vec<usize> = chunks
            .iter()
            .map(|c| {
                panels
                    .iter()
                    .position(|p| *p == c.cols)
                    .ok_or_else(|| Error::Internal {
                        backend: hetsparse_core::BackendKind::Scheduler,
                        what: format!("chunk columns {:?} are not one of C's panels", c.cols),
                    })
            })
            .collect::<Result<_>>()?;
        let mut per_panel = panels
            .iter()
            .map(|_| hetsparse_core::host::try_filled(a.nrows(), 0u64, "C's counts per panel"))
            .collect::<Result<Vec<_>>>()?;
        let device = &self.backends[d];
        let _span = tracing::debug_span!("count C on a device", device = d).entered();
        // A and B go up once, for the count and then for the device's share of the run.
        let counting = run.child();
        let uploaded = match guard::device_call(device.as_ref(), &counting, || {
            execute::upload_operands(device.as_ref(), a, b)
        }) {
            Ok(ab) => Some(ab),
            Err(e) if e.is_caller_error() => return Err(e),
            Err(e) => {
                tracing::debug!(device = d, error = %e, "A and B not uploaded for the count");
                None
            }
        };
        let (oa, ob) = match &uploaded {
            Some((ra, rb)) => (CsrOperand::Resident(ra), CsrOperand::Resident(rb)),
            None => (a.into(), b.into()),
        };
        let counted = guard::device_call(device.as_ref(), &counting, || {
            device.spgemm_chunk_counts(oa, ob, &chunks, options, &counting, &mut |i, rows| {
                let chunk = chunks.get(i).filter(|c| c.rows.len() == rows.len());
                let Some(chunk) = chunk else {
                    return Err(Error::Internal {
                        backend: device.info().backend,
                        what: format!("counts of {} rows for chunk {i}", rows.len()),
                    });
                };
                per_panel[panel_of[i]][chunk.rows.clone()].copy_from_slice(rows);
                Ok(())
            })
        });
        match counted {
            Ok(()) => Ok((
                ProductLayout::from_panel_counts(a.nrows(), b.ncols(), panels, &per_panel)?,
                uploaded.map(|ab| (d, ab)),
            )),
            Err(e) if run.is_cancelled() => Err(e),
            Err(e) => {
                tracing::warn!(device = d, error = %e, "counting C on the device failed; counting on the host");
                Ok((ProductLayout::count(a, b, panels)?, None))
            }
        }
    }

    /// Runs the product whole on one backend when sharing it would not pay: one backend takes
    /// part, the product is too small to cut, or the speeds and sharing overhead learned so
    /// far say the fastest alone is quicker ([`Learned::alone`]). `None` when
    /// the product should be shared (or the one backend failed: the shared run retries it).
    fn alone_if_better(
        &self,
        a: &Csr<T>,
        b: &Csr<T>,
        options: &SpgemmOptions,
        run: &RunControl,
        part: &[bool],
    ) -> Result<Option<Csr<T>>> {
        let members: Vec<usize> = (0..part.len()).filter(|&d| part[d]).collect();
        let small = self.min_chunk_products.saturating_mul(2);
        // The products are counted (a pass over A's entries, milliseconds on millions of
        // rows) before deciding only where the product may be small: with A's entries times
        // B's mean row far above the threshold it is not, and a device's run alone reports
        // them.
        let mean_row = b.nnz() / (b.nrows().max(1) as u64);
        let counted_first = (members.len() > 1
            && a.nnz().saturating_mul(mean_row.max(1)) < small.saturating_mul(8))
        .then(|| analysis::total_products(a, b))
        .transpose()?;
        let small_product = counted_first.is_some_and(|p| p < small);
        // A device whose budget cannot hold A and B goes through the chunked path instead.
        let operands = execute::operands_bytes(a, b);
        let whole: Vec<usize> = members
            .iter()
            .copied()
            .filter(|&d| execute::holds_whole(self.backends[d].as_ref(), operands))
            .collect();
        let chosen = {
            let learned = self.learned(Kind::Spgemm);
            if members.len() == 1 {
                Some(members[0])
            } else if let Some(p) = counted_first.filter(|&p| p < small) {
                learned.quickest_for(&members, p).or(Some(members[0]))
            } else if self.share_always {
                None
            } else {
                learned.alone(&members, &whole)
            }
        };
        let Some(d) = chosen.filter(|d| whole.contains(d)) else {
            return Ok(None);
        };
        let device = &self.backends[d];
        let started = Instant::now();
        // The products are what the device's speed is learned in. A host backend counts them
        // first (a count beside it would take its cores); a device reports them as it plans
        // its run (a GPU from its own analysis, at no cost to the host), read from a run of
        // its own, and they are counted on the host afterwards only where it reported none.
        let known = match counted_first {
            Some(p) => Some(p),
            None if device.memory_space() == MemorySpace::Host => {
                Some(analysis::total_products(a, b)?)
            }
            None => None,
        };
        let device_run = run.tracked();
        let result = guard::device_call(device.as_ref(), &device_run, || {
            device.spgemm_with(a.into(), b.into(), options, &device_run)
        });
        let products = || -> Result<u64> {
            match (known, device_run.progress().done) {
                (Some(p), _) => Ok(p),
                (None, 0) => analysis::total_products(a, b),
                (None, reported) => Ok(reported),
            }
        };
        match result {
            Ok(c) => {
                let products = products()?;
                let mut devices: Vec<DeviceReport> = self
                    .backends
                    .iter()
                    .map(|b| DeviceReport::new(b.info().name))
                    .collect();
                devices[d].chunks = 1;
                devices[d].products = products;
                devices[d].busy = started.elapsed();
                let mut learned = self.learned(Kind::Spgemm);
                if products < small {
                    learned.record_small(d, started.elapsed());
                } else {
                    learned.record_alone(d, products, started.elapsed());
                }
                drop(learned);
                self.record_report(RunReport {
                    devices,
                    chunks_planned: 1,
                    wall: started.elapsed(),
                    counting: Duration::ZERO,
                    assembly: Duration::ZERO,
                });
                Ok(Some(c))
            }
            Err(e) if e.is_caller_error() || run.is_cancelled() => Err(e),
            Err(e) => {
                tracing::warn!(error = %e, "the backend failed alone; sharing the product");
                if small_product {
                    // Not tried on small products again, unless it has finished one before.
                    self.learned(Kind::Spgemm)
                        .record_small(d, std::time::Duration::MAX);
                }
                Ok(None)
            }
        }
    }

    /// Runs `op` whole on one backend, [`Learned::next_alone`] first (each backend once, then
    /// the fastest), then the others in order, moving on at a device failure. `work` (units of
    /// `kind`) teaches the speed.
    fn on_one<R>(
        &self,
        op: Operation,
        kind: Kind,
        work: u64,
        run: &RunControl,
        mut f: impl FnMut(&dyn Backend<T>) -> Result<R>,
    ) -> Result<R> {
        let part = self.taking_part(op)?;
        let mut order: Vec<usize> = (0..part.len()).filter(|&d| part[d]).collect();
        if let Some(first) = self.learned(kind).next_alone(&order) {
            order.retain(|&d| d != first);
            order.insert(0, first);
        }
        let mut last = None;
        for d in order {
            let backend = &self.backends[d];
            let started = Instant::now();
            match guard::device_call(backend.as_ref(), run, || f(backend.as_ref())) {
                Ok(r) => {
                    self.learned(kind).record_alone(d, work, started.elapsed());
                    return Ok(r);
                }
                Err(e)
                    if e.is_caller_error()
                        || matches!(e, Error::Cancelled)
                        || run.is_cancelled() =>
                {
                    return Err(e)
                }
                Err(e) => {
                    tracing::warn!(backend = %backend.info().name, error = %e, "a backend failed; trying the next");
                    self.learned(kind).record_failed(d);
                    last = Some(e);
                }
            }
        }
        Err(last.unwrap_or_else(|| self.no_device()))
    }

    /// SpMV (`kind` [`Kind::Spmv`], `units_per_entry` 1) or SpMM (the dense operand's columns
    /// per entry) of a CSR `a` by row blocks over the backends, when it is shared: only under
    /// [`share_always`](Self::share_always), with two backends or more running CSR and enough
    /// work. From host memory a GPU's SpMV and SpMM are bound by copying A, and on the GPU
    /// machine the learned decision still let a GPU hold a shared run up on several classes, so
    /// by default the fastest known backend runs them whole (`None` here).
    fn by_row_blocks<R: Send>(
        &self,
        kind: Kind,
        a: &Csr<T>,
        units_per_entry: u64,
        run: &RunControl,
        compute: &rows::BlockFn<'_, T, R>,
    ) -> Result<Option<rows::Pieces<R>>> {
        if !self.share_always {
            return Ok(None);
        }
        let op = match kind {
            Kind::Spmv => Operation::Spmv(SparseFormat::Csr),
            _ => Operation::Spmm(SparseFormat::Csr),
        };
        let Ok(part) = self.taking_part(op) else {
            return Ok(None);
        };
        let members = part.iter().filter(|p| **p).count();
        let work = a.nnz().saturating_mul(units_per_entry);
        if members < 2 || work < self.min_chunk_products.saturating_mul(2) {
            return Ok(None);
        }
        let _span = tracing::info_span!("sched_rows", ?kind, rows = a.nrows(), work).entered();
        let started = Instant::now();
        let per_block = a.nnz() / (members * self.chunks_per_device) as u64;
        let speeds = self.learned(kind).speeds.clone();
        let (pieces, reports) = rows::run(
            a,
            &self.backends,
            &part,
            rows::blocks(a, per_block.max(1)),
            units_per_entry,
            &speeds,
            run,
            compute,
        )?;
        self.learned(kind).record(&reports, started.elapsed());
        Ok(Some(pieces))
    }
}

/// The memory a device with memory of its own may use: its pool's limit (its budget), else
/// all it has.
pub(crate) fn memory_budget<T: Scalar>(device: &dyn Backend<T>) -> u64 {
    device
        .memory_pool()
        .map(|pool| pool.limit())
        .unwrap_or(device.info().memory_bytes)
}

/// The chunks of a product and who takes them.
struct Assignment {
    /// Each backend's own chunks.
    own: Vec<Vec<Task>>,
    /// Chunks for whichever backend is free.
    shared: Vec<Task>,
    /// B's column panels.
    panels: Vec<std::ops::Range<usize>>,
}

/// Row blocks spread evenly over the product (by products) that together hold about
/// [`CALIBRATION_SHARE`] of it.
fn calibration_sample(prefix: &[u64]) -> Vec<ProductChunk> {
    let rows = prefix.len() - 1;
    let total = prefix[rows];
    let blocks = 8u64;
    let per_block = ((total as f64 * CALIBRATION_SHARE) as u64 / blocks).max(1);
    let mut sample = Vec::new();
    let mut previous_end = 0;
    for k in 0..blocks {
        let at = total / blocks * k;
        let start = prefix
            .partition_point(|&p| p < at)
            .min(rows)
            .max(previous_end);
        let end = (prefix[start..].partition_point(|&p| p < prefix[start] + per_block) + start)
            .clamp((start + 1).min(rows), rows);
        if start < end {
            sample.push(ProductChunk {
                rows: start..end,
                cols: 0..0,
            });
        }
        previous_end = end;
    }
    sample
}

impl<T: Scalar> Device for Scheduler<T> {
    fn info(&self) -> DeviceInfo {
        let infos: Vec<DeviceInfo> = self.backends.iter().map(|b| b.info()).collect();
        DeviceInfo {
            backend: hetsparse_core::BackendKind::Scheduler,
            name: infos
                .iter()
                .map(|i| i.name.as_str())
                .collect::<Vec<_>>()
                .join(" + "),
            kind: if infos.iter().any(|i| i.kind == DeviceKind::Gpu) {
                DeviceKind::Gpu
            } else {
                DeviceKind::Cpu
            },
            memory_bytes: infos.iter().map(|i| i.memory_bytes).max().unwrap_or(0),
            compute_units: infos.iter().map(|i| i.compute_units).sum(),
        }
    }

    fn capabilities(&self) -> &Capabilities {
        &self.capabilities
    }

    /// The scheduler's results and handles are host matrices, whatever devices computed them.
    fn memory_space(&self) -> hetsparse_core::MemorySpace {
        hetsparse_core::MemorySpace::Host
    }

    /// [`Error::NoDevice`] when the scheduler holds no backends.
    fn available(&self) -> Result<()> {
        if self.backends.is_empty() {
            return Err(self.no_device());
        }
        Ok(())
    }
}

impl<T: Scalar> Backend<T> for Scheduler<T> {
    fn spgemm_checked(
        &self,
        a: CsrOperand<'_, T>,
        b: CsrOperand<'_, T>,
        options: &SpgemmOptions,
        run: &RunControl,
        _checked: Validated,
    ) -> Result<Csr<T>> {
        let (a, b) = (host_operands::csr(self, a)?, host_operands::csr(self, b)?);
        run.checkpoint()?;
        self.spgemm_scheduled(a, b, options, run)
    }

    fn spmm_checked(
        &self,
        a: SparseOperand<'_, T>,
        b: DenseOperand<'_, T>,
        options: &SpmmOptions,
        run: &RunControl,
        _checked: Validated,
    ) -> Result<Dense<T>> {
        let (a, b) = (
            host_operands::sparse(self, a)?,
            host_operands::dense(self, b)?,
        );
        run.checkpoint()?;
        let k = b.ncols() as u64;
        if let SparseRef::Csr(csr) = a {
            let shared = self.by_row_blocks(Kind::Spmm, csr, k, run, &|backend, rows, r| {
                backend.spmm_with(rows.into(), b.into(), options, r)
            })?;
            if let Some(pieces) = shared {
                return dense_rows(csr.nrows(), b.ncols(), b.layout(), pieces);
            }
        }
        let work = sparse_entries(&a).saturating_mul(k);
        self.on_one(
            Operation::Spmm(a.format()),
            Kind::Spmm,
            work,
            run,
            |backend| backend.spmm_with(a.into(), b.into(), options, run),
        )
    }

    fn spmv_checked(
        &self,
        a: SparseOperand<'_, T>,
        x: VectorOperand<'_, T>,
        options: &SpmvOptions,
        run: &RunControl,
        _checked: Validated,
    ) -> Result<Vec<T>> {
        let (a, x) = (
            host_operands::sparse(self, a)?,
            host_operands::vector(self, x)?,
        );
        run.checkpoint()?;
        if let SparseRef::Csr(csr) = a {
            let shared = self.by_row_blocks(Kind::Spmv, csr, 1, run, &|backend, rows, r| {
                backend.spmv_with(rows.into(), x.into(), options, r)
            })?;
            if let Some(pieces) = shared {
                let mut y = vec![T::default(); csr.nrows()];
                for (block, piece) in pieces {
                    if piece.len() != block.len() {
                        return Err(piece_mismatch(&block, piece.len(), 1));
                    }
                    y[block].copy_from_slice(&piece);
                }
                return Ok(y);
            }
        }
        let work = sparse_entries(&a);
        self.on_one(
            Operation::Spmv(a.format()),
            Kind::Spmv,
            work,
            run,
            |backend| backend.spmv_with(a.into(), x.into(), options, run),
        )
    }

    /// Band matrices by Matam et al.'s row split (§IV.C): each backend computes a range of C's
    /// rows, sized so that all finish together by the backends' [`BandCost`]s (calibrated on
    /// first use with [`Scheduler::calibrate_band`]), or by the speeds of
    /// [`Policy::RowSplitAssumed`]. A backend that fails has its rows rerun on the others.
    fn dia_spgemm_checked(&self, a: &Dia<T>, b: &Dia<T>, _checked: Validated) -> Result<Dia<T>> {
        self.dia_scheduled(a, b)
    }

    /// Handles are host matrices: resident products and plans go through the scheduled
    /// products.
    fn residency(&self) -> hetsparse_core::Residency<'_, T> {
        hetsparse_core::Residency::Host
    }
}

/// Stored entries of a CSR `a`, the work of SpMV and SpMM; 0 (nothing learned) for the other
/// formats, which are not counted just for that.
fn sparse_entries<T: Scalar>(a: &SparseRef<'_, T>) -> u64 {
    match a {
        SparseRef::Csr(m) => m.nnz(),
        _ => 0,
    }
}

fn piece_mismatch(block: &std::ops::Range<usize>, rows: usize, cols: usize) -> Error {
    Error::Internal {
        backend: hetsparse_core::BackendKind::Scheduler,
        what: format!("a block of rows {block:?} came back with {rows} rows of {cols} columns"),
    }
}

/// The `nrows × ncols` result in `layout` from row blocks computed apart.
fn dense_rows<T: Scalar>(
    nrows: usize,
    ncols: usize,
    layout: hetsparse_core::Layout,
    pieces: Vec<(std::ops::Range<usize>, Dense<T>)>,
) -> Result<Dense<T>> {
    let mut c = Dense::zeros(nrows, ncols, layout)?;
    for (block, piece) in pieces {
        if piece.shape() != (block.len(), ncols) {
            return Err(piece_mismatch(&block, piece.nrows(), piece.ncols()));
        }
        let piece = if piece.layout() == layout {
            piece
        } else {
            piece.to_layout(layout)
        };
        match layout {
            hetsparse_core::Layout::RowMajor => {
                c.data_mut()[block.start * ncols..block.end * ncols].copy_from_slice(piece.data())
            }
            hetsparse_core::Layout::ColMajor => {
                let len = block.len();
                for j in 0..ncols {
                    c.data_mut()[j * nrows + block.start..j * nrows + block.end]
                        .copy_from_slice(&piece.data()[j * len..(j + 1) * len]);
                }
            }
        }
    }
    Ok(c)
}

hetsparse_core::every_scalar!(Scheduler<_>);
