//! ESC specifics beyond the conformance suite: column slicing under a small memory budget,
//! interpolation and binary search agreeing, large expansions that need the global merge
//! passes, and device choice errors.

mod common;

use hetsparse_core::format::{Bsr, Csr};
use hetsparse_core::generate::{self, MatrixClass};
use hetsparse_core::{reference, Backend, Device, DeviceKind, Error, PlusTimes, SpgemmAlgorithm};
use hetsparse_opencl::{list_devices, ExpansionSearch, OpenClBackend};

/// The backend the suite uses, or `None` (with a note) when there is no OpenCL device and the
/// device is not required.
fn backend() -> Option<OpenClBackend> {
    common::backend("opencl esc tests")
}

fn assert_same_structure(c: &Csr<f64>, e: &Csr<f64>, what: &str) {
    assert_eq!(c.shape(), e.shape(), "{what}: shape");
    assert_eq!(c.row_offsets(), e.row_offsets(), "{what}: row offsets");
    assert_eq!(c.col_indices(), e.col_indices(), "{what}: columns");
    for (k, (x, y)) in c.values().iter().zip(e.values()).enumerate() {
        assert!(
            (x - y).abs() <= 1e-9 * (1.0 + y.abs()),
            "{what}: value {k}: {x} vs {y}"
        );
    }
}

#[test]
fn a_small_budget_cuts_b_into_column_slices() {
    let Some(b) = backend() else { return };
    let (x, y) = generate::product_operands::<f64>(MatrixClass::PowerLaw, 400, 7);
    let e = reference::spgemm::<f64, PlusTimes>(&x, &y).unwrap();
    let whole = b.spgemm(&x, &y, SpgemmAlgorithm::Esc).unwrap();
    assert_same_structure(&whole, &e, "whole");
    // Operands take some KiB; a budget a little above leaves room for a few hundred products
    // per slice, so the product is assembled from many slices.
    let operands = 12 * (x.nnz() + y.nnz()) + 8 * (x.nrows() + y.nrows()) as u64 + 16;
    let sliced = b.clone().with_memory_budget(operands + 200_000);
    let c = sliced.spgemm(&x, &y, SpgemmAlgorithm::Esc).unwrap();
    assert_same_structure(&c, &e, "sliced");
    assert_eq!(sliced.info().memory_bytes, operands + 200_000);
}

#[test]
fn a_budget_too_small_for_one_column_is_an_out_of_memory_error() {
    let Some(b) = backend() else { return };
    let x = generate::banded::<f64>(64, 5, 1);
    // Room for the operand (one copy: A·A) and a few products, not for one column's.
    let operand = 12 * x.nnz() + 8 * (x.nrows() as u64 + 1);
    let r = b
        .with_memory_budget(operand + 500)
        .spgemm(&x, &x, SpgemmAlgorithm::Esc);
    match r {
        Err(
            e @ Error::OutOfMemory {
                needed_bytes,
                available_bytes,
                ..
            },
        ) => {
            assert!(e.to_string().contains("column"), "{e}");
            // What the budget has left once the operand is uploaded: a real number, not 0.
            assert!(
                available_bytes > 0 && available_bytes <= 500 && needed_bytes > available_bytes,
                "{e}"
            );
            assert!(
                e.to_string()
                    .contains(&format!("{available_bytes} available")),
                "{e}"
            );
        }
        other => panic!("expected OutOfMemory, got {other:?}"),
    }
}

#[test]
fn interpolation_and_binary_search_give_the_same_product() {
    let Some(b) = backend() else { return };
    for class in [
        MatrixClass::PowerLaw,
        MatrixClass::Skewed,
        MatrixClass::Road,
    ] {
        let (x, y) = generate::product_operands::<f64>(class, 500, 11);
        let i = b
            .clone()
            .with_expansion_search(ExpansionSearch::Interpolation)
            .spgemm(&x, &y, SpgemmAlgorithm::Esc)
            .unwrap();
        let s = b
            .clone()
            .with_expansion_search(ExpansionSearch::Binary)
            .spgemm(&x, &y, SpgemmAlgorithm::Esc)
            .unwrap();
        // Same expansion, same sort, same summation order: bit for bit.
        assert_eq!(i, s, "{}", class.name());
    }
}

