//! Result files: one tab-separated line per (implementation, class, operation), written by
//! `hetsparse-bench time` and by the peers' script, read by `hetsparse-bench report`.
//!
//! Columns: `implementation  class  operation  seconds  flops  note`. `seconds` is the median
//! run time, empty when there is no time (`note` then says why). A line with class and
//! operation `*` says that a whole implementation is missing. Lines starting with `#` are
//! comments.

use std::fmt::Write as _;

use hetsparse_core::{Error, Result};

/// The header line of every result file.
pub const HEADER: &str = "implementation\tclass\toperation\tseconds\tflops\tnote";

/// One measured (or failed) operation.
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    /// Who ran it: a backend (with `:Algorithm` for a chosen SpGEMM algorithm) or a peer.
    pub implementation: String,
    /// Matrix class name, or `*` for the whole implementation.
    pub class: String,
    /// `spgemm`, `spmm32` or `spmv`, or `*`.
    pub operation: String,
    /// Median seconds of one run; `None` when it failed or is missing.
    pub seconds: Option<f64>,
    /// Floating-point operations of one run (two per intermediate product).
    pub flops: u64,
    /// Why there is no time, or a remark on it.
    pub note: String,
}

impl Record {
    /// GFLOP/s, when there is a positive time.
    pub fn gflops(&self) -> Option<f64> {
        self.seconds
            .filter(|&s| s > 0.0)
            .map(|s| self.flops as f64 / s / 1e9)
    }
}

/// Renders records as a result file: the header, `comments` as `# ` lines (what ran, on
/// which machine), then the records.
pub fn to_tsv(comments: &[String], records: &[Record]) -> String {
    let mut out = String::from(HEADER);
    out.push('\n');
    for c in comments {
        let _ = writeln!(out, "# {}", c.replace('\n', " "));
    }
    for r in records {
        let seconds = r.seconds.map(|s| format!("{s:.9}")).unwrap_or_default();
        // Tabs and newlines inside a note would break the columns.
        let note: String = r
            .note
            .chars()
            .map(|c| if c == '\t' || c == '\n' { ' ' } else { c })
            .collect();
        let _ = writeln!(
            out,
            "{}\t{}\t{}\t{seconds}\t{}\t{note}",
            r.implementation, r.class, r.operation, r.flops
        );
    }
    out
}

/// The `# ` comment lines of a result file, without the marker.
pub fn comments(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix('#'))
        .map(|c| c.trim().to_string())
        .collect()
}

/// Parses a result file; `source` names it in errors.
pub fn parse_tsv(text: &str, source: &str) -> Result<Vec<Record>> {
    let mut records = Vec::new();
    for (k, line) in text.lines().enumerate() {
        if line.is_empty() || line.starts_with('#') || line == HEADER {
            continue;
        }
        let bad = |what: String| Error::InvalidArgument(format!("{source}:{}: {what}", k + 1));
        let fields: Vec<&str> = line.split('\t').collect();
        if fields.len() != 6 {
            return Err(bad(format!(
                "expected 6 tab-separated fields, found {}",
                fields.len()
            )));
        }
        let seconds = match fields[3] {
            "" => None,
            s => Some(
                s.parse::<f64>()
                    .map_err(|e| bad(format!("seconds `{s}`: {e}")))?,
            ),
        };
        let flops = fields[4]
            .parse::<u64>()
            .map_err(|e| bad(format!("flops `{}`: {e}", fields[4])))?;
        records.push(Record {
            implementation: fields[0].to_string(),
            class: fields[1].to_string(),
            operation: fields[2].to_string(),
            seconds,
            flops,
            note: fields[5].to_string(),
        });
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(seconds: Option<f64>, note: &str) -> Record {
        Record {
            implementation: "cpu:RowRow".into(),
            class: "banded".into(),
            operation: "spgemm".into(),
            seconds,
            flops: 4_000_000_000,
            note: note.into(),
        }
    }

    #[test]
    fn round_trip() {
        let records = vec![record(Some(0.5), ""), record(None, "no device")];
        let text = to_tsv(&["cpu: 2 threads".into()], &records);
        assert_eq!(parse_tsv(&text, "t").unwrap(), records);
        assert_eq!(comments(&text), vec!["cpu: 2 threads".to_string()]);
        assert_eq!(records[0].gflops(), Some(8.0));
        assert_eq!(records[1].gflops(), None);
    }

    #[test]
    fn notes_cannot_break_columns() {
        let text = to_tsv(&[], &[record(None, "a\tb\nc")]);
        assert_eq!(parse_tsv(&text, "t").unwrap()[0].note, "a b c");
    }

    #[test]
    fn errors_name_the_line() {
        let e = parse_tsv("# c\nx\ty\n", "peers.tsv").unwrap_err();
        assert!(e.to_string().starts_with("peers.tsv:2:"), "{e}");
        let e = parse_tsv("a\tb\tc\tfast\t1\t\n", "f").unwrap_err();
        assert!(e.to_string().contains("seconds `fast`"), "{e}");
    }
}
