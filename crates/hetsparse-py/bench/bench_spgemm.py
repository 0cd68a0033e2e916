"""hetsparse.spgemm from Python against scipy's ``A @ B`` and against the same product from Rust.

For every matrix class of hetsparse's benchmarks (the operands of ``cargo xtask bench``, from
``hetsparse.generate``), the median time of

- ``scipy``: ``A @ B`` (scipy's own SpGEMM, one thread);
- ``hetsparse``: ``hetsparse.spgemm(A, B, device)``, scipy operands in, scipy result out;
- ``rust``: the same product called from Rust on hetsparse matrices
  (``hetsparse._hetsparse.time_spgemm``: the operands made into matrices once, untimed, as
  ``spgemm`` makes them, then ``Context::spgemm`` timed), i.e. without the Python layer;
- ``cupy`` (``--cupy``): CuPy's ``A @ B`` including its transfers: the operands copied to
  the GPU, the product, the result copied back to a scipy matrix.

``--real DIR`` times the real-workload products instead (a folder written by
``benches/peers/real_products.py``: ``products.tsv`` names each product's A and B, stored as raw
``.indptr``/``.indices``/``.data``/``.shape`` files), each loaded as scipy CSR with 32-bit indices,
as scipy itself would build them; ``--classes`` then lists product names (default: all).

Usage: ``python bench/bench_spgemm.py [--quick] [--device auto] [--cupy] [--min-time 2] [--real DIR]``;
prints a Markdown table (``--best``: least times rather than medians). The timings alternate (one run of each, round after round; the
median of each), so that load from elsewhere touches every column alike.
"""

import argparse
import os
import statistics
import sys
import time

import numpy as np
import scipy.sparse as sp

import hetsparse as hs
from hetsparse import _hetsparse

# The sizes of `cargo xtask bench` (benches/src/cases.rs, docs/benchmarks.md "Matrices").
FULL = {
    "stencil3d": 15000,
    "banded": 1000000,
    "powerlaw": 32768,
    "uniform": 1000000,
    "road": 4000000,
    "skewed": 150000,
    "lp": 500000,
    "dense": 512,
}
SEED = 2026


def quick_size(cls, size):
    if cls == "dense":
        return 170
    if cls == "powerlaw":
        return 2048
    return size // 20


def seconds(fn):
    """A function timing one call of ``fn``; the result is freed after its time is taken, as
    in the Rust timing."""

    def run():
        t0 = time.perf_counter()
        out = fn()
        elapsed = time.perf_counter() - t0
        del out
        return elapsed

    return run


def milliseconds(t):
    """Seconds as milliseconds, to three significant digits (small products take 0.05 ms)."""
    return f"{t * 1e3:.3g}"


def interleaved(timers, min_runs, min_time, best=False):
    """Median (``best``: least) seconds of each timer (a function returning the seconds of one
    run), after one untimed run each: round after round of one run of each, so that a change
    in the machine's load touches them all alike; at least ``min_runs`` rounds and
    ``min_time`` seconds."""
    for t in timers.values():
        t()
    times = {name: [] for name in timers}
    start = time.perf_counter()
    rounds = 0
    while rounds < min_runs or time.perf_counter() - start < min_time:
        for name, t in timers.items():
            times[name].append(t())
        rounds += 1
        if rounds >= 50:
            break
    pick = min if best else statistics.median
    return {name: pick(v) for name, v in times.items()}


def read_raw(folder, stem):
    """A raw operand of ``real_products.py`` as scipy CSR, float64, 32-bit indices."""
    path = os.path.join(folder, stem)
    with open(path + ".shape") as f:
        rows, cols = (int(x) for x in f.read().split())
    indptr = np.fromfile(path + ".indptr", dtype=np.uint64)
    indices = np.fromfile(path + ".indices", dtype=np.uint32)
    data = np.fromfile(path + ".data", dtype=np.float64)
    index = np.int32 if indptr[-1] < 2**31 and max(rows, cols) < 2**31 else np.int64
    return sp.csr_matrix(
        (data, indices.astype(index), indptr.astype(index)), shape=(rows, cols)
    )


