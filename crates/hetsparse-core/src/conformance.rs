//! The backend conformance suite: one macro gives a backend crate the whole suite.
//!
//! ```ignore
//! // crates/my-backend/tests/conformance.rs
//! hetsparse_core::conformance_suite! {
//!     backend: my_backend::MyBackend::new(),   // Result<B, hetsparse_core::Error>
//!     scalars: [f32, f64, c32, c64, f16, bf16, bool, i32, i64, u32, u64], // Backend<T> for each
//! }
//! ```
//!
//! For each scalar type the macro makes one test per check below. Each check exercises every
//! operation the backend's [`Device::capabilities`](crate::Device::capabilities) lists for that type and compares with the serial
//! reference: SpGEMM results must have exactly the reference's structure (entries whose values
//! cancel are kept as explicit zeros) and values within a tolerance scaled by the magnitudes
//! summed; results of operations on DIA and BSR operands (which hold no structure inside a
//! diagonal or block) are compared by value, a missing entry counting as zero.
//!
//! A backend whose constructor returns [`Error::NoDevice`] is skipped with a line on stderr,
//! unless the environment variable `HETSPARSE_REQUIRE_DEVICE` is `1`: then the tests fail, so
//! that CI notices a device that silently went missing. `PROPTEST_CASES` sets the number of
//! random cases per property (default 24).

use std::fmt::Debug;
use std::ops::Range;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

use std::mem::size_of;

use crate::backend::{
    Backend, CsrOperand, DenseOperand, Mask, MemorySpace, Operation, PatternId, ProductBuffer,
    ProductChunk, ProductLayout, Residency, ResidentCsr, ResidentDense, RunControl, SemiringKind,
    SparseOperand, SpgemmAlgorithm, SpgemmOptions, SpmmOptions, SpmvOptions, VectorOperand,
    VectorProductKind, VectorProductOptions,
};
use crate::error::Error;
use crate::format::{
    Bsr, Coo, Csc, Cspr, Csr, Dense, Dia, Ellr, Layout, SparseFormat, SparseRef, SplicedCsr,
};
use crate::generate::{self, MatrixClass, Rng};
use crate::reference;
use crate::scalar::{Accumulator, Scalar, ScalarType};
use crate::semiring::PlusTimes;
use crate::vector::SparseVector;

/// Re-exported for the macro.
#[doc(hidden)]
pub use std::sync::OnceLock;

/// Every sparse format, in the order the checks walk them.
pub const FORMATS: [SparseFormat; 7] = SparseFormat::ALL;

/// Turns a backend constructor's result into the backend, or `None` to skip (see module docs).
pub fn obtain<B>(suite: &str, made: Result<B, Error>) -> Option<B> {
    match made {
        Ok(b) => Some(b),
        Err(e @ Error::NoDevice { .. }) => {
            if std::env::var("HETSPARSE_REQUIRE_DEVICE").as_deref() == Ok("1") {
                panic!("conformance suite {suite}: HETSPARSE_REQUIRE_DEVICE=1 but {e}");
            }
            eprintln!("conformance suite {suite}: SKIPPED, {e}");
            None
        }
        Err(e) => panic!("conformance suite {suite}: the backend could not be constructed: {e}"),
    }
}

/// Generates the conformance tests for a backend; see the [module docs](self).
///
/// The tests call the checks through [`compiled`], where each check is compiled once for each
/// scalar type, taking `&dyn Backend<T>`: a backend's test crate then builds only its own
/// backend, not the whole suite again.
#[macro_export]
macro_rules! conformance_suite {
    (backend: $make:expr, scalars: [$($s:ident),+ $(,)?] $(,)?) => {
        $( $crate::conformance_suite!(@scalar $s, $make); )+
    };
    (@scalar $s:ident, $make:expr) => {
        #[allow(non_snake_case)]
        mod $s {
            #[allow(unused_imports)]
            use super::*;
            type T = $crate::conformance_suite!(@type $s);
            type Shared = ::std::option::Option<::std::boxed::Box<dyn $crate::Backend<T>>>;

            fn backend() -> &'static Shared {
                static BACKEND: $crate::conformance::OnceLock<Shared> =
                    $crate::conformance::OnceLock::new();
                BACKEND.get_or_init(|| {
                    $crate::conformance::obtain(stringify!($s), $make)
                        .map(|b| ::std::boxed::Box::new(b) as ::std::boxed::Box<dyn $crate::Backend<T>>)
                })
            }

            $crate::conformance_suite!(@checks tests $s);

            /// Two backends made the same way run on the same memory and take each other's
            /// handles.
            #[test]
            fn handles_are_shared_on_one_device() {
                let first = $crate::conformance::obtain(stringify!($s), $make);
                let second = $crate::conformance::obtain(stringify!($s), $make);
                if let (Some(first), Some(second)) = (first, second) {
                    $crate::conformance::compiled::$s::handles_are_shared_on_one_device(
                        &first, &second,
                    );
                }
            }

            /// On a backend of its own, so that no other test's memory is counted.
            #[test]
            fn requirement_bounds_allocation() {
                if let Some(b) = $crate::conformance::obtain(stringify!($s), $make) {
                    $crate::conformance::compiled::$s::requirement_bounds_allocation(&b);
                }
            }
        }
    };
    // The one list of checks, handed to `@tests` (a backend's test crate) or `@compile`
    // (hetsparse-core's `compiled` module).
    (@checks $mode:ident $s:ident) => {
        $crate::conformance_suite!(@$mode $s:
            capabilities_are_consistent, spgemm_edge_cases, spgemm_matrix_classes,
            spgemm_random, spgemm_chunks, spgemm_chunks_into, spgemm_chunk_counts,
            spgemm_rejects_bad_operands, spgemm_spliced, unclaimed_spgemm_options_are_refused,
            spgemm_semirings_and_masks, masks_are_kept_where_products_read_them,
            vector_products_semirings_and_masks,
            unclaimed_vector_products_are_refused,
            spmv_every_format,
            spmm_every_format, dia_spgemm, bsr_spgemm, unclaimed_operations_never_panic,
            resident_round_trips, mixed_host_and_resident_operands, resident_chain,
            plan_reuse_with_new_values, foreign_handles_are_errors,
            handles_never_lie_about_their_pattern,
            cancellation_and_progress, cancellation_mid_product, concurrent_calls, padding_is_not_multiplied,
            padding_is_not_multiplied_in_products,
            sizes_from_the_shape_are_errors_not_aborts
        );
    };
    (@tests $s:ident: $($check:ident),+) => {
        $(
            #[test]
            fn $check() {
                if let Some(b) = backend() {
                    $crate::conformance::compiled::$s::$check(&**b);
                }
            }
        )+
    };
    (@compile $s:ident: $($check:ident),+) => {
        #[allow(non_snake_case, missing_docs)]
        pub mod $s {
            use $crate::Backend;
            type T = $crate::conformance_suite!(@type $s);
            $(
                pub fn $check(b: &dyn Backend<T>) {
                    $crate::conformance::$check::<T, dyn Backend<T>>(b)
                }
            )+
            pub fn handles_are_shared_on_one_device(first: &dyn Backend<T>, second: &dyn Backend<T>) {
                $crate::conformance::handles_are_shared_on_one_device::<T, dyn Backend<T>>(
                    first, second,
                )
            }
            pub fn requirement_bounds_allocation(b: &dyn Backend<T>) {
                $crate::conformance::requirement_bounds_allocation::<T, dyn Backend<T>>(b)
            }
        }
    };
    (@type f32) => { f32 };
    (@type f64) => { f64 };
    (@type c32) => { $crate::Complex<f32> };
    (@type c64) => { $crate::Complex<f64> };
    (@type f16) => { $crate::f16 };
    (@type bf16) => { $crate::bf16 };
    (@type bool) => { bool };
    (@type i32) => { i32 };
    (@type i64) => { i64 };
    (@type u32) => { u32 };
    (@type u64) => { u64 };
}

/// Every check compiled once per scalar type, for `dyn Backend<T>` (what the macro's tests
/// call; not for use otherwise).
#[doc(hidden)]
pub mod compiled {
    crate::conformance_suite!(@checks compile f32);
    crate::conformance_suite!(@checks compile f64);
    crate::conformance_suite!(@checks compile c32);
    crate::conformance_suite!(@checks compile c64);
    crate::conformance_suite!(@checks compile f16);
    crate::conformance_suite!(@checks compile bf16);
    crate::conformance_suite!(@checks compile bool);
    crate::conformance_suite!(@checks compile i32);
    crate::conformance_suite!(@checks compile i64);
    crate::conformance_suite!(@checks compile u32);
    crate::conformance_suite!(@checks compile u64);
}

// ---------------------------------------------------------------------------------------------
// Tolerances and comparison

/// The error a sum of `terms` products may carry in either order of summation: each partial sum
/// rounds once in the accumulator (bounded by `terms · ε_acc · Σ|a||b|`), and the final value
/// rounds once to storage, in the backend and in the reference.
fn tolerance<T: Scalar>(terms: u64, magnitude_sum: f64, expected: T) -> f64 {
    let acc_eps = <T::Acc as Accumulator>::EPSILON;
    2.0 * (terms.max(1) as f64) * acc_eps * magnitude_sum
        + 2.0 * T::TYPE.epsilon() * expected.magnitude()
        + f64::MIN_POSITIVE
}

fn magnitudes<T: Scalar>(a: &Csr<T>) -> Csr<f64> {
    let mut m = a.map_scalar::<f64>();
    for (dst, src) in m.values_mut().iter_mut().zip(a.values()) {
        *dst = src.magnitude();
    }
    m
}

fn row_terms<T: Scalar>(a: &Csr<T>) -> Vec<u64> {
    (0..a.nrows()).map(|i| a.row_nnz(i)).collect()
}

/// The reference product with what is needed to judge another: Σ|a||b| per entry and the
/// number of terms per row.
struct Expected<T> {
    c: Csr<T>,
    magnitude: Csr<f64>,
    terms: Vec<u64>,
}

fn expected_product<T: Scalar>(a: &Csr<T>, b: &Csr<T>) -> Expected<T> {
    let c = reference::spgemm::<T, PlusTimes>(a, b).expect("reference SpGEMM");
    let magnitude =
        reference::spgemm::<f64, PlusTimes>(&magnitudes(a), &magnitudes(b)).expect("magnitudes");
    Expected {
        c,
        magnitude,
        terms: row_terms(a),
    }
}

/// Same structure as the reference, values within tolerance.
fn compare_structural<T: Scalar>(actual: &Csr<T>, e: &Expected<T>) -> Result<(), String> {
    if actual.shape() != e.c.shape() {
        return Err(format!(
            "shape {:?}, expected {:?}",
            actual.shape(),
            e.c.shape()
        ));
    }
    for i in 0..e.c.nrows() {
        let (ac, av) = actual.row(i);
        let (ec, ev) = e.c.row(i);
        if ac != ec {
            return Err(format!(
                "row {i} has columns {:?}, expected {:?} (explicit zeros from cancellation must be kept)",
                truncate(ac),
                truncate(ec)
            ));
        }
        let (_, mv) = e.magnitude.row(i);
        for k in 0..ec.len() {
            let tol = tolerance(e.terms[i], mv[k], ev[k]);
            let diff = distance(av[k], ev[k]);
            if diff > tol || diff.is_nan() {
                return Err(format!(
                    "C[{i}, {}] = {:?}, expected {:?} (difference {diff:e}, tolerance {tol:e})",
                    ec[k], av[k], ev[k]
                ));
            }
        }
    }
    Ok(())
}

/// Values within tolerance where an entry missing on one side counts as zero.
fn compare_values<T: Scalar>(actual: &Csr<T>, e: &Expected<T>) -> Result<(), String> {
    if actual.shape() != e.c.shape() {
        return Err(format!(
            "shape {:?}, expected {:?}",
            actual.shape(),
            e.c.shape()
        ));
    }
    let zero = T::zero();
    for i in 0..e.c.nrows() {
        let (ac, av) = actual.row(i);
        let (ec, ev) = e.c.row(i);
        let (mc, mv) = e.magnitude.row(i);
        let mut cols: Vec<u32> = ac.iter().chain(ec).copied().collect();
        cols.sort_unstable();
        cols.dedup();
        for j in cols {
            let find = |c: &[u32], v: &[T]| c.binary_search(&j).map_or(zero, |k| v[k]);
            let (a, x) = (find(ac, av), find(ec, ev));
            let m = mc.binary_search(&j).map_or(0.0, |k| mv[k]);
            let tol = tolerance(e.terms[i], m, x);
            let diff = distance(a, x);
            if diff > tol || diff.is_nan() {
                return Err(format!(
                    "C[{i}, {j}] = {a:?}, expected {x:?} (difference {diff:e}, tolerance {tol:e})"
                ));
            }
        }
    }
    Ok(())
}

fn distance<T: Scalar>(a: T, b: T) -> f64 {
    let (ar, ai) = a.to_parts();
    let (br, bi) = b.to_parts();
    ((ar - br).powi(2) + (ai - bi).powi(2)).sqrt()
}

fn truncate(c: &[u32]) -> &[u32] {
    &c[..c.len().min(16)]
}

/// Dense results (SpMV, SpMM): element by element against the reference.
fn compare_dense<T: Scalar>(
    actual: &[T],
    expected: &[T],
    magnitude: &[f64],
    terms: &[u64],
    what: &str,
) -> Result<(), String> {
    if actual.len() != expected.len() {
        return Err(format!(
            "{what}: {} values, expected {}",
            actual.len(),
            expected.len()
        ));
    }
    for k in 0..expected.len() {
        let tol = tolerance(terms[k], magnitude[k], expected[k]);
        let diff = distance(actual[k], expected[k]);
        if diff > tol || diff.is_nan() {
            return Err(format!(
                "{what}[{k}] = {:?}, expected {:?} (difference {diff:e}, tolerance {tol:e})",
                actual[k], expected[k]
            ));
        }
    }
    Ok(())
}

#[track_caller]
fn check(result: Result<(), String>, context: impl Fn() -> String) {
    if let Err(msg) = result {
        panic!("{}: {msg}", context());
    }
}

// ---------------------------------------------------------------------------------------------
// Operands

fn from_values<T: Scalar>(nrows: usize, ncols: usize, entries: &[(usize, usize, f64)]) -> Csr<T> {
    let mut c = Coo::new(nrows, ncols).expect("shape");
    for &(i, j, v) in entries {
        c.try_push(i, j, T::from_f64(v)).expect("entry");
    }
    c.to_csr().expect("CSR")
}

/// A random sparse matrix: each entry present with probability `density`.
fn random_csr<T: Scalar>(nrows: usize, ncols: usize, density: f64, seed: u64) -> Csr<T> {
    let mut rng = Rng::new(seed);
    let mut c = Coo::new(nrows, ncols).expect("shape");
    for i in 0..nrows {
        for j in 0..ncols {
            if rng.next_f64() < density {
                let sign = if rng.next_u64() & 1 == 0 { 1.0 } else { -1.0 };
                let re = sign * (0.1 + 0.9 * rng.next_f64());
                let im = rng.next_f64() - 0.5;
                c.try_push(i, j, generate::value_of(re, im)).expect("entry");
            }
        }
    }
    c.to_csr().expect("CSR")
}

