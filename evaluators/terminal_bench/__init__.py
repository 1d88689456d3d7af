"""Terminal-Bench 2.0 adapter: task folders, harbor's Terminus-2 agent (or a tool-calling one), the task's own tests.

Config keys (``--set benchmarks.terminal_bench_2.KEY=VALUE``):

``agent``           ``terminus_2`` (default: harbor's Terminus-2 itself, run by the interpreter of
                    ``make harbor``, over our sandbox and the eval's policy; see :mod:`.terminus`) or
                    ``tool_calling`` (our ``send_keys``/``task_complete`` agent, :mod:`.environment`;
                    named in ``not_comparable_because``)
``harbor_python``   the interpreter with ``harbor==0.25.0`` (default ``$UNIFIED_HARBOR_PYTHON``, else
                    ``.venv-harbor/bin/python``)
``terminus_parser`` ``json`` (default, as harbor) or ``xml``: Terminus-2's prompt template and parser
``terminus_model``  the model name Terminus-2 counts tokens and looks limits up with (litellm's names;
                    default ``openai/policy``); ``terminus_context_limit`` / ``terminus_output_limit``
                    set them instead (default: harbor's lookup, 1,000,000 tokens for unknown names)
``terminus_summarize`` Terminus-2's context summarisation (default true, as harbor)

``root``            directory of task folders (default ``$TERMINAL_BENCH_ROOT``, else
                    ``$UNIFIED_FIXTURES_DIR/terminal_bench``; see :mod:`.tasks`)
``backend``         ``local``, ``docker``, ``podman``, ``apptainer`` or ``auto`` (default
                    ``$UNIFIED_EXEC_BACKEND`` or auto; see :mod:`unified.execution`)
``tasks``           only these task ids (comma-separated)
``network``         ``task`` (default: as the task says, and Harbor's default, on, when it says
                    nothing), ``off`` (cut it for every task) or ``on``
``network_off``     task ids whose network is cut whatever the above (comma-separated)
``build``           ``auto`` (default, as Harbor: the task's prebuilt ``docker_image`` when it names
                    one, its ``environment/Dockerfile`` otherwise) or ``always`` (build the Dockerfile
                    when there is one, Harbor's ``--force-build``). The ``local`` backend always
                    replays the Dockerfile (it has no images) and skips, with the reason, the tasks
                    whose build or verifier needs root or the network (:mod:`.local_support`)
``exec_timeout_s``  limit of one tmux/exec call (default 180)
``agent_timeout_s`` override every task's ``[agent] timeout_sec`` (default: the task's)

Score: the verifier's reward (1 = tests pass, 0 = not); the official protocol is 5 runs a
task, aggregate = mean reward in percent (per-task mean over runs, then mean over tasks, which
equals the mean over all runs when every task has 5). Results record the backend, image and
network that ran; the aggregate says when the run is not comparable with published numbers
(``comparable``, ``not_comparable_because``; a run on a base rebuilt by
:mod:`unified.execution.images` says so). A verifier that could not run (its tools failed to
download) is ``error: infrastructure``, listed and left out of the score (:mod:`.infra`), but only
when the task's verifier fails the same way on a fresh environment without the agent (run once per
task and run; the output that shows the failure is the agent's to shape).
"""

from __future__ import annotations

import dataclasses
import math
import shlex
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from unified.benchmarks import bounded
from unified.benchmarks.contract import (SCORING_FAILED_AFTER_AGENT, Adapter, AgentLimits, BenchmarkUnavailable,
                                         Environment, PaperReference, RunContext, Task)
from unified.benchmarks.helpers import config_list, limit_runnable, require_execution_backend
from unified.benchmarks.aggregate import avg_at_k, partition, per_trial, scores_by_task
from unified.execution.infra import NOT_REPRODUCED, InfrastructureBaselines
from unified.types import Episode, EpisodeResult, ToolCall

from evaluators.terminal_bench.environment import MAX_WAIT_S, TerminalBenchEnvironment
from evaluators.terminal_bench.infra import verifier_infrastructure_error
from evaluators.terminal_bench.local_support import local_blockers
from evaluators.terminal_bench.tasks import TBTask, load_tasks, resolve_root
from evaluators.terminal_bench import taskset
from evaluators.terminal_bench.terminus import (TerminusEnvironment, differences, logs_dir_for, require_harbor_python,
                                                user_sampling)

__all__ = ["TerminalBench2Adapter", "aggregate_rewards"]

