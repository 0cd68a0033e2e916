//! The `hetsparse` binary run as a process on small Matrix Market files written here, its
//! results compared with the serial reference, and every error it must report.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use hetsparse::{generate, matrix_market, Backend, Csr, Layout, ReferenceBackend, SpgemmAlgorithm};

fn hetsparse(args: &[&str], dir: &Path) -> Output {
    // No calibration file: the tests neither read nor write the user's cache.
    hetsparse_with_cache(args, dir, Path::new("off"))
}

fn hetsparse_with_cache(args: &[&str], dir: &Path, cache: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hetsparse"))
        .args(args)
        .current_dir(dir)
        .env("HETSPARSE_CACHE_DIR", cache)
        .output()
        .expect("the hetsparse binary starts")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn assert_success(o: &Output) {
    assert!(
        o.status.success(),
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        stdout(o),
        stderr(o)
    );
}

/// Asserts a failure with exit status `code` whose message contains every one of `needles`.
fn assert_failure(o: &Output, code: i32, needles: &[&str]) {
    assert_eq!(
        o.status.code(),
        Some(code),
        "stdout:\n{}\nstderr:\n{}",
        stdout(o),
        stderr(o)
    );
    let err = stderr(o);
    for needle in needles {
        assert!(err.contains(needle), "`{needle}` not in:\n{err}");
    }
}

fn write_mtx(dir: &Path, name: &str, m: &Csr<f64>) -> PathBuf {
    let path = dir.join(name);
    let mut bytes = Vec::new();
    matrix_market::write_sparse(&mut bytes, m).unwrap();
    fs::write(&path, bytes).unwrap();
    path
}

/// Same structure, values equal up to rounding of sums in another order.
fn assert_close(got: &Csr<f64>, want: &Csr<f64>) {
    assert_eq!(got.shape(), want.shape());
    assert_eq!(got.row_offsets(), want.row_offsets());
    assert_eq!(got.col_indices(), want.col_indices());
    for (g, w) in got.values().iter().zip(want.values()) {
        assert!((g - w).abs() <= 1e-12 * w.abs().max(1.0), "{g} != {w}");
    }
}

fn assert_close_values(got: &[f64], want: &[f64]) {
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() <= 1e-12 * w.abs().max(1.0), "{g} != {w}");
    }
}

/// Files in `dir` other than the ones listed: what a failed run must not leave.
fn stray_files(dir: &Path, expected: &[&str]) -> Vec<String> {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| !expected.contains(&name.as_str()))
        .collect()
}

/// Whether OpenCL tests must run: with `HETSPARSE_REQUIRE_DEVICE=1` a missing platform fails.
fn opencl_present() -> bool {
    #[cfg(feature = "opencl")]
    let present = hetsparse::opencl::list_devices().is_ok_and(|d| !d.is_empty());
    #[cfg(not(feature = "opencl"))]
    let present = false;
    if !present {
        assert!(
            std::env::var("HETSPARSE_REQUIRE_DEVICE").as_deref() != Ok("1"),
            "HETSPARSE_REQUIRE_DEVICE=1 but no OpenCL device"
        );
        eprintln!("no OpenCL device: OpenCL CLI test skipped");
    }
    present
}

fn spgemm_reference(a: &Csr<f64>, b: &Csr<f64>) -> Csr<f64> {
    ReferenceBackend
        .spgemm(a, b, SpgemmAlgorithm::Auto)
        .unwrap()
}

#[test]
fn devices_lists_the_cpu_as_used() {
    let dir = tempfile::tempdir().unwrap();
    let o = hetsparse(&["devices"], dir.path());
    assert_success(&o);
    let out = stdout(&o);
    assert!(out.contains("cpu"), "{out}");
    assert!(out.contains("used by --device auto"), "{out}");
    assert!(out.contains("f64"), "{out}");
}