/// Named small operand pairs that cover the edge cases.
fn edge_cases<T: Scalar>() -> Vec<(&'static str, Csr<T>, Csr<T>)> {
    let e = |r, c| Csr::<T>::zeros(r, c).expect("shape");
    let mut dense_row = vec![];
    for j in 0..40 {
        dense_row.push((3, j, 1.0 + j as f64 / 64.0));
        dense_row.push((j % 5, j, 0.5));
    }
    vec![
        ("0×5 · 5×3", e(0, 5), random_csr(5, 3, 0.5, 1)),
        ("4×0 · 0×3", e(4, 0), e(0, 3)),
        ("3×4 · 4×0", random_csr(3, 4, 0.5, 2), e(4, 0)),
        ("empty · empty", e(6, 6), e(6, 6)),
        (
            "1×1",
            from_values(1, 1, &[(0, 0, 3.0)]),
            from_values(1, 1, &[(0, 0, -2.0)]),
        ),
        (
            "identity · random",
            Csr::identity(9).expect("id"),
            random_csr(9, 9, 0.3, 3),
        ),
        (
            "empty rows and columns",
            from_values(5, 5, &[(0, 1, 1.0), (0, 3, 2.0), (4, 1, -1.0)]),
            from_values(5, 5, &[(1, 0, 2.0), (1, 4, 1.0), (3, 4, 0.5)]),
        ),
        (
            "rectangular 3×7 · 7×2",
            random_csr(3, 7, 0.6, 4),
            random_csr(7, 2, 0.6, 5),
        ),
        (
            "rectangular 8×2 · 2×9",
            random_csr(8, 2, 0.7, 6),
            random_csr(2, 9, 0.7, 7),
        ),
        (
            "a single dense row and column",
            from_values(6, 40, &dense_row),
            from_values(
                40,
                6,
                &dense_row
                    .iter()
                    .map(|&(i, j, v)| (j, i, v))
                    .collect::<Vec<_>>(),
            ),
        ),
        (
            "values that cancel to zero",
            // −1 as the type's additive inverse of 1 (2^n − 1 in the unsigned types, where
            // 1 · 2 + (2^n − 1) · 2 wraps to 0; `bool` has no inverse and cancels nothing).
            Csr::try_new(
                2,
                3,
                vec![0, 2, 3],
                vec![0, 1, 2],
                vec![T::from_f64(1.0), T::from_f64(1.0).neg(), T::from_f64(2.0)],
            )
            .expect("csr"),
            from_values(3, 2, &[(0, 0, 2.0), (1, 0, 2.0), (0, 1, 1.0), (2, 1, 0.5)]),
        ),
        (
            "explicit zeros in the operands",
            Csr::try_new(
                2,
                2,
                vec![0, 2, 3],
                vec![0, 1, 1],
                vec![T::zero(), T::from_f64(1.0), T::zero()],
            )
            .expect("csr"),
            from_values(2, 2, &[(0, 0, 1.0), (1, 1, 1.0)]),
        ),
    ]
}

fn spgemm_algorithms<T: Scalar, B: Backend<T> + ?Sized>(b: &B) -> Vec<SpgemmAlgorithm> {
    b.capabilities()
        .operations(T::TYPE)
        .into_iter()
        .filter_map(|op| match op {
            Operation::Spgemm(alg) => Some(alg),
            _ => None,
        })
        .collect()
}

fn claims<T: Scalar, B: Backend<T> + ?Sized>(b: &B, op: Operation) -> bool {
    b.capabilities().supports(op, T::TYPE)
}

fn name<T: Scalar, B: Backend<T> + ?Sized>(b: &B) -> String {
    format!("{} backend, {}", b.info().backend, T::TYPE)
}

/// Class operands small enough for a debug-build reference.
fn class_operands<T: Scalar>(class: MatrixClass) -> (Csr<T>, Csr<T>) {
    let size = match class {
        MatrixClass::Dense => 48,
        MatrixClass::Stencil3d => 200,
        _ => 300,
    };
    generate::product_operands::<T>(class, size, 0x5eed + class as u64)
}

// ---------------------------------------------------------------------------------------------
// Checks

/// SpGEMM options beyond plain plus-times that the backend does not list
/// ([`crate::Capabilities::spgemm_features`]) are [`Error::Unsupported`] on every SpGEMM entry
/// point, never ignored (a mask or a semiring ignored is a wrong answer).
pub fn unclaimed_spgemm_options_are_refused<T: Scalar, B: Backend<T> + ?Sized>(b: &B) {
    use crate::backend::{AccumulateOp, Mask, SemiringKind, SpgemmFeatures};
    let nm = name(b);
    if !claims(b, Operation::Spgemm(SpgemmAlgorithm::Auto)) {
        return;
    }
    let (x, y) = class_operands::<T>(MatrixClass::Uniform);
    let c = reference::spgemm::<T, PlusTimes>(&x, &y).expect("the reference product");
    let features: SpgemmFeatures = b.capabilities().spgemm_features(T::TYPE);
    let mut variants: Vec<(String, SpgemmOptions)> = Vec::new();
    for s in SemiringKind::ALL {
        if !features.semirings.contains(&s) {
            variants.push((
                format!("the {s} semiring"),
                SpgemmOptions::new().with_semiring(s),
            ));
        }
    }
    for (what, mask) in [
        ("a structural mask", Mask::structural(&c)),
        ("a valued mask", Mask::valued(&c)),
        ("a complemented mask", Mask::structural(&c).complemented()),
    ] {
        let o = SpgemmOptions::new().with_mask(mask);
        if o.unsupported_by(&features).is_some() {
            variants.push((what.into(), o));
        }
    }
    for acc in [AccumulateOp::Plus, AccumulateOp::Min, AccumulateOp::Second] {
        if !features.accumulators.contains(&acc) {
            variants.push((
                format!("the {acc} accumulator"),
                SpgemmOptions::new().with_accumulator(acc),
            ));
        }
    }
    let refused = |what: &str, path: &str, r: Result<(), Error>| {
        assert!(
            matches!(r, Err(Error::Unsupported { .. })),
            "{nm}: SpGEMM with {what} ({path}) gave {r:?}, not Unsupported"
        );
    };
    let chunks = [
        ProductChunk {
            rows: 0..x.nrows() / 2,
            cols: 0..y.ncols(),
        },
        ProductChunk {
            rows: x.nrows() / 2..x.nrows(),
            cols: 0..y.ncols(),
        },
    ];
    let run = RunControl::new();
    for (what, o) in &variants {
        let (hx, hy): (CsrOperand<'_, T>, CsrOperand<'_, T>) = ((&x).into(), (&y).into());
        refused(
            what,
            "spgemm_with",
            b.spgemm_with(hx, hy, o, &run).map(drop),
        );
        refused(
            what,
            "spgemm_resident",
            b.spgemm_resident(hx, hy, o, &run).map(drop),
        );
        refused(what, "plan_spgemm", b.plan_spgemm(hx, hy, o).map(drop));
        refused(
            what,
            "spgemm_requirement",
            b.spgemm_requirement(hx, hy, o).map(drop),
        );
        let mut delivered = 0;
        let r = b.spgemm_chunks(hx, hy, &chunks, o, &run, &mut |_| {
            delivered += 1;
            Ok(())
        });
        refused(what, "spgemm_chunks", r);
        assert_eq!(delivered, 0, "{nm}: chunks with {what} were delivered");
        let r = b.spgemm_chunk_counts(hx, hy, &chunks, o, &run, &mut |_, _| Ok(()));
        refused(what, "spgemm_chunk_counts", r);
        let all_columns = std::iter::once(0..y.ncols()).collect();
        let layout = ProductLayout::count(&x, &y, all_columns).expect("C's layout");
        let buffer = ProductBuffer::<T>::new(layout).expect("C's arrays");
        let mut places = Vec::new();
        for chunk in &chunks {
            let segments = buffer.layout().segments(0, chunk.rows.clone());
            // SAFETY: the chunks' rows tile C, so no two places share a position.
            places.push(unsafe { buffer.place(chunk.clone(), 0, segments) }.expect("a place"));
        }
        let r = b.spgemm_chunks_into(hx, hy, &mut places, o, &run, &mut |_, _| Ok(()));
        refused(what, "spgemm_chunks_into", r);
    }
    // Plain options with any algorithm stay plain, and run.
    assert!(SpgemmOptions::new().is_plain());
}

/// Operands for [`spgemm_semirings_and_masks`]: random values of both signs with some
/// explicit zeros (so that valued masks differ from structural ones), an empty row in A, and
/// a class matrix.
fn semiring_operands<T: Scalar>() -> Vec<(&'static str, Csr<T>, Csr<T>)> {
    let with_zeros = |m: Csr<T>, every: usize| {
        let mut m = m;
        for (k, v) in m.values_mut().iter_mut().enumerate() {
            if k % every == 3 {
                *v = T::zero();
            }
        }
        m
    };
    let mut a = with_zeros(random_csr(30, 25, 0.2, 41), 7);
    // Row 2 of A is empty.
    let (mut offsets, mut cols, mut vals) = (vec![0u64], Vec::new(), Vec::new());
    for i in 0..a.nrows() {
        if i != 2 {
            let (c, v) = a.row(i);
            cols.extend_from_slice(c);
            vals.extend_from_slice(v);
        }
        offsets.push(cols.len() as u64);
    }
    a = Csr::try_new(30, 25, offsets, cols, vals).expect("A without row 2");
    let (x, y) = class_operands::<T>(MatrixClass::PowerLaw);
    vec![
        (
            "random with zeros",
            a,
            with_zeros(random_csr(25, 28, 0.25, 42), 5),
        ),
        ("power-law", x, y),
    ]
}

/// The masks of [`spgemm_semirings_and_masks`] for a product of shape `shape`: a random
/// matrix with explicit zeros and an empty row 1, as each mode; and one admitting nothing.
fn semiring_masks<T: Scalar>(shape: (usize, usize)) -> Vec<(&'static str, Option<Mask>)> {
    let mut m = random_csr::<T>(shape.0, shape.1, 0.3, 43);
    for (k, v) in m.values_mut().iter_mut().enumerate() {
        if k % 3 == 1 {
            *v = T::zero();
        }
    }
    if m.nrows() > 1 {
        let (mut offsets, mut cols, mut vals) = (vec![0u64], Vec::new(), Vec::new());
        for i in 0..m.nrows() {
            if i != 1 {
                let (c, v) = m.row(i);
                cols.extend_from_slice(c);
                vals.extend_from_slice(v);
            }
            offsets.push(cols.len() as u64);
        }
        m = Csr::try_new(shape.0, shape.1, offsets, cols, vals).expect("mask");
    }
    let nothing = Csr::<T>::zeros(shape.0, shape.1).expect("empty mask");
    vec![
        ("no mask", None),
        ("structural", Some(Mask::structural(&m))),
        ("valued", Some(Mask::valued(&m))),
        (
            "complemented structural",
            Some(Mask::structural(&m).complemented()),
        ),
        ("complemented valued", Some(Mask::valued(&m).complemented())),
        ("admitting nothing", Some(Mask::structural(&nothing))),
        (
            "complement of nothing",
            Some(Mask::structural(&nothing).complemented()),
        ),
    ]
}

/// The semiring whose result over the operands' magnitudes bounds what rounding can move an
/// entry of `kind` by ([`tolerance`]'s magnitude sum).
fn magnitude_semiring(kind: SemiringKind) -> SemiringKind {
    match kind {
        SemiringKind::MinPlus | SemiringKind::MaxPlus => SemiringKind::MaxPlus,
        SemiringKind::MinFirst => SemiringKind::PlusFirst,
        SemiringKind::MinSecond => SemiringKind::PlusSecond,
        other => other,
    }
}

/// `actual` against the reference `want` of `C⟨M⟩ = x · y` over `kind`: the same structure,
/// and values within tolerance; for "any" semirings, any valid product (1 for `any_pair`, an
/// inner index `k` with `x(i,k)` and `y(k,j)` stored for `any_secondi`).
fn compare_semiring<T: Scalar>(
    kind: SemiringKind,
    actual: &Csr<T>,
    want: &Csr<T>,
    magnitude: &Csr<f64>,
    x: &Csr<T>,
    y: &Csr<T>,
) -> Result<(), String> {
    if actual.shape() != want.shape() {
        return Err(format!(
            "shape {:?}, expected {:?}",
            actual.shape(),
            want.shape()
        ));
    }
    for (i, &terms) in row_terms(x).iter().enumerate() {
        let (ac, av) = actual.row(i);
        let (ec, ev) = want.row(i);
        if ac != ec {
            return Err(format!(
                "row {i} has columns {:?}, expected {:?}",
                truncate(ac),
                truncate(ec)
            ));
        }
        let (_, mv) = magnitude.row(i);
        for e in 0..ec.len() {
            let (j, a) = (ec[e], av[e]);
            let valid = match kind {
                SemiringKind::AnyPair => a == T::from_f64(1.0),
                SemiringKind::AnySecondI => {
                    let k = a.to_parts().0;
                    k >= 0.0
                        && k.fract() == 0.0
                        && (k as usize) < x.ncols()
                        && x.row(i).0.binary_search(&(k as u32)).is_ok()
                        && y.row(k as usize).0.binary_search(&j).is_ok()
                }
                _ => {
                    let tol = tolerance(terms, mv[e].abs(), ev[e]);
                    let diff = distance(a, ev[e]);
                    // Equal infinities (no finite product) are equal.
                    a == ev[e] || diff <= tol
                }
            };
            if !valid {
                return Err(format!("C[{i}, {j}] = {a:?}, expected {:?}", ev[e]));
            }
        }
    }
    Ok(())
}

/// Every semiring and mask mode the backend claims for `T`
/// ([`crate::Capabilities::spgemm_features`]) against the reference, through `spgemm_with`,
/// `spgemm_resident` and the chunk protocol (chunks and their counts): C's structure exactly
/// (the masked structural product: entries where admitted products land, whatever their
/// value) and its values as the semiring defines them. The operands hold negative values and
/// explicit zeros, an empty row in A and one in the mask, and one mask admits nothing; the
/// check first makes sure that each mode's and each semiring's reference result differs from
/// the unmasked plus-times one, so that a backend ignoring either fails.
pub fn spgemm_semirings_and_masks<T: Scalar, B: Backend<T> + ?Sized>(b: &B) {
    let features = b.capabilities().spgemm_features(T::TYPE);
    if features == crate::backend::SpgemmFeatures::plain()
        || !claims(b, Operation::Spgemm(SpgemmAlgorithm::Auto))
    {
        return;
    }
    let nm = name(b);
    let run = RunControl::new();
    for (case, x, y) in semiring_operands::<T>() {
        let plain = reference::spgemm::<T, PlusTimes>(&x, &y).expect("reference");
        let (mx, my) = (magnitudes(&x), magnitudes(&y));
        for (mode, mask) in semiring_masks::<T>(plain.shape()) {
            let base = SpgemmOptions::new();
            let base = match &mask {
                Some(m) => base.with_mask(m.clone()),
                None => base,
            };
            if base.unsupported_by(&features).is_some() {
                continue;
            }
            let masked_plain = reference::spgemm_with_options(&x, &y, &base).expect("reference");
            if mask.is_some() && case == "random with zeros" && mode != "complement of nothing" {
                assert_ne!(
                    masked_plain.col_indices(),
                    plain.col_indices(),
                    "the {mode} mask of the check admits every entry"
                );
            }
            for kind in SemiringKind::ALL {
                let options = base.clone().with_semiring(kind);
                if options.unsupported_by(&features).is_some() {
                    continue;
                }
                let want = reference::spgemm_with_options(&x, &y, &options).expect("reference");
                // Over bool several semirings are one (GraphBLAS renames plus_times,
                // max_times and max_min to lor_land): there the values may agree.
                if kind != SemiringKind::PlusTimes && want.nnz() > 0 && T::TYPE != ScalarType::Bool
                {
                    assert_ne!(
                        want.values(),
                        masked_plain.values(),
                        "{kind} gives plus-times' values on {case}"
                    );
                }
                let magnitude_options = options.clone().with_semiring(magnitude_semiring(kind));
                let magnitude = reference::spgemm_with_options(&mx, &my, &magnitude_options)
                    .expect("magnitudes");
                let what = || format!("{nm}: {kind}, {mode}, on {case}");
                let (hx, hy): (CsrOperand<'_, T>, CsrOperand<'_, T>) = ((&x).into(), (&y).into());
                let got = b
                    .spgemm_with(hx, hy, &options, &run)
                    .unwrap_or_else(|e| panic!("{}: {e}", what()));
                check(
                    compare_semiring(kind, &got, &want, &magnitude, &x, &y),
                    what,
                );
                let resident = b
                    .spgemm_resident(hx, hy, &options, &run)
                    .and_then(|r| b.download(&r))
                    .unwrap_or_else(|e| panic!("{} (resident): {e}", what()));
                check(
                    compare_semiring(kind, &resident, &want, &magnitude, &x, &y),
                    || format!("{} (resident)", what()),
                );
                if kind == SemiringKind::PlusTimes || kind == SemiringKind::MinPlus {
                    semiring_chunks(b, &x, &y, &options, &want, &what);
                }
            }
        }
    }
}

