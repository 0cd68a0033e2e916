//! Distributed sparse matrices and SpGEMM over MPI (through rsmpi), each rank computing its
//! part on its own devices through a [`hetsparse::Context`].
//!
//! A [`DistCsr`] holds a CSR matrix in 1D blocks of rows: each rank owns a contiguous block,
//! and every rank knows the [`RowPartition`]. Matrices are scattered from one rank
//! ([`DistCsr::scatter`]), made of each rank's own rows ([`DistCsr::from_local_rows`]) and
//! gathered back ([`DistCsr::gather`]). [`spgemm`] computes `C = A·B` by 1D row fetch: each
//! rank receives only the rows of B that its rows of A touch. Every call returns a
//! [`CommReport`] of the bytes and messages it moved, also recorded in its `tracing` span.
//!
//! [`Dist2dCsr`] holds a matrix in 2D blocks on a `pr × pc` [`Grid`] of ranks, and
//! [`spgemm_summa`] multiplies such matrices by Sparse SUMMA: stage by stage, blocks of A are
//! broadcast along grid rows and blocks of B along grid columns.
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

mod error;
mod matrix;
mod partition;
mod report;
mod spgemm;
mod summa;
mod wire;

pub use error::{Error, Result};
pub use matrix::{DistCsr, DistOptions};
/// The rsmpi crate this one is built on (initialise MPI and make communicators with it).
pub use mpi;
pub use partition::RowPartition;
pub use report::{CommReport, Traffic};
pub use spgemm::{spgemm, spgemm_with};
pub use summa::{spgemm_summa, spgemm_summa_with, Dist2dCsr, Grid};
pub use wire::MpiScalar;
