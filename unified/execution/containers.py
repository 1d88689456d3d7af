"""Container engines: ``docker`` and ``podman`` (one CLI dialect), ``apptainer`` (Slurm clusters).

Each session is one container kept alive by a no-op main process; commands run in it with
``exec``. Builds are cached by a content hash of the build context (``unified-<name>:<hash>``);
containers carry the label ``unified.session`` and are always removed (``close``, and a
finalizer if a caller forgot). Timeouts are enforced twice: ``timeout -k`` inside the container
(which kills the command itself, not just the client) and a host-side limit on the CLI call.

The argv builders (``run_argv``, ``exec_argv`` ..., in :mod:`unified.execution.container_argv`) are plain functions of the spec, so their
construction is tested without an engine; a missing engine or daemon, or one that cannot start
a container here (:mod:`unified.execution.probe`, one tiny real run per engine per process), is
:class:`BackendUnavailable`, never a crash.

Apptainer cannot build Dockerfiles: with a build context it needs docker or podman on the
same node for the build (then converts the local image), otherwise the task is unavailable
with that reason. Prebuilt images (``spec.image``) are pulled as ``docker://IMAGE`` into a
SIF cache (``$UNIFIED_APPTAINER_CACHE`` or ``~/.cache/unified/sif``).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
import uuid
import weakref
from pathlib import Path

from unified.execution.base import (
    BackendUnavailable,
    EnvironmentSpec,
    ExecResult,
    ExecutionBackend,
    ExecutionError,
    ExecutionSession,
    quote,
    shell_join,
)
from unified.execution.container_argv import KEEPALIVE, build_argv, exec_argv, rm_argv, run_argv  # noqa: F401  (public names)
from unified.execution.episode_network import EpisodeNetwork, NetworkSetupError
from unified.execution.pristine import PRISTINE_POINT, pristine_toolchain
from unified.execution.pristine import toolchain_changes as allowlist_changes
from unified.execution.probe import probe_apptainer, probe_engine
from unified.execution.verifier import (
    SETUP_FAILED,
    PrivateRun,
    default_caps,
    files_tar,
    parse_private_output,
    private_verifier_argv,
    toolchain_tampering,
)
from unified.execution.verifier_tools import MOUNT_POINT, keep_mask, tools_mount_argv, verifier_tools
from unified.sandbox.streams import communicate_capped, cut_text

_HOST_GRACE_S = 30.0
MAX_OUTPUT_BYTES = 64 << 20
"""A command's stdout/stderr beyond this many bytes are counted and dropped while they stream (``read_file``
and ``copy_out`` travel through stdout as base64, so this also bounds what they can bring back)."""
_CHILDREN_OF_INIT = (r'for d in /proc/[0-9]*; do read -r l < "$d/stat" || continue; r=${l##*) }; set -- $r; '
                     r'[ "$2" = 1 ] && echo "${d#/proc/}"; done; true')


def _run(argv: list[str], timeout: float, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(argv, input=stdin, capture_output=True, timeout=timeout,
                          stdin=None if stdin is not None else subprocess.DEVNULL)


def _run_step(argv: list[str], timeout: float, what: str) -> None:
    """Run an engine step that must succeed (a build, a pull, a conversion to SIF); else an ExecutionError
    that names ``what`` and the command, with the exit status and the tail of its stderr, or the timeout."""
    try:
        proc = _run(argv, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise ExecutionError(f"{what} timed out after {timeout:.0f}s: {quote(argv)}") from None
    if proc.returncode != 0:
        raise ExecutionError(f"{what} failed (exit {proc.returncode}): {quote(argv)}\n"
                             f"{proc.stderr.decode(errors='replace').strip()[-2000:]}")


def _run_capped(argv: list[str], timeout: float, stdin: bytes | None = None,
                cap: int = MAX_OUTPUT_BYTES) -> tuple[int, str, str, bool]:
    """``(exit_code, stdout, stderr, host_timed_out)`` of an engine CLI call whose output is capped while it streams."""
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err, timed_out = communicate_capped(proc, stdin, timeout, cap, on_timeout=proc.kill)
    return proc.returncode, cut_text(out), cut_text(err), timed_out


def context_hash(context: Path, dockerfile: str = "Dockerfile") -> str:
    """A short content hash of a build context (file names, modes and bytes)."""
    h = hashlib.sha256()
    root = Path(context)
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        h.update(str(path.relative_to(root)).encode() + b"\0")
        h.update(oct(path.stat().st_mode & 0o777).encode())
        h.update(path.read_bytes())
    h.update(dockerfile.encode())
    return h.hexdigest()[:16]


def image_tag(spec: EnvironmentSpec) -> str:
    """The tag a build of ``spec.build_context`` gets (stable for identical contexts)."""
    safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in spec.name.lower()).strip("-.") or "task"
    return f"unified-{safe[:60]}:{context_hash(Path(spec.build_context), spec.dockerfile)}"


def qualify_image(image: str) -> str:
    """``image`` with its registry spelled out (``alexgshaw/x:1`` -> ``docker.io/alexgshaw/x:1``,
    ``ubuntu`` -> ``docker.io/library/ubuntu``): podman without search registries refuses short names."""
    first, _, rest = image.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return image
    return f"docker.io/{image}" if rest else f"docker.io/library/{image}"


# --------------------------------------------------------------------------------------
# docker / podman




REBUILT_LABEL = "unified.rebuilt-base"
"""Set on bases rebuilt from a distribution archive (:mod:`unified.execution.images`); images built on them inherit it."""


def rebuilt_base_labels(engine: str, image: str) -> dict[str, str]:
    """``{"rebuilt_base": ...}`` (and ``rebuilt_base_uv``) when ``image`` sits on a rebuilt base, else ``{}``."""
    try:
        proc = _run([engine, "image", "inspect", "--format", "{{json .Config.Labels}}", image], timeout=60)
        labels = json.loads(proc.stdout or b"null") if proc.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return {}
    if not isinstance(labels, dict) or REBUILT_LABEL not in labels:
        return {}
    out = {"rebuilt_base": str(labels[REBUILT_LABEL])}
    if f"{REBUILT_LABEL}.uv" in labels:
        out["rebuilt_base_uv"] = str(labels[f"{REBUILT_LABEL}.uv"])
    return out


INFO_TIMEOUT_S = 60
"""How long ``ENGINE info`` may take before the backend is called unavailable; 20 s refused a task on a
2-core machine with a load average of 10."""

class DockerSession(ExecutionSession):
    """A container of a docker-compatible engine."""

    def __init__(self, engine: str, spec: EnvironmentSpec, image: str) -> None:
        self.backend = engine
        super().__init__(spec)
        self.engine = engine
        self.name = f"unified-{uuid.uuid4().hex[:12]}"
        self.image = image
        self.info.update({"image": image, "container": self.name})
        self._started = False
        self._networks: list[EpisodeNetwork] = []
        self._finalizer = weakref.finalize(self, _force_remove, engine, self.name, self._networks)
        self._has_timeout = True
        self._keepalive: list[int] = []
        self._verifier_mask: int | str = "not started"
        """The private verifier's capability mask, or why there is no private verifier here."""
        self._pristine = ""
        """:data:`~unified.execution.pristine.PRISTINE_POINT` when the image's toolchain is mounted there."""

    def start(self) -> None:
        tools = verifier_tools()
        inspected = _run([self.engine, "image", "inspect", "--format", "{{.Id}}", self.image], timeout=60)
        if inspected.returncode == 0 and inspected.stdout.strip():
            self.info["image_id"] = inspected.stdout.decode(errors="replace").strip()
        mounts = tools_mount_argv()
        if mounts:  # the private verifier runs on the image's own toolchain (issue 42, R1)
            pristine = pristine_toolchain(self.engine, self.image, self.info.get("image_id", ""))
            if isinstance(pristine, str):
                self.info["pristine_toolchain"] = f"none: {pristine}"
            else:
                mounts += ["-v", f"{pristine}:{PRISTINE_POINT}:ro"]
                self._pristine, self.info["pristine_toolchain"] = PRISTINE_POINT, str(pristine)
        network: list[str] = []
        if self.spec.network:  # its own network, no way to the host or other episodes (issue 42, R3)
            self._started = True  # from here on, close() removes what was made
            try:
                self._networks.append(EpisodeNetwork.create(self.engine))
            except (NetworkSetupError, OSError, subprocess.TimeoutExpired) as exc:
                raise ExecutionError(f"{self.engine}: cannot give the episode a network of its own: {exc}") from exc
            network = self._networks[0].run_options()
            self.info["network_isolation"] = self._networks[0].info
        argv = run_argv(self.engine, self.spec, self.image, self.name, mounts, network)
        proc = _run(argv, timeout=120)
        self._started = True
        if proc.returncode != 0:
            raise ExecutionError(f"{self.engine}: cannot start a container: {quote(argv)}: "
                                 f"{proc.stderr.decode(errors='replace').strip()}")
        self.info.update(rebuilt_base_labels(self.engine, self.image))
        self._verifier_mask = tools if isinstance(tools, str) else self._default_mask()
        probe = self.exec(["sh", "-c", "command -v timeout >/dev/null"], timeout_s=30)
        self._has_timeout = probe.exit_code == 0
        # before the agent ever runs, the only child of the container's init is our keep-alive loop
        self._keepalive = [int(p) for p in self.exec(["sh", "-c", _CHILDREN_OF_INIT], timeout_s=30).stdout.split()
                           if p.isdigit()]
        wd = self.exec(["pwd"], timeout_s=30)
        if wd.ok and not self.spec.workdir:
            self.info["workdir"] = wd.stdout.strip()
        for d in self.spec.extra_dirs:
            self.exec(["mkdir", "-p", d], timeout_s=30)

    def _default_mask(self) -> int | str:
        """Before the agent runs: the container's default capabilities (read by the host's busybox) plus a marker."""
        res = self.exec([f"{MOUNT_POINT}/busybox", "cat", "/proc/self/status"], timeout_s=30)
        caps = default_caps(res.stdout) if res.ok else None
        if caps is None:
            return f"cannot read the container's default capabilities: {res.output().strip()[-200:]}"
        mask = keep_mask(caps)
        return mask if mask is not None else f"no marker capability left outside the default set {caps:x}"

    @property
    def workdir(self) -> str:
        return self.spec.workdir or self.info.get("workdir") or "/"

    def toolchain_changes(self, before_verifier: bool = True) -> list[str] | None:
        """The verifier's toolchain the agent changed, from the engine's diff of the container against its image:
        every change under its paths (:func:`unified.execution.pristine.toolchain_changes`). Where the verifier does
        not run on the image's copy of them, the diff taken after it (``before_verifier=False``) shows its own
        installs too and is read with the narrower :func:`~unified.execution.verifier.toolchain_tampering`."""
        try:
            proc = _run([self.engine, "diff", self.name], timeout=120)
        except subprocess.TimeoutExpired:
            return [f"? `{self.engine} diff` did not answer within 120 s"]
        if proc.returncode != 0:
            return [f"? `{self.engine} diff` failed: {proc.stderr.decode(errors='replace').strip()[-200:]}"]
        diff = proc.stdout.decode(errors="replace")
        if self._pristine or before_verifier:
            return list(dict.fromkeys([*allowlist_changes(diff, ignore_bytecode=bool(self._pristine)),
                                       *toolchain_tampering(diff, before_verifier)]))
        return toolchain_tampering(diff, before_verifier)

    def own_pids(self) -> list[int]:
        return list(self._keepalive)

    def exec(  # safe: a method name, not the builtin
        self, command, timeout_s=None, stdin=None, workdir=None, env=None,
    ) -> ExecResult:
        limit = float(self.spec.timeout_s if timeout_s is None else timeout_s)
        data = stdin.encode() if isinstance(stdin, str) else stdin
        argv = exec_argv(self.engine, self.name, command, limit, workdir, env, interactive=data is not None,
                         has_timeout=self._has_timeout)
        start = time.monotonic()
        code, out, err, host_timeout = _run_capped(argv, timeout=limit + _HOST_GRACE_S, stdin=data)
        if host_timeout:
            return ExecResult(-9, out, err, True, time.monotonic() - start, self.backend)
        timed_out = self._has_timeout and code in (124, 137)
        return ExecResult(code, out, err, timed_out, time.monotonic() - start, self.backend)

    def exec_private_verifier(self, command, *, out_dir, private_dirs, files, timeout_s, env=None,
                              workdir=None) -> PrivateRun | str:
        dirs = [out_dir, *[d for d in private_dirs if d != out_dir]]
        if any(":" in d or not d.startswith("/") for d in dirs):
            raise ValueError(f"private verifier directories must be absolute paths without ':': {dirs}")
        if isinstance(self._verifier_mask, str):
            return f"{self.engine}: no private verifier here: {self._verifier_mask}"
        limit = timeout_s + 120  # the command's own limit is inside; this bounds setup and the copy back
        argv = private_verifier_argv(self.engine, self.name, list(command), out_dir=out_dir, dirs=dirs,
                                     timeout_s=timeout_s, workdir=workdir or self.workdir, mask=self._verifier_mask,
                                     env=env, pristine=self._pristine)
        start = time.monotonic()
        code, out, err, host_timeout = _run_capped(argv, timeout=limit + _HOST_GRACE_S, stdin=files_tar(files))
        seconds = time.monotonic() - start
        if not host_timeout and (code in SETUP_FAILED or (code in (125, 126, 127) and not out.strip())):
            what = SETUP_FAILED.get(code, f"exit {code}")  # 125-127: the engine refused
            return f"{self.engine}: cannot run the verifier in a private namespace ({what}): {err.strip()[-300:]}"
        if host_timeout:
            return PrivateRun(-9, "", err, True, seconds, unreadable=f"did not finish within {limit:.0f} s")
        try:
            return parse_private_output(out, seconds, timeout_s)
        except ValueError as exc:  # it ran: its result is lost, not to be run again the plain way
            return PrivateRun(code, "", err, False, seconds, unreadable=f"{exc} (exit {code}; {err.strip()[-200:]})")

    def copy_in(self, src: Path, dest: str) -> None:
        path = self._abs(dest)
        src = Path(src)
        if not src.exists():
            raise FileNotFoundError(f"copy_in: {src} does not exist")
        self.exec(["mkdir", "-p", path if src.is_dir() else os.path.dirname(path) or "/"], timeout_s=30)
        source = f"{src}/." if src.is_dir() else str(src)
        proc = _run([self.engine, "cp", source, f"{self.name}:{path}"], timeout=600)
        if proc.returncode != 0:
            raise ExecutionError(f"{self.engine} cp {src} -> {path}: {proc.stderr.decode(errors='replace').strip()}")

    def _close(self) -> None:
        if self._started:
            self._finalizer()


