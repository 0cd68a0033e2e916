//! The markdown table of `cargo xtask bench`: GFLOP/s of every implementation per operation and
//! class, each of our backends' ratio to Intel MKL, and geometric means.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use hetsparse_core::generate::MatrixClass;

use crate::results::Record;

/// The peers' implementation names as `benches/peers/peers.py` writes them, in column order.
pub const PEERS: [&str; 4] = ["scipy", "mkl", "graphblas", "cusparse"];

/// The peer our backends are compared against (the ratio columns); its variants (`mkl:sorted`)
/// get a summary line each.
pub const BASELINE: &str = "mkl";

/// Operations in table order.
pub const OPERATIONS: [&str; 3] = ["spgemm", "spmm32", "spmv"];

/// Renders the table, a summary line per backend against [`BASELINE`], and notes on missing
/// implementations and failed runs.
pub fn markdown(records: &[Record]) -> String {
    let table = Table::new(records);
    let mut out = String::new();
    table.write_grid(&mut out);
    table.write_summary(&mut out);
    table.write_scaling(&mut out);
    table.write_notes(&mut out, records);
    out
}

/// Records indexed for the table.
struct Table<'a> {
    /// Ours first (in order of appearance), then the peers present, in [`PEERS`] order.
    columns: Vec<&'a str>,
    /// Our default implementations (no `:Algorithm`): they get a ratio column.
    ratios: Vec<&'a str>,
    has_baseline: bool,
    /// (operation, class) rows in table order.
    rows: Vec<(&'a str, &'a str)>,
    gflops: BTreeMap<(&'a str, &'a str, &'a str), f64>,
    failed: BTreeMap<(&'a str, &'a str, &'a str), ()>,
}

impl<'a> Table<'a> {
    fn new(records: &'a [Record]) -> Self {
        let mut ours: Vec<&str> = Vec::new();
        let mut peers_seen: Vec<&str> = Vec::new();
        let mut rows: Vec<(&str, &str)> = Vec::new();
        let mut gflops = BTreeMap::new();
        let mut failed = BTreeMap::new();
        for r in records {
            let name = r.implementation.as_str();
            if PEERS.contains(&peer_base(name)) {
                if !peers_seen.contains(&name) {
                    peers_seen.push(name);
                }
            } else if !ours.contains(&name) {
                ours.push(name);
            }
            if r.class == "*" {
                continue;
            }
            let key = (r.operation.as_str(), r.class.as_str());
            if !rows.contains(&key) {
                rows.push(key);
            }
            let cell = (name, key.0, key.1);
            // A cell measured in several rounds shows its best round; it fails only if every
            // round failed.
            match r.gflops() {
                Some(g) => {
                    let best = gflops.entry(cell).or_insert(g);
                    *best = best.max(g);
                }
                None => {
                    failed.insert(cell, ());
                }
            }
        }
        rows.sort_by_key(|&(op, class)| (rank(&OPERATIONS, op), class_rank(class), class));
        let has_baseline = peers_seen.contains(&BASELINE);
        let ratios = ours.iter().copied().filter(|n| !n.contains(':')).collect();
        let mut columns = ours;
        peers_seen.sort_by_key(|p| {
            let (name, threads) = split_threads(p);
            (rank(&PEERS, peer_base(p)), name, threads)
        });
        columns.extend(peers_seen);
        Table {
            columns,
            ratios,
            has_baseline,
            rows,
            gflops,
            failed,
        }
    }

    fn ratio_columns(&self) -> &[&'a str] {
        if self.has_baseline {
            &self.ratios
        } else {
            &[]
        }
    }

    fn cell(&self, name: &str, op: &str, class: &str) -> String {
        match self.gflops.get(&(name, op, class)) {
            Some(&g) => number(g),
            None if self.failed.contains_key(&(name, op, class)) => "fail".into(),
            None => "—".into(),
        }
    }

    fn ratio(&self, ours: &str, op: &str, class: &str) -> Option<f64> {
        self.ratio_to(ours, BASELINE, op, class)
    }

    fn ratio_to(&self, ours: &str, peer: &str, op: &str, class: &str) -> Option<f64> {
        let a = self.gflops.get(&(ours, op, class))?;
        let b = self.gflops.get(&(peer, op, class))?;
        Some(a / b)
    }

    /// The baseline and its variants present in the results (`mkl`, `mkl:sorted`).
    fn baselines(&self) -> Vec<&'a str> {
        self.columns
            .iter()
            .copied()
            .filter(|c| split_threads(c).1.is_none() && peer_base(c) == BASELINE)
            .collect()
    }

    fn classes_of(&self, op: &str) -> Vec<&'a str> {
        self.rows
            .iter()
            .filter(|(o, _)| *o == op)
            .map(|&(_, c)| c)
            .collect()
    }

    fn operations(&self) -> Vec<&'a str> {
        let mut ops: Vec<&str> = Vec::new();
        for &(op, _) in &self.rows {
            if !ops.contains(&op) {
                ops.push(op);
            }
        }
        ops
    }

    fn write_grid(&self, out: &mut String) {
        let _ = write!(out, "| operation | class |");
        for c in &self.columns {
            let _ = write!(out, " {c} |");
        }
        for c in self.ratio_columns() {
            let _ = write!(out, " {c} / {BASELINE} |");
        }
        out.push_str("\n|---|---|");
        for _ in 0..self.columns.len() + self.ratio_columns().len() {
            out.push_str("---:|");
        }
        out.push('\n');
        for op in self.operations() {
            let classes = self.classes_of(op);
            for &class in &classes {
                let _ = write!(out, "| {op} | {class} |");
                for c in &self.columns {
                    let _ = write!(out, " {} |", self.cell(c, op, class));
                }
                for c in self.ratio_columns() {
                    let r = self.ratio(c, op, class);
                    let _ = write!(out, " {} |", r.map_or("—".into(), ratio));
                }
                out.push('\n');
            }
            let _ = write!(out, "| {op} | **geomean** |");
            for c in &self.columns {
                let values: Vec<f64> = classes
                    .iter()
                    .filter_map(|class| self.gflops.get(&(*c, op, *class)).copied())
                    .collect();
                let _ = write!(out, " {} |", geomean_cell(&values, classes.len(), number));
            }
            for c in self.ratio_columns() {
                let values: Vec<f64> = classes
                    .iter()
                    .filter_map(|class| self.ratio(c, op, class))
                    .collect();
                let _ = write!(out, " {} |", geomean_cell(&values, classes.len(), ratio));
            }
            out.push('\n');
        }
    }

    fn write_summary(&self, out: &mut String) {
        if !self.ratio_columns().is_empty() {
            out.push('\n');
        }
        for ours in self.ratio_columns() {
            for peer in self.baselines() {
                let mut line = format!("- **{ours} vs {peer}**:");
                for op in self.operations() {
                    let per_class: Vec<(f64, &str)> = self
                        .classes_of(op)
                        .into_iter()
                        .filter_map(|class| {
                            self.ratio_to(ours, peer, op, class).map(|r| (r, class))
                        })
                        .collect();
                    let Some(&(low, low_class)) =
                        per_class.iter().min_by(|a, b| a.0.total_cmp(&b.0))
                    else {
                        continue;
                    };
                    let values: Vec<f64> = per_class.iter().map(|p| p.0).collect();
                    let _ = write!(
                        line,
                        " {op} geomean {} (lowest {} on {low_class});",
                        ratio(geomean(&values)),
                        ratio(low)
                    );
                }
                if line.ends_with(';') {
                    line.pop();
                    out.push_str(&line);
                    out.push('\n');
                }
            }
        }
    }

    /// For implementations measured at several thread counts (`name@N`): geomean GFLOP/s per
    /// count over the classes every count ran, and the speedup over the smallest count.
    fn write_scaling(&self, out: &mut String) {
        let mut series: Vec<(&str, Vec<(usize, &str)>)> = Vec::new();
        for &c in &self.columns {
            if let (base, Some(n)) = split_threads(c) {
                match series.iter_mut().find(|(b, _)| *b == base) {
                    Some((_, counts)) => counts.push((n, c)),
                    None => series.push((base, vec![(n, c)])),
                }
            }
        }
        series.retain(|(_, counts)| counts.len() > 1);
        let Some(widest) = series.iter().map(|(_, c)| c.len()).max() else {
            return;
        };
        let _ = write!(
            out,
            "\nThread scaling (geomean GFLOP/s over the classes every count ran; speedup over \
             the fewest threads):\n\n| operation | implementation |"
        );
        out.push_str(&" |".repeat(widest));
        out.push_str("\n|---|---|");
        out.push_str(&"---:|".repeat(widest));
        out.push('\n');
        for op in self.operations() {
            for (base, counts) in &mut series {
                counts.sort();
                let classes: Vec<&str> = self
                    .classes_of(op)
                    .into_iter()
                    .filter(|class| {
                        counts
                            .iter()
                            .all(|(_, c)| self.gflops.contains_key(&(*c, op, *class)))
                    })
                    .collect();
                if classes.is_empty() {
                    continue;
                }
                let means: Vec<f64> = counts
                    .iter()
                    .map(|(_, c)| {
                        let v: Vec<f64> = classes
                            .iter()
                            .map(|class| self.gflops[&(*c, op, *class)])
                            .collect();
                        geomean(&v)
                    })
                    .collect();
                let _ = write!(out, "| {op} | {base} ({} classes) |", classes.len());
                for (&(n, _), m) in counts.iter().zip(&means) {
                    let _ = write!(
                        out,
                        " {n} threads: {} ({}) |",
                        number(*m),
                        ratio(m / means[0])
                    );
                }
                out.push_str(&" |".repeat(widest - counts.len()));
                out.push('\n');
            }
        }
    }

    fn write_notes(&self, out: &mut String, records: &[Record]) {
        let mut notes: Vec<String> = Vec::new();
        for r in records {
            let note = if r.class == "*" {
                format!("{} missing: {}", r.implementation, r.note)
            } else if r.seconds.is_none() || !r.note.is_empty() {
                format!(
                    "{} {} {}: {}",
                    r.implementation,
                    r.operation,
                    r.class,
                    if r.note.is_empty() {
                        "no time"
                    } else {
                        &r.note
                    }
                )
            } else {
                continue;
            };
            // Several classes or rounds repeat the same note (a missing peer).
            if !notes.contains(&note) {
                notes.push(note);
            }
        }
        if !notes.is_empty() {
            out.push_str("\nNotes:\n");
            for n in notes {
                let _ = writeln!(out, "- {n}");
            }
        }
    }
}

