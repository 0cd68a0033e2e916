//! SpGEMM chunks as a job of the scheduler's executor ([`crate::executor`]): a device takes a
//! batch of chunks (its own assigned list first, then from the shared queue by guided
//! self-scheduling), merges what is adjacent, and has each chunk written straight into its
//! place in C (or handed back as a matrix of its own, for the assembly). A chunk that runs out
//! of memory is halved (rows, then columns); a merged chunk goes back as its parts.
//!
//! A chunk is held by one device at a time, and a device writes into a chunk's place only
//! during its call: a chunk given back is placed anew after that call has returned, so no two
//! places alive at once share a position of C. A chunk counts as finished once its device said
//! so and its place is complete.

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::Arc;

use hetsparse_core::backend::assemble::Tile;
use hetsparse_core::backend::memory::csr_bytes;
use hetsparse_core::{
    Backend, ChunkPlace, Csr, CsrOperand, Error, MemorySpace, ProductBuffer, ProductChunk,
    ResidentCsr, Result, RunControl, Scalar, SpgemmOptions,
};

use crate::chunking::{share_credit, split, Task};
use crate::executor::{self, Call, Job, Plan, Share};
use crate::report::DeviceReport;

/// What runs: the operands and, for each device, its own tasks; `shared` is the queue any
/// device takes from.
pub(crate) struct Work<'a, T: Scalar> {
    pub a: &'a Csr<T>,
    pub b: &'a Csr<T>,
    pub options: &'a SpgemmOptions,
    /// Every backend of the scheduler, by position.
    pub devices: &'a [Arc<dyn Backend<T>>],
    /// Whether each takes part.
    pub taking_part: Vec<bool>,
    /// Each device's assigned tasks, in the order it runs them.
    pub own: Vec<Vec<Task>>,
    /// Tasks for whichever device is free, in row order per panel of B.
    pub shared: Vec<Task>,
    /// Each device's speed from earlier runs (products per second), where known.
    pub speeds: Vec<Option<f64>>,
    /// B's column panels (the chunks' column ranges), cut once on the host for the devices
    /// that take their operands chunk by chunk; empty when B is not cut.
    pub panels: Vec<(Range<usize>, Csr<T>)>,
    /// C, which the chunks are written into; `None`: each chunk comes back as a matrix of its
    /// own.
    pub c: Option<&'a ProductBuffer<T>>,
    /// A and B already on a device (the one that counted C), by device: its worker computes
    /// from them instead of uploading them again.
    pub uploaded: Vec<Option<(ResidentCsr<T>, ResidentCsr<T>)>>,
}

/// What a run did: the chunks that came back as matrices (none where C was written in
/// place) and each device's report.
pub(crate) struct Finished<T> {
    pub tiles: Vec<Tile<T>>,
    pub devices: Vec<DeviceReport>,
}

/// Runs `work` to the end: every chunk finished, or the error that stopped the run.
pub(crate) fn run<T: Scalar>(work: Work<'_, T>, caller: &RunControl) -> Result<Finished<T>> {
    let _span = tracing::debug_span!("run_chunks").entered();
    let Work {
        a,
        b,
        options,
        devices,
        taking_part,
        own,
        shared,
        speeds,
        panels,
        c,
        uploaded,
    } = work;
    let fits: Vec<bool> = devices
        .iter()
        .map(|d| holds_whole(d.as_ref(), operands_bytes(a, b)))
        .collect();
    let job = Chunks {
        a,
        b,
        options,
        panels,
        c,
        uploaded,
        fits,
    };
    let plan = Plan {
        devices,
        taking_part,
        own,
        shared,
        speeds,
    };
    let finished = executor::run(&job, plan, caller)?;
    Ok(Finished {
        tiles: finished
            .outputs
            .into_iter()
            .map(|(task, tile)| (task.chunk, tile))
            .collect(),
        devices: finished.reports,
    })
}

