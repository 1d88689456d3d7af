#!/usr/bin/env bash
# GPU checks of unified, in one go: the `gpu`-marked tests, the grouped_mm-vs-eager experts report
# in bf16, and the warmup step cost at a mid-size random MoE shape for each experts kernel.
#   bash scripts/gpu_checks.sh [OUT_DIR]       # on a GPU node where `pip install -e '.[gpu]'` ran
# Everything it measures lands in OUT_DIR (default runs/gpu_checks): gpu.txt, pytest_gpu.log,
# kernels_bf16.json, scale_bench.json, scale_bench.log. Exit status: that of the tests.
set -uo pipefail
OUT_DIR=${1:-runs/gpu_checks}
PY=${PYTHON:-python3}
TEST_TIMEOUT_S=${TEST_TIMEOUT_S:-300}
SCALE_ARGS=${SCALE_ARGS:---arch qwen3_5_moe --hidden 1024 --layers 4 --experts 64 --top-k 8 --heads 16 --head-dim 64 --moe-intermediate 512 --steps 4}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 WANDB_MODE=offline TOKENIZERS_PARALLELISM=false
mkdir -p "$OUT_DIR"

{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  $PY -c 'import torch, transformers, trl; print("torch", torch.__version__, "cuda", torch.version.cuda,
"transformers", transformers.__version__, "trl", trl.__version__)'
  for pkg in flash_attn vllm deepspeed; do
    $PY -c "import $pkg; print('$pkg', $pkg.__version__)" 2>/dev/null || echo "$pkg: not installed"
  done; } 2>&1 | tee "$OUT_DIR/gpu.txt"

timeout "$TEST_TIMEOUT_S" $PY -m pytest -m gpu -v -rs -p no:cacheprovider --durations=0 tests 2>&1 \
  | tee "$OUT_DIR/pytest_gpu.log"
tests_rc=${PIPESTATUS[0]}

$PY -m unified.kernels --dtype bfloat16 --arch qwen3_5_moe --experts 64 --top-k 8 --hidden 1024 --layers 2 \
  --batch 8 --seq-len 1024 --repeats 10 >"$OUT_DIR/kernels_bf16.json" 2>"$OUT_DIR/kernels_bf16.err"
echo "kernels report: rc=$?"; cat "$OUT_DIR/kernels_bf16.json"

# shellcheck disable=SC2086
$PY -m measurements.scale_bench $SCALE_ARGS --out "$OUT_DIR/scale" \
  --set gspo.num_generations=8 --set train.per_device_train_batch_size=8 \
  --set generation.max_completion_length=128 --set data.max_prompt_tokens=2048 2>&1 \
  | grep -v "it/s\]" | tee "$OUT_DIR/scale_bench.log"
cp "$OUT_DIR/scale/scale_bench.json" "$OUT_DIR/" 2>/dev/null
exit "$tests_rc"
