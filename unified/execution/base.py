"""One interface for every place a benchmark's commands can run.

A benchmark adapter describes what its task needs in an :class:`EnvironmentSpec` (an image or
a Dockerfile build context, a working directory, limits, network) and asks a backend for a
session::

    backend = get_backend("auto")            # local, docker, podman or apptainer
    with backend.start(spec) as session:     # built/pulled, started ... always removed
        session.exec("make test", timeout_s=60)
        session.copy_in(Path("tests"), "/tests")
        session.read_file("/logs/verifier/reward.txt")

The adapter never knows which backend ran; the session records it (``session.backend``,
``session.info``) and adapters copy that into their results.

Everything a session does goes through ``exec``; ``copy_in``/``copy_out``/``write_file``/
``read_file`` have portable defaults built on it (tar and base64 through stdin/stdout), which
backends override where the engine has something better (``docker cp``).
"""

from __future__ import annotations

import base64
import io
import os
import shlex
import tarfile
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from unified.execution.verifier import PrivateRun


class ExecutionError(RuntimeError):
    """A session could not be started or broke down (not: a command that exited non-zero)."""


class BackendUnavailable(ExecutionError):
    """The backend cannot run here (engine not installed, daemon not running, ...).

    ``reason`` is one line; ``how_to_fix`` says what to install or start.
    """

    def __init__(self, backend: str, reason: str, how_to_fix: str = "") -> None:
        self.backend, self.reason, self.how_to_fix = backend, reason, how_to_fix
        super().__init__(f"{backend}: {reason}" + (f" ({how_to_fix})" if how_to_fix else ""))


@dataclass
class EnvironmentSpec:
    """What a task's environment is made of, independent of the backend that provides it."""

    image: str | None = None
    """A prebuilt image (``ubuntu:24.04``, ``swebench/sweb.eval.x86_64.x:latest``). Used when no build context."""
    build_context: Path | None = None
    """A directory holding a Dockerfile to build (Terminal-Bench ``environment/``)."""
    dockerfile: str = "Dockerfile"
    """The Dockerfile's name inside ``build_context``."""
    workdir: str | None = None
    """Working directory of every command (default: the image's; ``/workspace`` locally)."""
    env: dict[str, str] = field(default_factory=dict)
    """Environment variables of every command."""
    network: bool = False
    """Give the environment network access (default: none)."""
    cpus: float | None = None
    """CPU limit (container engines); None: no limit."""
    memory_mb: int | None = 2048
    """Memory limit in MiB; None: no limit."""
    max_processes: int = 512
    """Process limit (local sandbox; ``--pids-limit`` on container engines)."""
    timeout_s: float = 120.0
    """Default wall-clock limit of one ``exec``."""
    build_timeout_s: float = 1800.0
    """Limit for building or pulling the image."""
    extra_dirs: list[str] = field(default_factory=list)
    """Absolute directories outside ``workdir`` the task uses (``/tests``, ``/logs/verifier``): created at start."""
    name: str = "task"
    """Human-readable label (container names, logs)."""


@dataclass
class ExecResult:
    """What one command did."""

    exit_code: int
    """Exit status (negative: killed by that signal; -9 or 124/137 after a timeout)."""
    stdout: str
    """Standard output (UTF-8, undecodable bytes replaced)."""
    stderr: str
    """Standard error."""
    timed_out: bool
    """True when the time limit killed it."""
    duration_s: float
    """Wall time."""
    backend: str = ""
    """Which backend ran it (``local``, ``docker``, ``podman``, ``apptainer``)."""

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out

    @classmethod
    def of(cls, result: Any) -> ExecResult:
        """The same fields of a :class:`unified.sandbox.SandboxResult` (one bubblewrap run)."""
        return cls(exit_code=result.exit_code, stdout=result.stdout, stderr=result.stderr,
                   timed_out=result.timed_out, duration_s=result.duration_s, backend=result.backend)

    def output(self) -> str:
        """stdout then stderr, as a terminal would interleave them (roughly)."""
        return self.stdout + (("\n" if self.stdout and not self.stdout.endswith("\n") else "") + self.stderr
                              if self.stderr else "")


