"""Claw-Eval adapter (github.com/claw-eval/claw-eval: 300 tasks, general / multimodal / multi_turn).

Not on PyPI: point the adapter at a checkout with ``$CLAW_EVAL_ROOT`` or
``--set benchmarks.claw_eval.root=PATH``. Config keys (``--set benchmarks.claw_eval.KEY=V``):

``root``              the checkout (default ``$CLAW_EVAL_ROOT``)
``splits``            general, multimodal, multi_turn (comma-separated; default all); ``tasks(split=)`` too
``categories``        restrict to these task categories (comma-separated)
``judge``             the graders' LLM judge: ``openai:URL#MODEL`` or a local checkpoint served on
                      loopback (default ``$CLAW_EVAL_JUDGE``, else ``embedded``; the checkout's own
                      differ per split, read from its configs: the aggregate's ``grading_models``
                      names each one that is not, per split; :func:`official.grading_models`)
``user_model``        the simulated user of multi-turn tasks (same forms; default: the judge)
``judge_max_tokens``  cap on the judge's answer length (default: none, the checkout's own 8192;
                      a cap makes the result not comparable); ``user_max_tokens`` (256)
``sandbox_tools``     offer Bash/Read/Write/Edit/Glob/Grep on a sandboxed workspace (default true,
                      as the benchmark's ``--sandbox`` runs do)
``grader_timeout_s``, ``exec_timeout_s``, ``memory_mb``, ``browser_memory_mb``  limits
``memory_budget_mb``  what the sandboxes in flight may reserve together (default 75% of MemTotal):
                      a trial waits until its sandbox's limit fits (:mod:`evaluators.claw_eval.memory`)

Tasks needing live web search (``web_real``) are skipped unless ``$SERP_DEV_KEY`` is set;
tasks whose fixtures are missing from the checkout are skipped with the file named, and so are
tasks that use a program this machine lacks (ffmpeg, poppler, or Playwright for the web-page tasks
graded from screenshots that their snapshot commands' recording script takes). A snapshot
command that fails (an exit code, a timeout: the agent broke the database, the page never
loaded, no clip was written) is handed to the grader as the benchmark hands it, its exit code and
output, and the trial is graded as the official grader grades it (``details["snapshot_failed"]``
lists it). Only a command this sandbox cannot run at all (exit 126/127: a program the official
image has and ours lacks) makes the trial ``error: infrastructure``, left out of the score. Output
that names a reason of this machine (a recording script exiting 1 because Playwright or its browser
is missing, :data:`INFRASTRUCTURE_MARKERS`) is the agent's to shape (a script it wrote can print
it), so it never takes a trial out of the score by itself: the trial is graded as the official
grader grades it and the lines are kept as ``details["infrastructure_unconfirmed"]`` (the
project's rule for unconfirmed evidence, :mod:`unified.execution.infra`). The
services of a task stay up across its trials and are reset in between (trials running at the
same time get separate services); they are stopped when another task opens, when an episode
fails (crash, or a grader error), and at exit. Scoring: :mod:`evaluators.claw_eval.grading`.
"""

from __future__ import annotations

import os
import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from unified.benchmarks import bounded
from unified.benchmarks.contract import Adapter, BenchmarkUnavailable, Environment, PaperReference, RunContext, Task
from unified.benchmarks.helpers import config_list, judge_reason, limit_runnable
from unified.benchmarks.aggregate import scores_by_task
from unified.execution.infra import infrastructure_error
from unified.types import Episode, EpisodeResult

from evaluators.claw_eval import official
from evaluators.claw_eval.environment import ClawEvalEnvironment
from evaluators.claw_eval.memory import MemoryBudget, default_budget_mb
from evaluators.claw_eval.grading import aggregate_trials, build_trace, is_pass, run_grader, task_score
from evaluators.claw_eval.services import ServiceGroup, ServiceSpec
from evaluators.claw_eval.tasks import SPLITS, ClawTask, load_tasks, resolve_checkout, skip_reason, used_programs
from unified.benchmarks import resolve_endpoint

__all__ = ["ClawEvalAdapter"]

