//! The reports of `cargo xtask bench`: the markdown table (GFLOP/s of every implementation per
//! operation and class, each of our backends' ratio to Intel MKL, and geometric means) and the
//! same results as SVG charts, alone or in one HTML page.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use hetsparse_core::generate::MatrixClass;
use hetsparse_core::{Error, Result};

use crate::results::Record;
use crate::svg::{escape, Bar, BarChart, Series};

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

/// Thread scaling of one implementation in one operation.
struct Scaling<'a> {
    operation: &'a str,
    /// The implementation without its `@N`.
    base: &'a str,
    /// How many classes every thread count ran (the means are over these).
    classes: usize,
    /// (threads, geomean GFLOP/s), fewest threads first.
    means: Vec<(usize, f64)>,
}

/// One chart of the report, with the file stem [`write_svgs`] saves it under.
#[derive(Clone, Debug, PartialEq)]
pub struct NamedChart {
    /// File name without `.svg`: `gflops-spgemm`, `speedup-spgemm-mkl`, `scaling-spmv`.
    pub stem: String,
    /// The chart.
    pub chart: BarChart,
}

/// The report's charts, per operation: GFLOP/s per class and implementation; our default
/// implementations' speedup over each peer per class (with a thread count, over the peer
/// measured at the same count); and, for implementations measured at several thread counts,
/// geomean GFLOP/s per count. Charts without a bar are left out.
pub fn charts(records: &[Record]) -> Vec<NamedChart> {
    let table = Table::new(records);
    let colour = |name: &str| {
        table
            .columns
            .iter()
            .position(|&c| c == name || split_threads(c).0 == name)
            .unwrap_or(0)
    };
    let peers: Vec<&str> = table
        .columns
        .iter()
        .copied()
        .filter(|c| is_peer(c))
        .collect();
    let mut peer_names: Vec<&str> = Vec::new();
    for p in &peers {
        let name = split_threads(p).0;
        if !peer_names.contains(&name) {
            peer_names.push(name);
        }
    }
    let scaling = table.scaling();
    let mut out = Vec::new();
    for op in table.operations() {
        let classes = table.classes_of(op);
        let categories: Vec<String> = classes.iter().map(|c| c.to_string()).collect();
        let series = table
            .columns
            .iter()
            .map(|&name| Series {
                name: name.to_string(),
                colour: colour(name),
                bars: classes
                    .iter()
                    .map(|&class| {
                        table.gflops.get(&(name, op, class)).map(|&g| Bar {
                            value: g,
                            tip: format!("{name}, {op}, {class}: {} GFLOP/s", number(g)),
                        })
                    })
                    .collect(),
            })
            .filter(|s| s.bars.iter().any(Option::is_some))
            .collect();
        out.push(NamedChart {
            stem: format!("gflops-{}", slug(op)),
            chart: BarChart {
                title: format!("{op}: GFLOP/s per class"),
                unit: "GFLOP/s".into(),
                categories: categories.clone(),
                series,
                reference: None,
            },
        });
        for &peer in &peer_names {
            let series = table
                .ratios
                .iter()
                .filter_map(|&ours| {
                    let against = match split_threads(ours).1 {
                        Some(n) => format!("{peer}@{n}"),
                        None => peer.to_string(),
                    };
                    let against = *peers.iter().find(|&&p| p == against)?;
                    Some(Series {
                        name: format!("{ours} / {against}"),
                        colour: colour(ours),
                        bars: classes
                            .iter()
                            .map(|&class| {
                                let r = table.ratio_to(ours, against, op, class)?;
                                Some(Bar {
                                    value: r,
                                    tip: format!(
                                        "{ours} / {against}, {op}, {class}: {} ({} against {} GFLOP/s)",
                                        ratio(r),
                                        number(table.gflops[&(ours, op, class)]),
                                        number(table.gflops[&(against, op, class)])
                                    ),
                                })
                            })
                            .collect(),
                    })
                })
                .collect();
            out.push(NamedChart {
                stem: format!("speedup-{}-{}", slug(op), slug(peer)),
                chart: BarChart {
                    title: format!("{op}: speedup over {peer} (above the dashed line: faster)"),
                    unit: "speedup".into(),
                    categories: categories.clone(),
                    series,
                    reference: Some(1.0),
                },
            });
        }
        let of_op: Vec<&Scaling> = scaling.iter().filter(|s| s.operation == op).collect();
        let mut counts: Vec<usize> = of_op
            .iter()
            .flat_map(|s| s.means.iter().map(|m| m.0))
            .collect();
        counts.sort_unstable();
        counts.dedup();
        let series = of_op
            .iter()
            .map(|s| Series {
                name: s.base.to_string(),
                colour: colour(s.base),
                bars: counts
                    .iter()
                    .map(|&n| {
                        let &(_, m) = s.means.iter().find(|m| m.0 == n)?;
                        let (fewest, first) = s.means[0];
                        Some(Bar {
                            value: m,
                            tip: format!(
                                "{}, {op}, {}: {} GFLOP/s geomean over {} classes, {} over {}",
                                s.base,
                                threads(n),
                                number(m),
                                s.classes,
                                ratio(m / first),
                                threads(fewest)
                            ),
                        })
                    })
                    .collect(),
            })
            .collect();
        out.push(NamedChart {
            stem: format!("scaling-{}", slug(op)),
            chart: BarChart {
                title: format!(
                    "{op}: thread scaling (geomean GFLOP/s over the classes every count ran)"
                ),
                unit: "GFLOP/s".into(),
                categories: counts.iter().map(|&n| threads(n)).collect(),
                series,
                reference: None,
            },
        });
    }
    out.retain(|c| c.chart.has_bars());
    out
}

