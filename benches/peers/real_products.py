"""The real-workload SpGEMM products of the benchmarks, made by the libraries clients use.

    python3 benches/peers/real_products.py OUT [--quick] [--only FAMILY,...] [--jobs N]

Families (each one task, run in parallel over N processes, default all cores):
- AMG setup (PyAMG): smoothed-aggregation (`sa-`) and root-node (`rn-`) hierarchies of 2D and
  3D Poisson, 2D linear elasticity (with its rigid-body near-nullspace) and 3D linear
  elasticity (scikit-fem's P1 stiffness of a clamped box, rigid-body modes); every level's
  Galerkin products `NAME.lL.AP` (A.P) and `NAME.lL.RAP` (R.(AP)).
- FEM (scikit-fem): P1 and P2 tetrahedral linear elasticity on a tensor mesh of a box, one face
  clamped: the stiffness matrix K and `fem-pK.KK` (K.K); the P1 K's hierarchies are
  `sa-elasticity3d` and `rn-elasticity3d`, the P2 K's SA hierarchy `sa-elasticity3d-p2`.
- Graphs: Markov clustering's expansion M.M (`mcl-sbm.itI.MM`) at its first iteration and
  after inflation and pruning, on a stochastic block model graph, following the pipeline of
  the markov_clustering package (self loops, column normalisation, expansion, inflation with
  power 2, pruning below 0.001 keeping each column's largest entry), written here in scipy;
  and the square of an R-MAT power-law graph (`rmat.AA`).
- PyAMG's example matrices (`example-NAME.AA`): small real FEM matrices, their squares.

Writes raw operands (`STEM.indptr` u64, `.indices` u32, `.data` f64, `.shape` "rows cols", the
form of hetsparse_bench::raw), every one canonical CSR (sorted, no duplicates, no explicit
zeros), and two tables:
- `products.tsv`: one line per product, `name<TAB>A-stem<TAB>B-stem<TAB>source` (the source
  names the generating library and its version);
- `summary.tsv`: with a header, per product its rows and columns, nnz(A), nnz(B),
  intermediate products (sum over A's entries of the lengths of B's rows), nnz(C) (the
  structural count: entries that cancel to zero are counted, as hetsparse counts them) and
  source.
Files already there are kept: nothing is made when `products.tsv` exists. `--quick` makes
problems small enough for a smoke run (10^5-10^7 products each); at full scale the largest
product of each family has 10^8-10^9. Per-family times go to stderr.

Needs numpy, scipy, pyamg and scikit-fem (pure Python; networkx and markov_clustering are not
used). Where no package registry is reachable, two wheels suffice beside numpy and scipy:
pyamg-5.4.1-cp312-cp312-manylinux_2_24_x86_64.manylinux_2_28_x86_64.whl (2.4 MB) and
scikit_fem-12.0.2-py3-none-any.whl (0.2 MB); e.g. `python3 -m zipfile -e WHEEL SITE` for each
and PYTHONPATH=SITE.
"""

import os
import sys
import time

# One BLAS thread per process: the families run in parallel, and PyAMG's small dense steps
# are several times slower with threads competing for the cores.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402
import scipy  # noqa: E402
import scipy.sparse as sp  # noqa: E402

SEED = 2026

# Sizes per family, (full, quick).
SIZES = {
    "poisson2d": (1400, 160),  # grid side
    "poisson3d": (140, 24),  # grid side
    # root-node's degree-2 pattern makes its setup 4x SA's (101 s at 140^3 on the H200 host)
    "rn-poisson3d": (100, 24),
    "elasticity2d": (600, 60),  # grid side
    "elasticity3d": (24, 8),  # P1 mesh: cells along the box's short sides
    "fem-p2": (10, 3),  # P2 mesh: cells along the box's short sides
    "mcl": (60_000, 1_500),  # nodes
    "rmat": (15, 11),  # scale: 2^scale vertices
}


def canonical(m):
    """`m` as float64 CSR with sorted, unique column indices and no stored zeros."""
    m = sp.csr_matrix(m, dtype=np.float64)
    m.sum_duplicates()
    m.sort_indices()
    m.eliminate_zeros()
    return m