REAPER_SCRIPT = r"""
spare=" 1 $* "
p=$$
while [ -n "$p" ] && [ "$p" != 0 ]; do
  spare="$spare$p "
  line=""
  read -r line < "/proc/$p/stat" 2>/dev/null || break
  rest=${line##*) }
  set -- $rest
  p=$2
done
round=0
while :; do
  left=0
  for sig in STOP KILL; do
    for d in /proc/[0-9]*; do
      p=${d#/proc/}
      case "$spare" in *" $p "*) continue;; esac
      line=""
      read -r line < "$d/stat" 2>/dev/null || continue
      state=${line##*) }
      state=${state%% *}
      [ "$state" = Z ] && continue
      [ "$state" = X ] && continue
      if kill -s "$sig" "$p" 2>/dev/null && [ "$sig" = STOP ]; then left=$((left + 1)); fi
    done
  done
  round=$((round + 1))
  [ "$left" -eq 0 ] && { echo "stopped: $round rounds"; exit 0; }
  [ "$round" -ge 100 ] && { echo "processes still running after $round rounds"; exit 3; }
done
"""
"""Kills every process but pid 1, itself and its ancestors (the engine's exec chain), and the pids it is given.

POSIX sh, builtins only in the loop (nothing to fork while the agent's processes are being stopped)."""


