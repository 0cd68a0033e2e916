#!/usr/bin/env python3
"""Times the peers of hetsparse on the operands that `hetsparse-bench export` wrote.

    peers.py --manifest DIR/<scale>/manifest.tsv --threads N[,N...] --out FILE [--quick]
             [--only scipy,mkl,graphblas,cusparse] [--classes road,banded] [--suffix S]
             [--ops spgemm,spmm32,spmv]

Peers: scipy (single-threaded SpGEMM), Intel MKL through sparse_dot_mkl (PyPI `mkl` +
`sparse-dot-mkl`), SuiteSparse:GraphBLAS through python-graphblas, and cuSPARSE through CuPy
when CuPy sees a GPU. A peer that cannot be imported is written as missing, not an error.

MKL's SpGEMM is timed twice: `mkl` is sparse_dot_mkl's default call, which leaves the rows of
C unsorted, and `mkl:sorted` asks it to sort them (`reorder_output=True`), as scipy, GraphBLAS,
cuSPARSE and hetsparse always do.

With several counts (`--threads 1,16`), MKL and GraphBLAS run once per count, named `mkl@1`,
`mkl@16`, ...; scipy and cuSPARSE, which have no thread setting, run once.

Every peer runs with N threads (MKL_NUM_THREADS, OMP_NUM_THREADS, GraphBLAS nthreads) and is
timed like `hetsparse-bench time` times our backends (benches/src/timing.rs): one checked
warm-up run and untimed runs until 1 s has passed (quick: 0.1 s), then repeated runs until at
least 5 runs and 2 s (quick: 3 runs and 0.2 s), at most 200 (quick: 1000); the median is
reported. The flop counts come from the manifest, so both
sides of a ratio divide the same numbers. SpGEMM results are checked against the manifest's
nnz(C): cuSPARSE (CUDA 13) returns an empty product once A·B has more than 2^31 intermediate
products, and such a run must not post a time.

The manifest's `class` names the row of the table. For real matrices
(`hetsparse-bench export --matrix FILE...`) it is the file's stem, `a_file` is the file's
absolute path (read where it is), and `b_file` the same path, or for a rectangular A the name
of its transpose written beside the manifest, as the generated operands' files are. Every
operand is read as float64, as hetsparse reads every field, `integer` and `pattern` included.
For real-workload products (`hetsparse-bench export --real DIR`), `a_file` and `b_file` are
the absolute paths of raw operands' stems (no `.mtx`: `STEM.indptr`, `.indices`, `.data`,
`.shape`, as benches/peers/real_products.py writes them), and B is not A's square.

scipy drops the entries of a product that cancel to exactly zero (the others keep them, as
hetsparse does), so its SpGEMM may have fewer entries than the manifest's nnz(C): that passes
the check, an empty product does not.

Output: the result file format of benches/src/results.rs (tab-separated).
"""

import argparse
import os
import statistics
import sys
import time
import warnings

PEERS = ["scipy", "mkl", "graphblas", "cusparse"]
SPMM_COLUMNS = 32


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--manifest", required=True)
    p.add_argument("--threads", required=True, help="a count or a comma-separated list")
    p.add_argument("--out", required=True)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--only", default=",".join(PEERS))
    p.add_argument("--classes", default="", help="only these classes of the manifest")
    p.add_argument("--suffix", default="")
    p.add_argument("--ops", default=",".join(OPERATIONS), help="only these operations")
    args = p.parse_args()
    try:
        args.threads = [int(n) for n in args.threads.split(",")]
    except ValueError:
        p.error(f"--threads {args.threads!r} is not a list of counts")
    if min(args.threads) < 1:
        p.error("--threads must be positive")
    args.only = [n for n in args.only.split(",") if n]
    args.classes = [c for c in args.classes.split(",") if c]
    args.ops = [o for o in args.ops.split(",") if o]
    if [o for o in args.ops if o not in OPERATIONS]:
        p.error(f"unknown operations in --ops; known: {OPERATIONS}")
    unknown = [n for n in args.only if n not in PEERS]
    if unknown:
        p.error(f"unknown peers {unknown}; known: {PEERS}")
    return args


