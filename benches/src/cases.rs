//! The benchmark set: one generated instance of every matrix class, at a full and a quick size.
//!
//! Full sizes are chosen so that one SpGEMM on the 2-core development machine takes between
//! 20 ms and 5 s with a parallel CPU backend; quick sizes make a smoke run finish in seconds.
//! Every instance is a pure function of its class, size and [`SEED`], so the matrices that
//! `cargo xtask bench` writes for the peers are the ones the criterion benches generate.

use std::fmt;
use std::path::Path;
use std::str::FromStr;
use std::sync::OnceLock;

use hetsparse_core::generate::{self, MatrixClass};
use hetsparse_core::{analysis, reference, PlusTimes};
use hetsparse_core::{
    Bsr, Coo, Cspr, Csr, Dense, Dia, Ellr, Layout, Result, SparseFormat, SparseRef,
};

/// Seed of every generated operand.
pub const SEED: u64 = 2026;

/// Dense columns of the SpMM operand (issue 3: "SpMM with 32 dense columns").
pub const SPMM_COLUMNS: usize = 32;

/// Which sizes to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scale {
    /// Sizes for reported numbers.
    Full,
    /// Small sizes for a smoke run.
    Quick,
}

impl Scale {
    /// Lowercase name, used as the cache folder of the exported matrices.
    pub fn name(self) -> &'static str {
        match self {
            Scale::Full => "full",
            Scale::Quick => "quick",
        }
    }

    /// Quick when the environment variable `HETSPARSE_BENCH_QUICK` is set to anything but
    /// `0` or the empty string (the switch `cargo bench` passes to the criterion benches).
    pub fn from_env() -> Scale {
        match std::env::var("HETSPARSE_BENCH_QUICK") {
            Ok(v) if !v.is_empty() && v != "0" => Scale::Quick,
            _ => Scale::Full,
        }
    }
}

impl fmt::Display for Scale {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One benchmark instance: a matrix class at a size (the `size` of
/// [`generate::product_operands`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Case {
    /// The structure.
    pub class: MatrixClass,
    /// About how many rows A has (see [`generate::product_operands`] for each class's shape).
    pub size: usize,
}

impl Case {
    /// File stem of the exported operands: class and size, e.g. `stencil3d-15000`.
    pub fn stem(&self) -> String {
        format!("{}-{}", self.class.name(), self.size)
    }

    /// Generates the operands and measures the product.
    pub fn generate(&self) -> Result<Operands> {
        let (a, b) = generate::product_operands::<f64>(self.class, self.size, SEED);
        let products = analysis::total_products(&a, &b)?;
        let product_nnz = analysis::symbolic_row_nnz(&a, &b)?.iter().sum();
        let dense = spmm_operand(a.ncols())?;
        let vector = spmv_operand(a.ncols());
        let formats = Formats::new(&a, self.block_shape());
        let square = a == b;
        Ok(Operands {
            name: self.class.name().to_string(),
            case: Some(*self),
            a,
            b,
            square,
            formats,
            dense,
            vector,
            products,
            product_nnz,
            expected: Expected::default(),
        })
    }

    /// The BSR block shape of the classes whose structure has blocks: the stencil's 3 unknowns
    /// per node, and the dense matrix.
    pub fn block_shape(&self) -> Option<(usize, usize)> {
        match self.class {
            MatrixClass::Stencil3d => Some((3, 3)),
            MatrixClass::Dense => Some((8, 8)),
            _ => None,
        }
    }
}

/// Largest padded ELLPACK-R or DIA copy of A the benches build: a format that needs more for
/// a class (ELLPACK-R of the skewed class's full rows, DIA of a scattered graph) does not suit
/// it and is not measured.
pub const MAX_PADDED_BYTES: u64 = 512 << 20;

/// A in the other formats SpMV and SpMM take, where the format suits the matrix.
#[derive(Clone, Debug)]
pub struct Formats {
    /// COO.
    pub coo: Coo<f64>,
    /// CSPR.
    pub cspr: Cspr<f64>,
    /// ELLPACK-R, unless its padding exceeds [`MAX_PADDED_BYTES`].
    pub ellr: Option<Ellr<f64>>,
    /// DIA, unless its diagonals exceed [`MAX_PADDED_BYTES`].
    pub dia: Option<Dia<f64>>,
    /// BSR, for classes with a [`Case::block_shape`].
    pub bsr: Option<Bsr<f64>>,
}

impl Formats {
    fn new(a: &Csr<f64>, block_shape: Option<(usize, usize)>) -> Formats {
        Formats {
            coo: a.to_coo(),
            cspr: Cspr::from_csr(a),
            ellr: Ellr::from_csr(a, MAX_PADDED_BYTES).ok(),
            dia: Dia::from_csr(a, MAX_PADDED_BYTES).ok(),
            bsr: block_shape.and_then(|s| Bsr::from_csr(a, s).ok()),
        }
    }
}

impl Operands {
    /// Operands of a real matrix, as the papers multiply them: `A · A` for a square A,
    /// `A · Aᵀ` for a rectangular one; `name` labels its results.
    pub fn from_matrix(name: &str, a: Csr<f64>) -> Result<Operands> {
        let square = a.nrows() == a.ncols();
        let b = if square { a.clone() } else { a.transpose()? };
        let products = analysis::total_products(&a, &b)?;
        let product_nnz = analysis::symbolic_row_nnz(&a, &b)?.iter().sum();
        let dense = spmm_operand(a.ncols())?;
        let vector = spmv_operand(a.ncols());
        let formats = Formats::new(&a, None);
        Ok(Operands {
            name: name.to_string(),
            case: None,
            a,
            b,
            square,
            formats,
            dense,
            vector,
            products,
            product_nnz,
            expected: Expected::default(),
        })
    }