/// The product's chunks, as the executor runs them.
struct Chunks<'a, T: Scalar> {
    a: &'a Csr<T>,
    b: &'a Csr<T>,
    options: &'a SpgemmOptions,
    panels: Vec<(Range<usize>, Csr<T>)>,
    c: Option<&'a ProductBuffer<T>>,
    uploaded: Vec<Option<(ResidentCsr<T>, ResidentCsr<T>)>>,
    /// Whether A and B fit each device whole ([`holds_whole`]).
    fits: Vec<bool>,
}

impl executor::Task for Task {
    fn units(&self) -> u64 {
        self.products
    }
    fn pieces(&self) -> usize {
        self.parts.len().max(1)
    }
    fn excluded(&self) -> &[usize] {
        &self.excluded
    }
    fn exclude(&mut self, d: usize) {
        self.excluded.push(d);
    }
    fn credited(&self) -> u64 {
        self.credited
    }
    fn set_credited(&mut self, units: u64) {
        self.credited = units;
    }
}

/// Where a device reads its operands from.
enum Placement<T: Scalar> {
    /// In place: the device computes in host memory, or A and B were uploaded once.
    Whole(Option<(ResidentCsr<T>, ResidentCsr<T>)>),
    /// A and B handed over from the host with each batch, when they do not fit the device
    /// together: the backend places each chunk's rows of A and window of B itself (one call
    /// for the batch, so it keeps what chunks share and pipelines them). The chunks were cut
    /// to fit, so a batch's chunks are not merged.
    PerChunk,
}

impl<T: Scalar> Chunks<'_, T> {
    /// Whether device `d` takes its operands chunk by chunk: where it placed them, else
    /// whether they would not fit it whole.
    fn per_chunk(&self, d: usize, placement: Option<&Placement<T>>) -> bool {
        match placement {
            Some(Placement::PerChunk) => true,
            Some(Placement::Whole(_)) => false,
            None => !self.fits[d],
        }
    }
}

