"""Limits on a whole sandbox: memory (all processes + its ``/tmp``), processes, workspace disk.

rlimits bind one process at a time (``RLIMIT_AS`` per process, ``RLIMIT_NPROC`` per host uid,
``RLIMIT_FSIZE`` per file); a sandbox's *total* needs more. Two mechanisms, the best available
one is used and recorded (``Sandbox.limits_info``):

- **cgroup v2** (hard, kernel-enforced): when this process is root and a cgroup v2 hierarchy
  with the ``memory`` and ``pids`` controllers is writable, each sandbox gets its own cgroup
  (``memory.max`` = the memory limit, swap 0, ``memory.oom.group`` so an OOM kills the whole
  sandbox, ``pids.max`` = the process limit). tmpfs pages are charged to the cgroup that
  wrote them, so the limit covers ``/tmp`` too. ``$UNIFIED_CGROUP_PARENT`` names the parent
  cgroup directory to use (a delegated one); otherwise the parent of our own cgroup.
- **watchdog** (everywhere else, polled every ``interval_s``): the host sums the anonymous
  resident memory of every process of the sandbox (the launcher's descendants), the shared
  memory objects they map or hold open (:func:`shared_memory_bytes`: ``MAP_SHARED`` anonymous
  memory, ``memfd_create`` files, System V segments; each object once), plus what its ``/tmp``
  and ``/dev/shm`` hold, and counts the processes; over a limit, the sandbox is killed. Between
  two polls a sandbox can overshoot by what it allocates in ``interval_s``; each process is
  still held by ``RLIMIT_AS``, each file (a memfd too) by ``RLIMIT_FSIZE``, and ``/tmp`` is a
  tmpfs sized to the memory limit. System V segments nobody maps are invisible from the host,
  so the sandbox's IPC namespace (made by the launcher, :func:`ipc_setup`) destroys a segment
  once no process is attached (``shm_rmid_forced``), caps their total at the memory limit
  (``shmall``/``shmmax``) and allows few message queues; ``/proc/sys`` is read-only inside.

The workspace's disk use is always watched the second way (no kernel quota is assumed): free
space of its filesystem is polled cheaply and, when it dropped by more than the room left, the
workspace is measured and the sandbox killed if it holds more than ``disk_mb``. A file counts
with its apparent size when that is larger than its blocks: a sparse file uses no disk here but
becomes real bytes wherever it is copied or read whole (a grader's copy, a snapshot); since it
leaves free space untouched, the workspace is also measured every few seconds (at most 5% of
the time goes to measuring). Files are
counted the same way (free inodes polled, ``max_files``): empty files use no bytes, only inodes.

A hit is recorded as one clear line in :attr:`Watchdog.hit` (and in the command's result).
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import signal
import stat
import threading
import time
from dataclasses import dataclass
from pathlib import Path

MIB = 1 << 20
_LAUNCHER_PROCESSES = 4
"""Processes of the launcher chain itself (outer bwrap, its init, a shell) not counted against the limit."""
_counter = itertools.count()


@dataclass
class SandboxLimits:
    """What one sandbox may use in all."""

    memory_mb: int
    max_processes: int
    disk_mb: int | None
    workspace: Path
    max_files: int | None = None
    file_size_bytes: int | None = None
    """RLIMIT_FSIZE of the sandbox's processes: the most one memfd may hold."""


