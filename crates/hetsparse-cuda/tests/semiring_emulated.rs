//! The semiring kernels (`kernels-cuda/semiring.cu`) on the CPU, where there is no GPU: the same
//! source compiled by the host's C++ compiler over `tests/emulated/cuda_on_cpu.h` (every thread
//! a thread of its own, warps meeting at their synchronisations), chained as the backend chains
//! them (`src/spgemm/semiring.rs`), against the reference backend: every semiring defined over
//! every type the kernels run, unmasked, under a structural and a valued mask and under a
//! complemented one, with integer values that overflow (they must wrap), explicit zeros, an
//! empty row, grids smaller than the rows (grid-stride loops) and groups of 1 to 32 lanes;
//! each case again with small thresholds for heavy rows, so that rows are split into pieces
//! over blocks of one and two warps (rows staged in shared memory and rows too long for it);
//! and triangle counting's product and its neighbours on a graph with hubs. The masked
//! multiply-adds are counted too, and leaving the heavy rows' kernels out must be caught.
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

/// One case's result: C, the products, the multiply-adds counted and the heavy rows' pieces.
struct Emulation<T> {
    c: Csr<T>,
    products: u64,
    multiply_adds: u64,
    pieces: u64,
}

/// The backend's constants for heavy rows (`src/spgemm/semiring.rs`), as a case sets them:
/// rows of more than `heavy` products are split into pieces of `piece` products, whose blocks
/// stage rows of up to `shared_cols` columns in shared memory.
/// `launch_heavy` false leaves the heavy rows' kernels out: a broken backend, which the
/// checks must catch.
#[derive(Clone, Copy)]
struct Split {
    heavy: u64,
    piece: u64,
    shared_cols: u64,
    launch_heavy: bool,
}

/// No row heavy: the one-group kernels alone.
const NO_SPLIT: Split = Split {
    heavy: u64::MAX,
    piece: 1,
    shared_cols: 0,
    launch_heavy: true,
};

/// One product for the driver.
struct Case<'a, T> {
    kind: SemiringKind,
    /// `none`, `mask` or `complement`.
    mode: &'a str,
    lanes: u32,
    grid: u32,
    block: u32,
    split: Split,
    a: &'a Csr<T>,
    b: &'a Csr<T>,
    /// The mask's positions.
    mask: Option<&'a Csr<T>>,
}

