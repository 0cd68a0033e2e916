//! Residency on the OpenCL device: round trips, operations on resident operands equal to the
//! host path, results left on the device, handles of other memory spaces refused, plans,
//! memory accounts, chunks and run control.

mod common;

use hetsparse_core::backend::{MemorySpace, ProductChunk, ResidentCsr};
use hetsparse_core::format::{Csr, Dense, Layout, SparseRef};
use hetsparse_core::generate::{self, MatrixClass};
use hetsparse_core::{
    reference, Backend, ChunkProduct, Device, Error, PlusTimes, ReferenceBackend, RunControl,
    SpgemmAlgorithm, SpgemmOptions, SpmmOptions, SpmvOptions,
};
use hetsparse_opencl::OpenClBackend;

fn backend() -> Option<OpenClBackend> {
    common::backend("opencl resident tests")
}

fn close(x: f64, y: f64) -> bool {
    (x - y).abs() <= 1e-9 * (1.0 + x.abs().max(y.abs()))
}

fn assert_csr_close(c: &Csr<f64>, e: &Csr<f64>, what: &str) {
    assert_eq!(c.shape(), e.shape(), "{what}: shape");
    assert_eq!(c.row_offsets(), e.row_offsets(), "{what}: row offsets");
    assert_eq!(c.col_indices(), e.col_indices(), "{what}: columns");
    for (k, (x, y)) in c.values().iter().zip(e.values()).enumerate() {
        assert!(close(*x, *y), "{what}: value {k}: {x} vs {y}");
    }
}

fn assert_values_close(c: &[f64], e: &[f64], what: &str) {
    assert_eq!(c.len(), e.len(), "{what}: length");
    for (k, (x, y)) in c.iter().zip(e).enumerate() {
        assert!(close(*x, *y), "{what}: element {k}: {x} vs {y}");
    }
}

fn vector(n: usize, seed: u64) -> Vec<f64> {
    (0..n)
        .map(|i| ((i as u64 * 2_654_435_761 + seed) % 1000) as f64 / 250.0 - 2.0)
        .collect()
}

fn dense(nrows: usize, ncols: usize, layout: Layout, seed: u64) -> Dense<f64> {
    Dense::from_fn(nrows, ncols, layout, |i, j| {
        ((i * 31 + j * 17 + seed as usize) % 97) as f64 / 13.0 - 3.0
    })
    .unwrap()
}

/// Operand pairs of several shapes, with empty and rectangular ones.
fn pairs() -> Vec<(&'static str, Csr<f64>, Csr<f64>)> {
    let mut v = Vec::new();
    for class in [
        MatrixClass::PowerLaw,
        MatrixClass::Road,
        MatrixClass::LpRectangular,
    ] {
        let (a, b) = generate::product_operands::<f64>(class, 300, 5);
        v.push((class.name(), a, b));
    }
    let empty = Csr::<f64>::try_new(4, 3, vec![0; 5], vec![], vec![]).unwrap();
    let b = generate::uniform::<f64>(3, 6, 2, 9);
    v.push(("empty A", empty, b));
    let a = generate::uniform::<f64>(5, 7, 3, 1);
    let no_rows = Csr::<f64>::try_new(7, 0, vec![0; 8], vec![], vec![]).unwrap();
    v.push(("no columns in B", a, no_rows));
    v
}

#[test]
fn matrices_and_dense_matrices_round_trip() {
    let Some(b) = backend() else { return };
    assert!(matches!(
        b.memory_space(),
        MemorySpace::Device {
            backend: hetsparse_core::BackendKind::OpenCl,
            ..
        }
    ));
    for (name, a, _) in pairs() {
        let r = b.upload(&a).unwrap();
        assert_eq!(r.space(), &b.memory_space(), "{name}");
        assert_eq!((r.shape(), r.nnz()), (a.shape(), a.nnz()), "{name}");
        assert!(r.host().is_none(), "{name}: the storage is the device's");
        assert_eq!(b.download(&r).unwrap(), a, "{name}");
        let owned = b.upload_owned(a.clone()).unwrap();
        assert_eq!(owned.pattern(), r.pattern(), "{name}");
        assert_eq!(b.download(&owned).unwrap(), a, "{name}");
    }
    for layout in [Layout::RowMajor, Layout::ColMajor] {
        let d = dense(7, 5, layout, 3);
        let r = b.upload_dense(&d).unwrap();
        assert_eq!((r.shape(), r.layout()), ((7, 5), layout));
        assert_eq!(b.download_dense(&r).unwrap(), d);
    }
    let x = vector(11, 2);
    let r = Backend::<f64>::upload_vector(&b, &x).unwrap();
    assert_eq!(b.download_dense(&r).unwrap().into_data(), x);
    // Other scalar types keep their bits.
    let h = generate::banded::<hetsparse_core::f16>(20, 3, 4);
    let rh = b.upload(&h).unwrap();
    assert_eq!(b.download(&rh).unwrap(), h);
}

