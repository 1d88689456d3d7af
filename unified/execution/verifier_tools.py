"""The host's programs the private verifier runs with privileges in a container (docker, podman).

The agent is root in its container and can replace any program there, so nothing of the
container's may run with more than the container's default capabilities (a wrapper ``unshare``
that was run with every capability escaped to the host through a cgroup-v1 ``release_agent``).
What the verifier's setup needs with privileges (a private mount namespace, tmpfs mounts, the
tar of the tests, the device checks, the copy back) comes from the host instead, mounted
read-only into every container at :data:`MOUNT_POINT` when it starts (the agent, without
``CAP_SYS_ADMIN``, can neither write, unmount nor cover a bind mount):

- ``busybox``: a statically linked BusyBox (Debian's ``busybox-static``; ``$UNIFIED_VERIFIER_BUSYBOX``
  names another). Static, so no dynamic loader, ``/etc/ld.so.preload`` or library of the container's
  runs in it; every tool is called as ``busybox APPLET``, never looked up on the container's ``PATH``.
- ``keep-caps``: a tiny static program (C source below, compiled here once with ``cc -static``) that
  drops every capability outside a mask from the bounding, permitted, effective, inheritable and
  ambient sets, then runs the verifier's command. The mask is the container's default set (read
  before the agent ran) plus one marker capability (:data:`MARKER_CAPS`, harmless ones): the
  verifier's processes then hold a capability the agent's lack, which is what keeps the agent's
  processes out of their ``/proc/PID/{root,fd,mem}`` (ptrace access needs the caller's capabilities
  to include the target's), and nothing more.

The cache is trusted only as built (issue 42, R6: a replaced ``keep-caps`` there ran the verifier with
``CAP_SYS_ADMIN``): every call checks that the directory and each file are owned by this user (root
when root), writable by no group or other user, not links, and match the sha256 digests recorded
when it was built (:data:`MANIFEST`, and in this process); anything else is set aside and rebuilt
(:func:`tools_problem`).

Without either (no static busybox, no C compiler) :func:`verifier_tools` gives the reason, the
container gets no such mount, and the verifier runs the other way: the agent's processes are
stopped first (:mod:`unified.execution.verifier`).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import struct
import subprocess
import tempfile
import threading
import uuid
from pathlib import Path

MOUNT_POINT = "/.unified-verifier-tools"
MARKER_CAPS = (35, 36)
"""``CAP_WAKE_ALARM``, ``CAP_BLOCK_SUSPEND``: the first not in the container's default set marks the verifier."""

KEEP_CAPS_C = r"""
#include <errno.h>
#include <linux/capability.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

/* keep-caps MASK PROG ARGS...: keep only the capabilities in MASK (hex), then exec PROG (PATH lookup). */
int main(int argc, char **argv) {
    if (argc < 3) { fprintf(stderr, "usage: keep-caps MASK PROG [ARGS...]\n"); return 125; }
    char *end;
    unsigned long long keep = strtoull(argv[1], &end, 16);
    if (*end) { fprintf(stderr, "keep-caps: bad mask %s\n", argv[1]); return 125; }
    for (int cap = 0; cap < 64; cap++) {
        if ((keep >> cap) & 1ULL) continue;
        int in = prctl(PR_CAPBSET_READ, cap, 0, 0, 0);
        if (in < 0) break;  /* past the last capability this kernel knows */
        if (in == 1 && prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0) { perror("keep-caps: PR_CAPBSET_DROP"); return 125; }
    }
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 && errno != EINVAL) {
        perror("keep-caps: PR_CAP_AMBIENT_CLEAR_ALL"); return 125;
    }
    struct __user_cap_header_struct head = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct data[2];
    if (syscall(SYS_capget, &head, data) != 0) { perror("keep-caps: capget"); return 125; }
    for (int i = 0; i < 2; i++) {
        unsigned int part = (unsigned int)(keep >> (32 * i));
        data[i].effective &= part; data[i].permitted &= part; data[i].inheritable = 0;
    }
    if (syscall(SYS_capset, &head, data) != 0) { perror("keep-caps: capset"); return 125; }
    execvp(argv[2], argv + 2);
    fprintf(stderr, "keep-caps: %s: ", argv[2]); perror("exec");
    return 127;
}
"""


