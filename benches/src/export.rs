//! Writes the benchmark operands as Matrix Market files, with a manifest, for the peers.
//!
//! Layout: `DIR/<scale>/<class>-<size>-A.mtx` (and `-B.mtx` where B is not A: the LP class's
//! transpose) and `DIR/<scale>/manifest.tsv`, one line per case with the file names and what
//! each operation costs, so that the peers compute GFLOP/s from the same flop counts and check
//! their SpGEMM's nnz against ours.

use std::fs::{self, File};
use std::path::{Path, PathBuf};

use hetsparse_core::matrix_market;
use hetsparse_core::{Error, MatrixMarketError, Result, SparseFormat, SpgemmAlgorithm};

use crate::cases::{Operands, Scale};
use crate::operation::Measured;

/// The manifest's header line.
pub const MANIFEST_HEADER: &str = "class\tsize\ta_file\tb_file\trows\tcols\tnnz_a\tproducts\tnnz_c\tflops_spgemm\tflops_spmm32\tflops_spmv";

/// The folder of a scale's files under the cache directory.
pub fn scale_dir(dir: &Path, scale: Scale) -> PathBuf {
    dir.join(scale.name())
}

/// The manifest line of one case (without newline).
pub fn manifest_line(ops: &Operands) -> String {
    let (a_file, b_file) = file_names(ops);
    format!(
        "{}\t{}\t{a_file}\t{b_file}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
        ops.name,
        ops.case.map_or(ops.a.nrows(), |c| c.size),
        ops.a.nrows(),
        ops.a.ncols(),
        ops.a.nnz(),
        ops.products,
        ops.product_nnz,
        Measured::Spgemm(SpgemmAlgorithm::Auto).flops(ops),
        Measured::Spmm(SparseFormat::Csr).flops(ops),
        Measured::Spmv(SparseFormat::Csr).flops(ops),
    )
}

fn file_names(ops: &Operands) -> (String, String) {
    let stem = ops.stem();
    let a = format!("{stem}-A.mtx");
    let b = if ops.b == ops.a {
        a.clone()
    } else {
        format!("{stem}-B.mtx")
    };
    (a, b)
}

/// Writes the operands of every case into `scale_dir(dir, scale)` and the manifest last.
/// Files of a case whose manifest line is unchanged since the last export are kept.
pub fn export(dir: &Path, scale: Scale, all: &[Operands]) -> Result<PathBuf> {
    let folder = scale_dir(dir, scale);
    fs::create_dir_all(&folder).map_err(|e| io_error(&folder, e))?;
    let manifest = folder.join("manifest.tsv");
    let previous = fs::read_to_string(&manifest).unwrap_or_default();
    let mut text = format!("{MANIFEST_HEADER}\n");
    for ops in all {
        let line = manifest_line(ops);
        let (a_file, b_file) = file_names(ops);
        let fresh = previous.lines().any(|l| l == line)
            && folder.join(&a_file).is_file()
            && folder.join(&b_file).is_file();
        if !fresh {
            write_matrix(&folder.join(&a_file), &ops.a)?;
            if b_file != a_file {
                write_matrix(&folder.join(&b_file), &ops.b)?;
            }
        }
        text.push_str(&line);
        text.push('\n');
    }
    fs::write(&manifest, text).map_err(|e| io_error(&manifest, e))?;
    Ok(manifest)
}

fn write_matrix(path: &Path, a: &hetsparse_core::Csr<f64>) -> Result<()> {
    // Write to a temporary name first, so an interrupted export never leaves a truncated file
    // under the final name.
    let partial = path.with_extension("mtx.partial");
    let file = File::create(&partial).map_err(|e| io_error(&partial, e))?;
    matrix_market::write_sparse(file, a)?;
    fs::rename(&partial, path).map_err(|e| io_error(path, e))?;
    Ok(())
}

fn io_error(path: &Path, source: std::io::Error) -> Error {
    Error::MatrixMarket(MatrixMarketError::Open {
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cases::Case;
    use hetsparse_core::generate::MatrixClass;

    #[test]
    fn export_writes_readable_files_and_manifest() {
        let dir =
            std::env::temp_dir().join(format!("hetsparse-bench-export-{}", std::process::id()));
        let all: Vec<Operands> = [MatrixClass::LpRectangular, MatrixClass::Banded]
            .into_iter()
            .map(|class| Case { class, size: 400 }.generate().unwrap())
            .collect();
        let manifest = export(&dir, Scale::Quick, &all).unwrap();
        let text = fs::read_to_string(&manifest).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], MANIFEST_HEADER);
        assert_eq!(lines.len(), 3);
        let lp: Vec<&str> = lines[1].split('\t').collect();
        assert_eq!(lp.len(), MANIFEST_HEADER.split('\t').count());
        assert_eq!(
            (lp[0], lp[2], lp[3]),
            ("lp", "lp-400-A.mtx", "lp-400-B.mtx")
        );
        let banded: Vec<&str> = lines[2].split('\t').collect();
        assert_eq!(banded[2], banded[3], "a square class stores B = A once");
        let folder = manifest.parent().unwrap();
        let b = matrix_market::read_csr_path::<f64>(folder.join(lp[3])).unwrap();
        assert_eq!(b, all[0].b);
        // A second export keeps the files.
        let modified = fs::metadata(folder.join(lp[2]))
            .unwrap()
            .modified()
            .unwrap();
        export(&dir, Scale::Quick, &all).unwrap();
        assert_eq!(
            fs::metadata(folder.join(lp[2]))
                .unwrap()
                .modified()
                .unwrap(),
            modified
        );
        fs::remove_dir_all(&dir).unwrap();
    }
}