def prepare_environment(threads):
    """Sets thread counts before numpy or MKL load, and puts the environment's lib/ (where the
    PyPI `mkl` package installs libmkl_rt) on LD_LIBRARY_PATH by re-executing this script,
    since the dynamic loader reads that variable only at start-up."""
    for var in ["MKL_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"]:
        os.environ[var] = str(threads)
    lib = os.path.join(sys.prefix, "lib")
    paths = [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(":") if p]
    if os.path.isdir(lib) and lib not in paths and not os.environ.get("HETSPARSE_PEERS_REEXEC"):
        os.environ["LD_LIBRARY_PATH"] = ":".join([lib] + paths)
        os.environ["HETSPARSE_PEERS_REEXEC"] = "1"
        os.execv(sys.executable, [sys.executable] + sys.argv)


def read_manifest(path):
    with open(path) as f:
        header = f.readline().rstrip("\n").split("\t")
        rows = [dict(zip(header, line.rstrip("\n").split("\t"))) for line in f if line.strip()]
    for r in rows:
        for k in ["size", "rows", "cols", "nnz_a", "products", "nnz_c",
                  "flops_spgemm", "flops_spmm32", "flops_spmv"]:
            r[k] = int(r[k])
    return rows


def operand_paths(manifest, case):
    """The files of a manifest line's A and B. os.path.join keeps an absolute path (a real
    matrix, read where it is) and puts a bare name (an exported operand) in the manifest's
    folder."""
    folder = os.path.dirname(os.path.abspath(manifest))
    return os.path.join(folder, case["a_file"]), os.path.join(folder, case["b_file"])


def read_operand(np, sp, mmread, path):
    """A Matrix Market file as a float64 CSR matrix with sorted indices: an `integer` or
    `pattern` file would otherwise be multiplied in another type than hetsparse's f64. A path
    without `.mtx` whose `.shape` file exists is a raw operand's stem."""
    if not path.endswith(".mtx") and os.path.exists(path + ".shape"):
        with open(path + ".shape") as f:
            rows, cols = (int(v) for v in f.read().split())
        return sp.csr_matrix(
            (np.fromfile(path + ".data", dtype="<f8"),
             np.fromfile(path + ".indices", dtype="<u4").astype(np.int64),
             np.fromfile(path + ".indptr", dtype="<u8").astype(np.int64)),
            shape=(rows, cols))
    m = sp.csr_matrix(mmread(path), dtype=np.float64)
    m.sort_indices()
    return m


def dense_operand(np, rows):
    """The SpMM operand of benches/src/cases.rs: entry (i, j) = ((31 i + 7 j) mod 97 + 1) / 97,
    row-major."""
    i = np.arange(rows, dtype=np.int64)[:, None]
    j = np.arange(SPMM_COLUMNS, dtype=np.int64)[None, :]
    return np.ascontiguousarray(((i * 31 + j * 7) % 97 + 1) / 97.0)


class Budget:
    def __init__(self, quick):
        self.min_runs, self.min_time, self.max_runs = (3, 0.2, 1000) if quick else (5, 2.0, 200)
        self.warm_up = 0.1 if quick else 1.0

    def measure(self, run, check):
        """One warm-up run whose result `check` validates (it returns an error text or None),
        untimed runs until `warm_up` seconds have passed, then timed runs; returns (median
        seconds, note)."""
        warming = time.perf_counter()
        problem = check(run())
        if problem:
            return None, problem
        while time.perf_counter() - warming < self.warm_up:
            run()
        seconds = []
        started = time.perf_counter()
        while len(seconds) < self.max_runs and (
            len(seconds) < self.min_runs or time.perf_counter() - started < self.min_time
        ):
            t = time.perf_counter()
            run()
            seconds.append(time.perf_counter() - t)
        return statistics.median(seconds), ""


# Each peer: a loader that returns a Peer or raises (ImportError, RuntimeError, ...) with the
# reason it is missing.

