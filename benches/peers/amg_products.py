"""The real-workload SpGEMM products of an AMG setup, made by PyAMG itself.

    python3 benches/peers/amg_products.py OUT [--quick]

Builds PyAMG's smoothed-aggregation hierarchies of the 3D Poisson problem (7-point, 150^3 =
3.4 million unknowns) and of 2D linear elasticity (1200^2 nodes, 2.9 million unknowns, with its
rigid-body near-nullspace), and a root-node hierarchy of the same Poisson problem, and writes
the Galerkin products of their first two levels -- A.P and R.(AP) -- as raw operands in OUT
(`NAME.indptr` u64, `.indices` u32, `.data` f64, `.shape` text, the form of
hetsparse_bench::raw) with `products.tsv`: one line per product, `name<TAB>A<TAB>B`. Files
already there are kept (generation is skipped when `products.tsv` exists). `--quick` makes
problems small enough for a smoke run.
"""

import os
import sys
import time

import numpy as np
import pyamg
import scipy.sparse as sp


def canonical(m):
    m = sp.csr_matrix(m, dtype=np.float64)
    m.sum_duplicates()
    m.sort_indices()
    m.eliminate_zeros()
    return m


def write(out, stem, m):
    m = canonical(m)
    m.indptr.astype("<u8").tofile(os.path.join(out, stem + ".indptr"))
    m.indices.astype("<u4").tofile(os.path.join(out, stem + ".indices"))
    m.data.astype("<f8").tofile(os.path.join(out, stem + ".data"))
    with open(os.path.join(out, stem + ".shape"), "w") as f:
        f.write(f"{m.shape[0]} {m.shape[1]}\n")
    return m


def galerkin(out, lines, name, ml, levels=2):
    for lvl in range(min(levels, len(ml.levels) - 1)):
        level = ml.levels[lvl]
        a = write(out, f"{name}.l{lvl}.A", level.A)
        p = write(out, f"{name}.l{lvl}.P", level.P)
        write(out, f"{name}.l{lvl}.R", level.R)
        write(out, f"{name}.l{lvl}.AP", a @ p)
        lines.append((f"{name}.l{lvl}.AP", f"{name}.l{lvl}.A", f"{name}.l{lvl}.P"))
        lines.append((f"{name}.l{lvl}.RAP", f"{name}.l{lvl}.R", f"{name}.l{lvl}.AP"))


def main():
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    out = sys.argv[1]
    quick = "--quick" in sys.argv[2:]
    os.makedirs(out, exist_ok=True)
    manifest = os.path.join(out, "products.tsv")
    if os.path.exists(manifest):
        print(f"amg_products: {manifest} exists, kept", file=sys.stderr)
        return
    lines = []
    started = time.time()
    n3 = 24 if quick else 150
    a = pyamg.gallery.poisson((n3, n3, n3), format="csr")
    ml = pyamg.smoothed_aggregation_solver(a, max_levels=3, max_coarse=10)
    galerkin(out, lines, "sa-poisson3d", ml)
    ml = pyamg.rootnode_solver(a, max_levels=3, max_coarse=10)
    galerkin(out, lines, "rn-poisson3d", ml, levels=1)
    n2 = 60 if quick else 1200
    a, b = pyamg.gallery.linear_elasticity((n2, n2), format="bsr")
    ml = pyamg.smoothed_aggregation_solver(a, B=b, max_levels=3, max_coarse=10)
    galerkin(out, lines, "sa-elasticity2d", ml)
    with open(manifest + ".tmp", "w") as f:
        for line in lines:
            f.write("\t".join(line) + "\n")
    os.replace(manifest + ".tmp", manifest)
    print(
        f"amg_products: {len(lines)} products (PyAMG {pyamg.__version__}) in "
        f"{time.time() - started:.1f} s",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
