//! `cargo xtask`: project tasks.
mod kernels;

fn main() {
    let task = std::env::args().nth(1);
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let result = match task.as_deref() {
        Some("kernels") => kernels::run(&root),
        _ => Err("usage: cargo xtask <kernels|download|bench>".to_string()),
    };
    if let Err(e) = result {
        eprintln!("xtask: {e}");
        std::process::exit(1);
    }
}
