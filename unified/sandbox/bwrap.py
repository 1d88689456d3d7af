"""A local sandbox on bubblewrap (``bwrap``): run untrusted commands with no way out.

What a command inside sees and may do:

- a read-only root assembled from the host's system directories (``/usr``, ``/etc``, the
  ``/bin``-style links); nothing else of the host is visible (no ``/root``, ``/home``, ``/work``)
  unless listed in ``SandboxConfig.readonly_binds``;
- a private, empty ``/tmp`` and ``/dev/shm`` (tmpfs, sized to the memory limit and counted in it)
  and its own ``/proc`` and minimal, read-only ``/dev``;
- one writable directory: the workspace, mounted at ``SandboxConfig.mount_point``
  (``/workspace``), which is also the working directory and ``$HOME`` (unless ``home`` says
  otherwise: graders use ``/tmp`` so that nothing an agent left in the workspace acts as their
  home);
- no network (``--unshare-net``: only a loopback of its own) unless ``network=True``;
- its own PID, IPC and UTS namespaces (hostname ``sandbox``), a user namespace in which it
  runs as ``agent`` (uid 1000), no capabilities;
- rlimits: address space (``memory_mb``), processes (``max_processes``), file size, no core
  dumps; and limits on the whole sandbox (memory of all its processes plus ``/tmp``, process
  count, workspace disk; cgroup v2 or a watchdog, see :mod:`unified.sandbox.limits`);
- none of the host's environment: the launcher chain itself starts with a minimal environment
  (:mod:`unified.sandbox.hostenv`), so not even ``/proc/1/environ`` (bubblewrap) holds a host value;
- output is capped while it streams (``max_output_bytes`` per stream, the rest counted and dropped).

Timeouts: every run starts in its own process group; on timeout the whole group gets
SIGKILL, and because the command runs in a private PID namespace whose init is bubblewrap's
(``--die-with-parent``), everything it spawned, daemonised or not, dies with it.

Running as root: the kernel never applies ``RLIMIT_NPROC`` to host uid 0, so when the
caller is root the sandbox drops to ``SandboxConfig.host_uid`` (a fresh uid per sandbox) with
``setpriv`` before entering bubblewrap and lends the workspace to that uid (``chown -R`` on
enter, back on exit; each run bind-mounts it onto a world-traversable stage path inside a
private mount namespace, so the workspace itself may live anywhere).
Set ``host_uid=None`` to stay root (the process limit is then not enforced).
"""

from __future__ import annotations

import itertools
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from unified.sandbox.hostenv import DEFAULT_PATH, minimal_host_env
from unified.sandbox.limits import (
    Cgroup,
    SandboxLimits,
    Watchdog,
    bwrap_supports_size,
    cgroup_parent,
    ipc_setup,
    tree_usage,
)
from unified.sandbox.streams import communicate_capped, cut_text

BACKEND = "bwrap"

_SYSTEM_DIRS = ("/usr", "/etc", "/opt")
_SYSTEM_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_STAGE_SCRIPT = ('{ipc} && while [ "$1" != "--" ]; do mount --bind "$1" "$2" || exit 125; shift 2; done; '
                 'shift; exec "$@"')
"""Run as root in a private mount and IPC namespace: cap System V IPC, bind each host path onto its stage path, then exec."""
_IPC_SCRIPT = '{ipc} && exec "$@"'
"""Run first in the sandbox's own IPC namespace (root in it): cap System V IPC, then exec."""
_DEFAULT_PATH = DEFAULT_PATH


class SandboxError(RuntimeError):
    """The sandbox could not be set up (bubblewrap missing, bad workspace, ...)."""


