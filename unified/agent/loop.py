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

Either way, per policy output:

1. ``prompting.parse`` strips module blocks; reasoning, answer and tool calls are parsed
   (:mod:`unified.agent.parsing`), server-parsed calls used when the text holds none;
2. malformed calls and calls to tools the environment does not offer become error
   observations (the agent sees them and can react); the others go to ``env.step`` together,
   none dropped; environment steps of the round run in a thread pool;
3. a turn without calls ends the user turn: ``env.next_user_turn`` gives the next user
   message or ends the episode (``answer``);
4. limits (policy calls, steps per user turn, generated tokens, wall time) end the episode
   with their name as ``stop_reason``; the wall-time limit also reaches generation: each
   request carries the episode's deadline (``PolicyRequest.deadline``), the backends stop
   generating there (``finish_reason="timeout"``) and the episode ends as ``timeout``.

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
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, Callable

from unified.agent.parsing import calls_from_structured, clean_text, parse_completion
from unified.agent.prompting import PromptingModule, make_prompting
from unified.contracts import Adapter, AgentLimits, Environment, StopReason, Task
from unified.policy.base import Policy, PolicyOutput, PolicyRequest
from unified.sandbox.hostenv import redact_host_secrets
from unified.types import Episode, EpisodeResult, Message, Observation, Step, ToolCall


SCHEDULING = ("auto", "rounds", "continuous")
"""``rounds``: every episode in flight waits for one batched ``policy.generate`` per round.
``continuous``: each episode is submitted when it is ready (``policy.submit`` / ``poll``) and its
next turn starts as soon as its environment step returns (continuous batching).
``auto``: continuous when the policy supports it (``hf`` on an SDPA model), else rounds."""


@dataclass
class Job:
    """One (task, trial) to run."""

    task: Task
    trial: int = 0


@dataclass
class _Running:
    job: Job
    env: Environment
    prompting: PromptingModule
    episode: Episode
    started: float
    steps_in_turn: int = 0
    tokens: int = 0
    context: dict[str, Any] = field(default_factory=dict)


def _error_observation(call: ToolCall, text: str) -> Observation:
    return Observation(call_id=call.id, content=text, is_error=True, metadata={"source": "agent_loop"})


