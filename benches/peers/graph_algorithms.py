#!/usr/bin/env python3
"""Triangle counting and breadth-first search: hetsparse's Python package against
SuiteSparse:GraphBLAS (python-graphblas), the same algorithm written the same way in both.

    graph_algorithms.py [--classes powerlaw,uniform,road] [--sizes 65536,262144]
                        [--device cpu] [--threads N] [--reps 3] [--out FILE]
                        [--algorithms triangles,bfs] [--scipy-operands] [--kept]
                        [--scipy-result]

Graphs: hetsparse's generated classes (`hetsparse.generate`: `powerlaw` is R-MAT, `uniform`
has a fixed number of random columns per row, `road` is a planar road-like grid) made
undirected (A + Aᵀ, no self-loops, every edge 1); and graphs made as users' tools make them,
with real_products.py's generators: `graph500` (Graph500's R-MAT, 16 edges a vertex, vertices
permuted; `--sizes` powers of two) and `sbm` (the stochastic block model of the Markov
clustering products: blocks of 20-120 vertices, 8 edges a vertex inside, 2 across).

- Triangles, Sandia's L·L as LAGraph's `LAGr_TriangleCount` (method Sandia_LL): L the strictly
  lower triangle, `C⟨L⟩ = L plus.pair L`, the sum of C. In int64 on both sides. C stays in each
  library's memory and only the count comes back (hetsparse: `mxm(..., keep=True)` then
  `Matrix.reduce_scalar("plus")`, which on a GPU copies C's values alone to the host);
  `--scipy-result` returns C as scipy.sparse and sums it instead.
- BFS levels and parents from the vertex of most edges, as LAGraph's push-only BFS: `q⟨¬π, replace⟩ = q
  any.secondi A`, `π⟨q⟩ = q`, `level⟨q⟩ = depth` until q is empty. In int64 on both sides;
  hetsparse keeps π's pattern as a boolean array of the vertices visited (the mask, valued)
  beside dense parents and levels, GraphBLAS its vectors (bitmaps once they fill).

hetsparse takes scipy.sparse and returns it; the graph is converted once into a
`hetsparse.Matrix` (checked and kept in hetsparse's memory, as GraphBLAS keeps its matrices),
which every product of the algorithm reads (`--scipy-operands` passes the scipy matrix to
every product instead, converted and checked on each call). Both libraries' matrices are
built before timing, neither conversion is in the time. With `--kept` (a GPU or OpenCL
`--device`), triangles are also counted on a `hetsparse.Matrix(L, device=DEVICE)`, copied into
the device's memory when it is made (its own columns: the count from host memory copies L over
on every call, the kept one reads it where it lies, as GraphBLAS reads its own matrix), and BFS
searches such a copy of the graph (from host memory, each level's product would copy A). Each
case runs once to warm up, then `--reps` times; the best time is reported
(and every run of hetsparse's BFS, the warm-up's first: one of them builds and keeps the Aᵀ
its later pulled levels read),
with the answers checked to agree (the triangle counts equal, the BFS levels equal and every
parent valid). GraphBLAS runs on `--threads` threads (default: every core hetsparse's CPU
backend uses, rayon's count: RAYON_NUM_THREADS or the machine's cores).
"""

import argparse
import os
import sys
import time

import numpy as np
import scipy.sparse as sp

import hetsparse


# Graphs made as the tools users run make them (benches/peers/real_products.py): Graph500's
# R-MAT generator and the stochastic block model of the Markov clustering products.
TOOL_GRAPHS = ("graph500", "sbm")


def undirected(matrix_class, size, seed=2026):
    """A symmetric pattern without self-loops, int64 ones: from a generated class of
    hetsparse's, or from a tool's generator (`graph500` takes a power of two of vertices)."""
    if matrix_class in TOOL_GRAPHS:
        import real_products

        rng = np.random.default_rng(seed)
        if matrix_class == "graph500":
            if size < 2 or size & (size - 1):
                raise SystemExit(f"graph500: {size} vertices is not a power of two")
            g = real_products.rmat_graph(size.bit_length() - 1, rng)
        else:
            g = real_products.block_model(size, rng)
    else:
        a = hetsparse.generate(matrix_class, size, seed=seed)[0]
        g = (a + a.T).tocsr()
    g.setdiag(0)
    g.eliminate_zeros()
    g.data = np.ones(g.nnz, dtype=np.int64)
    g = g.astype(np.int64)
    g.sort_indices()
    return g


