"""QwenClawBench scoring: automated checks in a sandbox, the rubric judge, the penalised mix.

Per run (one rollout of one task), with ``s_auto`` the mean of the values returned by the
task's ``grade(transcript, workspace_path)`` and ``s_llm`` the judge's total (both in [0, 1])
and ``w_auto``, ``w_llm`` the task's ``grading_weights`` (default 0.5/0.5)::

    hybrid:     score = (w_auto * s_auto + w_llm * s_llm * 1[s_auto >= 0.75]) / (w_auto + w_llm)
    automated:  score = s_auto
    llm_judge:  score = s_llm

(``score_simple`` drops the indicator.) The benchmark's aggregate over T tasks with R runs
each (R = 3 in the study) is the mean over tasks of the per-task mean over runs; we report it
in percent, with pass@k / pass^k over *perfect* runs (score = 1) and the per-category means.

The automated checks are benchmark code that reads model output: they run in a separate
process in a sandbox of their own (:func:`unified.execution.run_grader`: no network, read-only root, a
*copy* of the final workspace as the only writable place), never in our process. Nothing the agent wrote may
run inside the grader: the interpreter is started isolated (``python3 -I``: no user site
directory, no ``PYTHON*`` variables, no script or working directory on ``sys.path``), its
``$HOME`` is the grader's private ``/tmp`` rather than the workspace, and the copy leaves out
FIFOs, sockets and device files (a grader that opened one would hang) and has a size budget
(:func:`unified.execution.copying.copy_workspace`).
"""

from __future__ import annotations

import json
import math
import re
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

from unified.benchmarks.aggregate import pass_at_k, pass_pow_k
from unified.execution import CopyRefused, GraderSpec, run_grader
from unified.chatformat.scan import tag_blocks
from unified.text import DATA_RULE, fence_data, strip_fenced_data

PENALTY_THRESHOLD = 0.75
"""Below this automated score the judge's share is zeroed (the benchmark's penalised scoring)."""

_RESULT_MARK = "@@UNIFIED_GRADE_RESULT@@"

_GRADE_RUNNER = r'''
import json, sys
sys.setrecursionlimit(10000)
with open("/grader/transcript.json", encoding="utf-8") as f:
    transcript = json.load(f)
with open("/grader/grade.py", encoding="utf-8") as f:
    code = f.read()
ns = {"__name__": "task_grader"}
try:
    exec(compile(code, "automated_checks.py", "exec"), ns)  # safe: the task file's grade(), in the bwrap sandbox process
    fn = ns.get("grade")
    if not callable(fn):
        res = {"error": "the Automated Checks block defines no grade() function"}
    else:
        scores = fn(transcript, "/workspace")
        res = {"scores": scores if isinstance(scores, dict) else {}, "type": type(scores).__name__}
except BaseException as exc:
    import traceback
    res = {"error": "%s: %s" % (type(exc).__name__, exc), "traceback": traceback.format_exc()[-3000:]}
def clean(v):
    try:
        json.dumps(v); return v
    except (TypeError, ValueError):
        return repr(v)
if "scores" in res:
    res["scores"] = {str(k): clean(v) for k, v in res["scores"].items()}
sys.stdout.write("\n''' + _RESULT_MARK + r'''" + json.dumps(res) + "\n")
'''


def average_scores(scores: dict[str, Any]) -> float:
    """The benchmark's automated score: mean of the numeric values (bools count), 0 if none."""
    values = [float(v) for v in scores.values() if isinstance(v, (int, float))]
    return sum(values) / len(values) if values else 0.0


def run_automated_checks(code: str, transcript: list[dict[str, Any]], workspace: Path, *, timeout_s: float = 120,
                         memory_mb: int = 2048, copy_mb: float = 512) -> dict[str, Any]:
    """Run ``grade(transcript, workspace_path)`` in a fresh sandbox on a copy of ``workspace``.

    Returns ``{"score", "breakdown", "error"?, "duration_s"}``; a crash, a timeout or a missing
    ``grade`` gives score 0 with the reason (as the benchmark does). The copy is made on the host:
    its files may add up to ``copy_mb`` MiB at apparent size (sparse files count in full, as the
    copy writes them out); a workspace past that is not graded (score 0, the error says why).
    """
    spec = GraderSpec(argv=["/usr/bin/python3", "-I", "/grader/run.py"], workspace=workspace, copy_mb=copy_mb,
                      files={"transcript.json": json.dumps(transcript, ensure_ascii=False), "grade.py": code,
                             "run.py": _GRADE_RUNNER}, timeout_s=timeout_s, memory_mb=memory_mb)
    try:
        result = run_grader(spec)
    except CopyRefused as exc:
        return {"score": 0.0, "breakdown": {}, "duration_s": 0.0,
                "error": f"the workspace was not copied for the grader: {exc}"}
    meta = {"duration_s": round(result.duration_s, 3), "sandbox": result.backend}
    if result.timed_out:
        return {"score": 0.0, "breakdown": {}, "error": f"automated checks timed out after {timeout_s:.0f}s", **meta}
    payload = result.stdout.rsplit(_RESULT_MARK, 1)
    if len(payload) != 2:
        return {"score": 0.0, "breakdown": {},
                "error": f"automated checks died (exit {result.exit_code}): {(result.stderr or result.stdout)[-1500:]}",
                **meta}
    answer = json.loads(payload[1])
    if "error" in answer:
        return {"score": 0.0, "breakdown": {}, "error": answer["error"], "traceback": answer.get("traceback", ""), **meta}
    scores = answer["scores"]
    breakdown = {k: float(v) for k, v in scores.items() if isinstance(v, (int, float))}
    return {"score": average_scores(scores), "breakdown": breakdown, **meta}


