"""QwenClawBench adapter (github.com/SKYLENAGE-AI/QwenClawBench, data ``qwenclawbench-v1.1-100``).

Not on PyPI: point the adapter at a checkout with ``$QWENCLAWBENCH_ROOT`` or
``--set benchmarks.qwenclawbench.root=PATH``. Config keys (``--set benchmarks.qwenclawbench.KEY=V``):

``root``             the checkout (default ``$QWENCLAWBENCH_ROOT``)
``dataset``          ``data/<dataset>`` inside it (default ``qwenclawbench-v1.1-100``)
``judge``            the rubric judge: ``openai:URL#MODEL`` or a local checkpoint spec served on
                     loopback (default ``$QWENCLAWBENCH_JUDGE``, else ``embedded``; the study used
                     a strong hosted judge, so say which one ran when reporting)
``judge_max_tokens`` judge answer budget for our fallback judge only (default 512; with the
                     checkout's ``scripts/lib_grading.py`` its own request is used: 20480 tokens)
``judge_retry_max_delay_s``  cap on the checkout's doubling retry back-off (default 60 s)
``run_external``     run tasks whose ``external_dependency`` is not none (default true, as the
                     official harness does: its scripts never read that field, and some of these tasks
                     expect offline conditions; false skips them with the reason)
``judge_when_penalised``  also ask the judge when the automated part is < 0.75 (its share is
                     zeroed then, so by default we save the call; ``score_simple`` needs it)
``exec_timeout_s``, ``memory_mb``, ``grader_timeout_s``  sandbox limits
``grader_copy_mb``   budget of the workspace copy the automated checks get (default 512 MiB, apparent size)
``categories``       restrict to these categories (comma-separated); ``tasks(split=...)`` does the same

Scoring and aggregate: :mod:`evaluators.qwenclawbench.grading`. The judge is the checkout's own
(prompt builder, request, answer parser, retries: :mod:`evaluators.qwenclawbench.official`) when
the checkout has ``scripts/lib_grading.py``. Three rollouts per task: with fewer (``--runs``), or
where a task's rollouts errored or are missing, the metric says how many the number rests on and
``not_comparable_because`` says so (summary.md, ``--compare``).

Tools: ``read``, ``write``, ``edit``, ``exec``, ``web_fetch``, ``web_search`` (the web ones fail
offline); OpenClaw, which the benchmark runs, allows all its tools (``openclaw_config``:
``"allow": ["*"]``: also process, browser, image and the others): the aggregate says so.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from unified.benchmarks import bounded
from unified.benchmarks.contract import Adapter, Environment, PaperReference, RunContext, Task
from unified.benchmarks.helpers import config_list, judge_reason, limit_runnable
from unified.types import Episode, EpisodeResult

from evaluators.qwenclawbench import official
from unified.benchmarks import resolve_endpoint
from evaluators.qwenclawbench.environment import QwenClawBenchEnvironment, transcript_from_episode
from evaluators.qwenclawbench.grading import (
    PENALTY_THRESHOLD, aggregate_runs, combine, judge_prompt, parse_judge_answer, run_automated_checks,
    summarize_transcript,
)
from evaluators.qwenclawbench.tasks import DEFAULT_DATASET, QCBTask, load_tasks, resolve_dataset_dir

__all__ = ["QwenClawBenchAdapter"]

OFFICIAL_JUDGE_MAX_TOKENS = 20480
"""What the checkout's ``_call_llm_judge_api`` asks for (also the local judge server's cap)."""
NO_EXTERNAL = ("", "none", "false", "no")
OFFICIAL_JUDGES = ("claude-opus-4-5-20251101",)
"""The judge model of the checkout's ``scripts/lib_grading.py`` (``DEFAULT_JUDGE_MODEL``)."""


def external_skip(qt: QCBTask) -> str | None:
    """The skip reason of a task whose ``external_dependency`` is a live service, used only with
    ``run_external=false`` (the official harness runs every task, this field unread)."""
    value = str((qt.frontmatter or {}).get("external_dependency", "")).strip().lower()
    if value in NO_EXTERNAL:
        return None
    return (f"external_dependency: {value} (skipped by run_external=false; the official harness runs it, "
            "the offline sandbox cannot reach live services)")