#[test]
fn long_rows_cross_many_sort_tiles() {
    let Some(b) = backend() else { return };
    // A dense row times a dense-ish B: one row of C gathers tens of thousands of products, so
    // its run spans many local-memory tiles and every global merge pass.
    let n = 300;
    let mut rows = vec![0u64];
    let (mut cols, mut vals) = (Vec::new(), Vec::new());
    for i in 0..n {
        let stride = if i == 0 { 1 } else { 7 + i % 5 };
        for j in (i % 3..n).step_by(stride) {
            cols.push(j as u32);
            vals.push(((i * 31 + j * 17) % 13) as f64 - 6.0);
        }
        rows.push(cols.len() as u64);
    }
    let x = Csr::try_new(n, n, rows, cols, vals).unwrap();
    let e = reference::spgemm::<f64, PlusTimes>(&x, &x).unwrap();
    let c = b.spgemm(&x, &x, SpgemmAlgorithm::Esc).unwrap();
    assert_same_structure(&c, &e, "long rows");
}

#[test]
fn block_products_match_the_scalar_product() {
    let Some(b) = backend() else { return };
    let x = generate::stencil_3d::<f64>(5, generate::Stencil::TwentySeven, 2, 3);
    let bx = Bsr::from_csr(&x, (2, 2)).unwrap();
    let c = b.bsr_spgemm(&bx, &bx).unwrap();
    let e =
        reference::spgemm::<f64, PlusTimes>(&bx.to_csr().unwrap(), &bx.to_csr().unwrap()).unwrap();
    let got = c.to_csr().unwrap();
    for i in 0..e.nrows() {
        let (ec, ev) = e.row(i);
        for (j, v) in ec.iter().zip(ev) {
            let g = got.get(i, *j as usize).unwrap_or(0.0);
            assert!(
                (g - v).abs() <= 1e-9 * (1.0 + v.abs()),
                "C[{i},{j}] {g} vs {v}"
            );
        }
    }
    // Block products over the budget (cut into bands of A's block rows) agree with whole ones.
    let operands =
        2 * (bx.values().len() * 8 + bx.col_indices().len() * 4 + 8 * bx.block_rows() + 8);
    let sliced = b
        .with_memory_budget(operands as u64 + 120_000)
        .bsr_spgemm(&bx, &bx)
        .unwrap();
    assert_eq!(sliced, c);
}

#[test]
fn devices_are_listed_and_named_choices_fail_clearly() {
    let Some(b) = backend() else { return };
    let devices = list_devices().unwrap();
    assert!(devices.iter().any(|d| d == b.device()), "{devices:?}");
    let err = OpenClBackend::with_device_name("no such device 1f2e3d").unwrap_err();
    assert!(matches!(err, Error::NoDevice { .. }), "{err}");
    assert!(err.to_string().contains(&b.device().name), "{err}");
    assert!(matches!(
        OpenClBackend::with_device_name("  "),
        Err(Error::InvalidArgument(_))
    ));
    let by_kind = OpenClBackend::with_device_kind(b.device().kind).unwrap();
    assert_eq!(by_kind.device().kind, b.device().kind);
    if !devices.iter().any(|d| d.kind == DeviceKind::Accelerator) {
        assert!(matches!(
            OpenClBackend::with_device_kind(DeviceKind::Accelerator),
            Err(Error::NoDevice { .. })
        ));
    }
    // Capabilities list f64 exactly when the device has cl_khr_fp64.
    let caps = Device::capabilities(&b);
    let f64_esc = caps.supports(
        hetsparse_core::Operation::Spgemm(SpgemmAlgorithm::Esc),
        hetsparse_core::ScalarType::F64,
    );
    assert_eq!(f64_esc, b.device().fp64);
}

#[test]
fn transfers_larger_than_the_staging_buffer_arrive_whole() {
    let Some(b) = backend() else { return };
    // About 3.8 million products and entries: 31 MB of f64 values and 15 MB of indices come
    // back, more than the 32 MiB of staging slots, so the ring of slots wraps around.
    let x = generate::uniform::<f64>(60_000, 60_000, 8, 5);
    let e = reference::spgemm::<f64, PlusTimes>(&x, &x).unwrap();
    let c = b.spgemm(&x, &x, SpgemmAlgorithm::Esc).unwrap();
    assert!(e.nnz() > 3_500_000, "{}", e.nnz());
    assert_same_structure(&c, &e, "large");
    // The other way: 3.2 million entries of A (38 MB of values and indices) go to the device.
    let a = generate::uniform::<f64>(400_000, 400_000, 8, 6);
    let v: Vec<f64> = (0..a.ncols()).map(|i| (i % 17) as f64 - 8.0).collect();
    let y = b.spmv(hetsparse_core::SparseRef::Csr(&a), &v).unwrap();
    let ey = reference::spmv::<f64, PlusTimes>(&a, &v).unwrap();
    for (i, (p, q)) in y.iter().zip(&ey).enumerate() {
        assert!(
            (p - q).abs() <= 1e-9 * (1.0 + q.abs()),
            "y[{i}]: {p} vs {q}"
        );
    }
}

