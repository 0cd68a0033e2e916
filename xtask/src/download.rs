//! `cargo xtask download`: matrices of the SuiteSparse Matrix Collection into a cache folder.
//!
//! A matrix `Group/Name` is the archive `{base}/MM/{Group}/{Name}.tar.gz`, which unpacks to
//! `{Name}/{Name}.mtx` (sometimes with auxiliary `{Name}_*.mtx`). Steps for each matrix:
//! 1. `{cache}/{Group}/{Name}/{Name}.mtx` exists: nothing to do (that folder is only ever
//!    created by a rename after step 4, so its presence means a verified download);
//! 2. download to `{cache}/{Group}/{Name}.tar.gz.part`, resuming a partial file with an HTTP
//!    Range request, and check its size against the server's Content-Length/Content-Range;
//! 3. unpack into a staging folder;
//! 4. verify: the collection publishes no checksum (its index, `ssstats.csv`, holds group,
//!    name, shape and entries), so the `.mtx` header must parse and its shape must be the
//!    index's; then rename the staging folder into place and delete the archive.
//!
//! The index is downloaded once into `{cache}/ssstats.csv`; a bare `Name` is resolved through
//! it and must be unique.

use std::fs::{self, File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::sets;

const USAGE: &str = "usage: cargo xtask download [OPTIONS] NAME... | --set SET | --list-sets
  NAME               a SuiteSparse matrix, `Group/Name` (e.g. Williams/cant) or a `Name` that
                     the collection's index names once (e.g. cant)
  --set SET          every matrix of a named set (see --list-sets); may be repeated
  --list-sets        print the sets and their matrices
  --dir DIR          cache folder (default: $HETSPARSE_DATA, else $XDG_CACHE_HOME/hetsparse,
                     else ~/.cache/hetsparse)
  --base-url URL     the collection (default: $HETSPARSE_SUITESPARSE_URL, else
                     https://sparse.tamu.edu)
  --timeout SECS     give up on a connection that sends nothing for SECS seconds (default 60)
Matrices land in DIR/Group/Name/Name.mtx; a matrix already there is not downloaded again,
and an interrupted download resumes where it stopped.";

const DEFAULT_BASE_URL: &str = "https://sparse.tamu.edu";
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
const INDEX_FILE: &str = "ssstats.csv";

/// Where and how to download.
#[derive(Clone, Debug)]
pub struct Config {
    /// The collection's root URL, without a trailing slash.
    pub base_url: String,
    /// The cache folder.
    pub cache: PathBuf,
    /// How long a connection may send nothing before the download fails.
    pub timeout: Duration,
    /// Whether to draw progress bars (they are hidden anyway when stderr is not a terminal).
    pub progress: bool,
}

#[derive(Debug, Default, PartialEq)]
struct Options {
    names: Vec<String>,
    sets: Vec<String>,
    list_sets: bool,
    dir: Option<PathBuf>,
    base_url: Option<String>,
    timeout: Option<Duration>,
}

fn parse(args: &[String]) -> Result<Options, String> {
    let mut o = Options::default();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = |flag: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))
        };
        match arg.as_str() {
            "--set" => o.sets.push(value("--set")?),
            "--list-sets" => o.list_sets = true,
            "--dir" => o.dir = Some(value("--dir")?.into()),
            "--base-url" => o.base_url = Some(value("--base-url")?),
            "--timeout" => {
                let v = value("--timeout")?;
                let secs = v
                    .parse::<f64>()
                    .ok()
                    .filter(|s| s.is_finite() && *s > 0.0 && *s < 1e9)
                    .ok_or_else(|| {
                        format!("--timeout `{v}` is not a positive number of seconds")
                    })?;
                o.timeout = Some(Duration::from_secs_f64(secs));
            }
            "-h" | "--help" => return Err(USAGE.to_string()),
            flag if flag.starts_with('-') => {
                return Err(format!("unknown argument `{flag}`\n{USAGE}"))
            }
            name => o.names.push(name.to_string()),
        }
    }
    Ok(o)
}

/// The cache folder: `HETSPARSE_DATA`, else the user's cache folder.
pub fn default_cache() -> Result<PathBuf, String> {
    let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    if let Some(dir) = var("HETSPARSE_DATA") {
        return Ok(PathBuf::from(dir));
    }
    if let Some(dir) = var("XDG_CACHE_HOME") {
        return Ok(PathBuf::from(dir).join("hetsparse"));
    }
    if cfg!(windows) {
        if let Some(dir) = var("LOCALAPPDATA") {
            return Ok(PathBuf::from(dir).join("hetsparse"));
        }
    }
    if let Some(home) = var("HOME") {
        let base = PathBuf::from(home);
        return Ok(if cfg!(target_os = "macos") {
            base.join("Library/Caches/hetsparse")
        } else {
            base.join(".cache/hetsparse")
        });
    }
    Err("no cache folder: set HETSPARSE_DATA (or HOME) or pass --dir".into())
}

