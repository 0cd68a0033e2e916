#!/usr/bin/env bash
# CPU-backend thread scaling (1, 2, 4, 8, 16 threads) and SuiteSparse:GraphBLAS (1 and 16
# threads) and cuSPARSE on the full benchmark matrices, for a GPU machine without a Rust
# toolchain. Run from a bundle folder that holds:
#   bin/hetsparse-bench   (`cargo build --release -p hetsparse-bench --bins` on a machine with the
#                          same glibc or older, then target/release/hetsparse-bench)
#   peers.py, device-scaling.sh   (copies of benches/peers/)
#   whl/*.whl             (python-graphblas and the dependencies the machine lacks; optional)
# Usage: bash device-scaling.sh OUTDIR [--quick] [--reference]
# Writes OUTDIR/log, cpu.tsv, peers.tsv and table.md (the table of `hetsparse-bench report`).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: device-scaling.sh OUTDIR [--quick] [--reference]}
# As `cargo xtask bench`: glibc keeps freed memory, so runs reuse pages (see xtask/src/bench.rs).
export GLIBC_TUNABLES=glibc.malloc.arena_max=1:glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736
shift
quick=() reference=() scale=full
for arg in "$@"; do
    case $arg in
        --quick) quick=(--quick) scale=quick ;;
        --reference) reference=(--reference) ;;
        *) echo "unknown argument $arg" >&2; exit 2 ;;
    esac
done
mkdir -p "$out"
exec > >(tee "$out/log") 2>&1

echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || echo "no GPU"
if compgen -G "$here/whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site "$here"/whl/*.whl && export PYTHONPATH=/tmp/site
fi
tool="$here/bin/hetsparse-bench"
matrices=/tmp/bench-matrices

# Ours first: the scaling series is what this run is for. Quick repetitions at full size keep
# the whole run short.
echo "== hetsparse thread scaling"
SECONDS=0
"$tool" time "${quick[@]}" "${reference[@]}" --threads 1,2,4,8,16 --ops spgemm,spmm32,spmv \
    --budget quick --out "$out/cpu.tsv"
echo "   ($SECONDS s)"

echo "== exporting the operands"
SECONDS=0
"$tool" export "${quick[@]}" --dir "$matrices"
echo "   ($SECONDS s)"

echo "== GraphBLAS (1 and 16 threads) and cuSPARSE"
SECONDS=0
PYTHONUNBUFFERED=1 python3 "$here/peers.py" --manifest "$matrices/$scale/manifest.tsv" \
    --threads 1,16 --only graphblas,cusparse --quick --out "$out/peers.tsv"
echo "   ($SECONDS s)"

files=("$out/cpu.tsv")
[ -s "$out/peers.tsv" ] && files+=("$out/peers.tsv")
"$tool" report "${files[@]}" | tee "$out/table.md"