    /// Operands of a Matrix Market file, named by its stem, multiplied as [`from_matrix`]
    /// does: what `hetsparse-bench time --matrix` times and `export --matrix` lists for the
    /// peers, so both sides of a ratio get the same names and counts.
    ///
    /// [`from_matrix`]: Operands::from_matrix
    pub fn from_file(path: &Path) -> Result<Operands> {
        let name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .filter(|s| !s.is_empty())
            .ok_or_else(|| {
                hetsparse_core::Error::InvalidArgument(format!(
                    "matrix file {} has no name",
                    path.display()
                ))
            })?;
        let a = hetsparse_core::matrix_market::read_csr_path::<f64>(path)?;
        Operands::from_matrix(&name, a)
    }

    /// File stem of the operands: the case's ([`Case::stem`]) or the matrix's name.
    pub fn stem(&self) -> String {
        self.case.map_or_else(|| self.name.clone(), |c| c.stem())
    }

    /// `A · B` by the serial reference.
    pub fn expected_product(&self) -> Result<&Csr<f64>> {
        cached(&self.expected.product, || {
            reference::spgemm::<f64, PlusTimes>(&self.a, &self.b)
        })
    }

    /// `A · dense` by the serial reference.
    pub fn expected_spmm(&self) -> Result<&Dense<f64>> {
        cached(&self.expected.spmm, || {
            reference::spmm::<f64, PlusTimes>(&self.a, &self.dense)
        })
    }

    /// `A · vector` by the serial reference.
    pub fn expected_spmv(&self) -> Result<&Vec<f64>> {
        cached(&self.expected.spmv, || {
            reference::spmv::<f64, PlusTimes>(&self.a, &self.vector)
        })
    }

    /// A in `format`, where it was built (CSR always).
    pub fn a_as(&self, format: SparseFormat) -> Option<SparseRef<'_, f64>> {
        let f = &self.formats;
        match format {
            SparseFormat::Csr => Some(SparseRef::Csr(&self.a)),
            SparseFormat::Coo => Some(SparseRef::Coo(&f.coo)),
            SparseFormat::Cspr => Some(SparseRef::Cspr(&f.cspr)),
            SparseFormat::Ellr => f.ellr.as_ref().map(SparseRef::Ellr),
            SparseFormat::Dia => f.dia.as_ref().map(SparseRef::Dia),
            SparseFormat::Bsr => f.bsr.as_ref().map(SparseRef::Bsr),
            SparseFormat::Csc => None,
        }
    }
}

/// Every class at the given scale, in [`MatrixClass::ALL`]'s order.
pub fn cases(scale: Scale) -> Vec<Case> {
    MatrixClass::ALL
        .iter()
        .map(|&class| Case {
            class,
            size: size(class, scale),
        })
        .collect()
}

