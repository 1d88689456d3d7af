"""Terminal-Bench 2.0 adapter: task folders, a Terminus-2-style tmux agent, the task's own tests.

Config keys (``--set benchmarks.terminal_bench_2.KEY=VALUE``):

``root``            directory of task folders (default ``$TERMINAL_BENCH_ROOT``, else
                    ``$UNIFIED_FIXTURES_DIR/terminal_bench``; see :mod:`.tasks`)
``backend``         ``local``, ``docker``, ``podman``, ``apptainer`` or ``auto`` (default
                    ``$UNIFIED_EXEC_BACKEND`` or auto; see :mod:`unified.execution`)
``tasks``           only these task ids (comma-separated)
``exec_timeout_s``  limit of one tmux/exec call (default 180)
``agent_timeout_s`` override every task's ``[agent] timeout_sec`` (default: the task's)

Score: the verifier's reward (1 = tests pass, 0 = not); the official protocol is 5 runs a
task, aggregate = mean reward in percent (per-task mean over runs, then mean over tasks, which
equals the mean over all runs when every task has 5). Results record the backend that ran.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from unified.eval.adapter import Adapter, BenchmarkUnavailable, Environment, Task, config_list, require_execution_backend
from unified.types import Episode, EpisodeResult, ToolCall

from evaluators.terminal_bench.environment import TerminalBenchEnvironment
from evaluators.terminal_bench.tasks import TBTask, load_tasks, resolve_root

__all__ = ["TerminalBench2Adapter", "aggregate_rewards"]



def aggregate_rewards(results: list[EpisodeResult]) -> dict[str, Any]:
    """Mean reward in percent: per task over its runs, then over tasks; plus per-run means.

    ``score = 100 * mean_t( mean_r reward[t, r] )`` over scored tasks; ``per_run[r]`` is the
    mean over tasks of run ``r`` (its spread is what "mean over 5 runs" averages out).
    """
    scored = [r for r in results if r.skipped is None]
    by_task: dict[str, list[float]] = {}
    by_run: dict[int, list[float]] = {}
    for r in scored:
        by_task.setdefault(r.task_id, []).append(r.score)
        by_run.setdefault(r.trial, []).append(r.score)
    task_means = [statistics.fmean(v) for v in by_task.values()]
    per_run = {str(k): 100.0 * statistics.fmean(v) for k, v in sorted(by_run.items())}
    return {"score": 100.0 * statistics.fmean(task_means) if task_means else 0.0,
            "metric": "accuracy (%), mean over runs", "n_tasks": len(by_task), "n_episodes": len(scored),
            "per_run": per_run, "run_std": statistics.pstdev(per_run.values()) if len(per_run) > 1 else 0.0,
            "skipped": len(results) - len(scored),
            "backends": sorted({str(r.details.get("backend")) for r in scored if r.details.get("backend")})}


class TerminalBench2Adapter(Adapter):
    """Terminal-Bench 2.0 (5 runs a task)."""

    name = "terminal_bench_2"
    runs_default = 5

    def __init__(self, **config: Any) -> None:
        super().__init__(**config)
        self.root = config.get("root")
        self.backend_name = config.get("backend")
        self.only = config_list(config.get("tasks"))
        self.exec_timeout_s = float(config.get("exec_timeout_s", 180))
        self.agent_timeout_s = config.get("agent_timeout_s")

    def _backend(self):
        return require_execution_backend(self.backend_name)

    def tasks(self, split: str | None = None, limit: int | None = None) -> list[Task]:
        root = resolve_root(self.root)
        parsed, broken = load_tasks(root)
        self._backend()
        out = []
        for t in parsed:
            if self.only and t.id not in self.only:
                continue
            if split not in (None, "", "all") and split not in (t.category, t.difficulty, t.id):
                continue
            out.append(Task(id=t.id, benchmark=self.name, split=t.category, group=t.difficulty,
                            payload=t.to_payload()))
        if not self.only:
            out += [Task(id=name, benchmark=self.name, split="unparseable", skip_reason=err) for name, err in broken]
        if not out and not broken:
            raise BenchmarkUnavailable(f"no task folders (with task.toml) under {root}",
                                       "point root/$TERMINAL_BENCH_ROOT at the task repository")
        return out[:limit] if limit else out

    def _task(self, task: Task) -> TBTask:
        t = TBTask(**task.payload)
        if self.agent_timeout_s is not None:
            t.agent_timeout_s = float(self.agent_timeout_s)
        return t

    def open(self, task: Task) -> Environment:
        return TerminalBenchEnvironment(self._task(task), self._backend(), exec_timeout_s=self.exec_timeout_s)

    def score(self, task: Task, episode: Episode, env: Environment) -> EpisodeResult:
        assert isinstance(env, TerminalBenchEnvironment)
        details = env.run_verifier()
        details["task_complete_called"] = env.completed
        details["agent_timed_out"] = bool(env.metadata.get("agent_timed_out"))
        reward = details.get("reward")
        score = float(reward) if reward is not None else 0.0
        return EpisodeResult(benchmark=self.name, task_id=task.id, trial=episode.trial, score=score,
                             passed=score >= 1.0, details=details)

    def aggregate(self, results: list[EpisodeResult]) -> dict[str, Any]:
        return aggregate_rewards(results)

    # -- gold: type the reference solution into the terminal -----------------------------

    def gold_turns(self, task: Task) -> list[list[ToolCall]]:
        t = TBTask(**task.payload)
        solve = Path(t.path) / "solution" / "solve.sh"
        if not solve.is_file():
            raise NotImplementedError(f"{t.id}: no solution/solve.sh")
        script = solve.read_text()
        marker = "UNIFIED_GOLD_EOF"
        if marker in script:
            raise NotImplementedError(f"{t.id}: solve.sh contains {marker}")
        keys = f"bash <<'{marker}'\n{script.rstrip()}\n{marker}\n"
        return [[ToolCall(name="send_keys", arguments={"keystrokes": keys, "duration": 60}, id="gold_0"),
                 ToolCall(name="task_complete", arguments={}, id="gold_1")]]

    def gold_answer(self, task: Task) -> str | None:
        return "Done."

