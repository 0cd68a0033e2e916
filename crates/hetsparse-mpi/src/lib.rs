//! Distributed sparse matrices and SpGEMM over MPI (through rsmpi), each rank computing its
//! part on its own devices through a [`hetsparse::Context`].
//!
//! A [`DistCsr`] holds a CSR matrix in 1D blocks of rows: each rank owns a contiguous block,
//! and every rank knows the [`RowPartition`]. Matrices are scattered from one rank
//! ([`DistCsr::scatter`]), made of each rank's own rows ([`DistCsr::from_local_rows`]) and
//! gathered back ([`DistCsr::gather`]), and read from and written to Matrix Market files
//! collectively, each rank its own part of the file ([`DistCsr::read_matrix_market`],
//! [`DistCsr::write_matrix_market`]). [`spgemm`] computes `C = A·B` by 1D row fetch: each
//! rank receives only the rows of B that its rows of A touch. Every call returns a
//! [`CommReport`] of the bytes and messages it moved, also recorded in its `tracing` span.
//!
//! [`Dist2dCsr`] holds a matrix in 2D blocks on a `pr × pc` [`Grid`] of ranks, and
//! [`spgemm_summa`] multiplies such matrices by Sparse SUMMA: stage by stage, blocks of A are
//! broadcast along grid rows and blocks of B along grid columns. [`Dist3dCsr`] and
//! [`spgemm_summa3d`] add layers: on a `pr × pc × c` [`Grid3`] each layer multiplies its slice
//! of the inner dimension by 2D SUMMA and the partial products are summed along the fibers;
//! [`spgemm_summa3d_batched`] forms C in batches of columns to bound memory.
//! Every layout converts to every other (`to_rows`, `to_2d` and `to_3d` on each type), so a
//! matrix read by rows reaches any of the three products and a product comes back to rows to be
//! written; [`agree`] makes a caller's own local steps collective in the same way.
//! [`model_volume`] models the bytes each algorithm moves and [`choose_algorithm`] ranks the
//! layouts of a product by it; [`model_time`] predicts a product's time on `P` ranks from a
//! measured local rate, entry rate ([`measure_entry_rate`]) and a [`Network`]'s bandwidth and
//! latency, and [`choose_algorithm_by_time`] ranks the layouts by that prediction;
//! [`measure_machine`] measures those on the ranks a product runs on, from samples of it.
//!
//! Every function is collective, errors included: when one rank finds a problem, every rank
//! returns the same [`Error`], naming the rank that found it, and none is left waiting.
//!
//! ```no_run
//! use hetsparse::generate;
//! use hetsparse_mpi::{spgemm, DistCsr, DistOptions};
//!
//! let universe = mpi::initialize().expect("MPI initialised once");
//! let world = universe.world();
//! let options = DistOptions::default();
//! // Rank 0 reads or generates the operand; the others pass None.
//! let a = (mpi::traits::Communicator::rank(&world) == 0)
//!     .then(|| generate::uniform::<f64>(1000, 1000, 8, 1));
//! let (a, _) = DistCsr::scatter(&world, 0, a.as_ref(), None, &options)?;
//! let (c, report) = spgemm(&world, &a, &a, &options)?;
//! println!("rank {}: {} bytes received", report.rank, report.local.bytes_received);
//! let (whole, _) = c.gather(&world, 0, &options)?; // Some(C) on rank 0
//! # let _ = whole;
//! # Ok::<(), hetsparse_mpi::Error>(())
//! ```
#![warn(missing_docs)]

mod convert;
mod error;
mod matrix;
mod measure;
mod mmio;
mod model;
mod partition;
mod report;
mod spgemm;
mod summa;
mod summa3d;
mod wire;

pub use error::{agree, Error, Result};
pub use matrix::{DistCsr, DistOptions};
pub use measure::{measure_machine, measure_network};
pub use model::{
    choose_algorithm, choose_algorithm_by_time, critical_path_flops, measure_entry_rate,
    model_comm, model_comm_with, model_entries, model_time, model_time_with, model_volume,
    Algorithm, CommEstimate, Machine, ModelError, Network, ProductStats, TimeEstimate,
    MAX_MODEL_RANKS,
};
/// The rsmpi crate this one is built on (initialise MPI and make communicators with it).
pub use mpi;
pub use partition::RowPartition;
pub use report::{CommReport, Traffic};
pub use spgemm::{spgemm, spgemm_with};
pub use summa::{spgemm_summa, spgemm_summa_with, Dist2dCsr, Grid};
pub use summa3d::{
    spgemm_summa3d, spgemm_summa3d_batched, spgemm_summa3d_with, summa3d_batches_for_memory, Batch,
    Dist3dCsr, Grid3, Layout3,
};
pub use wire::MpiScalar;