/// Runs the cases in one driver process.
fn emulate<T: Emulated>(cases: &[Case<'_, T>]) -> Vec<Emulation<T>> {
    let mut input = String::new();
    for case in cases {
        let _ = writeln!(
            input,
            "{} {} {} {} {} {} {} {} {} {}",
            case.kind.name(),
            T::NAME,
            case.mode,
            case.lanes,
            case.grid,
            case.block,
            case.split.heavy,
            case.split.piece,
            case.split.shared_cols,
            u8::from(case.split.launch_heavy)
        );
        write_csr(&mut input, case.a, true);
        write_csr(&mut input, case.b, true);
        if let Some(m) = case.mask {
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
    for case in cases {
        let mut number = || {
            words
                .next()
                .expect("more output")
                .parse::<u64>()
                .expect("a count")
        };
        let nnz = number() as usize;
        let offsets: Vec<u64> = (0..=case.a.nrows()).map(|_| number()).collect();
        let cols: Vec<u32> = (0..nnz).map(|_| number() as u32).collect();
        let vals: Vec<T> = (0..nnz)
            .map(|_| T::parse(words.next().expect("a value")))
            .collect();
        let mut number = || {
            words
                .next()
                .expect("more output")
                .parse::<u64>()
                .expect("a count")
        };
        let (products, multiply_adds, pieces) = (number(), number(), number());
        let c = Csr::try_new(case.a.nrows(), case.b.ncols(), offsets, cols, vals)
            .expect("the driver's C is CSR");
        results.push(Emulation {
            c,
            products,
            multiply_adds,
            pieces,
        });
    }
    results
}

/// Lanes per row as the backend chooses them: about the mean length of B's rows.
fn lanes_for<T: Scalar>(b: &Csr<T>) -> u32 {
    let mean = b.nnz().div_ceil(b.nrows().max(1) as u64).max(1);
    mean.next_power_of_two().min(32) as u32
}

/// Checks one case's C against the reference's `want`, and its counts: the products of the
/// unmasked product and, masked, one multiply-add per product landing on an entry of C.
fn check_result<T: Emulated>(
    what: &str,
    kind: SemiringKind,
    (x, y): (&Csr<T>, &Csr<T>),
    masked: bool,
    want: &Csr<T>,
    e: &Emulation<T>,
) {
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
    let products: u64 = (0..x.nrows())
        .map(|i| {
            x.row(i)
                .0
                .iter()
                .map(|&k| y.row_nnz(k as usize))
                .sum::<u64>()
        })
        .sum();
    assert_eq!(e.products, products, "{what}: products");
    // Masked: one multiply-add per product landing on an admitted entry.
    let landing: u64 = if masked {
        (0..x.nrows())
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
            .sum()
    } else {
        0
    };
    assert_eq!(e.multiply_adds, landing, "{what}: multiply-adds");
}

/// The positions of a valued mask of `m`, as the backend uploads them.
fn valued_positions<T: Emulated>(m: &Csr<T>) -> Csr<T> {
    let mask = Mask::valued(m);
    let n = mask.col_indices().len();
    Csr::<T>::try_new(
        m.nrows(),
        m.ncols(),
        mask.row_offsets().to_vec(),
        mask.col_indices().to_vec(),
        vec![T::value(1); n],
    )
    .expect("positions")
}

/// Every semiring over `T`, every mask mode, two operand pairs, against the reference: with no
/// row heavy, and with small thresholds that split the rows of more than a few products into
/// pieces (some of whose rows fit the shared memory and some not).
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
    let splits = [
        NO_SPLIT,
        Split {
            heavy: 24,
            piece: 16,
            shared_cols: 8,
            launch_heavy: true,
        },
    ];
    for (pair, (x, y)) in pairs.iter().enumerate() {
        let m = random::<T>(x.nrows(), y.ncols(), 0.35, 45, 1);
        let masks: [(&str, Option<Mask>); 4] = [
            ("none", None),
            ("mask", Some(Mask::structural(&m))),
            ("mask", Some(Mask::valued(&m))),
            ("complement", Some(Mask::structural(&m).complemented())),
        ];
        let valued = valued_positions(&m);
        let lanes = lanes_for(y);
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
                    2 => Some(&valued),
                    0 => None,
                    _ => Some(&m),
                };
                for (s, split) in splits.iter().enumerate() {
                    // Grids smaller than the rows, one-warp and two-warp blocks, alternately.
                    let (grid, block) = match (kind as usize + s) % 3 {
                        0 => (2, 32),
                        1 => (1, 32),
                        _ => (2, 64),
                    };
                    cases.push(Case {
                        kind,
                        mode,
                        lanes,
                        grid,
                        block,
                        split: *split,
                        a: x,
                        b: y,
                        mask: positions,
                    });
                    expected.push((kind, mask.clone(), s, want.clone()));
                }
            }
        }
        let got = emulate::<T>(&cases);
        for ((kind, mask, s, want), e) in expected.iter().zip(got) {
            let what = format!(
                "{} over {}, mask {:?}, split {s}",
                kind,
                T::NAME,
                mask.as_ref().map(|m| (m.kind(), m.is_complemented()))
            );
            if *s > 0 {
                assert!(e.pieces > 0, "{what}: no row was heavy");
            }
            check_result(&what, *kind, (x, y), mask.is_some(), want, &e);
        }
    }
}

/// The adjacency of an undirected graph of `n` vertices with hubs: random edges (about
/// `degree` per vertex), the last vertex joined to most others, the one before it to every
/// third, and the middle one to every fifth. Values from `T::value`, every seventh an explicit
/// zero (what a valued mask refuses).
fn hub_graph<T: Emulated>(n: usize, degree: u64, seed: u64) -> Csr<T> {
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut rows = vec![std::collections::BTreeSet::new(); n];
    let join = |rows: &mut Vec<std::collections::BTreeSet<u32>>, i: usize, j: usize| {
        if i != j {
            rows[i].insert(j as u32);
            rows[j].insert(i as u32);
        }
    };
    for i in 0..n {
        for _ in 0..degree / 2 {
            let j = (next() % n as u64) as usize;
            join(&mut rows, i, j);
        }
    }
    for j in 0..n {
        if j % 8 != 0 {
            join(&mut rows, n - 1, j);
        }
        if j % 3 == 0 {
            join(&mut rows, n - 2, j);
        }
        if j % 5 == 0 {
            join(&mut rows, n / 2, j);
        }
    }
    let (mut offsets, mut cols, mut vals) = (vec![0u64], Vec::new(), Vec::new());
    for row in &rows {
        for &j in row {
            cols.push(j);
            let v = if cols.len() % 7 == 3 {
                0
            } else {
                (next() % 5) as i64 - 2
            };
            vals.push(T::value(v));
        }
        offsets.push(cols.len() as u64);
    }
    Csr::try_new(n, n, offsets, cols, vals).expect("a graph")
}

