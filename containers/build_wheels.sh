#!/bin/bash
# build_wheels.sh: build the lock's two CUDA extensions (flash-attn, causal-conv1d) once into wheels/,
# the cache containers/install_gpu_stack.sh installs from. Run on a CUDA machine (nvcc on PATH or
# CUDA_HOME set, the GPU's architecture: TORCH_CUDA_ARCH_LIST, e.g. "9.0" for H100/H200) inside the
# environment `make gpu` made, or any venv with the lock's torch:
#   VENV=.venv MAX_JOBS=16 bash containers/build_wheels.sh
# Each first asks its own setup for a prebuilt wheel from its GitHub release (none exists for every
# torch/CUDA pair), else compiles. Copy wheels/ next to the image build (or to every node's cache).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
PY=${VENV:+$VENV/bin/}python
LOCK=$REPO/requirements/gpu-lock.txt
mkdir -p "$REPO/wheels"
for name in flash-attn causal-conv1d; do
    spec=$(grep -E "^$name==" "$LOCK")
    start=$(date +%s)
    "$PY" -m pip wheel --no-deps --no-build-isolation -w "$REPO/wheels" "$spec"
    echo "build_wheels: $spec in $(( $(date +%s) - start )) s"
done
ls -l "$REPO/wheels"