@dataclass
class SandboxConfig:
    """How to confine one workspace."""

    workspace: Path
    """Host directory mounted read-write at ``mount_point`` (created if missing)."""
    timeout_s: float = 30
    """Default wall-clock limit of one ``run``."""
    memory_mb: int = 1024
    """Memory of the whole sandbox in MiB: all its processes and its ``/tmp`` together (cgroup v2 or
    watchdog); also the address-space limit (RLIMIT_AS) of each process and the size of ``/tmp``."""
    address_space_mb: int | None = None
    """RLIMIT_AS of each process in MiB (None: ``memory_mb``; 0: none). A browser reserves about a TiB
    of address space (V8's sandbox) and dies under any smaller limit; the sandbox-wide memory limit
    (cgroup v2 or watchdog) still holds without it."""
    max_processes: int = 256
    """Processes the sandbox may have at once (RLIMIT_NPROC, and cgroup v2 or watchdog)."""
    disk_mb: int | None = 8192
    """Most the workspace may hold, in MiB (watched while commands run); None: no limit."""
    max_files: int | None = 1_000_000
    """Most files and directories the workspace may hold (watched while commands run); None: no limit."""
    network: bool = False
    """Share the host's network namespace (default: none, only a private loopback). Shared means
    everything: the host's loopback services, link-local addresses, abstract Unix sockets; the
    ``local`` execution backend never asks for it (agents run there)."""
    env: dict = field(default_factory=dict)
    """Extra environment variables (the host environment is never inherited)."""
    readonly_binds: list = field(default_factory=list)
    """Extra host paths to expose read-only: ``"/path"`` (same place) or ``("/src", "/dest")``."""
    mount_point: str = "/workspace"
    """Where the workspace appears inside (also the working directory, and ``$HOME`` unless ``home`` is set)."""
    home: str | None = None
    """``$HOME`` inside (default: ``mount_point``). Graders set ``/tmp``: nothing the agent wrote is their home."""
    file_size_mb: int = 256
    """RLIMIT_FSIZE: largest file a command may write, in MiB."""
    max_output_bytes: int = 1 << 20
    """stdout/stderr beyond this many bytes are cut (with a marker) in the result."""
    host_uid: int | str | None = "auto"
    """When the caller is root: the unprivileged host uid the sandbox runs as. ``"auto"`` picks a
    fresh uid per Sandbox (from 1000000000 up; never one another live sandbox of this process holds),
    so that the process limit, which the kernel counts per host uid, is not shared with other
    sandboxes and no sandbox may signal another's processes; None: stay root."""
    hostname: str = "sandbox"
    """Hostname inside."""
    command_is_init: bool = False
    """Run the command itself as the sandbox's pid 1 (``bwrap --as-pid-1``) instead of under
    bubblewrap's own init. bubblewrap's init holds the command's stdin/stdout/stderr and runs as the
    sandbox's user, dumpable: any process inside may open ``/proc/1/fd/0`` and ``/proc/1/fd/1``. A
    long-lived command that talks to the host through those pipes (the ``local`` backend's command
    runner) sets this, makes itself non-dumpable, and reaps the orphans reparented to it."""


@dataclass
class SandboxResult:
    """What one command did."""

    exit_code: int
    """Exit status (negative: killed by that signal; -9 after a timeout)."""
    stdout: str
    """Standard output (UTF-8, undecodable bytes replaced)."""
    stderr: str
    """Standard error."""
    timed_out: bool
    """True when the time limit killed it."""
    duration_s: float
    """Wall time."""
    backend: str = BACKEND
    """Which sandbox ran it."""
    limit: str | None = None
    """The sandbox-wide limit (memory, processes, disk) that stopped the command, as one line; None if none."""


def bwrap_available() -> bool:
    """Whether bubblewrap is installed (``apt-get install bubblewrap``)."""
    return shutil.which("bwrap") is not None


