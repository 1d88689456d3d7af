"""Rebuilt bases into an engine, under the ``FROM`` name, and a task's Dockerfile built on them.

podman/docker: the root filesystem tar is imported (``ENGINE import``) with the site
variables and a ``unified.rebuilt-base`` label that every image built on it inherits (the
session reads it back, so each result says it ran on a rebuilt image); when the task uses
``uv``/``uvx``, uv from its PyPI wheel (the version the task's installer line pins) is added
at ``/usr/local/bin`` with the installer's ``~/.local/bin/env``, since the installer itself
downloads from a site a registry-less machine cannot reach. The result is tagged under the
``FROM`` name, then the task's ``environment/Dockerfile`` is built with the tag the execution
backend looks for (:func:`unified.execution.containers.image_tag`), so runs find it built.

apptainer: the built image is saved as an OCI archive and converted to the SIF the apptainer
backend looks for (:func:`unified.execution.containers.sif_path`); building the Dockerfile
still needs podman or docker on the node.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from unified.execution.base import EnvironmentSpec, quote
from unified.execution.containers import REBUILT_LABEL as LABEL
from unified.execution.containers import build_argv, image_tag, local_image_to_sif_argvs, sif_path
from unified.execution.images.bases import BaseRecipe

_UV_PIN = re.compile(r"astral\.sh/uv/(\d+\.\d+\.\d+)/install\.sh")
_USES_UV = re.compile(r"(?:^|[\s;&|(`/])uvx?(?=\s|$)", re.M)


UV_IMAGE = re.compile(r"ghcr\.io/astral-sh/uv:(\d+\.\d+\.\d+)")
"""uv's own image, which Dockerfiles copy ``/uv`` and ``/uvx`` from; rebuilt from the same PyPI wheel."""


class ImageBuildError(RuntimeError):
    """An engine step failed; the message has the command and the end of its output."""


def _run(argv: list[str], timeout: float = 3600, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run(argv, input=stdin, capture_output=True, timeout=timeout,
                          stdin=None if stdin is not None else subprocess.DEVNULL)
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr).decode(errors="replace").strip()[-1500:]
        raise ImageBuildError(f"{quote(argv)} failed (exit {proc.returncode}):\n{tail}")
    return proc


def uv_version_needed(task_dir: Path) -> str | None:
    """``""`` (latest) or the pinned version when the task's scripts use uv/uvx; None when they do not."""
    texts = [re.sub(r"(?m)(^|\s)#.*$", "", p.read_text(errors="replace")) for p in (task_dir / "tests" / "test.sh", task_dir / "solution" / "solve.sh",
                                                     task_dir / "environment" / "Dockerfile") if p.is_file()]
    if not any(_USES_UV.search(t) for t in texts):
        return None
    pins = sorted({m for t in texts for m in _UV_PIN.findall(t)})
    return pins[-1] if pins else ""


def uv_binaries(version: str, cache: Path) -> Path:
    """A directory holding ``uv`` and ``uvx`` from uv's manylinux wheel on PyPI (downloaded once)."""
    out = cache / "uv" / (version or "latest")
    if (out / "uv").is_file() and (out / "uvx").is_file():
        return out
    wheels = cache / "uv" / "wheels"
    spec = f"uv=={version}" if version else "uv"
    _run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--platform",
          "manylinux_2_17_x86_64", "--python-version", "3.12", "-d", str(wheels), spec], timeout=600)
    candidates = sorted(wheels.glob(f"uv-{version or '*'}-*manylinux*x86_64*.whl"))
    if not candidates:
        raise ImageBuildError(f"no uv wheel for {spec} in {wheels}")
    out.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(candidates[-1]) as whl:
        for member in whl.namelist():
            name = Path(member).name
            if ".data/scripts/" in member and name in ("uv", "uvx"):
                (out / name).write_bytes(whl.read(member))
                (out / name).chmod(0o755)
    if not (out / "uv").is_file():
        raise ImageBuildError(f"{candidates[-1].name} has no uv binary")
    return out


