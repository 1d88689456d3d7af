"""Claw-Eval mock services: start from the checkout, health-check, reset, always stop.

A task's ``services`` entries (``name``, ``command``, ``port``, ``health_check``,
``health_check_method``, ``ready_timeout``, ``reset_endpoint``, ``env``) describe FastAPI
servers under ``mock_services/`` of the user's checkout. :class:`ServiceGroup` starts them
with the checkout as working directory (``python`` -> this interpreter), on ports shifted by
one offset chosen so that every port is free (the service reads ``$PORT``; URLs in the task
are rewritten to match), waits for each health check within ``ready_timeout``, resets them
between trials (``POST reset_endpoint``) and stops them on exit, on errors, on Ctrl-C and at
interpreter exit: SIGTERM to the process group, SIGKILL after a grace period, and a check that
the port is free again. Each service also gets ``PR_SET_PDEATHSIG`` so it dies with us even
if we are killed outright; the kernel sends that signal when the *thread* that forked the child
ends, so every service is forked by one long-lived spawner thread (:func:`spawn`), never by the
episode's worker thread (a trial started in a short-lived thread lost its services when the
thread ended: "service reset failed between trials: Connection refused").

Trials running at the same time start groups at the same time: the ports a live group holds are
claimed in this process (a second group never picks them, even before the first has bound
them), and a service counts as up only once its health check is answered by a listener of its
own process group (``/proc``), not by another group's server on the same port. A service that
lost its port to another process is restarted on a fresh offset (when the offset was chosen here).

The services listen on loopback only. The benchmark's servers bind every interface
(``0.0.0.0``), which would put a task's mock mailbox, and its ``/audit`` record, on the
machine's network; a Python service (``python script.py`` or ``python -m module``, the form of
every Claw-Eval service) is started through :data:`LOOPBACK_SHIM`, which runs it unchanged
except that a bind to the wildcard address (``0.0.0.0``, ``""``, ``::``) binds loopback instead.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import queue
import random
import re
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from unified.execution import service_env

_LIVE: set["ServiceGroup"] = set()
_CLAIMED_PORTS: set[int] = set()
"""Ports of the groups started in this process and not yet stopped (guarded by ``_LIVE_LOCK``)."""
_LIVE_LOCK = threading.Lock()
START_ATTEMPTS = 3
"""Offsets tried when a service loses its port to another process between the choice and its bind."""


class ServiceStartError(RuntimeError):
    """A service that exited or did not become healthy in time (message has its log tail)."""


class PortTakenError(ServiceStartError):
    """Another process's listener answered on a service's port and the service itself exited."""


@dataclass
class ServiceSpec:
    """One ``services:`` entry of a task.yaml."""

    name: str
    command: str
    port: int
    health_check: str
    health_check_method: str = "POST"
    ready_timeout: float = 10.0
    reset_endpoint: str | None = None
    env: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str) -> "ServiceSpec":
        missing = [k for k in ("name", "command", "port", "health_check") if k not in data]
        if missing:
            raise ValueError(f"{where}: service entry is missing field(s) {missing}")
        return cls(name=str(data["name"]), command=str(data["command"]), port=int(data["port"]),
                   health_check=str(data["health_check"]),
                   health_check_method=str(data.get("health_check_method", "POST")),
                   ready_timeout=float(data.get("ready_timeout", 10)),
                   reset_endpoint=data.get("reset_endpoint"), env={str(k): str(v) for k, v in (data.get("env") or {}).items()})


def shift_url(url: str, offset: int) -> str:
    """``http://localhost:9100/x`` -> ``http://localhost:<9100+offset>/x`` (also 127.0.0.1)."""
    return re.sub(r"(localhost|127\.0\.0\.1):(\d+)", lambda m: f"{m.group(1)}:{int(m.group(2)) + offset}", url)


def port_is_free(port: int) -> bool:
    """Whether nothing listens on ``port`` (we can bind it on all interfaces)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def choose_offset(ports: list[int], tries: int = 200, taken: set[int] | frozenset[int] = frozenset()) -> int:
    """A port offset that makes every one of ``ports`` free and not in ``taken`` (0 if they already are)."""
    def usable(offset: int) -> bool:
        return all(p + offset not in taken and port_is_free(p + offset) for p in ports)

    if not ports or usable(0):
        return 0
    lo, hi = 20000 - min(ports), 60000 - max(ports)
    for _ in range(tries):
        offset = random.randrange(max(lo, 1), max(hi, lo + 2))
        if usable(offset):
            return offset
    raise ServiceStartError(f"no free port range found for ports {ports}")


def listening_inodes(port: int) -> set[str]:
    """Socket inodes listening on TCP ``port`` (IPv4 and IPv6) in this network namespace."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as handle:
                next(handle, None)
                for line in handle:
                    fields = line.split()
                    if len(fields) > 9 and fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                        inodes.add(fields[9])
        except (OSError, ValueError):
            continue
    return inodes


