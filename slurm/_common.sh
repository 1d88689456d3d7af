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
