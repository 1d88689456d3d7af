"""A recipe's rewards: a list of entries, each a registered name or a dotted path with a weight
(TRL's ``reward_funcs`` and ``reward_weights`` in one list).

::

    rewards:
      - {name: rubric, weight: 0.9, judge_endpoint: "openai:http://judge:8001/v1#judge"}
      - {name: rule, weight: 0.1}
      - {name: similarity, weight: 1.0, metric: lcs_f1}
      - {name: repetition, weight: 5.0, ngram: 3, training_only: true}
      - {name: "my_rewards.scores:length_reward", weight: 0.5}

Every entry has a ``name``, a ``weight`` w >= 0 (0 leaves the entry out), ``training_only`` (a
shaping term: added to the GSPO reward, left out of every held-out score and of the collapse
guard's probe; unset: the reward's own default, true for ``repetition`` only) and the typed options
of its reward (an unknown option is an error naming file, line and the valid ones).

Registered names (:data:`REWARDS`; a package may register more from above):

- ``rubric`` (:class:`RubricEntry`, options of :class:`unified.rewards.functions.JudgeSettings`):
  the LLM judge's ``5 * mean(c_1..c_5)`` in [5, 25], 0 when unparseable;
- ``agentworld_rubric`` (:class:`AgentWorldRubricEntry`, the judge options plus ``agentworld_root``
  and ``judge_attempts``): the same 1-5 judge with AgentWorldBench's own judge prompts and parser,
  loaded from a Qwen-AgentWorld checkout (:mod:`unified.rewards.awb_judge`), ``5 * total`` in [5, 25];
- ``rule`` (:class:`RuleEntry`): the binary verifier, {0, 25};
- ``similarity`` (:class:`SimilarityEntry`, ``metric``): ``25 * s(o_hat, o)`` in [0, 25];
- ``repetition`` (:class:`RepetitionEntry`, ``ngram``): TRL's n-gram repetition penalty
  (``trl.rewards.get_repetition_penalty_reward``; Yeo et al., 2025, "Demystifying Long
  Chain-of-Thought Reasoning in LLMs", arXiv:2502.03373, App. C.2). For a completion of token ids
  y with the list g(y) of its n-grams (|g(y)| = |y| - n + 1):

  .. math::

      r_{rep}(y) = -\\Big(1 - \\frac{|\\mathrm{set}(g(y))|}{|g(y)|}\\Big) \\in [-1, 0]

  0 without a repeated n-gram (or when shorter than n), close to -1 for a loop such as
  ``"```\\n\\n```\\n\\n..."``; with weight w the mixed reward drops by up to w. A loop's similarity
  reward (about 0) is no lower than any other wrong answer's, so GSPO's group advantage gives it
  no push down of its own: hence a training-only term.

- ``benchmark`` (:class:`BenchmarkEntry`, ``adapter`` and the adapter's own ``settings``): any installed
  benchmark adapter as a training environment (:mod:`unified.rewards.environment`): its tasks, tools,
  user simulator, limits and scorer, the objects the eval uses; a rollout is a whole agent episode
  (the agent loop of :mod:`unified.agent`) and its reward is the adapter's ``score`` as
  :attr:`unified.types.EpisodeResult.reward` (score, 0 when scoring failed after the agent acted;
  None, dropped, for skipped and crashed episodes). It trains through the agentic trainer
  (:mod:`unified.warmup.agentic`, ``recipes/warmup/agentic_cpu.yaml``).

A name with ``:`` or ``.`` is a dotted path ``package.module:function`` (or
``package.module.function``) to a callable with TRL's reward-function signature ``fn(prompts,
completions, **columns) -> list[float | None]`` and a ``__name__`` (TRL's metric name); with
``args`` the callable is a factory, called once with them (``trl.rewards:get_soft_overlong_punishment``
with ``args: {max_completion_len: 512, soft_punish_cache: 64}``).

:func:`build_rewards` gives the functions and weights of the entries kept, in list order; TRL then
computes, for B completions and the K functions kept, ``R_i = sum_k w_k r_k,i`` (nansum over a
function's None), shape ``(B,)``. :func:`legacy_entries` converts the older recipe form (three
weight fields and a ``shaping`` section).
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from unified.config import bounded, from_dict
from unified.registry import Registry, UnknownNameError
from unified.rewards.functions import JudgeSettings, RubricReward, RuleReward, SimilarityReward, build_judge
from unified.rewards.similarity import SIMILARITY_METRICS
from unified.rewards.awb_judge import AgentWorldJudgeReward, load_checkout
from unified.rewards.environment import EpisodeReward, check_adapter_settings
from unified.benchmarks.contract import AgentLimits


@dataclass
class RewardEntry:
    """One reward of a recipe: its name, its weight, whether it is a training-only shaping term."""

    name: str
    """A registered reward (:data:`REWARDS`) or a dotted path ``package.module:function``."""
    weight: float = field(metadata={"bounds": {"ge": 0.0}})
    """TRL's reward weight w_k; 0 leaves the entry out."""
    training_only: bool | None = None
    """Left out of held-out scores and of the collapse guard's probe; ``None``: the reward's default."""

    SHAPING: ClassVar[bool] = False
    """Default of ``training_only`` for this reward."""
    NEW_ENTRY: ClassVar[dict[str, Any]] = {"weight": 0.0}
    """An entry that ``--set rewards.NAME.KEY=...`` adds starts at weight 0 (off until a weight is set)."""

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("a reward entry needs a name")
        if self.training_only is None:
            self.training_only = type(self).SHAPING

    def build(self, judge: Any = None) -> Callable:
        """The TRL reward function (``judge``: a judge to use instead of the configured one)."""
        raise NotImplementedError

    def describe(self) -> str:
        """A few words for the model card."""
        return f"{self.name} weight {self.weight:g}"


