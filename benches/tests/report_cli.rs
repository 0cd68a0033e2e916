//! `hetsparse-bench report --html/--svg` as a process, on a small result file.

use std::path::PathBuf;
use std::process::Command;

const RESULTS: &str = "\
implementation\tclass\toperation\tseconds\tflops\tnote
# cpu: 2 threads
cpu@1\tbanded\tspgemm\t0.5\t1000000000\t
cpu@2\tbanded\tspgemm\t0.25\t1000000000\t
cpu@1\troad\tspgemm\t1.0\t1000000000\t
cpu@2\troad\tspgemm\t0.5\t1000000000\t
mkl@1\tbanded\tspgemm\t1.0\t1000000000\t
mkl@2\tbanded\tspgemm\t0.5\t1000000000\t
";

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("hetsparse-bench-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn tool() -> Command {
    Command::new(env!("CARGO_BIN_EXE_hetsparse-bench"))
}

#[test]
fn report_writes_html_and_svg_beside_the_table() {
    let dir = scratch("report");
    let results = dir.join("results.tsv");
    std::fs::write(&results, RESULTS).unwrap();
    let html = dir.join("out").join("report.html");
    let svg = dir.join("charts");
    let out = tool()
        .arg("report")
        .arg("--html")
        .arg(&html)
        .arg("--svg")
        .arg(&svg)
        .arg(&results)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.starts_with("| operation | class | cpu@1 | cpu@2 | mkl@1 | mkl@2 |"),
        "{table}"
    );
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.starts_with("<!DOCTYPE html>"));
    assert_eq!(page.matches("<svg ").count(), 3);
    assert_eq!(page.matches("<rect class=\"bar\"").count(), 6 + 2 + 4);
    assert!(page.contains("<li>cpu: 2 threads</li>"));
    let mut files: Vec<String> = std::fs::read_dir(&svg)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(
        files,
        [
            "gflops-spgemm.svg",
            "scaling-spgemm.svg",
            "speedup-spgemm-mkl.svg"
        ]
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn report_errors_name_the_problem() {
    let dir = scratch("errors");
    let results = dir.join("results.tsv");
    std::fs::write(&results, RESULTS).unwrap();
    // An HTML path below a file cannot be written: non-zero exit, the path in the message.
    let blocker = dir.join("file");
    std::fs::write(&blocker, "").unwrap();
    let out = tool()
        .arg("report")
        .arg("--html")
        .arg(blocker.join("report.html"))
        .arg(&results)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot create") && err.contains("file"),
        "{err}"
    );
    let out = tool().args(["report", "--html"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--html needs a value"));
    let out = tool().args(["list", "--svg", "x"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("belong to report"));
    std::fs::remove_dir_all(&dir).unwrap();
}