class Sandbox:
    """A bubblewrap sandbox around one workspace; use as a context manager.

    >>> with Sandbox(SandboxConfig(workspace=Path("/tmp/ws"))) as box:   # doctest: +SKIP
    ...     box.run("echo hi > f && cat f").stdout
    'hi\\n'
    """

    backend = BACKEND

    def __init__(self, config: SandboxConfig) -> None:
        self.config = config
        self._state: tempfile.TemporaryDirectory | None = None
        self._live: set[subprocess.Popen] = set()
        self._watchdogs: dict[int, Watchdog] = {}
        self._drop_to: int | None = None
        self._cgroup: Cgroup | None = None
        self._lent_uid: int | None = None
        self.limits_info: dict[str, str] = {}
        """How the sandbox-wide limits are enforced here (``memory``: cgroup v2 or watchdog, and why)."""

    # -- lifecycle ---------------------------------------------------------------------

    def __enter__(self) -> Sandbox:
        if not bwrap_available():
            raise SandboxError("bubblewrap (bwrap) is not installed: apt-get install -y bubblewrap")
        try:
            return self._enter()
        except BaseException:
            self.__exit__(None, None, None)  # no state dir, cgroup or lent workspace is left behind
            raise

    def _enter(self) -> Sandbox:
        self._readonly_binds()  # a bad bind is an error before anything is created or lent
        ws = Path(self.config.workspace).resolve()
        ws.mkdir(parents=True, exist_ok=True)
        self.workspace = ws
        self._state = tempfile.TemporaryDirectory(prefix="unified-sbx-", dir=_traversable_tmp())
        state = Path(self._state.name)
        os.chmod(state, 0o755)
        (state / "passwd").write_text(
            "root:x:0:0:root:/root:/bin/sh\n"
            f"agent:x:1000:1000:agent:{self.config.mount_point}:/bin/sh\n"
            "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n")
        (state / "group").write_text("root:x:0:\nagent:x:1000:\nnogroup:x:65534:\n")
        for name in ("passwd", "group"):
            os.chmod(state / name, 0o644)
        if os.geteuid() == 0 and self.config.host_uid is not None:
            if self.config.host_uid == "auto":
                self._drop_to = self._lent_uid = _UIDS.take()
            else:
                self._drop_to = int(self.config.host_uid)
            self._give_workspace(ws)
        self._limits = SandboxLimits(memory_mb=self.config.memory_mb, max_processes=self.config.max_processes,
                                     disk_mb=self.config.disk_mb, workspace=ws, max_files=self.config.max_files,
                                     file_size_bytes=self.config.file_size_mb * 1024 * 1024)
        watched = self.config.disk_mb is not None or self.config.max_files is not None
        self._workspace_bytes, self._workspace_files = tree_usage(ws) if watched else (0, 0)
        parent, why = _cgroup_parent()
        if parent is not None:
            try:
                self._cgroup = Cgroup(parent, self._limits)
                self.limits_info = {"memory": "cgroup v2", "cgroup": str(self._cgroup.path),
                                    "shared_memory": "cgroup v2 (shared memory is charged to the cgroup)"}
            except OSError as exc:
                self.limits_info = {"memory": "watchdog", "why": f"cannot create a cgroup under {parent}: {exc}"}
        else:
            self.limits_info = {"memory": "watchdog", "why": why}
        if self._cgroup is None:
            self.limits_info["shared_memory"] = (
                "watchdog: MAP_SHARED, memfd and attached System V memory counted"
                + ("" if os.geteuid() == 0 else " (a memfd only mapped counts the file size limit)"))
        self.limits_info["sysv_ipc"] = (f"own IPC namespace: segments removed when detached, at most "
                                        f"{self.config.memory_mb} MiB together")
        return self

    def __exit__(self, *exc: object) -> None:
        for proc in list(self._live):
            self._kill(proc)
        for dog in self._watchdogs.values():
            dog.stop()
        self._watchdogs.clear()
        if self._cgroup is not None:
            self._cgroup.remove()
            self._cgroup = None
        if self._drop_to is not None:  # hand the workspace back to the caller
            _chown_tree(self.workspace, os.getuid(), os.getgid())
        if self._lent_uid is not None:  # its processes are gone: the uid may serve another sandbox
            _UIDS.give_back(self._lent_uid)
            self._lent_uid = None
        if self._state is not None:
            self._state.cleanup()
            self._state = None

    def _give_workspace(self, ws: Path) -> None:
        _chown_tree(ws, self._drop_to, self._drop_to)
        # The unprivileged uid may not be able to traverse the workspace's ancestors (pytest's
        # 0700 temp dirs, /root/...): each run bind-mounts it, as root in a private mount
        # namespace, onto this stage directory under the (world-traversable) state dir.
        self._stage = Path(self._state.name) / "workspace"
        self._stage.mkdir()
        self._ro_stage: list[tuple[str, Path]] = []
        for i, (src, _dest) in enumerate(self._readonly_binds()):
            stage = Path(self._state.name) / f"ro{i}"
            stage.mkdir() if os.path.isdir(src) else stage.touch()
            self._ro_stage.append((src, stage))

    def _readonly_binds(self) -> list[tuple[str, str]]:
        out = []
        for bind in self.config.readonly_binds:
            src, dest = (bind, bind) if isinstance(bind, (str, os.PathLike)) else bind
            if not os.path.exists(src):
                raise SandboxError(f"SandboxConfig.readonly_binds: {src} does not exist")
            out.append((os.path.realpath(src), str(dest)))
        return out

    # -- command line ------------------------------------------------------------------

    def command_line(self, command: str | list[str]) -> list[str]:
        """The full host command (prlimit, setpriv, bwrap ...) that runs ``command``."""
        if self._state is None:
            raise SandboxError("use the Sandbox as a context manager (with Sandbox(cfg) as box: ...)")
        cfg = self.config
        argv = [command] if isinstance(command, str) else list(command)
        if isinstance(command, str):
            argv = ["/bin/sh", "-c", command]
        if not argv:
            raise ValueError("empty command")
        mib = 1024 * 1024
        cmd = self._cgroup.enter_argv() if self._cgroup is not None else []
        address_space = cfg.memory_mb if cfg.address_space_mb is None else cfg.address_space_mb
        cmd += ["prlimit", *([f"--as={address_space * mib}"] if address_space else []), f"--nproc={cfg.max_processes}",
                f"--fsize={cfg.file_size_mb * mib}", "--core=0", "--"]
        workspace = str(self.workspace)
        ro_binds = self._readonly_binds()
        # the sandbox's IPC namespace is made here, where we are root in it, to cap System V IPC
        # (see unified.sandbox.limits.ipc_setup); bubblewrap then keeps it (no --unshare-ipc)
        ipc = ipc_setup(cfg.memory_mb)
        if self._drop_to is None:
            who = ["--user", "--map-root-user"] if os.geteuid() != 0 else []
            cmd += ["unshare", *who, "--ipc", "--", "/bin/sh", "-c", _IPC_SCRIPT.replace("{ipc}", ipc), "ipc"]
        else:
            pairs = [workspace, str(self._stage)]
            for src, stage in self._ro_stage:
                pairs += [src, str(stage)]
            cmd += ["unshare", "--mount", "--ipc", "--propagation", "private", "--", "/bin/sh", "-c",
                    _STAGE_SCRIPT.replace("{ipc}", ipc), "stage", *pairs, "--",
                    "setpriv", f"--reuid={self._drop_to}", f"--regid={self._drop_to}", "--clear-groups", "--"]
            workspace = str(self._stage)
            ro_binds = [(str(stage), dest) for (_src, stage), (_s, dest) in zip(self._ro_stage, ro_binds)]
        state = Path(self._state.name)
        # bubblewrap's own environment stays readable as /proc/1/environ: the shells of the launcher
        # chain export PWD (the host's working directory), so it is dropped right before
        cmd += ["env", "-u", "PWD", "-u", "OLDPWD", "--"]
        cmd += ["bwrap", "--unshare-user", "--uid", "1000", "--gid", "1000", "--unshare-pid",
                "--unshare-uts", "--unshare-cgroup-try", "--hostname", cfg.hostname]
        if cfg.command_is_init:
            cmd.append("--as-pid-1")
        if not cfg.network:
            cmd.append("--unshare-net")
        cmd += ["--tmpfs", "/"]
        for d in _SYSTEM_DIRS:
            if os.path.isdir(d):
                cmd += ["--ro-bind", d, d]
        for link in _SYSTEM_LINKS:
            if os.path.islink(link):
                cmd += ["--symlink", os.readlink(link), link]
            elif os.path.isdir(link):
                cmd += ["--ro-bind", link, link]
        cmd += ["--ro-bind", str(state / "passwd"), "/etc/passwd", "--ro-bind", str(state / "group"), "/etc/group"]
        # /tmp and /dev/shm are memory (tmpfs): each never larger than the sandbox's memory limit, both
        # counted in it; the rest of /dev (a tmpfs of host RAM) is read-only
        size = ["--size", str(cfg.memory_mb * mib)] if bwrap_supports_size() else []
        cmd += ["--dev", "/dev", *size, "--tmpfs", "/dev/shm", "--remount-ro", "/dev", "--proc", "/proc",
                "--ro-bind", "/proc/sys", "/proc/sys"]  # the IPC caps above must stay as they are
        cmd += [*size, "--tmpfs", "/tmp", "--dir", "/var/tmp", "--bind", workspace, cfg.mount_point]
        for src, dest in ro_binds:  # after /tmp and the workspace, so they may lie inside those
            cmd += ["--ro-bind", src, dest]
        cmd += ["--chdir", cfg.mount_point,
                "--remount-ro", "/", "--die-with-parent", "--new-session", "--clearenv",
                "--setenv", "PATH", _DEFAULT_PATH, "--setenv", "HOME", cfg.home or cfg.mount_point,
                "--setenv", "USER", "agent", "--setenv", "LANG", "C.UTF-8", "--setenv", "LC_ALL", "C.UTF-8",
                "--setenv", "TERM", "dumb", "--setenv", "TMPDIR", "/tmp"]
        for key, value in cfg.env.items():
            cmd += ["--setenv", str(key), str(value)]
        return cmd + ["--"] + argv

    # -- running -----------------------------------------------------------------------

    def popen(self, command: str | list[str], **popen_args) -> subprocess.Popen:
        """Start ``command`` in the sandbox (``popen_args``: Popen's stdin/stdout/stderr) and watch its limits.

        The launcher chain gets a minimal environment (never ours) and its own session; the
        returned process is killed with the sandbox. :meth:`limit_hit` says whether a
        sandbox-wide limit killed it.
        """
        proc = subprocess.Popen(self.command_line(command), env=minimal_host_env(), start_new_session=True,
                                **popen_args)
        self._live.add(proc)
        dog = Watchdog(proc.pid, self._limits, kill=lambda: _kill_group(proc.pid),
                       watch_memory=self._cgroup is None, workspace_bytes=self._workspace_bytes,
                       workspace_files=self._workspace_files)
        self._watchdogs[proc.pid] = dog
        dog.start()
        return proc

    def limit_hit(self, proc: subprocess.Popen, cgroup_before: dict[str, int] | None = None) -> str | None:
        """The sandbox-wide limit that stopped ``proc`` (one line), or None.

        ``cgroup_before``: the cgroup's events when ``proc`` started (default: none, i.e. any hit
        since the sandbox was entered counts).
        """
        dog = self._watchdogs.get(proc.pid)
        if dog is not None and dog.hit:
            return dog.hit
        if self._cgroup is not None:
            return self._cgroup.hit(cgroup_before or {})
        return None

    def release(self, proc: subprocess.Popen) -> None:
        """Kill what is left of ``proc`` and stop watching it."""
        if proc.poll() is None:
            self._kill(proc)
        self._live.discard(proc)
        dog = self._watchdogs.pop(proc.pid, None)
        if dog is not None:
            dog.stop()

    def run(self, command: str | list[str], timeout_s: float | None = None,
            stdin: str | bytes | None = None) -> SandboxResult:
        """Run ``command`` (a shell string or an argv list) and wait for it, at most ``timeout_s``.

        Output is capped while it streams (``max_output_bytes`` a stream); a sandbox-wide limit
        that kills the command is in ``result.limit`` and on the last line of ``stderr``.
        """
        limit = self.config.timeout_s if timeout_s is None else timeout_s
        data = stdin.encode() if isinstance(stdin, str) else stdin
        start = time.monotonic()
        before = self._cgroup.events() if self._cgroup is not None else None
        proc = self.popen(command, stdin=subprocess.PIPE if data is not None else subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            out, err, timed_out = communicate_capped(proc, data, limit, self.config.max_output_bytes,
                                                     on_timeout=lambda: self._kill(proc))
            hit = self.limit_hit(proc, before)
        finally:
            self.release(proc)
        stderr = cut_text(err)
        if hit:
            stderr += ("" if not stderr or stderr.endswith("\n") else "\n") + f"[sandbox: {hit}]\n"
        return SandboxResult(exit_code=proc.returncode, stdout=cut_text(out), stderr=stderr,
                             timed_out=timed_out, duration_s=time.monotonic() - start, limit=hit)

    @staticmethod
    def _kill(proc: subprocess.Popen) -> None:
        _kill_group(proc.pid)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover - kernel did not reap in time
            pass


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


_CGROUP_PARENT: tuple | None = None


def _cgroup_parent() -> tuple:
    """:func:`unified.sandbox.limits.cgroup_parent`, decided once per process."""
    global _CGROUP_PARENT
    if _CGROUP_PARENT is None:
        _CGROUP_PARENT = cgroup_parent()
    return _CGROUP_PARENT


class _UidPool:
    """Host uids for sandboxes of this process: ``BASE + (pid % 10**6) * 1000 + slot``.

    A slot is never handed out twice while a sandbox holds it (at most ``SLOTS`` live sandboxes a
    process); other processes use other pids, hence other ranges.
    """

    BASE, SLOTS = 1_000_000_000, 1000

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: set[int] = set()
        self._next = itertools.count()

    def take(self) -> int:
        with self._lock:
            for _ in range(self.SLOTS):
                slot = next(self._next) % self.SLOTS
                uid = self.BASE + (os.getpid() % 1_000_000) * self.SLOTS + slot
                if uid not in self._held:
                    self._held.add(uid)
                    return uid
        raise SandboxError(f"more than {self.SLOTS} live sandboxes in one process: no fresh host uid left")

    def give_back(self, uid: int) -> None:
        with self._lock:
            self._held.discard(uid)


_UIDS = _UidPool()


def _traversable_tmp() -> str:
    """A temp root every uid can traverse ($TMPDIR may be private)."""
    base = tempfile.gettempdir()
    return base if os.stat(base).st_mode & 0o001 else "/tmp"


def _chown_tree(root: Path, uid: int, gid: int) -> None:
    os.chown(root, uid, gid)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            try:
                os.chown(os.path.join(dirpath, name), uid, gid, follow_symlinks=False)
            except FileNotFoundError:
                pass


@contextmanager
def throwaway_sandbox(**options) -> Iterator[Sandbox]:
    """A sandbox on a fresh temporary workspace that is deleted afterwards."""
    with tempfile.TemporaryDirectory(prefix="unified-ws-") as tmp:
        os.chmod(tmp, 0o755)
        with Sandbox(SandboxConfig(workspace=Path(tmp), **options)) as box:
            yield box