#[test]
fn new_values_keep_the_structure_and_the_pattern() {
    let Some(b) = backend() else { return };
    let a = generate::banded::<f64>(50, 5, 2);
    let r = b.upload(&a).unwrap();
    let values: Vec<f64> = (0..a.nnz()).map(|k| k as f64 * 0.5 - 3.0).collect();
    let r2 = b.upload_values(&r, &values).unwrap();
    assert_eq!(r2.pattern(), r.pattern());
    let back = b.download(&r2).unwrap();
    assert_eq!(back.row_offsets(), a.row_offsets());
    assert_eq!(back.col_indices(), a.col_indices());
    assert_eq!(back.values(), &values[..]);
    // The first matrix is unchanged.
    assert_eq!(b.download(&r).unwrap(), a);
    let err = b.upload_values(&r, &values[1..]).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
}

#[test]
fn resident_spmv_and_spmm_equal_the_host_results() {
    let Some(b) = backend() else { return };
    let run = RunControl::new();
    for (name, a, _) in pairs() {
        let x = vector(a.ncols(), 3);
        let expected = reference::spmv::<f64, PlusTimes>(&a, &x).unwrap();
        let host = b.spmv(SparseRef::Csr(&a), &x).unwrap();
        assert_values_close(&host, &expected, name);
        let ra = b.upload(&a).unwrap();
        let rx = Backend::<f64>::upload_vector(&b, &x).unwrap();
        let opts = SpmvOptions::new();
        // Every mix of host and resident operands.
        let mixes = [
            b.spmv_with((&ra).into(), (&rx).into(), &opts, &run),
            b.spmv_with((&ra).into(), (&x).into(), &opts, &run),
            b.spmv_with((&a).into(), (&rx).into(), &opts, &run),
        ];
        for (k, y) in mixes.into_iter().enumerate() {
            assert_values_close(&y.unwrap(), &expected, &format!("{name} mix {k}"));
        }
        let ry = b
            .spmv_resident((&ra).into(), (&rx).into(), &opts, &run)
            .unwrap();
        assert_eq!(ry.shape(), (a.nrows(), 1));
        assert!(ry.host().is_none(), "{name}: y stays on the device");
        let y = b.download_dense(&ry).unwrap().into_data();
        assert_values_close(&y, &expected, &format!("{name} resident y"));

        for layout in [Layout::RowMajor, Layout::ColMajor] {
            let d = dense(a.ncols(), 6, layout, 1);
            let expected = reference::spmm::<f64, PlusTimes>(&a, &d).unwrap();
            let rd = b.upload_dense(&d).unwrap();
            let opts = SpmmOptions::new();
            let c = b
                .spmm_with((&ra).into(), (&rd).into(), &opts, &run)
                .unwrap();
            assert_eq!(c.layout(), layout);
            assert_values_close(c.data(), expected.data(), &format!("{name} spmm"));
            let c = b.spmm_with((&a).into(), (&rd).into(), &opts, &run).unwrap();
            assert_values_close(c.data(), expected.data(), &format!("{name} spmm host A"));
            let rc = b
                .spmm_resident((&ra).into(), (&d).into(), &opts, &run)
                .unwrap();
            assert_eq!((rc.shape(), rc.layout()), ((a.nrows(), 6), layout));
            let c = b.download_dense(&rc).unwrap();
            assert_values_close(c.data(), expected.data(), &format!("{name} spmm resident"));
        }
    }
    // A resident result feeds the next product without leaving the device: y = A·(A·x).
    let a = generate::banded::<f64>(64, 5, 8);
    let x = vector(64, 1);
    let ra = b.upload(&a).unwrap();
    let ax = b
        .spmv_resident((&ra).into(), (&x).into(), &SpmvOptions::new(), &run)
        .unwrap();
    let aax = b
        .spmv_with((&ra).into(), (&ax).into(), &SpmvOptions::new(), &run)
        .unwrap();
    let expected =
        reference::spmv::<f64, PlusTimes>(&a, &reference::spmv::<f64, PlusTimes>(&a, &x).unwrap())
            .unwrap();
    assert_values_close(&aax, &expected, "A·(A·x)");
    // Progress counts a product per entry of A and column of the dense operand.
    let watched = RunControl::new();
    b.spmv_resident((&ra).into(), (&x).into(), &SpmvOptions::new(), &watched)
        .unwrap();
    assert_eq!(watched.progress().planned, a.nnz());
    assert_eq!(watched.progress().done, a.nnz());
    let watched = RunControl::new();
    let d = dense(64, 3, Layout::ColMajor, 2);
    b.spmm_with((&ra).into(), (&d).into(), &SpmmOptions::new(), &watched)
        .unwrap();
    assert_eq!(watched.progress().planned, 3 * a.nnz());
    assert_eq!(watched.progress().done, 3 * a.nnz());
}

