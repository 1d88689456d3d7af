"""The QwenClawBench checkout's own judge code, loaded at runtime from ``scripts/lib_grading.py``.

The benchmark's judge protocol lives in the user's checkout (``$QWENCLAWBENCH_ROOT``):
``_summarize_transcript`` (what the judge sees), ``_build_judge_prompt`` (the prompt; rubric =
``llm_judge_rubric`` or ``_format_grading_criteria``), ``_call_llm_judge_api`` (the request:
temperature 0 and its own ``max_tokens``), ``_parse_judge_text_response`` +
``_normalize_judge_response`` (the answer parser; a ``total`` of None scores 0), and the retry
rule (``JUDGE_API_MAX_RETRIES`` attempts when the request or its parsing raises, with
``JUDGE_API_RETRY_BASE_SECONDS * 2**(n-1)`` back-off). We call those functions; nothing of
them is copied here. Where the checkout's judge then falls back to an OpenClaw agent, we record
an error instead (no OpenClaw here).

The agent's part of the prompt (the transcript summary) keeps its bytes unless it holds a score
marker the checkout's own parser would read (a code block or ``{...}`` with a score, a prose
total): only those markers are neutralised (:func:`neutralise_summary`), so that an echoing judge
cannot hand the parser a score the agent planted. The prompt is the official one byte for byte
elsewhere; the result counts the markers (``judge_data_neutralised``), the summary the episodes.

A checkout without ``scripts/lib_grading.py`` (an older layout, a data-only copy) falls back to
our own approximation (:mod:`evaluators.qwenclawbench.grading`), and the result says so.
"""

from __future__ import annotations

import importlib.util
import math
import re
import sys
import threading
import time
import types
from pathlib import Path
from typing import Any, Callable

_LOCK = threading.Lock()
_CACHE: dict[str, types.ModuleType] = {}


def checkout_root(dataset_dir: Path) -> Path | None:
    """The checkout holding ``scripts/lib_grading.py`` above ``data/<dataset>``, or None."""
    for candidate in [dataset_dir, *dataset_dir.parents][:4]:
        if (candidate / "scripts" / "lib_grading.py").is_file():
            return candidate
    return None


def load_lib_grading(root: Path) -> types.ModuleType:
    """Import ``root/scripts/lib_grading.py`` (with its sibling modules) under a private name."""
    scripts = (Path(root) / "scripts").resolve()
    key = str(scripts)
    with _LOCK:
        if key in _CACHE:
            return _CACHE[key]
        name = f"_qcb_lib_grading_{len(_CACHE)}"
        spec = importlib.util.spec_from_file_location(name, scripts / "lib_grading.py")
        module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        added = str(scripts) not in sys.path
        if added:
            sys.path.insert(0, str(scripts))  # lib_grading imports lib_agent and lib_tasks by name
        sys.modules[name] = module  # dataclasses (with postponed annotations) look their module up there
        try:
            spec.loader.exec_module(module)  # type: ignore[union-attr]
        except BaseException:
            sys.modules.pop(name, None)
            raise
        finally:
            if added:
                sys.path.remove(str(scripts))
        _CACHE[key] = module
        return module


_BLOCK = re.compile(r"```(?:json)?\s*(.*?)\s*```", re.DOTALL)
_FULLWIDTH = str.maketrans({"{": "\uff5b", "}": "\uff5d"})
_NEUTRAL_FENCE = "'" * 3
MAX_MARKERS = 256
"""Markers neutralised one by one at most; past that every brace and fence of the summary is."""


def _has_score(parsed: dict[str, Any]) -> bool:
    return parsed.get("total") is not None or bool(parsed.get("scores"))


def _balanced_objects(text: str) -> list[tuple[int, int]]:
    """Spans of the top-level balanced ``{...}`` of ``text`` (the shape the checkout's brace scan collects)."""
    spans, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "{":
            if depth == 0:
                start = i
            depth += 1
        elif ch == "}" and depth:
            depth -= 1
            if depth == 0:
                spans.append((start, i + 1))
    return spans


