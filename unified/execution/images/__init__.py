"""Task images on machines without a container registry (air-gapped clusters, CI).

``python -m unified.execution.images build TASK_DIR...`` rebuilds each task's Debian/Ubuntu
``FROM`` base from the distribution archive (:mod:`.bases`), puts it in the engine under the
``FROM`` name with the site's CA bundle and package-index settings, then builds the task's
``environment/Dockerfile`` on it (:mod:`.engines`). A later run of the benchmark with
``build=always`` uses that image; its results say it ran on a rebuilt image
(``not_comparable_because``: rebuilt from the Dockerfile on a local base, not the published
image). A base that is not Debian/Ubuntu (``python:*``, ``node:*``...) is a named skip.

Rootfs tars, uv binaries and SIFs are cached under ``$UNIFIED_IMAGE_CACHE`` (default
``~/.cache/unified/images``).
"""

from __future__ import annotations

import os
import re
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from unified.execution.dockerfile import DockerfileError, parse_dockerfile
from unified.execution.images.bases import BaseRecipe, CannotRebuild, base_recipe, build_rootfs, host_ca_bundle, site_env
from unified.execution.images.engines import (
    LABEL,
    ImageBuildError,
    build_task_image,
    import_base,
    rootfs_sif,
    tag_from_name,
    to_sif,
    UV_IMAGE,
    uv_binaries,
    uv_image,
    uv_version_needed,
)
from unified.execution.base import EnvironmentSpec

__all__ = ["LABEL", "BaseRecipe", "BuildResult", "CannotRebuild", "base_recipe", "build_task", "cache_dir",
           "from_images"]


def cache_dir() -> Path:
    return Path(os.environ.get("UNIFIED_IMAGE_CACHE") or Path.home() / ".cache" / "unified" / "images")


@dataclass
class BuildResult:
    """What ``build`` did for one task folder."""

    task: str
    status: str
    """``built``, ``skipped`` (cannot rebuild the base; ``reason`` names it) or ``failed``."""
    reason: str = ""
    image: str | None = None
    bases: list[str] = field(default_factory=list)
    seconds: float = 0.0


def from_images(dockerfile: Path) -> list[str]:
    """The external images a Dockerfile's ``FROM`` and ``COPY --from`` name (build stages and ``scratch`` left out)."""
    stages, out = set(), []
    args = {}
    for ins in parse_dockerfile(dockerfile):
        if ins.keyword == "ARG" and "=" in ins.args:
            key, value = ins.args.strip().split("=", 1)
            args[key.strip()] = value.strip().strip('"')
        if ins.keyword in ("COPY", "ADD"):
            source = re.search(r"--from=(\S+)", ins.args)
            ref = source.group(1) if source else None
            if ref and ref.lower() not in stages and not ref.isdigit() and ref not in out:
                out.append(ref)  # an image used only as a file source (COPY --from=ghcr.io/astral-sh/uv:0.8.14)
            continue
        if ins.keyword != "FROM":
            continue
        words = [w for w in ins.args.split() if not w.startswith("--")]
        ref = words[0]
        for key, value in args.items():
            ref = ref.replace(f"${{{key}}}", value).replace(f"${key}", value)
        if len(words) >= 3 and words[1].lower() == "as":
            stages.add(words[2].lower())
        if ref.lower() not in stages and ref != "scratch" and ref not in out:
            out.append(ref)
    return out


def build_task(task_dir: Path, engine: str = "podman", *, apptainer: str | None = None,
               debian_mirror: str | None = None, ubuntu_mirror: str | None = None, log=print) -> BuildResult:
    """Rebuild the bases of one Terminal-Bench-style task folder, then build its Dockerfile.

    ``engine`` builds (podman or docker); with ``apptainer`` (its binary) the result is also
    converted to the SIF the apptainer backend runs.
    """
    task_dir = Path(task_dir).resolve()
    start = time.monotonic()
    dockerfile = task_dir / "environment" / "Dockerfile"
    result = BuildResult(task=task_dir.name, status="failed")
    try:
        refs = from_images(dockerfile)
        uv_images = [ref for ref in refs if UV_IMAGE.fullmatch(ref)]
        recipes = [base_recipe(ref, debian_mirror, ubuntu_mirror) for ref in refs if ref not in uv_images]
    except CannotRebuild as exc:
        result.status, result.reason = "skipped", f"cannot rebuild the base: {exc}"
        return result
    except (DockerfileError, OSError) as exc:
        result.reason = f"{dockerfile}: {exc}"
        return result
    version = uv_version_needed(task_dir)
    env = site_env(host_ca_bundle())
    try:
        for recipe in recipes:
            tar = build_rootfs(recipe, cache_dir(), log=log)
            base = import_base(engine, recipe, tar, env)
            uv = uv_binaries(version, cache_dir()) if version is not None else None
            result.bases.append(tag_from_name(engine, base, recipe, uv, version))
        for ref in uv_images:
            result.bases.append(uv_image(engine, ref, uv_binaries(UV_IMAGE.fullmatch(ref).group(1), cache_dir())))
        spec = EnvironmentSpec(build_context=task_dir / "environment", name=task_dir.name)
        result.image = build_task_image(engine, spec, timeout=3600)
        if apptainer:
            with tempfile.TemporaryDirectory(prefix="unified-sif-") as tmp:
                result.image = str(to_sif(engine, result.image, apptainer, Path(tmp)))
        result.status = "built"
    except CannotRebuild as exc:
        result.status, result.reason = "skipped", f"cannot rebuild the base: {exc}"
    except (ImageBuildError, OSError) as exc:
        result.reason = str(exc)
    result.seconds = round(time.monotonic() - start, 1)
    return result


def base_sif(ref: str, apptainer: str, out: Path, **mirrors: str | None) -> Path:
    """Only the rebuilt base, as a SIF (for apptainer-only nodes that run prebuilt task images elsewhere)."""
    recipe = base_recipe(ref, **mirrors)
    return rootfs_sif(apptainer, build_rootfs(recipe, cache_dir()), out)
