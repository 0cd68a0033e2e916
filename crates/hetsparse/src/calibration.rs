//! The calibration file: per device and operation, how far the cost model is off (the factor
//! of measured over predicted time) and the per-call cost, measured on this machine
//! ([`Context::calibrate`](crate::Context::calibrate)) or learned from real runs, kept between
//! processes like FFTW's wisdom.
//!
//! The file is `calibration.txt` in the cache directory ([`CalibrationCache`]), a line format:
//!
//! ```text
//! hetsparse-calibration 2
//! library 0.1.0
//! entry<TAB>cpu|AMD EPYC 9654|-|16<TAB>spgemm<TAB>1.3e0<TAB>2.1e-5<TAB>calibrated
//! entry<TAB>cuda|NVIDIA H200|13.0|132<TAB>spmv<TAB>8.5e-1<TAB>3.0e-4<TAB>learned
//! end 2
//! ```
//!
//! An entry names the device by its key (backend, name, driver version, compute units), the
//! operation, the factor by which whole calls from host memory took longer than the model
//! predicted for their copies and computing, and the per-call cost (seconds). Version 1
//! files (speeds in work units per second) are ignored as another format. A file from another library version or format, or one that does
//! not parse, or whose `end` line is missing or counts otherwise (a truncated file), is
//! ignored whole with a warning. Writers write a temporary file in the same directory and
//! rename it over the old one, so a reader sees a whole file whoever wrote last.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use hetsparse_core::{Backend, Scalar};
use hetsparse_sched::{Measured, OpKind};

/// The library version a calibration belongs to: one measured by another is stale.
pub const LIBRARY_VERSION: &str = env!("CARGO_PKG_VERSION");

/// The file's first line: its format, version 2.
const HEADER: &str = "hetsparse-calibration 2";

/// The file's name in the cache directory.
pub const FILE_NAME: &str = "calibration.txt";

/// Where a context keeps its calibration.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum CalibrationCache {
    /// `$HETSPARSE_CACHE_DIR` (empty or `off`: no file), else `$XDG_CACHE_HOME/hetsparse`,
    /// else `~/.cache/hetsparse` (`$HOME`); no file when none is set.
    #[default]
    FromEnvironment,
    /// This directory.
    Dir(PathBuf),
    /// No file: nothing is loaded or saved.
    Off,
}

impl CalibrationCache {
    /// The calibration file's path, `None` when disabled or no directory is known.
    pub fn file(&self) -> Option<PathBuf> {
        let dir = match self {
            CalibrationCache::Off => return None,
            CalibrationCache::Dir(dir) => dir.clone(),
            CalibrationCache::FromEnvironment => {
                let var = |name: &str| std::env::var_os(name);
                match var("HETSPARSE_CACHE_DIR") {
                    Some(v) if v.is_empty() || v.eq_ignore_ascii_case("off") => return None,
                    Some(v) => PathBuf::from(v),
                    None => match var("XDG_CACHE_HOME").filter(|v| !v.is_empty()) {
                        Some(xdg) => PathBuf::from(xdg).join("hetsparse"),
                        None => PathBuf::from(var("HOME").filter(|v| !v.is_empty())?)
                            .join(".cache")
                            .join("hetsparse"),
                    },
                }
            }
        };
        Some(dir.join(FILE_NAME))
    }
}

/// How an entry was measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// By a calibration run.
    Calibrated,
    /// From real runs' speeds.
    Learned,
}

impl Origin {
    fn name(self) -> &'static str {
        match self {
            Origin::Calibrated => "calibrated",
            Origin::Learned => "learned",
        }
    }
}

/// One device's speed for one operation, as stored.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Entry {
    /// Speed and per-call cost.
    pub measured: Measured,
    /// How it was measured.
    pub origin: Origin,
}

/// The entries of a calibration file, by device key and operation.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Calibration {
    /// Every entry.
    pub entries: BTreeMap<(String, OpKind), Entry>,
}

/// A device's key in the file: backend, name, driver version and compute units, joined by
/// `|` (tabs and line breaks made spaces).
pub fn device_key<T: Scalar>(backend: &dyn Backend<T>) -> String {
    let info = backend.info();
    let driver = backend.driver_version().unwrap_or_else(|| "-".into());
    format!(
        "{}|{}|{}|{}",
        info.backend, info.name, driver, info.compute_units
    )
    .chars()
    .map(|c| if c.is_control() { ' ' } else { c })
    .collect()
}

impl Calibration {
    /// The entry of device `key` for `op`.
    pub fn get(&self, key: &str, op: OpKind) -> Option<&Entry> {
        self.entries.get(&(key.to_string(), op))
    }

    /// The file's text.
    pub fn render(&self) -> String {
        let mut text = format!("{HEADER}\nlibrary {LIBRARY_VERSION}\n");
        for ((key, op), e) in &self.entries {
            // Writing to a String cannot fail.
            let _ = writeln!(
                text,
                "entry\t{key}\t{op}\t{:e}\t{:e}\t{}",
                e.measured.factor,
                e.measured.per_call,
                e.origin.name()
            );
        }
        let _ = writeln!(text, "end {}", self.entries.len());
        text
    }