NO_LOOP_CAP = {"max_turns": 10**9, "max_episode_tokens": 10**12, "max_seconds": 10.0**9}
"""Harbor's Terminus-2 has no cap on episodes (its ``max_turns`` defaults to 1,000,000), tokens or wall
time besides the task's agent timeout (watched by the environment): the loop's own limits are lifted
to these unreachable values unless the user set them."""
PAPER_AGENT_TIMEOUT_S = 10800.0
"""The paper's Terminal-Bench 2.0 agent timeout, 3 h a task (``agent_timeout_s=10800``)."""



def aggregate_rewards(results: list[EpisodeResult]) -> dict[str, Any]:
    """Mean reward in percent: per task over its runs, then over tasks; plus per-run means.

    ``score = 100 * mean_t( mean_r reward[t, r] )`` over scored tasks; ``per_run[r]`` is the
    mean over tasks of run ``r`` (its spread is what "mean over 5 runs" averages out).
    ``not_comparable_because`` lists what in the run's setup separates it from the published protocol
    (the report adds skips, errors and missing trials itself).
    """
    parts = partition(results)
    scored = parts.scored
    by_task = scores_by_task(scored)
    per_run = per_trial(scored)
    skipped_tasks, errored = parts.skipped_tasks, parts.errored
    backends = sorted({str(r.details.get("backend")) for r in scored if r.details.get("backend")})
    reasons = []
    if "local" in backends:
        reasons.append("local sandbox instead of the task's Docker image")
    cut = sorted({r.task_id for r in scored if r.details.get("network") is False
                  and r.details.get("task_network") is not False})
    if cut:
        reasons.append(f"network off for {len(cut)} task(s) that have it under Harbor")
    rebuilt = sorted({str(r.details["rebuilt_base"]) for r in scored if r.details.get("rebuilt_base")})
    if rebuilt:
        reasons.append("rebuilt from the Dockerfile on a local base, not the published image: " + "; ".join(rebuilt))
    tampered = sorted({r.task_id for r in scored if r.details.get("tampered")})
    if tampered:
        reasons.append(f"{sum(1 for r in scored if r.details.get('tampered'))} episode(s) scored 0 because the agent "
                       f"changed the verifier's toolchain (Harbor would trust it): {', '.join(tampered)}")
    if any(r.details.get("agent") == "tool_calling" for r in scored):
        reasons.append("the tool-calling send_keys/task_complete agent (agent=tool_calling), not Terminus-2 "
                       "(the paper's agent)")
    reasons += differences([r.details for r in scored])
    runs = max((len(v) for v in by_task.values()), default=0)
    # skipped/errored tasks and fewer trials than the protocol are added by the report (unified.eval.report)
    return {"score": avg_at_k(by_task), "tampered": tampered,
            "metric": "accuracy (%), mean over runs", "n_tasks": len(by_task), "n_episodes": len(scored),
            "runs": runs, "per_run": per_run,
            "run_std": statistics.pstdev(per_run.values()) if len(per_run) > 1 else 0.0,
            "skipped": len(parts.skipped), "skipped_tasks": skipped_tasks,
            "errored": len(errored), "backends": backends,
            "comparable": not reasons, "not_comparable_because": reasons}


@dataclass
class TerminalBench2Config:
    """Settings of the Terminal-Bench 2.0 adapter (``--set benchmarks.terminal_bench_2.KEY=VALUE``;
    module docstring)."""

    root: str | None = None
    """Directory of task folders (None: ``$TERMINAL_BENCH_ROOT``, else the fixtures)."""
    task_set_version: str | None = None
    """The task set's version ("2.0", "2.1"; None: what the checkout says, :mod:`.taskset`)."""
    backend: str | None = None
    """``local``, ``docker``, ``podman``, ``apptainer`` or ``auto`` (None: ``$UNIFIED_EXEC_BACKEND`` or auto)."""
    tasks: list[str] | str | None = None
    """Only these task ids (a list or comma-separated; None: all)."""
    exec_timeout_s: float = bounded(180.0, gt=0)
    """Wall time of one tmux/exec call."""
    agent_timeout_s: float | None = bounded(None, gt=0)
    """Overrides every task's ``[agent] timeout_sec`` (None: the task's)."""
    network: Literal["task", "on", "off"] = "task"
    """``task``: as the task says (Harbor's default, on, when silent); ``off``/``on`` for every task."""
    network_off: list[str] | str | None = None
    """Task ids whose network is cut whatever ``network`` says (a list or comma-separated)."""
    build: Literal["auto", "always"] = "auto"
    """``auto``: the task's prebuilt image when it names one, else its Dockerfile; ``always``: build."""
    agent: Literal["terminus_2", "tool_calling"] = "terminus_2"
    """``terminus_2``: harbor's Terminus-2 (:mod:`.terminus`); ``tool_calling``: our send_keys agent."""
    harbor_python: str | None = None
    """Interpreter with harbor (None: ``$UNIFIED_HARBOR_PYTHON``, else ``.venv-harbor/bin/python``)."""
    terminus_parser: Literal["json", "xml"] = "json"
    """Terminus-2's response format: its prompt template and parser (harbor's default: json)."""
    terminus_model: str = "openai/policy"
    """The litellm model name Terminus-2 counts tokens and looks the context limit up with."""
    terminus_context_limit: int | None = bounded(None, ge=1)
    """Context tokens Terminus-2 plans its summarisation with (None: harbor's lookup for terminus_model)."""
    terminus_output_limit: int | None = bounded(None, ge=1)
    """Output tokens Terminus-2 names when an answer was cut (None: harbor's lookup)."""
    terminus_summarize: bool = True
    """Terminus-2's context summarisation (harbor's default: on)."""

    def __post_init__(self) -> None:
        self.tasks, self.network_off = config_list(self.tasks), config_list(self.network_off)


