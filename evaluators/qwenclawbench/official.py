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

The agent's part of the prompt (the transcript summary) has its answer markers neutralised
before the checkout builds the prompt (:func:`neutralise_summary`): an echoing judge would otherwise
hand the parser a score the agent planted. The wording is the checkout's; where the bytes
differ, the result says so (``judge_data_neutralised``) and the summary counts it.

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


_FENCE = re.compile(r"`{3,}")
_HEADING = re.compile(r"^([ \t]*)#", re.MULTILINE)
_BRACES = str.maketrans({"{": "\uff5b", "}": "\uff5d"})


def neutralise_summary(summary: str) -> str:
    """The transcript summary (the agent's tool calls and results) with its answer markers
    neutralised, so that the checkout's parser cannot read a score the agent planted in it.

    The parser takes the answer's first code block, then the last balanced ``{...}`` with
    ``scores``: an echoing judge would hand it the agent's code block, or, after an unbalanced ``{``
    of the agent's, no longer see the prompt's own answer template. So ``{`` ``}`` -> ``｛`` ``｝``
    (U+FF5B/U+FF5D), a run of 3+ backticks -> as many ``'``, and a line starting with ``#`` ->
    ``\\#`` (no section of the agent's own). The task, expected behaviour, rubric and the prompt's
    wording are the checkout's, unchanged."""
    summary = (summary or "").translate(_BRACES)
    summary = _FENCE.sub(lambda m: "'" * len(m.group(0)), summary)
    return _HEADING.sub(r"\1\\#", summary)


def judge_prompt_and_changes(lib: types.ModuleType, task: Any, transcript: list[dict[str, Any]]) -> tuple[str, bool]:
    """The checkout's prompt for ``task`` (a QCBTask) and its OpenClaw-format transcript, built by
    its ``_build_judge_prompt`` from the summary with the agent's markers neutralised
    (:func:`neutralise_summary`), and whether that changed the bytes (then not the official prompt)."""
    view = types.SimpleNamespace(task_id=task.id, prompt=task.prompt, expected_behavior=task.expected_behavior,
                                 grading_criteria=list(task.grading_criteria),
                                 llm_judge_rubric=task.llm_judge_rubric, category=task.category)
    rubric = task.llm_judge_rubric or lib._format_grading_criteria(view)
    summary = lib._summarize_transcript(transcript)
    safe = neutralise_summary(summary)
    return lib._build_judge_prompt(view, safe, rubric), safe != summary


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
