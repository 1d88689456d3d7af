"""A verifier that runs while the agent's processes keep running, out of their reach (docker, podman).

Terminal-Bench's own harness (Harbor) runs the verifier in the agent's container right after the
agent stops, and leaves every process the agent or the oracle started running: a task whose answer
is a service (a mail server, a web server) is verified by talking to it. Left running, such a
process could also write the verifier's reward file, rewrite its tests while they run, or plant
programs in the home the verifier installs its tools into. So on container engines the verifier
runs in a *private mount namespace with more privileges than the agent's processes*:

- the setup is privileged and runs only the host's own static programs (BusyBox and a
  capability-dropping ``keep-caps``, mounted read-only into the container from its start,
  :mod:`unified.execution.verifier_tools`): nothing from the container's filesystem, which the
  agent (root in its container) can replace, ever runs with privileges;
- the verifier's command runs with the container's default capabilities plus one harmless
  marker capability (``CAP_WAKE_ALARM``), never more: the agent's processes lack the marker, so
  the kernel's ptrace access check (the caller's capabilities must include the target's) refuses
  them the verifier's ``/proc/PID/{root,cwd,fd,environ,mem}``: they cannot reach its private
  mounts, its pipes or its memory;
- ``unshare --mount --propagation private``: fresh tmpfs mounts, seen only by the verifier, over
  the directories it alone writes (``/logs/verifier``, ``/tests``, its ``HOME``) and over a
  scratch directory for its own output; the tests arrive as a tar on the verifier's stdin;
- the agent's processes can still unlink a mount point in their namespace, which detaches the
  verifier's mount in its namespace (Linux >= 3.18): every private directory's device number is
  checked before the command runs and again after it (from inside the directory), and a change
  is reported as interference (``tampered``), never read as a result;
- the outputs (the command's stdout, stderr, exit status and the reward directory) leave through
  the verifier's own stdout, as one tar, written from the directory the check just confirmed.

Everything else the verifier reads (the working directory, the system, a service's files and
sockets) is the agent's to set, as it is in Harbor: a process left running can change it while
the verifier runs, which the agent could equally have done before it stopped. Sessions that
cannot do this (the ``local`` bubblewrap backend, apptainer, a host without a static busybox or a
C compiler, an engine that refuses ``--privileged``) stop the agent's processes before the verifier runs instead
(:meth:`~unified.execution.ExecutionSession.stop_agent_processes`), and the result says so.
"""

from __future__ import annotations

import base64
import re
import io
import tarfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from unified.execution.pristine import TOOLCHAIN_DIRS, TOOLCHAIN_FILES
from unified.execution.verifier_tools import MOUNT_POINT