/// The strictly lower triangle of `m`.
fn lower<T: Emulated>(m: &Csr<T>) -> Csr<T> {
    let (mut offsets, mut cols, mut vals) = (vec![0u64], Vec::new(), Vec::new());
    for i in 0..m.nrows() {
        let (c, v) = m.row(i);
        for (&j, &x) in c.iter().zip(v) {
            if (j as usize) < i {
                cols.push(j);
                vals.push(x);
            }
        }
        offsets.push(cols.len() as u64);
    }
    Csr::try_new(m.nrows(), m.ncols(), offsets, cols, vals).expect("a triangle")
}

/// Triangle counting's product and its neighbours on a graph with hubs, `C⟨L⟩ = L·L` and
/// unmasked, valued and complemented, over the semirings of each kind of add (+, min, max,
/// any, logical or) with thresholds that split the hubs' rows into pieces: rows staged in
/// shared memory and rows too long for it, blocks of several warps, grids smaller than the
/// pieces. The reference's values, and the multiply-adds counted exactly.
fn check_hubs<T: Emulated>() {
    let l = lower(&hub_graph::<T>(160, 6, 46));
    let products: u64 = (0..l.nrows())
        .map(|i| {
            l.row(i)
                .0
                .iter()
                .map(|&k| l.row_nnz(k as usize))
                .sum::<u64>()
        })
        .max()
        .unwrap_or(0);
    let split = Split {
        heavy: 48,
        piece: 64,
        shared_cols: 40,
        launch_heavy: true,
    };
    assert!(products > 4 * split.piece, "the hubs are heavy: {products}");
    assert!(
        (0..l.nrows()).any(|i| l.row_nnz(i) > split.shared_cols),
        "some rows do not fit the shared memory"
    );
    let valued = valued_positions(&l);
    let masks = [
        ("none", None, None),
        ("mask", Some(Mask::structural(&l)), Some(&l)),
        ("mask", Some(Mask::valued(&l)), Some(&valued)),
        (
            "complement",
            Some(Mask::structural(&l).complemented()),
            Some(&l),
        ),
    ];
    let kinds = [
        SemiringKind::PlusPair,
        SemiringKind::PlusTimes,
        SemiringKind::MinPlus,
        SemiringKind::MaxTimes,
        SemiringKind::AnySecondI,
        SemiringKind::LorLand,
    ];
    let lanes = lanes_for(&l);
    let mut cases = Vec::new();
    let mut expected = Vec::new();
    for (mode, mask, positions) in &masks {
        for (n, &kind) in kinds.iter().enumerate() {
            let mut options = SpgemmOptions::new().with_semiring(kind);
            if let Some(mask) = mask {
                options = options.with_mask(mask.clone());
            }
            let want = reference::spgemm_with_options(&l, &l, &options).expect("reference");
            let (grid, block) = if n % 2 == 0 { (3, 64) } else { (2, 128) };
            cases.push(Case {
                kind,
                mode,
                lanes,
                grid,
                block,
                split,
                a: &l,
                b: &l,
                mask: *positions,
            });
            expected.push((kind, mask.clone(), want));
        }
    }
    let got = emulate::<T>(&cases);
    for ((kind, mask, want), e) in expected.iter().zip(got) {
        let what = format!(
            "hubs: {} over {}, mask {:?}",
            kind,
            T::NAME,
            mask.as_ref().map(|m| (m.kind(), m.is_complemented()))
        );
        assert!(e.pieces > 1, "{what}: the hubs were not split");
        check_result(&what, *kind, (&l, &l), mask.is_some(), want, &e);
    }
}

#[test]
fn hub_rows_split_over_blocks() {
    check_hubs::<i64>();
    check_hubs::<f64>();
    check_hubs::<i32>();
    check_hubs::<f32>();
    check_hubs::<u64>();
}

/// Without the heavy rows' kernels, the hubs' rows are missing from C: the checks above see
/// the split path's work (a mutation of the backend they must catch).
#[test]
fn hub_rows_left_out_are_caught() {
    let l = lower(&hub_graph::<i64>(160, 6, 46));
    let mask = Mask::structural(&l);
    let options = SpgemmOptions::new()
        .with_semiring(SemiringKind::PlusPair)
        .with_mask(mask);
    let want = reference::spgemm_with_options(&l, &l, &options).expect("reference");
    let case = |launch_heavy| Case {
        kind: SemiringKind::PlusPair,
        mode: "mask",
        lanes: lanes_for(&l),
        grid: 2,
        block: 64,
        split: Split {
            heavy: 48,
            piece: 64,
            shared_cols: 40,
            launch_heavy,
        },
        a: &l,
        b: &l,
        mask: Some(&l),
    };
    let got = emulate::<i64>(&[case(true), case(false)]);
    assert_eq!(got[0].c.col_indices(), want.col_indices());
    assert_eq!(got[0].c.values(), want.values());
    assert!(
        got[1].c.col_indices() != want.col_indices() || got[1].c.values() != want.values(),
        "C is right without the heavy rows' kernels"
    );
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