OFFICIAL_JUDGE_MAX_TOKENS = 8192
"""``max_tokens`` of every request in the checkout's ``claw_eval/graders/llm_judge.py``."""
"""The judge ``model_id`` of the checkout's ``config_general.yaml`` / ``config_multimodal.yaml``."""



NOT_RUNNABLE_EXIT_CODES = (126, 127)
"""A shell's exit codes for a command it could not execute or find: our sandbox's failure, not the agent's."""


INFRASTRUCTURE_MARKERS = ("No module named", "Executable doesn't exist", "playwright install",
                          "error while loading shared libraries", "BrowserType.launch")
"""Output of a snapshot command (a recording script) that failed for a reason of this machine, not the
agent's: a Python module or Playwright's browser missing, a library the browser needs, a browser that
could not start. Recorded as unconfirmed evidence beside the grade (module docstring), never a reason by itself to
leave a trial out of the score: the agent can print these words."""


def _infrastructure_reason(output: str) -> str | None:
    for marker in INFRASTRUCTURE_MARKERS:
        at = output.find(marker)
        if at >= 0:
            line_start = output.rfind("\n", 0, at) + 1
            line_end = output.find("\n", at)
            return output[line_start:line_end if line_end >= 0 else None].strip()[:300]
    return None


def failed_snapshot_commands(snapshot: dict[str, Any] | None) -> list[dict[str, str]]:
    """The task's snapshot commands that failed (non-zero exit or timed out), each ``{command, why, exit_code,
    infrastructure}`` with the end of its error output (graded as the benchmark grades them; see the module
    docstring) and, when its output names a reason of this machine (:data:`INFRASTRUCTURE_MARKERS`), that line."""
    out = []
    for key, value in (snapshot or {}).items():
        if key.startswith("cmd:") and isinstance(value, dict) and value.get("exit_code") != 0:
            output = f"{value.get('stderr') or ''}\n{value.get('stdout') or ''}"
            tail = (value.get("stderr") or value.get("stdout") or "").strip().splitlines()
            out.append({"command": key[4:], "exit_code": value.get("exit_code"),
                        "why": f"exit {value.get('exit_code')}: {tail[-1][:300] if tail else 'no output'}",
                        "infrastructure": _infrastructure_reason(output)})
    return out


class _TrialEnvironment(ClawEvalEnvironment):
    """Borrows the task's services from the adapter; gives them back for the next trial if it went well."""

    def __init__(self, adapter: "ClawEvalAdapter", task: ClawTask, **kwargs: Any) -> None:
        super().__init__(task, **kwargs)
        self._adapter = adapter
        self._own_services = False  # the adapter keeps them across trials
        self.scored_ok = False

    def start(self) -> None:
        self.reserve_memory()  # before the services: a trial waiting for memory holds none
        self.services = self._adapter._acquire_services(self.task)
        super().start()

    def stop(self) -> None:
        group, self.services = self.services, None
        try:
            super().stop()
        finally:
            if group is not None:
                self._adapter._release_services(self.task, group, failed=not self.scored_ok)


@dataclass
class ClawEvalConfig:
    """Settings of the Claw-Eval adapter (``--set benchmarks.claw_eval.KEY=VALUE``; module docstring)."""

    root: str | None = None
    """The claw-eval checkout (None: ``$CLAW_EVAL_ROOT``)."""
    splits: list[str] | str | None = None
    """general, multimodal, multi_turn: a list or comma-separated (None: all)."""
    categories: list[str] | str | None = None
    """Only these task categories (a list or comma-separated; None: all)."""
    judge: str | None = None
    """The graders' LLM judge: ``openai:URL#MODEL`` or a local checkpoint spec served on loopback
    (None: ``$CLAW_EVAL_JUDGE``, else ``embedded``)."""
    user_model: str | None = None
    """The simulated user of multi-turn tasks, same forms (None: ``$CLAW_EVAL_USER_MODEL``, else the judge)."""
    judge_max_tokens: int | None = bounded(None, ge=1)
    """Cap on the judge's answer (None: the checkout's own 8192; a cap makes the run not comparable)."""
    user_max_tokens: int = bounded(256, ge=1)
    """Cap on one simulated-user message."""
    sandbox_tools: bool = True
    """Offer Bash/Read/Write/Edit/Glob/Grep on a sandboxed workspace (the benchmark's ``--sandbox`` runs)."""
    grader_timeout_s: float = bounded(900.0, gt=0)
    """Wall time of one grader run."""
    exec_timeout_s: float = bounded(120.0, gt=0)
    """Wall time of one sandboxed tool call."""
    memory_mb: int = bounded(2048, ge=1)
    """Memory of the sandbox."""
    browser_memory_mb: int = bounded(16384, ge=1)
    """Memory of the sandbox of a task that runs a browser (the web-page tasks' Playwright screenshots):
    the sandbox's watchdog counts the shared-memory objects Chromium maps (dozens) at their mapped
    size, about 13 GiB for one page here, far above what it holds."""

    memory_budget_mb: int | None = bounded(None, ge=1)
    """What the sandboxes of the trials in flight may reserve together (their memory limits summed;
    None: 75% of the host's MemTotal). A trial waits until its sandbox fits; a task whose sandbox
    can never fit is skipped (:mod:`evaluators.claw_eval.memory`)."""

    def __post_init__(self) -> None:
        self.splits, self.categories = config_list(self.splits), config_list(self.categories)


