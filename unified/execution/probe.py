"""Does a container engine start containers here? One tiny real ``run`` per engine per process.

``podman info`` answering says nothing about whether a container can start: on a host with
cgroup v1 in hybrid mode crun refuses every container ("cgroups in hybrid mode not
supported"), and without ``CAP_SYS_RESOURCE`` the engine's default ``nofile``/``nproc``
limits cannot be set ("setrlimit ... operation not permitted"). Then every task would fail
with a long argv. :func:`probe_engine` imports a two-megabyte image made of the host's
``/bin/sh`` and its libraries (no registry needed), starts it with the same flags a session
uses, runs ``true`` in it and removes it. A known failure becomes one
:class:`BackendUnavailable` whose ``how_to_fix`` is a single line (runc plus a
``CONTAINERS_CONF`` file, :func:`containers_conf_text`); a slow answer says the machine may be
busy. The result is cached per (engine, ``$CONTAINERS_CONF``) for the life of the process.
"""

from __future__ import annotations

import functools
import io
import os
import re
import resource
import shutil
import subprocess
import tarfile
import uuid
from pathlib import Path

from unified.execution.base import BackendUnavailable, EnvironmentSpec
from unified.execution.container_argv import exec_argv, rm_argv, run_argv

PROBE_IMAGE = "localhost/unified-probe:1"
PROBE_TIMEOUT_S = 90.0
"""Longest the three probe calls (import, run, exec) may take together before the engine is called busy."""
_KNOWN = (
    (re.compile(r"cgroups in hybrid mode not supported", re.I), "crun does not support this host's hybrid cgroups"),
    (re.compile(r"setrlimit|setting rlimit", re.I), "the engine's default ulimits exceed what this host allows"),
)


def containers_conf_text() -> str:
    """A ``containers.conf`` that makes podman start containers on hosts like the above.

    runc instead of crun (runc handles hybrid cgroup v1), and default ulimits no higher than
    this process's hard limits (``nofile``; ``nproc`` capped at 32768), which a container can
    get without ``CAP_SYS_RESOURCE``.
    """
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    nproc = resource.getrlimit(resource.RLIMIT_NPROC)[1]
    nofile = 1048576 if nofile == resource.RLIM_INFINITY else min(nofile, 1048576)
    nproc = 32768 if nproc == resource.RLIM_INFINITY else min(nproc, 32768)
    return (f'[containers]\ndefault_ulimits = ["nofile={nofile}:{nofile}", "nproc={nproc}:{nproc}"]\n'
            '[engine]\nruntime = "runc"\n')


def fix_line(engine: str) -> str:
    """The one-line fix for the known start failures."""
    if engine != "podman":
        return f"configure {engine}'s runtime to runc and its default ulimits to this host's hard limits"
    return ("apt-get install -y runc && python -m unified.execution.images containers-conf "
            "~/.config/unified/containers.conf && export CONTAINERS_CONF=~/.config/unified/containers.conf")


def _shell_files() -> list[Path]:
    """``/bin/sh`` (resolved) and the shared libraries it loads (``ldd``)."""
    shell = Path(shutil.which("sh") or "/bin/sh").resolve()
    files = [shell]
    try:
        out = subprocess.run(["ldd", str(shell)], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        out = ""
    for path in re.findall(r"(/\S+)", out):
        if Path(path).is_file():
            files.append(Path(path))
    return files


def probe_tar() -> bytes:
    """A root filesystem holding only a shell at ``/bin/sh`` (and what it links), as a tar."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        shell, *libs = _shell_files()
        tar.add(shell, arcname="bin/sh")
        for lib in libs:
            tar.add(lib.resolve(), arcname=str(lib).lstrip("/"))
        for d in ("tmp", "proc", "dev", "sys", "etc"):
            info = tarfile.TarInfo(d)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if d == "tmp" else 0o755
            tar.addfile(info)
    return buf.getvalue()


def classify(engine: str, stderr: str) -> BackendUnavailable:
    """The unavailability a failed probe ``run`` means (a known failure carries the one-line fix)."""
    lines = [ln.strip() for ln in stderr.strip().splitlines() if ln.strip()]
    last = lines[-1] if lines else "no error output"
    for pattern, meaning in _KNOWN:
        if pattern.search(stderr):
            return BackendUnavailable(engine, f"{engine} cannot start a container here: {meaning} ({last[:200]})",
                                      fix_line(engine))
    return BackendUnavailable(engine, f"{engine} cannot start a container here: {last[:300]}",
                              f"run `{engine} run --rm {PROBE_IMAGE} true` to see what fails")


def _busy(engine: str, what: str, limit: float) -> BackendUnavailable:
    return BackendUnavailable(engine, f"`{engine} {what}` did not answer within {limit:.0f} s (machine busy?)",
                              f"try again when the machine is less loaded, or check `{engine} ps`")


@functools.lru_cache(maxsize=None)
def probe_engine(engine: str, containers_conf: str | None = None) -> BackendUnavailable | None:
    """None when ``engine`` starts a container and runs a command in it, else why not.

    ``containers_conf`` is only the cache key (the engine reads ``$CONTAINERS_CONF`` itself).
    """
    def call(argv: list[str], stdin: bytes | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(argv, input=stdin, capture_output=True, timeout=PROBE_TIMEOUT_S,
                              stdin=None if stdin is not None else subprocess.DEVNULL)

    name = f"unified-probe-{uuid.uuid4().hex[:8]}"
    try:
        if call([engine, "image", "inspect", PROBE_IMAGE]).returncode != 0:
            imported = call([engine, "import", "-", PROBE_IMAGE], stdin=probe_tar())
            if imported.returncode != 0:
                return BackendUnavailable(engine, f"{engine} cannot import a local image: "
                                          f"{imported.stderr.decode(errors='replace').strip()[-300:]}",
                                          f"run `{engine} import` by hand to see what fails")
        spec = EnvironmentSpec(network=False, memory_mb=64, max_processes=64)
        started = call(run_argv(engine, spec, PROBE_IMAGE, name))
        if started.returncode != 0:
            return classify(engine, started.stderr.decode(errors="replace"))
        ran = call(exec_argv(engine, name, ["sh", "-c", "exit 0"], 30, has_timeout=False))
        if ran.returncode != 0:
            return classify(engine, ran.stderr.decode(errors="replace"))
        return None
    except subprocess.TimeoutExpired as exc:
        return _busy(engine, " ".join(str(a) for a in exc.cmd[1:3]), PROBE_TIMEOUT_S)
    finally:
        try:
            subprocess.run(rm_argv(engine, name), capture_output=True, timeout=PROBE_TIMEOUT_S, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired):
            pass


def probe_apptainer(binary: str) -> BackendUnavailable | None:
    """None when ``binary`` runs a command in a sandbox directory made of the host's shell, else why not."""
    scratch = Path(os.environ.get("TMPDIR", "/tmp")) / f"unified-probe-{uuid.uuid4().hex[:8]}"
    try:
        scratch.mkdir(parents=True)
        with tarfile.open(fileobj=io.BytesIO(probe_tar())) as tar:
            tar.extractall(scratch, filter="tar")
        proc = subprocess.run([binary, "exec", "--containall", "--no-home", str(scratch), "/bin/sh", "-c", "exit 0"],
                              capture_output=True, timeout=PROBE_TIMEOUT_S, stdin=subprocess.DEVNULL)
        if proc.returncode != 0:
            return classify("apptainer", proc.stderr.decode(errors="replace"))
        return None
    except subprocess.TimeoutExpired:
        return _busy("apptainer", "exec", PROBE_TIMEOUT_S)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
