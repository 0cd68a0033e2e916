//! Known answers of masked semiring products on the OpenCL device: triangle counting as
//! `C⟨L⟩ = L · L` over `plus_pair` (Sandia's method: L the strictly lower triangle of the
//! adjacency matrix; each triangle i > j > k lands once, on C(i, j) through k), by the masked
//! kernel from host and from resident operands; and the work the masked kernel reports, as
//! the CPU backend counts it.

mod common;

use hetsparse_core::{
    Backend, Coo, Csr, Mask, MaskedWork, RunControl, SemiringKind, SpgemmOptions,
};
use hetsparse_opencl::OpenClBackend;

/// L of an undirected graph of `n` vertices: an entry (i, j) for each edge with i > j. The
/// values are irrelevant to `plus_pair`; they are made negative and some zero, so that a
/// product over them would give another count.
fn lower(n: usize, edges: &[(u32, u32)]) -> Csr<f32> {
    let mut coo = Coo::new(n, n).unwrap();
    for (e, &(u, v)) in edges.iter().enumerate() {
        let (i, j) = if u > v { (u, v) } else { (v, u) };
        let value = if e % 5 == 0 { 0.0 } else { -1.5 };
        coo.try_push(i as usize, j as usize, value).unwrap();
    }
    coo.to_csr().unwrap()
}

/// Triangles of the graph whose L this is, from host operands and from resident ones (which
/// must agree).
fn triangles(b: &OpenClBackend, l: &Csr<f32>) -> f32 {
    let options = SpgemmOptions::new()
        .with_semiring(SemiringKind::PlusPair)
        .with_mask(Mask::structural(l));
    let run = RunControl::new();
    let c = b.spgemm_with(l.into(), l.into(), &options, &run).unwrap();
    let rl = b.upload(l).unwrap();
    let resident = b
        .spgemm_resident((&rl).into(), (&rl).into(), &options, &run)
        .and_then(|r| b.download(&r))
        .unwrap();
    assert_eq!(c, resident, "host and resident operands");
    c.values().iter().sum()
}

#[test]
fn karate_club_has_45_triangles() {
    let Some(b) = common::backend("triangles") else {
        return;
    };
    let edges = hetsparse_core::generate::karate_club();
    assert_eq!(triangles(&b, &lower(34, &edges)), 45.0);
}

#[test]
fn complete_graphs_have_n_choose_3_triangles() {
    let Some(b) = common::backend("triangles") else {
        return;
    };
    for n in [3u32, 4, 7, 20] {
        let edges: Vec<(u32, u32)> = (0..n).flat_map(|i| (0..i).map(move |j| (i, j))).collect();
        let want = (n * (n - 1) * (n - 2) / 6) as f32;
        assert_eq!(triangles(&b, &lower(n as usize, &edges)), want, "K{n}");
    }
    // A 4-cycle has none.
    let square = lower(4, &[(0, 1), (1, 2), (2, 3), (3, 0)]);
    assert_eq!(triangles(&b, &square), 0.0);
}

/// What `C⟨M⟩ = L · L` multiplies by definition: every product L(i, k) · L(k, j), and those of
/// them whose column j row i of the mask M holds.
fn work_by_definition(l: &Csr<f32>, m: &Csr<f32>) -> MaskedWork {
    let mut work = MaskedWork::default();
    for i in 0..l.nrows() {
        let mask_row = m.row(i).0;
        for &k in l.row(i).0 {
            for j in l.row(k as usize).0 {
                work.unmasked_multiply_adds += 1;
                work.multiply_adds += u64::from(mask_row.contains(j));
            }
        }
    }
    work
}