impl<T: Scalar> Job<T> for Chunks<'_, T> {
    type Task = Task;
    /// A chunk computed as a matrix of its own, where C is not written in place.
    type Output = Csr<T>;
    type Placement = Placement<T>;

    /// Uploads A and B once where device `d` has memory of its own and they fit (or takes
    /// them where they were uploaded before the run).
    fn place(&self, device: &dyn Backend<T>, d: usize) -> Result<Placement<T>> {
        if device.memory_space() == MemorySpace::Host {
            return Ok(Placement::Whole(None));
        }
        if let Some(ab) = self.uploaded.get(d).and_then(Option::as_ref) {
            return Ok(Placement::Whole(Some(ab.clone())));
        }
        if !self.fits[d] {
            return Ok(Placement::PerChunk);
        }
        match upload_operands(device, self.a, self.b) {
            Ok(ab) => Ok(Placement::Whole(Some(ab))),
            Err(Error::OutOfMemory { .. }) => Ok(Placement::PerChunk),
            Err(e) => Err(e),
        }
    }

    /// The device's own chunks: one after another in B's panels for a device that takes its
    /// operands chunk by chunk (it keeps a panel), else merged where adjacent.
    fn own_batch(
        &self,
        d: usize,
        placement: Option<&Placement<T>>,
        mut own: Vec<Task>,
    ) -> Vec<Task> {
        if self.per_chunk(d, placement) {
            own.sort_by_key(Task::place);
            return own;
        }
        merge_adjacent(own)
    }

    /// Guided self-scheduling, weighted by speed ([`Share`]). The queue holds the chunks in
    /// row order (per panel of B); the fastest device takes from its front, the others from
    /// its back, so each batch is a run of adjacent rows, computed as one chunk (one call, one
    /// part of C). A device of unknown speed takes one chunk, which measures it. The chunks of
    /// a device that places them one by one stay apart, in the queue's order. A device that
    /// holds A and B whole takes a chunk together with the chunks of the same rows in B's
    /// other panels, all of whose columns it computes as one chunk: B is cut into panels for
    /// the devices that cannot hold it, and a panel costs the others a walk over A's rows and
    /// their rows of B per panel, for no gain.
    fn take(
        &self,
        queue: &mut VecDeque<Task>,
        d: usize,
        placement: Option<&Placement<T>>,
        share: Share,
    ) -> Vec<Task> {
        let per_chunk = self.per_chunk(d, placement);
        let eligible = |t: &Task| !t.excluded.contains(&d);
        let mut batch = Vec::new();
        let mut products = 0u64;
        loop {
            let next = if share.fastest {
                queue.iter().position(eligible)
            } else {
                queue.iter().rposition(eligible)
            };
            let Some(task) = next.and_then(|i| queue.remove(i)) else {
                break;
            };
            products += task.products;
            if !per_chunk && !self.panels.is_empty() {
                let rows = task.chunk.rows.clone();
                let mut i = 0;
                while i < queue.len() {
                    let t = &queue[i];
                    if t.chunk.rows == rows && eligible(t) {
                        if let Some(sibling) = queue.remove(i) {
                            products += sibling.products;
                            batch.push(sibling);
                        }
                    } else {
                        i += 1;
                    }
                }
            }
            batch.push(task);
            if products >= share.goal {
                break;
            }
        }
        if per_chunk {
            batch.sort_by_key(Task::place);
            return batch;
        }
        merge_adjacent(batch)
    }

    fn requeue(&self, queue: &mut VecDeque<Task>, task: Task) {
        requeue(queue, task);
    }

    /// A merged chunk goes back as the chunks it was merged from (they were planned to fit),
    /// not merged again; a planned one is halved by rows, then columns.
    fn split(&self, mut task: Task) -> std::result::Result<Vec<Task>, Task> {
        if !task.parts.is_empty() {
            tracing::info!(rows = ?task.chunk.rows, cols = ?task.chunk.cols,
                "out of memory on a merged chunk; back to its parts");
            task.splits += 1;
            return Ok(vec![task]);
        }
        match split(self.a, self.b, self.c.map(ProductBuffer::layout), &task) {
            Some((x, y)) => {
                tracing::info!(rows = ?task.chunk.rows, cols = ?task.chunk.cols,
                    "out of memory on a chunk; splitting it");
                Ok(vec![x, y])
            }
            None => Err(task),
        }
    }

    /// Runs `batch` as one call, or one call per panel of B for a device that takes its
    /// operands chunk by chunk.
    fn compute(
        &self,
        device: &dyn Backend<T>,
        placement: &Placement<T>,
        batch: &mut [Task],
        call: &mut Call<'_, Csr<T>>,
    ) -> Result<()> {
        let (a, b): (CsrOperand<'_, T>, CsrOperand<'_, T>) = match placement {
            Placement::Whole(Some((ra, rb))) => {
                (CsrOperand::Resident(ra), CsrOperand::Resident(rb))
            }
            Placement::Whole(None) => (self.a.into(), self.b.into()),
            Placement::PerChunk => return self.compute_by_panel(device, batch, call),
        };
        let chunks = batch.iter().map(|t| t.chunk.clone()).collect();
        self.call(device, a, b, batch, chunks, 0, call)
    }
}

/// Puts `task` back in the queue at its place: by B's panel, then by rows. A merged task goes
/// back as the tasks it was made of (with its exclusions and halvings), so that a device that
/// takes B panel by panel can take them.
fn requeue(queue: &mut VecDeque<Task>, mut task: Task) {
    if !task.parts.is_empty() {
        let mut parts = std::mem::take(&mut task.parts);
        share_credit(task.credited, &mut parts);
        for mut part in parts {
            part.excluded.clone_from(&task.excluded);
            part.splits = task.splits;
            requeue(queue, part);
        }
        return;
    }
    let at = queue.partition_point(|t| t.place() < task.place());
    queue.insert(at, task);
}