class TerminalBench2Adapter(Adapter):
    """Terminal-Bench 2.0 (5 runs a task)."""

    name = "terminal_bench_2"
    suites = ("in_domain",)
    suite_position = 1
    world_model_domain = "terminal"
    paper_reference = PaperReference("Terminal-Bench 2.0 (5 runs)", 33.25, 39.55)
    runs_default = 5
    Config = TerminalBench2Config

    def __init__(self, **config: Any) -> None:
        super().__init__(**config)
        self.oracle_tasks: set[str] = set()
        """Tasks whose gold solution was asked for: their environments get ``solution/`` copied in."""
        self.loop_caps: dict[str, Any] = {}
        """The loop limits a user set on a Terminus-2 run (:meth:`agent_limits`), recorded per result."""
        self.task_set: dict[str, Any] | None = None
        """The task set's identity (:mod:`.taskset`), read with the tasks."""
        self.infrastructure_baselines = InfrastructureBaselines()
        """Each task's verifier on a fresh environment without the agent, once per run (:mod:`unified.execution.infra`)."""

    def _backend(self):
        return require_execution_backend(self.settings.backend)

    def tasks(self, split: str | None = None, limit: int | None = None) -> list[Task]:
        if self.settings.agent == "terminus_2":
            require_harbor_python(self.settings.harbor_python)
        root = resolve_root(self.settings.root)
        parsed, broken = load_tasks(root)
        self.task_set = self._task_set_of(root, parsed)
        backend = self._backend()
        out = []
        for t in parsed:
            if self.settings.tasks and t.id not in self.settings.tasks:
                continue
            if split not in (None, "", "all") and split not in (t.category, t.difficulty, t.id):
                continue
            reason = t.skip_reason
            if reason is None and backend.name == "local":
                reason = local_blockers(t.path, t.build_context is not None, t.docker_image)
                reason = f"local backend cannot run it: {reason}" if reason else None  # category first: reports group by it
            out.append(Task(id=t.id, benchmark=self.name, split=t.category, group=t.difficulty,
                            payload=t.to_payload(), skip_reason=reason))
        if not self.settings.tasks:
            out += [Task(id=name, benchmark=self.name, split="unparseable", skip_reason=err) for name, err in broken]
        if not out and not broken:
            raise BenchmarkUnavailable(f"no task folders (with task.toml) under {root}",
                                       "point root/$TERMINAL_BENCH_ROOT at the task repository")
        return limit_runnable(out, limit)

    @classmethod
    def sent_request_settings(cls, config: dict[str, Any], sampling: Any) -> dict[str, Any]:
        """Terminus-2 (the default agent) sends through harbor's LiteLLM client no temperature and no
        max_tokens of its own: only the sampling fields the user set away from the library's defaults
        (:func:`.terminus.user_sampling`); the tool-calling agent sends the run's sampling."""
        if str(config.get("agent", "terminus_2")) != "terminus_2":
            return super().sent_request_settings(config, sampling)
        return {**user_sampling(sampling),
                "source": "harbor's Terminus-2 via LiteLLM: no sampling field unless the user set one (the library's "
                          "--temperature / --max-new-tokens defaults are not sent)"}

    def _task_set_of(self, root: Any, parsed: list[TBTask]) -> dict[str, Any]:
        return taskset.identity(root, {t.id: t.path for t in parsed}, self.settings.task_set_version)

    def read_task_set(self) -> dict[str, Any]:
        """The identity of the task set under ``root`` (:mod:`.taskset`), kept for :meth:`aggregate`."""
        root = resolve_root(self.settings.root)
        self.task_set = self._task_set_of(root, load_tasks(root)[0])
        return self.task_set

    def _task(self, task: Task) -> TBTask:
        t = TBTask(**task.payload)
        if self.settings.agent_timeout_s is not None:
            t.agent_timeout_s = float(self.settings.agent_timeout_s)
        return t

    def network_for(self, t: TBTask, backend_name: str | None = None) -> tuple[bool, str]:
        """(network on?, why): the task's (Harbor's default: on), cut by ``network``/``network_off``,
        and on the ``local`` backend, which never has the network (unless forced on: then it refuses the task)."""
        if t.id in self.settings.network_off:
            return False, "cut by the adapter's network_off"
        if self.settings.network == "off":
            return False, "cut by the adapter's network=off"
        if self.settings.network == "on":
            return True, "forced on by the adapter's network=on"
        if backend_name == "local" and t.network:
            return False, "cut: the local backend has no network (it would share the host's loopback)"
        return t.network, t.network_source

    def image_for(self, t: TBTask, backend_name: str) -> tuple[str | None, str | None]:
        """(image, build context) to start: the prebuilt image unless building is asked or needed."""
        if backend_name == "local":
            return t.docker_image, t.build_context
        if t.docker_image and not (self.settings.build == "always" and t.build_context):
            return t.docker_image, None
        return None, t.build_context

    def agent_limits(self, limits: AgentLimits) -> AgentLimits:
        """Harbor's limits for Terminus-2: the task's agent timeout and no turn, token or wall-time cap of
        the loop (:data:`NO_LOOP_CAP`). A limit the user set (any value other than the library's default)
        is kept, recorded in every result (``loop_caps``) and named in ``not_comparable_because``; the
        tool-calling agent keeps the run's limits."""
        if self.settings.agent != "terminus_2":
            return limits
        default = AgentLimits()
        kept = {k: getattr(limits, k) for k in NO_LOOP_CAP if getattr(limits, k) != getattr(default, k)}
        self.loop_caps = kept
        return dataclasses.replace(limits, **{k: v for k, v in NO_LOOP_CAP.items() if k not in kept})

    def open(self, task: Task, *, run: RunContext = RunContext()) -> Environment:
        return self._environment(task, run, self.settings.agent)

    def _environment(self, task: Task, run: RunContext, agent: str) -> TerminalBenchEnvironment:
        """The task's environment for ``agent`` (``tool_calling``: the terminal alone, no harbor bridge)."""
        t = self._task(task)
        backend = self._backend()
        image, context = self.image_for(t, backend.name)
        network, why = self.network_for(t, backend.name)
        common = dict(exec_timeout_s=self.settings.exec_timeout_s, image=image, build_context=context,
                      network=network, network_source=why, oracle_requested=lambda: task.id in self.oracle_tasks)
        if agent == "tool_calling":
            return TerminalBenchEnvironment(t, backend, **common)
        s = self.settings
        return TerminusEnvironment(t, backend, harbor_python=require_harbor_python(s.harbor_python),
                                   logs_dir=logs_dir_for(run.work_dir, task.id), parser_name=s.terminus_parser,
                                   model_name=s.terminus_model, enable_summarize=s.terminus_summarize,
                                   context_limit=s.terminus_context_limit, output_limit=s.terminus_output_limit,
                                   sampling=run.sampling, policy_backend=run.policy_backend, **common)

    def score(self, task: Task, episode: Episode, env: Environment) -> EpisodeResult:
        assert isinstance(env, TerminalBenchEnvironment)
        try:
            details = env.run_verifier()
        except Exception as exc:  # noqa: BLE001 - the agent's actions can make it raise: a 0, counted (issue 42 R2)
            details = {"reward": None, "status": SCORING_FAILED_AFTER_AGENT,
                       "grader_error": f"the verifier could not run after the agent acted: {type(exc).__name__}: "
                                       f"{str(exc)[-500:]}"}
        details["task_complete_called"] = env.completed
        details["agent_timed_out"] = bool(env.metadata.get("agent_timed_out"))
        details["task_network"] = env.task.network
        details["image"], details["built_from"] = env.image, env.build_context
        details["agent"] = "terminus_2" if isinstance(env, TerminusEnvironment) else "tool_calling"
        if isinstance(env, TerminusEnvironment):
            details.update({k: v for k, v in env.terminus.items() if k != "agent"})
            if self.loop_caps:
                details["loop_caps"] = dict(self.loop_caps)
        if episode.metadata.get("limit_hit"):
            details["loop_limit"] = episode.metadata["limit_hit"]
        details.update({k: v for k, v in env.metadata.get("execution", {}).items()
                        if k.startswith("rebuilt_base") or k == "pristine_toolchain"})  # which toolchain verified
        checkable = env.session is not None and not details.get("tampered") and "grader_error" not in details  # a changed toolchain's output proves nothing
        infra = verifier_infrastructure_error(env.task.path, env.read_verifier_file, details) if checkable else None
        if infra is not None:  # the output that shows it is the agent's to shape: does it fail without the agent?
            image = env.session.image_digest() if env.session is not None else ""
            env.stop()  # closed first: nothing of the episode's (a disk it filled) weighs on the baseline
            evidence, infra = infra, self.infrastructure_baselines.confirm(
                task.id, infra, lambda: self._verifier_without_agent(task), image=image)
            if infra is None:
                details["infrastructure_unconfirmed"] = f"{NOT_REPRODUCED}\n{evidence}"
        reward = details.get("reward")
        score = float(reward) if reward is not None and infra is None else 0.0
        return EpisodeResult(benchmark=self.name, task_id=task.id, trial=episode.trial, score=score,
                             passed=None if infra else score >= 1.0, details=details, error=infra)

    def _verifier_without_agent(self, task: Task) -> str | None:
        """The task's verifier on a fresh environment from the same image, no agent action: its infrastructure error."""
        with self._environment(task, RunContext(), "tool_calling") as env:  # no agent: no harbor bridge either
            details = env.run_verifier()
            return verifier_infrastructure_error(env.task.path, env.read_verifier_file, details)

    def aggregate(self, results: list[EpisodeResult], *, run: RunContext = RunContext()) -> dict[str, Any]:
        """:func:`aggregate_rewards`, with the task set's identity compared with the paper's
        (:mod:`.taskset`; a 2.1 run is named 2.1 and not comparable) and harbor's denominator rule."""
        out = aggregate_rewards(results)
        task_set = self.task_set
        if task_set is None:
            task_set = {"version": self.settings.task_set_version,
                        "version_source": "task_set_version in the adapter config" if self.settings.task_set_version
                        else "the task list was not read in this process"}
        out["task_set"] = task_set
        out["task_set_paper"] = dict(taskset.PAPER_TASK_SET)
        if task_set.get("version"):
            out["metric"] += f", Terminal-Bench {task_set['version']}"
        reasons = taskset.comparison(task_set)
        out["not_comparable_because"] = list(out["not_comparable_because"]) + reasons
        out["comparable"] = out["comparable"] and not reasons
        out["denominator_rule"] = taskset.HARBOR_DENOMINATOR_RULE
        return out

    # -- gold: type the reference solution into the terminal -----------------------------

    def gold_turns(self, task: Task) -> list[list[ToolCall]]:
        """The oracle: ``solution/`` is copied to ``/solution`` (see the environment), then ``solve.sh``
        runs from the terminal with ``[solution] env``, its output in ``/logs/agent/oracle.txt``."""
        t = TBTask(**task.payload)
        if not (Path(t.path) / "solution" / "solve.sh").is_file():
            raise NotImplementedError(f"{t.id}: no solution/solve.sh")
        self.oracle_tasks.add(task.id)
        env = {"DEBIAN_FRONTEND": "noninteractive", **t.solution_env}
        assignments = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
        keys = f"env {assignments} bash /solution/solve.sh > /logs/agent/oracle.txt 2>&1 < /dev/null\n"
        timeout = self._task(task).agent_timeout_s
        calls = [ToolCall(name="send_keys", arguments={"keystrokes": keys, "duration": MAX_WAIT_S}, id="gold_0")]
        for i in range(max(0, math.ceil(timeout / MAX_WAIT_S) - 1)):  # keep waiting while solve.sh runs
            calls.append(ToolCall(name="send_keys", arguments={"keystrokes": "", "duration": MAX_WAIT_S,
                                                               "press_enter": False}, id=f"gold_wait_{i}"))
        calls.append(ToolCall(name="task_complete", arguments={}, id="gold_done"))
        return [calls]

    def gold_answer(self, task: Task) -> str | None:
        return "Done."
