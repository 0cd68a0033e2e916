//! Graph algorithms written with semirings and masks, GraphBLAS style: breadth-first search
//! (levels and parents, in `i64`), single-source shortest paths (`f64` weights), triangle
//! counting (`u64` counts, by Sandia's `L·L` and by SandiaDot's `L·Uᵀ`), the k-truss (`u64`
//! triangle counts per edge) and Markov clustering (`f64` flows).
//!
//! `cargo run -p hetsparse --example graph_algorithms` runs them on generated graphs and prints
//! what they found; `cargo test -p hetsparse --example graph_algorithms` checks each against
//! plain code written without matrices (a queue, Dijkstra, a triple loop, neighbour-set
//! intersections, dense matrices) and against the rules LAGraph checks its own results with.

use hetsparse::{
    AccumulateOp, Context, Csr, Error, Mask, MaskKind, MaskedWork, Result, RunControl, Scalar,
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
/// `frontier⟨¬visited, replace⟩ = frontier any.secondi A`, which gives every newly reached
/// vertex one frontier vertex with an edge to it (`secondi`: the inner index, the vertex the
/// edge comes from); the complemented mask keeps vertices already reached out. The visited
/// set is a bitmap ([`Mask::from_bitmap`]), so that masking a level costs a copy of its bits
/// rather than a list of every vertex reached so far; levels and parents are written at the
/// frontier's positions only. Only `a`'s pattern counts.
pub fn bfs(ctx: &Context<i64>, a: &Csr<i64>, source: u32) -> Result<Bfs> {
    let n = a.nrows();
    if source as usize >= n {
        return Err(Error::InvalidArgument(format!(
            "BFS from vertex {source} of a graph of {n}"
        )));
    }
    let mut visited = vec![0u64; n.div_ceil(64)];
    let (mut level, mut parent) = (vec![-1i64; n], vec![-1i64; n]);
    let reach = |visited: &mut [u64], v: u32| visited[v as usize / 64] |= 1 << (v % 64);
    reach(&mut visited, source);
    (level[source as usize], parent[source as usize]) = (0, i64::from(source));
    let mut frontier = SparseVector::try_new(n, vec![source], vec![i64::from(source)])?;
    let mut depth = 0;
    while frontier.nnz() > 0 {
        depth += 1;
        let unvisited = Mask::from_bitmap(n, visited.clone(), MaskKind::Structural)?;
        let step = VectorProductOptions::new()
            .with_semiring(SemiringKind::AnySecondI)
            .with_mask(unvisited.complemented().replacing());
        frontier = ctx.vxm(&frontier, a, &step)?;
        for (&v, &p) in frontier.indices().iter().zip(frontier.values()) {
            reach(&mut visited, v);
            (level[v as usize], parent[v as usize]) = (depth, p);
        }
    }
    let reached: Vec<u32> = (0..n as u32).filter(|&v| level[v as usize] >= 0).collect();
    let at = |values: &[i64]| reached.iter().map(|&v| values[v as usize]).collect();
    Ok(Bfs {
        level: SparseVector::try_new(n, reached.clone(), at(&level))?,
        parent: SparseVector::try_new(n, reached.clone(), at(&parent))?,
    })
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

/// The entries of `a` that `keep(row, column, value)` accepts (GraphBLAS's select).
fn select<T: Scalar>(a: &Csr<T>, keep: impl Fn(usize, u32, T) -> bool) -> Result<Csr<T>> {
    let mut offsets = Vec::with_capacity(a.nrows() + 1);
    let (mut columns, mut values) = (Vec::new(), Vec::new());
    offsets.push(0u64);
    for i in 0..a.nrows() {
        let (cols, vals) = a.row(i);
        for (&j, &v) in cols.iter().zip(vals) {
            if keep(i, j, v) {
                columns.push(j);
                values.push(v);
            }
        }
        offsets.push(columns.len() as u64);
    }
    Ok(Csr::try_new(
        a.nrows(),
        a.ncols(),
        offsets,
        columns,
        values,
    )?)
}

/// The k-truss of an undirected graph (`k ≥ 3`; only `adjacency`'s pattern off the diagonal
/// counts): the largest subgraph in which every edge lies on at least `k − 2` triangles of the
/// subgraph, each edge holding its count (its support), and the rounds taken. As LAGraph's
/// k-truss: `S⟨C⟩ = C plus.pair C` counts the triangles on every edge of C, computing only
/// entries on edges (the mask), and edges with too few leave C, until none does.
pub fn ktruss(ctx: &Context<u64>, adjacency: &Csr<u64>, k: u32) -> Result<(Csr<u64>, usize)> {
    if k < 3 {
        return Err(Error::InvalidArgument(format!(
            "a k-truss needs k ≥ 3 (every edge on k − 2 triangles), not k = {k}"
        )));
    }
    let support = u64::from(k - 2);
    let off_diagonal = select(adjacency, |i, j, _| j as usize != i)?;
    let ones = vec![1; off_diagonal.values().len()];
    let mut c = off_diagonal.with_values(ones)?;
    let mut rounds = 0;
    loop {
        rounds += 1;
        let options = SpgemmOptions::new()
            .with_semiring(SemiringKind::PlusPair)
            .with_mask(Mask::structural(&c));
        let counted =
            ctx.spgemm_with((&c).into(), (&c).into(), &options, &RunControl::unwatched())?;
        // An edge on no triangle has no entry in the product: it leaves with the others.
        let kept = select(&counted, |_, _, s| s >= support)?;
        if kept.nnz() == c.nnz() {
            return Ok((kept, rounds));
        }
        c = kept;
    }
}

/// Clusters of an undirected graph by Markov clustering (van Dongen's MCL), as HipMCL runs it
/// on sparse matrices: a random walk's transition matrix (rows normalised, a self-loop on every
/// vertex) is expanded (`M·M`, an SpGEMM), inflated (every entry to the power `inflation`,
/// rows normalised again) and pruned (entries below `prune` dropped) until it no longer
/// changes; the clusters are the connected parts of what is left (every vertex flows to its
/// cluster's attractors). Returns each vertex's cluster, numbered from 0 in the order of their
/// first vertices, and the iterations taken.
pub fn markov_clusters(
    ctx: &Context<f64>,
    graph: &Csr<f64>,
    inflation: f64,
    prune: f64,
) -> Result<(Vec<u32>, usize)> {
    let n = graph.nrows();
    if graph.ncols() != n || inflation.is_nan() || inflation <= 1.0 || !(0.0..1.0).contains(&prune)
    {
        return Err(Error::InvalidArgument(format!(
            "Markov clustering needs a square graph ({} × {} given), inflation above 1 \
             ({inflation}) and a pruning threshold in [0, 1) ({prune})",
            graph.nrows(),
            graph.ncols()
        )));
    }
    // Weights as they are (their magnitudes), a self-loop of weight 1 on every vertex.
    let mut coo = hetsparse::Coo::new(n, n)?;
    for i in 0..n {
        coo.try_push(i, i, 1.0)?;
        let (cols, vals) = graph.row(i);
        for (&j, &w) in cols.iter().zip(vals) {
            if j as usize != i && w != 0.0 {
                coo.try_push(i, j as usize, w.abs())?;
            }
        }
    }
    let mut m = inflate(&coo.to_csr()?, 1.0, 0.0)?;
    let mut iterations = 0;
    // Chaos (the largest change of an entry) below 1e-9, or a bound that MCL meets in a few
    // dozen iterations on graphs that have clusters.
    while iterations < 100 {
        iterations += 1;
        let next = inflate(&ctx.spgemm(&m, &m)?, inflation, prune)?;
        let settled = next.row_offsets() == m.row_offsets()
            && next.col_indices() == m.col_indices()
            && next
                .values()
                .iter()
                .zip(m.values())
                .all(|(x, y)| (x - y).abs() <= 1e-9);
        m = next;
        if settled {
            break;
        }
    }
    Ok((components(&m), iterations))
}

/// `m`'s entries to the power `r`, rows normalised, entries below `prune` dropped and the rows
/// normalised again.
fn inflate(m: &Csr<f64>, r: f64, prune: f64) -> Result<Csr<f64>> {
    let normalised = |m: &Csr<f64>| -> Result<Csr<f64>> {
        let mut values = m.values().to_vec();
        for i in 0..m.nrows() {
            let span = m.row_offsets()[i] as usize..m.row_offsets()[i + 1] as usize;
            let sum: f64 = values[span.clone()].iter().sum();
            if sum > 0.0 {
                values[span].iter_mut().for_each(|v| *v /= sum);
            }
        }
        Ok(m.with_values(values)?)
    };
    let powered = m.with_values(m.values().iter().map(|v| v.powf(r)).collect())?;
    let kept = select(&normalised(&powered)?, |_, _, v| v >= prune)?;
    normalised(&kept)
}

/// The connected parts of `m`'s pattern taken as undirected, numbered from 0 in the order of
/// their first vertices.
fn components(m: &Csr<f64>) -> Vec<u32> {
    fn root(parent: &mut [usize], mut v: usize) -> usize {
        while parent[v] != v {
            parent[v] = parent[parent[v]];
            v = parent[v];
        }
        v
    }
    let n = m.nrows();
    let mut parent: Vec<usize> = (0..n).collect();
    for i in 0..n {
        for &j in m.row(i).0 {
            let (a, b) = (root(&mut parent, i), root(&mut parent, j as usize));
            parent[a.max(b)] = a.min(b);
        }
    }
    let mut label = vec![u32::MAX; n];
    let mut next = 0;
    (0..n)
        .map(|v| {
            let r = root(&mut parent, v);
            if label[r] == u32::MAX {
                label[r] = next;
                next += 1;
            }
            label[r]
        })
        .collect()
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
    // From the hub (the vertex of most edges): R-MAT leaves some vertices without any.
    let hub = (0..graph.nrows())
        .max_by_key(|&v| graph.row_nnz(v))
        .unwrap_or(0) as u32;
    let bfs = bfs(&Context::<i64>::auto()?, &pattern(&graph)?, hub)?;
    let depth = bfs.level.values().iter().max().copied().unwrap_or(0);
    println!(
        "{} vertices, {} edges: BFS from {hub} reaches {} in {depth} levels",
        graph.nrows(),
        graph.nnz() / 2,
        bfs.level.nnz()
    );
    let d = shortest_paths(&ctx, &graph, hub)?;
    let far = d.values().iter().fold(0.0f64, |m, &x| m.max(x));
    println!(
        "shortest paths from {hub}: {} reached, the farthest at {far:.3}",
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
    for k in [3, 4, 5] {
        let (truss, rounds) = ktruss(&counts, &pattern, k)?;
        println!(
            "{k}-truss: {} of {} edges, in {rounds} rounds",
            truss.nnz() / 2,
            pattern.nnz() / 2
        );
    }
    let (clusters, iterations) = markov_clusters(&ctx, &undirected(10, 2)?, 2.0, 1e-4)?;
    let count = clusters.iter().max().map_or(0, |&c| c + 1);
    println!(
        "Markov clustering: {count} clusters of {} vertices, in {iterations} iterations",
        clusters.len()
    );
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

    /// Each edge's triangles by intersecting neighbour sets, edges with fewer than `k − 2`
    /// removed until none is: the k-truss's edges `(i, j)` with their supports.
    fn ktruss_by_sets(a: &Csr<f64>, k: u64) -> BTreeSet<(u32, u32, u64)> {
        let mut edges: Vec<BTreeSet<u32>> = (0..a.nrows())
            .map(|i| {
                a.row(i)
                    .0
                    .iter()
                    .copied()
                    .filter(|&j| j as usize != i)
                    .collect()
            })
            .collect();
        loop {
            let mut truss = BTreeSet::new();
            let mut removed = false;
            let mut next = edges.clone();
            for (i, ns) in edges.iter().enumerate() {
                for &j in ns {
                    let support = ns.intersection(&edges[j as usize]).count() as u64;
                    if support >= k - 2 {
                        truss.insert((i as u32, j, support));
                    } else {
                        next[i].remove(&j);
                        removed = true;
                    }
                }
            }
            if !removed {
                return truss;
            }
            edges = next;
        }
    }

    #[test]
    fn ktruss_keeps_the_edges_on_enough_triangles() {
        let ctx = Context::<u64>::auto().unwrap();
        // Five vertices all joined (every edge on 3 triangles), a triangle hanging off vertex 4
        // (its edges on 1), and a path 7 – 8 – 0 (edges on none).
        let mut coo = hetsparse::Coo::new(9, 9).unwrap();
        let mut edge = |i: usize, j: usize| {
            coo.try_push(i, j, 1.0).unwrap();
            coo.try_push(j, i, 1.0).unwrap();
        };
        for i in 0..5 {
            for j in i + 1..5 {
                edge(i, j);
            }
        }
        for (i, j) in [(4, 5), (5, 6), (4, 6), (7, 8), (8, 0)] {
            edge(i, j);
        }
        let known = coo.to_csr().unwrap();
        let count = |k| ktruss(&ctx, &pattern(&known).unwrap(), k).unwrap().0.nnz() / 2;
        assert_eq!((count(3), count(4), count(5), count(6)), (13, 10, 10, 0));
        for (name, graph) in [("known", known), ("R-MAT", undirected(8, 7).unwrap())] {
            for k in 3..=6u32 {
                let (truss, rounds) = ktruss(&ctx, &pattern(&graph).unwrap(), k).unwrap();
                let mut got = BTreeSet::new();
                for i in 0..truss.nrows() {
                    let (cols, vals) = truss.row(i);
                    got.extend(cols.iter().zip(vals).map(|(&j, &s)| (i as u32, j, s)));
                }
                assert_eq!(got, ktruss_by_sets(&graph, u64::from(k)), "{name}, k = {k}");
                assert!(rounds >= 1);
            }
        }
        let err = ktruss(&ctx, &pattern(&undirected(4, 1).unwrap()).unwrap(), 2);
        assert!(matches!(err, Err(Error::InvalidArgument(_))));
    }

    /// Markov clustering on dense matrices, the same steps as [`markov_clusters`]'.
    fn mcl_dense(graph: &Csr<f64>, inflation: f64, prune: f64) -> Vec<u32> {
        let n = graph.nrows();
        let mut m = vec![vec![0.0f64; n]; n];
        for (i, row) in m.iter_mut().enumerate() {
            row[i] = 1.0;
            let (cols, vals) = graph.row(i);
            for (&j, &w) in cols.iter().zip(vals) {
                if j as usize != i && w != 0.0 {
                    row[j as usize] += w.abs();
                }
            }
        }
        let step = |m: &mut Vec<Vec<f64>>, r: f64, prune: f64| {
            for row in m.iter_mut() {
                row.iter_mut().for_each(|v| *v = v.powf(r));
                let sum: f64 = row.iter().sum();
                row.iter_mut().for_each(|v| *v /= sum);
                row.iter_mut()
                    .filter(|v| **v < prune)
                    .for_each(|v| *v = 0.0);
                let sum: f64 = row.iter().sum();
                row.iter_mut().for_each(|v| *v /= sum);
            }
        };
        step(&mut m, 1.0, 0.0);
        for _ in 0..100 {
            let mut next = vec![vec![0.0; n]; n];
            for (row, out) in m.iter().zip(next.iter_mut()) {
                for (&mik, mk) in row.iter().zip(&m) {
                    if mik != 0.0 {
                        out.iter_mut().zip(mk).for_each(|(o, &x)| *o += mik * x);
                    }
                }
            }
            step(&mut next, inflation, prune);
            let settled = (0..n).all(|i| (0..n).all(|j| (next[i][j] - m[i][j]).abs() <= 1e-9));
            m = next;
            if settled {
                break;
            }
        }
        let pattern = Csr::from_dense(
            &hetsparse::Dense::try_new(n, n, hetsparse::Layout::RowMajor, m.concat()).unwrap(),
        )
        .unwrap();
        components(&pattern)
    }

    #[test]
    fn markov_clustering_finds_the_dense_parts() {
        let ctx = Context::<f64>::auto().unwrap();
        // Four cliques of six in a ring, one edge from each to the next.
        let mut coo = hetsparse::Coo::new(24, 24).unwrap();
        for c in 0..4 {
            for i in 0..6 {
                for j in 0..6 {
                    if i != j {
                        coo.try_push(6 * c + i, 6 * c + j, 1.0).unwrap();
                    }
                }
            }
            let (a, b) = (6 * c + 5, (6 * c + 6) % 24);
            coo.try_push(a, b, 1.0).unwrap();
            coo.try_push(b, a, 1.0).unwrap();
        }
        let ring = coo.to_csr().unwrap();
        let (clusters, iterations) = markov_clusters(&ctx, &ring, 2.0, 1e-4).unwrap();
        let want: Vec<u32> = (0..24).map(|v| v / 6).collect();
        assert_eq!(clusters, want, "after {iterations} iterations");
        // A power-law graph: the same clusters as the dense steps give.
        let graph = undirected(7, 3).unwrap();
        let (clusters, _) = markov_clusters(&ctx, &graph, 2.0, 1e-4).unwrap();
        assert_eq!(clusters, mcl_dense(&graph, 2.0, 1e-4));
        assert!(clusters.iter().max().unwrap() > &0, "more than one cluster");
        for (inflation, prune) in [(1.0, 1e-4), (2.0, 1.0), (f64::NAN, 0.0)] {
            let err = markov_clusters(&ctx, &ring, inflation, prune);
            assert!(
                matches!(err, Err(Error::InvalidArgument(_))),
                "{inflation}, {prune}"
            );
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