#[test]
fn multiply_matches_the_reference_on_every_device_choice() {
    let dir = tempfile::tempdir().unwrap();
    let a: Csr<f64> = generate::uniform(120, 90, 6, 11);
    let b: Csr<f64> = generate::uniform(90, 70, 5, 12);
    write_mtx(dir.path(), "a.mtx", &a);
    write_mtx(dir.path(), "b.mtx", &b);
    let want = spgemm_reference(&a, &b);
    let mut devices = vec!["auto", "all", "cpu"];
    if opencl_present() {
        devices.push("opencl");
    }
    for device in devices {
        let o = hetsparse(
            &[
                "multiply", "a.mtx", "b.mtx", "-o", "c.mtx", "--device", device,
            ],
            dir.path(),
        );
        assert_success(&o);
        let summary = stdout(&o);
        for stage in [
            "read A", "read B", "multiply", "write C", "GFLOP/s", "total",
        ] {
            assert!(
                summary.contains(stage),
                "{device}: `{stage}` not in\n{summary}"
            );
        }
        let c: Csr<f64> = matrix_market::read_csr_path(dir.path().join("c.mtx")).unwrap();
        assert_close(&c, &want);
    }
    assert!(stray_files(dir.path(), &["a.mtx", "b.mtx", "c.mtx"]).is_empty());
}

#[test]
fn square_and_aat_write_gzip_and_algorithms_are_chosen() {
    let dir = tempfile::tempdir().unwrap();
    let a: Csr<f64> = generate::uniform(80, 60, 5, 21);
    write_mtx(dir.path(), "a.mtx", &a);

    let o = hetsparse(
        &["multiply", "a.mtx", "--aat", "-o", "aat.mtx.gz"],
        dir.path(),
    );
    assert_success(&o);
    let gz = fs::read(dir.path().join("aat.mtx.gz")).unwrap();
    assert_eq!(&gz[..2], &[0x1f, 0x8b], "not gzip");
    let c: Csr<f64> = matrix_market::read_csr_path(dir.path().join("aat.mtx.gz")).unwrap();
    assert_close(&c, &spgemm_reference(&a, &a.transpose().unwrap()));

    let square: Csr<f64> = generate::uniform(70, 70, 4, 22);
    write_mtx(dir.path(), "s.mtx", &square);
    for algorithm in ["row-row", "column-row"] {
        let o = hetsparse(
            &[
                "multiply",
                "s.mtx",
                "--square",
                "-o",
                "ss.mtx",
                "--device",
                "cpu",
                "--algorithm",
                algorithm,
                "--quiet",
            ],
            dir.path(),
        );
        assert_success(&o);
        assert!(stdout(&o).is_empty(), "--quiet printed {}", stdout(&o));
        let c: Csr<f64> = matrix_market::read_csr_path(dir.path().join("ss.mtx")).unwrap();
        assert_close(&c, &spgemm_reference(&square, &square));
    }
    // The CPU offers no ESC: a clear error, nothing written.
    let o = hetsparse(
        &[
            "multiply",
            "s.mtx",
            "--square",
            "-o",
            "esc.mtx",
            "--device",
            "cpu",
            "--algorithm",
            "esc",
        ],
        dir.path(),
    );
    assert_failure(&o, 1, &["device `cpu`", "Esc", "RowRow"]);
    assert!(!dir.path().join("esc.mtx").exists());
}

#[test]
fn spmv_and_spmm_match_the_reference() {
    let dir = tempfile::tempdir().unwrap();
    let a: Csr<f64> = generate::uniform(50, 40, 4, 31);
    write_mtx(dir.path(), "a.mtx", &a);

    let o = hetsparse(
        &["multiply", "a.mtx", "--op", "spmv", "-o", "y.mtx"],
        dir.path(),
    );
    assert_success(&o);
    let y = match matrix_market::read_path::<f64>(dir.path().join("y.mtx")).unwrap() {
        matrix_market::MatrixMarket::Dense(d) => d,
        matrix_market::MatrixMarket::Sparse(_) => panic!("SpMV wrote a sparse file"),
    };
    let ones = vec![1.0; 40];
    assert_close_values(
        y.data(),
        &ReferenceBackend.spmv((&a).into(), &ones).unwrap(),
    );

    let b = hetsparse::Dense::from_fn(40, 3, Layout::ColMajor, |i, j| (i * 3 + j) as f64 - 7.5)
        .unwrap();
    let mut bytes = Vec::new();
    matrix_market::write_dense(&mut bytes, &b).unwrap();
    fs::write(dir.path().join("b.mtx"), bytes).unwrap();
    let o = hetsparse(
        &["multiply", "a.mtx", "b.mtx", "--op", "spmm", "-o", "c.mtx"],
        dir.path(),
    );
    assert_success(&o);
    let c = matrix_market::read_path::<f64>(dir.path().join("c.mtx"))
        .unwrap()
        .into_dense(Layout::ColMajor)
        .unwrap();
    let want = ReferenceBackend
        .spmm((&a).into(), &b)
        .unwrap()
        .to_layout(Layout::ColMajor);
    assert_eq!(c.shape(), want.shape());
    assert_close_values(c.data(), want.data());
}

