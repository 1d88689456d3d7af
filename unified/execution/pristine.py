"""The verifier's toolchain as the image has it, out of the agent's reach (docker, podman; issue 42, R1).

The agent is root in its container: a ``/usr/local/bin/apt-get`` it plants runs first on ``PATH``
when the published ``test.sh`` calls ``apt-get install``, a ``.pth`` file in ``dist-packages`` runs
in every Python, an ``/etc/apt/apt.conf.d`` hook runs as root under apt; any of them can rewrite the
tests and forge the reward. A deny-list of such files is always one file short, so this is an
allow-list instead:

- :data:`TOOLCHAIN_DIRS` and :data:`TOOLCHAIN_FILES` are the verifier's toolchain: the system's
  programs, libraries and Python (``/usr``, and ``/bin``, ``/lib`` ... where they are not links into
  it), apt's and dpkg's configuration and state, the dynamic loader's configuration;
- :func:`pristine_toolchain` copies those paths, once per image digest, out of the image itself
  (``ENGINE create`` + ``ENGINE export``, only those members) into a directory on the host that is
  mounted read-only into every container at :data:`PRISTINE_POINT`;
- the private verifier (:data:`unified.execution.verifier.PRIVATE_VERIFIER_SCRIPT`) mounts each of
  those directories, in its own mount namespace, as an overlay whose lower layer is the image's copy
  and whose upper layer is its private tmpfs: it runs the image's programs, its own ``apt-get
  install`` still works, and nothing of the agent's inside them is visible to it;
- :func:`toolchain_changes` reads the engine's diff of the container against its image: *any* change
  the agent made under those paths (added, changed or deleted) is named and the episode scores 0
  (``tampered``), whether or not it could have steered the verifier.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
import tempfile
import uuid
from pathlib import Path

PRISTINE_POINT = "/.unified-pristine"
"""Where the image's toolchain is mounted (read-only) in every container that has it."""
TOOLCHAIN_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc/apt", "/etc/dpkg",
                  "/etc/alternatives", "/etc/ld.so.conf.d", "/etc/python3", "/var/lib/dpkg")
"""Directories of the verifier's toolchain (overlaid with the image's copy; any change in them is tampering)."""
TOOLCHAIN_FILES = ("/etc/ld.so.preload", "/etc/ld.so.conf", "/etc/ld.so.cache", "/etc/pip.conf")
"""Single files of the verifier's toolchain (bound from the image's copy; any change to them is tampering)."""
_LAYOUT = "1"
"""Part of the cache key: a copy made by another version of this module is never reused."""


def in_toolchain(path: str) -> bool:
    """Whether the absolute ``path`` lies inside the verifier's toolchain (:data:`TOOLCHAIN_DIRS`, :data:`TOOLCHAIN_FILES`)."""
    return path in TOOLCHAIN_FILES or any(path == d or path.startswith(d + "/") for d in TOOLCHAIN_DIRS)


def toolchain_changes(diff: str, ignore_bytecode: bool = False) -> list[str]:
    """The lines of an engine's ``diff`` (``A /usr/local/bin/apt-get``, ``C /usr/bin/dpkg``) inside the toolchain.

    Every kind counts: an added file there (a ``.pth``, an ``apt.conf.d`` hook, a program ahead on ``PATH``)
    steers a verifier as surely as a changed one. ``ignore_bytecode`` leaves out compiled Python
    (``__pycache__/*.pyc``), which Python writes beside system modules when root imports them; only where the
    verifier runs on the image's copy (:data:`PRISTINE_POINT`), which never shows them. A changed directory with
    a reported entry below it is left out (the entry below says what changed).
    """
    entries = []
    for line in diff.splitlines():
        kind, _, path = line.strip().partition(" ")
        if kind in ("A", "C", "D") and path.startswith("/"):
            entries.append((kind, path))
    paths = [path for _, path in entries]
    found = []
    for kind, path in entries:
        if not in_toolchain(path):
            continue
        if kind == "C" and any(other.startswith(path.rstrip("/") + "/") for other in paths):
            continue  # a directory changed because something in it did: that entry is the evidence
        if ignore_bytecode and "/__pycache__" in path and (path.endswith(".pyc") or path.endswith("/__pycache__")):
            continue
        found.append(f"{kind} {path}")
    return found