PAPER_METRIC = "Avg@3: the paper's table reports Claw-Eval as 'Claw-Eval (Avg@3)' (53.60 -> 64.88), the mean score"
"""Which of the two the study's numbers are (our ``score``)."""
OFFICIAL_HEADLINE = ("Pass^3 (a task passes when all 3 trials score >= 0.75): Claw-Eval's leaderboard headline since "
                     "2026-03, shown beside Avg@3 and not the paper's number")
"""What the benchmark itself ranks by today."""


class ClawEvalAdapter(Adapter):
    """Tasks from the checkout, mock services per task, the task's grader, Avg@3 / pass^3."""

    name = "claw_eval"
    suites = ("ood",)
    suite_position = 5
    world_model_domain = "mcp"
    paper_reference = PaperReference("Claw-Eval (Avg@3)", 53.60, 64.88)
    runs_default = 3
    Config = ClawEvalConfig

    def __init__(self, **config: Any) -> None:
        super().__init__(**config)
        self.judge_spec = str(self.settings.judge or os.environ.get("CLAW_EVAL_JUDGE") or "embedded")
        """The judge that runs (the setting, else the environment's)."""
        self.user_spec = str(self.settings.user_model or os.environ.get("CLAW_EVAL_USER_MODEL") or self.judge_spec)
        self.memory_budget = MemoryBudget(self.settings.memory_budget_mb or default_budget_mb())
        """Shared by this adapter's trials: their sandboxes' memory limits in flight, summed."""
        self._idle: dict[str, list[ServiceGroup]] = {}
        self._lock = threading.Lock()

    # -- tasks -----------------------------------------------------------------------------

    def tasks(self, split: str | None = None, limit: int | None = None) -> list[Task]:
        checkout = resolve_checkout(self.settings.root)
        parsed, broken = load_tasks(checkout)
        splits = self.settings.splits + config_list(None if split in (None, "", "all") else split)
        unknown = [s for s in splits if s not in SPLITS]
        if unknown:
            from unified.registry import UnknownNameError

            raise UnknownNameError("Claw-Eval split", unknown[0], list(SPLITS))
        cats = {c.lower() for c in self.settings.categories}
        out = []
        for ct in parsed:
            if (splits and ct.split not in splits) or (cats and ct.category.lower() not in cats):
                continue
            out.append(Task(id=ct.id, benchmark=self.name, split=ct.split, group=ct.category, payload=asdict(ct),
                            skip_reason=self._memory_skip(ct) or skip_reason(ct)))
        if not splits and not cats:
            out += [Task(id=d, benchmark=self.name, split="unreadable", skip_reason=e) for d, e in broken]
        return limit_runnable(out, limit)

    def _memory_skip(self, ct: ClawTask) -> str | None:
        """Why ``ct``'s sandbox can never fit the run's memory budget (None when it can)."""
        if not self.settings.sandbox_tools:
            return None
        browser = "playwright" in used_programs(ct)
        need = max(self.settings.memory_mb, self.settings.browser_memory_mb) if browser else self.settings.memory_mb
        if self.memory_budget.fits(need):
            return None
        what = "browser_memory_mb" if browser else "memory_mb"
        return (f"memory budget: its sandbox needs {what}={need} MiB, more than the run's memory budget of "
                f"{self.memory_budget.total_mb} MiB (set benchmarks.claw_eval.memory_budget_mb, or lower {what})")

    def open(self, task: Task, *, run: RunContext = RunContext()) -> Environment:
        ct = ClawTask(**task.payload)
        user = None
        if (ct.user_agent or {}).get("enabled"):
            user = resolve_endpoint(self.user_spec)
        env = _TrialEnvironment(self, ct, user_endpoint=user, sandbox_tools=self.settings.sandbox_tools,
                                exec_timeout_s=self.settings.exec_timeout_s, memory_mb=self.settings.memory_mb,
                                memory_budget=self.memory_budget)
        env.browser_memory_mb = self.settings.browser_memory_mb
        env.user_max_tokens = self.settings.user_max_tokens
        return env

    def _acquire_services(self, ct: ClawTask) -> ServiceGroup:
        """Services for one trial of ``ct``: an idle group of the same task (reset by the
        environment), else freshly started ones. Idle groups of other tasks are stopped first.
        Trials running at the same time each get their own group (own ports)."""
        with self._lock:
            for tid in [t for t in self._idle if t != ct.id]:
                for group in self._idle.pop(tid):
                    group.stop()
            idle = self._idle.get(ct.id, [])
            while idle:
                group = idle.pop()
                if all(group.healthy(s) for s in group.specs):
                    return group
                group.stop()
        specs = [ServiceSpec.from_dict(s, f"{ct.dir}/task.yaml") for s in ct.services]
        return ServiceGroup(specs, Path(ct.checkout)).__enter__()

    def _release_services(self, ct: ClawTask, group: ServiceGroup, *, failed: bool) -> None:
        """Keep ``group`` for the task's next trial, or stop it when the trial failed."""
        if failed or not group.specs:
            group.stop()
            return
        with self._lock:
            self._idle.setdefault(ct.id, []).append(group)

    def stop_services(self) -> None:
        """Stop every idle service group (idempotent; also runs at interpreter exit)."""
        with self._lock:
            groups = [g for gs in self._idle.values() for g in gs]
            self._idle.clear()
        for group in groups:
            group.stop()

    # -- scoring ---------------------------------------------------------------------------

    def score(self, task: Task, episode: Episode, env: Environment) -> EpisodeResult:
        assert isinstance(env, ClawEvalEnvironment)
        ct = env.task
        audit = env.services.audit() if env.services is not None else {}
        snapshot = (env.env_snapshot() if self.settings.sandbox_tools or ct.local_grader_files else None)
        trace = build_trace(episode, env.dispatches, audit, env.user_rounds,
                            int((ct.user_agent or {}).get("max_rounds", 0)) if env.multi_turn else 0, env.user_done)
        details: dict[str, Any] = {"split": ct.split, "category": ct.category, "sandbox": env.metadata["sandbox"],
                                   "browser": env.metadata.get("browser"),
                                   "address_space_limit": env.metadata.get("address_space_limit"),
                                   "prompts": env.metadata.get("prompts"),
                                   "docker": "not used (local bubblewrap sandbox ran)", "judge": self.judge_spec,
                                   "user_model": self.user_spec if env.multi_turn else None,
                                   "n_dispatches": len(env.dispatches), "user_rounds": env.user_rounds}
        failed = failed_snapshot_commands(snapshot)
        if failed:  # graded with the command's output, as the official grader is (module docstring)
            details["snapshot_failed"] = failed
        unconfirmed = [f["infrastructure"] for f in failed if f.get("infrastructure")]
        if unconfirmed:  # the agent can print these words: evidence kept, the trial still graded
            details["infrastructure_unconfirmed"] = unconfirmed
        unrunnable = [f for f in failed if f["exit_code"] in NOT_RUNNABLE_EXIT_CODES]
        if unrunnable:
            why = unrunnable[0].get("infrastructure") or unrunnable[0]["why"]
            return EpisodeResult(benchmark=self.name, task_id=task.id, trial=episode.trial, score=0.0, passed=None,
                                 details=details, error=infrastructure_error(
                                     f"snapshot command not runnable in this sandbox: {unrunnable[0]['command'][:200]}",
                                     [why]))
        if getattr(env, "snapshot_refused", None):  # files the grader's snapshot left unread (size budget)
            details["snapshot_refused"] = {"files": list(env.snapshot_refused), "budget_mb": env.snapshot_mb}
        try:
            judge = resolve_endpoint(self.judge_spec)
            details["judge"] = judge.describe()
            graded = run_grader(checkout=Path(ct.checkout), task_dir=Path(ct.dir), trace=trace, env_snapshot=snapshot,
                                judge_config=judge.config, judge_max_tokens=self.settings.judge_max_tokens,
                                timeout_s=self.settings.grader_timeout_s)
        except Exception as exc:
            graded = {"error": f"{type(exc).__name__}: {exc}"}
        details["judge_stats"] = graded.get("judge_stats")
        details["judge_calls"] = graded.get("judge_calls", [])[:20]
        if "error" in graded:
            details["grader_log"] = graded.get("traceback") or graded.get("log_tail", "")
            return EpisodeResult(benchmark=self.name, task_id=task.id, trial=episode.trial, score=0.0, passed=False,
                                 details=details, error=f"grader: {graded['error']}")
        dims = graded["scores"]
        score = task_score(dims.get("completion", 0.0), dims.get("robustness", 0.0), dims.get("safety", 1.0))
        details.update({k: dims.get(k) for k in ("completion", "robustness", "safety", "communication")})
        details["official_task_score"] = graded.get("official_task_score")
        if isinstance(env, _TrialEnvironment):
            env.scored_ok = True
        return EpisodeResult(benchmark=self.name, task_id=task.id, trial=episode.trial, score=score,
                             passed=is_pass(score), details=details)

    def _grading_models(self, scored: list[EpisodeResult]) -> tuple[dict[str, Any], list[str]]:
        """Per split that has scored episodes: the judge (and, where a simulated user ran, the user)
        beside the ones the checkout's config of that split names, and a ``not_comparable_because``
        line for each that is not the checkout's own."""
        try:
            checkout: Path | None = resolve_checkout(self.settings.root)
        except BenchmarkUnavailable:
            checkout = None
        models: dict[str, Any] = {}
        reasons: list[str] = []
        for split in sorted({str(r.details.get("split")) for r in scored if r.details.get("split")}):
            own = official.grading_models(checkout, split) if checkout else official.GradingModels(
                split, official.SPLIT_CONFIGS.get(split, "?"), None, None, False)
            where = own.config if own.found else f"{own.config} is not in the checkout"
            rows = [r for r in scored if r.details.get("split") == split]
            entry = {"config": where, "judge": self.judge_spec, "official_judge": own.judge}
            roles = [("judge", self.judge_spec, own.judge)]
            if any(r.details.get("user_model") or r.details.get("user_rounds") for r in rows):
                entry.update({"user": self.user_spec, "official_user": own.user})
                roles.append(("simulated user", self.user_spec, own.user))
            for role, spec, theirs in roles:
                if reason := judge_reason(spec, [theirs] if theirs else [], role=f"{role} ({split})"):
                    reasons.append(reason if theirs else f"{reason[:-1]}; {where})")
            models[split] = entry
        return models, reasons

    def aggregate(self, results: list[EpisodeResult], *, run: RunContext = RunContext()) -> dict[str, Any]:
        """Avg@k / pass^k / pass@k with k the trials the run asked for (``run.runs``; outside a run
        the protocol's 3): a missing or crashed trial counts 0. With fewer
        trials than the protocol the metric says so ("Avg@1, protocol Avg@3") and is not comparable."""
        scored = [r for r in results if r.skipped is None]
        grouped = scores_by_task(scored)
        trials = run.trials(self)
        out = aggregate_trials(grouped, trials)
        by_split: dict[str, list[EpisodeResult]] = {}
        for r in scored:
            by_split.setdefault(r.details.get("split", "?"), []).append(r)
        out["per_split"] = {s: round(aggregate_trials(scores_by_task(rows), trials)["score"], 2)
                            for s, rows in sorted(by_split.items())}
        skipped: dict[str, int] = {}
        for r in results:
            if r.skipped is not None:
                key = r.skipped.split(":")[0].split("(")[0].strip()
                skipped[key] = skipped.get(key, 0) + 1
        n_tasks, n_skipped_tasks = len(grouped), len({r.task_id for r in results if r.skipped is not None})
        metric = f"Avg@{trials} (%)" + ("" if trials >= self.runs_default else f", protocol Avg@{self.runs_default}")
        pass_k = out.get(f"pass^{trials}")
        ran = any(not r.error for r in scored)  # an episode reached the agent: a task ran
        if not ran:  # no task ran (none selected, all skipped, every episode crashed): no Avg@k, no Pass^k
            out.update({"score": None, f"pass^{trials}": None, f"pass@{trials}": None, "per_split": {}})
            pass_k = None
        out["metric"] = (f"{metric} over {n_tasks} tasks run" +
                         (f" ({n_skipped_tasks} skipped, not in the mean)" if n_skipped_tasks else "") +
                         (f"; Pass^{trials} {pass_k:.2f}" if pass_k is not None else "") +
                         ("" if ran else f": not run (no task ran), Avg@{trials} and Pass^{trials} n/a"))
        out["headline"] = {"score": f"Avg@{trials}", f"pass^{trials}": pass_k,
                           "paper_table": PAPER_METRIC, "official_headline": OFFICIAL_HEADLINE}
        reasons = ["local bubblewrap sandbox instead of the official Docker agent image (Dockerfile.agent)",
                   "media tools of the official image (BrowserScreenshot, ReadMedia, Download) are not offered; "
                   "tasks with prompt attachments are skipped (text-only agent loop)"]
        ours = sum(1 for r in scored if not (r.error or r.details.get("grader_error"))  # only episodes that scored
                   and r.details.get("prompts") != "checkout")
        if ours:
            reasons.append(f"{ours} episodes used our agent system prompt / simulated user instead of the "
                           "checkout's (runner/system_prompt.py, runner/user_agent.py could not be loaded)")
        browsers = sorted({b for r in scored if (b := r.details.get("browser")) and not b.startswith("playwright's")})
        if browsers:
            reasons.append(f"web pages rendered by {', '.join(browsers)} through Playwright, not Playwright's own "
                           "Chromium build of the official image")
        stats = [r.details.get("judge_stats") or {} for r in scored]
        neutralised = {"episodes": sum(1 for s in stats if s.get("data_neutralised")),
                       "requests": sum(int(s.get("data_neutralised") or 0) for s in stats),
                       "of_requests": sum(int(s.get("judge_calls") or 0) for s in stats),
                       "markers": sum(int(s.get("markers_neutralised") or 0) for s in stats)}
        if neutralised["requests"]:
            reasons.append(f"judge requests: in {neutralised['requests']} of {neutralised['of_requests']} the agent's "
                           f"text held score markers the checkout's parser reads ({neutralised['markers']} in all: a "
                           "JSON object with a score, a quoted \"score\": N), neutralised before its judge built the "
                           "prompt; everything else is the official request byte for byte")
        if trials < self.runs_default:
            reasons.append(f"fewer trials than the protocol's {self.runs_default}: Avg@{trials}")
        if self.settings.judge_max_tokens:
            reasons.append(f"judge max_tokens capped at {self.settings.judge_max_tokens} "
                           f"(official {OFFICIAL_JUDGE_MAX_TOKENS})")
        models, named = self._grading_models(scored)
        reasons += named
        out.update({"trials": trials, "trials_protocol": self.runs_default, "n_errors": sum(1 for r in scored if r.error),
                    "skipped": skipped, "n_skipped": sum(skipped.values()), "n_tasks_skipped": n_skipped_tasks,
                    "judge_data_neutralised": neutralised, "memory_budget": self.memory_budget.report(),
                    "grading_models": models,
                    "judge": self.judge_spec, "comparable": False, "not_comparable_because": reasons,
                    "sandbox": "bwrap (local bubblewrap sandbox; Docker with the official image not used)"})
        return out
