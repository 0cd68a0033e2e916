//! SpMV and SpMM over several backends, as a job of the scheduler's executor
//! ([`crate::executor`]): row blocks of A, balanced by entries, in one queue from the largest to
//! the smallest (the fastest backend takes from the front, the others from the back); each
//! backend computes its blocks' rows of the result, which are copied into place. Out of memory
//! halves a block.

use std::ops::Range;
use std::sync::Arc;

use hetsparse_core::{Backend, Csr, Result, RunControl, Scalar};

use crate::chunking::row_panels;
use crate::executor::{self, Call, Job, Plan, RowTask};
use crate::report::DeviceReport;

/// Row blocks of `a` of about `entries` entries each (at least one row): row panels weighed
/// by entries, whose prefix sums are A's row offsets.
pub(crate) fn blocks<T: Scalar>(a: &Csr<T>, entries: u64) -> Vec<Range<usize>> {
    row_panels(a, a.row_offsets(), 0..a.nrows(), entries, u64::MAX)
}

/// What a backend computes for one row block: its rows of the result.
pub(crate) type BlockFn<'a, T, R> =
    dyn Fn(&dyn Backend<T>, &Csr<T>, &RunControl) -> Result<R> + Sync + 'a;

/// Computed row blocks, in any order.
pub(crate) type Pieces<R> = Vec<(Range<usize>, R)>;

/// The row blocks of A, as the executor runs them.
struct RowBlocks<'a, 'f, T: Scalar, R> {
    a: &'a Csr<T>,
    units_per_entry: u64,
    compute: &'a BlockFn<'f, T, R>,
}

impl<T: Scalar, R> RowBlocks<'_, '_, T, R> {
    /// A block of `rows`, weighed by its entries.
    fn block(&self, rows: Range<usize>) -> RowTask<()> {
        let offsets = self.a.row_offsets();
        let entries = offsets[rows.end] - offsets[rows.start];
        RowTask::new(rows, entries.saturating_mul(self.units_per_entry), ())
    }
}

impl<T: Scalar, R: Send> Job<T> for RowBlocks<'_, '_, T, R> {
    type Task = RowTask<()>;
    type Output = R;
    type Placement = ();

    fn place(&self, _device: &dyn Backend<T>, _d: usize) -> Result<()> {
        Ok(())
    }

    /// Halves a block of more than one row.
    fn split(&self, task: RowTask<()>) -> std::result::Result<Vec<RowTask<()>>, RowTask<()>> {
        let units = |rows: Range<usize>| self.block(rows).units;
        task.halve(units, |(), _| ((), ())).map(Vec::from)
    }

    fn compute(
        &self,
        device: &dyn Backend<T>,
        _placement: &(),
        batch: &mut [RowTask<()>],
        call: &mut Call<'_, R>,
    ) -> Result<()> {
        for (i, task) in batch.iter().enumerate() {
            let piece = call.within(std::slice::from_ref(task), i, |call| {
                let rows = self.a.rows(task.rows.clone())?;
                let piece = (self.compute)(device, &rows, call.run())?;
                call.count_done(0);
                Ok(piece)
            })?;
            call.finish(i, Some(piece));
        }
        Ok(())
    }
}

/// Runs `compute` on row blocks of `a` over the backends taking part; returns the pieces (in
/// any order) and what each backend did. `units_per_entry` weighs an entry of A (the dense
/// operand's columns).
#[allow(clippy::too_many_arguments)]
pub(crate) fn run<T: Scalar, R: Send>(
    a: &Csr<T>,
    devices: &[Arc<dyn Backend<T>>],
    taking_part: &[bool],
    blocks: Vec<Range<usize>>,
    units_per_entry: u64,
    speeds: &[Option<f64>],
    caller: &RunControl,
    compute: &BlockFn<'_, T, R>,
) -> Result<(Pieces<R>, Vec<DeviceReport>)> {
    let job = RowBlocks {
        a,
        units_per_entry,
        compute,
    };
    let mut shared: Vec<RowTask<()>> = blocks.into_iter().map(|r| job.block(r)).collect();
    // Largest first: the fastest backend takes from the front.
    shared.sort_by_key(|t| std::cmp::Reverse(t.units));
    let plan = Plan {
        devices,
        taking_part: taking_part.to_vec(),
        own: devices.iter().map(|_| Vec::new()).collect(),
        shared,
        speeds: speeds.to_vec(),
    };
    let finished = executor::run(&job, plan, caller)?;
    let pieces = finished
        .outputs
        .into_iter()
        .map(|(task, piece)| (task.rows, piece))
        .collect();
    Ok((pieces, finished.reports))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_cover_the_rows_by_entries() {
        let a = hetsparse_core::generate::uniform::<f64>(100, 50, 4, 1);
        let b = blocks(&a, 40);
        assert_eq!(b.first().unwrap().start, 0);
        assert_eq!(b.last().unwrap().end, 100);
        for w in b.windows(2) {
            assert_eq!(w[0].end, w[1].start);
        }
        assert!(b.iter().all(|r| r.len() <= 10 && !r.is_empty()), "{b:?}");
        assert_eq!(blocks(&Csr::<f64>::zeros(0, 3).unwrap(), 10), vec![]);
    }
}
