"""The world-model rewards as a list of named, weighted, stateless functions (TRL's form).

Paper (Qwen-AgentWorld, world-model RL warmup): a sampled completion predicts the next
observation o_hat of one turn; its reward mixes

- ``rubric`` (:class:`RubricReward`): an LLM judge scores five criteria (format, factuality,
  consistency, realism, quality) 1-5 each; ``r_rubric = 5 * mean(c_1..c_5)`` in [5, 25]. When the
  judge call failed or its answer cannot be parsed the sample has no reward (``None``; its
  breakdown says 0 and why) and the trainer drops it from its group (no gradient, see below);
- ``rule`` (:class:`RuleReward`): a binary verifier (normalised exact match, or JSON agreement
  for JSON tool responses; :mod:`unified.rewards.verifiers`), ``r_rule`` in {0, 25};
- ``similarity`` (:class:`SimilarityReward`, ours, off by default): a graded rule score
  ``r_sim = 25 * s(o_hat, o)`` in [0, 25], s an LCS or token F1 (:mod:`unified.rewards.similarity`);
  small policies that never pass the binary check need it for any GSPO signal.

Mixing is TRL's weighted sum, nothing else: a recipe lists its rewards with their weights
(:mod:`unified.rewards.entries`), and TRL's ``GRPOTrainer(reward_funcs=funcs,
args=GRPOConfig(reward_weights=weights))`` computes, for a batch of B completions and K functions,
``rewards_per_func`` of shape ``(B, K)`` and

    R_i = sum_k w_k * r_k,i        (a NaN, i.e. a function's None, is skipped: nansum)

With the paper's 9:1 (``rubric`` weight 0.9, ``rule`` weight 0.1): ``R = 0.9 r_rubric + 0.1 r_rule``
in [4.5, 25]. GSPO then normalises R within each group of G completions of one prompt.
No function reads another's result: each is computed from the batch alone.

A function whose ``drops_sample_on_failure`` is true (the rubric) returns ``None`` for a sample it
failed to score, and the warmup trainer (:mod:`unified.warmup.gspo_trainer` ``GSPOTrainer``) then makes
the whole row of that sample NaN, so TRL treats it as unscorable: left out of its group's mean and
std, advantage exactly 0, no gradient; a group whose every sample failed gets advantage 0 throughout.
Scored 0 instead (below the parsed minimum of 5), a judge timeout would be the group's strongest
signal, a large negative advantage. The share is logged as ``rewards/dropped_share``. How long a
failing judge can hold a rank is :func:`judge_worst_case_s`.

Every function has TRL's reward-function signature ``fn(prompts, completions, **columns) ->
list[float | None]`` (one value per completion, shape ``(B,)``) and a ``__name__`` (TRL's metric
name ``rewards/<name>/mean``): ``prompts`` are the dataset's ``prompt`` column (chat messages,
or strings), ``completions`` strings or lists of chat messages, ``columns`` the other dataset
columns (``reference``, ``domain`` are used) and TRL's ``trainer_state``, ``log_metric``,
``log_extra``, ``completion_ids``... (accepted, the two loggers used).

Functions are stateless: calling one twice on the same batch gives the same values (the rubric
judge's answers are cached by content). ``fn.breakdowns(prompts, completions, **columns)``
returns one :class:`unified.types.RewardBreakdown` per completion (rubric criteria, verifier
verdict, judge text, parse status) for evaluation code; when TRL passes ``log_metric`` /
``log_extra``, a call also logs the mean of every component (``rubric/factuality``,
``rubric/parsed``...) and adds a ``<name>_detail`` column to the completions table.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from unified.config import bounded
from unified.chatformat.observation import completion_text, parse_observation
from unified.inference.judge import Judge, make_judge
from unified.rewards.rubric import CRITERIA, judge_messages, parse_judge_answer
from unified.rewards.similarity import SIMILARITY_METRICS
from unified.rewards.verifiers import verify
from unified.types import RewardBreakdown

RULE_SCALE = 25.0
"""A passed rule check is worth the top of the rubric range."""


@dataclass
class JudgeSettings:
    """The rubric judge: which model, its cache, its limits, and what it is shown (the options of a
    recipe's ``{name: rubric}`` reward entry, and of :class:`unified.trace.judge.RubricJudge`)."""

    judge_endpoint: str = ""
    """OpenAI-compatible judge, ``openai:URL#MODEL`` (set this or ``judge_model``)."""
    judge_model: str = ""
    """Local judge checkpoint (a ``load_checkpoint`` spec: ``embedded``, a HF directory, ...)."""
    cache_dir: str = "~/.cache/unified/judge"
    """On-disk judge answer cache; empty string: no cache."""
    judge_max_tokens: int = bounded(256, ge=1)
    """Judge answer budget."""
    judge_temperature: float = bounded(0.0, ge=0)
    judge_max_concurrency: int = bounded(8, ge=1)
    judge_timeout_s: float = bounded(120.0, gt=0)
    judge_max_retries: int = bounded(4, ge=0)
    judge_thinking: bool = False
    """Let the judge think before answering (sent as the chat template's ``enable_thinking``)."""
    judge_max_chars: int = bounded(3000, ge=1)
    """Longest text (action, observation) shown to the judge; longer ones keep head and tail."""
    judge_max_history: int = bounded(4, ge=0)
    """Earlier turns shown to the judge."""

    RENAMED = {"judge_disable_thinking": ("judge_thinking", lambda value: not value)}  # unified.config.from_dict


def _prompt_parts(prompt: Any) -> tuple[list[tuple[str, str]], str]:
    """(history pairs, current action) from a chat prompt (or a plain string prompt)."""
    if isinstance(prompt, str):
        return [], prompt
    messages = [m for m in (prompt or []) if isinstance(m, dict)]
    turns = [m for m in messages if m.get("role") in ("user", "assistant")]
    action = ""
    if turns and turns[-1].get("role") == "user":
        action = str(turns[-1].get("content") or "")
        turns = turns[:-1]
    history, pending = [], None
    for m in turns:
        if m.get("role") == "user":
            pending = str(m.get("content") or "")
        elif pending is not None:
            history.append((pending, parse_observation(str(m.get("content") or ""))))
            pending = None
    return history, action


def _column(columns: dict[str, Any], name: str, n: int, default: Any) -> list[Any]:
    value = columns.get(name)
    if value is None:
        return [default] * n
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        return [value] * n
    if len(value) != n:
        raise ValueError(f"reward column {name!r} has {len(value)} values for {n} completions")
    return list(value)


class RewardFunction:
    """Base of the reward functions: ``__call__`` is TRL's reward function over :meth:`breakdowns`.

    Subclasses set ``__name__`` and implement :meth:`breakdowns`; they hold configuration only
    (a judge client, a metric name), never the result of a call.
    """

    __name__ = "reward"
    drops_sample_on_failure = False
    """True: a sample this function could not score (``parsed`` false) gets ``None``, and the trainer
    drops the whole sample from its group (module docstring)."""

    def breakdowns(self, prompts, completions, **columns) -> list[RewardBreakdown]:
        """One breakdown per completion (its ``total`` is the reward)."""
        raise NotImplementedError

    def __call__(self, prompts, completions, **columns) -> list[float | None]:
        breakdowns = self.breakdowns(prompts, completions, **columns)
        log_metric, log_extra = columns.get("log_metric"), columns.get("log_extra")
        if callable(log_metric) and breakdowns:
            keys = sorted({k for b in breakdowns for k in b.components})
            for key in keys:
                values = [b.components[key] for b in breakdowns if key in b.components]
                log_metric(f"{self.__name__}/{key}", sum(values) / len(values))
            log_metric(f"{self.__name__}/parsed", sum(b.parsed for b in breakdowns) / len(breakdowns))
        if callable(log_extra):
            log_extra(f"{self.__name__}_detail", [b.detail[:300] for b in breakdowns])
        if self.drops_sample_on_failure:
            return [b.total if b.parsed else None for b in breakdowns]
        return [b.total for b in breakdowns]


class RubricReward(RewardFunction):
    """The rubric judge as a reward: ``5 * mean`` of five 1-5 scores in [5, 25]; ``None`` (no reward,
    the sample dropped from its group in training) when the judge call failed or its answer is
    unparseable.

    Only the predicted observation inside the answer tags reaches the judge
    (:func:`unified.chatformat.parse_observation`), with up to ``max_history`` earlier turns, the new
    action and the real observation (:func:`unified.rewards.rubric.judge_messages`). A judge call
    that fails never raises: its breakdowns say 0, ``parsed=False`` and why (``judge failed: ...`` or
    ``unparseable (...)``), and the call returns ``None`` for them.
    """

    __name__ = "rubric"
    drops_sample_on_failure = True

    def __init__(self, judge: Judge, *, max_chars: int = 3000, max_history: int = 4) -> None:
        self.judge = judge
        self.max_chars, self.max_history = max_chars, max_history

    def breakdowns(self, prompts, completions, **columns) -> list[RewardBreakdown]:
        n = len(completions)
        references = _column(columns, "reference", n, "")
        domains = _column(columns, "domain", n, "")
        prompts = list(prompts) if prompts is not None else [""] * n
        requests = []
        for prompt, completion, reference, domain in zip(prompts, completions, references, domains):
            history, action = _prompt_parts(prompt)
            prediction = parse_observation(completion_text(completion))
            requests.append(judge_messages(str(domain), history, action, str(reference), prediction,
                                           max_chars=self.max_chars, max_history=self.max_history))
        breakdowns = []
        try:
            answers = self.judge.complete(requests)
        except Exception as exc:  # a reward never raises into the trainer: every completion gets 0, with why
            answers = [(exc, False)] * len(requests)
        for answer, cached in answers:
            if isinstance(answer, Exception):
                breakdowns.append(RewardBreakdown(total=0.0, components={"rubric": 0.0}, source="rubric", parsed=False,
                                                  detail=f"judge failed: {type(answer).__name__}: {answer}"[:1000]))
                continue
            scores, why = parse_judge_answer(answer)
            if scores is None:  # also a judge answer that is not text (a number, an object): 0, never a TypeError
                preview = answer if isinstance(answer, str) else repr(answer)
                breakdowns.append(RewardBreakdown(total=0.0, components={"rubric": 0.0}, source="rubric", parsed=False,
                                                  detail=f"unparseable ({why}): {preview[:500]}"))
                continue
            components = {**scores.scores, "rubric": scores.reward, "score_0_100": scores.normalised,
                          "cached": float(cached)}
            breakdowns.append(RewardBreakdown(total=scores.reward, components=components, source="rubric",
                                              parsed=True, detail=answer[:1000]))
        return breakdowns


class RuleReward(RewardFunction):
    """Rule verifier as a reward: 25 if the check passes, else 0 (see :mod:`unified.rewards.verifiers`)."""

    __name__ = "rule"

    def breakdowns(self, prompts, completions, **columns) -> list[RewardBreakdown]:
        n = len(completions)
        references = _column(columns, "reference", n, "")
        domains = _column(columns, "domain", n, "")
        breakdowns = []
        for completion, reference, domain in zip(completions, references, domains):
            prediction = parse_observation(completion_text(completion))
            verdict = verify(prediction, str(reference), str(domain))
            value = RULE_SCALE if verdict.passed else 0.0
            breakdowns.append(RewardBreakdown(total=value, components={"rule": value, verdict.check: value},
                                              source="rule", parsed=True, detail=verdict.message))
        return breakdowns


class SimilarityReward(RewardFunction):
    """Graded rule reward: ``25 * s(prediction, reference)`` in [0, 25].

    ``s`` is a similarity of :mod:`unified.rewards.similarity` (``lcs_f1``: ROUGE-L F1
    ``2 LCS / (n + m)`` over runtime-normalised tokens; ``token_f1``: bag-of-tokens F1), so a
    normalised exact match is worth the same 25 as a passed :class:`RuleReward` check, and a
    near miss is worth more than a far one. One value per completion, shape ``(B,)``.
    """

    __name__ = "similarity"

    def __init__(self, metric: str = "lcs_f1") -> None:
        self.metric = metric
        self.score = SIMILARITY_METRICS.get(metric)

    def breakdowns(self, prompts, completions, **columns) -> list[RewardBreakdown]:
        n = len(completions)
        references = _column(columns, "reference", n, "")
        breakdowns = []
        for completion, reference in zip(completions, references):
            prediction = parse_observation(completion_text(completion))
            try:
                score = float(self.score(prediction, str(reference)))
            except Exception as exc:  # a reward never raises into the trainer
                breakdowns.append(RewardBreakdown(total=0.0, components={"similarity": 0.0}, source="similarity",
                                                  parsed=False, detail=f"{type(exc).__name__}: {exc}"[:300]))
                continue
            value = RULE_SCALE * score
            breakdowns.append(RewardBreakdown(total=value, components={"similarity": value, self.metric: score},
                                              source="similarity", parsed=True,
                                              detail=f"{self.metric}={score:.3f}"))
        return breakdowns


def judge_worst_case_s(cfg: JudgeSettings, requests: int) -> float:
    """The longest a rank can wait on ``requests`` judge calls of one batch when the judge hangs.

    Each call makes at most ``judge_max_retries + 1`` attempts of ``judge_timeout_s`` each, with the
    client's backoff between them (``min(30, 2^a)`` s for attempt a, +25% jitter;
    :mod:`unified.inference.openai_compat`); at most ``judge_max_concurrency`` calls run at once, so
    ``ceil(requests / concurrency)`` waves of them follow each other:

        worst = ceil(n / c) x ((R + 1) x T + sum_{a < R} 1.25 x min(30, 2^a))

    Meanwhile the other ranks wait in the reward gather, a collective: this must stay below the
    collective (NCCL) timeout, ``train.collective_timeout_s`` (the recipe check refuses otherwise).
    """
    retries = cfg.judge_max_retries
    per_call = (retries + 1) * cfg.judge_timeout_s + sum(1.25 * min(30.0, 2.0 ** a) for a in range(retries))
    waves = -(-max(requests, 1) // cfg.judge_max_concurrency)
    return waves * per_call


def build_judge(cfg: JudgeSettings, *, request_fields: tuple[str, ...] | None = None) -> Judge:
    """The configured judge (:func:`unified.inference.judge.make_judge`) behind the configured cache;
    ``request_fields``: the sampling fields an endpoint request carries (None: all)."""
    if bool(cfg.judge_endpoint) == bool(cfg.judge_model):
        raise ValueError("judge: set exactly one of judge_endpoint (openai:URL#MODEL) or judge_model "
                         "(a checkpoint spec such as 'embedded' or a local HF directory)")
    return make_judge(cfg.judge_endpoint or cfg.judge_model, max_tokens=cfg.judge_max_tokens,
                      temperature=cfg.judge_temperature, cache_dir=cfg.cache_dir,
                      max_concurrency=cfg.judge_max_concurrency, timeout_s=cfg.judge_timeout_s,
                      max_retries=cfg.judge_max_retries, thinking=cfg.judge_thinking, request_fields=request_fields)


__all__ = ["CRITERIA", "RULE_SCALE", "JudgeSettings", "RewardFunction", "RubricReward", "RuleReward",
           "SimilarityReward", "build_judge", "judge_worst_case_s"]
