"""Claw-Eval tasks: ``tasks/<id>/task.yaml`` (+ ``grader.py``, ``fixtures/``) in the user's checkout.

A checkout of github.com/claw-eval/claw-eval has ``tasks/`` (300 tasks), ``mock_services/``
(the FastAPI services the tasks start) and ``src/claw_eval`` (whose models and grader base
classes the tasks' ``grader.py`` files import). Splits follow the benchmark's tags:
``general`` (tag general, not user_agent: 161), ``multimodal`` (101), ``multi_turn`` (tag
user_agent: 38). A task is skipped, with the reason, when it needs live web access (a
``web_real`` service and no ``SERP_DEV_KEY``) or when files it lists are not in the checkout
(the GitHub repository leaves out the videos for their size and lacks some other fixtures, such
as T091's blog post ``fixtures/docs/ai_blog.txt``; the complete fixtures are in the Hugging Face
dataset): the reason says what kind of file is missing.
"""

from __future__ import annotations

import mimetypes
import os
import re
import shlex
import shutil
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from unified.benchmarks.contract import BenchmarkUnavailable, TaskFormatError, check_task_id

from evaluators.claw_eval.browser import playwright_setup

ENV_ROOT = "CLAW_EVAL_ROOT"
CLONE_HINT = (f"git clone https://github.com/claw-eval/claw-eval && export {ENV_ROOT}=$PWD/claw-eval "
              "(or --set benchmarks.claw_eval.root=/path/to/claw-eval)")
SPLITS = ("general", "multimodal", "multi_turn")
LIVE_WEB_SERVICES = ("web_real", "web_real_injection")
LIVE_WEB_KEY = "SERP_DEV_KEY"


@dataclass
class ClawTask:
    """What the adapter needs of one task.yaml (JSON-serialisable; travels in Task.payload)."""

    id: str
    name: str
    category: str
    split: str
    tags: list[str]
    dir: str
    checkout: str
    prompt: str
    language: str
    tools: list[dict[str, Any]]
    endpoints: dict[str, dict[str, str]]
    services: list[dict[str, Any]]
    max_turns: int
    timeout_seconds: int
    user_agent: dict[str, Any]
    sandbox_files: list[str]
    sandbox_grader_files: list[str]
    env_snapshot_files: list[str]
    env_snapshot_commands: list[str]
    env_snapshot_timeout: int
    local_grader_files: list[str]
    attachments: list[str] = field(default_factory=list)

    @property
    def needs_live_web(self) -> bool:
        return any(s.get("name") in LIVE_WEB_SERVICES for s in self.services)


def resolve_checkout(root: str | os.PathLike | None) -> Path:
    """The checkout directory (config key, else ``$CLAW_EVAL_ROOT``), checked for tasks/ and src/."""
    root = root or os.environ.get(ENV_ROOT)
    if not root:
        raise BenchmarkUnavailable(f"no Claw-Eval checkout configured (${ENV_ROOT} is unset)", CLONE_HINT)
    path = Path(root).expanduser()
    if not path.is_dir():
        raise BenchmarkUnavailable(f"Claw-Eval checkout {path} does not exist", CLONE_HINT)
    for needed in ("tasks", "mock_services", "src/claw_eval"):
        if not (path / needed).exists():
            raise BenchmarkUnavailable(f"{path} has no {needed}/ (is it a Claw-Eval checkout?)", CLONE_HINT)
    return path


def split_of(tags: list[str]) -> str:
    """The benchmark's split of a task from its tags."""
    if "user_agent" in tags:
        return "multi_turn"
    if "multimodal" in tags:
        return "multimodal"
    return "general"


def _list(data: dict[str, Any], key: str, where: str) -> list:
    value = data.get(key) or []
    if not isinstance(value, list):
        raise TaskFormatError(f"{where}: field {key!r} must be a list, got {type(value).__name__}")
    return value


