"""cuSPARSE SpGEMM through CuPy on the operands the `esc` bench wrote (HETSPARSE_BENCH_MTX_DIR).

    python3 cusparse_peer.py DIR [REPEATS]

For each DIR/CLASS.mtx, times C = A @ A in double precision: `device` is the product alone with
A already on the GPU (CUDA events), `with transfers` adds copying A to the GPU and C back, which
is what one call of hetsparse's ESC SpGEMM includes. Prints the median of REPEATS runs (default
10) after one warm-up, and nnz(C), to check against hetsparse's product.
"""

import glob
import os
import sys
import time

import cupy as cp
import cupyx.scipy.sparse as cpsp
import numpy as np
import scipy.io
import scipy.sparse as sp


def main():
    folder = sys.argv[1]
    repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    print(f"cupy {cp.__version__}, device {cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}")
    for path in sorted(glob.glob(os.path.join(folder, "*.mtx"))):
        a_host = sp.csr_matrix(scipy.io.mmread(path), dtype=np.float64)
        a_host.sort_indices()
        a = cpsp.csr_matrix(a_host)
        c = a @ a  # warm-up (plans, kernels)
        cp.cuda.Device().synchronize()
        device_ms = []
        for _ in range(repeats):
            start, stop = cp.cuda.Event(), cp.cuda.Event()
            start.record()
            c = a @ a
            stop.record()
            stop.synchronize()
            device_ms.append(cp.cuda.get_elapsed_time(start, stop))
        total_ms = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            ad = cpsp.csr_matrix(a_host)
            cd = ad @ ad
            c_host = cd.get()
            total_ms.append((time.perf_counter() - t0) * 1e3)
        name = os.path.basename(path)[:-4]
        print(
            f"{name}: n {a_host.shape[0]}, nnz(A) {a_host.nnz}, nnz(C) {c.nnz}, "
            f"device {np.median(device_ms):.3f} ms, with transfers {np.median(total_ms):.3f} ms"
        )


if __name__ == "__main__":
    main()
