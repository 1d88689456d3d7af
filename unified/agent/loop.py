"""The multi-turn agent loop: many episodes in flight, batched by rounds or continuously.

The orchestrator owns the conversation (tau2-bench's shape: agents are step functions). Two
schedules (``scheduling``, see :data:`SCHEDULING`):

- *rounds*: each round gathers the next turn of every episode in flight into one
  ``policy.generate`` call (the ``hf`` backend turns it into one left-padded batch); an episode
  whose turn ended early waits for the slowest one of the round;
- *continuous*: each episode's request is submitted as soon as it is ready
  (``policy.submit``), ``policy.poll`` advances generation by one decode step and returns the
  turns that ended, and those go to their environments at once while the others keep decoding
  (:class:`unified.models.continuous.ContinuousBatcher` behind the ``hf`` backend).

Given a :class:`unified.agent.replay.Replayer` instead of a policy (``--model gold``), the loop asks
it for each ready episode's next turn from the task itself (``replayer.respond(adapter, task,
messages)``) and handles the answer as a policy output; nothing is generated or batched.

Either way, per policy output:

1. ``prompting.parse`` strips module blocks; reasoning, answer and tool calls are parsed
   (:mod:`unified.chatformat.toolcalls`), server-parsed calls used when the text holds none;
2. malformed calls and calls to tools the environment does not offer become error
   observations (the agent sees them and can react); the others go to ``env.step`` together,
   none dropped;
3. a turn without calls ends the user turn: ``env.next_user_turn`` gives the next user
   message or ends the episode (``answer``);
4. limits (policy calls, steps per user turn, generated tokens, wall time) end the episode
   with their name as ``stop_reason``; the wall-time limit also reaches generation: each
   request carries the episode's deadline (``PolicyRequest.deadline``), the backends stop
   generating there (``finish_reason="timeout"``) and the episode ends as ``timeout``.

Every call into the benchmark that may block (opening and starting the environment,
``env.step``, ``env.next_user_turn`` with a simulated user behind it, ``adapter.score`` with a
judge behind it, stopping) runs on a worker thread (:mod:`unified.agent.workers`), one call per
episode at a time, so a slow tool, user or judge holds back only its own episode: in *rounds*,
a round waits for episodes still busy at most as long as the last round's generation took
(``round_wait``), and the others join a later round when they are ready; an episode being scored
frees its place for the next one (see :class:`AgentLoop`). The loop's own thread
talks to the policy, parses, and hands finished episodes to ``on_result`` (one thread: the run
directory's writer needs no lock). ``run`` returns the results in the order of its jobs.

Episodes are recorded whole (:class:`unified.types.Episode`): every prompt, raw completion,
reasoning, call, observation, token count and timing. Earlier turns' reasoning stays in the
recorded messages; the chat template drops it from later prompts (Qwen3.5 behaviour).

A crash in one episode (environment, scorer, policy error for that request, a prompting
module, a completion nothing can parse, a record that cannot be written) is recorded as that
episode's error and the others go on: no exception raised while handling one episode's model
output leaves :meth:`AgentLoop.run`. Tasks with ``depends_on`` start only after their
dependencies finished.
"""

from __future__ import annotations

import time
import traceback
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Callable

from unified.chatformat.toolcalls import calls_from_structured, parse_completion
from unified.chatformat.untrusted import clean_text
from unified.agent.prompting import make_prompting
from unified.agent.replay import Replayer
from unified.agent.workers import (FINISH, OPEN, STEP, USER, EpisodeState, EpisodeWorkers, close_environment,
                                   crash_result, finish_episode, next_user_turn, open_environment, step_environment)
from unified.benchmarks.contract import Adapter, AgentLimits, RunContext, StopReason, Task
from unified.inference.base import ChatModel, PolicyOutput, PolicyRequest
from unified.types import Episode, EpisodeResult, Message, Step, ToolCall


SCHEDULING = ("auto", "rounds", "continuous")
"""``rounds``: every episode in flight waits for one batched ``policy.generate`` per round.
``continuous``: each episode is submitted when it is ready (``policy.submit`` / ``poll``) and its
next turn starts as soon as its environment step returns (continuous batching).
``auto``: continuous when the policy supports it (``hf`` on an SDPA model), else rounds."""

