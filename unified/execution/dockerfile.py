"""A small Dockerfile reader, so that the local backend can approximate a task's image.

The local backend has no image: it runs on the host's read-only system directories inside
:mod:`unified.sandbox`. What it can reproduce of a Dockerfile is the part that shapes the
task's files: ``WORKDIR``, ``ENV``, ``COPY``/``ADD`` of build-context files and ``RUN`` steps
(run confined, unprivileged and offline, so package installs fail and are reported). ``FROM``,
``CMD``, ``USER`` and the like are recorded as not reproduced. Errors name the file and line.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path


class DockerfileError(ValueError):
    """A Dockerfile the reader (or the local backend) cannot use; names file and line."""


@dataclass
class Instruction:
    """One Dockerfile instruction."""

    keyword: str
    """Upper-case instruction name (``RUN``, ``COPY`` ...)."""
    args: str
    """Everything after the keyword, continuation lines joined."""
    line: int
    """1-based line where the instruction starts."""

    def words(self) -> list[str]:
        """Arguments as a list: JSON-array form or shell words (flags such as ``--chown`` dropped)."""
        text = self.args.strip()
        if text.startswith("["):
            try:
                value = json.loads(text)
            except json.JSONDecodeError:
                value = None
            if isinstance(value, list):
                return [str(v) for v in value]
        return [w for w in shlex.split(text) if not w.startswith("--")]


def parse_dockerfile(path: Path) -> list[Instruction]:
    """The instructions of a Dockerfile (comments dropped, ``\\`` continuations joined)."""
    path = Path(path)
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise DockerfileError(f"{path}: cannot read: {exc}") from None
    out: list[Instruction] = []
    buf, start = "", 0
    for number, raw in enumerate(lines, start=1):
        stripped = raw.strip()
        if not buf and (not stripped or stripped.startswith("#")):
            continue
        if buf and stripped.startswith("#"):
            continue
        if not buf:
            start = number
        if stripped.endswith("\\"):
            buf += stripped[:-1] + " "
            continue
        buf += stripped
        match = re.match(r"([A-Za-z]+)\s*(.*)", buf, re.S)
        if not match:
            raise DockerfileError(f"{path}:{start}: not an instruction: {buf[:60]!r}")
        out.append(Instruction(match.group(1).upper(), match.group(2), start))
        buf = ""
    if buf:
        raise DockerfileError(f"{path}:{start}: the file ends inside a continued instruction")
    if not out or out[0].keyword not in ("FROM", "ARG"):
        raise DockerfileError(f"{path}:1: a Dockerfile starts with FROM")
    return out


def final_workdir(instructions: list[Instruction], default: str = "/") -> str:
    """The WORKDIR in effect at the end (relative WORKDIRs resolve against the previous one)."""
    current = default
    for ins in instructions:
        if ins.keyword == "WORKDIR":
            current = resolve(current, ins.args.strip())
    return current


def resolve(base: str, path: str) -> str:
    """``path`` made absolute against ``base`` and normalised."""
    joined = path if path.startswith("/") else f"{base.rstrip('/')}/{path}"
    parts: list[str] = []
    for part in joined.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if parts:
                parts.pop()
            continue
        parts.append(part)
    return "/" + "/".join(parts)


def env_pairs(ins: Instruction) -> dict[str, str]:
    """``ENV a=b c=d`` or ``ENV a b`` as a dict."""
    text = ins.args.strip()
    words = shlex.split(text)
    if words and "=" not in words[0]:
        return {words[0]: text[len(words[0]):].strip()}
    pairs = {}
    for word in words:
        if "=" not in word:
            raise ValueError(f"line {ins.line}: ENV expects key=value, got {word!r}")
        key, value = word.split("=", 1)
        pairs[key] = value
    return pairs