def real_products(folder, names):
    """(name, A, B) of each product of ``folder/products.tsv`` (all when ``names`` is empty)."""
    with open(os.path.join(folder, "products.tsv")) as f:
        lines = [line.rstrip("\n").split("\t") for line in f if line.strip()]
    for name, a_stem, b_stem, *_ in lines:
        if names and name not in names:
            continue
        a = read_raw(folder, a_stem)
        yield name, a, (a if b_stem == a_stem else read_raw(folder, b_stem))


def generated_products(classes, quick):
    """(class, A, B) of each generated class, at the benchmark's sizes."""
    for cls in classes:
        size = FULL[cls] if not quick else quick_size(cls, FULL[cls])
        a, b = hs.generate(cls, size, seed=SEED)
        if cls != "lp":
            b = a  # the square classes compute A·A
        yield cls, a, b


def cupy_product():
    import cupy
    import cupyx.scipy.sparse as cpx

    def product(a, b):
        c = (cpx.csr_matrix(a) @ cpx.csr_matrix(b)).get()
        cupy.cuda.Device().synchronize()
        return c

    return product


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="a 20th of the sizes")
    p.add_argument("--device", default="auto")
    p.add_argument("--cupy", action="store_true", help="also time CuPy's product with transfers")
    p.add_argument("--no-scipy", action="store_true", help="leave scipy out")
    p.add_argument("--min-time", type=float, default=2.0, help="seconds of timed runs per cell")
    p.add_argument("--min-runs", type=int, default=3)
    p.add_argument(
        "--best",
        action="store_true",
        help="the least time of the runs, not the median (for a machine shared with other work)",
    )
    p.add_argument("--classes", default=None, help="classes, or with --real product names")
    p.add_argument("--real", metavar="DIR", help="the real-workload products of DIR instead")
    args = p.parse_args()
    if args.real:
        names = set(args.classes.split(",")) if args.classes else set()
        products = real_products(args.real, names)
    else:
        products = generated_products((args.classes or ",".join(FULL)).split(","), args.quick)

    cupy = cupy_product() if args.cupy else None
    print(f"devices: {[d['id'] for d in hs.devices(args.device) if d['used']]}", file=sys.stderr)
    head = ["class", "A", "nnz(A)", "nnz(C)"]
    head += [] if args.no_scipy else ["scipy ms"]
    head += ["hetsparse ms", "rust ms"]
    head += ["cupy ms"] if cupy else []
    head += [] if args.no_scipy else ["scipy / hetsparse"]
    head += ["hetsparse / rust"]
    head += ["cupy / hetsparse"] if cupy else []
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * 2 + "---:|" * (len(head) - 2))
    for cls, a, b in products:
        c = hs.spgemm(a, b, device=args.device)
        same = b is a
        pa = hs._parts(a, a.dtype)
        pb = pa if same else hs._parts(b, b.dtype)
        timers = {
            "hetsparse": seconds(lambda: hs.spgemm(a, b, device=args.device)),
            "rust": lambda: _hetsparse.time_spgemm(pa, pb, args.device, 1, same)[0],
        }
        if not args.no_scipy:
            timers["scipy"] = seconds(lambda: a @ b)
        if cupy:
            timers["cupy"] = seconds(lambda: cupy(a, b))
        t = interleaved(timers, args.min_runs, args.min_time, args.best)
        t_hs, t_rust = t["hetsparse"], t["rust"]
        t_sp, t_cp = t.get("scipy"), t.get("cupy")
        row = [cls, f"{a.shape[0]}×{a.shape[1]}", str(a.nnz), str(c.nnz)]
        if not args.no_scipy:
            row.append(milliseconds(t_sp))
        row += [milliseconds(t_hs), milliseconds(t_rust)]
        if cupy:
            row.append(milliseconds(t_cp))
        if not args.no_scipy:
            row.append(f"{t_sp / t_hs:.2f}×")
        row.append(f"{t_hs / t_rust:.2f}")
        if cupy:
            row.append(f"{t_cp / t_hs:.2f}×")
        print("| " + " | ".join(row) + " |", flush=True)
        del a, b, c


if __name__ == "__main__":
    main()