class Peer:
    def __init__(self, version, make, nnz_of, set_threads=None):
        self.version = version
        # make(A, B, X, x) -> {operation: zero-argument callable running it}; a key
        # `operation:variant` is a variant of the peer, written as implementation `peer:variant`
        self.make = make
        # nnz_of(SpGEMM result) -> its stored entries
        self.nnz_of = nnz_of
        # set_threads(n), for peers whose thread count can change in-process
        self.set_threads = set_threads
        # whether SpGEMM drops entries that cancel to zero (scipy)
        self.drops_zeros = False

def load_scipy(threads):
    import scipy
    import scipy.sparse  # noqa: F401

    def make(a, b, x_dense, x_vec):
        return {
            "spgemm": lambda: a @ b,
            "spmm32": lambda: a @ x_dense,
            "spmv": lambda: a @ x_vec,
        }
    peer = Peer(f"scipy {scipy.__version__} (SpGEMM single-threaded)", make, lambda c: c.nnz)
    peer.drops_zeros = True
    return peer


def load_mkl(threads):
    import sparse_dot_mkl
    sparse_dot_mkl.mkl_set_num_threads(threads)
    version = sparse_dot_mkl.mkl_get_version_string()

    def make(a, b, x_dense, x_vec):
        dot = sparse_dot_mkl.dot_product_mkl
        return {
            # MKL's default leaves each row of C unsorted; ours and every other peer's are
            # sorted, so the sorted variant is the like-for-like one.
            "spgemm": lambda: dot(a, b),
            "spgemm:sorted": lambda: dot(a, b, reorder_output=True),
            "spmm32": lambda: dot(a, x_dense),
            "spmv": lambda: dot(a, x_vec),
        }
    return Peer(f"{version} via sparse_dot_mkl {sparse_dot_mkl.__version__}", make,
                lambda c: c.nnz, sparse_dot_mkl.mkl_set_num_threads)


def load_graphblas(threads):
    import graphblas as gb
    gb.init("suitesparse", blocking=True)
    gb.ss.config["nthreads"] = threads
    from graphblas import semiring

    def make(a, b, x_dense, x_vec):
        ga = gb.io.from_scipy_sparse(a)
        gb_ = ga if b is a else gb.io.from_scipy_sparse(b)
        gx = gb.Matrix.from_dense(x_dense)
        gv = gb.Vector.from_dense(x_vec)
        pt = semiring.plus_times
        return {
            "spgemm": lambda: ga.mxm(gb_, pt).new(),
            "spmm32": lambda: ga.mxm(gx, pt).new(),
            "spmv": lambda: ga.mxv(gv, pt).new(),
        }
    version = f"SuiteSparse:GraphBLAS {'.'.join(map(str, gb.ss.about['library_version']))} via python-graphblas {gb.__version__}"
    def set_threads(n):
        gb.ss.config["nthreads"] = n
    return Peer(version, make, lambda c: c.nvals, set_threads)


def load_cusparse(threads):
    import cupy
    import cupyx.scipy.sparse as csp
    if cupy.cuda.runtime.getDeviceCount() < 1:
        raise RuntimeError("CuPy sees no GPU")
    name = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    sync = cupy.cuda.Device().synchronize

    def synced(f):
        def run():
            r = f()
            sync()
            return r
        return run

    def make(a, b, x_dense, x_vec):
        da = csp.csr_matrix(a)
        db = da if b is a else csp.csr_matrix(b)
        dx = cupy.asarray(x_dense)
        dv = cupy.asarray(x_vec)
        return {
            "spgemm": synced(lambda: da @ db),
            "spmm32": synced(lambda: da @ dx),
            "spmv": synced(lambda: da @ dv),
        }
    version = f"cuSPARSE via CuPy {cupy.__version__} (CUDA runtime {cupy.cuda.runtime.runtimeGetVersion()}) on {name}"
    return Peer(version, make, lambda c: c.nnz)


LOADERS = {"scipy": load_scipy, "mkl": load_mkl, "graphblas": load_graphblas,
           "cusparse": load_cusparse}


def clean(text):
    return " ".join(str(text).split())[:300]