/// Resident SpMV and SpMM return before their kernels finish (the device's stream): chains of
/// results that are dropped as the next is queued (their buffers reused), operands dropped
/// while their kernels may still run, results read by other queues and several threads at
/// once all give the host's values.
#[test]
fn queued_results_are_ordered_and_their_buffers_reused() {
    let Some(b) = backend() else { return };
    let run = RunControl::new();
    let opts = SpmvOptions::new();
    let a = generate::product_operands::<f64>(MatrixClass::PowerLaw, 3000, 7).0;
    let x = vector(a.ncols(), 5);
    let ra = b.upload(&a).unwrap();
    let spmv = |v: &[f64]| reference::spmv::<f64, PlusTimes>(&a, v).unwrap();
    // y ← A·y, twenty times, each result dropped once the next is queued.
    let mut expected = x.clone();
    let mut ry = Backend::<f64>::upload_vector(&b, &x).unwrap();
    for step in 0..20 {
        expected = spmv(&expected);
        ry = b
            .spmv_resident((&ra).into(), (&ry).into(), &opts, &run)
            .unwrap();
        if step % 7 == 3 {
            // Read by another queue (host result) and downloaded, in the middle of the chain.
            let next = b
                .spmv_with((&ra).into(), (&ry).into(), &opts, &run)
                .unwrap();
            assert_values_close(&next, &spmv(&expected), &format!("A·y at step {step}"));
            let y = b.download_dense(&ry).unwrap().into_data();
            assert_values_close(&y, &expected, &format!("y at step {step}"));
        }
    }
    let y = b.download_dense(&ry).unwrap().into_data();
    assert_values_close(&y, &expected, "y after twenty steps");

    // Operands dropped right after the call: the queued kernel still reads them.
    let a2 = generate::banded::<f64>(5000, 9, 3);
    let x2 = vector(5000, 2);
    let (ra2, rx2) = (
        b.upload(&a2).unwrap(),
        Backend::<f64>::upload_vector(&b, &x2).unwrap(),
    );
    let ry2 = b
        .spmv_resident((&ra2).into(), (&rx2).into(), &opts, &run)
        .unwrap();
    drop((ra2, rx2));
    let y2 = b.download_dense(&ry2).unwrap().into_data();
    assert_values_close(
        &y2,
        &reference::spmv::<f64, PlusTimes>(&a2, &x2).unwrap(),
        "dropped operands",
    );

    // SpMM on the stream: C ← A·C three times, in both layouts.
    let square = generate::banded::<f64>(400, 7, 11);
    let rs = b.upload(&square).unwrap();
    for layout in [Layout::RowMajor, Layout::ColMajor] {
        let d = dense(400, 5, layout, 4);
        let mut expected = d.clone();
        let mut rc = b.upload_dense(&d).unwrap();
        for _ in 0..3 {
            expected = reference::spmm::<f64, PlusTimes>(&square, &expected).unwrap();
            rc = b
                .spmm_resident((&rs).into(), (&rc).into(), &SpmmOptions::new(), &run)
                .unwrap();
        }
        let c = b.download_dense(&rc).unwrap();
        assert_eq!(c.layout(), layout);
        assert_values_close(c.data(), expected.data(), &format!("A·A·A·D {layout:?}"));
    }

    // Four threads with chains of their own on one backend (one stream).
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let (b, ra, spmv, n) = (&b, &ra, &spmv, a.ncols());
            s.spawn(move || {
                let x = vector(n, 10 + t);
                let mut expected = x.clone();
                let mut ry = Backend::<f64>::upload_vector(b, &x).unwrap();
                for _ in 0..8 {
                    expected = spmv(&expected);
                    ry = b
                        .spmv_resident(
                            ra.into(),
                            (&ry).into(),
                            &SpmvOptions::new(),
                            &RunControl::new(),
                        )
                        .unwrap();
                }
                let y = b.download_dense(&ry).unwrap().into_data();
                assert_values_close(&y, &expected, &format!("thread {t}"));
            });
        }
    });
}

