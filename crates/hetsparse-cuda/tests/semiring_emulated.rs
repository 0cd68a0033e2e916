//! The semiring kernels (`kernels-cuda/semiring.cu`) on the CPU, where there is no GPU: the same
//! source compiled by the host's C++ compiler over `tests/emulated/cuda_on_cpu.h` (every thread
//! a thread of its own, warps meeting at their synchronisations), chained as the backend chains
//! them (`src/spgemm/semiring.rs`), against the reference backend: every semiring defined over
//! every type the kernels run, unmasked, under a structural and a valued mask and under a
//! complemented one, with integer values that overflow (they must wrap), explicit zeros, an
//! empty row, grids smaller than the rows (grid-stride loops) and groups of 1 to 32 lanes.
//! The masked multiply-adds are counted too.
//!
//! This checks the kernels' logic; the GPU runs the conformance suite (`tests/conformance.rs`)
//! through the backend itself. Needs a C++17 compiler (`c++`, or `CXX`).

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use hetsparse_core::reference;
use hetsparse_core::{bf16, f16, Csr, Mask, Scalar, SemiringKind, SpgemmOptions};

/// The driver, compiled once per test run.
fn driver() -> PathBuf {
    static DRIVER: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DRIVER
        .get_or_init(|| {
            let here = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
            let kernels = here.join("../../kernels-cuda");
            let source = here.join("tests/emulated/semiring_driver.cpp");
            let out = std::env::temp_dir()
                .join(format!("hetsparse-semiring-driver-{}", std::process::id()));
            let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
            let status = Command::new(&cxx)
                .args(["-std=c++17", "-O1", "-pthread", "-rdynamic", "-w", "-I"])
                .arg(&kernels)
                .arg("-I")
                .arg(here.join("tests/emulated"))
                .arg(&source)
                .arg("-o")
                .arg(&out)
                .arg("-ldl")
                .status()
                .unwrap_or_else(|e| panic!("cannot run the C++ compiler {cxx}: {e}"));
            assert!(
                status.success(),
                "{cxx} could not build the emulated kernels"
            );
            out
        })
        .clone()
}

/// A type as the driver reads and writes it.
trait Emulated: Scalar {
    const NAME: &'static str;
    fn text(self) -> String;
    fn parse(s: &str) -> Self;
    /// A value from a small integer `v` (of both signs where the type has them), times a
    /// factor that makes sums and products overflow an integer type.
    fn value(v: i64) -> Self;
}

macro_rules! float_emulated {
    ($($t:ty: $name:literal),*) => {$(
        impl Emulated for $t {
            const NAME: &'static str = $name;
            fn text(self) -> String {
                format!("{}", self.to_parts().0)
            }
            fn parse(s: &str) -> Self {
                <$t as Scalar>::from_f64(s.parse::<f64>().expect("a number"))
            }
            fn value(v: i64) -> Self {
                <$t as Scalar>::from_f64(v as f64)
            }
        }
    )*};
}
float_emulated!(f32: "f32", f64: "f64", f16: "f16", bf16: "bf16");

macro_rules! integer_emulated {
    ($($t:ty: $name:literal, $scale:expr),*) => {$(
        impl Emulated for $t {
            const NAME: &'static str = $name;
            fn text(self) -> String {
                self.to_string()
            }
            fn parse(s: &str) -> Self {
                s.parse().expect("an integer")
            }
            fn value(v: i64) -> Self {
                // Wrapping on purpose: large values whose products overflow.
                (v as $t).wrapping_mul($scale)
            }
        }
    )*};
}
integer_emulated!(i32: "i32", 1 << 20, i64: "i64", 1 << 40, u32: "u32", 1 << 20, u64: "u64", 1 << 40);

impl Emulated for bool {
    const NAME: &'static str = "bool";
    fn text(self) -> String {
        u8::from(self).to_string()
    }
    fn parse(s: &str) -> Self {
        s != "0"
    }
    fn value(v: i64) -> Self {
        v != 0
    }
}

/// A deterministic random matrix: each entry stored with probability `density`, values from
/// -2..=2 (0..=3 for unsigned types: `value` keeps signs where the type has them), every
/// seventh an explicit zero; row `empty` left empty.
fn random<T: Emulated>(
    nrows: usize,
    ncols: usize,
    density: f64,
    seed: u64,
    empty: usize,
) -> Csr<T> {
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let (mut offsets, mut cols, mut vals) = (vec![0u64], Vec::new(), Vec::new());
    for i in 0..nrows {
        for j in 0..ncols {
            if i != empty && (next() % 1000) as f64 / 1000.0 < density {
                cols.push(j as u32);
                let k = cols.len();
                let v = if k % 7 == 3 {
                    0
                } else {
                    (next() % 5) as i64 - 2
                };
                vals.push(T::value(v));
            }
        }
        offsets.push(cols.len() as u64);
    }
    Csr::try_new(nrows, ncols, offsets, cols, vals).expect("a random matrix")
}

