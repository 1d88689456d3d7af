#!/bin/bash
# lwm_warmup.sh: GSPO world-model warmup (python -m unified.warmup); vLLM rollout server on the first node, trainer on the others.
#SBATCH --job-name=lwm-warmup
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=1
#SBATCH --exclusive
#SBATCH --gpus-per-node=8
#SBATCH --mem=0
#SBATCH --requeue
#SBATCH --signal=B:USR1@600
#SBATCH --open-mode=append
#SBATCH --output=%x-%j.out
#
# Submit from the root of the unified checkout (docs/slurm.md; a one-node Slurm on one machine too):
#   VENV=$PWD/.venv MODEL=/ckpt/sft JUDGE=openai:http://judge-host:8001/v1#judge sbatch --nodes=4 slurm/lwm_warmup.sh
#   ... sbatch --nodes=4 slurm/lwm_warmup.sh --set train.max_steps=50    # extra args go to unified.warmup
#   VENV=$PWD/.venv RECIPE=recipes/warmup/embedded_cpu.yaml sbatch --nodes=1 --gpus-per-node=0 slurm/lwm_warmup.sh
#   DRY_RUN=1 UNIFIED_HOSTNAMES="n0 n1 n2 n3" NODES=4 JUDGE=... bash slurm/lwm_warmup.sh   # print, start nothing
# What it needs: VENV (or PYTHON) = the environment `make setup` made (unset: the checkout's .venv, said
# on one line), checked before anything starts
# (torch and unified imported from outside the checkout); `sbatch --nodes=N` = how many nodes (NODES
# follows it); JUDGE = the rubric judge, required by the default recipe (its judge_endpoint is empty;
# the job stops at once without it); MODEL = the SFT checkpoint (default: the recipe's hub id, which
# needs hub access or its cache on every node).
#   VENV=$PWD/.venv RECIPE=recipes/warmup/embedded_cpu.yaml CPU_PROCESSES=2 DISTRIBUTED=ddp sbatch --nodes=1 --gpus-per-node=0 slurm/lwm_warmup.sh
# Partition, account, QoS and time limit are yours to pass to sbatch (-p, -A, -q, -t).
# GPUs: 8 a node by default (#SBATCH --gpus-per-node); GPUS_PER_NODE follows what the job was granted, and each
# srun step asks for its GPUs (--gres=gpu:N). Memory: the whole node (--mem=0).
# Resuming: OUTPUT does not contain the job id; 600 s before the time limit Slurm sends SIGUSR1 to this script,
# which passes it on to the trainer (SIGUSR1 to its step and OUTPUT/preempt.request); the trainer saves
# checkpoint-N at the end of the step under way (weights, optimizer, scheduler, RNG, data position) and exits
# (status 75), then the script requeues the job (same id, same OUTPUT), which resumes from checkpoint-N.
# Submitting again with the same settings resumes too. The rollout server is on a private key: it binds node 0's
# 127.0.0.1 only; in front of it the key gate (unified/warmup/rollout_gate.py) listens on the address node 0 uses
# to reach the trainer nodes (never 0.0.0.0) and forwards only requests carrying the key that this script writes
# to OUTPUT/rollout_server.key (mode 0600) before the server starts; the trainer reads it there
# (docs/slurm.md, "Network", also for what the key does not cover).
# With several nodes: `trl vllm-serve` on the first node, `accelerate launch` (DeepSpeed ZeRO-3 by
# default) on the others. With one node: the trainer alone (vLLM colocated on GPUs; in-process on CPU),
# or CPU_PROCESSES data-parallel trainer processes over gloo (accelerate launch, as for GPUs).
# The commands come from `python -m unified.warmup --dry-run` (one launch plan for both).
set -euo pipefail