/// Whether A and B (`operands` bytes, [`operands_bytes`]) may be placed on `device` whole:
/// always for host memory, else where they take at most half of the device's own budget (a
/// device beside one of a smaller budget holds them if it can; the chunks are cut for the
/// smallest).
pub(crate) fn holds_whole<T: Scalar>(device: &dyn Backend<T>, operands: u64) -> bool {
    device.memory_space() == MemorySpace::Host || operands <= crate::memory_budget(device) / 2
}

/// Bytes of A and B in CSR form: what a device holding them whole takes for them.
pub(crate) fn operands_bytes<T: Scalar>(a: &Csr<T>, b: &Csr<T>) -> u64 {
    let value = std::mem::size_of::<T>();
    csr_bytes(a.nrows(), a.nnz(), value).saturating_add(csr_bytes(b.nrows(), b.nnz(), value))
}

/// A and B uploaded to `device`, once each (once in all where they are one matrix, as in
/// `A · A`: the same or a clone, [`Csr::shares_arrays`]).
pub(crate) fn upload_operands<T: Scalar>(
    device: &dyn Backend<T>,
    a: &Csr<T>,
    b: &Csr<T>,
) -> Result<(ResidentCsr<T>, ResidentCsr<T>)> {
    let ra = device.upload(a)?;
    let rb = if a.shares_arrays(b) {
        ra.clone()
    } else {
        device.upload(b)?
    };
    Ok((ra, rb))
}

/// `batch` with every run of chunks of the same rows in adjacent panels of B made one chunk of
/// their columns, then every run of chunks of adjacent rows (same columns) made one chunk: one
/// call and one part of C instead of several. Only chunks with the same exclusions merge;
/// halves of a chunk that ran out of memory stay apart.
fn merge_adjacent(mut batch: Vec<Task>) -> Vec<Task> {
    let mergeable = |x: &Task, y: &Task| x.excluded == y.excluded && x.splits == 0 && y.splits == 0;
    batch.sort_by_key(|t| (t.chunk.rows.start, t.chunk.cols.start));
    let mut across = merge_runs(
        batch,
        |last, next| {
            last.chunk.rows == next.chunk.rows
                && last.chunk.cols.end == next.chunk.cols.start
                && mergeable(last, next)
        },
        |last, next| last.chunk.cols.end = next.chunk.cols.end,
    );
    across.sort_by_key(Task::place);
    merge_runs(
        across,
        |last, next| {
            last.chunk.cols == next.chunk.cols
                && last.chunk.rows.end == next.chunk.rows.start
                && mergeable(last, next)
        },
        |last, next| last.chunk.rows.end = next.chunk.rows.end,
    )
}

/// `tasks` with each task that `joins` the one before it folded into it by `extend` (its
/// products added, the tasks it is made of kept in `parts`).
fn merge_runs(
    tasks: Vec<Task>,
    joins: impl Fn(&Task, &Task) -> bool,
    extend: impl Fn(&mut Task, &Task),
) -> Vec<Task> {
    let mut merged: Vec<Task> = Vec::with_capacity(tasks.len());
    for mut task in tasks {
        match merged.last_mut() {
            Some(last) if joins(last, &task) => {
                if last.parts.is_empty() {
                    let first = last.clone();
                    last.parts.push(first);
                }
                extend(last, &task);
                last.products += task.products;
                last.credited += task.credited;
                if task.parts.is_empty() {
                    last.parts.push(task);
                } else {
                    last.parts.append(&mut task.parts);
                }
            }
            _ => merged.push(task),
        }
    }
    merged
}

