# Shared by the batch scripts in slurm/ (sourced, not run): environment, node list, helpers.
# Expects PYTHON and REPO to be set by the calling script.

unified_die() { echo "$(basename "${0:-slurm}"): $*" >&2; exit 1; }

# Environment every process inherits: unbuffered logs, no tokenizer thread storms, wandb offline
# unless the caller asked otherwise.
unified_env() {
    export PYTHONUNBUFFERED=1
    export TOKENIZERS_PARALLELISM=${TOKENIZERS_PARALLELISM:-false}
    export WANDB_MODE=${WANDB_MODE:-offline}
    if [ -n "${VENV:-}" ]; then
        # shellcheck disable=SC1091
        source "$VENV/bin/activate"
    fi
    "$PYTHON" -c 'import unified' 2>/dev/null \
        || unified_die "PYTHON=$PYTHON cannot import unified (set PYTHON or VENV to the environment of this checkout)"
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

# Run a command, or print it when DRY_RUN=1.
unified_run() {
    if [ "${DRY_RUN:-0}" = "1" ]; then
        printf '%q ' "$@"; echo
    else
        "$@"
    fi
}

# Wait until an HTTP URL answers 200 (a server started on another node), or fail after $2 seconds;
# with a PID as $3 (a server started here), fail as soon as that process is gone.
unified_wait_http() {
    local url=$1 timeout=${2:-1800} pid=${3:-0}
    [ "${DRY_RUN:-0}" = "1" ] && { echo "# wait for $url"; return 0; }
    "$PYTHON" - "$url" "$timeout" "$pid" <<'PY' || unified_die "no answer from $url (server gone, or ${timeout}s passed)"
import os, sys, time, urllib.request
url, deadline, pid = sys.argv[1], time.time() + float(sys.argv[2]), int(sys.argv[3])
while time.time() < deadline:
    if pid:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            sys.exit(1)
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            if r.status == 200:
                sys.exit(0)
    except Exception:
        pass
    time.sleep(5)
sys.exit(1)
PY
}
