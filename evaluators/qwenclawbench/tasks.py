"""QwenClawBench task files: Markdown with a YAML front matter, read from the user's checkout.

Layout of a checkout (github.com/SKYLENAGE-AI/QwenClawBench)::

    data/<dataset>/tasks/task_*.md     one task per file
    data/<dataset>/assets/<task_id>/   the files its workspace starts with

A task file is ``---\\n<YAML>\\n---\\n<body>``; the YAML holds ``id``, ``name``, ``category``,
``subcategory``, ``grading_type`` (``automated`` | ``llm_judge`` | ``hybrid``),
``grading_weights`` ({automated, llm_judge}), ``timeout_seconds`` and ``workspace_files``
(``{source, dest}`` copied from the assets, or ``{path, content}`` written inline). The body is
split on ``## `` headings: Prompt, Expected Behavior, Grading Criteria (``- [ ]`` items),
Automated Checks (a fenced Python block defining ``grade(transcript, workspace_path)``) and
LLM Judge Rubric. Parsing follows the benchmark's own loader (same front-matter rule, same
tracing-only fields dropped, same section split); errors name the file and line.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from unified.benchmarks.contract import BenchmarkUnavailable, TaskFormatError, check_task_id
from unified.execution.copying import copy_confined

DEFAULT_DATASET = "qwenclawbench-v1.1-100"
ENV_ROOT = "QWENCLAWBENCH_ROOT"
CLONE_HINT = (f"git clone https://github.com/SKYLENAGE-AI/QwenClawBench && export {ENV_ROOT}=$PWD/QwenClawBench "
              "(or --set benchmarks.qwenclawbench.root=/path/to/QwenClawBench)")

_FRONT_MATTER = re.compile(r"^---\s*\n(.*?)\n---\s*\n(.*)$", re.DOTALL)
_HEADING = re.compile(r"^##\s+(.+)$")
_CHECKBOX = re.compile(r"^-\s+\[[ x]\]\s+(.+)$")
_PYTHON_BLOCK = re.compile(r"```python\s*\n(.*?)\n\s*```", re.DOTALL)


@dataclass
class QCBTask:
    """One parsed task (kept JSON-serialisable: it travels in ``Task.payload``)."""

    id: str
    name: str
    category: str
    subcategory: str
    grading_type: str
    grading_weights: dict[str, float] | None
    timeout_seconds: int
    workspace_files: list[dict[str, Any]]
    prompt: str
    expected_behavior: str
    grading_criteria: list[str]
    automated_checks: str | None
    llm_judge_rubric: str | None
    file: str
    assets_dir: str
    frontmatter: dict[str, Any] = field(default_factory=dict)

    @property
    def grading_code(self) -> str:
        """The Python source of ``grade(transcript, workspace_path)`` ('' when there is none)."""
        if not self.automated_checks:
            return ""
        match = _PYTHON_BLOCK.search(self.automated_checks)
        return match.group(1) if match else ""


def resolve_dataset_dir(root: str | os.PathLike | None, dataset: str = DEFAULT_DATASET) -> Path:
    """``<root>/data/<dataset>`` (or ``root`` itself when it already holds tasks/ and assets/): the first
    of the two whose ``tasks/`` holds ``task_*.md`` files; anything else is not a checkout."""
    root = root or os.environ.get(ENV_ROOT)
    if not root:
        raise BenchmarkUnavailable(f"no QwenClawBench checkout configured (${ENV_ROOT} is unset)", CLONE_HINT)
    base = Path(root).expanduser()
    if not base.is_dir():
        raise BenchmarkUnavailable(f"QwenClawBench checkout {base} does not exist", CLONE_HINT)
    for candidate in (base / "data" / dataset, base):
        # a tasks/ directory alone is not enough: other repositories have one (lm-eval's package does)
        if (candidate / "tasks").is_dir() and any((candidate / "tasks").glob("task_*.md")):
            return candidate
    raise BenchmarkUnavailable(f"{base} is not a QwenClawBench checkout: no data/{dataset}/tasks/task_*.md in it",
                               CLONE_HINT)


def _line_of(text: str, needle: str) -> int:
    index = text.find(needle)
    return text.count("\n", 0, index) + 1 if index >= 0 else 1


def parse_task_file(path: Path, assets_root: Path) -> QCBTask:
    """Parse one ``task_*.md`` file."""
    text = path.read_text(encoding="utf-8")
    match = _FRONT_MATTER.match(text)
    if not match:
        raise TaskFormatError(f"{path}:1: no YAML front matter (expected '---' lines around it)")
    front, body = match.group(1), match.group(2)
    # tracing-only fields the benchmark's loader drops too (they may hold unparseable text)
    front = re.sub(r"^source_query:\s*.*?(?=\n\w+:\s|\n---|\Z)", "", front, flags=re.MULTILINE | re.DOTALL)
    front = re.sub(r"^source_line_number:.*$", "", front, flags=re.MULTILINE)
    try:
        meta = yaml.safe_load(front) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = (mark.line + 2) if mark is not None else 2
        raise TaskFormatError(f"{path}:{line}: invalid YAML front matter: {exc}") from None
    if not isinstance(meta, dict):
        raise TaskFormatError(f"{path}:2: front matter must be a mapping, got {type(meta).__name__}")
    sections: dict[str, str] = {}
    current, lines = None, []
    for line in body.split("\n"):
        heading = _HEADING.match(line)
        if heading:
            if current:
                sections[current] = "\n".join(lines).strip()
            current, lines = heading.group(1).strip(), []
        elif current:
            lines.append(line)
    if current:
        sections[current] = "\n".join(lines).strip()
    task_id = str(meta.get("id") or "")
    if not task_id:
        raise TaskFormatError(f"{path}:{_line_of(text, 'id:')}: front matter field 'id' is missing or empty")
    check_task_id(task_id, f"{path}:{_line_of(text, 'id:')}: front matter field 'id'")
    grading_type = str(meta.get("grading_type", "automated"))
    if grading_type not in ("automated", "llm_judge", "hybrid"):
        raise TaskFormatError(f"{path}:{_line_of(text, 'grading_type')}: field 'grading_type' is {grading_type!r}; "
                              "expected automated, llm_judge or hybrid")
    weights = meta.get("grading_weights")
    if weights is not None and not isinstance(weights, dict):
        raise TaskFormatError(f"{path}:{_line_of(text, 'grading_weights')}: field 'grading_weights' must be a mapping")
    files = meta.get("workspace_files") or []
    for i, spec in enumerate(files):
        if not isinstance(spec, dict) or not (("source" in spec and "dest" in spec) or ("path" in spec and "content" in spec)):
            raise TaskFormatError(f"{path}:{_line_of(text, 'workspace_files')}: workspace_files[{i}] needs "
                                  "{source, dest} or {path, content}")
    if not sections.get("Prompt"):
        raise TaskFormatError(f"{path}:{_line_of(text, '## Prompt')}: section '## Prompt' is missing or empty")
    criteria = [m.group(1) for m in (_CHECKBOX.match(l.strip()) for l in sections.get("Grading Criteria", "").split("\n")) if m]
    return QCBTask(
        id=task_id, name=str(meta.get("name", "")), category=str(meta.get("category", "")),
        subcategory=str(meta.get("subcategory", "")), grading_type=grading_type,
        grading_weights={str(k): float(v) for k, v in weights.items()} if weights else None,
        timeout_seconds=int(meta.get("timeout_seconds", 120)), workspace_files=list(files),
        prompt=sections.get("Prompt", "").strip(), expected_behavior=sections.get("Expected Behavior", "").strip(),
        grading_criteria=criteria, automated_checks=sections.get("Automated Checks"),
        llm_judge_rubric=sections.get("LLM Judge Rubric"), file=str(path), assets_dir=str(assets_root),
        frontmatter={k: v for k, v in meta.items() if isinstance(v, (str, int, float, bool, list, dict, type(None)))},
    )


def load_tasks(dataset_dir: Path) -> tuple[list[QCBTask], list[tuple[str, str]]]:
    """Every task of the dataset, sorted by file name, plus ``(file, error)`` for unparseable ones."""
    tasks, broken = [], []
    seen: dict[str, Path] = {}
    for path in sorted((dataset_dir / "tasks").glob("task_*.md")):
        try:
            task = parse_task_file(path, dataset_dir / "assets")
        except TaskFormatError as exc:
            broken.append((path.stem, str(exc)))
            continue
        if task.id in seen:  # one id, two tasks: the second's results would replace the first's
            raise TaskFormatError(f"{path}: front matter id {task.id!r} is already the id of {seen[task.id]}")
        seen[task.id] = path
        tasks.append(task)
    return tasks, broken


def materialise_workspace(task: QCBTask, workspace: Path) -> list[str]:
    """Copy the task's workspace files into ``workspace`` (like the benchmark does); returns dest paths.

    Sources are looked up like the benchmark's Docker runner does: ``assets/<task_id>/<source>``
    first, then ``assets/<source>`` (and the same under ``generated_assets/``); a ``dest`` that
    would land outside the workspace is an error, and so is a ``source`` that is absolute, climbs
    out with ``..`` or resolves (through a symlink) outside the dataset's checkout directory: a
    task file must never copy an arbitrary host file into the workspace the agent reads.
    """
    workspace.mkdir(parents=True, exist_ok=True)
    root = workspace.resolve()
    assets = Path(task.assets_dir)
    search = [assets, assets.parent / "generated_assets"]
    written = []
    for spec in task.workspace_files:
        rel = spec["path"] if "content" in spec else spec["dest"]
        dest = (root / rel).resolve()
        if root not in dest.parents:
            raise TaskFormatError(f"{task.file}: workspace file {rel!r} points outside the workspace")
        dest.parent.mkdir(parents=True, exist_ok=True)
        if "content" in spec:
            dest.write_text(str(spec["content"]), encoding="utf-8")
        else:
            candidates = [c for d in search for c in (d / task.id / str(spec["source"]), d / str(spec["source"]))]
            checkout = assets.parent.resolve()
            for c in candidates:
                resolved = c.resolve()
                if os.path.isabs(str(spec["source"])) or (c.exists() and checkout not in resolved.parents):
                    raise TaskFormatError(f"{task.file}: workspace_files source {spec['source']!r} points outside "
                                          f"the task's checkout directory {checkout}")
            source = next((c for c in candidates if c.is_file()), None)
            if source is None:
                raise FileNotFoundError(f"{task.file}: asset {spec['source']!r} not found in "
                                        + ", ".join(str(c) for c in candidates))
            copy_confined(source, dest, root=checkout, where=f"{task.file}: workspace_files source {spec['source']!r}")
        written.append(str(rel))
    return written