# ---- user variables (override from the environment: VAR=value sbatch ...) ---------------------------
NODES=${NODES:-${SLURM_JOB_NUM_NODES:-1}}        # nodes to use (1 = trainer only)
GPUS_PER_NODE=${GPUS_PER_NODE:-auto}             # GPUs per node (0 = CPU; auto = what the job got, else 8)
RECIPE=${RECIPE:-recipes/warmup/qwen35_35b_a3b.yaml}
MODEL=${MODEL:-}                                 # SFT checkpoint: HF dir or hub id (empty = the recipe's)
DATA=${DATA:-}                                   # AgentWorldBench JSONL file or dir (empty = the recipe's)
RUNS=${RUNS:-runs}                               # where the default OUTPUT goes
OUTPUT=${OUTPUT:-}                               # checkpoints, final/, metrics, wandb (empty = RUNS/lwm_warmup-RECIPE[-MODEL]; no job id: a rerun resumes)
JUDGE=${JUDGE:-}                                 # rubric judge, openai:URL#MODEL (empty = the recipe's)
DISTRIBUTED=${DISTRIBUTED:-deepspeed_zero3}      # deepspeed_zero3 | fsdp2 | ddp (several GPUs; CPU processes: ddp)
CPU_PROCESSES=${CPU_PROCESSES:-1}                # trainer processes on a CPU node (GPUS_PER_NODE=0, NODES=1)
VLLM_PORT=${VLLM_PORT:-8000}                     # rollout server port on the first node
VLLM_BIND=${VLLM_BIND:-auto}                     # address the rollout server binds and the trainers use (auto = node 0's address towards node 1)
VLLM_CMD=${VLLM_CMD:-}                           # rollout server command, run behind the key gate: it listens on $UNIFIED_ROLLOUT_UPSTREAM = 127.0.0.1:VLLM_PORT+1 (empty = the launch plan's trl vllm-serve)
VLLM_TIMEOUT_S=${VLLM_TIMEOUT_S:-1800}           # how long the rollout server may take to load (a server that exits fails at once)
MAIN_PORT=${MAIN_PORT:-29500}                    # torch.distributed rendezvous port
VENV=${VENV:-}                                   # virtual environment to activate (unset, with PYTHON unset: $REPO/.venv)
PYTHON=${PYTHON:-}                               # interpreter with torch and unified (unset: VENV's, else python)
REPO=${REPO:-${SLURM_SUBMIT_DIR:-$PWD}}          # the unified checkout
DRY_RUN=${DRY_RUN:-0}                            # 1 = print what would run (and the memory/time plan)
GPU=${GPU:-}                                     # GPU model for the memory/time plan: h100 | h200 | a100 (empty = the recipe's launch.gpu)
IMAGE=${IMAGE:-}                                 # Apptainer image of the locked GPU stack (containers/unified-gpu.def): every step runs in it
# ------------------------------------------------------------------------------------------------------

cd "$REPO"
# shellcheck source=slurm/_common.sh
source "$REPO/slurm/_common.sh"
unified_env

GPUS_PER_NODE=$(unified_gpus_per_node "$GPUS_PER_NODE")
if [ -z "$OUTPUT" ]; then
    OUTPUT="$RUNS/lwm_warmup-$(unified_slug "$(basename "$RECIPE" .yaml)")${MODEL:+-$(unified_slug "$MODEL")}"
fi
unified_preempt_on_usr1 "$OUTPUT"

mapfile -t HOSTS < <(unified_hostnames)
[ "${#HOSTS[@]}" -ge "$NODES" ] || unified_die "NODES=$NODES but the allocation has ${#HOSTS[@]} node(s)"

ARGS=(--recipe "$RECIPE" --output-dir "$OUTPUT"
      --set "launch.nodes=$NODES" --set "launch.gpus_per_node=$GPUS_PER_NODE"
      --set "generation.vllm_server_port=$VLLM_PORT" --set "launch.main_process_port=$MAIN_PORT"
      --set "launch.cpu_processes=$CPU_PROCESSES")
[ -n "$MODEL" ] && ARGS+=(--model "$MODEL")
[ -n "$DATA" ] && ARGS+=(--data "$DATA")
[ -n "$JUDGE" ] && ARGS+=(--set "rewards.rubric.judge_endpoint=$JUDGE")
[ -n "$GPU" ] && ARGS+=(--set "launch.gpu=$GPU")
if [ "$NODES" -gt 1 ] || [ "$GPUS_PER_NODE" -gt 1 ] || [ "$CPU_PROCESSES" -gt 1 ]; then
    ARGS+=(--set "launch.distributed=$DISTRIBUTED")
fi
ARGS+=("$@")