@dataclass
class RubricEntry(JudgeSettings, RewardEntry):
    """``rubric``: the rubric judge (:class:`unified.rewards.functions.RubricReward`)."""

    def build(self, judge: Any = None) -> Callable:
        return RubricReward(judge if judge is not None else build_judge(self), max_chars=self.judge_max_chars,
                            max_history=self.judge_max_history)


@dataclass
class AgentWorldRubricEntry(RubricEntry):
    """``agentworld_rubric``: the checkout's judge prompts and parser as the rubric reward
    (:class:`unified.rewards.awb_judge.AgentWorldJudgeReward`); budget and temperature default to
    eval.py's (``judge_max_chars``/``judge_max_history`` do not apply: eval.py shows the whole history).
    An endpoint judge gets eval.py's request body (``model``, ``messages``, ``max_tokens``,
    ``temperature``, as read from the checkout's eval.py), so ``judge_thinking``
    is not sent and the served template's default applies, as under eval.py. The HTTP timeout and
    retries stay the warmup's (``judge_timeout_s``, ``judge_max_retries``: they bound the reward
    gather, a collective), not eval.py's 600 s."""

    judge_max_tokens: int = bounded(32768, ge=1)
    judge_temperature: float = bounded(0.6, ge=0)
    agentworld_root: str = ""
    """The Qwen-AgentWorld checkout (empty: ``$AGENTWORLD_ROOT``)."""
    judge_attempts: int = bounded(3, ge=1)
    """Judge attempts per completion (eval.py's ``max_retries``)."""

    def build(self, judge: Any = None) -> Callable:
        checkout = load_checkout(self.agentworld_root or None, required=True)
        judge = judge if judge is not None else build_judge(self, request_fields=checkout.defaults.request_fields)
        return AgentWorldJudgeReward(judge, checkout,
                                     max_retries=self.judge_attempts)


@dataclass
class RuleEntry(RewardEntry):
    """``rule``: the binary verifier (:class:`unified.rewards.functions.RuleReward`)."""

    def build(self, judge: Any = None) -> Callable:
        return RuleReward()


@dataclass
class SimilarityEntry(RewardEntry):
    """``similarity``: the graded rule reward (:class:`unified.rewards.functions.SimilarityReward`)."""

    metric: str = "lcs_f1"
    """``lcs_f1`` (order-aware) or ``token_f1`` (:mod:`unified.rewards.similarity`)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        try:
            SIMILARITY_METRICS.get(self.metric)
        except UnknownNameError as exc:
            raise ValueError(f"metric: {exc}") from None

    def build(self, judge: Any = None) -> Callable:
        return SimilarityReward(self.metric)


@dataclass
class RepetitionEntry(RewardEntry):
    """``repetition``: TRL's n-gram repetition penalty in [-1, 0] (module docstring); training-only by default."""

    ngram: int = bounded(3, ge=1)
    """n of the n-grams counted."""

    SHAPING: ClassVar[bool] = True

    def build(self, judge: Any = None) -> Callable:
        from trl.rewards import get_repetition_penalty_reward

        return get_repetition_penalty_reward(ngram_size=self.ngram, max_penalty=-1.0)

    def describe(self) -> str:
        return f"repetition penalty weight {self.weight:g} ({self.ngram}-grams)"