#[test]
fn resident_operand_shapes_are_checked() {
    let Some(b) = backend() else { return };
    let run = RunControl::new();
    let a = generate::banded::<f64>(10, 3, 1);
    let ra = b.upload(&a).unwrap();
    let rx = Backend::<f64>::upload_vector(&b, &vector(9, 1)).unwrap();
    let err = b
        .spmv_with((&ra).into(), (&rx).into(), &SpmvOptions::new(), &run)
        .unwrap_err();
    assert!(matches!(err, Error::ShapeMismatch { .. }), "{err}");
    let wide = b.upload_dense(&dense(10, 2, Layout::RowMajor, 0)).unwrap();
    let err = b
        .spmv_with((&ra).into(), (&wide).into(), &SpmvOptions::new(), &run)
        .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    let rb = b.upload(&generate::banded::<f64>(9, 3, 1)).unwrap();
    let err = b
        .spgemm_with((&ra).into(), (&rb).into(), &SpgemmOptions::new(), &run)
        .unwrap_err();
    assert!(matches!(err, Error::ShapeMismatch { .. }), "{err}");
}

#[test]
fn resident_spgemm_equals_the_host_product() {
    let Some(b) = backend() else { return };
    let run = RunControl::new();
    let opts = SpgemmOptions::from(SpgemmAlgorithm::Esc);
    for (name, x, y) in pairs() {
        let expected = reference::spgemm::<f64, PlusTimes>(&x, &y).unwrap();
        let (rx, ry) = (b.upload(&x).unwrap(), b.upload(&y).unwrap());
        let mixes = [
            b.spgemm_with((&rx).into(), (&ry).into(), &opts, &run),
            b.spgemm_with((&x).into(), (&ry).into(), &opts, &run),
            b.spgemm_with((&rx).into(), (&y).into(), &opts, &run),
        ];
        for (k, c) in mixes.into_iter().enumerate() {
            assert_csr_close(&c.unwrap(), &expected, &format!("{name} mix {k}"));
        }
        let rc = b
            .spgemm_resident((&rx).into(), (&ry).into(), &opts, &run)
            .unwrap();
        assert!(rc.host().is_none(), "{name}: C stays on the device");
        assert_eq!(rc.shape(), expected.shape());
        assert_eq!(rc.nnz(), expected.nnz());
        assert_eq!(
            rc.pattern(),
            hetsparse_core::PatternId::of_product(rx.pattern(), ry.pattern())
        );
        assert_csr_close(&b.download(&rc).unwrap(), &expected, name);
    }
    // A chain on the device: (A·A)·A, one resident operand used twice.
    let a = generate::stencil_3d::<f64>(6, generate::Stencil::Seven, 1, 2);
    let ra = b.upload(&a).unwrap();
    let aa = b
        .spgemm_resident((&ra).into(), (&ra).into(), &opts, &run)
        .unwrap();
    let aaa = b
        .spgemm_resident((&aa).into(), (&ra).into(), &opts, &run)
        .unwrap();
    let e2 = reference::spgemm::<f64, PlusTimes>(&a, &a).unwrap();
    let e3 = reference::spgemm::<f64, PlusTimes>(&e2, &a).unwrap();
    assert_csr_close(&b.download(&aa).unwrap(), &e2, "A·A");
    assert_csr_close(&b.download(&aaa).unwrap(), &e3, "(A·A)·A");
    // Progress counts the intermediate products.
    let watched = RunControl::new();
    b.spgemm_with((&ra).into(), (&ra).into(), &opts, &watched)
        .unwrap();
    let products = hetsparse_core::analysis::total_products(&a, &a).unwrap();
    assert_eq!(watched.progress().planned, products);
    assert_eq!(watched.progress().done, products);
}

#[test]
fn a_small_budget_slices_resident_products_through_the_host() {
    let Some(b) = backend() else { return };
    let (x, y) = generate::product_operands::<f64>(MatrixClass::PowerLaw, 400, 7);
    let e = reference::spgemm::<f64, PlusTimes>(&x, &y).unwrap();
    let operands = 12 * (x.nnz() + y.nnz()) + 8 * (x.nrows() + y.nrows()) as u64 + 16;
    let small = b.clone().with_memory_budget(2 * operands + 200_000);
    let (rx, ry) = (small.upload(&x).unwrap(), small.upload(&y).unwrap());
    let run = RunControl::new();
    let opts = SpgemmOptions::new();
    // The whole expansion does not fit what is left: the product must be sliced.
    let needed = small
        .spgemm_requirement((&rx).into(), (&ry).into(), &opts)
        .unwrap();
    let pool = small.memory_pool().unwrap();
    assert!(
        needed.device_bytes() > pool.available(),
        "{needed:?} fits in {}",
        pool.available()
    );
    let c = small
        .spgemm_with((&rx).into(), (&ry).into(), &opts, &run)
        .unwrap();
    assert_csr_close(&c, &e, "sliced");
    let rc = small
        .spgemm_resident((&rx).into(), (&ry).into(), &opts, &run)
        .unwrap();
    assert_csr_close(&small.download(&rc).unwrap(), &e, "sliced, kept");
}

