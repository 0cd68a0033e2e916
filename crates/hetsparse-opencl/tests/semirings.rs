//! Semiring and masked products on the OpenCL device beyond the conformance suite: chains of
//! resident products whose results were masked (their pattern identity must follow their
//! structure), requirements that bound what the masked paths reserve, and plans that refuse
//! what their numeric kernels cannot compute. Every result is compared with the reference
//! backend's.

mod common;

use hetsparse_core::generate::{dense, product_operands, MatrixClass};
use hetsparse_core::{
    reference, Backend, Csr, Device, Error, Mask, RunControl, SemiringKind, SpgemmOptions,
};

/// Operands of a square product with explicit zeros (so that a valued mask differs from a
/// structural one) and negative values.
fn operands(seed: u64) -> (Csr<f64>, Csr<f64>) {
    let (mut x, mut y) = product_operands::<f64>(MatrixClass::PowerLaw, 200, seed);
    for (m, every) in [(&mut x, 7), (&mut y, 5)] {
        for (k, v) in m.values_mut().iter_mut().enumerate() {
            if k % every == 2 {
                *v = 0.0;
            } else if k % 3 == 0 {
                *v = -*v;
            }
        }
    }
    (x, y)
}

/// `C` against the reference's `want`: the same structure, values within `1e-9` relative.
fn assert_matches(c: &Csr<f64>, want: &Csr<f64>, what: &str) {
    assert_eq!(c.shape(), want.shape(), "{what}: shape");
    assert_eq!(c.row_offsets(), want.row_offsets(), "{what}: row offsets");
    assert_eq!(c.col_indices(), want.col_indices(), "{what}: columns");
    for (k, (a, e)) in c.values().iter().zip(want.values()).enumerate() {
        let ok = a == e || (a - e).abs() <= 1e-9 * e.abs().max(1.0);
        assert!(ok, "{what}: value {k} is {a}, expected {e}");
    }
}

#[test]
fn masked_resident_results_chain_into_later_products() {
    let Some(b) = common::backend("semirings") else {
        return;
    };
    let (x, y) = operands(11);
    assert_eq!(x.ncols(), y.nrows());
    let plain = reference::spgemm_with_options(&x, &y, &SpgemmOptions::new()).unwrap();
    let run = RunControl::new();
    let (rx, ry) = (b.upload(&x).unwrap(), b.upload(&y).unwrap());
    for (mode, mask) in [
        ("structural", Mask::structural(&x)),
        ("valued", Mask::valued(&x)),
        ("complemented", Mask::valued(&x).complemented()),
    ] {
        for kind in [
            SemiringKind::PlusTimes,
            SemiringKind::MinPlus,
            SemiringKind::MaxMin,
        ] {
            let what = format!("{kind}, {mode} mask");
            let options = SpgemmOptions::new()
                .with_semiring(kind)
                .with_mask(mask.clone());
            let want = reference::spgemm_with_options(&x, &y, &options).unwrap();
            assert_ne!(want.col_indices(), plain.col_indices(), "{what}: the mask");
            let c = b
                .spgemm_resident((&rx).into(), (&ry).into(), &options, &run)
                .unwrap();
            assert_eq!(c.nnz(), want.nnz(), "{what}: entries");
            assert_matches(&b.download(&c).unwrap(), &want, &what);
            // The masked result as an operand: its stored structure is the masked one, and a
            // product from it is the reference's product of the masked matrix.
            let next = b
                .spgemm_resident((&c).into(), (&ry).into(), &SpgemmOptions::new(), &run)
                .and_then(|r| b.download(&r))
                .unwrap();
            let want_next =
                reference::spgemm_with_options(&want, &y, &SpgemmOptions::new()).unwrap();
            assert_matches(&next, &want_next, &format!("{what}, then C·B"));
            // A plan over the masked result plans its own structure.
            let plan = b
                .plan_spgemm((&c).into(), (&ry).into(), &SpgemmOptions::new())
                .unwrap();
            let executed = b
                .execute_spgemm(&plan, (&c).into(), (&ry).into(), &run)
                .and_then(|r| b.download(&r))
                .unwrap();
            assert_matches(
                &executed,
                &want_next,
                &format!("{what}, then a plan of C·B"),
            );
            // A host matrix of another structure is refused by that plan, not multiplied.
            let refused = b.execute_spgemm(&plan, (&x).into(), (&ry).into(), &run);
            assert!(refused.is_err(), "{what}: a plan took another structure");
        }
    }
}

