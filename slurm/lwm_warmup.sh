#!/bin/bash
# lwm_warmup.sh: GSPO world-model warmup (python -m unified.warmup); vLLM rollout server on the first node, trainer on the others.
#SBATCH --job-name=lwm-warmup
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=1
#SBATCH --exclusive
#SBATCH --output=%x-%j.out
#
# Submit from the root of the unified checkout (docs/slurm.md; a one-node Slurm on one machine too):
#   VENV=$PWD/.venv MODEL=/ckpt/sft JUDGE=openai:http://judge-host:8001/v1#judge sbatch --nodes=4 slurm/lwm_warmup.sh
#   ... sbatch --nodes=4 slurm/lwm_warmup.sh --set train.max_steps=50    # extra args go to unified.warmup
#   VENV=$PWD/.venv RECIPE=recipes/warmup/embedded_cpu.yaml GPUS_PER_NODE=0 sbatch --nodes=1 slurm/lwm_warmup.sh
#   DRY_RUN=1 UNIFIED_HOSTNAMES="n0 n1 n2 n3" NODES=4 JUDGE=... bash slurm/lwm_warmup.sh   # print, start nothing
# What it needs: VENV (or PYTHON) = the environment `make setup` made, checked before anything starts
# (torch and unified imported from outside the checkout); `sbatch --nodes=N` = how many nodes (NODES
# follows it); JUDGE = the rubric judge, required by the default recipe (its judge_endpoint is empty;
# the job stops at once without it); MODEL = the SFT checkpoint (default: the recipe's hub id, which
# needs hub access or its cache on every node).
#   VENV=$PWD/.venv RECIPE=recipes/warmup/embedded_cpu.yaml GPUS_PER_NODE=0 CPU_PROCESSES=2 DISTRIBUTED=ddp sbatch --nodes=1 slurm/lwm_warmup.sh
# Partition, account, QoS and time limit are yours to pass to sbatch (-p, -A, -q, -t).
# With several nodes: `trl vllm-serve` on the first node, `accelerate launch` (DeepSpeed ZeRO-3 by
# default) on the others. With one node: the trainer alone (vLLM colocated on GPUs; in-process on CPU),
# or CPU_PROCESSES data-parallel trainer processes over gloo (accelerate launch, as for GPUs).
# The commands come from `python -m unified.warmup --dry-run` (one launch plan for both).
set -euo pipefail

# ---- user variables (override from the environment: VAR=value sbatch ...) ---------------------------
NODES=${NODES:-${SLURM_JOB_NUM_NODES:-1}}        # nodes to use (1 = trainer only)
GPUS_PER_NODE=${GPUS_PER_NODE:-8}                # GPUs per node (0 = CPU)
RECIPE=${RECIPE:-recipes/warmup/qwen35_35b_a3b.yaml}
MODEL=${MODEL:-}                                 # SFT checkpoint: HF dir or hub id (empty = the recipe's)
DATA=${DATA:-}                                   # AgentWorldBench JSONL file or dir (empty = the recipe's)
OUTPUT=${OUTPUT:-runs/lwm_warmup-${SLURM_JOB_ID:-local}}   # checkpoints, final/, metrics, wandb
JUDGE=${JUDGE:-}                                 # rubric judge, openai:URL#MODEL (empty = the recipe's)
DISTRIBUTED=${DISTRIBUTED:-deepspeed_zero3}      # deepspeed_zero3 | fsdp2 | ddp (several GPUs; CPU processes: ddp)
CPU_PROCESSES=${CPU_PROCESSES:-1}                # trainer processes on a CPU node (GPUS_PER_NODE=0, NODES=1)
VLLM_PORT=${VLLM_PORT:-8000}                     # rollout server port on the first node
MAIN_PORT=${MAIN_PORT:-29500}                    # torch.distributed rendezvous port
VENV=${VENV:-}                                   # virtual environment to activate (make setup: $REPO/.venv)
PYTHON=${PYTHON:-python}                         # interpreter with torch and unified (or set VENV)
REPO=${REPO:-${SLURM_SUBMIT_DIR:-$PWD}}          # the unified checkout
DRY_RUN=${DRY_RUN:-0}                            # 1 = print what would run
# ------------------------------------------------------------------------------------------------------

