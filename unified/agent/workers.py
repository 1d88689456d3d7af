"""The blocking work of one episode, run on worker threads so it never holds other episodes back.

Every call into a benchmark that may block (starting its environment, ``env.step``,
``env.next_user_turn`` with a simulated user behind it, ``adapter.score`` with a judge behind
it, stopping the environment) runs here, on a thread of :class:`EpisodeWorkers`; the agent loop's
own thread only schedules, talks to the policy, parses completions and delivers results. An
episode has at most one call in flight at a time (:meth:`EpisodeWorkers.submit` refuses a second
one), so its environment never sees two calls at once, and its calls keep their order.

Each function here either returns or raises; the loop records what it raised as that episode's
error (:func:`finish_episode` never raises: a failing score becomes the episode's crash result).
"""

from __future__ import annotations

import time
import traceback
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, Callable

from unified.agent.prompting import PromptingModule, make_prompting
from unified.benchmarks.contract import SCORING_FAILED_AFTER_AGENT, Adapter, Environment, RunContext, with_run
from unified.benchmarks.failures import check_details, check_tools
from unified.sandbox.hostenv import redact_host_secrets
from unified.types import Episode, EpisodeResult, Message, Observation, ToolCall

OPEN, STEP, USER, FINISH = "open", "step", "user", "finish"
"""Kinds of worker call: start the environment, run tool calls, ask for the next user turn,
score and stop. The first three end with the episode needing the policy again."""
READY, GENERATE = "ready", "generate"
"""The phases of an episode besides its worker calls: waiting for the policy to be asked, and
waiting for the policy's answer (:attr:`EpisodeState.generation`)."""


@dataclass
class EpisodeState:
    """One episode in flight: its job, record, environment, where it stands and the counters its
    limits read. The agent loop keeps one per episode (nothing about an episode lives elsewhere).

    ``phase`` moves ``open -> ready -> generate -> (step | user) -> ready -> ... -> finish``: one of
    :data:`OPEN`, :data:`READY`, :data:`GENERATE`, :data:`STEP`, :data:`USER`, :data:`FINISH`.
    """

    key: int
    """Position of the job in :meth:`unified.agent.loop.AgentLoop.run`'s list (results come back in that order)."""
    job: Any
    """The :class:`unified.agent.loop.Job`."""
    episode: Episode
    env: Environment | None = None
    """Set once the environment started; None while opening (or when opening failed)."""
    prompting: PromptingModule | None = None
    started: float = 0.0
    """``time.monotonic()`` when the environment was ready (the episode's wall-time limit counts from here)."""
    steps_in_turn: int = 0
    tokens: int = 0
    closed: bool = False
    """True once the environment was stopped (by :func:`finish_episode` or a failed open)."""
    phase: str = OPEN
    generation: Future | None = None
    """The policy's answer while ``phase == GENERATE``."""
    ready_at: float = 0.0
    """``time.monotonic()`` when the episode last became ready for the policy."""
    submitted: float = 0.0
    """``time.perf_counter()`` when the request was submitted."""
    step: Any = None
    """The :class:`unified.types.Step` whose tool calls run while ``phase == STEP``."""
    calls: list[ToolCall] = field(default_factory=list)
    """Those calls."""


def crash_result(benchmark: str, job: Any, error: str) -> EpisodeResult:
    """The result of an episode that ended with ``error``."""
    return EpisodeResult(benchmark=benchmark, task_id=job.task.id, trial=job.trial, score=0.0, passed=False,
                         error=error)


def scoring_failed_result(benchmark: str, job: Any, error: str) -> EpisodeResult:
    """The result of an episode whose scoring raised after the agent acted: score 0, counted.

    The agent's actions can make scoring raise (a ``/tmp`` it made read-only, a ``mktemp`` it
    replaced, a full disk), so a failed answer must not leave the score that way: the episode
    scores 0 and stays in the aggregate's denominator (``error`` is None), labelled with
    ``details["status"] = "scoring_failed_after_agent"`` and the traceback as ``grader_error``
    (the report counts the task as errored). Only an infrastructure failure that the adapter
    confirmed on a fresh environment without the agent is left out of a score
    (:mod:`unified.execution.infra`).
    """
    return EpisodeResult(benchmark=benchmark, task_id=job.task.id, trial=job.trial, score=0.0, passed=False,
                         details={"status": SCORING_FAILED_AFTER_AGENT, "grader_error": error})


def close_environment(state: EpisodeState) -> None:
    """Stop the episode's environment once; a failure to stop is kept in the episode's metadata."""
    if state.env is None or state.closed:
        return
    state.closed = True
    try:
        state.env.__exit__(None, None, None)
    except Exception:
        state.episode.metadata["stop_error"] = traceback.format_exc()