# --------------------------------------------------------------------------------------
# the rubric judge


def summarize_transcript(transcript: list[dict[str, Any]], result_chars: int = 200) -> str:
    """What the judge sees of a run: tool calls, the start of each tool result, user turns.

    Same selection as the benchmark's summary (assistant text is not included there either).
    """
    lines: list[str] = []
    for event in transcript:
        if event.get("type") != "message":
            continue
        msg = event.get("message", {})
        role = msg.get("role")
        content = msg.get("content", [])
        if role == "assistant":
            for item in content:
                if item.get("type") == "toolCall":
                    lines.append(f"Tool: {item.get('name')}({json.dumps(item.get('arguments', {}))})")
        elif role == "toolResult" and content:
            lines.append(f"Result: {str(content[0])[:result_chars]}")
        elif role == "user" and content:
            lines.append(f"User: {content[0]}")
    return "\n".join(lines)


def judge_prompt(task_prompt: str, expected_behavior: str, transcript_summary: str, rubric: str) -> str:
    """The judge's instructions: strict grading against the rubric, JSON answer only.

    The task, the expected behaviour and the agent's transcript are fenced as data
    (:func:`unified.text.fence_data`; a tool result can hold any text) and the answer format comes
    last, after every fence."""
    return (
        "You grade an AI agent's work. Answer with one JSON object and nothing else: no tool calls, "
        "no prose, no code fences.\n\n"
        "Grade strictly: 1.0 only for excellent work; an ordinary acceptable run is about 0.6-0.7. "
        "Take points off for wasted steps, needless verbosity and inefficient tool use.\n\n"
        f"## Task given to the agent\n{fence_data(task_prompt, 'task')}\n\n"
        f"## What a good run does\n{fence_data(expected_behavior, 'expected-behavior')}\n\n"
        f"## What the agent did (summary of its transcript)\n{fence_data(transcript_summary, 'transcript')}\n\n"
        f"## Rubric\n{rubric}\n\n"
        f"{DATA_RULE}\n"
        "Give every rubric criterion a score between 0.0 and 1.0, and an overall total.\n"
        'Answer exactly in this shape: {"scores": {"<criterion>": 0.0}, "total": 0.0, "notes": "<one line>"}'
    )


def _json_objects(text: str) -> list[tuple[int, str]]:
    """``(end, substring)`` of the top-level ``{...}`` substrings of ``text`` (balanced braces), in order."""
    found, depth, start = [], 0, -1
    for i, ch in enumerate(text):
        if ch == "{":
            if depth == 0:
                start = i
            depth += 1
        elif ch == "}" and depth > 0:
            depth -= 1
            if depth == 0:
                found.append((i + 1, text[start:i + 1]))
    return found