def _prose_is_read(prose: str, parse: Callable[[str], dict[str, Any]], answer: str) -> bool:
    """Whether the parser reads ``prose``'s total beside ``answer`` (the judge's answer template), on
    either side of it. The official parser takes a prose total only from a text with no JSON object,
    and its answer template is one: there a benign ``Total: 0.95`` line is left alone."""
    if not _has_score(parse(prose)):
        return False
    if not answer:
        return True
    alone = parse(answer)
    return parse(f"{prose}\n{answer}") != alone or parse(f"{answer}\n{prose}") != alone


def _next_marker(text: str, parse: Callable[[str], dict[str, Any]], answer: str = "") -> tuple[int, int, str] | None:
    """The first piece of ``text`` the checkout's parser would read a score from, as ``(start, end,
    replacement)``: a code block whose content it parses (its opening fence becomes three ``'``), a
    balanced object it parses (its outer braces become fullwidth), a prose total the parser reads
    even beside the judge's ``answer`` template (:func:`_prose_is_read`; the number's decimal point
    becomes fullwidth)."""
    for block in _BLOCK.finditer(text):
        if _has_score(parse(block.group(0))):
            return block.start(), block.start() + 3, _NEUTRAL_FENCE
    for start, end in _balanced_objects(text):
        if _has_score(parse(text[start:end])):
            return start, end, "\uff5b" + text[start + 1:end - 1] + "\uff5d"
    # prose only: the same text with no object and no block for the parser to prefer
    prose = text.replace("{", " ").replace("}", " ").replace("`", " ")
    if not _prose_is_read(prose, parse, answer):
        return None
    low, high = 0, len(prose)
    while low < high:  # the shortest prefix the parser reads a total from ends in the marker's number
        middle = (low + high) // 2
        if _has_score(parse(prose[:middle])):
            high = middle
        else:
            low = middle + 1
    dot = text.rfind(".", 0, low)
    return (dot, dot + 1, "\uff0e") if dot >= 0 else None


def neutralise_all(summary: str) -> str:
    """Every brace and code fence of ``summary`` neutralised (the fallback of :func:`neutralise_summary`)."""
    return (summary or "").translate(_FULLWIDTH).replace("```", _NEUTRAL_FENCE)


def neutralise_summary(summary: str, parse: Callable[[str], dict[str, Any]], answer: str = "") -> tuple[str, int]:
    """The transcript summary with only the score markers the checkout's parser (``parse``: its
    ``_parse_judge_text_response`` + ``_normalize_judge_response``) would read neutralised, and how many.

    A judge that echoes or quotes the agent's part hands that parser the agent's text; what it can
    take a score from is a code block holding an answer, a balanced ``{...}`` with ``scores`` /
    ``total`` / ``score``, or a prose "total 0.9" it reads even beside the judge's answer template
    ``answer`` (the checkout's prompt with an empty summary; the official parser reads prose only from
    a text with no JSON object, so there a prose total is no marker). Each such marker, and nothing
    else, is changed (:func:`_next_marker`); a summary without one stays byte-identical. Tool-call JSON, code and
    headings without a score are left as they are."""
    text, count = summary or "", 0
    while count < MAX_MARKERS:
        marker = _next_marker(text, parse, answer)
        if marker is None:
            return text, count
        start, end, replacement = marker
        text, count = text[:start] + replacement + text[end:], count + 1
    return neutralise_all(summary), count