#[test]
fn handles_of_other_memory_spaces_are_refused() {
    let Some(b) = backend() else { return };
    let run = RunControl::new();
    let a = generate::banded::<f64>(16, 3, 1);
    let x = vector(16, 1);
    let host_a = ReferenceBackend.upload(&a).unwrap();
    let host_x = Backend::<f64>::upload_vector(&ReferenceBackend, &x).unwrap();
    let wrong = |r: Result<(), Error>, what: &str| match r {
        Err(Error::WrongDevice { .. }) => {}
        other => panic!("{what}: expected WrongDevice, got {other:?}"),
    };
    let opts = SpgemmOptions::new();
    wrong(b.download(&host_a).map(drop), "download");
    wrong(b.download_dense(&host_x).map(drop), "download_dense");
    wrong(
        b.upload_values(&host_a, a.values()).map(drop),
        "upload_values",
    );
    wrong(
        b.spgemm_with((&host_a).into(), (&a).into(), &opts, &run)
            .map(drop),
        "spgemm_with",
    );
    wrong(
        b.spgemm_resident((&a).into(), (&host_a).into(), &opts, &run)
            .map(drop),
        "spgemm_resident",
    );
    wrong(
        b.spmv_with((&a).into(), (&host_x).into(), &SpmvOptions::new(), &run)
            .map(drop),
        "spmv_with",
    );
    wrong(
        b.spmm_resident(
            (&host_a).into(),
            (&dense(16, 2, Layout::RowMajor, 0)).into(),
            &SpmmOptions::new(),
            &run,
        )
        .map(drop),
        "spmm_resident",
    );
    wrong(
        b.plan_spgemm((&host_a).into(), (&a).into(), &opts)
            .map(drop),
        "plan",
    );
    wrong(
        b.spgemm_requirement((&host_a).into(), (&a).into(), &opts)
            .map(drop),
        "requirement",
    );
    wrong(
        b.spgemm_chunks((&host_a).into(), (&a).into(), &[], &opts, &run, &mut |_| {
            Ok(())
        })
        .map(drop),
        "chunks",
    );
    // The reference backend refuses ours the same way.
    let ours = b.upload(&a).unwrap();
    wrong(
        ReferenceBackend.download(&ours).map(drop),
        "reference download",
    );

    // Clones share the context and so the handles; another context is another space.
    let clone = b.clone();
    assert_eq!(clone.memory_space(), b.memory_space());
    assert_eq!(clone.download(&ours).unwrap(), a);
    let other = b.with_own_context().unwrap();
    assert_ne!(other.memory_space(), b.memory_space());
    wrong(other.download(&ours).map(drop), "another context");
    let theirs = other.upload(&a).unwrap();
    wrong(
        b.spgemm_with((&theirs).into(), (&ours).into(), &opts, &run)
            .map(drop),
        "operand of another context",
    );
    let plan = other
        .plan_spgemm((&theirs).into(), (&theirs).into(), &opts)
        .unwrap();
    wrong(
        b.execute_spgemm(&plan, (&ours).into(), (&ours).into(), &run)
            .map(drop),
        "plan of another context",
    );
    // Handles keep their context alive past every backend of it, and are released after.
    let survivor = other.clone().upload(&a).unwrap();
    let kept = other.clone();
    drop((other, theirs, plan));
    assert_eq!(kept.download(&survivor).unwrap(), a);
    drop(kept);
    drop(survivor);
    // A handle claiming our space with storage of another backend is a bug report, not a
    // panic.
    let forged = ResidentCsr::from_host(b.memory_space(), a.clone());
    match b.download(&forged) {
        Err(Error::Internal { .. }) => {}
        other => panic!("forged handle: {other:?}"),
    }
}

