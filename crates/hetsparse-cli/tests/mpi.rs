//! The `hetsparse` binary (built with the `mpi` feature) under `mpiexec -n 1, 2, 4`: the C that
//! every `--dist` writes against the single-process `hetsparse multiply`'s, and errors that
//! stop every rank. Needs MPICH's `mpiexec` on the PATH: without it these tests fail, they do
//! not skip.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use hetsparse::{generate, matrix_market, Csr};

/// Variables by which MPI launchers tell a process it runs under them.
const LAUNCHER_VARS: [&str; 3] = ["PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE"];

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn describe(o: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        text(&o.stdout),
        text(&o.stderr)
    )
}

/// `mpiexec -n np hetsparse args...` in `dir`, more ranks than cores allowed (MPICH yields the
/// processor while it waits, one rayon thread per rank).
fn mpiexec(np: usize, args: &[&str], dir: &Path) -> Output {
    Command::new("mpiexec")
        .arg("-n")
        .arg(np.to_string())
        .arg(env!("CARGO_BIN_EXE_hetsparse"))
        .args(args)
        .current_dir(dir)
        .env("HETSPARSE_CACHE_DIR", "off")
        .env("MPIR_CVAR_POLLS_BEFORE_YIELD", "1")
        .env("MPIR_CVAR_ASYNC_PROGRESS", "0")
        .env("RAYON_NUM_THREADS", "1")
        .output()
        .expect("mpiexec starts (MPICH: apt-get install mpich libmpich-dev)")
}

/// `hetsparse args...` as one plain process, whatever launched the tests.
fn single(args: &[&str], dir: &Path) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_hetsparse"));
    cmd.args(args)
        .current_dir(dir)
        .env("HETSPARSE_CACHE_DIR", "off");
    for v in LAUNCHER_VARS {
        cmd.env_remove(v);
    }
    cmd.output().expect("the hetsparse binary starts")
}

fn write_mtx(dir: &Path, name: &str, m: &Csr<f64>) -> PathBuf {
    let path = dir.join(name);
    let mut bytes = Vec::new();
    matrix_market::write_sparse(&mut bytes, m).unwrap();
    fs::write(&path, bytes).unwrap();
    path
}

fn read_mtx(path: &Path) -> Csr<f64> {
    let bytes = fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    matrix_market::read::<f64, _>(&bytes[..])
        .unwrap()
        .into_csr()
        .unwrap()
}

/// Same structure, values within 1e-12 relative.
fn assert_same(got: &Csr<f64>, want: &Csr<f64>, what: &str) {
    assert_eq!(got.shape(), want.shape(), "{what}: shape");
    assert_eq!(got.row_offsets(), want.row_offsets(), "{what}: row offsets");
    assert_eq!(got.col_indices(), want.col_indices(), "{what}: columns");
    for (i, (x, y)) in got.values().iter().zip(want.values()).enumerate() {
        assert!(
            (x - y).abs() <= 1e-12 * x.abs().max(y.abs()),
            "{what}: value {i}: {x}, expected {y}"
        );
    }
}

