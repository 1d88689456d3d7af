# Shared by the batch scripts in slurm/ (sourced, not run): environment, node list, helpers.
# Expects PYTHON and REPO to be set by the calling script.

unified_die() { echo "$(basename "${0:-slurm}"): $*" >&2; exit 1; }

# Environment every process inherits: unbuffered logs, no tokenizer thread storms, wandb offline
# unless the caller asked otherwise.
unified_env() {
    export PYTHONUNBUFFERED=1
    if [ -n "${IMAGE:-}" ]; then
        # the locked GPU stack in an Apptainer image: host-side calls use its Python, each srun step runs
        # inside it (UNIFIED_IN_IMAGE before `bash -c`), with the checkout bound
        [ -f "$IMAGE" ] || [ "${DRY_RUN:-0}" = "1" ] || unified_die "IMAGE=$IMAGE does not exist (build it: containers/README.md)"
        export IMAGE REPO
        PYTHON="$REPO/slurm/apptainer_python.sh"
        UNIFIED_IN_IMAGE=(apptainer exec --nv --bind "$REPO" --pwd "$REPO" --env "PYTHONPATH=$REPO" "$IMAGE")
        STEP_PYTHON=python
    else
        UNIFIED_IN_IMAGE=()
        STEP_PYTHON=$PYTHON
    fi
    export TOKENIZERS_PARALLELISM=${TOKENIZERS_PARALLELISM:-false}
    export WANDB_MODE=${WANDB_MODE:-offline}
    # Neither VENV nor PYTHON set: the environment `make setup` made in the checkout, said on one line.
    if [ -z "${VENV:-}" ] && [ -z "${PYTHON:-}" ] && [ -x "$REPO/.venv/bin/python" ]; then
        VENV="$REPO/.venv"
        echo "$(basename "${0:-slurm}"): VENV unset: using $VENV (make setup's; set VENV or PYTHON for another)" >&2
    fi
    PYTHON=${PYTHON:-python}
    if [ -n "${VENV:-}" ]; then
        # shellcheck disable=SC1091
        source "$VENV/bin/activate"
    fi
    # From outside the checkout: in it, any interpreter imports the package from the cwd and the
    # job would only die later, on `import torch`.
    local found
    found=$(cd / && "$PYTHON" -c 'import os, torch, unified; print(os.path.dirname(os.path.dirname(unified.__file__)))' 2>&1) \
        || unified_die "PYTHON=$PYTHON cannot import torch and unified outside the checkout ($(tail -n 1 <<< "$found")): set VENV to the environment \`make setup\` made (VENV=$REPO/.venv) or PYTHON to its interpreter"
    if [ "$(cd "$found" 2>/dev/null && pwd -P)" != "$(cd "$REPO" && pwd -P)" ]; then
        echo "$(basename "${0:-slurm}"): note: PYTHON=$PYTHON imports unified from $found, not from REPO=$REPO" >&2
    fi
}

# The last line of a script: what happened, honestly (a dry run started nothing).
unified_finish() {
    if [ "${DRY_RUN:-0}" = "1" ]; then
        echo "$1: dry run: nothing was started (the commands above are what a real run would do)"
    else
        echo "$1: done; $2"
    fi
}

# The hostnames of the allocation, one per line (UNIFIED_HOSTNAMES="a b c" overrides, for dry runs).
unified_hostnames() {
    if [ -n "${UNIFIED_HOSTNAMES:-}" ]; then
        tr ' ' '\n' <<< "$UNIFIED_HOSTNAMES" | sed '/^$/d'
    elif [ -n "${SLURM_JOB_NODELIST:-}" ]; then
        scontrol show hostnames "$SLURM_JOB_NODELIST"
    else
        hostname -s
    fi
}