#[test]
fn plans_recompute_values_into_the_planned_structure() {
    let Some(b) = backend() else { return };
    let run = RunControl::new();
    let opts = SpgemmOptions::new();
    for (name, x, y) in pairs() {
        let (rx, ry) = (b.upload(&x).unwrap(), b.upload(&y).unwrap());
        let plan = b.plan_spgemm((&rx).into(), (&ry).into(), &opts).unwrap();
        let expected = reference::spgemm::<f64, PlusTimes>(&x, &y).unwrap();
        assert_eq!(plan.c_nnz(), expected.nnz(), "{name}");
        assert_eq!(
            plan.products(),
            hetsparse_core::analysis::total_products(&x, &y).unwrap(),
            "{name}"
        );
        assert!(plan.requirement().device_bytes() > 0, "{name}");
        // New values, same patterns.
        let xv: Vec<f64> = (0..x.nnz()).map(|k| (k % 7) as f64 - 2.5).collect();
        let yv: Vec<f64> = (0..y.nnz()).map(|k| (k % 5) as f64 * 0.25 + 1.0).collect();
        let rx2 = b.upload_values(&rx, &xv).unwrap();
        let ry2 = b.upload_values(&ry, &yv).unwrap();
        let c = b
            .execute_spgemm(&plan, (&rx2).into(), (&ry2).into(), &run)
            .unwrap();
        assert_eq!(c.pattern(), plan.c_pattern(), "{name}");
        let (x2, y2) = (b.download(&rx2).unwrap(), b.download(&ry2).unwrap());
        let e2 = reference::spgemm::<f64, PlusTimes>(&x2, &y2).unwrap();
        assert_csr_close(&b.download(&c).unwrap(), &e2, name);
        // Host operands of the planned patterns work too.
        let c = b
            .execute_spgemm(&plan, (&x2).into(), (&ry2).into(), &run)
            .unwrap();
        assert_csr_close(&b.download(&c).unwrap(), &e2, &format!("{name} host A"));
    }
    // Another pattern is refused.
    let x = generate::banded::<f64>(30, 3, 1);
    let y = generate::banded::<f64>(30, 5, 1);
    let rx = b.upload(&x).unwrap();
    let plan = b.plan_spgemm((&rx).into(), (&rx).into(), &opts).unwrap();
    let ry = b.upload(&y).unwrap();
    let err = b
        .execute_spgemm(&plan, (&rx).into(), (&ry).into(), &run)
        .unwrap_err();
    assert!(matches!(err, Error::PatternMismatch { .. }), "{err}");
}

/// Products of the longest row of `x·x`.
fn longest_row_products(x: &Csr<f64>) -> u64 {
    (0..x.nrows())
        .map(|i| {
            x.row(i)
                .0
                .iter()
                .map(|&k| x.row_nnz(k as usize))
                .sum::<u64>()
        })
        .max()
        .unwrap_or(0)
}

/// Plans whose product has a few very long rows (power-law and dense rows): the numeric phase
/// gives those rows a work-group each (atomic adds where the device has them) and the others a
/// work-item each; the values equal the host product's, for resident and host operands, and
/// operands of another pattern are refused.
#[test]
fn plans_with_long_rows_equal_the_host_product() {
    let Some(b) = backend() else { return };
    let run = RunControl::new();
    let opts = SpgemmOptions::new();
    let cases = [
        ("rmat", generate::rmat::<f64>(10, 8, 3), 11),
        ("skewed", generate::skewed::<f64>(1500, 4, 3, 2, 7), 8),
    ];
    for (name, x, other_seed) in cases {
        assert!(longest_row_products(&x) > 4096, "{name}: no long row");
        let rx = b.upload(&x).unwrap();
        let plan = b.plan_spgemm((&rx).into(), (&rx).into(), &opts).unwrap();
        let xv: Vec<f64> = (0..x.nnz()).map(|k| (k % 7) as f64 * 0.5 - 1.25).collect();
        let rx2 = b.upload_values(&rx, &xv).unwrap();
        let x2 = b.download(&rx2).unwrap();
        let expected = reference::spgemm::<f64, PlusTimes>(&x2, &x2).unwrap();
        assert_eq!(plan.c_nnz(), expected.nnz(), "{name}");
        for round in 0..2 {
            let c = b
                .execute_spgemm(&plan, (&rx2).into(), (&rx2).into(), &run)
                .unwrap();
            assert_eq!(c.pattern(), plan.c_pattern(), "{name}");
            assert_csr_close(
                &b.download(&c).unwrap(),
                &expected,
                &format!("{name} round {round}"),
            );
        }
        let c = b
            .execute_spgemm(&plan, (&x2).into(), (&rx2).into(), &run)
            .unwrap();
        assert_csr_close(
            &b.download(&c).unwrap(),
            &expected,
            &format!("{name} host A"),
        );
        // A plan of host operands (rows counted on the host) executed on resident ones.
        let plan_h = b.plan_spgemm((&x).into(), (&x).into(), &opts).unwrap();
        let c = b
            .execute_spgemm(&plan_h, (&rx2).into(), (&rx2).into(), &run)
            .unwrap();
        assert_csr_close(
            &b.download(&c).unwrap(),
            &expected,
            &format!("{name} host plan"),
        );
        // f32: within a tolerance relative to the sum of the products' magnitudes.
        let xf = x2.map_scalar::<f32>();
        let x_abs = magnitudes(&x2);
        let bound = reference::spgemm::<f64, PlusTimes>(&x_abs, &x_abs).unwrap();
        let rf = b.upload(&xf).unwrap();
        let plan_f = b.plan_spgemm((&rf).into(), (&rf).into(), &opts).unwrap();
        let cf = b
            .execute_spgemm(&plan_f, (&rf).into(), (&rf).into(), &run)
            .unwrap();
        let cf = b.download(&cf).unwrap();
        assert_eq!(cf.col_indices(), expected.col_indices(), "{name} f32");
        for (k, ((x, e), m)) in cf
            .values()
            .iter()
            .zip(expected.values())
            .zip(bound.values())
            .enumerate()
        {
            assert!(
                (f64::from(*x) - e).abs() <= 1e-5 * (1.0 + m),
                "{name} f32: value {k}: {x} vs {e}"
            );
        }
        // Another pattern is refused.
        let y = match name {
            "rmat" => generate::rmat::<f64>(10, 8, other_seed),
            _ => generate::skewed::<f64>(1500, 4, 3, 2, other_seed),
        };
        let ry = b.upload(&y).unwrap();
        let err = b
            .execute_spgemm(&plan, (&rx).into(), (&ry).into(), &run)
            .unwrap_err();
        assert!(
            matches!(err, Error::PatternMismatch { .. }),
            "{name}: {err}"
        );
    }
}