#[test]
fn info_reports_the_product() {
    let dir = tempfile::tempdir().unwrap();
    let a: Csr<f64> = generate::uniform(60, 60, 5, 41);
    write_mtx(dir.path(), "a.mtx", &a);
    let want = spgemm_reference(&a, &a);
    let o = hetsparse(&["info", "a.mtx", "--square"], dir.path());
    assert_success(&o);
    let out = stdout(&o);
    assert!(
        out.contains(&format!("A: 60×60, {} entries", a.nnz())),
        "{out}"
    );
    assert!(out.contains(&format!("nnz(C): {}", want.nnz())), "{out}");
    assert!(out.contains("compression ratio"), "{out}");
    assert!(out.contains("fits"), "{out}");
}

#[test]
fn generate_writes_the_class_it_names() {
    let dir = tempfile::tempdir().unwrap();
    let o = hetsparse(
        &[
            "generate", "banded", "--size", "300", "--seed", "4", "-o", "a.mtx.gz",
        ],
        dir.path(),
    );
    assert_success(&o);
    let a: Csr<f64> = matrix_market::read_csr_path(dir.path().join("a.mtx.gz")).unwrap();
    let (want, _) = generate::product_operands::<f64>(generate::MatrixClass::Banded, 300, 4);
    assert_eq!(a, want);
    let o = hetsparse(&["generate", "triangles", "-o", "b.mtx"], dir.path());
    assert_failure(&o, 2, &["triangles"]);
    assert!(stray_files(dir.path(), &["a.mtx.gz"]).is_empty());
}

#[test]
fn a_missing_input_is_reported_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let o = hetsparse(
        &["multiply", "nope.mtx", "--square", "-o", "c.mtx"],
        dir.path(),
    );
    assert_failure(&o, 1, &["cannot open `nope.mtx`"]);
    assert!(stray_files(dir.path(), &[]).is_empty());
    let o = hetsparse(&["info", "nope.mtx"], dir.path());
    assert_failure(&o, 1, &["cannot open `nope.mtx`"]);
}

#[test]
fn a_malformed_line_is_reported_with_its_number_and_an_old_output_survives() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(
        dir.path().join("bad.mtx"),
        "%%MatrixMarket matrix coordinate real general\n3 3 2\n1 1 1.0\n2 x 4.0\n",
    )
    .unwrap();
    fs::write(dir.path().join("c.mtx"), "previous result").unwrap();
    let o = hetsparse(
        &["multiply", "bad.mtx", "--square", "-o", "c.mtx"],
        dir.path(),
    );
    assert_failure(&o, 1, &["`bad.mtx`", "line 4"]);
    assert_eq!(
        fs::read_to_string(dir.path().join("c.mtx")).unwrap(),
        "previous result"
    );
    assert!(stray_files(dir.path(), &["bad.mtx", "c.mtx"]).is_empty());
}

#[test]
fn shapes_that_do_not_chain_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    write_mtx(dir.path(), "a.mtx", &generate::uniform(10, 7, 2, 51));
    write_mtx(dir.path(), "b.mtx", &generate::uniform(8, 5, 2, 52));
    let o = hetsparse(&["multiply", "a.mtx", "b.mtx", "-o", "c.mtx"], dir.path());
    assert_failure(
        &o,
        1,
        &["do not chain", "A (`a.mtx`) is 10×7", "B (`b.mtx`) is 8×5"],
    );
    let o = hetsparse(
        &["multiply", "a.mtx", "--square", "-o", "c.mtx"],
        dir.path(),
    );
    assert_failure(&o, 1, &["do not chain", "B (`a.mtx` again, --square)"]);
    let o = hetsparse(&["info", "a.mtx", "b.mtx"], dir.path());
    assert_failure(&o, 1, &["do not chain", "A (`a.mtx`)", "B (`b.mtx`)"]);
    assert!(stray_files(dir.path(), &["a.mtx", "b.mtx"]).is_empty());
}