def group_listens(pgid: int, port: int) -> bool | None:
    """Whether a process of group ``pgid`` holds a listening socket on ``port`` (None: ``/proc``
    cannot tell, e.g. no ``/proc/net/tcp``)."""
    inodes = listening_inodes(port)
    if not inodes:  # no /proc/net/tcp, or the answer came some way this table does not show
        return None
    wanted = {f"socket:[{inode}]" for inode in inodes}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as handle:
                if int(handle.read().rsplit(")", 1)[1].split()[2]) != pgid:
                    continue
            for fd in os.listdir(f"/proc/{pid}/fd"):
                if os.readlink(f"/proc/{pid}/fd/{fd}") in wanted:
                    return True
        except (OSError, ValueError, IndexError):
            continue
    return False


LOOPBACK_SHIM = r"""
import os, runpy, socket, sys
_bind = socket.socket.bind
def _loopback_bind(self, address):
    if isinstance(address, tuple) and address and address[0] in ("", "0.0.0.0", "::", "0:0:0:0:0:0:0:0"):
        address = ("::1" if self.family == socket.AF_INET6 else "127.0.0.1",) + tuple(address[1:])
    return _bind(self, address)
socket.socket.bind = _loopback_bind
args = sys.argv[1:]
if args[:1] == ["-m"]:
    sys.argv = [args[1]] + args[2:]
    sys.path[0] = os.getcwd()
    runpy.run_module(args[1], run_name="__main__", alter_sys=True)
else:
    sys.argv = args
    sys.path[0] = os.path.dirname(os.path.abspath(args[0]))
    runpy.run_path(args[0], run_name="__main__")
"""
"""Runs a Python service (its argv after the interpreter) with wildcard binds turned into loopback
binds (module docstring, last paragraph)."""


def service_argv(command: str) -> list[str]:
    """The argv that starts a service's ``command``: a Python one through :data:`LOOPBACK_SHIM` on
    this interpreter, any other as written."""
    argv = shlex.split(command)
    if not argv or argv[0] not in ("python", "python3"):
        return argv
    if len(argv) > 2 and argv[1] == "-m" or len(argv) > 1 and not argv[1].startswith("-"):
        return [sys.executable, "-c", LOOPBACK_SHIM, *argv[1:]]
    return [sys.executable, *argv[1:]]  # other interpreter flags: run as written (binds not rewritten)


def _die_with_parent() -> None:  # runs in the child between fork and exec
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:
        pass


_SPAWN_QUEUE: "queue.SimpleQueue[tuple[Future, tuple, dict]]" = queue.SimpleQueue()
_SPAWNER: list[threading.Thread] = []
_SPAWNER_LOCK = threading.Lock()


def _spawner_loop() -> None:
    while True:
        future, args, kwargs = _SPAWN_QUEUE.get()
        if future.set_running_or_notify_cancel():
            try:
                future.set_result(subprocess.Popen(*args, **kwargs))
            except BaseException as exc:  # handed to the caller's thread
                future.set_exception(exc)


def spawn(*args: Any, **kwargs: Any) -> subprocess.Popen:
    """``subprocess.Popen(*args, **kwargs)`` forked by this module's one spawner thread (a daemon
    that lives as long as the process), so that ``PR_SET_PDEATHSIG`` fires when the process ends,
    not when the calling thread does (module docstring)."""
    with _SPAWNER_LOCK:
        if not _SPAWNER or not _SPAWNER[0].is_alive():
            _SPAWNER[:] = [threading.Thread(target=_spawner_loop, name="claw-service-spawner", daemon=True)]
            _SPAWNER[0].start()
    future: Future = Future()
    _SPAWN_QUEUE.put((future, args, kwargs))
    return future.result()


