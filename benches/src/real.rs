//! The real-workload products: a folder that `benches/peers/real_products.py` wrote, holding
//! raw operands (see [`crate::raw`]) and the manifest `products.tsv`, one product `A · B` per
//! line: `name<TAB>A-stem<TAB>B-stem`, optionally followed by `<TAB>source` (the library and
//! version that generated it, e.g. `PyAMG 5.4.1`). Empty lines are skipped.
//!
//! [`operands`] turns one line into the [`Operands`] the CPU bench times (`hetsparse-bench
//! time --real DIR`), each product multiplied as listed, `A · B`, not squared.

use std::path::Path;

use hetsparse_core::{analysis, Error, Result};

use crate::cases::Operands;
use crate::raw;

/// The manifest's file name in a folder of real products.
pub const MANIFEST: &str = "products.tsv";

/// One line of the manifest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RealProduct {
    /// What the tables call the product (its class).
    pub name: String,
    /// Stem of A in the folder.
    pub a: String,
    /// Stem of B in the folder.
    pub b: String,
    /// The generating library and version, where the manifest names it.
    pub source: Option<String>,
}

/// Parses a manifest's text; `origin` (its path) names it in errors, which also give the line.
///
/// Every non-empty line has 3 or 4 tab-separated, non-empty fields; names are unique and hold
/// no comma (the separator of `--classes`).
pub fn parse_manifest(text: &str, origin: &str) -> Result<Vec<RealProduct>> {
    let mut list: Vec<RealProduct> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let at = || format!("{origin} line {}", i + 1);
        if line.trim().is_empty() {
            continue;
        }
        let fields: Vec<&str> = line.split('\t').collect();
        let (name, a, b, source) = match fields[..] {
            [name, a, b] => (name, a, b, None),
            [name, a, b, source] => (name, a, b, Some(source)),
            _ => {
                return Err(Error::InvalidArgument(format!(
                    "{}: {} tab-separated fields, expected 3 or 4 (name, A, B[, source]): `{line}`",
                    at(),
                    fields.len()
                )))
            }
        };
        if [name, a, b].iter().any(|f| f.trim().is_empty())
            || source.is_some_and(|s| s.trim().is_empty())
        {
            return Err(Error::InvalidArgument(format!(
                "{}: an empty field in `{line}`",
                at()
            )));
        }
        if name.contains(',') {
            return Err(Error::InvalidArgument(format!(
                "{}: the name `{name}` holds a comma",
                at()
            )));
        }
        if list.iter().any(|p| p.name == name) {
            return Err(Error::InvalidArgument(format!(
                "{}: `{name}` is listed twice",
                at()
            )));
        }
        list.push(RealProduct {
            name: name.to_string(),
            a: a.to_string(),
            b: b.to_string(),
            source: source.map(str::to_string),
        });
    }
    Ok(list)
}

/// The products listed in `dir/products.tsv`.
pub fn read_manifest(dir: &Path) -> Result<Vec<RealProduct>> {
    let path = dir.join(MANIFEST);
    let text = std::fs::read_to_string(&path)
        .map_err(|e| Error::InvalidArgument(format!("cannot read {}: {e}", path.display())))?;
    parse_manifest(&text, &path.display().to_string())
}

/// The operands of `product`, read from `dir`: `A · B` as listed (B is A where both stems
/// are the same), with its intermediate products and nnz(C) counted here.
///
/// SpMM and SpMV operands and A's other formats are those of [`Operands::from_matrix`]
/// (built from A alone); only B and the product's counts are replaced.
pub fn operands(dir: &Path, product: &RealProduct) -> Result<Operands> {
    let read = |stem: &str| raw::read_csr(dir, stem).map_err(Error::InvalidArgument);
    let a = read(&product.a)?;
    let b = if product.b == product.a {
        a.clone()
    } else {
        read(&product.b)?
    };
    if a.ncols() != b.nrows() {
        return Err(Error::InvalidArgument(format!(
            "{}: A ({}) is {}×{} and B ({}) is {}×{}",
            product.name,
            product.a,
            a.nrows(),
            a.ncols(),
            product.b,
            b.nrows(),
            b.ncols()
        )));
    }
    let products = analysis::total_products(&a, &b)?;
    let product_nnz = analysis::symbolic_row_nnz(&a, &b)?.iter().sum();
    let mut ops = Operands::from_matrix(&product.name, a)?;
    ops.square = ops.a == b;
    ops.b = b;
    ops.products = products;
    ops.product_nnz = product_nnz;
    Ok(ops)
}

