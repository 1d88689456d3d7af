"""Stop a server's process group when the process that started it dies, even by ``kill -9``.

``python -S watchdog.py PARENT_PID GROUP_PID STOP_TIMEOUT_S`` (run as a script by
:class:`unified.inference.vllm_server.VLLMServer`; standard library only, so it starts in
milliseconds and holds a few MB). It waits until ``PARENT_PID`` is no longer its parent
(``PR_SET_PDEATHSIG`` wakes it at once; ``getppid()`` polling every 0.5 s backs that up, because
the death signal follows the *thread* that started the watchdog, not the process) or until the
group has ended by itself. A dead parent: SIGTERM to the group, SIGKILL after ``STOP_TIMEOUT_S``.
SIGTERM to the watchdog ends it quietly (the parent stops the group itself); SIGINT is ignored.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time

PR_SET_PDEATHSIG = 1


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop_group(pgid: int, timeout_s: float) -> None:
    """SIGTERM process group ``pgid``; SIGKILL what is left after ``timeout_s``."""
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and group_alive(pgid):
        time.sleep(0.2)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def watch(parent: int, group: int, stop_timeout_s: float, poll_s: float = 0.5) -> int:
    woke = threading.Event()
    signal.signal(signal.SIGUSR1, lambda *_: woke.set())
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGUSR1, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    while os.getppid() == parent:
        if not group_alive(group):
            return 0
        woke.wait(poll_s)
        woke.clear()
    stop_group(group, stop_timeout_s)
    return 0


if __name__ == "__main__":
    raise SystemExit(watch(int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])))