/// The configuration without options: the collection at `HETSPARSE_SUITESPARSE_URL` (else
/// its public address), the cache of [`default_cache`], a 60 s timeout, progress bars.
pub fn default_config() -> Result<Config, String> {
    let base_url = std::env::var("HETSPARSE_SUITESPARSE_URL")
        .ok()
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| DEFAULT_BASE_URL.into());
    Ok(Config {
        base_url: base_url.trim_end_matches('/').to_string(),
        cache: default_cache()?,
        timeout: DEFAULT_TIMEOUT,
        progress: true,
    })
}

/// Runs `cargo xtask download ARGS`.
pub fn run(args: &[String]) -> Result<(), String> {
    let o = parse(args)?;
    if o.list_sets {
        for set in sets::SETS {
            println!("{}: {}", set.name, set.about);
            for m in sets::members(set.name).unwrap_or_default() {
                println!("  {m}");
            }
        }
        return Ok(());
    }
    let mut wanted = o.names.clone();
    for set in &o.sets {
        let members = sets::members(set)
            .ok_or_else(|| format!("unknown set `{set}`; sets: {}", sets::names()))?;
        wanted.extend(members.into_iter().map(String::from));
    }
    if wanted.is_empty() {
        return Err(format!("name a matrix or a set\n{USAGE}"));
    }
    let mut config = default_config()?;
    if let Some(url) = o.base_url.filter(|u| !u.is_empty()) {
        config.base_url = url.trim_end_matches('/').to_string();
    }
    if let Some(dir) = o.dir {
        config.cache = dir;
    }
    if let Some(t) = o.timeout {
        config.timeout = t;
    }
    let paths = download_all(&config, &wanted)?;
    for p in paths {
        println!("{}", p.display());
    }
    Ok(())
}

/// Downloads every matrix in `wanted` (`Group/Name` or `Name`, duplicates once) and returns
/// the paths of their `.mtx` files. Tries them all, then reports every failure at once.
pub fn download_all(config: &Config, wanted: &[String]) -> Result<Vec<PathBuf>, String> {
    let mut ids: Vec<MatrixId> = Vec::new();
    for w in wanted {
        let id = MatrixId::parse(w)?;
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    let agent = ureq::AgentBuilder::new()
        .timeout_connect(config.timeout)
        .timeout_read(config.timeout)
        .timeout_write(config.timeout)
        .user_agent(concat!("hetsparse-xtask/", env!("CARGO_PKG_VERSION")))
        .build();
    let mut index: Option<Index> = None;
    let mut paths = Vec::new();
    let mut failures = Vec::new();
    for id in &ids {
        match fetch_matrix(config, &agent, id, &mut index) {
            Ok(p) => paths.push(p),
            Err(e) => failures.push(e),
        }
    }
    if failures.is_empty() {
        Ok(paths)
    } else {
        Err(format!(
            "{} of {} matrices failed:\n  {}",
            failures.len(),
            ids.len(),
            failures.join("\n  ")
        ))
    }
}

/// A matrix as named on the command line.
#[derive(Clone, Debug, PartialEq)]
struct MatrixId {
    group: Option<String>,
    name: String,
}

impl MatrixId {
    fn parse(s: &str) -> Result<MatrixId, String> {
        let (group, name) = match s.split_once('/') {
            Some((g, n)) => (Some(g), n),
            None => (None, s),
        };
        if let Some(g) = group {
            check_component(g).map_err(|e| format!("matrix `{s}`: group {e}"))?;
        }
        check_component(name).map_err(|e| format!("matrix `{s}`: name {e}"))?;
        Ok(MatrixId {
            group: group.map(String::from),
            name: name.to_string(),
        })
    }
}

/// A group or a name becomes a folder and part of a URL: letters, digits, `-`, `_`, `.`, `+`,
/// not starting with a dot.
fn check_component(c: &str) -> Result<(), String> {
    if c.is_empty() {
        return Err("is empty".into());
    }
    if c.starts_with('.') {
        return Err(format!("`{c}` starts with a dot"));
    }
    match c
        .chars()
        .find(|ch| !(ch.is_ascii_alphanumeric() || "-_.+".contains(*ch)))
    {
        Some(bad) => Err(format!("`{c}` has the character `{bad}`")),
        None => Ok(()),
    }
}

/// One row of the collection's index.
#[derive(Clone, Debug, PartialEq)]
struct Entry {
    group: String,
    name: String,
    rows: u64,
    cols: u64,
}

/// The collection's index, `ssstats.csv`: a count line, a date line, then one line per
/// matrix: `Group,Name,rows,cols,nnz,...`.
#[derive(Debug)]
struct Index {
    entries: Vec<Entry>,
}

impl Index {
    fn parse(text: &str, source: &Path) -> Result<Index, String> {
        let mut entries = Vec::new();
        for (i, line) in text.lines().enumerate().skip(2) {
            let line = line.trim();
            if line.is_empty() {
                continue;
            }
            let f: Vec<&str> = line.split(',').collect();
            let number = |k: usize, what: &str| {
                f.get(k)
                    .and_then(|v| v.trim().parse::<u64>().ok())
                    .ok_or_else(|| {
                        format!("{} line {}: no {what} in `{line}`", source.display(), i + 1)
                    })
            };
            if f.len() < 4 || f[0].is_empty() || f[1].is_empty() {
                return Err(format!(
                    "{} line {}: expected `Group,Name,rows,cols,...`, found `{line}`",
                    source.display(),
                    i + 1
                ));
            }
            entries.push(Entry {
                group: f[0].trim().to_string(),
                name: f[1].trim().to_string(),
                rows: number(2, "row count")?,
                cols: number(3, "column count")?,
            });
        }
        if entries.is_empty() {
            return Err(format!("{} lists no matrix", source.display()));
        }
        Ok(Index { entries })
    }

    /// The entry of `id`: its group and name, or its name alone when only one group has it.
    fn find(&self, id: &MatrixId) -> Result<&Entry, String> {
        let named: Vec<&Entry> = self.entries.iter().filter(|e| e.name == id.name).collect();
        match &id.group {
            Some(g) => named.into_iter().find(|e| &e.group == g).ok_or_else(|| {
                format!(
                    "{g}/{}: not in the collection's index{}",
                    id.name,
                    self.suggest(&id.name)
                )
            }),
            None => match named.as_slice() {
                [one] => Ok(one),
                [] => Err(format!(
                    "{}: no matrix of that name in the collection's index{}",
                    id.name,
                    self.suggest(&id.name)
                )),
                several => Err(format!(
                    "{}: several matrices have that name, say which: {}",
                    id.name,
                    several
                        .iter()
                        .map(|e| format!("{}/{}", e.group, e.name))
                        .collect::<Vec<_>>()
                        .join(", ")
                )),
            },
        }
    }

    /// ` (did you mean ...?)` for names that differ from `name` only in case.
    fn suggest(&self, name: &str) -> String {
        let close: Vec<String> = self
            .entries
            .iter()
            .filter(|e| e.name.eq_ignore_ascii_case(name))
            .map(|e| format!("{}/{}", e.group, e.name))
            .collect();
        if close.is_empty() {
            String::new()
        } else {
            format!(" (did you mean {}?)", close.join(", "))
        }
    }
}

/// The index, downloaded into the cache on first use.
fn load_index<'a>(
    config: &Config,
    agent: &ureq::Agent,
    index: &'a mut Option<Index>,
) -> Result<&'a Index, String> {
    if index.is_none() {
        let path = config.cache.join(INDEX_FILE);
        if !path.is_file() {
            create_dir(&config.cache)?;
            let url = format!("{}/files/{INDEX_FILE}", config.base_url);
            let part = config.cache.join(format!("{INDEX_FILE}.part"));
            download_file(config, agent, &url, &part, "index")?;
            rename(&part, &path)?;
        }
        let text = fs::read_to_string(&path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        *index = Some(Index::parse(&text, &path)?);
    }
    index
        .as_ref()
        .ok_or_else(|| "the collection's index is missing".to_string())
}

