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
# with a PID as $3 (a server started here), fail as soon as that process is gone; with a log file as
# $4, print a progress line (seconds waited, the log's last line) every 30 s.
unified_wait_http() {
    local url=$1 timeout=${2:-1800} pid=${3:-0} log=${4:-}
    [ "${DRY_RUN:-0}" = "1" ] && { echo "# wait for $url"; return 0; }
    "$PYTHON" - "$url" "$timeout" "$pid" "$log" <<'PY' || unified_die "no answer from $url (server gone, or ${timeout}s passed${log:+; see $log})"
import os, sys, time, urllib.request
url, timeout, pid, log = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
start = time.time()
next_note = start + 30
while time.time() < start + timeout:
    if pid:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            sys.exit(1)
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
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
