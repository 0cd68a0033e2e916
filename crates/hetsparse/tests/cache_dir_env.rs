//! Where the calibration file is, from the environment (one test: it sets the process's
//! environment, which other tests in the same process would see).

use std::path::PathBuf;

use hetsparse::calibration::FILE_NAME;
use hetsparse::CalibrationCache;

#[test]
fn the_cache_directory_follows_the_environment() {
    let env = CalibrationCache::FromEnvironment;
    std::env::set_var("HOME", "/home/someone");
    std::env::set_var("XDG_CACHE_HOME", "/xdg/cache");
    std::env::set_var("HETSPARSE_CACHE_DIR", "/explicit/dir");
    assert_eq!(
        env.file(),
        Some(PathBuf::from("/explicit/dir").join(FILE_NAME))
    );
    for off in ["", "off", "OFF"] {
        std::env::set_var("HETSPARSE_CACHE_DIR", off);
        assert_eq!(env.file(), None, "HETSPARSE_CACHE_DIR={off:?}");
    }
    std::env::remove_var("HETSPARSE_CACHE_DIR");
    assert_eq!(
        env.file(),
        Some(PathBuf::from("/xdg/cache/hetsparse").join(FILE_NAME))
    );
    std::env::set_var("XDG_CACHE_HOME", "");
    assert_eq!(
        env.file(),
        Some(PathBuf::from("/home/someone/.cache/hetsparse").join(FILE_NAME))
    );
    std::env::remove_var("XDG_CACHE_HOME");
    std::env::remove_var("HOME");
    assert_eq!(env.file(), None);

    // Context::auto loads from there, and writes there what it calibrates.
    let dir = tempfile::tempdir().unwrap();
    std::env::set_var("HETSPARSE_CACHE_DIR", dir.path());
    let ctx = hetsparse::Context::<f64>::auto().unwrap();
    assert_eq!(
        ctx.calibration_file(),
        Some(dir.path().join(FILE_NAME).as_path())
    );
    let measured = ctx
        .calibrate_with(&hetsparse::CalibrationOptions {
            rows: 2_000,
            small_rows: 100,
            rounds: 1,
        })
        .unwrap();
    assert!(!measured.is_empty());
    let again = hetsparse::Context::<f64>::auto().unwrap();
    assert_eq!(again.calibration().len(), measured.len());
    std::env::set_var("HETSPARSE_CACHE_DIR", "off");
    let off = hetsparse::Context::<f64>::auto().unwrap();
    assert_eq!(off.calibration_file(), None);
    assert!(off.calibration().is_empty());
}