impl<T: Scalar> Chunks<'_, T> {
    /// Runs `batch` on a device that takes its operands chunk by chunk: one call per panel of
    /// B the batch reaches (the panel cut beforehand, or B), its chunks' columns made relative
    /// to the panel, so that the device is handed no more of B than one panel.
    fn compute_by_panel(
        &self,
        device: &dyn Backend<T>,
        batch: &[Task],
        call: &mut Call<'_, Csr<T>>,
    ) -> Result<()> {
        let panel_of = |cols: &Range<usize>| {
            self.panels
                .iter()
                .find(|(p, _)| p.start <= cols.start && cols.end <= p.end)
                .map_or((0, self.b), |(p, panel)| (p.start, panel))
        };
        let mut start = 0;
        while start < batch.len() {
            let (first, panel) = panel_of(&batch[start].chunk.cols);
            let mut end = start + 1;
            while end < batch.len() && std::ptr::eq(panel_of(&batch[end].chunk.cols).1, panel) {
                end += 1;
            }
            let chunks = batch[start..end]
                .iter()
                .map(|t| ProductChunk {
                    rows: t.chunk.rows.clone(),
                    cols: t.chunk.cols.start - first..t.chunk.cols.end - first,
                })
                .collect();
            self.call(
                device,
                self.a.into(),
                panel.into(),
                &batch[start..end],
                chunks,
                start,
                call,
            )
            .map_err(|e| match e {
                Error::InChunk { index, source } => (*source).in_chunk(start + index),
                e => e,
            })?;
            start = end;
        }
        Ok(())
    }

    /// One call for `tasks` (from position `at` of the batch), computed as `chunks` of `a` and
    /// `b`, each chunk written into C or handed back.
    #[allow(clippy::too_many_arguments)]
    fn call(
        &self,
        device: &dyn Backend<T>,
        a: CsrOperand<'_, T>,
        b: CsrOperand<'_, T>,
        tasks: &[Task],
        chunks: Vec<ProductChunk>,
        at: usize,
        call: &mut Call<'_, Csr<T>>,
    ) -> Result<()> {
        call.within(tasks, at, |call| match self.c {
            Some(c) => self.call_into(device, c, a, b, tasks, chunks, at, call),
            None => self.call_for_tiles(device, a, b, tasks, chunks, at, call),
        })
    }

    /// One call whose chunks are written into their places in `c`.
    #[allow(clippy::too_many_arguments)]
    fn call_into(
        &self,
        device: &dyn Backend<T>,
        c: &ProductBuffer<T>,
        a: CsrOperand<'_, T>,
        b: CsrOperand<'_, T>,
        tasks: &[Task],
        chunks: Vec<ProductChunk>,
        at: usize,
        call: &mut Call<'_, Csr<T>>,
    ) -> Result<()> {
        let mut places: Vec<ChunkPlace<'_, T>> = Vec::with_capacity(tasks.len());
        for (task, chunk) in tasks.iter().zip(chunks) {
            let segments = task.segments(c.layout())?;
            // SAFETY: the tasks of a run cover C without overlap (a panel's rows, or a
            // split's halves of its task's positions), a task is in one batch at a time, and
            // a batch's places live only for this call: a task given back is placed again
            // only after the call that held it has returned.
            places.push(unsafe { c.place(chunk, task.chunk.cols.start, segments)? });
        }
        let mut told = vec![false; tasks.len()];
        let outcome = device.spgemm_chunks_into(
            a,
            b,
            &mut places,
            self.options,
            call.run(),
            &mut |i, _timing| {
                task_at(tasks, i)?;
                told[i] = true;
                call.count_done(i);
                Ok(())
            },
        );
        for (i, place) in places.iter().enumerate() {
            if told[i] && !place.is_complete() {
                return Err(Error::Internal {
                    backend: device.info().backend,
                    what: format!(
                        "chunk of rows {:?} finished with {} of its rows written",
                        place.chunk().rows,
                        place.rows_written()
                    ),
                }
                .in_chunk(i));
            }
            if told[i] {
                call.finish(at + i, None);
            }
        }
        outcome
    }

    /// One call whose chunks come back as matrices of their own.
    #[allow(clippy::too_many_arguments)]
    fn call_for_tiles(
        &self,
        device: &dyn Backend<T>,
        a: CsrOperand<'_, T>,
        b: CsrOperand<'_, T>,
        tasks: &[Task],
        chunks: Vec<ProductChunk>,
        at: usize,
        call: &mut Call<'_, Csr<T>>,
    ) -> Result<()> {
        let run = call.run();
        device.spgemm_chunks(a, b, &chunks, self.options, run, &mut |part| {
            let i = part.index;
            let chunk = &task_at(tasks, i)?.chunk;
            if part.product.shape() != (chunk.rows.len(), chunk.cols.len()) {
                return Err(Error::Internal {
                    backend: hetsparse_core::BackendKind::Scheduler,
                    what: format!(
                        "a chunk of rows {:?}, columns {:?} came back {}×{}",
                        chunk.rows,
                        chunk.cols,
                        part.product.nrows(),
                        part.product.ncols()
                    ),
                });
            }
            call.count_done(i);
            call.finish(at + i, Some(part.product));
            Ok(())
        })
    }
}