@dataclass
class CallableEntry(RewardEntry):
    """A dotted path ``package.module:function`` to a TRL reward function (or, with ``args``, a factory)."""

    args: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of a factory; empty: the callable is the reward function itself."""

    def build(self, judge: Any = None) -> Callable:
        module_name, sep, attr = self.name.partition(":")
        if not sep:
            module_name, _, attr = self.name.rpartition(".")
        try:
            target = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError, ValueError) as exc:
            raise ValueError(f"rewards: {self.name!r}: cannot load it: {type(exc).__name__}: {exc}") from None
        func = target(**self.args) if self.args else target
        if not callable(func) or not getattr(func, "__name__", None):
            raise ValueError(f"rewards: {self.name!r} is not a reward function with a __name__ (TRL's "
                             f"fn(prompts, completions, **columns) -> list[float | None]), got {func!r}")
        return func


@dataclass
class BenchmarkEntry(RewardEntry):
    """``benchmark``: a benchmark adapter's environment and scorer (:mod:`unified.rewards.environment`).

    ``--set rewards.benchmark.adapter=bfcl_v4 --set rewards.benchmark.weight=1``. The adapter is
    looked up and its ``settings`` parsed by its own ``Config`` when the recipe loads (strict: an
    unknown setting is an error naming it), so a recipe that cannot build its environment fails
    before anything loads. The tasks of ``split`` (at most ``limit``) are split in two, in the
    adapter's order: the last ``heldout_size`` are never trained on and are what the eval runs
    before and after training; the others are the training tasks."""

    adapter: str = ""
    """A registered benchmark (``python -m unified.eval --list``) or ``package.module:Factory``."""
    settings: dict[str, Any] = field(default_factory=dict)
    """The adapter's own settings (its ``Config``; ``benchmarks.NAME`` in an eval)."""
    split: str | None = None
    """The adapter's split (None: its default)."""
    limit: int | None = bounded(None, ge=1)
    """At most this many tasks of the split (training and held-out together)."""
    heldout_size: int = bounded(0, ge=0)
    """The last tasks of the list, kept out of training for the before/after eval."""
    prompting: str = "act"
    """The agent loop's prompting module (as ``--prompting`` of the eval)."""
    limits: AgentLimits = field(default_factory=AgentLimits)
    """Per-episode limits (the adapter's ``agent_limits`` may fix its own, as in the eval)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.adapter:
            raise ValueError("rewards.benchmark: adapter: name the benchmark, as `--benchmarks` would "
                             "(python -m unified.eval --list lists them)")
        check_adapter_settings(self.adapter, self.settings)

    def build(self, judge: Any = None) -> Callable:
        return EpisodeReward(self.name)

    def describe(self) -> str:
        held = f", {self.heldout_size} held out" if self.heldout_size else ""
        return (f"benchmark {self.adapter} (split {self.split or 'default'}, limit {self.limit}{held}) "
                f"weight {self.weight:g}")


REWARDS: Registry[type[RewardEntry]] = Registry("reward")
"""Reward name -> its entry class (options and ``build``)."""
REWARDS.register("rubric", RubricEntry)
REWARDS.register("agentworld_rubric", AgentWorldRubricEntry)
REWARDS.register("rule", RuleEntry)
REWARDS.register("similarity", SimilarityEntry)
REWARDS.register("repetition", RepetitionEntry)
REWARDS.register("benchmark", BenchmarkEntry)


def is_dotted_path(name: str) -> bool:
    return ":" in name or "." in name


def entry_class(data: dict[str, Any]) -> type[RewardEntry]:
    """The entry class of a raw entry mapping, by its ``name`` (``unified.config`` VARIANT hook)."""
    name = data.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError(f"every reward entry needs a name: one of {', '.join(REWARDS.names())} or a dotted "
                         f"path package.module:function, got {name!r}")
    return CallableEntry if is_dotted_path(name) else REWARDS.get(name)


RewardEntry.VARIANT = staticmethod(entry_class)  # type: ignore[attr-defined]


def default_rewards() -> list[RewardEntry]:
    """The paper's mix: rubric 0.9, rule 0.1."""
    return [RubricEntry(name="rubric", weight=0.9), RuleEntry(name="rule", weight=0.1)]


def check_entries(entries: list[RewardEntry]) -> None:
    """Raise ValueError for a list that cannot train: a name twice, or no scored entry left."""
    seen: set[str] = set()
    for entry in entries:
        if entry.name in seen:
            raise ValueError(f"rewards: {entry.name!r} is listed twice (names address entries in --set and "
                             "name TRL's metrics)")
        seen.add(entry.name)
    if not any(e.weight > 0 and not e.training_only for e in entries):
        raise ValueError("rewards: no entry with a weight > 0 outside training_only: nothing to score "
                         f"(got {[(e.name, e.weight) for e in entries]})")