def best_of(reps, run, times=None):
    """`run()` once to warm up, then `reps` times: (best seconds, last result). Every run's
    seconds, the warm-up's first, go into the list `times`, when given."""
    start = time.perf_counter()
    result = run()
    if times is not None:
        times.append(time.perf_counter() - start)
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        result = run()
        best = min(best, time.perf_counter() - start)
        if times is not None:
            times.append(time.perf_counter() - start)
    return best, result


def triangles_hetsparse(l, device, scipy_result=False):
    if scipy_result:
        c = hetsparse.mxm(l, l, "plus_pair", mask=l, device=device)
        return int(c.sum())
    c = hetsparse.mxm(l, l, "plus_pair", mask=l, device=device, keep=True)
    return int(c.reduce_scalar("plus", allow_empty=False))


def triangles_graphblas(gb, l):
    c = gb.Matrix(gb.dtypes.INT64, l.nrows, l.ncols)
    c(l.S) << l.mxm(l, gb.semiring.plus_pair[gb.dtypes.INT64])
    return int(c.reduce_scalar(gb.monoid.plus).value or 0)


def bfs_hetsparse(a, source, device):
    """Levels and parents (dense arrays, -1 where not reached). One vxm a level: the
    frontier pushed along A's edges, masked by the complement of the vertices visited (a
    boolean array, which crosses as a bitmap), gives the next frontier with each vertex's
    parent; the arrays are updated at the frontier's positions only, as GraphBLAS's
    ``parent(q.S) << q`` is. ``a`` is a ``hetsparse.Matrix`` (or a scipy matrix, converted
    on every level)."""
    n = a.shape[0]
    visited = np.zeros(n, dtype=bool)
    level = np.full(n, -1, dtype=np.int64)
    parent = np.full(n, -1, dtype=np.int64)
    visited[source], level[source], parent[source] = True, 0, source
    frontier = sp.csr_matrix(([source], ([0], [source])), shape=(1, n), dtype=np.int64)
    depth = 0
    while frontier.nnz:
        depth += 1
        frontier = hetsparse.vxm(
            frontier, a, "any_secondi", mask=visited, structural=False, complement=True, device=device
        )
        reached = frontier.indices
        visited[reached] = True
        parent[reached] = frontier.data
        level[reached] = depth
    return level, parent


def bfs_graphblas(gb, a, source):
    n = a.nrows
    parent = gb.Vector(gb.dtypes.INT64, n)
    parent[source] << source
    level = gb.Vector(gb.dtypes.INT64, n)
    level[source] << 0
    q = gb.Vector(gb.dtypes.INT64, n)
    q[source] << source
    depth = 0
    while q.nvals:
        depth += 1
        q(~parent.S, replace=True) << q.vxm(a, gb.semiring.ss.any_secondi[gb.dtypes.INT64])
        if not q.nvals:
            break
        parent(q.S) << q
        level(q.S) << depth
    return level, parent