# The GPUs a node of this job was granted (SLURM_GPUS_PER_NODE: "8" or "h100:8"; empty outside a GPU job).
unified_granted_gpus() {
    local granted=${SLURM_GPUS_PER_NODE:-}
    granted=${granted##*:}
    granted=${granted%%(*}
    [[ "$granted" =~ ^[0-9]+$ ]] && echo "$granted"
    return 0
}

# GPUS_PER_NODE resolved against the job's grant: "auto" = what the job got (8 outside a GPU job); more
# than the job got is an error before anything starts.
unified_gpus_per_node() {
    local wanted=$1 granted
    granted=$(unified_granted_gpus)
    if [ "$wanted" = auto ]; then
        echo "${granted:-8}"
    elif [ -n "$granted" ] && [ "$wanted" -gt "$granted" ]; then
        unified_die "GPUS_PER_NODE=$wanted but the job has $granted GPU(s) a node: sbatch --gpus-per-node=$wanted"
    else
        echo "$wanted"
    fi
}

# srun options that give a step its GPUs: steps of an --exclusive job get no GRES unless they ask (and
# the implicit inheritance of SLURM_GPUS_PER_NODE differs between Slurm versions), so every step asks.
unified_step_gpus() {
    local gpus=$1
    if [ "$gpus" -gt 0 ]; then echo "--gres=gpu:$gpus"; fi
}

# The sbatch options a follow-up job (the eval's merge) inherits from this job: partition, account, QoS
# and time limit, one a line (nothing outside Slurm; "UNLIMITED" and unset fields are left out).
unified_inherited_sbatch_args() {
    [ -n "${SLURM_JOB_ID:-}" ] || return 0
    [ -n "${SLURM_JOB_PARTITION:-}" ] && echo "--partition=$SLURM_JOB_PARTITION"
    [ -n "${SLURM_JOB_ACCOUNT:-}" ] && echo "--account=$SLURM_JOB_ACCOUNT"
    [ -n "${SLURM_JOB_QOS:-}" ] && [ "$SLURM_JOB_QOS" != "(null)" ] && echo "--qos=$SLURM_JOB_QOS"
    local limit
    limit=$(scontrol show job "$SLURM_JOB_ID" -o 2>/dev/null | grep -o 'TimeLimit=[^ ]*' | head -n 1 | cut -d= -f2)
    case $limit in ''|UNLIMITED|NONE|Partition_Limit) ;; *) echo "--time=$limit" ;; esac
    return 0
}

