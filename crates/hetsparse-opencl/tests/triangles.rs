//! Known answers of masked semiring products on the OpenCL device: triangle counting as
//! `C⟨L⟩ = L · L` over `plus_pair` (Sandia's method: L the strictly lower triangle of the
//! adjacency matrix; each triangle i > j > k lands once, on C(i, j) through k), by the masked
//! kernel from host and from resident operands.

mod common;

use hetsparse_core::{Backend, Coo, Csr, Mask, RunControl, SemiringKind, SpgemmOptions};
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