/// `x` with its values' magnitudes.
fn magnitudes(x: &Csr<f64>) -> Csr<f64> {
    x.with_values(x.values().iter().map(|v| v.abs()).collect())
        .unwrap()
}

#[test]
fn the_memory_pool_accounts_for_resident_matrices_and_calls() {
    let Some(b) = backend() else { return };
    let b = b.with_memory_budget(64 << 20);
    let pool = b.memory_pool().expect("a device pool");
    assert_eq!(pool.limit(), 64 << 20);
    assert_eq!(b.info().memory_bytes, 64 << 20);
    let a = generate::banded::<f64>(200, 5, 3);
    let before = pool.reserved();
    let r = b.upload(&a).unwrap();
    let held = pool.reserved() - before;
    assert_eq!(
        held,
        hetsparse_core::backend::memory::csr_bytes(a.nrows(), a.nnz(), 8)
    );
    let d = b.upload_dense(&dense(200, 3, Layout::RowMajor, 1)).unwrap();
    assert_eq!(pool.reserved() - before, held + 200 * 3 * 8);
    drop((r, d));
    assert_eq!(pool.reserved(), before);

    // A call's peak stays within its requirement.
    let (x, y) = generate::product_operands::<f64>(MatrixClass::PowerLaw, 300, 3);
    let opts = SpgemmOptions::new();
    let requirement = b
        .spgemm_requirement((&x).into(), (&y).into(), &opts)
        .unwrap();
    pool.reset_peak();
    b.spgemm_with((&x).into(), (&y).into(), &opts, &RunControl::new())
        .unwrap();
    assert!(pool.peak() > 0);
    assert!(
        pool.peak() <= requirement.device_bytes(),
        "peak {} above the requirement {:?}",
        pool.peak(),
        requirement
    );
    assert_eq!(pool.reserved(), 0);
    // With resident operands the requirement is counted on the device, operands excluded.
    let (rx, ry) = (b.upload(&x).unwrap(), b.upload(&y).unwrap());
    let resident = b
        .spgemm_requirement((&rx).into(), (&ry).into(), &opts)
        .unwrap();
    assert_eq!(resident.operand_bytes, 0);
    assert_eq!(resident.work_bytes, requirement.work_bytes);
    assert_eq!(resident.output_bytes, requirement.output_bytes);

    // Uploads beyond the budget are out-of-memory errors, not allocations.
    let tiny = b.clone().with_memory_budget(1000);
    match tiny.upload(&a) {
        Err(Error::OutOfMemory { needed_bytes, .. }) => assert!(needed_bytes > 1000),
        other => panic!("expected OutOfMemory, got {other:?}"),
    }
}