def parse_judge_answer(text: str) -> dict[str, Any] | None:
    """``{"scores", "total", "notes"}`` from the judge's text, or None if nothing usable is in it.

    Reads the JSON object that ends last in the answer (a fenced block or a balanced ``{...}``;
    the last, so that an answer echoing its prompt is read at the prompt's answer template, not
    at a score block the agent planted in its transcript), then a "total: 0.xx" in prose. ``total`` falls back to
    ``score`` and then to the mean of the criterion scores; a finite total is clipped to [0, 1]
    as the benchmark does. A total that is not finite (``Infinity``, ``NaN``, ``1e999``) or an
    answer that is not text is unusable (None: the benchmark's 0), never clipped to full marks;
    non-finite criterion scores are dropped. Fenced data the answer echoes is dropped first
    (:func:`unified.text.strip_fenced_data`).
    """
    if not isinstance(text, str):
        return None
    text = strip_fenced_data(text).strip()  # a judge that copies the fenced transcript copies no score
    candidates = [(end, body) for end, body in _json_objects(text)]
    candidates += [(b.end, text[b.body_start:b.body_end]) for b in tag_blocks(text, "```", "```")]
    parsed = None
    for _, candidate in sorted(candidates, key=lambda c: -c[0]):
        candidate = candidate.strip()
        if candidate.startswith("json"):
            candidate = candidate[4:]
        try:
            value = json.loads(candidate)
        except (ValueError, RecursionError):  # bad JSON, a 5000-digit number, nesting past the stack
            continue
        if isinstance(value, dict):
            parsed = value
            break
    if parsed is None:
        prose = re.search(r"(?:total|overall|final)\s*(?:score)?[:\s]*(0\.\d+|1\.0+|1|0)\b", text, re.IGNORECASE)
        if not prose:
            return None
        parsed = {"scores": {}, "total": float(prose.group(1)), "notes": "total read from prose"}
    raw_scores = parsed.get("scores") or parsed.get("criteria_scores") or {}
    scores: dict[str, float] = {}
    if isinstance(raw_scores, dict):
        for key, value in raw_scores.items():
            if isinstance(value, dict):
                value = value.get("score")
            try:
                value = float(value)
            except (TypeError, ValueError, OverflowError):
                continue
            if math.isfinite(value):
                scores[str(key)] = value
    total = parsed.get("total", parsed.get("score"))
    try:
        total = float(total)
    except (TypeError, ValueError, OverflowError):
        total = sum(scores.values()) / len(scores) if scores else None
    if total is None or not math.isfinite(total):
        return None
    notes = parsed.get("notes", parsed.get("justification", parsed.get("reasoning", "")))
    return {"scores": scores, "total": min(max(total, 0.0), 1.0), "notes": str(notes)}


def combine(grading_type: str, weights: dict[str, float] | None, s_auto: float | None,
            s_llm: float | None) -> tuple[float, float]:
    """``(score, score_simple)`` of one run (see the module docstring)."""
    if grading_type == "automated":
        return float(s_auto or 0.0), float(s_auto or 0.0)
    if grading_type == "llm_judge":
        return float(s_llm or 0.0), float(s_llm or 0.0)
    weights = weights or {"automated": 0.5, "llm_judge": 0.5}
    w_auto, w_llm = float(weights.get("automated", 0.5)), float(weights.get("llm_judge", 0.5))
    if w_auto + w_llm <= 0:
        w_auto = w_llm = 0.5
    a, l = float(s_auto or 0.0), float(s_llm or 0.0)
    simple = (w_auto * a + w_llm * l) / (w_auto + w_llm)
    penalised = (w_auto * a + w_llm * (l if a >= PENALTY_THRESHOLD else 0.0)) / (w_auto + w_llm)
    return penalised, simple


# --------------------------------------------------------------------------------------
# aggregate


def aggregate_runs(runs: list[dict[str, Any]], runs_per_task: int | None = None) -> dict[str, Any]:
    """The benchmark's aggregate over ``runs`` (dicts with task_id, score, category, error).

    ``score`` is the mean over tasks of the mean over each task's runs, in percent.
    """
    by_task: dict[str, list[float]] = defaultdict(list)
    category: dict[str, str] = {}
    for run in runs:
        by_task[run["task_id"]].append(float(run["score"]))
        category[run["task_id"]] = run.get("category", "")
    if not by_task:
        return {"score": 0.0, "metric": "mean score over tasks of the mean over runs (%)", "n_tasks": 0, "n_runs": 0}
    k_max = runs_per_task or max(len(v) for v in by_task.values())
    means = {tid: statistics.mean(v) for tid, v in by_task.items()}
    out: dict[str, Any] = {
        "score": 100.0 * statistics.mean(means.values()),
        "metric": "mean score over tasks of the mean over runs (%)",
        "n_tasks": len(by_task), "n_runs": sum(len(v) for v in by_task.values()),
        "strict_accuracy": 100.0 * sum(1 for m in means.values() if m >= 1.0 - 1e-9) / len(means),
        "per_task_mean": {tid: round(m, 4) for tid, m in sorted(means.items())},
    }
    for k in range(1, k_max + 1):
        at, pw = [], []
        for values in by_task.values():
            n, c = len(values), sum(1 for s in values if s >= 1.0 - 1e-9)
            at.append(pass_at_k(n, c, k))
            pw.append(pass_pow_k(n, c, k))
        out[f"pass@{k}"] = 100.0 * sum(at) / len(at)
        out[f"pass^{k}"] = 100.0 * sum(pw) / len(pw)
    per_cat: dict[str, list[float]] = defaultdict(list)
    for tid, mean in means.items():
        per_cat[category.get(tid) or "?"].append(mean)
    out["per_category"] = {cat: round(100.0 * statistics.mean(v), 2) for cat, v in sorted(per_cat.items())}
    return out