def check_bfs(a, source, level, parent):
    """The levels are a shortest-path search's (scipy's, in C: the graphs here reach millions
    of vertices) and every parent is one level up with an edge."""
    from scipy.sparse.csgraph import shortest_path

    distance = shortest_path(a, method="D", unweighted=True, indices=source)
    want = np.where(np.isinf(distance), -1, distance).astype(np.int64)
    if not np.array_equal(level, want):
        raise AssertionError("BFS levels differ from a shortest-path search's")
    pv, pp = parent
    others = pv != source
    pv, pp = pv[others], pp[others]
    if not np.all(level[pp] + 1 == level[pv]):
        raise AssertionError("a parent is not one level up")
    if not np.all(np.asarray(a[pp, pv]).ravel() != 0):
        raise AssertionError("a parent has no edge to its vertex")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--classes", default="powerlaw,uniform,road")
    parser.add_argument("--sizes", default="65536,262144")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument(
        "--algorithms",
        default="triangles,bfs",
        help="which to run: triangles, bfs or both (a GPU's vector products read A from the "
        "host on each call, which a BFS of thousands of levels pays each level)",
    )
    parser.add_argument("--out")
    parser.add_argument(
        "--scipy-operands",
        action="store_true",
        help="pass the scipy matrices to every product (converted on each call) instead of a "
        "hetsparse.Matrix made once per algorithm",
    )
    parser.add_argument(
        "--scipy-result",
        action="store_true",
        help="count triangles from C returned as scipy.sparse (its sum) rather than from C "
        "kept in hetsparse's memory (Matrix.reduce_scalar)",
    )
    parser.add_argument(
        "--kept",
        action="store_true",
        help="also count triangles on a hetsparse.Matrix kept in --device's memory, and "
        "search (BFS) one",
    )
    args = parser.parse_args()
    stored = not args.scipy_operands
    algorithms = set(args.algorithms.split(","))
    if not algorithms or not algorithms <= {"triangles", "bfs"}:
        parser.error(f"--algorithms: triangles and/or bfs, not {args.algorithms!r}")

    import graphblas as gb

    threads = args.threads or int(os.environ.get("RAYON_NUM_THREADS", os.cpu_count() or 1))
    gb.ss.config["nthreads"] = threads
    lines = [
        f"| graph | rows | edges | triangles | hetsparse ({args.device}) | GraphBLAS ({threads} "
        f"threads) | ratio | BFS levels | hetsparse | GraphBLAS | ratio |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    if args.kept:
        lines[0] = lines[0].replace(
            " | ratio | BFS", f" | ratio | kept on {args.device} | ratio | BFS"
        )
        lines[1] += "---:|---:|"
    print(lines[0], flush=True)
    for matrix_class in args.classes.split(","):
        for size in (int(s) for s in args.sizes.split(",")):
            g = undirected(matrix_class, size)
            l = sp.tril(g, k=-1, format="csr")
            l.sort_indices()
            n, edges = g.shape[0], g.nnz // 2
            gl = gb.io.from_scipy_sparse(l)
            ga = gb.io.from_scipy_sparse(g)
            # Each library's own matrices, built before timing.
            hl, hg = (hetsparse.Matrix(l), hetsparse.Matrix(g)) if stored else (l, g)

            cells = [matrix_class, str(n), str(edges)]
            if "triangles" in algorithms:
                t_ours, count = best_of(
                    args.reps, lambda: triangles_hetsparse(hl, args.device, args.scipy_result)
                )
                t_gb, count_gb = best_of(args.reps, lambda: triangles_graphblas(gb, gl))
                if count != count_gb:
                    raise AssertionError(f"{matrix_class} {size}: {count} triangles, GraphBLAS {count_gb}")
                cells += [str(count), f"{t_ours * 1e3:.1f} ms", f"{t_gb * 1e3:.1f} ms", f"{t_gb / t_ours:.2f}×"]
                if args.kept:
                    kept = hetsparse.Matrix(l, device=args.device)
                    t_kept, count_kept = best_of(
                        args.reps,
                        lambda: triangles_hetsparse(kept, args.device, args.scipy_result),
                    )
                    del kept
                    if count_kept != count_gb:
                        raise AssertionError(
                            f"{matrix_class} {size}: {count_kept} triangles on the device's "
                            f"copy, GraphBLAS {count_gb}"
                        )
                    cells += [f"{t_kept * 1e3:.1f} ms", f"{t_gb / t_kept:.2f}×"]
            else:
                cells += ["–"] * (6 if args.kept else 4)
            if "bfs" in algorithms:
                source = int(np.argmax(np.diff(g.indptr)))
                # A pulled level reads Aᵀ, which the matrix builds once the pushes that
                # wanted it add up to its entries (A itself where symmetric) and keeps: the
                # run that builds it pays for it, so every run's time is shown.
                runs = []
                # With --kept, the graph is copied into the device's memory once, here.
                ha = hetsparse.Matrix(g, device=args.device) if args.kept else hg
                t_bfs, (level, parent) = best_of(
                    args.reps, lambda: bfs_hetsparse(ha, source, args.device), runs
                )
                del ha
                t_bfs_gb, (glevel, _) = best_of(args.reps, lambda: bfs_graphblas(gb, ga, source))
                reached = np.flatnonzero(parent >= 0)
                check_bfs(g, source, level, (reached, parent[reached]))
                gi, gv = glevel.to_coo()
                if not (np.array_equal(np.flatnonzero(level >= 0), gi) and np.array_equal(level[gi], gv)):
                    raise AssertionError(f"{matrix_class} {size}: BFS levels differ from GraphBLAS's")
                cells += [
                    str(int(level.max())),
                    f"{t_bfs * 1e3:.1f} ms (runs {', '.join(f'{t * 1e3:.0f}' for t in runs)})",
                    f"{t_bfs_gb * 1e3:.1f} ms",
                    f"{t_bfs_gb / t_bfs:.2f}×",
                ]
            else:
                cells += ["–"] * 4
            line = "| " + " | ".join(cells) + " |"
            print(line, flush=True)
            lines.append(line)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