/// Downloads, unpacks and verifies one matrix, unless it is in the cache already.
fn fetch_matrix(
    config: &Config,
    agent: &ureq::Agent,
    id: &MatrixId,
    index: &mut Option<Index>,
) -> Result<PathBuf, String> {
    if let Some(group) = &id.group {
        let mtx = matrix_path(&config.cache, group, &id.name);
        if mtx.is_file() {
            eprintln!("{group}/{}: already in {}", id.name, mtx.display());
            return Ok(mtx);
        }
    }
    let entry = load_index(config, agent, index)?.find(id)?.clone();
    let (group, name) = (&entry.group, &entry.name);
    let mtx = matrix_path(&config.cache, group, name);
    if mtx.is_file() {
        eprintln!("{group}/{name}: already in {}", mtx.display());
        return Ok(mtx);
    }
    let group_dir = config.cache.join(group);
    create_dir(&group_dir)?;
    let archive = group_dir.join(format!("{name}.tar.gz"));
    let part = group_dir.join(format!("{name}.tar.gz.part"));
    if !archive.is_file() {
        let url = format!("{}/MM/{group}/{name}.tar.gz", config.base_url);
        download_file(config, agent, &url, &part, &format!("{group}/{name}"))?;
        rename(&part, &archive)?;
    }
    let staging = group_dir.join(format!(".{name}.unpacking"));
    let result = unpack_and_verify(&archive, &staging, &entry);
    if let Err(e) = result {
        // A complete archive that does not unpack or verify is bad: start afresh next time.
        let _ = fs::remove_dir_all(&staging);
        let _ = fs::remove_file(&archive);
        return Err(format!(
            "{group}/{name}: {e} (the archive was deleted; run again to download it anew)"
        ));
    }
    let dest = group_dir.join(name);
    if dest.exists() {
        // Left by hand or by another tool without its .mtx: replaced by the verified copy.
        fs::remove_dir_all(&dest).map_err(|e| format!("cannot clear {}: {e}", dest.display()))?;
    }
    rename(&staging.join(name), &dest)?;
    let _ = fs::remove_dir_all(&staging);
    fs::remove_file(&archive).map_err(|e| format!("cannot delete {}: {e}", archive.display()))?;
    eprintln!("{group}/{name}: {}", mtx.display());
    Ok(mtx)
}

