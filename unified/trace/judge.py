"""Score predictions with the rubric judge of :mod:`unified.rewards` (when an endpoint is given).

Each aligned prediction becomes one world-model judgement: the episode's earlier calls and
observations are the history, the aligned call (its raw markup) is the action, the
observation that followed is the reference and the prediction's claim is what is graded. The
judge (Qwen-AgentWorld's rubric: format, factuality, consistency, realism, quality, each 1-5)
answers; then

    score   = (mean_c s_c - 1) / 4                     in [0, 1]
    correct = s_factuality >= correct_if_factuality   (default 4: deterministic content agrees)

An answer the judge gives that cannot be parsed leaves the rule verdict in place and records
``method = "judge:unparsed"`` with the reason in ``detail``. Answers are cached on disk by
(judge, prompt), so re-tracing a run costs nothing.
"""

from __future__ import annotations

import json
from typing import Any

from unified.benchmarks.discovery import world_model_domain
from unified.predict.extract import Prediction, episode_key
from unified.rewards import JudgeSettings, build_judge, judge_messages, parse_judge_answer
from unified.types import Episode, ToolCall


def domain_of(benchmark: str) -> str:
    """The world-model domain whose judge guide fits a benchmark: the one its adapter declares
    (``Adapter.world_model_domain``), ``mcp`` when it declares none or is not installed here."""
    return world_model_domain(benchmark) or "mcp"


def _action(call: ToolCall) -> str:
    return call.raw or f"{call.name}({json.dumps(call.arguments, sort_keys=True, default=str)})"


class RubricJudge:
    """A ``judge`` for :func:`unified.trace.trace_run`: re-scores aligned predictions in place.

    ``endpoint`` is ``openai:URL#MODEL`` (any OpenAI-compatible server); ``local_model`` a
    ``load_checkpoint`` spec instead. Other keyword options go to
    :class:`unified.rewards.JudgeSettings` (``cache_dir``, ``judge_max_tokens``, ...).
    """

    def __init__(self, endpoint: str = "", *, local_model: str = "", correct_if_factuality: float = 4.0,
                 judge: Any = None, **reward_options: Any) -> None:
        self.correct_if_factuality = correct_if_factuality
        self.config = JudgeSettings(judge_endpoint=endpoint, judge_model=local_model, **reward_options)
        self.judge = judge if judge is not None else build_judge(self.config)
        self.requests_sent = 0

    def __call__(self, predictions: list[Prediction], episodes: dict[str, Episode]) -> None:
        todo, requests = [], []
        for pred in predictions:
            episode = episodes.get(pred.episode)
            if episode is None or pred.call_index is None or pred.observation is None:
                continue
            history = [(_action(c), o.content) for s in episode.steps if s.index < pred.step
                       for c, o in zip(s.tool_calls, s.observations)]
            step = next(s for s in episode.steps if s.index == pred.step)
            requests.append(judge_messages(domain_of(episode.benchmark), history, _action(step.tool_calls[pred.call_index]),
                                           pred.observation, pred.claim, max_chars=self.config.judge_max_chars,
                                           max_history=self.config.judge_max_history))
            todo.append(pred)
        if not todo:
            return
        answers = self.judge.complete(requests)
        for pred, (answer, _cached) in zip(todo, answers):
            if isinstance(answer, Exception):
                pred.method, pred.detail = "judge:failed", f"{type(answer).__name__}: {answer}; rule: {pred.detail}"
                continue
            scores, why = parse_judge_answer(answer)
            if scores is None:
                pred.method, pred.detail = "judge:unparsed", f"{why}; rule: {pred.detail}"
                continue
            pred.score = (scores.mean - 1.0) / 4.0
            pred.correct = scores.scores["factuality"] >= self.correct_if_factuality
            pred.method = "judge"
            pred.detail = json.dumps(scores.scores, sort_keys=True)
        self.requests_sent += len(requests)


def episodes_by_key(episodes: list[Episode]) -> dict[str, Episode]:
    return {episode_key(e): e for e in episodes}