MIN_ROUND_WAIT = 0.05
"""Seconds a round waits at least for episodes still busy (opening, stepping, asking the user)."""

END = "end"
"""What :meth:`AgentLoop._take_output` returns for an episode that ended with this output."""


@dataclass
class Job:
    """One (task, trial) to run."""

    task: Task
    trial: int = 0


@dataclass
class _Run:
    """Where one :meth:`AgentLoop.run` stands; only the loop's thread reads or writes it."""

    jobs: list[Job]
    workers: EpisodeWorkers
    done: set[str]
    """Task ids whose every trial finished (dependencies of later tasks)."""
    pending: list[int] = field(default_factory=list)
    """Keys (positions in ``jobs``) not admitted yet, in order."""
    remaining: dict[str, int] = field(default_factory=dict)
    flight: dict[int, EpisodeState] = field(default_factory=dict)
    """Admitted and not yet delivered, whatever they are doing."""
    ready: dict[int, EpisodeState] = field(default_factory=dict)
    """Waiting for their next policy turn (rounds: the next round's members)."""
    waiting: dict[int, EpisodeState] = field(default_factory=dict)
    """Continuous: submitted to the policy, by policy key."""
    stepping: dict[int, tuple[Step, list[ToolCall]]] = field(default_factory=dict)
    results: dict[int, EpisodeResult] = field(default_factory=dict)
    ready_since: float = 0.0
    last_generation: float = 0.0
    """Seconds the last round's ``policy.generate`` took."""

    def __post_init__(self) -> None:
        self.pending = list(range(len(self.jobs)))
        for job in self.jobs:
            self.remaining[job.task.id] = self.remaining.get(job.task.id, 0) + 1

    def mark_done(self, job: Job) -> None:
        self.remaining[job.task.id] -= 1
        if self.remaining[job.task.id] == 0:
            self.done.add(job.task.id)


