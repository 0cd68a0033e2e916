//! A long product on the CPU backend moves its progress while it runs and stops when it is
//! cancelled midway, on either algorithm's phases (the one-pass Row-Row product and the
//! counted Column-Row one), as a whole call and as a chunk.
//!
//! One thread computes the ranges of rows one after another, so the product reports its
//! products range by range; a watcher cancels the run as soon as it sees the first, and the
//! product must then return [`Error::Cancelled`] having done only part of what it planned.

use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;

use hetsparse_core::format::Csr;
use hetsparse_core::{
    analysis, generate, Backend, Error, ProductChunk, Progress, Result, RunControl,
    SpgemmAlgorithm, SpgemmOptions,
};
use hetsparse_cpu::CpuBackend;

/// Uniform rows of 16 entries: 2^17 rows of C of about 256 products each, a few hundred
/// ranges of rows for one thread.
fn operand() -> Csr<f64> {
    generate::uniform::<f64>(1 << 17, 1 << 17, 16, 7)
}

/// Runs `product` under a run that a watcher cancels once some products are done; returns
/// what the product returned and the progress the watcher saw when it cancelled.
fn cancelled_midway<R: Send>(
    product: impl FnOnce(&RunControl) -> Result<R>,
) -> (Result<R>, Option<Progress>) {
    let run = RunControl::new();
    let finished = AtomicBool::new(false);
    thread::scope(|scope| {
        let watcher = scope.spawn(|| loop {
            let progress = run.progress();
            if progress.done > 0 {
                run.cancel();
                return Some(progress);
            }
            if finished.load(Ordering::Acquire) {
                return None;
            }
            thread::yield_now();
        });
        let result = product(&run);
        finished.store(true, Ordering::Release);
        (result, watcher.join().expect("watcher"))
    })
}

fn assert_stopped_midway<R>(what: &str, result: Result<R>, seen: Option<Progress>, planned: u64) {
    let seen = seen.unwrap_or_else(|| panic!("{what}: no progress before the product ended"));
    assert_eq!(seen.planned, planned, "{what}: products planned");
    assert!(
        seen.done < planned,
        "{what}: progress {} of {planned} was first seen only at the end",
        seen.done
    );
    assert!(
        matches!(result, Err(Error::Cancelled)),
        "{what}: a product cancelled midway returned {:?}",
        result.map(|_| ())
    );
}

#[test]
fn a_whole_product_stops_midway_when_cancelled() {
    let cpu = CpuBackend::with_threads(1).expect("cpu");
    let a = operand();
    let planned = analysis::total_products(&a, &a).expect("products");
    for algorithm in [SpgemmAlgorithm::RowRow, SpgemmAlgorithm::ColumnRow] {
        let options = SpgemmOptions::from(algorithm);
        let (result, seen) =
            cancelled_midway(|run| cpu.spgemm_with((&a).into(), (&a).into(), &options, run));
        assert_stopped_midway(&format!("{algorithm:?}"), result, seen, planned);
    }
}

#[test]
fn a_chunk_stops_midway_when_cancelled() {
    let cpu = CpuBackend::with_threads(1).expect("cpu");
    let a = operand();
    let planned = analysis::total_products(&a, &a).expect("products");
    let chunk = ProductChunk {
        rows: 0..a.nrows(),
        cols: 0..a.ncols(),
    };
    let (result, seen) = cancelled_midway(|run| {
        cpu.spgemm_chunks(
            (&a).into(),
            (&a).into(),
            std::slice::from_ref(&chunk),
            &SpgemmOptions::new(),
            run,
            &mut |_| Ok(()),
        )
    });
    assert_stopped_midway("a chunk", result, seen, planned);
}

#[test]
fn a_finished_product_reports_every_product_it_planned() {
    let cpu = CpuBackend::with_threads(2).expect("cpu");
    let a = generate::uniform::<f64>(1 << 12, 1 << 12, 16, 3);
    let planned = analysis::total_products(&a, &a).expect("products");
    for algorithm in [SpgemmAlgorithm::RowRow, SpgemmAlgorithm::ColumnRow] {
        let run = RunControl::new();
        let options = SpgemmOptions::from(algorithm);
        cpu.spgemm_with((&a).into(), (&a).into(), &options, &run)
            .expect("product");
        let progress = run.progress();
        assert_eq!(
            (progress.done, progress.planned),
            (planned, planned),
            "{algorithm:?}"
        );
    }
    // Columns split into panels: each chunk reports what it planned.
    let run = RunControl::new();
    let half = a.ncols() / 2;
    let chunks = [
        ProductChunk {
            rows: 0..a.nrows(),
            cols: 0..half,
        },
        ProductChunk {
            rows: 0..a.nrows(),
            cols: half..a.ncols(),
        },
    ];
    cpu.spgemm_chunks(
        (&a).into(),
        (&a).into(),
        &chunks,
        &SpgemmOptions::new(),
        &run,
        &mut |_| Ok(()),
    )
    .expect("chunks");
    let progress = run.progress();
    assert_eq!(progress.done, progress.planned, "chunks");
}
