//! The measured operations, their flop counts, one run of each on a backend, and the check of
//! its result.

use std::fmt;

use hetsparse_core::SpgemmAlgorithm;
use hetsparse_core::{Backend, Bsr, Csr, Dense, Dia, Error, Operation, Result};
use hetsparse_core::{ScalarType, SparseFormat};

use crate::cases::{Operands, SPMM_COLUMNS};

/// What one benchmark row measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Measured {
    /// CSR × CSR with an algorithm.
    Spgemm(SpgemmAlgorithm),
    /// DIA × DIA (square band-like classes).
    DiaSpgemm,
    /// BSR × BSR (classes with blocks).
    BsrSpgemm,
    /// Sparse (in a format) × dense with [`SPMM_COLUMNS`] row-major columns.
    Spmm(SparseFormat),
    /// Sparse (in a format) × vector.
    Spmv(SparseFormat),
}

/// The result of one run.
#[derive(Clone, Debug)]
pub enum Output {
    /// CSR SpGEMM.
    Csr(Csr<f64>),
    /// DIA SpGEMM.
    Dia(Dia<f64>),
    /// BSR SpGEMM.
    Bsr(Bsr<f64>),
    /// SpMM.
    Dense(Dense<f64>),
    /// SpMV.
    Vector(Vec<f64>),
}

impl Measured {
    /// The operation's label in result files and tables: `spgemm`, `spmm32` or `spmv`. Peers
    /// use the same labels.
    pub fn label(self) -> &'static str {
        match self {
            Measured::Spgemm(_) | Measured::DiaSpgemm | Measured::BsrSpgemm => "spgemm",
            Measured::Spmm(_) => "spmm32",
            Measured::Spmv(_) => "spmv",
        }
    }

    /// What distinguishes this from the backend's default way to run the operation (CSR
    /// operands, [`SpgemmAlgorithm::Auto`]): an algorithm (`RowRow`) or a format (`Ellr`).
    pub fn variant(self) -> Option<String> {
        match self {
            Measured::Spgemm(SpgemmAlgorithm::Auto)
            | Measured::Spmm(SparseFormat::Csr)
            | Measured::Spmv(SparseFormat::Csr) => None,
            Measured::Spgemm(a) => Some(format!("{a:?}")),
            Measured::DiaSpgemm => Some("Dia".into()),
            Measured::BsrSpgemm => Some("Bsr".into()),
            Measured::Spmm(f) | Measured::Spmv(f) => Some(format!("{f:?}")),
        }
    }

    /// The name of `backend` running this, as results list it: the backend's name, followed by
    /// `:Variant` for a chosen algorithm or format (e.g. `cpu:RowRow`, `cpu:Ellr`).
    pub fn implementation(self, backend: &str) -> String {
        match self.variant() {
            Some(v) => format!("{backend}:{v}"),
            None => backend.to_string(),
        }
    }

    /// Floating-point operations as the papers count them: two per intermediate product of
    /// the CSR structure (`nnz(A) · 32` for SpMM, `nnz(A)` for SpMV), whatever the format, so
    /// that padding a format stores counts as overhead, not as work.
    pub fn flops(self, operands: &Operands) -> u64 {
        let products = match self {
            Measured::Spgemm(_) | Measured::DiaSpgemm | Measured::BsrSpgemm => operands.products,
            Measured::Spmm(_) => operands.a.nnz().saturating_mul(SPMM_COLUMNS as u64),
            Measured::Spmv(_) => operands.a.nnz(),
        };
        products.saturating_mul(2)
    }

    /// Runs once.
    pub fn run(self, backend: &dyn Backend<f64>, operands: &Operands) -> Result<Output> {
        let missing = || {
            Error::InvalidArgument(format!(
                "{self}: {} has no operand in this format",
                operands.stem()
            ))
        };
        let f = &operands.formats;
        Ok(match self {
            Measured::Spgemm(algorithm) => {
                Output::Csr(backend.spgemm(&operands.a, &operands.b, algorithm)?)
            }
            Measured::DiaSpgemm => {
                let a = f.dia.as_ref().ok_or_else(missing)?;
                Output::Dia(backend.dia_spgemm(a, a)?)
            }
            Measured::BsrSpgemm => {
                let a = f.bsr.as_ref().ok_or_else(missing)?;
                Output::Bsr(backend.bsr_spgemm(a, a)?)
            }
            Measured::Spmm(format) => {
                let a = operands.a_as(format).ok_or_else(missing)?;
                Output::Dense(backend.spmm(a, &operands.dense)?)
            }
            Measured::Spmv(format) => {
                let a = operands.a_as(format).ok_or_else(missing)?;
                Output::Vector(backend.spmv(a, &operands.vector)?)
            }
        })
    }

    /// Runs once and checks the result, so that a wrong kernel cannot post a good time: CSR
    /// SpGEMM must have the analysis's nnz; DIA and BSR SpGEMM, SpMM and SpMV must match the
    /// serial reference (values to a relative 1e-9).
    pub fn run_checked(self, backend: &dyn Backend<f64>, operands: &Operands) -> Result<()> {
        let output = self.run(backend, operands)?;
        let problem = match (&output, self) {
            (Output::Csr(c), _) => (c.nnz() != operands.product_nnz).then(|| {
                format!(
                    "result has {} entries, the analysis says {}",
                    c.nnz(),
                    operands.product_nnz
                )
            }),
            (Output::Dia(c), _) => differences(&c.to_csr()?, operands.expected_product()?),
            (Output::Bsr(c), _) => differences(&c.to_csr()?, operands.expected_product()?),
            (Output::Dense(c), _) => {
                let want = operands.expected_spmm()?;
                (c.shape() != want.shape())
                    .then(|| format!("result is {:?}, expected {:?}", c.shape(), want.shape()))
                    .or_else(|| {
                        let got = c.to_layout(want.layout());
                        first_mismatch(got.data(), want.data())
                    })
            }
            (Output::Vector(y), _) => first_mismatch(y, operands.expected_spmv()?),
        };
        match problem {
            None => Ok(()),
            Some(p) => Err(Error::InvalidArgument(format!(
                "{} on {}: wrong result: {p}",
                self.implementation(backend.info().backend.name()),
                operands.stem()
            ))),
        }
    }
}

