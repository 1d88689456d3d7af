"""The multi-turn agent loop: many episodes in flight, each asking the policy when it is ready.

The orchestrator owns the conversation (tau2-bench's shape: agents are step functions; verl's
``ToolAgentLoop`` shape: one state per episode, generation behind a future). One schedule: every
episode whose next turn is ready is submitted to the policy (``policy.submit_many``, a future per
request), the loop waits for whichever comes first, a policy answer or an environment call, and
moves that episode on at once: its tool calls go to its environment on a worker thread while the
other episodes keep generating. Behind the ``hf`` backend the futures come from the checkpoint's
one engine (:class:`unified.inference.engine.Engine`), which batches the episodes' requests
continuously (or in gathered batches: ``scheduling="rounds"``, see :data:`SCHEDULING`); a policy
without a ``submit`` of its own answers the episodes that were ready together with one
``generate`` call. Everything the loop knows of an episode is in its
:class:`unified.agent.workers.EpisodeState` (``phase``, the pending generation, the step whose calls
run, the counters its limits read).

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
episode at a time, so a slow tool, user or judge holds back only its own episode; an episode
being scored frees its place for the next one (see :class:`AgentLoop`). The loop's own thread
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
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, field
from typing import Any, Callable

from unified.chatformat.toolcalls import calls_from_structured, parse_completion
from unified.chatformat.untrusted import clean_text
from unified.agent.prompting import make_prompting
from unified.agent.replay import Replayer
from unified.agent.workers import (FINISH, GENERATE, OPEN, READY, STEP, USER, EpisodeState, EpisodeWorkers,
                                   close_environment, crash_result, finish_episode, next_user_turn, open_environment,
                                   step_environment)
from unified.benchmarks.contract import Adapter, AgentLimits, RunContext, StopReason, Task
from unified.inference.base import ChatModel, ContextFull, PolicyOutput, PolicyRequest
from unified.types import Episode, EpisodeResult, Message, Step, ToolCall


SCHEDULING = ("auto", "rounds", "continuous")
"""How the policy's engine batches the episodes' requests (the loop's schedule is the same):
``continuous``: a request joins the decoding batch at the next step and leaves it when it ends;
``rounds``: requests that arrive together are decoded as one batch until its last row ends
(``policy.submit(..., continuous=False)``); ``auto``: continuous when the policy has it (``hf``
on an SDPA model, ``openai``/``vllm`` whose server batches), else one ``generate`` call for the
episodes ready together."""

MIN_ROUND_WAIT = 0.05
"""Seconds ready episodes are held at least, in rounds, for episodes still busy (opening, stepping,
asking the user)."""

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
    """Admitted and not yet delivered, by key; each knows its own phase."""
    results: dict[int, EpisodeResult] = field(default_factory=dict)
    last_generation: float = 0.0
    """Seconds the last answer took from submission (how long a round holds ready episodes)."""

    def __post_init__(self) -> None:
        self.pending = list(range(len(self.jobs)))
        for job in self.jobs:
            self.remaining[job.task.id] = self.remaining.get(job.task.id, 0) + 1

    def mark_done(self, job: Job) -> None:
        self.remaining[job.task.id] -= 1
        if self.remaining[job.task.id] == 0:
            self.done.add(job.task.id)

    def in_phase(self, phase: str) -> list[EpisodeState]:
        """The episodes in ``phase``, by key."""
        return [self.flight[key] for key in sorted(self.flight) if self.flight[key].phase == phase]


class AgentLoop:
    """Runs jobs of one adapter with one policy; ``run`` returns when all jobs are done.

    ``max_in_flight``: episodes generating, stepping or asking their user at once; episodes being
    scored do not count (a slow judge does not hold the next episode back), but at most as many
    again are scored at once (their environments stay open until scored, so at most
    ``2 * max_in_flight`` are open). ``env_workers``: threads for the episodes' blocking calls
    (None: ``2 * max_in_flight``, so no call waits for a thread). ``on_round(in_flight, pending)``
    is called each time an episode was delivered (progress). ``run``: the eval run the episodes
    belong to, passed to ``adapter.open`` (its work directory, its trials). ``policy``: a ChatModel,
    or a :class:`unified.agent.replay.Replayer` whose answers come from the task (``--model gold``).

    When the policy batches by rounds (``scheduling="rounds"``, or a policy without continuous
    batching), ready episodes are submitted together: they are held while other episodes are
    opening, stepping or asking their user, at most ``round_wait`` seconds (None: as long as the
    last answer took, at least :data:`MIN_ROUND_WAIT`), so a round is not split by a tool call that
    returns a moment later. The schedule is the same; only when ready episodes are submitted differs.
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
        continuous = False if replaying else None if self.uses_continuous_batching else False
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
                if replaying:  # the task's own turns, at once: nothing to submit or wait for
                    progressed = self._replay(r) or progressed
                else:
                    progressed = self._submit_ready(r, continuous) or progressed
                    progressed = self._take_answers(r) or progressed
                if not progressed:
                    waiting = r.workers.futures() + [s.generation for s in r.in_phase(GENERATE)]
                    if not waiting:
                        raise RuntimeError("agent loop stalled: episodes in flight but nothing running")
                    wait(waiting, timeout=self._hold_left(r, continuous), return_when=FIRST_COMPLETED)
        finally:
            r.workers.shutdown()  # only after an exception: drop queued calls, wait for running ones
            for state in r.flight.values():
                close_environment(state)
        return [r.results[key] for key in sorted(r.results)]

    @property
    def uses_continuous_batching(self) -> bool:
        """True when the policy's requests are batched continuously (``scheduling``)."""
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
        state = r.flight[key] = EpisodeState(key=key, job=job, episode=episode, phase=OPEN)
        r.workers.submit(key, OPEN, open_environment, self.adapter, state, self.prompting_name,
                         self.prompting_options, self.run_context)

    # ----------------------------------------------------------------------------------
    def _collect(self, r: _Run) -> bool:
        """Take the worker calls that ended and move their episodes on; True when there were any."""
        done = r.workers.take_done()
        for key, kind, future in done:
            state = r.flight[key]
            if kind == OPEN:
                self._opened(r, state, future)
            elif kind == STEP:
                step, calls, state.step, state.calls = state.step, state.calls, None, []
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

    @staticmethod
    def _make_ready(r: _Run, state: EpisodeState) -> None:
        state.phase, state.ready_at = READY, time.monotonic()

    def _end(self, r: _Run, state: EpisodeState) -> None:
        """The episode ended: score it and stop its environment on a worker."""
        state.episode.wall_seconds = time.monotonic() - state.started
        state.phase = FINISH
        r.workers.submit(state.key, FINISH, finish_episode, self.adapter, state)

    def _then(self, r: _Run, state: EpisodeState, next_call: str, step: Step | None, calls: list[ToolCall]) -> None:
        """After a policy output: end the episode, run its calls, or ask for the next user turn."""
        if next_call == END:
            self._end(r, state)
        elif next_call == STEP:
            state.phase, state.step, state.calls = STEP, step, calls
            message = state.episode.messages[-1]  # the assistant turn that made the calls
            r.workers.submit(state.key, STEP, step_environment, state.env, calls, message)
        else:
            state.phase = USER
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
        policy_messages = getattr(state.env, "policy_messages", None)  # an outside Environment may predate it
        conversation = list(state.episode.messages)
        view = state.prompting.before_policy(policy_messages(conversation) if policy_messages else conversation)
        return PolicyRequest(messages=[m.to_chat() for m in view], tools=[t.to_openai() for t in state.env.tools],
                             prefix=getattr(state.prompting, "response_prefix", str)(),
                             request_fields=getattr(state.env, "request_fields", None),
                             deadline=state.started + self.limits.max_seconds)

    @staticmethod
    def _crashed(state: EpisodeState, where: str) -> None:
        """Record the exception being handled as the episode's error (the episode then ends)."""
        state.episode.stop_reason = StopReason.ERROR
        state.episode.error = f"{where}:\n{traceback.format_exc()}"

    def _submit_ready(self, r: _Run, continuous: bool | None) -> bool:
        """Submit the next turn of every ready episode (one ``submit_many``: a policy without its
        own ``submit`` answers them with one ``generate`` call); True when there were any."""
        ready = r.in_phase(READY)
        if not ready or self._hold_left(r, continuous, ready):
            return False
        asking, requests = [], []
        for state in ready:
            try:
                requests.append(self._request(state))
                asking.append(state)
            except Exception:
                self._crashed(state, "building the policy request failed")
                self._end(r, state)
        if not asking:
            return bool(ready)
        submitted = time.perf_counter()
        try:
            futures = self.policy.submit_many(requests, continuous=continuous)
            if len(futures) != len(requests):
                raise RuntimeError(f"the policy returned {len(futures)} futures for {len(requests)} requests")
        except Exception as exc:  # nothing was submitted: every episode records it
            futures = [Future() for _ in requests]
            for future in futures:
                future.set_exception(exc)
        for state, future in zip(asking, futures):
            state.phase, state.generation, state.submitted = GENERATE, future, submitted
        return True

    def _hold_left(self, r: _Run, continuous: bool | None, ready: list[EpisodeState] | None = None) -> float | None:
        """Rounds: seconds the ready episodes are still held for the busy ones; None: submit them
        now (nothing is busy, the wait is over, or requests are batched continuously)."""
        ready = r.in_phase(READY) if ready is None else ready
        if continuous is not False or not ready or not r.workers.busy((OPEN, STEP, USER)):
            return None
        wait_s = self.round_wait if self.round_wait is not None else max(MIN_ROUND_WAIT, r.last_generation)
        left = min(s.ready_at for s in ready) + wait_s - time.monotonic()
        return left if left > 0 else None

    def _replay(self, r: _Run) -> bool:
        """A :class:`unified.agent.replay.Replayer` in place of the policy: every ready episode's next
        turn comes from its task at once (nothing to batch). True when there were any."""
        ready = r.in_phase(READY)
        for state in ready:
            try:
                output = self.policy.respond(self.adapter, state.job.task, self._request(state).messages)
            except Exception as exc:  # this episode's error, like a failed request
                output = exc
            self._then(r, state, *self._take_output(state, output, 0.0))
        return bool(ready)

    def _take_answers(self, r: _Run) -> bool:
        """Move on every episode whose policy answer came; True when there were any."""
        answered = [s for s in r.in_phase(GENERATE) if s.generation.done()]
        for state in answered:
            future, state.generation = state.generation, None
            r.last_generation = time.perf_counter() - state.submitted
            error = future.exception()
            output = error if error is not None else future.result()
            self._then(r, state, *self._take_output(state, output, time.perf_counter() - state.submitted))
        return bool(answered)

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
        if isinstance(output, ContextFull):  # the model's limit, not the infrastructure's: scored as it stands
            episode.stop_reason = StopReason.CONTEXT_FULL
            episode.metadata["limit_hit"] = StopReason.CONTEXT_FULL.value
            episode.metadata["context_full"] = str(output)[:500]
            return END, None, []
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
