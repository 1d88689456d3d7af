#!/usr/bin/env bash
# The GPU checks of unified, each on its own, on one GPU node with the locked stack (`make gpu`), no network:
#   imports          the packages of requirements/gpu-lock.txt import, at the lock's versions
#   flash_attention  FlashAttention 2 vs SDPA at head dim 256 (bf16, outputs and gradients)
#   layer_bench      one Qwen3.5-35B-A3B-shaped Gated DeltaNet + full-attention layer pair (MoE in each)
#                    forward+backward at 32k/64k/128k tokens, with and without the linear-attention kernels
#   colocate         two warmup steps of a tiny Qwen3.5-MoE checkpoint with colocated vLLM; the weights change
#   server_sync      two GPUs: trl vllm-serve on one, the trainer on the other; after one update at a large lr
#                    the server's log-probs match the trainer's (skipped, saying so, with fewer than two GPUs)
#   gpu_tests        (not in the default set) every @pytest.mark.gpu test
#   vllm_routes      (not in the default set; needs vLLM) R3: vllm.LLM with enable_return_routed_experts on a tiny
#                    Qwen3-MoE in bf16, its routes replayed by transformers (scripts/gpu_checks_vllm_routes.py)
#
#   bash scripts/gpu_checks.sh [--cpu] [--only CHECK[,CHECK...]] [--list] [OUT_DIR]  (default OUT_DIR runs/gpu_checks)
#
# --cpu runs each check's CPU variant on the same code path (small sizes, generation.backend=hf; CI runs it:
# an ImportError or a wrong metric key fails CI, not a GPU allocation); gpu_tests has none (skipped).
#
# Each check writes OUT_DIR/<check>.json (and .log); a failing check does not stop the next. OUT_DIR/summary.tsv
# has one line per check: name, passed | FAILED | skipped | TIMEOUT, seconds. Without CUDA every check is skipped.
# Exit status: 1 if any check failed or timed out, 2 on bad arguments, else 0. Default set: under 12 minutes on
# one H200 (the per-check limits below add up to 690 s; server_sync skips at once on one GPU).
set -uo pipefail
DEFAULT_CHECKS=(imports flash_attention layer_bench colocate server_sync)
ALL_CHECKS=("${DEFAULT_CHECKS[@]}" gpu_tests vllm_routes)
declare -A LIMIT_S=([imports]=60 [flash_attention]=90 [layer_bench]=240 [colocate]=180 [server_sync]=420 [gpu_tests]=600
                    [vllm_routes]=240)
PY=${PYTHON:-python3}
OUT_DIR=runs/gpu_checks
CHECKS=("${DEFAULT_CHECKS[@]}")
DEVICE=cuda
usage() { sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
    case "$1" in
        --cpu) DEVICE=cpu; shift ;;
        --list) printf '%s\n' "${ALL_CHECKS[@]}"; exit 0 ;;
        --only) [ $# -ge 2 ] || { echo "gpu_checks: --only needs a comma-separated list of checks" >&2; exit 2; }
                IFS=, read -r -a CHECKS <<< "$2"; shift 2 ;;
        --only=*) IFS=, read -r -a CHECKS <<< "${1#--only=}"; shift ;;
        -h|--help) usage; exit 0 ;;
        -*) echo "gpu_checks: unknown option $1 (see --help)" >&2; exit 2 ;;
        *) OUT_DIR=$1; shift ;;
    esac
done
[ ${#CHECKS[@]} -gt 0 ] || { echo "gpu_checks: --only needs a comma-separated list of checks" >&2; exit 2; }
for c in "${CHECKS[@]}"; do
    [[ " ${ALL_CHECKS[*]} " == *" $c "* ]] || { echo "gpu_checks: unknown check '$c'; valid: ${ALL_CHECKS[*]}" >&2; exit 2; }
done
OUT_DIR=$(realpath -m "$OUT_DIR")
cd "$(dirname "$0")/.." || exit 2
mkdir -p "$OUT_DIR" || exit 2
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 WANDB_MODE=offline TOKENIZERS_PARALLELISM=false
# GPU_CHECKS_ASSUME_CUDA=1 runs the checks without the CUDA probe (tests of this script on CPU)
if [ "$DEVICE" = cpu ]; then
    cuda=1; echo "CPU variants (--cpu)" >"$OUT_DIR/gpu.txt"
elif [ "${GPU_CHECKS_ASSUME_CUDA:-0}" = 1 ]; then
    cuda=1
elif nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >"$OUT_DIR/gpu.txt" 2>&1 \
        && "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>>"$OUT_DIR/gpu.txt"; then
    cuda=1
else
    cuda=0; echo "no CUDA device (nvidia-smi or torch.cuda failed)" >>"$OUT_DIR/gpu.txt"
fi
: >"$OUT_DIR/summary.tsv"
failed=0
for check in "${CHECKS[@]}"; do
    start=$(date +%s)
    if [ "$cuda" = 0 ]; then
        status=skipped
        printf '{"check": "%s", "passed": null, "skipped": "no CUDA device on this machine"}\n' "$check" >"$OUT_DIR/$check.json"
    else
        if [ "$check" = gpu_tests ] && [ "$DEVICE" = cpu ]; then
            cmd=(sh -c 'echo "gpu_tests: no CPU variant (the @pytest.mark.gpu tests need CUDA)"; exit 77')
            printf '{"check": "gpu_tests", "passed": null, "skipped": "no CPU variant"}\n' >"$OUT_DIR/$check.json"
        elif [ "$check" = gpu_tests ]; then
            cmd=("$PY" -m pytest -m gpu -v -rs -p no:cacheprovider --durations=0 tests)
        elif [ "$check" = vllm_routes ] && [ "$DEVICE" = cpu ]; then  # on CPU: tests/test_vllm_routes.py (make vllm)
            cmd=(sh -c 'echo "vllm_routes: the CPU variant is tests/test_vllm_routes.py (needs make vllm)"; exit 77')
            printf '{"check": "vllm_routes", "passed": null, "skipped": "CPU variant in tests/test_vllm_routes.py"}\n' \
                >"$OUT_DIR/$check.json"
        elif [ "$check" = vllm_routes ]; then  # writes $OUT_DIR/vllm_routes.json; exit 4 = vLLM not importable
            cmd=(sh -c '"$0" scripts/gpu_checks_vllm_routes.py all --device cuda --dtype bf16 --out "$1"; rc=$?
                        [ $rc = 4 ] && exit 77; exit $rc' "$PY" "$OUT_DIR")
        else
            cmd=("$PY" -m measurements.gpu_checks "$check" "$OUT_DIR" --device "$DEVICE")
        fi
        timeout --kill-after=10 "${LIMIT_S[$check]}" "${cmd[@]}" >"$OUT_DIR/$check.log" 2>&1
        rc=$?
        case $rc in
            0) status=passed ;;
            77) status=skipped ;;
            124|137) status=TIMEOUT; failed=1 ;;
            *) status=FAILED; failed=1 ;;
        esac
    fi
    printf '%s\t%s\t%s\n' "$check" "$status" "$(( $(date +%s) - start ))" | tee -a "$OUT_DIR/summary.tsv"
done
[ "$cuda" = 0 ] && echo "gpu_checks: no CUDA device here: every check skipped (see $OUT_DIR/gpu.txt)"
exit "$failed"