/// A mask used again — triangle counting's `C⟨L⟩ = L·L` in a loop — is read from the copy a
/// device backend keeps with it ([`Mask::kept_in`]): the same mask on a second call, on new
/// operands, as a complemented clone and on a resident call gives the reference's product each
/// time, and a backend computing in a device's memory keeps one copy of its positions there
/// (a host backend keeps none of its own; a scheduler's devices may keep theirs). Backends
/// claiming no masks are skipped.
pub fn masks_are_kept_where_products_read_them<T: Scalar, B: Backend<T> + ?Sized>(b: &B) {
    let features = b.capabilities().spgemm_features(T::TYPE);
    if !claims(b, Operation::Spgemm(SpgemmAlgorithm::Auto)) {
        return;
    }
    let nm = name(b);
    let run = RunControl::new();
    let (_, x, y) = semiring_operands::<T>().swap_remove(0);
    let (nx, ny) = (
        random_csr::<T>(x.nrows(), x.ncols(), 0.3, 45),
        random_csr::<T>(y.nrows(), y.ncols(), 0.3, 46),
    );
    let mask = Mask::structural(&random_csr::<T>(x.nrows(), y.ncols(), 0.3, 44));
    let kind = SemiringKind::PlusTimes;
    if SpgemmOptions::new()
        .with_mask(mask.clone())
        .unsupported_by(&features)
        .is_some()
    {
        return;
    }
    let calls = [
        ("the first call", mask.clone(), &x, &y, false),
        ("the same mask again", mask.clone(), &x, &y, false),
        (
            "the same mask on new operands",
            mask.clone(),
            &nx,
            &ny,
            false,
        ),
        ("the same mask, resident", mask.clone(), &x, &y, true),
        (
            "a complemented clone",
            mask.clone().complemented(),
            &x,
            &y,
            false,
        ),
        ("the mask once more", mask.clone(), &nx, &ny, false),
    ];
    for (what, call_mask, a, c, resident) in &calls {
        let options = SpgemmOptions::new()
            .with_semiring(kind)
            .with_mask(call_mask.clone());
        if options.unsupported_by(&features).is_some() {
            continue;
        }
        let want = reference::spgemm_with_options(a, c, &options).expect("reference");
        let magnitude = reference::spgemm_with_options(&magnitudes(a), &magnitudes(c), &options)
            .expect("magnitudes");
        let (ha, hc): (CsrOperand<'_, T>, CsrOperand<'_, T>) = ((*a).into(), (*c).into());
        let got = if *resident {
            b.spgemm_resident(ha, hc, &options, &run)
                .and_then(|r| b.download(&r))
        } else {
            b.spgemm_with(ha, hc, &options, &run)
        }
        .unwrap_or_else(|e| panic!("{nm}: a masked product, {what}: {e}"));
        check(
            compare_semiring(kind, &got, &want, &magnitude, a, c),
            || format!("{nm}: a masked product, {what}"),
        );
    }
    let space = b.memory_space();
    if space != MemorySpace::Host {
        assert_eq!(
            mask.kept_spaces(),
            vec![space],
            "{nm}: the mask used in six products is kept once, in the device's memory"
        );
    }
}

/// `v` as an `n × 1` matrix: the operand and result of an mxv seen as a SpGEMM.
fn vector_as_column<T: Scalar>(v: &SparseVector<T>) -> Csr<T> {
    let mut c = Coo::new(v.size(), 1).expect("shape");
    for (&i, &x) in v.indices().iter().zip(v.values()) {
        c.try_push(i as usize, 0, x).expect("entry");
    }
    c.to_csr().expect("column")
}

/// A random vector of `len` positions, each stored with probability `density`, values of
/// both signs and every fourth one an explicit zero.
fn random_vector<T: Scalar>(len: usize, density: f64, seed: u64) -> SparseVector<T> {
    let row = random_csr::<T>(1, len, density, seed);
    let (_, _, _, indices, mut values) = row.into_parts();
    for (p, v) in values.iter_mut().enumerate() {
        if p % 4 == 3 {
            *v = T::zero();
        }
    }
    SparseVector::try_new(len, indices, values).expect("random vector")
}

/// The masks of [`vector_products_semirings_and_masks`] on a result of `len` positions: a
/// random vector's (with explicit zeros) in every mode, replacing or not, and one admitting
/// nothing, plain and complemented.
fn vector_masks<T: Scalar>(len: usize, seed: u64) -> Vec<(&'static str, Option<Mask>)> {
    let m = random_vector::<T>(len, 0.4, seed);
    let nothing = SparseVector::<T>::empty(len).expect("empty vector");
    vec![
        ("no mask", None),
        ("structural", Some(m.structural_mask())),
        ("valued", Some(m.valued_mask())),
        (
            "complemented structural, replace",
            Some(m.structural_mask().complemented().replacing()),
        ),
        ("complemented valued", Some(m.valued_mask().complemented())),
        ("admitting nothing", Some(nothing.structural_mask())),
        (
            "complement of nothing",
            Some(nothing.structural_mask().complemented()),
        ),
    ]
}

/// The sparse-vector products mxv and vxm against the reference, for every semiring defined
/// over `T` and every mask mode the backend claims
/// ([`crate::Capabilities::vector_product_features`]): random matrices (with explicit zeros
/// and an empty row) times random vectors from empty to full (so that a backend choosing
/// between push and pull by the frontier's size runs both), `w`'s pattern exactly and its
/// values as the semiring defines them ("any" semirings: any valid product). A is read from
/// host memory and, for a sparse and a full vector, from the backend's memory (uploaded once,
/// as a graph searched level after level is). Operands of the wrong length and masks of the
/// wrong length are errors. Backends claiming none are skipped.
pub fn vector_products_semirings_and_masks<T: Scalar, B: Backend<T> + ?Sized>(b: &B) {
    let Some(features) = b.capabilities().vector_product_features(T::TYPE).cloned() else {
        return;
    };
    let nm = name(b);
    let run = RunControl::new();
    let mut seed = 700;
    let mut compared = 0u64;
    for (case, a, _) in semiring_operands::<T>() {
        // |A| in T: the reference over the magnitude semiring bounds the rounding.
        let ma = a
            .with_values(
                a.values()
                    .iter()
                    .map(|v| T::from_f64(v.magnitude()))
                    .collect(),
            )
            .expect("magnitudes of A");
        let resident = b
            .upload(&a)
            .unwrap_or_else(|e| panic!("{nm}: uploading A of {case}: {e}"));
        for kind in [VectorProductKind::Mxv, VectorProductKind::Vxm] {
            let (u_len, w_len) = kind.lengths(a.shape());
            for density in [0.0, 0.05, 0.3, 1.0] {
                let operands: &[(&str, CsrOperand<'_, T>)] = if density == 0.05 || density == 1.0 {
                    &[
                        ("A in host memory", CsrOperand::Host(&a)),
                        ("A resident", CsrOperand::Resident(&resident)),
                    ]
                } else {
                    &[("A in host memory", CsrOperand::Host(&a))]
                };
                seed += 1;
                let u = random_vector::<T>(u_len, density, seed);
                let mu = SparseVector::try_new(
                    u_len,
                    u.indices().to_vec(),
                    u.values()
                        .iter()
                        .map(|v| T::from_f64(v.magnitude()))
                        .collect(),
                )
                .expect("magnitudes of u");
                for (mode, mask) in vector_masks::<T>(w_len, seed * 31) {
                    let base = VectorProductOptions::new();
                    let base = match &mask {
                        Some(m) => base.with_mask(m.clone()),
                        None => base,
                    };
                    if base.as_spgemm().unsupported_by(&features).is_some() {
                        continue;
                    }
                    for semiring in SemiringKind::defined_for(T::TYPE) {
                        let options = base.clone().with_semiring(semiring);
                        if options.as_spgemm().unsupported_by(&features).is_some() {
                            continue;
                        }
                        let want = reference::vector_product_with_options(kind, &a, &u, &options)
                            .expect("reference");
                        let magnitude_options =
                            options.clone().with_semiring(magnitude_semiring(semiring));
                        let magnitude = reference::vector_product_with_options(
                            kind,
                            &ma,
                            &mu,
                            &magnitude_options,
                        )
                        .expect("magnitudes")
                        .as_row()
                        .map_scalar::<f64>();
                        for &(place, operand) in operands {
                            let what = || {
                                format!(
                                    "{nm}: {kind} {semiring}, {mode}, u of density {density}, \
                                 {place}, on {case}"
                                )
                            };
                            let got = match kind {
                                VectorProductKind::Mxv => b.mxv_with(operand, &u, &options, &run),
                                VectorProductKind::Vxm => b.vxm_with(&u, operand, &options, &run),
                            }
                            .unwrap_or_else(|e| panic!("{}: {e}", what()));
                            assert_eq!(got.size(), w_len, "{}: length of w", what());
                            // Compared as the SpGEMM the product is: uᵀ·A (one row) or A·u
                            // (one column).
                            let result = match kind {
                                VectorProductKind::Vxm => compare_semiring(
                                    semiring,
                                    got.as_row(),
                                    want.as_row(),
                                    &magnitude,
                                    u.as_row(),
                                    &a,
                                ),
                                VectorProductKind::Mxv => {
                                    let magnitude = vector_as_column(
                                        &SparseVector::from_row(magnitude.clone()).expect("row"),
                                    );
                                    compare_semiring(
                                        semiring,
                                        &vector_as_column(&got),
                                        &vector_as_column(&want),
                                        &magnitude,
                                        &a,
                                        &vector_as_column(&u),
                                    )
                                }
                            };
                            check(result, what);
                            compared += 1;
                        }
                    }
                }
            }
            // Lengths that do not chain are refused, whoever computes.
            let short = SparseVector::<T>::empty(u_len + 1).expect("vector");
            let o = VectorProductOptions::new();
            let r = match kind {
                VectorProductKind::Mxv => b.mxv_with((&a).into(), &short, &o, &run),
                VectorProductKind::Vxm => b.vxm_with(&short, (&a).into(), &o, &run),
            };
            assert!(
                matches!(r, Err(Error::ShapeMismatch { .. })),
                "{nm}: {kind} of a {:?} matrix and a vector of {}: {r:?}",
                a.shape(),
                u_len + 1
            );
            let u = SparseVector::<T>::empty(u_len).expect("vector");
            let wrong = SparseVector::<T>::empty(w_len + 1).expect("vector");
            let o = VectorProductOptions::new().with_mask(wrong.structural_mask());
            if o.as_spgemm().unsupported_by(&features).is_none() {
                let r = match kind {
                    VectorProductKind::Mxv => b.mxv_with((&a).into(), &u, &o, &run),
                    VectorProductKind::Vxm => b.vxm_with(&u, (&a).into(), &o, &run),
                };
                assert!(
                    matches!(r, Err(Error::InvalidArgument(_))),
                    "{nm}: {kind} with a mask of the wrong length: {r:?}"
                );
            }
        }
    }
    assert!(compared > 0, "{nm}: no vector product compared");
}

/// Sparse-vector products the backend does not claim over `T`
/// ([`crate::Capabilities::vector_product_features`]) are [`Error::Unsupported`], never
/// computed: every product for a backend claiming none, else each semiring and mask mode it
/// leaves out (semirings not defined over `T` among them), through both `mxv_with` and
/// `vxm_with`.
pub fn unclaimed_vector_products_are_refused<T: Scalar, B: Backend<T> + ?Sized>(b: &B) {
    let nm = name(b);
    let features = b.capabilities().vector_product_features(T::TYPE).cloned();
    let (a, _) = class_operands::<T>(MatrixClass::Uniform);
    let run = RunControl::new();
    for kind in [VectorProductKind::Mxv, VectorProductKind::Vxm] {
        let (u_len, w_len) = kind.lengths(a.shape());
        let u = random_vector::<T>(u_len, 0.3, 91);
        let m = random_vector::<T>(w_len, 0.4, 92);
        let mut variants: Vec<(String, VectorProductOptions)> = Vec::new();
        let masks = [
            ("a structural mask", m.structural_mask()),
            ("a valued mask", m.valued_mask()),
            ("a complemented mask", m.structural_mask().complemented()),
            ("a replacing mask", m.structural_mask().replacing()),
        ];
        match &features {
            None => {
                variants.push(("plain options".into(), VectorProductOptions::new()));
                for s in SemiringKind::ALL.into_iter().skip(1) {
                    variants.push((
                        format!("the {s} semiring"),
                        VectorProductOptions::new().with_semiring(s),
                    ));
                }
                for (what, mask) in masks {
                    variants.push((what.into(), VectorProductOptions::new().with_mask(mask)));
                }
            }
            Some(f) => {
                for s in SemiringKind::ALL {
                    assert!(
                        !f.semirings.contains(&s) || s.is_defined_for(T::TYPE),
                        "{nm}: claims the {s} semiring for sparse-vector products, which is not \
                         defined over {}",
                        T::TYPE
                    );
                    if !f.semirings.contains(&s) {
                        variants.push((
                            format!("the {s} semiring"),
                            VectorProductOptions::new().with_semiring(s),
                        ));
                    }
                }
                for (what, mask) in masks {
                    let o = VectorProductOptions::new().with_mask(mask);
                    if o.as_spgemm().unsupported_by(f).is_some() {
                        variants.push((what.into(), o));
                    }
                }
            }
        }
        for (what, o) in &variants {
            let r = match kind {
                VectorProductKind::Mxv => b.mxv_with((&a).into(), &u, o, &run),
                VectorProductKind::Vxm => b.vxm_with(&u, (&a).into(), o, &run),
            };
            assert!(
                matches!(r, Err(Error::Unsupported { .. })),
                "{nm}: {kind} with {what} gave {r:?}, not Unsupported"
            );
        }
    }
}

/// Chunks of `C⟨M⟩ = x · y` (row ranges × column panels, the mask seen through each) and their
/// counts against the reference `want`.
fn semiring_chunks<T: Scalar, B: Backend<T> + ?Sized>(
    b: &B,
    x: &Csr<T>,
    y: &Csr<T>,
    options: &SpgemmOptions,
    want: &Csr<T>,
    what: &dyn Fn() -> String,
) {
    let (m, n) = want.shape();
    let mut chunks = Vec::new();
    for r in [0, m / 3, m].windows(2) {
        for c in [0, n / 2, n].windows(2) {
            chunks.push(ProductChunk {
                rows: r[0]..r[1],
                cols: c[0]..c[1],
            });
        }
    }
    let part = |chunk: &ProductChunk| {
        crate::CsrWindow::new(want, chunk.rows.clone(), chunk.cols.clone())
            .and_then(|w| w.to_csr())
            .expect("part of C")
    };
    let run = RunControl::new();
    let mut seen = 0;
    b.spgemm_chunks(x.into(), y.into(), &chunks, options, &run, &mut |p| {
        let expected = part(&chunks[p.index]);
        assert_eq!(
            p.product.col_indices(),
            expected.col_indices(),
            "{}: chunk {:?}",
            what(),
            chunks[p.index]
        );
        assert_eq!(p.product.row_offsets(), expected.row_offsets());
        seen += 1;
        Ok(())
    })
    .unwrap_or_else(|e| panic!("{} (chunks): {e}", what()));
    assert_eq!(seen, chunks.len(), "{}: chunks delivered", what());
    b.spgemm_chunk_counts(
        x.into(),
        y.into(),
        &chunks,
        options,
        &run,
        &mut |i, rows| {
            let expected = part(&chunks[i]);
            let want: Vec<u64> = (0..expected.nrows()).map(|r| expected.row_nnz(r)).collect();
            assert_eq!(rows, want, "{}: counts of chunk {:?}", what(), chunks[i]);
            Ok(())
        },
    )
    .unwrap_or_else(|e| panic!("{} (chunk counts): {e}", what()));
}

/// The backend describes itself and claims at least one operation for `T`.
pub fn capabilities_are_consistent<T: Scalar, B: Backend<T> + ?Sized>(b: &B) {
    let info = b.info();
    assert!(!info.backend.name().is_empty(), "backend name is empty");
    assert!(!info.name.is_empty(), "device name is empty");
    assert!(info.compute_units > 0, "{}: no compute units", info.backend);
    let ops = b.capabilities().operations(T::TYPE);
    assert!(
        !ops.is_empty(),
        "{}: the suite was asked to test {} but the backend claims no operation for it",
        info.backend,
        T::TYPE
    );
    if ops.iter().any(|op| matches!(op, Operation::Spgemm(_))) {
        assert!(
            ops.contains(&Operation::Spgemm(SpgemmAlgorithm::Auto)),
            "{}: a backend with any SpGEMM algorithm must accept Auto",
            info.backend
        );
    }
    // Host residency keeps handles as host matrices: only right in host memory.
    if matches!(b.residency(), Residency::Host) {
        assert_eq!(
            b.memory_space(),
            MemorySpace::Host,
            "{}: host residency in another memory",
            info.backend
        );
    }
}

/// Every SpGEMM algorithm on the edge cases.
pub fn spgemm_edge_cases<T: Scalar, B: Backend<T> + ?Sized>(b: &B) {
    for alg in spgemm_algorithms(b) {
        for (case, x, y) in edge_cases::<T>() {
            let e = expected_product(&x, &y);
            let c = b
                .spgemm(&x, &y, alg)
                .unwrap_or_else(|err| panic!("{} {alg:?} {case}: {err}", name(b)));
            check(compare_structural(&c, &e), || {
                format!("{} {alg:?} {case}", name(b))
            });
        }
    }
    // Say it once: cancellation keeps the entry, as an explicit zero.
    if let Some(&alg) = spgemm_algorithms(b).first() {
        let (_, x, y) = edge_cases::<T>()
            .into_iter()
            .find(|c| c.0 == "values that cancel to zero")
            .expect("case");
        let c = b.spgemm(&x, &y, alg).expect("spgemm");
        let one = T::from_f64(1.0);
        if T::from_acc(one.to_acc() + one.neg().to_acc()) == T::zero() {
            assert_eq!(c.get(0, 0), Some(T::zero()), "{}: cancelled entry", name(b));
        }
    }
}

/// Every SpGEMM algorithm on one small matrix of each generator class.
pub fn spgemm_matrix_classes<T: Scalar, B: Backend<T> + ?Sized>(b: &B) {
    let algs = spgemm_algorithms(b);
    if algs.is_empty() {
        return;
    }
    for class in MatrixClass::ALL {
        let (x, y) = class_operands::<T>(class);
        let e = expected_product(&x, &y);
        for &alg in &algs {
            let c = b
                .spgemm(&x, &y, alg)
                .unwrap_or_else(|err| panic!("{} {alg:?} {}: {err}", name(b), class.name()));
            check(compare_structural(&c, &e), || {
                format!("{} {alg:?} class {}", name(b), class.name())
            });
        }
    }
}

fn runner() -> TestRunner {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(24);
    TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    })
}

