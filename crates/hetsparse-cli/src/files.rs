//! Reading Matrix Market files with a progress bar, and writing results so that nothing
//! half-written is ever left at the output path.

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use flate2::write::GzEncoder;
use flate2::Compression;
use hetsparse::matrix_market::{self, MatrixMarket};
use hetsparse::{Csr, Dense};
use tempfile::NamedTempFile;

use crate::error::CliError;
use crate::progress::{Stage, Unit};

/// Counts the bytes read through it into a stage's bar.
struct CountingReader<'s, R> {
    inner: R,
    read: u64,
    stage: &'s Stage,
}

impl<R: Read> Read for CountingReader<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read += n as u64;
        self.stage.set(self.read);
        Ok(n)
    }
}

/// A matrix read from a file, with what reading it cost.
pub struct ReadMatrix {
    /// What the file holds.
    pub matrix: MatrixMarket<f64>,
    /// Time reading it.
    pub time: Duration,
}

/// Reads a Matrix Market file (gzip too), with a bar over the file's bytes.
pub fn read_matrix(path: &Path, label: &str, progress: bool) -> Result<ReadMatrix, CliError> {
    let open_error = |source| CliError::Open {
        path: path.to_path_buf(),
        source,
    };
    let file = File::open(path).map_err(open_error)?;
    let metadata = file.metadata().map_err(open_error)?;
    if metadata.is_dir() {
        return Err(open_error(io::Error::new(
            io::ErrorKind::InvalidInput,
            "it is a directory",
        )));
    }
    let stage = Stage::new(label, Unit::Bytes, Some(metadata.len()), progress);
    let reader = CountingReader {
        inner: file,
        read: 0,
        stage: &stage,
    };
    let matrix = matrix_market::read::<f64, _>(BufReader::with_capacity(1 << 20, reader)).map_err(
        |source| CliError::Read {
            path: path.to_path_buf(),
            source,
        },
    )?;
    Ok(ReadMatrix {
        matrix,
        time: stage.finish(),
    })
}

/// Counts the bytes written through it into a stage's bar.
struct CountingWriter<'s, W> {
    inner: W,
    written: u64,
    stage: &'s Stage,
}

impl<W: Write> Write for CountingWriter<'_, W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.written += n as u64;
        self.stage.set(self.written);
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// What to write.
pub enum Output<'a> {
    /// A sparse result, as `coordinate`.
    Sparse(&'a Csr<f64>),
    /// A dense result (SpMM, or SpMV's vector as one column), as `array`.
    Dense(&'a Dense<f64>),
}

/// Temporary output files not yet complete, removed by [`remove_unfinished`] when the command
/// is interrupted (a signal ends the process without running destructors).
static UNFINISHED: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// Removes every temporary output file not yet complete: for the interrupt handler.
pub fn remove_unfinished() {
    let paths = UNFINISHED.lock().unwrap_or_else(|p| p.into_inner());
    for path in paths.iter() {
        let _ = std::fs::remove_file(path);
    }
}

fn forget_unfinished(path: &Path) {
    UNFINISHED
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .retain(|p| p != path);
}

/// The output file, opened as a temporary file beside its path before any work is done (so
/// that an unwritable path fails at once) and moved to the path only once complete. Dropped
/// without [`commit`](PendingOutput::commit), the temporary file is removed.
pub struct PendingOutput {
    path: PathBuf,
    file: NamedTempFile,
}

impl PendingOutput {
    /// Checks that `path` can be written and opens the temporary file beside it.
    pub fn create(path: &Path) -> Result<Self, CliError> {
        let fail = |reason: String| CliError::Write {
            path: path.to_path_buf(),
            reason,
        };
        if path.is_dir() {
            return Err(fail("it is a directory".into()));
        }
        let name = path
            .file_name()
            .ok_or_else(|| fail("the path names no file".into()))?;
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        if !dir.is_dir() {
            // The nearest part of the path that exists says why: a file in the way, or
            // a directory missing below it.
            let blocking = dir.ancestors().find(|p| p.exists() && !p.is_dir());
            return Err(fail(match blocking {
                Some(file) => format!(
                    "`{}` is a file, not a directory, so `{}` cannot be in it",
                    file.display(),
                    path.display()
                ),
                None => format!("the directory `{}` does not exist", dir.display()),
            }));
        }
        let file = tempfile::Builder::new()
            .prefix(&format!(".{}.", name.to_string_lossy()))
            .suffix(".partial")
            .tempfile_in(&dir)
            .map_err(|e| fail(format!("cannot create a file in `{}`: {e}", dir.display())))?;
        UNFINISHED
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(file.path().to_path_buf());
        Ok(PendingOutput {
            path: path.to_path_buf(),
            file,
        })
    }

    /// Writes `output` (gzip-compressed when the path ends in `.gz`) and moves it to the
    /// path; returns the bytes written to disk and the time.
    pub fn commit(self, output: Output<'_>, progress: bool) -> Result<(u64, Duration), CliError> {
        let temporary = self.file.path().to_path_buf();
        let result = self.write_and_rename(output, progress);
        forget_unfinished(&temporary);
        result
    }

    fn write_and_rename(
        self,
        output: Output<'_>,
        progress: bool,
    ) -> Result<(u64, Duration), CliError> {
        let fail = |reason: String| CliError::Write {
            path: self.path.clone(),
            reason,
        };
        let stage = Stage::new("writing", Unit::Bytes, None, progress);
        let gzip = self
            .path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("gz"));
        let counted = CountingWriter {
            inner: self.file.as_file(),
            written: 0,
            stage: &stage,
        };
        let mut buffered = BufWriter::with_capacity(1 << 20, counted);
        let result = if gzip {
            let mut encoder = GzEncoder::new(&mut buffered, Compression::fast());
            write_output(&mut encoder, &output)
                .and_then(|()| encoder.finish().map(drop).map_err(Into::into))
        } else {
            write_output(&mut buffered, &output)
        };
        result.map_err(|e| fail(e.to_string()))?;
        let counted = buffered
            .into_inner()
            .map_err(|e| fail(e.error().to_string()))?;
        let written = counted.written;
        keep_or_open_permissions(self.file.as_file(), &self.path)
            .map_err(|e| fail(e.to_string()))?;
        self.file
            .as_file()
            .sync_all()
            .map_err(|e| fail(e.to_string()))?;
        self.file
            .persist(&self.path)
            .map_err(|e| fail(e.error.to_string()))?;
        Ok((written, stage.finish()))
    }
}

/// The permissions of the file being replaced, else read for all and written by the owner (a
/// temporary file starts private to its owner).
fn keep_or_open_permissions(file: &File, path: &Path) -> io::Result<()> {
    let permissions = match std::fs::metadata(path) {
        Ok(existing) => existing.permissions(),
        Err(_) => {
            let mut p = file.metadata()?.permissions();
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt;
                p.set_mode(0o644);
            }
            #[cfg(not(unix))]
            p.set_readonly(false);
            p
        }
    };
    file.set_permissions(permissions)
}

fn write_output<W: Write>(w: W, output: &Output<'_>) -> Result<(), hetsparse::MatrixMarketError> {
    match output {
        Output::Sparse(c) => matrix_market::write_sparse(w, *c),
        Output::Dense(d) => matrix_market::write_dense(w, d),
    }
}
