#!/usr/bin/env bash
# Check and time weirdnet's GPU path on a fresh machine that already has the CUDA PyTorch
# wheel and triton: install this checkout without touching them, then run
# `weirdnet bench gpu --out OUT` (its report: OUT/report.md; see `weirdnet bench gpu -h`).
set -euo pipefail
usage="usage: lab/benchmarks/gpu.sh OUT [--quick] [other weirdnet bench gpu options]"
if [[ $# -lt 1 || $1 == -* ]]; then
    echo "$usage" >&2
    exit 2
fi
out=$1
shift
python=${PYTHON:-python3}
cd "$(dirname "$0")/../.."
if ! "$python" -c 'import torch, triton' 2>/dev/null; then
    echo "gpu.sh: $python lacks torch or triton; install the CUDA PyTorch wheel (it brings" \
         "triton) first" >&2
    exit 2
fi
# This checkout alone (the library and the lab, which adds `weirdnet bench`): resolving
# their dependencies could replace the CUDA torch wheel.
"$python" -m pip install --quiet --no-deps --no-build-isolation -e . -e ./lab
# The wheels lab/benchmarks/fetch_gpu_wheels.sh put in wheels/ (the fla peers), carried
# with the working tree to a machine that reaches no package registry.
if compgen -G "wheels/*.whl" >/dev/null; then
    "$python" -m pip install --quiet --no-index --no-deps --no-compile wheels/*.whl
fi
# The few pure-Python pieces the command and the GPU tests use, only where missing.
missing=$("$python" -c 'import importlib.util as u; print(" ".join(n for n in
    ("numpy", "tqdm", "pytest") if u.find_spec(n) is None))')
if [[ -n $missing ]]; then
    # shellcheck disable=SC2086  # one word per package
    "$python" -m pip install --quiet $missing
fi
exec "$python" -m weirdnet bench gpu --out "$out" "$@"