/// `{cache}/{group}/{name}/{name}.mtx`.
pub fn matrix_path(cache: &Path, group: &str, name: &str) -> PathBuf {
    cache.join(group).join(name).join(format!("{name}.mtx"))
}

fn unpack_and_verify(archive: &Path, staging: &Path, entry: &Entry) -> Result<(), String> {
    if staging.exists() {
        fs::remove_dir_all(staging)
            .map_err(|e| format!("cannot clear {}: {e}", staging.display()))?;
    }
    create_dir(staging)?;
    let file =
        File::open(archive).map_err(|e| format!("cannot open {}: {e}", archive.display()))?;
    let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(BufReader::new(file)));
    tar.unpack(staging)
        .map_err(|e| format!("{} is not a valid .tar.gz: {e}", archive.display()))?;
    let mtx = staging
        .join(&entry.name)
        .join(format!("{}.mtx", entry.name));
    if !mtx.is_file() {
        return Err(format!(
            "{} holds no {}/{}.mtx",
            archive.display(),
            entry.name,
            entry.name
        ));
    }
    let header = read_header(&mtx)?;
    if (header.rows, header.cols) != (entry.rows, entry.cols) {
        return Err(format!(
            "{}: {}×{} in the file, {}×{} in the collection's index",
            mtx.display(),
            header.rows,
            header.cols,
            entry.rows,
            entry.cols
        ));
    }
    Ok(())
}

/// What the `.mtx` header says.
#[derive(Debug, PartialEq)]
pub struct Header {
    /// Rows.
    pub rows: u64,
    /// Columns.
    pub cols: u64,
    /// Stored entries (rows × columns for the array format).
    pub entries: u64,
}