/// One self-contained HTML page (no scripts, nothing fetched): every chart of [`charts`]
/// inline, then the markdown table of [`markdown`] and the `setup` lines of the result files.
pub fn html(records: &[Record], setup: &[String]) -> String {
    let mut out = String::from(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n\
         <title>hetsparse benchmark report</title>\n<style>\n\
         body { font-family: sans-serif; margin: 2em; color: #222; }\n\
         svg { display: block; margin: 0.5em 0 2em; max-width: 100%; height: auto; }\n\
         pre { font-size: 12px; overflow-x: auto; }\n\
         </style>\n</head>\n<body>\n<h1>hetsparse benchmark report</h1>\n\
         <p>Hover over a bar for its value.</p>\n",
    );
    let charts = charts(records);
    if charts.is_empty() {
        out.push_str("<p>No measurement has a time.</p>\n");
    }
    for c in &charts {
        let _ = writeln!(out, "<h2 id=\"{}\">{}</h2>", c.stem, escape(&c.chart.title));
        out.push_str(&c.chart.svg());
    }
    let _ = write!(
        out,
        "<h2 id=\"table\">Table</h2>\n<pre>{}</pre>\n",
        escape(&markdown(records))
    );
    if !setup.is_empty() {
        out.push_str("<h2 id=\"setup\">Setup</h2>\n<ul>\n");
        for line in setup {
            let _ = writeln!(out, "<li>{}</li>", escape(line));
        }
        out.push_str("</ul>\n");
    }
    out.push_str("</body>\n</html>\n");
    out
}

/// Writes every chart of [`charts`] as `DIR/<stem>.svg`, creating `dir`; returns the paths.
pub fn write_svgs(dir: &Path, records: &[Record]) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)
        .map_err(|e| Error::InvalidArgument(format!("cannot create {}: {e}", dir.display())))?;
    let mut paths = Vec::new();
    for c in charts(records) {
        let path = dir.join(format!("{}.svg", c.stem));
        std::fs::write(&path, c.chart.svg())
            .map_err(|e| Error::InvalidArgument(format!("cannot write {}: {e}", path.display())))?;
        paths.push(path);
    }
    Ok(paths)
}

/// A name usable in a file name and an HTML id: `mkl:sorted` → `mkl-sorted`.
fn slug(name: &str) -> String {
    name.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect()
}

fn threads(n: usize) -> String {
    if n == 1 {
        "1 thread".into()
    } else {
        format!("{n} threads")
    }
}