# one line per role: the trainer, the rollout server (the key gate, then trl vllm-serve), the key gate alone
COMMANDS=$("$PYTHON" -m unified.warmup "${ARGS[@]}" --print-command trainer --print-command vllm \
           --print-command rollout-gate)
{ read -r TRAINER_CMD; read -r PLAN_VLLM_CMD; read -r GATE_CMD; } <<< "$COMMANDS"
if [ -z "$VLLM_CMD" ]; then
    VLLM_CMD=$PLAN_VLLM_CMD
else  # your server command, behind the same key gate
    VLLM_CMD="$GATE_CMD bash -c $(printf %q "$VLLM_CMD")"
fi
KEY_FILE=$OUTPUT/rollout_server.key  # the rollout server's key for this run (rollout_gate.py: KEY_FILE_NAME)
echo "lwm_warmup: job ${SLURM_JOB_ID:-local}${SLURM_RESTART_COUNT:+ (restart $SLURM_RESTART_COUNT)}, ${NODES} node(s) x ${GPUS_PER_NODE} GPU(s): ${HOSTS[*]:0:$NODES}"
echo "lwm_warmup: output ${OUTPUT}"
# the memory/time plan of this layout (the preflight above already refused one that does not fit)
[ "$DRY_RUN" = "1" ] && "$PYTHON" -m unified.warmup "${ARGS[@]}" --plan
# shellcheck disable=SC2207
STEP_GPUS=($(unified_step_gpus "$GPUS_PER_NODE"))
# SIGUSR1 goes on to a one-process trainer only (accelerate's launcher, and the multi-node step's bash, would die
# of it and take the ranks with them); every trainer reads OUTPUT/preempt.request (unified_preempt_on_usr1)
if [ "$NODES" -gt 1 ] || [[ "$TRAINER_CMD" == *accelerate* ]]; then UNIFIED_SIGNAL_TRAINER=0; fi

if [ "$NODES" -eq 1 ]; then
    TRAIN_STATUS=0
    unified_run_waiting srun --nodes=1 --ntasks=1 --nodelist="${HOSTS[0]}" "${STEP_GPUS[@]}" "${UNIFIED_IN_IMAGE[@]}" \
        bash -c "$TRAINER_CMD" || TRAIN_STATUS=$?
    unified_requeue_if_preempted "$TRAIN_STATUS"
    [ "$TRAIN_STATUS" -eq 0 ] || unified_die "the trainer failed (status $TRAIN_STATUS)"