/// The masked kernel reports the multiply-adds it did and those of the unmasked product,
/// counted as the CPU backend counts them (equal to theirs and to the definition), from host
/// and from resident operands; a complemented mask (ESC, every product multiplied) reports
/// none.
#[test]
fn masked_work_is_counted_as_on_the_cpu() {
    let Some(b) = common::backend("triangles") else {
        return;
    };
    let cpu = hetsparse_cpu::CpuBackend::new().unwrap();
    let k20: Vec<(u32, u32)> = (0..20u32)
        .flat_map(|i| (0..i).map(move |j| (i, j)))
        .collect();
    // A graph with isolated vertices too: rows of L, and of its mask, that are empty.
    let sparse: Vec<(u32, u32)> = (0..60u32)
        .filter(|v| v % 7 != 3)
        .map(|v| (v, (v * 17 + 5) % 60))
        .chain(
            (0..60u32)
                .filter(|v| v % 5 == 0)
                .map(|v| (v, (v * 3 + 1) % 60)),
        )
        .filter(|(u, v)| u != v)
        .collect();
    let graphs = [
        (
            "karate club",
            lower(34, &hetsparse_core::generate::karate_club()),
        ),
        ("K20", lower(20, &k20)),
        ("sparse", lower(60, &sparse)),
    ];
    for (graph, l) in &graphs {
        // L itself, and a mask of other rows than A's: every third row of L emptied (rows
        // with products but nothing admitted) and every fourth entry left out.
        let mut other = Coo::new(l.nrows(), l.ncols()).unwrap();
        for i in (0..l.nrows()).filter(|i| i % 3 != 0) {
            for (e, &j) in l.row(i).0.iter().enumerate() {
                if e % 4 != 3 {
                    other.try_push(i, j as usize, 1.0).unwrap();
                }
            }
        }
        let other = other.to_csr().unwrap();
        for (m, name) in [
            (l, format!("{graph}, L")),
            (&other, format!("{graph}, other")),
        ] {
            check_masked_work(&b, &cpu, l, m, &name);
        }
        // Every product of a complete graph's L · L lands in L (i > k > j); elsewhere the
        // mask saves some.
        let all = work_by_definition(l, l);
        assert_eq!(
            all.multiply_adds == all.unmasked_multiply_adds,
            *graph == "K20",
            "{graph}: {all:?}"
        );
    }
}

/// `C⟨M⟩ = L · L` over `plus_pair` on the device and on the CPU: the same C, and the same work
/// reported (that of the definition), from host and resident operands and to a parent run; a
/// complemented mask reports none.
fn check_masked_work(
    b: &OpenClBackend,
    cpu: &hetsparse_cpu::CpuBackend,
    l: &Csr<f32>,
    m: &Csr<f32>,
    name: &str,
) {
    let options = SpgemmOptions::new()
        .with_semiring(SemiringKind::PlusPair)
        .with_mask(Mask::structural(m));
    let cpu_run = RunControl::new();
    let want_c = cpu
        .spgemm_with(l.into(), l.into(), &options, &cpu_run)
        .unwrap();
    let want = cpu_run.masked_work();
    assert_eq!(
        want,
        work_by_definition(l, m),
        "{name}: the CPU backend's count"
    );
    let run = RunControl::new();
    let c = b.spgemm_with(l.into(), l.into(), &options, &run).unwrap();
    assert_eq!(c, want_c, "{name}");
    assert_eq!(run.masked_work(), want, "{name}: host operands");
    let rl = b.upload(l).unwrap();
    let run = RunControl::new();
    let resident = b
        .spgemm_resident((&rl).into(), (&rl).into(), &options, &run)
        .and_then(|r| b.download(&r))
        .unwrap();
    assert_eq!(resident, want_c, "{name}");
    assert_eq!(run.masked_work(), want, "{name}: resident operands");
    // A child run's work reaches its parent, as the CPU backend's chunks' does.
    let parent = RunControl::new();
    b.spgemm_with(l.into(), l.into(), &options, &parent.child())
        .unwrap();
    assert_eq!(parent.masked_work(), want, "{name}: parent run");
    let complemented = SpgemmOptions::new()
        .with_semiring(SemiringKind::PlusPair)
        .with_mask(Mask::structural(m).complemented());
    let run = RunControl::new();
    b.spgemm_with(l.into(), l.into(), &complemented, &run)
        .unwrap();
    assert_eq!(
        run.masked_work(),
        MaskedWork::default(),
        "{name}: complemented"
    );
}