@dataclass
class QwenClawBenchConfig:
    """Settings of the QwenClawBench adapter (``--set benchmarks.qwenclawbench.KEY=VALUE``; module docstring)."""

    root: str | None = None
    """The QwenClawBench checkout (None: ``$QWENCLAWBENCH_ROOT``)."""
    dataset: str = DEFAULT_DATASET
    """``data/<dataset>`` inside the checkout."""
    judge: str | None = None
    """The rubric judge: ``openai:URL#MODEL`` or a local checkpoint spec served on loopback
    (None: ``$QWENCLAWBENCH_JUDGE``, else ``embedded``)."""
    judge_max_tokens: int = bounded(512, ge=1)
    """Answer budget of our fallback judge only (the checkout's own judge asks for 20480)."""
    judge_when_penalised: bool = False
    """Also ask the judge when the automated part is < 0.75 (its share is zeroed then)."""
    exec_timeout_s: float = bounded(120.0, gt=0)
    """Wall time of one sandboxed tool call."""
    memory_mb: int = bounded(2048, ge=1)
    """Memory of the sandbox (tools and automated checks)."""
    grader_timeout_s: float = bounded(120.0, gt=0)
    """Wall time of the automated checks of one episode."""
    grader_copy_mb: float = bounded(512.0, gt=0)
    """Budget of the workspace copy the automated checks get (MiB, apparent size: sparse files count
    in full); a workspace past it is not graded (score 0, the reason recorded)."""
    categories: list[str] | str | None = None
    """Only these categories/subcategories/task ids (a list or comma-separated; None: all)."""
    judge_retry_max_delay_s: float = bounded(60.0, ge=0)
    """Cap on the checkout's doubling retry back-off."""
    run_external: bool = True
    """Run tasks whose ``external_dependency`` is a live service, as the official harness does
    (false: skip them with the reason)."""

    def __post_init__(self) -> None:
        self.categories = config_list(self.categories)