DEFAULT_VERIFIER_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class ExecutionSession(ABC):
    """A running environment. Use as a context manager; ``close`` always cleans up."""

    backend: str = ""

    def __init__(self, spec: EnvironmentSpec) -> None:
        self.spec = spec
        self.info: dict[str, Any] = {"backend": self.backend}
        """Run facts for the result record (image, approximations made, ...)."""
        self._closed = False

    @property
    def workdir(self) -> str:
        return self.spec.workdir or "/workspace"

    @abstractmethod
    def exec(  # safe: a method name, not the builtin
        self, command: str | list[str], timeout_s: float | None = None, stdin: str | bytes | None = None,
        workdir: str | None = None, env: dict[str, str] | None = None,
    ) -> ExecResult:
        """Run ``command`` (shell string or argv) inside; kill it after ``timeout_s``."""

    def start(self) -> None:
        """Bring the environment up (its backend's ``start`` calls this once, through
        :meth:`ExecutionBackend._started`); a session with nothing to start keeps this."""

    @abstractmethod
    def _close(self) -> None:
        """Stop and remove everything this session started."""

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._close()

    def __enter__(self) -> ExecutionSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the end of the agent's turn -------------------------------------------------------

    def toolchain_changes(self, before_verifier: bool = True) -> list[str] | None:
        """The programs of the verifier's toolchain the agent changed against the image (``["C /usr/bin/bash"]``),
        or None where this session cannot tell (its system is read-only to the agent: ``local``; or not
        checked: apptainer). Docker and podman read the engine's diff (:mod:`unified.execution.verifier`)."""
        return None

    def image_digest(self) -> str:
        """What identifies the image this session started from (docker/podman: its image id), for caches keyed by
        it (:class:`unified.execution.infra.InfrastructureBaselines`); ``""`` where there is none."""
        return str(self.info.get("image_id") or self.info.get("image") or "")

    def stop_agent_processes(self) -> dict[str, Any]:
        """Kill every process in the environment that is not the session's own, and confirm none is left.

        Called before verification: a process the agent left running (``nohup``, ``setsid``, a
        tmux server) must not be able to touch what the verifier writes. Each round stops
        (SIGSTOP, so nothing can fork any more) then kills (SIGKILL) every process except pid 1,
        the reaper and its ancestors and the session's own (:meth:`own_pids`), until a round finds none.
        Returns ``{"ok", "rounds", "detail"}``; ``ok`` is False when processes remained.
        """
        res = self.exec(["sh", "-c", REAPER_SCRIPT, "reaper", *[str(p) for p in self.own_pids()]],
                        timeout_s=60, workdir="/")
        lines = res.stdout.strip().splitlines()
        return {"ok": res.ok and bool(lines) and lines[-1].startswith("stopped"), "detail":
                (lines[-1] if lines else "") + res.stderr.strip()[-300:]}

    def exec_private_verifier(
        self, command: list[str], *, out_dir: str, private_dirs: list[str], files: dict[str, Path],
        timeout_s: float, env: dict[str, str] | None = None, workdir: str | None = None,
    ) -> PrivateRun | str:
        """Run a verifier out of reach of the agent's processes, which keep running (:mod:`unified.execution.verifier`).

        ``out_dir`` and ``private_dirs`` become fresh directories only the verifier sees; ``files``
        (destination -> host path) are placed there first. Returns the run, or a one-line reason
        why this session cannot do it (then nothing ran, and the caller stops the agent's
        processes and runs the verifier the plain way). This base class cannot.
        """
        return f"{self.backend}: no way to run a verifier out of reach of the agent's processes"

    def own_pids(self) -> list[int]:
        """Processes inside (their pids there) that belong to the session, not to the agent."""
        return []

    def verifier_env(self, safe_path: bool = True) -> dict[str, str]:
        """Environment for a verifier or grader that runs here after the agent (call after :meth:`stop_agent_processes`).

        The agent's home is its working directory (``local``) or anything it could write: a
        ``usercustomize.py`` under ``$HOME/.local/lib/python3.X/site-packages``, a ``~/.gitconfig``
        or ``~/.config/uv/uv.toml`` it left would run or steer code inside the verifier. So the
        verifier gets a fresh, empty ``HOME`` (made now, outside the working directory, while no
        process of the agent's is left), the XDG directories under it, Python's user site off
        (``PYTHONNOUSERSITE``), with ``safe_path`` no implicit current directory on ``sys.path``
        (``PYTHONSAFEPATH``: ``python -m pytest`` run from the working directory must not import an
        agent's ``pytest.py``; SWE-bench turns it off, its tests import the patched repository from
        there by design), and a ``PATH`` without entries in places the agent could write (the
        working directory, ``/tmp``, ``/var/tmp``, ``/dev/shm``, relative entries). The task's
        own verifier env goes on top of this.
        """
        res = self.exec(["mktemp", "-d", "/tmp/.unified-verifier-home.XXXXXXXX"], timeout_s=30, workdir="/")
        home = res.stdout.strip()
        if not res.ok or not home.startswith("/tmp/.unified-verifier-home."):
            raise ExecutionError(f"{self.backend}: cannot make a fresh verifier home: {res.output().strip()[-300:]}")
        env = {"HOME": home, "XDG_CONFIG_HOME": f"{home}/.config", "XDG_CACHE_HOME": f"{home}/.cache",
               "XDG_DATA_HOME": f"{home}/.local/share", "PYTHONNOUSERSITE": "1"}
        if safe_path:
            env["PYTHONSAFEPATH"] = "1"
        path = self.command_path()
        if path is not None:  # else the image's own PATH stays (a container's /opt/conda/bin ...)
            writable = [w for w in (self.workdir.rstrip("/"), "/tmp", "/var/tmp", "/dev/shm") if w]
            kept = [p for p in path.split(":") if p.startswith("/")
                    and not any(p == w or p.startswith(w + "/") for w in writable)]
            env["PATH"] = ":".join(kept) or DEFAULT_VERIFIER_PATH
        return env

    def command_path(self) -> str | None:
        """The ``PATH`` commands run with, where the session sets it; None: the image's own."""
        return self.spec.env.get("PATH")

    def fresh_dir(self, path: str) -> None:
        """Make ``path`` an empty directory, whatever was there (a file, a symlink, a read-only tree)."""
        script = '{ [ -L "$1" ] || chmod -R u+rwX -- "$1"; } 2>/dev/null; rm -rf -- "$1" && mkdir -p -- "$1"'
        res = self.exec(["sh", "-c", script, "sh", self._abs(path)], timeout_s=60, workdir="/")
        if not res.ok:
            raise ExecutionError(f"{self.backend}: cannot empty {path}: {res.output().strip()[-300:]}")

    # -- files (portable defaults over exec) -------------------------------------------

    def write_file(self, dest: str, data: str | bytes, mode: int = 0o644) -> None:
        """Create or replace the file ``dest`` (absolute, or relative to the workdir)."""
        raw = data.encode() if isinstance(data, str) else data
        path = self._abs(dest)
        res = self.exec(["sh", "-c", 'mkdir -p "$(dirname "$1")" && cat > "$1" && chmod "$2" "$1"', "sh", path,
                         format(mode, "o")], stdin=raw, timeout_s=max(60.0, len(raw) / 5e6))
        if not res.ok:
            raise ExecutionError(f"{self.backend}: cannot write {path}: {res.stderr.strip() or res.exit_code}")

    def read_file(self, src: str) -> bytes:
        """The bytes of file ``src``; FileNotFoundError when it does not exist."""
        path = self._abs(src)
        res = self.exec(["sh", "-c", 'test -f "$1" || exit 44; base64 < "$1"', "sh", path], timeout_s=120)
        if res.exit_code == 44:
            raise FileNotFoundError(f"{self.backend}: {path} does not exist in the environment")
        if not res.ok:
            raise ExecutionError(f"{self.backend}: cannot read {path}: {res.stderr.strip()}")
        return base64.b64decode(res.stdout)

    def copy_in(self, src: Path, dest: str) -> None:
        """Copy a host file or directory to ``dest`` inside (a directory's contents go into ``dest``)."""
        src = Path(src)
        if not src.exists():
            raise FileNotFoundError(f"copy_in: {src} does not exist")
        path = self._abs(dest)
        if src.is_file():
            self.write_file(path, src.read_bytes(), mode=src.stat().st_mode & 0o777)
            return
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for child in sorted(src.iterdir()):
                tar.add(child, arcname=child.name)
        res = self.exec(["sh", "-c", 'mkdir -p "$1" && tar -x -o -C "$1"', "sh", path], stdin=buf.getvalue(),
                        timeout_s=300)
        if not res.ok:
            raise ExecutionError(f"{self.backend}: cannot copy {src} to {path}: {res.stderr.strip()}")

    def copy_out(self, src: str, dest: Path) -> None:
        """Copy a file or directory ``src`` from inside to the host path ``dest``."""
        path = self._abs(src)
        res = self.exec(["sh", "-c", 'test -e "$1" || exit 44; cd "$(dirname "$1")" && tar -ch "$(basename "$1")" '
                         '| base64', "sh", path], timeout_s=300)
        if res.exit_code == 44:
            raise FileNotFoundError(f"{self.backend}: {path} does not exist in the environment")
        if not res.ok:
            raise ExecutionError(f"{self.backend}: cannot copy {path} out: {res.stderr.strip()}")
        extract_tar_to(base64.b64decode(res.stdout), PurePosixPath(path).name, Path(dest))

    def _abs(self, path: str) -> str:
        return path if path.startswith("/") else str(PurePosixPath(self.workdir) / path)