def build_rewards(entries: list[RewardEntry], *, training: bool = True, judge: Any = None
                  ) -> tuple[list[Callable], list[float]]:
    """TRL's ``reward_funcs`` and ``reward_weights`` of ``entries``, in list order: those of weight > 0,
    without the ``training_only`` ones unless ``training``. ``judge`` replaces the rubric's configured judge."""
    kept = [e for e in entries if e.weight > 0 and (training or not e.training_only)]
    return [e.build(judge=judge) for e in kept], [e.weight for e in kept]


def find_entry(entries: list[RewardEntry], name: str) -> RewardEntry | None:
    """The entry called ``name`` (None if the list has none)."""
    return next((e for e in entries if e.name == name), None)


# --------------------------------------------------------------------------------------
# the older form: three weight fields + judge settings, and a separate shaping section


@dataclass
class _LegacyRewards(JudgeSettings):
    rubric_weight: float = bounded(0.9, ge=0)
    rule_weight: float = bounded(0.1, ge=0)
    similarity_weight: float = bounded(0.0, ge=0)
    similarity_metric: str = "lcs_f1"


@dataclass
class _LegacyShaping:
    repetition_weight: float = bounded(0.0, ge=0)
    repetition_ngram: int = bounded(3, ge=1)


LEGACY_KEYS: dict[str, str] = {
    "rewards.rubric_weight": "rewards.rubric.weight", "rewards.rule_weight": "rewards.rule.weight",
    "rewards.similarity_weight": "rewards.similarity.weight", "rewards.similarity_metric": "rewards.similarity.metric",
    **{f"rewards.{f.name}": f"rewards.rubric.{f.name}" for f in dataclasses.fields(JudgeSettings)},
    "shaping.repetition_weight": "rewards.repetition.weight", "shaping.repetition_ngram": "rewards.repetition.ngram",
}
"""The older form's ``--set`` keys -> today's."""


def legacy_entries(rewards: dict[str, Any] | None, shaping: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Today's raw entries for an older recipe's ``rewards`` mapping (``rubric_weight``, ``rule_weight``,
    ``similarity_weight``, ``similarity_metric``, judge settings; its defaults 0.9/0.1/0) and ``shaping``
    mapping (``repetition_weight``, ``repetition_ngram``): the same functions and weights, in the same
    order (rubric, rule, similarity, repetition), entries of weight 0 left out. ``None``: nothing to
    convert from that section."""
    out: list[dict[str, Any]] = []
    if rewards is not None:
        old = from_dict(_LegacyRewards, rewards, where="rewards")
        judge = {f.name: getattr(old, f.name) for f in dataclasses.fields(JudgeSettings)
                 if getattr(old, f.name) != f.default}
        if old.rubric_weight:
            out.append({"name": "rubric", "weight": old.rubric_weight, **judge})
        if old.rule_weight:
            out.append({"name": "rule", "weight": old.rule_weight})
        if old.similarity_weight:
            out.append({"name": "similarity", "weight": old.similarity_weight, "metric": old.similarity_metric})
    shape = from_dict(_LegacyShaping, shaping or {}, where="shaping")
    if shape.repetition_weight:
        out.append({"name": "repetition", "weight": shape.repetition_weight, "ngram": shape.repetition_ngram,
                    "training_only": True})
    return out


def benchmark_entries(entries: list[RewardEntry]) -> list[BenchmarkEntry]:
    """The ``benchmark`` entries of weight > 0: when there is one, the warmup's rollouts are agent episodes."""
    return [e for e in entries if isinstance(e, BenchmarkEntry) and e.weight > 0]


def applied_entries(entries: list[RewardEntry]) -> list[RewardEntry]:
    """The entries a run scores with: of those of weight > 0, only the ``benchmark`` ones when there is one (an
    agentic run's rewards are its episodes' scores; the other entries score single-turn completions, which such a
    run has none of), else all of them. A judge that an entry left out here names is neither required nor asked."""
    environments = benchmark_entries(entries)
    return list(environments) if environments else [e for e in entries if e.weight > 0]


def entries_not_applied(entries: list[RewardEntry]) -> list[str]:
    """The names of the entries of weight > 0 that :func:`applied_entries` leaves out (said in ``--dry-run``)."""
    applied = {id(e) for e in applied_entries(entries)}
    return [e.name for e in entries if e.weight > 0 and id(e) not in applied]


__all__ = ["REWARDS", "AgentWorldRubricEntry", "BenchmarkEntry", "applied_entries", "benchmark_entries",
           "entries_not_applied", "CallableEntry", "LEGACY_KEYS", "RepetitionEntry", "RewardEntry", "RubricEntry", "RuleEntry",
           "SimilarityEntry", "build_rewards", "check_entries", "default_rewards", "entry_class", "find_entry",
           "legacy_entries"]
