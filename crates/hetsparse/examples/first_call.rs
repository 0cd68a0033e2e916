//! Times the first call of a fresh `Context::auto()` in this process, for the issue's goal:
//! the first call from host memory as fast as the best device's.
//!
//! ```text
//! first_call CLASS [--size N] [--op spgemm|spmm|spmv] [--device auto|cpu|cuda:N|opencl:P.D] [--calibrate]
//! ```
//!
//! Prints one tab-separated line: class, operation, the device asked for (`auto` by
//! default), the device the cost model chose, the predicted and the measured seconds of the
//! first call (making the context is not counted; it goes to stderr), the calibration file
//! used (`-` for none). The file is the one `Context::auto` finds (`HETSPARSE_CACHE_DIR`;
//! `off` for none). `--calibrate` runs `Context::calibrate` first (and writes the file).
//! `--device cpu` (or `cuda:0`, ...) times that device alone, for the best device's time. Run
//! each case in a new process: later calls in one process learn, the first does not.

use std::time::Instant;

use hetsparse::generate::{self, MatrixClass};
use hetsparse::{Chosen, Context, Csr, Dense, DeviceChoice, Layout, OpKind};

fn usage() -> ! {
    eprintln!(
        "usage: first_call CLASS [--size N] [--op spgemm|spmm|spmv] [--device D] [--calibrate]"
    );
    std::process::exit(2)
}

fn time_first(
    ctx: &Context<f64>,
    op: OpKind,
    a: &Csr<f64>,
    b: &Csr<f64>,
) -> hetsparse::Result<f64> {
    let started = Instant::now();
    match op {
        OpKind::Spgemm => drop(ctx.spgemm(a, b)?),
        OpKind::Spmm => {
            let dense = Dense::try_new(a.ncols(), 8, Layout::RowMajor, vec![1.0; a.ncols() * 8])?;
            drop(ctx.spmm(a, &dense)?)
        }
        OpKind::Spmv => drop(ctx.spmv(a, &vec![1.0; a.ncols()])?),
    }
    Ok(started.elapsed().as_secs_f64())
}

fn main() -> hetsparse::Result<()> {
    let mut args = std::env::args().skip(1);
    let Some(class) = args.next() else { usage() };
    let Ok(class) = class.parse::<MatrixClass>() else {
        usage()
    };
    let (mut size, mut op, mut device, mut calibrate) =
        (200_000usize, OpKind::Spgemm, DeviceChoice::Auto, false);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--size" => {
                size = args
                    .next()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or_else(|| usage())
            }
            "--op" => {
                op = args
                    .next()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or_else(|| usage())
            }
            "--device" => {
                device = args
                    .next()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or_else(|| usage())
            }
            "--calibrate" => calibrate = true,
            _ => usage(),
        }
    }
    let (a, b) = generate::product_operands::<f64>(class, size, 1);
    let made = Instant::now();
    let ctx = Context::<f64>::on(&device)?;
    eprintln!("context made in {:.3} s", made.elapsed().as_secs_f64());
    if calibrate {
        let started = Instant::now();
        let measured = ctx.calibrate()?;
        eprintln!(
            "calibrated {} entries in {:.1} s",
            measured.len(),
            started.elapsed().as_secs_f64()
        );
    }
    let file = ctx
        .calibration_file()
        .filter(|f| f.exists())
        .map_or_else(|| "-".to_string(), |f| f.display().to_string());
    let seconds = time_first(&ctx, op, &a, &b)?;
    let (chosen, predicted) = match ctx.last_choice() {
        Some(c) => {
            let ids: Vec<&str> = ctx
                .devices()
                .iter()
                .filter(|d| d.skipped.is_none())
                .map(|d| d.id.as_str())
                .collect();
            let who = match c.chosen {
                Chosen::Alone(d) => ids.get(d).copied().unwrap_or("?").to_string(),
                Chosen::Shared => "shared".to_string(),
            };
            eprintln!("{}", ctx.describe(&c));
            (who, format!("{:.6}", c.predicted()))
        }
        None => ("only device".to_string(), "-".to_string()),
    };
    println!("{class}\t{op}\t{device}\t{chosen}\t{predicted}\t{seconds:.6}\t{file}");
    Ok(())
}
