"""A benchmark adapter as a training environment: the eval's tasks, tools, users, limits and scorer.

The ``benchmark`` reward entry (:class:`unified.rewards.entries.BenchmarkEntry`) names an installed
adapter. :class:`BenchmarkEnvironment` holds what the eval would hold for it (the adapter built with
its settings, its tasks split into training and held-out ones, the per-episode limits after the
adapter's ``agent_limits``) and runs rollouts with the eval's own agent loop
(:class:`unified.agent.loop.AgentLoop`): ``adapter.open`` -> policy turns, ``env.step``,
``env.next_user_turn`` -> ``adapter.score``, on the same worker threads, with the same containment
(an environment or a scorer that raises is that episode's error, the others go on). Nothing here
re-implements a benchmark: a rollout *is* an eval episode.

A rollout's reward is :attr:`unified.types.EpisodeResult.reward` of its result:

.. math::

    r(e) = \\begin{cases} \\mathrm{score}(e) & \\text{scored} \\\\
                          0 & \\text{the scorer failed after the agent acted} \\\\
                          \\text{None} & \\text{skipped, or crashed before scoring (infrastructure)}
           \\end{cases}

so the reward of a policy on a task is, by construction, the number the eval records for it
(``tests/test_agentic.py`` checks it with the gold replayer). A None reward leaves the rollout out of
its group's advantage (TRL's reward mix skips a None the same way).

For training, each rollout's episode gives its token trajectory (:meth:`unified.types.Episode.token_trajectory`,
verl's ``AgentLoopOutput`` shape: the policy's tokens with mask 1, tool observations, user turns and
template markup between them with mask 0, the sampler's per-token log-probs), or one sample per
policy call when the chat template rewrites earlier turns (:meth:`unified.types.Episode.turn_samples`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from unified.agent.loop import AgentLoop, Job
from unified.benchmarks.contract import Adapter, AgentLimits, BenchmarkUnavailable, RunContext, Task
from unified.benchmarks.discovery import adapter_class, load_adapter
from unified.registry import UnknownNameError
from unified.types import Episode, EpisodeResult, TokenTrajectory


def build_adapter(name: str, settings: dict[str, Any]) -> Adapter:
    """The adapter ``name`` built with ``settings`` (its ``Config``, strict), or ValueError saying why not."""
    try:
        if ":" not in name:
            adapter_class(name)
    except UnknownNameError as exc:
        raise ValueError(f"rewards.benchmark: adapter: {exc}") from None
    except BenchmarkUnavailable as exc:
        raise ValueError(f"rewards.benchmark: adapter {name!r} cannot run here: {exc}") from None
    try:
        return load_adapter(name, **settings)
    except BenchmarkUnavailable as exc:
        raise ValueError(f"rewards.benchmark: adapter {name!r} cannot run here: {exc}") from None
    except (TypeError, ValueError, UnknownNameError) as exc:  # an unknown or mistyped setting
        raise ValueError(f"rewards.benchmark: settings: {exc}") from None


def check_adapter_settings(name: str, settings: dict[str, Any]) -> None:
    """Raise ValueError when the adapter is not installed or its settings do not parse."""
    build_adapter(name, settings)


class EpisodeReward:
    """TRL's reward function of the ``benchmark`` entry: the episodes' rewards, computed by the rollout.

    ``fn(prompts, completions, episode_reward=[r_1..r_B], **columns) -> [r_1..r_B]``: the agentic
    rollout (:mod:`unified.warmup.agentic`) scored each completion's episode with the adapter already
    and passes the rewards as a column; outside such a rollout there is no episode to score."""

    def __init__(self, name: str = "benchmark") -> None:
        self.__name__ = name

    def __call__(self, prompts: list[Any], completions: list[Any], episode_reward: list[float | None] | None = None,
                 **columns: Any) -> list[float | None]:
        if episode_reward is None:
            raise ValueError(f"reward {self.__name__!r} scores agent episodes: it needs the agentic rollout "
                             "(a recipe whose rewards hold a benchmark entry runs unified.warmup.agentic), "
                             "not single-turn completions")
        if len(episode_reward) != len(completions):
            raise ValueError(f"reward {self.__name__!r}: {len(episode_reward)} episode rewards for "
                             f"{len(completions)} completions")
        return list(episode_reward)


@dataclass
class Rollout:
    """One episode of a training task: what the eval would record, and its reward."""

    task: Task
    trial: int
    result: EpisodeResult
    episode: Episode

    @property
    def reward(self) -> float | None:
        return self.result.reward

    def samples(self) -> list[TokenTrajectory]:
        """The episode's training samples: its whole trajectory (observations and user turns masked
        out), or one per policy call when the chat template rewrote an earlier turn; none when the
        episode made no policy call."""
        steps = self.episode.steps
        if not steps:
            return []
        if not any(step.prompt_token_ids for step in steps):
            raise ValueError(f"{self.episode.benchmark}/{self.episode.task_id}: the policy's backend returned no token "
                             "ids; agentic training needs an in-process backend (hf) or vLLM's return_token_ids")
        try:
            return [self.episode.token_trajectory()]
        except ValueError:  # a template that rewrote an earlier turn, or a call that generated nothing
            return [TokenTrajectory(prompt_ids=list(step.prompt_token_ids), response_ids=list(step.completion_token_ids),
                                    response_mask=[1] * len(step.completion_token_ids),
                                    response_logprobs=list(step.completion_logprobs)
                                    if step.completion_logprobs is not None else None)
                    for step in steps if step.prompt_token_ids and step.completion_token_ids]


class BenchmarkEnvironment:
    """An adapter's tasks as training and held-out tasks, and rollouts through the eval's agent loop."""

    def __init__(self, adapter: Adapter, *, split: str | None = None, limit: int | None = None,
                 heldout_size: int = 0, prompting: str = "act", limits: AgentLimits = AgentLimits(),
                 run: RunContext = RunContext()) -> None:
        self.adapter, self.prompting, self.run = adapter, prompting, run
        self.limits = adapter.agent_limits(limits)
        tasks = [t for t in adapter.tasks(split, limit) if t.skip_reason is None and t.scored and not t.depends_on]
        if heldout_size >= len(tasks):
            raise ValueError(f"rewards.benchmark: {adapter.name}: heldout_size={heldout_size} leaves no training "
                             f"task of the {len(tasks)} runnable ones (split {split!r}, limit {limit})")
        cut = len(tasks) - heldout_size
        self.train_tasks, self.heldout_tasks = tasks[:cut], tasks[cut:]

    @classmethod
    def from_entry(cls, entry: Any, run: RunContext = RunContext()) -> "BenchmarkEnvironment":
        """The environment of a ``benchmark`` reward entry."""
        return cls(build_adapter(entry.adapter, entry.settings), split=entry.split, limit=entry.limit,
                   heldout_size=entry.heldout_size, prompting=entry.prompting, limits=entry.limits, run=run)

    def rollouts(self, policy: Any, tasks: list[Task], group_size: int = 1, *, max_in_flight: int = 4,
                 model_name: str = "") -> list[Rollout]:
        """``group_size`` episodes of each task (trials 0..G-1) with ``policy`` (a ChatModel or the gold
        :class:`unified.agent.replay.Replayer`), in task order. A failure of one episode is its result's
        error (the agent loop's containment); a failure of the loop itself is raised."""
        episodes: dict[tuple[str, int], Episode] = {}

        def keep(result: EpisodeResult, episode: Episode) -> None:
            episodes[(result.task_id, result.trial)] = episode

        loop = AgentLoop(self.adapter, policy, prompting=self.prompting, limits=self.limits,
                         max_in_flight=max_in_flight, on_result=keep, run=self.run, model_name=model_name)
        jobs = [Job(task=task, trial=g) for task in tasks for g in range(group_size)]
        results = loop.run(jobs)
        out = []
        for job, result in zip(jobs, results):
            episode = episodes.get((result.task_id, result.trial))
            if episode is None:  # delivered without an episode: record the loss, never drop it silently
                episode = Episode(benchmark=self.adapter.name, task_id=job.task.id, trial=job.trial,
                                  model=model_name, error="the agent loop delivered no episode for this result")
            out.append(Rollout(task=job.task, trial=job.trial, result=result, episode=episode))
        return out


__all__ = ["BenchmarkEnvironment", "EpisodeReward", "Rollout", "build_adapter", "check_adapter_settings"]