def pristine_cache_dir() -> Path:
    return Path(os.environ.get("UNIFIED_PRISTINE_CACHE") or Path.home() / ".cache" / "unified" / "pristine")


def _members() -> list[str]:
    return [p.lstrip("/") for p in (*TOOLCHAIN_DIRS, *TOOLCHAIN_FILES)]


def _trusted(path: Path) -> bool:
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return (os.path.isdir(path) and not os.path.islink(path) and st.st_uid == os.geteuid()
            and not st.st_mode & 0o022)


def pristine_toolchain(engine: str, image: str, image_id: str, timeout_s: float = 900.0) -> Path | str:
    """A host directory holding the image's toolchain paths (made once per image digest), or why there is none.

    Made by exporting a created (never started) container of the image and unpacking only the toolchain's
    members (links kept as links, device files left out) into a fresh directory owned by this user, renamed
    into place when complete; a directory of another owner or writable by others is never used."""
    if not image_id or "/" in image_id:
        return f"no image digest for {image}"
    root = pristine_cache_dir()
    final = root / f"{image_id.removeprefix('sha256:')[:32]}-{_LAYOUT}"
    if (final / ".complete").is_file():
        return final if _trusted(final) and _trusted(root) else f"{final}: not owned by this user or writable by others"
    root.mkdir(parents=True, exist_ok=True)
    if root.stat().st_uid == os.geteuid():
        root.chmod(0o755)  # whatever the umask made it
    if not _trusted(root):
        return f"{root}: not owned by this user or writable by others"
    name = f"unified-pristine-{uuid.uuid4().hex[:12]}"
    created = subprocess.run([engine, "create", "--name", name, "--entrypoint", "true", image],
                             capture_output=True, timeout=300)
    if created.returncode != 0:
        return f"{engine} create {image}: {created.stderr.decode(errors='replace').strip()[-300:]}"
    try:
        with tempfile.TemporaryDirectory(prefix=".build-", dir=root) as tmp:
            stage = Path(tmp) / "root"
            stage.mkdir()
            export = subprocess.Popen([engine, "export", name], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            try:
                _unpack(export.stdout, stage)
            finally:
                export.stdout.close()
                rc = export.wait(timeout=timeout_s)
            if rc != 0:
                return f"{engine} export {image}: {export.stderr.read().decode(errors='replace').strip()[-300:]}"
            (stage / ".complete").write_text(f"{image}\n{image_id}\n")
            stage.chmod(0o755)
            try:
                stage.rename(final)
            except OSError:  # another process made it first
                if not (final / ".complete").is_file():
                    raise
    finally:
        subprocess.run([engine, "rm", "-f", name], capture_output=True, timeout=120)
    return final if _trusted(final) else f"{final}: not owned by this user or writable by others"


def _unpack(stream, stage: Path) -> None:
    """Unpack the toolchain's members of an exported root file system (a tar stream) under ``stage``."""
    wanted = _members()
    with tarfile.open(fileobj=stream, mode="r|") as tar:
        for member in tar:
            name = member.name.lstrip("./")
            if not any(name == w or name.startswith(w + "/") for w in wanted):
                continue
            if not (member.isfile() or member.isdir() or member.issym() or member.islnk()):
                continue  # no device files, FIFOs
            try:
                tar.extract(member, stage, set_attrs=True, numeric_owner=True, filter="tar")
            except (tarfile.TarError, OSError):
                if member.isdir():
                    (stage / name).mkdir(parents=True, exist_ok=True)


def remove_pristine_cache() -> None:
    """Remove every cached copy (tests, or to reclaim the space)."""
    shutil.rmtree(pristine_cache_dir(), ignore_errors=True)