def check_canonical(stem, m):
    rows, cols = m.shape
    ptr, idx = m.indptr, m.indices
    problem = None
    if ptr[0] != 0 or ptr[-1] != len(idx) or np.any(np.diff(ptr) < 0):
        problem = "bad row offsets"
    elif len(idx) and (idx.min() < 0 or idx.max() >= cols):
        problem = "column index out of range"
    elif np.any(m.data == 0) or not np.all(np.isfinite(m.data)):
        problem = "stored zero or non-finite value"
    else:
        # Within each row, columns strictly increase: every step between neighbours is
        # positive except where a new row starts.
        steps = np.diff(idx.astype(np.int64))
        starts = ptr[1:-1]
        starts = starts[(starts > 0) & (starts < len(idx))] - 1
        bad = steps <= 0
        bad[starts] = False
        if np.any(bad):
            problem = "columns not sorted and unique"
    if cols >= 2**32 or rows >= 2**32:
        problem = "dimension past u32"
    if problem:
        raise ValueError(f"{stem}: not canonical CSR ({problem})")


def products_of(a, b):
    """Intermediate products of A.B: for every entry A[i, k], the length of B's row k."""
    return int(np.diff(b.indptr).astype(np.int64)[a.indices].sum())


def structural_nnz(a, b):
    """Entries of A.B's structure (cancellations counted), without computing values."""
    try:
        from scipy.sparse import _sparsetools

        return int(
            _sparsetools.csr_matmat_maxnnz(
                a.shape[0], b.shape[1],
                a.indptr.astype(np.int64), a.indices.astype(np.int64),
                b.indptr.astype(np.int64), b.indices.astype(np.int64),
            )
        )
    except (ImportError, AttributeError, TypeError):
        pa = sp.csr_matrix((np.ones(a.nnz), a.indices, a.indptr), shape=a.shape)
        pb = sp.csr_matrix((np.ones(b.nnz), b.indices, b.indptr), shape=b.shape)
        return (pa @ pb).nnz


class Family:
    """Writes one family's operands and lists its products."""

    def __init__(self, out, source):
        self.out = out
        self.source = source
        self.matrices = {}
        self.lines = []
        self.summary = []

    def matrix(self, stem, m):
        """Writes `m` as `stem` (once) and returns it canonical."""
        if stem in self.matrices:
            return self.matrices[stem]
        m = canonical(m)
        check_canonical(stem, m)
        at = os.path.join(self.out, stem)
        m.indptr.astype("<u8").tofile(at + ".indptr")
        m.indices.astype("<u4").tofile(at + ".indices")
        m.data.astype("<f8").tofile(at + ".data")
        with open(at + ".shape", "w") as f:
            f.write(f"{m.shape[0]} {m.shape[1]}\n")
        self.matrices[stem] = m
        return m

    def product(self, name, a_stem, b_stem):
        a, b = self.matrices[a_stem], self.matrices[b_stem]
        if a.shape[1] != b.shape[0]:
            raise ValueError(f"{name}: A is {a.shape}, B is {b.shape}")
        products = products_of(a, b)
        self.lines.append((name, a_stem, b_stem, self.source))
        self.summary.append(
            (name, a.shape[0], b.shape[1], a.nnz, b.nnz, products, structural_nnz(a, b),
             self.source)
        )

    def galerkin(self, name, ml, a0=None):
        """Every level's A.P and R.(AP) of a PyAMG hierarchy; `a0` names level 0's A when it
        is already written."""
        for lvl, level in enumerate(ml.levels[:-1]):
            pre = f"{name}.l{lvl}"
            a_stem = a0 if (lvl == 0 and a0) else f"{pre}.A"
            a = self.matrix(a_stem, level.A)
            p = self.matrix(f"{pre}.P", level.P)
            self.matrix(f"{pre}.R", level.R)
            self.matrix(f"{pre}.AP", a @ p)
            self.product(f"{pre}.AP", a_stem, f"{pre}.P")
            self.product(f"{pre}.RAP", f"{pre}.R", f"{pre}.AP")


def solver(kind):
    """PyAMG's smoothed-aggregation solver (defaults), or its root-node solver with
    energy-minimising prolongation over a degree-2 pattern (PyAMG's default, degree 1, gives
    P the structure of SA's Jacobi-smoothed one, so the products would repeat SA's)."""
    import pyamg

    if kind == "sa":
        return pyamg.smoothed_aggregation_solver

    def rootnode(a, **kw):
        return pyamg.rootnode_solver(a, smooth=("energy", {"degree": 2}), **kw)

    return rootnode


def pyamg_source(extra=""):
    import pyamg

    return f"PyAMG {pyamg.__version__}{extra}"