/// Parses the banner and size line of a Matrix Market file.
pub fn read_header(path: &Path) -> Result<Header, String> {
    let file = File::open(path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    let mut lines = BufReader::new(file).lines();
    let mut next = |n: &mut usize| -> Result<Option<String>, String> {
        *n += 1;
        lines
            .next()
            .transpose()
            .map_err(|e| format!("{} line {n}: {e}", path.display()))
    };
    let mut n = 0;
    let banner = next(&mut n)?.ok_or_else(|| format!("{} is empty", path.display()))?;
    let words: Vec<String> = banner
        .split_whitespace()
        .map(|w| w.to_ascii_lowercase())
        .collect();
    if words.len() != 5 || words[0] != "%%matrixmarket" || words[1] != "matrix" {
        return Err(format!(
            "{} line 1: not a Matrix Market banner: `{banner}`",
            path.display()
        ));
    }
    let coordinate = match words[2].as_str() {
        "coordinate" => true,
        "array" => false,
        other => {
            return Err(format!(
                "{} line 1: unknown format `{other}`",
                path.display()
            ))
        }
    };
    loop {
        let Some(line) = next(&mut n)? else {
            return Err(format!("{} ends before its size line", path.display()));
        };
        let t = line.trim();
        if t.is_empty() || t.starts_with('%') {
            continue;
        }
        let nums: Option<Vec<u64>> = t.split_whitespace().map(|v| v.parse().ok()).collect();
        return match (nums.as_deref(), coordinate) {
            (Some(&[rows, cols, entries]), true) => Ok(Header {
                rows,
                cols,
                entries,
            }),
            (Some(&[rows, cols]), false) => Ok(Header {
                rows,
                cols,
                entries: rows.saturating_mul(cols),
            }),
            _ => Err(format!(
                "{} line {n}: expected the size line `rows cols{}`, found `{t}`",
                path.display(),
                if coordinate { " entries" } else { "" }
            )),
        };
    }
}

/// Downloads `url` into `part`, resuming what `part` holds, and checks its size against the
/// server's. On failure `part` keeps what arrived.
fn download_file(
    config: &Config,
    agent: &ureq::Agent,
    url: &str,
    part: &Path,
    label: &str,
) -> Result<u64, String> {
    let mut have = fs::metadata(part).map(|m| m.len()).unwrap_or(0);
    let mut request = agent.get(url);
    if have > 0 {
        request = request.set("Range", &format!("bytes={have}-"));
    }
    let response = match request.call() {
        Ok(r) => r,
        Err(ureq::Error::Status(416, _)) if have > 0 => {
            // The partial file is not a prefix the server can continue: start again.
            fs::remove_file(part).map_err(|e| format!("cannot delete {}: {e}", part.display()))?;
            return download_file(config, agent, url, part, label);
        }
        Err(ureq::Error::Status(404, _)) => {
            return Err(format!(
                "{label}: {url} does not exist (HTTP 404 Not Found)"
            ))
        }
        Err(ureq::Error::Status(code, r)) => {
            return Err(format!(
                "{label}: {url} answered HTTP {code} {}",
                r.status_text()
            ))
        }
        Err(ureq::Error::Transport(t)) => {
            return Err(format!(
                "{label}: cannot get {url}: {}",
                transport(&t, config)
            ))
        }
    };
    let length = response
        .header("Content-Length")
        .and_then(|v| v.trim().parse::<u64>().ok());
    let total = match response.status() {
        206 => {
            let range = response.header("Content-Range").unwrap_or_default();
            let (start, total) = parse_content_range(range).ok_or_else(|| {
                format!("{label}: {url} sent a partial answer with Content-Range `{range}`")
            })?;
            if start != have {
                return Err(format!(
                    "{label}: {url} resumed at byte {start}, not at byte {have} where {} ends",
                    part.display()
                ));
            }
            total
        }
        200 => {
            // A fresh download, or a server that ignores Range: start from zero.
            have = 0;
            length
        }
        other => {
            return Err(format!(
                "{label}: {url} answered HTTP {other} {}",
                response.status_text()
            ))
        }
    };
    let mut out = OpenOptions::new()
        .create(true)
        .write(true)
        .append(have > 0)
        .truncate(have == 0)
        .open(part)
        .map_err(|e| format!("cannot write {}: {e}", part.display()))?;
    let bar = progress_bar(config, total, have, label);
    let mut body = response.into_reader();
    let mut buf = vec![0u8; 1 << 16];
    let mut size = have;
    let read_error = loop {
        match body.read(&mut buf) {
            Ok(0) => break None,
            Ok(n) => {
                out.write_all(&buf[..n])
                    .map_err(|e| format!("cannot write {}: {e}", part.display()))?;
                size += n as u64;
                bar.set_position(size);
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => break Some(e),
        }
    };
    out.flush()
        .and_then(|()| out.sync_all())
        .map_err(|e| format!("cannot write {}: {e}", part.display()))?;
    bar.finish_and_clear();
    let of_total = total.map_or(String::new(), |t| format!(" of {t}"));
    if let Some(e) = read_error {
        let why = if matches!(
            e.kind(),
            std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock
        ) {
            format!("timed out: nothing arrived for {:?}", config.timeout)
        } else {
            e.to_string()
        };
        return Err(format!(
            "{label}: download of {url} stopped after {size}{of_total} bytes ({why}); run again to resume"
        ));
    }
    match total {
        Some(t) if size < t => Err(format!(
            "{label}: download of {url} was cut short at {size}{of_total} bytes; run again to resume"
        )),
        Some(t) if size > t => {
            let _ = fs::remove_file(part);
            Err(format!(
                "{label}: {url} sent {size} bytes, more than the {t} it announced; the partial file was deleted"
            ))
        }
        _ => Ok(size),
    }
}

/// A transport error, saying "timed out" plainly when it is one.
fn transport(t: &ureq::Transport, config: &Config) -> String {
    let timed_out = std::error::Error::source(t)
        .and_then(|s| s.downcast_ref::<std::io::Error>())
        .is_some_and(|e| {
            matches!(
                e.kind(),
                std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock
            )
        });
    if timed_out {
        format!("timed out: no answer within {:?} ({t})", config.timeout)
    } else {
        t.to_string()
    }
}

/// `bytes START-END/TOTAL` → (START, Some(TOTAL)); `TOTAL` may be `*`.
fn parse_content_range(v: &str) -> Option<(u64, Option<u64>)> {
    let rest = v.trim().strip_prefix("bytes ")?;
    let (range, total) = rest.split_once('/')?;
    let (start, _end) = range.split_once('-')?;
    let start = start.trim().parse().ok()?;
    let total = match total.trim() {
        "*" => None,
        t => Some(t.parse().ok()?),
    };
    Some((start, total))
}

fn progress_bar(config: &Config, total: Option<u64>, at: u64, label: &str) -> ProgressBar {
    let target = if config.progress {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::hidden()
    };
    let bar = ProgressBar::with_draw_target(total, target);
    let template = if total.is_some() {
        "{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} {eta}"
    } else {
        "{msg} {spinner} {bytes} {bytes_per_sec}"
    };
    if let Ok(style) = ProgressStyle::with_template(template) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(label.to_string());
    bar.set_position(at);
    bar
}

fn create_dir(dir: &Path) -> Result<(), String> {
    fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))
}

