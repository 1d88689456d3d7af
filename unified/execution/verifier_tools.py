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

Without either (no static busybox, no C compiler) :func:`verifier_tools` gives the reason, the
container gets no such mount, and the verifier runs the other way: the agent's processes are
stopped first (:mod:`unified.execution.verifier`).
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import struct
import subprocess
import tempfile
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


_LAYOUT = b"busybox keep-caps mnt/\n"
"""What a tools directory holds (part of its cache key: a directory of an older layout is never reused)."""


def tools_cache_dir() -> Path:
    return Path(os.environ.get("UNIFIED_VERIFIER_TOOLS_CACHE") or Path.home() / ".cache" / "unified" / "verifier-tools")


@functools.lru_cache(maxsize=None)
def verifier_tools() -> Path | str:
    """A root-owned directory with ``busybox`` and ``keep-caps`` (built once, cached by content), or why not."""
    busybox = static_busybox()
    if isinstance(busybox, str):
        return busybox
    compiler = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if compiler is None:
        return "no C compiler to build keep-caps (the verifier's capability drop): apt-get install -y gcc libc6-dev"
    digest = hashlib.sha256(_LAYOUT + KEEP_CAPS_C.encode() + busybox.read_bytes()).hexdigest()[:16]
    final = tools_cache_dir() / digest
    if (final / "busybox").is_file() and (final / "keep-caps").is_file() and (final / "mnt").is_dir():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
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
        for name in ("busybox", "keep-caps"):
            os.chmod(stage / name, 0o755)
        stage.chmod(0o755)
        try:
            stage.rename(final)
        except OSError:  # another process built the same one first
            if not (final / "mnt").is_dir():
                raise
    return final


def tools_mount_argv() -> list[str]:
    """The ``run`` options that mount the tools read-only at :data:`MOUNT_POINT` (none when there are none)."""
    tools = verifier_tools()
    return [] if isinstance(tools, str) else ["-v", f"{tools}:{MOUNT_POINT}:ro"]


def keep_mask(default_caps: int) -> int | None:
    """The verifier's capability mask: the container's default set plus the first marker it lacks (None: none)."""
    marker = next((c for c in MARKER_CAPS if not default_caps >> c & 1), None)
    return None if marker is None else default_caps | 1 << marker