/// Writes `out/manifest.tsv` for the peers' script (the format of [`crate::export`]'s) listing
/// the products of `dir` named in `only` (all when empty), with the names, flop counts and
/// nnz(C) of our results. `a_file` and `b_file` are the absolute paths of the raw operands'
/// stems (`DIR/STEM`, without extension), which the script reads as raw arrays.
pub fn export_manifest(out: &Path, dir: &Path, only: &[String]) -> Result<std::path::PathBuf> {
    std::fs::create_dir_all(out)
        .map_err(|e| Error::InvalidArgument(format!("cannot create {}: {e}", out.display())))?;
    let dir = std::path::absolute(dir).map_err(|e| {
        Error::InvalidArgument(format!("cannot make {} absolute: {e}", dir.display()))
    })?;
    let mut text = format!("{}\n", crate::export::MANIFEST_HEADER);
    for product in selected(&dir, only)? {
        let ops = operands(&dir, &product)?;
        let path = |stem: &str| {
            let p = dir.join(stem);
            p.to_str()
                .filter(|s| !s.contains(['\t', '\n', '\r']))
                .map(str::to_string)
                .ok_or_else(|| {
                    Error::InvalidArgument(format!(
                        "{}: the manifest lists paths as UTF-8 text without tabs or line \
                         breaks, which this one is not",
                        p.display()
                    ))
                })
        };
        // The line of a generated case, its operand files replaced by the raw stems.
        let line = crate::export::manifest_line(&ops);
        let mut fields: Vec<String> = line.split('\t').map(str::to_string).collect();
        fields[2] = path(&product.a)?;
        fields[3] = path(&product.b)?;
        text.push_str(&fields.join("\t"));
        text.push('\n');
    }
    let manifest = out.join("manifest.tsv");
    std::fs::write(&manifest, text)
        .map_err(|e| Error::InvalidArgument(format!("cannot write {}: {e}", manifest.display())))?;
    Ok(manifest)
}

/// The products of `dir` named in `only` (all when empty), in the manifest's order; a name
/// that `dir` does not list is an error.
pub fn selected(dir: &Path, only: &[String]) -> Result<Vec<RealProduct>> {
    let list = read_manifest(dir)?;
    if let Some(missing) = only.iter().find(|w| !list.iter().any(|p| &p.name == *w)) {
        return Err(Error::InvalidArgument(format!(
            "{} lists no product `{missing}`",
            dir.join(MANIFEST).display()
        )));
    }
    Ok(list
        .into_iter()
        .filter(|p| only.is_empty() || only.contains(&p.name))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use hetsparse_core::{generate, reference, Csr, PlusTimes};

    #[test]
    fn reads_three_and_four_columns() {
        let text = "ap\tA\tP\nrap\tR\tAP\tPyAMG 5.4.1\n\n";
        let list = parse_manifest(text, "m.tsv").unwrap();
        assert_eq!(
            list,
            [
                RealProduct {
                    name: "ap".into(),
                    a: "A".into(),
                    b: "P".into(),
                    source: None
                },
                RealProduct {
                    name: "rap".into(),
                    a: "R".into(),
                    b: "AP".into(),
                    source: Some("PyAMG 5.4.1".into())
                },
            ]
        );
        assert!(parse_manifest("", "m.tsv").unwrap().is_empty());
    }

    #[test]
    fn bad_lines_are_named() {
        let e = |text: &str| parse_manifest(text, "m.tsv").unwrap_err().to_string();
        assert!(e("ap\tA\tP\nrap\tR").contains("m.tsv line 2: 2 tab-separated fields"));
        assert!(e("a\tb\tc\td\te").contains("m.tsv line 1: 5 tab-separated fields"));
        assert!(e("ap\tA\t\tsrc").contains("line 1: an empty field"));
        assert!(e("ap\tA\tP\tsrc\n\nap\tA\tP").contains("line 3: `ap` is listed twice"));
        assert!(e("a,p\tA\tP").contains("holds a comma"));
    }

    #[test]
    fn operands_multiply_a_by_b() {
        let dir = std::env::temp_dir().join(format!("hetsparse-real-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let a: Csr<f64> = generate::uniform(40, 30, 4, 1);
        let b: Csr<f64> = generate::uniform(30, 20, 3, 2);
        raw::write_csr(&dir, "a", &a).unwrap();
        raw::write_csr(&dir, "b", &b).unwrap();
        std::fs::write(dir.join(MANIFEST), "ab\ta\tb\ttest 1.0\nba\tb\ta\n").unwrap();
        let list = read_manifest(&dir).unwrap();
        let ops = operands(&dir, &list[0]).unwrap();
        assert_eq!((ops.name.as_str(), ops.square), ("ab", false));
        assert_eq!((&ops.a, &ops.b), (&a, &b));
        let c = reference::spgemm::<f64, PlusTimes>(&a, &b).unwrap();
        assert_eq!(ops.product_nnz, c.nnz());
        assert_eq!(ops.products, analysis::total_products(&a, &b).unwrap());
        assert_eq!(ops.vector.len(), a.ncols());
        let e = operands(&dir, &list[1]).unwrap_err().to_string();
        assert!(e.contains("ba: A (b) is 30×20 and B (a) is 40×30"), "{e}");
        assert_eq!(selected(&dir, &["ba".into()]).unwrap(), [list[1].clone()]);
        assert!(selected(&dir, &["x".into()])
            .unwrap_err()
            .to_string()
            .contains("lists no product `x`"));
        let out = dir.join("peers");
        let manifest = export_manifest(&out, &dir, &["ab".into()]).unwrap();
        let text = std::fs::read_to_string(manifest).unwrap();
        let line: Vec<&str> = text.lines().nth(1).unwrap().split('\t').collect();
        let abs = std::path::absolute(&dir).unwrap();
        assert_eq!(line[0], "ab");
        assert_eq!(line[2], abs.join("a").to_str().unwrap());
        assert_eq!(line[3], abs.join("b").to_str().unwrap());
        assert_eq!(line[8], ops.product_nnz.to_string());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