#[test]
fn rows_of_many_lengths_cross_run_boundaries_at_every_width() {
    let Some(b) = backend() else { return };
    // Rows of C with 1 to about 10 000 products, in an order that puts short and long rows on
    // tile and run boundaries of every width: the sort needs pair passes below the longest row
    // and then its final pass across every boundary.
    let n = 3000usize;
    let mut rows = vec![0u64];
    let (mut cols, mut vals) = (Vec::new(), Vec::new());
    for i in 0..n {
        let len = if i % 97 == 5 {
            300 + i % 211
        } else {
            1 + (i * 7919) % 40
        };
        let start = (i * 104_729) % n;
        let mut row: Vec<u32> = (0..len).map(|k| ((start + k * 37) % n) as u32).collect();
        row.sort_unstable();
        row.dedup();
        for &j in &row {
            cols.push(j);
            vals.push(((i * 13 + j as usize * 7) % 11) as f64 - 5.0);
        }
        rows.push(cols.len() as u64);
    }
    let x = Csr::try_new(n, n, rows, cols, vals).unwrap();
    let e = reference::spgemm::<f64, PlusTimes>(&x, &x).unwrap();
    let c = b.spgemm(&x, &x, SpgemmAlgorithm::Esc).unwrap();
    assert_same_structure(&c, &e, "many lengths");
    // The same through two distinct operands (uploaded separately).
    let y = x.clone();
    let c2 = b.spgemm(&x, &y, SpgemmAlgorithm::Esc).unwrap();
    assert_eq!(c, c2);
}

#[test]
fn chunks_spanning_many_entries_of_a_expand_correctly() {
    let Some(b) = backend() else { return };
    // B with one entry in a third of its rows and none in the rest: a work-group's chunk of
    // products then spans more entries of A than it stages in local memory, and many entries
    // of A make no product at all.
    let n = 20_000;
    let x = generate::uniform::<f64>(n, n, 8, 9);
    let mut rows = vec![0u64];
    let (mut cols, mut vals) = (Vec::new(), Vec::new());
    for i in 0..n {
        if i % 3 == 0 {
            cols.push(((i * 7) % n) as u32);
            vals.push(1.0 + (i % 5) as f64);
        }
        rows.push(cols.len() as u64);
    }
    let y = Csr::try_new(n, n, rows, cols, vals).unwrap();
    let e = reference::spgemm::<f64, PlusTimes>(&x, &y).unwrap();
    for search in [ExpansionSearch::Interpolation, ExpansionSearch::Binary] {
        let c = b
            .clone()
            .with_expansion_search(search)
            .spgemm(&x, &y, SpgemmAlgorithm::Esc)
            .unwrap();
        assert_same_structure(&c, &e, &format!("sparse B, {search:?}"));
    }
}

#[test]
fn reused_device_buffers_do_not_leak_between_products() {
    let Some(b) = backend() else { return };
    // Products in turn on one backend: buffers come back from the pool holding the previous
    // product's data, which must not show in the next one.
    let (x, _) = generate::product_operands::<f64>(MatrixClass::Road, 4000, 3);
    let (y, _) = generate::product_operands::<f64>(MatrixClass::PowerLaw, 4000, 4);
    let ex = reference::spgemm::<f64, PlusTimes>(&x, &x).unwrap();
    let ey = reference::spgemm::<f64, PlusTimes>(&y, &y).unwrap();
    for round in 0..3 {
        let cx = b.spgemm(&x, &x, SpgemmAlgorithm::Esc).unwrap();
        assert_same_structure(&cx, &ex, &format!("road, round {round}"));
        let cy = b.spgemm(&y, &y, SpgemmAlgorithm::Esc).unwrap();
        assert_same_structure(&cy, &ey, &format!("power law, round {round}"));
    }
}