fn close(x: f64, y: f64) -> bool {
    (x - y).abs() <= 1e-9 * (1.0 + y.abs())
}

fn first_mismatch(got: &[f64], want: &[f64]) -> Option<String> {
    if got.len() != want.len() {
        return Some(format!("{} values, expected {}", got.len(), want.len()));
    }
    let k = got.iter().zip(want).position(|(&g, &w)| !close(g, w))?;
    Some(format!("value {k} is {}, expected {}", got[k], want[k]))
}

/// The first entry where two products differ, reading a missing entry as zero (formats that
/// pad, such as DIA, may store zeros the CSR product lacks, and the other way round).
fn differences(got: &Csr<f64>, want: &Csr<f64>) -> Option<String> {
    if got.shape() != want.shape() {
        return Some(format!(
            "shape {:?}, expected {:?}",
            got.shape(),
            want.shape()
        ));
    }
    for i in 0..want.nrows() {
        let (gc, gv) = got.row(i);
        let (wc, wv) = want.row(i);
        let (mut p, mut q) = (0, 0);
        loop {
            let (col, g, w) = match (gc.get(p), wc.get(q)) {
                (None, None) => break,
                (Some(&a), Some(&b)) if a == b => {
                    p += 1;
                    q += 1;
                    (a, gv[p - 1], wv[q - 1])
                }
                (Some(&a), Some(&b)) if a < b => {
                    p += 1;
                    (a, gv[p - 1], 0.0)
                }
                (Some(&a), None) => {
                    p += 1;
                    (a, gv[p - 1], 0.0)
                }
                (_, Some(&b)) => {
                    q += 1;
                    (b, 0.0, wv[q - 1])
                }
            };
            if !close(g, w) {
                return Some(format!("entry ({i}, {col}) is {g}, expected {w}"));
            }
        }
    }
    None
}

impl fmt::Display for Measured {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.variant() {
            Some(v) => write!(f, "{}:{v}", self.label()),
            None => f.write_str(self.label()),
        }
    }
}

/// Formats of SpMV and SpMM operands, in table order (CSR, the default, first; CSC is left
/// out: no paper's kernel takes it).
const FORMATS: [SparseFormat; 6] = [
    SparseFormat::Csr,
    SparseFormat::Coo,
    SparseFormat::Ellr,
    SparseFormat::Cspr,
    SparseFormat::Dia,
    SparseFormat::Bsr,
];

