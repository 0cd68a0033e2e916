#!/usr/bin/env python3
"""cuSPARSE SpMV and SpMM (through CuPy) on the matrices `benches/benches/gpu_spgemm.rs` wrote.

Usage: python3 benches/peers/cusparse_spmv_spmm.py DIR [REPS]

For each class in DIR/sparse_dense.tsv: `A @ x` and `A @ B` (B with 32 columns, row-major as a
CuPy array is) with A, x and B already on the GPU and the result left there. As in the Rust
bench, each timing is a loop of LOOP calls between two CUDA events, divided by the calls: min /
median of REPS loops, microseconds. Also measures the device-to-device copy bandwidth (a 1 GiB
copy, bytes read plus written), the yardstick of SpMV's effective bandwidth. Prints a markdown
table.
"""
import statistics
import sys
from pathlib import Path

import numpy as np
import cupy as cp
import cupyx.scipy.sparse as cpsp

from cusparse_spgemm import load  # the same operand files

LOOP = 50
SPMM_COLUMNS = 32


def dense_input(n):
    """The values the Rust bench uses: 1 + (i % 13) / 4."""
    return 1.0 + (np.arange(n) % 13) * 0.25


def timed_loop(f, reps):
    start, end = cp.cuda.Event(), cp.cuda.Event()
    f()
    cp.cuda.Device().synchronize()
    out = []
    for _ in range(reps):
        start.record()
        for _ in range(LOOP):
            f()
        end.record()
        end.synchronize()
        out.append(cp.cuda.get_elapsed_time(start, end) * 1e3 / LOOP)
    return min(out), statistics.median(out)


def copy_bandwidth():
    n = (1 << 30) // 8
    src = cp.ones(n, dtype=cp.float64)
    dst = cp.empty_like(src)
    best, _ = timed_loop(lambda: dst.__setitem__(Ellipsis, src), 3)
    return 2 * n * 8 / (best * 1e-6) / 1e9


def main():
    d = Path(sys.argv[1])
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    props = cp.cuda.runtime.getDeviceProperties(0)
    bw = copy_bandwidth()
    print(f"cuSPARSE SpMV/SpMM through CuPy {cp.__version__}, CUDA runtime "
          f"{cp.cuda.runtime.runtimeGetVersion()}, {props['name'].decode()}; loops of {LOOP} calls, "
          f"min / median of {reps}, us; device-to-device copy {bw:.0f} GB/s (read + write)")
    print()
    print("| class | rows | nnz(A) | cuSPARSE spmv | spmv GB/s | spmv % of copy | cuSPARSE spmm | spmm GFLOP/s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for line in open(d / "sparse_dense.tsv"):
        name, rows, cols = line.split("\t")
        rows, cols = int(rows), int(cols)
        try:
            a = load(d, f"{name}.a", (rows, cols))
            ga = cpsp.csr_matrix(a)
            gx = cp.asarray(dense_input(cols))
            gb = cp.asarray(dense_input(cols * SPMM_COLUMNS).reshape(cols, SPMM_COLUMNS))
            vmin, vmed = timed_loop(lambda: ga @ gx, reps)
            bytes_ = a.nnz * 12 + (rows + 1) * 8 + (rows + cols) * 8
            gbs = bytes_ / (vmin * 1e-6) / 1e9
            mmin, mmed = timed_loop(lambda: ga @ gb, reps)
            gflops = 2 * a.nnz * SPMM_COLUMNS / (mmin * 1e-6) / 1e9
            print(f"| {name} | {rows} | {a.nnz} | {vmin:.1f} / {vmed:.1f} | {gbs:.0f} | "
                  f"{100 * gbs / bw:.0f} % | {mmin:.1f} / {mmed:.1f} | {gflops:.1f} |", flush=True)
            del ga, gx, gb
        except Exception as e:  # a peer's failure is a row, not the end of the run
            print(f"| {name} | {rows} | – | failed: {type(e).__name__}: {str(e)[:80]} | – | – | – | – |",
                  flush=True)
        finally:
            cp.get_default_memory_pool().free_all_blocks()


if __name__ == "__main__":
    main()