#[test]
fn every_layout_writes_the_single_process_product() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // Rows that no rank count divides; a square power-law A and a rectangular pair.
    write_mtx(d, "a.mtx", &generate::rmat::<f64>(7, 6, 3));
    write_mtx(d, "r.mtx", &generate::uniform::<f64>(97, 61, 4, 4));
    write_mtx(d, "s.mtx", &generate::uniform::<f64>(61, 43, 3, 5));
    // A gzip copy of r.mtx: read by rank 0 and scattered.
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut gz, &fs::read(d.join("r.mtx")).unwrap()).unwrap();
    fs::write(d.join("r.mtx.gz"), gz.finish().unwrap()).unwrap();
    let products: [(&str, &[&str]); 3] = [
        ("square", &["a.mtx", "--square"]),
        ("rect", &["r.mtx", "s.mtx"]),
        // B = Aᵀ, transposed across the ranks.
        ("aat", &["r.mtx.gz", "--aat"]),
    ];
    for (name, operands) in products {
        let want_path = format!("{name}-want.mtx");
        let mut args = vec!["multiply"];
        args.extend_from_slice(operands);
        args.extend_from_slice(&["-o", &want_path, "--device", "cpu", "--quiet"]);
        let o = single(&args, d);
        assert!(o.status.success(), "single process: {}", describe(&o));
        let want = read_mtx(&d.join(&want_path));
        assert!(want.nnz() > 0, "{name}: an empty product tests nothing");

        for np in [1usize, 2, 4] {
            for dist in [None, Some("1d"), Some("2d"), Some("3d")] {
                let what = format!("{name}, -n {np}, --dist {}", dist.unwrap_or("(default)"));
                // 2D's C written gzip-compressed, every rank its own members.
                let gz = if dist == Some("2d") { ".gz" } else { "" };
                let out = format!("{name}-{np}-{}.mtx{gz}", dist.unwrap_or("auto"));
                let mut args = vec!["multiply"];
                args.extend_from_slice(operands);
                args.extend_from_slice(&["-o", &out, "--device", "cpu", "--explain"]);
                if let Some(x) = dist {
                    args.extend_from_slice(&["--dist", x]);
                }
                let o = mpiexec(np, &args, d);
                assert!(o.status.success(), "{what}: {}", describe(&o));
                assert_same(&read_mtx(&d.join(&out)), &want, &what);
                // Rank 0 alone prints the summary: the algorithm, why, and what moved.
                let stdout = text(&o.stdout);
                let title = match np {
                    1 => "SpGEMM on 1 rank of MPI: ".to_string(),
                    _ => format!("SpGEMM on {np} ranks of MPI: "),
                };
                assert_eq!(stdout.matches(&title).count(), 1, "{what}: {stdout}");
                let algorithm = match dist {
                    Some("1d") => "1D row fetch".to_string(),
                    Some("2d") => "2D Sparse SUMMA".to_string(),
                    Some("3d") if np == 1 => "3D split SUMMA on a 1×1×1 grid".to_string(),
                    Some(_) => "3D split SUMMA on a ".to_string(),
                    None if np == 1 => "why: one rank".to_string(),
                    // Chosen by predicted time on the machine measured in the run.
                    None => "why: the least time the model predicts".to_string(),
                };
                let mut needles = vec![algorithm.as_str(), "moved in all: ", "<- used", "write C"];
                if dist.is_none() && np > 1 {
                    needles.extend(["measure ", "layouts by predicted time", "compute "]);
                }
                if name == "aat" {
                    needles.push("transpose");
                }
                for needle in needles {
                    assert!(
                        stdout.contains(needle),
                        "{what}: `{needle}` not in:\n{stdout}"
                    );
                }
                // Nothing else is left beside the output.
                let partial = d.join(format!(".{out}.hetsparse-partial"));
                assert!(!partial.exists(), "{what}: {} left", partial.display());
            }
        }
    }
}

#[test]
fn errors_stop_every_rank() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write_mtx(d, "a.mtx", &generate::uniform::<f64>(20, 20, 3, 6));
    write_mtx(d, "b.mtx", &generate::uniform::<f64>(21, 20, 3, 7));
    // A malformed entry on line 9 (two lines of header, the size line, five entries before).
    let mut bad = fs::read_to_string(d.join("a.mtx")).unwrap();
    let lines: Vec<&str> = bad.lines().collect();
    let at = lines.iter().position(|l| !l.starts_with('%')).unwrap() + 6;
    let broken = lines
        .iter()
        .enumerate()
        .map(|(i, l)| if i == at { "3 x 1.0" } else { l })
        .collect::<Vec<_>>()
        .join("\n");
    bad = broken + "\n";
    fs::write(d.join("bad.mtx"), bad).unwrap();
    let line = format!("line {}", at + 1);

    let cases: [(&[&str], &[&str]); 3] = [
        (
            &["multiply", "missing.mtx", "--square", "-o", "c.mtx"],
            &["missing.mtx"],
        ),
        (
            &["multiply", "bad.mtx", "--square", "-o", "c.mtx"],
            &["bad.mtx", &line],
        ),
        (
            &["multiply", "a.mtx", "b.mtx", "-o", "c.mtx", "--dist", "2d"],
            &["the shapes do not chain", "20×20", "21×20"],
        ),
    ];
    for np in [2usize, 4] {
        for (args, needles) in cases {
            let o = mpiexec(np, args, d);
            assert!(!o.status.success(), "{args:?} -n {np}: {}", describe(&o));
            let stderr = text(&o.stderr);
            // Every rank reports the error.
            assert_eq!(
                stderr.matches("hetsparse: error: ").count(),
                np,
                "{args:?} -n {np}: {stderr}"
            );
            for needle in needles {
                assert!(
                    stderr.contains(needle),
                    "{args:?}: `{needle}` not in:\n{stderr}"
                );
            }
            assert!(!d.join("c.mtx").exists(), "{args:?}: c.mtx written");
            assert!(
                !d.join(".c.mtx.hetsparse-partial").exists(),
                "{args:?}: partial left"
            );
        }
    }
    // Options that do not go with --dist are refused before MPI starts, as usage errors.
    for (args, needle) in [
        (
            &[
                "multiply", "a.mtx", "--dist", "1d", "--op", "spmv", "-o", "y.mtx",
            ][..],
            "--op spgemm",
        ),
        (
            &["multiply", "a.mtx", "--dist", "2d", "-o", "c.mtx"][..],
            "--square or --aat",
        ),
    ] {
        let o = single(args, d);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", describe(&o));
        assert!(
            text(&o.stderr).contains(needle),
            "{args:?}: {}",
            describe(&o)
        );
    }
}