#[test]
fn a_device_that_is_not_there_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    write_mtx(dir.path(), "a.mtx", &generate::uniform(10, 10, 2, 61));
    for device in ["cuda:7", "opencl:no-such-device-anywhere"] {
        let o = hetsparse(
            &[
                "multiply", "a.mtx", "--square", "-o", "c.mtx", "--device", device,
            ],
            dir.path(),
        );
        assert_failure(&o, 1, &[&format!("device `{device}` is not available")]);
    }
    let o = hetsparse(
        &[
            "multiply", "a.mtx", "--square", "-o", "c.mtx", "--device", "tpu",
        ],
        dir.path(),
    );
    assert_failure(&o, 2, &["`tpu` is not a device"]);
    assert!(stray_files(dir.path(), &["a.mtx"]).is_empty());
}

#[test]
fn an_unwritable_output_is_reported_before_any_work() {
    let dir = tempfile::tempdir().unwrap();
    write_mtx(dir.path(), "a.mtx", &generate::uniform(10, 10, 2, 71));
    fs::create_dir(dir.path().join("out")).unwrap();
    let o = hetsparse(
        &["multiply", "a.mtx", "--square", "-o", "missing/c.mtx"],
        dir.path(),
    );
    assert_failure(&o, 1, &["cannot write `missing/c.mtx`", "does not exist"]);
    // A path through a file: the file is named as what is in the way.
    let o = hetsparse(
        &["multiply", "a.mtx", "--square", "-o", "a.mtx/c.mtx"],
        dir.path(),
    );
    assert_failure(&o, 1, &["cannot write `a.mtx/c.mtx`", "`a.mtx` is a file"]);
    let o = hetsparse(
        &["multiply", "a.mtx", "--square", "-o", "a.mtx/deeper/c.mtx"],
        dir.path(),
    );
    assert_failure(&o, 1, &["`a.mtx` is a file"]);
    let o = hetsparse(&["multiply", "a.mtx", "--square", "-o", "out"], dir.path());
    assert_failure(&o, 1, &["cannot write `out`", "directory"]);
    // The output is checked first: a missing input is not even opened.
    let o = hetsparse(
        &["multiply", "nope.mtx", "--square", "-o", "missing/c.mtx"],
        dir.path(),
    );
    assert_failure(&o, 1, &["cannot write"]);
    assert!(stray_files(dir.path(), &["a.mtx", "out"]).is_empty());
    assert!(stray_files(&dir.path().join("out"), &[]).is_empty());
}

#[test]
fn arguments_that_do_not_go_together_exit_with_2() {
    let dir = tempfile::tempdir().unwrap();
    write_mtx(dir.path(), "a.mtx", &generate::uniform(10, 10, 2, 81));
    let o = hetsparse(&["multiply", "a.mtx", "-o", "c.mtx"], dir.path());
    assert_failure(&o, 2, &["spgemm needs B"]);
    let o = hetsparse(
        &[
            "multiply", "a.mtx", "--op", "spmm", "--square", "-o", "c.mtx",
        ],
        dir.path(),
    );
    // The conflicting flags are named, not B found missing.
    assert_failure(&o, 2, &["--square makes a sparse B", "not --op spmm"]);
    let o = hetsparse(
        &["multiply", "a.mtx", "--op", "spmm", "-o", "c.mtx"],
        dir.path(),
    );
    assert_failure(&o, 2, &["spmm needs B.mtx"]);
    let o = hetsparse(
        &["multiply", "a.mtx", "--op", "spmv", "--aat", "-o", "c.mtx"],
        dir.path(),
    );
    assert_failure(&o, 2, &["--aat makes a sparse B", "not --op spmv"]);
    let o = hetsparse(
        &["multiply", "a.mtx", "--square", "--aat", "-o", "c.mtx"],
        dir.path(),
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stray_files(dir.path(), &["a.mtx"]).is_empty());
}

