//! Graph algorithms written with semirings and masks, GraphBLAS style: breadth-first search
//! (levels and parents, in `i64`), single-source shortest paths (`f64` weights) and triangle
//! counting (`u64` counts, by Sandia's `L·L` and by SandiaDot's `L·Uᵀ`).
//!
//! `cargo run -p hetsparse --example graph_algorithms` runs them on generated graphs and prints
//! what they found; `cargo test -p hetsparse --example graph_algorithms` checks each against
//! plain code written without matrices (a queue, Dijkstra, a triple loop) and against the
//! rules LAGraph checks its own results with.

use hetsparse::{
    vector::write_back_vector, AccumulateOp, Context, Csr, Mask, MaskedWork, Result, RunControl,
    SemiringKind, SparseVector, SpgemmOptions, VectorProductOptions,
};

/// Levels (hops from the source) and parents of every vertex a breadth-first search from
/// `source` reaches over the edges `k → j` of `a` (an entry `a(k, j)`).
pub struct Bfs {
    /// `level(v)`: 0 for the source.
    pub level: SparseVector<i64>,
    /// `parent(v)`: a vertex one level up with an edge to `v`; the source is its own parent.
    pub parent: SparseVector<i64>,
}

/// Breadth-first search as LAGraph writes it: each step pushes the frontier along the edges,
/// `frontier⟨¬parent, replace⟩ = frontier any.secondi A`, which gives every newly reached
/// vertex one frontier vertex with an edge to it (`secondi`: the inner index, the vertex the
/// edge comes from); the complemented structural mask keeps vertices already reached out.
/// Only `a`'s pattern counts.
pub fn bfs(ctx: &Context<i64>, a: &Csr<i64>, source: u32) -> Result<Bfs> {
    let n = a.nrows();
    let mut parent = SparseVector::try_new(n, vec![source], vec![i64::from(source)])?;
    let mut level = SparseVector::try_new(n, vec![source], vec![0])?;
    let mut frontier = parent.clone();
    let mut depth = 0;
    while frontier.nnz() > 0 {
        depth += 1;
        let step = VectorProductOptions::new()
            .with_semiring(SemiringKind::AnySecondI)
            .with_mask(parent.structural_mask().complemented().replacing());
        frontier = ctx.vxm(&frontier, a, &step)?;
        // parent⟨frontier⟩ = frontier; level⟨frontier⟩ = depth.
        let reached = frontier.structural_mask();
        parent = write_back_vector(&parent, &frontier, Some(&reached), None)?;
        let at_depth = SparseVector::try_new(
            n,
            frontier.indices().to_vec(),
            vec![depth; frontier.indices().len()],
        )?;
        level = write_back_vector(&level, &at_depth, Some(&reached), None)?;
    }
    Ok(Bfs { level, parent })
}

/// Distances from `source` along edges weighted by `a`'s values (non-negative), by
/// Bellman-Ford over `min_plus`: `d = min(d, d min.+ A)` until nothing changes.
pub fn shortest_paths(ctx: &Context<f64>, a: &Csr<f64>, source: u32) -> Result<SparseVector<f64>> {
    let n = a.nrows();
    let mut d = SparseVector::try_new(n, vec![source], vec![0.0])?;
    let relax = VectorProductOptions::new()
        .with_semiring(SemiringKind::MinPlus)
        .with_accumulator(AccumulateOp::Min);
    // A shortest path has fewer than n edges: n rounds bound the loop.
    for _ in 0..n {
        let before = d.clone();
        let current = d.clone();
        ctx.vxm_into(&mut d, &current, a, &relax)?;
        if d == before {
            break;
        }
    }
    Ok(d)
}

