"""Which Terminal-Bench tasks the ``local`` backend can run, and why not the others.

The local backend (:mod:`unified.execution.local`) has no image: it runs on the host's
read-only system directories in a bubblewrap sandbox, as an unprivileged user, and replays
the task's Dockerfile (``WORKDIR``, ``ENV``, ``COPY``, ``RUN``) on top. A task runs faithfully
there only when building it needs neither root nor the network, and when its verifier does
not install its tools at verify time (most Terminal-Bench 2.0 verifiers fetch ``uv`` or
``pytest`` then; offline or unprivileged, a correct solution would score 0).

:func:`local_blockers` reads ``environment/Dockerfile`` and ``tests/test.sh`` without running
anything and returns one reason a problem (file:line and the command), so the adapter skips
such a task up front with that reason instead of failing or scoring it 0.
"""

from __future__ import annotations

import re
from pathlib import Path

from unified.execution.dockerfile import DockerfileError, parse_dockerfile, resolve

_NEEDS_ROOT_OR_NETWORK = re.compile(
    r"(?:^|[;&|(`]|\b(?:then|do|else|exec|xargs)\s)\s*(?:sudo\s+(?:-\S+\s+)*)?(?:[A-Za-z_]\w*=\S*\s+)*("
    r"apt-get|apt|aptitude|dpkg\s+-i|yum|dnf|apk|zypper|pacman|microdnf|"
    r"(?:python\d*(?:\.\d+)?\s+-m\s+)?pip\d*(?:\.\d+)?\s+install|uv\s+(?:pip\s+install|sync|tool\s+install|add)|"
    r"uvx|pipx|poetry\s+install|conda\s+(?:install|create)|mamba|micromamba|"
    r"npm\s+(?:install|i|ci)|yarn(?:\s+install)?|pnpm\s+(?:install|i)|npx|"
    r"curl|wget|git\s+clone|go\s+(?:install|get|mod\s+download)|cargo\s+(?:install|build|fetch)|"
    r"gem\s+install|cpanm?|rustup|nvm\s+install|"
    r"useradd|adduser|groupadd|usermod|chown|update-alternatives|locale-gen|ldconfig|systemctl|service"
    r")(?=$|[\s;&|)`])")
_SYSTEM_TOPS = ("/usr", "/etc", "/bin", "/sbin", "/lib", "/lib64", "/opt", "/var", "/root", "/home", "/srv",
                "/boot", "/proc", "/sys", "/dev", "/")


def _command_lines(script: str) -> list[tuple[int, str]]:
    """(line number, text) of a shell script, comments dropped, ``\\`` continuations joined."""
    out, buf, start = [], "", 0
    for number, raw in enumerate(script.splitlines(), start=1):
        line = raw.split("#", 1)[0] if raw.lstrip().startswith("#") else raw
        if not buf:
            start = number
        if line.rstrip().endswith("\\"):
            buf += line.rstrip()[:-1] + " "
            continue
        buf += line
        if buf.strip():
            out.append((start, buf.strip()))
        buf = ""
    return out


def needs_root_or_network(command: str) -> str | None:
    """The first word of ``command`` that installs or fetches something (``apt-get``, ``pip install``...)."""
    match = _NEEDS_ROOT_OR_NETWORK.search(command)
    return match.group(1) if match else None


def _under_system_dir(path: str) -> bool:
    top = "/" + path.strip("/").split("/")[0]
    return path.rstrip("/") in ("", "/tmp") or (top in _SYSTEM_TOPS and top != "/")


BUILD_NEEDS_ROOT_OR_NETWORK = "the image build needs root or the network"
BUILD_NOT_REPRODUCIBLE = "the image build is not reproducible in the sandbox"
PREBUILT_ONLY = "the task names only a prebuilt image (no environment/Dockerfile to replay)"
VERIFIER_INSTALLS = "the verifier installs its tools at verify time (root or the network)"


def dockerfile_blocker(dockerfile: Path) -> tuple[str, str] | None:
    """(category, file:line detail) of why the local backend cannot reproduce this Dockerfile; None: it can."""
    try:
        instructions = parse_dockerfile(dockerfile)
    except DockerfileError as exc:
        return BUILD_NOT_REPRODUCIBLE, str(exc)
    cwd = "/"
    for ins in instructions:
        where = f"{dockerfile}:{ins.line}"
        if ins.keyword == "WORKDIR":
            cwd = resolve(cwd, ins.args.strip())
            if _under_system_dir(cwd):
                return BUILD_NOT_REPRODUCIBLE, f"{where}: WORKDIR {cwd} is a system directory (read-only here)"
        elif ins.keyword in ("COPY", "ADD"):
            if "--from" in ins.args:
                return BUILD_NOT_REPRODUCIBLE, f"{where}: multi-stage {ins.keyword} --from needs a container build"
            words = ins.words()
            if any("://" in w for w in words[:-1]):
                return BUILD_NEEDS_ROOT_OR_NETWORK, f"{where}: {ins.keyword} from a URL"
            if words and _under_system_dir(resolve(cwd, words[-1])):
                return BUILD_NEEDS_ROOT_OR_NETWORK, f"{where}: {ins.keyword} into {words[-1]} (a system directory)"
        elif ins.keyword == "RUN":
            word = needs_root_or_network(ins.args)
            if word:
                return BUILD_NEEDS_ROOT_OR_NETWORK, f"{where}: RUN uses {word!r}"
        elif ins.keyword == "USER" and ins.args.strip() not in ("root", "0"):
            return BUILD_NOT_REPRODUCIBLE, f"{where}: USER {ins.args.strip()} (another user account)"
    return None


def local_blockers(task_path: str | Path, has_dockerfile: bool, docker_image: str | None) -> str | None:
    """Why the local backend cannot run this task faithfully (None when it can).

    Two lines: a category shared by every task it applies to (reports group skips by it), then
    the file, line and command (or image) that decide it.
    """
    task_dir = Path(task_path)
    if not has_dockerfile:
        return f"{PREBUILT_ONLY}\n{docker_image}: use docker, podman or apptainer"
    problem = dockerfile_blocker(task_dir / "environment" / "Dockerfile")
    if problem:
        return "\n".join(problem)
    test_sh = task_dir / "tests" / "test.sh"
    for number, line in _command_lines(test_sh.read_text(errors="replace")):
        word = needs_root_or_network(line)
        if word:
            return (f"{VERIFIER_INSTALLS}\n{test_sh}:{number}: uses {word!r} (offline or unprivileged it would score "
                    "a correct solution 0)")
    return None