class ServiceGroup:
    """The mock services of one task (a context manager; see the module docstring)."""

    def __init__(self, specs: list[ServiceSpec], checkout: Path, *, offset: int | None = None,
                 extra_env: dict[str, str] | None = None, stop_grace_s: float = 5.0) -> None:
        self.checkout = Path(checkout)
        self.specs = specs
        self._choose_offset = offset is None
        self.offset = 0 if offset is None else offset
        """Added to every port of the task; chosen on entry (claimed in this process) when not given."""
        self._claimed: set[int] = set()
        self.extra_env = dict(extra_env or {})
        self.stop_grace_s = stop_grace_s
        self.processes: dict[str, subprocess.Popen] = {}
        self.logs: dict[str, Path] = {}
        self.started_s: dict[str, float] = {}

    # -- addresses -------------------------------------------------------------------------

    def port(self, spec: ServiceSpec) -> int:
        return spec.port + self.offset

    def url(self, url: str) -> str:
        """A URL of the task, moved to this group's ports."""
        return shift_url(url, self.offset)

    # -- lifecycle -------------------------------------------------------------------------

    def __enter__(self) -> "ServiceGroup":
        for attempt in range(1, START_ATTEMPTS + 1):
            self._claim_ports()
            try:
                for spec in self.specs:
                    self._start_one(spec)
                return self
            except PortTakenError:
                self.stop()
                if not self._choose_offset or attempt == START_ATTEMPTS:
                    raise
            except BaseException:
                self.stop()
                raise
        raise AssertionError("unreachable")

    def _claim_ports(self) -> None:
        """Choose the offset (unless given) among ports no live group of this process holds, and hold them."""
        with _LIVE_LOCK:
            if self._choose_offset:
                self.offset = choose_offset([s.port for s in self.specs], taken=_CLAIMED_PORTS)
            self._claimed = {self.port(s) for s in self.specs}
            _CLAIMED_PORTS.update(self._claimed)
            _LIVE.add(self)

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()

    def _start_one(self, spec: ServiceSpec) -> None:
        argv = service_argv(spec.command)
        # an explicit environment: the services answer the agent's calls and must hold no host secret
        env = {**service_env(), **{k: os.environ[k] for k in ("HOME", "TMPDIR") if k in os.environ}}
        env.update(self.extra_env)
        env.update(spec.env)
        env["PORT"] = str(self.port(spec))
        env.setdefault("ERROR_RATE", "0")
        log = Path(tempfile.mkstemp(prefix=f"claw-svc-{spec.name}-", suffix=".log")[1])
        self.logs[spec.name] = log
        with open(log, "wb") as handle:
            proc = spawn(argv, cwd=self.checkout, env=env, stdin=subprocess.DEVNULL, stdout=handle,
                         stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=_die_with_parent)
        self.processes[spec.name] = proc
        start = time.monotonic()
        deadline = start + spec.ready_timeout
        foreign = False  # a health check answered by a listener that is not this service's
        while True:
            if proc.poll() is not None:
                error = PortTakenError if foreign else ServiceStartError
                raise error(f"service {spec.name!r} ({spec.command}) exited with {proc.returncode}"
                            f"{' while another process listened on its port ' + str(self.port(spec)) if foreign else ''}"
                            f": {self.log_tail(spec.name)}")
            if self.healthy(spec):
                if group_listens(proc.pid, self.port(spec)) is not False:
                    self.started_s[spec.name] = round(time.monotonic() - start, 3)
                    return
                foreign = True
            if time.monotonic() > deadline:
                why = " (answered only by a process outside the service's process group)" if foreign else ""
                raise ServiceStartError(f"service {spec.name!r} not healthy at {self.url(spec.health_check)} within "
                                        f"{spec.ready_timeout:.0f}s{why}: {self.log_tail(spec.name)}")
            time.sleep(0.2)

    def healthy(self, spec: ServiceSpec) -> bool:
        """The service answers its health check with a status below 500."""
        try:
            with httpx.Client(trust_env=False, timeout=2.0) as client:
                response = client.request(spec.health_check_method.upper(), self.url(spec.health_check),
                                          headers={"X-Health-Check": "1"})
            return response.status_code < 500
        except httpx.HTTPError:
            return False

    def reset(self) -> dict[str, str]:
        """POST every reset endpoint (between trials); returns failures by service name."""
        failures = {}
        for spec in self.specs:
            if spec.reset_endpoint:
                try:
                    httpx.post(self.url(spec.reset_endpoint), timeout=5.0, trust_env=False).raise_for_status()
                except httpx.HTTPError as exc:
                    failures[spec.name] = str(exc)
        return failures

    def audit(self) -> dict[str, dict]:
        """Each service's ``/audit`` record (next to its reset endpoint), as the benchmark collects it."""
        out = {}
        for spec in self.specs:
            if not spec.reset_endpoint:
                continue
            url = self.url(spec.reset_endpoint).rsplit("/reset", 1)[0] + "/audit"
            try:
                out[spec.name] = httpx.get(url, timeout=5.0, trust_env=False).json()
            except (httpx.HTTPError, ValueError):
                continue
        return out

    def stop(self) -> None:
        """Stop every process we started (idempotent, never raises) and wait for the ports they held
        to free up (not for one whose service had already exited unstarted: another process has it)."""
        held = {name for name, proc in self.processes.items() if proc.poll() is None or name in self.started_s}
        for name, proc in reversed(list(self.processes.items())):
            _terminate(proc, self.stop_grace_s)
        for spec in self.specs:
            if spec.name in held:
                deadline = time.monotonic() + 5.0
                while not port_is_free(self.port(spec)) and time.monotonic() < deadline:
                    time.sleep(0.1)
        self.processes.clear()
        with _LIVE_LOCK:
            _CLAIMED_PORTS.difference_update(self._claimed)
            self._claimed = set()
        for log in self.logs.values():
            try:
                log.unlink()
            except OSError:
                pass
        self.logs.clear()
        with _LIVE_LOCK:
            _LIVE.discard(self)

    def log_tail(self, name: str, chars: int = 1500) -> str:
        try:
            return self.logs[name].read_text(errors="replace")[-chars:]
        except (KeyError, OSError):
            return ""


def _terminate(proc: subprocess.Popen, grace_s: float) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(timeout=10)
    else:  # the leader is gone; its group may not be
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


@atexit.register
def stop_all_services() -> None:
    """Stop every service group still running (at interpreter exit)."""
    with _LIVE_LOCK:
        groups = list(_LIVE)
    for group in groups:
        group.stop()