def is_static_elf(path: Path) -> bool:
    """True for a 64-bit little-endian ELF executable without a program interpreter (``PT_INTERP``)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(64)
            if len(head) < 64 or head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
                return False
            phoff, = struct.unpack_from("<Q", head, 0x20)
            phentsize, phnum = struct.unpack_from("<HH", head, 0x36)
            fh.seek(phoff)
            table = fh.read(phentsize * phnum)
    except OSError:
        return False
    return all(struct.unpack_from("<I", table, i * phentsize)[0] != 3 for i in range(phnum))


def static_busybox() -> Path | str:
    """The host's static busybox, or why there is none."""
    named = os.environ.get("UNIFIED_VERIFIER_BUSYBOX")
    candidates = [named] if named else [shutil.which("busybox"), "/bin/busybox", "/usr/bin/busybox"]
    for candidate in filter(None, candidates):
        path = Path(candidate).resolve()
        if path.is_file() and is_static_elf(path):
            return path
    where = f"$UNIFIED_VERIFIER_BUSYBOX={named}" if named else "busybox on PATH, /bin/busybox"
    return f"no statically linked busybox ({where}): apt-get install -y busybox-static"


_LAYOUT = b"busybox keep-caps mnt/ SHA256SUMS\n"
"""What a tools directory holds (part of its cache key: a directory of an older layout is never reused)."""
MANIFEST = "SHA256SUMS"
"""The sha256 of ``busybox`` and ``keep-caps``, written when the directory is built (``sha256sum`` format)."""
_RECORDED: dict[Path, dict[str, str]] = {}
"""The digests this process built or verified, per tools directory (a manifest rewritten later is caught too)."""


def tools_cache_dir() -> Path:
    return Path(os.environ.get("UNIFIED_VERIFIER_TOOLS_CACHE") or Path.home() / ".cache" / "unified" / "verifier-tools")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _manifest(digests: dict[str, str]) -> str:
    return "".join(f"{digests[name]}  {name}\n" for name in ("busybox", "keep-caps"))


def _unsafe(path: Path, kind: str) -> str:
    """Why ``path`` cannot be trusted as part of the tools (empty when it can): it must be a ``kind`` (``file`` or
    ``dir``), not a link, owned by this user (root when root), and writable by no group and no other user."""
    try:
        st = os.lstat(path)
    except OSError as exc:
        return f"{path}: {exc.strerror}"
    if not (stat.S_ISDIR(st.st_mode) if kind == "dir" else stat.S_ISREG(st.st_mode)):
        return f"{path}: not a {'directory' if kind == 'dir' else 'regular file'}"
    if st.st_uid != os.geteuid():
        return f"{path}: owned by uid {st.st_uid}, not {os.geteuid()}"
    if st.st_mode & 0o022:
        return f"{path}: writable by group or others (mode {stat.S_IMODE(st.st_mode):o})"
    return ""


def tools_problem(final: Path, busybox: Path) -> str:
    """Why the tools directory ``final`` cannot be used as it is (empty when it can; issue 42, R6).

    Every part (the cache directory, ``final``, ``busybox``, ``keep-caps``, ``mnt/``, :data:`MANIFEST`) is
    checked by :func:`_unsafe`; ``mnt/`` is empty; ``busybox`` has the bytes of the host's static busybox;
    both programs match the digests recorded when the directory was built (its :data:`MANIFEST`, and what this
    process built or verified before)."""
    parts = [(final.parent, "dir"), (final, "dir"), (final / "mnt", "dir"), (final / "busybox", "file"),
             (final / "keep-caps", "file"), (final / MANIFEST, "file")]
    for path, kind in parts:
        problem = _unsafe(path, kind)
        if problem:
            return problem
    if any((final / "mnt").iterdir()):
        return f"{final / 'mnt'}: not empty"
    digests = {name: _sha256(final / name) for name in ("busybox", "keep-caps")}
    if digests["busybox"] != _sha256(busybox):
        return f"{final / 'busybox'}: not the host's {busybox}"
    recorded = _RECORDED.get(final)
    if (final / MANIFEST).read_text(errors="replace") != _manifest(digests) or (recorded and recorded != digests):
        changed = [n for n in digests if (recorded or {}).get(n, digests[n]) != digests[n]] or ["the manifest"]
        return f"{final}: {', '.join(changed)} no longer match the digests recorded when it was built"
    _RECORDED[final] = digests
    return ""


