"""Per-episode and per-run statistics of next-state predictions, and their relation to success.

Definitions (each a field or property below):

* ``prediction_rate`` = (tool-calling steps with at least one prediction) / (tool-calling steps):
  a prediction is about a call, so steps without calls are not in the denominator.
* ``accuracy`` = correct / scored, over aligned predictions with a verdict (``correct`` not None).
  Per run, ``accuracy`` is the micro average over all predictions; ``episode_accuracy_mean``
  is the macro average over episodes that have at least one scored prediction.
* ``self_corrections_per_step`` = markers such as "wait", "actually" (``SELF_CORRECTION``) in
  the reasoning and visible text, divided by the number of steps.
* Relation to task success (:func:`success_relation`): Pearson r between per-episode accuracy
  and the benchmark score, and the mean accuracy of successful vs failed episodes, where
  success is ``EpisodeResult.passed`` or, when a benchmark defines no pass, ``score >= 0.5``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from unified.predict.extract import Prediction, episode_key, episode_predictions, self_corrections
from unified.trace.judge import RubricJudge, episodes_by_key
from unified.trace.load import SavedRun, load_run
from unified.predict.score import score_prediction
from unified.types import Episode, EpisodeResult


def _ratio(num: float, den: float) -> float | None:
    return num / den if den else None


@dataclass
class EpisodeTrace:
    """The predictions of one Episode and its counts."""

    key: str
    benchmark: str
    task_id: str
    trial: int
    prompting: str
    """``Episode.metadata["prompting"]`` (``act`` when absent)."""
    steps: int
    call_steps: int
    """Steps with at least one tool call."""
    steps_with_prediction: int
    """Tool-calling steps with at least one prediction (any kind)."""
    steps_with_explicit: int
    """Tool-calling steps with at least one explicit block."""
    self_corrections: int
    predictions: list[Prediction] = field(default_factory=list)
    call_step_indices: list[int] = field(default_factory=list)
    """``Step.index`` of every tool-calling step."""
    score: float | None = None
    """The benchmark's score of the episode (None without a result)."""
    passed: bool | None = None
    """Success (``passed``, or ``score >= 0.5`` when the benchmark has no pass/fail)."""

    def _count(self, kind: str | None = None, **where: Any) -> int:
        return sum(1 for p in self.predictions if (kind is None or p.kind == kind)
                   and all(getattr(p, k) == v for k, v in where.items()))

    @property
    def n_predictions(self) -> int:
        return len(self.predictions)

    @property
    def n_explicit(self) -> int:
        return self._count("explicit")

    @property
    def n_implicit(self) -> int:
        return self._count("implicit")

    @property
    def n_scored(self) -> int:
        return sum(1 for p in self.predictions if p.correct is not None)

    @property
    def n_correct(self) -> int:
        return self._count(correct=True)

    @property
    def accuracy(self) -> float | None:
        return _ratio(self.n_correct, self.n_scored)

    @property
    def prediction_rate(self) -> float | None:
        return _ratio(self.steps_with_prediction, self.call_steps)

    @property
    def self_corrections_per_step(self) -> float | None:
        return _ratio(self.self_corrections, self.steps)

    def row(self) -> dict[str, Any]:
        """A flat dict (one DataFrame row)."""
        return {"episode": self.key, "benchmark": self.benchmark, "task_id": self.task_id, "trial": self.trial,
                "prompting": self.prompting, "steps": self.steps, "call_steps": self.call_steps,
                "steps_with_prediction": self.steps_with_prediction, "steps_with_explicit": self.steps_with_explicit,
                "predictions": self.n_predictions, "explicit": self.n_explicit, "implicit": self.n_implicit,
                "scored": self.n_scored, "correct": self.n_correct, "accuracy": self.accuracy,
                "prediction_rate": self.prediction_rate, "self_corrections": self.self_corrections,
                "self_corrections_per_step": self.self_corrections_per_step, "score": self.score,
                "passed": self.passed}


def _success(result: EpisodeResult) -> bool:
    return bool(result.passed) if result.passed is not None else result.score >= 0.5


def trace_episode(episode: Episode, result: EpisodeResult | None = None, *, threshold: float = 0.5) -> EpisodeTrace:
    """Extract, align and rule-score every prediction of ``episode``."""
    preds = [score_prediction(p, threshold=threshold) for p in episode_predictions(episode)]
    by_step: dict[int, list[Prediction]] = {}
    for p in preds:
        by_step.setdefault(p.step, []).append(p)
    call_steps = [s for s in episode.steps if s.tool_calls]
    scored = result is not None and result.skipped is None
    return EpisodeTrace(
        key=episode_key(episode), benchmark=episode.benchmark, task_id=episode.task_id, trial=episode.trial,
        prompting=str(episode.metadata.get("prompting") or "act"), steps=len(episode.steps),
        call_steps=len(call_steps),
        steps_with_prediction=sum(1 for s in call_steps if by_step.get(s.index)),
        steps_with_explicit=sum(1 for s in call_steps if any(p.kind == "explicit" for p in by_step.get(s.index, []))),
        self_corrections=sum(self_corrections(s) for s in episode.steps), predictions=preds,
        call_step_indices=[s.index for s in call_steps],
        score=result.score if scored else None, passed=_success(result) if scored else None)


def pearson(xs: list[float], ys: list[float]) -> float | None:
    """Pearson correlation, None for fewer than 2 points or a constant series."""
    n = len(xs)
    if n < 2:
        return None
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    syy = sum((y - my) ** 2 for y in ys)
    if sxx == 0 or syy == 0:
        return None
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / math.sqrt(sxx * syy)