    /// Parses a file's text; `Err` says why it is not used.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut lines = text.lines();
        if lines.next() != Some(HEADER) {
            return Err(format!(
                "not a calibration file of this format (`{HEADER}`)"
            ));
        }
        match lines.next().and_then(|l| l.strip_prefix("library ")) {
            Some(v) if v == LIBRARY_VERSION => {}
            Some(v) => {
                return Err(format!(
                    "written by hetsparse {v}, this is {LIBRARY_VERSION} (stale)"
                ))
            }
            None => return Err("no `library` line".into()),
        }
        let mut entries = BTreeMap::new();
        for (n, line) in lines.enumerate() {
            let at = n + 3;
            if let Some(count) = line.strip_prefix("end ") {
                let count: usize = count
                    .trim()
                    .parse()
                    .map_err(|_| format!("line {at}: a bad `end` line"))?;
                if count != entries.len() {
                    return Err(format!(
                        "line {at}: {} entries where `end` counts {count} (truncated?)",
                        entries.len()
                    ));
                }
                return Ok(Calibration { entries });
            }
            let fields: Vec<&str> = line.split('\t').collect();
            let [tag, key, op, factor, per_call, origin] = fields[..] else {
                return Err(format!("line {at}: not an entry"));
            };
            let op: OpKind = op
                .parse()
                .map_err(|_| format!("line {at}: no operation `{op}`"))?;
            let number = |s: &str| s.trim().parse::<f64>().ok();
            let measured = match (number(factor), number(per_call)) {
                (Some(factor), Some(per_call)) => Measured { factor, per_call },
                _ => return Err(format!("line {at}: not numbers")),
            };
            let origin = match origin {
                "calibrated" => Origin::Calibrated,
                "learned" => Origin::Learned,
                other => return Err(format!("line {at}: unknown origin `{other}`")),
            };
            if tag != "entry" || key.is_empty() || !measured.is_valid() {
                return Err(format!("line {at}: not a valid entry"));
            }
            entries.insert((key.to_string(), op), Entry { measured, origin });
        }
        Err("no `end` line (truncated?)".into())
    }

    /// The file at `path`; an empty calibration, with a `tracing` warning saying why, when it
    /// is corrupted, truncated, stale or unreadable (quietly when it does not exist).
    pub fn load(path: &Path) -> Self {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Self::default(),
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "calibration file not read; ignored");
                return Self::default();
            }
        };
        match Self::parse(&text) {
            Ok(c) => {
                tracing::debug!(path = %path.display(), entries = c.entries.len(), "calibration loaded");
                c
            }
            Err(why) => {
                tracing::warn!(path = %path.display(), "calibration file ignored: {why}");
                Self::default()
            }
        }
    }

    /// Writes these entries to `path` over those of the file there (entries of other
    /// devices kept), through a temporary file in the same directory renamed over it.
    pub fn save(&self, path: &Path) -> std::io::Result<()> {
        let mut merged = Self::load(path);
        merged.entries.extend(self.entries.clone());
        let dir = path.parent().unwrap_or_else(|| Path::new("."));
        std::fs::create_dir_all(dir)?;
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let temporary = dir.join(format!(
            ".{FILE_NAME}.{}.{:?}.{nanos}.tmp",
            std::process::id(),
            std::thread::current().id()
        ));
        let written = (|| {
            let mut file = std::fs::File::create(&temporary)?;
            file.write_all(merged.render().as_bytes())?;
            file.sync_all()?;
            std::fs::rename(&temporary, path)
        })();
        if written.is_err() {
            let _ = std::fs::remove_file(&temporary);
        }
        written
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Calibration {
        let mut c = Calibration::default();
        c.entries.insert(
            ("cpu|Some CPU|-|16".into(), OpKind::Spgemm),
            Entry {
                measured: Measured {
                    factor: 1.3125,
                    per_call: 2.5e-5,
                },
                origin: Origin::Calibrated,
            },
        );
        c.entries.insert(
            ("cuda|NVIDIA H200|12.4|132".into(), OpKind::Spmv),
            Entry {
                measured: Measured {
                    factor: 1.0 / 3.0,
                    per_call: 3e-4,
                },
                origin: Origin::Learned,
            },
        );
        c
    }

    #[test]
    fn entries_round_trip_through_the_text() {
        let c = sample();
        assert_eq!(Calibration::parse(&c.render()).unwrap(), c);
        assert_eq!(
            Calibration::parse(&Calibration::default().render()).unwrap(),
            Calibration::default()
        );
    }

    #[test]
    fn a_damaged_or_foreign_file_is_refused() {
        let text = sample().render();
        // Every cut short of the whole text is refused (the last line counts the entries).
        for cut in 0..text.len() - 1 {
            if text.is_char_boundary(cut) {
                assert!(Calibration::parse(&text[..cut]).is_err(), "cut at {cut}");
            }
        }
        let other = text.replace(&format!("library {LIBRARY_VERSION}"), "library 0.0.0-other");
        assert!(Calibration::parse(&other).unwrap_err().contains("stale"));
        for bad in [
            text.replace("1.3125e0", "fast"),
            text.replace("1.3125e0", "-1"),
            text.replace("1.3125e0", "NaN"),
            text.replace("spgemm", "gemm"),
            text.replace("calibrated", "guessed"),
            text.replace("end 2", "end 3"),
            text.replace('\t', " "),
            "\u{0}\u{1}garbage".into(),
        ] {
            assert!(Calibration::parse(&bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_directory_comes_from_the_environment_or_is_given() {
        let dir = PathBuf::from("/some/where");
        assert_eq!(
            CalibrationCache::Dir(dir.clone()).file(),
            Some(dir.join(FILE_NAME))
        );
        assert_eq!(CalibrationCache::Off.file(), None);
    }
}
