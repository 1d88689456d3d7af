"""The long-lived process inside a local sandbox: runs commands it is sent, one at a time.

Started by :class:`unified.execution.local.LocalSession` as the sandbox's main process (so
the sandbox, its private ``/tmp`` and anything started in it, a tmux server included, live
as long as the session). Standard library only: it runs under the system ``python3``.

Protocol (one JSON object a line): the host writes
``{"argv": [...], "timeout": s, "stdin": b64, "cwd": dir, "env": {...}}`` to stdin and reads
``{"exit_code", "stdout", "stderr" (base64), "timed_out", "duration_s"}`` from stdout.
Each command runs in its own process group; on timeout the whole group gets SIGKILL.
A command's background children may keep its output pipes open: after the command itself
exits, output is collected for at most a short grace period. Output beyond ``MAX_OUTPUT`` bytes
a stream is counted and dropped while it streams (a marker says how much).

The keeper is the sandbox's pid 1 (``bwrap --as-pid-1``), so that no other process inside holds
its pipes (bubblewrap's own init would, dumpable), and makes itself non-dumpable at start: the
agent's commands run as the same user, and must not reach its pipes through ``/proc/<pid>/fd``
to inject answers the host would trust (or read the host's requests). As pid 1 it reaps every
orphan reparented to it (a thread that waits only for zombies that are not a running command's).
"""

import base64
import json
import os
import signal
import subprocess
import sys
import threading
import time

GRACE_S = 0.5
MAX_OUTPUT = 4 << 20


def _reader(pipe, sink):
    """Append at most MAX_OUTPUT bytes of ``pipe`` to ``sink``; the last item is the total byte count."""
    kept = total = 0
    try:
        while True:
            chunk = pipe.read1(65536) if hasattr(pipe, "read1") else pipe.read(65536)
            if not chunk:
                break
            total += len(chunk)
            if kept < MAX_OUTPUT:
                sink.append(chunk[:MAX_OUTPUT - kept])
                kept += len(sink[-1])
    except (OSError, ValueError):
        pass
    if total > kept:
        sink.append(b"\n[... %d bytes cut: output is capped at %d bytes]\n" % (total - kept, MAX_OUTPUT))


def _not_dumpable():
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0
    except (OSError, AttributeError):
        pass


_RUNNING = set()
"""pids of the commands being run now: their exit status belongs to ``subprocess``, not to the reaper."""
_RUNNING_LOCK = threading.Lock()


def _reap_orphans(wakeup, interval=1.0):
    """As pid 1: wait for each zombie child that is not a running command (orphans of the agent's).

    Woken by SIGCHLD through ``wakeup`` (the read end of :func:`signal.set_wakeup_fd`'s pipe; the
    Python-level handler does nothing, so a flood of signals cannot deadlock it), and every
    ``interval`` seconds in case one was missed.
    """
    import select

    me = str(os.getpid())
    while True:
        if select.select([wakeup], [], [], interval)[0]:
            try:
                os.read(wakeup, 4096)
            except OSError:
                pass
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                with open("/proc/%s/stat" % name, "rb") as f:
                    fields = f.read().rsplit(b")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if fields[0] != b"Z" or fields[1].decode() != me:
                continue
            with _RUNNING_LOCK:
                if int(name) in _RUNNING:
                    continue
                try:
                    os.waitpid(int(name), os.WNOHANG)
                except OSError:
                    pass


def _feed(pipe, data):
    try:
        pipe.write(data)
    except (BrokenPipeError, OSError):
        pass
    finally:
        try:
            pipe.close()
        except OSError:
            pass


def _run(req):
    env = dict(os.environ)
    env.update(req.get("env") or {})
    data = base64.b64decode(req["stdin"]) if req.get("stdin") is not None else None
    start = time.monotonic()
    try:
        with _RUNNING_LOCK:  # registered before the reaper can see it exit
            proc = subprocess.Popen(req["argv"], cwd=req.get("cwd") or None, env=env,
                                    stdin=subprocess.PIPE if data is not None else subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
            _RUNNING.add(proc.pid)
    except OSError as exc:
        return {"exit_code": 127, "stdout": "", "stderr": base64.b64encode(f"{exc}\n".encode()).decode(),
                "timed_out": False, "duration_s": 0.0}
    try:
        return _collect(proc, data, req, start)
    finally:
        with _RUNNING_LOCK:
            _RUNNING.discard(proc.pid)


def _collect(proc, data, req, start):
    out, err = [], []
    readers = [threading.Thread(target=_reader, args=(proc.stdout, out), daemon=True),
               threading.Thread(target=_reader, args=(proc.stderr, err), daemon=True)]
    for t in readers:
        t.start()
    if data is not None:
        threading.Thread(target=_feed, args=(proc.stdin, data), daemon=True).start()
    timed_out = False
    try:
        proc.wait(timeout=float(req.get("timeout") or 60))
    except subprocess.TimeoutExpired:
        timed_out = True
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        proc.wait()
    for t in readers:
        t.join(GRACE_S)
    if timed_out:  # stragglers of the group that were not yet gone
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
    return {"exit_code": proc.returncode, "stdout": base64.b64encode(b"".join(out)).decode(),
            "stderr": base64.b64encode(b"".join(err)).decode(), "timed_out": timed_out,
            "duration_s": time.monotonic() - start}


def _reap(max_rounds=200):
    """Stop, then kill, every process of the sandbox but pid 1 and this one (the same, as ``--as-pid-1``), until none is left.

    In-process (no fork, no thread), so it works even when the agent filled the process table.
    """
    me = os.getpid()
    for round_no in range(1, max_rounds + 1):
        left = 0
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            for name in os.listdir("/proc"):
                if not name.isdigit() or int(name) in (1, me):
                    continue
                try:
                    with open("/proc/%s/stat" % name, "rb") as f:
                        state = f.read().rsplit(b")", 1)[1].split()[0]
                    if state in (b"Z", b"X"):
                        continue
                    os.kill(int(name), sig)
                    left += sig == signal.SIGSTOP
                except (OSError, IndexError):
                    continue
        try:
            while os.waitpid(-1, os.WNOHANG)[0] > 0:  # our own children's zombies
                pass
        except ChildProcessError:
            pass
        if left == 0:
            return {"exit_code": 0, "stdout": base64.b64encode(b"stopped: %d rounds\n" % round_no).decode(),
                    "stderr": "", "timed_out": False, "duration_s": 0.0}
    return {"exit_code": 3, "stdout": base64.b64encode(b"processes still running after %d rounds\n" % max_rounds).decode(),
            "stderr": "", "timed_out": False, "duration_s": 0.0}


def main():
    _not_dumpable()
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    if os.getpid() == 1:
        wakeup, wake = os.pipe()
        os.set_blocking(wake, False)
        signal.set_wakeup_fd(wake, warn_on_full_buffer=False)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        threading.Thread(target=_reap_orphans, args=(wakeup,), daemon=True).start()
    out = sys.stdout.buffer
    out.write(b'{"ready": true}\n')
    out.flush()
    for line in sys.stdin.buffer:
        if not line.strip():
            continue
        try:
            req = json.loads(line)
            if req.get("op") == "shutdown":
                break
            resp = _reap() if req.get("op") == "reap" else _run(req)
        except Exception as exc:  # a bad request must not kill the session
            resp = {"exit_code": 126, "stdout": "", "stderr": base64.b64encode(f"keeper: {exc!r}\n".encode()).decode(),
                    "timed_out": False, "duration_s": 0.0}
        out.write(json.dumps(resp).encode() + b"\n")
        out.flush()


if __name__ == "__main__":
    main()