/// The task of chunk `i` of a call's batch, which its device said it finished.
fn task_at(tasks: &[Task], i: usize) -> Result<&Task> {
    tasks.get(i).ok_or_else(|| Error::Internal {
        backend: hetsparse_core::BackendKind::Scheduler,
        what: format!("chunk {i} of a batch of {} finished", tasks.len()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_merged_chunk_given_back_spreads_its_credit_over_its_parts() {
        let mut batch = vec![Task::new(0..4, 0..5, 30), Task::new(4..8, 0..5, 20)];
        batch[1].credited = 5;
        let mut merged = merge_adjacent(batch);
        assert_eq!(merged[0].credited, 5);
        merged[0].credited = 40;
        let mut queue = VecDeque::new();
        requeue(&mut queue, merged.remove(0));
        let credits: Vec<u64> = queue.iter().map(|t| t.credited).collect();
        assert_eq!(credits, vec![30, 10]);
    }

    /// Each task's rows, columns and products.
    fn shapes<'t>(
        tasks: impl IntoIterator<Item = &'t Task>,
    ) -> Vec<(Range<usize>, Range<usize>, u64)> {
        tasks
            .into_iter()
            .map(|t| (t.chunk.rows.clone(), t.chunk.cols.clone(), t.products))
            .collect()
    }

    #[test]
    fn adjacent_chunks_of_a_batch_become_one() {
        let mut split = Task::new(8..10, 0..5, 2);
        split.splits = 1;
        let mut excluded = Task::new(14..16, 0..5, 1);
        excluded.excluded.push(1);
        let batch = vec![
            Task::new(4..8, 0..5, 4),
            excluded,
            Task::new(0..4, 0..5, 3),
            split,
            Task::new(12..14, 0..5, 1),
            Task::new(0..4, 5..9, 7),
        ];
        let merged = shapes(&merge_adjacent(batch));
        // Rows 0..4 are in both panels, so they become one chunk of all columns, which the
        // chunk of rows 4..8 in the first panel alone cannot join.
        assert_eq!(
            merged,
            vec![
                (0..4, 0..9, 10),
                (4..8, 0..5, 4),
                (8..10, 0..5, 2),
                (12..14, 0..5, 1),
                (14..16, 0..5, 1),
            ]
        );
    }

    #[test]
    fn the_same_rows_in_every_panel_become_one_chunk_of_all_columns() {
        let batch = vec![
            Task::new(4..8, 5..9, 1),
            Task::new(0..4, 0..5, 2),
            Task::new(4..8, 0..5, 3),
            Task::new(0..4, 5..9, 4),
            Task::new(4..8, 9..12, 5),
            Task::new(0..4, 9..12, 6),
        ];
        let merged = merge_adjacent(batch);
        assert_eq!(shapes(&merged), vec![(0..8, 0..12, 21)]);
        // It remembers the six chunks it was made of, each as planned.
        let mut parts = shapes(&merged[0].parts);
        parts.sort_by_key(|(r, c, _)| (r.start, c.start));
        assert_eq!(
            parts,
            vec![
                (0..4, 0..5, 2),
                (0..4, 5..9, 4),
                (0..4, 9..12, 6),
                (4..8, 0..5, 3),
                (4..8, 5..9, 1),
                (4..8, 9..12, 5),
            ]
        );
        assert!(merged[0].parts.iter().all(|t| t.parts.is_empty()));
    }
}