def extract_tar_to(raw: bytes, top: str, dest: Path) -> None:
    """Unpack a tar holding one entry ``top`` (file or directory) so that it becomes ``dest``.

    Members that would land outside ``dest`` (absolute paths, ``..``, links) are refused: the
    archive comes from an environment that ran untrusted commands.
    """
    dest = Path(dest)
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        members = tar.getmembers()
        for m in members:
            rel = PurePosixPath(m.name)
            if rel.is_absolute() or ".." in rel.parts or not (m.isfile() or m.isdir()):
                continue
            parts = rel.parts
            if not parts or parts[0] != top:
                continue
            target = dest.joinpath(*parts[1:]) if len(parts) > 1 else dest
            if m.isdir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            fh = tar.extractfile(m)
            target.write_bytes(fh.read() if fh else b"")
            os.chmod(target, (m.mode & 0o755) | 0o600)


_S = TypeVar("_S", bound=ExecutionSession)


class ExecutionBackend(ABC):
    """A place to run environments: ``available()`` then ``start(spec)``."""

    name: str = ""

    @abstractmethod
    def unavailable_reason(self) -> BackendUnavailable | None:
        """None when this backend can run here, else why not (and how to fix it)."""

    def available(self) -> bool:
        return self.unavailable_reason() is None

    def require(self) -> None:
        """Raise BackendUnavailable when the backend cannot run here."""
        problem = self.unavailable_reason()
        if problem is not None:
            raise problem

    @abstractmethod
    def start(self, spec: EnvironmentSpec) -> ExecutionSession:
        """Build or pull, start, and return a session (a context manager that always cleans up)."""

    @staticmethod
    def _started(session: _S) -> _S:
        """``session`` once its ``start()`` has run; closed again (whatever the start made so far: a
        container, an instance, a sandbox and its workspace) when the start fails, then the error raised."""
        try:
            session.start()
        except BaseException:
            session.close()
            raise
        return session


def shell_join(command: str | list[str]) -> list[str]:
    """argv for ``command``: a shell string runs under ``sh -c``."""
    if isinstance(command, str):
        return ["sh", "-c", command]
    if not command:
        raise ValueError("empty command")
    return [str(c) for c in command]


def quote(argv: list[str]) -> str:
    """A copy-pasteable rendering of an argv (for logs and error messages)."""
    return " ".join(shlex.quote(a) for a in argv)
