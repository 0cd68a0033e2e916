//! The GPU benchmark's one table: our SpGEMM at GPU sizes (the CPU backend, CUDA on resident
//! operands and from host memory, as `benches/benches/gpu_spgemm.rs` times them) beside
//! cuSPARSE on device data and in whole calls (as `benches/peers/cusparse_spgemm.py` times
//! it, on the operands the bench wrote), with the ratios the CUDA goals are stated in.
//!
//! Classes where cuSPARSE's product has another entry count than the CPU backend's (it
//! returns an empty product past 2^31 intermediate products) or where it failed are listed
//! apart and left out of the geometric means.

use std::collections::HashMap;
use std::fmt::Write;

/// Our times of one class, milliseconds (minimum of the timed calls).
#[derive(Clone, Debug, PartialEq)]
pub struct OursRow {
    /// Class name, as the peer script's manifest has it.
    pub class: String,
    /// Intermediate products of the product.
    pub products: u64,
    /// Entries of C (the CPU backend's).
    pub nnz: u64,
    /// The CPU backend.
    pub cpu_ms: f64,
    /// CUDA on resident operands.
    pub resident_ms: f64,
    /// CUDA from host memory (upload, product, download), where it was timed.
    pub from_host_ms: Option<f64>,
}

/// cuSPARSE's result for one class, from the peer script's table.
#[derive(Clone, Debug, PartialEq)]
pub enum PeerRow {
    /// Timed, with the right entry count: milliseconds on device data and in a whole call.
    Timed {
        /// On matrices already on the GPU.
        device_ms: f64,
        /// With the copies to and from the GPU.
        whole_ms: f64,
    },
    /// Not timed: what the script said instead (a wrong entry count, an error).
    Failed(String),
}

/// The rows of the peer script's markdown table by class (the first row of a class where it
/// appears twice). Lines that are not rows of that table are skipped.
pub fn parse_cusparse_table(text: &str) -> HashMap<String, PeerRow> {
    let mut rows = HashMap::new();
    for line in text.lines() {
        let cells: Vec<&str> = line
            .trim()
            .trim_matches('|')
            .split('|')
            .map(str::trim)
            .collect();
        if !line.trim_start().starts_with('|') || cells.len() != 7 {
            continue;
        }
        let class = cells[0];
        if class == "class" || class.starts_with("---") {
            continue;
        }
        let minimum = |cell: &str| {
            cell.split('/')
                .next()
                .and_then(|m| m.trim().parse::<f64>().ok())
        };
        let row = match (minimum(cells[4]), minimum(cells[5])) {
            (Some(device_ms), Some(whole_ms)) => PeerRow::Timed {
                device_ms,
                whole_ms,
            },
            _ => PeerRow::Failed(format!("nnz(C) {}", cells[3])),
        };
        rows.entry(class.to_string()).or_insert(row);
    }
    rows
}

/// Geometric mean of `ratios` (`None` for none).
fn geometric_mean(ratios: &[f64]) -> Option<f64> {
    if ratios.is_empty() {
        return None;
    }
    Some((ratios.iter().map(|r| r.ln()).sum::<f64>() / ratios.len() as f64).exp())
}

fn ratio_cell(r: Option<f64>) -> String {
    r.map_or_else(|| "–".into(), |r| format!("{r:.2}×"))
}

