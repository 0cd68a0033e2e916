//! `hetsparse-bench export --matrix` as `cargo xtask bench --matrices DIR --peers` runs it: the
//! manifest it writes, read by `benches/peers/peers.py`'s own functions, names each matrix as
//! `time --matrix` names its results and gives the flop counts those results divide.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use hetsparse_bench::results::parse_tsv;

/// A square `pattern symmetric` file (expanded on read: 8 entries) and a rectangular
/// `integer` one, as the SuiteSparse collection ships them.
const SQUARE: &str = "%%MatrixMarket matrix coordinate pattern symmetric
% a path of 4 vertices with loops at the ends
4 4 5
1 1
2 1
3 2
4 3
4 4
";
const RECT: &str = "%%MatrixMarket matrix coordinate integer general
3 5 7
1 1 2
1 4 -1
2 2 3
2 5 1
3 1 4
3 3 5
3 5 -2
";

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("hetsparse-bench-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The manifest's rows as peers.py reads them (`read_manifest`, `operand_paths`), one map per
/// row with the operands' paths as `a_path` and `b_path`.
fn peers_rows(manifest: &Path) -> Vec<HashMap<String, String>> {
    let peers = Path::new(env!("CARGO_MANIFEST_DIR")).join("peers");
    // Only the standard library: peers.py imports numpy and the peers inside main().
    let script = "import sys\n\
        sys.path.insert(0, sys.argv[1])\n\
        import peers\n\
        for case in peers.read_manifest(sys.argv[2]):\n\
        \x20   a, b = peers.operand_paths(sys.argv[2], case)\n\
        \x20   case.update(a_path=a, b_path=b)\n\
        \x20   print('\\t'.join(f'{k}={v}' for k, v in case.items()))\n";
    let python = std::env::var("HETSPARSE_PEERS_PYTHON").unwrap_or_else(|_| "python3".into());
    let text = run(Command::new(&python)
        .arg("-c")
        .arg(script)
        .arg(&peers)
        .arg(manifest));
    text.lines()
        .map(|l| {
            l.split('\t')
                .map(|kv| {
                    let (k, v) = kv.split_once('=').unwrap();
                    (k.to_string(), v.to_string())
                })
                .collect()
        })
        .collect()
}

#[test]
fn peers_read_the_matrices_as_time_names_and_counts_them() {
    let dir = scratch("matrices");
    let square = dir.join("G").join("path4.mtx");
    let rect = dir.join("wide.mtx");
    std::fs::create_dir_all(square.parent().unwrap()).unwrap();
    std::fs::write(&square, SQUARE).unwrap();
    std::fs::write(&rect, RECT).unwrap();
    let operands = dir.join("operands");
    let tool = env!("CARGO_BIN_EXE_hetsparse-bench");
    run(Command::new(tool)
        .args(["export", "--dir"])
        .arg(&operands)
        .arg("--matrix")
        .arg(&square)
        .arg("--matrix")
        .arg(&rect));
    let rows = peers_rows(&operands.join("manifest.tsv"));
    assert_eq!(rows.len(), 2, "{rows:?}");

    // Our results on the same files, the default implementation of each operation.
    let ours = dir.join("ours.tsv");
    run(Command::new(tool)
        .args([
            "time",
            "--budget",
            "quick",
            "--threads",
            "1",
            "--ops",
            "spgemm,spmm32,spmv",
            "--matrix",
        ])
        .arg(&square)
        .arg("--matrix")
        .arg(&rect)
        .arg("--out")
        .arg(&ours));
    let records = parse_tsv(&std::fs::read_to_string(&ours).unwrap(), "ours.tsv").unwrap();
    let timed: Vec<_> = records.iter().filter(|r| r.seconds.is_some()).collect();
    assert_eq!(timed.len(), 6, "{records:?}");

    for (row, (file, name)) in rows.iter().zip([(&square, "path4"), (&rect, "wide")]) {
        assert_eq!(row["class"], name);
        assert_eq!(
            Path::new(&row["a_path"]),
            std::path::absolute(file).unwrap()
        );
        for op in ["spgemm", "spmm32", "spmv"] {
            let r = timed
                .iter()
                .find(|r| r.class == name && r.operation == op)
                .unwrap_or_else(|| panic!("no {op} result for {name}: {records:?}"));
            assert_eq!(
                row[&format!("flops_{op}")],
                r.flops.to_string(),
                "{name} {op}"
            );
        }
    }
    // A² of the path with loops at the ends: each vertex reaches 3 within exactly 2 steps.
    let path4 = &rows[0];
    assert_eq!(path4["b_path"], path4["a_path"]);
    assert_eq!(
        (path4["nnz_a"].as_str(), path4["nnz_c"].as_str()),
        ("8", "12")
    );
    // 3×5 times its 5×3 transpose, written beside the manifest: rows 1 and 2 share no column.
    let wide = &rows[1];
    assert_eq!(
        Path::new(&wide["b_path"]),
        operands.join("wide-B.mtx").as_path()
    );
    let b = hetsparse_core::matrix_market::read_csr_path::<f64>(&wide["b_path"]).unwrap();
    let a = hetsparse_core::matrix_market::read_csr_path::<f64>(&rect).unwrap();
    assert_eq!(b, a.transpose().unwrap());
    assert_eq!(
        (
            wide["rows"].as_str(),
            wide["cols"].as_str(),
            wide["nnz_c"].as_str()
        ),
        ("3", "5", "7")
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
