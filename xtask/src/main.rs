//! `cargo xtask`: project tasks.
fn main() {
    eprintln!("usage: cargo xtask <kernels|download|bench>");
    std::process::exit(2);
}