def verifier_tools() -> Path | str:
    """A directory with ``busybox`` and ``keep-caps`` (built once, cached by content, verified on every call and
    rebuilt when :func:`tools_problem` finds anything wrong with it), or why there is none."""
    busybox = static_busybox()
    if isinstance(busybox, str):
        return busybox
    compiler = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if compiler is None:
        return "no C compiler to build keep-caps (the verifier's capability drop): apt-get install -y gcc libc6-dev"
    digest = hashlib.sha256(_LAYOUT + KEEP_CAPS_C.encode() + busybox.read_bytes()).hexdigest()[:16]
    final = tools_cache_dir() / digest
    with _BUILD_LOCK:
        if final.exists() or final.is_symlink():
            problem = tools_problem(final, busybox)
            if not problem:
                return final
            _set_aside(final)
            _RECORDED.pop(final, None)
        final.parent.mkdir(parents=True, exist_ok=True)
        problem = _unsafe(final.parent, "dir")
        if problem:
            return f"the verifier tools' cache cannot be trusted: {problem} (set $UNIFIED_VERIFIER_TOOLS_CACHE)"
        built = _build(final, busybox, compiler)
        if isinstance(built, str):
            return built
        problem = tools_problem(final, busybox)
        return f"the verifier tools just built cannot be trusted: {problem}" if problem else final


_BUILD_LOCK = threading.Lock()


def _set_aside(final: Path) -> None:
    """Move a tools directory that failed :func:`tools_problem` out of the way (then remove it)."""
    aside = final.with_name(f".stale-{final.name}-{uuid.uuid4().hex[:8]}")
    try:
        os.rename(final, aside)
    except OSError:
        return
    if aside.is_dir() and not aside.is_symlink():
        for root, dirs, _ in os.walk(aside):
            for d in dirs:
                os.chmod(os.path.join(root, d), 0o700)
        shutil.rmtree(aside, ignore_errors=True)
    else:
        aside.unlink(missing_ok=True)


def _build(final: Path, busybox: Path, compiler: str) -> Path | str:
    """Compile ``keep-caps``, copy ``busybox``, write :data:`MANIFEST`, and move the result to ``final``."""
    with tempfile.TemporaryDirectory(prefix=".build-", dir=final.parent) as tmp:
        stage = Path(tmp) / "tools"
        stage.mkdir()
        (stage / "mnt").mkdir(mode=0o755)  # where the verifier mounts its private tmpfs (verifier.PRIVATE_VERIFIER_SCRIPT)
        (Path(tmp) / "keep-caps.c").write_text(KEEP_CAPS_C)
        proc = subprocess.run([compiler, "-static", "-Os", "-o", str(stage / "keep-caps"), str(Path(tmp) / "keep-caps.c")],
                              capture_output=True, text=True, timeout=300)
        if proc.returncode != 0 or not is_static_elf(stage / "keep-caps"):
            return f"cannot build keep-caps with {compiler} -static: {proc.stderr.strip()[-300:]} (apt-get install -y libc6-dev)"
        shutil.copyfile(busybox, stage / "busybox")
        digests = {name: _sha256(stage / name) for name in ("busybox", "keep-caps")}
        (stage / MANIFEST).write_text(_manifest(digests))
        for name, mode in (("busybox", 0o755), ("keep-caps", 0o755), (MANIFEST, 0o644), ("mnt", 0o755)):
            os.chmod(stage / name, mode)
        stage.chmod(0o755)
        try:
            stage.rename(final)
        except OSError:  # another process built the same one first: checked by the caller
            if not (final / "mnt").is_dir():
                raise
        else:
            _RECORDED[final] = digests
    return final


def tools_mount_argv() -> list[str]:
    """The ``run`` options that mount the tools read-only at :data:`MOUNT_POINT` (none when there are none)."""
    tools = verifier_tools()
    return [] if isinstance(tools, str) else ["-v", f"{tools}:{MOUNT_POINT}:ro"]


def keep_mask(default_caps: int) -> int | None:
    """The verifier's capability mask: the container's default set plus the first marker it lacks (None: none)."""
    marker = next((c for c in MARKER_CAPS if not default_caps >> c & 1), None)
    return None if marker is None else default_caps | 1 << marker
