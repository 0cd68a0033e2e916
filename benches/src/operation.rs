//! The measured operations, their flop counts, and one run of each on a backend.

use std::fmt;

use hetsparse_core::SpgemmAlgorithm;
use hetsparse_core::{Backend, Error, Operation, Result, ScalarType, SparseFormat, SparseRef};

use crate::cases::{Operands, SPMM_COLUMNS};

/// What one benchmark row measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Measured {
    /// CSR × CSR with an algorithm.
    Spgemm(SpgemmAlgorithm),
    /// CSR × dense with [`SPMM_COLUMNS`] row-major columns.
    Spmm,
    /// CSR × vector.
    Spmv,
}

impl Measured {
    /// The operation's label in result files and tables: `spgemm`, `spmm32` or `spmv`. Peers
    /// use the same labels.
    pub fn label(self) -> &'static str {
        match self {
            Measured::Spgemm(_) => "spgemm",
            Measured::Spmm => "spmm32",
            Measured::Spmv => "spmv",
        }
    }

    /// The SpGEMM algorithm, where one was chosen other than the backend's default.
    pub fn variant(self) -> Option<SpgemmAlgorithm> {
        match self {
            Measured::Spgemm(SpgemmAlgorithm::Auto) | Measured::Spmm | Measured::Spmv => None,
            Measured::Spgemm(a) => Some(a),
        }
    }

    /// The name of `backend` running this, as results list it: the backend's name, followed by
    /// `:Algorithm` for an explicitly chosen SpGEMM algorithm (e.g. `cpu:RowRow`).
    pub fn implementation(self, backend: &str) -> String {
        match self.variant() {
            Some(a) => format!("{backend}:{a:?}"),
            None => backend.to_string(),
        }
    }

    /// Floating-point operations as the papers count them: two per intermediate product
    /// (`nnz(A) · 32` for SpMM, `nnz(A)` for SpMV).
    pub fn flops(self, operands: &Operands) -> u64 {
        let products = match self {
            Measured::Spgemm(_) => operands.products,
            Measured::Spmm => operands.a.nnz().saturating_mul(SPMM_COLUMNS as u64),
            Measured::Spmv => operands.a.nnz(),
        };
        products.saturating_mul(2)
    }

    /// Runs once and returns the size of the result: entries of C for SpGEMM, elements for
    /// SpMM and SpMV.
    pub fn run(self, backend: &dyn Backend<f64>, operands: &Operands) -> Result<u64> {
        match self {
            Measured::Spgemm(algorithm) => {
                let c = backend.spgemm(&operands.a, &operands.b, algorithm)?;
                Ok(c.nnz())
            }
            Measured::Spmm => {
                let c = backend.spmm(SparseRef::Csr(&operands.a), &operands.dense)?;
                Ok(c.data().len() as u64)
            }
            Measured::Spmv => {
                let y = backend.spmv(SparseRef::Csr(&operands.a), &operands.vector)?;
                Ok(y.len() as u64)
            }
        }
    }

    /// Runs once and checks the result's size against what the operands imply (SpGEMM: the
    /// symbolic nnz of the analysis), so that a wrong kernel cannot post a good time.
    pub fn run_checked(self, backend: &dyn Backend<f64>, operands: &Operands) -> Result<()> {
        let expected = match self {
            Measured::Spgemm(_) => operands.product_nnz,
            Measured::Spmm => (operands.a.nrows() * SPMM_COLUMNS) as u64,
            Measured::Spmv => operands.a.nrows() as u64,
        };
        let found = self.run(backend, operands)?;
        if found != expected {
            return Err(Error::InvalidArgument(format!(
                "{} on {}: result has {found} entries, the analysis says {expected}",
                self.implementation(&backend.info().backend),
                operands.case.stem()
            )));
        }
        Ok(())
    }
}

impl fmt::Display for Measured {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.variant() {
            Some(a) => write!(f, "{}:{a:?}", self.label()),
            None => f.write_str(self.label()),
        }
    }
}

/// What to measure on `backend`: SpGEMM with every algorithm it lists for f64 (its default,
/// [`SpgemmAlgorithm::Auto`], first), then CSR SpMM and SpMV where it lists them.
pub fn measured_operations(backend: &dyn Backend<f64>) -> Vec<Measured> {
    let caps = backend.capabilities();
    let mut ops: Vec<Measured> = SpgemmAlgorithm::ALL
        .iter()
        .filter(|&&a| caps.supports(Operation::Spgemm(a), ScalarType::F64))
        .map(|&a| Measured::Spgemm(a))
        .collect();
    if caps.supports(Operation::Spmm(SparseFormat::Csr), ScalarType::F64) {
        ops.push(Measured::Spmm);
    }
    if caps.supports(Operation::Spmv(SparseFormat::Csr), ScalarType::F64) {
        ops.push(Measured::Spmv);
    }
    ops
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cases::Case;
    use hetsparse_core::generate::MatrixClass;
    use hetsparse_core::ReferenceBackend;

    fn small() -> Operands {
        Case {
            class: MatrixClass::Uniform,
            size: 300,
        }
        .generate()
        .unwrap()
    }

    #[test]
    fn flops_count_two_per_product() {
        let ops = small();
        assert_eq!(Measured::Spmv.flops(&ops), 2 * 300 * 8);
        assert_eq!(Measured::Spmm.flops(&ops), 2 * 300 * 8 * 32);
        assert_eq!(
            Measured::Spgemm(SpgemmAlgorithm::Auto).flops(&ops),
            2 * 300 * 64
        );
    }

    #[test]
    fn reference_backend_runs_every_listed_operation() {
        let ops = small();
        let listed = measured_operations(&ReferenceBackend);
        assert_eq!(
            listed,
            vec![
                Measured::Spgemm(SpgemmAlgorithm::Auto),
                Measured::Spgemm(SpgemmAlgorithm::RowRow),
                Measured::Spmm,
                Measured::Spmv
            ]
        );
        for op in listed {
            op.run_checked(&ReferenceBackend, &ops).unwrap();
        }
    }

    #[test]
    fn names() {
        let rr = Measured::Spgemm(SpgemmAlgorithm::RowRow);
        assert_eq!(rr.implementation("cpu"), "cpu:RowRow");
        assert_eq!(
            Measured::Spgemm(SpgemmAlgorithm::Auto).implementation("cpu"),
            "cpu"
        );
        assert_eq!(rr.to_string(), "spgemm:RowRow");
        assert_eq!(Measured::Spmm.to_string(), "spmm32");
    }

    #[test]
    fn a_wrong_result_size_is_reported() {
        let mut ops = small();
        ops.product_nnz += 1;
        let e = Measured::Spgemm(SpgemmAlgorithm::Auto)
            .run_checked(&ReferenceBackend, &ops)
            .unwrap_err();
        assert!(e.to_string().contains("the analysis says"), "{e}");
    }
}
