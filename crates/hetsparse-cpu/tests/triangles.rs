//! Known answers of masked semiring products: triangle counting as `C⟨L⟩ = L · L` over
//! `plus_pair` (Sandia's method: L the strictly lower triangle of the adjacency matrix; each
//! triangle i > j > k lands once, on C(i, j) through k).

use hetsparse_core::{Backend, Coo, Csr, Mask, RunControl, SemiringKind, SpgemmOptions};
use hetsparse_cpu::CpuBackend;

/// L of an undirected graph of `n` vertices: an entry (i, j) for each edge with i > j. The
/// values are irrelevant to `plus_pair`; they are made negative and some zero, so that a
/// product over them would give another count.
fn lower(n: usize, edges: &[(u32, u32)]) -> Csr<f64> {
    let mut coo = Coo::new(n, n).unwrap();
    for (e, &(u, v)) in edges.iter().enumerate() {
        let (i, j) = if u > v { (u, v) } else { (v, u) };
        let value = if e % 5 == 0 { 0.0 } else { -1.5 };
        coo.try_push(i as usize, j as usize, value).unwrap();
    }
    coo.to_csr().unwrap()
}

/// Triangles of the graph whose L this is, on `cpu`.
fn triangles(cpu: &CpuBackend, l: &Csr<f64>) -> f64 {
    let options = SpgemmOptions::new()
        .with_semiring(SemiringKind::PlusPair)
        .with_mask(Mask::structural(l));
    let c = cpu
        .spgemm_with(l.into(), l.into(), &options, &RunControl::new())
        .unwrap();
    c.values().iter().sum()
}

#[test]
fn karate_club_has_45_triangles() {
    let edges = hetsparse_core::generate::karate_club();
    assert_eq!(edges.len(), 78);
    let cpu = CpuBackend::with_threads(2).unwrap();
    assert_eq!(triangles(&cpu, &lower(34, &edges)), 45.0);
}

#[test]
fn complete_graphs_have_n_choose_3_triangles() {
    let cpu = CpuBackend::with_threads(2).unwrap();
    for n in [3u32, 4, 7, 20] {
        let edges: Vec<(u32, u32)> = (0..n).flat_map(|i| (0..i).map(move |j| (i, j))).collect();
        let want = f64::from(n * (n - 1) * (n - 2) / 6);
        assert_eq!(triangles(&cpu, &lower(n as usize, &edges)), want, "K{n}");
    }
    // A 4-cycle has none.
    let square = lower(4, &[(0, 1), (1, 2), (2, 3), (3, 0)]);
    assert_eq!(triangles(&cpu, &square), 0.0);
}