/// What to measure on `backend` for these operands: SpGEMM with every algorithm it lists for
/// f64 (its default, [`SpgemmAlgorithm::Auto`], first), DIA×DIA and BSR×BSR where it lists
/// them and the case has such operands, then SpMM and SpMV in every format it lists and the
/// case has.
pub fn measured_operations(backend: &dyn Backend<f64>, operands: &Operands) -> Vec<Measured> {
    let caps = backend.capabilities();
    let listed = |op: Operation| caps.supports(op, ScalarType::F64);
    let mut ops: Vec<Measured> = SpgemmAlgorithm::ALL
        .iter()
        .filter(|&&a| listed(Operation::Spgemm(a)))
        .map(|&a| Measured::Spgemm(a))
        .collect();
    let f = &operands.formats;
    if operands.square && f.dia.is_some() && listed(Operation::DiaSpgemm) {
        ops.push(Measured::DiaSpgemm);
    }
    if operands.square && f.bsr.is_some() && listed(Operation::BsrSpgemm) {
        ops.push(Measured::BsrSpgemm);
    }
    for (wrap, op) in [
        (
            Measured::Spmm as fn(SparseFormat) -> Measured,
            Operation::Spmm as fn(_) -> _,
        ),
        (Measured::Spmv, Operation::Spmv),
    ] {
        ops.extend(
            FORMATS
                .iter()
                .filter(|&&format| listed(op(format)) && operands.a_as(format).is_some())
                .map(|&format| wrap(format)),
        );
    }
    ops
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cases::Case;
    use hetsparse_core::generate::MatrixClass;
    use hetsparse_core::ReferenceBackend;

    fn operands(class: MatrixClass, size: usize) -> Operands {
        Case { class, size }.generate().unwrap()
    }

    #[test]
    fn flops_count_two_per_product() {
        let ops = operands(MatrixClass::Uniform, 300);
        assert_eq!(Measured::Spmv(SparseFormat::Csr).flops(&ops), 2 * 300 * 8);
        assert_eq!(
            Measured::Spmm(SparseFormat::Ellr).flops(&ops),
            2 * 300 * 8 * 32
        );
        assert_eq!(
            Measured::Spgemm(SpgemmAlgorithm::Auto).flops(&ops),
            2 * 300 * 64
        );
    }

    #[test]
    fn reference_backend_runs_every_listed_operation() {
        // The stencil class has DIA and BSR forms, so every kind of operation appears.
        let ops = operands(MatrixClass::Stencil3d, 400);
        let listed = measured_operations(&ReferenceBackend, &ops);
        for expected in [
            Measured::Spgemm(SpgemmAlgorithm::Auto),
            Measured::Spgemm(SpgemmAlgorithm::RowRow),
            Measured::DiaSpgemm,
            Measured::BsrSpgemm,
            Measured::Spmm(SparseFormat::Csr),
            Measured::Spmv(SparseFormat::Bsr),
            Measured::Spmv(SparseFormat::Ellr),
        ] {
            assert!(
                listed.contains(&expected),
                "{expected} missing from {listed:?}"
            );
        }
        assert_eq!(listed[0], Measured::Spgemm(SpgemmAlgorithm::Auto));
        for op in listed {
            op.run_checked(&ReferenceBackend, &ops).unwrap();
        }
    }

    #[test]
    fn unsuitable_formats_are_not_measured() {
        // Scattered rows have no compact DIA form, and no class but the stencil and dense
        // ones has blocks.
        let ops = operands(MatrixClass::Uniform, 300_000);
        let listed = measured_operations(&ReferenceBackend, &ops);
        assert!(
            !listed.contains(&Measured::Spmv(SparseFormat::Dia)),
            "{listed:?}"
        );
        assert!(!listed.contains(&Measured::Spmv(SparseFormat::Bsr)));
        assert!(!listed.contains(&Measured::DiaSpgemm));
        assert!(listed.contains(&Measured::Spmv(SparseFormat::Ellr)));
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
        assert_eq!(Measured::Spmm(SparseFormat::Csr).to_string(), "spmm32");
        assert_eq!(Measured::Spmv(SparseFormat::Ellr).to_string(), "spmv:Ellr");
        assert_eq!(Measured::DiaSpgemm.implementation("cuda"), "cuda:Dia");
    }

    #[test]
    fn a_wrong_result_is_reported() {
        let mut ops = operands(MatrixClass::Banded, 300);
        ops.product_nnz += 1;
        let e = Measured::Spgemm(SpgemmAlgorithm::Auto)
            .run_checked(&ReferenceBackend, &ops)
            .unwrap_err();
        assert!(e.to_string().contains("the analysis says"), "{e}");
        // A vector operand that no longer matches A's CSR form: the ELLPACK-R copy is stale.
        let mut ops = operands(MatrixClass::Banded, 300);
        ops.a.values_mut()[0] += 1.0;
        let e = Measured::Spmv(SparseFormat::Ellr)
            .run_checked(&ReferenceBackend, &ops)
            .unwrap_err();
        assert!(e.to_string().contains("wrong result: value 0"), "{e}");
        let e = Measured::DiaSpgemm
            .run_checked(&ReferenceBackend, &ops)
            .unwrap_err();
        assert!(e.to_string().contains("wrong result: entry (0, 0)"), "{e}");
    }

    #[test]
    fn differences_read_missing_entries_as_zero() {
        let a = Csr::try_new(1, 3, vec![0, 2], vec![0, 2], vec![1.0, 0.0]).unwrap();
        let b = Csr::try_new(1, 3, vec![0, 2], vec![0, 1], vec![1.0, 0.0]).unwrap();
        assert_eq!(differences(&a, &b), None);
        let c = Csr::try_new(1, 3, vec![0, 1], vec![1], vec![2.0]).unwrap();
        assert_eq!(
            differences(&a, &c).as_deref(),
            Some("entry (0, 0) is 1, expected 0")
        );
    }
}
