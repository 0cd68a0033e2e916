//! Operands as raw little-endian arrays, the form the GPU benches share with the peers'
//! scripts and with the real-workload generator (`benches/peers/real_products.py`): a CSR
//! matrix `stem` is `{stem}.indptr` (u64), `{stem}.indices` (u32), `{stem}.data` (f64) and
//! `{stem}.shape` (`rows cols`, text). Reading and writing them is a copy of the bytes, so a
//! matrix of 10^8 entries moves in a second rather than the minute Matrix Market text takes.

use std::io::Write;
use std::path::Path;

use hetsparse_core::Csr;

/// Writes `m` as `stem` in `dir`.
pub fn write_csr(dir: &Path, stem: &str, m: &Csr<f64>) -> std::io::Result<()> {
    fn write<V: Copy, const N: usize>(
        path: &Path,
        v: &[V],
        bytes: impl Fn(V) -> [u8; N],
    ) -> std::io::Result<()> {
        let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
        for &x in v {
            f.write_all(&bytes(x))?;
        }
        f.flush()
    }
    let at = |ext: &str| dir.join(format!("{stem}.{ext}"));
    write(&at("indptr"), m.row_offsets(), u64::to_le_bytes)?;
    write(&at("indices"), m.col_indices(), u32::to_le_bytes)?;
    write(&at("data"), m.values(), f64::to_le_bytes)?;
    std::fs::write(at("shape"), format!("{} {}\n", m.nrows(), m.ncols()))
}

/// Whether `stem` exists in `dir` (its shape file does).
pub fn exists(dir: &Path, stem: &str) -> bool {
    dir.join(format!("{stem}.shape")).is_file()
}

/// Reads the matrix `stem` from `dir`, checked as [`Csr::try_new`] checks any input.
pub fn read_csr(dir: &Path, stem: &str) -> Result<Csr<f64>, String> {
    let at = |ext: &str| dir.join(format!("{stem}.{ext}"));
    let read = |ext: &str| {
        let path = at(ext);
        std::fs::read(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))
    };
    let shape = String::from_utf8_lossy(&read("shape")?).into_owned();
    let dims: Vec<usize> = shape
        .split_whitespace()
        .map(str::parse)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{}: not a shape ({e})", at("shape").display()))?;
    let [rows, cols] = dims[..] else {
        return Err(format!("{}: not `rows cols`", at("shape").display()));
    };
    fn words<const N: usize, V>(
        bytes: &[u8],
        what: &str,
        from: impl Fn([u8; N]) -> V,
    ) -> Result<Vec<V>, String> {
        if bytes.len() % N != 0 {
            return Err(format!("{what}: {} bytes, not whole words", bytes.len()));
        }
        Ok(bytes
            .chunks_exact(N)
            .map(|c| {
                let mut w = [0u8; N];
                w.copy_from_slice(c);
                from(w)
            })
            .collect())
    }
    let offsets = words(&read("indptr")?, "indptr", u64::from_le_bytes)?;
    let indices = words(&read("indices")?, "indices", u32::from_le_bytes)?;
    let values = words(&read("data")?, "data", f64::from_le_bytes)?;
    Csr::try_new(rows, cols, offsets, indices, values).map_err(|e| format!("{stem}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use hetsparse_core::generate;

    #[test]
    fn a_matrix_round_trips_and_damage_is_refused() {
        let dir = std::env::temp_dir().join(format!("hetsparse-raw-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let m: Csr<f64> = generate::uniform(50, 70, 4, 3);
        write_csr(&dir, "m", &m).unwrap();
        assert!(exists(&dir, "m"));
        assert_eq!(read_csr(&dir, "m").unwrap(), m);
        std::fs::write(dir.join("m.shape"), "50\n").unwrap();
        assert!(read_csr(&dir, "m").unwrap_err().contains("rows cols"));
        std::fs::write(dir.join("m.shape"), "50 70\n").unwrap();
        std::fs::write(dir.join("m.indices"), [1u8, 2, 3]).unwrap();
        assert!(read_csr(&dir, "m").unwrap_err().contains("not whole words"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