class AgentLoop:
    """Runs jobs of one adapter with one policy; ``run`` returns when all jobs are done.

    ``max_in_flight``: episodes generating, stepping or asking their user at once; episodes being
    scored do not count (a slow judge does not hold the next episode back), but at most as many
    again are scored at once (their environments stay open until scored, so at most
    ``2 * max_in_flight`` are open). ``env_workers``: threads for the episodes' blocking calls
    (None: ``2 * max_in_flight``, so no call waits for a thread). ``round_wait``: in rounds, how
    long a round waits for episodes still busy before going without them (None: as long as the
    last round's generation took, at least :data:`MIN_ROUND_WAIT`). ``run``: the eval run the episodes
    belong to, passed to ``adapter.open`` (its work directory, its trials). ``policy``: a ChatModel,
    or a :class:`unified.agent.replay.Replayer` whose answers come from the task (``--model gold``).
    """

    def __init__(self, adapter: Adapter, policy: ChatModel | Replayer, *, prompting: str = "act",
                 prompting_options: dict[str, Any] | None = None, limits: AgentLimits = AgentLimits(),
                 max_in_flight: int = 8, env_workers: int | None = None, model_name: str = "",
                 on_result: Callable[[EpisodeResult, Episode], None] | None = None,
                 on_round: Callable[[int, int], None] | None = None, scheduling: str = "auto",
                 round_wait: float | None = None, run: RunContext = RunContext()) -> None:
        self.adapter, self.policy, self.run_context = adapter, policy, run
        self.prompting_name, self.prompting_options = prompting, dict(prompting_options or {})
        self.limits, self.max_in_flight = limits, max(1, max_in_flight)
        self.env_workers = max(1, env_workers) if env_workers else 2 * self.max_in_flight
        self.model_name = model_name or policy.model
        self.on_result = on_result
        self.on_round = on_round
        if scheduling not in SCHEDULING:
            raise ValueError(f"scheduling must be one of {', '.join(SCHEDULING)}, got {scheduling!r}")
        self.scheduling = scheduling
        self.round_wait = round_wait
        make_prompting(prompting, **self.prompting_options)  # fail early on an unknown name

    # ----------------------------------------------------------------------------------
    def run(self, jobs: list[Job], finished_ids: set[str] | None = None) -> list[EpisodeResult]:
        """Run every job; ``finished_ids`` are task ids already done (dependencies of a resume).
        Returns the results in the order of ``jobs``."""
        replaying = isinstance(self.policy, Replayer)
        continuous = not replaying and self.uses_continuous_batching
        r = _Run(jobs=list(jobs), workers=EpisodeWorkers(self.env_workers), done=set(finished_ids or ()))
        scheduled_ids = {j.task.id for j in r.jobs}
        try:
            while r.pending or r.flight:
                self._admit(r, scheduled_ids)
                if not r.flight:
                    if r.pending:  # a dependency cycle or a dependency that crashed before opening
                        r.jobs[r.pending[0]].task.depends_on = []
                    continue
                progressed = self._collect(r)
                progressed = (self._replay(r) if replaying else self._continue(r) if continuous
                              else self._maybe_round(r)) or progressed
                if not progressed:
                    if not len(r.workers):
                        raise RuntimeError("agent loop stalled: episodes in flight but nothing running")
                    r.workers.wait(self._idle_timeout(r))
        finally:
            r.workers.shutdown()  # only after an exception: drop queued calls, wait for running ones
            for state in r.flight.values():
                close_environment(state)
        return [r.results[key] for key in sorted(r.results)]

    @property
    def uses_continuous_batching(self) -> bool:
        """True when episodes go to the policy one by one as they become ready (``scheduling``)."""
        if self.scheduling == "rounds":
            return False
        supported = bool(getattr(self.policy, "supports_continuous_batching", False))
        if self.scheduling == "continuous" and not supported:
            raise ValueError(f"scheduling='continuous' needs a policy that supports it; {self.policy.name!r} does not")
        return supported

    def _admit(self, r: _Run, scheduled_ids: set[str]) -> None:
        """Start opening jobs whose dependencies are finished (or not part of this run), up to
        ``max_in_flight`` episodes in flight besides those being scored."""
        i = 0
        while self._has_room(r) and i < len(r.pending):
            job = r.jobs[r.pending[i]]
            if all(d in r.done or d not in scheduled_ids for d in job.task.depends_on):
                self._start(r, r.pending.pop(i))
            else:
                i += 1

    def _has_room(self, r: _Run) -> bool:
        scoring = r.workers.busy((FINISH,))
        return len(r.flight) - scoring < self.max_in_flight and len(r.flight) < 2 * self.max_in_flight

    def _start(self, r: _Run, key: int) -> None:
        job = r.jobs[key]
        task = job.task
        episode = Episode(benchmark=self.adapter.name, task_id=task.id, trial=job.trial, model=self.model_name,
                          started_at=time.time(), metadata={"prompting": self.prompting_name})
        if task.skip_reason:
            result = EpisodeResult(benchmark=self.adapter.name, task_id=task.id, trial=job.trial, score=0.0,
                                   skipped=task.skip_reason)
            episode.stop_reason = StopReason.SKIPPED
            r.results[key] = self._deliver(result, episode)
            r.mark_done(job)
            return
        state = r.flight[key] = EpisodeState(key=key, job=job, episode=episode)
        r.workers.submit(key, OPEN, open_environment, self.adapter, state, self.prompting_name,
                         self.prompting_options, self.run_context)

    def _idle_timeout(self, r: _Run) -> float | None:
        """How long to wait for a worker call when nothing else can move: in rounds with episodes
        ready, until the round goes without the busy ones; otherwise until a call ends."""
        if not r.ready:
            return None
        return max(0.0, r.ready_since + self._round_wait(r) - time.monotonic())

    def _round_wait(self, r: _Run) -> float:
        return self.round_wait if self.round_wait is not None else max(MIN_ROUND_WAIT, r.last_generation)

    # ----------------------------------------------------------------------------------
    def _collect(self, r: _Run) -> bool:
        """Take the worker calls that ended and move their episodes on; True when there were any."""
        done = r.workers.take_done()
        for key, kind, future in done:
            state = r.flight[key]
            if kind == OPEN:
                self._opened(r, state, future)
            elif kind == STEP:
                step, calls = r.stepping.pop(key)
                if self._take_observations(state, step, calls, future):
                    self._end(r, state)
                else:
                    self._make_ready(r, state)
            elif kind == USER:
                self._user_answered(r, state, future)
            else:
                self._finished(r, state, future)
        return bool(done)

    def _opened(self, r: _Run, state: EpisodeState, future: Future) -> None:
        try:
            future.result()
        except Exception:  # the environment was stopped by the worker
            state.episode.stop_reason, state.episode.error = StopReason.ERROR, traceback.format_exc()
            self._settle(r, state, crash_result(self.adapter.name, state.job, state.episode.error))
            return
        self._make_ready(r, state)

    def _user_answered(self, r: _Run, state: EpisodeState, future: Future) -> None:
        episode = state.episode
        try:
            follow_up = future.result()
        except Exception:
            episode.stop_reason, episode.error = StopReason.ERROR, traceback.format_exc()
            return self._end(r, state)
        if follow_up is None:
            episode.stop_reason = StopReason.ANSWER
            return self._end(r, state)
        episode.messages.append(Message(role="user", content=follow_up))
        episode.tools = list(state.env.tools)
        state.steps_in_turn = 0
        if self._limit_hit(state):
            return self._end(r, state)
        self._make_ready(r, state)

    def _finished(self, r: _Run, state: EpisodeState, future: Future) -> None:
        try:
            result = future.result()
        except Exception:  # finish_episode does not raise; kept so nothing escapes if it ever does
            result = crash_result(self.adapter.name, state.job, "finishing failed:\n" + traceback.format_exc())
        self._settle(r, state, result)

    def _settle(self, r: _Run, state: EpisodeState, result: EpisodeResult) -> None:
        """Deliver a finished episode (on this thread) and free its place."""
        del r.flight[state.key]
        r.results[state.key] = self._deliver(result, state.episode)
        r.mark_done(state.job)
        if self.on_round:
            self.on_round(len(r.flight), len(r.pending))

    def _make_ready(self, r: _Run, state: EpisodeState) -> None:
        if not r.ready:
            r.ready_since = time.monotonic()
        r.ready[state.key] = state

    def _end(self, r: _Run, state: EpisodeState) -> None:
        """The episode ended: score it and stop its environment on a worker."""
        state.episode.wall_seconds = time.monotonic() - state.started
        r.workers.submit(state.key, FINISH, finish_episode, self.adapter, state)

    def _then(self, r: _Run, state: EpisodeState, next_call: str, step: Step | None, calls: list[ToolCall]) -> None:
        """After a policy output: end the episode, run its calls, or ask for the next user turn."""
        if next_call == END:
            self._end(r, state)
        elif next_call == STEP:
            r.stepping[state.key] = (step, calls)
            message = state.episode.messages[-1]  # the assistant turn that made the calls
            r.workers.submit(state.key, STEP, step_environment, state.env, calls, message)
        else:
            r.workers.submit(state.key, USER, next_user_turn, state)

    def _deliver(self, result: EpisodeResult, episode: Episode) -> EpisodeResult:
        """Hand a finished episode to ``on_result`` (the run directory). When that fails (a record
        that cannot be serialised, say), the episode is recorded again as an error with its steps
        left out, so the run goes on and a rerun does not meet the same episode again."""
        if not self.on_result:
            return result
        try:
            self.on_result(result, episode)
            return result
        except Exception:
            error = "recording the episode failed:\n" + traceback.format_exc()
        crash = EpisodeResult(benchmark=self.adapter.name, task_id=episode.task_id, trial=episode.trial, score=0.0,
                              passed=False, error=error)
        stripped = Episode(benchmark=episode.benchmark, task_id=episode.task_id, trial=episode.trial,
                           model=episode.model, started_at=episode.started_at, stop_reason=StopReason.ERROR, error=error,
                           wall_seconds=episode.wall_seconds)
        self.on_result(crash, stripped)
        return crash

    # ----------------------------------------------------------------------------------
    def _request(self, state: EpisodeState) -> PolicyRequest:
        view = state.prompting.before_policy(list(state.episode.messages))
        return PolicyRequest(messages=[m.to_chat() for m in view], tools=[t.to_openai() for t in state.env.tools],
                             prefix=getattr(state.prompting, "response_prefix", str)(),
                             deadline=state.started + self.limits.max_seconds)

    @staticmethod
    def _crashed(state: EpisodeState, where: str) -> None:
        """Record the exception being handled as the episode's error (the episode then ends)."""
        state.episode.stop_reason = StopReason.ERROR
        state.episode.error = f"{where}:\n{traceback.format_exc()}"

    def _maybe_round(self, r: _Run) -> bool:
        """Rounds: one ``policy.generate`` for every ready episode, once no other episode is busy
        opening, stepping or asking its user, or once the round waited :meth:`_round_wait` for them."""
        if not r.ready:
            return False
        if r.workers.busy((OPEN, STEP, USER)) and time.monotonic() - r.ready_since < self._round_wait(r):
            return False
        states = [r.ready.pop(key) for key in sorted(r.ready)]
        asking, requests = [], []
        for state in states:
            try:
                requests.append(self._request(state))
                asking.append(state)
            except Exception:
                self._crashed(state, "building the policy request failed")
                self._end(r, state)
        t0 = time.perf_counter()
        try:
            outputs = self.policy.generate(requests) if requests else []
            if len(outputs) != len(requests):
                raise RuntimeError(f"the policy returned {len(outputs)} outputs for {len(requests)} requests")
        except Exception as exc:  # the whole batch failed: every episode records it
            outputs = [exc] * len(requests)
        r.last_generation = gen_seconds = time.perf_counter() - t0
        for state, output in zip(asking, outputs):
            self._then(r, state, *self._take_output(state, output, gen_seconds))
        if self.on_round:
            self.on_round(len(r.flight), len(r.pending))
        return True

    def _continue(self, r: _Run) -> bool:
        """Continuous batching: submit every ready episode, then one ``policy.poll()`` (one decode
        step of every waiting episode); the turns that ended move on at once."""
        for key in sorted(r.ready):
            self._submit(r, r.ready.pop(key))
        if not r.waiting:
            return False
        try:
            polled = self.policy.poll()
        except Exception as exc:  # the engine failed: every waiting episode records it
            polled = [(key, exc) for key in list(r.waiting)]
        for key, output in polled:
            state = r.waiting.pop(key, None)
            if state is None:  # a request the policy already reported (it failed in an earlier poll)
                continue
            self._then(r, state, *self._take_output(state, output, getattr(output, "seconds", 0.0)))
        return True

    def _replay(self, r: _Run) -> bool:
        """A :class:`unified.agent.replay.Replayer` in place of the policy: every ready episode's next
        turn comes from its task at once (nothing to batch). True when there were any."""
        replayed = bool(r.ready)
        for key in sorted(r.ready):
            state = r.ready.pop(key)
            try:
                output = self.policy.respond(self.adapter, state.job.task, self._request(state).messages)
            except Exception as exc:  # this episode's error, like a failed request
                output = exc
            self._then(r, state, *self._take_output(state, output, 0.0))
        return replayed

    def _submit(self, r: _Run, state: EpisodeState) -> None:
        """Queue the episode's next turn; when that fails the episode ends with its error."""
        try:
            request = self._request(state)
            r.waiting[id(state)] = state
            self.policy.submit(id(state), request)
        except Exception:
            r.waiting.pop(id(state), None)
            self._crashed(state, "submitting the policy request failed")
            self._end(r, state)

    def _take_output(self, state: EpisodeState, output: PolicyOutput | Exception,
                     gen_seconds: float) -> tuple[str, Step | None, list[ToolCall]]:
        """Record one policy output: ``(next_call, step, calls)``, ``next_call`` one of
        :data:`END`, ``STEP`` (``calls`` for ``env.step``) or ``USER`` (the turn had no calls).
        Whatever the output holds, an exception raised here ends this episode only (recorded as
        its error)."""
        try:
            return self._record_output(state, output, gen_seconds)
        except Exception:
            self._crashed(state, "handling the policy output failed")
            return END, None, []

    def _record_output(self, state: EpisodeState, output: PolicyOutput | Exception,
                       gen_seconds: float) -> tuple[str, Step | None, list[ToolCall]]:
        episode = state.episode
        if isinstance(output, Exception):
            episode.stop_reason = StopReason.ERROR
            episode.error = "".join(traceback.format_exception(output)) or repr(output)
            return END, None, []
        if not isinstance(output, PolicyOutput):
            raise TypeError(f"the policy returned a {type(output).__name__}, not a PolicyOutput")
        raw = clean_text(output.prefix) + clean_text(output.text)
        visible, extras = state.prompting.parse(raw)
        if output.prefix:
            extras = dict(extras, response_prefix=output.prefix)
        parsed = parse_completion(visible, state.env.tools)
        calls = parsed.tool_calls
        if output.tool_calls and not calls:
            calls = calls_from_structured(output.tool_calls)
        for i, call in enumerate(calls):
            call.id = call.id or f"call_{i}"
        step = Step(index=len(episode.steps), prompt=output.prompt, completion=raw,
                    reasoning=parsed.reasoning, content=parsed.content, tool_calls=calls,
                    prompt_tokens=output.prompt_tokens, completion_tokens=output.completion_tokens,
                    completion_token_ids=list(output.token_ids), prompt_token_ids=list(output.prompt_token_ids),
                    completion_logprobs=list(output.logprobs) if output.logprobs is not None else None,
                    generation_seconds=output.seconds or gen_seconds,
                    extras=dict(extras, finish_reason=output.finish_reason))
        episode.steps.append(step)
        episode.messages.append(Message(role="assistant", content=parsed.content, reasoning=parsed.reasoning,
                                        tool_calls=calls))
        state.tokens += int(output.completion_tokens or 0)
        state.steps_in_turn += 1
        if output.finish_reason == "timeout":  # the backend stopped generating at the episode's deadline
            episode.stop_reason = StopReason.TIMEOUT
            episode.metadata["limit_hit"] = StopReason.TIMEOUT.value
            return END, step, []
        if calls and state.env.malformed_call_ends_turn and all(c.parse_error is not None for c in calls):
            step.extras["turn_ended_by"] = "malformed_calls"  # the benchmark's rule (e.g. bfcl's handlers)
        elif calls:
            return STEP, step, calls
        return USER, step, []

    def _take_observations(self, state: EpisodeState, step: Step, calls: list[ToolCall], future: Future) -> bool:
        """Record the observations of an environment step; True when the episode ended."""
        episode = state.episode
        try:
            observations, seconds = future.result()
        except Exception:
            episode.stop_reason, episode.error = StopReason.ERROR, traceback.format_exc()
            return True
        try:
            step.observations = observations
            step.environment_seconds = seconds
            for call, obs in zip(calls, observations):
                episode.messages.append(Message(role="tool", content=clean_text(obs.content), tool_call_id=call.id,
                                                name=call.name))
            state.prompting.after_observations(step, observations)
        except Exception:
            episode.stop_reason, episode.error = StopReason.ERROR, traceback.format_exc()
            return True
        if state.env.done:
            episode.stop_reason = StopReason.ENV_DONE
            return True
        return self._limit_hit(state)

    def _limit_hit(self, state: EpisodeState) -> bool:
        episode, limits = state.episode, self.limits
        reason: StopReason | None = None
        if len(episode.steps) >= limits.max_turns:
            reason = StopReason.MAX_TURNS
        elif state.steps_in_turn >= limits.max_steps_per_turn:
            reason = StopReason.MAX_STEPS_PER_TURN
        elif state.tokens >= limits.max_episode_tokens:
            reason = StopReason.MAX_EPISODE_TOKENS
        elif time.monotonic() - state.started >= limits.max_seconds:
            reason = StopReason.TIMEOUT
        if reason:
            episode.stop_reason = reason
            episode.metadata["limit_hit"] = reason.value
        return bool(reason)