class QwenClawBenchAdapter(Adapter):
    """Tasks from the checkout, a sandboxed workspace per run, the benchmark's penalised score."""

    name = "qwenclawbench"
    suites = ("ood",)
    suite_position = 6
    world_model_domain = "mcp"
    paper_reference = PaperReference("QwenClawBench (3 rollouts)", 39.76, 49.43)
    runs_default = 3
    Config = QwenClawBenchConfig

    def __init__(self, **config: Any) -> None:
        super().__init__(**config)
        self.judge_spec = str(self.settings.judge or os.environ.get("QWENCLAWBENCH_JUDGE") or "embedded")
        """The judge that runs (the setting, else the environment's)."""
        self._official: Any = None

    # -- tasks -----------------------------------------------------------------------------

    def tasks(self, split: str | None = None, limit: int | None = None) -> list[Task]:
        dataset_dir = resolve_dataset_dir(self.settings.root, self.settings.dataset)
        parsed, broken = load_tasks(dataset_dir)
        asked = config_list(None if split in (None, "", "all") else split)
        wanted = [c.lower() for c in self.settings.categories + asked]
        out: list[Task] = []
        for qt in parsed:
            if wanted and not {qt.category.lower(), qt.subcategory.lower(), qt.id.lower()} & set(wanted):
                continue
            out.append(Task(id=qt.id, benchmark=self.name, split=qt.category, group=qt.subcategory,
                            payload=_payload(qt), skip_reason=None if self.settings.run_external else external_skip(qt)))
        if not wanted:
            out += [Task(id=stem, benchmark=self.name, split="unparseable", skip_reason=error) for stem, error in broken]
        return limit_runnable(out, limit)

    def open(self, task: Task, *, run: RunContext = RunContext()) -> Environment:
        return QwenClawBenchEnvironment(QCBTask(**task.payload), exec_timeout_s=self.settings.exec_timeout_s,
                                        memory_mb=self.settings.memory_mb)

    # -- scoring ---------------------------------------------------------------------------

    def score(self, task: Task, episode: Episode, env: Environment) -> EpisodeResult:
        qt = QCBTask(**task.payload)
        assert isinstance(env, QwenClawBenchEnvironment) and env.workspace is not None
        transcript = transcript_from_episode(episode)
        details: dict[str, Any] = {"grading_type": qt.grading_type, "category": qt.category,
                                   "weights": qt.grading_weights, "sandbox": "bwrap",
                                   "docker": "not used (local bubblewrap sandbox ran)"}
        errors: list[str] = []
        s_auto = s_llm = None
        if qt.grading_type in ("automated", "hybrid"):
            code = qt.grading_code
            if code:
                auto = run_automated_checks(code, transcript, env.workspace, timeout_s=self.settings.grader_timeout_s,
                                            memory_mb=self.settings.memory_mb, copy_mb=self.settings.grader_copy_mb)
            else:
                auto = {"score": 0.0, "breakdown": {}, "error": "no automated grading code in the task"}
            s_auto = auto["score"]
            details["automated"] = auto
            if auto.get("error"):  # timed out, crashed, no grade(): the score stays the benchmark's 0,
                details["grader_error"] = auto["error"]  # the summary counts the task as errored
        need_judge = qt.grading_type == "llm_judge" or (
            qt.grading_type == "hybrid" and (s_auto >= PENALTY_THRESHOLD or self.settings.judge_when_penalised))
        if need_judge:
            judged = self._judge(qt, transcript)
            details["llm_judge"] = judged
            s_llm = judged.get("total", 0.0)
            if judged.get("error"):
                errors.append(f"judge: {judged['error']}")
        elif qt.grading_type == "hybrid":
            details["llm_judge"] = {"skipped": f"automated score {s_auto:.3f} < {PENALTY_THRESHOLD}: the judge's "
                                               "share is zeroed by the benchmark's penalised scoring"}
        score, simple = combine(qt.grading_type, qt.grading_weights, s_auto, s_llm)
        if not math.isfinite(score):  # a grade() that returned NaN/Infinity: never into the means
            errors.append(f"the combined score {score} is not finite: scored 0")
            score, simple = 0.0, 0.0
        details.update({"automated_score": s_auto, "judge_score": s_llm, "score_simple": simple if (
            s_llm is not None or qt.grading_type == "automated") else None})
        return EpisodeResult(benchmark=self.name, task_id=task.id, trial=episode.trial, score=score,
                             passed=score >= 1.0 - 1e-9, details=details, error="; ".join(errors) or None)

    def _official_lib(self, qt: QCBTask):
        """The checkout's ``scripts/lib_grading.py`` (None when the checkout has none)."""
        if self._official is None:
            root = official.checkout_root(Path(qt.file).parent.parent)
            self._official = official.load_lib_grading(root) if root else False
        return self._official or None

    def _judge(self, qt: QCBTask, transcript: list[dict[str, Any]]) -> dict[str, Any]:
        lib = self._official_lib(qt)
        if lib is not None:
            try:
                endpoint = resolve_endpoint(self.judge_spec)
            except Exception as exc:
                return {"total": 0.0, "error": f"{type(exc).__name__}: {exc}", "judge": self.judge_spec,
                        "protocol": "checkout"}
            prompt, neutralised = official.judge_prompt_and_changes(lib, qt, transcript)
            answer = official.judge(lib, prompt, base_url=endpoint.config.base_url, model=endpoint.config.model,
                                    api_key=endpoint.config.api_key or "unused",
                                    max_delay_s=self.settings.judge_retry_max_delay_s)
            answer.update({"judge": endpoint.describe(), "protocol": "checkout", "judge_data_neutralised": neutralised})
            if "error" in answer:
                answer["total"] = 0.0
            return answer
        rubric = qt.llm_judge_rubric or "\n".join(f"- {c}" for c in qt.grading_criteria)
        prompt = judge_prompt(qt.prompt, qt.expected_behavior, summarize_transcript(transcript), rubric)
        try:
            endpoint = resolve_endpoint(self.judge_spec)
            answer = endpoint.client.chat([{"role": "user", "content": prompt}], temperature=0.0,
                                          max_tokens=self.settings.judge_max_tokens)
        except Exception as exc:
            return {"total": 0.0, "error": f"{type(exc).__name__}: {exc}", "judge": self.judge_spec}
        parsed = parse_judge_answer(answer.text)
        if parsed is None:  # the benchmark gives 0 when the judge's answer has no usable score
            return {"total": 0.0, "parsed": False, "raw": answer.text[-2000:], "judge": endpoint.describe(),
                    "protocol": "ours"}
        return {**parsed, "parsed": True, "judge": endpoint.describe(), "protocol": "ours"}

    def aggregate(self, results: list[EpisodeResult], *, run: RunContext = RunContext()) -> dict[str, Any]:
        """The benchmark's mean over tasks of the mean over rollouts, with the rollouts it rests on:
        fewer per task than the protocol's 3 (``--runs``), or tasks where fewer than the run asked
        for scored (an errored rollout counts 0, a missing one is not in its task's mean), are said
        in the metric and in ``not_comparable_because``."""
        scored = [r for r in results if r.skipped is None]
        runs = [{"task_id": r.task_id, "score": r.score, "category": r.details.get("category", "")} for r in scored]
        out = aggregate_runs(runs)
        rollouts = run.trials(self)
        ok: dict[str, int] = {r.task_id: 0 for r in scored}
        for r in scored:
            ok[r.task_id] += int(not (r.error or r.details.get("grader_error")))
        fewer = sorted(tid for tid, n in ok.items() if n < rollouts)
        out["metric"] = (f"mean score over tasks of the mean over {rollouts} rollout{'s' * (rollouts != 1)} (%)"
                         + ("" if rollouts >= self.runs_default else f", protocol {self.runs_default} rollouts"))
        out.update({"rollouts": rollouts, "rollouts_protocol": self.runs_default,
                    "tasks_with_fewer_scored_rollouts": len(fewer)})
        reasons = ["local bubblewrap sandbox instead of the official Docker image",
                   "agent tools: read/write/edit/exec/web_fetch/web_search (web fails offline), not OpenClaw's "
                   "full tool set"]
        if rollouts < self.runs_default:
            reasons.append(f"rollouts: {rollouts} per task, fewer than the protocol's {self.runs_default} "
                           f"(the paper's figures are means over {self.runs_default})")
        if fewer:
            reasons.append(f"{len(fewer)} of {len(ok)} tasks have fewer than {rollouts} rollouts that scored "
                           f"(errored ones count 0, missing ones are left out of the task's mean; e.g. {fewer[0]})")
        protocols = {r.details.get("llm_judge", {}).get("protocol") for r in scored} - {None}
        if "ours" in protocols:
            reasons.append("judge prompt/parser: ours (the checkout has no scripts/lib_grading.py)")
        neutralised = sum(1 for r in scored if r.details.get("llm_judge", {}).get("judge_data_neutralised"))
        markers = sum(int(r.details.get("llm_judge", {}).get("judge_data_neutralised") or 0) for r in scored)
        if neutralised:
            reasons.append(f"judge prompt: in {neutralised} episodes the agent's transcript summary held score markers "
                           f"the checkout's parser would read ({markers} in all: a code block or {{...}} with a score, "
                           "a prose total), neutralised before the checkout built its prompt; everything else is "
                           "the official prompt byte for byte")
        if judged := judge_reason(self.judge_spec, OFFICIAL_JUDGES):
            reasons.append(judged)
        grader_errors = sum(1 for r in scored if r.details.get("grader_error"))
        out.update({"comparable": False, "not_comparable_because": reasons, "n_grader_errors": grader_errors,
                    "n_skipped": sum(1 for r in results if r.skipped is not None),
                    "n_errors": sum(1 for r in scored if r.error),
                    "sandbox": "bwrap (local bubblewrap sandbox; Docker with the official image not used)",
                    "judge": self.judge_spec, "judge_data_neutralised": neutralised})
        return out


def _payload(qt: QCBTask) -> dict[str, Any]:
    from dataclasses import asdict

    return asdict(qt)