fn run_property<V: Debug>(
    strategy: impl Strategy<Value = V>,
    what: &str,
    test: impl Fn(V) -> Result<(), String>,
) {
    let result = runner().run(&strategy, |v| test(v).map_err(TestCaseError::fail));
    if let Err(e) = result {
        panic!("{what}: {e}");
    }
}

/// The entries of `m` at `(i, j)` where `keep(i, j)`, the rest left out.
fn entries_where<T: Scalar>(m: &Csr<T>, keep: impl Fn(usize, usize) -> bool) -> Csr<T> {
    let mut c = Coo::new(m.nrows(), m.ncols()).expect("shape");
    for i in 0..m.nrows() {
        let (cols, vals) = m.row(i);
        for (&j, &v) in cols.iter().zip(vals) {
            if keep(i, j as usize) {
                c.try_push(i, j as usize, v).expect("entry");
            }
        }
    }
    c.to_csr().expect("CSR")
}

/// Rows `rows` of `m` as a matrix of their own, those where `!keep(row)` empty.
fn rows_of<T: Scalar>(m: &Csr<T>, rows: Range<usize>, keep: impl Fn(usize) -> bool) -> Csr<T> {
    let mut c = Coo::new(rows.len(), m.ncols()).expect("shape");
    for (r, i) in rows.enumerate() {
        if keep(i) {
            let (cols, vals) = m.row(i);
            for (&j, &v) in cols.iter().zip(vals) {
                c.try_push(r, j as usize, v).expect("entry");
            }
        }
    }
    c.to_csr().expect("CSR")
}

/// A product whose B is spliced from two row blocks read in place ([`SplicedCsr`], as a
/// distributed rank holds B) equals the product by the one matrix it stands for: blocks at
/// the start, middle and end of B's rows, an empty block and an empty base, rows covered by
/// neither, A's columns starting past 0; a shape that does not chain is an error.
pub fn spgemm_spliced<T: Scalar, B: Backend<T> + ?Sized>(b: &B) {
    if spgemm_algorithms(b).is_empty() {
        return;
    }
    let options = SpgemmOptions::new();
    let run = RunControl::unwatched();
    for class in [
        MatrixClass::Stencil3d,
        MatrixClass::PowerLaw,
        MatrixClass::Road,
        MatrixClass::LpRectangular,
    ] {
        let (x, y) = class_operands::<T>(class);
        let n = y.nrows();
        // (block's rows, base's rows); the base is empty under the block.
        let splits = [
            (0..n / 3, 0..n),
            (n / 3..2 * n / 3, 0..n),
            (2 * n / 3..n, n / 4..n),
            (0..n, 0..0),
            (n / 2..n / 2, 0..n),
            (n / 5..n / 2, n / 3..n),
        ];
        for (split, (block_rows, base_rows)) in splits.into_iter().enumerate() {
            let block = rows_of(&y, block_rows.clone(), |_| true);
            let base = rows_of(&y, base_rows.clone(), |i| !block_rows.contains(&i));
            let spliced = SplicedCsr::new(
                n,
                y.ncols(),
                (&base, base_rows.start),
                (&block, block_rows.start),
            )
            .expect("a valid splice");
            let stands_for =
                entries_where(&y, |i, _| block_rows.contains(&i) || base_rows.contains(&i));
            // A as it is, and without its first fifth of columns.
            let trimmed = entries_where(&x, |_, j| j >= n / 5);
            for (which, a) in [("A", &x), ("A past its first columns", &trimmed)] {
                let e = expected_product(a, &stands_for);
                let what = || format!("{} {} split {split} {which}", name(b), class.name());
                let c = b
                    .spgemm_spliced(a, &spliced, &options, &run)
                    .unwrap_or_else(|err| panic!("{}: {err}", what()));
                check(compare_structural(&c, &e), what);
            }
        }
        let (block, base) = (rows_of(&y, 0..n, |_| true), rows_of(&y, 0..0, |_| true));
        let spliced = SplicedCsr::new(n + 1, y.ncols(), (&base, 0), (&block, 0)).expect("splice");
        assert!(
            b.spgemm_spliced(&x, &spliced, &options, &run).is_err(),
            "{}: A of {} columns times a spliced B of {} rows",
            name(b),
            x.ncols(),
            n + 1
        );
    }
}

/// Every SpGEMM algorithm on random shapes and densities (proptest, shrinking to a minimal case).
pub fn spgemm_random<T: Scalar, B: Backend<T> + ?Sized>(b: &B) {
    for alg in spgemm_algorithms(b) {
        let strategy = (
            0usize..24,
            0usize..24,
            0usize..24,
            0.0f64..0.6,
            any::<u64>(),
        );
        run_property(
            strategy,
            &format!("{} {alg:?}", name(b)),
            |(m, k, n, d, seed)| {
                let x = random_csr::<T>(m, k, d, seed);
                let y = random_csr::<T>(k, n, d, seed ^ 0x9e37_79b9);
                let e = expected_product(&x, &y);
                let c = b.spgemm(&x, &y, alg).map_err(|err| err.to_string())?;
                compare_structural(&c, &e)
            },
        );
    }
}

/// The chunk entry point: chunks that tile C (empty ones included) reassemble into C, each chunk
/// is delivered once, and an error from the sink stops the run and comes back.
pub fn spgemm_chunks<T: Scalar, B: Backend<T> + ?Sized>(b: &B) {
    for alg in spgemm_algorithms(b) {
        let (x, y) = class_operands::<T>(MatrixClass::Skewed);
        let (m, n) = (x.nrows(), y.ncols());
        let row_cuts = [0, 1, m / 3, m / 3, m];
        let col_cuts = [0, n / 2, n / 2 + 1, n];
        let mut chunks = Vec::new();
        for r in row_cuts.windows(2) {
            for c in col_cuts.windows(2) {
                chunks.push(ProductChunk {
                    rows: r[0]..r[1],
                    cols: c[0]..c[1],
                });
            }
        }
        let mut seen = vec![false; chunks.len()];
        let mut coo = Coo::new(m, n).expect("shape");
        let run = RunControl::new();
        b.spgemm_chunks(
            (&x).into(),
            (&y).into(),
            &chunks,
            &alg.into(),
            &run,
            &mut |part| {
                assert!(!seen[part.index], "chunk {} delivered twice", part.index);
                seen[part.index] = true;
                assert_eq!(part.chunk, chunks[part.index]);
                assert_eq!(
                    part.product.shape(),
                    (part.chunk.rows.len(), part.chunk.cols.len()),
                    "chunk {} has the wrong shape",
                    part.index
                );
                for i in 0..part.product.nrows() {
                    let (cols, vals) = part.product.row(i);
                    for (&j, &v) in cols.iter().zip(vals) {
                        coo.try_push(
                            part.chunk.rows.start + i,
                            part.chunk.cols.start + j as usize,
                            v,
                        )
                        .expect("chunk entry inside C");
                    }
                }
                Ok(())
            },
        )
        .unwrap_or_else(|err| panic!("{} {alg:?} chunks: {err}", name(b)));
        let progress = run.progress();
        assert_eq!(
            progress.done,
            progress.planned,
            "{} {alg:?}: a finished run of chunks reports {progress:?}",
            name(b)
        );
        assert!(
            seen.iter().all(|&s| s),
            "{}: a chunk was never delivered",
            name(b)
        );
        let e = expected_product(&x, &y);
        check(compare_structural(&coo.to_csr().expect("CSR"), &e), || {
            format!("{} {alg:?} chunks reassembled", name(b))
        });

        let mut calls = 0;
        let err = b
            .spgemm_chunks(
                (&x).into(),
                (&y).into(),
                &chunks,
                &alg.into(),
                &RunControl::new(),
                &mut |_| {
                    calls += 1;
                    Err(Error::InvalidArgument("sink refuses".into()))
                },
            )
            .expect_err("a sink error must stop the run");
        assert!(
            err.to_string().contains("sink refuses"),
            "{}: {err}",
            name(b)
        );
        assert_eq!(
            calls,
            1,
            "{}: chunks were delivered after the sink failed",
            name(b)
        );
    }
}

/// Chunks written in place: chunks that tile C (empty ones and column panels included), written
/// into their places in C, give C; each chunk is finished once with its place complete, and an
/// error from `done` stops the run and comes back.
pub fn spgemm_chunks_into<T: Scalar, B: Backend<T> + ?Sized>(b: &B) {
    for alg in spgemm_algorithms(b) {
        let (x, y) = class_operands::<T>(MatrixClass::Skewed);
        let (m, n) = (x.nrows(), y.ncols());
        let row_cuts = [0, 1, m / 3, m / 3, m];
        let panels: Vec<Range<usize>> = [0, n / 2, n / 2 + 1, n]
            .windows(2)
            .map(|c| c[0]..c[1])
            .collect();
        let layout = ProductLayout::count(&x, &y, panels.clone()).expect("C's layout");
        let c = ProductBuffer::<T>::new(layout).expect("C's arrays");
        let mut places = Vec::new();
        for r in row_cuts.windows(2) {
            for (p, cols) in panels.iter().enumerate() {
                let chunk = ProductChunk {
                    rows: r[0]..r[1],
                    cols: cols.clone(),
                };
                let segments = c.layout().segments(p, chunk.rows.clone());
                // SAFETY: rows × panels tile C, so no two places share a position.
                places.push(unsafe { c.place(chunk, cols.start, segments) }.expect("a place"));
            }
        }
        let mut finished = vec![false; places.len()];
        let run = RunControl::new();
        b.spgemm_chunks_into(
            (&x).into(),
            (&y).into(),
            &mut places,
            &alg.into(),
            &run,
            &mut |i, _| {
                assert!(!finished[i], "chunk {i} finished twice");
                finished[i] = true;
                Ok(())
            },
        )
        .unwrap_or_else(|err| panic!("{} {alg:?} chunks into C: {err}", name(b)));
        assert!(
            finished.iter().all(|&f| f),
            "{}: a chunk was never finished",
            name(b)
        );
        assert!(
            places.iter().all(|p| p.is_complete()),
            "{} {alg:?}: a finished chunk's place is not complete",
            name(b)
        );
        let progress = run.progress();
        assert_eq!(
            progress.done,
            progress.planned,
            "{} {alg:?}: a finished run of chunks into C reports {progress:?}",
            name(b)
        );
        drop(places);
        // SAFETY: every place was complete, and together they tile C.
        let got = unsafe { c.into_csr() }
            .unwrap_or_else(|err| panic!("{} {alg:?}: C written in place: {err}", name(b)));
        check(compare_structural(&got, &expected_product(&x, &y)), || {
            format!("{} {alg:?} chunks written into C", name(b))
        });

        let c = ProductBuffer::<T>::new(
            ProductLayout::count(&x, &y, panels.clone()).expect("C's layout"),
        )
        .expect("C's arrays");
        let rows = [0..m / 3, m / 3..m];
        let mut places: Vec<_> = rows
            .iter()
            .map(|r| {
                let chunk = ProductChunk {
                    rows: r.clone(),
                    cols: panels[0].clone(),
                };
                let segments = c.layout().segments(0, r.clone());
                // SAFETY: two row ranges of one panel.
                unsafe { c.place(chunk, 0, segments) }.expect("a place")
            })
            .collect();
        let mut calls = 0;
        let err = b
            .spgemm_chunks_into(
                (&x).into(),
                (&y).into(),
                &mut places,
                &alg.into(),
                &RunControl::new(),
                &mut |_, _| {
                    calls += 1;
                    Err(Error::InvalidArgument("done refuses".into()))
                },
            )
            .expect_err("an error from done must stop the run");
        assert!(
            err.to_string().contains("done refuses"),
            "{}: {err}",
            name(b)
        );
        assert_eq!(calls, 1, "{}: chunks finished after done failed", name(b));
    }
}

/// The chunks' counts: each chunk's entries per row, as in the product, every chunk told once.
pub fn spgemm_chunk_counts<T: Scalar, B: Backend<T> + ?Sized>(b: &B) {
    for alg in spgemm_algorithms(b) {
        let (x, y) = class_operands::<T>(MatrixClass::Skewed);
        let (m, n) = (x.nrows(), y.ncols());
        let e = reference::spgemm::<T, PlusTimes>(&x, &y).expect("reference SpGEMM");
        let mut chunks = Vec::new();
        for r in [0, 1, m / 3, m / 3, m].windows(2) {
            for c in [0, n / 2, n / 2 + 1, n].windows(2) {
                chunks.push(ProductChunk {
                    rows: r[0]..r[1],
                    cols: c[0]..c[1],
                });
            }
        }
        let mut told = vec![false; chunks.len()];
        b.spgemm_chunk_counts(
            (&x).into(),
            (&y).into(),
            &chunks,
            &alg.into(),
            &RunControl::new(),
            &mut |i, rows| {
                assert!(!told[i], "chunk {i} counted twice");
                told[i] = true;
                let chunk = &chunks[i];
                let part = e
                    .rows(chunk.rows.clone())
                    .and_then(|p| p.column_panel(chunk.cols.clone()))
                    .expect("part of C");
                let want: Vec<u64> = (0..part.nrows()).map(|r| part.row_nnz(r)).collect();
                assert_eq!(rows, want, "{} {alg:?}: counts of chunk {chunk:?}", name(b));
                Ok(())
            },
        )
        .unwrap_or_else(|err| panic!("{} {alg:?} chunk counts: {err}", name(b)));
        assert!(
            told.iter().all(|&t| t),
            "{}: a chunk was never counted",
            name(b)
        );
    }
}

/// Mismatched shapes and chunks outside C are errors, not panics.
pub fn spgemm_rejects_bad_operands<T: Scalar, B: Backend<T> + ?Sized>(b: &B) {
    for alg in spgemm_algorithms(b) {
        let x = random_csr::<T>(3, 4, 0.5, 11);
        let y = random_csr::<T>(5, 2, 0.5, 12);
        match b.spgemm(&x, &y, alg) {
            Err(Error::ShapeMismatch {
                left_cols: 4,
                right_rows: 5,
                ..
            }) => {}
            other => panic!(
                "{} {alg:?}: expected a shape mismatch, got {other:?}",
                name(b)
            ),
        }
        let y = random_csr::<T>(4, 2, 0.5, 13);
        let outside = [ProductChunk {
            rows: 0..4,
            cols: 0..1,
        }];
        let r = b.spgemm_chunks(
            (&x).into(),
            (&y).into(),
            &outside,
            &alg.into(),
            &RunControl::new(),
            &mut |_| Ok(()),
        );
        assert!(
            matches!(r, Err(Error::InvalidArgument(_))),
            "{} {alg:?}: chunk outside C gave {r:?}",
            name(b)
        );
    }
}