def open_environment(adapter: Adapter, state: EpisodeState, prompting_name: str, prompting_options: dict[str, Any],
                     run: RunContext = RunContext()) -> None:
    """Open and start the task's environment and write the conversation's opening into the episode.

    On any error the environment (when it was created) is stopped here and the error re-raised.
    """
    env = state.env = with_run(adapter, "open", state.job.task, run=run)
    try:
        env.__enter__()
        check_tools(env.tools, f"{adapter.name}: task {state.job.task.id}: open()")
        prompting = make_prompting(prompting_name, **prompting_options)
        episode = state.episode
        system = prompting.system_prompt(env.system_prompt)
        if system:
            episode.messages.append(Message(role="system", content=system))
        if getattr(env, "assistant_greeting", None):
            episode.messages.append(Message(role="assistant", content=env.assistant_greeting))
        episode.messages.append(Message(role="user", content=env.first_user_message))
        episode.tools = list(env.tools)
        episode.metadata.update(env.metadata)
    except BaseException:
        close_environment(state)  # stop must be idempotent: a failed start was already stopped by __enter__
        raise
    state.prompting = prompting
    state.started = time.monotonic()


def _error_observation(call: ToolCall, text: str) -> Observation:
    return Observation(call_id=call.id, content=text, is_error=True, metadata={"source": "agent_loop"})


def step_environment(env: Environment, calls: list[ToolCall],
                     message: Message | None) -> tuple[list[Observation], float]:
    """Run the well-formed calls to offered tools in ``env.step``; answer the others with error
    observations. Returns one observation per call, in call order, and the seconds it took."""
    t0 = time.perf_counter()
    offered = {t.name for t in env.tools}
    if env.steps_unoffered_calls:  # the environment answers unknown names itself (bfcl executes them)
        offered |= {c.name for c in calls}
    valid = [c for c in calls if c.parse_error is None and c.name in offered]
    answers = env.step(valid, message) if valid else []
    if len(answers) != len(valid):
        raise RuntimeError(f"environment returned {len(answers)} observations for {len(valid)} calls")
    by_call = iter(answers)
    observations = []
    for call in calls:
        if call.parse_error is not None:
            observations.append(_error_observation(call, f"Error: could not parse this tool call: {call.parse_error}"))
        elif call.name not in offered:
            observations.append(_error_observation(
                call, f"Error: no tool named {call.name!r}; available tools: {', '.join(sorted(offered))}"))
        else:
            obs = next(by_call)
            obs.call_id = call.id
            obs.content = redact_host_secrets(obs.content)  # defense in depth: never record a host secret
            observations.append(obs)
    return observations, time.perf_counter() - t0


def next_user_turn(state: EpisodeState) -> str | None:
    """The environment's next user message (a simulated user may take its time), or None: done.
    The tools it offers from then on (they may change between user turns) are checked."""
    message = state.env.next_user_turn(state.episode)
    if message is not None:
        check_tools(state.env.tools, f"{state.episode.benchmark}: task {state.job.task.id}: next_user_turn()")
    return message


def finish_episode(adapter: Adapter, state: EpisodeState) -> EpisodeResult:
    """Score the episode (unless it already failed), then stop its environment. Never raises:
    a score that fails or is not an :class:`EpisodeResult` scores 0 and is counted
    (:func:`scoring_failed_result`), never left out of the aggregate."""
    episode, job = state.episode, state.job
    try:
        if episode.error:
            return crash_result(adapter.name, job, episode.error)
        try:
            result = adapter.score(job.task, episode, state.env)
            if not isinstance(result, EpisodeResult):
                raise TypeError(f"{type(adapter).__name__}.score returned {type(result).__name__}, "
                                "not an EpisodeResult")
            result.trial = job.trial
            return check_details(result)
        except Exception:
            return scoring_failed_result(adapter.name, job, "scoring failed after the agent acted:\n"
                                         + traceback.format_exc())
    finally:
        close_environment(state)


class EpisodeWorkers:
    """A thread pool that runs at most one call per episode at a time, and knows which is which."""

    def __init__(self, threads: int) -> None:
        self._pool = ThreadPoolExecutor(max_workers=max(1, threads), thread_name_prefix="episode-worker")
        self._calls: dict[Future, tuple[int, str]] = {}  # insertion order = submission order
        self._busy: set[int] = set()

    def submit(self, key: int, kind: str, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` for episode ``key``; refused while that episode has a call in flight."""
        if key in self._busy:
            raise RuntimeError(f"episode {key} already has a call in flight; one environment never gets two at once")
        self._busy.add(key)
        self._calls[self._pool.submit(fn, *args)] = (key, kind)

    def busy(self, kinds: tuple[str, ...] = (OPEN, STEP, USER, FINISH)) -> int:
        """How many calls of these kinds are in flight."""
        return sum(kind in kinds for _, kind in self._calls.values())

    def __len__(self) -> int:
        return len(self._calls)

    def take_done(self) -> list[tuple[int, str, Future]]:
        """The calls that ended, in submission order: ``(key, kind, future)``."""
        done = [(key, kind, future) for future, (key, kind) in self._calls.items() if future.done()]
        for key, _, future in done:
            del self._calls[future]
            self._busy.discard(key)
        return done

    def futures(self) -> list[Future]:
        """The calls in flight."""
        return list(self._calls)

    def wait(self, timeout: float | None = None) -> None:
        """Block until a call ends (or ``timeout`` seconds passed)."""
        if self._calls:
            wait(list(self._calls), timeout=timeout, return_when=FIRST_COMPLETED)

    def shutdown(self) -> None:
        """Drop the calls not started yet, wait for the running ones."""
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._calls.clear()
        self._busy.clear()