class AgentLoop:
    """Runs jobs of one adapter with one policy; ``run`` returns when all jobs are done."""

    def __init__(self, adapter: Adapter, policy: Policy, *, prompting: str = "act",
                 prompting_options: dict[str, Any] | None = None, limits: AgentLimits = AgentLimits(),
                 max_in_flight: int = 8, env_workers: int = 8, model_name: str = "",
                 on_result: Callable[[EpisodeResult, Episode], None] | None = None,
                 on_round: Callable[[int, int], None] | None = None, scheduling: str = "auto") -> None:
        self.adapter, self.policy = adapter, policy
        self.prompting_name, self.prompting_options = prompting, dict(prompting_options or {})
        self.limits, self.max_in_flight, self.env_workers = limits, max(1, max_in_flight), max(1, env_workers)
        self.model_name = model_name or policy.model
        self.on_result = on_result
        self.on_round = on_round
        if scheduling not in SCHEDULING:
            raise ValueError(f"scheduling must be one of {', '.join(SCHEDULING)}, got {scheduling!r}")
        self.scheduling = scheduling
        make_prompting(prompting, **self.prompting_options)  # fail early on an unknown name

    # ----------------------------------------------------------------------------------
    def run(self, jobs: list[Job], finished_ids: set[str] | None = None) -> list[EpisodeResult]:
        """Run every job; ``finished_ids`` are task ids already done (dependencies of a resume)."""
        done: set[str] = set(finished_ids or ())
        pending = list(jobs)
        scheduled_ids = {j.task.id for j in jobs}
        remaining: dict[str, int] = {}
        for job in jobs:
            remaining[job.task.id] = remaining.get(job.task.id, 0) + 1
        running: list[_Running] = []
        results: list[EpisodeResult] = []
        continuous = self.uses_continuous_batching
        waiting: dict[int, _Running] = {}  # episodes whose next turn the policy is generating
        stepping: dict[Future, tuple[_Running, Step, list[ToolCall]]] = {}  # environment steps under way
        with ThreadPoolExecutor(max_workers=self.env_workers) as pool:
            while pending or running:
                admitted = self._admit(pending, running, scheduled_ids, done, remaining, results)
                if not running:
                    if pending:  # a dependency cycle or a dependency that crashed before opening
                        job = pending.pop(0)
                        job.task.depends_on = []
                        pending.insert(0, job)
                    continue
                if continuous:
                    unsent = [state for state in admitted if not self._submit(state, waiting)]
                    finished = unsent + self._advance(waiting, stepping, pool)
                else:
                    finished = self._round(running, pool)
                for state in finished:
                    running.remove(state)
                    results.append(self._finish(state))
                    self._mark_done(state.job, remaining, done)
                if self.on_round and (finished or not continuous):
                    self.on_round(len(running), len(pending))
        return results

    @property
    def uses_continuous_batching(self) -> bool:
        """True when episodes go to the policy one by one as they become ready (``scheduling``)."""
        if self.scheduling == "rounds":
            return False
        supported = bool(getattr(self.policy, "supports_continuous_batching", False))
        if self.scheduling == "continuous" and not supported:
            raise ValueError(f"scheduling='continuous' needs a policy that supports it; {self.policy.name!r} does not")
        return supported

    def _admit(self, pending: list[Job], running: list[_Running], scheduled_ids: set[str], done: set[str],
               remaining: dict[str, int], results: list[EpisodeResult]) -> list[_Running]:
        """Open jobs whose dependencies are finished (or not part of this run) up to ``max_in_flight``."""
        admitted = []
        i = 0
        while len(running) < self.max_in_flight and i < len(pending):
            deps = pending[i].task.depends_on
            if all(d in done or d not in scheduled_ids for d in deps):
                job = pending.pop(i)
                state = self._open(job, results)
                if state is None:
                    self._mark_done(job, remaining, done)
                else:
                    running.append(state)
                    admitted.append(state)
            else:
                i += 1
        return admitted

    @staticmethod
    def _mark_done(job: Job, remaining: dict[str, int], done: set[str]) -> None:
        remaining[job.task.id] -= 1
        if remaining[job.task.id] == 0:
            done.add(job.task.id)

    # ----------------------------------------------------------------------------------
    def _open(self, job: Job, results: list[EpisodeResult]) -> _Running | None:
        task = job.task
        episode = Episode(benchmark=self.adapter.name, task_id=task.id, trial=job.trial, model=self.model_name,
                          started_at=time.time(), metadata={"prompting": self.prompting_name})
        if task.skip_reason:
            result = EpisodeResult(benchmark=self.adapter.name, task_id=task.id, trial=job.trial, score=0.0,
                                   skipped=task.skip_reason)
            episode.stop_reason = StopReason.SKIPPED
            self._emit(result, episode, results)
            return None
        env = None
        try:
            env = self.adapter.open(task)
            env.__enter__()
            prompting = make_prompting(self.prompting_name, **self.prompting_options)
            system = prompting.system_prompt(env.system_prompt)
            if system:
                episode.messages.append(Message(role="system", content=system))
            if getattr(env, "assistant_greeting", None):
                episode.messages.append(Message(role="assistant", content=env.assistant_greeting))
            episode.messages.append(Message(role="user", content=env.first_user_message))
            episode.tools = list(env.tools)
            episode.metadata.update(env.metadata)
        except Exception:
            if env is not None:
                try:
                    env.__exit__(None, None, None)
                except Exception:
                    pass
            episode.stop_reason, episode.error = StopReason.ERROR, traceback.format_exc()
            self._emit(self._crash_result(job, episode.error), episode, results)
            return None
        context = {"task": task, "adapter": self.adapter} if getattr(self.policy, "needs_context", False) else {}
        return _Running(job=job, env=env, prompting=prompting, episode=episode, started=time.monotonic(),
                        context=context)

    def _crash_result(self, job: Job, error: str) -> EpisodeResult:
        return EpisodeResult(benchmark=self.adapter.name, task_id=job.task.id, trial=job.trial, score=0.0,
                             passed=False, error=error)

    def _emit(self, result: EpisodeResult, episode: Episode, results: list[EpisodeResult]) -> None:
        results.append(self._deliver(result, episode))

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
    def _request(self, state: _Running) -> PolicyRequest:
        view = state.prompting.before_policy(list(state.episode.messages))
        return PolicyRequest(messages=[m.to_chat() for m in view], tools=[t.to_openai() for t in state.env.tools],
                             context=state.context, prefix=getattr(state.prompting, "response_prefix", str)(),
                             deadline=state.started + self.limits.max_seconds)

    @staticmethod
    def _crashed(state: _Running, where: str) -> None:
        """Record the exception being handled as the episode's error (the episode then ends)."""
        state.episode.stop_reason = StopReason.ERROR
        state.episode.error = f"{where}:\n{traceback.format_exc()}"

    def _round(self, running: list[_Running], pool: ThreadPoolExecutor) -> list[_Running]:
        """Rounds: one policy call for every running episode, then their environment steps."""
        finished: list[_Running] = []
        asking, requests = [], []
        for state in running:
            try:
                requests.append(self._request(state))
                asking.append(state)
            except Exception:
                self._crashed(state, "building the policy request failed")
                finished.append(state)
        t0 = time.perf_counter()
        try:
            outputs = self.policy.generate(requests) if requests else []
            if len(outputs) != len(requests):
                raise RuntimeError(f"the policy returned {len(outputs)} outputs for {len(requests)} requests")
        except Exception as exc:  # the whole batch failed: every episode records it
            outputs = [exc] * len(requests)
        gen_seconds = time.perf_counter() - t0
        to_step: list[tuple[_Running, Step, list[ToolCall]]] = []
        for state, output in zip(asking, outputs):
            ended, step, calls = self._take_output(state, output, gen_seconds)
            if ended:
                finished.append(state)
            elif calls:
                to_step.append((state, step, calls))
        futures = [(state, step, calls, pool.submit(self._step_env, state, calls)) for state, step, calls in to_step]
        for state, step, calls, future in futures:
            if self._take_observations(state, step, calls, future):
                finished.append(state)
        return finished

    def _submit(self, state: _Running, waiting: dict[int, _Running]) -> bool:
        """Queue the episode's next turn; False (the episode ended with its error) when that fails."""
        try:
            request = self._request(state)
            waiting[id(state)] = state
            self.policy.submit(id(state), request)
        except Exception:
            waiting.pop(id(state), None)
            self._crashed(state, "submitting the policy request failed")
            return False
        return True

    def _advance(self, waiting: dict[int, _Running], stepping: dict[Future, tuple[_Running, Step, list[ToolCall]]],
                 pool: ThreadPoolExecutor) -> list[_Running]:
        """Continuous batching: one ``policy.poll()`` (one decode step of every waiting episode), then
        every finished environment step; an episode goes back to the policy as soon as it is ready."""
        finished: list[_Running] = []
        if waiting:
            try:
                polled = self.policy.poll()
            except Exception as exc:  # the engine failed: every waiting episode records it
                polled = [(key, exc) for key in list(waiting)]
            for key, output in polled:
                state = waiting.pop(key, None)
                if state is None:  # a request the policy already reported (it failed in an earlier poll)
                    continue
                ended, step, calls = self._take_output(state, output, getattr(output, "seconds", 0.0))
                if ended:
                    finished.append(state)
                elif calls:
                    stepping[pool.submit(self._step_env, state, calls)] = (state, step, calls)
                elif not self._submit(state, waiting):
                    finished.append(state)
        if stepping:
            ready = [f for f in stepping if f.done()]
            if not ready and not waiting:
                ready = list(wait(stepping, return_when=FIRST_COMPLETED).done)
            for future in ready:
                state, step, calls = stepping.pop(future)
                if self._take_observations(state, step, calls, future) or not self._submit(state, waiting):
                    finished.append(state)
        return finished

    def _take_output(self, state: _Running, output: PolicyOutput | Exception,
                     gen_seconds: float) -> tuple[bool, Step | None, list[ToolCall]]:
        """Record one policy output: ``(ended, step, calls)``; ``calls`` are for ``env.step``, and an
        episode that neither ended nor called a tool goes straight back to the policy. Whatever the
        output holds, an exception raised here ends this episode only (recorded as its error)."""
        try:
            return self._record_output(state, output, gen_seconds)
        except Exception:
            self._crashed(state, "handling the policy output failed")
            return True, None, []

    def _record_output(self, state: _Running, output: PolicyOutput | Exception,
                       gen_seconds: float) -> tuple[bool, Step | None, list[ToolCall]]:
        episode = state.episode
        if isinstance(output, Exception):
            episode.stop_reason = StopReason.ERROR
            episode.error = "".join(traceback.format_exception(output)) or repr(output)
            return True, None, []
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
            return True, step, []
        if calls and state.env.malformed_call_ends_turn and all(c.parse_error is not None for c in calls):
            step.extras["turn_ended_by"] = "malformed_calls"  # the benchmark's rule (e.g. bfcl's handlers)
        elif calls:
            return False, step, calls
        try:
            follow_up = state.env.next_user_turn(episode)
        except Exception:
            episode.stop_reason, episode.error = StopReason.ERROR, traceback.format_exc()
            return True, step, []
        if follow_up is None:
            episode.stop_reason = StopReason.ANSWER
            return True, step, []
        episode.messages.append(Message(role="user", content=follow_up))
        episode.tools = list(state.env.tools)
        state.steps_in_turn = 0
        return self._limit_hit(state), step, []

    def _take_observations(self, state: _Running, step: Step, calls: list[ToolCall], future: Future) -> bool:
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

    def _limit_hit(self, state: _Running) -> bool:
        episode, limits = state.episode, self.limits
        reason: StopReason | None = None
        if len(episode.steps) >= limits.max_turns:
            reason = StopReason.MAX_TURNS
        elif state.steps_in_turn >= limits.max_steps_per_user_turn:
            reason = StopReason.MAX_STEPS_PER_TURN
        elif state.tokens >= limits.max_completion_tokens:
            reason = StopReason.MAX_TOKENS
        elif time.monotonic() - state.started >= limits.max_seconds:
            reason = StopReason.TIMEOUT
        if reason:
            episode.stop_reason = reason
            episode.metadata["limit_hit"] = reason.value
        return bool(reason)

    @staticmethod
    def _step_env(state: _Running, calls: list[ToolCall]) -> tuple[list[Observation], float]:
        t0 = time.perf_counter()
        offered = {t.name for t in state.env.tools}
        if state.env.steps_unoffered_calls:  # the environment answers unknown names itself (bfcl executes them)
            offered |= {c.name for c in calls}
        valid = [c for c in calls if c.parse_error is None and c.name in offered]
        message = next(m for m in reversed(state.episode.messages) if m.role == "assistant")
        answers = state.env.step(valid, message) if valid else []
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

    # ----------------------------------------------------------------------------------
    def _finish(self, state: _Running) -> EpisodeResult:
        episode, job = state.episode, state.job
        episode.wall_seconds = time.monotonic() - state.started
        try:
            if episode.error:
                result = self._crash_result(job, episode.error)
            else:
                try:
                    result = self.adapter.score(job.task, episode, state.env)
                    if not isinstance(result, EpisodeResult):
                        raise TypeError(f"{type(self.adapter).__name__}.score returned {type(result).__name__}, "
                                        "not an EpisodeResult")
                    result.trial = job.trial
                except Exception:
                    result = self._crash_result(job, "scoring failed:\n" + traceback.format_exc())
        finally:
            try:
                state.env.__exit__(None, None, None)
            except Exception:
                episode.metadata["stop_error"] = traceback.format_exc()
        return self._deliver(result, episode)
