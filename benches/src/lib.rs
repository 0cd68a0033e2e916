//! Benchmarks of hetsparse against the peers issue 3 names (scipy, Intel MKL,
//! SuiteSparse:GraphBLAS, cuSPARSE).
//!
//! Two front ends share this library:
//! - `cargo bench -p hetsparse-bench` runs the criterion benches in `benches/products.rs`;
//! - `cargo xtask bench` runs the `hetsparse-bench` binary, which exports the operands as
//!   Matrix Market files for the peers' script (`benches/peers/peers.py`), times every backend
//!   the same way the script times the peers, and prints one markdown table.
//!
//! Data flows case → operands → measured operation → record → report. Backends are chosen by
//! the crate's Cargo features (`cpu`, `cuda`, `opencl`), see [`backends`].
//!
//! ```
//! use hetsparse_bench::{cases::Case, measure_backend, timing::Budget, cases::Scale};
//! use hetsparse_core::{generate::MatrixClass, ReferenceBackend};
//! let ops = Case { class: MatrixClass::Banded, size: 200 }.generate()?;
//! let records = measure_backend(&ReferenceBackend, &ops, Budget::for_scale(Scale::Quick), |_| true);
//! assert!(records.iter().all(|r| r.gflops().is_some()));
//! # Ok::<(), hetsparse_core::Error>(())
//! ```
#![warn(missing_docs)]

pub mod backends;
pub mod cases;
pub mod export;
pub mod gpu_table;
pub mod operation;
pub mod raw;
pub mod real;
pub mod report;
pub mod results;
pub mod svg;
pub mod timing;

use hetsparse_core::Backend;

use crate::cases::Operands;
use crate::operation::{measured_operations, Measured};
use crate::results::Record;
use crate::timing::{measure, Budget};

/// Times every operation `backend` lists that `wanted` accepts on one case; a failed
/// operation gives a record without time whose note is the error.
pub fn measure_backend(
    backend: &dyn Backend<f64>,
    operands: &Operands,
    budget: Budget,
    wanted: impl Fn(Measured) -> bool,
) -> Vec<Record> {
    let name = backend.info().backend.name();
    measured_operations(backend, operands)
        .into_iter()
        .filter(|&op| wanted(op))
        .map(|op| measure_one(backend, name, op, operands, budget))
        .collect()
}

fn measure_one(
    backend: &dyn Backend<f64>,
    name: &str,
    op: Measured,
    operands: &Operands,
    budget: Budget,
) -> Record {
    let sample = measure(
        budget,
        || op.run_checked(backend, operands),
        || op.run(backend, operands).map(drop),
    );
    let (seconds, note) = match sample {
        Ok(s) => (Some(s.median()), String::new()),
        Err(e) => (None, e.to_string()),
    };
    Record {
        implementation: op.implementation(name),
        class: operands.name.clone(),
        operation: op.label().to_string(),
        seconds,
        flops: op.flops(operands),
        note,
    }
}