def parse_task_yaml(path: Path, checkout: Path) -> ClawTask:
    """Read one ``task.yaml`` into a :class:`ClawTask`."""
    where = str(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise TaskFormatError(f"{where}:{(mark.line + 1) if mark else 1}: invalid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise TaskFormatError(f"{where}: expected a mapping at the top level")
    for key in ("task_id", "prompt"):
        if key not in data:
            raise TaskFormatError(f"{where}: required field {key!r} is missing")
    prompt = data["prompt"]
    if not isinstance(prompt, dict) or "text" not in prompt:
        raise TaskFormatError(f"{where}: field 'prompt' must be a mapping with 'text'")
    tools = []
    for i, tool in enumerate(_list(data, "tools", where)):
        if not isinstance(tool, dict) or "name" not in tool:
            raise TaskFormatError(f"{where}: tools[{i}] needs a 'name'")
        tools.append({"name": str(tool["name"]), "description": str(tool.get("description", "")),
                      "parameters": tool.get("input_schema") or {"type": "object", "properties": {}}})
    endpoints = {}
    for i, ep in enumerate(_list(data, "tool_endpoints", where)):
        if not isinstance(ep, dict) or "tool_name" not in ep or "url" not in ep:
            raise TaskFormatError(f"{where}: tool_endpoints[{i}] needs 'tool_name' and 'url'")
        endpoints[str(ep["tool_name"])] = {"url": str(ep["url"]), "method": str(ep.get("method", "POST")).upper()}
    from evaluators.claw_eval.services import ServiceSpec

    services = []
    for i, svc in enumerate(_list(data, "services", where)):
        ServiceSpec.from_dict(svc, f"{where}: services[{i}]")  # validates
        services.append(dict(svc))
    env = data.get("environment") or {}
    tags = [str(t) for t in _list(data, "tags", where)]
    return ClawTask(
        id=check_task_id(str(data["task_id"]), f"{where}: field 'task_id'"), name=str(data.get("task_name", "")), category=str(data.get("category", "")),
        split=split_of(tags), tags=tags, dir=str(path.parent), checkout=str(checkout), prompt=str(prompt["text"]),
        language=str(prompt.get("language", "")), tools=tools, endpoints=endpoints, services=services,
        max_turns=int(env.get("max_turns", 20)), timeout_seconds=int(env.get("timeout_seconds", 300)),
        user_agent=dict(data.get("user_agent") or {}), sandbox_files=[str(p) for p in _list(data, "sandbox_files", where)]
        or [str(p) for p in (env.get("fixtures") or [])],
        sandbox_grader_files=[str(p) for p in _list(data, "sandbox_grader_files", where)],
        env_snapshot_files=[str(p) for p in _list(data, "env_snapshot_files", where)],
        env_snapshot_commands=[str(p) for p in _list(data, "env_snapshot_commands", where)],
        env_snapshot_timeout=int(env.get("env_snapshot_timeout", 10)),
        local_grader_files=[str(p) for p in _list(data, "local_grader_files", where)],
        attachments=[str(p) for p in (prompt.get("attachments") or [])],
    )


def fixture_source(task: ClawTask, rel: str) -> Path:
    """Where a listed file lives: under the task's folder, else (a path into another task's
    folder, ``tasks/T021.../fixtures/...``) under the checkout root, as the official runner
    (``runner/sandbox_runner.py``) resolves it. Inside the sandbox it stays ``/workspace/<rel>``."""
    own = Path(task.dir, rel)
    if own.exists():
        return own
    shared = Path(task.checkout, rel)
    return shared if shared.exists() else own


NEEDED_PROGRAMS = {"ffmpeg": r"\bffmpeg\b", "ffprobe": r"\bffprobe\b", "chromium": r"\bchromium\b",
                   "playwright": r"\bplaywright\b", "pdftotext": r"\bpdftotext\b", "pdftoppm": r"\bpdftoppm\b"}
"""Programs the official agent image (``Dockerfile.agent``: ffmpeg, poppler-utils, Playwright with
its Chromium) has, by the pattern that shows a task uses one: in its task.yaml, its grader.py, or
a script its snapshot commands run (e.g. the multimodal web-page tasks' ``take_recording.py``,
whose Playwright screenshots are what the grader judges). ``playwright`` is the Python package
(for the sandbox's ``python3``) with a browser it can launch (:mod:`evaluators.claw_eval.browser`)."""

SCRIPT_MAX_BYTES = 1 << 20
"""Scripts larger than this are not read for program names."""


def snapshot_scripts(task: ClawTask) -> list[Path]:
    """The task's files its snapshot commands run (``python /workspace/fixtures/x.py ...``: a
    ``/workspace/REL`` or relative argument naming one of the task's files), as the checkout has them."""
    out: list[Path] = []
    for cmd in task.env_snapshot_commands:
        try:
            words = shlex.split(cmd)
        except ValueError:
            words = cmd.split()
        for word in words:
            rel = word[len("/workspace/"):] if word.startswith("/workspace/") else word
            if not rel or rel.startswith(("/", "-")) or ".." in Path(rel).parts:
                continue
            source = fixture_source(task, rel)
            if source.is_file() and source not in out:
                out.append(source)
    return out


def used_programs(task: ClawTask) -> list[str]:
    """The programs of :data:`NEEDED_PROGRAMS` this task uses (task.yaml, grader.py, the scripts of its snapshot commands)."""
    sources = [Path(task.dir, name) for name in ("task.yaml", "grader.py")] + snapshot_scripts(task)
    text = ""
    for path in sources:
        if path.is_file() and path.stat().st_size <= SCRIPT_MAX_BYTES:
            text += path.read_text(encoding="utf-8", errors="replace") + "\n"
    return [prog for prog, pattern in NEEDED_PROGRAMS.items() if re.search(pattern, text)]


def missing_programs(task: ClawTask, which=shutil.which, has_playwright=None) -> list[str]:
    """The programs this task uses (task.yaml, grader.py, the scripts of its snapshot commands)
    that this machine lacks; ``has_playwright()`` says whether the sandbox's Python can drive a browser."""
    found = used_programs(task)
    has_playwright = (lambda: playwright_setup().ok) if has_playwright is None else has_playwright
    return [prog for prog in found
            if (not has_playwright() if prog == "playwright" else
                which(prog) is None and not (prog == "chromium" and has_playwright()))]


MEDIA_KINDS = ("image", "audio", "video", "text")


def file_kind(rel: str) -> str:
    """What a fixture file is, by its name: image, audio, video, text (``.txt``, ``.md``, JSON,
    CSV ...) or another file (``mimetypes``; what tells a missing blog post from a missing video)."""
    guessed, _ = mimetypes.guess_type(rel)
    major = (guessed or "").split("/", 1)[0]
    if major in MEDIA_KINDS:
        return major
    if Path(rel).suffix.lower() in (".md", ".json", ".jsonl", ".yaml", ".yml", ".csv", ".log") or guessed in (
            "application/json", "application/xml"):
        return "text"
    return "other"


def skip_reason(task: ClawTask, env: dict[str, str] | None = None) -> str | None:
    """Why this task cannot run here, or None."""
    env = os.environ if env is None else env
    if task.needs_live_web and not env.get(LIVE_WEB_KEY):
        return (f"needs live web access (service web_real): set {LIVE_WEB_KEY} to a scraping API key "
                "(the benchmark's README: https://www.novada.com)")
    if not Path(task.dir, "grader.py").is_file():
        return f"no grader.py in {task.dir}"
    missing = [rel for rel in task.sandbox_files + task.sandbox_grader_files + task.local_grader_files
               if not fixture_source(task, rel).exists()]
    for svc in task.services:  # fixture files the mock services load (paths relative to the checkout)
        for value in (svc.get("env") or {}).values():
            value = str(value)
            if value.startswith("tasks/") and not Path(task.checkout, value).exists():
                missing.append(value)
    if missing:
        kinds = Counter(file_kind(rel) for rel in missing)
        return (f"{len(missing)} fixture file(s) not in the checkout ({', '.join(f'{n} {k} file' + 's' * (n > 1) for k, n in kinds.items())}), "
                f"e.g. {missing[0]}: the GitHub checkout lacks them; the complete fixtures are in the Hugging Face "
                "dataset claw-eval/Claw-Eval (data/fixtures.tar.gz): unpack them into tasks/")
    if task.attachments:  # the official runner sends them as blocks of the first message (media_loader.py)
        kinds = sorted({file_kind(rel).replace('other', 'document') for rel in task.attachments})
        return (f"prompt attachments ({', '.join(task.attachments[:3])}) must reach the model as {'/'.join(kinds)} "
                "blocks of the first message, as the official runner sends them, and the agent loop sends the "
                "prompt text only")
    programs = missing_programs(task)
    if "playwright" in programs:  # the page is graded from the screenshots its snapshot script takes
        return (f"needs Playwright with a browser (its screenshots are what the grader judges; without them a good "
                f"page scores at most 0.2): {playwright_setup().missing}")
    if programs:
        return (f"needs {', '.join(programs)}, not installed here (the official agent image Dockerfile.agent has "
                "it): install it or run in that image")
    return None


def load_tasks(checkout: Path) -> tuple[list[ClawTask], list[tuple[str, str]]]:
    """Every task (sorted by directory name) and ``(dir, error)`` for unreadable ones."""
    tasks, broken = [], []
    seen: dict[str, Path] = {}
    for path in sorted((checkout / "tasks").glob("*/task.yaml")):
        try:
            task = parse_task_yaml(path, checkout)
        except (TaskFormatError, ValueError) as exc:
            broken.append((path.parent.name, str(exc)))
            continue
        if task.id in seen:  # one id, two tasks: the second's results would replace the first's
            raise TaskFormatError(f"{path}: task_id {task.id!r} is already the id of {seen[task.id]}")
        seen[task.id] = path
        tasks.append(task)
    return tasks, broken