/// The combined markdown table, its geometric means, and the classes cuSPARSE got wrong.
pub fn combined_table(ours: &[OursRow], peers: &HashMap<String, PeerRow>) -> String {
    let mut out = String::new();
    out.push_str(
        "| class | products | nnz(C) | cpu | cuda resident | cuda from host | cuSPARSE device \
         | cuSPARSE whole call | resident vs cuSPARSE | from host vs cuSPARSE whole call \
         | from host vs cpu | resident GFLOP/s |\n",
    );
    out.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    let (mut vs_device, mut vs_whole, mut vs_cpu) = (Vec::new(), Vec::new(), Vec::new());
    let mut apart = Vec::new();
    for o in ours {
        let host = o.from_host_ms;
        let over_cpu = host.map(|h| o.cpu_ms / h);
        vs_cpu.extend(over_cpu);
        let (device, whole, r_device, r_whole) = match peers.get(&o.class) {
            Some(PeerRow::Timed {
                device_ms,
                whole_ms,
            }) => {
                let r_device = device_ms / o.resident_ms;
                let r_whole = host.map(|h| whole_ms / h);
                vs_device.push(r_device);
                vs_whole.extend(r_whole);
                (
                    format!("{device_ms:.2}"),
                    format!("{whole_ms:.2}"),
                    Some(r_device),
                    r_whole,
                )
            }
            Some(PeerRow::Failed(why)) => {
                apart.push(format!("{}: {why}", o.class));
                ("wrong".into(), "wrong".into(), None, None)
            }
            None => ("–".into(), "–".into(), None, None),
        };
        let gflops = 2.0 * o.products as f64 / (o.resident_ms * 1e-3) / 1e9;
        let _ = writeln!(
            out,
            "| {} | {} | {} | {:.2} | {:.2} | {} | {device} | {whole} | {} | {} | {} | {gflops:.1} |",
            o.class,
            o.products,
            o.nnz,
            o.cpu_ms,
            o.resident_ms,
            host.map_or_else(|| "–".into(), |h| format!("{h:.2}")),
            ratio_cell(r_device),
            ratio_cell(r_whole),
            ratio_cell(over_cpu),
        );
    }
    let mean = |v: &[f64]| ratio_cell(geometric_mean(v));
    let _ = writeln!(
        out,
        "\nGeometric means: resident vs cuSPARSE device {} ({} classes), from host vs \
         cuSPARSE whole call {}, from host vs cpu {}.",
        mean(&vs_device),
        vs_device.len(),
        mean(&vs_whole),
        mean(&vs_cpu),
    );
    if !apart.is_empty() {
        let _ = writeln!(
            out,
            "cuSPARSE wrong or failed (left out of the means; our products were checked \
             against the CPU backend's): {}.",
            apart.join("; ")
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const PEER: &str =
        "cuSPARSE through CuPy 14.2.0, CUDA runtime 13020, NVIDIA H200; min / median of 3, ms

| class | products | nnz(C) expected | nnz(C) cuSPARSE | device | whole call | device GFLOP/s |
|---|---:|---:|---:|---:|---:|---:|
| stencil3d | 909853209 | 51618051 | 51618051 | 33.45 / 33.64 | 299.25 / 303.76 | 54.4 |
| powerlaw | 2900000000 | 18 | 0 (wrong) | – | – | – |
| road | 197569792 | 124825198 | failed: OutOfMemoryError: out of memory | – | – | – |
| stencil3d | 909853209 | 51618051 | 51618051 | 40.00 / 41.00 | 300.00 / 301.00 | 50.0 |
";

    fn ours(class: &str, resident_ms: f64, from_host_ms: Option<f64>) -> OursRow {
        OursRow {
            class: class.into(),
            products: 1_000_000_000,
            nnz: 10,
            cpu_ms: 100.0,
            resident_ms,
            from_host_ms,
        }
    }

    #[test]
    fn peer_rows_keep_the_first_time_and_what_went_wrong() {
        let rows = parse_cusparse_table(PEER);
        assert_eq!(rows.len(), 3);
        assert_eq!(
            rows["stencil3d"],
            PeerRow::Timed {
                device_ms: 33.45,
                whole_ms: 299.25
            }
        );
        assert_eq!(rows["powerlaw"], PeerRow::Failed("nnz(C) 0 (wrong)".into()));
        assert!(matches!(&rows["road"], PeerRow::Failed(w) if w.contains("OutOfMemoryError")));
    }

    #[test]
    fn ratios_and_means_leave_out_wrong_classes() {
        let rows = parse_cusparse_table(PEER);
        let table = combined_table(
            &[
                ours("stencil3d", 16.725, Some(50.0)),
                ours("powerlaw", 10.0, Some(80.0)),
                ours("uniform", 5.0, None),
            ],
            &rows,
        );
        let lines: Vec<&str> = table.lines().collect();
        // stencil: 33.45 / 16.725 = 2x on device data, 299.25 / 50 = 5.985x whole, cpu 2x.
        assert!(
            lines[2].contains("| 2.00× | 5.99× | 2.00× | 119.6 |"),
            "{}",
            lines[2]
        );
        assert!(
            lines[3].contains("| wrong | wrong | – | – | 1.25× |"),
            "{}",
            lines[3]
        );
        assert!(
            lines[4].contains("| – | – | – | – | – | – |"),
            "{}",
            lines[4]
        );
        assert!(
            table.contains("resident vs cuSPARSE device 2.00× (1 classes)"),
            "{table}"
        );
        assert!(table.contains("from host vs cpu 1.58×"), "{table}");
        assert!(table.contains("powerlaw: nnz(C) 0 (wrong)"), "{table}");
    }
}