/// How [`triangles`] multiplies.
#[derive(Clone, Copy, Debug)]
pub enum TriangleMethod {
    /// Sandia: `C⟨L⟩ = L plus.pair L`, the paths `i → k → j` with `i > k > j` that close on
    /// an edge `(i, j)`.
    SandiaLL,
    /// SandiaDot: `C⟨L⟩ = L plus.pair Uᵀ`, the common neighbours `k < j` of each edge
    /// `(i, j)` with `j < i`, as dot products of rows of L.
    SandiaDot,
}

/// Triangles of an undirected graph (only `adjacency`'s pattern counts): with L and U its
/// strictly lower and upper triangles, each method counts every triangle once in the sum of
/// C, and the mask L means only entries on edges are computed: the work returned says how
/// many multiply-adds that took, of the unmasked product's (where the device counts them).
/// Counted in `u64`, whose sums are exact.
pub fn triangles(
    ctx: &Context<u64>,
    adjacency: &Csr<u64>,
    method: TriangleMethod,
) -> Result<(u64, MaskedWork)> {
    let (l, u) = triangles_of(adjacency)?;
    let options = SpgemmOptions::new()
        .with_semiring(SemiringKind::PlusPair)
        .with_mask(Mask::structural(&l));
    let right = match method {
        TriangleMethod::SandiaLL => l.clone(),
        TriangleMethod::SandiaDot => u.transpose()?,
    };
    let run = RunControl::unwatched();
    let c = ctx.spgemm_with((&l).into(), (&right).into(), &options, &run)?;
    Ok((c.values().iter().sum(), run.masked_work()))
}

/// The strictly lower and strictly upper triangles of `a`.
fn triangles_of<T: hetsparse::Scalar>(a: &Csr<T>) -> Result<(Csr<T>, Csr<T>)> {
    let part = |keep: fn(usize, u32) -> bool| -> Result<Csr<T>> {
        let mut coo = hetsparse::Coo::new(a.nrows(), a.ncols())?;
        for i in 0..a.nrows() {
            let (cols, vals) = a.row(i);
            for (&j, &v) in cols.iter().zip(vals) {
                if keep(i, j) {
                    coo.try_push(i, j as usize, v)?;
                }
            }
        }
        coo.to_csr()
    };
    Ok((
        part(|i, j| (j as usize) < i)?,
        part(|i, j| (j as usize) > i)?,
    ))
}

/// An undirected graph: R-MAT's edges both ways, without self-loops, weights in `[0.1, 1]`.
pub fn undirected(scale: u32, seed: u64) -> Result<Csr<f64>> {
    let a = hetsparse::generate::rmat::<f64>(scale, 6, seed);
    let mut coo = hetsparse::Coo::new(a.nrows(), a.ncols())?;
    for i in 0..a.nrows() {
        let (cols, vals) = a.row(i);
        for (&j, &v) in cols.iter().zip(vals) {
            if j as usize != i {
                let w = 0.1 + 0.9 * v.abs().fract();
                coo.try_push(i, j as usize, w)?;
                coo.try_push(j as usize, i, w)?;
            }
        }
    }
    // An edge drawn twice sums its weights, the same both ways: the weights stay symmetric.
    coo.to_csr()
}

/// `a`'s pattern with every value 1, in `T`.
pub fn pattern<T: hetsparse::Scalar>(a: &Csr<f64>) -> Result<Csr<T>> {
    Ok(a.map_scalar::<T>()
        .with_values(vec![T::from_f64(1.0); a.values().len()])?)
}