def amg_poisson(out, quick, dim, kind):
    import pyamg

    n = SIZES.get(f"{kind}-poisson{dim}d", SIZES[f"poisson{dim}d"])[quick]
    a = pyamg.gallery.poisson((n,) * dim, format="csr")
    fam = Family(out, pyamg_source())
    np.random.seed(SEED)
    fam.galerkin(f"{kind}-poisson{dim}d", solver(kind)(a, max_coarse=10))
    return fam


def amg_elasticity2d(out, quick, kind):
    import pyamg

    n = SIZES["elasticity2d"][quick]
    a, b = pyamg.gallery.linear_elasticity((n, n), format="bsr")
    fam = Family(out, pyamg_source())
    np.random.seed(SEED)
    fam.galerkin(f"{kind}-elasticity2d", solver(kind)(a, B=b, max_coarse=10))
    return fam


def elasticity_stiffness(n, p2):
    """scikit-fem's linear-elasticity stiffness (E = 1000, nu = 0.3) of a 2 x 1 x 1 box meshed
    by 2n x n x n cubes of 6 tetrahedra, its face x = 0 clamped, with the rigid-body modes of
    the free degrees of freedom. Quadrature of order 2p-2 is exact for the stiffness."""
    import skfem
    from skfem.models.elasticity import lame_parameters, linear_elasticity

    mesh = skfem.MeshTet.init_tensor(
        np.linspace(0, 2, 2 * n + 1), np.linspace(0, 1, n + 1), np.linspace(0, 1, n + 1)
    )
    elem = skfem.ElementTetP2() if p2 else skfem.ElementTetP1()
    basis = skfem.Basis(mesh, skfem.ElementVector(elem), intorder=2 if p2 else 1)
    k = skfem.asm(linear_elasticity(*lame_parameters(1e3, 0.3)), basis)
    free = basis.complement_dofs(basis.get_dofs(lambda x: np.isclose(x[0], 0.0)))
    k = sp.csr_matrix(k)[free][:, free]
    # Vector dofs are interleaved (3 per location); clamping removes whole locations.
    x = basis.doflocs[:, free[0::3]]
    if not np.array_equal(free[0::3] + 1, free[1::3]):
        raise ValueError("scikit-fem's vector dofs are not interleaved")
    b = np.zeros((len(free), 6))
    for c in range(3):
        b[c::3, c] = 1.0
    # rotations: (-y, x, 0), (0, -z, y), (z, 0, -x)
    b[0::3, 3], b[1::3, 3] = -x[1], x[0]
    b[1::3, 4], b[2::3, 4] = -x[2], x[1]
    b[0::3, 5], b[2::3, 5] = x[2], -x[0]
    return k, b


def skfem_source():
    import skfem

    return f"scikit-fem {skfem.__version__}"


def fem_elasticity3d(out, quick, p2, hierarchies):
    """K, K.K, and K's AMG hierarchies: (name, solver kind) pairs."""
    tag = "fem-p2" if p2 else "fem-p1"
    k, b = elasticity_stiffness(SIZES["fem-p2" if p2 else "elasticity3d"][quick], p2=p2)
    fam = Family(out, skfem_source())
    fam.matrix(f"{tag}.K", k)
    fam.product(f"{tag}.KK", f"{tag}.K", f"{tag}.K")
    fam.source = pyamg_source(f" on {skfem_source()}")
    kb = sp.bsr_matrix(fam.matrices[f"{tag}.K"], blocksize=(3, 3))
    for name, kind in hierarchies:
        np.random.seed(SEED)
        fam.galerkin(name, solver(kind)(kb, B=b, max_coarse=30), a0=f"{tag}.K")
    return fam


def fem_elasticity3d_p1(out, quick):
    """P1 K, K.K, and K's SA and root-node hierarchies."""
    return fem_elasticity3d(out, quick, False, [("sa-elasticity3d", "sa"), ("rn-elasticity3d", "rn")])


def fem_elasticity3d_p2(out, quick):
    """P2 K, K.K, and K's SA hierarchy."""
    return fem_elasticity3d(out, quick, True, [("sa-elasticity3d-p2", "sa")])