#[test]
fn chunks_are_timed_on_the_device_and_stop_when_cancelled() {
    let Some(b) = backend() else { return };
    let (x, y) = generate::product_operands::<f64>(MatrixClass::Uniform, 200, 4);
    let e = reference::spgemm::<f64, PlusTimes>(&x, &y).unwrap();
    let chunks = vec![
        ProductChunk {
            rows: 0..100,
            cols: 0..y.ncols() / 2,
        },
        ProductChunk {
            rows: 100..x.nrows(),
            cols: y.ncols() / 2..y.ncols(),
        },
        ProductChunk {
            rows: 50..50,
            cols: 0..y.ncols(),
        },
    ];
    let (rx, ry) = (b.upload(&x).unwrap(), b.upload(&y).unwrap());
    let opts = SpgemmOptions::new();
    let products = hetsparse_core::analysis::total_products(&x, &y).unwrap();
    for (a_resident, b_resident) in [(false, false), (true, false), (false, true), (true, true)] {
        let mut got: Vec<ChunkProduct<f64>> = Vec::new();
        let a = if a_resident {
            (&rx).into()
        } else {
            (&x).into()
        };
        let bb = if b_resident {
            (&ry).into()
        } else {
            (&y).into()
        };
        let run = RunControl::new();
        b.spgemm_chunks(a, bb, &chunks, &opts, &run, &mut |p| {
            got.push(p);
            Ok(())
        })
        .unwrap();
        assert_eq!(got.len(), chunks.len());
        let progress = run.progress();
        assert_eq!(progress.done, progress.planned);
        assert!(
            progress.done > 0 && progress.done <= products,
            "{progress:?}"
        );
        for p in &got {
            let expected = e
                .rows(p.chunk.rows.clone())
                .unwrap()
                .column_panel(p.chunk.cols.clone())
                .unwrap();
            let what = format!("chunk {} ({a_resident}, {b_resident})", p.index);
            assert_csr_close(&p.product, &expected, &what);
            if expected.nnz() > 0 {
                let t = p.timing;
                assert!(t.kernel > std::time::Duration::ZERO, "{what}: {t:?}");
                assert!(
                    t.d2h_bytes > 0 && t.d2h > std::time::Duration::ZERO,
                    "{what}: {t:?}"
                );
                // Host operands' parts are copied for the chunk; resident ones are cut there.
                if !(a_resident && b_resident) {
                    assert!(t.h2d_bytes > 0, "{what}: {t:?}");
                }
                assert!(t.wall >= t.kernel, "{what}: {t:?}");
            }
        }
    }
    // Resident operands whose chunk does not fit what the budget leaves: the chunk goes through
    // the host path, cut into column slices.
    let operands = 12 * (x.nnz() + y.nnz()) + 8 * (x.nrows() + y.nrows()) as u64 + 16;
    let need = b
        .spgemm_requirement((&rx).into(), (&ry).into(), &opts)
        .unwrap();
    let expansion = need.work_bytes + need.output_bytes;
    // The resident operands, their parts, and half the expansion: the chunk does not fit on
    // the device; the host path (operands copied again) cuts B into slices.
    let small = b.clone().with_memory_budget(3 * operands + expansion / 2);
    let (sx, sy) = (small.upload(&x).unwrap(), small.upload(&y).unwrap());
    // What the device has left beside the resident operands and the parts cut for the chunk.
    let left = operands + expansion / 2;
    assert!(
        left < expansion,
        "{operands} bytes of operands, {expansion} of expansion"
    );
    let whole = [ProductChunk {
        rows: 0..x.nrows(),
        cols: 0..y.ncols(),
    }];
    let mut got = Vec::new();
    small
        .spgemm_chunks(
            (&sx).into(),
            (&sy).into(),
            &whole,
            &opts,
            &RunControl::new(),
            &mut |p| {
                got.push(p.product);
                Ok(())
            },
        )
        .unwrap();
    assert_csr_close(&got[0], &e, "chunk through the host");
    // Cancelled between chunks.
    let run = RunControl::new();
    let mut seen = 0;
    let r = b.spgemm_chunks((&x).into(), (&y).into(), &chunks, &opts, &run, &mut |_| {
        seen += 1;
        run.cancel();
        Ok(())
    });
    assert!(matches!(r, Err(Error::Cancelled)), "{r:?}");
    assert_eq!(seen, 1);
    // A failure inside a chunk names it.
    let tiny = b.clone().with_memory_budget(64);
    let r = tiny.spgemm_chunks(
        (&x).into(),
        (&y).into(),
        &chunks,
        &opts,
        &RunControl::new(),
        &mut |_| Ok(()),
    );
    match r {
        Err(Error::InChunk { index: 0, source }) => {
            assert!(matches!(*source, Error::OutOfMemory { .. }), "{source}")
        }
        other => panic!("expected an error in chunk 0, got {other:?}"),
    }
    // A cancelled run does not start.
    let run = RunControl::new();
    run.cancel();
    let r = b.spgemm_with((&x).into(), (&y).into(), &opts, &run);
    assert!(matches!(r, Err(Error::Cancelled)), "{r:?}");
}