fn rename(from: &Path, to: &Path) -> Result<(), String> {
    fs::rename(from, to)
        .map_err(|e| format!("cannot move {} to {}: {e}", from.display(), to.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::net::{TcpListener, TcpStream};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::Instant;

    /// What the test server does for one path.
    enum Route {
        /// Serves the bytes, honouring `Range: bytes=N-`.
        Ok(Vec<u8>),
        /// The first answer announces every byte but sends only the first `cut` and closes;
        /// later answers are `Ok`.
        CutOnce(Vec<u8>, usize, AtomicBool),
        /// Sends headers and a few bytes, then nothing for two seconds.
        Stall,
    }

    /// Every request the test server saw: its path and its Range header (empty if none).
    type RequestLog = Mutex<Vec<(String, String)>>;

    /// An HTTP/1.1 server on 127.0.0.1 for the test's lifetime; paths without a route get a 404.
    /// Returns its base URL and the log of requests (`path` and the Range header).
    fn serve(routes: HashMap<String, Route>) -> (String, Arc<RequestLog>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let routes = Arc::new(routes);
        let log = Arc::new(Mutex::new(Vec::new()));
        let log2 = Arc::clone(&log);
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let routes = Arc::clone(&routes);
                let log = Arc::clone(&log2);
                std::thread::spawn(move || answer(stream, &routes, &log));
            }
        });
        (base, log)
    }

    fn answer(mut stream: TcpStream, routes: &HashMap<String, Route>, log: &RequestLog) {
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut first = String::new();
        if reader.read_line(&mut first).is_err() {
            return;
        }
        let path = first.split_whitespace().nth(1).unwrap_or("").to_string();
        let mut range = String::new();
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 || line.trim().is_empty() {
                break;
            }
            if let Some((k, v)) = line.split_once(':') {
                if k.eq_ignore_ascii_case("range") {
                    range = v.trim().to_string();
                }
            }
        }
        log.lock().unwrap().push((path.clone(), range.clone()));
        let full = |stream: &mut TcpStream, data: &[u8]| {
            let start = range
                .strip_prefix("bytes=")
                .and_then(|r| r.strip_suffix('-'))
                .and_then(|s| s.parse::<usize>().ok());
            let _ = match start {
                Some(s) if s >= data.len() => stream.write_all(
                    b"HTTP/1.1 416 Range Not Satisfiable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                ),
                Some(s) => {
                    let head = format!(
                        "HTTP/1.1 206 Partial Content\r\nContent-Length: {}\r\nContent-Range: bytes {s}-{}/{}\r\nConnection: close\r\n\r\n",
                        data.len() - s,
                        data.len() - 1,
                        data.len()
                    );
                    stream
                        .write_all(head.as_bytes())
                        .and_then(|()| stream.write_all(&data[s..]))
                }
                None => {
                    let head = format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                        data.len()
                    );
                    stream
                        .write_all(head.as_bytes())
                        .and_then(|()| stream.write_all(data))
                }
            };
        };
        match routes.get(&path) {
            Some(Route::Ok(data)) => full(&mut stream, data),
            Some(Route::CutOnce(data, cut, done)) => {
                if done.swap(true, Ordering::SeqCst) {
                    full(&mut stream, data);
                } else {
                    let head = format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                        data.len()
                    );
                    let _ = stream
                        .write_all(head.as_bytes())
                        .and_then(|()| stream.write_all(&data[..*cut]));
                }
            }
            Some(Route::Stall) => {
                let _ = stream.write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\nConnection: close\r\n\r\nabc",
                );
                let _ = stream.flush();
                std::thread::sleep(Duration::from_secs(2));
            }
            None => {
                let _ = stream.write_all(
                    b"HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\nConnection: close\r\n\r\nnot found",
                );
            }
        }
        let _ = stream.shutdown(std::net::Shutdown::Both);
    }

    /// A `.tar.gz` as the collection makes them: `{name}/{name}.mtx` (a `rows`×`rows`
    /// tridiagonal matrix) and an auxiliary `{name}/{name}_b.mtx`.
    fn archive(name: &str, rows: usize) -> Vec<u8> {
        let mut mtx = format!(
            "%%MatrixMarket matrix coordinate real general\n% test {name}\n{rows} {rows} {}\n",
            3 * rows - 2
        );
        for i in 1..=rows {
            for j in i.saturating_sub(1).max(1)..=(i + 1).min(rows) {
                mtx.push_str(&format!("{i} {j} {}.5\n", i * 7 + j));
            }
        }
        let aux = format!("%%MatrixMarket matrix array real general\n{rows} 1\n");
        let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        let mut tar = tar::Builder::new(gz);
        for (path, data) in [
            (format!("{name}/{name}.mtx"), mtx),
            (format!("{name}/{name}_b.mtx"), aux),
        ] {
            let mut h = tar::Header::new_gnu();
            h.set_size(data.len() as u64);
            h.set_mode(0o644);
            h.set_cksum();
            tar.append_data(&mut h, path, data.as_bytes()).unwrap();
        }
        tar.into_inner().unwrap().finish().unwrap()
    }

    const INDEX: &str = "5\n01-Jan-2026 00:00:00\n\
        Test,tiny,50,50,148,1,0,0,0,1,0,test,148\n\
        Test,big,3000,3000,8998,1,0,0,0,1,0,test,8998\n\
        Test,gone,4,4,10,1,0,0,0,1,0,test,10\n\
        Test,slow,4,4,10,1,0,0,0,1,0,test,10\n\
        Test,wrongshape,9,9,25,1,0,0,0,1,0,test,25\n\
        Test,junk,4,4,10,1,0,0,0,1,0,test,10\n\
        A,dup,4,4,10,1,0,0,0,1,0,test,10\n\
        B,dup,4,4,10,1,0,0,0,1,0,test,10\n";

    /// A fresh cache folder for one test.
    fn cache(test: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "hetsparse-xtask-download-{test}-{}",
            std::process::id()
        ));
        let _ = fs::remove_dir_all(&dir);
        dir
    }

    fn config(base: &str, cache: &Path, timeout_ms: u64) -> Config {
        Config {
            base_url: base.to_string(),
            cache: cache.to_path_buf(),
            timeout: Duration::from_millis(timeout_ms),
            progress: false,
        }
    }

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    fn index_route() -> (String, Route) {
        (
            "/files/ssstats.csv".into(),
            Route::Ok(INDEX.as_bytes().to_vec()),
        )
    }

    #[test]
    fn downloads_unpacks_verifies_and_then_does_nothing() {
        let (base, log) = serve(HashMap::from([
            index_route(),
            (
                "/MM/Test/tiny.tar.gz".into(),
                Route::Ok(archive("tiny", 50)),
            ),
        ]));
        let dir = cache("good");
        let cfg = config(&base, &dir, 5000);
        let paths = download_all(&cfg, &names(&["tiny"])).unwrap();
        let mtx = matrix_path(&dir, "Test", "tiny");
        assert_eq!(paths, vec![mtx.clone()]);
        assert_eq!(
            read_header(&mtx).unwrap(),
            Header {
                rows: 50,
                cols: 50,
                entries: 148
            }
        );
        assert!(dir.join("Test/tiny/tiny_b.mtx").is_file());
        assert!(!dir.join("Test/tiny.tar.gz").exists());
        assert!(!dir.join("Test/.tiny.unpacking").exists());
        let requests = log.lock().unwrap().len();
        assert_eq!(requests, 2, "{:?}", log.lock().unwrap());

        // Again, by either name: nothing is fetched.
        let again = download_all(&cfg, &names(&["Test/tiny", "tiny"])).unwrap();
        assert_eq!(again, vec![mtx.clone(), mtx]);
        assert_eq!(log.lock().unwrap().len(), requests);
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_cut_download_fails_and_the_next_call_resumes_it() {
        let data = archive("big", 3000);
        let cut = data.len() / 2;
        let (base, log) = serve(HashMap::from([
            index_route(),
            (
                "/MM/Test/big.tar.gz".into(),
                Route::CutOnce(data.clone(), cut, AtomicBool::new(false)),
            ),
        ]));
        let dir = cache("cut");
        let cfg = config(&base, &dir, 5000);
        let err = download_all(&cfg, &names(&["Test/big"])).unwrap_err();
        assert!(
            err.contains("Test/big") && err.contains("run again to resume"),
            "{err}"
        );
        assert_eq!(
            fs::metadata(dir.join("Test/big.tar.gz.part"))
                .unwrap()
                .len(),
            cut as u64
        );
        assert!(!matrix_path(&dir, "Test", "big").exists());

        let paths = download_all(&cfg, &names(&["Test/big"])).unwrap();
        assert_eq!(read_header(&paths[0]).unwrap().rows, 3000);
        let log = log.lock().unwrap();
        let last = log.last().unwrap();
        assert_eq!(last.0, "/MM/Test/big.tar.gz");
        assert_eq!(last.1, format!("bytes={cut}-"));
        assert!(!dir.join("Test/big.tar.gz.part").exists());
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn missing_matrices_are_clear_errors() {
        let (base, _) = serve(HashMap::from([index_route()]));
        let dir = cache("missing");
        let cfg = config(&base, &dir, 5000);
        let err = download_all(&cfg, &names(&["Test/gone"])).unwrap_err();
        assert!(
            err.contains("HTTP 404") && err.contains("/MM/Test/gone.tar.gz"),
            "{err}"
        );
        let err = download_all(&cfg, &names(&["Test/nothere"])).unwrap_err();
        assert!(err.contains("not in the collection's index"), "{err}");
        let err = download_all(&cfg, &names(&["TINY"])).unwrap_err();
        assert!(err.contains("did you mean Test/tiny?"), "{err}");
        let err = download_all(&cfg, &names(&["dup"])).unwrap_err();
        assert!(err.contains("A/dup, B/dup"), "{err}");

        // Without an index the collection cannot be reached at all.
        let (bare, _) = serve(HashMap::new());
        let err =
            download_all(&config(&bare, &cache("noindex"), 5000), &names(&["tiny"])).unwrap_err();
        assert!(
            err.contains("/files/ssstats.csv") && err.contains("404"),
            "{err}"
        );
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_stalled_server_times_out() {
        let (base, _) = serve(HashMap::from([
            index_route(),
            ("/MM/Test/slow.tar.gz".into(), Route::Stall),
        ]));
        let dir = cache("stall");
        let start = Instant::now();
        let err = download_all(&config(&base, &dir, 300), &names(&["Test/slow"])).unwrap_err();
        assert!(start.elapsed() < Duration::from_millis(1800), "{err}");
        assert!(
            err.contains("timed out") && err.contains("run again to resume"),
            "{err}"
        );
        assert_eq!(
            fs::metadata(dir.join("Test/slow.tar.gz.part"))
                .unwrap()
                .len(),
            3
        );
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn bad_archives_are_rejected_and_deleted() {
        let (base, _) = serve(HashMap::from([
            index_route(),
            (
                "/MM/Test/junk.tar.gz".into(),
                Route::Ok(b"not gzip".to_vec()),
            ),
            (
                "/MM/Test/wrongshape.tar.gz".into(),
                Route::Ok(archive("wrongshape", 8)),
            ),
        ]));
        let dir = cache("bad");
        let cfg = config(&base, &dir, 5000);
        let err = download_all(&cfg, &names(&["Test/junk", "Test/wrongshape"])).unwrap_err();
        assert!(err.starts_with("2 of 2 matrices failed"), "{err}");
        assert!(err.contains("not a valid .tar.gz"), "{err}");
        assert!(
            err.contains("8×8 in the file, 9×9 in the collection's index"),
            "{err}"
        );
        assert!(!dir.join("Test/junk.tar.gz").exists());
        assert!(!dir.join("Test/wrongshape").exists());
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn headers_parse_or_say_what_is_wrong() {
        let dir = cache("headers");
        fs::create_dir_all(&dir).unwrap();
        let check = |text: &str| {
            let p = dir.join("m.mtx");
            fs::write(&p, text).unwrap();
            read_header(&p)
        };
        assert_eq!(
            check("%%MatrixMarket matrix coordinate pattern symmetric\n%c\n\n3 4 5\n1 1\n")
                .unwrap(),
            Header {
                rows: 3,
                cols: 4,
                entries: 5
            }
        );
        assert_eq!(
            check("%%MatrixMarket matrix array real general\n3 2\n")
                .unwrap()
                .entries,
            6
        );
        assert!(check("").unwrap_err().contains("is empty"));
        assert!(check("hello\n").unwrap_err().contains("line 1"));
        assert!(
            check("%%MatrixMarket matrix coordinate real general\n3 x 5\n")
                .unwrap_err()
                .contains("line 2")
        );
        assert!(
            check("%%MatrixMarket matrix coordinate real general\n3 3\n")
                .unwrap_err()
                .contains("rows cols entries")
        );
        assert!(check("%%MatrixMarket matrix coordinate real general\n%\n")
            .unwrap_err()
            .contains("ends before"));
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn names_indexes_ranges_and_flags() {
        assert_eq!(
            MatrixId::parse("Williams/cant").unwrap(),
            MatrixId {
                group: Some("Williams".into()),
                name: "cant".into()
            }
        );
        assert!(MatrixId::parse("conf5_4-8x8-05").is_ok());
        for bad in ["../x", "a/b/c", "", "a/", "x y", ".hidden"] {
            assert!(MatrixId::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(
            parse_content_range("bytes 10-99/100"),
            Some((10, Some(100)))
        );
        assert_eq!(parse_content_range("bytes 10-99/*"), Some((10, None)));
        assert_eq!(parse_content_range("items 1-2/3"), None);
        let src = Path::new("ssstats.csv");
        assert!(Index::parse("1\ndate\nG,n,x,3\n", src)
            .unwrap_err()
            .contains("line 3: no row count"));
        assert!(Index::parse("0\ndate\n", src)
            .unwrap_err()
            .contains("no matrix"));
        assert_eq!(Index::parse(INDEX, src).unwrap().entries.len(), 8);

        let args = |s: &str| s.split_whitespace().map(String::from).collect::<Vec<_>>();
        let o = parse(&args(
            "cant --set spgemm --dir /d --base-url http://h:1 --timeout 0.5 Williams/consph",
        ))
        .unwrap();
        assert_eq!(o.names, ["cant", "Williams/consph"]);
        assert_eq!(o.sets, ["spgemm"]);
        assert_eq!(o.dir, Some(PathBuf::from("/d")));
        assert_eq!(o.timeout, Some(Duration::from_millis(500)));
        assert!(parse(&args("--timeout 0"))
            .unwrap_err()
            .contains("positive"));
        assert!(parse(&args("--set")).unwrap_err().contains("needs a value"));
        assert!(parse(&args("--fast"))
            .unwrap_err()
            .contains("unknown argument"));
        assert!(run(&args("--set nope"))
            .unwrap_err()
            .contains("unknown set `nope`"));
        assert!(run(&[]).unwrap_err().contains("name a matrix or a set"));
    }
}
