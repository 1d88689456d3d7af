"""The ``local`` backend: a task's environment inside :mod:`unified.sandbox` (bubblewrap).

No container engine, no image: a session is one long-lived bubblewrap sandbox (read-only
host system, private ``/tmp``, no network, rlimits) whose main process is a small command
runner (:mod:`unified.execution._keeper`). Every ``exec`` runs through it, so commands share
one sandbox: files in ``/tmp``, background processes and a tmux server persist between them,
as they would in a container. ``close`` kills the sandbox; its PID namespace takes every
process started inside with it. ``stop_agent_processes`` (before a verifier runs) has the
command runner itself, without forking, stop and kill every other process inside until none is
left. The sandbox-wide limits (memory with ``/tmp``, processes, workspace disk) of
:mod:`unified.sandbox.limits` hold for the whole session; which mechanism enforced them is in
``session.info["limits"]``, and a hit ends the session with an ExecutionError naming the limit.

No network: a spec with ``network=True`` is refused (:data:`NETWORK_REFUSED`): bubblewrap's
network sharing is the host's own namespace, where the agent would reach every loopback port
(the model server, mock services of other episodes), link-local addresses and abstract Unix
sockets.

Layout inside:

- the task's working directory (``spec.workdir``, else the Dockerfile's final ``WORKDIR``,
  else ``/workspace``) is a fresh host directory, mounted read-write;
- each directory in ``spec.extra_dirs`` exists. A top-level one (``/tests``) is a host
  directory mounted read-only inside and filled from the host by ``copy_in``; a nested one
  (``/logs/verifier``) is writable inside (it lives in the sandbox's private ``/tmp``, reached
  through a symlink) and read back with ``read_file``/``copy_out``;
- with a Dockerfile (``spec.build_context``): ``ENV``, ``WORKDIR``, ``COPY``/``ADD`` and ``RUN``
  are replayed (RUN confined and offline); ``FROM`` and the rest are recorded in
  ``session.info["not_reproduced"]``. A RUN that fails makes ``start`` raise
  :class:`LocalImageError` naming the line: the task then needs a container engine.
"""

from __future__ import annotations

import base64
import json
import os
import queue
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import weakref
from pathlib import Path

from unified.execution.base import (
    BackendUnavailable,
    EnvironmentSpec,
    ExecResult,
    ExecutionBackend,
    ExecutionError,
    ExecutionSession,
    shell_join,
)
from unified.execution.dockerfile import DockerfileError, env_pairs, final_workdir, parse_dockerfile, resolve
from unified.execution.workspace import WorkspaceSession, WorkspaceSpec
from unified.sandbox import Sandbox, SandboxConfig
from unified.sandbox import bwrap_available

_KEEPER = Path(__file__).with_name("_keeper.py")
_FORBIDDEN_WORKDIRS = ("/", "/usr", "/etc", "/bin", "/sbin", "/lib", "/lib64", "/opt", "/proc", "/dev", "/tmp",
                       "/var", "/var/tmp", "/.unified")
_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_RESPONSE_GRACE_S = 30.0


NETWORK_REFUSED = ("network on is refused: a local sandbox with the network would share the host's network "
                   "namespace (its loopback services, link-local addresses such as 169.254.169.254, abstract Unix "
                   "sockets); turn the task's network off or use a container engine (docker, podman)")
"""Why the ``local`` backend never runs with the network on (one line)."""


class LocalImageError(ExecutionError):
    """The task's Dockerfile cannot be reproduced by the local backend (names file and line)."""


def _system_python() -> str | None:
    """A python3 under the read-only system directories the sandbox shows."""
    found = shutil.which("python3", path=_PATH)
    return found if found and found.startswith(("/usr/", "/bin/")) else None


def _traversable_tmp() -> Path:
    base = Path(tempfile.gettempdir())
    return base if os.stat(base).st_mode & 0o001 else Path("/tmp")


class LocalBackend(ExecutionBackend):
    """Sessions in a bubblewrap sandbox on this machine."""

    name = "local"

    def __init__(self, keep_workspace: bool = False) -> None:
        self.keep_workspace = keep_workspace

    def unavailable_reason(self) -> BackendUnavailable | None:
        if not bwrap_available():
            return BackendUnavailable("local", "bubblewrap (bwrap) is not installed", "apt-get install -y bubblewrap")
        if _system_python() is None:
            return BackendUnavailable("local", "no system python3 under /usr/bin", "apt-get install -y python3")
        return None

    def start(self, spec: EnvironmentSpec) -> LocalSession:
        self.require()
        if spec.network:
            raise ExecutionError(f"local: {NETWORK_REFUSED}")
        return self._started(LocalSession(spec, keep_workspace=self.keep_workspace))

    def workspace(self, spec: WorkspaceSpec) -> WorkspaceSession:
        """A session over a host workspace (:mod:`unified.execution.workspace`), not started yet: the
        caller puts the task's files in, then calls ``start()``."""
        self.require()
        return WorkspaceSession(spec)


