#!/bin/bash
# install_gpu_stack.sh: installs the locked GPU stack (requirements/gpu-lock.txt) into /opt/venv of an
# image; run as root by containers/gpu.Dockerfile and containers/unified-gpu.def (one place for both).
# Wheels only, except: DeepSpeed from its sdist with DS_BUILD_OPS=0 (Python, seconds), and the two CUDA
# extensions (flash-attn, causal-conv1d), taken from the wheel cache /opt/unified/wheels (built once:
# containers/build_wheels.sh); SKIP_CUDA_SDISTS=1 leaves them out (an image without FlashAttention 2 /
# causal-conv1d: SDPA and the Triton/torch Gated DeltaNet paths). Inside the image glibc is Debian 12's
# 2.36, so llguidance's manylinux_2_31 wheel installs whatever the host's glibc (EL8: 2.28).
set -euo pipefail
SRC=${SRC:-/opt/unified}
LOCK=$SRC/requirements/gpu-lock.txt
WHEELS=$SRC/wheels
SKIP_CUDA_SDISTS=${SKIP_CUDA_SDISTS:-0}
CUDA_SDISTS="flash-attn causal-conv1d"
start=$(date +%s)
stamp() { echo "install_gpu_stack: $1 after $(( $(date +%s) - start )) s"; }

if compgen -G "$SRC/containers/extra-ca*.crt" >/dev/null; then  # a site's TLS-intercepting proxy
    cp "$SRC"/containers/extra-ca*.crt /usr/local/share/ca-certificates/
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends python3.11 python3.11-venv python3.11-dev ca-certificates \
    build-essential git
update-ca-certificates >/dev/null 2>&1 || true
rm -rf /var/lib/apt/lists/*
stamp "apt packages"

python3.11 -m venv /opt/venv
PIP=(/opt/venv/bin/pip install -q --no-cache-dir --no-deps)
"${PIP[@]}" --upgrade pip setuptools wheel   # build tools; everything else from the lock
pin() { grep -E "^$1==" "$LOCK"; }
# every wheel of the lock (its pins were resolved together: --no-deps installs exactly them)
grep -v -E "^(deepspeed|$(tr ' ' '|' <<< "$CUDA_SDISTS"))==" "$LOCK" > /tmp/lock-wheels.txt
"${PIP[@]}" --only-binary :all: -r /tmp/lock-wheels.txt
stamp "the lock's wheels"
# DeepSpeed's sdist imports torch while building: after the wheels, without build isolation, no ops compiled
DS_BUILD_OPS=0 "${PIP[@]}" --no-build-isolation "$(pin deepspeed)"
stamp "deepspeed (sdist, DS_BUILD_OPS=0)"
if [ "$SKIP_CUDA_SDISTS" = 1 ]; then
    echo "install_gpu_stack: SKIP_CUDA_SDISTS=1: $CUDA_SDISTS not installed"
else
    for name in $CUDA_SDISTS; do
        version=$(pin "$name" | cut -d= -f3)
        "${PIP[@]}" --no-index --find-links "$WHEELS" "$name==$version" || {
            echo "install_gpu_stack: no $name==$version wheel in $WHEELS: build it once with containers/build_wheels.sh" \
                 "on a CUDA machine (or pass SKIP_CUDA_SDISTS=1)" >&2
            exit 1
        }
    done
    stamp "CUDA extensions from the wheel cache"
fi
/opt/venv/bin/pip check || true   # informative: the lock was resolved together, --no-deps installs it as is
/opt/venv/bin/python -c 'import torch, transformers, trl, vllm, deepspeed; print("install_gpu_stack: torch", torch.__version__, "vllm", vllm.__version__)'
stamp "done"