/// The `size` argument of each class. The full sizes put each product at 26–135 million
/// intermediate products (the dense class is capped at 512 by the generator: 134 million);
/// `hetsparse-bench list` prints the resulting shapes and counts. Products whose entries
/// scatter over a wide result cost most per product, so two classes are smaller than the
/// rest: power-law at scale 15 (at 16, 123 million products and 67 million entries took MKL
/// over 5 s on 2 cores) and LP at 500 000 columns (at a million, A·Aᵀ took MKL 6.5 s).
fn size(class: MatrixClass, scale: Scale) -> usize {
    let full = match class {
        MatrixClass::Stencil3d => 15_000,
        MatrixClass::Banded => 1_000_000,
        MatrixClass::PowerLaw => 1 << 15,
        MatrixClass::Uniform => 1_000_000,
        MatrixClass::Road => 4_000_000,
        MatrixClass::Skewed => 150_000,
        MatrixClass::LpRectangular => 500_000,
        MatrixClass::Dense => 512,
    };
    match scale {
        Scale::Full => full,
        // A 20th of the rows (the dense class a third of its side): products shrink by 20 or
        // more, except for the power-law class, whose products grow faster than its rows.
        Scale::Quick => match class {
            MatrixClass::Dense => full / 3,
            MatrixClass::PowerLaw => full / 16,
            _ => full / 20,
        },
    }
}

/// Every class at the sizes of GPU measurements: each product at 10^8–10^9 intermediate
/// products (the dense class stays at the generator's cap of 512), the scale at which a GPU's
/// kernels, not the cost of launching them, decide its time.
pub fn gpu_cases() -> Vec<Case> {
    MatrixClass::ALL
        .iter()
        .map(|&class| Case {
            class,
            size: match class {
                MatrixClass::Stencil3d => 150_000,
                MatrixClass::Banded => 4_000_000,
                MatrixClass::PowerLaw => 1 << 17,
                MatrixClass::Uniform => 4_000_000,
                MatrixClass::Road => 16_000_000,
                MatrixClass::Skewed => 500_000,
                MatrixClass::LpRectangular => 2_000_000,
                MatrixClass::Dense => 512,
            },
        })
        .collect()
}

/// The scalar 27-point stencil among the GPU operands: the classic FEM-like SpGEMM matrix
/// (the `stencil3d` class has 3 unknowns a node, like elasticity), at 10^6 rows.
pub const SCALAR_STENCIL: &str = "stencil27";

/// What the GPU tables run: every class at its [`gpu_cases`] size, then [`SCALAR_STENCIL`].
pub fn gpu_operand_names() -> Vec<&'static str> {
    let mut names: Vec<&'static str> = gpu_cases().iter().map(|c| c.class.name()).collect();
    names.push(SCALAR_STENCIL);
    names
}

/// Output-heavy products at GPU sizes, nearly every intermediate product a distinct entry of
/// C: `uniform12`, 4·10^6 rows of 12 random columns (5.8·10^8 entries of C), and `hubs`, 2·10^6
/// rows of 20 random columns with 64 hub rows and 64 hub columns of 3000 entries each
/// ([`hub_matrix`], 8·10^8 entries of C). There the symbolic phase and C's allocation weigh as
/// much as the numeric phase, which the classes above do not show.
pub fn output_heavy_names() -> Vec<&'static str> {
    vec!["uniform12", "hubs"]
}

/// Hub rows and columns of [`hub_matrix`] in the `hubs` operands.
const HUBS: usize = 64;
/// Entries of each hub row and hub column of the `hubs` operands.
const HUB_DEGREE: usize = 3000;

/// An `n × n` matrix of `per_row` uniformly random columns a row, in which `hubs` rows at
/// random positions hold `degree` random columns instead, and `hubs` other random columns are
/// held by `degree` random rows each (on top of their own): the hub rows and columns of a
/// circuit or a social graph, of thousands of entries rather than the nearly full ones of
/// the `skewed` class. Values in [0.5, 1.5).
pub fn hub_matrix(n: usize, per_row: usize, hubs: usize, degree: usize, seed: u64) -> Csr<f64> {
    let n = n.max(1);
    let background = generate::uniform::<f64>(n, n, per_row, seed);
    let mut state = seed ^ 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        // splitmix64
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let hubs = hubs.min(n / 2);
    let degree = degree.min(n);
    // Distinct positions: the first `hubs` are hub rows, the next `hubs` hub columns.
    let mut positions = std::collections::BTreeSet::new();
    while positions.len() < 2 * hubs {
        positions.insert((next() % n as u64) as u32);
    }
    let mut positions: Vec<u32> = positions.into_iter().collect();
    for i in (1..positions.len()).rev() {
        positions.swap(i, (next() % (i as u64 + 1)) as usize);
    }
    let (hub_rows, hub_cols) = positions.split_at(hubs);
    let mut hub_row_cols: std::collections::HashMap<u32, Vec<u32>> = Default::default();
    for &r in hub_rows {
        let cols = (0..degree).map(|_| (next() % n as u64) as u32).collect();
        hub_row_cols.insert(r, cols);
    }
    // (row, hub column) pairs, by row.
    let mut extra: Vec<(u32, u32)> = hub_cols
        .iter()
        .flat_map(|&c| (0..degree).map(move |_| c))
        .map(|c| ((next() % n as u64) as u32, c))
        .collect();
    extra.sort_unstable();
    let mut offsets = Vec::with_capacity(n + 1);
    let mut cols = Vec::with_capacity(background.nnz() as usize + extra.len() + hubs * degree);
    offsets.push(0u64);
    let mut e = 0;
    for i in 0..n {
        match hub_row_cols.get(&(i as u32)) {
            Some(own) => cols.extend_from_slice(own),
            None => cols.extend_from_slice(background.row(i).0),
        }
        while e < extra.len() && extra[e].0 as usize == i {
            cols.push(extra[e].1);
            e += 1;
        }
        offsets.push(cols.len() as u64);
    }
    let values = (0..cols.len())
        .map(|k| 0.5 + (k.wrapping_mul(2_654_435_761) % 1000) as f64 / 1000.0)
        .collect();
    Csr::try_from_unsorted(n, n, offsets, cols, values).expect("hub matrix")
}