#[test]
fn requirements_bound_what_masked_products_reserve() {
    let Some(b) = common::backend("semirings") else {
        return;
    };
    let pool = b.memory_pool().expect("the OpenCL backend has a pool");
    let (x, y) = operands(12);
    let dense_mask = dense::<f64>(x.nrows(), y.ncols(), 3);
    let masks = [
        Mask::structural(&x),
        Mask::structural(&x).complemented(),
        Mask::structural(&dense_mask),
    ];
    let run = RunControl::new();
    for mask in masks {
        for kind in [SemiringKind::PlusPair, SemiringKind::MinSecond] {
            let options = SpgemmOptions::new()
                .with_semiring(kind)
                .with_mask(mask.clone());
            let need = b
                .spgemm_requirement((&x).into(), (&y).into(), &options)
                .unwrap();
            pool.reset_peak();
            let before = pool.reserved();
            let c = b
                .spgemm_with((&x).into(), (&y).into(), &options, &run)
                .unwrap();
            let used = pool.peak() - before;
            assert!(
                used <= need.device_bytes(),
                "{kind} with {} entries in the mask: reserved {used}, required {need:?}",
                mask.entries()
            );
            let want = reference::spgemm_with_options(&x, &y, &options).unwrap();
            assert_eq!(c.col_indices(), want.col_indices(), "{kind}");
        }
    }
}

#[test]
fn plans_and_executions_refuse_semirings_and_masks_with_a_typed_error() {
    let Some(b) = common::backend("semirings") else {
        return;
    };
    let (x, y) = operands(13);
    let (rx, ry) = (b.upload(&x).unwrap(), b.upload(&y).unwrap());
    for options in [
        SpgemmOptions::new().with_semiring(SemiringKind::MaxPlus),
        SpgemmOptions::new().with_semiring(SemiringKind::AnyPair),
        SpgemmOptions::new().with_mask(Mask::structural(&x)),
        SpgemmOptions::new().with_mask(Mask::valued(&x).complemented()),
    ] {
        for (what, r) in [
            ("host", b.plan_spgemm((&x).into(), (&y).into(), &options)),
            (
                "resident",
                b.plan_spgemm((&rx).into(), (&ry).into(), &options),
            ),
        ] {
            assert!(
                matches!(r, Err(Error::Unsupported { .. })),
                "a plan of {what} operands with {options:?}: {:?}",
                r.map(|_| "a plan")
            );
        }
        // The same product without a plan is computed, as the reference computes it.
        let run = RunControl::new();
        let want = reference::spgemm_with_options(&x, &y, &options).unwrap();
        let got = b
            .spgemm_resident((&rx).into(), (&ry).into(), &options, &run)
            .and_then(|r| b.download(&r))
            .unwrap();
        assert_eq!(got.col_indices(), want.col_indices());
    }
    // Semirings not defined over a type are refused on every path, before any kernel runs.
    let z = Csr::<hetsparse_core::Complex<f32>>::identity(6).unwrap();
    let rz = b.upload(&z).unwrap();
    let min_plus = SpgemmOptions::new().with_semiring(SemiringKind::MinPlus);
    let run = RunControl::new();
    let results = [
        b.spgemm_with((&z).into(), (&z).into(), &min_plus, &run)
            .map(drop),
        b.spgemm_resident((&rz).into(), (&rz).into(), &min_plus, &run)
            .map(drop),
        b.plan_spgemm((&rz).into(), (&rz).into(), &min_plus)
            .map(drop),
    ];
    for r in results {
        assert!(matches!(r, Err(Error::Unsupported { .. })), "{r:?}");
    }
}

#[test]
fn masked_products_from_the_host_report_their_progress() {
    let Some(b) = common::backend("semirings") else {
        return;
    };
    let (x, y) = operands(14);
    let products = hetsparse_core::analysis::total_products(&x, &y).unwrap();
    assert!(products > 0);
    for mask in [Mask::structural(&x), Mask::structural(&x).complemented()] {
        let options = SpgemmOptions::new()
            .with_semiring(SemiringKind::MinFirst)
            .with_mask(mask);
        let run = RunControl::new();
        b.spgemm_with((&x).into(), (&y).into(), &options, &run)
            .unwrap();
        let p = run.progress();
        assert_eq!(
            (p.planned, p.done),
            (products, products),
            "complemented: {}",
            options.mask.as_ref().is_some_and(Mask::is_complemented)
        );
    }
}