fn is_peer(name: &str) -> bool {
    PEERS.contains(&peer_base(name))
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
            if is_peer(name) {
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

    /// For implementations measured at several thread counts (`name@N`): per operation and
    /// implementation, the classes every count ran and the geomean GFLOP/s over them per count,
    /// fewest threads first.
    fn scaling(&self) -> Vec<Scaling<'a>> {
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
        let mut out = Vec::new();
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
                let means = counts
                    .iter()
                    .map(|&(n, c)| {
                        let v: Vec<f64> = classes
                            .iter()
                            .map(|class| self.gflops[&(c, op, *class)])
                            .collect();
                        (n, geomean(&v))
                    })
                    .collect();
                out.push(Scaling {
                    operation: op,
                    base,
                    classes: classes.len(),
                    means,
                });
            }
        }
        out
    }

    /// The scaling table: geomean GFLOP/s per thread count and the speedup over the fewest.
    fn write_scaling(&self, out: &mut String) {
        let scaling = self.scaling();
        let Some(widest) = scaling.iter().map(|s| s.means.len()).max() else {
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
        for s in &scaling {
            let _ = write!(
                out,
                "| {} | {} ({} classes) |",
                s.operation, s.base, s.classes
            );
            for &(n, m) in &s.means {
                let _ = write!(
                    out,
                    " {n} threads: {} ({}) |",
                    number(m),
                    ratio(m / s.means[0].1)
                );
            }
            out.push_str(&" |".repeat(widest - s.means.len()));
            out.push('\n');
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

    /// Two classes, three of our implementations and a peer, each at one and two threads;
    /// opencl@2 fails on road.
    fn scaling_run() -> Vec<Record> {
        let seconds = [
            ("cpu", [0.5, 1.0, 0.25, 0.5]),
            ("cpu:RowRow", [0.4, 2.0, 0.2, 1.0]),
            ("opencl", [0.01, 0.1, 0.01, f64::NAN]),
            ("mkl", [1.0, 1.0, 0.5, 0.25]),
        ];
        let mut records = Vec::new();
        for (name, times) in seconds {
            for (k, t) in times.into_iter().enumerate() {
                records.push(Record {
                    implementation: format!("{name}@{}", 1 + k / 2),
                    class: ["banded", "road"][k % 2].into(),
                    operation: "spgemm".into(),
                    seconds: Some(t).filter(|t| !t.is_nan()),
                    flops: 1_000_000_000,
                    note: if t.is_nan() {
                        "out of memory".into()
                    } else {
                        String::new()
                    },
                });
            }
        }
        records
    }

    #[test]
    fn charts_of_a_scaling_run_with_a_peer() {
        let charts = charts(&scaling_run());
        let stems: Vec<&str> = charts.iter().map(|c| c.stem.as_str()).collect();
        assert_eq!(
            stems,
            ["gflops-spgemm", "speedup-spgemm-mkl", "scaling-spgemm"]
        );
        let svgs: Vec<String> = charts.iter().map(|c| c.chart.svg()).collect();
        for svg in &svgs {
            crate::svg::tests::well_formed(svg);
            assert_eq!(svg.matches("<svg ").count(), 1);
        }
        let bars = |svg: &str| svg.matches("<rect class=\"bar\"").count();
        let labels = |svg: &str| svg.matches("<text class=\"category\"").count();
        let legend = |svg: &str| svg.matches("<text class=\"legend\"").count();
        // GFLOP/s: 8 columns × 2 classes, less the failed one; 0.5 to 100 GFLOP/s is log.
        assert_eq!(
            (bars(&svgs[0]), labels(&svgs[0]), legend(&svgs[0])),
            (15, 2, 8)
        );
        assert!(svgs[0].contains("(log scale)"));
        assert!(svgs[0].contains("<title>cpu:RowRow@2, spgemm, banded: 5.00 GFLOP/s</title>"));
        assert!(svgs[0].contains(">banded</text>") && svgs[0].contains(">road</text>"));
        // Speedup: our default implementations over mkl at the same thread count.
        assert_eq!(
            (bars(&svgs[1]), labels(&svgs[1]), legend(&svgs[1])),
            (7, 2, 4)
        );
        assert!(svgs[1].contains(">cpu@2 / mkl@2</text>"));
        assert!(!svgs[1].contains("RowRow"));
        assert!(svgs[1].contains(
            "<title>cpu@2 / mkl@2, spgemm, road: 0.50× (2.00 against 4.00 GFLOP/s)</title>"
        ));
        assert!(svgs[1].contains("<title>opencl@1 / mkl@1, spgemm, banded: 100.00×"));
        assert!(svgs[1].contains("class=\"reference\""));
        // Scaling: one bar per implementation and count; opencl over banded only.
        assert_eq!(
            (bars(&svgs[2]), labels(&svgs[2]), legend(&svgs[2])),
            (8, 2, 4)
        );
        assert!(svgs[2].contains(">1 thread</text>") && svgs[2].contains(">2 threads</text>"));
        assert!(svgs[2].contains(
            "<title>cpu, spgemm, 2 threads: 2.83 GFLOP/s geomean over 2 classes, 2.00× over 1 thread</title>"
        ));
        assert!(svgs[2].contains("opencl, spgemm, 2 threads: 100 GFLOP/s geomean over 1 classes"));
        // One colour per implementation: cpu@1 in the GFLOP/s chart is cpu in the others.
        let cpu = crate::svg::colour(0);
        assert!(svgs.iter().all(|s| s.contains(cpu)));
    }

    #[test]
    fn one_thread_count_has_no_scaling_chart() {
        let charts = charts(&records());
        let stems: Vec<&str> = charts.iter().map(|c| c.stem.as_str()).collect();
        // spmv has no time for mkl, so no speedup chart; cusparse has no time at all.
        assert_eq!(
            stems,
            [
                "gflops-spgemm",
                "speedup-spgemm-scipy",
                "speedup-spgemm-mkl",
                "speedup-spgemm-mkl-sorted",
                "gflops-spmv"
            ]
        );
        assert!(super::charts(&[]).is_empty());
    }

    #[test]
    fn html_page_is_self_contained() {
        let page = html(&scaling_run(), &["cpu@1: 2 cores & <more>".into()]);
        crate::svg::tests::well_formed(&page);
        assert_eq!(page.matches("<svg ").count(), 3);
        assert!(!page.contains("<script"));
        // The only address is the SVG namespace, which is never fetched.
        assert_eq!(
            page.matches("http").count(),
            page.matches("xmlns=\"http://www.w3.org/2000/svg\"").count()
        );
        assert!(page.contains("<li>cpu@1: 2 cores &amp; &lt;more&gt;</li>"));
        assert!(page.contains("| spgemm | banded |"));
        let empty = html(&[], &[]);
        crate::svg::tests::well_formed(&empty);
        assert!(empty.contains("No measurement has a time."));
    }

    #[test]
    fn svg_files_per_chart() {
        let dir = std::env::temp_dir().join(format!("hetsparse-report-{}", std::process::id()));
        let paths = write_svgs(&dir, &scaling_run()).unwrap();
        let names: Vec<String> = paths
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            [
                "gflops-spgemm.svg",
                "speedup-spgemm-mkl.svg",
                "scaling-spgemm.svg"
            ]
        );
        let text = std::fs::read_to_string(&paths[0]).unwrap();
        assert!(text.starts_with("<svg xmlns="));
        std::fs::remove_dir_all(&dir).unwrap();
        // A directory that cannot be created is an error naming it.
        let blocked = dir.with_extension("file");
        std::fs::write(&blocked, "").unwrap();
        let e = write_svgs(&blocked.join("x"), &scaling_run()).unwrap_err();
        assert!(e.to_string().contains("cannot create"), "{e}");
        std::fs::remove_file(&blocked).unwrap();
    }

    #[test]
    fn geomean_of_powers() {
        assert!((geomean(&[1.0, 4.0, 16.0]) - 4.0).abs() < 1e-12);
        assert!(geomean(&[]).is_nan());
        assert_eq!(number(123.4), "123");
        assert_eq!(number(0.01234), "0.012");
    }
}
