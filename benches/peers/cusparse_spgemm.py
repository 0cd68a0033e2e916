#!/usr/bin/env python3
"""cuSPARSE SpGEMM (through CuPy) on the operands that `benches/benches/gpu_spgemm.rs` wrote.

Usage: python3 benches/peers/cusparse_spgemm.py DIR [REPS]

For each class in DIR/manifest.tsv: "device" is `A @ B` with A and B already on the GPU, timed
with CUDA events; "whole call" adds copying A and B to the GPU and C back to host memory (what a
call of ours from host memory does). The result's entry count is checked against the one the
CPU backend found: cuSPARSE returns an empty product past 2^31 intermediate products, and such a
row says so instead of posting a time. Prints a markdown table.
"""
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import cupy as cp
import cupyx.scipy.sparse as cpsp
import scipy.sparse as sp


def load(d, stem, shape):
    indptr = np.fromfile(d / f"{stem}.indptr", dtype="<u8")
    indices = np.fromfile(d / f"{stem}.indices", dtype="<u4")
    data = np.fromfile(d / f"{stem}.data", dtype="<f8")
    if indptr[-1] >= 2**31:
        raise ValueError(f"{stem}: {indptr[-1]} entries do not fit cuSPARSE's 32-bit indices")
    return sp.csr_matrix(
        (data, indices.astype(np.int32), indptr.astype(np.int32)), shape=shape
    )


def timed_device(f, reps):
    start, end = cp.cuda.Event(), cp.cuda.Event()
    out = []
    for _ in range(reps):
        start.record()
        f()
        end.record()
        end.synchronize()
        out.append(cp.cuda.get_elapsed_time(start, end))
    return min(out), statistics.median(out)


def timed_host(f, reps):
    out = []
    for _ in range(reps):
        t = time.perf_counter()
        f()
        cp.cuda.Device().synchronize()
        out.append((time.perf_counter() - t) * 1e3)
    return min(out), statistics.median(out)


def main():
    d = Path(sys.argv[1])
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    print(f"cuSPARSE through CuPy {cp.__version__}, CUDA runtime {cp.cuda.runtime.runtimeGetVersion()}, "
          f"{cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}; min / median of {reps}, ms")
    print()
    print("| class | products | nnz(C) expected | nnz(C) cuSPARSE | device | whole call | device GFLOP/s |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for line in open(d / "manifest.tsv"):
        name, rows, inner, cols, square, products, nnz = line.split("\t")
        rows, inner, cols, products, nnz = int(rows), int(inner), int(cols), int(products), int(nnz)
        try:
            a = load(d, f"{name}.a", (rows, inner))
            b = a if square == "1" else load(d, f"{name}.b", (inner, cols))
            ga = cpsp.csr_matrix(a)
            gb = ga if square == "1" else cpsp.csr_matrix(b)
            c = ga @ gb
            got = int(c.nnz)
            del c
            cp.get_default_memory_pool().free_all_blocks()
            if got != nnz:
                print(f"| {name} | {products} | {nnz} | {got} (wrong) | – | – | – |", flush=True)
                continue
            dmin, dmed = timed_device(lambda: ga @ gb, reps)

            def whole():
                xa = cpsp.csr_matrix(a)
                xb = xa if square == "1" else cpsp.csr_matrix(b)
                (xa @ xb).get()

            hmin, hmed = timed_host(whole, reps)
            print(f"| {name} | {products} | {nnz} | {got} | {dmin:.2f} / {dmed:.2f} | "
                  f"{hmin:.2f} / {hmed:.2f} | {2 * products / dmin / 1e6:.1f} |", flush=True)
        except Exception as e:  # a peer's failure is a row, not the end of the run
            print(f"| {name} | {products} | {nnz} | failed: {type(e).__name__}: {str(e)[:80]} | – | – | – |",
                  flush=True)
        finally:
            cp.get_default_memory_pool().free_all_blocks()


if __name__ == "__main__":
    main()