PRIVATE_VERIFIER_SCRIPT = r"""
bb=$1; kc=$2; mnt=$3; out=$4; limit=$5; wd=$6; privs=$7; mask=$8; pristine=$9; shift 9
tdirs=$1; tfiles=$2; shift 2
$bb mount -t tmpfs -o mode=0700 unified-verifier "$mnt" || exit 91
scratch=$mnt/io
$bb mkdir -m 0700 "$scratch" || exit 90
if [ -n "$pristine" ]; then
  emounts=$($bb cut -d " " -f 5 /proc/self/mountinfo | $bb grep "^/etc/.")
  n=0
  for m in $emounts; do
    n=$((n + 1)); if [ -d "$m" ]; then $bb mkdir "$mnt/k$n"; else $bb touch "$mnt/k$n"; fi || exit 94
    $bb mount -o bind "$m" "$mnt/k$n" || exit 94
  done
  $bb mkdir -p "$mnt/e/u" "$mnt/e/w" || exit 94
  $bb mount -t overlay -o "lowerdir=/etc,upperdir=$mnt/e/u,workdir=$mnt/e/w" unified-etc /etc || exit 94
  n=0
  for m in $emounts; do
    n=$((n + 1)); [ -e "$m" ] || if [ -d "$mnt/k$n" ]; then $bb mkdir -p "$m"; else $bb touch "$m"; fi || exit 94
    $bb mount -o bind "$mnt/k$n" "$m" || exit 94
  done
  oldifs=$IFS; IFS=:; k=0
  for d in $tdirs; do
    [ -d "$pristine$d" ] && [ ! -L "$pristine$d" ] || continue
    [ -d "$d" ] && [ ! -L "$d" ] || { IFS=$oldifs; echo "$d" > "$scratch/tampered"; cd "$scratch" && $bb tar -c . | $bb base64; exit 0; }
    k=$((k + 1)); $bb mkdir -p "$mnt/o$k/u" "$mnt/o$k/w" || exit 94
    $bb mount -t overlay -o "lowerdir=$pristine$d,upperdir=$mnt/o$k/u,workdir=$mnt/o$k/w" unified-pristine "$d" || exit 94
  done
  for f in $tfiles; do
    $bb rm -f "$f" || exit 94
    if [ -f "$pristine$f" ] && [ ! -L "$pristine$f" ]; then $bb cp -p "$pristine$f" "$f" || exit 94; fi
  done
  IFS=$oldifs
fi
ids=""; n=0
oldifs=$IFS; IFS=:
for d in $privs; do
  n=$((n + 1)); src=$mnt/d$n
  $bb mkdir -m 0755 "$src" && id=$($bb stat -c %d:%i "$src") || exit 92
  tries=0
  until $bb mkdir -p "$d" 2>/dev/null && $bb mount -o bind "$src" "$d" 2>/dev/null &&
        [ "$($bb stat -c %d:%i "$d" 2>/dev/null)" = "$id" ]; do
    tries=$((tries + 1)); [ $tries -lt 50 ] || exit 92
  done
  ids="$ids $id"
done
IFS=$oldifs
oid=${ids# }; oid=${oid%% *}
check() {
  set -- $ids; IFS=:
  for d in $privs; do
    [ "$($bb stat -c %d:%i "$d" 2>/dev/null)" = "$1" ] || { IFS=$oldifs; echo "$d"; return 1; }
    shift
  done
  IFS=$oldifs
}
finish() { cd "$scratch" && $bb tar -c . | $bb base64; }
unpacked() {
  bad=$(check) || { echo "$bad" > "$scratch/tampered"; finish; exit; }
  exit 93
}
$bb tar -x -o -C / || unpacked
for d in $(IFS=:; echo $privs); do [ "$d" = "/tests" ] && { $bb mount -o remount,bind,ro "$d" || unpacked; }; done
bad=$(check) || { echo "$bad" > "$scratch/tampered"; finish; exit; }
cd "$wd" 2>/dev/null || cd /
t0=$($bb date +%s)
$bb timeout -k 5 "$limit" "$kc" "$mask" "$@" > "$scratch/stdout" 2> "$scratch/stderr" < /dev/null
rc=$?
echo $rc > "$scratch/rc"
[ $(( $($bb date +%s) - t0 )) -ge "${limit%.*}" ] && [ "$rc" -ge 124 ] && : > "$scratch/timed_out"
bad=$(check) || { echo "$bad" > "$scratch/tampered"; finish; exit; }
if cd "$out" && [ "$($bb stat -c %d:%i .)" = "$oid" ]; then
  $bb mkdir "$scratch/out" && $bb tar -c . | $bb tar -x -C "$scratch/out"
else
  echo "$out" > "$scratch/tampered"
fi
finish
"""
"""BusyBox sh, run as ``BUSYBOX unshare --mount --propagation private BUSYBOX sh -c SCRIPT sh BUSYBOX KEEP_CAPS MNT OUT
LIMIT WORKDIR PRIVATE_DIRS MASK PRISTINE TOOLCHAIN_DIRS TOOLCHAIN_FILES CMD...`` with the host's own static programs (:mod:`unified.execution.verifier_tools`):
every tool of the privileged part is ``$bb APPLET``, and ``CMD`` runs through ``keep-caps MASK`` (the container's
default capabilities plus a marker), never with more. ``MNT`` is an empty directory inside the read-only tools mount
(no process of the agent's can remove, rename or enter it): one tmpfs is mounted there, seen only by this namespace,
and each private directory is a bind mount of a fresh directory of it, retried until the path shows that directory's
own device and inode (a process left running may remove or swap the path meanwhile). ``PRIVATE_DIRS`` is
``:``-separated and starts with ``OUT``. With ``PRISTINE`` (the image's toolchain, :mod:`unified.execution.pristine`;
empty: none), each of the ``:``-separated ``TOOLCHAIN_DIRS`` that is a directory there becomes an overlay of that copy
under a private upper layer (the verifier installs what it needs; it sees nothing of the agent's there), and ``/etc``
an overlay of the container's own under a private upper layer, the engine's mounts under it (``/etc/hosts``,
``/etc/resolv.conf``, ``/etc/hostname``) carried over, in which each of ``TOOLCHAIN_FILES`` is the copy's file (removed
where the image has none): plain files the verifier's tools may replace, as ``ldconfig`` renames a new
``/etc/ld.so.cache`` over the old one (a file bind-mounted there answered ``EBUSY`` and dpkg's trigger failed).
``/tests`` is remounted read-only once the tests are unpacked; a private directory found replaced when unpacking or
remounting fails is reported as ``tampered`` (a process left running raced it). Exit 90-94: the isolation could not
be set up (nothing of the command ran).
Otherwise stdout is one base64 tar: ``stdout``, ``stderr``, ``rc``, ``timed_out`` (present when the limit killed it),
``out/`` (the contents of ``OUT``) or ``tampered`` (the private directory that was replaced)."""