cd "$REPO"
# shellcheck source=slurm/_common.sh
source "$REPO/slurm/_common.sh"
unified_env

mapfile -t HOSTS < <(unified_hostnames)
[ "${#HOSTS[@]}" -ge "$NODES" ] || unified_die "NODES=$NODES but the allocation has ${#HOSTS[@]} node(s)"

ARGS=(--recipe "$RECIPE" --output-dir "$OUTPUT"
      --set "launch.nodes=$NODES" --set "launch.gpus_per_node=$GPUS_PER_NODE"
      --set "generation.vllm_server_port=$VLLM_PORT" --set "launch.main_process_port=$MAIN_PORT"
      --set "launch.cpu_processes=$CPU_PROCESSES")
[ -n "$MODEL" ] && ARGS+=(--model "$MODEL")
[ -n "$DATA" ] && ARGS+=(--data "$DATA")
[ -n "$JUDGE" ] && ARGS+=(--set "rewards.rubric.judge_endpoint=$JUDGE")
if [ "$NODES" -gt 1 ] || [ "$GPUS_PER_NODE" -gt 1 ] || [ "$CPU_PROCESSES" -gt 1 ]; then
    ARGS+=(--set "launch.distributed=$DISTRIBUTED")
fi
ARGS+=("$@")

TRAINER_CMD=$("$PYTHON" -m unified.warmup "${ARGS[@]}" --print-command trainer)
VLLM_CMD=$("$PYTHON" -m unified.warmup "${ARGS[@]}" --print-command vllm)
echo "lwm_warmup: job ${SLURM_JOB_ID:-local}, ${NODES} node(s) x ${GPUS_PER_NODE} GPU(s): ${HOSTS[*]:0:$NODES}"
echo "lwm_warmup: output ${OUTPUT}"

if [ "$NODES" -eq 1 ]; then
    unified_run srun --nodes=1 --ntasks=1 --nodelist="${HOSTS[0]}" bash -c "$TRAINER_CMD"
else
    VLLM_HOST=${HOSTS[0]}
    TRAIN_HOSTS=("${HOSTS[@]:1:$((NODES - 1))}")
    TRAIN_LIST=$(IFS=,; echo "${TRAIN_HOSTS[*]}")
    if [ "$DRY_RUN" = "1" ]; then
        unified_run srun --nodes=1 --ntasks=1 --nodelist="$VLLM_HOST" bash -c "$VLLM_CMD"
    else
        srun --nodes=1 --ntasks=1 --nodelist="$VLLM_HOST" bash -c "$VLLM_CMD" &
        VLLM_PID=$!
        trap '[ -n "${VLLM_PID:-}" ] && kill "$VLLM_PID" 2>/dev/null || true' EXIT
    fi
    unified_wait_http "http://${VLLM_HOST}:${VLLM_PORT}/health/" 1800
    # One task per trainer node: its step rank is the accelerate machine rank.
    unified_run srun --nodes=$((NODES - 1)) --ntasks=$((NODES - 1)) --ntasks-per-node=1 --nodelist="$TRAIN_LIST" \
        --export=ALL,VLLM_HOST="$VLLM_HOST",MAIN_PROCESS_IP="${TRAIN_HOSTS[0]}" \
        bash -c "MACHINE_RANK=\$SLURM_PROCID; $TRAINER_CMD"
    if [ -n "${VLLM_PID:-}" ]; then  # training is over: stop the rollout server
        kill "$VLLM_PID" 2>/dev/null || true
        wait "$VLLM_PID" 2>/dev/null || true
    fi
fi
unified_finish lwm_warmup "the warmed-up checkpoint is ${OUTPUT}/final"
