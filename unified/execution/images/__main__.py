"""``python -m unified.execution.images``: build task images without a registry (see the package docstring).

    python -m unified.execution.images build TASK_DIR... [--engine podman] [--apptainer]
                                       [--debian-mirror URL] [--ubuntu-mirror URL] [--jsonl FILE]
    python -m unified.execution.images base-sif ubuntu:24.04 OUT.sif
    python -m unified.execution.images containers-conf PATH   # the podman settings the probe suggests
"""

from __future__ import annotations

import argparse
import shutil
import sys
from dataclasses import asdict
from pathlib import Path

from unified.execution.images import BuildResult, CannotRebuild, base_sif, build_task
from unified.execution.infra import infrastructure_evidence
from unified.execution.probe import containers_conf_text
from unified.store import append_jsonl


def result_line(result: BuildResult) -> str:
    """One line a task: status, image, the reason's first line, and for a failure the infrastructure
    evidence in the build's output (a download or DNS failure), which a caller sorting causes reads."""
    first = result.reason.splitlines()[0] if result.reason else ""
    evidence = infrastructure_evidence(result.reason) if result.status == "failed" and result.reason else []
    extra = "".join(f" | {line}" for line in evidence)
    return f"{result.task}: {result.status} {result.image or ''} {first}{extra} ({result.seconds:.0f} s)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, prog="python -m unified.execution.images", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build", help="rebuild each task's Debian/Ubuntu base, then build its Dockerfile")
    build.add_argument("tasks", nargs="+", type=Path, help="task folders (holding environment/Dockerfile)")
    build.add_argument("--engine", default="podman", choices=("podman", "docker"))
    build.add_argument("--apptainer", action="store_true", help="also convert each image to the apptainer SIF")
    build.add_argument("--debian-mirror", help="default $UNIFIED_DEBIAN_MIRROR or deb.debian.org")
    build.add_argument("--ubuntu-mirror", help="default $UNIFIED_UBUNTU_MIRROR or archive.ubuntu.com")
    build.add_argument("--jsonl", type=Path, help="append one JSON line a task (task, status, reason, image, seconds)")
    sif = sub.add_parser("base-sif", help="only the rebuilt base, as an apptainer SIF")
    sif.add_argument("ref")
    sif.add_argument("out", type=Path)
    conf = sub.add_parser("containers-conf", help="write the containers.conf that podman's start probe suggests")
    conf.add_argument("path", type=Path)
    args = parser.parse_args(argv)

    if args.command == "containers-conf":
        args.path.expanduser().parent.mkdir(parents=True, exist_ok=True)
        args.path.expanduser().write_text(containers_conf_text())
        print(f"wrote {args.path}; now: export CONTAINERS_CONF={args.path}")
        return 0
    binary = shutil.which("apptainer") or shutil.which("singularity")
    if args.command == "base-sif":
        if binary is None:
            parser.error("apptainer (or singularity) is not installed")
        try:
            print(base_sif(args.ref, binary, args.out))
        except CannotRebuild as exc:
            print(f"skipped: {exc}", file=sys.stderr)
            return 1
        return 0
    if shutil.which(args.engine) is None:
        parser.error(f"{args.engine} is not installed (apt-get install -y {args.engine})")
    if args.apptainer and binary is None:
        parser.error("--apptainer: apptainer (or singularity) is not installed")
    failed = 0
    for task in args.tasks:
        if not (task / "environment" / "Dockerfile").is_file():
            parser.error(f"{task}: no environment/Dockerfile")
        result = build_task(task, args.engine, apptainer=binary if args.apptainer else None,
                            debian_mirror=args.debian_mirror, ubuntu_mirror=args.ubuntu_mirror,
                            log=lambda m: print(m, file=sys.stderr, flush=True))
        failed += result.status == "failed"
        print(result_line(result), flush=True)
        if args.jsonl:
            append_jsonl(args.jsonl, asdict(result))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