SETUP_FAILED = {90: "the scratch directory", 91: "mount of the private tmpfs", 92: "bind mount of a private directory",
                93: "unpacking the verifier's files", 94: "mounting the image's toolchain"}


@dataclass
class PrivateRun:
    """What a privately run verifier left: its exit status and output, and the files of its output directory."""

    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool
    duration_s: float
    files: dict[str, bytes] = field(default_factory=dict)
    """Relative path (``reward.txt``, ``sub/x.json``) -> bytes, from the private output directory."""
    tampered: str = ""
    """A private directory found replaced (an agent's process unlinked its mount point); then nothing else counts."""
    unreadable: str = ""
    """Why the run's result could not be read back (it ran; then nothing else counts)."""

    def failure(self) -> str:
        """Why this run gives no result (empty when it gives one)."""
        if self.tampered:
            return (f"the verifier's private directory {self.tampered} was replaced while it ran "
                    "(a process left running unlinked it); not verified")
        return f"the private verifier's result could not be read back: {self.unreadable}" if self.unreadable else ""

    def output(self) -> str:
        return self.stdout + (("\n" if self.stdout and not self.stdout.endswith("\n") else "") + self.stderr
                              if self.stderr else "")

    def read(self, path: str, out_dir: str) -> bytes:
        """The bytes of ``path`` (absolute, under ``out_dir``) as the verifier left it; FileNotFoundError otherwise."""
        rel = PurePosixPath(path).relative_to(PurePosixPath(out_dir)).as_posix()
        if rel not in self.files:
            raise FileNotFoundError(f"{path}: not written by the verifier")
        return self.files[rel]