def ipc_setup(memory_mb: int) -> str:
    """Shell lines, run in the sandbox's fresh IPC namespace before bubblewrap, that cap System V IPC there.

    ``shm_rmid_forced``: a segment is destroyed once no process is attached (so every segment
    that exists is mapped, and the watchdog sees it); ``shmall``/``shmmax``: all segments
    together at most ``memory_mb``; ``msgmni``: 16 message queues (16 KiB each by default).
    """
    pages = max(1, memory_mb * MIB // 4096)
    return ("echo 1 > /proc/sys/kernel/shm_rmid_forced && "
            f"echo {pages} > /proc/sys/kernel/shmall && echo {memory_mb * MIB} > /proc/sys/kernel/shmmax && "
            "echo 16 > /proc/sys/kernel/msgmni || { echo 'sandbox: cannot cap System V IPC' >&2; exit 125; }")


# --------------------------------------------------------------------------------------
# cgroup v2


def _cgroup2_mount() -> Path | None:
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        left, _, right = line.partition(" - ")
        if right.split(" ")[:1] == ["cgroup2"]:
            return Path(left.split(" ")[4])
    return None


def cgroup_parent() -> tuple[Path | None, str]:
    """``(directory under which sandbox cgroups are made, "")`` or ``(None, why cgroup v2 is not used)``."""
    if os.geteuid() != 0:
        return None, "not root: cgroups are not used (watchdog limits)"
    explicit = os.environ.get("UNIFIED_CGROUP_PARENT")
    mount = _cgroup2_mount()
    if explicit:
        parent = Path(explicit)
    elif mount is None:
        return None, "no cgroup v2 hierarchy mounted (watchdog limits)"
    else:
        own = ""
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            if line.startswith("0::"):
                own = line[3:].strip()
        current = mount / own.lstrip("/")
        parent = current if current == mount else current.parent
    try:
        available = (parent / "cgroup.controllers").read_text().split()
    except OSError:
        return None, f"cgroup v2 at {parent} is not readable (watchdog limits)"
    if not {"memory", "pids"} <= set(available):
        return None, f"cgroup v2 at {parent} lacks the memory/pids controllers (watchdog limits)"
    try:
        enabled = (parent / "cgroup.subtree_control").read_text().split()
        missing = [c for c in ("memory", "pids") if c not in enabled]
        if missing:
            (parent / "cgroup.subtree_control").write_text(" ".join("+" + c for c in missing))
    except OSError as exc:
        return None, f"cannot enable memory/pids below {parent}: {exc.strerror} (watchdog limits)"
    if not os.access(parent, os.W_OK):
        return None, f"cgroup v2 at {parent} is not writable (watchdog limits)"
    return parent, ""


class Cgroup:
    """One sandbox's cgroup v2 directory (see the module docstring)."""

    def __init__(self, parent: Path, limits: SandboxLimits) -> None:
        self.path = parent / f"unified-sbx-{os.getpid()}-{next(_counter)}"
        self.path.mkdir()
        self.memory_mb, self.max_processes = limits.memory_mb, limits.max_processes
        for name, value in (("memory.max", str(limits.memory_mb * MIB)), ("memory.swap.max", "0"),
                            ("memory.oom.group", "1"), ("pids.max", str(limits.max_processes + _LAUNCHER_PROCESSES))):
            if (self.path / name).exists():
                (self.path / name).write_text(value)

    def enter_argv(self) -> list[str]:
        """The launcher prefix that moves itself into this cgroup, then execs the rest."""
        return ["/bin/sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', str(self.path)]

    def events(self) -> dict[str, int]:
        out = {}
        for name in ("memory.events", "pids.events"):
            try:
                for line in (self.path / name).read_text().splitlines():
                    key, _, value = line.partition(" ")
                    out[f"{name.split('.')[0]}.{key}"] = int(value)
            except (OSError, ValueError):
                pass
        return out

    def hit(self, before: dict[str, int]) -> str | None:
        """The limit hit since ``before`` (an earlier :meth:`events`), as one line, or None."""
        now = self.events()
        if now.get("memory.oom_kill", 0) > before.get("memory.oom_kill", 0):
            return (f"memory limit of {self.memory_mb} MiB reached (all processes and /tmp together, cgroup v2): "
                    "the sandbox's processes were killed")
        if now.get("pids.max", 0) > before.get("pids.max", 0):
            return f"process limit of {self.max_processes} reached (cgroup v2): new processes were refused"
        return None

    def remove(self) -> None:
        try:
            (self.path / "cgroup.kill").write_text("1")
        except OSError:
            for pid in self._pids():
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        for _ in range(100):
            try:
                self.path.rmdir()
                return
            except OSError:
                threading.Event().wait(0.05)

    def _pids(self) -> list[int]:
        try:
            return [int(p) for p in (self.path / "cgroup.procs").read_text().split()]
        except (OSError, ValueError):
            return []


# --------------------------------------------------------------------------------------
# watchdog


def _parents() -> dict[int, int]:
    out = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                raw = open(f"/proc/{name}/stat", "rb").read()
                out[int(name)] = int(raw[raw.rfind(b")") + 2:].split()[1])
            except (OSError, ValueError, IndexError):
                pass
    return out


def descendants(root: int) -> list[int]:
    """``root`` and every process below it (from the parent links in /proc)."""
    children: dict[int, list[int]] = {}
    for pid, ppid in _parents().items():
        children.setdefault(ppid, []).append(pid)
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, ()))
    return out


