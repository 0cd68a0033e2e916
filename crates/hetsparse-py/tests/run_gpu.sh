#!/usr/bin/env bash
# The Python package on the GPU machine (numpy, scipy and CuPy installed; no network, no Rust):
# installs the wheel built elsewhere with `--features cuda,opencl` into a virtual environment
# that sees the system's packages, runs the tests on `cuda` and `opencl` (NVIDIA's OpenCL), then
# the benchmark: hetsparse.spgemm on cuda against CuPy's `A @ B` including its transfers, and
# the same on opencl.
#
# Build the wheel (on a machine with Rust, from crates/hetsparse-py):
#   CUDA_LIBRARY_PATH=$PWD/../../../shared/cuda-stub maturin build --release --strip --auditwheel skip \
#       --features cuda,opencl --out ../../dist-gpu
#   pip download pytest -d ../../dist-gpu     # in case the GPU machine lacks pytest
# Run (from the repository root, dist-gpu/ beside it):
#   crates/hetsparse-py/tests/run_gpu.sh [WHEEL_DIR] [--quick]
# Results go to $OUT (or /tmp/hetsparse-gpu): pytest.txt, bench-cuda.md, bench-opencl.md.
set -euo pipefail
cd "$(dirname "$0")/../../.."
wheels=${1:-dist-gpu}
quick=${2:-}
out=${OUT:-/tmp/hetsparse-gpu}
mkdir -p "$out"
python=${PYTHON:-python3}

work=$(mktemp -d)
# Installed into a folder of its own on PYTHONPATH, beside the system's packages: a virtual
# environment does not see packages installed in the user's site folder (numpy, scipy and CuPy
# are there on some GPU machines).
py="$python"
"$py" -m pip install -q --force-reinstall --no-index --no-deps --target "$work/site" --find-links "$wheels" hetsparse
if ! "$py" -c 'import pytest' 2>/dev/null; then
    "$py" -m pip install -q --no-index --target "$work/site" --find-links "$wheels" pytest
fi
export PYTHONPATH="$work/site${PYTHONPATH:+:$PYTHONPATH}"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt" || true
"$py" -c 'import hetsparse
print("features:", hetsparse.FEATURES)
for d in hetsparse.devices():
    print(d)' | tee "$out/devices.txt"

cd crates/hetsparse-py
status=0
HETSPARSE_PY_DEVICES=cuda,opencl "$py" -m pytest tests -q -rs 2>&1 | tee "$out/pytest.txt" \
    || status=1
if grep -qE '[0-9]+ (skipped|deselected|xfailed)' "$out/pytest.txt"; then
    echo "FAILURE: some tests were skipped" >&2
    status=1
fi

"$py" bench/bench_spgemm.py --device cuda --cupy $quick | tee "$out/bench-cuda.md" || status=1
"$py" bench/bench_spgemm.py --device opencl --no-scipy $quick | tee "$out/bench-opencl.md" \
    || status=1
exit $status
