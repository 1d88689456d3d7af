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
if we are killed outright.

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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from unified.execution import service_env

_LIVE: set["ServiceGroup"] = set()
_LIVE_LOCK = threading.Lock()


class ServiceStartError(RuntimeError):
    """A service that exited or did not become healthy in time (message has its log tail)."""


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


def choose_offset(ports: list[int], tries: int = 200) -> int:
    """A port offset that makes every one of ``ports`` free (0 if they already are)."""
    if not ports or all(port_is_free(p) for p in ports):
        return 0
    lo, hi = 20000 - min(ports), 60000 - max(ports)
    for _ in range(tries):
        offset = random.randrange(max(lo, 1), max(hi, lo + 2))
        if all(port_is_free(p + offset) for p in ports):
            return offset
    raise ServiceStartError(f"no free port range found for ports {ports}")


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


class ServiceGroup:
    """The mock services of one task (a context manager; see the module docstring)."""

    def __init__(self, specs: list[ServiceSpec], checkout: Path, *, offset: int | None = None,
                 extra_env: dict[str, str] | None = None, stop_grace_s: float = 5.0) -> None:
        self.checkout = Path(checkout)
        self.specs = specs
        self.offset = choose_offset([s.port for s in specs]) if offset is None else offset
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
        with _LIVE_LOCK:
            _LIVE.add(self)
        try:
            for spec in self.specs:
                self._start_one(spec)
        except BaseException:
            self.stop()
            raise
        return self

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
            proc = subprocess.Popen(argv, cwd=self.checkout, env=env, stdin=subprocess.DEVNULL, stdout=handle,
                                    stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=_die_with_parent)
        self.processes[spec.name] = proc
        start = time.monotonic()
        deadline = start + spec.ready_timeout
        while True:
            if proc.poll() is not None:
                raise ServiceStartError(f"service {spec.name!r} ({spec.command}) exited with {proc.returncode}: "
                                        f"{self.log_tail(spec.name)}")
            if self.healthy(spec):
                self.started_s[spec.name] = round(time.monotonic() - start, 3)
                return
            if time.monotonic() > deadline:
                raise ServiceStartError(f"service {spec.name!r} not healthy at {self.url(spec.health_check)} within "
                                        f"{spec.ready_timeout:.0f}s: {self.log_tail(spec.name)}")
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
        """Stop every process we started (idempotent, never raises) and wait for the ports to free up."""
        for name, proc in reversed(list(self.processes.items())):
            _terminate(proc, self.stop_grace_s)
        for spec in self.specs:
            if spec.name in self.processes:
                deadline = time.monotonic() + 5.0
                while not port_is_free(self.port(spec)) and time.monotonic() < deadline:
                    time.sleep(0.1)
        self.processes.clear()
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