/// Runs `f` on `a` converted to `format` (square operands with even sides fit every format).
fn in_format<T: Scalar, R>(
    a: &Csr<T>,
    format: SparseFormat,
    f: impl FnOnce(SparseRef<'_, T>) -> R,
) -> R {
    match format {
        SparseFormat::Csr => f(SparseRef::Csr(a)),
        SparseFormat::Csc => f(SparseRef::Csc(&Csc::from_csr(a).expect("csc"))),
        SparseFormat::Coo => f(SparseRef::Coo(&a.to_coo())),
        SparseFormat::Dia => f(SparseRef::Dia(&Dia::from_csr(a, 1 << 28).expect("dia"))),
        SparseFormat::Ellr => f(SparseRef::Ellr(&Ellr::from_csr(a, 1 << 28).expect("ellr"))),
        SparseFormat::Cspr => f(SparseRef::Cspr(&Cspr::from_csr(a))),
        SparseFormat::Bsr => f(SparseRef::Bsr(&Bsr::from_csr(a, (2, 2)).expect("bsr"))),
    }
}

/// Operands for SpMV and SpMM: even-sided so that BSR 2×2 applies; values only where a format
/// converts without loss (DIA and BSR drop explicit zeros, and these operands have none).
fn multiply_operands<T: Scalar>() -> Vec<(&'static str, Csr<T>)> {
    vec![
        ("empty", Csr::zeros(4, 6).expect("shape")),
        ("random 30×20", random_csr(30, 20, 0.2, 21)),
        ("banded", generate::banded(64, 7, 22)),
        ("skewed", generate::skewed(96, 3, 2, 2, 23)),
        ("power law", generate::rmat(7, 6, 24)),
        (
            "stencil",
            generate::stencil_3d(4, generate::Stencil::TwentySeven, 2, 25),
        ),
    ]
}

fn vector<T: Scalar>(n: usize, seed: u64) -> Vec<T> {
    let mut rng = Rng::new(seed);
    (0..n)
        .map(|_| generate::value_of(rng.next_f64() * 2.0 - 1.0, rng.next_f64() - 0.5))
        .collect()
}

/// SpMV for every format the backend claims.
pub fn spmv_every_format<T: Scalar, B: Backend<T> + ?Sized>(b: &B) {
    for format in FORMATS {
        if !claims(b, Operation::Spmv(format)) {
            continue;
        }
        for (case, a) in multiply_operands::<T>() {
            let x = vector::<T>(a.ncols(), 31);
            let expected = reference::spmv::<T, PlusTimes>(&a, &x).expect("reference");
            let mx: Vec<f64> = x.iter().map(|v| v.magnitude()).collect();
            let magnitude = reference::spmv::<f64, PlusTimes>(&magnitudes(&a), &mx).expect("mag");
            let y = in_format(&a, format, |m| b.spmv(m, &x))
                .unwrap_or_else(|err| panic!("{} {format} SpMV {case}: {err}", name(b)));
            check(
                compare_dense(&y, &expected, &magnitude, &row_terms(&a), "y"),
                || format!("{} {format} SpMV {case}", name(b)),
            );
            let r = in_format(&a, format, |m| b.spmv(m, &x[..x.len().saturating_sub(1)]));
            if a.ncols() > 0 {
                assert!(
                    matches!(r, Err(Error::ShapeMismatch { .. })),
                    "{} {format} SpMV with a short x gave {r:?}",
                    name(b)
                );
            }
        }
    }
}

/// SpMM for every format the backend claims, B row- and column-major, 1, 7 and 32 columns.
pub fn spmm_every_format<T: Scalar, B: Backend<T> + ?Sized>(b: &B) {
    for format in FORMATS {
        if !claims(b, Operation::Spmm(format)) {
            continue;
        }
        for (case, a) in multiply_operands::<T>() {
            for (layout, ncols) in [
                (Layout::RowMajor, 1),
                (Layout::ColMajor, 7),
                (Layout::RowMajor, 32),
                (Layout::ColMajor, 32),
            ] {
                let d =
                    Dense::try_new(a.ncols(), ncols, layout, vector::<T>(a.ncols() * ncols, 41))
                        .expect("dense");
                let expected = reference::spmm::<T, PlusTimes>(&a, &d).expect("reference");
                let md = Dense::try_new(
                    d.nrows(),
                    d.ncols(),
                    layout,
                    d.data().iter().map(|v| v.magnitude()).collect(),
                )
                .expect("dense");
                let magnitude =
                    reference::spmm::<f64, PlusTimes>(&magnitudes(&a), &md).expect("mag");
                let c = in_format(&a, format, |m| b.spmm(m, &d)).unwrap_or_else(|err| {
                    panic!("{} {format} SpMM {case} {layout:?}×{ncols}: {err}", name(b))
                });
                assert_eq!(
                    c.shape(),
                    expected.shape(),
                    "{} {format} SpMM shape",
                    name(b)
                );
                let c = c.to_layout(layout);
                let terms: Vec<u64> = (0..a.nrows())
                    .flat_map(|i| std::iter::repeat_n(a.row_nnz(i), ncols))
                    .collect();
                let (c, e, m) = (
                    c.to_layout(Layout::RowMajor),
                    expected.to_layout(Layout::RowMajor),
                    magnitude.to_layout(Layout::RowMajor),
                );
                check(
                    compare_dense(c.data(), e.data(), m.data(), &terms, "C"),
                    || format!("{} {format} SpMM {case} {layout:?}×{ncols}", name(b)),
                );
            }
        }
    }
}

/// A 6×6 matrix whose DIA band and 2×2 BSR blocks hold zeros (padding) in front of every
/// column, and a vector with +∞ in a column only padding meets, −∞ and NaN in columns stored
/// entries meet.
fn special_values_operands<T: Scalar>() -> (Csr<T>, Vec<T>) {
    let a = from_values(
        6,
        6,
        &[
            (0, 0, 1.0),
            (1, 0, 2.0),
            (2, 2, -1.0),
            (2, 3, 4.0),
            (3, 3, 1.0),
            (4, 5, 1.0),
            (5, 4, 2.0),
        ],
    );
    let x = [1.0, f64::INFINITY, 1.0, f64::NEG_INFINITY, 1.0, f64::NAN]
        .iter()
        .map(|&v| T::from_f64(v))
        .collect();
    (a, x)
}

/// Same value, or both NaN, part by part: the comparison for results that hold ±∞ and NaN.
fn same_special<T: Scalar>(actual: &[T], expected: &[T], what: &str) -> Result<(), String> {
    if actual.len() != expected.len() {
        return Err(format!(
            "{what}: {} values, expected {}",
            actual.len(),
            expected.len()
        ));
    }
    for (k, (&u, &v)) in actual.iter().zip(expected).enumerate() {
        let (ur, ui) = u.to_parts();
        let (vr, vi) = v.to_parts();
        let same = |p: f64, q: f64| (p.is_nan() && q.is_nan()) || p == q;
        if !(same(ur, vr) && same(ui, vi)) {
            return Err(format!("{what}[{k}] = {u:?}, expected {v:?}"));
        }
    }
    Ok(())
}

/// One IEEE answer whatever the format: stored entries are multiplied, padding is not (the
/// zeros of a DIA band or of a BSR block are not entries), so +∞ met only by padding leaves
/// the result finite, where `0 × ∞` would make it NaN; the answer is the reference's on the
/// matrix's entries, also for SpMM.
pub fn padding_is_not_multiplied<T: Scalar, B: Backend<T> + ?Sized>(b: &B) {
    let (a, x) = special_values_operands::<T>();
    let expected = reference::spmv::<T, PlusTimes>(&a, &x).expect("reference");
    // The oracle itself: +∞ in column 1 is met by no entry, NaN in column 5 by row 4's. (The
    // exact types hold neither: the values are their bounds and zero, and the products are
    // compared as they are.)
    if !T::TYPE.is_exact() {
        let finite = |v: T| v.to_parts().0.is_finite();
        assert!(finite(expected[0]) && finite(expected[1]) && finite(expected[5]));
        assert!(expected[4].to_parts().0.is_nan());
    }
    for format in FORMATS {
        if claims(b, Operation::Spmv(format)) {
            let y = in_format(&a, format, |m| b.spmv(m, &x))
                .unwrap_or_else(|err| panic!("{} {format} SpMV with ±∞ and NaN: {err}", name(b)));
            check(same_special(&y, &expected, "y"), || {
                format!("{} {format} SpMV with ±∞ and NaN in x", name(b))
            });
        }
        if claims(b, Operation::Spmm(format)) {
            // x and a column of ones, in both layouts.
            let ones = vec![T::from_f64(1.0); a.ncols()];
            let col_major: Vec<T> = x.iter().chain(&ones).copied().collect();
            for layout in [Layout::ColMajor, Layout::RowMajor] {
                let d = Dense::try_new(a.ncols(), 2, Layout::ColMajor, col_major.clone())
                    .expect("dense")
                    .to_layout(layout);
                let want = reference::spmm::<T, PlusTimes>(&a, &d).expect("reference");
                let c = in_format(&a, format, |m| b.spmm(m, &d)).unwrap_or_else(|err| {
                    panic!("{} {format} SpMM with ±∞ and NaN: {err}", name(b))
                });
                let (c, want) = (
                    c.to_layout(Layout::ColMajor),
                    want.to_layout(Layout::ColMajor),
                );
                check(same_special(c.data(), want.data(), "C"), || {
                    format!("{} {format} SpMM {layout:?} with ±∞ and NaN in B", name(b))
                });
            }
        }
    }
}

/// DIA × DIA and BSR × BSR under the same rule: ±∞ and NaN stored in B meet A's padding and
/// fill, which are not multiplied, so the product is the reference's on the entries.
pub fn padding_is_not_multiplied_in_products<T: Scalar, B: Backend<T> + ?Sized>(b: &B) {
    let (a, _) = special_values_operands::<T>();
    let inf = f64::INFINITY;
    let m = from_values::<T>(
        6,
        6,
        &[
            (0, 0, 1.0),
            (1, 1, inf),
            (1, 2, -inf),
            (2, 2, 1.0),
            (3, 3, 2.0),
            (4, 4, 1.0),
            (5, 5, f64::NAN),
        ],
    );
    let want = reference::spgemm::<T, PlusTimes>(&a, &m)
        .expect("reference")
        .to_dense(Layout::RowMajor)
        .expect("dense");
    let got = |c: Csr<T>| c.to_dense(Layout::RowMajor).expect("dense");
    if claims(b, Operation::DiaSpgemm) {
        let (x, y) = (
            Dia::from_csr(&a, u64::MAX).expect("dia"),
            Dia::from_csr(&m, u64::MAX).expect("dia"),
        );
        let c = ok(&name(b), "DIA×DIA with ±∞ and NaN", b.dia_spgemm(&x, &y));
        check(
            same_special(got(c.to_csr().expect("csr")).data(), want.data(), "C"),
            || format!("{} DIA×DIA with ±∞ and NaN in B", name(b)),
        );
    }
    if claims(b, Operation::BsrSpgemm) {
        let (x, y) = (
            Bsr::from_csr(&a, (2, 2)).expect("bsr"),
            Bsr::from_csr(&m, (2, 2)).expect("bsr"),
        );
        let c = ok(&name(b), "BSR×BSR with ±∞ and NaN", b.bsr_spgemm(&x, &y));
        check(
            same_special(got(c.to_csr().expect("csr")).data(), want.data(), "C"),
            || format!("{} BSR×BSR with ±∞ and NaN in B", name(b)),
        );
    }
}

/// The error inside any chunk wrappers.
fn innermost(e: &Error) -> &Error {
    match e {
        Error::InChunk { source, .. } => innermost(source),
        e => e,
    }
}

/// Sizes that come from the shape rather than from the entries: a matrix of one entry and
/// `u32::MAX` columns multiplies like a small one (no buffer of one slot per column), and an
/// SpMM result of `u32::MAX × 1024` values (terabytes, more than any host) is
/// [`Error::OutOfMemory`] naming its bytes, on every backend, for every format that can hold
/// such a matrix in a few bytes, before anything the size of the matrix is allocated.
pub fn sizes_from_the_shape_are_errors_not_aborts<T: Scalar, B: Backend<T> + ?Sized>(b: &B) {
    let wide = u32::MAX as usize;
    let one = Csr::try_new(1, 1, vec![0, 1], vec![0], vec![T::from_f64(2.0)]).expect("1×1");
    let row = Csr::try_new(
        1,
        wide,
        vec![0, 1],
        vec![wide as u32 - 1],
        vec![T::from_f64(3.0)],
    )
    .expect("1×u32::MAX");
    if claims(b, Operation::Spgemm(SpgemmAlgorithm::Auto)) {
        let c = b
            .spgemm(&one, &row, SpgemmAlgorithm::Auto)
            .unwrap_or_else(|err| panic!("{} SpGEMM 1×1 · 1×u32::MAX: {err}", name(b)));
        assert_eq!(c.shape(), (1, wide), "{} SpGEMM of a wide row", name(b));
        assert_eq!(
            c.col_indices(),
            &[wide as u32 - 1],
            "{} SpGEMM of a wide row",
            name(b)
        );
        assert_eq!(
            c.values(),
            &[T::from_f64(6.0)],
            "{} SpGEMM of a wide row",
            name(b)
        );
    }
    // A band product of u32::MAX rows with no diagonals is empty: nothing sized by the shape.
    if claims(b, Operation::DiaSpgemm) {
        let tall = Dia::try_new(wide, wide, vec![], vec![]).expect("DIA");
        let c = b
            .dia_spgemm(&tall, &tall)
            .unwrap_or_else(|err| panic!("{} DIA×DIA of u32::MAX rows, no band: {err}", name(b)));
        assert_eq!(c.shape(), (wide, wide), "{} DIA×DIA of no band", name(b));
        assert_eq!(c.ndiags(), 0, "{} DIA×DIA of no band", name(b));
    }
    // u32::MAX rows and one column, stored in a few bytes.
    let tall_coo = Coo::try_new(wide, 1, vec![7], vec![0], vec![T::from_f64(1.0)]).expect("COO");
    let tall_csc = Csc::try_new(wide, 1, vec![0, 1], vec![7], vec![T::from_f64(1.0)]).expect("CSC");
    let tall_dia = Dia::try_new(wide, 1, vec![], vec![]).expect("DIA");
    let tall_cspr = Cspr::try_new(wide, 1, vec![7], vec![T::from_f64(1.0)]).expect("CSPR");
    let tall_bsr = Bsr::try_new((wide, 1), 1, 1, vec![0, 0], vec![], vec![]).expect("BSR");
    let tall: [SparseRef<'_, T>; 5] = [
        (&tall_coo).into(),
        (&tall_csc).into(),
        (&tall_dia).into(),
        (&tall_cspr).into(),
        (&tall_bsr).into(),
    ];
    let columns = 1024usize;
    let needed = (wide as u64 * columns as u64).saturating_mul(size_of::<T>() as u64);
    for layout in [Layout::RowMajor, Layout::ColMajor] {
        let d = Dense::try_new(1, columns, layout, vec![T::from_f64(1.0); columns]).expect("B");
        for a in tall {
            if !claims(b, Operation::Spmm(a.format())) {
                continue;
            }
            let r = b.spmm(a, &d);
            let e = match &r {
                Err(e) => innermost(e),
                Ok(c) => panic!(
                    "{} {} SpMM of {needed} bytes gave a {:?} result",
                    name(b),
                    a.format(),
                    c.shape()
                ),
            };
            assert!(
                matches!(e, Error::OutOfMemory { needed_bytes, .. } if *needed_bytes >= needed),
                "{} {} SpMM of {needed} bytes: {e}",
                name(b),
                a.format()
            );
        }
    }
}

/// DIA × DIA on band matrices of different widths, square and rectangular.
pub fn dia_spgemm<T: Scalar, B: Backend<T> + ?Sized>(b: &B) {
    if !claims(b, Operation::DiaSpgemm) {
        return;
    }
    let cases: Vec<(Csr<T>, Csr<T>)> = vec![
        (generate::banded(50, 3, 51), generate::banded(50, 5, 52)),
        (generate::banded(33, 1, 53), generate::banded(33, 9, 54)),
        (
            random_band::<T>(20, 30, &[-2, 0, 3, 7], 55),
            random_band::<T>(30, 12, &[-5, -1, 0, 2], 56),
        ),
        (Csr::zeros(6, 6).expect("shape"), generate::banded(6, 3, 57)),
    ];
    for (k, (x, y)) in cases.into_iter().enumerate() {
        let (dx, dy) = (
            Dia::from_csr(&x, u64::MAX).expect("dia"),
            Dia::from_csr(&y, u64::MAX).expect("dia"),
        );
        let e = expected_product(&x, &y);
        let c = b
            .dia_spgemm(&dx, &dy)
            .unwrap_or_else(|err| panic!("{} DIA×DIA case {k}: {err}", name(b)));
        check(compare_values(&c.to_csr().expect("csr"), &e), || {
            format!("{} DIA×DIA case {k}", name(b))
        });
    }
}

fn random_band<T: Scalar>(nrows: usize, ncols: usize, offsets: &[i64], seed: u64) -> Csr<T> {
    let mut rng = Rng::new(seed);
    let mut c = Coo::new(nrows, ncols).expect("shape");
    for i in 0..nrows {
        for &off in offsets {
            let j = i as i64 + off;
            if j >= 0 && (j as usize) < ncols {
                c.try_push(i, j as usize, generate::value_of(0.1 + rng.next_f64(), 0.0))
                    .expect("entry");
            }
        }
    }
    c.to_csr().expect("CSR")
}

/// BSR × BSR for square and rectangular blocks.
pub fn bsr_spgemm<T: Scalar, B: Backend<T> + ?Sized>(b: &B) {
    if !claims(b, Operation::BsrSpgemm) {
        return;
    }
    let stencil = generate::stencil_3d::<T>(4, generate::Stencil::Seven, 3, 61);
    type BlockCase<T> = ((usize, usize), (usize, usize), Csr<T>, Csr<T>);
    let cases: Vec<BlockCase<T>> = vec![
        ((3, 3), (3, 3), stencil.clone(), stencil),
        (
            (2, 2),
            (2, 2),
            random_csr(16, 16, 0.15, 62),
            random_csr(16, 16, 0.15, 63),
        ),
        (
            (1, 4),
            (4, 2),
            random_csr(5, 24, 0.2, 64),
            random_csr(24, 10, 0.2, 65),
        ),
        (
            (2, 3),
            (3, 1),
            Csr::zeros(4, 9).expect("shape"),
            random_csr(9, 3, 0.5, 66),
        ),
    ];
    for (k, (bx, by, x, y)) in cases.into_iter().enumerate() {
        let (sx, sy) = (
            Bsr::from_csr(&x, bx).expect("bsr"),
            Bsr::from_csr(&y, by).expect("bsr"),
        );
        let e = expected_product(&sx.to_csr().expect("csr"), &sy.to_csr().expect("csr"));
        let c = b
            .bsr_spgemm(&sx, &sy)
            .unwrap_or_else(|err| panic!("{} BSR×BSR case {k}: {err}", name(b)));
        assert_eq!(
            c.block_shape(),
            (bx.0, by.1),
            "{} BSR×BSR case {k}: block shape",
            name(b)
        );
        check(compare_values(&c.to_csr().expect("csr"), &e), || {
            format!("{} BSR×BSR case {k}", name(b))
        });
    }
    let x = Bsr::from_csr(&random_csr::<T>(4, 4, 0.5, 67), (2, 2)).expect("bsr");
    let y = Bsr::from_csr(&random_csr::<T>(4, 4, 0.5, 68), (1, 2)).expect("bsr");
    assert!(
        b.bsr_spgemm(&x, &y).is_err(),
        "{}: blocks that do not chain must be an error",
        name(b)
    );
}

/// An operation the backend does not list for `T` either returns [`Error::Unsupported`] or, where
/// the trait builds it from listed ones, the right answer; it never panics.
pub fn unclaimed_operations_never_panic<T: Scalar, B: Backend<T> + ?Sized>(b: &B) {
    let x = generate::banded::<T>(8, 3, 71);
    let e = expected_product(&x, &x);
    for alg in SpgemmAlgorithm::ALL {
        if claims(b, Operation::Spgemm(alg)) {
            continue;
        }
        match b.spgemm(&x, &x, alg) {
            Err(Error::Unsupported { .. }) => {}
            Ok(c) => check(compare_structural(&c, &e), || {
                format!("{} unclaimed {alg:?}", name(b))
            }),
            Err(err) => panic!("{} unclaimed {alg:?}: {err}", name(b)),
        }
    }
    let v = vector::<T>(8, 72);
    let expected = reference::spmv::<T, PlusTimes>(&x, &v).expect("reference");
    let mv: Vec<f64> = v.iter().map(|z| z.magnitude()).collect();
    let magnitude = reference::spmv::<f64, PlusTimes>(&magnitudes(&x), &mv).expect("mag");
    for format in FORMATS {
        if claims(b, Operation::Spmv(format)) {
            continue;
        }
        match in_format(&x, format, |m| b.spmv(m, &v)) {
            Err(Error::Unsupported { .. }) => {}
            Ok(y) => check(
                compare_dense(&y, &expected, &magnitude, &row_terms(&x), "y"),
                || format!("{} unclaimed {format} SpMV", name(b)),
            ),
            Err(err) => panic!("{} unclaimed {format} SpMV: {err}", name(b)),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Residency, plans, run control

#[track_caller]
fn ok<R>(b: &str, what: &str, r: Result<R, Error>) -> R {
    r.unwrap_or_else(|err| panic!("{b} {what}: {err}"))
}

/// The same pattern with other values, for plan reuse.
fn revalued<T: Scalar>(m: &Csr<T>) -> Vec<T> {
    m.values()
        .iter()
        .enumerate()
        .map(|(k, v)| {
            let (re, im) = v.to_parts();
            T::from_parts_lossy(-1.5 * re + 0.25 * ((k % 7) as f64), im + 0.5)
        })
        .collect()
}

fn with_values<T: Scalar>(m: &Csr<T>, values: Vec<T>) -> Csr<T> {
    Csr::try_new(
        m.nrows(),
        m.ncols(),
        m.row_offsets().to_vec(),
        m.col_indices().to_vec(),
        values,
    )
    .expect("same structure")
}

/// Matrices and dense operands go into the backend's memory and come back unchanged; new
/// values keep the pattern's identity and leave the original handle as it was.
pub fn resident_round_trips<T: Scalar, B: Backend<T> + ?Sized>(b: &B) {
    let nm = name(b);
    let space = b.memory_space();
    let mut operands: Vec<(&str, Csr<T>)> = edge_cases::<T>()
        .into_iter()
        .map(|(l, x, _)| (l, x))
        .collect();
    operands.push(("skewed", class_operands::<T>(MatrixClass::Skewed).0));
    for (label, x) in operands {
        let r = ok(&nm, "upload", b.upload(&x));
        assert_eq!(r.space(), &space, "{nm} {label}: handle space");
        assert_eq!((r.shape(), r.nnz()), (x.shape(), x.nnz()), "{nm} {label}");
        assert_eq!(r.pattern(), PatternId::of(&x), "{nm} {label}: pattern id");
        assert_eq!(
            ok(&nm, "download", b.download(&r)),
            x,
            "{nm} {label}: round trip"
        );
        assert_eq!(
            ok(&nm, "download_values", b.download_values(&r)),
            x.values(),
            "{nm} {label}: values alone"
        );
        let owned = ok(&nm, "upload_owned", b.upload_owned(x.clone()));
        assert_eq!(
            ok(&nm, "download", b.download(&owned)),
            x,
            "{nm} {label}: owned"
        );

        let values = revalued(&x);
        let r2 = ok(&nm, "upload_values", b.upload_values(&r, &values));
        assert_eq!(
            r2.pattern(),
            r.pattern(),
            "{nm} {label}: new values keep the pattern"
        );
        assert_eq!(
            ok(&nm, "download", b.download(&r2)),
            with_values(&x, values.clone()),
            "{nm} {label}: new values"
        );
        assert_eq!(
            ok(&nm, "download_values", b.download_values(&r2)),
            values,
            "{nm} {label}: new values alone"
        );
        assert_eq!(
            ok(&nm, "download", b.download(&r)),
            x,
            "{nm} {label}: old handle"
        );
        let mut wrong = values;
        wrong.push(T::zero());
        assert!(
            matches!(b.upload_values(&r, &wrong), Err(Error::InvalidArgument(_))),
            "{nm} {label}: one value too many must be an error"
        );
    }
    for (rows, cols, layout) in [
        (5, 3, Layout::RowMajor),
        (4, 6, Layout::ColMajor),
        (0, 2, Layout::RowMajor),
    ] {
        let d = Dense::try_new(rows, cols, layout, vector::<T>(rows * cols, 7)).expect("dense");
        let r = ok(&nm, "upload_dense", b.upload_dense(&d));
        assert_eq!(
            (r.shape(), r.layout()),
            ((rows, cols), layout),
            "{nm} dense handle"
        );
        assert_eq!(
            ok(&nm, "download_dense", b.download_dense(&r)),
            d,
            "{nm} dense round trip"
        );
    }
    let v = vector::<T>(17, 3);
    let r = ok(&nm, "upload_vector", b.upload_vector(&v));
    assert_eq!(r.shape(), (17, 1), "{nm} vector handle");
    assert_eq!(
        ok(&nm, "download_dense", b.download_dense(&r)).data(),
        &v[..],
        "{nm} vector"
    );
}

/// Every operation with host and resident operands in every combination, results on the host
/// and left resident.
pub fn mixed_host_and_resident_operands<T: Scalar, B: Backend<T> + ?Sized>(b: &B) {
    let nm = name(b);
    let space = b.memory_space();
    let (x, y) = class_operands::<T>(MatrixClass::PowerLaw);
    let e = expected_product(&x, &y);
    let (rx, ry) = (
        ok(&nm, "upload", b.upload(&x)),
        ok(&nm, "upload", b.upload(&y)),
    );
    let product_pattern = PatternId::of_product(rx.pattern(), ry.pattern());
    for alg in spgemm_algorithms(b) {
        let options = SpgemmOptions::from(alg);
        let combos: [(&str, CsrOperand<'_, T>, CsrOperand<'_, T>); 4] = [
            ("host·host", (&x).into(), (&y).into()),
            ("resident·host", (&rx).into(), (&y).into()),
            ("host·resident", (&x).into(), (&ry).into()),
            ("resident·resident", (&rx).into(), (&ry).into()),
        ];
        for (label, l, r) in combos {
            let what = format!("{alg:?} SpGEMM {label}");
            let c = ok(
                &nm,
                &what,
                b.spgemm_with(l, r, &options, &RunControl::new()),
            );
            check(compare_structural(&c, &e), || format!("{nm} {what}"));
            let c = ok(
                &nm,
                &what,
                b.spgemm_resident(l, r, &options, &RunControl::new()),
            );
            assert_eq!(c.space(), &space, "{nm} {what}: result space");
            assert_eq!(
                (c.shape(), c.nnz()),
                (e.c.shape(), e.c.nnz()),
                "{nm} {what}"
            );
            assert_eq!(
                c.pattern(),
                product_pattern,
                "{nm} {what}: result pattern id"
            );
            let values = ok(&nm, "download_values", b.download_values(&c));
            let c = ok(&nm, "download", b.download(&c));
            check(compare_structural(&c, &e), || {
                format!("{nm} {what}, resident")
            });
            assert!(
                values == c.values(),
                "{nm} {what}: the values downloaded alone are not the whole download's"
            );
        }
    }

    let a = &x;
    if claims(b, Operation::Spmv(SparseFormat::Csr)) {
        let v = vector::<T>(a.ncols(), 31);
        let expected = reference::spmv::<T, PlusTimes>(a, &v).expect("reference");
        let mv: Vec<f64> = v.iter().map(|t| t.magnitude()).collect();
        let magnitude = reference::spmv::<f64, PlusTimes>(&magnitudes(a), &mv).expect("mag");
        let rv = ok(&nm, "upload_vector", b.upload_vector(&v));
        let combos: [(&str, SparseOperand<'_, T>, VectorOperand<'_, T>); 4] = [
            ("host·host", a.into(), (&v).into()),
            ("resident·host", (&rx).into(), (&v).into()),
            ("host·resident", a.into(), (&rv).into()),
            ("resident·resident", (&rx).into(), (&rv).into()),
        ];
        for (label, m, xv) in combos {
            let what = format!("SpMV {label}");
            let y = ok(
                &nm,
                &what,
                b.spmv_with(m, xv, &SpmvOptions::new(), &RunControl::new()),
            );
            check(
                compare_dense(&y, &expected, &magnitude, &row_terms(a), "y"),
                || format!("{nm} {what}"),
            );
            let y = ok(
                &nm,
                &what,
                b.spmv_resident(m, xv, &SpmvOptions::new(), &RunControl::new()),
            );
            assert_eq!(
                (y.space(), y.shape()),
                (&space, (a.nrows(), 1)),
                "{nm} {what}"
            );
            let y = ok(&nm, "download_dense", b.download_dense(&y));
            check(
                compare_dense(y.data(), &expected, &magnitude, &row_terms(a), "y"),
                || format!("{nm} {what}, resident"),
            );
        }
    }
    if claims(b, Operation::Spmm(SparseFormat::Csr)) {
        for layout in [Layout::RowMajor, Layout::ColMajor] {
            let d = Dense::try_new(a.ncols(), 5, layout, vector::<T>(a.ncols() * 5, 41))
                .expect("dense");
            let expected = reference::spmm::<T, PlusTimes>(a, &d).expect("reference");
            let md = Dense::try_new(
                d.nrows(),
                d.ncols(),
                layout,
                d.data().iter().map(|t| t.magnitude()).collect(),
            )
            .expect("dense");
            let magnitude = reference::spmm::<f64, PlusTimes>(&magnitudes(a), &md).expect("mag");
            let terms: Vec<u64> = (0..expected.data().len())
                .map(|k| {
                    let i = match layout {
                        Layout::RowMajor => k / 5,
                        Layout::ColMajor => k % a.nrows().max(1),
                    };
                    a.row_nnz(i)
                })
                .collect();
            let rd = ok(&nm, "upload_dense", b.upload_dense(&d));
            let combos: [(&str, SparseOperand<'_, T>, DenseOperand<'_, T>); 4] = [
                ("host·host", a.into(), (&d).into()),
                ("resident·host", (&rx).into(), (&d).into()),
                ("host·resident", a.into(), (&rd).into()),
                ("resident·resident", (&rx).into(), (&rd).into()),
            ];
            for (label, m, dd) in combos {
                let what = format!("SpMM {label} {layout:?}");
                let c = ok(
                    &nm,
                    &what,
                    b.spmm_with(m, dd, &SpmmOptions::new(), &RunControl::new()),
                );
                assert_eq!(
                    (c.shape(), c.layout()),
                    (expected.shape(), layout),
                    "{nm} {what}"
                );
                check(
                    compare_dense(c.data(), expected.data(), magnitude.data(), &terms, "C"),
                    || format!("{nm} {what}"),
                );
                let c = ok(
                    &nm,
                    &what,
                    b.spmm_resident(m, dd, &SpmmOptions::new(), &RunControl::new()),
                );
                assert_eq!(c.space(), &space, "{nm} {what}: result space");
                let c = ok(&nm, "download_dense", b.download_dense(&c));
                assert_eq!(
                    (c.shape(), c.layout()),
                    (expected.shape(), layout),
                    "{nm} {what}"
                );
                check(
                    compare_dense(c.data(), expected.data(), magnitude.data(), &terms, "C"),
                    || format!("{nm} {what}, resident"),
                );
            }
        }
    }
}

/// `A·A·A` with the intermediate left resident: each step is right for the operands it had.
pub fn resident_chain<T: Scalar, B: Backend<T> + ?Sized>(b: &B) {
    let nm = name(b);
    for class in [MatrixClass::Stencil3d, MatrixClass::Road] {
        let (x, _) = class_operands::<T>(class);
        let rx = ok(&nm, "upload", b.upload(&x));
        let run = RunControl::new();
        let options = SpgemmOptions::new();
        let c1 = ok(
            &nm,
            "A·A",
            b.spgemm_resident((&rx).into(), (&rx).into(), &options, &run),
        );
        let c2 = ok(
            &nm,
            "(A·A)·A",
            b.spgemm_resident((&c1).into(), (&rx).into(), &options, &run),
        );
        let h1 = ok(&nm, "download", b.download(&c1));
        check(compare_structural(&h1, &expected_product(&x, &x)), || {
            format!("{nm} {class:?} A·A")
        });
        let h2 = ok(&nm, "download", b.download(&c2));
        check(compare_structural(&h2, &expected_product(&h1, &x)), || {
            format!("{nm} {class:?} (A·A)·A")
        });
        assert_eq!(
            c2.pattern(),
            PatternId::of_product(
                PatternId::of_product(rx.pattern(), rx.pattern()),
                rx.pattern()
            ),
            "{nm} {class:?}: chained pattern id"
        );
    }
}

/// A plan made once is executed with new values of the same patterns; operands of another
/// pattern are an error.
pub fn plan_reuse_with_new_values<T: Scalar, B: Backend<T> + ?Sized>(b: &B) {
    let nm = name(b);
    for alg in spgemm_algorithms(b) {
        for class in [
            MatrixClass::Stencil3d,
            MatrixClass::PowerLaw,
            MatrixClass::Road,
        ] {
            let what = format!("{alg:?} {class:?} plan");
            let (x, y) = class_operands::<T>(class);
            let (rx, ry) = (
                ok(&nm, "upload", b.upload(&x)),
                ok(&nm, "upload", b.upload(&y)),
            );
            let options = SpgemmOptions::from(alg);
            let plan = ok(
                &nm,
                &what,
                b.plan_spgemm((&rx).into(), (&ry).into(), &options),
            );
            let e = expected_product(&x, &y);
            assert_eq!(plan.c_nnz(), e.c.nnz(), "{nm} {what}: planned entries");
            assert_eq!(plan.shape(), e.c.shape(), "{nm} {what}: shape");
            // An execution allocates at least C's values (its structure may live in the plan).
            assert!(
                plan.requirement().output_bytes >= e.c.nnz() * size_of::<T>() as u64,
                "{nm} {what}: the requirement {:?} does not hold the result's values",
                plan.requirement()
            );
            let c = ok(
                &nm,
                &what,
                b.execute_spgemm(&plan, (&rx).into(), (&ry).into(), &RunControl::new()),
            );
            assert_eq!(
                c.pattern(),
                plan.c_pattern(),
                "{nm} {what}: result pattern id"
            );
            check(
                compare_structural(&ok(&nm, "download", b.download(&c)), &e),
                || format!("{nm} {what}, first execution"),
            );

            // New values, resident (only values uploaded) and on the host.
            let (x2, y2) = (with_values(&x, revalued(&x)), with_values(&y, revalued(&y)));
            let e2 = expected_product(&x2, &y2);
            let rx2 = ok(&nm, "upload_values", b.upload_values(&rx, x2.values()));
            let ry2 = ok(&nm, "upload_values", b.upload_values(&ry, y2.values()));
            let run = RunControl::new();
            let c2 = ok(
                &nm,
                &what,
                b.execute_spgemm(&plan, (&rx2).into(), (&ry2).into(), &run),
            );
            check(
                compare_structural(&ok(&nm, "download", b.download(&c2)), &e2),
                || format!("{nm} {what}, new resident values"),
            );
            let progress = run.progress();
            assert!(
                progress.done == progress.planned && progress.planned == plan.products(),
                "{nm} {what}: progress {progress:?}, {} products planned",
                plan.products()
            );
            let c3 = ok(
                &nm,
                &what,
                b.execute_spgemm(&plan, (&x2).into(), (&ry2).into(), &RunControl::new()),
            );
            check(
                compare_structural(&ok(&nm, "download", b.download(&c3)), &e2),
                || format!("{nm} {what}, new host values"),
            );
            // The same structure in arrays of its own (a copy, not shared with the planned
            // operand) is the same pattern.
            let (m, n, off, cols, vals) = x2.clone().into_parts();
            let copy = Csr::try_new(m, n, off, cols, vals).expect("csr");
            let c4 = ok(
                &nm,
                &what,
                b.execute_spgemm(&plan, (&copy).into(), (&ry2).into(), &RunControl::new()),
            );
            check(
                compare_structural(&ok(&nm, "download", b.download(&c4)), &e2),
                || format!("{nm} {what}, a copy of A's structure"),
            );

            // Another pattern: a structural entry dropped from A.
            let (m, n, mut off, mut cols, mut vals) = x.clone().into_parts();
            if let Some(last) = (0..m).rev().find(|&i| off[i + 1] > off[i]) {
                let at = off[last + 1] as usize - 1;
                cols.remove(at);
                vals.remove(at);
                for o in &mut off[last + 1..] {
                    *o -= 1;
                }
                let other = Csr::try_new(m, n, off, cols, vals).expect("csr");
                let r = b.execute_spgemm(&plan, (&other).into(), (&ry).into(), &RunControl::new());
                assert!(
                    matches!(r, Err(Error::PatternMismatch { operand: "A", .. })),
                    "{nm} {what}: another pattern of A gave {r:?}"
                );
            }
            // Another pattern of the same shape and entry count: an entry of A moved to a
            // column its row does not hold.
            if let Some(moved) = entry_moved(&x) {
                let r = b.execute_spgemm(&plan, (&moved).into(), (&ry).into(), &RunControl::new());
                assert!(
                    matches!(r, Err(Error::PatternMismatch { operand: "A", .. })),
                    "{nm} {what}: an entry of A moved gave {r:?}"
                );
                let moved_resident = ok(&nm, "upload", b.upload(&moved));
                let r = b.execute_spgemm(
                    &plan,
                    (&moved_resident).into(),
                    (&ry).into(),
                    &RunControl::new(),
                );
                assert!(
                    matches!(r, Err(Error::PatternMismatch { operand: "A", .. })),
                    "{nm} {what}: a resident A with an entry moved gave {r:?}"
                );
            }
            if rx.pattern() != ry.pattern() {
                let r = b.execute_spgemm(&plan, (&ry).into(), (&rx).into(), &RunControl::new());
                assert!(
                    matches!(r, Err(Error::PatternMismatch { .. })),
                    "{nm} {what}: swapped operands gave {r:?}"
                );
            }
        }
    }
}

/// `m` with one entry moved to a column its row does not hold (same shape, same entry count,
/// another pattern); `None` when every row with entries is full.
fn entry_moved<T: Scalar>(m: &Csr<T>) -> Option<Csr<T>> {
    let (nrows, ncols, off, mut cols, vals) = m.clone().into_parts();
    let row = (0..nrows).find(|&i| {
        let len = (off[i + 1] - off[i]) as usize;
        len > 0 && len < ncols
    })?;
    let (lo, hi) = (off[row] as usize, off[row + 1] as usize);
    let free = (0..ncols as u32).find(|c| cols[lo..hi].binary_search(c).is_err())?;
    cols[hi - 1] = free;
    cols[lo..hi].sort_unstable();
    Csr::try_new(nrows, ncols, off, cols, vals).ok()
}

/// A handle's pattern identity is its structure's, so a plan never computes with an operand of
/// another structure: a host matrix taken in with [`ResidentCsr::from_host`] gets its own
/// identity, which a plan made for another structure refuses, and a handle over storage that
/// is not the backend's own (whatever identity it claims) is refused, never computed with.
pub fn handles_never_lie_about_their_pattern<T: Scalar, B: Backend<T> + ?Sized>(b: &B) {
    let nm = name(b);
    let x = random_csr::<T>(40, 40, 0.1, 31);
    let y = random_csr::<T>(40, 40, 0.1, 32);
    // The same shape and entry count as x, another structure.
    let other = x.transpose().expect("transpose");
    assert_ne!(PatternId::of(&other), PatternId::of(&x));
    let (rx, ry) = (
        ok(&nm, "upload", b.upload(&x)),
        ok(&nm, "upload", b.upload(&y)),
    );
    let options = SpgemmOptions::new();
    let plan = ok(
        &nm,
        "plan",
        b.plan_spgemm((&rx).into(), (&ry).into(), &options),
    );
    let taken_in = ResidentCsr::from_host(b.memory_space(), other.clone());
    assert_eq!(
        taken_in.pattern(),
        PatternId::of(&other),
        "{nm}: from_host's identity"
    );
    let run = RunControl::new();
    let r = b.execute_spgemm(&plan, (&taken_in).into(), (&ry).into(), &run);
    assert!(
        r.is_err(),
        "{nm}: a plan for x computed with a matrix of another structure"
    );
    // Storage of a type no backend owns, claiming x's identity.
    let claimed = ResidentCsr::<T>::from_storage(
        b.memory_space(),
        other.shape(),
        other.nnz(),
        rx.pattern(),
        other.clone(),
    );
    let r = b.execute_spgemm(&plan, (&claimed).into(), (&ry).into(), &run);
    assert!(
        r.is_err(),
        "{nm}: a plan computed with a handle over foreign storage: {:?}",
        r.map(|c| c.nnz())
    );
    let r = b.spgemm_resident((&claimed).into(), (&ry).into(), &options, &run);
    assert!(
        r.is_err(),
        "{nm}: a product of a handle over foreign storage"
    );
    assert!(
        b.download(&claimed).is_err(),
        "{nm}: a handle over foreign storage downloaded"
    );
    assert!(
        b.download_values(&claimed).is_err(),
        "{nm}: a handle over foreign storage's values downloaded"
    );
}

/// Handles of another memory are [`Error::WrongDevice`], never a panic or a wrong result.
pub fn foreign_handles_are_errors<T: Scalar, B: Backend<T> + ?Sized>(b: &B) {
    let nm = name(b);
    let foreign = MemorySpace::Device {
        backend: crate::BackendKind::Other("conformance-foreign"),
        id: 7,
    };
    let x = random_csr::<T>(6, 6, 0.4, 21);
    let rx =
        ResidentCsr::<T>::from_storage(foreign.clone(), x.shape(), x.nnz(), PatternId::of(&x), ());
    let d = Dense::try_new(6, 2, Layout::RowMajor, vector::<T>(12, 5)).expect("dense");
    let rd = ResidentDense::<T>::from_storage(foreign.clone(), (6, 2), Layout::RowMajor, ());
    let rv = ResidentDense::<T>::from_storage(foreign, (6, 1), Layout::ColMajor, ());
    let v = vector::<T>(6, 9);
    let wrong = |what: &str, r: Result<(), Error>| {
        assert!(
            matches!(r, Err(Error::WrongDevice { .. })),
            "{nm} {what} with a handle of another device gave {r:?}"
        );
    };
    let run = RunControl::new();
    let options = SpgemmOptions::new();
    wrong("download", b.download(&rx).map(drop));
    wrong("download_values", b.download_values(&rx).map(drop));
    wrong("download_dense", b.download_dense(&rd).map(drop));
    wrong("upload_values", b.upload_values(&rx, x.values()).map(drop));
    wrong(
        "SpGEMM",
        b.spgemm_with((&rx).into(), (&x).into(), &options, &run)
            .map(drop),
    );
    wrong(
        "SpGEMM",
        b.spgemm_with((&x).into(), (&rx).into(), &options, &run)
            .map(drop),
    );
    wrong(
        "resident SpGEMM",
        b.spgemm_resident((&rx).into(), (&x).into(), &options, &run)
            .map(drop),
    );
    wrong(
        "plan",
        b.plan_spgemm((&x).into(), (&rx).into(), &options).map(drop),
    );
    if claims(b, Operation::Spmv(SparseFormat::Csr)) {
        wrong(
            "SpMV",
            b.spmv_with((&rx).into(), (&v).into(), &SpmvOptions::new(), &run)
                .map(drop),
        );
        wrong(
            "SpMV",
            b.spmv_with((&x).into(), (&rv).into(), &SpmvOptions::new(), &run)
                .map(drop),
        );
    }
    if claims(b, Operation::Spmm(SparseFormat::Csr)) {
        wrong(
            "SpMM",
            b.spmm_with((&rx).into(), (&d).into(), &SpmmOptions::new(), &run)
                .map(drop),
        );
        wrong(
            "SpMM",
            b.spmm_with((&x).into(), (&rd).into(), &SpmmOptions::new(), &run)
                .map(drop),
        );
    }
}

/// A cancelled run returns [`Error::Cancelled`]: cancelled before it starts, and cancelled
/// from the sink after the first chunk (no chunk is delivered after it). A finished run has
/// done all it planned.
pub fn cancellation_and_progress<T: Scalar, B: Backend<T> + ?Sized>(b: &B) {
    let nm = name(b);
    let (x, y) = class_operands::<T>(MatrixClass::Uniform);
    let options = SpgemmOptions::new();
    let cancelled = RunControl::new();
    cancelled.cancel();
    let r = b.spgemm_with((&x).into(), (&y).into(), &options, &cancelled);
    assert!(
        matches!(r, Err(Error::Cancelled)),
        "{nm}: cancelled SpGEMM gave {r:?}"
    );
    let r = b.spgemm_resident((&x).into(), (&y).into(), &options, &cancelled);
    assert!(
        matches!(r, Err(Error::Cancelled)),
        "{nm}: cancelled resident SpGEMM gave {r:?}"
    );
    let plan = ok(
        &nm,
        "plan",
        b.plan_spgemm((&x).into(), (&y).into(), &options),
    );
    let r = b.execute_spgemm(&plan, (&x).into(), (&y).into(), &cancelled);
    assert!(
        matches!(r, Err(Error::Cancelled)),
        "{nm}: cancelled execution gave {r:?}"
    );
    if claims(b, Operation::Spmv(SparseFormat::Csr)) {
        let v = vector::<T>(x.ncols(), 2);
        let r = b.spmv_with((&x).into(), (&v).into(), &SpmvOptions::new(), &cancelled);
        assert!(
            matches!(r, Err(Error::Cancelled)),
            "{nm}: cancelled SpMV gave {r:?}"
        );
    }

    let run = RunControl::new();
    let chunks: Vec<ProductChunk> = (0..4)
        .map(|k| ProductChunk {
            rows: k * x.nrows() / 4..(k + 1) * x.nrows() / 4,
            cols: 0..y.ncols(),
        })
        .collect();
    let mut delivered = 0;
    let r = b.spgemm_chunks(
        (&x).into(),
        (&y).into(),
        &chunks,
        &options,
        &run,
        &mut |_| {
            delivered += 1;
            run.cancel();
            Ok(())
        },
    );
    assert!(
        matches!(r, Err(Error::Cancelled)),
        "{nm}: chunks cancelled from the sink gave {r:?}"
    );
    assert_eq!(
        delivered, 1,
        "{nm}: chunks were delivered after the run was cancelled"
    );

    let run = RunControl::new();
    ok(
        &nm,
        "SpGEMM",
        b.spgemm_with((&x).into(), (&y).into(), &options, &run),
    );
    let products = crate::analysis::total_products(&x, &y).expect("products");
    let progress = run.progress();
    assert!(
        progress.planned == products && progress.done == products,
        "{nm}: a finished SpGEMM of {products} products reports {progress:?}"
    );
}

/// How long after a cancel from another thread a run may still take to return in
/// [`cancellation_mid_product`]: the goal is 100 ms or one kernel launch, the bound here is
/// loose for loaded test machines (a run that ignores the cancel takes the whole product).
const CANCEL_LATENCY_BOUND: std::time::Duration = std::time::Duration::from_secs(3);

/// A run cancelled while it computes returns [`Error::Cancelled`] on every operation, and the
/// backend is usable right after:
/// - cancelled from its progress callback at the first report (the work is planned, all of it
///   still to do): SpGEMM from the host, resident, a plan's execution, SpMV and SpMM (where the
///   backend reports their progress);
/// - cancelled from another thread once the work is planned, on a product of about 1.7·10^7
///   intermediate products (f64 only, for the time it takes): it returns within
///   [`CANCEL_LATENCY_BOUND`] of the cancel, `Cancelled` unless it was in its last moments.
pub fn cancellation_mid_product<T: Scalar, B: Backend<T> + ?Sized>(b: &B) {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};
    let nm = name(b);
    let options = SpgemmOptions::new();
    // From the callback, at its first report.
    let cancelling = || {
        let calls = Arc::new(AtomicU64::new(0));
        let seen = Arc::clone(&calls);
        let handle: Arc<std::sync::OnceLock<RunControl>> = Arc::default();
        let inner = Arc::clone(&handle);
        let run = RunControl::with_progress(move |_| {
            seen.fetch_add(1, Ordering::Relaxed);
            if let Some(run) = inner.get() {
                run.cancel();
            }
        });
        let _ = handle.set(run.clone());
        (run, calls)
    };
    let (x, y) = class_operands::<T>(MatrixClass::Uniform);
    let (rx, ry) = (
        ok(&nm, "upload", b.upload(&x)),
        ok(&nm, "upload", b.upload(&y)),
    );
    let plan = ok(
        &nm,
        "plan",
        b.plan_spgemm((&rx).into(), (&ry).into(), &options),
    );
    let cancelled = |what: &str, r: Result<(), Error>, calls: &AtomicU64| {
        let called = calls.load(Ordering::Relaxed);
        assert!(
            called == 0 || matches!(r, Err(Error::Cancelled)),
            "{nm}: {what} cancelled from its progress callback gave {r:?}"
        );
        called > 0
    };
    let (run, calls) = cancelling();
    let r = b.spgemm_with((&x).into(), (&y).into(), &options, &run);
    assert!(
        cancelled("SpGEMM", r.map(drop), &calls),
        "{nm}: SpGEMM reported no progress"
    );
    let (run, calls) = cancelling();
    let r = b.spgemm_resident((&rx).into(), (&ry).into(), &options, &run);
    cancelled("resident SpGEMM", r.map(drop), &calls);
    let (run, calls) = cancelling();
    let r = b.execute_spgemm(&plan, (&rx).into(), (&ry).into(), &run);
    cancelled("a plan's execution", r.map(drop), &calls);
    if claims(b, Operation::Spmv(SparseFormat::Csr)) {
        let v = vector::<T>(x.ncols(), 3);
        let (run, calls) = cancelling();
        let r = b.spmv_with((&x).into(), (&v).into(), &SpmvOptions::new(), &run);
        cancelled("SpMV", r.map(drop), &calls);
    }
    if claims(b, Operation::Spmm(SparseFormat::Csr)) {
        let d = Dense::try_new(
            x.ncols(),
            4,
            Layout::RowMajor,
            vector::<T>(x.ncols() * 4, 4),
        )
        .expect("dense");
        let (run, calls) = cancelling();
        let r = b.spmm_with((&x).into(), (&d).into(), &SpmmOptions::new(), &run);
        cancelled("SpMM", r.map(drop), &calls);
    }
    // Usable right after.
    let c = ok(
        &nm,
        "SpGEMM after cancels",
        b.spgemm_with((&x).into(), (&y).into(), &options, &RunControl::new()),
    );
    let e = expected_product(&x, &y);
    check(compare_structural(&c, &e), || format!("{nm} after cancels"));
    check(compare_values(&c, &e), || format!("{nm} after cancels"));

    if T::TYPE != ScalarType::F64 {
        return;
    }
    // From another thread, once the work is planned.
    let big_a = generate::uniform::<T>(30_000, 30_000, 24, 61);
    let big_b = generate::uniform::<T>(30_000, 30_000, 24, 62);
    let (ra, rb) = (
        ok(&nm, "upload", b.upload(&big_a)),
        ok(&nm, "upload", b.upload(&big_b)),
    );
    let big_plan = ok(
        &nm,
        "plan",
        b.plan_spgemm((&ra).into(), (&rb).into(), &options),
    );
    type Call<'c> = Box<dyn Fn(&RunControl) -> Result<(), Error> + Sync + 'c>;
    let calls: Vec<(&str, Call<'_>)> = vec![
        (
            "SpGEMM",
            Box::new(|run| {
                b.spgemm_with((&big_a).into(), (&big_b).into(), &options, run)
                    .map(drop)
            }),
        ),
        (
            "resident SpGEMM",
            Box::new(|run| {
                b.spgemm_resident((&ra).into(), (&rb).into(), &options, run)
                    .map(drop)
            }),
        ),
        (
            "a plan's execution",
            Box::new(|run| {
                b.execute_spgemm(&big_plan, (&ra).into(), (&rb).into(), run)
                    .map(drop)
            }),
        ),
    ];
    for (what, call) in &calls {
        let run = RunControl::new();
        let (result, cancelled_at, returned_at) = std::thread::scope(|scope| {
            let worker = scope.spawn(|| {
                let r = call(&run);
                (r, Instant::now())
            });
            let started = Instant::now();
            while run.progress().planned == 0
                && !worker.is_finished()
                && started.elapsed() < Duration::from_secs(30)
            {
                std::thread::sleep(Duration::from_micros(200));
            }
            let cancelled_at = Instant::now();
            run.cancel();
            let (r, returned_at) = worker.join().expect("the call does not panic");
            (r, cancelled_at, returned_at)
        });
        let latency = returned_at.saturating_duration_since(cancelled_at);
        eprintln!("{nm}: {what} returned {latency:?} after a cancel from another thread");
        if returned_at <= cancelled_at {
            // Finished before the cancel: nothing to say about cancelling.
            continue;
        }
        match result {
            Err(Error::Cancelled) => assert!(
                latency <= CANCEL_LATENCY_BOUND,
                "{nm}: {what} returned Cancelled {latency:?} after the cancel"
            ),
            Ok(()) => assert!(
                latency <= Duration::from_millis(100),
                "{nm}: {what} went on for {latency:?} after the cancel and returned its result"
            ),
            Err(e) => panic!("{nm}: {what} cancelled from another thread gave {e}"),
        }
    }
    drop(calls);
    let c = ok(
        &nm,
        "SpGEMM after cancels",
        b.spgemm_with((&x).into(), (&y).into(), &options, &RunControl::new()),
    );
    check(compare_structural(&c, &e), || {
        format!("{nm} after cancels from another thread")
    });
}

/// One backend called from 8 threads at once, with shared resident operands: every result is
/// right.
pub fn concurrent_calls<T: Scalar, B: Backend<T> + ?Sized>(b: &B) {
    let nm = name(b);
    let (x, y) = class_operands::<T>(MatrixClass::Road);
    let e = expected_product(&x, &y);
    let (rx, ry) = (
        ok(&nm, "upload", b.upload(&x)),
        ok(&nm, "upload", b.upload(&y)),
    );
    let v = vector::<T>(x.ncols(), 13);
    let ev = reference::spmv::<T, PlusTimes>(&x, &v).expect("reference");
    let mv: Vec<f64> = v.iter().map(|t| t.magnitude()).collect();
    let magnitude = reference::spmv::<f64, PlusTimes>(&magnitudes(&x), &mv).expect("mag");
    let spmv = claims(b, Operation::Spmv(SparseFormat::Csr));
    std::thread::scope(|scope| {
        for t in 0..8 {
            let (nm, e, rx, ry, x, v, ev, magnitude) = (&nm, &e, &rx, &ry, &x, &v, &ev, &magnitude);
            scope.spawn(move || {
                for round in 0..3 {
                    let what = format!("thread {t} round {round}");
                    let run = RunControl::new();
                    let c = if (t + round) % 2 == 0 {
                        ok(
                            nm,
                            &what,
                            b.spgemm_with(rx.into(), ry.into(), &SpgemmOptions::new(), &run),
                        )
                    } else {
                        let c = ok(
                            nm,
                            &what,
                            b.spgemm_resident(x.into(), ry.into(), &SpgemmOptions::new(), &run),
                        );
                        ok(nm, "download", b.download(&c))
                    };
                    check(compare_structural(&c, e), || format!("{nm} {what} SpGEMM"));
                    if spmv {
                        let y = ok(
                            nm,
                            &what,
                            b.spmv_with(rx.into(), v.into(), &SpmvOptions::new(), &run),
                        );
                        check(compare_dense(&y, ev, magnitude, &row_terms(x), "y"), || {
                            format!("{nm} {what} SpMV")
                        });
                    }
                }
            });
        }
    });
}

/// Two backends on the same memory: a handle made by one is an operand of the other, and a
/// result left resident by one downloads through the other.
pub fn handles_are_shared_on_one_device<T: Scalar, B: Backend<T> + ?Sized>(first: &B, second: &B) {
    let nm = name(first);
    assert_eq!(
        first.memory_space(),
        second.memory_space(),
        "{nm}: two backends made the same way compute in different memories"
    );
    let (x, y) = class_operands::<T>(MatrixClass::Skewed);
    let e = expected_product(&x, &y);
    let (rx, ry) = (
        ok(&nm, "upload", first.upload(&x)),
        ok(&nm, "upload", first.upload(&y)),
    );
    let options = SpgemmOptions::new();
    let c = ok(
        &nm,
        "SpGEMM on the second backend",
        second.spgemm_resident((&rx).into(), (&ry).into(), &options, &RunControl::new()),
    );
    check(
        compare_structural(&ok(&nm, "download", first.download(&c)), &e),
        || format!("{nm}: a product of the first backend's handles on the second"),
    );
    let plan = ok(
        &nm,
        "plan",
        first.plan_spgemm((&rx).into(), (&ry).into(), &options),
    );
    let c = ok(
        &nm,
        "plan of the first backend run by the second",
        second.execute_spgemm(&plan, (&rx).into(), (&ry).into(), &RunControl::new()),
    );
    check(
        compare_structural(&ok(&nm, "download", second.download(&c)), &e),
        || format!("{nm}: the first backend's plan executed by the second"),
    );
}

/// What a backend says a product needs bounds what it takes: the plan's output holds C, and on
/// a backend with a memory pool, no call reserves more than its requirement.
/// Takes its own backend, so that no other test's reservations are counted.
pub fn requirement_bounds_allocation<T: Scalar, B: Backend<T> + ?Sized>(b: &B) {
    let nm = name(b);
    for class in [
        MatrixClass::Stencil3d,
        MatrixClass::Skewed,
        MatrixClass::PowerLaw,
    ] {
        let (x, y) = class_operands::<T>(class);
        let e = expected_product(&x, &y);
        let options = SpgemmOptions::new();
        let need = ok(
            &nm,
            "requirement",
            b.spgemm_requirement((&x).into(), (&y).into(), &options),
        );
        assert!(
            need.output_bytes > 0 || e.c.nnz() == 0,
            "{nm} {class:?}: a requirement {need:?} without output"
        );
        let Some(pool) = b.memory_pool() else {
            continue;
        };
        pool.reset_peak();
        let before = pool.reserved();
        ok(
            &nm,
            "SpGEMM",
            b.spgemm_with((&x).into(), (&y).into(), &options, &RunControl::new()),
        );
        let used = pool.peak() - before;
        assert!(
            used <= need.device_bytes(),
            "{nm} {class:?}: the call reserved {used} bytes, its requirement said {need:?}"
        );
        let plan = ok(
            &nm,
            "plan",
            b.plan_spgemm((&x).into(), (&y).into(), &options),
        );
        let (rx, ry) = (
            ok(&nm, "upload", b.upload(&x)),
            ok(&nm, "upload", b.upload(&y)),
        );
        pool.reset_peak();
        let before = pool.reserved();
        let c = ok(
            &nm,
            "execute",
            b.execute_spgemm(&plan, (&rx).into(), (&ry).into(), &RunControl::new()),
        );
        let used = pool.peak() - before;
        assert!(
            used <= plan.requirement().device_bytes(),
            "{nm} {class:?}: executing the plan reserved {used} bytes, it said {:?}",
            plan.requirement()
        );
        drop(c);
    }
}

#[cfg(test)]
mod tests {
    //! The suite must fail for backends that are wrong in the ways backends go wrong.

    use super::*;
    use crate::backend::{Capabilities, Device, DeviceInfo, Validated};
    use crate::ReferenceBackend;

    /// The reference backend with one fault switched on.
    struct Faulty(Fault);

    #[derive(Clone, Copy)]
    enum Fault {
        /// Drops entries whose values cancel to zero.
        DropsZeros,
        /// Perturbs the last value of every product by one part in a thousand.
        Perturbs,
        /// Loses the last row of every product.
        LosesRow,
        /// Gets the last element of every SpMV wrong.
        SpmvOffByOne,
    }

    impl Device for Faulty {
        fn info(&self) -> DeviceInfo {
            ReferenceBackend.info()
        }
        fn capabilities(&self) -> &Capabilities {
            ReferenceBackend.capabilities()
        }
        fn memory_space(&self) -> MemorySpace {
            MemorySpace::Host
        }
    }

    impl Backend<f64> for Faulty {
        fn spgemm_checked(
            &self,
            a: CsrOperand<'_, f64>,
            b: CsrOperand<'_, f64>,
            options: &SpgemmOptions,
            run: &RunControl,
            _checked: Validated,
        ) -> crate::Result<Csr<f64>> {
            let c = ReferenceBackend.spgemm_with(a, b, options, run)?;
            Ok(match self.0 {
                Fault::DropsZeros => c.without_explicit_zeros(),
                Fault::Perturbs => {
                    let mut c = c;
                    if let Some(v) = c.values_mut().last_mut() {
                        *v *= 1.001;
                    }
                    c
                }
                Fault::LosesRow if c.nrows() > 0 => {
                    let (m, n, mut off, mut cols, mut vals) = c.into_parts();
                    let keep = off[m - 1];
                    off[m] = keep;
                    cols.truncate(keep as usize);
                    vals.truncate(keep as usize);
                    Csr::try_new(m, n, off, cols, vals)?
                }
                _ => c,
            })
        }
        fn spmm_checked(
            &self,
            a: SparseOperand<'_, f64>,
            b: DenseOperand<'_, f64>,
            options: &SpmmOptions,
            run: &RunControl,
            _checked: Validated,
        ) -> crate::Result<Dense<f64>> {
            ReferenceBackend.spmm_with(a, b, options, run)
        }
        fn spmv_checked(
            &self,
            a: SparseOperand<'_, f64>,
            x: VectorOperand<'_, f64>,
            options: &SpmvOptions,
            run: &RunControl,
            _checked: Validated,
        ) -> crate::Result<Vec<f64>> {
            let mut y = ReferenceBackend.spmv_with(a, x, options, run)?;
            if let (Fault::SpmvOffByOne, Some(v)) = (self.0, y.last_mut()) {
                *v += 1.0;
            }
            Ok(y)
        }
        fn residency(&self) -> crate::backend::Residency<'_, f64> {
            crate::backend::Residency::Host
        }
    }

    fn fails(check: impl FnOnce() + std::panic::UnwindSafe) -> bool {
        std::panic::catch_unwind(check).is_err()
    }

    #[test]
    fn the_suite_catches_faulty_backends() {
        let b = Faulty(Fault::DropsZeros);
        assert!(fails(move || spgemm_edge_cases::<f64, _>(&b)));
        let b = Faulty(Fault::Perturbs);
        assert!(fails(move || spgemm_matrix_classes::<f64, _>(&b)));
        let b = Faulty(Fault::Perturbs);
        assert!(fails(move || spgemm_random::<f64, _>(&b)));
        let b = Faulty(Fault::LosesRow);
        assert!(fails(move || spgemm_chunks::<f64, _>(&b)));
        let b = Faulty(Fault::LosesRow);
        assert!(fails(move || spgemm_chunks_into::<f64, _>(&b)));
        let b = Faulty(Fault::Perturbs);
        assert!(fails(move || dia_spgemm::<f64, _>(&b)));
        let b = Faulty(Fault::Perturbs);
        assert!(fails(move || bsr_spgemm::<f64, _>(&b)));
        let b = Faulty(Fault::SpmvOffByOne);
        assert!(fails(move || spmv_every_format::<f64, _>(&b)));
    }

    #[test]
    fn the_tolerance_admits_reordered_sums_but_not_half_precision_errors() {
        // 0.1 + 0.2 + 0.3 summed in two orders differs in the last bit: admitted.
        let sum1 = (0.1f64 + 0.2) + 0.3;
        let sum2 = 0.1f64 + (0.2 + 0.3);
        assert!(distance(sum1, sum2) <= tolerance::<f64>(3, 0.6, sum2));
        // An error of one f16 ulp in an f64 result is not.
        assert!(1e-3 > tolerance::<f64>(3, 0.6, 0.6));
    }
}