/// `name@N` → (`name`, Some(N)); other names → (name, None).
fn split_threads(name: &str) -> (&str, Option<usize>) {
    match name.rsplit_once('@') {
        Some((base, n)) => match n.parse() {
            Ok(n) => (base, Some(n)),
            Err(_) => (name, None),
        },
        None => (name, None),
    }
}

/// The peer a result column belongs to: `mkl:sorted@16` → `mkl`.
fn peer_base(name: &str) -> &str {
    let name = split_threads(name).0;
    name.split_once(':').map_or(name, |(base, _)| base)
}

fn rank(order: &[&str], name: &str) -> usize {
    order.iter().position(|&o| o == name).unwrap_or(order.len())
}

fn class_rank(name: &str) -> usize {
    MatrixClass::ALL
        .iter()
        .position(|c| c.name() == name)
        .unwrap_or(MatrixClass::ALL.len())
}

/// Geometric mean of positive values; NaN for none.
pub fn geomean(values: &[f64]) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    (values.iter().map(|v| v.ln()).sum::<f64>() / values.len() as f64).exp()
}

/// A geomean cell; says over how many of the rows it ran when some are missing.
fn geomean_cell(values: &[f64], rows: usize, show: fn(f64) -> String) -> String {
    match values.len() {
        0 => "—".into(),
        n if n == rows => format!("**{}**", show(geomean(values))),
        n => format!("**{}** ({n}/{rows})", show(geomean(values))),
    }
}