fn write_csr<T: Emulated>(out: &mut String, m: &Csr<T>, values: bool) {
    let _ = writeln!(out, "{} {} {}", m.nrows(), m.ncols(), m.nnz());
    let join = |it: &mut dyn Iterator<Item = String>| it.collect::<Vec<_>>().join(" ");
    let _ = writeln!(
        out,
        "{}",
        join(&mut m.row_offsets().iter().map(u64::to_string))
    );
    let _ = writeln!(
        out,
        "{}",
        join(&mut m.col_indices().iter().map(u32::to_string))
    );
    if values {
        let _ = writeln!(out, "{}", join(&mut m.values().iter().map(|v| v.text())));
    }
}

/// One case's result: C, the products and the multiply-adds counted.
struct Emulation<T> {
    c: Csr<T>,
    products: u64,
    multiply_adds: u64,
}

/// One product for the driver: the semiring, the mask mode (`none`, `mask`, `complement`),
/// lanes per row, grid and block, A, B and the mask's positions.
type Case<'a, T> = (
    SemiringKind,
    &'a str,
    u32,
    (u32, u32),
    &'a Csr<T>,
    &'a Csr<T>,
    Option<&'a Csr<T>>,
);

/// Runs the cases in one driver process.
fn emulate<T: Emulated>(cases: &[Case<'_, T>]) -> Vec<Emulation<T>> {
    let mut input = String::new();
    for (kind, mode, lanes, (grid, block), a, b, m) in cases {
        let _ = writeln!(
            input,
            "{} {} {mode} {lanes} {grid} {block}",
            kind.name(),
            T::NAME
        );
        write_csr(&mut input, a, true);
        write_csr(&mut input, b, true);
        if let Some(m) = m {
            write_csr(&mut input, m, false);
        }
    }
    let mut child = Command::new(driver())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("the emulated kernels");
    // Written from a thread of its own: the driver answers as it reads, and a pipe holds
    // only so much.
    let mut stdin = child.stdin.take().expect("stdin");
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let output = child.wait_with_output().expect("the driver's output");
    writer.join().expect("the writer").expect("the cases");
    assert!(
        output.status.success(),
        "the driver failed: {:?}",
        output.status
    );
    let text = String::from_utf8(output.stdout).expect("text");
    let mut words = text.split_whitespace();
    let mut results = Vec::new();
    for (_, _, _, _, a, b, _) in cases {
        let mut number = || {
            words
                .next()
                .expect("more output")
                .parse::<u64>()
                .expect("a count")
        };
        let nnz = number() as usize;
        let offsets: Vec<u64> = (0..=a.nrows()).map(|_| number()).collect();
        let cols: Vec<u32> = (0..nnz).map(|_| number() as u32).collect();
        let vals: Vec<T> = (0..nnz)
            .map(|_| T::parse(words.next().expect("a value")))
            .collect();
        let products = words.next().expect("products").parse().expect("a count");
        let multiply_adds = words
            .next()
            .expect("multiply-adds")
            .parse()
            .expect("a count");
        let c =
            Csr::try_new(a.nrows(), b.ncols(), offsets, cols, vals).expect("the driver's C is CSR");
        results.push(Emulation {
            c,
            products,
            multiply_adds,
        });
    }
    results
}

/// Every semiring over `T`, every mask mode, two operand pairs, against the reference.
fn check_type<T: Emulated>() {
    let pairs = [
        (
            random::<T>(30, 25, 0.2, 41, 2),
            random::<T>(25, 28, 0.25, 42, 7),
        ),
        // Long rows of B: groups of 32 lanes, several entries each.
        (
            random::<T>(9, 70, 0.6, 43, 4),
            random::<T>(70, 80, 0.5, 44, 80),
        ),
    ];
    for (pair, (x, y)) in pairs.iter().enumerate() {
        let m = random::<T>(x.nrows(), y.ncols(), 0.35, 45, 1);
        let masks: [(&str, Option<Mask>); 4] = [
            ("none", None),
            ("mask", Some(Mask::structural(&m))),
            ("mask", Some(Mask::valued(&m))),
            ("complement", Some(Mask::structural(&m).complemented())),
        ];
        // The valued mask's positions, as the backend uploads them.
        let valued_positions = {
            let mask = Mask::valued(&m);
            let n = mask.col_indices().len();
            Csr::<T>::try_new(
                m.nrows(),
                m.ncols(),
                mask.row_offsets().to_vec(),
                mask.col_indices().to_vec(),
                vec![T::value(1); n],
            )
            .expect("positions")
        };
        let mean = y.nnz().div_ceil(y.nrows().max(1) as u64).max(1);
        let lanes = mean.next_power_of_two().min(32) as u32;
        let mut cases = Vec::new();
        let mut expected = Vec::new();
        for (mask_index, (mode, mask)) in masks.iter().enumerate() {
            // The long rows without the masks the first pair checks (the test's time).
            if pair == 1 && (mask_index == 1 || mask_index == 2) {
                continue;
            }
            for kind in SemiringKind::defined_for(T::TYPE) {
                let mut options = SpgemmOptions::new().with_semiring(kind);
                if let Some(mask) = mask {
                    options = options.with_mask(mask.clone());
                }
                let want = reference::spgemm_with_options(x, y, &options).expect("reference");
                let positions = match mask_index {
                    2 => Some(&valued_positions),
                    0 => None,
                    _ => Some(&m),
                };
                // Grids smaller than the rows, and one-warp blocks, alternately.
                let (grid, block) = if kind as usize % 2 == 0 {
                    (2, 32)
                } else {
                    (1, 32)
                };
                cases.push((kind, *mode, lanes, (grid, block), x, y, positions));
                expected.push((kind, mask.clone(), want));
            }
        }
        let got = emulate::<T>(&cases);
        let products: u64 = (0..x.nrows())
            .map(|i| {
                x.row(i)
                    .0
                    .iter()
                    .map(|&k| y.row_nnz(k as usize))
                    .sum::<u64>()
            })
            .sum();
        for ((kind, mask, want), e) in expected.iter().zip(got) {
            let what = format!(
                "{} over {}, mask {:?}",
                kind,
                T::NAME,
                mask.as_ref().map(|m| (m.kind(), m.is_complemented()))
            );
            assert_eq!(e.c.row_offsets(), want.row_offsets(), "{what}: row offsets");
            assert_eq!(e.c.col_indices(), want.col_indices(), "{what}: columns");
            for i in 0..want.nrows() {
                let (cols, vals) = want.row(i);
                let (_, got_vals) = e.c.row(i);
                for (p, &j) in cols.iter().enumerate() {
                    let ok = match kind {
                        SemiringKind::AnyPair => got_vals[p] == T::from_f64(1.0),
                        SemiringKind::AnySecondI => {
                            let k = got_vals[p].text().parse::<f64>().expect("an index");
                            k >= 0.0
                                && k.fract() == 0.0
                                && x.row(i).0.binary_search(&(k as u32)).is_ok()
                                && y.row(k as usize).0.binary_search(&j).is_ok()
                        }
                        _ => got_vals[p] == vals[p],
                    };
                    assert!(
                        ok,
                        "{what}: C[{i}, {j}] = {:?}, expected {:?}",
                        got_vals[p], vals[p]
                    );
                }
            }
            assert_eq!(e.products, products, "{what}: products");
            // Masked: one multiply-add per product landing on an admitted entry.
            let landing: u64 = match mask {
                None => 0,
                Some(_) => (0..x.nrows())
                    .map(|i| {
                        let admitted = want.row(i).0;
                        x.row(i)
                            .0
                            .iter()
                            .map(|&k| {
                                y.row(k as usize)
                                    .0
                                    .iter()
                                    .filter(|j| admitted.binary_search(j).is_ok())
                                    .count() as u64
                            })
                            .sum::<u64>()
                    })
                    .sum(),
            };
            assert_eq!(e.multiply_adds, landing, "{what}: multiply-adds");
        }
    }
}

#[test]
fn f32_semirings() {
    check_type::<f32>();
}

#[test]
fn f64_semirings() {
    check_type::<f64>();
}

#[test]
fn half_precision_semirings() {
    check_type::<f16>();
    check_type::<bf16>();
}

#[test]
fn signed_integer_semirings_wrap() {
    check_type::<i32>();
    check_type::<i64>();
}

#[test]
fn unsigned_integer_semirings_wrap() {
    check_type::<u32>();
    check_type::<u64>();
}

#[test]
fn bool_semirings() {
    check_type::<bool>();
}
