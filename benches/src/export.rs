//! Writes the benchmark operands as Matrix Market files, with a manifest, for the peers.
//!
//! Layout: `DIR/<scale>/<class>-<size>-A.mtx` (and `-B.mtx` where B is not A: the LP class's
//! transpose) and `DIR/<scale>/manifest.tsv`, one line per case with the file names and what
//! each operation costs, so that the peers compute GFLOP/s from the same flop counts and check
//! their SpGEMM's nnz against ours.
//!
//! Real matrices ([`export_matrices`]) get a manifest of the same format in a folder of their
//! own: its lines point at the files where they are, and only the transpose of a rectangular
//! matrix is written.

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
    line(ops, &a_file, &b_file)
}

/// The manifest line of `ops` with operands stored in `a_file` and `b_file`.
fn line(ops: &Operands, a_file: &str, b_file: &str) -> String {
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

/// Writes the manifest of matrix files into `dir/manifest.tsv`, in the format of [`export`]'s,
/// so that the peers time the products `hetsparse-bench time --matrix` times: each file is
/// read by [`Operands::from_file`] (named by its stem; `A · A`, or `A · Aᵀ` when rectangular)
/// and its line carries the same flop counts and nnz(C) as our results.
///
/// A is not copied, as real matrices can be large: `a_file` (and a square A's `b_file`) is the
/// file's absolute path, which the peers' script, joining a manifest's file names to its
/// folder, keeps as it is. Aᵀ of a rectangular A is written as `dir/<name>-B.mtx`.
///
/// Names must be unique (the peers select a matrix by name, and the table's rows are named by
/// it) and hold no tab, line break or comma (the manifest's and `--classes`' separators).
pub fn export_matrices(dir: &Path, files: &[PathBuf]) -> Result<PathBuf> {
    fs::create_dir_all(dir)
        .map_err(|e| Error::InvalidArgument(format!("cannot create {}: {e}", dir.display())))?;
    let mut names: Vec<(String, &Path)> = Vec::new();
    let mut text = format!("{MANIFEST_HEADER}\n");
    for file in files {
        let ops = Operands::from_file(file)?;
        if ops.name.contains(['\t', '\n', '\r', ',']) {
            return Err(Error::InvalidArgument(format!(
                "matrix file {}: its name `{}` holds a tab, line break or comma, which the \
                 manifest cannot list; rename the file",
                file.display(),
                ops.name
            )));
        }
        if let Some((_, first)) = names.iter().find(|(n, _)| *n == ops.name) {
            return Err(Error::InvalidArgument(format!(
                "matrix files {} and {} are both named `{}`; rename one",
                first.display(),
                file.display(),
                ops.name
            )));
        }
        names.push((ops.name.clone(), file));
        let source = std::path::absolute(file).map_err(|e| {
            Error::InvalidArgument(format!(
                "cannot make the path of {} absolute: {e}",
                file.display()
            ))
        })?;
        let a_file = source
            .to_str()
            .filter(|s| !s.contains(['\t', '\n', '\r']))
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "matrix file {}: the manifest lists paths as UTF-8 text without tabs or \
                     line breaks, which this path is not; move the file",
                    source.display()
                ))
            })?;
        let b_file = if ops.square {
            a_file.to_string()
        } else {
            let b_file = format!("{}-B.mtx", ops.name);
            write_matrix(&dir.join(&b_file), &ops.b)?;
            b_file
        };
        text.push_str(&line(&ops, a_file, &b_file));
        text.push('\n');
    }
    let manifest = dir.join("manifest.tsv");
    fs::write(&manifest, text)
        .map_err(|e| Error::InvalidArgument(format!("cannot write {}: {e}", manifest.display())))?;
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

    /// The manifest of real matrices, parsed as `benches/peers/peers.py` parses one (header
    /// names as keys, file names joined to the manifest's folder), against the operands
    /// `time --matrix` builds from the same files.
    #[test]
    fn export_matrices_lists_the_files_as_time_multiplies_them() {
        let dir = std::env::temp_dir().join(format!(
            "hetsparse-bench-export-matrices-{}",
            std::process::id()
        ));
        let _ = fs::remove_dir_all(&dir);
        let mtx = dir.join("mtx");
        fs::create_dir_all(&mtx).unwrap();
        let square = mtx.join("band.mtx");
        let rect = mtx.join("lp_small.mtx");
        let (band, _) = hetsparse_core::generate::product_operands::<f64>(
            MatrixClass::Banded,
            300,
            crate::cases::SEED,
        );
        let (lp, _) = hetsparse_core::generate::product_operands::<f64>(
            MatrixClass::LpRectangular,
            300,
            crate::cases::SEED,
        );
        assert_ne!(lp.nrows(), lp.ncols());
        write_matrix(&square, &band).unwrap();
        write_matrix(&rect, &lp).unwrap();

        let out = dir.join("operands");
        let manifest = export_matrices(&out, &[square.clone(), rect.clone()]).unwrap();
        assert_eq!(manifest, out.join("manifest.tsv"));
        let text = fs::read_to_string(&manifest).unwrap();
        let mut lines = text.lines();
        let header: Vec<&str> = lines.next().unwrap().split('\t').collect();
        assert_eq!(header.join("\t"), MANIFEST_HEADER);
        let rows: Vec<std::collections::HashMap<&str, &str>> = lines
            .map(|l| header.iter().copied().zip(l.split('\t')).collect())
            .collect();
        assert_eq!(rows.len(), 2);
        for (row, file) in rows.iter().zip([&square, &rect]) {
            assert_eq!(row.len(), header.len(), "{row:?}");
            let ops = Operands::from_file(file).unwrap();
            let int = |k: &str| row[k].parse::<u64>().unwrap();
            assert_eq!(row["class"], ops.name);
            assert_eq!(int("rows"), ops.a.nrows() as u64);
            assert_eq!(int("cols"), ops.a.ncols() as u64);
            assert_eq!(int("nnz_a"), ops.a.nnz());
            assert_eq!(int("products"), ops.products);
            let c =
                hetsparse_core::reference::spgemm::<f64, hetsparse_core::PlusTimes>(&ops.a, &ops.b)
                    .unwrap();
            assert_eq!(int("nnz_c"), c.nnz());
            assert_eq!(
                int("flops_spgemm"),
                Measured::Spgemm(SpgemmAlgorithm::Auto).flops(&ops)
            );
            assert_eq!(
                int("flops_spmm32"),
                Measured::Spmm(SparseFormat::Csr).flops(&ops)
            );
            assert_eq!(
                int("flops_spmv"),
                Measured::Spmv(SparseFormat::Csr).flops(&ops)
            );
            // A is read where it is; B is A, or Aᵀ written beside the manifest.
            let a_path = out.join(row["a_file"]);
            assert_eq!(a_path, std::path::absolute(file).unwrap());
            let b = matrix_market::read_csr_path::<f64>(out.join(row["b_file"])).unwrap();
            assert_eq!(b, ops.b);
            if ops.square {
                assert_eq!(row["b_file"], row["a_file"]);
            } else {
                assert_eq!(row["b_file"], "lp_small-B.mtx");
                assert_eq!(b, lp.transpose().unwrap());
            }
        }
        assert_eq!((rows[0]["class"], rows[1]["class"]), ("band", "lp_small"));

        // Two files of one name would be one row of the table and one class for the peers.
        fs::create_dir_all(mtx.join("other")).unwrap();
        let twin = mtx.join("other").join("band.mtx");
        fs::copy(&square, &twin).unwrap();
        let err = export_matrices(&out, &[square.clone(), twin])
            .unwrap_err()
            .to_string();
        assert!(err.contains("both named `band`"), "{err}");
        let comma = mtx.join("a,b.mtx");
        fs::copy(&square, &comma).unwrap();
        let err = export_matrices(&out, &[comma]).unwrap_err().to_string();
        assert!(err.contains("comma"), "{err}");
        fs::remove_dir_all(&dir).unwrap();
    }
}