/// The operands `(A, B)` named `name` (one of [`gpu_operand_names`] or
/// [`output_heavy_names`], else `None`), their rows divided by `divisor`.
pub fn gpu_operands(name: &str, divisor: usize) -> Option<(Csr<f64>, Csr<f64>)> {
    let divisor = divisor.max(1);
    match name {
        "uniform12" => {
            let a = generate::uniform::<f64>(4_000_000 / divisor, 4_000_000 / divisor, 12, SEED);
            return Some((a.clone(), a));
        }
        "hubs" => {
            let a = hub_matrix(2_000_000 / divisor, 20, HUBS, HUB_DEGREE, SEED);
            return Some((a.clone(), a));
        }
        _ => {}
    }
    if name == SCALAR_STENCIL {
        let side = ((1e6 / divisor as f64).cbrt().round() as usize).max(1);
        let a = generate::stencil_3d(side, generate::Stencil::TwentySeven, 1, SEED);
        return Some((a.clone(), a));
    }
    let case = gpu_cases().into_iter().find(|c| c.class.name() == name)?;
    Some(generate::product_operands::<f64>(
        case.class,
        (case.size / divisor).max(1),
        SEED,
    ))
}

/// The operands of a generated [`Case`] or of a matrix file, and what their SpGEMM costs.
#[derive(Clone, Debug)]
pub struct Operands {
    /// What the tables call them: the class of a generated case, the file stem of a matrix.
    pub name: String,
    /// Which generated instance these are; `None` for a matrix read from a file.
    pub case: Option<Case>,
    /// Left operand of SpGEMM, SpMM and SpMV.
    pub a: Csr<f64>,
    /// Right operand of SpGEMM (A itself, or Aᵀ for the LP class).
    pub b: Csr<f64>,
    /// Whether B is A (then DIA×DIA and BSR×BSR square A's DIA and BSR forms).
    pub square: bool,
    /// A in other formats.
    pub formats: Formats,
    /// Right operand of SpMM: `A.ncols() × 32`, row-major, entries from [`dense_value`].
    pub dense: Dense<f64>,
    /// Right operand of SpMV: entries `dense_value(i, 0)`.
    pub vector: Vec<f64>,
    /// Intermediate products of `A · B`.
    pub products: u64,
    /// Entries of `A · B`.
    pub product_nnz: u64,
    expected: Expected,
}

/// Results of the serial reference, computed on first use: what checked runs compare with.
#[derive(Clone, Debug, Default)]
struct Expected {
    product: OnceLock<Csr<f64>>,
    spmm: OnceLock<Dense<f64>>,
    spmv: OnceLock<Vec<f64>>,
}

/// The value in `cell`, computed by `f` the first time.
fn cached<T>(cell: &OnceLock<T>, f: impl FnOnce() -> Result<T>) -> Result<&T> {
    if let Some(v) = cell.get() {
        return Ok(v);
    }
    let v = f()?;
    Ok(cell.get_or_init(|| v))
}

/// Entry `(i, j)` of the dense SpMM operand, in (0, 1]: a fixed formula, so that the peers'
/// script builds the same operand (`benches/peers/peers.py`).
pub fn dense_value(i: usize, j: usize) -> f64 {
    ((i * 31 + j * 7) % 97 + 1) as f64 / 97.0
}