else
    VLLM_NODE=${HOSTS[0]}
    TRAIN_HOSTS=("${HOSTS[@]:1:$((NODES - 1))}")
    TRAIN_LIST=$(IFS=,; echo "${TRAIN_HOSTS[*]}")
    if [ "$VLLM_BIND" != auto ]; then
        VLLM_HOST=$VLLM_BIND
    elif [ "$DRY_RUN" = "1" ]; then
        VLLM_HOST=$VLLM_NODE
        echo "# VLLM_HOST = the address $VLLM_NODE uses to reach ${TRAIN_HOSTS[0]} (here: $VLLM_NODE)"
    elif [ "$(hostname -s)" = "$VLLM_NODE" ]; then
        VLLM_HOST=$(unified_address_towards "${TRAIN_HOSTS[0]}") || unified_die "cannot find the address $VLLM_NODE uses to reach ${TRAIN_HOSTS[0]}: set VLLM_BIND"
    else
        VLLM_HOST=$(srun --nodes=1 --ntasks=1 --nodelist="$VLLM_NODE" --export=ALL bash -c \
            "source '$REPO/slurm/_common.sh' && unified_address_towards '${TRAIN_HOSTS[0]}'") \
            || unified_die "cannot find the address $VLLM_NODE uses to reach ${TRAIN_HOSTS[0]}: set VLLM_BIND"
    fi
    # TRL's weight sync: trainer rank 0 listens (vllm_group_port) on vLLM's get_ip(), the default route's
    # interface unless VLLM_HOST_IP says otherwise: the interface that faces the rollout server instead
    SYNC_ADDRESS="PYTHON=$(printf %q "$STEP_PYTHON"); source $(printf %q "$REPO/slurm/_common.sh");"
    SYNC_ADDRESS+=" export VLLM_HOST_IP=\${VLLM_HOST_IP:-\$(unified_address_towards $VLLM_HOST)};"
    VLLM_STEP=(srun --nodes=1 --ntasks=1 --nodelist="$VLLM_NODE" "${STEP_GPUS[@]}" --export=ALL,VLLM_HOST="$VLLM_HOST"
               "${UNIFIED_IN_IMAGE[@]}" bash -c "$VLLM_CMD")
    # One task per trainer node: its step rank is the accelerate machine rank.
    TRAIN_STEP=(srun --nodes=$((NODES - 1)) --ntasks=$((NODES - 1)) --ntasks-per-node=1 --nodelist="$TRAIN_LIST"
                "${STEP_GPUS[@]}" --export=ALL,VLLM_HOST="$VLLM_HOST",MAIN_PROCESS_IP="${TRAIN_HOSTS[0]}"
                "${UNIFIED_IN_IMAGE[@]}" bash -c "MACHINE_RANK=\$SLURM_PROCID; $SYNC_ADDRESS $TRAINER_CMD")
    if [ "$DRY_RUN" = "1" ]; then
        unified_run "$PYTHON" "$REPO/unified/warmup/rollout_gate.py" new-key "$KEY_FILE"
        unified_run "${VLLM_STEP[@]}"
        unified_wait_http "http://${VLLM_HOST}:${VLLM_PORT}/health/" "$VLLM_TIMEOUT_S" 0 "" "$KEY_FILE"
        unified_run "${TRAIN_STEP[@]}"
    else
        # a fresh random key for this run of the job, mode 0600 from its creation, before the server step starts
        # (the module as a file: standard library only, it starts at once)
        "$PYTHON" "$REPO/unified/warmup/rollout_gate.py" new-key "$KEY_FILE" || unified_die "cannot write the rollout key $KEY_FILE"
        "${VLLM_STEP[@]}" &
        VLLM_PID=$!
        trap 'rm -f "$KEY_FILE"; [ -n "${VLLM_PID:-}" ] && kill "$VLLM_PID" 2>/dev/null; [ -n "${TRAIN_PID:-}" ] && kill "$TRAIN_PID" 2>/dev/null; true' EXIT
        # fails as soon as the server's srun step has ended (trl vllm-serve died), not after the timeout
        unified_wait_http "http://${VLLM_HOST}:${VLLM_PORT}/health/" "$VLLM_TIMEOUT_S" "$VLLM_PID" "" "$KEY_FILE"
        "${TRAIN_STEP[@]}" &
        TRAIN_PID=$!
        UNIFIED_CHILD_PID=$TRAIN_PID  # SIGUSR1 goes on to the trainer step (unified_preempt_on_usr1)
        # the trainer would retry a dead server for vllm_server_timeout_s: stop it when the server ends
        while kill -0 "$TRAIN_PID" 2>/dev/null; do
            if ! kill -0 "$VLLM_PID" 2>/dev/null; then
                SERVER_STATUS=0
                wait "$VLLM_PID" || SERVER_STATUS=$?
                kill "$TRAIN_PID" 2>/dev/null || true
                wait "$TRAIN_PID" 2>/dev/null || true
                unified_die "the rollout server on $VLLM_NODE exited (status $SERVER_STATUS) while the trainer ran: stopped the trainer (see the server's lines above)"
            fi
            sleep 2
        done
        TRAIN_STATUS=0
        while true; do  # a trapped SIGUSR1 interrupts wait: wait on until the trainer has ended
            UNIFIED_SIGNALLED=0
            TRAIN_STATUS=0
            wait "$TRAIN_PID" || TRAIN_STATUS=$?
            [ "$UNIFIED_SIGNALLED" = 1 ] || break
        done
        TRAIN_PID=
        unified_requeue_if_preempted "$TRAIN_STATUS"
        [ "$TRAIN_STATUS" -eq 0 ] || unified_die "the trainer failed (status $TRAIN_STATUS)"
        kill "$VLLM_PID" 2>/dev/null || true  # training is over: stop the rollout server
        wait "$VLLM_PID" 2>/dev/null || true
        VLLM_PID=
    fi
fi
unified_finish lwm_warmup "the warmed-up checkpoint is ${OUTPUT}/final"