_RSS_ANON = re.compile(rb"^RssAnon:\s+(\d+) kB", re.MULTILINE)


def _anon_bytes(pid: int) -> int:
    try:
        match = _RSS_ANON.search(open(f"/proc/{pid}/status", "rb").read())
    except OSError:
        return 0
    return int(match.group(1)) * 1024 if match else 0


_SHARED_KINDS = ("/memfd:", "/SYSV", "/dev/zero")
"""Paths /proc/<pid>/maps gives shared memory that lives in no mounted filesystem."""


def shared_memory_bytes(pids: list[int], file_size_cap: int | None = None) -> int:
    """Shared memory the processes ``pids`` map or hold open that no mounted tmpfs counts, each object once.

    ``MAP_SHARED`` anonymous memory (``/dev/zero (deleted)`` in ``maps``), ``memfd_create`` files
    and attached System V segments (``/SYSV...``), found in ``/proc/<pid>/maps`` (shared
    mappings) and ``/proc/<pid>/fd`` (a memfd held open); keyed by inode. An object's size is
    what it holds (its blocks, read through ``/proc/<pid>/map_files`` or the open fd). Where
    neither can be read (``map_files`` needs root), a mapped object counts its mapped extent, and
    a memfd that is only mapped counts ``file_size_cap`` (RLIMIT_FSIZE, the most it may hold)
    when that is larger: a memfd can hold more than the part of it that is mapped.
    """
    sizes: dict[tuple[str, int], int] = {}
    for pid in pids:
        try:
            maps = open(f"/proc/{pid}/maps").read().splitlines()
        except OSError:
            maps = []
        for line in maps:
            parts = line.split(None, 5)
            if len(parts) < 6 or parts[1][3:4] != "s" or not parts[5].startswith(_SHARED_KINDS):
                continue
            kind = "sysv" if parts[5].startswith("/SYSV") else "shm"
            key = (kind, int(parts[4]))
            start, end = (int(x, 16) for x in parts[0].split("-"))
            try:
                st = os.stat(f"/proc/{pid}/map_files/{parts[0]}")
                size = st.st_blocks * 512
            except OSError:
                size = int(parts[2], 16) + end - start
                if parts[5].startswith("/memfd:") and file_size_cap:
                    size = max(size, file_size_cap)
            sizes[key] = max(sizes.get(key, 0), size)
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            fds = []
        for fd in fds:
            try:
                if not os.readlink(f"/proc/{pid}/fd/{fd}").startswith("/memfd:"):
                    continue
                st = os.stat(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            key = ("shm", st.st_ino)
            held = st.st_blocks * 512
            # a measured size replaces the upper bound a mapping alone gave
            sizes[key] = held if key not in sizes or sizes[key] == file_size_cap else max(sizes[key], held)
    return sum(sizes.values())


def _private_tmp_bytes(pids: list[int]) -> int:
    """What the sandbox's own /tmp and /dev/shm (tmpfs, seen through one of its processes) hold."""
    host_dev = {}
    for sub in ("tmp", "dev/shm"):
        try:
            host_dev[sub] = os.stat(f"/{sub}").st_dev
        except OSError:
            host_dev[sub] = -1
    for pid in reversed(pids):
        total, found = 0, False
        for sub in ("tmp", "dev/shm"):
            try:
                where = f"/proc/{pid}/root/{sub}"
                if os.stat(where).st_dev == host_dev[sub]:  # a launcher process: the host's own
                    continue
                st = os.statvfs(where)
            except OSError:
                continue
            found = True
            total += (st.f_blocks - st.f_bfree) * st.f_frsize
        if found:
            return total
    return 0


def tree_bytes(root: Path) -> int:
    """Bytes under ``root``: each file's disk blocks or apparent size, the larger (see :func:`tree_usage`)."""
    return tree_usage(root)[0]


def tree_usage(root: Path) -> tuple[int, int]:
    """``(bytes, entries)`` under ``root`` (hard links counted once, symlinks not followed).

    A file's bytes are the larger of its disk blocks and its apparent size (``st_size``: a
    sparse file is as large as what reading or copying it produces).
    """
    seen, total = set(), 0
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            try:
                st = os.lstat(os.path.join(dirpath, name))
            except OSError:
                continue
            if (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            total += max(st.st_blocks * 512, st.st_size if stat.S_ISREG(st.st_mode) else 0)
    return total, len(seen)


class Watchdog(threading.Thread):
    """Polls one running sandbox (the launcher process ``pid``) and calls ``kill`` when a limit is passed."""

    def __init__(self, pid: int, limits: SandboxLimits, kill, watch_memory: bool, workspace_bytes: int,
                 interval_s: float = 0.2, workspace_files: int = 0) -> None:
        super().__init__(daemon=True, name=f"sandbox-watchdog-{pid}")
        self.pid, self.limits, self.kill = pid, limits, kill
        self.watch_memory, self.interval_s = watch_memory, interval_s
        self.hit: str | None = None
        self._stop_event = threading.Event()
        self._disk_room = None
        if limits.disk_mb is not None:
            self._disk_room = max(0, limits.disk_mb * MIB - workspace_bytes)
            self._free_at_start = _free_bytes(limits.workspace)
        self._next_walk, self._walk_every = time.monotonic() + 1.0, 1.0
        self._file_room = None
        if limits.max_files is not None:
            self._file_room = max(0, limits.max_files - workspace_files)
            self._inodes_at_start = _free_inodes(limits.workspace)

    def stop(self) -> None:
        self._stop_event.set()

    def run(self) -> None:
        while not self._stop_event.wait(self.interval_s):
            try:
                os.kill(self.pid, 0)
            except OSError:
                return
            problem = self.check()
            if problem:
                self.hit = problem
                self.kill()
                return

    def check(self) -> str | None:
        lim = self.limits
        if self.watch_memory:
            pids = descendants(self.pid)
            if len(pids) > lim.max_processes + _LAUNCHER_PROCESSES:
                return f"process limit of {lim.max_processes} reached (watchdog): the sandbox was killed"
            used = (sum(_anon_bytes(p) for p in pids) + shared_memory_bytes(pids, lim.file_size_bytes)
                    + _private_tmp_bytes(pids))
            if used > lim.memory_mb * MIB:
                return (f"memory limit of {lim.memory_mb} MiB reached (all processes, shared memory and /tmp together: "
                        f"{used // MIB} MiB, watchdog): the sandbox was killed")
        due = self._disk_room is not None and time.monotonic() >= self._next_walk  # sparse files use no space
        if due or (self._disk_room is not None and self._free_at_start - _free_bytes(lim.workspace) > self._disk_room):
            started = time.monotonic()
            used = tree_bytes(lim.workspace)
            self._walk_every = max(1.0, 20 * (time.monotonic() - started))
            self._next_walk = time.monotonic() + self._walk_every
            if used > lim.disk_mb * MIB:
                return (f"disk limit of {lim.disk_mb} MiB reached (the workspace holds {used // MIB} MiB): "
                        "the sandbox was killed")
            # someone else used the disk: measure again only once the room left is used up
            self._free_at_start, self._disk_room = _free_bytes(lim.workspace), lim.disk_mb * MIB - used
        if self._file_room is not None and self._inodes_at_start - _free_inodes(lim.workspace) > self._file_room:
            files = tree_usage(lim.workspace)[1]
            if files > lim.max_files:
                return (f"file limit of {lim.max_files} files reached (the workspace holds {files}): "
                        "the sandbox was killed")
            self._inodes_at_start, self._file_room = _free_inodes(lim.workspace), lim.max_files - files
        return None


def _free_inodes(path: Path) -> int:
    try:
        return os.statvfs(path).f_favail
    except OSError:
        return 0


def _free_bytes(path: Path) -> int:
    try:
        st = os.statvfs(path)
    except OSError:
        return 0
    return st.f_bavail * st.f_frsize


def bwrap_supports_size() -> bool:
    """Whether this bubblewrap can size a tmpfs (``--size``, bubblewrap >= 0.7)."""
    global _SIZE_OK
    if _SIZE_OK is None:
        import subprocess

        binary = shutil.which("bwrap")
        try:
            _SIZE_OK = bool(binary) and "--size" in subprocess.run(
                [binary, "--help"], capture_output=True, text=True, timeout=10).stdout
        except (OSError, subprocess.TimeoutExpired):
            _SIZE_OK = False
    return _SIZE_OK


_SIZE_OK: bool | None = None
