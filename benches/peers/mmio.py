#!/usr/bin/env python3
"""scipy.io.mmread / mmwrite on the same files as hetsparse's Matrix Market benchmark.

usage: mmio.py --threads N [--repeat R] FILE...

For each FILE prints one line `FILE<TAB>read_seconds<TAB>write_seconds`: the best of R reads
(mmread, which returns a COO matrix, as hetsparse's `read` does) and of R writes (mmwrite of what
was read, `general` like hetsparse's writer, to a temporary file beside FILE that is removed).
scipy parses with its fast_matrix_market module, whose thread count is set here to N.
"""
import argparse
import os
import sys
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("files", nargs="+")
    args = ap.parse_args()
    import scipy.io
    import scipy.io._fast_matrix_market as fmm

    # The module's own knob (what threadpoolctl sets): 0 means every core.
    fmm.PARALLELISM = args.threads
    for path in args.files:
        best_read = float("inf")
        m = None
        for _ in range(args.repeat):
            t = time.perf_counter()
            m = scipy.io.mmread(path)
            best_read = min(best_read, time.perf_counter() - t)
        out = path + ".scipy-out.mtx"
        best_write = float("inf")
        field = "pattern" if "pattern" in os.path.basename(path) else None
        for _ in range(args.repeat):
            t = time.perf_counter()
            scipy.io.mmwrite(out, m, symmetry="general", field=field)
            best_write = min(best_write, time.perf_counter() - t)
        os.remove(out)
        print(f"{path}\t{best_read:.6f}\t{best_write:.6f}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