def main():
    args = parse_args()
    prepare_environment(max(args.threads))
    import numpy as np
    import scipy.io
    import scipy.sparse as sp
    # scipy 1.17 announces that mmread will return sparse arrays; we convert to csr_matrix,
    # which every peer takes, either way.
    warnings.filterwarnings("ignore", message="The default value for `spmatrix`")

    budget = Budget(args.quick)
    cases = [c for c in read_manifest(args.manifest)
             if not args.classes or c["class"] in args.classes]
    counts = ",".join(map(str, args.threads))
    lines = [f"# peers: threads {counts}, {'quick' if args.quick else 'full'} timing"]
    records = []
    peers = {}
    for name in args.only:
        try:
            peer = LOADERS[name](max(args.threads))
        except Exception as e:  # a missing or broken peer is reported, not fatal
            reason = clean(f"{type(e).__name__}: {e}")
            print(f"{name}: missing ({reason})", file=sys.stderr)
            records.append((name + args.suffix, "*", "*", "", 0, reason))
            continue
        print(f"{name}: {peer.version}", file=sys.stderr)
        lines.append(f"# {name}{args.suffix}: {peer.version}")
        peers[name] = peer

    for case in cases:
        a_path, b_path = operand_paths(args.manifest, case)
        a = read_operand(np, sp, scipy.io.mmread, a_path)
        b = a if b_path == a_path else read_operand(np, sp, scipy.io.mmread, b_path)
        x_dense = dense_operand(np, case["cols"])
        x_vec = np.ascontiguousarray(x_dense[:, 0])
        for name, peer in peers.items():
            series = args.threads if peer.set_threads and len(args.threads) > 1 else [None]
            try:
                runs = peer.make(a, b, x_dense, x_vec)
            except Exception as e:
                note = clean(f"setup failed: {type(e).__name__}: {e}")
                for n in series:
                    label = name + args.suffix + (f"@{n}" if n else "")
                    for op in args.ops:
                        records.append((label, case["class"], op, "", case["flops_" + op], note))
                continue
            for n in series:
                if n:
                    peer.set_threads(n)
                for key, run in runs.items():
                    op, _, variant = key.partition(":")
                    if op not in args.ops:
                        continue
                    label = name + (f":{variant}" if variant else "") + args.suffix + (
                        f"@{n}" if n else "")
                    records.append(measure_op(budget, peer, run, label, case, op))
            if peer.set_threads and len(series) > 1:
                peer.set_threads(max(args.threads))

    with open(args.out, "w") as f:
        f.write("implementation\tclass\toperation\tseconds\tflops\tnote\n")
        for line in lines:
            f.write(line + "\n")
        for r in records:
            f.write("\t".join(str(v) for v in r) + "\n")


OPERATIONS = ["spgemm", "spmm32", "spmv"]


def measure_op(budget, peer, run, label, case, op):
    """Times one operation; returns its result-file record."""
    if op == "spgemm":
        check = nnz_check(peer.nnz_of, case["nnz_c"], case["products"], peer.drops_zeros)
    else:
        check = lambda result: None  # noqa: E731
    try:
        seconds, note = budget.measure(run, check)
    except Exception as e:
        seconds, note = None, clean(f"{type(e).__name__}: {e}")
    flops = case["flops_" + op]
    shown = f"{seconds:.4f} s {flops / seconds / 1e9:8.3f} GFLOP/s" if seconds else f"failed: {note}"
    print(f"{label:<16} {op:<7} {case['class']:<10} {shown}", file=sys.stderr)
    return (label, case["class"], op, f"{seconds:.9f}" if seconds else "", flops, note)


def nnz_check(nnz_of, expected, products, drops_zeros=False):
    def check(result):
        found = int(nnz_of(result))
        if found == expected or (drops_zeros and 0 < found < expected):
            return None
        if found == 0:
            return (f"empty product: nnz 0, expected {expected} "
                    f"({products} intermediate products{', past 2^31' if products > 2**31 else ''})")
        return f"wrong result: nnz {found}, expected {expected}"
    return check


if __name__ == "__main__":
    main()
