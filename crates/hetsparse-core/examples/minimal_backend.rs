//! A backend in the seven required methods: the serial reference kernels behind `Device` and
//! `Backend<T>`, computing in host memory. Its operations receive operands the public methods
//! have validated (shapes, memory, capabilities). Everything else (resident matrices, plans, the chunk
//! protocol the scheduler drives, DIA and BSR products) comes from the provided methods, and
//! the backend passes the whole conformance suite (`tests/conformance.rs` runs it).
//! docs/backend-guide.md walks through it.
//!
//! ```text
//! cargo run -p hetsparse-core --example minimal_backend
//! ```

use hetsparse_core::backend::{assemble_chunks, host_operands};
use hetsparse_core::format::SparseFormat;
use hetsparse_core::reference;
use hetsparse_core::{
    Backend, BackendKind, Capabilities, Csr, CsrOperand, CsrWindow, Dense, DenseOperand, Device,
    DeviceInfo, DeviceKind, MemorySpace, Operation, PlusTimes, ProductChunk, Residency, Result,
    RunControl, Scalar, ScalarType, SparseOperand, SpgemmAlgorithm, SpgemmOptions, SpmmOptions,
    SpmvOptions, Validated, VectorOperand,
};

/// Rows of A per block of SpGEMM: the serial kernel looks at the run between blocks.
const ROWS_PER_BLOCK: usize = 256;

/// The reference kernels as a backend of its own.
pub struct MinimalBackend {
    /// Computed once: operations check it on every call.
    capabilities: Capabilities,
}

impl MinimalBackend {
    /// Every operation on every scalar type (the reference kernels run them all).
    pub fn new() -> Result<Self> {
        let mut ops = vec![
            Operation::Spgemm(SpgemmAlgorithm::Auto),
            Operation::Spgemm(SpgemmAlgorithm::RowRow),
            Operation::DiaSpgemm,
            Operation::BsrSpgemm,
        ];
        ops.extend(SparseFormat::ALL.map(Operation::Spmv));
        ops.extend(SparseFormat::ALL.map(Operation::Spmm));
        Ok(Self {
            capabilities: Capabilities::new().with_all(&ops, &ScalarType::ALL),
        })
    }
}

impl Device for MinimalBackend {
    fn info(&self) -> DeviceInfo {
        DeviceInfo {
            backend: BackendKind::Other("minimal"),
            name: "reference kernels, one thread".into(),
            kind: DeviceKind::Cpu,
            memory_bytes: hetsparse_core::host_memory_bytes(),
            compute_units: 1,
        }
    }

    fn capabilities(&self) -> &Capabilities {
        &self.capabilities
    }

    fn memory_space(&self) -> MemorySpace {
        MemorySpace::Host
    }
}

impl<T: Scalar> Backend<T> for MinimalBackend {
    fn spgemm_checked(
        &self,
        a: CsrOperand<'_, T>,
        b: CsrOperand<'_, T>,
        _options: &SpgemmOptions,
        run: &RunControl,
        _checked: Validated,
    ) -> Result<Csr<T>> {
        // Checked above this method: shapes chain, the options are the plain ones the
        // capabilities claim, and handles are of host memory, so each holds a host matrix.
        let (a, b) = (host_operands::csr(self, a)?, host_operands::csr(self, b)?);
        run.checkpoint()?;
        // Progress is counted in intermediate products; a watcher told of the plan may cancel.
        let products = run.plan_product(a, b)?;
        run.checkpoint()?;
        // Blocks of A's rows, so that a cancel from another thread stops the run between two
        // of them; their products laid side by side make C.
        let mut tiles = Vec::new();
        for start in (0..a.nrows()).step_by(ROWS_PER_BLOCK) {
            run.checkpoint()?;
            let rows = start..(start + ROWS_PER_BLOCK).min(a.nrows());
            let block = CsrWindow::rows_of(a, rows.clone())?;
            let tile = reference::spgemm_windows::<T, PlusTimes>(&block, &CsrWindow::whole(b))?;
            let cols = 0..b.ncols();
            tiles.push((ProductChunk { rows, cols }, tile));
        }
        run.add_done(products);
        assemble_chunks(a.nrows(), b.ncols(), tiles)
    }

    fn spmm_checked(
        &self,
        a: SparseOperand<'_, T>,
        b: DenseOperand<'_, T>,
        _options: &SpmmOptions,
        run: &RunControl,
        _checked: Validated,
    ) -> Result<Dense<T>> {
        let (a, b) = (
            host_operands::sparse(self, a)?,
            host_operands::dense(self, b)?,
        );
        run.checkpoint()?;
        reference::spmm::<T, PlusTimes>(&*a.to_csr()?, b)
    }

    fn spmv_checked(
        &self,
        a: SparseOperand<'_, T>,
        x: VectorOperand<'_, T>,
        _options: &SpmvOptions,
        run: &RunControl,
        _checked: Validated,
    ) -> Result<Vec<T>> {
        let (a, x) = (
            host_operands::sparse(self, a)?,
            host_operands::vector(self, x)?,
        );
        run.checkpoint()?;
        reference::spmv::<T, PlusTimes>(&*a.to_csr()?, x)
    }

    /// Handles hold host matrices; resident products and plans go through the operations
    /// above.
    fn residency(&self) -> Residency<'_, T> {
        Residency::Host
    }
}

#[allow(dead_code)] // The conformance test includes this file for the backend alone.
fn main() -> Result<()> {
    let backend = MinimalBackend::new()?;
    let a = hetsparse_core::generate::uniform::<f64>(1000, 1000, 8, 1);
    // A chain with the intermediate left resident, then a plan executed with new values.
    let a_res = backend.upload(&a)?;
    let run = RunControl::new();
    let aa = backend.spgemm_resident(
        (&a_res).into(),
        (&a_res).into(),
        &SpgemmOptions::new(),
        &run,
    )?;
    let plan = backend.plan_spgemm((&aa).into(), (&a_res).into(), &SpgemmOptions::new())?;
    let aaa = backend.execute_spgemm(&plan, (&aa).into(), (&a_res).into(), &run)?;
    let c = backend.download(&aaa)?;
    println!(
        "A·A·A: {}×{} with {} entries from {} intermediate products",
        c.nrows(),
        c.ncols(),
        c.nnz(),
        run.progress().done
    );
    Ok(())
}
