//! Known answers of masked semiring products: triangle counting as `C⟨L⟩ = L · L` over
//! `plus_pair` (Sandia's method: L the strictly lower triangle of the adjacency matrix; each
//! triangle i > j > k lands once, on C(i, j) through k).

use hetsparse_core::{Backend, Coo, Csr, Mask, RunControl, SemiringKind, SpgemmOptions};
use hetsparse_cpu::CpuBackend;

/// Zachary's karate club (34 members, 78 friendships), as W. W. Zachary published it (1977)
/// and networkx's `karate_club_graph` numbers it from 0: each member's friends of higher
/// number.
const KARATE: [(u32, &[u32]); 26] = [
    (0, &[1, 2, 3, 4, 5, 6, 7, 8, 10, 11, 12, 13, 17, 19, 21, 31]),
    (1, &[2, 3, 7, 13, 17, 19, 21, 30]),
    (2, &[3, 7, 8, 9, 13, 27, 28, 32]),
    (3, &[7, 12, 13]),
    (4, &[6, 10]),
    (5, &[6, 10, 16]),
    (6, &[16]),
    (8, &[30, 32, 33]),
    (9, &[33]),
    (13, &[33]),
    (14, &[32, 33]),
    (15, &[32, 33]),
    (18, &[32, 33]),
    (19, &[33]),
    (20, &[32, 33]),
    (22, &[32, 33]),
    (23, &[25, 27, 29, 32, 33]),
    (24, &[25, 27, 31]),
    (25, &[31]),
    (26, &[29, 33]),
    (27, &[33]),
    (28, &[31, 33]),
    (29, &[32, 33]),
    (30, &[32, 33]),
    (31, &[32, 33]),
    (32, &[33]),
];

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
    let edges: Vec<(u32, u32)> = KARATE
        .iter()
        .flat_map(|&(u, friends)| friends.iter().map(move |&v| (u, v)))
        .collect();
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