#[test]
fn calibrate_keeps_speeds_that_devices_shows_and_explain_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let o = hetsparse_with_cache(&["devices"], dir.path(), &cache);
    assert_success(&o);
    assert!(stdout(&o).contains("Calibration: none"), "{}", stdout(&o));
    let o = hetsparse_with_cache(
        &["calibrate", "--rows", "3000", "--rounds", "1"],
        dir.path(),
        &cache,
    );
    assert_success(&o);
    let out = stdout(&o);
    for needle in ["spgemm", "spmm", "spmv", "Saved to"] {
        assert!(out.contains(needle), "`{needle}` not in:\n{out}");
    }
    let file = cache.join("calibration.txt");
    let text = fs::read_to_string(&file).unwrap();
    assert!(text.starts_with("hetsparse-calibration 2\n"), "{text}");
    let o = hetsparse_with_cache(&["devices"], dir.path(), &cache);
    assert_success(&o);
    let out = stdout(&o);
    assert!(
        out.contains("Calibration (") && out.contains("spmv"),
        "{out}"
    );
    // A damaged file is ignored with a warning on stderr, never an error.
    fs::write(&file, &text[..text.len() / 2]).unwrap();
    let o = hetsparse_with_cache(&["devices"], dir.path(), &cache);
    assert_success(&o);
    assert!(stdout(&o).contains("Calibration: none"), "{}", stdout(&o));
    // --explain says who computed.
    let a: Csr<f64> = generate::uniform(300, 300, 4, 2);
    write_mtx(dir.path(), "A.mtx", &a);
    let o = hetsparse_with_cache(
        &[
            "multiply",
            "A.mtx",
            "--square",
            "-o",
            "C.mtx",
            "--explain",
            "--quiet",
        ],
        dir.path(),
        &cache,
    );
    assert_success(&o);
    assert!(stdout(&o).contains("device choice:"), "{}", stdout(&o));
    let o = hetsparse_with_cache(&["devices"], dir.path(), Path::new("off"));
    assert_success(&o);
    assert!(
        stdout(&o).contains("Calibration: no file"),
        "{}",
        stdout(&o)
    );
}

/// Past a file-size limit the write fails with an error (the process is not killed by
/// SIGXFSZ), and the temporary output is removed.
#[cfg(unix)]
#[test]
fn a_write_past_the_file_size_limit_fails_and_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    // C of about 12 000 entries: far more than the limit of 4 KiB.
    write_mtx(dir.path(), "a.mtx", &generate::uniform(600, 600, 5, 97));
    let o = Command::new("bash")
        .arg("-c")
        .arg("ulimit -f 4 && exec \"$0\" \"$@\"")
        .arg(env!("CARGO_BIN_EXE_hetsparse"))
        .args(["multiply", "a.mtx", "--square", "-o", "c.mtx", "--quiet"])
        .current_dir(dir.path())
        .env("HETSPARSE_CACHE_DIR", "off")
        .output()
        .expect("bash starts");
    assert_failure(&o, 1, &["cannot write `c.mtx`"]);
    assert!(stray_files(dir.path(), &["a.mtx"]).is_empty());
}

/// Without the `mpi` feature, `--dist` is refused, and so is a run under an MPI launcher on
/// several ranks (each rank would compute the whole product and write the same file); under a
/// launcher on one rank the command runs as one process.
#[cfg(not(feature = "mpi"))]
#[test]
fn without_the_mpi_feature_distributed_runs_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let a = generate::uniform::<f64>(30, 30, 3, 9);
    write_mtx(d, "a.mtx", &a);
    let run = |args: &[&str], launcher_size: Option<&str>| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_hetsparse"));
        cmd.args(args)
            .current_dir(d)
            .env("HETSPARSE_CACHE_DIR", "off");
        for v in ["PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE"] {
            cmd.env_remove(v);
        }
        if let Some(n) = launcher_size {
            cmd.env("PMI_SIZE", n);
        }
        cmd.output().expect("the hetsparse binary starts")
    };
    let square = [
        "multiply", "a.mtx", "--square", "-o", "c.mtx", "--device", "cpu",
    ];
    let mut dist = square.to_vec();
    dist.extend_from_slice(&["--dist", "2d"]);
    assert_failure(
        &run(&dist, None),
        2,
        &["--dist", "built without MPI", "--features mpi"],
    );
    assert_failure(
        &run(&square, Some("4")),
        2,
        &["mpiexec on several ranks", "built without MPI"],
    );
    assert!(
        stray_files(d, &["a.mtx"]).is_empty(),
        "{:?}",
        stray_files(d, &["a.mtx"])
    );
    let one = run(&square, Some("1"));
    assert_success(&one);
    let c: Csr<f64> = matrix_market::read_csr_path(d.join("c.mtx")).unwrap();
    assert_close(&c, &spgemm_reference(&a, &a));
}
