//! What the examples share: a timed collective call and a numeric flag.

use std::error::Error;

use hetsparse_mpi::mpi::traits::*;

/// A result whose error is anything printable.
pub type Res<T> = Result<T, Box<dyn Error>>;

/// Seconds of `run` on the slowest rank (barrier to barrier), the least of `reps`, and the
/// last repetition's result (each earlier one dropped before the next begins, as a caller's
/// would be).
pub fn timed<C: Communicator, T>(
    world: &C,
    reps: usize,
    mut run: impl FnMut() -> hetsparse_mpi::Result<T>,
) -> Res<(f64, T)> {
    let mut best = f64::INFINITY;
    let mut last = None;
    for _ in 0..reps.max(1) {
        drop(last.take());
        world.barrier();
        let start = hetsparse_mpi::mpi::time();
        let out = run()?;
        world.barrier();
        best = best.min(hetsparse_mpi::mpi::time() - start);
        last = Some(out);
    }
    Ok((best, last.ok_or("no repetition ran")?))
}

/// The number after `flag` in `args`, else `default`.
pub fn arg(args: &[String], flag: &str, default: usize) -> Res<usize> {
    match args.iter().position(|a| a == flag) {
        Some(i) => Ok(args.get(i + 1).ok_or("a value after the flag")?.parse()?),
        None => Ok(default),
    }
}