/// GFLOP/s with three significant digits.
fn number(g: f64) -> String {
    match g {
        g if g >= 100.0 => format!("{g:.0}"),
        g if g >= 10.0 => format!("{g:.1}"),
        g if g >= 1.0 => format!("{g:.2}"),
        g => format!("{g:.3}"),
    }
}

fn ratio(r: f64) -> String {
    format!("{r:.2}×")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::parse_tsv;

    const OURS: &str = "\
cpu\tbanded\tspgemm\t0.5\t1000000000\t
cpu:RowRow\tbanded\tspgemm\t0.25\t1000000000\t
cpu\tstencil3d\tspgemm\t1.0\t1000000000\t
cpu\tstencil3d\tspmv\t0.001\t2000000\t
";
    const PEERS_TSV: &str = "\
scipy\tstencil3d\tspgemm\t4.0\t1000000000\t
mkl\tstencil3d\tspgemm\t2.0\t1000000000\t
mkl\tbanded\tspgemm\t0.25\t1000000000\t
mkl\tstencil3d\tspmv\t\t2000000\tMKL error 5
mkl:sorted\tstencil3d\tspgemm\t4.0\t1000000000\t
cusparse\t*\t*\t\t0\tno module named cupy
";

    fn records() -> Vec<Record> {
        let mut r = parse_tsv(OURS, "ours").unwrap();
        r.extend(parse_tsv(PEERS_TSV, "peers").unwrap());
        r
    }

    #[test]
    fn table_lists_every_implementation_and_ratio() {
        let md = markdown(&records());
        let lines: Vec<&str> = md.lines().collect();
        assert_eq!(
            lines[0],
            "| operation | class | cpu | cpu:RowRow | scipy | mkl | mkl:sorted | cusparse | cpu / mkl |"
        );
        // Classes follow MatrixClass::ALL: stencil3d before banded.
        assert_eq!(
            lines[2],
            "| spgemm | stencil3d | 1.00 | — | 0.250 | 0.500 | 0.250 | — | 2.00× |"
        );
        assert_eq!(
            lines[3],
            "| spgemm | banded | 2.00 | 4.00 | — | 4.00 | — | — | 0.50× |"
        );
        assert_eq!(
            lines[4],
            "| spgemm | **geomean** | **1.41** | **4.00** (1/2) | **0.250** (1/2) | **1.41** | **0.250** (1/2) | — | **1.00×** |"
        );
        assert_eq!(
            lines[5],
            "| spmv | stencil3d | 2.00 | — | — | fail | — | — | — |"
        );
        assert!(md.contains("- **cpu vs mkl**: spgemm geomean 1.00× (lowest 0.50× on banded)\n"));
        assert!(md.contains(
            "- **cpu vs mkl:sorted**: spgemm geomean 4.00× (lowest 4.00× on stencil3d)\n"
        ));
        assert!(md.contains("- cusparse missing: no module named cupy\n"));
        assert!(md.contains("- mkl spmv stencil3d: MKL error 5\n"));
    }

    #[test]
    fn without_peers_there_is_no_ratio() {
        let md = markdown(&parse_tsv(OURS, "ours").unwrap());
        assert!(md.starts_with("| operation | class | cpu | cpu:RowRow |\n"));
        assert!(!md.contains("/ mkl"));
        assert!(!md.contains("vs mkl"));
    }

    #[test]
    fn thread_series_get_a_scaling_table() {
        let text = "\
cpu@1\tbanded\tspgemm\t1.0\t1000000000\t
cpu@4\tbanded\tspgemm\t0.25\t1000000000\t
cpu@1\tdense\tspgemm\t2.0\t1000000000\t
cpu@4\tdense\tspgemm\t1.0\t1000000000\t
graphblas@16\tbanded\tspgemm\t0.5\t1000000000\t
graphblas@1\tbanded\tspgemm\t2.0\t1000000000\t
";
        let md = markdown(&parse_tsv(text, "t").unwrap());
        assert!(
            md.starts_with("| operation | class | cpu@1 | cpu@4 | graphblas@1 | graphblas@16 |\n"),
            "{md}"
        );
        assert!(
            md.contains("| spgemm | cpu (2 classes) | 1 threads: 0.707 (1.00×) | 4 threads: 2.00 (2.83×) |\n"),
            "{md}"
        );
        assert!(
            md.contains("| spgemm | graphblas (1 classes) | 1 threads: 0.500 (1.00×) | 16 threads: 2.00 (4.00×) |\n"),
            "{md}"
        );
        assert_eq!(split_threads("cpu:RowRow@16"), ("cpu:RowRow", Some(16)));
        assert_eq!(split_threads("me@home"), ("me@home", None));
    }

    #[test]
    fn rounds_show_their_best_and_fail_only_together() {
        let text = "\
cpu\tbanded\tspgemm\t2.0\t1000000000\t
cpu\tbanded\tspgemm\t1.0\t1000000000\t
cpu\tbanded\tspgemm\t4.0\t1000000000\t
cpu\troad\tspgemm\t\t1000000000\tout of memory
cpu\troad\tspgemm\t0.5\t1000000000\t
cpu\tdense\tspgemm\t\t1000000000\tout of memory
cpu\tdense\tspgemm\t\t1000000000\tout of memory
";
        let md = markdown(&parse_tsv(text, "t").unwrap());
        assert!(md.contains("| spgemm | banded | 1.00 |"), "{md}");
        assert!(md.contains("| spgemm | road | 2.00 |"), "{md}");
        assert!(md.contains("| spgemm | dense | fail |"), "{md}");
        assert_eq!(md.matches("dense: out of memory").count(), 1, "{md}");
    }

    #[test]
    fn geomean_of_powers() {
        assert!((geomean(&[1.0, 4.0, 16.0]) - 4.0).abs() < 1e-12);
        assert!(geomean(&[]).is_nan());
        assert_eq!(number(123.4), "123");
        assert_eq!(number(0.01234), "0.012");
    }
}