# A path component from free text (a checkpoint path, a suite list): letters, digits, . _ - only.
unified_slug() {
    local text=${1#./}
    text=${text%/}
    text=$(sed -e 's#/#_#g' -e 's#[^A-Za-z0-9._-]#-#g' <<< "$text")
    echo "${text:-default}"
}

# The local address this node uses to reach host $1 (the cluster interface, not 0.0.0.0): what a server
# meant for the other nodes binds to.
unified_address_towards() {
    "$PYTHON" - "$1" <<'PY'
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.connect((socket.gethostbyname(sys.argv[1]), 9))  # UDP: no packet is sent, only the route is chosen
print(s.getsockname()[0])
PY
}

# Requeue this job when Slurm warns that its time is nearly up (#SBATCH --signal=B:USR1@SECONDS, with
# --requeue): the job comes back with the same id and the same output directory, and resumes there.
# Long commands must run through unified_run_waiting, or bash only handles the signal once they end.
unified_requeue_on_usr1() {
    [ "${DRY_RUN:-0}" = "1" ] && return 0
    trap 'UNIFIED_SIGNALLED=1
          echo "$(basename "${0:-slurm}"): SIGUSR1 (time limit near): requeueing job ${SLURM_JOB_ID:-?} to resume in the same output directory" >&2
          scontrol requeue "${SLURM_JOB_ID:?}" || echo "$(basename "${0:-slurm}"): scontrol requeue failed" >&2' USR1
}

# The warmup's pre-emption (#SBATCH --signal=B:USR1@SECONDS, with --requeue): on SIGUSR1 the batch shell passes
# the warning on to the trainer (SIGUSR1 to its srun step, which srun relays to its task, unless
# UNIFIED_SIGNAL_TRAINER=0: a launcher such as accelerate or a `bash -c "a; b"` task would die of it; and the
# file $1/preempt.request, read by the trainer after every step whatever launched it: unified/warmup/preempt.py);
# the trainer saves checkpoint-N and exits; then unified_requeue_if_preempted requeues the job, which
# resumes from checkpoint-N in the same output directory. No step is lost, nothing is killed mid-save.
unified_preempt_on_usr1() {
    [ "${DRY_RUN:-0}" = "1" ] && return 0
    UNIFIED_PREEMPT_DIR=$1
    UNIFIED_PREEMPTED=0
    trap 'UNIFIED_SIGNALLED=1; UNIFIED_PREEMPTED=1
          echo "$(basename "${0:-slurm}"): SIGUSR1 (time limit near): asking the trainer to save a checkpoint and stop" >&2
          mkdir -p "$UNIFIED_PREEMPT_DIR" && : > "$UNIFIED_PREEMPT_DIR/preempt.request"
          [ -n "${UNIFIED_CHILD_PID:-}" ] && [ "${UNIFIED_SIGNAL_TRAINER:-1}" = 1 ] && kill -USR1 "$UNIFIED_CHILD_PID" 2>/dev/null
          true' USR1
}

# After the trainer's step ended: when the job was warned (or the trainer stopped on a warning, status 75),
# requeue it (same id, same output directory) and end this run of the script.
unified_requeue_if_preempted() {
    local status=$1
    if [ "${UNIFIED_PREEMPTED:-0}" = 1 ] || [ "$status" = 75 ]; then
        echo "$(basename "${0:-slurm}"): the trainer stopped (status $status) after saving its checkpoint: requeueing job ${SLURM_JOB_ID:-?} to resume in the same output directory" >&2
        scontrol requeue "${SLURM_JOB_ID:?}" || unified_die "scontrol requeue failed"
        exit 0
    fi
}

# Run a command in the background and wait for it, so that trapped signals (USR1) are handled while it runs
# (its pid is UNIFIED_CHILD_PID meanwhile); returns its exit status.
unified_run_waiting() {
    if [ "${DRY_RUN:-0}" = "1" ]; then
        unified_run "$@"
        return 0
    fi
    local pid status
    "$@" &
    pid=$!
    UNIFIED_CHILD_PID=$pid
    while true; do
        UNIFIED_SIGNALLED=0
        status=0
        wait "$pid" || status=$?
        [ "$UNIFIED_SIGNALLED" = 1 ] || return "$status"   # else a trapped signal interrupted wait: wait on
    done
}

# Run a command, or print it when DRY_RUN=1.
unified_run() {
    if [ "${DRY_RUN:-0}" = "1" ]; then
        printf '%q ' "$@"; echo
    else
        "$@"
    fi
}

# Wait until an HTTP URL answers 200 (a server started on another node), or fail after $2 seconds;
# with a PID as $3 (a server started here), fail as soon as that process is gone; with a log file as
# $4, print a progress line (seconds waited, the log's last line) every 30 s; with a key file as $5,
# send its key (Authorization: Bearer; the warmup's rollout gate).
unified_wait_http() {
    local url=$1 timeout=${2:-1800} pid=${3:-0} log=${4:-} key_file=${5:-}
    [ "${DRY_RUN:-0}" = "1" ] && { echo "# wait for $url${key_file:+ (with the key in $key_file)}"; return 0; }
    local status=0
    "$PYTHON" - "$url" "$timeout" "$pid" "$log" "$key_file" <<'PY' || status=$?
import os, sys, time, urllib.request
url, timeout, pid, log, key_file = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
headers = {"Authorization": "Bearer " + open(key_file).read().strip()} if key_file else {}
start = time.time()
next_note = start + 30
while time.time() < start + timeout:
    if pid:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            sys.exit(3)
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=5) as r:
            if r.status == 200:
                print(f"unified: {url} is up after {time.time() - start:.0f}s", flush=True)
                sys.exit(0)
    except Exception:
        pass
    if log and time.time() >= next_note:
        try:
            last = [line for line in open(log, errors="replace").read()[-2000:].splitlines() if line.strip()][-1:]
        except OSError:
            last = []
        print(f"unified: waiting for {url}: {time.time() - start:.0f}s" + (f": {last[0][-160:]}" if last else ""),
              flush=True)
        next_note = time.time() + 30
    time.sleep(2)
sys.exit(1)
PY
    case $status in
        0) ;;
        3) unified_die "the server for $url (pid $pid) exited before it answered${log:+: see $log}" ;;
        *) unified_die "no answer from $url after ${timeout}s${log:+: see $log}" ;;
    esac
}

# Stop process group $1: SIGTERM, then SIGKILL after $2 seconds (a server started with setsid).
unified_stop_group() {
    local pgid=$1 timeout=${2:-20} i
    kill -TERM -- "-$pgid" 2>/dev/null || return 0
    for ((i = 0; i < timeout * 5; i++)); do
        kill -0 -- "-$pgid" 2>/dev/null || return 0
        sleep 0.2
    done
    kill -KILL -- "-$pgid" 2>/dev/null || true
}