def _mean(values: Iterable[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return sum(vals) / len(vals) if vals else None


@dataclass
class RunTrace:
    """The traced episodes of one run, with run-level statistics."""

    path: str | None
    episodes: list[EpisodeTrace]
    results: list[EpisodeResult] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    """The run's summary JSON (benchmark aggregates), when it has one."""
    config: dict[str, Any] = field(default_factory=dict)
    """The run's resolved config (``run.json``: model, prompting, sampling), when it has one."""

    @property
    def predictions(self) -> list[Prediction]:
        return [p for e in self.episodes for p in e.predictions]

    def stats(self, kind: str | None = None) -> dict[str, Any]:
        """Run-level numbers; ``kind`` restricts the prediction counts to ``explicit`` or ``implicit``."""
        preds = [p for p in self.predictions if kind is None or p.kind == kind]
        scored = [p for p in preds if p.correct is not None]
        call_steps = sum(e.call_steps for e in self.episodes)
        with_pred = sum(len({p.step for p in e.predictions if (kind is None or p.kind == kind)
                             and p.call_index is not None}) for e in self.episodes)
        steps = sum(e.steps for e in self.episodes)
        return {
            "episodes": len(self.episodes), "steps": steps, "call_steps": call_steps,
            "steps_with_prediction": with_pred, "prediction_rate": _ratio(with_pred, call_steps),
            "predictions": len(preds), "explicit": sum(p.kind == "explicit" for p in preds),
            "implicit": sum(p.kind == "implicit" for p in preds),
            "aligned": sum(p.call_index is not None for p in preds), "scored": len(scored),
            "correct": sum(bool(p.correct) for p in scored), "accuracy": _ratio(sum(bool(p.correct) for p in scored),
                                                                               len(scored)),
            "mean_score": _mean(p.score for p in scored),
            "episode_accuracy_mean": _mean(e.accuracy for e in self.episodes),
            "self_corrections": sum(e.self_corrections for e in self.episodes),
            "self_corrections_per_step": _ratio(sum(e.self_corrections for e in self.episodes), steps),
            "task_score_mean": _mean(e.score for e in self.episodes),
        }

    def success_relation(self) -> dict[str, Any]:
        """How per-episode prediction accuracy relates to the benchmark's score and success."""
        pairs = [(e.accuracy, e.score, e.passed) for e in self.episodes if e.accuracy is not None and e.score is not None]
        acc_ok = [a for a, _, ok in pairs if ok]
        acc_fail = [a for a, _, ok in pairs if not ok]
        return {
            "episodes": len(pairs),
            "pearson_accuracy_score": pearson([a for a, _, _ in pairs], [s for _, s, _ in pairs]),
            "accuracy_when_success": _mean(acc_ok), "accuracy_when_failure": _mean(acc_fail),
            "n_success": len(acc_ok), "n_failure": len(acc_fail),
            "score_when_accuracy_ge_half": _mean(s for a, s, _ in pairs if a >= 0.5),
            "score_when_accuracy_lt_half": _mean(s for a, s, _ in pairs if a < 0.5),
        }

    def episode_rows(self) -> list[dict[str, Any]]:
        return [e.row() for e in self.episodes]

    def prediction_rows(self) -> list[dict[str, Any]]:
        return [p.to_dict() for p in self.predictions]

    def benchmark_scores(self) -> dict[str, float]:
        """Headline score per benchmark: the summary's aggregate where it has one, else mean score in percent."""
        out: dict[str, float] = {}
        for name, entry in _summary_benchmarks(self.summary).items():
            if not isinstance(entry, dict) or entry.get("status", "ok") != "ok":
                continue
            score = entry.get("score", (entry.get("aggregate") or {}).get("score"))
            if isinstance(score, (int, float)) and not isinstance(score, bool):
                out[name] = float(score)
        by_bench: dict[str, list[float]] = {}
        for r in self.results:
            if r.skipped is None:
                by_bench.setdefault(r.benchmark, []).append(r.score)
        for name, scores in by_bench.items():
            out.setdefault(name, 100.0 * sum(scores) / len(scores))
        return out


def _summary_benchmarks(summary: dict[str, Any]) -> dict[str, Any]:
    """The per-benchmark part of a summary JSON (``{"benchmarks": {...}}`` or flat)."""
    inner = summary.get("benchmarks")
    if isinstance(inner, dict):
        return inner
    return {k: v for k, v in summary.items() if isinstance(v, dict) and ("score" in v or "aggregate" in v)}


def trace_run(run: str | Path | SavedRun | Iterable[Episode], results: Iterable[EpisodeResult] = (), *,
              threshold: float = 0.5, judge: Callable[[list[Prediction], dict[str, Episode]], None] | str | None = None
              ) -> RunTrace:
    """Trace a run: a run directory, a :class:`SavedRun`, or Episodes (+ their results).

    ``judge``: an endpoint spec ``openai:URL#MODEL`` for the rubric judge, or a callable
    ``(predictions, episodes_by_key)`` that re-scores aligned predictions in place (see
    :class:`unified.trace.judge.RubricJudge`); without one, the rule scores stand.
    """
    if isinstance(run, (str, Path)):
        run = load_run(run)
    if isinstance(run, SavedRun):
        path, episodes, results, summary, config = run.path, run.episodes, run.results, run.summary, run.config
    else:
        path, episodes, summary, config = None, list(run), {}, {}
    results = list(results)
    by_key = {(r.benchmark, r.task_id, r.trial): r for r in results}
    traces = [trace_episode(e, by_key.get((e.benchmark, e.task_id, e.trial)), threshold=threshold) for e in episodes]
    if judge:
        if isinstance(judge, str):
            judge = RubricJudge(judge)
        judge([p for t in traces for p in t.predictions if p.observation is not None], episodes_by_key(episodes))
    return RunTrace(path=str(path) if path else None, episodes=traces, results=results, summary=summary,
                    config=config)