fn main() -> Result<()> {
    let ctx = Context::<f64>::auto()?;
    let graph = undirected(12, 1)?;
    let bfs = bfs(&Context::<i64>::auto()?, &pattern(&graph)?, 0)?;
    let depth = bfs.level.values().iter().max().copied().unwrap_or(0);
    println!(
        "{} vertices, {} edges: BFS from 0 reaches {} in {depth} levels",
        graph.nrows(),
        graph.nnz() / 2,
        bfs.level.nnz()
    );
    let d = shortest_paths(&ctx, &graph, 0)?;
    let far = d.values().iter().fold(0.0f64, |m, &x| m.max(x));
    println!(
        "shortest paths from 0: {} reached, the farthest at {far:.3}",
        d.nnz()
    );
    let counts = Context::<u64>::auto()?;
    let pattern = pattern(&graph)?;
    for method in [TriangleMethod::SandiaLL, TriangleMethod::SandiaDot] {
        let (found, work) = triangles(&counts, &pattern, method)?;
        println!(
            "triangles by {method:?}: {found}, in {} multiply-adds of the unmasked product's {} \
             ({:.1}%)",
            work.multiply_adds,
            work.unmasked_multiply_adds,
            100.0 * work.fraction()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeSet, BinaryHeap, VecDeque};

    /// The out-neighbours of each vertex.
    fn neighbours(a: &Csr<f64>) -> Vec<Vec<u32>> {
        (0..a.nrows()).map(|i| a.row(i).0.to_vec()).collect()
    }

    /// LAGraph's checks of a BFS result (LG_check_bfs): the levels are a queue BFS's, every
    /// edge from a reached vertex goes at most one level down, and each parent is one level
    /// up with an edge to its child.
    fn check_bfs(a: &Csr<f64>, source: u32, bfs: &Bfs) {
        let n = a.nrows();
        let out = neighbours(a);
        let mut want = vec![None; n];
        want[source as usize] = Some(0u32);
        let mut queue = VecDeque::from([source]);
        while let Some(v) = queue.pop_front() {
            let next = want[v as usize].map(|l| l + 1);
            for &w in &out[v as usize] {
                if want[w as usize].is_none() {
                    want[w as usize] = next;
                    queue.push_back(w);
                }
            }
        }
        let level = |v: usize| bfs.level.get(v).map(|l| l as u32);
        for (v, &w) in want.iter().enumerate() {
            assert_eq!(level(v), w, "level of {v}");
        }
        for (k, ns) in out.iter().enumerate() {
            if let Some(lk) = level(k) {
                for &j in ns {
                    let lj = level(j as usize).expect("a neighbour of a reached vertex is reached");
                    assert!(lj <= lk + 1, "edge {k} → {j} skips levels {lk} → {lj}");
                }
            }
        }
        assert_eq!(
            bfs.parent.indices(),
            bfs.level.indices(),
            "parents of the reached"
        );
        for (&v, &p) in bfs.parent.indices().iter().zip(bfs.parent.values()) {
            let p = p as u32;
            if v == source {
                assert_eq!(p, source, "the source is its own parent");
                continue;
            }
            assert_eq!(
                level(p as usize).map(|l| l + 1),
                level(v as usize),
                "parent {p} of {v} is one level up"
            );
            assert!(out[p as usize].binary_search(&v).is_ok(), "edge {p} → {v}");
        }
    }

    #[test]
    fn bfs_levels_and_parents_follow_lagraphs_rules() {
        let ctx = Context::<i64>::auto().unwrap();
        // Undirected (R-MAT, power-law) and directed (R-MAT as drawn, self-loops included),
        // from the hub (most out-edges), from an ordinary vertex with an edge to another, and
        // from one that reaches nothing (a vertex without out-edges, or alone).
        let directed = hetsparse::generate::rmat::<f64>(9, 4, 5);
        for (name, graph) in [
            ("undirected", undirected(9, 3).unwrap()),
            ("directed", directed),
        ] {
            let n = graph.nrows();
            let leaves = |v: usize| graph.row(v).0.iter().any(|&j| j as usize != v);
            let hub = (0..n).max_by_key(|&v| graph.row_nnz(v)).unwrap() as u32;
            let ordinary = (n / 2..n).chain(0..n / 2).find(|&v| leaves(v)).unwrap() as u32;
            let stuck = (0..n).find(|&v| !leaves(v)).map(|v| v as u32);
            for source in [Some(hub), Some(ordinary), stuck].into_iter().flatten() {
                let result = bfs(&ctx, &pattern(&graph).unwrap(), source).unwrap();
                check_bfs(&graph, source, &result);
                let reaches = leaves(source as usize);
                assert_eq!(
                    result.level.nnz() > 1,
                    reaches,
                    "{name} from {source}: {} reached",
                    result.level.nnz()
                );
            }
        }
    }

    /// Dijkstra with a binary heap, over the edges of `a` as weights.
    fn dijkstra(a: &Csr<f64>, source: u32) -> Vec<Option<f64>> {
        /// A distance ordered for a max-heap to pop the least first.
        #[derive(PartialEq)]
        struct Least(f64, u32);
        impl Eq for Least {}
        impl PartialOrd for Least {
            fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
                Some(self.cmp(other))
            }
        }
        impl Ord for Least {
            fn cmp(&self, other: &Self) -> std::cmp::Ordering {
                other.0.total_cmp(&self.0).then(other.1.cmp(&self.1))
            }
        }
        let mut dist: Vec<Option<f64>> = vec![None; a.nrows()];
        let mut heap = BinaryHeap::from([Least(0.0, source)]);
        let mut done = BTreeSet::new();
        dist[source as usize] = Some(0.0);
        while let Some(Least(d, v)) = heap.pop() {
            if !done.insert(v) {
                continue;
            }
            let (cols, vals) = a.row(v as usize);
            for (&w, &x) in cols.iter().zip(vals) {
                let nd = d + x;
                if dist[w as usize].is_none_or(|old| nd < old) {
                    dist[w as usize] = Some(nd);
                    heap.push(Least(nd, w));
                }
            }
        }
        dist
    }

    #[test]
    fn min_plus_shortest_paths_are_dijkstras() {
        let ctx = Context::<f64>::auto().unwrap();
        let road = hetsparse::generate::road_grid::<f64>(30, 20, 9);
        let road = road
            .with_values(road.values().iter().map(|v| 0.1 + v.abs()).collect())
            .unwrap();
        for (name, graph) in [("road", road), ("R-MAT", undirected(9, 4).unwrap())] {
            for source in [0u32, 123] {
                let d = shortest_paths(&ctx, &graph, source).unwrap();
                let want = dijkstra(&graph, source);
                for (v, w) in want.iter().enumerate() {
                    match (d.get(v), w) {
                        (None, None) => {}
                        (Some(x), Some(y)) => assert!(
                            (x - y).abs() <= 1e-9 * y.max(1.0),
                            "{name}: d({source} → {v}) = {x}, Dijkstra {y}"
                        ),
                        (x, y) => panic!("{name}: d({source} → {v}) = {x:?}, Dijkstra {y:?}"),
                    }
                }
            }
        }
    }

    #[test]
    fn both_methods_count_triangles() {
        let ctx = Context::<u64>::auto().unwrap();
        let graph = undirected(8, 6).unwrap();
        let out = neighbours(&graph);
        // Each triangle i > j > k once, by a triple loop over the neighbour lists.
        let mut want = 0u64;
        for i in 0..graph.nrows() {
            for &j in out[i].iter().filter(|&&j| (j as usize) < i) {
                for &k in out[j as usize].iter().filter(|&&k| k < j) {
                    if out[i].binary_search(&k).is_ok() {
                        want += 1;
                    }
                }
            }
        }
        assert!(want > 0);
        let pattern = pattern(&graph).unwrap();
        for method in [TriangleMethod::SandiaLL, TriangleMethod::SandiaDot] {
            let (found, work) = triangles(&ctx, &pattern, method).unwrap();
            assert_eq!(found, want, "{method:?}");
            // Integer products run on the CPU, which counts the mask's work: a fraction of
            // the unmasked product's multiply-adds.
            assert!(
                work.multiply_adds > 0 && work.multiply_adds * 2 < work.unmasked_multiply_adds,
                "{method:?}: {work:?}"
            );
        }
    }
}
