#!/usr/bin/env bash
# Download the wheels a GPU machine without a package registry needs for
# `weirdnet bench gpu` (the flash-linear-attention peers) into wheels/ (git-ignored), for
# Python 3.12 on x86-64 Linux (override with WHEEL_PYTHON / WHEEL_PLATFORM). The GPU
# machine's image already has torch, triton, transformers (>= 5.6.2) and einops, so only
# fla's two wheels travel; they are pure Python (fla's kernels are Triton, compiled there).
# lab/benchmarks/gpu.sh installs whatever is in wheels/ (--no-index --no-deps) before it runs.
# usage: lab/benchmarks/fetch_gpu_wheels.sh [DIR]   (default: wheels/ of this checkout)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-wheels}
python=${PYTHON:-python3}
limit_mib=64
wheels=("fla-core==0.6.0" "flash-linear-attention==0.6.0")
mkdir -p "$dir"
"$python" -m pip download --quiet --no-deps --only-binary=:all: \
    --python-version "${WHEEL_PYTHON:-3.12}" --implementation cp \
    --platform "${WHEEL_PLATFORM:-manylinux_2_28_x86_64}" --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d "$dir" "${wheels[@]}"
# Two versions of one package would stop the --no-deps install there: keep the asked ones.
for f in "$dir"/*.whl; do
    case $(basename "$f") in
        fla_core-0.6.0-*|flash_linear_attention-0.6.0-*) ;;
        *) echo "fetch_gpu_wheels.sh: removing $(basename "$f") (not asked for)" >&2; rm -f "$f" ;;
    esac
done
total=$(du -cb "$dir"/*.whl | tail -1 | cut -f1)
if (( total > limit_mib * 1024 * 1024 )); then
    echo "fetch_gpu_wheels.sh: $dir holds $total bytes of wheels, over the $limit_mib MiB" \
         "a working tree may carry to the GPU machine" >&2
    exit 1
fi
ls -l "$dir"/*.whl
echo "fetch_gpu_wheels.sh: $(( total / 1024 )) KiB in $dir (limit $limit_mib MiB)"