fn spmm_operand(rows: usize) -> Result<Dense<f64>> {
    Dense::from_fn(rows, SPMM_COLUMNS, Layout::RowMajor, dense_value)
}

fn spmv_operand(rows: usize) -> Vec<f64> {
    (0..rows).map(|i| dense_value(i, 0)).collect()
}

impl FromStr for Scale {
    type Err = hetsparse_core::Error;

    fn from_str(s: &str) -> Result<Self> {
        match s {
            "full" => Ok(Scale::Full),
            "quick" => Ok(Scale::Quick),
            _ => Err(hetsparse_core::Error::InvalidArgument(format!(
                "unknown scale `{s}`; expected `full` or `quick`"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hub_matrix_has_its_hub_rows_and_columns() {
        let a = hub_matrix(5000, 4, 3, 300, 7);
        let lengths: Vec<u64> = (0..a.nrows()).map(|i| a.row_nnz(i)).collect();
        // Three hub rows of 300 random columns (a few repeated), the rest 4 and any hub columns.
        assert_eq!(lengths.iter().filter(|&&l| l > 250).count(), 3);
        let t = a.transpose().unwrap();
        let column_lengths: Vec<u64> = (0..t.nrows()).map(|j| t.row_nnz(j)).collect();
        assert_eq!(column_lengths.iter().filter(|&&l| l > 250).count(), 3);
        assert!(lengths
            .iter()
            .filter(|&&l| l <= 250)
            .all(|&l| (4..=7).contains(&l)));
        assert_eq!(
            a,
            hub_matrix(5000, 4, 3, 300, 7),
            "a pure function of its arguments"
        );
    }

    #[test]
    fn every_class_once_per_scale() {
        for scale in [Scale::Full, Scale::Quick] {
            let classes: Vec<_> = cases(scale).iter().map(|c| c.class).collect();
            assert_eq!(classes, MatrixClass::ALL);
        }
    }

    #[test]
    fn quick_is_smaller() {
        for (q, f) in cases(Scale::Quick).iter().zip(cases(Scale::Full)) {
            assert!(q.size < f.size, "{q:?} vs {f:?}");
        }
    }

    #[test]
    fn quick_operands_are_consistent() {
        let case = Case {
            class: MatrixClass::LpRectangular,
            size: 2000,
        };
        let ops = case.generate().unwrap();
        assert_eq!(ops.a.ncols(), ops.b.nrows());
        assert_eq!(ops.dense.shape(), (ops.a.ncols(), SPMM_COLUMNS));
        assert_eq!(ops.vector.len(), ops.a.ncols());
        let c = hetsparse_core::reference::spgemm::<f64, hetsparse_core::PlusTimes>(&ops.a, &ops.b)
            .unwrap();
        assert_eq!(c.nnz(), ops.product_nnz);
        assert!(ops.products >= ops.product_nnz);
    }

    #[test]
    fn operands_of_a_matrix_square_it_or_multiply_by_its_transpose() {
        let (a, _) = generate::product_operands::<f64>(MatrixClass::LpRectangular, 300, SEED);
        assert_ne!(a.nrows(), a.ncols());
        let ops = Operands::from_matrix("lp-file", a.clone()).unwrap();
        assert_eq!(
            (ops.name.as_str(), ops.stem(), ops.case),
            ("lp-file", "lp-file".to_string(), None)
        );
        assert!(!ops.square);
        assert_eq!(ops.b, a.transpose().unwrap());
        let c = reference::spgemm::<f64, PlusTimes>(&ops.a, &ops.b).unwrap();
        assert_eq!(c.nnz(), ops.product_nnz);
        let (sq, _) = generate::product_operands::<f64>(MatrixClass::Banded, 300, SEED);
        let ops = Operands::from_matrix("banded-file", sq.clone()).unwrap();
        assert!(ops.square && ops.b == sq);
        assert_eq!(ops.dense.shape(), (sq.ncols(), SPMM_COLUMNS));
    }

    #[test]
    fn dense_values_are_in_range() {
        for i in 0..200 {
            for j in 0..SPMM_COLUMNS {
                let v = dense_value(i, j);
                assert!(v > 0.0 && v <= 1.0);
            }
        }
    }

    #[test]
    fn scale_names_round_trip() {
        for s in [Scale::Full, Scale::Quick] {
            assert_eq!(s.name().parse::<Scale>().unwrap(), s);
        }
        assert!("medium".parse::<Scale>().is_err());
    }
}