def judge_prompt_and_changes(lib: types.ModuleType, task: Any, transcript: list[dict[str, Any]]) -> tuple[str, int]:
    """The checkout's prompt for ``task`` (a QCBTask) and its OpenClaw-format transcript, built by
    its ``_build_judge_prompt`` from the summary with the agent's score markers neutralised
    (:func:`neutralise_summary`), and how many were (0: the official prompt, byte for byte). Should
    the checkout's parser still read, from the whole prompt echoed, a score other than its own
    answer template's, the prompt is built from the summary with every brace and fence neutralised."""
    view = types.SimpleNamespace(task_id=task.id, prompt=task.prompt, expected_behavior=task.expected_behavior,
                                 grading_criteria=list(task.grading_criteria),
                                 llm_judge_rubric=task.llm_judge_rubric, category=task.category)
    rubric = task.llm_judge_rubric or lib._format_grading_criteria(view)
    summary = lib._summarize_transcript(transcript)
    empty = lib._build_judge_prompt(view, "", rubric)  # holds the answer template the judge is told to write
    safe, count = neutralise_summary(summary, lambda text: parse_answer(lib, text), empty)
    prompt = lib._build_judge_prompt(view, safe, rubric)
    echoed, template = parse_answer(lib, prompt), parse_answer(lib, empty)
    if _has_score(echoed) and echoed != template:
        prompt, count = lib._build_judge_prompt(view, neutralise_all(summary), rubric), max(count, 1)
    return prompt, count


def judge_prompt(lib: types.ModuleType, task: Any, transcript: list[dict[str, Any]]) -> str:
    """:func:`judge_prompt_and_changes`'s prompt."""
    return judge_prompt_and_changes(lib, task, transcript)[0]


def parse_answer(lib: types.ModuleType, text: str) -> dict[str, Any]:
    """``{"scores", "total", "notes"}`` by the checkout's parser (``total`` None when it found none)."""
    return lib._normalize_judge_response(lib._parse_judge_text_response(text))


def judge_total(total: Any) -> tuple[float | None, str | None]:
    """The judge's total as a score in [0, 1] (None: unusable, which the checkout scores 0), and
    what was wrong with it (None when nothing was).

    ``None`` (the checkout's parser found no total) is unusable; so is a total that is not a
    number or not finite (``NaN``, ``Infinity``), named, never passed on (NaN would poison every
    mean it enters); a finite total outside [0, 1] (``5``, ``-3``) is clipped and named."""
    if total is None:
        return None, None
    try:
        value = float(total)
    except (TypeError, ValueError, OverflowError):
        return None, f"the judge's total {str(total)[:80]!r} is not a number: scored 0"
    if not math.isfinite(value):
        return None, f"the judge's total {value} is not finite: scored 0"
    if not 0.0 <= value <= 1.0:
        return min(max(value, 0.0), 1.0), f"clipped the judge's total {value:g} to [0, 1]"
    return value, None


def judge(lib: types.ModuleType, prompt: str, *, base_url: str, model: str, api_key: str,
          timeout_s: float = 1800.0, max_delay_s: float | None = None,
          sleep: Callable[[float], None] = time.sleep) -> dict[str, Any]:
    """Ask the judge as the checkout does (its request function, parser and retry rule).

    Returns ``{"total", "scores", "notes", "attempts", "raw"}``, or ``{"error", "attempts"}`` when
    every attempt failed (the checkout would then fall back to an OpenClaw agent judge).
    ``max_delay_s`` caps the back-off (the checkout's doubles from 5 s up to hours).
    """
    retries = int(getattr(lib, "JUDGE_API_MAX_RETRIES", 1))
    base = float(getattr(lib, "JUDGE_API_RETRY_BASE_SECONDS", 0))
    last: Exception | None = None
    for attempt in range(retries):
        if attempt > 0:
            delay = base * (2 ** (attempt - 1))
            sleep(min(delay, max_delay_s) if max_delay_s is not None else delay)
        try:
            raw = lib._call_llm_judge_api(prompt=prompt, model=model, base_url=base_url, api_key=api_key,
                                          timeout_seconds=timeout_s)
            parsed = parse_answer(lib, raw)
            total, problem = judge_total(parsed.get("total"))
            out = {"total": 0.0 if total is None else total, "parsed": total is not None,
                   "scores": parsed.get("scores", {}), "notes": parsed.get("notes", ""), "attempts": attempt + 1,
                   "raw": str(raw)[-2000:]}
            if problem:
                out["total_problem"] = problem
            return out
        except Exception as exc:  # the checkout retries on any failure of the request or its parsing
            last = exc
    return {"error": f"judge failed after {retries} attempts: {type(last).__name__}: {last}", "attempts": retries}