def files_tar(files: dict[str, Path]) -> bytes:
    """A tar of host files/directories under their absolute destination paths (``{"/tests": Path(...)}``)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for dest, src in files.items():
            tar.add(str(src), arcname=dest.lstrip("/"))
    return buf.getvalue()


def parse_private_output(stdout: str, duration_s: float, limit_s: float) -> PrivateRun:
    """Read the base64 tar :data:`PRIVATE_VERIFIER_SCRIPT` prints; ValueError when it is not one."""
    try:
        raw = base64.b64decode("".join(stdout.split()), validate=True)
        tar = tarfile.open(fileobj=io.BytesIO(raw))
    except (ValueError, tarfile.TarError) as exc:
        raise ValueError(f"the private verifier's output is not a tar: {exc}") from None
    entries: dict[str, bytes] = {}
    with tar:
        for m in tar.getmembers():
            rel = PurePosixPath(m.name)
            if not m.isfile() or rel.is_absolute() or ".." in rel.parts:
                continue
            fh = tar.extractfile(m)
            entries[rel.as_posix().removeprefix("./")] = fh.read() if fh else b""
    if "tampered" in entries:
        return PrivateRun(-1, "", "", False, duration_s, tampered=entries["tampered"].decode(errors="replace").strip())
    try:
        code = int(entries.get("rc", b"").strip())
    except ValueError:
        raise ValueError("the private verifier's output has no exit status") from None
    files = {k[len("out/"):]: v for k, v in entries.items() if k.startswith("out/")}
    return PrivateRun(code, entries.get("stdout", b"").decode(errors="replace"),
                      entries.get("stderr", b"").decode(errors="replace"), "timed_out" in entries or code == 124,
                      duration_s, files)


_BIN_DIRS = ("/bin", "/sbin", "/usr/bin", "/usr/sbin", "/usr/local/bin", "/usr/local/sbin")
_SHELLS = re.compile(r"(?:bash|sh|dash|env|tee|timeout)")
_CORE_TOOLS = re.compile(r"(?:bash|sh|dash|env|tee|timeout|unshare|base64|cat|tar)")
_PACKAGED_TOOLS = re.compile(r"(?:python(?:\d+(?:\.\d+)?)?|pytest|py\.test|uvx?|curl)")
_LOADER = re.compile(r"/(?:usr/)?lib(?:32|64|x32)?/(?:[^/]+/)?(?:ld-linux[^/]*\.so[^/]*|ld-musl[^/]*|libc\.so[^/]*)")
_LOADER_CONFIG = ("/etc/ld.so.preload", "/etc/ld.so.conf")
_CUSTOMIZE = ("sitecustomize.py", "usercustomize.py")
_STDLIB = re.compile(r"/(?:usr/(?:local/)?)?lib/python3(?:\.\d+)?/(?!(?:site|dist)-packages/).+\.py")


def toolchain_tampering(diff: str, before_verifier: bool = True) -> list[str]:
    """The lines of an engine's ``diff`` (``C /usr/bin/bash``, ``A /etc/ld.so.preload``) that touch the verifier's toolchain.

    The narrow list of round 3, kept for the diff taken *after* a verifier that ran on the agent's own system
    (no image copy, :mod:`unified.execution.pristine`), which also shows the verifier's own installs; every other
    diff is read with the allow-list :func:`unified.execution.pristine.toolchain_changes`.

    Flagged in every diff: a changed or deleted ``bash``/``sh``/``dash``/``env``/``tee``/``timeout``/``unshare``,
    or ``base64``/``cat``/``tar`` (what reads the reward back where the verifier runs without the host's tools:
    :meth:`~unified.execution.ExecutionSession.read_file`) in a system ``bin`` directory; one of the shells added
    under ``/usr/local`` (ahead of the system's on ``PATH``); any change to ``/etc/ld.so.preload`` or
    ``/etc/ld.so.conf``; a ``sitecustomize.py``/``usercustomize.py`` added or changed anywhere.

    Flagged only ``before_verifier`` (a diff taken after it also shows what its own ``apt-get install curl
    python3`` upgraded): a changed or deleted ``python*``/``pytest``/``uv``/``uvx``/``curl`` in a system ``bin``
    directory, dynamic loader or ``libc.so``, or module of Python's standard library (``/usr/lib/python3.X/site.py``;
    not under ``site-packages``/``dist-packages``, where installs go; compiled ``.pyc`` files and ``.pth`` files are
    not checked: Python writes the one and ``pip install -e`` the other).

    Not flagged (an honest solution does these): new tools (``apt-get install curl``, ``pip install pytest``),
    Python packages, the agent's own files.
    """
    found = []
    for line in diff.splitlines():
        kind, _, path = line.strip().partition(" ")
        if kind not in ("A", "C", "D") or not path.startswith("/"):
            continue
        folder, _, name = path.rpartition("/")
        in_bin, changed = folder in _BIN_DIRS, kind in ("C", "D")
        if ((in_bin and changed and _CORE_TOOLS.fullmatch(name))
                or (in_bin and kind == "A" and folder.startswith("/usr/local/") and _SHELLS.fullmatch(name))
                or path in _LOADER_CONFIG or (name in _CUSTOMIZE and kind in ("A", "C"))
                or (before_verifier and changed and ((in_bin and _PACKAGED_TOOLS.fullmatch(name))
                                                     or _LOADER.fullmatch(path) or _STDLIB.fullmatch(path)))):
            found.append(f"{kind} {path}")
    return found


def private_verifier_argv(engine: str, name: str, command: list[str], *, out_dir: str, dirs: list[str],
                          timeout_s: float, workdir: str, mask: int, env: dict[str, str] | None = None,
                          pristine: str = "") -> list[str]:
    """The one privileged ``exec``: the host's static busybox (never a program of the container's) sets up the
    private namespace of :data:`~unified.execution.verifier.PRIVATE_VERIFIER_SCRIPT`; ``command`` runs through
    ``keep-caps MASK``; with ``pristine`` (:data:`~unified.execution.pristine.PRISTINE_POINT`) it runs on the image's
    own toolchain (:mod:`unified.execution.pristine`)."""
    bb, kc, mnt = f"{MOUNT_POINT}/busybox", f"{MOUNT_POINT}/keep-caps", f"{MOUNT_POINT}/mnt"
    argv = [engine, "exec", "-i", "--privileged"]
    for key, value in (env or {}).items():
        argv += ["-e", f"{key}={value}"]
    return argv + [name, bb, "unshare", "--mount", "--propagation", "private", bb, "sh", "-c", PRIVATE_VERIFIER_SCRIPT,
                   "sh", bb, kc, mnt, out_dir, f"{max(timeout_s, 0.1):g}", workdir, ":".join(dirs), f"{mask:x}", pristine,
                   ":".join(TOOLCHAIN_DIRS), ":".join(TOOLCHAIN_FILES), *command]


def default_caps(status: str) -> int | None:
    """The ``CapBnd`` mask of a ``/proc/PID/status`` text (None when it has none)."""
    for line in status.splitlines():
        if line.startswith("CapBnd:"):
            try:
                return int(line.split(":", 1)[1].strip(), 16)
            except ValueError:
                return None
    return None