def block_model(n, rng, sizes=(20, 120), degree_in=8.0, degree_out=2.0):
    """An undirected stochastic block model: blocks of uniformly drawn sizes, each pair inside
    a block joined with probability degree_in / size, pairs across blocks with probability
    degree_out / n (as networkx.stochastic_block_model draws them; pairs are drawn here with
    repetition and merged, which at these densities loses a fraction of a percent)."""
    lengths = []
    while sum(lengths) < n:
        lengths.append(int(rng.integers(sizes[0], sizes[1] + 1)))
    lengths[-1] -= sum(lengths) - n
    lengths = np.array([s for s in lengths if s > 1])
    n = int(lengths.sum())
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    pairs_in = lengths * (lengths - 1) // 2
    counts = rng.binomial(pairs_in, np.minimum(1.0, degree_in / lengths))
    block = np.repeat(np.arange(len(lengths)), counts)
    u = starts[block] + (rng.random(len(block)) * lengths[block]).astype(np.int64)
    v = starts[block] + (rng.random(len(block)) * lengths[block]).astype(np.int64)
    m_out = rng.binomial(n * (n - 1) // 2, degree_out / n)
    uo, vo = rng.integers(0, n, m_out), rng.integers(0, n, m_out)
    owner = np.repeat(np.arange(len(lengths)), lengths)
    across = owner[uo] != owner[vo]
    u = np.concatenate([u, uo[across]])
    v = np.concatenate([v, vo[across]])
    keep = u != v
    u, v = u[keep], v[keep]
    g = sp.csr_matrix((np.ones(2 * len(u)), (np.concatenate([u, v]), np.concatenate([v, u]))),
                      shape=(n, n))
    g.sum_duplicates()
    g.data[:] = 1.0
    return g


def normalize_columns(m):
    m = sp.csr_matrix(m)
    sums = np.asarray(m.sum(axis=0)).ravel()
    sums[sums == 0] = 1.0
    m.data /= sums[m.indices]
    return m


def prune(m, threshold):
    """Entries below `threshold` dropped, each column's largest entry kept (ties kept)."""
    m = sp.csc_matrix(m)
    m.sort_indices()
    lengths = np.diff(m.indptr)
    nonempty = lengths > 0
    col_max = np.zeros(m.shape[1])
    col_max[nonempty] = np.maximum.reduceat(m.data, m.indptr[:-1][nonempty])
    col_of = np.repeat(np.arange(m.shape[1]), lengths)
    keep = (m.data >= threshold) | (m.data == col_max[col_of])
    m.data[~keep] = 0.0
    m.eliminate_zeros()
    return sp.csr_matrix(m)


def mcl(out, quick):
    """Markov clustering's expansions at iterations 1, 2 and 3."""
    n = SIZES["mcl"][quick]
    rng = np.random.default_rng(SEED)
    g = block_model(n, rng)
    source = (f"MCL as markov_clustering 0.0.6 (scipy {scipy.__version__}) "
              f"on a block model (numpy {np.__version__})")
    fam = Family(out, source)
    m = normalize_columns(g + sp.identity(g.shape[0], format="csr"))
    for it in (1, 2, 3):
        stem = f"mcl-sbm.it{it}.M"
        m = fam.matrix(stem, m)
        fam.product(f"mcl-sbm.it{it}.MM", stem, stem)
        if it == 3:
            break
        expanded = m @ m
        inflated = expanded.power(2)
        m = prune(normalize_columns(inflated), 0.001)
    return fam


def rmat_graph(scale, rng):
    """An undirected R-MAT graph as Graph500's generator makes it (parameters a, b, c = 0.57,
    0.19, 0.19; 16 edges per vertex; vertices permuted at random; self loops and repeats
    dropped), every edge 1.0."""
    edges = 16 << scale
    u = np.zeros(edges, dtype=np.int64)
    v = np.zeros(edges, dtype=np.int64)
    for bit in range(scale):
        r = rng.random(edges)
        down = r >= 0.76  # c or d
        right = ((r >= 0.57) & (r < 0.76)) | (r >= 0.95)  # b or d
        u |= down.astype(np.int64) << bit
        v |= right.astype(np.int64) << bit
    perm = rng.permutation(1 << scale)
    u, v = perm[u], perm[v]
    keep = u != v
    u, v = u[keep], v[keep]
    n = 1 << scale
    g = sp.csr_matrix((np.ones(2 * len(u)), (np.concatenate([u, v]), np.concatenate([v, u]))),
                      shape=(n, n))
    g.sum_duplicates()
    g.data[:] = 1.0
    return g


def rmat(out, quick):
    """A.A of an undirected R-MAT graph (`rmat_graph`)."""
    g = rmat_graph(SIZES["rmat"][quick], np.random.default_rng(SEED))
    fam = Family(out, f"R-MAT (numpy {np.__version__})")
    fam.matrix("rmat.A", g)
    fam.product("rmat.AA", "rmat.A", "rmat.A")
    return fam


# PyAMG's bundled example matrices that are real (helmholtz_2D is complex).
EXAMPLES = ["airfoil", "bar", "knot", "local_disc_galerkin_diffusion", "recirc_flow",
            "unit_cube", "unit_square"]


def examples(out, quick):
    from pyamg.gallery import load_example

    fam = Family(out, pyamg_source(" load_example"))
    for name in EXAMPLES:
        stem = f"example-{name}"
        fam.matrix(f"{stem}.A", load_example(name)["A"])
        fam.product(f"{stem}.AA", f"{stem}.A", f"{stem}.A")
    return fam


# Every family: name -> (maker, arguments); listed longest first, so that a pool of fewer
# processes than families starts the slow ones first.
FAMILIES = {
    "sa-poisson3d": (amg_poisson, (3, "sa")),
    "fem-p1": (fem_elasticity3d_p1, ()),
    "fem-p2": (fem_elasticity3d_p2, ()),
    "rn-poisson3d": (amg_poisson, (3, "rn")),
    "sa-elasticity2d": (amg_elasticity2d, ("sa",)),
    "rn-elasticity2d": (amg_elasticity2d, ("rn",)),
    "sa-poisson2d": (amg_poisson, (2, "sa")),
    "rn-poisson2d": (amg_poisson, (2, "rn")),
    "mcl": (mcl, ()),
    "rmat": (rmat, ()),
    "examples": (examples, ()),
}

SUMMARY_HEADER = ("name", "rows", "cols", "nnz_a", "nnz_b", "products", "nnz_c", "source")


def run_family(name, out, quick):
    started = time.time()
    maker, args = FAMILIES[name]
    fam = maker(out, quick, *args)
    return name, fam.lines, fam.summary, time.time() - started


def main():
    args = sys.argv[1:]
    if not args or args[0].startswith("-"):
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    out = args[0]
    quick = "--quick" in args[1:]
    only = list(FAMILIES)
    jobs = os.cpu_count() or 1
    rest = args[1:]
    for flag, value in zip(rest, rest[1:] + [None]):
        if flag == "--only":
            only = [f for f in (value or "").split(",") if f]
            unknown = [f for f in only if f not in FAMILIES]
            if unknown or not only:
                sys.exit(f"real_products: unknown families {unknown}; known: {list(FAMILIES)}")
        elif flag == "--jobs":
            jobs = int(value)
    os.makedirs(out, exist_ok=True)
    manifest = os.path.join(out, "products.tsv")
    if os.path.exists(manifest):
        print(f"real_products: {manifest} exists, kept", file=sys.stderr)
        return
    started = time.time()
    results = {}
    if jobs > 1 and len(only) > 1:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(max_workers=min(jobs, len(only))) as pool:
            futures = [pool.submit(run_family, name, out, quick) for name in only]
            for future in futures:
                name, lines, summary, seconds = future.result()
                results[name] = (lines, summary)
                report(name, summary, seconds)
    else:
        for name in only:
            name, lines, summary, seconds = run_family(name, out, quick)
            results[name] = (lines, summary)
            report(name, summary, seconds)
    lines = [line for name in only for line in results[name][0]]
    summary = [row for name in only for row in results[name][1]]
    with open(os.path.join(out, "summary.tsv"), "w") as f:
        f.write("\t".join(SUMMARY_HEADER) + "\n")
        for row in summary:
            f.write("\t".join(str(v) for v in row) + "\n")
    # The manifest last: its presence says the folder is complete.
    with open(manifest + ".tmp", "w") as f:
        for line in lines:
            f.write("\t".join(line) + "\n")
    os.replace(manifest + ".tmp", manifest)
    print(
        f"real_products: {len(lines)} products of {len(only)} families in "
        f"{time.time() - started:.1f} s ({'quick' if quick else 'full'} scale)",
        file=sys.stderr,
    )


def report(name, summary, seconds):
    biggest = max(summary, key=lambda r: r[5])
    print(
        f"real_products: {name:<16} {len(summary):3} products in {seconds:6.1f} s, largest "
        f"{biggest[0]} with {biggest[5]:.2e} products, nnz(C) {biggest[6]:.2e}",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