def import_base(engine: str, recipe: BaseRecipe, rootfs_tar: Path, env: dict[str, str]) -> str:
    """The rebuilt base in ``engine`` as ``localhost/unified-base/DISTRO:SUITE``; returns that name."""
    name = f"localhost/unified-base/{recipe.distro}:{recipe.suite}"
    changes = [f"ENV {k}={v}" for k, v in env.items()] + [f"LABEL {LABEL}={json.dumps(recipe.describe())}",
                                                         'CMD ["/bin/bash"]']
    argv = [engine, "import"]
    for change in changes:
        argv += ["--change", change]
    _run(argv + [str(rootfs_tar), name])
    return name


def tag_from_name(engine: str, base: str, recipe: BaseRecipe, uv_dir: Path | None, version: str | None) -> str:
    """Tag ``base`` (plus uv when ``uv_dir``) under the ``FROM`` name; returns the qualified name."""
    target = recipe.qualified
    if uv_dir is None:
        _run([engine, "tag", base, target])
        return target
    with tempfile.TemporaryDirectory(prefix="unified-uv-") as ctx:
        for name in ("uv", "uvx"):
            Path(ctx, name).write_bytes((uv_dir / name).read_bytes())
            Path(ctx, name).chmod(0o755)
        Path(ctx, "env").write_text('case ":$PATH:" in *":$HOME/.local/bin:"*) ;; *) export PATH="$HOME/.local/bin:$PATH";; esac\n')
        Path(ctx, "Dockerfile").write_text(
            f"FROM {base}\nCOPY uv uvx /usr/local/bin/\nCOPY env /root/.local/bin/env\n"
            f'LABEL {LABEL}.uv="uv {version or "latest"} from its PyPI wheel"\n')
        argv = [engine, "build", "-t", target, ctx]
        if engine == "podman":
            argv.insert(2, "--pull=never")
        _run(argv)
    return target


def uv_image(engine: str, ref: str, uv_dir: Path) -> str:
    """``ref`` (uv's image) as a scratch image holding ``/uv`` and ``/uvx`` from the PyPI wheel."""
    with tempfile.TemporaryDirectory(prefix="unified-uvimg-") as ctx:
        for name in ("uv", "uvx"):
            Path(ctx, name).write_bytes((uv_dir / name).read_bytes())
            Path(ctx, name).chmod(0o755)
        Path(ctx, "Dockerfile").write_text(f'FROM scratch\nCOPY uv uvx /\nLABEL {LABEL}.uv="{ref} from its PyPI wheel"\n')
        _run([engine, "build", "-t", ref, ctx])
    return ref


def build_task_image(engine: str, spec: EnvironmentSpec, timeout: float) -> str:
    """Build the task's Dockerfile under the tag the execution backend looks for; returns the tag."""
    tag = image_tag(spec)
    argv = build_argv(engine, spec, tag)
    if engine == "podman":
        argv.insert(2, "--pull=never")
    _run(argv, timeout=timeout)
    return tag


def to_sif(engine: str, tag: str, binary: str, workdir: Path) -> Path:
    """Convert a built image into the SIF the apptainer backend uses for it (:func:`local_image_to_sif_argvs`)."""
    sif = sif_path(tag)
    sif.parent.mkdir(parents=True, exist_ok=True)
    argvs = local_image_to_sif_argvs(engine, tag, binary, sif, workdir)
    for argv in argvs:
        _run(argv)
    Path(argvs[0][-2]).unlink(missing_ok=True)
    return sif


def rootfs_sif(binary: str, rootfs_tar: Path, out: Path) -> Path:
    """The rebuilt base alone as a SIF (``apptainer build`` from the unpacked root filesystem)."""
    with tempfile.TemporaryDirectory(prefix="unified-rootfs-", dir=out.parent) as tmp:
        _run(["tar", "--numeric-owner", "-C", tmp, "-xf", str(rootfs_tar)])
        _run([binary, "build", "--force", str(out), tmp])
    return out