def _force_remove(engine: str, name: str, networks: list[EpisodeNetwork] = ()) -> None:
    try:
        _run(rm_argv(engine, name), timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        pass
    for net in networks:  # after the container: a network in use cannot be removed
        net.remove()


class DockerBackend(ExecutionBackend):
    """docker (or, with ``engine="podman"``, podman: same CLI)."""

    name = "docker"

    def __init__(self, engine: str | None = None, keep_images: bool = True) -> None:
        self.engine = engine or self.name
        self.keep_images = keep_images

    def unavailable_reason(self) -> BackendUnavailable | None:
        if shutil.which(self.engine) is None:
            return BackendUnavailable(self.engine, f"the {self.engine} command is not installed",
                                      _INSTALL_HINTS[self.engine])
        try:
            proc = _run([self.engine, "info", "--format", "{{json .}}"], timeout=INFO_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return BackendUnavailable(self.engine, f"`{self.engine} info` did not answer within {INFO_TIMEOUT_S} s "
                                      "(machine busy?)",
                                      f"try again when the machine is less loaded; check `{self.engine} info`")
        if proc.returncode != 0:
            detail = proc.stderr.decode(errors="replace").strip().splitlines()
            return BackendUnavailable(self.engine, f"{self.engine} is installed but its engine is not reachable: "
                                      f"{detail[-1] if detail else 'exit ' + str(proc.returncode)}",
                                      _DAEMON_HINTS[self.engine])
        return probe_engine(self.engine, os.environ.get("CONTAINERS_CONF"))

    def prepare_image(self, spec: EnvironmentSpec) -> str:
        """Build (context) or pull (image) and return the image reference to run."""
        if spec.build_context:
            tag = image_tag(spec)
            if _run([self.engine, "image", "inspect", tag], timeout=60).returncode == 0:
                return tag
            _run_step(build_argv(self.engine, spec, tag), spec.build_timeout_s, f"{self.engine}: building {tag}")
            return tag
        if not spec.image:
            raise ExecutionError(f"{self.engine}: the environment names neither an image nor a build context")
        image = qualify_image(spec.image) if self.engine == "podman" else spec.image
        if _run([self.engine, "image", "inspect", image], timeout=60).returncode != 0:
            _run_step([self.engine, "pull", image], spec.build_timeout_s, f"{self.engine}: pulling {image}")
        return image

    def start(self, spec: EnvironmentSpec) -> DockerSession:
        self.require()
        return self._started(DockerSession(self.engine, spec, self.prepare_image(spec)))


class PodmanBackend(DockerBackend):
    """podman (rootless works; same CLI as docker)."""

    name = "podman"


# --------------------------------------------------------------------------------------
# apptainer


def apptainer_binary() -> str | None:
    """``apptainer``, or its older name ``singularity``."""
    return shutil.which("apptainer") or shutil.which("singularity")


def sif_cache_dir() -> Path:
    return Path(os.environ.get("UNIFIED_APPTAINER_CACHE") or Path.home() / ".cache" / "unified" / "sif")


def sif_path(image: str) -> Path:
    """Where the SIF of ``image`` is cached."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in image)
    return sif_cache_dir() / f"{safe}.sif"


def apptainer_pull_argv(binary: str, image: str, sif: Path) -> list[str]:
    source = image if "://" in image else f"docker://{image}"
    return [binary, "build", str(sif), source]


def local_image_to_sif_argvs(engine: str, tag: str, binary: str, sif: Path, workdir: Path) -> list[list[str]]:
    """The commands that turn a locally built image into a SIF: save it as an archive, build the SIF from that.

    Apptainer reads a saved image (``oci-archive://`` from ``podman save --format oci-archive``,
    ``docker-archive://`` from ``docker save``); it has no ``podman-daemon://`` source, and
    ``docker-daemon://`` needs a docker daemon. The archive goes in ``workdir`` (the caller removes it).
    """
    if engine == "podman":
        archive = workdir / "image.oci.tar"
        return [[engine, "save", "--format", "oci-archive", "-o", str(archive), tag],
                [binary, "build", "--force", str(sif), f"oci-archive://{archive}"]]
    archive = workdir / "image.docker.tar"
    return [[engine, "save", "-o", str(archive), tag], [binary, "build", "--force", str(sif), f"docker-archive://{archive}"]]


def apptainer_start_argv(binary: str, spec: EnvironmentSpec, sif: Path, instance: str, scratch: Path) -> list[str]:
    """``apptainer instance start`` with a private, writable overlay and no host home."""
    argv = [binary, "instance", "start", "--containall", "--cleanenv", "--writable-tmpfs", "--no-home",
            "--workdir", str(scratch)]
    if not spec.network:
        argv += ["--net", "--network", "none"]
    if spec.memory_mb:
        argv += ["--memory", f"{int(spec.memory_mb)}M"]
    if spec.cpus:
        argv += ["--cpus", f"{spec.cpus:g}"]
    for key, value in spec.env.items():
        argv += ["--env", f"{key}={value}"]
    return argv + [str(sif), instance]


def apptainer_exec_argv(binary: str, instance: str, command: str | list[str], timeout_s: float,
                        workdir: str | None = None, env: dict[str, str] | None = None) -> list[str]:
    argv = [binary, "exec"]
    if workdir:
        argv += ["--pwd", workdir]
    for key, value in (env or {}).items():
        argv += ["--env", f"{key}={value}"]
    return argv + [f"instance://{instance}", "timeout", "-k", "5", f"{max(timeout_s, 0.1):g}", *shell_join(command)]


class ApptainerSession(ExecutionSession):
    backend = "apptainer"

    def __init__(self, binary: str, spec: EnvironmentSpec, sif: Path) -> None:
        super().__init__(spec)
        self.binary, self.sif = binary, sif
        self.instance = f"unified-{uuid.uuid4().hex[:12]}"
        self.scratch = Path(os.environ.get("TMPDIR", "/tmp")) / self.instance
        self.info.update({"image": str(sif), "instance": self.instance})
        self._finalizer = weakref.finalize(self, _stop_instance, binary, self.instance, self.scratch)

    def start(self) -> None:
        self.scratch.mkdir(parents=True, exist_ok=True)
        argv = apptainer_start_argv(self.binary, self.spec, self.sif, self.instance, self.scratch)
        proc = _run(argv, timeout=300)
        if proc.returncode != 0:
            raise ExecutionError(f"apptainer: cannot start an instance: {quote(argv)}: "
                                 f"{proc.stderr.decode(errors='replace').strip()}")
        for d in self.spec.extra_dirs + ([self.spec.workdir] if self.spec.workdir else []):
            self.exec(["mkdir", "-p", d], timeout_s=30, workdir="/")

    @property
    def workdir(self) -> str:
        return self.spec.workdir or "/"

    def exec(  # safe: a method name, not the builtin
        self, command, timeout_s=None, stdin=None, workdir=None, env=None,
    ) -> ExecResult:
        limit = float(self.spec.timeout_s if timeout_s is None else timeout_s)
        data = stdin.encode() if isinstance(stdin, str) else stdin
        argv = apptainer_exec_argv(self.binary, self.instance, command, limit, workdir or self.spec.workdir,
                                   {**self.spec.env, **(env or {})})
        start = time.monotonic()
        code, out, err, host_timeout = _run_capped(argv, timeout=limit + _HOST_GRACE_S, stdin=data)
        if host_timeout:
            return ExecResult(-9, out, err, True, time.monotonic() - start, self.backend)
        return ExecResult(code, out, err, code in (124, 137), time.monotonic() - start, self.backend)

    def _close(self) -> None:
        self._finalizer()


@functools.lru_cache(maxsize=None)
def _probe_apptainer_cached(binary: str) -> BackendUnavailable | None:
    return probe_apptainer(binary)


def _stop_instance(binary: str, instance: str, scratch: Path) -> None:
    try:
        _run([binary, "instance", "stop", "--force", instance], timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        pass
    shutil.rmtree(scratch, ignore_errors=True)


class ApptainerBackend(ExecutionBackend):
    """Apptainer/Singularity instances from SIF images (pulled from a docker registry)."""

    name = "apptainer"

    def unavailable_reason(self) -> BackendUnavailable | None:
        binary = apptainer_binary()
        if binary is None:
            return BackendUnavailable("apptainer", "apptainer (or singularity) is not installed",
                                      _INSTALL_HINTS["apptainer"])
        try:
            proc = _run([binary, "--version"], timeout=20)
        except subprocess.TimeoutExpired:
            return BackendUnavailable("apptainer", f"`{binary} --version` did not answer")
        if proc.returncode != 0:
            return BackendUnavailable("apptainer", f"{binary} does not run: {proc.stderr.decode(errors='replace')}")
        return _probe_apptainer_cached(binary)

    def prepare_image(self, spec: EnvironmentSpec, binary: str) -> Path:
        if spec.build_context:
            builder = next((b for b in ("docker", "podman") if DockerBackend(b).available()), None)
            if builder is None:
                hint = (f"this environment also names the prebuilt image {spec.image}: run it without forcing a build"
                        if spec.image else
                        "give the task a prebuilt image (task.toml [environment] docker_image) or install podman")
                raise BackendUnavailable(
                    "apptainer", "apptainer cannot build a Dockerfile and no docker/podman is available to build it",
                    hint)
            tag = DockerBackend(builder).prepare_image(spec)
            sif = sif_path(tag)
            if not sif.exists():
                sif.parent.mkdir(parents=True, exist_ok=True)
                with tempfile.TemporaryDirectory(prefix="unified-sif-", dir=sif.parent) as tmp:
                    for argv in local_image_to_sif_argvs(builder, tag, binary, sif, Path(tmp)):
                        _run_step(argv, spec.build_timeout_s, f"apptainer: converting {tag} to {sif.name}")
            return sif
        if not spec.image:
            raise ExecutionError("apptainer: the environment names neither an image nor a build context")
        sif, source = sif_path(spec.image), spec.image
        if not sif.exists():
            sif.parent.mkdir(parents=True, exist_ok=True)
            _run_step(apptainer_pull_argv(binary, source, sif), spec.build_timeout_s, f"apptainer: pulling {source}")
        return sif

    def start(self, spec: EnvironmentSpec) -> ApptainerSession:
        self.require()
        binary = apptainer_binary()
        return self._started(ApptainerSession(binary, spec, self.prepare_image(spec, binary)))


_INSTALL_HINTS = {
    "docker": "install Docker Engine (https://docs.docker.com/engine/install/) or use --backend podman/apptainer/local",
    "podman": "apt-get install -y podman (rootless works) or use --backend docker/apptainer/local",
    "apptainer": "install apptainer (https://apptainer.org/docs/admin/main/installation.html; often `module load "
                 "apptainer` on Slurm clusters) or use --backend local",
}
_DAEMON_HINTS = {
    "docker": "start the daemon (`sudo systemctl start docker`) and make sure this user may use it (docker group)",
    "podman": "run `podman info` to see what is missing (subuids for rootless, storage driver)",
}