class LocalSession(ExecutionSession):
    """One long-lived sandbox (see the module docstring)."""

    backend = "local"

    def __init__(self, spec: EnvironmentSpec, keep_workspace: bool = False) -> None:
        super().__init__(spec)
        self.keep_workspace = keep_workspace
        self._instructions = []
        dockerfile = Path(spec.build_context) / spec.dockerfile if spec.build_context else None
        if dockerfile is not None:
            self._instructions = parse_dockerfile(dockerfile)
        self._workdir = spec.workdir or (final_workdir(self._instructions, "/workspace") if self._instructions
                                         else "/workspace")
        if self._workdir.rstrip("/") in _FORBIDDEN_WORKDIRS or self._workdir.rstrip("/") == "":
            raise LocalImageError(f"local backend: working directory {self._workdir!r} would hide a system "
                                  "directory; give the task another WORKDIR or use a container engine")
        self._state = Path(tempfile.mkdtemp(prefix="unified-local-", dir=_traversable_tmp()))
        os.chmod(self._state, 0o755)
        self.host_workspace = self._state / "workspace"
        self.host_workspace.mkdir()
        os.chmod(self.host_workspace, 0o755)
        self._host_dirs: dict[str, Path] = {}   # top-level extra dir -> host dir (read-only inside)
        self._tmp_dirs: list[str] = []          # nested extra dirs, living under /tmp/.unified-extra
        self._box = None
        self._proc: subprocess.Popen | None = None
        self._lines: queue.Queue = queue.Queue()
        self._lock = threading.Lock()
        self._env = {"PATH": _PATH, **spec.env}
        self.info.update({"workdir": self._workdir, "host_workspace": str(self.host_workspace),
                          "image": spec.image, "approximation": "host system directories, read-only; no image"})

    @property
    def workdir(self) -> str:
        return self._workdir

    # -- start ---------------------------------------------------------------------------

    def _plan_extra_dirs(self, extra: list[str]) -> list[tuple[str, str]]:
        binds = []
        bin_dir = self._state / "bin"
        bin_dir.mkdir()
        shutil.copy(_KEEPER, bin_dir / "keeper.py")
        for p in (bin_dir, bin_dir / "keeper.py"):
            os.chmod(p, 0o755)
        binds.append((str(bin_dir), "/.unified"))
        for raw in extra:
            path = resolve("/", raw)
            if path == self._workdir or path.startswith(self._workdir.rstrip("/") + "/"):
                continue  # inside the workspace already
            parts = path.strip("/").split("/")
            top = "/" + parts[0]
            if top in _FORBIDDEN_WORKDIRS or top == "/tmp":
                if top == "/tmp":
                    self._tmp_dirs.append(path)
                    continue
                raise LocalImageError(f"local backend: extra directory {path!r} is inside a system directory")
            host_top = self._host_dirs.get(top)
            if host_top is None:
                host_top = self._state / "extra" / parts[0]
                host_top.mkdir(parents=True)
                os.chmod(host_top.parent, 0o755)
                os.chmod(host_top, 0o755)
                self._host_dirs[top] = host_top
                binds.append((str(host_top), top))
            if len(parts) > 1:
                link = host_top / parts[1]
                target = f"/tmp/.unified-extra/{parts[0]}/{parts[1]}"
                if not link.is_symlink():
                    link.symlink_to(target)
                self._tmp_dirs.append(f"/tmp/.unified-extra/{'/'.join(parts)}")
        return binds

    def start(self) -> None:
        spec = self.spec
        binds = self._plan_extra_dirs(list(spec.extra_dirs) + self._dockerfile_targets())
        config = SandboxConfig(workspace=self.host_workspace, timeout_s=spec.timeout_s,
                               memory_mb=spec.memory_mb or 1 << 20, max_processes=spec.max_processes,
                               network=spec.network, env=self._env, readonly_binds=binds, mount_point=self._workdir,
                               command_is_init=True)
        self._box = Sandbox(config)
        self._box.__enter__()
        self._stderr = open(self._state / "keeper.stderr", "w+b")
        self._proc = self._box.popen([_system_python(), "-I", "-S", "-u", "/.unified/keeper.py"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr)
        self.info["limits"] = dict(self._box.limits_info)
        self._finalizer = weakref.finalize(self, _kill_group, self._proc.pid)
        threading.Thread(target=_pump, args=(self._proc.stdout, self._lines), daemon=True).start()
        first = self._next_line(30.0)
        if first is None or not first.get("ready"):
            raise ExecutionError(f"local: the sandbox did not start: {self._stderr_text()}")
        if self._tmp_dirs:
            res = self.exec(["mkdir", "-p", *self._tmp_dirs], timeout_s=30)
            if not res.ok:
                raise ExecutionError(f"local: cannot create {self._tmp_dirs}: {res.stderr}")
        self._replay_dockerfile()

    def _dockerfile_targets(self) -> list[str]:
        """Directories outside the workdir that COPY/WORKDIR of the Dockerfile need."""
        out, cwd = [], "/"
        for ins in self._instructions:
            if ins.keyword == "WORKDIR":
                cwd = resolve(cwd, ins.args.strip())
                out.append(cwd)
            elif ins.keyword in ("COPY", "ADD"):
                words = ins.words()
                if len(words) >= 2:
                    out.append(resolve(cwd, words[-1]) if words[-1].endswith("/") or len(words) > 2
                               else os.path.dirname(resolve(cwd, words[-1])) or "/")
        return [d for d in out if d != "/"]

    def _replay_dockerfile(self) -> None:
        if not self._instructions:
            return
        dockerfile = Path(self.spec.build_context) / self.spec.dockerfile
        context = Path(self.spec.build_context).resolve()
        cwd = "/"
        skipped = []
        for ins in self._instructions:
            where = f"{dockerfile}:{ins.line}"
            if ins.keyword == "FROM":
                self.info["base_image"] = ins.args.split()[0] if ins.args.split() else ""
            elif ins.keyword == "WORKDIR":
                cwd = resolve(cwd, ins.args.strip())
                self.exec(["mkdir", "-p", cwd], timeout_s=30)
            elif ins.keyword == "ENV":
                try:
                    self._env.update(env_pairs(ins))
                except ValueError as exc:
                    raise DockerfileError(f"{dockerfile}:{exc}") from None
            elif ins.keyword in ("COPY", "ADD"):
                if "--from" in ins.args:
                    raise LocalImageError(f"{where}: multi-stage COPY --from is not reproducible locally")
                words = ins.words()
                if len(words) < 2:
                    raise LocalImageError(f"{where}: {ins.keyword} needs a source and a destination")
                *sources, dest = words
                dest_abs = resolve(cwd, dest)
                for src in sources:
                    if "://" in src:
                        raise LocalImageError(f"{where}: {ins.keyword} from a URL needs the network")
                    host_src = (context / src).resolve()
                    if not str(host_src).startswith(str(context)) or not host_src.exists():
                        raise LocalImageError(f"{where}: {src!r} is not in the build context {context}")
                    if host_src.is_dir():
                        self.copy_in(host_src, dest_abs)
                    else:
                        target = dest_abs + "/" + host_src.name if dest.endswith("/") or len(sources) > 1 else dest_abs
                        self.copy_in(host_src, target)
            elif ins.keyword == "RUN":
                words = ins.args.strip()
                argv = ins.words() if words.startswith("[") else ["sh", "-c", words]
                res = self.exec(argv, workdir=cwd, timeout_s=self.spec.build_timeout_s)
                if not res.ok:
                    raise LocalImageError(f"{where}: RUN failed in the local sandbox (exit {res.exit_code}; "
                                          f"no network, no root): {res.output().strip()[-400:]}")
            elif ins.keyword in ("ARG", "LABEL", "EXPOSE", "CMD", "ENTRYPOINT", "USER", "SHELL", "VOLUME",
                                 "HEALTHCHECK", "STOPSIGNAL", "ONBUILD", "MAINTAINER"):
                skipped.append(f"{ins.keyword} (line {ins.line})")
            else:
                raise LocalImageError(f"{where}: unknown instruction {ins.keyword}")
        self.info["not_reproduced"] = skipped

    # -- exec ----------------------------------------------------------------------------

    def exec(  # safe: a method name, not the builtin
        self, command, timeout_s=None, stdin=None, workdir=None, env=None,
    ) -> ExecResult:
        if self._proc is None or self._closed:
            raise ExecutionError("local: the session is not running")
        limit = float(self.spec.timeout_s if timeout_s is None else timeout_s)
        data = stdin.encode() if isinstance(stdin, str) else stdin
        req = {"argv": shell_join(command), "timeout": limit, "cwd": workdir or self._workdir,
               "env": {**self._env, **(env or {})},
               "stdin": base64.b64encode(data).decode() if data is not None else None}
        return self._request(req, limit)

    def _request(self, req: dict, limit: float) -> ExecResult:
        """Send one request to the command runner and wait for its answer."""
        if self._proc is None or self._closed:
            raise ExecutionError("local: the session is not running")
        with self._lock:
            try:
                self._proc.stdin.write(json.dumps(req).encode() + b"\n")
                self._proc.stdin.flush()
            except (BrokenPipeError, OSError):
                raise ExecutionError(f"local: the sandbox is gone: {self._stderr_text()}") from None
            resp = self._next_line(limit + _RESPONSE_GRACE_S)
        if resp is None:
            hit = self._box.limit_hit(self._proc) if self._box is not None else None
            self.close()
            if hit:
                raise ExecutionError(f"local: {hit}")
            raise ExecutionError(f"local: no answer from the sandbox within {limit + _RESPONSE_GRACE_S:.0f}s; "
                                 f"it was killed. {self._stderr_text()}")
        return ExecResult(exit_code=int(resp["exit_code"]),
                          stdout=base64.b64decode(resp["stdout"]).decode("utf-8", errors="replace"),
                          stderr=base64.b64decode(resp["stderr"]).decode("utf-8", errors="replace"),
                          timed_out=bool(resp["timed_out"]), duration_s=float(resp["duration_s"]),
                          backend=self.backend)

    def _next_line(self, timeout: float) -> dict | None:
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            return None
        if line is None:
            return None
        return json.loads(line)

    def _stderr_text(self) -> str:
        try:
            self._stderr.flush()
            return (self._state / "keeper.stderr").read_text(errors="replace").strip()[-2000:]
        except (OSError, AttributeError, ValueError):
            return ""

    # -- files: top-level extra dirs are filled from the host ---------------------------

    def copy_in(self, src: Path, dest: str) -> None:
        path = self._abs(dest)
        top = "/" + path.strip("/").split("/")[0]
        host_top = self._host_dirs.get(top)
        rest = path.strip("/").split("/")[1:]
        if host_top is not None and not (rest and (host_top / rest[0]).is_symlink()):
            target = host_top.joinpath(*rest)
            src = Path(src)
            if src.is_dir():
                shutil.copytree(src, target, dirs_exist_ok=True, symlinks=False)
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(src, target)
            for dirpath, dirnames, filenames in os.walk(host_top):
                os.chmod(dirpath, 0o755)
                for name in filenames:
                    p = os.path.join(dirpath, name)
                    os.chmod(p, os.stat(p).st_mode | 0o444)
            return
        super().copy_in(src, dest)

    def command_path(self) -> str | None:
        return self._env.get("PATH", _PATH)

    def stop_agent_processes(self) -> dict:
        # done by the command runner itself, without forking: works even when the process table is full
        res = self._request({"op": "reap"}, 60.0)
        return {"ok": res.ok and res.stdout.startswith("stopped"), "detail": (res.stdout + res.stderr).strip()[-300:]}

    def fresh_dir(self, path: str) -> None:
        path = self._abs(path)
        host_top = self._host_dirs.get(path.rstrip("/"))
        if host_top is not None:  # a top-level extra dir (/tests): read-only inside, emptied on the host
            for child in host_top.iterdir():
                if not child.is_symlink():  # the symlinks there are ours (nested extra dirs)
                    shutil.rmtree(child) if child.is_dir() else child.unlink()
            return
        # a nested extra dir (/logs/verifier) is a read-only symlink into the private /tmp: renew its target
        inner = f"/tmp/.unified-extra{path}"
        super().fresh_dir(inner if inner in self._tmp_dirs else path)

    # -- stop ----------------------------------------------------------------------------

    def _close(self) -> None:
        if self._proc is not None:
            _kill_group(self._proc.pid)
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:  # pragma: no cover
                pass
            for pipe in (self._proc.stdin, self._proc.stdout):
                try:
                    pipe.close()
                except (OSError, AttributeError):
                    pass
        if self._box is not None:
            try:
                self._box.__exit__(None, None, None)
            except Exception:  # pragma: no cover - cleanup must not raise
                pass
        try:
            self._stderr.close()
        except AttributeError:
            pass
        if not self.keep_workspace:
            shutil.rmtree(self._state, ignore_errors=True)


def _pump(stream, lines: queue.Queue) -> None:
    try:
        for line in stream:
            lines.put(line)
    except (OSError, ValueError):
        pass
    lines.put(None)


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def wait_until(predicate, timeout_s: float, interval_s: float = 0.05) -> bool:
    """Poll ``predicate`` until it is true or ``timeout_s`` passed."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(interval_s)
    return predicate()
